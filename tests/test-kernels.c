/* Tests of the kernel registry and every CPU kernel: each kernel runs on random inputs and is
 * compared with a plain reference written here with naive loops (relative error bounds), plus
 * bad-input errors that name the node, registry lookups, and the plug-in loader. */
#include <math.h>
#include <string.h>

#include "placesim/kernels.h"
#include "placesim/formats.h"

#include "kernels/cpu/cpu-private.h"
#ifdef PSIM_HAVE_CUDA
#include "kernels/cuda/cublas.h"
#endif

static GRand *rng;

/* ---------------------------------------------------------------------------------------- */
/* Harness. */

static PsimTensor *host_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                              GError **error)
{
    (void)ctx;
    PsimTensor *t = psim_tensor_new(dt, r, d, error);
    if (t) /* garbage, so kernels that forget to write an element are caught */
        memset(t->data, 0xA5, t->nbytes);
    return t;
}

typedef struct {
    PsimGraph *g;
    PsimNode *n;
} Node;

static Node node_new(const char *op, int32_t n_outputs)
{
    Node x;
    x.g = psim_graph_new("test");
    psim_graph_set_source(x.g, "test.json");
    GError *err = NULL;
    x.n = psim_graph_node_add(x.g, "node0", op, &err);
    g_assert_no_error(err);
    psim_graph_node_outputs_set(x.g, x.n, n_outputs);
    return x;
}

/* Runs node x on inputs (NULL entries are absent), returning FALSE with *error on failure. */
static gboolean run_n(Node x, PsimTensor **in, int32_t n_in, PsimTensor **out, GError **error)
{
    PsimDType dt = PSIM_DTYPE_UNDEFINED;
    for (int32_t k = 0; k < n_in && !dt; k++)
        if (in[k])
            dt = in[k]->dtype;
    const PsimKernelDef *def = psim_kernel_lookup(x.n->op, "CPU", dt);
    g_assert_nonnull(def);
    for (int32_t k = 0; k < x.n->n_outputs; k++)
        out[k] = NULL;
    PsimKernelCtx ctx = {.graph = x.g, .node = x.n, .n_inputs = n_in, .inputs = in,
                         .n_outputs = x.n->n_outputs, .outputs = out, .device_type = "CPU",
                         .alloc = host_alloc};
    gboolean ok = def->run(&ctx, error);
    if (!ok)
        for (int32_t k = 0; k < x.n->n_outputs; k++)
            g_clear_pointer(&out[k], psim_tensor_unref);
    return ok;
}

/* x refuses these inputs with an error whose message contains want. */
static void assert_run_fails(Node x, PsimTensor **in, int32_t n_in, const char *want)
{
    PsimTensor *out[8];
    GError *err = NULL;
    g_assert_cmpint(x.n->n_outputs, <=, 8);
    g_assert_false(run_n(x, in, n_in, out, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, want));
    g_clear_error(&err);
}

static PsimTensor *run1(Node x, PsimTensor **in, int32_t n_in)
{
    PsimTensor *out[8];
    GError *err = NULL;
    g_assert_cmpint(x.n->n_outputs, <=, 8);
    gboolean ok = run_n(x, in, n_in, out, &err);
    g_assert_no_error(err);
    g_assert_true(ok);
    for (int32_t k = 1; k < x.n->n_outputs; k++)
        psim_tensor_unref(out[k]);
    return out[0];
}

static void node_free(Node x)
{
    psim_graph_free(x.g);
}

static PsimTensor *rand_f32(int32_t r, const int64_t *d, double lo, double hi)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, r, d, NULL);
    for (int64_t i = 0; i < t->n_elems; i++)
        ((float *)t->data)[i] = (float)g_rand_double_range(rng, lo, hi);
    return t;
}

static PsimTensor *rand_i64(int32_t r, const int64_t *d, int64_t lo, int64_t hi)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, r, d, NULL);
    for (int64_t i = 0; i < t->n_elems; i++)
        ((int64_t *)t->data)[i] = g_rand_int_range(rng, (gint32)lo, (gint32)hi);
    return t;
}

static PsimTensor *ints(int64_t n, const int64_t *v)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, &n, NULL);
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

static PsimTensor *scalar_f32(float v)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL);
    *(float *)t->data = v;
    return t;
}

static void assert_shape(const PsimTensor *t, int32_t r, const int64_t *d)
{
    g_assert_cmpint(t->rank, ==, r);
    for (int32_t i = 0; i < r; i++)
        g_assert_cmpint(t->dims[i], ==, d[i]);
}

/* |got - want| <= atol + rtol * |want| for every element (NaN must match NaN). */
static void assert_close(const PsimTensor *got, const double *want, double rtol, double atol)
{
    for (int64_t i = 0; i < got->n_elems; i++) {
        double g = psim_tensor_get_f64(got, i), w = want[i];
        if (isnan(w) && isnan(g))
            continue;
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            g_error("element %" G_GINT64_FORMAT ": got %.9g, want %.9g", i, g, w);
    }
}

/* Index helpers for references: multi-index of flat i, and flat index of a multi-index in a
 * shape with numpy broadcasting (size-1 dims read index 0). */
static void unravel(int64_t i, int32_t r, const int64_t *d, int64_t *idx)
{
    for (int32_t k = r - 1; k >= 0; k--) {
        idx[k] = d[k] ? i % d[k] : 0;
        i = d[k] ? i / d[k] : 0;
    }
}

static int64_t bcast_index(const int64_t *idx, int32_t out_r, const PsimTensor *t)
{
    int64_t off = 0;
    for (int32_t k = 0; k < t->rank; k++) {
        int64_t j = idx[k + out_r - t->rank];
        off = off * t->dims[k] + (t->dims[k] == 1 ? 0 : j);
    }
    return off;
}

/* ---------------------------------------------------------------------------------------- */
/* Registry. */

static void test_registry(void)
{
    g_assert_nonnull(psim_kernel_lookup("Conv", "CPU", PSIM_DTYPE_FLOAT32));
    g_assert_null(psim_kernel_lookup("Conv", "CPU", PSIM_DTYPE_INT8));
    g_assert_null(psim_kernel_lookup("Conv", "TPU", PSIM_DTYPE_FLOAT32));
    g_assert_nonnull(psim_kernel_lookup("Add", "CPU", PSIM_DTYPE_INT64));
    /* Dtype-agnostic kernels are found through the UNDEFINED fallback. */
    const PsimKernelDef *r = psim_kernel_lookup("Reshape", "CPU", PSIM_DTYPE_BOOL);
    g_assert_nonnull(r);
    g_assert_cmpint(r->dtype, ==, PSIM_DTYPE_UNDEFINED);
    g_assert_nonnull(psim_kernel_lookup("Conv", "CPU", PSIM_DTYPE_FLOAT32)->workspace);

    int32_t n = 0;
    g_autofree const PsimKernelDef **all = psim_kernel_list(&n);
    g_assert_cmpint(n, >, 60);
    for (int32_t i = 1; i < n; i++) {
        int c = strcmp(all[i - 1]->op, all[i]->op);
        g_assert_true(c < 0 || (c == 0 && (strcmp(all[i - 1]->device_type, all[i]->device_type) < 0 ||
                                           all[i - 1]->dtype < all[i]->dtype)));
    }
    static const char *required[] = {
        "Const", "Constant", "Identity", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow",
        "Sqrt", "Neg", "Exp", "Log", "Max", "Min", "Clip", "Relu", "Sigmoid", "Tanh", "Erf",
        "Softmax", "LogSoftmax", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
        "BatchNormalization", "LRN", "LayerNormalization", "Concat", "Split", "Slice", "Pad",
        "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Gather", "Shape",
        "ConstantOfShape", "Equal", "Where", "Cast", "Sum", "ReduceMean", "ReduceSum", "Dropout"};
    for (size_t i = 0; i < G_N_ELEMENTS(required); i++) {
        gboolean found = FALSE;
        for (int32_t j = 0; j < n; j++)
            found = found || !strcmp(all[j]->op, required[i]);
        if (!found)
            g_error("no CPU kernel for %s", required[i]);
    }

    /* for_node and supported take the dtype from the producer of the first input. */
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    GError *err = NULL;
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", &err);
    PsimNode *c = psim_graph_node_add(g, "c", "Conv", &err);
    PsimNode *t = psim_graph_node_add(g, "t", "Task", &err);
    g_assert_no_error(err);
    psim_graph_node_outputs_set(g, x, 1);
    int64_t d[4] = {1, 3, 8, 8};
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_INT8, 4, d);
    psim_graph_node_outputs_set(g, c, 1);
    psim_graph_node_input_add(g, c, (PsimPort){x->id, 0});
    g_assert_null(psim_kernel_for_node(g, c, "CPU"));
    g_assert_false(psim_kernel_supported(g, c, "CPU"));
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 4, d);
    g_assert_true(psim_kernel_for_node(g, c, "CPU") ==
                  psim_kernel_lookup("Conv", "CPU", PSIM_DTYPE_FLOAT32));
    g_assert_true(psim_kernel_supported(g, c, "CPU"));
    g_assert_false(psim_kernel_supported(g, c, "TPU"));
#ifdef PSIM_HAVE_CUDA
    g_assert_true(psim_kernel_supported(g, c, "GPU")); /* kernels/cuda */
#else
    g_assert_false(psim_kernel_supported(g, c, "GPU"));
#endif
    g_assert_true(psim_kernel_supported(g, x, "CPU"));
    g_assert_false(psim_kernel_supported(g, t, "CPU"));
    /* Dtype not known yet: any kernel of the op on that device. */
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_UNDEFINED, 4, d);
    g_assert_nonnull(psim_kernel_for_node(g, c, "CPU"));
}

#ifdef PSIM_HAVE_CUDA
/* cuBLAS is opened when a GPU first needs it, not loaded with placesim (it brings cuBLASLt: 210 MB
 * of RSS in every process): nothing above, the GPU kernels' registration included, opened it;
 * psim__cublas opens it (no GPU needed to open the library) with every entry point. */
static gboolean maps_have(const char *lib)
{
    g_autofree char *maps = NULL;
    g_assert_true(g_file_get_contents("/proc/self/maps", &maps, NULL, NULL));
    return strstr(maps, lib) != NULL;
}

static void test_cublas_on_demand(void)
{
    /* In a fresh process: no test before it may have opened the library. */
    if (!g_test_subprocess()) {
        g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
        g_test_trap_assert_passed();
        return;
    }
    g_assert_true(psim_kernel_lookup("MatMul", "GPU", PSIM_DTYPE_FLOAT32) != NULL);
    g_assert_false(maps_have("libcublas.so"));
    g_assert_false(maps_have("libcublasLt"));
    const PsimCublas *b = psim__cublas();
    g_assert_true(maps_have("libcublas"));
    const char *s = b->status_string(CUBLAS_STATUS_SUCCESS);
    g_assert_nonnull(s);
    g_assert_false(g_str_has_prefix(s, "cuBLAS could not be loaded"));
    g_assert_true(psim__cublas() == b);
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Elementwise. */

static double ref_bin(const char *op, double a, double b)
{
    if (!strcmp(op, "Add") || !strcmp(op, "Sum"))
        return a + b;
    if (!strcmp(op, "Sub"))
        return a - b;
    if (!strcmp(op, "Mul"))
        return a * b;
    if (!strcmp(op, "Div"))
        return a / b;
    if (!strcmp(op, "Pow"))
        return pow(a, b);
    if (!strcmp(op, "Max"))
        return a > b ? a : b;
    if (!strcmp(op, "Min"))
        return a < b ? a : b;
    if (!strcmp(op, "Equal"))
        return a == b;
    if (!strcmp(op, "Less"))
        return a < b;
    if (!strcmp(op, "Greater"))
        return a > b;
    g_assert_not_reached();
}

static void check_binary(const char *op, PsimTensor *a, PsimTensor *b)
{
    Node x = node_new(op, 1);
    PsimTensor *in[2] = {a, b};
    g_autoptr(PsimTensor) y = run1(x, in, 2);
    int32_t r = MAX(a->rank, b->rank);
    g_assert_cmpint(y->rank, ==, r);
    g_autofree double *want = g_new(double, y->n_elems + 1);
    int64_t idx[16];
    for (int64_t i = 0; i < y->n_elems; i++) {
        unravel(i, r, y->dims, idx);
        want[i] = ref_bin(op, psim_tensor_get_f64(a, bcast_index(idx, r, a)),
                          psim_tensor_get_f64(b, bcast_index(idx, r, b)));
    }
    assert_close(y, want, 1e-6, 1e-7);
    node_free(x);
}

static void test_binary(void)
{
    static const char *ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum",
                                "Equal", "Less", "Greater"};
    struct {
        int32_t ra, rb;
        int64_t da[4], db[4];
    } shapes[] = {
        {3, 3, {2, 3, 4}, {2, 3, 4}}, {3, 0, {2, 3, 4}, {0}},      {0, 3, {0}, {2, 3, 4}},
        {3, 2, {2, 3, 4}, {3, 1}},    {3, 3, {4, 1, 5}, {1, 3, 1}}, {4, 2, {2, 8, 5, 5}, {1, 5}},
        {4, 4, {2, 8, 5, 5}, {1, 8, 1, 1}}, {1, 2, {7}, {3, 7}},
    };
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++)
        for (size_t s = 0; s < G_N_ELEMENTS(shapes); s++) {
            gboolean pw = !strcmp(ops[o], "Pow");
            g_autoptr(PsimTensor) a = rand_f32(shapes[s].ra, shapes[s].da, pw ? 0.1 : -2, 2);
            g_autoptr(PsimTensor) b = rand_f32(shapes[s].rb, shapes[s].db, pw ? -2 : 0.5, 2);
            if (!strcmp(ops[o], "Equal")) /* make some equal */
                for (int64_t i = 0; i < MIN(a->n_elems, b->n_elems); i += 2)
                    ((float *)a->data)[i] = ((float *)b->data)[i];
            check_binary(ops[o], a, b);
        }
    /* Pow by a constant 2 (LayerNormalization's square) is x * x, negative bases included, and
     * broadcasts as Pow does ([3] ^ [1,1] is [1,3]). Max and Min propagate NaN either side. */
    {
        int64_t d3[1] = {3}, d11[2] = {1, 1};
        g_autoptr(PsimTensor) a = rand_f32(1, d3, -3, 3);
        ((float *)a->data)[0] = -1.5f;
        g_autoptr(PsimTensor) two = rand_f32(2, d11, 2, 2);
        ((float *)two->data)[0] = 2.0f;
        Node x = node_new("Pow", 1);
        PsimTensor *in[2] = {a, two};
        g_autoptr(PsimTensor) y = run1(x, in, 2);
        g_assert_cmpint(y->rank, ==, 2);
        g_assert_cmpint(y->dims[1], ==, 3);
        for (int i = 0; i < 3; i++) {
            float v = ((float *)a->data)[i];
            g_assert_cmpfloat(((float *)y->data)[i], ==, v * v);
        }
        node_free(x);
        for (int k = 0; k < 2; k++) {
            Node m = node_new(k ? "Min" : "Max", 1);
            g_autoptr(PsimTensor) p = rand_f32(1, d3, -1, 1), q = rand_f32(1, d3, -1, 1);
            ((float *)p->data)[0] = NAN;
            ((float *)q->data)[1] = NAN;
            PsimTensor *pq[2] = {p, q};
            g_autoptr(PsimTensor) r = run1(m, pq, 2);
            g_assert_true(isnan(((float *)r->data)[0]) && isnan(((float *)r->data)[1]));
            node_free(m);
        }
    }
    /* int64 arithmetic, as shape computations use it. */
    int64_t da[2] = {3, 4}, db[1] = {4};
    static const char *iops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal"};
    for (size_t o = 0; o < G_N_ELEMENTS(iops); o++) {
        g_autoptr(PsimTensor) a = rand_i64(2, da, -50, 50);
        g_autoptr(PsimTensor) b = rand_i64(1, db, 1, 9);
        Node x = node_new(iops[o], 1);
        PsimTensor *in[2] = {a, b};
        g_autoptr(PsimTensor) y = run1(x, in, 2);
        for (int64_t i = 0; i < 12; i++) {
            int64_t p = ((int64_t *)a->data)[i], q = ((int64_t *)b->data)[i % 4], w;
            switch (o) {
            case 0: w = p + q; break;
            case 1: w = p - q; break;
            case 2: w = p * q; break;
            case 3: w = p / q; break;
            case 4: w = MAX(p, q); break;
            case 5: w = MIN(p, q); break;
            default: w = p == q;
            }
            g_assert_cmpint(psim_tensor_get_i64(y, i), ==, w);
        }
        node_free(x);
    }
    /* Integer division by zero must not trap. */
    {
        int64_t one = 1;
        g_autoptr(PsimTensor) a = ints(1, (int64_t[]){7});
        g_autoptr(PsimTensor) b = ints(1, (int64_t[]){0});
        Node x = node_new("Div", 1);
        PsimTensor *in[2] = {a, b};
        g_autoptr(PsimTensor) y = run1(x, in, 2);
        g_assert_cmpint(y->n_elems, ==, one);
        node_free(x);
    }
    /* Mismatched shapes and dtypes are errors naming the node. */
    {
        int64_t d1[1] = {3}, d2[1] = {4};
        g_autoptr(PsimTensor) a = rand_f32(1, d1, 0, 1);
        g_autoptr(PsimTensor) b = rand_f32(1, d2, 0, 1);
        g_autoptr(PsimTensor) c = rand_i64(1, d1, 0, 1);
        Node x = node_new("Add", 1);
        PsimTensor *in[2] = {a, b}, *out[1];
        GError *err = NULL;
        g_assert_false(run_n(x, in, 2, out, &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_nonnull(strstr(err->message, "test.json: node 'node0'"));
        g_clear_error(&err);
        in[1] = c;
        g_assert_false(run_n(x, in, 2, out, &err));
        g_assert_nonnull(strstr(err->message, "dtype"));
        g_clear_error(&err);
        node_free(x);
    }
}

static void test_variadic(void)
{
    int64_t d1[2] = {3, 4}, d2[1] = {4}, d3[2] = {3, 1};
    g_autoptr(PsimTensor) a = rand_f32(2, d1, -1, 1);
    g_autoptr(PsimTensor) b = rand_f32(1, d2, -1, 1);
    g_autoptr(PsimTensor) c = rand_f32(2, d3, -1, 1);
    static const char *ops[] = {"Sum", "Max", "Min", "Mean"};
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++) {
        Node x = node_new(ops[o], 1);
        PsimTensor *in[3] = {a, b, c};
        g_autoptr(PsimTensor) y = run1(x, in, 3);
        assert_shape(y, 2, d1);
        double want[12];
        for (int i = 0; i < 12; i++) {
            double p = ((float *)a->data)[i], q = ((float *)b->data)[i % 4],
                   r = ((float *)c->data)[i / 4];
            switch (o) {
            case 0: want[i] = p + q + r; break;
            case 1: want[i] = MAX(p, MAX(q, r)); break;
            case 2: want[i] = MIN(p, MIN(q, r)); break;
            default: want[i] = (p + q + r) / 3;
            }
        }
        assert_close(y, want, 1e-6, 1e-7);
        node_free(x);
    }
}

static double ref_un(const char *op, double v)
{
    if (!strcmp(op, "Sqrt")) return sqrt(v);
    if (!strcmp(op, "Neg")) return -v;
    if (!strcmp(op, "Exp")) return exp(v);
    if (!strcmp(op, "Log")) return log(v);
    if (!strcmp(op, "Relu")) return v > 0 ? v : 0;
    if (!strcmp(op, "Sigmoid")) return 1 / (1 + exp(-v));
    if (!strcmp(op, "Tanh")) return tanh(v);
    if (!strcmp(op, "Erf")) return erf(v);
    if (!strcmp(op, "Abs")) return fabs(v);
    if (!strcmp(op, "Floor")) return floor(v);
    if (!strcmp(op, "Ceil")) return ceil(v);
    if (!strcmp(op, "Reciprocal")) return 1 / v;
    if (!strcmp(op, "Sin")) return sin(v);
    if (!strcmp(op, "Cos")) return cos(v);
    if (!strcmp(op, "Softplus")) return log(1 + exp(v));
    if (!strcmp(op, "Rsqrt")) return 1 / sqrt(v);
    if (!strcmp(op, "Relu6")) return v < 0 ? 0 : v > 6 ? 6 : v;
    if (!strcmp(op, "Square")) return v * v;
    g_assert_not_reached();
}

static void test_unary(void)
{
    static const char *ops[] = {"Sqrt", "Neg", "Exp", "Log", "Relu", "Sigmoid", "Tanh", "Erf",
                                "Abs", "Floor", "Ceil", "Reciprocal", "Sin", "Cos", "Softplus",
                                "Rsqrt", "Relu6", "Square"}; /* the last three: TF's */
    int64_t d[3] = {2, 5, 7};
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++) {
        gboolean pos = !strcmp(ops[o], "Sqrt") || !strcmp(ops[o], "Log") || !strcmp(ops[o], "Rsqrt");
        g_autoptr(PsimTensor) a = rand_f32(3, d, pos ? 0.01 : -20, 20);
        Node x = node_new(ops[o], 1);
        PsimTensor *in[1] = {a};
        g_autoptr(PsimTensor) y = run1(x, in, 1);
        double want[70];
        for (int i = 0; i < 70; i++)
            want[i] = ref_un(ops[o], ((float *)a->data)[i]);
        assert_close(y, want, 2e-6, 1e-6);
        node_free(x);
    }
    /* Clip with scalar bounds as inputs, and without. */
    g_autoptr(PsimTensor) a = rand_f32(3, d, -3, 3);
    g_autoptr(PsimTensor) lo = scalar_f32(-1), hi = scalar_f32(0.5);
    Node x = node_new("Clip", 1);
    PsimTensor *in[3] = {a, lo, hi};
    g_autoptr(PsimTensor) y = run1(x, in, 3);
    double want[70];
    for (int i = 0; i < 70; i++)
        want[i] = CLAMP(((float *)a->data)[i], -1.0, 0.5);
    assert_close(y, want, 0, 0);
    in[1] = NULL;
    g_autoptr(PsimTensor) y2 = run1(x, in, 3);
    for (int i = 0; i < 70; i++)
        want[i] = MIN(((float *)a->data)[i], 0.5);
    assert_close(y2, want, 0, 0);
    node_free(x);
}

/* LeakyRelu, Elu, Selu and HardSigmoid (branch-free selects) against their definitions, with
 * default attributes, over both signs; NaN propagates through the first three. */
static void test_activations(void)
{
    static const char *ops[] = {"LeakyRelu", "Elu", "Selu", "HardSigmoid"};
    int64_t d[3] = {2, 5, 7};
    const double al = 1.67326319217681884765625, ga = 1.05070102214813232421875;
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++) {
        g_autoptr(PsimTensor) a = rand_f32(3, d, -20, 20);
        float *av = a->data;
        av[0] = 0.0f;
        av[1] = -1e-3f;
        av[2] = 3.0f;
        av[69] = NAN;
        Node x = node_new(ops[o], 1);
        PsimTensor *in[1] = {a};
        g_autoptr(PsimTensor) y = run1(x, in, 1);
        double want[69];
        for (int i = 0; i < 69; i++) {
            double v = av[i];
            switch (o) {
            case 0: want[i] = v >= 0 ? v : 0.01 * v; break;
            case 1: want[i] = v >= 0 ? v : expm1(v); break;
            case 2: want[i] = v > 0 ? ga * v : ga * al * expm1(v); break;
            default: want[i] = CLAMP(0.2 * v + 0.5, 0.0, 1.0);
            }
        }
        g_autoptr(PsimTensor) head = psim_tensor_copy(y);
        head->n_elems = 69; /* (the NaN apart) */
        assert_close(head, want, 2e-6, 1e-6);
        if (o < 3)
            g_assert_true(isnan(((float *)y->data)[69]));
        node_free(x);
    }
}

/* Distance in units in the last place between two floats of one sign class (the bit patterns
 * ordered as integers). */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return oa > ob ? oa - ob : ob - oa;
}

static double ref_vmath(PsimVmathFn f, double x)
{
    switch (f) {
    case PSIM_VMATH_EXP: return exp(x);
    case PSIM_VMATH_LOG: return log(x);
    case PSIM_VMATH_TANH: return tanh(x);
    case PSIM_VMATH_ERF: return erf(x);
    default: return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    }
}

/* The vectorised math (kernels/cpu/vmath.c) on every instruction set this CPU has, against libm
 * in double precision rounded to float: at most 1 ulp for exp, log, tanh and erf (SLEEF's u10
 * functions; measured: log 0), 2 for sigmoid (an exp, an add, a divide and, below zero, a
 * multiply), over a dense sweep of each function's range with normal results, plus the special
 * values. Odd lengths
 * exercise the tails, and every element must get the same answer wherever it sits. */
static void test_vmath(void)
{
    static const struct {
        PsimVmathFn f;
        const char *name;
        float lo, hi;
        int64_t max_ulps;
    } fns[] = {
        {PSIM_VMATH_EXP, "exp", -87.0f, 88.0f, 1},  {PSIM_VMATH_LOG, "log", 1e-30f, 1e30f, 1},
        {PSIM_VMATH_TANH, "tanh", -10.0f, 10.0f, 1}, {PSIM_VMATH_ERF, "erf", -4.0f, 4.0f, 1},
        {PSIM_VMATH_SIGMOID, "sigmoid", -80.0f, 80.0f, 2},
    };
    const int64_t n = 200003;
    float *x = g_new(float, n), *y = g_new(float, n), *y1 = g_new(float, 8);
    for (PsimVmathIsa isa = PSIM_VMATH_ISA_SCALAR; isa <= PSIM_VMATH_ISA_AVX2; isa++) {
        if (!psim__vmath_has(isa) || isa == PSIM_VMATH_ISA_SCALAR)
            continue; /* (the scalar path is libm itself) */
        for (size_t k = 0; k < G_N_ELEMENTS(fns); k++) {
            gboolean geo = fns[k].f == PSIM_VMATH_LOG; /* log: spaced geometrically */
            for (int64_t i = 0; i < n; i++) {
                double t = (double)i / (double)(n - 1);
                x[i] = geo ? (float)(fns[k].lo * pow(fns[k].hi / fns[k].lo, t))
                           : (float)(fns[k].lo + (fns[k].hi - fns[k].lo) * t);
            }
            psim__vmath_f32_isa(isa, fns[k].f, x, y, n);
            int64_t worst = 0;
            float at = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t u = ulps(y[i], (float)ref_vmath(fns[k].f, x[i]));
                if (u > worst)
                    worst = u, at = x[i];
            }
            if (worst > fns[k].max_ulps)
                g_error("vmath %s (isa %d): %" G_GINT64_FORMAT " ulps at x = %.9g", fns[k].name, isa,
                        worst, at);
            /* One element alone (a tail) gives what it gave inside the array. */
            for (int64_t i = 0; i < n; i += 9973) {
                psim__vmath_f32_isa(isa, fns[k].f, x + i, y1, 1);
                g_assert_cmpfloat(y1[0], ==, y[i]);
            }
        }
        /* Special values. */
        float sx[7] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, -1.0f, 1.0f}, sy[7];
        psim__vmath_f32_isa(isa, PSIM_VMATH_EXP, sx, sy, 7);
        g_assert_true(isinf(sy[0]) && sy[1] == 0 && isnan(sy[2]) && sy[3] == 1);
        psim__vmath_f32_isa(isa, PSIM_VMATH_LOG, sx, sy, 7);
        g_assert_true(isinf(sy[0]) && isnan(sy[1]) && isnan(sy[2]) && isinf(sy[3]) && sy[3] < 0 &&
                      isnan(sy[5]) && sy[6] == 0);
        psim__vmath_f32_isa(isa, PSIM_VMATH_TANH, sx, sy, 7);
        g_assert_true(sy[0] == 1 && sy[1] == -1 && isnan(sy[2]) && sy[3] == 0);
        psim__vmath_f32_isa(isa, PSIM_VMATH_ERF, sx, sy, 7);
        g_assert_true(sy[0] == 1 && sy[1] == -1 && isnan(sy[2]) && sy[3] == 0);
        psim__vmath_f32_isa(isa, PSIM_VMATH_SIGMOID, sx, sy, 7);
        g_assert_true(sy[0] == 1 && sy[1] == 0 && isnan(sy[2]) && sy[3] == 0.5f && sy[4] == 0.5f);
        /* GELU and SiLU in one pass give exactly what their float ops give in sequence (the nodes
         * the fusion pass replaces), erf and sigmoid from the same instruction set. */
        for (int64_t i = 0; i < n; i++)
            x[i] = -9.0f + 18.0f * (float)i / (float)(n - 1);
        float *t = g_new(float, n);
        for (int64_t i = 0; i < n; i++)
            t[i] = x[i] / PSIM_SQRT2_F;
        psim__vmath_f32_isa(isa, PSIM_VMATH_ERF, t, t, n);
        psim__vmath_f32_isa(isa, PSIM_VMATH_GELU, x, y, n);
        for (int64_t i = 0; i < n; i++)
            g_assert_cmpfloat(y[i], ==, (x[i] * (t[i] + 1.0f)) * 0.5f);
        psim__vmath_f32_isa(isa, PSIM_VMATH_SIGMOID, x, t, n);
        psim__vmath_f32_isa(isa, PSIM_VMATH_SILU, x, y, n);
        for (int64_t i = 0; i < n; i++)
            g_assert_cmpfloat(y[i], ==, x[i] * t[i]);
        g_free(t);
        /* In place, as Softmax calls it. */
        memcpy(y, x, sizeof(float) * 1000);
        psim__vmath_f32_isa(isa, PSIM_VMATH_TANH, y, y, 1000);
        for (int i = 0; i < 1000; i++)
            g_assert_cmpint(ulps(y[i], tanhf(x[i])), <=, 2);
    }
    if (g_test_verbose())
        g_printerr("vmath: instruction set %d chosen\n", psim__vmath_isa());
    g_free(x);
    g_free(y);
    g_free(y1);
}

static void test_where_cast(void)
{
    int64_t dc[2] = {3, 1}, dx[2] = {3, 4}, dy[1] = {4};
    g_autoptr(PsimTensor) c = psim_tensor_new(PSIM_DTYPE_BOOL, 2, dc, NULL);
    ((uint8_t *)c->data)[0] = 1;
    ((uint8_t *)c->data)[2] = 1;
    g_autoptr(PsimTensor) a = rand_f32(2, dx, -1, 1);
    g_autoptr(PsimTensor) b = rand_f32(1, dy, -1, 1);
    Node x = node_new("Where", 1);
    PsimTensor *in[3] = {c, a, b};
    g_autoptr(PsimTensor) y = run1(x, in, 3);
    double want[12];
    for (int i = 0; i < 12; i++)
        want[i] = ((uint8_t *)c->data)[i / 4] ? ((float *)a->data)[i] : ((float *)b->data)[i % 4];
    assert_close(y, want, 0, 0);
    node_free(x);

    /* Cast float32 -> int64 truncates; -> float16 -> float32 rounds to 11 bits. */
    Node xc = node_new("Cast", 1);
    psim_graph_node_attr_set_int(xc.g, xc.n, "to", PSIM_DTYPE_INT64);
    g_autoptr(PsimTensor) f = rand_f32(2, dx, -100, 100);
    PsimTensor *ci[1] = {f};
    g_autoptr(PsimTensor) yi = run1(xc, ci, 1);
    g_assert_cmpint(yi->dtype, ==, PSIM_DTYPE_INT64);
    for (int i = 0; i < 12; i++)
        g_assert_cmpint(psim_tensor_get_i64(yi, i), ==, (int64_t)((float *)f->data)[i]);
    psim_graph_node_attr_set_int(xc.g, xc.n, "to", PSIM_DTYPE_FLOAT16);
    g_autoptr(PsimTensor) yh = run1(xc, ci, 1);
    g_assert_cmpint(yh->dtype, ==, PSIM_DTYPE_FLOAT16);
    psim_graph_node_attr_set_int(xc.g, xc.n, "to", PSIM_DTYPE_FLOAT32);
    ci[0] = yh;
    g_autoptr(PsimTensor) yf = run1(xc, ci, 1);
    for (int i = 0; i < 12; i++)
        want[i] = ((float *)f->data)[i];
    assert_close(yf, want, 1.0 / 2048, 0); /* half precision: 11-bit significand */
    psim_graph_node_attr_set_int(xc.g, xc.n, "to", PSIM_DTYPE_STRING);
    PsimTensor *out[1];
    GError *err = NULL;
    ci[0] = f;
    g_assert_false(run_n(xc, ci, 1, out, &err));
    g_clear_error(&err);
    node_free(xc);
}

/* ---------------------------------------------------------------------------------------- */
/* MatMul and Gemm. */

static void check_matmul(int32_t ra, const int64_t *da, int32_t rb, const int64_t *db,
                         int32_t ro, const int64_t *dout)
{
    g_autoptr(PsimTensor) a = rand_f32(ra, da, -1, 1);
    g_autoptr(PsimTensor) b = rand_f32(rb, db, -1, 1);
    Node x = node_new("MatMul", 1);
    PsimTensor *in[2] = {a, b};
    g_autoptr(PsimTensor) y = run1(x, in, 2);
    assert_shape(y, ro, dout);
    /* Reference: promote 1-D, broadcast batch dims by index. */
    int64_t M = ra == 1 ? 1 : da[ra - 2], K = da[ra - 1], N = rb == 1 ? 1 : db[rb - 1];
    int64_t nb = y->n_elems / (M * N);
    int32_t ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, bo = MAX(ba, bb);
    int64_t bd[8] = {0};
    for (int32_t i = 0; i < bo; i++)
        bd[i] = dout[i];
    g_autofree double *want = g_new(double, y->n_elems);
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t idx[8];
        unravel(bi, bo, bd, idx);
        int64_t ia = 0, ib = 0;
        for (int32_t k = 0; k < ba; k++)
            ia = ia * da[k] + (da[k] == 1 ? 0 : idx[k + bo - ba]);
        for (int32_t k = 0; k < bb; k++)
            ib = ib * db[k] + (db[k] == 1 ? 0 : idx[k + bo - bb]);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (double)((float *)a->data)[ia * M * K + i * K + k] *
                         ((float *)b->data)[ib * K * N + k * N + j];
                want[(bi * M + i) * N + j] = s;
            }
    }
    assert_close(y, want, 1e-4, 1e-5);
    node_free(x);
}

static void test_matmul(void)
{
    check_matmul(2, (int64_t[]){17, 33}, 2, (int64_t[]){33, 9}, 2, (int64_t[]){17, 9});
    check_matmul(3, (int64_t[]){3, 4, 5}, 2, (int64_t[]){5, 6}, 3, (int64_t[]){3, 4, 6});
    check_matmul(4, (int64_t[]){2, 1, 4, 5}, 3, (int64_t[]){3, 5, 2}, 4, (int64_t[]){2, 3, 4, 2});
    check_matmul(1, (int64_t[]){5}, 2, (int64_t[]){5, 3}, 1, (int64_t[]){3});
    check_matmul(2, (int64_t[]){4, 5}, 1, (int64_t[]){5}, 1, (int64_t[]){4});
    check_matmul(1, (int64_t[]){5}, 3, (int64_t[]){2, 5, 3}, 2, (int64_t[]){2, 3});
    /* int64 */
    g_autoptr(PsimTensor) a = rand_i64(2, (int64_t[]){3, 4}, -9, 9);
    g_autoptr(PsimTensor) b = rand_i64(2, (int64_t[]){4, 2}, -9, 9);
    Node x = node_new("MatMul", 1);
    PsimTensor *in[2] = {a, b};
    g_autoptr(PsimTensor) y = run1(x, in, 2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            int64_t s = 0;
            for (int k = 0; k < 4; k++)
                s += ((int64_t *)a->data)[i * 4 + k] * ((int64_t *)b->data)[k * 2 + j];
            g_assert_cmpint(((int64_t *)y->data)[i * 2 + j], ==, s);
        }
    /* Inner mismatch is an error. */
    g_autoptr(PsimTensor) c = rand_f32(2, (int64_t[]){3, 4}, 0, 1);
    g_autoptr(PsimTensor) e = rand_f32(2, (int64_t[]){5, 2}, 0, 1);
    PsimTensor *bad[2] = {c, e};
    assert_run_fails(x, bad, 2, "node0");
    node_free(x);
}

/* Einsum on float32 operands (the batched-GEMM path where it applies, the general loop where
 * not) against the same equation on float64 copies (always the general loop, in double). */
static void check_einsum(const char *eq, int32_t ra, const int64_t *da, int32_t rb, const int64_t *db)
{
    g_autoptr(PsimTensor) a = rand_f32(ra, da, -1, 1);
    g_autoptr(PsimTensor) b = rand_f32(rb, db, -1, 1);
    g_autoptr(PsimTensor) a64 = psim_tensor_new(PSIM_DTYPE_FLOAT64, ra, da, NULL);
    g_autoptr(PsimTensor) b64 = psim_tensor_new(PSIM_DTYPE_FLOAT64, rb, db, NULL);
    for (int64_t i = 0; i < a->n_elems; i++)
        ((double *)a64->data)[i] = ((float *)a->data)[i];
    for (int64_t i = 0; i < b->n_elems; i++)
        ((double *)b64->data)[i] = ((float *)b->data)[i];
    Node x = node_new("Einsum", 1);
    psim_graph_node_attr_set_string(x.g, x.n, "equation", eq);
    PsimTensor *in[2] = {a, b}, *in64[2] = {a64, b64};
    g_autoptr(PsimTensor) y = run1(x, in, 2);
    g_autoptr(PsimTensor) want = run1(x, in64, 2);
    g_assert_cmpint(y->dtype, ==, PSIM_DTYPE_FLOAT32);
    assert_shape(y, want->rank, want->dims);
    assert_close(y, want->data, 1e-4, 1e-5);
    node_free(x);
}

static void test_einsum(void)
{
    /* Batched GEMM as it is, B transposed, A transposed (maxvit_t's attention is the first two). */
    check_einsum("BGHIJ,BGHJD->BGHID", 5, (int64_t[]){1, 2, 3, 7, 5}, 5, (int64_t[]){1, 2, 3, 5, 4});
    check_einsum("BGHID,BGHJD->BGHIJ", 5, (int64_t[]){1, 2, 3, 7, 4}, 5, (int64_t[]){1, 2, 3, 5, 4});
    check_einsum("bji,bjk->bik", 3, (int64_t[]){3, 6, 5}, 3, (int64_t[]){3, 6, 4});
    /* The output permuted; operands permuted (two summed labels in other orders); none summed
     * (an outer product); no rows or columns; everything summed. */
    check_einsum("ij,jk->ki", 2, (int64_t[]){5, 6}, 2, (int64_t[]){6, 7});
    check_einsum("bij,bjk->kbi", 3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 4, 5});
    check_einsum("abc,cad->db", 3, (int64_t[]){3, 4, 5}, 3, (int64_t[]){5, 3, 2});
    check_einsum("i,j->ij", 1, (int64_t[]){5}, 1, (int64_t[]){3});
    check_einsum("ij,ij->i", 2, (int64_t[]){4, 9}, 2, (int64_t[]){4, 9});
    check_einsum("ij,ij->", 2, (int64_t[]){4, 9}, 2, (int64_t[]){4, 9});
    check_einsum("bij,jk", 3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 5}); /* implicit output */
    /* The general loop: a label summed within one operand, a diagonal, a broadcast dim. */
    check_einsum("ij,jk->i", 2, (int64_t[]){3, 4}, 2, (int64_t[]){4, 5});
    check_einsum("ii,ij->j", 2, (int64_t[]){4, 4}, 2, (int64_t[]){4, 3});
    check_einsum("...ij,...jk->...ik", 3, (int64_t[]){1, 3, 4}, 3, (int64_t[]){2, 4, 5});
}

static void test_gemm(void)
{
    for (int64_t M = 7; M >= 1; M -= 6) /* M = 1 takes the GEMV path */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cm = 0; cm < 3; cm++) {
                int64_t N = 5, K = 11;
                int64_t dA[2] = {ta ? K : M, ta ? M : K}, dB[2] = {tb ? N : K, tb ? K : N};
                int64_t dC[2] = {cm == 2 ? M : 1, N};
                g_autoptr(PsimTensor) a = rand_f32(2, dA, -1, 1);
                g_autoptr(PsimTensor) b = rand_f32(2, dB, -1, 1);
                g_autoptr(PsimTensor) c = cm ? rand_f32(cm == 1 ? 1 : 2, cm == 1 ? dC + 1 : dC, -1, 1) : NULL;
                Node x = node_new("Gemm", 1);
                psim_graph_node_attr_set_int(x.g, x.n, "transA", ta);
                psim_graph_node_attr_set_int(x.g, x.n, "transB", tb);
                psim_graph_node_attr_set_float(x.g, x.n, "alpha", 0.5);
                psim_graph_node_attr_set_float(x.g, x.n, "beta", 2.0);
                PsimTensor *in[3] = {a, b, c};
                g_autoptr(PsimTensor) y = run1(x, in, cm ? 3 : 2);
                double want[35];
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double s = 0;
                        for (int64_t k = 0; k < K; k++)
                            s += (double)((float *)a->data)[ta ? k * M + i : i * K + k] *
                                 ((float *)b->data)[tb ? j * K + k : k * N + j];
                        double cv = cm == 0 ? 0 : cm == 1 ? ((float *)c->data)[j]
                                                          : ((float *)c->data)[i * N + j];
                        want[i * N + j] = 0.5 * s + 2.0 * cv;
                    }
                assert_close(y, want, 1e-4, 1e-5);
                node_free(x);
            }
}

/* ---------------------------------------------------------------------------------------- */
/* Conv. */

typedef struct {
    int64_t N, C, H, W, M, kh, kw, group, sh, sw, dh, dw, pt, pl, pb, pr;
    const char *auto_pad;
    gboolean bias, one_d;
} ConvCase;

static void check_conv(const ConvCase *cc)
{
    int64_t dx[4] = {cc->N, cc->C, cc->H, cc->W}, dw[4] = {cc->M, cc->C / cc->group, cc->kh, cc->kw};
    if (cc->one_d) {
        dx[2] = cc->W;
        dw[2] = cc->kw;
    }
    int32_t r = cc->one_d ? 3 : 4;
    g_autoptr(PsimTensor) x = rand_f32(r, dx, -1, 1);
    g_autoptr(PsimTensor) w = rand_f32(r, dw, -1, 1);
    g_autoptr(PsimTensor) b = cc->bias ? rand_f32(1, &cc->M, -1, 1) : NULL;
    Node nd = node_new("Conv", 1);
    psim_graph_node_attr_set_int(nd.g, nd.n, "group", cc->group);
    if (cc->one_d) {
        psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 1, &cc->sw);
        psim_graph_node_attr_set_ints(nd.g, nd.n, "dilations", 1, &cc->dw);
        psim_graph_node_attr_set_ints(nd.g, nd.n, "pads", 2, (int64_t[]){cc->pl, cc->pr});
    } else {
        psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 2, (int64_t[]){cc->sh, cc->sw});
        psim_graph_node_attr_set_ints(nd.g, nd.n, "dilations", 2, (int64_t[]){cc->dh, cc->dw});
        if (cc->auto_pad)
            psim_graph_node_attr_set_string(nd.g, nd.n, "auto_pad", cc->auto_pad);
        else
            psim_graph_node_attr_set_ints(nd.g, nd.n, "pads", 4,
                                          (int64_t[]){cc->pt, cc->pl, cc->pb, cc->pr});
    }
    PsimTensor *in[3] = {x, w, b};
    g_autoptr(PsimTensor) y = run1(nd, in, 3);
    int64_t H = cc->one_d ? 1 : cc->H, kh = cc->one_d ? 1 : cc->kh;
    int64_t pt = cc->pt, pl = cc->pl, pb = cc->pb, pr = cc->pr;
    if (cc->auto_pad) { /* SAME_UPPER */
        int64_t oh = (H + cc->sh - 1) / cc->sh, ow = (cc->W + cc->sw - 1) / cc->sw;
        int64_t th = MAX(0, (oh - 1) * cc->sh + (kh - 1) * cc->dh + 1 - H);
        int64_t tw = MAX(0, (ow - 1) * cc->sw + (cc->kw - 1) * cc->dw + 1 - cc->W);
        pt = th / 2, pb = th - pt, pl = tw / 2, pr = tw - pl;
    }
    if (cc->one_d)
        pt = pb = 0;
    int64_t Ho = (H + pt + pb - ((kh - 1) * cc->dh + 1)) / cc->sh + 1;
    int64_t Wo = (cc->W + pl + pr - ((cc->kw - 1) * cc->dw + 1)) / cc->sw + 1;
    if (cc->one_d)
        assert_shape(y, 3, (int64_t[]){cc->N, cc->M, Wo});
    else
        assert_shape(y, 4, (int64_t[]){cc->N, cc->M, Ho, Wo});
    int64_t Cg = cc->C / cc->group, Mg = cc->M / cc->group;
    g_autofree double *want = g_new(double, y->n_elems);
    const float *xd = x->data, *wd = w->data;
    for (int64_t n = 0; n < cc->N; n++)
        for (int64_t m = 0; m < cc->M; m++)
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    double s = b ? ((float *)b->data)[m] : 0;
                    int64_t gi = m / Mg;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < cc->kw; j++) {
                                int64_t ih = oh * cc->sh - pt + i * cc->dh;
                                int64_t iw = ow * cc->sw - pl + j * cc->dw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= cc->W)
                                    continue;
                                s += (double)xd[((n * cc->C + gi * Cg + c) * H + ih) * cc->W + iw] *
                                     wd[((m * Cg + c) * kh + i) * cc->kw + j];
                            }
                    want[((n * cc->M + m) * Ho + oh) * Wo + ow] = s;
                }
    /* Sums of K products of values in [-1, 1] have a scale of sqrt(K / 9): outputs near zero
     * after cancellation get an absolute bound proportional to that scale. */
    assert_close(y, want, 1e-4, 1e-5 * sqrt((double)(Cg * kh * cc->kw)));
    node_free(nd);
}

/* 3-D Conv (float32) against a naive reference: dims {N, C, D, H, W}, weights {M, C/group, KD,
 * KH, KW}, strides, dilations and begin/end pads per spatial axis. */
static void check_conv3d(const int64_t *dx, const int64_t *dw, int64_t group, const int64_t *st,
                         const int64_t *dil, const int64_t *pads, gboolean bias)
{
    g_autoptr(PsimTensor) x = rand_f32(5, dx, -1, 1);
    g_autoptr(PsimTensor) w = rand_f32(5, dw, -1, 1);
    g_autoptr(PsimTensor) b = bias ? rand_f32(1, &dw[0], -1, 1) : NULL;
    Node nd = node_new("Conv", 1);
    psim_graph_node_attr_set_int(nd.g, nd.n, "group", group);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 3, st);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "dilations", 3, dil);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "pads", 6, pads);
    PsimTensor *in[3] = {x, w, b};
    g_autoptr(PsimTensor) y = run1(nd, in, 3);
    int64_t N = dx[0], C = dx[1], M = dw[0], Cg = C / group, Mg = M / group, od[5] = {N, M, 0, 0, 0};
    for (int a = 0; a < 3; a++)
        od[2 + a] = (dx[2 + a] + pads[a] + pads[3 + a] - ((dw[2 + a] - 1) * dil[a] + 1)) / st[a] + 1;
    assert_shape(y, 5, od);
    g_autofree double *want = g_new(double, y->n_elems);
    const float *xd = x->data, *wd = w->data;
    for (int64_t o = 0; o < y->n_elems; o++) {
        int64_t idx[5];
        unravel(o, 5, od, idx);
        int64_t n = idx[0], m = idx[1], gi = m / Mg;
        double s = b ? ((float *)b->data)[m] : 0;
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t kd = 0; kd < dw[2]; kd++)
                for (int64_t kh = 0; kh < dw[3]; kh++)
                    for (int64_t kw = 0; kw < dw[4]; kw++) {
                        int64_t id = idx[2] * st[0] - pads[0] + kd * dil[0];
                        int64_t ih = idx[3] * st[1] - pads[1] + kh * dil[1];
                        int64_t iw = idx[4] * st[2] - pads[2] + kw * dil[2];
                        if (id < 0 || id >= dx[2] || ih < 0 || ih >= dx[3] || iw < 0 || iw >= dx[4])
                            continue;
                        s += (double)xd[(((n * C + gi * Cg + c) * dx[2] + id) * dx[3] + ih) * dx[4] + iw] *
                             wd[(((m * Cg + c) * dw[2] + kd) * dw[3] + kh) * dw[4] + kw];
                    }
        want[o] = s;
    }
    assert_close(y, want, 1e-4, 1e-5 * sqrt((double)(Cg * dw[2] * dw[3] * dw[4])));
    node_free(nd);
}

static void test_conv(void)
{
    /* 3-D: r3d_18's stem (3x7x7, stride 1x2x2, pads 1x3x3), strided and dilated with uneven
     * pads, grouped, and one whose depth taps all fall in the padding for some output slices. */
    check_conv3d((int64_t[]){1, 3, 4, 11, 12}, (int64_t[]){5, 3, 3, 7, 7}, 1, (int64_t[]){1, 2, 2},
                 (int64_t[]){1, 1, 1}, (int64_t[]){1, 3, 3, 1, 3, 3}, TRUE);
    check_conv3d((int64_t[]){2, 4, 7, 6, 5}, (int64_t[]){6, 2, 2, 3, 2}, 2, (int64_t[]){2, 1, 2},
                 (int64_t[]){2, 2, 1}, (int64_t[]){0, 1, 1, 2, 0, 1}, FALSE);
    check_conv3d((int64_t[]){1, 2, 2, 5, 5}, (int64_t[]){3, 2, 1, 3, 3}, 1, (int64_t[]){1, 1, 1},
                 (int64_t[]){1, 1, 1}, (int64_t[]){2, 1, 1, 2, 1, 1}, TRUE);
    ConvCase cases[] = {
        {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},  /* 3x3 pad 1 */
        {1, 8, 6, 7, 5, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, NULL, TRUE, FALSE},   /* direct 1x1 */
        {1, 8, 9, 9, 6, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, NULL, FALSE, FALSE},  /* 1x1 stride 2 */
        {2, 4, 12, 10, 6, 3, 5, 2, 2, 3, 1, 1, 2, 1, 0, 2, NULL, TRUE, FALSE}, /* groups, asym */
        /* groups of 8 and 16 channels (oneDNN where it has a direct kernel for them), strided */
        {1, 16, 14, 13, 16, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},
        {2, 48, 9, 9, 24, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, NULL, FALSE, FALSE},
        {1, 3, 13, 13, 4, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2, NULL, TRUE, FALSE}, /* dilation */
        {1, 6, 8, 8, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},   /* depthwise */
        /* depthwise (the direct loops): stride 2 with uneven pads, 5x5, dilation, batch 2,
         * SAME_UPPER, 1-D, outputs wider than a vector with a remainder */
        {2, 5, 17, 23, 5, 3, 3, 5, 2, 2, 1, 1, 1, 0, 0, 1, NULL, TRUE, FALSE},
        {1, 7, 19, 37, 7, 5, 5, 7, 1, 1, 1, 1, 2, 2, 2, 2, NULL, FALSE, FALSE},
        {1, 4, 15, 15, 4, 3, 3, 4, 1, 1, 2, 3, 2, 3, 1, 0, NULL, TRUE, FALSE},
        {1, 3, 14, 21, 3, 5, 5, 3, 2, 2, 1, 1, 0, 0, 0, 0, "SAME_UPPER", TRUE, FALSE},
        /* stride 2 across through the even/odd column planes: even and odd widths, a left pad
         * of 1 (odd offsets, negative) and of 2, stride 1 down and 2 across, no bias */
        {1, 6, 11, 16, 6, 3, 3, 6, 2, 2, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},
        {2, 5, 9, 19, 5, 5, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, NULL, FALSE, FALSE},
        {1, 4, 10, 27, 4, 3, 3, 4, 1, 2, 1, 1, 1, 1, 0, 0, NULL, TRUE, FALSE},
        {2, 4, 1, 33, 4, 1, 3, 4, 1, 3, 1, 1, 0, 1, 0, 1, NULL, TRUE, TRUE},
        {1, 3, 7, 8, 2, 3, 3, 1, 2, 2, 1, 1, 0, 0, 0, 0, "SAME_UPPER", TRUE, FALSE},
        {2, 4, 1, 20, 3, 1, 5, 1, 1, 2, 1, 1, 0, 2, 0, 1, NULL, TRUE, TRUE},   /* 1-D */
        /* depthwise through the polyphase planes: many channels of 7x7 (outputs narrower than
         * a vector), 7x7 kernels with and without stride, stride 2 down only, asymmetric pads,
         * an image smaller than the kernel, 5x5 stride 2 with odd pads */
        {1, 20, 7, 7, 20, 3, 3, 20, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},
        {2, 6, 13, 12, 6, 7, 7, 6, 1, 1, 1, 1, 3, 3, 3, 3, NULL, TRUE, FALSE},
        {1, 3, 9, 10, 3, 7, 7, 3, 2, 2, 1, 1, 3, 3, 3, 3, NULL, TRUE, FALSE},
        {1, 5, 12, 9, 5, 3, 3, 5, 2, 1, 1, 1, 0, 1, 1, 0, NULL, FALSE, FALSE},
        {1, 3, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},
        {1, 4, 16, 16, 4, 5, 5, 4, 2, 2, 1, 1, 1, 2, 2, 1, NULL, TRUE, FALSE},
        {1, 4, 9, 40, 4, 3, 3, 4, 1, 2, 1, 1, 0, 0, 0, 0, NULL, TRUE, FALSE},
        {1, 2, 300, 40, 3, 7, 7, 1, 1, 1, 1, 1, 3, 3, 3, 3, NULL, TRUE, FALSE}, /* several bands */
        /* 3x3 stride 1, about 56x56 outputs, 64-256 channels: Winograd F(2x2, 3x3); odd sizes,
         * uneven pads, several tile blocks, batch of 2 */
        {2, 64, 55, 57, 40, 3, 3, 1, 1, 1, 1, 1, 1, 0, 2, 1, NULL, TRUE, FALSE},
        {1, 64, 59, 58, 64, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, NULL, FALSE, FALSE},
        {1, 96, 50, 52, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, NULL, TRUE, FALSE},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
        check_conv(&cases[i]);
    /* Weights that do not fit the channels are an error. */
    g_autoptr(PsimTensor) x = rand_f32(4, (int64_t[]){1, 3, 5, 5}, 0, 1);
    g_autoptr(PsimTensor) w = rand_f32(4, (int64_t[]){2, 2, 3, 3}, 0, 1);
    Node nd = node_new("Conv", 1);
    PsimTensor *in[2] = {x, w}, *out[1];
    GError *err = NULL;
    g_assert_false(run_n(nd, in, 2, out, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    node_free(nd);
}

/* ---------------------------------------------------------------------------------------- */
/* Pooling. */

static void check_pool(const char *op, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p,
                       gboolean ceil_mode, gboolean incl, gboolean with_indices)
{
    int64_t dx[4] = {2, 3, H, W};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    gboolean is_max = !strcmp(op, "MaxPool");
    Node nd = node_new(op, is_max && with_indices ? 2 : 1);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "kernel_shape", 2, (int64_t[]){k, k});
    psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 2, (int64_t[]){s, s});
    psim_graph_node_attr_set_ints(nd.g, nd.n, "pads", 4, (int64_t[]){p, p, p, p});
    psim_graph_node_attr_set_int(nd.g, nd.n, "ceil_mode", ceil_mode);
    psim_graph_node_attr_set_int(nd.g, nd.n, "count_include_pad", incl);
    PsimTensor *in[1] = {x}, *out[2];
    GError *err = NULL;
    g_assert_true(run_n(nd, in, 1, out, &err));
    g_autoptr(PsimTensor) y = out[0];
    g_autoptr(PsimTensor) ind = is_max && with_indices ? out[1] : NULL;
    int64_t span = H + 2 * p - k;
    int64_t Ho = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (Ho - 1) * s >= H + p)
        Ho--;
    int64_t Wo = Ho; /* square inputs in these cases */
    assert_shape(y, 4, (int64_t[]){2, 3, Ho, Wo});
    g_autofree double *want = g_new(double, y->n_elems);
    const float *xd = x->data;
    for (int64_t nc = 0; nc < 6; nc++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++) {
                double best = -INFINITY, sum = 0;
                int64_t cnt = 0, cntp = 0, bi = -1;
                for (int64_t i = 0; i < k; i++)
                    for (int64_t j = 0; j < k; j++) {
                        int64_t ih = oh * s - p + i, iw = ow * s - p + j;
                        if (ih < H + p && iw < W + p)
                            cntp++;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                            continue;
                        double v = xd[(nc * H + ih) * W + iw];
                        if (v > best) {
                            best = v;
                            bi = (nc * H + ih) * W + iw;
                        }
                        sum += v;
                        cnt++;
                    }
                int64_t o = (nc * Ho + oh) * Wo + ow;
                want[o] = is_max ? best : sum / (incl ? cntp : cnt);
                if (ind)
                    g_assert_cmpint(((int64_t *)ind->data)[o], ==, bi);
            }
    assert_close(y, want, 1e-6, 1e-7);
    node_free(nd);
}

static void test_pool(void)
{
    for (int wi = 0; wi < 2; wi++) { /* with Indices (general path) and without (fast path) */
        check_pool("MaxPool", 8, 8, 3, 2, 1, FALSE, FALSE, wi);
        check_pool("MaxPool", 7, 7, 3, 2, 0, TRUE, FALSE, wi);
        check_pool("MaxPool", 6, 6, 2, 2, 0, FALSE, FALSE, wi);
        /* 2 x 2, stride 2 (its own path): an odd size (the last column and row dropped), the
         * same with ceil_mode (a window past the edge: not that path), rows of outputs that end
         * in a block overlapping the one before (33, 14) or in whole blocks (8) */
        check_pool("MaxPool", 7, 7, 2, 2, 0, FALSE, FALSE, wi);
        check_pool("MaxPool", 7, 7, 2, 2, 0, TRUE, FALSE, wi);
        check_pool("MaxPool", 66, 66, 2, 2, 0, FALSE, FALSE, wi);
        check_pool("MaxPool", 28, 28, 2, 2, 0, FALSE, FALSE, wi);
        check_pool("MaxPool", 16, 16, 2, 2, 0, FALSE, FALSE, wi);
        check_pool("MaxPool", 9, 9, 3, 1, 1, FALSE, FALSE, wi);
        /* several blocks of outputs, stride 3 (nine planes), a 5x5 window with pads of 2 */
        check_pool("MaxPool", 40, 40, 3, 2, 1, TRUE, FALSE, wi);
        check_pool("MaxPool", 35, 35, 5, 3, 2, FALSE, FALSE, wi);
    }
    check_pool("AveragePool", 40, 40, 3, 2, 1, TRUE, TRUE, FALSE);
    check_pool("AveragePool", 35, 35, 5, 3, 2, FALSE, FALSE, FALSE);
    check_pool("AveragePool", 14, 14, 2, 2, 0, FALSE, FALSE, FALSE);
    check_pool("AveragePool", 8, 8, 3, 2, 1, FALSE, FALSE, FALSE);
    check_pool("AveragePool", 8, 8, 3, 2, 1, FALSE, TRUE, FALSE);
    check_pool("AveragePool", 7, 7, 3, 1, 0, FALSE, FALSE, FALSE);
    check_pool("AveragePool", 7, 7, 2, 2, 0, TRUE, FALSE, FALSE);

    int64_t dx[4] = {2, 3, 5, 6};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    Node nd = node_new("GlobalAveragePool", 1);
    PsimTensor *in[1] = {x};
    g_autoptr(PsimTensor) y = run1(nd, in, 1);
    assert_shape(y, 4, (int64_t[]){2, 3, 1, 1});
    double want[6];
    for (int c = 0; c < 6; c++) {
        double s = 0;
        for (int i = 0; i < 30; i++)
            s += ((float *)x->data)[c * 30 + i];
        want[c] = s / 30;
    }
    assert_close(y, want, 1e-5, 1e-7);
    node_free(nd);
}

/* ---------------------------------------------------------------------------------------- */
/* Normalizations. */

static void test_norm(void)
{
    int64_t dx[4] = {2, 4, 3, 5}, dc = 4;
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -2, 2);
    g_autoptr(PsimTensor) sc = rand_f32(1, &dc, 0.5, 1.5);
    g_autoptr(PsimTensor) bi = rand_f32(1, &dc, -1, 1);
    g_autoptr(PsimTensor) mu = rand_f32(1, &dc, -1, 1);
    g_autoptr(PsimTensor) var = rand_f32(1, &dc, 0.1, 2);
    double want[120];
    const float *xd = x->data;
    {
        Node nd = node_new("BatchNormalization", 1);
        psim_graph_node_attr_set_float(nd.g, nd.n, "epsilon", 1e-3);
        PsimTensor *in[5] = {x, sc, bi, mu, var};
        g_autoptr(PsimTensor) y = run1(nd, in, 5);
        for (int i = 0; i < 120; i++) {
            int c = (i / 15) % 4;
            want[i] = (xd[i] - ((float *)mu->data)[c]) / sqrt(((float *)var->data)[c] + 1e-3) *
                          ((float *)sc->data)[c] + ((float *)bi->data)[c];
        }
        assert_close(y, want, 1e-5, 1e-6);
        node_free(nd);
    }
    {
        Node nd = node_new("LRN", 1);
        psim_graph_node_attr_set_int(nd.g, nd.n, "size", 3);
        psim_graph_node_attr_set_float(nd.g, nd.n, "alpha", 0.5);
        PsimTensor *in[1] = {x};
        g_autoptr(PsimTensor) y = run1(nd, in, 1);
        for (int i = 0; i < 120; i++) {
            int n = i / 60, c = (i / 15) % 4, s = i % 15;
            double sq = 0;
            for (int j = c - 1; j <= c + 1; j++)
                if (j >= 0 && j < 4)
                    sq += (double)xd[(n * 4 + j) * 15 + s] * xd[(n * 4 + j) * 15 + s];
            want[i] = xd[i] / pow(1.0 + 0.5 / 3 * sq, 0.75);
        }
        assert_close(y, want, 1e-5, 1e-6);
        node_free(nd);
    }
    {
        int64_t dn[2] = {3, 5};
        g_autoptr(PsimTensor) s2 = rand_f32(2, dn, 0.5, 1.5);
        g_autoptr(PsimTensor) b2 = rand_f32(2, dn, -1, 1);
        Node nd = node_new("LayerNormalization", 3);
        psim_graph_node_attr_set_int(nd.g, nd.n, "axis", -2);
        PsimTensor *in[3] = {x, s2, b2}, *out[3];
        GError *err = NULL;
        g_assert_true(run_n(nd, in, 3, out, &err));
        double wm[8], wi[8];
        for (int o = 0; o < 8; o++) {
            double m = 0, v = 0;
            for (int i = 0; i < 15; i++)
                m += xd[o * 15 + i];
            m /= 15;
            for (int i = 0; i < 15; i++)
                v += (xd[o * 15 + i] - m) * (xd[o * 15 + i] - m);
            v /= 15;
            wm[o] = m;
            wi[o] = 1 / sqrt(v + 1e-5);
            for (int i = 0; i < 15; i++)
                want[o * 15 + i] = (xd[o * 15 + i] - m) * wi[o] * ((float *)s2->data)[i] +
                                   ((float *)b2->data)[i];
        }
        assert_close(out[0], want, 1e-5, 1e-6);
        assert_shape(out[1], 4, (int64_t[]){2, 4, 1, 1});
        assert_close(out[1], wm, 1e-5, 1e-6);
        assert_close(out[2], wi, 1e-5, 1e-6);
        for (int k = 0; k < 3; k++)
            psim_tensor_unref(out[k]);
        node_free(nd);
    }
    {
        /* Before opset 13, Softmax coerces to 2-D at axis (default 1): all 60 values of each
         * batch entry are normalized together. */
        Node nd = node_new("Softmax", 1);
        psim_graph_set_opset(nd.g, 9);
        PsimTensor *in[1] = {x};
        g_autoptr(PsimTensor) y = run1(nd, in, 1);
        for (int n = 0; n < 2; n++) {
            double mx = -INFINITY, s = 0;
            for (int i = 0; i < 60; i++)
                mx = MAX(mx, xd[n * 60 + i]);
            for (int i = 0; i < 60; i++)
                s += exp(xd[n * 60 + i] - mx);
            for (int i = 0; i < 60; i++)
                want[n * 60 + i] = exp(xd[n * 60 + i] - mx) / s;
        }
        assert_close(y, want, 1e-5, 1e-7);
        node_free(nd);
    }
    static const char *sm[] = {"Softmax", "LogSoftmax"};
    for (int o = 0; o < 2; o++)
        for (int axis = -1; axis <= 1; axis += 2) {
            Node nd = node_new(sm[o], 1);
            psim_graph_node_attr_set_int(nd.g, nd.n, "axis", axis);
            PsimTensor *in[1] = {x};
            g_autoptr(PsimTensor) y = run1(nd, in, 1);
            /* axis -1: groups of 5 contiguous; axis 1: 4 values at stride 15. */
            int64_t A = axis < 0 ? 5 : 4, st = axis < 0 ? 1 : 15;
            for (int i = 0; i < 120; i++) {
                int64_t a = (i / st) % A, base = i - a * st;
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < A; j++)
                    mx = MAX(mx, xd[base + j * st]);
                for (int64_t j = 0; j < A; j++)
                    s += exp(xd[base + j * st] - mx);
                want[i] = o ? xd[i] - mx - log(s) : exp(xd[i] - mx) / s;
            }
            assert_close(y, want, 1e-5, 1e-6);
            node_free(nd);
        }
    /* Last-axis rows over several chunks of the row kernel (49-wide: 83 rows a chunk; one row
     * longer than a chunk), with tails past the eight lanes. */
    static const int64_t shapes[][2] = {{200, 49}, {3, 5001}, {7, 3}};
    for (size_t c = 0; c < G_N_ELEMENTS(shapes); c++)
        for (int o = 0; o < 2; o++) {
            int64_t R = shapes[c][0], A = shapes[c][1];
            g_autoptr(PsimTensor) xr = rand_f32(2, shapes[c], -8, 8);
            Node nd = node_new(sm[o], 1);
            PsimTensor *in[1] = {xr};
            g_autoptr(PsimTensor) y = run1(nd, in, 1);
            g_autofree double *wr = g_new(double, R * A);
            const float *v = xr->data;
            for (int64_t r = 0; r < R; r++) {
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < A; j++)
                    mx = MAX(mx, v[r * A + j]);
                for (int64_t j = 0; j < A; j++)
                    s += exp(v[r * A + j] - mx);
                for (int64_t j = 0; j < A; j++)
                    wr[r * A + j] = o ? v[r * A + j] - mx - log(s) : exp(v[r * A + j] - mx) / s;
            }
            /* LogSoftmax is x - (max + log sum) in float32: for |x| up to 8, within a few ulps of
             * 8 (9.5e-7 each) of the exact value, however near 0 it is. */
            assert_close(y, wr, 1e-5, o ? 4e-6 : 1e-7);
            node_free(nd);
        }
}

/* ---------------------------------------------------------------------------------------- */
/* Shape and data movement. */

static void test_views(void)
{
    int64_t dx[4] = {2, 3, 1, 4};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    {
        Node nd = node_new("Reshape", 1);
        g_autoptr(PsimTensor) s = ints(3, (int64_t[]){0, -1, 2});
        PsimTensor *in[2] = {x, s};
        g_autoptr(PsimTensor) y = run1(nd, in, 2);
        assert_shape(y, 3, (int64_t[]){2, 6, 2});
        g_assert_true(y->data == x->data); /* a view */
        g_autoptr(PsimTensor) bad = ints(2, (int64_t[]){5, -1});
        in[1] = bad;
        PsimTensor *out[1];
        GError *err = NULL;
        g_assert_false(run_n(nd, in, 2, out, &err));
        g_assert_nonnull(strstr(err->message, "node0"));
        g_clear_error(&err);
        node_free(nd);
    }
    {
        Node nd = node_new("Flatten", 1);
        psim_graph_node_attr_set_int(nd.g, nd.n, "axis", 2);
        PsimTensor *in[1] = {x};
        g_autoptr(PsimTensor) y = run1(nd, in, 1);
        assert_shape(y, 2, (int64_t[]){6, 4});
        node_free(nd);
    }
    {
        Node nd = node_new("Squeeze", 1);
        PsimTensor *in[1] = {x};
        g_autoptr(PsimTensor) y = run1(nd, in, 1);
        assert_shape(y, 3, (int64_t[]){2, 3, 4});
        g_autoptr(PsimTensor) ax = ints(1, (int64_t[]){1});
        PsimTensor *in2[2] = {x, ax}, *out[1];
        GError *err = NULL;
        g_assert_false(run_n(nd, in2, 2, out, &err)); /* dim 1 is not 1 */
        g_clear_error(&err);
        node_free(nd);
        Node nu = node_new("Unsqueeze", 1);
        g_autoptr(PsimTensor) ax2 = ints(2, (int64_t[]){0, -1});
        PsimTensor *in3[2] = {x, ax2};
        g_autoptr(PsimTensor) z = run1(nu, in3, 2);
        assert_shape(z, 6, (int64_t[]){1, 2, 3, 1, 4, 1});
        node_free(nu);
    }
    {
        static const char *ops[] = {"Identity", "Dropout"};
        for (int o = 0; o < 2; o++) {
            Node nd = node_new(ops[o], o ? 2 : 1);
            PsimTensor *in[1] = {x}, *out[2];
            GError *err = NULL;
            g_assert_true(run_n(nd, in, 1, out, &err));
            g_assert_true(out[0]->data == x->data);
            if (o) {
                g_assert_cmpint(out[1]->dtype, ==, PSIM_DTYPE_BOOL);
                for (int64_t i = 0; i < out[1]->n_elems; i++)
                    g_assert_cmpint(((uint8_t *)out[1]->data)[i], ==, 1);
                psim_tensor_unref(out[1]);
            }
            psim_tensor_unref(out[0]);
            node_free(nd);
        }
    }
}

static void test_transpose_slice_pad(void)
{
    int64_t dx[4] = {2, 3, 4, 5};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    const float *xd = x->data;
    double want[1000];
    int64_t idx[4], src[4];
    {
        Node nd = node_new("Transpose", 1);
        int64_t perm[4] = {0, 2, 3, 1};
        psim_graph_node_attr_set_ints(nd.g, nd.n, "perm", 4, perm);
        PsimTensor *in[1] = {x};
        g_autoptr(PsimTensor) y = run1(nd, in, 1);
        assert_shape(y, 4, (int64_t[]){2, 4, 5, 3});
        for (int64_t i = 0; i < 120; i++) {
            unravel(i, 4, y->dims, idx);
            for (int d = 0; d < 4; d++)
                src[perm[d]] = idx[d];
            want[i] = xd[((src[0] * 3 + src[1]) * 4 + src[2]) * 5 + src[3]];
        }
        assert_close(y, want, 0, 0);
        node_free(nd);
    }
    /* Every permutation of a shape with dims past one 32 x 32 tile (the batched 2-D transposes,
     * NCHW <-> NHWC among them, take tiles; the rest the index maps), against the index rule. */
    {
        int64_t db[4] = {2, 3, 37, 35};
        g_autoptr(PsimTensor) xb = rand_f32(4, db, -1, 1);
        double *wb = g_new(double, xb->n_elems);
        for (int code = 0; code < 256; code++) {
            int64_t perm[4] = {code & 3, (code >> 2) & 3, (code >> 4) & 3, (code >> 6) & 3};
            if ((1 << perm[0] | 1 << perm[1] | 1 << perm[2] | 1 << perm[3]) != 15)
                continue;
            Node nd = node_new("Transpose", 1);
            psim_graph_node_attr_set_ints(nd.g, nd.n, "perm", 4, perm);
            PsimTensor *in[1] = {xb};
            g_autoptr(PsimTensor) y = run1(nd, in, 1);
            for (int64_t i = 0; i < y->n_elems; i++) {
                unravel(i, 4, y->dims, idx);
                for (int d = 0; d < 4; d++)
                    src[perm[d]] = idx[d];
                wb[i] = ((const float *)xb->data)[((src[0] * db[1] + src[1]) * db[2] + src[2]) * db[3] + src[3]];
            }
            assert_close(y, wb, 0, 0);
            node_free(nd);
        }
        g_free(wb);
    }
    {
        /* axes 1 and 3: [3:0:-2] and [-4:100:2] */
        Node nd = node_new("Slice", 1);
        g_autoptr(PsimTensor) st = ints(2, (int64_t[]){3, -4});
        g_autoptr(PsimTensor) en = ints(2, (int64_t[]){0, 100});
        g_autoptr(PsimTensor) ax = ints(2, (int64_t[]){1, -1});
        g_autoptr(PsimTensor) sp = ints(2, (int64_t[]){-2, 2});
        PsimTensor *in[5] = {x, st, en, ax, sp};
        g_autoptr(PsimTensor) y = run1(nd, in, 5);
        assert_shape(y, 4, (int64_t[]){2, 1, 4, 2});
        for (int64_t i = 0; i < y->n_elems; i++) {
            unravel(i, 4, y->dims, idx);
            want[i] = xd[((idx[0] * 3 + (2 - 2 * idx[1])) * 4 + idx[2]) * 5 + 1 + 2 * idx[3]];
        }
        assert_close(y, want, 0, 0);
        node_free(nd);
    }
    static const char *modes[] = {"constant", "reflect", "edge"};
    for (int m = 0; m < 3; m++) {
        Node nd = node_new("Pad", 1);
        psim_graph_node_attr_set_string(nd.g, nd.n, "mode", modes[m]);
        g_autoptr(PsimTensor) pads = ints(8, (int64_t[]){0, 1, 2, 0, 0, 2, 1, 3});
        g_autoptr(PsimTensor) cv = scalar_f32(7.5f);
        PsimTensor *in[3] = {x, pads, cv};
        g_autoptr(PsimTensor) y = run1(nd, in, 3);
        assert_shape(y, 4, (int64_t[]){2, 6, 7, 8});
        int64_t p0[4] = {0, 1, 2, 0};
        for (int64_t i = 0; i < y->n_elems; i++) {
            unravel(i, 4, y->dims, idx);
            gboolean out = FALSE;
            for (int d = 0; d < 4; d++) {
                int64_t j = idx[d] - p0[d], n = dx[d];
                if (j < 0 || j >= n) {
                    out = TRUE;
                    if (m == 1) /* reflect */
                        j = j < 0 ? -j : 2 * (n - 1) - j;
                    else
                        j = j < 0 ? 0 : n - 1;
                }
                src[d] = j;
            }
            want[i] = (out && m == 0) ? 7.5
                                      : xd[((src[0] * 3 + src[1]) * 4 + src[2]) * 5 + src[3]];
        }
        assert_close(y, want, 0, 0);
        node_free(nd);
    }
}

static void test_concat_split_gather(void)
{
    int64_t da[3] = {2, 3, 4}, db[3] = {2, 1, 4};
    g_autoptr(PsimTensor) a = rand_f32(3, da, -1, 1);
    g_autoptr(PsimTensor) b = rand_f32(3, db, -1, 1);
    double want[64];
    Node nc = node_new("Concat", 1);
    psim_graph_node_attr_set_int(nc.g, nc.n, "axis", -2);
    PsimTensor *in[3] = {a, b, a};
    g_autoptr(PsimTensor) y = run1(nc, in, 3);
    assert_shape(y, 3, (int64_t[]){2, 7, 4});
    for (int64_t i = 0; i < 56; i++) {
        int64_t n = i / 28, r = (i / 4) % 7, c = i % 4;
        want[i] = r < 3 ? ((float *)a->data)[(n * 3 + r) * 4 + c]
                  : r < 4 ? ((float *)b->data)[n * 4 + c]
                          : ((float *)a->data)[(n * 3 + r - 4) * 4 + c];
    }
    assert_close(y, want, 0, 0);
    node_free(nc);

    Node ns = node_new("Split", 3);
    psim_graph_node_attr_set_int(ns.g, ns.n, "axis", 1);
    g_autoptr(PsimTensor) sp = ints(3, (int64_t[]){3, 1, 3});
    PsimTensor *sin[2] = {y, sp}, *out[3];
    GError *err = NULL;
    g_assert_true(run_n(ns, sin, 2, out, &err));
    assert_shape(out[1], 3, db);
    assert_close(out[1], (double[]){((float *)b->data)[0], ((float *)b->data)[1],
                                    ((float *)b->data)[2], ((float *)b->data)[3],
                                    ((float *)b->data)[4], ((float *)b->data)[5],
                                    ((float *)b->data)[6], ((float *)b->data)[7]},
                 0, 0);
    for (int64_t i = 0; i < 24; i++) {
        g_assert_cmpfloat(((float *)out[0]->data)[i], ==, ((float *)a->data)[i]);
        g_assert_cmpfloat(((float *)out[2]->data)[i], ==, ((float *)a->data)[i]);
    }
    for (int k = 0; k < 3; k++)
        psim_tensor_unref(out[k]);
    node_free(ns);

    Node ng = node_new("Gather", 1);
    psim_graph_node_attr_set_int(ng.g, ng.n, "axis", 1);
    int64_t di[2] = {2, 2};
    g_autoptr(PsimTensor) ind = psim_tensor_new(PSIM_DTYPE_INT64, 2, di, NULL);
    int64_t iv[4] = {2, -3, 0, 1};
    memcpy(ind->data, iv, sizeof iv);
    PsimTensor *gin[2] = {a, ind};
    g_autoptr(PsimTensor) gy = run1(ng, gin, 2);
    assert_shape(gy, 4, (int64_t[]){2, 2, 2, 4});
    for (int64_t i = 0; i < 32; i++) {
        int64_t n = i / 16, k = (i / 4) % 4, c = i % 4, r = iv[k] < 0 ? iv[k] + 3 : iv[k];
        want[i] = ((float *)a->data)[(n * 3 + r) * 4 + c];
    }
    assert_close(gy, want, 0, 0);
    ((int64_t *)ind->data)[3] = 3; /* out of range */
    g_assert_false(run_n(ng, gin, 2, out, &err));
    g_assert_nonnull(strstr(err->message, "out of range"));
    g_clear_error(&err);
    node_free(ng);
}

static void test_shape_ops(void)
{
    int64_t dx[3] = {2, 3, 4};
    g_autoptr(PsimTensor) x = rand_f32(3, dx, -1, 1);
    Node ns = node_new("Shape", 1);
    PsimTensor *in[1] = {x};
    g_autoptr(PsimTensor) s = run1(ns, in, 1);
    g_assert_cmpint(s->dtype, ==, PSIM_DTYPE_INT64);
    assert_shape(s, 1, (int64_t[]){3});
    for (int i = 0; i < 3; i++)
        g_assert_cmpint(((int64_t *)s->data)[i], ==, dx[i]);
    psim_graph_node_attr_set_int(ns.g, ns.n, "start", -2);
    g_autoptr(PsimTensor) s2 = run1(ns, in, 1);
    assert_shape(s2, 1, (int64_t[]){2});
    g_assert_cmpint(((int64_t *)s2->data)[0], ==, 3);
    node_free(ns);

    Node nc = node_new("ConstantOfShape", 1);
    g_autoptr(PsimTensor) v = psim_tensor_new(PSIM_DTYPE_INT64, 1, (int64_t[]){1}, NULL);
    *(int64_t *)v->data = 42;
    psim_graph_node_attr_set_tensor(nc.g, nc.n, "value", v);
    PsimTensor *cin[1] = {s};
    g_autoptr(PsimTensor) c = run1(nc, cin, 1);
    assert_shape(c, 3, dx);
    g_assert_cmpint(c->dtype, ==, PSIM_DTYPE_INT64);
    for (int64_t i = 0; i < c->n_elems; i++)
        g_assert_cmpint(((int64_t *)c->data)[i], ==, 42);
    node_free(nc);
    Node nz = node_new("ConstantOfShape", 1);
    g_autoptr(PsimTensor) z = run1(nz, cin, 1);
    g_assert_cmpint(z->dtype, ==, PSIM_DTYPE_FLOAT32);
    for (int64_t i = 0; i < z->n_elems; i++)
        g_assert_cmpfloat(((float *)z->data)[i], ==, 0.0f);
    g_autoptr(PsimTensor) neg = ints(2, (int64_t[]){3, -2});
    PsimTensor *bin[1] = {neg}, *out[1];
    GError *err = NULL;
    g_assert_false(run_n(nz, bin, 1, out, &err));
    g_clear_error(&err);
    node_free(nz);

    Node ne = node_new("Expand", 1);
    int64_t d1[2] = {3, 1};
    g_autoptr(PsimTensor) e = rand_f32(2, d1, -1, 1);
    g_autoptr(PsimTensor) shp = ints(3, (int64_t[]){2, 1, 5});
    PsimTensor *ein[2] = {e, shp};
    g_autoptr(PsimTensor) ey = run1(ne, ein, 2);
    assert_shape(ey, 3, (int64_t[]){2, 3, 5});
    for (int64_t i = 0; i < 30; i++)
        g_assert_cmpfloat(((float *)ey->data)[i], ==, ((float *)e->data)[(i / 5) % 3]);
    node_free(ne);

    /* Const from fill and shape. */
    Node nf = node_new("Const", 1);
    psim_graph_node_attr_set_float(nf.g, nf.n, "fill", 0.25);
    psim_graph_output_set(nf.g, nf.n, 0, PSIM_DTYPE_FLOAT32, 2, (int64_t[]){4, 3});
    g_autoptr(PsimTensor) f = run1(nf, NULL, 0);
    assert_shape(f, 2, (int64_t[]){4, 3});
    for (int64_t i = 0; i < 12; i++)
        g_assert_cmpfloat(((float *)f->data)[i], ==, 0.25f);
    node_free(nf);
    Node nv = node_new("Constant", 1);
    psim_graph_node_attr_set_tensor(nv.g, nv.n, "value", x);
    g_autoptr(PsimTensor) cv = run1(nv, NULL, 0);
    g_assert_true(cv->data == x->data);
    node_free(nv);
}

/* TF ops (kernels/cpu/tf.c) against values worked out by hand. */
/* TF's NHWC convolution and pooling against naive double references. */
typedef struct {
    int64_t N, H, W, C, kh, kw, M; /* M: Conv2D output channels, depthwise multiplier */
    int64_t sh, sw, dh, dw;
    const char *padding;          /* SAME, VALID or EXPLICIT */
    int64_t pads[4];              /* EXPLICIT: top, bottom, left, right */
} TfWinCase;

/* Output size and begin pad of one axis, TF's rules. */
static void tf_axis_ref(const char *pad, int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                        int64_t *out, int64_t *b)
{
    int64_t span = (k - 1) * d + 1;
    if (!strcmp(pad, "SAME")) {
        *out = (in + s - 1) / s;
        *b = MAX((*out - 1) * s + span - in, 0) / 2;
    } else {
        *b = !strcmp(pad, "EXPLICIT") ? p0 : 0;
        int64_t t = in + (!strcmp(pad, "EXPLICIT") ? p0 + p1 : 0);
        *out = t >= span ? (t - span) / s + 1 : 0;
    }
}

static void check_tf_window(const char *op, const TfWinCase *tc)
{
    gboolean conv = !strcmp(op, "Conv2D"), dw = !strcmp(op, "DepthwiseConv2dNative");
    int64_t dx[4] = {tc->N, tc->H, tc->W, tc->C}, df[4] = {tc->kh, tc->kw, tc->C, tc->M};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    g_autoptr(PsimTensor) f = conv || dw ? rand_f32(4, df, -1, 1) : NULL;
    Node nd = node_new(op, 1);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 4, (int64_t[]){1, tc->sh, tc->sw, 1});
    if (conv || dw)
        psim_graph_node_attr_set_ints(nd.g, nd.n, "dilations", 4, (int64_t[]){1, tc->dh, tc->dw, 1});
    else
        psim_graph_node_attr_set_ints(nd.g, nd.n, "ksize", 4, (int64_t[]){1, tc->kh, tc->kw, 1});
    psim_graph_node_attr_set_string(nd.g, nd.n, "padding", tc->padding);
    if (!strcmp(tc->padding, "EXPLICIT"))
        psim_graph_node_attr_set_ints(nd.g, nd.n, "explicit_paddings", 8,
                                      (int64_t[]){0, 0, tc->pads[0], tc->pads[1], tc->pads[2], tc->pads[3], 0, 0});
    PsimTensor *in[2] = {x, f};
    g_autoptr(PsimTensor) y = run1(nd, in, conv || dw ? 2 : 1);
    int64_t dh = conv || dw ? tc->dh : 1, dwl = conv || dw ? tc->dw : 1, Ho, Wo, pt, pl;
    tf_axis_ref(tc->padding, tc->H, tc->kh, tc->sh, dh, tc->pads[0], tc->pads[1], &Ho, &pt);
    tf_axis_ref(tc->padding, tc->W, tc->kw, tc->sw, dwl, tc->pads[2], tc->pads[3], &Wo, &pl);
    int64_t Co = conv ? tc->M : dw ? tc->C * tc->M : tc->C;
    assert_shape(y, 4, (int64_t[]){tc->N, Ho, Wo, Co});
    g_autofree double *want = g_new(double, y->n_elems + 1);
    const float *xd = x->data, *fd = f ? f->data : NULL;
    for (int64_t n = 0; n < tc->N; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t co = 0; co < Co; co++) {
                    double acc = !conv && !dw && !strcmp(op, "TfMaxPool") ? -INFINITY : 0;
                    int64_t cnt = 0;
                    for (int64_t ki = 0; ki < tc->kh; ki++)
                        for (int64_t kj = 0; kj < tc->kw; kj++) {
                            int64_t ih = oh * tc->sh - pt + ki * dh, iw = ow * tc->sw - pl + kj * dwl;
                            if (ih < 0 || ih >= tc->H || iw < 0 || iw >= tc->W)
                                continue;
                            const float *px = xd + ((n * tc->H + ih) * tc->W + iw) * tc->C;
                            if (conv)
                                for (int64_t c = 0; c < tc->C; c++)
                                    acc += (double)px[c] * fd[((ki * tc->kw + kj) * tc->C + c) * tc->M + co];
                            else if (dw)
                                acc += (double)px[co / tc->M] * fd[(ki * tc->kw + kj) * tc->C * tc->M + co];
                            else if (!strcmp(op, "TfMaxPool"))
                                acc = MAX(acc, px[co]);
                            else
                                acc += px[co];
                            cnt++;
                        }
                    if (!strcmp(op, "AvgPool"))
                        acc = cnt ? acc / (double)cnt : 0;
                    want[((n * Ho + oh) * Wo + ow) * Co + co] = acc;
                }
    assert_close(y, want, 1e-4, 1e-5 * sqrt((double)(tc->kh * tc->kw * tc->C)));
    node_free(nd);
}

static void test_tf_nhwc(void)
{
    static const TfWinCase cases[] = {
        {1, 9, 11, 5, 3, 3, 7, 1, 1, 1, 1, "SAME", {0}},    /* 3x3 SAME */
        {2, 12, 9, 4, 3, 2, 6, 2, 2, 1, 1, "SAME", {0}},    /* stride 2, odd sizes, asymmetric pad */
        {1, 10, 10, 3, 3, 3, 4, 1, 2, 2, 1, "VALID", {0}},  /* dilation, stride across only */
        {1, 8, 7, 6, 1, 1, 5, 1, 1, 1, 1, "VALID", {0}},    /* 1x1: the image is the patch matrix */
        {1, 8, 7, 6, 1, 1, 5, 2, 2, 1, 1, "VALID", {0}},    /* 1x1 strided */
        {1, 7, 8, 4, 3, 3, 2, 1, 1, 1, 1, "EXPLICIT", {2, 0, 1, 3}},
    };
    static const char *ops[] = {"Conv2D", "DepthwiseConv2dNative", "TfMaxPool", "AvgPool"};
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++)
        for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
            TfWinCase tc = cases[c];
            if (!strcmp(ops[o], "DepthwiseConv2dNative"))
                tc.M = 1 + (int64_t)(c % 2); /* multipliers 1 and 2 */
            if (!strcmp(ops[o], "TfMaxPool") || !strcmp(ops[o], "AvgPool")) {
                if (!strcmp(tc.padding, "EXPLICIT"))
                    continue; /* TF pools take SAME or VALID */
                tc.dh = tc.dw = 1;
            }
            check_tf_window(ops[o], &tc);
        }
    /* Pad and PadV2: paddings [rank, 2]; PadV2's value fills. */
    g_autoptr(PsimTensor) x = rand_f32(3, (int64_t[]){2, 3, 4}, -1, 1);
    g_autoptr(PsimTensor) p = psim_tensor_new(PSIM_DTYPE_INT64, 2, (int64_t[]){3, 2}, NULL);
    memcpy(p->data, (int64_t[]){1, 0, 0, 2, 3, 1}, sizeof(int64_t) * 6);
    g_autoptr(PsimTensor) cv = scalar_f32(-5.0f);
    for (int v2 = 0; v2 < 2; v2++) {
        Node nd = node_new(v2 ? "PadV2" : "TfPad", 1);
        PsimTensor *in[3] = {x, p, cv};
        g_autoptr(PsimTensor) y = run1(nd, in, v2 ? 3 : 2);
        assert_shape(y, 3, (int64_t[]){3, 5, 8});
        for (int64_t i = 0; i < y->n_elems; i++) {
            int64_t a = i / 40, b = i / 8 % 5, c = i % 8;
            gboolean inside = a >= 1 && b < 3 && c >= 3 && c < 7;
            float want = inside ? ((float *)x->data)[((a - 1) * 3 + b) * 4 + (c - 3)] : v2 ? -5.0f : 0.0f;
            g_assert_cmpfloat(((float *)y->data)[i], ==, want);
        }
        node_free(nd);
    }
    /* Paddings past any tensor size are an error, not a wrapped size. */
    {
        g_autoptr(PsimTensor) x4 = rand_f32(1, (int64_t[]){4}, -1, 1);
        g_autoptr(PsimTensor) big = psim_tensor_new(PSIM_DTYPE_INT64, 2, (int64_t[]){1, 2}, NULL);
        ((int64_t *)big->data)[0] = ((int64_t *)big->data)[1] = INT64_MAX;
        Node np = node_new("TfPad", 1);
        PsimTensor *pin[2] = {x4, big};
        assert_run_fails(np, pin, 2, "paddings");
        node_free(np);
    }
    /* A NCHW TF convolution is refused with the reason. */
    Node nd = node_new("Conv2D", 1);
    psim_graph_node_attr_set_ints(nd.g, nd.n, "strides", 4, (int64_t[]){1, 1, 1, 1});
    psim_graph_node_attr_set_string(nd.g, nd.n, "padding", "SAME");
    psim_graph_node_attr_set_string(nd.g, nd.n, "data_format", "NCHW");
    g_autoptr(PsimTensor) xi = rand_f32(4, (int64_t[]){1, 3, 4, 4}, -1, 1);
    g_autoptr(PsimTensor) fi = rand_f32(4, (int64_t[]){1, 1, 4, 2}, -1, 1);
    PsimTensor *in[2] = {xi, fi};
    assert_run_fails(nd, in, 2, "NHWC");
    node_free(nd);
}

static void test_tf_ops(void)
{
    int64_t d3[3] = {2, 3, 4};
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 3, d3, NULL);
    for (int64_t i = 0; i < 24; i++)
        ((float *)x->data)[i] = (float)i;
    double want[64];

    /* x[1, ::-2, 1:] with shrink on axis 0: [[9,10,11],[1..]]: rows 2 and 0 of batch 1. */
    Node ss = node_new("StridedSlice", 1);
    psim_graph_node_attr_set_int(ss.g, ss.n, "shrink_axis_mask", 1);
    psim_graph_node_attr_set_int(ss.g, ss.n, "end_mask", 2 | 4);
    psim_graph_node_attr_set_int(ss.g, ss.n, "begin_mask", 2);
    g_autoptr(PsimTensor) b = ints(3, (int64_t[]){1, 0, 1});
    g_autoptr(PsimTensor) e = ints(3, (int64_t[]){2, 0, 0});
    g_autoptr(PsimTensor) st = ints(3, (int64_t[]){1, -2, 1});
    PsimTensor *sin[4] = {x, b, e, st};
    g_autoptr(PsimTensor) sy = run1(ss, sin, 4);
    assert_shape(sy, 2, (int64_t[]){2, 3});
    const double sw[6] = {21, 22, 23, 13, 14, 15};
    assert_close(sy, sw, 0, 0);
    /* new_axis (bit 0) and an ellipsis (bit 1): x[None, ..., 2] has shape [1, 2, 3]. */
    psim_graph_node_attr_set_int(ss.g, ss.n, "shrink_axis_mask", 4);
    psim_graph_node_attr_set_int(ss.g, ss.n, "new_axis_mask", 1);
    psim_graph_node_attr_set_int(ss.g, ss.n, "ellipsis_mask", 2);
    psim_graph_node_attr_set_int(ss.g, ss.n, "begin_mask", 0);
    psim_graph_node_attr_set_int(ss.g, ss.n, "end_mask", 0);
    g_autoptr(PsimTensor) b2 = ints(3, (int64_t[]){0, 0, 2});
    g_autoptr(PsimTensor) e2 = ints(3, (int64_t[]){1, 0, 3});
    g_autoptr(PsimTensor) s2 = ints(3, (int64_t[]){1, 1, 1});
    PsimTensor *sin2[4] = {x, b2, e2, s2};
    g_autoptr(PsimTensor) sy2 = run1(ss, sin2, 4);
    assert_shape(sy2, 3, (int64_t[]){1, 2, 3});
    for (int i = 0; i < 6; i++)
        want[i] = 4 * i + 2;
    assert_close(sy2, want, 0, 0);
    /* A zero stride is one error line naming the node. */
    g_autoptr(PsimTensor) s0 = ints(3, (int64_t[]){1, 1, 0});
    PsimTensor *sin3[4] = {x, b2, e2, s0}, *o1[1];
    GError *err = NULL;
    g_assert_false(run_n(ss, sin3, 4, o1, &err));
    g_assert_nonnull(strstr(err->message, "stride 2 is zero"));
    g_clear_error(&err);
    node_free(ss);

    /* Unpack along axis 1 into 3, Pack them back along axis -2: x again. */
    Node up = node_new("Unpack", 3);
    psim_graph_node_attr_set_int(up.g, up.n, "axis", 1);
    PsimTensor *uin[1] = {x}, *parts[3];
    g_assert_true(run_n(up, uin, 1, parts, &err));
    g_assert_no_error(err);
    assert_shape(parts[2], 2, (int64_t[]){2, 4});
    for (int i = 0; i < 8; i++)
        want[i] = (i / 4) * 12 + 8 + i % 4;
    assert_close(parts[2], want, 0, 0);
    Node pk = node_new("Pack", 1);
    psim_graph_node_attr_set_int(pk.g, pk.n, "axis", -2);
    g_autoptr(PsimTensor) packed = run1(pk, parts, 3);
    assert_shape(packed, 3, d3);
    for (int i = 0; i < 24; i++)
        want[i] = i;
    assert_close(packed, want, 0, 0);
    for (int k = 0; k < 3; k++)
        psim_tensor_unref(parts[k]);
    node_free(up);
    node_free(pk);

    /* ExpandDims at -1, Fill [2, 2] with 7. */
    Node ed = node_new("ExpandDims", 1);
    g_autoptr(PsimTensor) dim = ints(1, (int64_t[]){-1});
    PsimTensor *ein[2] = {x, dim};
    g_autoptr(PsimTensor) ey = run1(ed, ein, 2);
    assert_shape(ey, 4, (int64_t[]){2, 3, 4, 1});
    node_free(ed);
    Node fl = node_new("Fill", 1);
    g_autoptr(PsimTensor) fd = ints(2, (int64_t[]){2, 2});
    g_autoptr(PsimTensor) seven = scalar_f32(7);
    PsimTensor *fin[2] = {fd, seven};
    g_autoptr(PsimTensor) fy = run1(fl, fin, 2);
    const double f7[4] = {7, 7, 7, 7};
    assert_shape(fy, 2, (int64_t[]){2, 2});
    assert_close(fy, f7, 0, 0);
    node_free(fl);

    /* RandomUniform: [0, 1), a stream that moves on between runs, the same from a new state. */
    Node ru = node_new("RandomUniform", 1);
    const PsimKernelDef *def = psim_kernel_lookup("RandomUniform", "CPU", PSIM_DTYPE_INT64);
    g_assert_nonnull(def);
    g_autoptr(PsimTensor) shape = ints(1, (int64_t[]){1000});
    float first[2][1000];
    for (int inst = 0; inst < 2; inst++) {
        void *state = NULL;
        g_assert_true(def->prepare(ru.g, ru.n, NULL, &state, &err));
        PsimTensor *rin[1] = {shape}, *rout[1] = {NULL};
        double sum = 0;
        for (int step = 0; step < 2; step++) {
            PsimKernelCtx c = {.graph = ru.g, .node = ru.n, .n_inputs = 1, .inputs = rin, .n_outputs = 1,
                               .outputs = rout, .device_type = "CPU", .alloc = host_alloc, .state = state};
            g_assert_true(def->run(&c, &err));
            const float *v = rout[0]->data;
            for (int i = 0; i < 1000; i++) {
                g_assert_true(v[i] >= 0 && v[i] < 1);
                sum += v[i];
            }
            if (step == 0)
                memcpy(first[inst], v, sizeof first[inst]);
            else
                g_assert_true(memcmp(first[inst], v, sizeof first[inst]) != 0);
            g_clear_pointer(&rout[0], psim_tensor_unref);
        }
        g_assert_cmpfloat(fabs(sum / 2000 - 0.5), <, 0.03);
        def->release(state);
    }
    g_assert_true(memcmp(first[0], first[1], sizeof first[0]) == 0);
    node_free(ru);
}

/* Resize (linear, half_pixel) against a reference written from ONNX's definition: per axis,
 * input coordinate (o + 0.5) / scale - 0.5, the two neighbours clamped to the axis, weights
 * 1 - frac and frac; the output the sum over the 2^rank neighbour combinations. */
static void check_resize(const int64_t *dx, const double *scales)
{
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    g_autoptr(PsimTensor) sc = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, (int64_t[]){4}, NULL);
    int64_t od[4];
    for (int d = 0; d < 4; d++) {
        ((float *)sc->data)[d] = (float)scales[d];
        od[d] = (int64_t)floor((double)dx[d] * (float)scales[d]);
    }
    Node nd = node_new("Resize", 1);
    psim_graph_node_attr_set_string(nd.g, nd.n, "mode", "linear");
    PsimTensor *in[3] = {x, NULL, sc};
    g_autoptr(PsimTensor) y = run1(nd, in, 3);
    assert_shape(y, 4, od);
    g_autofree double *want = g_new(double, y->n_elems);
    for (int64_t o = 0; o < y->n_elems; o++) {
        int64_t idx[4], lo[4], hi[4];
        double fr[4];
        unravel(o, 4, od, idx);
        for (int d = 0; d < 4; d++) {
            double c = ((double)idx[d] + 0.5) / (float)scales[d] - 0.5, f = floor(c);
            fr[d] = c - f;
            lo[d] = CLAMP((int64_t)f, 0, dx[d] - 1);
            hi[d] = CLAMP((int64_t)f + 1, 0, dx[d] - 1);
        }
        double sum = 0;
        for (int m = 0; m < 16; m++) {
            double w = 1;
            int64_t off = 0;
            for (int d = 0; d < 4; d++) {
                int bit = (m >> d) & 1;
                w *= bit ? fr[d] : 1 - fr[d];
                off = off * dx[d] + (bit ? hi[d] : lo[d]);
            }
            sum += w * ((float *)x->data)[off];
        }
        want[o] = sum;
    }
    assert_close(y, want, 1e-5, 1e-6);
    node_free(nd);
}

static void test_resize(void)
{
    /* Images (the last two axes: the plane path), up and down; then a leading axis resized too
     * (the general path over every axis). */
    check_resize((int64_t[]){2, 3, 5, 7}, (double[]){1, 1, 2, 1.5});
    check_resize((int64_t[]){1, 2, 9, 8}, (double[]){1, 1, 0.5, 0.75});
    check_resize((int64_t[]){3, 2, 4, 5}, (double[]){2, 1, 1.5, 1});
    check_resize((int64_t[]){2, 4, 3, 3}, (double[]){1, 0.5, 1, 2});
    /* An empty image resized to an empty one (its taps point nowhere): nothing to write. */
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 4, (int64_t[]){0, 1, 0, 4}, NULL);
    g_autoptr(PsimTensor) sz = ints(4, (int64_t[]){0, 1, 3, 8});
    Node nd = node_new("Resize", 1);
    psim_graph_node_attr_set_string(nd.g, nd.n, "mode", "linear");
    PsimTensor *in[4] = {x, NULL, NULL, sz};
    g_autoptr(PsimTensor) y = run1(nd, in, 4);
    assert_shape(y, 4, (int64_t[]){0, 1, 3, 8});
    node_free(nd);
}

static void test_reduce(void)
{
    int64_t dx[4] = {2, 3, 4, 5};
    g_autoptr(PsimTensor) x = rand_f32(4, dx, -1, 1);
    const float *xd = x->data;
    static const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax"};
    int64_t axsets[][2] = {{1, 3}, {0, -1}, {2, 2}};
    for (int o = 0; o < 3; o++)
        for (int a = 0; a < 3; a++)
            for (int keep = 0; keep < 2; keep++) {
                Node nd = node_new(ops[o], 1);
                psim_graph_node_attr_set_int(nd.g, nd.n, "keepdims", keep);
                int32_t nax = a == 2 ? 1 : 2;
                g_autoptr(PsimTensor) axes = ints(nax, axsets[a]);
                gboolean red[4] = {FALSE};
                for (int i = 0; i < nax; i++)
                    red[(axsets[a][i] + 4) % 4] = TRUE;
                PsimTensor *in[2] = {x, axes};
                g_autoptr(PsimTensor) y = run1(nd, in, 2);
                int64_t kd[4], od[4], r = 0;
                for (int d = 0; d < 4; d++) {
                    kd[d] = red[d] ? 1 : dx[d];
                    if (!red[d] || keep)
                        od[r++] = kd[d];
                }
                assert_shape(y, (int32_t)r, od);
                double want[120];
                int64_t cnt = 120 / y->n_elems;
                for (int64_t i = 0; i < y->n_elems; i++)
                    want[i] = o == 2 ? -INFINITY : 0;
                for (int64_t i = 0; i < 120; i++) {
                    int64_t idx[4];
                    unravel(i, 4, dx, idx);
                    int64_t oi = 0;
                    for (int d = 0; d < 4; d++)
                        oi = oi * kd[d] + (red[d] ? 0 : idx[d]);
                    want[oi] = o == 2 ? MAX(want[oi], xd[i]) : want[oi] + xd[i];
                }
                if (o == 1)
                    for (int64_t i = 0; i < y->n_elems; i++)
                        want[i] /= cnt;
                assert_close(y, want, 1e-5, 1e-6);
                node_free(nd);
            }
    /* No axes: all. */
    Node nd = node_new("ReduceMean", 1);
    PsimTensor *in[1] = {x};
    g_autoptr(PsimTensor) y = run1(nd, in, 1);
    g_assert_cmpint(y->n_elems, ==, 1);
    double s = 0;
    for (int i = 0; i < 120; i++)
        s += xd[i];
    assert_close(y, (double[]){s / 120}, 1e-5, 1e-6);
    node_free(nd);
}

/* ---------------------------------------------------------------------------------------- */
/* Plug-in: tests/plugin-example.c, built as a module next to this binary. */

static void test_plugin(void)
{
    const char *build = g_getenv("PSIM_BUILD");
    if (!build) {
        g_test_skip("PSIM_BUILD is not set");
        return;
    }
    g_autofree char *path = g_build_filename(build, "plugin-example.so", NULL);
    GError *err = NULL;
    g_assert_null(psim_op_lookup("SquarePlusOne"));
    g_assert_true(psim_plugin_load(path, &err));
    g_assert_no_error(err);
    g_assert_nonnull(psim_op_lookup("SquarePlusOne"));
    const PsimKernelDef *def = psim_kernel_lookup("SquarePlusOne", "CPU", PSIM_DTYPE_FLOAT32);
    g_assert_nonnull(def);

    /* A graph using the op: shape inference from the plug-in, then its kernel. */
    const char *json = "{\"format\": \"placesim.graph/1\", \"nodes\": ["
                       "{\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": "
                       "[{\"dtype\": \"float32\", \"shape\": [2, 3]}]},"
                       "{\"name\": \"y\", \"op\": \"SquarePlusOne\", \"inputs\": [\"x:0\"]},"
                       "{\"name\": \"z\", \"op\": \"Relu\", \"inputs\": [\"y:0\"]}]}";
    g_autoptr(PsimGraph) g = psim_graph_load_data("plugin.json", PSIM_FORMAT_JSON,
                                                  (const guint8 *)json, strlen(json), NULL, &err);
    g_assert_no_error(err);
    PsimNode *y = psim_graph_node_find(g, "y"), *z = psim_graph_node_find(g, "z");
    g_assert_cmpint(y->outputs[0].rank, ==, 2);
    g_assert_cmpint(y->outputs[0].dims[1], ==, 3);
    g_assert_cmpint(y->outputs[0].dtype, ==, PSIM_DTYPE_FLOAT32);
    g_assert_true(psim_kernel_supported(g, y, "CPU"));
    g_assert_false(psim_kernel_supported(g, y, "GPU"));
    g_assert_true(psim_kernel_for_node(g, y, "CPU") == def);

    /* Run the graph's two nodes in order through the registry. */
    int64_t d[2] = {2, 3};
    g_autoptr(PsimTensor) x = rand_f32(2, d, -2, 2);
    PsimTensor *yin[1] = {x}, *yout[1] = {NULL}, *zout[1] = {NULL};
    PsimKernelCtx cy = {.graph = g, .node = y, .n_inputs = 1, .inputs = yin, .n_outputs = 1,
                        .outputs = yout, .device_type = "CPU", .alloc = host_alloc};
    g_assert_true(def->run(&cy, &err));
    PsimKernelCtx cz = {.graph = g, .node = z, .n_inputs = 1, .inputs = yout, .n_outputs = 1,
                        .outputs = zout, .device_type = "CPU", .alloc = host_alloc};
    g_assert_true(psim_kernel_for_node(g, z, "CPU")->run(&cz, &err));
    double want[6];
    for (int i = 0; i < 6; i++) {
        double v = ((float *)x->data)[i];
        want[i] = v * v + 1;
    }
    assert_close(zout[0], want, 1e-6, 0);
    psim_tensor_unref(yout[0]);
    psim_tensor_unref(zout[0]);

    /* Bad plug-ins are errors naming the file. */
    g_assert_false(psim_plugin_load("/nonexistent/plugin.so", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "/nonexistent/plugin.so"));
    g_clear_error(&err);
    /* A shared library without psim_plugin_init (not libplacesim.so itself: loading a second
     * copy of the library would duplicate its globals). */
    g_autofree char *noinit = g_build_filename(build, "plugin-noinit.so", NULL);
    g_assert_true(g_file_test(noinit, G_FILE_TEST_EXISTS));
    g_assert_false(psim_plugin_load(noinit, &err));
    g_assert_nonnull(strstr(err->message, "psim_plugin_init"));
    g_clear_error(&err);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    rng = g_rand_new_with_seed(12345);
    g_test_add_func("/kernels/registry", test_registry);
#ifdef PSIM_HAVE_CUDA
    g_test_add_func("/kernels/cuda/cublas-on-demand", test_cublas_on_demand);
#endif
    g_test_add_func("/kernels/cpu/binary", test_binary);
    g_test_add_func("/kernels/cpu/variadic", test_variadic);
    g_test_add_func("/kernels/cpu/unary", test_unary);
    g_test_add_func("/kernels/cpu/vmath", test_vmath);
    g_test_add_func("/kernels/cpu/activations", test_activations);
    g_test_add_func("/kernels/cpu/where-cast", test_where_cast);
    g_test_add_func("/kernels/cpu/matmul", test_matmul);
    g_test_add_func("/kernels/cpu/gemm", test_gemm);
    g_test_add_func("/kernels/cpu/einsum", test_einsum);
    g_test_add_func("/kernels/cpu/resize", test_resize);
    g_test_add_func("/kernels/cpu/conv", test_conv);
    g_test_add_func("/kernels/cpu/tf-ops", test_tf_ops);
    g_test_add_func("/kernels/cpu/tf-nhwc", test_tf_nhwc);
    g_test_add_func("/kernels/cpu/pool", test_pool);
    g_test_add_func("/kernels/cpu/norm", test_norm);
    g_test_add_func("/kernels/cpu/views", test_views);
    g_test_add_func("/kernels/cpu/transpose-slice-pad", test_transpose_slice_pad);
    g_test_add_func("/kernels/cpu/concat-split-gather", test_concat_split_gather);
    g_test_add_func("/kernels/cpu/shape-ops", test_shape_ops);
    g_test_add_func("/kernels/cpu/reduce", test_reduce);
    g_test_add_func("/kernels/plugin", test_plugin);
    int rc = g_test_run();
    g_rand_free(rng);
    return rc;
}
