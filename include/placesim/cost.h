/* The one cost model: how long node N takes on device D, and B bytes from D1 to D2, with the
 * source of each answer. Resolution order: a cost annotated in the graph, then a measured row in
 * the cost DB (matching device fingerprint), then an analytic estimate (FLOPs and bytes against
 * the device's calibrated peak rates, plus a launch cost). */
#ifndef PLACESIM_COST_H
#define PLACESIM_COST_H

#include "placesim/cluster.h"
#include "placesim/graph.h"

G_BEGIN_DECLS

typedef enum {
    PSIM_COST_SOURCE_NONE = 0,   /* the node cannot run on the device (cost is +inf) */
    PSIM_COST_SOURCE_ANNOTATION, /* cost_us in the graph file */
    PSIM_COST_SOURCE_MEASURED,   /* a kernel row in the cost DB */
    PSIM_COST_SOURCE_ESTIMATE,   /* analytic */
    PSIM_COST_SOURCE_FREE,       /* no work (sources, Identity, Send): zero */
} PsimCostSource;

const char *psim_cost_source_name(PsimCostSource s);

typedef struct PsimCostDb PsimCostDb;
typedef struct PsimCostModel PsimCostModel;

/* A cost model over cluster c, reading measured rows from db when not NULL (both borrowed:
 * they must outlive the model). Free with psim_cost_model_free. */
PsimCostModel *psim_cost_model_new(const PsimCluster *c, PsimCostDb *db);
void psim_cost_model_free(PsimCostModel *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimCostModel, psim_cost_model_free)
const PsimCluster *psim_cost_model_cluster(const PsimCostModel *m);

/* Microseconds for node n of g on device `device` (cluster index); +inf when it cannot run there
 * (no kernel for the device type, or a Task with no annotation for it). src may be NULL. */
double psim_cost_node(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                      PsimCostSource *src);
/* Microseconds for `bytes` from device a to device b (0 when a == b). */
double psim_cost_transfer(PsimCostModel *m, uint64_t bytes, int32_t a, int32_t b);
/* The whole table for a graph: n_nodes x n_devices, row-major, +inf where infeasible. g_free. */
double *psim_cost_table(PsimCostModel *m, const PsimGraph *g, GError **error);

/* The signature that keys measurements: op, attrs, input dtypes and shapes (not the device);
 * identical nodes share one (StarPU's footprint). g_free. */
char *psim_cost_signature(const PsimGraph *g, const PsimNode *n);

G_END_DECLS

#endif
