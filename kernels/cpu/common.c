/* Shared CPU kernel helpers: outputs through the context's allocator, views, integer lists from
 * inputs or attributes, and numpy broadcasting with dimension collapsing. */
#include "cpu-private.h"
#include <stdlib.h>

static PsimTensor *cpu_out(PsimKernelCtx *ctx, int32_t k, PsimDType dtype, int32_t rank,
                           const int64_t *dims, gboolean uninit, GError **error)
{
    g_assert(k < ctx->n_outputs);
    if (psim_shape_elems(rank, dims) < 0) {
        KERR(ctx, error, "output %d would have a negative or absurd shape", k);
        return NULL;
    }
    GError *err = NULL;
    PsimTensor *t = uninit && ctx->alloc_uninit ? ctx->alloc_uninit(ctx, dtype, rank, dims, &err)
                                                : ctx->alloc(ctx, dtype, rank, dims, &err);
    if (!t) {
        KERR(ctx, error, "cannot allocate output %d: %s", k, err ? err->message : "no memory");
        if (error && *error && err && err->code == PSIM_ERROR_RUNTIME)
            (*error)->code = PSIM_ERROR_RUNTIME;
        g_clear_error(&err);
        return NULL;
    }
    if (ctx->outputs[k])
        psim_tensor_unref(ctx->outputs[k]);
    ctx->outputs[k] = t;
    return t;
}

PsimTensor *psim__cpu_out(PsimKernelCtx *ctx, int32_t k, PsimDType dtype, int32_t rank,
                          const int64_t *dims, GError **error)
{
    return cpu_out(ctx, k, dtype, rank, dims, FALSE, error);
}

PsimTensor *psim__cpu_out_all(PsimKernelCtx *ctx, int32_t k, PsimDType dtype, int32_t rank,
                              const int64_t *dims, GError **error)
{
    return cpu_out(ctx, k, dtype, rank, dims, TRUE, error);
}

static void view_release(PsimTensor *t, void *user)
{
    (void)t;
    psim_tensor_unref(user);
}

PsimTensor *psim__cpu_view(PsimKernelCtx *ctx, int32_t k, PsimTensor *src, int32_t rank,
                           const int64_t *dims, GError **error)
{
    g_assert(k < ctx->n_outputs);
    if (psim_shape_elems(rank, dims) != src->n_elems) {
        KERR(ctx, error, "cannot view %" G_GINT64_FORMAT " elements in another count", src->n_elems);
        return NULL;
    }
    PsimTensor *t;
    if (rank == src->rank && !memcmp(dims, src->dims, sizeof(int64_t) * (size_t)rank))
        t = psim_tensor_ref(src);
    else {
        t = psim_tensor_new_wrap(src->dtype, rank, dims, src->data, view_release,
                                 psim_tensor_ref(src));
        t->device = src->device;
    }
    if (ctx->outputs[k])
        psim_tensor_unref(ctx->outputs[k]);
    ctx->outputs[k] = t;
    return t;
}

gboolean psim__cpu_need(PsimKernelCtx *ctx, int32_t n, GError **error)
{
    for (int32_t k = 0; k < n; k++)
        if (!psim__cpu_in(ctx, k)) {
            KERR(ctx, error, "%s needs input %d", ctx->node->op, k);
            return FALSE;
        }
    for (int32_t k = 0; k < ctx->n_inputs; k++)
        if (ctx->inputs[k] && ctx->inputs[k]->rank > PSIM_CPU_MAX_RANK) {
            KERR(ctx, error, "input %d has rank %d (at most %d supported)", k,
                 ctx->inputs[k]->rank, PSIM_CPU_MAX_RANK);
            return FALSE;
        }
    if (ctx->n_outputs < 1) {
        KERR(ctx, error, "%s has no output", ctx->node->op);
        return FALSE;
    }
    return TRUE;
}

gboolean psim__cpu_axis(PsimKernelCtx *ctx, int64_t axis, int32_t rank, int32_t *out,
                        GError **error)
{
    if (axis < -(int64_t)rank || axis >= rank) {
        KERR(ctx, error, "axis %" G_GINT64_FORMAT " is out of range for rank %d", axis, rank);
        return FALSE;
    }
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return TRUE;
}

static gboolean is_int_dtype(PsimDType t)
{
    return t == PSIM_DTYPE_INT64 || t == PSIM_DTYPE_INT32 || t == PSIM_DTYPE_INT16 ||
           t == PSIM_DTYPE_INT8 || t == PSIM_DTYPE_UINT8 || t == PSIM_DTYPE_UINT16 ||
           t == PSIM_DTYPE_UINT32 || t == PSIM_DTYPE_UINT64;
}

gboolean psim__cpu_ints(PsimKernelCtx *ctx, int32_t k, const char *attr, int64_t **v, int32_t *n,
                        GError **error)
{
    PsimTensor *t = k >= 0 ? psim__cpu_in(ctx, k) : NULL;
    if (t) {
        if (!is_int_dtype(t->dtype) || t->rank > 1 || t->n_elems > 4096) {
            KERR(ctx, error, "input %d must be a short 1-D integer tensor", k);
            return FALSE;
        }
        *v = g_new(int64_t, t->n_elems + 1);
        for (int64_t i = 0; i < t->n_elems; i++)
            (*v)[i] = psim_tensor_get_i64(t, i);
        *n = (int32_t)t->n_elems;
        return TRUE;
    }
    const int64_t *a = NULL;
    int32_t na = attr ? psim_node_attr_ints(ctx->node, attr, &a) : -1;
    *v = g_new(int64_t, na > 0 ? na + 1 : 1);
    if (na > 0)
        memcpy(*v, a, sizeof(int64_t) * (size_t)na);
    *n = na;
    return TRUE;
}

size_t psim__cpu_esize(PsimDType t)
{
    return t == PSIM_DTYPE_STRING ? 0 : psim_dtype_size(t);
}

gboolean psim__cpu_bcast_shape(PsimKernelCtx *ctx, int32_t ra, const int64_t *da, int32_t rb,
                               const int64_t *db, int32_t *r, int64_t *dims, GError **error)
{
    int32_t rank = MAX(ra, rb);
    if (rank > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "rank %d is above %d", rank, PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    for (int32_t i = 0; i < rank; i++) {
        int64_t x = i - (rank - ra) >= 0 ? da[i - (rank - ra)] : 1;
        int64_t y = i - (rank - rb) >= 0 ? db[i - (rank - rb)] : 1;
        if (x != y && x != 1 && y != 1) {
            KERR(ctx, error, "shapes cannot be broadcast: dimension %d is %" G_GINT64_FORMAT
                 " and %" G_GINT64_FORMAT, i, x, y);
            return FALSE;
        }
        dims[i] = x == 1 ? y : x;
    }
    *r = rank;
    return TRUE;
}

void psim__cpu_bcast_init(PsimBcast *b, int32_t n_in, const PsimTensor *const *in,
                          int32_t out_rank, const int64_t *out_dims)
{
    g_assert(n_in <= 3 && out_rank <= PSIM_CPU_MAX_RANK);
    /* Per input, full-rank strides with 0 where broadcast; then collapse. */
    int64_t st[3][PSIM_CPU_MAX_RANK];
    for (int32_t j = 0; j < n_in; j++) {
        int64_t s = 1;
        for (int32_t i = out_rank - 1; i >= 0; i--) {
            int32_t ii = i - (out_rank - in[j]->rank);
            int64_t d = ii >= 0 ? in[j]->dims[ii] : 1;
            st[j][i] = (d == 1) ? 0 : s;
            s *= d;
        }
    }
    b->n_in = n_in;
    b->rank = 0;
    for (int32_t i = 0; i < out_rank; i++) {
        if (out_dims[i] == 1)
            continue;
        if (b->rank > 0) {
            int32_t p = b->rank - 1;
            gboolean same = TRUE;
            for (int32_t j = 0; j < n_in; j++) {
                /* Mergeable if both broadcast, or both contiguous across the boundary. */
                gboolean both0 = st[j][i] == 0 && b->strides[j][p] == 0;
                gboolean contig = st[j][i] != 0 && b->strides[j][p] == st[j][i] * out_dims[i];
                if (!both0 && !contig)
                    same = FALSE;
            }
            if (same) {
                b->dims[p] *= out_dims[i];
                for (int32_t j = 0; j < n_in; j++)
                    b->strides[j][p] = st[j][i];
                continue;
            }
        }
        b->dims[b->rank] = out_dims[i];
        for (int32_t j = 0; j < n_in; j++)
            b->strides[j][b->rank] = st[j][i];
        b->rank++;
    }
    if (b->rank == 0) {
        b->rank = 1;
        b->dims[0] = psim_shape_elems(out_rank, out_dims); /* 1, or 0 for empty */
        for (int32_t j = 0; j < n_in; j++)
            b->strides[j][0] = 0;
    }
}

void psim__cpu_bcast_run(const PsimBcast *b, PsimBcastRow fn, void *user)
{
    int32_t r = b->rank;
    int64_t n = b->dims[r - 1];
    int64_t total = 1;
    for (int32_t i = 0; i < r; i++)
        total *= b->dims[i];
    if (total == 0)
        return;
    int64_t rows = total / n;
    int64_t idx[PSIM_CPU_MAX_RANK] = {0};
    int64_t off[3] = {0, 0, 0}, inner[3];
    for (int32_t j = 0; j < b->n_in; j++)
        inner[j] = b->strides[j][r - 1] ? 1 : 0;
    for (int64_t row = 0; row < rows; row++) {
        fn(user, off, row * n, n, inner);
        for (int32_t i = r - 2; i >= 0; i--) {
            idx[i]++;
            for (int32_t j = 0; j < b->n_in; j++)
                off[j] += b->strides[j][i];
            if (idx[i] < b->dims[i])
                break;
            for (int32_t j = 0; j < b->n_in; j++)
                off[j] -= b->strides[j][i] * b->dims[i];
            idx[i] = 0;
        }
    }
}

void psim__cpu_add(const char *op, const char *name, const char *description,
                   gboolean (*run)(PsimKernelCtx *, GError **), const PsimDType *dtypes,
                   size_t (*workspace)(const PsimGraph *, const PsimNode *))
{
    static const PsimDType any[] = {PSIM_DTYPE_UNDEFINED, (PsimDType)-1};
    const PsimDType *dt = dtypes ? dtypes : any;
    for (; (int)*dt >= 0; dt++) {
        /* Definitions must outlive the process: they are allocated once and never freed. */
        PsimKernelDef *d = g_new0(PsimKernelDef, 1);
        d->op = op;
        d->device_type = "CPU";
        d->dtype = *dt;
        d->name = name;
        d->description = description;
        d->workspace = workspace;
        d->run = run;
        psim__kernels_add(d, 1);
    }
}

float psim__half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0)
            bits = sign;
        else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31)
        bits = sign | 0x7f800000u | man << 13;
    else
        bits = sign | (exp + 112) << 23 | man << 13;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t psim__float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    uint32_t man = x & 0x7fffff;
    if (exp == 255)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is the right rounding */
    return (uint16_t)(sign | h);
}

typedef struct {
    void *p;
    size_t size;
} Scratch;

static void scratch_free(gpointer data)
{
    Scratch *s = data;
    free(s->p);
    g_free(s);
}

static GPrivate scratch_key = G_PRIVATE_INIT(scratch_free);

void *psim__cpu_scratch(size_t bytes, GError **error)
{
    Scratch *s = g_private_get(&scratch_key);
    if (!s) {
        s = g_new0(Scratch, 1);
        g_private_set(&scratch_key, s);
    }
    if (s->size < bytes) {
        free(s->p);
        size_t sz = (bytes + 63) & ~(size_t)63;
        s->p = aligned_alloc(64, sz);
        s->size = s->p ? sz : 0;
        if (!s->p) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "out of memory for %zu bytes of scratch", bytes);
            return NULL;
        }
    }
    return s->p;
}

gboolean psim__cpu_window(PsimKernelCtx *ctx, int32_t n, const int64_t *in, const int64_t *k,
                          gboolean ceil_mode, gboolean use_dilations, PsimWindow *w,
                          GError **error)
{
    const PsimNode *node = ctx->node;
    const int64_t *s = NULL, *d = NULL, *p = NULL;
    int32_t ns = psim_node_attr_ints(node, "strides", &s);
    int32_t nd = use_dilations ? psim_node_attr_ints(node, "dilations", &d) : -1;
    int32_t np = psim_node_attr_ints(node, "pads", &p);
    const char *ap = psim_node_attr_string(node, "auto_pad", "NOTSET");
    if (n < 1 || n > 3 || (ns >= 0 && ns != n) || (nd >= 0 && nd != n) ||
        (np >= 0 && np != 2 * n)) {
        KERR(ctx, error, "strides, dilations and pads must match the %d spatial dims", n);
        return FALSE;
    }
    w->n = n;
    for (int32_t i = 0; i < n; i++) {
        w->in[i] = in[i];
        w->k[i] = k[i];
        w->stride[i] = ns > 0 ? s[i] : 1;
        w->dil[i] = nd > 0 ? d[i] : 1;
        w->pad0[i] = np > 0 ? p[i] : 0;
        w->pad1[i] = np > 0 ? p[i + n] : 0;
        if (w->stride[i] < 1 || w->dil[i] < 1 || w->k[i] < 1 || w->pad0[i] < 0 ||
            w->pad1[i] < 0 || w->k[i] > (1 << 20) || w->pad0[i] > (1 << 20) ||
            w->pad1[i] > (1 << 20) || w->dil[i] > (1 << 20)) {
            KERR(ctx, error, "kernel, strides, dilations and pads must be positive and sane");
            return FALSE;
        }
        int64_t ext = (w->k[i] - 1) * w->dil[i] + 1;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            w->out[i] = (in[i] + w->stride[i] - 1) / w->stride[i];
            int64_t total = MAX(0, (w->out[i] - 1) * w->stride[i] + ext - in[i]);
            w->pad0[i] = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
            w->pad1[i] = total - w->pad0[i];
            continue;
        }
        if (!strcmp(ap, "VALID"))
            w->pad0[i] = w->pad1[i] = 0;
        int64_t span = in[i] + w->pad0[i] + w->pad1[i] - ext;
        if (span < 0) {
            KERR(ctx, error, "the window (%" G_GINT64_FORMAT ") is larger than the padded input",
                 ext);
            return FALSE;
        }
        w->out[i] = (ceil_mode ? (span + w->stride[i] - 1) / w->stride[i] : span / w->stride[i]) + 1;
        /* A last window starting in the end padding is dropped (as ONNX and PyTorch do). */
        if (ceil_mode && (w->out[i] - 1) * w->stride[i] >= in[i] + w->pad0[i])
            w->out[i]--;
    }
    return TRUE;
}

enum { SUM_LANES = 8 };

double psim__cpu_sum_f32(const float *x, int64_t n)
{
    float acc[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int k = 0; k < SUM_LANES; k++)
            acc[k] += x[i + k];
    double s = 0;
    for (; i < n; i++)
        s += x[i];
    for (int k = 0; k < SUM_LANES; k++)
        s += acc[k];
    return s;
}

double psim__cpu_sum_sq_dev_f32(const float *x, int64_t n, float mean)
{
    float acc[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int k = 0; k < SUM_LANES; k++)
            acc[k] += (x[i + k] - mean) * (x[i + k] - mean);
    double s = 0;
    for (; i < n; i++)
        s += (double)(x[i] - mean) * (x[i] - mean);
    for (int k = 0; k < SUM_LANES; k++)
        s += acc[k];
    return s;
}
