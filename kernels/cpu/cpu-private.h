/* Helpers shared by the CPU kernels: errors naming the node, output allocation through the
 * context, views, attribute-or-input integer lists, and n-ary numpy broadcasting. */
#ifndef PLACESIM_KERNELS_CPU_PRIVATE_H
#define PLACESIM_KERNELS_CPU_PRIVATE_H

#include "kernels/kernels-private.h"

#include "graph/graph-private.h"

#include <string.h>

#define PSIM_CPU_MAX_RANK 16

#define KERR(ctx, error, ...) psim__error_node((error), (ctx)->graph, (ctx)->node, __VA_ARGS__)

/* Input k, or NULL when absent (optional inputs). */
static inline PsimTensor *psim__cpu_in(const PsimKernelCtx *ctx, int32_t k)
{
    return k < ctx->n_inputs ? ctx->inputs[k] : NULL;
}

/* TRUE if the node asks for output k (optional outputs such as MaxPool's Indices). */
static inline gboolean psim__cpu_wants(const PsimKernelCtx *ctx, int32_t k)
{
    return k < ctx->n_outputs;
}

/* Allocates output k through ctx->alloc and stores it in ctx->outputs[k]. */
PsimTensor *psim__cpu_out(PsimKernelCtx *ctx, int32_t k, PsimDType dtype, int32_t rank,
                          const int64_t *dims, GError **error);
/* The same, not zeroed (ctx->alloc_uninit when set), for a kernel that writes every element. */
PsimTensor *psim__cpu_out_all(PsimKernelCtx *ctx, int32_t k, PsimDType dtype, int32_t rank,
                              const int64_t *dims, GError **error);
/* Output k as a view of src's data with another shape (same element count): no copy. */
PsimTensor *psim__cpu_view(PsimKernelCtx *ctx, int32_t k, PsimTensor *src, int32_t rank,
                           const int64_t *dims, GError **error);
/* Requires n inputs present (the first n), of rank at most PSIM_CPU_MAX_RANK. */
gboolean psim__cpu_need(PsimKernelCtx *ctx, int32_t n, GError **error);
/* Normalizes a possibly negative axis against rank (ONNX: -rank <= axis < rank). */
gboolean psim__cpu_axis(PsimKernelCtx *ctx, int64_t axis, int32_t rank, int32_t *out,
                        GError **error);
/* Integers from input k when present (any integer dtype), else from attribute `attr`; *n is -1
 * when neither is there. The array (g_free) has at least one slot. */
gboolean psim__cpu_ints(PsimKernelCtx *ctx, int32_t k, const char *attr, int64_t **v, int32_t *n,
                        GError **error);
/* Element size as the copy kernels see it; 0 for dtypes they cannot move (strings). */
size_t psim__cpu_esize(PsimDType t);

/* numpy broadcasting of up to 3 inputs to an output shape. Dims are collapsed where every
 * input's pattern (broadcast or not) is the same, so the inner loop is as long as possible and
 * each input's inner stride is 0 or 1. */
typedef struct {
    int32_t rank;
    int64_t dims[PSIM_CPU_MAX_RANK];
    int64_t strides[3][PSIM_CPU_MAX_RANK];
    int32_t n_in;
} PsimBcast;

/* Output shape of broadcasting a and b; FALSE with an error naming the node if incompatible. */
gboolean psim__cpu_bcast_shape(PsimKernelCtx *ctx, int32_t ra, const int64_t *da, int32_t rb,
                               const int64_t *db, int32_t *r, int64_t *dims, GError **error);
void psim__cpu_bcast_init(PsimBcast *b, int32_t n_in, const PsimTensor *const *in,
                          int32_t out_rank, const int64_t *out_dims);
/* Calls fn for each inner row: offsets (elements) of each input and of the output, the row
 * length, and each input's inner stride (0 or 1). */
typedef void (*PsimBcastRow)(void *user, const int64_t *off, int64_t out_off, int64_t n,
                             const int64_t *stride);
void psim__cpu_bcast_run(const PsimBcast *b, PsimBcastRow fn, void *user);

/* A thread-local scratch buffer of at least `bytes` (64-byte aligned), reused across calls on
 * the same thread (each device runs its kernels on its own thread); freed at thread exit. */
void *psim__cpu_scratch(size_t bytes, GError **error);

/* Sliding-window geometry of Conv and pooling over n spatial dims (at most 3): reads strides,
 * dilations, pads and auto_pad from the node; fills per-dim stride, dilation, padding and the
 * output size. FALSE with an error on inconsistent attributes or an empty output. */
typedef struct {
    int32_t n;
    int64_t in[3], k[3], stride[3], dil[3], pad0[3], pad1[3], out[3];
} PsimWindow;
gboolean psim__cpu_window(PsimKernelCtx *ctx, int32_t n, const int64_t *in, const int64_t *k,
                          gboolean ceil_mode, gboolean use_dilations, PsimWindow *w,
                          GError **error);

/* ConvTranspose over 2 spatial dims in float32 (kernels/cpu/conv.c): per image and group, the
 * columns W_g^T X_g by one sgemm, then scattered into the output (col2im) and the bias added. */
typedef struct {
    int64_t n, c, group, mg; /* images, input channels, groups, output channels per group */
    int64_t in[2], k[2], out[2], stride[2], dil[2], pad[2];
} PsimConvT2d;
gboolean psim__cpu_conv_transpose_2d(const PsimConvT2d *p, const float *x, const float *w,
                                     const float *bias, float *y, GError **error);

/* TRUE when a and b (either may be NULL: FALSE) have one dtype and one shape. */
static inline gboolean psim__cpu_same_shape(const PsimTensor *a, const PsimTensor *b)
{
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank)
        return FALSE;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return FALSE;
    return TRUE;
}

/* Sums of n floats (kernels/cpu/common.c): in 8 float lanes that the compiler vectorises, the
 * lanes added in double; the second is the sum of squared deviations from `mean`. Rows of a few
 * thousand elements keep float lanes exact enough for statistics (BatchNormalization). */
double psim__cpu_sum_f32(const float *x, int64_t n);
double psim__cpu_sum_sq_dev_f32(const float *x, int64_t n, float mean);

/* Row-major strides of dims[0..rank) into s (elements). */
static inline void psim__cpu_strides(int32_t rank, const int64_t *dims, int64_t *s)
{
    int64_t v = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        s[d] = v;
        v *= dims[d];
    }
}

/* Moves the row-major index idx[0..rank) within dims one step on (wrapping to all zeros). */
static inline void psim__cpu_next_index(int32_t rank, const int64_t *dims, int64_t *idx)
{
    for (int32_t d = rank - 1; d >= 0; d--) {
        if (++idx[d] < dims[d])
            return;
        idx[d] = 0;
    }
}

/* Registration tables of each kernel file. */
void psim__cpu_register_elementwise(void);
void psim__cpu_register_matmul(void);
void psim__cpu_register_conv(void);
void psim__cpu_register_pool(void);
void psim__cpu_register_norm(void);
void psim__cpu_register_shape(void);
void psim__cpu_register_reduce(void);
void psim__cpu_register_tf(void);
void psim__cpu_register_index(void);
void psim__cpu_register_loss(void);
void psim__cpu_register_resize(void);
void psim__cpu_register_quant(void);
void psim__cpu_register_rnn(void);
void psim__cpu_register_state(void);
void psim__cpu_register_queue(void);
void psim__cpu_register_optim(void);
void psim__cpu_register_conv_grad(void);
void psim__cpu_register_grad(void);

/* Helpers for registration: one definition per dtype in a 0-terminated list. */
void psim__cpu_add(const char *op, const char *name, const char *description,
                   gboolean (*run)(PsimKernelCtx *, GError **), const PsimDType *dtypes,
                   size_t (*workspace)(const PsimGraph *, const PsimNode *));

/* IEEE half and bfloat16 conversions (Cast). */
float psim__half_to_float(uint16_t h);
uint16_t psim__float_to_half(float f);

/* Vectorised float32 math (kernels/cpu/vmath.c): y[i] = f(x[i]) for i < n (y may be x), with
 * SLEEF's 1-ulp functions and no data-dependent branch. SIGMOID is exp(-|x|) and 1 / (1 + e) or
 * e / (1 + e) by sign. */
typedef enum {
    PSIM_VMATH_EXP,
    PSIM_VMATH_LOG,
    PSIM_VMATH_TANH,
    PSIM_VMATH_ERF,
    PSIM_VMATH_SIGMOID,
    PSIM_VMATH_GELU, /* (x (1 + erf(x / sqrt 2))) / 2, as those float ops in that order */
    PSIM_VMATH_SILU, /* x sigmoid(x), as the two */
} PsimVmathFn;
/* sqrt 2 in float, as exporters write GELU's divisor. */
#define PSIM_SQRT2_F 1.41421353816986083984375f
/* The instruction sets: each is chosen only where the CPU has it (psim__vmath_has). */
typedef enum {
    PSIM_VMATH_ISA_SCALAR, /* libm, one element at a time (architectures other than x86-64) */
    PSIM_VMATH_ISA_SSE2,   /* 4 lanes, baseline on x86-64 */
    PSIM_VMATH_ISA_AVX,    /* 8 lanes; SLEEF uses AVX2 and FMA where present */
    PSIM_VMATH_ISA_AVX2,   /* 8 lanes, exp, sigmoid and erf inline with AVX2 and FMA, the rest as AVX */
} PsimVmathIsa;
void psim__vmath_f32(PsimVmathFn f, const float *x, float *y, int64_t n);
/* The same with a given instruction set (tests compare them); isa must be available. */
void psim__vmath_f32_isa(PsimVmathIsa isa, PsimVmathFn f, const float *x, float *y, int64_t n);
gboolean psim__vmath_has(PsimVmathIsa isa);
/* The instruction set psim__vmath_f32 uses on this CPU. */
PsimVmathIsa psim__vmath_isa(void);
/* The AVX loops (kernels/cpu/vmath-avx.c, built with -mavx). */
void psim__vmath_avx(PsimVmathFn f, const float *x, float *y, int64_t n);
/* The AVX2 + FMA loops (kernels/cpu/vmath-avx2.c, built with -mavx2 -mfma). */
void psim__vmath_avx2(PsimVmathFn f, const float *x, float *y, int64_t n);

/* Function clones for AVX-512 and for AVX2 with FMA beside the baseline build (SSE2), picked
 * at load by the CPU: for the loops GCC vectorises, which otherwise run 4 lanes wide. (Not in
 * clang, ASan or TSan builds.) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PSIM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PSIM_CPU_CLONES
#endif

/* Activations (kernels/cpu/act.c): one loop each, shared by the standalone kernels and the
 * epilogue of FusedConv. a, b: LeakyRelu's alpha; Clip's min and max; HardSigmoid's alpha, beta. */
typedef enum {
    PSIM_ACT_NONE,
    PSIM_ACT_RELU,
    PSIM_ACT_LEAKY_RELU,
    PSIM_ACT_CLIP,
    PSIM_ACT_HARD_SIGMOID,
    PSIM_ACT_SIGMOID,
    PSIM_ACT_TANH,
} PsimActKind;
typedef struct {
    PsimActKind kind;
    float a, b;
} PsimAct;
/* FusedConv's activation (its "activation" and "activation_params"; no params: ONNX's defaults).
 * FALSE for a name it does not know or the wrong number of params. */
gboolean psim__act_from_name(const char *name, const float *params, int32_t n_params, PsimAct *out);
/* y = act(x) elementwise (y may be x). */
void psim__act_f32(const PsimAct *act, const float *x, float *y, int64_t n);
void psim__act_f64(const PsimAct *act, const double *x, double *y, int64_t n);
/* com.microsoft's gated activations: QuickGelu x sigmoid(alpha x); Gelu x (1 + erf(x / sqrt 2)) / 2. */
void psim__act_quick_gelu_f32(float alpha, const float *x, float *y, int64_t n);
void psim__act_gelu_f32(const float *x, float *y, int64_t n);

/* Sliding windows over one channel through polyphase planes (kernels/cpu/window.c): depthwise
 * convolution and pooling. Per call: init, a scratch of psim__planes_floats, pad once with the
 * pad value; per channel: fill, taps, then a reduction into psim__planes_out, whose output
 * (oh, ow) is at oh Ws + ow. */
#define PSIM_PLANES_BLOCK 32     /* outputs per pass of a reduction: four vectors */
#define PSIM_PLANES_MAX_TAPS 121 /* windows up to 11 x 11 */
typedef struct {
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo;
    int64_t Hp, Wp; /* padded rows and columns the outputs read */
    int64_t Ws;     /* floats per plane row */
    int64_t sub;    /* floats per plane */
    int64_t n_sub;  /* planes: sh sw */
} PsimPlanes;
gboolean psim__planes_fits(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t Ho, int64_t Wo);
void psim__planes_init(PsimPlanes *p, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                       int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw, int64_t Ho,
                       int64_t Wo);
size_t psim__planes_floats(const PsimPlanes *p);
float *psim__planes_out(const PsimPlanes *p, float *planes);
void psim__planes_pad(const PsimPlanes *p, float *planes, float v);
void psim__planes_fill(const PsimPlanes *p, const float *x, float *planes);
/* base[ki kw + kj]: where tap (ki, kj) of output 0 lies. */
void psim__planes_taps(const PsimPlanes *p, const float *planes, const float **base);
/* t[q] = sum over taps of w[k] base[k][q], or their max (NaN taps never taken), for q < nq
 * rounded up to PSIM_PLANES_BLOCK. */
void psim__planes_wsum(const float *const *base, int64_t n_taps, const float *w, int64_t nq, float *t);
void psim__planes_max(const float *const *base, int64_t n_taps, int64_t nq, float *t);

/* Row-major float32 C = alpha * op(A) op(B) + beta * C, op a transpose where ta / tb, on the
 * calling thread only (kernels/cpu/gemm.c: oneDNN's sgemm, OpenBLAS's for the smallest). */
void psim__sgemm(gboolean ta, gboolean tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc);
/* Makes oneDNN's OpenMP team on this thread one thread (once per thread). */
void psim__dnnl_one_thread(void);

/* Conv on oneDNN (kernels/cpu/conv-dnnl.c): a node's primitives and its reordered constant
 * weights, made by prepare and kept while the shapes stay the same. */
typedef struct PsimConvDnnl PsimConvDnnl;
typedef struct {
    int64_t N, C, H, W, M, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo, group;
    const float *x, *w, *b; /* b NULL: no bias */
    float *y;
    gboolean w_constant; /* the weights are the same, unchanged, on every run */
    const PsimAct *act;  /* FusedConv's activation (NULL or PSIM_ACT_NONE: none) */
} PsimConvDnnlArgs;
PsimConvDnnl *psim__conv_dnnl_new(void);
void psim__conv_dnnl_free(PsimConvDnnl *st);
/* The weights st keeps in oneDNN's layout (*p NULL when none). */
void psim__conv_dnnl_memory(const PsimConvDnnl *st, const void **p, size_t *bytes);
/* 1: done; 0: not taken (oneDNN has no fast kernel for it), nothing written; -1: error. st may
 * be NULL (no prepare: nothing is kept). */
int psim__conv_dnnl_run(PsimConvDnnl *st, const PsimConvDnnlArgs *a, GError **error);

/* ConvGrad's dX and dW on oneDNN (its backward-data and backward-weights convolutions); the
 * node's primitives are kept while the shapes stay the same. */
typedef struct PsimConvGradDnnl PsimConvGradDnnl;
typedef struct {
    int64_t N, C, H, W, M, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo, group;
    const float *dy, *x, *w;
    float *gx, *gw; /* dX and dW, NULL when not wanted */
} PsimConvGradDnnlArgs;
PsimConvGradDnnl *psim__conv_grad_dnnl_new(void);
void psim__conv_grad_dnnl_free(PsimConvGradDnnl *st);
/* As psim__conv_dnnl_run: 1 done, 0 not taken (nothing written), -1 error; st may be NULL. */
int psim__conv_grad_dnnl_run(PsimConvGradDnnl *st, const PsimConvGradDnnlArgs *a, GError **error);

/* Element i of float32 (f64 false) or float64 data, as a double; kernels that take both types
 * write one loop and call it with f64 a constant, so that each type gets its own code. */
#define PSIM_CPU_LOAD(f64, p, i)                                                                   \
    ((f64) ? ((const double *)(const void *)(p))[i] : (double)((const float *)(const void *)(p))[i])
#define PSIM_CPU_STORE(f64, p, i, v)                                                               \
    ((f64) ? (void)(((double *)(void *)(p))[i] = (v)) : (void)(((float *)(void *)(p))[i] = (float)(v)))

#endif
