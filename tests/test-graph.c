/* Tests of the graph IR core: building, refs, finalize errors, topological order, critical
 * path, and the JSON format (round trip and errors). */
#include <math.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static PsimGraph *load_str(const char *json, GError **err)
{
    return psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json), NULL, err);
}

static void test_build_topo(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    GError *err = NULL;
    PsimNode *c = psim_graph_node_add(g, "c", "Task", &err);
    PsimNode *a = psim_graph_node_add(g, "a", "Task", &err);
    PsimNode *b = psim_graph_node_add(g, "b", "Task", &err);
    g_assert_no_error(err);
    psim_graph_node_outputs_set(g, a, 1);
    psim_graph_node_outputs_set(g, b, 1);
    psim_graph_node_input_add_ref(g, b, "a:0");
    psim_graph_node_input_add_ref(g, c, "b");
    psim_graph_node_input_add_ref(g, c, "^a");
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_edges(g), ==, 3);
    g_autofree int32_t *order = psim_graph_topo_order(g, &err);
    g_assert_nonnull(order);
    g_assert_cmpint(order[0], ==, a->id);
    g_assert_cmpint(order[1], ==, b->id);
    g_assert_cmpint(order[2], ==, c->id);
    double cost[3] = {[0] = 5, [1] = 2, [2] = 3};
    int32_t *path = NULL, np = 0;
    double cp = psim_graph_critical_path(g, cost, NULL, NULL, &path, &np, &err);
    g_assert_cmpfloat(cp, ==, 10);
    g_assert_cmpint(np, ==, 3);
    g_free(path);
    g_assert_null(psim_graph_node_add(g, "a", "Task", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
}

static void test_cycle(void)
{
    GError *err = NULL;
    PsimGraph *g = load_str("{\"format\": \"placesim.graph/1\", \"nodes\": ["
                            "{\"name\": \"a\", \"op\": \"Task\", \"inputs\": [\"c:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"b\", \"op\": \"Task\", \"inputs\": [\"a:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"c\", \"op\": \"Task\", \"inputs\": [\"b:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"d\", \"op\": \"Task\", \"inputs\": [\"c:0\"]}]}",
                            &err);
    g_assert_null(g);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "cycle"));
    g_assert_true(strstr(err->message, "'a'") || strstr(err->message, "'b'") || strstr(err->message, "'c'"));
    g_clear_error(&err);
}

static void test_bad_refs(void)
{
    static const char *const cases[][2] = {
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\", \"inputs\": [\"zz:0\"]}]}", "missing node"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\", \"outputs\": [{\"bytes\": 1}]}, {\"name\": \"b\", \"op\": \"Task\", \"inputs\": [\"a:3\"]}]}", "out of range"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\"}, {\"name\": \"a\", \"op\": \"Task\"}]}", "two nodes"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1048576, 1048576, 1024]}]}]}", "2^36"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [-5]}]}]}", "negative"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"op\": \"Task\"}]}", "'name'"},
        {"{\"format\": \"placesim.graph/2\", \"nodes\": []}", "format"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [", "not valid JSON"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"t\", \"op\": \"Task\", \"cost_us\": {\"P1\": -3}}]}", "cost_us"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        PsimGraph *g = load_str(cases[i][0], &err);
        g_assert_null(g);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!strstr(err->message, cases[i][1]))
            g_error("case %zu: '%s' lacks '%s'", i, err->message, cases[i][1]);
        g_assert_true(g_str_has_prefix(err->message, "t.json: "));
        g_clear_error(&err);
    }
}

static void test_json_roundtrip(void)
{
    const char *src =
        "{\"format\": \"placesim.graph/1\", \"name\": \"tiny\",\n"
        " \"nodes\": [\n"
        "  {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},\n"
        "  {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5, \"k\": 2, \"s\": \"hi\", \"l\": [1, 2], \"f\": {\"floats\": [1.0, 2.5]},"
        "    \"dt\": {\"dtype\": \"int64\"}, \"sh\": {\"shape\": [2, null]}, \"t\": {\"tensor\": {\"dtype\": \"int64\", \"shape\": [2], \"data\": [3, 4]}}},"
        "   \"outputs\": [{\"dtype\": \"float32\", \"shape\": [64, 64]}]},\n"
        "  {\"name\": \"y\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"device\": \"CPU:*\"},\n"
        "  {\"name\": \"t\", \"op\": \"Task\", \"inputs\": [\"y:0\", \"^x\"], \"outputs\": [{\"bytes\": 18}],\n"
        "   \"cost_us\": {\"P1\": 14, \"P2\": 16.25, \"GPU\": 9}}\n"
        " ]}";
    GError *err = NULL;
    g_autoptr(PsimGraph) g1 = load_str(src, &err);
    g_assert_no_error(err);
    gsize l1, l2;
    g_autofree char *e1 = psim_export_json(g1, &l1);
    g_autoptr(PsimGraph) g2 = load_str(e1, &err);
    g_assert_no_error(err);
    g_autofree char *e2 = psim_export_json(g2, &l2);
    g_assert_cmpstr(e1, ==, e2);
    PsimNode *t = psim_graph_node_find(g2, "t");
    double us = 0;
    g_assert_true(psim_node_cost_lookup(t, "/job:localhost/replica:0/task:0/device:P2:0", "P2", &us));
    g_assert_cmpfloat(us, ==, 16.25);
    g_assert_cmpint(t->outputs[0].bytes, ==, 18);
    g_assert_cmpint(t->n_controls, ==, 1);
    PsimNode *w = psim_graph_node_find(g2, "w");
    g_assert_cmpfloat(psim_node_attr_float(w, "fill", 0), ==, 0.5);
    g_assert_cmpint(psim_node_attr(w, "fill")->type, ==, PSIM_ATTR_FLOAT);
    g_assert_cmpint(psim_node_attr(w, "f")->type, ==, PSIM_ATTR_FLOATS);
    g_assert_cmpint(psim_node_attr(w, "k")->type, ==, PSIM_ATTR_INT);
    g_assert_cmpint(psim_node_attr(w, "t")->v.t->dtype, ==, PSIM_DTYPE_INT64);
    g_assert_cmpint(w->outputs[0].bytes, ==, 64 * 64 * 4);
    g_assert_cmpstr(psim_graph_node_find(g2, "y")->device, ==, "CPU:*");
}

/* The one median every module uses: odd and even counts, unsorted input (sorted in place),
 * ties, one value, none. */
static void test_stats_median(void)
{
    double odd[] = {5, 1, 4, 2, 3};
    g_assert_cmpfloat(psim_stats_median(odd, 5), ==, 3);
    for (int i = 0; i < 5; i++)
        g_assert_cmpfloat(odd[i], ==, i + 1);
    double even[] = {10, -2, 7, 1};
    g_assert_cmpfloat(psim_stats_median(even, 4), ==, 4);
    double ties[] = {2, 2, 9, 2};
    g_assert_cmpfloat(psim_stats_median(ties, 4), ==, 2);
    double one[] = {42};
    g_assert_cmpfloat(psim_stats_median(one, 1), ==, 42);
    g_assert_true(isnan(psim_stats_median(one, 0)));
    double v[] = {3, -1, 2};
    psim_stats_sort(v, 3);
    g_assert_cmpfloat(v[0], ==, -1);
    g_assert_cmpfloat(v[2], ==, 3);
    double a = 1, b = 2;
    g_assert_cmpint(psim_stats_cmp_double(&a, &b), <, 0);
    g_assert_cmpint(psim_stats_cmp_double(&b, &a), >, 0);
    g_assert_cmpint(psim_stats_cmp_double(&a, &a), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/build-topo", test_build_topo);
    g_test_add_func("/graph/cycle", test_cycle);
    g_test_add_func("/graph/bad-refs", test_bad_refs);
    g_test_add_func("/graph/json-roundtrip", test_json_roundtrip);
    g_test_add_func("/graph/stats/median", test_stats_median);
    return g_test_run();
}
