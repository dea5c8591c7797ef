/* Device classes (include/placesim/device.h): the built-in table, and a class added by a
 * plug-in (tests/plugin-device.c, "NPU" emulated on the host) that the cluster, the cost model,
 * the placers, the simulator and the executor all take without a line changed elsewhere. */
#include <gmodule.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "placesim/cost.h"
#include "placesim/device.h"
#include "placesim/exec.h"
#include "placesim/sim.h"

static void test_builtin(void)
{
    int32_t n, n_builtin;
    const PsimDeviceClass *const *all = psim_device_classes(&n, &n_builtin);
    g_assert_cmpint(n_builtin, >=, 2);
    g_assert_cmpint(n, >=, n_builtin);
    const PsimDeviceClass *cpu = psim_device_class_find("cpu"),
                          *gpu = psim_device_class_find("GPU");
    g_assert_nonnull(cpu);
    g_assert_nonnull(gpu);
    g_assert_true(all[0] == cpu);
    g_assert_true(psim_device_class_host() == cpu);
    g_assert_true(cpu->host && !cpu->streams && cpu->worker);
    g_assert_true(!gpu->host && gpu->streams);
    g_assert_null(psim_device_class_find("P"));
    g_assert_null(psim_device_class_find(NULL));

    /* Devices take their class, and their nominal rates from it, when added to a cluster. */
    g_autoptr(PsimCluster) c = psim_cluster_new();
    g_assert_cmpint(psim_cluster_device_add(c, "CPU:0", "CPU", NULL), ==, 0);
    g_assert_cmpint(psim_cluster_device_add(c, "GPU:3", "GPU", NULL), ==, 1);
    g_assert_cmpint(psim_cluster_device_add(c, "P:0", "P", NULL), ==, 2);
    const PsimDevice *d0 = psim_cluster_device(c, 0), *d1 = psim_cluster_device(c, 1),
                     *d2 = psim_cluster_device(c, 2);
    g_assert_true(d0->cls == cpu);
    g_assert_cmpfloat(d0->peak_gflops, ==, cpu->peak_gflops);
    g_assert_cmpfloat(d0->launch_us, ==, cpu->launch_us);
    g_assert_true(d1->cls == gpu);
    g_assert_cmpfloat(d1->mem_bw_GBps, ==, gpu->mem_bw_GBps);
    g_assert_cmpint(d1->gpu_ordinal, ==, -1); /* set by detection or a cluster file */
    g_assert_null(d2->cls);
    g_assert_cmpint(d2->gpu_ordinal, ==, -1);
    g_assert_cmpfloat(d2->launch_us, ==, 0);
}

static const char *const want_symbols[] = {"npu_kernel_runs", "npu_threads"};

static void test_plugin_class(void)
{
    const char *build = g_getenv("PSIM_BUILD");
    if (!build) {
        g_test_skip("PSIM_BUILD is not set");
        return;
    }
    g_autofree char *path = g_build_filename(build, "plugin-device.so", NULL);
    GError *err = NULL;
    g_assert_null(psim_device_class_find("NPU"));
    g_assert_true(psim_plugin_load(path, &err));
    g_assert_no_error(err);
    const PsimDeviceClass *npu = psim_device_class_find("npu");
    g_assert_nonnull(npu);
    int32_t n, n_builtin;
    psim_device_classes(&n, &n_builtin);
    g_assert_cmpint(n, ==, n_builtin + 1);
    /* A second class of the same type is refused. */
    g_assert_false(psim_device_class_register(npu, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);
    /* The plug-in's counters. */
    GModule *mod = g_module_open(path, G_MODULE_BIND_LOCAL);
    g_assert_nonnull(mod);
    atomic_long *runs = NULL, *threads = NULL;
    g_assert_true(g_module_symbol(mod, want_symbols[0], (gpointer *)&runs));
    g_assert_true(g_module_symbol(mod, want_symbols[1], (gpointer *)&threads));

    /* This machine's first CPU and an NPU. */
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    int32_t id =
        psim_cluster_device_add(c, "/job:localhost/replica:0/task:0/device:NPU:0", "NPU", &err);
    g_assert_no_error(err);
    const PsimDevice *dn = psim_cluster_device(c, id);
    g_assert_true(dn->cls == npu);
    g_assert_cmpfloat(dn->peak_gflops, ==, 123);
    g_assert_cmpfloat(dn->launch_us, ==, 6);

    g_autoptr(PsimGraph) g = psim_zoo_make("cnn", &err);
    g_assert_no_error(err);
    /* The cost model prices the NPU's kernels (analytic, from the class's rates). */
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    const PsimNode *conv = NULL;
    for (int32_t v = 0; v < psim_graph_n_nodes(g) && !conv; v++)
        if (!strcmp(psim_graph_node(g, v)->op, "Conv"))
            conv = psim_graph_node(g, v);
    g_assert_nonnull(conv);
    PsimCostSource src;
    double t_npu = psim_cost_node(m, g, conv, id, &src);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
    g_assert_true(isfinite(t_npu) && t_npu > dn->launch_us);

    /* Placed round-robin over CPU and NPU: the plan uses both, simulates, and runs to the
     * single CPU device's output bit for bit, the NPU's share on its own kernels. */
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlacement) pl = psim_place(ctx, "round-robin", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = psim_plan_build(ctx, pl, &err);
    g_assert_no_error(err);
    g_assert_cmpint(plan->n_devices, ==, 2);
    g_assert_cmpint(plan->n_transfers, >, 0);
    PsimSimResult res = {0};
    g_assert_true(psim_sim_run(plan, m, NULL, &res, NULL, &err));
    g_assert_no_error(err);
    g_assert_cmpfloat(res.step_time_us, >, 0);
    psim_sim_result_clear(&res);

    const PsimNode *in = psim_graph_node(g, psim_graph_input(g, 0));
    g_autoptr(PsimTensor) x =
        psim_tensor_new(in->outputs[0].dtype, in->outputs[0].rank, in->outputs[0].dims, &err);
    g_assert_no_error(err);
    for (int64_t i = 0; i < x->n_elems; i++)
        ((float *)x->data)[i] = (float)(i % 97) / 97.0f;
    g_autofree char *fetch = psim_port_to_string(g, psim_graph_output(g, 0));
    const char *feeds[] = {in->name}, *fetches[] = {fetch};

    g_autoptr(PsimSession) single = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    PsimTensor *want = NULL;
    g_assert_true(psim_session_run(single, 1, feeds, &x, 1, fetches, &want, &err));
    g_assert_no_error(err);
    long runs_before = atomic_load(runs);
    g_assert_cmpint(runs_before, ==, 0); /* the single session ran on the CPU */

    g_autoptr(PsimPlanSession) s =
        psim_plan_session_new(g, c, NULL, "round-robin", NULL, FALSE, &err);
    g_assert_no_error(err);
    for (int step = 0; step < 2; step++) {
        PsimTensor *got = NULL;
        g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fetches, &got, &err));
        g_assert_no_error(err);
        g_assert_cmpint(got->nbytes, ==, want->nbytes);
        g_assert_true(memcmp(got->data, want->data, want->nbytes) == 0);
        psim_tensor_unref(got);
    }
    g_assert_cmpint(atomic_load(threads), >=, 1);
    g_assert_cmpint(atomic_load(runs), >, 0);
    psim_tensor_unref(want);
    g_module_close(mod);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/devices/builtin", test_builtin);
    g_test_add_func("/devices/plugin-class", test_plugin_class);
    return g_test_run();
}
