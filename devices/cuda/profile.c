/* GPU transfers and calibration, timed by CUPTI's memcpy and kernel records: host<->GPU for
 * every (CPU device, GPU) pair from pinned host memory, GPU<->GPU with peer copies, a cuBLAS
 * SGEMM for the GPU's rate and a device-to-device copy for its bandwidth. Built only with
 * PSIM_HAVE_CUDA. Also the class's time_runs: a kernel's runs timed by CUPTI. */
#ifdef PSIM_HAVE_CUDA
#include <math.h>
#include <stdio.h>

#include <cuda_runtime.h>

#include "devices/cuda/cuda-class.h"
#include "kernels/cuda/cublas.h"
#include "profiler/profiler-private.h"

#define PSIM_CUDA_CHECK(call, what)                                                           \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            (void)cudaGetLastError();                                                         \
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "CUDA: %s: %s", (what),        \
                        cudaGetErrorString(e_));                                              \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)

static uint64_t next_id = UINT64_C(1) << 40;

gboolean psim__cuda_sync(GError **error)
{
    PSIM_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
    return TRUE;
out:
    return FALSE;
}

/* Each run's CUDA work (however many kernels cuBLAS or cuDNN launch for it) summed from CUPTI
 * records: the host clock would time the launch. */
gboolean psim__cuda_time_runs(PsimWorker *w, int32_t n, PsimTimedRunFn run, void *user, double *us,
                              GError **error)
{
    (void)w;
    static uint64_t run_id = 1; /* below next_id's range */
    if (!psim__cupti_start(error))
        return FALSE;
    psim__cupti_clear();
    uint64_t first = run_id;
    for (int32_t r = 0; r < n; r++) {
        psim__cupti_push(run_id++);
        gboolean ok = run(user, error);
        psim__cupti_pop();
        if (!ok || !psim__cuda_sync(error))
            return FALSE;
    }
    if (!psim__cupti_flush(error))
        return FALSE;
    for (int32_t r = 0; r < n; r++) {
        int32_t n_rec = 0;
        double t = psim__cupti_total_us(first + (uint64_t)r, &n_rec);
        us[r] = n_rec ? t : 0;
    }
    return TRUE;
}

/* Times `op` (one CUDA call, launched between push and pop) until the sampler is satisfied;
 * each sample is the sum of the CUPTI records the launch produced. */
typedef gboolean (*Launch)(void *user);

static gboolean time_launches(PsimProfiler *p, int32_t ordinal, Launch launch, void *user,
                              double budget_ms, PsimTimingStats *out, GError **error)
{
    gboolean ok = FALSE;
    PSIM_CUDA_CHECK(cudaSetDevice(ordinal), "select device");
    if (!psim__cupti_start(error))
        return FALSE;
    /* Warm-up, untimed. */
    if (!launch(user)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "CUDA: warm-up launch failed");
        goto out;
    }
    PSIM_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
    PsimSampler s;
    psim__sampler_init(&s, &p->opts, budget_ms);
    /* Launch in batches of 8 before flushing: CUPTI's buffers are read only on a flush. */
    for (gboolean more = TRUE; more;) {
        psim__cupti_clear();
        uint64_t first = next_id;
        for (int i = 0; i < 8; i++) {
            psim__cupti_push(next_id++);
            gboolean launched = launch(user);
            psim__cupti_pop();
            if (!launched) {
                g_array_free(s.samples, TRUE);
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "CUDA: launch failed");
                goto out;
            }
        }
        PSIM_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
        if (!psim__cupti_flush(error)) {
            g_array_free(s.samples, TRUE);
            goto out;
        }
        for (uint64_t id = first; id < next_id && more; id++) {
            int32_t n = 0;
            double us = psim__cupti_total_us(id, &n);
            if (n > 0)
                more = psim__sampler_add(&s, us);
        }
        if (s.samples->len == 0 && more && psim_exec_now_us() - s.start_us > budget_ms * 1e3) {
            g_array_free(s.samples, TRUE);
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "CUPTI delivered no activity records");
            goto out;
        }
    }
    psim__sampler_finish(&s, out);
    ok = TRUE;
out:
    return ok;
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int dst_dev, src_dev;
    gboolean peer;
} Copy;

static gboolean launch_copy(void *user)
{
    Copy *c = user;
    cudaError_t e = c->peer ? cudaMemcpyPeerAsync(c->dst, c->dst_dev, c->src, c->src_dev, c->bytes, 0)
                            : cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDefault, 0);
    return e == cudaSuccess;
}

static gboolean store_sizes(PsimProfiler *p, int32_t a, int32_t b, int ordinal, Copy *c,
                            PsimProfileReport *report, GError **error)
{
    const PsimDevice *da = psim_cluster_device(p->cluster, a), *db = psim_cluster_device(p->cluster, b);
    double budget = MIN(p->opts.budget_ms, 300);
    for (uint64_t bytes = p->opts.link_min_bytes; bytes <= p->opts.link_max_bytes; bytes *= 4) {
        PsimTimingStats st;
        c->bytes = bytes;
        if (!time_launches(p, ordinal, launch_copy, c, budget, &st, error))
            return FALSE;
        if (!psim_cost_db_link_put(p->db, da, db, bytes, "cupti", &st, error))
            return FALSE;
        report->link_rows++;
        g_autofree char *what = g_strdup_printf("%s -> %s, %" G_GUINT64_FORMAT " bytes",
                                                da->short_name, db->short_name, bytes);
        psim__profiler_progress(p, "links", 0, 0, what);
    }
    return psim__profiler_fit_pair(p, a, b, report, error);
}

gboolean psim__cuda_profile_links(PsimProfiler *p, PsimProfileReport *report, GError **error)
{
    const PsimCluster *c = p->cluster;
    size_t max = (size_t)p->opts.link_max_bytes;
    gboolean ok = FALSE;
    void *host = NULL;
    g_autofree void **dev = g_new0(void *, p->n_devices + 1);
    int32_t n_gpu = 0;
    for (int32_t i = 0; i < p->n_devices; i++)
        if (psim_cluster_device(c, i)->cls == &psim_cuda_device_class && psim_cluster_device(c, i)->gpu_ordinal >= 0)
            n_gpu++;
    if (n_gpu == 0)
        return TRUE;
    PSIM_CUDA_CHECK(cudaMallocHost(&host, max), "allocate pinned host memory");
    memset(host, 1, max);
    for (int32_t i = 0; i < p->n_devices; i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        if (d->cls != &psim_cuda_device_class || d->gpu_ordinal < 0)
            continue;
        PSIM_CUDA_CHECK(cudaSetDevice(d->gpu_ordinal), "select device");
        PSIM_CUDA_CHECK(cudaMalloc(&dev[i], max), "allocate device memory");
        PSIM_CUDA_CHECK(cudaMemset(dev[i], 1, max), "fill device memory");
    }
    /* Host <-> GPU, for each CPU device of this machine (same pinned buffer: the host side of a
     * PCIe copy does not depend on which core issued it). */
    for (int32_t h = 0; h < p->n_devices; h++) {
        if (!p->workers[h] || !psim_cluster_device(c, h)->cls->host)
            continue;
        for (int32_t g = 0; g < p->n_devices; g++) {
            if (!dev[g])
                continue;
            int ord = psim_cluster_device(c, g)->gpu_ordinal;
            Copy up = {.dst = dev[g], .src = host}, down = {.dst = host, .src = dev[g]};
            if (!store_sizes(p, h, g, ord, &up, report, error) || !store_sizes(p, g, h, ord, &down, report, error))
                goto out;
        }
    }
    /* GPU <-> GPU: peer access where the hardware allows it, else staged by the driver. */
    for (int32_t a = 0; a < p->n_devices; a++)
        for (int32_t b = 0; b < p->n_devices; b++) {
            if (a == b || !dev[a] || !dev[b])
                continue;
            int oa = psim_cluster_device(c, a)->gpu_ordinal, ob = psim_cluster_device(c, b)->gpu_ordinal;
            int can = 0;
            if (cudaDeviceCanAccessPeer(&can, ob, oa) == cudaSuccess && can) {
                cudaSetDevice(ob);
                cudaError_t e = cudaDeviceEnablePeerAccess(oa, 0);
                if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                    (void)cudaGetLastError();
                (void)cudaGetLastError();
            }
            Copy cp = {.dst = dev[b], .src = dev[a], .dst_dev = ob, .src_dev = oa, .peer = TRUE};
            if (!store_sizes(p, a, b, oa, &cp, report, error))
                goto out;
        }
    ok = TRUE;
out:
    for (int32_t i = 0; i < p->n_devices; i++)
        if (dev[i])
            cudaFree(dev[i]);
    if (host)
        cudaFreeHost(host);
    return ok;
}

typedef struct {
    cublasHandle_t h;
    int n;
    float *a, *b, *c;
} Gemm;

static gboolean launch_gemm(void *user)
{
    Gemm *g = user;
    const float one = 1, zero = 0;
    return psim__cublas()->sgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a, g->n, g->b, g->n,
                       &zero, g->c, g->n) == CUBLAS_STATUS_SUCCESS;
}

gboolean psim__cuda_calibrate(PsimProfiler *p, int32_t device, PsimProfileReport *report, GError **error)
{
    const PsimDevice *d = psim_cluster_device(p->cluster, device);
    if (d->gpu_ordinal < 0)
        return TRUE;
    gboolean ok = FALSE;
    Gemm g = {.n = 4096};
    void *x = NULL, *y = NULL;
    size_t copy_bytes = 256u << 20;
    PsimTimingStats st;
    g_autofree char *gd = NULL, *cd = NULL;
    PSIM_CUDA_CHECK(cudaSetDevice(d->gpu_ordinal), "select device");
    cublasStatus_t bs = psim__cublas()->create(&g.h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "cuBLAS: cannot create a handle on %s: %s", d->short_name,
                    psim__cublas()->status_string(bs));
        goto out;
    }
    size_t mat = (size_t)g.n * g.n * sizeof(float);
    PSIM_CUDA_CHECK(cudaMalloc((void **)&g.a, mat), "allocate");
    PSIM_CUDA_CHECK(cudaMalloc((void **)&g.b, mat), "allocate");
    PSIM_CUDA_CHECK(cudaMalloc((void **)&g.c, mat), "allocate");
    PSIM_CUDA_CHECK(cudaMemset(g.a, 0, mat), "fill");
    PSIM_CUDA_CHECK(cudaMemset(g.b, 0, mat), "fill");
    if (!time_launches(p, d->gpu_ordinal, launch_gemm, &g, p->opts.budget_ms, &st, error))
        goto out;
    gd = g_strdup_printf("cublasSgemm %dx%dx%d, CUPTI, median of %" G_GINT64_FORMAT,
                                          g.n, g.n, g.n, st.n);
    if (!psim_cost_db_calibration_put(p->db, d, "gemm_gflops", 2.0 * g.n * g.n * (double)g.n / (st.median_us * 1e3), gd, error))
        goto out;
    report->calibrations++;
    PSIM_CUDA_CHECK(cudaMalloc(&x, copy_bytes), "allocate");
    PSIM_CUDA_CHECK(cudaMalloc(&y, copy_bytes), "allocate");
    PSIM_CUDA_CHECK(cudaMemset(x, 1, copy_bytes), "fill");
    Copy cp = {.dst = y, .src = x, .bytes = copy_bytes};
    if (!time_launches(p, d->gpu_ordinal, launch_copy, &cp, p->opts.budget_ms, &st, error))
        goto out;
    cd = g_strdup_printf("device-to-device copy of 256 MiB, CUPTI, median of %" G_GINT64_FORMAT, st.n);
    if (!psim_cost_db_calibration_put(p->db, d, "copy_GBps", 2.0 * copy_bytes / (st.median_us * 1e3), cd, error))
        goto out;
    report->calibrations++;
    ok = TRUE;
out:
    cudaFree(g.a);
    cudaFree(g.b);
    cudaFree(g.c);
    cudaFree(x);
    cudaFree(y);
    if (g.h)
        psim__cublas()->destroy(g.h);
    return ok;
}

#endif
