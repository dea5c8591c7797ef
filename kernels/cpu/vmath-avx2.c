/* exp, sigmoid, erf, GELU and SiLU inline in AVX2 and FMA (this file alone is built with -mavx2 -mfma, and is
 * only called once the CPU is known to have both); the other functions go to the AVX path (SLEEF).
 * SLEEF's erff8_u10 took 4.3 ns a value on this project's host (convnext_tiny's GELUs: 40 ms of
 * a 145 ms step); erf8 below, 1.4-1.9 ns.
 * SLEEF's expf8 is a call through its dispatcher per 8 lanes that the loop cannot overlap:
 * efficientnet_b0's 49 Sigmoids (4.8M values, 9 ms a step) ran at about 33 cycles per vector.
 * Inline, two vectors a pass, the same accuracy (at most 1 ulp for exp, the tests' sweep).
 *
 * exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] (ln 2 split in
 * a part with 12 low zero bits and the rest, so n ln2_hi is exact), exp(r) by its Taylor series
 * to r^7 (the next term is below 6e-9 relative), and 2^n applied as two powers of two, so that
 * results down in the subnormals and up past the largest float round as one multiply would.
 * The input is clamped to [-105, 89] first (NaN kept): past those the answer is 0 or infinity. */
#include "cpu-private.h"
#include "vmath-loop.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 exp8(__m256 x)
{
    /* max(lo, x) and min(hi, x) return x when x is NaN. */
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-105.0f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-152, 129]: n1 = floor(n / 2) and n - n1 are both within a float's exponents. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* erf, branch-free, at most 1 ulp from erf rounded to float (checked over every float in [0, 4.5);
 * the tests sweep [-4, 4]). a = |x| clamped to 3.93, where erf rounds to 1; below 1.125,
 * erf(a) = a + a Q(a^2), the correction added to a exact; from 1.125, erf(a) = 1 - erfc(a) with
 * log erfc(a) a polynomial in s = a - 1.125 whose constant term is carried in two floats, so that
 * erfc keeps its relative accuracy where it is largest. Both sides are computed and one is chosen
 * by mask, and the sign of x restored. The coefficients are Chebyshev least-squares fits in double
 * rounded to float (tools/fit-erf.py), not copied from any library. */
#define ERF_T 1.125f
#define ERF_L0_LO -2.527348997e-08f
static inline __m256 erf8(__m256 x)
{
    static const float q[] = {
        1.283791661e-01f, -3.761263788e-01f, 1.128375828e-01f, -2.686402015e-02f, 5.217163824e-03f,
        -8.429831942e-04f, 1.088958743e-04f, -8.642608918e-06f};
    static const float l[] = {
        -2.192728758e+00f, -2.851616621e+00f, -8.577887416e-01f, -3.684984520e-02f,
        8.873307146e-03f, -1.828310080e-03f, 2.905239817e-04f, -2.831953498e-05f, 9.281844626e-08f,
        3.576655558e-07f, -3.191822984e-08f};
    __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    /* min(hi, |x|) keeps NaN */
    __m256 a = _mm256_min_ps(_mm256_set1_ps(3.93f), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x));
    __m256 u = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(q[G_N_ELEMENTS(q) - 1]);
    for (int k = (int)G_N_ELEMENTS(q) - 2; k >= 0; k--)
        p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(q[k]));
    __m256 small = _mm256_fmadd_ps(a, p, a);
    __m256 s = _mm256_sub_ps(a, _mm256_set1_ps(ERF_T));
    __m256 r = _mm256_set1_ps(l[G_N_ELEMENTS(l) - 1]);
    for (int k = (int)G_N_ELEMENTS(l) - 2; k >= 1; k--)
        r = _mm256_fmadd_ps(r, s, _mm256_set1_ps(l[k]));
    __m256 t = _mm256_mul_ps(r, s);
    __m256 hi = _mm256_add_ps(_mm256_set1_ps(l[0]), t);
    __m256 lo = _mm256_add_ps(_mm256_add_ps(_mm256_sub_ps(_mm256_set1_ps(l[0]), hi), t),
                              _mm256_set1_ps(ERF_L0_LO));
    __m256 e = exp8(hi);
    __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(e, lo, e));
    __m256 below = _mm256_cmp_ps(a, _mm256_set1_ps(ERF_T), _CMP_LT_OQ);
    return _mm256_or_ps(_mm256_blendv_ps(large, small, below), sign);
}

/* Sigmoid as the other paths, with the inline exp. */
#define sigmoid8(v) PSIM_VMATH_SIGMOID8(v, exp8)

static inline __m256 avx2_one(PsimVmathFn f, __m256 v)
{
    switch (f) {
    case PSIM_VMATH_EXP: return exp8(v);
    case PSIM_VMATH_ERF: return erf8(v);
    case PSIM_VMATH_GELU: return PSIM_VMATH_GELU(_mm256_, v, erf8);
    case PSIM_VMATH_SILU: return _mm256_mul_ps(v, sigmoid8(v));
    default: return sigmoid8(v);
    }
}

#define AVX2_LOOP(FN)                                                                             \
    for (; i + 16 <= n; i += 16) {                                                                \
        __m256 a = avx2_one(FN, _mm256_loadu_ps(x + i)), b = avx2_one(FN, _mm256_loadu_ps(x + i + 8)); \
        _mm256_storeu_ps(y + i, a);                                                               \
        _mm256_storeu_ps(y + i + 8, b);                                                           \
    }

void psim__vmath_avx2(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    switch (f) {
    case PSIM_VMATH_EXP: AVX2_LOOP(PSIM_VMATH_EXP) break;
    case PSIM_VMATH_ERF: AVX2_LOOP(PSIM_VMATH_ERF) break;
    case PSIM_VMATH_SIGMOID: AVX2_LOOP(PSIM_VMATH_SIGMOID) break;
    case PSIM_VMATH_GELU: AVX2_LOOP(PSIM_VMATH_GELU) break;
    case PSIM_VMATH_SILU: AVX2_LOOP(PSIM_VMATH_SILU) break;
    default: psim__vmath_avx(f, x, y, n); return; /* log, tanh: SLEEF */
    }
    /* The rest one vector at a time, the last through a buffer: every element gets the answer it
     * gets anywhere else. */
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, avx2_one(f, _mm256_loadu_ps(x + i)));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(buf, avx2_one(f, _mm256_loadu_ps(buf)));
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
    }
    _mm256_zeroupper();
}
#else
void psim__vmath_avx2(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    (void)f, (void)x, (void)y, (void)n;
    g_assert_not_reached();
}
#endif
