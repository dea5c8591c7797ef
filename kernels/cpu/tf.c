/* TensorFlow ops that ONNX has no op for, as TF GraphDefs use them (formats/tf.c keeps their
 * names): StridedSlice (with TF's five masks, the geometry shape inference uses), Pack and
 * Unpack (stack and unstack along an axis), ExpandDims, Fill, and RandomUniform (stateful:
 * a stream of uniform [0, 1) numbers that moves on every step, seeded by seed/seed2 or by
 * PSIM_TENSOR_FILL_SEED when both are 0). Any dtype but strings, except RandomUniform (float). */
#include "cpu-private.h"
#include "graph/graph-private.h"

#include <math.h>

/* Integers of input k (a scalar or a vector of any integer dtype); FALSE with an error when
 * absent or of more than `max` entries. */
static gboolean ints_of(PsimKernelCtx *ctx, int32_t k, const char *what, int64_t *v, int32_t max,
                        int32_t *n, GError **error)
{
    g_autofree int64_t *vals = NULL;
    if (!psim__cpu_ints(ctx, k, NULL, &vals, n, error))
        return FALSE;
    if (*n < 0 || *n > max) {
        KERR(ctx, error, "%s: %s (input %d) must be given, with at most %d entries", ctx->node->op,
             what, k, max);
        return FALSE;
    }
    memcpy(v, vals, sizeof(int64_t) * (size_t)*n);
    return TRUE;
}

static gboolean run_strided_slice(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 4, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    if (!es) {
        KERR(ctx, error, "StridedSlice cannot move %s tensors", psim_dtype_name(x->dtype));
        return FALSE;
    }
    int64_t b[64], e[64], s[64];
    int32_t kb, ke, ks;
    if (!ints_of(ctx, 1, "begin", b, 64, &kb, error) || !ints_of(ctx, 2, "end", e, 64, &ke, error) ||
        !ints_of(ctx, 3, "strides", s, 64, &ks, error))
        return FALSE;
    if (kb != ke || kb != ks) {
        KERR(ctx, error, "begin, end and strides have %d, %d and %d entries", kb, ke, ks);
        return FALSE;
    }
    const PsimNode *n = ctx->node;
    PsimSliceDim sd[64];
    int64_t od[128];
    int32_t orank = 0;
    g_autofree char *why = NULL;
    if (!psim__strided_slice_geometry(
            x->rank, x->dims, kb, b, e, s, (uint64_t)psim_node_attr_int(n, "begin_mask", 0),
            (uint64_t)psim_node_attr_int(n, "end_mask", 0),
            (uint64_t)psim_node_attr_int(n, "ellipsis_mask", 0),
            (uint64_t)psim_node_attr_int(n, "new_axis_mask", 0),
            (uint64_t)psim_node_attr_int(n, "shrink_axis_mask", 0), sd, od, &orank, &why)) {
        KERR(ctx, error, "%s", why);
        return FALSE;
    }
    if (orank > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "StridedSlice output of rank %d (over %d)", orank, PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, orank, od, error);
    if (!y)
        return FALSE;
    /* Walk the input dims' (start, step, len) odometer; the output is that walk in order. */
    int32_t r = x->rank;
    int64_t stride[64], idx[64] = {0}, total = y->n_elems;
    psim__cpu_strides(r, x->dims, stride);
    for (int64_t o = 0; o < total; o++) {
        int64_t off = 0;
        for (int32_t d = 0; d < r; d++)
            off += (sd[d].start + idx[d] * sd[d].step) * stride[d];
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)off * es, es);
        for (int32_t d = r - 1; d >= 0; d--) {
            if (++idx[d] < sd[d].len)
                break;
            idx[d] = 0;
        }
    }
    return TRUE;
}

/* Pack: N inputs of one shape stacked along a new axis (attr axis, -(r+1) <= axis <= r). */
static gboolean run_pack(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x0 = ctx->inputs[0];
    size_t es = psim__cpu_esize(x0->dtype);
    int32_t r = x0->rank, axis;
    if (!es || r + 1 > PSIM_CPU_MAX_RANK ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), r + 1, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "Pack cannot stack %s tensors of rank %d", psim_dtype_name(x0->dtype), r);
        return FALSE;
    }
    for (int32_t k = 1; k < ctx->n_inputs; k++) {
        PsimTensor *t = ctx->inputs[k];
        if (!t || t->dtype != x0->dtype || t->rank != r ||
            memcmp(t->dims, x0->dims, sizeof(int64_t) * (size_t)r)) {
            KERR(ctx, error, "Pack input %d is missing or differs from input 0 in dtype or shape", k);
            return FALSE;
        }
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t d = 0, j = 0; d <= r; d++)
        od[d] = d == axis ? ctx->n_inputs : x0->dims[j++];
    PsimTensor *y = psim__cpu_out(ctx, 0, x0->dtype, r + 1, od, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x0->dims);
    size_t row = (size_t)psim_shape_elems(r - axis, x0->dims + axis) * es;
    for (int64_t o = 0; o < outer && row; o++)
        for (int32_t k = 0; k < ctx->n_inputs; k++)
            memcpy((char *)y->data + ((size_t)o * (size_t)ctx->n_inputs + (size_t)k) * row,
                   (const char *)ctx->inputs[k]->data + (size_t)o * row, row);
    return TRUE;
}

/* Unpack: one output per index along `axis`, that dim dropped. */
static gboolean run_unpack(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    int32_t r = x->rank, axis;
    if (!es || r == 0 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), r, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "Unpack cannot split a %s tensor of rank %d", psim_dtype_name(x->dtype), r);
        return FALSE;
    }
    if (x->dims[axis] != ctx->n_outputs) {
        KERR(ctx, error, "Unpack of %" G_GINT64_FORMAT " along axis %d into %d outputs", x->dims[axis],
             axis, ctx->n_outputs);
        return FALSE;
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t d = 0, j = 0; d < r; d++)
        if (d != axis)
            od[j++] = x->dims[d];
    int64_t outer = psim_shape_elems(axis, x->dims);
    size_t row = (size_t)psim_shape_elems(r - axis - 1, x->dims + axis + 1) * es;
    for (int32_t k = 0; k < ctx->n_outputs; k++) {
        if (!psim__cpu_wants(ctx, k))
            continue;
        PsimTensor *y = psim__cpu_out(ctx, k, x->dtype, r - 1, od, error);
        if (!y)
            return FALSE;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)y->data + (size_t)o * row,
                   (const char *)x->data + ((size_t)o * (size_t)ctx->n_outputs + (size_t)k) * row, row);
    }
    return TRUE;
}

/* ExpandDims: a size-1 dim inserted at input 1's (scalar) position, -(r+1) <= dim <= r. */
static gboolean run_expand_dims(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int64_t dim[1];
    int32_t nd, at;
    if (!ints_of(ctx, 1, "dim", dim, 1, &nd, error))
        return FALSE;
    if (nd != 1 || x->rank + 1 > PSIM_CPU_MAX_RANK || !psim__cpu_axis(ctx, dim[0], x->rank + 1, &at, error)) {
        if (error && !*error)
            KERR(ctx, error, "ExpandDims needs one dim and a rank under %d", PSIM_CPU_MAX_RANK);
        return FALSE;
    }
    int64_t od[PSIM_CPU_MAX_RANK];
    for (int32_t d = 0, j = 0; d <= x->rank; d++)
        od[d] = d == at ? 1 : x->dims[j++];
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank + 1, od, error);
    if (!y)
        return FALSE;
    if (x->nbytes)
        memcpy(y->data, x->data, x->nbytes);
    return TRUE;
}

/* Fill: the shape of input 0 filled with scalar input 1. */
static gboolean run_fill(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    int64_t dims[PSIM_CPU_MAX_RANK];
    int32_t n;
    if (!ints_of(ctx, 0, "dims", dims, PSIM_CPU_MAX_RANK, &n, error))
        return FALSE;
    PsimTensor *v = ctx->inputs[1];
    size_t es = psim__cpu_esize(v->dtype);
    if (v->n_elems != 1 || !es || psim_shape_elems(n, dims) < 0) {
        KERR(ctx, error, "Fill needs a shape of non-negative dims and one numeric value");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, v->dtype, n, dims, error);
    if (!y)
        return FALSE;
    for (int64_t i = 0; i < y->n_elems; i++)
        memcpy((char *)y->data + (size_t)i * es, v->data, es);
    return TRUE;
}

/* RandomUniform: its state is the generator, seeded once and moved on by every run. */
typedef struct {
    uint64_t s;
} RandState;

static gboolean random_prepare(const PsimGraph *g, const PsimNode *n, void *w, void **state,
                               GError **error)
{
    (void)g;
    (void)w;
    (void)error;
    RandState *st = g_new(RandState, 1);
    uint64_t seed = (uint64_t)psim_node_attr_int(n, "seed", 0),
             seed2 = (uint64_t)psim_node_attr_int(n, "seed2", 0);
    st->s = psim_tensor_fill_seed(seed || seed2 ? seed * 0x9e3779b97f4a7c15u ^ seed2 : PSIM_TENSOR_FILL_SEED,
                                  n->name);
    *state = st;
    return TRUE;
}

static void random_release(void *state) { g_free(state); }

static gboolean run_random_uniform(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    int64_t dims[PSIM_CPU_MAX_RANK];
    int32_t n;
    if (!ints_of(ctx, 0, "shape", dims, PSIM_CPU_MAX_RANK, &n, error))
        return FALSE;
    PsimDType dt = psim__attr_dtype(ctx->node, "dtype", PSIM_DTYPE_FLOAT32);
    if ((dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64) || psim_shape_elems(n, dims) < 0 ||
        !ctx->state) {
        KERR(ctx, error, "RandomUniform makes float32 or float64 tensors of a non-negative shape");
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, n, dims, error);
    if (!y)
        return FALSE;
    RandState *st = ctx->state;
    psim_tensor_fill(y, PSIM_TENSOR_FILL_UNIFORM, st->s);
    st->s = psim_tensor_fill_seed(st->s, "next step");
    return TRUE;
}

/* ---- NHWC convolution and pooling (Conv2D, DepthwiseConv2dNative, MaxPool, AvgPool) ----
 * TensorFlow's layout as it is, float32: channels are the innermost dim, so an output pixel is
 * a GEMM row (Conv2D: the kh x kw x C patch under it, which is the HWIO filter's row order, times
 * the [kh kw C, M] filter) or one vector operation per tap over the channels (depthwise, pools). */

/* Output rows per band of Conv2D's patch buffer. */
#define TF_PATCH_BYTES ((size_t)4 << 20)

typedef struct {
    int64_t N, H, W, C;
    PsimTfWindow w;
} TfGeo;

static gboolean tf_geo(PsimKernelCtx *ctx, gboolean conv, TfGeo *g, GError **error)
{
    PsimTensor *x = ctx->inputs[0], *f = conv ? ctx->inputs[1] : NULL;
    if (x->dtype != PSIM_DTYPE_FLOAT32 || x->rank != 4) {
        KERR(ctx, error, "%s has a CPU kernel for 4-D float32 NHWC inputs", ctx->node->op);
        return FALSE;
    }
    g->N = x->dims[0], g->H = x->dims[1], g->W = x->dims[2], g->C = x->dims[3];
    if (f && (f->dtype != PSIM_DTYPE_FLOAT32 || f->rank != 4 || f->dims[2] != g->C)) {
        KERR(ctx, error, "%s: the filter must be 4-D float32 with %" G_GINT64_FORMAT " input channels",
             ctx->node->op, g->C);
        return FALSE;
    }
    g_autofree char *why = NULL;
    if (!psim__tf_window(ctx->node, x->dims, f ? f->dims : NULL, &g->w, &why)) {
        KERR(ctx, error, "%s", why);
        return FALSE;
    }
    return TRUE;
}

/* The input pixel a tap reads for output (oh, ow), or -1 outside the image. */
static inline int64_t tf_src(const TfGeo *g, int64_t oh, int64_t ow, int64_t ki, int64_t kj)
{
    int64_t ih = oh * g->w.sh - g->w.pt + ki * g->w.dh, iw = ow * g->w.sw - g->w.pl + kj * g->w.dw;
    return ih < 0 || ih >= g->H || iw < 0 || iw >= g->W ? -1 : ih * g->W + iw;
}

static gboolean run_tf_conv2d(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    TfGeo g;
    if (!tf_geo(ctx, TRUE, &g, error))
        return FALSE;
    int64_t M = ctx->inputs[1]->dims[3], K = g.w.kh * g.w.kw * g.C, P = g.w.Ho * g.w.Wo;
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, 4, (int64_t[]){g.N, g.w.Ho, g.w.Wo, M}, error);
    if (!y)
        return FALSE;
    const float *x = ctx->inputs[0]->data, *f = ctx->inputs[1]->data;
    float *yd = y->data;
    if (y->n_elems == 0)
        return TRUE;
    gboolean direct = g.w.kh == 1 && g.w.kw == 1 && g.w.sh == 1 && g.w.sw == 1 && g.w.Ho == g.H && g.w.Wo == g.W;
    if (direct || K == 0) {
        if (K == 0)
            memset(yd, 0, y->nbytes);
        else /* the image is already the patch matrix: [N H W, C] x [C, M] */
            psim__sgemm(FALSE, FALSE, g.N * P, M, K, 1.0f, x, K, f, M, 0.0f, yd, M);
        return TRUE;
    }
    int64_t rows = CLAMP((int64_t)(TF_PATCH_BYTES / (sizeof(float) * (size_t)(K * MAX(g.w.Wo, 1)))), 1,
                         MAX(g.w.Ho, 1));
    float *patch = psim__cpu_scratch(sizeof(float) * (size_t)(rows * g.w.Wo * K), error);
    if (!patch)
        return FALSE;
    for (int64_t n = 0; n < g.N; n++) {
        const float *xn = x + n * g.H * g.W * g.C;
        for (int64_t oh0 = 0; oh0 < g.w.Ho; oh0 += rows) {
            int64_t oh1 = MIN(g.w.Ho, oh0 + rows);
            float *row = patch;
            for (int64_t oh = oh0; oh < oh1; oh++)
                for (int64_t ow = 0; ow < g.w.Wo; ow++)
                    for (int64_t ki = 0; ki < g.w.kh; ki++)
                        for (int64_t kj = 0; kj < g.w.kw; kj++, row += g.C) {
                            int64_t src = tf_src(&g, oh, ow, ki, kj);
                            if (src < 0)
                                memset(row, 0, sizeof(float) * (size_t)g.C);
                            else
                                memcpy(row, xn + src * g.C, sizeof(float) * (size_t)g.C);
                        }
            psim__sgemm(FALSE, FALSE, (oh1 - oh0) * g.w.Wo, M, K, 1.0f, patch, K, f, M, 0.0f,
                        yd + ((n * g.w.Ho + oh0) * g.w.Wo) * M, M);
        }
    }
    return TRUE;
}

/* acc[c * mult + m] += w[c * mult + m] * x[c], over the channels (mult 1: one vector loop). */
PSIM_CPU_CLONES static void dw_tap(float *restrict acc, const float *restrict w, const float *restrict x, int64_t C,
                                   int64_t mult)
{
    if (mult == 1) {
        for (int64_t c = 0; c < C; c++)
            acc[c] += w[c] * x[c];
        return;
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t m = 0; m < mult; m++)
            acc[c * mult + m] += w[c * mult + m] * x[c];
}

static gboolean run_tf_depthwise(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    TfGeo g;
    if (!tf_geo(ctx, TRUE, &g, error))
        return FALSE;
    int64_t mult = ctx->inputs[1]->dims[3], Co = g.C * mult;
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, 4, (int64_t[]){g.N, g.w.Ho, g.w.Wo, Co}, error);
    if (!y)
        return FALSE;
    const float *x = ctx->inputs[0]->data, *f = ctx->inputs[1]->data;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oh = 0; oh < g.w.Ho; oh++)
            for (int64_t ow = 0; ow < g.w.Wo; ow++) {
                float *acc = (float *)y->data + ((n * g.w.Ho + oh) * g.w.Wo + ow) * Co;
                memset(acc, 0, sizeof(float) * (size_t)Co);
                for (int64_t ki = 0; ki < g.w.kh; ki++)
                    for (int64_t kj = 0; kj < g.w.kw; kj++) {
                        int64_t src = tf_src(&g, oh, ow, ki, kj);
                        if (src >= 0)
                            dw_tap(acc, f + (ki * g.w.kw + kj) * Co, x + (n * g.H * g.W + src) * g.C, g.C, mult);
                    }
            }
    return TRUE;
}

PSIM_CPU_CLONES static void pool_tap(float *restrict acc, const float *restrict x, int64_t C, gboolean max)
{
    if (max)
        for (int64_t c = 0; c < C; c++)
            acc[c] = x[c] > acc[c] || x[c] != x[c] ? x[c] : acc[c];
    else
        for (int64_t c = 0; c < C; c++)
            acc[c] += x[c];
}

/* MaxPool (the largest in-image value; NaN wins, as in TF) and AvgPool (the mean of the in-image
 * values: TF leaves padding out of each average). */
static gboolean run_tf_pool(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    TfGeo g;
    if (!tf_geo(ctx, FALSE, &g, error))
        return FALSE;
    gboolean max = !strcmp(ctx->node->op, "TfMaxPool");
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, 4, (int64_t[]){g.N, g.w.Ho, g.w.Wo, g.C}, error);
    if (!y)
        return FALSE;
    const float *x = ctx->inputs[0]->data;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oh = 0; oh < g.w.Ho; oh++)
            for (int64_t ow = 0; ow < g.w.Wo; ow++) {
                float *acc = (float *)y->data + ((n * g.w.Ho + oh) * g.w.Wo + ow) * g.C;
                for (int64_t c = 0; c < g.C; c++)
                    acc[c] = max ? -INFINITY : 0.0f;
                int64_t cnt = 0;
                for (int64_t ki = 0; ki < g.w.kh; ki++)
                    for (int64_t kj = 0; kj < g.w.kw; kj++) {
                        int64_t src = tf_src(&g, oh, ow, ki, kj);
                        if (src >= 0) {
                            pool_tap(acc, x + (n * g.H * g.W + src) * g.C, g.C, max);
                            cnt++;
                        }
                    }
                if (!max && cnt > 0)
                    for (int64_t c = 0; c < g.C; c++)
                        acc[c] /= (float)cnt;
            }
    return TRUE;
}

/* Pad and PadV2: the paddings input [rank, 2] (begin, end per dim), filled with 0 or PadV2's
 * scalar input 2. */
static gboolean run_tf_pad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *p = ctx->inputs[1], *cv = psim__cpu_in(ctx, 2);
    size_t es = psim__cpu_esize(x->dtype);
    if (!es || x->rank > 16 || p->n_elems != 2 * (int64_t)x->rank ||
        (p->dtype != PSIM_DTYPE_INT32 && p->dtype != PSIM_DTYPE_INT64)) {
        KERR(ctx, error, "%s needs paddings of shape [%d, 2] (int32 or int64) for a tensor of rank %d",
             ctx->node->op, x->rank, x->rank);
        return FALSE;
    }
    int64_t od[16], lo[16];
    for (int32_t d = 0; d < x->rank; d++) {
        lo[d] = psim_tensor_get_i64(p, 2 * d);
        int64_t hi = psim_tensor_get_i64(p, 2 * d + 1);
        if (lo[d] < 0 || hi < 0 || lo[d] > PSIM_MAX_ELEMENTS || hi > PSIM_MAX_ELEMENTS) {
            KERR(ctx, error, "%s: paddings must be >= 0 and at most 2^36", ctx->node->op);
            return FALSE;
        }
        od[d] = x->dims[d] + lo[d] + hi;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, x->rank, od, error);
    if (!y)
        return FALSE;
    /* The fill, then each input row (the last dim) copied to its place. */
    if (cv && cv->n_elems >= 1 && cv->dtype == x->dtype) {
        for (int64_t i = 0; i < y->n_elems; i++)
            memcpy((char *)y->data + i * es, cv->data, es);
    } else {
        memset(y->data, 0, y->nbytes);
    }
    int32_t r = x->rank;
    if (x->n_elems == 0)
        return TRUE;
    int64_t row = r ? x->dims[r - 1] : 1, idx[16] = {0}, ys[16], xs[16];
    psim__cpu_strides(r, od, ys);
    psim__cpu_strides(r, x->dims, xs);
    for (int64_t i = 0; i < x->n_elems / row; i++) {
        int64_t yo = r ? lo[r - 1] : 0, xo = 0;
        for (int32_t d = 0; d < r - 1; d++) {
            yo += (idx[d] + lo[d]) * ys[d];
            xo += idx[d] * xs[d];
        }
        memcpy((char *)y->data + yo * es, (const char *)x->data + xo * es, (size_t)row * es);
        for (int32_t d = r - 2; d >= 0; d--) {
            if (++idx[d] < x->dims[d])
                break;
            idx[d] = 0;
        }
    }
    return TRUE;
}

/* IdentityN: each input passed through as the output of the same index (views). */
static gboolean run_identity_n(PsimKernelCtx *ctx, GError **error)
{
    if (ctx->n_outputs > ctx->n_inputs) {
        KERR(ctx, error, "IdentityN has %d outputs for %d inputs", ctx->n_outputs, ctx->n_inputs);
        return FALSE;
    }
    for (int32_t k = 0; k < ctx->n_outputs; k++) {
        PsimTensor *x = ctx->inputs[k];
        if (!x) {
            KERR(ctx, error, "IdentityN: input %d is missing", k);
            return FALSE;
        }
        if (psim__cpu_wants(ctx, k) && !psim__cpu_view(ctx, k, x, x->rank, x->dims, error))
            return FALSE;
    }
    return TRUE;
}

void psim__cpu_register_tf(void)
{
    psim__cpu_add("StridedSlice", "cpu-strided-slice", "TF strided slice with its five masks",
                  run_strided_slice, NULL, NULL);
    psim__cpu_add("Pack", "cpu-pack", "TF stack along a new axis", run_pack, NULL, NULL);
    psim__cpu_add("Unpack", "cpu-unpack", "TF unstack along an axis", run_unpack, NULL, NULL);
    psim__cpu_add("ExpandDims", "cpu-expand-dims", "TF insert a size-1 dim", run_expand_dims,
                  NULL, NULL);
    psim__cpu_add("Fill", "cpu-fill", "TF shape filled with a scalar", run_fill, NULL, NULL);
    static const PsimDType f32[] = {PSIM_DTYPE_FLOAT32, -1};
    psim__cpu_add("Conv2D", "cpu-tf-conv2d", "TF NHWC convolution: patches x HWIO filter (sgemm)", run_tf_conv2d,
                  f32, NULL);
    psim__cpu_add("DepthwiseConv2dNative", "cpu-tf-depthwise", "TF NHWC depthwise convolution over the channels",
                  run_tf_depthwise, f32, NULL);
    psim__cpu_add("TfMaxPool", "cpu-tf-pool", "TF NHWC max pooling", run_tf_pool, f32, NULL);
    psim__cpu_add("AvgPool", "cpu-tf-pool", "TF NHWC average pooling (padding left out)", run_tf_pool, f32, NULL);
    psim__cpu_add("TfPad", "cpu-tf-pad", "TF zero padding by a paddings input", run_tf_pad, NULL, NULL);
    psim__cpu_add("PadV2", "cpu-tf-pad", "TF constant padding by a paddings input", run_tf_pad, NULL, NULL);
    psim__cpu_add("IdentityN", "cpu-view", "TF identity of N tensors (no copy)", run_identity_n, NULL, NULL);
    static const PsimKernelDef random = {
        .op = "RandomUniform", .device_type = "CPU", .dtype = PSIM_DTYPE_UNDEFINED,
        .name = "cpu-random-uniform",
        .description = "TF uniform [0, 1) samples, a stream that moves on every step",
        .prepare = random_prepare, .release = random_release, .run = run_random_uniform};
    psim__kernels_add(&random, 1);
}
