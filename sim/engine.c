/* The incremental engine: the simulator's model exposed one node at a time, for list-scheduling
 * placers (the whitepaper's greedy). Each device is one or more streams appended in commit
 * order; a cross-device input is sent once per (tensor, destination device) on the link, which
 * serializes transfers unless it is independent. */
#include <math.h>
#include <string.h>

#include "placesim/sim.h"

struct PsimSimEngine {
    const PsimGraph *g;
    PsimCostModel *m;
    const PsimCluster *c;
    const double *cost;
    int32_t n, nd;
    double *finish;
    int32_t *device;
    double *stream_free; /* nd x max_streams */
    int32_t max_streams;
    GHashTable *link_free; /* (src << 32 | dst) -> double*: when the link is next free; only
                            * the pairs used (nd x nd would not fit for thousands of devices) */
    GHashTable *arrival; /* (node, index, dst) -> double* arrival time */
    double makespan;
};

PsimSimEngine *psim_sim_engine_new(const PsimGraph *g, PsimCostModel *m, const double *cost)
{
    PsimSimEngine *e = g_new0(PsimSimEngine, 1);
    e->g = g;
    e->m = m;
    e->c = psim_cost_model_cluster(m);
    e->cost = cost;
    e->n = psim_graph_n_nodes(g);
    e->nd = psim_cluster_n_devices(e->c);
    e->finish = g_new(double, e->n + 1);
    e->device = g_new(int32_t, e->n + 1);
    for (int32_t i = 0; i < e->n; i++) {
        e->finish[i] = -1;
        e->device[i] = -1;
    }
    e->max_streams = 1;
    for (int32_t d = 0; d < e->nd; d++)
        e->max_streams = MAX(e->max_streams, psim_cluster_device(e->c, d)->n_streams);
    e->stream_free = g_new0(double, (size_t)e->nd * e->max_streams + 1);
    for (int32_t d = 0; d < e->nd; d++) {
        int32_t ns = MAX(1, psim_cluster_device(e->c, d)->n_streams);
        for (int32_t k = ns; k < e->max_streams; k++)
            e->stream_free[(size_t)d * e->max_streams + k] = INFINITY;
    }
    e->link_free = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, g_free);
    e->arrival = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, g_free);
    return e;
}

void psim_sim_engine_free(PsimSimEngine *e)
{
    if (!e)
        return;
    g_free(e->finish);
    g_free(e->device);
    g_free(e->stream_free);
    g_hash_table_destroy(e->link_free);
    g_hash_table_destroy(e->arrival);
    g_free(e);
}

static double node_cost(PsimSimEngine *e, int32_t v, int32_t d)
{
    if (e->cost) /* the caller's table: bounded as the model's answers are */
        return psim_cost_bound(e->cost[(size_t)v * e->nd + d]);
    return psim_cost_node(e->m, e->g, psim_graph_node(e->g, v), d, NULL);
}

static gint64 arrival_key(int32_t node, int32_t index, int32_t dst)
{
    /* Shifted as unsigned (index is -1 for a control edge): the same bits, no undefined shift. */
    return (gint64)(((guint64)(gint64)node << 28) ^ ((guint64)(gint64)index << 16) ^ (guint64)(gint64)dst);
}

typedef struct {
    int32_t node, index; /* producer; index -1 for a control edge */
    uint64_t bytes;
} In;

/* Computes v's start on d. When commit is TRUE, records transfers and link use. */
static double place(PsimSimEngine *e, int32_t v, int32_t d, gboolean commit, double *start_out)
{
    double c = node_cost(e, v, d);
    if (!isfinite(c))
        return INFINITY;
    const PsimNode *nv = psim_graph_node(e->g, v);
    double ready = 0;
    /* Cross-device inputs, in order of their producers' finish, use their links in turn. */
    int32_t n_in = nv->n_inputs + nv->n_controls;
    In stack_in[16];
    In *ins = n_in <= 16 ? stack_in : g_new(In, n_in);
    int32_t k = 0;
    for (int32_t i = 0; i < nv->n_inputs; i++) {
        PsimPort p = nv->inputs[i];
        if (p.node < 0)
            continue;
        g_return_val_if_fail(e->device[p.node] >= 0, INFINITY);
        if (e->device[p.node] == d) {
            ready = MAX(ready, e->finish[p.node]);
            continue;
        }
        if (psim_plan_node_replicated(psim_graph_node(e->g, p.node)))
            continue; /* a constant generator: its copy on d is resident from the start */
        ins[k++] = (In){p.node, p.index, psim_graph_node(e->g, p.node)->outputs[p.index].bytes};
    }
    for (int32_t i = 0; i < nv->n_controls; i++) {
        int32_t u = nv->controls[i];
        g_return_val_if_fail(e->device[u] >= 0, INFINITY);
        if (e->device[u] == d)
            ready = MAX(ready, e->finish[u]);
        else
            ins[k++] = (In){u, -1, 0};
    }
    /* Insertion sort by producer finish (few inputs). */
    for (int32_t i = 1; i < k; i++) {
        In x = ins[i];
        int32_t j = i - 1;
        while (j >= 0 && e->finish[ins[j].node] > e->finish[x.node]) {
            ins[j + 1] = ins[j];
            j--;
        }
        ins[j + 1] = x;
    }
    double local_link[16];
    int32_t local_src[16], n_local = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t src = e->device[ins[i].node];
        gint64 key = arrival_key(ins[i].node, ins[i].index, d);
        double *known = g_hash_table_lookup(e->arrival, &key);
        if (known) {
            ready = MAX(ready, *known);
            continue;
        }
        PsimLink l = psim_cost_link(e->m, src, d, NULL);
        double occ = psim_link_occupancy(&l, ins[i].bytes);
        double t0 = e->finish[ins[i].node];
        if (!l.independent) {
            gint64 lk = (gint64)(((guint64)(guint32)src << 32) | (guint32)d);
            double *lf = g_hash_table_lookup(e->link_free, &lk);
            if (!lf && commit) {
                lf = g_new0(double, 1);
                g_hash_table_insert(e->link_free, g_memdup2(&lk, sizeof lk), lf);
            }
            /* Probes must not change link state: a probe tracks its own use of links locally. */
            int32_t slot = -1;
            for (int32_t q = 0; q < n_local; q++)
                if (local_src[q] == src)
                    slot = q;
            t0 = MAX(t0, slot >= 0 ? local_link[slot] : lf ? *lf : 0);
            if (commit)
                *lf = t0 + occ;
            if (slot < 0 && n_local < 16)
                slot = n_local++;
            if (slot >= 0) {
                local_src[slot] = src;
                local_link[slot] = t0 + occ;
            }
        }
        double arrive = t0 + occ + psim_link_latency(&l);
        if (commit) {
            gint64 *kp = g_new(gint64, 1);
            *kp = key;
            double *ap = g_new(double, 1);
            *ap = arrive;
            g_hash_table_insert(e->arrival, kp, ap);
        }
        ready = MAX(ready, arrive);
    }
    if (ins != stack_in)
        g_free(ins);
    /* The stream that frees first. */
    double *sf = &e->stream_free[(size_t)d * e->max_streams];
    int32_t best = 0;
    for (int32_t s = 1; s < e->max_streams; s++)
        if (sf[s] < sf[best])
            best = s;
    double start = MAX(ready, sf[best]);
    if (start_out)
        *start_out = start;
    if (commit) {
        sf[best] = start + c;
        e->finish[v] = start + c;
        e->device[v] = d;
        e->makespan = MAX(e->makespan, start + c);
    }
    return start + c;
}

double psim_sim_engine_probe(PsimSimEngine *e, int32_t node, int32_t device, double *start)
{
    return place(e, node, device, FALSE, start);
}

double psim_sim_engine_commit(PsimSimEngine *e, int32_t node, int32_t device)
{
    return place(e, node, device, TRUE, NULL);
}

double psim_sim_engine_finish(const PsimSimEngine *e, int32_t node)
{
    return e->finish[node];
}

double psim_sim_engine_makespan(const PsimSimEngine *e)
{
    return e->makespan;
}
