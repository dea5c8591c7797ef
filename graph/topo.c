/* Graph structure through igraph: DAG check, topological order, and the critical path. The IR's
 * own arrays stay the source of truth; igraph gets a copy of the edges. */
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

int32_t *psim_graph_topo_order(const PsimGraph *g, GError **error)
{
    psim__igraph_init();
    int32_t n = psim_graph_n_nodes(g);
    const int32_t *po, *p;
    psim_graph_pred(g, &po, &p);
    int64_t m = po[n];

    igraph_vector_int_t edges, order;
    igraph_t ig;
    psim__igraph_lock();
    if (igraph_vector_int_init(&edges, 2 * m) != IGRAPH_SUCCESS) {
        psim__igraph_unlock();
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "out of memory for %" G_GINT64_FORMAT " edges", m);
        return NULL;
    }
    int64_t e = 0;
    gboolean self_loop = FALSE;
    for (int32_t v = 0; v < n; v++)
        for (int32_t i = po[v]; i < po[v + 1]; i++) {
            VECTOR(edges)[e++] = p[i];
            VECTOR(edges)[e++] = v;
            self_loop |= p[i] == v;
        }
    int32_t *out = NULL;
    gboolean ok = igraph_create(&ig, &edges, n, IGRAPH_DIRECTED) == IGRAPH_SUCCESS;
    igraph_vector_int_destroy(&edges);
    if (!ok) {
        psim__igraph_unlock();
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "igraph could not build the graph");
        return NULL;
    }
    /* igraph_topological_sorting fails (or orders fewer than n vertices) on a cycle, so a
     * separate igraph_is_dag pass, which costs as much again, is not needed. */
    igraph_vector_int_init(&order, 0);
    if (igraph_topological_sorting(&ig, &order, IGRAPH_OUT) == IGRAPH_SUCCESS &&
        igraph_vector_int_size(&order) == n) {
        out = g_new(int32_t, n ? n : 1);
        for (int32_t i = 0; i < n; i++)
            out[i] = (int32_t)VECTOR(order)[i];
    }
    igraph_vector_int_destroy(&order);
    igraph_destroy(&ig);
    psim__igraph_unlock();
    /* igraph's sort passes over self-loops; a node that is its own input is a cycle too. */
    if (out && self_loop) {
        g_free(out);
        out = NULL;
    }
    if (out)
        return out;

    /* Not a DAG: find what Kahn's algorithm can order, and name a node on a cycle. */
    const int32_t *so, *s;
    psim_graph_succ(g, &so, &s);
    g_autofree int32_t *indeg = g_new(int32_t, n ? n : 1);
    g_autofree int32_t *queue = g_new(int32_t, n ? n : 1);
    g_autofree guint8 *ordered = g_new0(guint8, n ? n : 1);
    int32_t head = 0, tail = 0;
    for (int32_t v = 0; v < n; v++) {
        indeg[v] = po[v + 1] - po[v];
        if (!indeg[v])
            queue[tail++] = v;
    }
    while (head < tail) {
        int32_t v = queue[head++];
        ordered[v] = 1;
        for (int32_t i = so[v]; i < so[v + 1]; i++)
            if (--indeg[s[i]] == 0)
                queue[tail++] = s[i];
    }
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
