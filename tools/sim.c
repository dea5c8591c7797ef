/* placesim sim: simulates one step of a plan (from a placement, a plan file, or an algorithm) and
 * writes the predicted timeline as a Chrome trace, SQLite rows and a Gantt chart. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "tools/cli.h"
#include "placesim/formats.h"

int psim_cmd_sim(int argc, char **argv)
{
    g_autofree char *cluster_spec = NULL, *placement = NULL, *plan_path = NULL, *db_path = NULL;
    g_autofree char *order_name = NULL, *trace = NULL, *plot = NULL, *sqlite_path = NULL;
    g_autofree char *algo = NULL;
    g_autofree char *streams_text = NULL;
    gboolean json = FALSE, training = FALSE;
    int64_t streams = 0;
    g_auto(PsimCliGraphOptions) go = {0};
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &cluster_spec,
         "Cluster: local, local:N, a cluster JSON file, uniform:P[:GBPS[:LATENCY_US]] or stg:P (default: a --plan's own cluster, else local)", "SPEC"},
        {"placement", 'p', 0, G_OPTION_ARG_FILENAME, &placement, "Placement JSON to simulate", "P.json"},
        {"plan", 0, 0, G_OPTION_ARG_FILENAME, &plan_path, "Plan JSON to simulate (from 'place --plan'; it carries its graph: GRAPH may be left out, and when given must be the plan's)", "PLAN.json"},
        {"algo", 'a', 0, G_OPTION_ARG_STRING, &algo, "Place with this algorithm first (see 'place --help')", "NAME"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path, "Cost DB with measured kernel and link times and calibrated rates (read only)", "DB"},
        {"order", 0, 0, G_OPTION_ARG_STRING, &order_name,
         "static (follow the plan's order per device, default) or dynamic (ready queue by priority)", "ORDER"},
        {"streams", 0, 0, G_OPTION_ARG_STRING, &streams_text, "Compute streams per GPU device, 1 to 32 (default: the cluster's)", "N"},
        {"trace", 't', 0, G_OPTION_ARG_FILENAME, &trace, "Write the timeline as a Chrome trace (Perfetto)", "T.json"},
        {"plot", 0, 0, G_OPTION_ARG_FILENAME, &plot, "Write a Gantt chart (.png or .svg)", "G.png"},
        {"sqlite", 0, 0, G_OPTION_ARG_FILENAME, &sqlite_path, "Append the timeline to an SQLite database", "S.sqlite"},
        {"training", 0, 0, G_OPTION_ARG_NONE, &training, "PipeDream: expand into a training graph", NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - simulate one step of a plan");
    g_option_context_set_summary(ctx,
        "The plan comes from --plan, or is partitioned from --placement or from --algo.\n"
        "Times come from the cost model: graph annotations, then the cost DB, then estimates.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_ALL | PSIM_CLI_GRAPH_FUSE);
    if (!psim_cli_parse(ctx, &argc, &argv, "sim"))
        return 2;
    if (argc != 2 && !(argc == 1 && plan_path))
        return psim_cli_usage("sim", "expected one GRAPH (it may be left out with --plan: the plan carries its graph)");
    if (!!placement + !!plan_path + !!algo != 1)
        return psim_cli_usage("sim", "give exactly one of --placement, --plan or --algo");
    GError *err = NULL;
    if (!psim_cli_flag_int("--streams", streams_text, 1, 32, &streams, &err))
        return psim_cli_fail(err);
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .gpu_streams = (int32_t)streams};
    if (order_name && !psim_order_from_name(order_name, &so.order))
        return psim_cli_usage("sim", "--order must be static or dynamic, not '%s'", order_name);
    if (plan_path && psim_cli_graph_options_given(&go))
        return psim_cli_usage("sim", "--batch, --shape and --cse apply to GRAPH, not to a --plan's graph");
    go.training = training;
    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimGraph) g = NULL;
    g_autoptr(PsimPlan) plan = NULL;
    gint64 t0 = g_get_monotonic_time(), t_loaded = 0, t_placed = 0, t_planned = 0;
    if (plan_path) {
        if (!(plan = psim_cli_load_plan(plan_path, argc == 2 ? argv[1] : NULL, training, &err)))
            return psim_cli_fail(err);
    } else if (!(g = psim_cli_graph_load(argv[1], &go, &err))) {
        return psim_cli_fail(err);
    }
    /* A plan names the cluster it was made for; --cluster overrides it. */
    g_autoptr(PsimCluster) cluster =
        plan && !cluster_spec && plan->cluster_json
            ? psim_cluster_parse(plan_path, plan->cluster_json, strlen(plan->cluster_json), &err)
            : psim_cli_cluster(cluster_spec, g ? g : plan->graph, &err);
    if (!cluster || (g && !psim_cli_graph_fuse(&g, cluster, &go, &err)))
        return psim_cli_fail(err);
    g_autoptr(PsimCostDb) db = NULL;
    if (db_path && !(db = psim_cost_db_open_readonly(db_path, &err)))
        return psim_cli_fail(err);
    /* Devices take their calibrated rates, so that the placer's device classes and anything
     * reading the cluster agree with the cost model's estimates. */
    if (db && !psim_cost_db_calibrate_cluster(db, cluster, NULL, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimCostModel) model = psim_cost_model_new(cluster, db);
    t_loaded = g_get_monotonic_time();
    if (!plan) {
        PsimPlaceOptions po;
        psim_place_options_init(&po);
        po.placement_file = placement;
        g_autoptr(PsimPlaceCtx) pc = psim_place_ctx_new(g, model, &po, &err);
        if (!pc)
            return psim_cli_fail(err);
        g_autoptr(PsimPlacement) pl = psim_place(pc, placement ? "file" : algo, &err);
        if (!pl)
            return psim_cli_fail(err);
        t_placed = g_get_monotonic_time();
        if (!(plan = psim_plan_build(pc, pl, &err)))
            return psim_cli_fail(err);
        t_planned = g_get_monotonic_time();
    }
    gint64 t1 = g_get_monotonic_time();
    PsimSimResult r;
    g_autoptr(PsimTimeline) tl = NULL;
    gboolean want_tl = trace || plot || sqlite_path;
    if (!psim_sim_run(plan, model, &so, &r, want_tl ? &tl : NULL, &err))
        return psim_cli_fail(err);
    gint64 t2 = g_get_monotonic_time();
    PsimCliCostSources sources;
    psim_cli_cost_sources(model, plan, tl, &sources);
    /* Written under temporary names and renamed once all are written. */
    g_autoptr(PsimCliOutputs) outs = psim_cli_outputs_new();
    const char *tmp = NULL;
    if (trace && (!(tmp = psim_cli_output(outs, trace, FALSE, &err)) ||
                  !psim_timeline_save_chrome(tl, tmp, &err)))
        goto fail;
    if (plot && (!(tmp = psim_cli_output(outs, plot, FALSE, &err)) ||
                 !psim_timeline_plot_gantt(tl, tmp, psim_graph_name(plan->graph), &err)))
        goto fail;
    if (sqlite_path && (!(tmp = psim_cli_output(outs, sqlite_path, TRUE, &err)) ||
                        psim_timeline_save_sqlite(tl, tmp, psim_graph_name(plan->graph), &err) < 0))
        goto fail;
    if (!psim_cli_outputs_commit(outs, &err))
        goto fail;

    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "graph");
        json_builder_add_string_value(b, psim_graph_name(plan->graph));
        json_builder_set_member_name(b, "algo");
        json_builder_add_string_value(b, plan->algo ? plan->algo : "");
        json_builder_set_member_name(b, "order");
        json_builder_add_string_value(b, so.order == PSIM_ORDER_STATIC ? "static" : "dynamic");
        json_builder_set_member_name(b, "step_time_us");
        json_builder_add_double_value(b, r.step_time_us);
        json_builder_set_member_name(b, "critical_path_us");
        json_builder_add_double_value(b, r.critical_path_us);
        json_builder_set_member_name(b, "lower_bound_us");
        json_builder_add_double_value(b, r.lower_bound_us);
        json_builder_set_member_name(b, "plan_makespan_us");
        json_builder_add_double_value(b, plan->makespan_us);
        json_builder_set_member_name(b, "peak_memory_bytes");
        json_builder_begin_object(b);
        for (int32_t d = 0; d < plan->n_devices; d++) {
            json_builder_set_member_name(b, plan->devices[d]);
            json_builder_add_int_value(b, (gint64)r.peak_memory[d]);
        }
        json_builder_end_object(b);
        json_builder_set_member_name(b, "over_capacity");
        if (r.over_device >= 0) {
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "device");
            json_builder_add_string_value(b, plan->devices[r.over_device]);
            json_builder_set_member_name(b, "node");
            json_builder_add_string_value(b, psim_graph_node(plan->graph, r.over_node)->name);
            json_builder_set_member_name(b, "time_us");
            json_builder_add_double_value(b, r.over_time_us);
            json_builder_set_member_name(b, "bytes");
            json_builder_add_int_value(b, (gint64)r.over_bytes);
            json_builder_end_object(b);
        } else {
            json_builder_add_null_value(b);
        }
        json_builder_set_member_name(b, "critical_path");
        json_builder_begin_array(b);
        for (int32_t i = 0; i < r.n_critical; i++)
            json_builder_add_string_value(b, psim_graph_node(plan->graph, r.critical[i])->name);
        json_builder_end_array(b);
        json_builder_set_member_name(b, "events");
        json_builder_add_int_value(b, r.events);
        json_builder_set_member_name(b, "n_send");
        json_builder_add_int_value(b, plan->n_transfers);
        psim_cli_cost_sources_json(b, &sources);
        json_builder_set_member_name(b, "plan_ms");
        json_builder_add_double_value(b, (t1 - t0) / 1e3);
        json_builder_set_member_name(b, "elapsed_ms");
        json_builder_add_double_value(b, (t2 - t1) / 1e3);
        /* Wall times of the steps: reading the graph or plan (with the cluster and cost model),
         * placing (the problem and the algorithm) and building the plan when not given one,
         * and simulating. */
        json_builder_set_member_name(b, "timings");
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "load_ms");
        json_builder_add_double_value(b, ((t_placed ? t_loaded : t1) - t0) / 1e3);
        json_builder_set_member_name(b, "place_ms");
        json_builder_add_double_value(b, t_placed ? (t_placed - t_loaded) / 1e3 : 0);
        json_builder_set_member_name(b, "plan_ms");
        json_builder_add_double_value(b, t_planned ? (t_planned - t_placed) / 1e3 : 0);
        json_builder_set_member_name(b, "simulate_ms");
        json_builder_add_double_value(b, (t2 - t1) / 1e3);
        json_builder_end_object(b);
        psim_cli_json_cse(b, &go);
        json_builder_end_object(b);
        psim_cli_print_json(b);
    } else {
        printf("graph          %s (%s order%s%s)\n", psim_graph_name(plan->graph),
               so.order == PSIM_ORDER_STATIC ? "static" : "dynamic", plan->algo ? ", placed by " : "",
               plan->algo ? plan->algo : "");
        printf("step time      %.3f us\n", r.step_time_us);
        printf("critical path  %.3f us (the graph's longest chain of these costs and transfers: a lower bound)\n",
               r.critical_path_us);
        printf("plan estimate  %.3f us\n", plan->makespan_us);
        printf("transfers      %d\n", plan->n_transfers);
        g_autofree char *costs = psim_cli_cost_sources_line(&sources);
        printf("costs          %s\n", costs);
        for (int32_t d = 0; d < plan->n_devices; d++)
            printf("peak memory    %-48s %.3f MB\n", plan->devices[d], r.peak_memory[d] / 1e6);
        if (r.over_device >= 0)
            printf("OVER CAPACITY  %s at %.3f us when '%s' started (%.3f MB)\n",
                   plan->devices[r.over_device], r.over_time_us,
                   psim_graph_node(plan->graph, r.over_node)->name, r.over_bytes / 1e6);
        printf("binding chain  %d nodes:", r.n_critical);
        for (int32_t i = 0; i < r.n_critical && i < 12; i++)
            printf(" %s", psim_graph_node(plan->graph, r.critical[i])->name);
        printf("%s\n", r.n_critical > 12 ? " ..." : "");
        psim_cli_print_cse(&go, stdout);
        printf("simulated      %" G_GINT64_FORMAT " events in %.3f ms\n", r.events, (t2 - t1) / 1e3);
        if (trace)
            printf("trace          %s (open in https://ui.perfetto.dev)\n", trace);
        if (plot)
            printf("gantt          %s\n", plot);
    }
    psim_sim_result_clear(&r);
    return 0;
fail:
    psim_sim_result_clear(&r);
    return psim_cli_fail(err);
}
