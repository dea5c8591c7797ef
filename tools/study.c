/* placesim study: for each graph and placement algorithm, profile what the cost DB lacks, place,
 * simulate, run the same plan for real, and compare; writes a report with tables and plots. */
#include <errno.h>
#include <glib/gstdio.h>
#include <sqlite3.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
    double place_ms, sim_ms;
    char *gantt;          /* file name of the side-by-side plot, or NULL */
    char *error;          /* why this row has no figures, or NULL */
} Row;

static void row_free(Row *r)
{
    g_free(r->graph);
    g_free(r->algo);
    g_free(r->gantt);
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
    return TRUE;
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
    t->feed_names = g_ptr_array_new_with_free_func(g_free);
    t->feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    t->fetches = g_ptr_array_new_with_free_func(g_free);
    t->times = g_array_new(FALSE, FALSE, sizeof(double));
    if (!psim_cli_default_feeds(t->g, t->feed_names, t->feeds, &err)) {
        trial_fail(t, err);
        return FALSE;
    }
    g_autoptr(GArray) ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    psim_cli_default_fetches(t->g, ports);
    for (guint k = 0; k < ports->len; k++)
        g_ptr_array_add(t->fetches, psim_port_to_string(t->g, g_array_index(ports, PsimPort, k)));
    return TRUE;
}

#define WARMUP_MS 50

/* One step of the plan, its fetched outputs dropped. FALSE (the row's error set) on failure. */
static gboolean trial_step(Trial *t, PsimPlanExec *px, PsimTensor **outs)
{
    GError *err = NULL;
    if (!psim_plan_exec_run(px, (PsimTensor *const *)t->feeds->pdata, outs, &err)) {
        trial_fail(t, err);
        return FALSE;
    }
    for (guint k = 0; k < t->fetches->len; k++)
        g_clear_pointer(&outs[k], psim_tensor_unref);
    return TRUE;
}

/* Runs the plan for real: warm-up steps, then `steps` measured ones appended to t->times.
 * With run_tl, one more step whose measured timeline goes there. */
static gboolean trial_measure(Trial *t, PsimCluster *c, PsimOrder order, int steps, PsimTimeline **run_tl)
{
    GError *err = NULL;
    g_autoptr(PsimPlanExec) px =
        psim_plan_exec_new(t->plan, c, (const char *const *)t->feed_names->pdata, (int32_t)t->feeds->len,
                           (const char *const *)t->fetches->pdata, (int32_t)t->fetches->len,
                           order == PSIM_ORDER_DYNAMIC, &err);
    if (!px) {
        trial_fail(t, err);
        return FALSE;
    }
    g_autofree PsimTensor **outs = g_new0(PsimTensor *, t->fetches->len + 1);
    /* Warm-up: at least one step and WARMUP_MS (pools filled, pages mapped, caches and the
     * devices' cores awake), then the measured steps. */
    gint64 warm_end = g_get_monotonic_time() + WARMUP_MS * 1000;
    int n_warm = 0;
    while (n_warm < 1 || (n_warm < 10000 && g_get_monotonic_time() < warm_end)) {
        if (!trial_step(t, px, outs))
            return FALSE;
        n_warm++;
    }
    for (int s = 0; s < steps + (run_tl ? 1 : 0); s++) {
        if (!trial_step(t, px, outs))
            return FALSE;
        if (s < steps) {
            double us = psim_plan_exec_step_us(px);
            g_array_append_val(t->times, us);
        }
    }
    if (run_tl) {
        *run_tl = psim_timeline_new(psim_graph_name(t->plan->graph), "run", t->plan->n_devices,
                                    (const char *const *)t->plan->devices);
        psim_plan_exec_timeline_add(px, *run_tl);
    }
    return TRUE;
}

/* The row's figures from the measured steps, the comparison, traces and plot. */
static void trial_finish(Trial *t, PsimTimeline *run_tl, const char *out_dir, const char *sqlite_path)
{
    GError *err = NULL;
    Row *r = t->r;
    int n = (int)t->times->len;
    double *v = (double *)t->times->data;
    r->measured_us = psim_stats_median(v, n);
    r->measured_min_us = v[0];
    r->measured_max_us = v[n - 1];
    r->error_pct = 100 * (r->sim_us - r->measured_us) / r->measured_us;
    r->placed_error_pct = 100 * (r->placed_sim_us - r->measured_us) / r->measured_us;
    PsimCompare cmp = {0};
    if (psim_timeline_compare(t->sim_tl, run_tl, &cmp, NULL))
        r->op_error_pct = cmp.median_abs_op_error_pct;
    g_autofree char *base = g_strdup_printf("%s-%s", r->graph, r->algo);
    g_autofree char *safe = safe_name(base);
    g_autofree char *sim_trace = g_strdup_printf("%s/%s.sim.json", out_dir, safe);
    g_autofree char *run_trace = g_strdup_printf("%s/%s.run.json", out_dir, safe);
    if (!psim_timeline_save_chrome(t->sim_tl, sim_trace, &err) || !psim_timeline_save_chrome(run_tl, run_trace, &err) ||
        psim_timeline_save_sqlite(t->sim_tl, sqlite_path, base, &err) < 0 ||
        psim_timeline_save_sqlite(run_tl, sqlite_path, base, &err) < 0) {
        trial_fail(t, err);
        psim_compare_clear(&cmp);
        return;
    }
    if (g_find_program_in_path("gnuplot")) {
        g_autofree char *png = g_strdup_printf("%s/%s.png", out_dir, safe);
        if (psim_compare_plot(t->sim_tl, run_tl, &cmp, png, NULL))
            r->gantt = g_strdup_printf("%s.png", safe);
    }
    psim_compare_clear(&cmp);
}

/* The results table, beside the timelines in results.sqlite. */
static gboolean write_sqlite(GArray *rows, const char *path, GError **error)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    gboolean ok = FALSE;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        goto out;
    sqlite3_busy_timeout(db, 10000);
    if (sqlite3_exec(db, "BEGIN; CREATE TABLE IF NOT EXISTS results (graph TEXT, algo TEXT, sim_us REAL,"
                         " measured_us REAL, error_pct REAL, measured_min_us REAL, measured_max_us REAL,"
                         " plan_us REAL, op_median_abs_error_pct REAL, transfers INTEGER, devices_used INTEGER,"
                         " place_ms REAL, error TEXT, placed_sim_us REAL, placed_error_pct REAL)", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK)
        goto out;
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
        if (sqlite3_step(st) != SQLITE_DONE)
            goto out;
        sqlite3_reset(st);
    }
    ok = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
out:
    if (!ok)
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: SQLite: %s", path,
                    db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

static gboolean write_results(GArray *rows, const char *dir, const char *cluster_desc, int steps,
                              int rounds, gboolean refreshed, double med, double worst, double placed_med,
                              double placed_worst, GError **error)
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
    gboolean ok = g_file_set_contents(csv_path, csv->str, (gssize)csv->len, error);
    g_string_free(csv, TRUE);
    if (!ok)
        return FALSE;

    /* The bar chart: predicted and measured step time per (graph, algo). */
    gboolean plot = g_find_program_in_path("gnuplot") != NULL && rows->len > 0;
    if (plot) {
        g_autofree char *png = g_build_filename(dir, "step-times.png", NULL);
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
                               "measured steps (median) in %d rounds, each after warm-up steps (50 ms, at least one), the "
                               "algorithms of a graph in turn within a round. Error = (simulated - "
                               "measured) / measured.\n\n", cluster_desc, steps, rounds);
    if (refreshed)
        g_string_append_printf(md, "Each graph was profiled (what the cost DB lacked), placed and simulated; then its "
                                   "kernels were profiled again in passes between its measured rounds, and each plan "
                                   "simulated again with those rows (the placement unchanged): the simulated and the "
                                   "measured steps saw the same minutes of the host. \"At placement\" is the first "
                                   "simulation: median |error| %.2f%%, worst %.2f%%.\n\n", placed_med, placed_worst);
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
    ok = g_file_set_contents(md_path, md->str, (gssize)md->len, error);
    g_string_free(md, TRUE);
    return ok;
}

int psim_cmd_study(int argc, char **argv)
{
    g_autofree char *cluster_spec = NULL, *algos = NULL, *db_path = NULL, *out_dir = NULL;
    g_autofree char *order_name = NULL, *profile_weights = NULL;
    gboolean json = FALSE, no_profile = FALSE, no_refresh = FALSE;
    int steps = 10, rounds = -1, profile_rounds = 100;
    double profile_budget = 300;
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &cluster_spec, "Cluster: local (default), local:N, a cluster file, uniform:P", "SPEC"},
        {"algos", 'a', 0, G_OPTION_ARG_STRING, &algos,
         "Comma-separated algorithms, or 'all' (default " DEFAULT_ALGOS ")", "LIST"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path, "Cost DB (default OUT/costs.db); what it lacks is profiled", "DB"},
        {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Measured steps per run (default 10)", "N"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds,
         "Measure in N rounds, the algorithms in turn within each, each after 50 ms of warm-up steps (default 10, at most --steps)", "N"},
        {"profile-rounds", 0, 0, G_OPTION_ARG_INT, &profile_rounds,
         "Profile in N interleaved passes, samples pooled (default 100; see 'placesim profile')", "N"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out_dir, "Output folder (default study-out)", "DIR"},
        {"order", 0, 0, G_OPTION_ARG_STRING, &order_name, "static (default) or dynamic", "ORDER"},
        {"no-profile", 0, 0, G_OPTION_ARG_NONE, &no_profile, "Use the DB as it is (estimates where it has no row)", NULL},
        {"no-refresh", 0, 0, G_OPTION_ARG_NONE, &no_refresh,
         "Simulate with the rows profiled before the runs (by default each graph's kernels are profiled again in "
         "passes between its measured rounds, and its plans simulated again with those rows)", NULL},
        {"profile-budget-ms", 0, 0, G_OPTION_ARG_DOUBLE, &profile_budget,
         "Profiling time budget per kernel signature and device (default 300)", "MS"},
        {"profile-weights", 0, 0, G_OPTION_ARG_STRING, &profile_weights,
         "Profiling: CPU kernels' weights cold, warm or auto (default; see 'placesim profile --help')", "MODE"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the rows", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("[GRAPH...] - place, simulate, run and compare");
    g_option_context_set_summary(ctx,
        "For each graph and algorithm: profile what the cost DB lacks, place, simulate one step,\n"
        "run the same plan for real, and compare. Writes OUT/report.md, OUT/results.csv,\n"
        "OUT/results.sqlite, Chrome traces and plots. Without GRAPH it studies the built-in models.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!psim_cli_parse(ctx, &argc, &argv, "study"))
        return 2;
    if (!(profile_budget > 0))
        return psim_cli_usage("study", "--profile-budget-ms must be positive");
    PsimProfileWeights weights = PSIM_PROFILE_WEIGHTS_AUTO;
    if (profile_weights && !psim_profile_weights_from_name(profile_weights, &weights))
        return psim_cli_usage("study", "--profile-weights must be auto, cold or warm, not '%s'", profile_weights);
    if (steps < 1 || steps > 100000)
        return psim_cli_usage("study", "--steps must be between 1 and 100000");
    if (rounds == -1)
        rounds = MIN(10, steps);
    if (rounds < 1 || rounds > steps)
        return psim_cli_usage("study", "--rounds must be between 1 and --steps");
    if (profile_rounds < 1 || profile_rounds > 1000)
        return psim_cli_usage("study", "--profile-rounds must be between 1 and 1000");
    PsimOrder order = PSIM_ORDER_STATIC;
    if (order_name && !psim_order_from_name(order_name, &order))
        return psim_cli_usage("study", "--order must be static or dynamic, not '%s'", order_name);
    g_auto(GStrv) algo_list = NULL;
    if (!algos || strcmp(algos, "all")) {
        algo_list = g_strsplit(algos ? algos : DEFAULT_ALGOS, ",", -1);
        for (int i = 0; algo_list[i]; i++)
            if (!psim_placer_lookup(algo_list[i]) || !strcmp(algo_list[i], "file"))
                return psim_cli_usage("study", "unknown algorithm '%s' (see 'placesim place --help')", algo_list[i]);
    } else {
        int32_t n = 0;
        const PsimPlacer *const *all = psim_placer_list(&n);
        GPtrArray *a = g_ptr_array_new();
        for (int32_t i = 0; i < n; i++)
            if (strcmp(all[i]->name, "file"))
                g_ptr_array_add(a, g_strdup(all[i]->name));
        g_ptr_array_add(a, NULL);
        algo_list = (GStrv)g_ptr_array_free(a, FALSE);
    }
    if (!out_dir)
        out_dir = g_strdup("study-out");
    if (g_mkdir_with_parents(out_dir, 0755) != 0) {
        fprintf(stderr, "placesim: %s: cannot create the output folder: %s\n", out_dir, g_strerror(errno));
        return 1;
    }
    if (!db_path)
        db_path = g_build_filename(out_dir, "costs.db", NULL);
    g_autofree char *sqlite_path = g_build_filename(out_dir, "results.sqlite", NULL);
    g_unlink(sqlite_path);

    GError *err = NULL;
    g_autoptr(GPtrArray) graphs = g_ptr_array_new_with_free_func((GDestroyNotify)psim_graph_free);
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            PsimGraph *g = psim_cli_load_graph(argv[i], FALSE, &err);
            if (!g)
                return psim_cli_fail(err);
            g_ptr_array_add(graphs, g);
        }
    } else {
        int32_t n = 0;
        const char *const *zoo = psim_zoo_list(&n);
        for (int32_t i = 0; i < n; i++) {
            PsimGraph *g = psim_zoo_make(zoo[i], &err);
            if (!g)
                return psim_cli_fail(err);
            g_ptr_array_add(graphs, g);
        }
    }
    g_autoptr(PsimCluster) cluster = psim_cli_cluster(cluster_spec ? cluster_spec : "local",
                                                      graphs->len ? g_ptr_array_index(graphs, 0) : NULL, &err);
    if (!cluster)
        return psim_cli_fail(err);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(db_path, &err);
    if (!db)
        return psim_cli_fail(err);

    int n_algos = (int)g_strv_length(algo_list);
    Progress prog = {.tty = psim_cli_stderr_tty(),
                     .total = (int32_t)graphs->len * (n_algos + (no_profile ? 0 : 1)),
                     .t0 = g_get_monotonic_time()};
    PsimProfileOptions po;
    psim_profile_options_init(&po);
    po.progress = profile_progress;
    po.budget_ms = profile_budget;
    po.rounds = profile_rounds;
    po.weights = weights;
    po.progress_user = &prog;
    GArray *rows = g_array_new(FALSE, TRUE, sizeof(Row));
    /* Per graph: every algorithm is placed and simulated, then the plans run in `rounds`
     * rounds, each algorithm's steps in turn within a round, so that a slow spell of a shared
     * machine falls on all of them rather than on one (each row's figure is the median of all
     * its steps); the last round also records each measured timeline. */
    g_autofree Trial *trials = g_new0(Trial, n_algos + 1);
    for (guint gi = 0; gi < graphs->len; gi++) {
        PsimGraph *g = g_ptr_array_index(graphs, gi);
        /* Each graph is profiled (what the DB lacks of it) right before its plans run, not all
         * graphs first: the speed of a shared host drifts over minutes, and the simulated and
         * the measured steps should see the same machine. Links and calibration once. */
        g_autoptr(PsimProfiler) prof = NULL;
        if (!no_profile) {
            g_autofree char *what = g_strdup_printf("%s: profiling what the cost DB lacks", psim_graph_name(g));
            progress(&prog, what);
            po.links = po.calibrate = gi == 0;
            prof = psim_profiler_new(cluster, db, &po, &err);
            PsimProfileReport rep;
            if (!prof || !psim_profiler_run(prof, &g, 1, &rep, &err))
                return psim_cli_fail(err);
            if (prog.tty)
                fputc('\n', stderr);
            prog.done++;
            g_autofree char *msg = g_strdup_printf("%s: profiled: %d measured, %d already in the DB",
                                                   psim_graph_name(g), rep.measured, rep.skipped);
            progress(&prog, msg);
        }
        g_autoptr(PsimCostModel) model = psim_cost_model_new(cluster, db);
        guint first = rows->len;
        for (int a = 0; algo_list[a]; a++) {
            Row r = {.graph = g_strdup(psim_graph_name(g)), .algo = g_strdup(algo_list[a])};
            g_array_append_val(rows, r);
        }
        for (int a = 0; a < n_algos; a++) {
            trials[a] = (Trial){.r = &g_array_index(rows, Row, first + a), .g = g};
            trial_prepare(&trials[a], model, order);
        }
        /* The refresh: the graph's kernels profiled again, in passes spread between the
         * measured rounds (profile_rounds / rounds passes before each), and the plans simulated
         * again with those rows. The host's speed drifts by 5-30% over a minute (the profiler's
         * raw figures, docs/validation.md): a profile taken before placing, a minute before the
         * steps, then shifted whole models' errors by up to 17%. */
        g_autoptr(PsimProfileSession) session = NULL;
        if (prof && !no_refresh) {
            session = psim_profile_session_new(prof, g, &err);
            if (!session) {
                fprintf(stderr, "placesim: warning: %s; its plans are simulated with the rows profiled before the runs\n",
                        err->message);
                g_clear_error(&err);
            }
        }
        g_autofree PsimTimeline **run_tl = g_new0(PsimTimeline *, n_algos + 1);
        for (int round = 0; round < rounds; round++) {
            int k = steps / rounds + (round < steps % rounds ? 1 : 0);
            if (session) {
                g_autofree char *what = g_strdup_printf("%s: profile passes (round %d of %d)", psim_graph_name(g),
                                                        round + 1, rounds);
                progress(&prog, what);
                psim_profile_session_passes(session, profile_rounds * (round + 1) / rounds -
                                                         profile_rounds * round / rounds);
            }
            for (int a = 0; a < n_algos; a++) {
                Trial *t = &trials[a];
                if (t->r->error)
                    continue;
                g_autofree char *what = g_strdup_printf("%s / %s (round %d of %d)", t->r->graph, t->r->algo,
                                                        round + 1, rounds);
                progress(&prog, what);
                trial_measure(t, cluster, order, k, round == rounds - 1 ? &run_tl[a] : NULL);
            }
        }
        if (session) {
            progress(&prog, "storing the refreshed profile");
            PsimProfileSession *s = g_steal_pointer(&session);
            if (!psim_profile_session_finish(s, NULL, &err))
                return psim_cli_fail(err);
            g_autoptr(PsimCostModel) fresh = psim_cost_model_new(cluster, db);
            for (int a = 0; a < n_algos; a++)
                if (!trials[a].r->error)
                    trial_simulate(&trials[a], fresh, order);
        }
        for (int a = 0; a < n_algos; a++) {
            if (!trials[a].r->error)
                trial_finish(&trials[a], run_tl[a], out_dir, sqlite_path);
            psim_timeline_free(run_tl[a]);
            trial_clear(&trials[a]);
            prog.done++;
        }
    }
    progress(&prog, "done");

    g_autofree double *abs_err = g_new(double, rows->len + 1);
    g_autofree double *placed_err = g_new(double, rows->len + 1);
    int n_ok = 0;
    double worst = 0, placed_worst = 0;
    for (guint i = 0; i < rows->len; i++) {
        Row *r = &g_array_index(rows, Row, i);
        if (r->error)
            continue;
        placed_err[n_ok] = fabs(r->placed_error_pct);
        abs_err[n_ok++] = fabs(r->error_pct);
        worst = MAX(worst, fabs(r->error_pct));
        placed_worst = MAX(placed_worst, fabs(r->placed_error_pct));
    }
    double med = psim_stats_median(abs_err, n_ok), placed_med = psim_stats_median(placed_err, n_ok);
    gboolean refreshed = !no_profile && !no_refresh;
    int32_t nd = psim_cluster_n_devices(cluster);
    g_autofree char *cdesc = g_strdup_printf("%s (%d device%s)", cluster_spec ? cluster_spec : "local", nd, nd == 1 ? "" : "s");
    if (!write_results(rows, out_dir, cdesc, steps, rounds, refreshed, med, worst, placed_med, placed_worst, &err)) {
        for (guint i = 0; i < rows->len; i++)
            row_free(&g_array_index(rows, Row, i));
        g_array_free(rows, TRUE);
        return psim_cli_fail(err);
    }
    /* The results table into the same SQLite file as the timelines. */
    if (!write_sqlite(rows, sqlite_path, &err)) {
        for (guint i = 0; i < rows->len; i++)
            row_free(&g_array_index(rows, Row, i));
        g_array_free(rows, TRUE);
        return psim_cli_fail(err);
    }
    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "rows");
        json_builder_begin_array(b);
        for (guint i = 0; i < rows->len; i++) {
            Row *r = &g_array_index(rows, Row, i);
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
            }
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        json_builder_set_member_name(b, "median_abs_error_pct");
        json_builder_add_double_value(b, n_ok ? med : 0);
        json_builder_set_member_name(b, "max_abs_error_pct");
        json_builder_add_double_value(b, worst);
        json_builder_set_member_name(b, "placed_median_abs_error_pct");
        json_builder_add_double_value(b, n_ok ? placed_med : 0);
        json_builder_set_member_name(b, "placed_max_abs_error_pct");
        json_builder_add_double_value(b, placed_worst);
        json_builder_set_member_name(b, "out");
        json_builder_add_string_value(b, out_dir);
        json_builder_end_object(b);
        psim_cli_print_json(b);
    } else {
        printf("%-18s %-12s %12s %12s %9s %8s\n", "graph", "algo", "sim us", "measured us", "error", "xfers");
        for (guint i = 0; i < rows->len; i++) {
            Row *r = &g_array_index(rows, Row, i);
            if (r->error)
                printf("%-18.18s %-12s failed: %s\n", r->graph, r->algo, r->error);
            else
                printf("%-18.18s %-12s %12.1f %12.1f %+8.2f%% %8d\n", r->graph, r->algo, r->sim_us,
                       r->measured_us, r->error_pct, r->n_transfers);
        }
        printf("\nmedian |error| %.2f%%, worst %.2f%% (%d runs); report: %s/report.md\n", n_ok ? med : 0,
               worst, n_ok, out_dir);
        if (refreshed)
            printf("(simulated with the profile refreshed between the measured rounds; at placement: median "
                   "|error| %.2f%%, worst %.2f%%)\n", n_ok ? placed_med : 0, placed_worst);
    }
    int code = n_ok == (int)rows->len ? 0 : 1;
    for (guint i = 0; i < rows->len; i++)
        row_free(&g_array_index(rows, Row, i));
    g_array_free(rows, TRUE);
    return code;
}
