/* Pooling over 1 to 3 spatial dims: MaxPool (with optional Indices, dilations, ceil_mode),
 * AveragePool (count_include_pad), and the global forms. 1-D and 2-D float32 pooling without
 * indices goes through the window planes (pads of -inf or 0); elsewhere padding is never
 * materialized: window positions outside the input are skipped (max) or counted as the
 * attribute says (average). */
#include "cpu-private.h"

#include <math.h>

typedef struct {
    int64_t in[3], out[3], k[3], s[3], d[3], p0[3], p1[3];
} Geo3;

/* Spreads an n-dim window to 3 dims, leading dims of size 1. */
static void geo3(const PsimWindow *w, Geo3 *g)
{
    int32_t lead = 3 - w->n;
    for (int32_t i = 0; i < 3; i++) {
        int32_t j = i - lead;
        g->in[i] = j >= 0 ? w->in[j] : 1;
        g->out[i] = j >= 0 ? w->out[j] : 1;
        g->k[i] = j >= 0 ? w->k[j] : 1;
        g->s[i] = j >= 0 ? w->stride[j] : 1;
        g->d[i] = j >= 0 ? w->dil[j] : 1;
        g->p0[i] = j >= 0 ? w->pad0[j] : 0;
        g->p1[i] = j >= 0 ? w->pad1[j] : 0;
    }
}

static gboolean pool_setup(PsimKernelCtx *ctx, gboolean is_max, PsimWindow *w, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || x->rank < 3 ||
        x->rank > 5) {
        KERR(ctx, error, "%s needs a float32 or float64 input of rank 3 to 5", ctx->node->op);
        return FALSE;
    }
    const int64_t *ks = NULL;
    int32_t nk = psim_node_attr_ints(ctx->node, "kernel_shape", &ks);
    if (nk != x->rank - 2) {
        KERR(ctx, error, "kernel_shape must have %d entries", x->rank - 2);
        return FALSE;
    }
    gboolean ceil_mode = psim_node_attr_int(ctx->node, "ceil_mode", 0) != 0;
    return psim__cpu_window(ctx, nk, x->dims + 2, ks, ceil_mode, is_max, w, error);
}

/* 2-D float32 max and average pooling (no indices) through the window planes
 * (kernels/cpu/window.c): pads of -inf (max, so that they are never taken) or 0 (average, whose
 * divisor per output is the window's rows times its columns that count). FALSE (nothing written)
 * for windows the planes do not take. */
static gboolean pool2d_planes(const Geo3 *g, int64_t NC, gboolean is_max, gboolean incl,
                              const float *xd, float *yd, GError **error, gboolean *done)
{
    *done = FALSE;
    /* Windows over at most two dims: a 3-D input of depth 1 may still pad or window its depth. */
    if (g->in[0] != 1 || g->out[0] != 1 || g->k[0] != 1 || g->p0[0] != 0 || g->p1[0] != 0 ||
        !psim__planes_fits(g->k[1], g->k[2], g->s[1], g->s[2], g->out[1], g->out[2]))
        return TRUE;
    PsimPlanes p;
    psim__planes_init(&p, g->in[1], g->in[2], g->k[1], g->k[2], g->s[1], g->s[2], g->d[1], g->d[2],
                      g->p0[1], g->p0[2], g->out[1], g->out[2]);
    int64_t Ho = g->out[1], Wo = g->out[2], HWi = g->in[1] * g->in[2], KK = g->k[1] * g->k[2];
    float *planes = psim__cpu_scratch(sizeof(float) * (psim__planes_floats(&p) + (size_t)(Ho + Wo + KK)), error);
    if (!planes)
        return FALSE;
    float *t = psim__planes_out(&p, planes), *div = planes + psim__planes_floats(&p), *ones = div + Ho + Wo;
    /* Average: per output row and column, the window positions that count (inside the input,
     * or, with count_include_pad, inside the padded input). */
    for (int32_t dim = 1; !is_max && dim <= 2; dim++)
        for (int64_t o = 0; o < g->out[dim]; o++) {
            int64_t s = o * g->s[dim] - g->p0[dim], cnt = 0;
            for (int64_t k = 0; k < g->k[dim]; k++) {
                int64_t i = s + k * g->d[dim];
                cnt += incl ? (i >= -g->p0[dim] && i < g->in[dim] + g->p1[dim]) : (i >= 0 && i < g->in[dim]);
            }
            div[(dim == 1 ? 0 : Ho) + o] = (float)cnt;
        }
    for (int64_t k = 0; k < KK; k++)
        ones[k] = 1.0f;
    psim__planes_pad(&p, planes, is_max ? -INFINITY : 0.0f);
    const float *base[PSIM_PLANES_MAX_TAPS];
    psim__planes_taps(&p, planes, base);
    for (int64_t nc = 0; nc < NC; nc++) {
        psim__planes_fill(&p, xd + nc * HWi, planes);
        float *y = yd + nc * Ho * Wo;
        if (is_max) {
            psim__planes_max(base, KK, Ho * p.Ws, t);
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++)
                    y[oh * Wo + ow] = t[oh * p.Ws + ow];
        } else {
            psim__planes_wsum(base, KK, ones, Ho * p.Ws, t);
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    float d = div[oh] * div[Ho + ow];
                    y[oh * Wo + ow] = d > 0 ? t[oh * p.Ws + ow] / d : 0.0f;
                }
        }
    }
    *done = TRUE;
    return TRUE;
}

/* 2 x 2 windows of stride 2, all inside the image (no pads, no dilation): the common pooling of
 * CNNs in one pass over the input, where the planes take three (the copy into four phase planes,
 * the reduction, the copy out; the cnn's training step spent 6% of its time there). Ties and NaNs
 * as the planes' reduction: the first of the largest in row-major tap order, a NaN never taken. */
static gboolean pool2x2(const Geo3 *g)
{
    return g->in[0] == 1 && g->out[0] == 1 && g->k[0] == 1 && g->k[1] == 2 && g->k[2] == 2 &&
           g->s[1] == 2 && g->s[2] == 2 && g->d[1] == 1 && g->d[2] == 1 && g->p0[1] == 0 &&
           g->p0[2] == 0 && 2 * g->out[1] <= g->in[1] && 2 * g->out[2] <= g->in[2];
}

typedef float PoolV8 __attribute__((vector_size(32)));
typedef float PoolV8U __attribute__((vector_size(32), aligned(4)));
typedef int32_t PoolI8 __attribute__((vector_size(32)));
typedef int32_t PoolI8U __attribute__((vector_size(32), aligned(4)));

/* One output row of a 2 x 2, stride-2 max pool from input rows r0 and r1, eight outputs a pass:
 * each tap replaces the maximum only where strictly larger (selects on masks, not branches on
 * the data: the scalar loop's compares became branches that random data mispredicted, 10 ns an
 * output). With code, the tap taken per output (0-3, row-major) for the Indices, and the first
 * tap is the start; without, -inf is (a NaN never taken). */
PSIM_CPU_CLONES static void maxpool2x2_row(const float *restrict r0, const float *restrict r1,
                                           int64_t Wo, float *restrict o, int32_t *restrict code)
{
    const PoolV8 ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                         -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    /* Rows of 8 or more end with a block that overlaps the one before (the same values written
     * twice) rather than a scalar tail (14 x 14 outputs: 6 of 14 in the tail). */
    for (int64_t i = 0; Wo >= 8 && i < Wo; i += 8) {
        int64_t at = MIN(i, Wo - 8);
        PoolV8 u0 = *(const PoolV8U *)(r0 + 2 * at), u1 = *(const PoolV8U *)(r0 + 2 * at + 8);
        PoolV8 w0 = *(const PoolV8U *)(r1 + 2 * at), w1 = *(const PoolV8U *)(r1 + 2 * at + 8);
        /* (__builtin_shufflevector: GCC 12 and clang, the fuzz build's compiler) */
        PoolV8 tap[4] = {__builtin_shufflevector(u0, u1, 0, 2, 4, 6, 8, 10, 12, 14),
                         __builtin_shufflevector(u0, u1, 1, 3, 5, 7, 9, 11, 13, 15),
                         __builtin_shufflevector(w0, w1, 0, 2, 4, 6, 8, 10, 12, 14),
                         __builtin_shufflevector(w0, w1, 1, 3, 5, 7, 9, 11, 13, 15)};
        PoolV8 m = ninf;
        PoolI8 k = {0}, t;
        if (code) {
            m = tap[0];
        } else {
            t = tap[0] > m;
            m = (PoolV8)(((PoolI8)tap[0] & t) | ((PoolI8)m & ~t));
        }
        for (int32_t j = 1; j < 4; j++) {
            t = tap[j] > m;
            m = (PoolV8)(((PoolI8)tap[j] & t) | ((PoolI8)m & ~t));
            k = (k & ~t) | (t & j);
        }
        *(PoolV8U *)(o + at) = m;
        if (code)
            *(PoolI8U *)(code + at) = k;
    }
    for (int64_t ow = Wo >= 8 ? Wo : 0; ow < Wo; ow++) { /* rows of under 8 outputs */
        float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
        float m = code ? v[0] : (v[0] > -INFINITY ? v[0] : -INFINITY);
        int32_t k = 0;
        for (int32_t j = 1; j < 4; j++) {
            gboolean take = v[j] > m;
            m = take ? v[j] : m;
            k = take ? j : k;
        }
        o[ow] = m;
        if (code)
            code[ow] = k;
    }
}

/* The whole 2 x 2 pool; with id, ONNX's row-major Indices (flat over N and C too). */
static gboolean maxpool2x2(const Geo3 *g, int64_t NC, const float *x, float *y, int64_t *id,
                           GError **error)
{
    int64_t H = g->in[1], W = g->in[2], Ho = g->out[1], Wo = g->out[2];
    int32_t *code = NULL;
    if (id && !(code = psim__cpu_scratch(sizeof(int32_t) * (size_t)(Wo + 8), error)))
        return FALSE;
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t oh = 0; oh < Ho; oh++) {
            const float *r0 = x + (nc * H + 2 * oh) * W;
            int64_t o = (nc * Ho + oh) * Wo;
            maxpool2x2_row(r0, r0 + W, Wo, y + o, code);
            if (!id)
                continue;
            int64_t at = (nc * H + 2 * oh) * W;
            for (int64_t ow = 0; ow < Wo; ow++)
                id[o + ow] = at + 2 * ow + (code[ow] & 1) + (code[ow] >> 1) * W;
        }
    return TRUE;
}

/* 2-D float32 max pooling with ONNX's row-major Indices (what the training graph's MaxPool
 * gradient asks for): per output, its window's bounds once, then a plain scan. */
static void maxpool2d_idx(const Geo3 *g, int64_t NC, const float *xd, float *yd, int64_t *id)
{
    int64_t H = g->in[1], W = g->in[2], Ho = g->out[1], Wo = g->out[2];
    int64_t kh = g->k[1], kw = g->k[2], sh = g->s[1], sw = g->s[2];
    if (g->p0[1] == 0 && g->p0[2] == 0 && g->d[1] == 1 && g->d[2] == 1 &&
        (Ho - 1) * sh + kh <= H && (Wo - 1) * sw + kw <= W) {
        /* Every window inside the image (no padding): no bounds to check. */
        for (int64_t nc = 0; nc < NC; nc++) {
            const float *xp = xd + nc * H * W;
            for (int64_t oh = 0; oh < Ho; oh++)
                for (int64_t ow = 0; ow < Wo; ow++) {
                    int64_t at = oh * sh * W + ow * sw, bi = at;
                    float best = xp[at];
                    for (int64_t a = 0; a < kh; a++)
                        for (int64_t b = 0; b < kw; b++) {
                            int64_t p = at + a * W + b;
                            float v = xp[p];
                            gboolean take = v > best;
                            best = take ? v : best;
                            bi = take ? p : bi;
                        }
                    int64_t o = (nc * Ho + oh) * Wo + ow;
                    yd[o] = best;
                    id[o] = nc * H * W + bi;
                }
        }
        return;
    }
    for (int64_t nc = 0; nc < NC; nc++) {
        const float *xp = xd + nc * H * W;
        for (int64_t oh = 0; oh < Ho; oh++) {
            int64_t h0 = oh * g->s[1] - g->p0[1];
            for (int64_t ow = 0; ow < Wo; ow++) {
                int64_t w0 = ow * g->s[2] - g->p0[2];
                float best = -INFINITY;
                int64_t bi = -1;
                for (int64_t kh = 0; kh < g->k[1]; kh++) {
                    int64_t h = h0 + kh * g->d[1];
                    if (h < 0 || h >= H)
                        continue;
                    for (int64_t kw = 0; kw < g->k[2]; kw++) {
                        int64_t w = w0 + kw * g->d[2];
                        if (w < 0 || w >= W)
                            continue;
                                float v = xp[h * W + w];
                        /* Selects, not a branch on the data (the first tap in bounds wins
                         * ties, as ONNX's reference takes the first maximum). */
                        gboolean take = v > best || bi < 0;
                        best = take ? v : best;
                        bi = take ? h * W + w : bi;
                    }
                }
                int64_t o = (nc * Ho + oh) * Wo + ow;
                yd[o] = best;
                id[o] = nc * H * W + (bi < 0 ? 0 : bi);
            }
        }
    }
}

/* The pooled output (dims into od: N, C, then the window's output sizes), of the input's type. */
static PsimTensor *pool_out(PsimKernelCtx *ctx, const PsimWindow *w, int64_t *od, GError **error)
{
    PsimTensor *x = ctx->inputs[0];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    for (int32_t i = 0; i < w->n; i++)
        od[2 + i] = w->out[i];
    return psim__cpu_out_all(ctx, 0, x->dtype, x->rank, od, error); /* every path writes all */
}

/* Max pooling over any window, with Indices (id, optional) as ONNX flattens them. */
static inline void maxpool_any(const Geo3 *g, int64_t NC, int64_t in_sz, const void *xd, void *yd,
                               int64_t *id, gboolean col_major, gboolean f64)
{
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int64_t out_sz = g->out[0] * g->out[1] * g->out[2];
    for (int64_t nc = 0; nc < NC; nc++) {
        const char *xp = (const char *)xd + nc * in_sz * es;
        for (int64_t a = 0; a < g->out[0]; a++)
            for (int64_t b = 0; b < g->out[1]; b++)
                for (int64_t c = 0; c < g->out[2]; c++) {
                    double best = -INFINITY;
                    int64_t bi = -1;
                    for (int64_t ka = 0; ka < g->k[0]; ka++) {
                        int64_t ia = a * g->s[0] - g->p0[0] + ka * g->d[0];
                        if (ia < 0 || ia >= g->in[0])
                            continue;
                        for (int64_t kb = 0; kb < g->k[1]; kb++) {
                            int64_t ib = b * g->s[1] - g->p0[1] + kb * g->d[1];
                            if (ib < 0 || ib >= g->in[1])
                                continue;
                            int64_t row = (ia * g->in[1] + ib) * g->in[2];
                            for (int64_t kc = 0; kc < g->k[2]; kc++) {
                                int64_t ic = c * g->s[2] - g->p0[2] + kc * g->d[2];
                                if (ic < 0 || ic >= g->in[2])
                                    continue;
                                double v = PSIM_CPU_LOAD(f64, xp, row + ic);
                                if (v > best || bi < 0) {
                                    best = v;
                                    bi = (ia * g->in[1] + ib) * g->in[2] + ic;
                                    if (col_major) /* ONNX storage_order 1: column-major */
                                        bi = (ic * g->in[1] + ib) * g->in[0] + ia;
                                }
                            }
                        }
                    }
                    int64_t o = nc * out_sz + (a * g->out[1] + b) * g->out[2] + c;
                    PSIM_CPU_STORE(f64, yd, o, best);
                    if (id)
                        id[o] = nc * in_sz + (bi < 0 ? 0 : bi);
                }
    }
}

static gboolean run_maxpool(PsimKernelCtx *ctx, GError **error)
{
    PsimWindow w;
    if (!pool_setup(ctx, TRUE, &w, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t od[5];
    PsimTensor *y = pool_out(ctx, &w, od, error);
    if (!y)
        return FALSE;
    PsimTensor *ind = NULL;
    if (psim__cpu_wants(ctx, 1) &&
        !(ind = psim__cpu_out_all(ctx, 1, PSIM_DTYPE_INT64, x->rank, od, error)))
        return FALSE;
    gboolean col_major = psim_node_attr_int(ctx->node, "storage_order", 0) != 0;
    Geo3 g;
    geo3(&w, &g);
    int64_t NC = x->dims[0] * x->dims[1], in_sz = g.in[0] * g.in[1] * g.in[2];
    gboolean done = FALSE;
    if (x->dtype == PSIM_DTYPE_FLOAT32 && !col_major && pool2x2(&g))
        return maxpool2x2(&g, NC, x->data, y->data, ind ? ind->data : NULL, error);
    if (x->dtype == PSIM_DTYPE_FLOAT32 && !ind &&
        !pool2d_planes(&g, NC, TRUE, FALSE, x->data, y->data, error, &done))
        return FALSE;
    if (done)
        return TRUE;
    if (x->dtype == PSIM_DTYPE_FLOAT64) /* gradient checks */
        maxpool_any(&g, NC, in_sz, x->data, y->data, ind ? ind->data : NULL, col_major, TRUE);
    else if (ind && !col_major && g.in[0] == 1)
        maxpool2d_idx(&g, NC, x->data, y->data, ind->data);
    else
        maxpool_any(&g, NC, in_sz, x->data, y->data, ind ? ind->data : NULL, col_major, FALSE);
    return TRUE;
}

/* Average pooling over any window (count_include_pad: incl). */
static inline void avgpool_any(const Geo3 *g, int64_t NC, int64_t in_sz, gboolean incl,
                               const void *xd, void *yd, gboolean f64)
{
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int64_t out_sz = g->out[0] * g->out[1] * g->out[2];
    for (int64_t nc = 0; nc < NC; nc++) {
        const char *xp = (const char *)xd + nc * in_sz * es;
        for (int64_t a = 0; a < g->out[0]; a++)
            for (int64_t b = 0; b < g->out[1]; b++)
                for (int64_t c = 0; c < g->out[2]; c++) {
                    double sum = 0.0;
                    int64_t cnt = 0, cnt_pad = 1;
                    int64_t lo[3] = {a * g->s[0] - g->p0[0], b * g->s[1] - g->p0[1],
                                     c * g->s[2] - g->p0[2]};
                    /* Positions inside the padded input, for count_include_pad. */
                    for (int32_t i = 0; i < 3; i++) {
                        int64_t s = lo[i], e = lo[i] + g->k[i];
                        s = MAX(s, -g->p0[i]);
                        e = MIN(e, g->in[i] + g->p1[i]);
                        cnt_pad *= MAX(e - s, 0);
                    }
                    for (int64_t ka = MAX(0, -lo[0]); ka < g->k[0] && lo[0] + ka < g->in[0]; ka++)
                        for (int64_t kb = MAX(0, -lo[1]); kb < g->k[1] && lo[1] + kb < g->in[1];
                             kb++) {
                            int64_t row = ((lo[0] + ka) * g->in[1] + lo[1] + kb) * g->in[2];
                            int64_t c0 = MAX(0, -lo[2]), c1 = MIN(g->k[2], g->in[2] - lo[2]);
                            for (int64_t kc = c0; kc < c1; kc++)
                                sum += PSIM_CPU_LOAD(f64, xp, row + lo[2] + kc);
                            cnt += MAX(c1 - c0, 0);
                        }
                    int64_t div = incl ? cnt_pad : cnt;
                    PSIM_CPU_STORE(f64, yd, nc * out_sz + (a * g->out[1] + b) * g->out[2] + c,
                          div > 0 ? sum / (double)div : 0.0);
                }
    }
}

static gboolean run_avgpool(PsimKernelCtx *ctx, GError **error)
{
    PsimWindow w;
    if (!pool_setup(ctx, FALSE, &w, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    gboolean incl = psim_node_attr_int(ctx->node, "count_include_pad", 0) != 0;
    int64_t od[5];
    PsimTensor *y = pool_out(ctx, &w, od, error);
    if (!y)
        return FALSE;
    Geo3 g;
    geo3(&w, &g);
    int64_t NC = x->dims[0] * x->dims[1], in_sz = g.in[0] * g.in[1] * g.in[2];
    gboolean done = FALSE;
    if (x->dtype == PSIM_DTYPE_FLOAT32 && !pool2d_planes(&g, NC, FALSE, incl, x->data, y->data, error, &done))
        return FALSE;
    if (done)
        return TRUE;
    if (x->dtype == PSIM_DTYPE_FLOAT64) /* gradient checks */
        avgpool_any(&g, NC, in_sz, incl, x->data, y->data, TRUE);
    else
        avgpool_any(&g, NC, in_sz, incl, x->data, y->data, FALSE);
    return TRUE;
}

static gboolean run_global(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || x->rank < 2) {
        KERR(ctx, error, "%s needs a float32 or float64 input of rank >= 2", ctx->node->op);
        return FALSE;
    }
    gboolean is_max = !strcmp(ctx->node->op, "GlobalMaxPool");
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++)
        od[i] = i < 2 ? x->dims[i] : 1;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    if (!y)
        return FALSE;
    int64_t NC = x->dims[0] * x->dims[1], S = NC ? x->n_elems / NC : 0;
    if (x->dtype == PSIM_DTYPE_FLOAT64) { /* gradient checks */
        for (int64_t i = 0; i < NC; i++) {
            const double *p = (const double *)x->data + i * S;
            double acc = is_max ? -INFINITY : 0.0;
            for (int64_t j = 0; j < S; j++)
                acc = is_max ? (p[j] > acc ? p[j] : acc) : acc + p[j];
            ((double *)y->data)[i] = is_max || !S ? acc : acc / (double)S;
        }
        return TRUE;
    }
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t i = 0; i < NC; i++) {
        const float *restrict p = xd + i * S;
        float acc = is_max ? -INFINITY : 0.0f;
        if (is_max)
            for (int64_t j = 0; j < S; j++)
                acc = p[j] > acc ? p[j] : acc;
        else {
            for (int64_t j = 0; j < S; j++)
                acc += p[j];
            acc = S ? acc / (float)S : 0.0f;
        }
        yd[i] = acc;
    }
    return TRUE;
}

void psim__cpu_register_pool(void)
{
    /* float64 for gradient checks */
    static const PsimDType f32_f64[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("MaxPool", "cpu-maxpool", "max over 1-3-D windows, optional Indices",
                  run_maxpool, f32_f64, NULL);
    psim__cpu_add("AveragePool", "cpu-avgpool", "mean over 1-3-D windows", run_avgpool, f32_f64,
                  NULL);
    psim__cpu_add("GlobalAveragePool", "cpu-global-pool", "mean over all spatial dims",
                  run_global, f32_f64, NULL);
    psim__cpu_add("GlobalMaxPool", "cpu-global-pool", "max over all spatial dims", run_global,
                  f32_f64, NULL);
}
