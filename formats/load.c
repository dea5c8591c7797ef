/* Loading and saving graphs: format detection by content, dispatch to importers, and the
 * post-import passes every graph gets (shape inference, folding of shape arithmetic). */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <string.h>

/* Files larger than this are refused before they are read. */
#define MAX_FILE_BYTES (G_GINT64_CONSTANT(4) << 30)

static const char *const format_names[] = {
    [PSIM_FORMAT_UNKNOWN] = "unknown",   [PSIM_FORMAT_JSON] = "json",
    [PSIM_FORMAT_ONNX] = "onnx",         [PSIM_FORMAT_TF_PB] = "pb",
    [PSIM_FORMAT_TF_PBTXT] = "pbtxt",    [PSIM_FORMAT_PIPEDREAM] = "pipedream",
    [PSIM_FORMAT_STG] = "stg",           [PSIM_FORMAT_DOT] = "dot",
    [PSIM_FORMAT_GRAPHML] = "graphml",
};

const char *psim_format_name(PsimFormat f)
{
    return (unsigned)f < G_N_ELEMENTS(format_names) ? format_names[f] : "unknown";
}

PsimFormat psim_format_from_name(const char *name)
{
    for (guint i = 1; i < G_N_ELEMENTS(format_names); i++)
        if (!g_ascii_strcasecmp(name, format_names[i]))
            return (PsimFormat)i;
    if (!g_ascii_strcasecmp(name, "tf") || !g_ascii_strcasecmp(name, "graphdef"))
        return PSIM_FORMAT_TF_PB;
    return PSIM_FORMAT_UNKNOWN;
}

static const guint8 *skip_space(const guint8 *p, const guint8 *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static gboolean looks_stg(const guint8 *data, gsize len)
{
    /* First line: one integer (the task count); then lines of integers. */
    const guint8 *p = skip_space(data, data + len), *end = data + MIN(len, 4096);
    if (p >= end || !g_ascii_isdigit(*p))
        return FALSE;
    int lines = 0;
    for (; p < end && *p != '#'; p++) {
        if (*p == '\n')
            lines++;
        else if (!g_ascii_isdigit(*p) && *p != ' ' && *p != '\t' && *p != '\r')
            return FALSE;
    }
    return lines >= 1;
}

static gboolean has_prefix_word(const guint8 *p, const guint8 *end, const char *w)
{
    size_t n = strlen(w);
    return (gsize)(end - p) >= n && memcmp(p, w, n) == 0;
}

PsimFormat psim_format_detect(const char *path, const guint8 *data, gsize len)
{
    const guint8 *end = data + len, *p = skip_space(data, end);
    if (p < end && *p == '{') {
        gsize n = MIN(len, 4096);
        if (g_strstr_len((const char *)data, (gssize)n, "placesim.graph/"))
            return PSIM_FORMAT_JSON;
    }
    if (p < end && has_prefix_word(p, end, "node") && len > 6) {
        const guint8 *q = skip_space(p + 4, end);
        if (q < end && *q == '{')
            return PSIM_FORMAT_TF_PBTXT;
        const char *dd = g_strstr_len((const char *)p, (gssize)MIN((gsize)(end - p), 512), " -- ");
        if (dd)
            return PSIM_FORMAT_PIPEDREAM;
    }
    if (p < end && (has_prefix_word(p, end, "versions") || has_prefix_word(p, end, "library")))
        return PSIM_FORMAT_TF_PBTXT;
    if (looks_stg(data, len))
        return PSIM_FORMAT_STG;
    /* Binary protobufs: an ONNX ModelProto opens with ir_version (field 1, varint: 0x08); a
     * GraphDef with its first NodeDef (field 1, length-delimited: 0x0a). */
    if (len > 0 && data[0] == 0x08)
        return PSIM_FORMAT_ONNX;
    if (len > 0 && data[0] == 0x0a)
        return PSIM_FORMAT_TF_PB;
    if (path) {
        if (g_str_has_suffix(path, ".onnx"))
            return PSIM_FORMAT_ONNX;
        if (g_str_has_suffix(path, ".pbtxt"))
            return PSIM_FORMAT_TF_PBTXT;
        if (g_str_has_suffix(path, ".pb"))
            return PSIM_FORMAT_TF_PB;
        if (g_str_has_suffix(path, ".json"))
            return PSIM_FORMAT_JSON;
        if (g_str_has_suffix(path, ".stg"))
            return PSIM_FORMAT_STG;
    }
    return PSIM_FORMAT_UNKNOWN;
}

PsimGraph *psim_graph_load_data(const char *path, PsimFormat f, const guint8 *data, gsize len,
                                const PsimImportOptions *opts, GError **error)
{
    PsimGraph *g = NULL;
    gboolean training = opts && opts->training;
    switch (f) {
    case PSIM_FORMAT_JSON: g = psim_import_json(path, (const char *)data, len, error); break;
    case PSIM_FORMAT_ONNX: g = psim_import_onnx(path, data, len, error); break;
    case PSIM_FORMAT_TF_PB: g = psim_import_tf(path, data, len, FALSE, error); break;
    case PSIM_FORMAT_TF_PBTXT: g = psim_import_tf(path, data, len, TRUE, error); break;
    case PSIM_FORMAT_PIPEDREAM:
        g = psim_import_pipedream(path, (const char *)data, len, training, error);
        break;
    case PSIM_FORMAT_STG: g = psim_import_stg(path, (const char *)data, len, error); break;
    default:
        psim__error_file(error, path, "unrecognized file format (expected ONNX, TF GraphDef, "
                                      "placesim JSON, PipeDream profile or STG)");
        return NULL;
    }
    if (!g)
        return NULL;
    /* Every format can describe a graph of nothing (an empty "nodes" list, a GraphDef of no
     * NodeDef, an STG of 0 tasks); there is nothing to place, simulate or run in it. */
    if (psim_graph_n_nodes(g) == 0) {
        psim__error_file(error, path, "graph has no nodes");
        psim_graph_free(g);
        return NULL;
    }
    if (!psim_graph_source(g))
        psim_graph_set_source(g, path);
    if (psim_graph_fold_constants(g, error) < 0 || !psim_graph_infer_shapes(g, error)) {
        psim_graph_free(g);
        return NULL;
    }
    return g;
}

PsimGraph *psim_graph_load(const char *path, const PsimImportOptions *opts, GError **error)
{
    g_autoptr(GError) ferr = NULL;
    g_autoptr(GMappedFile) mf = g_mapped_file_new(path, FALSE, &ferr);
    if (!mf) {
        psim__error_file(error, path, "cannot read: %s", ferr->message);
        return NULL;
    }
    gsize len = g_mapped_file_get_length(mf);
    if ((gint64)len > MAX_FILE_BYTES) {
        psim__error_file(error, path, "file is larger than 4 GiB");
        return NULL;
    }
    /* Text importers need a terminating NUL: copy small text files; binary stays mapped. */
    const guint8 *data = (const guint8 *)g_mapped_file_get_contents(mf);
    static const guint8 empty[1] = {0};
    if (!data)
        data = empty;
    PsimFormat f = psim_format_detect(path, data, len);
    if (f == PSIM_FORMAT_ONNX || f == PSIM_FORMAT_TF_PB)
        return psim_graph_load_data(path, f, data, len, opts, error);
    g_autofree guint8 *copy = g_malloc(len + 1);
    memcpy(copy, data, len);
    copy[len] = 0;
    return psim_graph_load_data(path, f, copy, len, opts, error);
}

gboolean psim_graph_save(const PsimGraph *g, const char *path, PsimFormat f, GError **error)
{
    g_autofree char *text = NULL;
    gsize len = 0;
    switch (f) {
    case PSIM_FORMAT_JSON: text = psim_export_json(g, &len); break;
    case PSIM_FORMAT_DOT: text = psim_export_dot(g, error); break;
    case PSIM_FORMAT_GRAPHML: text = psim_export_graphml(g, error); break;
    case PSIM_FORMAT_TF_PBTXT: text = psim_export_pbtxt(g, error); break;
    default:
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: cannot export to format '%s'", path,
                    psim_format_name(f));
        return FALSE;
    }
    if (!text)
        return FALSE;
    if (!len)
        len = strlen(text);
    g_autoptr(GError) werr = NULL;
    if (!g_file_set_contents(path, text, (gssize)len, &werr)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot write: %s", path, werr->message);
        return FALSE;
    }
    return TRUE;
}
