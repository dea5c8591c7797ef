/* The plan of a placement: the placed graph partitioned (graph/partition.c: Send/Recv pairs,
 * one Recv per tensor and destination device), then the recv schedule (TF's scheduler.cc: ASAP,
 * ALAP, slack) and the plan's order, starts and priorities, all over simulated times. */
#define _GNU_SOURCE
#include <string.h>

#include "graph/graph-private.h"
#include "placer/placer-private.h"
#include "placesim/sim.h"

int32_t psim_plan_n_sends(const PsimPlan *p)
{
    int32_t k = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(p->graph); v++)
        k += !strcmp(psim_graph_node(p->graph, v)->op, "Send");
    return k;
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
static double plan_simulate(const PsimPlan *plan, const PsimPlaceCtx *c, double *start, double *end,
                            uint64_t *over, GError **error)
{
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE,
                         .node_start = start, .node_end = end};
    PsimSimResult r = {0};
    gboolean ok = psim_sim_run(plan, c->model, &so, &r, NULL, error);
    double t = ok ? r.step_time_us : -1;
    /* Bytes over the placement's memory limits (plan device d is cluster device d). */
    *over = 0;
    for (int32_t d = 0; ok && d < plan->n_devices; d++)
        if (c->capacity[d] && r.peak_memory[d] > c->capacity[d])
            *over += r.peak_memory[d] - c->capacity[d];
    psim_sim_result_clear(&r);
    return t;
}

PsimPlan *psim_plan_build(PsimPlaceCtx *c, const PsimPlacement *p, GError **error)
{
    g_return_val_if_fail(c->g, NULL);
    int32_t n = c->n, nd = c->nd;
    g_autofree const char **names = g_new0(const char *, nd + 1),
                          **brief = g_new0(const char *, nd + 1);
    for (int32_t d = 0; d < nd; d++) {
        names[d] = psim_cluster_device(c->cluster, d)->name;
        brief[d] = psim_cluster_device(c->cluster, d)->short_name;
    }
    PsimPlan *plan = psim_plan_partition(c->g, p->device_of, nd, names, brief, c->opt.compress,
                                         c->opt.compress_rounding, p->algo, error);
    if (!plan)
        return NULL;
    PsimGraph *pg = plan->graph;
    int32_t N = psim_graph_n_nodes(pg);

    /* Compute-node chains in the placement's order; a first order for the simulator (compute
     * nodes by chain, Send/Recv after them: they take no place in a device's order). */
    g_autofree int32_t *chain_next = g_new(int32_t, N + 1), *last = g_new(int32_t, nd + 1),
                       *topo = g_new(int32_t, N + 1);
    for (int32_t v = 0; v < N; v++)
        chain_next[v] = -1;
    for (int32_t d = 0; d < nd; d++)
        last[d] = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = p->device_of[v];
        if (last[d] >= 0)
            chain_next[last[d]] = v;
        last[d] = v;
    }
    if (!chain_topo(pg, chain_next, topo)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "plan '%s': the order on the devices contradicts the graph", p->algo);
        psim_plan_free(plan);
        return NULL;
    }
    g_autofree double *start = g_new(double, N + 1), *end = g_new(double, N + 1),
                      *dur = g_new(double, N + 1), *late = g_new(double, N + 1);
    psim_plan_order_set(plan, p->seq, NULL);
    /* 1. The step as soon as possible: no Recv held, transfers in request order. That is the
     * placement's own step, which the simulator gives without the plan's graph (cheaper), and
     * which its evaluation kept when nothing moved since. */
    const struct PsimPlacementStep *kept = psim__placement_step(p, c, N);
    double m;
    if (kept) {
        memcpy(start, kept->times, sizeof(double) * (size_t)N);
        memcpy(end, kept->times + N, sizeof(double) * (size_t)N);
        m = kept->makespan_us;
    } else {
        m = psim__engine_run_plan(c, p->device_of, p->seq, NULL, NULL, start, end, N, error);
    }
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
     * the simulator finds them slower than the step of 1, or over a memory limit that the
     * placement kept (psim_place checked it on the step of 1), they go (first the gates, then
     * the priorities), so a plan is never predicted slower or bigger than its own placement run
     * freely. */
    uint64_t over = 0;
    double m2 = plan_simulate(plan, c, start, end, &over, error);
    if (m2 > m || over) {
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].after = -1;
        m2 = plan_simulate(plan, c, start, end, &over, error);
    }
    if (m2 > m || over) {
        /* Without either: the placement run freely, simulated as the plan it now is (not the
         * step of 1 copied: the report must be `placesim sim`'s step of this plan). */
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].priority = 0;
        m2 = plan_simulate(plan, c, start, end, &over, error);
    }
    if (m2 < 0) {
        psim_plan_free(plan);
        return NULL;
    }
    plan->makespan_us = m2;
    memcpy(plan->planned_start, start, sizeof(double) * N);
    psim_plan_order_set(plan, p->seq, plan->planned_start);
    return plan;
}
