/* Data-movement and shape kernels: Const/Constant, Identity, Dropout (inference), Reshape,
 * Flatten, Squeeze, Unsqueeze (views, no copy), Transpose, Slice, Pad, Expand, Tile (one
 * index-map gather), Concat, Split, Gather, Shape, Size, ConstantOfShape. Any dtype but strings. */
#include "cpu-private.h"

/* ---------------------------------------------------------------------------------------- */
/* Index-map gather: out[o_0..o_r-1] = in[sum_d map[d][o_d] * stride[d]], or the pad value when
 * any map entry is -1. Covers Transpose (strides permuted), Slice, Pad, Expand and Tile. */

typedef struct {
    int32_t rank;
    int64_t dims[PSIM_CPU_MAX_RANK];
    int64_t stride[PSIM_CPU_MAX_RANK];
    int64_t *map[PSIM_CPU_MAX_RANK];
} IndexMap;

static void imap_free(IndexMap *m)
{
    for (int32_t d = 0; d < m->rank; d++)
        g_free(m->map[d]);
}

#define GATHER_ROW(T)                                                                             \
    {                                                                                             \
        const T *restrict src = (const T *)in + base;                                            \
        T *restrict dst = (T *)out + row * n;                                                     \
        T pv = *(const T *)pad;                                                                   \
        if (pad_row)                                                                              \
            for (int64_t i = 0; i < n; i++)                                                       \
                dst[i] = pv;                                                                      \
        else if (contiguous)                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                dst[i] = src[i + first];                                                          \
        else                                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                dst[i] = lm[i] < 0 ? pv : src[lm[i] * ls];                                        \
    }

static void imap_run(const IndexMap *m, size_t es, const void *in, void *out, const void *pad)
{
    int32_t r = m->rank;
    int64_t total = 1;
    for (int32_t d = 0; d < r; d++)
        total *= m->dims[d];
    if (total == 0)
        return;
    int64_t n = r ? m->dims[r - 1] : 1, rows = total / n;
    static const int64_t zero = 0;
    const int64_t *lm = r ? m->map[r - 1] : &zero;
    int64_t ls = r ? m->stride[r - 1] : 0;
    /* The last dim is a plain run when its map is first, first+1, ... with unit stride. */
    gboolean contiguous = ls == 1;
    int64_t first = lm[0];
    for (int64_t i = 0; i < n && contiguous; i++)
        contiguous = lm[i] == first + i && lm[i] >= 0;
    int64_t idx[PSIM_CPU_MAX_RANK] = {0};
    for (int64_t row = 0; row < rows; row++) {
        int64_t base = 0;
        gboolean pad_row = FALSE;
        for (int32_t d = 0; d < r - 1; d++) {
            int64_t v = m->map[d][idx[d]];
            if (v < 0)
                pad_row = TRUE;
            else
                base += v * m->stride[d];
        }
        switch (es) {
        case 1: GATHER_ROW(uint8_t) break;
        case 2: GATHER_ROW(uint16_t) break;
        case 4: GATHER_ROW(uint32_t) break;
        case 8: GATHER_ROW(uint64_t) break;
        default: g_assert_not_reached();
        }
        for (int32_t d = r - 2; d >= 0; d--) {
            if (++idx[d] < m->dims[d])
                break;
            idx[d] = 0;
        }
    }
}

static gboolean movable(PsimKernelCtx *ctx, const PsimTensor *t, GError **error)
{
    size_t es = psim__cpu_esize(t->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8) {
        KERR(ctx, error, "%s cannot move %s tensors", ctx->node->op, psim_dtype_name(t->dtype));
        return FALSE;
    }
    return TRUE;
}

/* ---------------------------------------------------------------------------------------- */

static gboolean run_const(PsimKernelCtx *ctx, GError **error)
{
    const PsimNode *n = ctx->node;
    if (ctx->n_outputs < 1) {
        KERR(ctx, error, "%s has no output", n->op);
        return FALSE;
    }
    if (n->outputs[0].value)
        return psim__cpu_view(ctx, 0, n->outputs[0].value, n->outputs[0].value->rank,
                              n->outputs[0].value->dims, error) != NULL;
    const PsimAttr *a = psim_node_attr(n, "value");
    if (a && a->type == PSIM_ATTR_TENSOR && a->v.t)
        return psim__cpu_view(ctx, 0, a->v.t, a->v.t->rank, a->v.t->dims, error) != NULL;
    /* Constant (opset 12+) scalar and list forms. */
    const char *forms[] = {"value_float", "value_floats", "value_int", "value_ints"};
    for (int i = 0; i < 4; i++) {
        a = psim_node_attr(n, forms[i]);
        if (!a)
            continue;
        gboolean is_list = a->type == PSIM_ATTR_FLOATS || a->type == PSIM_ATTR_INTS;
        int64_t cnt = is_list ? a->n : 1;
        gboolean fl = a->type == PSIM_ATTR_FLOAT || a->type == PSIM_ATTR_FLOATS;
        PsimTensor *t = psim__cpu_out(ctx, 0, fl ? PSIM_DTYPE_FLOAT32 : PSIM_DTYPE_INT64,
                                      is_list ? 1 : 0, &cnt, error);
        if (!t)
            return FALSE;
        for (int64_t j = 0; j < cnt; j++) {
            if (fl)
                ((float *)t->data)[j] = (float)(is_list ? a->v.floats[j] : a->v.f);
            else
                ((int64_t *)t->data)[j] = is_list ? a->v.ints[j] : a->v.i;
        }
        return TRUE;
    }
    a = psim_node_attr(n, "fill");
    const PsimOutput *o = &n->outputs[0];
    if (a && (a->type == PSIM_ATTR_FLOAT || a->type == PSIM_ATTR_INT)) {
        if (o->rank < 0 || psim_shape_elems(o->rank, o->dims) < 0 ||
            !psim__cpu_esize(o->dtype) || o->dtype == PSIM_DTYPE_BOOL) {
            KERR(ctx, error, "fill needs the output's numeric dtype and full shape");
            return FALSE;
        }
        PsimTensor *t = psim__cpu_out(ctx, 0, o->dtype, o->rank, o->dims, error);
        if (!t)
            return FALSE;
        double v = a->type == PSIM_ATTR_FLOAT ? a->v.f : (double)a->v.i;
        if (t->dtype == PSIM_DTYPE_FLOAT32) {
            float *restrict d = t->data, fv = (float)v;
            for (int64_t i = 0; i < t->n_elems; i++)
                d[i] = fv;
        } else if (t->dtype == PSIM_DTYPE_FLOAT64) {
            for (int64_t i = 0; i < t->n_elems; i++)
                ((double *)t->data)[i] = v;
        } else if (t->dtype == PSIM_DTYPE_INT64) {
            for (int64_t i = 0; i < t->n_elems; i++)
                ((int64_t *)t->data)[i] = (int64_t)v;
        } else if (t->dtype == PSIM_DTYPE_INT32) {
            for (int64_t i = 0; i < t->n_elems; i++)
                ((int32_t *)t->data)[i] = (int32_t)v;
        } else {
            KERR(ctx, error, "fill supports float32, float64, int32 and int64");
            return FALSE;
        }
        return TRUE;
    }
    KERR(ctx, error, "%s has neither a value nor a fill attribute", n->op);
    return FALSE;
}

static gboolean run_identity(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (!strcmp(ctx->node->op, "Dropout")) {
        PsimTensor *tm = psim__cpu_in(ctx, 2);
        if (tm && tm->n_elems == 1 && psim_tensor_get_f64(tm, 0) != 0) {
            PsimTensor *ratio = psim__cpu_in(ctx, 1);
            if (!ratio || psim_tensor_get_f64(ratio, 0) != 0) {
                KERR(ctx, error, "training-mode Dropout (random) is not supported");
                return FALSE;
            }
        }
        if (psim__cpu_wants(ctx, 1)) {
            PsimTensor *mask = psim__cpu_out(ctx, 1, PSIM_DTYPE_BOOL, x->rank, x->dims, error);
            if (!mask)
                return FALSE;
            memset(mask->data, 1, mask->nbytes);
        }
    }
    return psim__cpu_view(ctx, 0, x, x->rank, x->dims, error) != NULL;
}

static gboolean run_noop(PsimKernelCtx *ctx, GError **error)
{
    (void)ctx;
    (void)error;
    return TRUE;
}

static gboolean run_reshape(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    g_autofree int64_t *shape = NULL;
    int32_t n;
    if (!psim__cpu_ints(ctx, 1, "shape", &shape, &n, error))
        return FALSE;
    if (n < 0 || n > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "Reshape needs a shape of at most %d dims", PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    gboolean allowzero = psim_node_attr_int(ctx->node, "allowzero", 0) != 0;
    int64_t dims[PSIM_CPU_MAX_RANK], known = 1;
    int32_t infer = -1;
    for (int32_t i = 0; i < n; i++) {
        dims[i] = shape[i];
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->rank) {
                KERR(ctx, error, "Reshape copies dim %d that the input does not have", i);
                return FALSE;
            }
            dims[i] = x->dims[i];
        }
        if (dims[i] == -1) {
            if (infer >= 0) {
                KERR(ctx, error, "Reshape has two -1 dims");
                return FALSE;
            }
            infer = i;
        } else if (dims[i] < 0) {
            KERR(ctx, error, "Reshape dim %d is negative", i);
            return FALSE;
        } else if (dims[i] && known > PSIM_MAX_ELEMENTS / dims[i]) {
            KERR(ctx, error, "Reshape shape is absurdly large");
            return FALSE;
        } else
            known *= dims[i];
    }
    if (infer >= 0)
        dims[infer] = known ? x->n_elems / known : 0;
    if (psim_shape_elems(n, dims) != x->n_elems) {
        KERR(ctx, error, "Reshape cannot make %" G_GINT64_FORMAT " elements into the shape asked",
             x->n_elems);
        return FALSE;
    }
    return psim__cpu_view(ctx, 0, x, n, dims, error) != NULL;
}

static gboolean run_flatten(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t axis = psim_node_attr_int(ctx->node, "axis", 1);
    if (axis < -(int64_t)x->rank || axis > x->rank) {
        KERR(ctx, error, "Flatten axis %" G_GINT64_FORMAT " is out of range", axis);
        return FALSE;
    }
    if (axis < 0)
        axis += x->rank;
    int64_t d[2] = {psim_shape_elems((int32_t)axis, x->dims), 1};
    d[1] = d[0] ? x->n_elems / d[0] : psim_shape_elems(x->rank - (int32_t)axis, x->dims + axis);
    return psim__cpu_view(ctx, 0, x, 2, d, error) != NULL;
}

static gboolean run_squeeze(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    gboolean unsq = !strcmp(ctx->node->op, "Unsqueeze");
    g_autofree int64_t *axes = NULL;
    int32_t na;
    if (!psim__cpu_ints(ctx, 1, "axes", &axes, &na, error))
        return FALSE;
    int32_t orank = unsq ? x->rank + MAX(na, 0) : x->rank;
    if (orank > PSIM_CPU_MAX_RANK || (unsq && na < 0)) {
        KERR(ctx, error, "%s needs axes and a result of rank at most %d", ctx->node->op,
             PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    gboolean mark[PSIM_CPU_MAX_RANK] = {FALSE};
    for (int32_t i = 0; i < na; i++) {
        int32_t a;
        if (!psim__cpu_axis(ctx, axes[i], orank, &a, error))
            return FALSE;
        if (mark[a] || (!unsq && x->dims[a] != 1)) {
            KERR(ctx, error, "axis %d is repeated or not of size 1", a);
            return FALSE;
        }
        mark[a] = TRUE;
    }
    int64_t d[PSIM_CPU_MAX_RANK];
    int32_t r = 0;
    if (unsq)
        for (int32_t i = 0, j = 0; i < orank; i++)
            d[r++] = mark[i] ? 1 : x->dims[j++];
    else
        for (int32_t i = 0; i < x->rank; i++)
            if (!(na < 0 ? x->dims[i] == 1 : mark[i]))
                d[r++] = x->dims[i];
    return psim__cpu_view(ctx, 0, x, r, d, error) != NULL;
}

/* y (C x R) = x (R x C) transposed, 4-byte elements, in 32 x 32 tiles: a tile's 32 source rows
 * stay in L1 while its destination rows are written in order. */
static void transpose_tiles(const uint32_t *restrict x, uint32_t *restrict y, int64_t R, int64_t C)
{
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < R; i0 += TILE)
        for (int64_t j0 = 0; j0 < C; j0 += TILE) {
            int64_t i1 = MIN(R, i0 + TILE), j1 = MIN(C, j0 + TILE);
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++)
                    y[j * R + i] = x[i * C + j];
        }
}

/* A permutation that, with the input dims it keeps adjacent and in order merged, swaps two
 * groups behind an optional leading one (NCHW <-> NHWC is [N][C][HW] -> [N][HW][C]): *batch,
 * *R and *C of that batched 2-D transpose. FALSE for any other. */
static gboolean transpose_as_2d(int32_t rank, const int64_t *dims, const int64_t *p, int64_t *batch,
                                int64_t *R, int64_t *C)
{
    int64_t start[PSIM_CPU_MAX_RANK], size[PSIM_CPU_MAX_RANK];
    int32_t k = 0;
    for (int32_t d = 0; d < rank; d++) {
        if (d > 0 && p[d] == p[d - 1] + 1) {
            size[k - 1] *= dims[p[d]];
            continue;
        }
        start[k] = p[d];
        size[k++] = dims[p[d]];
    }
    if (k == 2 && start[0] > start[1]) {
        *batch = 1, *R = size[1], *C = size[0];
        return TRUE;
    }
    if (k == 3 && start[0] < start[2] && start[2] < start[1]) {
        *batch = size[0], *R = size[2], *C = size[1];
        return TRUE;
    }
    return FALSE;
}

static gboolean run_transpose(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    const int64_t *perm = NULL;
    int32_t np = psim_node_attr_ints(ctx->node, "perm", &perm);
    int64_t p[PSIM_CPU_MAX_RANK];
    gboolean seen[PSIM_CPU_MAX_RANK] = {FALSE};
    if (np >= 0 && np != x->rank) {
        KERR(ctx, error, "perm has %d entries for rank %d", np, x->rank);
        return FALSE;
    }
    for (int32_t i = 0; i < x->rank; i++) {
        p[i] = np >= 0 ? perm[i] : x->rank - 1 - i;
        if (p[i] < 0 || p[i] >= x->rank || seen[p[i]]) {
            KERR(ctx, error, "perm is not a permutation");
            return FALSE;
        }
        seen[p[i]] = TRUE;
    }
    int64_t s[PSIM_CPU_MAX_RANK], od[PSIM_CPU_MAX_RANK], batch, R, C;
    if (psim_dtype_size(x->dtype) == 4 && transpose_as_2d(x->rank, x->dims, p, &batch, &R, &C)) {
        for (int32_t d = 0; d < x->rank; d++)
            od[d] = x->dims[p[d]];
        PsimTensor *y = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, od, error);
        for (int64_t b = 0; y && b < batch; b++)
            transpose_tiles((const uint32_t *)x->data + b * R * C, (uint32_t *)y->data + b * R * C, R, C);
        return y != NULL;
    }
    psim__cpu_strides(x->rank, x->dims, s);
    IndexMap m = {x->rank};
    for (int32_t d = 0; d < x->rank; d++) {
        od[d] = x->dims[p[d]];
        m.dims[d] = od[d];
        m.stride[d] = s[p[d]];
        m.map[d] = g_new(int64_t, od[d] + 1);
        for (int64_t i = 0; i < od[d]; i++)
            m.map[d][i] = i;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    if (y) {
        uint64_t zero = 0;
        imap_run(&m, psim_dtype_size(x->dtype), x->data, y->data, &zero);
    }
    imap_free(&m);
    return y != NULL;
}

static gboolean run_slice(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    g_autofree int64_t *starts = NULL, *ends = NULL, *axes = NULL, *steps = NULL;
    int32_t ns, ne, na, nst;
    if (!psim__cpu_ints(ctx, 1, "starts", &starts, &ns, error) ||
        !psim__cpu_ints(ctx, 2, "ends", &ends, &ne, error) ||
        !psim__cpu_ints(ctx, 3, "axes", &axes, &na, error) ||
        !psim__cpu_ints(ctx, 4, NULL, &steps, &nst, error))
        return FALSE;
    if (ns < 0 || ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns)) {
        KERR(ctx, error, "Slice starts, ends, axes and steps must have one length");
        return FALSE;
    }
    int64_t b[PSIM_CPU_MAX_RANK], st[PSIM_CPU_MAX_RANK], od[PSIM_CPU_MAX_RANK];
    gboolean seen[PSIM_CPU_MAX_RANK] = {FALSE};
    for (int32_t d = 0; d < x->rank; d++) {
        b[d] = 0;
        st[d] = 1;
        od[d] = x->dims[d];
    }
    for (int32_t i = 0; i < ns; i++) {
        int32_t a;
        if (!psim__cpu_axis(ctx, na >= 0 ? axes[i] : i, x->rank, &a, error))
            return FALSE;
        if (seen[a]) {
            KERR(ctx, error, "Slice axis %d is repeated", a);
            return FALSE;
        }
        seen[a] = TRUE;
        int64_t dim = x->dims[a], step = nst >= 0 ? steps[i] : 1, s = starts[i], e = ends[i];
        if (step == 0) {
            KERR(ctx, error, "Slice step is 0");
            return FALSE;
        }
        if (s < 0)
            s = s < -dim ? 0 : s + dim;
        if (e < 0)
            e = e < -dim ? -1 : e + dim;
        if (step > 0) {
            s = CLAMP(s, 0, dim);
            e = CLAMP(e, 0, dim);
            od[a] = e > s ? (e - s + step - 1) / step : 0;
        } else {
            s = CLAMP(s, -1, dim - 1);
            e = CLAMP(e, -1, dim - 1);
            od[a] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
        }
        b[a] = s;
        st[a] = step;
    }
    int64_t s[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, s);
    IndexMap m = {x->rank};
    for (int32_t d = 0; d < x->rank; d++) {
        m.dims[d] = od[d];
        m.stride[d] = s[d];
        m.map[d] = g_new(int64_t, od[d] + 1);
        for (int64_t i = 0; i < od[d]; i++)
            m.map[d][i] = b[d] + i * st[d];
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    if (y) {
        uint64_t zero = 0;
        imap_run(&m, psim_dtype_size(x->dtype), x->data, y->data, &zero);
    }
    imap_free(&m);
    return y != NULL;
}

static gboolean run_pad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *cv = psim__cpu_in(ctx, 2);
    g_autofree int64_t *pads = NULL, *axes = NULL;
    int32_t np, na;
    if (!psim__cpu_ints(ctx, 1, "pads", &pads, &np, error) ||
        !psim__cpu_ints(ctx, 3, NULL, &axes, &na, error))
        return FALSE;
    int32_t n_ax = na >= 0 ? na : x->rank;
    if (np != 2 * n_ax) {
        KERR(ctx, error, "Pad needs %d pads", 2 * n_ax);
        return FALSE;
    }
    int64_t p0[PSIM_CPU_MAX_RANK] = {0}, p1[PSIM_CPU_MAX_RANK] = {0};
    for (int32_t i = 0; i < n_ax; i++) {
        int32_t a;
        if (!psim__cpu_axis(ctx, na >= 0 ? axes[i] : i, x->rank, &a, error))
            return FALSE;
        p0[a] = pads[i];
        p1[a] = pads[i + n_ax];
    }
    const char *mode = psim_node_attr_string(ctx->node, "mode", "constant");
    int m_const = !strcmp(mode, "constant"), m_refl = !strcmp(mode, "reflect"),
        m_edge = !strcmp(mode, "edge");
    if (!m_const && !m_refl && !m_edge) {
        KERR(ctx, error, "Pad mode '%s' is not supported", mode);
        return FALSE;
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t d = 0; d < x->rank; d++) {
        od[d] = x->dims[d] + p0[d] + p1[d];
        if (od[d] < 0 || p0[d] > PSIM_MAX_ELEMENTS || p1[d] > PSIM_MAX_ELEMENTS ||
            (!m_const && (p0[d] || p1[d]) && x->dims[d] == 0) ||
            (m_refl && (p0[d] >= x->dims[d] || p1[d] >= x->dims[d]) && (p0[d] || p1[d]))) {
            KERR(ctx, error, "Pad amounts do not fit dim %d", d);
            return FALSE;
        }
    }
    if (psim_shape_elems(x->rank, od) < 0) {
        KERR(ctx, error, "Pad output is absurdly large");
        return FALSE;
    }
    uint64_t pv = 0;
    if (cv && cv->n_elems >= 1) {
        if (cv->dtype != x->dtype) {
            KERR(ctx, error, "Pad constant_value has another dtype than the data");
            return FALSE;
        }
        memcpy(&pv, cv->data, psim_dtype_size(x->dtype));
    } else if (psim_node_attr(ctx->node, "value") && x->dtype == PSIM_DTYPE_FLOAT32) {
        float f = (float)psim_node_attr_float(ctx->node, "value", 0.0);
        memcpy(&pv, &f, 4);
    }
    int64_t s[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, s);
    IndexMap m = {x->rank};
    for (int32_t d = 0; d < x->rank; d++) {
        m.dims[d] = od[d];
        m.stride[d] = s[d];
        m.map[d] = g_new(int64_t, od[d] + 1);
        int64_t n = x->dims[d];
        for (int64_t i = 0; i < od[d]; i++) {
            int64_t j = i - p0[d];
            if (j < 0 || j >= n) {
                if (m_const)
                    j = -1;
                else if (m_edge)
                    j = j < 0 ? 0 : n - 1;
                else if (n == 1)
                    j = 0;
                else { /* reflect without repeating the edge, period 2(n-1) */
                    int64_t per = 2 * (n - 1);
                    j = ((j % per) + per) % per;
                    if (j >= n)
                        j = per - j;
                }
            }
            m.map[d][i] = j;
        }
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    if (y)
        imap_run(&m, psim_dtype_size(x->dtype), x->data, y->data, &pv);
    imap_free(&m);
    return y != NULL;
}

/* Expand (broadcast to a shape) and Tile (repeat): both are index maps. */
static gboolean run_expand_tile(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    gboolean tile = !strcmp(ctx->node->op, "Tile");
    g_autofree int64_t *v = NULL;
    int32_t nv;
    if (!psim__cpu_ints(ctx, 1, NULL, &v, &nv, error))
        return FALSE;
    int32_t r;
    int64_t od[PSIM_CPU_MAX_RANK];
    if (tile) {
        if (nv != x->rank) {
            KERR(ctx, error, "Tile needs %d repeats", x->rank);
            return FALSE;
        }
        r = x->rank;
        for (int32_t d = 0; d < r; d++) {
            if (v[d] < 0 || (x->dims[d] && v[d] > PSIM_MAX_ELEMENTS / x->dims[d])) {
                KERR(ctx, error, "Tile repeats must be non-negative and sane");
                return FALSE;
            }
            od[d] = x->dims[d] * v[d];
        }
    } else if (nv < 0 || nv > PSIM_CPU_MAX_RANK ||
               !psim__cpu_bcast_shape(ctx, x->rank, x->dims, nv, v, &r, od, error))
        return FALSE;
    if (psim_shape_elems(r, od) < 0) {
        KERR(ctx, error, "%s output is absurdly large", ctx->node->op);
        return FALSE;
    }
    int64_t s[PSIM_CPU_MAX_RANK];
    psim__cpu_strides(x->rank, x->dims, s);
    IndexMap m = {r};
    for (int32_t d = 0; d < r; d++) {
        int32_t xd = d - (r - x->rank);
        int64_t n = xd >= 0 ? x->dims[xd] : 1;
        m.dims[d] = od[d];
        m.stride[d] = xd >= 0 ? s[xd] : 0;
        m.map[d] = g_new(int64_t, od[d] + 1);
        for (int64_t i = 0; i < od[d]; i++)
            m.map[d][i] = n == 1 ? 0 : i % n;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, od, error);
    if (y) {
        uint64_t zero = 0;
        imap_run(&m, psim_dtype_size(x->dtype), x->data, y->data, &zero);
    }
    imap_free(&m);
    return y != NULL;
}

static gboolean run_concat(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x0 = ctx->inputs[0];
    int32_t axis;
    /* Concat-1 and -2 defaulted to axis 1; later opsets require the attribute. */
    int64_t opset = psim_graph_opset(ctx->graph), dflt = opset > 0 && opset < 4 ? 1 : 0;
    if (x0->rank == 0 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", dflt), x0->rank, &axis, error))
        return FALSE;
    int64_t od[PSIM_CPU_MAX_RANK];
    memcpy(od, x0->dims, sizeof(int64_t) * (size_t)x0->rank);
    od[axis] = 0;
    for (int32_t k = 0; k < ctx->n_inputs; k++) {
        PsimTensor *t = ctx->inputs[k];
        if (!t || t->dtype != x0->dtype || t->rank != x0->rank) {
            KERR(ctx, error, "Concat input %d is missing or of another dtype or rank", k);
            return FALSE;
        }
        for (int32_t d = 0; d < t->rank; d++)
            if (d != axis && t->dims[d] != x0->dims[d]) {
                KERR(ctx, error, "Concat input %d differs in dim %d", k, d);
                return FALSE;
            }
        od[axis] += t->dims[axis];
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x0->dtype, x0->rank, od, error);
    if (!y)
        return FALSE;
    size_t es = psim_dtype_size(x0->dtype);
    int64_t outer = psim_shape_elems(axis, od);
    int64_t inner = psim_shape_elems(x0->rank - axis - 1, od + axis + 1);
    size_t orow = (size_t)(od[axis] * inner) * es, at = 0;
    for (int32_t k = 0; k < ctx->n_inputs; k++) {
        PsimTensor *t = ctx->inputs[k];
        size_t row = (size_t)(t->dims[axis] * inner) * es;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)y->data + (size_t)o * orow + at, (const char *)t->data + (size_t)o * row,
                   row);
        at += row;
    }
    return TRUE;
}

static gboolean run_split(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int32_t axis;
    if (x->rank == 0 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), x->rank, &axis, error))
        return FALSE;
    g_autofree int64_t *sp = NULL;
    int32_t ns;
    if (!psim__cpu_ints(ctx, 1, "split", &sp, &ns, error))
        return FALSE;
    int32_t no = ctx->n_outputs;
    int64_t dim = x->dims[axis];
    g_autofree int64_t *sizes = g_new(int64_t, no);
    if (ns >= 0) {
        int64_t tot = 0;
        for (int32_t i = 0; i < ns; i++)
            tot += sp[i] >= 0 ? sp[i] : dim + 1;
        if (ns != no || tot != dim) {
            KERR(ctx, error, "Split sizes do not add up to %" G_GINT64_FORMAT " in %d outputs",
                 dim, no);
            return FALSE;
        }
        memcpy(sizes, sp, sizeof(int64_t) * (size_t)no);
    } else {
        /* Equal parts; the last one smaller when it does not divide (opset 18). */
        int64_t part = (dim + no - 1) / no;
        for (int32_t i = 0; i < no; i++)
            sizes[i] = CLAMP(dim - part * i, 0, part);
        if (dim % no) {
            int64_t tot = 0;
            for (int32_t i = 0; i < no; i++)
                tot += sizes[i];
            if (tot != dim) {
                KERR(ctx, error, "Split cannot divide %" G_GINT64_FORMAT " into %d parts", dim, no);
                return FALSE;
            }
        }
    }
    size_t es = psim_dtype_size(x->dtype);
    int64_t outer = psim_shape_elems(axis, x->dims);
    int64_t inner = psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1);
    size_t irow = (size_t)(dim * inner) * es, at = 0;
    for (int32_t k = 0; k < no; k++) {
        int64_t od[PSIM_CPU_MAX_RANK];
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
        od[axis] = sizes[k];
        PsimTensor *y = psim__cpu_out(ctx, k, x->dtype, x->rank, od, error);
        if (!y)
            return FALSE;
        size_t row = (size_t)(sizes[k] * inner) * es;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)y->data + (size_t)o * row, (const char *)x->data + (size_t)o * irow + at,
                   row);
        at += row;
    }
    return TRUE;
}

static gboolean run_gather(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error) || !movable(ctx, ctx->inputs[0], error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *ind = ctx->inputs[1];
    int32_t axis;
    if (x->rank == 0 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), x->rank, &axis, error))
        return FALSE;
    if (ind->dtype != PSIM_DTYPE_INT64 && ind->dtype != PSIM_DTYPE_INT32) {
        KERR(ctx, error, "Gather indices must be int32 or int64");
        return FALSE;
    }
    int32_t r = x->rank - 1 + ind->rank;
    if (r > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "Gather output rank %d is too large", r);
        return FALSE;
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    int32_t j = 0;
    for (int32_t d = 0; d < axis; d++)
        od[j++] = x->dims[d];
    for (int32_t d = 0; d < ind->rank; d++)
        od[j++] = ind->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        od[j++] = x->dims[d];
    int64_t dim = x->dims[axis];
    for (int64_t i = 0; i < ind->n_elems; i++) {
        int64_t v = psim_tensor_get_i64(ind, i);
        if (v < -dim || v >= dim) {
            KERR(ctx, error, "Gather index %" G_GINT64_FORMAT " is out of range [%" G_GINT64_FORMAT
                 ", %" G_GINT64_FORMAT ")", v, -dim, dim);
            return FALSE;
        }
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, od, error);
    if (!y)
        return FALSE;
    size_t es = psim_dtype_size(x->dtype);
    int64_t outer = psim_shape_elems(axis, x->dims);
    size_t inner = (size_t)psim_shape_elems(x->rank - axis - 1, x->dims + axis + 1) * es;
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < ind->n_elems; i++, dst += inner) {
            int64_t v = psim_tensor_get_i64(ind, i);
            v = v < 0 ? v + dim : v;
            memcpy(dst, (const char *)x->data + ((size_t)(o * dim + v)) * inner, inner);
        }
    return TRUE;
}

static gboolean run_shape(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    if (!strcmp(ctx->node->op, "Size")) {
        PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_INT64, 0, NULL, error);
        if (y)
            *(int64_t *)y->data = x->n_elems;
        return y != NULL;
    }
    int64_t r = x->rank;
    int64_t s = psim_node_attr_int(ctx->node, "start", 0), e = psim_node_attr_int(ctx->node, "end", r);
    s = s < 0 ? s + r : s;
    e = e < 0 ? e + r : e;
    s = CLAMP(s, 0, r);
    e = CLAMP(e, 0, r);
    int64_t n = MAX(e - s, 0);
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_INT64, 1, &n, error);
    if (!y)
        return FALSE;
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)y->data)[i] = x->dims[s + i];
    return TRUE;
}

static gboolean run_constant_of_shape(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    g_autofree int64_t *dims = NULL;
    int32_t n;
    if (!psim__cpu_ints(ctx, 0, NULL, &dims, &n, error))
        return FALSE;
    if (n > PSIM_CPU_MAX_RANK || psim_shape_elems(n, dims) < 0) {
        KERR(ctx, error, "ConstantOfShape shape is negative, too large or of too high a rank");
        return FALSE;
    }
    const PsimAttr *a = psim_node_attr(ctx->node, "value");
    const PsimTensor *v = a && a->type == PSIM_ATTR_TENSOR ? a->v.t : NULL;
    if (v && (v->n_elems != 1 || !psim__cpu_esize(v->dtype))) {
        KERR(ctx, error, "ConstantOfShape value must be one numeric element");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, v ? v->dtype : PSIM_DTYPE_FLOAT32, n, dims, error);
    if (!y)
        return FALSE;
    if (!v) { /* float32 zeros; allocators do not promise zeroed memory */
        memset(y->data, 0, y->nbytes);
        return TRUE;
    }
    size_t es = psim_dtype_size(v->dtype);
    gboolean zero = TRUE;
    for (size_t i = 0; i < es; i++)
        zero = zero && ((const uint8_t *)v->data)[i] == 0;
    if (zero)
        memset(y->data, 0, y->nbytes);
    else if (es == 4) {
        uint32_t x, *restrict d = y->data;
        memcpy(&x, v->data, 4);
        for (int64_t i = 0; i < y->n_elems; i++)
            d[i] = x;
    } else
        for (int64_t i = 0; i < y->n_elems; i++)
            memcpy((char *)y->data + (size_t)i * es, v->data, es);
    return TRUE;
}

void psim__cpu_register_shape(void)
{
    psim__cpu_add("Const", "cpu-const", "a constant: value attribute or fill", run_const, NULL,
                  NULL);
    psim__cpu_add("Constant", "cpu-const", "ONNX Constant", run_const, NULL, NULL);
    psim__cpu_add("Identity", "cpu-view", "passes its input through (no copy)", run_identity,
                  NULL, NULL);
    psim__cpu_add("Dropout", "cpu-view", "inference Dropout: identity, all-true mask",
                  run_identity, NULL, NULL);
    psim__cpu_add("NoOp", "cpu-noop", "nothing (control dependencies)", run_noop, NULL, NULL);
    psim__cpu_add("Reshape", "cpu-view", "reshape (no copy)", run_reshape, NULL, NULL);
    psim__cpu_add("Flatten", "cpu-view", "flatten to 2-D (no copy)", run_flatten, NULL, NULL);
    psim__cpu_add("Squeeze", "cpu-view", "drop size-1 dims (no copy)", run_squeeze, NULL, NULL);
    psim__cpu_add("Unsqueeze", "cpu-view", "insert size-1 dims (no copy)", run_squeeze, NULL,
                  NULL);
    psim__cpu_add("Transpose", "cpu-imap", "permute dims", run_transpose, NULL, NULL);
    psim__cpu_add("Slice", "cpu-imap", "strided slice", run_slice, NULL, NULL);
    psim__cpu_add("Pad", "cpu-imap", "constant, edge and reflect padding", run_pad, NULL, NULL);
    psim__cpu_add("Expand", "cpu-imap", "broadcast to a shape", run_expand_tile, NULL, NULL);
    psim__cpu_add("Tile", "cpu-imap", "repeat along dims", run_expand_tile, NULL, NULL);
    psim__cpu_add("Concat", "cpu-concat", "join along an axis", run_concat, NULL, NULL);
    psim__cpu_add("Split", "cpu-split", "split along an axis", run_split, NULL, NULL);
    psim__cpu_add("Gather", "cpu-gather", "take along an axis", run_gather, NULL, NULL);
    psim__cpu_add("Shape", "cpu-shape", "the input's shape as int64", run_shape, NULL, NULL);
    psim__cpu_add("Size", "cpu-shape", "the input's element count", run_shape, NULL, NULL);
    psim__cpu_add("ConstantOfShape", "cpu-fill", "a filled tensor of a given shape",
                  run_constant_of_shape, NULL, NULL);
}
