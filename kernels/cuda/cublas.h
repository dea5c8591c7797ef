/* cuBLAS for the CUDA kernels (kernels/cuda/) and the GPU class's calibration (devices/cuda/),
 * opened on first use (cublas.c). Built only when the CUDA toolkit is found (PSIM_HAVE_CUDA). */
#ifndef PLACESIM_KERNELS_CUDA_CUBLAS_H
#define PLACESIM_KERNELS_CUDA_CUBLAS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* The cuBLAS entry points placesim calls, from the library opened on first use (cublas.c: linked,
 * cuBLAS maps 210 MB into every process); a library that cannot be opened gives entry points
 * that fail with CUBLAS_STATUS_NOT_INITIALIZED, and status_string then says why. */
typedef struct {
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*sgemm)(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const float *alpha, const float *a, int lda, const float *b, int ldb,
                            const float *beta, float *c, int ldc);
    const char *(*status_string)(cublasStatus_t status);
} PsimCublas;
const PsimCublas *psim__cublas(void);

#endif
