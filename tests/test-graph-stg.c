/* Tests of the STG importer: all 180 graphs of the shared set import, their critical path with
 * the annotated costs equals the "CP Length" of each file's trailer, and bad files give errors
 * naming the file. */
#include <stdlib.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static const char *data_dir(void)
{
    const char *d = g_getenv("PSIM_DATA");
    return d ? d : "../../shared/data";
}

/* The "CP Length : N" value of the trailer, parsed independently of the importer. */
static double trailer_cp(const char *text)
{
    const char *p = strstr(text, "CP Length");
    g_assert_nonnull(p);
    p = strchr(p, ':');
    g_assert_nonnull(p);
    return g_ascii_strtod(p + 1, NULL);
}

static double annotated_cp(const PsimGraph *g)
{
    int32_t n = psim_graph_n_nodes(g);
    g_autofree double *cost = g_new(double, n);
    for (int32_t i = 0; i < n; i++) {
        double us = -1;
        /* Any processor of an identical-processor cluster must see the same cost. */
        g_assert_true(psim_node_cost_lookup(psim_graph_node(g, i), "/job:localhost/replica:0/task:0/device:P:3", "P", &us));
        double us2 = -1;
        g_assert_true(psim_node_cost_lookup(psim_graph_node(g, i), "GPU:0", "GPU", &us2));
        g_assert_cmpfloat(us, ==, us2);
        cost[i] = us;
    }
    GError *err = NULL;
    double cp = psim_graph_critical_path(g, cost, NULL, NULL, NULL, NULL, &err);
    g_assert_no_error(err);
    return cp;
}

static void test_all_graphs(void)
{
    g_autofree char *dir = g_build_filename(data_dir(), "stg", "50", NULL);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    if (!d) {
        g_test_skip("no shared STG data");
        return;
    }
    int count = 0;
    const char *f;
    while ((f = g_dir_read_name(d))) {
        if (!g_str_has_suffix(f, ".stg"))
            continue;
        g_autofree char *path = g_build_filename(dir, f, NULL);
        g_autofree char *text = NULL;
        g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
        GError *err = NULL;
        g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
        g_assert_no_error(err);
        g_assert_nonnull(g);
        /* 50 tasks plus the dummy entry and exit. */
        g_assert_cmpint(psim_graph_n_nodes(g), ==, 52);
        g_assert_nonnull(psim_graph_node_find(g, "t0"));
        g_assert_nonnull(psim_graph_node_find(g, "t51"));
        g_assert_cmpstr(psim_graph_node(g, 0)->op, ==, "Task");
        double want = trailer_cp(text), got = annotated_cp(g);
        if (got != want)
            g_error("%s: critical path %g, trailer says %g", f, got, want);
        count++;
    }
    g_assert_cmpint(count, ==, 180);
}

static void test_small(void)
{
    /* Two parallel tasks between entry and exit: CP = max(3, 5) = 5; 1 -> 2 makes it 8. */
    const char *text = "2\n0 0 0\n1 3 1 0\n2 5 2 0 1\n3 0 2 1 2\n# CP Length : 8\n";
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load_data("s.stg", PSIM_FORMAT_STG, (const guint8 *)text,
                                                  strlen(text), NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(g), ==, 4);
    g_assert_cmpint(psim_graph_n_edges(g), ==, 5);
    g_assert_cmpfloat(annotated_cp(g), ==, 8);
    g_assert_cmpint(psim_format_detect("x.txt", (const guint8 *)text, strlen(text)), ==, PSIM_FORMAT_STG);
    /* JSON round trip keeps the wildcard costs. */
    g_autofree char *json = psim_export_json(g, NULL);
    g_assert_nonnull(strstr(json, "\"*\": 5"));
    g_autoptr(PsimGraph) g2 = psim_graph_load_data("s.json", PSIM_FORMAT_JSON, (const guint8 *)json,
                                                   strlen(json), NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpfloat(annotated_cp(g2), ==, 8);
}

static void test_errors(void)
{
    static const char *const cases[][2] = {
        {"", "empty"},
        {"x\n", "task count"},
        {"99999999999\n0 0 0\n", "task count"},
        {"1000\n0 0 0\n1 1 1 0\n", "larger than the file"},
        {"1\n0 0 0\n1 2 1 0\n", "expected 3 task lines"},
        {"1\n0 0 0\n2 2 1 0\n2 0 1 1\n", "expected task id 1"},
        {"1\n0 0 0\n1 -2 1 0\n2 0 1 1\n", "node 't1': expected a non-negative integer cost"},
        {"1\n0 0 0\n1 2 5 0\n2 0 1 1\n", "predecessor count"},
        {"1\n0 0 0\n1 2 1 1\n2 0 1 1\n", "predecessor 1 is not an earlier task"},
        {"2\n0 0 0\n1 2 1 0\n2 2 2 0\n3 0 1 2\n", "expected 2 predecessor ids"},
        {"1\n0 0 0\n1 2 1 0 7\n2 0 1 1\n", "trailing text"},
        {"1\n0 0 0\n1 2 1 0\n2 0 1 1\n5 5 5\n", "unexpected text"},
        {"1\n0 0 0\n# CP Length : 0\n", "expected 3 task lines"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        PsimGraph *g = psim_graph_load_data("bad.stg", PSIM_FORMAT_STG, (const guint8 *)cases[i][0],
                                            strlen(cases[i][0]), NULL, &err);
        g_assert_null(g);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!g_str_has_prefix(err->message, "bad.stg: ") || !strstr(err->message, cases[i][1]))
            g_error("case %zu: '%s' lacks '%s'", i, err->message, cases[i][1]);
        g_clear_error(&err);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/stg/all-graphs", test_all_graphs);
    g_test_add_func("/graph/stg/small", test_small);
    g_test_add_func("/graph/stg/errors", test_errors);
    return g_test_run();
}
