/* Ops of training: ONNX's ai.onnx.preview.training optimizers (Momentum, Adam, Adagrad), which
 * map (R, T, X..., G..., state...) to (X_new..., state_new...), ONNX Runtime's ConvGrad
 * (com.microsoft: a convolution's three gradients in one node), TensorFlow's queues (FIFO and
 * random-shuffle, enqueue, dequeue, close, size), and placesim's checkpoint ops
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

/* Queues (TensorFlow's V2 ops): the queue node outputs a handle (a string scalar); dequeues take
 * their dtypes from component_types and their shapes from the queue's `shapes` when known. */
static gboolean infer_handle(PsimGraph *g, PsimNode *n, GError **error)
{
    return n->n_outputs < 1 || psim__out_set(g, n, 0, PSIM_DTYPE_STRING, 0, NULL, error);
}

static int32_t components_n_outputs(const PsimNode *n)
{
    const PsimAttr *a = psim_node_attr(n, "component_types");
    return a && a->type == PSIM_ATTR_DTYPES && a->n > 0 ? a->n : 1;
}

static gboolean infer_dequeue(PsimGraph *g, PsimNode *n, GError **error)
{
    const PsimAttr *types = psim_node_attr(n, "component_types");
    const PsimNode *q = n->n_inputs > 0 && n->inputs[0].node >= 0
                            ? psim_graph_node(g, n->inputs[0].node) : NULL;
    const PsimAttr *shapes = q ? psim_node_attr(q, "shapes") : NULL;
    gboolean many = !strcmp(n->op, "QueueDequeueManyV2");
    int64_t count = -1;
    if (many) {
        int64_t v[1];
        if (psim__input_ints(g, n, 1, v, 1, "n", NULL) == 1)
            count = v[0];
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        PsimDType dt = types && types->type == PSIM_ATTR_DTYPES && k < types->n ? types->v.dts[k]
                                                                                : PSIM_DTYPE_UNDEFINED;
        if (shapes && shapes->type == PSIM_ATTR_SHAPES && k < shapes->n &&
            shapes->v.shapes[k].rank >= 0 && shapes->v.shapes[k].rank < PSIM__MAX_RANK &&
            (!many || count > 0)) {
            int64_t dims[PSIM__MAX_RANK];
            int32_t r = shapes->v.shapes[k].rank;
            memcpy(dims + (many ? 1 : 0), shapes->v.shapes[k].dims, sizeof(int64_t) * (size_t)r);
            if (many)
                dims[0] = count;
            if (!psim__out_set(g, n, k, dt, r + (many ? 1 : 0), dims, error))
                return FALSE;
        } else if (dt != PSIM_DTYPE_UNDEFINED && n->outputs[k].dtype == PSIM_DTYPE_UNDEFINED) {
            n->outputs[k].dtype = dt;
        }
    }
    return TRUE;
}

static gboolean infer_queue_size(PsimGraph *g, PsimNode *n, GError **error)
{
    return psim__out_set(g, n, 0, PSIM_DTYPE_INT32, 0, NULL, error);
}

/* ReluGrad (dY, X) -> dX; BatchNormalizationGrad (dY, X, scale[, mean, var]) -> (dX, dScale,
 * dBias). */
static gboolean infer_like_x(PsimGraph *g, PsimNode *n, GError **error)
{
    const PsimOutput *x = psim__input(g, n, 1), *sc = psim__input(g, n, 2);
    if (n->n_outputs > 0 && x && !psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error))
        return FALSE;
    for (int32_t k = 1; k < n->n_outputs && k < 3; k++)
        if (sc && !psim__out_set(g, n, k, sc->dtype, sc->rank, sc->dims, error))
            return FALSE;
    return TRUE;
}

/* Output 0 shaped like input 2 (MaxPoolGrad's X). */
static gboolean infer_like_last(PsimGraph *g, PsimNode *n, GError **error)
{
    const PsimOutput *x = psim__input(g, n, 2);
    return !x || n->n_outputs < 1 || psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error);
}

static void count_bn_grad(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    psim__count_io(g, n, out);
    out->flops += 10.0 * (double)psim__in_elems(g, n, 1);
}

static void count_relu_grad(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    psim__count_io(g, n, out);
    out->flops += (double)psim__in_elems(g, n, 1);
}

static int32_t three_outputs(const PsimNode *n)
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
     infer_conv_grad, count_conv_grad, three_outputs, 0, "com.microsoft"},
    {"ReluGrad", "Relu's gradient (ONNX Runtime): (dY, X) -> dY where X > 0", 0, infer_like_x,
     count_relu_grad, NULL, 0, "com.microsoft"},
    {"MaxPoolGrad", "MaxPool's gradient (ONNX Runtime; X for dX's shape): (dY, Indices, X) -> dX",
     0, infer_like_last, count_relu_grad, NULL, 0, "com.microsoft"},
    {"BatchNormalizationGrad",
     "BatchNormalization's gradients in training mode (ONNX Runtime): (dY, X, scale[, mean, "
     "variance]) -> (dX, dScale, dBias)",
     0, infer_like_x, count_bn_grad, three_outputs, 0, "com.microsoft"},
    {"FIFOQueueV2", "a first-in first-out queue (output: its handle)", PSIM_OP_STATEFUL,
     infer_handle, psim__count_move},
    {"RandomShuffleQueueV2", "a queue dequeuing in a seeded random order (output: its handle)",
     PSIM_OP_STATEFUL, infer_handle, psim__count_move},
    {"QueueEnqueueV2", "adds one element (handle, components...), blocking while full",
     PSIM_OP_STATEFUL, psim__infer_keep, psim__count_io, NULL, -1},
    {"QueueEnqueueManyV2", "adds each row of the components as an element", PSIM_OP_STATEFUL,
     psim__infer_keep, psim__count_io, NULL, -1},
    {"QueueDequeueV2", "takes one element, blocking while empty", PSIM_OP_STATEFUL,
     infer_dequeue, psim__count_io, components_n_outputs},
    {"QueueDequeueManyV2", "takes n elements (input 1), batched along a new first dim",
     PSIM_OP_STATEFUL, infer_dequeue, psim__count_io, components_n_outputs},
    {"QueueCloseV2", "closes a queue", PSIM_OP_STATEFUL, psim__infer_keep, psim__count_move, NULL, -1},
    {"QueueSizeV2", "the number of elements in a queue", PSIM_OP_STATEFUL, infer_queue_size,
     psim__count_move},
    {"Save", "writes tensors to a checkpoint file (input 0: its name)", PSIM_OP_STATEFUL,
     psim__infer_keep, psim__count_io, NULL, -1},
    {"Restore", "reads tensors of a checkpoint file (input 0: its name)", PSIM_OP_STATEFUL,
     infer_restore, psim__count_io, restore_n_outputs},
};

void psim__ops_register_train(void)
{
    psim__ops_register_group(train_ops, G_N_ELEMENTS(train_ops));
}
