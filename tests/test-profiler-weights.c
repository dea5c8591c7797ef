/* Tests of cold weights in the profiler: the cache eviction helper really evicts (a dependent
 * load chain over evicted lines is much slower than over cached ones), the AUTO decision from a
 * graph's constant bytes, the option's names, the kernels.weights column written and read back,
 * and profiles in COLD and WARM mode end to end (rows of the other mode measured again). */
#include <string.h>
#include <time.h>

#include <glib/gstdio.h>

#include "placesim/profiler.h"
#include "placesim/formats.h"

static char *tmp_dir;

static const char *graph_json =
    "{\"format\": \"placesim.graph/1\", \"name\": \"w\", \"nodes\": ["
    " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},"
    " {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5}, \"outputs\": [{\"dtype\": \"float32\", \"shape\": [64, 64]}]},"
    " {\"name\": \"m\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},"
    " {\"name\": \"r\", \"op\": \"Relu\", \"inputs\": [\"m:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]}"
    "]}";

static PsimGraph *load(const char *json)
{
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("w.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json), NULL, &err);
    g_assert_no_error(err);
    return g;
}

/* A weight of `rows` x 1024 floats (its bytes come from the shape: nothing is allocated). */
static PsimGraph *graph_with_weight(uint64_t rows)
{
    g_autofree char *json = g_strdup_printf(
        "{\"format\": \"placesim.graph/1\", \"name\": \"big\", \"nodes\": ["
        " {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1, %" G_GUINT64_FORMAT "]}]},"
        " {\"name\": \"w\", \"op\": \"Const\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [%" G_GUINT64_FORMAT ", 1024]}]},"
        " {\"name\": \"m\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1, 1024]}]}"
        "]}", rows, rows);
    return load(json);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    uint32_t next;
    char pad[60];
} Line;

static uint32_t chase(const Line *lines, uint32_t n)
{
    uint32_t i = 0;
    for (uint32_t k = 0; k < n; k++)
        i = ((const volatile Line *)lines)[i].next;
    return i;
}

static void test_evict(void)
{
    g_assert_cmpuint(psim_profile_cache_evict(NULL, 64), ==, 0);
    enum { N = 1024 }; /* 64 KiB: cached in L2 when hot */
    Line *lines = aligned_alloc(64, N * sizeof(Line));
    g_assert_nonnull(lines);
    size_t got = psim_profile_cache_evict(lines, N * sizeof(Line));
    if (got == 0) {
        free(lines);
        g_test_skip("no user-level cache eviction on this architecture");
        return;
    }
    g_assert_cmpuint(got, >=, N * sizeof(Line));
    g_assert_cmpuint(psim_profile_cache_evict(lines, 0), ==, 0);
#if defined(__x86_64__) || defined(__i386__)
    /* Whole 64-byte lines: one byte is one line, two bytes across a boundary are two. */
    g_assert_cmpuint(psim_profile_cache_evict((char *)lines + 5, 1), ==, 64);
    g_assert_cmpuint(psim_profile_cache_evict((char *)lines + 63, 2), ==, 128);
#endif
    /* One random cycle through all lines: each load depends on the previous one, so neither
     * the prefetchers nor out-of-order execution hide where the lines come from. */
    uint32_t perm[N];
    for (uint32_t i = 0; i < N; i++)
        perm[i] = i;
    GRand *r = g_rand_new_with_seed(7);
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)g_rand_int_range(r, 0, (gint32)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    g_rand_free(r);
    for (uint32_t i = 0; i < N; i++)
        lines[perm[i]].next = perm[(i + 1) % N];
    /* Minimum of several trials each: noise only adds time. */
    double hot = G_MAXDOUBLE, cold = G_MAXDOUBLE;
    uint32_t sink = 0;
    for (int t = 0; t < 9; t++) {
        sink += chase(lines, N);
        double t0 = now_ns();
        sink += chase(lines, N);
        hot = MIN(hot, now_ns() - t0);
        psim_profile_cache_evict(lines, N * sizeof(Line));
        t0 = now_ns();
        sink += chase(lines, N);
        cold = MIN(cold, now_ns() - t0);
    }
    g_test_message("chase of %d lines: hot %.0f ns, evicted %.0f ns (sink %u)", N, hot, cold, sink);
    /* Memory latency is tens of times the L2's; 3x leaves room for any machine. */
    g_assert_cmpfloat(cold, >, 3 * hot);
    free(lines);
}

static void test_names_and_resolve(void)
{
    PsimProfileWeights w = PSIM_PROFILE_WEIGHTS_WARM;
    const char *names[] = {"auto", "cold", "warm"};
    for (int i = 0; i < 3; i++) {
        g_assert_true(psim_profile_weights_from_name(names[i], &w));
        g_assert_cmpstr(psim_profile_weights_name(w), ==, names[i]);
    }
    g_assert_false(psim_profile_weights_from_name("hot", &w));
    g_assert_false(psim_profile_weights_from_name(NULL, &w));
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    g_assert_cmpint(o.weights, ==, PSIM_PROFILE_WEIGHTS_AUTO);

    uint64_t llc = UINT64_C(32) << 20;
    g_assert_cmpint(psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_AUTO, llc / 2 + 1, llc), ==,
                    PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_AUTO, llc / 2, llc), ==,
                    PSIM_PROFILE_WEIGHTS_WARM);
    g_assert_cmpint(psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_AUTO, 0, llc), ==, PSIM_PROFILE_WEIGHTS_WARM);
    /* Explicit modes are kept whatever the sizes. */
    g_assert_cmpint(psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_WARM, 10 * llc, llc), ==,
                    PSIM_PROFILE_WEIGHTS_WARM);
    g_assert_cmpint(psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_COLD, 0, llc), ==, PSIM_PROFILE_WEIGHTS_COLD);
    /* The cache size: a sane power of two or sum of them, at least 1 MiB and at most 4 GiB. */
    uint64_t mine = psim_profile_llc_bytes();
    g_assert_cmpuint(mine, >=, UINT64_C(1) << 20);
    g_assert_cmpuint(mine, <=, UINT64_C(4) << 30);
}

static void test_auto_graphs(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    g_autoptr(PsimGraph) small = load(graph_json);
    g_assert_cmpuint(psim_profile_constant_bytes(small), ==, 64 * 64 * 4);
    /* Weights of the whole last-level cache (more than half of it), and of a quarter of it. */
    uint64_t llc = psim_profile_llc_bytes();
    g_autoptr(PsimGraph) big = graph_with_weight(llc / 4096);
    g_autoptr(PsimGraph) quarter = graph_with_weight(llc / 16384);
    g_assert_cmpuint(psim_profile_constant_bytes(big), ==, llc / 4096 * 4096);
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_profiler_graph_weights(p, small), ==, PSIM_PROFILE_WEIGHTS_WARM);
    g_assert_cmpint(psim_profiler_graph_weights(p, big), ==, PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(psim_profiler_graph_weights(p, quarter), ==, PSIM_PROFILE_WEIGHTS_WARM);
    g_assert_cmpint(psim_profiler_graph_weights(p, big), ==, PSIM_PROFILE_WEIGHTS_COLD);
    /* An explicit mode applies to every graph. */
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.weights = PSIM_PROFILE_WEIGHTS_WARM;
    g_autoptr(PsimProfiler) pw = psim_profiler_new(c, NULL, &o, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_profiler_graph_weights(pw, big), ==, PSIM_PROFILE_WEIGHTS_WARM);
    /* Out of range: a usage error. */
    o.weights = (PsimProfileWeights)7;
    g_assert_null(psim_profiler_new(c, NULL, &o, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);
}

static void test_db_column(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    const PsimDevice *d = psim_cluster_device(c, 0);
    g_autofree char *path = g_build_filename(tmp_dir, "col.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    double v[3] = {10, 11, 12};
    PsimTimingStats s;
    psim_timing_stats(v, 3, &s);
    char *w = (char *)"x";
    g_assert_false(psim_cost_db_kernel_get_weights(db, d, "A", &w, &err));
    g_assert_no_error(err);
    g_assert_null(w);
    g_assert_true(psim_cost_db_kernel_put_weights(db, d, "A", "MatMul", "monotonic", "cold", &s, &err));
    g_assert_true(psim_cost_db_kernel_put(db, d, "B", "MatMul", "monotonic", &s, &err));
    g_assert_no_error(err);
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, "A", &w, &err));
    g_assert_cmpstr(w, ==, "cold");
    g_free(w);
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, "B", &w, &err));
    g_assert_cmpstr(w, ==, ""); /* no mode given: the column's default */
    g_free(w);
    /* Replacing the row replaces the mode. */
    g_assert_true(psim_cost_db_kernel_put_weights(db, d, "A", "MatMul", "monotonic", "warm", &s, &err));
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, "A", &w, &err));
    g_assert_cmpstr(w, ==, "warm");
    g_free(w);
    g_assert_no_error(err);
}

static PsimProfileOptions quick(PsimProfileWeights w)
{
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.budget_ms = 20;
    o.warmup_ms = 1;
    o.reps = 3;
    o.links = FALSE;
    o.calibrate = FALSE;
    o.weights = w;
    return o;
}

static PsimProfileReport profile(const PsimCluster *c, PsimCostDb *db, PsimGraph *g, PsimProfileWeights w)
{
    GError *err = NULL;
    PsimProfileOptions o = quick(w);
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, db, &o, &err);
    g_assert_no_error(err);
    PsimProfileReport r;
    g_assert_true(psim_profiler_run(p, &g, 1, &r, &err));
    g_assert_no_error(err);
    return r;
}

static void test_profile_modes(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    const PsimDevice *d = psim_cluster_device(c, 0);
    g_autoptr(PsimGraph) g = load(graph_json);
    g_autofree char *path = g_build_filename(tmp_dir, "modes.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    /* COLD: both kernels (MatMul with its weight evicted, Relu without constants) measured. */
    PsimProfileReport r = profile(c, db, g, PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(r.measured, ==, 2);
    g_assert_cmpint(r.measured_cold, ==, 2);
    g_assert_cmpint(r.failed, ==, 0);
    g_autofree char *sig = psim_cost_signature(g, psim_graph_node_find(g, "m"));
    char *w = NULL;
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, sig, &w, &err));
    g_assert_cmpstr(w, ==, "cold");
    g_free(w);
    PsimTimingStats st;
    g_assert_true(psim_cost_db_kernel_get(db, d, sig, &st, NULL, &err));
    g_assert_cmpfloat(st.median_us, >, 0);
    /* COLD again: in the DB in that mode, skipped. */
    r = profile(c, db, g, PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(r.measured, ==, 0);
    g_assert_cmpint(r.skipped, ==, 2);
    /* AUTO on this small graph means WARM: the cold rows are measured again, warm. */
    r = profile(c, db, g, PSIM_PROFILE_WEIGHTS_AUTO);
    g_assert_cmpint(r.measured, ==, 2);
    g_assert_cmpint(r.measured_cold, ==, 0);
    g_assert_cmpint(r.skipped, ==, 0);
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, sig, &w, &err));
    g_assert_cmpstr(w, ==, "warm");
    g_free(w);
    /* A row from before the column ('') counts as warm. */
    g_assert_true(psim_cost_db_kernel_put(db, d, sig, "MatMul", "monotonic", &st, &err));
    r = profile(c, db, g, PSIM_PROFILE_WEIGHTS_WARM);
    g_assert_cmpint(r.measured, ==, 0);
    g_assert_cmpint(r.skipped, ==, 2);
    r = profile(c, db, g, PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(r.measured, ==, 2);
    g_assert_no_error(err);

    /* A weight of 1 MiB (made as random data: no value in the graph, but a constant node) is
     * evicted before each run: measured cold without failing. */
    g_autoptr(PsimGraph) big = graph_with_weight(256);
    g_autoptr(PsimCostDb) db2 = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    r = profile(c, db2, big, PSIM_PROFILE_WEIGHTS_COLD);
    g_assert_cmpint(r.measured, ==, 1);
    g_assert_cmpint(r.measured_cold, ==, 1);
    g_assert_cmpint(r.failed, ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    tmp_dir = g_dir_make_tmp("psim-profw-XXXXXX", NULL);
    g_test_add_func("/profiler/weights/evict", test_evict);
    g_test_add_func("/profiler/weights/names-resolve", test_names_and_resolve);
    g_test_add_func("/profiler/weights/auto-graphs", test_auto_graphs);
    g_test_add_func("/profiler/weights/db-column", test_db_column);
    g_test_add_func("/profiler/weights/profile-modes", test_profile_modes);
    int rc = g_test_run();
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0 && !rc)
        rc = 1;
    g_free(tmp_dir);
    return rc;
}
