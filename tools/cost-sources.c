/* Where each node's cost came from (annotated, measured DB row, estimated, free), counted over a
 * plan for --json and the terminal, and tagged on the simulated trace's ops, so that a user can
 * tell a prediction from measurements from one from estimates (issue 20 item 21). */
#include <stdio.h>

#include "tools/cli.h"

/* The plan's Send and Recv nodes: inserted by partitioning, they are transfers, not the graph's
 * nodes, and are left out of the counts. */
static gboolean *transfer_nodes(const PsimPlan *p)
{
    gboolean *is = g_new0(gboolean, psim_graph_n_nodes(p->graph) + 1);
    for (int32_t i = 0; i < p->n_transfers; i++) {
        is[p->transfers[i].send] = TRUE;
        is[p->transfers[i].recv] = TRUE;
    }
    return is;
}

void psim_cli_cost_sources(PsimCostModel *m, const PsimPlan *p, PsimTimeline *t, PsimCliCostSources *out)
{
    const PsimCluster *c = psim_cost_model_cluster(m);
    int32_t n = psim_graph_n_nodes(p->graph);
    g_autofree gboolean *skip = transfer_nodes(p);
    g_autofree int32_t *cdev = g_new(int32_t, p->n_devices + 1);
    for (int32_t d = 0; d < p->n_devices; d++)
        cdev[d] = psim_cluster_device_find(c, p->devices[d]);
    g_autofree PsimCostSource *src = g_new0(PsimCostSource, n + 1);
    g_autofree int64_t *row = g_new(int64_t, n + 1);
    *out = (PsimCliCostSources){0};
    for (int32_t v = 0; v < n; v++) {
        row[v] = -1;
        int32_t d = p->device_of[v];
        if (skip[v] || d < 0 || d >= p->n_devices || cdev[d] < 0)
            continue;
        psim_cost_node_row(m, p->graph, psim_graph_node(p->graph, v), cdev[d], &src[v], &row[v]);
        out->n[src[v]]++;
    }
    for (guint i = 0; t && i < t->ops->len; i++) {
        int32_t v = g_array_index(t->ops, PsimTimelineOp, i).node;
        if (v >= 0 && v < n && !skip[v] && p->device_of[v] >= 0)
            psim_timeline_op_set_cost(t, i, psim_cost_source_name(src[v]), row[v]);
    }
}

void psim_cli_cost_sources_json(JsonBuilder *b, const PsimCliCostSources *s)
{
    static const PsimCostSource shown[] = {PSIM_COST_SOURCE_MEASURED, PSIM_COST_SOURCE_ESTIMATE,
                                           PSIM_COST_SOURCE_ANNOTATION, PSIM_COST_SOURCE_FREE};
    json_builder_set_member_name(b, "cost_sources");
    json_builder_begin_object(b);
    for (size_t i = 0; i < G_N_ELEMENTS(shown); i++) {
        json_builder_set_member_name(b, psim_cost_source_name(shown[i]));
        json_builder_add_int_value(b, s->n[shown[i]]);
    }
    /* A node no device of its plan can run: only a hand-edited plan has one. */
    if (s->n[PSIM_COST_SOURCE_NONE]) {
        json_builder_set_member_name(b, psim_cost_source_name(PSIM_COST_SOURCE_NONE));
        json_builder_add_int_value(b, s->n[PSIM_COST_SOURCE_NONE]);
    }
    json_builder_end_object(b);
}

char *psim_cli_cost_sources_line(const PsimCliCostSources *s)
{
    GString *l = g_string_new(NULL);
    g_string_printf(l, "%d measured, %d estimated, %d annotated, %d free (no work)",
                    s->n[PSIM_COST_SOURCE_MEASURED], s->n[PSIM_COST_SOURCE_ESTIMATE],
                    s->n[PSIM_COST_SOURCE_ANNOTATION], s->n[PSIM_COST_SOURCE_FREE]);
    if (s->n[PSIM_COST_SOURCE_NONE])
        g_string_append_printf(l, ", %d cannot run on their device", s->n[PSIM_COST_SOURCE_NONE]);
    return g_string_free(l, FALSE);
}
