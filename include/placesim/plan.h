/* The Plan: what the simulator and the executor both run. A plan is a graph (the placed graph
 * with Send/Recv nodes inserted where edges cross devices) plus, per node, its device, its
 * position and planned start on that device, and a priority; plus the transfers with their
 * rendezvous keys, recv earliest starts and priorities, and compression. Made by placer/,
 * consumed by sim/ and exec/. */
#ifndef PLACESIM_PLAN_H
#define PLACESIM_PLAN_H

#include "placesim/graph.h"

G_BEGIN_DECLS

/* How a compressed float32 crosses as 16 bits (bfloat16: sign, 8 exponent bits, 7 mantissa
 * bits; the low 16 bits arrive zero). For a normal float x and what arrives y:
 * - TRUNCATE (the TF whitepaper's): the low 16 bits are dropped; |y - x| < 2^-7 |x|, y never
 *   larger in magnitude. Inf and quiet NaNs cross as they are; a NaN whose payload lies only in
 *   the low 16 bits arrives as Inf.
 * - RNE: rounded to the nearest bfloat16, ties to even; |y - x| <= 2^-8 |x|, and never farther
 *   from x than TRUNCATE's y. NaN stays NaN (quiet), Inf stays Inf, and a finite float never
 *   becomes Inf: the few above the largest finite bfloat16 saturate to it (as TRUNCATE gives).
 * Subnormal floats keep absolute errors below 2^-133 (TRUNCATE) and at most 2^-134 (RNE). */
typedef enum {
    PSIM_ROUNDING_TRUNCATE = 0,
    PSIM_ROUNDING_RNE,
} PsimRounding;

/* "truncate" or "rne" (static storage). */
const char *psim_rounding_name(PsimRounding r);
/* FALSE when name is neither. */
gboolean psim_rounding_from_name(const char *name, PsimRounding *out);
/* The float32 bits that arrive for `bits` sent compressed with rounding r. */
uint32_t psim_rounding_apply(uint32_t bits, PsimRounding r);
/* TRUE when output k of u crosses devices as 16 bits: a float32 tensor, with compression asked
 * for every transfer (--compress) or by the producer's `_compress: true` attribute. */
gboolean psim_plan_output_compressed(const PsimNode *u, int32_t k, gboolean compress_all);
/* TRUE when u is a constant generator (a Const or Constant with no inputs, not fed): where it
 * feeds a node on another device, that device gets a copy of it ("u/_const_0_on_CPU_1")
 * instead of a Send/Recv pair, so that a constant never crosses devices at every step. Each
 * device's executor evaluates its copy once and holds it as its own constant, as kernels
 * expect of weights (oneDNN's Conv reorders constant weights once; a weight that arrives by a
 * Recv is reordered at every call), and the simulator charges it nothing but its memory. */
gboolean psim_plan_node_replicated(const PsimNode *u);

/* One Send/Recv pair: tensor `port` of the partitioned graph crosses from device src to dst. */
typedef struct {
    int32_t send;          /* Send node id in plan->graph (on src) */
    int32_t recv;          /* Recv node id in plan->graph (on dst) */
    int32_t src, dst;      /* device indices (into plan->devices) */
    PsimPort port;         /* the tensor sent (producer in plan->graph) */
    uint64_t bytes;        /* bytes on the wire (after compression) */
    uint64_t raw_bytes;    /* bytes before compression */
    gboolean control;      /* a control edge: zero bytes */
    gboolean compressed;   /* float32 sent as 16 bits */
    PsimRounding rounding; /* how, when compressed */
    /* Recv scheduling. A held Recv waits for a node of its own device, never for a clock: it
     * starts once node `after` (a compute node on dst, in plan->graph; -1: none, the Recv goes
     * as soon as its Send is done) has finished, as TensorFlow delays a Recv with control
     * dependencies. earliest_start (ALAP - margin, microseconds) is the planned release time
     * that chose `after`: the latest-finishing node of dst to finish by then in the ALAP
     * schedule. Nothing at run time or in the simulator reads it. */
    int32_t after;
    double earliest_start;
    double priority;       /* slack: lower goes first */
    const char *key;       /* rendezvous key "src;dst;tensor" (the step is appended at run) */
} PsimTransfer;

typedef struct PsimPlan {
    PsimGraph *graph;      /* owned: the partitioned graph */
    char *algo;            /* placement algorithm that made it */
    int32_t n_devices;
    char **devices;        /* full device names, index = device id used below */
    int32_t *device_of;    /* per node of graph */
    int32_t *n_order;      /* per device: node count */
    int32_t **order;       /* per device: node ids in execution order */
    double *planned_start; /* per node, microseconds: the simulator's start in the plan's step */
    double *priority;      /* per node: lower first (dynamic order) */
    int32_t n_transfers;
    PsimTransfer *transfers;
    int32_t *transfer_of_recv; /* per node: transfer index if the node is a Recv, else -1 */
    int32_t *copy_of;          /* per node: the generator it copies (psim_plan_node_replicated), else -1 */
    double makespan_us;    /* the simulator's step time of this plan (static order) */
    /* Owned, or NULL: the cluster the plan was made for, as cluster JSON
     * ("placesim.cluster/1"), so that a saved plan can be simulated and run without naming it
     * again. Set by the caller that knows the cluster (placer/ does not). */
    char *cluster_json;
    /* How the plan was partitioned (psim_plan_partition), for a plan file to make it again:
     * the placed graph's nodes are plan nodes 0..n_placed-1 (Send, Recv and constant copies follow), and
     * compression. */
    int32_t n_placed;
    int32_t *seq;          /* owned, n_placed, or NULL: the placement's order of the placed nodes */
    gboolean compress_all;
    PsimRounding rounding;
    /* Owned, or NULL: where the placed graph was read from (a file path or "zoo:NAME"), set by
     * the caller when the graph is that source's graph as read, with nothing changed: a plan
     * file then refers to it (path and SHA-256) instead of holding it. */
    char *graph_source;
    /* With graph_source: the placed graph is that source's graph fused for the plan's cluster
     * (psim_cluster_fuse), which a plan file records so that its reader fuses the source again
     * rather than the file holding the graph. */
    gboolean graph_fused;
} PsimPlan;

/* An empty plan over `graph` (taken) and n_devices named devices; arrays sized and zeroed,
 * device_of filled with -1. Free with psim_plan_free. */
PsimPlan *psim_plan_new(PsimGraph *graph, int32_t n_devices, const char *const *devices);
void psim_plan_free(PsimPlan *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimPlan, psim_plan_free)

/* The placed graph g partitioned on nd devices (device_of: per node of g): g's nodes copied (ids
 * kept, each assigned its device), and for every edge that crosses devices one Send on the
 * producer's device and one Recv on the consumer's, one pair per (tensor, destination device),
 * in the order of the edges (consumers by id, their inputs, then controls); an input edge from
 * a constant generator (psim_plan_node_replicated) gets the generator's copy on the consumer's
 * device instead, one per (generator, device), among the Send/Recv nodes. Send/Recv names use
 * short_names ("u/_send_0_to_CPU_1"); compress_all and rounding as --compress. The plan's
 * orders and schedule are left empty (psim_plan_build fills them, or a plan file). what: the
 * algorithm, for the plan and messages. */
PsimPlan *psim_plan_partition(const PsimGraph *g, const int32_t *device_of, int32_t nd,
                              const char *const *devices, const char *const *short_names,
                              gboolean compress_all, PsimRounding rounding, const char *what,
                              GError **error);

/* Each device's order (plan->order) from the placement's order seq (n_placed entries: copied
 * into plan->seq) and a key per plan node (NULL: none): each device's placed nodes keep seq's
 * order and its Send/Recv nodes are merged in by key (stable: ties by id); where the key
 * decreases along a device's placed nodes, the device's nodes are sorted by (key, seq
 * position), Send/Recv nodes ranked after every placed node. The builder orders by the planned
 * starts, and a plan file stores seq instead of the orders. */
void psim_plan_order_set(PsimPlan *plan, const int32_t *seq, const double *key);

/* The one check of a plan, made by everything that accepts one (the plan loader, the simulator,
 * the executor's psim_plan_exec_new), so that a plan one of them takes the others take too:
 * every node on a device of the plan; each transfer joins one Send on its src to one Recv on its
 * dst, and every Send and Recv belongs to one; no other edge crosses devices; each device's
 * order lists exactly its nodes, once; and the orders cannot deadlock when run as the executor
 * runs them (compute nodes in their order; a Send as soon as its input is done, but the order
 * gets past it only once it has run; a Recv when its transfer arrives). FALSE with an INPUT
 * error naming the node at fault. */
gboolean psim_plan_check(const PsimPlan *p, GError **error);

/* TRUE if g (a graph given beside a plan) is the graph the plan was made from: the same name,
 * and the same nodes by name and op, the plan adding only Send and Recv nodes (a plan stores no
 * hash of its graph). Else an INPUT error naming both: plan_path, and graph_path (NULL: g's
 * source, else its name). */
gboolean psim_plan_check_graph(const PsimPlan *p, const char *plan_path, const PsimGraph *g,
                               const char *graph_path, GError **error);

G_END_DECLS

#endif
