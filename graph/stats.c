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
