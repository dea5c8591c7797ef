/* Small statistics over doubles that every module needs (medians of step times, of timing
 * samples, of errors): one comparator and one median, instead of a copy in each file. */
#include <math.h>
#include <stdlib.h>

#include "placesim/graph.h"

int psim_stats_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void psim_stats_sort(double *v, int64_t n)
{
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, psim_stats_cmp_double);
}

double psim_stats_median(double *v, int64_t n)
{
    if (n <= 0)
        return NAN;
    psim_stats_sort(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double psim_stats_trimmed_mean(double *v, int64_t n, double frac)
{
    if (n <= 0)
        return NAN;
    psim_stats_sort(v, n);
    int64_t k = (int64_t)floor((double)n * CLAMP(frac, 0.0, 0.5));
    if (n - 2 * k < 1)
        return psim_stats_median(v, n);
    double s = 0;
    for (int64_t i = k; i < n - k; i++)
        s += v[i];
    return s / (double)(n - 2 * k);
}
