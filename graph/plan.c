/* The Plan container (made by placer/, run by sim/ and exec/). */
#include <stdarg.h>
#include <string.h>

#include "placesim/plan.h"

PsimPlan *psim_plan_new(PsimGraph *graph, int32_t n_devices, const char *const *devices)
{
    PsimPlan *p = g_new0(PsimPlan, 1);
    int32_t n = psim_graph_n_nodes(graph);
    p->graph = graph;
    p->n_devices = n_devices;
    p->devices = g_new0(char *, (gsize)n_devices + 1);
    for (int32_t i = 0; i < n_devices; i++)
        p->devices[i] = g_strdup(devices[i]);
    p->device_of = g_new(int32_t, n ? n : 1);
    for (int32_t i = 0; i < n; i++)
        p->device_of[i] = -1;
    p->n_order = g_new0(int32_t, n_devices ? n_devices : 1);
    p->order = g_new0(int32_t *, n_devices ? n_devices : 1);
    p->planned_start = g_new0(double, n ? n : 1);
    p->priority = g_new0(double, n ? n : 1);
    p->transfer_of_recv = g_new(int32_t, n ? n : 1);
    p->copy_of = g_new(int32_t, n ? n : 1);
    for (int32_t i = 0; i < n; i++)
        p->transfer_of_recv[i] = p->copy_of[i] = -1;
    return p;
}

void psim_plan_free(PsimPlan *p)
{
    if (!p)
        return;
    psim_graph_free(p->graph);
    g_free(p->algo);
    g_strfreev(p->devices);
    g_free(p->device_of);
    for (int32_t i = 0; i < p->n_devices; i++)
        g_free(p->order[i]);
    g_free(p->order);
    g_free(p->n_order);
    g_free(p->planned_start);
    g_free(p->priority);
    g_free(p->transfers);
    g_free(p->transfer_of_recv);
    g_free(p->copy_of);
    g_free(p->cluster_json);
    g_free(p->graph_source);
    g_free(p->seq);
    g_free(p);
}

const char *psim_rounding_name(PsimRounding r)
{
    return r == PSIM_ROUNDING_RNE ? "rne" : "truncate";
}

gboolean psim_rounding_from_name(const char *name, PsimRounding *out)
{
    if (!g_strcmp0(name, "truncate"))
        *out = PSIM_ROUNDING_TRUNCATE;
    else if (!g_strcmp0(name, "rne"))
        *out = PSIM_ROUNDING_RNE;
    else
        return FALSE;
    return TRUE;
}

gboolean psim_plan_output_compressed(const PsimNode *u, int32_t k, gboolean compress_all)
{
    if (u->outputs[k].dtype != PSIM_DTYPE_FLOAT32)
        return FALSE;
    const PsimAttr *a = psim_node_attr(u, "_compress");
    return compress_all || (a && a->type == PSIM_ATTR_BOOL && a->v.b);
}

uint32_t psim_rounding_apply(uint32_t bits, PsimRounding r)
{
    if (r == PSIM_ROUNDING_TRUNCATE)
        return bits & 0xFFFF0000u;
    if ((bits & 0x7F800000u) == 0x7F800000u) {
        /* Inf as it is; a NaN quiet, so that no payload bit is needed to keep it a NaN. */
        return (bits & 0x007FFFFFu) ? (bits & 0xFFFF0000u) | 0x00400000u : bits;
    }
    /* Adding half an ulp less one, plus the kept lsb, carries into the kept bits exactly when
     * the dropped half is above half an ulp, or at half with an odd kept lsb. */
    uint32_t lsb = (bits >> 16) & 1u;
    uint32_t y = (bits + 0x7FFFu + lsb) & 0xFFFF0000u;
    /* Past the largest finite bfloat16 the carry reaches the exponent's all-ones: stay finite. */
    if ((y & 0x7F800000u) == 0x7F800000u)
        y = (bits & 0x80000000u) | 0x7F7F0000u;
    return y;
}

/* ---- validation: the one check of a plan, made by everything that accepts one ---- */

static gboolean is_op(const PsimNode *n, const char *op) { return !strcmp(n->op, op); }

enum { K_COMPUTE = 0, K_SEND = 1, K_RECV = 2 };

/* Per node of the plan's graph: Send, Recv or compute, read once (ops are compared by name). */
static guint8 *node_kinds(const PsimGraph *g)
{
    int32_t n = psim_graph_n_nodes(g);
    guint8 *k = g_new0(guint8, n + 1);
    for (int32_t v = 0; v < n; v++) {
        const char *op = psim_graph_node(g, v)->op;
        if (op[0] == 'S' && !strcmp(op, "Send"))
            k[v] = K_SEND;
        else if (op[0] == 'R' && !strcmp(op, "Recv"))
            k[v] = K_RECV;
    }
    return k;
}

static gboolean check_transfers(const PsimPlan *p, const guint8 *kind, GError **error)
{
    int32_t n = psim_graph_n_nodes(p->graph), nd = p->n_devices;
    g_autofree int32_t *send_of = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        send_of[v] = -1;
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *t = &p->transfers[x];
        if (t->send < 0 || t->send >= n || t->recv < 0 || t->recv >= n || t->src < 0 ||
            t->src >= nd || t->dst < 0 || t->dst >= nd || t->port.node < 0 || t->port.node >= n) {
            psim_graph_node_error(error, p->graph, -1, "transfer %d: a node or device out of range", x);
            return FALSE;
        }
        if (kind[t->send] != K_SEND || kind[t->recv] != K_RECV || send_of[t->send] >= 0 ||
            p->transfer_of_recv[t->recv] != x) {
            psim_graph_node_error(error, p->graph, t->recv, "transfer %d must join one Send to one Recv", x);
            return FALSE;
        }
        if (t->after >= n || (t->after >= 0 && (p->device_of[t->after] != t->dst || kind[t->after] != K_COMPUTE))) {
            psim_graph_node_error(error, p->graph, t->recv,
                                  "transfer %d must wait for a compute node of its Recv's device", x);
            return FALSE;
        }
        send_of[t->send] = x;
        if (p->device_of[t->send] != t->src || p->device_of[t->recv] != t->dst || t->src == t->dst) {
            psim_graph_node_error(error, p->graph, t->recv, "transfer %d must go from its Send's device to its Recv's, another one", x);
            return FALSE;
        }
        if (p->device_of[t->port.node] != t->src ||
            (!t->control && (t->port.index < 0 || t->port.index >= psim_graph_node(p->graph, t->port.node)->n_outputs))) {
            psim_graph_node_error(error, p->graph, t->send, "transfer %d sends no tensor of its device", x);
            return FALSE;
        }
    }
    for (int32_t v = 0; v < n; v++)
        if ((kind[v] == K_SEND && send_of[v] < 0) || (kind[v] == K_RECV && p->transfer_of_recv[v] < 0)) {
            psim_graph_node_error(error, p->graph, v, "a %s that belongs to no transfer",
                                  kind[v] == K_SEND ? "Send" : "Recv");
            return FALSE;
        }
    return TRUE;
}

/* Data and control edges stay on one device, except a Recv's control edge from its Send. */
static gboolean check_edges(const PsimPlan *p, GError **error)
{
    int32_t n = psim_graph_n_nodes(p->graph);
    const int32_t *po, *pr; /* every node's sources, data and control (psim_graph_pred) */
    psim_graph_pred(p->graph, &po, &pr);
    for (int32_t v = 0; v < n; v++) {
        int32_t x = p->transfer_of_recv[v];
        for (int32_t i = po[v]; i < po[v + 1]; i++) {
            int32_t u = pr[i];
            if (p->device_of[u] == p->device_of[v] || (x >= 0 && p->transfers[x].send == u))
                continue;
            psim_graph_node_error(error, p->graph, v, "its input '%s' is on another device and comes through no Send/Recv",
                       psim_graph_node(p->graph, u)->name);
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean check_orders(const PsimPlan *p, GError **error)
{
    int32_t n = psim_graph_n_nodes(p->graph);
    g_autofree uint8_t *seen = g_new0(uint8_t, n + 1);
    for (int32_t d = 0; d < p->n_devices; d++) {
        if (p->n_order[d] < 0 || (p->n_order[d] > 0 && !p->order[d])) {
            psim_graph_node_error(error, p->graph, -1, "the order of device '%s' is malformed", p->devices[d]);
            return FALSE;
        }
        for (int32_t i = 0; i < p->n_order[d]; i++) {
            int32_t v = p->order[d][i];
            if (v < 0 || v >= n) {
                psim_graph_node_error(error, p->graph, -1, "the order of device '%s' names no node at position %d",
                           p->devices[d], i);
                return FALSE;
            }
            if (p->device_of[v] != d || seen[v]) {
                psim_graph_node_error(error, p->graph, v, "in the order of device '%s' but placed on another or listed twice",
                           p->devices[d]);
                return FALSE;
            }
            seen[v] = 1;
        }
    }
    for (int32_t v = 0; v < n; v++)
        if (!seen[v]) {
            psim_graph_node_error(error, p->graph, v, "missing from the order of device '%s'", p->devices[p->device_of[v]]);
            return FALSE;
        }
    return TRUE;
}

/* The waits of a step in static order, as the executor runs it: a node waits for its inputs
 * (a Recv for its Send, by its control edge); a device runs its compute nodes in their order,
 * a Send as soon as its input is done and a Recv when its transfer arrives, wherever they stand
 * in the order, but it gets past a Send only once the Send has run. So a compute node also waits
 * for the compute node before it in the order and for the Sends between them. A cycle of waits
 * is a deadlock. */
static gboolean check_deadlock(const PsimPlan *p, const guint8 *kind, GError **error)
{
    const PsimGraph *g = p->graph;
    int32_t n = psim_graph_n_nodes(g);
    const int32_t *so, *su;
    psim_graph_succ(g, &so, &su);
    g_autofree int32_t *deg = g_new0(int32_t, n + 1), *next = g_new(int32_t, n + 1),
                       *queue = g_new(int32_t, n + 1), *chain_from = g_new(int32_t, n + 1),
                       *recv_of = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++) {
        next[v] = recv_of[v] = -1;
        for (int32_t i = so[v]; i < so[v + 1]; i++)
            deg[su[i]]++;
    }
    /* A Recv waits for its Send whether or not the graph has the control edge between them, and
     * for the node it is held after (gated[]: per node, a list of the transfers it releases). */
    g_autofree int32_t *gated = g_new(int32_t, n + 1), *gated_next = g_new(int32_t, p->n_transfers + 1);
    for (int32_t v = 0; v < n; v++)
        gated[v] = -1;
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *t = &p->transfers[x];
        recv_of[t->send] = t->recv;
        deg[t->recv]++;
        if (t->after >= 0) {
            gated_next[x] = gated[t->after];
            gated[t->after] = x;
            deg[t->recv]++;
        }
    }
    /* next[u]: the compute node that waits for u by the order (one per u, so the waits by order
     * are a forest of chains: linear). */
    for (int32_t d = 0; d < p->n_devices; d++) {
        int32_t n_from = 0;
        for (int32_t i = 0; i < p->n_order[d]; i++) {
            int32_t v = p->order[d][i];
            if (kind[v] == K_RECV)
                continue;
            if (kind[v] == K_SEND) {
                chain_from[n_from++] = v;
                continue;
            }
            for (int32_t k = 0; k < n_from; k++) {
                next[chain_from[k]] = v;
                deg[v]++;
            }
            chain_from[0] = v;
            n_from = 1;
        }
    }
    int32_t head = 0, tail = 0;
    for (int32_t v = 0; v < n; v++)
        if (!deg[v])
            queue[tail++] = v;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t i = so[u]; i < so[u + 1]; i++)
            if (--deg[su[i]] == 0)
                queue[tail++] = su[i];
        if (next[u] >= 0 && --deg[next[u]] == 0)
            queue[tail++] = next[u];
        if (recv_of[u] >= 0 && --deg[recv_of[u]] == 0)
            queue[tail++] = recv_of[u];
        for (int32_t x = gated[u]; x >= 0; x = gated_next[x])
            if (--deg[p->transfers[x].recv] == 0)
                queue[tail++] = p->transfers[x].recv;
    }
    if (tail == n)
        return TRUE;
    /* Name a node that waits on the cycle: the first left in an order. */
    for (int32_t d = 0; d < p->n_devices; d++)
        for (int32_t i = 0; i < p->n_order[d]; i++) {
            int32_t v = p->order[d][i];
            if (deg[v] > 0) {
                psim_graph_node_error(error, p->graph, v,
                           "the plan deadlocks: its place in the order of device '%s' waits, through "
                           "Send/Recv, for a node that comes after it",
                           p->devices[d]);
                return FALSE;
            }
        }
    psim_graph_node_error(error, p->graph, -1, "the plan deadlocks (a cycle of edges)");
    return FALSE;
}

gboolean psim_plan_check(const PsimPlan *p, GError **error)
{
    g_return_val_if_fail(p && p->graph, FALSE);
    int32_t n = psim_graph_n_nodes(p->graph);
    if (p->n_devices < 1) {
        psim_graph_node_error(error, p->graph, -1, "the plan has no devices");
        return FALSE;
    }
    for (int32_t d = 0; d < p->n_devices; d++)
        if (!p->devices[d] || !*p->devices[d]) {
            psim_graph_node_error(error, p->graph, -1, "device %d has no name", d);
            return FALSE;
        }
    for (int32_t v = 0; v < n; v++)
        if (p->device_of[v] < 0 || p->device_of[v] >= p->n_devices) {
            psim_graph_node_error(error, p->graph, v, "not placed on a device of the plan");
            return FALSE;
        }
    for (int32_t v = 0; v < n; v++)
        if (p->transfer_of_recv[v] < -1 || p->transfer_of_recv[v] >= p->n_transfers) {
            psim_graph_node_error(error, p->graph, v, "its transfer is out of range");
            return FALSE;
        }
    g_autofree guint8 *kind = node_kinds(p->graph);
    return check_transfers(p, kind, error) && check_edges(p, error) && check_orders(p, error) &&
           check_deadlock(p, kind, error);
}

gboolean psim_plan_check_graph(const PsimPlan *p, const char *plan_path, const PsimGraph *g,
                               const char *graph_path, GError **error)
{
    const PsimGraph *pg = p->graph;
    const char *gsrc = graph_path            ? graph_path
                       : psim_graph_source(g) ? psim_graph_source(g)
                                              : psim_graph_name(g);
    g_autofree char *why = NULL;
    int32_t n = psim_graph_n_nodes(g), n_plan = 0;
    if (strcmp(psim_graph_name(g), psim_graph_name(pg)))
        why = g_strdup_printf("the plan's graph is '%s', not '%s'", psim_graph_name(pg), psim_graph_name(g));
    for (int32_t v = 0; v < n && !why; v++) {
        const PsimNode *a = psim_graph_node(g, v), *b = psim_graph_node_find(pg, a->name);
        if (!b || strcmp(a->op, b->op))
            why = g_strdup_printf("node '%s' (%s) is not in the plan", a->name, a->op);
    }
    /* The placed nodes: those before the Send/Recv nodes and constant copies a partition adds
     * (n_placed), else all but Send/Recv. */
    for (int32_t v = 0; v < psim_graph_n_nodes(pg) && !why; v++) {
        const PsimNode *b = psim_graph_node(pg, v);
        if (p->n_placed > 0 ? v < p->n_placed : !is_op(b, "Send") && !is_op(b, "Recv"))
            n_plan++;
    }
    if (!why && n_plan != n)
        why = g_strdup_printf("the plan has %d nodes besides Send/Recv and constant copies, the graph %d", n_plan, n);
    if (!why)
        return TRUE;
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: graph: not a plan of %s (%s)",
                plan_path ? plan_path : "plan", gsrc, why);
    return FALSE;
}
