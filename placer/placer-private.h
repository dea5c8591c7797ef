/* Internals of the placer: the placement problem as a weighted DAG that every algorithm reads
 * (so a coarsened problem is just another one), the static-order engine, random numbers. */
#ifndef PLACESIM_PLACER_PRIVATE_H
#define PLACESIM_PLACER_PRIVATE_H

#include <math.h>
#include <time.h>

#include "placesim/placer.h"

struct PsimPlaceCtx {
    const PsimGraph *g;      /* NULL for a coarsened problem */
    PsimCostModel *model;
    const PsimCluster *cluster;
    PsimPlaceOptions opt;
    int32_t n, nd;
    /* Devices with identical costs share a class; cost[v * n_cls + cls_of[d]]. */
    int32_t n_cls;
    int32_t *cls_of;
    double *cost;
    double *min_cost;        /* per node: cheapest feasible cost */
    double *mean_cost;       /* per node: mean over feasible devices */
    /* Edges (unique per producer/consumer pair; bytes = the largest tensor sent, after
     * compression; 0 for control-only edges), CSR both ways. */
    int32_t *in_off, *in_src;
    uint64_t *in_bytes;
    int32_t *out_off, *out_dst;
    uint64_t *out_bytes;
    int32_t *topo, *topo_pos;
    /* Links: time(a, b, bytes) = lat + bytes * inv_bw, from row link_row[a] of lat and inv_bw
     * (nd entries each); zero on a device itself. Row 0 is the default link's, shared by every
     * device none of whose links differ from it (psim_cost_link_from_own), so that a cluster
     * of many devices and few links costs nd per row, not nd^2. */
    int32_t *link_row;
    double *lat, *inv_bw;
    double mean_lat, mean_inv_bw; /* over distinct ordered pairs */
    /* Links the cost model has measured timings for (psim_link_time) replace lat and inv_bw:
     * NULL when none has, else an entry per lat entry (NULL: lat and inv_bw hold). */
    const PsimLinkCurve **curve;
    /* Feasibility: feas[v] < 0: every device; else masks[feas[v] * nd + d]. */
    int32_t *feas;
    guint8 *masks;
    int32_t n_masks;
    int32_t *fixed;          /* device assigned in the graph, or -1 */
    int32_t *group;          /* colocation group id (dense), -1 when alone */
    int32_t n_groups;
    /* Memory: parameters (resident) and outputs (activations) per node, capacity per device. */
    uint64_t *param_bytes, *out_bytes_total;
    uint64_t *capacity;      /* 0: unlimited */
    /* Coarsening: the node of the fine problem each coarse node stands for is not kept; a
     * coarse problem maps fine -> coarse in members_of. */
    double lower_bound;
    /* A coarse problem (chains merged) borrows the arrays marked shared from its fine one. */
    gboolean shared;
    PsimPlaceCtx *coarse;    /* made on first use when opt.coarsen */
    int32_t *coarse_of;      /* per fine node: its coarse node */
    /* A coarse problem: the fine one and its coarse_of (borrowed), through which its
     * placements are simulated. */
    const PsimPlaceCtx *fine;
    const int32_t *fine_coarse_of;
};

/* The coarse problem of f: chains merged (see context.c); *coarse_of gets n entries. */
PsimPlaceCtx *psim__coarsen(const PsimPlaceCtx *f, int32_t **coarse_of);

static inline double psim__cost(const PsimPlaceCtx *c, int32_t v, int32_t d)
{
    return c->cost[(size_t)v * c->n_cls + c->cls_of[d]];
}

static inline gboolean psim__feasible(const PsimPlaceCtx *c, int32_t v, int32_t d)
{
    return c->feas[v] < 0 || c->masks[(size_t)c->feas[v] * c->nd + d];
}

static inline double psim__xfer(const PsimPlaceCtx *c, int32_t a, int32_t b, uint64_t bytes)
{
    if (a == b)
        return 0;
    size_t k = (size_t)c->link_row[a] * c->nd + b;
    if (G_UNLIKELY(c->curve != NULL) && c->curve[k]) {
        PsimLink l = {.curve = c->curve[k]};
        return psim_link_time(&l, bytes);
    }
    return c->lat[k] + (double)bytes * c->inv_bw[k];
}

double psim__xfer_mean_curves(const PsimPlaceCtx *c, uint64_t bytes);

/* Mean transfer time between distinct devices (HEFT's average communication cost). */
static inline double psim__xfer_mean(const PsimPlaceCtx *c, uint64_t bytes)
{
    if (G_UNLIKELY(c->curve != NULL))
        return psim__xfer_mean_curves(c, bytes);
    return c->nd > 1 ? c->mean_lat + (double)bytes * c->mean_inv_bw : 0;
}

/* Time node v's inputs are all on device d, given its producers' devices and finishes. */
static inline double psim__arrival(const PsimPlaceCtx *c, int32_t v, int32_t d, const int32_t *dev,
                                   const double *finish)
{
    double t = 0;
    for (int32_t i = c->in_off[v]; i < c->in_off[v + 1]; i++) {
        int32_t u = c->in_src[i];
        double a = finish[u] + psim__xfer(c, dev[u], d, c->in_bytes[i]);
        if (a > t)
            t = a;
    }
    return t;
}

/* Arrival of all v's inputs on every device at once: arr[d] for d < nd (rows of the link
 * matrices are contiguous, so this vectorizes). */
static inline void psim__arrival_all(const PsimPlaceCtx *c, int32_t v, const int32_t *dev,
                                     const double *finish, double *arr)
{
    int32_t nd = c->nd;
    for (int32_t d = 0; d < nd; d++)
        arr[d] = 0;
    if (G_UNLIKELY(c->curve != NULL)) { /* measured links: one at a time */
        for (int32_t d = 0; d < nd; d++)
            arr[d] = psim__arrival(c, v, d, dev, finish);
        return;
    }
    for (int32_t i = c->in_off[v]; i < c->in_off[v + 1]; i++) {
        int32_t u = c->in_src[i];
        size_t row = (size_t)c->link_row[dev[u]] * nd;
        const double *L = c->lat + row, *B = c->inv_bw + row;
        double f = finish[u], b = (double)c->in_bytes[i], here = arr[dev[u]];
        for (int32_t d = 0; d < nd; d++) {
            double a = f + L[d] + b * B[d];
            arr[d] = a > arr[d] ? a : arr[d];
        }
        /* The shared row holds the default link on the diagonal too: on its own device the
         * input arrives when it is made. */
        arr[dev[u]] = here > f ? here : f;
    }
}

/* Upward rank (HEFT): mean cost plus the longest mean-cost path to an exit. n entries; g_free. */
double *psim__rank_upward(const PsimPlaceCtx *c);
/* Static level with cheapest costs and no communication. */
double *psim__blevel(const PsimPlaceCtx *c);
/* Static top level with cheapest costs (longest path from an entry, excluding the node). */
double *psim__tlevel(const PsimPlaceCtx *c);

/* The step of (device_of, seq) as the simulator runs its plan (psim_sim_placement_step: one
 * model of a step, no second engine here): fills start, finish, returns the step time, or -1
 * if the order deadlocks. A coarse problem is simulated on its fine graph. */
double psim__engine_run(const PsimPlaceCtx *c, const int32_t *device_of, const int32_t *seq,
                        double *start, double *finish);
/* A placement's last evaluation (psim_placement_evaluate): the devices and order it was taken
 * for and the times of every node of its plan (psim_plan_build's numbering), starts then ends,
 * so that building the plan does not simulate the same step again. */
struct PsimPlacementStep {
    const PsimPlaceCtx *ctx;  /* the problem (costs, compression) it was taken with */
    int32_t *device_of, *seq; /* n each */
    double *times;            /* 2 x n_plan */
    int32_t n_plan;
    double makespan_us;
};
/* Its times when they are p's current placement's, taken with problem c, and its plan has
 * n_plan nodes; else NULL. */
const struct PsimPlacementStep *psim__placement_step(const PsimPlacement *p, const PsimPlaceCtx *c,
                                                     int32_t n_plan);

/* The same step of a fine problem, also giving every node of its plan (psim_plan_build's
 * numbering: n_plan nodes, Send and Recv after the graph's) its times; -1 with an error. */
double psim__engine_run_plan(const PsimPlaceCtx *c, const int32_t *device_of, const int32_t *seq,
                             double *start, double *finish, double *plan_start, double *plan_end,
                             int32_t n_plan, GError **error);

/* Sorts nodes by start, then finish, then topological position into seq. */
void psim__seq_from_start(const PsimPlaceCtx *c, const double *start, const double *finish,
                          int32_t *seq);

/* A list order: Kahn's algorithm taking the ready node with the largest key first (ties by
 * topological position). seq gets n ids. */
void psim__seq_by_key(const PsimPlaceCtx *c, const double *key, int32_t *seq);

/* List scheduling with insertion (HEFT's placement step) of nodes in `list` order (which must
 * be topological): each node goes to the feasible device where it finishes first, using idle
 * gaps. Respects groups, fixed devices, and when `fixed_dev` is not NULL, those devices.
 * Fills dev, start, finish. rng (optional) breaks exact ties at random. */
void psim__list_insertion(const PsimPlaceCtx *c, const int32_t *list, const int32_t *fixed_dev,
                          int32_t *dev, double *start, double *finish, GRand *rng);

/* Checks memory (parameters plus peak live activations in static order) against capacities.
 * FALSE with an error naming the device, the node and the time when over. */
gboolean psim__memory_check(const PsimPlaceCtx *c, const PsimPlacement *p, GError **error);

/* Registry entries defined in the algorithm files. */
extern const PsimPlacer psim__placer_greedy, psim__placer_heft, psim__placer_etf,
    psim__placer_metf, psim__placer_msct, psim__placer_mtopo, psim__placer_single,
    psim__placer_round_robin, psim__placer_file, psim__placer_search;

/* The group-aware device choice helpers: the device already taken by v's group, or -1. */
static inline int32_t psim__group_device(const PsimPlaceCtx *c, const int32_t *gdev, int32_t v)
{
    if (c->fixed[v] >= 0)
        return c->fixed[v];
    return c->group[v] >= 0 ? gdev[c->group[v]] : -1;
}

/* Monotonic wall clock in milliseconds. */
static inline double psim__now_ms(void) { return (double)g_get_monotonic_time() / 1e3; }

/* CPU time of the calling thread in milliseconds (the machine may be shared and loaded). */
static inline double psim__cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A binary heap of node ids ordered by key (ascending, or descending when max), ties by
 * topological position: the ready lists of the list schedulers. a holds n_nodes entries. */
typedef struct {
    int32_t *a;
    int32_t n;
    const double *key;
    const int32_t *pos;
    gboolean max;
} PsimNodeHeap;
void psim__node_heap_push(PsimNodeHeap *h, int32_t v);
int32_t psim__node_heap_pop(PsimNodeHeap *h);

#endif
