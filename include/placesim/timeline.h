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
    const char *cost_source; /* where a simulated op's time came from (psim_cost_source_name), or NULL */
    int64_t db_row;          /* the cost DB's kernels rowid when measured, else -1 */
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
/* Records where op i's time came from ("measured", "estimated"...: psim_cost_source_name) and the
 * cost DB row that gave it (-1: none); the Chrome trace shows both in the op's args. */
void psim_timeline_op_set_cost(PsimTimeline *t, guint i, const char *source, int64_t db_row);
void psim_timeline_xfer_add(PsimTimeline *t, const char *name, const char *key, int32_t transfer,
                            int32_t src, int32_t dst, double start, double end, uint64_t bytes);
/* Appends src's ops and transfers to t, each shifted by offset_us (a step placed on another
 * step's clock); each device's peak memory the larger of the two. */
void psim_timeline_append(PsimTimeline *t, const PsimTimeline *src, double offset_us);

/* Chrome Trace Event Format (readable by Perfetto and chrome://tracing): one pid per device,
 * one tid per compute stream and per link ("to DEV" on the sender, "from DEV" on the receiver),
 * "X" slices for ops (cat "op") and transfers (cat "transfer"), flow events from each send to
 * its receive, and the step's figures under otherData.placesim. g_free the string. */
char *psim_timeline_to_chrome(const PsimTimeline *t, gsize *len);
gboolean psim_timeline_save_chrome(const PsimTimeline *t, const char *path, GError **error);
/* Reads a trace written by psim_timeline_save_chrome (sim or run); errors name the file. */
PsimTimeline *psim_timeline_load_chrome(const char *path, GError **error);
PsimTimeline *psim_timeline_parse_chrome(const char *path, const char *data, gsize len,
                                         GError **error);

/* Appends the timeline to an SQLite database (tables runs, run_devices, ops, transfers; see
 * docs/formats.md), creating them if needed; label names the run (graph/algo). Returns the new
 * run id, or -1 with an error. */
int64_t psim_timeline_save_sqlite(const PsimTimeline *t, const char *path, const char *label,
                                  GError **error);

/* A Gantt chart through gnuplot (run as a process): devices' streams and links as rows. The
 * format comes from the file name (.png or .svg). */
gboolean psim_timeline_plot_gantt(const PsimTimeline *t, const char *path, const char *title,
                                  GError **error);
/* Simulated vs measured, matched per node name. */
typedef struct {
    const char *name; /* owned by the sim timeline */
    const char *op;
    int32_t device;
    double sim_us, run_us; /* durations */
} PsimCompareRow;

typedef struct {
    double sim_step_us, run_step_us;
    double error_pct;            /* 100 * (sim - run) / run */
    int32_t n_matched, n_only_sim, n_only_run;
    int32_t n_rows;
    PsimCompareRow *rows;        /* matched ops, largest absolute error first */
    double median_abs_op_error_pct; /* over ops of at least 10 us measured */
    double sum_sim_us, sum_run_us;  /* total op time */
} PsimCompare;

/* Compares two timelines of the same plan (ops matched by name). */
gboolean psim_timeline_compare(const PsimTimeline *sim, const PsimTimeline *run, PsimCompare *out,
                               GError **error);
void psim_compare_clear(PsimCompare *c);
/* One image: the two Gantt charts side by side on one time scale, and the per-op scatter of
 * predicted against measured durations (log-log). */
gboolean psim_compare_plot(const PsimTimeline *sim, const PsimTimeline *run, const PsimCompare *c,
                           const char *path, GError **error);

/* Runs gnuplot with `script` on stdin; errors carry gnuplot's message. */
gboolean psim_gnuplot_run(const char *script, GError **error);

G_END_DECLS

#endif
