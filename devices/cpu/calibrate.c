/* The CPU class's calibration (its calibrate hook): a GEMM through the device's own MatMul
 * kernel (GFLOP/s), a large copy (GB/s, bytes read plus bytes written), and the launch cost (the
 * time of a one-element Relu: what a node costs when it does no work). */
#include <stdio.h>

#include "devices/cpu/cpu-class.h"
#include "profiler/profiler-private.h"

#define GEMM_N 512
#define COPY_BYTES (64u << 20)

gboolean psim__cpu_calibrate(PsimProfiler *p, int32_t dev, PsimProfileReport *report, GError **error)
{
    if (!p->workers[dev])
        return TRUE;
    const PsimDevice *d = psim_cluster_device(p->cluster, dev);
    PsimTimingStats st;
    GError *err = NULL;

    const int64_t sq[2] = {GEMM_N, GEMM_N};
    const int64_t *dims2[2] = {sq, sq};
    g_autoptr(PsimGraph) gemm = psim__profiler_one_node("MatMul", 2, 2, dims2, sq, error);
    if (!gemm)
        return FALSE;
    if (psim_profiler_measure_node(p, gemm, psim_graph_node_find(gemm, "y"), dev, &st, &err)) {
        double gflops = 2.0 * GEMM_N * GEMM_N * GEMM_N / (st.median_us * 1e3);
        g_autofree char *detail = g_strdup_printf("MatMul kernel %dx%dx%d float32, median of %" G_GINT64_FORMAT,
                                                  GEMM_N, GEMM_N, GEMM_N, st.n);
        if (!psim__profiler_calibration_put(p, d, "gemm_gflops", gflops, detail, report, error))
            return FALSE;
    } else {
        fprintf(stderr, "placesim: warning: %s: GEMM rate not calibrated: %s\n", d->short_name, err->message);
        g_clear_error(&err);
    }

    void *a = psim__profiler_touch(p, dev, COPY_BYTES, error);
    void *b = a ? psim__profiler_touch(p, dev, COPY_BYTES, error) : NULL;
    gboolean ok = b && psim__profiler_copy(p, dev, b, a, COPY_BYTES, p->opts.budget_ms, &st, error);
    psim__profiler_untouch(p, dev, a);
    psim__profiler_untouch(p, dev, b);
    if (!ok)
        return FALSE;
    g_autofree char *detail = g_strdup_printf("memcpy of %u MiB, median of %" G_GINT64_FORMAT,
                                              COPY_BYTES >> 20, st.n);
    if (!psim__profiler_calibration_put(p, d, "copy_GBps", 2.0 * COPY_BYTES / (st.median_us * 1e3), detail, report, error))
        return FALSE;

    double cold[PSIM_COLD_N];
    PsimColdSamples cs;
    psim__cold_samples_init(&cs);
    ok = psim__profiler_cold(p, dev, NULL, 7, 15, &cs, error);
    if (ok)
        psim__cold_curve(&cs, cold);
    psim__cold_samples_clear(&cs);
    if (!ok)
        return FALSE;
    for (int k = 0; k < PSIM_COLD_N; k++) {
        g_autofree char *cd = g_strdup_printf("a 1 MiB copy into a block after %" G_GUINT64_FORMAT
                                              " MiB of other writes less into one just written, median of 7 "
                                              "less of 15, per MiB",
                                              psim_cold_distance_bytes[k] >> 20);
        if (!psim__profiler_calibration_put(p, d, psim_cold_kinds[k], cold[k], cd, report, error))
            return FALSE;
    }

    const int64_t one[1] = {1};
    const int64_t *dims1[1] = {one};
    g_autoptr(PsimGraph) relu = psim__profiler_one_node("Relu", 1, 1, dims1, one, error);
    if (!relu)
        return FALSE;
    if (psim_profiler_measure_node(p, relu, psim_graph_node_find(relu, "y"), dev, &st, &err)) {
        g_autofree char *ld = g_strdup_printf("Relu kernel on 1 float32, median of %" G_GINT64_FORMAT, st.n);
        if (!psim__profiler_calibration_put(p, d, "launch_us", st.median_us, ld, report, error))
            return FALSE;
    } else {
        fprintf(stderr, "placesim: warning: %s: launch cost not calibrated: %s\n", d->short_name, err->message);
        g_clear_error(&err);
    }
    return TRUE;
}

