/* Tests of the graph's name index and input arrays at scale: 300,000 nodes are found by name,
 * duplicates are refused at any size, generated names do not collide, and inputs added one by
 * one past every growth step keep their values. */
#include <string.h>

#include "placesim/graph.h"

static void test_names(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("idx");
    GError *err = NULL;
    char name[32];
    const int n = 300000;
    for (int i = 0; i < n; i++) {
        g_snprintf(name, sizeof name, i % 3 ? "layer%d/conv" : "n%d", i);
        PsimNode *v = psim_graph_node_add(g, name, "Task", &err);
        g_assert_no_error(err);
        g_assert_cmpint(v->id, ==, i);
    }
    for (int i = 0; i < n; i += 7) {
        g_snprintf(name, sizeof name, i % 3 ? "layer%d/conv" : "n%d", i);
        PsimNode *v = psim_graph_node_find(g, name);
        g_assert_nonnull(v);
        g_assert_cmpint(v->id, ==, i);
        g_assert_cmpstr(v->name, ==, name);
        g_assert_null(psim_graph_node_add(g, name, "Task", &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_nonnull(strstr(err->message, "two nodes have this name"));
        g_clear_error(&err);
    }
    g_assert_cmpint(psim_graph_n_nodes(g), ==, n);
    g_assert_null(psim_graph_node_find(g, "n1"));
    g_assert_null(psim_graph_node_find(g, ""));
    g_assert_cmpstr(psim_graph_unique_name(g, "n0"), ==, "n0_1");
    g_assert_cmpstr(psim_graph_unique_name(g, "fresh"), ==, "fresh");
    g_assert_nonnull(psim_graph_node_add(g, "n0_1", "Task", &err));
    g_assert_cmpstr(psim_graph_unique_name(g, "n0"), ==, "n0_2");
    g_autoptr(PsimGraph) empty = psim_graph_new(NULL);
    g_assert_null(psim_graph_node_find(empty, "x"));
}

static void test_inputs(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("in");
    GError *err = NULL;
    PsimNode *src = psim_graph_node_add(g, "src", "Task", &err);
    psim_graph_node_outputs_set(g, src, 1);
    PsimNode *dst = psim_graph_node_add(g, "dst", "Task", &err);
    for (int32_t k = 0; k < 37; k++) {
        psim_graph_node_input_add(g, dst, (PsimPort){src->id, 0});
        for (int32_t j = 0; j <= k; j++)
            g_assert_cmpint(dst->inputs[j].node, ==, src->id);
    }
    int32_t ctl[9];
    for (int32_t k = 0; k < 9; k++) {
        char name[16];
        g_snprintf(name, sizeof name, "c%d", k);
        ctl[k] = psim_graph_node_add(g, name, "Task", &err)->id;
        psim_graph_node_control_add(g, dst, ctl[k]);
        psim_graph_node_control_add(g, dst, ctl[k]); /* a repeat is ignored */
    }
    g_assert_cmpint(dst->n_inputs, ==, 37);
    g_assert_cmpint(dst->n_controls, ==, 9);
    for (int32_t k = 0; k < 9; k++)
        g_assert_cmpint(dst->controls[k], ==, ctl[k]);
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_edges(g), ==, 46);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/index/names", test_names);
    g_test_add_func("/graph/index/inputs", test_inputs);
    return g_test_run();
}
