/* Plots through gnuplot, run as a process with the script on its standard input: the Gantt
 * chart of a timeline (devices' streams and links as rows). */
#include <gio/gio.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/timeline.h"

gboolean psim_gnuplot_run(const char *script, GError **error)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GSubprocess) p = g_subprocess_new(G_SUBPROCESS_FLAGS_STDIN_PIPE |
                                                    G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
                                                    G_SUBPROCESS_FLAGS_STDERR_PIPE,
                                                &err, "gnuplot", NULL);
    if (!p) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "cannot run gnuplot (install the gnuplot-nox package): %s", err->message);
        return FALSE;
    }
    g_autofree char *errout = NULL;
    if (!g_subprocess_communicate_utf8(p, script, NULL, NULL, &errout, &err)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "gnuplot: %s", err->message);
        return FALSE;
    }
    if (!g_subprocess_get_if_exited(p) || g_subprocess_get_exit_status(p) != 0) {
        g_strstrip(errout);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "gnuplot failed: %s",
                    errout && *errout ? errout : "(no message)");
        return FALSE;
    }
    return TRUE;
}

/* Distinct, stable colours per op type. */
static guint32 op_colour(const char *op)
{
    static const guint32 palette[] = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                      0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0x86bcb6};
    return palette[g_str_hash(op) % G_N_ELEMENTS(palette)];
}

/* The gnuplot terminal line for an output name, or NULL if the extension is unknown. */
char *psim__gnuplot_terminal(const char *path, int width, int height, GError **error)
{
    if (strchr(path, '\'') || strchr(path, '\n')) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: plot file names may not contain quotes", path);
        return NULL;
    }
    if (g_str_has_suffix(path, ".png"))
        return g_strdup_printf("set terminal pngcairo size %d,%d font ',9'\nset output '%s'\n", width, height, path);
    if (g_str_has_suffix(path, ".svg"))
        return g_strdup_printf("set terminal svg size %d,%d font ',9' dynamic\nset output '%s'\n", width, height, path);
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: plots are written as .png or .svg", path);
    return NULL;
}

#define MAX_BOXES 200000

/* Appends the commands that plot t's Gantt chart (ytics, ranges, the data inline) to s.
 * xmax > 0 fixes the time axis. Returns the row count (0: nothing to plot). */
static int32_t gantt_commands(GString *s, const PsimTimeline *t, const char *title, double xmax)
{
    int32_t nd = t->n_devices;
    g_autofree uint32_t *streams = g_new0(uint32_t, nd + 1);
    for (guint i = 0; i < t->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        if (o->device >= 0 && o->device < nd)
            streams[o->device] |= 1u << MIN(MAX(o->stream, 0), 31);
    }
    /* (src << 32 | dst) -> row + 1, for the pairs that carry transfers (not nd^2). */
    g_autoptr(GHashTable) link_row = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
    g_autofree int32_t *stream_row = g_new(int32_t, (size_t)nd * 32 + 1);
    GString *tics = g_string_new("set ytics (");
    int32_t rows = 0;
    for (int32_t d = 0; d < nd; d++) {
        const char *sn = strstr(t->devices[d], "device:");
        sn = sn ? sn + 7 : t->devices[d];
        int n_str = __builtin_popcount(streams[d]);
        for (int k = 0; k < 32; k++) {
            stream_row[d * 32 + k] = -1;
            if (streams[d] >> k & 1u) {
                stream_row[d * 32 + k] = rows;
                if (n_str > 1)
                    g_string_append_printf(tics, "%s\"%s s%d\" %d", rows ? ", " : "", sn, k, rows);
                else
                    g_string_append_printf(tics, "%s\"%s\" %d", rows ? ", " : "", sn, rows);
                rows++;
            }
        }
    }
    for (guint i = 0; i < t->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        gint64 li = (gint64)(((guint64)(guint32)x->src << 32) | (guint32)x->dst);
        if (x->src < 0 || x->dst < 0 || x->src >= nd || x->dst >= nd ||
            g_hash_table_contains(link_row, &li))
            continue;
        g_hash_table_insert(link_row, g_memdup2(&li, sizeof li), GINT_TO_POINTER(rows + 1));
        const char *a = strstr(t->devices[x->src], "device:"), *b = strstr(t->devices[x->dst], "device:");
        g_string_append_printf(tics, "%s\"%s→%s\" %d", rows ? ", " : "", a ? a + 7 : t->devices[x->src],
                               b ? b + 7 : t->devices[x->dst], rows);
        rows++;
    }
    g_string_append(tics, ")\n");
    if (rows == 0) {
        g_string_free(tics, TRUE);
        return 0;
    }
    g_autofree char *safe_title = g_strdup(title ? title : t->graph);
    g_strdelimit(safe_title, "\"\\\n", ' ');
    guint n_boxes = t->ops->len + t->xfers->len;
    g_string_append_printf(s, "set title \"%s%s\" noenhanced\n", safe_title,
                           n_boxes > MAX_BOXES ? " (first 200000 boxes)" : "");
    g_string_append(s, "set xlabel 'time (us)'\nset ylabel ''\nunset key\nset grid x\nset border 3\n"
                       "set style fill solid 0.9 border lc rgb 'white'\nunset logscale\nunset label\n");
    g_string_append_printf(s, "set yrange [%d.6:-0.6]\n", rows - 1);
    g_string_append(s, "set ytics noenhanced nomirror\n");
    g_string_append(s, tics->str);
    g_string_free(tics, TRUE);
    double xm = xmax > 0 ? xmax : t->step_time_us;
    /* Small timelines get node names on their boxes. */
    if (t->ops->len <= 60) {
        for (guint i = 0; i < t->ops->len; i++) {
            const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
            /* Only boxes wide enough to hold a name. */
            if (o->device < 0 || o->device >= nd || o->end - o->start < 0.06 * (xm > 0 ? xm : 1))
                continue;
            g_autofree char *nm = g_strdup(o->name);
            g_strdelimit(nm, "\"\\\n'", '_');
            g_string_append_printf(s, "set label \"%s\" at %.6g,%d center front noenhanced font ',8' tc rgb 'white'\n",
                                   nm, (o->start + o->end) / 2,
                                   stream_row[o->device * 32 + MIN(MAX(o->stream, 0), 31)]);
        }
    }
    g_string_append_printf(s, "set xrange [0:%.6g]\n", xm > 0 ? xm * 1.02 : 1);
    g_string_append(s, "plot '-' using 1:2:3:4:5:6:7 with boxxyerror lc rgb variable\n");
    guint written = 0;
    for (guint i = 0; i < t->ops->len && written < MAX_BOXES; i++, written++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        if (o->device < 0 || o->device >= nd)
            continue;
        int32_t r = stream_row[o->device * 32 + MIN(MAX(o->stream, 0), 31)];
        g_string_append_printf(s, "%.6g %d %.6g %.6g %.2f %.2f %u\n", (o->start + o->end) / 2, r,
                               o->start, o->end, r - 0.4, r + 0.4, op_colour(o->op));
    }
    for (guint i = 0; i < t->xfers->len && written < MAX_BOXES; i++, written++) {
        const PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        if (x->src < 0 || x->dst < 0 || x->src >= nd || x->dst >= nd)
            continue;
        gint64 li = (gint64)(((guint64)(guint32)x->src << 32) | (guint32)x->dst);
        int32_t r = GPOINTER_TO_INT(g_hash_table_lookup(link_row, &li)) - 1;
        g_string_append_printf(s, "%.6g %d %.6g %.6g %.2f %.2f %u\n", (x->start + x->end) / 2, r,
                               x->start, x->end, r - 0.3, r + 0.3, 0x888888u);
    }
    g_string_append(s, "e\n");
    return rows;
}

static gboolean write_plot(GString *s, const char *path, GError **error)
{
    gboolean ok = psim_gnuplot_run(s->str, error);
    if (ok && !g_file_test(path, G_FILE_TEST_EXISTS)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: gnuplot wrote nothing", path);
        return FALSE;
    }
    return ok;
}

gboolean psim_timeline_plot_gantt(const PsimTimeline *t, const char *path, const char *title,
                                  GError **error)
{
    g_autoptr(GString) body = g_string_new(NULL);
    int32_t rows = gantt_commands(body, t, title, 0);
    if (rows == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: the timeline is empty", path);
        return FALSE;
    }
    g_autofree char *term = psim__gnuplot_terminal(path, 1400, CLAMP(120 + rows * 28, 240, 4000), error);
    if (!term)
        return FALSE;
    g_string_prepend(body, term);
    return write_plot(body, path, error);
}

gboolean psim_compare_plot(const PsimTimeline *sim, const PsimTimeline *run, const PsimCompare *c,
                           const char *path, GError **error)
{
    g_autoptr(GString) a = g_string_new(NULL), b = g_string_new(NULL);
    double xmax = MAX(sim->step_time_us, run->step_time_us);
    int32_t ra = gantt_commands(a, sim, "simulated", xmax);
    int32_t rb = gantt_commands(b, run, "measured", xmax);
    if (!ra || !rb) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: a timeline is empty", path);
        return FALSE;
    }
    int rows = MAX(ra, rb);
    g_autofree char *term = psim__gnuplot_terminal(path, 2100, CLAMP(200 + rows * 28, 420, 4000), error);
    if (!term)
        return FALSE;
    g_autoptr(GString) s = g_string_new(term);
    g_string_append(s, "set multiplot layout 1,3\n");
    g_string_append(s, a->str);
    g_string_append(s, b->str);
    /* The scatter: each op's predicted against measured duration, and the diagonal. */
    double lo = 1e300, hi = 0;
    for (int32_t i = 0; i < c->n_rows; i++) {
        double x = MAX(c->rows[i].run_us, 1e-3), y = MAX(c->rows[i].sim_us, 1e-3);
        lo = MIN(lo, MIN(x, y));
        hi = MAX(hi, MAX(x, y));
    }
    if (c->n_rows == 0) {
        lo = 1;
        hi = 10;
    }
    g_string_append_printf(s, "set title 'per-op time: predicted vs measured (step error %+.1f%%)'\n"
                              "unset ytics\nset ytics auto\nset xtics auto\nset grid xtics ytics\nset border 3\n"
                              "set logscale xy\nset xlabel 'measured (us)'\nset ylabel 'predicted (us)'\n"
                              "set xrange [%.6g:%.6g]\nset yrange [%.6g:%.6g]\nunset key\n",
                           c->error_pct, lo / 1.5, hi * 1.5, lo / 1.5, hi * 1.5);
    g_string_append(s, "plot x with lines lc rgb '#999999', '-' using 1:2 with points pt 7 ps 0.6 lc rgb '#4e79a7'\n");
    for (int32_t i = 0; i < c->n_rows; i++)
        g_string_append_printf(s, "%.6g %.6g\n", MAX(c->rows[i].run_us, 1e-3), MAX(c->rows[i].sim_us, 1e-3));
    g_string_append(s, "e\nunset multiplot\n");
    return write_plot(s, path, error);
}
