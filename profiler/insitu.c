/* In-situ profiling: the whole graph run for several steps on each kind of device by the real
 * executor, each op's time taken from the executor's own per-op clock (producers' outputs in
 * cache, weights as a step leaves them, real dispatch), and the executor's op-to-op gap, into the
 * cost DB as method 'insitu' rows and per-device calibrations (docs/validation.md). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "profiler/profiler-private.h"

void psim_insitu_options_init(PsimInsituOptions *o)
{
    *o = (PsimInsituOptions){.steps = 20, .warmup = 3, .busy = TRUE};
}

/* The samples of one device's run, step by step: per node of the graph, its durations (NULL:
 * did not run); per step, the sum and count of the gaps between consecutive ops, and its time. */
typedef struct {
    PsimExecutor *e;
    PsimTensor *const *feeds;
    int32_t n_fetches;
    int32_t warmup, steps;
    atomic_int *n_done;  /* busy runs: devices that have their `steps`; NULL when alone */
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

/* On the device's worker: warm-up steps, then `steps` recorded ones (and, while other devices
 * are still recording, more unrecorded ones, so that they stay busy). */
static gboolean run_steps(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    Run *r = arg;
    g_autofree PsimTensor **outs = g_new0(PsimTensor *, r->n_fetches + 1);
    for (int32_t s = 0;; s++) {
        if (s >= r->warmup + r->steps && (!r->n_done || atomic_load(r->n_done) >= r->n_devices))
            break;
        if (!psim_executor_run_here(r->e, r->feeds, outs, error)) {
            if (r->n_done) /* the other devices would step on, waiting for this one's count */
                atomic_store(r->n_done, r->n_devices);
            return FALSE;
        }
        for (int32_t k = 0; k < r->n_fetches; k++)
            g_clear_pointer(&outs[k], psim_tensor_unref);
        if (s >= r->warmup && s < r->warmup + r->steps)
            run_record(r);
        if (r->n_done && s == r->warmup + r->steps - 1)
            atomic_fetch_add(r->n_done, 1);
    }
    return TRUE;
}

static gboolean run_prepare(PsimProfiler *p, Run *r, const PsimGraph *g, int32_t device,
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
    r->steps = o->steps;
    r->e = psim_executor_new(g, p->workers[device], feeds ? feed_names : NULL, feeds ? n_feeds : 0,
                             fetches, n_fetches, NULL, error);
    return r->e != NULL;
}

/* Per node that does measured work, its in-situ time: the median over the steps (NAN where it
 * did not run). Medians, not means: on a shared host a third of the steps can be preempted for
 * milliseconds (docs/validation.md), and a mean over them is the host's, not the op's. */
static double *node_times(const PsimGraph *g, const Run *r, const gboolean *constant)
{
    double *t = g_new(double, r->n_nodes + 1);
    for (int32_t v = 0; v < r->n_nodes; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        GArray *a = r->per_node[v];
        t[v] = NAN;
        if (a && a->len && psim_profiler_node_measurable(g, n, constant)) {
            g_autofree double *tmp = g_memdup2(a->data, sizeof(double) * a->len);
            t[v] = psim_stats_median(tmp, a->len);
        }
    }
    return t;
}

/* The median over the steps of each step's mean gap between two ops (NAN without gaps). */
static double median_gap(const Run *r)
{
    g_autofree double *per_step = g_new(double, r->gap_sum->len + 1);
    int64_t n = 0;
    for (guint s = 0; s < r->gap_sum->len; s++)
        if (g_array_index(r->gap_n, double, s) > 0)
            per_step[n++] = g_array_index(r->gap_sum, double, s) / g_array_index(r->gap_n, double, s);
    return psim_stats_median(per_step, n);
}

/* Stores one row per signature on device d: the median of its nodes' times (node_times); n,
 * mean, stddev and min over all their samples. */
static gboolean store_rows(PsimProfiler *p, const PsimGraph *g, const Run *r, const double *med,
                           const PsimDevice *d, PsimInsituReport *report, GError **error)
{
    g_autoptr(GHashTable) sigs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GPtrArray) order = g_ptr_array_new(); /* first node of each signature */
    g_autofree char **sig_of = g_new0(char *, r->n_nodes + 1);
    for (int32_t v = 0; v < r->n_nodes; v++) {
        if (isnan(med[v]))
            continue;
        char *sig = psim_cost_signature(g, psim_graph_node(g, v));
        if (g_hash_table_contains(sigs, sig)) {
            sig_of[v] = sig;
        } else {
            g_hash_table_insert(sigs, sig, GINT_TO_POINTER(v + 1));
            g_ptr_array_add(order, GINT_TO_POINTER(v));
            sig_of[v] = g_strdup(sig);
        }
    }
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
    }
    for (int32_t v = 0; v < r->n_nodes; v++)
        g_free(sig_of[v]);
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

gboolean psim_profiler_insitu(PsimProfiler *p, const PsimGraph *g, const char *const *feed_names,
                              PsimTensor *const *feeds, int32_t n_feeds, const char *const *fetches,
                              int32_t n_fetches, const PsimInsituOptions *opts, PsimInsituReport *report,
                              GError **error)
{
    PsimInsituOptions o;
    if (opts)
        o = *opts;
    else
        psim_insitu_options_init(&o);
    PsimInsituReport dummy;
    if (!report)
        report = &dummy;
    *report = (PsimInsituReport){.busy_factor = 1};
    g_return_val_if_fail(p->db, FALSE);
    if (o.steps < 1 || o.warmup < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "in-situ profile: steps >= 1 and warmup >= 0 are required");
        return FALSE;
    }
    double t0 = psim_exec_now_us();
    p->t0_us = t0; /* progress counts from here */
    g_autofree gboolean *constant = psim_cost_constant_nodes(g);
    /* CPU devices only: a GPU worker's ops are asynchronous launches, whose executor times are
     * not the kernels' (GPUs keep their CUPTI kernel rows). One run per fingerprint: devices of
     * identical hardware share rows (psim_cost_db_kernel_get). */
    g_autofree int32_t *cpus = g_new0(int32_t, p->n_devices + 1);
    g_autofree int32_t *first_of = g_new0(int32_t, p->n_devices + 1); /* the device run alone for d */
    int32_t n_cpus = 0;
    g_autoptr(GPtrArray) digests = g_ptr_array_new_with_free_func(g_free);
    for (int32_t d = 0; d < p->n_devices; d++) {
        const PsimDevice *dev = psim_cluster_device(p->cluster, d);
        first_of[d] = -1;
        if (dev->kind != PSIM_DEVICE_TYPE_CPU || !p->workers[d])
            continue;
        cpus[n_cpus++] = d;
        g_autoptr(PsimFingerprint) f = psim_fingerprint_new(dev);
        for (int32_t k = 0; k < n_cpus - 1 && first_of[d] < 0; k++)
            if (!strcmp(g_ptr_array_index(digests, k), f->digest))
                first_of[d] = first_of[cpus[k]];
        if (first_of[d] < 0)
            first_of[d] = d;
        g_ptr_array_add(digests, g_strdup(f->digest));
    }
    if (n_cpus == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                    "in-situ profile: the cluster has no CPU device with a worker to run %s on",
                    psim_graph_name(g));
        return FALSE;
    }
    g_autofree double **alone = g_new0(double *, p->n_devices + 1);
    gboolean ok = TRUE;
    for (int32_t k = 0; ok && k < n_cpus; k++) {
        int32_t d = cpus[k];
        if (first_of[d] != d)
            continue;
        const PsimDevice *dev = psim_cluster_device(p->cluster, d);
        g_autofree char *item = g_strdup_printf("%s on %s", psim_graph_name(g), dev->short_name);
        psim__profiler_progress(p, "in-situ", report->n_runs, n_cpus, item);
        Run r = {0};
        ok = run_prepare(p, &r, g, d, feed_names, feeds, n_feeds, fetches, n_fetches, &o, error) &&
             run_all(p, &r, &d, 1, error);
        if (ok) {
            alone[d] = node_times(g, &r, constant);
            ok = store_rows(p, g, &r, alone[d], dev, report, error);
            double gap = median_gap(&r);
            if (ok && !isnan(gap)) {
                g_autofree char *detail = g_strdup_printf(
                    "in-situ: median over %d steps of %s of the step's mean gap between ops", o.steps,
                    psim_graph_name(g));
                ok = psim_cost_db_calibration_put(p->db, dev, "dispatch_us", gap, detail, error);
                report->calibrations += ok;
            }
            if (report->n_runs == 0) {
                report->dispatch_us = isnan(gap) ? 0 : gap;
                g_autofree double *steps = g_memdup2(r.step_us->data, sizeof(double) * r.step_us->len);
                report->step_us = psim_stats_median(steps, r.step_us->len);
                double n_gaps = r.gap_n->len ? g_array_index(r.gap_n, double, 0) : 0;
                report->ops_us = sum_finite(alone[d], r.n_nodes, NULL) + report->dispatch_us * n_gaps;
                for (int32_t v = 0; v < r.n_nodes; v++)
                    report->n_nodes += !isnan(alone[d][v]);
            }
            report->n_runs++;
        }
        run_clear(&r);
    }
    /* Interference: every CPU device runs the graph at once; each device's ops against its
     * hardware's run alone (the same graph, so the same nodes). */
    if (ok && o.busy && n_cpus > 1) {
        g_autofree Run *rs = g_new0(Run, n_cpus);
        for (int32_t k = 0; ok && k < n_cpus; k++)
            ok = run_prepare(p, &rs[k], g, cpus[k], feed_names, feeds, n_feeds, fetches, n_fetches, &o, error);
        psim__profiler_progress(p, "in-situ", n_cpus - 1, n_cpus, "every device at once");
        if (ok)
            ok = run_all(p, rs, cpus, n_cpus, error);
        for (int32_t k = 0; ok && k < n_cpus; k++) {
            int32_t d = cpus[k];
            g_autofree double *busy = node_times(g, &rs[k], constant);
            double *ref = alone[first_of[d]];
            double a = sum_finite(ref, rs[k].n_nodes, busy), b = sum_finite(busy, rs[k].n_nodes, ref);
            if (!(a > 0 && b > 0))
                continue;
            const PsimDevice *dev = psim_cluster_device(p->cluster, d);
            g_autofree char *detail = g_strdup_printf(
                "in-situ: sum of op medians with %d devices running %s at once over the sum alone", n_cpus,
                psim_graph_name(g));
            ok = psim_cost_db_calibration_put(p->db, dev, "busy_factor", b / a, detail, error) &&
                 psim_cost_db_calibration_put(p->db, dev, "busy_devices", n_cpus, detail, error);
            report->calibrations += ok ? 2 : 0;
            if (k == 0)
                report->busy_factor = b / a;
        }
        for (int32_t k = 0; k < n_cpus; k++)
            run_clear(&rs[k]);
    }
    for (int32_t d = 0; d < p->n_devices; d++)
        g_free(alone[d]);
    psim__profiler_progress(p, "in-situ", n_cpus, n_cpus, NULL);
    report->elapsed_ms = (psim_exec_now_us() - t0) / 1e3;
    return ok;
}
