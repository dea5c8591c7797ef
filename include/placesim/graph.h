/* placesim graph IR: dtypes, shapes, tensors, attributes, nodes and graphs.
 * A PsimGraph owns its nodes, their names, attributes and arrays (an arena, as in ggml's
 * context); freeing the graph frees them. Constant tensors are reference counted and shared. */
#ifndef PLACESIM_GRAPH_H
#define PLACESIM_GRAPH_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

#define PSIM_ERROR (psim_error_quark())
GQuark psim_error_quark(void);

typedef enum {
    PSIM_ERROR_INPUT = 1, /* bad file, flag, feed or database: exit 2 */
    PSIM_ERROR_USAGE,     /* bad command line: exit 2 */
    PSIM_ERROR_RUNTIME,   /* a kernel, device or system failure: exit 1 */
    PSIM_ERROR_UNSUPPORTED,
} PsimErrorCode;

/* Numbered as ONNX's TensorProto.DataType so that importers map them one to one. */
typedef enum {
    PSIM_DTYPE_UNDEFINED = 0,
    PSIM_DTYPE_FLOAT32 = 1,
    PSIM_DTYPE_UINT8 = 2,
    PSIM_DTYPE_INT8 = 3,
    PSIM_DTYPE_UINT16 = 4,
    PSIM_DTYPE_INT16 = 5,
    PSIM_DTYPE_INT32 = 6,
    PSIM_DTYPE_INT64 = 7,
    PSIM_DTYPE_STRING = 8,
    PSIM_DTYPE_BOOL = 9,
    PSIM_DTYPE_FLOAT16 = 10,
    PSIM_DTYPE_FLOAT64 = 11,
    PSIM_DTYPE_UINT32 = 12,
    PSIM_DTYPE_UINT64 = 13,
    PSIM_DTYPE_COMPLEX64 = 14,
    PSIM_DTYPE_COMPLEX128 = 15,
    PSIM_DTYPE_BFLOAT16 = 16,
    PSIM_DTYPE_N_TYPES
} PsimDType;

/* Bytes per element (0 for UNDEFINED; sizeof(char *) for STRING). */
size_t psim_dtype_size(PsimDType t);
/* "float32", "int64", ...; static storage. */
const char *psim_dtype_name(PsimDType t);
/* Inverse of psim_dtype_name; also accepts "float", "double", "half". UNDEFINED if unknown. */
PsimDType psim_dtype_from_name(const char *name);

#define PSIM_DIM_UNKNOWN (-1)
#define PSIM_RANK_UNKNOWN (-1)
/* Largest element count a shape may describe: more is "absurd" input (2^40 elements). */
#define PSIM_MAX_ELEMENTS (INT64_C(1) << 36)

/* ---------------------------------------------------------------------------------------- */
/* Tensors: reference-counted dense arrays (constants, feeds, kernel outputs). */

typedef struct PsimTensor {
    PsimDType dtype;
    int32_t rank;
    int64_t *dims;     /* rank entries, all known */
    int64_t n_elems;
    size_t nbytes;
    void *data;        /* 64-byte aligned; for STRING an array of n_elems char* */
    gint refcount;
    void (*release)(struct PsimTensor *t, void *user); /* frees data when set (device memory) */
    void *release_user;
    int device;        /* -1 host; otherwise an opaque device index of its allocator */
} PsimTensor;

/* A host tensor with zeroed data. NULL with error if the shape is absurd. Free with unref. */
PsimTensor *psim_tensor_new(PsimDType dtype, int32_t rank, const int64_t *dims, GError **error);
/* Wraps caller memory; release(t, user) is called when the last reference goes. */
PsimTensor *psim_tensor_new_wrap(PsimDType dtype, int32_t rank, const int64_t *dims, void *data,
                                 void (*release)(PsimTensor *, void *), void *user);
PsimTensor *psim_tensor_ref(PsimTensor *t);
void psim_tensor_unref(PsimTensor *t);
/* A deep host copy. */
PsimTensor *psim_tensor_copy(const PsimTensor *t);
/* Element count of dims, or -1 if any dim is unknown or the product exceeds PSIM_MAX_ELEMENTS. */
int64_t psim_shape_elems(int32_t rank, const int64_t *dims);
/* Value of element i as double/int64 whatever the dtype (numeric dtypes only). */
double psim_tensor_get_f64(const PsimTensor *t, int64_t i);
/* Stores v as element i of a numeric tensor: floats rounded to the dtype, integers truncated
 * and saturated to the dtype's range (NaN as 0), bool as v != 0; float16, bfloat16 and strings
 * unchanged. */
void psim_tensor_set_f64(PsimTensor *t, int64_t i, double v);
int64_t psim_tensor_get_i64(const PsimTensor *t, int64_t i);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimTensor, psim_tensor_unref)

/* Checkpoints (graph/checkpoint.c): named host tensors in one file, written atomically (temporary
 * file, fsync, rename) with a SHA-256 over the contents. Write errors are RUNTIME; a missing,
 * partial or damaged file is an INPUT error naming it. read: g_strfreev the names, unref each
 * tensor and g_free the array. */
gboolean psim_checkpoint_write(const char *path, int32_t n, const char *const *names,
                               PsimTensor *const *tensors, GError **error);
gboolean psim_checkpoint_read(const char *path, int32_t *n, char ***names, PsimTensor ***tensors,
                              GError **error);
/* The fault injector: TRUE when PSIM_FAULT (comma-separated WHAT:COUNT items, e.g. "step:7" or
 * "save:3") names this event; psim_fault_kill then kills the process with SIGKILL. */
gboolean psim_fault_due(const char *what, int64_t count);
void psim_fault_kill(const char *what, int64_t count) G_GNUC_NORETURN;

/* Generated data (graph/fill.c): what `run`, `profile` and `study --feed KIND` feed graph inputs
 * with, and what the profiler gives the kernels it times. */
typedef enum {
    PSIM_TENSOR_FILL_RANDOM, /* normal N(0, 1), reproducible from a seed */
    PSIM_TENSOR_FILL_ZEROS,
    PSIM_TENSOR_FILL_ONES,
    PSIM_TENSOR_FILL_RAMP, /* element i of n is i / n (arange(n)/n) */
    PSIM_TENSOR_FILL_UNIFORM, /* uniform [0, 1), reproducible from a seed (TF's RandomUniform) */
} PsimTensorFill;
/* The seed of every RANDOM feed unless told otherwise. */
#define PSIM_TENSOR_FILL_SEED 42
/* "random", "zeros", "ones", "ramp", "uniform"; from_name FALSE for anything else. */
const char *psim_tensor_fill_name(PsimTensorFill fill);
gboolean psim_tensor_fill_from_name(const char *name, PsimTensorFill *out);
/* Fills t's float32 and float64 elements (other dtypes are zeroed, or set to 1 by ONES: valid
 * indices). RANDOM is a stream of `seed` alone: the same seed and size give the same values on
 * any machine with the same libm. */
void psim_tensor_fill(PsimTensor *t, PsimTensorFill fill, uint64_t seed);
/* The stream of a named tensor (a graph input) under a base seed: inputs fed at once draw
 * different values, whatever order they are named in. */
uint64_t psim_tensor_fill_seed(uint64_t seed, const char *name);

/* ---------------------------------------------------------------------------------------- */
/* Attributes. */

typedef enum {
    PSIM_ATTR_INT,
    PSIM_ATTR_FLOAT,
    PSIM_ATTR_STRING,
    PSIM_ATTR_BOOL,
    PSIM_ATTR_DTYPE,
    PSIM_ATTR_SHAPE,
    PSIM_ATTR_TENSOR,
    PSIM_ATTR_INTS,
    PSIM_ATTR_FLOATS,
    PSIM_ATTR_STRINGS,
    PSIM_ATTR_BOOLS,
    PSIM_ATTR_DTYPES,
    PSIM_ATTR_SHAPES,
    PSIM_ATTR_TENSORS,
} PsimAttrType;

typedef struct {
    int32_t rank; /* PSIM_RANK_UNKNOWN or >= 0 */
    int64_t *dims;
} PsimShape;

typedef struct {
    const char *name;
    PsimAttrType type;
    int32_t n; /* element count for list types */
    union {
        int64_t i;
        double f;
        const char *s;
        gboolean b;
        PsimDType dt;
        PsimShape shape;
        PsimTensor *t;
        int64_t *ints;
        double *floats;
        const char **strs;
        gboolean *bools;
        PsimDType *dts;
        PsimShape *shapes;
        PsimTensor **ts;
    } v;
} PsimAttr;

const char *psim_attr_type_name(PsimAttrType t);

/* ---------------------------------------------------------------------------------------- */
/* Nodes. */

/* A data input: output `index` of node `node`; node == -1 is an absent optional input. */
typedef struct {
    int32_t node;
    int32_t index;
} PsimPort;

/* One output tensor of a node. bytes is the tensor's size: computed from the shape when it is
 * known, or given (abstract tensors of task graphs). */
typedef struct {
    const char *name; /* tensor name in the source format (ONNX); may be NULL */
    PsimDType dtype;
    int32_t rank;     /* PSIM_RANK_UNKNOWN if unknown */
    int64_t *dims;    /* PSIM_DIM_UNKNOWN entries allowed */
    uint64_t bytes;   /* 0 if unknown */
    PsimTensor *value; /* known constant value (Const nodes, folded shape arithmetic) */
} PsimOutput;

/* A cost annotation: `us` microseconds on a device matched by name or type. */
typedef struct {
    const char *device;
    double us;
} PsimCostAnn;

enum {
    PSIM_NODE_FED = 1u << 0,       /* a feed replaces this node's outputs */
    PSIM_NODE_CONSTANT = 1u << 1,  /* all outputs known before a step (constant subgraph) */
    PSIM_NODE_PARAMETER = 1u << 2, /* resident weights (initializers, variables) */
};

typedef struct PsimNode {
    int32_t id;
    uint32_t flags;
    const char *name;
    const char *op;
    int32_t n_inputs;
    int32_t n_controls;
    int32_t n_outputs;
    int32_t n_attrs;
    int32_t n_costs;
    PsimPort *inputs;
    int32_t *controls;
    PsimOutput *outputs;
    PsimAttr *attrs;
    PsimCostAnn *costs;
    const char *device;          /* requested device (full or partial name), or NULL */
    const char *assigned_device; /* placement already made, or NULL */
    const char *domain;          /* ONNX domain, NULL for the default */
} PsimNode;

/* ---------------------------------------------------------------------------------------- */
/* Graphs. */

typedef struct PsimGraph PsimGraph;

/* An empty graph named `name` (may be NULL). Free with psim_graph_free. */
PsimGraph *psim_graph_new(const char *name);
void psim_graph_free(PsimGraph *g);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimGraph, psim_graph_free)

const char *psim_graph_name(const PsimGraph *g);
void psim_graph_set_name(PsimGraph *g, const char *name);
/* The file the graph came from (for error messages); may be NULL. */
const char *psim_graph_source(const PsimGraph *g);
void psim_graph_set_source(PsimGraph *g, const char *path);
/* Sets an INPUT error "SOURCE: node 'NAME': MESSAGE" on one line (SOURCE: the graph's file, else
 * its name; without "node" when v < 0). */
void psim_graph_node_error(GError **error, const PsimGraph *g, int32_t v, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);
/* A counter bumped on every structural change; caches compare it. */
uint64_t psim_graph_version(const PsimGraph *g);
/* The ONNX opset version of the default domain the graph was written for, 0 when unknown (files
 * of other formats). Shape inference consults it where an op changed between opsets. */
int64_t psim_graph_opset(const PsimGraph *g);
void psim_graph_set_opset(PsimGraph *g, int64_t version);

int32_t psim_graph_n_nodes(const PsimGraph *g);
/* Node by id. Pointers stay valid until the graph is freed (nodes live in stable pages). */
PsimNode *psim_graph_node(const PsimGraph *g, int32_t id);
/* Node by name, or NULL. */
PsimNode *psim_graph_node_find(const PsimGraph *g, const char *name);
/* Number of data plus control edges. */
int64_t psim_graph_n_edges(const PsimGraph *g);

/* Copies `s` into the graph's arena (interned: equal strings share storage). */
const char *psim_graph_intern(PsimGraph *g, const char *s);
/* Zeroed arena memory that lives as long as the graph. */
void *psim_graph_alloc(PsimGraph *g, size_t size);

/* Adds a node. Its name must be unique: NULL with error if taken. Returns the node, owned by g. */
PsimNode *psim_graph_node_add(PsimGraph *g, const char *name, const char *op, GError **error);
/* Generates an unused name from `base` ("base", "base_1", ...); returns the interned name. */
const char *psim_graph_unique_name(PsimGraph *g, const char *base);
/* psim_graph_node_add(g, psim_graph_unique_name(g, base), op, error), with one name lookup
 * where base is free. */
PsimNode *psim_graph_node_add_unique(PsimGraph *g, const char *base, const char *op, GError **error);
/* A hash of a gint64 key (for g_hash_table_new with g_int64_equal) with all its bits mixed:
 * g_int64_hash folds the halves by XOR, so keys that pack two or three small ids (a device pair,
 * a node, an output and a device) fall on a few low bits and make long probe chains. */
guint psim_int64_hash(gconstpointer key);
/* Sizes the name index for n_nodes in all, so that adding them does not rehash it. */
void psim_graph_reserve(PsimGraph *g, int32_t n_nodes);

/* Inputs may be added before their producer exists: refs are "node", "node:k" or "^node"
 * strings resolved by psim_graph_finalize. Ports are already resolved ids. */
void psim_graph_node_input_add(PsimGraph *g, PsimNode *n, PsimPort p);
void psim_graph_node_input_add_ref(PsimGraph *g, PsimNode *n, const char *ref);
void psim_graph_node_control_add(PsimGraph *g, PsimNode *n, int32_t src);
/* Sets the number of outputs (new ones have unknown dtype and shape). */
void psim_graph_node_outputs_set(PsimGraph *g, PsimNode *n, int32_t n_outputs);
/* Sets output k's dtype and shape (dims copied; rank may be PSIM_RANK_UNKNOWN); updates bytes
 * when the shape is fully known. */
void psim_graph_output_set(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype, int32_t rank,
                           const int64_t *dims);
/* Sets output k's known value (takes a reference) and its dtype/shape from it. */
void psim_graph_output_value_set(PsimGraph *g, PsimNode *n, int32_t k, PsimTensor *t);

/* Attribute setters copy their arguments into the arena; setting an existing name replaces it. */
void psim_graph_node_attr_set_int(PsimGraph *g, PsimNode *n, const char *name, int64_t v);
void psim_graph_node_attr_set_float(PsimGraph *g, PsimNode *n, const char *name, double v);
void psim_graph_node_attr_set_string(PsimGraph *g, PsimNode *n, const char *name, const char *v);
void psim_graph_node_attr_set_bool(PsimGraph *g, PsimNode *n, const char *name, gboolean v);
void psim_graph_node_attr_set_dtype(PsimGraph *g, PsimNode *n, const char *name, PsimDType v);
void psim_graph_node_attr_set_shape(PsimGraph *g, PsimNode *n, const char *name, int32_t rank,
                                    const int64_t *dims);
void psim_graph_node_attr_set_tensor(PsimGraph *g, PsimNode *n, const char *name, PsimTensor *t);
void psim_graph_node_attr_set_ints(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                   const int64_t *v);
void psim_graph_node_attr_set_floats(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                     const double *v);
void psim_graph_node_attr_set_strings(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                      const char *const *v);
/* Generic: copies a whole attribute (any type) into n. */
void psim_graph_node_attr_set(PsimGraph *g, PsimNode *n, const PsimAttr *a);

void psim_graph_node_cost_set(PsimGraph *g, PsimNode *n, const char *device, double us);
void psim_graph_node_device_set(PsimGraph *g, PsimNode *n, const char *device);
void psim_graph_node_assigned_set(PsimGraph *g, PsimNode *n, const char *device);

/* Attribute getters (NULL / default when absent or of another type). */
const PsimAttr *psim_node_attr(const PsimNode *n, const char *name);
int64_t psim_node_attr_int(const PsimNode *n, const char *name, int64_t dflt);
double psim_node_attr_float(const PsimNode *n, const char *name, double dflt);
const char *psim_node_attr_string(const PsimNode *n, const char *name, const char *dflt);
/* List of ints (also accepts a single INT as a list of one); returns count, -1 if absent. */
int32_t psim_node_attr_ints(const PsimNode *n, const char *name, const int64_t **v);
/* Cost annotation for a device (exact name, then short name like "GPU:0", then type, then the
 * wildcard "*" that matches every device, as task graphs of identical processors use); returns
 * FALSE if none. */
gboolean psim_node_cost_lookup(const PsimNode *n, const char *device_name, const char *device_type,
                               double *us);

/* Graph inputs (fed tensors, in order) and outputs (fetched tensors, in order). */
void psim_graph_input_add(PsimGraph *g, int32_t node);
int32_t psim_graph_n_inputs(const PsimGraph *g);
int32_t psim_graph_input(const PsimGraph *g, int32_t i);
void psim_graph_output_add(PsimGraph *g, PsimPort p);
void psim_graph_output_add_ref(PsimGraph *g, const char *ref);
int32_t psim_graph_n_outputs(const PsimGraph *g);
PsimPort psim_graph_output(const PsimGraph *g, int32_t i);

/* Resolves input refs, and checks the graph: every input names an existing node and a valid
 * output index, and the graph is a DAG (a cycle is an error naming a node on it). Errors name
 * the source file and the node. */
gboolean psim_graph_finalize(PsimGraph *g, GError **error);

/* Parses "name", "name:k", "^name" into parts; returns FALSE on malformed refs. *name is a
 * newly allocated string (g_free). */
gboolean psim_ref_parse(const char *ref, char **name, int32_t *index, gboolean *control);
/* "name:k" (or "name" when k == 0 and short) in a newly allocated string. */
char *psim_port_to_string(const PsimGraph *g, PsimPort p);

/* ---------------------------------------------------------------------------------------- */
/* Structure: successors, topological order, critical path. */

/* Sorts ids ascending and drops repeats in place; returns how many are left (a node's few
 * sources: insertion sort up to 16, qsort past). */
int32_t psim_ids_sort_unique(int32_t *ids, int32_t n);

/* Successor lists (data and control, each consumer once per producer) in CSR form, computed on
 * first use and cached until the graph changes. off has n_nodes+1 entries. Owned by g. */
void psim_graph_succ(const PsimGraph *g, const int32_t **off, const int32_t **succ);
/* Predecessors (unique data producers and control sources), CSR, cached like psim_graph_succ. */
void psim_graph_pred(const PsimGraph *g, const int32_t **off, const int32_t **pred);

/* A topological order of all nodes (ties broken by node id, so it is deterministic), computed
 * with igraph. Returns a newly allocated array of n_nodes ids (g_free), or NULL with an error
 * naming a node on a cycle. */
int32_t *psim_graph_topo_order(const PsimGraph *g, GError **error);
/* Kahn's algorithm over CSR arrays of n nodes (each node's sources counted by pred_off, its
 * successors succ[succ_off[v]..succ_off[v+1]) in the order they are taken): sources in id order,
 * a FIFO queue. Returns an array of n + 1 (g_free) whose first *n_ordered ids are in
 * topological order; *n_ordered < n when the arrays have a cycle. */
int32_t *psim_kahn_order(int32_t n, const int32_t *pred_off, const int32_t *succ_off, const int32_t *succ,
                         int32_t *n_ordered);

/* Longest path through the graph with per-node costs cost[id] (microseconds) and optional
 * per-edge costs edge_cost(src, dst, user) (NULL: zero). Returns the length; *path (optional,
 * g_free) gets the nodes on it and *n_path their count. */
double psim_graph_critical_path(const PsimGraph *g, const double *cost,
                                double (*edge_cost)(const PsimGraph *g, int32_t src, int32_t dst,
                                                    void *user),
                                void *user, int32_t **path, int32_t *n_path, GError **error);

/* ---------------------------------------------------------------------------------------- */
/* Ops: the op set, shape and dtype inference, and counts. */

typedef struct {
    double flops;
    uint64_t bytes_read;
    uint64_t bytes_written;
} PsimOpCount;

enum {
    PSIM_OP_STATEFUL = 1u << 0, /* never merged by CSE nor folded (variables, random) */
    PSIM_OP_ABSTRACT = 1u << 1, /* no kernel can run it (Task) */
    PSIM_OP_SOURCE = 1u << 2,   /* Const, Placeholder */
    /* Some output dim is how many elements the data selects (NonZero, Compress, Unique,
     * NonMaxSuppression): inference leaves it unknown, as ONNX's own does. */
    PSIM_OP_DATA_SHAPED = 1u << 3,
};

typedef struct PsimOpDef {
    const char *name;
    const char *description;
    uint32_t flags;
    /* Sets n's outputs' dtypes and shapes from its inputs and attrs. Unknown input shapes give
     * unknown outputs, never an error; inconsistent ones are an error naming the node. */
    gboolean (*infer)(PsimGraph *g, PsimNode *n, GError **error);
    /* FLOPs and bytes moved, from known shapes (zeros where unknown). */
    void (*count)(const PsimGraph *g, const PsimNode *n, PsimOpCount *out);
    /* Number of outputs from attrs (Split...); NULL means one (zero for NoOp-like ops is -1 in
     * n_outputs_fixed). Used when a file does not list a node's outputs. */
    int32_t (*n_outputs)(const PsimNode *n);
    int32_t n_outputs_fixed; /* used when n_outputs is NULL: 0 means 1; -1 means none */
    /* The domain of an op from outside ONNX's default set ("ai.onnx.preview.training" for
     * Momentum and Adam, "com.microsoft" for ConvGrad): nodes of that domain get these semantics,
     * nodes of other non-default domains none. NULL: ONNX's default domain (and TF's ops). */
    const char *domain;
} PsimOpDef;

/* Registers an op (plug-ins do this too). The definition must outlive the process. */
void psim_op_register(const PsimOpDef *def);
const PsimOpDef *psim_op_lookup(const char *name);
/* TRUE for TensorFlow's variable ops that hold their value (Variable, VariableV2): what Assigns
 * name, a checkpoint saves and a replica reads. */
gboolean psim_op_is_variable(const char *op);
/* All registered ops, sorted by name; g_free the array, not the entries. */
const PsimOpDef **psim_op_list(int32_t *n);

/* Runs inference over the graph in topological order. */
gboolean psim_graph_infer_shapes(PsimGraph *g, GError **error);
void psim_graph_node_count(const PsimGraph *g, const PsimNode *n, PsimOpCount *out);

/* ---------------------------------------------------------------------------------------- */
/* Passes. Each returns a new graph (the input is unchanged); constants are shared. */

/* Reverse-mode gradients (graph/grad.c; the TF whitepaper, section 4.1): g copied (node ids
 * kept) with the gradient subgraph of the scalar tensor `loss` with respect to each of the n_wrt
 * tensors wrt added, built of ordinary ONNX ops; grads[i] gets the port of d loss / d wrt[i] in
 * the copy (zeros when the loss does not depend on it), each also added as a graph output.
 * Shapes must be known. An op whose gradient is not covered is an error naming the node. */
PsimGraph *psim_graph_gradients(const PsimGraph *g, PsimPort loss, int32_t n_wrt,
                                const PsimPort *wrt, PsimPort *grads, GError **error);
/* A training graph of g: a loss (loss_ref, "node" or "node:k"; NULL: g's first output taken as
 * class scores [N, C], or the input of a final Softmax, against a new int64 Placeholder
 * "labels" [N] by SoftmaxCrossEntropyLoss, mean, added as an output) and its gradients by every
 * float parameter (PSIM_NODE_PARAMETER), each a graph output. *n_params (optional) gets their
 * number. Errors as psim_graph_gradients. */
PsimGraph *psim_graph_training(const PsimGraph *g, const char *loss_ref, int32_t *n_params,
                               GError **error);

/* The training step as a graph (graph/train.c). */
typedef enum { PSIM_OPTIMIZER_SGD, PSIM_OPTIMIZER_ADAM } PsimOptimizer;
/* How a replica's ops read a variable (PsimTrainSpec.variable_reads, with replicas > 1). */
typedef enum {
    PSIM_READ_DIRECT, /* every reader takes the Variable's output: one crossing per worker */
    PSIM_READ_PER_OP, /* each reader through a read op of its own beside the variable (TensorFlow
                       * without caching_device): one crossing per reader */
    PSIM_READ_CACHED, /* one read per worker, on the worker, that its readers share (TensorFlow's
                       * caching_device on the worker): one crossing per worker */
} PsimVariableReads;
typedef struct {
    PsimOptimizer optimizer;
    double lr;
    /* > 0: the learning rate follows a cosine from lr at global step 0 to 0 at this step and
     * stays 0 after (Loshchilov & Hutter's SGDR without restarts; TensorFlow's cosine_decay),
     * computed in the graph from the global step, so a restored step resumes the schedule;
     * 0: lr throughout. */
    int64_t lr_decay_steps;
    double momentum;     /* SGD: 0 for plain SGD */
    double beta1, beta2; /* Adam's decay rates (0.9, 0.999 are Kingma & Ba's) */
    double epsilon;      /* Adam: added to the square root of the second moment */
    double weight_decay; /* L2 coefficient added to every gradient (ONNX norm_coefficient) */
    const char *loss;    /* as psim_graph_training's loss_ref (NULL: classifier) */
    const char *container; /* of the variables (NULL or "": the process's default) */
    gboolean checkpoint_ops; /* add the checkpoint ops (PsimTrainInfo) */
    /* > 0: the step takes its inputs from a FIFO queue of this many elements, "input/queue"
     * (node "input/dequeue" reads one element: every graph input, in order), filled by the
     * graph psim_graph_train_feeder makes; 0: the inputs are fed. */
    int64_t input_queue;
    /* Synchronous data parallelism (docs/training.md, "Replicas"): > 1 makes `replicas` copies
     * of the forward and gradient graph, replica r's nodes named "replica_r/NAME" and each with
     * inputs of its own (with input_queue, each dequeues one element, replica r after r - 1),
     * all reading the one copy of every variable; each gradient is the replicas' mean, applied
     * by one optimizer node. 0 or 1: one copy, names unchanged. */
    int32_t replicas;
    /* Optional device requests: replica r's nodes on worker_devices[r] (replicas names); each
     * variable, with its optimizer state, optimizer node, assignments (and, with replicas,
     * gradient mean) on ps_devices[k % n_ps] for the k-th variable (TensorFlow's round-robin
     * device setter); every other shared node (global step, checkpoint ops, input queue and
     * its dequeues) on ps_devices[0]. */
    const char *const *worker_devices;
    const char *const *ps_devices;
    int32_t n_ps;
    PsimVariableReads variable_reads; /* replicas > 1: how their ops read the variables */
    /* Asynchronous replicas (one step graph per replica, each run by its own session on the
     * shared variables; worker_devices[0] then takes the model's nodes): every update is
     * applied as the difference between the optimizer's result and the step's read of the
     * variable, added to the variable's value at that moment (AssignAdd, under its lock), so
     * that replicas updating at once never lose one another's update. */
    gboolean async_updates;
} PsimTrainSpec;
typedef struct {
    char *loss;        /* the scalar loss, "node:k" */
    char *scores;      /* the graph's first output (class scores), or NULL */
    char *train_op;    /* the target that runs one step */
    char *global_step; /* the int64 Variable counting steps */
    /* Checkpoints: feed "checkpoint/path" (string scalar), "checkpoint/epoch" and
     * "checkpoint/cursor" (int64 scalars: the input position) and run target "checkpoint/Save"
     * to write every variable; feed the path and fetch "checkpoint/restore_op" (and
     * "checkpoint/Restore:K" for the position, K = n_saved - 2 and n_saved - 1) to restore. */
    int32_t n_saved; /* tensors a checkpoint holds: every variable, then epoch and cursor */
    /* With input_queue: the graph inputs the queue's elements hold, in order (g_strfreev). */
    char **components;
    int32_t n_components;
    int32_t n_variables; /* trained parameters (optimizer state not counted) */
    int32_t replicas;    /* copies of the model in the step (1 without data parallelism) */
    char *dequeue;       /* with input_queue: the node whose output 0 evaluation feeds (replica 0's) */
} PsimTrainInfo;
/* The training step of g: psim_graph_training's forward and gradient graph, with every trained
 * parameter a VariableV2 of spec->container initialised from its weights (same name), one
 * optimizer node per parameter (ONNX Momentum, or Adam, domain ai.onnx.preview.training) whose
 * results are Assigned to the parameter and to its state variables (NAME/momentum, NAME/adam_m,
 * NAME/adam_v, zeros at first), a global_step counter, the target train_op after every
 * Assign, and with spec->checkpoint_ops the checkpoint ops (PsimTrainInfo). The graph's outputs
 * are "train/loss" (the loss, after train_op: fetching it runs one step) and the class scores.
 * Running train_op once (feeding the inputs and "labels") is one step. Fills info
 * (psim_train_info_clear). Errors as psim_graph_training; USAGE for bad hyper-parameters. */
PsimGraph *psim_graph_train_step(const PsimGraph *g, const PsimTrainSpec *spec,
                                 PsimTrainInfo *info, GError **error);
void psim_train_info_clear(PsimTrainInfo *info);
/* The input pipeline's other end for a step made with input_queue (the QueueRunner of the
 * whitepaper's input ops): Placeholders "input/component_K" (the queue's components' dtypes and
 * shapes), target "input/enqueue" adding them as one element (blocking while the queue is
 * full), and target "input/close". Run it on a thread of its own beside the steps. */
PsimGraph *psim_graph_train_feeder(const PsimGraph *step, GError **error);

/* Keeps what the fetches need, cutting at fed tensors (partial execution). feeds are data refs
 * ("node:k"); fetches are data refs, targets ("^node"), or a bare "node" (meaning "node:0" if
 * it has outputs, else the target); no fetches means the graph's outputs. The rule: keep every
 * node a fetch reaches backwards through data and control inputs, stopping at fed nodes. A fed
 * node stays as a source: op "Placeholder", flag PSIM_NODE_FED, same name, outputs (dtype and
 * shape, no constant value) and device request, no inputs, controls, attrs or costs, and
 * PARAMETER/CONSTANT cleared. All outputs of a fed node come from feeds: a kept consumer or a
 * fetch of an output that is not fed is an error naming both nodes. The result's inputs are
 * the kept original inputs, then fed nodes not among them; its outputs are the data fetches.
 * Free the result with psim_graph_free. */
PsimGraph *psim_graph_prune(const PsimGraph *g, const char *const *feeds, int n_feeds,
                            const char *const *fetches, int n_fetches, GError **error);
/* Common-subexpression elimination by value numbering over (op, domain, requested and assigned
 * device, inputs by value number, control inputs as a set, attrs including tensor contents,
 * declared outputs, cost annotations), in topological order so merges cascade. Never merged:
 * stateful and abstract ops, unregistered ops, Placeholders, fed nodes and initializers
 * (PSIM_NODE_PARAMETER); equal Const nodes are merged. *n_merged gets the count merged. */
PsimGraph *psim_graph_cse(const PsimGraph *g, int32_t *n_merged, GError **error);
/* Operator fusion, as ONNX Runtime makes it (graph/fuse.c): Conv and the activation after it
 * become com.microsoft FusedConv; Sigmoid and Mul(x, sigmoid(x)) QuickGelu (alpha 1); the
 * Div/Erf/Add/Mul/Mul of an exported GELU Gelu. A chain fuses only where can_run(op, dtype,
 * user) says every device that may run it has a kernel for the fused op. *fused gets the new
 * graph (psim_graph_free), or NULL when nothing fused; *n_removed the nodes it has fewer.
 * FALSE with an error only when the new graph cannot be built. */
gboolean psim_graph_fuse(const PsimGraph *g, gboolean (*can_run)(const char *op, PsimDType dt, void *user),
                         void *user, PsimGraph **fused, int32_t *n_removed, GError **error);
/* Folds shape arithmetic on int64 (Shape, Gather, Concat, Unsqueeze, Squeeze, Slice, Cast,
 * Reshape, elementwise) where inputs are known, setting outputs' values; returns the count.
 * It runs shape inference in the same topological pass (a Shape needs its input's shape, a
 * Reshape its folded shape), so it also infers every node; -1 with an error when inference
 * finds inconsistent shapes. Only small results get values (integer tensors up to 65536
 * elements, float ones up to 64; never ConstantOfShape's float weights). Nodes whose outputs
 * are all known before a step (Const, initializers, folded nodes, and pure ops whose data
 * inputs are all constant, such as weights made by ConstantOfShape) are flagged
 * PSIM_NODE_CONSTANT. */
int32_t psim_graph_fold_constants(PsimGraph *g, GError **error);

/* A summary for `inspect`. flops and activation_bytes sum over non-constant nodes.
 * param_bytes counts what stays resident between steps: outputs of constant nodes consumed by a
 * non-constant node (or by nothing), i.e. initializers and Const nodes of any dtype and float
 * weights computed by constant subgraphs (ConstantOfShape); a constant consumed only inside a
 * constant subgraph is not counted, so each weight counts once. */
typedef struct {
    int32_t n_nodes;
    int64_t n_edges;
    double flops;
    uint64_t param_bytes;
    uint64_t activation_bytes;
} PsimGraphStats;
void psim_graph_stats(const PsimGraph *g, PsimGraphStats *out);


/* ---------------------------------------------------------------------------------------- */
/* Input files: every file placesim reads goes through one bounded reader, and every JSON file
 * through one depth-limited parser (graph/io.c, graph/json-read.c). */

/* The largest input file: models with their weights, and plans that embed them. */
#define PSIM_INPUT_MAX_BYTES (G_GUINT64_CONSTANT(4) << 30)
/* How many of the first bytes a PsimInputSniff sees (all of a shorter file). */
#define PSIM_INPUT_HEAD 4096
/* Returns NULL when the first bytes may open a file of the expected kind, else the reason
 * (static text) they cannot. Lets a stream of the wrong kind (/dev/zero) stop at once. */
typedef const char *(*PsimInputSniff)(const char *path, const guint8 *head, gsize len);
/* Reads a whole input file: "-" is stdin; regular files are mapped, others (pipes, devices,
 * stdin) read in chunks. Directories, files larger than max_bytes and files whose first bytes
 * sniff (may be NULL) rejects are a PSIM_ERROR_INPUT error naming path. The data is not
 * NUL-terminated. Free with g_bytes_unref. */
GBytes *psim_input_read(const char *path, guint64 max_bytes, PsimInputSniff sniff,
                        GError **error);

/* JSON nested deeper than this is refused before json-glib (which recurses) parses it. */
#define PSIM_JSON_MAX_DEPTH 512
/* json-glib's types (C11 allows this repeat of its typedefs). */
typedef struct _JsonNode JsonNode;
typedef struct _JsonObject JsonObject;
typedef struct _JsonArray JsonArray;
/* Parses JSON text: nesting is checked first, by an iterative scan; errors are one line naming
 * path. Returns the root (never NULL on success); free with json_node_unref. */
JsonNode *psim_json_parse(const char *path, const char *data, gsize len, GError **error);
/* psim_input_read (first bytes must open a JSON object or list) + psim_json_parse. */
JsonNode *psim_json_load(const char *path, GError **error);

/* Typed access to members of a JSON object. Errors read "PATH: WHERE: field 'KEY' ...", WHERE
 * being the node, device or list entry ("node 'fc1'", "transfers[3]"; NULL: top level). An
 * absent member (or JSON null) leaves *out unchanged and is not an error; a member of another
 * type, or a number that is not finite or outside [lo, hi], is a PSIM_ERROR_INPUT error. */
typedef struct {
    const char *path;
    const char *where;
} PsimJsonAt;
gboolean psim_json_fail(const PsimJsonAt *at, GError **error, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
gboolean psim_json_get_string(const PsimJsonAt *at, JsonObject *o, const char *key,
                              const char **out, GError **error);
gboolean psim_json_get_number(const PsimJsonAt *at, JsonObject *o, const char *key, double lo,
                              double hi, double *out, GError **error);
gboolean psim_json_get_int(const PsimJsonAt *at, JsonObject *o, const char *key, int64_t lo,
                           int64_t hi, int64_t *out, GError **error);
gboolean psim_json_get_bool(const PsimJsonAt *at, JsonObject *o, const char *key, gboolean *out,
                            GError **error);
gboolean psim_json_get_array(const PsimJsonAt *at, JsonObject *o, const char *key,
                             JsonArray **out, GError **error);
gboolean psim_json_get_object(const PsimJsonAt *at, JsonObject *o, const char *key,
                              JsonObject **out, GError **error);
/* A value node's string (NULL when n is not a string), number (int or double) or integer. */
const char *psim_json_node_string(JsonNode *n);
gboolean psim_json_node_number(JsonNode *n, double *out);
gboolean psim_json_node_int(JsonNode *n, int64_t *out);

/* ---- The fast JSON document (yajl): what big files (graphs, plans) are read with ----
 * yajl's event parser builds a compact read-only tree in one arena (values of 16 bytes, members
 * of 24, strings interned in the arena), about ten times faster than json-glib's tree and a
 * fifth of its memory. Integers are kept exact where they fit int64 (else read as doubles, as
 * json-glib does); an object's members keep their order, and a key given twice reads as its
 * last value. Nesting is bounded by PSIM_JSON_MAX_DEPTH; errors are one line naming path. */
typedef enum {
    PSIM_J_NULL = 0,
    PSIM_J_BOOL,
    PSIM_J_INT,
    PSIM_J_DOUBLE,
    PSIM_J_STRING,
    PSIM_J_ARRAY,
    PSIM_J_OBJECT,
} PsimJType;
typedef struct PsimJ PsimJ;
typedef struct PsimJMember PsimJMember;
struct PsimJ {
    uint32_t type; /* PsimJType */
    uint32_t n;    /* elements (array), members (object), bytes (string) */
    union {
        gboolean b;
        int64_t i;
        double d;
        const char *s;     /* NUL-terminated */
        const PsimJ *a;    /* n elements */
        const PsimJMember *m; /* n members */
    } v;
};
struct PsimJMember {
    const char *key;
    PsimJ v;
};
typedef struct PsimJDoc PsimJDoc;
PsimJDoc *psim_jdoc_parse(const char *path, const char *data, gsize len, GError **error);
/* psim_input_read (first bytes must open a JSON object or list) + psim_jdoc_parse. */
PsimJDoc *psim_jdoc_load(const char *path, GError **error);
const PsimJ *psim_jdoc_root(const PsimJDoc *d);
void psim_jdoc_free(PsimJDoc *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimJDoc, psim_jdoc_free)
/* Member key of object o (NULL when o is not an object or has no such member). */
const PsimJ *psim_j_get(const PsimJ *o, const char *key);
/* The member, or NULL when it is absent or JSON null (both mean "not given"). */
const PsimJ *psim_j_given(const PsimJ *o, const char *key);
/* A string's text (NULL for other types); a number as double (int or double); an integer. */
const char *psim_j_string(const PsimJ *v);
gboolean psim_j_number(const PsimJ *v, double *out);
gboolean psim_j_int(const PsimJ *v, int64_t *out);
/* Typed members, as psim_json_get_* above (same messages). */
gboolean psim_j_get_string(const PsimJsonAt *at, const PsimJ *o, const char *key,
                           const char **out, GError **error);
gboolean psim_j_get_number(const PsimJsonAt *at, const PsimJ *o, const char *key, double lo,
                           double hi, double *out, GError **error);
gboolean psim_j_get_int(const PsimJsonAt *at, const PsimJ *o, const char *key, int64_t lo,
                        int64_t hi, int64_t *out, GError **error);
gboolean psim_j_get_bool(const PsimJsonAt *at, const PsimJ *o, const char *key, gboolean *out,
                         GError **error);
/* A list (PSIM_J_ARRAY) or an object (PSIM_J_OBJECT) member; *out stays NULL when absent. */
gboolean psim_j_get_array(const PsimJsonAt *at, const PsimJ *o, const char *key,
                          const PsimJ **out, GError **error);
gboolean psim_j_get_object(const PsimJsonAt *at, const PsimJ *o, const char *key,
                           const PsimJ **out, GError **error);
/* v as compact JSON text, appended to s (recursive: v's depth is bounded by the parser). */
void psim_j_write(GString *s, const PsimJ *v);

/* Sane ranges of the numbers files give, checked at load so that absurd values (a cost of
 * 1e308) never reach the placer or the simulator: costs, latencies and overheads in
 * microseconds; rates in GB/s or GFLOP/s; sizes in bytes. */
#define PSIM_MAX_US 1e9
#define PSIM_MAX_RATE 1e6
#define PSIM_MAX_BYTES (INT64_C(1) << 62)

/* Built-in models (the zoo), made in code so that a fresh clone can run without files. */
const char *const *psim_zoo_list(int32_t *n);
/* A graph of a built-in model (NULL with an error naming the known models); the graph is
 * finalized and shapes are inferred. Free with psim_graph_free. */
PsimGraph *psim_zoo_make(const char *name, GError **error);
/* A one-line description of a built-in model (static storage), or NULL. */
const char *psim_zoo_description(const char *name);
/* The shape a built-in model is made for: input [batch, channels, height, width] (mlp takes it
 * flattened) and the number of classes. */
typedef struct {
    int64_t batch, channels, height, width, classes;
} PsimZooShape;
/* The default shape of a model made for other shapes too (mlp, cnn); FALSE for the others. */
gboolean psim_zoo_shape(const char *name, PsimZooShape *out);
/* psim_zoo_make with another input shape (mlp and cnn; NULL: the default); a USAGE error for a
 * model whose shape is fixed or a shape out of range. */
PsimGraph *psim_zoo_make_shaped(const char *name, const PsimZooShape *shape, GError **error);

/* ---------------------------------------------------------------------------------------- */
/* Statistics over doubles (graph/stats.c). */

/* qsort comparator of doubles, ascending (NaN compares equal to everything). */
int psim_stats_cmp_double(const void *a, const void *b);
/* Sorts v[0..n) ascending, in place. */
void psim_stats_sort(double *v, int64_t n);
/* The median of v[0..n) (the mean of the middle two when n is even), sorting v in place; NaN
 * when n <= 0. */
double psim_stats_median(double *v, int64_t n);
/* The mean of v[0..n) without its floor(n * frac) lowest and highest values (frac in [0, 0.5];
 * the median when nothing would be left), sorting v in place; NaN when n <= 0. Step and op times
 * on a shared host are a mixture of a fast and a slow spell (docs/validation.md): a median jumps
 * from one to the other as their shares cross a half, this moves with the shares. */
double psim_stats_trimmed_mean(double *v, int64_t n, double frac);
/* The trim of placesim's time figures: measured steps (study), in-situ op times and gaps. */
#define PSIM_STATS_TRIM 0.1

G_END_DECLS

#endif
