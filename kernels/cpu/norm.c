/* Normalizations and softmax: BatchNormalization (inference, and training mode's batch
 * statistics), InstanceNormalization, LayerNormalization, LRN, Softmax and LogSoftmax (opset 13
 * semantics: along one axis). float32. */
#include "cpu-private.h"

#include <math.h>

static gboolean need_f32(PsimKernelCtx *ctx, int32_t n, GError **error)
{
    if (!psim__cpu_need(ctx, n, error))
        return FALSE;
    for (int32_t k = 0; k < ctx->n_inputs; k++)
        if (ctx->inputs[k] && ctx->inputs[k]->dtype != PSIM_DTYPE_FLOAT32) {
            KERR(ctx, error, "%s has a CPU kernel for float32 only (input %d is %s)",
                 ctx->node->op, k, psim_dtype_name(ctx->inputs[k]->dtype));
            return FALSE;
        }
    return TRUE;
}

static gboolean per_channel(PsimKernelCtx *ctx, int32_t from, int32_t to, int64_t C,
                            GError **error)
{
    for (int32_t k = from; k < to; k++)
        if (ctx->inputs[k]->n_elems != C) {
            KERR(ctx, error, "input %d has %" G_GINT64_FORMAT " values for %" G_GINT64_FORMAT
                 " channels", k, ctx->inputs[k]->n_elems, C);
            return FALSE;
        }
    return TRUE;
}

/* BatchNormalization over [N, C, S] of float32 or float64 (f64 a constant where inlined):
 * batch statistics in training mode (the running ones updated into outputs 1 and 2 when wanted),
 * else the given ones; float32 statistics are rounded to float as they always were. */
static inline gboolean batchnorm_any(PsimKernelCtx *ctx, int64_t N, int64_t C, int64_t S,
                                     gboolean training, double eps, gboolean f64, GError **error)
{
    PsimTensor *x = ctx->inputs[0];
    const void *scale = ctx->inputs[1]->data, *bias = ctx->inputs[2]->data;
    const void *mean = ctx->inputs[3]->data, *var = ctx->inputs[4]->data;
    PsimTensor *y = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    const void *xd = x->data;
    void *yd = y->data;
    g_autofree double *bm = g_new(double, C + 1), *bv = g_new(double, C + 1);
    for (int64_t c = 0; c < C; c++) {
        bm[c] = PSIM_CPU_LOAD(f64, mean, c);
        bv[c] = PSIM_CPU_LOAD(f64, var, c);
    }
    if (training) {
        /* Batch statistics (population variance), as ONNX's reference computes them. */
        for (int64_t c = 0; c < C; c++) {
            double s = 0, s2 = 0;
            for (int64_t n = 0; n < N; n++) {
                if (!f64) { /* float rows in vectorised lanes */
                    s += psim__cpu_sum_f32((const float *)xd + (n * C + c) * S, S);
                    continue;
                }
                for (int64_t i = 0; i < S; i++)
                    s += PSIM_CPU_LOAD(f64, xd, (n * C + c) * S + i);
            }
            double m = (N && S) ? s / (double)(N * S) : 0;
            for (int64_t n = 0; n < N; n++) {
                if (!f64) {
                    s2 += psim__cpu_sum_sq_dev_f32((const float *)xd + (n * C + c) * S, S, (float)m);
                    continue;
                }
                for (int64_t i = 0; i < S; i++) {
                    double d = PSIM_CPU_LOAD(f64, xd, (n * C + c) * S + i) - m;
                    s2 += d * d;
                }
            }
            double v = (N && S) ? s2 / (double)(N * S) : 0;
            bm[c] = f64 ? m : (double)(float)m;
            bv[c] = f64 ? v : (double)(float)v;
        }
        double mom = psim_node_attr_float(ctx->node, "momentum", 0.9);
        if (!f64)
            mom = (float)mom;
        for (int32_t k = 1; k <= 2; k++) {
            if (!psim__cpu_wants(ctx, k))
                continue;
            int64_t cd = C;
            PsimTensor *r = psim__cpu_out(ctx, k, x->dtype, 1, &cd, error);
            if (!r)
                return FALSE;
            const void *old = k == 1 ? mean : var;
            const double *cur = k == 1 ? bm : bv;
            for (int64_t c = 0; c < C; c++)
                PSIM_CPU_STORE(f64, r->data, c, PSIM_CPU_LOAD(f64, old, c) * mom + cur[c] * (1.0 - mom));
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double a = PSIM_CPU_LOAD(f64, scale, c) / sqrt(bv[c] + eps);
        if (f64) {
            double b = PSIM_CPU_LOAD(f64, bias, c) - bm[c] * a;
            for (int64_t n = 0; n < N; n++) {
                const double *restrict src = (const double *)xd + (n * C + c) * S;
                double *restrict dst = (double *)yd + (n * C + c) * S;
                for (int64_t i = 0; i < S; i++)
                    dst[i] = src[i] * a + b;
            }
        } else {
            float af = (float)a, b = ((const float *)bias)[c] - (float)bm[c] * af;
            for (int64_t n = 0; n < N; n++) {
                const float *restrict src = (const float *)xd + (n * C + c) * S;
                float *restrict dst = (float *)yd + (n * C + c) * S;
                for (int64_t i = 0; i < S; i++)
                    dst[i] = src[i] * af + b;
            }
        }
    }
    return TRUE;
}

static gboolean run_batchnorm(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 5, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    gboolean f64 = x->dtype == PSIM_DTYPE_FLOAT64;
    for (int32_t k = 1; f64 && k < 5; k++)
        if (ctx->inputs[k]->dtype != PSIM_DTYPE_FLOAT64) {
            KERR(ctx, error, "BatchNormalization: input %d is not float64 as X is", k);
            return FALSE;
        }
    if (!f64 && !need_f32(ctx, 5, error))
        return FALSE;
    if (x->rank < 2) {
        KERR(ctx, error, "BatchNormalization needs an input of rank >= 2");
        return FALSE;
    }
    int64_t N = x->dims[0], C = x->dims[1], S = (N && C) ? x->n_elems / (N * C) : 0;
    if (!per_channel(ctx, 1, 5, C, error))
        return FALSE;
    double eps = psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    gboolean training = psim_node_attr_int(ctx->node, "training_mode", 0) != 0;
    return f64 ? batchnorm_any(ctx, N, C, S, training, eps, TRUE, error)
               : batchnorm_any(ctx, N, C, S, training, eps, FALSE, error);
}

static gboolean run_instancenorm(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 3, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (x->rank < 3) {
        KERR(ctx, error, "InstanceNormalization needs an input of rank >= 3");
        return FALSE;
    }
    int64_t N = x->dims[0], C = x->dims[1], S = (N && C) ? x->n_elems / (N * C) : 0;
    if (!per_channel(ctx, 1, 3, C, error))
        return FALSE;
    double eps = psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    const float *scale = ctx->inputs[1]->data, *bias = ctx->inputs[2]->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *src = (const float *)x->data + (n * C + c) * S;
            float *dst = (float *)y->data + (n * C + c) * S;
            double s = 0, s2 = 0;
            for (int64_t i = 0; i < S; i++)
                s += src[i];
            double m = S ? s / (double)S : 0;
            for (int64_t i = 0; i < S; i++)
                s2 += (src[i] - m) * (src[i] - m);
            double inv = 1.0 / sqrt((S ? s2 / (double)S : 0) + eps);
            float a = (float)(scale[c] * inv), b = (float)(bias[c] - m * scale[c] * inv);
            for (int64_t i = 0; i < S; i++)
                dst[i] = src[i] * a + b;
        }
    return TRUE;
}

static gboolean run_layernorm(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *sc = ctx->inputs[1], *bt = psim__cpu_in(ctx, 2);
    int32_t axis;
    if (!psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", -1), x->rank, &axis, error))
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x->dims);
    int64_t D = outer ? x->n_elems / outer : 0;
    if ((sc->n_elems != D && sc->n_elems != 1) || (bt && bt->n_elems != D && bt->n_elems != 1)) {
        KERR(ctx, error, "Scale and B must have the normalized shape (%" G_GINT64_FORMAT
             " values)", D);
        return FALSE;
    }
    double eps = psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t sd[PSIM_CPU_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++)
        sd[i] = i < axis ? x->dims[i] : 1;
    PsimTensor *tm = NULL, *ti = NULL;
    if (psim__cpu_wants(ctx, 1) &&
        !(tm = psim__cpu_out(ctx, 1, PSIM_DTYPE_FLOAT32, x->rank, sd, error)))
        return FALSE;
    if (psim__cpu_wants(ctx, 2) &&
        !(ti = psim__cpu_out(ctx, 2, PSIM_DTYPE_FLOAT32, x->rank, sd, error)))
        return FALSE;
    const float *s = sc->data, *b = bt ? bt->data : NULL;
    int64_t ss = sc->n_elems == 1 ? 0 : 1, bs = bt && bt->n_elems == 1 ? 0 : 1;
    for (int64_t o = 0; o < outer; o++) {
        const float *restrict src = (const float *)x->data + o * D;
        float *restrict dst = (float *)y->data + o * D;
        double sum = 0, s2 = 0;
        for (int64_t i = 0; i < D; i++)
            sum += src[i];
        double m = D ? sum / (double)D : 0;
        for (int64_t i = 0; i < D; i++)
            s2 += (src[i] - m) * (src[i] - m);
        float inv = (float)(1.0 / sqrt((D ? s2 / (double)D : 0) + eps)), mf = (float)m;
        for (int64_t i = 0; i < D; i++)
            dst[i] = (src[i] - mf) * inv * s[i * ss] + (b ? b[i * bs] : 0.0f);
        if (tm)
            ((float *)tm->data)[o] = mf;
        if (ti)
            ((float *)ti->data)[o] = inv;
    }
    return TRUE;
}

static gboolean run_lrn(PsimKernelCtx *ctx, GError **error)
{
    if (!need_f32(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t size = psim_node_attr_int(ctx->node, "size", 0);
    if (x->rank < 3 || size < 1 || size > 4096) {
        KERR(ctx, error, "LRN needs an input of rank >= 3 and a positive size");
        return FALSE;
    }
    float alpha = (float)psim_node_attr_float(ctx->node, "alpha", 1e-4);
    float beta = (float)psim_node_attr_float(ctx->node, "beta", 0.75);
    float bias = (float)psim_node_attr_float(ctx->node, "bias", 1.0);
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t N = x->dims[0], C = x->dims[1], S = (N && C) ? x->n_elems / (N * C) : 0;
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    float *sum = psim__cpu_scratch(sizeof(float) * (size_t)MAX(S, 1), error);
    if (!sum)
        return FALSE;
    float k = alpha / (float)size;
    for (int64_t n = 0; n < N; n++) {
        const float *xn = (const float *)x->data + n * C * S;
        float *yn = (float *)y->data + n * C * S;
        for (int64_t c = 0; c < C; c++) {
            memset(sum, 0, sizeof(float) * (size_t)S);
            for (int64_t j = MAX(0, c - lo); j <= MIN(C - 1, c + hi); j++) {
                const float *restrict p = xn + j * S;
                for (int64_t i = 0; i < S; i++)
                    sum[i] += p[i] * p[i];
            }
            const float *restrict p = xn + c * S;
            float *restrict q = yn + c * S;
            if (beta == 0.75f)
                /* x^-0.75 = 1 / (sqrt(x) * sqrt(sqrt(x))): much cheaper than powf. */
                for (int64_t i = 0; i < S; i++) {
                    float v = bias + k * sum[i], r = sqrtf(v);
                    q[i] = p[i] / (r * sqrtf(r));
                }
            else
                for (int64_t i = 0; i < S; i++)
                    q[i] = p[i] * powf(bias + k * sum[i], -beta);
        }
    }
    return TRUE;
}

/* (Log)Softmax in float64 (gradient checks): plain loops over [outer, A, inner]. */
static void softmax_f64(const double *src, double *dst, int64_t outer, int64_t A, int64_t inner,
                        gboolean logsm)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *s = src + o * A * inner + i;
            double *t = dst + o * A * inner + i, mx = s[0], sum = 0;
            for (int64_t a = 1; a < A; a++)
                mx = s[a * inner] > mx ? s[a * inner] : mx;
            for (int64_t a = 0; a < A; a++)
                sum += t[a * inner] = exp(s[a * inner] - mx);
            for (int64_t a = 0; a < A; a++)
                t[a * inner] = logsm ? s[a * inner] - mx - log(sum) : t[a * inner] / sum;
        }
}

/* Max and sum of n floats in eight lanes (vector registers: a scalar loop whose running value
 * goes through memory each element is latency-bound). */
PSIM_CPU_CLONES static float row_max(const float *x, int64_t n)
{
    float m = x[0];
    int64_t i = 0;
    if (n >= 8) {
        float l[8];
        for (int k = 0; k < 8; k++)
            l[k] = x[k];
        for (i = 8; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; k++)
                l[k] = x[i + k] > l[k] ? x[i + k] : l[k];
        for (int k = 0; k < 8; k++)
            m = l[k] > m ? l[k] : m;
    }
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

PSIM_CPU_CLONES static float row_sum(const float *x, int64_t n)
{
    float l[8] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            l[k] += x[i + k];
    for (; i < n; i++)
        s += x[i];
    return s + (((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7])));
}

PSIM_CPU_CLONES static void row_sub(const float *x, float c, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] - c;
}

PSIM_CPU_CLONES static void row_scale(float *y, float c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= c;
}

/* (Log)Softmax over the last axis (rows of A contiguous floats, the attention of transformers),
 * in chunks of about 16 KB: each row's max subtracted, one vectorised exp over the chunk, each
 * row's sum. The general loop of run_softmax keeps a running max and sum per inner index in
 * memory, one dependent store and load per element when inner is 1: swin_t's twelve Softmaxes
 * (rows of 49) took 21.8 ms a step that way, 1.8 ms this way. */
static void softmax_rows_f32(const float *src, float *dst, int64_t rows, int64_t A, gboolean logsm)
{
    enum { CHUNK = 4096 };
    int64_t per = MAX(1, CHUNK / A);
    float mx[CHUNK];
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = MIN(per, rows - r0);
        const float *s = src + r0 * A;
        float *d = dst + r0 * A;
        for (int64_t r = 0; r < nr; r++) {
            mx[r] = row_max(s + r * A, A);
            row_sub(s + r * A, mx[r], d + r * A, A);
        }
        psim__vmath_f32(PSIM_VMATH_EXP, d, d, nr * A);
        for (int64_t r = 0; r < nr; r++) {
            float sum = row_sum(d + r * A, A);
            if (logsm)
                row_sub(s + r * A, mx[r] + logf(sum), d + r * A, A);
            else
                row_scale(d + r * A, 1.0f / sum, A);
        }
    }
}

static gboolean run_softmax(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *x = ctx->inputs[0];
    gboolean f64 = ctx->n_inputs >= 1 && x && x->dtype == PSIM_DTYPE_FLOAT64;
    if (!f64 && !need_f32(ctx, 1, error))
        return FALSE;
    gboolean logsm = !strcmp(ctx->node->op, "LogSoftmax");
    int32_t axis;
    if (x->rank == 0) {
        KERR(ctx, error, "%s needs an input of rank >= 1", ctx->node->op);
        return FALSE;
    }
    /* Before opset 13, (Log)Softmax coerces its input to 2-D at `axis` (default 1) and
     * normalizes over all the trailing dimensions together; from 13 on, along one axis
     * (default -1). */
    int64_t opset = psim_graph_opset(ctx->graph);
    gboolean coerce = opset > 0 && opset < 13;
    if (!psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", coerce ? 1 : -1), x->rank,
                        &axis, error))
        return FALSE;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x->dims), A = x->dims[axis];
    int64_t inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    if (coerce) {
        A *= inner;
        inner = 1;
    }
    if (!outer || !A || !inner)
        return TRUE;
    if (f64) {
        softmax_f64(x->data, y->data, outer, A, inner, logsm);
        return TRUE;
    }
    if (inner == 1) {
        softmax_rows_f32(x->data, y->data, outer, A, logsm);
        return TRUE;
    }
    float *acc = psim__cpu_scratch(sizeof(float) * (size_t)inner * 2, error);
    if (!acc)
        return FALSE;
    float *mx = acc, *sm = acc + inner;
    for (int64_t o = 0; o < outer; o++) {
        const float *src = (const float *)x->data + o * A * inner;
        float *dst = (float *)y->data + o * A * inner;
        for (int64_t i = 0; i < inner; i++) {
            mx[i] = src[i];
            sm[i] = 0.0f;
        }
        for (int64_t a = 1; a < A; a++)
            for (int64_t i = 0; i < inner; i++)
                mx[i] = src[a * inner + i] > mx[i] ? src[a * inner + i] : mx[i];
        /* exp(x - max) over the whole [A, inner] block at once, through the vectorised math
         * (with inner == 1, the last-axis softmax of transformers, a per-row call would be one
         * element long); LogSoftmax overwrites it below. */
        for (int64_t a = 0; a < A; a++)
            for (int64_t i = 0; i < inner; i++)
                dst[a * inner + i] = src[a * inner + i] - mx[i];
        psim__vmath_f32(PSIM_VMATH_EXP, dst, dst, A * inner);
        for (int64_t a = 0; a < A; a++)
            for (int64_t i = 0; i < inner; i++)
                sm[i] += dst[a * inner + i];
        if (logsm) {
            for (int64_t i = 0; i < inner; i++)
                sm[i] = logf(sm[i]) + mx[i];
            for (int64_t a = 0; a < A; a++)
                for (int64_t i = 0; i < inner; i++)
                    dst[a * inner + i] = src[a * inner + i] - sm[i];
        } else {
            for (int64_t i = 0; i < inner; i++)
                sm[i] = 1.0f / sm[i];
            for (int64_t a = 0; a < A; a++)
                for (int64_t i = 0; i < inner; i++)
                    dst[a * inner + i] *= sm[i];
        }
    }
    return TRUE;
}

void psim__cpu_register_norm(void)
{
    static const PsimDType f32[] = {PSIM_DTYPE_FLOAT32, -1};
    static const PsimDType f32_f64[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("BatchNormalization", "cpu-batchnorm", "per-channel affine normalization",
                  run_batchnorm, f32_f64, NULL);
    psim__cpu_add("InstanceNormalization", "cpu-instancenorm", "per-(n, c) normalization",
                  run_instancenorm, f32, NULL);
    psim__cpu_add("LayerNormalization", "cpu-layernorm", "normalization over trailing dims",
                  run_layernorm, f32, NULL);
    psim__cpu_add("LRN", "cpu-lrn", "local response normalization across channels", run_lrn, f32,
                  NULL);
    psim__cpu_add("Softmax", "cpu-softmax", "softmax along one axis", run_softmax, f32_f64, NULL);
    psim__cpu_add("LogSoftmax", "cpu-softmax", "log-softmax along one axis", run_softmax, f32_f64,
                  NULL);
}
