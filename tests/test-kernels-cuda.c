/* Tests of the CUDA kernels (needs a CUDA build and a GPU; exits 77, skipped, otherwise): every
 * registered GPU kernel runs on random inputs and is compared with the CPU kernel of the same op
 * on the same inputs (relative error at most 1e-4 for float32: no TF32 anywhere), every GPU
 * kernel in the registry has at least one case here, and zoo:cnn run on GPU:0 through a session
 * matches its CPU run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#ifndef PSIM_HAVE_CUDA
int main(void)
{
    printf("1..0 # SKIP built without CUDA\n");
    return 77;
}
#else
#include <cuda_runtime.h>

#include "placesim/exec.h"

#define RTOL 1e-4 /* float32, full FP32 math in cuBLAS and cuDNN (no TF32) */

static GRand *rng;
static PsimWorker *gpu;
static PsimCluster *cluster;
static GHashTable *covered; /* op names with a case */

static PsimTensor *host_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                              GError **error)
{
    (void)ctx;
    return psim_tensor_new(dt, r, d, error);
}

static PsimTensor *gpu_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                             GError **error)
{
    return psim_worker_tensor_new(ctx->alloc_user, dt, r, d, error);
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
    g_hash_table_add(covered, g_strdup(op));
    return x;
}

static PsimTensor *rand_f32(int32_t r, const int64_t *d, double lo, double hi)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, r, d, NULL);
    for (int64_t i = 0; i < t->n_elems; i++)
        ((float *)t->data)[i] = (float)g_rand_double_range(rng, lo, hi);
    return t;
}

static PsimTensor *ints(int64_t n, const int64_t *v)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, &n, NULL);
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

/* A device copy of a host tensor (so kernels see device inputs as in a real run). */
static PsimTensor *to_gpu(PsimTensor *t)
{
    GError *err = NULL;
    PsimTensor *d = psim_worker_tensor_new(gpu, t->dtype, t->rank, t->dims, &err);
    g_assert_no_error(err);
    g_assert_cmpint(cudaMemcpy(d->data, t->data, t->nbytes, cudaMemcpyHostToDevice), ==,
                    cudaSuccess);
    return d;
}

/* Ops whose outputs are sums of many products or values. */
static gboolean sums_terms(const char *op)
{
    static const char *const ops[] = {"Conv", "Gemm", "MatMul", "ReduceMean", "ReduceSum",
                                      "AveragePool", "GlobalAveragePool", "LayerNormalization",
                                      "LogSoftmax", "LRN"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++)
        if (!strcmp(op, ops[i]))
            return TRUE;
    return FALSE;
}

/* Runs x on the CPU and on the GPU with the same inputs and compares every output. Integer
 * parameter inputs (index >= first_param) stay on the host for half the runs to exercise both
 * paths. */
static void check(Node x, PsimTensor **in, int32_t n_in, double rtol)
{
    PsimDType dt = PSIM_DTYPE_UNDEFINED;
    for (int32_t k = 0; k < n_in && !dt; k++)
        if (in[k])
            dt = in[k]->dtype;
    const PsimKernelDef *cpu = psim_kernel_lookup(x.n->op, "CPU", dt);
    const PsimKernelDef *gk = psim_kernel_lookup(x.n->op, "GPU", dt);
    g_assert_nonnull(cpu);
    if (!gk)
        g_error("no GPU kernel for %s (%s)", x.n->op, psim_dtype_name(dt));
    int32_t no = x.n->n_outputs;
    PsimTensor *want[8] = {0}, *got[8] = {0};
    GError *err = NULL;
    PsimKernelCtx c = {.graph = x.g, .node = x.n, .n_inputs = n_in, .inputs = in,
                       .n_outputs = no, .outputs = want, .device_type = "CPU",
                       .alloc = host_alloc};
    void *st = NULL;
    if (cpu->prepare)
        g_assert_true(cpu->prepare(x.g, x.n, NULL, &st, &err));
    c.state = st;
    gboolean ok = cpu->run(&c, &err);
    g_assert_no_error(err);
    g_assert_true(ok);
    if (cpu->release)
        cpu->release(st);

    for (int rep = 0; rep < 2; rep++) {
        PsimTensor *din[8] = {0};
        for (int32_t k = 0; k < n_in; k++)
            if (in[k])
                din[k] = rep == 0 && in[k]->dtype == PSIM_DTYPE_INT64 ? psim_tensor_ref(in[k])
                                                                      : to_gpu(in[k]);
        PsimKernelCtx g = {.graph = x.g, .node = x.n, .n_inputs = n_in, .inputs = din,
                           .n_outputs = no, .outputs = got, .device = gpu, .device_type = "GPU",
                           .alloc = gpu_alloc, .alloc_user = gpu};
        st = NULL;
        if (gk->prepare)
            g_assert_true(gk->prepare(x.g, x.n, gpu, &st, &err));
        g.state = st;
        ok = gk->run(&g, &err);
        if (!ok)
            g_error("%s on GPU: %s", x.n->op, err ? err->message : "?");
        g_assert_true(psim_worker_sync(gpu, &err));
        if (gk->release)
            gk->release(st);
        for (int32_t k = 0; k < no; k++) {
            if (!want[k]) {
                g_assert_null(got[k]);
                continue;
            }
            g_assert_nonnull(got[k]);
            g_autoptr(PsimTensor) h = psim_worker_to_host(gpu, got[k], &err);
            g_assert_no_error(err);
            g_assert_cmpint(h->dtype, ==, want[k]->dtype);
            g_assert_cmpint(h->rank, ==, want[k]->rank);
            for (int32_t i = 0; i < h->rank; i++)
                g_assert_cmpint(h->dims[i], ==, want[k]->dims[i]);
            /* An op that sums many terms (a dot product, a mean) has an FP32 rounding error
             * bounded by the size of its terms, not of its result: an output near zero from
             * cancelling O(1) terms differs by ~1e-7 whatever the summation order. Its error
             * is taken relative to the output's scale (max |want|) below that scale, and
             * elementwise ops' relative to each element (at least 1e-3). */
            double floor = 1e-3;
            if (sums_terms(x.n->op))
                for (int64_t i = 0; i < want[k]->n_elems; i++)
                    floor = fmax(floor, fabs(psim_tensor_get_f64(want[k], i)));
            double worst = 0, wa = 0, wb = 0;
            for (int64_t i = 0; i < h->n_elems; i++) {
                double a = psim_tensor_get_f64(h, i), b = psim_tensor_get_f64(want[k], i);
                if (isnan(b)) {
                    g_assert_true(isnan(a));
                    continue;
                }
                double e = fabs(a - b) / fmax(fabs(b), floor);
                if (e > worst)
                    worst = e, wa = a, wb = b;
            }
            if (worst > rtol)
                g_error("%s output %d: relative error %g > %g (GPU %.9g, CPU %.9g, floor %g)",
                        x.n->op, k, worst, rtol, wa, wb, floor);
            psim_tensor_unref(got[k]);
            got[k] = NULL;
        }
        for (int32_t k = 0; k < n_in; k++)
            if (din[k])
                psim_tensor_unref(din[k]);
    }
    for (int32_t k = 0; k < no; k++)
        if (want[k])
            psim_tensor_unref(want[k]);
    for (int32_t k = 0; k < n_in; k++)
        if (in[k])
            psim_tensor_unref(in[k]);
    psim_graph_free(x.g);
}

static void test_elementwise(void)
{
    const char *bin[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum"};
    int64_t da[4] = {2, 3, 4, 5}, db[2] = {4, 1};
    for (size_t i = 0; i < G_N_ELEMENTS(bin); i++) {
        gboolean pos = !strcmp(bin[i], "Pow") || !strcmp(bin[i], "Div");
        PsimTensor *in[2] = {rand_f32(4, da, pos ? 0.5 : -2, 2), rand_f32(2, db, pos ? 0.5 : -2, 2)};
        check(node_new(bin[i], 1), in, 2, RTOL);
    }
    /* variadic with three inputs */
    PsimTensor *v3[3] = {rand_f32(4, da, -1, 1), rand_f32(2, db, -1, 1), rand_f32(1, da + 3, -1, 1)};
    check(node_new("Sum", 1), v3, 3, RTOL);
    /* integer arithmetic (shape math) */
    int64_t iv[3] = {4, -6, 8}, jv[3] = {2, 3, -4};
    PsimTensor *ii[2] = {ints(3, iv), ints(3, jv)};
    check(node_new("Mul", 1), ii, 2, 0);
    const char *un[] = {"Sqrt", "Neg", "Exp", "Log", "Relu", "Sigmoid", "Tanh", "Erf", "Abs"};
    for (size_t i = 0; i < G_N_ELEMENTS(un); i++) {
        gboolean pos = !strcmp(un[i], "Sqrt") || !strcmp(un[i], "Log");
        PsimTensor *in[1] = {rand_f32(4, da, pos ? 0.1 : -3, 3)};
        check(node_new(un[i], 1), in, 1, RTOL);
    }
    PsimTensor *ci[3] = {rand_f32(4, da, -3, 3), psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL),
                         psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL)};
    *(float *)ci[1]->data = -0.5f;
    *(float *)ci[2]->data = 1.25f;
    check(node_new("Clip", 1), ci, 3, RTOL);
    /* comparisons, Where, Cast */
    const char *cmp[] = {"Equal", "Less", "Greater"};
    for (size_t i = 0; i < G_N_ELEMENTS(cmp); i++) {
        PsimTensor *a = rand_f32(4, da, -1, 1), *b = rand_f32(2, db, -1, 1);
        ((float *)a->data)[0] = ((float *)b->data)[0];
        PsimTensor *in[2] = {a, b};
        check(node_new(cmp[i], 1), in, 2, 0);
    }
    PsimTensor *cond = psim_tensor_new(PSIM_DTYPE_BOOL, 2, db, NULL);
    ((uint8_t *)cond->data)[1] = 1;
    PsimTensor *wi[3] = {cond, rand_f32(4, da, -1, 1), rand_f32(1, da + 3, -1, 1)};
    check(node_new("Where", 1), wi, 3, 0);
    Node cx = node_new("Cast", 1);
    psim_graph_node_attr_set_int(cx.g, cx.n, "to", PSIM_DTYPE_INT64);
    PsimTensor *cin[1] = {rand_f32(4, da, -100, 100)};
    check(cx, cin, 1, 0);
    Node cy = node_new("Cast", 1);
    psim_graph_node_attr_set_int(cy.g, cy.n, "to", PSIM_DTYPE_FLOAT32);
    PsimTensor *cin2[1] = {ints(3, iv)};
    check(cy, cin2, 1, 0);
}

static void test_blas(void)
{
    int64_t a[3] = {3, 17, 33}, b[2] = {33, 9}, b3[3] = {3, 33, 9}, v[1] = {33};
    PsimTensor *m1[2] = {rand_f32(3, a, -1, 1), rand_f32(2, b, -1, 1)};
    check(node_new("MatMul", 1), m1, 2, RTOL);
    PsimTensor *m2[2] = {rand_f32(3, a, -1, 1), rand_f32(3, b3, -1, 1)};
    check(node_new("MatMul", 1), m2, 2, RTOL);
    PsimTensor *m3[2] = {rand_f32(3, a, -1, 1), rand_f32(1, v, -1, 1)};
    check(node_new("MatMul", 1), m3, 2, RTOL);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            Node x = node_new("Gemm", 1);
            psim_graph_node_attr_set_int(x.g, x.n, "transA", ta);
            psim_graph_node_attr_set_int(x.g, x.n, "transB", tb);
            psim_graph_node_attr_set_float(x.g, x.n, "alpha", 0.75);
            psim_graph_node_attr_set_float(x.g, x.n, "beta", 1.5);
            int64_t da[2] = {ta ? 19 : 7, ta ? 7 : 19}, db[2] = {tb ? 11 : 19, tb ? 19 : 11},
                    dc[1] = {11};
            PsimTensor *in[3] = {rand_f32(2, da, -1, 1), rand_f32(2, db, -1, 1),
                                 rand_f32(1, dc, -1, 1)};
            check(x, in, 3, RTOL);
        }
}

static void test_conv_pool(void)
{
    int64_t xd[4] = {2, 6, 13, 11};
    struct {
        int64_t M, group, k, stride, dil, pad0, pad1;
    } cs[] = {{8, 1, 3, 1, 1, 1, 1}, {6, 3, 3, 2, 1, 0, 1}, {4, 2, 5, 1, 2, 2, 2},
              {12, 6, 1, 1, 1, 0, 0}, {8, 1, 2, 2, 1, 1, 0}};
    for (size_t i = 0; i < G_N_ELEMENTS(cs); i++) {
        Node x = node_new("Conv", 1);
        psim_graph_node_attr_set_int(x.g, x.n, "group", cs[i].group);
        int64_t st[2] = {cs[i].stride, cs[i].stride}, dl[2] = {cs[i].dil, cs[i].dil},
                pads[4] = {cs[i].pad0, cs[i].pad0, cs[i].pad1, cs[i].pad1};
        psim_graph_node_attr_set_ints(x.g, x.n, "strides", 2, st);
        psim_graph_node_attr_set_ints(x.g, x.n, "dilations", 2, dl);
        psim_graph_node_attr_set_ints(x.g, x.n, "pads", 4, pads);
        int64_t wd[4] = {cs[i].M, 6 / cs[i].group, cs[i].k, cs[i].k}, bd[1] = {cs[i].M};
        PsimTensor *in[3] = {rand_f32(4, xd, -1, 1), rand_f32(4, wd, -1, 1), rand_f32(1, bd, -1, 1)};
        check(x, in, 3, RTOL);
    }
    const char *pools[] = {"MaxPool", "AveragePool"};
    for (size_t p = 0; p < 2; p++)
        for (int ceil = 0; ceil < 2; ceil++) {
            Node x = node_new(pools[p], 1);
            int64_t k[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
            psim_graph_node_attr_set_ints(x.g, x.n, "kernel_shape", 2, k);
            psim_graph_node_attr_set_ints(x.g, x.n, "strides", 2, st);
            if (p == 0) {
                psim_graph_node_attr_set_int(x.g, x.n, "ceil_mode", ceil);
                if (ceil)
                    pads[2] = 0; /* asymmetric */
            } else
                psim_graph_node_attr_set_int(x.g, x.n, "count_include_pad", ceil);
            psim_graph_node_attr_set_ints(x.g, x.n, "pads", 4, pads);
            PsimTensor *in[1] = {rand_f32(4, xd, -1, 1)};
            check(x, in, 1, RTOL);
        }
    /* What cuDNN cannot pool (the direct kernel): ceil mode and asymmetric pads for both, with
     * and without count_include_pad, and dilated max pooling (GoogLeNet's and Inception's
     * AveragePool, for one, uses ceil mode). */
    for (size_t p = 0; p < 2; p++)
        for (int v = 0; v < 3; v++) {
            Node x = node_new(pools[p], 1);
            int64_t k[2] = {3, 2}, st[2] = {2, 2}, pads[4] = {1, 0, 0, 1}, dl[2] = {2, 1};
            psim_graph_node_attr_set_ints(x.g, x.n, "kernel_shape", 2, k);
            psim_graph_node_attr_set_ints(x.g, x.n, "strides", 2, st);
            psim_graph_node_attr_set_ints(x.g, x.n, "pads", 4, pads);
            psim_graph_node_attr_set_int(x.g, x.n, "ceil_mode", v != 1);
            if (p == 1)
                psim_graph_node_attr_set_int(x.g, x.n, "count_include_pad", v == 2);
            else if (v == 2)
                psim_graph_node_attr_set_ints(x.g, x.n, "dilations", 2, dl);
            PsimTensor *in[1] = {rand_f32(4, xd, -1, 1)};
            check(x, in, 1, RTOL);
        }
    const char *glob[] = {"GlobalAveragePool", "GlobalMaxPool"};
    for (size_t p = 0; p < 2; p++) {
        PsimTensor *in[1] = {rand_f32(4, xd, -1, 1)};
        check(node_new(glob[p], 1), in, 1, RTOL);
    }
}

static void test_norm(void)
{
    int64_t xd[4] = {2, 5, 7, 3}, cd[1] = {5};
    for (int e = 0; e < 2; e++) {
        Node x = node_new("BatchNormalization", 1);
        psim_graph_node_attr_set_float(x.g, x.n, "epsilon", e ? 1e-6 : 1e-3);
        PsimTensor *in[5] = {rand_f32(4, xd, -2, 2), rand_f32(1, cd, 0.5, 2), rand_f32(1, cd, -1, 1),
                             rand_f32(1, cd, -1, 1), rand_f32(1, cd, 0.5, 2)};
        check(x, in, 5, RTOL);
    }
    Node l = node_new("LRN", 1);
    psim_graph_node_attr_set_int(l.g, l.n, "size", 3);
    psim_graph_node_attr_set_float(l.g, l.n, "alpha", 1e-3);
    psim_graph_node_attr_set_float(l.g, l.n, "beta", 0.75);
    psim_graph_node_attr_set_float(l.g, l.n, "bias", 2.0);
    PsimTensor *li[1] = {rand_f32(4, xd, -2, 2)};
    check(l, li, 1, RTOL);
    for (int op = 0; op < 2; op++)
        for (int axis = 1; axis < 4; axis += 2) {
            Node s = node_new(op ? "LogSoftmax" : "Softmax", 1);
            psim_graph_node_attr_set_int(s.g, s.n, "axis", axis);
            if (axis == 1)
                psim_graph_set_opset(s.g, 11); /* coerced to 2-D */
            PsimTensor *si[1] = {rand_f32(4, xd, -3, 3)};
            check(s, si, 1, RTOL);
        }
    Node ln = node_new("LayerNormalization", 1);
    psim_graph_node_attr_set_int(ln.g, ln.n, "axis", -2);
    int64_t sd[2] = {7, 3};
    PsimTensor *lni[3] = {rand_f32(4, xd, -2, 2), rand_f32(2, sd, 0.5, 2), rand_f32(2, sd, -1, 1)};
    check(ln, lni, 3, RTOL);
    const char *red[] = {"ReduceMean", "ReduceSum"};
    for (int r = 0; r < 2; r++)
        for (int keep = 0; keep < 2; keep++) {
            Node x = node_new(red[r], 1);
            psim_graph_node_attr_set_int(x.g, x.n, "keepdims", keep);
            int64_t axes[2] = {1, -1};
            PsimTensor *in[2] = {rand_f32(4, xd, -1, 1), ints(2, axes)};
            check(x, in, 2, RTOL);
        }
}

static void test_movement(void)
{
    int64_t xd[4] = {2, 3, 4, 5};
    Node t = node_new("Transpose", 1);
    int64_t perm[4] = {2, 0, 3, 1};
    psim_graph_node_attr_set_ints(t.g, t.n, "perm", 4, perm);
    PsimTensor *ti[1] = {rand_f32(4, xd, -1, 1)};
    check(t, ti, 1, 0);
    int64_t starts[2] = {1, -4}, ends[2] = {3, 100}, axes[2] = {1, 3}, steps[2] = {1, 2};
    PsimTensor *si[5] = {rand_f32(4, xd, -1, 1), ints(2, starts), ints(2, ends), ints(2, axes),
                         ints(2, steps)};
    check(node_new("Slice", 1), si, 5, 0);
    for (int mode = 0; mode < 3; mode++) {
        Node p = node_new("Pad", 1);
        const char *modes[] = {"constant", "edge", "reflect"};
        psim_graph_node_attr_set_string(p.g, p.n, "mode", modes[mode]);
        int64_t pads[8] = {0, 1, 2, 1, 0, 0, 1, 2};
        PsimTensor *cv = psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL);
        *(float *)cv->data = 0.5f;
        PsimTensor *pi[3] = {rand_f32(4, xd, -1, 1), ints(8, pads), cv};
        check(p, pi, 3, 0);
    }
    int64_t ed[3] = {1, 4, 1}, shape[4] = {2, 3, 4, 5}, reps[3] = {2, 1, 3};
    PsimTensor *ei[2] = {rand_f32(3, ed, -1, 1), ints(4, shape)};
    check(node_new("Expand", 1), ei, 2, 0);
    PsimTensor *tl[2] = {rand_f32(3, ed, -1, 1), ints(3, reps)};
    check(node_new("Tile", 1), tl, 2, 0);
    Node c = node_new("Concat", 1);
    psim_graph_node_attr_set_int(c.g, c.n, "axis", 1);
    int64_t c2[4] = {2, 7, 4, 5};
    PsimTensor *ci[3] = {rand_f32(4, xd, -1, 1), rand_f32(4, c2, -1, 1), rand_f32(4, xd, -1, 1)};
    check(c, ci, 3, 0);
    Node sp = node_new("Split", 2);
    psim_graph_node_attr_set_int(sp.g, sp.n, "axis", 3);
    int64_t parts[2] = {2, 3};
    PsimTensor *spi[2] = {rand_f32(4, xd, -1, 1), ints(2, parts)};
    check(sp, spi, 2, 0);
    Node gx = node_new("Gather", 1);
    psim_graph_node_attr_set_int(gx.g, gx.n, "axis", 2);
    int64_t idx[5] = {3, 0, -1, 2, 2};
    PsimTensor *gi[2] = {rand_f32(4, xd, -1, 1), ints(5, idx)};
    check(gx, gi, 2, 0);
    /* views and shapes */
    int64_t rs[3] = {6, -1, 5}, ax1[1] = {1}, ax0[1] = {0};
    PsimTensor *ri[2] = {rand_f32(4, xd, -1, 1), ints(3, rs)};
    check(node_new("Reshape", 1), ri, 2, 0);
    PsimTensor *fi[1] = {rand_f32(4, xd, -1, 1)};
    check(node_new("Flatten", 1), fi, 1, 0);
    PsimTensor *ui[2] = {rand_f32(4, xd, -1, 1), ints(1, ax1)};
    check(node_new("Unsqueeze", 1), ui, 2, 0);
    int64_t sq[4] = {1, 3, 1, 5};
    PsimTensor *qi[2] = {rand_f32(4, sq, -1, 1), ints(1, ax0)};
    check(node_new("Squeeze", 1), qi, 2, 0);
    PsimTensor *ii[1] = {rand_f32(4, xd, -1, 1)};
    check(node_new("Identity", 1), ii, 1, 0);
    PsimTensor *di[1] = {rand_f32(4, xd, -1, 1)};
    check(node_new("Dropout", 2), di, 1, 0);
    PsimTensor *shi[1] = {rand_f32(4, xd, -1, 1)};
    check(node_new("Shape", 1), shi, 1, 0);
    PsimTensor *szi[1] = {rand_f32(4, xd, -1, 1)};
    check(node_new("Size", 1), szi, 1, 0);
    Node cos = node_new("ConstantOfShape", 1);
    PsimTensor *val = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, (int64_t[]){1}, NULL);
    *(float *)val->data = 2.5f;
    psim_graph_node_attr_set_tensor(cos.g, cos.n, "value", val);
    psim_tensor_unref(val);
    PsimTensor *coi[1] = {ints(3, rs + 0)};
    ((int64_t *)coi[0]->data)[1] = 2;
    check(cos, coi, 1, 0);
    const char *consts[] = {"Const", "Constant"};
    for (int i = 0; i < 2; i++) {
        Node k = node_new(consts[i], 1);
        PsimTensor *v = rand_f32(4, xd, -1, 1);
        psim_graph_node_attr_set_tensor(k.g, k.n, "value", v);
        psim_tensor_unref(v);
        check(k, NULL, 0, 0);
    }
}

/* Every GPU kernel in the registry has a case above. */
static void test_coverage(void)
{
    int32_t n;
    const PsimKernelDef **all = psim_kernel_list(&n);
    int gpu_kernels = 0;
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(all[i]->device_type, "GPU"))
            continue;
        gpu_kernels++;
        if (!g_hash_table_contains(covered, all[i]->op))
            g_error("GPU kernel %s (%s) has no test case", all[i]->op, all[i]->name);
        g_assert_true(all[i]->async);
    }
    g_free(all);
    g_assert_cmpint(gpu_kernels, >=, 40);
}

/* zoo:cnn on GPU:0 through a session, against the CPU. */
static void test_zoo_cnn(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_zoo_make("cnn", &err);
    g_assert_no_error(err);
    PsimPort out = psim_graph_output(g, 0);
    const PsimNode *in = psim_graph_node(g, psim_graph_input(g, 0));
    g_autoptr(PsimTensor) x = psim_tensor_new(in->outputs[0].dtype, in->outputs[0].rank,
                                              in->outputs[0].dims, &err);
    g_assert_no_error(err);
    for (int64_t i = 0; i < x->n_elems; i++)
        ((float *)x->data)[i] = (float)i / (float)x->n_elems;
    g_autofree char *fetch = psim_port_to_string(g, out);
    const char *feeds[] = {in->name}, *fetches[] = {fetch};
    g_autoptr(PsimSession) sc = psim_session_new(g, cluster, "CPU:0", NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimSession) sg = psim_session_new(g, cluster, "GPU:0", NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) want = NULL;
    g_assert_true(psim_session_run(sc, 1, feeds, &x, 1, fetches, &want, &err));
    g_assert_no_error(err);
    for (int step = 0; step < 3; step++) {
        g_autoptr(PsimTensor) got = NULL;
        if (!psim_session_run(sg, 1, feeds, &x, 1, fetches, &got, &err))
            g_error("zoo:cnn on GPU:0: %s", err->message);
        g_assert_cmpint(got->device, <, 0);
        g_assert_cmpint(got->n_elems, ==, want->n_elems);
        double worst = 0;
        for (int64_t i = 0; i < got->n_elems; i++) {
            double a = ((float *)got->data)[i], b = ((float *)want->data)[i];
            worst = fmax(worst, fabs(a - b) / fmax(fabs(b), 1e-3));
        }
        g_assert_cmpfloat(worst, <=, 1e-3); /* a whole network: accumulated rounding */
    }
}

/* The GPU worker caches freed device blocks: a tensor of the size just freed gets the same
 * block back, zeroed as a fresh one, and the accounting sees it live again. */
typedef struct {
    PsimTensor *t;
    void *ptr;
} AllocJob;

static gboolean alloc_job(PsimWorker *w, void *arg, GError **error)
{
    AllocJob *j = arg;
    int64_t d[1] = {1000};
    j->t = psim_worker_tensor_new(w, PSIM_DTYPE_FLOAT32, 1, d, error);
    j->ptr = j->t ? j->t->data : NULL;
    return j->t != NULL;
}

static void test_allocator(void)
{
    GError *err = NULL;
    AllocJob a = {0}, b = {0};
    g_assert_true(psim_worker_call(gpu, alloc_job, &a, &err));
    g_assert_cmpint(a.t->device, >=, 0);
    g_assert_cmpint(cudaMemset(a.ptr, 0x7f, a.t->nbytes), ==, cudaSuccess);
    uint64_t live = psim_worker_memory(gpu, NULL);
    psim_tensor_unref(a.t);
    g_assert_cmpuint(psim_worker_memory(gpu, NULL), ==, live - 4000);
    g_assert_true(psim_worker_call(gpu, alloc_job, &b, &err));
    g_assert_true(b.ptr == a.ptr);
    g_autoptr(PsimTensor) h = psim_worker_to_host(gpu, b.t, &err);
    g_assert_no_error(err);
    for (int64_t i = 0; i < h->n_elems; i++)
        g_assert_cmpfloat(((float *)h->data)[i], ==, 0.0f);
    g_assert_cmpuint(psim_worker_memory(gpu, NULL), ==, live);
    psim_tensor_unref(b.t);
}

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("1..0 # SKIP no CUDA GPU\n");
        return 77;
    }
    g_test_init(&argc, &argv, NULL);
    rng = g_rand_new_with_seed(1234);
    covered = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GError *err = NULL;
    cluster = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    int32_t gi = psim_cluster_device_find(cluster, "GPU:0");
    if (gi < 0) {
        printf("1..0 # SKIP the local cluster has no GPU:0\n");
        return 77;
    }
    gpu = psim_worker_new(psim_cluster_device(cluster, gi), &err);
    g_assert_no_error(err);
    g_test_add_func("/kernels-cuda/elementwise", test_elementwise);
    g_test_add_func("/kernels-cuda/blas", test_blas);
    g_test_add_func("/kernels-cuda/conv-pool", test_conv_pool);
    g_test_add_func("/kernels-cuda/norm", test_norm);
    g_test_add_func("/kernels-cuda/movement", test_movement);
    g_test_add_func("/kernels-cuda/coverage", test_coverage);
    g_test_add_func("/kernels-cuda/zoo-cnn", test_zoo_cnn);
    g_test_add_func("/kernels-cuda/allocator", test_allocator);
    int rc = g_test_run();
    psim_worker_free(gpu);
    psim_cluster_free(cluster);
    g_hash_table_destroy(covered);
    g_rand_free(rng);
    return rc;
}
#endif
