/* Which plan to choose, from predictions alone: the lowest simulated step, except that plans
 * closer to it than the simulator's own error bound are a tie, and a tie goes to the simpler
 * plan (fewer devices, then fewer transfers). `place --algo all` and `study` choose so. */
#include <math.h>

#include "tools/cli.h"

int psim_cli_choose(const PsimCliCandidate *c, int n, double tie_pct, gboolean *simpler)
{
    int fastest = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(c[i].sim_us) && (fastest < 0 || c[i].sim_us < c[fastest].sim_us))
            fastest = i;
    if (simpler)
        *simpler = FALSE;
    if (fastest < 0)
        return -1;
    double limit = c[fastest].sim_us * (1 + tie_pct / 100);
    int pick = fastest;
    for (int i = 0; i < n; i++) {
        if (!isfinite(c[i].sim_us) || c[i].sim_us > limit)
            continue;
        const PsimCliCandidate *a = &c[i], *b = &c[pick];
        if (a->devices < b->devices ||
            (a->devices == b->devices &&
             (a->transfers < b->transfers || (a->transfers == b->transfers && a->sim_us < b->sim_us))))
            pick = i;
    }
    if (simpler)
        *simpler = pick != fastest;
    return pick;
}
