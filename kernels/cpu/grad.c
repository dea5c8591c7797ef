/* Kernels of gradient ops, ONNX Runtime's com.microsoft training ops where a fused kernel does
 * in one or two passes what the gradient would otherwise spell out in a dozen elementwise ops:
 * ReluGrad (dY, X) -> dY where X > 0, MaxPoolGrad (dY, Indices, X) -> dY added at the Indices
 * (X only for dX's shape), and BatchNormalizationGrad (dY, X, scale[, mean,
 * variance]) -> (dX, dScale, dBias) in training mode, over the batch's statistics (computed from
 * X when mean and variance are not given). float32 and float64; ConvGrad is in conv.c. */
#include <math.h>

#include "cpu-private.h"

static gboolean run_relu_grad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *dy = ctx->inputs[0], *x = ctx->inputs[1];
    if (!psim__cpu_same_shape(dy, x) ||
        (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64)) {
        KERR(ctx, error, "ReluGrad takes dY and X of one float dtype and shape");
        return FALSE;
    }
    PsimTensor *dx = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!dx)
        return FALSE;
    int64_t n = x->n_elems; /* hoisted: the stores could alias the tensor structs otherwise */
    if (x->dtype == PSIM_DTYPE_FLOAT32) {
        const float *restrict g = dy->data, *restrict xv = x->data;
        float *restrict o = dx->data;
        for (int64_t i = 0; i < n; i++) {
            float gv = g[i]; /* loaded either way: a select, not a branch on the data */
            o[i] = xv[i] > 0.0f ? gv : 0.0f;
        }
    } else {
        const double *restrict g = dy->data, *restrict xv = x->data;
        double *restrict o = dx->data;
        for (int64_t i = 0; i < n; i++) {
            double gv = g[i];
            o[i] = xv[i] > 0.0 ? gv : 0.0;
        }
    }
    return TRUE;
}

/* One channel: dbias = sum dY, dscale = sum dY xhat, dX = scale inv / m (m dY - dbias - xhat
 * dscale), over the n blocks of len elements `stride` apart. */
static void bn_grad_channel(const double *dy, const double *x, double *dx, int64_t base,
                            int64_t n, int64_t len, int64_t stride, double scale, double eps,
                            const double *given, double *dscale, double *dbias)
{
    double m = (double)(n * len), mean = 0, var = 0;
    if (given) {
        mean = given[0];
        var = given[1];
    } else {
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < len; i++)
                mean += x[base + b * stride + i];
        mean /= m;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < len; i++) {
                double c = x[base + b * stride + i] - mean;
                var += c * c;
            }
        var /= m;
    }
    double inv = 1.0 / sqrt(var + eps), sg = 0, sgx = 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < len; i++) {
            int64_t at = base + b * stride + i;
            double g = dy[at];
            sg += g;
            sgx += g * (x[at] - mean) * inv;
        }
    *dbias = sg;
    *dscale = sgx;
    if (!dx)
        return;
    double k = scale * inv / m;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < len; i++) {
            int64_t at = base + b * stride + i;
            double xhat = (x[at] - mean) * inv;
            dx[at] = k * (m * dy[at] - sg - xhat * sgx);
        }
}

/* The float32 channel: the same in float arithmetic over rows, each row's sums in 8 lanes (so
 * that the compiler vectorises them) added into doubles. */
static void bn_grad_channel_f32(const float *dy, const float *x, float *dx, int64_t base,
                                int64_t n, int64_t len, int64_t stride, double scale, double eps,
                                const double *given, double *dscale, double *dbias)
{
    double m = (double)(n * len), mean = 0, var = 0;
    enum { L = 8 };
    if (given) {
        mean = given[0];
        var = given[1];
    } else {
        for (int64_t b = 0; b < n; b++)
            mean += psim__cpu_sum_f32(x + base + b * stride, len);
        mean /= m;
        for (int64_t b = 0; b < n; b++)
            var += psim__cpu_sum_sq_dev_f32(x + base + b * stride, len, (float)mean);
        var /= m;
    }
    const float mf = (float)mean, inv = (float)(1.0 / sqrt(var + eps));
    double sg = 0, sgx = 0;
    for (int64_t b = 0; b < n; b++) {
        const float *restrict xr = x + base + b * stride, *restrict gr = dy + base + b * stride;
        float a1[L] = {0}, a2[L] = {0};
        int64_t i = 0;
        for (; i + L <= len; i += L)
            for (int k = 0; k < L; k++) {
                a1[k] += gr[i + k];
                a2[k] += gr[i + k] * ((xr[i + k] - mf) * inv);
            }
        for (; i < len; i++) {
            a1[0] += gr[i];
            a2[0] += gr[i] * ((xr[i] - mf) * inv);
        }
        for (int k = 0; k < L; k++) {
            sg += a1[k];
            sgx += a2[k];
        }
    }
    *dbias = sg;
    *dscale = sgx;
    if (!dx)
        return;
    const float k1 = (float)(scale * inv), k2 = (float)(scale * inv * sg / m),
                k3 = (float)(scale * inv * sgx / m);
    for (int64_t b = 0; b < n; b++) {
        const float *restrict xr = x + base + b * stride, *restrict gr = dy + base + b * stride;
        float *restrict o = dx + base + b * stride;
        for (int64_t i = 0; i < len; i++)
            o[i] = k1 * gr[i] - k2 - k3 * ((xr[i] - mf) * inv);
    }
}

static gboolean run_bn_grad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *dy = ctx->inputs[0], *x = ctx->inputs[1], *sc = ctx->inputs[2];
    PsimTensor *mean = psim__cpu_in(ctx, 3), *var = psim__cpu_in(ctx, 4);
    PsimDType dt = x->dtype;
    if (!psim__cpu_same_shape(dy, x) || x->rank < 2 ||
        (dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64) || sc->dtype != dt ||
        sc->n_elems != x->dims[1] || (mean && mean->n_elems != x->dims[1]) ||
        (var && var->n_elems != x->dims[1]) || (!mean) != (!var)) {
        KERR(ctx, error, "BatchNormalizationGrad takes dY and X [N, C, ...] of one float dtype, a "
                         "scale of C and optionally the batch's mean and variance of C");
        return FALSE;
    }
    int64_t N = x->dims[0], C = x->dims[1], len = N && C ? x->n_elems / (N * C) : 0;
    double eps = psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    gboolean f64 = dt == PSIM_DTYPE_FLOAT64;
    PsimTensor *dx = psim__cpu_out_all(ctx, 0, dt, x->rank, x->dims, error);
    PsimTensor *ds = dx && ctx->n_outputs > 1 ? psim__cpu_out(ctx, 1, dt, 1, &C, error) : NULL;
    PsimTensor *db = dx && ctx->n_outputs > 2 ? psim__cpu_out(ctx, 2, dt, 1, &C, error) : NULL;
    if (!dx || (ctx->n_outputs > 1 && !ds) || (ctx->n_outputs > 2 && !db))
        return FALSE;
    for (int64_t c = 0; c < C; c++) {
        double given[2], s, b;
        if (mean) {
            given[0] = psim_tensor_get_f64(mean, c);
            given[1] = psim_tensor_get_f64(var, c);
        }
        if (f64)
            bn_grad_channel(dy->data, x->data, dx->data, c * len, N, len, C * len,
                            psim_tensor_get_f64(sc, c), eps, mean ? given : NULL, &s, &b);
        else
            bn_grad_channel_f32(dy->data, x->data, dx->data, c * len, N, len, C * len,
                                psim_tensor_get_f64(sc, c), eps, mean ? given : NULL, &s, &b);
        if (ds)
            psim_tensor_set_f64(ds, c, s);
        if (db)
            psim_tensor_set_f64(db, c, b);
    }
    return TRUE;
}

/* MaxPoolGrad (dY, Indices, X): dX of X's shape, zeros, with each dY added at its index. */
static gboolean run_maxpool_grad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *dy = ctx->inputs[0], *ix = ctx->inputs[1], *x = ctx->inputs[2];
    if (ix->dtype != PSIM_DTYPE_INT64 || ix->n_elems != dy->n_elems || dy->dtype != x->dtype ||
        (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64)) {
        KERR(ctx, error, "MaxPoolGrad takes dY, its int64 Indices and X of dY's float dtype");
        return FALSE;
    }
    /* zeroed here, once (the allocator's zeroing would be a second pass) */
    PsimTensor *dx = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!dx)
        return FALSE;
    memset(dx->data, 0, dx->nbytes);
    const int64_t *id = ix->data;
    int64_t n = dy->n_elems, lim = x->n_elems;
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= lim) {
            KERR(ctx, error, "index %" G_GINT64_FORMAT " is outside X", id[i]);
            return FALSE;
        }
    if (x->dtype == PSIM_DTYPE_FLOAT32) {
        const float *g = dy->data;
        float *o = dx->data;
        for (int64_t i = 0; i < n; i++)
            o[id[i]] += g[i];
    } else {
        const double *g = dy->data;
        double *o = dx->data;
        for (int64_t i = 0; i < n; i++)
            o[id[i]] += g[i];
    }
    return TRUE;
}

void psim__cpu_register_grad(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("ReluGrad", "cpu-relu-grad", "dY where X > 0", run_relu_grad, types, NULL);
    psim__cpu_add("MaxPoolGrad", "cpu-maxpool-grad", "dY added at the pooling's Indices",
                  run_maxpool_grad, types, NULL);
    psim__cpu_add("BatchNormalizationGrad", "cpu-batchnorm-grad",
                  "BatchNormalization's dX, dScale, dBias over the batch's statistics",
                  run_bn_grad, types, NULL);
}
