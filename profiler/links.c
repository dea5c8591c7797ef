/* Transfers between devices at sizes from link_min_bytes to link_max_bytes (x4 steps), timed
 * per ordered pair, and the fitted latency + bytes/bandwidth model. CPU to CPU up to
 * PSIM_PROFILE_HOP_MAX_BYTES: the whole hop through the executor (hop.c; rows with source
 * 'executor'). Larger: timed as the executor makes the copy (exec/transport.c): the source device has just written the tensor
 * (its lines dirty in the source core's caches), and the destination's thread copies it into a
 * buffer of its own that is not in the caches (a pooled block last used long before). Each sample is one copy: the source's thread rewrites the buffer, then the
 * destination's thread times the memcpy. Copying the same clean source over and over instead
 * would read it from the destination's own cache after the first time and measure a link
 * several times faster than the executor's. GPU pairs: cuda/. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "profiler/profiler-private.h"

typedef struct {
    size_t bytes;
    void *buf;
} TouchJob;

static gboolean touch_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    TouchJob *j = arg;
    j->buf = g_try_malloc(j->bytes);
    if (!j->buf) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "cannot allocate %zu bytes for link timing", j->bytes);
        return FALSE;
    }
    memset(j->buf, 1, j->bytes);
    return TRUE;
}

typedef struct {
    const PsimProfileOptions *opts;
    void *dst;
    const void *src;
    size_t bytes;
    double budget_ms;
    PsimTimingStats *out;
} CopyJob;

/* Small copies are repeated inside one sample so that the clock's own cost (tens of ns) stays
 * below a percent of what is timed; a sample is then the mean per copy. */
static gboolean copy_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    CopyJob *j = arg;
    int32_t inner = j->bytes >= (1u << 20) ? 1 : (int32_t)MIN(256, MAX(1, (1u << 20) / j->bytes / 4));
    memcpy(j->dst, j->src, j->bytes); /* warm-up */
    PsimSampler s;
    psim__sampler_init(&s, j->opts, j->budget_ms);
    for (;;) {
        double t0 = psim__profiler_clock_us(j->opts);
        for (int32_t i = 0; i < inner; i++) {
            memcpy(j->dst, j->src, j->bytes);
            /* Keep the compiler from merging the repeated copies. */
            __asm__ __volatile__("" : : "r"(j->dst) : "memory");
        }
        double t1 = psim__profiler_clock_us(j->opts);
        if (!psim__sampler_add(&s, (t1 - t0) / inner))
            break;
    }
    psim__sampler_finish(&s, j->out);
    return TRUE;
}

typedef struct {
    void *buf;
    size_t bytes;
    int value;
    void *cold; /* the destination's buffer, evicted from the caches */
} DirtyJob;

static gboolean dirty_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    DirtyJob *j = arg;
    memset(j->buf, j->value, j->bytes);
    if (j->cold && j->bytes <= PSIM_PROFILE_EVICT_MAX_BYTES)
        psim_profile_cache_evict(j->cold, j->bytes);
    return TRUE;
}

typedef struct {
    const PsimProfileOptions *opts;
    void *dst;
    const void *src;
    size_t bytes;
    double us;
} TimedCopyJob;

static gboolean timed_copy_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    TimedCopyJob *j = arg;
    double t0 = psim__profiler_clock_us(j->opts);
    memcpy(j->dst, j->src, j->bytes);
    __asm__ __volatile__("" : : "r"(j->dst) : "memory");
    j->us = psim__profiler_clock_us(j->opts) - t0;
    return TRUE;
}

/* The executor's transfer from device a to device b: per sample, a writes src, then b times
 * one copy of it into dst. */
static gboolean transfer_samples(PsimProfiler *p, int32_t a, int32_t b, void *dst, void *src,
                                 size_t bytes, double budget_ms, PsimTimingStats *out,
                                 GError **error)
{
    PsimSampler s;
    psim__sampler_init(&s, &p->opts, budget_ms);
    /* The destination's block is evicted too: in a step it is a pooled block last used long
     * before, as a kernel's output is (profiler.c). */
    DirtyJob dj = {.buf = src, .bytes = bytes, .cold = dst};
    TimedCopyJob cj = {.opts = &p->opts, .dst = dst, .src = src, .bytes = bytes};
    /* One unrecorded round: the destination's pages are mapped and its buffer warm, as a
     * worker's pooled block is after the first step. */
    for (int warm = 1;; warm = 0) {
        dj.value = (dj.value + 1) & 0x7f;
        if (!psim_worker_call(p->workers[a], dirty_job, &dj, error) ||
            !psim_worker_call(p->workers[b], timed_copy_job, &cj, error)) {
            g_array_free(s.samples, TRUE);
            return FALSE;
        }
        if (!warm && !psim__sampler_add(&s, cj.us))
            break;
    }
    psim__sampler_finish(&s, out);
    return TRUE;
}

static gboolean free_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    g_free(arg);
    return TRUE;
}

void *psim__profiler_touch(PsimProfiler *p, int32_t device, size_t bytes, GError **error)
{
    TouchJob t = {.bytes = bytes};
    if (!psim_worker_call(p->workers[device], touch_job, &t, error))
        return NULL;
    return t.buf;
}

void psim__profiler_untouch(PsimProfiler *p, int32_t device, void *buf)
{
    if (buf)
        psim_worker_call(p->workers[device], free_job, buf, NULL);
}

gboolean psim__profiler_copy(PsimProfiler *p, int32_t device, void *dst, const void *src,
                             size_t bytes, double budget_ms, PsimTimingStats *out, GError **error)
{
    CopyJob cj = {.opts = &p->opts, .dst = dst, .src = src, .bytes = bytes, .budget_ms = budget_ms,
                  .out = out};
    return psim_worker_call(p->workers[device], copy_job, &cj, error);
}

static int32_t n_sizes(const PsimProfileOptions *o)
{
    int32_t n = 0;
    for (uint64_t b = o->link_min_bytes; b <= o->link_max_bytes; b *= 4)
        n++;
    return n;
}

gboolean psim__profiler_fit_pair(PsimProfiler *p, int32_t a, int32_t b, PsimProfileReport *report, GError **error)
{
    const PsimDevice *da = psim_cluster_device(p->cluster, a), *db = psim_cluster_device(p->cluster, b);
    PsimLink l;
    double rms = 0;
    int n = 0;
    GError *err = NULL;
    if (!psim_cost_db_link_fit(p->db, da, db, &l, &rms, &n, &err)) {
        if (err) {
            g_propagate_error(error, err);
            return FALSE;
        }
        return TRUE;
    }
    if (!psim_cost_db_link_fit_put(p->db, da, db, &l, n, rms, error))
        return FALSE;
    report->link_pairs++;
    return TRUE;
}

gboolean psim_profiler_links(PsimProfiler *p, PsimProfileReport *report, GError **error)
{
    PsimProfileReport dummy = {0};
    if (!report)
        report = &dummy;
    g_return_val_if_fail(p->db, FALSE);
    if (p->t0_us == 0)
        p->t0_us = psim_exec_now_us();
    /* CPU devices with a worker. */
    g_autoptr(GArray) cpus = g_array_new(FALSE, FALSE, sizeof(int32_t));
    for (int32_t i = 0; i < p->n_devices; i++)
        if (p->workers[i] && psim_cluster_device(p->cluster, i)->cls->host)
            g_array_append_val(cpus, i);
    int32_t nc = (int32_t)cpus->len, ns = n_sizes(&p->opts);
    int32_t total = nc * (nc - 1) * ns, done = 0;
    size_t max_bytes = (size_t)p->opts.link_max_bytes;
    g_autofree void **bufs = g_new0(void *, nc + 1);
    g_autofree double *reclaim_sum = g_new0(double, (size_t)(nc + 1) * 2 * PSIM_RECLAIM_N);
    g_autofree int32_t *reclaim_n = g_new0(int32_t, nc + 1);
    /* Per source: the sums over its destinations' hops of the Send's and the hand-off's times. */
    g_autofree double *send_sum = g_new0(double, nc + 1), *handoff_sum = g_new0(double, nc + 1);
    g_autofree int32_t *hop_n = g_new0(int32_t, nc + 1);
    gboolean ok = FALSE;
    /* Per size, the budget is a share of the kernel budget: many sizes, many pairs. */
    double budget = MIN(p->opts.budget_ms, 300);
    for (int32_t i = 0; i < nc && nc > 1; i++)
        if (!(bufs[i] = psim__profiler_touch(p, g_array_index(cpus, int32_t, i), max_bytes, error)))
            goto out;
    for (int32_t i = 0; i < nc && nc > 1; i++)
        for (int32_t j = 0; j < nc; j++) {
            if (i == j)
                continue;
            int32_t a = g_array_index(cpus, int32_t, i), b = g_array_index(cpus, int32_t, j);
            const PsimDevice *da = psim_cluster_device(p->cluster, a), *db = psim_cluster_device(p->cluster, b);
            gboolean pair_hop = TRUE; /* FALSE once the pair's plan could not run */
            for (uint64_t bytes = p->opts.link_min_bytes; bytes <= p->opts.link_max_bytes; bytes *= 4) {
                PsimTimingStats st;
                gboolean hop = pair_hop && bytes <= PSIM_PROFILE_HOP_MAX_BYTES;
                GError *hop_err = NULL;
                double send_us = 0, handoff_us = 0;
                if (hop && !psim__profiler_hop(p, a, b, bytes, budget, &st, &send_us, &handoff_us, &hop_err)) {
                    /* A cluster the executor cannot run this pair's plan on still gets the copy. */
                    fprintf(stderr, "placesim: warning: %s; the %s -> %s link is timed by its copy alone\n",
                            hop_err->message, da->short_name, db->short_name);
                    g_clear_error(&hop_err);
                    hop = pair_hop = FALSE;
                }
                if (!hop && !transfer_samples(p, a, b, bufs[j], bufs[i], bytes, budget, &st, error))
                    goto out;
                if (hop) {
                    send_sum[i] += send_us;
                    handoff_sum[i] += handoff_us;
                    hop_n[i]++;
                }
                if (!psim_cost_db_link_put(p->db, da, db, bytes,
                                           hop ? "executor" : psim_profile_clock_name(p->opts.clock), &st, error))
                    goto out;
                report->link_rows++;
                g_autofree char *what = g_strdup_printf("%s -> %s, %" G_GUINT64_FORMAT " bytes",
                                                        da->short_name, db->short_name, bytes);
                psim__profiler_progress(p, "links", ++done, total, what);
            }
            if (!psim__profiler_fit_pair(p, a, b, report, error))
                goto out;
            double us[2 * PSIM_RECLAIM_N];
            if (pair_hop) {
                if (!psim__profiler_reclaim(p, a, b, us, us + PSIM_RECLAIM_N, error))
                    goto out;
                for (int k = 0; k < 2 * PSIM_RECLAIM_N; k++)
                    reclaim_sum[i * 2 * PSIM_RECLAIM_N + k] += us[k];
                reclaim_n[i]++;
            }
        }
    /* Each source's reclaim curves: the mean over its destinations. */
    for (int32_t i = 0; i < nc; i++)
        for (int k = 0; k < 2 * PSIM_RECLAIM_N && reclaim_n[i] > 0; k++) {
            const PsimDevice *da = psim_cluster_device(p->cluster, g_array_index(cpus, int32_t, i));
            gboolean copy = k >= PSIM_RECLAIM_N;
            g_autofree char *detail =
                g_strdup_printf("mean over %d destination(s) of a %" G_GUINT64_FORMAT
                                "-byte %s's median time (stores drained) after the destination's worker "
                                "read the block less after it read another",
                                reclaim_n[i], psim_reclaim_bytes[k % PSIM_RECLAIM_N],
                                copy ? "copy from a block the destination wrote" : "write");
            if (!psim_cost_db_calibration_put(p->db, da,
                                              (copy ? psim_reclaim_copy_kinds : psim_reclaim_kinds)[k % PSIM_RECLAIM_N],
                                              reclaim_sum[i * 2 * PSIM_RECLAIM_N + k] / reclaim_n[i], detail,
                                              error))
                goto out;
            report->calibrations++;
        }
    /* Each source's Send and hand-off: the mean over its destinations and sizes. */
    for (int32_t i = 0; i < nc; i++)
        for (int k = 0; k < 2 && hop_n[i] > 0; k++) {
            const PsimDevice *da = psim_cluster_device(p->cluster, g_array_index(cpus, int32_t, i));
            g_autofree char *detail = g_strdup_printf(
                "mean over %d executor hop(s) (destinations x sizes) of the median %s", hop_n[i],
                k ? "time from the Send's end to the start of the destination's copy"
                  : "time from the producer's end to its Send's end on this device");
            if (!psim_cost_db_calibration_put(p->db, da, k ? "handoff_us" : "send_us",
                                              (k ? handoff_sum[i] : send_sum[i]) / hop_n[i], detail, error))
                goto out;
            report->calibrations++;
        }
    /* Links of the other classes' devices (host <-> GPU, GPU <-> GPU), each class its own. */
    int32_t n_classes;
    const PsimDeviceClass *const *classes = psim_device_classes(&n_classes, NULL);
    for (int32_t k = 0; k < n_classes; k++)
        if (classes[k]->profile_links && !classes[k]->profile_links(p, report, error))
            goto out;
    ok = TRUE;
out:
    for (int32_t i = 0; i < nc; i++)
        psim__profiler_untouch(p, g_array_index(cpus, int32_t, i), bufs[i]);
    return ok;
}

