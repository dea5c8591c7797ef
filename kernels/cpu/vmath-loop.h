/* The vector loop of the transcendental kernels, written once for every vector width: one loop
 * per function (the switch outside the loops), and the tail through the same vector code so that
 * every element gets the same answer wherever it sits in the array. Each ISA's file defines its
 * ONE(fn, vector) and includes this with W (lanes), VEC (vector type), LOAD and STORE. */
#define PSIM_VMATH_LOOP_CASE(FN, ONE, W, LOAD, STORE)                                            \
    case FN:                                                                                      \
        for (; i + (W) <= n; i += (W))                                                            \
            STORE(y + i, ONE(FN, LOAD(x + i)));                                                   \
        break;
#define PSIM_VMATH_LOOP_BODY(ONE, W, LOAD, STORE)                                                 \
    int64_t i = 0;                                                                                \
    switch (f) {                                                                                  \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_EXP, ONE, W, LOAD, STORE)                                 \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_LOG, ONE, W, LOAD, STORE)                                 \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_TANH, ONE, W, LOAD, STORE)                                \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_ERF, ONE, W, LOAD, STORE)                                 \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_SIGMOID, ONE, W, LOAD, STORE)                             \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_GELU, ONE, W, LOAD, STORE)                                \
        PSIM_VMATH_LOOP_CASE(PSIM_VMATH_SILU, ONE, W, LOAD, STORE)                                \
    default: g_assert_not_reached();                                                              \
    }                                                                                             \
    if (i < n) {                                                                                  \
        float buf[(W)] = {0};                                                                     \
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));                                      \
        STORE(buf, ONE(f, LOAD(buf)));                                                            \
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));                                      \
    }

/* Sigmoid of 8 float lanes (the AVX and AVX2 files, each with its exp): exp(-|x|), then
 * 1 / (1 + e) or e / (1 + e) selected by bit masks (GCC 12 turned a blendv on a compare into a
 * branch per lane, and mixed signs then cost 3x in mispredictions). A macro: a function returning
 * a 32-byte vector would change the baseline build's ABI. */
#define PSIM_VMATH_SIGMOID8(V, EXP8)                                                              \
    __extension__({                                                                               \
        __m256 v_ = (V);                                                                          \
        __m256 ax_ = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v_);                                 \
        __m256 e_ = EXP8(_mm256_sub_ps(_mm256_setzero_ps(), ax_));                                \
        __m256 r_ = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e_)); \
        __m256 neg_ = _mm256_cmp_ps(v_, _mm256_setzero_ps(), _CMP_LT_OQ);                         \
        _mm256_or_ps(_mm256_and_ps(neg_, _mm256_mul_ps(e_, r_)), _mm256_andnot_ps(neg_, r_));     \
    })

/* GELU as its float ops in order, (x (erf(x / sqrt 2) + 1)) / 2, for any vector width: P is the
 * intrinsics' prefix (_mm_, _mm256_), ERF the width's erf. */
#define PSIM_VMATH_GELU(P, V, ERF)                                                                \
    __extension__({                                                                               \
        __typeof__(V) v_ = (V);                                                                   \
        __typeof__(V) t_ = ERF(P##div_ps(v_, P##set1_ps(PSIM_SQRT2_F)));                          \
        P##mul_ps(P##mul_ps(v_, P##add_ps(t_, P##set1_ps(1.0f))), P##set1_ps(0.5f));              \
    })
