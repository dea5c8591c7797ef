/* The Timeline: what one step did (simulated or measured), per node and per transfer, on one
 * clock in microseconds from the step's start. The simulator and the executor both write it, so
 * the two compare per node, per device, per transfer. */
#ifndef PLACESIM_TIMELINE_H
#define PLACESIM_TIMELINE_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef struct {
    const char *name;   /* node name (owned by the timeline) */
    const char *op;
    int32_t node;       /* node id in the plan's graph, or -1 */
    int32_t device;
    int32_t stream;
    double start, end;
} PsimTimelineOp;

typedef struct {
    const char *name;   /* the Recv node's name */
    const char *key;    /* rendezvous key */
    int32_t transfer;   /* index in the plan's transfers */
    int32_t src, dst;   /* devices */
    double start, end;
    uint64_t bytes;
} PsimTimelineXfer;

typedef struct PsimTimeline {
    char *graph;            /* graph name */
    char *kind;             /* "sim" or "run" */
    int32_t n_devices;
    char **devices;
    GArray *ops;            /* PsimTimelineOp */
    GArray *xfers;          /* PsimTimelineXfer */
    double step_time_us;
    double critical_path_us;
    uint64_t *peak_memory;  /* per device, bytes */
    GStringChunk *strings;
} PsimTimeline;

/* An empty timeline; free with psim_timeline_free. */
PsimTimeline *psim_timeline_new(const char *graph, const char *kind, int32_t n_devices,
                                const char *const *devices);
void psim_timeline_free(PsimTimeline *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimTimeline, psim_timeline_free)
void psim_timeline_op_add(PsimTimeline *t, const char *name, const char *op, int32_t node,
                          int32_t device, int32_t stream, double start, double end);
void psim_timeline_xfer_add(PsimTimeline *t, const char *name, const char *key, int32_t transfer,
                            int32_t src, int32_t dst, double start, double end, uint64_t bytes);

G_END_DECLS

#endif
