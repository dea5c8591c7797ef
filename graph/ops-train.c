/* Ops of training: ONNX's ai.onnx.preview.training optimizers (Momentum, Adam, Adagrad), which
 * map (R, T, X..., G..., state...) to (X_new..., state_new...), ONNX Runtime's ConvGrad
 * (com.microsoft: a convolution's three gradients in one node), and placesim's checkpoint ops
 * Save (file name, tensors...) and Restore (file name -> tensors). Variables and Assign are in
 * ops-math.c with TensorFlow's other state ops. */
#include <string.h>

#include "ops-private.h"

/* Tensors per optimized X among the inputs after R and T. */
static int32_t opt_groups(const PsimNode *n) { return !strcmp(n->op, "Adam") ? 4 : 3; }

static int32_t opt_n_outputs(const PsimNode *n)
{
    int32_t g = opt_groups(n);
    return n->n_inputs >= 2 + g ? (g - 1) * ((n->n_inputs - 2) / g) : 1;
}

static gboolean infer_optimizer(PsimGraph *g, PsimNode *n, GError **error)
{
    int32_t groups = opt_groups(n), m = (n->n_inputs - 2) / groups;
    if (n->n_inputs < 2 + groups || (n->n_inputs - 2) % groups) {
        psim__error_node(error, g, n, "needs R, T and %d tensors per optimized tensor (has %d "
                                      "inputs)",
                         groups, n->n_inputs);
        return FALSE;
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        const PsimOutput *x = psim__input(g, n, 2 + k % m);
        if (x && !psim__out_set(g, n, k, x->dtype, x->rank, x->dims, error))
            return FALSE;
    }
    return TRUE;
}

static void count_optimizer(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    psim__count_io(g, n, out);
    int32_t groups = opt_groups(n), m = (n->n_inputs - 2) / groups;
    for (int32_t k = 0; k < m; k++)
        out->flops += 8.0 * (double)psim__in_elems(g, n, 2 + k);
}

static int32_t restore_n_outputs(const PsimNode *n)
{
    const PsimAttr *a = psim_node_attr(n, "tensor_names");
    return a && a->type == PSIM_ATTR_STRINGS && a->n > 0 ? a->n : 1;
}

static gboolean infer_restore(PsimGraph *g, PsimNode *n, GError **error)
{
    (void)g;
    (void)error;
    const PsimAttr *a = psim_node_attr(n, "dtypes");
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (a && a->type == PSIM_ATTR_DTYPES && k < a->n && n->outputs[k].rank < 0)
            n->outputs[k].dtype = a->v.dts[k];
    return TRUE;
}

static gboolean infer_none(PsimGraph *g, PsimNode *n, GError **error)
{
    (void)g;
    (void)n;
    (void)error;
    return TRUE;
}

/* ConvGrad (dY, X, W) -> (dX, dW, dB), each only when attribute grads (bits 1, 2, 4) asks. */
static gboolean infer_conv_grad(PsimGraph *g, PsimNode *n, GError **error)
{
    const PsimOutput *x = psim__input(g, n, 1), *w = psim__input(g, n, 2);
    if (n->n_outputs > 0 && x && !psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error))
        return FALSE;
    if (n->n_outputs > 1 && w && !psim__out_set(g, n, 1, w->dtype, w->rank, w->dims, error))
        return FALSE;
    if (n->n_outputs > 2 && w && w->rank > 0 &&
        !psim__out_set(g, n, 2, w->dtype, 1, w->dims, error))
        return FALSE;
    return TRUE;
}

static void count_conv_grad(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    psim__count_io(g, n, out);
    /* Each of dX and dW costs what the convolution does: 2 flops per dY element, input
     * channel of its group and kernel tap. */
    const PsimOutput *w = psim__input(g, n, 2);
    int64_t dy = psim__in_elems(g, n, 0), want = psim_node_attr_int(n, "grads", 7);
    if (!w || w->rank != 4 || dy <= 0)
        return;
    double per = 2.0 * (double)dy * (double)(w->dims[1] * w->dims[2] * w->dims[3]);
    out->flops += per * ((want & 1 ? 1 : 0) + (want & 2 ? 1 : 0)) + (double)dy;
}

static int32_t conv_grad_n_outputs(const PsimNode *n)
{
    (void)n;
    return 3;
}

#define TRAINING "ai.onnx.preview.training"

static const PsimOpDef train_ops[] = {
    {"Momentum", "SGD with momentum: (R, T, X..., G..., V...) -> (X_new..., V_new...)", 0,
     infer_optimizer, count_optimizer, opt_n_outputs, 0, TRAINING},
    {"Adam", "Adam: (R, T, X..., G..., V..., H...) -> (X_new..., V_new..., H_new...)", 0,
     infer_optimizer, count_optimizer, opt_n_outputs, 0, TRAINING},
    {"Adagrad", "Adagrad: (R, T, X..., G..., H...) -> (X_new..., H_new...)", 0, infer_optimizer,
     count_optimizer, opt_n_outputs, 0, TRAINING},
    {"ConvGrad", "Conv's gradients (ONNX Runtime): (dY, X, W) -> (dX, dW, dB)", 0,
     infer_conv_grad, count_conv_grad, conv_grad_n_outputs, 0, "com.microsoft"},
    {"Save", "writes tensors to a checkpoint file (input 0: its name)", PSIM_OP_STATEFUL,
     infer_none, psim__count_io, NULL, -1},
    {"Restore", "reads tensors of a checkpoint file (input 0: its name)", PSIM_OP_STATEFUL,
     infer_restore, psim__count_io, restore_n_outputs},
};

void psim__ops_register_train(void)
{
    psim__ops_register_group(train_ops, G_N_ELEMENTS(train_ops));
}
