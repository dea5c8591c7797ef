/* The kernel registry, keyed by (op, device type, dtype), and the interface every kernel
 * implements. A kernel states its workspace needs and whether it is asynchronous; placement asks
 * the registry which device types can run a node. Plug-ins (GModule .so files) register more. */
#ifndef PLACESIM_KERNELS_H
#define PLACESIM_KERNELS_H

#include "placesim/graph.h"

G_BEGIN_DECLS

typedef struct PsimKernelCtx PsimKernelCtx;

/* What a kernel sees when it runs. The executor fills it. */
struct PsimKernelCtx {
    const PsimGraph *graph;
    const PsimNode *node;
    int32_t n_inputs;
    PsimTensor *const *inputs; /* NULL entries for absent optional inputs */
    int32_t n_outputs;
    PsimTensor **outputs;      /* the kernel sets each with ctx->alloc (or a ref to an input) */
    void *workspace;           /* workspace(...) bytes on the device, or NULL */
    size_t workspace_bytes;
    void *device;              /* the executor's worker running the kernel (opaque to kernels) */
    void *device_context;      /* its class's device context (CUDA: stream and handles); NULL
                                  for host devices */
    const char *device_type;   /* "CPU", "GPU" */
    void *state;               /* what prepare() returned */
    uint64_t constant_inputs;  /* bit k (k < 64): input k is the same tensor, unchanged, on every
                                  run (a constant the executor evaluated once, or a value in the
                                  graph); a kernel may keep what it derives from it */
    /* Allocates a tensor on the kernel's device; NULL with error when out of memory. */
    PsimTensor *(*alloc)(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank, const int64_t *dims,
                         GError **error);
    void *alloc_user;
    /* The same without zeroing the data (NULL: use alloc), for a kernel that writes every element
     * of its output: the executor's zeroing was a whole extra pass over each output (8% of
     * mobilenet_v2's step). */
    PsimTensor *(*alloc_uninit)(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank, const int64_t *dims,
                                GError **error);
};

typedef struct PsimKernelDef {
    const char *op;
    const char *device_type; /* "CPU", "GPU" */
    PsimDType dtype;         /* of the first data input; UNDEFINED matches any */
    const char *name;
    const char *description;
    gboolean async;          /* returns before the work is done (CUDA stream order) */
    /* Workspace bytes for node n (NULL: none). */
    size_t (*workspace)(const PsimGraph *g, const PsimNode *n);
    /* Optional once-per-node setup when a graph is prepared (descriptors, algorithm choice);
     * sets *state, released by release(). */
    gboolean (*prepare)(const PsimGraph *g, const PsimNode *n, void *device, void **state,
                        GError **error);
    void (*release)(void *state);
    /* Runs the node: reads ctx->inputs, sets ctx->outputs. Errors name the node. */
    gboolean (*run)(PsimKernelCtx *ctx, GError **error);
    /* Optional: memory the state keeps and every run reads (weights in a kernel's own layout),
     * *p NULL when none; the profiler evicts it from the caches with the constant inputs when
     * it times a node with cold weights. */
    void (*state_memory)(void *state, const void **p, size_t *bytes);
} PsimKernelDef;

/* Registers a kernel (built-ins at first use; plug-ins from their init). The definition must
 * outlive the process. A later registration for the same key replaces the earlier one. */
void psim_kernel_register(const PsimKernelDef *def);
/* The kernel for (op, device type, dtype), falling back to dtype UNDEFINED; NULL if none. */
const PsimKernelDef *psim_kernel_lookup(const char *op, const char *device_type, PsimDType dtype);
/* The kernel for node n of g on device_type (dtype from its first data input, else output). */
const PsimKernelDef *psim_kernel_for_node(const PsimGraph *g, const PsimNode *n,
                                          const char *device_type);
/* TRUE if some registered kernel runs node n of g on devices of `device_type`. */
gboolean psim_kernel_supported(const PsimGraph *g, const PsimNode *n, const char *device_type);
/* All registered kernels (sorted by op, device type, dtype); g_free the array only. */
const PsimKernelDef **psim_kernel_list(int32_t *n);

/* State: variables in containers (the whitepaper's resource containers). A variable is a slot
 * holding a reference-counted tensor; reading it takes a reference to the current tensor, and an
 * assignment replaces the tensor (the old one lives on while a reader holds it). So a step's
 * reads of a variable all see the value it had when the Variable node ran, however the step's
 * updates interleave with them, and runs are deterministic. Containers are process-wide,
 * created on first use, and live until reset; "" is the process's default container. */
typedef struct PsimVariable PsimVariable;
/* The variable `name` of `container` (NULL or "" for the default), created empty when `create`;
 * NULL when it does not exist and `create` is FALSE. The container owns it. */
PsimVariable *psim_variable_get(const char *container, const char *name, gboolean create);
/* A reference to the variable's tensor (psim_tensor_unref), or NULL before it is assigned. */
PsimTensor *psim_variable_read(PsimVariable *v);
/* Makes t (a reference is taken) the variable's value. */
void psim_variable_assign(PsimVariable *v, PsimTensor *t);
/* A read-modify-write under the variable's lock (AssignAdd's, as TensorFlow's use_locking):
 * fn gets the current value (NULL before any assignment) and returns the new one (its
 * reference is taken over; NULL leaves the value and fails). Two updates never lose one
 * another, whichever sessions run them. */
typedef PsimTensor *(*PsimVariableUpdate)(const PsimTensor *cur, gpointer data, GError **error);
gboolean psim_variable_update(PsimVariable *v, PsimVariableUpdate fn, gpointer data, GError **error);
/* The variable names of a container, sorted (g_strfreev); an empty vector for none. */
char **psim_container_names(const char *container);
/* Drops every variable of the container (their tensors go with the last reader). */
void psim_container_reset(const char *container);

/* Queues (TensorFlow's FIFOQueue and RandomShuffleQueue): elements are tuples of tensors,
 * held by reference. Enqueue blocks while the queue is full, dequeue while it is empty (a
 * shuffling queue: while it holds no more than min_after_dequeue, until closed); once closed,
 * enqueue fails and dequeue fails when nothing is left (TensorFlow's OutOfRange). They live in
 * the containers beside variables. */
typedef struct PsimQueue PsimQueue;
typedef struct {
    int32_t n_components;
    int64_t capacity;          /* elements; <= 0: unbounded */
    gboolean shuffle;          /* dequeue a uniformly drawn element */
    int64_t min_after_dequeue; /* shuffle: what stays behind a dequeue until closed */
    uint64_t seed;             /* shuffle: the draw's seed */
} PsimQueueSpec;
/* The queue `name` of `container`, created from spec when missing and spec is given (NULL:
 * only an existing one). A queue found with another number of components is an error. */
PsimQueue *psim_queue_get(const char *container, const char *name, const PsimQueueSpec *spec,
                          GError **error);
/* Takes a reference to each of the spec's n_components tensors. */
gboolean psim_queue_enqueue(PsimQueue *q, PsimTensor *const *components, GError **error);
/* Sets components[0..n) to the element's tensors (references, the caller unrefs). */
gboolean psim_queue_dequeue(PsimQueue *q, PsimTensor **components, GError **error);
/* Closes the queue; with cancel, enqueues waiting for room fail at once. Wakes every waiter. */
void psim_queue_close(PsimQueue *q, gboolean cancel);
int64_t psim_queue_size(PsimQueue *q);

/* Sets flush-to-zero and denormals-are-zero on the calling thread (x86 MXCSR FTZ and DAZ,
 * AArch64 FPCR.FZ; nothing elsewhere): denormals cost a microcode assist each, which would make a
 * kernel's time depend on its data. Every thread that runs kernels calls it once before the
 * first: executor and profiler workers (exec/worker.c), benchmarks that run kernels inline. */
void psim_kernel_thread_init(void);
/* TRUE if the calling thread flushes denormals (psim_kernel_thread_init was called on it). */
gboolean psim_kernel_thread_flushes(void);

/* Loads a plug-in: a shared library exporting
 *   gboolean psim_plugin_init(GError **error);
 * which registers ops (psim_op_register) and kernels (psim_kernel_register). */
gboolean psim_plugin_load(const char *path, GError **error);

G_END_DECLS

#endif
