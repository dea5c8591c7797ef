/* The AVX path of kernels/cpu/vmath.c: this file alone is built with -mavx, and is only called
 * once the CPU is known to have AVX. SLEEF's 8-lane functions pick their AVX2+FMA or plain AVX
 * version at run time. */
#include "cpu-private.h"
#include "vmath-loop.h"

#if defined(__x86_64__) && defined(__AVX__)
#include <sleef.h>

/* Sigmoid as vmath.c's SSE2 one, with SLEEF's exp. */
#define avx_sigmoid(v) PSIM_VMATH_SIGMOID8(v, Sleef_expf8_u10)

static inline __m256 avx_one(PsimVmathFn f, __m256 v)
{
    switch (f) {
    case PSIM_VMATH_EXP: return Sleef_expf8_u10(v);
    case PSIM_VMATH_LOG: return Sleef_logf8_u10(v);
    case PSIM_VMATH_TANH: return Sleef_tanhf8_u10(v);
    case PSIM_VMATH_ERF: return Sleef_erff8_u10(v);
    case PSIM_VMATH_GELU: return PSIM_VMATH_GELU(_mm256_, v, Sleef_erff8_u10);
    case PSIM_VMATH_SILU: return _mm256_mul_ps(v, avx_sigmoid(v));
    default: return avx_sigmoid(v);
    }
}

void psim__vmath_avx(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    PSIM_VMATH_LOOP_BODY(avx_one, 8, _mm256_loadu_ps, _mm256_storeu_ps)
    /* Leaving AVX code: clear the upper halves so that later SSE code pays no transition. */
    _mm256_zeroupper();
}
#else
void psim__vmath_avx(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    (void)f, (void)x, (void)y, (void)n;
    g_assert_not_reached();
}
#endif
