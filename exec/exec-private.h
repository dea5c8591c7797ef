/* Internals shared by the executor's files (not installed). */
#ifndef PLACESIM_EXEC_PRIVATE_H
#define PLACESIM_EXEC_PRIVATE_H

#include "placesim/exec.h"


static inline void psim__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* "FILE: node 'x': message" with an explicit error code (node may be NULL). */
void psim__exec_error(GError **error, int code, const PsimGraph *g, const PsimNode *n,
                      const char *fmt, ...) G_GNUC_PRINTF(5, 6);

/* ctx->alloc of the executor: allocates on the worker in ctx->alloc_user. */
PsimTensor *psim__exec_alloc(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                             const int64_t *dims, GError **error);
/* ctx->alloc_uninit of the executor: the same without zeroing (the kernel writes every element). */
PsimTensor *psim__exec_alloc_uninit(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                                    const int64_t *dims, GError **error);

/* Resolves a ref: "node", "node:k", "^node" (when allow_target; port->index is then -1), or a
 * tensor name (PsimOutput.name). INPUT error naming the ref otherwise. */
gboolean psim__exec_resolve_ref(const PsimGraph *g, const char *ref, gboolean allow_target,
                                PsimPort *port, GError **error);

/* Canonical "node:k" / "^node" refs of g (a strv to g_strfreev), or NULL with an INPUT error. */
char **psim__exec_canonical_refs(const PsimGraph *g, int32_t n, const char *const *refs,
                                 gboolean allow_target, GError **error);

/* psim_worker_tensor_new, with the memory left as it was when `zero` is FALSE (a transfer's
 * destination, about to be overwritten whole: zeroing it first would write it twice). */
/* TRUE if the worker's tensors live in device memory (its class has mem_alloc: GPU). */
gboolean psim__worker_device_memory(const PsimWorker *w);
PsimTensor *psim__worker_tensor_alloc(PsimWorker *w, PsimDType dtype, int32_t rank,
                                      const int64_t *dims, gboolean zero, GError **error);

/* Progress of a step on all the devices that share a rendezvous: each executor counts its
 * completed nodes there, and a device waiting on Recvs fails the step when the count stays
 * still for its stall timeout (a deadlock: every device waits on another). */
void psim__rendezvous_progress_add(PsimRendezvous *r);
uint64_t psim__rendezvous_progress(PsimRendezvous *r);

/* Transfers of a Plan between devices of one process. A Send leaves its tensor in the rendezvous
 * as it is (psim__transport_send, the executor's send hook); the destination's executor copies
 * it on its own thread between kernels (psim__transport_copy and psim__transport_after, its
 * PsimRecvCopier), lowest plan priority first and not before the node it is held after has run,
 * into a buffer of the destination worker (float32 cut to its high 16 bits when the plan
 * compresses it). */
typedef struct PsimTransport PsimTransport;

/* A transfer's way to a device of another process (exec/mpi.c): send(user, x, step, t) takes
 * transfer x's tensor (a reference is taken when it is kept; NULL for control) on the Send's
 * thread and returns at once. */
typedef struct {
    void (*send)(void *user, int32_t x, uint64_t step, PsimTensor *t);
    /* Optional: the destination device `dst`'s thread takes in what has arrived for its Recvs
     * from other processes (delivering them to their rendezvous keys); whether any was. */
    gboolean (*poll)(void *user, int32_t dst);
    void *user;
} PsimRemoteTransport;

/* workers: one per plan device (borrowed); NULL for a device of another process, whose
 * transfers go through the remote transport (psim__transport_set_remote). */
PsimTransport *psim__transport_new(const PsimPlan *p, PsimWorker *const *workers,
                                   PsimRendezvous *rdv, GError **error);
void psim__transport_free(PsimTransport *tp);
void psim__transport_set_remote(PsimTransport *tp, const PsimRemoteTransport *remote);
/* The rendezvous key of transfer x (where a transfer from another process is delivered). */
PsimRendezvousKey *psim__transport_key(const PsimTransport *tp, int32_t x);
/* A new step: forgets the last step's records; the step's timeline counts from origin_us (the
 * psim_exec_now_us clock) once it is set with psim__transport_origin. */
void psim__transport_step_begin(PsimTransport *tp);
/* Lowers the step's origin to t_us if it is earlier (each device calls it as it starts). */
void psim__transport_origin(PsimTransport *tp, double t_us);
double psim__transport_origin_get(PsimTransport *tp);
/* The executor's send hook (PsimExecOptions.send_hook): user is the transport. */
void psim__transport_send(void *user, int32_t node, uint64_t step, PsimTensor *t);
/* PsimRecvCopier.after and .copy for the Recv `node`: user is the transport. */
int32_t psim__transport_after(void *user, int32_t node, double *priority);
/* The remote transport's poll for the device of the Recv `node` (user: the transport). */
gboolean psim__transport_poll(void *user, int32_t node);
PsimTensor *psim__transport_copy(void *user, int32_t node, PsimTensor *src, GError **error);
/* The last step's transfer x: FALSE if it did not happen; else start and end on the
 * psim_exec_now_us clock and the bytes carried. */
gboolean psim__transport_record(const PsimTransport *tp, int32_t x, double *start, double *end,
                                uint64_t *bytes);

/* A plan's part that runs in this process: the devices d with local[d] (NULL: all) get a
 * worker and an executor; the others' transfers cross through the transport's remote hook.
 * Feeds and fetches are all the plan's; those of other processes' devices are ignored and
 * left NULL. */
PsimPlanExec *psim__plan_exec_new_part(const PsimPlan *p, const PsimCluster *c,
                                       const gboolean *local, const char *const *feeds,
                                       int32_t n_feeds, const char *const *fetches,
                                       int32_t n_fetches, gboolean dynamic, GError **error);
/* The device's core is another device's too (psim_cluster_device_shares_cores: local:4 on two
 * cores, more MPI tasks on a host than cores): a device waiting for a Recv yields at once
 * instead of spinning with the pause hint (cnn round-robin on local:4 here: 0.94-1.04 ms a step
 * against 1.11-1.49 with the spin). It does not yield between its kernels: with three tasks on
 * two cores a yield after each kernel handed the core to the other tasks' waiting threads for
 * ~5 us each time, and the replicated mlp's step took 1.4-1.8x as long (docs/validation.md,
 * issue 18). */
void psim__executor_share_core(PsimExecutor *e);
/* What arrives for a device from another process is taken in by the device's own thread:
 * poll(user, node) (node: one of its Recvs) delivers what has arrived and says whether anything
 * did. The executor calls it between kernels while Recvs are outstanding and while it waits,
 * and a waiting device then never sleeps for long (nothing else would wake it). */
void psim__executor_set_poll(PsimExecutor *e, gboolean (*poll)(void *user, int32_t node), void *user);
/* The plan part's transfers to and from devices of other processes go through `remote`
 * (psim__transport_set_remote); with remote->poll, the devices take in their arrivals themselves. */
void psim__plan_exec_set_remote(PsimPlanExec *x, const PsimRemoteTransport *remote);
/* The next step's id (psim_plan_exec_run counts on from it), and the part's rendezvous. */
void psim__plan_exec_set_step(PsimPlanExec *x, uint64_t step);
PsimRendezvous *psim__plan_exec_rendezvous(const PsimPlanExec *x);
/* TRUE if some device of this process's part runs a node of the plan (a part with none has no
 * span of its own in the step). */
gboolean psim__plan_exec_busy(const PsimPlanExec *x);
/* The last step's start on the psim_exec_now_us clock (its length: psim_plan_exec_step_us). */
double psim__plan_exec_origin_us(const PsimPlanExec *x);
PsimTransport *psim__plan_exec_transport(const PsimPlanExec *x);
/* Device d's worker, NULL for another process's device. */
PsimWorker *psim__plan_exec_worker(const PsimPlanExec *x, int32_t d);

#endif
