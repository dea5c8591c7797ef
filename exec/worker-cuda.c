/* The GPU worker class: a host thread that drives one CUDA device. thread_init selects the
 * device (PsimDevice.gpu_ordinal) and makes a stream with cuBLAS and cuDNN handles on it
 * (kernels/cuda/common.c); tensors are plain cudaMalloc memory (never managed), accounted like
 * the CPU worker's; kernels run asynchronously in stream order and sync() waits for the stream.
 * Tensors leave the device through to_host into pinned (cudaMallocHost) host memory and enter it
 * through from_host (the profiler's generated inputs). Compiled
 * only in CUDA builds. */
#ifdef PSIM_HAVE_CUDA
#include "exec-private.h"

#include "kernels/cuda/cuda-private.h"

static gboolean gpu_thread_init(PsimWorker *w, GError **error)
{
    const PsimDevice *dev = psim_worker_device(w);
    int ordinal = dev && dev->gpu_ordinal >= 0 ? dev->gpu_ordinal : 0;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || ordinal >= count) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "device %s: no CUDA device %d (%s)", psim_worker_name(w), ordinal,
                    ce != cudaSuccess ? cudaGetErrorString(ce) : "not that many GPUs");
        return FALSE;
    }
    PsimCudaDevice *d = psim__cuda_device_new(ordinal, error);
    if (!d)
        return FALSE;
    psim_worker_set_context(w, d);
    return TRUE;
}

static void gpu_thread_fini(PsimWorker *w)
{
    psim__cuda_device_free(psim_worker_context(w));
    psim_worker_set_context(w, NULL);
}

static gboolean gpu_sync(PsimWorker *w, GError **error)
{
    PsimCudaDevice *d = psim_worker_context(w);
    cudaError_t ce = cudaStreamSynchronize(d->stream);
    if (ce != cudaSuccess) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "device %s: %s",
                    psim_worker_name(w), cudaGetErrorString(ce));
        return FALSE;
    }
    psim__cuda_device_trim(d);
    return TRUE;
}

static void *gpu_mem_alloc(PsimWorker *w, size_t bytes, GError **error)
{
    PsimCudaDevice *d = psim_worker_context(w);
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, bytes);
    if (ce == cudaSuccess && d)
        ce = cudaMemsetAsync(p, 0, bytes, d->stream);
    else if (ce == cudaSuccess)
        ce = cudaMemset(p, 0, bytes);
    if (ce != cudaSuccess) {
        if (p)
            cudaFree(p);
        cudaGetLastError(); /* clear the sticky-free error state */
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "out of memory on %s for %zu bytes: %s",
                    psim_worker_name(w), bytes, cudaGetErrorString(ce));
        return NULL;
    }
    return p;
}

static void gpu_mem_free(void *p)
{
    /* cudaFree waits for the device: work queued on any stream that reads p finishes first. */
    cudaFree(p);
}

static void pinned_release(PsimTensor *t, void *user)
{
    (void)user;
    cudaFreeHost(t->data);
}

static PsimTensor *gpu_to_host(PsimWorker *w, PsimTensor *t, GError **error)
{
    PsimCudaDevice *d = psim_worker_context(w);
    void *h = NULL;
    cudaError_t ce = cudaMallocHost(&h, t->nbytes ? t->nbytes : 64);
    if (ce == cudaSuccess && t->nbytes)
        ce = cudaMemcpyAsync(h, t->data, t->nbytes, cudaMemcpyDeviceToHost, d->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream);
    if (ce != cudaSuccess) {
        if (h)
            cudaFreeHost(h);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "device %s: copying a tensor to the host: %s", psim_worker_name(w),
                    cudaGetErrorString(ce));
        return NULL;
    }
    return psim_tensor_new_wrap(t->dtype, t->rank, t->dims, h, pinned_release, NULL);
}

static gboolean gpu_from_host(PsimWorker *w, PsimTensor *dst, const PsimTensor *src,
                              GError **error)
{
    PsimCudaDevice *d = psim_worker_context(w);
    cudaError_t ce = cudaSuccess;
    if (src->nbytes)
        ce = cudaMemcpyAsync(dst->data, src->data, src->nbytes, cudaMemcpyHostToDevice, d->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream); /* src is pageable and may go right after */
    if (ce != cudaSuccess) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "device %s: copying a tensor from the host: %s", psim_worker_name(w),
                    cudaGetErrorString(ce));
        return FALSE;
    }
    return TRUE;
}

const PsimWorkerClass psim__gpu_worker_class = {
    .name = "GPU",
    .description = "a host thread driving one CUDA device: one stream, cuBLAS and cuDNN handles, "
                   "cudaMalloc tensors",
    .thread_init = gpu_thread_init,
    .thread_fini = gpu_thread_fini,
    .sync = gpu_sync,
    .mem_alloc = gpu_mem_alloc,
    .mem_free = gpu_mem_free,
    .device_index = 0,
    .to_host = gpu_to_host,
    .from_host = gpu_from_host,
};
#endif
