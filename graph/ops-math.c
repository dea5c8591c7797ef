/* Math ops with ONNX semantics (opsets 7..17): elementwise unary and broadcasting binary ops,
 * comparisons and logic, Where, Cast, Clip, MatMul and Gemm, Softmax, reductions, Range, and
 * the stateful random and variable ops that passes must never merge. */
#include "ops-private.h"

#include <math.h>
#include <string.h>

/* ---- elementwise ---- */

/* FLOPs per output element: 1 for simple arithmetic, more for transcendental functions. */
static const struct {
    const char *op;
    double flops;
} elem_flops[] = {
    {"Exp", 4},      {"Log", 4},         {"Sigmoid", 4},    {"Tanh", 5}, {"Erf", 5},
    {"Pow", 4},      {"Softplus", 5},    {"Elu", 4},        {"Selu", 4}, {"LeakyRelu", 2},
    {"Clip", 2},     {"HardSigmoid", 3}, {"Sin", 4},        {"Cos", 4},  {"Cast", 0},
    {"Tan", 5},      {"Asin", 5},        {"Acos", 5},       {"Atan", 5}, {"Sinh", 5},
    {"Cosh", 5},     {"Asinh", 5},       {"Acosh", 5},      {"Atanh", 5}, {"Celu", 4},
    {"CastLike", 0}, {"Softmax", 5},     {"LogSoftmax", 5},
};

static double flops_per_elem(const char *op)
{
    for (size_t i = 0; i < G_N_ELEMENTS(elem_flops); i++)
        if (!strcmp(op, elem_flops[i].op))
            return elem_flops[i].flops;
    return 1;
}

static gboolean need_inputs(const PsimGraph *g, const PsimNode *n, int32_t k, GError **error)
{
    for (int32_t i = 0; i < k; i++)
        if (!psim__input(g, n, i)) {
            psim__error_node(error, g, n, "%s needs %d input(s), input %d is missing", n->op, k, i);
            return FALSE;
        }
    return TRUE;
}

static gboolean infer_unary(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *in = psim__input(g, n, 0);
    PsimDType dt = in->dtype;
    if (!strcmp(n->op, "Not") || !strcmp(n->op, "IsNaN") || !strcmp(n->op, "IsInf"))
        dt = PSIM_DTYPE_BOOL;
    return psim__out_set(g, n, 0, dt, in->rank, in->dims, error);
}

static gboolean infer_cast(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    PsimDType to = psim__attr_dtype(n, "to", PSIM_DTYPE_UNDEFINED);
    if (to == PSIM_DTYPE_UNDEFINED)
        to = psim__attr_dtype(n, "DstT", PSIM_DTYPE_UNDEFINED);
    if (to == PSIM_DTYPE_UNDEFINED) {
        psim__error_node(error, g, n, "Cast needs a valid 'to' dtype attribute");
        return FALSE;
    }
    const PsimOutput *in = psim__input(g, n, 0);
    return psim__out_set(g, n, 0, to, in->rank, in->dims, error);
}

static gboolean infer_cast_like(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *in = psim__input(g, n, 0);
    return psim__out_set(g, n, 0, psim__input_dtype(g, n, 1), in->rank, in->dims, error);
}

static gboolean is_logic_out(const char *op)
{
    static const char *const ops[] = {"Equal",          "Less", "Greater", "LessOrEqual",
                                      "GreaterOrEqual", "And",  "Or",      "Xor"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++)
        if (!strcmp(op, ops[i]))
            return TRUE;
    return FALSE;
}

/* Broadcasts inputs [first, n_inputs) together; dtype from input `dtype_from`. */
static gboolean infer_broadcast_from(PsimGraph *g, PsimNode *n, int32_t first, int32_t dtype_from,
                                     GError **error)
{
    PsimDType dt = psim__input_dtype(g, n, dtype_from);
    for (int32_t k = first; dt == PSIM_DTYPE_UNDEFINED && k < n->n_inputs; k++)
        dt = psim__input_dtype(g, n, k);
    if (is_logic_out(n->op))
        dt = PSIM_DTYPE_BOOL;
    int64_t dims[PSIM__MAX_RANK];
    int32_t rank = 0;
    for (int32_t k = first; k < n->n_inputs; k++) {
        const PsimOutput *in = psim__input_ranked(g, n, k);
        if (!in) {
            psim__out_unknown(g, n, 0, dt);
            /* Still check the known inputs against each other below? Unknown rank ends it. */
            return TRUE;
        }
        int64_t tmp[PSIM__MAX_RANK];
        int32_t r;
        if (in->rank > PSIM__MAX_RANK) {
            psim__error_node(error, g, n, "input %d has rank %d (at most %d)", k, in->rank,
                             PSIM__MAX_RANK);
            return FALSE;
        }
        if (!psim__broadcast(g, n, rank, dims, in->rank, in->dims, &r, tmp, error))
            return FALSE;
        memcpy(dims, tmp, sizeof(int64_t) * (size_t)r);
        rank = r;
    }
    return psim__out_set(g, n, 0, dt, rank, dims, error);
}

static gboolean infer_binary(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    if (n->n_inputs > 2 && strcmp(n->op, "BiasAdd")) {
        psim__error_node(error, g, n, "%s takes 2 inputs, not %d", n->op, n->n_inputs);
        return FALSE;
    }
    return infer_broadcast_from(g, n, 0, 0, error);
}

static gboolean infer_variadic(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, MAX(1, n->n_inputs), error))
        return FALSE;
    return infer_broadcast_from(g, n, 0, 0, error);
}

static gboolean infer_where(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 3, error))
        return FALSE;
    return infer_broadcast_from(g, n, 0, 1, error);
}

/* TF BiasAdd: the bias runs along the channel dimension (last for NHWC, 1 for NCHW). */
static gboolean infer_bias_add(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *b = psim__input_ranked(g, n, 1);
    if (x->rank >= 0 && b) {
        const char *fmt = psim_node_attr_string(n, "data_format", "NHWC");
        int32_t c = !strcmp(fmt, "NCHW") && x->rank >= 2 ? 1 : x->rank - 1;
        if (b->rank != 1 || x->rank < 1 ||
            (b->dims[0] >= 0 && x->dims[c] >= 0 && b->dims[0] != x->dims[c])) {
            psim__error_node(error, g, n, "bias does not match the channel dimension");
            return FALSE;
        }
    }
    return psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error);
}

static void count_elementwise(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    int32_t n_in = 0;
    for (int32_t k = 0; k < n->n_inputs; k++)
        n_in += psim__input(g, n, k) != NULL;
    double per = flops_per_elem(n->op);
    /* Variadic reductions over inputs (Sum of 4 tensors) do one op per extra input. */
    if (!strcmp(n->op, "Sum") || !strcmp(n->op, "Max") || !strcmp(n->op, "Min"))
        per = MAX(1, n_in - 1);
    else if (!strcmp(n->op, "Mean"))
        per = MAX(1, n_in);
    out->flops = per * (double)psim__out_elems(n, 0);
}

static gboolean infer_clip(PsimGraph *g, PsimNode *n, GError **error)
{
    for (int32_t k = 1; k < n->n_inputs && k < 3; k++) {
        const PsimOutput *b = psim__input_ranked(g, n, k);
        if (b && psim_shape_elems(b->rank, b->dims) > 1) {
            psim__error_node(error, g, n, "Clip's %s must be a scalar", k == 1 ? "min" : "max");
            return FALSE;
        }
    }
    return infer_unary(g, n, error);
}

/* ---- MatMul and Gemm ---- */

static gboolean attr_flag(const PsimNode *n, const char *a, const char *b)
{
    return psim_node_attr_int(n, a, 0) != 0 || (b && psim_node_attr_int(n, b, 0) != 0);
}

/* Shapes of MatMul's operands after 1-D promotion and transposes. */
typedef struct {
    int32_t ra, rb;
    int64_t a[PSIM__MAX_RANK], b[PSIM__MAX_RANK];
    gboolean drop_m, drop_n;
} MatMulDims;

/* QLinearMatMul's operands are inputs 0 and 3; everyone else's 0 and 1. */
static gboolean matmul_dims(const PsimGraph *g, const PsimNode *n, MatMulDims *m, GError **error)
{
    int32_t ib = !strcmp(n->op, "QLinearMatMul") ? 3 : 1;
    const PsimOutput *a = psim__input_ranked(g, n, 0), *b = psim__input_ranked(g, n, ib);
    if (!a || !b)
        return FALSE;
    if (a->rank < 1 || b->rank < 1 || a->rank > PSIM__MAX_RANK - 1 ||
        b->rank > PSIM__MAX_RANK - 1) {
        psim__error_node(error, g, n, "MatMul inputs must have rank 1 to %d (got %d and %d)",
                         PSIM__MAX_RANK - 1, a->rank, b->rank);
        return FALSE;
    }
    memset(m, 0, sizeof *m);
    if (a->rank == 1) {
        m->a[0] = 1;
        m->a[1] = a->dims[0];
        m->ra = 2;
        m->drop_m = TRUE;
    } else {
        memcpy(m->a, a->dims, sizeof(int64_t) * (size_t)a->rank);
        m->ra = a->rank;
        if (attr_flag(n, "transpose_a", "adj_x")) {
            int64_t t = m->a[m->ra - 1];
            m->a[m->ra - 1] = m->a[m->ra - 2];
            m->a[m->ra - 2] = t;
        }
    }
    if (b->rank == 1) {
        m->b[0] = b->dims[0];
        m->b[1] = 1;
        m->rb = 2;
        m->drop_n = TRUE;
    } else {
        memcpy(m->b, b->dims, sizeof(int64_t) * (size_t)b->rank);
        m->rb = b->rank;
        if (attr_flag(n, "transpose_b", "adj_y")) {
            int64_t t = m->b[m->rb - 1];
            m->b[m->rb - 1] = m->b[m->rb - 2];
            m->b[m->rb - 2] = t;
        }
    }
    return TRUE;
}

static gboolean infer_matmul(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (dt == PSIM_DTYPE_UNDEFINED)
        dt = psim__input_dtype(g, n, 1);
    if (!strcmp(n->op, "MatMulInteger"))
        dt = PSIM_DTYPE_INT32;
    else if (!strcmp(n->op, "QLinearMatMul"))
        dt = n->n_inputs > 7 ? psim__input_dtype(g, n, 7) : PSIM_DTYPE_UINT8;
    MatMulDims m;
    GError *err = NULL;
    if (!matmul_dims(g, n, &m, &err)) {
        if (err) {
            g_propagate_error(error, err);
            return FALSE;
        }
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    int64_t k1 = m.a[m.ra - 1], k2 = m.b[m.rb - 2];
    if (k1 >= 0 && k2 >= 0 && k1 != k2) {
        psim__error_node(error, g, n,
                         "MatMul inner dimensions differ: %" G_GINT64_FORMAT
                         " (A's columns) vs %" G_GINT64_FORMAT " (B's rows)",
                         k1, k2);
        return FALSE;
    }
    int64_t out[PSIM__MAX_RANK];
    int32_t r;
    if (!psim__broadcast(g, n, m.ra - 2, m.a, m.rb - 2, m.b, &r, out, error))
        return FALSE;
    if (!m.drop_m)
        out[r++] = m.a[m.ra - 2];
    if (!m.drop_n)
        out[r++] = m.b[m.rb - 1];
    return psim__out_set(g, n, 0, dt, r, out, error);
}

static void count_matmul(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    MatMulDims m;
    GError *err = NULL;
    if (!matmul_dims(g, n, &m, &err)) {
        g_clear_error(&err);
        return;
    }
    int64_t k = m.a[m.ra - 1];
    if (k > 0)
        out->flops = 2.0 * (double)psim__out_elems(n, 0) * (double)k;
}

static gboolean infer_gemm(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *a = psim__input_ranked(g, n, 0), *b = psim__input_ranked(g, n, 1);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!a || !b) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (a->rank != 2 || b->rank != 2) {
        psim__error_node(error, g, n, "Gemm inputs must be 2-D (got ranks %d and %d)", a->rank,
                         b->rank);
        return FALSE;
    }
    gboolean ta = psim_node_attr_int(n, "transA", 0) != 0;
    gboolean tb = psim_node_attr_int(n, "transB", 0) != 0;
    int64_t mm = a->dims[ta ? 1 : 0], k1 = a->dims[ta ? 0 : 1];
    int64_t k2 = b->dims[tb ? 1 : 0], nn = b->dims[tb ? 0 : 1];
    if (k1 >= 0 && k2 >= 0 && k1 != k2) {
        psim__error_node(error, g, n,
                         "Gemm inner dimensions differ: %" G_GINT64_FORMAT " vs %" G_GINT64_FORMAT,
                         k1, k2);
        return FALSE;
    }
    int64_t out[2] = {mm, nn};
    const PsimOutput *c = psim__input_ranked(g, n, 2);
    if (c) {
        /* C broadcasts one way, to (M, N). */
        int64_t tmp[PSIM__MAX_RANK];
        int32_t r;
        if (c->rank > 2 || !psim__broadcast(g, n, 2, out, c->rank, c->dims, &r, tmp, error)) {
            if (c->rank > 2)
                psim__error_node(error, g, n, "Gemm's C has rank %d (at most 2)", c->rank);
            return FALSE;
        }
        for (int32_t i = 0; i < 2; i++)
            if (out[i] >= 0 && tmp[i] != out[i]) {
                psim__error_node(error, g, n, "Gemm's C does not broadcast to the output");
                return FALSE;
            }
    }
    return psim__out_set(g, n, 0, dt, 2, out, error);
}

static void count_gemm(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    const PsimOutput *a = psim__input_ranked(g, n, 0);
    if (!a || a->rank != 2)
        return;
    int64_t k = a->dims[psim_node_attr_int(n, "transA", 0) ? 0 : 1];
    double mn = (double)psim__out_elems(n, 0);
    if (k > 0)
        out->flops = 2.0 * mn * (double)k + (psim__input(g, n, 2) ? mn : 0);
}

/* ---- Softmax and reductions ---- */

static gboolean infer_softmax(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *in = psim__input(g, n, 0);
    const PsimAttr *a = psim_node_attr(n, "axis");
    int32_t ax;
    if (a && in->rank >= 0 &&
        !psim__axis(g, n, psim_node_attr_int(n, "axis", -1), in->rank, &ax, error))
        return FALSE;
    return psim__out_set(g, n, 0, in->dtype, in->rank, in->dims, error);
}

/* Reduce*: axes from the attr (all reductions before opset 18) or input 1 (ReduceSum from 13,
 * the others from 18); keepdims; noop_with_empty_axes. */
static gboolean infer_reduce(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *in = psim__input(g, n, 0);
    gboolean keep = psim_node_attr_int(n, "keepdims", 1) != 0;
    gboolean noop = psim_node_attr_int(n, "noop_with_empty_axes", 0) != 0;
    PsimDType dt = in->dtype;
    gboolean arg = g_str_has_prefix(n->op, "Arg");
    if (arg)
        dt = PSIM_DTYPE_INT64;
    int64_t axes[PSIM__MAX_RANK];
    int32_t n_axes = -1;
    const int64_t *av;
    if (arg) {
        axes[0] = psim_node_attr_int(n, "axis", 0);
        n_axes = 1;
    } else if ((n_axes = psim_node_attr_ints(n, "axes", &av)) >= 0) {
        if (n_axes > PSIM__MAX_RANK) {
            psim__error_node(error, g, n, "too many axes (%d)", n_axes);
            return FALSE;
        }
        if (n_axes > 0) /* an empty list has no array */
            memcpy(axes, av, sizeof(int64_t) * (size_t)n_axes);
    } else if (psim__input(g, n, 1)) {
        n_axes = psim__input_ints(g, n, 1, axes, PSIM__MAX_RANK, "axes", error);
        if (n_axes == -2)
            return FALSE;
        if (n_axes < 0) {
            /* Axes computed at run time: with keepdims the rank is still known. */
            if (keep && in->rank >= 0) {
                int64_t d[PSIM__MAX_RANK];
                for (int32_t i = 0; i < in->rank && i < PSIM__MAX_RANK; i++)
                    d[i] = PSIM_DIM_UNKNOWN;
                return psim__out_set(g, n, 0, dt, in->rank, d, error);
            }
            psim__out_unknown(g, n, 0, dt);
            return TRUE;
        }
    }
    if (in->rank < 0 || (in->rank > 0 && !in->dims)) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (n_axes <= 0 && noop)
        return psim__out_set(g, n, 0, dt, in->rank, in->dims, error);
    gboolean red[PSIM__MAX_RANK] = {0};
    if (in->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", in->rank);
        return FALSE;
    }
    if (n_axes <= 0) {
        for (int32_t i = 0; i < in->rank; i++)
            red[i] = TRUE;
    } else {
        for (int32_t i = 0; i < n_axes; i++) {
            int32_t ax;
            if (!psim__axis(g, n, axes[i], MAX(in->rank, arg ? 1 : 0), &ax, error))
                return FALSE;
            if (red[ax]) {
                psim__error_node(error, g, n, "axis %d is repeated", ax);
                return FALSE;
            }
            red[ax] = TRUE;
        }
    }
    int64_t out[PSIM__MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < in->rank; i++) {
        if (!red[i])
            out[r++] = in->dims[i];
        else if (keep)
            out[r++] = 1;
    }
    return psim__out_set(g, n, 0, dt, r, out, error);
}

static void count_reduce(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    out->flops = (double)psim__in_elems(g, n, 0);
}

/* ---- Range ---- */

/* GatherElements: input 1's shape, input 0's dtype. */
static gboolean infer_gather_elements(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *idx = psim__input(g, n, 1);
    return psim__out_set(g, n, 0, psim__input_dtype(g, n, 0), idx->rank, idx->dims, error);
}

/* Input 0's shape and dtype (ScatterElements, ScatterND; EyeLike with its dtype attribute). */
static gboolean infer_like_input(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    PsimDType dt = psim__attr_dtype(n, "dtype", x->dtype);
    return psim__out_set(g, n, 0, dt, x->rank, x->dims, error);
}

/* DepthToSpace (N, C/b^2, H*b, W*b) and SpaceToDepth (N, C*b^2, H/b, W/b). */
static gboolean infer_depth_space(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t b = psim_node_attr_int(n, "blocksize", 0);
    if (b < 1 || b > 65536) {
        psim__error_node(error, g, n, "%s needs a blocksize from 1 to 65536", n->op);
        return FALSE;
    }
    if (x->rank < 0)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error);
    if (x->rank != 4) {
        psim__error_node(error, g, n, "%s needs a 4-D input", n->op);
        return FALSE;
    }
    gboolean d2s = !strcmp(n->op, "DepthToSpace");
    int64_t d[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
    if (d2s) {
        if (d[1] >= 0 && d[1] % (b * b)) {
            psim__error_node(error, g, n, "DepthToSpace: %" G_GINT64_FORMAT " channels are not a multiple of %" G_GINT64_FORMAT,
                             d[1], b * b);
            return FALSE;
        }
        d[1] = d[1] >= 0 ? d[1] / (b * b) : d[1];
        d[2] = d[2] >= 0 ? d[2] * b : d[2];
        d[3] = d[3] >= 0 ? d[3] * b : d[3];
    } else {
        if ((d[2] >= 0 && d[2] % b) || (d[3] >= 0 && d[3] % b)) {
            psim__error_node(error, g, n, "SpaceToDepth: height and width must be multiples of %" G_GINT64_FORMAT, b);
            return FALSE;
        }
        d[1] = d[1] >= 0 ? d[1] * b * b : d[1];
        d[2] = d[2] >= 0 ? d[2] / b : d[2];
        d[3] = d[3] >= 0 ? d[3] / b : d[3];
    }
    return psim__out_set(g, n, 0, x->dtype, 4, d, error);
}

/* GatherND: indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]. */
static gboolean infer_gather_nd(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *ix = psim__input(g, n, 1);
    int64_t bd = psim_node_attr_int(n, "batch_dims", 0);
    if (x->rank < 0 || ix->rank < 1 || ix->dims[ix->rank - 1] < 0)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error);
    int64_t last = ix->dims[ix->rank - 1];
    if (bd < 0 || bd + last > x->rank) {
        psim__error_node(error, g, n, "GatherND: batch_dims %" G_GINT64_FORMAT " and index depth %" G_GINT64_FORMAT
                         " exceed the data's rank %d", bd, last, x->rank);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < ix->rank - 1 && r < PSIM__MAX_RANK; i++)
        d[r++] = ix->dims[i];
    for (int64_t i = bd + last; i < x->rank && r < PSIM__MAX_RANK; i++)
        d[r++] = x->dims[i];
    return psim__out_set(g, n, 0, x->dtype, r, d, error);
}

/* Resize and Upsample: sizes (input 3) when known, else floor(dim * scale) from the scales
 * (input 2; input 1 in the two-input forms; Upsample-7's attribute); the rank otherwise. */
static gboolean infer_resize(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (x->rank < 0)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error);
    int32_t r = x->rank;
    gboolean two = n->n_inputs == 2;
    const PsimTensor *sizes = two ? NULL : psim__input_value(g, n, 3);
    const PsimTensor *scales = psim__input_value(g, n, two ? 1 : 2);
    const PsimAttr *sa = psim_node_attr(n, "scales");
    int64_t d[PSIM__MAX_RANK];
    for (int32_t i = 0; i < r && i < PSIM__MAX_RANK; i++) {
        if (sizes && sizes->n_elems == r)
            d[i] = (int64_t)psim_tensor_get_f64(sizes, i);
        else if (x->dims[i] >= 0 && scales && scales->n_elems == r)
            d[i] = (int64_t)floor((double)x->dims[i] * psim_tensor_get_f64(scales, i));
        else if (x->dims[i] >= 0 && sa && sa->type == PSIM_ATTR_FLOATS && sa->n == r)
            d[i] = (int64_t)floor((double)x->dims[i] * sa->v.floats[i]);
        else
            d[i] = PSIM_DIM_UNKNOWN;
    }
    return psim__out_set(g, n, 0, x->dtype, r, d, error);
}

/* Hann, Hamming and Blackman windows: 1-D of input 0's value, output_datatype (float32). */
static gboolean infer_window(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    int64_t len[1] = {PSIM_DIM_UNKNOWN};
    if (psim__input_ints(g, n, 0, len, 1, "size", error) == -2)
        return FALSE;
    if (len[0] < PSIM_DIM_UNKNOWN || (len[0] < 0 && len[0] != PSIM_DIM_UNKNOWN))
        len[0] = PSIM_DIM_UNKNOWN;
    return psim__out_set(g, n, 0, psim__attr_dtype(n, "output_datatype", PSIM_DTYPE_FLOAT32), 1, len,
                         error);
}

/* OneHot: the indices' shape with depth (input 1's value when known) inserted at axis, the
 * values' dtype. */
static gboolean infer_onehot(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 3, error))
        return FALSE;
    const PsimOutput *ix = psim__input(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 2);
    if (ix->rank < 0 || ix->rank + 1 > PSIM__MAX_RANK)
        return psim__out_set(g, n, 0, dt, PSIM_RANK_UNKNOWN, NULL, error);
    int64_t axis = psim_node_attr_int(n, "axis", -1), r = ix->rank + 1;
    if (axis < -r || axis >= r) {
        psim__error_node(error, g, n, "OneHot axis %" G_GINT64_FORMAT " is out of range", axis);
        return FALSE;
    }
    axis = axis < 0 ? axis + r : axis;
    const PsimTensor *dv = psim__input_value(g, n, 1);
    int64_t depth = dv && dv->n_elems == 1 ? (int64_t)psim_tensor_get_f64(dv, 0) : PSIM_DIM_UNKNOWN;
    int64_t d[PSIM__MAX_RANK];
    for (int64_t i = 0, j = 0; i < r; i++)
        d[i] = i == axis ? depth : ix->dims[j++];
    return psim__out_set(g, n, 0, dt, (int32_t)r, d, error);
}

/* Compress: the axis dim (or the flattened input's) as many as the condition keeps: unknown. */
static gboolean infer_compress(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    const PsimAttr *a = psim_node_attr(n, "axis");
    int64_t unknown = PSIM_DIM_UNKNOWN;
    if (!a || x->rank < 0)
        return psim__out_set(g, n, 0, x->dtype, a ? PSIM_RANK_UNKNOWN : 1, a ? NULL : &unknown, error);
    int64_t axis = psim_node_attr_int(n, "axis", 0);
    if (axis < -x->rank || axis >= x->rank) {
        psim__error_node(error, g, n, "Compress axis %" G_GINT64_FORMAT " is out of range", axis);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[axis < 0 ? axis + x->rank : axis] = PSIM_DIM_UNKNOWN;
    return psim__out_set(g, n, 0, x->dtype, x->rank, d, error);
}

/* NonZero: int64 (rank, count of nonzeros). */
static gboolean infer_nonzero(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t d[2] = {x->rank >= 0 ? x->rank : PSIM_DIM_UNKNOWN, PSIM_DIM_UNKNOWN};
    return psim__out_set(g, n, 0, PSIM_DTYPE_INT64, 2, d, error);
}

/* QuantizeLinear: x's shape, the zero point's dtype (uint8 without one); DequantizeLinear: x's
 * shape, the scale's dtype; DynamicQuantizeLinear: uint8 x's shape, a float scale, a uint8
 * zero point. */
static gboolean infer_quantize(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (!strcmp(n->op, "DynamicQuantizeLinear"))
        return psim__out_set(g, n, 0, PSIM_DTYPE_UINT8, x->rank, x->dims, error) &&
               (n->n_outputs < 2 || psim__out_set(g, n, 1, PSIM_DTYPE_FLOAT32, 0, NULL, error)) &&
               (n->n_outputs < 3 || psim__out_set(g, n, 2, PSIM_DTYPE_UINT8, 0, NULL, error));
    PsimDType dt = !strcmp(n->op, "DequantizeLinear") ? psim__input_dtype(g, n, 1)
                   : psim__input(g, n, 2)             ? psim__input_dtype(g, n, 2)
                                                      : PSIM_DTYPE_UINT8;
    return psim__out_set(g, n, 0, dt, x->rank, x->dims, error);
}

gboolean psim__conv_transpose_geometry(const PsimNode *n, int32_t ns, const int64_t *in,
                                       const int64_t *k, int64_t *stride, int64_t *dil,
                                       int64_t *pad0, int64_t *pad1, int64_t *out, char **why)
{
    const int64_t *st = NULL, *dl = NULL, *pd = NULL, *op = NULL, *os = NULL;
    int32_t nst = psim_node_attr_ints(n, "strides", &st), ndl = psim_node_attr_ints(n, "dilations", &dl);
    int32_t npd = psim_node_attr_ints(n, "pads", &pd), nop = psim_node_attr_ints(n, "output_padding", &op);
    int32_t nos = psim_node_attr_ints(n, "output_shape", &os);
    const char *ap = psim_node_attr_string(n, "auto_pad", "NOTSET");
    gboolean same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    if ((nst >= 0 && nst != ns) || (ndl >= 0 && ndl != ns) || (npd >= 0 && npd != 2 * ns) ||
        (nop >= 0 && nop != ns) || (nos >= 0 && nos != ns && nos != ns + 2)) {
        *why = g_strdup_printf("ConvTranspose attributes do not match %d spatial dims", ns);
        return FALSE;
    }
    for (int32_t i = 0; i < ns; i++) {
        stride[i] = nst > 0 ? st[i] : 1;
        dil[i] = ndl > 0 ? dl[i] : 1;
        int64_t opad = nop > 0 ? op[i] : 0;
        if (stride[i] < 1 || dil[i] < 1 || k[i] < 1 || opad < 0) {
            *why = g_strdup("ConvTranspose strides, dilations and kernel must be >= 1");
            return FALSE;
        }
        int64_t full = stride[i] * (in[i] - 1) + opad + (k[i] - 1) * dil[i] + 1;
        int64_t want = nos > 0 ? os[nos - ns + i] : same ? in[i] * stride[i] : -1;
        if (want >= 0) {
            /* ONNX: SAME_UPPER puts the smaller half first, anything else the larger. */
            int64_t total = full - want; /* negative: the output grows at the end */
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); /* floor(total / 2) */
            pad0[i] = !strcmp(ap, "SAME_UPPER") ? half : total - half;
            pad1[i] = total - pad0[i];
        } else {
            pad0[i] = npd > 0 ? pd[i] : 0;
            pad1[i] = npd > 0 ? pd[ns + i] : 0;
        }
        out[i] = full - pad0[i] - pad1[i];
        if (out[i] < 0) {
            *why = g_strdup_printf("ConvTranspose output dim %d would be negative", i);
            return FALSE;
        }
    }
    return TRUE;
}

/* ConvTranspose: (N, M, out...) with M = W's dim 1 times group. */
static gboolean infer_conv_transpose(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *w = psim__input(g, n, 1);
    if (x->rank < 3 || w->rank != x->rank || x->rank > PSIM__MAX_RANK)
        return psim__out_set(g, n, 0, x->dtype, x->rank >= 0 ? x->rank : PSIM_RANK_UNKNOWN,
                             x->rank >= 0 ? x->dims : NULL, error) || TRUE;
    int32_t ns = x->rank - 2;
    int64_t d[PSIM__MAX_RANK], st[PSIM__MAX_RANK], dl[PSIM__MAX_RANK], p0[PSIM__MAX_RANK], p1[PSIM__MAX_RANK];
    d[0] = x->dims[0];
    d[1] = w->dims[1] >= 0 ? w->dims[1] * psim_node_attr_int(n, "group", 1) : PSIM_DIM_UNKNOWN;
    gboolean known = TRUE;
    for (int32_t i = 0; i < ns; i++)
        known = known && x->dims[2 + i] >= 0 && w->dims[2 + i] >= 0;
    if (!known) {
        for (int32_t i = 0; i < ns; i++)
            d[2 + i] = PSIM_DIM_UNKNOWN;
        return psim__out_set(g, n, 0, x->dtype, x->rank, d, error);
    }
    g_autofree char *why = NULL;
    if (!psim__conv_transpose_geometry(n, ns, x->dims + 2, w->dims + 2, st, dl, p0, p1, d + 2, &why)) {
        psim__error_node(error, g, n, "%s", why);
        return FALSE;
    }
    return psim__out_set(g, n, 0, x->dtype, x->rank, d, error);
}

/* NonMaxSuppression: int64 (selected, 3). Unique: Y (1-D, or the input's rank with the axis
 * unknown) and int64 1-D indices, inverse indices and counts. */
static gboolean infer_nms_unique(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    int64_t unknown = PSIM_DIM_UNKNOWN;
    if (!strcmp(n->op, "NonMaxSuppression")) {
        int64_t d[2] = {PSIM_DIM_UNKNOWN, 3};
        return psim__out_set(g, n, 0, PSIM_DTYPE_INT64, 2, d, error);
    }
    const PsimOutput *x = psim__input(g, n, 0);
    gboolean ok;
    if (psim_node_attr(n, "axis") && x->rank > 0) {
        int64_t axis = psim_node_attr_int(n, "axis", 0), d[PSIM__MAX_RANK];
        if (axis < -x->rank || axis >= x->rank) {
            psim__error_node(error, g, n, "Unique axis %" G_GINT64_FORMAT " is out of range", axis);
            return FALSE;
        }
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[axis < 0 ? axis + x->rank : axis] = PSIM_DIM_UNKNOWN;
        ok = psim__out_set(g, n, 0, x->dtype, x->rank, d, error);
    } else {
        ok = psim__out_set(g, n, 0, x->dtype, 1, &unknown, error);
    }
    for (int32_t k = 1; ok && k < n->n_outputs; k++)
        ok = psim__out_set(g, n, k, PSIM_DTYPE_INT64, 1, &unknown, error);
    return ok;
}

/* RNN, GRU, LSTM: Y (seq, dirs, batch, hidden), or (batch, seq, dirs, hidden) with layout 1;
 * Y_h and Y_c (dirs, batch, hidden), or (batch, dirs, hidden). */
static gboolean infer_rnn(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 3, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    gboolean batch_first = psim_node_attr_int(n, "layout", 0) != 0;
    int64_t dirs = !strcmp(psim_node_attr_string(n, "direction", "forward"), "bidirectional") ? 2 : 1;
    int64_t hid = psim_node_attr_int(n, "hidden_size", PSIM_DIM_UNKNOWN);
    int64_t seq = PSIM_DIM_UNKNOWN, batch = PSIM_DIM_UNKNOWN;
    if (x->rank == 3) {
        seq = x->dims[batch_first ? 1 : 0];
        batch = x->dims[batch_first ? 0 : 1];
    }
    int64_t y[4] = {seq, dirs, batch, hid}, yb[4] = {batch, seq, dirs, hid};
    int64_t h[3] = {dirs, batch, hid}, hb[3] = {batch, dirs, hid};
    gboolean ok = psim__out_set(g, n, 0, x->dtype, 4, batch_first ? yb : y, error);
    for (int32_t k = 1; ok && k < n->n_outputs; k++)
        ok = psim__out_set(g, n, k, x->dtype, 3, batch_first ? hb : h, error);
    return ok;
}

static int32_t einsum_letter(char c)
{
    return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1;
}

/* One term's labels into lab[]; rank is the input's rank (-1 for the output: the ellipsis then
 * stands for `ell` dims). */
static gboolean einsum_term(const char *t, size_t len, int32_t rank, int32_t ell_max, int32_t *lab,
                            int32_t *n, char **why)
{
    int32_t letters = 0;
    gboolean ellipsis = FALSE;
    for (size_t i = 0; i < len; i++)
        if (t[i] == '.') {
            if (ellipsis || i + 2 >= len || t[i + 1] != '.' || t[i + 2] != '.') {
                *why = g_strdup("Einsum: '.' outside a single '...'");
                return FALSE;
            }
            ellipsis = TRUE;
            i += 2;
        } else if (einsum_letter(t[i]) >= 0) {
            letters++;
        } else if (t[i] != ' ') {
            *why = g_strdup_printf("Einsum: '%c' is not a subscript", t[i]);
            return FALSE;
        }
    int32_t ell = rank >= 0 ? rank - letters : ell_max;
    if (ell < 0 || (!ellipsis && rank >= 0 && ell != 0) || letters + (ellipsis ? ell : 0) > PSIM_EINSUM_MAX_DIMS) {
        *why = g_strdup_printf("Einsum: a term has %d subscripts for a rank-%d input", letters, rank);
        return FALSE;
    }
    *n = 0;
    for (size_t i = 0; i < len; i++)
        if (t[i] == '.') {
            for (int32_t k = 0; k < ell; k++)
                lab[(*n)++] = 52 + (ell_max - ell) + k;
            i += 2;
        } else if (einsum_letter(t[i]) >= 0) {
            lab[(*n)++] = einsum_letter(t[i]);
        }
    return TRUE;
}

gboolean psim__einsum_parse(const char *eq, int32_t n_in, const int32_t *ranks, PsimEinsum *e, char **why)
{
    memset(e, 0, sizeof *e);
    if (n_in < 1 || n_in > PSIM_EINSUM_MAX_INPUTS) {
        *why = g_strdup_printf("Einsum of %d inputs (1 to %d)", n_in, PSIM_EINSUM_MAX_INPUTS);
        return FALSE;
    }
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    /* The ellipsis covers the most dims any input gives it. */
    int32_t ell_max = 0, k = 0;
    const char *t = eq;
    for (size_t i = 0; i <= lhs_len; i++)
        if (i == lhs_len || eq[i] == ',') {
            if (k >= n_in) {
                *why = g_strdup("Einsum: more terms than inputs");
                return FALSE;
            }
            int32_t letters = 0;
            for (const char *c = t; c < eq + i; c++)
                letters += einsum_letter(*c) >= 0;
            if (memchr(t, '.', (size_t)(eq + i - t)))
                ell_max = MAX(ell_max, ranks[k] - letters);
            k++;
            t = eq + i + 1;
        }
    if (k != n_in) {
        *why = g_strdup_printf("Einsum: %d terms for %d inputs", k, n_in);
        return FALSE;
    }
    e->n_in = n_in;
    k = 0;
    t = eq;
    for (size_t i = 0; i <= lhs_len; i++)
        if (i == lhs_len || eq[i] == ',') {
            if (!einsum_term(t, (size_t)(eq + i - t), ranks[k], ell_max, e->lab[k], &e->rank[k], why))
                return FALSE;
            k++;
            t = eq + i + 1;
        }
    if (arrow)
        return einsum_term(arrow + 2, strlen(arrow + 2), -1, ell_max, e->out, &e->out_rank, why);
    int32_t used[52 + PSIM_EINSUM_MAX_DIMS] = {0};
    for (int32_t a = 0; a < n_in; a++)
        for (int32_t d = 0; d < e->rank[a]; d++)
            used[e->lab[a][d]]++;
    for (int32_t l = 52; l < 52 + ell_max; l++)
        e->out[e->out_rank++] = l;
    for (int32_t l = 0; l < 52; l++)
        if (used[l] == 1 && e->out_rank < PSIM_EINSUM_MAX_DIMS)
            e->out[e->out_rank++] = l;
    return TRUE;
}

/* Einsum: each output label's size from the inputs (1 only where every input has 1). */
static gboolean infer_einsum(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    int32_t ranks[PSIM_EINSUM_MAX_INPUTS];
    PsimDType dt = psim__input_dtype(g, n, 0);
    for (int32_t k = 0; k < n->n_inputs && k < PSIM_EINSUM_MAX_INPUTS; k++) {
        const PsimOutput *o = psim__input(g, n, k);
        if (!o || o->rank < 0)
            return psim__out_set(g, n, 0, dt, PSIM_RANK_UNKNOWN, NULL, error);
        ranks[k] = o->rank;
    }
    PsimEinsum e;
    g_autofree char *why = NULL;
    if (!psim__einsum_parse(psim_node_attr_string(n, "equation", ""), n->n_inputs, ranks, &e, &why)) {
        psim__error_node(error, g, n, "%s", why);
        return FALSE;
    }
    int64_t d[PSIM_EINSUM_MAX_DIMS];
    for (int32_t i = 0; i < e.out_rank; i++) {
        d[i] = 1;
        for (int32_t k = 0; k < e.n_in; k++)
            for (int32_t j = 0; j < e.rank[k]; j++) {
                int64_t s = psim__input(g, n, k)->dims[j];
                if (e.lab[k][j] == e.out[i] && s != 1)
                    d[i] = s;
            }
    }
    return psim__out_set(g, n, 0, dt, e.out_rank, d, error);
}

/* GridSample: (N, C, grid's H_out, grid's W_out). */
static gboolean infer_grid_sample(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *gr = psim__input(g, n, 1);
    if (x->rank != 4 || gr->rank != 4)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error);
    int64_t d[4] = {x->dims[0], x->dims[1], gr->dims[1], gr->dims[2]};
    return psim__out_set(g, n, 0, x->dtype, 4, d, error);
}

/* Det: the input without its last two dims. */
static gboolean infer_det(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (x->rank < 2)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error);
    return psim__out_set(g, n, 0, x->dtype, x->rank - 2, x->dims, error);
}

/* TopK: values and int64 indices with the axis dim K (input 1's value when known). */
static gboolean infer_topk(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (x->rank < 1)
        return psim__out_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL, error) &&
               (n->n_outputs < 2 || psim__out_set(g, n, 1, PSIM_DTYPE_INT64, PSIM_RANK_UNKNOWN, NULL, error));
    int64_t axis = psim_node_attr_int(n, "axis", -1);
    if (axis < -x->rank || axis >= x->rank) {
        psim__error_node(error, g, n, "TopK axis %" G_GINT64_FORMAT " is out of range", axis);
        return FALSE;
    }
    axis = axis < 0 ? axis + x->rank : axis;
    int64_t k[1] = {PSIM_DIM_UNKNOWN};
    if (psim__input(g, n, 1) && psim__input_ints(g, n, 1, k, 1, "K", error) == -2)
        return FALSE;
    if (!psim__input(g, n, 1))
        k[0] = psim_node_attr_int(n, "k", PSIM_DIM_UNKNOWN);
    int64_t d[PSIM__MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[axis] = k[0];
    return psim__out_set(g, n, 0, x->dtype, x->rank, d, error) &&
           (n->n_outputs < 2 || psim__out_set(g, n, 1, PSIM_DTYPE_INT64, x->rank, d, error));
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: output 0 has the target's shape with
 * reduction "none", else it is a scalar; SoftmaxCrossEntropyLoss's optional output 1 (the log
 * probabilities) has the scores' shape. */
static gboolean infer_loss(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *t = psim__input(g, n, 1);
    const char *red = psim_node_attr_string(n, "reduction", "mean");
    if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean")) {
        psim__error_node(error, g, n, "reduction '%s' is not none, sum or mean", red);
        return FALSE;
    }
    gboolean ok = !strcmp(red, "none") ? psim__out_set(g, n, 0, x->dtype, t->rank, t->dims, error)
                                       : psim__out_set(g, n, 0, x->dtype, 0, NULL, error);
    if (ok && n->n_outputs > 1)
        ok = psim__out_set(g, n, 1, x->dtype, x->rank, x->dims, error);
    return ok;
}

static gboolean infer_range(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_inputs(g, n, 3, error))
        return FALSE;
    PsimDType dt = psim__input_dtype(g, n, 0);
    const PsimTensor *v[3];
    for (int k = 0; k < 3; k++) {
        v[k] = psim__input_value(g, n, k);
        const PsimOutput *o = psim__input_ranked(g, n, k);
        if (o && psim_shape_elems(o->rank, o->dims) > 1) {
            psim__error_node(error, g, n, "Range's inputs must be scalars");
            return FALSE;
        }
    }
    int64_t len = PSIM_DIM_UNKNOWN;
    if (v[0] && v[1] && v[2] && v[0]->n_elems == 1 && v[1]->n_elems == 1 && v[2]->n_elems == 1) {
        double s = psim_tensor_get_f64(v[0], 0), l = psim_tensor_get_f64(v[1], 0),
               d = psim_tensor_get_f64(v[2], 0);
        if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d)) {
            psim__error_node(error, g, n, "Range needs a finite, nonzero delta and finite bounds");
            return FALSE;
        }
        double c = ceil((l - s) / d);
        if (c > (double)PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n, "Range would have an absurd size");
            return FALSE;
        }
        len = c > 0 ? (int64_t)c : 0;
    }
    return psim__out_set(g, n, 0, dt, 1, &len, error);
}

/* ---- stateful: random and variables ---- */

static gboolean infer_random(PsimGraph *g, PsimNode *n, GError **error)
{
    PsimDType dt = psim__attr_dtype(n, "dtype", PSIM_DTYPE_UNDEFINED);
    const int64_t *s;
    int32_t ns = psim_node_attr_ints(n, "shape", &s);
    if (g_str_has_suffix(n->op, "Like")) {
        if (!need_inputs(g, n, 1, error))
            return FALSE;
        const PsimOutput *in = psim__input(g, n, 0);
        return psim__out_set(g, n, 0, dt ? dt : in->dtype, in->rank, in->dims, error);
    }
    if (!dt)
        dt = PSIM_DTYPE_FLOAT32;
    if (ns >= 0)
        return psim__out_set(g, n, 0, dt, ns, s, error);
    /* TensorFlow's random ops take the shape as input 0. */
    int64_t d[PSIM__MAX_RANK];
    int32_t nd =
        psim__input(g, n, 0) ? psim__input_ints(g, n, 0, d, PSIM__MAX_RANK, "shape", error) : -1;
    if (nd == -2)
        return FALSE;
    if (nd >= 0)
        return psim__out_set(g, n, 0, dt, nd, d, error);
    const PsimOutput *sh = psim__input_ranked(g, n, 0);
    if (sh && sh->rank == 1 && sh->dims[0] >= 0 && sh->dims[0] <= PSIM__MAX_RANK) {
        for (int32_t i = 0; i < sh->dims[0]; i++)
            d[i] = PSIM_DIM_UNKNOWN;
        return psim__out_set(g, n, 0, dt, (int32_t)sh->dims[0], d, error);
    }
    psim__out_unknown(g, n, 0, dt);
    return TRUE;
}

static gboolean infer_variable(PsimGraph *g, PsimNode *n, GError **error)
{
    PsimDType dt = psim__attr_dtype(n, "dtype", PSIM_DTYPE_UNDEFINED);
    const PsimAttr *a = psim_node_attr(n, "shape");
    if (!strcmp(n->op, "VarHandleOp"))
        return psim__out_set(g, n, 0, PSIM_DTYPE_UNDEFINED, 0, NULL, error);
    if (a && a->type == PSIM_ATTR_SHAPE && a->v.shape.rank >= 0)
        return psim__out_set(g, n, 0, dt, a->v.shape.rank, a->v.shape.dims, error);
    if (n->n_outputs > 0 && dt)
        n->outputs[0].dtype = dt;
    return TRUE;
}

static gboolean infer_assign(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!strcmp(n->op, "AssignVariableOp"))
        return TRUE;
    if (!strcmp(n->op, "ReadVariableOp")) {
        PsimDType dt = psim__attr_dtype(n, "dtype", PSIM_DTYPE_UNDEFINED);
        if (n->n_outputs > 0 && dt)
            n->outputs[0].dtype = dt;
        return TRUE;
    }
    const PsimOutput *in = psim__input(g, n, 0);
    if (!in)
        return TRUE;
    return psim__out_set(g, n, 0, in->dtype, in->rank, in->dims, error);
}

#define UNARY(name, desc)                                                                          \
    {                                                                                              \
        name, desc, 0, infer_unary, count_elementwise                                              \
    }
#define BINARY(name, desc)                                                                         \
    {                                                                                              \
        name, desc, 0, infer_binary, count_elementwise                                             \
    }

static const PsimOpDef math_ops[] = {
    UNARY("Relu", "max(x, 0)"),
    UNARY("Neg", "-x"),
    UNARY("Abs", "|x|"),
    UNARY("Sqrt", "square root"),
    UNARY("Exp", "e^x"),
    UNARY("Log", "natural logarithm"),
    UNARY("Sigmoid", "1 / (1 + e^-x)"),
    UNARY("Tanh", "hyperbolic tangent"),
    UNARY("Erf", "error function"),
    UNARY("Reciprocal", "1 / x"),
    UNARY("Floor", "round down"),
    UNARY("Ceil", "round up"),
    UNARY("Round", "round half to even"),
    UNARY("Sign", "sign of x"),
    UNARY("Sin", "sine"),
    UNARY("Cos", "cosine"),
    UNARY("LeakyRelu", "x or alpha*x"),
    UNARY("Elu", "exponential linear unit"),
    UNARY("Selu", "scaled exponential linear unit"),
    UNARY("Softplus", "log(1 + e^x)"),
    UNARY("HardSigmoid", "max(0, min(1, alpha*x + beta))"),
    UNARY("Not", "logical not"),
    UNARY("IsNaN", "x != x"),
    UNARY("IsInf", "x is +inf or -inf (detect_positive, detect_negative)"),
    UNARY("Trilu", "lower or upper triangle of the last two dims (upper, diagonal offset k)"),
    UNARY("CumSum", "cumulative sum along an axis (exclusive, reverse)"),
    UNARY("Hardmax", "1 at the first max along an axis, 0 elsewhere"),
    {"GatherElements", "take elements along an axis by an index tensor of the output's shape", 0,
     infer_gather_elements, count_elementwise},
    {"ScatterElements", "data with updates written along an axis at an index tensor", 0,
     infer_like_input, count_elementwise},
    {"Scatter", "ScatterElements before opset 11", 0, infer_like_input, count_elementwise},
    {"ScatterND", "data with updates written at index tuples", 0, infer_like_input,
     count_elementwise},
    {"GatherND", "slices of the data at index tuples", 0, infer_gather_nd, count_elementwise},
    {"EyeLike", "ones on diagonal k of a 2-D shape (dtype attribute or the input's)", 0,
     infer_like_input, count_elementwise},
    {"DepthToSpace", "channels rearranged into blocks of space (DCR or CRD)", 0,
     infer_depth_space, count_elementwise},
    {"SpaceToDepth", "blocks of space rearranged into channels", 0, infer_depth_space,
     count_elementwise},
    {"TopK", "the K largest (or smallest) along an axis, and their indices", 0, infer_topk,
     count_elementwise},
    {"Resize", "nearest, linear or cubic resampling by scales or sizes", 0, infer_resize,
     count_elementwise},
    {"Upsample", "Resize before opset 10", 0, infer_resize, count_elementwise},
    {"HannWindow", "Hann window of a length (periodic or symmetric)", 0, infer_window, count_elementwise},
    {"HammingWindow", "Hamming window of a length", 0, infer_window, count_elementwise},
    {"BlackmanWindow", "Blackman window of a length", 0, infer_window, count_elementwise},
    {"OneHot", "values[1] at each index along a new axis of depth, values[0] elsewhere", 0,
     infer_onehot, count_elementwise},
    {"Compress", "the slices along an axis whose condition is true", PSIM_OP_DATA_SHAPED,
     infer_compress, count_elementwise},
    {"NonZero", "the indices of the nonzero elements, one row per dim", PSIM_OP_DATA_SHAPED,
     infer_nonzero, count_elementwise},
    BINARY("BitShift", "unsigned shift left or right by b (direction)"),
    {"QuantizeLinear", "saturate(round(x / scale) + zero_point)", 0, infer_quantize, count_elementwise},
    {"DequantizeLinear", "(x - zero_point) * scale", 0, infer_quantize, count_elementwise},
    {"DynamicQuantizeLinear", "uint8 quantization with the scale and zero point of x's range", 0,
     infer_quantize, count_elementwise},
    {"MatMulInteger", "(A - a_zero_point) (B - b_zero_point) in int32", 0, infer_matmul, count_matmul},
    {"QLinearMatMul", "quantized MatMul, requantized to the output's scale and zero point", 0,
     infer_matmul, count_matmul},
    {"Det", "determinant of the last two dims", 0, infer_det, count_elementwise},
    {"ConvTranspose", "transposed (fractionally strided) convolution", 0, infer_conv_transpose,
     count_elementwise},
    {"NonMaxSuppression", "boxes kept per batch and class by score, dropping overlaps",
     PSIM_OP_DATA_SHAPED, infer_nms_unique, count_elementwise},
    {"Unique", "the distinct values (or slices), first indices, inverse indices, counts",
     PSIM_OP_DATA_SHAPED, infer_nms_unique, count_elementwise},
    {"RNN", "Elman recurrent layer", 0, infer_rnn, count_elementwise},
    {"GridSample", "samples of X at a grid of normalized coordinates", 0, infer_grid_sample,
     count_elementwise},
    {"Einsum", "sums of products over the labels an equation names", 0, infer_einsum,
     count_elementwise},
    {"GRU", "gated recurrent unit layer", 0, infer_rnn, count_elementwise},
    {"LSTM", "long short-term memory layer", 0, infer_rnn, count_elementwise},
    UNARY("ReverseSequence", "each batch's first seq_lens elements reversed along time_axis"),
    UNARY("MeanVarianceNormalization", "(x - mean) / sqrt(variance) over axes (0, 2, 3)"),
    {"NegativeLogLikelihoodLoss", "-input[n, target[n], ...] weighted, reduced", 0, infer_loss,
     count_elementwise},
    {"SoftmaxCrossEntropyLoss", "NLL of the log-softmax of the scores", 0, infer_loss,
     count_elementwise},
    UNARY("Tan", "tangent"),
    UNARY("Asin", "arcsine"),
    UNARY("Acos", "arccosine"),
    UNARY("Atan", "arctangent"),
    UNARY("Sinh", "hyperbolic sine"),
    UNARY("Cosh", "hyperbolic cosine"),
    UNARY("Asinh", "inverse hyperbolic sine"),
    UNARY("Acosh", "inverse hyperbolic cosine"),
    UNARY("Atanh", "inverse hyperbolic tangent"),
    UNARY("Softsign", "x / (1 + |x|)"),
    UNARY("Shrink", "x - bias where x > lambd, x + bias where x < -lambd, else 0"),
    UNARY("ThresholdedRelu", "x where x > alpha, else 0"),
    UNARY("Celu", "max(0, x) + min(0, alpha (exp(x / alpha) - 1))"),
    UNARY("HardSwish", "x max(0, min(1, x / 6 + 1 / 2))"),
    {"Clip", "clamps to [min, max] (attrs before opset 11, inputs after)", 0, infer_clip,
     count_elementwise},
    {"Cast", "converts to the dtype in 'to'", 0, infer_cast, count_elementwise},
    {"CastLike", "converts to the dtype of input 1", 0, infer_cast_like, count_elementwise},
    BINARY("Add", "a + b, broadcasting"),
    BINARY("Sub", "a - b, broadcasting"),
    BINARY("Mul", "a * b, broadcasting"),
    BINARY("Div", "a / b, broadcasting"),
    BINARY("Pow", "a ^ b, broadcasting"),
    BINARY("Mod", "a mod b, broadcasting"),
    BINARY("PRelu", "x or slope*x, broadcasting"),
    BINARY("Equal", "a == b, broadcasting"),
    BINARY("Less", "a < b, broadcasting"),
    BINARY("Greater", "a > b, broadcasting"),
    BINARY("LessOrEqual", "a <= b, broadcasting"),
    BINARY("GreaterOrEqual", "a >= b, broadcasting"),
    BINARY("And", "logical and, broadcasting"),
    BINARY("Or", "logical or, broadcasting"),
    BINARY("Xor", "logical xor, broadcasting"),
    {"BiasAdd", "TensorFlow: adds a bias along the channel dimension", 0, infer_bias_add,
     count_elementwise},
    {"Sum", "sum of its inputs, broadcasting", 0, infer_variadic, count_elementwise},
    {"Mean", "mean of its inputs, broadcasting", 0, infer_variadic, count_elementwise},
    {"Max", "elementwise max of its inputs, broadcasting", 0, infer_variadic, count_elementwise},
    {"Min", "elementwise min of its inputs, broadcasting", 0, infer_variadic, count_elementwise},
    {"Where", "cond ? x : y, broadcasting", 0, infer_where, count_elementwise},
    {"MatMul", "matrix product with numpy batching (TF transpose_a/transpose_b too)", 0,
     infer_matmul, count_matmul},
    {"Gemm", "alpha*A'*B' + beta*C", 0, infer_gemm, count_gemm},
    {"Softmax", "normalized exponential along an axis", 0, infer_softmax, count_elementwise},
    {"LogSoftmax", "log of Softmax", 0, infer_softmax, count_elementwise},
    {"ReduceMean", "mean over axes", 0, infer_reduce, count_reduce},
    {"ReduceSum", "sum over axes", 0, infer_reduce, count_reduce},
    {"ReduceMax", "max over axes", 0, infer_reduce, count_reduce},
    {"ReduceMin", "min over axes", 0, infer_reduce, count_reduce},
    {"ReduceProd", "product over axes", 0, infer_reduce, count_reduce},
    {"ReduceSumSquare", "sum of squares over axes", 0, infer_reduce, count_reduce},
    {"ReduceL1", "sum of absolute values over axes", 0, infer_reduce, count_reduce},
    {"ReduceL2", "Euclidean norm over axes", 0, infer_reduce, count_reduce},
    {"ReduceLogSum", "log of the sum over axes", 0, infer_reduce, count_reduce},
    {"ReduceLogSumExp", "log of the sum of exponentials over axes", 0, infer_reduce, count_reduce},
    {"ArgMax", "index of the max along an axis", 0, infer_reduce, count_reduce},
    {"ArgMin", "index of the min along an axis", 0, infer_reduce, count_reduce},
    {"Range", "start, start+delta, ... up to limit", 0, infer_range, psim__count_move},
    {"RandomNormal", "normal samples (stateful)", PSIM_OP_STATEFUL, infer_random, psim__count_move},
    {"RandomUniform", "uniform samples (stateful)", PSIM_OP_STATEFUL, infer_random,
     psim__count_move},
    {"RandomNormalLike", "normal samples shaped like the input (stateful)", PSIM_OP_STATEFUL,
     infer_random, psim__count_move},
    {"RandomUniformLike", "uniform samples shaped like the input (stateful)", PSIM_OP_STATEFUL,
     infer_random, psim__count_move},
    {"Variable", "TensorFlow variable (stateful)", PSIM_OP_STATEFUL, infer_variable,
     psim__count_move},
    {"VariableV2", "TensorFlow variable (stateful)", PSIM_OP_STATEFUL, infer_variable,
     psim__count_move},
    {"VarHandleOp", "TensorFlow resource variable handle (stateful)", PSIM_OP_STATEFUL,
     infer_variable, psim__count_move},
    {"ReadVariableOp", "reads a resource variable (stateful)", PSIM_OP_STATEFUL, infer_assign,
     psim__count_move},
    {"Assign", "assigns to a variable (stateful)", PSIM_OP_STATEFUL, infer_assign,
     psim__count_move},
    {"AssignAdd", "adds to a variable (stateful)", PSIM_OP_STATEFUL, infer_assign,
     count_elementwise},
    {"AssignSub", "subtracts from a variable (stateful)", PSIM_OP_STATEFUL, infer_assign,
     count_elementwise},
    {"AssignVariableOp", "assigns to a resource variable (stateful)", PSIM_OP_STATEFUL,
     infer_assign, psim__count_move, NULL, -1},
};

void psim__ops_register_math(void)
{
    psim__ops_register_group(math_ops, G_N_ELEMENTS(math_ops));
}
