/* `search`: simulation-first refinement. It starts from the best of the list heuristics and
 * improves it, every candidate judged by the simulator's step time (psim__engine_run):
 *  1. iterated list scheduling: priority lists from several rules (upward rank, static level,
 *     top + bottom level, ...) perturbed at random, decoded by insertion-based earliest finish
 *     with random tie-breaking;
 *  2. local search on the best priority list (move a node within its precedence window);
 *  3. moves on the plan itself: move a node or its colocation group to another device, swap
 *     two nodes' devices, reorder two neighbours on a device.
 * Improvements and equal moves are kept, so the result is never worse than its start. It stops
 * early at the lower bound max(critical path, work / devices). The budget is counted in work
 * units (nodes + edges per evaluation) converted from --budget-ms at a fixed rate, so that a
 * seed gives the same plan on any machine and at any load. */
#include <string.h>

#include "placer/placer-private.h"
#include "placesim/sim.h"

/* Work units per millisecond of budget, with an evaluation costing (nodes + edges) x (devices
 * + 2) + 64 units: about the development VM's speed for a decode plus a simulated step
 * (psim_sim_placement_step; 1000 ms of budget took 1.6 s on a 52-task STG graph over local:4). */
#define UNITS_PER_MS 25000.0

typedef struct {
    PsimPlaceCtx *c;
    GRand *rng;
    double units_left;
    double unit_cost;
    int32_t *dev, *seq;       /* best so far */
    double best;
    double *start, *finish;   /* scratch */
    int32_t *tdev, *tseq;     /* candidate */
    double lb;
} Search;

static gboolean spend(Search *s)
{
    s->units_left -= s->unit_cost;
    return s->units_left > 0;
}

static gboolean at_bound(const Search *s) { return s->best <= s->lb * (1 + 1e-12) + 1e-9; }

/* Evaluates candidate (tdev, tseq); keeps it when not worse. Returns its makespan. */
static double judge(Search *s, gboolean *better)
{
    double m = psim__engine_run(s->c, s->tdev, s->tseq, s->start, s->finish);
    *better = FALSE;
    if (m >= 0 && m <= s->best) {
        *better = m < s->best;
        s->best = m;
        memcpy(s->dev, s->tdev, sizeof(int32_t) * s->c->n);
        memcpy(s->seq, s->tseq, sizeof(int32_t) * s->c->n);
    }
    return m;
}

/* Decodes a priority list into (tdev, tseq) by insertion-based earliest finish. */
static void decode(Search *s, const int32_t *list)
{
    PsimPlaceCtx *c = s->c;
    psim__list_insertion(c, list, NULL, s->tdev, s->start, s->finish, s->rng);
    psim__seq_from_start(c, s->start, s->finish, s->tseq);
}

static void start_from_heuristics(Search *s)
{
    static const char *const starts[] = {"heft", "greedy", "single", "m-topo", "etf", "m-sct"};
    PsimPlaceCtx *c = s->c;
    for (size_t i = 0; i < G_N_ELEMENTS(starts); i++) {
        if (i >= 4 && c->n > 20000) /* the ETF family is quadratic in the ready set */
            break;
        if (!c->g && !strcmp(starts[i], "greedy")) /* a coarse problem: greedy reads the graph */
            continue;
        g_autoptr(PsimPlacement) p = psim_placement_new(c->n, c->nd, starts[i]);
        if (!psim_placer_lookup(starts[i])->place(c, p, NULL))
            continue;
        double m = psim__engine_run(c, p->device_of, p->seq, s->start, s->finish);
        if (m >= 0 && m < s->best) {
            s->best = m;
            memcpy(s->dev, p->device_of, sizeof(int32_t) * c->n);
            memcpy(s->seq, p->seq, sizeof(int32_t) * c->n);
        }
    }
}

/* Phase 1: perturbed priority rules. Returns the best list found (for phase 2). */
static void iterated_lists(Search *s, double units, int32_t *best_list)
{
    PsimPlaceCtx *c = s->c;
    int32_t n = c->n;
    g_autofree double *rank = psim__rank_upward(c), *bl = psim__blevel(c), *tl = psim__tlevel(c);
    g_autofree double *key = g_new(double, n + 1);
    g_autofree int32_t *list = g_new(int32_t, n + 1);
    double list_best = INFINITY;
    double stop = s->units_left - units;
    if (units < s->unit_cost)
        return;
    for (int64_t it = 0; s->units_left > stop && !at_bound(s); it++) {
        int rule = (int)(it % 4);
        double noise = it < 4 ? 0 : g_rand_double_range(s->rng, 0, 0.3);
        for (int32_t v = 0; v < n; v++) {
            double base = rule == 0 ? rank[v] : rule == 1 ? bl[v]
                        : rule == 2 ? bl[v] + tl[v] : bl[v] + 0.5 * c->min_cost[v];
            key[v] = base * (1 + noise * g_rand_double_range(s->rng, -1, 1));
        }
        psim__seq_by_key(c, key, list);
        decode(s, list);
        gboolean better;
        double m = judge(s, &better);
        if (m >= 0 && m < list_best) {
            list_best = m;
            memcpy(best_list, list, sizeof(int32_t) * n);
        }
        if (!spend(s))
            break;
    }
}

/* Phase 2: moves on the priority list: a node to another place within its window. */
static void list_local_search(Search *s, double units, int32_t *list)
{
    PsimPlaceCtx *c = s->c;
    int32_t n = c->n;
    if (n < 2 || units < s->unit_cost)
        return;
    g_autofree int32_t *pos = g_new(int32_t, n + 1), *cand = g_new(int32_t, n + 1);
    decode(s, list);
    gboolean better;
    double cur = judge(s, &better);
    double stop = s->units_left - units;
    while (s->units_left > stop && !at_bound(s) && spend(s)) {
        for (int32_t i = 0; i < n; i++)
            pos[list[i]] = i;
        int32_t i = g_rand_int_range(s->rng, 0, n), v = list[i];
        int32_t lo = 0, hi = n - 1;
        for (int32_t j = c->in_off[v]; j < c->in_off[v + 1]; j++)
            lo = MAX(lo, pos[c->in_src[j]] + 1);
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
            hi = MIN(hi, pos[c->out_dst[j]] - 1);
        if (hi <= lo)
            continue;
        int32_t k = g_rand_int_range(s->rng, lo, hi + 1);
        if (k == i)
            continue;
        memcpy(cand, list, sizeof(int32_t) * n);
        if (k < i)
            memmove(cand + k + 1, cand + k, sizeof(int32_t) * (i - k));
        else
            memmove(cand + i, cand + i + 1, sizeof(int32_t) * (k - i));
        cand[k] = v;
        decode(s, cand);
        double m = judge(s, &better);
        if (m >= 0 && m <= cur) {
            cur = m;
            memcpy(list, cand, sizeof(int32_t) * n);
        }
    }
}

/* Phase 3: moves on devices and orders, starting from the best plan. */
static void plan_moves(Search *s, double units)
{
    PsimPlaceCtx *c = s->c;
    int32_t n = c->n, nd = c->nd;
    double stop = s->units_left - units;
    while (s->units_left > stop && !at_bound(s) && spend(s)) {
        memcpy(s->tdev, s->dev, sizeof(int32_t) * n);
        memcpy(s->tseq, s->seq, sizeof(int32_t) * n);
        int kind = g_rand_int_range(s->rng, 0, 3);
        int32_t v = g_rand_int_range(s->rng, 0, n);
        if (kind == 0 && nd > 1) { /* move v (and its group) to another device */
            if (c->fixed[v] >= 0)
                continue;
            int32_t d = g_rand_int_range(s->rng, 0, nd);
            if (d == s->dev[v] || !psim__feasible(c, v, d))
                continue;
            if (c->group[v] >= 0) {
                for (int32_t u = 0; u < n; u++)
                    if (c->group[u] == c->group[v])
                        s->tdev[u] = d;
            } else {
                s->tdev[v] = d;
            }
        } else if (kind == 1 && nd > 1) { /* swap the devices of two nodes */
            int32_t u = g_rand_int_range(s->rng, 0, n);
            int32_t du = s->dev[u], dv = s->dev[v];
            if (du == dv || c->group[u] >= 0 || c->group[v] >= 0 || c->fixed[u] >= 0 ||
                c->fixed[v] >= 0 || !psim__feasible(c, u, dv) || !psim__feasible(c, v, du))
                continue;
            s->tdev[u] = dv;
            s->tdev[v] = du;
        } else { /* reorder: v before the previous node on its device, when independent */
            int32_t i = 0;
            while (s->tseq[i] != v)
                i++;
            int32_t j = i - 1;
            while (j >= 0 && s->tdev[s->tseq[j]] != s->tdev[v])
                j--;
            if (j < 0)
                continue;
            int32_t u = s->tseq[j];
            gboolean dep = FALSE;
            for (int32_t e = c->in_off[v]; e < c->in_off[v + 1] && !dep; e++)
                dep = c->in_src[e] == u;
            if (dep)
                continue;
            memmove(s->tseq + j, s->tseq + j + 1, sizeof(int32_t) * (i - j));
            s->tseq[i] = u;
        }
        gboolean better;
        judge(s, &better);
    }
}

static gboolean place_search(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    (void)error;
    int32_t n = c->n;
    Search s = {.c = c, .rng = g_rand_new_with_seed((guint32)(c->opt.seed ^ (c->opt.seed >> 32)))};
    s.units_left = MAX(c->opt.budget_ms, 0) * UNITS_PER_MS;
    s.unit_cost = ((double)n + c->in_off[n]) * (c->nd + 2) + 64;
    s.dev = p->device_of;
    s.seq = p->seq;
    s.best = INFINITY;
    s.start = g_new(double, n + 1);
    s.finish = g_new(double, n + 1);
    s.tdev = g_new(int32_t, n + 1);
    s.tseq = g_new(int32_t, n + 1);
    s.lb = c->lower_bound;
    start_from_heuristics(&s);
    double total = s.units_left;
    g_autofree int32_t *list = g_new(int32_t, n + 1);
    if (!at_bound(&s) && total > 0) {
        g_autofree double *rank = psim__rank_upward(c);
        psim__seq_by_key(c, rank, list);
        iterated_lists(&s, total * 0.4, list);
        list_local_search(&s, total * 0.4, list);
        plan_moves(&s, s.units_left);
    }
    g_rand_free(s.rng);
    g_free(s.start);
    g_free(s.finish);
    g_free(s.tdev);
    g_free(s.tseq);
    return TRUE;
}

const PsimPlacer psim__placer_search = {
    "search",
    "simulation-first refinement of the best heuristic (lists, local moves; --budget-ms, --seed)",
    place_search};
