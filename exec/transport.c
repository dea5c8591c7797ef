/* Transfers between devices of one process, as the simulator models a shared link: one copy
 * thread per link (ordered device pair) carries one transfer at a time, and transfers waiting
 * for it leave by the plan's recv priority (lower first, ties by transfer index) once their
 * earliest start has passed. The copy lands in a buffer that the destination worker accounts
 * for, written by a thread pinned to the destination's cores (first touch), and the device
 * threads never wait for it: a Send only queues, a Recv is completed by the rendezvous. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "exec-private.h"

typedef struct Link Link;

typedef struct {
    PsimTensor *t; /* the Send's tensor while queued or copied (a reference) */
    uint64_t step;
    double start, end; /* psim_exec_now_us clock */
    uint64_t bytes;
    gboolean done; /* carried in the last step */
} XferState;

struct Link {
    PsimTransport *tp;
    int32_t src, dst;
    pthread_t thread;
    gboolean started;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC, for timed waits until an earliest start */
    int32_t *waiting;    /* transfer indices, guarded by lock */
    int32_t n_waiting, cap;
    gboolean stop;
};

struct PsimTransport {
    const PsimPlan *p;
    PsimWorker *const *workers;
    PsimRendezvous *rdv;
    int32_t nd;
    Link **links;          /* nd * nd, NULL where no transfer goes */
    int32_t *xfer_of_send; /* per node of the plan's graph: transfer index or -1 */
    const char **key;      /* per transfer: the Recv node's rendezvous key */
    XferState *xs;
    atomic_int_least64_t origin_ns; /* INT64_MAX until the first device starts */
    atomic_int aborted;
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond;
    int32_t outstanding; /* queued or being copied, guarded by idle_lock */
    GError *error;       /* first transfer failure of the step, guarded by idle_lock */
};

static void transfer_finished(PsimTransport *tp, GError *err)
{
    pthread_mutex_lock(&tp->idle_lock);
    if (err && !tp->error)
        tp->error = err;
    else if (err)
        g_error_free(err);
    if (--tp->outstanding == 0)
        pthread_cond_broadcast(&tp->idle_cond);
    pthread_mutex_unlock(&tp->idle_lock);
}

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
        /* float32 sent as 16 bits: the high half (sign, exponent, 7 mantissa bits) crosses, the
         * low half is zero on arrival. */
        const uint32_t *a = src->data;
        uint32_t *b = t->data;
        for (int64_t i = 0; i < src->n_elems; i++)
            b[i] = a[i] & 0xFFFF0000u;
        *bytes = (uint64_t)src->n_elems * 2;
    } else {
        memcpy(t->data, src->data, src->nbytes);
        *bytes = src->nbytes;
    }
    return t;
}

static void carry(Link *l, int32_t x)
{
    PsimTransport *tp = l->tp;
    XferState *s = &tp->xs[x];
    PsimTensor *src = s->t;
    s->t = NULL;
    GError *err = NULL;
    if (atomic_load(&tp->aborted)) {
        psim_tensor_unref(src);
        transfer_finished(tp, NULL);
        return;
    }
    s->start = psim_exec_now_us();
    PsimTensor *dst = NULL;
    uint64_t bytes = 0;
    gboolean ok = TRUE;
    if (src) {
        dst = copy_to_dst(tp, x, src, &bytes, &err);
        ok = dst != NULL;
    }
    psim_tensor_unref(src); /* the Send's input is held until the copy has arrived */
    s->end = psim_exec_now_us();
    s->bytes = bytes;
    s->done = ok;
    if (ok) {
        psim_rendezvous_send(tp->rdv, tp->key[x], s->step, dst);
        psim_tensor_unref(dst);
    } else {
        /* The Recv waits for nothing now: fail the step on every device. */
        atomic_store(&tp->aborted, 1);
        psim_rendezvous_abort(tp->rdv);
    }
    transfer_finished(tp, err);
}

static void *link_main(void *arg)
{
    Link *l = arg;
    PsimTransport *tp = l->tp;
    const PsimDevice *d = psim_worker_device(tp->workers[l->dst]);
    if (d && d->n_cores > 0) {
        /* Pages the copy touches first are the destination's (NUMA first touch). A failure only
         * costs locality: the device worker itself reports cores that do not exist. */
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int32_t i = 0; i < d->n_cores; i++)
            if (d->cores[i] >= 0 && d->cores[i] < CPU_SETSIZE)
                CPU_SET(d->cores[i], &set);
        if (CPU_COUNT(&set) > 0)
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    const PsimTransfer *trs = tp->p->transfers;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        if (l->n_waiting == 0) {
            if (l->stop)
                break;
            pthread_cond_wait(&l->cond, &l->lock);
            continue;
        }
        /* The eligible transfer of lowest priority; else sleep until the next earliest start. */
        int64_t origin = atomic_load(&tp->origin_ns);
        double now = psim_exec_now_us(), wake = 0;
        gboolean aborted = atomic_load(&tp->aborted);
        int32_t best = -1;
        for (int32_t k = 0; k < l->n_waiting; k++) {
            int32_t x = l->waiting[k];
            double at = (double)origin * 1e-3 + trs[x].earliest_start;
            if (!aborted && trs[x].earliest_start > 0 && at > now) {
                if (wake == 0 || at < wake)
                    wake = at;
                continue;
            }
            if (best < 0 || trs[x].priority < trs[l->waiting[best]].priority ||
                (trs[x].priority == trs[l->waiting[best]].priority && x < l->waiting[best]))
                best = k;
        }
        if (best < 0) {
            struct timespec ts;
            double us = wake;
            ts.tv_sec = (time_t)(us * 1e-6);
            ts.tv_nsec = (long)((us - (double)ts.tv_sec * 1e6) * 1e3);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            } else if (ts.tv_nsec < 0) {
                ts.tv_nsec = 0;
            }
            pthread_cond_timedwait(&l->cond, &l->lock, &ts);
            continue;
        }
        int32_t x = l->waiting[best];
        l->waiting[best] = l->waiting[--l->n_waiting];
        pthread_mutex_unlock(&l->lock);
        carry(l, x);
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

static void link_free(Link *l)
{
    if (!l)
        return;
    if (l->started) {
        pthread_mutex_lock(&l->lock);
        l->stop = TRUE;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        pthread_join(l->thread, NULL);
    }
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    g_free(l->waiting);
    g_free(l);
}

PsimTransport *psim__transport_new(const PsimPlan *p, PsimWorker *const *workers,
                                   PsimRendezvous *rdv, GError **error)
{
    PsimTransport *tp = g_new0(PsimTransport, 1);
    tp->p = p;
    tp->workers = workers;
    tp->rdv = rdv;
    tp->nd = p->n_devices;
    tp->links = g_new0(Link *, (gsize)tp->nd * (gsize)tp->nd + 1);
    int32_t n = psim_graph_n_nodes(p->graph);
    tp->xfer_of_send = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        tp->xfer_of_send[v] = -1;
    tp->key = g_new0(const char *, p->n_transfers + 1);
    tp->xs = g_new0(XferState, p->n_transfers + 1);
    atomic_init(&tp->origin_ns, INT64_MAX);
    atomic_init(&tp->aborted, 0);
    pthread_mutex_init(&tp->idle_lock, NULL);
    pthread_cond_init(&tp->idle_cond, NULL);
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *tr = &p->transfers[x];
        if (tr->send < 0 || tr->send >= n || tr->recv < 0 || tr->recv >= n || tr->src < 0 ||
            tr->src >= tp->nd || tr->dst < 0 || tr->dst >= tp->nd) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: transfer %d names a node or device that is not in the plan",
                        psim_graph_name(p->graph) ? psim_graph_name(p->graph) : "plan", x);
            goto fail;
        }
        tp->xfer_of_send[tr->send] = x;
        tp->key[x] = psim_node_attr_string(psim_graph_node(p->graph, tr->recv), "key", tr->key);
        int32_t li = tr->src * tp->nd + tr->dst;
        if (tp->links[li])
            continue;
        Link *l = g_new0(Link, 1);
        l->tp = tp;
        l->src = tr->src;
        l->dst = tr->dst;
        pthread_mutex_init(&l->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&l->cond, &ca);
        pthread_condattr_destroy(&ca);
        tp->links[li] = l;
        int rc = pthread_create(&l->thread, NULL, link_main, l);
        if (rc) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "cannot start the copy thread of link %d -> %d: %s", tr->src, tr->dst,
                        g_strerror(rc));
            goto fail;
        }
        l->started = TRUE;
    }
    /* Room for every transfer of a link at once: a step queues each at most once. */
    for (int32_t x = 0; x < p->n_transfers; x++) {
        Link *l = tp->links[p->transfers[x].src * tp->nd + p->transfers[x].dst];
        l->cap++;
    }
    for (int32_t li = 0; li < tp->nd * tp->nd; li++)
        if (tp->links[li])
            tp->links[li]->waiting = g_new(int32_t, tp->links[li]->cap + 1);
    return tp;
fail:
    psim__transport_free(tp);
    return NULL;
}

void psim__transport_free(PsimTransport *tp)
{
    if (!tp)
        return;
    for (int32_t li = 0; li < tp->nd * tp->nd; li++)
        link_free(tp->links[li]);
    for (int32_t x = 0; x < tp->p->n_transfers; x++)
        psim_tensor_unref(tp->xs[x].t);
    if (tp->error)
        g_error_free(tp->error);
    pthread_mutex_destroy(&tp->idle_lock);
    pthread_cond_destroy(&tp->idle_cond);
    g_free(tp->links);
    g_free(tp->xfer_of_send);
    g_free(tp->key);
    g_free(tp->xs);
    g_free(tp);
}

void psim__transport_step_begin(PsimTransport *tp)
{
    /* Called while no transfer is in flight (after psim__transport_wait_idle). */
    for (int32_t x = 0; x < tp->p->n_transfers; x++)
        tp->xs[x].done = FALSE;
    atomic_store(&tp->origin_ns, INT64_MAX);
    atomic_store(&tp->aborted, 0);
    pthread_mutex_lock(&tp->idle_lock);
    g_clear_error(&tp->error);
    pthread_mutex_unlock(&tp->idle_lock);
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
    int32_t x = node >= 0 && node < psim_graph_n_nodes(tp->p->graph) ? tp->xfer_of_send[node] : -1;
    g_return_if_fail(x >= 0);
    const PsimTransfer *tr = &tp->p->transfers[x];
    Link *l = tp->links[tr->src * tp->nd + tr->dst];
    pthread_mutex_lock(&tp->idle_lock);
    tp->outstanding++;
    pthread_mutex_unlock(&tp->idle_lock);
    pthread_mutex_lock(&l->lock);
    g_assert(l->n_waiting < l->cap);
    tp->xs[x].t = psim_tensor_ref(t);
    tp->xs[x].step = step;
    l->waiting[l->n_waiting++] = x;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

void psim__transport_abort(PsimTransport *tp)
{
    atomic_store(&tp->aborted, 1);
    for (int32_t li = 0; li < tp->nd * tp->nd; li++) {
        Link *l = tp->links[li];
        if (!l)
            continue;
        pthread_mutex_lock(&l->lock);
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
    }
}

gboolean psim__transport_wait_idle(PsimTransport *tp, GError **error)
{
    pthread_mutex_lock(&tp->idle_lock);
    while (tp->outstanding > 0)
        pthread_cond_wait(&tp->idle_cond, &tp->idle_lock);
    GError *err = tp->error;
    tp->error = NULL;
    pthread_mutex_unlock(&tp->idle_lock);
    if (err) {
        g_propagate_error(error, err);
        return FALSE;
    }
    return TRUE;
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
