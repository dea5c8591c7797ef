/* Transfers between devices of one process. A Send leaves its tensor in the rendezvous as it
 * is; the destination device's own thread makes the copy, between its kernels, before it runs
 * the next one: the executor hands each arrived Recv to psim__transport_copy, lowest plan
 * priority first, once the node it is held after (if any) has run there. So a copy never preempts a
 * kernel and no thread is woken to make it; the simulator models the same rule (a link
 * "by_destination" occupies the destination device for the copy). The copy lands in a buffer of
 * the destination worker, first touched by the destination's core. */
#include <stdatomic.h>
#include <string.h>

#include "exec-private.h"

typedef struct {
    double start, end; /* psim_exec_now_us clock */
    uint64_t bytes;
    gboolean done; /* carried in the last step */
} XferState;

struct PsimTransport {
    const PsimPlan *p;
    PsimWorker *const *workers;
    PsimRendezvous *rdv;
    int32_t nd;
    int32_t *xfer_of_node; /* per node of the plan's graph: transfer index of a Send or Recv, or -1 */
    PsimRendezvousKey **rkey; /* per transfer: its Recv's key in rdv */
    XferState *xs;
    atomic_int_least64_t origin_ns; /* INT64_MAX until the first device starts */
    /* Devices of other processes (no worker here): a transfer to one leaves through `remote`;
     * one from one arrives in the rendezvous as a tensor of the destination already. */
    const PsimRemoteTransport *remote;
};

/* Copies x's tensor into the destination's memory; the new tensor, or NULL with an error. */
static PsimTensor *copy_to_dst(PsimTransport *tp, int32_t x, PsimTensor *src, uint64_t *bytes,
                               GError **error)
{
    const PsimTransfer *tr = &tp->p->transfers[x];
    PsimWorker *w = tp->workers[tr->dst];
    if (src->device >= 0 || !src->data) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                    "transfer %s: only host tensors can be copied between CPU devices", tr->key);
        return NULL;
    }
    /* A destination with its own memory (GPU) gets a host tensor: its kernels upload it. */
    PsimTensor *t = psim__worker_device_memory(w)
                        ? psim_tensor_new(src->dtype, src->rank, src->dims, error)
                        : psim__worker_tensor_alloc(w, src->dtype, src->rank, src->dims, FALSE,
                                                    error);
    if (!t) {
        const PsimGraph *g = tp->p->graph;
        g_prefix_error(error, "%s: node '%s': cannot receive its tensor: ",
                       psim_graph_source(g) ? psim_graph_source(g)
                       : psim_graph_name(g) ? psim_graph_name(g)
                                            : "plan",
                       psim_graph_node(g, tr->recv)->name);
        return NULL;
    }
    if (tr->compressed && src->dtype == PSIM_DTYPE_FLOAT32) {
        /* float32 sent as 16 bits: the high half (sign, exponent, 7 mantissa bits) crosses,
         * truncated or rounded as the plan says, the low half is zero on arrival. */
        const uint32_t *a = src->data;
        uint32_t *b = t->data;
        if (tr->rounding == PSIM_ROUNDING_TRUNCATE)
            for (int64_t i = 0; i < src->n_elems; i++)
                b[i] = a[i] & 0xFFFF0000u;
        else
            for (int64_t i = 0; i < src->n_elems; i++)
                b[i] = psim_rounding_apply(a[i], tr->rounding);
        *bytes = (uint64_t)src->n_elems * 2;
    } else {
        memcpy(t->data, src->data, src->nbytes);
        *bytes = src->nbytes;
    }
    return t;
}

PsimTransport *psim__transport_new(const PsimPlan *p, PsimWorker *const *workers,
                                   PsimRendezvous *rdv, GError **error)
{
    PsimTransport *tp = g_new0(PsimTransport, 1);
    tp->p = p;
    tp->workers = workers;
    tp->rdv = rdv;
    tp->nd = p->n_devices;
    int32_t n = psim_graph_n_nodes(p->graph);
    tp->xfer_of_node = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        tp->xfer_of_node[v] = -1;
    tp->xs = g_new0(XferState, p->n_transfers + 1);
    tp->rkey = g_new0(PsimRendezvousKey *, p->n_transfers + 1);
    atomic_init(&tp->origin_ns, INT64_MAX);
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *tr = &p->transfers[x];
        if (tr->send < 0 || tr->send >= n || tr->recv < 0 || tr->recv >= n || tr->src < 0 ||
            tr->src >= tp->nd || tr->dst < 0 || tr->dst >= tp->nd) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: transfer %d names a node or device that is not in the plan",
                        psim_graph_name(p->graph) ? psim_graph_name(p->graph) : "plan", x);
            psim__transport_free(tp);
            return NULL;
        }
        tp->xfer_of_node[tr->send] = x;
        tp->xfer_of_node[tr->recv] = x;
        tp->rkey[x] = psim_rendezvous_key(rdv, psim_node_attr_string(psim_graph_node(p->graph, tr->recv), "key", tr->key));
    }
    return tp;
}

void psim__transport_free(PsimTransport *tp)
{
    if (!tp)
        return;
    g_free(tp->xfer_of_node);
    g_free(tp->xs);
    g_free(tp->rkey);
    g_free(tp);
}

void psim__transport_step_begin(PsimTransport *tp)
{
    for (int32_t x = 0; x < tp->p->n_transfers; x++)
        tp->xs[x].done = FALSE;
    atomic_store(&tp->origin_ns, INT64_MAX);
}

void psim__transport_origin(PsimTransport *tp, double t_us)
{
    int64_t ns = (int64_t)(t_us * 1e3);
    int64_t cur = atomic_load(&tp->origin_ns);
    while (ns < cur && !atomic_compare_exchange_weak(&tp->origin_ns, &cur, ns))
        ;
}

double psim__transport_origin_get(PsimTransport *tp)
{
    return (double)atomic_load(&tp->origin_ns) * 1e-3;
}

void psim__transport_send(void *user, int32_t node, uint64_t step, PsimTensor *t)
{
    PsimTransport *tp = user;
    int32_t x = node >= 0 && node < psim_graph_n_nodes(tp->p->graph) ? tp->xfer_of_node[node] : -1;
    g_return_if_fail(x >= 0 && tp->p->transfers[x].send == node);
    if (!tp->workers[tp->p->transfers[x].dst]) {
        g_return_if_fail(tp->remote);
        tp->remote->send(tp->remote->user, x, step, t);
        return;
    }
    psim_rendezvous_key_send(tp->rkey[x], step, t);
}

void psim__transport_set_remote(PsimTransport *tp, const PsimRemoteTransport *remote)
{
    tp->remote = remote;
}

PsimRendezvousKey *psim__transport_key(const PsimTransport *tp, int32_t x) { return tp->rkey[x]; }

static int32_t recv_xfer(PsimTransport *tp, int32_t node)
{
    int32_t x = node >= 0 && node < psim_graph_n_nodes(tp->p->graph) ? tp->xfer_of_node[node] : -1;
    return x >= 0 && tp->p->transfers[x].recv == node ? x : -1;
}

int32_t psim__transport_after(void *user, int32_t node, double *priority)
{
    PsimTransport *tp = user;
    int32_t x = recv_xfer(tp, node);
    if (x < 0) {
        *priority = 0;
        return -1;
    }
    *priority = tp->p->transfers[x].priority;
    return tp->p->transfers[x].after;
}

gboolean psim__transport_poll(void *user, int32_t node)
{
    PsimTransport *tp = user;
    if (!tp->remote || !tp->remote->poll)
        return FALSE;
    int32_t x = recv_xfer(tp, node);
    return x >= 0 && tp->remote->poll(tp->remote->user, tp->p->transfers[x].dst);
}

PsimTensor *psim__transport_copy(void *user, int32_t node, PsimTensor *src, GError **error)
{
    PsimTransport *tp = user;
    int32_t x = recv_xfer(tp, node);
    g_return_val_if_fail(x >= 0, NULL);
    XferState *s = &tp->xs[x];
    s->start = psim_exec_now_us();
    uint64_t bytes = 0;
    PsimTensor *t = NULL;
    if (src && !tp->workers[tp->p->transfers[x].src]) {
        /* From another process: it arrived in a buffer of this device already. */
        t = psim_tensor_ref(src);
        bytes = src->nbytes;
    } else if (src) {
        t = copy_to_dst(tp, x, src, &bytes, error);
    }
    s->end = psim_exec_now_us();
    s->bytes = bytes;
    s->done = !src || t != NULL;
    return t;
}

gboolean psim__transport_record(const PsimTransport *tp, int32_t x, double *start, double *end,
                                uint64_t *bytes)
{
    if (x < 0 || x >= tp->p->n_transfers || !tp->xs[x].done)
        return FALSE;
    *start = tp->xs[x].start;
    *end = tp->xs[x].end;
    *bytes = tp->xs[x].bytes;
    return TRUE;
}
