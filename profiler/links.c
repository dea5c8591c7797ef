/* Transfers between devices at sizes from link_min_bytes to link_max_bytes (x4 steps), timed
 * per ordered pair, and the fitted latency + bytes/bandwidth model. CPU to CPU up to
 * PSIM_PROFILE_HOP_MAX_BYTES (64 MiB): the whole hop through the executor (hop.c; rows with source
 * 'executor'), its copy into a block the destination's pool just gave back (the simulator adds
 * the cold-block curve where a step's block is colder). Larger: timed as the executor makes the copy (exec/transport.c): the source device has just written the tensor
 * (its lines dirty in the source core's caches), and the destination's thread copies it into a
 * buffer of its own that is not in the caches (a pooled block last used long before). Each sample is one copy: the source's thread rewrites the buffer, then the
 * destination's thread times the memcpy. Copying the same clean source over and over instead
 * would read it from the destination's own cache after the first time and measure a link
 * several times faster than the executor's. GPU pairs: cuda/. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "profiler/profiler-private.h"

/* Per pass and pair: psim__profiler_reclaim's op and copy curves, then the op curve after the
 * destination wrote more. */
#define RECLAIM_VALUES (2 * PSIM_RECLAIM_N + PSIM_RECLAIM_N * PSIM_RECLAIM_AFTER_N)

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
 * one copy of it into dst; for as long as sm wants samples. */
static gboolean transfer_samples(PsimProfiler *p, int32_t a, int32_t b, void *dst, void *src, size_t bytes,
                                 PsimSampler *sm, GError **error)
{
    /* The destination's block is evicted too: in a step it is a pooled block last used long
     * before, as a kernel's output is (profiler.c). */
    DirtyJob dj = {.buf = src, .bytes = bytes, .cold = dst};
    TimedCopyJob cj = {.opts = &p->opts, .dst = dst, .src = src, .bytes = bytes};
    /* One unrecorded round: the destination's pages are mapped and its buffer warm, as a
     * worker's pooled block is after the first step. */
    for (int warm = 1;; warm = 0) {
        dj.value = (dj.value + 1) & 0x7f;
        if (!psim_worker_call(p->workers[a], dirty_job, &dj, error) ||
            !psim_worker_call(p->workers[b], timed_copy_job, &cj, error))
            return FALSE;
        if (!warm && !psim__sampler_add(sm, cj.us))
            break;
    }
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

/* The CPU devices' transfers profiled in passes (psim_link_session_new). Per ordered pair of CPU
 * devices (pair = i * nc + j over the session's CPU devices) and size index k (x4 from
 * link_min_bytes): the pooled samples, the time spent on them, and for hops the Send's and the
 * hand-off's samples. */
struct PsimLinkSession {
    PsimProfiler *p;
    int32_t nc, ns;      /* CPU devices, sizes */
    int32_t planned;     /* passes the budget is spread over */
    int32_t passes;      /* passes run */
    gboolean cold;       /* each pass also samples each device's cold-block curve */
    double budget_us;    /* per (pair, size), over all the passes */
    int32_t *cpus;       /* device index of each CPU device */
    void **bufs;         /* per CPU device: the largest size, first touched by its worker */
    gboolean *hop;       /* per pair: FALSE once its plan could not run (copies only) */
    GArray **samples;    /* per (pair, size): double, us */
    GArray **sends;      /* per (pair, size): the Send's time, us (hops) */
    GArray **handoffs;   /* per (pair, size): the hand-off, us (hops) */
    double *spent_us;    /* per (pair, size) */
    GArray **reclaim;    /* per pair: RECLAIM_VALUES per pass (op, copy, then the op curve after more) */
    PsimColdSamples *cold_samples; /* per CPU device */
    void **cold_bufs;              /* per CPU device with `cold`: psim__profiler_cold's buffer */
};

static uint64_t size_bytes(const PsimLinkSession *s, int32_t k)
{
    return s->p->opts.link_min_bytes << (2 * k);
}

void psim_link_session_free(PsimLinkSession *s)
{
    if (!s)
        return;
    for (int32_t i = 0; s->bufs && i < s->nc; i++)
        psim__profiler_untouch(s->p, s->cpus[i], s->bufs[i]);
    int32_t n = s->nc * s->nc * s->ns;
    for (int32_t x = 0; x < n; x++) {
        if (s->samples && s->samples[x])
            g_array_free(s->samples[x], TRUE);
        if (s->sends && s->sends[x])
            g_array_free(s->sends[x], TRUE);
        if (s->handoffs && s->handoffs[x])
            g_array_free(s->handoffs[x], TRUE);
    }
    for (int32_t x = 0; s->reclaim && x < s->nc * s->nc; x++)
        if (s->reclaim[x])
            g_array_free(s->reclaim[x], TRUE);
    for (int32_t i = 0; s->cold_samples && i < s->nc; i++)
        psim__cold_samples_clear(&s->cold_samples[i]);
    for (int32_t i = 0; s->cold_bufs && i < s->nc; i++)
        psim__profiler_untouch(s->p, s->cpus[i], s->cold_bufs[i]);
    g_free(s->cold_bufs);
    g_free(s->cold_samples);
    g_free(s->reclaim);
    g_free(s->spent_us);
    g_free(s->handoffs);
    g_free(s->sends);
    g_free(s->samples);
    g_free(s->hop);
    g_free(s->bufs);
    g_free(s->cpus);
    g_free(s);
}

PsimLinkSession *psim_link_session_new(PsimProfiler *p, int32_t passes, gboolean cold, uint64_t max_bytes,
                                       GError **error)
{
    g_return_val_if_fail(p->db, NULL);
    if (p->t0_us == 0)
        p->t0_us = psim_exec_now_us();
    PsimLinkSession *s = g_new0(PsimLinkSession, 1);
    s->p = p;
    s->planned = MAX(passes, 1);
    s->cold = cold;
    /* Per size, the budget is a share of the kernel budget: many sizes, many pairs. */
    s->budget_us = MIN(p->opts.budget_ms, 300) * 1e3;
    s->cpus = g_new0(int32_t, p->n_devices + 1);
    for (int32_t i = 0; i < p->n_devices; i++)
        if (p->workers[i] && psim_cluster_device(p->cluster, i)->cls->host)
            s->cpus[s->nc++] = i;
    if (s->nc < 2) { /* no link between CPU devices to time */
        psim_link_session_free(s);
        return NULL;
    }
    /* The sizes up to the first at least max_bytes (0: all). */
    s->ns = 0;
    for (uint64_t b = p->opts.link_min_bytes; b <= p->opts.link_max_bytes; b *= 4) {
        s->ns++;
        if (max_bytes > 0 && b >= max_bytes)
            break;
    }
    int32_t n = s->nc * s->nc * s->ns;
    s->hop = g_new(gboolean, s->nc * s->nc + 1);
    for (int32_t x = 0; x < s->nc * s->nc; x++)
        s->hop[x] = TRUE;
    s->samples = g_new0(GArray *, n + 1);
    s->sends = g_new0(GArray *, n + 1);
    s->handoffs = g_new0(GArray *, n + 1);
    s->spent_us = g_new0(double, n + 1);
    for (int32_t x = 0; x < n; x++) {
        s->samples[x] = g_array_new(FALSE, FALSE, sizeof(double));
        s->sends[x] = g_array_new(FALSE, FALSE, sizeof(double));
        s->handoffs[x] = g_array_new(FALSE, FALSE, sizeof(double));
    }
    s->reclaim = g_new0(GArray *, s->nc * s->nc + 1);
    for (int32_t x = 0; x < s->nc * s->nc; x++)
        s->reclaim[x] = g_array_new(FALSE, FALSE, sizeof(double));
    s->cold_samples = g_new0(PsimColdSamples, s->nc + 1);
    for (int32_t i = 0; i < s->nc; i++)
        psim__cold_samples_init(&s->cold_samples[i]);
    s->cold_bufs = g_new0(void *, s->nc + 1);
    for (int32_t i = 0; cold && i < s->nc; i++)
        if (!(s->cold_bufs[i] = psim__profiler_touch(p, s->cpus[i], psim__cold_buffer_bytes(), error))) {
            psim_link_session_free(s);
            return NULL;
        }
    s->bufs = g_new0(void *, s->nc + 1);
    for (int32_t i = 0; i < s->nc; i++)
        if (!(s->bufs[i] = psim__profiler_touch(p, s->cpus[i], (size_t)size_bytes(s, s->ns - 1), error))) {
            psim_link_session_free(s);
            return NULL;
        }
    return s;
}

/* The pair's samples so far dropped: its hops could not run, and it is timed by copies. */
static void pair_restart(PsimLinkSession *s, int32_t pair)
{
    for (int32_t k = 0; k < s->ns; k++) {
        int32_t x = pair * s->ns + k;
        g_array_set_size(s->samples[x], 0);
        g_array_set_size(s->sends[x], 0);
        g_array_set_size(s->handoffs[x], 0);
        s->spent_us[x] = 0;
    }
    g_array_set_size(s->reclaim[pair], 0);
}

gboolean psim_link_session_pass(PsimLinkSession *s, GError **error)
{
    PsimProfiler *p = s->p;
    int32_t total = s->nc * (s->nc - 1) * s->ns, done = 0;
    for (int32_t i = 0; i < s->nc; i++)
        for (int32_t j = 0; j < s->nc; j++) {
            if (i == j)
                continue;
            int32_t a = s->cpus[i], b = s->cpus[j], pair = i * s->nc + j;
            const PsimDevice *da = psim_cluster_device(p->cluster, a), *db = psim_cluster_device(p->cluster, b);
            for (int32_t k = 0; k < s->ns; k++) {
                int32_t x = pair * s->ns + k;
                uint64_t bytes = size_bytes(s, k);
                g_autofree char *what = g_strdup_printf("%s -> %s, %" G_GUINT64_FORMAT " bytes", da->short_name,
                                                        db->short_name, bytes);
                psim__profiler_progress(p, "links", done++, total, what);
                /* A size whose budget is spent (a large copy takes it in a pass or two) rests. */
                if (s->spent_us[x] >= s->budget_us && s->samples[x]->len >= 3)
                    continue;
                PsimSampler sm;
                psim__sampler_init(&sm, &p->opts, s->budget_us / 1e3 / s->planned);
                double t0 = psim_exec_now_us();
                gboolean hop = s->hop[pair] && bytes <= PSIM_PROFILE_HOP_MAX_BYTES, ok = TRUE;
                GError *hop_err = NULL;
                if (hop && !psim__profiler_hop(p, a, b, bytes, &sm, s->sends[x], s->handoffs[x], &hop_err)) {
                    /* A cluster the executor cannot run this pair's plan on still gets the copy. */
                    fprintf(stderr, "placesim: warning: %s; the %s -> %s link is timed by its copy alone\n",
                            hop_err->message, da->short_name, db->short_name);
                    g_clear_error(&hop_err);
                    s->hop[pair] = FALSE;
                    pair_restart(s, pair);
                    g_array_free(sm.samples, TRUE);
                    k = -1; /* the pair again from its first size, by copies */
                    continue;
                }
                if (!hop)
                    ok = transfer_samples(p, a, b, s->bufs[j], s->bufs[i], bytes, &sm, error);
                g_array_append_vals(s->samples[x], sm.samples->data, sm.samples->len);
                g_array_free(sm.samples, TRUE);
                s->spent_us[x] += psim_exec_now_us() - t0;
                if (!ok)
                    return FALSE;
            }
            double us[RECLAIM_VALUES];
            if (s->hop[pair]) {
                /* Its sizes up to the largest transfer timed. */
                if (!psim__profiler_reclaim(p, a, b, size_bytes(s, s->ns - 1), us, us + PSIM_RECLAIM_N,
                                            us + 2 * PSIM_RECLAIM_N, error))
                    return FALSE;
                g_array_append_vals(s->reclaim[pair], us, RECLAIM_VALUES);
            }
        }
    for (int32_t i = 0; s->cold && i < s->nc; i++)
        if (!psim__profiler_cold(p, s->cpus[i], s->cold_bufs[i], 1, 3, &s->cold_samples[i], error))
            return FALSE;
    psim__profiler_progress(p, "links", total, total, NULL);
    s->passes++;
    return TRUE;
}

/* The trimmed mean (PSIM_STATS_TRIM at each end) of the per-pass values v[pass * stride + k]
 * that were measured (not NAN); NAN without any. A mean, as a study's measured step is: the host
 * switches for minutes at a time between its vCPUs sharing a last-level cache and not, and a
 * median over the passes followed the more frequent state where the steps pay for both. */
static double pass_mean(const GArray *v, int32_t stride, int32_t k)
{
    int32_t n = (int32_t)(v->len / (guint)stride), m = 0;
    g_autofree double *x = g_new(double, n + 1);
    for (int32_t r = 0; r < n; r++) {
        double y = g_array_index(v, double, r * stride + k);
        if (isfinite(y))
            x[m++] = y;
    }
    return m > 0 ? psim_stats_trimmed_mean(x, m, PSIM_STATS_TRIM) : NAN;
}

gboolean psim_link_session_finish(PsimLinkSession *s, PsimProfileReport *report, GError **error)
{
    PsimProfileReport dummy = {0};
    if (!report)
        report = &dummy;
    PsimProfiler *p = s->p;
    gboolean ok = s->passes > 0 || psim_link_session_pass(s, error);
    for (int32_t i = 0; ok && i < s->nc; i++) {
        const PsimDevice *da = psim_cluster_device(p->cluster, s->cpus[i]);
        /* Per source: the sums over its destinations' hops of the Send's and the hand-off's
         * medians, and over its destinations of the reclaim curves' means over the passes (per
         * point: the destinations that measured it). */
        double send_sum = 0, handoff_sum = 0, reclaim_sum[RECLAIM_VALUES] = {0};
        int32_t hop_n = 0, reclaim_n[RECLAIM_VALUES] = {0};
        /* And per hop size (psim_hop_bytes): the sums over its destinations. */
        double size_send[PSIM_HOP_N] = {0}, size_handoff[PSIM_HOP_N] = {0};
        int32_t size_n[PSIM_HOP_N] = {0};
        for (int32_t j = 0; ok && j < s->nc; j++) {
            if (i == j)
                continue;
            int32_t pair = i * s->nc + j;
            const PsimDevice *db = psim_cluster_device(p->cluster, s->cpus[j]);
            for (int32_t k = 0; ok && k < s->ns; k++) {
                int32_t x = pair * s->ns + k;
                uint64_t bytes = size_bytes(s, k);
                gboolean hop = s->hop[pair] && bytes <= PSIM_PROFILE_HOP_MAX_BYTES;
                PsimTimingStats st;
                psim_timing_stats((double *)s->samples[x]->data, s->samples[x]->len, &st);
                ok = psim_cost_db_link_put(p->db, da, db, bytes,
                                           hop ? "executor" : psim_profile_clock_name(p->opts.clock), &st, error);
                report->link_rows += ok;
                if (hop && s->sends[x]->len > 0) {
                    double send = MAX(psim_stats_median((double *)s->sends[x]->data, s->sends[x]->len), 0.0);
                    double handoff =
                        MAX(psim_stats_median((double *)s->handoffs[x]->data, s->handoffs[x]->len), 0.0);
                    send_sum += send;
                    handoff_sum += handoff;
                    hop_n++;
                    for (int32_t h = 0; h < PSIM_HOP_N; h++)
                        if (psim_hop_bytes[h] == bytes) {
                            size_send[h] += send;
                            size_handoff[h] += handoff;
                            size_n[h]++;
                        }
                }
            }
            ok = ok && psim__profiler_fit_pair(p, s->cpus[i], s->cpus[j], report, error);
            for (int32_t k = 0; s->reclaim[pair]->len > 0 && k < RECLAIM_VALUES; k++) {
                double v = pass_mean(s->reclaim[pair], RECLAIM_VALUES, k);
                if (isfinite(v)) {
                    reclaim_sum[k] += v;
                    reclaim_n[k]++;
                }
            }
        }
        /* Each source's reclaim curves, and the op curve after the destination wrote more: the
         * mean over its destinations. */
        for (int32_t k = 0; ok && k < RECLAIM_VALUES; k++) {
            if (reclaim_n[k] == 0)
                continue;
            g_autofree char *detail = NULL;
            const char *kind;
            if (k < 2 * PSIM_RECLAIM_N) {
                gboolean copy = k >= PSIM_RECLAIM_N;
                detail = g_strdup_printf("mean over %d destination(s) of the trimmed mean over %d pass(es) of a %" G_GUINT64_FORMAT
                                         "-byte %s's median time (stores drained) after the destination's worker "
                                         "read the block less after it read another",
                                         reclaim_n[k], s->passes, psim_reclaim_bytes[k % PSIM_RECLAIM_N],
                                         copy ? "copy from a block the destination wrote" : "write");
                kind = (copy ? psim_reclaim_copy_kinds : psim_reclaim_kinds)[k % PSIM_RECLAIM_N];
            } else {
                int32_t size = (k - 2 * PSIM_RECLAIM_N) / PSIM_RECLAIM_AFTER_N,
                        j = (k - 2 * PSIM_RECLAIM_N) % PSIM_RECLAIM_AFTER_N;
                detail = g_strdup_printf("mean over %d destination(s) of the trimmed mean over %d pass(es) of a %" G_GUINT64_FORMAT
                                         "-byte write's median time (stores drained) after the destination's worker "
                                         "read the block and then copied %" G_GUINT64_FORMAT " bytes of its own, less "
                                         "after it read another and copied as much",
                                         reclaim_n[k], s->passes, psim_reclaim_bytes[size], psim_reclaim_after_bytes[j]);
                kind = psim_reclaim_after_kind(size, j);
            }
            ok = psim__profiler_calibration_put(p, da, kind, reclaim_sum[k] / reclaim_n[k], detail, report, error);
        }
        /* Each source's Send and hand-off: the mean over its destinations and sizes. */
        for (int32_t k = 0; ok && hop_n > 0 && k < 2; k++) {
            g_autofree char *detail = g_strdup_printf(
                "mean over %d executor hop(s) (destinations x sizes) of the median %s over %d pass(es)", hop_n,
                k ? "time from the Send's end to the start of the destination's copy"
                  : "time from the producer's end to its Send's end on this device",
                s->passes);
            ok = psim__profiler_calibration_put(p, da, k ? "handoff_us" : "send_us",
                                                (k ? handoff_sum : send_sum) / hop_n, detail, report, error);
        }
        /* And at each hop size: the mean over its destinations (the cost model's curves). */
        for (int32_t h = 0; ok && h < PSIM_HOP_N; h++) {
            if (size_n[h] == 0)
                continue;
            for (int32_t k = 0; ok && k < 2; k++) {
                g_autofree char *detail = g_strdup_printf(
                    "mean over %d destination(s) of the median %s of a %" G_GUINT64_FORMAT "-byte executor hop over %d pass(es)",
                    size_n[h],
                    k ? "time from the Send's end to the start of the destination's copy"
                      : "time from the producer's end to its Send's end on this device",
                    psim_hop_bytes[h], s->passes);
                ok = psim__profiler_calibration_put(p, da, (k ? psim_hop_handoff_kinds : psim_hop_send_kinds)[h],
                                                    (k ? size_handoff[h] : size_send[h]) / size_n[h], detail, report,
                                                    error);
            }
        }
        /* Its cold-block curve, where the passes sampled it (psim_profiler_calibrate's otherwise). */
        if (ok && s->cold && s->cold_samples[i].hot->len > 0) {
            double cold[PSIM_COLD_N];
            psim__cold_curve(&s->cold_samples[i], cold);
            for (int32_t k = 0; ok && k < PSIM_COLD_N; k++) {
                g_autofree char *cd = g_strdup_printf(
                    "a 1 MiB copy into a block after %" G_GUINT64_FORMAT " MiB of other writes less into one "
                    "just written, median of %u less of %u over %d pass(es), per MiB",
                    psim_cold_distance_bytes[k] >> 20, s->cold_samples[i].cold[k]->len,
                    s->cold_samples[i].hot->len, s->passes);
                ok = psim__profiler_calibration_put(p, da, psim_cold_kinds[k], cold[k], cd, report, error);
            }
        }
    }
    psim_link_session_free(s);
    return ok;
}

/* At most this many passes for psim_profiler_links (fewer with fewer --rounds): a shared host's
 * spells last seconds, and a pair's sizes timed one after the other in one stretch each could
 * all fall in one of them (a study's links came out twice as fast one way as the other, and the
 * source's reclaim zero: docs/validation.md). */
#define LINK_PASSES 10

gboolean psim_profiler_links(PsimProfiler *p, PsimProfileReport *report, GError **error)
{
    PsimProfileReport dummy = {0};
    if (!report)
        report = &dummy;
    int32_t passes = MIN(p->opts.rounds, LINK_PASSES);
    GError *err = NULL;
    PsimLinkSession *s = psim_link_session_new(p, passes, FALSE, 0, &err);
    if (err) {
        g_propagate_error(error, err);
        return FALSE;
    }
    if (s) { /* NULL without an error: fewer than two CPU devices, no link between them */
        for (int32_t r = 0; r < passes; r++)
            if (!psim_link_session_pass(s, error)) {
                psim_link_session_free(s);
                return FALSE;
            }
        if (!psim_link_session_finish(s, report, error))
            return FALSE;
    }
    /* Links of the other classes' devices (host <-> GPU, GPU <-> GPU), each class its own. */
    int32_t n_classes;
    const PsimDeviceClass *const *classes = psim_device_classes(&n_classes, NULL);
    for (int32_t k = 0; k < n_classes; k++)
        if (classes[k]->profile_links && !classes[k]->profile_links(p, report, error))
            return FALSE;
    return TRUE;
}
