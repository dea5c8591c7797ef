/* Index and scan ops: GatherElements, Trilu, CumSum, Range, Hardmax (ONNX semantics). Values
 * move as bytes (any dtype but strings) where the op only moves them; CumSum, Range and
 * Hardmax compute in float32, float64, int32 or int64. */
#include "cpu-private.h"

#include <math.h>

/* Element i of a numeric tensor as a double, and back. */
static double get_num(const PsimTensor *t, int64_t i)
{
    switch (t->dtype) {
    case PSIM_DTYPE_FLOAT32: return ((const float *)t->data)[i];
    case PSIM_DTYPE_FLOAT64: return ((const double *)t->data)[i];
    case PSIM_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    default: return (double)((const int64_t *)t->data)[i];
    }
}

static void set_num(PsimTensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case PSIM_DTYPE_FLOAT32: ((float *)t->data)[i] = (float)v; break;
    case PSIM_DTYPE_FLOAT64: ((double *)t->data)[i] = v; break;
    case PSIM_DTYPE_INT32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    default: ((int64_t *)t->data)[i] = (int64_t)v; break;
    }
}

static int64_t get_index(const PsimTensor *t, int64_t i)
{
    return t->dtype == PSIM_DTYPE_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* out[i...] = data[i...] with dim `axis` replaced by indices[i...] (negative from the end). */
static gboolean run_gather_elements(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *ix = ctx->inputs[1];
    size_t es = psim__cpu_esize(x->dtype);
    int32_t r = x->rank, axis;
    if (!es || r == 0 || ix->rank != r ||
        (ix->dtype != PSIM_DTYPE_INT64 && ix->dtype != PSIM_DTYPE_INT32)) {
        KERR(ctx, error, "GatherElements needs data and int32/int64 indices of one rank >= 1");
        return FALSE;
    }
    if (!psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), r, &axis, error))
        return FALSE;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, ix->dims, error);
    if (!y)
        return FALSE;
    int64_t xs[PSIM_CPU_MAX_RANK], idx[PSIM_CPU_MAX_RANK] = {0};
    int64_t v = 1;
    for (int32_t d = r - 1; d >= 0; d--) {
        xs[d] = v;
        v *= x->dims[d];
    }
    for (int64_t o = 0; o < y->n_elems; o++) {
        int64_t k = get_index(ix, o), dim = x->dims[axis];
        if (k < -dim || k >= dim) {
            KERR(ctx, error, "GatherElements index %" G_GINT64_FORMAT " is out of range [%" G_GINT64_FORMAT
                 ", %" G_GINT64_FORMAT ")", k, -dim, dim);
            return FALSE;
        }
        int64_t off = 0;
        for (int32_t d = 0; d < r; d++) {
            int64_t at = d == axis ? (k < 0 ? k + dim : k) : idx[d];
            if (at >= x->dims[d]) {
                KERR(ctx, error, "GatherElements indices are larger than the data in dim %d", d);
                return FALSE;
            }
            off += at * xs[d];
        }
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)off * es, es);
        for (int32_t d = r - 1; d >= 0; d--) {
            if (++idx[d] < ix->dims[d])
                break;
            idx[d] = 0;
        }
    }
    return TRUE;
}

/* The lower (upper = 0) or upper triangle of each matrix of the last two dims, relative to
 * diagonal k (input 1, default 0); the rest zeros. */
static gboolean run_trilu(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    if (!es || x->rank < 2) {
        KERR(ctx, error, "Trilu needs a tensor of rank >= 2");
        return FALSE;
    }
    int64_t k = 0;
    PsimTensor *kt = psim__cpu_in(ctx, 1);
    if (kt && kt->n_elems == 1)
        k = get_index(kt, 0);
    gboolean upper = psim_node_attr_int(ctx->node, "upper", 1) != 0;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    int64_t mats = rows > 0 && cols > 0 ? x->n_elems / (rows * cols) : 0;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                size_t at = (size_t)((m * rows + i) * cols + j) * es;
                gboolean keep = upper ? j - i >= k : j - i <= k;
                if (keep)
                    memcpy((char *)y->data + at, (const char *)x->data + at, es);
                else
                    memset((char *)y->data + at, 0, es);
            }
    return TRUE;
}

/* Running sums along input 1's axis; exclusive leaves out the element itself, reverse runs
 * from the end. */
static gboolean run_cumsum(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    PsimTensor *at = ctx->inputs[1];
    int32_t axis;
    if (x->rank == 0 || at->n_elems != 1 || !psim__cpu_axis(ctx, get_index(at, 0), x->rank, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "CumSum needs a tensor of rank >= 1 and one axis");
        return FALSE;
    }
    gboolean excl = psim_node_attr_int(ctx->node, "exclusive", 0) != 0;
    gboolean rev = psim_node_attr_int(ctx->node, "reverse", 0) != 0;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x->dims), n = x->dims[axis];
    int64_t inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t c = 0; c < n; c++) {
                int64_t kk = rev ? n - 1 - c : c, e = (o * n + kk) * inner + i;
                double v = get_num(x, e);
                if (!excl)
                    s += v;
                set_num(y, e, s);
                if (excl)
                    s += v;
            }
        }
    return TRUE;
}

/* start, start + delta, ... while below limit (above it for a negative delta). */
static gboolean run_range(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *s = ctx->inputs[0], *l = ctx->inputs[1], *d = ctx->inputs[2];
    if (s->n_elems != 1 || l->n_elems != 1 || d->n_elems != 1 || s->dtype != l->dtype ||
        s->dtype != d->dtype) {
        KERR(ctx, error, "Range needs three scalars of one dtype");
        return FALSE;
    }
    double a = get_num(s, 0), b = get_num(l, 0), step = get_num(d, 0);
    double c = step != 0 ? ceil((b - a) / step) : -1;
    if (!(step != 0) || !isfinite(c) || c > (double)PSIM_MAX_ELEMENTS) {
        KERR(ctx, error, "Range needs a finite, nonzero delta and finite bounds");
        return FALSE;
    }
    int64_t n = c > 0 ? (int64_t)c : 0;
    PsimTensor *y = psim__cpu_out(ctx, 0, s->dtype, 1, &n, error);
    if (!y)
        return FALSE;
    /* Integers add up exactly; floats as start + i * delta, ONNX's formula. */
    if (s->dtype == PSIM_DTYPE_INT64 || s->dtype == PSIM_DTYPE_INT32) {
        int64_t v = (int64_t)a, st = (int64_t)step;
        for (int64_t i = 0; i < n; i++, v += st)
            set_num(y, i, (double)v);
    } else if (s->dtype == PSIM_DTYPE_FLOAT32) {
        float fa = (float)a, fd = (float)step;
        for (int64_t i = 0; i < n; i++)
            ((float *)y->data)[i] = fa + (float)i * fd;
    } else {
        for (int64_t i = 0; i < n; i++)
            set_num(y, i, a + (double)i * step);
    }
    return TRUE;
}

/* 1 at the first maximum along `axis` (opset 13: one axis; before: the input flattened to 2-D
 * at axis), 0 elsewhere. */
static gboolean run_hardmax(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t opset = psim_graph_opset(ctx->graph);
    int32_t axis;
    if (x->rank == 0 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", opset > 0 && opset < 13 ? 1 : -1),
                        x->rank, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "Hardmax needs a tensor of rank >= 1");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    gboolean flat = opset > 0 && opset < 13;
    int64_t outer = psim_shape_elems(axis, x->dims);
    int64_t n = flat ? psim_shape_elems(x->rank - axis, x->dims + axis) : x->dims[axis];
    int64_t inner = flat ? 1 : psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            for (int64_t c = 0; c < n; c++) {
                int64_t e = (o * n + c) * inner + i;
                if (get_num(x, e) > get_num(x, (o * n + best) * inner + i))
                    best = c;
                set_num(y, e, 0);
            }
            if (n > 0)
                set_num(y, (o * n + best) * inner + i, 1);
        }
    return TRUE;
}

void psim__cpu_register_index(void)
{
    static const PsimDType num_types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, PSIM_DTYPE_INT32,
                                          PSIM_DTYPE_INT64, -1};
    psim__cpu_add("GatherElements", "cpu-gather-elements", "take along an axis by an index tensor",
                  run_gather_elements, NULL, NULL);
    psim__cpu_add("Trilu", "cpu-trilu", "lower or upper triangle of the last two dims", run_trilu,
                  NULL, NULL);
    psim__cpu_add("CumSum", "cpu-cumsum", "running sum along an axis", run_cumsum, num_types, NULL);
    psim__cpu_add("Range", "cpu-range", "start, start + delta, ... below limit", run_range,
                  num_types, NULL);
    psim__cpu_add("Hardmax", "cpu-hardmax", "one-hot of the first max along an axis", run_hardmax,
                  num_types, NULL);
}
