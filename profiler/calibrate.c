/* Calibration of each device's analytic rates, by its class's calibrate hook (the CPU's in
 * devices/cpu/calibrate.c, the GPU's in devices/cuda/profile.c), and the helpers they share. */
#include "profiler/profiler-private.h"

PsimGraph *psim__profiler_one_node(const char *op, int32_t n_in, int32_t rank, const int64_t *const *in_dims,
                                   const int64_t *out_dims, GError **error)
{
    g_autoptr(PsimGraph) g = psim_graph_new("calibration");
    PsimNode *y = psim_graph_node_add(g, "y", op, error);
    if (!y)
        return NULL;
    for (int32_t i = 0; i < n_in; i++) {
        g_autofree char *name = g_strdup_printf("x%d", i);
        PsimNode *x = psim_graph_node_add(g, name, "Placeholder", error);
        if (!x)
            return NULL;
        psim_graph_node_outputs_set(g, x, 1);
        psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, rank, in_dims[i]);
        psim_graph_node_input_add(g, y, (PsimPort){.node = x->id, .index = 0});
    }
    psim_graph_node_outputs_set(g, y, 1);
    psim_graph_output_set(g, y, 0, PSIM_DTYPE_FLOAT32, rank, out_dims);
    if (!psim_graph_finalize(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

gboolean psim__profiler_calibration_put(PsimProfiler *p, const PsimDevice *d, const char *kind,
                                        double v, const char *detail,
                                        PsimProfileReport *report, GError **error)
{
    if (!psim_cost_db_calibration_put(p->db, d, kind, v, detail, error))
        return FALSE;
    report->calibrations++;
    return TRUE;
}

gboolean psim_profiler_calibrate(PsimProfiler *p, PsimProfileReport *report, GError **error)
{
    PsimProfileReport dummy = {0};
    if (!report)
        report = &dummy;
    g_return_val_if_fail(p->db, FALSE);
    if (p->t0_us == 0)
        p->t0_us = psim_exec_now_us();
    for (int32_t i = 0; i < p->n_devices; i++) {
        const PsimDevice *d = psim_cluster_device(p->cluster, i);
        if (d->cls && d->cls->calibrate && !d->cls->calibrate(p, i, report, error))
            return FALSE;
        psim__profiler_progress(p, "calibrate", i + 1, p->n_devices, d->short_name);
    }
    return TRUE;
}
