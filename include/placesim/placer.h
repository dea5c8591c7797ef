/* Placement: algorithms behind one interface (StarPU's sched-policy shape), the constraints they
 * all obey (device requests, kernels, colocation, memory), and partitioning of a placed graph
 * into a Plan (Send/Recv pairs, one Recv per tensor per destination, recv schedule). */
#ifndef PLACESIM_PLACER_H
#define PLACESIM_PLACER_H

#include "placesim/cost.h"
#include "placesim/plan.h"

G_BEGIN_DECLS

typedef struct {
    uint64_t mem_limit;      /* bytes per device; 0: each device's own memory_bytes (0: none) */
    double budget_ms;        /* `search`: its work budget (deterministic, see search.c) */
    uint64_t seed;           /* `search`: random seed */
    gboolean compress;       /* transfers of float32 tensors as 16 bits (placement and plan) */
    PsimRounding compress_rounding; /* how they are cut to 16 bits (default: truncate) */
    const char *placement_file; /* `file`: the placement JSON to read */
    gboolean coarsen;        /* merge chains before placing, refine per node after */
    double recv_margin_us;   /* recv earliest start = ALAP - margin; < 0: the transfer's time */
} PsimPlaceOptions;

/* Defaults: no limit, 1000 ms budget, seed 1, no compression, no coarsening. */
void psim_place_options_init(PsimPlaceOptions *o);

/* What an algorithm produces: a device per node and an execution order. `seq` lists every node
 * once in a global order consistent with the graph; the order on a device is seq filtered to
 * that device. start/finish are the static-order estimate of the one engine (see
 * psim_placement_evaluate); makespan_us its step time. */
typedef struct {
    char *algo;
    int32_t n_nodes, n_devices;
    int32_t *device_of;
    int32_t *seq;
    double *start, *finish;
    double makespan_us;
    double elapsed_ms;       /* wall time of the algorithm, its evaluation included */
    double evaluate_ms;      /* wall time of the first evaluation (the simulated step) in it */
    double cpu_ms;           /* CPU time of the algorithm (its thread) */
    /* Private: the last evaluation's times of every node of the placement's plan, which
     * psim_plan_build takes instead of simulating the same step again. */
    struct PsimPlacementStep *step;
} PsimPlacement;

PsimPlacement *psim_placement_new(int32_t n_nodes, int32_t n_devices, const char *algo);
void psim_placement_free(PsimPlacement *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimPlacement, psim_placement_free)

/* The placement problem: a graph, a cost model over a cluster, and the options. Building it
 * computes the cost table, link times and constraints, and fails (PSIM_ERROR_INPUT, exit 2)
 * when a constraint cannot be met, naming the node and the device. g and m are borrowed. */
typedef struct PsimPlaceCtx PsimPlaceCtx;
PsimPlaceCtx *psim_place_ctx_new(const PsimGraph *g, PsimCostModel *m, const PsimPlaceOptions *o,
                                 GError **error);
void psim_place_ctx_free(PsimPlaceCtx *ctx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimPlaceCtx, psim_place_ctx_free)
/* A lower bound on any placement's makespan: max(critical path at each node's cheapest cost,
 * total cheapest work / devices). */
double psim_place_ctx_lower_bound(const PsimPlaceCtx *ctx);

/* A placement algorithm. place() fills out->device_of and out->seq (start and finish are then
 * filled by the engine). Errors name the node at fault. */
typedef struct {
    const char *name;
    const char *description;
    gboolean (*place)(PsimPlaceCtx *ctx, PsimPlacement *out, GError **error);
} PsimPlacer;

/* The built-in algorithms, NULL-terminated, in a fixed order. */
const PsimPlacer *const *psim_placer_list(int32_t *n);
const PsimPlacer *psim_placer_lookup(const char *name);

/* Runs algorithm `algo` (a name from the registry): places, checks every constraint (memory
 * included: parameters plus peak live activations per device in static order) and evaluates.
 * Returns a new placement (psim_placement_free) or NULL with an error. */
PsimPlacement *psim_place(PsimPlaceCtx *ctx, const char *algo, GError **error);

/* The one engine (until sim/ provides it): simulates p's static order (per device one stream;
 * a node starts at max(device free, inputs arrived); a transfer takes latency + bytes /
 * bandwidth from its producer's finish, once per tensor and destination device), filling
 * p->start, p->finish and p->makespan_us. FALSE with an error if the order deadlocks. */
gboolean psim_placement_evaluate(PsimPlaceCtx *ctx, PsimPlacement *p, GError **error);

/* Placement JSON ("placesim.placement/1"). Loading reads device names for the nodes of g; every
 * node must be listed; an unknown node or device is an error naming it. The `file` algorithm
 * uses this. */
char *psim_placement_to_json(const PsimPlaceCtx *ctx, const PsimPlacement *p);
gboolean psim_placement_save(const PsimPlaceCtx *ctx, const PsimPlacement *p, const char *path,
                             GError **error);
/* The device names a placement file gives the nodes of g, without a cluster to check them
 * against (export writes them into the graph): n_nodes strings and a NULL, or NULL with an
 * error naming the file and the node (unknown, not a string, or missing). Free with
 * g_strfreev. */
char **psim_placement_read_devices(const PsimGraph *g, const char *path, GError **error);
/* Fills device_of (n_nodes entries) from a placement file. */
gboolean psim_placement_read(const PsimPlaceCtx *ctx, const char *path, int32_t *device_of,
                             GError **error);

/* Partitioning: a Plan from a placement. Each data edge that crosses devices becomes a Send on
 * the source and a Recv on the destination, one Recv per (tensor, destination device) shared by
 * every consumer there; a crossing control edge becomes a zero-byte pair. Send and Recv do no
 * compute: they occupy no stream, and a Recv's transfer starts when its Send is done (and its
 * gate, below, has finished). The plan's times are the simulator's (psim_sim_run, static
 * order): one model of a step, so the makespan a placer reports is `placesim sim`'s step time
 * for the plan. Recv scheduling (TF's scheduler.cc) runs over the simulated step: ALAP starts
 * from its durations, earliest_start = ALAP - margin when that is after the simulated start
 * (else 0), priority = slack, and a held Recv waits for the node of its device that finishes
 * last by earliest_start in the ALAP schedule (t->after). Gates or priorities the simulator
 * finds slower than the plain step are dropped. Node ids 0..n-1 of the plan graph are those of
 * g; Send/Recv follow. */
PsimPlan *psim_plan_build(PsimPlaceCtx *ctx, const PsimPlacement *p, GError **error);

/* Counts in a plan. */
int32_t psim_plan_n_sends(const PsimPlan *p);

G_END_DECLS

#endif
