/* Importer for the Standard Task Graph Set (Kasahara lab): "n" on the first line, then one line
 * "id cost n_preds pred..." per task, dummy entry 0 and exit n+1 included, and a '#' trailer.
 * Tasks become `Task` nodes t0..t{n+1} whose cost is annotated for any device ("*"); the
 * precedence constraints become data edges carrying zero-byte tensors (STG has no
 * communication costs). */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <string.h>

/* Larger task counts are refused: the set's biggest graphs have 5000 tasks. */
#define STG_MAX_TASKS 10000000

typedef struct {
    const char *path;
    const char *p, *end;
    int64_t line;
} Lexer;

/* Next line (without its newline) into [*ls, *le); FALSE at the end of the data. */
static gboolean next_line(Lexer *lx, const char **ls, const char **le)
{
    if (lx->p >= lx->end)
        return FALSE;
    const char *nl = memchr(lx->p, '\n', (size_t)(lx->end - lx->p));
    *ls = lx->p;
    *le = nl ? nl : lx->end;
    lx->p = nl ? nl + 1 : lx->end;
    lx->line++;
    return TRUE;
}

static const char *skip_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* Reads one non-negative decimal integer; FALSE if there is none or it exceeds `max`. */
static gboolean read_int(const char **pp, const char *end, int64_t max, int64_t *out)
{
    const char *p = skip_blank(*pp, end);
    if (p >= end || !g_ascii_isdigit(*p))
        return FALSE;
    int64_t v = 0;
    while (p < end && g_ascii_isdigit(*p)) {
        v = v * 10 + (*p - '0');
        if (v > max)
            return FALSE;
        p++;
    }
    if (p < end && *p != ' ' && *p != '\t' && *p != '\r')
        return FALSE;
    *pp = p;
    *out = v;
    return TRUE;
}

static gboolean line_blank(const char *p, const char *end)
{
    return skip_blank(p, end) == end;
}

PsimGraph *psim_import_stg(const char *path, const char *data, gsize len, GError **error)
{
    g_return_val_if_fail(data || len == 0, NULL);
    Lexer lx = {.path = path, .p = data, .end = data + len};
    const char *ls, *le;
    int64_t n = -1;
    while (next_line(&lx, &ls, &le)) {
        if (line_blank(ls, le))
            continue;
        if (!read_int(&ls, le, STG_MAX_TASKS, &n) || !line_blank(ls, le)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": expected the task count "
                             "(an integer up to %d) alone on the first line", lx.line, STG_MAX_TASKS);
            return NULL;
        }
        break;
    }
    if (n < 0) {
        psim__error_file(error, path, "empty file: expected the task count on the first line");
        return NULL;
    }
    /* Every task needs a line of at least three numbers: refuse counts the file cannot hold
     * before allocating for them. */
    int64_t n_tasks = n + 2;
    if ((gsize)n_tasks > len / 6 + 1) {
        psim__error_file(error, path, "the task count %" G_GINT64_FORMAT " is larger than the "
                         "file can hold (%zu bytes)", n, (size_t)len);
        return NULL;
    }

    g_autofree char *base = g_path_get_basename(path ? path : "stg");
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
        *dot = '\0';
    g_autoptr(PsimGraph) g = psim_graph_new(base);
    psim_graph_set_source(g, path);

    for (int64_t id = 0; id < n_tasks; id++) {
        gboolean got = FALSE;
        while (next_line(&lx, &ls, &le)) {
            if (!line_blank(ls, le)) {
                got = TRUE;
                break;
            }
        }
        if (!got || *skip_blank(ls, le) == '#') {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": expected %" G_GINT64_FORMAT
                             " task lines (n + 2 with the dummy entry and exit), found %" G_GINT64_FORMAT,
                             lx.line, n_tasks, id);
            return NULL;
        }
        int64_t tid, cost, n_preds;
        if (!read_int(&ls, le, n_tasks - 1, &tid) || tid != id) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": expected task id %" G_GINT64_FORMAT
                             " (tasks are listed in order 0..%" G_GINT64_FORMAT ")",
                             lx.line, id, n_tasks - 1);
            return NULL;
        }
        char name[32];
        g_snprintf(name, sizeof name, "t%" G_GINT64_FORMAT, id);
        if (!read_int(&ls, le, (int64_t)PSIM_MAX_US, &cost)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': expected a "
                             "non-negative integer cost of at most %g", lx.line, name, PSIM_MAX_US);
            return NULL;
        }
        if (!read_int(&ls, le, id, &n_preds)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': expected the "
                             "predecessor count (at most %" G_GINT64_FORMAT ")", lx.line, name, id);
            return NULL;
        }
        PsimNode *v = psim_graph_node_add(g, name, "Task", error);
        if (!v)
            return NULL;
        psim_graph_node_outputs_set(g, v, 1);
        psim_graph_node_cost_set(g, v, "*", (double)cost);
        for (int64_t k = 0; k < n_preds; k++) {
            int64_t pred;
            if (!read_int(&ls, le, G_MAXINT32, &pred)) {
                psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': expected %"
                                 G_GINT64_FORMAT " predecessor ids, found %" G_GINT64_FORMAT,
                                 lx.line, name, n_preds, k);
                return NULL;
            }
            /* The set lists predecessors before their successors; a forward reference would
             * be a cycle or a task that does not exist. */
            if (pred >= id) {
                psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': predecessor %"
                                 G_GINT64_FORMAT " is not an earlier task", lx.line, name, pred);
                return NULL;
            }
            psim_graph_node_input_add(g, v, (PsimPort){(int32_t)pred, 0});
        }
        if (!line_blank(ls, le)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': trailing text after "
                             "%" G_GINT64_FORMAT " predecessor ids", lx.line, name, n_preds);
            return NULL;
        }
    }
    /* Only blank lines and '#' comments may follow. */
    while (next_line(&lx, &ls, &le)) {
        const char *p = skip_blank(ls, le);
        if (p < le && *p != '#') {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": unexpected text after the "
                             "%" G_GINT64_FORMAT " task lines", lx.line, n_tasks);
            return NULL;
        }
    }
    psim_graph_output_add(g, (PsimPort){(int32_t)(n_tasks - 1), 0});
    if (!psim_graph_finalize(g, error))
        return NULL;
    return g_steal_pointer(&g);
}
