/* Neural-network ops with ONNX semantics: Conv (groups, pads, auto_pad, strides, dilations),
 * MaxPool and AveragePool (ceil_mode), global pooling, BatchNormalization, LRN,
 * LayerNormalization, InstanceNormalization and Dropout (identity at inference). */
#include "ops-private.h"

#include <string.h>

/* A sliding window over `ns` spatial dims. */
typedef struct {
    int32_t ns;
    int64_t k[PSIM__MAX_RANK], s[PSIM__MAX_RANK], d[PSIM__MAX_RANK];
    int64_t pb[PSIM__MAX_RANK], pe[PSIM__MAX_RANK];
    enum { PAD_NOTSET, PAD_VALID, PAD_SAME_UPPER, PAD_SAME_LOWER } pad;
    gboolean ceil_mode;
} Window;

static gboolean read_list(const PsimGraph *g, const PsimNode *n, const char *name, int32_t want,
                          int64_t dflt, int64_t min, int64_t *out, GError **error)
{
    const int64_t *v;
    int32_t c = psim_node_attr_ints(n, name, &v);
    if (c < 0) {
        for (int32_t i = 0; i < want; i++)
            out[i] = dflt;
        return TRUE;
    }
    if (c != want) {
        psim__error_node(error, g, n, "attr '%s' has %d values, expected %d", name, c, want);
        return FALSE;
    }
    for (int32_t i = 0; i < c; i++) {
        /* Kernel extents, strides and dilations multiply: 2^24 each keeps products exact. */
        if (v[i] < min || v[i] > (INT64_C(1) << (strcmp(name, "pads") ? 24 : 32))) {
            psim__error_node(error, g, n, "attr '%s' has out-of-range value %" G_GINT64_FORMAT,
                             name, v[i]);
            return FALSE;
        }
        out[i] = v[i];
    }
    return TRUE;
}

/* Reads the window attrs. kernel (ns entries, PSIM_DIM_UNKNOWN allowed) is used when there is
 * no kernel_shape attr; NULL means the attr is required. */
static gboolean window_read(const PsimGraph *g, const PsimNode *n, int32_t ns,
                            const int64_t *kernel, Window *w, GError **error)
{
    memset(w, 0, sizeof *w);
    w->ns = ns;
    if (psim_node_attr(n, "kernel_shape")) {
        if (!read_list(g, n, "kernel_shape", ns, 1, 1, w->k, error))
            return FALSE;
    } else if (kernel) {
        memcpy(w->k, kernel, sizeof(int64_t) * (size_t)ns);
    } else {
        psim__error_node(error, g, n, "%s needs a 'kernel_shape' attribute", n->op);
        return FALSE;
    }
    int64_t pads[2 * PSIM__MAX_RANK];
    if (!read_list(g, n, "strides", ns, 1, 1, w->s, error) ||
        !read_list(g, n, "dilations", ns, 1, 1, w->d, error) ||
        !read_list(g, n, "pads", 2 * ns, 0, 0, pads, error))
        return FALSE;
    for (int32_t i = 0; i < ns; i++) {
        w->pb[i] = pads[i];
        w->pe[i] = pads[ns + i];
    }
    const char *ap = psim_node_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "NOTSET") || !*ap)
        w->pad = PAD_NOTSET;
    else if (!strcmp(ap, "VALID"))
        w->pad = PAD_VALID;
    else if (!strcmp(ap, "SAME_UPPER"))
        w->pad = PAD_SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER"))
        w->pad = PAD_SAME_LOWER;
    else {
        psim__error_node(error, g, n, "unknown auto_pad '%s'", ap);
        return FALSE;
    }
    w->ceil_mode = psim_node_attr_int(n, "ceil_mode", 0) != 0;
    return TRUE;
}

/* Output spatial dims for input spatial dims in. */
static gboolean window_out(const PsimGraph *g, const PsimNode *n, const Window *w,
                           const int64_t *in, int64_t *out, GError **error)
{
    for (int32_t i = 0; i < w->ns; i++) {
        if (in[i] < 0 || w->k[i] < 0) {
            out[i] = PSIM_DIM_UNKNOWN;
            continue;
        }
        int64_t ek = (w->k[i] - 1) * w->d[i] + 1, o;
        switch (w->pad) {
        case PAD_SAME_UPPER:
        case PAD_SAME_LOWER:
            o = (in[i] + w->s[i] - 1) / w->s[i];
            break;
        case PAD_VALID:
            if (in[i] < ek)
                goto too_big;
            o = (in[i] - ek) / w->s[i] + 1;
            break;
        default: {
            int64_t num = in[i] + w->pb[i] + w->pe[i] - ek;
            if (num < 0)
                goto too_big;
            o = (w->ceil_mode ? (num + w->s[i] - 1) / w->s[i] : num / w->s[i]) + 1;
            /* The last window must start inside the input or the leading pad. */
            if (w->ceil_mode && (o - 1) * w->s[i] >= in[i] + w->pb[i])
                o--;
        }
        }
        out[i] = o;
        continue;
    too_big:
        psim__error_node(error, g, n,
                         "spatial dimension %d: the window (%" G_GINT64_FORMAT
                         " with dilation) is larger than the padded input (%" G_GINT64_FORMAT ")",
                         i, ek, in[i] + w->pb[i] + w->pe[i]);
        return FALSE;
    }
    return TRUE;
}

static gboolean need_input(const PsimGraph *g, const PsimNode *n, int32_t k, GError **error)
{
    if (psim__input(g, n, k))
        return TRUE;
    psim__error_node(error, g, n, "%s needs input %d", n->op, k);
    return FALSE;
}

/* ---- Conv ---- */

static gboolean infer_conv(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error) || !need_input(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0), *w = psim__input_ranked(g, n, 1);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x && !w) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    int32_t rank = x ? x->rank : w->rank;
    if (rank < 3 || rank > PSIM__MAX_RANK || (x && w && x->rank != w->rank)) {
        psim__error_node(error, g, n,
                         "Conv needs input and weights of equal rank >= 3 (got %d and %d)",
                         x ? x->rank : -1, w ? w->rank : -1);
        return FALSE;
    }
    int64_t group = psim_node_attr_int(n, "group", 1);
    if (group < 1) {
        psim__error_node(error, g, n, "group must be >= 1");
        return FALSE;
    }
    int32_t ns = rank - 2;
    int64_t kernel[PSIM__MAX_RANK], in[PSIM__MAX_RANK], out[PSIM__MAX_RANK];
    for (int32_t i = 0; i < ns; i++) {
        kernel[i] = w ? w->dims[2 + i] : PSIM_DIM_UNKNOWN;
        in[i] = x ? x->dims[2 + i] : PSIM_DIM_UNKNOWN;
    }
    Window win;
    if (!window_read(g, n, ns, kernel, &win, error))
        return FALSE;
    if (w)
        for (int32_t i = 0; i < ns; i++)
            if (w->dims[2 + i] >= 0 && w->dims[2 + i] != win.k[i]) {
                psim__error_node(error, g, n, "kernel_shape disagrees with the weights' shape");
                return FALSE;
            }
    int64_t m = w ? w->dims[0] : PSIM_DIM_UNKNOWN;
    if (x && w && x->dims[1] >= 0 && w->dims[1] >= 0 && x->dims[1] != w->dims[1] * group) {
        psim__error_node(error, g, n,
                         "input has %" G_GINT64_FORMAT
                         " channels but the weights expect %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT
                         " per group x %" G_GINT64_FORMAT " groups)",
                         x->dims[1], w->dims[1] * group, w->dims[1], group);
        return FALSE;
    }
    if (m >= 0 && m % group) {
        psim__error_node(error, g, n,
                         "%" G_GINT64_FORMAT " output channels do not divide into %" G_GINT64_FORMAT
                         " groups",
                         m, group);
        return FALSE;
    }
    const PsimOutput *b = psim__input_ranked(g, n, 2);
    if (b && (b->rank != 1 || (m >= 0 && b->dims[0] >= 0 && b->dims[0] != m))) {
        psim__error_node(error, g, n, "the bias must be 1-D with one value per output channel");
        return FALSE;
    }
    if (!window_out(g, n, &win, in, out + 2, error))
        return FALSE;
    out[0] = x ? x->dims[0] : PSIM_DIM_UNKNOWN;
    out[1] = m;
    return psim__out_set(g, n, 0, dt, rank, out, error);
}

static void count_conv(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    const PsimOutput *w = psim__input_ranked(g, n, 1);
    if (!w || w->rank < 3)
        return;
    int64_t per = psim__dims_prod(w->dims, 1, w->rank); /* Cin/group * kernel volume */
    if (per > 0)
        out->flops = 2.0 * (double)psim__out_elems(n, 0) * (double)per;
}

/* FusedConv (ONNX Runtime's com.microsoft op): the convolution, then its activation on every
 * output. */
static void count_fused_conv(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    count_conv(g, n, out);
    out->flops += (double)MAX(psim__out_elems(n, 0), 0);
}

/* ---- pooling ---- */

static gboolean infer_pool(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        if (n->n_outputs > 1)
            psim__out_unknown(g, n, 1, PSIM_DTYPE_INT64);
        return TRUE;
    }
    if (x->rank < 3 || x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "%s needs an input of rank >= 3 (got %d)", n->op, x->rank);
        return FALSE;
    }
    int32_t ns = x->rank - 2;
    Window win;
    int64_t out[PSIM__MAX_RANK];
    if (!window_read(g, n, ns, NULL, &win, error) ||
        !window_out(g, n, &win, x->dims + 2, out + 2, error))
        return FALSE;
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    if (!psim__out_set(g, n, 0, dt, x->rank, out, error))
        return FALSE;
    if (n->n_outputs > 1) /* MaxPool's Indices */
        return psim__out_set(g, n, 1, PSIM_DTYPE_INT64, x->rank, out, error);
    return TRUE;
}

static void count_pool(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    const int64_t *k;
    int32_t nk = psim_node_attr_ints(n, "kernel_shape", &k);
    int64_t vol = nk > 0 ? psim__dims_prod(k, 0, nk) : 0;
    if (vol > 0)
        out->flops = (double)psim__out_elems(n, 0) * (double)vol;
}

static gboolean infer_global_pool(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (x->rank < 3 || x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "%s needs an input of rank >= 3 (got %d)", n->op, x->rank);
        return FALSE;
    }
    int64_t out[PSIM__MAX_RANK];
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    for (int32_t i = 2; i < x->rank; i++)
        out[i] = 1;
    return psim__out_set(g, n, 0, dt, x->rank, out, error);
}

static void count_per_input_elem(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
    double per = !strcmp(n->op, "BatchNormalization")      ? 2
                 : !strcmp(n->op, "LayerNormalization")    ? 8
                 : !strcmp(n->op, "InstanceNormalization") ? 8
                 : !strcmp(n->op, "Gelu")                  ? 8
                 : !strcmp(n->op, "QuickGelu")             ? 6
                                                           : 1;
    if (!strcmp(n->op, "LRN"))
        per = 2.0 * (double)psim_node_attr_int(n, "size", 1) + 3;
    out->flops = per * (double)psim__in_elems(g, n, 0);
}

/* ---- normalization ---- */

/* Checks that input k, when known, is 1-D of length c. */
static gboolean check_channel_vec(const PsimGraph *g, const PsimNode *n, int32_t k, int64_t c,
                                  const char *what, GError **error)
{
    const PsimOutput *v = psim__input_ranked(g, n, k);
    if (!v)
        return TRUE;
    if (v->rank != 1 || (c >= 0 && v->dims[0] >= 0 && v->dims[0] != c)) {
        psim__error_node(error, g, n, "%s must be 1-D with %" G_GINT64_FORMAT " values", what, c);
        return FALSE;
    }
    return TRUE;
}

static gboolean infer_batchnorm(PsimGraph *g, PsimNode *n, GError **error)
{
    for (int32_t k = 0; k < 5; k++)
        if (!need_input(g, n, k, error))
            return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    int64_t c = PSIM_DIM_UNKNOWN;
    if (x->rank >= 0 && x->rank < 2) {
        psim__error_node(error, g, n, "BatchNormalization needs an input of rank >= 2");
        return FALSE;
    }
    if (x->rank >= 2 && x->dims)
        c = x->dims[1];
    static const char *const names[] = {"", "scale", "B", "mean", "var"};
    for (int32_t k = 1; k < 5; k++)
        if (!check_channel_vec(g, n, k, c, names[k], error))
            return FALSE;
    if (!psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error))
        return FALSE;
    /* Training-mode outputs: running mean and var, (before opset 14) saved mean and var. */
    for (int32_t k = 1; k < n->n_outputs; k++)
        if (!psim__out_set(g, n, k, psim__input_dtype(g, n, 3), 1, &c, error))
            return FALSE;
    return TRUE;
}

static gboolean infer_same(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (!strcmp(n->op, "LRN") && psim_node_attr_int(n, "size", 0) < 1) {
        psim__error_node(error, g, n, "LRN needs a positive 'size' attribute");
        return FALSE;
    }
    if (!strcmp(n->op, "InstanceNormalization") && x->rank >= 0 && x->rank < 3) {
        psim__error_node(error, g, n, "InstanceNormalization needs an input of rank >= 3");
        return FALSE;
    }
    return psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error);
}

static gboolean infer_layernorm(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error) || !need_input(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (!psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error))
        return FALSE;
    PsimDType st = psim__attr_dtype(n, "stash_type", PSIM_DTYPE_FLOAT32);
    if (x->rank < 0 || (x->rank > 0 && !x->dims)) {
        for (int32_t k = 1; k < n->n_outputs; k++)
            psim__out_unknown(g, n, k, st);
        return TRUE;
    }
    int32_t axis;
    if (!psim__axis(g, n, psim_node_attr_int(n, "axis", -1), x->rank, &axis, error))
        return FALSE;
    int64_t d[PSIM__MAX_RANK];
    for (int32_t i = 0; i < x->rank && i < PSIM__MAX_RANK; i++)
        d[i] = i < axis ? x->dims[i] : 1;
    for (int32_t k = 1; k < n->n_outputs && k < 3; k++)
        if (!psim__out_set(g, n, k, st, x->rank, d, error))
            return FALSE;
    return TRUE;
}

static gboolean infer_dropout(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input(g, n, 0);
    if (!psim__out_set(g, n, 0, x->dtype, x->rank, x->dims, error))
        return FALSE;
    /* The mask is bool from opset 10; before, it had the input's type. */
    int64_t opset = psim_graph_opset(g);
    PsimDType mt = opset > 0 && opset < 10 ? x->dtype : PSIM_DTYPE_BOOL;
    if (n->n_outputs > 1)
        return psim__out_set(g, n, 1, mt, x->rank, x->dims, error);
    return TRUE;
}

static const PsimOpDef nn_ops[] = {
    {"Conv", "N-D convolution (groups, pads, auto_pad, strides, dilations)", 0, infer_conv,
     count_conv},
    {"MaxPool", "max over sliding windows", 0, infer_pool, count_pool},
    {"AveragePool", "mean over sliding windows", 0, infer_pool, count_pool},
    {"GlobalAveragePool", "mean over all spatial positions", 0, infer_global_pool,
     count_per_input_elem},
    {"GlobalMaxPool", "max over all spatial positions", 0, infer_global_pool, count_per_input_elem},
    {"BatchNormalization", "per-channel affine normalization", 0, infer_batchnorm,
     count_per_input_elem},
    {"InstanceNormalization", "per-instance, per-channel normalization", 0, infer_same,
     count_per_input_elem},
    {"LRN", "local response normalization across channels", 0, infer_same, count_per_input_elem},
    {"LayerNormalization", "normalization over the trailing axes", 0, infer_layernorm,
     count_per_input_elem},
    {"Dropout", "identity at inference; optional mask", 0, infer_dropout, psim__count_move},
    /* ONNX Runtime's contrib ops that placesim's fusion pass makes (graph/fuse.c), so that a fused
     * graph exported to ONNX runs in ONNX Runtime as it runs here. */
    {"FusedConv", "Conv then an activation (Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid) in one node",
     0, infer_conv, count_fused_conv, NULL, 0, "com.microsoft"},
    {"Gelu", "x (1 + erf(x / sqrt 2)) / 2", 0, infer_same, count_per_input_elem, NULL, 0, "com.microsoft"},
    {"QuickGelu", "x sigmoid(alpha x) (Swish, SiLU for alpha = 1)", 0, infer_same, count_per_input_elem,
     NULL, 0, "com.microsoft"},
};

void psim__ops_register_nn(void)
{
    psim__ops_register_group(nn_ops, G_N_ELEMENTS(nn_ops));
}
