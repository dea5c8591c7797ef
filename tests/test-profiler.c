/* Tests of the profiler on hand-built graphs: one row per (signature, device), skipping what is
 * measured unless forced, statistics that make sense, bigger work measured slower, unsupported
 * nodes counted, links fitted and devices calibrated, and the cost model answering from it all. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include <sqlite3.h>

#include "placesim/exec.h"
#include "placesim/formats.h"
#include "placesim/kernels.h"
#include "placesim/profiler.h"

static char *tmp_dir;

/* Two identical MatMuls (one signature), a bigger MatMul, a Relu and an Add; a weight constant;
 * and a node whose input shape is unknown. */
static const char *graph_json =
    "{\"format\": \"placesim.graph/1\", \"name\": \"prof\", \"nodes\": ["
    " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"big\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [192, 192]}]},"
    " {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5}, \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"m1\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"m2\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"mb\", \"op\": \"MatMul\", \"inputs\": [\"big:0\", \"big:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [192, 192]}]},"
    " {\"name\": \"r\", \"op\": \"Relu\", \"inputs\": [\"m1:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"a\", \"op\": \"Add\", \"inputs\": [\"r:0\", \"m2:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
    " {\"name\": \"u\", \"op\": \"Placeholder\"},"
    " {\"name\": \"ru\", \"op\": \"Relu\", \"inputs\": [\"u:0\"]}"
    "]}";

static PsimGraph *graph(void)
{
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("prof.json", PSIM_FORMAT_JSON, (const guint8 *)graph_json,
                                        strlen(graph_json), NULL, &err);
    g_assert_no_error(err);
    return g;
}

static PsimProfileOptions quick(void)
{
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.budget_ms = 50;
    o.warmup_ms = 2;
    o.reps = 5;
    o.link_max_bytes = 64 << 10;
    return o;
}

/* local:2, a new cost DB `db_name` in tmp_dir (its path in *path), and a quick() profiler. */
static PsimProfiler *quick_profiler(const char *db_name, PsimCluster **c, PsimCostDb **db, char **path)
{
    GError *err = NULL;
    *c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    *path = g_build_filename(tmp_dir, db_name, NULL);
    *db = psim_cost_db_open(*path, &err);
    g_assert_no_error(err);
    PsimProfileOptions o = quick();
    PsimProfiler *p = psim_profiler_new(*c, *db, &o, &err);
    g_assert_no_error(err);
    return p;
}

static void test_measure_node(void)
{
    g_autoptr(PsimGraph) g = graph();
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    PsimProfileOptions o = quick();
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, &o, &err);
    g_assert_no_error(err);
    PsimTimingStats small, big;
    g_assert_true(psim_profiler_measure_node(p, g, psim_graph_node_find(g, "m1"), 0, &small, &err));
    g_assert_no_error(err);
    g_assert_true(psim_profiler_measure_node(p, g, psim_graph_node_find(g, "mb"), 0, &big, &err));
    g_assert_cmpint(small.n, >=, 3);
    g_assert_cmpfloat(small.min_us, >, 0);
    g_assert_cmpfloat(small.min_us, <=, small.median_us);
    g_assert_cmpfloat(small.stddev_us, >=, 0);
    /* 216 times the FLOPs: even on a noisy machine, far slower. */
    g_assert_cmpfloat(big.median_us, >, 10 * small.median_us);
    /* No shape to make data for: unsupported, naming the file and the node. */
    g_assert_false(psim_profiler_measure_node(p, g, psim_graph_node_find(g, "ru"), 0, &small, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED);
    g_assert_nonnull(strstr(err->message, "prof.json"));
    g_assert_nonnull(strstr(err->message, "'ru'"));
    g_clear_error(&err);

    /* Several nodes interleaved: samples per node, the one that cannot be measured explained. */
    const PsimNode *nodes[3] = {psim_graph_node_find(g, "m1"), psim_graph_node_find(g, "ru"),
                                psim_graph_node_find(g, "mb")};
    GArray *samples[3];
    char *why[3];
    PsimSpeedRef ref;
    g_assert_true(psim_profiler_measure_nodes(p, g, nodes, 3, 0, samples, why, &ref, &err));
    g_assert_no_error(err);
    g_assert_nonnull(samples[0]);
    g_assert_nonnull(samples[2]);
    g_assert_null(samples[1]);
    g_assert_null(why[0]);
    g_assert_nonnull(strstr(why[1], "'ru'"));
    PsimTimingStats s0, s2;
    psim_timing_stats((double *)samples[0]->data, samples[0]->len, &s0);
    psim_timing_stats((double *)samples[2]->data, samples[2]->len, &s2);
    g_assert_cmpint(s0.n, >=, o.rounds);
    g_assert_cmpfloat(s2.median_us, >, 10 * s0.median_us);
    /* The speed reference was sampled among the passes. */
    g_assert_cmpfloat(ref.gemm_us, >, 0);
    g_assert_cmpfloat(ref.stream_us, >, 0);
    for (int i = 0; i < 3; i++) {
        if (samples[i])
            g_array_free(samples[i], TRUE);
        g_free(why[i]);
    }
    g_assert_false(psim_profiler_measure_nodes(p, g, nodes, 3, 7, samples, why, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);
}

static void test_run(void)
{
    g_autoptr(PsimGraph) g = graph();
    GError *err = NULL;
    g_autoptr(PsimCluster) c = NULL;
    g_autoptr(PsimCostDb) db = NULL;
    g_autofree char *path = NULL;
    g_autoptr(PsimProfiler) p = quick_profiler("prof.db", &c, &db, &path);
    PsimProfileOptions o = quick();
    PsimGraph *gs[1] = {g};
    PsimProfileReport r;
    g_assert_true(psim_profiler_run(p, gs, 1, &r, &err));
    g_assert_no_error(err);
    int32_t n_dev = psim_cluster_n_devices(c);
    /* Signatures: m1 = m2, mb, r, a, ru. ru cannot be measured (unknown shape). */
    g_assert_cmpint(r.n_signatures, ==, 5);
    g_assert_cmpint(r.measured, ==, 4 * n_dev);
    g_assert_cmpint(r.unsupported, ==, n_dev);
    g_assert_cmpint(r.skipped, ==, 0);
    g_assert_cmpint(r.failed, ==, 0);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, 4 * n_dev);
    /* Links: 2 ordered pairs x 4 sizes (1, 4, 16, 64 KiB), each pair fitted. */
    g_assert_cmpint(r.link_rows, ==, 8);
    g_assert_cmpint(r.link_pairs, ==, 2);
    g_assert_cmpint(psim_cost_db_count(db, "links", &err), ==, 8);
    g_assert_cmpint(psim_cost_db_count(db, "link_fits", &err), ==, 2);
    /* Three per device (gemm, copy, launch) and the points of its cold-block curve, and, from the
     * links, the points of its two reclaim curves up to the largest transfer timed (4, 16 and
     * 64 KiB; by an op, by a copy; each no less than 0) and its Send's and hand-off's times, over
     * all sizes and at each of the 4 sizes (the cost model's curves), and the op curve's points
     * after the destination wrote more (each distance, each size). */
    int32_t n_reclaim = psim_reclaim_points(64 << 10);
    g_assert_cmpint(n_reclaim, ==, 3);
    g_assert_cmpint(r.calibrations, ==,
                    3 * n_dev + PSIM_COLD_N * n_dev + 2 * n_reclaim * n_dev + 2 * n_dev + 2 * 4 * n_dev +
                        PSIM_RECLAIM_AFTER_N * n_reclaim * n_dev);
    for (int32_t d = 0; d < n_dev; d++) {
        g_autoptr(PsimCostModel) cm = psim_cost_model_new(c, db);
        PsimReclaimAfter after;
        psim_cost_model_reclaim_after(cm, d, &after);
        g_assert_cmpint(after.n, ==, n_reclaim);
        for (int32_t k = 0; k < n_reclaim; k++) {
            g_assert_cmpfloat(after.bytes[k], ==, (double)psim_reclaim_bytes[k]);
            for (int32_t j = 0; j < PSIM_RECLAIM_AFTER_N; j++)
                g_assert_cmpfloat(after.us[k][j], >=, 0);
        }
    }
    for (int32_t d = 0; d < n_dev; d++) {
        g_autoptr(PsimCostModel) cm = psim_cost_model_new(c, db);
        PsimColdCurve cold;
        psim_cost_model_cold(cm, d, &cold);
        g_assert_cmpint(cold.n, ==, PSIM_COLD_N);
        for (int k = 0; k < PSIM_COLD_N; k++)
            g_assert_cmpfloat(cold.us_per_mib[k], >=, 0);
    }
    for (int32_t d = 0; d < n_dev; d++)
        for (int k = 0; k < 2; k++) {
            double v = -1;
            g_assert_true(psim_cost_db_calibration_get(db, psim_cluster_device(c, d), k ? "handoff_us" : "send_us",
                                                       &v, &err));
            /* (Tenths of a microsecond on a quiet host; under ctest -j2 on two cores, where the
             * destination's thread may wait for its core, up to milliseconds.) */
            g_assert_cmpfloat(v, >=, 0);
        }
    for (int32_t d = 0; d < n_dev; d++) {
        g_autoptr(PsimCostModel) cm = psim_cost_model_new(c, db);
        PsimHopCurve send, handoff;
        psim_cost_model_hop(cm, d, &send, &handoff);
        g_assert_cmpint(send.n, ==, 4); /* 1, 4, 16 and 64 KiB */
        g_assert_cmpint(handoff.n, ==, 4);
        for (int k = 0; k < 4; k++) {
            g_assert_cmpfloat(send.bytes[k], ==, (double)(UINT64_C(1024) << (2 * k)));
            g_assert_cmpfloat(send.us[k], >=, 0);
            g_assert_cmpfloat(handoff.us[k], >=, 0);
        }
    }
    for (int32_t d = 0; d < n_dev; d++)
        for (int k = 0; k < 2 * PSIM_RECLAIM_N; k++) {
            double v = -1;
            /* The points past the largest transfer are not measured. */
            g_assert_true(psim_cost_db_calibration_get(
                              db, psim_cluster_device(c, d),
                              (k < PSIM_RECLAIM_N ? psim_reclaim_kinds : psim_reclaim_copy_kinds)[k % PSIM_RECLAIM_N],
                              &v, &err) == (k % PSIM_RECLAIM_N < n_reclaim));
            g_assert_no_error(err);
            if (k % PSIM_RECLAIM_N < n_reclaim)
                g_assert_cmpfloat(v, >=, 0);
        }
    /* Those sizes are timed through the executor (a two-device plan's hop, not a bare memcpy):
     * at 1 KiB the hand-off is several times the copy's 0.1-0.3 us. */
    {
        sqlite3 *sq;
        sqlite3_stmt *st;
        g_assert_cmpint(sqlite3_open_v2(path, &sq, SQLITE_OPEN_READONLY, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_prepare_v2(sq, "SELECT count(*), min(median_us) FROM links WHERE source = 'executor'"
                                               " AND bytes = 1024", -1, &st, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_step(st), ==, SQLITE_ROW);
        g_assert_cmpint(sqlite3_column_int(st, 0), ==, 2);
        g_assert_cmpfloat(sqlite3_column_double(st, 1), >, 0.3);
        sqlite3_finalize(st);
        sqlite3_close(sq);
    }

    /* The cost model now answers from measurements. */
    {
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        const PsimNode *m1 = psim_graph_node_find(g, "m1");
        double t = psim_cost_node(m, g, m1, 1, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        g_autofree char *sig = psim_cost_signature(g, m1);
        PsimTimingStats st;
        g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, 1), sig, &st, NULL, &err));
        g_assert_cmpfloat(t, ==, st.median_us);
        psim_cost_node(m, g, psim_graph_node_find(g, "ru"), 0, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
        g_assert_cmpfloat(psim_cost_transfer_src(m, 10000, 0, 1, &src), >, 0);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        gboolean cal = FALSE;
        double peak = 0;
        psim_cost_model_device_rates(m, 0, &peak, NULL, NULL, &cal);
        g_assert_true(cal);
        g_assert_cmpfloat(peak, >, 0.01);
    }

    /* Again: everything is skipped; with force, measured again (still one row each). */
    o.links = o.calibrate = FALSE;
    g_autoptr(PsimProfiler) p2 = psim_profiler_new(c, db, &o, &err);
    g_assert_true(psim_profiler_run(p2, gs, 1, &r, &err));
    g_assert_cmpint(r.measured, ==, 0);
    g_assert_cmpint(r.skipped, ==, 4 * n_dev);
    o.force = TRUE;
    g_autoptr(PsimProfiler) p3 = psim_profiler_new(c, db, &o, &err);
    g_assert_true(psim_profiler_run(p3, gs, 1, &r, &err));
    g_assert_cmpint(r.measured, ==, 4 * n_dev);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, 4 * n_dev);
    g_assert_no_error(err);
}

typedef struct {
    int32_t calls, last_done, last_total;
    gboolean monotonic;
} Seen;

static void on_progress(const PsimProfileProgress *pr, void *user)
{
    Seen *s = user;
    if (!strcmp(pr->phase, "kernels")) {
        if (pr->done < s->last_done)
            s->monotonic = FALSE;
        s->last_done = pr->done;
        s->last_total = pr->total;
        s->calls++;
    }
}

static void test_progress(void)
{
    g_autoptr(PsimGraph) g = graph();
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    PsimProfileOptions o = quick();
    o.links = o.calibrate = FALSE;
    Seen s = {.monotonic = TRUE};
    o.progress = on_progress;
    o.progress_user = &s;
    o.rounds = 1;
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, &o, &err);
    PsimGraph *gs[1] = {g};
    PsimProfileReport r;
    g_assert_true(psim_profiler_run(p, gs, 1, &r, &err));
    g_assert_cmpint(s.calls, ==, 4);
    g_assert_cmpint(s.last_done, ==, 4);
    g_assert_cmpint(s.last_total, ==, 4);
    g_assert_true(s.monotonic);

    /* Three passes: every item gets a burst in each, of at least reps / rounds runs; the row
     * pools the samples of all passes. */
    g_autofree char *path = g_build_filename(tmp_dir, "rounds.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    o.rounds = 3;
    o.reps = 6;
    s = (Seen){.monotonic = TRUE};
    g_autoptr(PsimProfiler) p3 = psim_profiler_new(c, db, &o, &err);
    g_assert_true(psim_profiler_run(p3, gs, 1, &r, &err));
    g_assert_cmpint(r.measured, ==, 4);
    g_assert_cmpint(s.calls, ==, 12);
    g_assert_cmpint(s.last_done, ==, 12);
    g_assert_cmpint(s.last_total, ==, 12);
    g_assert_true(s.monotonic);
    const PsimNode *m1 = psim_graph_node_find(g, "m1");
    g_autofree char *sig = psim_cost_signature(g, m1);
    PsimTimingStats st;
    g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, 0), sig, &st, NULL, &err));
    g_assert_cmpint(st.n, >=, 6);
    g_assert_cmpint(st.n, <=, 3 * 64);
    g_assert_no_error(err);

    /* Pacing: with a budget spent by the first run, an item takes one run per pass until it
     * has three samples, and sits out the remaining passes (still counted in the progress). */
    g_autofree char *path4 = g_build_filename(tmp_dir, "paced.db", NULL);
    g_autoptr(PsimCostDb) db4 = psim_cost_db_open(path4, &err);
    o.rounds = 5;
    o.reps = 1;
    o.budget_ms = 1e-6;
    s = (Seen){.monotonic = TRUE};
    g_autoptr(PsimProfiler) p5 = psim_profiler_new(c, db4, &o, &err);
    g_assert_true(psim_profiler_run(p5, gs, 1, &r, &err));
    g_assert_cmpint(s.calls, ==, 20);
    g_assert_cmpint(s.last_done, ==, 20);
    g_assert_true(psim_cost_db_kernel_get(db4, psim_cluster_device(c, 0), sig, &st, NULL, &err));
    g_assert_cmpint(st.n, ==, 3);
    g_assert_no_error(err);
}

/* A session: every kernel of the graph set up at once, passes run a few at a time (never more
 * than opts.rounds in all), no progress reported meanwhile, and at the end the rows replace the
 * DB's (one row per pair still, with the samples of every pass). */
static void test_session(void)
{
    g_autoptr(PsimGraph) g = graph();
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    int32_t n_dev = psim_cluster_n_devices(c);
    g_autofree char *path = g_build_filename(tmp_dir, "session.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    PsimProfileOptions o = quick();
    o.links = o.calibrate = FALSE;
    o.rounds = 6;
    o.reps = 6;
    Seen seen = {.monotonic = TRUE};
    o.progress = on_progress;
    o.progress_user = &seen;
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, db, &o, &err);
    PsimGraph *gs[1] = {g};
    PsimProfileReport r;
    g_assert_true(psim_profiler_run(p, gs, 1, &r, &err));
    g_assert_cmpint(r.measured, ==, 4 * n_dev);
    /* A row the session must replace: m1 on device 1, a million times too slow. */
    const PsimNode *m1 = psim_graph_node_find(g, "m1");
    g_autofree char *sig = psim_cost_signature(g, m1);
    PsimTimingStats st, fake = {.n = 1, .mean_us = 1e9, .median_us = 1e9, .min_us = 1e9};
    g_assert_true(psim_cost_db_kernel_put(db, psim_cluster_device(c, 1), sig, "MatMul", "wall", &fake, &err));

    int32_t calls = seen.calls;
    PsimProfileSession *s = psim_profile_session_new(p, g, &err);
    g_assert_no_error(err);
    g_assert_nonnull(s);
    g_assert_cmpint(psim_profile_session_passes(s, 2), ==, 2);
    g_assert_cmpint(psim_profile_session_passes(s, 100), ==, 4);
    g_assert_cmpint(psim_profile_session_passes(s, 1), ==, 0);
    g_assert_true(psim_profile_session_finish(s, &r, &err));
    g_assert_no_error(err);
    g_assert_cmpint(seen.calls, ==, calls);
    g_assert_cmpint(r.measured, ==, 4 * n_dev);
    g_assert_cmpint(r.unsupported, ==, n_dev);
    g_assert_cmpint(r.skipped, ==, 0);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, 4 * n_dev);
    g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, 1), sig, &st, NULL, &err));
    g_assert_cmpfloat(st.median_us, <, 1e6);
    g_assert_cmpint(st.n, >=, 6);
    g_assert_cmpint(st.n, <=, 6 * 64);

    /* A session dropped half-way stores nothing; progress is reported again afterwards. */
    g_assert_true(psim_cost_db_kernel_put(db, psim_cluster_device(c, 1), sig, "MatMul", "wall", &fake, &err));
    s = psim_profile_session_new(p, g, &err);
    g_assert_cmpint(psim_profile_session_passes(s, 3), ==, 3);
    psim_profile_session_free(s);
    g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, 1), sig, &st, NULL, &err));
    g_assert_cmpfloat(st.median_us, ==, 1e9);
    calls = seen.calls;
    g_assert_true(psim_profiler_run(p, gs, 1, &r, &err));
    g_assert_cmpint(seen.calls, >, calls);
    g_assert_no_error(err);
}

/* What the spy kernel (Neg on CPU, float32) saw last: a copy of its input. */
static PsimTensor *spied;

static gboolean spy_run(PsimKernelCtx *ctx, GError **error)
{
    const PsimTensor *x = ctx->inputs[0];
    PsimTensor *y = ctx->alloc(ctx, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    for (int64_t i = 0; i < x->n_elems; i++)
        ((float *)y->data)[i] = -((const float *)x->data)[i];
    ctx->outputs[0] = y;
    g_clear_pointer(&spied, psim_tensor_unref);
    spied = psim_tensor_copy(x);
    return TRUE;
}

static const PsimKernelDef spy_kernel = {.op = "Neg", .device_type = "CPU", .dtype = PSIM_DTYPE_FLOAT32,
                                         .name = "test-spy", .run = spy_run};

/* The input the profiler gave node `name` (the spy's last one). */
static PsimTensor *profiled_input(const PsimGraph *g, const char *name, const PsimProfileOptions *o)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, o, &err);
    g_assert_no_error(err);
    PsimTimingStats st;
    g_assert_true(psim_profiler_measure_node(p, g, psim_graph_node_find(g, name), 0, &st, &err));
    g_assert_no_error(err);
    g_assert_nonnull(spied);
    return g_steal_pointer(&spied);
}

/* Profiled kernels are fed as the run they predict (PsimProfileOptions.fill and .feeds, what
 * `profile --feed` sets): a graph input with the very values `run --feed` draws for it, an
 * intermediate tensor with the default kind; N(0, 1) unless told otherwise. */
static void test_feeds(void)
{
    psim_kernel_register(&spy_kernel);
    static const char *json =
        "{\"format\": \"placesim.graph/1\", \"name\": \"feeds\", \"nodes\": ["
        " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [64, 64]}]},"
        " {\"name\": \"a\", \"op\": \"Add\", \"inputs\": [\"x:0\", \"x:0\"]},"
        " {\"name\": \"nx\", \"op\": \"Neg\", \"inputs\": [\"x:0\"]},"
        " {\"name\": \"na\", \"op\": \"Neg\", \"inputs\": [\"a:0\"]}], \"inputs\": [\"x\"]}";
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load_data("feeds.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json),
                                                  NULL, &err);
    g_assert_no_error(err);
    int64_t d[2] = {64, 64};
    g_autoptr(PsimTensor) want = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    psim_tensor_fill(want, PSIM_TENSOR_FILL_RANDOM, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, "x"));
    PsimProfileOptions o = quick();
    o.budget_ms = 1;
    o.rounds = 1;

    /* Default: the graph input exactly as run draws it; the intermediate N(0, 1) too. */
    g_autoptr(PsimTensor) t1 = profiled_input(g, "nx", &o);
    g_assert_cmpmem(t1->data, t1->nbytes, want->data, want->nbytes);
    g_autoptr(PsimTensor) t2 = profiled_input(g, "na", &o);
    double sum = 0, sq = 0;
    int64_t neg = 0;
    for (int64_t i = 0; i < t2->n_elems; i++) {
        float v = ((float *)t2->data)[i];
        sum += v, sq += (double)v * v, neg += v < 0;
    }
    double n = (double)t2->n_elems;
    g_assert_cmpfloat(fabs(sum / n), <, 0.1);
    g_assert_cmpfloat(fabs(sqrt(sq / n) - 1), <, 0.1);
    g_assert_cmpfloat(neg / n, >, 0.4);

    /* --feed zeros --feed x=ones: the input named gets its kind, the rest the default. */
    PsimProfileFeed ones = {.node = "x", .fill = PSIM_TENSOR_FILL_ONES};
    o.fill = PSIM_TENSOR_FILL_ZEROS;
    o.feeds = &ones;
    o.n_feeds = 1;
    g_autoptr(PsimTensor) t3 = profiled_input(g, "nx", &o);
    g_autoptr(PsimTensor) t4 = profiled_input(g, "na", &o);
    for (int64_t i = 0; i < t3->n_elems; i++) {
        g_assert_cmpfloat(((float *)t3->data)[i], ==, 1.0f);
        g_assert_cmpfloat(((float *)t4->data)[i], ==, 0.0f);
    }
    /* --feed x=FILE.pb: the file's values where the shape fits. */
    psim_tensor_fill(want, PSIM_TENSOR_FILL_RAMP, 0);
    ones.value = want;
    g_autoptr(PsimTensor) t5 = profiled_input(g, "nx", &o);
    g_assert_cmpmem(t5->data, t5->nbytes, want->data, want->nbytes);
}

/* In situ: the graph runs whole on one device per fingerprint; rows per signature (m1 and m2
 * share one) from the executor's own times, the dispatch gap and both devices' busy factors as
 * calibrations, and the cost model answering with the in-situ row plus the gap. A graph the
 * executor cannot run whole (an input not fed) is an INPUT error and stores nothing. */
static void test_insitu(void)
{
    static const char *json =
        "{\"format\": \"placesim.graph/1\", \"name\": \"chain\", \"nodes\": ["
        " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
        " {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5}, \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 32]}]},"
        " {\"name\": \"m1\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"]},"
        " {\"name\": \"m2\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"]},"
        " {\"name\": \"r\", \"op\": \"Relu\", \"inputs\": [\"m1:0\"]},"
        " {\"name\": \"a\", \"op\": \"Add\", \"inputs\": [\"r:0\", \"m2:0\"]}"
        "]}";
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load_data("chain.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json),
                                                  NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autofree char *path = g_build_filename(tmp_dir, "insitu.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    PsimProfileOptions o = quick();
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, db, &o, &err);
    g_assert_no_error(err);
    int64_t dims[2] = {32, 32};
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, dims, &err);
    const char *feeds[] = {"x"}, *fetches[] = {"a:0"};
    PsimInsituOptions io;
    psim_insitu_options_init(&io);
    io.steps = 5;
    io.warmup = 1;
    PsimInsituReport r;
    g_assert_true(psim_profiler_insitu(p, g, feeds, &x, 1, fetches, 1, &io, &r, &err));
    g_assert_no_error(err);
    /* Each device runs alone (its own rows: 3 signatures each); the runs after a wait once for
     * both (they share a fingerprint). */
    g_assert_cmpint(r.n_runs, ==, 2);
    g_assert_cmpint(r.n_nodes, ==, 4);
    g_assert_cmpint(r.rows, ==, 2 * 3);
    /* dispatch_us, the idle curve's two points (idle_extra_us and idle_gap_us, their _long_
     * pair) for both devices (the same hardware), CPU:1's dispatch_us again from its own run,
     * and busy_factor and busy_devices for each */
    g_assert_cmpint(r.calibrations, ==, 5 * 2 + 1 + 2 * 2);
    g_assert_cmpfloat(r.step_us, >, 0);
    g_assert_cmpfloat(r.idle_extra_us, >=, 0);
    g_assert_cmpfloat(r.idle_extra_long_us, >=, r.idle_extra_us);
    for (int d = 0; d < 2; d++) {
        double f = 0, gap_us = 0, disp = -1, fl = 0, gap_long = 0;
        const PsimDevice *dev = psim_cluster_device(c, d);
        g_assert_true(psim_cost_db_calibration_get(db, dev, "idle_extra_us", &f, &err));
        g_assert_true(psim_cost_db_calibration_get(db, dev, "idle_gap_us", &gap_us, &err));
        g_assert_true(psim_cost_db_calibration_get(db, dev, "idle_extra_long_us", &fl, &err));
        g_assert_true(psim_cost_db_calibration_get(db, dev, "idle_gap_long_us", &gap_long, &err));
        g_assert_true(psim_cost_db_calibration_get(db, dev, "dispatch_us", &disp, &err));
        g_assert_cmpfloat(f, ==, r.idle_extra_us);
        g_assert_cmpfloat(fl, ==, r.idle_extra_long_us);
        g_assert_cmpfloat(gap_us, ==, PSIM_EXEC_PAUSE_SPIN_US);
        g_assert_cmpfloat(gap_long, ==, 10 * PSIM_EXEC_PAUSE_SPIN_US);
        if (d == 0) /* CPU:1's from its own run */
            g_assert_cmpfloat(disp, ==, r.dispatch_us);
        g_assert_cmpfloat(disp, >=, 0);
    }
    g_assert_cmpfloat(r.dispatch_us, >=, 0);
    g_assert_cmpfloat(r.busy_factor, >, 0);
    const PsimNode *m1 = psim_graph_node_find(g, "m1");
    g_autofree char *sig = psim_cost_signature(g, m1);
    PsimTimingStats st;
    g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 1), sig, "insitu", &st, &err));
    g_assert_cmpint(st.n, ==, 2 * io.steps); /* m1 and m2 pooled */
    g_assert_cmpint(r.passes, ==, 1);
    g_assert_false(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), sig, "kernel", NULL, &err));
    double gap = -1;
    g_assert_true(psim_cost_db_calibration_get(db, psim_cluster_device(c, 0), "dispatch_us", &gap, &err));
    g_assert_cmpfloat(gap, ==, r.dispatch_us);
    /* m1 and m2 share the signature: each also has a row of its own, which the model reads. */
    g_assert_cmpint(r.node_rows, >=, 2);
    g_autofree char *k1 = psim_cost_insitu_node_key(sig, m1);
    g_autofree char *k2 = psim_cost_insitu_node_key(sig, psim_graph_node_find(g, "m2"));
    PsimTimingStats s1, s2;
    g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 1), k1, "insitu", &s1, &err));
    g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 1), k2, "insitu", &s2, &err));
    g_assert_cmpint(s1.n, ==, io.steps);
    g_assert_cmpint(s2.n, ==, io.steps);
    {
        /* CPU:1's own row and its own gap; CPU:0's differ (another run). */
        g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
        PsimCostSource src;
        double gap1 = -1;
        g_assert_true(psim_cost_db_calibration_get(db, psim_cluster_device(c, 1), "dispatch_us", &gap1, &err));
        g_assert_cmpfloat_with_epsilon(psim_cost_node(m, g, m1, 1, &src), s1.median_us + gap1, 1e-9);
        PsimTimingStats s0;
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), k1, "insitu", &s0, &err));
        g_assert_cmpfloat_with_epsilon(psim_cost_node(m, g, m1, 0, &src), s0.median_us + gap, 1e-9);
        g_assert_cmpfloat(s0.median_us, !=, s1.median_us);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
    }
    /* In passes: the steps shared among them (at least one each), the samples pooled. */
    static const int32_t passes_steps_n[3][3] = {{3, 4, 4}, {5, 2, 5}, {1, 5, 5}};
    for (int k = 0; k < 3; k++) {
        io.passes = passes_steps_n[k][0];
        io.steps = passes_steps_n[k][1];
        g_assert_true(psim_profiler_insitu(p, g, feeds, &x, 1, fetches, 1, &io, &r, &err));
        g_assert_no_error(err);
        g_assert_cmpint(r.passes, ==, io.passes);
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 1), k1, "insitu", &s1, &err));
        g_assert_cmpint(s1.n, ==, passes_steps_n[k][2]);
    }
    /* The kernels timed alone skip what in-situ rows cover. */
    PsimGraph *gs[1] = {g};
    PsimProfileReport pr;
    o.links = o.calibrate = FALSE;
    g_autoptr(PsimProfiler) p2 = psim_profiler_new(c, db, &o, &err);
    g_assert_true(psim_profiler_run(p2, gs, 1, &pr, &err));
    g_assert_cmpint(pr.measured, ==, 0);
    g_assert_cmpint(pr.skipped, ==, 3 * 2);

    /* A session spread over three passes (of 2, 3 and 1 steps, warm-up by time too) pools the
     * samples of all of them into the rows it stores in place of the first ones. */
    {
        io.warmup = 0;
        io.warmup_ms = 2;
        g_autoptr(PsimInsituSession) s = psim_insitu_session_new(p, g, feeds, &x, 1, fetches, 1, &io, &err);
        g_assert_no_error(err);
        g_assert_true(psim_insitu_session_pass(s, 2, &err));
        g_assert_true(psim_insitu_session_pass(s, 3, &err));
        g_assert_true(psim_insitu_session_pass(s, 1, &err));
        g_assert_no_error(err);
        PsimInsituReport r2;
        g_assert_true(psim_insitu_session_finish(g_steal_pointer(&s), &r2, &err));
        g_assert_no_error(err);
        g_assert_cmpint(r2.rows, ==, 2 * 3);
        g_assert_cmpint(r2.calibrations, ==, 5 * 2 + 1 + 2 * 2);
        PsimTimingStats st2;
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), sig, "insitu", &st2, &err));
        g_assert_cmpint(st2.n, ==, 2 * (2 + 3 + 1));
        /* A session with no pass runs one of opts.steps at finish; one dropped stores nothing. */
        s = psim_insitu_session_new(p, g, feeds, &x, 1, fetches, 1, &io, &err);
        g_assert_true(psim_insitu_session_finish(g_steal_pointer(&s), NULL, &err));
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), sig, "insitu", &st2, &err));
        g_assert_cmpint(st2.n, ==, 2 * io.steps);
        s = psim_insitu_session_new(p, g, feeds, &x, 1, fetches, 1, &io, &err);
        g_assert_true(psim_insitu_session_pass(s, 7, &err));
        g_clear_pointer(&s, psim_insitu_session_free);
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), sig, "insitu", &st2, &err));
        g_assert_cmpint(st2.n, ==, 2 * io.steps);
        /* record_ms: a pass of one step records each of its runs (each device alone, the first
         * after each wait, all devices at once) for 20 ms, many steps of this graph of
         * microseconds. */
        io.record_ms = 20;
        s = psim_insitu_session_new(p, g, feeds, &x, 1, fetches, 1, &io, &err);
        g_assert_no_error(err);
        gint64 t0 = g_get_monotonic_time();
        g_assert_true(psim_insitu_session_pass(s, 1, &err));
        g_assert_cmpint(g_get_monotonic_time() - t0, >=, 5 * 20000);
        g_assert_true(psim_insitu_session_finish(g_steal_pointer(&s), NULL, &err));
        g_assert_no_error(err);
        g_assert_true(psim_cost_db_kernel_get_method(db, psim_cluster_device(c, 0), sig, "insitu", &st2, &err));
        g_assert_cmpint(st2.n, >=, 2 * 10);
        io.record_ms = -1;
        g_assert_null(psim_insitu_session_new(p, g, feeds, &x, 1, fetches, 1, &io, &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
        g_clear_error(&err);
        io.record_ms = 0;
    }

    int64_t n = psim_cost_db_count(db, "kernels", &err);
    g_assert_false(psim_profiler_insitu(p, g, NULL, NULL, 0, fetches, 1, &io, &r, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, n);
}

/* A link session: what it times in its passes (pairs, the sizes up to max_bytes, the reclaim and
 * cold-block curves) replaces the DB's rows, pooled over the passes; sizes past max_bytes keep
 * their rows. */
static void test_link_session(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = NULL;
    g_autoptr(PsimCostDb) db = NULL;
    g_autofree char *path = NULL;
    g_autoptr(PsimProfiler) p = quick_profiler("links.db", &c, &db, &path);
    const PsimDevice *d0 = psim_cluster_device(c, 0), *d1 = psim_cluster_device(c, 1);
    /* Rows from an earlier profile taken in a bad spell. */
    PsimTimingStats bad = {.n = 1, .mean_us = 1e6, .median_us = 1e6, .min_us = 1e6};
    g_assert_true(psim_cost_db_link_put(db, d0, d1, 1024, "executor", &bad, &err));
    g_assert_true(psim_cost_db_link_put(db, d0, d1, 65536, "executor", &bad, &err));
    g_assert_true(psim_cost_db_calibration_put(db, d0, psim_reclaim_kinds[0], 1e6, "bad", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d1, psim_cold_kinds[0], 1e6, "bad", &err));
    g_assert_true(psim_cost_db_calibration_put(db, d0, "send_us", 1e6, "bad", &err));
    /* Up to 5000 bytes: 1, 4 and 16 KiB. */
    PsimLinkSession *s = psim_link_session_new(p, 3, TRUE, 5000, &err);
    g_assert_no_error(err);
    for (int k = 0; k < 2; k++)
        g_assert_true(psim_link_session_pass(s, &err));
    PsimProfileReport r = {0};
    g_assert_true(psim_link_session_finish(s, &r, &err));
    g_assert_no_error(err);
    g_assert_cmpint(r.link_rows, ==, 2 * 3);
    g_assert_cmpint(r.link_pairs, ==, 2);
    /* The reclaim curves up to the largest transfer timed: 4 and 16 KiB (by an op, by a copy,
     * and by an op after each distance); the Send and hand-off over all sizes and at each of the
     * 3. */
    g_assert_cmpint(psim_reclaim_points(16 << 10), ==, 2);
    g_assert_cmpint(r.calibrations, ==, 2 * (2 * 2 + 2 * PSIM_RECLAIM_AFTER_N + 2 + 2 * 3 + PSIM_COLD_N));
    /* 6 rows, and the 64 KiB one left as it was. */
    g_assert_cmpint(psim_cost_db_count(db, "links", &err), ==, 7);
    sqlite3 *sq;
    sqlite3_stmt *q;
    g_assert_cmpint(sqlite3_open_v2(path, &sq, SQLITE_OPEN_READONLY, NULL), ==, SQLITE_OK);
    g_assert_cmpint(sqlite3_prepare_v2(sq, "SELECT bytes, median_us, n FROM links WHERE bytes IN (1024, 65536) "
                                           "AND src_id < dst_id ORDER BY bytes", -1, &q, NULL),
                    ==, SQLITE_OK);
    g_assert_cmpint(sqlite3_step(q), ==, SQLITE_ROW);
    g_assert_cmpfloat(sqlite3_column_double(q, 1), <, 1e5);
    g_assert_cmpint(sqlite3_column_int(q, 2), >=, 2); /* a sample at least from each pass */
    g_assert_cmpint(sqlite3_step(q), ==, SQLITE_ROW);
    g_assert_cmpint(sqlite3_column_int(q, 0), ==, 65536);
    g_assert_cmpfloat(sqlite3_column_double(q, 1), ==, 1e6);
    sqlite3_finalize(q);
    double v = 0;
    g_assert_true(psim_cost_db_calibration_get(db, d0, psim_reclaim_kinds[0], &v, &err));
    g_assert_cmpfloat(v, <, 1e5);
    g_assert_true(psim_cost_db_calibration_get(db, d1, psim_cold_kinds[0], &v, &err));
    g_assert_cmpfloat(v, <, 1e5);
    g_assert_true(psim_cost_db_calibration_get(db, d0, "send_us", &v, &err));
    g_assert_cmpfloat(v, <, 1e5);
    /* Each says it pooled the two passes. */
    g_assert_cmpint(sqlite3_prepare_v2(sq, "SELECT count(*) FROM calibration WHERE detail LIKE '%over 2 pass(es)%'", -1,
                                       &q, NULL),
                    ==, SQLITE_OK);
    g_assert_cmpint(sqlite3_step(q), ==, SQLITE_ROW);
    g_assert_cmpint(sqlite3_column_int(q, 0), ==, r.calibrations);
    sqlite3_finalize(q);
    sqlite3_close(sq);
    /* Without a pass, finish runs one; without cold, no cold-block curve. */
    s = psim_link_session_new(p, 1, FALSE, 1024, &err);
    r = (PsimProfileReport){0};
    g_assert_true(psim_link_session_finish(s, &r, &err));
    g_assert_no_error(err);
    g_assert_cmpint(r.link_rows, ==, 2);
    g_assert_cmpint(psim_reclaim_points(1024), ==, 1); /* 4 KiB */
    g_assert_cmpint(r.calibrations, ==, 2 * (2 * 1 + PSIM_RECLAIM_AFTER_N + 2 + 2 * 1));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    tmp_dir = g_dir_make_tmp("psim-prof-XXXXXX", NULL);
    g_test_add_func("/profiler/measure-node", test_measure_node);
    g_test_add_func("/profiler/run", test_run);
    g_test_add_func("/profiler/progress", test_progress);
    g_test_add_func("/profiler/session", test_session);
    g_test_add_func("/profiler/feeds", test_feeds);
    g_test_add_func("/profiler/insitu", test_insitu);
    g_test_add_func("/profiler/link-session", test_link_session);
    int rc = g_test_run();
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0 && !rc)
        rc = 1;
    g_free(tmp_dir);
    return rc;
}
