/* exp and sigmoid inline in AVX2 and FMA (this file alone is built with -mavx2 -mfma, and is only
 * called once the CPU is known to have both); the other functions go to the AVX path (SLEEF).
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

static inline __m256 avx2_one(PsimVmathFn f, __m256 v)
{
    if (f == PSIM_VMATH_EXP)
        return exp8(v);
    /* Sigmoid, as the other paths: exp(-|x|), then 1 / (1 + e) or e / (1 + e) by mask. */
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), ax));
    __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_or_ps(_mm256_and_ps(neg, _mm256_mul_ps(e, r)), _mm256_andnot_ps(neg, r));
}

#define AVX2_LOOP(FN)                                                                             \
    for (; i + 16 <= n; i += 16) {                                                                \
        __m256 a = avx2_one(FN, _mm256_loadu_ps(x + i)), b = avx2_one(FN, _mm256_loadu_ps(x + i + 8)); \
        _mm256_storeu_ps(y + i, a);                                                               \
        _mm256_storeu_ps(y + i + 8, b);                                                           \
    }

void psim__vmath_avx2(PsimVmathFn f, const float *x, float *y, int64_t n)
{
    if (f != PSIM_VMATH_EXP && f != PSIM_VMATH_SIGMOID) {
        psim__vmath_avx(f, x, y, n);
        return;
    }
    int64_t i = 0;
    if (f == PSIM_VMATH_EXP)
        AVX2_LOOP(PSIM_VMATH_EXP)
    else
        AVX2_LOOP(PSIM_VMATH_SIGMOID)
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
