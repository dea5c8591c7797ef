/* `search`: simulation-first refinement. It starts from the best of the list heuristics and
 * improves it, every candidate judged by the simulator's step time (psim__engine_run):
 *  0. where the devices are identical and transfers free (the STG setting), a depth-first
 *     branch and bound over schedules built in time order (DF/IHS's), searched by limited
 *     discrepancy from the CP/MISF order, with half the budget; when it exhausts its tree the
 *     plan is optimal and the search ends;
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
#include <math.h>
#include <string.h>

#include "placer/placer-private.h"
#include "placesim/sim.h"

/* Work units per millisecond of budget, with an evaluation costing (nodes + edges) x (devices
 * + 2) + 64 units: about the development VM's speed for a decode plus a simulated step
 * (psim_sim_placement_step): at most 1 s of CPU per 1000 ms of budget on the STG set, bench/stg-study.sh. */
#define UNITS_PER_MS 21000.0
/* The share of the budget the branch and bound may take where it applies. */
#define BNB_SHARE 0.5
/* A B&B node costs about (nodes + edges + 16) of these per millisecond on the development VM
 * (a bound is one pass over the graph, no simulation): measured on the STG set. */
#define BNB_UNITS_PER_MS 700000.0

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

/* ---- Phase 0: depth-first branch and bound (in the manner of Kasahara and Narita's DF/IHS)
 * for identical devices and free transfers (the setting of the STG set: P|prec|Cmax). A schedule
 * is built in time order: the device that is free first (the lowest of equals) either starts a
 * ready node, tried in CP/MISF order (longest static level, then most successors), or stays
 * idle until the next node finishes. Devices free at the same time are interchangeable, so the
 * nodes started at one instant go in increasing CP/MISF rank and an idle device ends the
 * instant. A branch is cut when its lower bound (each unscheduled node's earliest start plus its
 * static level; the remaining work spread over the devices from when each is free) reaches the
 * best schedule found. Every improvement is judged by the simulator before it is kept. The
 * search ends when the tree is exhausted (the best is then optimal) or its units run out. */

typedef struct {
    Search *s;
    int32_t n, nd, *order;             /* order: nodes by CP/MISF rank */
    double *w, *bl, *fin, *est, *free_at;
    int32_t *dev, *sched_seq, n_sched, *npred_left;
    double work_left, best;            /* best: the incumbent's makespan */
    gboolean integral, exhausted, limited;
    double units, unit;
    int32_t *tdev;
    double *tstart;
} Bnb;

/* The devices are identical and transfers free: the B&B's model is the simulator's then. */
static gboolean bnb_applies(const PsimPlaceCtx *c)
{
    if (!c->g || c->n_cls != 1 || c->n > 2000 || c->nd < 2 || c->nd > 256)
        return FALSE;
    for (int32_t v = 0; v < c->n; v++)
        if (c->fixed[v] >= 0 || c->group[v] >= 0 || c->feas[v] >= 0 || !isfinite(psim__cost(c, v, 0)))
            return FALSE;
    for (int32_t a = 0; a < c->nd; a++)
        for (int32_t b = 0; b < c->nd; b++)
            if (psim__xfer(c, a, b, UINT64_MAX / 4) != 0)
                return FALSE;
    return TRUE;
}

static double bnb_bound(Bnb *b, double t)
{
    const PsimPlaceCtx *c = b->s->c;
    double lb = 0, spread = b->work_left;
    for (int32_t d = 0; d < b->nd; d++)
        spread += MAX(b->free_at[d], t);
    spread /= b->nd;
    if (b->integral)
        spread = ceil(spread - 1e-9);
    for (int32_t i = 0; i < b->n; i++) {
        int32_t v = c->topo[i];
        if (b->fin[v] >= 0) {
            lb = MAX(lb, b->fin[v]);
            b->est[v] = b->fin[v]; /* as a producer: its finish */
            continue;
        }
        double e = t;
        for (int32_t j = c->in_off[v]; j < c->in_off[v + 1]; j++)
            e = MAX(e, b->est[c->in_src[j]]);
        lb = MAX(lb, e + b->bl[v]);
        b->est[v] = e + b->w[v]; /* earliest finish, as a producer */
    }
    return MAX(lb, spread);
}

/* A complete schedule: judged by the simulator, kept when shorter. */
static void bnb_leaf(Bnb *b)
{
    Search *s = b->s;
    const PsimPlaceCtx *c = s->c;
    double span = 0;
    for (int32_t v = 0; v < b->n; v++)
        span = MAX(span, b->fin[v]);
    if (span >= b->best)
        return;
    for (int32_t v = 0; v < b->n; v++) {
        s->tdev[v] = b->dev[v];
        b->tstart[v] = b->fin[v] - b->w[v];
    }
    g_autofree double *fin = g_memdup2(b->fin, sizeof(double) * (b->n + 1));
    psim__seq_from_start(c, b->tstart, fin, s->tseq);
    gboolean better;
    double m = judge(s, &better);
    if (m >= 0)
        b->best = MIN(span, s->best);
}

static void bnb_node(Bnb *b, double last_t, int32_t last_rank, int32_t disc)
{
    const PsimPlaceCtx *c = b->s->c;
    if (b->units <= 0) {
        b->exhausted = FALSE;
        return;
    }
    b->units -= b->unit;
    if (b->n_sched == b->n) {
        bnb_leaf(b);
        return;
    }
    int32_t p = 0;
    for (int32_t d = 1; d < b->nd; d++)
        if (b->free_at[d] < b->free_at[p])
            p = d;
    double t = b->free_at[p];
    if (bnb_bound(b, t) >= b->best - 1e-9)
        return;
    gboolean same = t == last_t;
    int32_t choice = 0; /* branches taken here so far: each after the first is a discrepancy */
    /* Start a ready node at t, in CP/MISF order (after last_rank within one instant). */
    for (int32_t i = same ? last_rank + 1 : 0; i < b->n; i++) {
        int32_t v = b->order[i];
        if (b->fin[v] >= 0 || b->npred_left[v] > 0)
            continue;
        gboolean ready = TRUE;
        for (int32_t j = c->in_off[v]; j < c->in_off[v + 1] && ready; j++)
            ready = b->fin[c->in_src[j]] <= t;
        if (!ready)
            continue;
        if (choice > 0 && disc == 0) {
            b->limited = TRUE;
            return;
        }
        int32_t left = choice > 0 ? disc - 1 : disc;
        choice++;
        b->fin[v] = t + b->w[v];
        b->dev[v] = p;
        b->free_at[p] = b->fin[v];
        b->work_left -= b->w[v];
        b->n_sched++;
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
            b->npred_left[c->out_dst[j]]--;
        bnb_node(b, t, i, left);
        for (int32_t j = c->out_off[v]; j < c->out_off[v + 1]; j++)
            b->npred_left[c->out_dst[j]]++;
        b->n_sched--;
        b->work_left += b->w[v];
        b->free_at[p] = t;
        b->fin[v] = -1;
        if (b->units <= 0)
            return;
    }
    /* Or stay idle until the next node finishes. */
    double next = INFINITY;
    for (int32_t v = 0; v < b->n; v++)
        if (b->fin[v] > t && b->fin[v] < next)
            next = b->fin[v];
    if (isfinite(next)) {
        if (choice > 0 && disc == 0) {
            b->limited = TRUE;
            return;
        }
        b->free_at[p] = next;
        bnb_node(b, t, b->n, choice > 0 ? disc - 1 : disc); /* the instant t is over for the devices free at it */
        b->free_at[p] = t;
    }
}

/* Runs the B&B with `units` of the budget from the incumbent in s; TRUE when the tree was
 * exhausted (s->best is then optimal). */
static gboolean branch_and_bound(Search *s, double units)
{
    PsimPlaceCtx *c = s->c;
    int32_t n = c->n;
    Bnb b = {.s = s, .n = n, .nd = c->nd, .best = s->best, .exhausted = TRUE, .units = units,
             .unit = ((double)n + c->in_off[n] + 16) * UNITS_PER_MS / BNB_UNITS_PER_MS};
    g_autofree double *bl = psim__blevel(c), *w = g_new(double, n + 1), *fin = g_new(double, n + 1),
                      *est = g_new(double, n + 1), *free_at = g_new0(double, c->nd + 1),
                      *tstart = g_new(double, n + 1), *key = g_new(double, n + 1);
    g_autofree int32_t *order = g_new(int32_t, n + 1),
                       *dev = g_new(int32_t, n + 1), *npred = g_new(int32_t, n + 1);
    b.integral = TRUE;
    for (int32_t v = 0; v < n; v++) {
        w[v] = psim__cost(c, v, 0);
        b.integral &= w[v] == floor(w[v]);
        b.work_left += w[v];
        fin[v] = -1;
        npred[v] = c->in_off[v + 1] - c->in_off[v];
        /* CP/MISF: static level, then successors, as one key. */
        key[v] = bl[v] * (n + 1.0) + (c->out_off[v + 1] - c->out_off[v]);
    }
    psim__seq_by_key(c, key, order);
    b.w = w;
    b.bl = bl;
    b.fin = fin;
    b.est = est;
    b.free_at = free_at;
    b.order = order;
    b.dev = dev;
    b.npred_left = npred;
    b.tstart = tstart;
    /* Limited discrepancy search: first the heuristic's own path, then paths that leave it at
     * most once, twice, ...; an iteration that met no limit has searched the whole tree. */
    for (int32_t disc = 0; b.units > 0; disc++) {
        b.limited = FALSE;
        bnb_node(&b, -1, -1, disc);
        if (!b.limited)
            break;
    }
    b.exhausted = b.units > 0 && !b.limited; /* the whole tree was searched */
    s->units_left -= units - MAX(b.units, 0);
    return b.exhausted;
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
    gboolean optimal = FALSE;
    if (!at_bound(&s) && s.units_left > 0 && bnb_applies(c))
        optimal = branch_and_bound(&s, s.units_left * BNB_SHARE);
    double total = s.units_left;
    g_autofree int32_t *list = g_new(int32_t, n + 1);
    if (!optimal && !at_bound(&s) && total > 0) {
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
