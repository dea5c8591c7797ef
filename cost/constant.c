/* The constant subgraph as the executor evaluates it (once, before the first step): its nodes
 * cost nothing per step. */
#include <string.h>

#include "placesim/cost.h"

gboolean *psim_cost_constant_nodes(const PsimGraph *g)
{
    int32_t n = psim_graph_n_nodes(g);
    g_autofree int32_t *topo = psim_graph_topo_order(g, NULL);
    if (!topo)
        return NULL;
    const int32_t *poff, *pred;
    psim_graph_pred(g, &poff, &pred);
    gboolean *c = g_new0(gboolean, n ? n : 1);
    for (int32_t t = 0; t < n; t++) {
        int32_t v = topo[t];
        const PsimNode *node = psim_graph_node(g, v);
        /* As the executor's classification: graph inputs, and Send/Recv (a tensor that crosses
         * devices arrives in every step), are never evaluated before the step. */
        if (!strcmp(node->op, "Placeholder") || (node->flags & PSIM_NODE_FED) ||
            !strcmp(node->op, "Send") || !strcmp(node->op, "Recv"))
            continue;
        gboolean known = node->n_outputs > 0;
        for (int32_t k = 0; k < node->n_outputs; k++)
            if (!node->outputs[k].value)
                known = FALSE;
        if (known || (node->flags & PSIM_NODE_CONSTANT)) {
            c[v] = TRUE;
            continue;
        }
        const PsimOpDef *d = psim_op_lookup(node->op);
        if (d && (d->flags & (PSIM_OP_STATEFUL | PSIM_OP_ABSTRACT)))
            continue;
        gboolean all = TRUE;
        for (int32_t j = poff[v]; j < poff[v + 1]; j++)
            if (!c[pred[j]])
                all = FALSE;
        c[v] = all;
    }
    return c;
}
