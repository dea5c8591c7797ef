/* placesim export: converts a graph to another format, optionally with a placement applied
 * (--placement) or as a plan's partitioned graph with its Send/Recv pairs (--plan). */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "placesim/formats.h"
#include "placesim/placer.h"

/* Each node's assigned device from a placement JSON. */
static gboolean apply_placement(PsimGraph *g, const char *path, GError **error)
{
    g_auto(GStrv) devices = psim_placement_read_devices(g, path, error);
    if (!devices)
        return FALSE;
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++)
        psim_graph_node_assigned_set(g, psim_graph_node(g, v), devices[v]);
    return TRUE;
}

/* A GRAPH given beside --plan must be the plan's: the plan graph's first nodes are the graph's,
 * in order (partitioning appends its Send/Recv pairs after them). */
static gboolean check_plan_graph(const PsimPlan *p, const char *plan_path, const PsimGraph *g,
                                 GError **error)
{
    int32_t n = psim_graph_n_nodes(g), n_plan = psim_graph_n_nodes(p->graph);
    int32_t n_own = n_plan - 2 * psim_plan_n_sends(p);
    for (int32_t v = 0; v < MIN(n, n_own); v++) {
        const PsimNode *a = psim_graph_node(g, v), *b = psim_graph_node(p->graph, v);
        if (strcmp(a->name, b->name) || strcmp(a->op, b->op)) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: node '%s': not the plan of graph '%s' (its node %d is '%s')",
                        plan_path, b->name, psim_graph_name(g), v, a->name);
            return FALSE;
        }
    }
    if (n != n_own) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: field 'graph': not the plan of graph '%s' (%d nodes, the graph has %d)",
                    plan_path, psim_graph_name(g), n_own, n);
        return FALSE;
    }
    return TRUE;
}

/* The plan's partitioned graph with every node's device the plan's. */
static PsimGraph *plan_graph(const char *plan_path, const PsimGraph *g, GError **error)
{
    g_autoptr(PsimPlan) p = psim_plan_load(plan_path, error);
    if (!p || (g && !check_plan_graph(p, plan_path, g, error)))
        return NULL;
    for (int32_t v = 0; v < psim_graph_n_nodes(p->graph); v++)
        if (p->device_of[v] >= 0)
            psim_graph_node_assigned_set(p->graph, psim_graph_node(p->graph, v),
                                         p->devices[p->device_of[v]]);
    return g_steal_pointer(&p->graph);
}

static PsimFormat format_of(const char *format, const char *out)
{
    if (format)
        return psim_format_from_name(format);
    if (out && (g_str_has_suffix(out, ".dot") || g_str_has_suffix(out, ".gv")))
        return PSIM_FORMAT_DOT;
    if (out && g_str_has_suffix(out, ".graphml"))
        return PSIM_FORMAT_GRAPHML;
    if (out && g_str_has_suffix(out, ".pbtxt"))
        return PSIM_FORMAT_TF_PBTXT;
    if (out && g_str_has_suffix(out, ".onnx"))
        return PSIM_FORMAT_ONNX;
    return PSIM_FORMAT_JSON;
}

static gboolean write_stdout(const PsimGraph *g, PsimFormat f, GError **error)
{
    g_autofree char *text = NULL;
    gsize len = 0;
    switch (f) {
    case PSIM_FORMAT_DOT: text = psim_export_dot(g, error); break;
    case PSIM_FORMAT_GRAPHML: text = psim_export_graphml(g, error); break;
    case PSIM_FORMAT_TF_PBTXT: text = psim_export_pbtxt(g, error); break;
    case PSIM_FORMAT_ONNX: text = psim_export_onnx(g, &len, error); break;
    default: text = psim_export_json(g, &len); break;
    }
    if (!text)
        return FALSE;
    fwrite(text, 1, len ? len : strlen(text), stdout);
    return TRUE;
}

/* {"format", "nodes", "devices", "out"}: what was written, and on how many distinct devices
 * (assigned, else requested) its nodes are. */
static void print_figures(const PsimGraph *g, PsimFormat f, const char *out)
{
    g_autoptr(GHashTable) devices = g_hash_table_new(g_str_hash, g_str_equal);
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        const PsimNode *n = psim_graph_node(g, v);
        const char *d = n->assigned_device ? n->assigned_device : n->device;
        if (d)
            g_hash_table_add(devices, (gpointer)d);
    }
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "format");
    json_builder_add_string_value(b, psim_format_name(f));
    json_builder_set_member_name(b, "nodes");
    json_builder_add_int_value(b, psim_graph_n_nodes(g));
    json_builder_set_member_name(b, "devices");
    json_builder_add_int_value(b, g_hash_table_size(devices));
    json_builder_set_member_name(b, "out");
    json_builder_add_string_value(b, out);
    json_builder_end_object(b);
    psim_cli_print_json(b);
}

int psim_cmd_export(int argc, char **argv)
{
    g_autofree char *format = NULL, *out = NULL, *placement = NULL, *plan = NULL, *loss = NULL;
    g_autofree char *optimizer = NULL, *lr_s = NULL, *replicas_s = NULL, *ps_s = NULL, *cluster_spec = NULL;
    g_autofree char *caching = NULL;
    gboolean training = FALSE, json = FALSE, gradients = FALSE, train_step = FALSE, fuse = FALSE;
    g_auto(PsimCliGraphOptions) go = {0};
    GOptionEntry entries[] = {
        {"format", 'f', 0, G_OPTION_ARG_STRING, &format,
         "Output format: json, dot, graphml, pbtxt or onnx (default: from the output name, else json)",
         "FMT"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Write to FILE instead of stdout", "FILE"},
        {"placement", 0, 0, G_OPTION_ARG_FILENAME, &placement,
         "Set each node's device from a placement JSON (placesim.placement/1, from place)",
         "P.json"},
        {"plan", 0, 0, G_OPTION_ARG_FILENAME, &plan,
         "Export a plan's partitioned graph (Send/Recv pairs; TF's _Send/_Recv in pbtxt) with "
         "every node's device; GRAPH may then be left out",
         "P.json"},
        {"training", 0, 0, G_OPTION_ARG_NONE, &training, "PipeDream: expand into a training graph",
         NULL},
        {"gradients", 0, 0, G_OPTION_ARG_NONE, &gradients,
         "Export a training graph: the loss (--loss, else a softmax cross-entropy of the first output's class scores against a new 'labels' input) and its gradients by every float parameter, as outputs",
         NULL},
        {"loss", 0, 0, G_OPTION_ARG_STRING, &loss, "With --gradients or --train-step: the scalar loss tensor (NODE or NODE:K)",
         "REF"},
        {"train-step", 0, 0, G_OPTION_ARG_NONE, &train_step,
         "Export the whole training step (what 'placesim train' runs): the training graph with its parameters as variables, optimizer ops and Assigns; output 'train/loss' runs one step when fetched",
         NULL},
        {"optimizer", 0, 0, G_OPTION_ARG_STRING, &optimizer, "With --train-step: sgd (momentum 0.9, the default) or adam", "NAME"},
        {"lr", 0, 0, G_OPTION_ARG_STRING, &lr_s, "With --train-step: the learning rate (default 0.01 for sgd, 0.001 for adam)", "X"},
        {"replicas", 0, 0, G_OPTION_ARG_STRING, &replicas_s,
         "With --train-step: N synchronous replicas (as 'placesim train --replicas'; GRAPH's batch is each replica's)", "N"},
        {"ps", 0, 0, G_OPTION_ARG_STRING, &ps_s, "With --replicas: K parameter servers (default 1)", "K"},
        {"caching-device", 0, 0, G_OPTION_ARG_STRING, &caching,
         "With --replicas: none (each read of a variable crosses on its own, the default) or worker (one read per worker)", "WHERE"},
        {"cluster", 0, 0, G_OPTION_ARG_STRING, &cluster_spec,
         "With --replicas: request replica r on this cluster's device r and the variables on its PS devices (as 'placesim train' does)", "SPEC"},
        {"fuse", 0, 0, G_OPTION_ARG_NONE, &fuse,
         "Fuse the graph as 'run' does on the local CPU (Conv and its activation into com.microsoft FusedConv, Swish into QuickGelu, GELU into Gelu): the graph placesim places and runs, which ONNX Runtime reads too", NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json,
         "Print one JSON object with the figures (format, nodes, devices, out); needs --out", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - convert a graph to another format");
    g_option_context_set_summary(ctx,
        "With --placement or --plan, each node's device is its placed one (in pbtxt, the\n"
        "NodeDef's device field, as TensorFlow reads a placement).");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_ALL);
    if (!psim_cli_parse(ctx, &argc, &argv, "export"))
        return 2;
    if (argc != 2 && !(argc == 1 && plan))
        return psim_cli_usage("export", "expected one GRAPH (it may be left out with --plan: the plan carries its graph)");
    if (placement && plan)
        return psim_cli_usage("export", "give at most one of --placement and --plan");
    if (((gradients || train_step) && plan) || (loss && !gradients && !train_step) ||
        (gradients && train_step))
        return psim_cli_usage("export", "--gradients or --train-step (one of them) takes a GRAPH, not --plan; --loss needs one of them");
    if ((optimizer || lr_s || replicas_s) && !train_step)
        return psim_cli_usage("export", "--optimizer, --lr and --replicas need --train-step");
    if ((ps_s || cluster_spec || caching) && !replicas_s)
        return psim_cli_usage("export", "--ps, --cluster and --caching-device need --replicas");
    PsimVariableReads reads = PSIM_READ_PER_OP;
    int64_t replicas = 1, n_ps = 1;
    if (optimizer && strcmp(optimizer, "sgd") && strcmp(optimizer, "adam"))
        return psim_cli_usage("export", "--optimizer '%s' is neither sgd nor adam", optimizer);
    gboolean adam = optimizer && !strcmp(optimizer, "adam");
    double lr = adam ? 0.001 : 0.01;
    GError *lerr = NULL;
    if (!psim_cli_flag_double("--lr", lr_s, 1e-12, 100, &lr, &lerr) ||
        !psim_cli_flag_int("--replicas", replicas_s, 1, 1024, &replicas, &lerr) ||
        !psim_cli_flag_int("--ps", ps_s, 1, 1024, &n_ps, &lerr) ||
        !psim_cli_caching_device(caching, &reads, &lerr))
        return psim_cli_fail(lerr);
    if (fuse && plan)
        return psim_cli_usage("export", "--fuse fuses a graph; a plan is written as it was planned (fuse before 'place' instead)");
    if (json && !out)
        return psim_cli_usage("export", "--json needs --out (the export itself goes to stdout otherwise)");
    PsimFormat f = format_of(format, out);
    if (f != PSIM_FORMAT_JSON && f != PSIM_FORMAT_DOT && f != PSIM_FORMAT_GRAPHML &&
        f != PSIM_FORMAT_TF_PBTXT && f != PSIM_FORMAT_ONNX)
        return psim_cli_usage("export", "unknown --format '%s' (json, dot, graphml, pbtxt, onnx)", format);

    GError *err = NULL;
    go.training = training;
    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimGraph) g = NULL;
    if (argc == 2 && !(g = psim_cli_graph_load(argv[1], &go, &err)))
        return psim_cli_fail(err);
    /* stdout may be the export itself: the CSE count goes to stderr. */
    if (g && go.cse)
        fprintf(stderr, "placesim: cse removed %d node%s\n", go.n_cse_removed, go.n_cse_removed == 1 ? "" : "s");
    if (gradients) {
        int32_t n_params = 0;
        PsimGraph *t = psim_graph_training(g, loss, &n_params, &err);
        if (!t)
            return psim_cli_fail(err);
        fprintf(stderr, "placesim: training graph of %d nodes (%d before), gradients of %d parameters\n",
                psim_graph_n_nodes(t), psim_graph_n_nodes(g), n_params);
        psim_graph_free(g);
        g = t;
    }
    if (train_step) {
        PsimTrainSpec spec = {.optimizer = adam ? PSIM_OPTIMIZER_ADAM : PSIM_OPTIMIZER_SGD,
                              .lr = lr, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                              .epsilon = 1e-8, .loss = loss, .replicas = (int32_t)replicas,
                              .variable_reads = reads};
        g_autoptr(PsimCluster) c = cluster_spec ? psim_cli_cluster(cluster_spec, g, &err) : NULL;
        g_autofree const char **workers = NULL, **ps = NULL;
        if (cluster_spec && (!c || !psim_cli_replica_devices(c, replicas, n_ps, &workers, &ps, &err)))
            return psim_cli_fail(err);
        spec.worker_devices = workers;
        spec.ps_devices = ps;
        spec.n_ps = (int32_t)n_ps;
        PsimTrainInfo info;
        PsimGraph *t = psim_graph_train_step(g, &spec, &info, &err);
        if (!t)
            return psim_cli_fail(err);
        fprintf(stderr, "placesim: training step of %d nodes (%d before), %d variables trained\n",
                psim_graph_n_nodes(t), psim_graph_n_nodes(g), info.n_variables);
        psim_train_info_clear(&info);
        psim_graph_free(g);
        g = t;
    }
    if (fuse) {
        g_autoptr(PsimCluster) c = psim_cli_cluster("local", g, &err);
        if (!c || !psim_cli_graph_fuse(&g, c, &go, &err))
            return psim_cli_fail(err);
        fprintf(stderr, "placesim: fusion removed %d node%s\n", go.n_fuse_removed, go.n_fuse_removed == 1 ? "" : "s");
    }
    if (placement && !apply_placement(g, placement, &err))
        return psim_cli_fail(err);
    if (plan) {
        PsimGraph *pg = plan_graph(plan, g, &err);
        if (!pg)
            return psim_cli_fail(err);
        psim_graph_free(g);
        g = pg;
    }
    if (out) {
        g_autoptr(PsimCliOutputs) outs = psim_cli_outputs_new();
        const char *tmp = psim_cli_output(outs, out, FALSE, &err);
        if (!tmp || !psim_graph_save(g, tmp, f, &err) || !psim_cli_outputs_commit(outs, &err))
            return psim_cli_fail(err);
    } else if (!write_stdout(g, f, &err)) {
        return psim_cli_fail(err);
    }
    if (json)
        print_figures(g, f, out);
    return 0;
}
