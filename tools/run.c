/* placesim run: runs a graph for real on one device for N steps, with feeds from ONNX
 * TensorProto files (or arange(n)/n, as ONNX made its reference outputs), checks the first
 * output against a file, and reports step times. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/placer.h"
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void json_double(JsonBuilder *b, const char *name, double v)
{
    json_builder_set_member_name(b, name);
    if (isfinite(v))
        json_builder_add_double_value(b, v);
    else
        json_builder_add_null_value(b);
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

int psim_cmd_run(int argc, char **argv)
{
    gboolean json = FALSE;
    char *cluster_spec = NULL, *device = NULL, *check_path = NULL, *save_dir = NULL;
    char *trace_path = NULL, *placement_path = NULL, *algo = NULL, *plan_path = NULL;
    char *db_path = NULL;
    char **feed_args = NULL, **plugins = NULL;
    int steps = 1;
    double rtol = 1e-3, atol = 1e-7, stall_s = PSIM_EXEC_STALL_TIMEOUT_S;
    GOptionEntry entries[] = {
        {"cluster", 0, 0, G_OPTION_ARG_STRING, &cluster_spec,
         "local, local:N or a cluster file (default local:1)", "SPEC"},
        {"device", 0, 0, G_OPTION_ARG_STRING, &device,
         "the cluster device to run on (default: its first CPU)", "NAME"},
        {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "measured steps after one warm-up (default 1)",
         "N"},
        {"feed", 0, 0, G_OPTION_ARG_STRING_ARRAY, &feed_args,
         "feed input NAME from an ONNX TensorProto file (repeatable)", "NAME=FILE.pb"},
        {"check", 0, 0, G_OPTION_ARG_FILENAME, &check_path,
         "compare the first output with this TensorProto file", "FILE.pb"},
        {"rtol", 0, 0, G_OPTION_ARG_DOUBLE, &rtol, "relative tolerance of --check (1e-3)", "R"},
        {"atol", 0, 0, G_OPTION_ARG_DOUBLE, &atol, "absolute tolerance of --check (1e-7)", "A"},
        {"stall-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &stall_s,
         "on several devices: fail a step (exit 1) when no device completes a node for this long "
         "while Recvs wait, a deadlock (5; 0: wait forever)", "SECONDS"},
        {"save-outputs", 0, 0, G_OPTION_ARG_FILENAME, &save_dir,
         "write each output as DIR/output_K.pb", "DIR"},
        {"placement", 0, 0, G_OPTION_ARG_FILENAME, &placement_path,
         "run on several devices as this placement JSON says (partitioned with Send/Recv)",
         "P.json"},
        {"plan", 0, 0, G_OPTION_ARG_FILENAME, &plan_path,
         "run this plan (from 'placesim place --plan'; it carries its graph: GRAPH may be left out, and when given must be the plan's)",
         "PLAN.json"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path,
         "with --algo: place with the measured kernel and link times of this cost DB", "DB"},
        {"algo", 0, 0, G_OPTION_ARG_STRING, &algo,
         "place with this algorithm first (see 'placesim place'), then run on several devices",
         "NAME"},
        {"trace", 0, 0, G_OPTION_ARG_FILENAME, &trace_path,
         "write the last step's per-node start and end as a Chrome trace (Perfetto)", "FILE"},
        {"plugin", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &plugins,
         "load a shared library that registers ops and kernels (repeatable)", "PATH.so"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - run a graph for real");
    g_option_context_set_summary(ctx,
        "Runs GRAPH on one device of the cluster: one warm-up step, then N measured steps.\n"
        "Graph inputs without --feed get arange(n)/n in their shape (unknown dims as 1).\n"
        "--check passes when |a-b| <= atol + rtol*|b| for every element of the first output.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    int code = 2;
    GError *err = NULL;
    PsimGraph *g = NULL;
    PsimCluster *c = NULL;
    PsimSession *s = NULL;
    PsimCostModel *cm = NULL;
    PsimCostDb *db = NULL;
    PsimPlaceCtx *pctx = NULL;
    PsimPlacement *placement = NULL;
    PsimPlan *plan = NULL;
    PsimPlanExec *px = NULL;
    GPtrArray *feed_names = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    GPtrArray *fetches = g_ptr_array_new_with_free_func(g_free);
    GArray *ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    PsimTensor **outputs = NULL, **step_out = NULL;
    double *times = NULL;
    g_autofree char *device_name = NULL;
    Check chk = {0};
    int n_out = 0;
    if (!psim_cli_parse(ctx, &argc, &argv, "run"))
        goto out;
    if (argc != 2 && !(argc == 1 && plan_path)) {
        code = psim_cli_usage("run", "expected one GRAPH");
        goto out;
    }
    if (steps < 1 || steps > 1000000) {
        code = psim_cli_usage("run", "--steps must be between 1 and 1000000");
        goto out;
    }
    if (!(rtol >= 0) || !(atol >= 0)) {
        code = psim_cli_usage("run", "--rtol and --atol must be non-negative");
        goto out;
    }
    if (!(stall_s >= 0 && stall_s <= 1e6)) {
        code = psim_cli_usage("run", "--stall-timeout must be between 0 and 1e6 seconds");
        goto out;
    }
    for (char **p = plugins; p && *p; p++)
        if (!psim_plugin_load(*p, &err)) {
            code = psim_cli_fail(err);
            goto out;
        }
    if (!!placement_path + !!algo + !!plan_path > 1) {
        code = psim_cli_usage("run", "give at most one of --placement, --plan and --algo");
        goto out;
    }
    if (plan_path) {
        if (!(plan = psim_cli_load_plan(plan_path, argc == 2 ? argv[1] : NULL, FALSE, &err))) {
            code = psim_cli_fail(err);
            goto out;
        }
        g = plan->graph; /* owned by the plan */
    } else if (!(g = psim_cli_load_graph(argv[1], FALSE, &err))) {
        code = psim_cli_fail(err);
        goto out;
    }
    gboolean multi = placement_path || algo || plan_path;
    c = psim_cluster_from_spec(cluster_spec ? cluster_spec : multi ? "local" : "local:1", &err);
    if (!c) {
        code = psim_cli_fail(err);
        goto out;
    }

    /* Feeds: the files given, then arange(n)/n for the float inputs left. */
    for (char **p = feed_args; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if (!eq || eq == *p || !eq[1]) {
            code = psim_cli_usage("run", "--feed '%s': expected NAME=FILE.pb", *p);
            goto out;
        }
        PsimTensor *t = psim_tensor_load_pb(eq + 1, NULL, &err);
        if (!t) {
            code = psim_cli_fail(err);
            goto out;
        }
        g_ptr_array_add(feed_names, g_strndup(*p, (gsize)(eq - *p)));
        g_ptr_array_add(feeds, t);
    }
    if (!psim_cli_default_feeds(g, feed_names, feeds, &err)) {
        code = psim_cli_fail(err);
        goto out;
    }
    psim_cli_default_fetches(g, ports);
    n_out = (int)ports->len;
    if (n_out == 0) {
        code = psim_cli_usage("run", "%s has no outputs to fetch",
                              psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g));
        goto out;
    }
    for (int32_t i = 0; i < n_out; i++)
        g_ptr_array_add(fetches, psim_port_to_string(g, g_array_index(ports, PsimPort, i)));

    if (multi) {
        /* Place (or read the placement), partition into a plan, one executor per device. */
        PsimPlaceOptions po;
        psim_place_options_init(&po);
        po.placement_file = placement_path;
        if (db_path && !(db = psim_cost_db_open(db_path, &err))) {
            code = psim_cli_fail(err);
            goto out;
        }
        cm = psim_cost_model_new(c, db);
        if ((!plan && (!(pctx = psim_place_ctx_new(g, cm, &po, &err)) ||
                       !(placement = psim_place(pctx, placement_path ? "file" : algo, &err)) ||
                       !(plan = psim_plan_build(pctx, placement, &err)))) ||
            !(px = psim_plan_exec_new(plan, c, (const char *const *)feed_names->pdata,
                                      (int32_t)feeds->len, (const char *const *)fetches->pdata,
                                      n_out, FALSE, &err))) {
            code = psim_cli_fail(err);
            goto out;
        }
        psim_plan_exec_set_stall_timeout(px, stall_s > 0 ? stall_s : -1);
        device_name = g_strdup_printf("%d devices (%s, %d transfers)", plan->n_devices,
                                      plan->algo ? plan->algo : "plan", plan->n_transfers);
    } else {
        s = psim_session_new(g, c, device, NULL, &err);
        if (!s) {
            code = psim_cli_fail(err);
            goto out;
        }
        device_name = g_strdup(psim_worker_name(psim_session_worker(s)));
    }
    outputs = g_new0(PsimTensor *, n_out);
    step_out = g_new0(PsimTensor *, n_out);
    times = g_new0(double, steps);
    for (int step = -1; step < steps; step++) {
        gboolean ok = px ? psim_plan_exec_run(px, (PsimTensor *const *)feeds->pdata, step_out, &err)
                         : psim_session_run(s, (int32_t)feeds->len,
                                            (const char *const *)feed_names->pdata,
                                            (PsimTensor *const *)feeds->pdata, n_out,
                                            (const char *const *)fetches->pdata, step_out, &err);
        if (!ok) {
            code = psim_cli_fail(err);
            goto out;
        }
        for (int32_t i = 0; i < n_out; i++) {
            psim_tensor_unref(outputs[i]);
            outputs[i] = step_out[i];
            step_out[i] = NULL;
        }
        if (step >= 0)
            times[step] = px ? psim_plan_exec_step_us(px) : last_step_us(s);
    }
    PsimExecStats st;
    run_stats(s, px, &st);

    if (save_dir) {
        if (g_mkdir_with_parents(save_dir, 0755) != 0) {
            g_set_error(&err, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: cannot create the folder: %s",
                        save_dir, g_strerror(errno));
            code = psim_cli_fail(err);
            goto out;
        }
        for (int32_t i = 0; i < n_out; i++) {
            PsimPort p = g_array_index(ports, PsimPort, i);
            const PsimNode *n = psim_graph_node(g, p.node);
            const char *name = n->outputs[p.index].name ? n->outputs[p.index].name : n->name;
            g_autofree char *file = g_strdup_printf("output_%d.pb", i);
            g_autofree char *path = g_build_filename(save_dir, file, NULL);
            if (!psim_tensor_save_pb(outputs[i], name, path, &err)) {
                code = psim_cli_fail(err);
                goto out;
            }
        }
    }
    if (trace_path) {
        g_autoptr(PsimTimeline) tl = NULL;
        if (px) {
            tl = psim_timeline_new(psim_graph_name(g), "run", plan->n_devices,
                                   (const char *const *)plan->devices);
            psim_plan_exec_timeline_add(px, tl);
        } else {
            const PsimDevice *d = psim_worker_device(psim_session_worker(s));
            const char *names[1] = {d ? d->name : device_name};
            tl = psim_timeline_new(psim_graph_name(g), "run", 1, names);
            psim_executor_timeline_add(psim_session_last_executor(s), tl, 0, 0);
        }
        if (!psim_timeline_save_chrome(tl, trace_path, &err)) {
            code = psim_cli_fail(err);
            goto out;
        }
    }
    if (check_path) {
        g_autoptr(PsimTensor) want = psim_tensor_load_pb(check_path, NULL, &err);
        if (!want) {
            code = psim_cli_fail(err);
            goto out;
        }
        check_compare(&chk, outputs[0], want, rtol, atol);
    }

    qsort(times, (size_t)steps, sizeof(double), cmp_double);
    double median = steps % 2 ? times[steps / 2] : (times[steps / 2 - 1] + times[steps / 2]) / 2;
    const char *first = g_ptr_array_index(fetches, 0);
    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "graph");
        json_builder_add_string_value(b, psim_graph_name(g));
        json_builder_set_member_name(b, "device");
        json_builder_add_string_value(b, device_name);
        json_builder_set_member_name(b, "steps");
        json_builder_add_int_value(b, steps);
        json_builder_set_member_name(b, "step_time_us");
        json_builder_begin_object(b);
        json_double(b, "median", median);
        json_double(b, "min", times[0]);
        json_double(b, "max", times[steps - 1]);
        json_builder_end_object(b);
        json_builder_set_member_name(b, "nodes_run");
        json_builder_add_int_value(b, st.n_exec);
        json_builder_set_member_name(b, "constant_nodes");
        json_builder_add_int_value(b, st.n_const);
        json_builder_set_member_name(b, "peak_bytes");
        json_builder_add_int_value(b, (gint64)st.peak_bytes);
        json_builder_set_member_name(b, "outputs");
        json_builder_begin_array(b);
        for (int32_t i = 0; i < n_out; i++) {
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "name");
            json_builder_add_string_value(b, g_ptr_array_index(fetches, i));
            json_builder_set_member_name(b, "dtype");
            json_builder_add_string_value(b, psim_dtype_name(outputs[i]->dtype));
            json_builder_set_member_name(b, "shape");
            json_builder_begin_array(b);
            for (int32_t k = 0; k < outputs[i]->rank; k++)
                json_builder_add_int_value(b, outputs[i]->dims[k]);
            json_builder_end_array(b);
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        json_builder_set_member_name(b, "check");
        if (chk.done) {
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "ok");
            json_builder_add_boolean_value(b, chk.ok);
            json_double(b, "max_abs_err", chk.max_abs);
            json_double(b, "max_rel_err", chk.max_rel);
            json_builder_set_member_name(b, "n_bad");
            json_builder_add_int_value(b, chk.n_bad);
            json_double(b, "rtol", rtol);
            json_double(b, "atol", atol);
            json_builder_end_object(b);
        } else {
            json_builder_add_null_value(b);
        }
        json_builder_end_object(b);
        psim_cli_print_json(b);
    } else {
        printf("graph      %s on %s\n", psim_graph_name(g), device_name);
        printf("nodes      %d per step, %d constant (evaluated once)\n", st.n_exec, st.n_const);
        printf("step time  median %.1f us, min %.1f, max %.1f (%d step%s after a warm-up)\n",
               median, times[0], times[steps - 1], steps, steps > 1 ? "s" : "");
        printf("peak       %.3f MB\n", st.peak_bytes / 1e6);
        for (int32_t i = 0; i < n_out; i++) {
            g_autoptr(GString) sh = g_string_new(NULL);
            shape_append(sh, outputs[i]);
            printf("output     %s %s %s\n", (char *)g_ptr_array_index(fetches, i),
                   psim_dtype_name(outputs[i]->dtype), sh->str);
        }
        if (chk.done)
            printf("check      %s: %s max_abs_err %.3g max_rel_err %.3g (rtol %g, atol %g)\n",
                   first, chk.ok ? "ok" : "FAILED", chk.max_abs, chk.max_rel, rtol, atol);
    }
    code = 0;
    if (chk.done && !chk.ok) {
        if (chk.message)
            fprintf(stderr, "placesim: %s: check failed for output %s: %s\n", check_path, first,
                    chk.message);
        else
            fprintf(stderr,
                    "placesim: %s: check failed for output %s: %" G_GINT64_FORMAT
                    " element(s) outside atol %g + rtol %g; max_abs_err %.6g, max_rel_err %.6g\n",
                    check_path, first, chk.n_bad, atol, rtol, chk.max_abs, chk.max_rel);
        code = 1;
    }
out:
    if (outputs)
        for (int32_t i = 0; i < n_out; i++)
            psim_tensor_unref(outputs[i]);
    g_free(outputs);
    g_free(step_out);
    g_free(times);
    g_free(chk.message);
    psim_session_free(s);
    psim_plan_exec_free(px);
    if (plan_path && plan)
        g = NULL; /* the plan's */
    psim_plan_free(plan);
    psim_placement_free(placement);
    psim_place_ctx_free(pctx);
    psim_cost_model_free(cm);
    psim_cost_db_close(db);
    g_free(db_path);
    g_ptr_array_free(feeds, TRUE);
    g_ptr_array_free(feed_names, TRUE);
    g_ptr_array_free(fetches, TRUE);
    g_array_free(ports, TRUE);
    psim_cluster_free(c);
    psim_graph_free(g);
    g_free(cluster_spec);
    g_free(device);
    g_free(check_path);
    g_free(save_dir);
    g_free(trace_path);
    g_free(placement_path);
    g_free(algo);
    g_free(plan_path);
    g_strfreev(feed_args);
    g_strfreev(plugins);
    return code;
}
