/* The real executor (the TensorFlow whitepaper's): device workers, the per-device executor that
 * runs a (sub)graph with pending counts and a ready queue, and sessions that prune, prepare and
 * cache executors per feeds/fetches signature.
 *
 * Layers, bottom up:
 *  - PsimWorker: one device. A CPU device is a thread pinned to its cores; a GPU device will be a
 *    host thread driving CUDA streams. Work is posted to the worker's thread as closures.
 *  - PsimExecutor: one (sub)graph on one worker. Prepared once (pruned to the fetches and cut
 *    at the feeds, constant subgraphs evaluated, kernels looked up and prepared, pending counts
 *    and tensor use counts precomputed); each step then dispatches without hashing or
 *    per-node bookkeeping allocations. Tensors are reference counted and released when their
 *    last consumer finishes.
 *  - PsimSession: a graph on a cluster; run(feeds, fetches) looks its signature up in a cache of
 *    prepared executors, preparing one (which prunes) on a miss. With several devices (a Plan),
 *    the graph is pruned (psim_graph_prune), placed and partitioned, and each device gets one
 *    executor over its partition, Send/Recv through a rendezvous. */
#ifndef PLACESIM_EXEC_H
#define PLACESIM_EXEC_H

#include "placesim/cluster.h"
#include "placesim/cost.h"
#include "placesim/graph.h"
#include "placesim/kernels.h"
#include "placesim/placer.h"
#include "placesim/plan.h"
#include "placesim/timeline.h"

G_BEGIN_DECLS

/* Microseconds on the monotonic clock that every executor timestamp uses. */
double psim_exec_now_us(void);

/* ---------------------------------------------------------------------------------------- */
/* Device workers. */

typedef struct PsimWorker PsimWorker;

/* How a device class (include/placesim/device.h, its `worker`) runs its devices. All hooks run
 * on the worker's own thread. */
typedef struct PsimWorkerClass {
    const char *description;
    /* Once, when the thread starts: pin to cores, set BLAS threads, create streams. */
    gboolean (*thread_init)(PsimWorker *w, GError **error);
    void (*thread_fini)(PsimWorker *w);
    /* Waits for asynchronous kernels (stream order) at the end of a step; NULL: nothing. */
    gboolean (*sync)(PsimWorker *w, GError **error);
    /* Device memory for tensors (NULL: host memory from the worker's pool). mem_alloc returns
     * `bytes` of zeroed memory or NULL with a RUNTIME error; mem_free may run on any thread,
     * after the worker is gone. Tensors so allocated have device = device_index. */
    void *(*mem_alloc)(PsimWorker *w, size_t bytes, GError **error);
    void (*mem_free)(void *ptr);
    int device_index;
    /* A new host tensor with the data of t, which is in this worker's device memory (fetches,
     * tensors sent to another device). NULL: tensors are host memory already. */
    PsimTensor *(*to_host)(PsimWorker *w, PsimTensor *t, GError **error);
    /* Copies host tensor src into dst, a tensor in this worker's device memory of the same
     * size, and returns when src may be freed. NULL: tensors are host memory already. */
    gboolean (*from_host)(PsimWorker *w, PsimTensor *dst, const PsimTensor *src, GError **error);
} PsimWorkerClass;

/* Work run on a worker's thread. A FALSE return sets the error that psim_worker_wait reports. */
typedef gboolean (*PsimWorkerFn)(PsimWorker *w, void *arg, GError **error);

/* Starts a worker for `device` (not copied: it must outlive the worker), or, when device is
 * NULL, an unpinned host CPU worker. Returns after the thread has started and pinned itself;
 * NULL with an error (RUNTIME) if pinning fails, or (UNSUPPORTED) for a device type without a
 * worker class. Free with psim_worker_free, which joins the thread. */
PsimWorker *psim_worker_new(const PsimDevice *device, GError **error);
void psim_worker_free(PsimWorker *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimWorker, psim_worker_free)

const PsimDevice *psim_worker_device(const PsimWorker *w);
/* "CPU", "GPU": the type kernels are looked up for. */
const char *psim_worker_device_type(const PsimWorker *w);
/* The short device name ("CPU:0"), or "CPU" for the host worker. */
const char *psim_worker_name(const PsimWorker *w);
/* Queues fn(w, arg) on the worker's thread and returns at once. */
void psim_worker_post(PsimWorker *w, PsimWorkerFn fn, void *arg);
/* Waits until everything posted so far has run. FALSE with the first error any of them
 * returned since the last wait (later errors are dropped). */
gboolean psim_worker_wait(PsimWorker *w, GError **error);
/* Runs fn(w, arg) on the worker's thread and waits for it (runs it directly when called from
 * that thread). */
gboolean psim_worker_call(PsimWorker *w, PsimWorkerFn fn, void *arg, GError **error);
/* The device context a worker class keeps (a GPU worker's stream and library handles), set by
 * its thread_init; NULL for CPU workers. */
void *psim_worker_context(const PsimWorker *w);
void psim_worker_set_context(PsimWorker *w, void *context);
/* Waits for the worker's asynchronous work (its class's sync); TRUE at once without one. Runs
 * on the worker's thread. */
gboolean psim_worker_sync(PsimWorker *w, GError **error);
/* t as a host tensor: a new reference when it is one already, else a copy made by the worker's
 * class (to_host) on the worker's thread. */
PsimTensor *psim_worker_to_host(PsimWorker *w, PsimTensor *t, GError **error);
/* Fills dst (allocated by this worker, psim_worker_tensor_new) with host tensor src's data, of
 * the same byte size: through the class's from_host for device memory, memcpy otherwise. Runs
 * on the worker's own thread (inside a PsimWorkerFn). */
gboolean psim_worker_copy_in(PsimWorker *w, PsimTensor *dst, const PsimTensor *src,
                             GError **error);
/* Bytes of tensors allocated on this worker's device (ctx->alloc) and still alive; *peak
 * (optional) gets the most alive at once since psim_worker_memory_reset_peak. */
uint64_t psim_worker_memory(const PsimWorker *w, uint64_t *peak);
void psim_worker_memory_reset_peak(PsimWorker *w);
/* Frees the blocks the worker keeps for reuse (its pool of freed tensors' memory). */
void psim_worker_pool_release(PsimWorker *w);
/* Allocates a zeroed tensor in the worker's device memory, accounted as above (what the
 * executor gives kernels as ctx->alloc). NULL with a RUNTIME error when out of memory, an
 * INPUT error when the shape is unknown or absurd. Free with psim_tensor_unref. */
PsimTensor *psim_worker_tensor_new(PsimWorker *w, PsimDType dtype, int32_t rank,
                                   const int64_t *dims, GError **error);
/* The same with the data left as the pool hands it out (not zeroed), for a kernel that writes
 * every element (PsimKernelCtx.alloc_uninit). */
PsimTensor *psim_worker_tensor_new_uninit(PsimWorker *w, PsimDType dtype, int32_t rank,
                                          const int64_t *dims, GError **error);

/* ---------------------------------------------------------------------------------------- */
/* Waiting for another device's thread (the executor's Recvs): for the first
 * PSIM_EXEC_PAUSE_SPIN_US the waiter spins on the flag with the CPU's pause hint, and only then
 * polls with sched_yield. A sched_yield is a system call (1.3 us on the VM measured,
 * docs/validation.md) and gives the core to any other runnable thread, so a hand-off noticed by yielding costs a microsecond or more per hop; the
 * pause loop notices it within tens of nanoseconds. Devices are pinned to disjoint cores, so
 * the spinner never takes the core of the thread it waits for. */
#define PSIM_EXEC_PAUSE_SPIN_US 50.0

/* The rendezvous: where Sends leave tensors and Recvs pick them up. */

typedef struct PsimRendezvous PsimRendezvous;

/* Called once per Recv: with a new reference to the tensor (NULL for control transfers) and ok
 * TRUE, or with NULL and ok FALSE when the rendezvous was aborted. It runs on the thread of
 * whichever side came second (or the aborting thread): it must only hand the result on. */
typedef void (*PsimRecvDone)(PsimTensor *t, gboolean ok, void *user);

/* An empty table (thread-safe); free with psim_rendezvous_free. */
PsimRendezvous *psim_rendezvous_new(void);
void psim_rendezvous_free(PsimRendezvous *r);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimRendezvous, psim_rendezvous_free)
/* Leaves t (a reference is taken; NULL for control) under key and step. */
void psim_rendezvous_send(PsimRendezvous *r, const char *key, uint64_t step, PsimTensor *t);
/* Asks for key and step; done runs now if it was sent, else when it is. Never blocks. */
void psim_rendezvous_recv_async(PsimRendezvous *r, const char *key, uint64_t step,
                                PsimRecvDone done, void *user);
/* The table's handle of key: made the first time the key is seen, valid until the table is
 * freed (a reset keeps it). Sending and asking through it skip the key lookup and the table's
 * lock: what a device does for every transfer of every step. */
typedef struct PsimRendezvousKey PsimRendezvousKey;
PsimRendezvousKey *psim_rendezvous_key(PsimRendezvous *r, const char *key);
void psim_rendezvous_key_send(PsimRendezvousKey *k, uint64_t step, PsimTensor *t);
void psim_rendezvous_key_recv_async(PsimRendezvousKey *k, uint64_t step, PsimRecvDone done, void *user);
/* Fails every waiting and future Recv (a step failed on some device), until reset. */
void psim_rendezvous_abort(PsimRendezvous *r);
gboolean psim_rendezvous_aborted(PsimRendezvous *r);
/* Forgets everything (between steps after an abort). */
void psim_rendezvous_reset(PsimRendezvous *r);

/* ---------------------------------------------------------------------------------------- */
/* The per-device executor. */

/* Where a partition's Send hands its tensor (NULL for a control edge; borrowed: the hook takes a
 * reference to keep it) when it is not left in the rendezvous directly: node is the Send's id
 * in the graph. It runs on the device's thread and must not block. */
typedef void (*PsimSendHook)(void *user, int32_t node, uint64_t step, PsimTensor *t);

/* How a device completes its Recvs itself (PsimExecOptions.recv_copier): the tensor a Recv
 * brings from the rendezvous (as its Send left it) is copied on the device's own thread, between
 * kernels and before the next one, by `copy` (which returns the device's tensor, or NULL with an
 * error naming the node; NULL without error for a control transfer). Among arrived Recvs the
 * lowest priority goes first, and none before the node `after` returns (a node of this device
 * in the graph; -1: none) has run in this step: Recvs wait for nodes, never for a clock. node
 * is the Recv's id in the graph. */
typedef struct {
    PsimTensor *(*copy)(void *user, int32_t node, PsimTensor *src, GError **error);
    int32_t (*after)(void *user, int32_t node, double *priority);
} PsimRecvCopier;

typedef enum {
    PSIM_EXEC_ORDER_FIFO = 0, /* ready nodes run in the order they became ready */
    PSIM_EXEC_ORDER_STATIC,   /* exactly the order given (a plan's per-device order) */
    PSIM_EXEC_ORDER_PRIORITY, /* among ready nodes, the lowest priority value first */
} PsimExecOrder;

typedef struct {
    PsimExecOrder order;
    const int32_t *static_order; /* STATIC: node ids of the graph; copied */
    int32_t n_static_order;
    const double *priority;      /* PRIORITY: one per node id of the graph; copied */
    /* Evaluate constant subgraphs at every step instead of once when prepared. */
    gboolean no_constant_folding;
    /* One device's part of a partitioned graph (a Plan's): when device_of is set (one entry per
     * node, copied), the executor runs every node with device_of[v] == device (not only what
     * the fetches need); its Send and Recv nodes (attribute "key", the plan's rendezvous key)
     * go through `rendezvous`, Recvs asynchronously. No other edge may cross devices. */
    const int32_t *device_of;
    int32_t device;
    PsimRendezvous *rendezvous;
    /* When set, Sends call it instead of psim_rendezvous_send (a transport that copies the
     * tensor to the destination and then leaves it in the rendezvous). */
    PsimSendHook send_hook;
    void *send_user;
    /* When set, Recvs are copied by this device's thread as PsimRecvCopier says. */
    const PsimRecvCopier *recv_copier;
    void *recv_user;
    /* With a rendezvous: a device waiting on its Recvs fails the step (a RUNTIME error naming
     * the Recvs it waits for) when no device sharing the rendezvous has completed a node for this
     * long, in seconds: orders that deadlock never end otherwise. 0: PSIM_EXEC_STALL_TIMEOUT_S;
     * negative: wait forever. It must exceed the longest kernel of the step. */
    double stall_timeout_s;
    /* Profiling only (in-situ idle calibration): spin this long, as a device waiting for a Recv
     * spins, before each kernel. 0: never. */
    double spin_before_us;
} PsimExecOptions;

#define PSIM_EXEC_STALL_TIMEOUT_S 5.0

typedef struct PsimExecutor PsimExecutor;

/* Prepares graph g to run on worker w. feeds are refs ("node" or "node:k") of the tensors given
 * at each step, in that order; fetches are refs of the tensors returned at each step, or
 * targets ("^node") that are run and return nothing. Only what the fetches need runs, cut at
 * the feeds (partial execution). Nodes whose outputs are all known (PsimOutput.value), and
 * nodes whose inputs all come from such nodes (weights made by ConstantOfShape, shape
 * arithmetic), form the constant subgraph: it is evaluated here once, on the worker, and its
 * results are reused by every step. opts may be NULL.
 * g is not copied: it must stay unchanged and outlive the executor. Errors (INPUT, naming the
 * file and the node): a ref that names no tensor; a needed graph input that is not fed; a node
 * without a kernel for the worker's device type. A kernel failing while constants are
 * evaluated is a RUNTIME error naming the node. Free with psim_executor_free. */
PsimExecutor *psim_executor_new(const PsimGraph *g, PsimWorker *w, const char *const *feeds,
                                int32_t n_feeds, const char *const *fetches, int32_t n_fetches,
                                const PsimExecOptions *opts, GError **error);
void psim_executor_free(PsimExecutor *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimExecutor, psim_executor_free)

/* Checks feeds against what the graph expects (dtype, rank, known dimensions): an INPUT error
 * naming the fed node otherwise. feeds[i] corresponds to the executor's i-th feed. */
gboolean psim_executor_check_feeds(const PsimExecutor *e, PsimTensor *const *feeds,
                                   GError **error);
/* Runs one step on the worker's thread and waits for it. feeds are checked and not taken;
 * outputs (one per fetch, NULL for targets) get new references the caller unrefs. A kernel
 * failure is a RUNTIME error naming the node (INPUT if the kernel found its inputs invalid);
 * every tensor of the step is then released and outputs are left NULL. */
gboolean psim_executor_run(PsimExecutor *e, PsimTensor *const *feeds, PsimTensor **outputs,
                           GError **error);
/* The same, on the calling thread, which must be the worker's (psim_worker_post a closure that
 * calls it to run several devices' executors at once). */
gboolean psim_executor_run_here(PsimExecutor *e, PsimTensor *const *feeds, PsimTensor **outputs,
                                GError **error);

/* The step number used in rendezvous keys (all devices of a step use the same); by default it
 * counts the executor's steps. */
void psim_executor_set_step(PsimExecutor *e, uint64_t step);
/* PsimExecOptions.stall_timeout_s, changed after the executor was made. */
void psim_executor_set_stall_timeout(PsimExecutor *e, double seconds);

typedef struct {
    int32_t n_run;        /* nodes run by the last step */
    const int32_t *nodes; /* their ids in the graph, in the order they ran (owned by e) */
    const double *start;  /* per entry of nodes: start and end, microseconds from the step's */
    const double *end;    /*   start on the psim_exec_now_us clock (owned by e) */
    double step_us;       /* last step, on the worker's thread */
    double step_start_us; /* last step's start on the psim_exec_now_us clock */
    int32_t n_exec;       /* nodes each step runs */
    int32_t n_const;      /* nodes of the constant subgraph evaluated when prepared */
    int32_t n_fed;
    uint64_t n_steps;
    uint64_t n_kernel_runs; /* kernels invoked since prepared, constants included */
    uint64_t peak_bytes;    /* device memory at the last step's peak */
} PsimExecStats;

void psim_executor_stats(const PsimExecutor *e, PsimExecStats *out);
/* Appends the last step's nodes to t as device `device`, stream 0, shifted by `offset_us`
 * (so that several devices' steps share one origin). */
void psim_executor_timeline_add(const PsimExecutor *e, PsimTimeline *t, int32_t device,
                                double offset_us);
const PsimGraph *psim_executor_graph(const PsimExecutor *e);
int32_t psim_executor_n_feeds(const PsimExecutor *e);
/* The node and output a feed or fetch resolved to (node -1 never happens for valid i). */
PsimPort psim_executor_feed_port(const PsimExecutor *e, int32_t i);
PsimPort psim_executor_fetch_port(const PsimExecutor *e, int32_t i);

/* ---------------------------------------------------------------------------------------- */
/* Running a Plan on several devices. */

typedef struct PsimPlanExec PsimPlanExec;

/* Prepares plan p (borrowed with its graph: they must outlive it) on the devices of cluster c
 * that the plan names (each must be in c): one worker and one executor per device, over its
 * partition, in the plan's static order, or by the plan's priorities when `dynamic`. feeds and
 * fetches are refs in p->graph, routed to the devices their nodes are on. Free with
 * psim_plan_exec_free. */
PsimPlanExec *psim_plan_exec_new(const PsimPlan *p, const PsimCluster *c,
                                 const char *const *feeds, int32_t n_feeds,
                                 const char *const *fetches, int32_t n_fetches, gboolean dynamic,
                                 GError **error);
void psim_plan_exec_free(PsimPlanExec *x);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimPlanExec, psim_plan_exec_free)
/* One step on every device at once; outputs as psim_executor_run. A failure on one device
 * aborts the others; the error is the first device's own (not an "aborted" one). */
gboolean psim_plan_exec_run(PsimPlanExec *x, PsimTensor *const *feeds, PsimTensor **outputs,
                            GError **error);
/* How long a step may stand still (no device completing a node) while Recvs wait before it
 * fails as deadlocked, in seconds (PsimExecOptions.stall_timeout_s; by default
 * PSIM_EXEC_STALL_TIMEOUT_S). */
void psim_plan_exec_set_stall_timeout(PsimPlanExec *x, double seconds);
/* The last step: from the first device's start to the last device's end, microseconds. */
double psim_plan_exec_step_us(const PsimPlanExec *x);
int32_t psim_plan_exec_n_devices(const PsimPlanExec *x);
PsimExecutor *psim_plan_exec_executor(const PsimPlanExec *x, int32_t device);
/* Appends the last step of every device (device index = the plan's) on one time origin. */
void psim_plan_exec_timeline_add(const PsimPlanExec *x, PsimTimeline *t);
/* The last step's transfers between one ordered pair of the plan's devices. */
typedef struct {
    int32_t src, dst;         /* device indices (into the plan's devices) */
    uint64_t messages, bytes; /* transfers done in the last step, and their bytes on the wire */
    uint64_t variable_reads;  /* of those, a variable's value (its node's output or a read of it) */
} PsimLinkCount;
/* Every pair that carried a transfer in the last step, by source then destination; *out gets
 * them (g_free), the count is returned. */
int32_t psim_plan_exec_link_counts(const PsimPlanExec *x, PsimLinkCount **out);

/* ---------------------------------------------------------------------------------------- */
/* Sessions. */

typedef struct PsimSession PsimSession;

typedef struct {
    uint64_t n_runs;
    uint64_t n_cache_hits;
    uint64_t n_prunes;   /* executors built (each prunes and prepares) */
    uint64_t n_invalidations;
} PsimSessionStats;

/* A session running g (not copied; it may be extended, which invalidates the cache) on one
 * device of cluster c (not copied; must outlive): `device` is a full or short name, or NULL for
 * the first CPU device. opts as for executors (may be NULL). Free with psim_session_free. */
PsimSession *psim_session_new(PsimGraph *g, const PsimCluster *c, const char *device,
                              const PsimExecOptions *opts, GError **error);
void psim_session_free(PsimSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimSession, psim_session_free)

/* Runs one step: feeds named by refs, fetches by refs or targets ("^node"). The first run of a
 * signature (feed names and fetches, in order) prepares an executor (pruning, constants);
 * later runs reuse it. outputs as psim_executor_run. */
gboolean psim_session_run(PsimSession *s, int32_t n_feeds, const char *const *feed_names,
                          PsimTensor *const *feeds, int32_t n_fetches,
                          const char *const *fetches, PsimTensor **outputs, GError **error);
void psim_session_stats(const PsimSession *s, PsimSessionStats *out);
/* The executor the last run used (owned by the session), or NULL. */
PsimExecutor *psim_session_last_executor(PsimSession *s);
PsimWorker *psim_session_worker(PsimSession *s);

/* ---------------------------------------------------------------------------------------- */
/* Sessions over several devices: prune, place, partition and instantiate once per signature. */

typedef struct PsimPlanSession PsimPlanSession;

typedef struct {
    uint64_t n_runs;
    uint64_t n_cache_hits;
    uint64_t n_prunes;         /* psim_graph_prune calls */
    uint64_t n_places;         /* placements made (psim_place) */
    uint64_t n_partitions;     /* plans built (psim_plan_build) */
    uint64_t n_instantiations; /* psim_plan_exec_new calls (workers and executors) */
    uint64_t n_invalidations;  /* caches dropped because the graph or the cluster changed */
} PsimPlanSessionStats;

/* A session running g (not copied; extending it invalidates the cache) on the devices of
 * cluster c (not copied; changing it invalidates the cache; both must outlive the session),
 * placed by algorithm `algo` (a name from psim_placer_list) with costs from c and db (borrowed,
 * may be NULL), place options po (copied; NULL: defaults; pointers in it are borrowed), each
 * device in the plan's static order, or by the plan's priorities when `dynamic`. NULL with a
 * USAGE error for an unknown algorithm. Free with psim_plan_session_free. */
PsimPlanSession *psim_plan_session_new(PsimGraph *g, const PsimCluster *c, PsimCostDb *db,
                                       const char *algo, const PsimPlaceOptions *po,
                                       gboolean dynamic, GError **error);
void psim_plan_session_free(PsimPlanSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimPlanSession, psim_plan_session_free)
/* One step. The signature is the feed names and the fetches (refs or "^node" targets), in
 * order. The first run of a signature prunes g to them (psim_graph_prune), places the pruned
 * graph, partitions it into a plan and instantiates a worker and an executor per device of the
 * plan, and keeps all of it; later runs look the signature up and launch. outputs as
 * psim_executor_run. */
gboolean psim_plan_session_run(PsimPlanSession *s, int32_t n_feeds,
                               const char *const *feed_names, PsimTensor *const *feeds,
                               int32_t n_fetches, const char *const *fetches,
                               PsimTensor **outputs, GError **error);
void psim_plan_session_stats(const PsimPlanSession *s, PsimPlanSessionStats *out);
/* What the last run used (owned by the session, valid until the next run or free), or NULL. */
PsimPlanExec *psim_plan_session_last_exec(PsimPlanSession *s);
const PsimPlan *psim_plan_session_last_plan(PsimPlanSession *s);

/* ---------------------------------------------------------------------------------------- */
/* Over MPI (exec/mpi.c; docs/exec.md "Over MPI"): each rank is the task
 * /job:worker/replica:0/task:RANK with its own devices. Rank 0 places, ships every task the plan
 * once, and starts each step with one message per task; tensors between tasks are MPI messages
 * handled by one communication thread per process. */

typedef struct PsimMpi PsimMpi;
typedef struct PsimMpiExec PsimMpiExec;

/* Heartbeats between rank 0 and every task, and how long a silent peer is waited for before
 * the step fails and the job ends. */
#define PSIM_MPI_HEARTBEAT_US 100000.0
#define PSIM_MPI_DEADLINE_US 1000000.0

/* TRUE when this build has MPI. */
gboolean psim_mpi_available(void);
/* MPI_Init_thread (SERIALIZED), this task's devices (one CPU device on its rank's share of the
 * host's cores), on rank 0 the cluster of every task's devices with each pair of tasks' link
 * measured (latency and bandwidth by ping-pong), and the communication thread. USAGE error
 * without MPI in the build. psim_mpi_free stops the thread and finalizes MPI. */
PsimMpi *psim_mpi_new(int *argc, char ***argv, GError **error);
void psim_mpi_free(PsimMpi *m);
/* Ends this process with exit 1 at once (rank 0 first tells every task to do the same): after
 * a task failed, no rank waits for another. */
void psim_mpi_abort(PsimMpi *m) G_GNUC_NORETURN;
int32_t psim_mpi_rank(const PsimMpi *m);
/* TRUE once rank 0 has written the job's last line itself (a silent task, found by the
 * heartbeat watch): the caller then does not repeat it. */
gboolean psim_mpi_said(const PsimMpi *m);
int32_t psim_mpi_size(const PsimMpi *m);
/* Rank 0: every task's devices and the links between them (owned by m). */
PsimCluster *psim_mpi_cluster(PsimMpi *m);

/* What rank 0 sent task `task`: the setup (the plan with its graph, once) and the steps' messages
 * (handle, step id, that task's feeds; one per step). */
typedef struct {
    uint64_t setup_messages, setup_bytes;
    uint64_t step_messages, step_bytes;
} PsimMpiStats;
void psim_mpi_stats(const PsimMpi *m, int32_t task, PsimMpiStats *out);

/* Rank 0: ships the plan (its devices all of the cluster's tasks) with feeds and fetches (refs
 * as psim_plan_exec_new) to every task, each of which builds its part and answers; then builds
 * its own part. */
PsimMpiExec *psim_mpi_exec_new(PsimMpi *m, const PsimPlan *plan, const char *const *feeds,
                               int32_t n_feeds, const char *const *fetches, int32_t n_fetches,
                               GError **error);
/* Rank 0: one step on every task; outputs as psim_plan_exec_run. A task that failed or went
 * silent fails the step naming it. */
gboolean psim_mpi_exec_run(PsimMpiExec *e, PsimTensor *const *feeds, PsimTensor **outputs,
                           GError **error);
/* The last step's span over every task: the first device's start to the last one's end, the
 * tasks' clocks brought to rank 0's. */
double psim_mpi_exec_step_us(const PsimMpiExec *e);
/* Rank 0: the last step's ops and transfers on every task (each task asked for its own),
 * on rank 0's clock from the step's start over all tasks (the tasks' clock offsets applied),
 * appended to t (made for the plan's devices). FALSE with an error when a task is silent. */
gboolean psim_mpi_exec_timeline_add(PsimMpiExec *e, PsimTimeline *t, GError **error);
/* Rank 0: also tells every task to stop. */
void psim_mpi_exec_free(PsimMpiExec *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimMpiExec, psim_mpi_exec_free)
/* Rank 0: `rounds` times the time of one transfer of `bytes` between task `from` and task `task`
 * (any two tasks: rank 0 runs the steps whether or not it is one of them) through the
 * transport, after 3 warm-ups: the plan w0 on `from` -> Identity on `task` -> Identity on
 * `from` -> ..., `hops` round trips in one step, us[] its span over both tasks over 2 * hops
 * (with hops = 1, half the round trip including the step's start on both tasks). */
gboolean psim_mpi_pingpong_hops(PsimMpi *m, int32_t from, int32_t task, uint64_t bytes, int32_t hops,
                                int32_t rounds, double *us, GError **error);
/* Rank 0: the ping-pong between every two tasks at sizes min_bytes, x4, .. max_bytes (up to 64
 * KiB as 8 round trips within one step, psim_mpi_pingpong_hops: a transfer inside a step,
 * without the step's start; larger sizes one round trip a step), each size's half round trips
 * stored in db as link rows of the pair both ways (method "mpi"), which the cost model then
 * reads for links between those tasks' devices. Every pair, not only rank 0's: tasks that share
 * cores with a third (three tasks on two cores) have links of their own. Returns the rows
 * stored, or -1 with an error. */
int32_t psim_mpi_profile_links(PsimMpi *m, PsimCostDb *db, uint64_t min_bytes, uint64_t max_bytes,
                               GError **error);
/* The same in passes (a study's rounds): new, then `passes` calls of pass (each its share of
 * every size's ping-pongs, at least 2), then finish stores each size's samples of all passes
 * pooled (and frees the session; the rows stored, or -1 with an error). Rank 0. */
typedef struct PsimMpiLinkSession PsimMpiLinkSession;
PsimMpiLinkSession *psim_mpi_link_session_new(PsimMpi *m, uint64_t min_bytes, uint64_t max_bytes,
                                              int32_t passes);
gboolean psim_mpi_link_session_pass(PsimMpiLinkSession *s, GError **error);
int32_t psim_mpi_link_session_finish(PsimMpiLinkSession *s, PsimCostDb *db, GError **error);
void psim_mpi_link_session_free(PsimMpiLinkSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimMpiLinkSession, psim_mpi_link_session_free)
/* A task (rank > 0): for each plan rank 0 sends, builds its part from the setup message and runs
 * steps until told to stop; returns when rank 0 has no more plans (psim_mpi_free). FALSE with
 * an error when it could not (rank 0 silent, aborted, a malformed message). */
gboolean psim_mpi_serve(PsimMpi *m, GError **error);

G_END_DECLS

#endif
