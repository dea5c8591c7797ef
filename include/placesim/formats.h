/* Formats: graph importers (ONNX, TF GraphDef binary and text, placesim JSON, PipeDream, STG),
 * exporters (JSON, DOT, GraphML, TF text) and the plan's JSON. The code lives in formats/; the IR
 * it reads into and writes from is graph/'s. */
#ifndef PLACESIM_FORMATS_H
#define PLACESIM_FORMATS_H

#include "placesim/graph.h"
#include "placesim/plan.h"

G_BEGIN_DECLS

typedef enum {
    PSIM_FORMAT_UNKNOWN = 0,
    PSIM_FORMAT_JSON,
    PSIM_FORMAT_ONNX,
    PSIM_FORMAT_TF_PB,
    PSIM_FORMAT_TF_PBTXT,
    PSIM_FORMAT_PIPEDREAM,
    PSIM_FORMAT_STG,
    PSIM_FORMAT_DOT,
    PSIM_FORMAT_GRAPHML,
} PsimFormat;

/* A shape given for a graph input (by node name or tensor name), e.g. from --shape. */
typedef struct {
    const char *name;
    int32_t rank;
    const int64_t *dims; /* rank entries, all > 0 */
} PsimInputShape;

typedef struct {
    gboolean training; /* PipeDream: add backward nodes */
    /* Applied to the graph's inputs before constant folding and shape inference, so that FLOPs
     * and bytes follow: each of `shapes` fills its input's unknown dims (a known dim that
     * differs, a rank that differs, or a name that is no graph input is an INPUT error); then,
     * when batch > 0, every input whose leading dim is still unknown gets batch there. */
    int64_t batch;
    int32_t n_shapes;
    const PsimInputShape *shapes;
} PsimImportOptions;

const char *psim_format_name(PsimFormat f);
PsimFormat psim_format_from_name(const char *name);
/* Sniffs content (magic bytes, JSON format key), then the file name. */
PsimFormat psim_format_detect(const char *path, const guint8 *data, gsize len);

/* TRUE for names that say nothing of the model (empty, "torch_jit", "main_graph", "model"...). */
gboolean psim_graph_name_is_generic(const char *name);
/* A file's stem ("a/b/resnet18.onnx" -> "resnet18"), valid UTF-8; g_free. */
char *psim_graph_name_from_path(const char *path);

/* Loads any supported file; opts may be NULL. The graph is finalized and shapes are inferred;
 * one whose own name is generic (psim_graph_name_is_generic) is named after its file's stem.
 * Errors name the file and the node or field. Free with psim_graph_free. */
PsimGraph *psim_graph_load(const char *path, const PsimImportOptions *opts, GError **error);
/* psim_graph_load with the default options, and the SHA-256 (hex, g_free) of the file's bytes. */
PsimGraph *psim_graph_load_hashed(const char *path, char **sha256, GError **error);
/* The SHA-256 (hex, g_free) a plan file gives its graph source: of the file's bytes, or for
 * "zoo:NAME" of the built-in graph's JSON export. */
char *psim_graph_source_sha256(const char *source, GError **error);
/* Parses an in-memory buffer of a known format (fuzzers use this). */
PsimGraph *psim_graph_load_data(const char *path, PsimFormat f, const guint8 *data, gsize len,
                                const PsimImportOptions *opts, GError **error);

PsimGraph *psim_import_json(const char *path, const char *data, gsize len, GError **error);
PsimGraph *psim_import_onnx(const char *path, const guint8 *data, gsize len, GError **error);
PsimGraph *psim_import_tf(const char *path, const guint8 *data, gsize len, gboolean text,
                          GError **error);
PsimGraph *psim_import_pipedream(const char *path, const char *data, gsize len,
                                 gboolean training, GError **error);
PsimGraph *psim_import_stg(const char *path, const char *data, gsize len, GError **error);

/* Exporters return a newly allocated string (g_free). */
char *psim_export_json(const PsimGraph *g, gsize *len);
char *psim_export_dot(const PsimGraph *g, GError **error);
char *psim_export_graphml(const PsimGraph *g, GError **error);
/* TF text GraphDef; each node's device field is its assigned device when set. */
char *psim_export_pbtxt(const PsimGraph *g, GError **error);
/* The graph as an ONNX ModelProto (binary, *len bytes; g_free): Placeholders as graph inputs,
 * Consts as initializers, every other node with its op, domain and attributes; control inputs
 * and devices in each node's doc_string (ONNX has neither). NULL with an INPUT error naming the
 * node when a Const has no value or an attribute has no ONNX type. */
char *psim_export_onnx(const PsimGraph *g, gsize *len, GError **error);
gboolean psim_graph_save(const PsimGraph *g, const char *path, PsimFormat f, GError **error);

/* An IDX file (MNIST's format; ".gz" read through zlib) of unsigned bytes as a uint8 host tensor
 * of its dims. A missing file, a bad header or a size that disagrees with it is an INPUT error
 * naming the file. */
PsimTensor *psim_idx_load(const char *path, GError **error);
/* ONNX TensorProto files (.pb), as in ONNX's test data: read (raw_data or typed fields) and
 * write (raw_data). *name (optional, g_free) gets the tensor's name. Errors name the file. */
PsimTensor *psim_tensor_load_pb(const char *path, char **name, GError **error);
PsimTensor *psim_tensor_parse_pb(const char *path, const guint8 *data, gsize len, char **name,
                                 GError **error);
gboolean psim_tensor_save_pb(const PsimTensor *t, const char *name, const char *path,
                             GError **error);

/* Plans. */
/* JSON ("placesim.plan/2"; "placesim.plan/1" is read too): the placed graph (embedded, or by
 * source and SHA-256), the placement, orders and the transfer schedule; loading partitions the
 * graph again and gives an identical plan (save -> load -> save is byte-identical). */
char *psim_plan_to_json(const PsimPlan *p, gsize *len);
/* The plan as JSON, referring to its graph (p->graph_source) by graph_sha256 when both are
 * set, else embedding the placed graph. NULL with an error when the placed graph cannot be
 * rebuilt from the plan. */
enum {
    /* each device's order written out, by node name (for editing by hand), instead of the
     * placement's order from which the reader derives them */
    PSIM_PLAN_JSON_ORDERS = 1u << 0,
};
char *psim_plan_to_json_full(const PsimPlan *p, const char *graph_sha256, unsigned flags,
                             gsize *len, GError **error);
PsimPlan *psim_plan_from_json(const char *path, const char *data, gsize len, GError **error);
gboolean psim_plan_save(const PsimPlan *p, const char *path, GError **error);
/* psim_plan_save with PSIM_PLAN_JSON_* flags. */
gboolean psim_plan_save_full(const PsimPlan *p, const char *path, unsigned flags, GError **error);
/* The same, with the SHA-256 of p->graph_source already known (psim_graph_source_sha256, e.g.
 * computed while the plan was made); NULL: computed here. */
gboolean psim_plan_save_sha(const PsimPlan *p, const char *path, unsigned flags, const char *graph_sha256,
                            GError **error);
PsimPlan *psim_plan_load(const char *path, GError **error);
/* psim_plan_load, a plan that refers to its graph reading it from graph_path (a file or
 * "zoo:NAME"; NULL: the plan's source) instead: the same bytes, checked by SHA-256. */
PsimPlan *psim_plan_load_with(const char *path, const char *graph_path, GError **error);

G_END_DECLS

#endif
