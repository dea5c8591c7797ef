/* placesim study: for each graph and placement algorithm, profile what the cost DB lacks, place,
 * simulate, run the same plan for real, and compare; writes a report with tables and plots. */
#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/sqlite-private.h"
#include "placesim/exec.h"
#include "placesim/placer.h"
#include "placesim/profiler.h"
#include "placesim/sim.h"
#include "tools/cli.h"

#define DEFAULT_ALGOS "single,round-robin,heft,greedy"

typedef struct {
    char *graph;
    char *algo;
    double sim_us, measured_us, error_pct;
    double plan_us;       /* the placer's own estimate */
    double placed_sim_us, placed_error_pct; /* simulated with the rows profiled before the runs */
    double measured_min_us, measured_max_us;
    double op_error_pct;  /* median |error| over ops of at least 10 us */
    int32_t n_transfers;
    int32_t n_devices_used;
    guint64 plan_key;     /* the placement (each node's device, each device's order): equal keys
                           * in one graph are the same plan measured twice */
    double place_ms, sim_ms;
    char *gantt;          /* file name of the side-by-side plot, or NULL */
    char *plan_file;      /* file name of its plan (placesim.plan/2), or NULL */
    char *error;          /* why this row has no figures, or NULL */
    PsimCliCostSources sources; /* where its simulation's node costs came from */
} Row;

static void row_free(Row *r)
{
    g_free(r->graph);
    g_free(r->algo);
    g_free(r->gantt);
    g_free(r->plan_file);
    g_free(r->error);
}

typedef struct {
    gboolean tty;
    int32_t done, total;
    gint64 t0;
} Progress;

static void progress(Progress *p, const char *what)
{
    double el = (g_get_monotonic_time() - p->t0) / 1e6;
    if (p->tty) {
        int width = 28, fill = p->total ? (int)(width * (double)p->done / p->total) : width;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        double eta = p->done ? el / p->done * (p->total - p->done) : 0;
        fprintf(stderr, "\r[%s] %d/%d %5.0fs eta %4.0fs  %-48.48s", bar, p->done, p->total, el, eta, what);
        if (p->done == p->total)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "study: [%d/%d %.0fs] %s\n", p->done, p->total, el, what);
    }
    fflush(stderr);
}

static void profile_progress(const PsimProfileProgress *pp, void *user)
{
    Progress *p = user;
    if (!p->tty || pp->total <= 0)
        return;
    fprintf(stderr, "\r  profiling %s %d/%d %-40.40s", pp->phase, pp->done, pp->total, pp->item ? pp->item : "");
    fflush(stderr);
}

static char *safe_name(const char *s)
{
    char *r = g_strdup(s);
    for (char *p = r; *p; p++)
        if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_' && *p != '.')
            *p = '_';
    return r;
}

/* One (graph, algorithm) in the making: placed, simulated, and the measured step times so far. */
typedef struct {
    Row *r;
    PsimGraph *g;
    PsimPlaceCtx *pc;
    PsimPlacement *pl;
    PsimPlan *plan;
    PsimTimeline *sim_tl;
    PsimSimResult sr;
    GPtrArray *feed_names, *feeds, *fetches;
    GArray *times;
    const PsimCliFeeds *feed_args; /* --feed */
} Trial;

static void trial_clear(Trial *t)
{
    psim_place_ctx_free(t->pc);
    psim_placement_free(t->pl);
    psim_plan_free(t->plan);
    psim_timeline_free(t->sim_tl);
    psim_sim_result_clear(&t->sr);
    if (t->feed_names)
        g_ptr_array_free(t->feed_names, TRUE);
    if (t->feeds)
        g_ptr_array_free(t->feeds, TRUE);
    if (t->fetches)
        g_ptr_array_free(t->fetches, TRUE);
    if (t->times)
        g_array_free(t->times, TRUE);
    memset(t, 0, sizeof *t);
}

static void trial_fail(Trial *t, GError *err)
{
    if (!t->r->error)
        t->r->error = g_strdup(err ? err->message : "failed");
    g_clear_error(&err);
}

/* Simulates the plan with model m: r->sim_us and the simulated timeline. */
static gboolean trial_simulate(Trial *t, PsimCostModel *m, PsimOrder order)
{
    GError *err = NULL;
    psim_timeline_free(t->sim_tl);
    t->sim_tl = NULL;
    psim_sim_result_clear(&t->sr);
    PsimSimOptions so = {.order = order};
    if (!psim_sim_run(t->plan, m, &so, &t->sr, &t->sim_tl, &err)) {
        trial_fail(t, err);
        return FALSE;
    }
    t->r->sim_us = t->sr.step_time_us;
    psim_cli_cost_sources(m, t->plan, t->sim_tl, &t->r->sources);
    return TRUE;
}

/* FNV-1a over each node's device and each device's order: the same placement gives the same
 * key, whichever algorithm made it. */
static guint64 plan_key(const PsimPlan *p)
{
    guint64 h = 1469598103934665603ull;
    int32_t n = psim_graph_n_nodes(p->graph);
    for (int32_t v = 0; v < n; v++)
        h = (h ^ (guint64)(guint32)p->device_of[v]) * 1099511628211ull;
    for (int32_t d = 0; d < p->n_devices; d++)
        for (int32_t i = 0; i < p->n_order[d]; i++)
            h = (h ^ (guint64)(guint32)p->order[d][i]) * 1099511628211ull;
    return h;
}

/* Place, simulate, and pick feeds and fetches. FALSE (the row's error set) on failure. */
static gboolean trial_prepare(Trial *t, PsimCostModel *m, PsimOrder order)
{
    GError *err = NULL;
    Row *r = t->r;
    t->sr.over_device = -1;
    gint64 t0 = g_get_monotonic_time();
    if (!(t->pc = psim_place_ctx_new(t->g, m, NULL, &err)) || !(t->pl = psim_place(t->pc, r->algo, &err)) ||
        !(t->plan = psim_plan_build(t->pc, t->pl, &err))) {
        trial_fail(t, err);
        return FALSE;
    }
    gint64 t1 = g_get_monotonic_time();
    r->place_ms = (t1 - t0) / 1e3;
    r->plan_us = t->plan->makespan_us;
    r->n_transfers = t->plan->n_transfers;
    if (!trial_simulate(t, m, order))
        return FALSE;
    r->sim_ms = (g_get_monotonic_time() - t1) / 1e3;
    r->placed_sim_us = r->sim_us;
    for (int32_t d = 0; d < t->plan->n_devices; d++)
        r->n_devices_used += t->plan->n_order[d] > 0;
    r->plan_key = plan_key(t->plan);
    t->feed_names = g_ptr_array_new_with_free_func(g_free);
    t->feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    t->fetches = g_ptr_array_new_with_free_func(g_free);
    t->times = g_array_new(FALSE, FALSE, sizeof(double));
    if (!psim_cli_feeds_make(t->feed_args, t->g, FALSE, t->feed_names, t->feeds, &err)) {
        trial_fail(t, err);
        return FALSE;
    }
    g_autoptr(GArray) ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    psim_cli_default_fetches(t->g, ports);
    for (guint k = 0; k < ports->len; k++)
        g_ptr_array_add(t->fetches, psim_port_to_string(t->g, g_array_index(ports, PsimPort, k)));
    return TRUE;
}

#define WARMUP_MS PSIM_CLI_WARMUP_MS
/* Each round measures each plan, and runs each in-situ run of the refresh, for at least this
 * long (and at least its share of the steps): a graph of short steps (the built-in models' are
 * 0.2-0.5 ms) gets tens of samples a round where it got one, for little more than the warm-up. */
#define MEASURE_MS PSIM_CLI_MEASURE_MS
/* In-situ steps of the refresh, spread over the measured rounds (at least one per round). */
#define INSITU_STEPS 20

/* One step of the plan, its fetched outputs dropped. FALSE (the row's error set) on failure. */
static gboolean trial_step(Trial *t, PsimPlanExec *px, PsimMpiExec *mx, PsimTensor **outs)
{
    GError *err = NULL;
    PsimTensor *const *in = (PsimTensor *const *)t->feeds->pdata;
    if (!(mx ? psim_mpi_exec_run(mx, in, outs, &err) : psim_plan_exec_run(px, in, outs, &err))) {
        trial_fail(t, err);
        return FALSE;
    }
    for (guint k = 0; k < t->fetches->len; k++)
        g_clear_pointer(&outs[k], psim_tensor_unref);
    return TRUE;
}

/* Runs the plan for real: warm-up steps, then measured ones (at least `steps` and MEASURE_MS)
 * appended to t->times. With run_tl, one more step whose measured timeline goes there. */
static gboolean trial_measure(Trial *t, PsimCluster *c, PsimMpi *m, PsimOrder order, int steps,
                              PsimTimeline **run_tl)
{
    GError *err = NULL;
    const char *const *feed_names = (const char *const *)t->feed_names->pdata;
    const char *const *fetches = (const char *const *)t->fetches->pdata;
    g_autoptr(PsimPlanExec) px = NULL;
    g_autoptr(PsimMpiExec) mx = NULL;
    if (m)
        mx = psim_mpi_exec_new(m, t->plan, feed_names, (int32_t)t->feeds->len, fetches, (int32_t)t->fetches->len,
                               &err);
    else
        px = psim_plan_exec_new(t->plan, c, feed_names, (int32_t)t->feeds->len, fetches, (int32_t)t->fetches->len,
                                order == PSIM_ORDER_DYNAMIC, &err);
    if (!px && !mx) {
        trial_fail(t, err);
        return FALSE;
    }
    g_autofree PsimTensor **outs = g_new0(PsimTensor *, t->fetches->len + 1);
    /* Warm-up: at least one step and WARMUP_MS (pools filled, pages mapped, caches and the
     * devices' cores awake), then the measured steps. */
    gint64 warm_end = g_get_monotonic_time() + WARMUP_MS * 1000;
    int n_warm = 0;
    while (n_warm < 1 || (n_warm < 10000 && g_get_monotonic_time() < warm_end)) {
        if (!trial_step(t, px, mx, outs))
            return FALSE;
        n_warm++;
    }
    gint64 measure_end = g_get_monotonic_time() + MEASURE_MS * 1000;
    for (int s = 0; s < steps || g_get_monotonic_time() < measure_end; s++) {
        if (!trial_step(t, px, mx, outs))
            return FALSE;
        double us = mx ? psim_mpi_exec_step_us(mx) : psim_plan_exec_step_us(px);
        g_array_append_val(t->times, us);
    }
    if (run_tl) {
        if (!trial_step(t, px, mx, outs))
            return FALSE;
        *run_tl = psim_timeline_new(psim_graph_name(t->plan->graph), "run", t->plan->n_devices,
                                    (const char *const *)t->plan->devices);
        if (px)
            psim_plan_exec_timeline_add(px, *run_tl);
        else if (!psim_mpi_exec_timeline_add(mx, *run_tl, &err)) { /* every task's part */
            trial_fail(t, err);
            return FALSE;
        }
    }
    return TRUE;
}

/* The row's figures from the measured steps, the comparison, traces and plot (written through
 * outs; sqlite_tmp is the results database being written). */
static void trial_finish(Trial *t, PsimTimeline *run_tl, const char *out_dir, PsimCliOutputs *outs,
                         const char *sqlite_tmp, gboolean gnuplot)
{
    GError *err = NULL;
    Row *r = t->r;
    int n = (int)t->times->len;
    double *v = (double *)t->times->data;
    /* The trimmed mean, as the in-situ rows it is compared with (profiler/insitu.c). */
    r->measured_us = psim_stats_trimmed_mean(v, n, PSIM_STATS_TRIM);
    r->measured_min_us = v[0];
    r->measured_max_us = v[n - 1];
    r->error_pct = 100 * (r->sim_us - r->measured_us) / r->measured_us;
    r->placed_error_pct = 100 * (r->placed_sim_us - r->measured_us) / r->measured_us;
    PsimCompare cmp = {0};
    if (run_tl && psim_timeline_compare(t->sim_tl, run_tl, &cmp, NULL))
        r->op_error_pct = cmp.median_abs_op_error_pct;
    g_autofree char *base = g_strdup_printf("%s-%s", r->graph, r->algo);
    g_autofree char *safe = safe_name(base);
    g_autofree char *sim_trace = g_strdup_printf("%s/%s.sim.json", out_dir, safe);
    g_autofree char *run_trace = g_strdup_printf("%s/%s.run.json", out_dir, safe);
    const char *sim_tmp = NULL, *run_tmp = NULL;
    if (!(sim_tmp = psim_cli_output(outs, sim_trace, FALSE, &err)) ||
        (run_tl && !(run_tmp = psim_cli_output(outs, run_trace, FALSE, &err))) ||
        !psim_timeline_save_chrome(t->sim_tl, sim_tmp, &err) ||
        (run_tl && !psim_timeline_save_chrome(run_tl, run_tmp, &err)) ||
        psim_timeline_save_sqlite(t->sim_tl, sqlite_tmp, base, &err) < 0 ||
        (run_tl && psim_timeline_save_sqlite(run_tl, sqlite_tmp, base, &err) < 0)) {
        trial_fail(t, err);
        psim_compare_clear(&cmp);
        return;
    }
    if (gnuplot && run_tl) {
        g_autofree char *png = g_strdup_printf("%s/%s.png", out_dir, safe);
        const char *png_tmp = psim_cli_output(outs, png, FALSE, NULL);
        if (png_tmp && psim_compare_plot(t->sim_tl, run_tl, &cmp, png_tmp, NULL))
            r->gantt = g_strdup_printf("%s.png", safe);
    }
    psim_compare_clear(&cmp);
}

/* The row's plan as OUT/GRAPH-ALGO.plan.json, carrying its cluster and referring to its graph by
 * source (fused: as fused for the cluster; no source: holding it), so that `placesim sim --plan`
 * and `run --plan` take it as it is. A failure to write is the row's error. */
static void trial_save_plan(Trial *t, const PsimCluster *cluster, const char *source, gboolean fused,
                            const char *out_dir, PsimCliOutputs *outs)
{
    GError *err = NULL;
    if (!t->plan->cluster_json)
        t->plan->cluster_json = psim_cluster_to_json(cluster);
    if (!t->plan->graph_source && source) {
        t->plan->graph_source = g_strdup(source);
        t->plan->graph_fused = fused;
    }
    g_autofree char *base = g_strdup_printf("%s-%s", t->r->graph, t->r->algo);
    g_autofree char *safe = safe_name(base);
    g_autofree char *name = g_strdup_printf("%s.plan.json", safe);
    g_autofree char *path = g_build_filename(out_dir, name, NULL);
    const char *tmp = psim_cli_output(outs, path, FALSE, &err);
    if (!tmp || !psim_plan_save(t->plan, tmp, &err)) {
        trial_fail(t, err);
        return;
    }
    t->r->plan_file = g_steal_pointer(&name);
}

/* The results table, beside the timelines in results.sqlite. */
static gboolean write_sqlite(GArray *rows, const char *path, GError **error)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    gboolean ok = FALSE;
    PSIM_SQLITE_CHECK(db, sqlite3_open(path, &db), path, "write results", error);
    sqlite3_busy_timeout(db, 10000);
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db,
        "BEGIN; CREATE TABLE IF NOT EXISTS results (graph TEXT, algo TEXT, sim_us REAL,"
        " measured_us REAL, error_pct REAL, measured_min_us REAL, measured_max_us REAL,"
        " plan_us REAL, op_median_abs_error_pct REAL, transfers INTEGER, devices_used INTEGER,"
        " place_ms REAL, error TEXT, placed_sim_us REAL, placed_error_pct REAL)", NULL, NULL, NULL),
        path, "write results", error);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db, "INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                             -1, &st, NULL), path, "write results", error);
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        sqlite3_bind_text(st, 1, r->graph, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->algo, -1, SQLITE_STATIC);
        /* The figures (NULL for a failed row) and their columns. */
        double v[] = {r->sim_us, r->measured_us, r->error_pct, r->measured_min_us, r->measured_max_us,
                      r->plan_us, r->op_error_pct, r->placed_sim_us, r->placed_error_pct};
        const int col[] = {3, 4, 5, 6, 7, 8, 9, 14, 15};
        for (int k = 0; k < (int)G_N_ELEMENTS(v); k++)
            if (r->error)
                sqlite3_bind_null(st, col[k]);
            else
                sqlite3_bind_double(st, col[k], v[k]);
        sqlite3_bind_int(st, 10, r->n_transfers);
        sqlite3_bind_int(st, 11, r->n_devices_used);
        sqlite3_bind_double(st, 12, r->place_ms);
        if (r->error)
            sqlite3_bind_text(st, 13, r->error, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 13);
        PSIM_SQLITE_CHECK(db, sqlite3_step(st), path, "write results", error);
        sqlite3_reset(st);
    }
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), path, "write results", error);
    ok = TRUE;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

static gboolean write_results(GArray *rows, const char *dir, PsimCliOutputs *outs, gboolean gnuplot,
                              const char *cluster_desc, int steps, int rounds, gboolean refreshed, double med,
                              double worst, double placed_med, double placed_worst, const char *choices_md,
                              const char *links_note, GError **error)
{
    /* results.csv */
    GString *csv = g_string_new("graph,algo,sim_us,measured_us,error_pct,measured_min_us,measured_max_us,"
                                "plan_us,op_median_abs_error_pct,transfers,devices_used,place_ms,error,"
                                "placed_sim_us,placed_error_pct\n");
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        g_autofree char *e = g_strdup(r->error ? r->error : "");
        g_strdelimit(e, ",\n\"", ';');
        g_string_append_printf(csv, "%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%d,%d,%.2f,%s,%.3f,%.3f\n", r->graph,
                               r->algo, r->sim_us, r->measured_us, r->error_pct, r->measured_min_us,
                               r->measured_max_us, r->plan_us, r->op_error_pct, r->n_transfers,
                               r->n_devices_used, r->place_ms, e, r->placed_sim_us, r->placed_error_pct);
    }
    g_autofree char *csv_path = g_build_filename(dir, "results.csv", NULL);
    const char *tmp = psim_cli_output(outs, csv_path, FALSE, error);
    gboolean ok = tmp && g_file_set_contents(tmp, csv->str, (gssize)csv->len, error);
    g_string_free(csv, TRUE);
    if (!ok)
        return FALSE;

    /* The bar chart: predicted and measured step time per (graph, algo). */
    g_autofree char *png_path = g_build_filename(dir, "step-times.png", NULL);
    const char *png = gnuplot && rows->len > 0 ? psim_cli_output(outs, png_path, FALSE, NULL) : NULL;
    gboolean plot = png != NULL;
    if (plot) {
        GString *s = g_string_new(NULL);
        g_string_append_printf(s, "set terminal pngcairo size %d,560 font ',9'\nset output '%s'\n",
                               MAX(700, 70 * (int)rows->len), png);
        g_string_append(s, "set title 'step time: simulated vs measured' noenhanced\n"
                           "set style data histograms\nset style histogram clustered gap 1\n"
                           "set style fill solid 0.85 border -1\nset ylabel 'microseconds'\n"
                           "set xtics rotate by -35 noenhanced\nset key top left\nset grid y\n"
                           "plot '-' using 2:xtic(1) title 'simulated' lc rgb '#4e79a7', "
                           "'-' using 2 title 'measured' lc rgb '#f28e2b'\n");
        for (int pass = 0; pass < 2; pass++) {
            for (guint i = 0; i < rows->len; i++) {
                Row *r = &g_array_index(rows, Row, i);
                g_string_append_printf(s, "\"%s/%s\" %.3f\n", r->graph, r->algo,
                                       r->error ? 0.0 : pass ? r->measured_us : r->sim_us);
            }
            g_string_append(s, "e\n");
        }
        plot = psim_gnuplot_run(s->str, NULL);
        g_string_free(s, TRUE);
    }

    /* report.md */
    GString *md = g_string_new("# placesim study\n\n");
    g_string_append_printf(md, "Cluster: %s. Each plan was simulated (static order) and run for real: %d "
                               "measured steps at least (and in each round at least " G_STRINGIFY(MEASURE_MS) " ms of them; their mean without the fastest and slowest tenth, as the in-situ rows) in %d rounds, each after warm-up steps (" G_STRINGIFY(WARMUP_MS) " ms, at least one), the "
                               "algorithms of a graph in turn within a round, each round starting one algorithm later. Error = (simulated - "
                               "measured) / measured.\n\n", cluster_desc, steps, rounds);
    if (refreshed)
        g_string_append_printf(md, "Each graph was profiled (in situ where it runs whole on a device: the whole graph "
                                   "run in runs of its own, each op timed by the executor; kernels timed alone for what "
                                   "the cost DB still lacked), placed and simulated; then profiled again (in situ in "
                                   "passes of its own, one before each measured round; otherwise its kernels profiled again in passes between its "
                                   "measured rounds%s), "
                                   "and each plan "
                                   "simulated again with those rows (the placement unchanged): the simulated and the "
                                   "measured steps saw the same minutes of the host. \"At placement\" is the first "
                                   "simulation: median |error| %.2f%%, worst %.2f%%.\n\n", links_note, placed_med,
                               placed_worst);
    g_string_append_printf(md, "**Median |error| %.2f%%, worst %.2f%%** over %u runs.\n\n", med, worst, rows->len);
    g_string_append(md, "| graph | algorithm | simulated µs | measured µs (min–max) | error | at placement: simulated µs, error | plan estimate µs | op median |error| | transfers | devices |\n"
                        "|---|---|---|---|---|---|---|---|---|---|\n");
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        if (r->error) {
            g_string_append_printf(md, "| %s | %s | failed: %s | | | | | | | |\n", r->graph, r->algo, r->error);
            continue;
        }
        g_string_append_printf(md, "| %s | %s | %.1f | %.1f (%.1f–%.1f) | %+.2f%% | %.1f, %+.2f%% | %.1f | %.1f%% | %d | %d |\n",
                               r->graph, r->algo, r->sim_us, r->measured_us, r->measured_min_us,
                               r->measured_max_us, r->error_pct, r->placed_sim_us, r->placed_error_pct, r->plan_us,
                               r->op_error_pct, r->n_transfers, r->n_devices_used);
    }
    g_string_append(md, "\nEach row's plan is in `GRAPH-ALGORITHM.plan.json` (its cluster, placement, orders and "
                        "transfer schedule; it refers to the graph file, fused again as it is read where the "
                        "study fused it, or holds the graph where options changed it): `placesim sim --plan` and `placesim run --plan` take it as it is; `sim --plan "
                        "--db costs.db` simulates it with the rows as the study left them, the last graph's as its "
                        "rows were simulated (an earlier graph's device calibrations, such as the in-situ gap "
                        "between ops, are the later graphs' by then).\n");
    if (choices_md)
        g_string_append(md, choices_md);
    if (plot)
        g_string_append(md, "\n![step times](step-times.png)\n");
    g_string_append(md, "\n## Timelines\n\nSimulated (left) and measured (right) Gantt charts on one time scale, "
                        "and each op's predicted against measured time. Chrome traces (`*.sim.json`, `*.run.json`) "
                        "open in Perfetto; `results.sqlite` holds every timeline (tables runs, ops, transfers).\n");
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        if (r->gantt)
            g_string_append_printf(md, "\n### %s / %s\n\n![%s %s](%s)\n", r->graph, r->algo, r->graph, r->algo, r->gantt);
    }
    g_autofree char *md_path = g_build_filename(dir, "report.md", NULL);
    tmp = psim_cli_output(outs, md_path, FALSE, error);
    ok = tmp && g_file_set_contents(tmp, md->str, (gssize)md->len, error);
    g_string_free(md, TRUE);
    return ok;
}

/* The plan a study would choose for one graph (lowest simulated step, ties within the
 * simulator's error bound to the simpler plan: psim_cli_choose), measured against the fastest
 * plan as measured. Row indices into the study's rows; single: the "single" row or -1. */
typedef struct {
    int chosen, best, single;
    gboolean simpler;
    /* Measured steps of the chosen, best and single plans: a placement's rows (plan_key: plans
     * that different algorithms made the same) count as one plan, measured as their mean, so
     * that two measurements of one plan do not make a regret out of noise. */
    double chosen_us, best_us, single_us;
    double regret_pct; /* chosen measured / best measured - 1, in percent */
    double vs_single_pct; /* chosen measured / single measured - 1, in percent (0 without single) */
} Choice;

/* Error figures over a set of rows: count, median and worst |error|, mean signed error. */
typedef struct {
    int n;
    double med, worst, mean;
} ErrStats;

/* One group's figures: rows whose algorithm is algo (NULL: any) and whose plan uses one device
 * (devices 1), several (2) or any (0). */
static ErrStats err_stats(GArray *rows, const char *algo, int devices)
{
    ErrStats e = {0};
    g_autofree double *v = g_new(double, rows->len + 1);
    double sum = 0;
    for (guint i = 0; i < rows->len; i++) {
        const Row *r = &g_array_index(rows, Row, i);
        if (r->error || (algo && strcmp(r->algo, algo)) || (devices == 1 && r->n_devices_used > 1) ||
            (devices == 2 && r->n_devices_used <= 1))
            continue;
        v[e.n++] = fabs(r->error_pct);
        sum += r->error_pct;
        e.worst = MAX(e.worst, fabs(r->error_pct));
    }
    e.med = e.n ? psim_stats_median(v, e.n) : 0;
    e.mean = e.n ? sum / e.n : 0;
    return e;
}

/* A study from its flags to its report: the command is the list of steps in psim_cmd_study. */
typedef struct {
    /* Flags as given. */
    char *cluster_spec, *algos, *db_path, *out_dir, *order_name, *profile_weights;
    char *steps_text, *rounds_text, *profile_rounds_text, *budget_text;
    char **feed_args;
    gboolean json, no_profile, no_refresh, no_in_situ, mpi;
    PsimCliGraphOptions go;
    /* Checked. */
    int steps, rounds, profile_rounds;
    double profile_budget;
    PsimProfileWeights weights;
    PsimCliFeeds feeds;
    PsimOrder order;
    char **algo_list;
    int n_algos;
    gboolean gnuplot;
    /* Inputs and outputs. */
    PsimCliOutputs *outs;
    char *sqlite_path;
    const char *sqlite_tmp; /* owned by outs */
    GPtrArray *graphs;
    GPtrArray *sources; /* per graph: what its plans refer to (psim_cli_graph_source), or NULL:
                         * they embed it (graph options given) */
    GArray *fused;      /* per graph (gboolean): fused for the cluster since read */
    PsimMpi *m;         /* --mpi: rank 0's handle (the other ranks serve); NULL without */
    PsimCluster *cluster; /* with --mpi the MPI world's (psim_mpi_cluster), not owned */
    PsimCostDb *db;
    Progress prog;
    PsimProfileOptions po;
    /* Results: a Row per (graph, algorithm), and the summary over rows that did not fail. */
    GArray *rows;
    int n_ok;
    double med, worst, placed_med, placed_worst;
    /* Per graph, the plan the study would choose from its simulations, and what that cost. */
    GArray *choices; /* Choice */
    double regret_med, regret_worst;
    double vs_single_worst; /* the largest chosen measured / single measured - 1, in percent */
    int n_lose;             /* choices measured more than 2% slower than single */
    /* The measurements' own noise: in each graph, plans that are the same placement (made by
     * different algorithms), their measured steps' spread max / min - 1, in percent. */
    int noise_groups;
    double noise_med, noise_worst;
} Study;

static void study_clear(Study *st)
{
    g_free(st->cluster_spec);
    g_free(st->algos);
    g_free(st->db_path);
    g_free(st->out_dir);
    g_free(st->order_name);
    g_free(st->profile_weights);
    g_free(st->steps_text);
    g_free(st->rounds_text);
    g_free(st->profile_rounds_text);
    g_free(st->budget_text);
    g_strfreev(st->feed_args);
    psim_cli_feeds_clear(&st->feeds);
    psim_cli_graph_options_clear(&st->go);
    g_strfreev(st->algo_list);
    psim_cli_outputs_free(st->outs);
    g_free(st->sqlite_path);
    if (st->graphs)
        g_ptr_array_free(st->graphs, TRUE);
    if (st->sources)
        g_ptr_array_free(st->sources, TRUE);
    if (st->fused)
        g_array_free(st->fused, TRUE);
    if (!st->m)
        psim_cluster_free(st->cluster);
    psim_cost_db_close(st->db);
    for (guint i = 0; st->rows && i < st->rows->len; i++)
        row_free(&g_array_index(st->rows, Row, i));
    if (st->rows)
        g_array_free(st->rows, TRUE);
    if (st->choices)
        g_array_free(st->choices, TRUE);
}

/* The flags, checked: FALSE with a USAGE error, or FALSE and no error after a parse error
 * (already reported). */
static gboolean study_parse(Study *st, int *argc, char ***argv, GError **error)
{
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &st->cluster_spec, "Cluster: local (default), local:N, a cluster file, uniform:P", "SPEC"},
        {"algos", 'a', 0, G_OPTION_ARG_STRING, &st->algos,
         "Comma-separated algorithms, or 'all' (default " DEFAULT_ALGOS ")", "LIST"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &st->db_path, "Cost DB (default OUT/costs.db); what it lacks is profiled (read only with --no-profile)", "DB"},
        {"steps", 0, 0, G_OPTION_ARG_STRING, &st->steps_text, "Measured steps per plan at least, 1 to 100000 (default 30; each round also measures for at least " G_STRINGIFY(MEASURE_MS) " ms)", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_STRING, &st->rounds_text,
         "Measure in N rounds, the algorithms in turn within each (each round from the next), each after " G_STRINGIFY(WARMUP_MS) " ms of warm-up steps (default 30, at most --steps)", "N"},
        {"profile-rounds", 0, 0, G_OPTION_ARG_STRING, &st->profile_rounds_text,
         "Profile in N interleaved passes, samples pooled (default 100; see 'placesim profile')", "N"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &st->out_dir,
         "Output folder (default study-out; created if missing, its parent must exist)", "DIR"},
        {"order", 0, 0, G_OPTION_ARG_STRING, &st->order_name, "static (default) or dynamic", "ORDER"},
        {"no-profile", 0, 0, G_OPTION_ARG_NONE, &st->no_profile, "Use the DB as it is (estimates where it has no row)", NULL},
        {"no-refresh", 0, 0, G_OPTION_ARG_NONE, &st->no_refresh,
         "Simulate with the rows profiled before the runs (by default each graph is profiled again in passes "
         "between its measured rounds, in situ or kernel by kernel as before, with the links between CPU devices, and its plans simulated again with "
         "those rows)", NULL},
        {"profile-budget-ms", 0, 0, G_OPTION_ARG_STRING, &st->budget_text,
         "Profiling time budget per kernel signature and device, at most one day (default 300)", "MS"},
        {"profile-weights", 0, 0, G_OPTION_ARG_STRING, &st->profile_weights,
         "Profiling: CPU kernels' weights cold, warm or auto (default; see 'placesim profile --help')", "MODE"},
        {"feed", 0, 0, G_OPTION_ARG_STRING_ARRAY, &st->feed_args,
         PSIM_CLI_FEED_HELP "; profiling feeds kernels the same kind", PSIM_CLI_FEED_ARG},
        {"no-in-situ", 0, 0, G_OPTION_ARG_NONE, &st->no_in_situ,
         "Time kernels alone only (by default each graph that can run whole on a device is profiled in situ "
         "first, as 'placesim profile --in-situ', in runs separate from the measured ones, and again after "
         "them instead of the kernels' refresh)", NULL},
        {"mpi", 0, 0, G_OPTION_ARG_NONE, &st->mpi,
         "Under mpirun: the cluster is the MPI tasks' devices (as 'run --mpi'); rank 0 studies, the others "
         "serve its plans. Kernels are profiled (in situ too) in rank 0's process on each device's cores, "
         "the links between tasks through the transport (as 'profile --mpi') before each graph is placed "
         "and again in passes between its measured rounds",
         NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &st->json, "Print one JSON object with the rows", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("[GRAPH...] - place, simulate, run and compare");
    g_option_context_set_summary(ctx,
        "For each graph and algorithm: profile what the cost DB lacks, place, simulate one step,\n"
        "run the same plan for real, and compare. Writes OUT/report.md, OUT/results.csv,\n"
        "OUT/results.sqlite, each row's plan (OUT/GRAPH-ALGO.plan.json, for 'sim --plan' and 'run --plan'),\n"
        "Chrome traces and plots. Without GRAPH it studies the built-in models.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &st->go, PSIM_CLI_GRAPH_PLUGIN | PSIM_CLI_GRAPH_SHAPES | PSIM_CLI_GRAPH_FUSE);
    if (!psim_cli_parse(ctx, argc, argv, "study"))
        return FALSE;
    /* 30 rounds of one step: a shared host's fast and slow spells last seconds, and a plan's
     * figure is only as good as the number of spells its steps sample (docs/validation.md). */
    int64_t steps = 30, rounds = -1, profile_rounds = 100;
    st->profile_budget = 300;
    if (!psim_cli_flag_int("--steps", st->steps_text, 1, 100000, &steps, error) ||
        !psim_cli_flag_int("--rounds", st->rounds_text, 1, steps, &rounds, error) ||
        !psim_cli_flag_int("--profile-rounds", st->profile_rounds_text, 1, 1000, &profile_rounds, error) ||
        !psim_cli_flag_double("--profile-budget-ms", st->budget_text, 0.001, PSIM_CLI_MAX_MS, &st->profile_budget,
                              error))
        return FALSE;
    st->steps = (int)steps;
    st->rounds = rounds < 0 ? MIN(30, st->steps) : (int)rounds;
    st->profile_rounds = (int)profile_rounds;
    st->weights = PSIM_PROFILE_WEIGHTS_AUTO;
    if (st->profile_weights && !psim_profile_weights_from_name(st->profile_weights, &st->weights)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--profile-weights: expected auto, cold or warm, not '%s'",
                    st->profile_weights);
        return FALSE;
    }
    if (!psim_cli_feeds_parse(&st->feeds, st->feed_args, error))
        return FALSE;
    st->order = PSIM_ORDER_STATIC;
    if (st->order_name && !psim_order_from_name(st->order_name, &st->order)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--order: expected static or dynamic, not '%s'",
                    st->order_name);
        return FALSE;
    }
    if (!st->algos || strcmp(st->algos, "all")) {
        st->algo_list = g_strsplit(DEFAULT_ALGOS, ",", -1);
        if (!psim_cli_flag_list("--algos", st->algos, &st->algo_list, error))
            return FALSE;
        for (int i = 0; st->algo_list[i]; i++)
            if (!psim_placer_lookup(st->algo_list[i]) || !strcmp(st->algo_list[i], "file")) {
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                            "--algos: unknown algorithm '%s' (see 'placesim place --help')", st->algo_list[i]);
                return FALSE;
            }
    } else {
        int32_t n = 0;
        const PsimPlacer *const *all = psim_placer_list(&n);
        GPtrArray *a = g_ptr_array_new();
        for (int32_t i = 0; i < n; i++)
            if (strcmp(all[i]->name, "file"))
                g_ptr_array_add(a, g_strdup(all[i]->name));
        g_ptr_array_add(a, NULL);
        st->algo_list = (GStrv)g_ptr_array_free(a, FALSE);
    }
    st->n_algos = (int)g_strv_length(st->algo_list);
    if (st->mpi && st->cluster_spec) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--mpi: the cluster is the MPI tasks' devices; drop --cluster");
        return FALSE;
    }
    if (st->mpi && st->order == PSIM_ORDER_DYNAMIC) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--mpi: the MPI tasks run their plans in the static order; "
                                                         "drop --order dynamic");
        return FALSE;
    }
    return psim_cli_graph_options_check(&st->go, error);
}

/* Every graph of a study gets a name of its own, so that its rows, traces and plots are its
 * own: graphs that share a model name take their file's stem, and any still shared a suffix
 * ("-2", "-3"...). specs: the graphs' command-line specs (NULL for the built-in models). */
static void study_unique_names(GPtrArray *graphs, char **specs)
{
    g_autoptr(GHashTable) count = g_hash_table_new(g_str_hash, g_str_equal);
    for (guint i = 0; i < graphs->len; i++) {
        const char *n = psim_graph_name(g_ptr_array_index(graphs, i));
        g_hash_table_insert(count, (gpointer)n, GINT_TO_POINTER(GPOINTER_TO_INT(g_hash_table_lookup(count, n)) + 1));
    }
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    for (guint i = 0; i < graphs->len; i++) {
        PsimGraph *g = g_ptr_array_index(graphs, i);
        const char *n = psim_graph_name(g);
        gboolean shared = GPOINTER_TO_INT(g_hash_table_lookup(count, n)) > 1;
        g_ptr_array_add(names, shared && specs && !g_str_has_prefix(specs[i], "zoo:")
                                   ? psim_graph_name_from_path(specs[i]) : g_strdup(n));
    }
    g_autoptr(GHashTable) taken = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (guint i = 0; i < graphs->len; i++) {
        const char *base = g_ptr_array_index(names, i);
        g_autofree char *name = g_strdup(base);
        for (int k = 2; g_hash_table_contains(taken, name); k++) {
            g_free(name);
            name = g_strdup_printf("%s-%d", base, k);
        }
        psim_graph_set_name(g_ptr_array_index(graphs, i), name);
        g_hash_table_add(taken, g_steal_pointer(&name));
    }
}

/* The output folder and results database, the graphs, the cluster and the cost DB. */
static gboolean study_open(Study *st, int argc, char **argv, GError **error)
{
    if (!st->out_dir)
        st->out_dir = g_strdup("study-out");
    st->outs = psim_cli_outputs_new();
    if (!psim_cli_output_dir(st->outs, st->out_dir, error))
        return FALSE;
    gboolean db_given = st->db_path != NULL;
    if (!st->db_path)
        st->db_path = g_build_filename(st->out_dir, "costs.db", NULL);
    /* A fresh results database each study, renamed over the old one at the end. */
    st->sqlite_path = g_build_filename(st->out_dir, "results.sqlite", NULL);
    if (!(st->sqlite_tmp = psim_cli_output(st->outs, st->sqlite_path, FALSE, error)))
        return FALSE;
    g_autofree char *gnuplot = g_find_program_in_path("gnuplot");
    st->gnuplot = gnuplot != NULL;
    st->graphs = g_ptr_array_new_with_free_func((GDestroyNotify)psim_graph_free);
    st->sources = g_ptr_array_new_with_free_func(g_free);
    st->fused = g_array_new(FALSE, FALSE, sizeof(gboolean));
    int32_t n_zoo = 0;
    const char *const *zoo = psim_zoo_list(&n_zoo);
    int32_t n_specs = argc > 1 ? argc - 1 : n_zoo;
    for (int32_t i = 0; i < n_specs; i++) {
        PsimGraph *g = psim_cli_graph_load(argc > 1 ? argv[i + 1] : zoo[i], &st->go, error);
        if (!g)
            return FALSE;
        g_ptr_array_add(st->graphs, g);
    }
    st->cluster = st->m ? psim_mpi_cluster(st->m)
                        : psim_cli_cluster(st->cluster_spec ? st->cluster_spec : "local",
                                           st->graphs->len ? g_ptr_array_index(st->graphs, 0) : NULL, error);
    if (!st->cluster)
        return FALSE;
    for (guint i = 0; i < st->graphs->len; i++) {
        int32_t removed = st->go.n_fuse_removed;
        if (!psim_cli_graph_fuse((PsimGraph **)&st->graphs->pdata[i], st->cluster, &st->go, error))
            return FALSE;
        /* Its plan files refer to the graph where it is the file (or built-in model) as read,
         * fused or not (as `place --plan` does); changed by graph options, they embed it. */
        g_ptr_array_add(st->sources, psim_cli_graph_as_read(&st->go)
                                         ? psim_cli_graph_source(argc > 1 ? argv[i + 1] : zoo[i])
                                         : NULL);
        g_array_append_val(st->fused, (gboolean){st->go.n_fuse_removed > removed});
    }
    study_unique_names(st->graphs, argc > 1 ? argv + 1 : NULL);
    if (!psim_cli_feeds_check(&st->feeds, (PsimGraph *const *)st->graphs->pdata, (int32_t)st->graphs->len, error))
        return FALSE;
    /* --no-profile only reads the DB: read-only, and no DB at all where the default one does
     * not exist yet (estimates), so that a read-only DB serves it. */
    GError *err = NULL;
    if (!st->no_profile)
        st->db = psim_cost_db_open(st->db_path, &err);
    else if (db_given || g_file_test(st->db_path, G_FILE_TEST_EXISTS))
        st->db = psim_cost_db_open_readonly(st->db_path, &err);
    if (err) {
        g_propagate_error(error, err);
        return FALSE;
    }
    st->prog = (Progress){.tty = psim_cli_stderr_tty(),
                          .total = (int32_t)st->graphs->len * (st->n_algos + (st->no_profile ? 0 : 1)),
                          .t0 = g_get_monotonic_time()};
    psim_profile_options_init(&st->po);
    st->po.progress = profile_progress;
    st->po.budget_ms = st->profile_budget;
    st->po.rounds = st->profile_rounds;
    st->po.weights = st->weights;
    st->po.progress_user = &st->prog;
    psim_cli_feeds_profile(&st->feeds, (PsimGraph *const *)st->graphs->pdata, (int32_t)st->graphs->len, &st->po);
    st->rows = g_array_new(FALSE, TRUE, sizeof(Row));
    return TRUE;
}

/* Graph gi in situ (psim_profiler_insitu), in runs of their own (never the measured runs):
 * *ran TRUE when it could run whole; FALSE only on errors that end the study. */
static gboolean study_insitu(Study *st, PsimProfiler *prof, PsimGraph *g, gboolean *ran, GError **error)
{
    *ran = FALSE;
    if (st->no_in_situ)
        return TRUE;
    g_autofree char *what = g_strdup_printf("%s: profiling in situ", psim_graph_name(g));
    progress(&st->prog, what);
    PsimInsituOptions io;
    psim_cli_insitu_options(&io, INSITU_STEPS, PSIM_CLI_INSITU_PASSES);
    return psim_cli_profile_insitu(prof, g, &st->feeds, &io, NULL, ran, error);
}

/* Graph gi's kernels that the DB lacks. Each graph is profiled right before its plans run, not
 * all graphs first: the speed of a shared host drifts over minutes, and the simulated and the
 * measured steps should see the same machine. In situ first where the graph runs whole (*insitu
 * TRUE), then kernels timed alone for the signatures it left; links and calibration once. */
static PsimProfiler *study_profile_graph(Study *st, guint gi, gboolean *insitu, GError **error)
{
    PsimGraph *g = g_ptr_array_index(st->graphs, gi);
    st->po.calibrate = gi == 0;
    st->po.links = gi == 0 && !st->m; /* over MPI the links are the transport's (study_mpi_links) */
    g_autoptr(PsimProfiler) prof = psim_profiler_new(st->cluster, st->db, &st->po, error);
    if (!prof || !study_insitu(st, prof, g, insitu, error))
        return NULL;
    g_autofree char *what = g_strdup_printf("%s: profiling what the cost DB lacks", psim_graph_name(g));
    progress(&st->prog, what);
    PsimProfileReport rep;
    if (!psim_profiler_run(prof, &g, 1, &rep, error))
        return NULL;
    if (st->prog.tty)
        fputc('\n', stderr);
    st->prog.done++;
    g_autofree char *msg = g_strdup_printf("%s: profiled: %d measured, %d already in the DB", psim_graph_name(g),
                                           rep.measured, rep.skipped);
    progress(&st->prog, msg);
    return g_steal_pointer(&prof);
}

/* The measured rounds of one graph's trials. Every algorithm was placed and simulated; the
 * plans run in `rounds` rounds, each algorithm's steps in turn within a round (each round from
 * the next algorithm), so that a slow spell of a shared machine falls on all of them rather
 * than on one (each row's figure is the trimmed mean of all its steps); the last round also records each measured timeline. With a
 * session, the graph's kernels are profiled again in passes spread between the rounds
 * (profile_rounds / rounds passes before each); with a link session, the links between CPU
 * devices (one pass before each). */
static gboolean study_measure(Study *st, Trial *trials, PsimProfileSession *session, PsimCliInsitu *insitu,
                              PsimLinkSession *links, PsimMpiLinkSession *mpi_links, PsimTimeline **run_tl,
                              GError **error)
{
    PsimGraph *g = trials[0].g;
    for (int round = 0; round < st->rounds; round++) {
        int k = st->steps / st->rounds + (round < st->steps % st->rounds ? 1 : 0);
        if (insitu) {
            g_autofree char *what = g_strdup_printf("%s: in-situ pass (round %d of %d)", psim_graph_name(g),
                                                    round + 1, st->rounds);
            progress(&st->prog, what);
            int n = INSITU_STEPS * (round + 1) / st->rounds - INSITU_STEPS * round / st->rounds;
            if (!psim_cli_insitu_pass(insitu, MAX(n, 1), error))
                return FALSE;
        }
        if (links) {
            g_autofree char *what = g_strdup_printf("%s: links pass (round %d of %d)", psim_graph_name(g),
                                                    round + 1, st->rounds);
            progress(&st->prog, what);
            if (!psim_link_session_pass(links, error))
                return FALSE;
        }
        if (mpi_links) {
            g_autofree char *what = g_strdup_printf("%s: links between MPI tasks (round %d of %d)",
                                                    psim_graph_name(g), round + 1, st->rounds);
            progress(&st->prog, what);
            if (!psim_mpi_link_session_pass(mpi_links, error))
                return FALSE;
        }
        if (session) {
            g_autofree char *what = g_strdup_printf("%s: profile passes (round %d of %d)", psim_graph_name(g),
                                                    round + 1, st->rounds);
            progress(&st->prog, what);
            psim_profile_session_passes(session, st->profile_rounds * (round + 1) / st->rounds -
                                                     st->profile_rounds * round / st->rounds);
        }
        /* Each round starts one algorithm later, so that no plan always follows the same one
         * (what a plan leaves in the caches, or the other core's state, is then spread over
         * all of them rather than biasing one). */
        for (int j = 0; j < st->n_algos; j++) {
            int a = (j + round) % st->n_algos;
            Trial *t = &trials[a];
            if (t->r->error)
                continue;
            g_autofree char *what = g_strdup_printf("%s / %s (round %d of %d)", t->r->graph, t->r->algo,
                                                    round + 1, st->rounds);
            progress(&st->prog, what);
            if (!trial_measure(t, st->cluster, st->m, st->order, k, round == st->rounds - 1 ? &run_tl[a] : NULL) &&
                st->m) {
                /* Over MPI a plan that failed may have left the tasks mid-step: the study ends. */
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s / %s: %s", t->r->graph, t->r->algo,
                            t->r->error);
                return FALSE;
            }
        }
    }
    return TRUE;
}

/* The largest tensor of g, in bytes (the largest a plan of it can transfer). */
static uint64_t study_max_tensor_bytes(const PsimGraph *g)
{
    uint64_t m = 1;
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t k = 0; k < n->n_outputs; k++)
            m = MAX(m, n->outputs[k].bytes);
    }
    return m;
}

/* Over MPI: the links between every two tasks, timed through the transport (as
 * `profile --mpi`) at the profiler's link sizes (x4 steps) up to the first at or past g's
 * largest tensor, right before its plans are placed. */
static uint64_t study_mpi_link_max(Study *st, PsimGraph *g)
{
    uint64_t max = st->po.link_min_bytes, largest = study_max_tensor_bytes(g);
    while (max < largest && max * 4 <= st->po.link_max_bytes)
        max *= 4;
    return max;
}

static gboolean study_mpi_links(Study *st, PsimGraph *g, GError **error)
{
    g_autofree char *what = g_strdup_printf("%s: timing the links between MPI tasks", psim_graph_name(g));
    progress(&st->prog, what);
    return psim_mpi_profile_links(st->m, st->db, st->po.link_min_bytes, study_mpi_link_max(st, g), error) >= 0;
}

/* One graph: profile, place and simulate with every algorithm, measure, refresh, compare. */
static gboolean study_graph(Study *st, guint gi, GError **error)
{
    PsimGraph *g = g_ptr_array_index(st->graphs, gi);
    g_autoptr(PsimProfiler) prof = NULL;
    gboolean insitu = FALSE;
    if (!st->no_profile && !(prof = study_profile_graph(st, gi, &insitu, error)))
        return FALSE;
    if (prof && st->m && !study_mpi_links(st, g, error))
        return FALSE;
    g_autoptr(PsimCostModel) model = psim_cost_model_new(st->cluster, st->db);
    guint first = st->rows->len;
    for (int a = 0; a < st->n_algos; a++) {
        Row r = {.graph = g_strdup(psim_graph_name(g)), .algo = g_strdup(st->algo_list[a])};
        g_array_append_val(st->rows, r);
    }
    g_autofree Trial *trials = g_new0(Trial, st->n_algos + 1);
    for (int a = 0; a < st->n_algos; a++) {
        trials[a] = (Trial){.r = &g_array_index(st->rows, Row, first + a), .g = g, .feed_args = &st->feeds};
        trial_prepare(&trials[a], model, st->order);
    }
    /* The refresh: the host's speed drifts by 5-30% over a minute (the profiler's raw figures,
     * docs/validation.md): a profile taken before placing, a minute before the steps, then
     * shifted whole models' errors by up to 17%. */
    g_autoptr(PsimProfileSession) session = NULL;
    if (prof && !st->no_refresh && !insitu) {
        GError *err = NULL;
        session = psim_profile_session_new(prof, g, &err);
        if (!session) {
            fprintf(stderr, "placesim: warning: %s; its plans are simulated with the rows profiled before the runs\n",
                    err->message);
            g_clear_error(&err);
        }
    }
    /* In situ, the refresh is an in-situ profile in passes of its own, one before each measured
     * round (the kernels' refresh would time rows the model no longer reads): a shared host's
     * caches and memory switch between fast and slow spells lasting seconds (docs/validation.md),
     * and the rows should sample the same spells as the steps they predict. */
    g_autoptr(PsimCliInsitu) ci = NULL;
    if (insitu && !st->no_refresh) {
        PsimInsituOptions io; /* as the measured steps are warmed up and measured (trial_measure) */
        psim_cli_insitu_options(&io, INSITU_STEPS, 1);
        GError *err = NULL;
        if (!(ci = psim_cli_insitu_new(prof, g, &st->feeds, &io, &err)) && err) {
            g_propagate_error(error, err);
            return FALSE;
        }
    }
    /* The links between CPU devices, what a transfer leaves its source to pay and the cold-block
     * curves likewise, one pass before each round: the study's first profile times them once,
     * and a spell of the host then (twice as fast one way, no reclaim at all: docs/validation.md)
     * would decide every graph's split plans. */
    g_autoptr(PsimLinkSession) links = NULL;
    if (prof && !st->no_refresh && !st->m) {
        GError *err = NULL;
        links = psim_link_session_new(prof, st->rounds, TRUE, study_max_tensor_bytes(g), &err);
        if (err) {
            g_propagate_error(error, err);
            return FALSE;
        }
    }
    /* Over MPI, the links between the tasks likewise, through the transport. */
    g_autoptr(PsimMpiLinkSession) mpi_links = NULL;
    if (prof && !st->no_refresh && st->m)
        mpi_links = psim_mpi_link_session_new(st->m, st->po.link_min_bytes, study_mpi_link_max(st, g), st->rounds);
    g_autofree PsimTimeline **run_tl = g_new0(PsimTimeline *, st->n_algos + 1);
    gboolean ok = study_measure(st, trials, session, ci, links, mpi_links, run_tl, error);
    /* The refresh's rows replace the DB's; the plans are simulated again with them. */
    gboolean refreshed = FALSE;
    if (ok && ci) {
        progress(&st->prog, "storing the in-situ profile of the rounds");
        ok = refreshed = psim_cli_insitu_finish(g_steal_pointer(&ci), NULL, error);
    }
    if (ok && links) {
        progress(&st->prog, "storing the links of the rounds");
        ok = refreshed = psim_link_session_finish(g_steal_pointer(&links), NULL, error);
    }
    if (ok && mpi_links) {
        progress(&st->prog, "storing the links between MPI tasks of the rounds");
        ok = refreshed = psim_mpi_link_session_finish(g_steal_pointer(&mpi_links), st->db, error) >= 0;
    }
    if (ok && session) {
        progress(&st->prog, "storing the refreshed profile");
        ok = refreshed = psim_profile_session_finish(g_steal_pointer(&session), NULL, error);
    }
    if (refreshed) {
        g_autoptr(PsimCostModel) fresh = psim_cost_model_new(st->cluster, st->db);
        for (int a = 0; a < st->n_algos; a++)
            if (!trials[a].r->error)
                trial_simulate(&trials[a], fresh, st->order);
    }
    for (int a = 0; a < st->n_algos; a++) {
        if (ok && !trials[a].r->error)
            trial_finish(&trials[a], run_tl[a], st->out_dir, st->outs, st->sqlite_tmp, st->gnuplot);
        if (ok && !trials[a].r->error)
            trial_save_plan(&trials[a], st->cluster, g_ptr_array_index(st->sources, gi),
                            g_array_index(st->fused, gboolean, gi), st->out_dir, st->outs);
        psim_timeline_free(run_tl[a]);
        trial_clear(&trials[a]);
        st->prog.done++;
    }
    return ok;
}

/* The measured step of row i's placement: the mean over the rows i0..i1 of its graph that ran
 * the same placement (plan_key) and did not fail. */
static double placement_measured(GArray *rows, guint i0, guint i1, guint i)
{
    const Row *a = &g_array_index(rows, Row, i);
    double sum = 0;
    int n = 0;
    for (guint j = i0; j < i1; j++) {
        const Row *b = &g_array_index(rows, Row, j);
        if (!b->error && b->plan_key == a->plan_key) {
            sum += b->measured_us;
            n++;
        }
    }
    return n ? sum / n : a->measured_us;
}

/* Per graph (its rows are consecutive): the choice from the simulations alone, then its
 * regret from the measurements, each placement once (placement_measured). */
static void study_choose(Study *st)
{
    GArray *rows = st->rows;
    st->choices = g_array_new(FALSE, FALSE, sizeof(Choice));
    g_autofree double *regrets = g_new(double, rows->len + 1);
    int n_regrets = 0;
    for (guint i0 = 0; i0 < rows->len;) {
        guint i1 = i0;
        const char *graph = g_array_index(rows, Row, i0).graph;
        while (i1 < rows->len && !strcmp(g_array_index(rows, Row, i1).graph, graph))
            i1++;
        g_autofree PsimCliCandidate *c = g_new0(PsimCliCandidate, i1 - i0);
        Choice ch = {.chosen = -1, .best = -1, .single = -1};
        for (guint i = i0; i < i1; i++) {
            const Row *r = &g_array_index(rows, Row, i);
            c[i - i0] = (PsimCliCandidate){.sim_us = r->error ? INFINITY : r->sim_us,
                                           .devices = r->n_devices_used, .transfers = r->n_transfers};
            if (r->error)
                continue;
            double us = placement_measured(rows, i0, i1, i);
            if (ch.best < 0 || us < ch.best_us) {
                ch.best = (int)i;
                ch.best_us = us;
            }
            if (!strcmp(r->algo, "single")) {
                ch.single = (int)i;
                ch.single_us = us;
            }
        }
        int pick = psim_cli_choose(c, (int)(i1 - i0), PSIM_CLI_TIE_PCT, &ch.simpler);
        if (pick >= 0 && ch.best >= 0) {
            ch.chosen = (int)i0 + pick;
            ch.chosen_us = placement_measured(rows, i0, i1, (guint)ch.chosen);
            ch.regret_pct = 100 * (ch.chosen_us / ch.best_us - 1);
            regrets[n_regrets++] = ch.regret_pct;
            st->regret_worst = MAX(st->regret_worst, ch.regret_pct);
            if (ch.single >= 0) {
                ch.vs_single_pct = 100 * (ch.chosen_us / ch.single_us - 1);
                st->vs_single_worst = MAX(st->vs_single_worst, ch.vs_single_pct);
                st->n_lose += ch.vs_single_pct > 2;
            }
            g_array_append_val(st->choices, ch);
        }
        i0 = i1;
    }
    st->regret_med = psim_stats_median(regrets, n_regrets);
}

/* The noise floor: per graph, each set of rows that ran the same placement (plan_key). */
static void study_noise(Study *st)
{
    GArray *rows = st->rows;
    g_autofree double *spread = g_new(double, rows->len + 1);
    g_autofree guint8 *seen = g_new0(guint8, rows->len + 1);
    st->noise_groups = 0;
    st->noise_worst = 0;
    for (guint i = 0; i < rows->len; i++) {
        const Row *a = &g_array_index(rows, Row, i);
        if (a->error || seen[i])
            continue;
        double lo = a->measured_us, hi = a->measured_us;
        int n = 1;
        for (guint j = i + 1; j < rows->len; j++) {
            const Row *b = &g_array_index(rows, Row, j);
            if (b->error || seen[j] || b->plan_key != a->plan_key || strcmp(b->graph, a->graph))
                continue;
            seen[j] = 1;
            lo = MIN(lo, b->measured_us);
            hi = MAX(hi, b->measured_us);
            n++;
        }
        if (n >= 2 && lo > 0) {
            spread[st->noise_groups++] = 100 * (hi / lo - 1);
            st->noise_worst = MAX(st->noise_worst, 100 * (hi / lo - 1));
        }
    }
    st->noise_med = st->noise_groups ? psim_stats_median(spread, st->noise_groups) : 0;
}

static void study_summarize(Study *st)
{
    GArray *rows = st->rows;
    g_autofree double *abs_err = g_new(double, rows->len + 1);
    g_autofree double *placed_err = g_new(double, rows->len + 1);
    st->n_ok = 0;
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        if (r->error)
            continue;
        placed_err[st->n_ok] = fabs(r->placed_error_pct);
        abs_err[st->n_ok++] = fabs(r->error_pct);
        st->worst = MAX(st->worst, fabs(r->error_pct));
        st->placed_worst = MAX(st->placed_worst, fabs(r->placed_error_pct));
    }
    st->med = psim_stats_median(abs_err, st->n_ok);
    st->placed_med = psim_stats_median(placed_err, st->n_ok);
    study_choose(st);
    study_noise(st);
}

/* report.md's section on the choices (g_free). */
static char *choices_markdown(const Study *st)
{
    GString *md = g_string_new(NULL);
    g_string_append_printf(md, "\n## Choices\n\nThe plan the study would choose for each graph from its "
                               "simulations alone (lowest simulated step; plans within %g%% of it, the "
                               "simulator's error bound, are a tie that goes to the plan on fewer devices, then "
                               "with fewer transfers), its measured step, the fastest plan as measured, and the "
                               "regret (chosen measured / best measured - 1). Plans that are the same "
                               "placement (made by different algorithms) count as one plan, measured as the "
                               "mean of their rows.\n\n"
                               "| graph | chosen | measured µs | best | measured µs | regret | single measured µs |\n"
                               "|---|---|---|---|---|---|---|\n",
                           PSIM_CLI_TIE_PCT);
    for (guint i = 0; st->choices && i < st->choices->len; i++) {
        const Choice *c = &g_array_index(st->choices, Choice, i);
        const Row *ch = &g_array_index(st->rows, Row, c->chosen), *best = &g_array_index(st->rows, Row, c->best);
        g_string_append_printf(md, "| %s | %s%s | %.1f | %s | %.1f | %.2f%% | ", ch->graph, ch->algo,
                               c->simpler ? " (simpler)" : "", c->chosen_us, best->algo, c->best_us,
                               c->regret_pct);
        if (c->single >= 0)
            g_string_append_printf(md, "%.1f |\n", c->single_us);
        else
            g_string_append(md, "|\n");
    }
    g_string_append_printf(md, "\n**Regret: median %.2f%%, worst %.2f%%.** Chosen plans measured more than 2%% "
                               "slower than `single`: %d (worst %+.2f%%).\n", st->regret_med, st->regret_worst,
                           st->n_lose, st->vs_single_worst);
    g_string_append(md, "\n## Error by algorithm and by devices used\n\nA plan on one device and a plan split "
                        "over several are predicted from the same profiles; neither was measured while profiling.\n\n"
                        "| rows | runs | median abs error | worst | mean signed error |\n|---|---|---|---|---|\n");
    for (int i = 0; i < st->n_algos + 2; i++) {
        const char *algo = i < st->n_algos ? st->algo_list[i] : NULL;
        ErrStats e = err_stats(st->rows, algo, i < st->n_algos ? 0 : i - st->n_algos + 1);
        g_string_append_printf(md, "| %s | %d | %.2f%% | %.2f%% | %+.2f%% |\n",
                               algo ? algo : i == st->n_algos ? "plans on one device" : "plans on several devices",
                               e.n, e.med, e.worst, e.mean);
    }
    if (st->noise_groups)
        g_string_append_printf(md, "\n**Noise floor:** %d sets of plans were the same placement (made by different "
                                   "algorithms) and measured a median %.2f%% apart (max/min - 1; worst %.2f%%): errors "
                                   "below that say nothing about the model.\n",
                               st->noise_groups, st->noise_med, st->noise_worst);
    if (st->gnuplot)
        g_string_append(md, "\n![predicted against measured](accuracy.png)\n");
    return g_string_free(md, FALSE);
}

/* accuracy.png: each plan's simulated against its measured step (log-log), y = x and +-3%,
 * plans on one device apart from plans on several. FALSE when gnuplot failed. */
static gboolean accuracy_plot(GArray *rows, const char *png)
{
    GString *s = g_string_new(NULL);
    double lo = INFINITY, hi = 0;
    for (guint i = 0; i < rows->len; i++) {
        const Row *r = &g_array_index(rows, Row, i);
        if (r->error || r->measured_us <= 0 || r->sim_us <= 0)
            continue;
        lo = MIN(lo, MIN(r->sim_us, r->measured_us));
        hi = MAX(hi, MAX(r->sim_us, r->measured_us));
    }
    if (!(hi > 0)) {
        g_string_free(s, TRUE);
        return FALSE;
    }
    g_string_append_printf(s, "set terminal pngcairo size 720,640 font ',10'\nset output '%s'\n"
                              "set title 'simulated against measured step time' noenhanced\n"
                              "set logscale xy\nset xrange [%g:%g]\nset yrange [%g:%g]\nset grid\n"
                              "set xlabel 'measured step (us)'\nset ylabel 'simulated step (us)'\nset key top left\n"
                              "plot x title 'y = x' lc rgb '#333333', 1.03*x title '+-3%%' dt 2 lc rgb '#999999', "
                              "0.97*x notitle dt 2 lc rgb '#999999', "
                              "'-' using 1:2 title 'one device' pt 7 ps 1.1 lc rgb '#4e79a7', "
                              "'-' using 1:2 title 'several devices' pt 5 ps 1.1 lc rgb '#e15759'\n",
                           png, lo / 1.3, hi * 1.3, lo / 1.3, hi * 1.3);
    for (int pass = 0; pass < 2; pass++) {
        for (guint i = 0; i < rows->len; i++) {
            const Row *r = &g_array_index(rows, Row, i);
            if (!r->error && r->measured_us > 0 && r->sim_us > 0 && (r->n_devices_used > 1) == pass)
                g_string_append_printf(s, "%.3f %.3f\n", r->measured_us, r->sim_us);
        }
        g_string_append(s, "e\n");
    }
    gboolean ok = psim_gnuplot_run(s->str, NULL);
    g_string_free(s, TRUE);
    return ok;
}

/* report.md, results.csv, the plot and the results table, then every output renamed in place. */
static gboolean study_write(Study *st, GError **error)
{
    gboolean refreshed = !st->no_profile && !st->no_refresh;
    int32_t nd = psim_cluster_n_devices(st->cluster);
    g_autofree char *mpi_desc = st->m ? g_strdup_printf("%d MPI tasks", psim_mpi_size(st->m)) : NULL;
    g_autofree char *cdesc = g_strdup_printf("%s (%d device%s)", mpi_desc ? mpi_desc : st->cluster_spec ? st->cluster_spec : "local",
                                             nd, nd == 1 ? "" : "s");
    g_autofree char *choices_md = choices_markdown(st);
    if (st->gnuplot && st->rows->len) {
        g_autofree char *path = g_build_filename(st->out_dir, "accuracy.png", NULL);
        const char *png = psim_cli_output(st->outs, path, FALSE, NULL);
        if (png)
            accuracy_plot(st->rows, png);
    }
    return write_results(st->rows, st->out_dir, st->outs, st->gnuplot, cdesc, st->steps, st->rounds, refreshed,
                         st->med, st->worst, st->placed_med, st->placed_worst, choices_md,
                         st->m ? "; the links between MPI tasks, timed through the transport before placing, "
                                 "again in passes, one before each round"
                               : "; on several CPU devices, the links between them, what a transfer leaves its source "
                                 "to pay and the cold-block curves too, a pass before each round",
                         error) &&
           write_sqlite(st->rows, st->sqlite_tmp, error) && psim_cli_outputs_commit(st->outs, error);
}

static void study_print_json(const Study *st)
{
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    if (st->m) {
        json_builder_set_member_name(b, "mpi_tasks");
        json_builder_add_int_value(b, psim_mpi_size(st->m));
    }
    json_builder_set_member_name(b, "rows");
    json_builder_begin_array(b);
    for (guint i = 0; i < st->rows->len; i++) {
        Row *r = &g_array_index(st->rows, Row, i);
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "graph");
        json_builder_add_string_value(b, r->graph);
        json_builder_set_member_name(b, "algo");
        json_builder_add_string_value(b, r->algo);
        if (r->error) {
            json_builder_set_member_name(b, "error");
            json_builder_add_string_value(b, r->error);
        } else {
            json_builder_set_member_name(b, "sim_us");
            json_builder_add_double_value(b, r->sim_us);
            json_builder_set_member_name(b, "measured_us");
            json_builder_add_double_value(b, r->measured_us);
            json_builder_set_member_name(b, "error_pct");
            json_builder_add_double_value(b, r->error_pct);
            json_builder_set_member_name(b, "placed_sim_us");
            json_builder_add_double_value(b, r->placed_sim_us);
            json_builder_set_member_name(b, "placed_error_pct");
            json_builder_add_double_value(b, r->placed_error_pct);
            json_builder_set_member_name(b, "plan_us");
            json_builder_add_double_value(b, r->plan_us);
            json_builder_set_member_name(b, "op_median_abs_error_pct");
            json_builder_add_double_value(b, r->op_error_pct);
            json_builder_set_member_name(b, "transfers");
            json_builder_add_int_value(b, r->n_transfers);
            /* Rows of a graph with the same key ran the same placement. */
            char key[17];
            g_snprintf(key, sizeof key, "%016" G_GINT64_MODIFIER "x", r->plan_key);
            json_builder_set_member_name(b, "placement");
            json_builder_add_string_value(b, key);
            if (r->plan_file) {
                json_builder_set_member_name(b, "plan");
                json_builder_add_string_value(b, r->plan_file);
            }
            psim_cli_cost_sources_json(b, &r->sources);
        }
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "tie_pct");
    json_builder_add_double_value(b, PSIM_CLI_TIE_PCT);
    json_builder_set_member_name(b, "choices");
    json_builder_begin_array(b);
    for (guint i = 0; st->choices && i < st->choices->len; i++) {
        const Choice *c = &g_array_index(st->choices, Choice, i);
        const Row *ch = &g_array_index(st->rows, Row, c->chosen), *best = &g_array_index(st->rows, Row, c->best);
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "graph");
        json_builder_add_string_value(b, ch->graph);
        json_builder_set_member_name(b, "chosen");
        json_builder_add_string_value(b, ch->algo);
        json_builder_set_member_name(b, "chosen_sim_us");
        json_builder_add_double_value(b, ch->sim_us);
        json_builder_set_member_name(b, "chosen_measured_us");
        json_builder_add_double_value(b, c->chosen_us);
        json_builder_set_member_name(b, "simpler");
        json_builder_add_boolean_value(b, c->simpler);
        json_builder_set_member_name(b, "best");
        json_builder_add_string_value(b, best->algo);
        json_builder_set_member_name(b, "best_measured_us");
        json_builder_add_double_value(b, c->best_us);
        json_builder_set_member_name(b, "regret_pct");
        json_builder_add_double_value(b, c->regret_pct);
        json_builder_set_member_name(b, "vs_single_pct");
        if (c->single >= 0)
            json_builder_add_double_value(b, c->vs_single_pct);
        else
            json_builder_add_null_value(b);
        json_builder_set_member_name(b, "single_measured_us");
        if (c->single >= 0)
            json_builder_add_double_value(b, c->single_us);
        else
            json_builder_add_null_value(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "median_regret_pct");
    json_builder_add_double_value(b, st->regret_med);
    json_builder_set_member_name(b, "max_regret_pct");
    json_builder_add_double_value(b, st->regret_worst);
    psim_cli_json_double(b, "max_vs_single_pct", st->vs_single_worst);
    json_builder_set_member_name(b, "noise_floor");
    json_builder_begin_object(b);
    psim_cli_json_int(b, "groups", st->noise_groups);
    psim_cli_json_double(b, "median_spread_pct", st->noise_med);
    psim_cli_json_double(b, "max_spread_pct", st->noise_worst);
    json_builder_end_object(b);
    psim_cli_json_int(b, "choices_slower_than_single", st->n_lose);
    /* Error per algorithm, and on one device apart from several. */
    json_builder_set_member_name(b, "errors");
    json_builder_begin_array(b);
    for (int i = 0; i < st->n_algos + 2; i++) {
        const char *algo = i < st->n_algos ? st->algo_list[i] : NULL;
        int devices = i < st->n_algos ? 0 : i - st->n_algos + 1;
        ErrStats e = err_stats(st->rows, algo, devices);
        json_builder_begin_object(b);
        if (algo)
            psim_cli_json_string(b, "algo", algo);
        else
            psim_cli_json_string(b, "devices", devices == 1 ? "one" : "several");
        psim_cli_json_int(b, "runs", e.n);
        psim_cli_json_double(b, "median_abs_error_pct", e.med);
        psim_cli_json_double(b, "max_abs_error_pct", e.worst);
        psim_cli_json_double(b, "mean_signed_error_pct", e.mean);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "median_abs_error_pct");
    json_builder_add_double_value(b, st->n_ok ? st->med : 0);
    json_builder_set_member_name(b, "max_abs_error_pct");
    json_builder_add_double_value(b, st->worst);
    json_builder_set_member_name(b, "placed_median_abs_error_pct");
    json_builder_add_double_value(b, st->n_ok ? st->placed_med : 0);
    json_builder_set_member_name(b, "placed_max_abs_error_pct");
    json_builder_add_double_value(b, st->placed_worst);
    json_builder_set_member_name(b, "out");
    json_builder_add_string_value(b, st->out_dir);
    json_builder_end_object(b);
    psim_cli_print_json(b);
}

static void study_print_text(const Study *st)
{
    printf("%-18s %-12s %12s %12s %9s %8s\n", "graph", "algo", "sim us", "measured us", "error", "xfers");
    for (guint i = 0; i < st->rows->len; i++) {
        Row *r = &g_array_index(st->rows, Row, i);
        if (r->error)
            printf("%-18.18s %-12s failed: %s\n", r->graph, r->algo, r->error);
        else
            printf("%-18.18s %-12s %12.1f %12.1f %+8.2f%% %8d\n", r->graph, r->algo, r->sim_us, r->measured_us,
                   r->error_pct, r->n_transfers);
    }
    /* Where the simulations' costs came from, over every plan that ran. */
    PsimCliCostSources all = {0};
    for (guint i = 0; i < st->rows->len; i++) {
        const Row *r = &g_array_index(st->rows, Row, i);
        for (int k = 0; k < (int)G_N_ELEMENTS(all.n); k++)
            all.n[k] += r->error ? 0 : r->sources.n[k];
    }
    if (st->choices && st->choices->len) {
        printf("\n%-18s %-12s %12s %-12s %12s %8s\n", "graph", "chosen", "measured us", "best", "measured us",
               "regret");
        for (guint i = 0; i < st->choices->len; i++) {
            const Choice *c = &g_array_index(st->choices, Choice, i);
            const Row *ch = &g_array_index(st->rows, Row, c->chosen), *best = &g_array_index(st->rows, Row, c->best);
            printf("%-18.18s %-12s %12.1f %-12s %12.1f %7.2f%%", ch->graph, ch->algo, c->chosen_us, best->algo,
                   c->best_us, c->regret_pct);
            if (c->simpler)
                printf("  (simpler plan within %g%% of the fastest)", PSIM_CLI_TIE_PCT);
            putchar('\n');
        }
        printf("regret of the choices: median %.2f%%, worst %.2f%%; chosen more than 2%% slower than single: %d "
               "(worst %+.2f%%)\n", st->regret_med, st->regret_worst, st->n_lose, st->vs_single_worst);
    }
    printf("\n%-26s %5s %10s %8s %12s\n", "error of", "runs", "median |e|", "worst", "mean signed");
    for (int i = 0; i < st->n_algos + 2; i++) {
        const char *algo = i < st->n_algos ? st->algo_list[i] : NULL;
        ErrStats e = err_stats(st->rows, algo, i < st->n_algos ? 0 : i - st->n_algos + 1);
        printf("%-26s %5d %9.2f%% %7.2f%% %+11.2f%%\n",
               algo ? algo : i == st->n_algos ? "plans on one device" : "plans on several devices", e.n, e.med,
               e.worst, e.mean);
    }
    if (st->noise_groups)
        printf("\nnoise floor: %d sets of identical plans measured a median %.2f%% apart (worst %.2f%%)\n",
               st->noise_groups, st->noise_med, st->noise_worst);
    g_autofree char *costs = psim_cli_cost_sources_line(&all);
    printf("\nmedian |error| %.2f%%, worst %.2f%% (%d runs); report: %s/report.md\n", st->n_ok ? st->med : 0,
           st->worst, st->n_ok, st->out_dir);
    printf("costs: %s, over the %d plans\n", costs, st->n_ok);
    if (!st->no_profile && !st->no_refresh)
        printf("(simulated with the profile refreshed between the measured rounds; at placement: median "
               "|error| %.2f%%, worst %.2f%%)\n", st->n_ok ? st->placed_med : 0, st->placed_worst);
}

/* A study writes its report when some rows failed (they say why in it) and exits 1 then; it
 * writes nothing when a step before the report fails. */
int psim_cmd_study(int argc, char **argv)
{
    Study st = {0};
    GError *err = NULL;
    int code = 0;
    if (!study_parse(&st, &argc, &argv, &err)) {
        code = psim_cli_flags_failed(err, st.mpi);
        goto out;
    }
    if (st.mpi && !(st.m = psim_cli_mpi_start(&argc, &argv, &code)))
        goto out; /* a task that served rank 0's plans, or MPI did not start */
    if (!study_open(&st, argc, argv, &err)) { /* the tasks are told to quit (psim_mpi_free) */
        code = err ? psim_cli_fail(err) : 2;
        goto out;
    }
    for (guint gi = 0; gi < st.graphs->len; gi++)
        if (!study_graph(&st, gi, &err)) {
            code = psim_cli_mpi_fail(st.m, err); /* over MPI every rank ends at once */
            goto out;
        }
    progress(&st.prog, "done");
    study_summarize(&st);
    if (!study_write(&st, &err)) {
        code = psim_cli_fail(err);
        goto out;
    }
    if (st.json)
        study_print_json(&st);
    else
        study_print_text(&st);
    code = st.n_ok == (int)st.rows->len ? 0 : 1;
out:
    study_clear(&st);
    psim_mpi_free(st.m);
    return code;
}
