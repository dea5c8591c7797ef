/* Tests of the DOT and GraphML exporters (through igraph): every node and edge is written with
 * its attributes, the device is the assigned one else the requested one, names with markup
 * characters are escaped, and the GraphML is well-formed XML with unique key ids. And of the
 * TF pbtxt export of what placement adds: a plan's Send/Recv pairs as TF's _Send/_Recv, and
 * BiasAdd written back as BiasAdd. */
#include <glib/gstdio.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"
#include "placesim/placer.h"

static int count(const char *s, const char *needle)
{
    int c = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        c++;
    return c;
}

static PsimGraph *make_graph(void)
{
    const char *json =
        "{\"format\": \"placesim.graph/1\", \"name\": \"tiny\", \"nodes\": ["
        "{\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [2, 3]}]},"
        "{\"name\": \"a<&>\\\"b\", \"op\": \"Task\", \"inputs\": [\"x:0\", \"x:0\"], \"outputs\": [{\"bytes\": 7}], \"device\": \"GPU:*\"},"
        "{\"name\": \"c\", \"op\": \"Task\", \"inputs\": [\"a<&>\\\"b:0\", \"^x\"], \"outputs\": [{\"bytes\": 5}],"
        " \"device\": \"CPU:*\", \"assigned_device\": \"/job:localhost/replica:0/task:0/device:CPU:1\"}]}";
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json), NULL, &err);
    g_assert_no_error(err);
    return g;
}

static void test_dot(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *dot = psim_export_dot(g, &err);
    g_assert_no_error(err);
    g_assert_true(g_str_has_prefix(strstr(dot, "digraph"), "digraph {"));
    g_assert_cmpint(count(dot, " -> "), ==, 4);
    g_assert_cmpint(count(dot, "op=Task"), ==, 2);
    g_assert_nonnull(strstr(dot, "device=\"/job:localhost/replica:0/task:0/device:CPU:1\""));
    g_assert_nonnull(strstr(dot, "device=\"GPU:*\""));
    g_assert_nonnull(strstr(dot, "kind=control"));
    g_assert_nonnull(strstr(dot, "bytes=24"));
    /* The quote inside the name is escaped, so the name stays one DOT string. */
    g_assert_nonnull(strstr(dot, "name=\"a<&>\\\"b\""));
}

static void on_start(GMarkupParseContext *ctx, const char *el, const char **names, const char **values,
                     gpointer user, GError **error)
{
    (void)ctx;
    (void)error;
    GHashTable *keys = user;
    if (strcmp(el, "key"))
        return;
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], "id"))
            g_assert_true(g_hash_table_add(keys, g_strdup(values[i])));
}

static void test_graphml(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *xml = psim_export_graphml(g, &err);
    g_assert_no_error(err);
    g_assert_cmpint(count(xml, "<node "), ==, 3);
    g_assert_cmpint(count(xml, "<edge "), ==, 4);
    g_assert_nonnull(strstr(xml, "a&lt;&amp;&gt;&quot;b"));
    g_assert_nonnull(strstr(xml, ">/job:localhost/replica:0/task:0/device:CPU:1<"));
    g_assert_nonnull(strstr(xml, ">control<"));
    g_autoptr(GHashTable) keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GMarkupParser parser = {.start_element = on_start};
    g_autoptr(GMarkupParseContext) ctx = g_markup_parse_context_new(&parser, 0, keys, NULL);
    g_assert_true(g_markup_parse_context_parse(ctx, xml, -1, &err));
    g_assert_true(g_markup_parse_context_end_parse(ctx, &err));
    g_assert_no_error(err);
    g_assert_cmpint(g_hash_table_size(keys), >=, 8);
}

static void test_save(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *dir = g_dir_make_tmp("psim-export-XXXXXX", &err);
    g_assert_no_error(err);
    g_autofree char *path = g_build_filename(dir, "g.graphml", NULL);
    g_assert_true(psim_graph_save(g, path, PSIM_FORMAT_GRAPHML, &err));
    g_autofree char *text = NULL;
    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    g_autofree char *direct = psim_export_graphml(g, &err);
    g_assert_cmpstr(text, ==, direct);
    g_remove(path);
    g_rmdir(dir);
}

/* The text of the node block named `name` in a pbtxt (g_free), or NULL. */
static char *pbtxt_node(const char *text, const char *name)
{
    g_autofree char *needle = g_strdup_printf("node {\n  name: \"%s\"\n", name);
    const char *at = strstr(text, needle);
    if (!at)
        return NULL;
    const char *end = strstr(at, "\n}\n");
    return g_strndup(at, (gsize)(end - at) + 3);
}

/* x on P:0 feeds a on P:1 and is a control input of b on P:1: one data and one control
 * transfer. Exported, they are TF's _Send/_Recv with TF's attrs; a Recv has no inputs; the
 * control transfer sends a dummy Const that waits for x. */
static void test_pbtxt_plan(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("g");
    GError *err = NULL;
    const char *dev[] = {"/job:w/replica:0/task:0/device:P:0", "/job:w/replica:0/task:0/device:P:1"};
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", &err);
    int64_t dims[1] = {4};
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 1, dims);
    psim_graph_node_assigned_set(g, x, dev[0]);
    PsimNode *a = psim_graph_node_add(g, "a", "Relu", &err);
    psim_graph_node_input_add(g, a, (PsimPort){x->id, 0});
    psim_graph_node_assigned_set(g, a, dev[1]);
    PsimNode *b = psim_graph_node_add(g, "b", "NoOp", &err);
    psim_graph_node_control_add(g, b, x->id);
    psim_graph_node_assigned_set(g, b, dev[1]);
    for (int32_t v = 0; v < 3; v++)
        psim_graph_node_cost_set(g, psim_graph_node(g, v), "*", 1);
    g_assert_no_error(err);
    g_assert_true(psim_graph_finalize(g, &err));
    g_autoptr(PsimCluster) c = psim_cluster_new();
    psim_cluster_device_add(c, dev[0], "P", NULL);
    psim_cluster_device_add(c, dev[1], "P", NULL);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlacement) pl = psim_place(ctx, "heft", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = psim_plan_build(ctx, pl, &err);
    g_assert_no_error(err);
    g_assert_cmpint(plan->n_transfers, ==, 2);
    g_autofree char *text = psim_export_pbtxt(plan->graph, &err);
    g_assert_no_error(err);
    g_assert_cmpint(count(text, "op: \"_Send\""), ==, 2);
    g_assert_cmpint(count(text, "op: \"_Recv\""), ==, 2);
    g_assert_cmpint(count(text, "op: \"Send\""), ==, 0);
    g_assert_cmpint(count(text, "key: \"key\""), ==, 0); /* placesim's own attrs stay out */
    const PsimTransfer *data = plan->transfers[0].control ? &plan->transfers[1] : &plan->transfers[0];
    const PsimTransfer *ctl = plan->transfers[0].control ? &plan->transfers[0] : &plan->transfers[1];
    g_autofree char *send = pbtxt_node(text, psim_graph_node(plan->graph, data->send)->name);
    g_autofree char *recv = pbtxt_node(text, psim_graph_node(plan->graph, data->recv)->name);
    g_assert_nonnull(send);
    g_assert_nonnull(recv);
    g_assert_nonnull(strstr(send, "  input: \"x\"\n"));
    g_assert_nonnull(strstr(send, "device: \"/job:w/replica:0/task:0/device:P:0\""));
    g_assert_nonnull(strstr(send, "key: \"T\" value { type: DT_FLOAT }"));
    g_assert_null(strstr(recv, "input:"));
    g_assert_nonnull(strstr(recv, "device: \"/job:w/replica:0/task:0/device:P:1\""));
    g_assert_nonnull(strstr(recv, "key: \"tensor_type\" value { type: DT_FLOAT }"));
    for (int i = 0; i < 2; i++) {
        const char *blk = i ? recv : send;
        g_assert_nonnull(strstr(blk, "key: \"tensor_name\" value { s: \"x:0\" }"));
        g_assert_nonnull(strstr(blk, "key: \"send_device\" value { s: \"/job:w/replica:0/task:0/device:P:0\" }"));
        g_assert_nonnull(strstr(blk, "key: \"recv_device\" value { s: \"/job:w/replica:0/task:0/device:P:1\" }"));
        g_assert_nonnull(strstr(blk, "key: \"send_device_incarnation\" value { i: 1 }"));
        g_assert_nonnull(strstr(blk, "key: \"client_terminated\" value { b: false }"));
    }
    /* a reads the Recv's output; b waits for the control Recv. */
    g_autofree char *an = pbtxt_node(text, "a");
    g_autofree char *want_a = g_strdup_printf("input: \"%s\"", psim_graph_node(plan->graph, data->recv)->name);
    g_assert_nonnull(strstr(an, want_a));
    const char *cs = psim_graph_node(plan->graph, ctl->send)->name;
    g_autofree char *dummy_name = g_strconcat(cs, "/dummy", NULL);
    g_autofree char *dummy = pbtxt_node(text, dummy_name);
    g_assert_nonnull(dummy);
    g_assert_nonnull(strstr(dummy, "op: \"Const\""));
    g_assert_nonnull(strstr(dummy, "input: \"^x\""));
    g_autofree char *csend = pbtxt_node(text, cs);
    g_autofree char *want_c = g_strdup_printf("input: \"%s\"", dummy_name);
    g_assert_nonnull(strstr(csend, want_c));
    g_autofree char *bn = pbtxt_node(text, "b");
    g_autofree char *want_b = g_strdup_printf("input: \"^%s\"", psim_graph_node(plan->graph, ctl->recv)->name);
    g_assert_nonnull(strstr(bn, want_b));
    /* Every node is placed, and the text reads back. */
    g_assert_cmpint(count(text, "  device: "), ==, count(text, "node {\n"));
    g_autoptr(PsimGraph) h = psim_graph_load_data("plan.pbtxt", PSIM_FORMAT_TF_PBTXT,
                                                  (const guint8 *)text, strlen(text), NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(h), ==, psim_graph_n_nodes(plan->graph) + 1);
}

/* BiasAdd (NHWC, read as Add) is written back as BiasAdd; data_format is on BiasAdd only. */
static void test_pbtxt_bias_add(void)
{
    const char *text =
        "node { name: 'x' op: 'Placeholder' attr { key: 'dtype' value { type: DT_FLOAT } }\n"
        "  attr { key: 'shape' value { shape { dim { size: 2 } dim { size: 3 } } } } }\n"
        "node { name: 'b' op: 'Const' attr { key: 'dtype' value { type: DT_FLOAT } } attr { key: 'value'\n"
        "  value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 3 } } float_val: 1 } } } }\n"
        "node { name: 'ba' op: 'BiasAdd' input: 'x' input: 'b'\n"
        "  attr { key: 'data_format' value { s: 'NHWC' } } attr { key: 'T' value { type: DT_FLOAT } } }\n"
        "node { name: 'bd' op: 'BiasAdd' input: 'ba' input: 'b' }\n"
        "node { name: 'add' op: 'AddV2' input: 'bd' input: 'b' }\n";
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load_data("t.pbtxt", PSIM_FORMAT_TF_PBTXT, (const guint8 *)text,
                                                  strlen(text), NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpstr(psim_graph_node_find(g, "ba")->op, ==, "Add");
    g_autofree char *out = psim_export_pbtxt(g, &err);
    g_assert_no_error(err);
    g_autofree char *ba = pbtxt_node(out, "ba"), *bd = pbtxt_node(out, "bd"), *add = pbtxt_node(out, "add");
    g_assert_nonnull(strstr(ba, "op: \"BiasAdd\""));
    g_assert_nonnull(strstr(ba, "key: \"data_format\" value { s: \"NHWC\" }"));
    g_assert_nonnull(strstr(bd, "op: \"BiasAdd\""));
    g_assert_nonnull(strstr(add, "op: \"AddV2\""));
    g_assert_null(strstr(add, "data_format"));
    g_assert_cmpint(count(out, "data_format"), ==, 2);
    g_assert_cmpint(count(out, "op: \"AddV2\""), ==, 1);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/export/dot", test_dot);
    g_test_add_func("/graph/export/graphml", test_graphml);
    g_test_add_func("/graph/export/save", test_save);
    g_test_add_func("/graph/export/pbtxt-plan", test_pbtxt_plan);
    g_test_add_func("/graph/export/pbtxt-bias-add", test_pbtxt_bias_add);
    return g_test_run();
}
