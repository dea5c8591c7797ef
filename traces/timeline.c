/* The Timeline container, shared by the simulator (predicted) and the executor (measured). */
#include <string.h>

#include "placesim/timeline.h"

PsimTimeline *psim_timeline_new(const char *graph, const char *kind, int32_t n_devices,
                                const char *const *devices)
{
    PsimTimeline *t = g_new0(PsimTimeline, 1);
    t->graph = g_strdup(graph ? graph : "graph");
    t->kind = g_strdup(kind ? kind : "sim");
    t->n_devices = n_devices;
    t->devices = g_new0(char *, (gsize)n_devices + 1);
    for (int32_t i = 0; i < n_devices; i++)
        t->devices[i] = g_strdup(devices[i]);
    t->ops = g_array_new(FALSE, FALSE, sizeof(PsimTimelineOp));
    t->xfers = g_array_new(FALSE, FALSE, sizeof(PsimTimelineXfer));
    t->peak_memory = g_new0(uint64_t, n_devices ? n_devices : 1);
    t->strings = g_string_chunk_new(256 * 1024);
    return t;
}

void psim_timeline_free(PsimTimeline *t)
{
    if (!t)
        return;
    g_free(t->graph);
    g_free(t->kind);
    g_strfreev(t->devices);
    g_array_free(t->ops, TRUE);
    g_array_free(t->xfers, TRUE);
    g_free(t->peak_memory);
    g_string_chunk_free(t->strings);
    g_free(t);
}

void psim_timeline_op_add(PsimTimeline *t, const char *name, const char *op, int32_t node,
                          int32_t device, int32_t stream, double start, double end)
{
    /* Node names are unique: copy without the dedup hash; op names repeat: intern them. */
    PsimTimelineOp o = {.name = g_string_chunk_insert(t->strings, name ? name : ""),
                        .op = g_string_chunk_insert_const(t->strings, op ? op : ""),
                        .node = node, .device = device, .stream = stream, .start = start, .end = end,
                        .db_row = -1};
    g_array_append_val(t->ops, o);
}

void psim_timeline_op_set_cost(PsimTimeline *t, guint i, const char *source, int64_t db_row)
{
    g_return_if_fail(i < t->ops->len);
    PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
    o->cost_source = source ? g_string_chunk_insert_const(t->strings, source) : NULL;
    o->db_row = db_row;
}

void psim_timeline_xfer_add(PsimTimeline *t, const char *name, const char *key, int32_t transfer,
                            int32_t src, int32_t dst, double start, double end, uint64_t bytes)
{
    PsimTimelineXfer x = {.name = g_string_chunk_insert(t->strings, name ? name : ""),
                          .key = g_string_chunk_insert(t->strings, key ? key : ""),
                          .transfer = transfer, .src = src, .dst = dst, .start = start, .end = end,
                          .bytes = bytes};
    g_array_append_val(t->xfers, x);
}

void psim_timeline_append(PsimTimeline *t, const PsimTimeline *src, double offset_us)
{
    for (guint i = 0; i < src->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(src->ops, PsimTimelineOp, i);
        psim_timeline_op_add(t, o->name, o->op, o->node, o->device, o->stream, o->start + offset_us,
                             o->end + offset_us);
    }
    for (guint i = 0; i < src->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(src->xfers, PsimTimelineXfer, i);
        psim_timeline_xfer_add(t, x->name, x->key, x->transfer, x->src, x->dst, x->start + offset_us,
                               x->end + offset_us, x->bytes);
    }
    for (int32_t d = 0; d < t->n_devices && d < src->n_devices; d++)
        t->peak_memory[d] = MAX(t->peak_memory[d], src->peak_memory[d]);
}
