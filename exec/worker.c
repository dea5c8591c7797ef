/* Device workers: one thread per device that runs posted closures in order. A CPU worker pins
 * its thread to the device's cores, so that devices of one machine do not fight over cores.
 * Tensor memory allocated through a worker is accounted (live and peak bytes). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec-private.h"

double psim_exec_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

void psim__exec_error(GError **error, int code, const PsimGraph *g, const PsimNode *n,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    const char *src = psim_graph_source(g) ? psim_graph_source(g)
                      : psim_graph_name(g)  ? psim_graph_name(g)
                                            : "graph";
    if (n)
        g_set_error(error, PSIM_ERROR, code, "%s: node '%s': %s", src, n->name, msg);
    else
        g_set_error(error, PSIM_ERROR, code, "%s: %s", src, msg);
}

/* Memory accounting outlives the worker: tensors it allocated may be released later (fetched
 * outputs), so each holds a reference to the counter. The counter also keeps a pool of freed
 * blocks by size class (psim_pool_class): a step then reuses the previous step's memory instead
 * of mapping fresh pages (and taking a page fault per 4 KiB) for every activation, and small
 * blocks skip the C library's aligned allocation, which took a microsecond or more per tensor of
 * a few KiB when another device's thread had freed the block (docs/validation.md). */
#define POOL_MAX_BYTES ((size_t)1 << 30)

typedef struct PoolBlock {
    struct PoolBlock *next;
} PoolBlock;

typedef struct {
    atomic_int refcount;
    atomic_int_least64_t live;
    atomic_int_least64_t peak;
    pthread_mutex_t pool_lock;
    PoolBlock *pool[PSIM_POOL_CLASSES];
    size_t pooled;
} MemCounter;

static void *pool_get(MemCounter *m, size_t sz)
{
    uint64_t cap;
    int c = psim_pool_class(sz, &cap);
    pthread_mutex_lock(&m->pool_lock);
    PoolBlock *b = m->pool[c];
    if (b) {
        m->pool[c] = b->next;
        m->pooled -= cap;
    }
    pthread_mutex_unlock(&m->pool_lock);
    return b ? (void *)b : aligned_alloc(64, cap);
}

static void pool_put(MemCounter *m, void *p, size_t sz)
{
    uint64_t cap;
    int c = psim_pool_class(sz, &cap);
    pthread_mutex_lock(&m->pool_lock);
    gboolean keep = m->pooled + cap <= POOL_MAX_BYTES;
    if (keep) {
        PoolBlock *b = p;
        b->next = m->pool[c];
        m->pool[c] = b;
        m->pooled += cap;
    }
    pthread_mutex_unlock(&m->pool_lock);
    if (!keep)
        free(p);
}

static void mem_counter_unref(MemCounter *m)
{
    if (atomic_fetch_sub(&m->refcount, 1) != 1)
        return;
    for (int c = 0; c < PSIM_POOL_CLASSES; c++)
        while (m->pool[c]) {
            PoolBlock *b = m->pool[c];
            m->pool[c] = b->next;
            free(b);
        }
    pthread_mutex_destroy(&m->pool_lock);
    g_free(m);
}

typedef struct {
    PsimWorkerFn fn;
    void *arg;
} Job;

struct PsimWorker {
    const PsimDeviceClass *cls;
    const PsimWorkerClass *klass;
    const PsimDevice *device;
    char *name;
    GThread *thread;
    pthread_mutex_t lock; /* pthread, not GMutex: ThreadSanitizer sees these */
    pthread_cond_t cond;
    GQueue jobs;       /* Job*, guarded by lock */
    atomic_int n_queued; /* jobs' length, readable without the lock (polling) */
    int n_unfinished;  /* posted and not yet run, guarded by lock */
    atomic_int busy;   /* n_unfinished, readable without the lock (polling) */
    GError *first_error;
    gboolean stop;
    MemCounter *mem;
    void *context; /* the class's device context (GPU: stream and handles) */
};

/* --- The worker thread ------------------------------------------------------------------- */

static __thread PsimWorker *current_worker;

/* After a job, an idle worker polls its queue (yielding its core) for this long before it
 * sleeps: in a loop of steps the next one is posted within microseconds, and a core that went
 * to sleep runs the next kernels slower (see RECV_SPIN_US in executor.c). */
#define WORKER_SPIN_US 2000.0

/* How long psim_worker_wait polls before it sleeps. */
#define WAIT_SPIN_US 200.0

static gpointer worker_main(gpointer data)
{
    PsimWorker *w = data;
    current_worker = w;
    /* Every job on this thread may run kernels (the executor's, the profiler's timed ones). */
    psim_kernel_thread_init();
    pthread_mutex_lock(&w->lock);
    for (;;) {
        if (!w->stop && g_queue_is_empty(&w->jobs)) {
            pthread_mutex_unlock(&w->lock);
            double end = psim_exec_now_us() + WORKER_SPIN_US;
            while (atomic_load(&w->n_queued) == 0 && psim_exec_now_us() < end)
                sched_yield();
            pthread_mutex_lock(&w->lock);
        }
        while (!w->stop && g_queue_is_empty(&w->jobs))
            pthread_cond_wait(&w->cond, &w->lock);
        Job *job = g_queue_pop_head(&w->jobs);
        if (!job)
            break; /* stop requested and nothing left */
        atomic_fetch_sub(&w->n_queued, 1);
        pthread_mutex_unlock(&w->lock);
        GError *err = NULL;
        gboolean ok = job->fn(w, job->arg, &err);
        g_free(job);
        pthread_mutex_lock(&w->lock);
        if (!ok) {
            if (!err)
                g_set_error(&err, PSIM_ERROR, PSIM_ERROR_RUNTIME, "device %s: work failed",
                            w->name);
            if (!w->first_error)
                w->first_error = err;
            else
                g_error_free(err);
        }
        w->n_unfinished--;
        atomic_store(&w->busy, w->n_unfinished);
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    if (w->klass->thread_fini)
        w->klass->thread_fini(w);
    return NULL;
}

static gboolean worker_init_job(PsimWorker *w, void *arg, GError **error)
{
    (void)arg;
    return w->klass->thread_init ? w->klass->thread_init(w, error) : TRUE;
}

PsimWorker *psim_worker_new(const PsimDevice *device, GError **error)
{
    const PsimDeviceClass *cls = device ? device->cls : psim_device_class_host();
    const char *type = device ? device->type : cls->type;
    const PsimWorkerClass *klass = cls ? cls->worker : NULL;
    if (!klass) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                    "device %s: the executor cannot run devices of type %s yet",
                    device && device->short_name ? device->short_name : "?", type ? type : "?");
        return NULL;
    }
    PsimWorker *w = g_new0(PsimWorker, 1);
    w->cls = cls;
    w->klass = klass;
    w->device = device;
    w->name = g_strdup(device ? (device->short_name ? device->short_name : device->name) : cls->type);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    g_queue_init(&w->jobs);
    w->mem = g_new0(MemCounter, 1);
    atomic_init(&w->mem->refcount, 1);
    pthread_mutex_init(&w->mem->pool_lock, NULL);
    g_autofree char *tname = g_strdup_printf("psim-%s", w->name);
    w->thread = g_thread_try_new(tname, worker_main, w, error);
    if (!w->thread) {
        psim_worker_free(w);
        return NULL;
    }
    if (!psim_worker_call(w, worker_init_job, NULL, error)) {
        psim_worker_free(w);
        return NULL;
    }
    return w;
}

void psim_worker_free(PsimWorker *w)
{
    if (!w)
        return;
    if (w->thread) {
        pthread_mutex_lock(&w->lock);
        w->stop = TRUE;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        g_thread_join(w->thread);
    }
    if (w->first_error)
        g_error_free(w->first_error);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    mem_counter_unref(w->mem);
    g_free(w->name);
    g_free(w);
}

const PsimDevice *psim_worker_device(const PsimWorker *w) { return w->device; }
void *psim_worker_context(const PsimWorker *w) { return w->context; }
gboolean psim__worker_device_memory(const PsimWorker *w) { return w->klass->mem_alloc != NULL; }
void psim_worker_set_context(PsimWorker *w, void *context) { w->context = context; }

static gboolean sync_job(PsimWorker *w, void *arg, GError **error)
{
    (void)arg;
    return w->klass->sync(w, error);
}

gboolean psim_worker_sync(PsimWorker *w, GError **error)
{
    if (!w->klass->sync)
        return TRUE;
    return psim_worker_call(w, sync_job, NULL, error);
}

typedef struct {
    PsimTensor *t, *out;
} ToHost;

static gboolean to_host_job(PsimWorker *w, void *arg, GError **error)
{
    ToHost *th = arg;
    th->out = w->klass->to_host(w, th->t, error);
    return th->out != NULL;
}

PsimTensor *psim_worker_to_host(PsimWorker *w, PsimTensor *t, GError **error)
{
    if (!t || t->device < 0 || !w->klass->to_host)
        return t ? psim_tensor_ref(t) : NULL;
    ToHost th = {t, NULL};
    if (!psim_worker_call(w, to_host_job, &th, error))
        return NULL;
    return th.out;
}
gboolean psim_worker_copy_in(PsimWorker *w, PsimTensor *dst, const PsimTensor *src,
                             GError **error)
{
    g_return_val_if_fail(dst && src && dst->nbytes == src->nbytes && src->device < 0, FALSE);
    if (dst->device >= 0 && w->klass->from_host)
        return w->klass->from_host(w, dst, src, error);
    if (src->nbytes)
        memcpy(dst->data, src->data, src->nbytes);
    return TRUE;
}

const char *psim_worker_device_type(const PsimWorker *w) { return w->cls->type; }
const char *psim_worker_name(const PsimWorker *w) { return w->name; }

void psim_worker_post(PsimWorker *w, PsimWorkerFn fn, void *arg)
{
    Job *job = g_new(Job, 1);
    job->fn = fn;
    job->arg = arg;
    pthread_mutex_lock(&w->lock);
    g_queue_push_tail(&w->jobs, job);
    atomic_fetch_add(&w->n_queued, 1);
    w->n_unfinished++;
    atomic_store(&w->busy, w->n_unfinished);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

gboolean psim_worker_wait(PsimWorker *w, GError **error)
{
    /* Short work (a cached step of small ops) is over in microseconds: poll for it first, as
     * the worker does for its next job, rather than sleep and be woken. */
    double end = psim_exec_now_us() + WAIT_SPIN_US;
    while (atomic_load(&w->busy) > 0 && psim_exec_now_us() < end)
        sched_yield();
    pthread_mutex_lock(&w->lock);
    while (w->n_unfinished > 0)
        pthread_cond_wait(&w->cond, &w->lock);
    GError *err = w->first_error;
    w->first_error = NULL;
    pthread_mutex_unlock(&w->lock);
    if (err) {
        g_propagate_error(error, err);
        return FALSE;
    }
    return TRUE;
}

gboolean psim_worker_call(PsimWorker *w, PsimWorkerFn fn, void *arg, GError **error)
{
    if (current_worker == w)
        return fn(w, arg, error);
    psim_worker_post(w, fn, arg);
    return psim_worker_wait(w, error);
}

/* --- Memory ------------------------------------------------------------------------------ */

uint64_t psim_worker_memory(const PsimWorker *w, uint64_t *peak)
{
    if (peak)
        *peak = (uint64_t)atomic_load(&w->mem->peak);
    return (uint64_t)atomic_load(&w->mem->live);
}

void psim_worker_pool_release(PsimWorker *w)
{
    MemCounter *m = w->mem;
    pthread_mutex_lock(&m->pool_lock);
    for (int c = 0; c < PSIM_POOL_CLASSES; c++)
        while (m->pool[c]) {
            PoolBlock *b = m->pool[c];
            m->pool[c] = b->next;
            free(b);
        }
    m->pooled = 0;
    pthread_mutex_unlock(&m->pool_lock);
}

void psim_worker_memory_reset_peak(PsimWorker *w)
{
    atomic_store(&w->mem->peak, atomic_load(&w->mem->live));
}

static void host_release(PsimTensor *t, void *user)
{
    MemCounter *m = user;
    atomic_fetch_sub(&m->live, (int64_t)t->nbytes);
    pool_put(m, t->data, psim_pool_block_bytes(t->nbytes));
    mem_counter_unref(m);
}

/* Device memory: freed by the class's mem_free, accounted like host memory. */
typedef struct {
    MemCounter *mem;
    void (*free)(void *ptr);
} DeviceBlock;

static void device_release(PsimTensor *t, void *user)
{
    DeviceBlock *b = user;
    atomic_fetch_sub(&b->mem->live, (int64_t)t->nbytes);
    b->free(t->data);
    mem_counter_unref(b->mem);
    g_free(b);
}

PsimTensor *psim_worker_tensor_new(PsimWorker *w, PsimDType dtype, int32_t rank,
                                   const int64_t *dims, GError **error)
{
    return psim__worker_tensor_alloc(w, dtype, rank, dims, TRUE, error);
}

PsimTensor *psim__worker_tensor_alloc(PsimWorker *w, PsimDType dtype, int32_t rank,
                                      const int64_t *dims, gboolean zero, GError **error)
{
    size_t esize = psim_dtype_size(dtype);
    int64_t ne = rank >= 0 && rank <= 64 && (rank == 0 || dims) ? psim_shape_elems(rank, dims) : -1;
    if (ne < 0 || esize == 0 || dtype == PSIM_DTYPE_STRING) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "cannot allocate a %s tensor of rank %d: its shape is unknown, negative or "
                    "too large, or its dtype is not supported",
                    psim_dtype_name(dtype), rank);
        return NULL;
    }
    size_t nbytes = (size_t)ne * esize;
    size_t sz = psim_pool_block_bytes(nbytes);
    const PsimDevice *d = w->device;
    int64_t live = atomic_fetch_add(&w->mem->live, (int64_t)nbytes) + (int64_t)nbytes;
    if (d && d->memory_bytes && (uint64_t)live > d->memory_bytes) {
        atomic_fetch_sub(&w->mem->live, (int64_t)nbytes);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "out of memory on %s: %zu more bytes would exceed its %" G_GUINT64_FORMAT,
                    w->name, nbytes, d->memory_bytes);
        return NULL;
    }
    if (w->klass->mem_alloc) {
        GError *err = NULL;
        void *dev = w->klass->mem_alloc(w, sz, &err);
        if (!dev) {
            atomic_fetch_sub(&w->mem->live, (int64_t)nbytes);
            g_propagate_error(error, err);
            return NULL;
        }
        int64_t pk = atomic_load(&w->mem->peak);
        while (live > pk && !atomic_compare_exchange_weak(&w->mem->peak, &pk, live))
            ;
        atomic_fetch_add(&w->mem->refcount, 1);
        DeviceBlock *blk = g_new(DeviceBlock, 1);
        blk->mem = w->mem;
        blk->free = w->klass->mem_free;
        PsimTensor *t = psim_tensor_new_wrap(dtype, rank, dims, dev, device_release, blk);
        t->device = w->klass->device_index;
        return t;
    }
    void *data = pool_get(w->mem, sz);
    if (!data) {
        atomic_fetch_sub(&w->mem->live, (int64_t)nbytes);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "out of memory on %s for %zu bytes",
                    w->name, nbytes);
        return NULL;
    }
    if (zero)
        memset(data, 0, sz);
    int64_t peak = atomic_load(&w->mem->peak);
    while (live > peak && !atomic_compare_exchange_weak(&w->mem->peak, &peak, live))
        ;
    atomic_fetch_add(&w->mem->refcount, 1);
    return psim_tensor_new_wrap(dtype, rank, dims, data, host_release, w->mem);
}

PsimTensor *psim__exec_alloc(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                             const int64_t *dims, GError **error)
{
    return psim_worker_tensor_new(ctx->alloc_user, dtype, rank, dims, error);
}

PsimTensor *psim__exec_alloc_uninit(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                                    const int64_t *dims, GError **error)
{
    return psim__worker_tensor_alloc(ctx->alloc_user, dtype, rank, dims, FALSE, error);
}

PsimTensor *psim_worker_tensor_new_uninit(PsimWorker *w, PsimDType dtype, int32_t rank,
                                          const int64_t *dims, GError **error)
{
    return psim__worker_tensor_alloc(w, dtype, rank, dims, FALSE, error);
}
