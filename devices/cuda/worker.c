/* The GPU worker class: a host thread that drives one CUDA device. thread_init selects the
 * device (PsimDevice.gpu_ordinal) and makes a stream with cuBLAS and cuDNN handles on it
 * (kernels/cuda/common.c); tensors are plain cudaMalloc memory (never managed), accounted like
 * the CPU worker's, and cached per GPU once freed; kernels run asynchronously in stream order and
 * sync() waits for the stream. Tensors leave the device through to_host into host memory and enter it
 * through from_host (the profiler's generated inputs). Compiled
 * only in CUDA builds; the class's `worker` (devices/cuda/cuda.c). */
#ifdef PSIM_HAVE_CUDA
#include "devices/cuda/cuda-class.h"
#include "exec/exec-private.h"

#include "kernels/cuda/cuda-private.h"

/* Device memory is cached per GPU, as PyTorch's CUDA caching allocator does: cudaMalloc costs
 * tens of microseconds and cudaFree waits for the whole device, and every op output was one of
 * each (the H200 spent ~20 us of host time on a 2 us Relu). A freed block goes on its GPU's free
 * list for its size (sizes are the worker's 64-byte rounding, so a step's allocations recur
 * exactly); the next allocation of that size on that GPU takes it. Reuse is safe in stream
 * order: a GPU worker writes and reads its tensors on its one stream, so a kernel that reuses a
 * block runs after every earlier use of it. Blocks return to CUDA when an allocation fails (the
 * GPU's cached blocks first, then one retry) and when the GPU's last worker stops; a block freed
 * after that goes straight back to CUDA. */
#define MAX_GPUS 64

typedef struct {
    size_t bytes;
    int ordinal;
} Block;

static GMutex cache_lock;
static GHashTable *block_of;   /* device pointer -> Block (every block this class allocated) */
static GHashTable *free_lists; /* (ordinal << 48 | bytes) -> GSList of free device pointers */
static int workers_of[MAX_GPUS];

static gpointer list_key(int ordinal, size_t bytes)
{
    return (gpointer)(uintptr_t)(((guint64)ordinal << 48) | (guint64)bytes);
}

/* Returns every cached block of `ordinal` to CUDA (under cache_lock). */
static void cache_flush(int ordinal)
{
    GHashTableIter it;
    gpointer key, value;
    g_hash_table_iter_init(&it, free_lists);
    while (g_hash_table_iter_next(&it, &key, &value)) {
        if ((int)((guint64)(uintptr_t)key >> 48) != ordinal)
            continue;
        for (GSList *l = value; l; l = l->next) {
            g_hash_table_remove(block_of, l->data);
            cudaFree(l->data);
        }
        g_slist_free(value);
        g_hash_table_iter_remove(&it);
    }
}

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
    g_mutex_lock(&cache_lock);
    if (!block_of) {
        block_of = g_hash_table_new_full(NULL, NULL, NULL, g_free);
        free_lists = g_hash_table_new(NULL, NULL);
    }
    if (ordinal < MAX_GPUS)
        workers_of[ordinal]++;
    g_mutex_unlock(&cache_lock);
    return TRUE;
}

static void gpu_thread_fini(PsimWorker *w)
{
    PsimCudaDevice *d = psim_worker_context(w);
    int ordinal = d ? d->ordinal : -1;
    psim__cuda_device_free(d);
    psim_worker_set_context(w, NULL);
    g_mutex_lock(&cache_lock);
    if (ordinal >= 0 && ordinal < MAX_GPUS && --workers_of[ordinal] == 0)
        cache_flush(ordinal);
    g_mutex_unlock(&cache_lock);
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
    int ordinal = d ? d->ordinal : 0;
    void *p = NULL;
    g_mutex_lock(&cache_lock);
    GSList *l = free_lists ? g_hash_table_lookup(free_lists, list_key(ordinal, bytes)) : NULL;
    if (l) {
        p = l->data;
        g_hash_table_insert(free_lists, list_key(ordinal, bytes), g_slist_delete_link(l, l));
    }
    g_mutex_unlock(&cache_lock);
    cudaError_t ce = cudaSuccess;
    if (!p) {
        ce = cudaMalloc(&p, bytes);
        if (ce != cudaSuccess) { /* the cache may hold what is missing */
            cudaGetLastError();
            g_mutex_lock(&cache_lock);
            if (free_lists)
                cache_flush(ordinal);
            g_mutex_unlock(&cache_lock);
            ce = cudaMalloc(&p, bytes);
        }
        if (ce == cudaSuccess && block_of) {
            Block *b = g_new(Block, 1);
            b->bytes = bytes;
            b->ordinal = ordinal;
            g_mutex_lock(&cache_lock);
            g_hash_table_insert(block_of, p, b);
            g_mutex_unlock(&cache_lock);
        }
    }
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
    g_mutex_lock(&cache_lock);
    Block *b = block_of ? g_hash_table_lookup(block_of, p) : NULL;
    if (b && b->ordinal < MAX_GPUS && workers_of[b->ordinal] > 0) {
        gpointer key = list_key(b->ordinal, b->bytes);
        g_hash_table_insert(free_lists, key, g_slist_prepend(g_hash_table_lookup(free_lists, key), p));
        g_mutex_unlock(&cache_lock);
        return;
    }
    if (b)
        g_hash_table_remove(block_of, p);
    g_mutex_unlock(&cache_lock);
    /* No worker drives that GPU any more: back to CUDA, which waits for the device. */
    cudaFree(p);
}

static void host_free(PsimTensor *t, void *user)
{
    (void)user;
    g_free(t->data);
}

/* A fetched or sent tensor in plain host memory: cudaMallocHost for every fetch cost more than
 * the copy it was meant to speed up (pinning is a system call and page locking). */
static PsimTensor *gpu_to_host(PsimWorker *w, PsimTensor *t, GError **error)
{
    PsimCudaDevice *d = psim_worker_context(w);
    void *h = g_try_malloc(t->nbytes ? t->nbytes : 64);
    cudaError_t ce = h ? cudaSuccess : cudaErrorMemoryAllocation;
    if (ce == cudaSuccess && t->nbytes)
        ce = cudaMemcpyAsync(h, t->data, t->nbytes, cudaMemcpyDeviceToHost, d->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream);
    if (ce != cudaSuccess) {
        g_free(h);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "device %s: copying a tensor to the host: %s", psim_worker_name(w),
                    cudaGetErrorString(ce));
        return NULL;
    }
    return psim_tensor_new_wrap(t->dtype, t->rank, t->dims, h, host_free, NULL);
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
