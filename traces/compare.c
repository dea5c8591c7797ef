/* Simulated against measured timelines: step-time error and per-op errors, matched by node
 * name (both timelines come from one Plan, so names agree). */
#include <math.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/timeline.h"

static int cmp_row(const void *a, const void *b)
{
    const PsimCompareRow *x = a, *y = b;
    double ex = fabs(x->sim_us - x->run_us), ey = fabs(y->sim_us - y->run_us);
    if (ex != ey)
        return ex < ey ? 1 : -1;
    return strcmp(x->name, y->name);
}

gboolean psim_timeline_compare(const PsimTimeline *sim, const PsimTimeline *run, PsimCompare *out,
                               GError **error)
{
    memset(out, 0, sizeof *out);
    if (run->step_time_us <= 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "the measured timeline has no step time");
        return FALSE;
    }
    g_autoptr(GHashTable) by_name = g_hash_table_new(g_str_hash, g_str_equal);
    for (guint i = 0; i < run->ops->len; i++) {
        PsimTimelineOp *o = &g_array_index(run->ops, PsimTimelineOp, i);
        g_hash_table_insert(by_name, (gpointer)o->name, o);
    }
    out->rows = g_new(PsimCompareRow, sim->ops->len + 1);
    g_autofree double *errs = g_new(double, sim->ops->len + 1);
    int32_t n_err = 0;
    for (guint i = 0; i < sim->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(sim->ops, PsimTimelineOp, i);
        const PsimTimelineOp *r = g_hash_table_lookup(by_name, o->name);
        out->sum_sim_us += o->end - o->start;
        if (!r) {
            out->n_only_sim++;
            continue;
        }
        g_hash_table_remove(by_name, o->name);
        PsimCompareRow row = {o->name, o->op, o->device, o->end - o->start, r->end - r->start};
        out->rows[out->n_rows++] = row;
        if (row.run_us >= 10)
            errs[n_err++] = fabs(row.sim_us - row.run_us) / row.run_us * 100;
    }
    out->n_matched = out->n_rows;
    out->n_only_run = (int32_t)g_hash_table_size(by_name);
    for (guint i = 0; i < run->ops->len; i++) {
        PsimTimelineOp *o = &g_array_index(run->ops, PsimTimelineOp, i);
        out->sum_run_us += o->end - o->start;
    }
    qsort(out->rows, (size_t)out->n_rows, sizeof *out->rows, cmp_row);
    if (n_err) {
        out->median_abs_op_error_pct = psim_stats_median(errs, n_err);
    }
    out->sim_step_us = sim->step_time_us;
    out->run_step_us = run->step_time_us;
    out->error_pct = 100 * (sim->step_time_us - run->step_time_us) / run->step_time_us;
    return TRUE;
}

void psim_compare_clear(PsimCompare *c)
{
    g_free(c->rows);
    memset(c, 0, sizeof *c);
}
