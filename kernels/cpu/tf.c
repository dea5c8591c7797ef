/* TensorFlow ops that ONNX has no op for, as TF GraphDefs use them (formats/tf.c keeps their
 * names): StridedSlice (with TF's five masks, the geometry shape inference uses), Pack and
 * Unpack (stack and unstack along an axis), ExpandDims, Fill, and RandomUniform (stateful:
 * a stream of uniform [0, 1) numbers that moves on every step, seeded by seed/seed2 or by
 * PSIM_TENSOR_FILL_SEED when both are 0). Any dtype but strings, except RandomUniform (float). */
#include "cpu-private.h"

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

void psim__cpu_register_tf(void)
{
    psim__cpu_add("StridedSlice", "cpu-strided-slice", "TF strided slice with its five masks",
                  run_strided_slice, NULL, NULL);
    psim__cpu_add("Pack", "cpu-pack", "TF stack along a new axis", run_pack, NULL, NULL);
    psim__cpu_add("Unpack", "cpu-unpack", "TF unstack along an axis", run_unpack, NULL, NULL);
    psim__cpu_add("ExpandDims", "cpu-expand-dims", "TF insert a size-1 dim", run_expand_dims,
                  NULL, NULL);
    psim__cpu_add("Fill", "cpu-fill", "TF shape filled with a scalar", run_fill, NULL, NULL);
    static const PsimKernelDef random = {
        .op = "RandomUniform", .device_type = "CPU", .dtype = PSIM_DTYPE_UNDEFINED,
        .name = "cpu-random-uniform",
        .description = "TF uniform [0, 1) samples, a stream that moves on every step",
        .prepare = random_prepare, .release = random_release, .run = run_random_uniform};
    psim__kernels_add(&random, 1);
}
