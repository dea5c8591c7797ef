/* Loading and saving graphs: format detection by content, dispatch to importers, and the
 * post-import passes every graph gets (shape inference, folding of shape arithmetic). */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <string.h>

#define UNRECOGNIZED                                                                             \
    "unrecognized file format (expected ONNX, TF GraphDef, placesim JSON, PipeDream profile or " \
    "STG)"

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

/* The input node's output 0 gets `dims` (rank entries, PSIM_DIM_UNKNOWN kept unknown); a shape
 * attr the importer read (TF Placeholder) follows, so exporters write what the graph holds. */
static void input_shape_set(PsimGraph *g, PsimNode *n, int32_t rank, const int64_t *dims)
{
    psim_graph_output_set(g, n, 0, n->outputs[0].dtype, rank, dims);
    const PsimAttr *a = psim_node_attr(n, "shape");
    if (a && a->type == PSIM_ATTR_SHAPE)
        psim_graph_node_attr_set_shape(g, n, "shape", rank, dims);
}

/* --shape and --batch: see PsimImportOptions. */
static gboolean apply_input_shapes(PsimGraph *g, const char *path, const PsimImportOptions *opts,
                                   GError **error)
{
    int32_t ni = psim_graph_n_inputs(g);
    for (int32_t k = 0; k < opts->n_shapes; k++) {
        const PsimInputShape *s = &opts->shapes[k];
        PsimNode *n = NULL;
        for (int32_t i = 0; i < ni && !n; i++) {
            PsimNode *c = psim_graph_node(g, psim_graph_input(g, i));
            if (c->n_outputs > 0 && (!strcmp(c->name, s->name) ||
                                     (c->outputs[0].name && !strcmp(c->outputs[0].name, s->name))))
                n = c;
        }
        if (!n) {
            psim__error_file(error, path, "--shape %s: the graph has no input of that name", s->name);
            return FALSE;
        }
        const PsimOutput *o = &n->outputs[0];
        if (o->rank != PSIM_RANK_UNKNOWN && o->rank != s->rank) {
            psim__error_file(error, path, "node '%s': --shape gives %d dims, the graph's input has %d",
                             n->name, s->rank, o->rank);
            return FALSE;
        }
        for (int32_t d = 0; o->rank != PSIM_RANK_UNKNOWN && d < o->rank; d++)
            if (o->dims[d] != PSIM_DIM_UNKNOWN && o->dims[d] != s->dims[d]) {
                psim__error_file(error, path,
                                 "node '%s': --shape gives dim %d as %" G_GINT64_FORMAT
                                 ", the graph's input has %" G_GINT64_FORMAT,
                                 n->name, d, s->dims[d], o->dims[d]);
                return FALSE;
            }
        input_shape_set(g, n, s->rank, s->dims);
    }
    if (opts->batch <= 0)
        return TRUE;
    for (int32_t i = 0; i < ni; i++) {
        PsimNode *n = psim_graph_node(g, psim_graph_input(g, i));
        if (n->n_outputs < 1 || n->outputs[0].rank < 1 || n->outputs[0].dims[0] != PSIM_DIM_UNKNOWN)
            continue;
        g_autofree int64_t *dims = g_memdup2(n->outputs[0].dims, sizeof(int64_t) * (size_t)n->outputs[0].rank);
        dims[0] = opts->batch;
        input_shape_set(g, n, n->outputs[0].rank, dims);
    }
    return TRUE;
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
        psim__error_file(error, path, UNRECOGNIZED);
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
    if (opts && !apply_input_shapes(g, path, opts, error)) {
        psim_graph_free(g);
        return NULL;
    }
    if (psim_graph_fold_constants(g, error) < 0 || !psim_graph_infer_shapes(g, error)) {
        psim_graph_free(g);
        return NULL;
    }
    return g;
}

/* A stream that cannot be a graph (/dev/zero) stops at its first bytes. Detection looks at no
 * more than the first 4 KiB, so the head decides as the whole file would. */
static const char *sniff_graph(const char *path, const guint8 *head, gsize len)
{
    if (len && head[0] == 0)
        return "not a graph file (it starts with a NUL byte)";
    if (psim_format_detect(path, head, len) == PSIM_FORMAT_UNKNOWN)
        return UNRECOGNIZED;
    return NULL;
}

gboolean psim_graph_name_is_generic(const char *name)
{
    /* What exporters write when the model has no name of its own: PyTorch's ONNX exporter
     * (torch_jit, torch-jit-export), tf2onnx and Keras (main_graph, model, tf2onnx), others. */
    static const char *const generic[] = {"torch_jit", "torch-jit-export", "main_graph", "model",
                                          "graph", "Graph", "tf2onnx", "onnx", "network"};
    if (!name || !*name)
        return TRUE;
    for (guint i = 0; i < G_N_ELEMENTS(generic); i++)
        if (!g_ascii_strcasecmp(name, generic[i]))
            return TRUE;
    return FALSE;
}

char *psim_graph_name_from_path(const char *path)
{
    g_autofree char *base = g_path_get_basename(path);
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
        *dot = '\0';
    return g_utf8_make_valid(base, -1);
}

/* A graph's display name is its file's stem where the model's own name says nothing, so that
 * rows, traces and plots of different models do not share a name. */
static PsimGraph *named(PsimGraph *g, const char *path)
{
    if (g && strcmp(path, "-") && psim_graph_name_is_generic(psim_graph_name(g))) {
        g_autofree char *stem = psim_graph_name_from_path(path);
        psim_graph_set_name(g, stem);
    }
    return g;
}

static gpointer sha256_thread(gpointer bytes)
{
    return g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, bytes);
}

static PsimGraph *load(const char *path, const PsimImportOptions *opts, char **sha256,
                       GError **error)
{
    g_autoptr(GBytes) b = psim_input_read(path, PSIM_INPUT_MAX_BYTES, sniff_graph, error);
    if (!b)
        return NULL;
    /* The file's SHA-256 (a plan checks its graph by it: 75 ms for 12.5 MB with GLib's) on
     * another thread while this one parses; the bytes are not changed by either. */
    GThread *hasher = NULL;
    if (sha256 && g_bytes_get_size(b) >= (1u << 20))
        hasher = g_thread_try_new("psim-sha256", sha256_thread, b, NULL);
    if (sha256 && !hasher)
        *sha256 = g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, b);
    gsize len = 0;
    const guint8 *data = g_bytes_get_data(b, &len);
    static const guint8 empty[1] = {0};
    if (!data)
        data = empty;
    PsimFormat f = psim_format_detect(path, data, len);
    PsimGraph *g;
    if (f == PSIM_FORMAT_ONNX || f == PSIM_FORMAT_TF_PB) {
        g = named(psim_graph_load_data(path, f, data, len, opts, error), path);
    } else {
        /* Text importers need a terminating NUL: copy text files; binary stays mapped. */
        g_autofree guint8 *copy = g_malloc(len + 1);
        memcpy(copy, data, len);
        copy[len] = 0;
        g = named(psim_graph_load_data(path, f, copy, len, opts, error), path);
    }
    if (hasher)
        *sha256 = g_thread_join(hasher);
    return g;
}

PsimGraph *psim_graph_load(const char *path, const PsimImportOptions *opts, GError **error)
{
    return load(path, opts, NULL, error);
}

PsimGraph *psim_graph_load_hashed(const char *path, char **sha256, GError **error)
{
    return load(path, NULL, sha256, error);
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
    case PSIM_FORMAT_ONNX: text = psim_export_onnx(g, &len, error); break;
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
