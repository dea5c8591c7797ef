/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ONNX semantics), float32 or float64:
 * input (N, C) or (N, C, d1, ...), target (N) or (N, d1, ...) of class indices (int32/int64),
 * optional weight per class; ignore_index drops a target (no loss, no weight); reduction none
 * (a loss per target), sum, or mean (the sum over the summed weights of the targets kept).
 * SoftmaxCrossEntropyLoss takes the log-softmax of the scores along C first and may output it. */
#include "cpu-private.h"

#include <math.h>


/* NLL of log-probabilities lp (N, C, inner...) against target (N, inner...): output 0. */
static gboolean nll(PsimKernelCtx *ctx, const PsimTensor *lp, const PsimTensor *target,
                    const PsimTensor *weight, GError **error)
{
    if (lp->rank < 2 || target->rank != lp->rank - 1 || target->dims[0] != lp->dims[0] ||
        (target->dtype != PSIM_DTYPE_INT64 && target->dtype != PSIM_DTYPE_INT32)) {
        KERR(ctx, error, "%s needs input (N, C, ...) and an integer target (N, ...)", ctx->node->op);
        return FALSE;
    }
    for (int32_t d = 2; d < lp->rank; d++)
        if (target->dims[d - 1] != lp->dims[d]) {
            KERR(ctx, error, "%s: target dim %d is %" G_GINT64_FORMAT ", input's is %" G_GINT64_FORMAT,
                 ctx->node->op, d - 1, target->dims[d - 1], lp->dims[d]);
            return FALSE;
        }
    int64_t N = lp->dims[0], C = lp->dims[1], inner = psim_shape_elems(lp->rank - 2, lp->dims + 2);
    if (weight && (weight->rank != 1 || weight->dims[0] != C || weight->dtype != lp->dtype)) {
        KERR(ctx, error, "%s: weight must be a vector of %" G_GINT64_FORMAT " of the input's dtype",
             ctx->node->op, C);
        return FALSE;
    }
    const char *red = psim_node_attr_string(ctx->node, "reduction", "mean");
    const PsimAttr *ia = psim_node_attr(ctx->node, "ignore_index");
    gboolean has_ignore = ia != NULL;
    int64_t ignore = psim_node_attr_int(ctx->node, "ignore_index", 0);
    gboolean none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
    PsimTensor *y = none ? psim__cpu_out(ctx, 0, lp->dtype, target->rank, target->dims, error)
                         : psim__cpu_out(ctx, 0, lp->dtype, 0, NULL, error);
    if (!y)
        return FALSE;
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t t_at = n * inner + i;
            int64_t c = target->dtype == PSIM_DTYPE_INT32 ? ((const int32_t *)target->data)[t_at]
                                                          : ((const int64_t *)target->data)[t_at];
            double loss = 0, w = 0;
            if (!(has_ignore && c == ignore)) {
                if (c < 0 || c >= C) {
                    KERR(ctx, error, "%s: target %" G_GINT64_FORMAT " is not a class of %" G_GINT64_FORMAT,
                         ctx->node->op, c, C);
                    return FALSE;
                }
                w = weight ? psim_tensor_get_f64(weight, c) : 1.0;
                loss = -psim_tensor_get_f64(lp, (n * C + c) * inner + i) * w;
            }
            if (none)
                psim_tensor_set_f64(y, t_at, loss);
            sum += loss;
            wsum += w;
        }
    if (!none)
        psim_tensor_set_f64(y, 0, mean ? sum / wsum : sum);
    return TRUE;
}

static gboolean float_input(PsimKernelCtx *ctx, const PsimTensor *x, GError **error)
{
    if (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) {
        KERR(ctx, error, "%s has no CPU kernel for %s", ctx->node->op, psim_dtype_name(x->dtype));
        return FALSE;
    }
    return TRUE;
}

static gboolean run_nll(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error) || !float_input(ctx, ctx->inputs[0], error))
        return FALSE;
    return nll(ctx, ctx->inputs[0], ctx->inputs[1], psim__cpu_in(ctx, 2), error);
}

static gboolean run_sce(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error) || !float_input(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (x->rank < 2) {
        KERR(ctx, error, "SoftmaxCrossEntropyLoss needs scores (N, C, ...)");
        return FALSE;
    }
    /* log_softmax along C: x - max - log(sum(exp(x - max))). */
    g_autoptr(PsimTensor) lp = psim_tensor_new(x->dtype, x->rank, x->dims, error);
    if (!lp)
        return FALSE;
    int64_t N = x->dims[0], C = x->dims[1], inner = psim_shape_elems(x->rank - 2, x->dims + 2);
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++)
                m = fmax(m, psim_tensor_get_f64(x, (n * C + c) * inner + i));
            for (int64_t c = 0; c < C; c++)
                s += exp(psim_tensor_get_f64(x, (n * C + c) * inner + i) - m);
            double ls = log(s);
            for (int64_t c = 0; c < C; c++) {
                int64_t at = (n * C + c) * inner + i;
                psim_tensor_set_f64(lp, at, psim_tensor_get_f64(x, at) - m - ls);
            }
        }
    if (!nll(ctx, lp, ctx->inputs[1], psim__cpu_in(ctx, 2), error))
        return FALSE;
    if (psim__cpu_wants(ctx, 1)) {
        PsimTensor *out = psim__cpu_out(ctx, 1, x->dtype, x->rank, x->dims, error);
        if (!out)
            return FALSE;
        memcpy(out->data, lp->data, lp->nbytes);
    }
    return TRUE;
}

void psim__cpu_register_loss(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("NegativeLogLikelihoodLoss", "cpu-nll", "negative log-likelihood, weighted, reduced",
                  run_nll, types, NULL);
    psim__cpu_add("SoftmaxCrossEntropyLoss", "cpu-softmax-ce",
                  "cross entropy of the log-softmax of the scores", run_sce, types, NULL);
}
