/* Calibration of each device's analytic rates: a GEMM through the device's own MatMul kernel
 * (GFLOP/s), a large copy (GB/s, bytes read plus bytes written), and the launch cost (the time
 * of a one-element Relu: what a node costs when it does no work). */
#include <stdio.h>

#include "profiler/profiler-private.h"

#define GEMM_N 512
#define COPY_BYTES (64u << 20)

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

static gboolean put(PsimProfiler *p, const PsimDevice *d, const char *kind, double v,
                    const char *detail, PsimProfileReport *report, GError **error)
{
    if (!psim_cost_db_calibration_put(p->db, d, kind, v, detail, error))
        return FALSE;
    report->calibrations++;
    return TRUE;
}

static gboolean calibrate_cpu(PsimProfiler *p, int32_t dev, PsimProfileReport *report, GError **error)
{
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
        if (!put(p, d, "gemm_gflops", gflops, detail, report, error))
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
    if (!put(p, d, "copy_GBps", 2.0 * COPY_BYTES / (st.median_us * 1e3), detail, report, error))
        return FALSE;

    const int64_t one[1] = {1};
    const int64_t *dims1[1] = {one};
    g_autoptr(PsimGraph) relu = psim__profiler_one_node("Relu", 1, 1, dims1, one, error);
    if (!relu)
        return FALSE;
    if (psim_profiler_measure_node(p, relu, psim_graph_node_find(relu, "y"), dev, &st, &err)) {
        g_autofree char *ld = g_strdup_printf("Relu kernel on 1 float32, median of %" G_GINT64_FORMAT, st.n);
        if (!put(p, d, "launch_us", st.median_us, ld, report, error))
            return FALSE;
    } else {
        fprintf(stderr, "placesim: warning: %s: launch cost not calibrated: %s\n", d->short_name, err->message);
        g_clear_error(&err);
    }
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
        if (d->kind == PSIM_DEVICE_TYPE_CPU && p->workers[i]) {
            if (!calibrate_cpu(p, i, report, error))
                return FALSE;
        }
#ifdef PSIM_HAVE_CUDA
        else if (d->kind == PSIM_DEVICE_TYPE_GPU && !psim__cuda_calibrate(p, i, report, error))
            return FALSE;
#endif
        psim__profiler_progress(p, "calibrate", i + 1, p->n_devices, d->short_name);
    }
    return TRUE;
}
