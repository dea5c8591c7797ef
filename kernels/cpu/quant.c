/* Linear quantization (ONNX semantics): QuantizeLinear and DequantizeLinear (per tensor or per
 * axis), DynamicQuantizeLinear (uint8, the scale and zero point of x's range with 0 in it),
 * MatMulInteger (int32) and QLinearMatMul (requantized). Rounding is half to even (rint in the
 * default mode), saturation to the output type's range. int8 and uint8 data; float32 scales. */
#include "cpu-private.h"

#include <math.h>


/* round half to even, then saturate to dt's range, stored. */
static void qset(PsimTensor *t, int64_t i, double v)
{
    v = isnan(v) ? 0 : rint(v);
    switch (t->dtype) {
    case PSIM_DTYPE_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)CLAMP(v, 0, 255); break;
    case PSIM_DTYPE_INT8: ((int8_t *)t->data)[i] = (int8_t)CLAMP(v, -128, 127); break;
    default: ((int32_t *)t->data)[i] = (int32_t)CLAMP(v, -2147483648.0, 2147483647.0); break;
    }
}

static gboolean quant_type(PsimDType t)
{
    return t == PSIM_DTYPE_UINT8 || t == PSIM_DTYPE_INT8;
}

/* The scale (and zero point) index of element i: per tensor, or per `axis` of x. */
static int64_t param_at(const PsimTensor *x, int32_t axis, int64_t n_params, int64_t i)
{
    if (n_params <= 1)
        return 0;
    int64_t inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    return (i / inner) % x->dims[axis];
}

static gboolean q_params(PsimKernelCtx *ctx, const PsimTensor *x, const PsimTensor *scale,
                         const PsimTensor *zp, int32_t *axis, GError **error)
{
    if (scale->n_elems < 1 || (scale->dtype != PSIM_DTYPE_FLOAT32 && scale->dtype != PSIM_DTYPE_FLOAT64) ||
        (zp && !quant_type(zp->dtype) && zp->dtype != PSIM_DTYPE_INT32)) {
        KERR(ctx, error, "%s needs a float32 or float64 scale and an integer zero point", ctx->node->op);
        return FALSE;
    }
    if (scale->n_elems > 1 &&
        (x->rank == 0 || !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 1), x->rank, axis, error)))
        return FALSE;
    if (scale->n_elems > 1 && scale->n_elems != x->dims[*axis]) {
        KERR(ctx, error, "%s: %" G_GINT64_FORMAT " scales for an axis of %" G_GINT64_FORMAT, ctx->node->op,
             scale->n_elems, x->dims[*axis]);
        return FALSE;
    }
    if (zp && zp->n_elems != scale->n_elems) {
        KERR(ctx, error, "%s: the zero point and the scale differ in size", ctx->node->op);
        return FALSE;
    }
    return TRUE;
}

static gboolean run_quantize(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *scale = ctx->inputs[1], *zp = psim__cpu_in(ctx, 2);
    int32_t axis = 0;
    PsimDType dt = zp ? zp->dtype : PSIM_DTYPE_UINT8;
    if (!quant_type(dt) || !q_params(ctx, x, scale, zp, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "QuantizeLinear makes uint8 or int8");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    /* The quotient in x's precision: float32 over float32 is what ONNX rounds. */
    gboolean f32 = x->dtype == PSIM_DTYPE_FLOAT32 && scale->dtype == PSIM_DTYPE_FLOAT32;
    for (int64_t i = 0; i < x->n_elems; i++) {
        int64_t p = param_at(x, axis, scale->n_elems, i);
        double q = f32 ? (double)rintf((float)psim_tensor_get_f64(x, i) / (float)psim_tensor_get_f64(scale, p))
                       : rint(psim_tensor_get_f64(x, i) / psim_tensor_get_f64(scale, p));
        qset(y, i, q + (zp ? psim_tensor_get_f64(zp, p) : 0));
    }
    return TRUE;
}

static gboolean run_dequantize(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *scale = ctx->inputs[1], *zp = psim__cpu_in(ctx, 2);
    int32_t axis = 0;
    if ((!quant_type(x->dtype) && x->dtype != PSIM_DTYPE_INT32) ||
        !q_params(ctx, x, scale, zp, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "DequantizeLinear reads uint8, int8 or int32");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, scale->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    for (int64_t i = 0; i < x->n_elems; i++) {
        int64_t p = param_at(x, axis, scale->n_elems, i);
        double v = (psim_tensor_get_f64(x, i) - (zp ? psim_tensor_get_f64(zp, p) : 0)) * psim_tensor_get_f64(scale, p);
        if (y->dtype == PSIM_DTYPE_FLOAT64)
            ((double *)y->data)[i] = v;
        else
            ((float *)y->data)[i] = (float)v;
    }
    return TRUE;
}

static gboolean run_dynamic_quantize(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (x->dtype != PSIM_DTYPE_FLOAT32) {
        KERR(ctx, error, "DynamicQuantizeLinear reads float32");
        return FALSE;
    }
    double lo = 0, hi = 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        double v = psim_tensor_get_f64(x, i);
        lo = MIN(lo, v);
        hi = MAX(hi, v);
    }
    /* In float32, as ONNX defines it: a quotient that is a half in float32 rounds to even
     * where the same quotient in double is just below it. */
    float scale = ((float)hi - (float)lo) / 255.0f;
    float zpv = scale != 0 ? CLAMP(rintf(0.0f - (float)lo / scale), 0.0f, 255.0f) : 0.0f;
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_UINT8, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    const float *xf = x->data;
    for (int64_t i = 0; i < x->n_elems; i++)
        qset(y, i, scale != 0 ? rintf(xf[i] / scale) + zpv : zpv);
    if (psim__cpu_wants(ctx, 1)) {
        PsimTensor *s = psim__cpu_out(ctx, 1, PSIM_DTYPE_FLOAT32, 0, NULL, error);
        if (!s)
            return FALSE;
        *(float *)s->data = scale;
    }
    if (psim__cpu_wants(ctx, 2)) {
        PsimTensor *z = psim__cpu_out(ctx, 2, PSIM_DTYPE_UINT8, 0, NULL, error);
        if (!z)
            return FALSE;
        *(uint8_t *)z->data = (uint8_t)zpv;
    }
    return TRUE;
}

/* (A - azp) (B - bzp) over matrices of the last two dims, batches of equal leading dims (or B
 * 2-D), exactly in double (int8 products summed stay far below 2^53), then `finish` per
 * element: int32 for MatMulInteger, requantized for QLinearMatMul. */
static gboolean int_matmul(PsimKernelCtx *ctx, const PsimTensor *a, const PsimTensor *b, double azp,
                           double bzp, PsimDType out_dt, double rescale, double yzp, GError **error)
{
    if (a->rank < 2 || b->rank < 2 || a->dims[a->rank - 1] != b->dims[b->rank - 2] ||
        (b->rank > 2 && (b->rank != a->rank || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)(a->rank - 2))))) {
        KERR(ctx, error, "%s needs matrices (batched alike) whose inner dims agree", ctx->node->op);
        return FALSE;
    }
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
    int64_t batches = psim_shape_elems(a->rank - 2, a->dims);
    int64_t od[PSIM_CPU_MAX_RANK];
    memcpy(od, a->dims, sizeof(int64_t) * (size_t)a->rank);
    od[a->rank - 1] = N;
    PsimTensor *y = psim__cpu_out(ctx, 0, out_dt, a->rank, od, error);
    if (!y)
        return FALSE;
    for (int64_t bt = 0; bt < batches; bt++) {
        int64_t ao = bt * M * K, bo = b->rank > 2 ? bt * K * N : 0, yo = bt * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (psim_tensor_get_f64(a, ao + i * K + k) - azp) * (psim_tensor_get_f64(b, bo + k * N + j) - bzp);
                qset(y, yo + i * N + j, rescale == 1 && yzp == 0 ? s : s * rescale + yzp);
            }
    }
    return TRUE;
}

static double scalar_or_zero(const PsimTensor *t)
{
    return t && t->n_elems >= 1 ? psim_tensor_get_f64(t, 0) : 0;
}

static gboolean run_matmul_integer(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *azp = psim__cpu_in(ctx, 2), *bzp = psim__cpu_in(ctx, 3);
    if (!quant_type(ctx->inputs[0]->dtype) || !quant_type(ctx->inputs[1]->dtype)) {
        KERR(ctx, error, "MatMulInteger reads int8 or uint8");
        return FALSE;
    }
    if ((azp && azp->n_elems > 1) || (bzp && bzp->n_elems > 1)) {
        KERR(ctx, error, "MatMulInteger: per-row or per-column zero points are not supported");
        return FALSE;
    }
    return int_matmul(ctx, ctx->inputs[0], ctx->inputs[1], scalar_or_zero(azp), scalar_or_zero(bzp),
                      PSIM_DTYPE_INT32, 1, 0, error);
}

static gboolean run_qlinear_matmul(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 8, error))
        return FALSE;
    PsimTensor *const *in = ctx->inputs;
    if (!quant_type(in[0]->dtype) || !quant_type(in[3]->dtype) || !quant_type(in[2]->dtype) ||
        !quant_type(in[5]->dtype) || !quant_type(in[7]->dtype)) {
        KERR(ctx, error, "QLinearMatMul reads and writes int8 or uint8");
        return FALSE;
    }
    for (int k = 1; k < 8; k++)
        if (k != 3 && in[k]->n_elems != 1) {
            KERR(ctx, error, "QLinearMatMul: only per-tensor scales and zero points are supported");
            return FALSE;
        }
    double rescale = psim_tensor_get_f64(in[1], 0) * psim_tensor_get_f64(in[4], 0) / psim_tensor_get_f64(in[6], 0);
    return int_matmul(ctx, in[0], in[3], psim_tensor_get_f64(in[2], 0), psim_tensor_get_f64(in[5], 0), in[7]->dtype, rescale,
                      psim_tensor_get_f64(in[7], 0), error);
}

void psim__cpu_register_quant(void)
{
    psim__cpu_add("QuantizeLinear", "cpu-quantize", "linear quantization to uint8 or int8",
                  run_quantize, NULL, NULL);
    psim__cpu_add("DequantizeLinear", "cpu-quantize", "linear dequantization", run_dequantize, NULL,
                  NULL);
    psim__cpu_add("DynamicQuantizeLinear", "cpu-quantize", "uint8 quantization of x's range",
                  run_dynamic_quantize, NULL, NULL);
    psim__cpu_add("MatMulInteger", "cpu-matmul-integer", "integer MatMul with zero points, int32",
                  run_matmul_integer, NULL, NULL);
    psim__cpu_add("QLinearMatMul", "cpu-matmul-integer", "quantized MatMul", run_qlinear_matmul,
                  NULL, NULL);
}
