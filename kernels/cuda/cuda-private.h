/* Internals of the CUDA kernels (kernels/cuda/): the per-device context the GPU worker makes
 * (stream, cuBLAS and cuDNN handles), one checking macro per CUDA library turning a status into
 * a GError naming the node, and the device-side launchers of ew.cu. Built only when the CUDA
 * toolkit is found (PSIM_HAVE_CUDA). */
#ifndef PLACESIM_KERNELS_CUDA_PRIVATE_H
#define PLACESIM_KERNELS_CUDA_PRIVATE_H

#include <stdint.h>

#ifndef __CUDACC__
#include "kernels/cpu/cpu-private.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/cuda/cublas.h"


/* One GPU device as its worker thread drives it. Kernels find it with psim__cuda_dev(ctx). */
typedef struct PsimCudaDevice {
    int ordinal;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    void *ws;          /* cuDNN workspace, grown on demand */
    size_t ws_bytes;
    GHashTable *uploads; /* host PsimTensor* (ref held) -> device PsimTensor*: constants */
    GHashTable *step_uploads; /* the same for other host tensors (feeds, Recvs): one step */
} PsimCudaDevice;

/* The device context of the kernel's GPU worker (ctx->device_context). */
PsimCudaDevice *psim__cuda_dev(const PsimKernelCtx *ctx);
/* Makes and frees a device context on the calling thread (the GPU worker's thread_init/fini). */
PsimCudaDevice *psim__cuda_device_new(int ordinal, GError **error);
void psim__cuda_device_free(PsimCudaDevice *d);
/* End of a step: forgets every upload of a non-constant host tensor (a feed may be refilled in
 * place before the next step) and those of constants that nobody else holds any more. */
void psim__cuda_device_trim(PsimCudaDevice *d);

/* Status checks: on failure set a RUNTIME error "FILE: node 'x': what: <library string>" and
 * return FALSE from the calling function. */
gboolean psim__cuda_fail(PsimKernelCtx *ctx, GError **error, const char *lib, const char *what,
                         const char *msg);
#define PSIM_CUDA_CHECK(ctx, error, call)                                                    \
    do {                                                                                     \
        cudaError_t st_ = (call);                                                            \
        if (st_ != cudaSuccess)                                                              \
            return psim__cuda_fail((ctx), (error), "CUDA", #call, cudaGetErrorString(st_));  \
    } while (0)
#define PSIM_CUBLAS_CHECK(ctx, error, call)                                                  \
    do {                                                                                     \
        cublasStatus_t st_ = (call);                                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return psim__cuda_fail((ctx), (error), "cuBLAS", #call, psim__cublas()->status_string(st_)); \
    } while (0)
#define PSIM_CUDNN_CHECK(ctx, error, call)                                                   \
    do {                                                                                     \
        cudnnStatus_t st_ = (call);                                                          \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                     \
            return psim__cuda_fail((ctx), (error), "cuDNN", #call, cudnnGetErrorString(st_)); \
    } while (0)

/* Device pointer of input k: its data when it is in device memory, else an upload of the host
 * tensor, cached for the step, and for the tensor's lifetime when it is the graph's known value
 * of that input (Const nodes, initializers, folded shapes: weights are uploaded once). */
const void *psim__cuda_in(PsimKernelCtx *ctx, int32_t k, GError **error);
/* A host copy of t (a reference when it is already on the host); waits for the stream. */
PsimTensor *psim__cuda_to_host(PsimCudaDevice *d, PsimTensor *t, GError **error);
/* A device buffer of at least `bytes` for cuDNN workspaces (valid until the next call). */
void *psim__cuda_workspace(PsimKernelCtx *ctx, size_t bytes, GError **error);

/* Registration tables. */
void psim__cuda_register_ops(void);
void psim__cuda_register_dnn(void);
#endif

/* --- ew.cu launchers (C linkage). Return 0 or a cudaError_t. -------------------------------- */
#define PSIM_CUDA_MAX_RANK 8
typedef struct {
    int32_t rank;
    int64_t dims[PSIM_CUDA_MAX_RANK];
    int64_t strides[3][PSIM_CUDA_MAX_RANK]; /* per input, in elements; 0 where broadcast */
} PsimCudaBcast;

/* dtype codes of the launchers */
enum { PSIM_CT_F32 = 0, PSIM_CT_I64 = 1, PSIM_CT_I32 = 2, PSIM_CT_BOOL = 3, PSIM_CT_F64 = 4 };
/* op codes */
enum {
    PSIM_CE_ADD, PSIM_CE_SUB, PSIM_CE_MUL, PSIM_CE_DIV, PSIM_CE_POW, PSIM_CE_MAX, PSIM_CE_MIN,
    PSIM_CE_EQUAL, PSIM_CE_LESS, PSIM_CE_GREATER,
    PSIM_CE_SQRT, PSIM_CE_NEG, PSIM_CE_EXP, PSIM_CE_LOG, PSIM_CE_RELU, PSIM_CE_SIGMOID,
    PSIM_CE_TANH, PSIM_CE_ERF, PSIM_CE_ABS, PSIM_CE_CLIP, PSIM_CE_WHERE,
};

/* 2-D pooling geometry: input h x w, output oh x ow, window kh x kw, strides, leading and
 * trailing pads, dilations (max pooling only). */
typedef struct {
    int64_t h, w, oh, ow, kh, kw, sh, sw, ph0, pw0, ph1, pw1, dh, dw;
} PsimCudaPool2d;

#ifdef __cplusplus
extern "C" {
#endif
int psim__cuda_ew(void *stream, int op, int ct, int64_t n, const PsimCudaBcast *b,
                  const void *a, const void *bb, const void *c, void *out, double p0, double p1);
int psim__cuda_cast(void *stream, int from, int to, int64_t n, const void *in, void *out);
int psim__cuda_gather_map(void *stream, size_t esize, int64_t n, const int64_t *map,
                          const void *const *srcs, int n_src, const void *pad, void *out);
int psim__cuda_reduce(void *stream, int mean, int64_t n_out, int32_t rank, const int64_t *dims,
                      const int64_t *in_strides, const unsigned char *reduced, const float *in,
                      float *out);
int psim__cuda_layernorm(void *stream, int64_t rows, int64_t cols, const float *x,
                         const float *scale, int64_t scale_n, const float *bias, int64_t bias_n,
                         float eps, float *y);
int psim__cuda_batchnorm(void *stream, int64_t n, int64_t c, int64_t inner, const float *x,
                         const float *scale, const float *bias, const float *mean,
                         const float *var, float eps, float *y);
int psim__cuda_pool2d(void *stream, int is_max, int count_include_pad, int64_t nc,
                      const PsimCudaPool2d *g, const float *x, float *y);
#ifdef __cplusplus
}
#endif

#endif
