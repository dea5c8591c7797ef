/* The static-order engine shared by every algorithm and by `search` (one engine for estimates
 * and step times), list-scheduling helpers (ranks, insertion), the memory check, and the
 * registry with psim_place(). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "placer/placer-private.h"
#include "placesim/sim.h"

static const PsimPlacer *const registry[] = {
    &psim__placer_greedy, &psim__placer_heft,   &psim__placer_etf,
    &psim__placer_metf,   &psim__placer_msct,   &psim__placer_mtopo,
    &psim__placer_single, &psim__placer_round_robin, &psim__placer_file,
    &psim__placer_search, NULL,
};

const PsimPlacer *const *psim_placer_list(int32_t *n)
{
    if (n)
        *n = (int32_t)G_N_ELEMENTS(registry) - 1;
    return registry;
}

const PsimPlacer *psim_placer_lookup(const char *name)
{
    for (int32_t i = 0; registry[i]; i++)
        if (!strcmp(registry[i]->name, name))
            return registry[i];
    return NULL;
}

PsimPlacement *psim_placement_new(int32_t n_nodes, int32_t n_devices, const char *algo)
{
    PsimPlacement *p = g_new0(PsimPlacement, 1);
    p->algo = g_strdup(algo);
    p->n_nodes = n_nodes;
    p->n_devices = n_devices;
    p->device_of = g_new(int32_t, n_nodes + 1);
    for (int32_t i = 0; i < n_nodes; i++)
        p->device_of[i] = -1;
    p->seq = g_new(int32_t, n_nodes + 1);
    p->start = g_new0(double, n_nodes + 1);
    p->finish = g_new0(double, n_nodes + 1);
    return p;
}

static void step_free(struct PsimPlacementStep *st)
{
    if (!st)
        return;
    g_free(st->device_of);
    g_free(st->seq);
    g_free(st->times);
    g_free(st);
}

void psim_placement_free(PsimPlacement *p)
{
    if (!p)
        return;
    step_free(p->step);
    g_free(p->algo);
    g_free(p->device_of);
    g_free(p->seq);
    g_free(p->start);
    g_free(p->finish);
    g_free(p);
}

/* ---- levels ---- */

double *psim__rank_upward(const PsimPlaceCtx *c)
{
    double *r = g_new(double, c->n + 1);
    for (int32_t i = c->n - 1; i >= 0; i--) {
        int32_t v = c->topo[i];
        double best = 0;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++) {
            double x = psim__xfer_mean(c, c->out_bytes[j]) + r[c->out_dst[j]];
            best = MAX(best, x);
        }
        r[v] = c->mean_cost[v] + best;
    }
    return r;
}

double *psim__blevel(const PsimPlaceCtx *c)
{
    double *r = g_new(double, c->n + 1);
    for (int32_t i = c->n - 1; i >= 0; i--) {
        int32_t v = c->topo[i];
        double best = 0;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
            best = MAX(best, r[c->out_dst[j]]);
        r[v] = c->min_cost[v] + best;
    }
    return r;
}

double *psim__tlevel(const PsimPlaceCtx *c)
{
    double *t = g_new(double, c->n + 1);
    for (int32_t i = 0; i < c->n; i++) {
        int32_t v = c->topo[i];
        double best = 0;
        for (int32_t j = c->in_off[v]; j < c->in_off[v + 1]; j++) {
            int32_t u = c->in_src[j];
            best = MAX(best, t[u] + c->min_cost[u]);
        }
        t[v] = best;
    }
    return t;
}

/* ---- the step of a placement: the simulator's ---- */

/* A coarse problem's placement on its fine graph: each node on its chain's device, the chains in
 * seq's order and each chain's nodes in topological order; a coarse node's start is its first
 * member's and its finish its last's. */
static double coarse_step(const PsimPlaceCtx *c, const int32_t *dev, const int32_t *seq,
                          double *start, double *finish)
{
    const PsimPlaceCtx *f = c->fine;
    g_return_val_if_fail(f && c->fine_coarse_of, -1);
    const int32_t *cof = c->fine_coarse_of;
    int32_t n = f->n;
    g_autofree int32_t *fdev = g_new(int32_t, n + 1), *fseq = g_new(int32_t, n + 1),
                       *pos = g_new(int32_t, c->n + 1), *off = g_new0(int32_t, c->n + 2);
    g_autofree double *fs = g_new(double, n + 1), *ff = g_new(double, n + 1);
    for (int32_t i = 0; i < c->n; i++)
        pos[seq[i]] = i;
    for (int32_t v = 0; v < n; v++) {
        fdev[v] = dev[cof[v]];
        off[pos[cof[v]] + 1]++;
    }
    for (int32_t i = 0; i < c->n; i++)
        off[i + 1] += off[i];
    for (int32_t i = 0; i < n; i++) { /* bucket by chain position, topological within */
        int32_t v = f->topo[i];
        fseq[off[pos[cof[v]]]++] = v;
    }
    double m = psim__engine_run(f, fdev, fseq, fs, ff);
    for (int32_t k = 0; k < c->n; k++) {
        start[k] = INFINITY;
        finish[k] = 0;
    }
    for (int32_t v = 0; v < n && m >= 0; v++) {
        start[cof[v]] = MIN(start[cof[v]], fs[v]);
        finish[cof[v]] = MAX(finish[cof[v]], ff[v]);
    }
    return m;
}

double psim__engine_run(const PsimPlaceCtx *c, const int32_t *dev, const int32_t *seq,
                        double *start, double *finish)
{
    if (!c->g)
        return coarse_step(c, dev, seq, start, finish);
    return psim__engine_run_plan(c, dev, seq, start, finish, NULL, NULL, 0, NULL);
}

/* The simulator's step of pl (device_of, seq and the outputs it asks for) with the problem's
 * costs on those devices and its compression. */
static double engine_step(const PsimPlaceCtx *c, PsimSimPlacement *pl, GError **error)
{
    g_return_val_if_fail(c->g, -1);
    g_autofree double *cost = g_new(double, c->n + 1);
    for (int32_t v = 0; v < c->n; v++)
        cost[v] = psim__cost(c, v, pl->device_of[v]);
    pl->cost = cost;
    pl->compress = c->opt.compress;
    double m = psim_sim_placement_step(c->g, c->model, pl, error);
    pl->cost = NULL;
    return m;
}

double psim__engine_run_plan(const PsimPlaceCtx *c, const int32_t *dev, const int32_t *seq,
                             double *start, double *finish, double *plan_start, double *plan_end,
                             int32_t n_plan, GError **error)
{
    PsimSimPlacement pl = {.device_of = dev, .seq = seq, .start = start, .finish = finish,
                           .plan_start = plan_start, .plan_end = plan_end, .n_plan = n_plan};
    return engine_step(c, &pl, error);
}

const struct PsimPlacementStep *psim__placement_step(const PsimPlacement *p, const PsimPlaceCtx *c,
                                                     int32_t n_plan)
{
    const struct PsimPlacementStep *st = p->step;
    size_t bytes = sizeof(int32_t) * (size_t)p->n_nodes;
    if (!st || st->ctx != c || st->n_plan != n_plan || memcmp(st->device_of, p->device_of, bytes) ||
        memcmp(st->seq, p->seq, bytes))
        return NULL;
    return st;
}

/* The step of p as it stands (psim__engine_run: its nodes' start and finish), and, for a fine
 * problem, its plan's node times kept in p->step. The kept times change only when the step is
 * taken (a refused placement that its caller puts back finds its own times again). */
static double evaluate_step(const PsimPlaceCtx *c, PsimPlacement *p)
{
    if (!c->g)
        return psim__engine_run(c, p->device_of, p->seq, p->start, p->finish);
    double *times = NULL;
    int32_t n_plan = 0;
    PsimSimPlacement pl = {.device_of = p->device_of, .seq = p->seq, .start = p->start,
                           .finish = p->finish, .plan_times = &times, .n_plan_out = &n_plan};
    double m = engine_step(c, &pl, NULL);
    if (m < 0) {
        g_free(times);
        return m;
    }
    struct PsimPlacementStep *st = g_new0(struct PsimPlacementStep, 1);
    st->ctx = c;
    st->device_of = g_memdup2(p->device_of, sizeof(int32_t) * ((size_t)p->n_nodes + 1));
    st->seq = g_memdup2(p->seq, sizeof(int32_t) * ((size_t)p->n_nodes + 1));
    st->times = times;
    st->n_plan = n_plan;
    st->makespan_us = m;
    step_free(p->step);
    p->step = st;
    return m;
}

gboolean psim_placement_evaluate(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    double m = evaluate_step(c, p);
    if (m < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "placement '%s': the order on the devices contradicts the graph (deadlock)",
                    p->algo);
        return FALSE;
    }
    p->makespan_us = m;
    return TRUE;
}

typedef struct {
    const PsimPlaceCtx *c;
    const double *start, *finish;
} SeqCmp;

static int cmp_start(const void *a, const void *b, void *user)
{
    const SeqCmp *s = user;
    int32_t u = *(const int32_t *)a, v = *(const int32_t *)b;
    if (s->start[u] != s->start[v])
        return s->start[u] < s->start[v] ? -1 : 1;
    if (s->finish && s->finish[u] != s->finish[v])
        return s->finish[u] < s->finish[v] ? -1 : 1;
    return s->c->topo_pos[u] - s->c->topo_pos[v];
}

void psim__seq_from_start(const PsimPlaceCtx *c, const double *start, const double *finish,
                          int32_t *seq)
{
    /* Zero-length nodes go before a node starting at the same time on their device. */
    SeqCmp s = {c, start, finish};
    for (int32_t v = 0; v < c->n; v++)
        seq[v] = c->topo[v];
    qsort_r(seq, (size_t)c->n, sizeof(int32_t), cmp_start, &s);
}

/* The binary heap of node ids shared by the list schedulers (placer-private.h). */
static inline gboolean heap_before(const PsimNodeHeap *h, int32_t u, int32_t v)
{
    if (h->key[u] != h->key[v])
        return h->max ? h->key[u] > h->key[v] : h->key[u] < h->key[v];
    return h->pos[u] < h->pos[v];
}

void psim__node_heap_push(PsimNodeHeap *h, int32_t v)
{
    int32_t i = h->n++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!heap_before(h, v, h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = v;
}

int32_t psim__node_heap_pop(PsimNodeHeap *h)
{
    int32_t top = h->a[0], v = h->a[--h->n], i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        int32_t mv = v;
        if (l < h->n && heap_before(h, h->a[l], mv)) {
            m = l;
            mv = h->a[l];
        }
        if (r < h->n && heap_before(h, h->a[r], mv))
            m = r;
        if (m == i)
            break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (h->n)
        h->a[i] = v;
    return top;
}

void psim__seq_by_key(const PsimPlaceCtx *c, const double *key, int32_t *seq)
{
    int32_t n = c->n, k = 0;
    g_autofree int32_t *deg = g_new(int32_t, n + 1);
    PsimNodeHeap h = {g_new(int32_t, n + 1), 0, key, c->topo_pos, TRUE};
    for (int32_t v = 0; v < n; v++) {
        deg[v] = c->in_off[v + 1] - c->in_off[v];
        if (!deg[v])
            psim__node_heap_push(&h, v);
    }
    while (h.n) {
        int32_t v = psim__node_heap_pop(&h);
        seq[k++] = v;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
            if (--deg[c->out_dst[j]] == 0)
                psim__node_heap_push(&h, c->out_dst[j]);
    }
    g_free(h.a);
}

/* ---- list scheduling with insertion ---- */

/* Idle gaps of one device, sorted by start; bounded so that huge graphs stay linear (the
 * oldest gap is forgotten, which only loses insertion chances). */
#define MAX_GAPS 16

typedef struct {
    double s, e;
} Gap;

typedef struct {
    Gap *gaps;   /* nd * MAX_GAPS */
    int32_t *n_gaps;
    double *end; /* per device: end of its last node */
} Slots;

static double slot_find(const Slots *sl, int32_t d, double ready, double w)
{
    const Gap *g = sl->gaps + (size_t)d * MAX_GAPS;
    /* Gaps are disjoint and sorted, so their ends are sorted too: skip those ending too soon
     * (usually all of them: ready times grow as the list goes on). */
    int32_t lo = 0, hi = sl->n_gaps[d];
    if (hi == 0 || g[hi - 1].e < ready + w)
        return MAX(ready, sl->end[d]);
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (g[mid].e < ready + w)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int32_t i = lo; i < sl->n_gaps[d]; i++) {
        double s = MAX(g[i].s, ready);
        if (s + w <= g[i].e)
            return s;
    }
    return MAX(ready, sl->end[d]);
}

static void gap_insert(Slots *sl, int32_t d, int32_t at, double s, double e)
{
    if (e <= s)
        return;
    Gap *g = sl->gaps + (size_t)d * MAX_GAPS;
    int32_t *n = &sl->n_gaps[d];
    if (*n == MAX_GAPS) {
        if (at == 0)
            return;
        memmove(g, g + 1, sizeof(Gap) * (MAX_GAPS - 1));
        (*n)--;
        at--;
    }
    memmove(g + at + 1, g + at, sizeof(Gap) * (*n - at));
    g[at] = (Gap){s, e};
    (*n)++;
}

static void slot_take(Slots *sl, int32_t d, double s, double w)
{
    if (w <= 0)
        return;
    if (s >= sl->end[d]) {
        double old = sl->end[d];
        sl->end[d] = s + w;
        gap_insert(sl, d, sl->n_gaps[d], old, s);
        return;
    }
    Gap *g = sl->gaps + (size_t)d * MAX_GAPS;
    for (int32_t i = 0; i < sl->n_gaps[d]; i++)
        if (g[i].s <= s && s + w <= g[i].e) {
            Gap old = g[i];
            memmove(g + i, g + i + 1, sizeof(Gap) * (sl->n_gaps[d] - i - 1));
            sl->n_gaps[d]--;
            gap_insert(sl, d, i, s + w, old.e);
            gap_insert(sl, d, i, old.s, s);
            return;
        }
    g_assert_not_reached();
}

void psim__list_insertion(const PsimPlaceCtx *c, const int32_t *list, const int32_t *fixed_dev,
                          int32_t *dev, double *start, double *finish, GRand *rng)
{
    int32_t nd = c->nd;
    Slots sl = {g_new(Gap, (size_t)nd * MAX_GAPS), g_new0(int32_t, nd), g_new0(double, nd)};
    g_autofree int32_t *gdev = g_new(int32_t, c->n_groups + 1);
    for (int32_t k = 0; k < c->n_groups; k++)
        gdev[k] = -1;
    g_autofree double *arr = g_new(double, nd);
    for (int32_t i = 0; i < c->n; i++) {
        int32_t v = list[i];
        int32_t only = fixed_dev ? fixed_dev[v] : psim__group_device(c, gdev, v);
        psim__arrival_all(c, v, dev, finish, arr);
        double best_f = INFINITY, best_s = 0;
        int32_t best_d = -1, n_ties = 0;
        for (int32_t d = only >= 0 ? only : 0; d < (only >= 0 ? only + 1 : nd); d++) {
            if (only < 0 && !psim__feasible(c, v, d))
                continue;
            double w = psim__cost(c, v, d);
            double s = slot_find(&sl, d, arr[d], w);
            double f = s + w;
            if (best_d < 0 || f < best_f) {
                best_f = f;
                best_s = s;
                best_d = d;
                n_ties = 1;
            } else if (f == best_f && rng && g_rand_int_range(rng, 0, ++n_ties) == 0) {
                best_s = s;
                best_d = d;
            }
        }
        g_assert(best_d >= 0);
        dev[v] = best_d;
        start[v] = best_s;
        finish[v] = best_f;
        slot_take(&sl, best_d, best_s, best_f - best_s);
        if (c->group[v] >= 0)
            gdev[c->group[v]] = best_d;
    }
    g_free(sl.gaps);
    g_free(sl.n_gaps);
    g_free(sl.end);
}

/* ---- memory ----
 * One memory model: the simulator's (parameters resident from the start, an output from its
 * node's start until its last consumer is done, a Recv's buffer from its transfer's start), run
 * on the placement's step with the limits as capacities. */

/* The simulated step of p with its memory; r gets peaks per device and the first point over a
 * limit (psim_sim_result_clear). -1 when the order deadlocks. */
static double memory_step(const PsimPlaceCtx *c, const int32_t *dev, const int32_t *seq, PsimSimResult *r)
{
    PsimSimPlacement pl = {.device_of = dev, .seq = seq, .capacity = c->capacity, .result = r};
    return engine_step(c, &pl, NULL);
}

static gboolean any_limit(const PsimPlaceCtx *c)
{
    for (int32_t d = 0; d < c->nd; d++)
        if (c->capacity[d])
            return TRUE;
    return FALSE;
}

/* Bytes over the limits, summed over devices. */
static uint64_t excess(const PsimPlaceCtx *c, const PsimSimResult *r)
{
    uint64_t x = 0;
    for (int32_t d = 0; d < c->nd; d++)
        if (c->capacity[d] && r->peak_memory[d] > c->capacity[d])
            x += r->peak_memory[d] - c->capacity[d];
    return x;
}

gboolean psim__memory_check(const PsimPlaceCtx *c, const PsimPlacement *p, GError **error)
{
    if (!any_limit(c) || !c->g)
        return TRUE;
    g_autofree uint64_t *base = g_new0(uint64_t, c->nd + 1);
    for (int32_t v = 0; v < c->n; v++)
        base[p->device_of[v]] += c->param_bytes[v];
    for (int32_t d = 0; d < c->nd; d++)
        if (c->capacity[d] && base[d] > c->capacity[d]) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "placement '%s': device '%s' needs %" G_GUINT64_FORMAT
                        " bytes of parameters, over its limit of %" G_GUINT64_FORMAT,
                        p->algo, psim_cluster_device(c->cluster, d)->name, base[d], c->capacity[d]);
            return FALSE;
        }
    PsimSimResult r;
    gboolean ok = memory_step(c, p->device_of, p->seq, &r) >= 0;
    if (ok && r.over_device >= 0) {
        const PsimNode *on = r.over_node >= 0 && r.over_node < c->n ? psim_graph_node(c->g, r.over_node) : NULL;
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "placement '%s': device '%s' needs %" G_GUINT64_FORMAT
                    " bytes at %.3f us (%s '%s'), over its limit of %" G_GUINT64_FORMAT,
                    p->algo, psim_cluster_device(c->cluster, r.over_device)->name, r.over_bytes,
                    r.over_time_us, on ? "node" : "a transfer to", on ? on->name : "another device",
                    c->capacity[r.over_device]);
        ok = FALSE;
    } else if (!ok) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "placement '%s': the order deadlocks", p->algo);
    }
    psim_sim_result_clear(&r);
    return ok;
}

/* Free sources: nodes that cost nothing anywhere and whose inputs are all such nodes
 * (constants, weights and the shape arithmetic that makes them), not pinned or grouped. */
static guint8 *free_sources(const PsimPlaceCtx *c)
{
    int32_t n = c->n;
    guint8 *is_src = g_new0(guint8, n + 1);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = c->topo[i];
        gboolean ok = c->fixed[v] < 0 && c->group[v] < 0;
        for (int32_t k = 0; k < c->n_cls && ok; k++)
            ok = c->cost[(size_t)v * c->n_cls + k] <= 0;
        for (int32_t j = c->in_off[v]; j < c->in_off[v + 1] && ok; j++)
            ok = is_src[c->in_src[j]];
        is_src[v] = ok;
    }
    return is_src;
}

/* Each free source on the device of its first consumer (by start, then topological position);
 * returns how many moved. */
static int32_t follow_first_consumer(const PsimPlaceCtx *c, const guint8 *is_src, int32_t *dev,
                                     const double *start)
{
    int32_t moved = 0;
    for (int32_t i = c->n - 1; i >= 0; i--) {
        int32_t v = c->topo[i];
        if (!is_src[v])
            continue;
        int32_t first = -1;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++) {
            int32_t w = c->out_dst[j];
            if (psim__feasible(c, v, dev[w]) &&
                (first < 0 || start[w] < start[first] ||
                 (start[w] == start[first] && c->topo_pos[w] < c->topo_pos[first])))
                first = w;
        }
        if (first >= 0 && dev[first] != dev[v]) {
            dev[v] = dev[first];
            moved++;
        }
    }
    return moved;
}

/* Fits a placement into the memory limits by moving work off the devices that overflow, for any
 * algorithm: at each round, the device over its limit first in the step gives up one unit (a
 * node with the free sources that follow it, or its whole colocation group) to another device,
 * the move that leaves the fewest bytes over the limits and then the shortest step, each judged
 * by the simulator. Stops when everything fits (TRUE) or no move lowers the excess. The order
 * (seq) is kept: it is valid on any devices. */
static gboolean memory_repair(PsimPlaceCtx *c, PsimPlacement *p)
{
    int32_t n = c->n, nd = c->nd;
    g_autofree guint8 *is_src = free_sources(c);
    g_autofree int32_t *dev = g_memdup2(p->device_of, sizeof(int32_t) * (n + 1)),
                       *trial = g_new(int32_t, n + 1), *members = g_new(int32_t, n + 1),
                       *cand = g_new(int32_t, n + 1);
    g_autofree double *start = g_memdup2(p->start, sizeof(double) * (n + 1));
    g_autofree uint64_t *held = g_new(uint64_t, n + 1);
    PsimSimResult r;
    if (memory_step(c, dev, p->seq, &r) < 0)
        return FALSE;
    uint64_t now_excess = excess(c, &r);
    int32_t over = r.over_device;
    psim_sim_result_clear(&r);
    /* Bounded: at most 256 moves and 4096 simulated candidates, so that a graph too big for a
     * limit ends with the error line rather than running for hours. */
    int32_t trials = 0;
    for (int32_t round = 0; now_excess > 0 && round < MIN(4 * n + 16, 256) && trials < 4096; round++) {
        if (over < 0)
            break;
        /* What each node holds on its device: its outputs and the free sources it draws. */
        for (int32_t v = 0; v < n; v++)
            held[v] = c->out_bytes_total[v];
        for (int32_t v = 0; v < n; v++)
            if (is_src[v])
                for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
                    if (dev[c->out_dst[j]] == dev[v])
                        held[c->out_dst[j]] += c->param_bytes[v] + c->out_bytes_total[v];
        /* Candidates: movable nodes on the device over its limit, the 16 holding most. */
        int32_t n_cand = 0;
        for (int32_t v = 0; v < n; v++)
            if (dev[v] == over && !is_src[v] && c->fixed[v] < 0)
                cand[n_cand++] = v;
        for (int32_t i = 0; i < n_cand && i < 16; i++) {
            int32_t best = i;
            for (int32_t j = i + 1; j < n_cand; j++)
                if (held[cand[j]] > held[cand[best]])
                    best = j;
            int32_t t = cand[i];
            cand[i] = cand[best];
            cand[best] = t;
        }
        n_cand = MIN(n_cand, 16);
        uint64_t best_excess = UINT64_MAX;
        double best_span = INFINITY;
        int32_t best_v = -1, best_e = -1;
        for (int32_t i = 0; i < n_cand; i++) {
            int32_t v = cand[i], n_mem = 0;
            if (c->group[v] >= 0) {
                for (int32_t w = 0; w < n; w++)
                    if (c->group[w] == c->group[v])
                        members[n_mem++] = w;
            } else {
                members[n_mem++] = v;
            }
            for (int32_t e = 0; e < nd; e++) {
                if (e == over)
                    continue;
                gboolean ok = TRUE;
                for (int32_t k = 0; k < n_mem && ok; k++)
                    ok = c->fixed[members[k]] < 0 && psim__feasible(c, members[k], e);
                if (!ok)
                    continue;
                trials++;
                memcpy(trial, dev, sizeof(int32_t) * n);
                for (int32_t k = 0; k < n_mem; k++)
                    trial[members[k]] = e;
                follow_first_consumer(c, is_src, trial, start);
                double span = memory_step(c, trial, p->seq, &r);
                uint64_t x = span >= 0 ? excess(c, &r) : UINT64_MAX;
                psim_sim_result_clear(&r);
                if (span >= 0 && x < now_excess && (x < best_excess || (x == best_excess && span < best_span))) {
                    best_excess = x;
                    best_span = span;
                    best_v = v;
                    best_e = e;
                }
            }
        }
        if (best_v < 0)
            break;
        if (c->group[best_v] >= 0) {
            for (int32_t w = 0; w < n; w++)
                if (c->group[w] == c->group[best_v])
                    dev[w] = best_e;
        } else {
            dev[best_v] = best_e;
        }
        follow_first_consumer(c, is_src, dev, start);
        if (memory_step(c, dev, p->seq, &r) < 0)
            return FALSE;
        now_excess = excess(c, &r);
        over = r.over_device;
        psim_sim_result_clear(&r);
    }
    if (now_excess > 0)
        return FALSE;
    memcpy(p->device_of, dev, sizeof(int32_t) * n);
    return TRUE;
}

/* ---- running an algorithm ---- */

static gboolean check_devices(const PsimPlaceCtx *c, const PsimPlacement *p, GError **error)
{
    g_autofree int32_t *gdev = g_new(int32_t, c->n_groups + 1);
    for (int32_t k = 0; k < c->n_groups; k++)
        gdev[k] = -1;
    for (int32_t v = 0; v < c->n; v++) {
        int32_t d = p->device_of[v];
        const char *name = c->g ? psim_graph_node(c->g, v)->name : "?";
        if (d < 0 || d >= c->nd || !psim__feasible(c, v, d) || (c->fixed[v] >= 0 && c->fixed[v] != d)) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "placement '%s': node '%s': device %s is not allowed for it", p->algo, name,
                        d >= 0 && d < c->nd ? psim_cluster_device(c->cluster, d)->name : "(none)");
            return FALSE;
        }
        int32_t k = c->group[v];
        if (k >= 0 && gdev[k] >= 0 && gdev[k] != d) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "placement '%s': node '%s': on %s, away from its colocation group on %s",
                        p->algo, name, psim_cluster_device(c->cluster, d)->name,
                        psim_cluster_device(c->cluster, gdev[k])->name);
            return FALSE;
        }
        if (k >= 0)
            gdev[k] = d;
    }
    return TRUE;
}

/* Free sources (nodes that cost nothing anywhere and whose inputs are all such nodes:
 * constants, weights and the shape arithmetic that makes them) follow their first consumer, so
 * that a tensor no schedule waits for does not cross devices for nothing (list schedulers put
 * them wherever a device is idle first). Always, not only where the simulator finds the step no
 * longer: a weight that crosses devices costs the run more than the model sees. The executor
 * holds a device's constants across steps and the kernels prepare them once (oneDNN's Conv
 * reorders its weights once while they are constant), where a weight that arrives by a Recv
 * is sent, copied and prepared again at every step: resnet18's `search` plan of one study
 * sent 19 weights (40 MB) a step, simulated the same as with its weights at home to 0.03%,
 * and measured 33-35 ms against 27 (docs/validation.md). The move never adds a transfer: a
 * source whose consumers are all on one device stops crossing, and one read on several devices
 * crosses to the others from its first consumer's instead of from where it was. */
static void sources_follow_consumers(PsimPlaceCtx *c, PsimPlacement *p)
{
    int32_t n = c->n;
    g_autofree int32_t *old = g_memdup2(p->device_of, sizeof(int32_t) * (n + 1));
    g_autofree guint8 *is_src = free_sources(c);
    int32_t moved = follow_first_consumer(c, is_src, p->device_of, p->start);
    if (!moved)
        return;
    /* Sources first (they take no time), then the rest in the same order. */
    g_autofree int32_t *seq = g_new(int32_t, n + 1), *old_seq = g_memdup2(p->seq, sizeof(int32_t) * (n + 1));
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (is_src[p->seq[i]])
            seq[k++] = p->seq[i];
    for (int32_t i = 0; i < n; i++)
        if (!is_src[p->seq[i]])
            seq[k++] = p->seq[i];
    memcpy(p->seq, seq, sizeof(int32_t) * n);
    g_autofree double *st = g_memdup2(p->start, sizeof(double) * (n + 1)),
                      *fi = g_memdup2(p->finish, sizeof(double) * (n + 1));
    double m = evaluate_step(c, p);
    if (m < 0) { /* the simulator refused the moved plan: keep the algorithm's */
        memcpy(p->device_of, old, sizeof(int32_t) * n);
        memcpy(p->seq, old_seq, sizeof(int32_t) * n);
        memcpy(p->start, st, sizeof(double) * n);
        memcpy(p->finish, fi, sizeof(double) * n);
    } else {
        p->makespan_us = m;
    }
}

PsimPlacement *psim_place(PsimPlaceCtx *c, const char *algo, GError **error)
{
    const PsimPlacer *pl = psim_placer_lookup(algo);
    if (!pl) {
        GString *names = g_string_new(NULL);
        for (int32_t i = 0; registry[i]; i++)
            g_string_append_printf(names, "%s%s", i ? ", " : "", registry[i]->name);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "unknown algorithm '%s' (one of: %s)",
                    algo, names->str);
        g_string_free(names, TRUE);
        return NULL;
    }
    PsimPlacement *p = psim_placement_new(c->n, c->nd, pl->name);
    double t0 = psim__now_ms(), c0 = psim__cpu_ms();
    gboolean placed;
    /* greedy asks the simulator's incremental engine, which reads the graph: it places the
     * fine problem. */
    if (c->opt.coarsen && pl != &psim__placer_file && pl != &psim__placer_greedy) {
        /* Place the chains, then refine per node: each node on its chain's device, ordered
         * by HEFT's rank with insertion. */
        if (!c->coarse) {
            c->coarse = psim__coarsen(c, &c->coarse_of);
            c->coarse->fine = c;
            c->coarse->fine_coarse_of = c->coarse_of;
        }
        g_autoptr(PsimPlacement) q = psim_placement_new(c->coarse->n, c->nd, pl->name);
        placed = pl->place(c->coarse, q, error);
        if (placed) {
            g_autofree int32_t *fixed = g_new(int32_t, c->n + 1), *list = g_new(int32_t, c->n + 1);
            for (int32_t v = 0; v < c->n; v++)
                fixed[v] = q->device_of[c->coarse_of[v]];
            g_autofree double *rank = psim__rank_upward(c);
            psim__seq_by_key(c, rank, list);
            psim__list_insertion(c, list, fixed, p->device_of, p->start, p->finish, NULL);
            psim__seq_from_start(c, p->start, p->finish, p->seq);
        }
    } else {
        placed = pl->place(c, p, error);
    }
    double placed_ms = psim__now_ms();
    if (!placed || !check_devices(c, p, error) ||
        !psim_placement_evaluate(c, p, error)) {
        psim_placement_free(p);
        return NULL;
    }
    p->evaluate_ms = psim__now_ms() - placed_ms;
    if (pl != &psim__placer_file)
        sources_follow_consumers(c, p);
    /* Over a memory limit: moved until it fits, whatever the algorithm (and re-evaluated). */
    if (c->g && any_limit(c) && !psim__memory_check(c, p, NULL) && memory_repair(c, p) &&
        !psim_placement_evaluate(c, p, error)) {
        psim_placement_free(p);
        return NULL;
    }
    p->elapsed_ms = psim__now_ms() - t0;
    p->cpu_ms = psim__cpu_ms() - c0;
    if (!psim__memory_check(c, p, error)) {
        psim_placement_free(p);
        return NULL;
    }
    return p;
}
