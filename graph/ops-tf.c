/* TensorFlow ops with no ONNX-named equivalent in the IR (StridedSlice, Pack, Unpack, Fill,
 * ExpandDims, Select, random ops, TF-only elementwise ops, NHWC Conv2D, DepthwiseConv2dNative,
 * MaxPool and AvgPool, Pad and PadV2, IdentityN): shape and dtype
 * inference, constant values of small shape arithmetic, and FLOP/byte counts. */
#include <string.h>

#include "ops-private.h"

/* Values of shape arithmetic are computed only for tensors up to this many elements. */
#define MAX_VALUE_ELEMS 4096

static gboolean need(PsimGraph *g, PsimNode *n, int32_t k, GError **error)
{
    if (n->n_inputs < k) {
        psim__error_node(error, g, n, "%s needs %d inputs, has %d", n->op, k, n->n_inputs);
        return FALSE;
    }
    for (int32_t i = 0; i < k; i++)
        if (!psim__input(g, n, i)) {
            psim__error_node(error, g, n, "%s: input %d is missing", n->op, i);
            return FALSE;
        }
    return TRUE;
}

static gboolean is_int_dtype(PsimDType t)
{
    return t == PSIM_DTYPE_INT32 || t == PSIM_DTYPE_INT64 || t == PSIM_DTYPE_INT16 ||
           t == PSIM_DTYPE_INT8 || t == PSIM_DTYPE_UINT8 || t == PSIM_DTYPE_UINT16 ||
           t == PSIM_DTYPE_UINT32 || t == PSIM_DTYPE_UINT64;
}

/* A known 1-D (or scalar) integer value of at most max elements. */
static int32_t int_values(const PsimOutput *o, int64_t *out, int32_t max)
{
    if (!o || !o->value || !is_int_dtype(o->value->dtype) || o->value->rank > 1 ||
        o->value->n_elems > max)
        return -1;
    for (int64_t i = 0; i < o->value->n_elems; i++)
        out[i] = psim_tensor_get_i64(o->value, i);
    return (int32_t)o->value->n_elems;
}

static gboolean rank_known(const PsimOutput *o)
{
    return o && o->rank >= 0;
}

/* ---- elementwise ---- */

static gboolean infer_unary(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 1, error))
        return FALSE;
    const PsimOutput *in = psim__input(g, n, 0);
    PsimDType dt = in->dtype;
    if (!strcmp(n->op, "IsInf") || !strcmp(n->op, "IsFinite"))
        dt = PSIM_DTYPE_BOOL;
    psim_graph_output_set(g, n, 0, dt, in->rank, in->dims);
    return TRUE;
}

/* Numpy broadcasting of two shapes; unknown dims stay unknown unless the other is known > 1. */
static gboolean broadcast(PsimGraph *g, PsimNode *n, const PsimOutput *a, const PsimOutput *b,
                          int32_t *rank, int64_t *dims, GError **error)
{
    if (!rank_known(a) || !rank_known(b)) {
        *rank = PSIM_RANK_UNKNOWN;
        return TRUE;
    }
    int32_t r = MAX(a->rank, b->rank);
    for (int32_t i = 0; i < r; i++) {
        int32_t ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == 1)
            dims[i] = db;
        else if (db == 1)
            dims[i] = da;
        else if (da < 0)
            dims[i] = db;
        else if (db < 0 || da == db)
            dims[i] = da;
        else {
            psim__error_node(error, g, n, "shapes do not broadcast: dimension %d is %" G_GINT64_FORMAT
                             " and %" G_GINT64_FORMAT, i, da, db);
            return FALSE;
        }
    }
    *rank = r;
    return TRUE;
}

static gboolean infer_binary(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 2, error))
        return FALSE;
    const PsimOutput *a = psim__input(g, n, 0), *b = psim__input(g, n, 1);
    int64_t dims[64];
    int32_t rank;
    if (a->rank > 64 || b->rank > 64) {
        psim__error_node(error, g, n, "rank over 64");
        return FALSE;
    }
    if (!broadcast(g, n, a, b, &rank, dims, error))
        return FALSE;
    static const char *const cmp[] = {"NotEqual", "ApproximateEqual"};
    PsimDType dt = a->dtype;
    for (guint i = 0; i < G_N_ELEMENTS(cmp); i++)
        if (!strcmp(n->op, cmp[i]))
            dt = PSIM_DTYPE_BOOL;
    psim_graph_output_set(g, n, 0, dt, rank, dims);
    return TRUE;
}

/* TF Select: t and e of one shape; cond of that shape, or a vector over the first dim. */
static gboolean infer_select(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 3, error))
        return FALSE;
    const PsimOutput *t = psim__input(g, n, 1), *e = psim__input(g, n, 2);
    const PsimOutput *src = rank_known(t) ? t : e;
    psim_graph_output_set(g, n, 0, t->dtype ? t->dtype : e->dtype, src->rank, src->dims);
    return TRUE;
}

static uint64_t in_bytes(const PsimGraph *g, const PsimNode *n)
{
    uint64_t b = 0;
    for (int32_t k = 0; k < n->n_inputs; k++) {
        const PsimOutput *o = psim__input(g, n, k);
        if (o)
            b += o->bytes;
    }
    return b;
}

static uint64_t out_bytes(const PsimNode *n)
{
    uint64_t b = 0;
    for (int32_t k = 0; k < n->n_outputs; k++)
        b += n->outputs[k].bytes;
    return b;
}

/* One FLOP per output element. */
static void count_elementwise(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    out->bytes_read = in_bytes(g, n);
    out->bytes_written = out_bytes(n);
    if (n->n_outputs > 0) {
        int64_t e = psim_shape_elems(n->outputs[0].rank, n->outputs[0].dims);
        out->flops = e > 0 ? (double)e : 0;
    }
}

/* Data movement only. */
static void count_move(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    out->bytes_read = in_bytes(g, n);
    out->bytes_written = out_bytes(n);
}

/* Only writes its output (Fill, variables read no tensor data). */
static void count_write(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    (void)g;
    memset(out, 0, sizeof *out);
    out->bytes_written = out_bytes(n);
}

/* ---- StridedSlice ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

gboolean psim__strided_slice_geometry(int32_t r, const int64_t *dims, int32_t k,
                                      const int64_t *begin, const int64_t *end,
                                      const int64_t *strides, uint64_t bm, uint64_t em,
                                      uint64_t elm, uint64_t nam, uint64_t sam, PsimSliceDim *sd,
                                      int64_t *out_dims, int32_t *out_rank_out, char **why)
{
    if (elm & (elm - 1)) {
        *why = g_strdup("StridedSlice has more than one ellipsis");
        return FALSE;
    }
    if (r > 64 || k > 64) {
        *why = g_strdup_printf("StridedSlice of a rank-%d tensor with %d indices (over 64)", r, k);
        return FALSE;
    }
    int32_t out_rank = 0, d = 0;
    for (int32_t i = 0; i < k; i++) {
        uint64_t bit = (uint64_t)1 << i;
        if (elm & bit) {
            int32_t after = 0;
            for (int32_t j = i + 1; j < k; j++)
                after += (nam >> j) & 1;
            int32_t next = MIN(r, r - (k - i) + 1 + after);
            for (; d < next; d++) {
                sd[d] = (PsimSliceDim){0, 1, dims[d]};
                out_dims[out_rank++] = dims[d];
            }
            continue;
        }
        if (nam & bit) {
            out_dims[out_rank++] = 1;
            continue;
        }
        if (d >= r) {
            *why = g_strdup_printf("StridedSlice indexes %d dimensions of a rank-%d tensor", d + 1, r);
            return FALSE;
        }
        int64_t size = dims[d], st = strides[i], b = begin[i], e = end[i];
        if (st == 0) {
            *why = g_strdup_printf("StridedSlice stride %d is zero", i);
            return FALSE;
        }
        if (sam & bit) {
            if (size >= 0) {
                int64_t idx = b < 0 ? b + size : b;
                if (idx < 0 || idx >= size) {
                    *why = g_strdup_printf("StridedSlice index %" G_GINT64_FORMAT
                                           " is out of range for dimension %d of size %" G_GINT64_FORMAT,
                                           b, d, size);
                    return FALSE;
                }
                sd[d] = (PsimSliceDim){idx, 1, 1};
            } else {
                sd[d] = (PsimSliceDim){0, 1, -1};
            }
            d++;
            continue;
        }
        int64_t len = -1, start = 0;
        if (st < -INT64_MAX)
            st = -INT64_MAX; /* as far as any dimension can reach, without overflowing -st */
        if (size >= 0) {
            if (st > 0) {
                b = (bm & bit) ? 0 : clamp64(b < 0 ? b + size : b, 0, size);
                e = (em & bit) ? size : clamp64(e < 0 ? e + size : e, 0, size);
                len = e > b ? (e - b - 1) / st + 1 : 0;
            } else {
                b = (bm & bit) ? size - 1 : clamp64(b < 0 ? b + size : b, -1, size - 1);
                e = (em & bit) ? -1 : clamp64(e < 0 ? e + size : e, -1, size - 1);
                len = b > e ? (b - e - 1) / (-st) + 1 : 0;
            }
            start = b;
        }
        sd[d] = (PsimSliceDim){start, st, len};
        out_dims[out_rank++] = len;
        d++;
    }
    for (; d < r; d++) {
        sd[d] = (PsimSliceDim){0, 1, dims[d]};
        if (out_rank >= 64) {
            *why = g_strdup("StridedSlice output rank exceeds 64");
            return FALSE;
        }
        out_dims[out_rank++] = dims[d];
    }
    if (out_rank > 64) {
        *why = g_strdup("StridedSlice output rank exceeds 64");
        return FALSE;
    }
    *out_rank_out = out_rank;
    return TRUE;
}

static gboolean infer_strided_slice(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 4, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t begin[64], end[64], strides[64];
    int32_t kb = int_values(psim__input(g, n, 1), begin, 64);
    int32_t ke = int_values(psim__input(g, n, 2), end, 64);
    int32_t ks = int_values(psim__input(g, n, 3), strides, 64);
    if (!rank_known(x) || kb < 0 || ke < 0 || ks < 0) {
        psim_graph_output_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL);
        return TRUE;
    }
    if (kb != ke || kb != ks) {
        psim__error_node(error, g, n, "begin, end and strides have %d, %d and %d entries", kb, ke, ks);
        return FALSE;
    }
    int32_t r = x->rank, out_rank = 0;
    PsimSliceDim sd[64];
    int64_t out_dims[128];
    g_autofree char *why = NULL;
    if (!psim__strided_slice_geometry(
            r, x->dims, kb, begin, end, strides, (uint64_t)psim_node_attr_int(n, "begin_mask", 0),
            (uint64_t)psim_node_attr_int(n, "end_mask", 0),
            (uint64_t)psim_node_attr_int(n, "ellipsis_mask", 0),
            (uint64_t)psim_node_attr_int(n, "new_axis_mask", 0),
            (uint64_t)psim_node_attr_int(n, "shrink_axis_mask", 0), sd, out_dims, &out_rank, &why)) {
        psim__error_node(error, g, n, "%s", why);
        return FALSE;
    }
    psim_graph_output_set(g, n, 0, x->dtype, out_rank, out_dims);
    /* Shape arithmetic: slice a known value. */
    const PsimTensor *v = x->value;
    int64_t ne = psim_shape_elems(out_rank, out_dims);
    if (v && ne >= 0 && ne <= MAX_VALUE_ELEMS && v->dtype != PSIM_DTYPE_STRING) {
        g_autoptr(PsimTensor) t = psim_tensor_new(v->dtype, out_rank, out_dims, NULL);
        if (!t)
            return TRUE;
        size_t es = psim_dtype_size(v->dtype);
        int64_t idx[64] = {0};
        for (int64_t o = 0; o < ne; o++) {
            int64_t off = 0;
            for (int32_t j = 0; j < r; j++)
                off = off * v->dims[j] + sd[j].start + idx[j] * sd[j].step;
            memcpy((char *)t->data + o * es, (const char *)v->data + off * es, es);
            for (int32_t j = r - 1; j >= 0; j--) {
                if (++idx[j] < sd[j].len)
                    break;
                idx[j] = 0;
            }
        }
        psim_graph_output_value_set(g, n, 0, t);
    }
    return TRUE;
}

/* ---- Pack / Unpack ---- */

static gboolean infer_pack(PsimGraph *g, PsimNode *n, GError **error)
{
    if (n->n_inputs < 1 || !need(g, n, n->n_inputs, error)) {
        if (n->n_inputs < 1)
            psim__error_node(error, g, n, "Pack needs at least one input");
        return FALSE;
    }
    const PsimOutput *first = NULL;
    for (int32_t i = 0; i < n->n_inputs && !first; i++)
        if (rank_known(psim__input(g, n, i)))
            first = psim__input(g, n, i);
    PsimDType dt = psim__input(g, n, 0)->dtype;
    if (!first) {
        psim_graph_output_set(g, n, 0, dt, PSIM_RANK_UNKNOWN, NULL);
        return TRUE;
    }
    int32_t r = first->rank;
    if (r >= 64) {
        psim__error_node(error, g, n, "Pack of rank-%d tensors", r);
        return FALSE;
    }
    int64_t axis = psim_node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += r + 1;
    if (axis < 0 || axis > r) {
        psim__error_node(error, g, n, "Pack axis %" G_GINT64_FORMAT " is out of range for rank %d",
                         psim_node_attr_int(n, "axis", 0), r);
        return FALSE;
    }
    int64_t dims[64];
    for (int32_t j = 0; j < r; j++)
        dims[j] = first->dims[j];
    for (int32_t i = 0; i < n->n_inputs; i++) {
        const PsimOutput *o = psim__input(g, n, i);
        if (!rank_known(o))
            continue;
        if (o->rank != r) {
            psim__error_node(error, g, n, "Pack inputs have ranks %d and %d", r, o->rank);
            return FALSE;
        }
        for (int32_t j = 0; j < r; j++) {
            if (dims[j] < 0)
                dims[j] = o->dims[j];
            else if (o->dims[j] >= 0 && o->dims[j] != dims[j]) {
                psim__error_node(error, g, n, "Pack inputs differ in dimension %d", j);
                return FALSE;
            }
        }
    }
    int64_t od[65];
    for (int32_t j = 0, k = 0; j <= r; j++)
        od[j] = j == axis ? n->n_inputs : dims[k++];
    /* Checked: stacking N inputs can take a shape past 2^36 elements. */
    if (!psim__out_set(g, n, 0, dt, r + 1, od, error))
        return FALSE;
    /* Values: all inputs known and of one dtype. */
    int64_t ne = psim_shape_elems(r + 1, od);
    if (ne < 0 || ne > MAX_VALUE_ELEMS || dt == PSIM_DTYPE_STRING)
        return TRUE;
    for (int32_t i = 0; i < n->n_inputs; i++) {
        const PsimOutput *o = psim__input(g, n, i);
        if (!o->value || o->value->dtype != dt)
            return TRUE;
    }
    g_autoptr(PsimTensor) t = psim_tensor_new(dt, r + 1, od, NULL);
    if (!t)
        return TRUE;
    size_t es = psim_dtype_size(dt);
    int64_t outer = 1, inner = 1;
    for (int32_t j = 0; j < axis; j++)
        outer *= dims[j];
    for (int32_t j = (int32_t)axis; j < r; j++)
        inner *= dims[j];
    for (int64_t a = 0; a < outer; a++)
        for (int32_t i = 0; i < n->n_inputs; i++)
            memcpy((char *)t->data + ((a * n->n_inputs + i) * inner) * es,
                   (const char *)psim__input(g, n, i)->value->data + a * inner * es,
                   (size_t)inner * es);
    psim_graph_output_value_set(g, n, 0, t);
    return TRUE;
}

static int32_t unpack_outputs(const PsimNode *n)
{
    int64_t num = psim_node_attr_int(n, "num", 1);
    return num >= 0 && num <= 4096 ? (int32_t)num : 1;
}

static gboolean infer_unpack(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t num = psim_node_attr_int(n, "num", n->n_outputs);
    if (num != n->n_outputs) {
        psim__error_node(error, g, n, "Unpack num %" G_GINT64_FORMAT " but %d outputs", num,
                         n->n_outputs);
        return FALSE;
    }
    if (!rank_known(x)) {
        for (int32_t k = 0; k < n->n_outputs; k++)
            psim_graph_output_set(g, n, k, x->dtype, PSIM_RANK_UNKNOWN, NULL);
        return TRUE;
    }
    int32_t r = x->rank;
    int64_t axis = psim_node_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += r;
    if (axis < 0 || axis >= r || r > 64) {
        psim__error_node(error, g, n, "Unpack axis %" G_GINT64_FORMAT " is out of range for rank %d",
                         psim_node_attr_int(n, "axis", 0), r);
        return FALSE;
    }
    if (x->dims[axis] >= 0 && x->dims[axis] != num) {
        psim__error_node(error, g, n, "Unpack num %" G_GINT64_FORMAT " but dimension %" G_GINT64_FORMAT
                         " is %" G_GINT64_FORMAT, num, axis, x->dims[axis]);
        return FALSE;
    }
    int64_t dims[64];
    for (int32_t j = 0, k = 0; j < r; j++)
        if (j != axis)
            dims[k++] = x->dims[j];
    for (int32_t k = 0; k < n->n_outputs; k++)
        psim_graph_output_set(g, n, k, x->dtype, r - 1, dims);
    return TRUE;
}

/* ---- Fill, ExpandDims ---- */

/* The shape a Fill or a random op makes from its shape input: known values, the known parts
 * of a shape built from Shape/Concat/Pack with an unknown batch, or just its length. */
static gboolean shape_from_input(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dt, GError **error)
{
    int64_t dims[64];
    int32_t r = psim__input_partial_ints(g, n, k, dims, 64, "shape", error);
    if (r == -2)
        return FALSE;
    if (r < 0) {
        psim_graph_output_set(g, n, 0, dt, PSIM_RANK_UNKNOWN, NULL);
        return TRUE;
    }
    int64_t known = 1;
    for (int32_t j = 0; j < r; j++) {
        if (dims[j] == PSIM__UNKNOWN_VALUE) {
            dims[j] = PSIM_DIM_UNKNOWN;
            continue;
        }
        if (dims[j] < 0) {
            psim__error_node(error, g, n, "%s dimension %d is negative", n->op, j);
            return FALSE;
        }
        if (dims[j] > 0 && known > PSIM_MAX_ELEMENTS / dims[j]) {
            psim__error_node(error, g, n, "%s shape is too large (over 2^36 elements)", n->op);
            return FALSE;
        }
        known *= dims[j] ? dims[j] : 1;
    }
    psim_graph_output_set(g, n, 0, dt, r, dims);
    return TRUE;
}

static gboolean infer_fill(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 2, error))
        return FALSE;
    return shape_from_input(g, n, 0, psim__input(g, n, 1)->dtype, error);
}

static gboolean infer_expand_dims(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t ax[1];
    if (!rank_known(x) || int_values(psim__input(g, n, 1), ax, 1) != 1) {
        psim_graph_output_set(g, n, 0, x->dtype, PSIM_RANK_UNKNOWN, NULL);
        return TRUE;
    }
    int32_t r = x->rank;
    int64_t a = ax[0] < 0 ? ax[0] + r + 1 : ax[0];
    if (a < 0 || a > r || r >= 64) {
        psim__error_node(error, g, n, "ExpandDims axis %" G_GINT64_FORMAT " is out of range for rank %d",
                         ax[0], r);
        return FALSE;
    }
    int64_t dims[65];
    for (int32_t j = 0, k = 0; j <= r; j++)
        dims[j] = j == a ? 1 : x->dims[k++];
    psim_graph_output_set(g, n, 0, x->dtype, r + 1, dims);
    if (x->value && x->value->dtype != PSIM_DTYPE_STRING && x->value->n_elems <= MAX_VALUE_ELEMS) {
        g_autoptr(PsimTensor) t = psim_tensor_new(x->value->dtype, r + 1, dims, NULL);
        if (t) {
            memcpy(t->data, x->value->data, x->value->nbytes);
            psim_graph_output_value_set(g, n, 0, t);
        }
    }
    return TRUE;
}

/* ---- TF convolution and pooling, NHWC ---- */

/* One spatial axis: output size and begin pad for input size in, window k, stride s, dilation d. */
static gboolean tf_axis(const char *padding, int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0,
                        int64_t p1, int64_t *out, int64_t *pad0)
{
    int64_t span = (k - 1) * d + 1;
    if (!strcmp(padding, "SAME")) {
        *out = (in + s - 1) / s;
        int64_t total = MAX((*out - 1) * s + span - in, 0);
        *pad0 = total / 2;
        return TRUE;
    }
    if (!strcmp(padding, "EXPLICIT")) {
        in += p0 + p1;
        *pad0 = p0;
    } else {
        *pad0 = 0;
    }
    *out = in >= span ? (in - span) / s + 1 : 0;
    return TRUE;
}

gboolean psim__tf_window(const PsimNode *n, const int64_t *x, const int64_t *filter, PsimTfWindow *w,
                         char **why)
{
    const char *fmt = psim_node_attr_string(n, "data_format", "NHWC");
    if (strcmp(fmt, "NHWC")) {
        *why = g_strdup_printf("%s with data_format %s: only NHWC is supported", n->op, fmt);
        return FALSE;
    }
    gboolean conv = filter != NULL;
    const int64_t *ks = NULL;
    if (!conv && (psim_node_attr_ints(n, "ksize", &ks) != 4 || ks[0] != 1 || ks[3] != 1)) {
        *why = g_strdup_printf("%s: ksize must be [1, kh, kw, 1]", n->op);
        return FALSE;
    }
    int64_t kh = conv ? filter[0] : ks[1], kw = conv ? filter[1] : ks[2];
    const int64_t *st = NULL, *dl = NULL, *ep = NULL;
    int32_t ns = psim_node_attr_ints(n, "strides", &st);
    int32_t nd = conv ? psim_node_attr_ints(n, "dilations", &dl) : -1;
    const char *padding = psim_node_attr_string(n, "padding", "VALID");
    int32_t ne = psim_node_attr_ints(n, "explicit_paddings", &ep);
    if (ns != 4 || st[0] != 1 || st[3] != 1 || st[1] < 1 || st[2] < 1) {
        *why = g_strdup_printf("%s: strides must be [1, sh, sw, 1] with sh, sw >= 1", n->op);
        return FALSE;
    }
    if (nd >= 0 && (nd != 4 || dl[0] != 1 || dl[3] != 1 || dl[1] < 1 || dl[2] < 1)) {
        *why = g_strdup_printf("%s: dilations must be [1, dh, dw, 1] with dh, dw >= 1", n->op);
        return FALSE;
    }
    gboolean expl = !strcmp(padding, "EXPLICIT");
    if ((strcmp(padding, "SAME") && strcmp(padding, "VALID") && !expl) || (expl && ne != 8) || kh < 1 || kw < 1) {
        *why = g_strdup_printf("%s: padding '%s' with %d explicit_paddings and a %" G_GINT64_FORMAT " x %"
                               G_GINT64_FORMAT " window is not SAME, VALID or EXPLICIT with 8 values", n->op,
                               padding, MAX(ne, 0), kh, kw);
        return FALSE;
    }
    for (int32_t i = 0; expl && i < 8; i++)
        if (ep[i] < 0 || ((i < 2 || i >= 6) && ep[i])) {
            *why = g_strdup_printf("%s: explicit_paddings must be 0 on N and C and >= 0", n->op);
            return FALSE;
        }
    *w = (PsimTfWindow){.kh = kh, .kw = kw, .sh = st[1], .sw = st[2], .dh = nd >= 0 ? dl[1] : 1,
                        .dw = nd >= 0 ? dl[2] : 1};
    tf_axis(padding, x[1], kh, w->sh, w->dh, expl ? ep[2] : 0, expl ? ep[3] : 0, &w->Ho, &w->pt);
    tf_axis(padding, x[2], kw, w->sw, w->dw, expl ? ep[4] : 0, expl ? ep[5] : 0, &w->Wo, &w->pl);
    return TRUE;
}

/* The window of n over its known input shape, the channels of its output in *c_out; FALSE when
 * shapes are unknown (outputs stay unknown) or, with *error and *bad, when they do not fit. */
static gboolean tf_window_of(PsimGraph *g, PsimNode *n, PsimTfWindow *w, int64_t *c_out, GError **error,
                             gboolean *bad)
{
    *bad = FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    gboolean conv = strcmp(n->op, "TfMaxPool") && strcmp(n->op, "AvgPool");
    if (x->rank >= 0 && x->rank != 4) {
        psim__error_node(error, g, n, "%s needs a 4-D NHWC input, not rank %d", n->op, x->rank);
        *bad = TRUE;
        return FALSE;
    }
    if (x->rank != 4)
        return FALSE;
    for (int i = 0; i < 4; i++)
        if (x->dims[i] < 0)
            return FALSE;
    const PsimOutput *f = conv ? psim__input(g, n, 1) : NULL;
    *c_out = x->dims[3];
    if (conv) {
        if (f->rank != 4 || f->dims[0] < 0 || f->dims[1] < 0 || f->dims[2] < 0 || f->dims[3] < 0)
            return FALSE;
        if (f->dims[2] != x->dims[3]) {
            psim__error_node(error, g, n, "%s: the filter has %" G_GINT64_FORMAT " input channels, the input %"
                             G_GINT64_FORMAT, n->op, f->dims[2], x->dims[3]);
            *bad = TRUE;
            return FALSE;
        }
        *c_out = !strcmp(n->op, "DepthwiseConv2dNative") ? f->dims[2] * f->dims[3] : f->dims[3];
    }
    g_autofree char *why = NULL;
    if (!psim__tf_window(n, x->dims, f ? f->dims : NULL, w, &why)) {
        psim__error_node(error, g, n, "%s", why);
        *bad = TRUE;
        return FALSE;
    }
    return TRUE;
}

static gboolean infer_tf_window(PsimGraph *g, PsimNode *n, GError **error)
{
    gboolean conv = strcmp(n->op, "TfMaxPool") && strcmp(n->op, "AvgPool");
    if (!need(g, n, conv ? 2 : 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    PsimTfWindow w;
    int64_t c;
    gboolean bad;
    if (!tf_window_of(g, n, &w, &c, error, &bad)) {
        if (bad)
            return FALSE;
        psim_graph_output_set(g, n, 0, x->dtype, x->rank == 4 ? 4 : PSIM_RANK_UNKNOWN,
                              (int64_t[]){x->rank == 4 ? x->dims[0] : -1, -1, -1, -1});
        return TRUE;
    }
    psim_graph_output_set(g, n, 0, x->dtype, 4, (int64_t[]){x->dims[0], w.Ho, w.Wo, c});
    return TRUE;
}

/* Convolutions: 2 FLOPs per multiply-add (a depthwise output reads one input channel); pools one
 * per window element. */
static void count_tf_window(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    count_move(g, n, out);
    const PsimOutput *y = n->n_outputs > 0 ? &n->outputs[0] : NULL;
    int64_t e = y ? psim_shape_elems(y->rank, y->dims) : -1;
    if (e <= 0)
        return;
    const PsimNode *src = n->n_inputs > 1 && n->inputs[1].node >= 0 ? psim_graph_node(g, n->inputs[1].node) : NULL;
    const PsimOutput *f = src ? &src->outputs[n->inputs[1].index] : NULL;
    if (!strcmp(n->op, "Conv2D") && f && f->rank == 4 && f->dims[0] > 0 && f->dims[1] > 0 && f->dims[2] > 0)
        out->flops = 2.0 * (double)e * (double)(f->dims[0] * f->dims[1] * f->dims[2]);
    else if (!strcmp(n->op, "DepthwiseConv2dNative") && f && f->rank == 4 && f->dims[0] > 0 && f->dims[1] > 0)
        out->flops = 2.0 * (double)e * (double)(f->dims[0] * f->dims[1]);
    else {
        const int64_t *ks = NULL;
        if (psim_node_attr_ints(n, "ksize", &ks) == 4)
            out->flops = (double)e * (double)(ks[1] * ks[2]);
    }
}

/* Pad / PadV2 with their paddings (input 1, [rank, 2]) known. */
static gboolean infer_tf_pad(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 2, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0), *p = psim__input(g, n, 1);
    if (!rank_known(x) || x->rank > 16 || !p->value || !is_int_dtype(p->value->dtype) ||
        p->value->n_elems != 2 * (int64_t)x->rank) {
        psim_graph_output_set(g, n, 0, x->dtype, x->rank, x->dims);
        if (x->rank >= 0)
            for (int32_t i = 0; i < x->rank; i++)
                n->outputs[0].dims[i] = PSIM_DIM_UNKNOWN;
        return TRUE;
    }
    int64_t dims[16];
    for (int32_t i = 0; i < x->rank; i++) {
        int64_t a = psim_tensor_get_i64(p->value, 2 * i), b = psim_tensor_get_i64(p->value, 2 * i + 1);
        if (a < 0 || b < 0 || a > PSIM_MAX_ELEMENTS || b > PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n, "%s: paddings must be >= 0 and at most 2^36", n->op);
            return FALSE;
        }
        dims[i] = x->dims[i] < 0 ? PSIM_DIM_UNKNOWN : x->dims[i] + a + b;
    }
    psim_graph_output_set(g, n, 0, x->dtype, x->rank, dims);
    return TRUE;
}

/* IdentityN: output k is input k. */
static gboolean infer_identity_n(PsimGraph *g, PsimNode *n, GError **error)
{
    if (n->n_outputs > n->n_inputs) {
        psim__error_node(error, g, n, "IdentityN has %d outputs for %d inputs", n->n_outputs, n->n_inputs);
        return FALSE;
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        const PsimOutput *x = psim__input(g, n, k);
        if (!x) {
            psim__error_node(error, g, n, "IdentityN: input %d is missing", k);
            return FALSE;
        }
        psim_graph_output_set(g, n, k, x->dtype, x->rank, x->dims);
    }
    return TRUE;
}

static int32_t identity_n_outputs(const PsimNode *n)
{
    return MAX(n->n_inputs, 1);
}

/* ---- TF random ops: shape from input 0's value, dtype from the attr ---- */

static gboolean infer_random(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need(g, n, 1, error))
        return FALSE;
    const PsimAttr *a = psim_node_attr(n, "dtype");
    PsimDType dt = a && a->type == PSIM_ATTR_DTYPE ? a->v.dt : PSIM_DTYPE_FLOAT32;
    return shape_from_input(g, n, 0, dt, error);
}

#define UNARY(name, desc) {name, desc, 0, infer_unary, count_elementwise}
#define BINARY(name, desc) {name, desc, 0, infer_binary, count_elementwise}

static const PsimOpDef tf_ops[] = {
    {"StridedSlice", "TF strided slice with begin/end/ellipsis/new-axis/shrink masks", 0,
     infer_strided_slice, count_move},
    {"Pack", "TF stack of N tensors along a new axis", 0, infer_pack, count_move},
    {"Unpack", "TF unstack along an axis into num outputs", 0, infer_unpack, count_move,
     unpack_outputs},
    {"Fill", "TF tensor of a shape (input 0) filled with a scalar (input 1)", 0, infer_fill,
     count_write},
    {"ExpandDims", "TF insert a size-1 dimension", 0, infer_expand_dims, count_move},
    {"Select", "TF select by condition (v1 broadcasting)", 0, infer_select, count_elementwise},
    {"RandomStandardNormal", "TF normal samples of a shape given as input", PSIM_OP_STATEFUL,
     infer_random, count_write},
    {"TruncatedNormal", "TF truncated normal samples of a shape given as input",
     PSIM_OP_STATEFUL, infer_random, count_write},
    {"Conv2D", "TF 2-D convolution, NHWC input, HWIO filter", 0, infer_tf_window, count_tf_window},
    {"DepthwiseConv2dNative", "TF depthwise convolution, NHWC input, [kh, kw, C, multiplier] filter", 0,
     infer_tf_window, count_tf_window},
    {"TfMaxPool", "TF max pooling, NHWC", 0, infer_tf_window, count_tf_window},
    {"AvgPool", "TF average pooling, NHWC (padding left out of each average)", 0, infer_tf_window,
     count_tf_window},
    {"TfPad", "TF zero padding by a [rank, 2] paddings input", 0, infer_tf_pad, count_move},
    {"PadV2", "TF constant padding by a [rank, 2] paddings input and a scalar value", 0, infer_tf_pad,
     count_move},
    {"IdentityN", "TF identity of N tensors", 0, infer_identity_n, count_move, identity_n_outputs},
    UNARY("Rsqrt", "1/sqrt(x)"), UNARY("Square", "x*x"), UNARY("Relu6", "min(max(x,0),6)"),
    UNARY("Softsign", "x/(1+|x|)"), UNARY("Log1p", "log(1+x)"), UNARY("Expm1", "exp(x)-1"),
    UNARY("ZerosLike", "zeros"), UNARY("OnesLike", "ones"), UNARY("PreventGradient", "identity"),
    UNARY("IsInf", "isinf"), UNARY("IsFinite", "isfinite"),
    BINARY("SquaredDifference", "(a-b)^2"), BINARY("FloorDiv", "floor(a/b)"),
    BINARY("TruncateDiv", "trunc(a/b)"), BINARY("NotEqual", "a!=b"),
    BINARY("Atan2", "atan2(a,b)"), BINARY("DivNoNan", "a/b or 0"),
};

gboolean psim__ops_tf_owns(const char *op)
{
    for (guint i = 0; i < G_N_ELEMENTS(tf_ops); i++)
        if (!strcmp(op, tf_ops[i].name))
            return TRUE;
    return FALSE;
}

void psim__ops_register_tf(void)
{
    psim__ops_register_group(tf_ops, G_N_ELEMENTS(tf_ops));
}
