/* The discrete-event simulator: one step of a Plan on a cluster, with the cost model's times.
 * Events live in one binary heap ordered by (time, sequence), so ties resolve in insertion order
 * and the same inputs always give the same timeline. */
#include <math.h>
#include <string.h>

#include "placesim/sim.h"

enum { EV_NODE_END, EV_LINK_FREE, EV_XFER_ARRIVE, EV_COPY_END, EV_SEND_END, EV_XFER_READY };

typedef struct {
    double t;
    uint32_t seq;
    int32_t id;
    int32_t kind;
} Event;

typedef struct {
    Event *a;
    size_t n, cap;
    uint32_t seq;
} Heap;

static inline gboolean ev_less(const Event *x, const Event *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void heap_push(Heap *h, double t, int32_t id, int32_t kind)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->a = g_renew(Event, h->a, h->cap);
    }
    Event e = {t, h->seq++, id, kind};
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = e;
}

static Event heap_pop(Heap *h)
{
    Event top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_less(&h->a[c + 1], &h->a[c]))
            c++;
        if (!ev_less(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

/* A priority queue of ids keyed by (key, id): ready nodes (dynamic order) and waiting
 * transfers of a link. */
typedef struct {
    double key;
    int32_t id;
} PqItem;

typedef struct {
    PqItem *a;
    int32_t n, cap;
} Pq;

static inline gboolean pq_less(const PqItem *x, const PqItem *y)
{
    return x->key < y->key || (x->key == y->key && x->id < y->id);
}

static void pq_push(Pq *q, double key, int32_t id)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 16;
        q->a = g_renew(PqItem, q->a, q->cap);
    }
    PqItem e = {key, id};
    int32_t i = q->n++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!pq_less(&e, &q->a[p]))
            break;
        q->a[i] = q->a[p];
        i = p;
    }
    q->a[i] = e;
}

static int32_t pq_pop(Pq *q)
{
    PqItem top = q->a[0], last = q->a[--q->n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && pq_less(&q->a[c + 1], &q->a[c]))
            c++;
        if (!pq_less(&q->a[c], &last))
            break;
        q->a[i] = q->a[c];
        i = c;
    }
    if (q->n)
        q->a[i] = last;
    return top.id;
}

enum { KIND_COMPUTE = 0, KIND_SEND = 1, KIND_RECV = 2, KIND_PARAM = 3 };

/* A block back in its device's pool (exec/worker.c's, mirrored): its size class, when it was
 * last touched (the bytes written until then, Sim.touched), and, where another device copied it
 * and nothing has written it since, that device and what it had written (Dev.written) when it
 * read it: the next write pays for the block's lines still in that core's cache (the reclaim
 * curves at its bytes, less what the reader has written since: psim_cost_reclaim_left). */
typedef struct {
    int32_t cls;
    int32_t reader; /* -1: none */
    double mark, read_mark;
} Freed;

/* A pool: the blocks freed and not taken again, newest last (allocated on the first push). */
typedef struct {
    Freed *a;
    int32_t n, cap;
} Pool;

static void pool_push(Pool *p, Freed f)
{
    if (p->n == p->cap) {
        p->cap = MAX(8, 2 * p->cap);
        p->a = g_renew(Freed, p->a, p->cap);
    }
    p->a[p->n++] = f;
}

/* A device's pool costs: the reclaim curves, by an op and by a copy (psim_cost_model_reclaim),
 * and the cold-block curve (psim_cost_model_cold). */
typedef struct {
    PsimReclaimCurve op, copy;
    PsimReclaimAfter after;
    PsimColdCurve cold;
} PoolCosts;

/* A compute node running on one of a device's first 32 streams, while some device's ops are
 * slowed by others running (rescale_running): its work left at factor 1, since when, at which
 * factor, and the end its EV_NODE_END holds (any other end popped for it is stale). */
typedef struct {
    int32_t v; /* -1: none */
    double work, since, factor, end;
} Running;

typedef struct {
    int32_t n_streams;
    int32_t busy;         /* streams in use */
    uint32_t stream_mask; /* bit s set: stream s busy (first 32 streams) */
    int32_t pos;          /* static order: next position in order[d] */
    Pq ready;             /* dynamic order */
    Pq copies;            /* transfers it copies itself (by_destination links), by priority */
    uint64_t mem, peak, capacity;
    /* Waiting: when its last node ended with nothing else running on it (once something ran
     * this step; copies do not count), and the device's idle curve (psim_cost_model_idle_curve). */
    double idle_since;
    PsimIdleCurve idle;
    gboolean ran;
    /* Its pool: a node or copy takes the newest block of its class, as the executor does, and
     * pays what that block's state costs (pool_take). Its curves are s->pool_costs[pool_ix]
     * (devices of the same calibration share them; -1: none, no pool kept). */
    Pool pool;
    int32_t pool_ix;
    double written; /* bytes of the blocks it took (its outputs, copies into it), all passes */
    /* The executor's transfers to a device that copies them (psim_cost_model_hop): its Sends hold
     * its thread (each its transfer's s->xfer_send_us), one after another until sends_until; the
     * hand-off after each Send's end (s->xfer_handoff_us) holds neither device. */
    int32_t hop_ix; /* its Send's and hand-off's curves: s->hops[2 * hop_ix ..] (-1: none) */
    double sends_until;
    /* Its ops' cost factor while other devices are busy (psim_cost_busy_scale). */
    PsimBusyScale busy_scale;
    Running *run; /* by stream (its first 32), with s->scaled only */
} Dev;

typedef struct {
    gboolean busy;
    gboolean independent;
    gboolean by_dst;     /* the destination device makes the copy between its nodes */
    gboolean self;       /* a device to itself: free */
    PsimLink model;      /* the cost model's link (psim_link_time) */
    int32_t current;     /* transfer on the link */
    Pq waiting;
} Link;

/* How long a transfer of `bytes` keeps the link (or, by destination, the device) busy. */
static double link_occupy(const Link *l, uint64_t bytes)
{
    return l->self ? 0 : psim_link_occupancy(&l->model, bytes);
}

/* The fixed latency after the occupancy. */
static double link_latency(const Link *l)
{
    return l->self ? 0 : psim_link_latency(&l->model);
}

typedef struct {
    const PsimPlan *p;       /* NULL when simulating a placement (psim_sim_placement_step) */
    const PsimGraph *g;
    /* The step's structure, from the plan or built from a placement: transfers, each node's
     * device, each device's order, node priorities, and the transfer of each Recv. */
    const PsimTransfer *xf;
    int32_t n_xf;
    const int32_t *dev_of;
    int32_t *const *order_of;
    const int32_t *n_order;
    const double *prio;
    const int32_t *xfer_of_recv;
    int32_t *own_succ_off, *own_succ; /* a placement's successor lists (owned) */
    /* A placement's constant copies (psim_plan_node_replicated: its plan has a copy of the
     * generator on each other device that reads it, resident there), as (generator, device). */
    int32_t n_copies;
    int32_t *copy_node, *copy_dev; /* owned */
    PsimCostModel *m;
    const PsimCluster *c;
    PsimOrder order;
    int32_t n, nd;
    const int32_t *so, *s;  /* successors */
    int32_t *pending;
    uint8_t *kind;
    uint8_t *ready;
    uint8_t *done;
    double *start, *end;
    int32_t *binding;
    int32_t *stream;
    int32_t *out_off;
    int32_t *remaining;
    double *cost;           /* per node, on its device */
    PsimIdleCurve *idle;    /* per node, on a device with an idle curve: its own (NULL: none) */
    uint64_t *out_total;    /* per node: bytes of all its outputs */
    int32_t *in_off, *in_slot; /* per node: the output slots it consumes (parameters excluded) */
    uint64_t *slot_bytes;   /* per output slot */
    int32_t *slot_dev;
    int32_t *send_xfer;      /* per node: transfer index if Send, else -1 */
    int32_t *gated, *gated_next; /* per node, the transfers held until it finishes (a list) */
    int32_t *cluster_dev;    /* plan device -> cluster device */
    int32_t *done_order;
    int32_t n_done;
    double *xfer_start;
    double *xfer_request;
    Dev *dev;
    PoolCosts *pool_costs; /* the distinct pool costs of the devices */
    uint8_t *read_remote; /* per output slot: another device copied it (NULL without curves) */
    int32_t *read_dev;    /* per output slot: the device that copied it last */
    double *read_mark;    /* per output slot: that device's Dev.written then */
    int32_t n_pool_costs;
    PsimHopCurve *hops; /* the distinct (Send, hand-off) curve pairs of the devices */
    int32_t n_hops;
    /* With pool costs (read_remote set): per output slot, whether it is a block of its device's
     * pool (a computed node's output of some bytes that is not a view of its input, or a Recv's
     * copy), when
     * it was last touched, and the cold-block time its node paid in the one-device run the
     * in-situ rows come from (pool_reference); and the bytes written so far (all devices, all
     * passes). */
    uint8_t *slot_block;
    double *slot_mark;
    double *ref_cold;
    double touched;
    int32_t n_busy_dev; /* devices with a stream in use now */
    /* Per device, the others it shares cores with (psim_cluster_devices_share_cores), as lists
     * (NULL: no device shares): one of them works at a time, a copy by destination included. */
    int32_t *share_off, *share;
    gboolean scaled;    /* some device's busy_scale is not 1: running nodes change pace */
    Link *link;          /* one per ordered pair of devices that some transfer uses */
    int32_t n_links;
    int32_t *xfer_link;  /* per transfer: its link */
    double *xfer_send_us, *xfer_handoff_us; /* per transfer: its source's hop at its size */
    Heap heap;
    int32_t *dirty;       /* devices with new ready nodes, dispatched once per time step */
    uint8_t *is_dirty;
    int32_t *dirty_cause;
    int32_t n_dirty;
    double now;
    int64_t events;
    PsimSimResult *res;
    GError **error;
    gboolean failed;
    const uint64_t *cap; /* per device: memory limits over_* report against (NULL: memory_bytes) */
} Sim;

static void node_ready(Sim *s, int32_t v, int32_t cause);
static void xfer_request(Sim *s, int32_t x);
static void dispatch(Sim *s, int32_t d, int32_t cause);

static void mem_add(Sim *s, int32_t d, uint64_t bytes, int32_t node)
{
    if (d < 0 || !bytes)
        return;
    Dev *dv = &s->dev[d];
    dv->mem += bytes;
    if (dv->mem > dv->peak)
        dv->peak = dv->mem;
    if (dv->capacity && dv->mem > dv->capacity && s->res->over_device < 0) {
        s->res->over_device = d;
        s->res->over_node = node;
        s->res->over_time_us = s->now;
        s->res->over_bytes = dv->mem;
    }
}

static void mem_sub(Sim *s, int32_t d, uint64_t bytes)
{
    if (d < 0 || !bytes)
        return;
    Dev *dv = &s->dev[d];
    dv->mem = bytes > dv->mem ? 0 : dv->mem - bytes;
}

static uint64_t outputs_bytes(const PsimNode *v)
{
    uint64_t b = 0;
    for (int32_t k = 0; k < v->n_outputs; k++)
        b += v->outputs[k].bytes;
    return b;
}

/* What a node is to the simulator. Op names are interned per graph: compare pointers first,
 * strings only on a miss (*send_op, *recv_op remember the graph's). */
static uint8_t node_kind(const PsimNode *nv, const char **send_op, const char **recv_op)
{
    if (nv->op == *send_op || (!*send_op && !strcmp(nv->op, "Send") && (*send_op = nv->op)))
        return KIND_SEND;
    if (nv->op == *recv_op || (!*recv_op && !strcmp(nv->op, "Recv") && (*recv_op = nv->op)))
        return KIND_RECV;
    if ((nv->flags & (PSIM_NODE_PARAMETER | PSIM_NODE_CONSTANT)) ||
        (nv->op[0] == 'C' && nv->n_inputs == 0 && (!strcmp(nv->op, "Const") || !strcmp(nv->op, "Constant"))))
        return KIND_PARAM;
    return KIND_COMPUTE;
}

/* Node v's consumption of its inputs is over: release tensors whose last consumer it was. */
static void pool_put(Sim *s, int32_t slot);

static void release_inputs(Sim *s, int32_t v)
{
    for (int32_t i = s->in_off[v]; i < s->in_off[v + 1]; i++) {
        int32_t slot = s->in_slot[i];
        if (--s->remaining[slot] == 0) {
            mem_sub(s, s->slot_dev[slot], s->slot_bytes[slot]);
            pool_put(s, slot);
        }
    }
}

/* Frees outputs nobody consumes (dead outputs) once v is done. Graph outputs (fetches) stay. */
static void release_dead_outputs(Sim *s, int32_t v)
{
    for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++)
        if (s->remaining[k] == 0) {
            mem_sub(s, s->slot_dev[k], s->slot_bytes[k]);
            pool_put(s, k);
        }
}

static void node_done(Sim *s, int32_t v)
{
    s->done[v] = 1;
    s->end[v] = s->now;
    s->done_order[s->n_done++] = v;
    if (s->kind[v] != KIND_SEND)
        release_inputs(s, v);
    if (s->kind[v] != KIND_PARAM)
        release_dead_outputs(s, v);
    for (int32_t i = s->so[v]; i < s->so[v + 1]; i++) {
        int32_t u = s->s[i];
        if (--s->pending[u] == 0)
            node_ready(s, u, v);
    }
    /* Transfers held until v: those whose Send is done go now. */
    for (int32_t x = s->gated[v]; x >= 0; x = s->gated_next[x])
        if (s->done[s->xf[x].send])
            xfer_request(s, x);
}

static void link_start(Sim *s, int32_t li, int32_t x)
{
    Link *l = &s->link[li];
    const PsimTransfer *t = &s->xf[x];
    double occupy = link_occupy(l, t->bytes);
    s->xfer_start[x] = s->now;
    s->events++;
    /* The buffer on the destination exists from the transfer's start. */
    mem_add(s, t->dst, s->out_total[t->recv], t->recv);
    if (!l->independent) {
        l->busy = TRUE;
        l->current = x;
        heap_push(&s->heap, s->now + occupy, li, EV_LINK_FREE);
    }
    heap_push(&s->heap, s->now + occupy + link_latency(l), x, EV_XFER_ARRIVE);
}

static void mark_dirty(Sim *s, int32_t d, int32_t cause)
{
    if (!s->is_dirty[d]) {
        s->is_dirty[d] = 1;
        s->dirty[s->n_dirty++] = d;
    }
    s->dirty_cause[d] = cause;
}

static void xfer_request(Sim *s, int32_t x)
{
    const PsimTransfer *t = &s->xf[x];
    int32_t li = s->xfer_link[x];
    Link *l = &s->link[li];
    if (l->by_dst) {
        /* The destination copies it when it is between nodes, lowest priority first, once the
         * hand-off after the Send is over. */
        double ready = s->xfer_request[x] + s->xfer_handoff_us[x];
        if (ready > s->now) {
            heap_push(&s->heap, ready, x, EV_XFER_READY);
            return;
        }
        pq_push(&s->dev[t->dst].copies, t->priority, x);
        mark_dirty(s, t->dst, t->send);
    } else if (l->independent || !l->busy) {
        link_start(s, li, x);
    } else {
        pq_push(&l->waiting, t->priority, x);
    }
}

/* Send v is done: its transfer is requested (a held one goes when the node it waits for has
 * finished: node_done). */
static void send_done(Sim *s, int32_t v)
{
    int32_t x = s->send_xfer[v];
    node_done(s, v);
    if (x >= 0) {
        const PsimTransfer *t = &s->xf[x];
        s->xfer_request[x] = s->now;
        if (t->after < 0 || s->done[t->after])
            xfer_request(s, x);
    }
}

static void node_ready(Sim *s, int32_t v, int32_t cause)
{
    s->binding[v] = cause;
    switch (s->kind[v]) {
    case KIND_SEND: {
        int32_t x = s->send_xfer[v];
        Dev *dv = &s->dev[s->dev_of[v]];
        s->start[v] = s->now;
        if (x >= 0 && s->xfer_send_us[x] > 0 && s->link[s->xfer_link[x]].by_dst) {
            /* The executor runs a Send on its device's thread as soon as it is ready, before the
             * device's next node or copy (dispatch waits until sends_until). */
            s->start[v] = MAX(s->now, dv->sends_until);
            dv->sends_until = s->start[v] + s->xfer_send_us[x];
            heap_push(&s->heap, dv->sends_until, v, EV_SEND_END);
            return;
        }
        send_done(s, v);
        return;
    }
    case KIND_RECV:
        return; /* done when its transfer arrives */
    default:
        break;
    }
    s->ready[v] = 1;
    s->start[v] = s->now;
    int32_t d = s->dev_of[v];
    if (s->order == PSIM_ORDER_DYNAMIC)
        pq_push(&s->dev[d].ready, s->prio[v], v);
    /* Dispatch after every event of this instant is in, so that the ready queue sees all the
     * nodes that became ready at the same time. */
    mark_dirty(s, d, cause);
}

static void dispatch_dirty(Sim *s)
{
    for (int32_t i = 0; i < s->n_dirty; i++) {
        int32_t d = s->dirty[i];
        s->is_dirty[d] = 0;
        dispatch(s, d, s->dirty_cause[d]);
    }
    s->n_dirty = 0;
}

/* The factor device d's ops run at while n devices are busy (itself included). */
static inline double busy_factor(const Sim *s, int32_t d, int32_t n)
{
    return n >= 2 ? psim_cost_busy_scale(&s->dev[d].busy_scale, n) : 1;
}

/* The number of busy devices changed: every running compute node goes on at the new pace from
 * now (its work so far at the old), and its end moves (a new EV_NODE_END; the old one is stale).
 * So an op is slowed for the part of it that overlaps other devices' work, not whole for a
 * neighbour that was busy when it started. */
static void rescale_running(Sim *s)
{
    if (!s->scaled)
        return;
    for (int32_t d = 0; d < s->nd; d++) {
        Dev *dv = &s->dev[d];
        if (dv->busy == 0)
            continue;
        double f = busy_factor(s, d, s->n_busy_dev);
        for (int32_t k = 0; k < MIN(dv->n_streams, 32); k++) {
            Running *r = &dv->run[k];
            if (r->v < 0 || r->factor == f)
                continue;
            r->work = MAX(0, r->work - (s->now - r->since) / r->factor);
            r->since = s->now;
            r->factor = f;
            r->end = s->now + r->work * f;
            heap_push(&s->heap, r->end, r->v, EV_NODE_END);
        }
    }
}

/* An EV_NODE_END for v at t that a change of pace replaced (rescale_running pushed another). */
static inline gboolean end_moved(const Sim *s, int32_t v, double t)
{
    if (!s->scaled)
        return FALSE;
    if (s->done[v])
        return TRUE;
    const Running *r = s->stream[v] < 32 ? &s->dev[s->dev_of[v]].run[s->stream[v]] : NULL;
    return r && r->v == v && r->end != t;
}

/* Takes a free stream of device d for node v (a Recv for a copy). */
static void stream_take(Sim *s, int32_t v, int32_t d)
{
    Dev *dv = &s->dev[d];
    int32_t st = 0;
    while (st < 32 && (dv->stream_mask >> st & 1u))
        st++;
    if (st < 32)
        dv->stream_mask |= 1u << st;
    else
        st = dv->busy;
    if (dv->busy++ == 0) {
        s->n_busy_dev++;
        rescale_running(s);
    }
    s->stream[v] = st;
}

/* Whether a device that shares d's cores is working now (d then waits for the core). */
static inline gboolean core_taken(const Sim *s, int32_t d)
{
    if (s->share_off)
        for (int32_t i = s->share_off[d]; i < s->share_off[d + 1]; i++)
            if (s->dev[s->share[i]].busy > 0)
                return TRUE;
    return FALSE;
}

static void stream_release(Sim *s, int32_t v, int32_t d)
{
    Dev *dv = &s->dev[d];
    dv->busy--;
    if (dv->run && s->stream[v] < 32 && dv->run[s->stream[v]].v == v)
        dv->run[s->stream[v]].v = -1;
    if (dv->busy == 0) {
        s->n_busy_dev--;
        rescale_running(s);
        /* The core is free for the devices that share it. */
        if (s->share_off)
            for (int32_t i = s->share_off[d]; i < s->share_off[d + 1]; i++)
                mark_dirty(s, s->share[i], v);
    }
    /* A copy does not end the device's wait: the executor's thread copies what arrived and
     * runs the op that reads it, which is slow after the wait as after any other (the idle
     * curve is the op's time after its device waited, whatever it copied in between). */
    if (dv->busy == 0 && s->kind[v] != KIND_RECV) {
        dv->idle_since = s->now;
        dv->ran = TRUE;
    }
    if (s->stream[v] < 32)
        dv->stream_mask &= ~(1u << s->stream[v]);
}

/* Slot `slot`'s block is free: back on top of its class in its device's pool (read_remote: with
 * lines in another core's cache). */
static void pool_put(Sim *s, int32_t slot)
{
    if (!s->read_remote || !s->slot_block[slot])
        return;
    Dev *dv = &s->dev[s->slot_dev[slot]];
    if (dv->pool_ix < 0)
        return;
    uint64_t blk = psim_pool_block_bytes(s->slot_bytes[slot]);
    gboolean remote = s->read_remote[slot];
    pool_push(&dv->pool, (Freed){.cls = psim_pool_class(blk, NULL),
                                 .reader = remote ? s->read_dev[slot] : -1,
                                 .mark = s->slot_mark[slot],
                                 .read_mark = remote ? s->read_mark[slot] : 0});
    s->read_remote[slot] = 0;
}

/* What the cold-block curve charges a write of `blk` bytes into the newest block of its class in
 * pool p, taken off (*got: that block; reader -1 when there is none), at `touched` bytes written
 * so far; no such block: fresh memory, the farthest point. */
static double pool_pop(Pool *p, const PsimColdCurve *cold, uint64_t blk, double touched, Freed *got)
{
    int32_t cls = psim_pool_class(blk, NULL);
    got->reader = -1;
    for (int32_t i = p->n - 1; i >= 0; i--)
        if (p->a[i].cls == cls) {
            double dist = MAX(touched - p->a[i].mark, 0.0);
            *got = p->a[i];
            memmove(&p->a[i], &p->a[i + 1], sizeof p->a[0] * (size_t)(p->n - 1 - i));
            p->n--;
            return psim_cost_cold_us(cold, dist, (double)blk);
        }
    return psim_cost_cold_us(cold, -1, (double)blk);
}

/* A node's output or a copy takes a block of `bytes` on device d: what it pays beyond what its
 * time already holds. The block the executor hands out is the newest of its class; where
 * another core read it, its lines still in that core's cache must come back (the reclaim curve,
 * less what the reader has written since: psim_cost_reclaim_left); where many bytes were
 * written since it was last touched, they come from farther away (the cold curve); it pays the
 * larger. A node's in-situ time already holds what its block cost in the one-device run
 * (ref_cold: the same pool run over the one-device order); a copy has none there. */
static double pool_take(Sim *s, int32_t d, uint64_t bytes, gboolean copy, double ref_cold)
{
    Dev *dv = &s->dev[d];
    if (!s->read_remote || dv->pool_ix < 0 || bytes == 0)
        return 0;
    uint64_t blk = psim_pool_block_bytes(bytes);
    const PoolCosts *pc = &s->pool_costs[dv->pool_ix];
    Freed got;
    double cold = pool_pop(&dv->pool, &pc->cold, blk, s->touched, &got), remote = 0;
    if (got.reader >= 0)
        remote = psim_cost_reclaim_us(copy ? &pc->copy : &pc->op, (double)blk) *
                 psim_cost_reclaim_left(&pc->after, (double)blk, s->dev[got.reader].written - got.read_mark);
    s->touched += (double)blk;
    dv->written += (double)blk;
    /* A copy above PSIM_COST_HOP_MAX_BYTES: its link row was timed into a cold block already. */
    if (copy && bytes > PSIM_COST_HOP_MAX_BYTES)
        cold = 0;
    return MAX(cold, remote) - ref_cold;
}

/* Transfer x, on a by_destination link, starts on its destination device d. */
static void copy_start(Sim *s, int32_t x, int32_t d, int32_t cause)
{
    const PsimTransfer *t = &s->xf[x];
    const Link *l = &s->link[s->xfer_link[x]];
    stream_take(s, t->recv, d);
    /* Waiting for the device since it was requested: what freed the device bound the copy. */
    s->binding[t->recv] = s->now > s->xfer_request[x] && cause >= 0 ? cause : t->send;
    s->xfer_start[x] = s->now;
    s->events++;
    mem_add(s, d, s->out_total[t->recv], t->recv);
    /* The copy writes into a block of d's pool: it pays what that block's state costs. */
    double debt = pool_take(s, d, s->out_total[t->recv], TRUE, 0);
    if (s->read_remote && s->out_off[t->recv] < s->out_off[t->recv + 1])
        s->slot_mark[s->out_off[t->recv]] = s->touched;
    /* The link's time runs from the Send's end; the hand-off before the copy held no device. */
    double copy = MAX(link_latency(l) + link_occupy(l, t->bytes) - s->xfer_handoff_us[x], 0.0);
    heap_push(&s->heap, s->now + copy + debt, x, EV_COPY_END);
}

static void node_start(Sim *s, int32_t v, int32_t d, int32_t cause)
{
    Dev *dv = &s->dev[d];
    /* A node that starts after its device waited within the step runs slower (the executor
     * waits; psim_cost_model_idle_curve). */
    double extra = dv->busy == 0 && dv->ran && s->kind[v] == KIND_COMPUTE
                       ? psim_cost_idle_extra(s->idle ? &s->idle[v] : &dv->idle, s->now - dv->idle_since)
                       : 0;
    stream_take(s, v, d);
    /* start[v] holds the time v became ready; if it waited for its device since, what freed
     * the device (or let it issue) is what bound its start. */
    if (s->now > s->start[v] && cause >= 0)
        s->binding[v] = cause;
    s->start[v] = s->now;
    s->events++;
    if (s->read_remote && s->kind[v] == KIND_COMPUTE) {
        /* Its inputs on this device are touched again; its outputs take their blocks. */
        for (int32_t i = s->in_off[v]; i < s->in_off[v + 1]; i++)
            if (s->slot_dev[s->in_slot[i]] == d)
                s->slot_mark[s->in_slot[i]] = s->touched;
        for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++)
            if (s->slot_block[k]) {
                extra += pool_take(s, d, s->slot_bytes[k], FALSE, s->ref_cold[k]);
                s->slot_mark[k] = s->touched;
            }
    }
    double cost = extra == 0 ? s->cost[v] : psim_cost_bound(s->cost[v] + extra);
    /* Ops run slower while other devices share the caches and memory: the device's calibrated
     * factor for as many devices as are busy when the node starts, itself included. A plan
     * whose devices take turns (round-robin on a chain) pays nothing; one whose devices run
     * side by side pays on the nodes that overlap. */
    if (s->kind[v] == KIND_COMPUTE) {
        /* The factor for the busy devices now; paced (rescale_running) where factors apply. */
        double f = busy_factor(s, d, s->n_busy_dev), work = cost;
        if (f != 1)
            cost = psim_cost_bound(cost * f);
        if (s->scaled && s->stream[v] < 32)
            dv->run[s->stream[v]] = (Running){.v = v, .work = work, .since = s->now, .factor = f, .end = s->now + cost};
    }
    if (s->kind[v] != KIND_PARAM)
        mem_add(s, d, s->out_total[v], v);
    heap_push(&s->heap, s->now + cost, v, EV_NODE_END);
}

static void dispatch(Sim *s, int32_t d, int32_t cause)
{
    Dev *dv = &s->dev[d];
    if (dv->sends_until > s->now)
        return; /* its thread is in its Sends (EV_SEND_END dispatches again) */
    if (dv->busy == 0 && core_taken(s, d))
        return; /* another device has the core it shares (stream_release dispatches again) */
    /* Copies the device makes itself go before its next node (the executor's rule). */
    while (dv->busy < dv->n_streams && dv->copies.n > 0)
        copy_start(s, pq_pop(&dv->copies), d, cause);
    if (s->order == PSIM_ORDER_DYNAMIC) {
        while (dv->busy < dv->n_streams && dv->ready.n > 0)
            node_start(s, pq_pop(&dv->ready), d, cause);
        return;
    }
    const int32_t *ord = s->order_of[d];
    int32_t n = s->n_order[d];
    while (dv->busy < dv->n_streams && dv->pos < n) {
        int32_t v = ord[dv->pos];
        if (s->kind[v] == KIND_SEND || s->kind[v] == KIND_RECV || s->done[v]) {
            dv->pos++;
            continue;
        }
        if (!s->ready[v])
            break;
        dv->pos++;
        node_start(s, v, d, cause);
    }
}

/* Parameters and a placement's constant copies are resident from the start. */
static void resident_add(Sim *s)
{
    for (int32_t v = 0; v < s->n; v++)
        if (s->kind[v] == KIND_PARAM)
            mem_add(s, s->dev_of[v], s->out_total[v], v);
    for (int32_t i = 0; i < s->n_copies; i++)
        mem_add(s, s->copy_dev[i], s->out_total[s->copy_node[i]], s->copy_node[i]);
}

/* The same points (the struct's padding aside). */
static gboolean hop_same(const PsimHopCurve *a, const PsimHopCurve *b)
{
    return a->n == b->n && !memcmp(a->bytes, b->bytes, sizeof(double) * (size_t)a->n) &&
           !memcmp(a->us, b->us, sizeof(double) * (size_t)a->n);
}

static void setup_common(Sim *s);

/* The step's structure from a plan: its partitioned graph, transfers and orders. */
static gboolean setup(Sim *s)
{
    const PsimPlan *p = s->p;
    const PsimGraph *g = s->g;
    int32_t n = s->n, nd = s->nd;
    s->xf = p->transfers;
    s->n_xf = p->n_transfers;
    s->dev_of = p->device_of;
    s->order_of = p->order;
    s->n_order = p->n_order;
    s->prio = p->priority;
    s->xfer_of_recv = p->transfer_of_recv;
    s->kind = g_new0(uint8_t, n + 1);
    s->ready = g_new0(uint8_t, n + 1);
    s->done = g_new0(uint8_t, n + 1);
    s->start = g_new0(double, n + 1);
    s->end = g_new0(double, n + 1);
    s->binding = g_new(int32_t, n + 1);
    s->stream = g_new0(int32_t, n + 1);
    s->pending = g_new(int32_t, n + 1);
    s->out_off = g_new(int32_t, n + 1);
    s->send_xfer = g_new(int32_t, n + 1);
    s->done_order = g_new(int32_t, n + 1);
    s->cluster_dev = g_new(int32_t, nd + 1);
    s->xfer_start = g_new0(double, p->n_transfers + 1);
    s->xfer_request = g_new0(double, p->n_transfers + 1);
    int32_t n_out = 0, n_in = 0;
    s->cost = g_new0(double, n + 1);
    s->out_total = g_new0(uint64_t, n + 1);
    s->in_off = g_new(int32_t, n + 1);
    /* Op names are interned per graph: compare pointers first, strings only on a miss. */
    const char *send_op = NULL, *recv_op = NULL;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nv = psim_graph_node(g, v);
        s->out_off[v] = n_out;
        n_out += nv->n_outputs;
        n_in += nv->n_inputs;
        s->binding[v] = -1;
        s->send_xfer[v] = -1;
        s->kind[v] = node_kind(nv, &send_op, &recv_op);
        s->out_total[v] = outputs_bytes(nv);
    }
    s->out_off[n] = n_out;
    s->remaining = g_new0(int32_t, n_out + 1);
    s->slot_bytes = g_new(uint64_t, n_out + 1);
    s->slot_dev = g_new(int32_t, n_out + 1);
    s->in_slot = g_new(int32_t, n_in + 1);
    n_in = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nv = psim_graph_node(g, v);
        for (int32_t k = 0; k < nv->n_outputs; k++) {
            s->slot_bytes[s->out_off[v] + k] = nv->outputs[k].bytes;
            s->slot_dev[s->out_off[v] + k] = p->device_of[v];
        }
        s->in_off[v] = n_in;
        for (int32_t k = 0; k < nv->n_inputs; k++) {
            PsimPort q = nv->inputs[k];
            if (q.node < 0 || s->kind[q.node] == KIND_PARAM)
                continue;
            int32_t slot = s->out_off[q.node] + q.index;
            s->remaining[slot]++;
            s->in_slot[n_in++] = slot;
        }
    }
    s->in_off[n] = n_in;
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort o = psim_graph_output(g, i);
        if (o.node >= 0)
            s->remaining[s->out_off[o.node] + o.index]++; /* fetched: never freed */
    }
    s->gated = g_new(int32_t, n + 1);
    s->gated_next = g_new(int32_t, p->n_transfers + 1);
    for (int32_t v = 0; v < n; v++)
        s->gated[v] = -1;
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *t = &p->transfers[x];
        s->send_xfer[t->send] = x;
        if (t->after >= 0) {
            s->gated_next[x] = s->gated[t->after];
            s->gated[t->after] = x;
        }
    }
    s->so = NULL;
    psim_graph_succ(g, &s->so, &s->s);
    const int32_t *po, *pr;
    psim_graph_pred(g, &po, &pr);
    for (int32_t v = 0; v < n; v++)
        s->pending[v] = po[v + 1] - po[v];
    for (int32_t d = 0; d < nd; d++) {
        int32_t cd = psim_cluster_device_find(s->c, p->devices[d]);
        if (cd < 0) {
            g_set_error(s->error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "plan device '%s' is not in the cluster", p->devices[d]);
            return FALSE;
        }
        s->cluster_dev[d] = cd;
    }
    /* Node costs once, up front: a node that cannot run on its device is an error here. */
    for (int32_t v = 0; v < n; v++) {
        if (s->kind[v] == KIND_SEND || s->kind[v] == KIND_RECV)
            continue;
        const PsimNode *nv = psim_graph_node(g, v);
        int32_t d = p->device_of[v];
        double c = psim_cost_node(s->m, g, nv, s->cluster_dev[d], NULL);
        if (!isfinite(c) || c < 0) {
            g_set_error(s->error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: node '%s': op '%s' has no cost on device '%s' of type %s (no kernel for it, "
                        "nor an annotation); load a plug-in with one with --plugin PATH.so, see docs/ops.md",
                        psim_graph_name(g), nv->name, nv->op, p->devices[d],
                        psim_cluster_device(s->c, s->cluster_dev[d])->type);
            return FALSE;
        }
        s->cost[v] = c;
    }
    setup_common(s);
    return TRUE;
}

/* The slot a node's input reads in the one-device run: a Recv's is its Send's input. */
static int32_t ref_slot(const Sim *s, int32_t slot_node, int32_t slot)
{
    if (slot_node < 0 || s->kind[slot_node] != KIND_RECV || !s->xfer_of_recv)
        return slot;
    int32_t x = s->xfer_of_recv[slot_node];
    if (x < 0)
        return slot;
    int32_t snd = s->xf[x].send;
    return s->in_off[snd] < s->in_off[snd + 1] ? s->in_slot[s->in_off[snd]] : slot;
}

/* The placed graph's topological order (psim_graph_topo_order's: Kahn's algorithm, a FIFO queue,
 * sources and successors in id order) and its node count, whichever structure the step has: a
 * placement's graph is the placed graph; a plan's graph holds it as its first n_placed nodes,
 * where a Recv stands for its Send's producer and a constant copy for its generator. The
 * one-device reference run is then the same for a placement and for its plan. */
static int32_t *placed_topo_order(const Sim *s, int32_t *n_ref)
{
    const PsimGraph *g = s->g;
    int32_t m = s->p ? s->p->n_placed : 0;
    if (m <= 0 || m > s->n) {
        *n_ref = MIN(s->n, psim_graph_n_nodes(g));
        return psim_graph_topo_order(g, NULL);
    }
    *n_ref = m;
    const int32_t *po, *pr;
    psim_graph_pred(g, &po, &pr);
    g_autofree int32_t *off = g_new(int32_t, m + 1), *pred = g_new(int32_t, po[m] + 1);
    g_autofree int32_t *n_succ = g_new0(int32_t, m + 1);
    int32_t e = 0;
    for (int32_t v = 0; v < m; v++) {
        off[v] = e;
        for (int32_t i = po[v]; i < po[v + 1]; i++) {
            int32_t u = pr[i];
            if (u >= m && s->xfer_of_recv && s->xfer_of_recv[u] >= 0)
                u = s->xf[s->xfer_of_recv[u]].port.node;
            else if (u >= m && s->p->copy_of && s->p->copy_of[u] >= 0)
                u = s->p->copy_of[u];
            if (u >= 0 && u < m)
                pred[e++] = u;
        }
        e = off[v] + psim_ids_sort_unique(pred + off[v], e - off[v]);
        for (int32_t i = off[v]; i < e; i++)
            n_succ[pred[i]]++;
    }
    off[m] = e;
    /* Successor lists in id order: v ascending appends v to each of its sources' lists. */
    g_autofree int32_t *soff = g_new(int32_t, m + 1), *succ = g_new(int32_t, e + 1), *fill = g_new(int32_t, m + 1);
    soff[0] = 0;
    for (int32_t v = 0; v < m; v++)
        soff[v + 1] = soff[v] + n_succ[v];
    memcpy(fill, soff, sizeof(int32_t) * (size_t)m);
    for (int32_t v = 0; v < m; v++)
        for (int32_t i = off[v]; i < off[v + 1]; i++)
            succ[fill[pred[i]]++] = v;
    int32_t n_ordered = 0;
    int32_t *order = psim_kahn_order(m, off, soff, succ, &n_ordered);
    if (n_ordered < m) {
        g_free(order);
        return NULL;
    }
    return order;
}

/* What each computed node's output blocks cost in the one-device run its in-situ time comes from
 * (ref_cold): the same pool, run over the placed graph's nodes in topological order on one device
 * (Send and Recv left out: a Recv's reader reads what its Send read), a first pass to fill the
 * pool and the second recorded, as sim_steady does. */
static void pool_reference(Sim *s, const int32_t *slot_node)
{
    int32_t n = s->n, n_slots = s->out_off[n], n_in = s->in_off[n];
    int32_t n_graph = 0;
    g_autofree int32_t *topo = placed_topo_order(s, &n_graph);
    if (!topo)
        return;
    /* Each input's slot in the one-device run, and how many computed nodes read each slot. */
    g_autofree int32_t *in = g_new(int32_t, n_in + 1);
    g_autofree int32_t *readers = g_new0(int32_t, n_slots + 1);
    for (int32_t v = 0; v < n; v++)
        for (int32_t i = s->in_off[v]; i < s->in_off[v + 1]; i++) {
            in[i] = ref_slot(s, slot_node[s->in_slot[i]], s->in_slot[i]);
            if (s->kind[v] == KIND_COMPUTE)
                readers[in[i]]++;
        }
    g_autofree int32_t *rem = g_new(int32_t, n_slots + 1);
    g_autofree double *mark = g_new0(double, n_slots + 1);
    Pool pool = {0};
    double touched = 0;
    for (int pass = 0; pass < 2; pass++) {
        memcpy(rem, readers, sizeof(int32_t) * (size_t)n_slots);
        for (int32_t t = 0; t < n_graph; t++) {
            int32_t v = topo[t];
            if (v < 0 || v >= n || s->kind[v] != KIND_COMPUTE)
                continue;
            const Dev *dv = &s->dev[s->dev_of[v]];
            const PsimColdCurve *cold = dv->pool_ix >= 0 ? &s->pool_costs[dv->pool_ix].cold : NULL;
            for (int32_t i = s->in_off[v]; i < s->in_off[v + 1]; i++)
                mark[in[i]] = touched;
            for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++) {
                if (!s->slot_block[k])
                    continue;
                uint64_t blk = psim_pool_block_bytes(s->slot_bytes[k]);
                Freed got;
                double c = pool_pop(&pool, cold, blk, touched, &got);
                touched += (double)blk;
                mark[k] = touched;
                if (pass == 1)
                    s->ref_cold[k] = c;
            }
            /* Its inputs read for the last time, then its outputs nobody reads, are freed. */
            for (int32_t i = s->in_off[v]; i < s->in_off[v + 1]; i++)
                if (--rem[in[i]] == 0 && s->slot_block[in[i]])
                    pool_push(&pool, (Freed){.cls = psim_pool_class(psim_pool_block_bytes(s->slot_bytes[in[i]]), NULL),
                                             .reader = -1,
                                             .mark = mark[in[i]]});
            for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++)
                if (rem[k] == 0 && s->slot_block[k])
                    pool_push(&pool, (Freed){.cls = psim_pool_class(psim_pool_block_bytes(s->slot_bytes[k]), NULL),
                                             .reader = -1,
                                             .mark = mark[k]});
        }
    }
    g_free(pool.a);
}

/* The devices' pools: which slots are blocks, their marks, the one-device run's cold times. */
static void pool_setup(Sim *s)
{
    int32_t n = s->n, n_slots = s->out_off[n];
    s->read_remote = g_new0(uint8_t, n_slots + 1);
    s->read_dev = g_new0(int32_t, n_slots + 1);
    s->read_mark = g_new0(double, n_slots + 1);
    s->slot_block = g_new0(uint8_t, n_slots + 1);
    s->slot_mark = g_new0(double, n_slots + 1);
    s->ref_cold = g_new0(double, n_slots + 1);
    g_autofree int32_t *slot_node = g_new(int32_t, n_slots + 1);
    for (int32_t v = 0; v < n; v++) {
        gboolean block = s->kind[v] == KIND_RECV ||
                         (s->kind[v] == KIND_COMPUTE && !psim_cost_op_is_view(psim_graph_node(s->g, v)->op));
        for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++) {
            s->slot_block[k] = block && s->slot_bytes[k] > 0;
            slot_node[k] = v;
        }
    }
    pool_reference(s, slot_node);
}

/* One core of one host that a device runs on (share_setup). */
typedef struct {
    const char *host;
    int32_t core, d;
} CoreUse;

static int core_use_cmp(const void *a, const void *b)
{
    const CoreUse *x = a, *y = b;
    int c = g_strcmp0(x->host, y->host);
    return c ? c : x->core != y->core ? (x->core < y->core ? -1 : 1) : (x->d > y->d) - (x->d < y->d);
}

static int int64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The devices that share cores (s->share_off, s->share): the (host, core) uses sorted, each run
 * of devices on one core pairs them, as psim_cluster_devices_share_cores says, without looking
 * at every pair (clusters of thousands of devices have disjoint cores or none). */
static void share_setup(Sim *s)
{
    GArray *uses = g_array_new(FALSE, FALSE, sizeof(CoreUse));
    for (int32_t d = 0; d < s->nd; d++) {
        const PsimDevice *dv = psim_cluster_device(s->c, s->cluster_dev[d]);
        for (int32_t k = 0; k < dv->n_cores; k++) {
            CoreUse cu = {dv->host, dv->cores[k], d};
            g_array_append_val(uses, cu);
        }
    }
    g_array_sort(uses, core_use_cmp);
    const CoreUse *u = (const CoreUse *)(void *)uses->data;
    GArray *pairs = g_array_new(FALSE, FALSE, sizeof(int64_t)); /* d << 32 | other */
    for (guint i = 0, j; i < uses->len; i = j) {
        for (j = i + 1; j < uses->len && u[j].core == u[i].core && !g_strcmp0(u[j].host, u[i].host); j++)
            ;
        for (guint a = i; a < j; a++)
            for (guint b = i; b < j; b++)
                if (u[a].d != u[b].d) {
                    int64_t pair = (int64_t)u[a].d << 32 | (int64_t)u[b].d;
                    g_array_append_val(pairs, pair);
                }
    }
    if (pairs->len > 0) {
        g_array_sort(pairs, int64_cmp);
        int64_t *p = (int64_t *)(void *)pairs->data;
        s->share_off = g_new0(int32_t, s->nd + 1);
        s->share = g_new(int32_t, pairs->len);
        int32_t n = 0;
        for (guint i = 0; i < pairs->len; i++) {
            if (i > 0 && p[i] == p[i - 1])
                continue; /* two devices on several common cores */
            s->share[n++] = (int32_t)(p[i] & 0xffffffff);
            s->share_off[(p[i] >> 32) + 1] = n;
        }
        for (int32_t d = 0; d < s->nd; d++)
            s->share_off[d + 1] = MAX(s->share_off[d + 1], s->share_off[d]);
    }
    g_array_free(pairs, TRUE);
    g_array_free(uses, TRUE);
}

/* What a plan and a placement share: devices' streams and capacities, the links of the pairs
 * the transfers use, resident parameters, the devices that share cores. */
static void setup_common(Sim *s)
{
    int32_t nd = s->nd;
    s->dev = g_new0(Dev, nd + 1);
    s->scaled = FALSE;
    s->dirty = g_new(int32_t, nd + 1);
    s->is_dirty = g_new0(uint8_t, nd + 1);
    s->dirty_cause = g_new(int32_t, nd + 1);
    for (int32_t d = 0; d < nd; d++) {
        const PsimDevice *dv = psim_cluster_device(s->c, s->cluster_dev[d]);
        s->dev[d].n_streams = MAX(1, dv->n_streams);
        psim_cost_model_busy(s->m, s->cluster_dev[d], &s->dev[d].busy_scale);
        s->scaled |= nd >= 2 && psim_cost_busy_scale(&s->dev[d].busy_scale, nd) != 1;
        psim_cost_model_idle_curve(s->m, s->cluster_dev[d], &s->dev[d].idle);
        PoolCosts pc;
        memset(&pc, 0, sizeof pc);
        psim_cost_model_reclaim(s->m, s->cluster_dev[d], &pc.op, &pc.copy);
        psim_cost_model_reclaim_after(s->m, s->cluster_dev[d], &pc.after);
        psim_cost_model_cold(s->m, s->cluster_dev[d], &pc.cold);
        PsimHopCurve hop[2];
        psim_cost_model_hop(s->m, s->cluster_dev[d], &hop[0], &hop[1]);
        s->dev[d].hop_ix = -1;
        if (hop[0].n > 0 || hop[1].n > 0) {
            /* Devices of one calibration share one copy, as their pool costs do. */
            if (s->n_hops == 0 || !hop_same(&s->hops[2 * (s->n_hops - 1)], hop) ||
                !hop_same(&s->hops[2 * (s->n_hops - 1) + 1], hop + 1)) {
                s->hops = g_renew(PsimHopCurve, s->hops, 2 * (s->n_hops + 1));
                memcpy(&s->hops[2 * s->n_hops++], hop, sizeof hop);
            }
            s->dev[d].hop_ix = s->n_hops - 1;
        }
        s->dev[d].pool_ix = -1;
        if (pc.op.n > 0 || pc.copy.n > 0 || pc.cold.n > 0) {
            /* Devices of one calibration share one copy (a cluster of thousands of CPU devices
             * lists them in a row). */
            if (s->n_pool_costs == 0 || memcmp(&s->pool_costs[s->n_pool_costs - 1], &pc, sizeof pc)) {
                s->pool_costs = g_renew(PoolCosts, s->pool_costs, s->n_pool_costs + 1);
                s->pool_costs[s->n_pool_costs++] = pc;
            }
            s->dev[d].pool_ix = s->n_pool_costs - 1;
        }
        s->dev[d].capacity = s->cap ? s->cap[d] : dv->memory_bytes;
    }
    for (int32_t d = 0; s->scaled && d < nd; d++) {
        s->dev[d].run = g_new(Running, MIN(s->dev[d].n_streams, 32));
        for (int32_t k = 0; k < MIN(s->dev[d].n_streams, 32); k++)
            s->dev[d].run[k].v = -1;
    }
    if (s->n_pool_costs > 0)
        pool_setup(s);
    share_setup(s);
    /* Each computed node's own idle curve where its device has one (its signature's 'idle'
     * rows: a MatMul pays microseconds after a wait, a Reshape nothing). */
    for (int32_t v = 0; v < s->n; v++) {
        if (s->kind[v] != KIND_COMPUTE || s->dev[s->dev_of[v]].idle.n < 1)
            continue;
        if (!s->idle)
            s->idle = g_new0(PsimIdleCurve, s->n + 1);
        psim_cost_model_node_idle_curve(s->m, s->g, psim_graph_node(s->g, v), s->cluster_dev[s->dev_of[v]],
                                        &s->idle[v]);
    }
    /* Links of the pairs the transfers use only: a plan over thousands of devices has far fewer
     * pairs in use than nd^2. */
    s->link = g_new0(Link, s->n_xf + 1);
    s->xfer_link = g_new(int32_t, s->n_xf + 1);
    s->xfer_send_us = g_new(double, s->n_xf + 1);
    s->xfer_handoff_us = g_new(double, s->n_xf + 1);
    g_autoptr(GHashTable) pair_link = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, NULL);
    for (int32_t x = 0; x < s->n_xf; x++) {
        const PsimTransfer *t = &s->xf[x];
        int32_t h = s->dev[t->src].hop_ix;
        s->xfer_send_us[x] = h >= 0 ? psim_cost_hop_us(&s->hops[2 * h], (double)t->bytes) : 0;
        s->xfer_handoff_us[x] = h >= 0 ? psim_cost_hop_us(&s->hops[2 * h + 1], (double)t->bytes) : 0;
        gint64 key = (gint64)(((guint64)(guint32)t->src << 32) | (guint32)t->dst);
        gpointer found;
        if (g_hash_table_lookup_extended(pair_link, &key, NULL, &found)) {
            s->xfer_link[x] = GPOINTER_TO_INT(found);
            continue;
        }
        int32_t d = t->src, e = t->dst;
        PsimLink l = psim_cost_link(s->m, s->cluster_dev[d], s->cluster_dev[e], NULL);
        Link *L = &s->link[s->n_links];
        L->independent = l.independent || d == e;
        L->by_dst = l.by_destination && d != e;
        L->self = d == e;
        L->model = l;
        L->current = -1;
        g_hash_table_insert(pair_link, g_memdup2(&key, sizeof key), GINT_TO_POINTER(s->n_links));
        s->xfer_link[x] = s->n_links++;
    }
    resident_add(s);
}

static void sim_free(Sim *s)
{
    g_free(s->own_succ_off);
    g_free(s->own_succ);
    g_free(s->copy_node);
    g_free(s->copy_dev);
    if (!s->p) { /* a placement's structure is the simulator's own */
        g_free((PsimTransfer *)s->xf);
        g_free((int32_t *)s->dev_of);
        for (int32_t d = 0; s->order_of && d < s->nd; d++)
            g_free(s->order_of[d]);
        g_free((int32_t **)s->order_of);
        g_free((int32_t *)s->n_order);
        g_free((double *)s->prio);
        g_free((int32_t *)s->xfer_of_recv);
    }
    g_free(s->kind);
    g_free(s->ready);
    g_free(s->done);
    g_free(s->start);
    g_free(s->end);
    g_free(s->binding);
    g_free(s->stream);
    g_free(s->pending);
    g_free(s->out_off);
    g_free(s->remaining);
    g_free(s->cost);
    g_free(s->idle);
    g_free(s->out_total);
    g_free(s->in_off);
    g_free(s->in_slot);
    g_free(s->slot_bytes);
    g_free(s->slot_dev);
    g_free(s->send_xfer);
    g_free(s->gated);
    g_free(s->gated_next);
    g_free(s->done_order);
    g_free(s->cluster_dev);
    g_free(s->xfer_start);
    g_free(s->xfer_request);
    if (s->dev)
        for (int32_t d = 0; d < s->nd; d++) {
            g_free(s->dev[d].ready.a);
            g_free(s->dev[d].copies.a);
        }
    for (int32_t d = 0; s->dev && d < s->nd; d++)
        g_free(s->dev[d].pool.a);
    for (int32_t d = 0; s->dev && d < s->nd; d++)
        g_free(s->dev[d].run);
    g_free(s->dev);
    g_free(s->share_off);
    g_free(s->share);
    g_free(s->pool_costs);
    g_free(s->read_remote);
    g_free(s->slot_block);
    g_free(s->slot_mark);
    g_free(s->read_dev);
    g_free(s->read_mark);
    g_free(s->ref_cold);
    g_free(s->dirty);
    g_free(s->is_dirty);
    g_free(s->dirty_cause);
    for (int32_t i = 0; s->link && i < s->n_links; i++)
        g_free(s->link[i].waiting.a);
    g_free(s->link);
    g_free(s->xfer_link);
    g_free(s->xfer_send_us);
    g_free(s->xfer_handoff_us);
    g_free(s->hops);
    g_free(s->heap.a);
}

void psim_sim_result_clear(PsimSimResult *r)
{
    g_free(r->peak_memory);
    g_free(r->critical);
    memset(r, 0, sizeof *r);
    r->over_device = -1;
}

gboolean psim_order_from_name(const char *name, PsimOrder *out)
{
    if (!g_strcmp0(name, "static"))
        *out = PSIM_ORDER_STATIC;
    else if (!g_strcmp0(name, "dynamic"))
        *out = PSIM_ORDER_DYNAMIC;
    else
        return FALSE;
    return TRUE;
}

/* The graph's critical path with the costs used and transfer times, over the completion order
 * (a topological order that includes each Send -> Recv dependency). */
static double lower_bound(Sim *s)
{
    g_autofree double *fin = g_new0(double, s->n + 1);
    const int32_t *po, *pr;
    psim_graph_pred(s->g, &po, &pr);
    double best = 0;
    for (int32_t i = 0; i < s->n_done; i++) {
        int32_t v = s->done_order[i];
        double st = 0;
        for (int32_t j = po[v]; j < po[v + 1]; j++)
            st = MAX(st, fin[pr[j]]);
        int32_t x = s->kind[v] == KIND_RECV ? s->xfer_of_recv[v] : -1;
        if (x >= 0) {
            const PsimTransfer *t = &s->xf[x];
            const Link *l = &s->link[s->xfer_link[x]];
            st = MAX(st, fin[t->send] + link_occupy(l, t->bytes) + link_latency(l));
            fin[v] = st;
        } else {
            fin[v] = st + (s->end[v] - s->start[v]);
        }
        best = MAX(best, fin[v]);
    }
    return best;
}

/* Runs the step: sources ready at time 0, events in time order. FALSE with an error when it
 * deadlocks. */
static gboolean sim_loop(Sim *s)
{
    /* Sources are ready at time 0, in node order. */
    for (int32_t v = 0; v < s->n; v++)
        if (s->pending[v] == 0 && !s->ready[v] && !s->done[v])
            node_ready(s, v, -1);
    dispatch_dirty(s);
    while (s->heap.n && !s->failed) {
        Event e = heap_pop(&s->heap);
        s->now = e.t;
        s->events++;
        switch (e.kind) {
        case EV_NODE_END: {
            int32_t d = s->dev_of[e.id];
            if (end_moved(s, e.id, e.t)) {
                s->events--;
                break;
            }
            stream_release(s, e.id, d);
            node_done(s, e.id);
            mark_dirty(s, d, e.id);
            break;
        }
        case EV_COPY_END: {
            const PsimTransfer *t = &s->xf[e.id];
            stream_release(s, t->recv, t->dst);
            /* The source's block now has its lines in the destination's cache: whatever takes
             * it once it is free pays (release_inputs). */
            if (s->read_remote && s->in_off[t->send] < s->in_off[t->send + 1]) {
                int32_t slot = s->in_slot[s->in_off[t->send]];
                s->read_remote[slot] = 1;
                s->read_dev[slot] = t->dst;
                s->read_mark[slot] = s->dev[t->dst].written;
            }
            s->start[t->recv] = s->xfer_start[e.id];
            release_inputs(s, t->send);
            node_done(s, t->recv);
            mark_dirty(s, t->dst, t->recv);
            break;
        }
        case EV_SEND_END: {
            int32_t d = s->dev_of[e.id];
            send_done(s, (int32_t)e.id);
            mark_dirty(s, d, (int32_t)e.id);
            break;
        }
        case EV_XFER_READY: {
            const PsimTransfer *t = &s->xf[e.id];
            pq_push(&s->dev[t->dst].copies, t->priority, (int32_t)e.id);
            mark_dirty(s, t->dst, t->send);
            break;
        }
        case EV_LINK_FREE: {
            Link *l = &s->link[e.id];
            int32_t prev = l->current;
            l->busy = FALSE;
            l->current = -1;
            if (l->waiting.n) {
                int32_t x = pq_pop(&l->waiting);
                s->binding[s->xf[x].recv] = prev >= 0 ? s->xf[prev].recv : -1;
                link_start(s, (int32_t)e.id, x);
            }
            break;
        }
        case EV_XFER_ARRIVE: {
            const PsimTransfer *t = &s->xf[e.id];
            s->start[t->recv] = s->xfer_start[e.id];
            if (s->binding[t->recv] < 0)
                s->binding[t->recv] = t->send;
            release_inputs(s, t->send); /* the source buffer is no longer needed */
            node_done(s, t->recv);
            break;
        }
        }
        if (s->n_dirty && (!s->heap.n || s->heap.a[0].t > s->now))
            dispatch_dirty(s);
    }
    if (s->failed)
        return FALSE;
    if (s->n_done < s->n) {
        int32_t stuck = -1;
        for (int32_t v = 0; v < s->n && stuck < 0; v++)
            if (!s->done[v] && s->ready[v])
                stuck = v;
        for (int32_t v = 0; v < s->n && stuck < 0; v++)
            if (!s->done[v])
                stuck = v;
        /* A placement's Send/Recv ids follow the graph's. */
        const char *name = stuck < psim_graph_n_nodes(s->g) ? psim_graph_node(s->g, stuck)->name : "a Recv";
        g_set_error(s->error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: node '%s': the plan deadlocks (%s order on device '%s'; %d of %d nodes ran)",
                    psim_graph_name(s->g), name, s->order == PSIM_ORDER_STATIC ? "static" : "dynamic",
                    s->p ? s->p->devices[s->dev_of[stuck]] : psim_cluster_device(s->c, s->dev_of[stuck])->name,
                    s->n_done, s->n);
        return FALSE;
    }
    return TRUE;
}


/* Puts the step back at its start for another pass: every node pending again, the devices, links
 * and events as setup left them (pending0, remaining0: the counts setup made). */
static void sim_reset(Sim *s, const int32_t *pending0, const int32_t *remaining0)
{
    int32_t n = s->n, n_slots = s->out_off[n];
    memcpy(s->pending, pending0, sizeof(int32_t) * (size_t)n);
    memcpy(s->remaining, remaining0, sizeof(int32_t) * (size_t)n_slots);
    memset(s->ready, 0, (size_t)n);
    memset(s->done, 0, (size_t)n);
    memset(s->start, 0, sizeof(double) * (size_t)n);
    memset(s->end, 0, sizeof(double) * (size_t)n);
    memset(s->stream, 0, sizeof(int32_t) * (size_t)n);
    for (int32_t v = 0; v < n; v++)
        s->binding[v] = -1;
    memset(s->xfer_start, 0, sizeof(double) * (size_t)s->n_xf);
    memset(s->xfer_request, 0, sizeof(double) * (size_t)s->n_xf);
    if (s->read_remote)
        memset(s->read_remote, 0, (size_t)n_slots);
    s->n_done = 0;
    s->now = 0;
    s->heap.n = 0;
    s->n_dirty = 0;
    memset(s->is_dirty, 0, (size_t)s->nd);
    s->n_busy_dev = 0;
    s->res->over_device = -1;
    for (int32_t d = 0; d < s->nd; d++) {
        Dev *dv = &s->dev[d];
        dv->busy = 0;
        dv->stream_mask = 0;
        dv->pos = 0;
        dv->ready.n = 0;
        dv->copies.n = 0;
        dv->mem = dv->peak = 0;
        dv->idle_since = 0;
        dv->ran = FALSE;
        dv->sends_until = 0;
        for (int32_t k = 0; dv->run && k < MIN(dv->n_streams, 32); k++)
            dv->run[k].v = -1;
    }
    for (int32_t l = 0; l < s->n_links; l++) {
        s->link[l].busy = FALSE;
        s->link[l].current = -1;
        s->link[l].waiting.n = 0;
    }
    resident_add(s);
}

/* The step as it runs step after step: the pools of the devices at a step's start are what the
 * step before left in them (the executor's pools keep every block), so a first pass fills them
 * and a second one, starting from them, is the step. A device's wait does not end with the
 * step either: one that ran its last node before the step ended waits from then into the next
 * step, so with idle curves its first node of the second pass is charged that wait too (in a
 * one-device plan the device ends the step: nothing). Without pool costs or idle curves one
 * pass. */
static gboolean sim_steady(Sim *s)
{
    g_autofree int32_t *pending0 = NULL, *remaining0 = NULL;
    gboolean idle = FALSE;
    for (int32_t d = 0; d < s->nd && !idle; d++)
        idle = s->dev[d].idle.n > 0;
    if (s->read_remote || idle) {
        pending0 = g_memdup2(s->pending, sizeof(int32_t) * (size_t)(s->n + 1));
        remaining0 = g_memdup2(s->remaining, sizeof(int32_t) * (size_t)(s->out_off[s->n] + 1));
    }
    if (!sim_loop(s))
        return FALSE;
    if (!pending0)
        return TRUE;
    double step = 0;
    for (int32_t v = 0; v < s->n; v++)
        step = MAX(step, s->end[v]);
    g_autofree double *since = g_new(double, s->nd + 1);
    g_autofree gboolean *ran = g_new(gboolean, s->nd + 1);
    for (int32_t d = 0; d < s->nd; d++) {
        ran[d] = s->dev[d].ran;
        since[d] = s->dev[d].idle_since - step;
    }
    sim_reset(s, pending0, remaining0);
    for (int32_t d = 0; d < s->nd; d++) {
        s->dev[d].ran = ran[d];
        s->dev[d].idle_since = ran[d] ? MIN(since[d], 0.0) : 0;
    }
    return sim_loop(s);
}

gboolean psim_sim_run(const PsimPlan *plan, PsimCostModel *m, const PsimSimOptions *opts,
                      PsimSimResult *res, PsimTimeline **timeline, GError **error)
{
    PsimSimOptions dflt = {0};
    if (!opts)
        opts = &dflt;
    memset(res, 0, sizeof *res);
    res->over_device = -1;
    Sim sim = {0}, *s = &sim;
    s->p = plan;
    s->g = plan->graph;
    s->m = m;
    s->c = psim_cost_model_cluster(m);
    s->order = opts->order;
    s->n = psim_graph_n_nodes(plan->graph);
    s->nd = plan->n_devices;
    s->res = res;
    s->error = error;
    if (!psim_plan_check(plan, error))
        return FALSE;
    if (!setup(s)) {
        sim_free(s);
        return FALSE;
    }
    if (opts->gpu_streams > 0)
        for (int32_t d = 0; d < s->nd; d++)
            if (psim_cluster_device(s->c, s->cluster_dev[d])->cls &&
                psim_cluster_device(s->c, s->cluster_dev[d])->cls->streams)
                s->dev[d].n_streams = opts->gpu_streams;
    if (!sim_steady(s)) {
        sim_free(s);
        return FALSE;
    }
    double step = 0;
    int32_t last = -1;
    for (int32_t v = 0; v < s->n; v++)
        if (s->end[v] > step || last < 0) {
            step = MAX(step, s->end[v]);
            last = v;
        }
    res->step_time_us = step;
    res->lower_bound_us = lower_bound(s);
    res->critical_path_us = res->lower_bound_us; /* one meaning everywhere: docs/sim.md */
    res->n_devices = s->nd;
    res->peak_memory = g_new0(uint64_t, s->nd + 1);
    for (int32_t d = 0; d < s->nd; d++)
        res->peak_memory[d] = s->dev[d].peak;
    int32_t c = 0;
    for (int32_t v = last; v >= 0 && c <= s->n; v = s->binding[v])
        c++;
    res->n_critical = c;
    res->critical = g_new(int32_t, c + 1);
    for (int32_t v = last, i = c; v >= 0 && i > 0; v = s->binding[v])
        res->critical[--i] = v;
    res->events = s->events;
    if (opts->node_start)
        memcpy(opts->node_start, s->start, sizeof(double) * (size_t)s->n);
    if (opts->node_end)
        memcpy(opts->node_end, s->end, sizeof(double) * (size_t)s->n);
    if (timeline) {
        PsimTimeline *t = psim_timeline_new(psim_graph_name(s->g), "sim", s->nd,
                                            (const char *const *)plan->devices);
        /* The executor evaluates constant nodes once before any step and takes graph inputs as
         * fed: they are not part of its step, nor of the predicted one (so that `compare`
         * matches every op). They cost nothing here either. */
        g_autofree gboolean *folded = psim_cost_constant_nodes(s->g);
        for (int32_t v = 0; v < s->n; v++) {
            if (s->kind[v] == KIND_SEND || s->kind[v] == KIND_RECV || (folded && folded[v]))
                continue;
            const PsimNode *nv = psim_graph_node(s->g, v);
            if ((nv->flags & PSIM_NODE_FED) || !strcmp(nv->op, "Placeholder"))
                continue;
            psim_timeline_op_add(t, nv->name, nv->op, v, plan->device_of[v], s->stream[v],
                                 s->start[v], s->end[v]);
        }
        for (int32_t x = 0; x < plan->n_transfers; x++) {
            const PsimTransfer *tr = &plan->transfers[x];
            psim_timeline_xfer_add(t, psim_graph_node(s->g, tr->recv)->name, tr->key, x, tr->src,
                                   tr->dst, s->xfer_start[x], s->end[tr->recv], tr->bytes);
        }
        t->step_time_us = step;
        t->critical_path_us = res->critical_path_us;
        memcpy(t->peak_memory, res->peak_memory, sizeof(uint64_t) * (size_t)s->nd);
        *timeline = t;
    }
    sim_free(s);
    return TRUE;
}

/* ---- a placement, simulated as its plan would run ---- */

/* The transfer of output k (-1: control) of u to device d, made on first use: transfers of one
 * producer are chained from head[u] to tail[u], in creation order (the partitioner's). */
static int32_t placement_xfer(GArray *xf, int32_t *head, int32_t *tail, GArray *next, int32_t n,
                              const PsimGraph *g, const int32_t *dev, int32_t u, int32_t k, int32_t d,
                              gboolean compress)
{
    const int32_t *nx = (const int32_t *)(void *)next->data;
    for (int32_t x = head[u]; x >= 0; x = nx[x]) {
        const PsimTransfer *t = &g_array_index(xf, PsimTransfer, x);
        if (t->dst == d && (k < 0 ? t->control : !t->control && t->port.index == k))
            return x;
    }
    int32_t x = (int32_t)xf->len;
    PsimTransfer t = {0};
    t.send = n + 2 * x;
    t.recv = n + 2 * x + 1;
    t.src = dev[u];
    t.dst = d;
    t.control = k < 0;
    t.port = (PsimPort){u, k < 0 ? 0 : k};
    t.after = -1;
    if (k >= 0) {
        const PsimNode *un = psim_graph_node(g, u);
        t.raw_bytes = un->outputs[k].bytes;
        t.compressed = psim_plan_output_compressed(un, k, compress);
        t.bytes = t.compressed ? t.raw_bytes / 2 : t.raw_bytes;
    }
    g_array_append_val(xf, t);
    /* Appended at the chain's end, so that lookups meet transfers in creation order. */
    int32_t minus1 = -1;
    g_array_append_val(next, minus1);
    if (head[u] < 0)
        head[u] = x;
    else
        ((int32_t *)(void *)next->data)[tail[u]] = x;
    tail[u] = x;
    return x;
}

/* Generator u's copy on device d (psim_plan_node_replicated), counted once. */
static void placement_copy(GHashTable *copies, int32_t u, int32_t d)
{
    int64_t key = (int64_t)u << 32 | (uint32_t)d;
    if (!g_hash_table_contains(copies, &key))
        g_hash_table_insert(copies, g_memdup2(&key, sizeof key), GINT_TO_POINTER(g_hash_table_size(copies) + 1));
}

/* The structure psim_plan_build would make for pl, without its graph: Send/Recv of transfer x are
 * nodes n + 2x and n + 2x + 1; a constant generator read on another device has a copy there
 * (resident: its memory counted on that device). */
static gboolean setup_placement(Sim *s, const PsimSimPlacement *pl)
{
    const PsimGraph *g = s->g;
    int32_t n = psim_graph_n_nodes(g), nd = s->nd;
    const int32_t *dev = pl->device_of;
    /* Edges that cross devices bound the transfers: the arrays are sized once. */
    int64_t n_edges = 0, cross = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nv = psim_graph_node(g, v);
        n_edges += nv->n_inputs + nv->n_controls;
        for (int32_t k = 0; k < nv->n_inputs; k++)
            cross += nv->inputs[k].node >= 0 && dev[nv->inputs[k].node] != dev[v];
        for (int32_t k = 0; k < nv->n_controls; k++)
            cross += dev[nv->controls[k]] != dev[v];
    }
    GArray *xf = g_array_sized_new(FALSE, FALSE, sizeof(PsimTransfer), (guint)cross),
           *next = g_array_sized_new(FALSE, FALSE, sizeof(int32_t), (guint)cross);
    g_autofree int32_t *head = g_new(int32_t, n + 1), *tail = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        head[v] = -1;
    g_autoptr(GHashTable) copies = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
    /* Per graph node: its inputs as the plan graph has them (a Recv's id for a crossing one). */
    g_autofree int32_t *in_off = g_new(int32_t, n + 2);
    GArray *in_src = g_array_sized_new(FALSE, FALSE, sizeof(PsimPort), (guint)n_edges); /* index -1: control */
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nv = psim_graph_node(g, v);
        in_off[v] = (int32_t)in_src->len;
        for (int32_t k = 0; k < nv->n_inputs; k++) {
            PsimPort q = nv->inputs[k];
            if (q.node >= 0 && dev[q.node] != dev[v] && psim_plan_node_replicated(psim_graph_node(g, q.node)))
                placement_copy(copies, q.node, dev[v]); /* read from its copy there: no transfer */
            else if (q.node >= 0 && dev[q.node] != dev[v])
                q = (PsimPort){n + 2 * placement_xfer(xf, head, tail, next, n, g, dev, q.node, q.index, dev[v], pl->compress) + 1, 0};
            g_array_append_val(in_src, q);
        }
        for (int32_t k = 0; k < nv->n_controls; k++) {
            int32_t u = nv->controls[k];
            if (dev[u] != dev[v])
                u = n + 2 * placement_xfer(xf, head, tail, next, n, g, dev, u, -1, dev[v], pl->compress) + 1;
            PsimPort q = {u, -1};
            g_array_append_val(in_src, q);
        }
    }
    in_off[n] = (int32_t)in_src->len;
    g_array_free(next, TRUE);
    s->n_copies = (int32_t)g_hash_table_size(copies);
    s->copy_node = g_new(int32_t, s->n_copies + 1);
    s->copy_dev = g_new(int32_t, s->n_copies + 1);
    GHashTableIter it;
    gpointer ck, cv;
    g_hash_table_iter_init(&it, copies);
    while (g_hash_table_iter_next(&it, &ck, &cv)) {
        int32_t i = GPOINTER_TO_INT(cv) - 1;
        s->copy_node[i] = (int32_t)(*(const int64_t *)ck >> 32);
        s->copy_dev[i] = (int32_t)(*(const int64_t *)ck & 0xffffffff);
    }
    int32_t n_xf = (int32_t)xf->len, N = n + 2 * n_xf;
    s->n = N;
    s->n_xf = n_xf;
    s->xf = (PsimTransfer *)(void *)g_array_free(xf, FALSE);
    const PsimPort *ins = (const PsimPort *)(void *)in_src->data;
    int32_t *dof = g_new(int32_t, N + 1), *xor = g_new(int32_t, N + 1);
    memcpy(dof, dev, sizeof(int32_t) * (size_t)n);
    for (int32_t v = 0; v < N; v++)
        xor[v] = -1;
    for (int32_t x = 0; x < n_xf; x++) {
        dof[n + 2 * x] = s->xf[x].src;
        dof[n + 2 * x + 1] = s->xf[x].dst;
        xor[n + 2 * x + 1] = x;
    }
    s->dev_of = dof;
    s->xfer_of_recv = xor;
    s->prio = g_new0(double, N + 1);
    int32_t *cnt = g_new0(int32_t, nd + 1), **ord = g_new0(int32_t *, nd + 1);
    for (int32_t i = 0; i < n; i++)
        cnt[dev[pl->seq[i]]]++;
    for (int32_t d = 0; d < nd; d++) {
        ord[d] = g_new(int32_t, cnt[d] + 1);
        cnt[d] = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t v = pl->seq[i], d = dev[v];
        ord[d][cnt[d]++] = v;
    }
    s->order_of = ord;
    s->n_order = cnt;
    s->cluster_dev = g_new(int32_t, nd + 1);
    for (int32_t d = 0; d < nd; d++)
        s->cluster_dev[d] = d;

    /* Nodes: kinds, costs, output slots (a Recv has its tensor's, a Send none). */
    s->kind = g_new0(uint8_t, N + 1);
    s->ready = g_new0(uint8_t, N + 1);
    s->done = g_new0(uint8_t, N + 1);
    s->start = g_new0(double, N + 1);
    s->end = g_new0(double, N + 1);
    s->binding = g_new(int32_t, N + 1);
    s->stream = g_new0(int32_t, N + 1);
    s->pending = g_new0(int32_t, N + 1);
    s->out_off = g_new(int32_t, N + 1);
    s->send_xfer = g_new(int32_t, N + 1);
    s->done_order = g_new(int32_t, N + 1);
    s->xfer_start = g_new0(double, n_xf + 1);
    s->xfer_request = g_new0(double, n_xf + 1);
    s->cost = g_new0(double, N + 1);
    s->out_total = g_new0(uint64_t, N + 1);
    s->in_off = g_new(int32_t, N + 1);
    const char *send_op = NULL, *recv_op = NULL;
    int32_t n_out = 0;
    for (int32_t v = 0; v < N; v++) {
        s->binding[v] = -1;
        s->send_xfer[v] = -1;
        s->out_off[v] = n_out;
        if (v >= n) {
            int32_t x = (v - n) / 2;
            gboolean is_recv = (v - n) & 1;
            s->kind[v] = is_recv ? KIND_RECV : KIND_SEND;
            if (is_recv && !s->xf[x].control) {
                s->out_total[v] = s->xf[x].raw_bytes;
                n_out++;
            } else if (!is_recv) {
                s->send_xfer[v] = x;
            }
            continue;
        }
        const PsimNode *nv = psim_graph_node(g, v);
        s->kind[v] = node_kind(nv, &send_op, &recv_op);
        s->out_total[v] = outputs_bytes(nv);
        n_out += nv->n_outputs;
        double c = psim_cost_bound(pl->cost[v]);
        if (!isfinite(c) || c < 0) {
            g_set_error(s->error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: node '%s': op '%s' has no cost on device '%s'", psim_graph_name(g), nv->name,
                        nv->op, psim_cluster_device(s->c, dev[v])->name);
            g_array_free(in_src, TRUE);
            return FALSE;
        }
        s->cost[v] = c;
    }
    s->out_off[N] = n_out;
    s->remaining = g_new0(int32_t, n_out + 1);
    s->slot_bytes = g_new(uint64_t, n_out + 1);
    s->slot_dev = g_new(int32_t, n_out + 1);
    for (int32_t v = 0; v < N; v++)
        for (int32_t k = s->out_off[v]; k < s->out_off[v + 1]; k++) {
            s->slot_bytes[k] = v < n ? psim_graph_node(g, v)->outputs[k - s->out_off[v]].bytes : s->out_total[v];
            s->slot_dev[k] = dof[v];
        }
    /* Sources of every node (unique, sorted, as psim_graph_pred has them) and the output slots
     * it consumes (as setup() counts them: parameters' outputs stay). */
    s->in_slot = g_new(int32_t, in_off[n] + n_xf + 1);
    s->own_succ_off = g_new0(int32_t, N + 2);
    int32_t *src = g_new(int32_t, in_off[n] + 2 * n_xf + 1), *src_off = g_new(int32_t, N + 2);
    int32_t n_src = 0, n_in = 0;
    for (int32_t v = 0; v < N; v++) {
        src_off[v] = n_src;
        s->in_off[v] = n_in;
        int32_t first = n_src;
        if (v < n) {
            for (int32_t i = in_off[v]; i < in_off[v + 1]; i++) {
                PsimPort q = ins[i];
                if (q.node < 0)
                    continue;
                src[n_src++] = q.node;
                if (q.index >= 0 && s->kind[q.node] != KIND_PARAM) {
                    int32_t slot = s->out_off[q.node] + q.index;
                    s->remaining[slot]++;
                    s->in_slot[n_in++] = slot;
                }
            }
        } else if ((v - n) & 1) {
            src[n_src++] = v - 1; /* a Recv waits for its Send */
        } else {
            const PsimTransfer *t = &s->xf[(v - n) / 2];
            src[n_src++] = t->port.node;
            if (!t->control && s->kind[t->port.node] != KIND_PARAM) {
                int32_t slot = s->out_off[t->port.node] + t->port.index;
                s->remaining[slot]++;
                s->in_slot[n_in++] = slot;
            }
        }
        n_src = first + psim_ids_sort_unique(src + first, n_src - first);
        s->pending[v] = n_src - first;
    }
    src_off[N] = n_src;
    s->in_off[N] = n_in;
    g_array_free(in_src, TRUE);
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort o = psim_graph_output(g, i);
        if (o.node >= 0)
            s->remaining[s->out_off[o.node] + o.index]++; /* fetched: never freed */
    }
    for (int32_t i = 0; i < n_src; i++)
        s->own_succ_off[src[i] + 1]++;
    for (int32_t v = 0; v < N; v++)
        s->own_succ_off[v + 1] += s->own_succ_off[v];
    s->own_succ = g_new(int32_t, n_src + 1);
    g_autofree int32_t *fill = g_memdup2(s->own_succ_off, sizeof(int32_t) * (N + 1));
    for (int32_t v = 0; v < N; v++)
        for (int32_t i = src_off[v]; i < src_off[v + 1]; i++)
            s->own_succ[fill[src[i]]++] = v;
    g_free(src);
    g_free(src_off);
    s->so = s->own_succ_off;
    s->s = s->own_succ;
    s->gated = g_new(int32_t, N + 1);
    s->gated_next = g_new(int32_t, n_xf + 1);
    for (int32_t v = 0; v < N; v++)
        s->gated[v] = -1;
    setup_common(s);
    return TRUE;
}

double psim_sim_placement_step(const PsimGraph *g, PsimCostModel *m, const PsimSimPlacement *pl,
                               GError **error)
{
    PsimSimResult local = {0}, *res = pl->result ? pl->result : &local;
    memset(res, 0, sizeof *res);
    res->over_device = -1;
    Sim sim = {0}, *s = &sim;
    s->g = g;
    s->m = m;
    s->c = psim_cost_model_cluster(m);
    s->order = PSIM_ORDER_STATIC;
    s->nd = psim_cluster_n_devices(s->c);
    s->res = res;
    s->error = error;
    int32_t n = psim_graph_n_nodes(g);
    s->cap = pl->capacity;
    if (!setup_placement(s, pl) || !sim_steady(s)) {
        sim_free(s);
        return -1;
    }
    double step = 0;
    for (int32_t v = 0; v < s->n; v++)
        step = MAX(step, s->end[v]);
    if (pl->result) {
        res->step_time_us = step;
        res->n_devices = s->nd;
        res->peak_memory = g_new0(uint64_t, s->nd + 1);
        for (int32_t d = 0; d < s->nd; d++)
            res->peak_memory[d] = s->dev[d].peak;
        res->events = s->events;
    }
    if ((pl->plan_start || pl->plan_end) && pl->n_plan != s->n + s->n_copies) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "the placement's plan has %d nodes, not %d", s->n + s->n_copies, pl->n_plan);
        sim_free(s);
        return -1;
    }
    /* The plan's constant copies come after its Send/Recv nodes, resident from the start. */
    if (pl->plan_start) {
        memcpy(pl->plan_start, s->start, sizeof(double) * (size_t)s->n);
        memset(pl->plan_start + s->n, 0, sizeof(double) * (size_t)s->n_copies);
    }
    if (pl->plan_end) {
        memcpy(pl->plan_end, s->end, sizeof(double) * (size_t)s->n);
        memset(pl->plan_end + s->n, 0, sizeof(double) * (size_t)s->n_copies);
    }
    if (pl->plan_times) {
        int32_t np = s->n + s->n_copies;
        double *t = g_new0(double, 2 * (size_t)np + 1);
        memcpy(t, s->start, sizeof(double) * (size_t)s->n);
        memcpy(t + np, s->end, sizeof(double) * (size_t)s->n);
        *pl->plan_times = t;
        if (pl->n_plan_out)
            *pl->n_plan_out = np;
    }
    if (pl->start)
        memcpy(pl->start, s->start, sizeof(double) * (size_t)n);
    if (pl->finish)
        memcpy(pl->finish, s->end, sizeof(double) * (size_t)n);
    sim_free(s);
    return step;
}
