/* Tests of the PipeDream importer: the 14 shared profiles import with their measured times and
 * sizes (checked against an independent parse of the files), the training expansion has one
 * backward node per layer in reverse order with gradient edges, and bad files give errors. */
#include <math.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static const char *data_dir(void)
{
    const char *d = g_getenv("PSIM_DATA");
    return d ? d : "../../shared/data";
}

/* An independent reading of a profile with GRegex: layers and edges. */
typedef struct {
    char *name;
    double fwd, bwd, act, param;
    gboolean input;
} RefLayer;

typedef struct {
    GPtrArray *layers; /* RefLayer* */
    GPtrArray *edges;  /* char* "a b" */
} Ref;

static void ref_free(Ref *r)
{
    for (guint i = 0; i < r->layers->len; i++) {
        RefLayer *l = g_ptr_array_index(r->layers, i);
        g_free(l->name);
        g_free(l);
    }
    g_ptr_array_free(r->layers, TRUE);
    g_ptr_array_free(r->edges, TRUE);
}

static double sum_list(const char *s)
{
    double t = 0;
    g_auto(GStrv) parts = g_strsplit_set(s, "[]; ", -1);
    for (int i = 0; parts[i]; i++)
        if (*parts[i])
            t += g_ascii_strtod(parts[i], NULL);
    return t;
}

static void ref_read(const char *text, Ref *r)
{
    r->layers = g_ptr_array_new();
    r->edges = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GRegex) node_re = g_regex_new(
        "^(\\S+) -- (.*) -- forward_compute_time=([^,]+), backward_compute_time=([^,]+), "
        "activation_size=([^,]+), parameter_size=(.+)$", 0, 0, NULL);
    g_autoptr(GRegex) edge_re = g_regex_new("^\\t(\\S+) -- (\\S+)$", 0, 0, NULL);
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (int i = 0; lines[i]; i++) {
        g_autoptr(GMatchInfo) m = NULL;
        if (g_regex_match(node_re, lines[i], 0, &m)) {
            RefLayer *l = g_new0(RefLayer, 1);
            l->name = g_match_info_fetch(m, 1);
            g_autofree char *repr = g_match_info_fetch(m, 2);
            l->input = g_str_has_prefix(repr, "Input");
            g_autofree char *f = g_match_info_fetch(m, 3), *b = g_match_info_fetch(m, 4),
                            *a = g_match_info_fetch(m, 5), *p = g_match_info_fetch(m, 6);
            l->fwd = g_ascii_strtod(f, NULL);
            l->bwd = g_ascii_strtod(b, NULL);
            l->act = sum_list(a);
            l->param = g_ascii_strtod(p, NULL);
            g_ptr_array_add(r->layers, l);
            continue;
        }
        g_clear_pointer(&m, g_match_info_free);
        if (g_regex_match(edge_re, lines[i], 0, &m)) {
            g_autofree char *a = g_match_info_fetch(m, 1), *b = g_match_info_fetch(m, 2);
            g_ptr_array_add(r->edges, g_strconcat(a, " ", b, NULL));
            continue;
        }
        g_assert_cmpstr(g_strstrip(lines[i]), ==, "");
    }
}

static gboolean has_input(const PsimNode *n, int32_t src, int32_t index)
{
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k].node == src && n->inputs[k].index == index)
            return TRUE;
    return FALSE;
}

static void check_profile(const char *path, const char *text)
{
    Ref r;
    ref_read(text, &r);
    g_assert_cmpuint(r.layers->len, >, 0);
    int n_params = 0, n_inputs = 0;
    double bwd_total = 0;
    for (guint i = 0; i < r.layers->len; i++) {
        RefLayer *l = g_ptr_array_index(r.layers, i);
        n_params += l->param > 0;
        n_inputs += l->input;
        bwd_total += l->input ? 0 : l->bwd * 1000;
    }

    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(g), ==, (int)r.layers->len + n_params);
    g_assert_cmpint(psim_graph_n_edges(g), ==, (int)r.edges->len + n_params);
    g_assert_cmpint(psim_graph_n_inputs(g), ==, n_inputs);
    PsimGraphStats st;
    psim_graph_stats(g, &st);
    double want_params = 0;
    for (guint i = 0; i < r.layers->len; i++) {
        RefLayer *l = g_ptr_array_index(r.layers, i);
        PsimNode *v = psim_graph_node_find(g, l->name);
        g_assert_nonnull(v);
        g_assert_cmpstr(v->op, ==, l->input ? "Placeholder" : "Task");
        double us = -1;
        g_assert_true(psim_node_cost_lookup(v, "/job:w/replica:0/task:0/device:GPU:1", "GPU", &us));
        g_assert_cmpfloat_with_epsilon(us, l->fwd * 1000, 1e-9 * (1 + us));
        g_assert_cmpuint(v->outputs[0].bytes, ==, (uint64_t)l->act);
        want_params += l->param;
        g_autofree char *pname = g_strconcat(l->name, "/param", NULL);
        PsimNode *p = psim_graph_node_find(g, pname);
        g_assert_true((p != NULL) == (l->param > 0));
        if (p) {
            g_assert_true(p->flags & PSIM_NODE_PARAMETER);
            g_assert_cmpuint(p->outputs[0].bytes, ==, (uint64_t)l->param);
            g_assert_true(has_input(v, p->id, 0));
        }
    }
    g_assert_cmpfloat(st.param_bytes, ==, want_params);
    for (guint i = 0; i < r.edges->len; i++) {
        g_auto(GStrv) ab = g_strsplit(g_ptr_array_index(r.edges, i), " ", 2);
        PsimNode *a = psim_graph_node_find(g, ab[0]), *b = psim_graph_node_find(g, ab[1]);
        g_assert_true(a && b && has_input(b, a->id, 0));
    }

    /* Training: a backward node per non-input layer, created in reverse topological order,
     * costed with the backward time, reading the forward activation and the gradient from each
     * successor's backward node (through the port for that input). */
    PsimImportOptions opts = {.training = TRUE};
    g_autoptr(PsimGraph) t = psim_graph_load(path, &opts, &err);
    g_assert_no_error(err);
    int n_layers = (int)r.layers->len;
    g_assert_cmpint(psim_graph_n_nodes(t), ==, 2 * n_layers - n_inputs + n_params);
    double got_bwd = 0;
    for (int32_t i = 0; i < psim_graph_n_nodes(t); i++) {
        const PsimNode *v = psim_graph_node(t, i);
        if (g_str_has_suffix(v->name, "/backward")) {
            double us = 0;
            g_assert_true(psim_node_cost_lookup(v, NULL, "GPU", &us));
            got_bwd += us;
        }
    }
    g_assert_cmpfloat_with_epsilon(got_bwd, bwd_total, 1e-6 * (1 + bwd_total));
    for (guint i = 0; i < r.edges->len; i++) {
        g_auto(GStrv) ab = g_strsplit(g_ptr_array_index(r.edges, i), " ", 2);
        PsimNode *a = psim_graph_node_find(t, ab[0]), *b = psim_graph_node_find(t, ab[1]);
        g_autofree char *ba = g_strconcat(ab[0], "/backward", NULL),
                        *bb = g_strconcat(ab[1], "/backward", NULL);
        PsimNode *bwa = psim_graph_node_find(t, ba), *bwb = psim_graph_node_find(t, bb);
        g_assert_nonnull(bwb);
        g_assert_true(has_input(bwb, b->id, 0));
        if (!bwa) {
            g_assert_cmpstr(a->op, ==, "Placeholder");
            continue;
        }
        g_assert_cmpint(bwb->id, <, bwa->id);
        int32_t k = -1;
        for (int32_t j = 0; j < b->n_inputs; j++)
            if (b->inputs[j].node == a->id)
                k = j;
        g_assert_cmpint(k, >=, 0);
        g_assert_true(has_input(bwa, bwb->id, k));
        g_assert_cmpuint(bwb->outputs[k].bytes, ==, a->outputs[0].bytes);
    }
    /* The training step is longer than the forward pass alone. */
    int32_t nn = psim_graph_n_nodes(t);
    g_autofree double *cost = g_new0(double, nn);
    for (int32_t i = 0; i < nn; i++)
        psim_node_cost_lookup(psim_graph_node(t, i), NULL, "GPU", &cost[i]);
    double cp_t = psim_graph_critical_path(t, cost, NULL, NULL, NULL, NULL, &err);
    double cp_f = psim_graph_critical_path(g, cost, NULL, NULL, NULL, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpfloat(cp_t, >, cp_f);
    ref_free(&r);
}

static void test_all_profiles(void)
{
    g_autofree char *dir = g_build_filename(data_dir(), "pipedream", NULL);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    if (!d) {
        g_test_skip("no shared PipeDream data");
        return;
    }
    int count = 0;
    const char *f;
    while ((f = g_dir_read_name(d))) {
        if (!g_str_has_suffix(f, ".txt") || !strcmp(f, "LICENSE.txt"))
            continue;
        g_autofree char *path = g_build_filename(dir, f, NULL);
        g_autofree char *text = NULL;
        g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
        g_test_message("%s", f);
        check_profile(path, text);
        count++;
    }
    g_assert_cmpint(count, ==, 14);
}

static void test_small(void)
{
    const char *text =
        "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=64.0, parameter_size=0.000\n"
        "node2 -- LSTM(8, 8) -- forward_compute_time=1.5, backward_compute_time=2.25, activation_size=[16.0; 8.0; 8.0], parameter_size=100.000\n"
        "node3 -- Linear(8, 2) -- forward_compute_time=0.5, backward_compute_time=1.0, activation_size=8.0, parameter_size=0.000\n"
        "\tnode1 -- node2\n\tnode2 -- node3\n\tnode1 -- node3\n";
    GError *err = NULL;
    g_assert_cmpint(psim_format_detect("x", (const guint8 *)text, strlen(text)), ==, PSIM_FORMAT_PIPEDREAM);
    PsimImportOptions opts = {.training = TRUE};
    g_autoptr(PsimGraph) g = psim_graph_load_data("p.txt", PSIM_FORMAT_PIPEDREAM, (const guint8 *)text,
                                                  strlen(text), &opts, &err);
    g_assert_no_error(err);
    PsimNode *n2 = psim_graph_node_find(g, "node2");
    g_assert_cmpuint(n2->outputs[0].bytes, ==, 32);
    const int64_t *parts;
    g_assert_cmpint(psim_node_attr_ints(n2, "activation_sizes", &parts), ==, 3);
    g_assert_cmpint(parts[0], ==, 16);
    g_assert_cmpstr(psim_node_attr_string(n2, "layer", NULL), ==, "LSTM(8, 8)");
    /* Backward of node3 (inputs node2, node1): outputs are gradients of 32 and 64 bytes. */
    PsimNode *b3 = psim_graph_node_find(g, "node3/backward");
    PsimNode *b2 = psim_graph_node_find(g, "node2/backward");
    g_assert_cmpint(b3->n_outputs, ==, 2);
    g_assert_cmpuint(b3->outputs[0].bytes, ==, 32);
    g_assert_cmpuint(b3->outputs[1].bytes, ==, 64);
    /* node2's backward: gradient to node1 and the weight gradient (a graph output). */
    g_assert_cmpint(b2->n_outputs, ==, 2);
    g_assert_cmpuint(b2->outputs[1].bytes, ==, 100);
    g_assert_true(has_input(b2, b3->id, 0));
    g_assert_true(has_input(b2, n2->id, 0));
    g_assert_true(has_input(b2, psim_graph_node_find(g, "node2/param")->id, 0));
    gboolean found = FALSE;
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort p = psim_graph_output(g, i);
        found |= p.node == b2->id && p.index == 1;
    }
    g_assert_true(found);
    /* Critical path: input 0, fwd 1500 + 500, bwd 1000 + 2250. */
    int32_t n = psim_graph_n_nodes(g);
    g_autofree double *cost = g_new0(double, n);
    for (int32_t i = 0; i < n; i++)
        psim_node_cost_lookup(psim_graph_node(g, i), NULL, "GPU", &cost[i]);
    g_assert_cmpfloat(psim_graph_critical_path(g, cost, NULL, NULL, NULL, NULL, &err), ==, 5250);
}

static void test_errors(void)
{
    static const char *const ok_fields = "forward_compute_time=1, backward_compute_time=1, activation_size=4, parameter_size=0";
    struct {
        const char *text, *want;
    } cases[] = {
        {"", "no node lines"},
        {"hello\n", "line 1: expected"},
        {"a -- L -- forward_compute_time=1, backward_compute_time=1, activation_size=4\n", "'parameter_size' is missing"},
        {"a -- L -- forward_compute_time=x, backward_compute_time=1, activation_size=4, parameter_size=0\n", "node 'a': field 'forward_compute_time'"},
        {"a -- L -- forward_compute_time=1, backward_compute_time=-1, activation_size=4, parameter_size=0\n", "'backward_compute_time' must be"},
        {"a -- L -- forward_compute_time=1, backward_compute_time=1, activation_size=1e300, parameter_size=0\n", "'activation_size' must be"},
        {"a -- L -- forward_compute_time=1, backward_compute_time=1, activation_size=[1; nan], parameter_size=0\n", "'activation_size' must be"},
        {"a -- L -- forward_compute_time=1, backward_compute_time=1, activation_size=4, parameter_size=inf\n", "'parameter_size' must be"},
        {"a -- L -- junk\n", "key=value"},
        {NULL, "defined twice"},
        {NULL, "names a missing node 'c'"},
        {NULL, "listed twice"},
        {NULL, "cycle"},
        {NULL, "input layer"},
        {"a b -- L -- x=1\n", "bad node name"},
        {"a -- L\xff\xfe -- forward_compute_time=1\n", "line 1: not UTF-8 text"},
    };
    g_autofree char *dup = g_strdup_printf("a -- L -- %s\na -- L -- %s\n", ok_fields, ok_fields);
    g_autofree char *missing = g_strdup_printf("a -- L -- %s\n\ta -- c\n", ok_fields);
    g_autofree char *twice = g_strdup_printf("a -- L -- %s\nb -- L -- %s\n\ta -- b\n\ta -- b\n", ok_fields, ok_fields);
    g_autofree char *cycle = g_strdup_printf("a -- L -- %s\nb -- L -- %s\n\ta -- b\n\tb -- a\n", ok_fields, ok_fields);
    g_autofree char *input = g_strdup_printf("a -- L -- %s\nb -- Input -- %s\n\ta -- b\n", ok_fields, ok_fields);
    cases[9].text = dup;
    cases[10].text = missing;
    cases[11].text = twice;
    cases[12].text = cycle;
    cases[13].text = input;
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
        for (int training = 0; training < 2; training++) {
            GError *err = NULL;
            PsimImportOptions opts = {.training = training};
            PsimGraph *g = psim_graph_load_data("bad.txt", PSIM_FORMAT_PIPEDREAM, (const guint8 *)cases[i].text,
                                                strlen(cases[i].text), &opts, &err);
            g_assert_null(g);
            g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
            if (!g_str_has_prefix(err->message, "bad.txt: ") || !strstr(err->message, cases[i].want))
                g_error("case %zu: '%s' lacks '%s'", i, err->message, cases[i].want);
            g_clear_error(&err);
        }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/pipedream/all-profiles", test_all_profiles);
    g_test_add_func("/graph/pipedream/small", test_small);
    g_test_add_func("/graph/pipedream/errors", test_errors);
    return g_test_run();
}
