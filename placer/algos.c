/* The list-scheduling placers: the TF whitepaper's greedy, HEFT, ETF and Baechi's memory-
 * constrained m-ETF, m-SCT and m-TOPO, the best single device, and round-robin. Each fills
 * device_of and seq; psim_place() then evaluates the result with the engine. */
#include <string.h>

#include "placer/placer-private.h"
#include "placesim/sim.h"

static int32_t *groups_new(const PsimPlaceCtx *c)
{
    int32_t *gdev = g_new(int32_t, c->n_groups + 1);
    for (int32_t k = 0; k < c->n_groups; k++)
        gdev[k] = -1;
    return gdev;
}

/* ---- greedy: walk the graph in simulated execution order (the node whose inputs are complete
 * earliest goes next); put each node where the simulator's incremental engine says it would
 * finish soonest, counting its inputs' transfers on their links. One greedy, whatever the
 * cluster: its estimates come from sim/, as the step time it is judged by. ---- */

static gboolean place_greedy(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    g_return_val_if_fail(c->g, FALSE); /* psim_place never coarsens for greedy */
    int32_t n = c->n, nd = c->nd;
    g_autofree double *table = g_new(double, (size_t)n * nd + 1);
    for (int32_t v = 0; v < n; v++)
        for (int32_t d = 0; d < nd; d++)
            table[(size_t)v * nd + d] = psim__feasible(c, v, d) ? psim__cost(c, v, d) : INFINITY;
    g_autoptr(PsimSimEngine) e = psim_sim_engine_new(c->g, c->model, table);
    g_autofree double *ready = g_new0(double, n + 1);
    g_autofree int32_t *deg = g_new(int32_t, n + 1), *gdev = groups_new(c);
    PsimNodeHeap h = {g_new(int32_t, n + 1), 0, ready, c->topo_pos, FALSE};
    for (int32_t v = 0; v < n; v++) {
        deg[v] = c->in_off[v + 1] - c->in_off[v];
        if (!deg[v])
            psim__node_heap_push(&h, v);
    }
    while (h.n) {
        int32_t v = psim__node_heap_pop(&h);
        int32_t only = psim__group_device(c, gdev, v), best = -1;
        double best_f = INFINITY, best_s = 0;
        for (int32_t d = only >= 0 ? only : 0; d < (only >= 0 ? only + 1 : nd); d++) {
            if (only < 0 && !psim__feasible(c, v, d))
                continue;
            double s;
            double f = psim_sim_engine_probe(e, v, d, &s);
            if (best < 0 || f < best_f) {
                best_f = f;
                best_s = s;
                best = d;
            }
        }
        psim_sim_engine_commit(e, v, best);
        p->device_of[v] = best;
        p->start[v] = best_s;
        p->finish[v] = best_f;
        if (c->group[v] >= 0)
            gdev[c->group[v]] = best;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++) {
            int32_t w = c->out_dst[j];
            ready[w] = MAX(ready[w], best_f);
            if (--deg[w] == 0)
                psim__node_heap_push(&h, w);
        }
    }
    g_free(h.a);
    psim__seq_from_start(c, p->start, p->finish, p->seq);
    return TRUE;
}

/* ---- HEFT: upward rank with mean costs, insertion-based earliest finish. ---- */

static gboolean place_heft(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    g_autofree double *rank = psim__rank_upward(c);
    g_autofree int32_t *list = g_new(int32_t, c->n + 1);
    psim__seq_by_key(c, rank, list);
    psim__list_insertion(c, list, NULL, p->device_of, p->start, p->finish, NULL);
    psim__seq_from_start(c, p->start, p->finish, p->seq);
    return TRUE;
}

/* ---- ETF family: repeatedly start the ready (node, device) pair that can start earliest,
 * ties to the higher static level. m-ETF counts memory (parameters plus outputs of the nodes
 * placed on a device, Baechi's conservative rule); m-SCT also keeps a node's favourite child
 * (the successor it sends most to) on its device when it can. ---- */

static gboolean etf_common(PsimPlaceCtx *c, PsimPlacement *p, gboolean mem, gboolean sct)
{
    int32_t n = c->n, nd = c->nd;
    int32_t *dev = p->device_of;
    double *start = p->start, *finish = p->finish;
    g_autofree double *bl = psim__blevel(c), *free_at = g_new0(double, nd);
    g_autofree uint64_t *used = g_new0(uint64_t, nd);
    g_autofree int32_t *deg = g_new(int32_t, n + 1), *gdev = groups_new(c),
                       *ready = g_new(int32_t, n + 1), *fav = g_new(int32_t, n + 1),
                       *fav_parent = g_new(int32_t, n + 1), *reserved = g_new(int32_t, nd);
    int32_t n_ready = 0;
    for (int32_t d = 0; d < nd; d++)
        reserved[d] = -1;
    for (int32_t v = 0; v < n; v++) {
        deg[v] = c->in_off[v + 1] - c->in_off[v];
        if (!deg[v])
            ready[n_ready++] = v;
        fav[v] = fav_parent[v] = -1;
    }
    if (sct) {
        /* The favourite child: the successor with the costliest transfer (SCT's rounding of its
         * relaxation); a child keeps the parent whose edge to it is costliest. */
        g_autofree double *pw = g_new0(double, n + 1);
        for (int32_t u = 0; u < n; u++) {
            double best = 0;
            for (int32_t j = c->out_off[u]; j < c->out_off[u + 1]; j++) {
                double t = psim__xfer_mean(c, c->out_bytes[j]);
                if (t > best) {
                    best = t;
                    fav[u] = c->out_dst[j];
                }
            }
            if (fav[u] >= 0 && best > pw[fav[u]]) {
                pw[fav[u]] = best;
                fav_parent[fav[u]] = u;
            }
        }
    }
    for (int32_t step = 0; step < n; step++) {
        int32_t bi = -1, bd = -1;
        double bs = INFINITY;
        for (int pass = 0; pass < 2 && bi < 0; pass++) {
            /* Pass 1 drops the memory rule when nothing fits (the final check reports it). The
             * first candidate is taken whatever its start, so that one is chosen even when
             * starts are as large as the +inf that bs starts at. */
            for (int32_t i = 0; i < n_ready; i++) {
                int32_t v = ready[i], only = psim__group_device(c, gdev, v);
                uint64_t need = c->param_bytes[v] + c->out_bytes_total[v];
                for (int32_t d = only >= 0 ? only : 0; d < (only >= 0 ? only + 1 : nd); d++) {
                    if (only < 0 && !psim__feasible(c, v, d))
                        continue;
                    if (mem && pass == 0 && c->capacity[d] && used[d] + need > c->capacity[d])
                        continue;
                    if (reserved[d] >= 0 && reserved[d] != v && only < 0)
                        continue;
                    double s = MAX(free_at[d], psim__arrival(c, v, d, dev, finish));
                    if (bi < 0 || s < bs || (s == bs && (bl[v] > bl[ready[bi]] ||
                                               (bl[v] == bl[ready[bi]] && c->topo_pos[v] < c->topo_pos[ready[bi]])))) {
                        bs = s;
                        bi = i;
                        bd = d;
                    }
                }
            }
        }
        g_assert(bi >= 0);
        int32_t v = ready[bi];
        ready[bi] = ready[--n_ready];
        dev[v] = bd;
        start[v] = bs;
        finish[v] = bs + psim__cost(c, v, bd);
        free_at[bd] = finish[v];
        used[bd] += c->param_bytes[v] + c->out_bytes_total[v];
        if (c->group[v] >= 0)
            gdev[c->group[v]] = bd;
        for (int32_t d = 0; d < nd; d++)
            if (reserved[d] == v)
                reserved[d] = -1;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++) {
            int32_t w = c->out_dst[j];
            if (--deg[w] == 0) {
                ready[n_ready++] = w;
                int32_t u = fav_parent[w];
                if (u >= 0 && reserved[dev[u]] < 0 && psim__feasible(c, w, dev[u]))
                    reserved[dev[u]] = w;
            }
        }
    }
    psim__seq_from_start(c, start, finish, p->seq);
    return TRUE;
}

static gboolean place_etf(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    return etf_common(c, p, FALSE, FALSE);
}

static gboolean place_metf(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    return etf_common(c, p, TRUE, FALSE);
}

static gboolean place_msct(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    return etf_common(c, p, TRUE, TRUE);
}

/* ---- m-TOPO: fill devices one after another in topological order, moving on when a device
 * holds its share of the memory (of the work, when the graph has no sizes). ---- */

static gboolean place_mtopo(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    int32_t n = c->n, nd = c->nd;
    g_autofree double *w = g_new(double, n + 1), *acc = g_new0(double, nd);
    g_autofree int32_t *gdev = groups_new(c);
    double total = 0;
    for (int32_t v = 0; v < n; v++)
        total += (double)(c->param_bytes[v] + c->out_bytes_total[v]);
    gboolean by_mem = total > 0;
    if (!by_mem)
        for (int32_t v = 0; v < n; v++)
            total += c->mean_cost[v];
    double share = total / nd;
    int32_t cur = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = c->topo[i];
        w[v] = by_mem ? (double)(c->param_bytes[v] + c->out_bytes_total[v]) : c->mean_cost[v];
        int32_t d = psim__group_device(c, gdev, v);
        if (d < 0) {
            double cap = c->capacity[cur] ? (double)c->capacity[cur] : INFINITY;
            if (cur < nd - 1 && acc[cur] > 0 && (acc[cur] + w[v] > share * 1.0000001 || acc[cur] + w[v] > cap))
                cur++;
            for (int32_t k = 0; k < nd; k++) {
                int32_t e = (cur + k) % nd;
                if (psim__feasible(c, v, e)) {
                    d = e;
                    break;
                }
            }
        }
        p->device_of[v] = d;
        acc[d] += w[v];
        if (c->group[v] >= 0)
            gdev[c->group[v]] = d;
        p->seq[i] = v;
    }
    return TRUE;
}

/* ---- single: everything on the device that runs the whole graph fastest (nodes that cannot
 * run there go to their cheapest allowed device). ---- */

static int32_t cheapest(const PsimPlaceCtx *c, int32_t v)
{
    int32_t best = -1;
    for (int32_t d = 0; d < c->nd; d++)
        if (psim__feasible(c, v, d) && (best < 0 || psim__cost(c, v, d) < psim__cost(c, v, best)))
            best = d;
    return best;
}

static gboolean place_single(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    int32_t n = c->n, nd = c->nd, best = 0;
    double best_t = INFINITY;
    /* Each node's cheapest device once (per device and node, it made this nd^2 n). */
    g_autofree int32_t *cheap = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        cheap[v] = cheapest(c, v);
    for (int32_t d = 0; d < nd; d++) {
        double t = 0;
        for (int32_t v = 0; v < n; v++)
            t += psim__feasible(c, v, d) && (c->fixed[v] < 0 || c->fixed[v] == d)
                     ? psim__cost(c, v, d) : psim__cost(c, v, cheap[v]) + 1e9;
        if (t < best_t) {
            best_t = t;
            best = d;
        }
    }
    g_autofree int32_t *gdev = groups_new(c);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = c->topo[i], d = psim__group_device(c, gdev, v);
        if (d < 0)
            d = psim__feasible(c, v, best) ? best : cheap[v];
        p->device_of[v] = d;
        if (c->group[v] >= 0)
            gdev[c->group[v]] = d;
        p->seq[i] = v;
    }
    return TRUE;
}

/* ---- round-robin: nodes in topological order dealt to the devices in turn. ---- */

static gboolean place_round_robin(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    int32_t n = c->n, nd = c->nd, next = 0;
    g_autofree int32_t *gdev = groups_new(c);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = c->topo[i], d = psim__group_device(c, gdev, v);
        if (d < 0) {
            for (int32_t k = 0; k < nd; k++) {
                int32_t e = (next + k) % nd;
                if (psim__feasible(c, v, e)) {
                    d = e;
                    break;
                }
            }
            next = (d + 1) % nd;
        }
        p->device_of[v] = d;
        if (c->group[v] >= 0)
            gdev[c->group[v]] = d;
        p->seq[i] = v;
    }
    return TRUE;
}

const PsimPlacer psim__placer_greedy = {
    "greedy", "TF whitepaper: simulated execution order, each node where it finishes soonest",
    place_greedy};
const PsimPlacer psim__placer_heft = {
    "heft", "HEFT (Topcuoglu et al. 2002): upward rank, insertion-based earliest finish",
    place_heft};
const PsimPlacer psim__placer_etf = {
    "etf", "ETF (Hwang et al. 1989): the ready node and device that can start earliest",
    place_etf};
const PsimPlacer psim__placer_metf = {
    "m-etf", "Baechi m-ETF: ETF within each device's memory", place_metf};
const PsimPlacer psim__placer_msct = {
    "m-sct", "Baechi m-SCT: m-ETF keeping favourite children with their parents", place_msct};
const PsimPlacer psim__placer_mtopo = {
    "m-topo", "Baechi m-TOPO: topological order, devices filled to an equal memory share",
    place_mtopo};
const PsimPlacer psim__placer_single = {
    "single", "everything on the single device that runs the graph fastest", place_single};
const PsimPlacer psim__placer_round_robin = {
    "round-robin", "nodes in topological order dealt to the devices in turn", place_round_robin};
