/* Conv (1-D, 2-D and 3-D, groups, pads, strides, dilations, auto_pad) on OpenBLAS sgemm. A 1x1
 * convolution with unit stride and no padding is a plain GEMM on the input as it lies; other
 * shapes go through im2col in bands of output rows, so the column buffer stays a few MB
 * (it fits the last-level cache better than one whole-image buffer and bounds the workspace). */
#include "cpu-private.h"

#include <cblas.h>

/* Column-buffer budget per band; at least one output row is always taken. */
#define BAND_BYTES ((size_t)4 << 20)

typedef struct {
    int64_t C, H, W;  /* input channels (per group), height, width */
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
    int64_t Ho, Wo;
} Geo;

/* Row (ki, kj) of channel xc's columns for output rows [oh0, oh1): (oh1 - oh0) Wo floats. */
static inline void im2col_row(const Geo *g, const float *restrict xc, int64_t ki, int64_t kj,
                              int64_t oh0, int64_t oh1, float *restrict dst)
{
    /* Output columns whose input column is inside [0, W). */
    int64_t off = kj * g->dw - g->pw;
    int64_t ow0 = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t ow1 = g->W - off <= 0 ? 0 : (g->W - off + g->sw - 1) / g->sw;
    ow1 = MIN(ow1, g->Wo);
    ow0 = MIN(ow0, ow1);
    for (int64_t oh = oh0; oh < oh1; oh++, dst += g->Wo) {
        int64_t ih = oh * g->sh - g->ph + ki * g->dh;
        if (ih < 0 || ih >= g->H) {
            memset(dst, 0, sizeof(float) * (size_t)g->Wo);
            continue;
        }
        const float *src = xc + ih * g->W;
        for (int64_t ow = 0; ow < ow0; ow++)
            dst[ow] = 0.0f;
        if (g->sw == 1 && ow1 > ow0)
            memcpy(dst + ow0, src + ow0 + off, sizeof(float) * (size_t)(ow1 - ow0));
        else
            for (int64_t ow = ow0; ow < ow1; ow++)
                dst[ow] = src[ow * g->sw + off];
        for (int64_t ow = ow1; ow < g->Wo; ow++)
            dst[ow] = 0.0f;
    }
}

/* Columns of output rows [oh0, oh1): rows (c, ki, kj), columns (oh, ow), ld floats apart. */
static void im2col_ld(const Geo *g, const float *restrict x, int64_t oh0, int64_t oh1,
                      float *restrict col, int64_t ld)
{
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++)
                im2col_row(g, x + c * g->H * g->W, ki, kj, oh0, oh1,
                           col + ((c * g->kh + ki) * g->kw + kj) * ld);
}

static void im2col(const Geo *g, const float *restrict x, int64_t oh0, int64_t oh1,
                   float *restrict col)
{
    im2col_ld(g, x, oh0, oh1, col, (oh1 - oh0) * g->Wo);
}

/* Small images are convolved a batch at a time: the columns of every image side by side,
 * [K, N * Ho * Wo], and one sgemm instead of one per image (N sgemms of a few dozen columns run
 * far below the BLAS's speed). From about 14 x 14 on, the per-image sgemms are as fast and the
 * batched path's extra copies cost more (the cnn training step at 28 x 28, farm-bench, 8 paired
 * runs: 0.95 of the time with the limit at 64 outputs instead of 4096). Only while the columns
 * fit this budget. */
#define BATCH_COL_BYTES ((size_t)32 << 20)

/* The columns of group gi of all N images side by side: rows K, N * Ho * Wo columns. */
static void im2col_batch(const Geo *g, int64_t N, int64_t group, int64_t gi, const float *x,
                         float *col)
{
    int64_t hwo = g->Ho * g->Wo, hwi = g->H * g->W, cin = g->C * group;
    for (int64_t n = 0; n < N; n++)
        im2col_ld(g, x + (n * cin + gi * g->C) * hwi, 0, g->Ho, col + n * hwo, N * hwo);
}

static gboolean batch_images(const Geo *g, int64_t N, int64_t K)
{
    int64_t hwo = g->Ho * g->Wo;
    return N > 1 && hwo <= 64 && (size_t)(K * N * hwo) * sizeof(float) <= BATCH_COL_BYTES;
}

/* ---------------------------------------------------------------------------------------- */
/* Winograd F(2x2, 3x3) for 3x3, stride 1, undilated, ungrouped convolutions with large outputs:
 * 16 GEMMs of (M x C) by (C x tiles) replace one of (M x 9C) by (C x pixels), 2.25 times fewer
 * multiplications. Each 2x2 output tile reads a 4x4 input tile; tiles are processed in blocks so
 * the transformed input and products stay a few MB. Weights are transformed at every call, which
 * is cheap next to the work for the shapes it is chosen for. */


/* Where it measured faster than im2col + sgemm on the development machine (AVX-512 EPYC,
 * OpenBLAS 0.3.21, docs/perf.md): outputs around 56 x 56 with 64 to 256 input channels and no
 * more output than input channels (ResNet-50's 64-channel and VGG-19's 256-channel layers,
 * 1.6 and 1.1 times faster). On 224 x 224 and 112 x 112 images, on 28 x 28 with 512 channels,
 * on thin inputs (VGG's first layer, 3 channels) and with M = 2C it was 5 to 40% slower. */
#define WINO_MIN_PIXELS 2500
#define WINO_MAX_PIXELS 4000
#define WINO_MIN_CHANNELS 64
#define WINO_MAX_CHANNELS 256
#define WINO_BLOCK_BYTES ((size_t)4 << 20)

static gboolean wino_fits(const Geo *g, int64_t group, int64_t M)
{
    return group == 1 && g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
           g->dw == 1 && g->Ho * g->Wo >= WINO_MIN_PIXELS && g->Ho * g->Wo <= WINO_MAX_PIXELS &&
           g->C >= WINO_MIN_CHANNELS && g->C <= WINO_MAX_CHANNELS && M <= g->C;
}

/* U[xi][m][c] = G g G^T for each 3x3 filter g. */
static void wino_weights(const float *restrict w, int64_t M, int64_t C, float *restrict U)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = w + (m * C + c) * 9;
            float t[4][3], u[4][4];
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[j];
                t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
                t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
                t[3][j] = g[6 + j];
            }
            for (int i = 0; i < 4; i++) {
                u[i][0] = t[i][0];
                u[i][1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                u[i][2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                u[i][3] = t[i][2];
            }
            for (int xi = 0; xi < 16; xi++)
                U[(xi * M + m) * C + c] = u[xi / 4][xi % 4];
        }
}

/* Tiles are processed in blocks of whole tile rows, so that for each of the 16 transformed
 * values the tiles of a row are contiguous: the transforms below are loops over a tile row that
 * the compiler vectorizes, reading rows padded with zeros (no bounds tests inside). */
static void wino_conv(const Geo *g, int64_t M, const float *x, const float *U, const float *bias,
                      float *y, float *ws, int64_t rows_max)
{
    int64_t C = g->C, H = g->H, W = g->W, Ho = g->Ho, Wo = g->Wo;
    int64_t tw = (Wo + 1) / 2, th = (Ho + 1) / 2, tb_max = rows_max * tw, rw = 2 * tw + 2;
    float *V = ws, *P = ws + 16 * C * tb_max, *rb = P + 16 * M * tb_max; /* rb: 4 rows + out */
    for (int64_t r0 = 0; r0 < th; r0 += rows_max) {
        int64_t nr = MIN(rows_max, th - r0), tb = nr * tw;
        for (int64_t c = 0; c < C; c++) {
            const float *xc = x + c * H * W;
            for (int64_t ti = 0; ti < nr; ti++) {
                /* The 4 input rows of this tile row, zero-padded to 2 tw + 2 columns. */
                for (int i = 0; i < 4; i++) {
                    float *row = rb + i * rw;
                    int64_t ih = 2 * (r0 + ti) - g->ph + i;
                    memset(row, 0, sizeof(float) * (size_t)rw);
                    if (ih < 0 || ih >= H)
                        continue;
                    int64_t c0 = MAX(0, g->pw), s0 = c0 - g->pw, n = MIN(W - s0, rw - c0);
                    if (n > 0)
                        memcpy(row + c0, xc + ih * W + s0, sizeof(float) * (size_t)n);
                }
                const float *restrict d0 = rb, *restrict d1 = rb + rw, *restrict d2 = rb + 2 * rw,
                                      *restrict d3 = rb + 3 * rw;
                float *restrict v = V + c * tb + ti * tw;
                int64_t st = C * tb; /* distance between the 16 planes */
                for (int64_t j = 0; j < tw; j++) {
                    int64_t q = 2 * j;
                    float t0[4], t1[4], t2[4], t3[4];
                    for (int k = 0; k < 4; k++) {
                        t0[k] = d0[q + k] - d2[q + k];
                        t1[k] = d1[q + k] + d2[q + k];
                        t2[k] = d2[q + k] - d1[q + k];
                        t3[k] = d1[q + k] - d3[q + k];
                    }
                    v[0 * st + j] = t0[0] - t0[2];
                    v[1 * st + j] = t0[1] + t0[2];
                    v[2 * st + j] = t0[2] - t0[1];
                    v[3 * st + j] = t0[1] - t0[3];
                    v[4 * st + j] = t1[0] - t1[2];
                    v[5 * st + j] = t1[1] + t1[2];
                    v[6 * st + j] = t1[2] - t1[1];
                    v[7 * st + j] = t1[1] - t1[3];
                    v[8 * st + j] = t2[0] - t2[2];
                    v[9 * st + j] = t2[1] + t2[2];
                    v[10 * st + j] = t2[2] - t2[1];
                    v[11 * st + j] = t2[1] - t2[3];
                    v[12 * st + j] = t3[0] - t3[2];
                    v[13 * st + j] = t3[1] + t3[2];
                    v[14 * st + j] = t3[2] - t3[1];
                    v[15 * st + j] = t3[1] - t3[3];
                }
            }
        }
        for (int xi = 0; xi < 16; xi++)
            psim__sgemm(FALSE, FALSE, M, tb, C, 1.0f, U + xi * M * C, C, V + xi * C * tb, tb, 0.0f,
                        P + xi * M * tb, tb);
        /* Y tile = A^T p A plus the bias, two output rows per tile row via a row buffer. */
        for (int64_t m = 0; m < M; m++) {
            float b = bias ? bias[m] : 0.0f;
            float *ym = y + m * Ho * Wo;
            for (int64_t ti = 0; ti < nr; ti++) {
                const float *restrict p = P + m * tb + ti * tw;
                int64_t st = M * tb;
                float *restrict o0 = rb, *restrict o1 = rb + rw;
                for (int64_t j = 0; j < tw; j++) {
                    float q[16];
                    for (int k = 0; k < 16; k++)
                        q[k] = p[k * st + j];
                    float a0 = q[0] + q[4] + q[8], a1 = q[1] + q[5] + q[9];
                    float a2 = q[2] + q[6] + q[10], a3 = q[3] + q[7] + q[11];
                    float b0 = q[4] - q[8] - q[12], b1 = q[5] - q[9] - q[13];
                    float b2 = q[6] - q[10] - q[14], b3 = q[7] - q[11] - q[15];
                    o0[2 * j] = a0 + a1 + a2 + b;
                    o0[2 * j + 1] = a1 - a2 - a3 + b;
                    o1[2 * j] = b0 + b1 + b2 + b;
                    o1[2 * j + 1] = b1 - b2 - b3 + b;
                }
                int64_t oh = 2 * (r0 + ti);
                memcpy(ym + oh * Wo, o0, sizeof(float) * (size_t)Wo);
                if (oh + 1 < Ho)
                    memcpy(ym + (oh + 1) * Wo, o1, sizeof(float) * (size_t)Wo);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Depthwise (one input and one output channel per group, as in MobileNet, EfficientNet and
 * ConvNeXt): each channel through the window planes (kernels/cpu/window.c), one weighted sum of
 * its taps per output, written once with the bias. (Per channel, im2col + sgemm built a
 * K x pixels buffer for a 1 x K by K x pixels product, twice the memory traffic of the
 * convolution itself.) */
static gboolean dw_conv(const Geo *g, int64_t N, int64_t channels, const float *x, const float *w,
                        const float *b, const PsimAct *act, float *y, GError **error)
{
    PsimPlanes p;
    psim__planes_init(&p, g->H, g->W, g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->ph, g->pw,
                      g->Ho, g->Wo);
    float *planes = psim__cpu_scratch(sizeof(float) * psim__planes_floats(&p), error);
    if (!planes)
        return FALSE;
    psim__planes_pad(&p, planes, 0.0f);
    const float *base[PSIM_PLANES_MAX_TAPS];
    psim__planes_taps(&p, planes, base);
    float *t = psim__planes_out(&p, planes);
    int64_t KK = g->kh * g->kw, HWi = g->H * g->W, HWo = g->Ho * g->Wo;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < channels; c++) {
            psim__planes_fill(&p, x + (n * channels + c) * HWi, planes);
            psim__planes_wsum(base, KK, w + c * KK, g->Ho * p.Ws, t);
            float bias = b ? b[c] : 0.0f, *yc = y + (n * channels + c) * HWo;
            for (int64_t oh = 0; oh < g->Ho; oh++)
                for (int64_t ow = 0; ow < g->Wo; ow++)
                    yc[oh * g->Wo + ow] = bias + t[oh * p.Ws + ow];
            if (act->kind != PSIM_ACT_NONE) /* while the channel is in L1 */
                psim__act_f32(act, yc, yc, HWo);
        }
    return TRUE;
}

static int64_t wino_block(const Geo *g, int64_t M)
{
    int64_t per_row = 16 * (g->C + M) * ((g->Wo + 1) / 2) * (int64_t)sizeof(float);
    return CLAMP((int64_t)WINO_BLOCK_BYTES / per_row, 1, (g->Ho + 1) / 2);
}

static int64_t band_rows(const Geo *g)
{
    size_t per_row = sizeof(float) * (size_t)(g->C * g->kh * g->kw * g->Wo);
    int64_t rows = per_row ? (int64_t)(BAND_BYTES / per_row) : g->Ho;
    return CLAMP(rows, 1, MAX(g->Ho, 1));
}

/* Float32 2-D convolutions that go to oneDNN first: kernels larger than 1x1, ungrouped or with at
 * least 8 input channels per group (c: per group), and grouped ones only where oneDNN has a
 * direct kernel for them (kernels/cpu/conv-dnnl.c refuses its gemm-based one). On an AVX2 EPYC,
 * where oneDNN ran ResNeXt's groups of 4 to 16 channels through its gemm kernel, they were
 * 1.3-1.8x slower there than through im2col, groups of 32 1.6x faster (bench-kernels nodes); on
 * an AVX-512 EPYC (Zen 4) it has direct kernels for them: groups of 8 3.5x faster
 * (resnext50_32x4d's layer2, regnet_y_400mf), of 16 2.5x (regnet_x_400mf), of 4 15% slower. */
static gboolean dnnl_takes(int64_t c, int64_t group, int64_t kh, int64_t kw)
{
    return kh * kw > 1 && c > 1 && (group == 1 || c >= 8);
}

/* Static shapes (when known) give the executor the workspace size up front. */
static size_t conv_workspace(const PsimGraph *graph, const PsimNode *n)
{
    if (n->n_inputs < 2 || n->inputs[0].node < 0 || n->inputs[1].node < 0)
        return 0;
    const PsimNode *xs = psim_graph_node(graph, n->inputs[0].node);
    const PsimNode *ws = psim_graph_node(graph, n->inputs[1].node);
    if (n->inputs[0].index >= xs->n_outputs || n->inputs[1].index >= ws->n_outputs)
        return 0;
    const PsimOutput *x = &xs->outputs[n->inputs[0].index], *w = &ws->outputs[n->inputs[1].index];
    if (x->rank != 4 || w->rank != 4 || n->n_outputs < 1 || n->outputs[0].rank != 4)
        return 0;
    int64_t C = w->dims[1], kh = w->dims[2], kw = w->dims[3], Wo = n->outputs[0].dims[3];
    if (C < 0 || kh < 0 || kw < 0 || Wo < 0 || psim_shape_elems(4, w->dims) < 0)
        return 0;
    if (kh == 1 && kw == 1)
        return 0; /* may be a direct GEMM; im2col then uses thread scratch */
    int64_t group = psim_node_attr_int(n, "group", 1);
    if (C == 1 && group == w->dims[0])
        return 0; /* depthwise: no column buffer */
    if (x->dtype == PSIM_DTYPE_FLOAT32 && dnnl_takes(C, group, kh, kw))
        return 0; /* oneDNN (should it refuse the shape, im2col uses thread scratch) */
    size_t per_row = sizeof(float) * (size_t)(C * kh * kw * Wo);
    return per_row > BAND_BYTES ? per_row : (BAND_BYTES / per_row) * per_row;
}

/* float64 (the gradient checks): every (output, input, weight) index triple of the
 * convolution, in order, handed to visit; the forward pass and its gradients are sums over the
 * same triples. */
typedef void (*ConvVisit)(void *user, int64_t yi, int64_t xi, int64_t wi);

static void conv_f64_walk(const Geo *g, int64_t N, int64_t group, int64_t M, ConvVisit visit,
                          void *user)
{
    int64_t Mg = M / group, Cin = g->C * group;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t gi = m / Mg;
            for (int64_t oh = 0; oh < g->Ho; oh++)
                for (int64_t ow = 0; ow < g->Wo; ow++) {
                    int64_t yi = ((n * M + m) * g->Ho + oh) * g->Wo + ow;
                    for (int64_t c = 0; c < g->C; c++)
                        for (int64_t ki = 0; ki < g->kh; ki++) {
                            int64_t ih = oh * g->sh - g->ph + ki * g->dh;
                            if (ih < 0 || ih >= g->H)
                                continue;
                            for (int64_t kj = 0; kj < g->kw; kj++) {
                                int64_t iw = ow * g->sw - g->pw + kj * g->dw;
                                if (iw < 0 || iw >= g->W)
                                    continue;
                                visit(user, yi, ((n * Cin + gi * g->C + c) * g->H + ih) * g->W + iw,
                                      ((m * g->C + c) * g->kh + ki) * g->kw + kj);
                            }
                        }
                }
        }
}

typedef struct {
    const double *x, *w, *dy;
    double *y, *dx, *dw;
} ConvF64;

static void visit_forward(void *user, int64_t yi, int64_t xi, int64_t wi)
{
    ConvF64 *c = user;
    c->y[yi] += c->x[xi] * c->w[wi];
}

static void visit_backward(void *user, int64_t yi, int64_t xi, int64_t wi)
{
    ConvF64 *c = user;
    if (c->dw)
        c->dw[wi] += c->dy[yi] * c->x[xi];
    if (c->dx)
        c->dx[xi] += c->dy[yi] * c->w[wi];
}

/* float64: bias first, then the products. */
static void conv_f64(const Geo *g, int64_t N, int64_t group, int64_t M, const double *x,
                     const double *w, const double *b, double *y)
{
    int64_t hwo = g->Ho * g->Wo;
    for (int64_t i = 0; i < N * M * hwo; i++)
        y[i] = b ? b[(i / hwo) % M] : 0;
    ConvF64 c = {.x = x, .w = w, .y = y};
    conv_f64_walk(g, N, group, M, visit_forward, &c);
}

/* The batched path: per group, columns of all N images, one sgemm into [Mg, N * HWo], then
 * each image's rows added onto the output (which holds the bias). */
static gboolean conv_batched(const Geo *g, int64_t N, int64_t group, int64_t M, const float *xd,
                             const float *wd, float *yd, GError **error)
{
    int64_t Mg = M / group, K = g->C * g->kh * g->kw, HWo = g->Ho * g->Wo, cols = N * HWo;
    float *col = psim__cpu_scratch(sizeof(float) * (size_t)((K + Mg) * cols), error);
    if (!col)
        return FALSE;
    float *out = col + K * cols;
    for (int64_t gi = 0; gi < group; gi++) {
        im2col_batch(g, N, group, gi, xd, col);
        psim__sgemm(FALSE, FALSE, Mg, cols, K, 1.0f, wd + gi * Mg * K, K, col, cols, 0.0f, out,
                    cols);
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < Mg; m++) {
                float *restrict dst = yd + (n * M + gi * Mg + m) * HWo;
                const float *restrict src = out + m * cols + n * HWo;
                for (int64_t i = 0; i < HWo; i++)
                    dst[i] += src[i];
            }
    }
    return TRUE;
}

/* FusedConv's activation (PSIM_ACT_NONE for Conv). */
static gboolean conv_act(PsimKernelCtx *ctx, PsimAct *act, GError **error)
{
    const PsimNode *node = ctx->node;
    *act = (PsimAct){PSIM_ACT_NONE, 0.0f, 0.0f};
    if (strcmp(node->op, "FusedConv"))
        return TRUE;
    if (psim__cpu_in(ctx, 3)) {
        KERR(ctx, error, "FusedConv's sum input (Z) has no CPU kernel");
        return FALSE;
    }
    const char *name = psim_node_attr_string(node, "activation", NULL);
    const PsimAttr *pa = psim_node_attr(node, "activation_params");
    float params[2] = {0, 0};
    int32_t np = pa && pa->type == PSIM_ATTR_FLOATS ? pa->n : 0;
    for (int32_t i = 0; i < np && i < 2; i++)
        params[i] = (float)pa->v.floats[i];
    if (!name || np > 2 || !psim__act_from_name(name, params, np, act)) {
        KERR(ctx, error, "FusedConv's activation '%s' with %d parameter(s) is not one of Relu, "
             "LeakyRelu (alpha), Clip (min, max), HardSigmoid (alpha, beta), Sigmoid, Tanh",
             name ? name : "(none)", np);
        return FALSE;
    }
    return TRUE;
}

/* The activation over every output (the paths that write the whole output before it). */
static void conv_act_all(const PsimAct *act, PsimTensor *y)
{
    if (act->kind == PSIM_ACT_NONE || y->n_elems == 0)
        return;
    if (y->dtype == PSIM_DTYPE_FLOAT64)
        psim__act_f64(act, y->data, y->data, y->n_elems);
    else
        psim__act_f32(act, y->data, y->data, y->n_elems);
}

static gboolean run_conv_act(PsimKernelCtx *ctx, const PsimAct *act, GError **error);

static gboolean run_conv(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimAct act;
    if (!conv_act(ctx, &act, error))
        return FALSE;
    return run_conv_act(ctx, &act, error);
}

/* 3-D (video) convolution, float32: per image, group and output depth slice, columns of rows
 * (c, kd, kh, kw) in bands of output rows, made of the 2-D rows of each input depth slice the
 * kernel's depth taps read (zeros where a tap falls in the depth padding), and one GEMM with the
 * weights as they lie ([M][C][KD][KH][KW]) into the output slice (rows a channel apart). */
static gboolean conv3d(const PsimWindow *win, int64_t group, const float *xd, const int64_t *xdims,
                       const float *wd, const int64_t *wdims, const float *bias, const PsimAct *act, PsimTensor *y,
                       GError **error)
{
    int64_t N = xdims[0], Cin = xdims[1], D = xdims[2], M = wdims[0], KD = wdims[2];
    int64_t C = Cin / group, Mg = M / group, Do = win->out[0], sd = win->stride[0], dd = win->dil[0];
    int64_t pd = win->pad0[0];
    Geo g = {C, xdims[3], xdims[4], wdims[3], wdims[4], win->stride[1], win->stride[2], win->dil[1],
             win->dil[2], win->pad0[1], win->pad0[2], win->out[1], win->out[2]};
    int64_t HWi = g.H * g.W, HWo = g.Ho * g.Wo, KHW = g.kh * g.kw, K = C * KD * KHW;
    float *yd = y->data;
    for (int64_t i = 0; i < N * M; i++) {
        float v = bias ? bias[i % M] : 0.0f, *restrict dst = yd + i * Do * HWo;
        for (int64_t j = 0; j < Do * HWo; j++)
            dst[j] = v;
    }
    if (K == 0 || y->n_elems == 0) {
        conv_act_all(act, y);
        return TRUE;
    }
    size_t per_row = sizeof(float) * (size_t)(K * g.Wo);
    int64_t rows = CLAMP((int64_t)(BAND_BYTES / per_row), 1, MAX(g.Ho, 1));
    float *col = psim__cpu_scratch(sizeof(float) * (size_t)(K * rows * g.Wo), error);
    if (!col)
        return FALSE;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < group; gi++) {
            const float *wg = wd + gi * Mg * K;
            float *yg = yd + (n * M + gi * Mg) * Do * HWo;
            for (int64_t od = 0; od < Do; od++)
                for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += rows) {
                    int64_t oh1 = MIN(g.Ho, oh0 + rows), ncol = (oh1 - oh0) * g.Wo;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kd = 0; kd < KD; kd++) {
                            int64_t id = od * sd - pd + kd * dd;
                            float *dst = col + (c * KD + kd) * KHW * ncol;
                            if (id < 0 || id >= D) {
                                memset(dst, 0, sizeof(float) * (size_t)(KHW * ncol));
                                continue;
                            }
                            const float *plane = xd + ((n * Cin + gi * C + c) * D + id) * HWi;
                            for (int64_t ki = 0; ki < g.kh; ki++)
                                for (int64_t kj = 0; kj < g.kw; kj++)
                                    im2col_row(&g, plane, ki, kj, oh0, oh1, dst + (ki * g.kw + kj) * ncol);
                        }
                    psim__sgemm(FALSE, FALSE, Mg, ncol, K, 1.0f, wg, K, col, ncol, 1.0f,
                                yg + od * HWo + oh0 * g.Wo, Do * HWo);
                }
        }
    conv_act_all(act, y);
    return TRUE;
}

static gboolean run_conv_act(PsimKernelCtx *ctx, const PsimAct *act, GError **error)
{
    PsimTensor *x = ctx->inputs[0], *w = ctx->inputs[1], *b = psim__cpu_in(ctx, 2);
    const PsimNode *node = ctx->node;
    PsimDType dt = x->dtype;
    if ((dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64) || w->dtype != dt ||
        (b && b->dtype != dt)) {
        KERR(ctx, error, "Conv has a CPU kernel for float32 and float64 (X, W and B of one type)");
        return FALSE;
    }
    if (x->rank < 3 || x->rank > 5 || w->rank != x->rank || (x->rank == 5 && dt != PSIM_DTYPE_FLOAT32)) {
        KERR(ctx, error, "Conv supports 1-D and 2-D inputs (rank 3 or 4) and 3-D float32 ones (rank 5), not rank %d %s",
             x->rank, psim_dtype_name(dt));
        return FALSE;
    }
    int32_t nsp = x->rank - 2;
    int64_t group = psim_node_attr_int(node, "group", 1);
    int64_t N = x->dims[0], Cin = x->dims[1], M = w->dims[0];
    if (group < 1 || Cin % group || M % group || w->dims[1] != Cin / group) {
        KERR(ctx, error, "Conv weights (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
             ", ...) do not fit %" G_GINT64_FORMAT " input channels in %" G_GINT64_FORMAT
             " groups", M, w->dims[1], Cin, group);
        return FALSE;
    }
    const int64_t *ks = NULL;
    int32_t nks = psim_node_attr_ints(node, "kernel_shape", &ks);
    if (nks >= 0 && (nks != nsp || memcmp(ks, w->dims + 2, sizeof(int64_t) * (size_t)nsp))) {
        KERR(ctx, error, "kernel_shape does not match the weights");
        return FALSE;
    }
    if (b && (b->n_elems != M)) {
        KERR(ctx, error, "Conv bias has %" G_GINT64_FORMAT " values for %" G_GINT64_FORMAT
             " output channels", b->n_elems, M);
        return FALSE;
    }
    PsimWindow win;
    if (!psim__cpu_window(ctx, nsp, x->dims + 2, w->dims + 2, FALSE, TRUE, &win, error))
        return FALSE;
    if (nsp == 3) {
        int64_t od5[5] = {N, M, win.out[0], win.out[1], win.out[2]};
        PsimTensor *y = psim__cpu_out_all(ctx, 0, dt, 5, od5, error);
        return y && conv3d(&win, group, x->data, x->dims, w->data, w->dims, b ? b->data : NULL, act, y,
                           error);
    }
    /* 1-D is 2-D with a height of 1. */
    Geo g = {Cin / group, 1, x->dims[2], 1, w->dims[2], 1, win.stride[0], 1, win.dil[0], 0,
             win.pad0[0], 1, win.out[0]};
    if (nsp == 2)
        g = (Geo){Cin / group, x->dims[2], x->dims[3], w->dims[2], w->dims[3], win.stride[0],
                  win.stride[1], win.dil[0], win.dil[1], win.pad0[0], win.pad0[1], win.out[0],
                  win.out[1]};
    /* im2col only ever reads the begin pads; the end pads only change the output size. */
    int64_t od[4] = {N, M, g.Ho, g.Wo};
    if (nsp == 1)
        od[2] = g.Wo;
    PsimTensor *y = psim__cpu_out_all(ctx, 0, dt, x->rank, od, error); /* every path writes all */
    if (!y)
        return FALSE;
    int64_t Mg = M / group, K = g.C * g.kh * g.kw, HWo = g.Ho * g.Wo, HWi = g.H * g.W;
    if (dt == PSIM_DTYPE_FLOAT32 && nsp == 2 && dnnl_takes(g.C, group, g.kh, g.kw) && y->n_elems > 0) {
        PsimConvDnnlArgs a = {N, Cin, g.H, g.W, M, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw,
                              g.Ho, g.Wo, group, x->data, w->data, b ? b->data : NULL, y->data,
                              (ctx->constant_inputs >> 1) & 1, act};
        int r = psim__conv_dnnl_run(ctx->state, &a, error);
        if (r != 0)
            return r > 0;
    }
    if (dt == PSIM_DTYPE_FLOAT64) {
        conv_f64(&g, N, group, M, x->data, w->data, b ? b->data : NULL, y->data);
        conv_act_all(act, y);
        return TRUE;
    }
    float *yd = y->data;
    const float *xd = x->data, *wd = w->data;
    if (y->n_elems == 0)
        return TRUE;
    /* Depthwise convolutions write each output once, bias included. */
    if (g.C == 1 && Mg == 1 && psim__planes_fits(g.kh, g.kw, g.sh, g.sw, g.Ho, g.Wo))
        return dw_conv(&g, N, M, xd, wd, b ? b->data : NULL, act, yd, error);
    /* The bias is written first so that GEMM accumulates onto it (beta = 1). */
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float v = b ? ((const float *)b->data)[m] : 0.0f, *restrict dst = yd + (n * M + m) * HWo;
            for (int64_t i = 0; i < HWo; i++)
                dst[i] = v;
        }
    if (K == 0) {
        conv_act_all(act, y);
        return TRUE;
    }
    if (wino_fits(&g, group, M)) {
        int64_t rows = wino_block(&g, M), tb = rows * ((g.Wo + 1) / 2);
        int64_t rbuf = 4 * (2 * ((g.Wo + 1) / 2) + 2);
        size_t need = sizeof(float) * (size_t)(16 * M * K / 9 + 16 * (g.C + M) * tb + rbuf);
        float *ws = psim__cpu_scratch(need, error);
        if (!ws)
            return FALSE;
        float *U = ws + 16 * (g.C + M) * tb + rbuf;
        wino_weights(wd, M, g.C, U);
        for (int64_t n = 0; n < N; n++)
            wino_conv(&g, M, xd + n * Cin * HWi, U, b ? b->data : NULL, yd + n * M * HWo, ws, rows);
        conv_act_all(act, y);
        return TRUE;
    }
    gboolean direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 &&
                      g.pw == 0 && g.Ho == g.H && g.Wo == g.W;
    if (batch_images(&g, N, K)) {
        if (!conv_batched(&g, N, group, M, xd, wd, yd, error))
            return FALSE;
        conv_act_all(act, y);
        return TRUE;
    }
    float *col = NULL;
    int64_t rows = band_rows(&g);
    if (!direct) {
        size_t need = sizeof(float) * (size_t)(K * rows * g.Wo);
        if (ctx->workspace && ctx->workspace_bytes >= need)
            col = ctx->workspace;
        else if (!(col = psim__cpu_scratch(need, error)))
            return FALSE;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < group; gi++) {
            const float *xg = xd + (n * Cin + gi * g.C) * HWi;
            const float *wg = wd + gi * Mg * K;
            float *yg = yd + (n * M + gi * Mg) * HWo;
            if (direct) {
                psim__sgemm(FALSE, FALSE, Mg, HWo, K, 1.0f, wg, K, xg, HWo, 1.0f, yg, HWo);
            } else {
                for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += rows) {
                    int64_t oh1 = MIN(g.Ho, oh0 + rows), ncol = (oh1 - oh0) * g.Wo;
                    im2col(&g, xg, oh0, oh1, col);
                    psim__sgemm(FALSE, FALSE, Mg, ncol, K, 1.0f, wg, K, col, ncol, 1.0f,
                                yg + oh0 * g.Wo, HWo);
                }
            }
            if (act->kind != PSIM_ACT_NONE) /* this group's outputs, while in cache */
                psim__act_f32(act, yg, yg, Mg * HWo);
        }
    return TRUE;
}

static gboolean conv_prepare(const PsimGraph *g, const PsimNode *n, void *device, void **state,
                             GError **error)
{
    (void)g, (void)n, (void)device, (void)error;
    *state = psim__conv_dnnl_new();
    return TRUE;
}

static void conv_release(void *state)
{
    psim__conv_dnnl_free(state);
}

static void conv_state_memory(void *state, const void **p, size_t *bytes)
{
    psim__conv_dnnl_memory(state, p, bytes);
}

void psim__cpu_register_conv(void)
{
    /* Conv and FusedConv (Conv, then its activation on what it writes) share the kernel. */
#define CONV_DEFS(OP, DESC32, DESC64)                                                              \
    {.op = OP, .device_type = "CPU", .dtype = PSIM_DTYPE_FLOAT32, .name = "cpu-conv",              \
     .description = DESC32, .workspace = conv_workspace, .prepare = conv_prepare,                  \
     .release = conv_release, .run = run_conv, .state_memory = conv_state_memory},                 \
    {.op = OP, .device_type = "CPU", .dtype = PSIM_DTYPE_FLOAT64, .name = "cpu-conv",              \
     .description = DESC64, .workspace = conv_workspace, .run = run_conv}
    static const PsimKernelDef defs[] = {
        CONV_DEFS("Conv",
                  "1-D/2-D convolution: oneDNN's direct convolution for kernels larger than 1x1 "
                  "(input reordered to its blocked layout and back), direct GEMM for 1x1, "
                  "polyphase loops for depthwise, else banded im2col + sgemm",
                  "convolution in float64 by direct loops"),
        CONV_DEFS("FusedConv",
                  "Conv's kernel with its activation applied as each part of the output is "
                  "written: a oneDNN post-op (Relu, LeakyRelu, Clip) or the activation loop over "
                  "each channel or group while it is in cache",
                  "convolution in float64 by direct loops, then the activation"),
    };
#undef CONV_DEFS
    psim__kernels_add(defs, (int)G_N_ELEMENTS(defs));
}

gboolean psim__cpu_conv_transpose_2d(const PsimConvT2d *p, const float *x, const float *w,
                                     const float *bias, float *y, GError **error)
{
    int64_t cg = p->c / p->group, in_sp = p->in[0] * p->in[1], out_sp = p->out[0] * p->out[1];
    int64_t k_sp = p->k[0] * p->k[1], rows = p->mg * k_sp, m_all = p->mg * p->group;
    float *cols = psim__cpu_scratch(sizeof(float) * (size_t)(rows * in_sp), error);
    if (!cols)
        return FALSE;
    memset(y, 0, sizeof(float) * (size_t)(p->n * m_all * out_sp));
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t g = 0; g < p->group; g++) {
            const float *xg = x + (n * p->c + g * cg) * in_sp, *wg = w + g * cg * rows;
            /* cols[m, kh, kw][ih, iw] = sum over c of W[c][m, kh, kw] X[c][ih, iw]. */
            psim__sgemm(TRUE, FALSE, rows, in_sp, cg, 1.0f, wg, rows, xg, in_sp, 0.0f, cols, in_sp);
            for (int64_t m = 0; m < p->mg; m++) {
                float *ym = y + (n * m_all + g * p->mg + m) * out_sp;
                for (int64_t kh = 0; kh < p->k[0]; kh++)
                    for (int64_t kw = 0; kw < p->k[1]; kw++) {
                        const float *row = cols + ((m * p->k[0] + kh) * p->k[1] + kw) * in_sp;
                        for (int64_t ih = 0; ih < p->in[0]; ih++) {
                            int64_t oh = ih * p->stride[0] + kh * p->dil[0] - p->pad[0];
                            if (oh < 0 || oh >= p->out[0])
                                continue;
                            float *yr = ym + oh * p->out[1];
                            const float *cr = row + ih * p->in[1];
                            int64_t off = kw * p->dil[1] - p->pad[1];
                            /* The input columns whose output column lies inside. */
                            int64_t lo = off < 0 ? (-off + p->stride[1] - 1) / p->stride[1] : 0;
                            int64_t hi = (p->out[1] - 1 - off) / p->stride[1] + 1;
                            if (p->out[1] - 1 - off < 0)
                                continue;
                            hi = MIN(hi, p->in[1]);
                            if (p->stride[1] == 1)
                                for (int64_t iw = lo; iw < hi; iw++)
                                    yr[iw + off] += cr[iw];
                            else
                                for (int64_t iw = lo; iw < hi; iw++)
                                    yr[iw * p->stride[1] + off] += cr[iw];
                        }
                    }
                if (bias)
                    for (int64_t i = 0; i < out_sp; i++)
                        ym[i] += bias[g * p->mg + m];
            }
        }
    return TRUE;
}

/* ---------------------------------------------------------------------------------------- */
/* ConvGrad (ONNX Runtime's com.microsoft training op): from dY, X and W of a Conv, its
 * gradients dX, dW and dB, each only when attribute `grads` (bits 1, 2, 4) asks for it. Per
 * image and group, float32: dW += dY im2col(X)^T and dX = col2im(W^T dY), two sgemms; float64
 * (the gradient checks): direct loops. */

/* Adds row (ki, kj) of a channel's columns (Ho Wo floats) back into that channel's image xc. */
static inline void col2im_row(const Geo *g, const float *restrict src, int64_t ki, int64_t kj,
                              float *restrict xc)
{
    int64_t off = kj * g->dw - g->pw;
    int64_t ow0 = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t ow1 = g->W - off <= 0 ? 0 : (g->W - off + g->sw - 1) / g->sw;
    ow1 = MIN(ow1, g->Wo);
    for (int64_t oh = 0; oh < g->Ho; oh++, src += g->Wo) {
        int64_t ih = oh * g->sh - g->ph + ki * g->dh;
        if (ih < 0 || ih >= g->H)
            continue;
        float *dst = xc + ih * g->W;
        if (g->sw == 1)
            for (int64_t ow = ow0; ow < ow1; ow++)
                dst[ow + off] += src[ow];
        else
            for (int64_t ow = ow0; ow < ow1; ow++)
                dst[ow * g->sw + off] += src[ow];
    }
}

/* Adds columns (rows (c, ki, kj), columns (oh, ow); rows ld floats apart) back into the image
 * they came from. */
static void col2im_add(const Geo *g, const float *restrict col, int64_t ld, float *restrict x)
{
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++)
                col2im_row(g, col + ((c * g->kh + ki) * g->kw + kj) * ld, ki, kj,
                           x + c * g->H * g->W);
}

static void conv_grad_f64(const Geo *g, int64_t N, int64_t group, int64_t M, const double *dy,
                          const double *x, const double *w, double *dx, double *dw, double *db)
{
    int64_t hwo = g->Ho * g->Wo;
    for (int64_t i = 0; db && i < N * M * hwo; i++)
        db[(i / hwo) % M] += dy[i];
    ConvF64 c = {.x = x, .w = w, .dy = dy, .dx = dx, .dw = dw};
    conv_f64_walk(g, N, group, M, visit_backward, &c);
}

/* The batched path: per group, dY's rows of all images side by side ([Mg, N * HWo]), then
 * dW = dY' cols^T and cols = W^T dY' as one sgemm each; dX scattered back image by image. */
static gboolean conv_grad_batched(const Geo *g, int64_t N, int64_t group, int64_t M,
                                  const float *dyd, const float *xd, const float *wd, float *dx,
                                  float *dw, GError **error)
{
    int64_t Mg = M / group, K = g->C * g->kh * g->kw, HWo = g->Ho * g->Wo, HWi = g->H * g->W;
    int64_t cols = N * HWo, Cin = g->C * group;
    float *col = psim__cpu_scratch(sizeof(float) * (size_t)((K + Mg) * cols), error);
    if (!col)
        return FALSE;
    float *dyb = col + K * cols;
    for (int64_t gi = 0; gi < group; gi++) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < Mg; m++)
                memcpy(dyb + m * cols + n * HWo, dyd + (n * M + gi * Mg + m) * HWo,
                       sizeof(float) * (size_t)HWo);
        if (dw) {
            im2col_batch(g, N, group, gi, xd, col);
            psim__sgemm(FALSE, TRUE, Mg, K, cols, 1.0f, dyb, cols, col, cols, 0.0f,
                        dw + gi * Mg * K, K);
        }
        if (dx) {
            psim__sgemm(TRUE, FALSE, K, cols, Mg, 1.0f, wd + gi * Mg * K, K, dyb, cols, 0.0f, col,
                        cols);
            /* Row by row, the images inside: each row of the columns is read front to back
             * (image by image, the reads went K rows N Ho Wo floats apart: col2im of the cnn's
             * 4 x 4 layer at batch 64 800 -> 515 us; im2col, written either way, measured the
             * same, about 1 ms for its 590,000 rows of four floats). */
            for (int64_t c = 0; c < g->C; c++)
                for (int64_t ki = 0; ki < g->kh; ki++)
                    for (int64_t kj = 0; kj < g->kw; kj++) {
                        const float *row = col + ((c * g->kh + ki) * g->kw + kj) * cols;
                        for (int64_t n = 0; n < N; n++)
                            col2im_row(g, row + n * HWo, ki, kj,
                                       dx + (n * Cin + gi * g->C + c) * HWi);
                    }
        }
    }
    return TRUE;
}

static gboolean run_conv_grad(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *dy = ctx->inputs[0], *x = ctx->inputs[1], *w = ctx->inputs[2];
    PsimDType dt = x->dtype;
    int64_t want = psim_node_attr_int(ctx->node, "grads", 7);
    if ((dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64) || w->dtype != dt ||
        dy->dtype != dt || x->rank != 4 || w->rank != 4 || dy->rank != 4) {
        KERR(ctx, error, "ConvGrad takes 2-D dY, X and W of one float dtype");
        return FALSE;
    }
    int64_t group = psim_node_attr_int(ctx->node, "group", 1);
    int64_t N = x->dims[0], Cin = x->dims[1], M = w->dims[0];
    if (group < 1 || Cin % group || M % group || w->dims[1] != Cin / group) {
        KERR(ctx, error, "ConvGrad weights do not fit the input's channels in %" G_GINT64_FORMAT
             " groups", group);
        return FALSE;
    }
    PsimWindow win;
    if (!psim__cpu_window(ctx, 2, x->dims + 2, w->dims + 2, FALSE, TRUE, &win, error))
        return FALSE;
    Geo g = {Cin / group, x->dims[2], x->dims[3], w->dims[2], w->dims[3], win.stride[0],
             win.stride[1], win.dil[0], win.dil[1], win.pad0[0], win.pad0[1], win.out[0],
             win.out[1]};
    if (dy->dims[0] != N || dy->dims[1] != M || dy->dims[2] != g.Ho || dy->dims[3] != g.Wo) {
        KERR(ctx, error, "ConvGrad's dY is not shaped like the convolution's output");
        return FALSE;
    }
    PsimTensor *dx = NULL, *dw = NULL, *db = NULL;
    /* zeroed here when summed into (not when oneDNN writes them) */
    if ((want & 1) && ctx->n_outputs > 0 && !(dx = psim__cpu_out_all(ctx, 0, dt, 4, x->dims, error)))
        return FALSE;
    if ((want & 2) && ctx->n_outputs > 1 && !(dw = psim__cpu_out_all(ctx, 1, dt, 4, w->dims, error)))
        return FALSE;
    if ((want & 4) && ctx->n_outputs > 2 && !(db = psim__cpu_out(ctx, 2, dt, 1, &M, error)))
        return FALSE;
    if (dt == PSIM_DTYPE_FLOAT32 && (dx || dw) && dnnl_takes(g.C, group, g.kh, g.kw)) {
        PsimConvGradDnnlArgs a = {N, Cin, g.H, g.W, M, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph,
                                  g.pw, g.Ho, g.Wo, group, dy->data, x->data, w->data,
                                  dx ? dx->data : NULL, dw ? dw->data : NULL};
        int r = psim__conv_grad_dnnl_run(ctx->state, &a, error);
        if (r < 0)
            return FALSE;
        if (r > 0)
            dx = dw = NULL; /* written; dB (if wanted) below */
    }
    if (dx)
        memset(dx->data, 0, dx->nbytes);
    if (dw)
        memset(dw->data, 0, dw->nbytes);
    if (dt == PSIM_DTYPE_FLOAT64) {
        conv_grad_f64(&g, N, group, M, dy->data, x->data, w->data, dx ? dx->data : NULL,
                      dw ? dw->data : NULL, db ? db->data : NULL);
        return TRUE;
    }
    int64_t Mg = M / group, K = g.C * g.kh * g.kw, HWo = g.Ho * g.Wo, HWi = g.H * g.W;
    const float *dyd = dy->data, *xd = x->data, *wd = w->data;
    if (db) {
        float *b = db->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                const float *r = dyd + (n * M + m) * HWo;
                float s = 0;
                for (int64_t i = 0; i < HWo; i++)
                    s += r[i];
                b[m] += s;
            }
    }
    if (!dx && !dw)
        return TRUE;
    gboolean direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 &&
                      g.pw == 0 && g.Ho == g.H && g.Wo == g.W;
    if (batch_images(&g, N, K))
        return conv_grad_batched(&g, N, group, M, dyd, xd, wd, dx ? dx->data : NULL,
                                 dw ? dw->data : NULL, error);
    float *col = psim__cpu_scratch(sizeof(float) * (size_t)(K * HWo), error);
    if (!col)
        return FALSE;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < group; gi++) {
            const float *xg = xd + (n * Cin + gi * g.C) * HWi, *wg = wd + gi * Mg * K;
            const float *dyg = dyd + (n * M + gi * Mg) * HWo;
            if (dw) {
                const float *cx = xg;
                if (!direct) {
                    im2col(&g, xg, 0, g.Ho, col);
                    cx = col;
                }
                psim__sgemm(FALSE, TRUE, Mg, K, HWo, 1.0f, dyg, HWo, cx, HWo, 1.0f,
                            (float *)dw->data + gi * Mg * K, K);
            }
            if (dx) {
                float *dxg = (float *)dx->data + (n * Cin + gi * g.C) * HWi;
                /* 1x1 unit-stride: the columns are the image itself, summed into directly. */
                psim__sgemm(TRUE, FALSE, K, HWo, Mg, 1.0f, wg, K, dyg, HWo, direct ? 1.0f : 0.0f,
                            direct ? dxg : col, HWo);
                if (!direct)
                    col2im_add(&g, col, HWo, dxg);
            }
        }
    return TRUE;
}

static gboolean conv_grad_prepare(const PsimGraph *g, const PsimNode *n, void *device,
                                  void **state, GError **error)
{
    (void)g, (void)n, (void)device, (void)error;
    *state = psim__conv_grad_dnnl_new();
    return TRUE;
}

static void conv_grad_release(void *state)
{
    psim__conv_grad_dnnl_free(state);
}

void psim__cpu_register_conv_grad(void)
{
    static const PsimKernelDef defs[] = {
        {.op = "ConvGrad", .device_type = "CPU", .dtype = PSIM_DTYPE_FLOAT32,
         .name = "cpu-conv-grad", .description =
             "Conv's dX, dW, dB: oneDNN's backward-data and backward-weights convolutions where it "
             "takes the forward one (kernels larger than 1x1), else im2col + sgemm and sgemm + "
             "col2im",
         .prepare = conv_grad_prepare, .release = conv_grad_release, .run = run_conv_grad},
        {.op = "ConvGrad", .device_type = "CPU", .dtype = PSIM_DTYPE_FLOAT64,
         .name = "cpu-conv-grad", .description = "Conv's dX, dW, dB in float64 by direct loops",
         .run = run_conv_grad},
    };
    psim__kernels_add(defs, (int)G_N_ELEMENTS(defs));
}
