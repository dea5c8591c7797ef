/* Constant folding of shape arithmetic, interleaved with shape inference in one topological
 * pass (a Shape needs its input's inferred shape; a Reshape needs its folded shape input).
 * Only small tensors are computed (int64 shape arithmetic, a few float scalars); big constant
 * subgraphs such as weights made by ConstantOfShape stay nodes, flagged PSIM_NODE_CONSTANT so
 * that the executor evaluates them once and statistics count them as parameters. */
#include "ops-private.h"

#include <math.h>
#include <string.h>

/* Largest outputs that get a value: integer and bool tensors, and float ones. */
#define FOLD_MAX_INT_ELEMS 65536
#define FOLD_MAX_FLOAT_ELEMS 64

static gboolean dtype_int(PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_INT8:
    case PSIM_DTYPE_INT16:
    case PSIM_DTYPE_INT32:
    case PSIM_DTYPE_INT64:
    case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_UINT16:
    case PSIM_DTYPE_UINT32:
    case PSIM_DTYPE_UINT64:
    case PSIM_DTYPE_BOOL:
        return TRUE;
    default:
        return FALSE;
    }
}

static gboolean dtype_float(PsimDType t)
{
    return t == PSIM_DTYPE_FLOAT32 || t == PSIM_DTYPE_FLOAT64;
}

static void set_i64(PsimTensor *t, int64_t i, int64_t v)
{
    void *d = t->data;
    switch (t->dtype) {
    case PSIM_DTYPE_INT8:
        ((int8_t *)d)[i] = (int8_t)v;
        break;
    case PSIM_DTYPE_INT16:
        ((int16_t *)d)[i] = (int16_t)v;
        break;
    case PSIM_DTYPE_INT32:
        ((int32_t *)d)[i] = (int32_t)v;
        break;
    case PSIM_DTYPE_INT64:
        ((int64_t *)d)[i] = v;
        break;
    case PSIM_DTYPE_UINT8:
        ((uint8_t *)d)[i] = (uint8_t)v;
        break;
    case PSIM_DTYPE_UINT16:
        ((uint16_t *)d)[i] = (uint16_t)v;
        break;
    case PSIM_DTYPE_UINT32:
        ((uint32_t *)d)[i] = (uint32_t)v;
        break;
    case PSIM_DTYPE_UINT64:
        ((uint64_t *)d)[i] = (uint64_t)v;
        break;
    case PSIM_DTYPE_BOOL:
        ((uint8_t *)d)[i] = v != 0;
        break;
    case PSIM_DTYPE_FLOAT32:
        ((float *)d)[i] = (float)v;
        break;
    case PSIM_DTYPE_FLOAT64:
        ((double *)d)[i] = (double)v;
        break;
    default:
        break;
    }
}

static void set_f64(PsimTensor *t, int64_t i, double v)
{
    if (t->dtype == PSIM_DTYPE_FLOAT32)
        ((float *)t->data)[i] = (float)v;
    else if (t->dtype == PSIM_DTYPE_FLOAT64)
        ((double *)t->data)[i] = v;
    else if (t->dtype == PSIM_DTYPE_BOOL)
        ((uint8_t *)t->data)[i] = v != 0;
    else
        set_i64(t, i, v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v);
}

/* The input's value when it is a host tensor of an integer, bool or float32/64 dtype. */
static const PsimTensor *val(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    const PsimTensor *t = psim__input_value(g, n, k);
    return t && (dtype_int(t->dtype) || dtype_float(t->dtype)) ? t : NULL;
}

/* Linear index into an input of (rank, dims) broadcast to the output (orank, odims). */
static int64_t bcast_index(int32_t orank, const int64_t *odims, int32_t rank, const int64_t *dims,
                           int64_t lin)
{
    int64_t idx = 0, stride = 1;
    for (int32_t i = orank - 1; i >= 0; i--) {
        int64_t c = lin % odims[i];
        lin /= odims[i];
        int32_t j = i - (orank - rank);
        if (j < 0)
            break;
        if (dims[j] != 1)
            idx += c * stride;
        stride *= dims[j];
    }
    return idx;
}

typedef enum {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_MAX,
    OP_MIN,
    OP_MOD,
    OP_EQ,
    OP_LT,
    OP_GT,
    OP_LE,
    OP_GE,
    OP_AND,
    OP_OR,
    OP_XOR,
    OP_NEG,
    OP_ABS,
    OP_NOT,
    OP_SUM
} ElemOp;

static const struct {
    const char *name;
    ElemOp op;
    int arity; /* 0: variadic */
} elem_ops[] = {
    {"Add", OP_ADD, 2},           {"Sub", OP_SUB, 2},    {"Mul", OP_MUL, 2},
    {"Div", OP_DIV, 2},           {"Mod", OP_MOD, 2},    {"Equal", OP_EQ, 2},
    {"Less", OP_LT, 2},           {"Greater", OP_GT, 2}, {"LessOrEqual", OP_LE, 2},
    {"GreaterOrEqual", OP_GE, 2}, {"And", OP_AND, 2},    {"Or", OP_OR, 2},
    {"Xor", OP_XOR, 2},           {"Neg", OP_NEG, 1},    {"Abs", OP_ABS, 1},
    {"Not", OP_NOT, 1},           {"Max", OP_MAX, 0},    {"Min", OP_MIN, 0},
    {"Sum", OP_SUM, 0},
};

/* One integer operation; FALSE when the result is undefined or overflows (left to run time). */
static gboolean apply_int(ElemOp op, int64_t a, int64_t b, int64_t *r)
{
    switch (op) {
    case OP_SUM:
    case OP_ADD:
        return !__builtin_add_overflow(a, b, r);
    case OP_SUB:
        return !__builtin_sub_overflow(a, b, r);
    case OP_MUL:
        return !__builtin_mul_overflow(a, b, r);
    case OP_DIV:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return FALSE;
        *r = a / b; /* truncation, as C++ runtimes do */
        return TRUE;
    case OP_MOD:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return FALSE;
        *r = a % b;
        if (*r != 0 && ((*r < 0) != (b < 0))) /* ONNX fmod=0: sign of the divisor */
            *r += b;
        return TRUE;
    case OP_MAX:
        *r = MAX(a, b);
        return TRUE;
    case OP_MIN:
        *r = MIN(a, b);
        return TRUE;
    case OP_EQ:
        *r = a == b;
        return TRUE;
    case OP_LT:
        *r = a < b;
        return TRUE;
    case OP_GT:
        *r = a > b;
        return TRUE;
    case OP_LE:
        *r = a <= b;
        return TRUE;
    case OP_GE:
        *r = a >= b;
        return TRUE;
    case OP_AND:
        *r = a && b;
        return TRUE;
    case OP_OR:
        *r = a || b;
        return TRUE;
    case OP_XOR:
        *r = !a != !b;
        return TRUE;
    case OP_NEG:
        if (a == INT64_MIN)
            return FALSE;
        *r = -a;
        return TRUE;
    case OP_ABS:
        if (a == INT64_MIN)
            return FALSE;
        *r = a < 0 ? -a : a;
        return TRUE;
    case OP_NOT:
        *r = !a;
        return TRUE;
    }
    return FALSE;
}

static double apply_float(ElemOp op, double a, double b)
{
    switch (op) {
    case OP_SUM:
    case OP_ADD:
        return a + b;
    case OP_SUB:
        return a - b;
    case OP_MUL:
        return a * b;
    case OP_DIV:
        return a / b;
    case OP_MOD:
        return fmod(a, b);
    case OP_MAX:
        return MAX(a, b);
    case OP_MIN:
        return MIN(a, b);
    case OP_EQ:
        return a == b;
    case OP_LT:
        return a < b;
    case OP_GT:
        return a > b;
    case OP_LE:
        return a <= b;
    case OP_GE:
        return a >= b;
    case OP_AND:
        return a != 0 && b != 0;
    case OP_OR:
        return a != 0 || b != 0;
    case OP_XOR:
        return (a != 0) != (b != 0);
    case OP_NEG:
        return -a;
    case OP_ABS:
        return fabs(a);
    case OP_NOT:
        return a == 0;
    }
    return 0;
}

static gboolean fold_elementwise(const PsimGraph *g, const PsimNode *n, ElemOp op, int arity,
                                 PsimTensor *out)
{
    int32_t ni = arity ? arity : n->n_inputs;
    const PsimTensor *in[8];
    if (ni < 1 || ni > 8 || n->n_inputs != ni)
        return FALSE;
    gboolean as_int = TRUE;
    for (int32_t k = 0; k < ni; k++) {
        if (!(in[k] = val(g, n, k)))
            return FALSE;
        as_int = as_int && dtype_int(in[k]->dtype);
    }
    for (int64_t i = 0; i < out->n_elems; i++) {
        int64_t ri = 0;
        double rf = 0;
        for (int32_t k = 0; k < ni; k++) {
            int64_t j = bcast_index(out->rank, out->dims, in[k]->rank, in[k]->dims, i);
            if (as_int) {
                int64_t v = psim_tensor_get_i64(in[k], j);
                if (ni == 1) {
                    if (!apply_int(op, v, 0, &ri))
                        return FALSE;
                } else if (k == 0) {
                    ri = v;
                } else if (!apply_int(op, ri, v, &ri)) {
                    return FALSE;
                }
            } else {
                double v = psim_tensor_get_f64(in[k], j);
                rf = ni == 1 ? apply_float(op, v, 0) : k == 0 ? v : apply_float(op, rf, v);
            }
        }
        if (as_int)
            set_i64(out, i, ri);
        else
            set_f64(out, i, rf);
    }
    return TRUE;
}

static gboolean fold_where(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimTensor *c = val(g, n, 0), *x = val(g, n, 1), *y = val(g, n, 2);
    if (!c || !x || !y || x->dtype != out->dtype || y->dtype != out->dtype)
        return FALSE;
    size_t es = psim_dtype_size(out->dtype);
    for (int64_t i = 0; i < out->n_elems; i++) {
        gboolean take_x =
            psim_tensor_get_i64(c, bcast_index(out->rank, out->dims, c->rank, c->dims, i)) != 0;
        const PsimTensor *s = take_x ? x : y;
        int64_t j = bcast_index(out->rank, out->dims, s->rank, s->dims, i);
        memcpy((char *)out->data + i * es, (const char *)s->data + j * es, es);
    }
    return TRUE;
}

static gboolean fold_copy(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimTensor *x = val(g, n, 0);
    if (!x || x->dtype != out->dtype || x->n_elems != out->n_elems)
        return FALSE;
    memcpy(out->data, x->data, out->nbytes);
    return TRUE;
}

static gboolean fold_cast(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimTensor *x = val(g, n, 0);
    if (!x || x->n_elems != out->n_elems)
        return FALSE;
    for (int64_t i = 0; i < out->n_elems; i++) {
        if (dtype_int(x->dtype))
            set_i64(out, i, psim_tensor_get_i64(x, i));
        else
            set_f64(out, i, psim_tensor_get_f64(x, i));
    }
    return TRUE;
}

static gboolean fold_shape(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    if (!x)
        return FALSE;
    int32_t s, e;
    psim__shape_range(n, x->rank, &s, &e);
    if (out->n_elems != MAX(0, e - s))
        return FALSE;
    for (int32_t i = s; i < e; i++) {
        if (x->dims[i] < 0)
            return FALSE;
        set_i64(out, i - s, x->dims[i]);
    }
    return TRUE;
}

static gboolean fold_size(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    int64_t e = x ? psim_shape_elems(x->rank, x->dims) : -1;
    if (e < 0)
        return FALSE;
    set_i64(out, 0, e);
    return TRUE;
}

static int fold_gather(const PsimGraph *g, const PsimNode *n, PsimTensor *out, GError **error)
{
    const PsimTensor *x = val(g, n, 0), *idx = val(g, n, 1);
    if (!x || !idx || !dtype_int(idx->dtype) || x->dtype != out->dtype || x->rank < 1)
        return 0;
    int32_t axis;
    if (!psim__axis(g, n, psim_node_attr_int(n, "axis", 0), x->rank, &axis, error))
        return -1;
    int64_t outer = psim__dims_prod(x->dims, 0, axis), ad = x->dims[axis];
    int64_t inner = psim__dims_prod(x->dims, axis + 1, x->rank);
    size_t es = psim_dtype_size(x->dtype);
    int64_t total;
    if (outer < 0 || inner < 0 || __builtin_mul_overflow(outer, idx->n_elems, &total) ||
        __builtin_mul_overflow(total, inner, &total) || total != out->n_elems)
        return 0;
    char *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < idx->n_elems; j++) {
            int64_t k = psim_tensor_get_i64(idx, j);
            if (k < -ad || k >= ad) {
                psim__error_node(error, g, n,
                                 "Gather index %" G_GINT64_FORMAT
                                 " is out of range [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ")",
                                 k, -ad, ad);
                return -1;
            }
            if (k < 0)
                k += ad;
            memcpy(dst, (const char *)x->data + ((o * ad + k) * inner) * (int64_t)es,
                   (size_t)inner * es);
            dst += (size_t)inner * es;
        }
    return 1;
}

static gboolean fold_concat(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    int32_t axis;
    if (out->rank < 1 ||
        !psim__axis(g, n, psim_node_attr_int(n, "axis", 0), out->rank, &axis, NULL))
        return FALSE;
    size_t es = psim_dtype_size(out->dtype);
    int64_t outer = psim__dims_prod(out->dims, 0, axis);
    int64_t inner = psim__dims_prod(out->dims, axis + 1, out->rank);
    for (int32_t k = 0; k < n->n_inputs; k++) {
        const PsimTensor *x = val(g, n, k);
        if (!x || x->dtype != out->dtype || x->rank != out->rank)
            return FALSE;
    }
    char *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int32_t k = 0; k < n->n_inputs; k++) {
            const PsimTensor *x = val(g, n, k);
            size_t chunk = (size_t)(x->dims[axis] * inner) * es;
            memcpy(dst, (const char *)x->data + (size_t)o * chunk, chunk);
            dst += chunk;
        }
    return TRUE;
}

static int fold_slice(const PsimGraph *g, const PsimNode *n, PsimTensor *out, GError **error)
{
    const PsimTensor *x = val(g, n, 0);
    if (!x || x->dtype != out->dtype || x->rank != out->rank || x->rank > PSIM__MAX_RANK)
        return 0;
    PsimSliceParams p;
    gboolean axes_known;
    int r = psim__slice_params(g, n, x->rank, &p, &axes_known, error);
    if (r <= 0)
        return r;
    int64_t first[PSIM__MAX_RANK], step[PSIM__MAX_RANK], stride[PSIM__MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++) {
        first[i] = 0;
        step[i] = 1;
    }
    for (int32_t i = 0; i < p.n; i++) {
        int32_t ax = (int32_t)p.axes[i];
        int64_t len = psim__slice_axis(x->dims[ax], p.starts[i], p.ends[i], p.steps[i], &first[ax]);
        if (len != out->dims[ax])
            return 0;
        step[ax] = p.steps[i] == INT64_MIN ? -INT64_MAX : p.steps[i];
    }
    int64_t s = 1;
    for (int32_t i = x->rank - 1; i >= 0; i--) {
        stride[i] = s;
        s *= x->dims[i];
    }
    size_t es = psim_dtype_size(x->dtype);
    for (int64_t lin = 0; lin < out->n_elems; lin++) {
        int64_t rem = lin, src = 0;
        for (int32_t i = x->rank - 1; i >= 0; i--) {
            int64_t c = rem % out->dims[i];
            rem /= out->dims[i];
            src += (first[i] + c * step[i]) * stride[i];
        }
        memcpy((char *)out->data + lin * (int64_t)es, (const char *)x->data + src * (int64_t)es,
               es);
    }
    return 1;
}

static gboolean fold_expand(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimTensor *x = val(g, n, 0);
    if (!x || x->dtype != out->dtype)
        return FALSE;
    size_t es = psim_dtype_size(x->dtype);
    for (int64_t i = 0; i < out->n_elems; i++) {
        int64_t j = bcast_index(out->rank, out->dims, x->rank, x->dims, i);
        memcpy((char *)out->data + i * (int64_t)es, (const char *)x->data + j * (int64_t)es, es);
    }
    return TRUE;
}

static gboolean fold_constant_of_shape(const PsimNode *n, PsimTensor *out)
{
    const PsimAttr *v = psim_node_attr(n, "value");
    if (!v || v->type != PSIM_ATTR_TENSOR || !v->v.t)
        return TRUE; /* zeros */
    const PsimTensor *t = v->v.t;
    if (t->dtype != out->dtype || t->n_elems != 1 || !t->data)
        return FALSE;
    size_t es = psim_dtype_size(t->dtype);
    for (int64_t i = 0; i < out->n_elems; i++)
        memcpy((char *)out->data + i * (int64_t)es, t->data, es);
    return TRUE;
}

static gboolean fold_range(const PsimGraph *g, const PsimNode *n, PsimTensor *out)
{
    const PsimTensor *s = val(g, n, 0), *d = val(g, n, 2);
    if (!s || !d || !val(g, n, 1) || s->n_elems != 1 || d->n_elems != 1)
        return FALSE;
    for (int64_t i = 0; i < out->n_elems; i++) {
        int64_t step, v;
        if (dtype_int(out->dtype)) {
            if (__builtin_mul_overflow(i, psim_tensor_get_i64(d, 0), &step) ||
                __builtin_add_overflow(psim_tensor_get_i64(s, 0), step, &v))
                return FALSE;
            set_i64(out, i, v);
        } else {
            set_f64(out, i, psim_tensor_get_f64(s, 0) + (double)i * psim_tensor_get_f64(d, 0));
        }
    }
    return TRUE;
}

int psim__fold_node(PsimGraph *g, PsimNode *n, GError **error)
{
    if (n->n_outputs < 1 || n->outputs[0].value || (n->flags & PSIM_NODE_FED))
        return 0;
    const PsimOutput *o = &n->outputs[0];
    if (o->rank < 0 || o->rank > PSIM__MAX_RANK)
        return 0;
    int64_t ne = psim_shape_elems(o->rank, o->dims);
    if (ne < 0 || !(dtype_int(o->dtype) || dtype_float(o->dtype)))
        return 0;
    if (ne > (dtype_float(o->dtype) ? FOLD_MAX_FLOAT_ELEMS : FOLD_MAX_INT_ELEMS))
        return 0;
    const char *op = n->op;
    /* Weights made at run time stay nodes: only integer ConstantOfShape is folded. */
    if (!strcmp(op, "ConstantOfShape") && dtype_float(o->dtype))
        return 0;
    g_autoptr(PsimTensor) t = psim_tensor_new(o->dtype, o->rank, o->dims, NULL);
    if (!t)
        return 0;
    int r = 0;
    if (!strcmp(op, "Shape"))
        r = fold_shape(g, n, t);
    else if (!strcmp(op, "Size"))
        r = fold_size(g, n, t);
    else if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
             !strcmp(op, "Unsqueeze") || !strcmp(op, "Identity") || !strcmp(op, "Dropout"))
        r = fold_copy(g, n, t);
    else if (!strcmp(op, "Cast"))
        r = fold_cast(g, n, t);
    else if (!strcmp(op, "Gather"))
        r = fold_gather(g, n, t, error);
    else if (!strcmp(op, "Concat"))
        r = fold_concat(g, n, t);
    else if (!strcmp(op, "Slice"))
        r = fold_slice(g, n, t, error);
    else if (!strcmp(op, "Expand"))
        r = fold_expand(g, n, t);
    else if (!strcmp(op, "ConstantOfShape"))
        r = val(g, n, 0) ? fold_constant_of_shape(n, t) : 0;
    else if (!strcmp(op, "Range"))
        r = fold_range(g, n, t);
    else if (!strcmp(op, "Where"))
        r = fold_where(g, n, t);
    else {
        for (size_t i = 0; i < G_N_ELEMENTS(elem_ops); i++)
            if (!strcmp(op, elem_ops[i].name)) {
                r = fold_elementwise(g, n, elem_ops[i].op, elem_ops[i].arity, t);
                break;
            }
    }
    if (r <= 0)
        return r;
    psim_graph_output_value_set(g, n, 0, t);
    return 1;
}

/* A node is constant when its op is pure and every data input comes from a constant node:
 * Const/Constant and initializers start it; Placeholders, fed nodes, stateful, abstract and
 * unregistered ops stop it. Control inputs do not matter to values. */
static gboolean node_constant(const PsimGraph *g, const PsimNode *v, const PsimOpDef *d,
                              const guint8 *is_const)
{
    if (!d || (d->flags & (PSIM_OP_STATEFUL | PSIM_OP_ABSTRACT)) || v->n_outputs == 0 ||
        !strcmp(v->op, "Placeholder") || (v->flags & PSIM_NODE_FED))
        return FALSE;
    if ((v->flags & PSIM_NODE_PARAMETER) || !strcmp(v->op, "Const") || !strcmp(v->op, "Constant"))
        return TRUE;
    gboolean all_values = TRUE;
    for (int32_t k = 0; k < v->n_outputs; k++)
        all_values = all_values && v->outputs[k].value;
    if (all_values)
        return TRUE;
    int32_t present = 0;
    for (int32_t k = 0; k < v->n_inputs; k++) {
        int32_t src = v->inputs[k].node;
        if (src < 0)
            continue;
        present++;
        if (!is_const[src])
            return FALSE;
    }
    (void)g;
    return present > 0;
}

int32_t psim_graph_fold_constants(PsimGraph *g, GError **error)
{
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    if (!order)
        return -1;
    int32_t nn = psim_graph_n_nodes(g), folded = 0;
    g_autofree guint8 *is_const = g_new0(guint8, nn ? nn : 1);
    for (int32_t i = 0; i < nn; i++) {
        PsimNode *v = psim_graph_node(g, order[i]);
        if (v->flags & PSIM_NODE_FED)
            continue;
        const PsimOpDef *d = psim__op_for_node(v);
        if (d && d->infer && !d->infer(g, v, error))
            return -1;
        if (d && !(d->flags & (PSIM_OP_STATEFUL | PSIM_OP_ABSTRACT))) {
            int r = psim__fold_node(g, v, error);
            if (r < 0)
                return -1;
            folded += r;
        }
        if (node_constant(g, v, d, is_const)) {
            is_const[v->id] = 1;
            v->flags |= PSIM_NODE_CONSTANT;
        }
    }
    return folded;
}
