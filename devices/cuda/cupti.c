/* CUPTI activity collection for the profiler: kernel, memcpy and memset records, attributed to
 * the node that launched them through external correlation ids. cuBLAS and cuDNN may launch
 * several CUDA kernels for one node; each carries the runtime API call's correlation id, and the
 * EXTERNAL_CORRELATION records map those ids to the id pushed around the node's run. Built only
 * with PSIM_HAVE_CUDA. */
#ifdef PSIM_HAVE_CUDA
#include <stdlib.h>

#include <cuda_runtime.h>
#include <cupti.h>

#include "devices/cuda/cuda-class.h"

#define BUFFER_BYTES (8u << 20)

typedef struct {
    uint32_t correlation;
    double us;
} Record;

static GMutex lock;
static GHashTable *corr_to_ext; /* correlation id -> external id (guint64*) */
static GArray *records;         /* Record */
static gboolean started;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void add(uint32_t corr, uint64_t start, uint64_t end)
{
    Record r = {.correlation = corr, .us = end > start ? (double)(end - start) / 1e3 : 0};
    g_array_append_val(records, r);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    g_mutex_lock(&lock);
    while (valid && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
            add(k->correlationId, k->start, k->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)rec;
            add(m->correlationId, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
            CUpti_ActivityMemcpyPtoP4 *m = (CUpti_ActivityMemcpyPtoP4 *)rec;
            add(m->correlationId, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)rec;
            add(m->correlationId, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            CUpti_ActivityExternalCorrelation *e = (CUpti_ActivityExternalCorrelation *)rec;
            if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
                g_hash_table_insert(corr_to_ext, GUINT_TO_POINTER(e->correlationId),
                                    g_memdup2(&e->externalId, sizeof e->externalId));
            break;
        }
        default:
            break;
        }
    }
    g_mutex_unlock(&lock);
    free(buffer);
}

#define PSIM_CUPTI_CHECK(call, what)                                                          \
    do {                                                                                      \
        CUptiResult r_ = (call);                                                              \
        if (r_ != CUPTI_SUCCESS) {                                                            \
            const char *s_ = NULL;                                                            \
            cuptiGetResultString(r_, &s_);                                                    \
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "CUPTI: %s: %s", (what),       \
                        s_ ? s_ : "unknown error");                                           \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)

gboolean psim__cupti_start(GError **error)
{
    gboolean ok = FALSE;
    g_mutex_lock(&lock);
    if (started) {
        g_mutex_unlock(&lock);
        return TRUE;
    }
    if (!corr_to_ext) {
        corr_to_ext = g_hash_table_new_full(NULL, NULL, NULL, g_free);
        records = g_array_new(FALSE, FALSE, sizeof(Record));
    }
    PSIM_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register buffers");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy records");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2), "enable peer memcpy records");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset records");
    /* External correlation records tie an external id to a runtime or driver API record's
     * correlation id, and CUPTI emits them only for API calls it traces: without the RUNTIME
     * and DRIVER kinds (whose own records are dropped in buffer_completed) no kernel is ever
     * attributed to a node. cuBLAS and cuDNN launch through either API. */
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime API records");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable driver API records");
    PSIM_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION),
                     "enable external correlation");
    started = TRUE;
    ok = TRUE;
out:
    g_mutex_unlock(&lock);
    return ok;
}

void psim__cupti_push(uint64_t id)
{
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void psim__cupti_pop(void)
{
    uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

gboolean psim__cupti_flush(GError **error)
{
    /* buffer_completed takes the lock: do not hold it here. */
    PSIM_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    return TRUE;
out:
    return FALSE;
}

double psim__cupti_total_us(uint64_t id, int32_t *n_records)
{
    double total = 0;
    int32_t n = 0;
    g_mutex_lock(&lock);
    for (guint i = 0; records && i < records->len; i++) {
        Record *r = &g_array_index(records, Record, i);
        guint64 *ext = g_hash_table_lookup(corr_to_ext, GUINT_TO_POINTER(r->correlation));
        if (ext && *ext == id) {
            total += r->us;
            n++;
        }
    }
    g_mutex_unlock(&lock);
    if (n_records)
        *n_records = n;
    return total;
}

void psim__cupti_counts(int32_t *n_records, int32_t *n_correlations)
{
    g_mutex_lock(&lock);
    *n_records = records ? (int32_t)records->len : 0;
    *n_correlations = corr_to_ext ? (int32_t)g_hash_table_size(corr_to_ext) : 0;
    g_mutex_unlock(&lock);
}

void psim__cupti_clear(void)
{
    g_mutex_lock(&lock);
    if (records) {
        g_array_set_size(records, 0);
        g_hash_table_remove_all(corr_to_ext);
    }
    g_mutex_unlock(&lock);
}

#endif
