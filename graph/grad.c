/* Reverse-mode gradients (the TF whitepaper, section 4.1): the gradient subgraph of a scalar loss
 * with respect to chosen tensors, added to a copy of the graph. Walking the nodes between those
 * tensors and the loss backwards, each node's gradient function adds the nodes that turn the
 * gradients of its outputs into gradients of its inputs; gradients reaching one tensor along
 * several paths are summed. Every gradient is built of ordinary ONNX ops, or of ONNX Runtime's
 * fused training ops where those save many passes (ConvGrad, BatchNormalizationGrad, ReluGrad,
 * MaxPoolGrad),
 * so the placer, the simulator and the executor run a training graph as they run any other. An LSTM or GRU cell written in these ops (MatMul, Split or Slice, Sigmoid,
 * Tanh, Mul, Add, Sub) is covered; the fused ONNX LSTM and GRU nodes are not.
 *
 * Covered: MatMul (2-D), Gemm, Add, Sub, Mul, Div (broadcasting), Neg, Relu, Sigmoid, Tanh, Exp,
 * Log, Sqrt, Identity, Reshape, Flatten, Transpose, Softmax (last axis), ReduceSum, ReduceMean,
 * SoftmaxCrossEntropyLoss (mean or sum, no weights), Conv (2-D, explicit pads, grouped too),
 * MaxPool, AveragePool (2-D, floor mode), GlobalAveragePool, Concat, Split, Slice (unit steps),
 * Clip (by its input), BatchNormalization (training mode or not).
 * Shapes must be known. */
#include "graph-private.h"
#include "ops-private.h"

#include <string.h>

/* Ranks handled by the gradient functions (as the CPU kernels). */
enum { GRAD_MAX_RANK = 64 };

typedef struct {
    PsimGraph *g;
    int32_t n_fwd;    /* nodes of the graph differentiated (ids kept in the copy) */
    int32_t *out_off; /* per forward node: its first output slot */
    PsimPort *grad;   /* per output slot: the gradient so far ({-1, 0}: none) */
    GError **error;
    gboolean ok;
    const char *at;   /* the node whose gradient is being built, for names */
    int n_made;
} Grad;

static PsimPort none(void) { return (PsimPort){-1, 0}; }

static const PsimOutput *out_of(const Grad *d, PsimPort p)
{
    return &psim_graph_node(d->g, p.node)->outputs[p.index];
}

/* A new one-output node "grad/AT/OP_K" of op with the given inputs. */
static PsimNode *mk(Grad *d, const char *op, int n_in, const PsimPort *in)
{
    if (!d->ok)
        return NULL;
    g_autofree char *base = g_strdup_printf("grad/%s/%s_%d", d->at, op, d->n_made++);
    PsimNode *v = psim_graph_node_add_unique(d->g, base, op, d->error);
    if (!v) {
        d->ok = FALSE;
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        psim_graph_node_input_add(d->g, v, in[i]);
    psim_graph_node_outputs_set(d->g, v, 1);
    return v;
}

static PsimPort port(PsimNode *v) { return v ? (PsimPort){v->id, 0} : none(); }

static PsimPort op1(Grad *d, const char *op, PsimPort a)
{
    return port(mk(d, op, 1, &a));
}

static PsimPort op2(Grad *d, const char *op, PsimPort a, PsimPort b)
{
    PsimPort in[2] = {a, b};
    return port(mk(d, op, 2, in));
}

/* A constant node holding t (taken). */
static PsimPort constant(Grad *d, PsimTensor *t)
{
    PsimNode *v = t ? mk(d, "Const", 0, NULL) : NULL;
    if (v) {
        psim_graph_node_attr_set_tensor(d->g, v, "value", t);
        psim_graph_output_value_set(d->g, v, 0, t);
        v->flags |= PSIM_NODE_CONSTANT;
    } else if (!t) {
        d->ok = FALSE;
    }
    if (t)
        psim_tensor_unref(t);
    return port(v);
}

/* A scalar of dtype dt. */
static PsimPort scalar(Grad *d, PsimDType dt, double x)
{
    PsimTensor *t = psim_tensor_new(dt, 0, NULL, d->error);
    if (t)
        psim_tensor_set_f64(t, 0, x);
    return constant(d, t);
}

/* A 1-D int64 constant (shapes for Reshape). */
static PsimPort ints(Grad *d, int32_t n, const int64_t *v)
{
    int64_t dim = n;
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, &dim, d->error);
    if (t && n)
        memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return constant(d, t);
}

/* p reshaped to the shape of o. */
static PsimPort reshape_as(Grad *d, PsimPort p, const PsimOutput *o)
{
    return op2(d, "Reshape", p, ints(d, o->rank, o->dims));
}

/* op (ReduceSum, ReduceMean) of v over axes, keepdims keep. */
static PsimPort reduce(Grad *d, const char *op, PsimPort v, int32_t na, const int64_t *axes, int keep)
{
    PsimNode *r = mk(d, op, 1, &v);
    if (r) {
        psim_graph_node_attr_set_ints(d->g, r, "axes", na, axes);
        psim_graph_node_attr_set_int(d->g, r, "keepdims", keep);
    }
    return port(r);
}

/* The gradient dy of a tensor of shape `from`, summed over the axes along which a tensor of
 * shape `to` was broadcast to it (NumPy rules), and shaped as `to`. */
static PsimPort unbroadcast(Grad *d, PsimPort dy, const PsimOutput *from, const PsimOutput *to)
{
    if (from->rank == to->rank &&
        (!from->rank || !memcmp(from->dims, to->dims, sizeof(int64_t) * (size_t)to->rank)))
        return dy;
    int64_t axes[GRAD_MAX_RANK];
    int32_t na = 0;
    for (int32_t i = 0; i < from->rank; i++) {
        int32_t j = i - (from->rank - to->rank);
        if (j < 0 || (to->dims[j] == 1 && from->dims[i] != 1))
            axes[na++] = i;
    }
    return reshape_as(d, na ? reduce(d, "ReduceSum", dy, na, axes, 1) : dy, to);
}

static void accumulate(Grad *d, PsimPort y, PsimPort dy)
{
    if (!d->ok || dy.node < 0)
        return;
    PsimPort *g = &d->grad[d->out_off[y.node] + y.index];
    *g = g->node < 0 ? dy : op2(d, "Add", *g, dy);
}

static gboolean fail(Grad *d, const PsimNode *n, const char *why)
{
    if (d->ok)
        psim__error_node(d->error, d->g, n, "no gradient: %s", why);
    d->ok = FALSE;
    return FALSE;
}

static gboolean known_shape(const PsimOutput *o)
{
    if (o->rank < 0)
        return FALSE;
    for (int32_t i = 0; i < o->rank; i++)
        if (o->dims[i] < 0)
            return FALSE;
    return TRUE;
}

/* Gemm: Y = alpha op(A) op(B) + beta C, op transposing when transA / transB. */
static void grad_gemm(Grad *d, const PsimNode *n, PsimPort dy, const guint8 *need)
{
    gboolean ta = psim_node_attr_int(n, "transA", 0) != 0, tb = psim_node_attr_int(n, "transB", 0) != 0;
    double alpha = psim_node_attr_float(n, "alpha", 1.0), beta = psim_node_attr_float(n, "beta", 1.0);
    PsimPort a = n->inputs[0], b = n->inputs[1];
    if (need[0]) {
        /* d op(A) = alpha dY op(B)^T; dA is that, or its transpose when transA. */
        PsimNode *v = ta ? mk(d, "Gemm", 2, (PsimPort[]){b, dy}) : mk(d, "Gemm", 2, (PsimPort[]){dy, b});
        if (v) {
            psim_graph_node_attr_set_float(d->g, v, "alpha", alpha);
            psim_graph_node_attr_set_int(d->g, v, "transA", ta ? tb : 0);
            psim_graph_node_attr_set_int(d->g, v, "transB", ta ? 1 : !tb);
        }
        accumulate(d, a, port(v));
    }
    if (need[1]) {
        /* d op(B) = alpha op(A)^T dY; dB is that, or its transpose when transB. */
        PsimNode *v = tb ? mk(d, "Gemm", 2, (PsimPort[]){dy, a}) : mk(d, "Gemm", 2, (PsimPort[]){a, dy});
        if (v) {
            psim_graph_node_attr_set_float(d->g, v, "alpha", alpha);
            psim_graph_node_attr_set_int(d->g, v, "transA", tb ? 1 : !ta);
            psim_graph_node_attr_set_int(d->g, v, "transB", tb ? ta : 0);
        }
        accumulate(d, b, port(v));
    }
    if (n->n_inputs > 2 && need[2] && n->inputs[2].node >= 0) {
        PsimPort dc = beta == 1.0 ? dy : op2(d, "Mul", dy, scalar(d, n->outputs[0].dtype, beta));
        accumulate(d, n->inputs[2], unbroadcast(d, dc, &psim_graph_node(d->g, n->id)->outputs[0],
                                                out_of(d, n->inputs[2])));
    }
}

/* A node's int list attribute for each of nsp spatial axes (pads: 2 nsp), or dflt. */
static void spatial(const PsimNode *n, const char *name, int32_t count, int64_t dflt, int64_t *out)
{
    const int64_t *v = NULL;
    int32_t k = psim_node_attr_ints(n, name, &v);
    for (int32_t i = 0; i < count; i++)
        out[i] = k == count ? v[i] : dflt;
}

static PsimNode *with_ints(Grad *d, PsimNode *v, const char *name, int32_t n, const int64_t *x)
{
    if (v)
        psim_graph_node_attr_set_ints(d->g, v, name, n, x);
    return v;
}

/* Conv (2-D, explicit pads, any group): one ConvGrad node (ONNX Runtime's com.microsoft op)
 * gives dX, dW and dB, each only where the gradient needs it (attribute grads). */
static gboolean grad_conv(Grad *d, const PsimNode *n, PsimPort dy, const guint8 *need)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]);
    const char *ap = psim_node_attr_string(n, "auto_pad", "NOTSET");
    if (xo->rank != 4 || (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")))
        return fail(d, n, "Conv is covered in 2-D with explicit pads");
    int64_t st[2], di[2], pa[4];
    spatial(n, "strides", 2, 1, st);
    spatial(n, "dilations", 2, 1, di);
    spatial(n, "pads", 4, 0, pa);
    gboolean bias = n->n_inputs > 2 && n->inputs[2].node >= 0 && need[2];
    int64_t want = (need[0] ? 1 : 0) | (need[1] ? 2 : 0) | (bias ? 4 : 0);
    PsimNode *v = mk(d, "ConvGrad", 3, (PsimPort[]){dy, n->inputs[0], n->inputs[1]});
    if (!v)
        return FALSE;
    v->domain = psim_graph_intern(d->g, "com.microsoft");
    psim_graph_node_outputs_set(d->g, v, 3);
    with_ints(d, v, "strides", 2, st);
    with_ints(d, v, "dilations", 2, di);
    with_ints(d, v, "pads", 4, pa);
    psim_graph_node_attr_set_int(d->g, v, "group", psim_node_attr_int(n, "group", 1));
    psim_graph_node_attr_set_int(d->g, v, "grads", want);
    if (need[0])
        accumulate(d, n->inputs[0], (PsimPort){v->id, 0});
    if (need[1])
        accumulate(d, n->inputs[1], (PsimPort){v->id, 1});
    if (bias)
        accumulate(d, n->inputs[2], (PsimPort){v->id, 2});
    return d->ok;
}

/* A copy of every attribute of n on v. */
static void attrs_like(Grad *d, PsimNode *v, const PsimNode *n)
{
    for (int32_t i = 0; v && i < n->n_attrs; i++)
        psim_graph_node_attr_set(d->g, v, &n->attrs[i]);
}

/* MaxPool: the pooling again with its Indices (flat positions in X), dY added there into zeros
 * (MaxPoolGrad). */
static gboolean grad_maxpool(Grad *d, const PsimNode *n, PsimPort dy)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]);
    if (psim_node_attr_int(n, "storage_order", 0) != 0)
        return fail(d, n, "MaxPool with storage_order 1 is not covered");
    PsimNode *mp = mk(d, "MaxPool", 1, &n->inputs[0]);
    if (mp) {
        attrs_like(d, mp, n);
        psim_graph_node_outputs_set(d->g, mp, 2);
    }
    /* ONNX Runtime's MaxPoolGrad (dY, Indices) -> dX, given X too for dX's shape: dY added at
     * each window's argmax into zeros. */
    PsimNode *g = mp ? mk(d, "MaxPoolGrad", 3, (PsimPort[]){dy, (PsimPort){mp->id, 1}, n->inputs[0]})
                     : NULL;
    if (g)
        g->domain = psim_graph_intern(d->g, "com.microsoft");
    (void)xo;
    accumulate(d, n->inputs[0], port(g));
    return d->ok;
}

/* AveragePool (2-D, floor mode, undilated): dY over each window's divisor, spread back over the
 * window by a ConvTranspose with a kernel of ones per channel. */
static gboolean grad_avgpool(Grad *d, const PsimNode *n, PsimPort dy)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]), *yo = &n->outputs[0];
    const char *ap = psim_node_attr_string(n, "auto_pad", "NOTSET");
    int64_t k[2], st[2], di[2], pa[4], opad[2];
    spatial(n, "kernel_shape", 2, 1, k);
    spatial(n, "strides", 2, 1, st);
    spatial(n, "dilations", 2, 1, di);
    spatial(n, "pads", 4, 0, pa);
    if (xo->rank != 4 || psim_node_attr_int(n, "ceil_mode", 0) || di[0] != 1 || di[1] != 1 ||
        (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")))
        return fail(d, n, "AveragePool is covered in 2-D, floor mode, undilated, with explicit pads");
    int64_t C = xo->dims[1], H = xo->dims[2], W = xo->dims[3], Ho = yo->dims[2], Wo = yo->dims[3];
    gboolean incl = psim_node_attr_int(n, "count_include_pad", 0) != 0;
    /* Each output position's divisor: the window's size, or its part inside the input. */
    PsimTensor *div = psim_tensor_new(xo->dtype, 2, (int64_t[]){Ho, Wo}, d->error);
    for (int64_t a = 0; div && a < Ho; a++)
        for (int64_t b = 0; b < Wo; b++) {
            int64_t r0 = a * st[0] - pa[0], c0 = b * st[1] - pa[1];
            int64_t rows = MIN(r0 + k[0], H) - MAX(r0, 0), cols = MIN(c0 + k[1], W) - MAX(c0, 0);
            psim_tensor_set_f64(div, a * Wo + b, incl ? (double)(k[0] * k[1]) : (double)(rows * cols));
        }
    PsimTensor *ones = psim_tensor_new(xo->dtype, 4, (int64_t[]){C, 1, k[0], k[1]}, d->error);
    for (int64_t i = 0; ones && i < ones->n_elems; i++)
        psim_tensor_set_f64(ones, i, 1);
    PsimPort q = op2(d, "Div", dy, constant(d, div));
    for (int i = 0; i < 2; i++)
        opad[i] = xo->dims[2 + i] - (st[i] * (yo->dims[2 + i] - 1) + k[i] - pa[i] - pa[2 + i]);
    PsimNode *v = mk(d, "ConvTranspose", 2, (PsimPort[]){q, constant(d, ones)});
    with_ints(d, v, "strides", 2, st);
    with_ints(d, v, "pads", 4, pa);
    with_ints(d, v, "output_padding", 2, opad);
    if (v)
        psim_graph_node_attr_set_int(d->g, v, "group", C);
    accumulate(d, n->inputs[0], port(v));
    return d->ok;
}

/* Concat: each input's part of dY along the axis. */
static gboolean grad_concat(Grad *d, const PsimNode *n, PsimPort dy, const guint8 *need)
{
    const PsimOutput *yo = &n->outputs[0];
    int64_t axis = psim_node_attr_int(n, "axis", 0), at = 0;
    if (axis < 0)
        axis += yo->rank;
    for (int32_t i = 0; i < n->n_inputs && d->ok; i++) {
        int64_t len = out_of(d, n->inputs[i])->dims[axis], end = at + len;
        if (i < 8 && need[i]) {
            PsimPort in[4] = {dy, ints(d, 1, &at), ints(d, 1, &end), ints(d, 1, &axis)};
            accumulate(d, n->inputs[i], port(mk(d, "Slice", 4, in)));
        }
        at = end;
    }
    return d->ok;
}

/* Split: the outputs' gradients side by side again (zeros for an output the loss does not
 * read). */
static gboolean grad_split(Grad *d, const PsimNode *n)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]);
    int64_t axis = psim_node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += xo->rank;
    g_autofree PsimPort *parts = g_new(PsimPort, n->n_outputs + 1);
    for (int32_t k = 0; k < n->n_outputs; k++) {
        PsimPort g = d->grad[d->out_off[n->id] + k];
        if (g.node < 0) {
            const PsimOutput *o = &n->outputs[k];
            g = constant(d, psim_tensor_new(o->dtype, o->rank, o->dims, d->error));
        }
        parts[k] = g;
    }
    PsimNode *cat = mk(d, "Concat", n->n_outputs, parts);
    if (cat)
        psim_graph_node_attr_set_int(d->g, cat, "axis", axis);
    accumulate(d, n->inputs[0], port(cat));
    return d->ok;
}

/* Slice with known parameters and unit steps: dY padded with zeros back to X's shape. */
static gboolean grad_slice(Grad *d, const PsimNode *n, PsimPort dy)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]);
    PsimSliceParams sp;
    gboolean axes_known = FALSE;
    GError *err = NULL;
    int r = psim__slice_params(d->g, n, xo->rank, &sp, &axes_known, &err);
    g_clear_error(&err);
    if (r != 1)
        return fail(d, n, "Slice is covered with constant starts, ends, axes and steps");
    g_autofree int64_t *pads = g_new0(int64_t, 2 * xo->rank + 1);
    for (int32_t i = 0; i < sp.n; i++) {
        int64_t ax = sp.axes[i], first = 0, dim = xo->dims[ax];
        if (sp.steps[i] != 1)
            return fail(d, n, "Slice is covered with steps of 1");
        int64_t len = psim__slice_axis(dim, sp.starts[i], sp.ends[i], 1, &first);
        pads[ax] = first;
        pads[xo->rank + ax] = dim - first - len;
    }
    accumulate(d, n->inputs[0], op2(d, "Pad", dy, ints(d, 2 * xo->rank, pads)));
    return d->ok;
}

/* BatchNormalization (inputs X, scale, B, mean, var): in training mode over the batch's own
 * statistics, dX = scale / sd (dY - mean(dY) - xhat mean(dY xhat)), means per channel; in
 * inference mode over the given ones, dX = dY scale / sd. Both: dscale = sum(dY xhat), dB =
 * sum(dY). The running statistics are not trained. */
static gboolean grad_batchnorm(Grad *d, const PsimNode *n, PsimPort dy, const guint8 *need)
{
    const PsimOutput *xo = out_of(d, n->inputs[0]);
    if (xo->rank < 2 || n->n_inputs < 5)
        return fail(d, n, "BatchNormalization needs X of rank >= 2 and five inputs");
    if (need[3] || need[4])
        return fail(d, n, "the gradient of the running mean or variance is not covered (they are not trained)");
    PsimDType dt = xo->dtype;
    gboolean training = psim_node_attr_int(n, "training_mode", 0) != 0;
    double eps = psim_node_attr_float(n, "epsilon", 1e-5);
    int64_t axes[GRAD_MAX_RANK], cshape[GRAD_MAX_RANK];
    int32_t na = 0;
    for (int32_t i = 0; i < xo->rank; i++) {
        cshape[i] = i == 1 ? xo->dims[1] : 1;
        if (i != 1)
            axes[na++] = i;
    }
    PsimPort x = n->inputs[0];
    if (training) {
        /* One fused node over the batch's statistics (ONNX Runtime's BatchNormalizationGrad,
         * its mean and variance computed from X): a dozen elementwise passes otherwise. */
        PsimNode *v = mk(d, "BatchNormalizationGrad", 3, (PsimPort[]){dy, x, n->inputs[1]});
        if (!v)
            return FALSE;
        v->domain = psim_graph_intern(d->g, "com.microsoft");
        psim_graph_node_outputs_set(d->g, v, 3);
        psim_graph_node_attr_set_float(d->g, v, "epsilon", eps);
        for (int k = 0; k < 3; k++)
            if (need[k])
                accumulate(d, n->inputs[k], (PsimPort){v->id, k});
        return d->ok;
    }
    PsimPort mu = op2(d, "Reshape", n->inputs[3], ints(d, xo->rank, cshape));
    PsimPort var = op2(d, "Reshape", n->inputs[4], ints(d, xo->rank, cshape));
    PsimPort inv = op2(d, "Div", scalar(d, dt, 1), op1(d, "Sqrt", op2(d, "Add", var, scalar(d, dt, eps))));
    PsimPort xhat = op2(d, "Mul", op2(d, "Sub", x, mu), inv);
    if (need[0]) {
        PsimPort g = op2(d, "Reshape", n->inputs[1], ints(d, xo->rank, cshape));
        accumulate(d, x, op2(d, "Mul", op2(d, "Mul", g, inv), dy));
    }
    if (need[1])
        accumulate(d, n->inputs[1], reduce(d, "ReduceSum", op2(d, "Mul", dy, xhat), na, axes, 0));
    if (need[2])
        accumulate(d, n->inputs[2], reduce(d, "ReduceSum", dy, na, axes, 0));
    return d->ok;
}

/* Node n's gradient: from dy (the gradient of its output 0) to its inputs that need one. */
static gboolean grad_node(Grad *d, const PsimNode *n, PsimPort dy, const guint8 *need)
{
    const char *op = n->op;
    const PsimOutput *yo = &n->outputs[0];
    PsimPort y = {n->id, 0};
    PsimDType dt = yo->dtype;
    PsimPort x = n->n_inputs ? n->inputs[0] : none();
    if (!strcmp(op, "Identity")) {
        accumulate(d, x, dy);
    } else if (!strcmp(op, "Split")) {
        return need[0] ? grad_split(d, n) : TRUE;
    } else if (!strcmp(op, "Slice")) {
        return need[0] ? grad_slice(d, n, dy) : TRUE;
    } else if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
               !strcmp(op, "Unsqueeze")) {
        if (need[0])
            accumulate(d, x, reshape_as(d, dy, out_of(d, x)));
    } else if (!strcmp(op, "Neg")) {
        accumulate(d, x, op1(d, "Neg", dy));
    } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div")) {
        PsimPort a = n->inputs[0], b = n->inputs[1];
        PsimPort da = none(), db = none();
        if (!strcmp(op, "Add") || !strcmp(op, "Sub")) {
            da = dy;
            db = op[0] == 'A' ? dy : (need[1] ? op1(d, "Neg", dy) : none());
        } else if (!strcmp(op, "Mul")) {
            da = need[0] ? op2(d, "Mul", dy, b) : none();
            db = need[1] ? op2(d, "Mul", dy, a) : none();
        } else { /* y = a / b: da = dy / b, db = -dy y / b */
            da = need[0] ? op2(d, "Div", dy, b) : none();
            db = need[1] ? op1(d, "Neg", op2(d, "Div", op2(d, "Mul", dy, y), b)) : none();
        }
        if (need[0])
            accumulate(d, a, unbroadcast(d, da, yo, out_of(d, a)));
        if (need[1])
            accumulate(d, b, unbroadcast(d, db, yo, out_of(d, b)));
    } else if (!strcmp(op, "Relu")) { /* dy where x > 0: ONNX Runtime's ReluGrad, one pass */
        PsimNode *v = mk(d, "ReluGrad", 2, (PsimPort[]){dy, x});
        if (v)
            v->domain = psim_graph_intern(d->g, "com.microsoft");
        accumulate(d, x, port(v));
    } else if (!strcmp(op, "Clip")) { /* dy where min < x < max (bounds: inputs 1, 2 or attrs) */
        PsimPort lo = n->n_inputs > 1 && n->inputs[1].node >= 0 ? n->inputs[1]
                      : scalar(d, dt, psim_node_attr_float(n, "min", -G_MAXDOUBLE));
        PsimPort hi = n->n_inputs > 2 && n->inputs[2].node >= 0 ? n->inputs[2]
                      : scalar(d, dt, psim_node_attr_float(n, "max", G_MAXDOUBLE));
        if ((n->n_inputs > 1 && n->inputs[1].node >= 0 && need[1]) ||
            (n->n_inputs > 2 && n->inputs[2].node >= 0 && need[2]))
            return fail(d, n, "the gradient of Clip's bounds is not covered");
        PsimPort inside = op2(d, "And", op2(d, "Greater", x, lo), op2(d, "Less", x, hi));
        PsimPort in[3] = {inside, dy, scalar(d, dt, 0)};
        accumulate(d, x, port(mk(d, "Where", 3, in)));
    } else if (!strcmp(op, "Sigmoid")) { /* dy y (1 - y) */
        PsimPort s = op2(d, "Sub", scalar(d, dt, 1), y);
        accumulate(d, x, op2(d, "Mul", op2(d, "Mul", dy, y), s));
    } else if (!strcmp(op, "Tanh")) { /* dy (1 - y^2) */
        PsimPort s = op2(d, "Sub", scalar(d, dt, 1), op2(d, "Mul", y, y));
        accumulate(d, x, op2(d, "Mul", dy, s));
    } else if (!strcmp(op, "Exp")) {
        accumulate(d, x, op2(d, "Mul", dy, y));
    } else if (!strcmp(op, "Log")) {
        accumulate(d, x, op2(d, "Div", dy, x));
    } else if (!strcmp(op, "Sqrt")) { /* dy / (2 y) */
        accumulate(d, x, op2(d, "Div", dy, op2(d, "Mul", y, scalar(d, dt, 2))));
    } else if (!strcmp(op, "MatMul")) {
        PsimPort a = n->inputs[0], b = n->inputs[1];
        if (out_of(d, a)->rank != 2 || out_of(d, b)->rank != 2)
            return fail(d, n, "MatMul of other than 2-D operands is not covered yet");
        if (need[0])
            accumulate(d, a, op2(d, "MatMul", dy, op1(d, "Transpose", b)));
        if (need[1])
            accumulate(d, b, op2(d, "MatMul", op1(d, "Transpose", a), dy));
    } else if (!strcmp(op, "Gemm")) {
        grad_gemm(d, n, dy, need);
    } else if (!strcmp(op, "Conv")) {
        return grad_conv(d, n, dy, need);
    } else if (!strcmp(op, "BatchNormalization")) {
        return grad_batchnorm(d, n, dy, need);
    } else if (!strcmp(op, "MaxPool")) {
        return grad_maxpool(d, n, dy);
    } else if (!strcmp(op, "AveragePool")) {
        return grad_avgpool(d, n, dy);
    } else if (!strcmp(op, "Concat")) {
        return grad_concat(d, n, dy, need);
    } else if (!strcmp(op, "GlobalAveragePool")) { /* dy spread evenly over each channel */
        const PsimOutput *xo = out_of(d, x);
        int64_t area = psim_shape_elems(xo->rank - 2, xo->dims + 2);
        PsimPort e = op2(d, "Expand", dy, ints(d, xo->rank, xo->dims));
        accumulate(d, x, op2(d, "Div", e, scalar(d, dt, (double)area)));
    } else if (!strcmp(op, "Transpose")) {
        const int64_t *perm = NULL;
        int32_t np = psim_node_attr_ints(n, "perm", &perm);
        PsimNode *v = mk(d, "Transpose", 1, &dy);
        if (v && np > 0) {
            int64_t inv[GRAD_MAX_RANK];
            for (int32_t i = 0; i < np && i < GRAD_MAX_RANK; i++)
                if (perm[i] >= 0 && perm[i] < np)
                    inv[perm[i]] = i;
            psim_graph_node_attr_set_ints(d->g, v, "perm", np, inv);
        }
        accumulate(d, x, port(v)); /* no perm: reversed, its own inverse */
    } else if (!strcmp(op, "Softmax")) { /* y (dy - sum(dy y, axis)) */
        int64_t axis = psim_node_attr_int(n, "axis", -1);
        if (axis < 0)
            axis += yo->rank;
        if (axis != yo->rank - 1)
            return fail(d, n, "Softmax along other than the last axis is not covered yet");
        PsimPort s = reduce(d, "ReduceSum", op2(d, "Mul", dy, y), 1, &axis, 1);
        accumulate(d, x, op2(d, "Mul", y, op2(d, "Sub", dy, s)));
    } else if (!strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMean")) {
        /* dy broadcast back over the reduced axes (kept as ones), over the count for a mean. */
        const PsimOutput *xo = out_of(d, x);
        const int64_t *ax = NULL;
        int32_t na = psim_node_attr_ints(n, "axes", &ax);
        if (n->n_inputs > 1)
            return fail(d, n, "axes given as an input are not covered yet");
        int64_t kd[GRAD_MAX_RANK], count = 1;
        for (int32_t i = 0; i < xo->rank; i++)
            kd[i] = na > 0 ? xo->dims[i] : 1;
        for (int32_t i = 0; i < na; i++) {
            int64_t a = ax[i] < 0 ? ax[i] + xo->rank : ax[i];
            if (a >= 0 && a < xo->rank)
                kd[a] = 1;
        }
        for (int32_t i = 0; i < xo->rank; i++)
            count *= kd[i] == 1 ? xo->dims[i] : 1;
        PsimPort r = op2(d, "Reshape", dy, ints(d, xo->rank, kd));
        PsimPort e = op2(d, "Expand", r, ints(d, xo->rank, xo->dims));
        if (op[6] == 'M')
            e = op2(d, "Div", e, scalar(d, dt, (double)count));
        accumulate(d, x, e);
    } else if (!strcmp(op, "SoftmaxCrossEntropyLoss")) {
        /* mean over N: (softmax(scores) - onehot(labels)) dy / N; sum: without the division. */
        const PsimOutput *so = out_of(d, x);
        const char *red = psim_node_attr_string(n, "reduction", "mean");
        if (so->rank != 2 || n->n_inputs > 2 || psim_node_attr_int(n, "ignore_index", G_MININT64) != G_MININT64 ||
            (strcmp(red, "mean") && strcmp(red, "sum")))
            return fail(d, n, "SoftmaxCrossEntropyLoss is covered for [N, C] scores, no weights, no ignore_index, mean or sum");
        if (!need[0])
            return TRUE;
        PsimNode *sm = mk(d, "Softmax", 1, &x);
        if (sm)
            psim_graph_node_attr_set_int(d->g, sm, "axis", 1);
        int64_t depth = so->dims[1];
        PsimTensor *vals = psim_tensor_new(so->dtype, 1, (int64_t[]){2}, d->error);
        if (vals) {
            psim_tensor_set_f64(vals, 0, 0);
            psim_tensor_set_f64(vals, 1, 1);
        }
        PsimPort oh_in[3] = {n->inputs[1], ints(d, 1, &depth), constant(d, vals)};
        PsimNode *oh = mk(d, "OneHot", 3, oh_in);
        if (oh)
            psim_graph_node_attr_set_int(d->g, oh, "axis", -1);
        PsimPort diff = op2(d, "Sub", port(sm), port(oh));
        PsimPort scaled = op2(d, "Mul", diff, dy); /* dy is a scalar */
        if (!strcmp(red, "mean"))
            scaled = op2(d, "Div", scaled, scalar(d, so->dtype, (double)so->dims[0]));
        accumulate(d, x, scaled);
    } else {
        g_autofree char *why = g_strdup_printf("op %s is not covered yet", op);
        return fail(d, n, why);
    }
    return d->ok;
}

/* g copied whole (node ids kept, room for as many nodes again), finalized, shapes inferred. */
static PsimGraph *copy_whole(const PsimGraph *g, GError **error)
{
    int32_t n = psim_graph_n_nodes(g);
    g_autoptr(PsimGraph) out = psim_graph_new(psim_graph_name(g));
    psim__graph_copy_meta(out, g);
    psim_graph_reserve(out, 2 * n + 64);
    for (int32_t v = 0; v < n; v++)
        if (!psim__graph_node_copy(out, g, psim_graph_node(g, v), TRUE, error))
            return NULL;
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++)
        psim_graph_input_add(out, psim_graph_input(g, i));
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++)
        psim_graph_output_add(out, psim_graph_output(g, i));
    if (!psim_graph_finalize(out, error) || !psim_graph_infer_shapes(out, error))
        return NULL;
    return g_steal_pointer(&out);
}

PsimGraph *psim_graph_gradients(const PsimGraph *g, PsimPort loss, int32_t n_wrt,
                                const PsimPort *wrt, PsimPort *grads, GError **error)
{
    int32_t n = psim_graph_n_nodes(g);
    g_autoptr(PsimGraph) out = copy_whole(g, error);
    if (!out)
        return NULL;
    if (loss.node < 0 || loss.node >= n || loss.index < 0 ||
        loss.index >= psim_graph_node(out, loss.node)->n_outputs) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "graph '%s': the loss is not a tensor of the graph",
                    psim_graph_name(g));
        return NULL;
    }
    const PsimNode *ln = psim_graph_node(out, loss.node);
    const PsimOutput *lo = &ln->outputs[loss.index];
    if (lo->rank != 0 && !(lo->rank > 0 && psim_shape_elems(lo->rank, lo->dims) == 1)) {
        psim__error_node(error, out, ln, "the loss must be a scalar (a tensor of one element)");
        return NULL;
    }
    /* The nodes between: reached from a wrt tensor and reaching the loss. */
    const int32_t *so, *su, *po, *pr;
    psim_graph_succ(out, &so, &su);
    psim_graph_pred(out, &po, &pr);
    g_autofree guint8 *fwd = g_new0(guint8, n + 1), *bwd = g_new0(guint8, n + 1);
    g_autofree int32_t *stack = g_new(int32_t, n + 1);
    int32_t top = 0;
    for (int32_t i = 0; i < n_wrt; i++) {
        if (wrt[i].node < 0 || wrt[i].node >= n ||
            wrt[i].index >= psim_graph_node(out, wrt[i].node)->n_outputs) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "graph '%s': tensor %d to differentiate by is not in the graph",
                        psim_graph_name(g), i);
            return NULL;
        }
        if (!fwd[wrt[i].node]) {
            fwd[wrt[i].node] = 1;
            stack[top++] = wrt[i].node;
        }
    }
    while (top > 0)
        for (int32_t v = stack[--top], j = so[v]; j < so[v + 1]; j++)
            if (!fwd[su[j]]) {
                fwd[su[j]] = 1;
                stack[top++] = su[j];
            }
    bwd[loss.node] = 1;
    stack[top++] = loss.node;
    while (top > 0)
        for (int32_t v = stack[--top], j = po[v]; j < po[v + 1]; j++)
            if (!bwd[pr[j]]) {
                bwd[pr[j]] = 1;
                stack[top++] = pr[j];
            }
    g_autofree int32_t *order = psim_graph_topo_order(out, error);
    if (!order)
        return NULL;
    g_autofree int32_t *off = g_new(int32_t, n + 1);
    int32_t slots = 0;
    for (int32_t v = 0; v < n; v++) {
        off[v] = slots;
        slots += psim_graph_node(out, v)->n_outputs;
    }
    g_autofree PsimPort *gr = g_new(PsimPort, slots + 1);
    for (int32_t i = 0; i < slots; i++)
        gr[i] = none();
    Grad d = {.g = out, .n_fwd = n, .out_off = off, .grad = gr, .error = error, .ok = TRUE};
    /* d loss / d loss = 1, of the loss's shape. */
    d.at = ln->name;
    {
        PsimTensor *one = psim_tensor_new(lo->dtype, lo->rank, lo->dims, error);
        if (one)
            psim_tensor_set_f64(one, 0, 1.0);
        gr[off[loss.node] + loss.index] = constant(&d, one);
    }
    for (int32_t i = n - 1; i >= 0 && d.ok; i--) {
        int32_t v = order[i];
        if (!fwd[v] || !bwd[v])
            continue;
        /* Nodes made here are not in order (they are all new): only the forward ones count. */
        const PsimNode *nv = psim_graph_node(out, v);
        PsimPort dy = nv->n_outputs ? gr[off[v]] : none();
        gboolean split = !strcmp(nv->op, "Split"), later = FALSE;
        for (int32_t k = 1; k < nv->n_outputs; k++)
            later |= gr[off[v] + k].node >= 0;
        if (later && !split)
            return fail(&d, nv, "a gradient of an output other than the first is not covered yet"), NULL;
        if (dy.node < 0 && !later)
            continue;
        guint8 need[8] = {0};
        gboolean any = FALSE;
        for (int32_t k = 0; k < nv->n_inputs && k < 8; k++) {
            int32_t u = nv->inputs[k].node;
            need[k] = u >= 0 && fwd[u];
            any |= need[k];
        }
        if (!any)
            continue;
        for (int32_t k = 0; k < nv->n_inputs; k++)
            if (need[k] && !known_shape(out_of(&d, nv->inputs[k])))
                return fail(&d, nv, "an input's shape is not known"), NULL;
        d.at = nv->name;
        if (!grad_node(&d, nv, dy, need))
            return NULL;
    }
    for (int32_t i = 0; i < n_wrt && d.ok; i++) {
        PsimPort gp = gr[off[wrt[i].node] + wrt[i].index];
        if (gp.node < 0) { /* the loss does not depend on it: zeros */
            const PsimOutput *o = out_of(&d, wrt[i]);
            d.at = psim_graph_node(out, wrt[i].node)->name;
            PsimTensor *z = psim_tensor_new(o->dtype, o->rank, o->dims, error);
            gp = constant(&d, z);
        }
        grads[i] = gp;
        if (d.ok)
            psim_graph_output_add(out, gp);
    }
    if (!d.ok || !psim_graph_finalize(out, error) || !psim_graph_infer_shapes(out, error))
        return NULL;
    return g_steal_pointer(&out);
}

/* The loss a training graph gets: the tensor named by loss_ref, or for a classifier (the first
 * graph output [N, C] scores, or the input of a final Softmax) a softmax cross-entropy against a
 * new int64 "labels" Placeholder [N], mean over the batch. */
static int32_t training_loss(PsimGraph *g, const char *loss_ref, PsimPort *loss, GError **error)
{
    if (loss_ref) {
        g_autofree char *name = NULL;
        int32_t k = 0;
        gboolean control = FALSE;
        const PsimNode *v = psim_ref_parse(loss_ref, &name, &k, &control) && !control
                                ? psim_graph_node_find(g, name) : NULL;
        if (!v || k < 0 || k >= v->n_outputs) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "graph '%s': --loss '%s' names no tensor of the graph",
                        psim_graph_name(g), loss_ref);
            return -1;
        }
        *loss = (PsimPort){v->id, k};
        return 0;
    }
    if (psim_graph_n_outputs(g) < 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "graph '%s' has no output to train (give --loss)",
                    psim_graph_name(g));
        return -1;
    }
    PsimPort scores = psim_graph_output(g, 0);
    const PsimNode *sn = psim_graph_node(g, scores.node);
    if (!strcmp(sn->op, "Softmax") && sn->n_inputs == 1)
        scores = sn->inputs[0]; /* probabilities: train on their scores */
    const PsimOutput *so = &psim_graph_node(g, scores.node)->outputs[scores.index];
    if (so->rank != 2 || so->dims[0] < 1 || so->dims[1] < 1 ||
        (so->dtype != PSIM_DTYPE_FLOAT32 && so->dtype != PSIM_DTYPE_FLOAT64)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "graph '%s': its first output is not a batch of class scores [N, C] (give --loss)",
                    psim_graph_name(g));
        return -1;
    }
    PsimNode *lab = psim_graph_node_add_unique(g, "labels", "Placeholder", error);
    if (!lab)
        return -1;
    psim_graph_node_outputs_set(g, lab, 1);
    psim_graph_output_set(g, lab, 0, PSIM_DTYPE_INT64, 1, so->dims);
    psim_graph_input_add(g, lab->id);
    PsimNode *l = psim_graph_node_add_unique(g, "loss", "SoftmaxCrossEntropyLoss", error);
    if (!l)
        return -1;
    psim_graph_node_input_add(g, l, scores);
    psim_graph_node_input_add(g, l, (PsimPort){lab->id, 0});
    psim_graph_node_outputs_set(g, l, 1);
    psim_graph_output_add(g, (PsimPort){l->id, 0});
    *loss = (PsimPort){l->id, 0};
    return psim_graph_finalize(g, error) && psim_graph_infer_shapes(g, error) ? 0 : -1;
}

PsimGraph *psim_graph_training(const PsimGraph *g, const char *loss_ref, int32_t *n_params,
                               GError **error)
{
    return psim__graph_training(g, loss_ref, n_params, NULL, NULL, error);
}

PsimGraph *psim__graph_training(const PsimGraph *g, const char *loss_ref, int32_t *n_params,
                                int32_t **params, PsimPort *loss_port, GError **error)
{
    /* A copy to add the loss to (ids kept), then its gradients by every float parameter. */
    g_autoptr(PsimGraph) c = copy_whole(g, error);
    if (!c)
        return NULL;
    PsimPort loss;
    if (training_loss(c, loss_ref, &loss, error) < 0)
        return NULL;
    /* Batch normalization trains on the batch's statistics; its running ones are not trained. */
    int32_t nc = psim_graph_n_nodes(c);
    g_autofree guint8 *stats = g_new0(guint8, nc + 1);
    for (int32_t v = 0; v < nc; v++) {
        PsimNode *n = psim_graph_node(c, v);
        if (strcmp(n->op, "BatchNormalization") || n->n_inputs < 5)
            continue;
        psim_graph_node_attr_set_int(c, n, "training_mode", 1);
        for (int32_t k = 3; k < 5; k++)
            if (n->inputs[k].node >= 0)
                stats[n->inputs[k].node] = 1;
    }
    g_autoptr(GArray) wrt = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    for (int32_t v = 0; v < psim_graph_n_nodes(c); v++) {
        const PsimNode *n = psim_graph_node(c, v);
        if ((n->flags & PSIM_NODE_PARAMETER) && n->n_outputs == 1 && !stats[v] &&
            (n->outputs[0].dtype == PSIM_DTYPE_FLOAT32 || n->outputs[0].dtype == PSIM_DTYPE_FLOAT64)) {
            PsimPort p = {v, 0};
            g_array_append_val(wrt, p);
        }
    }
    if (!wrt->len) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "graph '%s' has no float parameters to train",
                    psim_graph_name(g));
        return NULL;
    }
    g_autofree PsimPort *grads = g_new(PsimPort, wrt->len);
    PsimGraph *t = psim_graph_gradients(c, loss, (int32_t)wrt->len, (const PsimPort *)wrt->data, grads, error);
    if (t && n_params)
        *n_params = (int32_t)wrt->len;
    if (t && loss_port)
        *loss_port = loss;
    if (t && params) {
        *params = g_new(int32_t, wrt->len);
        for (guint i = 0; i < wrt->len; i++)
            (*params)[i] = g_array_index(wrt, PsimPort, i).node;
    }
    return t;
}
