/* placesim inspect: a summary of a graph file (counts, ops, FLOPs, bytes, critical path). */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

/* Per-node cost for the critical path: the mean of a node's annotations; source ops cost 0.
 * Returns FALSE when some computing node has no annotation (the path is then unknown). */
static gboolean annotated_costs(const PsimGraph *g, double *cost)
{
    gboolean any = FALSE;
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        const PsimNode *n = psim_graph_node(g, i);
        cost[i] = 0;
        if (n->n_costs) {
            for (int32_t k = 0; k < n->n_costs; k++)
                cost[i] += n->costs[k].us;
            cost[i] /= n->n_costs;
            any = TRUE;
            continue;
        }
        const PsimOpDef *d = psim_op_lookup(n->op);
        if (!(d && (d->flags & PSIM_OP_SOURCE)) && strcmp(n->op, "NoOp") && strcmp(n->op, "Identity"))
            return FALSE;
    }
    return any;
}

static int cmp_count(gconstpointer a, gconstpointer b, gpointer user)
{
    GHashTable *h = user;
    int ca = GPOINTER_TO_INT(g_hash_table_lookup(h, a)), cb = GPOINTER_TO_INT(g_hash_table_lookup(h, b));
    return ca != cb ? cb - ca : strcmp(a, b);
}

int psim_cmd_inspect(int argc, char **argv)
{
    gboolean json = FALSE, training = FALSE;
    g_auto(PsimCliGraphOptions) go = {0};
    GOptionEntry entries[] = {
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {"training", 0, 0, G_OPTION_ARG_NONE, &training,
         "PipeDream profiles: expand into a training graph (forward and backward)", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("FILE - summarize a graph");
    g_option_context_set_summary(ctx,
        "FILE is an ONNX model, a TF GraphDef (.pb or .pbtxt), placesim JSON, a PipeDream\n"
        "profile, an STG task graph, or a built-in model (zoo:NAME).");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_ALL);
    if (!psim_cli_parse(ctx, &argc, &argv, "inspect"))
        return 2;
    if (argc != 2)
        return psim_cli_usage("inspect", "expected one FILE");
    GError *err = NULL;
    go.training = training;
    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimGraph) g = psim_cli_graph_load(argv[1], &go, &err);
    if (!g)
        return psim_cli_fail(err);

    PsimGraphStats st;
    psim_graph_stats(g, &st);
    int32_t n = psim_graph_n_nodes(g);
    g_autoptr(GHashTable) ops = g_hash_table_new(g_str_hash, g_str_equal);
    for (int32_t i = 0; i < n; i++) {
        const char *op = psim_graph_node(g, i)->op;
        g_hash_table_insert(ops, (gpointer)op,
                            GINT_TO_POINTER(GPOINTER_TO_INT(g_hash_table_lookup(ops, op)) + 1));
    }
    g_autoptr(GList) keys = g_list_sort_with_data(g_hash_table_get_keys(ops), cmp_count, ops);
    g_autofree double *cost = g_new(double, n ? n : 1);
    gboolean have_cp = annotated_costs(g, cost);
    double cp = -1;
    if (have_cp) {
        cp = psim_graph_critical_path(g, cost, NULL, NULL, NULL, NULL, &err);
        if (cp < 0)
            return psim_cli_fail(err);
    }

    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "name");
        json_builder_add_string_value(b, psim_graph_name(g));
        json_builder_set_member_name(b, "nodes");
        json_builder_add_int_value(b, st.n_nodes);
        json_builder_set_member_name(b, "edges");
        json_builder_add_int_value(b, st.n_edges);
        json_builder_set_member_name(b, "ops");
        json_builder_begin_object(b);
        for (GList *l = keys; l; l = l->next) {
            json_builder_set_member_name(b, l->data);
            json_builder_add_int_value(b, GPOINTER_TO_INT(g_hash_table_lookup(ops, l->data)));
        }
        json_builder_end_object(b);
        json_builder_set_member_name(b, "flops");
        json_builder_add_double_value(b, st.flops);
        json_builder_set_member_name(b, "param_bytes");
        json_builder_add_int_value(b, (gint64)st.param_bytes);
        json_builder_set_member_name(b, "activation_bytes");
        json_builder_add_int_value(b, (gint64)st.activation_bytes);
        json_builder_set_member_name(b, "inputs");
        json_builder_add_int_value(b, psim_graph_n_inputs(g));
        json_builder_set_member_name(b, "outputs");
        json_builder_add_int_value(b, psim_graph_n_outputs(g));
        json_builder_set_member_name(b, "critical_path_us");
        if (have_cp)
            json_builder_add_double_value(b, cp);
        else
            json_builder_add_null_value(b);
        psim_cli_json_cse(b, &go);
        json_builder_end_object(b);
        psim_cli_print_json(b);
        return 0;
    }
    printf("graph       %s\n", psim_graph_name(g));
    printf("nodes       %d\n", st.n_nodes);
    printf("edges       %" G_GINT64_FORMAT "\n", st.n_edges);
    printf("inputs      %d\n", psim_graph_n_inputs(g));
    printf("outputs     %d\n", psim_graph_n_outputs(g));
    printf("flops       %.4g\n", st.flops);
    printf("parameters  %.3f MB\n", st.param_bytes / 1e6);
    printf("activations %.3f MB\n", st.activation_bytes / 1e6);
    if (go.cse)
        printf("cse         removed %d node%s\n", go.n_cse_removed, go.n_cse_removed == 1 ? "" : "s");
    if (have_cp)
        printf("critical path %.6g us\n", cp);
    else
        printf("critical path unknown (not every node has a cost annotation)\n");
    printf("ops:\n");
    for (GList *l = keys; l; l = l->next)
        printf("  %-24s %d\n", (char *)l->data, GPOINTER_TO_INT(g_hash_table_lookup(ops, l->data)));
    return 0;
}
