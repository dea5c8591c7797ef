/* The per-device executor: prepares a (sub)graph once (what the fetches need, cut at the feeds;
 * the constant subgraph evaluated; kernels found and prepared; pending counts, successor lists
 * and tensor use counts precomputed), then runs steps by pending counts and a ready queue, as
 * in the TensorFlow whitepaper's single-device executor. The dispatch path does no hashing and
 * no bookkeeping allocation: only the kernels' own output tensors are allocated. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "exec-private.h"

enum { RECV_ASKED = 1, RECV_ARRIVED };

/* A device waiting on Recvs looks at the step's progress at least this often (microseconds). */
#define STALL_CHECK_US 100000.0

enum {
    KIND_NONE = 0, /* not needed by the fetches */
    KIND_EXEC,     /* runs at every step */
    KIND_CONST,    /* evaluated once when prepared */
    KIND_KNOWN,    /* all outputs known in the graph (PsimOutput.value) */
    KIND_FED,      /* outputs given at each step */
};

typedef struct {
    PsimExecutor *e;
    int32_t i; /* local index of the Recv */
} RecvCtx;

typedef struct {
    int32_t i;
    PsimTensor *t;
    gboolean ok;
} InboxEntry;

struct PsimExecutor {
    const PsimGraph *g;
    PsimWorker *w;
    PsimExecOptions opts;
    int32_t *static_order; /* local exec indices (STATIC) */
    double *prio;          /* per local exec index (PRIORITY) */
    int32_t n_nodes;
    uint8_t *kind;         /* per graph node */
    int32_t *local;        /* per graph node: exec index or -1 */

    /* Tensor slots: one per output of every needed node. */
    int32_t *slot_base; /* per graph node, -1 when not needed */
    int32_t n_slots;
    PsimTensor **slots;
    int32_t *uses_init; /* consumer inputs (exec nodes) plus fetches reading the slot */
    int32_t *uses;
    PsimTensor **const_vals; /* per slot: the constant value kept across steps, or NULL */
    int32_t n_const_slots;
    int32_t *const_slots; /* slots with a constant value used at each step */

    /* Exec nodes, by local index. */
    int32_t n_exec;
    int32_t *exec_node;
    const PsimKernelDef **kdef;
    void **kstate;
    gboolean *prepared;
    PsimKernelCtx *ctx;
    int32_t *in_off; /* n_exec + 1 */
    int32_t *in_slot;
    PsimTensor **in_ptrs;
    int32_t *succ_off; /* n_exec + 1 */
    int32_t *succ;
    int32_t *pending_init;
    int32_t *pending;
    int32_t n_initial_ready;
    int32_t *initial_ready;
    int32_t *queue; /* ring buffer or heap of n_exec entries */

    int32_t n_feeds;
    PsimPort *feed_port;
    int32_t *feed_slot;
    int32_t n_fetches;
    PsimPort *fetch_port; /* node -1 never; index -1 for targets */
    int32_t *fetch_slot;  /* -1 for targets */

    void *workspace;
    size_t workspace_bytes;

    /* Partitioned graphs: this device's nodes, Send/Recv through the rendezvous. */
    int32_t *device_of; /* copy, or NULL */
    PsimRendezvous *rdv;
    const char **key;   /* per exec node: rendezvous key of a Send/Recv, else NULL */
    PsimRendezvousKey **rkey; /* per exec node: its handle in rdv, else NULL */
    RecvCtx *recv_ctx;  /* per exec node */
    double *recv_start; /* per exec node */
    uint64_t step_id;
    gboolean step_set;
    /* Completed Recvs, posted from other threads. */
    pthread_mutex_t inbox_lock;
    pthread_cond_t inbox_cond;
    atomic_int inbox_n;
    InboxEntry *inbox, *inbox_work;
    /* Arrived Recvs this thread has still to copy (recv_copier): not yet the lowest priority,
     * or before their earliest start. */
    InboxEntry *held;
    int32_t n_held;
    /* With a recv_copier (a Plan's partitions), Sends run as soon as their input is ready,
     * whatever their place in the order, as the simulator has them: the ones due, and a
     * per-step mark of those already run. */
    int32_t *eager;
    int32_t n_eager;
    uint8_t *sent;
    uint8_t *finished;      /* per exec node: has run this step (releases Recvs held after it) */
    /* Per exec node, this step: RECV_ASKED once a Recv asked the rendezvous, RECV_ARRIVED once
     * its tensor came (the deadlock detector names the Recvs still waiting). */
    uint8_t *recv_state;

    /* Stats. */
    int32_t n_run;
    int32_t *ran;
    double *t_start, *t_end;
    double step_us, step_start;
    int32_t n_const, n_fed;
    uint64_t n_steps, n_kernel_runs, peak_bytes;
    double pause_spin_us; /* inbox_wait's spin with the pause hint before it yields */
    int32_t poll_node;    /* one of this device's Recvs (-1: none), for poll */
    gboolean (*poll)(void *user, int32_t node); /* psim__executor_set_poll; NULL: none */
    void *poll_user;
};

/* --- Built-in kernels the executor can always run (structural ops) ------------------------ */

static gboolean noop_run(PsimKernelCtx *ctx, GError **error)
{
    (void)ctx;
    (void)error;
    return TRUE;
}

static gboolean identity_run(PsimKernelCtx *ctx, GError **error)
{
    (void)error;
    for (int32_t k = 0; k < ctx->n_outputs && k < ctx->n_inputs; k++)
        ctx->outputs[k] = psim_tensor_ref(ctx->inputs[k]);
    return TRUE;
}

static const PsimKernelDef builtin_noop = {
    .op = "NoOp", .device_type = "CPU", .name = "exec-noop", .description = "does nothing",
    .run = noop_run};
static const PsimKernelDef builtin_identity = {
    .op = "Identity", .device_type = "CPU", .name = "exec-identity",
    .description = "passes its input through (shares it)", .run = identity_run};

static gboolean send_run(PsimKernelCtx *ctx, GError **error)
{
    PsimExecutor *e = ctx->state;
    int32_t i = e->local[ctx->node->id];
    /* Tensors cross devices through host memory (a GPU's are copied out first). */
    PsimTensor *t = NULL;
    if (ctx->n_inputs > 0 && ctx->inputs[0] &&
        !(t = psim_worker_to_host(e->w, ctx->inputs[0], error)))
        return FALSE;
    if (e->opts.send_hook)
        e->opts.send_hook(e->opts.send_user, e->exec_node[i], e->step_id, t);
    else
        psim_rendezvous_key_send(e->rkey[i], e->step_id, t);
    if (t)
        psim_tensor_unref(t);
    return TRUE;
}

static gboolean recv_run(PsimKernelCtx *ctx, GError **error)
{
    (void)ctx;
    (void)error;
    g_assert_not_reached(); /* Recvs are dispatched asynchronously by the executor */
    return FALSE;
}

static const PsimKernelDef builtin_send = {
    .op = "Send", .device_type = "CPU", .name = "exec-send",
    .description = "leaves its input in the rendezvous", .run = send_run};
static const PsimKernelDef builtin_recv = {
    .op = "Recv", .device_type = "CPU", .name = "exec-recv", .async = TRUE,
    .description = "takes its tensor from the rendezvous, asynchronously", .run = recv_run};

static const PsimKernelDef *kernel_find(const PsimGraph *g, const PsimNode *n, const char *type)
{
    const PsimKernelDef *k = psim_kernel_for_node(g, n, type);
    if (k)
        return k;
    if (!strcmp(n->op, "NoOp"))
        return &builtin_noop;
    if (!strcmp(n->op, "Identity"))
        return &builtin_identity;
    return NULL;
}

static gboolean kernel_missing(const PsimGraph *g, const PsimNode *n, const char *type,
                               GError **error)
{
    const PsimOpDef *d = psim_op_lookup(n->op);
    PsimDType dt = PSIM_DTYPE_UNDEFINED;
    if (n->n_inputs > 0 && n->inputs[0].node >= 0) {
        const PsimNode *src = psim_graph_node(g, n->inputs[0].node);
        dt = src->outputs[n->inputs[0].index].dtype;
    } else if (n->n_outputs > 0) {
        dt = n->outputs[0].dtype;
    }
    if (d && (d->flags & PSIM_OP_ABSTRACT))
        psim__exec_error(error, PSIM_ERROR_INPUT, g, n,
                         "op '%s' is abstract (task graphs): it can be simulated, not run", n->op);
    else
        psim__exec_error(error, PSIM_ERROR_INPUT, g, n,
                         "no %s kernel for op '%s' (%s); load a plug-in with one with --plugin PATH.so, "
                         "see docs/ops.md", type, n->op, psim_dtype_name(dt));
    return FALSE;
}

/* Kernel errors should name the node; add "FILE: node 'x': " when they do not. */
static void kernel_error(GError **error, GError *err, const PsimGraph *g, const PsimNode *n,
                         const PsimKernelDef *k)
{
    if (!err) {
        psim__exec_error(error, PSIM_ERROR_RUNTIME, g, n, "kernel %s failed without a reason",
                         k->name ? k->name : n->op);
        return;
    }
    int code = err->domain == PSIM_ERROR ? err->code : PSIM_ERROR_RUNTIME;
    g_autofree char *needle = g_strdup_printf("'%s'", n->name);
    if (strstr(err->message, needle) && err->domain == PSIM_ERROR) {
        g_propagate_error(error, err);
        return;
    }
    psim__exec_error(error, code, g, n, "%s", err->message);
    g_error_free(err);
}

/* --- Preparation ------------------------------------------------------------------------- */

/* Resolves a ref: "node", "node:k", "^node", or a tensor name (PsimOutput.name). */
gboolean psim__exec_resolve_ref(const PsimGraph *g, const char *ref, gboolean allow_target,
                            PsimPort *port, GError **error)
{
    g_autofree char *name = NULL;
    int32_t index = 0;
    gboolean control = FALSE;
    const PsimNode *n = psim_graph_node_find(g, ref);
    if (n) {
        port->node = n->id;
        port->index = n->n_outputs > 0 ? 0 : -1;
        return TRUE;
    }
    if (psim_ref_parse(ref, &name, &index, &control) && (n = psim_graph_node_find(g, name))) {
        if (control) {
            if (!allow_target) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, n, "a control ref cannot be fed");
                return FALSE;
            }
            port->node = n->id;
            port->index = -1;
            return TRUE;
        }
        if (index < 0 || index >= n->n_outputs) {
            psim__exec_error(error, PSIM_ERROR_INPUT, g, n, "has no output %d (it has %d)",
                             index, n->n_outputs);
            return FALSE;
        }
        port->node = n->id;
        port->index = index;
        return TRUE;
    }
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        const PsimNode *m = psim_graph_node(g, i);
        for (int32_t k = 0; k < m->n_outputs; k++)
            if (m->outputs[k].name && !strcmp(m->outputs[k].name, ref)) {
                port->node = i;
                port->index = k;
                return TRUE;
            }
    }
    psim__exec_error(error, PSIM_ERROR_INPUT, g, NULL, "'%s' names no node or tensor", ref);
    return FALSE;
}

static gboolean all_outputs_known(const PsimNode *n)
{
    if (n->n_outputs <= 0)
        return FALSE;
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (!n->outputs[k].value)
            return FALSE;
    const PsimOpDef *d = psim_op_lookup(n->op);
    return !(d && (d->flags & PSIM_OP_STATEFUL));
}

static gboolean mark_needed(PsimExecutor *e, GError **error)
{
    const PsimGraph *g = e->g;
    const int32_t *poff, *pred;
    psim_graph_pred(g, &poff, &pred);
    int32_t *stack = g_new(int32_t, e->n_nodes + 1);
    uint8_t *seen = g_new0(uint8_t, e->n_nodes + 1);
    int32_t sp = 0;
    for (int32_t i = 0; i < e->n_fetches; i++)
        if (!seen[e->fetch_port[i].node]) {
            seen[e->fetch_port[i].node] = 1;
            stack[sp++] = e->fetch_port[i].node;
        }
    if (e->device_of) {
        /* A device's partition: all of its nodes run; nothing is taken from other devices but
         * through Recvs. */
        for (int32_t i = 0; i < e->n_fetches; i++)
            if (e->device_of[e->fetch_port[i].node] != e->opts.device) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g,
                                 psim_graph_node(g, e->fetch_port[i].node),
                                 "is fetched from device %d but placed on device %d",
                                 e->opts.device, e->device_of[e->fetch_port[i].node]);
                g_free(stack);
                g_free(seen);
                return FALSE;
            }
        for (int32_t v = 0; v < e->n_nodes; v++) {
            if (e->device_of[v] == e->opts.device && !seen[v]) {
                seen[v] = 1;
                stack[sp++] = v;
            } else if (e->device_of[v] != e->opts.device) {
                seen[v] = 1; /* never crossed */
            }
        }
    }
    while (sp > 0) {
        int32_t v = stack[--sp];
        const PsimNode *n = psim_graph_node(g, v);
        e->kind[v] = KIND_EXEC; /* needed; refined by classify */
        gboolean fed = FALSE;
        for (int32_t i = 0; i < e->n_feeds && !fed; i++)
            fed = e->feed_port[i].node == v;
        if (fed) {
            e->kind[v] = KIND_FED;
            continue;
        }
        if (all_outputs_known(n)) {
            e->kind[v] = KIND_KNOWN;
            continue;
        }
        for (int32_t j = poff[v]; j < poff[v + 1]; j++)
            if (!seen[pred[j]]) {
                seen[pred[j]] = 1;
                stack[sp++] = pred[j];
            }
    }
    g_free(stack);
    g_free(seen);
    /* A fed node is fed on every output something reads. */
    for (int32_t i = 0; i < e->n_nodes; i++) {
        if (e->kind[i] == KIND_NONE || e->kind[i] == KIND_FED)
            continue;
        const PsimNode *n = psim_graph_node(g, i);
        if (e->kind[i] == KIND_KNOWN)
            continue;
        for (int32_t k = 0; k < n->n_inputs; k++) {
            PsimPort p = n->inputs[k];
            if (p.node < 0 || e->kind[p.node] != KIND_FED)
                continue;
            gboolean ok = FALSE;
            for (int32_t f = 0; f < e->n_feeds; f++)
                if (e->feed_port[f].node == p.node && e->feed_port[f].index == p.index)
                    ok = TRUE;
            if (!ok) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, p.node),
                                 "output %d is needed by '%s' but only other outputs are fed",
                                 p.index, n->name);
                return FALSE;
            }
        }
    }
    return TRUE;
}

static gboolean classify(PsimExecutor *e, GError **error)
{
    const PsimGraph *g = e->g;
    const int32_t *poff, *pred;
    psim_graph_pred(g, &poff, &pred);
    g_autofree int32_t *topo = psim_graph_topo_order(g, error);
    if (!topo)
        return FALSE;
    for (int32_t t = 0; t < e->n_nodes; t++) {
        int32_t v = topo[t];
        if (e->kind[v] != KIND_EXEC)
            continue;
        const PsimNode *n = psim_graph_node(g, v);
        const PsimOpDef *d = psim_op_lookup(n->op);
        if (!strcmp(n->op, "Placeholder") || (n->flags & PSIM_NODE_FED)) {
            psim__exec_error(error, PSIM_ERROR_INPUT, g, n,
                             "graph input is needed but not fed (use --feed %s=FILE.pb)",
                             n->name);
            return FALSE;
        }
        if (e->opts.no_constant_folding || (d && (d->flags & (PSIM_OP_STATEFUL | PSIM_OP_ABSTRACT))) ||
            !strcmp(n->op, "Send") || !strcmp(n->op, "Recv"))
            continue;
        gboolean constant = TRUE;
        for (int32_t j = poff[v]; j < poff[v + 1]; j++)
            if (e->kind[pred[j]] != KIND_CONST && e->kind[pred[j]] != KIND_KNOWN)
                constant = FALSE;
        if (constant)
            e->kind[v] = KIND_CONST;
    }
    return TRUE;
}

static gboolean build(PsimExecutor *e, GError **error)
{
    const PsimGraph *g = e->g;
    const int32_t *poff, *pred;
    psim_graph_pred(g, &poff, &pred);
    const char *type = psim_worker_device_type(e->w);

    /* Slots. */
    e->slot_base = g_new(int32_t, e->n_nodes);
    e->local = g_new(int32_t, e->n_nodes);
    e->n_slots = 0;
    e->n_exec = 0;
    for (int32_t v = 0; v < e->n_nodes; v++) {
        e->slot_base[v] = -1;
        e->local[v] = -1;
        if (e->kind[v] == KIND_NONE)
            continue;
        e->slot_base[v] = e->n_slots;
        e->n_slots += psim_graph_node(g, v)->n_outputs;
        if (e->kind[v] == KIND_EXEC)
            e->local[v] = e->n_exec++;
        else if (e->kind[v] == KIND_CONST)
            e->n_const++;
    }
    int32_t ns = e->n_slots ? e->n_slots : 1, nx = e->n_exec ? e->n_exec : 1;
    e->slots = g_new0(PsimTensor *, ns);
    e->uses_init = g_new0(int32_t, ns);
    e->uses = g_new0(int32_t, ns);
    e->const_vals = g_new0(PsimTensor *, ns);

    /* Exec nodes: kernels, inputs, successors, pending counts. */
    e->exec_node = g_new(int32_t, nx);
    e->key = g_new0(const char *, nx);
    e->rkey = g_new0(PsimRendezvousKey *, nx);
    e->recv_ctx = g_new0(RecvCtx, nx);
    e->recv_start = g_new0(double, nx);
    e->inbox = g_new0(InboxEntry, nx);
    e->inbox_work = g_new0(InboxEntry, nx);
    e->held = g_new0(InboxEntry, nx);
    e->eager = g_new0(int32_t, nx);
    e->sent = g_new0(uint8_t, nx);
    e->finished = g_new0(uint8_t, nx);
    e->recv_state = g_new0(uint8_t, nx);
    e->kdef = g_new0(const PsimKernelDef *, nx);
    e->kstate = g_new0(void *, nx);
    e->prepared = g_new0(gboolean, nx);
    e->ctx = g_new0(PsimKernelCtx, nx);
    e->in_off = g_new0(int32_t, nx + 1);
    e->succ_off = g_new0(int32_t, nx + 1);
    e->pending_init = g_new0(int32_t, nx);
    e->pending = g_new0(int32_t, nx);
    e->initial_ready = g_new(int32_t, nx);
    e->queue = g_new(int32_t, nx);
    e->ran = g_new(int32_t, nx);
    e->t_start = g_new0(double, nx);
    e->t_end = g_new0(double, nx);
    int32_t n_in = 0;
    for (int32_t v = 0; v < e->n_nodes; v++) {
        int32_t i = e->local[v];
        if (i < 0)
            continue;
        const PsimNode *n = psim_graph_node(g, v);
        e->exec_node[i] = v;
        gboolean is_send = !strcmp(n->op, "Send"), is_recv = !strcmp(n->op, "Recv");
        if (is_send || is_recv) {
            const char *key = psim_node_attr_string(n, "key", NULL);
            if (!e->rdv || !key) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, n,
                                 "%s needs a rendezvous key and a plan to run in", n->op);
                return FALSE;
            }
            e->kdef[i] = is_send ? &builtin_send : &builtin_recv;
            if (is_recv && e->poll_node < 0)
                e->poll_node = v;
            e->key[i] = key;
            e->rkey[i] = psim_rendezvous_key(e->rdv, key);
        } else {
            e->kdef[i] = kernel_find(g, n, type);
        }
        if (!e->kdef[i])
            return kernel_missing(g, n, type, error);
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0 && e->kind[n->inputs[k].node] == KIND_NONE) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, n,
                                 "input %d comes from '%s' on another device without a Recv", k,
                                 psim_graph_node(g, n->inputs[k].node)->name);
                return FALSE;
            }
        e->in_off[i] = n_in;
        n_in += n->n_inputs;
        for (int32_t j = poff[v]; j < poff[v + 1]; j++)
            if (e->kind[pred[j]] == KIND_EXEC) {
                e->pending_init[i]++;
                e->succ_off[e->local[pred[j]] + 1]++;
            }
    }
    e->in_off[e->n_exec] = n_in;
    e->in_slot = g_new(int32_t, n_in ? n_in : 1);
    e->in_ptrs = g_new0(PsimTensor *, n_in ? n_in : 1);
    for (int32_t i = 0; i < e->n_exec; i++)
        e->succ_off[i + 1] += e->succ_off[i];
    e->succ = g_new(int32_t, e->succ_off[e->n_exec] ? e->succ_off[e->n_exec] : 1);
    g_autofree int32_t *fill = g_memdup2(e->succ_off, sizeof(int32_t) * (gsize)nx);
    for (int32_t i = 0; i < e->n_exec; i++) {
        int32_t v = e->exec_node[i];
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t j = poff[v]; j < poff[v + 1]; j++)
            if (e->kind[pred[j]] == KIND_EXEC)
                e->succ[fill[e->local[pred[j]]]++] = i;
        for (int32_t k = 0; k < n->n_inputs; k++) {
            PsimPort p = n->inputs[k];
            int32_t s = p.node >= 0 ? e->slot_base[p.node] + p.index : -1;
            e->in_slot[e->in_off[i] + k] = s;
            if (s >= 0)
                e->uses_init[s]++;
        }
        PsimKernelCtx *c = &e->ctx[i];
        c->constant_inputs = 0;
        for (int32_t k = 0; k < n->n_inputs && k < 64; k++)
            if (n->inputs[k].node >= 0 &&
                (e->kind[n->inputs[k].node] == KIND_CONST || e->kind[n->inputs[k].node] == KIND_KNOWN))
                c->constant_inputs |= UINT64_C(1) << k;
        c->graph = g;
        c->node = n;
        c->n_inputs = n->n_inputs;
        c->inputs = e->in_ptrs + e->in_off[i];
        c->n_outputs = n->n_outputs;
        c->outputs = e->slots + e->slot_base[v];
        c->device = e->w;
        c->device_type = type;
        c->alloc = psim__exec_alloc;
        c->alloc_uninit = psim__exec_alloc_uninit;
        c->alloc_user = e->w;
        if (e->kdef[i] == &builtin_send)
            c->state = e;
        e->recv_ctx[i].e = e;
        e->recv_ctx[i].i = i;
        if (e->kdef[i]->workspace) {
            size_t ws = e->kdef[i]->workspace(g, n);
            if (ws > e->workspace_bytes)
                e->workspace_bytes = ws;
        }
        if (e->pending_init[i] == 0)
            e->initial_ready[e->n_initial_ready++] = i;
    }
    for (int32_t f = 0; f < e->n_fetches; f++) {
        PsimPort p = e->fetch_port[f];
        e->fetch_slot[f] = p.index >= 0 ? e->slot_base[p.node] + p.index : -1;
        if (e->fetch_slot[f] >= 0)
            e->uses_init[e->fetch_slot[f]]++;
    }
    for (int32_t f = 0; f < e->n_feeds; f++) {
        PsimPort p = e->feed_port[f];
        e->feed_slot[f] = e->slot_base[p.node] >= 0 ? e->slot_base[p.node] + p.index : -1;
        for (int32_t f2 = 0; f2 < f; f2++)
            if (e->feed_port[f2].node == p.node && e->feed_port[f2].index == p.index) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, p.node),
                                 "output %d is fed twice", p.index);
                return FALSE;
            }
        if (e->kind[p.node] == KIND_FED)
            e->n_fed++;
    }
    for (int32_t i = 0; i < e->n_exec; i++)
        e->ctx[i].workspace_bytes = e->workspace_bytes;

    /* Orders. */
    if (e->opts.order == PSIM_EXEC_ORDER_STATIC) {
        e->static_order = g_new(int32_t, nx);
        int32_t m = 0;
        g_autofree gboolean *seen = g_new0(gboolean, nx);
        for (int32_t k = 0; k < e->opts.n_static_order; k++) {
            int32_t v = e->opts.static_order[k];
            if (v < 0 || v >= e->n_nodes || e->local[v] < 0)
                continue; /* not run here (pruned, constant or fed) */
            if (seen[e->local[v]]) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, v),
                                 "appears twice in the static order");
                return FALSE;
            }
            seen[e->local[v]] = TRUE;
            e->static_order[m++] = e->local[v];
        }
        for (int32_t i = 0; i < e->n_exec; i++)
            if (!seen[i]) {
                psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, e->exec_node[i]),
                                 "is missing from the static order");
                return FALSE;
            }
    } else if (e->opts.order == PSIM_EXEC_ORDER_PRIORITY) {
        e->prio = g_new(double, nx);
        for (int32_t i = 0; i < e->n_exec; i++)
            e->prio[i] = e->opts.priority ? e->opts.priority[e->exec_node[i]] : 0;
    }
    return TRUE;
}

/* Runs node v (constant subgraph) with inputs from const_vals; stores its outputs there. */
static gboolean eval_const(PsimExecutor *e, int32_t v, GError **error)
{
    const PsimGraph *g = e->g;
    const PsimNode *n = psim_graph_node(g, v);
    const char *type = psim_worker_device_type(e->w);
    const PsimKernelDef *k = kernel_find(g, n, type);
    if (!k)
        return kernel_missing(g, n, type, error);
    g_autofree PsimTensor **in = g_new0(PsimTensor *, n->n_inputs + 1);
    for (int32_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i].node >= 0)
            in[i] = e->const_vals[e->slot_base[n->inputs[i].node] + n->inputs[i].index];
    PsimKernelCtx c = {
        .graph = g, .node = n, .n_inputs = n->n_inputs, .inputs = in,
        .n_outputs = n->n_outputs, .outputs = e->const_vals + e->slot_base[v],
        .device = e->w, .device_context = psim_worker_context(e->w), .device_type = type, .alloc = psim__exec_alloc, .alloc_user = e->w,
        .alloc_uninit = psim__exec_alloc_uninit};
    size_t ws = k->workspace ? k->workspace(g, n) : 0;
    g_autofree void *wsbuf = ws ? g_malloc0(ws) : NULL;
    c.workspace = wsbuf;
    c.workspace_bytes = ws;
    GError *err = NULL;
    if (k->prepare && !k->prepare(g, n, e->w, &c.state, &err)) {
        kernel_error(error, err, g, n, k);
        return FALSE;
    }
    gboolean ok = k->run(&c, &err);
    e->n_kernel_runs++;
    if (k->release)
        k->release(c.state);
    if (!ok) {
        kernel_error(error, err, g, n, k);
        return FALSE;
    }
    for (int32_t i = 0; i < n->n_outputs; i++)
        if (!c.outputs[i] && e->uses_init[e->slot_base[v] + i] > 0) {
            psim__exec_error(error, PSIM_ERROR_RUNTIME, g, n, "kernel %s did not set output %d",
                             k->name ? k->name : n->op, i);
            return FALSE;
        }
    return TRUE;
}

static gboolean prepare_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    PsimExecutor *e = arg;
    const PsimGraph *g = e->g;
    for (int32_t i = 0; i < e->n_exec; i++) {
        const PsimKernelDef *k = e->kdef[i];
        if (!k->prepare)
            continue;
        GError *err = NULL;
        const PsimNode *n = psim_graph_node(g, e->exec_node[i]);
        if (!k->prepare(g, n, e->w, &e->kstate[i], &err)) {
            kernel_error(error, err, g, n, k);
            return FALSE;
        }
        e->prepared[i] = TRUE;
        e->ctx[i].state = e->kstate[i];
    }
    if (e->workspace_bytes) {
        e->workspace = g_try_malloc0(e->workspace_bytes);
        if (!e->workspace) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "out of memory for a %zu-byte kernel workspace", e->workspace_bytes);
            return FALSE;
        }
        for (int32_t i = 0; i < e->n_exec; i++)
            e->ctx[i].workspace = e->workspace;
    }
    /* The constant subgraph, in topological order. */
    if (e->n_const > 0) {
        g_autofree int32_t *topo = psim_graph_topo_order(g, error);
        if (!topo)
            return FALSE;
        for (int32_t t = 0; t < e->n_nodes; t++)
            if (e->kind[topo[t]] == KIND_CONST && !eval_const(e, topo[t], error))
                return FALSE;
    }
    return TRUE;
}

PsimExecutor *psim_executor_new(const PsimGraph *g, PsimWorker *w, const char *const *feeds,
                                int32_t n_feeds, const char *const *fetches, int32_t n_fetches,
                                const PsimExecOptions *opts, GError **error)
{
    g_return_val_if_fail(g != NULL && w != NULL, NULL);
    g_return_val_if_fail(n_feeds >= 0 && n_fetches >= 0, NULL);
    PsimExecutor *e = g_new0(PsimExecutor, 1);
    e->g = g;
    e->w = w;
    e->pause_spin_us = PSIM_EXEC_PAUSE_SPIN_US;
    e->poll_node = -1;
    if (opts)
        e->opts = *opts;
    e->opts.static_order = NULL;
    e->opts.priority = NULL;
    e->n_nodes = psim_graph_n_nodes(g);
    e->kind = g_new0(uint8_t, e->n_nodes ? e->n_nodes : 1);
    pthread_mutex_init(&e->inbox_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* timed waits until an earliest start */
    pthread_cond_init(&e->inbox_cond, &ca);
    pthread_condattr_destroy(&ca);
    e->opts.device_of = NULL;
    if (opts && opts->device_of)
        e->device_of = g_memdup2(opts->device_of, sizeof(int32_t) * (gsize)MAX(e->n_nodes, 1));
    e->rdv = opts ? opts->rendezvous : NULL;
    e->n_feeds = n_feeds;
    e->feed_port = g_new0(PsimPort, n_feeds + 1);
    e->feed_slot = g_new0(int32_t, n_feeds + 1);
    e->n_fetches = n_fetches;
    e->fetch_port = g_new0(PsimPort, n_fetches + 1);
    e->fetch_slot = g_new0(int32_t, n_fetches + 1);
    for (int32_t i = 0; i < n_feeds; i++)
        if (!psim__exec_resolve_ref(g, feeds[i], FALSE, &e->feed_port[i], error))
            goto fail;
    for (int32_t i = 0; i < n_fetches; i++)
        if (!psim__exec_resolve_ref(g, fetches[i], TRUE, &e->fetch_port[i], error))
            goto fail;
    for (int32_t i = 0; i < n_feeds; i++)
        if (e->feed_port[i].index < 0) {
            psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, e->feed_port[i].node),
                             "has no outputs to feed");
            goto fail;
        }
    if (opts && opts->order == PSIM_EXEC_ORDER_STATIC) {
        e->opts.static_order = g_memdup2(opts->static_order,
                                         sizeof(int32_t) * (gsize)MAX(opts->n_static_order, 0));
    }
    if (opts && opts->order == PSIM_EXEC_ORDER_PRIORITY && opts->priority)
        e->opts.priority = g_memdup2(opts->priority, sizeof(double) * (gsize)e->n_nodes);
    if (!mark_needed(e, error) || !classify(e, error) || !build(e, error))
        goto fail;
    /* Known values are kept as constants (no copy: they are immutable). */
    for (int32_t v = 0; v < e->n_nodes; v++)
        if (e->kind[v] == KIND_KNOWN) {
            const PsimNode *n = psim_graph_node(g, v);
            for (int32_t k = 0; k < n->n_outputs; k++)
                e->const_vals[e->slot_base[v] + k] = psim_tensor_ref(n->outputs[k].value);
        }
    if (!psim_worker_call(w, prepare_job, e, error))
        goto fail;
    /* Keep only the constants a step reads. */
    e->const_slots = g_new(int32_t, e->n_slots ? e->n_slots : 1);
    for (int32_t s = 0; s < e->n_slots; s++) {
        if (!e->const_vals[s])
            continue;
        if (e->uses_init[s] > 0) {
            e->const_slots[e->n_const_slots++] = s;
        } else {
            psim_tensor_unref(e->const_vals[s]);
            e->const_vals[s] = NULL;
        }
    }
    return e;
fail:
    psim_executor_free(e);
    return NULL;
}

static gboolean release_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    PsimExecutor *e = arg;
    for (int32_t i = 0; i < e->n_exec; i++)
        if (e->prepared[i] && e->kdef[i]->release)
            e->kdef[i]->release(e->kstate[i]);
    return TRUE;
}

void psim_executor_free(PsimExecutor *e)
{
    if (!e)
        return;
    if (e->prepared)
        psim_worker_call(e->w, release_job, e, NULL);
    for (int32_t s = 0; s < e->n_slots; s++) {
        psim_tensor_unref(e->slots[s]);
        if (e->const_vals)
            psim_tensor_unref(e->const_vals[s]);
    }
    g_free((void *)e->opts.static_order);
    g_free((void *)e->opts.priority);
    g_free(e->static_order);
    g_free(e->prio);
    g_free(e->kind);
    g_free(e->local);
    g_free(e->slot_base);
    g_free(e->slots);
    g_free(e->uses_init);
    g_free(e->uses);
    g_free(e->const_vals);
    g_free(e->const_slots);
    g_free(e->exec_node);
    g_free(e->key);
    g_free(e->rkey);
    g_free(e->recv_ctx);
    g_free(e->recv_start);
    g_free(e->inbox);
    g_free(e->inbox_work);
    g_free(e->held);
    g_free(e->eager);
    g_free(e->sent);
    g_free(e->finished);
    g_free(e->recv_state);
    g_free(e->device_of);
    pthread_mutex_destroy(&e->inbox_lock);
    pthread_cond_destroy(&e->inbox_cond);
    g_free(e->kdef);
    g_free(e->kstate);
    g_free(e->prepared);
    g_free(e->ctx);
    g_free(e->in_off);
    g_free(e->in_slot);
    g_free(e->in_ptrs);
    g_free(e->succ_off);
    g_free(e->succ);
    g_free(e->pending_init);
    g_free(e->pending);
    g_free(e->initial_ready);
    g_free(e->queue);
    g_free(e->feed_port);
    g_free(e->feed_slot);
    g_free(e->fetch_port);
    g_free(e->fetch_slot);
    g_free(e->workspace);
    g_free(e->ran);
    g_free(e->t_start);
    g_free(e->t_end);
    g_free(e);
}

/* --- Steps ------------------------------------------------------------------------------- */

static void shape_str(GString *s, int32_t rank, const int64_t *dims)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < rank; i++)
        g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", dims[i]);
    g_string_append_c(s, ']');
}

gboolean psim_executor_check_feeds(const PsimExecutor *e, PsimTensor *const *feeds,
                                   GError **error)
{
    for (int32_t f = 0; f < e->n_feeds; f++) {
        PsimPort p = e->feed_port[f];
        const PsimNode *n = psim_graph_node(e->g, p.node);
        const PsimOutput *o = &n->outputs[p.index];
        const PsimTensor *t = feeds ? feeds[f] : NULL;
        if (!t) {
            psim__exec_error(error, PSIM_ERROR_INPUT, e->g, n, "feed for output %d is missing",
                             p.index);
            return FALSE;
        }
        if (o->dtype != PSIM_DTYPE_UNDEFINED && t->dtype != o->dtype) {
            psim__exec_error(error, PSIM_ERROR_INPUT, e->g, n,
                             "feed is %s but the graph expects %s", psim_dtype_name(t->dtype),
                             psim_dtype_name(o->dtype));
            return FALSE;
        }
        gboolean bad = o->rank >= 0 && o->rank != t->rank;
        for (int32_t i = 0; !bad && o->rank >= 0 && i < o->rank; i++)
            if (o->dims[i] >= 0 && o->dims[i] != t->dims[i])
                bad = TRUE;
        if (bad) {
            g_autoptr(GString) a = g_string_new(NULL);
            g_autoptr(GString) b = g_string_new(NULL);
            shape_str(a, t->rank, t->dims);
            shape_str(b, o->rank, o->dims);
            psim__exec_error(error, PSIM_ERROR_INPUT, e->g, n,
                             "feed has shape %s but the graph expects %s (-1: any)", a->str,
                             b->str);
            return FALSE;
        }
        if (t->device >= 0 && !psim__worker_device_memory(e->w)) {
            psim__exec_error(error, PSIM_ERROR_INPUT, e->g, n,
                             "feed is in device memory; the %s executor needs a host tensor", psim_worker_device_type(e->w));
            return FALSE;
        }
    }
    return TRUE;
}

/* A binary min-heap of local indices keyed by e->prio (ties: lower index). */
static inline gboolean prio_less(const PsimExecutor *e, int32_t a, int32_t b)
{
    return e->prio[a] < e->prio[b] || (e->prio[a] == e->prio[b] && a < b);
}

static void heap_push(PsimExecutor *e, int32_t *n, int32_t x)
{
    int32_t *h = e->queue, i = (*n)++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!prio_less(e, x, h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static int32_t heap_pop(PsimExecutor *e, int32_t *n)
{
    int32_t *h = e->queue, top = h[0], x = h[--(*n)], i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && prio_less(e, h[c + 1], h[c]))
            c++;
        if (!prio_less(e, h[c], x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static void release_slots(PsimExecutor *e)
{
    for (int32_t s = 0; s < e->n_slots; s++)
        if (e->slots[s]) {
            psim_tensor_unref(e->slots[s]);
            e->slots[s] = NULL;
        }
}

static void recv_done(PsimTensor *t, gboolean ok, void *user)
{
    RecvCtx *rc = user;
    PsimExecutor *e = rc->e;
    pthread_mutex_lock(&e->inbox_lock);
    int n = atomic_load(&e->inbox_n);
    e->inbox[n] = (InboxEntry){rc->i, t, ok};
    atomic_store(&e->inbox_n, n + 1);
    pthread_cond_signal(&e->inbox_cond);
    pthread_mutex_unlock(&e->inbox_lock);
}

/* Moves the completed Recvs to inbox_work (waiting for one when `wait`); returns their count. */
static int inbox_take(PsimExecutor *e, gboolean wait)
{
    pthread_mutex_lock(&e->inbox_lock);
    while (wait && atomic_load(&e->inbox_n) == 0)
        pthread_cond_wait(&e->inbox_cond, &e->inbox_lock);
    int n = atomic_load(&e->inbox_n);
    memcpy(e->inbox_work, e->inbox, sizeof(InboxEntry) * (size_t)n);
    atomic_store(&e->inbox_n, 0);
    pthread_mutex_unlock(&e->inbox_lock);
    return n;
}

/* A device waiting on its Recvs polls (yielding its core to any other runnable thread) for up
 * to this long before it sleeps. A core that sleeps in the middle of a step runs what comes
 * next slower on the VMs this was measured on: inception_v1 on one core with 500 us sleeps
 * between its kernels spent 3 to 65% more time in them (42 ms without), with 500 us of polling
 * 0 to 10% (docs/exec.md), and a sleeping thread takes tens of microseconds to wake. */
#define RECV_SPIN_US 20000.0

static struct timespec abs_time(double us)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(us * 1e-6);
    ts.tv_nsec = (long)((us - (double)ts.tv_sec * 1e6) * 1e3);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    } else if (ts.tv_nsec < 0) {
        ts.tv_nsec = 0;
    }
    return ts;
}

/* Returns once a Recv has arrived or the limit (psim_exec_now_us clock; 0: none; the deadlock
 * detector's next look) is past. It spins with the pause hint first (PSIM_EXEC_PAUSE_SPIN_US),
 * then polls yielding its core, then sleeps. */
/* What arrived from other processes for this device's Recvs, taken in on this thread. */
static gboolean remote_poll(PsimExecutor *e)
{
    return e->poll && e->poll_node >= 0 && e->poll(e->poll_user, e->poll_node);
}

/* With a poll hook, a device waits for a Recv of another process by polling (its own thread is
 * the one that takes it in): it sleeps at most this long between looks once the spin is over. */
#define RECV_POLL_SLEEP_US 200.0

static void inbox_wait(PsimExecutor *e, double limit)
{
    gboolean polls = e->poll && e->poll_node >= 0;
    double start = psim_exec_now_us();
    double pause = e->pause_spin_us;
    double pause_end = start + pause, spin_end = start + RECV_SPIN_US;
    for (;;) {
        if (atomic_load(&e->inbox_n) > 0 || (polls && remote_poll(e)))
            return;
        double now = psim_exec_now_us();
        if (limit > 0 && now >= limit)
            return;
        if (now < pause_end) {
            /* Another process's message is seen only by looking (MPI_Testsome): look every 4
             * pauses, not every 64 (1.6-1.7 us on this project's AMD EPYC VM, more than the
             * message's own latency; bench-mpi-transfer's 1 KiB hop within a step went from
             * 3.4-4.3 to 1.0-2.0 us, docs/perf.md). */
            int n_pause = polls ? 4 : 64;
            for (int k = 0; k < n_pause && atomic_load_explicit(&e->inbox_n, memory_order_relaxed) == 0; k++)
                psim__cpu_relax();
            continue;
        }
        if (now < spin_end) {
            sched_yield();
            continue;
        }
        gboolean timed_out = FALSE;
        if (polls) {
            /* Nothing can wake this thread for what it has to take in itself: look again
             * after a short sleep. */
            double until = now + RECV_POLL_SLEEP_US;
            if (limit > 0 && limit < until)
                until = limit;
            struct timespec ts = abs_time(until);
            pthread_mutex_lock(&e->inbox_lock);
            if (atomic_load(&e->inbox_n) == 0)
                pthread_cond_timedwait(&e->inbox_cond, &e->inbox_lock, &ts);
            pthread_mutex_unlock(&e->inbox_lock);
            continue;
        }
        pthread_mutex_lock(&e->inbox_lock);
        while (atomic_load(&e->inbox_n) == 0) {
            if (limit <= 0) {
                pthread_cond_wait(&e->inbox_cond, &e->inbox_lock);
                continue;
            }
            struct timespec ts = abs_time(limit);
            if (pthread_cond_timedwait(&e->inbox_cond, &e->inbox_lock, &ts) == ETIMEDOUT) {
                timed_out = TRUE;
                break;
            }
        }
        pthread_mutex_unlock(&e->inbox_lock);
        if (timed_out)
            return;
        pause_end = psim_exec_now_us() + pause;
        spin_end = pause_end - pause + RECV_SPIN_US;
    }
}

/* The deadlock detector's view of a step: the rendezvous' progress count last seen, and since
 * when it has stood still. */
typedef struct {
    uint64_t seen;
    double since;
} Stall;

static void stall_begin(PsimExecutor *e, Stall *st)
{
    st->seen = e->rdv ? psim__rendezvous_progress(e->rdv) : 0;
    st->since = psim_exec_now_us();
}

/* The deadlock: names (up to 4 of) the Recvs of this device still waiting for their Send. */
static void stall_error(PsimExecutor *e, double waited_s, GError **error)
{
    g_autoptr(GString) names = g_string_new(NULL);
    int32_t n_waiting = 0;
    for (int32_t i = 0; i < e->n_exec; i++)
        if (e->recv_state[i] == RECV_ASKED && n_waiting++ < 4)
            g_string_append_printf(names, "%s'%s'", n_waiting > 1 ? ", " : "",
                                   psim_graph_node(e->g, e->exec_node[i])->name);
    if (n_waiting > 4)
        g_string_append_printf(names, " and %d more", n_waiting - 4);
    psim__exec_error(error, PSIM_ERROR_RUNTIME, e->g, NULL,
                     "deadlock: no device completed a node for %.1f s while %s %s on device '%s' "
                     "(the orders of the plan wait on each other)",
                     waited_s, names->str, n_waiting == 1 ? "waits" : "wait",
                     psim_worker_name(e->w));
}

/* Waits for a Recv, and fails the step when, all that time, no device sharing the rendezvous
 * completes a node for the stall timeout: progress is counted in nodes, so that a deadlock is
 * found however long the kernels of a healthy step take (the timeout must only exceed the
 * longest one). */
static gboolean recv_wait(PsimExecutor *e, Stall *st, GError **error)
{
    double timeout_us = e->opts.stall_timeout_s == 0 ? PSIM_EXEC_STALL_TIMEOUT_S * 1e6
                                                      : e->opts.stall_timeout_s * 1e6;
    if (!e->rdv || !(timeout_us > 0)) {
        inbox_wait(e, 0);
        return TRUE;
    }
    uint64_t p = psim__rendezvous_progress(e->rdv);
    double now = psim_exec_now_us();
    if (p != st->seen) {
        st->seen = p;
        st->since = now;
    } else if (now - st->since >= timeout_us) {
        stall_error(e, (now - st->since) * 1e-6, error);
        return FALSE;
    }
    inbox_wait(e, MIN(now + STALL_CHECK_US, st->since + timeout_us));
    return TRUE;
}

void psim_executor_set_step(PsimExecutor *e, uint64_t step)
{
    e->step_id = step;
    e->step_set = TRUE;
}

void psim_executor_set_stall_timeout(PsimExecutor *e, double seconds)
{
    e->opts.stall_timeout_s = seconds;
}

/* The ready queue of one step: a ring (FIFO), a heap (PRIORITY) or a cursor over the static
 * order. */
typedef struct {
    int32_t head, tail, n_heap, cursor, n_ready;
} Ready;

static inline void ready_push(PsimExecutor *e, Ready *q, int32_t x)
{
    if (e->opts.order == PSIM_EXEC_ORDER_FIFO) {
        e->queue[q->tail] = x;
        q->tail = q->tail + 1 == e->n_exec ? 0 : q->tail + 1;
        q->n_ready++;
    } else if (e->opts.order == PSIM_EXEC_ORDER_PRIORITY) {
        heap_push(e, &q->n_heap, x);
        q->n_ready++;
    }
}

/* The next node to run, or -1 when none is ready. */
static inline int32_t ready_pop(PsimExecutor *e, Ready *q)
{
    if (e->opts.order == PSIM_EXEC_ORDER_STATIC) {
        if (q->cursor < e->n_exec && e->pending[e->static_order[q->cursor]] == 0)
            return e->static_order[q->cursor++];
        return -1;
    }
    if (q->n_ready == 0)
        return -1;
    q->n_ready--;
    if (e->opts.order == PSIM_EXEC_ORDER_FIFO) {
        int32_t i = e->queue[q->head];
        q->head = q->head + 1 == e->n_exec ? 0 : q->head + 1;
        return i;
    }
    return heap_pop(e, &q->n_heap);
}

/* Node i finished (its outputs are in its slots): checks them, releases inputs whose last
 * consumer it was, and makes successors ready. */
static gboolean node_finish(PsimExecutor *e, Ready *q, int32_t i, GError **error)
{
    const PsimKernelCtx *c = &e->ctx[i];
    if (e->rdv)
        psim__rendezvous_progress_add(e->rdv);
    const int32_t base = (int32_t)(c->outputs - e->slots);
    for (int32_t k = 0; k < c->n_outputs; k++) {
        int32_t s = base + k;
        if (e->uses_init[s] == 0) {
            if (e->slots[s]) {
                psim_tensor_unref(e->slots[s]);
                e->slots[s] = NULL;
            }
        } else if (!e->slots[s]) {
            const PsimKernelDef *kd = e->kdef[i];
            psim__exec_error(error, PSIM_ERROR_RUNTIME, e->g, c->node,
                             "kernel %s did not set output %d", kd->name ? kd->name : kd->op, k);
            return FALSE;
        }
    }
    for (int32_t k = e->in_off[i]; k < e->in_off[i + 1]; k++) {
        int32_t s = e->in_slot[k];
        if (s >= 0 && --e->uses[s] == 0) {
            psim_tensor_unref(e->slots[s]);
            e->slots[s] = NULL;
        }
    }
    for (int32_t j = e->succ_off[i]; j < e->succ_off[i + 1]; j++) {
        int32_t x = e->succ[j];
        if (--e->pending[x] == 0) {
            if (e->opts.recv_copier && e->kdef[x] == &builtin_send) {
                e->eager[e->n_eager++] = x;
                e->sent[x] = 1;
            } else {
                ready_push(e, q, x);
            }
        }
    }
    return TRUE;
}

static void record(PsimExecutor *e, int32_t i, double start, double end);

/* Runs node i's kernel on this thread, records it and finishes it. */
static gboolean run_node(PsimExecutor *e, Ready *q, int32_t i, double t0, GError **error)
{
    const PsimKernelDef *kd = e->kdef[i];
    const int32_t in0 = e->in_off[i], in1 = e->in_off[i + 1];
    for (int32_t k = in0; k < in1; k++)
        e->in_ptrs[k] = e->in_slot[k] >= 0 ? e->slots[e->in_slot[k]] : NULL;
    PsimKernelCtx *c = &e->ctx[i];
    GError *err = NULL;
    if (e->opts.spin_before_us > 0 && kd != &builtin_send) {
        double until = psim_exec_now_us() + e->opts.spin_before_us;
        while (psim_exec_now_us() < until)
            psim__cpu_relax();
    }
    double ts = psim_exec_now_us();
    gboolean ok = kd->run(c, &err);
    double te = psim_exec_now_us();
    e->n_kernel_runs++;
    record(e, i, ts - t0, te - t0);
    if (!ok) {
        kernel_error(error, err, e->g, c->node, kd);
        return FALSE;
    }
    e->finished[i] = 1;
    return node_finish(e, q, i, error);
}

/* Runs the Sends that became ready (eager, with a recv_copier); counts them in *done. */
static gboolean sends_run(PsimExecutor *e, Ready *q, double t0, int32_t *done, GError **error)
{
    while (e->n_eager > 0) {
        int32_t i = e->eager[--e->n_eager];
        if (!run_node(e, q, i, t0, error))
            return FALSE;
        (*done)++;
    }
    return TRUE;
}

static void record(PsimExecutor *e, int32_t i, double start, double end)
{
    e->ran[e->n_run] = e->exec_node[i];
    e->t_start[e->n_run] = start;
    e->t_end[e->n_run] = end;
    e->n_run++;
}

/* Recv i has its tensor t (this device's, or NULL for a control transfer): it is done at now. */
static gboolean recv_complete(PsimExecutor *e, Ready *q, int32_t i, PsimTensor *t, double now,
                              GError **error)
{
    const PsimKernelCtx *c = &e->ctx[i];
    if (c->n_outputs > 0)
        c->outputs[0] = t;
    else
        psim_tensor_unref(t);
    record(e, i, e->recv_start[i], now);
    return node_finish(e, q, i, error);
}

/* Completes the Recvs in inbox_work[0..n). */
static gboolean recvs_finish(PsimExecutor *e, Ready *q, int n, int32_t *outstanding, double t0,
                             GError **error)
{
    gboolean ok = TRUE;
    double now = psim_exec_now_us() - t0;
    for (int k = 0; k < n; k++) {
        InboxEntry *en = &e->inbox_work[k];
        e->recv_state[en->i] = RECV_ARRIVED;
        (*outstanding)--;
        const PsimKernelCtx *c = &e->ctx[en->i];
        if (!ok || !en->ok) {
            psim_tensor_unref(en->t);
            if (ok)
                psim__exec_error(error, PSIM_ERROR_RUNTIME, e->g, c->node,
                                 "the transfer was aborted (the step failed on another device)");
            ok = FALSE;
            continue;
        }
        if (!recv_complete(e, q, en->i, en->t, now, error))
            ok = FALSE;
    }
    return ok;
}

/* Recvs copied by this thread (recv_copier): takes what arrived, then copies and completes,
 * one at a time and lowest priority first, every arrived Recv not held after a node of this
 * device that has yet to run, taking new arrivals after each copy. Counts completed Recvs in
 * *done. No Recv waits for a time: a step ahead of its plan stays ahead. */
static gboolean recvs_copy(PsimExecutor *e, Ready *q, int32_t *outstanding, int32_t *done,
                           double t0, GError **error)
{
    const PsimRecvCopier *rc = e->opts.recv_copier;
    void *user = e->opts.recv_user;
    for (;;) {
        int n = atomic_load(&e->inbox_n) > 0 ? inbox_take(e, FALSE) : 0;
        for (int k = 0; k < n; k++) {
            e->recv_state[e->inbox_work[k].i] = RECV_ARRIVED;
            e->held[e->n_held++] = e->inbox_work[k];
        }
        double best_pr = 0;
        int32_t best = -1;
        for (int32_t k = 0; k < e->n_held; k++) {
            const InboxEntry *h = &e->held[k];
            if (!h->ok) {
                best = k; /* aborted: fail now */
                break;
            }
            double pr;
            int32_t after = rc->after(user, e->exec_node[h->i], &pr);
            /* Held until that node has run here; a node this executor does not run (folded
             * away) holds nothing. */
            int32_t a = after >= 0 && after < e->n_nodes ? e->local[after] : -1;
            if (a >= 0 && !e->finished[a])
                continue;
            if (best < 0 || pr < best_pr || (pr == best_pr && h->i < e->held[best].i)) {
                best = k;
                best_pr = pr;
            }
        }
        if (best < 0)
            return TRUE;
        InboxEntry h = e->held[best];
        e->held[best] = e->held[--e->n_held];
        (*outstanding)--;
        const PsimKernelCtx *c = &e->ctx[h.i];
        if (!h.ok) {
            psim__exec_error(error, PSIM_ERROR_RUNTIME, e->g, c->node,
                             "the transfer was aborted (the step failed on another device)");
            return FALSE;
        }
        GError *err = NULL;
        PsimTensor *t = rc->copy(user, e->exec_node[h.i], h.t, &err);
        psim_tensor_unref(h.t);
        if (err) {
            g_propagate_error(error, err);
            return FALSE;
        }
        (*done)++;
        if (!recv_complete(e, q, h.i, t, psim_exec_now_us() - t0, error))
            return FALSE;
    }
}

gboolean psim_executor_run_here(PsimExecutor *e, PsimTensor *const *feeds, PsimTensor **outputs,
                                GError **error)
{
    if (outputs)
        memset(outputs, 0, sizeof(PsimTensor *) * (size_t)e->n_fetches);
    if (!psim_executor_check_feeds(e, feeds, error))
        return FALSE;
    if (!e->step_set)
        e->step_id = e->n_steps;
    e->step_set = FALSE;
    psim_worker_memory_reset_peak(e->w);
    double t0 = psim_exec_now_us();
    e->step_start = t0;
    e->n_run = 0;

    memcpy(e->uses, e->uses_init, sizeof(int32_t) * (size_t)e->n_slots);
    memcpy(e->pending, e->pending_init, sizeof(int32_t) * (size_t)e->n_exec);
    for (int32_t k = 0; k < e->n_const_slots; k++) {
        int32_t s = e->const_slots[k];
        e->slots[s] = psim_tensor_ref(e->const_vals[s]);
    }
    for (int32_t f = 0; f < e->n_feeds; f++) {
        int32_t s = e->feed_slot[f];
        if (s >= 0 && e->uses_init[s] > 0)
            e->slots[s] = psim_tensor_ref(feeds[f]);
    }

    Ready q = {0};
    for (int32_t k = 0; k < e->n_initial_ready; k++)
        ready_push(e, &q, e->initial_ready[k]);
    int32_t done = 0, outstanding = 0;
    e->n_held = 0;
    e->n_eager = 0;
    if (e->opts.recv_copier) {
        memset(e->sent, 0, (size_t)e->n_exec);
        memset(e->finished, 0, (size_t)e->n_exec);
    }
    if (e->rdv)
        memset(e->recv_state, 0, (size_t)e->n_exec);
    Stall stall;
    stall_begin(e, &stall);
    if (e->opts.recv_copier) {
        /* Every Recv asks at once, whatever its place in the order: a transfer goes as soon as
         * its Send is done (and the node it is held after has run), as the simulator has it. */
        double now = psim_exec_now_us() - t0;
        for (int32_t i = 0; i < e->n_exec; i++)
            if (e->kdef[i] == &builtin_recv) {
                e->recv_start[i] = now;
                e->recv_state[i] = RECV_ASKED;
                outstanding++;
                psim_rendezvous_key_recv_async(e->rkey[i], e->step_id, recv_done,
                                           &e->recv_ctx[i]);
            }
    }
    while (done < e->n_exec) {
        if (e->opts.recv_copier) {
            /* (What arrived already is taken first: a look costs an MPI_Testsome.) */
            if (outstanding > 0 && e->poll && atomic_load(&e->inbox_n) == 0)
                remote_poll(e);
            if (outstanding > 0 && (atomic_load(&e->inbox_n) > 0 || e->n_held > 0) &&
                !recvs_copy(e, &q, &outstanding, &done, t0, error))
                goto fail;
            if (!sends_run(e, &q, t0, &done, error))
                goto fail;
            if (done >= e->n_exec)
                break;
        } else if (outstanding > 0 && atomic_load(&e->inbox_n) > 0) {
            int n = inbox_take(e, FALSE);
            done += n;
            if (!recvs_finish(e, &q, n, &outstanding, t0, error))
                goto fail;
            if (done >= e->n_exec)
                break;
        }
        int32_t i = ready_pop(e, &q);
        if (i < 0) {
            if (outstanding == 0) {
                if (e->opts.order == PSIM_EXEC_ORDER_STATIC)
                    psim__exec_error(error, PSIM_ERROR_INPUT, e->g,
                                     psim_graph_node(e->g, e->exec_node[e->static_order[q.cursor]]),
                                     "comes in the static order before its inputs are ready");
                else
                    psim__exec_error(error, PSIM_ERROR_RUNTIME, e->g, NULL,
                                     "no node is ready after %d of %d ran (a cycle?)", done,
                                     e->n_exec);
                goto fail;
            }
            /* Everything left waits on a Recv: wait until one arrives, failing if the step has
             * stalled. */
            if (!recv_wait(e, &stall, error))
                goto fail;
            if (e->opts.recv_copier)
                continue;
            int n = inbox_take(e, FALSE);
            done += n;
            if (!recvs_finish(e, &q, n, &outstanding, t0, error))
                goto fail;
            continue;
        }
        const PsimKernelDef *kd = e->kdef[i];
        if (kd == &builtin_send && e->sent[i])
            continue; /* ran as soon as it was ready */
        if (kd == &builtin_recv) {
            if (e->opts.recv_copier)
                continue; /* asked for at the start of the step */
            e->recv_start[i] = psim_exec_now_us() - t0;
            e->recv_state[i] = RECV_ASKED;
            outstanding++;
            psim_rendezvous_key_recv_async(e->rkey[i], e->step_id, recv_done, &e->recv_ctx[i]);
            continue;
        }
        if (!run_node(e, &q, i, t0, error))
            goto fail;
        done++;
        if (!sends_run(e, &q, t0, &done, error))
            goto fail;
    }
    /* Asynchronous devices (GPU streams) finish the step's work; fetches leave as host tensors. */
    if (!psim_worker_sync(e->w, error))
        goto fail;
    for (int32_t f = 0; f < e->n_fetches; f++) {
        int32_t s = e->fetch_slot[f];
        if (s < 0)
            continue;
        if (outputs && !(outputs[f] = psim_worker_to_host(e->w, e->slots[s], error)))
            goto fail;
        if (--e->uses[s] == 0) {
            psim_tensor_unref(e->slots[s]);
            e->slots[s] = NULL;
        }
    }
    /* Constants and feeds that no node read (fetched only, or cut) are released here. */
    release_slots(e);
    e->step_us = psim_exec_now_us() - t0;
    psim_worker_memory(e->w, &e->peak_bytes);
    e->n_steps++;
    return TRUE;
fail:
    /* Wake the other devices' Recvs, and wait for ours: none may complete into a later step. */
    if (e->rdv)
        psim_rendezvous_abort(e->rdv);
    for (int32_t k = 0; k < e->n_held; k++) {
        psim_tensor_unref(e->held[k].t);
        outstanding--;
    }
    e->n_held = 0;
    while (outstanding > 0) {
        int n = inbox_take(e, TRUE);
        for (int k = 0; k < n; k++) {
            psim_tensor_unref(e->inbox_work[k].t);
            outstanding--;
        }
    }
    release_slots(e);
    if (outputs)
        for (int32_t f = 0; f < e->n_fetches; f++) {
            psim_tensor_unref(outputs[f]);
            outputs[f] = NULL;
        }
    e->step_us = psim_exec_now_us() - t0;
    e->n_steps++;
    return FALSE;
}

typedef struct {
    PsimExecutor *e;
    PsimTensor *const *feeds;
    PsimTensor **outputs;
} RunArgs;

static gboolean run_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    RunArgs *a = arg;
    return psim_executor_run_here(a->e, a->feeds, a->outputs, error);
}

gboolean psim_executor_run(PsimExecutor *e, PsimTensor *const *feeds, PsimTensor **outputs,
                           GError **error)
{
    if (!psim_executor_check_feeds(e, feeds, error))
        return FALSE;
    RunArgs a = {e, feeds, outputs};
    return psim_worker_call(e->w, run_job, &a, error);
}

/* --- Introspection ----------------------------------------------------------------------- */

void psim_executor_stats(const PsimExecutor *e, PsimExecStats *out)
{
    memset(out, 0, sizeof *out);
    out->n_run = e->n_run;
    out->nodes = e->ran;
    out->start = e->t_start;
    out->end = e->t_end;
    out->step_us = e->step_us;
    out->step_start_us = e->step_start;
    out->n_exec = e->n_exec;
    out->n_const = e->n_const;
    out->n_fed = e->n_fed;
    out->n_steps = e->n_steps;
    out->n_kernel_runs = e->n_kernel_runs;
    out->peak_bytes = e->peak_bytes;
}

void psim_executor_timeline_add(const PsimExecutor *e, PsimTimeline *t, int32_t device,
                                double offset_us)
{
    for (int32_t k = 0; k < e->n_run; k++) {
        const PsimNode *n = psim_graph_node(e->g, e->ran[k]);
        psim_timeline_op_add(t, n->name, n->op, n->id, device, 0, e->t_start[k] + offset_us,
                             e->t_end[k] + offset_us);
    }
    if (e->step_us + offset_us > t->step_time_us)
        t->step_time_us = e->step_us + offset_us;
    if (device >= 0 && device < t->n_devices && e->peak_bytes > t->peak_memory[device])
        t->peak_memory[device] = e->peak_bytes;
}

const PsimGraph *psim_executor_graph(const PsimExecutor *e) { return e->g; }
int32_t psim_executor_n_feeds(const PsimExecutor *e) { return e->n_feeds; }
PsimPort psim_executor_feed_port(const PsimExecutor *e, int32_t i) { return e->feed_port[i]; }
PsimPort psim_executor_fetch_port(const PsimExecutor *e, int32_t i) { return e->fetch_port[i]; }

void psim__executor_set_poll(PsimExecutor *e, gboolean (*poll)(void *user, int32_t node), void *user)
{
    e->poll = poll;
    e->poll_user = user;
}

void psim__executor_share_core(PsimExecutor *e)
{
    e->pause_spin_us = 0;
}
