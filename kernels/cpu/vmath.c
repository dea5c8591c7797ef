/* Vectorised float32 exp, log, tanh, erf and sigmoid with SLEEF: branch-free, so a kernel's time
 * does not depend on its data (glibc's scalar expf takes slow paths on underflow and overflow,
 * and efficientnet_b0's Sigmoid took 2.4x as long on N(0,1) inputs as on a ramp). AVX2 + FMA where
 * the CPU has them (vmath-avx2.c: exp and sigmoid inline), else AVX (vmath-avx.c), SSE2 (baseline
 * on x86-64) otherwise, scalar libm elsewhere. */
#include "cpu-private.h"
#include "vmath-loop.h"

#include <math.h>

#if defined(__x86_64__) && defined(__SSE2__)
#define PSIM_VMATH_SSE2 1
#include <sleef.h>
#endif

/* The portable scalar path (other architectures), also the reference of the tests. */
static float scalar_sigmoid(float x)
{
    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0 ? r : e * r;
}

static float scalar_one(PsimVmathFn f, float x)
{
    switch (f) {
    case PSIM_VMATH_EXP: return expf(x);
    case PSIM_VMATH_LOG: return logf(x);
    case PSIM_VMATH_TANH: return tanhf(x);
    case PSIM_VMATH_ERF: return erff(x);
    case PSIM_VMATH_GELU: return (x * (erff(x / PSIM_SQRT2_F) + 1.0f)) * 0.5f;
    case PSIM_VMATH_SILU: return x * scalar_sigmoid(x);
    default: return scalar_sigmoid(x);
    }
}

static void vmath_scalar(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = scalar_one(f, x[i]);
}

#ifdef PSIM_VMATH_SSE2
/* 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: exp of -|x| never overflows, and both
 * sides keep their relative accuracy. Selected with masks, not branches. */
static inline __m128 sse2_sigmoid(__m128 v)
{
    __m128 ax = _mm_andnot_ps(_mm_set1_ps(-0.0f), v);
    __m128 e = Sleef_expf4_u10(_mm_sub_ps(_mm_setzero_ps(), ax));
    __m128 r = _mm_div_ps(_mm_set1_ps(1.0f), _mm_add_ps(_mm_set1_ps(1.0f), e));
    __m128 neg = _mm_cmplt_ps(v, _mm_setzero_ps());
    return _mm_or_ps(_mm_and_ps(neg, _mm_mul_ps(e, r)), _mm_andnot_ps(neg, r));
}

static inline __m128 sse2_one(PsimVmathFn f, __m128 v)
{
    switch (f) {
    case PSIM_VMATH_EXP: return Sleef_expf4_u10(v);
    case PSIM_VMATH_LOG: return Sleef_logf4_u10(v);
    case PSIM_VMATH_TANH: return Sleef_tanhf4_u10(v);
    case PSIM_VMATH_ERF: return Sleef_erff4_u10(v);
    case PSIM_VMATH_GELU: return PSIM_VMATH_GELU(_mm_, v, Sleef_erff4_u10);
    case PSIM_VMATH_SILU: return _mm_mul_ps(v, sse2_sigmoid(v));
    default: return sse2_sigmoid(v);
    }
}

static void vmath_sse2(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    PSIM_VMATH_LOOP_BODY(sse2_one, 4, _mm_loadu_ps, _mm_storeu_ps)
}
#endif

gboolean psim__vmath_has(PsimVmathIsa isa)
{
    switch (isa) {
    case PSIM_VMATH_ISA_SCALAR: return TRUE;
#ifdef PSIM_VMATH_SSE2
    case PSIM_VMATH_ISA_SSE2: return TRUE;
    /* (__builtin_cpu_supports checks that the OS saves the AVX registers, too.) */
    case PSIM_VMATH_ISA_AVX: return __builtin_cpu_supports("avx") != 0;
    case PSIM_VMATH_ISA_AVX2:
        return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
#endif
    default: return FALSE;
    }
}

static PsimVmathIsa best_isa(void)
{
    static gsize chosen = 0; /* PsimVmathIsa + 1 once chosen */
    if (g_once_init_enter(&chosen)) {
        PsimVmathIsa isa = psim__vmath_has(PSIM_VMATH_ISA_AVX2)   ? PSIM_VMATH_ISA_AVX2
                           : psim__vmath_has(PSIM_VMATH_ISA_AVX)  ? PSIM_VMATH_ISA_AVX
                           : psim__vmath_has(PSIM_VMATH_ISA_SSE2) ? PSIM_VMATH_ISA_SSE2
                                                                  : PSIM_VMATH_ISA_SCALAR;
        g_once_init_leave(&chosen, (gsize)isa + 1);
    }
    return (PsimVmathIsa)(chosen - 1);
}

PsimVmathIsa psim__vmath_isa(void) { return best_isa(); }

void psim__vmath_f32_isa(PsimVmathIsa isa, PsimVmathFn f, const float *x, float *y, int64_t n)
{
    g_assert(psim__vmath_has(isa));
    switch (isa) {
#ifdef PSIM_VMATH_SSE2
    case PSIM_VMATH_ISA_AVX2: psim__vmath_avx2(f, x, y, n); return;
    case PSIM_VMATH_ISA_AVX: psim__vmath_avx(f, x, y, n); return;
    case PSIM_VMATH_ISA_SSE2: vmath_sse2(f, x, y, n); return;
#endif
    default: vmath_scalar(f, x, y, n); return;
    }
}

void psim__vmath_f32(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    psim__vmath_f32_isa(best_isa(), f, x, y, n);
}
