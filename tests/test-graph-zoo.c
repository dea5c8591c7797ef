/* Tests of the built-in model zoo: every model builds, has one float32 input and one output,
 * weights are real float32 parameter tensors made deterministically, only ops of the op set are
 * used, the inferred output shapes are the models' documented ones, and the JSON round trip is
 * stable. */
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static const struct {
    const char *name;
    int32_t rank;
    int64_t dims[4];
} expected[] = {
    {"mlp", 2, {64, 10}},
    {"cnn", 2, {1, 10}},
    {"transformer", 3, {2, 16, 64}},
};

/* The foundation issue's op set (graph/ops-*.c registers these). */
static const char *const op_set[] = {
    "Const", "Placeholder", "Identity", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
    "Neg", "Exp", "Log", "Max", "Min", "Clip", "Relu", "Sigmoid", "Tanh", "Erf", "Softmax",
    "LogSoftmax", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
    "LRN", "LayerNormalization", "Concat", "Split", "Slice", "Pad", "Reshape", "Flatten",
    "Transpose", "Squeeze", "Unsqueeze", "Expand", "Gather", "Shape", "ConstantOfShape", "Equal",
    "Where", "Cast", "Sum", "ReduceMean", "ReduceSum", "Dropout", NULL};

static gboolean in_op_set(const char *op)
{
    for (int i = 0; op_set[i]; i++)
        if (!strcmp(op_set[i], op))
            return TRUE;
    return FALSE;
}

static void test_models(void)
{
    int32_t n = 0;
    const char *const *names = psim_zoo_list(&n);
    g_assert_cmpint(n, ==, G_N_ELEMENTS(expected));
    g_assert_null(names[n]);
    for (int32_t i = 0; i < n; i++) {
        g_assert_cmpstr(names[i], ==, expected[i].name);
        g_assert_nonnull(psim_zoo_description(names[i]));
        GError *err = NULL;
        g_autoptr(PsimGraph) g = psim_zoo_make(names[i], &err);
        g_assert_no_error(err);
        g_assert_cmpint(psim_graph_n_inputs(g), ==, 1);
        g_assert_cmpint(psim_graph_n_outputs(g), ==, 1);
        const PsimNode *in = psim_graph_node(g, psim_graph_input(g, 0));
        g_assert_cmpstr(in->op, ==, "Placeholder");
        g_assert_cmpint(in->outputs[0].dtype, ==, PSIM_DTYPE_FLOAT32);
        g_assert_cmpint(psim_shape_elems(in->outputs[0].rank, in->outputs[0].dims), >, 0);
        int n_params = 0;
        for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
            const PsimNode *nd = psim_graph_node(g, v);
            g_assert_true(in_op_set(nd->op));
            g_assert_nonnull(psim_op_lookup(nd->op));
            if (nd->flags & PSIM_NODE_PARAMETER) {
                const PsimAttr *a = psim_node_attr(nd, "value");
                g_assert_nonnull(a);
                g_assert_cmpint(a->type, ==, PSIM_ATTR_TENSOR);
                g_assert_cmpint(a->v.t->dtype, ==, PSIM_DTYPE_FLOAT32);
                g_assert_cmpuint(nd->outputs[0].bytes, ==, a->v.t->nbytes);
                /* Real values: not all equal (a pattern, not a fill). */
                const float *p = a->v.t->data;
                gboolean varied = a->v.t->n_elems == 1;
                for (int64_t k = 1; k < a->v.t->n_elems && !varied; k++)
                    varied = p[k] != p[0];
                g_assert_true(varied);
                n_params++;
            }
        }
        g_assert_cmpint(n_params, >=, 6);
        /* Deterministic: a second build has the same bytes. */
        g_autoptr(PsimGraph) g2 = psim_zoo_make(names[i], &err);
        g_autofree char *j1 = psim_export_json(g, NULL), *j2 = psim_export_json(g2, NULL);
        g_assert_cmpstr(j1, ==, j2);
        /* JSON round trip: import -> export gives identical bytes. */
        g_autoptr(PsimGraph) g3 = psim_graph_load_data("zoo.json", PSIM_FORMAT_JSON, (const guint8 *)j1,
                                                       strlen(j1), NULL, &err);
        g_assert_no_error(err);
        g_autofree char *j3 = psim_export_json(g3, NULL);
        g_assert_cmpstr(j1, ==, j3);
        /* Shape inference gives the documented output shape and a known shape everywhere. */
        PsimPort o = psim_graph_output(g, 0);
        const PsimOutput *out = &psim_graph_node(g, o.node)->outputs[o.index];
        g_assert_cmpint(out->dtype, ==, PSIM_DTYPE_FLOAT32);
        g_assert_cmpint(out->rank, ==, expected[i].rank);
        for (int32_t d = 0; d < out->rank; d++)
            g_assert_cmpint(out->dims[d], ==, expected[i].dims[d]);
        for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
            const PsimNode *nd = psim_graph_node(g, v);
            g_assert_cmpint(psim_shape_elems(nd->outputs[0].rank, nd->outputs[0].dims), >=, 0);
        }
        PsimGraphStats st;
        psim_graph_stats(g, &st);
        g_assert_cmpfloat(st.flops, >, 1e6);
    }
}

static void test_unknown(void)
{
    GError *err = NULL;
    g_assert_null(psim_zoo_make("resnet9000", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "zoo:resnet9000"));
    g_assert_nonnull(strstr(err->message, "mlp"));
    g_clear_error(&err);
    g_assert_null(psim_zoo_description("resnet9000"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/zoo/models", test_models);
    g_test_add_func("/graph/zoo/unknown", test_unknown);
    return g_test_run();
}
