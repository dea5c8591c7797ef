/* Tests of the cost model: resolution order (annotation, measured row, estimate), calibrated
 * rates in the estimate, signatures shared by identical nodes, and the warning for rows of
 * another device fingerprint. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "placesim/cost.h"
#include "placesim/formats.h"
#include "placesim/plan.h"

static char *tmp_dir;

static const char *graph_json =
    "{\"format\": \"placesim.graph/1\", \"name\": \"tiny\", \"nodes\": ["
    " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},"
    " {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5}, \"outputs\": [{\"dtype\": \"float32\", \"shape\": [64, 64]}]},"
    " {\"name\": \"y\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},"
    " {\"name\": \"x2\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [16, 64]}]},"
    " {\"name\": \"q\", \"op\": \"MatMul\", \"inputs\": [\"x2:0\", \"w:0\"]},"
    " {\"name\": \"y2\", \"op\": \"MatMul\", \"inputs\": [\"y:0\", \"w:0\"]},"
    " {\"name\": \"z\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"cost_us\": {\"CPU\": 7}},"
    " {\"name\": \"t\", \"op\": \"Task\", \"inputs\": [\"y:0\"], \"outputs\": [{\"bytes\": 8}], \"cost_us\": {\"P1\": 3}}"
    "]}";

static PsimGraph *tiny(void)
{
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("tiny.json", PSIM_FORMAT_JSON, (const guint8 *)graph_json,
                                        strlen(graph_json), NULL, &err);
    g_assert_no_error(err);
    return g;
}

static PsimCluster *one_cpu(const char *model)
{
    PsimCluster *c = psim_cluster_new();
    int32_t i = psim_cluster_device_add(c, "CPU:0", "CPU", NULL);
    PsimDevice *d = psim_cluster_device(c, i);
    d->description = g_strdup(model);
    d->peak_gflops = 10;
    d->mem_bw_GBps = 1;
    d->launch_us = 2;
    return c;
}

static void test_resolution(void)
{
    g_autoptr(PsimGraph) g = tiny();
    g_autoptr(PsimCluster) c = one_cpu("cpu A");
    g_autofree char *path = g_build_filename(tmp_dir, "model.db", NULL);
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    PsimNode *y = psim_graph_node_find(g, "y"), *y2 = psim_graph_node_find(g, "y2");
    PsimNode *z = psim_graph_node_find(g, "z"), *t = psim_graph_node_find(g, "t");
    PsimNode *w = psim_graph_node_find(g, "w");

    /* Identical nodes share a signature; a different input shape does not. */
    g_autofree char *sy = psim_cost_signature(g, y), *sy2 = psim_cost_signature(g, y2);
    g_autofree char *sz = psim_cost_signature(g, z);
    g_assert_cmpstr(sy, ==, sz);
    g_assert_cmpstr(sy, ==, sy2); /* y: [32,64] x [64,64]; y2 the same shapes */
    g_autofree char *sq = psim_cost_signature(g, psim_graph_node_find(g, "q"));
    g_assert_cmpstr(sy, !=, sq);
    g_assert_true(g_str_has_prefix(sy, "MatMul("));

    {
        /* Without rows: the estimate with the cluster's rates. 2*32*64*64 flops at 10 GFLOP/s
         * = 26.2 us; bytes (8 KiB + 16 KiB read, 8 KiB written) at 1 GB/s = 32.8 us. */
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        PsimOpCount cnt;
        psim_graph_node_count(g, y, &cnt);
        double expect = MAX(cnt.flops / 1e4, (cnt.bytes_read + cnt.bytes_written) / 1e3) + 2;
        g_assert_cmpfloat_with_epsilon(psim_cost_node(m, g, y, 0, &src), expect, 1e-9);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
        g_assert_cmpfloat(psim_cost_node(m, g, z, 0, &src), ==, 7);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ANNOTATION);
        g_assert_cmpfloat(psim_cost_node(m, g, w, 0, &src), ==, 0);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_FREE);
        g_assert_true(isinf(psim_cost_node(m, g, t, 0, &src)));
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_NONE);
        gboolean cal = TRUE;
        psim_cost_model_device_rates(m, 0, NULL, NULL, NULL, &cal);
        g_assert_false(cal);
    }

    /* Calibration rows change the estimate's rates. */
    PsimDevice *d = psim_cluster_device(c, 0);
    g_assert_true(psim_cost_db_calibration_put(db, d, "gemm_gflops", 100, "test", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d, "copy_GBps", 100, "test", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d, "launch_us", 1, "test", &err));
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        PsimOpCount cnt;
        psim_graph_node_count(g, y, &cnt);
        double expect = MAX(cnt.flops / 1e5, (cnt.bytes_read + cnt.bytes_written) / 1e5) + 1;
        g_assert_cmpfloat_with_epsilon(psim_cost_node(m, g, y, 0, &src), expect, 1e-9);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
        double peak, bw, launch;
        gboolean cal;
        psim_cost_model_device_rates(m, 0, &peak, &bw, &launch, &cal);
        g_assert_true(cal);
        g_assert_cmpfloat(peak, ==, 100);
        g_assert_cmpfloat(launch, ==, 1);
    }

    /* A measured row answers for every node of that signature; annotations still win. */
    PsimTimingStats s = {.n = 9, .mean_us = 51, .stddev_us = 1, .min_us = 49, .median_us = 50};
    g_assert_true(psim_cost_db_kernel_put(db, d, sy, "MatMul", "monotonic", &s, &err));
    g_assert_no_error(err);
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, &src), ==, 50);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        g_assert_cmpfloat(psim_cost_node(m, g, y2, 0, &src), ==, 50);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        g_assert_cmpfloat(psim_cost_node(m, g, z, 0, &src), ==, 7);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ANNOTATION);
        g_autofree double *table = psim_cost_table(m, g, &err);
        g_assert_cmpfloat(table[y->id], ==, 50);
        g_assert_true(isinf(table[t->id]));
        /* A row without its profile's speed reference is not scaled by a current one. */
        PsimSpeedRef now = {200, 100};
        psim_cost_model_set_speed_ref(m, 0, &now);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, &src), ==, 50);
    }

    /* A row with its profile's speed reference: scaled to the device's current reference by the
     * row's memory weight; unchanged without a current one. */
    PsimSpeedRef then = {100, 100};
    double mw = psim_cost_mem_weight(g, y, 10, 1);
    g_assert_cmpfloat(mw, >, 0.5); /* 32.8 us of bytes against 26.2 us of FLOPs */
    g_assert_cmpfloat(mw, <, 0.6);
    g_assert_true(psim_cost_db_kernel_put_ref(db, d, sy, "MatMul", "monotonic", "warm", &then, mw, &s, &err));
    g_assert_no_error(err);
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, NULL), ==, 50);
        PsimSpeedRef now = {110, 150}; /* compute 10%, memory 50% slower */
        psim_cost_model_set_speed_ref(m, 0, &now);
        g_assert_cmpfloat_with_epsilon(psim_cost_node(m, g, y, 0, NULL), 50 * (mw * 1.5 + (1 - mw) * 1.1), 1e-9);
        g_assert_cmpfloat(psim_cost_node(m, g, z, 0, NULL), ==, 7); /* annotations are not scaled */
        psim_cost_model_set_speed_ref(m, 0, NULL);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, NULL), ==, 50);
    }
}

/* profile --in-situ's rows and calibrations: the in-situ row answers before the kernel-alone
 * row, a node's own in-situ row before its signature's, every measured op pays the device's
 * dispatch gap (estimates and annotations do not), and with several devices busy the busy factor
 * scales measured ops. */
static void test_insitu(void)
{
    g_autoptr(PsimGraph) g = tiny();
    g_autoptr(PsimCluster) c = one_cpu("cpu A");
    psim_cluster_device_add(c, "CPU:1", "CPU", NULL);
    psim_cluster_device(c, 1)->description = g_strdup("cpu A");
    psim_cluster_device(c, 1)->launch_us = 2;
    g_autofree char *path = g_build_filename(tmp_dir, "insitu.db", NULL);
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    PsimDevice *d = psim_cluster_device(c, 0);
    PsimNode *y = psim_graph_node_find(g, "y"), *q = psim_graph_node_find(g, "q");
    PsimNode *z = psim_graph_node_find(g, "z"), *y2 = psim_graph_node_find(g, "y2");
    g_autofree char *sy = psim_cost_signature(g, y);
    g_autofree char *sy2 = psim_cost_signature(g, y2);
    g_assert_cmpstr(sy, ==, sy2);
    PsimTimingStats alone = {.n = 9, .mean_us = 51, .stddev_us = 1, .min_us = 49, .median_us = 50};
    PsimTimingStats chain = {.n = 20, .mean_us = 31, .stddev_us = 1, .min_us = 29, .median_us = 30};
    g_assert_true(psim_cost_db_kernel_put(db, d, sy, "MatMul", "monotonic", &alone, &err));
    g_assert_true(psim_cost_db_kernel_put_insitu(db, d, sy, "MatMul", "monotonic", &chain, &err));
    g_assert_no_error(err);
    double q_est;
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        int64_t row = -1;
        g_assert_cmpfloat(psim_cost_node_row(m, g, y, 0, &src, &row), ==, 30);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        g_assert_cmpint(row, >, 0);
        /* CPU:1 (same fingerprint) shares the row. */
        g_assert_cmpfloat(psim_cost_node(m, g, y, 1, NULL), ==, 30);
        q_est = psim_cost_node(m, g, q, 0, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
    }
    g_assert_true(psim_cost_db_calibration_put(db, d, "dispatch_us", 0.5, "test", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d, "busy_factor", 1.2, "test", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d, "busy_devices", 3, "test", &err));
    g_assert_no_error(err);
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, NULL), ==, 30.5);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 1, NULL), ==, 30.5); /* identical hardware */
        g_assert_cmpfloat(psim_cost_node(m, g, q, 0, NULL), ==, q_est);
        g_assert_cmpfloat(psim_cost_node(m, g, z, 0, NULL), ==, 7);
        /* The busy factor is the simulator's to apply (it knows how many devices run). */
        g_assert_cmpfloat(psim_cost_model_busy_scale(m, 0, 0), ==, 1);
        g_assert_cmpfloat(psim_cost_model_busy_scale(m, 0, 1), ==, 1);
        /* Two of the three devices measured busy: half the factor's excess. */
        g_assert_cmpfloat_with_epsilon(psim_cost_model_busy_scale(m, 0, 2), 1.1, 1e-12);
        g_assert_cmpfloat_with_epsilon(psim_cost_model_busy_scale(m, 0, 8), 1.2, 1e-12);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, NULL), ==, 30.5);
        g_assert_cmpfloat(psim_cost_node(m, g, y2, 0, NULL), ==, 30.5); /* y's signature */
    }
    /* y2 gets a row of its own (it shares y's signature): it answers for y2 alone. */
    g_assert_false(psim_cost_db_has_node_rows(db, &err));
    g_autofree char *k2 = psim_cost_insitu_node_key(sy, y2);
    PsimTimingStats own = {.n = 20, .mean_us = 45, .stddev_us = 1, .min_us = 43, .median_us = 44};
    g_assert_true(psim_cost_db_kernel_put_insitu(db, d, k2, "MatMul", "monotonic", &own, &err));
    g_assert_no_error(err);
    g_assert_true(psim_cost_db_has_node_rows(db, &err));
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        g_assert_cmpfloat(psim_cost_node(m, g, y2, 0, NULL), ==, 44.5);
        g_assert_cmpfloat(psim_cost_node(m, g, y, 0, NULL), ==, 30.5);
    }
}

/* Rows of CPU:0 measured on another CPU model are not used, and a warning says so once. */
static void test_other_fingerprint(void)
{
    if (g_test_subprocess()) {
        g_autoptr(PsimGraph) g = tiny();
        g_autoptr(PsimCluster) a = one_cpu("cpu A");
        g_autoptr(PsimCluster) b = one_cpu("cpu B");
        g_autofree char *path = g_build_filename(tmp_dir, "fp.db", NULL);
        GError *err = NULL;
        g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
        PsimNode *y = psim_graph_node_find(g, "y");
        g_autofree char *sig = psim_cost_signature(g, y);
        PsimTimingStats s = {.n = 9, .mean_us = 51, .stddev_us = 1, .min_us = 49, .median_us = 50};
        g_assert_true(psim_cost_db_kernel_put(db, psim_cluster_device(a, 0), sig, "MatMul", "monotonic", &s, &err));
        g_autoptr(PsimCostModel) m = psim_cost_model_new(b, db);
        PsimCostSource src;
        double us = psim_cost_node(m, g, y, 0, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
        g_assert_cmpfloat(us, !=, 50);
        psim_cost_node(m, g, psim_graph_node_find(g, "y2"), 0, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
        return;
    }
    g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
    g_test_trap_assert_passed();
    g_test_trap_assert_stderr("*warning*CPU:0*another device fingerprint*");
    /* Once, not once per node. */
    g_test_trap_assert_stderr_unmatched("*another device fingerprint*another device fingerprint*");
}

/* g partitioned on two CPUs, with n_transfers Send/Recv pairs. */
static PsimPlan *split_plan(const PsimGraph *g, const int32_t *device_of, int32_t n_transfers)
{
    const char *devices[2] = {"/job:localhost/replica:0/task:0/device:CPU:0",
                              "/job:localhost/replica:0/task:0/device:CPU:1"};
    const char *brief[2] = {"CPU_0", "CPU_1"};
    GError *err = NULL;
    PsimPlan *p = psim_plan_partition(g, device_of, 2, devices, brief, FALSE, PSIM_ROUNDING_TRUNCATE, "test", &err);
    g_assert_no_error(err);
    g_assert_cmpint(p->n_transfers, ==, n_transfers);
    return p;
}

/* A node whose shape argument arrives from another device keeps the signature it has on one
 * device: the Recv's tensor is the Send's, value included, so the row profiled on one device
 * (in situ) answers for it in a split plan. Without that, round-robin's Slices and Reshapes
 * fell back to the estimate. */
static void test_signature_across_devices(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("split");
    GError *err = NULL;
    int64_t xd[2] = {4, 6}, sd[1] = {1};
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", &err);
    psim_graph_node_outputs_set(g, x, 1);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 2, xd);
    psim_graph_input_add(g, x->id);
    PsimNode *s = psim_graph_node_add(g, "s", "Const", &err);
    psim_graph_node_outputs_set(g, s, 1);
    PsimTensor *sv = psim_tensor_new(PSIM_DTYPE_INT64, 1, sd, &err);
    g_assert_no_error(err);
    ((int64_t *)sv->data)[0] = 24;
    psim_graph_output_value_set(g, s, 0, sv);
    psim_tensor_unref(sv);
    PsimNode *r = psim_graph_node_add(g, "r", "Reshape", &err);
    g_assert_no_error(err);
    psim_graph_node_input_add(g, r, (PsimPort){x->id, 0});
    psim_graph_node_input_add(g, r, (PsimPort){s->id, 0});
    psim_graph_output_add(g, (PsimPort){r->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    g_autofree char *one = psim_cost_signature(g, r);
    g_assert_nonnull(strstr(one, "=24"));

    int32_t device_of[4];
    device_of[x->id] = 1;
    device_of[s->id] = 0; /* the shape argument is on the other device */
    device_of[r->id] = 1;
    /* A Const generator does not cross: CPU:1 has its own copy of it, with its value. */
    g_autoptr(PsimPlan) p = split_plan(g, device_of, 0);
    const PsimNode *pr = psim_graph_node_find(p->graph, "r");
    g_assert_cmpint(p->copy_of[pr->inputs[1].node], ==, s->id);
    g_autofree char *copied = psim_cost_signature(p->graph, pr);
    g_assert_cmpstr(copied, ==, one);

    /* The same value from a node that is not a generator (it waits, by a control edge, for a
     * node of its device) crosses by a Recv. */
    g_autoptr(PsimGraph) g2 = psim_graph_new("split2");
    PsimNode *x2 = psim_graph_node_add(g2, "x", "Placeholder", &err);
    psim_graph_node_outputs_set(g2, x2, 1);
    psim_graph_output_set(g2, x2, 0, PSIM_DTYPE_FLOAT32, 2, xd);
    psim_graph_input_add(g2, x2->id);
    PsimNode *c = psim_graph_node_add(g2, "c", "NoOp", &err);
    PsimNode *s2 = psim_graph_node_add(g2, "s", "Const", &err);
    psim_graph_node_outputs_set(g2, s2, 1);
    psim_graph_output_value_set(g2, s2, 0, psim_graph_node(g, s->id)->outputs[0].value);
    psim_graph_node_control_add(g2, s2, c->id);
    PsimNode *r2 = psim_graph_node_add(g2, "r", "Reshape", &err);
    psim_graph_node_input_add(g2, r2, (PsimPort){x2->id, 0});
    psim_graph_node_input_add(g2, r2, (PsimPort){s2->id, 0});
    psim_graph_output_add(g2, (PsimPort){r2->id, 0});
    g_assert_true(psim_graph_finalize(g2, &err));
    g_assert_no_error(err);
    device_of[x2->id] = 1;
    device_of[c->id] = 0;
    device_of[s2->id] = 0;
    device_of[r2->id] = 1;
    g_autoptr(PsimPlan) p2 = split_plan(g2, device_of, 1);
    const PsimNode *pr2 = psim_graph_node_find(p2->graph, "r");
    g_assert_cmpstr(psim_graph_node(p2->graph, pr2->inputs[1].node)->op, ==, "Recv");
    g_autofree char *split = psim_cost_signature(p2->graph, pr2);
    g_assert_cmpstr(split, ==, one);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    tmp_dir = g_dir_make_tmp("psim-cost-XXXXXX", NULL);
    g_test_add_func("/cost/model/resolution", test_resolution);
    g_test_add_func("/cost/model/other-fingerprint", test_other_fingerprint);
    g_test_add_func("/cost/model/insitu", test_insitu);
    g_test_add_func("/cost/signature/across-devices", test_signature_across_devices);
    int rc = g_test_run();
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0 && !rc)
        rc = 1;
    g_free(tmp_dir);
    return rc;
}
