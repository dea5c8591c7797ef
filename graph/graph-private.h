/* Internals of the graph module shared between its files (not installed). */
#ifndef PLACESIM_GRAPH_PRIVATE_H
#define PLACESIM_GRAPH_PRIVATE_H

#include "placesim/graph.h"

/* Sets an error in the house style "FILE: node 'x': message" (node may be NULL). */
/* Reads an attr holding a dtype (INT with an ONNX code, DTYPE, or a dtype name); dflt when
 * absent, UNDEFINED when not a dtype (graph/ops-util.c; shape inference and kernels). */
PsimDType psim__attr_dtype(const PsimNode *n, const char *name, PsimDType dflt);

/* ConvTranspose's geometry (graph/ops-math.c) for `ns` spatial dims of input sizes in[] and
 * kernel sizes k[]: strides, dilations, pads (begin and end), output_padding, and the output
 * sizes, from the node's attributes (output_shape and auto_pad decide the pads as ONNX says).
 * FALSE with *why (g_free) for attributes that do not fit. Inference and the CPU kernel. */
gboolean psim__conv_transpose_geometry(const PsimNode *n, int32_t ns, const int64_t *in,
                                       const int64_t *k, int64_t *stride, int64_t *dil,
                                       int64_t *pad0, int64_t *pad1, int64_t *out, char **why);

/* An Einsum equation resolved against its inputs' ranks (graph/ops-math.c): each input's and
 * the output's dims as labels (letters 0-51, the ellipsis's dims 52 and up, aligned from the
 * right); the output implicit (the ellipsis, then letters used once, alphabetically) when the
 * equation has no "->". FALSE with *why (g_free) for a malformed equation. */
/* The window of a TF NHWC convolution or pooling node n (Conv2D, DepthwiseConv2dNative, MaxPool,
 * AvgPool) over an input of dims x (N, H, W, C): its kh x kw size (the filter's first two dims,
 * or a pool's ksize when filter is NULL), strides, dilations (convolutions only), the begin pads
 * and the output size from padding SAME / VALID / EXPLICIT. FALSE with *why (g_free) for another
 * data_format or malformed attributes. graph/ops-tf.c. */
typedef struct {
    int64_t kh, kw, sh, sw, dh, dw, pt, pl, Ho, Wo;
} PsimTfWindow;
gboolean psim__tf_window(const PsimNode *n, const int64_t *x, const int64_t *filter, PsimTfWindow *w,
                         char **why);

#define PSIM_EINSUM_MAX_INPUTS 8
#define PSIM_EINSUM_MAX_DIMS 16
typedef struct {
    int32_t n_in;
    int32_t rank[PSIM_EINSUM_MAX_INPUTS];
    int32_t lab[PSIM_EINSUM_MAX_INPUTS][PSIM_EINSUM_MAX_DIMS];
    int32_t out_rank;
    int32_t out[PSIM_EINSUM_MAX_DIMS];
} PsimEinsum;
gboolean psim__einsum_parse(const char *equation, int32_t n_in, const int32_t *ranks, PsimEinsum *e,
                            char **why);

/* TF StridedSlice's geometry (graph/ops-tf.c): for input dims[0..r) and k begin/end/stride
 * entries with the five masks, per input dim the first index, step and count (-1 where the dim
 * is unknown), and the output's dims and rank (shrunk axes dropped, new axes 1). FALSE with
 * *why (g_free it) for an invalid slice. Shape inference and the CPU kernel both use it. */
typedef struct {
    int64_t start, step, len;
} PsimSliceDim;
gboolean psim__strided_slice_geometry(int32_t r, const int64_t *dims, int32_t k,
                                      const int64_t *begin, const int64_t *end,
                                      const int64_t *strides, uint64_t begin_mask,
                                      uint64_t end_mask, uint64_t ellipsis_mask,
                                      uint64_t new_axis_mask, uint64_t shrink_axis_mask,
                                      PsimSliceDim *sd, int64_t *out_dims, int32_t *out_rank,
                                      char **why);
void psim__error_node(GError **error, const PsimGraph *g, const PsimNode *n, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);
/* Same with an explicit path (importers, before a graph exists). */
void psim__error_file(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
/* A JSON file's bytes (psim_input_read; the first bytes must open a JSON object or list). */
GBytes *psim__json_read(const char *path, GError **error);
/* v into *out when it lies in [lo, hi] (finite), else the typed getters' range error. */
gboolean psim__json_number_in(const PsimJsonAt *at, const char *key, double v, double lo,
                              double hi, double *out, GError **error);
gboolean psim__json_int_in(const PsimJsonAt *at, const char *key, int64_t v, int64_t lo,
                           int64_t hi, int64_t *out, GError **error);

/* Registers the built-in ops once (idempotent, thread-safe). */
void psim__ops_init(void);
/* Called by the igraph users so that igraph never aborts the process. */
void psim__igraph_init(void);
/* igraph is not thread-safe (IGRAPH_THREAD_SAFE 0): hold this lock around any use of it. */
void psim__igraph_lock(void);
void psim__igraph_unlock(void);

/* When set, finalize grows a producer's output count to cover the indices its consumers use
 * (TensorFlow GraphDefs do not list outputs). */
void psim__graph_set_grow_outputs(PsimGraph *g, gboolean grow);

/* Deep copy of node `src` of graph `from` into `to` as a new node with the same name. With
 * `edges`, inputs and control inputs are copied verbatim (ids refer to `from`; the caller remaps
 * them); without, the copy has none (the partitioner adds them remapped). */
PsimNode *psim__graph_node_copy(PsimGraph *to, const PsimGraph *from, const PsimNode *src,
                                gboolean edges, GError **error);
/* The same, the copy named `name`. */
PsimNode *psim__graph_node_copy_named(PsimGraph *to, const PsimGraph *from, const PsimNode *src,
                                      const char *name, gboolean edges, GError **error);

/* psim_graph_training, also giving the parameters' node ids (kept in the result; g_free), in
 * the order of their gradient outputs (the last *n_params outputs), and the loss. */
PsimGraph *psim__graph_training(const PsimGraph *g, const char *loss_ref, int32_t *n_params,
                                int32_t **params, PsimPort *loss_port, GError **error);

/* Drops every graph output (a pass that chooses new ones). */
void psim__graph_outputs_clear(PsimGraph *g);

/* Copies graph-level metadata (name, source). */
void psim__graph_copy_meta(PsimGraph *to, const PsimGraph *from);

/* Reads an attribute value into arena memory of g (deep copy). */
void psim__attr_copy(PsimGraph *g, PsimAttr *dst, const PsimAttr *src);
/* A copy of the len bytes at s (a string once NUL-terminated) kept as long as g, without the
 * lookup psim_graph_intern makes to share equal strings: for strings known to be new. */
const char *psim__graph_store(PsimGraph *g, const char *s, size_t len);
/* Gives n, which has no attributes yet, these count attributes as they are, in one allocation:
 * their names and strings must already be g's (psim_graph_intern), arrays in its arena. */
void psim__node_attrs_set_interned(PsimGraph *g, PsimNode *n, const PsimAttr *attrs, int32_t count);

#endif
