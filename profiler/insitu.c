/* In-situ profiling: the whole graph run for several steps on each kind of device by the real
 * executor, each op's time taken from the executor's own per-op clock (producers' outputs in
 * cache, weights as a step leaves them, real dispatch), and the executor's op-to-op gap, into the
 * cost DB as method 'insitu' rows and per-device calibrations (docs/validation.md). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "profiler/profiler-private.h"

/* The waits before each op of the idle calibration's two runs: the executor's pause spin, the
 * first part of every wait for a Recv (PSIM_EXEC_PAUSE_SPIN_US), and ten times as long. An op
 * after a wait runs slower the longer the wait, up to about 300 us (shufflenet_v2_x1_0 on the
 * Intel VM: 1.4 us more per op after 50 us, 7.4-8.5 after 300, 7.3-10.2 after 1500;
 * docs/validation.md), so one point charged long waits 5-8 us short on every op. */
static const double insitu_idle_us[2] = {PSIM_EXEC_PAUSE_SPIN_US, 10 * PSIM_EXEC_PAUSE_SPIN_US};
static const char *const insitu_idle_kinds[2][2] = {{"idle_extra_us", "idle_gap_us"},
                                                    {"idle_extra_long_us", "idle_gap_long_us"}};

void psim_insitu_options_init(PsimInsituOptions *o)
{
    *o = (PsimInsituOptions){.steps = 20, .warmup = 3, .busy = TRUE, .passes = 1};
}

/* The samples of one device's run, step by step: per node of the graph, its durations (NULL:
 * did not run); per step, the sum and count of the gaps between consecutive ops, and its time. */
typedef struct {
    PsimExecutor *e;
    PsimTensor *const *feeds;
    int32_t n_fetches;
    int32_t warmup, steps;
    double warmup_ms, record_ms;
    atomic_int *n_done;  /* busy runs: devices done recording (steps and record_ms); NULL when alone */
    int32_t n_devices;   /* busy runs: keep stepping until all n_devices are done */
    int32_t n_nodes;
    GArray **per_node;   /* double */
    GArray *gap_sum, *gap_n, *step_us; /* double, one per recorded step */
    GError *error;
} Run;

static void run_clear(Run *r)
{
    psim_executor_free(r->e);
    for (int32_t i = 0; r->per_node && i < r->n_nodes; i++)
        if (r->per_node[i])
            g_array_free(r->per_node[i], TRUE);
    g_free(r->per_node);
    if (r->gap_sum)
        g_array_free(r->gap_sum, TRUE);
    if (r->gap_n)
        g_array_free(r->gap_n, TRUE);
    if (r->step_us)
        g_array_free(r->step_us, TRUE);
    g_clear_error(&r->error);
    memset(r, 0, sizeof *r);
}

static void run_record(Run *r)
{
    PsimExecStats st;
    psim_executor_stats(r->e, &st);
    double gap_sum = 0, gap_n = 0;
    for (int32_t k = 0; k < st.n_run; k++) {
        int32_t v = st.nodes[k];
        if (v < 0 || v >= r->n_nodes)
            continue;
        if (!r->per_node[v])
            r->per_node[v] = g_array_new(FALSE, FALSE, sizeof(double));
        double us = st.end[k] - st.start[k];
        g_array_append_val(r->per_node[v], us);
        /* A single-device step has nothing to wait for: the next op was ready when this one
         * ended, and the time until it starts is the executor's own. */
        if (k + 1 < st.n_run) {
            gap_sum += MAX(0.0, st.start[k + 1] - st.end[k]);
            gap_n++;
        }
    }
    g_array_append_val(r->gap_sum, gap_sum);
    g_array_append_val(r->gap_n, gap_n);
    g_array_append_val(r->step_us, st.step_us);
}

/* On the device's worker: warm-up steps (at least `warmup` and `warmup_ms`), then recorded
 * ones (at least `steps` and `record_ms`; and, while other devices are still recording, more
 * unrecorded ones, so that they stay busy). */
static gboolean run_steps(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    Run *r = arg;
    g_autofree PsimTensor **outs = g_new0(PsimTensor *, r->n_fetches + 1);
    double warm_end = psim_exec_now_us() + r->warmup_ms * 1e3, record_end = -1;
    int32_t warm = 0, recorded = 0;
    gboolean done = FALSE;
    for (;;) {
        gboolean warming = warm < r->warmup || psim_exec_now_us() < warm_end;
        if (!warming && record_end < 0)
            record_end = psim_exec_now_us() + r->record_ms * 1e3;
        if (!warming && !done && recorded >= r->steps && psim_exec_now_us() >= record_end) {
            done = TRUE;
            if (r->n_done)
                atomic_fetch_add(r->n_done, 1);
        }
        if (done && (!r->n_done || atomic_load(r->n_done) >= r->n_devices))
            break;
        if (!psim_executor_run_here(r->e, r->feeds, outs, error)) {
            if (r->n_done) /* the other devices would step on, waiting for this one's count */
                atomic_store(r->n_done, r->n_devices);
            return FALSE;
        }
        for (int32_t k = 0; k < r->n_fetches; k++)
            g_clear_pointer(&outs[k], psim_tensor_unref);
        if (warming) {
            warm++;
        } else if (!done) {
            run_record(r);
            recorded++;
        }
    }
    return TRUE;
}

static gboolean run_prepare(PsimProfiler *p, Run *r, const PsimGraph *g, int32_t device, double spin_before_us,
                            const char *const *feed_names, PsimTensor *const *feeds, int32_t n_feeds,
                            const char *const *fetches, int32_t n_fetches, const PsimInsituOptions *o,
                            GError **error)
{
    r->n_nodes = psim_graph_n_nodes(g);
    r->per_node = g_new0(GArray *, r->n_nodes + 1);
    r->gap_sum = g_array_new(FALSE, FALSE, sizeof(double));
    r->gap_n = g_array_new(FALSE, FALSE, sizeof(double));
    r->step_us = g_array_new(FALSE, FALSE, sizeof(double));
    r->feeds = feeds;
    r->n_fetches = n_fetches;
    r->warmup = o->warmup;
    r->warmup_ms = o->warmup_ms;
    r->record_ms = o->record_ms;
    r->steps = o->steps;
    PsimExecOptions eo = {.spin_before_us = spin_before_us};
    r->e = psim_executor_new(g, p->workers[device], feeds ? feed_names : NULL, feeds ? n_feeds : 0,
                             fetches, n_fetches, spin_before_us > 0 ? &eo : NULL, error);
    return r->e != NULL;
}

/* The steps a trimmed mean of the step times keeps (psim_stats_trimmed_mean, PSIM_STATS_TRIM at
 * each end): 1 per kept step; NULL without steps. */
static uint8_t *kept_steps(const Run *r)
{
    int64_t n = r->step_us->len;
    if (n == 0)
        return NULL;
    g_autofree int64_t *ix = g_new(int64_t, n);
    for (int64_t i = 0; i < n; i++)
        ix[i] = i;
    const double *t = (const double *)r->step_us->data;
    /* Sort the indices by step time (insertion: tens to hundreds of steps). */
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && t[ix[j]] < t[ix[j - 1]]; j--) {
            int64_t x = ix[j];
            ix[j] = ix[j - 1];
            ix[j - 1] = x;
        }
    int64_t k = (int64_t)floor((double)n * PSIM_STATS_TRIM);
    if (n - 2 * k < 1)
        k = 0;
    uint8_t *keep = g_new0(uint8_t, n);
    for (int64_t i = k; i < n - k; i++)
        keep[ix[i]] = 1;
    return keep;
}

/* Per node that does measured work, its in-situ time: the mean over the steps that the step
 * times' trimmed mean keeps (NAN where it did not run). Trimmed: on a shared host some steps are
 * preempted for milliseconds, and a plain mean over them is the host's, not the op's. The same
 * steps for every node: `study` compares the rows' sum with the trimmed mean of measured steps,
 * and a trim of each node's samples on its own drops every node's own slow samples, which the
 * steps kept by their sum still hold (the sum of per-node trimmed means came out 2-4% under
 * the steps' trimmed mean on the built-in models). A mean, not a median: the host's caches switch
 * between a fast and a slow spell lasting seconds, and a sum of op medians and a median of steps
 * each jump to whichever spell holds the majority of their samples, not always the same one. A
 * node that did not run in every step gets the trimmed mean of its own samples. */
static double *node_times(const PsimGraph *g, const Run *r, const gboolean *constant)
{
    double *t = g_new(double, r->n_nodes + 1);
    g_autofree uint8_t *keep = kept_steps(r);
    for (int32_t v = 0; v < r->n_nodes; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        GArray *a = r->per_node[v];
        t[v] = NAN;
        if (!a || !a->len || !psim_profiler_node_measurable(g, n, constant))
            continue;
        if (keep && a->len == r->step_us->len) {
            double sum = 0;
            int64_t m = 0;
            for (guint i = 0; i < a->len; i++)
                if (keep[i]) {
                    sum += g_array_index(a, double, i);
                    m++;
                }
            t[v] = sum / (double)m;
        } else {
            g_autofree double *tmp = g_memdup2(a->data, sizeof(double) * a->len);
            t[v] = psim_stats_trimmed_mean(tmp, a->len, PSIM_STATS_TRIM);
        }
    }
    return t;
}

/* The mean over the kept steps (kept_steps) of each step's mean gap between two ops (NAN without
 * gaps). */
static double step_gap(const Run *r)
{
    g_autofree uint8_t *keep = kept_steps(r);
    double sum = 0;
    int64_t n = 0;
    for (guint s = 0; keep && s < r->gap_sum->len; s++)
        if (keep[s] && g_array_index(r->gap_n, double, s) > 0) {
            sum += g_array_index(r->gap_sum, double, s) / g_array_index(r->gap_n, double, s);
            n++;
        }
    return n ? sum / (double)n : NAN;
}

/* Each node's signature where med[] has a time (NULL elsewhere); free with sigs_free. */
static char **node_sigs(const PsimGraph *g, int32_t n, const double *med)
{
    char **sig_of = g_new0(char *, n + 1);
    for (int32_t v = 0; v < n; v++)
        if (!isnan(med[v]))
            sig_of[v] = psim_cost_signature(g, psim_graph_node(g, v));
    return sig_of;
}

static void sigs_free(char **sig_of, int32_t n)
{
    for (int32_t v = 0; sig_of && v < n; v++)
        g_free(sig_of[v]);
    g_free(sig_of);
}

/* Stores one row per signature on device d: the median of its nodes' times (node_times, each a
 * trimmed mean over the steps); n, mean, stddev and min over all their samples. A node whose
 * signature others share also gets a row of its own (its time; its samples). sig_of: node_sigs
 * of med. */
static gboolean store_rows(PsimProfiler *p, const PsimGraph *g, const Run *r, const double *med,
                           char *const *sig_of, const PsimDevice *d, PsimInsituReport *report, GError **error)
{
    g_autoptr(GHashTable) sigs = g_hash_table_new(g_str_hash, g_str_equal);
    g_autoptr(GPtrArray) order = g_ptr_array_new(); /* first node of each signature */
    for (int32_t v = 0; v < r->n_nodes; v++)
        if (sig_of[v] && g_hash_table_add(sigs, sig_of[v]))
            g_ptr_array_add(order, GINT_TO_POINTER(v));
    gboolean ok = TRUE;
    for (guint k = 0; ok && k < order->len; k++) {
        int32_t v0 = GPOINTER_TO_INT(g_ptr_array_index(order, k));
        g_autoptr(GArray) meds = g_array_new(FALSE, FALSE, sizeof(double));
        g_autoptr(GArray) all = g_array_new(FALSE, FALSE, sizeof(double));
        for (int32_t v = v0; v < r->n_nodes; v++) {
            if (!sig_of[v] || strcmp(sig_of[v], sig_of[v0]))
                continue;
            g_array_append_val(meds, med[v]);
            g_array_append_vals(all, r->per_node[v]->data, r->per_node[v]->len);
        }
        PsimTimingStats s;
        psim_timing_stats((double *)all->data, all->len, &s);
        s.median_us = psim_stats_median((double *)meds->data, meds->len);
        ok = psim_cost_db_kernel_put_insitu(p->db, d, sig_of[v0], psim_graph_node(g, v0)->op,
                                            psim_profile_clock_name(PSIM_PROFILE_CLOCK_MONOTONIC), &s, error);
        if (ok)
            report->rows++;
        /* Nodes sharing the signature: each its own row too (psim_cost_insitu_node_key). */
        for (int32_t v = v0; ok && meds->len > 1 && v < r->n_nodes; v++) {
            if (!sig_of[v] || strcmp(sig_of[v], sig_of[v0]))
                continue;
            const PsimNode *nv = psim_graph_node(g, v);
            g_autofree char *key = psim_cost_insitu_node_key(sig_of[v], nv);
            psim_timing_stats((double *)r->per_node[v]->data, r->per_node[v]->len, &s);
            s.median_us = med[v];
            ok = psim_cost_db_kernel_put_insitu(p->db, d, key, nv->op,
                                                psim_profile_clock_name(PSIM_PROFILE_CLOCK_MONOTONIC), &s, error);
            if (ok)
                report->node_rows++;
        }
    }
    return ok;
}

static double sum_finite(const double *v, int32_t n, const double *mask)
{
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(v[i]) && (!mask || !isnan(mask[i])))
            s += v[i];
    return s;
}

/* How many of v[0..n) are numbers where mask[] is one too. */
static int32_t count_finite(const double *v, int32_t n, const double *mask)
{
    int32_t c = 0;
    for (int32_t i = 0; i < n; i++)
        c += !isnan(v[i]) && !isnan(mask[i]);
    return c;
}

/* Runs r[0..n) on their workers at once (alone when n is 1) and waits for all. */
static gboolean run_all(PsimProfiler *p, Run *r, const int32_t *devices, int32_t n, GError **error)
{
    atomic_int n_done = 0;
    for (int32_t i = 0; i < n; i++) {
        r[i].n_done = n > 1 ? &n_done : NULL;
        r[i].n_devices = n;
        psim_worker_post(p->workers[devices[i]], run_steps, &r[i]);
    }
    gboolean ok = TRUE;
    for (int32_t i = 0; i < n; i++) {
        GError *err = NULL;
        if (!psim_worker_wait(p->workers[devices[i]], &err)) {
            if (ok)
                g_propagate_error(error, err);
            else
                g_error_free(err);
            ok = FALSE;
        }
    }
    return ok;
}

struct PsimInsituSession {
    PsimProfiler *p;
    const PsimGraph *g;
    PsimInsituOptions o;
    gboolean *constant;
    int32_t n_cpus;
    int32_t *cpus;     /* the CPU devices with a worker */
    int32_t n_gpus;
    int32_t *gpus;     /* the GPU devices with a worker: run alone only (no idle, no busy runs) */
    int32_t *first_of; /* per device: the device of identical hardware run alone for it */
    Run *alone;        /* per device d with first_of[d] == d */
    /* The busy run: every CPU device at once but those that share a core with one before them
     * (their threads would take turns on it, which the simulator models apart: docs/sim.md). */
    int32_t n_busy;
    int32_t *busy_dev;
    Run *busy;         /* per busy_dev[k]; NULL without */
    Run *idle[2];      /* per device d with first_of[d] == d: insitu_idle_us[k] of waiting before each op */
    int32_t passes;
    double t0;
};

void psim_insitu_session_free(PsimInsituSession *s)
{
    if (!s)
        return;
    for (int32_t d = 0; s->alone && d < s->p->n_devices; d++)
        run_clear(&s->alone[d]);
    for (int32_t k = 0; s->busy && k < s->n_busy; k++)
        run_clear(&s->busy[k]);
    for (int k = 0; k < 2; k++) {
        for (int32_t d = 0; s->idle[k] && d < s->p->n_devices; d++)
            run_clear(&s->idle[k][d]);
        g_free(s->idle[k]);
    }
    g_free(s->alone);
    g_free(s->busy);
    g_free(s->busy_dev);
    g_free(s->cpus);
    g_free(s->gpus);
    g_free(s->first_of);
    g_free(s->constant);
    g_free(s);
}

PsimInsituSession *psim_insitu_session_new(PsimProfiler *p, const PsimGraph *g, const char *const *feed_names,
                                           PsimTensor *const *feeds, int32_t n_feeds,
                                           const char *const *fetches, int32_t n_fetches,
                                           const PsimInsituOptions *opts, GError **error)
{
    g_return_val_if_fail(p->db, NULL);
    PsimInsituOptions o;
    if (opts)
        o = *opts;
    else
        psim_insitu_options_init(&o);
    if (o.steps < 1 || o.warmup < 0 || !(o.warmup_ms >= 0) || !(o.record_ms >= 0)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "in-situ profile: steps >= 1, warmup >= 0, warmup_ms >= 0 and record_ms >= 0 are required");
        return NULL;
    }
    g_autoptr(PsimInsituSession) s = g_new0(PsimInsituSession, 1);
    s->p = p;
    s->g = g;
    s->o = o;
    s->t0 = psim_exec_now_us();
    if (p->t0_us == 0) /* the progress of a session the CLI drives counts from its start (it said
                        * "elapsed 86m" for a 2 s profile: the time since boot) */
        p->t0_us = s->t0;
    s->constant = psim_cost_constant_nodes(g);
    /* One run per fingerprint on CPUs: devices of identical hardware share rows
     * (psim_cost_db_kernel_get). A GPU runs alone too: its ops' executor times are the host
     * thread's (launch, allocation, the waits of ops that synchronise), which is what a step on
     * it takes when the host issues more slowly than the GPU computes (every model of the H200
     * run, docs/validation.md), where its CUPTI kernel rows alone predicted 15% of the step. */
    s->cpus = g_new0(int32_t, p->n_devices + 1);
    s->gpus = g_new0(int32_t, p->n_devices + 1);
    s->first_of = g_new0(int32_t, p->n_devices + 1);
    s->alone = g_new0(Run, p->n_devices + 1);
    for (int k = 0; k < 2; k++)
        s->idle[k] = g_new0(Run, p->n_devices + 1);
    g_autoptr(GPtrArray) digests = g_ptr_array_new_with_free_func(g_free);
    for (int32_t d = 0; d < p->n_devices; d++) {
        const PsimDevice *dev = psim_cluster_device(p->cluster, d);
        s->first_of[d] = -1;
        if (!p->workers[d])
            continue;
        if (!dev->cls->host) { /* a device of its own (a GPU): profiled alone, never shared */
            s->gpus[s->n_gpus++] = d;
            s->first_of[d] = d;
            continue;
        }
        s->cpus[s->n_cpus++] = d;
        g_autoptr(PsimFingerprint) f = psim_fingerprint_new(dev);
        for (int32_t k = 0; k < s->n_cpus - 1 && s->first_of[d] < 0; k++)
            if (!strcmp(g_ptr_array_index(digests, k), f->digest))
                s->first_of[d] = s->first_of[s->cpus[k]];
        if (s->first_of[d] < 0)
            s->first_of[d] = d;
        g_ptr_array_add(digests, g_strdup(f->digest));
    }
    if (s->n_cpus + s->n_gpus == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                    "in-situ profile: the cluster has no device with a worker to run %s on",
                    psim_graph_name(g));
        return NULL;
    }
    /* Every CPU device runs alone (its own pace: on a VM one vCPU takes the interrupts, and a
     * one-device plan measured 6.7% slower there than on the other, docs/validation.md); the
     * runs after a wait, one per kind of hardware. */
    for (int32_t k = 0; k < s->n_cpus; k++) {
        int32_t d = s->cpus[k];
        if (!run_prepare(p, &s->alone[d], g, d, 0, feed_names, feeds, n_feeds, fetches, n_fetches, &o, error) ||
            (s->first_of[d] == d &&
             (!run_prepare(p, &s->idle[0][d], g, d, insitu_idle_us[0], feed_names, feeds, n_feeds, fetches,
                           n_fetches, &o, error) ||
              !run_prepare(p, &s->idle[1][d], g, d, insitu_idle_us[1], feed_names, feeds, n_feeds, fetches,
                           n_fetches, &o, error))))
            return NULL;
    }
    for (int32_t k = 0; k < s->n_gpus; k++)
        if (!run_prepare(p, &s->alone[s->gpus[k]], g, s->gpus[k], 0, feed_names, feeds, n_feeds, fetches,
                         n_fetches, &o, error))
            return NULL;
    /* Interference: every CPU device on a core of its own runs the graph at once. */
    s->busy_dev = g_new0(int32_t, s->n_cpus + 1);
    for (int32_t k = 0; k < s->n_cpus; k++) {
        gboolean shares = FALSE;
        for (int32_t j = 0; j < s->n_busy && !shares; j++)
            shares = psim_cluster_devices_share_cores(p->cluster, s->cpus[k], s->busy_dev[j]);
        if (!shares)
            s->busy_dev[s->n_busy++] = s->cpus[k];
    }
    if (o.busy && s->n_busy > 1) {
        s->busy = g_new0(Run, s->n_busy);
        for (int32_t k = 0; k < s->n_busy; k++)
            if (!run_prepare(p, &s->busy[k], g, s->busy_dev[k], 0, feed_names, feeds, n_feeds, fetches, n_fetches,
                             &o, error))
                return NULL;
    }
    return g_steal_pointer(&s);
}

gboolean psim_insitu_session_pass(PsimInsituSession *s, int32_t steps, GError **error)
{
    if (steps < 1)
        return TRUE;
    PsimProfiler *p = s->p;
    int32_t stages = s->n_cpus + s->n_gpus + (s->busy ? 1 : 0), stage = 0;
    for (int32_t k = 0; k < s->n_cpus; k++) {
        int32_t d = s->cpus[k];
        const PsimDevice *dev = psim_cluster_device(p->cluster, d);
        g_autofree char *item = g_strdup_printf("%s on %s", psim_graph_name(s->g), dev->short_name);
        psim__profiler_progress(p, "in-situ", stage++, stages, item);
        s->alone[d].steps = s->idle[0][d].steps = s->idle[1][d].steps = steps;
        if (!run_all(p, &s->alone[d], &d, 1, error) ||
            (s->first_of[d] == d &&
             (!run_all(p, &s->idle[0][d], &d, 1, error) || !run_all(p, &s->idle[1][d], &d, 1, error))))
            return FALSE;
    }
    for (int32_t k = 0; k < s->n_gpus; k++) {
        int32_t d = s->gpus[k];
        g_autofree char *item = g_strdup_printf("%s on %s", psim_graph_name(s->g),
                                                psim_cluster_device(p->cluster, d)->short_name);
        psim__profiler_progress(p, "in-situ", stage++, stages, item);
        s->alone[d].steps = steps;
        if (!run_all(p, &s->alone[d], &d, 1, error))
            return FALSE;
    }
    if (s->busy) {
        psim__profiler_progress(p, "in-situ", stage, stages, "every device at once");
        for (int32_t k = 0; k < s->n_busy; k++)
            s->busy[k].steps = steps;
        if (!run_all(p, s->busy, s->busy_dev, s->n_busy, error))
            return FALSE;
    }
    psim__profiler_progress(p, "in-situ", stages, stages, NULL);
    s->passes++;
    return TRUE;
}

/* Per signature (sig_of: node_sigs of alone), the median over its nodes of their times after a
 * wait (idle) less without (alone), no less than 0 nor than *floor's value for the signature
 * (the shorter wait's: an op is no faster after a longer wait), stored as the signature's 'idle'
 * row for gap_us on every device whose hardware ran as d; *floor gets this wait's values. */
static gboolean store_idle_rows(PsimInsituSession *s, int32_t d, const double *alone, const double *idle,
                                char *const *sig_of, int32_t n_nodes, double gap_us, GHashTable *floor,
                                PsimInsituReport *report, GError **error)
{
    g_autoptr(GHashTable) by_sig = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                                         (GDestroyNotify)g_array_unref);
    g_autoptr(GPtrArray) order = g_ptr_array_new(); /* first node of each signature */
    for (int32_t v = 0; v < n_nodes; v++) {
        if (!sig_of[v] || !isfinite(alone[v]) || !isfinite(idle[v]))
            continue;
        GArray *a = g_hash_table_lookup(by_sig, sig_of[v]);
        if (!a) {
            a = g_array_new(FALSE, FALSE, sizeof(double));
            g_hash_table_insert(by_sig, sig_of[v], a);
            g_ptr_array_add(order, GINT_TO_POINTER(v));
        }
        double x = idle[v] - alone[v];
        g_array_append_val(a, x);
    }
    for (guint k = 0; k < order->len; k++) {
        int32_t v0 = GPOINTER_TO_INT(g_ptr_array_index(order, k));
        GArray *a = g_hash_table_lookup(by_sig, sig_of[v0]);
        double x = MAX(psim_stats_median((double *)a->data, a->len), 0.0);
        double *lo = g_hash_table_lookup(floor, sig_of[v0]);
        if (lo)
            x = MAX(x, *lo);
        PsimTimingStats st = {.n = a->len, .mean_us = x, .min_us = x, .median_us = x};
        for (int32_t e = 0; e < s->p->n_devices; e++) {
            if (s->first_of[e] != d)
                continue;
            if (!psim_cost_db_idle_put(s->p->db, psim_cluster_device(s->p->cluster, e), sig_of[v0],
                                       psim_graph_node(s->g, v0)->op, gap_us, &st, error))
                return FALSE;
            report->idle_rows++;
        }
        g_hash_table_insert(floor, g_strdup(sig_of[v0]), g_memdup2(&x, sizeof x));
    }
    return TRUE;
}

/* Calibration `kind` of every device whose hardware ran as d (calibrations are per device;
 * identical CPUs share the one run, a GPU runs for itself), counted in report. */
static gboolean put_for_hardware(PsimInsituSession *s, int32_t d, const char *kind, double value,
                                 const char *detail, PsimInsituReport *report, GError **error)
{
    for (int32_t e = 0; e < s->p->n_devices; e++) {
        if (s->first_of[e] != d)
            continue;
        if (!psim_cost_db_calibration_put(s->p->db, psim_cluster_device(s->p->cluster, e), kind, value,
                                          detail, error))
            return FALSE;
        report->calibrations++;
    }
    return TRUE;
}

/* Device d's run alone: its op times into alone[d], their signatures into *sig_of (the caller
 * frees them), its rows and its dispatch gap (*gap; NAN without one), stored for d, or with
 * `hardware` for every device of its hardware. */
static gboolean store_alone(PsimInsituSession *s, int32_t d, gboolean hardware, double **alone, char ***sig_of,
                            double *gap, PsimInsituReport *report, GError **error)
{
    PsimProfiler *p = s->p;
    const PsimGraph *g = s->g;
    const PsimDevice *dev = psim_cluster_device(p->cluster, d);
    const Run *r = &s->alone[d];
    alone[d] = node_times(g, r, s->constant);
    *sig_of = node_sigs(g, r->n_nodes, alone[d]);
    if (!store_rows(p, g, r, alone[d], *sig_of, dev, report, error))
        return FALSE;
    *gap = step_gap(r);
    if (isnan(*gap))
        return TRUE;
    g_autofree char *detail = g_strdup_printf(
        "in-situ: trimmed mean over %u steps (%d passes) of %s of the step's mean gap between ops", r->step_us->len,
        s->passes, psim_graph_name(g));
    if (hardware)
        return put_for_hardware(s, d, "dispatch_us", *gap, detail, report, error);
    if (!psim_cost_db_calibration_put(p->db, dev, "dispatch_us", *gap, detail, error))
        return FALSE;
    report->calibrations++;
    return TRUE;
}

/* Stores the rows and calibrations of s's samples (psim_insitu_session_finish). */
static gboolean session_store(PsimInsituSession *s, PsimInsituReport *report, GError **error)
{
    PsimInsituReport dummy;
    if (!report)
        report = &dummy;
    *report = (PsimInsituReport){.busy_factor = 1};
    /* Without passes of the caller's, o.passes of them share o.steps (each at least one). */
    int32_t passes = s->passes == 0 ? MAX(s->o.passes, 1) : 0;
    for (int32_t k = 0; k < passes; k++)
        if (!psim_insitu_session_pass(s, MAX(s->o.steps * (k + 1) / passes - s->o.steps * k / passes, 1), error))
            return FALSE;
    report->passes = s->passes;
    PsimProfiler *p = s->p;
    const PsimGraph *g = s->g;
    g_autofree double **alone = g_new0(double *, p->n_devices + 1);
    gboolean ok = TRUE;
    /* Every run alone: a CPU per kind of hardware, each GPU. */
    for (int32_t d = 0; ok && d < p->n_devices; d++) {
        if (s->first_of[d] != d)
            continue;
        const Run *r = &s->alone[d];
        char **sig_of = NULL;
        double gap = NAN;
        ok = store_alone(s, d, TRUE, alone, &sig_of, &gap, report, error);
        /* The same ops after each wait of insitu_idle_us, less them straight on, per op (a
         * slower op after a wait is a few microseconds whatever its size; no less than 0, and
         * no less after the long wait than after the short one). CPUs only: a GPU has no idle
         * run. */
        double extra_short = 0;
        g_autoptr(GHashTable) floor = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        for (int k = 0; k < 2 && ok; k++) {
            g_autofree double *idle =
                s->idle[k][d].per_node ? node_times(g, &s->idle[k][d], s->constant) : NULL;
            double a = idle ? sum_finite(alone[d], r->n_nodes, idle) : 0;
            double b = idle ? sum_finite(idle, r->n_nodes, alone[d]) : 0;
            int32_t n_both = idle ? count_finite(alone[d], r->n_nodes, idle) : 0;
            if (!(a > 0 && b > 0 && n_both > 0))
                break;
            if (!store_idle_rows(s, d, alone[d], idle, sig_of, r->n_nodes, insitu_idle_us[k], floor, report,
                                 error)) {
                ok = FALSE;
                break;
            }
            double extra = MAX(k ? extra_short : 0.0, (b - a) / n_both);
            g_autofree char *detail = g_strdup_printf(
                "in-situ: mean per op (%d ops) of %s's op times with the executor waiting %.0f us before "
                "each, less without (%.1f us: %.1f over %.1f us)",
                n_both, psim_graph_name(g), insitu_idle_us[k], extra, b, a);
            ok = put_for_hardware(s, d, insitu_idle_kinds[k][0], extra, detail, report, error) &&
                 put_for_hardware(s, d, insitu_idle_kinds[k][1], insitu_idle_us[k], detail, report, error);
            if (report->n_runs == 0 && k == 0)
                report->idle_extra_us = extra;
            if (report->n_runs == 0 && k == 1)
                report->idle_extra_long_us = extra;
            extra_short = extra;
        }
        sigs_free(sig_of, r->n_nodes);
        if (report->n_runs == 0) {
            report->dispatch_us = isnan(gap) ? 0 : gap;
            g_autofree double *steps = g_memdup2(r->step_us->data, sizeof(double) * r->step_us->len);
            report->step_us = psim_stats_trimmed_mean(steps, r->step_us->len, PSIM_STATS_TRIM);
            for (int32_t v = 0; v < r->n_nodes; v++)
                report->n_nodes += !isnan(alone[d][v]);
            /* As the cost model charges it: every op its row plus one dispatch gap (a step has
             * one fewer gap between ops, and about as long again from its start to the first). */
            report->ops_us = sum_finite(alone[d], r->n_nodes, NULL) + report->dispatch_us * report->n_nodes;
        }
        report->n_runs++;
    }
    /* The other devices of each kind of hardware: their own rows and dispatch gap from their own
     * runs alone (the DB reads a device's own row before one of identical hardware); the waits'
     * rows and figures stay their hardware's. */
    for (int32_t k = 0; ok && k < s->n_cpus; k++) {
        int32_t d = s->cpus[k];
        if (s->first_of[d] == d)
            continue;
        char **sig_of = NULL;
        double gap;
        ok = store_alone(s, d, FALSE, alone, &sig_of, &gap, report, error);
        sigs_free(sig_of, s->alone[d].n_nodes);
        report->n_runs++;
    }
    /* Each device's ops with every device busy against its run alone (the same graph, so the
     * same nodes). */
    for (int32_t k = 0; ok && s->busy && k < s->n_busy; k++) {
        int32_t d = s->busy_dev[k];
        g_autofree double *busy = node_times(g, &s->busy[k], s->constant);
        double *ref = alone[d] ? alone[d] : alone[s->first_of[d]];
        double a = sum_finite(ref, s->busy[k].n_nodes, busy), b = sum_finite(busy, s->busy[k].n_nodes, ref);
        if (!(a > 0 && b > 0))
            continue;
        const PsimDevice *dev = psim_cluster_device(p->cluster, d);
        g_autofree char *detail = g_strdup_printf(
            "in-situ: sum of op times with %d devices running %s at once over the sum alone", s->n_busy,
            psim_graph_name(g));
        ok = psim_cost_db_calibration_put(p->db, dev, "busy_factor", b / a, detail, error) &&
             psim_cost_db_calibration_put(p->db, dev, "busy_devices", s->n_busy, detail, error);
        report->calibrations += ok ? 2 : 0;
        if (k == 0)
            report->busy_factor = b / a;
    }
    for (int32_t d = 0; d < p->n_devices; d++)
        g_free(alone[d]);
    report->elapsed_ms = (psim_exec_now_us() - s->t0) / 1e3;
    return ok;
}

gboolean psim_insitu_session_finish(PsimInsituSession *s, PsimInsituReport *report, GError **error)
{
    gboolean ok = session_store(s, report, error);
    psim_insitu_session_free(s);
    return ok;
}

gboolean psim_profiler_insitu(PsimProfiler *p, const PsimGraph *g, const char *const *feed_names,
                              PsimTensor *const *feeds, int32_t n_feeds, const char *const *fetches,
                              int32_t n_fetches, const PsimInsituOptions *opts, PsimInsituReport *report,
                              GError **error)
{
    p->t0_us = psim_exec_now_us(); /* progress counts from here */
    PsimInsituSession *s =
        psim_insitu_session_new(p, g, feed_names, feeds, n_feeds, fetches, n_fetches, opts, error);
    return s && psim_insitu_session_finish(s, report, error);
}
