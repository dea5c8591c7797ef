/* Elementwise CPU kernels with numpy broadcasting: binary arithmetic and comparison, variadic
 * Sum/Max/Min/Mean, unary math, Clip, Where and Cast. Inner loops are specialized for the
 * contiguous, scalar-left and scalar-right cases so that the compiler vectorizes them. */
#include "cpu-private.h"

#include <math.h>

typedef void (*BinFn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

#define BIN_BODY(T, OT, EXPR)                                                                     \
    {                                                                                             \
        const T *restrict pa = A;                                                                 \
        const T *restrict pb = B;                                                                 \
        OT *restrict po = O;                                                                      \
        if (sa && sb)                                                                             \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T x = pa[i], y = pb[i];                                                           \
                po[i] = (OT)(EXPR);                                                               \
            }                                                                                     \
        else if (sa) {                                                                            \
            const T y = pb[0];                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T x = pa[i];                                                                      \
                po[i] = (OT)(EXPR);                                                               \
            }                                                                                     \
        } else if (sb) {                                                                          \
            const T x = pa[0];                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T y = pb[i];                                                                      \
                po[i] = (OT)(EXPR);                                                               \
            }                                                                                     \
        } else {                                                                                  \
            const T x = pa[0], y = pb[0];                                                         \
            const OT v = (OT)(EXPR);                                                              \
            for (int64_t i = 0; i < n; i++)                                                       \
                po[i] = v;                                                                        \
        }                                                                                         \
    }

#define DEF_BIN(name, T, OT, EXPR)                                                                \
    PSIM_CPU_CLONES static void name(const void *A, int64_t sa, const void *B, int64_t sb, void *O, \
                                     int64_t n) BIN_BODY(T, OT, EXPR)

/* Integer division and remainder that never trap (x/0 and INT_MIN/-1 are undefined in C). */
static inline int64_t idiv64(int64_t x, int64_t y)
{
    return y == 0 ? 0 : (y == -1 ? (int64_t)(0 - (uint64_t)x) : x / y);
}
static inline int32_t idiv32(int32_t x, int32_t y)
{
    return y == 0 ? 0 : (y == -1 ? (int32_t)(0 - (uint32_t)x) : x / y);
}
/* Integer Mod: C's remainder (fmod=1, the dividend's sign) or Python's (fmod=0, the
 * divisor's sign); 0 for a 0 divisor, and no overflow for MIN % -1. */
#define IMOD(T, x, y, py)                                                                         \
    ((y) == 0 || (y) == -1 ? (T)0                                                                 \
                           : (T)((x) % (y) + ((py) && (x) % (y) != 0 && (((x) % (y) < 0) != ((y) < 0)) ? (y) : 0)))
static inline int64_t ipow64(int64_t x, int64_t y)
{
    uint64_t r = 1, b = (uint64_t)x; /* unsigned: wraps instead of overflowing */
    if (y < 0)
        return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);
    for (; y; y >>= 1, b *= b)
        if (y & 1)
            r *= b;
    return (int64_t)r;
}

/* Wrapping integer add/sub/mul (ONNX integer arithmetic wraps; C signed overflow is UB). */
#define WADD(T, U, x, y) ((T)((U)(x) + (U)(y)))
#define WSUB(T, U, x, y) ((T)((U)(x) - (U)(y)))
#define WMUL(T, U, x, y) ((T)((U)(x) * (U)(y)))

DEF_BIN(add_f32, float, float, x + y)
DEF_BIN(add_f64, double, double, x + y)
DEF_BIN(add_i32, int32_t, int32_t, WADD(int32_t, uint32_t, x, y))
DEF_BIN(add_i64, int64_t, int64_t, WADD(int64_t, uint64_t, x, y))
DEF_BIN(sub_f32, float, float, x - y)
DEF_BIN(sub_f64, double, double, x - y)
DEF_BIN(sub_i32, int32_t, int32_t, WSUB(int32_t, uint32_t, x, y))
DEF_BIN(sub_i64, int64_t, int64_t, WSUB(int64_t, uint64_t, x, y))
DEF_BIN(mul_f32, float, float, x *y)
DEF_BIN(mul_f64, double, double, x *y)
DEF_BIN(mul_i32, int32_t, int32_t, WMUL(int32_t, uint32_t, x, y))
DEF_BIN(mul_i64, int64_t, int64_t, WMUL(int64_t, uint64_t, x, y))
DEF_BIN(div_f32, float, float, x / y)
DEF_BIN(div_f64, double, double, x / y)
DEF_BIN(div_i32, int32_t, int32_t, idiv32(x, y))
DEF_BIN(div_i64, int64_t, int64_t, idiv64(x, y))
DEF_BIN(pow_f32, float, float, powf(x, y))
DEF_BIN(pow_f64, double, double, pow(x, y))
/* Pow by a constant 2 (LayerNormalization as ONNX exporters spell it): x * x, exact, where
 * glibc's powf is a scalar call per element. */
DEF_BIN(square_f32, float, float, ((void)y, x * x))
DEF_BIN(square_f64, double, double, ((void)y, x * x))
DEF_BIN(pow_i32, int32_t, int32_t, (int32_t)ipow64(x, y))
DEF_BIN(pow_i64, int64_t, int64_t, ipow64(x, y))
/* ONNX Max/Min propagate NaN (as numpy.maximum does). `|`, not `||`: one condition, which GCC
 * vectorizes into a select, where the short circuit was a branch per element that mispredicted
 * on unordered data. */
DEF_BIN(fmod_f32, float, float, fmodf(x, y))
DEF_BIN(fmod_f64, double, double, fmod(x, y))
DEF_BIN(cmod_i32, int32_t, int32_t, IMOD(int32_t, x, y, 0))
DEF_BIN(cmod_i64, int64_t, int64_t, IMOD(int64_t, x, y, 0))
DEF_BIN(pymod_i32, int32_t, int32_t, IMOD(int32_t, x, y, 1))
DEF_BIN(pymod_i64, int64_t, int64_t, IMOD(int64_t, x, y, 1))
/* BitShift on unsigned values widened to int64 (non-negative): a shift of 64 or more is 0. */
DEF_BIN(shl_i64, int64_t, int64_t, y < 0 || y >= 64 ? 0 : (int64_t)((uint64_t)x << y))
DEF_BIN(shr_i64, int64_t, int64_t, y < 0 || y >= 64 ? 0 : (int64_t)((uint64_t)x >> y))
DEF_BIN(prelu_f32, float, float, x < 0 ? x * y : x)
DEF_BIN(prelu_f64, double, double, x < 0 ? x * y : x)
DEF_BIN(max_f32, float, float, ((x != x) | (x > y)) ? x : y)
DEF_BIN(max_f64, double, double, ((x != x) | (x > y)) ? x : y)
DEF_BIN(max_i32, int32_t, int32_t, x > y ? x : y)
DEF_BIN(max_i64, int64_t, int64_t, x > y ? x : y)
DEF_BIN(min_f32, float, float, ((x != x) | (x < y)) ? x : y)
DEF_BIN(min_f64, double, double, ((x != x) | (x < y)) ? x : y)
DEF_BIN(min_i32, int32_t, int32_t, x < y ? x : y)
DEF_BIN(min_i64, int64_t, int64_t, x < y ? x : y)
DEF_BIN(eq_f32, float, uint8_t, x == y)
DEF_BIN(eq_f64, double, uint8_t, x == y)
DEF_BIN(eq_i32, int32_t, uint8_t, x == y)
DEF_BIN(eq_i64, int64_t, uint8_t, x == y)
DEF_BIN(eq_u8, uint8_t, uint8_t, x == y)
DEF_BIN(lt_f32, float, uint8_t, x < y)
DEF_BIN(lt_f64, double, uint8_t, x < y)
DEF_BIN(lt_i32, int32_t, uint8_t, x < y)
DEF_BIN(lt_i64, int64_t, uint8_t, x < y)
DEF_BIN(gt_f32, float, uint8_t, x > y)
DEF_BIN(gt_f64, double, uint8_t, x > y)
DEF_BIN(gt_i32, int32_t, uint8_t, x > y)
DEF_BIN(gt_i64, int64_t, uint8_t, x > y)
DEF_BIN(le_f32, float, uint8_t, x <= y)
DEF_BIN(le_f64, double, uint8_t, x <= y)
DEF_BIN(le_i32, int32_t, uint8_t, x <= y)
DEF_BIN(le_i64, int64_t, uint8_t, x <= y)
DEF_BIN(ge_f32, float, uint8_t, x >= y)
DEF_BIN(ge_f64, double, uint8_t, x >= y)
DEF_BIN(ge_i32, int32_t, uint8_t, x >= y)
DEF_BIN(ge_i64, int64_t, uint8_t, x >= y)
DEF_BIN(and_u8, uint8_t, uint8_t, (x != 0) & (y != 0))
DEF_BIN(or_u8, uint8_t, uint8_t, (x != 0) | (y != 0))
DEF_BIN(xor_u8, uint8_t, uint8_t, (x != 0) ^ (y != 0))

typedef struct {
    const char *op;
    gboolean logical; /* output is bool */
    BinFn f32, f64, i32, i64, u8;
} BinOp;

static const BinOp bin_ops[] = {
    {"Add", FALSE, add_f32, add_f64, add_i32, add_i64, NULL},
    {"Sub", FALSE, sub_f32, sub_f64, sub_i32, sub_i64, NULL},
    {"Mul", FALSE, mul_f32, mul_f64, mul_i32, mul_i64, NULL},
    {"Div", FALSE, div_f32, div_f64, div_i32, div_i64, NULL},
    {"Pow", FALSE, pow_f32, pow_f64, pow_i32, pow_i64, NULL},
    /* Mod's fmod=0 form; run_binary takes the fmod=1 form below for fmod=1 (floats only have it). */
    {"Mod", FALSE, NULL, NULL, pymod_i32, pymod_i64, NULL},
    /* BitShift's LEFT form; run_binary takes RIGHT below. Only through run_widened (unsigned). */
    {"BitShift", FALSE, NULL, NULL, NULL, shl_i64, NULL},
    {"PRelu", FALSE, prelu_f32, prelu_f64, NULL, NULL, NULL},
    {"Max", FALSE, max_f32, max_f64, max_i32, max_i64, NULL},
    {"Min", FALSE, min_f32, min_f64, min_i32, min_i64, NULL},
    {"Sum", FALSE, add_f32, add_f64, add_i32, add_i64, NULL},
    {"Mean", FALSE, add_f32, add_f64, NULL, NULL, NULL},
    {"Equal", TRUE, eq_f32, eq_f64, eq_i32, eq_i64, eq_u8},
    {"Less", TRUE, lt_f32, lt_f64, lt_i32, lt_i64, NULL},
    {"Greater", TRUE, gt_f32, gt_f64, gt_i32, gt_i64, NULL},
    {"LessOrEqual", TRUE, le_f32, le_f64, le_i32, le_i64, NULL},
    {"GreaterOrEqual", TRUE, ge_f32, ge_f64, ge_i32, ge_i64, NULL},
    {"And", TRUE, NULL, NULL, NULL, NULL, and_u8},
    {"Or", TRUE, NULL, NULL, NULL, NULL, or_u8},
    {"Xor", TRUE, NULL, NULL, NULL, NULL, xor_u8},
};

static const BinOp *bin_find(const char *op)
{
    for (size_t i = 0; i < G_N_ELEMENTS(bin_ops); i++)
        if (!strcmp(bin_ops[i].op, op))
            return &bin_ops[i];
    return NULL;
}

static BinFn bin_fn(const BinOp *b, PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: return b->f32;
    case PSIM_DTYPE_FLOAT64: return b->f64;
    case PSIM_DTYPE_INT32: return b->i32;
    case PSIM_DTYPE_INT64: return b->i64;
    case PSIM_DTYPE_BOOL:
    case PSIM_DTYPE_UINT8: return b->u8;
    default: return NULL;
    }
}

typedef struct {
    BinFn fn;
    const char *a, *b;
    char *o;
    size_t ea, eo;
} BinRun;

static void bin_row(void *user, const int64_t *off, int64_t out_off, int64_t n,
                    const int64_t *stride)
{
    BinRun *r = user;
    r->fn(r->a + off[0] * r->ea, stride[0], r->b + off[1] * r->ea, stride[1],
          r->o + out_off * r->eo, n);
}

/* out = fn(a, b) broadcast; allocates output k unless `into` is given. */
static PsimTensor *bin_apply(PsimKernelCtx *ctx, const BinOp *op, const PsimTensor *a,
                             const PsimTensor *b, int32_t k, GError **error)
{
    BinFn fn = bin_fn(op, a->dtype);
    if (!fn) {
        KERR(ctx, error, "%s has no CPU kernel for %s", op->op, psim_dtype_name(a->dtype));
        return NULL;
    }
    if (a->dtype != b->dtype) {
        KERR(ctx, error, "inputs have different dtypes (%s and %s)", psim_dtype_name(a->dtype),
             psim_dtype_name(b->dtype));
        return NULL;
    }
    int32_t r;
    int64_t dims[PSIM_CPU_MAX_RANK];
    if (!psim__cpu_bcast_shape(ctx, a->rank, a->dims, b->rank, b->dims, &r, dims, error))
        return NULL;
    PsimTensor *o = psim__cpu_out_all(ctx, k, op->logical ? PSIM_DTYPE_BOOL : a->dtype, r, dims,
                                      error); /* every element written below */
    if (!o)
        return NULL;
    PsimBcast bc;
    const PsimTensor *ins[2] = {a, b};
    psim__cpu_bcast_init(&bc, 2, ins, r, dims);
    BinRun run = {fn, a->data, b->data, o->data, psim_dtype_size(a->dtype),
                  psim_dtype_size(o->dtype)};
    psim__cpu_bcast_run(&bc, bin_row, &run);
    return o;
}

/* A copy of t converted to dtype (Pow with an exponent of another type). */
static PsimTensor *convert(const PsimTensor *t, PsimDType dtype, GError **error);

static gboolean run_binary(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    const BinOp *op = bin_find(ctx->node->op);
    g_assert(op);
    PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1];
    g_autoptr(PsimTensor) conv = NULL;
    if (!strcmp(op->op, "Pow") && a->dtype != b->dtype) {
        conv = convert(b, a->dtype, error);
        if (!conv) {
            KERR(ctx, error, "Pow exponent of dtype %s is not supported", psim_dtype_name(b->dtype));
            return FALSE;
        }
        b = conv;
    }
    static const BinOp shr = {"BitShift", FALSE, NULL, NULL, NULL, shr_i64, NULL};
    if (!strcmp(op->op, "BitShift") && !strcmp(psim_node_attr_string(ctx->node, "direction", ""), "RIGHT"))
        op = &shr;
    static const BinOp cmod = {"Mod", FALSE, fmod_f32, fmod_f64, cmod_i32, cmod_i64, NULL};
    if (!strcmp(op->op, "Mod") && psim_node_attr_int(ctx->node, "fmod", 0))
        op = &cmod;
    static const BinOp square = {"Pow", FALSE, square_f32, square_f64, NULL, NULL, NULL};
    if (!strcmp(op->op, "Pow") && b->n_elems == 1 &&
        ((b->dtype == PSIM_DTYPE_FLOAT32 && *(const float *)b->data == 2.0f) ||
         (b->dtype == PSIM_DTYPE_FLOAT64 && *(const double *)b->data == 2.0)))
        op = &square;
    return bin_apply(ctx, op, a, b, 0, error) != NULL;
}

/* Sum, Max, Min, Mean over any number of inputs, folded pairwise with broadcasting. */
static gboolean run_variadic(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    const BinOp *op = bin_find(ctx->node->op);
    g_assert(op);
    PsimTensor *acc = psim_tensor_ref(ctx->inputs[0]);
    for (int32_t k = 1; k < ctx->n_inputs; k++) {
        if (!ctx->inputs[k])
            continue;
        PsimTensor *o = bin_apply(ctx, op, acc, ctx->inputs[k], 0, error);
        if (!o) {
            psim_tensor_unref(acc);
            return FALSE;
        }
        psim_tensor_unref(acc);
        acc = psim_tensor_ref(o);
    }
    if (!bin_fn(op, acc->dtype)) {
        KERR(ctx, error, "%s has no CPU kernel for %s", op->op, psim_dtype_name(acc->dtype));
        psim_tensor_unref(acc);
        return FALSE;
    }
    gboolean ok = TRUE;
    if (!strcmp(op->op, "Mean")) {
        PsimTensor *o = psim__cpu_out(ctx, 0, acc->dtype, acc->rank, acc->dims, error);
        if (!o)
            ok = FALSE;
        else if (acc->dtype == PSIM_DTYPE_FLOAT32) {
            float s = 1.0f / (float)ctx->n_inputs, *restrict d = o->data;
            const float *restrict x = acc->data;
            for (int64_t i = 0; i < o->n_elems; i++)
                d[i] = x[i] * s;
        } else {
            double s = 1.0 / ctx->n_inputs, *restrict d = o->data;
            const double *restrict x = acc->data;
            for (int64_t i = 0; i < o->n_elems; i++)
                d[i] = x[i] * s;
        }
    } else if (ctx->n_inputs == 1)
        ok = psim__cpu_view(ctx, 0, acc, acc->rank, acc->dims, error) != NULL;
    psim_tensor_unref(acc);
    return ok;
}

/* ---------------------------------------------------------------------------------------- */
/* Unary. */

static inline double sigmoid(double x)
{
    /* Stable on both sides: exp of a non-positive number never overflows. */
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

typedef struct {
    const char *op;
    void (*f32)(const float *restrict x, float *restrict y, int64_t n);
    void (*f64)(const double *restrict x, double *restrict y, int64_t n);
    void (*i64)(const int64_t *restrict x, int64_t *restrict y, int64_t n);
    void (*i32)(const int32_t *restrict x, int32_t *restrict y, int64_t n);
} UnOp;

#define DEF_UN_F64(name, ED)                                                                      \
    static void name##_f64(const double *restrict px, double *restrict py, int64_t n)             \
    {                                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                         \
            double x = px[i];                                                                     \
            py[i] = (ED);                                                                         \
        }                                                                                         \
    }
#define DEF_UN(name, EF, ED)                                                                      \
    static void name##_f32(const float *restrict px, float *restrict py, int64_t n)               \
    {                                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                         \
            float x = px[i];                                                                      \
            py[i] = (EF);                                                                         \
        }                                                                                         \
    }                                                                                             \
    DEF_UN_F64(name, ED)
/* float32 through the vectorised math (kernels/cpu/vmath.c: no data-dependent slow path). */
#define DEF_UN_V(name, VF, ED)                                                                    \
    static void name##_f32(const float *restrict px, float *restrict py, int64_t n)               \
    {                                                                                             \
        psim__vmath_f32(VF, px, py, n);                                                           \
    }                                                                                             \
    DEF_UN_F64(name, ED)
#define DEF_UNI(name, T, E)                                                                       \
    static void name(const T *restrict px, T *restrict py, int64_t n)                             \
    {                                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T x = px[i];                                                                          \
            py[i] = (E);                                                                          \
        }                                                                                         \
    }

DEF_UN(sqrt, sqrtf(x), sqrt(x))
DEF_UN(neg, -x, -x)
DEF_UN_V(exp, PSIM_VMATH_EXP, exp(x))
DEF_UN_V(log, PSIM_VMATH_LOG, log(x))
/* Relu, Sigmoid and Tanh in float32: the loops FusedConv's epilogue runs too (kernels/cpu/act.c). */
#define DEF_UN_ACT(name, KIND, ED)                                                                \
    static void name##_f32(const float *restrict px, float *restrict py, int64_t n)               \
    {                                                                                             \
        psim__act_f32(&(PsimAct){KIND, 0.0f, 0.0f}, px, py, n);                                   \
    }                                                                                             \
    DEF_UN_F64(name, ED)
DEF_UN_ACT(relu, PSIM_ACT_RELU, x > 0.0 ? x : 0.0)
DEF_UN_ACT(sigmoid, PSIM_ACT_SIGMOID, sigmoid(x))
DEF_UN_ACT(tanh, PSIM_ACT_TANH, tanh(x))
DEF_UN_V(erf, PSIM_VMATH_ERF, erf(x))
DEF_UN(abs, fabsf(x), fabs(x))
DEF_UN(floor, floorf(x), floor(x))
DEF_UN(ceil, ceilf(x), ceil(x))
DEF_UN(recip, 1.0f / x, 1.0 / x)
DEF_UN(sin, sinf(x), sin(x))
DEF_UN(cos, cosf(x), cos(x))
DEF_UN(softplus, x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)),
       x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
DEF_UN(tan, tanf(x), tan(x))
DEF_UN(asin, asinf(x), asin(x))
DEF_UN(acos, acosf(x), acos(x))
DEF_UN(atan, atanf(x), atan(x))
DEF_UN(sinh, sinhf(x), sinh(x))
DEF_UN(cosh, coshf(x), cosh(x))
DEF_UN(asinh, asinhf(x), asinh(x))
DEF_UN(acosh, acoshf(x), acosh(x))
DEF_UN(atanh, atanhf(x), atanh(x))
DEF_UN(softsign, x / (1.0f + fabsf(x)), x / (1.0 + fabs(x)))
/* ONNX Round: halves to even, which rint does in the default rounding mode. */
DEF_UN(round, rintf(x), rint(x))
DEF_UN(sign, (float)((x > 0.0f) - (x < 0.0f)), (double)((x > 0.0) - (x < 0.0)))
/* TF's elementwise ops that ONNX has no name for (graphs read from GraphDefs). */
DEF_UN(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
/* Relu6 as compares and selects: they vectorise (fminf/fmaxf are library calls here, 5.6 ns a
 * value: MobileNetV2's 35 Relu6s took 31 ms of a 45-ms step), and NaN stays NaN. */
DEF_UN(relu6, x < 0.0f ? 0.0f : x > 6.0f ? 6.0f : x, x < 0.0 ? 0.0 : x > 6.0 ? 6.0 : x)
DEF_UN(tf_square, x * x, x * x)
DEF_UNI(sign_i64, int64_t, (int64_t)((x > 0) - (x < 0)))
DEF_UNI(sign_i32, int32_t, (int32_t)((x > 0) - (x < 0)))
DEF_UNI(neg_i64, int64_t, (int64_t)(0 - (uint64_t)x))
DEF_UNI(neg_i32, int32_t, (int32_t)(0 - (uint32_t)x))
DEF_UNI(abs_i64, int64_t, x < 0 ? (int64_t)(0 - (uint64_t)x) : x)
DEF_UNI(abs_i32, int32_t, x < 0 ? (int32_t)(0 - (uint32_t)x) : x)
DEF_UNI(relu_i64, int64_t, x > 0 ? x : 0)
DEF_UNI(relu_i32, int32_t, x > 0 ? x : 0)

static const UnOp un_ops[] = {
    {"Sqrt", sqrt_f32, sqrt_f64, NULL, NULL},
    {"Neg", neg_f32, neg_f64, neg_i64, neg_i32},
    {"Exp", exp_f32, exp_f64, NULL, NULL},
    {"Log", log_f32, log_f64, NULL, NULL},
    {"Relu", relu_f32, relu_f64, relu_i64, relu_i32},
    {"Sigmoid", sigmoid_f32, sigmoid_f64, NULL, NULL},
    {"Tanh", tanh_f32, tanh_f64, NULL, NULL},
    {"Erf", erf_f32, erf_f64, NULL, NULL},
    {"Abs", abs_f32, abs_f64, abs_i64, abs_i32},
    {"Floor", floor_f32, floor_f64, NULL, NULL},
    {"Ceil", ceil_f32, ceil_f64, NULL, NULL},
    {"Reciprocal", recip_f32, recip_f64, NULL, NULL},
    {"Sin", sin_f32, sin_f64, NULL, NULL},
    {"Cos", cos_f32, cos_f64, NULL, NULL},
    {"Softplus", softplus_f32, softplus_f64, NULL, NULL},
    {"Tan", tan_f32, tan_f64, NULL, NULL},
    {"Asin", asin_f32, asin_f64, NULL, NULL},
    {"Acos", acos_f32, acos_f64, NULL, NULL},
    {"Atan", atan_f32, atan_f64, NULL, NULL},
    {"Sinh", sinh_f32, sinh_f64, NULL, NULL},
    {"Cosh", cosh_f32, cosh_f64, NULL, NULL},
    {"Asinh", asinh_f32, asinh_f64, NULL, NULL},
    {"Acosh", acosh_f32, acosh_f64, NULL, NULL},
    {"Atanh", atanh_f32, atanh_f64, NULL, NULL},
    {"Softsign", softsign_f32, softsign_f64, NULL, NULL},
    {"Round", round_f32, round_f64, NULL, NULL},
    {"Sign", sign_f32, sign_f64, sign_i64, sign_i32},
    {"Rsqrt", rsqrt_f32, rsqrt_f64, NULL, NULL},
    {"Relu6", relu6_f32, relu6_f64, NULL, NULL},
    {"Square", tf_square_f32, tf_square_f64, NULL, NULL},
};

static gboolean run_unary(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    const UnOp *op = NULL;
    const char *name = ctx->node->op;
    for (size_t i = 0; i < G_N_ELEMENTS(un_ops) && !op; i++)
        if (un_ops[i].op[0] == name[0] && !strcmp(un_ops[i].op, name))
            op = &un_ops[i];
    g_assert(op);
    PsimTensor *x = ctx->inputs[0];
    gboolean ok = (x->dtype == PSIM_DTYPE_FLOAT32 && op->f32) ||
                  (x->dtype == PSIM_DTYPE_FLOAT64 && op->f64) ||
                  (x->dtype == PSIM_DTYPE_INT64 && op->i64) ||
                  (x->dtype == PSIM_DTYPE_INT32 && op->i32);
    if (!ok) {
        KERR(ctx, error, "%s has no CPU kernel for %s", op->op, psim_dtype_name(x->dtype));
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    switch (x->dtype) {
    case PSIM_DTYPE_FLOAT32: op->f32(x->data, y->data, x->n_elems); break;
    case PSIM_DTYPE_FLOAT64: op->f64(x->data, y->data, x->n_elems); break;
    case PSIM_DTYPE_INT64: op->i64(x->data, y->data, x->n_elems); break;
    default: op->i32(x->data, y->data, x->n_elems); break;
    }
    return TRUE;
}

/* Output 0: a bool tensor of input 0's shape (NULL with an error). */
static PsimTensor *bool_like_input(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return NULL;
    PsimTensor *x = ctx->inputs[0];
    return psim__cpu_out(ctx, 0, PSIM_DTYPE_BOOL, x->rank, x->dims, error);
}

/* IsNaN, IsInf (detect_positive, detect_negative): bool of a float32 or float64 input. */
static gboolean run_isnan_isinf(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *y = bool_like_input(ctx, error);
    if (!y)
        return FALSE;
    const PsimTensor *x = ctx->inputs[0];
    gboolean nan = !strcmp(ctx->node->op, "IsNaN");
    gboolean pos = psim_node_attr_int(ctx->node, "detect_positive", 1) != 0;
    gboolean neg = psim_node_attr_int(ctx->node, "detect_negative", 1) != 0;
    uint8_t *restrict b = y->data;
    for (int64_t i = 0; i < x->n_elems; i++) {
        double v = x->dtype == PSIM_DTYPE_FLOAT64 ? ((const double *)x->data)[i]
                                                  : ((const float *)x->data)[i];
        b[i] = nan ? isnan(v) : isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    }
    return TRUE;
}

static gboolean run_not(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *y = bool_like_input(ctx, error);
    if (!y)
        return FALSE;
    const PsimTensor *x = ctx->inputs[0];
    const uint8_t *restrict a = x->data;
    uint8_t *restrict b = y->data;
    for (int64_t i = 0; i < x->n_elems; i++)
        b[i] = !a[i];
    return TRUE;
}

/* Output 0 of a float32-only unary op, shaped as input 0 (every element to be written); NULL with
 * an error for another dtype. */
static PsimTensor *f32_unary_out(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return NULL;
    PsimTensor *x = ctx->inputs[0];
    if (x->dtype != PSIM_DTYPE_FLOAT32) {
        KERR(ctx, error, "%s has no CPU kernel for %s", ctx->node->op, psim_dtype_name(x->dtype));
        return NULL;
    }
    return psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
}

/* LeakyRelu, Elu, Selu, HardSigmoid, Shrink, ThresholdedRelu, Celu, HardSwish: unary with
 * float attributes. */
static gboolean run_unary_attr(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *y = f32_unary_out(ctx, error), *x = ctx->inputs[0];
    if (!y)
        return FALSE;
    const char *op = ctx->node->op;
    const float *restrict a = x->data;
    float *restrict b = y->data;
    int64_t n = x->n_elems;
    /* No branch on the data: each is max(x, 0) + f(min(x, 0)), with f(0) = 0, written as the
     * compares GCC turns into maxps and minps (a ternary with a multiply on one side stays a
     * branch per element, and LeakyRelu took 4.2x as long on N(0,1) as on a ramp). NaN
     * propagates through the min (`0 < x ? 0 : x` keeps x when unordered). */
    if (!strcmp(op, "LeakyRelu")) {
        PsimAct act = {PSIM_ACT_LEAKY_RELU, (float)psim_node_attr_float(ctx->node, "alpha", 0.01), 0};
        psim__act_f32(&act, a, b, n);
    } else if (!strcmp(op, "Elu") || !strcmp(op, "Selu")) {
        gboolean selu = !strcmp(op, "Selu");
        float al = (float)psim_node_attr_float(ctx->node, "alpha",
                                               selu ? 1.67326319217681884765625 : 1.0);
        float ga = selu ? (float)psim_node_attr_float(ctx->node, "gamma", 1.05070102214813232421875)
                        : 1.0f;
        for (int64_t i = 0; i < n; i++)
            b[i] = 0.0f < a[i] ? 0.0f : a[i];
        psim__vmath_f32(PSIM_VMATH_EXP, b, b, n); /* exp(min(x, 0)): never overflows */
        for (int64_t i = 0; i < n; i++) {
            float v = a[i], pos = v > 0.0f ? v : 0.0f;
            b[i] = ga * (pos + al * (b[i] - 1.0f));
        }
    } else if (!strcmp(op, "Shrink")) {
        float bias = (float)psim_node_attr_float(ctx->node, "bias", 0.0);
        float lambd = (float)psim_node_attr_float(ctx->node, "lambd", 0.5);
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] < -lambd ? a[i] + bias : a[i] > lambd ? a[i] - bias : 0.0f;
    } else if (!strcmp(op, "ThresholdedRelu")) {
        float al = (float)psim_node_attr_float(ctx->node, "alpha", 1.0);
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] > al ? a[i] : 0.0f;
    } else if (!strcmp(op, "Celu")) {
        float al = (float)psim_node_attr_float(ctx->node, "alpha", 1.0);
        for (int64_t i = 0; i < n; i++) /* exp(min(x, 0) / alpha): never overflows */
            b[i] = (0.0f < a[i] ? 0.0f : a[i]) / al;
        psim__vmath_f32(PSIM_VMATH_EXP, b, b, n);
        for (int64_t i = 0; i < n; i++) {
            float v = a[i], pos = v > 0.0f ? v : 0.0f;
            b[i] = pos + al * (b[i] - 1.0f);
        }
    } else if (!strcmp(op, "HardSwish")) {
        for (int64_t i = 0; i < n; i++) {
            float v = a[i] / 6.0f + 0.5f;
            v = v < 1.0f ? v : 1.0f;
            b[i] = a[i] * (v > 0.0f ? v : 0.0f);
        }
    } else { /* HardSigmoid */
        PsimAct act = {PSIM_ACT_HARD_SIGMOID, (float)psim_node_attr_float(ctx->node, "alpha", 0.2),
                       (float)psim_node_attr_float(ctx->node, "beta", 0.5)};
        psim__act_f32(&act, a, b, n);
    }
    return TRUE;
}

/* com.microsoft's QuickGelu (alpha) and Gelu, which the fusion pass makes of Sigmoid and Mul,
 * and of Div, Erf, Add and two Muls (graph/fuse.c). */
static gboolean run_gated(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *y = f32_unary_out(ctx, error), *x = ctx->inputs[0];
    if (!y)
        return FALSE;
    if (!strcmp(ctx->node->op, "QuickGelu"))
        psim__act_quick_gelu_f32((float)psim_node_attr_float(ctx->node, "alpha", 1.702), x->data,
                                 y->data, x->n_elems);
    else
        psim__act_gelu_f32(x->data, y->data, x->n_elems);
    return TRUE;
}

/* Clip: min and max from inputs 1 and 2 (opset 11+) or attributes (opset 6). */
static gboolean run_clip(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *tmin = psim__cpu_in(ctx, 1), *tmax = psim__cpu_in(ctx, 2);
    for (int k = 1; k <= 2; k++) {
        PsimTensor *t = k == 1 ? tmin : tmax;
        if (t && (t->n_elems != 1 || t->dtype != x->dtype)) {
            KERR(ctx, error, "Clip bound %d must be a scalar of the input's dtype", k);
            return FALSE;
        }
    }
    PsimTensor *y = psim__cpu_out_all(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    int64_t n = x->n_elems;
    if (x->dtype == PSIM_DTYPE_FLOAT32) {
        float lo = tmin ? *(float *)tmin->data
                        : (float)psim_node_attr_float(ctx->node, "min", -INFINITY);
        float hi = tmax ? *(float *)tmax->data
                        : (float)psim_node_attr_float(ctx->node, "max", INFINITY);
        psim__act_f32(&(PsimAct){PSIM_ACT_CLIP, lo, hi}, x->data, y->data, n);
    } else if (x->dtype == PSIM_DTYPE_FLOAT64) {
        double lo = tmin ? *(double *)tmin->data : psim_node_attr_float(ctx->node, "min", -INFINITY);
        double hi = tmax ? *(double *)tmax->data : psim_node_attr_float(ctx->node, "max", INFINITY);
        const double *restrict a = x->data;
        double *restrict b = y->data;
        for (int64_t i = 0; i < n; i++) {
            double v = a[i] < lo ? lo : a[i];
            b[i] = v > hi ? hi : v;
        }
    } else if (x->dtype == PSIM_DTYPE_INT64 || x->dtype == PSIM_DTYPE_INT32) {
        int64_t lo = tmin ? psim_tensor_get_i64(tmin, 0) : INT64_MIN;
        int64_t hi = tmax ? psim_tensor_get_i64(tmax, 0) : INT64_MAX;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = psim_tensor_get_i64(x, i);
            v = v < lo ? lo : (v > hi ? hi : v);
            if (x->dtype == PSIM_DTYPE_INT64)
                ((int64_t *)y->data)[i] = v;
            else
                ((int32_t *)y->data)[i] = (int32_t)v;
        }
    } else {
        KERR(ctx, error, "Clip has no CPU kernel for %s", psim_dtype_name(x->dtype));
        return FALSE;
    }
    return TRUE;
}

/* ---------------------------------------------------------------------------------------- */
/* Where(cond, X, Y) with three-way broadcasting, any element size. */

typedef struct {
    const uint8_t *c;
    const char *x, *y;
    char *o;
    size_t es;
} WhereRun;

static void where_row(void *user, const int64_t *off, int64_t out_off, int64_t n,
                      const int64_t *stride)
{
    WhereRun *r = user;
    const uint8_t *c = r->c + off[0];
    const char *x = r->x + off[1] * r->es, *y = r->y + off[2] * r->es;
    char *o = r->o + out_off * r->es;
    if (r->es == 4) {
        /* Element-sized selects (float32, int32): no call per element; the common strides get
         * their own loops, which the compiler vectorises. */
        const uint32_t *xs = (const uint32_t *)(const void *)x, *ys = (const uint32_t *)(const void *)y;
        uint32_t *os = (uint32_t *)(void *)o;
        /* Both sides loaded whatever the condition: a select, not a branch on the data. */
        if (stride[0] == 1 && stride[1] == 1 && stride[2] == 0) {
            uint32_t yv = ys[0];
            for (int64_t i = 0; i < n; i++) {
                uint32_t xv = xs[i];
                os[i] = c[i] ? xv : yv;
            }
        } else if (stride[0] == 1 && stride[1] == 1 && stride[2] == 1) {
            for (int64_t i = 0; i < n; i++) {
                uint32_t xv = xs[i], yv = ys[i];
                os[i] = c[i] ? xv : yv;
            }
        } else {
            for (int64_t i = 0; i < n; i++)
                os[i] = c[i * stride[0]] ? xs[i * stride[1]] : ys[i * stride[2]];
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(o + i * r->es, c[i * stride[0]] ? x + i * stride[1] * r->es : y + i * stride[2] * r->es,
               r->es);
}

static gboolean run_where(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    PsimTensor *c = ctx->inputs[0], *x = ctx->inputs[1], *y = ctx->inputs[2];
    if (c->dtype != PSIM_DTYPE_BOOL || x->dtype != y->dtype || !psim__cpu_esize(x->dtype)) {
        KERR(ctx, error, "Where needs a bool condition and two inputs of one numeric dtype");
        return FALSE;
    }
    int32_t r1, r;
    int64_t d1[PSIM_CPU_MAX_RANK], dims[PSIM_CPU_MAX_RANK];
    if (!psim__cpu_bcast_shape(ctx, c->rank, c->dims, x->rank, x->dims, &r1, d1, error) ||
        !psim__cpu_bcast_shape(ctx, r1, d1, y->rank, y->dims, &r, dims, error))
        return FALSE;
    PsimTensor *o = psim__cpu_out(ctx, 0, x->dtype, r, dims, error);
    if (!o)
        return FALSE;
    PsimBcast bc;
    const PsimTensor *ins[3] = {c, x, y};
    psim__cpu_bcast_init(&bc, 3, ins, r, dims);
    WhereRun run = {c->data, x->data, y->data, o->data, psim_dtype_size(x->dtype)};
    psim__cpu_bcast_run(&bc, where_row, &run);
    return TRUE;
}

/* ---------------------------------------------------------------------------------------- */
/* Cast between numeric dtypes, float16 and bfloat16 included. */

static gboolean is_float(PsimDType t)
{
    return t == PSIM_DTYPE_FLOAT32 || t == PSIM_DTYPE_FLOAT64 || t == PSIM_DTYPE_FLOAT16 ||
           t == PSIM_DTYPE_BFLOAT16;
}

static gboolean castable(PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: case PSIM_DTYPE_FLOAT64: case PSIM_DTYPE_FLOAT16:
    case PSIM_DTYPE_BFLOAT16: case PSIM_DTYPE_INT8: case PSIM_DTYPE_INT16:
    case PSIM_DTYPE_INT32: case PSIM_DTYPE_INT64: case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_UINT16: case PSIM_DTYPE_UINT32: case PSIM_DTYPE_UINT64:
    case PSIM_DTYPE_BOOL:
        return TRUE;
    default:
        return FALSE;
    }
}

static double load_f(const void *p, PsimDType t, int64_t i)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: return ((const float *)p)[i];
    case PSIM_DTYPE_FLOAT64: return ((const double *)p)[i];
    case PSIM_DTYPE_FLOAT16: return psim__half_to_float(((const uint16_t *)p)[i]);
    case PSIM_DTYPE_BFLOAT16: {
        uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    default: g_assert_not_reached();
    }
}

static int64_t load_i(const void *p, PsimDType t, int64_t i)
{
    switch (t) {
    case PSIM_DTYPE_INT8: return ((const int8_t *)p)[i];
    case PSIM_DTYPE_INT16: return ((const int16_t *)p)[i];
    case PSIM_DTYPE_INT32: return ((const int32_t *)p)[i];
    case PSIM_DTYPE_INT64: return ((const int64_t *)p)[i];
    case PSIM_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case PSIM_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case PSIM_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case PSIM_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case PSIM_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: g_assert_not_reached();
    }
}

/* Float to integer without undefined behaviour: NaN gives 0, out-of-range saturates. */
static int64_t f2i(double v)
{
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

static void store_i(void *p, PsimDType t, int64_t i, int64_t v)
{
    switch (t) {
    case PSIM_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case PSIM_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case PSIM_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case PSIM_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case PSIM_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case PSIM_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case PSIM_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case PSIM_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case PSIM_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: g_assert_not_reached();
    }
}

/* bfloat16 rounding: to nearest even from opset 19, where ONNX specified it; before that ONNX's
 * reference truncated (kept the high 16 bits), and its test data says so. */
static void store_f(void *p, PsimDType t, int64_t i, double v, gboolean bf16_round)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    case PSIM_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
    case PSIM_DTYPE_FLOAT16: ((uint16_t *)p)[i] = psim__float_to_half((float)v); break;
    case PSIM_DTYPE_BFLOAT16: {
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        if ((b & 0x7fffffff) > 0x7f800000)
            ((uint16_t *)p)[i] = (uint16_t)((b >> 16) | 0x40);
        else if (!bf16_round)
            ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
        else /* round to nearest even */
            ((uint16_t *)p)[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
        break;
    }
    case PSIM_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: store_i(p, t, i, f2i(v));
    }
}

static void cast_data(const void *src, PsimDType st, void *dst, PsimDType dt, int64_t n,
                      gboolean bf16_round)
{
    if (st == dt) {
        memcpy(dst, src, (size_t)n * psim_dtype_size(st));
        return;
    }
    if (st == PSIM_DTYPE_FLOAT32 && dt == PSIM_DTYPE_INT64) {
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = f2i(((const float *)src)[i]);
        return;
    }
    if (st == PSIM_DTYPE_INT64 && dt == PSIM_DTYPE_FLOAT32) {
        for (int64_t i = 0; i < n; i++)
            ((float *)dst)[i] = (float)((const int64_t *)src)[i];
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (is_float(st)) {
            double v = load_f(src, st, i);
            if (is_float(dt) || dt == PSIM_DTYPE_BOOL)
                store_f(dst, dt, i, v, bf16_round);
            else
                store_i(dst, dt, i, f2i(v));
        } else {
            int64_t v = load_i(src, st, i);
            if (is_float(dt))
                store_f(dst, dt, i, st == PSIM_DTYPE_UINT64 ? (double)(uint64_t)v : (double)v,
                        bf16_round);
            else
                store_i(dst, dt, i, v);
        }
    }
}

static PsimTensor *convert(const PsimTensor *t, PsimDType dtype, GError **error)
{
    if (!castable(t->dtype) || !castable(dtype))
        return NULL;
    PsimTensor *o = psim_tensor_new(dtype, t->rank, t->dims, error);
    if (o)
        cast_data(t->data, t->dtype, o->data, dtype, t->n_elems, TRUE);
    return o;
}

static gboolean run_cast(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    PsimDType to = (PsimDType)psim_node_attr_int(ctx->node, "to", PSIM_DTYPE_UNDEFINED);
    if (!strcmp(ctx->node->op, "CastLike")) {
        if (!psim__cpu_need(ctx, 2, error))
            return FALSE;
        to = ctx->inputs[1]->dtype;
    }
    if (!castable(x->dtype) || !castable(to)) {
        KERR(ctx, error, "cannot cast %s to %s", psim_dtype_name(x->dtype), psim_dtype_name(to));
        return FALSE;
    }
    if (to == x->dtype)
        return psim__cpu_view(ctx, 0, x, x->rank, x->dims, error) != NULL;
    int64_t opset = psim_graph_opset(ctx->graph);
    PsimTensor *y = psim__cpu_out(ctx, 0, to, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    cast_data(x->data, x->dtype, y->data, to, x->n_elems, opset == 0 || opset >= 19);
    return TRUE;
}

/* ---------------------------------------------------------------------------------------- */
/* Narrow dtypes (int8, uint8, int16, uint16, uint32, float16) for the arithmetic, comparison,
 * variadic and Clip kernels: the inputs widened exactly (to int64, float16 to float32), the
 * kernel of the wide type run, its outputs narrowed back as Cast does (integers wrap, float16
 * rounds to nearest). uint64 stays out: int64 cannot hold all of it. */

static PsimTensor *plain_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                               GError **error)
{
    (void)ctx;
    return psim_tensor_new(dt, r, d, error);
}

static gboolean run_widened(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    if (ctx->n_inputs > 8 || ctx->n_outputs > 8) {
        KERR(ctx, error, "%s on narrow dtypes takes at most 8 inputs and outputs", ctx->node->op);
        return FALSE;
    }
    const char *op = ctx->node->op;
    PsimDType narrow = ctx->inputs[0]->dtype;
    PsimDType wide = narrow == PSIM_DTYPE_FLOAT16 ? PSIM_DTYPE_FLOAT32 : PSIM_DTYPE_INT64;
    PsimTensor *win[8] = {NULL}, *wout[8] = {NULL};
    gboolean ok = TRUE;
    for (int32_t k = 0; k < ctx->n_inputs && ok; k++) {
        PsimTensor *t = ctx->inputs[k];
        if (t && t->dtype == narrow) {
            win[k] = convert(t, wide, error);
            ok = win[k] != NULL;
        } else if (t) {
            win[k] = psim_tensor_ref(t);
        }
    }
    PsimKernelCtx w = *ctx;
    w.inputs = win;
    w.outputs = wout;
    w.alloc = plain_alloc;
    w.alloc_uninit = NULL; /* the executor's would allocate on its worker, not here */
    w.alloc_user = NULL;
    gboolean variadic = !strcmp(op, "Sum") || !strcmp(op, "Max") || !strcmp(op, "Min");
    if (ok)
        ok = !strcmp(op, "Clip") ? run_clip(&w, error)
             : variadic          ? run_variadic(&w, error)
                                 : run_binary(&w, error);
    for (int32_t k = 0; k < ctx->n_outputs && ok; k++) {
        PsimTensor *t = wout[k];
        if (!t)
            continue;
        PsimDType dt = t->dtype == wide ? narrow : t->dtype;
        PsimTensor *y = psim__cpu_out(ctx, k, dt, t->rank, t->dims, error);
        if (!y)
            ok = FALSE;
        else if (dt == narrow)
            cast_data(t->data, wide, y->data, narrow, t->n_elems, TRUE);
        else if (t->nbytes)
            memcpy(y->data, t->data, t->nbytes);
    }
    for (int32_t k = 0; k < 8; k++) {
        g_clear_pointer(&win[k], psim_tensor_unref);
        g_clear_pointer(&wout[k], psim_tensor_unref);
    }
    return ok;
}

/* ---------------------------------------------------------------------------------------- */

#define T_(x) PSIM_DTYPE_##x
static const PsimDType arith_types[] = {T_(FLOAT32), T_(FLOAT64), T_(INT32), T_(INT64), -1};
static const PsimDType float_types[] = {T_(FLOAT32), T_(FLOAT64), -1};
static const PsimDType cmp_types[] = {T_(FLOAT32), T_(FLOAT64), T_(INT32), T_(INT64), -1};
static const PsimDType eq_types[] = {T_(FLOAT32), T_(FLOAT64), T_(INT32), T_(INT64), T_(BOOL),
                                     -1};
static const PsimDType bool_types[] = {T_(BOOL), -1};
static const PsimDType signed_types[] = {T_(FLOAT32), T_(FLOAT64), T_(INT32), T_(INT64), -1};
static const PsimDType f32_types[] = {T_(FLOAT32), -1};
static const PsimDType clip_types[] = {T_(FLOAT32), T_(FLOAT64), T_(INT32), T_(INT64), -1};
static const PsimDType cast_types[] = {T_(FLOAT32), T_(FLOAT64), T_(FLOAT16), T_(BFLOAT16),
                                       T_(INT8), T_(INT16), T_(INT32), T_(INT64), T_(UINT8),
                                       T_(UINT16), T_(UINT32), T_(UINT64), T_(BOOL), -1};
/* Where is keyed by its condition's dtype. */
static const PsimDType where_types[] = {T_(BOOL), -1};

void psim__cpu_register_elementwise(void)
{
    static const char *arith[] = {"Add", "Sub", "Mul", "Div", "Pow", "Mod"};
    for (size_t i = 0; i < G_N_ELEMENTS(arith); i++)
        psim__cpu_add(arith[i], "cpu-binary", "elementwise with numpy broadcasting", run_binary,
                      arith_types, NULL);
    static const char *var[] = {"Sum", "Max", "Min"};
    for (size_t i = 0; i < G_N_ELEMENTS(var); i++)
        psim__cpu_add(var[i], "cpu-variadic", "elementwise over n inputs, broadcast",
                      run_variadic, arith_types, NULL);
    psim__cpu_add("Mean", "cpu-variadic", "elementwise mean of n inputs", run_variadic,
                  float_types, NULL);
    psim__cpu_add("PRelu", "cpu-binary", "x or slope * x, slope broadcast", run_binary, float_types,
                  NULL);
    psim__cpu_add("Equal", "cpu-compare", "elementwise ==, bool output", run_binary, eq_types,
                  NULL);
    psim__cpu_add("Less", "cpu-compare", "elementwise <, bool output", run_binary, cmp_types, NULL);
    psim__cpu_add("Greater", "cpu-compare", "elementwise >, bool output", run_binary, cmp_types,
                  NULL);
    psim__cpu_add("LessOrEqual", "cpu-compare", "elementwise <=, bool output", run_binary,
                  cmp_types, NULL);
    psim__cpu_add("GreaterOrEqual", "cpu-compare", "elementwise >=, bool output", run_binary,
                  cmp_types, NULL);
    static const char *logic[] = {"And", "Or", "Xor"};
    for (size_t i = 0; i < G_N_ELEMENTS(logic); i++)
        psim__cpu_add(logic[i], "cpu-logical", "elementwise boolean", run_binary, bool_types,
                      NULL);
    psim__cpu_add("Not", "cpu-logical", "boolean negation", run_not, bool_types, NULL);
    psim__cpu_add("IsNaN", "cpu-classify", "x is NaN, bool output", run_isnan_isinf, float_types,
                  NULL);
    psim__cpu_add("IsInf", "cpu-classify", "x is an infinity, bool output", run_isnan_isinf,
                  float_types, NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(un_ops); i++) {
        const UnOp *u = &un_ops[i];
        psim__cpu_add(u->op, "cpu-unary", "elementwise math",
                      run_unary, u->i64 ? signed_types : float_types, NULL);
    }
    static const char *ua[] = {"LeakyRelu", "Elu",  "Selu",            "HardSigmoid",
                               "Shrink",    "Celu", "ThresholdedRelu", "HardSwish"};
    for (size_t i = 0; i < G_N_ELEMENTS(ua); i++)
        psim__cpu_add(ua[i], "cpu-activation", "activation with attributes", run_unary_attr,
                      f32_types, NULL);
    psim__cpu_add("Clip", "cpu-clip", "clamps to [min, max]", run_clip, clip_types, NULL);
    psim__cpu_add("QuickGelu", "cpu-gated", "x sigmoid(alpha x): one pass (alpha 1), else L1 blocks",
                  run_gated, f32_types, NULL);
    psim__cpu_add("Gelu", "cpu-gated", "x (1 + erf(x / sqrt 2)) / 2 in one pass", run_gated,
                  f32_types, NULL);
    static const PsimDType narrow[] = {T_(INT8), T_(UINT8), T_(INT16), T_(UINT16), T_(UINT32),
                                       T_(FLOAT16), -1};
    static const char *widened[] = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Sum", "Max",
                                    "Min", "Equal", "Less", "Greater", "LessOrEqual",
                                    "GreaterOrEqual", "Clip"};
    for (size_t i = 0; i < G_N_ELEMENTS(widened); i++)
        psim__cpu_add(widened[i], "cpu-widened", "narrow dtypes through the int64/float32 kernel",
                      run_widened, narrow, NULL);
    static const PsimDType unsigned_narrow[] = {T_(UINT8), T_(UINT16), T_(UINT32), -1};
    psim__cpu_add("BitShift", "cpu-widened", "unsigned shifts through the int64 kernel",
                  run_widened, unsigned_narrow, NULL);
    psim__cpu_add("Where", "cpu-where", "select by condition, broadcast", run_where, where_types,
                  NULL);
    psim__cpu_add("Cast", "cpu-cast", "dtype conversion", run_cast, cast_types, NULL);
    psim__cpu_add("CastLike", "cpu-cast", "dtype conversion to input 1's", run_cast, cast_types,
                  NULL);
}
