/* Options shared by the subcommands: numeric flags checked for range in one place, and the
 * graph-loading flags (--plugin, --batch, --shape, --cse) every command that reads a graph takes,
 * so that a flag means the same thing, and fails the same way, in every command. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "placesim/formats.h"
#include "placesim/kernels.h"
#include "tools/cli.h"

static gboolean flag_error(GError **error, const char *flag, const char *text, const char *what)
{
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: expected %s, not '%s'", flag, what, text);
    return FALSE;
}

gboolean psim_cli_flag_int(const char *flag, const char *text, int64_t lo, int64_t hi,
                           int64_t *out, GError **error)
{
    if (!text)
        return TRUE;
    g_autofree char *what = g_strdup_printf("an integer from %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT, lo, hi);
    char *end = NULL;
    errno = 0;
    gint64 v = g_ascii_strtoll(text, &end, 10);
    if (!*text || g_ascii_isspace(*text) || *end || errno || v < lo || v > hi)
        return flag_error(error, flag, text, what);
    *out = v;
    return TRUE;
}

gboolean psim_cli_flag_double(const char *flag, const char *text, double lo, double hi,
                              double *out, GError **error)
{
    if (!text)
        return TRUE;
    g_autofree char *what = g_strdup_printf("a number from %g to %g", lo, hi);
    char *end = NULL;
    errno = 0;
    double v = g_ascii_strtod(text, &end);
    /* strtod takes "nan", "inf" and hex; only finite decimal values within bounds pass. */
    if (!*text || g_ascii_isspace(*text) || *end || errno || !isfinite(v) || v < lo || v > hi)
        return flag_error(error, flag, text, what);
    *out = v;
    return TRUE;
}

gboolean psim_cli_flag_size(const char *flag, const char *text, uint64_t lo, uint64_t hi,
                            uint64_t *out, GError **error)
{
    if (!text)
        return TRUE;
    g_autofree char *what = g_strdup_printf("a byte count from %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT
                                            " (K, M, G suffixes: powers of 1024)", lo, hi);
    /* strtoull would take "-5" as 2^64-5: only digits are let through. */
    if (!g_ascii_isdigit(*text))
        return flag_error(error, flag, text, what);
    char *end = NULL;
    errno = 0;
    guint64 v = g_ascii_strtoull(text, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end || errno || (shift && v > (G_MAXUINT64 >> shift)))
        return flag_error(error, flag, text, what);
    v <<= shift;
    if (v < lo || v > hi)
        return flag_error(error, flag, text, what);
    *out = v;
    return TRUE;
}

gboolean psim_cli_flag_list(const char *flag, const char *text, char ***out, GError **error)
{
    if (!text)
        return TRUE;
    g_auto(GStrv) items = g_strsplit(text, ",", -1);
    if (!items[0])
        return flag_error(error, flag, text, "a comma-separated list");
    for (int i = 0; items[i]; i++) {
        g_strstrip(items[i]);
        if (!items[i][0])
            return flag_error(error, flag, text, "a comma-separated list without empty items");
    }
    g_strfreev(*out);
    *out = g_steal_pointer(&items);
    return TRUE;
}

/* ---- graph-loading options ---- */

void psim_cli_graph_options_add(GOptionContext *ctx, PsimCliGraphOptions *o, unsigned which)
{
    GOptionEntry plugin[] = {
        {"plugin", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &o->plugins,
         "Load a shared library that registers ops and kernels (repeatable; docs/ops.md)", "PATH.so"},
        {NULL}};
    GOptionEntry shapes[] = {
        {"batch", 0, 0, G_OPTION_ARG_STRING, &o->batch,
         "Set every unknown leading dimension of the graph's inputs to N (before shape inference)", "N"},
        {"shape", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->shapes,
         "Give graph input NAME this shape; unknown dims only (repeatable)", "NAME=D1,D2,..."},
        {NULL}};
    GOptionEntry cse[] = {
        {"cse", 0, 0, G_OPTION_ARG_NONE, &o->cse,
         "Merge common subexpressions after loading, and report how many nodes it removed", NULL},
        {NULL}};
    GOptionEntry fuse[] = {
        {"no-fuse", 0, 0, G_OPTION_ARG_NONE, &o->no_fuse,
         "Keep Conv and its activation, and the nodes of Swish and GELU, apart (by default they are fused "
         "into com.microsoft FusedConv, QuickGelu and Gelu where every device of the cluster has the kernel, "
         "as ONNX Runtime fuses them)", NULL},
        {NULL}};
    if (which & PSIM_CLI_GRAPH_PLUGIN)
        g_option_context_add_main_entries(ctx, plugin, NULL);
    if (which & PSIM_CLI_GRAPH_SHAPES)
        g_option_context_add_main_entries(ctx, shapes, NULL);
    if (which & PSIM_CLI_GRAPH_CSE)
        g_option_context_add_main_entries(ctx, cse, NULL);
    if (which & PSIM_CLI_GRAPH_FUSE)
        g_option_context_add_main_entries(ctx, fuse, NULL);
}

/* "NAME=D1,D2,...": dims are positive integers. */
static gboolean shape_parse(const char *text, PsimInputShape *s, GError **error)
{
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || !eq[1])
        return flag_error(error, "--shape", text, "NAME=D1,D2,...");
    g_auto(GStrv) dims = g_strsplit(eq + 1, ",", -1);
    int32_t rank = (int32_t)g_strv_length(dims);
    if (rank > 64)
        return flag_error(error, "--shape", text, "at most 64 dimensions");
    int64_t *d = g_new(int64_t, rank);
    for (int32_t i = 0; i < rank; i++) {
        int64_t v = 0;
        if (!psim_cli_flag_int("--shape", dims[i], 1, G_MAXINT32, &v, NULL)) {
            g_free(d);
            return flag_error(error, "--shape", text, "NAME=D1,D2,... with dims from 1 to 2147483647");
        }
        d[i] = v;
    }
    s->name = g_strndup(text, (gsize)(eq - text));
    s->rank = rank;
    s->dims = d;
    return TRUE;
}

gboolean psim_cli_graph_options_check(PsimCliGraphOptions *o, GError **error)
{
    for (char **p = o->plugins; p && *p; p++)
        if (!psim_plugin_load(*p, error))
            return FALSE;
    if (!psim_cli_flag_int("--batch", o->batch, 1, G_MAXINT32, &o->batch_size, error))
        return FALSE;
    o->n_input_shapes = o->shapes ? (int32_t)g_strv_length(o->shapes) : 0;
    o->input_shapes = g_new0(PsimInputShape, o->n_input_shapes + 1);
    for (int32_t i = 0; i < o->n_input_shapes; i++)
        if (!shape_parse(o->shapes[i], &o->input_shapes[i], error))
            return FALSE;
    return TRUE;
}

void psim_cli_graph_options_clear(PsimCliGraphOptions *o)
{
    for (int32_t i = 0; o->input_shapes && i < o->n_input_shapes; i++) {
        g_free((char *)o->input_shapes[i].name);
        g_free((int64_t *)o->input_shapes[i].dims);
    }
    g_free(o->input_shapes);
    g_strfreev(o->plugins);
    g_strfreev(o->shapes);
    g_free(o->batch);
    memset(o, 0, sizeof *o);
}

gboolean psim_cli_graph_options_given(const PsimCliGraphOptions *o)
{
    return o->batch || o->shapes || o->cse || o->n_fuse_removed > 0;
}

gboolean psim_cli_graph_as_read(const PsimCliGraphOptions *o)
{
    return !o->batch && !o->shapes && !o->cse && !o->training;
}

gboolean psim_cli_graph_fuse(PsimGraph **g, const PsimCluster *c, PsimCliGraphOptions *o, GError **error)
{
    if (o->no_fuse || o->training || !c)
        return TRUE;
    PsimGraph *f = NULL;
    int32_t removed = 0;
    if (!psim_cluster_fuse(c, *g, &f, &removed, error))
        return FALSE;
    if (f) {
        psim_graph_free(*g);
        *g = f;
        o->n_fuse_removed += removed;
    }
    return TRUE;
}

PsimGraph *psim_cli_graph_load(const char *spec, PsimCliGraphOptions *o, GError **error)
{
    PsimImportOptions opts = {.training = o->training,
                              .batch = o->batch_size,
                              .n_shapes = o->n_input_shapes,
                              .shapes = o->input_shapes};
    g_autoptr(PsimGraph) g = psim_cli_load_graph_with(spec, &opts, error);
    if (!g)
        return NULL;
    if (!o->cse)
        return g_steal_pointer(&g);
    int32_t merged = 0;
    PsimGraph *c = psim_graph_cse(g, &merged, error);
    if (!c)
        return NULL;
    o->n_cse_removed = psim_graph_n_nodes(g) - psim_graph_n_nodes(c);
    return c;
}

void psim_cli_json_cse(JsonBuilder *b, const PsimCliGraphOptions *o)
{
    if (!o->cse)
        return;
    json_builder_set_member_name(b, "cse_removed_nodes");
    json_builder_add_int_value(b, o->n_cse_removed);
}

void psim_cli_print_cse(const PsimCliGraphOptions *o, FILE *f)
{
    if (o->cse)
        fprintf(f, "cse            removed %d node%s\n", o->n_cse_removed, o->n_cse_removed == 1 ? "" : "s");
}

gboolean psim_cli_replica_devices(const PsimCluster *c, int64_t replicas, int64_t n_ps,
                                  const char ***workers, const char ***ps, GError **error)
{
    int32_t nd = psim_cluster_n_devices(c);
    if (replicas > nd || n_ps > nd) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "--replicas %lld and --ps %lld need as many devices; the cluster has %d",
                    (long long)replicas, (long long)n_ps, nd);
        return FALSE;
    }
    *workers = g_new0(const char *, replicas + 1);
    *ps = g_new0(const char *, n_ps + 1);
    for (int64_t r = 0; r < replicas; r++)
        (*workers)[r] = psim_cluster_device(c, (int32_t)r)->name;
    int64_t first = nd >= replicas + n_ps ? replicas : 0;
    for (int64_t k = 0; k < n_ps; k++)
        (*ps)[k] = psim_cluster_device(c, (int32_t)(first + k))->name;
    return TRUE;
}

gboolean psim_cli_caching_device(const char *text, PsimVariableReads *out, GError **error)
{
    if (!text || !strcmp(text, "none"))
        *out = PSIM_READ_PER_OP;
    else if (!strcmp(text, "worker"))
        *out = PSIM_READ_CACHED;
    else
        return flag_error(error, "--caching-device", text, "none or worker");
    return TRUE;
}
