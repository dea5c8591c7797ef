/* Partitioning a placed graph into a Plan (TF's graph_partition.cc): Send/Recv pairs where
 * edges cross devices, one Recv per (tensor, destination device); then the recv schedule
 * (TF's scheduler.cc: ASAP, ALAP, slack) and the plan's order, starts and priorities. */
#define _GNU_SOURCE
#include <string.h>

#include "placer/placer-private.h"
#include "placesim/sim.h"

int32_t psim_plan_n_sends(const PsimPlan *p)
{
    int32_t k = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(p->graph); v++)
        k += !strcmp(psim_graph_node(p->graph, v)->op, "Send");
    return k;
}

/* Copies node v of g into pg without its inputs. */
static PsimNode *copy_node(PsimGraph *pg, const PsimGraph *g, int32_t v, const char *assigned,
                           GError **error)
{
    const PsimNode *s = psim_graph_node(g, v);
    PsimNode *n = psim_graph_node_add(pg, s->name, s->op, error);
    if (!n)
        return NULL;
    n->flags = s->flags;
    if (s->domain)
        n->domain = psim_graph_intern(pg, s->domain);
    if (s->n_outputs) {
        psim_graph_node_outputs_set(pg, n, s->n_outputs);
        for (int32_t k = 0; k < s->n_outputs; k++) {
            const PsimOutput *o = &s->outputs[k];
            psim_graph_output_set(pg, n, k, o->dtype, o->rank, o->dims);
            if (o->value)
                psim_graph_output_value_set(pg, n, k, o->value);
            n->outputs[k].bytes = o->bytes;
            if (o->name)
                n->outputs[k].name = psim_graph_intern(pg, o->name);
        }
    }
    for (int32_t k = 0; k < s->n_attrs; k++)
        psim_graph_node_attr_set(pg, n, &s->attrs[k]);
    for (int32_t k = 0; k < s->n_costs; k++)
        psim_graph_node_cost_set(pg, n, s->costs[k].device, s->costs[k].us);
    if (s->device)
        psim_graph_node_device_set(pg, n, s->device);
    psim_graph_node_assigned_set(pg, n, assigned);
    return n;
}

/* A transfer's identity: producer, output (-1: control) and destination device. */
typedef struct {
    int32_t u, k, d;
} XferKey;

static guint xfer_key_hash(gconstpointer p)
{
    const XferKey *x = p;
    guint64 h = (guint64)(guint32)x->u * 0x9E3779B97F4A7C15ull;
    h ^= ((guint64)(guint32)x->k << 32 | (guint32)x->d) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (guint)h;
}

static gboolean xfer_key_equal(gconstpointer a, gconstpointer b)
{
    const XferKey *x = a, *y = b;
    return x->u == y->u && x->k == y->k && x->d == y->d;
}

typedef struct {
    PsimPlaceCtx *c;
    const PsimPlacement *p;
    PsimGraph *pg;
    GHashTable *index; /* XferKey -> transfer index + 1 */
    GArray *xfers;     /* PsimTransfer */
    GArray *src_dev;   /* device of every plan node, grown as nodes are added */
} Part;

/* The transfer of output k of u (k < 0: a control edge) to device d, made on first use. */
static int32_t transfer_get(Part *pt, int32_t u, int32_t k, int32_t d, GError **error)
{
    XferKey hk = {u, k, d};
    gpointer found = g_hash_table_lookup(pt->index, &hk);
    if (found)
        return GPOINTER_TO_INT(found) - 1;
    const PsimGraph *g = pt->c->g;
    const PsimCluster *cl = pt->c->cluster;
    PsimGraph *pg = pt->pg;
    const PsimNode *un = psim_graph_node(g, u);
    int32_t s = pt->p->device_of[u];
    const char *sname = psim_cluster_device(cl, s)->name, *dname = psim_cluster_device(cl, d)->name;
    PsimTransfer t = {0};
    t.after = -1;
    t.src = s;
    t.dst = d;
    t.control = k < 0;
    t.port = (PsimPort){u, k < 0 ? 0 : k};
    if (k >= 0) {
        t.raw_bytes = un->outputs[k].bytes;
        t.compressed = psim_plan_output_compressed(un, k, pt->c->opt.compress);
        t.rounding = t.compressed ? pt->c->opt.compress_rounding : PSIM_ROUNDING_TRUNCATE;
        t.bytes = t.compressed ? t.raw_bytes / 2 : t.raw_bytes;
    }
    g_autofree char *tensor = k < 0 ? g_strdup_printf("^%s", un->name) : g_strdup_printf("%s:%d", un->name, k);
    g_autofree char *key = g_strdup_printf("%s;%s;%s", sname, dname, tensor);
    t.key = psim_graph_intern(pg, key);
    const char *dshort = psim_cluster_device(cl, d)->short_name;
    g_autofree char *sbase = k < 0 ? g_strdup_printf("%s/_send_ctl_to_%s", un->name, dshort)
                                   : g_strdup_printf("%s/_send_%d_to_%s", un->name, k, dshort);
    g_autofree char *rbase = k < 0 ? g_strdup_printf("%s/_recv_ctl_on_%s", un->name, dshort)
                                   : g_strdup_printf("%s/_recv_%d_on_%s", un->name, k, dshort);
    for (char *q = sbase; *q; q++)
        if (*q == ':')
            *q = '_';
    for (char *q = rbase; *q; q++)
        if (*q == ':')
            *q = '_';
    PsimNode *sn = psim_graph_node_add(pg, psim_graph_unique_name(pg, sbase), "Send", error);
    if (!sn)
        return -1;
    PsimNode *rn = psim_graph_node_add(pg, psim_graph_unique_name(pg, rbase), "Recv", error);
    if (!rn)
        return -1;
    for (int i = 0; i < 2; i++) {
        PsimNode *x = i ? rn : sn;
        /* The key names both devices and the tensor (the executor's rendezvous reads it). */
        psim_graph_node_attr_set_string(pg, x, "key", key);
        psim_graph_node_attr_set_int(pg, x, "bytes", (int64_t)t.bytes);
        if (t.compressed)
            psim_graph_node_attr_set_bool(pg, x, "compressed", TRUE);
        if (t.control)
            psim_graph_node_attr_set_bool(pg, x, "control", TRUE);
        psim_graph_node_assigned_set(pg, x, i ? dname : sname);
    }
    if (k < 0)
        psim_graph_node_control_add(pg, sn, u);
    else
        psim_graph_node_input_add(pg, sn, t.port);
    psim_graph_node_control_add(pg, rn, sn->id);
    if (k >= 0) {
        const PsimOutput *o = &un->outputs[k];
        psim_graph_node_outputs_set(pg, rn, 1);
        psim_graph_output_set(pg, rn, 0, o->dtype, o->rank, o->dims);
        rn->outputs[0].bytes = o->bytes;
    }
    t.send = sn->id;
    t.recv = rn->id;
    g_array_append_val(pt->src_dev, s);
    g_array_append_val(pt->src_dev, d);
    g_array_append_val(pt->xfers, t);
    g_hash_table_insert(pt->index, g_memdup2(&hk, sizeof hk), GINT_TO_POINTER((gint)pt->xfers->len));
    return (int32_t)pt->xfers->len - 1;
}

/* ---- Recv scheduling around the simulated step ----
 * The plan's times come from the simulator (one model of a step: sim/); what is computed here
 * is only TF's recv scheduling over those times: an ALAP pass over the simulated durations, the
 * slack of each Recv, and the node each held Recv waits for. */

/* A topological order of the plan graph with each device's compute chain (chain_next: the next
 * compute node on the same device, -1 at its end) as extra edges. FALSE when the chains
 * contradict the graph. */
static gboolean chain_topo(const PsimGraph *pg, const int32_t *chain_next, int32_t *order)
{
    int32_t n = psim_graph_n_nodes(pg);
    const int32_t *po, *pr, *so, *su;
    psim_graph_pred(pg, &po, &pr);
    psim_graph_succ(pg, &so, &su);
    g_autofree int32_t *deg = g_new0(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        deg[v] += po[v + 1] - po[v];
    for (int32_t v = 0; v < n; v++)
        if (chain_next[v] >= 0)
            deg[chain_next[v]]++;
    int32_t head = 0, tail = 0;
    for (int32_t v = 0; v < n; v++)
        if (!deg[v])
            order[tail++] = v;
    while (head < tail) {
        int32_t v = order[head++], w = chain_next[v];
        if (w >= 0 && --deg[w] == 0)
            order[tail++] = w;
        for (int32_t i = so[v]; i < so[v + 1]; i++)
            if (--deg[su[i]] == 0)
                order[tail++] = su[i];
    }
    return tail == n;
}

/* Latest starts that keep the step m, each node taking its simulated duration dur. */
static void alap(const PsimGraph *pg, const int32_t *order, const int32_t *chain_next,
                 const double *dur, double m, double *late_start)
{
    const int32_t *so, *su;
    psim_graph_succ(pg, &so, &su);
    for (int32_t i = psim_graph_n_nodes(pg) - 1; i >= 0; i--) {
        int32_t v = order[i];
        double lf = m;
        for (int32_t j = so[v]; j < so[v + 1]; j++)
            lf = MIN(lf, late_start[su[j]]);
        if (chain_next[v] >= 0)
            lf = MIN(lf, late_start[chain_next[v]]);
        late_start[v] = lf - dur[v];
    }
}

/* Turns each held Recv's planned release time into a dependency, as TF's partitioner does:
 * the Recv may start once the compute node of its device that finishes last by that time in the
 * ALAP schedule has finished (t->after). The ALAP schedule keeps every edge and every device's
 * order, so such a node never depends on the Recv (it finishes before the Recv's latest start
 * and takes time: nodes of no duration are passed over, so that a descendant cannot tie), gates
 * never wait on each other in a cycle, and it comes before the Recv's consumers in the device's
 * order. A run ahead of the plan stays ahead: no Recv waits for a clock. */
static void choose_gates(PsimPlan *plan, const PsimPlacement *p, int32_t nd, const double *late,
                         const double *dur)
{
    int32_t n = p->n_nodes; /* the placed graph's nodes come first in plan->graph */
    /* Each device's compute nodes in placement order: one chain, late finishes non-decreasing. */
    g_autofree int32_t *count = g_new0(int32_t, nd + 1), *off = g_new0(int32_t, nd + 1);
    g_autofree int32_t *chain = g_new(int32_t, (size_t)n + 1);
    for (int32_t i = 0; i < n; i++)
        count[p->device_of[p->seq[i]]]++;
    for (int32_t d = 0; d < nd; d++)
        off[d + 1] = off[d] + count[d];
    memset(count, 0, sizeof(int32_t) * (size_t)nd);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = p->device_of[v];
        chain[off[d] + count[d]++] = v;
    }
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        PsimTransfer *t = &plan->transfers[i];
        t->after = -1;
        if (t->earliest_start <= 0)
            continue;
        const int32_t *c = chain + off[t->dst];
        int32_t lo = 0, hi = count[t->dst]; /* first index whose late finish is past the release */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (late[c[mid]] + dur[c[mid]] <= t->earliest_start)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int32_t k = lo - 1; k >= 0; k--)
            if (dur[c[k]] > 0) {
                t->after = c[k];
                break;
            }
    }
}

/* One simulated step of plan (static order, the default of `placesim sim`): its step time, or
 * -1 with error set; start and end (optional) get every node's times. */
static double plan_simulate(const PsimPlan *plan, PsimCostModel *m, double *start, double *end,
                            GError **error)
{
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE,
                         .node_start = start, .node_end = end};
    PsimSimResult r = {0};
    gboolean ok = psim_sim_run(plan, m, &so, &r, NULL, error);
    double t = ok ? r.step_time_us : -1;
    psim_sim_result_clear(&r);
    return t;
}

typedef struct {
    const double *key;
    const int32_t *rank;
} OrderCmp;

static int cmp_order(const void *a, const void *b, void *user)
{
    const OrderCmp *o = user;
    int32_t u = *(const int32_t *)a, v = *(const int32_t *)b;
    if (o->key && o->key[u] != o->key[v])
        return o->key[u] < o->key[v] ? -1 : 1;
    return o->rank[u] - o->rank[v];
}

/* Each device's order: its nodes by key (NULL: by rank alone), then rank. Compute nodes keep
 * the placement's order whatever the key: their simulated starts never decrease along it and
 * ties go by rank, their position in it. */
static void order_set(PsimPlan *plan, const double *key, const int32_t *rank)
{
    int32_t N = psim_graph_n_nodes(plan->graph), nd = plan->n_devices;
    OrderCmp oc = {key, rank};
    g_autofree int32_t *all = g_new(int32_t, N + 1);
    for (int32_t v = 0; v < N; v++)
        all[v] = v;
    qsort_r(all, (size_t)N, sizeof(int32_t), cmp_order, &oc);
    for (int32_t d = 0; d < nd; d++) {
        g_free(plan->order[d]);
        plan->n_order[d] = 0;
    }
    for (int32_t i = 0; i < N; i++)
        plan->n_order[plan->device_of[all[i]]]++;
    for (int32_t d = 0; d < nd; d++) {
        plan->order[d] = g_new(int32_t, plan->n_order[d] + 1);
        plan->n_order[d] = 0;
    }
    for (int32_t i = 0; i < N; i++) {
        int32_t d = plan->device_of[all[i]];
        plan->order[d][plan->n_order[d]++] = all[i];
    }
}

PsimPlan *psim_plan_build(PsimPlaceCtx *c, const PsimPlacement *p, GError **error)
{
    g_return_val_if_fail(c->g, NULL);
    const PsimGraph *g = c->g;
    int32_t n = c->n, nd = c->nd;
    PsimGraph *pg = psim_graph_new(psim_graph_name(g));
    if (psim_graph_source(g))
        psim_graph_set_source(pg, psim_graph_source(g));
    /* Kernels read the opset where ops changed meaning (Softmax before 13). */
    psim_graph_set_opset(pg, psim_graph_opset(g));
    for (int32_t v = 0; v < n; v++)
        if (!copy_node(pg, g, v, psim_cluster_device(c->cluster, p->device_of[v])->name, error)) {
            psim_graph_free(pg);
            return NULL;
        }
    Part pt = {c, p, pg, g_hash_table_new_full(xfer_key_hash, xfer_key_equal, g_free, NULL),
               g_array_new(FALSE, TRUE, sizeof(PsimTransfer)), g_array_new(FALSE, FALSE, sizeof(int32_t))};
    g_array_append_vals(pt.src_dev, p->device_of, n);
    gboolean ok = TRUE;
    for (int32_t v = 0; v < n && ok; v++) {
        const PsimNode *s = psim_graph_node(g, v);
        PsimNode *t = psim_graph_node(pg, v);
        int32_t d = p->device_of[v];
        for (int32_t k = 0; k < s->n_inputs && ok; k++) {
            PsimPort in = s->inputs[k];
            if (in.node >= 0 && p->device_of[in.node] != d) {
                int32_t x = transfer_get(&pt, in.node, in.index, d, error);
                ok = x >= 0;
                if (ok)
                    in = (PsimPort){g_array_index(pt.xfers, PsimTransfer, x).recv, 0};
            }
            psim_graph_node_input_add(pg, t, in);
        }
        for (int32_t k = 0; k < s->n_controls && ok; k++) {
            int32_t u = s->controls[k];
            if (p->device_of[u] != d) {
                int32_t x = transfer_get(&pt, u, -1, d, error);
                ok = x >= 0;
                if (ok)
                    u = g_array_index(pt.xfers, PsimTransfer, x).recv;
            }
            psim_graph_node_control_add(pg, t, u);
        }
    }
    for (int32_t i = 0; ok && i < psim_graph_n_inputs(g); i++)
        psim_graph_input_add(pg, psim_graph_input(g, i));
    for (int32_t i = 0; ok && i < psim_graph_n_outputs(g); i++)
        psim_graph_output_add(pg, psim_graph_output(g, i));
    g_hash_table_destroy(pt.index);
    if (!ok || !psim_graph_finalize(pg, error)) {
        g_array_free(pt.xfers, TRUE);
        g_array_free(pt.src_dev, TRUE);
        psim_graph_free(pg);
        return NULL;
    }

    g_autofree char **names = g_new0(char *, nd + 1);
    for (int32_t d = 0; d < nd; d++)
        names[d] = psim_cluster_device(c->cluster, d)->name;
    PsimPlan *plan = psim_plan_new(pg, nd, (const char *const *)names);
    plan->algo = g_strdup(p->algo);
    int32_t N = psim_graph_n_nodes(pg);
    if (N > 0) /* an empty GArray has no data: memcpy from NULL is undefined even for 0 bytes */
        memcpy(plan->device_of, pt.src_dev->data, sizeof(int32_t) * N);
    g_array_free(pt.src_dev, TRUE);
    plan->n_transfers = (int32_t)pt.xfers->len;
    plan->transfers = (PsimTransfer *)g_array_free(pt.xfers, FALSE);
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        plan->transfer_of_recv[plan->transfers[i].recv] = i;
        /* The send node sits on the source: device_of was appended src, dst per transfer. */
    }

    /* Compute-node chains in the placement's order; a first order for the simulator (compute
     * nodes by chain, Send/Recv after them: they take no place in a device's order). */
    g_autofree int32_t *chain_next = g_new(int32_t, N + 1), *last = g_new(int32_t, nd + 1),
                       *rank = g_new(int32_t, N + 1), *topo = g_new(int32_t, N + 1);
    for (int32_t v = 0; v < N; v++)
        chain_next[v] = -1;
    for (int32_t d = 0; d < nd; d++)
        last[d] = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = p->device_of[v];
        if (last[d] >= 0)
            chain_next[last[d]] = v;
        last[d] = v;
        rank[v] = i;
    }
    for (int32_t v = n; v < N; v++)
        rank[v] = n + v;
    if (!chain_topo(pg, chain_next, topo)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "plan '%s': the order on the devices contradicts the graph", p->algo);
        psim_plan_free(plan);
        return NULL;
    }
    g_autofree double *start = g_new(double, N + 1), *end = g_new(double, N + 1),
                      *dur = g_new(double, N + 1), *late = g_new(double, N + 1);
    order_set(plan, NULL, rank);
    /* 1. The step as soon as possible: no Recv held, transfers in request order. */
    double m = plan_simulate(plan, c->model, start, end, error);
    if (m < 0) {
        psim_plan_free(plan);
        return NULL;
    }
    /* 2. ALAP over the simulated durations: slack, priorities, held Recvs and their gates. */
    for (int32_t v = 0; v < N; v++)
        dur[v] = end[v] - start[v];
    alap(pg, topo, chain_next, dur, m, late);
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        PsimTransfer *t = &plan->transfers[i];
        double asap = start[t->recv], late_start = late[t->recv];
        double margin = c->opt.recv_margin_us >= 0 ? c->opt.recv_margin_us : dur[t->recv];
        /* Held back only when it has slack beyond the margin (memory: the Recv's buffer need
         * not exist before). A transfer without slack is not held: a run ahead of the plan
         * would only wait for it, and a run behind it never does. */
        t->earliest_start = late_start - margin > asap ? late_start - margin : 0;
        t->priority = late_start - asap;
    }
    for (int32_t v = 0; v < N; v++)
        plan->priority[v] = plan->transfer_of_recv[v] >= 0 ? plan->transfers[plan->transfer_of_recv[v]].priority
                                                           : late[v];
    choose_gates(plan, p, nd, late, dur);
    /* 3. The plan as it will run. Gates and priorities are TF's heuristics, not the model: where
     * the simulator finds them slower than the step of 1, they go (first the gates, then the
     * priorities), so a plan is never predicted slower than its own placement run freely. */
    g_autofree double *start1 = g_memdup2(start, sizeof(double) * (N + 1));
    double m2 = plan_simulate(plan, c->model, start, end, error);
    if (m2 > m) {
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].after = -1;
        m2 = plan_simulate(plan, c->model, start, end, error);
    }
    if (m2 > m) {
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].priority = 0;
        memcpy(start, start1, sizeof(double) * N);
        m2 = m;
    }
    if (m2 < 0) {
        psim_plan_free(plan);
        return NULL;
    }
    plan->makespan_us = m2;
    memcpy(plan->planned_start, start, sizeof(double) * N);
    order_set(plan, plan->planned_start, rank);
    return plan;
}
