/* Resize (opsets 10-17) and Upsample: nearest (four rounding modes), N-linear and N-cubic
 * (cubic_coeff_a, exclude_outside) interpolation, separable over the axes, with every
 * coordinate_transformation_mode (half_pixel, pytorch_half_pixel, align_corners, asymmetric,
 * tf_half_pixel_for_nn, tf_crop_and_resize with roi and extrapolation_value). A neighbour
 * outside the input takes the nearest edge value, as ONNX's reference does. And GridSample. float32,
 * float64. */
#include "cpu-private.h"

#include <math.h>

/* Per output coordinate of one axis: up to 4 (input index, weight) pairs, or "outside" (the
 * extrapolation value). */
typedef struct {
    int32_t n;
    gboolean outside;
    int64_t at[4];
    double w[4];
} Taps;

typedef enum { C_HALF, C_PYTORCH, C_ALIGN, C_ASYM, C_TF_NN, C_CROP } Coord;
typedef enum { N_ROUND_FLOOR, N_ROUND_CEIL, N_FLOOR, N_CEIL } NearestMode;
typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } Mode;

/* lout is the output length as ONNX's reference takes it: in * scale, not floored, when
 * scales were given (align_corners then maps onto it), the sizes otherwise. */
static double in_coord(Coord c, double x, double scale, int64_t lin, double lout, double r0, double r1)
{
    switch (c) {
    case C_HALF: return (x + 0.5) / scale - 0.5;
    case C_PYTORCH: return lout > 1 ? (x + 0.5) / scale - 0.5 : 0;
    case C_ALIGN: return lout > 1 ? x * (double)(lin - 1) / (lout - 1) : 0;
    case C_ASYM: return x / scale;
    case C_TF_NN: return (x + 0.5) / scale;
    default: /* tf_crop_and_resize */
        return lout > 1 ? r0 * (double)(lin - 1) + x * (r1 - r0) * (double)(lin - 1) / (lout - 1)
                        : 0.5 * (r0 + r1) * (double)(lin - 1);
    }
}

static void cubic_coeffs(double t, double a, double *w)
{
    double x[4] = {1 + t, t, 1 - t, 2 - t};
    for (int i = 0; i < 4; i++) {
        double s = x[i];
        w[i] = s <= 1 ? ((a + 2) * s - (a + 3)) * s * s + 1
                      : ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
    }
}

static void taps_of(Taps *t, Mode m, NearestMode nm, Coord c, double x_out, double scale, int64_t lin,
                    double lout, double r0, double r1, double a, gboolean exclude)
{
    double x = in_coord(c, x_out, scale, lin, lout, r0, r1);
    t->outside = c == C_CROP && (x < 0 || x > (double)(lin - 1));
    if (m == M_NEAREST) {
        double f = floor(x), frac = x - f;
        double r = nm == N_FLOOR ? f
                   : nm == N_CEIL ? ceil(x)
                   : frac == 0.5  ? (nm == N_ROUND_FLOOR ? f : f + 1)
                                  : round(x);
        int64_t i = (int64_t)r;
        t->n = 1;
        t->at[0] = CLAMP(i, 0, lin - 1);
        t->w[0] = 1;
        return;
    }
    double f = floor(x), frac = x - f;
    int64_t base = (int64_t)f;
    if (m == M_LINEAR) {
        t->n = 2;
        t->at[0] = CLAMP(base, 0, lin - 1);
        t->at[1] = CLAMP(base + 1, 0, lin - 1);
        t->w[0] = 1 - frac;
        t->w[1] = frac;
        return;
    }
    t->n = 4;
    cubic_coeffs(frac, a, t->w);
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        int64_t j = base - 1 + i;
        if (exclude && (j < 0 || j >= lin))
            t->w[i] = 0;
        sum += t->w[i];
        t->at[i] = CLAMP(j, 0, lin - 1);
    }
    if (exclude && sum != 0)
        for (int i = 0; i < 4; i++)
            t->w[i] /= sum;
}

/* Whether axis taps t (n_out of them, n_in input positions) leave the axis as it is: output o
 * reads input o alone, with weight 1 (any other tap weighs 0). */
static gboolean taps_identity(const Taps *t, int64_t n_out, int64_t n_in)
{
    if (n_out != n_in)
        return FALSE;
    for (int64_t o = 0; o < n_out; o++) {
        int hits = 0;
        for (int32_t k = 0; k < t[o].n; k++) {
            if (t[o].w[k] == 0)
                continue;
            if (t[o].at[k] != o || t[o].w[k] != 1)
                return FALSE;
            hits++;
        }
        if (hits != 1 || t[o].outside)
            return FALSE;
    }
    return TRUE;
}

/* Resize of the last two axes only (every leading axis left as it is: images, NCHW), plane by
 * plane and separably: each input row a row taps read is first interpolated along the width
 * (Wo values), then each output row is its row taps' weighted sum of those rows, in double as the
 * general loop (which walks all 2^rank tap combinations of every element, the N and C axes'
 * zero-weight taps too: 140 ns an element, 148 ms of lraspp_mobilenet_v3_large's 161-ms step;
 * then, walking only the two axes' taps, 6.7 ms; separably, a few ns an element). Taps that weigh
 * 0 are left out, as there. */
static gboolean resize_planes(const PsimTensor *x, PsimTensor *y, Taps *const *taps, int32_t r, double extrap,
                              GError **error)
{
    int64_t H = x->dims[r - 2], W = x->dims[r - 1], Ho = y->dims[r - 2], Wo = y->dims[r - 1];
    int64_t planes = psim_shape_elems(r - 2, y->dims);
    gboolean f64 = x->dtype == PSIM_DTYPE_FLOAT64;
    const Taps *ty = taps[r - 2], *tx = taps[r - 1];
    double *rows = psim__cpu_scratch(sizeof(double) * (size_t)((H + 1) * Wo + 1), error);
    if (!rows)
        return FALSE;
    double *acc = rows + H * Wo;
    g_autofree uint8_t *need = g_new0(uint8_t, H + 1);
    for (int64_t oy = 0; oy < Ho; oy++)
        for (int32_t k = 0; k < ty[oy].n && !ty[oy].outside; k++)
            if (ty[oy].w[k] != 0)
                need[ty[oy].at[k]] = 1;
    for (int64_t p = 0; p < planes; p++) {
        for (int64_t ih = 0; ih < H; ih++) {
            if (!need[ih])
                continue;
            double *t = rows + ih * Wo;
            const float *sf = (const float *)x->data + (p * H + ih) * W;
            const double *sd = (const double *)x->data + (p * H + ih) * W;
            for (int64_t ox = 0; ox < Wo; ox++) {
                const Taps *b = &tx[ox];
                double v = 0;
                for (int32_t k = 0; k < b->n; k++)
                    if (b->w[k] != 0)
                        v += b->w[k] * (f64 ? sd[b->at[k]] : (double)sf[b->at[k]]);
                t[ox] = v;
            }
        }
        for (int64_t oy = 0; oy < Ho; oy++) {
            const Taps *a = &ty[oy];
            int64_t o0 = (p * Ho + oy) * Wo;
            for (int64_t ox = 0; ox < Wo; ox++)
                acc[ox] = 0;
            for (int32_t k = 0; k < a->n && !a->outside; k++) {
                double w = a->w[k];
                const double *t = rows + a->at[k] * Wo;
                if (w != 0)
                    for (int64_t ox = 0; ox < Wo; ox++)
                        acc[ox] += w * t[ox];
            }
            for (int64_t ox = 0; ox < Wo; ox++) {
                double v = a->outside || tx[ox].outside ? extrap : acc[ox];
                if (f64)
                    ((double *)y->data)[o0 + ox] = v;
                else
                    ((float *)y->data)[o0 + ox] = (float)v;
            }
        }
    }
    return TRUE;
}

static gboolean run_resize(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    const PsimNode *node = ctx->node;
    int32_t r = x->rank;
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || r < 1 ||
        r > PSIM_CPU_MAX_RANK) {
        KERR(ctx, error, "%s needs a float32 or float64 tensor", node->op);
        return FALSE;
    }
    gboolean upsample = !strcmp(node->op, "Upsample");
    /* Resize 11+: X, roi, scales, sizes; Resize 10 and Upsample 9: X, scales; Upsample 7: attr. */
    gboolean two = ctx->n_inputs == 2;
    PsimTensor *roi = two ? NULL : psim__cpu_in(ctx, 1);
    PsimTensor *sc = psim__cpu_in(ctx, two ? 1 : 2), *sz = two ? NULL : psim__cpu_in(ctx, 3);
    double scales[PSIM_CPU_MAX_RANK], r0[PSIM_CPU_MAX_RANK], r1[PSIM_CPU_MAX_RANK], lout[PSIM_CPU_MAX_RANK];
    int64_t od[PSIM_CPU_MAX_RANK];
    const PsimAttr *sa = psim_node_attr(node, "scales"); /* Upsample-7 */
    const double *sattr = sa && sa->type == PSIM_ATTR_FLOATS ? sa->v.floats : NULL;
    int32_t nsa = sattr ? sa->n : -1;
    for (int32_t d = 0; d < r; d++) {
        r0[d] = 0;
        r1[d] = 1;
        if (sz && sz->n_elems == r) {
            od[d] = (int64_t)psim_tensor_get_f64(sz, d);
            scales[d] = x->dims[d] ? (double)od[d] / (double)x->dims[d] : 1;
            lout[d] = (double)od[d];
        } else if ((sc && sc->n_elems == r) || nsa == r) {
            scales[d] = sc && sc->n_elems == r ? psim_tensor_get_f64(sc, d) : sattr[d];
            od[d] = (int64_t)floor((double)x->dims[d] * scales[d]);
            lout[d] = (double)x->dims[d] * scales[d];
        } else {
            KERR(ctx, error, "%s needs %d scales or sizes", node->op, r);
            return FALSE;
        }
        if (!(scales[d] > 0) || od[d] < 0) {
            KERR(ctx, error, "%s scale %g of axis %d is not positive", node->op, scales[d], d);
            return FALSE;
        }
        if (roi && roi->n_elems == 2 * r) {
            r0[d] = psim_tensor_get_f64(roi, d);
            r1[d] = psim_tensor_get_f64(roi, r + d);
        }
    }
    const char *ms = psim_node_attr_string(node, "mode", "nearest");
    Mode mode = !strcmp(ms, "nearest") ? M_NEAREST
                : !strcmp(ms, "cubic") ? M_CUBIC
                                       : M_LINEAR; /* linear, bilinear, trilinear */
    const char *cs = psim_node_attr_string(node, "coordinate_transformation_mode",
                                           upsample || two ? "asymmetric" : "half_pixel");
    Coord coord = !strcmp(cs, "pytorch_half_pixel")   ? C_PYTORCH
                  : !strcmp(cs, "align_corners")      ? C_ALIGN
                  : !strcmp(cs, "asymmetric")         ? C_ASYM
                  : !strcmp(cs, "tf_half_pixel_for_nn") ? C_TF_NN
                  : !strcmp(cs, "tf_crop_and_resize") ? C_CROP
                                                      : C_HALF;
    const char *ns = psim_node_attr_string(node, "nearest_mode",
                                           upsample || two ? "floor" : "round_prefer_floor");
    NearestMode nm = !strcmp(ns, "round_prefer_ceil") ? N_ROUND_CEIL
                     : !strcmp(ns, "floor")           ? N_FLOOR
                     : !strcmp(ns, "ceil")            ? N_CEIL
                                                      : N_ROUND_FLOOR;
    double a = psim_node_attr_float(node, "cubic_coeff_a", -0.75);
    gboolean exclude = psim_node_attr_int(node, "exclude_outside", 0) != 0;
    double extrap = psim_node_attr_float(node, "extrapolation_value", 0.0);
    if (x->n_elems == 0 && psim_shape_elems(r, od) > 0) {
        KERR(ctx, error, "%s of an empty tensor to a non-empty one", node->op);
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, r, od, error);
    if (!y)
        return FALSE;
    /* The taps of every output coordinate of every axis, then each output element as the sum
     * over the product of its axes' taps. */
    g_autofree Taps **taps = g_new0(Taps *, r + 1);
    for (int32_t d = 0; d < r; d++) {
        taps[d] = g_new(Taps, od[d] + 1);
        for (int64_t o = 0; o < od[d]; o++)
            taps_of(&taps[d][o], mode, nm, coord, (double)o, scales[d], x->dims[d], lout[d], r0[d], r1[d],
                    a, exclude);
    }
    gboolean planes = r >= 2 && y->n_elems > 0; /* (an empty input's taps point nowhere) */
    for (int32_t d = 0; d < r - 2 && planes; d++)
        planes = taps_identity(taps[d], od[d], x->dims[d]);
    if (planes) {
        gboolean ok = resize_planes(x, y, taps, r, extrap, error);
        for (int32_t d = 0; d < r; d++)
            g_free(taps[d]);
        return ok;
    }
    int64_t xs[PSIM_CPU_MAX_RANK], idx[PSIM_CPU_MAX_RANK] = {0};
    psim__cpu_strides(r, x->dims, xs);
    gboolean f64 = x->dtype == PSIM_DTYPE_FLOAT64;
    for (int64_t o = 0; o < y->n_elems; o++) {
        gboolean outside = FALSE;
        int64_t total = 1;
        for (int32_t d = 0; d < r; d++) {
            outside = outside || taps[d][idx[d]].outside;
            total *= taps[d][idx[d]].n;
        }
        double sum = 0;
        for (int64_t c = 0; c < total && !outside; c++) {
            int64_t rem = c, off = 0;
            double w = 1;
            for (int32_t d = r - 1; d >= 0; d--) {
                const Taps *t = &taps[d][idx[d]];
                int32_t k = (int32_t)(rem % t->n);
                rem /= t->n;
                off += t->at[k] * xs[d];
                w *= t->w[k];
            }
            if (w != 0)
                sum += w * (f64 ? ((const double *)x->data)[off] : ((const float *)x->data)[off]);
        }
        if (outside)
            sum = extrap;
        if (f64)
            ((double *)y->data)[o] = sum;
        else
            ((float *)y->data)[o] = (float)sum;
        psim__cpu_next_index(r, od, idx);
    }
    for (int32_t d = 0; d < r; d++)
        g_free(taps[d]);
    return TRUE;
}

/* GridSample (PyTorch's grid_sample, as ONNX defines it): X (N, C, H, W) sampled at grid
 * (N, Ho, Wo, 2) of (x, y) in [-1, 1]; bilinear, nearest (half to even) or bicubic; padding
 * zeros, border or reflection; align_corners. */
static double gs_reflect(double v, double lo2, double hi2)
{
    if (lo2 == hi2)
        return 0;
    double mn = lo2 / 2, span = (hi2 - lo2) / 2;
    v = fabs(v - mn);
    double extra = fmod(v, span), flips = floor(v / span);
    return fmod(flips, 2) == 0 ? extra + mn : span - extra + mn;
}

/* A coordinate under the padding mode (border: clamped; reflection: reflected, then clamped). */
static double gs_pad(double v, int64_t size, int pad, gboolean align)
{
    if (pad == 2)
        v = align ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
    if (pad >= 1)
        v = fmin(fmax(v, 0), (double)(size - 1));
    return v;
}

static double gs_at(const PsimTensor *x, int64_t base, int64_t H, int64_t W, int64_t yy, int64_t xx)
{
    if (yy < 0 || yy >= H || xx < 0 || xx >= W)
        return 0;
    return psim_tensor_get_f64(x, base + yy * W + xx);
}

static gboolean run_grid_sample(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *grid = ctx->inputs[1];
    if ((x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) || x->rank != 4 ||
        grid->rank != 4 || grid->dims[0] != x->dims[0] || grid->dims[3] != 2 || grid->dtype != x->dtype) {
        KERR(ctx, error, "GridSample needs X (N, C, H, W) and a grid (N, H_out, W_out, 2) of its dtype");
        return FALSE;
    }
    const char *ms = psim_node_attr_string(ctx->node, "mode", "bilinear");
    const char *ps = psim_node_attr_string(ctx->node, "padding_mode", "zeros");
    int mode = !strcmp(ms, "nearest") ? 0 : !strcmp(ms, "bicubic") || !strcmp(ms, "cubic") ? 2 : 1;
    int pad = !strcmp(ps, "border") ? 1 : !strcmp(ps, "reflection") ? 2 : 0;
    gboolean align = psim_node_attr_int(ctx->node, "align_corners", 0) != 0;
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t Ho = grid->dims[1], Wo = grid->dims[2];
    int64_t od[4] = {N, C, Ho, Wo};
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, 4, od, error);
    if (!y)
        return FALSE;
    gboolean f64 = x->dtype == PSIM_DTYPE_FLOAT64;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < Ho; i++)
            for (int64_t j = 0; j < Wo; j++) {
                int64_t ga = ((n * Ho + i) * Wo + j) * 2;
                double gx = f64 ? ((const double *)grid->data)[ga] : ((const float *)grid->data)[ga];
                double gy = f64 ? ((const double *)grid->data)[ga + 1] : ((const float *)grid->data)[ga + 1];
                double ux = align ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
                double uy = align ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
                for (int64_t c = 0; c < C; c++) {
                    int64_t base = (n * C + c) * H * W;
                    double v = 0;
                    if (mode == 2) { /* each tap padded on its own, as PyTorch does */
                        double fx = floor(ux), fy = floor(uy), wx[4], wy[4];
                        cubic_coeffs(ux - fx, -0.75, wx);
                        cubic_coeffs(uy - fy, -0.75, wy);
                        for (int a = 0; a < 4; a++)
                            for (int b = 0; b < 4; b++) {
                                double ty = fy - 1 + a, tx = fx - 1 + b;
                                if (pad) {
                                    ty = gs_pad(ty, H, pad, align);
                                    tx = gs_pad(tx, W, pad, align);
                                }
                                v += wy[a] * wx[b] * gs_at(x, base, H, W, (int64_t)ty, (int64_t)tx);
                            }
                    } else {
                        double px = gs_pad(ux, W, pad, align), py = gs_pad(uy, H, pad, align);
                        if (mode == 0) {
                            v = gs_at(x, base, H, W, (int64_t)rint(py), (int64_t)rint(px));
                        } else {
                            double fx = floor(px), fy = floor(py), ax = px - fx, ay = py - fy;
                            int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
                            v = (1 - ay) * ((1 - ax) * gs_at(x, base, H, W, y0, x0) + ax * gs_at(x, base, H, W, y0, x0 + 1)) +
                                ay * ((1 - ax) * gs_at(x, base, H, W, y0 + 1, x0) + ax * gs_at(x, base, H, W, y0 + 1, x0 + 1));
                        }
                    }
                    int64_t at = ((n * C + c) * Ho + i) * Wo + j;
                    if (f64)
                        ((double *)y->data)[at] = v;
                    else
                        ((float *)y->data)[at] = (float)v;
                }
            }
    return TRUE;
}

void psim__cpu_register_resize(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("Resize", "cpu-resize", "nearest, linear or cubic resampling", run_resize, types,
                  NULL);
    psim__cpu_add("Upsample", "cpu-resize", "Resize before opset 10", run_resize, types, NULL);
    psim__cpu_add("GridSample", "cpu-grid-sample", "samples at a grid of normalized coordinates",
                  run_grid_sample, types, NULL);
}
