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
