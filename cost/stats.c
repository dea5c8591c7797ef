/* Summary statistics of repeated timings and the least-squares link fit (latency + bytes/bw). */
#include <math.h>
#include <stdlib.h>

#include "placesim/cost.h"

void psim_timing_stats(double *samples, int64_t n, PsimTimingStats *out)
{
    *out = (PsimTimingStats){.n = n};
    if (n <= 0)
        return;
    out->median_us = psim_stats_median(samples, n);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += samples[i];
    out->mean_us = sum / (double)n;
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (samples[i] - out->mean_us) * (samples[i] - out->mean_us);
    out->stddev_us = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    out->min_us = samples[0];
}

/* Weighted least squares with weights 1/t^2 minimizes the relative error, so that the small
 * transfers (which fix the latency) count as much as the large ones (which fix the bandwidth).
 * Sizes are scaled to MB for conditioning. */
gboolean psim_link_fit(const double *bytes, const double *us, int n, PsimLink *out, double *rms_rel)
{
    double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
    int used = 0;
    double x0 = -1;
    gboolean two_sizes = FALSE;
    for (int i = 0; i < n; i++) {
        if (!(us[i] > 0) || !(bytes[i] >= 0) || !isfinite(us[i]))
            continue;
        double x = bytes[i] / 1e6, t = us[i], w = 1 / (t * t);
        if (x0 < 0)
            x0 = x;
        else if (x != x0)
            two_sizes = TRUE;
        sw += w;
        swx += w * x;
        swxx += w * x * x;
        swt += w * t;
        swxt += w * x * t;
        used++;
    }
    if (used < 2 || !two_sizes)
        return FALSE;
    double det = sw * swxx - swx * swx;
    double a = (swt * swxx - swx * swxt) / det, b = (sw * swxt - swx * swt) / det;
    if (a < 0) {
        a = 0;
        b = swxt / swxx;
    }
    if (b <= 0) {
        b = 0;
        a = swt / sw;
    }
    /* b is microseconds per MB: 1e6 bytes per b us is 1e12 / b bytes/s, i.e. 1e3 / b GB/s. */
    out->latency_us = a;
    out->bandwidth_GBps = b > 0 ? 1e3 / b : 0;
    out->independent = FALSE;
    if (rms_rel) {
        double ss = 0;
        for (int i = 0; i < n; i++) {
            if (!(us[i] > 0) || !isfinite(us[i]))
                continue;
            double r = (a + b * bytes[i] / 1e6 - us[i]) / us[i];
            ss += r * r;
        }
        *rms_rel = sqrt(ss / used);
    }
    return TRUE;
}
