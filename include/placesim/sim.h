/* The discrete-event simulator of a Plan: compute streams per device, links as channels, memory
 * per device. It runs the same Plan the executor runs and emits the same Timeline type.
 *
 * Model (docs/sim.md has the details):
 * - A node runs on one compute stream of its device for its cost from the cost model. In
 *   `static` order each device issues its nodes in the plan's order (in-order issue to its
 *   streams); in `dynamic` order a ready queue picks the ready node of lowest plan priority.
 * - Send and Recv nodes use no compute stream. A Send is done when its input is; its transfer is
 *   then requested. A transfer starts at max(request, the Recv's earliest start, link free):
 *   a shared link carries one transfer at a time at full bandwidth, waiting transfers go by recv
 *   priority (then request time); an `independent` link serves every transfer at once. A
 *   transfer occupies its link for bytes/bandwidth and arrives latency later (latency counted
 *   once per transfer). The Recv is done when the last byte arrives.
 * - Memory: a node's outputs are allocated when it starts (a Recv's when its transfer starts)
 *   and freed when their last consumer is done (a Send's when its transfer is done); parameters
 *   (Const/PARAMETER nodes) are resident from the start. Graph outputs are kept.
 * - Deterministic: equal inputs give byte-identical timelines. */
#ifndef PLACESIM_SIM_H
#define PLACESIM_SIM_H

#include "placesim/cost.h"
#include "placesim/plan.h"
#include "placesim/timeline.h"

G_BEGIN_DECLS

typedef enum {
    PSIM_ORDER_STATIC,  /* follow the plan's order on each device */
    PSIM_ORDER_DYNAMIC, /* ready queue ordered by the plan's priority */
} PsimOrder;

/* "static" / "dynamic"; returns FALSE for anything else. */
gboolean psim_order_from_name(const char *name, PsimOrder *out);

typedef struct {
    PsimOrder order;
    int32_t gpu_streams;   /* compute streams per GPU device (0: the cluster's n_streams) */
    gboolean no_timeline;  /* skip recording (faster; result figures still computed) */
    /* Optional, n_nodes of the plan graph each: every node's start and end (a Recv's: its
     * transfer's start and arrival; a Send's: when its input was done), for callers that
     * schedule around the simulated step (the partitioner's ALAP pass). */
    double *node_start, *node_end;
} PsimSimOptions;

typedef struct {
    double step_time_us;
    /* The graph's critical path: its longest chain of node costs and transfer times, devices
     * and links never busy; a lower bound of the step time. The same figure as the trace's
     * and the SQLite run's critical_path_us and inspect's (docs/sim.md). */
    double critical_path_us;
    double lower_bound_us;    /* = critical_path_us (kept for its readers) */
    int64_t events;           /* events processed */
    int32_t n_devices;
    uint64_t *peak_memory;    /* per plan device, bytes */
    /* First point where a device exceeded its memory capacity, or over_device = -1. */
    int32_t over_device;
    int32_t over_node;
    double over_time_us;
    uint64_t over_bytes;
    /* The schedule's binding chain: the nodes, each waited on by the next, that set the step
     * time (its length is step_time_us, not critical_path_us); node ids of the plan graph,
     * first to last (Recv nodes stand for their transfers). */
    int32_t n_critical;
    int32_t *critical;
} PsimSimResult;

void psim_sim_result_clear(PsimSimResult *r);

/* Simulates one step of plan on cost model m. *timeline (optional) receives the predicted
 * Timeline (free with psim_timeline_free). FALSE with an error if the plan is inconsistent
 * (a node missing from its device's order, a static order that deadlocks: named). */
gboolean psim_sim_run(const PsimPlan *plan, PsimCostModel *m, const PsimSimOptions *opts,
                      PsimSimResult *res, PsimTimeline **timeline, GError **error);

/* A placement to simulate as its plan would run, without building the plan: the graph's nodes
 * on cluster devices device_of[v], each device running them in seq order (all n nodes; each
 * device's in its order), cost[v] the node's time on its device. Cross-device inputs become
 * one transfer per (tensor, destination device), in the order psim_plan_build makes them, so
 * the step is the one psim_sim_run gives for the plan with no held Recvs and equal transfer
 * priorities: the placers judge candidates with it. start and finish (optional, n each) get the
 * nodes' times. */
typedef struct {
    const int32_t *device_of;
    const int32_t *seq;
    const double *cost;
    gboolean compress;     /* float32 tensors travel as 16 bits (psim_plan_output_compressed) */
    double *start, *finish;
    /* Optional, n_plan each: the times of every node of the plan psim_plan_build makes of this
     * placement (as psim_sim_run's node_start and node_end give them), its Send and Recv nodes
     * numbered after the graph's nodes, a pair per transfer in the order they are made, then its
     * constant copies (psim_plan_node_replicated; at 0: resident); the step fails when n_plan is
     * not their count. */
    double *plan_start, *plan_end;
    int32_t n_plan;
    /* Optional: the same times when their count is not known beforehand: *plan_times gets a new
     * array of 2 x *n_plan_out (the starts, then the ends; free with g_free). */
    double **plan_times;
    int32_t *n_plan_out;
    /* Optional, per cluster device: memory limits in bytes (0: none) that result->over_* are
     * reported against, instead of each device's memory_bytes. */
    const uint64_t *capacity;
    /* Optional: the step's figures (step time, peak memory per cluster device, the first point
     * over capacity); free its contents with psim_sim_result_clear. */
    PsimSimResult *result;
} PsimSimPlacement;

/* The step time of placement pl of g (static order), or -1 with an error when it deadlocks or a
 * cost is not finite. */
double psim_sim_placement_step(const PsimGraph *g, PsimCostModel *m, const PsimSimPlacement *pl,
                               GError **error);

/* ---- Incremental engine for list-scheduling placers (greedy) ----
 * Nodes of a graph (no Send/Recv yet) are committed one at a time, each after its
 * predecessors, appending to its device's stream; probe asks when a node would finish on a
 * device given what is committed, counting its inputs' transfers on the links. Placer
 * estimates and simulated times thus come from one model. */
typedef struct PsimSimEngine PsimSimEngine;

/* cost: optional n_nodes x n_devices table (psim_cost_table); NULL computes on demand. Both g
 * and m are borrowed. Free with psim_sim_engine_free. */
PsimSimEngine *psim_sim_engine_new(const PsimGraph *g, PsimCostModel *m, const double *cost);
void psim_sim_engine_free(PsimSimEngine *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimSimEngine, psim_sim_engine_free)
/* Earliest finish of node on device (+inf if infeasible); *start (optional) its start. */
double psim_sim_engine_probe(PsimSimEngine *e, int32_t node, int32_t device, double *start);
/* Commits node to device at its probed start; returns its finish. */
double psim_sim_engine_commit(PsimSimEngine *e, int32_t node, int32_t device);
/* Finish time of a committed node, or -1. */
double psim_sim_engine_finish(const PsimSimEngine *e, int32_t node);
double psim_sim_engine_makespan(const PsimSimEngine *e);

G_END_DECLS

#endif
