/* Helpers shared by the op definition files (ops-*.c). */
#ifndef PLACESIM_OPS_PRIVATE_H
#define PLACESIM_OPS_PRIVATE_H

#include "graph-private.h"

/* Registers an array of definitions (called under psim__ops_init only). */
void psim__ops_register_group(const PsimOpDef *defs, size_t n);
void psim__ops_register_basic(void);
void psim__ops_register_tf(void);
void psim__ops_register_math(void);  /* ops-math.c: elementwise, MatMul/Gemm, reductions */
void psim__ops_register_nn(void);    /* ops-nn.c: Conv, pooling, normalization, Dropout */
void psim__ops_register_shape(void); /* ops-shape.c: Reshape, Slice, Concat, Gather, ... */
void psim__ops_register_train(void); /* ops-train.c: optimizers, Save, Restore */

/* The op definition for n, or NULL when n's op is unknown or belongs to a non-ONNX domain
 * (custom ops named like ONNX ones must not get ONNX semantics). */
const PsimOpDef *psim__op_for_node(const PsimNode *n);

/* The tensor feeding input k of n, or NULL when the input is absent. */
static inline const PsimOutput *psim__input(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    if (k >= n->n_inputs || n->inputs[k].node < 0)
        return NULL;
    const PsimNode *src = psim_graph_node(g, n->inputs[k].node);
    return n->inputs[k].index < src->n_outputs ? &src->outputs[n->inputs[k].index] : NULL;
}

/* ---- Inference helpers (ops-util.c) ---- */

/* An infer function for ops whose outputs the file or the builder sets (Placeholder, NoOp,
 * Send, Save, enqueues): nothing to infer. */
gboolean psim__infer_keep(PsimGraph *g, PsimNode *n, GError **error);
/* Largest rank inference works with; higher ranks are rejected as bad input. */
#define PSIM__MAX_RANK 32

/* Sets output k of n to dtype/shape after checking the shape: dims must be >= 0 or
 * PSIM_DIM_UNKNOWN, rank <= PSIM__MAX_RANK, and the known dims must not describe more than
 * PSIM_MAX_ELEMENTS elements. Where the inference knows less than the file did (unknown rank
 * or dims, undefined dtype), what the file gave is kept. FALSE with an error naming n. */
gboolean psim__out_set(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype, int32_t rank,
                       const int64_t *dims, GError **error);
/* Output k with the dtype known and the shape unknown. */
void psim__out_unknown(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype);
/* Input k's output record when its rank is known, else NULL. */
const PsimOutput *psim__input_ranked(const PsimGraph *g, const PsimNode *n, int32_t k);
/* Dtype of input k (UNDEFINED when absent). */
PsimDType psim__input_dtype(const PsimGraph *g, const PsimNode *n, int32_t k);
/* The constant value of input k (Const, initializer or folded), or NULL. */
const PsimTensor *psim__input_value(const PsimGraph *g, const PsimNode *n, int32_t k);
/* Reads input k's constant value as at most `max` integers into buf. Returns the count, -1
 * when the value is unknown, or -2 with an error when it has more than max elements or is not
 * numeric. */
int32_t psim__input_ints(const PsimGraph *g, const PsimNode *n, int32_t k, int64_t *buf,
                         int32_t max, const char *what, GError **error);
/* An element of a partially known integer tensor whose value is not known. */
#define PSIM__UNKNOWN_VALUE INT64_MIN
/* Like psim__input_ints, but when the value is not known, reconstructs what can be known of
 * a small 1-D or scalar integer tensor from how it was made (Shape, Concat, Pack, Unsqueeze,
 * Squeeze, Reshape, Cast, Gather, Slice of those): elements not known are
 * PSIM__UNKNOWN_VALUE. This is how Reshape(x, Concat(Shape(x)[0], [28, 28])) keeps its 28s
 * when the batch is unknown. Returns -1 when not even the length is known. */
int32_t psim__input_partial_ints(const PsimGraph *g, const PsimNode *n, int32_t k, int64_t *buf,
                                 int32_t max, const char *what, GError **error);

/* Normalizes axis (negative counts from the end) against rank; error naming n when out of
 * [-rank, rank). */
gboolean psim__axis(const PsimGraph *g, const PsimNode *n, int64_t axis, int32_t rank,
                    int32_t *out, GError **error);
/* Numpy multidirectional broadcasting of (ra, a) and (rb, b) into out (rank in *rout). Unknown
 * dims broadcast to unknown unless the other side fixes them. */
gboolean psim__broadcast(const PsimGraph *g, const PsimNode *n, int32_t ra, const int64_t *a,
                         int32_t rb, const int64_t *b, int32_t *rout, int64_t *out,
                         GError **error);
/* Product of dims[from..to), or -1 if one of them is unknown. */
int64_t psim__dims_prod(const int64_t *dims, int32_t from, int32_t to);
/* Element count of output k of n, or 0 when unknown. */
int64_t psim__out_elems(const PsimNode *n, int32_t k);
/* Element count of input k of n, or 0 when unknown. */
int64_t psim__in_elems(const PsimGraph *g, const PsimNode *n, int32_t k);
/* Bytes read (all present inputs) and written (all outputs); flops left at zero. */
void psim__count_io(const PsimGraph *g, const PsimNode *n, PsimOpCount *out);
/* A count function: data movement only. */
void psim__count_move(const PsimGraph *g, const PsimNode *n, PsimOpCount *out);

/* ---- Shared by inference and folding (ops-shape.c) ---- */

/* Resolves one axis of a Slice per ONNX: clamps start and end to dim (known) and returns the
 * length; *first gets the first index taken. */
int64_t psim__slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first);

typedef struct {
    int32_t n; /* number of sliced axes */
    int64_t starts[PSIM__MAX_RANK], ends[PSIM__MAX_RANK], axes[PSIM__MAX_RANK],
        steps[PSIM__MAX_RANK];
} PsimSliceParams;

/* Reads Slice's parameters (attrs before opset 10, inputs after) for an input of `rank`, axes
 * normalized. Returns 1 when all are known, 0 when some are computed at run time (then
 * *axes_known says whether p->axes and p->n hold the sliced axes), -1 with an error. */
int psim__slice_params(const PsimGraph *g, const PsimNode *n, int32_t rank, PsimSliceParams *p,
                       gboolean *axes_known, GError **error);

/* Shape's [start, end) over a rank-`rank` input after ONNX-15 clamping. */
void psim__shape_range(const PsimNode *n, int32_t rank, int32_t *start, int32_t *end);

/* ---- Folding (fold.c) ---- */

/* Computes the value of n's outputs when n is foldable shape arithmetic and its inputs are
 * known and small. Returns 1 when a value was set, 0 when not foldable, -1 on error (an index
 * out of range in the values, say). */
int psim__fold_node(PsimGraph *g, PsimNode *n, GError **error);

/* TRUE when `op` is one of the TF-specific ops ops-tf.c registers (StridedSlice, Pack...). */
gboolean psim__ops_tf_owns(const char *op);

#endif
