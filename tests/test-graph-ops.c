/* Tests of the op set: shape and dtype inference checked by hand for every op (broadcasting,
 * Conv pads/strides/dilations/groups/auto_pad, pooling ceil_mode, Reshape 0/-1, Slice with
 * negative steps, Split), rejection of inconsistent shapes, FLOP counts, folding of shape
 * arithmetic, and the prune and CSE passes. */
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define U PSIM_DIM_UNKNOWN

static PsimNode *input(PsimGraph *g, const char *name, PsimDType dt, int32_t rank,
                       const int64_t *dims)
{
    GError *err = NULL;
    PsimNode *n = psim_graph_node_add(g, name, "Placeholder", &err);
    g_assert_no_error(err);
    psim_graph_output_set(g, n, 0, dt, rank, dims);
    return n;
}

static PsimNode *fin(PsimGraph *g, const char *name, int32_t rank, const int64_t *dims)
{
    return input(g, name, PSIM_DTYPE_FLOAT32, rank, dims);
}

/* A Const holding int64 values (1-D of n values, or a scalar when n < 0). */
static PsimNode *ints(PsimGraph *g, const char *name, int32_t n, const int64_t *v)
{
    GError *err = NULL;
    int64_t len = n < 0 ? 1 : n;
    g_autoptr(PsimTensor) t = psim_tensor_new(PSIM_DTYPE_INT64, n < 0 ? 0 : 1, &len, &err);
    g_assert_no_error(err);
    memcpy(t->data, v, sizeof(int64_t) * (size_t)len);
    PsimNode *c = psim_graph_node_add(g, name, "Const", &err);
    g_assert_no_error(err);
    psim_graph_node_attr_set_tensor(g, c, "value", t);
    return c;
}

/* A node with inputs given as space-separated refs ("" for an absent optional input: "-"). */
static PsimNode *node(PsimGraph *g, const char *name, const char *op, const char *ins)
{
    GError *err = NULL;
    PsimNode *n = psim_graph_node_add(g, name, op, &err);
    g_assert_no_error(err);
    g_auto(GStrv) parts = g_strsplit(ins, " ", -1);
    for (int i = 0; parts[i]; i++) {
        if (!*parts[i])
            continue;
        if (!strcmp(parts[i], "-"))
            psim_graph_node_input_add(g, n, (PsimPort){-1, 0});
        else
            psim_graph_node_input_add_ref(g, n, parts[i]);
    }
    return n;
}

/* Finalize, fold and infer, as psim_graph_load_data does. */
static gboolean run(PsimGraph *g, GError **err)
{
    return psim_graph_finalize(g, err) && psim_graph_fold_constants(g, err) >= 0 &&
           psim_graph_infer_shapes(g, err);
}

static void ok(PsimGraph *g)
{
    GError *err = NULL;
    gboolean r = run(g, &err);
    g_assert_no_error(err);
    g_assert_true(r);
}

/* The run fails with an error naming `who` and containing `what`. */
static void fails(PsimGraph *g, const char *who, const char *what)
{
    GError *err = NULL;
    g_assert_false(run(g, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_autofree char *quoted = g_strdup_printf("node '%s'", who);
    if (!strstr(err->message, quoted) || !strstr(err->message, what))
        g_error("error '%s' lacks %s or '%s'", err->message, quoted, what);
    g_clear_error(&err);
}

static void shape_is(PsimGraph *g, const char *name, int32_t k, int32_t rank, const int64_t *dims)
{
    const PsimNode *n = psim_graph_node_find(g, name);
    g_assert_nonnull(n);
    g_assert_cmpint(k, <, n->n_outputs);
    const PsimOutput *o = &n->outputs[k];
    if (o->rank != rank)
        g_error("%s:%d has rank %d, expected %d", name, k, o->rank, rank);
    for (int32_t i = 0; i < rank; i++)
        if (o->dims[i] != dims[i])
            g_error("%s:%d dim %d is %" G_GINT64_FORMAT ", expected %" G_GINT64_FORMAT, name, k, i,
                    o->dims[i], dims[i]);
}

static PsimDType dtype_of(PsimGraph *g, const char *name, int32_t k)
{
    return psim_graph_node_find(g, name)->outputs[k].dtype;
}

static void set_ints(PsimGraph *g, const char *name, const char *attr, int32_t n, const int64_t *v)
{
    psim_graph_node_attr_set_ints(g, psim_graph_node_find(g, name), attr, n, v);
}

static void set_int(PsimGraph *g, const char *name, const char *attr, int64_t v)
{
    psim_graph_node_attr_set_int(g, psim_graph_node_find(g, name), attr, v);
}

/* ---- elementwise and broadcasting ---- */

static void test_broadcast(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "a", 3, D(2, 3, 4));
    fin(g, "b", 2, D(3, 1));
    fin(g, "c", 2, D(U, 3));
    fin(g, "d", 2, D(4, 1));
    fin(g, "e", 3, D(5, 1, 3));
    fin(g, "f", 3, D(1, 4, 1));
    fin(g, "s", 0, NULL);
    input(g, "cond", PSIM_DTYPE_BOOL, 2, D(2, 1));
    fin(g, "row", 2, D(1, 3));
    node(g, "add", "Add", "a b");
    node(g, "cd", "Sub", "c d");
    node(g, "mul", "Mul", "e f");
    node(g, "div", "Div", "a s");
    node(g, "pow", "Pow", "a s");
    node(g, "eq", "Equal", "e f");
    node(g, "less", "Less", "a b");
    node(g, "where", "Where", "cond row s");
    node(g, "sum3", "Sum", "e f s");
    node(g, "max", "Max", "a b");
    node(g, "min", "Min", "b");
    node(g, "relu", "Relu", "a");
    node(g, "sqrt", "Sqrt", "e");
    node(g, "neg", "Neg", "e");
    node(g, "exp", "Exp", "e");
    node(g, "log", "Log", "e");
    node(g, "sig", "Sigmoid", "e");
    node(g, "tanh", "Tanh", "e");
    node(g, "erf", "Erf", "e");
    node(g, "not", "Not", "cond");
    node(g, "and", "And", "cond not");
    node(g, "clip", "Clip", "a - s");
    PsimNode *cast = node(g, "cast", "Cast", "a");
    psim_graph_node_attr_set_int(g, cast, "to", PSIM_DTYPE_INT64);
    ok(g);
    shape_is(g, "add", 0, 3, D(2, 3, 4));
    shape_is(g, "cd", 0, 2, D(4, 3));
    shape_is(g, "mul", 0, 3, D(5, 4, 3));
    shape_is(g, "div", 0, 3, D(2, 3, 4));
    shape_is(g, "pow", 0, 3, D(2, 3, 4));
    shape_is(g, "eq", 0, 3, D(5, 4, 3));
    g_assert_cmpint(dtype_of(g, "eq", 0), ==, PSIM_DTYPE_BOOL);
    g_assert_cmpint(dtype_of(g, "less", 0), ==, PSIM_DTYPE_BOOL);
    g_assert_cmpint(dtype_of(g, "add", 0), ==, PSIM_DTYPE_FLOAT32);
    shape_is(g, "where", 0, 2, D(2, 3));
    g_assert_cmpint(dtype_of(g, "where", 0), ==, PSIM_DTYPE_FLOAT32);
    shape_is(g, "sum3", 0, 3, D(5, 4, 3));
    shape_is(g, "max", 0, 3, D(2, 3, 4));
    shape_is(g, "min", 0, 2, D(3, 1));
    shape_is(g, "relu", 0, 3, D(2, 3, 4));
    const char *unary[] = {"sqrt", "neg", "exp", "log", "sig", "tanh", "erf"};
    for (size_t i = 0; i < G_N_ELEMENTS(unary); i++)
        shape_is(g, unary[i], 0, 3, D(5, 1, 3));
    g_assert_cmpint(dtype_of(g, "not", 0), ==, PSIM_DTYPE_BOOL);
    shape_is(g, "and", 0, 2, D(2, 1));
    shape_is(g, "clip", 0, 3, D(2, 3, 4));
    shape_is(g, "cast", 0, 3, D(2, 3, 4));
    g_assert_cmpint(dtype_of(g, "cast", 0), ==, PSIM_DTYPE_INT64);
    /* bytes follow the inferred shape and dtype */
    g_assert_cmpuint(psim_graph_node_find(g, "cast")->outputs[0].bytes, ==, 24 * 8);
    g_assert_cmpuint(psim_graph_node_find(g, "eq")->outputs[0].bytes, ==, 60);
}

static void test_broadcast_errors(void)
{
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(2, 3));
        fin(g, "b", 1, D(4));
        node(g, "bad_add", "Add", "a b");
        fails(g, "bad_add", "broadcast");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(2, 3));
        fin(g, "b", 2, D(2, 1));
        node(g, "bad_sum", "Sum", "a b b a a");
        ok(g); /* consistent */
        fin(g, "c", 2, D(3, 3));
        node(g, "bad_sum2", "Sum", "a b c");
        fails(g, "bad_sum2", "broadcast");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(2, 3));
        node(g, "cast_no_to", "Cast", "a");
        fails(g, "cast_no_to", "to");
    }
}

static void test_unknown_inputs(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", PSIM_RANK_UNKNOWN, NULL);
    fin(g, "w", 2, D(4, 5));
    fin(g, "img", 4, D(U, 3, U, U));
    fin(g, "k", 4, D(8, 3, 3, 3));
    node(g, "mm", "MatMul", "x w");
    node(g, "add", "Add", "x w");
    node(g, "conv", "Conv", "img k");
    node(g, "relu", "Relu", "x");
    node(g, "t", "Transpose", "x");
    node(g, "r", "Reshape", "x x"); /* shape computed at run time */
    ok(g);
    g_assert_cmpint(psim_graph_node_find(g, "mm")->outputs[0].rank, ==, PSIM_RANK_UNKNOWN);
    g_assert_cmpint(dtype_of(g, "mm", 0), ==, PSIM_DTYPE_FLOAT32);
    g_assert_cmpint(psim_graph_node_find(g, "add")->outputs[0].rank, ==, PSIM_RANK_UNKNOWN);
    shape_is(g, "conv", 0, 4, D(U, 8, U, U));
    g_assert_cmpint(psim_graph_node_find(g, "r")->outputs[0].rank, ==, PSIM_RANK_UNKNOWN);
    g_assert_cmpuint(psim_graph_node_find(g, "conv")->outputs[0].bytes, ==, 0);
}

/* ---- MatMul and Gemm ---- */

static void test_matmul(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "a", 3, D(2, 3, 4));
    fin(g, "b", 2, D(4, 5));
    fin(g, "v", 1, D(4));
    fin(g, "m", 2, D(3, 4));
    fin(g, "p", 4, D(2, 1, 3, 4));
    fin(g, "q", 3, D(5, 4, 6));
    fin(g, "bt", 2, D(6, 4));
    node(g, "batched", "MatMul", "a b");
    node(g, "vec_mat", "MatMul", "v b");
    node(g, "mat_vec", "MatMul", "m v");
    node(g, "bcast", "MatMul", "p q");
    PsimNode *tf = node(g, "tf", "MatMul", "m bt");
    psim_graph_node_attr_set_bool(g, tf, "transpose_b", TRUE);
    fin(g, "ga", 2, D(4, 3));
    fin(g, "gb", 2, D(5, 4));
    fin(g, "gc", 1, D(5));
    fin(g, "gc2", 2, D(3, 1));
    PsimNode *gemm = node(g, "gemm", "Gemm", "ga gb gc");
    psim_graph_node_attr_set_int(g, gemm, "transA", 1);
    psim_graph_node_attr_set_int(g, gemm, "transB", 1);
    PsimNode *gemm2 = node(g, "gemm2", "Gemm", "ga gb gc2");
    psim_graph_node_attr_set_int(g, gemm2, "transA", 1);
    psim_graph_node_attr_set_int(g, gemm2, "transB", 1);
    ok(g);
    shape_is(g, "batched", 0, 3, D(2, 3, 5));
    shape_is(g, "vec_mat", 0, 1, D(5));
    shape_is(g, "mat_vec", 0, 1, D(3));
    shape_is(g, "bcast", 0, 4, D(2, 5, 3, 6));
    shape_is(g, "tf", 0, 2, D(3, 6));
    shape_is(g, "gemm", 0, 2, D(3, 5));
    shape_is(g, "gemm2", 0, 2, D(3, 5));

    /* FLOPs: 2 m n k per product. */
    PsimOpCount c;
    psim_graph_node_count(g, psim_graph_node_find(g, "batched"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * 2 * 3 * 5 * 4);
    g_assert_cmpuint(c.bytes_read, ==, (24 + 20) * 4);
    g_assert_cmpuint(c.bytes_written, ==, 30 * 4);
    psim_graph_node_count(g, psim_graph_node_find(g, "bcast"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * 2 * 5 * 3 * 6 * 4);
    psim_graph_node_count(g, psim_graph_node_find(g, "gemm"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * 3 * 5 * 4 + 3 * 5);
}

static void test_matmul_errors(void)
{
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(3, 4));
        fin(g, "b", 2, D(5, 6));
        node(g, "mm", "MatMul", "a b");
        fails(g, "mm", "inner dimensions");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 3, D(2, 3, 4));
        fin(g, "b", 3, D(3, 4, 5));
        node(g, "mm_batch", "MatMul", "a b");
        fails(g, "mm_batch", "broadcast");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(4, 3));
        fin(g, "b", 2, D(4, 5));
        fin(g, "c", 1, D(2));
        node(g, "gemm_c", "Gemm", "a b c");
        set_int(g, "gemm_c", "transA", 1);
        fails(g, "gemm_c", "broadcast");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(4, 3));
        fin(g, "b", 2, D(4, 5));
        node(g, "gemm_k", "Gemm", "a b");
        fails(g, "gemm_k", "inner dimensions");
    }
}

/* ---- Conv and pooling ---- */

static void test_conv(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 4, D(1, 3, 32, 32));
    fin(g, "w", 4, D(8, 3, 3, 3));
    fin(g, "bias", 1, D(8));
    node(g, "same", "Conv", "x w bias");
    set_ints(g, "same", "pads", 4, D(1, 1, 1, 1));
    node(g, "stride2", "Conv", "x w");
    set_ints(g, "stride2", "strides", 2, D(2, 2));
    node(g, "dil2", "Conv", "x w");
    set_ints(g, "dil2", "dilations", 2, D(2, 2));
    node(g, "mixed", "Conv", "x w");
    set_ints(g, "mixed", "pads", 4, D(0, 1, 2, 3));
    set_ints(g, "mixed", "strides", 2, D(3, 2));
    set_ints(g, "mixed", "kernel_shape", 2, D(3, 3));
    fin(g, "xg", 4, D(1, 4, 10, 10));
    fin(g, "wg", 4, D(6, 2, 3, 3));
    node(g, "grouped", "Conv", "xg wg");
    set_int(g, "grouped", "group", 2);
    fin(g, "x7", 4, D(2, 3, 7, 7));
    fin(g, "x7w", 4, D(4, 3, 3, 3));
    node(g, "upper", "Conv", "x7 x7w");
    psim_graph_node_attr_set_string(g, psim_graph_node_find(g, "upper"), "auto_pad", "SAME_UPPER");
    set_ints(g, "upper", "strides", 2, D(2, 2));
    node(g, "lower", "Conv", "x7 x7w");
    psim_graph_node_attr_set_string(g, psim_graph_node_find(g, "lower"), "auto_pad", "SAME_LOWER");
    node(g, "valid", "Conv", "x7 x7w");
    psim_graph_node_attr_set_string(g, psim_graph_node_find(g, "valid"), "auto_pad", "VALID");
    set_ints(g, "valid", "strides", 2, D(2, 2));
    ok(g);
    shape_is(g, "same", 0, 4, D(1, 8, 32, 32));
    shape_is(g, "stride2", 0, 4, D(1, 8, 15, 15)); /* floor((32-3)/2)+1 */
    shape_is(g, "dil2", 0, 4, D(1, 8, 28, 28));    /* extent 5 */
    shape_is(g, "mixed", 0, 4, D(1, 8, 11, 17));   /* (32+2-3)/3+1, (32+4-3)/2+1 */
    shape_is(g, "grouped", 0, 4, D(1, 6, 8, 8));
    shape_is(g, "upper", 0, 4, D(2, 4, 4, 4)); /* ceil(7/2) */
    shape_is(g, "lower", 0, 4, D(2, 4, 7, 7));
    shape_is(g, "valid", 0, 4, D(2, 4, 3, 3)); /* floor((7-3)/2)+1 */

    /* FLOPs: 2 * out_elems * Cin/groups * kh * kw. */
    PsimOpCount c;
    psim_graph_node_count(g, psim_graph_node_find(g, "same"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * (8 * 32 * 32) * 3 * 3 * 3);
    g_assert_cmpuint(c.bytes_written, ==, 8 * 32 * 32 * 4);
    g_assert_cmpuint(c.bytes_read, ==, (3 * 32 * 32 + 8 * 27 + 8) * 4);
    psim_graph_node_count(g, psim_graph_node_find(g, "grouped"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * (6 * 8 * 8) * (4 / 2) * 3 * 3);
}

static void test_conv_errors(void)
{
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(1, 4, 10, 10));
        fin(g, "w", 4, D(6, 3, 3, 3));
        node(g, "conv_ch", "Conv", "x w");
        set_int(g, "conv_ch", "group", 2);
        fails(g, "conv_ch", "channels");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(1, 3, 2, 2));
        fin(g, "w", 4, D(6, 3, 3, 3));
        node(g, "conv_big", "Conv", "x w");
        fails(g, "conv_big", "larger than the padded input");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(1, 3, 8, 8));
        fin(g, "w", 4, D(6, 3, 3, 3));
        node(g, "conv_pads", "Conv", "x w");
        set_ints(g, "conv_pads", "pads", 2, D(1, 1));
        fails(g, "conv_pads", "pads");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(1, 3, 8, 8));
        fin(g, "w", 4, D(6, 3, 3, 3));
        fin(g, "b", 1, D(5));
        node(g, "conv_bias", "Conv", "x w b");
        fails(g, "conv_bias", "bias");
    }
}

static void test_pool_norm(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x7", 4, D(2, 3, 7, 7));
    fin(g, "x6", 4, D(1, 1, 6, 6));
    fin(g, "x5", 4, D(1, 1, 5, 5));
    node(g, "mp", "MaxPool", "x7");
    set_ints(g, "mp", "kernel_shape", 2, D(3, 3));
    set_ints(g, "mp", "strides", 2, D(2, 2));
    psim_graph_node_outputs_set(g, psim_graph_node_find(g, "mp"), 2);
    node(g, "floor6", "MaxPool", "x6");
    set_ints(g, "floor6", "kernel_shape", 2, D(3, 3));
    set_ints(g, "floor6", "strides", 2, D(2, 2));
    node(g, "ceil6", "AveragePool", "x6");
    set_ints(g, "ceil6", "kernel_shape", 2, D(3, 3));
    set_ints(g, "ceil6", "strides", 2, D(2, 2));
    set_int(g, "ceil6", "ceil_mode", 1);
    /* ceil_mode with padding: the last window would start in the right pad, so it is dropped. */
    node(g, "ceil5", "MaxPool", "x5");
    set_ints(g, "ceil5", "kernel_shape", 2, D(2, 2));
    set_ints(g, "ceil5", "strides", 2, D(2, 2));
    set_ints(g, "ceil5", "pads", 4, D(1, 1, 1, 1));
    set_int(g, "ceil5", "ceil_mode", 1);
    node(g, "ap_pad", "AveragePool", "x7");
    set_ints(g, "ap_pad", "kernel_shape", 2, D(3, 3));
    set_ints(g, "ap_pad", "pads", 4, D(1, 1, 1, 1));
    set_int(g, "ap_pad", "count_include_pad", 1);
    node(g, "gap", "GlobalAveragePool", "x7");
    fin(g, "scale", 1, D(3));
    node(g, "bn", "BatchNormalization", "x7 scale scale scale scale");
    node(g, "lrn", "LRN", "x7");
    set_int(g, "lrn", "size", 5);
    fin(g, "seq", 3, D(2, 3, 8));
    fin(g, "gamma", 1, D(8));
    node(g, "ln", "LayerNormalization", "seq gamma gamma");
    psim_graph_node_outputs_set(g, psim_graph_node_find(g, "ln"), 3);
    node(g, "drop", "Dropout", "seq");
    psim_graph_node_outputs_set(g, psim_graph_node_find(g, "drop"), 2);
    node(g, "sm", "Softmax", "seq");
    node(g, "lsm", "LogSoftmax", "seq");
    set_int(g, "lsm", "axis", 1);
    ok(g);
    shape_is(g, "mp", 0, 4, D(2, 3, 3, 3));
    shape_is(g, "mp", 1, 4, D(2, 3, 3, 3));
    g_assert_cmpint(dtype_of(g, "mp", 1), ==, PSIM_DTYPE_INT64);
    shape_is(g, "floor6", 0, 4, D(1, 1, 2, 2));
    shape_is(g, "ceil6", 0, 4, D(1, 1, 3, 3));
    shape_is(g, "ceil5", 0, 4, D(1, 1, 3, 3));
    shape_is(g, "ap_pad", 0, 4, D(2, 3, 7, 7));
    shape_is(g, "gap", 0, 4, D(2, 3, 1, 1));
    shape_is(g, "bn", 0, 4, D(2, 3, 7, 7));
    shape_is(g, "lrn", 0, 4, D(2, 3, 7, 7));
    shape_is(g, "ln", 0, 3, D(2, 3, 8));
    shape_is(g, "ln", 1, 3, D(2, 3, 1));
    shape_is(g, "ln", 2, 3, D(2, 3, 1));
    shape_is(g, "drop", 0, 3, D(2, 3, 8));
    shape_is(g, "drop", 1, 3, D(2, 3, 8));
    g_assert_cmpint(dtype_of(g, "drop", 1), ==, PSIM_DTYPE_BOOL);
    shape_is(g, "sm", 0, 3, D(2, 3, 8));
    shape_is(g, "lsm", 0, 3, D(2, 3, 8));
    PsimOpCount c;
    psim_graph_node_count(g, psim_graph_node_find(g, "mp"), &c);
    g_assert_cmpfloat(c.flops, ==, 2.0 * 3 * 3 * 3 * 9);
    psim_graph_node_count(g, psim_graph_node_find(g, "sm"), &c);
    g_assert_cmpfloat(c.flops, ==, 5.0 * 48);

    /* Before opset 10 Dropout's mask had the input's type. */
    g_autoptr(PsimGraph) g9 = psim_graph_new("t");
    psim_graph_set_opset(g9, 9);
    fin(g9, "seq", 2, D(2, 3));
    psim_graph_node_outputs_set(g9, node(g9, "drop", "Dropout", "seq"), 2);
    ok(g9);
    g_assert_cmpint(dtype_of(g9, "drop", 1), ==, PSIM_DTYPE_FLOAT32);
}

static void test_pool_norm_errors(void)
{
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(2, 3, 7, 7));
        node(g, "mp_nok", "MaxPool", "x");
        fails(g, "mp_nok", "kernel_shape");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 4, D(2, 3, 7, 7));
        fin(g, "s", 1, D(4));
        node(g, "bn_c", "BatchNormalization", "x s s s s");
        fails(g, "bn_c", "scale");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 2, D(2, 3));
        node(g, "sm_axis", "Softmax", "x");
        set_int(g, "sm_axis", "axis", 2);
        fails(g, "sm_axis", "axis");
    }
}

/* ---- shape ops ---- */

static void test_concat_split(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "a", 2, D(2, 3));
    fin(g, "b", 2, D(2, 5));
    fin(g, "u", 2, D(U, 4));
    node(g, "cat", "Concat", "a b");
    set_int(g, "cat", "axis", -1);
    node(g, "cat_u", "Concat", "a u");
    set_int(g, "cat_u", "axis", 1);
    fin(g, "v", 2, D(2, U));
    node(g, "cat_v", "Concat", "a v");
    set_int(g, "cat_v", "axis", 1);
    fin(g, "x", 2, D(6, 4));
    PsimNode *s = node(g, "split_attr", "Split", "x");
    psim_graph_node_outputs_set(g, s, 3);
    set_ints(g, "split_attr", "split", 3, D(1, 2, 3));
    ints(g, "sizes", 2, D(3, 1));
    s = node(g, "split_in", "Split", "x sizes");
    psim_graph_node_outputs_set(g, s, 2);
    set_int(g, "split_in", "axis", 1);
    s = node(g, "split_eq", "Split", "x");
    psim_graph_node_outputs_set(g, s, 3);
    fin(g, "ten", 1, D(10));
    s = node(g, "split_num", "Split", "ten");
    psim_graph_node_attr_set_int(g, s, "num_outputs", 4);
    ok(g);
    shape_is(g, "cat", 0, 2, D(2, 8));
    shape_is(g, "cat_u", 0, 2, D(2, 7)); /* dim 0 known from a */
    shape_is(g, "cat_v", 0, 2, D(2, U));
    shape_is(g, "split_attr", 0, 2, D(1, 4));
    shape_is(g, "split_attr", 1, 2, D(2, 4));
    shape_is(g, "split_attr", 2, 2, D(3, 4));
    shape_is(g, "split_in", 0, 2, D(6, 3));
    shape_is(g, "split_in", 1, 2, D(6, 1));
    for (int k = 0; k < 3; k++)
        shape_is(g, "split_eq", k, 2, D(2, 4));
    g_assert_cmpint(psim_graph_node_find(g, "split_num")->n_outputs, ==, 4);
    shape_is(g, "split_num", 0, 1, D(3));
    shape_is(g, "split_num", 3, 1, D(1));

    g_autoptr(PsimGraph) e1 = psim_graph_new("t");
    fin(e1, "a", 2, D(2, 3));
    fin(e1, "b", 2, D(3, 3));
    node(e1, "cat_bad", "Concat", "a b");
    set_int(e1, "cat_bad", "axis", 1);
    fails(e1, "cat_bad", "differ in dimension 0");
    g_autoptr(PsimGraph) e2 = psim_graph_new("t");
    fin(e2, "x", 1, D(7));
    psim_graph_node_outputs_set(e2, node(e2, "split_odd", "Split", "x"), 2);
    fails(e2, "split_odd", "evenly");
    g_autoptr(PsimGraph) e3 = psim_graph_new("t");
    fin(e3, "x", 1, D(7));
    psim_graph_node_outputs_set(e3, node(e3, "split_sum", "Split", "x"), 2);
    set_ints(e3, "split_sum", "split", 2, D(3, 3));
    fails(e3, "split_sum", "add up");
}

static void test_slice_pad(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 3, D(10, 20, 30));
    ints(g, "st", 2, D(1, -5));
    ints(g, "en", 2, D(8, 1000));
    ints(g, "ax", 2, D(0, 2));
    ints(g, "sp", 2, D(2, 1));
    node(g, "sl", "Slice", "x st en ax sp");
    ints(g, "rst", 1, D(-1));
    ints(g, "ren", 1, D(-1000));
    ints(g, "rax", 1, D(1));
    ints(g, "rsp", 1, D(-1));
    ints(g, "rsp3", 1, D(-3));
    node(g, "rev", "Slice", "x rst ren rax rsp");
    node(g, "rev3", "Slice", "x rst ren rax rsp3");
    ints(g, "big", 1, D(INT64_MAX));
    ints(g, "small", 1, D(INT64_MIN));
    node(g, "huge", "Slice", "x big small rax rsp"); /* from the end back to the start */
    node(g, "empty", "Slice", "x rst rst rax rsp");  /* start == end */
    node(g, "old", "Slice", "x");                    /* opset < 10: attrs */
    set_ints(g, "old", "starts", 1, D(2));
    set_ints(g, "old", "ends", 1, D(-2));
    input(g, "dyn", PSIM_DTYPE_INT64, 1, D(1));
    node(g, "sl_dyn", "Slice", "x dyn dyn rax");
    ints(g, "pads", 4, D(0, 1, 2, 3));
    fin(g, "m", 2, D(4, 5));
    node(g, "pad", "Pad", "m pads");
    node(g, "pad_attr", "Pad", "m");
    set_ints(g, "pad_attr", "pads", 4, D(1, 0, 1, 0));
    ints(g, "crop", 4, D(-1, 0, 0, -2));
    node(g, "pad_neg", "Pad", "m crop");
    ok(g);
    shape_is(g, "sl", 0, 3, D(4, 20, 5));
    shape_is(g, "rev", 0, 3, D(10, 20, 30));
    shape_is(g, "rev3", 0, 3, D(10, 7, 30));
    shape_is(g, "huge", 0, 3, D(10, 20, 30));
    shape_is(g, "empty", 0, 3, D(10, 0, 30));
    shape_is(g, "old", 0, 3, D(6, 20, 30));
    shape_is(g, "sl_dyn", 0, 3, D(10, U, 30));
    shape_is(g, "pad", 0, 2, D(6, 9));
    shape_is(g, "pad_attr", 0, 2, D(6, 5));
    shape_is(g, "pad_neg", 0, 2, D(3, 3));

    g_autoptr(PsimGraph) e = psim_graph_new("t");
    fin(e, "x", 2, D(4, 5));
    ints(e, "s", 1, D(0));
    ints(e, "a", 1, D(2));
    node(e, "sl_axis", "Slice", "x s s a");
    fails(e, "sl_axis", "axis 2 is out of range");
    g_autoptr(PsimGraph) e2 = psim_graph_new("t");
    fin(e2, "x", 2, D(4, 5));
    ints(e2, "s", 1, D(0));
    ints(e2, "z", 1, D(0));
    node(e2, "sl_step", "Slice", "x s s - z");
    fails(e2, "sl_step", "step is zero");
    g_autoptr(PsimGraph) e3 = psim_graph_new("t");
    fin(e3, "x", 2, D(4, 5));
    ints(e3, "p", 2, D(0, 0));
    node(e3, "pad_n", "Pad", "x p");
    fails(e3, "pad_n", "2 pads for 2 axes");
}

static void test_reshape_family(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 3, D(2, 3, 4));
    ints(g, "s1", 2, D(0, -1));
    ints(g, "s2", 1, D(-1));
    ints(g, "s3", 3, D(4, 0, 2));
    node(g, "r1", "Reshape", "x s1");
    node(g, "r2", "Reshape", "x s2");
    node(g, "r3", "Reshape", "x s3");
    fin(g, "z", 2, D(0, 3));
    ints(g, "sz", 2, D(0, 3));
    node(g, "rz", "Reshape", "z sz");
    set_int(g, "rz", "allowzero", 1);
    fin(g, "x4", 4, D(2, 3, 4, 5));
    node(g, "fl2", "Flatten", "x4");
    set_int(g, "fl2", "axis", 2);
    node(g, "fl0", "Flatten", "x4");
    set_int(g, "fl0", "axis", 0);
    node(g, "fl1", "Flatten", "x4");
    node(g, "tr", "Transpose", "x4");
    node(g, "trp", "Transpose", "x4");
    set_ints(g, "trp", "perm", 4, D(0, 2, 3, 1));
    fin(g, "o", 4, D(1, 3, 1, 5));
    node(g, "sq_all", "Squeeze", "o");
    node(g, "sq_attr", "Squeeze", "o");
    set_ints(g, "sq_attr", "axes", 1, D(-2));
    ints(g, "sqa", 1, D(0));
    node(g, "sq_in", "Squeeze", "o sqa");
    fin(g, "m", 2, D(3, 4));
    node(g, "unsq", "Unsqueeze", "m");
    set_ints(g, "unsq", "axes", 2, D(0, -1));
    ints(g, "ua", 2, D(1, 3));
    node(g, "unsq_in", "Unsqueeze", "m ua");
    fin(g, "col", 2, D(3, 1));
    ints(g, "es", 3, D(2, 1, 4));
    node(g, "exp", "Expand", "col es");
    fin(g, "data", 3, D(5, 6, 7));
    input(g, "idx", PSIM_DTYPE_INT64, 2, D(2, 3));
    node(g, "gat", "Gather", "data idx");
    set_int(g, "gat", "axis", 1);
    node(g, "gat_scalar", "Gather", "data ua");
    node(g, "shape", "Shape", "x4");
    node(g, "shape_se", "Shape", "x4");
    set_int(g, "shape_se", "start", 1);
    set_int(g, "shape_se", "end", -1);
    node(g, "size", "Size", "x4");
    ints(g, "cs", 2, D(3, 2));
    PsimNode *cos = node(g, "cos", "ConstantOfShape", "cs");
    int64_t one = 1;
    g_autoptr(PsimTensor) v = psim_tensor_new(PSIM_DTYPE_INT64, 1, &one, NULL);
    ((int64_t *)v->data)[0] = 7;
    psim_graph_node_attr_set_tensor(g, cos, "value", v);
    node(g, "cos_f", "ConstantOfShape", "cs");
    ints(g, "r0", -1, D(0));
    ints(g, "r10", -1, D(10));
    ints(g, "r_3", -1, D(3));
    node(g, "range", "Range", "r0 r10 r_3");
    ints(g, "reps", 2, D(2, 3));
    node(g, "tile", "Tile", "m reps");
    ok(g);
    shape_is(g, "r1", 0, 2, D(2, 12));
    shape_is(g, "r2", 0, 1, D(24));
    shape_is(g, "r3", 0, 3, D(4, 3, 2));
    shape_is(g, "rz", 0, 2, D(0, 3));
    shape_is(g, "fl2", 0, 2, D(6, 20));
    shape_is(g, "fl0", 0, 2, D(1, 120));
    shape_is(g, "fl1", 0, 2, D(2, 60));
    shape_is(g, "tr", 0, 4, D(5, 4, 3, 2));
    shape_is(g, "trp", 0, 4, D(2, 4, 5, 3));
    shape_is(g, "sq_all", 0, 2, D(3, 5));
    shape_is(g, "sq_attr", 0, 3, D(1, 3, 5));
    shape_is(g, "sq_in", 0, 3, D(3, 1, 5));
    shape_is(g, "unsq", 0, 4, D(1, 3, 4, 1));
    shape_is(g, "unsq_in", 0, 4, D(3, 1, 4, 1));
    shape_is(g, "exp", 0, 3, D(2, 3, 4));
    shape_is(g, "gat", 0, 4, D(5, 2, 3, 7));
    shape_is(g, "gat_scalar", 0, 3, D(2, 6, 7));
    shape_is(g, "shape", 0, 1, D(4));
    shape_is(g, "shape_se", 0, 1, D(2));
    shape_is(g, "size", 0, 0, NULL);
    shape_is(g, "cos", 0, 2, D(3, 2));
    g_assert_cmpint(dtype_of(g, "cos", 0), ==, PSIM_DTYPE_INT64);
    g_assert_cmpint(dtype_of(g, "cos_f", 0), ==, PSIM_DTYPE_FLOAT32);
    g_assert_cmpint(dtype_of(g, "shape", 0), ==, PSIM_DTYPE_INT64);
    shape_is(g, "range", 0, 1, D(4));
    shape_is(g, "tile", 0, 2, D(6, 12));
    /* Folded values: Shape, Shape with start/end, Size, integer ConstantOfShape, Range. */
    const PsimTensor *t = psim_graph_node_find(g, "shape_se")->outputs[0].value;
    g_assert_nonnull(t);
    g_assert_cmpint(((int64_t *)t->data)[0], ==, 3);
    g_assert_cmpint(((int64_t *)t->data)[1], ==, 4);
    g_assert_cmpint(((int64_t *)psim_graph_node_find(g, "size")->outputs[0].value->data)[0], ==,
                    120);
    g_assert_cmpint(((int64_t *)psim_graph_node_find(g, "cos")->outputs[0].value->data)[5], ==, 7);
    t = psim_graph_node_find(g, "range")->outputs[0].value;
    g_assert_cmpint(((int64_t *)t->data)[3], ==, 9);
    g_assert_null(psim_graph_node_find(g, "cos_f")->outputs[0].value);
}

static void test_reshape_errors(void)
{
    static const struct {
        int32_t n;
        int64_t s[3];
        const char *what;
    } cases[] = {
        {2, {5, -1}, "not a multiple of 5"},
        {2, {-1, -1}, "more than one -1"},
        {2, {7, 4}, "cannot reshape 24 elements into 28"},
        {1, {-3}, "invalid value"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 3, D(2, 3, 4));
        ints(g, "s", cases[i].n, cases[i].s);
        node(g, "reshape_bad", "Reshape", "x s");
        fails(g, "reshape_bad", cases[i].what);
    }
    static const struct {
        const char *op, *attr;
        int32_t n;
        int64_t v[4];
        const char *what;
    } other[] = {
        {"Transpose", "perm", 2, {0, 0}, "permutation"},
        {"Squeeze", "axes", 1, {0}, "cannot squeeze axis 0"},
        {"Unsqueeze", "axes", 2, {1, 1}, "repeated"},
        {"Flatten", "axis", 1, {3}, "out of range"},
        {"Gather", "axis", 1, {-3}, "out of range"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(other); i++) {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 2, D(2, 3));
        ints(g, "i", 1, D(0));
        node(g, "bad", other[i].op, !strcmp(other[i].op, "Gather") ? "x i" : "x");
        if (other[i].n == 1 && strcmp(other[i].attr, "axes"))
            set_int(g, "bad", other[i].attr, other[i].v[0]);
        else
            set_ints(g, "bad", other[i].attr, other[i].n, other[i].v);
        fails(g, "bad", other[i].what);
    }
}

static void test_absurd(void)
{
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        ints(g, "s", 3, D(1 << 20, 1 << 20, 1 << 10));
        node(g, "huge_cos", "ConstantOfShape", "s");
        fails(g, "huge_cos", "absurd");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "x", 2, D(1, 1));
        ints(g, "s", 2, D(INT64_C(1) << 30, INT64_C(1) << 30));
        node(g, "huge_expand", "Expand", "x s");
        fails(g, "huge_expand", "absurd");
    }
    {
        g_autoptr(PsimGraph) g = psim_graph_new("t");
        fin(g, "a", 2, D(1 << 20, 1));
        fin(g, "b", 2, D(1, 1 << 20));
        node(g, "huge_add", "Add", "a b");
        fails(g, "huge_add", "absurd");
    }
}

/* ---- folding ---- */

static void test_fold_chain(void)
{
    /* The pattern exporters emit for x.view(x.size(0), -1). */
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 4, D(2, 3, 4, 5));
    node(g, "shape", "Shape", "x");
    ints(g, "zero", -1, D(0));
    node(g, "dim0", "Gather", "shape zero");
    ints(g, "axes", 1, D(0));
    node(g, "dim0_1d", "Unsqueeze", "dim0 axes");
    ints(g, "minus1", 1, D(-1));
    node(g, "newshape", "Concat", "dim0_1d minus1");
    set_int(g, "newshape", "axis", 0);
    node(g, "flat", "Reshape", "x newshape");
    /* Integer arithmetic on shapes: Mul of two gathered dims, Cast, Equal/Where. */
    ints(g, "one", -1, D(1));
    node(g, "dim1", "Gather", "shape one");
    node(g, "prod", "Mul", "dim0 dim1");
    node(g, "eq", "Equal", "dim0 zero");
    node(g, "pick", "Where", "eq zero prod");
    node(g, "sl", "Slice", "shape axes minus1"); /* shape[0:-1] = [2, 3, 4] */
    node(g, "rel", "Relu", "x");
    GError *err = NULL;
    g_assert_true(psim_graph_finalize(g, &err));
    int32_t folded = psim_graph_fold_constants(g, &err);
    g_assert_no_error(err);
    g_assert_true(psim_graph_infer_shapes(g, &err));
    g_assert_cmpint(folded, ==, 9); /* shape dim0 dim0_1d newshape dim1 prod eq pick sl */
    const char *consts[] = {"shape", "dim0", "dim0_1d", "newshape", "prod", "pick", "sl"};
    for (size_t i = 0; i < G_N_ELEMENTS(consts); i++) {
        const PsimNode *n = psim_graph_node_find(g, consts[i]);
        g_assert_true(n->flags & PSIM_NODE_CONSTANT);
        g_assert_nonnull(n->outputs[0].value);
    }
    g_assert_false(psim_graph_node_find(g, "flat")->flags & PSIM_NODE_CONSTANT);
    g_assert_false(psim_graph_node_find(g, "rel")->flags & PSIM_NODE_CONSTANT);
    g_assert_false(psim_graph_node_find(g, "x")->flags & PSIM_NODE_CONSTANT);
    const PsimTensor *ns = psim_graph_node_find(g, "newshape")->outputs[0].value;
    g_assert_cmpint(ns->n_elems, ==, 2);
    g_assert_cmpint(((int64_t *)ns->data)[0], ==, 2);
    g_assert_cmpint(((int64_t *)ns->data)[1], ==, -1);
    shape_is(g, "flat", 0, 2, D(2, 60));
    g_assert_cmpint(((int64_t *)psim_graph_node_find(g, "pick")->outputs[0].value->data)[0], ==, 6);
    const PsimTensor *sl = psim_graph_node_find(g, "sl")->outputs[0].value;
    g_assert_cmpint(sl->n_elems, ==, 3);
    g_assert_cmpint(((int64_t *)sl->data)[2], ==, 4);
    /* Folding again finds nothing new. */
    g_assert_cmpint(psim_graph_fold_constants(g, &err), ==, 0);

    /* An out-of-range Gather index in known values is an error naming the node. */
    g_autoptr(PsimGraph) e = psim_graph_new("t");
    fin(e, "x", 2, D(2, 3));
    node(e, "shape", "Shape", "x");
    ints(e, "i", 1, D(2));
    node(e, "gather_oob", "Gather", "shape i");
    fails(e, "gather_oob", "out of range");
}

/* With an unknown batch the shape is not a constant, but what is known of it still shapes the
 * result: Reshape(x, [Shape(x)[0], 28, 28]) is [?, 28, 28]. */
static void test_partial_shapes(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 2, D(U, 784));
    node(g, "shape", "Shape", "x");
    ints(g, "zero", 1, D(0));
    node(g, "batch", "Gather", "shape zero");
    ints(g, "rest", 2, D(28, 28));
    node(g, "newshape", "Concat", "batch rest");
    set_int(g, "newshape", "axis", 0);
    node(g, "img", "Reshape", "x newshape");
    ints(g, "one", 1, D(1));
    node(g, "cshape", "Concat", "batch one one");
    set_int(g, "cshape", "axis", 0);
    node(g, "zeros", "ConstantOfShape", "cshape");
    fin(g, "row", 2, D(1, 5));
    ints(g, "five", 1, D(5));
    node(g, "eshape", "Concat", "batch five");
    set_int(g, "eshape", "axis", 0);
    node(g, "expanded", "Expand", "row eshape");
    ok(g);
    g_assert_null(psim_graph_node_find(g, "newshape")->outputs[0].value);
    shape_is(g, "img", 0, 3, D(U, 28, 28));
    shape_is(g, "zeros", 0, 3, D(U, 1, 1));
    shape_is(g, "expanded", 0, 2, D(U, 5));

    /* A shape of 33 run-time values is more than a rank can be: unknown, and no overflow of
     * the 32-entry buffers. */
    g_autoptr(PsimGraph) g2 = psim_graph_new("t");
    fin(g2, "x", 1, D(6));
    GString *ins = g_string_new(NULL);
    for (int i = 0; i < 33; i++) {
        char s[16], u[16];
        g_snprintf(s, sizeof s, "s%d", i);
        g_snprintf(u, sizeof u, "u%d", i);
        input(g2, s, PSIM_DTYPE_INT64, 0, NULL);
        node(g2, u, "Unsqueeze", s);
        set_ints(g2, u, "axes", 1, D(0));
        g_string_append_printf(ins, "%s ", u);
    }
    node(g2, "cat", "Concat", ins->str);
    set_int(g2, "cat", "axis", 0);
    g_string_free(ins, TRUE);
    node(g2, "r", "Reshape", "x cat");
    ok(g2);
    shape_is(g2, "cat", 0, 1, D(33));
    g_assert_cmpint(psim_graph_node_find(g2, "r")->outputs[0].rank, ==, PSIM_RANK_UNKNOWN);
}

static void test_fold_weights(void)
{
    /* Weights made by ConstantOfShape stay nodes (no value) but are constant, and count as
     * parameters; the int64 shape feeding them does not. */
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 2, D(3, 4));
    ints(g, "wshape", 2, D(4, 5));
    node(g, "w", "ConstantOfShape", "wshape");
    node(g, "wt", "Transpose", "w");
    node(g, "y", "MatMul", "x w");
    node(g, "z", "MatMul", "y wt");
    ok(g);
    const PsimNode *w = psim_graph_node_find(g, "w");
    g_assert_true(w->flags & PSIM_NODE_CONSTANT);
    g_assert_null(w->outputs[0].value);
    g_assert_true(psim_graph_node_find(g, "wt")->flags & PSIM_NODE_CONSTANT);
    shape_is(g, "z", 0, 2, D(3, 4));
    PsimGraphStats st;
    psim_graph_stats(g, &st);
    g_assert_cmpuint(st.param_bytes, ==, 2 * 20 * 4); /* w and wt, both consumed by MatMuls */
    g_assert_cmpfloat(st.flops, ==, 2.0 * 3 * 5 * 4 + 2.0 * 3 * 4 * 5);
    g_assert_cmpuint(st.activation_bytes, ==, (12 + 15 + 12) * 4);
}

/* ---- prune ---- */

static PsimGraph *prune_graph(void)
{
    PsimGraph *g = psim_graph_new("p");
    fin(g, "a", 2, D(2, 2));
    node(g, "b", "Relu", "a");
    node(g, "c", "Neg", "b");
    node(g, "d", "Exp", "a"); /* unrelated to e */
    node(g, "e", "Add", "c c");
    node(g, "f", "Add", "e d");
    node(g, "s", "Split", "a");
    psim_graph_node_outputs_set(g, psim_graph_node_find(g, "s"), 2);
    node(g, "s0", "Relu", "s:0");
    node(g, "s1", "Relu", "s:1");
    node(g, "both", "Add", "s0 s1");
    psim_graph_input_add(g, 0);
    psim_graph_output_add_ref(g, "f:0");
    ok(g);
    return g;
}

static void test_prune(void)
{
    g_autoptr(PsimGraph) g = prune_graph();
    GError *err = NULL;
    const char *feeds[] = {"b:0"}, *fetches[] = {"e:0"};
    g_autoptr(PsimGraph) p = psim_graph_prune(g, feeds, 1, fetches, 1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(p), ==, 3);
    g_assert_null(psim_graph_node_find(p, "a"));
    g_assert_null(psim_graph_node_find(p, "d"));
    const PsimNode *b = psim_graph_node_find(p, "b");
    g_assert_cmpstr(b->op, ==, "Placeholder");
    g_assert_true(b->flags & PSIM_NODE_FED);
    g_assert_cmpint(b->n_inputs, ==, 0);
    shape_is(p, "b", 0, 2, D(2, 2));
    const PsimNode *e = psim_graph_node_find(p, "e");
    g_assert_cmpint(e->inputs[0].node, ==, psim_graph_node_find(p, "c")->id);
    g_assert_cmpint(psim_graph_n_outputs(p), ==, 1);
    g_assert_cmpint(psim_graph_output(p, 0).node, ==, e->id);
    g_assert_cmpint(psim_graph_n_inputs(p), ==, 1);
    g_assert_cmpint(psim_graph_input(p, 0), ==, b->id);
    /* The input graph is unchanged. */
    g_assert_cmpstr(psim_graph_node_find(g, "b")->op, ==, "Relu");
    g_assert_cmpint(psim_graph_n_nodes(g), ==, 10);

    /* A fed constant: what was folded from its value, or flagged constant for it, is neither in
     * the pruned graph (the executor would keep the first run's result). */
    {
        g_autoptr(PsimGraph) k = psim_graph_new("fed-constant");
        int64_t d2[2] = {2, 2};
        g_autoptr(PsimTensor) v = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d2, NULL);
        for (int i = 0; i < 4; i++)
            ((float *)v->data)[i] = (float)i;
        psim_graph_node_attr_set_tensor(k, node(k, "w", "Const", ""), "value", v);
        PsimNode *r = node(k, "r", "Relu", "w");
        psim_graph_output_add(k, (PsimPort){r->id, 0});
        ok(k);
        g_assert_true((r->flags & PSIM_NODE_CONSTANT) || r->outputs[0].value);
        const char *kf[] = {"w"}, *kt[] = {"r"};
        g_autoptr(PsimGraph) kp = psim_graph_prune(k, kf, 1, kt, 1, &err);
        g_assert_no_error(err);
        const PsimNode *pr = psim_graph_node_find(kp, "r");
        g_assert_false(pr->flags & PSIM_NODE_CONSTANT);
        g_assert_null(pr->outputs[0].value);
    }

    /* No feeds: the unrelated branch (d, f, the Split) goes, the rest stays. */
    const char *f2[] = {"c"};
    g_autoptr(PsimGraph) p2 = psim_graph_prune(g, NULL, 0, f2, 1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(p2), ==, 3);
    g_assert_nonnull(psim_graph_node_find(p2, "a"));
    g_assert_false(psim_graph_node_find(p2, "a")->flags & PSIM_NODE_FED);

    /* No fetches: the graph outputs (f) */
    g_autoptr(PsimGraph) p3 = psim_graph_prune(g, NULL, 0, NULL, 0, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(p3), ==, 6);
    g_assert_null(psim_graph_node_find(p3, "s"));

    /* A target keeps what it needs without becoming an output. */
    const char *f4[] = {"^both"};
    g_autoptr(PsimGraph) p4 = psim_graph_prune(g, NULL, 0, f4, 1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(p4), ==, 5);
    g_assert_cmpint(psim_graph_n_outputs(p4), ==, 0);

    /* Feeding s:0 but using s:1 is an error. */
    const char *f5[] = {"both:0"}, *feed5[] = {"s:0"};
    g_assert_null(psim_graph_prune(g, feed5, 1, f5, 1, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "'s1'"));
    g_assert_nonnull(strstr(err->message, "not fed"));
    g_clear_error(&err);
    const char *feed6[] = {"s:0", "s:1"};
    g_autoptr(PsimGraph) p6 = psim_graph_prune(g, feed6, 2, f5, 1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(p6), ==, 4);
    g_assert_null(psim_graph_node_find(p6, "a"));
    g_assert_cmpint(psim_graph_node_find(p6, "s")->n_outputs, ==, 2);

    /* Unknown names and indices. */
    const char *bad[] = {"nope:0"};
    g_assert_null(psim_graph_prune(g, bad, 1, fetches, 1, &err));
    g_assert_nonnull(strstr(err->message, "missing node"));
    g_clear_error(&err);
    const char *badk[] = {"e:3"};
    g_assert_null(psim_graph_prune(g, NULL, 0, badk, 1, &err));
    g_assert_nonnull(strstr(err->message, "out of range"));
    g_clear_error(&err);
}

/* ---- CSE ---- */

static void test_cse(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("c");
    fin(g, "x", 2, D(3, 4));
    fin(g, "x2", 2, D(3, 4));
    ints(g, "wshape", 2, D(4, 5));
    node(g, "w", "ConstantOfShape", "wshape");
    node(g, "m1", "MatMul", "x w");
    node(g, "m2", "MatMul", "x w");
    node(g, "r1", "Relu", "m1");
    node(g, "r2", "Relu", "m2");
    node(g, "sum", "Add", "r1 r2");
    node(g, "m3", "MatMul", "x2 w"); /* other input: kept */
    PsimNode *n1 = node(g, "rnd1", "RandomNormal", "");
    PsimNode *n2 = node(g, "rnd2", "RandomNormal", "");
    psim_graph_node_attr_set_ints(g, n1, "shape", 2, D(3, 5));
    psim_graph_node_attr_set_ints(g, n2, "shape", 2, D(3, 5));
    node(g, "s1", "Add", "m3 rnd1");
    node(g, "s2", "Add", "m3 rnd2");
    node(g, "s3", "Softmax", "sum");
    node(g, "s4", "Softmax", "sum");
    set_int(g, "s4", "axis", 0); /* different attr: kept */
    psim_graph_output_add_ref(g, "r2:0");
    ok(g);
    shape_is(g, "rnd1", 0, 2, D(3, 5));
    GError *err = NULL;
    int32_t merged = -1;
    g_autoptr(PsimGraph) c = psim_graph_cse(g, &merged, &err);
    g_assert_no_error(err);
    g_assert_cmpint(merged, ==, 2); /* m2 into m1, then r2 into r1 */
    g_assert_cmpint(psim_graph_n_nodes(c), ==, psim_graph_n_nodes(g) - 2);
    g_assert_null(psim_graph_node_find(c, "m2"));
    g_assert_null(psim_graph_node_find(c, "r2"));
    const PsimNode *sum = psim_graph_node_find(c, "sum"), *r1 = psim_graph_node_find(c, "r1");
    g_assert_cmpint(sum->inputs[0].node, ==, r1->id);
    g_assert_cmpint(sum->inputs[1].node, ==, r1->id);
    g_assert_cmpint(psim_graph_output(c, 0).node, ==, r1->id);
    /* Placeholders, random ops and what depends on them are not merged. */
    const char *kept[] = {"x", "x2", "m3", "rnd1", "rnd2", "s1", "s2", "s3", "s4", "w"};
    for (size_t i = 0; i < G_N_ELEMENTS(kept); i++)
        g_assert_nonnull(psim_graph_node_find(c, kept[i]));
    shape_is(c, "sum", 0, 2, D(3, 5));
    /* CSE of the result finds nothing more. */
    g_autoptr(PsimGraph) c2 = psim_graph_cse(c, &merged, &err);
    g_assert_nonnull(c2);
    g_assert_cmpint(merged, ==, 0);
    g_assert_cmpint(psim_graph_n_nodes(c2), ==, psim_graph_n_nodes(c));
}

static void test_cse_placeholders_consts(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("c");
    fin(g, "p1", 2, D(2, 2));
    fin(g, "p2", 2, D(2, 2));
    ints(g, "k1", 2, D(1, 2));
    ints(g, "k2", 2, D(1, 2));
    ints(g, "k3", 2, D(1, 3));
    PsimNode *v1 = node(g, "v1", "VariableV2", "");
    PsimNode *v2 = node(g, "v2", "VariableV2", "");
    psim_graph_node_attr_set_dtype(g, v1, "dtype", PSIM_DTYPE_FLOAT32);
    psim_graph_node_attr_set_dtype(g, v2, "dtype", PSIM_DTYPE_FLOAT32);
    psim_graph_node_attr_set_shape(g, v1, "shape", 1, D(2));
    psim_graph_node_attr_set_shape(g, v2, "shape", 1, D(2));
    psim_graph_node_outputs_set(g, v1, 1);
    psim_graph_node_outputs_set(g, v2, 1);
    ok(g);
    GError *err = NULL;
    int32_t merged = -1;
    g_autoptr(PsimGraph) c = psim_graph_cse(g, &merged, &err);
    g_assert_no_error(err);
    g_assert_cmpint(merged, ==, 1); /* k2 into k1 only */
    g_assert_nonnull(psim_graph_node_find(c, "p1"));
    g_assert_nonnull(psim_graph_node_find(c, "p2"));
    g_assert_nonnull(psim_graph_node_find(c, "v1"));
    g_assert_nonnull(psim_graph_node_find(c, "v2"));
    g_assert_nonnull(psim_graph_node_find(c, "k3"));
    g_assert_null(psim_graph_node_find(c, "k2"));
    g_assert_true(psim_op_lookup("RandomNormal")->flags & PSIM_OP_STATEFUL);
    g_assert_true(psim_op_lookup("VariableV2")->flags & PSIM_OP_STATEFUL);
}

/* Every registered op of the foundation's op set is present. */
static void test_registry(void)
{
    static const char *const ops[] = {"MatMul",
                                      "Gemm",
                                      "Add",
                                      "Sub",
                                      "Mul",
                                      "Div",
                                      "Pow",
                                      "Sqrt",
                                      "Neg",
                                      "Exp",
                                      "Log",
                                      "Max",
                                      "Min",
                                      "Clip",
                                      "Relu",
                                      "Sigmoid",
                                      "Tanh",
                                      "Erf",
                                      "Softmax",
                                      "LogSoftmax",
                                      "Conv",
                                      "MaxPool",
                                      "AveragePool",
                                      "GlobalAveragePool",
                                      "BatchNormalization",
                                      "LRN",
                                      "LayerNormalization",
                                      "Concat",
                                      "Split",
                                      "Slice",
                                      "Pad",
                                      "Reshape",
                                      "Flatten",
                                      "Transpose",
                                      "Squeeze",
                                      "Unsqueeze",
                                      "Expand",
                                      "Gather",
                                      "Shape",
                                      "ConstantOfShape",
                                      "Equal",
                                      "Where",
                                      "Cast",
                                      "Sum",
                                      "ReduceMean",
                                      "ReduceSum",
                                      "Dropout",
                                      "Range",
                                      "Less",
                                      "Greater",
                                      "Not",
                                      "And"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
        const PsimOpDef *d = psim_op_lookup(ops[i]);
        if (!d || !d->infer || !d->count)
            g_error("op %s is not registered with infer and count", ops[i]);
    }
}

static void test_reduce(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    fin(g, "x", 3, D(2, 3, 4));
    node(g, "mean_attr", "ReduceMean", "x");
    set_ints(g, "mean_attr", "axes", 2, D(1, -1));
    node(g, "mean_nokeep", "ReduceMean", "x");
    set_ints(g, "mean_nokeep", "axes", 1, D(1));
    set_int(g, "mean_nokeep", "keepdims", 0);
    ints(g, "ax", 1, D(0));
    node(g, "sum_in", "ReduceSum", "x ax");
    node(g, "sum_all", "ReduceSum", "x");
    set_int(g, "sum_all", "keepdims", 0);
    node(g, "sum_noop", "ReduceSum", "x");
    set_int(g, "sum_noop", "noop_with_empty_axes", 1);
    input(g, "dyn", PSIM_DTYPE_INT64, 1, D(1));
    node(g, "sum_dyn", "ReduceSum", "x dyn");
    node(g, "l2", "ReduceL2", "x");
    set_ints(g, "l2", "axes", 1, D(2));
    node(g, "argmax", "ArgMax", "x");
    set_int(g, "argmax", "axis", -2);
    set_int(g, "argmax", "keepdims", 0);
    node(g, "like", "CastLike", "x dyn");
    ok(g);
    shape_is(g, "l2", 0, 3, D(2, 3, 1));
    shape_is(g, "argmax", 0, 2, D(2, 4));
    g_assert_cmpint(dtype_of(g, "argmax", 0), ==, PSIM_DTYPE_INT64);
    shape_is(g, "like", 0, 3, D(2, 3, 4));
    g_assert_cmpint(dtype_of(g, "like", 0), ==, PSIM_DTYPE_INT64);
    shape_is(g, "mean_attr", 0, 3, D(2, 1, 1));
    shape_is(g, "mean_nokeep", 0, 2, D(2, 4));
    shape_is(g, "sum_in", 0, 3, D(1, 3, 4));
    shape_is(g, "sum_all", 0, 0, NULL);
    shape_is(g, "sum_noop", 0, 3, D(2, 3, 4));
    shape_is(g, "sum_dyn", 0, 3, D(U, U, U));
    PsimOpCount c;
    psim_graph_node_count(g, psim_graph_node_find(g, "sum_all"), &c);
    g_assert_cmpfloat(c.flops, ==, 24);
}

/* The six ONNX model-zoo graphs: the inferred shape of the graph output equals the shape of
 * the expected output tensor shipped with each model, and every node's outputs are known. */
static void test_onnx_light(void)
{
    static const char *const models[] = {"bvlc_alexnet", "inception_v1", "resnet50",
                                         "squeezenet",   "vgg19",        "zfnet512"};
    const char *data = g_getenv("PSIM_DATA");
    for (size_t m = 0; m < G_N_ELEMENTS(models); m++) {
        g_autofree char *path =
            g_strdup_printf("%s/onnx-light/%s.onnx", data ? data : ".", models[m]);
        if (!data || !g_file_test(path, G_FILE_TEST_EXISTS)) {
            g_test_skip("shared data not found (set PSIM_DATA)");
            return;
        }
        GError *err = NULL;
        g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
        g_assert_no_error(err);
        g_autofree char *out = g_strdup_printf("%s/onnx-light/%s_output_0.pb", data, models[m]);
        g_autoptr(PsimTensor) want = psim_tensor_load_pb(out, NULL, &err);
        g_assert_no_error(err);
        g_assert_cmpint(psim_graph_n_outputs(g), ==, 1);
        PsimPort p = psim_graph_output(g, 0);
        const PsimOutput *o = &psim_graph_node(g, p.node)->outputs[p.index];
        g_assert_cmpint(o->dtype, ==, want->dtype);
        if (o->rank != want->rank)
            g_error("%s: output rank %d, expected %d", models[m], o->rank, want->rank);
        for (int32_t i = 0; i < o->rank; i++)
            g_assert_cmpint(o->dims[i], ==, want->dims[i]);
        g_assert_cmpuint(o->bytes, ==, want->nbytes);
        for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
            const PsimNode *n = psim_graph_node(g, i);
            for (int32_t k = 0; k < n->n_outputs; k++)
                if (psim_shape_elems(n->outputs[k].rank, n->outputs[k].dims) < 0)
                    g_error("%s: node '%s' output %d has an unknown shape", models[m], n->name, k);
        }
        PsimGraphStats st;
        psim_graph_stats(g, &st);
        g_assert_cmpfloat(st.flops, >, 5e8);
        /* Published parameter counts (float32) plus the Reshape's int64[2] shape initializer:
         * AlexNet (BVLC, grouped convs) 60,965,224 and VGG-19 143,667,240. */
        if (!strcmp(models[m], "bvlc_alexnet"))
            g_assert_cmpuint(st.param_bytes, ==, UINT64_C(60965224) * 4 + 16);
        if (!strcmp(models[m], "vgg19"))
            g_assert_cmpuint(st.param_bytes, ==, UINT64_C(143667240) * 4 + 16);
        g_assert_cmpuint(st.param_bytes, >, 4000000);
        if (g_test_verbose())
            g_printerr("%s: %.0f FLOP, %" G_GUINT64_FORMAT " parameter bytes\n", models[m],
                       st.flops, st.param_bytes);
    }
}

/* ONNX's node conformance models (Debian's libonnx-testdata): for every model whose ops we all
 * register, forget the shapes the file declares for computed tensors, give the graph inputs
 * their test values, fold and infer, and compare each output's dtype and shape with the
 * expected output tensor. bfloat16 outputs are stored as uint16 in that data: counted equal. */
static int infer_node_test(const char *dir, GString *why)
{
    g_autofree char *model = g_build_filename(dir, "model.onnx", NULL);
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load(model, NULL, &err);
    if (!g) { /* control flow (If, Loop, Scan) is not imported */
        g_clear_error(&err);
        return -1;
    }
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        PsimNode *n = psim_graph_node(g, i);
        if (!psim_op_lookup(n->op))
            return -1; /* not ours */
    }
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        PsimNode *n = psim_graph_node(g, i);
        if (!strcmp(n->op, "Placeholder") || (n->flags & PSIM_NODE_PARAMETER))
            continue;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            psim_graph_output_set(g, n, k, PSIM_DTYPE_UNDEFINED, PSIM_RANK_UNKNOWN, NULL);
            n->outputs[k].value = NULL;
            n->outputs[k].bytes = 0;
        }
    }
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++) {
        g_autofree char *p = g_strdup_printf("%s/test_data_set_0/input_%d.pb", dir, i);
        g_autoptr(PsimTensor) t = psim_tensor_load_pb(p, NULL, NULL);
        PsimNode *in = psim_graph_node(g, psim_graph_input(g, i));
        if (t && t->dtype != PSIM_DTYPE_STRING && in->outputs[0].dtype == t->dtype)
            psim_graph_output_value_set(g, in, 0, t);
    }
    if (psim_graph_fold_constants(g, &err) < 0 || !psim_graph_infer_shapes(g, &err)) {
        g_string_append_printf(why, "%s", err->message);
        g_clear_error(&err);
        return 0;
    }
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        g_autofree char *p = g_strdup_printf("%s/test_data_set_0/output_%d.pb", dir, i);
        g_autoptr(PsimTensor) want = psim_tensor_load_pb(p, NULL, NULL);
        if (!want)
            continue;
        PsimPort port = psim_graph_output(g, i);
        const PsimNode *producer = psim_graph_node(g, port.node);
        const PsimOutput *o = &producer->outputs[port.index];
        /* A dim that counts what the data selects may stay unknown (ONNX's inference leaves it
         * symbolic too); every other dim, the rank and the dtype must be the data's. */
        const PsimOpDef *def = psim_op_lookup(producer->op);
        gboolean data_shaped = def && (def->flags & PSIM_OP_DATA_SHAPED);
        gboolean same = o->rank == want->rank &&
                        (o->dtype == want->dtype ||
                         (want->dtype == PSIM_DTYPE_UINT16 && o->dtype == PSIM_DTYPE_BFLOAT16));
        for (int32_t j = 0; same && j < want->rank; j++)
            same = o->dims[j] == want->dims[j] || (data_shaped && o->dims[j] == PSIM_DIM_UNKNOWN);
        if (!same) {
            g_string_append_printf(why, "output %d: %s rank %d [", i, psim_dtype_name(o->dtype),
                                   o->rank);
            for (int32_t j = 0; j < o->rank; j++)
                g_string_append_printf(why, " %" G_GINT64_FORMAT, o->dims[j]);
            g_string_append_printf(why, " ], expected %s [", psim_dtype_name(want->dtype));
            for (int32_t j = 0; j < want->rank; j++)
                g_string_append_printf(why, " %" G_GINT64_FORMAT, want->dims[j]);
            g_string_append(why, " ]");
            return 0;
        }
    }
    return 1;
}

static void test_onnx_node_shapes(void)
{
    const char *root = "/usr/share/libonnx-testdata/data/node";
    g_autoptr(GDir) d = g_dir_open(root, 0, NULL);
    if (!d) {
        g_test_skip("libonnx-testdata is not installed");
        return;
    }
    int n_tests = 0, n_checked = 0, n_failed = 0;
    const char *e;
    while ((e = g_dir_read_name(d))) {
        g_autofree char *dir = g_build_filename(root, e, NULL);
        g_autoptr(GString) why = g_string_new(NULL);
        n_tests++;
        int r = infer_node_test(dir, why);
        n_checked += r >= 0;
        if (r == 0) {
            n_failed++;
            g_printerr("%s: %s\n", e, why->str);
        }
    }
    g_test_message("%d node tests, %d with all ops registered, %d with wrong inferred shapes",
                   n_tests, n_checked, n_failed);
    g_assert_cmpint(n_checked, >, 500);
    g_assert_cmpint(n_failed, ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph-ops/registry", test_registry);
    g_test_add_func("/graph-ops/broadcast", test_broadcast);
    g_test_add_func("/graph-ops/broadcast-errors", test_broadcast_errors);
    g_test_add_func("/graph-ops/unknown-inputs", test_unknown_inputs);
    g_test_add_func("/graph-ops/matmul-gemm", test_matmul);
    g_test_add_func("/graph-ops/matmul-errors", test_matmul_errors);
    g_test_add_func("/graph-ops/conv", test_conv);
    g_test_add_func("/graph-ops/conv-errors", test_conv_errors);
    g_test_add_func("/graph-ops/pool-norm", test_pool_norm);
    g_test_add_func("/graph-ops/pool-norm-errors", test_pool_norm_errors);
    g_test_add_func("/graph-ops/reduce", test_reduce);
    g_test_add_func("/graph-ops/concat-split", test_concat_split);
    g_test_add_func("/graph-ops/slice-pad", test_slice_pad);
    g_test_add_func("/graph-ops/reshape-family", test_reshape_family);
    g_test_add_func("/graph-ops/reshape-errors", test_reshape_errors);
    g_test_add_func("/graph-ops/absurd", test_absurd);
    g_test_add_func("/graph-ops/fold-chain", test_fold_chain);
    g_test_add_func("/graph-ops/fold-weights", test_fold_weights);
    g_test_add_func("/graph-ops/partial-shapes", test_partial_shapes);
    g_test_add_func("/graph-ops/prune", test_prune);
    g_test_add_func("/graph-ops/cse", test_cse);
    g_test_add_func("/graph-ops/cse-placeholders-consts", test_cse_placeholders_consts);
    g_test_add_func("/graph-ops/onnx-light", test_onnx_light);
    g_test_add_func("/graph-ops/onnx-node-shapes", test_onnx_node_shapes);
    return g_test_run();
}
