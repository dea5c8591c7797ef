/* placesim profile: measures every distinct kernel of the graphs on every device that can run
 * it, the transfers between devices, and each device's calibration, into a cost DB. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/profiler.h"
#include "tools/cli.h"

typedef struct {
    gboolean tty;
    char *phase;
    double phase_start_ms;
    double last_print_ms;
    int width; /* characters of the last bar, to clear it */
} Progress;

static void fmt_time(char *buf, size_t n, double ms)
{
    if (!isfinite(ms) || ms < 0)
        g_strlcpy(buf, "?", n);
    else if (ms < 60e3)
        g_snprintf(buf, n, "%.1fs", ms / 1e3);
    else
        g_snprintf(buf, n, "%dm%02ds", (int)(ms / 60e3), (int)fmod(ms / 1e3, 60));
}

static void on_progress(const PsimProfileProgress *p, void *user)
{
    Progress *pr = user;
    if (!pr->phase || strcmp(pr->phase, p->phase)) {
        if (pr->tty && pr->width)
            fputc('\n', stderr);
        g_free(pr->phase);
        pr->phase = g_strdup(p->phase);
        pr->phase_start_ms = p->elapsed_ms;
        pr->last_print_ms = -1e9;
        pr->width = 0;
    }
    double in_phase = p->elapsed_ms - pr->phase_start_ms;
    double eta = p->done > 0 && p->total > 0 ? in_phase / p->done * (p->total - p->done) : NAN;
    char el[32], et[32];
    fmt_time(el, sizeof el, p->elapsed_ms);
    fmt_time(et, sizeof et, eta);
    if (pr->tty) {
        enum { BAR = 30 };
        char bar[BAR + 1];
        int fill = p->total > 0 ? (int)((double)p->done / p->total * BAR) : 0;
        for (int i = 0; i < BAR; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[BAR] = 0;
        char line[256];
        int len = g_snprintf(line, sizeof line, "%-9s [%s] %d/%d  elapsed %s  ETA %s  %.60s", p->phase,
                             bar, p->done, p->total, el, et, p->item ? p->item : "");
        fprintf(stderr, "\r%s%*s", line, pr->width > len ? pr->width - len : 0, "");
        pr->width = MIN(len, (int)sizeof line - 1);
        fflush(stderr);
        return;
    }
    /* Not a terminal: a plain line at most every two seconds, and the last one. */
    if (p->elapsed_ms - pr->last_print_ms < 2000 && p->done != p->total)
        return;
    pr->last_print_ms = p->elapsed_ms;
    fprintf(stderr, "placesim profile: %s %d/%d, elapsed %s, ETA %s%s%s\n", p->phase, p->done,
            p->total, el, et, p->item ? ", last " : "", p->item ? p->item : "");
}

/* --in-situ: each graph run whole (psim_profiler_insitu); one that cannot run whole (no kernel
 * for a node, an input without a default feed) is left to the kernels timed alone, with a
 * warning. FALSE only on errors that end the command (the DB, a kernel failing). */
static gboolean profile_insitu(PsimProfiler *p, GPtrArray *graphs, const PsimCliFeeds *feeds, int32_t steps, int32_t passes,
                               PsimInsituReport *rep, gboolean *ok, GError **error)
{
    PsimInsituOptions io;
    psim_cli_insitu_options(&io, steps, passes);
    for (guint i = 0; i < graphs->len; i++) {
        const PsimGraph *g = g_ptr_array_index(graphs, i);
        if (!psim_cli_profile_insitu(p, g, feeds, &io, &rep[i], &ok[i], error))
            return FALSE;
    }
    return TRUE;
}

static void insitu_json(JsonBuilder *b, GPtrArray *graphs, const PsimInsituReport *rep, const gboolean *ok)
{
    json_builder_set_member_name(b, "in_situ");
    json_builder_begin_array(b);
    for (guint i = 0; i < graphs->len; i++) {
        json_builder_begin_object(b);
        psim_cli_json_string(b, "graph", psim_graph_name(g_ptr_array_index(graphs, i)));
        json_builder_set_member_name(b, "ran");
        json_builder_add_boolean_value(b, ok[i]);
        if (ok[i]) {
            psim_cli_json_int(b, "rows", rep[i].rows);
            psim_cli_json_int(b, "node_rows", rep[i].node_rows);
            psim_cli_json_int(b, "idle_rows", rep[i].idle_rows);
            psim_cli_json_int(b, "ops", rep[i].n_nodes);
            psim_cli_json_int(b, "devices_run", rep[i].n_runs);
            psim_cli_json_int(b, "passes", rep[i].passes);
            psim_cli_json_int(b, "calibrations", rep[i].calibrations);
            psim_cli_json_double(b, "step_us", rep[i].step_us);
            psim_cli_json_double(b, "ops_us", rep[i].ops_us);
            psim_cli_json_double(b, "dispatch_us", rep[i].dispatch_us);
            psim_cli_json_double(b, "busy_factor", rep[i].busy_factor);
            psim_cli_json_double(b, "idle_extra_us", rep[i].idle_extra_us);
            psim_cli_json_double(b, "idle_extra_long_us", rep[i].idle_extra_long_us);
        }
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
}

/* profile --mpi: the links between MPI tasks, timed through the transport, into the DB. */
static int profile_mpi(int *argc, char ***argv, const char *db_path, const char *link_max_text)
{
    GError *err = NULL;
    uint64_t max_bytes = 256u << 20;
    psim_cli_mpi_flags(TRUE);
    if (*argc > 1)
        return psim_cli_usage("profile", "--mpi times links only: profile GRAPH's kernels without --mpi");
    if (!psim_cli_flag_size("--link-max-bytes", link_max_text, 1024, UINT64_C(1) << 34, &max_bytes, &err))
        return psim_cli_fail(err);
    int code = 0;
    PsimMpi *m = psim_cli_mpi_start(argc, argv, &code);
    if (!m)
        return code;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(db_path, &err);
    if (!db) {
        code = psim_cli_fail(err);
        psim_mpi_free(m);
        return code;
    }
    int32_t rows = psim_mpi_profile_links(m, db, 1024, max_bytes, &err);
    if (rows < 0) {
        psim_cli_fail(err);
        psim_mpi_abort(m);
    }
    printf("links        %d timings between %d MPI tasks (through the transport)\n", rows, psim_mpi_size(m));
    psim_mpi_free(m);
    return 0;
}

int psim_cmd_profile(int argc, char **argv)
{
    gboolean json = FALSE, force = FALSE, no_links = FALSE, no_calibrate = FALSE, in_situ = FALSE;
    gboolean mpi = FALSE;
    g_autofree char *insitu_steps_text = NULL, *insitu_passes_text = NULL;
    g_autofree char *spec = NULL, *db_path = NULL, *clock = NULL, *weights = NULL;
    g_autofree char *reps_text = NULL, *rounds_text = NULL, *max_rel_text = NULL;
    g_autofree char *budget_text = NULL, *warmup_text = NULL, *link_max_text = NULL;
    g_auto(PsimCliGraphOptions) go = {0};
    g_auto(GStrv) feed_args = NULL;
    g_auto(PsimCliFeeds) feeds = {0};
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &spec, "A cluster file, or local[:N] (default local)", "SPEC"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path, "The cost DB to fill (created if absent)", "DB"},
        {"reps", 0, 0, G_OPTION_ARG_STRING, &reps_text, "Timed runs at least, after warm-up (default 10)", "N"},
        {"max-rel-stddev", 0, 0, G_OPTION_ARG_STRING, &max_rel_text,
         "Stop once stddev/mean is at most this (default 0.02)", "X"},
        {"budget-ms", 0, 0, G_OPTION_ARG_STRING, &budget_text,
         "Time budget per kernel and device, or per transfer size, at most one day (default 1000)", "MS"},
        {"warmup-ms", 0, 0, G_OPTION_ARG_STRING, &warmup_text, "Warm-up time per kernel, at most one day (default 20)", "MS"},
        {"link-max-bytes", 0, 0, G_OPTION_ARG_STRING, &link_max_text,
         "Largest transfer measured, 1K to 16G (default 256M)", "BYTES"},
        {"clock", 0, 0, G_OPTION_ARG_STRING, &clock,
         "CPU timing: monotonic (wall time, default) or thread-cpu (the pinned thread's CPU time, "
         "for shared machines; single-threaded kernels)", "CLOCK"},
        {"rounds", 0, 0, G_OPTION_ARG_STRING, &rounds_text,
         "Time each graph's CPU kernels in N interleaved passes (set up once; each pass times a "
         "short burst of every kernel, paced to the budget) and pool the samples, so that the busy "
         "moments of a shared machine do not decide a row (default 100)", "N"},
        {"weights", 0, 0, G_OPTION_ARG_STRING, &weights,
         "CPU kernels' constant inputs (weights): cold (evicted from the caches before each timed "
         "run, as in a step of a model whose weights do not stay cached), warm (left in cache by "
         "the previous run), or auto (default: cold when the graph's constants exceed half the "
         "last-level cache)", "MODE"},
        {"feed", 0, 0, G_OPTION_ARG_STRING_ARRAY, &feed_args,
         "the inputs of the run to predict, as 'placesim run --feed' takes them: kernels' inputs that "
         "come from a graph input get its feed, all others the KIND (default random: N(0,1), seed 42)",
         PSIM_CLI_FEED_ARG},
        {"in-situ", 0, 0, G_OPTION_ARG_NONE, &in_situ,
         "First run each graph whole on each CPU device (as a one-device plan; warm-up steps "
         "discarded) and store every op's time as the executor measured it in the step (trimmed mean over "
         "steps; per signature the median over its nodes, and a row of its own for each node sharing "
         "it), which the cost model prefers to the kernel timed "
         "alone, with each device's median gap between ops (dispatch), its slow-down while every "
         "device runs the graph at once, and each op's slow-down after the executor waited 50 and "
         "500 us before it (per signature, and the device's mean; one run per kind of hardware); kernels are then timed alone only where a graph cannot run "
         "whole or the executor skipped them", NULL},
        {"in-situ-steps", 0, 0, G_OPTION_ARG_STRING, &insitu_steps_text,
         "Measured steps of --in-situ in all (default 20), shared by its passes", "N"},
        {"in-situ-passes", 0, 0, G_OPTION_ARG_STRING, &insitu_passes_text,
         "Run --in-situ in N passes one after another, each warmed up again (at least one step and "
         G_STRINGIFY(PSIM_CLI_WARMUP_MS) " ms) and recording at least " G_STRINGIFY(PSIM_CLI_MEASURE_MS)
         " ms, samples pooled: a shared host's slow spells last 50 ms to seconds (default "
         G_STRINGIFY(PSIM_CLI_INSITU_PASSES) ", 1 to 1000)", "N"},
        {"force", 0, 0, G_OPTION_ARG_NONE, &force, "Measure again what the DB already has", NULL},
        {"no-links", 0, 0, G_OPTION_ARG_NONE, &no_links, "Do not measure transfers (the links between devices, and what a transfer leaves its source CPU device to pay: the reclaim calibrations)", NULL},
        {"no-calibrate", 0, 0, G_OPTION_ARG_NONE, &no_calibrate, "Do not calibrate devices", NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {"mpi", 0, 0, G_OPTION_ARG_NONE, &mpi,
         "under mpirun, without GRAPH: time the links between every two tasks through "
         "run --mpi's transport (1 KiB .. --link-max-bytes, x4) into DB; kernels are profiled "
         "without --mpi (their rows serve every device of the same fingerprint)", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH... - measure kernel and transfer costs");
    g_option_context_set_summary(ctx,
        "Runs every distinct kernel (by cost signature) of the graphs on every device of the\n"
        "cluster that can run it, on the device's pinned thread, and stores n, mean, stddev, min\n"
        "and median in the cost DB; then transfers between devices (1 KiB to 256 MiB) and each\n"
        "device's calibration. Signatures already measured are skipped unless --force (or\n"
        "unless their row was timed in the other --weights mode). With --in-situ, each graph is\n"
        "first run whole and its ops timed in the step (docs/validation.md).");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_PLUGIN | PSIM_CLI_GRAPH_SHAPES | PSIM_CLI_GRAPH_FUSE);
    if (!psim_cli_parse(ctx, &argc, &argv, "profile"))
        return 2;
    if (argc < 2 && !mpi)
        return psim_cli_usage("profile", "expected at least one GRAPH");
    if (!db_path)
        return psim_cli_usage("profile", "--db DB is required");
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    GError *err = NULL;
    if (mpi)
        return profile_mpi(&argc, &argv, db_path, link_max_text);
    int64_t reps = o.reps, rounds = o.rounds, insitu_steps = 20, insitu_passes = PSIM_CLI_INSITU_PASSES;
    if (!psim_cli_flag_int("--reps", reps_text, 1, 1000000, &reps, &err) ||
        !psim_cli_flag_int("--rounds", rounds_text, 1, 1000, &rounds, &err) ||
        !psim_cli_flag_int("--in-situ-steps", insitu_steps_text, 1, 100000, &insitu_steps, &err) ||
        !psim_cli_flag_int("--in-situ-passes", insitu_passes_text, 1, 1000, &insitu_passes, &err) ||
        !psim_cli_flag_double("--max-rel-stddev", max_rel_text, 0, 1e6, &o.max_rel_stddev, &err) ||
        !psim_cli_flag_double("--budget-ms", budget_text, 0, PSIM_CLI_MAX_MS, &o.budget_ms, &err) ||
        !psim_cli_flag_double("--warmup-ms", warmup_text, 0, PSIM_CLI_MAX_MS, &o.warmup_ms, &err) ||
        !psim_cli_flag_size("--link-max-bytes", link_max_text, o.link_min_bytes, UINT64_C(1) << 34,
                            &o.link_max_bytes, &err))
        return psim_cli_fail(err);
    o.reps = (int32_t)reps;
    o.rounds = (int32_t)rounds;
    if (clock) {
        if (!strcmp(clock, "monotonic"))
            o.clock = PSIM_PROFILE_CLOCK_MONOTONIC;
        else if (!strcmp(clock, "thread-cpu"))
            o.clock = PSIM_PROFILE_CLOCK_THREAD_CPU;
        else
            return psim_cli_usage("profile", "--clock must be monotonic or thread-cpu, not '%s'", clock);
    }
    if (!psim_cli_feeds_parse(&feeds, feed_args, &err))
        return psim_cli_fail(err);
    if (weights && !psim_profile_weights_from_name(weights, &o.weights))
        return psim_cli_usage("profile", "--weights must be auto, cold or warm, not '%s'", weights);
    o.force = force;
    o.links = !no_links;
    o.calibrate = !no_calibrate;
    Progress pr = {.tty = psim_cli_stderr_tty()};
    o.progress = on_progress;
    o.progress_user = &pr;

    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    g_autoptr(GPtrArray) graphs = g_ptr_array_new_with_free_func((GDestroyNotify)psim_graph_free);
    for (int i = 1; i < argc; i++) {
        PsimGraph *g = psim_cli_graph_load(argv[i], &go, &err);
        if (!g)
            return psim_cli_fail(err);
        g_ptr_array_add(graphs, g);
    }
    g_autoptr(PsimCluster) c = psim_cli_cluster(spec ? spec : "local", NULL, &err);
    if (!c)
        return psim_cli_fail(err);
    /* The nodes place, sim and run will see on this cluster (fused the same way). */
    for (guint i = 0; i < graphs->len; i++)
        if (!psim_cli_graph_fuse((PsimGraph **)&graphs->pdata[i], c, &go, &err))
            return psim_cli_fail(err);
    if (!psim_cli_feeds_check(&feeds, (PsimGraph *const *)graphs->pdata, (int32_t)graphs->len, &err))
        return psim_cli_fail(err);
    psim_cli_feeds_profile(&feeds, (PsimGraph *const *)graphs->pdata, (int32_t)graphs->len, &o);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(db_path, &err);
    if (!db)
        return psim_cli_fail(err);
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, db, &o, &err);
    if (!p)
        return psim_cli_fail(err);
    /* Each graph's weights mode, for the report. */
    uint64_t llc = psim_profile_llc_bytes();
    g_autofree uint64_t *cbytes = g_new0(uint64_t, graphs->len + 1);
    g_autofree PsimProfileWeights *modes = g_new0(PsimProfileWeights, graphs->len + 1);
    for (guint i = 0; i < graphs->len; i++) {
        cbytes[i] = psim_profile_constant_bytes(g_ptr_array_index(graphs, i));
        modes[i] = psim_profiler_graph_weights(p, g_ptr_array_index(graphs, i));
    }
    g_autofree PsimInsituReport *insitu = g_new0(PsimInsituReport, graphs->len + 1);
    g_autofree gboolean *insitu_ok = g_new0(gboolean, graphs->len + 1);
    if (in_situ && !profile_insitu(p, graphs, &feeds, (int32_t)insitu_steps, (int32_t)insitu_passes, insitu, insitu_ok, &err))
        return psim_cli_fail(err);
    PsimProfileReport r;
    gboolean ok = psim_profiler_run(p, (PsimGraph *const *)graphs->pdata, (int32_t)graphs->len, &r, &err);
    if (pr.tty && pr.width)
        fputc('\n', stderr);
    g_free(pr.phase);
    if (!ok)
        return psim_cli_fail(err);

    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
#define INT(k, v)                               \
    json_builder_set_member_name(b, k);         \
    json_builder_add_int_value(b, v)
        INT("measured", r.measured);
        INT("skipped", r.skipped);
        INT("unsupported", r.unsupported);
        INT("failed", r.failed);
        INT("signatures", r.n_signatures);
        INT("link_rows", r.link_rows);
        INT("link_pairs", r.link_pairs);
        INT("calibrations", r.calibrations);
        INT("measured_cold", r.measured_cold);
        INT("llc_bytes", (gint64)llc);
#undef INT
        json_builder_set_member_name(b, "weights");
        json_builder_begin_array(b);
        for (guint i = 0; i < graphs->len; i++) {
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "graph");
            json_builder_add_string_value(b, psim_graph_name(g_ptr_array_index(graphs, i)));
            json_builder_set_member_name(b, "mode");
            json_builder_add_string_value(b, psim_profile_weights_name(modes[i]));
            json_builder_set_member_name(b, "constant_bytes");
            json_builder_add_int_value(b, (gint64)cbytes[i]);
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        if (in_situ)
            insitu_json(b, graphs, insitu, insitu_ok);
        json_builder_set_member_name(b, "devices");
        json_builder_begin_array(b);
        for (int32_t i = 0; i < psim_cluster_n_devices(c); i++)
            json_builder_add_string_value(b, psim_cluster_device(c, i)->name);
        json_builder_end_array(b);
        json_builder_set_member_name(b, "elapsed_ms");
        json_builder_add_double_value(b, r.elapsed_ms);
        json_builder_set_member_name(b, "db");
        json_builder_add_string_value(b, db_path);
        json_builder_end_object(b);
        psim_cli_print_json(b);
        return 0;
    }
    printf("signatures   %d\n", r.n_signatures);
    printf("measured     %d (signature, device) pairs\n", r.measured);
    printf("skipped      %d (already in %s)\n", r.skipped, db_path);
    printf("unsupported  %d\n", r.unsupported);
    printf("failed       %d\n", r.failed);
    printf("links        %d timings, %d pairs fitted\n", r.link_rows, r.link_pairs);
    printf("calibrations %d\n", r.calibrations);
    for (guint i = 0; i < graphs->len; i++)
        printf("weights      %s on CPUs for %s (%s; %.1f MiB of constants, last-level cache %.1f MiB)\n",
               psim_profile_weights_name(modes[i]), psim_graph_name(g_ptr_array_index(graphs, i)),
               o.weights == PSIM_PROFILE_WEIGHTS_AUTO ? "auto" : "--weights", cbytes[i] / 1048576.0,
               llc / 1048576.0);
    for (guint i = 0; in_situ && i < graphs->len; i++)
        if (insitu_ok[i])
            printf("in-situ      %s: %d passes, %d rows (and %d of single nodes), %d ops a step, step %.1f us (rows + gaps: "
                   "%.1f us), dispatch %.2f us/op, busy x%.3f, after a wait +%.2f us/op (+%.2f after a long one; %d rows of "
                   "each signature's own)\n",
                   psim_graph_name(g_ptr_array_index(graphs, i)), insitu[i].passes, insitu[i].rows, insitu[i].node_rows,
                   insitu[i].n_nodes,
                   insitu[i].step_us, insitu[i].ops_us, insitu[i].dispatch_us, insitu[i].busy_factor,
                   insitu[i].idle_extra_us, insitu[i].idle_extra_long_us, insitu[i].idle_rows);
        else
            printf("in-situ      %s: cannot run whole; kernels timed alone\n",
                   psim_graph_name(g_ptr_array_index(graphs, i)));
    printf("cold         %d of the measured pairs timed with cold weights\n", r.measured_cold);
    printf("devices      %d\n", r.n_devices);
    printf("elapsed      %.1f ms\n", r.elapsed_ms);
    return 0;
}
