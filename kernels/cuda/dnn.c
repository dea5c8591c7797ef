/* GPU kernels on cuBLAS and cuDNN: MatMul and Gemm (cublasSgemm, full FP32 math:
 * CUBLAS_DEFAULT_MATH; TF32 tensor-op math is NOT enabled anywhere, so the CPU comparison holds
 * at 1e-4), Conv (cuDNN, CUDNN_FMA_MATH so that cuDNN does not use TF32 either; algorithm chosen
 * once per input shape with cudnnGetConvolutionForwardAlgorithm_v7 and kept in the node's
 * state), MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, BatchNormalization
 * (inference), Softmax, LogSoftmax and LRN. Output shapes follow the CPU kernels' helpers
 * (psim__cpu_bcast_shape, psim__cpu_window). */
#include "cuda-private.h"

#include <math.h>

static PsimTensor *out_like(PsimKernelCtx *ctx, int32_t rank, const int64_t *dims,
                            GError **error)
{
    return psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, rank, dims, error);
}

static gboolean need_f32(PsimKernelCtx *ctx, int32_t n, GError **error)
{
    if (!psim__cpu_need(ctx, n, error))
        return FALSE;
    for (int32_t k = 0; k < n; k++)
        if (ctx->inputs[k]->dtype != PSIM_DTYPE_FLOAT32) {
            KERR(ctx, error, "%s on GPU needs float32 inputs (input %d is %s)", ctx->node->op, k,
                 psim_dtype_name(ctx->inputs[k]->dtype));
            return FALSE;
        }
    return TRUE;
}

/* Row-major C(MxN) = alpha op(A) op(B) + beta C, as column-major C' = op(B)' op(A)'. */
static gboolean sgemm(PsimKernelCtx *ctx, gboolean ta, gboolean tb, int64_t M, int64_t N,
                      int64_t K, float alpha, const float *a, const float *b, float beta, float *c,
                      GError **error)
{
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
        KERR(ctx, error, "matrix dimensions above 2^31 are not supported on GPU");
        return FALSE;
    }
    if (M == 0 || N == 0)
        return TRUE;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    if (K == 0) {
        if (beta == 0.0f)
            PSIM_CUDA_CHECK(ctx, error, cudaMemsetAsync(c, 0, sizeof(float) * (size_t)(M * N), d->stream));
        return TRUE;
    }
    PSIM_CUBLAS_CHECK(ctx, error,
                      psim__cublas()->sgemm(d->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
                                  b, tb ? (int)K : (int)N, a, ta ? (int)M : (int)K, &beta, c,
                                  (int)N));
    return TRUE;
}

static gboolean run_matmul(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 2, error))
        return FALSE;
    PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1];
    if (a->rank < 1 || b->rank < 1) {
        KERR(ctx, error, "MatMul needs two inputs of rank >= 1");
        return FALSE;
    }
    int64_t da[PSIM_CPU_MAX_RANK + 1], db[PSIM_CPU_MAX_RANK + 1];
    int32_t ra = a->rank, rb = b->rank;
    if (ra == 1) {
        da[0] = 1;
        da[1] = a->dims[0];
        ra = 2;
    } else
        memcpy(da, a->dims, sizeof(int64_t) * (size_t)ra);
    if (rb == 1) {
        db[0] = b->dims[0];
        db[1] = 1;
        rb = 2;
    } else
        memcpy(db, b->dims, sizeof(int64_t) * (size_t)rb);
    int64_t M = da[ra - 2], K = da[ra - 1], N = db[rb - 1];
    if (db[rb - 2] != K) {
        KERR(ctx, error, "MatMul inner dimensions differ (%" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
             ")", K, db[rb - 2]);
        return FALSE;
    }
    int32_t rbat;
    int64_t bat[PSIM_CPU_MAX_RANK];
    if (!psim__cpu_bcast_shape(ctx, ra - 2, da, rb - 2, db, &rbat, bat, error))
        return FALSE;
    int64_t odims[PSIM_CPU_MAX_RANK + 2];
    int32_t orank = 0;
    for (int32_t i = 0; i < rbat; i++)
        odims[orank++] = bat[i];
    if (a->rank > 1)
        odims[orank++] = M;
    if (b->rank > 1)
        odims[orank++] = N;
    const float *pa = psim__cuda_in(ctx, 0, error), *pb = pa ? psim__cuda_in(ctx, 1, error) : NULL;
    if (!pb)
        return FALSE;
    PsimTensor *y = out_like(ctx, orank, odims, error);
    if (!y)
        return FALSE;
    int64_t n_bat = psim_shape_elems(rbat, bat);
    int64_t a_bat = psim_shape_elems(ra - 2, da), b_bat = psim_shape_elems(rb - 2, db);
    if (b_bat == 1)
        return sgemm(ctx, FALSE, FALSE, M * a_bat, N, K, 1.0f, pa, pb, 0.0f, y->data, error);
    int32_t offa = rbat - (ra - 2), offb = rbat - (rb - 2);
    for (int64_t i = 0; i < n_bat; i++) {
        int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int32_t dd = rbat - 1; dd >= 0; dd--) {
            int64_t idx = rem % bat[dd];
            rem /= bat[dd];
            int64_t xa = dd - offa >= 0 ? da[dd - offa] : 1, xb = dd - offb >= 0 ? db[dd - offb] : 1;
            if (xa != 1)
                ia += idx * sa;
            if (xb != 1)
                ib += idx * sb;
            sa *= xa;
            sb *= xb;
        }
        if (!sgemm(ctx, FALSE, FALSE, M, N, K, 1.0f, pa + ia * M * K, pb + ib * K * N, 0.0f,
                   (float *)y->data + i * M * N, error))
            return FALSE;
    }
    return TRUE;
}

static gboolean run_gemm(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 2, error))
        return FALSE;
    const PsimNode *n = ctx->node;
    PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1], *c = psim__cpu_in(ctx, 2);
    gboolean ta = psim_node_attr_int(n, "transA", 0) != 0, tb = psim_node_attr_int(n, "transB", 0) != 0;
    float alpha = (float)psim_node_attr_float(n, "alpha", 1.0);
    float beta = (float)psim_node_attr_float(n, "beta", 1.0);
    if (a->rank != 2 || b->rank != 2 || (c && c->dtype != PSIM_DTYPE_FLOAT32)) {
        KERR(ctx, error, "Gemm needs 2-D float32 A and B");
        return FALSE;
    }
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != Kb) {
        KERR(ctx, error, "Gemm inner dimensions differ (%" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
             ")", K, Kb);
        return FALSE;
    }
    int64_t od[2] = {M, N};
    PsimCudaBcast g;
    memset(&g, 0, sizeof g);
    if (c) {
        int32_t r;
        int64_t bd[PSIM_CPU_MAX_RANK];
        if (c->rank > 2 || !psim__cpu_bcast_shape(ctx, c->rank, c->dims, 2, od, &r, bd, error) ||
            bd[0] != M || bd[1] != N) {
            if (error && !*error)
                KERR(ctx, error, "Gemm C does not broadcast to (%" G_GINT64_FORMAT ", %"
                     G_GINT64_FORMAT ")", M, N);
            return FALSE;
        }
        g.rank = 2;
        g.dims[0] = M;
        g.dims[1] = N;
        int64_t c0 = c->rank == 2 ? c->dims[0] : 1, c1 = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
        g.strides[0][0] = c0 == 1 ? 0 : c1;
        g.strides[0][1] = c1 == 1 ? 0 : 1;
        g.strides[1][0] = 0;
        g.strides[1][1] = 0;
    }
    const float *pa = psim__cuda_in(ctx, 0, error), *pb = pa ? psim__cuda_in(ctx, 1, error) : NULL;
    const float *pc = pb && c ? psim__cuda_in(ctx, 2, error) : NULL;
    if (!pb || (c && !pc))
        return FALSE;
    PsimTensor *y = out_like(ctx, 2, od, error);
    if (!y)
        return FALSE;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    if (c && beta != 0.0f) {
        /* y = C broadcast (C + 0 * nothing: an Add with a zero-stride scalar of C itself) */
        float zero = 0.0f;
        const float *pz = psim__cuda_workspace(ctx, sizeof(float), error);
        if (!pz)
            return FALSE;
        PSIM_CUDA_CHECK(ctx, error, cudaMemcpyAsync((void *)pz, &zero, sizeof zero,
                                                    cudaMemcpyHostToDevice, d->stream));
        int rc = psim__cuda_ew(d->stream, PSIM_CE_ADD, PSIM_CT_F32, M * N, &g, pc, pz, NULL,
                               y->data, 0, 0);
        if (rc)
            return psim__cuda_fail(ctx, error, "CUDA", "Gemm C broadcast", cudaGetErrorString(rc));
        PSIM_CUDA_CHECK(ctx, error, cudaStreamSynchronize(d->stream)); /* &zero is on our stack */
    } else
        beta = 0.0f;
    return sgemm(ctx, ta, tb, M, N, K, alpha, pa, pb, beta, y->data, error);
}

/* --- Explicit padding of an NC(H)W tensor (convolutions with asymmetric pads) ---------------- */

/* A device copy of x (N, C, H, W) padded by t/b/l/r with `value`; made through an index map. */
static PsimTensor *pad_nchw(PsimKernelCtx *ctx, const float *x, const int64_t *dims, int64_t t,
                            int64_t b, int64_t l, int64_t r, float value, GError **error)
{
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    int64_t NC = dims[0] * dims[1], H = dims[2], W = dims[3];
    int64_t Hp = H + t + b, Wp = W + l + r;
    int64_t od[4] = {dims[0], dims[1], Hp, Wp};
    g_autofree int64_t *map = g_try_new(int64_t, (gsize)MAX(NC * Hp * Wp, 1));
    if (!map) {
        KERR(ctx, error, "no host memory for a padding map");
        return NULL;
    }
    for (int64_t p = 0, i = 0; p < NC; p++)
        for (int64_t y = 0; y < Hp; y++)
            for (int64_t xx = 0; xx < Wp; xx++, i++) {
                int64_t sy = y - t, sx = xx - l;
                map[i] = sy >= 0 && sy < H && sx >= 0 && sx < W ? (p * H + sy) * W + sx + 1 : 0;
            }
    GError *err = NULL;
    PsimTensor *out = ctx->alloc(ctx, PSIM_DTYPE_FLOAT32, 4, od, &err);
    PsimTensor *dm = out ? ctx->alloc(ctx, PSIM_DTYPE_INT64, 1, (int64_t[]){NC * Hp * Wp + 3}, &err) : NULL;
    if (!dm) {
        KERR(ctx, error, "cannot allocate a padded input: %s", err->message);
        if (error && *error)
            (*error)->code = PSIM_ERROR_RUNTIME;
        g_error_free(err);
        if (out)
            psim_tensor_unref(out);
        return NULL;
    }
    /* The map, then the source pointer and the pad value after it. */
    int64_t *tail = (int64_t *)dm->data + NC * Hp * Wp;
    const void *src = x;
    cudaError_t ce = cudaMemcpyAsync(dm->data, map, sizeof(int64_t) * (size_t)(NC * Hp * Wp),
                                     cudaMemcpyHostToDevice, d->stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(tail, &src, sizeof src, cudaMemcpyHostToDevice, d->stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(tail + 1, &value, sizeof value, cudaMemcpyHostToDevice, d->stream);
    if (ce == cudaSuccess)
        ce = (cudaError_t)psim__cuda_gather_map(d->stream, sizeof(float), NC * Hp * Wp, dm->data,
                                                (const void *const *)tail, 1, tail + 1, out->data);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream); /* map, src and value are host locals */
    psim_tensor_unref(dm);
    if (ce != cudaSuccess) {
        psim_tensor_unref(out);
        psim__cuda_fail(ctx, error, "CUDA", "padding", cudaGetErrorString(ce));
        return NULL;
    }
    return out;
}

/* Spatial dims as 2-D (1-D: H = 1). FALSE when there are more than 2. */
static gboolean as_2d(PsimKernelCtx *ctx, const PsimTensor *x, int64_t *d4, GError **error)
{
    if (x->rank != 3 && x->rank != 4) {
        KERR(ctx, error, "%s on GPU supports 1-D and 2-D inputs (N, C, [H,] W); got rank %d",
             ctx->node->op, x->rank);
        return FALSE;
    }
    d4[0] = x->dims[0];
    d4[1] = x->dims[1];
    d4[2] = x->rank == 4 ? x->dims[2] : 1;
    d4[3] = x->dims[x->rank - 1];
    return TRUE;
}

/* --- Conv ----------------------------------------------------------------------------------- */

typedef struct {
    int64_t key[12];
    gboolean have;
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
} ConvState;

static gboolean conv_prepare(const PsimGraph *g, const PsimNode *n, void *device, void **state,
                             GError **error)
{
    (void)g;
    (void)n;
    (void)device;
    (void)error;
    *state = g_new0(ConvState, 1);
    return TRUE;
}

static void conv_release(void *state)
{
    ConvState *s = state;
    if (!s)
        return;
    if (s->xd)
        cudnnDestroyTensorDescriptor(s->xd);
    if (s->yd)
        cudnnDestroyTensorDescriptor(s->yd);
    if (s->bd)
        cudnnDestroyTensorDescriptor(s->bd);
    if (s->wd)
        cudnnDestroyFilterDescriptor(s->wd);
    if (s->cd)
        cudnnDestroyConvolutionDescriptor(s->cd);
    g_free(s);
}

static gboolean run_conv(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 2, error))
        return FALSE;
    ConvState *s = ctx->state;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    PsimTensor *x = ctx->inputs[0], *w = ctx->inputs[1], *bias = psim__cpu_in(ctx, 2);
    int64_t xd[4], wd4[4];
    if (!s || !as_2d(ctx, x, xd, error))
        return FALSE;
    if (w->rank != x->rank) {
        KERR(ctx, error, "Conv weights have rank %d, the input %d", w->rank, x->rank);
        return FALSE;
    }
    wd4[0] = w->dims[0];
    wd4[1] = w->dims[1];
    wd4[2] = w->rank == 4 ? w->dims[2] : 1;
    wd4[3] = w->dims[w->rank - 1];
    int64_t group = psim_node_attr_int(ctx->node, "group", 1);
    int64_t Cin = xd[1], M = wd4[0];
    if (group < 1 || Cin % group || M % group || wd4[1] != Cin / group) {
        KERR(ctx, error, "Conv weights (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
             ", ...) do not fit %" G_GINT64_FORMAT " input channels in %" G_GINT64_FORMAT " groups",
             M, wd4[1], Cin, group);
        return FALSE;
    }
    if (bias && (bias->dtype != PSIM_DTYPE_FLOAT32 || bias->n_elems != M)) {
        KERR(ctx, error, "Conv bias must have %" G_GINT64_FORMAT " float32 elements", M);
        return FALSE;
    }
    int32_t nsp = x->rank - 2;
    PsimWindow win;
    if (!psim__cpu_window(ctx, nsp, x->dims + 2, w->dims + 2, FALSE, TRUE, &win, error))
        return FALSE;
    /* 2-D view of the window */
    int64_t st[2] = {1, 1}, dl[2] = {1, 1}, p0[2] = {0, 0}, p1[2] = {0, 0}, od[2] = {1, 1};
    for (int32_t i = 0; i < nsp; i++) {
        int32_t j = nsp == 1 ? 1 : i;
        st[j] = win.stride[i];
        dl[j] = win.dil[i];
        p0[j] = win.pad0[i];
        p1[j] = win.pad1[i];
        od[j] = win.out[i];
    }
    const float *px = psim__cuda_in(ctx, 0, error), *pw = px ? psim__cuda_in(ctx, 1, error) : NULL;
    const float *pbias = pw && bias ? psim__cuda_in(ctx, 2, error) : NULL;
    if (!pw || (bias && !pbias))
        return FALSE;
    g_autoptr(PsimTensor) padded = NULL;
    if (p0[0] != p1[0] || p0[1] != p1[1]) {
        padded = pad_nchw(ctx, px, xd, p0[0], p1[0], p0[1], p1[1], 0.0f, error);
        if (!padded)
            return FALSE;
        px = padded->data;
        xd[2] += p0[0] + p1[0];
        xd[3] += p0[1] + p1[1];
        p0[0] = p0[1] = 0;
    }
    int64_t key[12] = {xd[0], xd[1], xd[2], xd[3], wd4[0], wd4[2], wd4[3], p0[0], p0[1],
                       st[0] * 65536 + st[1], dl[0] * 65536 + dl[1], group};
    if (!s->have || memcmp(key, s->key, sizeof key)) {
        if (!s->xd) {
            PSIM_CUDNN_CHECK(ctx, error, cudnnCreateTensorDescriptor(&s->xd));
            PSIM_CUDNN_CHECK(ctx, error, cudnnCreateTensorDescriptor(&s->yd));
            PSIM_CUDNN_CHECK(ctx, error, cudnnCreateTensorDescriptor(&s->bd));
            PSIM_CUDNN_CHECK(ctx, error, cudnnCreateFilterDescriptor(&s->wd));
            PSIM_CUDNN_CHECK(ctx, error, cudnnCreateConvolutionDescriptor(&s->cd));
        }
        s->have = FALSE;
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetTensor4dDescriptor(s->xd, CUDNN_TENSOR_NCHW,
                                                                CUDNN_DATA_FLOAT, (int)xd[0],
                                                                (int)xd[1], (int)xd[2], (int)xd[3]));
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetFilter4dDescriptor(s->wd, CUDNN_DATA_FLOAT,
                                                                CUDNN_TENSOR_NCHW, (int)wd4[0],
                                                                (int)wd4[1], (int)wd4[2], (int)wd4[3]));
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetConvolution2dDescriptor(
                                         s->cd, (int)p0[0], (int)p0[1], (int)st[0], (int)st[1],
                                         (int)dl[0], (int)dl[1], CUDNN_CROSS_CORRELATION,
                                         CUDNN_DATA_FLOAT));
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetConvolutionGroupCount(s->cd, (int)group));
        /* No TF32: cuDNN would otherwise use tensor cores for float32 on Ampere and later. */
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetConvolutionMathType(s->cd, CUDNN_FMA_MATH));
        int n, c, h, ww;
        PSIM_CUDNN_CHECK(ctx, error, cudnnGetConvolution2dForwardOutputDim(s->cd, s->xd, s->wd,
                                                                           &n, &c, &h, &ww));
        if (h != od[0] || ww != od[1] || c != M) {
            KERR(ctx, error, "cuDNN's output size %dx%d differs from the window's %" G_GINT64_FORMAT
                 "x%" G_GINT64_FORMAT, h, ww, od[0], od[1]);
            return FALSE;
        }
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetTensor4dDescriptor(s->yd, CUDNN_TENSOR_NCHW,
                                                                CUDNN_DATA_FLOAT, n, c, h, ww));
        PSIM_CUDNN_CHECK(ctx, error, cudnnSetTensor4dDescriptor(s->bd, CUDNN_TENSOR_NCHW,
                                                                CUDNN_DATA_FLOAT, 1, c, 1, 1));
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0;
        PSIM_CUDNN_CHECK(ctx, error, cudnnGetConvolutionForwardAlgorithm_v7(
                                         d->cudnn, s->xd, s->wd, s->cd, s->yd,
                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        int pick = -1;
        for (int i = 0; i < got && pick < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH)
                pick = i;
        for (int i = 0; i < got && pick < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS)
                pick = i;
        if (pick < 0) {
            KERR(ctx, error, "cuDNN has no forward algorithm for this convolution");
            return FALSE;
        }
        s->algo = perf[pick].algo;
        PSIM_CUDNN_CHECK(ctx, error, cudnnGetConvolutionForwardWorkspaceSize(
                                         d->cudnn, s->xd, s->wd, s->cd, s->yd, s->algo, &s->ws));
        memcpy(s->key, key, sizeof key);
        s->have = TRUE;
    }
    int64_t ydims[4] = {x->dims[0], M, od[0], od[1]};
    int64_t y1[3] = {x->dims[0], M, od[1]};
    PsimTensor *y = out_like(ctx, x->rank, x->rank == 4 ? ydims : y1, error);
    if (!y)
        return FALSE;
    void *ws = s->ws ? psim__cuda_workspace(ctx, s->ws, error) : NULL;
    if (s->ws && !ws)
        return FALSE;
    float one = 1.0f, zero = 0.0f;
    PSIM_CUDNN_CHECK(ctx, error, cudnnConvolutionForward(d->cudnn, &one, s->xd, px, s->wd, pw,
                                                         s->cd, s->algo, ws, s->ws, &zero, s->yd,
                                                         y->data));
    if (pbias)
        PSIM_CUDNN_CHECK(ctx, error, cudnnAddTensor(d->cudnn, &one, s->bd, pbias, &one, s->yd,
                                                    y->data));
    return TRUE;
}

/* --- Pooling -------------------------------------------------------------------------------- */

static gboolean pool2d(PsimKernelCtx *ctx, cudnnPoolingMode_t mode, const float *px,
                       const int64_t *xd, const int64_t *k, const int64_t *pad,
                       const int64_t *stride, float *py, const int64_t *yd, GError **error)
{
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    cudnnPoolingDescriptor_t pd = NULL;
    cudnnTensorDescriptor_t xdesc = NULL, ydesc = NULL;
    cudnnStatus_t st = cudnnCreatePoolingDescriptor(&pd);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnCreateTensorDescriptor(&xdesc);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnCreateTensorDescriptor(&ydesc);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetPooling2dDescriptor(pd, mode, CUDNN_PROPAGATE_NAN, (int)k[0], (int)k[1],
                                         (int)pad[0], (int)pad[1], (int)stride[0], (int)stride[1]);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetTensor4dDescriptor(xdesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)xd[0],
                                        (int)xd[1], (int)xd[2], (int)xd[3]);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnSetTensor4dDescriptor(ydesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)yd[0],
                                        (int)yd[1], (int)yd[2], (int)yd[3]);
    float one = 1.0f, zero = 0.0f;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnPoolingForward(d->cudnn, pd, &one, xdesc, px, &zero, ydesc, py);
    if (ydesc)
        cudnnDestroyTensorDescriptor(ydesc);
    if (xdesc)
        cudnnDestroyTensorDescriptor(xdesc);
    if (pd)
        cudnnDestroyPoolingDescriptor(pd);
    if (st != CUDNN_STATUS_SUCCESS)
        return psim__cuda_fail(ctx, error, "cuDNN", "cudnnPoolingForward", cudnnGetErrorString(st));
    return TRUE;
}

static gboolean run_pool(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    gboolean is_max = !strcmp(ctx->node->op, "MaxPool");
    int64_t xd[4];
    if (!as_2d(ctx, x, xd, error))
        return FALSE;
    if (psim__cpu_wants(ctx, 1)) {
        KERR(ctx, error, "MaxPool's Indices output is not supported on GPU");
        return FALSE;
    }
    const int64_t *ks;
    int32_t nk = psim_node_attr_ints(ctx->node, "kernel_shape", &ks);
    if (nk != x->rank - 2) {
        KERR(ctx, error, "kernel_shape must have %d entries", x->rank - 2);
        return FALSE;
    }
    gboolean ceil_mode = psim_node_attr_int(ctx->node, "ceil_mode", 0) != 0;
    PsimWindow win;
    if (!psim__cpu_window(ctx, nk, x->dims + 2, ks, ceil_mode, is_max, &win, error))
        return FALSE;
    int64_t k[2] = {1, 1}, st[2] = {1, 1}, p0[2] = {0, 0}, p1[2] = {0, 0}, od[2] = {1, 1},
            dil[2] = {1, 1};
    for (int32_t i = 0; i < nk; i++) {
        int32_t j = nk == 1 ? 1 : i;
        k[j] = win.k[i];
        st[j] = win.stride[i];
        p0[j] = win.pad0[i];
        p1[j] = win.pad1[i];
        od[j] = win.out[i];
        dil[j] = is_max ? win.dil[i] : 1;
    }
    const float *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    int64_t yd[4] = {xd[0], xd[1], od[0], od[1]};
    int64_t y1[3] = {xd[0], xd[1], od[1]};
    PsimTensor *y = out_like(ctx, x->rank, x->rank == 4 ? yd : y1, error);
    if (!y)
        return FALSE;
    gboolean incl = psim_node_attr_int(ctx->node, "count_include_pad", 0) != 0;
    /* cuDNN pools with symmetric pads, floor rounding and no dilation; anything else (ceil
     * mode, asymmetric pads, dilated max pooling) runs the direct kernel, which follows the CPU
     * kernel's rules for windows that overhang the input. */
    gboolean cudnn_fits = TRUE;
    for (int32_t j = 0; j < 2; j++)
        if (p0[j] != p1[j] || dil[j] != 1 ||
            (xd[2 + j] + 2 * p0[j] - k[j]) / st[j] + 1 != od[j])
            cudnn_fits = FALSE;
    if (!cudnn_fits) {
        PsimCudaPool2d g = {.h = xd[2], .w = xd[3], .oh = od[0], .ow = od[1], .kh = k[0],
                            .kw = k[1], .sh = st[0], .sw = st[1], .ph0 = p0[0], .pw0 = p0[1],
                            .ph1 = p1[0], .pw1 = p1[1], .dh = dil[0], .dw = dil[1]};
        int rc = psim__cuda_pool2d(psim__cuda_dev(ctx)->stream, is_max, incl, xd[0] * xd[1], &g,
                                   px, y->data);
        if (rc != 0)
            return psim__cuda_fail(ctx, error, "CUDA", "pooling kernel",
                                   cudaGetErrorString((cudaError_t)rc));
        return TRUE;
    }
    cudnnPoolingMode_t mode = is_max ? CUDNN_POOLING_MAX
                              : incl ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                     : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    return pool2d(ctx, mode, px, xd, k, p0, st, y->data, yd, error);
}

static gboolean run_global_pool(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (x->rank < 3) {
        KERR(ctx, error, "%s needs (N, C, spatial...)", ctx->node->op);
        return FALSE;
    }
    int64_t sp = 1;
    for (int32_t i = 2; i < x->rank; i++)
        sp *= x->dims[i];
    if (sp > INT32_MAX) {
        KERR(ctx, error, "spatial size too large for GPU pooling");
        return FALSE;
    }
    int64_t xd[4] = {x->dims[0], x->dims[1], 1, sp}, k[2] = {1, sp}, p[2] = {0, 0},
            st[2] = {1, sp}, yd[4] = {x->dims[0], x->dims[1], 1, 1};
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++)
        od[i] = i < 2 ? x->dims[i] : 1;
    const float *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    PsimTensor *y = out_like(ctx, x->rank, od, error);
    if (!y)
        return FALSE;
    if (sp == 0 || y->n_elems == 0) {
        KERR(ctx, error, "%s of an empty input", ctx->node->op);
        return FALSE;
    }
    return pool2d(ctx,
                  !strcmp(ctx->node->op, "GlobalMaxPool") ? CUDNN_POOLING_MAX
                                                          : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                  px, xd, k, p, st, y->data, yd, error);
}

/* --- BatchNormalization (inference), Softmax, LRN ------------------------------------------ */

static gboolean simple_desc(PsimKernelCtx *ctx, cudnnTensorDescriptor_t *t, int64_t n, int64_t c,
                            int64_t h, int64_t w, GError **error)
{
    if (n > INT32_MAX || c > INT32_MAX || h > INT32_MAX || w > INT32_MAX) {
        KERR(ctx, error, "tensor dimensions above 2^31 are not supported on GPU");
        return FALSE;
    }
    PSIM_CUDNN_CHECK(ctx, error, cudnnCreateTensorDescriptor(t));
    cudnnStatus_t st = cudnnSetTensor4dDescriptor(*t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n,
                                                  (int)c, (int)h, (int)w);
    if (st != CUDNN_STATUS_SUCCESS) {
        cudnnDestroyTensorDescriptor(*t);
        *t = NULL;
        return psim__cuda_fail(ctx, error, "cuDNN", "cudnnSetTensor4dDescriptor",
                               cudnnGetErrorString(st));
    }
    return TRUE;
}

static gboolean run_batchnorm(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 5, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (psim_node_attr_int(ctx->node, "training_mode", 0)) {
        KERR(ctx, error, "training-mode BatchNormalization is not supported on GPU");
        return FALSE;
    }
    if (x->rank < 2) {
        KERR(ctx, error, "BatchNormalization needs (N, C, ...)");
        return FALSE;
    }
    int64_t C = x->dims[1], inner = 1;
    for (int32_t i = 2; i < x->rank; i++)
        inner *= x->dims[i];
    for (int32_t k = 1; k < 5; k++)
        if (ctx->inputs[k]->n_elems != C) {
            KERR(ctx, error, "input %d must have %" G_GINT64_FORMAT " elements", k, C);
            return FALSE;
        }
    const void *p[5];
    for (int32_t k = 0; k < 5; k++)
        if (!(p[k] = psim__cuda_in(ctx, k, error)))
            return FALSE;
    PsimTensor *y = out_like(ctx, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    double eps = psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    if (eps < CUDNN_BN_MIN_EPSILON) {
        int rc = psim__cuda_batchnorm(d->stream, x->dims[0], C, inner, p[0], p[1], p[2], p[3],
                                      p[4], (float)eps, y->data);
        if (rc)
            return psim__cuda_fail(ctx, error, "CUDA", "BatchNormalization kernel",
                                   cudaGetErrorString(rc));
        return TRUE;
    }
    cudnnTensorDescriptor_t xd = NULL, bd = NULL;
    if (!simple_desc(ctx, &xd, x->dims[0], C, inner, 1, error))
        return FALSE;
    if (!simple_desc(ctx, &bd, 1, C, 1, 1, error)) {
        cudnnDestroyTensorDescriptor(xd);
        return FALSE;
    }
    float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st = cudnnBatchNormalizationForwardInference(
        d->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, p[0], xd, y->data, bd, p[1], p[2],
        p[3], p[4], eps);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(bd);
    if (st != CUDNN_STATUS_SUCCESS)
        return psim__cuda_fail(ctx, error, "cuDNN", "cudnnBatchNormalizationForwardInference",
                               cudnnGetErrorString(st));
    return TRUE;
}

static gboolean run_softmax(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t opset = psim_graph_opset(ctx->graph);
    gboolean coerce = opset > 0 && opset < 13;
    int32_t axis;
    if (x->rank < 1 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", coerce ? 1 : -1), x->rank,
                        &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "Softmax of a scalar");
        return FALSE;
    }
    int64_t outer = 1, mid = 1, inner = 1;
    for (int32_t i = 0; i < x->rank; i++) {
        if (i < axis)
            outer *= x->dims[i];
        else if (i == axis || coerce)
            mid *= x->dims[i];
        else
            inner *= x->dims[i];
    }
    const void *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    PsimTensor *y = out_like(ctx, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    if (y->n_elems == 0)
        return TRUE;
    cudnnTensorDescriptor_t td = NULL;
    if (!simple_desc(ctx, &td, outer, mid, inner, 1, error))
        return FALSE;
    float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st = cudnnSoftmaxForward(
        psim__cuda_dev(ctx)->cudnn,
        !strcmp(ctx->node->op, "LogSoftmax") ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
        CUDNN_SOFTMAX_MODE_CHANNEL, &one, td, px, &zero, td, y->data);
    cudnnDestroyTensorDescriptor(td);
    if (st != CUDNN_STATUS_SUCCESS)
        return psim__cuda_fail(ctx, error, "cuDNN", "cudnnSoftmaxForward", cudnnGetErrorString(st));
    return TRUE;
}

static gboolean run_lrn(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t size = psim_node_attr_int(ctx->node, "size", 0);
    double alpha = psim_node_attr_float(ctx->node, "alpha", 1e-4);
    double beta = psim_node_attr_float(ctx->node, "beta", 0.75);
    double bias = psim_node_attr_float(ctx->node, "bias", 1.0);
    if (x->rank < 3 || size < CUDNN_LRN_MIN_N || size > CUDNN_LRN_MAX_N ||
        bias < CUDNN_LRN_MIN_K || beta < CUDNN_LRN_MIN_BETA) {
        KERR(ctx, error, "LRN on GPU needs (N, C, ...) and size %d..%d, bias >= %g, beta >= %g "
             "(cuDNN's limits)", CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K,
             CUDNN_LRN_MIN_BETA);
        return FALSE;
    }
    int64_t inner = 1;
    for (int32_t i = 2; i < x->rank; i++)
        inner *= x->dims[i];
    const void *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    PsimTensor *y = out_like(ctx, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    if (y->n_elems == 0)
        return TRUE;
    cudnnLRNDescriptor_t ld = NULL;
    cudnnTensorDescriptor_t td = NULL;
    PSIM_CUDNN_CHECK(ctx, error, cudnnCreateLRNDescriptor(&ld));
    /* cuDNN and ONNX both divide alpha by the window size. */
    cudnnStatus_t st = cudnnSetLRNDescriptor(ld, (unsigned)size, alpha, beta, bias);
    if (st == CUDNN_STATUS_SUCCESS && !simple_desc(ctx, &td, x->dims[0], x->dims[1], inner, 1, error)) {
        cudnnDestroyLRNDescriptor(ld);
        return FALSE;
    }
    float one = 1.0f, zero = 0.0f;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnLRNCrossChannelForward(psim__cuda_dev(ctx)->cudnn, ld, CUDNN_LRN_CROSS_CHANNEL_DIM1,
                                         &one, td, px, &zero, td, y->data);
    if (td)
        cudnnDestroyTensorDescriptor(td);
    cudnnDestroyLRNDescriptor(ld);
    if (st != CUDNN_STATUS_SUCCESS)
        return psim__cuda_fail(ctx, error, "cuDNN", "cudnnLRNCrossChannelForward",
                               cudnnGetErrorString(st));
    return TRUE;
}

#define GPU(OP, NAME, DESC, RUN)                                                              \
    {.op = OP, .device_type = "GPU", .dtype = PSIM_DTYPE_FLOAT32, .name = NAME,              \
     .description = DESC, .async = TRUE, .run = RUN}

static const PsimKernelDef defs[] = {
    GPU("MatMul", "cuda-matmul-cublas", "numpy MatMul on cublasSgemm (FP32 math)", run_matmul),
    GPU("Gemm", "cuda-gemm-cublas", "alpha*A'B' + beta*C on cublasSgemm (FP32 math)", run_gemm),
    {.op = "Conv", .device_type = "GPU", .dtype = PSIM_DTYPE_FLOAT32, .name = "cuda-conv-cudnn",
     .description = "1-D/2-D convolution on cuDNN (groups, pads, strides, dilations; FMA math)",
     .async = TRUE, .prepare = conv_prepare, .release = conv_release, .run = run_conv},
    GPU("MaxPool", "cuda-pool-cudnn", "max over 1-D/2-D windows (cuDNN)", run_pool),
    GPU("AveragePool", "cuda-pool-cudnn", "mean over 1-D/2-D windows (cuDNN)", run_pool),
    GPU("GlobalAveragePool", "cuda-pool-cudnn", "mean over all spatial dims (cuDNN)",
        run_global_pool),
    GPU("GlobalMaxPool", "cuda-pool-cudnn", "max over all spatial dims (cuDNN)", run_global_pool),
    GPU("BatchNormalization", "cuda-batchnorm-cudnn", "inference batch normalization (cuDNN)",
        run_batchnorm),
    GPU("Softmax", "cuda-softmax-cudnn", "softmax along one axis (cuDNN)", run_softmax),
    GPU("LogSoftmax", "cuda-softmax-cudnn", "log-softmax along one axis (cuDNN)", run_softmax),
    GPU("LRN", "cuda-lrn-cudnn", "local response normalization across channels (cuDNN)", run_lrn),
};

void psim__cuda_register_dnn(void) { psim__kernels_add(defs, G_N_ELEMENTS(defs)); }
