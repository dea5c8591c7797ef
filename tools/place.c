/* placesim place: places a graph on a cluster with one algorithm (or all), writes the placement
 * and the partitioned plan, and reports the estimated step time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/placer.h"
#include "tools/cli.h"
#include "placesim/formats.h"

static void add_result(JsonBuilder *b, const PsimPlacement *p, const PsimPlan *plan,
                       const char *error)
{
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "algo");
    json_builder_add_string_value(b, p ? p->algo : "");
    if (error) {
        json_builder_set_member_name(b, "error");
        json_builder_add_string_value(b, error);
    } else {
        json_builder_set_member_name(b, "makespan_us");
        json_builder_add_double_value(b, plan ? plan->makespan_us : p->makespan_us);
        json_builder_set_member_name(b, "elapsed_ms");
        json_builder_add_double_value(b, p->elapsed_ms);
        json_builder_set_member_name(b, "cpu_ms");
        json_builder_add_double_value(b, p->cpu_ms);
        json_builder_set_member_name(b, "n_send");
        json_builder_add_int_value(b, plan ? psim_plan_n_sends(plan) : 0);
        json_builder_set_member_name(b, "n_recv");
        json_builder_add_int_value(b, plan ? plan->n_transfers : 0);
    }
    json_builder_end_object(b);
}

int psim_cmd_place(int argc, char **argv)
{
    g_autofree char *cluster_spec = NULL, *algo = NULL, *out = NULL, *plan_path = NULL,
                    *placement = NULL, *mem_limit = NULL, *db_path = NULL, *rounding = NULL;
    gboolean json = FALSE, compress = FALSE, coarsen = FALSE, training = FALSE;
    double budget = 1000, margin = -1;
    gint64 seed = 1;
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &cluster_spec,
         "The cluster: local, local:N, a cluster JSON file, uniform:P[:GBPS[:LATENCY_US]] (P identical devices) or stg:P (uniform, free links)",
         "SPEC"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path,
         "Cost DB of measured kernel times (from placesim profile)", "DB"},
        {"algo", 'a', 0, G_OPTION_ARG_STRING, &algo, "Placement algorithm, or 'all' (default greedy)",
         "NAME"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Write the placement JSON here", "FILE"},
        {"plan", 'p', 0, G_OPTION_ARG_FILENAME, &plan_path, "Write the plan JSON here", "FILE"},
        {"placement", 0, 0, G_OPTION_ARG_FILENAME, &placement,
         "Placement JSON read by --algo file", "FILE"},
        {"mem-limit", 0, 0, G_OPTION_ARG_STRING, &mem_limit, "Memory limit per device in bytes",
         "BYTES"},
        {"compress", 0, 0, G_OPTION_ARG_NONE, &compress,
         "Send float32 tensors between devices as 16 bits", NULL},
        {"compress-rounding", 0, 0, G_OPTION_ARG_STRING, &rounding,
         "How --compress cuts float32 to 16 bits: truncate (the whitepaper's, relative error "
         "< 2^-7; default) or rne (round to nearest even, <= 2^-8); implies --compress",
         "MODE"},
        {"coarsen", 0, 0, G_OPTION_ARG_NONE, &coarsen, "Merge chains before placing", NULL},
        {"budget-ms", 0, 0, G_OPTION_ARG_DOUBLE, &budget, "Search budget (default 1000)", "MS"},
        {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Search seed (default 1)", "S"},
        {"recv-margin-us", 0, 0, G_OPTION_ARG_DOUBLE, &margin,
         "Recv earliest start = ALAP - margin (default: the transfer's own time)", "US"},
        {"training", 0, 0, G_OPTION_ARG_NONE, &training, "PipeDream profiles: training graph", NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - place a graph on a cluster");
    GString *sum = g_string_new("Algorithms:\n");
    for (const PsimPlacer *const *p = psim_placer_list(NULL); *p; p++)
        g_string_append_printf(sum, "  %-12s %s\n", (*p)->name, (*p)->description);
    g_string_append(sum, "  all          every algorithm above but 'file'");
    g_option_context_set_summary(ctx, sum->str);
    g_string_free(sum, TRUE);
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!psim_cli_parse(ctx, &argc, &argv, "place"))
        return 2;
    if (argc != 2)
        return psim_cli_usage("place", "expected one GRAPH");
    if (!cluster_spec)
        return psim_cli_usage("place", "--cluster is required");
    PsimPlaceOptions opt;
    psim_place_options_init(&opt);
    if (mem_limit) {
        char *end;
        guint64 v = g_ascii_strtoull(mem_limit, &end, 10);
        if (*end || !*mem_limit || v == 0)
            return psim_cli_usage("place", "--mem-limit must be a positive byte count, not '%s'", mem_limit);
        opt.mem_limit = v;
    }
    if (!(budget >= 0) || budget > 3.6e6)
        return psim_cli_usage("place", "--budget-ms must be from 0 to 3600000");
    opt.budget_ms = budget;
    opt.seed = (uint64_t)seed;
    if (rounding && !psim_rounding_from_name(rounding, &opt.compress_rounding))
        return psim_cli_usage("place", "--compress-rounding must be truncate or rne, not '%s'", rounding);
    opt.compress = compress || rounding;
    opt.coarsen = coarsen;
    opt.placement_file = placement;
    opt.recv_margin_us = margin;
    const char *name = algo ? algo : "greedy";
    gboolean all = !strcmp(name, "all");
    if (!all && !psim_placer_lookup(name))
        return psim_cli_usage("place", "unknown algorithm '%s' (see --help)", name);
    if (all && (out || plan_path))
        return psim_cli_usage("place", "--out and --plan need a single --algo");
    if (!strcmp(name, "file") && !placement)
        return psim_cli_usage("place", "--algo file needs --placement FILE");

    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_cli_load_graph(argv[1], training, &err);
    if (!g)
        return psim_cli_fail(err);
    g_autoptr(PsimCluster) cluster = psim_cli_cluster(cluster_spec, g, &err);
    if (!cluster)
        return psim_cli_fail(err);
    g_autoptr(PsimCostDb) db = NULL;
    if (db_path && !(db = psim_cost_db_open(db_path, &err)))
        return psim_cli_fail(err);
    g_autoptr(PsimCostModel) model = psim_cost_model_new(cluster, db);
    g_autoptr(PsimPlaceCtx) pctx = psim_place_ctx_new(g, model, &opt, &err);
    if (!pctx)
        return psim_cli_fail(err);

    JsonBuilder *b = json ? json_builder_new() : NULL;
    if (all && b)
        json_builder_begin_array(b);
    int n_ok = 0, n_fail = 0;
    for (const PsimPlacer *const *pl = psim_placer_list(NULL); *pl; pl++) {
        if (all ? !strcmp((*pl)->name, "file") : strcmp((*pl)->name, name))
            continue;
        /* The ETF family scans every ready node on every device at each step: with `all` on
         * a huge graph it would run for hours, so it is left out there (ask for it by name). */
        if (all && psim_graph_n_nodes(g) > 200000 &&
            (!strcmp((*pl)->name, "etf") || !strcmp((*pl)->name, "m-etf") || !strcmp((*pl)->name, "m-sct"))) {
            if (b) {
                PsimPlacement dummy = {.algo = (char *)(*pl)->name};
                add_result(b, &dummy, NULL, "skipped: quadratic in the ready set, over 200000 nodes");
            } else {
                printf("%-12s skipped (quadratic in the ready set, over 200000 nodes)\n", (*pl)->name);
            }
            continue;
        }
        g_autoptr(PsimPlacement) p = psim_place(pctx, (*pl)->name, &err);
        if (!p) {
            if (!all) {
                if (b)
                    g_object_unref(b);
                return psim_cli_fail(err);
            }
            if (b) {
                PsimPlacement dummy = {.algo = (char *)(*pl)->name};
                add_result(b, &dummy, NULL, err->message);
            } else {
                printf("%-12s error: %s\n", (*pl)->name, err->message);
            }
            g_clear_error(&err);
            n_fail++;
            continue;
        }
        g_autoptr(PsimPlan) plan = psim_plan_build(pctx, p, &err);
        if (!plan) {
            if (b)
                g_object_unref(b);
            return psim_cli_fail(err);
        }
        if (out && !psim_placement_save(pctx, p, out, &err))
            return psim_cli_fail(err);
        if (plan_path && !psim_plan_save(plan, plan_path, &err))
            return psim_cli_fail(err);
        n_ok++;
        if (b)
            add_result(b, p, plan, NULL);
        else
            printf("%-12s makespan %.3f us  (%d Send/Recv pairs, %.1f ms)\n", p->algo,
                   plan->makespan_us, plan->n_transfers, p->elapsed_ms);
    }
    if (b) {
        if (all)
            json_builder_end_array(b);
        psim_cli_print_json(b);
    }
    return n_ok || !n_fail ? 0 : 1;
}
