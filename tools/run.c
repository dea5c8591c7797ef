/* placesim run: runs a graph for real on one device for N steps, with feeds from ONNX
 * TensorProto files or generated (N(0, 1) by default; tools/feeds.c), checks the first output
 * against a file, and reports step times. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/placer.h"
#include "placesim/sim.h"
#include "tools/cli.h"
#include "placesim/formats.h"

static void shape_append(GString *s, const PsimTensor *t)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < t->rank; i++)
        g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", t->dims[i]);
    g_string_append_c(s, ']');
}

typedef struct {
    gboolean done, ok;
    double max_abs, max_rel;
    int64_t n_bad;
    char *message; /* why it failed (shape), or NULL */
} Check;

/* ONNX's runner: |a - b| <= atol + rtol * |b| for every element (b the expected value). */
static void check_compare(Check *c, const PsimTensor *got, const PsimTensor *want, double rtol,
                          double atol)
{
    c->done = TRUE;
    c->ok = TRUE;
    gboolean same = got->n_elems == want->n_elems;
    if (same && got->rank == want->rank)
        for (int32_t i = 0; i < got->rank; i++)
            same = same && got->dims[i] == want->dims[i];
    else if (same) {
        /* Equal sizes but different ranks ([1,1000] vs [1000]): ONNX's runner rejects it too. */
        same = FALSE;
    }
    if (!same) {
        g_autoptr(GString) s = g_string_new("output has shape ");
        shape_append(s, got);
        g_string_append(s, ", expected ");
        shape_append(s, want);
        c->message = g_strdup(s->str);
        c->ok = FALSE;
        c->max_abs = c->max_rel = INFINITY;
        return;
    }
    if (got->dtype == PSIM_DTYPE_STRING || want->dtype == PSIM_DTYPE_STRING) {
        c->message = g_strdup("string outputs cannot be compared");
        c->ok = FALSE;
        return;
    }
    for (int64_t i = 0; i < got->n_elems; i++) {
        double a = psim_tensor_get_f64(got, i), b = psim_tensor_get_f64(want, i);
        double d = fabs(a - b);
        if (isnan(a) && isnan(b))
            continue;
        if (isnan(d))
            d = INFINITY;
        if (d > c->max_abs)
            c->max_abs = d;
        double r = b != 0 ? d / fabs(b) : (d > 0 ? INFINITY : 0);
        if (r > c->max_rel)
            c->max_rel = r;
        if (!(d <= atol + rtol * fabs(b)))
            c->n_bad++;
    }
    c->ok = c->n_bad == 0;
}

static double last_step_us(PsimSession *s)
{
    PsimExecStats st;
    psim_executor_stats(psim_session_last_executor(s), &st);
    return st.step_us;
}

/* Per-step node counts (summed over devices) and the largest device peak. */
static void run_stats(PsimSession *s, PsimPlanExec *px, PsimExecStats *out)
{
    if (!px) {
        psim_executor_stats(psim_session_last_executor(s), out);
        return;
    }
    memset(out, 0, sizeof *out);
    for (int32_t d = 0; d < psim_plan_exec_n_devices(px); d++) {
        PsimExecStats st;
        psim_executor_stats(psim_plan_exec_executor(px, d), &st);
        out->n_exec += st.n_exec;
        out->n_const += st.n_const;
        if (st.peak_bytes > out->peak_bytes)
            out->peak_bytes = st.peak_bytes;
    }
}

/* A run from its flags to its report: the command is the list of steps in psim_cmd_run. */
typedef struct {
    /* Flags as given. */
    gboolean json;
    char *cluster_spec, *device, *check_path, *save_dir, *trace_path, *placement_path, *algo;
    char *plan_path, *db_path, *steps_text, *rtol_text, *atol_text, *stall_text, *trace_steps_text;
    int trace_steps;      /* --trace-steps: the last N measured steps go into --trace */
    PsimTimeline *traced; /* those steps so far, each at its start on the first one's clock */
    double traced_t0;     /* the first traced step's start (psim_exec_now_us) */
    char **feed_args;
    PsimCliGraphOptions go;
    /* Checked. */
    int steps;
    double rtol, atol, stall_s;
    gboolean multi; /* on several devices: --placement, --algo or --plan */
    gboolean mpi;   /* --mpi: every rank a task; rank 0 runs this command, the others serve */
    PsimMpi *m;
    PsimMpiExec *mx;
    PsimGraph *pruned; /* --mpi --algo: the graph pruned to the feeds and fetches, placed */
    double sim_us;     /* --mpi: the plan's simulated step (the cost model, with --db's rows) */
    /* Inputs: the graph (the plan's with --plan), the cluster, feeds and fetches. */
    PsimGraph *g;
    PsimPlan *plan;
    PsimCluster *c;
    PsimCostDb *db;
    GPtrArray *feed_names, *feeds, *fetches;
    GArray *ports;
    int n_out;
    /* Executing: one of a session (one device), a plan session (--algo) or a plan (--plan, or
     * partitioned from --placement: the placement names the graph's nodes, which a session
     * would prune first). */
    PsimCostModel *cm;
    PsimPlaceCtx *pctx;
    PsimPlacement *placement;
    PsimSession *s;
    PsimPlanSession *ps;
    PsimPlanExec *px;
    char *device_name;
    PsimTensor **outputs;
    double *times;
    /* Results. */
    PsimExecStats st;
    double median;
    gboolean have_cache;
    uint64_t cache_runs, cache_hits, cache_built;
    Check chk;
    PsimCliOutputs *outs;
} Run;

static void run_clear(Run *r)
{
    for (int32_t i = 0; r->outputs && i < r->n_out; i++)
        psim_tensor_unref(r->outputs[i]);
    g_free(r->outputs);
    g_free(r->times);
    g_free(r->chk.message);
    g_free(r->device_name);
    psim_session_free(r->s);
    psim_plan_session_free(r->ps);
    psim_plan_exec_free(r->px);
    psim_mpi_exec_free(r->mx);
    psim_plan_free(r->plan); /* a loaded plan frees its graph, a built one does not */
    psim_graph_free(r->pruned);
    if (!r->plan_path)
        psim_graph_free(r->g);
    psim_placement_free(r->placement);
    psim_place_ctx_free(r->pctx);
    psim_cost_model_free(r->cm);
    psim_cost_db_close(r->db);
    if (!r->mpi)
        psim_cluster_free(r->c); /* else the MPI world's */
    psim_mpi_free(r->m);
    if (r->feeds)
        g_ptr_array_free(r->feeds, TRUE);
    if (r->feed_names)
        g_ptr_array_free(r->feed_names, TRUE);
    if (r->fetches)
        g_ptr_array_free(r->fetches, TRUE);
    if (r->ports)
        g_array_free(r->ports, TRUE);
    psim_cli_outputs_free(r->outs);
    psim_cli_graph_options_clear(&r->go);
    g_free(r->cluster_spec);
    g_free(r->device);
    g_free(r->check_path);
    g_free(r->save_dir);
    g_free(r->trace_path);
    g_free(r->placement_path);
    g_free(r->algo);
    g_free(r->plan_path);
    g_free(r->db_path);
    g_free(r->steps_text);
    g_free(r->trace_steps_text);
    psim_timeline_free(r->traced);
    g_free(r->rtol_text);
    g_free(r->atol_text);
    g_free(r->stall_text);
    g_strfreev(r->feed_args);
}

/* The flags, checked: FALSE with a USAGE error, or FALSE and no error after a parse error
 * (already reported). */
static gboolean run_parse(Run *r, int *argc, char ***argv, GError **error)
{
    GOptionEntry entries[] = {
        {"cluster", 0, 0, G_OPTION_ARG_STRING, &r->cluster_spec,
         "local, local:N or a cluster file (default local:1)", "SPEC"},
        {"device", 0, 0, G_OPTION_ARG_STRING, &r->device,
         "the cluster device to run on (default: its first CPU)", "NAME"},
        {"steps", 0, 0, G_OPTION_ARG_STRING, &r->steps_text,
         "measured steps after one warm-up, 1 to 1000000 (default 1)", "N"},
        {"feed", 0, 0, G_OPTION_ARG_STRING_ARRAY, &r->feed_args, PSIM_CLI_FEED_HELP, PSIM_CLI_FEED_ARG},
        {"check", 0, 0, G_OPTION_ARG_FILENAME, &r->check_path,
         "compare the first output with this TensorProto file", "FILE.pb"},
        {"rtol", 0, 0, G_OPTION_ARG_STRING, &r->rtol_text, "relative tolerance of --check (1e-3)", "R"},
        {"atol", 0, 0, G_OPTION_ARG_STRING, &r->atol_text, "absolute tolerance of --check (1e-7)", "A"},
        {"stall-timeout", 0, 0, G_OPTION_ARG_STRING, &r->stall_text,
         "on several devices: fail a step (exit 1) when no device completes a node for this long "
         "while Recvs wait, a deadlock (5; 0: wait forever)", "SECONDS"},
        {"save-outputs", 0, 0, G_OPTION_ARG_FILENAME, &r->save_dir,
         "write each output as DIR/output_K.pb (DIR is created if missing; its parent must exist)", "DIR"},
        {"placement", 0, 0, G_OPTION_ARG_FILENAME, &r->placement_path,
         "run on several devices as this placement JSON says (partitioned with Send/Recv)",
         "P.json"},
        {"plan", 0, 0, G_OPTION_ARG_FILENAME, &r->plan_path,
         "run this plan (from 'placesim place --plan'; it carries its graph: GRAPH may be left out, and when given must be the plan's)",
         "PLAN.json"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &r->db_path,
         "with --algo: place with the measured kernel and link times and calibrated rates of this cost DB (read only)", "DB"},
        {"algo", 0, 0, G_OPTION_ARG_STRING, &r->algo,
         "place with this algorithm first (see 'placesim place'), then run on several devices",
         "NAME"},
        {"trace", 0, 0, G_OPTION_ARG_FILENAME, &r->trace_path,
         "write the last step's per-node start and end as a Chrome trace (Perfetto); with --mpi every "
         "task's part, on rank 0's clock", "FILE"},
        {"trace-steps", 0, 0, G_OPTION_ARG_STRING, &r->trace_steps_text,
         "with --trace: the last N measured steps (default 1), each where it ran on one clock, for the "
         "spread from step to step (at most --steps and 10000)", "N"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &r->json, "Print one JSON object with the figures", NULL},
        {"mpi", 0, 0, G_OPTION_ARG_NONE, &r->mpi,
         "under mpirun: every rank is the task /job:worker/task:RANK with one CPU device on its share "
         "of the host's cores; rank 0 places (--algo) or reads --plan, ships each task the plan once "
         "and starts each step with one message per task; the others only serve",
         NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - run a graph for real");
    g_option_context_set_summary(ctx,
        "Runs GRAPH on one device of the cluster: one warm-up step, then N measured steps.\n"
        "Float graph inputs without --feed NAME=... get --feed KIND (default random: N(0,1), seed 42)\n"
        "in their shape (unknown dims as 1); --feed ramp feeds arange(n)/n, as ONNX made the\n"
        "onnx-light reference outputs.\n"
        "--check passes when |a-b| <= atol + rtol*|b| for every element of the first output.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &r->go, PSIM_CLI_GRAPH_ALL | PSIM_CLI_GRAPH_FUSE);
    if (!psim_cli_parse(ctx, argc, argv, "run"))
        return FALSE;
    if (*argc != 2 && !(*argc == 1 && r->plan_path)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "run: expected one GRAPH (see 'placesim run --help')");
        return FALSE;
    }
    int64_t steps = 1;
    r->rtol = 1e-3;
    r->atol = 1e-7;
    if (!psim_cli_flag_int("--steps", r->steps_text, 1, 1000000, &steps, error) ||
        !psim_cli_flag_double("--rtol", r->rtol_text, 0, G_MAXDOUBLE, &r->rtol, error) ||
        !psim_cli_flag_double("--atol", r->atol_text, 0, G_MAXDOUBLE, &r->atol, error))
        return FALSE;
    r->stall_s = PSIM_EXEC_STALL_TIMEOUT_S;
    if (!psim_cli_flag_double("--stall-timeout", r->stall_text, 0, 1e6, &r->stall_s, error))
        return FALSE;
    r->steps = (int)steps;
    int64_t trace_steps = 1;
    if (!psim_cli_flag_int("--trace-steps", r->trace_steps_text, 1, 10000, &trace_steps, error))
        return FALSE;
    if (r->trace_steps_text && !r->trace_path) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--trace-steps: give --trace FILE too");
        return FALSE;
    }
    r->trace_steps = (int)MIN(trace_steps, steps);
    if (!!r->placement_path + !!r->algo + !!r->plan_path > 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "run: give at most one of --placement, --plan and --algo");
        return FALSE;
    }
    if (r->plan_path && psim_cli_graph_options_given(&r->go)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "run: --batch, --shape and --cse apply to GRAPH, not to a --plan's graph");
        return FALSE;
    }
    if (r->mpi && !r->algo && !r->plan_path) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--mpi: give --algo or --plan");
        return FALSE;
    }
    if (r->mpi && (r->cluster_spec || r->device || r->placement_path)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "--mpi: the cluster is the MPI tasks' devices; --cluster, --device and --placement do not apply");
        return FALSE;
    }
    if (r->mpi && r->trace_steps > 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--mpi: --trace holds the last step only; drop --trace-steps");
        return FALSE;
    }
    if (r->algo && !psim_placer_lookup(r->algo)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--algo: unknown algorithm '%s' (see 'placesim place --help')",
                    r->algo);
        return FALSE;
    }
    r->multi = r->placement_path || r->algo || r->plan_path;
    return psim_cli_graph_options_check(&r->go, error);
}

/* The graph (or the plan and its graph), the cluster, and the output files' temporary names
 * (checked before anything runs: a missing folder fails in a second, not after the steps). */
static gboolean run_load(Run *r, const char *graph_spec, GError **error)
{
    if (r->plan_path) {
        if (!(r->plan = psim_cli_load_plan(r->plan_path, graph_spec, FALSE, error)))
            return FALSE;
        r->g = r->plan->graph;
    } else if (!(r->g = psim_cli_graph_load(graph_spec, &r->go, error))) {
        return FALSE;
    }
    r->c = r->mpi ? psim_mpi_cluster(r->m)
                  : psim_cli_cluster(r->cluster_spec ? r->cluster_spec : r->multi ? "local" : "local:1", r->g,
                                     error);
    if (!r->c || (!r->plan_path && !psim_cli_graph_fuse(&r->g, r->c, &r->go, error)))
        return FALSE;
    /* The placer's device classes and the cost model see the DB's calibrated rates alike. */
    if (r->db_path && (!(r->db = psim_cost_db_open_readonly(r->db_path, error)) ||
                       (r->multi && !psim_cost_db_calibrate_cluster(r->db, r->c, NULL, error))))
        return FALSE;
    r->outs = psim_cli_outputs_new();
    if (r->trace_path && !psim_cli_output(r->outs, r->trace_path, FALSE, error))
        return FALSE;
    return !r->save_dir || psim_cli_output_dir(r->outs, r->save_dir, error);
}

/* Feeds: as --feed says (tools/feeds.c); fetches: the outputs. */
static gboolean run_feeds(Run *r, GError **error)
{
    g_auto(PsimCliFeeds) given = {0};
    r->feed_names = g_ptr_array_new_with_free_func(g_free);
    r->feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    r->fetches = g_ptr_array_new_with_free_func(g_free);
    r->ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    if (!psim_cli_feeds_parse(&given, r->feed_args, error) ||
        !psim_cli_feeds_make(&given, r->g, TRUE, r->feed_names, r->feeds, error))
        return FALSE;
    psim_cli_default_fetches(r->g, r->ports);
    r->n_out = (int)r->ports->len;
    if (r->n_out == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: the graph has no outputs to fetch",
                    psim_graph_source(r->g) ? psim_graph_source(r->g) : psim_graph_name(r->g));
        return FALSE;
    }
    for (int32_t i = 0; i < r->n_out; i++)
        g_ptr_array_add(r->fetches, psim_port_to_string(r->g, g_array_index(r->ports, PsimPort, i)));
    return TRUE;
}

/* What runs the steps. A plan is instantiated as it is (a placement is partitioned into one
 * first); --algo goes through a plan session and one device through a session, whose caches
 * of pruned subgraphs the report counts. */
static gboolean run_prepare(Run *r, GError **error)
{
    if (r->mpi) {
        const char *const *feeds = (const char *const *)r->feed_names->pdata;
        const char *const *fetches = (const char *const *)r->fetches->pdata;
        if (!r->plan) { /* --algo: as a plan session would, pruned to the feeds and fetches */
            PsimPlaceOptions po;
            psim_place_options_init(&po);
            r->cm = psim_cost_model_new(r->c, r->db);
            if (!(r->pruned = psim_graph_prune(r->g, feeds, (int)r->feeds->len, fetches, r->n_out, error)) ||
                !(r->pctx = psim_place_ctx_new(r->pruned, r->cm, &po, error)) ||
                !(r->placement = psim_place(r->pctx, r->algo, error)) ||
                !(r->plan = psim_plan_build(r->pctx, r->placement, error)))
                return FALSE;
        }
        /* The prediction, made before anything runs. */
        if (!r->cm)
            r->cm = psim_cost_model_new(r->c, r->db);
        PsimSimResult res = {0};
        if (!psim_sim_run(r->plan, r->cm, NULL, &res, NULL, error))
            return FALSE;
        r->sim_us = res.step_time_us;
        psim_sim_result_clear(&res);
        r->mx = psim_mpi_exec_new(r->m, r->plan, feeds, (int32_t)r->feeds->len, fetches, r->n_out, error);
        return r->mx != NULL;
    }
    if (r->placement_path) {
        PsimPlaceOptions po;
        psim_place_options_init(&po);
        po.placement_file = r->placement_path;
        r->cm = psim_cost_model_new(r->c, r->db);
        if (!(r->pctx = psim_place_ctx_new(r->g, r->cm, &po, error)) ||
            !(r->placement = psim_place(r->pctx, "file", error)) ||
            !(r->plan = psim_plan_build(r->pctx, r->placement, error)))
            return FALSE;
    }
    if (r->plan) {
        r->px = psim_plan_exec_new(r->plan, r->c, (const char *const *)r->feed_names->pdata,
                                   (int32_t)r->feeds->len, (const char *const *)r->fetches->pdata, r->n_out,
                                   FALSE, error);
        if (r->px)
            psim_plan_exec_set_stall_timeout(r->px, r->stall_s > 0 ? r->stall_s : -1);
        return r->px != NULL;
    }
    if (r->multi) {
        PsimPlaceOptions po;
        psim_place_options_init(&po);
        r->ps = psim_plan_session_new(r->g, r->c, r->db, r->algo, &po, FALSE, error);
        return r->ps != NULL;
    }
    r->s = psim_session_new(r->g, r->c, r->device, NULL, error);
    if (!r->s)
        return FALSE;
    r->device_name = g_strdup(psim_worker_name(psim_session_worker(r->s)));
    return TRUE;
}

static PsimPlanExec *run_plan_exec(Run *r)
{
    return r->ps ? psim_plan_session_last_exec(r->ps) : r->px;
}

static gboolean run_step(Run *r, PsimTensor **out, GError **error)
{
    const char *const *names = (const char *const *)r->feed_names->pdata;
    PsimTensor *const *feeds = (PsimTensor *const *)r->feeds->pdata;
    const char *const *fetches = (const char *const *)r->fetches->pdata;
    if (r->mx)
        return psim_mpi_exec_run(r->mx, feeds, out, error);
    if (r->px)
        return psim_plan_exec_run(r->px, feeds, out, error);
    if (r->ps)
        return psim_plan_session_run(r->ps, (int32_t)r->feeds->len, names, feeds, r->n_out, fetches, out, error);
    return psim_session_run(r->s, (int32_t)r->feeds->len, names, feeds, r->n_out, fetches, out, error);
}

/* The last step's measured timeline. */
static PsimTimeline *step_timeline(Run *r)
{
    PsimTimeline *tl;
    PsimPlanExec *px = run_plan_exec(r);
    if (px) {
        const PsimPlan *plan = r->ps ? psim_plan_session_last_plan(r->ps) : r->plan;
        tl = psim_timeline_new(psim_graph_name(r->g), "run", plan->n_devices, (const char *const *)plan->devices);
        psim_plan_exec_timeline_add(px, tl);
    } else {
        const PsimDevice *d = psim_worker_device(psim_session_worker(r->s));
        const char *names[1] = {d ? d->name : r->device_name};
        tl = psim_timeline_new(psim_graph_name(r->g), "run", 1, names);
        psim_executor_timeline_add(psim_session_last_executor(r->s), tl, 0, 0);
    }
    return tl;
}

/* --trace-steps: appends the last step's timeline to r->traced, shifted to where the step
 * started (t0_us, psim_exec_now_us) on the first traced step's clock. */
static void trace_step(Run *r, double t0_us)
{
    g_autoptr(PsimTimeline) tl = step_timeline(r);
    if (!r->traced) {
        r->traced = psim_timeline_new(tl->graph, "run", tl->n_devices, (const char *const *)tl->devices);
        r->traced_t0 = t0_us;
    }
    double off = t0_us - r->traced_t0;
    psim_timeline_append(r->traced, tl, off);
    r->traced->step_time_us = off + tl->step_time_us;
}

/* One warm-up step, then the measured ones; the last step's outputs are kept. */
static gboolean run_execute(Run *r, GError **error)
{
    r->outputs = g_new0(PsimTensor *, r->n_out);
    g_autofree PsimTensor **step_out = g_new0(PsimTensor *, r->n_out);
    r->times = g_new0(double, r->steps);
    for (int step = -1; step < r->steps; step++) {
        gboolean traced = r->trace_path && r->trace_steps > 1 && !r->mx && step >= r->steps - r->trace_steps;
        double t0 = psim_exec_now_us();
        if (!run_step(r, step_out, error))
            return FALSE;
        if (traced)
            trace_step(r, t0);
        for (int32_t i = 0; i < r->n_out; i++) {
            psim_tensor_unref(r->outputs[i]);
            r->outputs[i] = step_out[i];
            step_out[i] = NULL;
        }
        if (step >= 0)
            r->times[step] = r->s    ? last_step_us(r->s)
                             : r->mx ? psim_mpi_exec_step_us(r->mx)
                                     : psim_plan_exec_step_us(run_plan_exec(r));
    }
    if (!r->mx) /* (over MPI, the nodes of other tasks are not counted here) */
        run_stats(r->s, run_plan_exec(r), &r->st);
    r->median = psim_stats_median(r->times, r->steps);
    if (r->s) {
        PsimSessionStats ss;
        psim_session_stats(r->s, &ss);
        r->have_cache = TRUE;
        r->cache_runs = ss.n_runs;
        r->cache_hits = ss.n_cache_hits;
        r->cache_built = ss.n_prunes;
    } else if (r->ps) {
        PsimPlanSessionStats ss;
        psim_plan_session_stats(r->ps, &ss);
        r->have_cache = TRUE;
        r->cache_runs = ss.n_runs;
        r->cache_hits = ss.n_cache_hits;
        r->cache_built = ss.n_partitions;
    }
    if (!r->s) {
        const PsimPlan *plan = r->ps ? psim_plan_session_last_plan(r->ps) : r->plan;
        if (r->mx)
            r->device_name = g_strdup_printf("%d devices of %d MPI tasks (%s, %d transfers)", plan->n_devices,
                                             psim_mpi_size(r->m), plan->algo ? plan->algo : "plan",
                                             plan->n_transfers);
        else
            r->device_name = g_strdup_printf("%d devices (%s, %d transfers)", plan->n_devices,
                                             plan->algo ? plan->algo : "plan", plan->n_transfers);
    }
    return TRUE;
}

/* --save-outputs and --trace, under their temporary names until run_commit. */
static gboolean run_write(Run *r, GError **error)
{
    for (int32_t i = 0; r->save_dir && i < r->n_out; i++) {
        PsimPort p = g_array_index(r->ports, PsimPort, i);
        const PsimNode *n = psim_graph_node(r->g, p.node);
        const char *name = n->outputs[p.index].name ? n->outputs[p.index].name : n->name;
        g_autofree char *file = g_strdup_printf("output_%d.pb", i);
        g_autofree char *path = g_build_filename(r->save_dir, file, NULL);
        const char *tmp = psim_cli_output(r->outs, path, FALSE, error);
        if (!tmp || !psim_tensor_save_pb(r->outputs[i], name, tmp, error))
            return FALSE;
    }
    if (!r->trace_path)
        return TRUE;
    g_autoptr(PsimTimeline) last = NULL;
    if (r->mx) { /* every task's part of the last step, on rank 0's clock */
        last = psim_timeline_new(psim_graph_name(r->g), "run", r->plan->n_devices,
                                 (const char *const *)r->plan->devices);
        if (!psim_mpi_exec_timeline_add(r->mx, last, error))
            return FALSE;
    } else if (!r->traced)
        last = step_timeline(r);
    const PsimTimeline *tl = r->traced ? r->traced : last;
    const char *tmp = psim_cli_output(r->outs, r->trace_path, FALSE, error);
    return tmp && psim_timeline_save_chrome(tl, tmp, error);
}

static gboolean run_check(Run *r, GError **error)
{
    if (!r->check_path)
        return TRUE;
    g_autoptr(PsimTensor) want = psim_tensor_load_pb(r->check_path, NULL, error);
    if (!want)
        return FALSE;
    check_compare(&r->chk, r->outputs[0], want, r->rtol, r->atol);
    return TRUE;
}

static void run_print_json(const Run *r)
{
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "graph");
    json_builder_add_string_value(b, psim_graph_name(r->g));
    json_builder_set_member_name(b, "device");
    json_builder_add_string_value(b, r->device_name);
    json_builder_set_member_name(b, "steps");
    json_builder_add_int_value(b, r->steps);
    json_builder_set_member_name(b, "step_time_us");
    json_builder_begin_object(b);
    psim_cli_json_double(b, "median", r->median);
    psim_cli_json_double(b, "min", r->times[0]);
    psim_cli_json_double(b, "max", r->times[r->steps - 1]);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "nodes_run");
    json_builder_add_int_value(b, r->st.n_exec);
    json_builder_set_member_name(b, "constant_nodes");
    json_builder_add_int_value(b, r->st.n_const);
    json_builder_set_member_name(b, "peak_bytes");
    json_builder_add_int_value(b, (gint64)r->st.peak_bytes);
    json_builder_set_member_name(b, "outputs");
    json_builder_begin_array(b);
    for (int32_t i = 0; i < r->n_out; i++) {
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "name");
        json_builder_add_string_value(b, g_ptr_array_index(r->fetches, i));
        json_builder_set_member_name(b, "dtype");
        json_builder_add_string_value(b, psim_dtype_name(r->outputs[i]->dtype));
        json_builder_set_member_name(b, "shape");
        json_builder_begin_array(b);
        for (int32_t k = 0; k < r->outputs[i]->rank; k++)
            json_builder_add_int_value(b, r->outputs[i]->dims[k]);
        json_builder_end_array(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "check");
    if (r->chk.done) {
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "ok");
        json_builder_add_boolean_value(b, r->chk.ok);
        psim_cli_json_double(b, "max_abs_err", r->chk.max_abs);
        psim_cli_json_double(b, "max_rel_err", r->chk.max_rel);
        json_builder_set_member_name(b, "n_bad");
        json_builder_add_int_value(b, r->chk.n_bad);
        psim_cli_json_double(b, "rtol", r->rtol);
        psim_cli_json_double(b, "atol", r->atol);
        json_builder_end_object(b);
    } else {
        json_builder_add_null_value(b);
    }
    /* The cache of pruned subgraphs (exec/): the first step of a signature misses and builds. */
    json_builder_set_member_name(b, "cache");
    if (r->have_cache) {
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "runs");
        json_builder_add_int_value(b, (gint64)r->cache_runs);
        json_builder_set_member_name(b, "hits");
        json_builder_add_int_value(b, (gint64)r->cache_hits);
        json_builder_set_member_name(b, "misses");
        json_builder_add_int_value(b, (gint64)(r->cache_runs - r->cache_hits));
        json_builder_set_member_name(b, "subgraphs_built");
        json_builder_add_int_value(b, (gint64)r->cache_built);
        json_builder_end_object(b);
    } else {
        json_builder_add_null_value(b);
    }
    psim_cli_json_cse(b, &r->go);
    /* Over MPI: what rank 0 sent each task (the plan once; then one message per step). */
    json_builder_set_member_name(b, "mpi");
    if (r->mx) {
        json_builder_begin_object(b);
        psim_cli_json_double(b, "simulated_us", r->sim_us);
        json_builder_set_member_name(b, "tasks");
        json_builder_begin_array(b);
        for (int32_t t = 1; t < psim_mpi_size(r->m); t++) {
            PsimMpiStats ms;
            psim_mpi_stats(r->m, t, &ms);
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "task");
            json_builder_add_int_value(b, t);
            json_builder_set_member_name(b, "setup_messages");
            json_builder_add_int_value(b, (gint64)ms.setup_messages);
            json_builder_set_member_name(b, "setup_bytes");
            json_builder_add_int_value(b, (gint64)ms.setup_bytes);
            json_builder_set_member_name(b, "step_messages");
            json_builder_add_int_value(b, (gint64)ms.step_messages);
            json_builder_set_member_name(b, "step_bytes");
            json_builder_add_int_value(b, (gint64)ms.step_bytes);
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        json_builder_end_object(b);
    } else {
        json_builder_add_null_value(b);
    }
    json_builder_end_object(b);
    psim_cli_print_json(b);
}

static void run_print_text(const Run *r)
{
    int steps = r->steps;
    printf("graph      %s on %s\n", psim_graph_name(r->g), r->device_name);
    printf("nodes      %d per step, %d constant (evaluated once)\n", r->st.n_exec, r->st.n_const);
    printf("step time  median %.1f us, min %.1f, max %.1f (%d step%s after a warm-up)\n", r->median, r->times[0],
           r->times[steps - 1], steps, steps > 1 ? "s" : "");
    if (r->mx)
        printf("simulated  %.1f us (the plan's step in the cost model; measured %+.1f%%)\n", r->sim_us,
               100.0 * (r->median - r->sim_us) / r->sim_us);
    else
        printf("peak       %.3f MB\n", r->st.peak_bytes / 1e6);
    if (r->have_cache)
        printf("cache      %" G_GUINT64_FORMAT " hits, %" G_GUINT64_FORMAT " misses, %" G_GUINT64_FORMAT
               " subgraph%s built\n", r->cache_hits, r->cache_runs - r->cache_hits, r->cache_built,
               r->cache_built == 1 ? "" : "s");
    if (r->go.cse)
        printf("cse        removed %d node%s\n", r->go.n_cse_removed, r->go.n_cse_removed == 1 ? "" : "s");
    for (int32_t i = 0; i < r->n_out; i++) {
        g_autoptr(GString) sh = g_string_new(NULL);
        shape_append(sh, r->outputs[i]);
        printf("output     %s %s %s\n", (char *)g_ptr_array_index(r->fetches, i), psim_dtype_name(r->outputs[i]->dtype),
               sh->str);
    }
    if (r->chk.done)
        printf("check      %s: %s max_abs_err %.3g max_rel_err %.3g (rtol %g, atol %g)\n",
               (char *)g_ptr_array_index(r->fetches, 0), r->chk.ok ? "ok" : "FAILED", r->chk.max_abs, r->chk.max_rel,
               r->rtol, r->atol);
}

/* A failed --check is a runtime failure (exit 1) whose message says by how much. */
static gboolean run_check_verdict(const Run *r, GError **error)
{
    if (!r->chk.done || r->chk.ok)
        return TRUE;
    const char *first = g_ptr_array_index(r->fetches, 0);
    if (r->chk.message)
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: check failed for output %s: %s", r->check_path,
                    first, r->chk.message);
    else
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "%s: check failed for output %s: %" G_GINT64_FORMAT
                    " element(s) outside atol %g + rtol %g; max_abs_err %.6g, max_rel_err %.6g",
                    r->check_path, first, r->chk.n_bad, r->atol, r->rtol, r->chk.max_abs, r->chk.max_rel);
    return FALSE;
}

int psim_cmd_run(int argc, char **argv)
{
    Run r = {0};
    GError *err = NULL;
    int code = 0;
    if (!run_parse(&r, &argc, &argv, &err)) {
        code = psim_cli_flags_failed(err, r.mpi);
        goto out;
    }
    if (r.mpi && !(r.m = psim_cli_mpi_start(&argc, &argv, &code)))
        goto out; /* a task that served rank 0's steps, or MPI did not start */
    if (!run_load(&r, argc > 1 ? argv[1] : NULL, &err) || !run_feeds(&r, &err) || !run_prepare(&r, &err) ||
        !run_execute(&r, &err) || !run_write(&r, &err) || !run_check(&r, &err)) {
        /* Over MPI, once tasks hold the plan a failure ends every rank at once (said once). */
        code = psim_cli_mpi_fail(r.mx ? r.m : NULL, err);
        goto out;
    }
    /* The figures are printed whether the check passed or not; the files are kept only when
     * the run succeeded. */
    if (r.json)
        run_print_json(&r);
    else
        run_print_text(&r);
    if (!run_check_verdict(&r, &err) || !psim_cli_outputs_commit(r.outs, &err))
        code = psim_cli_fail(err);
out:
    run_clear(&r);
    return code;
}
