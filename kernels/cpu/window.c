/* Sliding windows over one channel of a 2-D image through polyphase planes: the shared engine of
 * depthwise convolution, max pooling and average pooling (kernels/cpu/conv.c, pool.c).
 *
 * The channel is copied into sh x sw planes of its padded image, one per (row phase, column
 * phase) of the stride, Ws floats a row. Padded pixel (r, c) lies in plane (r % sh, c % sw) at
 * row r / sh, column c / sw, so tap (ki, kj) of output (oh, ow), padded pixel
 * (oh sh + ki dh, ow sw + kj dw), lies in plane ((ki dh) % sh, (kj dw) % sw) at
 * (oh + (ki dh) / sh) Ws + ow + (kj dw) / sw. Over the flat index q = oh Ws + ow every tap is one
 * contiguous run: a whole channel is one loop over q that reduces all taps in registers; the
 * Ws - Wo columns past each output row's end are computed and dropped. The pads lie at the same
 * places in every channel: the planes are set to the pad value once per call, and each channel
 * only copies its pixels in.
 *
 * Per tap and output row, the row loops this replaces made a pass over the output row and found
 * the tap's columns with two divisions; on 7 x 7 and 14 x 14 images that bookkeeping was most of
 * the time (mobilenet_v2's 960-channel 7 x 7 depthwise layer ran at 2.3 GFLOP/s, GoogLeNet's
 * 3 x 3 max pools at 1-3 G comparisons/s). */
#include "cpu-private.h"

#include <math.h>

void psim__planes_init(PsimPlanes *p, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                       int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t Ho,
                       int64_t Wo)
{
    *p = (PsimPlanes){.H = H, .W = W, .kh = kh, .kw = kw, .sh = sh, .sw = sw, .dh = dh,
                      .dw = dw, .ph = ph, .pw = pw, .Ho = Ho, .Wo = Wo};
    p->Hp = (Ho - 1) * sh + (kh - 1) * dh + 1;
    p->Wp = (Wo - 1) * sw + (kw - 1) * dw + 1;
    p->Ws = (p->Wp + sw - 1) / sw;
    int64_t Hs = (p->Hp + sh - 1) / sh;
    /* Room for the dropped columns' reads: a block past the last output, one tap row across. */
    p->sub = (Hs * p->Ws + PSIM_PLANES_BLOCK + (kw - 1) * dw + 8) & ~(int64_t)7;
    p->n_sub = sh * sw;
}

gboolean psim__planes_fits(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t Ho, int64_t Wo)
{
    return kh >= 1 && kw >= 1 && kh * kw <= PSIM_PLANES_MAX_TAPS && sh >= 1 && sw >= 1 &&
           sh * sw <= 16 && Ho > 0 && Wo > 0;
}

size_t psim__planes_floats(const PsimPlanes *p)
{
    /* the planes, then the flat results (Ho Ws rounded up to a block) */
    return (size_t)(p->n_sub * p->sub + p->Ho * p->Ws + PSIM_PLANES_BLOCK);
}

float *psim__planes_out(const PsimPlanes *p, float *planes)
{
    return planes + p->n_sub * p->sub;
}

void psim__planes_pad(const PsimPlanes *p, float *planes, float v)
{
    int64_t n = p->n_sub * p->sub;
    for (int64_t i = 0; i < n; i++)
        planes[i] = v;
}

/* The copies are loops, not memcpy calls: a 7 x 7 channel's rows are 7 floats, and a libc call
 * per row cost more than its taps. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void psim__planes_fill(const PsimPlanes *p, const float *restrict x, float *restrict planes)
{
    int64_t n = CLAMP(p->Wp - p->pw, 0, p->W); /* input columns that land inside */
    for (int64_t ih = 0; ih < p->H && ih + p->ph < p->Hp; ih++) {
        int64_t r = ih + p->ph;
        const float *restrict src = x + ih * p->W;
        float *restrict row = planes + (r % p->sh) * p->sw * p->sub + (r / p->sh) * p->Ws;
        if (p->sw == 1) {
            float *restrict dst = row + p->pw;
            for (int64_t j = 0; j < n; j++)
                dst[j] = src[j];
            continue;
        }
        /* Input column b + sw j, padded column c = b + pw + sw j: plane c % sw, column c / sw. */
        for (int64_t b = 0; b < p->sw && b < n; b++) {
            int64_t c = b + p->pw;
            float *restrict dst = row + (c % p->sw) * p->sub + c / p->sw;
            const float *restrict s = src + b;
            int64_t m = (n - b + p->sw - 1) / p->sw;
            if (p->sw == 2) /* a constant stride: the loads vectorise */
                for (int64_t j = 0; j < m; j++)
                    dst[j] = s[2 * j];
            else
                for (int64_t j = 0; j < m; j++)
                    dst[j] = s[j * p->sw];
        }
    }
}

void psim__planes_taps(const PsimPlanes *p, const float *planes, const float **base)
{
    for (int64_t ki = 0; ki < p->kh; ki++)
        for (int64_t kj = 0; kj < p->kw; kj++) {
            int64_t r = ki * p->dh, c = kj * p->dw;
            base[ki * p->kw + kj] =
                planes + ((r % p->sh) * p->sw + c % p->sw) * p->sub + (r / p->sh) * p->Ws + c / p->sw;
        }
}

typedef float Vec8 __attribute__((vector_size(32)));
typedef float Vec8U __attribute__((vector_size(32), aligned(4)));

/* Clones (PSIM_CPU_CLONES) for AVX-512 and for AVX2 with FMA: "avx2" alone, as before, has no
 * FMA, and each tap cost a multiply and an add (convnext_tiny's 7 x 7 depthwise layers 0.85 ->
 * 0.73 ms with it). */
#define PLANES_CLONES PSIM_CPU_CLONES

/* Four vectors of outputs a pass (PSIM_PLANES_BLOCK), the even taps summed apart from the odd
 * ones: eight multiply-add chains in flight, as many as two FMA units of 4-cycle latency can
 * take (convnext_tiny's 7 x 7 depthwise layers: 0.73 -> 0.70 ms; the loads, half of them across
 * cache lines, are what is left). */
#define WSUM_TAP(A0, A1, A2, A3, k)                                                               \
    do {                                                                                          \
        const float *s_ = base[k] + q;                                                            \
        float w_ = w[k];                                                                          \
        A0 += w_ * *(const Vec8U *)s_;                                                            \
        A1 += w_ * *(const Vec8U *)(s_ + 8);                                                      \
        A2 += w_ * *(const Vec8U *)(s_ + 16);                                                     \
        A3 += w_ * *(const Vec8U *)(s_ + 24);                                                     \
    } while (0)

PLANES_CLONES void psim__planes_wsum(const float *const *base, int64_t n_taps, const float *w,
                                     int64_t nq, float *restrict t)
{
    for (int64_t q = 0; q < nq; q += PSIM_PLANES_BLOCK) {
        Vec8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        int64_t k = 0;
        for (; k + 2 <= n_taps; k += 2) {
            WSUM_TAP(a0, a1, a2, a3, k);
            WSUM_TAP(b0, b1, b2, b3, k + 1);
        }
        if (k < n_taps)
            WSUM_TAP(a0, a1, a2, a3, k);
        *(Vec8U *)(t + q) = a0 + b0;
        *(Vec8U *)(t + q + 8) = a1 + b1;
        *(Vec8U *)(t + q + 16) = a2 + b2;
        *(Vec8U *)(t + q + 24) = a3 + b3;
    }
}

typedef int32_t Vec8I __attribute__((vector_size(32)));

/* a = b where b is larger, else a: a NaN tap is never taken, as in the scalar loops. (A macro:
 * a function returning a 32-byte vector would change the ABI of the baseline build.) */
#define VMAX(a, b)                                                                                \
    do {                                                                                          \
        Vec8 b_ = (b);                                                                            \
        Vec8I m_ = b_ > (a);                                                                      \
        (a) = (Vec8)(((Vec8I)b_ & m_) | ((Vec8I)(a) & ~m_));                                      \
    } while (0)

PLANES_CLONES void psim__planes_max(const float *const *base, int64_t n_taps, int64_t nq,
                                    float *restrict t)
{
    for (int64_t q = 0; q < nq; q += PSIM_PLANES_BLOCK) {
        Vec8 a0 = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        Vec8 a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < n_taps; k++) {
            const float *s = base[k] + q;
            VMAX(a0, *(const Vec8U *)(s));
            VMAX(a1, *(const Vec8U *)(s + 8));
            VMAX(a2, *(const Vec8U *)(s + 16));
            VMAX(a3, *(const Vec8U *)(s + 24));
        }
        *(Vec8U *)(t + q) = a0;
        *(Vec8U *)(t + q + 8) = a1;
        *(Vec8U *)(t + q + 16) = a2;
        *(Vec8U *)(t + q + 24) = a3;
    }
}
