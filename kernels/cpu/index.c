/* Index and scan ops: GatherElements, ScatterElements (Scatter), GatherND, ScatterND, Trilu,
 * CumSum, Range, Hardmax, EyeLike, DepthToSpace, SpaceToDepth, TopK, OneHot, Compress, NonZero,
 * and the Hann, Hamming and Blackman windows (ONNX semantics). Values
 * move as bytes (any dtype but strings) where the op only moves them; CumSum, Range and
 * Hardmax compute in float32, float64, int32 or int64. */
#include "cpu-private.h"

#include <math.h>

/* Element i as an integer, for every dtype: integers exactly (uint64 above INT64_MAX saturates),
 * floats truncated and saturated, NaN as 0. */
static int64_t get_index(const PsimTensor *t, int64_t i)
{
    switch (t->dtype) {
    case PSIM_DTYPE_INT64: return ((const int64_t *)t->data)[i];
    case PSIM_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    case PSIM_DTYPE_INT16: return ((const int16_t *)t->data)[i];
    case PSIM_DTYPE_INT8: return ((const int8_t *)t->data)[i];
    case PSIM_DTYPE_UINT8: case PSIM_DTYPE_BOOL: return ((const uint8_t *)t->data)[i];
    case PSIM_DTYPE_UINT16: return ((const uint16_t *)t->data)[i];
    case PSIM_DTYPE_UINT32: return ((const uint32_t *)t->data)[i];
    case PSIM_DTYPE_UINT64: {
        uint64_t v = ((const uint64_t *)t->data)[i];
        return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
    }
    default: {
        double v = psim_tensor_get_f64(t, i);
        return isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    }
    }
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
    psim__cpu_strides(r, x->dims, xs);
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
        psim__cpu_next_index(r, ix->dims, idx);
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
                double v = psim_tensor_get_f64(x, e);
                if (!excl)
                    s += v;
                psim_tensor_set_f64(y, e, s);
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
    double a = psim_tensor_get_f64(s, 0), b = psim_tensor_get_f64(l, 0), step = psim_tensor_get_f64(d, 0);
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
            psim_tensor_set_f64(y, i, (double)v);
    } else if (s->dtype == PSIM_DTYPE_FLOAT32) {
        float fa = (float)a, fd = (float)step;
        for (int64_t i = 0; i < n; i++)
            ((float *)y->data)[i] = fa + (float)i * fd;
    } else {
        for (int64_t i = 0; i < n; i++)
            psim_tensor_set_f64(y, i, a + (double)i * step);
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
                if (psim_tensor_get_f64(x, e) > psim_tensor_get_f64(x, (o * n + best) * inner + i))
                    best = c;
                psim_tensor_set_f64(y, e, 0);
            }
            if (n > 0)
                psim_tensor_set_f64(y, (o * n + best) * inner + i, 1);
        }
    return TRUE;
}

/* Scatter reductions: 0 none (a copy), 1 add, 2 mul, 3 max, 4 min; -1 with an error otherwise. */
static int scatter_mode(PsimKernelCtx *ctx, GError **error)
{
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *red = psim_node_attr_string(ctx->node, "reduction", "none");
    for (int i = 0; i < 5; i++)
        if (!strcmp(red, names[i]))
            return i;
    KERR(ctx, error, "%s reduction '%s' is not none, add, mul, max or min", ctx->node->op, red);
    return -1;
}

static double scatter_apply(int mode, double old, double upd)
{
    return mode == 1 ? old + upd : mode == 2 ? old * upd : mode == 3 ? fmax(old, upd) : fmin(old, upd);
}

/* ScatterElements (and the older Scatter): a copy of data with updates[i...] written at dim
 * `axis` = indices[i...]; reduction none, add or mul. */
static gboolean run_scatter_elements(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *ix = ctx->inputs[1], *up = ctx->inputs[2];
    size_t es = psim__cpu_esize(x->dtype);
    int32_t r = x->rank, axis;
    if (!es || r == 0 || ix->rank != r || up->rank != r || up->dtype != x->dtype ||
        memcmp(ix->dims, up->dims, sizeof(int64_t) * (size_t)r) ||
        (ix->dtype != PSIM_DTYPE_INT64 && ix->dtype != PSIM_DTYPE_INT32)) {
        KERR(ctx, error, "%s needs data, integer indices and updates of one rank, the last two of one shape",
             ctx->node->op);
        return FALSE;
    }
    if (!psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), r, &axis, error))
        return FALSE;
    int mode = scatter_mode(ctx, error);
    if (mode < 0)
        return FALSE;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, x->dims, error);
    if (!y)
        return FALSE;
    memcpy(y->data, x->data, x->nbytes);
    int64_t xs[PSIM_CPU_MAX_RANK], idx[PSIM_CPU_MAX_RANK] = {0};
    psim__cpu_strides(r, x->dims, xs);
    for (int64_t u = 0; u < up->n_elems; u++) {
        int64_t k = get_index(ix, u), dim = x->dims[axis], off = 0;
        if (k < -dim || k >= dim) {
            KERR(ctx, error, "%s index %" G_GINT64_FORMAT " is out of range", ctx->node->op, k);
            return FALSE;
        }
        for (int32_t d = 0; d < r; d++) {
            int64_t at = d == axis ? (k < 0 ? k + dim : k) : idx[d];
            if (at >= x->dims[d]) {
                KERR(ctx, error, "%s updates are larger than the data in dim %d", ctx->node->op, d);
                return FALSE;
            }
            off += at * xs[d];
        }
        if (mode == 0)
            memcpy((char *)y->data + (size_t)off * es, (const char *)up->data + (size_t)u * es, es);
        else
            psim_tensor_set_f64(y, off, scatter_apply(mode, psim_tensor_get_f64(y, off), psim_tensor_get_f64(up, u)));
        psim__cpu_next_index(r, up->dims, idx);
    }
    return TRUE;
}

/* The offset of the slice that index tuple t (depth q) of batch b picks in data. */
static gboolean nd_offset(PsimKernelCtx *ctx, const PsimTensor *x, const PsimTensor *ix, int64_t t,
                          int64_t q, int64_t bd, int64_t batch, const int64_t *xs, int64_t *off,
                          GError **error)
{
    int64_t o = 0, rem = batch;
    for (int64_t d = bd - 1; d >= 0; d--) { /* the batch position */
        o += (rem % x->dims[d]) * xs[d];
        rem /= x->dims[d];
    }
    for (int64_t j = 0; j < q; j++) {
        int64_t k = get_index(ix, t * q + j), dim = x->dims[bd + j];
        if (k < -dim || k >= dim) {
            KERR(ctx, error, "%s index %" G_GINT64_FORMAT " is out of range for dim %" G_GINT64_FORMAT,
                 ctx->node->op, k, bd + j);
            return FALSE;
        }
        o += (k < 0 ? k + dim : k) * xs[bd + j];
    }
    *off = o;
    return TRUE;
}

static gboolean nd_check(PsimKernelCtx *ctx, const PsimTensor *x, const PsimTensor *ix, int64_t bd,
                         GError **error)
{
    if (!psim__cpu_esize(x->dtype) || ix->rank < 1 ||
        (ix->dtype != PSIM_DTYPE_INT64 && ix->dtype != PSIM_DTYPE_INT32) || bd < 0 ||
        bd + ix->dims[ix->rank - 1] > x->rank || bd >= ix->rank) {
        KERR(ctx, error, "%s needs integer index tuples no deeper than the data", ctx->node->op);
        return FALSE;
    }
    for (int64_t d = 0; d < bd; d++)
        if (ix->dims[d] != x->dims[d]) {
            KERR(ctx, error, "%s: batch dim %" G_GINT64_FORMAT " differs", ctx->node->op, d);
            return FALSE;
        }
    return TRUE;
}

/* GatherND: for each index tuple (last dim of indices), the slice of data it names. */
static gboolean run_gather_nd(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *ix = ctx->inputs[1];
    int64_t bd = psim_node_attr_int(ctx->node, "batch_dims", 0);
    if (!nd_check(ctx, x, ix, bd, error))
        return FALSE;
    int64_t q = ix->dims[ix->rank - 1], od[PSIM_CPU_MAX_RANK];
    int32_t orank = 0;
    if ((ix->rank - 1) + (x->rank - bd - q) > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "GatherND output of rank over %d", PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    for (int32_t i = 0; i < ix->rank - 1; i++)
        od[orank++] = ix->dims[i];
    for (int64_t i = bd + q; i < x->rank; i++)
        od[orank++] = x->dims[i];
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, orank, od, error);
    if (!y)
        return FALSE;
    size_t es = psim__cpu_esize(x->dtype);
    int64_t xs[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, xs);
    int64_t slice = psim_shape_elems(x->rank - bd - q, x->dims + bd + q);
    int64_t tuples = q ? ix->n_elems / q : psim_shape_elems(ix->rank - 1, ix->dims);
    int64_t per_batch = psim_shape_elems(ix->rank - 1 - bd, ix->dims + bd);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off;
        if (!nd_offset(ctx, x, ix, t, q, bd, per_batch ? t / per_batch : 0, xs, &off, error))
            return FALSE;
        memcpy((char *)y->data + (size_t)(t * slice) * es, (const char *)x->data + (size_t)off * es,
               (size_t)slice * es);
    }
    return TRUE;
}

/* ScatterND: a copy of data with each update slice written (or added, multiplied) where its
 * index tuple points. */
static gboolean run_scatter_nd(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *ix = ctx->inputs[1], *up = ctx->inputs[2];
    if (!nd_check(ctx, x, ix, 0, error))
        return FALSE;
    int64_t q = ix->dims[ix->rank - 1];
    int64_t slice = psim_shape_elems(x->rank - q, x->dims + q);
    int64_t tuples = q ? ix->n_elems / q : psim_shape_elems(ix->rank - 1, ix->dims);
    if (up->dtype != x->dtype || up->n_elems != tuples * slice) {
        KERR(ctx, error, "ScatterND updates must be %" G_GINT64_FORMAT " elements of the data's dtype",
             tuples * slice);
        return FALSE;
    }
    int mode = scatter_mode(ctx, error);
    if (mode < 0)
        return FALSE;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    memcpy(y->data, x->data, x->nbytes);
    size_t es = psim__cpu_esize(x->dtype);
    int64_t xs[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, xs);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off;
        if (!nd_offset(ctx, x, ix, t, q, 0, 0, xs, &off, error))
            return FALSE;
        if (mode == 0)
            memcpy((char *)y->data + (size_t)off * es, (const char *)up->data + (size_t)(t * slice) * es,
                   (size_t)slice * es);
        else
            for (int64_t i = 0; i < slice; i++)
                psim_tensor_set_f64(y, off + i, scatter_apply(mode, psim_tensor_get_f64(y, off + i), psim_tensor_get_f64(up, t * slice + i)));
    }
    return TRUE;
}

/* EyeLike: zeros of the input's 2-D shape with ones on diagonal k. */
static gboolean run_eye_like(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    PsimDType dt = psim__attr_dtype(ctx->node, "dtype", x->dtype);
    if (x->rank != 2 || (dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64 &&
                         dt != PSIM_DTYPE_INT32 && dt != PSIM_DTYPE_INT64)) {
        KERR(ctx, error, "EyeLike makes 2-D float32, float64, int32 or int64 tensors");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, 2, x->dims, error);
    if (!y)
        return FALSE;
    int64_t k = psim_node_attr_int(ctx->node, "k", 0);
    memset(y->data, 0, y->nbytes);
    for (int64_t i = 0; i < x->dims[0]; i++)
        if (i + k >= 0 && i + k < x->dims[1])
            psim_tensor_set_f64(y, i * x->dims[1] + i + k, 1);
    return TRUE;
}

/* DepthToSpace (DCR: depth, column, row order of the channel split; CRD: column, row, depth)
 * and SpaceToDepth (DCR's inverse), as one index permutation. */
static gboolean run_depth_space(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    int64_t b = psim_node_attr_int(ctx->node, "blocksize", 0);
    gboolean d2s = !strcmp(ctx->node->op, "DepthToSpace");
    gboolean crd = d2s && !strcmp(psim_node_attr_string(ctx->node, "mode", "DCR"), "CRD");
    if (!es || x->rank != 4 || b < 1 || b > 65536 || (d2s && x->dims[1] % (b * b)) ||
        (!d2s && (x->dims[2] % b || x->dims[3] % b))) {
        KERR(ctx, error, "%s needs a 4-D input whose dims divide by the blocksize", ctx->node->op);
        return FALSE;
    }
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t od[4] = {N, d2s ? C / (b * b) : C * b * b, d2s ? H * b : H / b, d2s ? W * b : W / b};
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, 4, od, error);
    if (!y)
        return FALSE;
    /* In the space (large) layout: channel c of the small count, row h, column w; in the depth
     * layout: channel (bh, bw, c) by mode. */
    int64_t Cs = d2s ? od[1] : C, Hs = d2s ? od[2] : H, Ws = d2s ? od[3] : W;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < Cs; c++)
            for (int64_t h = 0; h < Hs; h++)
                for (int64_t w = 0; w < Ws; w++) {
                    int64_t bh = h % b, bw = w % b;
                    int64_t cd = crd ? (c * b + bh) * b + bw : (bh * b + bw) * Cs + c;
                    int64_t space = ((n * Cs + c) * Hs + h) * Ws + w;
                    int64_t depth = ((n * Cs * b * b + cd) * (Hs / b) + h / b) * (Ws / b) + w / b;
                    int64_t src = d2s ? depth : space, dst = d2s ? space : depth;
                    memcpy((char *)y->data + (size_t)dst * es, (const char *)x->data + (size_t)src * es, es);
                }
    return TRUE;
}

/* A value and its index, ordered by value (ties: the lower index first): TopK and
 * NonMaxSuppression's candidates. */
typedef struct {
    double v;
    int64_t i;
} Ranked;

static int cmp_largest(const void *a, const void *b)
{
    const Ranked *x = a, *y = b;
    return x->v > y->v ? -1 : x->v < y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

static int cmp_smallest(const void *a, const void *b)
{
    const Ranked *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

static gboolean run_topk(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *kt = ctx->inputs[1];
    int32_t axis;
    if (x->rank == 0 || kt->n_elems != 1 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", -1), x->rank, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "TopK needs a tensor of rank >= 1 and one K");
        return FALSE;
    }
    int64_t k = get_index(kt, 0), n = x->dims[axis];
    if (k < 0 || k > n) {
        KERR(ctx, error, "TopK: K %" G_GINT64_FORMAT " is not in [0, %" G_GINT64_FORMAT "]", k, n);
        return FALSE;
    }
    gboolean largest = psim_node_attr_int(ctx->node, "largest", 1) != 0;
    int64_t od[PSIM_CPU_MAX_RANK];
    memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
    od[axis] = k;
    PsimTensor *vals = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    PsimTensor *idxs = vals && psim__cpu_wants(ctx, 1)
                           ? psim__cpu_out(ctx, 1, PSIM_DTYPE_INT64, x->rank, od, error)
                           : NULL;
    if (!vals || (psim__cpu_wants(ctx, 1) && !idxs))
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x->dims);
    int64_t inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    g_autofree Ranked *row = g_new(Ranked, n + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t c = 0; c < n; c++)
                row[c] = (Ranked){psim_tensor_get_f64(x, (o * n + c) * inner + i), c};
            qsort(row, (size_t)n, sizeof(Ranked), largest ? cmp_largest : cmp_smallest);
            for (int64_t c = 0; c < k; c++) {
                int64_t at = (o * k + c) * inner + i;
                psim_tensor_set_f64(vals, at, row[c].v);
                if (idxs)
                    ((int64_t *)idxs->data)[at] = row[c].i;
            }
        }
    return TRUE;
}

/* Hann, Hamming, Blackman: N points of a window periodic (divisor N) or symmetric (N - 1). */
static gboolean run_window(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *sz = ctx->inputs[0];
    PsimDType dt = psim__attr_dtype(ctx->node, "output_datatype", PSIM_DTYPE_FLOAT32);
    if (sz->n_elems != 1 || (dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64 &&
                             dt != PSIM_DTYPE_INT32 && dt != PSIM_DTYPE_INT64)) {
        KERR(ctx, error, "%s needs one size and a numeric output_datatype", ctx->node->op);
        return FALSE;
    }
    int64_t n = get_index(sz, 0);
    if (n < 0 || n > PSIM_MAX_ELEMENTS) {
        KERR(ctx, error, "%s size %" G_GINT64_FORMAT " is out of range", ctx->node->op, n);
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, 1, &n, error);
    if (!y)
        return FALSE;
    gboolean periodic = psim_node_attr_int(ctx->node, "periodic", 1) != 0;
    double div = periodic ? (double)n : (double)(n - 1);
    const char *op = ctx->node->op;
    for (int64_t i = 0; i < n; i++) {
        double t = div > 0 ? 2 * G_PI * (double)i / div : 0, v;
        if (!strcmp(op, "HannWindow"))
            v = 0.5 - 0.5 * cos(t);
        else if (!strcmp(op, "HammingWindow"))
            v = 25.0 / 46.0 - (21.0 / 46.0) * cos(t);
        else
            v = 0.42 - 0.5 * cos(t) + 0.08 * cos(2 * t);
        psim_tensor_set_f64(y, i, v);
    }
    return TRUE;
}

/* OneHot: values[1] where the index (negative from depth) matches along the new axis. */
static gboolean run_onehot(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *ix = ctx->inputs[0], *dp = ctx->inputs[1], *vals = ctx->inputs[2];
    size_t es = psim__cpu_esize(vals->dtype);
    int32_t r = ix->rank + 1, axis;
    if (dp->n_elems != 1 || vals->n_elems != 2 || !es || r > PSIM_CPU_MAX_RANK ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", -1), r, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "OneHot needs one depth and two values");
        return FALSE;
    }
    double dv = psim_tensor_get_f64(dp, 0);
    int64_t depth = isfinite(dv) && dv >= 0 && dv <= (double)PSIM_MAX_ELEMENTS ? (int64_t)dv : -1;
    if (depth < 0 || depth > PSIM_MAX_ELEMENTS) {
        KERR(ctx, error, "OneHot depth %" G_GINT64_FORMAT " is out of range", depth);
        return FALSE;
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t d = 0, j = 0; d < r; d++)
        od[d] = d == axis ? depth : ix->dims[j++];
    PsimTensor *y = psim__cpu_out(ctx, 0, vals->dtype, r, od, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, od), inner = psim_shape_elems(r - axis - 1, od + axis + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < depth; c++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = get_index(ix, o * inner + i);
                if (k < 0)
                    k += depth;
                memcpy((char *)y->data + (size_t)((o * depth + c) * inner + i) * es,
                       (const char *)vals->data + (k == c ? es : 0), es);
            }
    return TRUE;
}

/* Compress: the slices along axis (the flattened input without one) where condition is true. */
static gboolean run_compress(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *cond = ctx->inputs[1];
    size_t es = psim__cpu_esize(x->dtype);
    gboolean has_axis = psim_node_attr(ctx->node, "axis") != NULL;
    int32_t axis = 0;
    if (!es || cond->dtype != PSIM_DTYPE_BOOL || cond->rank != 1 ||
        (has_axis && (x->rank == 0 ||
                      !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), x->rank, &axis, error)))) {
        if (error && !*error)
            KERR(ctx, error, "Compress needs a 1-D bool condition and a valid axis");
        return FALSE;
    }
    int64_t flat = x->n_elems;
    int32_t r = has_axis ? x->rank : 1;
    const int64_t *dims = has_axis ? x->dims : &flat;
    int64_t n = dims[axis], keep = 0;
    const uint8_t *c = cond->data;
    for (int64_t i = 0; i < MIN(n, cond->n_elems); i++)
        keep += c[i] != 0;
    int64_t od[PSIM_CPU_MAX_RANK];
    memcpy(od, dims, sizeof(int64_t) * (size_t)r);
    od[axis] = keep;
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, od, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, dims), inner = psim_shape_elems(r - axis - 1, dims + axis + 1);
    size_t row = (size_t)inner * es;
    int64_t w = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < MIN(n, cond->n_elems); i++)
            if (c[i])
                memcpy((char *)y->data + (size_t)w++ * row,
                       (const char *)x->data + (size_t)(o * n + i) * row, row);
    return TRUE;
}

/* NonZero: the indices of the nonzero elements, (rank, count), in memory order. */
static gboolean run_nonzero(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    if (!es) {
        KERR(ctx, error, "NonZero cannot read %s tensors", psim_dtype_name(x->dtype));
        return FALSE;
    }
    /* By value: -0.0 is zero (a bytewise test would count it). */
    int64_t cnt = 0;
    for (int64_t i = 0; i < x->n_elems; i++)
        cnt += psim_tensor_get_f64(x, i) != 0;
    int64_t od[2] = {x->rank, cnt};
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_INT64, 2, od, error);
    if (!y)
        return FALSE;
    int64_t *out = y->data, k = 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        if (psim_tensor_get_f64(x, i) == 0)
            continue;
        int64_t rem = i;
        for (int32_t d = x->rank - 1; d >= 0; d--) {
            out[d * cnt + k] = rem % x->dims[d];
            rem /= x->dims[d];
        }
        k++;
    }
    return TRUE;
}

/* MeanVarianceNormalization: (x - mean) / sqrt(E[(x - mean)^2]) over axes (default 0, 2, 3),
 * in double. */
static gboolean run_mvn(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || x->rank < 1) {
        KERR(ctx, error, "MeanVarianceNormalization needs a float32 or float64 tensor");
        return FALSE;
    }
    static const int64_t dflt[3] = {0, 2, 3};
    const int64_t *av = NULL;
    int32_t na = psim_node_attr_ints(ctx->node, "axes", &av);
    if (na < 0) {
        av = dflt;
        na = x->rank >= 4 ? 3 : 0;
    }
    gboolean red[PSIM_CPU_MAX_RANK] = {FALSE};
    for (int32_t i = 0; i < na; i++) {
        int32_t a;
        if (!psim__cpu_axis(ctx, av[i], x->rank, &a, error))
            return FALSE;
        red[a] = TRUE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    /* Each element's group: its index over the kept dims. */
    int64_t groups = 1;
    for (int32_t d = 0; d < x->rank; d++)
        groups *= red[d] ? 1 : x->dims[d];
    g_autofree double *sum = g_new0(double, groups + 1), *sq = g_new0(double, groups + 1);
    g_autofree int64_t *grp = g_new(int64_t, x->n_elems + 1);
    int64_t per = groups ? x->n_elems / groups : 0;
    for (int64_t i = 0; i < x->n_elems; i++) {
        int64_t rem = i, gi = 0, mul = 1;
        for (int32_t d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % x->dims[d];
            rem /= x->dims[d];
            if (!red[d]) {
                gi += c * mul;
                mul *= x->dims[d];
            }
        }
        grp[i] = gi;
        sum[gi] += psim_tensor_get_f64(x, i);
    }
    for (int64_t i = 0; i < x->n_elems; i++) {
        double dv = psim_tensor_get_f64(x, i) - sum[grp[i]] / (double)per;
        sq[grp[i]] += dv * dv;
    }
    for (int64_t i = 0; i < x->n_elems; i++) {
        double mean = sum[grp[i]] / (double)per, var = sq[grp[i]] / (double)per;
        psim_tensor_set_f64(y, i, (psim_tensor_get_f64(x, i) - mean) / (sqrt(var) + 1e-9));
    }
    return TRUE;
}

/* Det: the determinant of each matrix of the last two dims, by LU with partial pivoting. */
static gboolean run_det(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || x->rank < 2 ||
        x->dims[x->rank - 1] != x->dims[x->rank - 2]) {
        KERR(ctx, error, "Det needs square float matrices in the last two dims");
        return FALSE;
    }
    int64_t n = x->dims[x->rank - 1];
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank - 2, x->dims, error);
    if (!y)
        return FALSE;
    g_autofree double *m = g_new(double, n * n + 1);
    for (int64_t b = 0; b < y->n_elems; b++) {
        for (int64_t i = 0; i < n * n; i++)
            m[i] = psim_tensor_get_f64(x, b * n * n + i);
        double det = 1;
        for (int64_t c = 0; c < n && det != 0; c++) {
            int64_t p = c;
            for (int64_t r = c + 1; r < n; r++)
                if (fabs(m[r * n + c]) > fabs(m[p * n + c]))
                    p = r;
            if (m[p * n + c] == 0) {
                det = 0;
                break;
            }
            if (p != c) {
                for (int64_t k = 0; k < n; k++) {
                    double t = m[c * n + k];
                    m[c * n + k] = m[p * n + k];
                    m[p * n + k] = t;
                }
                det = -det;
            }
            det *= m[c * n + c];
            for (int64_t r = c + 1; r < n; r++) {
                double f = m[r * n + c] / m[c * n + c];
                for (int64_t k = c; k < n; k++)
                    m[r * n + k] -= f * m[c * n + k];
            }
        }
        psim_tensor_set_f64(y, b, det);
    }
    return TRUE;
}

/* ReverseSequence: for each batch entry b, its first seq_lens[b] steps along time_axis
 * reversed, the rest kept. */
static gboolean run_reverse_sequence(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *lens = ctx->inputs[1];
    size_t es = psim__cpu_esize(x->dtype);
    int32_t ta, ba;
    if (!es || x->rank < 2 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "time_axis", 0), x->rank, &ta, error) ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "batch_axis", 1), x->rank, &ba, error) ||
        ta == ba || lens->n_elems != x->dims[ba]) {
        if (error && !*error)
            KERR(ctx, error, "ReverseSequence needs distinct time and batch axes and a length per batch");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t xs[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, xs);
    for (int64_t i = 0; i < x->n_elems; i++) {
        int64_t t = (i / xs[ta]) % x->dims[ta], b = (i / xs[ba]) % x->dims[ba];
        int64_t len = CLAMP(get_index(lens, b), 0, x->dims[ta]);
        int64_t src = t < len ? i + (len - 1 - 2 * t) * xs[ta] : i;
        memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)src * es, es);
    }
    return TRUE;
}

/* ConvTranspose: each input position scatters its kernel window into the output, N-D, any
 * group, in double; then the bias. */
static gboolean run_conv_transpose(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *w = ctx->inputs[1], *bias = psim__cpu_in(ctx, 2);
    int32_t r = x->rank, ns = r - 2;
    int64_t group = psim_node_attr_int(ctx->node, "group", 1);
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || r < 3 ||
        r > PSIM_CPU_MAX_RANK || w->rank != r || w->dtype != x->dtype || group < 1 ||
        x->dims[1] != w->dims[0] || x->dims[1] % group) {
        KERR(ctx, error, "ConvTranspose needs X (N, C, ...) and W (C, M/group, ...) of one float dtype");
        return FALSE;
    }
    int64_t st[PSIM_CPU_MAX_RANK], dl[PSIM_CPU_MAX_RANK], p0[PSIM_CPU_MAX_RANK], p1[PSIM_CPU_MAX_RANK],
        od[PSIM_CPU_MAX_RANK];
    g_autofree char *why = NULL;
    if (!psim__conv_transpose_geometry(ctx->node, ns, x->dims + 2, w->dims + 2, st, dl, p0, p1, od + 2, &why)) {
        KERR(ctx, error, "%s", why);
        return FALSE;
    }
    int64_t N = x->dims[0], C = x->dims[1], Mg = w->dims[1], M = Mg * group, Cg = C / group;
    od[0] = N;
    od[1] = M;
    if (bias && bias->n_elems != M) {
        KERR(ctx, error, "ConvTranspose bias has %" G_GINT64_FORMAT " values for %" G_GINT64_FORMAT
             " channels", bias->n_elems, M);
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, od, error);
    if (!y)
        return FALSE;
    int64_t in_sp = psim_shape_elems(ns, x->dims + 2), out_sp = psim_shape_elems(ns, od + 2);
    int64_t k_sp = psim_shape_elems(ns, w->dims + 2);
    if (x->dtype == PSIM_DTYPE_FLOAT32 && ns == 2) {
        PsimConvT2d c = {N, C, group, Mg, {x->dims[2], x->dims[3]}, {w->dims[2], w->dims[3]},
                         {od[2], od[3]}, {st[0], st[1]}, {dl[0], dl[1]}, {p0[0], p0[1]}};
        return psim__cpu_conv_transpose_2d(&c, x->data, w->data, bias ? bias->data : NULL,
                                           y->data, error);
    }
    g_autofree double *acc = g_new0(double, N * M * out_sp + 1);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            int64_t g = c / Cg;
            for (int64_t ip = 0; ip < in_sp; ip++) {
                double xv = psim_tensor_get_f64(x, (n * C + c) * in_sp + ip);
                if (xv == 0)
                    continue;
                int64_t iidx[PSIM_CPU_MAX_RANK], rem = ip;
                for (int32_t d = ns - 1; d >= 0; d--) {
                    iidx[d] = rem % x->dims[2 + d];
                    rem /= x->dims[2 + d];
                }
                for (int64_t kp = 0; kp < k_sp; kp++) {
                    int64_t rk = kp, op = 0;
                    gboolean in = TRUE;
                    int64_t kidx[PSIM_CPU_MAX_RANK];
                    for (int32_t d = ns - 1; d >= 0; d--) {
                        kidx[d] = rk % w->dims[2 + d];
                        rk /= w->dims[2 + d];
                    }
                    for (int32_t d = 0; d < ns && in; d++) {
                        int64_t o = iidx[d] * st[d] + kidx[d] * dl[d] - p0[d];
                        in = o >= 0 && o < od[2 + d];
                        op = op * od[2 + d] + o;
                    }
                    if (!in)
                        continue;
                    for (int64_t m = 0; m < Mg; m++)
                        acc[(n * M + g * Mg + m) * out_sp + op] += xv * psim_tensor_get_f64(w, (c * Mg + m) * k_sp + kp);
                }
            }
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t op = 0; op < out_sp; op++) {
                int64_t at = (n * M + m) * out_sp + op;
                psim_tensor_set_f64(y, at, acc[at] + (bias ? psim_tensor_get_f64(bias, m) : 0));
            }
    return TRUE;
}

/* NonMaxSuppression: per batch and class, boxes by descending score (ties: lower index), each
 * kept unless its IoU with a kept one exceeds iou_threshold, scores at most score_threshold
 * dropped, at most max_output_boxes_per_class kept; output rows (batch, class, box). */
static void box_corners(const PsimTensor *bx, int64_t at, gboolean center, double *c)
{
    double v[4];
    for (int k = 0; k < 4; k++)
        v[k] = psim_tensor_get_f64(bx, at + k);
    if (center) { /* x_center, y_center, width, height */
        c[0] = v[1] - v[3] / 2;
        c[1] = v[0] - v[2] / 2;
        c[2] = v[1] + v[3] / 2;
        c[3] = v[0] + v[2] / 2;
    } else { /* y1, x1, y2, x2, either corner first */
        c[0] = MIN(v[0], v[2]);
        c[1] = MIN(v[1], v[3]);
        c[2] = MAX(v[0], v[2]);
        c[3] = MAX(v[1], v[3]);
    }
}

static double iou(const double *a, const double *b)
{
    double h = MIN(a[2], b[2]) - MAX(a[0], b[0]), w = MIN(a[3], b[3]) - MAX(a[1], b[1]);
    if (h <= 0 || w <= 0)
        return 0;
    double inter = h * w, uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    return uni > 0 ? inter / uni : 0;
}

static gboolean run_nms(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *bx = ctx->inputs[0], *sc = ctx->inputs[1];
    PsimTensor *mx = psim__cpu_in(ctx, 2), *it = psim__cpu_in(ctx, 3), *st = psim__cpu_in(ctx, 4);
    if (bx->rank != 3 || bx->dims[2] != 4 || sc->rank != 3 || sc->dims[0] != bx->dims[0] ||
        sc->dims[2] != bx->dims[1]) {
        KERR(ctx, error, "NonMaxSuppression needs boxes (B, N, 4) and scores (B, C, N)");
        return FALSE;
    }
    int64_t B = bx->dims[0], N = bx->dims[1], C = sc->dims[1];
    int64_t max_out = mx && mx->n_elems ? MAX(get_index(mx, 0), 0) : 0;
    double iou_t = it && it->n_elems ? psim_tensor_get_f64(it, 0) : 0;
    gboolean has_st = st && st->n_elems;
    double score_t = has_st ? psim_tensor_get_f64(st, 0) : 0;
    gboolean center = psim_node_attr_int(ctx->node, "center_point_box", 0) != 0;
    g_autoptr(GArray) rows = g_array_new(FALSE, FALSE, sizeof(int64_t));
    g_autofree Ranked *cand = g_new(Ranked, N + 1);
    g_autofree double *corners = g_new(double, 4 * N + 4);
    g_autofree int64_t *kept = g_new(int64_t, N + 1);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < N; i++)
            box_corners(bx, (b * N + i) * 4, center, corners + 4 * i);
        for (int64_t c = 0; c < C; c++) {
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < N; i++) {
                double s = psim_tensor_get_f64(sc, (b * C + c) * N + i);
                if (!has_st || s > score_t)
                    cand[nc++] = (Ranked){s, i};
            }
            qsort(cand, (size_t)nc, sizeof(Ranked), cmp_largest);
            for (int64_t j = 0; j < nc && nk < max_out; j++) {
                gboolean keep = TRUE;
                for (int64_t q = 0; q < nk && keep; q++)
                    keep = iou(corners + 4 * cand[j].i, corners + 4 * kept[q]) <= iou_t;
                if (!keep)
                    continue;
                kept[nk++] = cand[j].i;
                int64_t row[3] = {b, c, cand[j].i};
                g_array_append_vals(rows, row, 3);
            }
        }
    }
    int64_t od[2] = {rows->len / 3, 3};
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_INT64, 2, od, error);
    if (!y)
        return FALSE;
    if (rows->len)
        memcpy(y->data, rows->data, sizeof(int64_t) * rows->len);
    return TRUE;
}

/* Unique: the distinct elements (or slices along axis), sorted ascending (lexicographically for
 * slices) or in order of first occurrence; their first indices, each input's index into them,
 * and their counts. */
typedef struct {
    const PsimTensor *x;
    int64_t inner, n, outer; /* a slice i: elements (o * n + i) * inner + j */
} SliceKey;

static int slice_cmp(const SliceKey *k, int64_t a, int64_t b)
{
    for (int64_t o = 0; o < k->outer; o++)
        for (int64_t j = 0; j < k->inner; j++) {
            double x = psim_tensor_get_f64(k->x, (o * k->n + a) * k->inner + j), y = psim_tensor_get_f64(k->x, (o * k->n + b) * k->inner + j);
            if (x != y)
                return x < y ? -1 : 1;
        }
    return 0;
}

static gint cmp_slice_index(gconstpointer a, gconstpointer b, gpointer key)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int c = slice_cmp(key, x, y);
    return c ? c : (x > y) - (x < y);
}

static gboolean run_unique(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    if (!es || (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64 &&
                x->dtype != PSIM_DTYPE_INT32 && x->dtype != PSIM_DTYPE_INT64)) {
        KERR(ctx, error, "Unique reads float32, float64, int32 or int64");
        return FALSE;
    }
    gboolean has_axis = psim_node_attr(ctx->node, "axis") != NULL;
    int32_t axis = 0;
    if (has_axis && (x->rank == 0 || !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), x->rank, &axis, error))) {
        if (error && !*error)
            KERR(ctx, error, "Unique axis needs a tensor of rank >= 1");
        return FALSE;
    }
    gboolean sorted = psim_node_attr_int(ctx->node, "sorted", 1) != 0;
    SliceKey key = {x, 1, x->n_elems, 1};
    if (has_axis) {
        key.n = x->dims[axis];
        key.outer = psim_shape_elems(axis, x->dims);
        key.inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    }
    int64_t n = key.n;
    if (n > G_MAXINT) {
        KERR(ctx, error, "Unique over %" G_GINT64_FORMAT " slices (at most %d)", n, G_MAXINT);
        return FALSE;
    }
    g_autofree int64_t *order = g_new(int64_t, n + 1);
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    g_qsort_with_data(order, (gint)n, sizeof(int64_t), cmp_slice_index, &key);
    /* Groups of equal slices in sorted order; each group's first (lowest) index. */
    g_autofree int64_t *group_of = g_new(int64_t, n + 1), *first = g_new(int64_t, n + 1),
                       *count = g_new0(int64_t, n + 1), *rank = g_new(int64_t, n + 1);
    int64_t ng = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || slice_cmp(&key, order[i - 1], order[i]) != 0)
            first[ng++] = order[i];
        group_of[order[i]] = ng - 1;
        count[ng - 1]++;
    }
    /* Output order: sorted groups, or by first occurrence. */
    g_autofree int64_t *out_group = g_new(int64_t, ng + 1);
    for (int64_t gi = 0; gi < ng; gi++)
        out_group[gi] = gi;
    if (!sorted) {
        int64_t w = 0;
        for (int64_t i = 0; i < n; i++)
            if (first[group_of[i]] == i)
                out_group[w++] = group_of[i];
    }
    for (int64_t k = 0; k < ng; k++)
        rank[out_group[k]] = k;
    int64_t od[PSIM_CPU_MAX_RANK];
    int32_t orank = has_axis ? x->rank : 1;
    if (has_axis) {
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
        od[axis] = ng;
    } else {
        od[0] = ng;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, orank, od, error);
    if (!y)
        return FALSE;
    for (int64_t o = 0; o < key.outer; o++)
        for (int64_t k = 0; k < ng; k++)
            memcpy((char *)y->data + (size_t)((o * ng + k) * key.inner) * es,
                   (const char *)x->data + (size_t)((o * n + first[out_group[k]]) * key.inner) * es,
                   (size_t)key.inner * es);
    int64_t lens[4] = {0, ng, n, ng};
    for (int32_t out = 1; out < 4; out++) {
        if (!psim__cpu_wants(ctx, out))
            continue;
        PsimTensor *t = psim__cpu_out(ctx, out, PSIM_DTYPE_INT64, 1, &lens[out], error);
        if (!t)
            return FALSE;
        int64_t *v = t->data;
        for (int64_t i = 0; i < lens[out]; i++)
            v[i] = out == 1 ? first[out_group[i]] : out == 2 ? rank[group_of[i]] : count[out_group[i]];
    }
    return TRUE;
}

/* y = x with its dims taken in the order perm (y's dim i is x's dim perm[i]), float32. */
static void permute_f32(const float *x, int32_t rank, const int64_t *dims, const int32_t *perm, float *y)
{
    int64_t xs[PSIM_EINSUM_MAX_DIMS], yd[PSIM_EINSUM_MAX_DIMS], st[PSIM_EINSUM_MAX_DIMS];
    int64_t idx[PSIM_EINSUM_MAX_DIMS] = {0}, total = 1;
    psim__cpu_strides(rank, dims, xs);
    for (int32_t i = 0; i < rank; i++) {
        yd[i] = dims[perm[i]];
        st[i] = xs[perm[i]];
        total *= yd[i];
    }
    if (total == 0)
        return;
    int64_t n = rank ? yd[rank - 1] : 1, ls = rank ? st[rank - 1] : 0;
    for (int64_t row = 0; row < total / n; row++) {
        int64_t base = 0;
        for (int32_t i = 0; i < rank - 1; i++)
            base += idx[i] * st[i];
        for (int64_t j = 0; j < n; j++)
            y[row * n + j] = x[base + j * ls];
        for (int32_t i = rank - 2; i >= 0; i--) {
            if (++idx[i] < yd[i])
                break;
            idx[i] = 0;
        }
    }
}

/* Whether the labels of an operand (lab, n) are the groups g0, g1, g2 (label lists) in that
 * order. */
static gboolean labels_are(const int32_t *lab, int32_t n, const int32_t *g0, int32_t n0, const int32_t *g1,
                           int32_t n1, const int32_t *g2, int32_t n2)
{
    if (n != n0 + n1 + n2)
        return FALSE;
    for (int32_t i = 0; i < n; i++) {
        int32_t want = i < n0 ? g0[i] : i < n0 + n1 ? g1[i - n0] : g2[i - n0 - n1];
        if (lab[i] != want)
            return FALSE;
    }
    return TRUE;
}

/* The order perm that takes an operand's labels (lab, n) to the groups g0, g1, g2. */
static void labels_perm(const int32_t *lab, int32_t n, const int32_t *g0, int32_t n0, const int32_t *g1,
                        int32_t n1, const int32_t *g2, int32_t n2, int32_t *perm)
{
    for (int32_t i = 0; i < n0 + n1 + n2; i++) {
        int32_t want = i < n0 ? g0[i] : i < n0 + n1 ? g1[i - n0] : g2[i - n0 - n1];
        for (int32_t j = 0; j < n; j++)
            if (lab[j] == want)
                perm[i] = j;
    }
}

/* An operand of labels lab as the GEMM takes it: [batch][rows][cols] (the groups b, r, c) as it
 * lies, or [batch][cols][rows] (*trans), else permuted into *buf ([batch][rows][cols]). */
static const float *gemm_operand(const PsimTensor *t, const int32_t *lab, const int32_t *b, int32_t nb,
                                 const int32_t *r, int32_t nr, const int32_t *c, int32_t nc, gboolean *trans,
                                 float **buf)
{
    *trans = labels_are(lab, t->rank, b, nb, c, nc, r, nr);
    if (*trans || labels_are(lab, t->rank, b, nb, r, nr, c, nc))
        return t->data;
    int32_t perm[PSIM_EINSUM_MAX_DIMS];
    labels_perm(lab, t->rank, b, nb, r, nr, c, nc, perm);
    *buf = g_new(float, t->n_elems);
    permute_f32(t->data, t->rank, t->dims, perm, *buf);
    return *buf;
}

/* Two float32 operands whose labels each appear once per operand, with no dim broadcast and no
 * label summed within one operand alone, as a batched GEMM (how ONNX Runtime and PyTorch run
 * them): labels of both operands and the output are the batch, of A and the output the rows
 * (M), of B and the output the columns (N), of both operands only the sum (K). An operand or
 * output whose dims are not already in [batch][M][K] / [batch][K][N] (either of the last two
 * transposed, which the GEMM takes as it is) / [batch][M][N] order is permuted into or out of
 * a buffer. Returns -1 where it does not apply (the general loop below runs), else whether it
 * succeeded. maxvit_t's attention einsums (BGHIJ,BGHJD->BGHID) went from 2.5 s of a 2.7 s step
 * to GEMM speed. */
static int einsum_gemm(PsimKernelCtx *ctx, const PsimEinsum *e, const int64_t *size, GError **error)
{
    enum { NL = 52 + PSIM_EINSUM_MAX_DIMS };
    if (e->n_in != 2 || ctx->inputs[0]->dtype != PSIM_DTYPE_FLOAT32)
        return -1;
    int8_t in_a[NL] = {0}, in_b[NL] = {0}, in_o[NL] = {0};
    const PsimTensor *A = ctx->inputs[0], *B = ctx->inputs[1];
    for (int32_t j = 0; j < e->rank[0]; j++)
        if (in_a[e->lab[0][j]]++ || A->dims[j] != size[e->lab[0][j]])
            return -1;
    for (int32_t j = 0; j < e->rank[1]; j++)
        if (in_b[e->lab[1][j]]++ || B->dims[j] != size[e->lab[1][j]])
            return -1;
    for (int32_t i = 0; i < e->out_rank; i++)
        if (in_o[e->out[i]]++)
            return -1;
    int32_t bl[PSIM_EINSUM_MAX_DIMS], ml[PSIM_EINSUM_MAX_DIMS], nl[PSIM_EINSUM_MAX_DIMS], kl[PSIM_EINSUM_MAX_DIMS];
    int32_t nb = 0, nm = 0, nn = 0, nk = 0;
    int64_t Bt = 1, M = 1, N = 1, K = 1;
    for (int32_t i = 0; i < e->out_rank; i++) {
        int32_t l = e->out[i];
        if (in_a[l] && in_b[l])
            bl[nb++] = l, Bt *= size[l];
        else if (in_a[l])
            ml[nm++] = l, M *= size[l];
        else
            nl[nn++] = l, N *= size[l];
    }
    for (int32_t j = 0; j < e->rank[0]; j++) {
        int32_t l = e->lab[0][j];
        if (!in_o[l] && !in_b[l])
            return -1; /* summed within A alone */
        if (!in_o[l])
            kl[nk++] = l, K *= size[l];
    }
    for (int32_t j = 0; j < e->rank[1]; j++)
        if (!in_o[e->lab[1][j]] && !in_a[e->lab[1][j]])
            return -1; /* summed within B alone */
    if (Bt == 0 || M == 0 || N == 0 || K == 0)
        return -1;
    int64_t od[PSIM_EINSUM_MAX_DIMS];
    for (int32_t i = 0; i < e->out_rank; i++)
        od[i] = size[e->out[i]];
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, e->out_rank, od, error);
    if (!y)
        return FALSE;
    g_autofree float *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
    gboolean ta, tb;
    int32_t perm[PSIM_EINSUM_MAX_DIMS];
    const float *a = gemm_operand(A, e->lab[0], bl, nb, ml, nm, kl, nk, &ta, &abuf);
    const float *b = gemm_operand(B, e->lab[1], bl, nb, kl, nk, nl, nn, &tb, &bbuf);
    gboolean direct = labels_are(e->out, e->out_rank, bl, nb, ml, nm, nl, nn);
    float *c = direct ? y->data : (cbuf = g_new(float, y->n_elems));
    for (int64_t i = 0; i < Bt; i++)
        psim__sgemm(ta, tb, M, N, K, 1.0f, a + i * M * K, ta ? M : K, b + i * K * N, tb ? K : N, 0.0f,
                    c + i * M * N, N);
    if (!direct) {
        /* c is [batch][M][N] in the labels bl, ml, nl: y's order is a permutation of it. */
        int32_t cl[PSIM_EINSUM_MAX_DIMS], nc = 0;
        int64_t cd[PSIM_EINSUM_MAX_DIMS];
        for (int32_t i = 0; i < nb; i++)
            cl[nc++] = bl[i];
        for (int32_t i = 0; i < nm; i++)
            cl[nc++] = ml[i];
        for (int32_t i = 0; i < nn; i++)
            cl[nc++] = nl[i];
        for (int32_t i = 0; i < nc; i++)
            cd[i] = size[cl[i]];
        labels_perm(cl, nc, e->out, e->out_rank, NULL, 0, NULL, 0, perm);
        permute_f32(c, nc, cd, perm, y->data);
    }
    return TRUE;
}

/* Einsum: two float32 operands that are a batched GEMM as one (einsum_gemm); otherwise every
 * combination of the labels visited once, each product of the inputs' elements added into the
 * output element its output labels name (in double). */
static gboolean run_einsum(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    int32_t n_in = ctx->n_inputs, ranks[PSIM_EINSUM_MAX_INPUTS];
    PsimDType dt = ctx->inputs[0]->dtype;
    if (n_in > PSIM_EINSUM_MAX_INPUTS || (dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64 &&
                                          dt != PSIM_DTYPE_INT32 && dt != PSIM_DTYPE_INT64)) {
        KERR(ctx, error, "Einsum takes up to %d numeric inputs", PSIM_EINSUM_MAX_INPUTS);
        return FALSE;
    }
    for (int32_t k = 0; k < n_in; k++) {
        if (!ctx->inputs[k] || ctx->inputs[k]->dtype != dt) {
            KERR(ctx, error, "Einsum input %d is missing or of another dtype", k);
            return FALSE;
        }
        ranks[k] = ctx->inputs[k]->rank;
    }
    PsimEinsum e;
    g_autofree char *why = NULL;
    if (!psim__einsum_parse(psim_node_attr_string(ctx->node, "equation", ""), n_in, ranks, &e, &why)) {
        KERR(ctx, error, "%s", why);
        return FALSE;
    }
    enum { NL = 52 + PSIM_EINSUM_MAX_DIMS };
    int64_t size[NL];
    gboolean seen[NL] = {FALSE};
    for (int32_t l = 0; l < NL; l++)
        size[l] = 1;
    for (int32_t k = 0; k < n_in; k++)
        for (int32_t j = 0; j < e.rank[k]; j++) {
            int32_t l = e.lab[k][j];
            int64_t s = ctx->inputs[k]->dims[j];
            if (seen[l] && size[l] != s && s != 1 && size[l] != 1) {
                KERR(ctx, error, "Einsum: a subscript is %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT, size[l], s);
                return FALSE;
            }
            if (!seen[l] || size[l] == 1)
                size[l] = s;
            seen[l] = TRUE;
        }
    int32_t labels[NL], nl = 0;
    for (int32_t l = 0; l < NL; l++)
        if (seen[l])
            labels[nl++] = l;
    int64_t od[PSIM_EINSUM_MAX_DIMS];
    for (int32_t i = 0; i < e.out_rank; i++) {
        if (!seen[e.out[i]]) {
            KERR(ctx, error, "Einsum: an output subscript is in no input");
            return FALSE;
        }
        od[i] = size[e.out[i]];
    }
    int fast = einsum_gemm(ctx, &e, size, error);
    if (fast >= 0)
        return fast;
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, e.out_rank, od, error);
    if (!y)
        return FALSE;
    g_autofree double *acc = g_new0(double, y->n_elems + 1);
    int64_t total = 1, idx[NL] = {0};
    for (int32_t i = 0; i < nl; i++) {
        if (size[labels[i]] > 0 && total > ((int64_t)1 << 40) / size[labels[i]]) {
            KERR(ctx, error, "Einsum over more than 2^40 combinations of its subscripts");
            return FALSE;
        }
        total *= size[labels[i]];
    }
    for (int64_t c = 0; c < total; c++) {
        double p = 1;
        for (int32_t k = 0; k < n_in && p != 0; k++) {
            const PsimTensor *t = ctx->inputs[k];
            int64_t off = 0;
            for (int32_t j = 0; j < e.rank[k]; j++)
                off = off * t->dims[j] + (t->dims[j] == 1 ? 0 : idx[e.lab[k][j]]);
            p *= psim_tensor_get_f64(t, off);
        }
        int64_t o = 0;
        for (int32_t i = 0; i < e.out_rank; i++)
            o = o * od[i] + idx[e.out[i]];
        acc[o] += p;
        for (int32_t i = nl - 1; i >= 0; i--) {
            if (++idx[labels[i]] < size[labels[i]])
                break;
            idx[labels[i]] = 0;
        }
    }
    for (int64_t i = 0; i < y->n_elems; i++)
        psim_tensor_set_f64(y, i, acc[i]);
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
    psim__cpu_add("ScatterElements", "cpu-scatter-elements", "write updates along an axis",
                  run_scatter_elements, NULL, NULL);
    psim__cpu_add("Scatter", "cpu-scatter-elements", "ScatterElements before opset 11",
                  run_scatter_elements, NULL, NULL);
    psim__cpu_add("GatherND", "cpu-gather-nd", "slices at index tuples", run_gather_nd, NULL, NULL);
    psim__cpu_add("ScatterND", "cpu-scatter-nd", "write slices at index tuples", run_scatter_nd,
                  NULL, NULL);
    psim__cpu_add("EyeLike", "cpu-eye-like", "ones on a diagonal", run_eye_like, NULL, NULL);
    psim__cpu_add("DepthToSpace", "cpu-depth-space", "channels into blocks of space",
                  run_depth_space, NULL, NULL);
    psim__cpu_add("SpaceToDepth", "cpu-depth-space", "blocks of space into channels",
                  run_depth_space, NULL, NULL);
    psim__cpu_add("TopK", "cpu-topk", "the K largest or smallest along an axis", run_topk,
                  num_types, NULL);
    static const char *windows[] = {"HannWindow", "HammingWindow", "BlackmanWindow"};
    for (size_t i = 0; i < G_N_ELEMENTS(windows); i++)
        psim__cpu_add(windows[i], "cpu-window", "signal window of a length", run_window, NULL, NULL);
    psim__cpu_add("OneHot", "cpu-onehot", "one-hot along a new axis", run_onehot, NULL, NULL);
    psim__cpu_add("Compress", "cpu-compress", "slices where a condition holds", run_compress,
                  NULL, NULL);
    psim__cpu_add("NonZero", "cpu-nonzero", "indices of the nonzero elements", run_nonzero, NULL,
                  NULL);
    psim__cpu_add("MeanVarianceNormalization", "cpu-mvn", "zero mean, unit variance over axes",
                  run_mvn, NULL, NULL);
    psim__cpu_add("Det", "cpu-det", "determinant by LU", run_det, NULL, NULL);
    psim__cpu_add("ConvTranspose", "cpu-conv-transpose", "transposed convolution, N-D, grouped",
                  run_conv_transpose, NULL, NULL);
    psim__cpu_add("NonMaxSuppression", "cpu-nms", "greedy non-maximum suppression per class",
                  run_nms, NULL, NULL);
    psim__cpu_add("Unique", "cpu-unique", "distinct values or slices", run_unique, NULL, NULL);
    psim__cpu_add("Einsum", "cpu-einsum", "sums of products named by an equation", run_einsum, NULL,
                  NULL);
    psim__cpu_add("ReverseSequence", "cpu-reverse-sequence", "reverse each batch's first steps",
                  run_reverse_sequence, NULL, NULL);
}
