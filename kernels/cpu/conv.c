/* Conv (1-D and 2-D, groups, pads, strides, dilations, auto_pad) on OpenBLAS sgemm. A 1x1
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

/* Columns of output rows [oh0, oh1): rows (c, ki, kj), columns (oh, ow). */
static void im2col(const Geo *g, const float *restrict x, int64_t oh0, int64_t oh1,
                   float *restrict col)
{
    int64_t ncol = (oh1 - oh0) * g->Wo;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                float *restrict dst = col + ((c * g->kh + ki) * g->kw + kj) * ncol;
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
                    const float *src = x + (c * g->H + ih) * g->W;
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
}

static int64_t band_rows(const Geo *g)
{
    size_t per_row = sizeof(float) * (size_t)(g->C * g->kh * g->kw * g->Wo);
    int64_t rows = per_row ? (int64_t)(BAND_BYTES / per_row) : g->Ho;
    return CLAMP(rows, 1, MAX(g->Ho, 1));
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
    size_t per_row = sizeof(float) * (size_t)(C * kh * kw * Wo);
    return per_row > BAND_BYTES ? per_row : (BAND_BYTES / per_row) * per_row;
}

static gboolean run_conv(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *w = ctx->inputs[1], *b = psim__cpu_in(ctx, 2);
    const PsimNode *node = ctx->node;
    if (x->dtype != PSIM_DTYPE_FLOAT32 || w->dtype != PSIM_DTYPE_FLOAT32 ||
        (b && b->dtype != PSIM_DTYPE_FLOAT32)) {
        KERR(ctx, error, "Conv has a CPU kernel for float32 only");
        return FALSE;
    }
    if ((x->rank != 4 && x->rank != 3) || w->rank != x->rank) {
        KERR(ctx, error, "Conv supports 1-D and 2-D inputs (rank 3 or 4), not rank %d", x->rank);
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
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_FLOAT32, x->rank, od, error);
    if (!y)
        return FALSE;
    int64_t Mg = M / group, K = g.C * g.kh * g.kw, HWo = g.Ho * g.Wo, HWi = g.H * g.W;
    float *yd = y->data;
    const float *xd = x->data, *wd = w->data;
    if (y->n_elems == 0)
        return TRUE;
    /* The bias is written first so that GEMM accumulates onto it (beta = 1). */
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float v = b ? ((const float *)b->data)[m] : 0.0f, *restrict dst = yd + (n * M + m) * HWo;
            for (int64_t i = 0; i < HWo; i++)
                dst[i] = v;
        }
    if (K == 0)
        return TRUE;
    gboolean direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 &&
                      g.pw == 0 && g.Ho == g.H && g.Wo == g.W;
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
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Mg,
                            (blasint)HWo, (blasint)K, 1.0f, wg, (blasint)K, xg, (blasint)HWo,
                            1.0f, yg, (blasint)HWo);
                continue;
            }
            for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += rows) {
                int64_t oh1 = MIN(g.Ho, oh0 + rows), ncol = (oh1 - oh0) * g.Wo;
                im2col(&g, xg, oh0, oh1, col);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Mg,
                            (blasint)ncol, (blasint)K, 1.0f, wg, (blasint)K, col, (blasint)ncol,
                            1.0f, yg + oh0 * g.Wo, (blasint)HWo);
            }
        }
    return TRUE;
}

void psim__cpu_register_conv(void)
{
    static const PsimDType f32[] = {PSIM_DTYPE_FLOAT32, -1};
    psim__cpu_add("Conv", "cpu-conv-im2col-sgemm",
                  "1-D/2-D convolution: direct GEMM for 1x1, else banded im2col + sgemm", run_conv,
                  f32, conv_workspace);
}
