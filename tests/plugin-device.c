/* An example device-class plug-in: the device type "NPU", emulated on the host. Its worker is a
 * host thread (thread_init counts itself), and its kernels are the CPU kernels under the type
 * "NPU", each run counted, so that a test can see a graph placed on, simulated for and run on a
 * kind of device placesim was built without. Built as a MODULE library; psim_plugin_load runs
 * psim_plugin_init. It links against nothing: the host program exports the placesim API. */
#include <gmodule.h>
#include <stdatomic.h>

#include "placesim/device.h"
#include "placesim/exec.h"
#include "placesim/kernels.h"

G_MODULE_EXPORT atomic_long npu_kernel_runs;
G_MODULE_EXPORT atomic_long npu_threads;

static gboolean npu_thread_init(PsimWorker *w, GError **error)
{
    (void)w;
    (void)error;
    atomic_fetch_add(&npu_threads, 1);
    return TRUE;
}

static const PsimWorkerClass npu_worker = {
    .description = "a host thread standing in for an NPU queue",
    .thread_init = npu_thread_init,
};

/* The CPU kernel a node would get: an NPU kernel does what it does. */
static const PsimKernelDef *cpu_def(const PsimGraph *g, const PsimNode *n)
{
    return psim_kernel_for_node(g, n, "CPU");
}

static size_t npu_workspace(const PsimGraph *g, const PsimNode *n)
{
    const PsimKernelDef *k = cpu_def(g, n);
    return k && k->workspace ? k->workspace(g, n) : 0;
}

static gboolean npu_prepare(const PsimGraph *g, const PsimNode *n, void *device, void **state,
                            GError **error)
{
    const PsimKernelDef *k = cpu_def(g, n);
    return k && k->prepare ? k->prepare(g, n, device, state, error) : TRUE;
}

static gboolean npu_run(PsimKernelCtx *ctx, GError **error)
{
    const PsimKernelDef *k = cpu_def(ctx->graph, ctx->node);
    if (!k) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED, "node '%s': no NPU kernel for %s",
                    ctx->node->name, ctx->node->op);
        return FALSE;
    }
    atomic_fetch_add(&npu_kernel_runs, 1);
    return k->run(ctx, error);
}

/* Every CPU kernel again under "NPU"; release is the CPU kernel's own (state is its). */
static void npu_register_kernels(void)
{
    int32_t n;
    const PsimKernelDef **all = psim_kernel_list(&n);
    PsimKernelDef *defs = g_new0(PsimKernelDef, n + 1); /* lives as long as the process */
    for (int32_t i = 0; i < n; i++) {
        if (g_strcmp0(all[i]->device_type, "CPU"))
            continue;
        defs[i] = *all[i];
        defs[i].device_type = "NPU";
        defs[i].async = FALSE;
        defs[i].workspace = all[i]->workspace ? npu_workspace : NULL;
        defs[i].prepare = all[i]->prepare ? npu_prepare : NULL;
        defs[i].run = npu_run;
        psim_kernel_register(&defs[i]);
    }
    g_free(all);
}

static const PsimDeviceClass npu_class = {
    .type = "NPU",
    .description = "an NPU emulated on the host (example plug-in)",
    .peak_gflops = 123,
    .mem_bw_GBps = 45,
    .launch_us = 6,
    .worker = &npu_worker,
    .register_kernels = npu_register_kernels,
};

G_MODULE_EXPORT gboolean psim_plugin_init(GError **error);

G_MODULE_EXPORT gboolean psim_plugin_init(GError **error)
{
    return psim_device_class_register(&npu_class, error);
}
