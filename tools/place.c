/* placesim place: places a graph on a cluster with one algorithm (or all), writes the placement
 * and the partitioned plan, and reports the estimated step time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/placer.h"
#include "tools/cli.h"
#include "placesim/formats.h"

/* Wall times of the steps of `place`, milliseconds: reading the graph, building the placement
 * problem (costs, edges, constraints), the algorithm, the plan (partition, recv schedule), and
 * writing the files. */
typedef struct {
    double load_ms, problem_ms, place_ms, plan_ms, write_ms;
} PlaceTimes;

static void add_times(JsonBuilder *b, const PlaceTimes *t)
{
    json_builder_set_member_name(b, "timings");
    json_builder_begin_object(b);
    const char *names[] = {"load_ms", "problem_ms", "place_ms", "plan_ms", "write_ms"};
    const double vals[] = {t->load_ms, t->problem_ms, t->place_ms, t->plan_ms, t->write_ms};
    for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
        json_builder_set_member_name(b, names[i]);
        json_builder_add_double_value(b, vals[i]);
    }
    json_builder_end_object(b);
}

static double ms_since(gint64 t0) { return (double)(g_get_monotonic_time() - t0) / 1e3; }

static void add_result(JsonBuilder *b, const PsimPlacement *p, const PsimPlan *plan,
                       const PsimCliCostSources *sources, const char *error,
                       const PsimCliGraphOptions *go, const PlaceTimes *times)
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
        if (sources)
            psim_cli_cost_sources_json(b, sources);
        if (times)
            add_times(b, times);
    }
    psim_cli_json_cse(b, go);
    json_builder_end_object(b);
}

/* Where a plan file finds the placed graph: the file (absolute path) or "zoo:NAME" it was read
 * from, when it was read with the default options and nothing but fusion changed it (the plan
 * says so: PsimPlan.graph_fused); else NULL (the plan embeds it). */
static char *graph_source(const char *spec, const PsimCliGraphOptions *go, char **requests,
                          char **colocates)
{
    if (!psim_cli_graph_as_read(go) || (requests && *requests) || (colocates && *colocates))
        return NULL;
    return psim_cli_graph_source(spec);
}

/* A graph source's SHA-256 (psim_graph_source_sha256), NULL if it cannot be taken: a thread,
 * which owns (and frees) its copy of the source's name. */
static gpointer source_sha256(gpointer source)
{
    char *sha = psim_graph_source_sha256(source, NULL);
    g_free(source);
    return sha;
}

/* --request 'GLOB=DEVICE': every node whose name matches GLOB requests DEVICE, as a graph
 * file's "device" field does. FALSE with a usage message for a malformed flag or a GLOB that
 * matches no node. */
static gboolean apply_request(PsimGraph *g, const char *spec, GError **error)
{
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "place: --request '%s' must be NODE_GLOB=DEVICE (see 'placesim place --help')", spec);
        return FALSE;
    }
    g_autofree char *glob = g_strndup(spec, (gsize)(eq - spec));
    g_autoptr(GPatternSpec) pat = g_pattern_spec_new(glob);
    int32_t hits = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        PsimNode *n = psim_graph_node(g, v);
        if (g_pattern_spec_match_string(pat, n->name)) {
            psim_graph_node_device_set(g, n, eq + 1);
            hits++;
        }
    }
    if (!hits) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "place: --request '%s': no node of '%s' matches '%s'",
                    spec, psim_graph_name(g), glob);
        return FALSE;
    }
    return TRUE;
}

/* --colocate 'GLOB[,GLOB...]': the nodes whose names match one of the globs go on one device,
 * as `_class: loc:@NODE` attributes ask in a graph file: each gets loc:@FIRST, FIRST the first
 * match. */
static gboolean apply_colocate(PsimGraph *g, const char *glob, GError **error)
{
    g_auto(GStrv) globs = g_strsplit(glob, ",", -1);
    g_autoptr(GPtrArray) pats = g_ptr_array_new_with_free_func((GDestroyNotify)g_pattern_spec_free);
    for (char **x = globs; *x; x++)
        if (**x)
            g_ptr_array_add(pats, g_pattern_spec_new(*x));
    const char *first = NULL;
    int32_t hits = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        PsimNode *n = psim_graph_node(g, v);
        gboolean match = FALSE;
        for (guint k = 0; k < pats->len && !match; k++)
            match = g_pattern_spec_match_string(g_ptr_array_index(pats, k), n->name);
        if (!match)
            continue;
        hits++;
        if (!first) {
            first = n->name;
            continue;
        }
        g_autofree char *loc = g_strconcat("loc:@", first, NULL);
        const PsimAttr *a = psim_node_attr(n, "_class");
        g_autoptr(GPtrArray) all = g_ptr_array_new();
        if (a && a->type == PSIM_ATTR_STRING)
            g_ptr_array_add(all, (gpointer)a->v.s);
        else if (a && a->type == PSIM_ATTR_STRINGS)
            for (int32_t k = 0; k < a->n; k++)
                g_ptr_array_add(all, (gpointer)a->v.strs[k]);
        g_ptr_array_add(all, loc);
        psim_graph_node_attr_set_strings(g, n, "_class", (int32_t)all->len, (const char *const *)all->pdata);
    }
    if (!hits) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "place: --colocate '%s': no node of '%s' matches it",
                    glob, psim_graph_name(g));
        return FALSE;
    }
    return TRUE;
}

/* The cluster a plan was made for, as cluster JSON: with --mem-limit, each device's memory is
 * the limit the placer kept (so that `sim --plan` reports peaks against it). */
static char *plan_cluster_json(const PsimCluster *cluster, uint64_t mem_limit)
{
    g_autofree char *json = psim_cluster_to_json(cluster);
    if (!mem_limit)
        return g_steal_pointer(&json);
    g_autoptr(PsimCluster) copy = psim_cluster_parse("cluster", json, strlen(json), NULL);
    if (!copy)
        return g_steal_pointer(&json);
    for (int32_t d = 0; d < psim_cluster_n_devices(copy); d++) {
        PsimDevice *dev = psim_cluster_device(copy, d);
        if (!dev->memory_bytes || dev->memory_bytes > mem_limit)
            dev->memory_bytes = mem_limit;
    }
    return psim_cluster_to_json(copy);
}

int psim_cmd_place(int argc, char **argv)
{
    g_autofree char *cluster_spec = NULL, *algo = NULL, *out = NULL, *plan_path = NULL,
                    *placement = NULL, *mem_limit = NULL, *db_path = NULL, *rounding = NULL;
    g_autofree char *budget_text = NULL, *seed_text = NULL, *margin_text = NULL;
    g_auto(GStrv) requests = NULL, colocates = NULL;
    gboolean json = FALSE, compress = FALSE, coarsen = FALSE, training = FALSE, plan_orders = FALSE;
    double budget = 1000, margin = -1;
    int64_t seed = 1;
    g_auto(PsimCliGraphOptions) go = {0};
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &cluster_spec,
         "The cluster: local, local:N, a cluster JSON file, uniform:P[:GBPS[:LATENCY_US]] (P identical devices) or stg:P (uniform, free links)",
         "SPEC"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path,
         "Cost DB of measured kernel times and calibrated rates (from placesim profile; read only)", "DB"},
        {"algo", 'a', 0, G_OPTION_ARG_STRING, &algo, "Placement algorithm, or 'all' (default greedy)",
         "NAME"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Write the placement JSON here", "FILE"},
        {"plan", 'p', 0, G_OPTION_ARG_FILENAME, &plan_path,
         "Write the plan JSON here (placesim.plan/2: it refers to a graph file read as it is by path and SHA-256, else holds the graph)", "FILE"},
        {"plan-orders", 0, 0, G_OPTION_ARG_NONE, &plan_orders,
         "Write each device's order in the plan by node name (to edit by hand) instead of the placement's order", NULL},
        {"placement", 0, 0, G_OPTION_ARG_FILENAME, &placement,
         "Placement JSON read by --algo file", "FILE"},
        {"mem-limit", 0, 0, G_OPTION_ARG_STRING, &mem_limit, "Memory limit per device in bytes (K, M, G suffixes: powers of 1024)",
         "BYTES"},
        {"compress", 0, 0, G_OPTION_ARG_NONE, &compress,
         "Send float32 tensors between devices as 16 bits", NULL},
        {"compress-rounding", 0, 0, G_OPTION_ARG_STRING, &rounding,
         "How --compress cuts float32 to 16 bits: truncate (the whitepaper's, relative error "
         "< 2^-7; default) or rne (round to nearest even, <= 2^-8); implies --compress",
         "MODE"},
        {"coarsen", 0, 0, G_OPTION_ARG_NONE, &coarsen, "Merge chains before placing", NULL},
        {"budget-ms", 0, 0, G_OPTION_ARG_STRING, &budget_text, "Search budget, at most one day (default 1000)", "MS"},
        {"seed", 0, 0, G_OPTION_ARG_STRING, &seed_text, "Search seed, a non-negative integer (default 1)", "S"},
        {"recv-margin-us", 0, 0, G_OPTION_ARG_STRING, &margin_text,
         "Recv earliest start = ALAP - margin (default: the transfer's own time)", "US"},
        {"request", 0, 0, G_OPTION_ARG_STRING_ARRAY, &requests,
         "Nodes whose names match the glob NODE_GLOB (* and ?) request DEVICE, a full or short "
         "device name such as CPU:1 or GPU:* (repeatable; as a graph file's \"device\")", "NODE_GLOB=DEVICE"},
        {"colocate", 0, 0, G_OPTION_ARG_STRING_ARRAY, &colocates,
         "Nodes whose names match one of the comma-separated globs go on one device (repeatable: "
         "a group each; as _class loc:@ attributes in a graph file)",
         "GLOB[,GLOB...]"},
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
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_ALL | PSIM_CLI_GRAPH_FUSE);
    if (!psim_cli_parse(ctx, &argc, &argv, "place"))
        return 2;
    if (argc != 2)
        return psim_cli_usage("place", "expected one GRAPH");
    if (!cluster_spec)
        return psim_cli_usage("place", "--cluster is required");
    PsimPlaceOptions opt;
    psim_place_options_init(&opt);
    GError *err = NULL;
    uint64_t limit = 0;
    if (!psim_cli_flag_size("--mem-limit", mem_limit, 1, G_MAXINT64, &limit, &err) ||
        !psim_cli_flag_double("--budget-ms", budget_text, 0, PSIM_CLI_MAX_MS, &budget, &err) ||
        !psim_cli_flag_int("--seed", seed_text, 0, G_MAXINT64, &seed, &err) ||
        !psim_cli_flag_double("--recv-margin-us", margin_text, 0, 1e12, &margin, &err))
        return psim_cli_fail(err);
    if (mem_limit)
        opt.mem_limit = limit;
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

    go.training = training;
    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    PlaceTimes times = {0};
    gint64 t_load = g_get_monotonic_time();
    g_autoptr(PsimGraph) g = psim_cli_graph_load(argv[1], &go, &err);
    if (!g)
        return psim_cli_fail(err);
    times.load_ms = ms_since(t_load);
    for (char **r = requests; r && *r; r++)
        if (!apply_request(g, *r, &err))
            return psim_cli_fail(err);
    for (char **r = colocates; r && *r; r++)
        if (!apply_colocate(g, *r, &err))
            return psim_cli_fail(err);
    g_autoptr(PsimCluster) cluster = psim_cli_cluster(cluster_spec, g, &err);
    if (!cluster || !psim_cli_graph_fuse(&g, cluster, &go, &err))
        return psim_cli_fail(err);
    /* A plan file refers to its graph by SHA-256: hashed on another thread while placing. */
    g_autofree char *sha_source = plan_path ? graph_source(argv[1], &go, requests, colocates) : NULL;
    g_autoptr(GThread) sha_thread = NULL;
    if (sha_source) {
        char *copy = g_strdup(sha_source);
        if (!(sha_thread = g_thread_try_new("psim-sha256", source_sha256, copy, NULL)))
            g_free(copy);
    }
    g_autoptr(PsimCostDb) db = NULL;
    if (db_path && !(db = psim_cost_db_open_readonly(db_path, &err)))
        return psim_cli_fail(err);
    /* Devices take their calibrated rates, so that the placer's device classes and anything
     * reading the cluster agree with the cost model's estimates. */
    if (db && !psim_cost_db_calibrate_cluster(db, cluster, NULL, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimCostModel) model = psim_cost_model_new(cluster, db);
    gint64 t_problem = g_get_monotonic_time();
    g_autoptr(PsimPlaceCtx) pctx = psim_place_ctx_new(g, model, &opt, &err);
    if (!pctx)
        return psim_cli_fail(err);
    times.problem_ms = ms_since(t_problem);

    /* Written under temporary names and renamed at the end, so a failure leaves old files. */
    g_autoptr(PsimCliOutputs) outs = psim_cli_outputs_new();
    const char *out_tmp = NULL, *plan_tmp = NULL;
    if ((out && !(out_tmp = psim_cli_output(outs, out, FALSE, &err))) ||
        (plan_path && !(plan_tmp = psim_cli_output(outs, plan_path, FALSE, &err))))
        return psim_cli_fail(err);
    if (go.cse && !json)
        psim_cli_print_cse(&go, stdout);
    JsonBuilder *b = json ? json_builder_new() : NULL;
    if (all && b) {
        /* One object: the results per algorithm, then the choice among them. */
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "results");
        json_builder_begin_array(b);
    }
    int n_ok = 0, n_fail = 0;
    /* With all: every plan's prediction, for the choice at the end. */
    g_autoptr(GArray) cands = g_array_new(FALSE, FALSE, sizeof(PsimCliCandidate));
    g_autoptr(GPtrArray) cand_names = g_ptr_array_new();
    for (const PsimPlacer *const *pl = psim_placer_list(NULL); *pl; pl++) {
        if (all ? !strcmp((*pl)->name, "file") : strcmp((*pl)->name, name))
            continue;
        /* The ETF family scans every ready node on every device at each step: with `all` on
         * a huge graph it would run for hours, so it is left out there (ask for it by name). */
        if (all && psim_graph_n_nodes(g) > 200000 &&
            (!strcmp((*pl)->name, "etf") || !strcmp((*pl)->name, "m-etf") || !strcmp((*pl)->name, "m-sct"))) {
            if (b) {
                PsimPlacement dummy = {.algo = (char *)(*pl)->name};
                add_result(b, &dummy, NULL, NULL, "skipped: quadratic in the ready set, over 200000 nodes", &go, NULL);
            } else {
                printf("%-12s skipped (quadratic in the ready set, over 200000 nodes)\n", (*pl)->name);
            }
            continue;
        }
        gint64 t_place = g_get_monotonic_time();
        g_autoptr(PsimPlacement) p = psim_place(pctx, (*pl)->name, &err);
        times.place_ms = ms_since(t_place);
        if (!p) {
            if (!all) {
                if (b)
                    g_object_unref(b);
                return psim_cli_fail(err);
            }
            if (b) {
                PsimPlacement dummy = {.algo = (char *)(*pl)->name};
                add_result(b, &dummy, NULL, NULL, err->message, &go, NULL);
            } else {
                printf("%-12s error: %s\n", (*pl)->name, err->message);
            }
            g_clear_error(&err);
            n_fail++;
            continue;
        }
        gint64 t_plan = g_get_monotonic_time();
        g_autoptr(PsimPlan) plan = psim_plan_build(pctx, p, &err);
        times.plan_ms = ms_since(t_plan);
        if (!plan) {
            if (b)
                g_object_unref(b);
            return psim_cli_fail(err);
        }
        gint64 t_write = g_get_monotonic_time();
        if (plan_tmp && !plan->cluster_json)
            plan->cluster_json = plan_cluster_json(cluster, opt.mem_limit); /* sim --plan needs no --cluster */
        if (plan_tmp && !plan->graph_source) {
            plan->graph_source = graph_source(argv[1], &go, requests, colocates);
            plan->graph_fused = plan->graph_source && go.n_fuse_removed > 0;
        }
        /* The hash taken while placing, when it was of the source the plan names (else, or if
         * it failed, the save hashes the source itself and says what went wrong). */
        g_autofree char *sha = sha_thread ? g_thread_join(g_steal_pointer(&sha_thread)) : NULL;
        if (sha && g_strcmp0(sha_source, plan->graph_source))
            g_clear_pointer(&sha, g_free);
        if ((out_tmp && !psim_placement_save(pctx, p, out_tmp, &err)) ||
            (plan_tmp && !psim_plan_save_sha(plan, plan_tmp, plan_orders ? PSIM_PLAN_JSON_ORDERS : 0, sha, &err))) {
            if (b)
                g_object_unref(b);
            return psim_cli_fail(err);
        }
        times.write_ms = ms_since(t_write);
        n_ok++;
        PsimCliCandidate cand = {.sim_us = plan->makespan_us, .transfers = plan->n_transfers};
        for (int32_t d = 0; d < plan->n_devices; d++)
            cand.devices += plan->n_order[d] > 0;
        g_array_append_val(cands, cand);
        g_ptr_array_add(cand_names, (gpointer)(*pl)->name);
        /* Per placement: a node's cost source depends on the device it was placed on. */
        PsimCliCostSources sources;
        psim_cli_cost_sources(model, plan, NULL, &sources);
        if (b) {
            add_result(b, p, plan, &sources, NULL, &go, &times);
        } else {
            g_autofree char *line = psim_cli_cost_sources_line(&sources);
            printf("%-12s makespan %.3f us  (%d Send/Recv pairs, %.1f ms)\n", p->algo,
                   plan->makespan_us, plan->n_transfers, p->elapsed_ms);
            printf("%-12s costs: %s\n", "", line);
        }
    }
    if (!psim_cli_outputs_commit(outs, &err)) {
        if (b)
            g_object_unref(b);
        return psim_cli_fail(err);
    }
    gboolean simpler = FALSE;
    int pick = all ? psim_cli_choose((const PsimCliCandidate *)cands->data, (int)cands->len,
                                     PSIM_CLI_TIE_PCT, &simpler)
                   : -1;
    if (b) {
        if (all) {
            json_builder_end_array(b);
            json_builder_set_member_name(b, "chosen");
            if (pick >= 0)
                json_builder_add_string_value(b, g_ptr_array_index(cand_names, pick));
            else
                json_builder_add_null_value(b);
            json_builder_set_member_name(b, "chosen_makespan_us");
            json_builder_add_double_value(b, pick >= 0 ? g_array_index(cands, PsimCliCandidate, pick).sim_us : 0);
            json_builder_set_member_name(b, "simpler");
            json_builder_add_boolean_value(b, simpler);
            json_builder_set_member_name(b, "tie_pct");
            json_builder_add_double_value(b, PSIM_CLI_TIE_PCT);
            json_builder_end_object(b);
        }
        psim_cli_print_json(b);
    } else if (pick >= 0) {
        const PsimCliCandidate *c = &g_array_index(cands, PsimCliCandidate, pick);
        printf("chosen       %s (makespan %.3f us, %d device%s, %d transfers)", (const char *)g_ptr_array_index(cand_names, pick),
               c->sim_us, c->devices, c->devices == 1 ? "" : "s", c->transfers);
        if (simpler)
            printf(": the simplest plan within the simulator's error bound (%g%%) of the fastest", PSIM_CLI_TIE_PCT);
        putchar('\n');
    }
    return n_ok || !n_fail ? 0 : 1;
}
