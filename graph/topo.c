/* Graph structure: DAG check, topological order and the critical path over the IR's own CSR
 * arrays; and igraph's set-up (quiet handlers, one lock) for the code that hands it a copy of
 * the edges (the DOT and GraphML exporters). */
#include "graph-private.h"

#include <igraph.h>
#include <string.h>

static void igraph_error_quiet(const char *reason, const char *file, int line, igraph_error_t err)
{
    (void)reason;
    (void)file;
    (void)line;
    (void)err;
    IGRAPH_FINALLY_FREE();
}

static void igraph_warning_quiet(const char *reason, const char *file, int line)
{
    (void)reason;
    (void)file;
    (void)line;
}

/* igraph is built without thread safety (IGRAPH_THREAD_SAFE is 0: its error and cleanup
 * stacks are process-wide), so every use of it holds this lock. */
static GMutex igraph_lock;
void psim__igraph_lock(void) { g_mutex_lock(&igraph_lock); }
void psim__igraph_unlock(void) { g_mutex_unlock(&igraph_lock); }

void psim__igraph_init(void)
{
    static gsize once = 0;
    if (g_once_init_enter(&once)) {
        igraph_set_error_handler(igraph_error_quiet);
        igraph_set_warning_handler(igraph_warning_quiet);
        /* The C attribute handler, attached before any igraph graph exists so that every graph
         * has its attribute record (the DOT and GraphML exporters name vertices with it). */
        igraph_set_attribute_table(&igraph_cattribute_table);
        g_once_init_leave(&once, 1);
    }
}

/* Finds a node on a cycle among the nodes Kahn's algorithm could not order: follow
 * predecessors that are also unordered until one repeats. */
static int32_t node_on_cycle(const PsimGraph *g, const guint8 *ordered)
{
    const int32_t *po, *p;
    psim_graph_pred(g, &po, &p);
    int32_t n = psim_graph_n_nodes(g), v = -1;
    for (int32_t i = 0; i < n && v < 0; i++)
        if (!ordered[i])
            v = i;
    if (v < 0)
        return -1;
    g_autofree guint8 *seen = g_new0(guint8, n);
    while (!seen[v]) {
        seen[v] = 1;
        int32_t next = -1;
        for (int32_t i = po[v]; i < po[v + 1] && next < 0; i++)
            if (!ordered[p[i]])
                next = p[i];
        if (next < 0)
            return v;
        v = next;
    }
    return v;
}

int32_t *psim_kahn_order(int32_t n, const int32_t *pred_off, const int32_t *succ_off, const int32_t *succ,
                         int32_t *n_ordered)
{
    int32_t *queue = g_new(int32_t, n + 1);
    g_autofree int32_t *indeg = g_new(int32_t, n + 1);
    int32_t head = 0, tail = 0;
    for (int32_t v = 0; v < n; v++) {
        indeg[v] = pred_off[v + 1] - pred_off[v];
        if (!indeg[v])
            queue[tail++] = v;
    }
    while (head < tail) {
        int32_t v = queue[head++];
        for (int32_t i = succ_off[v]; i < succ_off[v + 1]; i++)
            if (--indeg[succ[i]] == 0)
                queue[tail++] = succ[i];
    }
    *n_ordered = tail;
    return queue;
}

int32_t *psim_graph_topo_order(const PsimGraph *g, GError **error)
{
    /* Kahn's algorithm with a FIFO queue over the CSR arrays: sources in id order, each node's
     * successors in id order (the order igraph_topological_sorting gives, which this replaced:
     * copying the edges into igraph cost more than the sort). A node that is its own input
     * never reaches in-degree 0, so self-loops are cycles too. */
    int32_t n = psim_graph_n_nodes(g), tail = 0;
    const int32_t *po, *p, *so, *s;
    psim_graph_pred(g, &po, &p);
    psim_graph_succ(g, &so, &s);
    int32_t *queue = psim_kahn_order(n, po, so, s, &tail);
    if (tail == n)
        return queue;

    /* Not a DAG: name a node on a cycle among those Kahn's algorithm could not order. */
    g_autofree guint8 *ordered = g_new0(guint8, n ? n : 1);
    for (int32_t i = 0; i < tail; i++)
        ordered[queue[i]] = 1;
    g_free(queue);
    int32_t c = node_on_cycle(g, ordered);
    psim__error_node(error, g, c >= 0 ? psim_graph_node(g, c) : NULL,
                     "the graph has a cycle through this node");
    return NULL;
}

double psim_graph_critical_path(const PsimGraph *g, const double *cost,
                                double (*edge_cost)(const PsimGraph *g, int32_t src, int32_t dst,
                                                    void *user),
                                void *user, int32_t **path, int32_t *n_path, GError **error)
{
    int32_t n = psim_graph_n_nodes(g);
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    if (!order)
        return -1;
    const int32_t *po, *p;
    psim_graph_pred(g, &po, &p);
    g_autofree double *finish = g_new0(double, n ? n : 1);
    g_autofree int32_t *from = g_new(int32_t, n ? n : 1);
    double best = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = order[i];
        double start = 0;
        from[v] = -1;
        for (int32_t j = po[v]; j < po[v + 1]; j++) {
            double t = finish[p[j]] + (edge_cost ? edge_cost(g, p[j], v, user) : 0);
            if (t > start || from[v] < 0) {
                if (t >= start) {
                    start = t;
                    from[v] = p[j];
                }
            }
        }
        finish[v] = start + cost[v];
        if (finish[v] > best || last < 0) {
            best = finish[v];
            last = v;
        }
    }
    if (path) {
        int32_t c = 0;
        for (int32_t v = last; v >= 0; v = from[v])
            c++;
        *path = g_new(int32_t, c ? c : 1);
        int32_t i = c;
        for (int32_t v = last; v >= 0; v = from[v])
            (*path)[--i] = v;
        if (n_path)
            *n_path = c;
    }
    return best;
}
