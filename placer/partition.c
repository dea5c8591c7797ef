/* Partitioning a placed graph into a Plan (TF's graph_partition.cc): Send/Recv pairs where
 * edges cross devices, one Recv per (tensor, destination device); then the recv schedule
 * (TF's scheduler.cc: ASAP, ALAP, slack) and the plan's order, starts and priorities. */
#define _GNU_SOURCE
#include <string.h>

#include "graph/graph-private.h"
#include "placer/placer-private.h"
#include "placesim/sim.h"

int32_t psim_plan_n_sends(const PsimPlan *p)
{
    int32_t k = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(p->graph); v++)
        k += !strcmp(psim_graph_node(p->graph, v)->op, "Send");
    return k;
}

/* ---- Send/Recv pairs ----
 * One pass over the placed graph's edges. Transfers are found by (producer, output, destination
 * device) in a flat open-addressing table sized once; names and rendezvous keys are assembled
 * with memcpy into one reused buffer; node names, op names, attribute names and device names are
 * interned once per plan, so a transfer costs two name-index probes and one key interning. */

/* A transfer's identity: producer, output (-1: control) and destination device; x is the
 * transfer's index + 1 (0: an empty slot). */
typedef struct {
    int32_t u, k, d, x;
} XferSlot;

static inline uint32_t xfer_hash(int32_t u, int32_t k, int32_t d)
{
    uint64_t h = (uint64_t)(uint32_t)u * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uint32_t)k << 32 | (uint32_t)d) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h >> 32);
}

/* A growable byte buffer for names and keys. */
typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = MAX(2 * b->cap, b->len + n + 64);
        b->s = g_realloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_int(Buf *b, int32_t v)
{
    char tmp[16];
    int i = (int)sizeof tmp;
    uint32_t x = v < 0 ? (uint32_t)0 - (uint32_t)v : (uint32_t)v;
    do
        tmp[--i] = (char)('0' + x % 10);
    while ((x /= 10) != 0);
    if (v < 0)
        tmp[--i] = '-';
    buf_put(b, tmp + i, sizeof tmp - (size_t)i);
}

typedef struct {
    PsimPlaceCtx *c;
    const PsimPlacement *p;
    PsimGraph *pg;
    XferSlot *table;     /* open addressing, capacity mask + 1 */
    uint32_t mask;
    GArray *xfers;       /* PsimTransfer */
    int32_t *dev_of;     /* device of every plan node */
    const char **full;   /* per device: its full name, interned in pg */
    const char **brief;  /* per device: its short name */
    const char *a_key, *a_bytes, *a_compressed, *a_control; /* attribute names, interned */
    Buf key, name;
} Part;

/* name = base with ':' as '_' ("u/_send_0_to_CPU_1"), base being NAME/_WHAT_K_DIR_DEV. */
static void xfer_name(Buf *b, const char *u, int32_t k, const char *what, const char *dir,
                      const char *dev)
{
    b->len = 0;
    buf_str(b, u);
    buf_put(b, "/_", 2);
    buf_str(b, what);
    buf_put(b, "_", 1);
    if (k < 0)
        buf_put(b, "ctl", 3);
    else
        buf_int(b, k);
    buf_str(b, dir);
    buf_str(b, dev);
    for (size_t i = 0; i < b->len; i++)
        if (b->s[i] == ':')
            b->s[i] = '_';
}

/* The transfer of output k of u (k < 0: a control edge) to device d, made on first use. */
static int32_t transfer_get(Part *pt, int32_t u, int32_t k, int32_t d, GError **error)
{
    uint32_t i = xfer_hash(u, k, d) & pt->mask;
    for (; pt->table[i].x; i = (i + 1) & pt->mask)
        if (pt->table[i].u == u && pt->table[i].k == k && pt->table[i].d == d)
            return pt->table[i].x - 1;
    const PsimGraph *g = pt->c->g;
    PsimGraph *pg = pt->pg;
    const PsimNode *un = psim_graph_node(g, u);
    int32_t s = pt->p->device_of[u];
    PsimTransfer t = {0};
    t.after = -1;
    t.src = s;
    t.dst = d;
    t.control = k < 0;
    t.port = (PsimPort){u, k < 0 ? 0 : k};
    if (k >= 0) {
        t.raw_bytes = un->outputs[k].bytes;
        t.compressed = psim_plan_output_compressed(un, k, pt->c->opt.compress);
        t.rounding = t.compressed ? pt->c->opt.compress_rounding : PSIM_ROUNDING_TRUNCATE;
        t.bytes = t.compressed ? t.raw_bytes / 2 : t.raw_bytes;
    }
    /* The key names both devices and the tensor (the executor's rendezvous reads it):
     * "SRC;DST;NAME:K", or "SRC;DST;^NAME" for a control edge. */
    Buf *kb = &pt->key;
    kb->len = 0;
    buf_str(kb, pt->full[s]);
    buf_put(kb, ";", 1);
    buf_str(kb, pt->full[d]);
    buf_put(kb, ";", 1);
    if (k < 0) {
        buf_put(kb, "^", 1);
        buf_str(kb, un->name);
    } else {
        buf_str(kb, un->name);
        buf_put(kb, ":", 1);
        buf_int(kb, k);
    }
    /* Unique per transfer: stored without the intern table's lookup. */
    t.key = psim__graph_store(pg, kb->s, kb->len);
    xfer_name(&pt->name, un->name, k, "send", "_to_", pt->brief[d]);
    PsimNode *sn = psim_graph_node_add_unique(pg, pt->name.s, "Send", error);
    if (!sn)
        return -1;
    xfer_name(&pt->name, un->name, k, "recv", "_on_", pt->brief[d]);
    PsimNode *rn = psim_graph_node_add_unique(pg, pt->name.s, "Recv", error);
    if (!rn)
        return -1;
    PsimAttr attrs[4] = {{.name = pt->a_key, .type = PSIM_ATTR_STRING, .v.s = t.key},
                         {.name = pt->a_bytes, .type = PSIM_ATTR_INT, .v.i = (int64_t)t.bytes}};
    int32_t na = 2;
    if (t.compressed)
        attrs[na++] = (PsimAttr){.name = pt->a_compressed, .type = PSIM_ATTR_BOOL, .v.b = TRUE};
    if (t.control)
        attrs[na++] = (PsimAttr){.name = pt->a_control, .type = PSIM_ATTR_BOOL, .v.b = TRUE};
    psim__node_attrs_set_interned(pg, sn, attrs, na);
    psim__node_attrs_set_interned(pg, rn, attrs, na);
    sn->assigned_device = pt->full[s];
    rn->assigned_device = pt->full[d];
    if (k < 0)
        psim_graph_node_control_add(pg, sn, u);
    else
        psim_graph_node_input_add(pg, sn, t.port);
    psim_graph_node_control_add(pg, rn, sn->id);
    if (k >= 0) {
        const PsimOutput *o = &un->outputs[k];
        psim_graph_node_outputs_set(pg, rn, 1);
        psim_graph_output_set(pg, rn, 0, o->dtype, o->rank, o->dims);
        rn->outputs[0].bytes = o->bytes;
    }
    t.send = sn->id;
    t.recv = rn->id;
    pt->dev_of[sn->id] = s;
    pt->dev_of[rn->id] = d;
    g_array_append_val(pt->xfers, t);
    pt->table[i] = (XferSlot){u, k, d, (int32_t)pt->xfers->len};
    return (int32_t)pt->xfers->len - 1;
}

/* ---- Recv scheduling around the simulated step ----
 * The plan's times come from the simulator (one model of a step: sim/); what is computed here
 * is only TF's recv scheduling over those times: an ALAP pass over the simulated durations, the
 * slack of each Recv, and the node each held Recv waits for. */

/* A topological order of the plan graph with each device's compute chain (chain_next: the next
 * compute node on the same device, -1 at its end) as extra edges. FALSE when the chains
 * contradict the graph. */
static gboolean chain_topo(const PsimGraph *pg, const int32_t *chain_next, int32_t *order)
{
    int32_t n = psim_graph_n_nodes(pg);
    const int32_t *po, *pr, *so, *su;
    psim_graph_pred(pg, &po, &pr);
    psim_graph_succ(pg, &so, &su);
    g_autofree int32_t *deg = g_new0(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++)
        deg[v] += po[v + 1] - po[v];
    for (int32_t v = 0; v < n; v++)
        if (chain_next[v] >= 0)
            deg[chain_next[v]]++;
    int32_t head = 0, tail = 0;
    for (int32_t v = 0; v < n; v++)
        if (!deg[v])
            order[tail++] = v;
    while (head < tail) {
        int32_t v = order[head++], w = chain_next[v];
        if (w >= 0 && --deg[w] == 0)
            order[tail++] = w;
        for (int32_t i = so[v]; i < so[v + 1]; i++)
            if (--deg[su[i]] == 0)
                order[tail++] = su[i];
    }
    return tail == n;
}

/* Latest starts that keep the step m, each node taking its simulated duration dur. */
static void alap(const PsimGraph *pg, const int32_t *order, const int32_t *chain_next,
                 const double *dur, double m, double *late_start)
{
    const int32_t *so, *su;
    psim_graph_succ(pg, &so, &su);
    for (int32_t i = psim_graph_n_nodes(pg) - 1; i >= 0; i--) {
        int32_t v = order[i];
        double lf = m;
        for (int32_t j = so[v]; j < so[v + 1]; j++)
            lf = MIN(lf, late_start[su[j]]);
        if (chain_next[v] >= 0)
            lf = MIN(lf, late_start[chain_next[v]]);
        late_start[v] = lf - dur[v];
    }
}

/* Turns each held Recv's planned release time into a dependency, as TF's partitioner does:
 * the Recv may start once the compute node of its device that finishes last by that time in the
 * ALAP schedule has finished (t->after). The ALAP schedule keeps every edge and every device's
 * order, so such a node never depends on the Recv (it finishes before the Recv's latest start
 * and takes time: nodes of no duration are passed over, so that a descendant cannot tie), gates
 * never wait on each other in a cycle, and it comes before the Recv's consumers in the device's
 * order. A run ahead of the plan stays ahead: no Recv waits for a clock. */
static void choose_gates(PsimPlan *plan, const PsimPlacement *p, int32_t nd, const double *late,
                         const double *dur)
{
    int32_t n = p->n_nodes; /* the placed graph's nodes come first in plan->graph */
    /* Each device's compute nodes in placement order: one chain, late finishes non-decreasing. */
    g_autofree int32_t *count = g_new0(int32_t, nd + 1), *off = g_new0(int32_t, nd + 1);
    g_autofree int32_t *chain = g_new(int32_t, (size_t)n + 1);
    for (int32_t i = 0; i < n; i++)
        count[p->device_of[p->seq[i]]]++;
    for (int32_t d = 0; d < nd; d++)
        off[d + 1] = off[d] + count[d];
    memset(count, 0, sizeof(int32_t) * (size_t)nd);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = p->device_of[v];
        chain[off[d] + count[d]++] = v;
    }
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        PsimTransfer *t = &plan->transfers[i];
        t->after = -1;
        if (t->earliest_start <= 0)
            continue;
        const int32_t *c = chain + off[t->dst];
        int32_t lo = 0, hi = count[t->dst]; /* first index whose late finish is past the release */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (late[c[mid]] + dur[c[mid]] <= t->earliest_start)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int32_t k = lo - 1; k >= 0; k--)
            if (dur[c[k]] > 0) {
                t->after = c[k];
                break;
            }
    }
}

/* One simulated step of plan (static order, the default of `placesim sim`): its step time, or
 * -1 with error set; start and end (optional) get every node's times. */
static double plan_simulate(const PsimPlan *plan, const PsimPlaceCtx *c, double *start, double *end,
                            uint64_t *over, GError **error)
{
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE,
                         .node_start = start, .node_end = end};
    PsimSimResult r = {0};
    gboolean ok = psim_sim_run(plan, c->model, &so, &r, NULL, error);
    double t = ok ? r.step_time_us : -1;
    /* Bytes over the placement's memory limits (plan device d is cluster device d). */
    *over = 0;
    for (int32_t d = 0; ok && d < plan->n_devices; d++)
        if (c->capacity[d] && r.peak_memory[d] > c->capacity[d])
            *over += r.peak_memory[d] - c->capacity[d];
    psim_sim_result_clear(&r);
    return t;
}

typedef struct {
    const double *key;
    const int32_t *rank;
} OrderCmp;

static int cmp_order(const void *a, const void *b, void *user)
{
    const OrderCmp *o = user;
    int32_t u = *(const int32_t *)a, v = *(const int32_t *)b;
    if (o->key && o->key[u] != o->key[v])
        return o->key[u] < o->key[v] ? -1 : 1;
    return o->rank[u] - o->rank[v];
}

/* A double's bits as an unsigned integer of the same order (-0.0 as +0.0: they compare equal). */
static inline uint64_t order_bits(double x)
{
    uint64_t b;
    x = x == 0 ? 0 : x;
    memcpy(&b, &x, sizeof b);
    return b >> 63 ? ~b : b | (UINT64_C(1) << 63);
}

/* Stable LSD radix sort of ids by key (11-bit digits). Scratch, each with room for n: tmp, k and
 * kt; count has RADIX_BUCKETS entries (allocated once by the caller: a plan may have 65,536
 * devices). */
enum { RADIX_BITS = 11, RADIX_BUCKETS = 1 << RADIX_BITS };

static void radix_by_key(int32_t *ids, int32_t n, const double *key, int32_t *tmp, uint64_t *k,
                         uint64_t *kt, int32_t *count)
{
    if (n < 2)
        return;
    uint64_t all_or = 0, all_and = ~UINT64_C(0);
    for (int32_t i = 0; i < n; i++) {
        k[i] = order_bits(key[ids[i]]);
        all_or |= k[i];
        all_and &= k[i];
    }
    for (int shift = 0; shift < 64; shift += RADIX_BITS) {
        uint64_t m = ((uint64_t)RADIX_BUCKETS - 1) << shift;
        if ((all_or & m) == (all_and & m))
            continue; /* every key has the same digit here */
        memset(count, 0, sizeof(int32_t) * RADIX_BUCKETS);
        for (int32_t i = 0; i < n; i++)
            count[(k[i] >> shift) & (RADIX_BUCKETS - 1)]++;
        for (int32_t b = 0, sum = 0; b < RADIX_BUCKETS; b++) {
            int32_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int32_t i = 0; i < n; i++) {
            int32_t at = count[(k[i] >> shift) & (RADIX_BUCKETS - 1)]++;
            tmp[at] = ids[i];
            kt[at] = k[i];
        }
        memcpy(ids, tmp, sizeof(int32_t) * (size_t)n);
        memcpy(k, kt, sizeof(uint64_t) * (size_t)n);
    }
}

/* Each device's order: its nodes by key (NULL: by rank alone), then rank. rank is the
 * placement's position for compute nodes (ids below n_compute) and n_compute + id for Send and
 * Recv nodes. Compute nodes keep the placement's order whatever the key (their simulated starts
 * never decrease along it, ties go by rank): each device's chain is merged with its Send/Recv
 * nodes sorted by key (stable, so ties stay in id order); where a chain's keys do decrease, the
 * device's nodes are sorted whole by (key, rank). */
static void order_set(PsimPlan *plan, const PsimPlacement *p, const double *key, const int32_t *rank)
{
    int32_t N = psim_graph_n_nodes(plan->graph), nd = plan->n_devices, n = p->n_nodes;
    g_autofree int32_t *count = g_new0(int32_t, nd + 1), *off = g_new0(int32_t, nd + 2);
    for (int32_t v = 0; v < N; v++)
        count[plan->device_of[v]]++;
    for (int32_t d = 0; d < nd; d++) {
        g_free(plan->order[d]);
        plan->order[d] = g_new(int32_t, count[d] + 1);
        plan->n_order[d] = 0;
    }
    /* Send/Recv nodes of each device, in id order, bucketed by device. */
    for (int32_t v = n; v < N; v++)
        off[plan->device_of[v] + 1]++;
    for (int32_t d = 0; d < nd; d++)
        off[d + 1] += off[d];
    int32_t no = off[nd];
    g_autofree int32_t *other = g_new(int32_t, no + 1), *tmp = g_new(int32_t, no + 1);
    g_autofree int32_t *fill = g_memdup2(off, sizeof(int32_t) * (nd + 1));
    for (int32_t v = n; v < N; v++)
        other[fill[plan->device_of[v]]++] = v;
    g_autofree guint8 *sorted = g_new(guint8, nd + 1);
    for (int32_t d = 0; d < nd; d++)
        sorted[d] = 1;
    if (key) {
        int32_t *last = fill; /* reused: the last compute node seen per device */
        for (int32_t d = 0; d < nd; d++)
            last[d] = -1;
        for (int32_t i = 0; i < n; i++) {
            int32_t v = p->seq[i], d = plan->device_of[v];
            if (last[d] >= 0 && !(key[last[d]] <= key[v]))
                sorted[d] = 0;
            last[d] = v;
        }
        g_autofree uint64_t *k = g_new(uint64_t, no + 1), *kt = g_new(uint64_t, no + 1);
        g_autofree int32_t *count = g_new(int32_t, RADIX_BUCKETS);
        for (int32_t d = 0; d < nd; d++)
            if (sorted[d])
                radix_by_key(other + off[d], off[d + 1] - off[d], key, tmp, k, kt, count);
    }
    /* Compute chains, merged with the sorted Send/Recv nodes. */
    g_autofree int32_t *pos = g_memdup2(off, sizeof(int32_t) * (nd + 1));
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = plan->device_of[v];
        int32_t *o = plan->order[d];
        if (key && sorted[d])
            while (pos[d] < off[d + 1] && key[other[pos[d]]] < key[v])
                o[plan->n_order[d]++] = other[pos[d]++];
        o[plan->n_order[d]++] = v;
    }
    for (int32_t d = 0; d < nd; d++) {
        while (pos[d] < off[d + 1])
            plan->order[d][plan->n_order[d]++] = other[pos[d]++];
        if (!sorted[d]) {
            OrderCmp oc = {key, rank};
            qsort_r(plan->order[d], (size_t)plan->n_order[d], sizeof(int32_t), cmp_order, &oc);
        }
    }
}

PsimPlan *psim_plan_build(PsimPlaceCtx *c, const PsimPlacement *p, GError **error)
{
    g_return_val_if_fail(c->g, NULL);
    const PsimGraph *g = c->g;
    int32_t n = c->n, nd = c->nd;
    PsimGraph *pg = psim_graph_new(psim_graph_name(g));
    if (psim_graph_source(g))
        psim_graph_set_source(pg, psim_graph_source(g));
    /* Kernels read the opset where ops changed meaning (Softmax before 13). */
    psim_graph_set_opset(pg, psim_graph_opset(g));
    /* Edges that cross devices bound the transfers: size the tables once. */
    int64_t cross = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *s = psim_graph_node(g, v);
        int32_t d = p->device_of[v];
        for (int32_t k = 0; k < s->n_inputs; k++)
            cross += s->inputs[k].node >= 0 && p->device_of[s->inputs[k].node] != d;
        for (int32_t k = 0; k < s->n_controls; k++)
            cross += p->device_of[s->controls[k]] != d;
    }
    if ((int64_t)n + 2 * cross >= (1 << 30)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "plan '%s': %d nodes with %" G_GINT64_FORMAT " edges across devices are too many for one plan",
                    p->algo, n, cross);
        psim_graph_free(pg);
        return NULL;
    }
    int32_t n_max = n + 2 * (int32_t)cross;
    psim_graph_reserve(pg, n_max);
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)cross)
        cap *= 2;
    Part pt = {.c = c, .p = p, .pg = pg, .table = g_new0(XferSlot, cap), .mask = cap - 1,
               .xfers = g_array_sized_new(FALSE, TRUE, sizeof(PsimTransfer), (guint)cross),
               .dev_of = g_new(int32_t, n_max + 1), .full = g_new(const char *, nd + 1),
               .brief = g_new(const char *, nd + 1)};
    for (int32_t d = 0; d < nd; d++) {
        pt.full[d] = psim_graph_intern(pg, psim_cluster_device(c->cluster, d)->name);
        pt.brief[d] = psim_cluster_device(c->cluster, d)->short_name;
    }
    pt.a_key = psim_graph_intern(pg, "key");
    pt.a_bytes = psim_graph_intern(pg, "bytes");
    pt.a_compressed = psim_graph_intern(pg, "compressed");
    pt.a_control = psim_graph_intern(pg, "control");
    memcpy(pt.dev_of, p->device_of, sizeof(int32_t) * (size_t)n);
    gboolean ok = TRUE;
    for (int32_t v = 0; v < n && ok; v++) {
        PsimNode *copy = psim__graph_node_copy(pg, g, psim_graph_node(g, v), FALSE, error);
        ok = copy != NULL;
        if (ok)
            copy->assigned_device = pt.full[p->device_of[v]]; /* interned in pg above */
    }
    for (int32_t v = 0; v < n && ok; v++) {
        const PsimNode *s = psim_graph_node(g, v);
        PsimNode *t = psim_graph_node(pg, v);
        int32_t d = p->device_of[v];
        for (int32_t k = 0; k < s->n_inputs && ok; k++) {
            PsimPort in = s->inputs[k];
            if (in.node >= 0 && p->device_of[in.node] != d) {
                int32_t x = transfer_get(&pt, in.node, in.index, d, error);
                ok = x >= 0;
                if (ok)
                    in = (PsimPort){g_array_index(pt.xfers, PsimTransfer, x).recv, 0};
            }
            psim_graph_node_input_add(pg, t, in);
        }
        for (int32_t k = 0; k < s->n_controls && ok; k++) {
            int32_t u = s->controls[k];
            if (p->device_of[u] != d) {
                int32_t x = transfer_get(&pt, u, -1, d, error);
                ok = x >= 0;
                if (ok)
                    u = g_array_index(pt.xfers, PsimTransfer, x).recv;
            }
            psim_graph_node_control_add(pg, t, u);
        }
    }
    for (int32_t i = 0; ok && i < psim_graph_n_inputs(g); i++)
        psim_graph_input_add(pg, psim_graph_input(g, i));
    for (int32_t i = 0; ok && i < psim_graph_n_outputs(g); i++)
        psim_graph_output_add(pg, psim_graph_output(g, i));
    g_free(pt.table);
    g_free(pt.full);
    g_free(pt.brief);
    g_free(pt.key.s);
    g_free(pt.name.s);
    if (!ok || !psim_graph_finalize(pg, error)) {
        g_array_free(pt.xfers, TRUE);
        g_free(pt.dev_of);
        psim_graph_free(pg);
        return NULL;
    }

    g_autofree char **names = g_new0(char *, nd + 1);
    for (int32_t d = 0; d < nd; d++)
        names[d] = psim_cluster_device(c->cluster, d)->name;
    PsimPlan *plan = psim_plan_new(pg, nd, (const char *const *)names);
    plan->algo = g_strdup(p->algo);
    int32_t N = psim_graph_n_nodes(pg);
    memcpy(plan->device_of, pt.dev_of, sizeof(int32_t) * (size_t)N);
    g_free(pt.dev_of);
    plan->n_transfers = (int32_t)pt.xfers->len;
    plan->transfers = (PsimTransfer *)g_array_free(pt.xfers, FALSE);
    for (int32_t i = 0; i < plan->n_transfers; i++)
        plan->transfer_of_recv[plan->transfers[i].recv] = i;

    /* Compute-node chains in the placement's order; a first order for the simulator (compute
     * nodes by chain, Send/Recv after them: they take no place in a device's order). */
    g_autofree int32_t *chain_next = g_new(int32_t, N + 1), *last = g_new(int32_t, nd + 1),
                       *rank = g_new(int32_t, N + 1), *topo = g_new(int32_t, N + 1);
    for (int32_t v = 0; v < N; v++)
        chain_next[v] = -1;
    for (int32_t d = 0; d < nd; d++)
        last[d] = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = p->seq[i], d = p->device_of[v];
        if (last[d] >= 0)
            chain_next[last[d]] = v;
        last[d] = v;
        rank[v] = i;
    }
    for (int32_t v = n; v < N; v++)
        rank[v] = n + v;
    if (!chain_topo(pg, chain_next, topo)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "plan '%s': the order on the devices contradicts the graph", p->algo);
        psim_plan_free(plan);
        return NULL;
    }
    g_autofree double *start = g_new(double, N + 1), *end = g_new(double, N + 1),
                      *dur = g_new(double, N + 1), *late = g_new(double, N + 1);
    order_set(plan, p, NULL, rank);
    /* 1. The step as soon as possible: no Recv held, transfers in request order. That is the
     * placement's own step, which the simulator gives without the plan's graph (cheaper). */
    double m = psim__engine_run_plan(c, p->device_of, p->seq, NULL, NULL, start, end, N, error);
    if (m < 0) {
        psim_plan_free(plan);
        return NULL;
    }
    /* 2. ALAP over the simulated durations: slack, priorities, held Recvs and their gates. */
    for (int32_t v = 0; v < N; v++)
        dur[v] = end[v] - start[v];
    alap(pg, topo, chain_next, dur, m, late);
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        PsimTransfer *t = &plan->transfers[i];
        double asap = start[t->recv], late_start = late[t->recv];
        double margin = c->opt.recv_margin_us >= 0 ? c->opt.recv_margin_us : dur[t->recv];
        /* Held back only when it has slack beyond the margin (memory: the Recv's buffer need
         * not exist before). A transfer without slack is not held: a run ahead of the plan
         * would only wait for it, and a run behind it never does. */
        t->earliest_start = late_start - margin > asap ? late_start - margin : 0;
        t->priority = late_start - asap;
    }
    for (int32_t v = 0; v < N; v++)
        plan->priority[v] = plan->transfer_of_recv[v] >= 0 ? plan->transfers[plan->transfer_of_recv[v]].priority
                                                           : late[v];
    choose_gates(plan, p, nd, late, dur);
    /* 3. The plan as it will run. Gates and priorities are TF's heuristics, not the model: where
     * the simulator finds them slower than the step of 1, or over a memory limit that the
     * placement kept (psim_place checked it on the step of 1), they go (first the gates, then
     * the priorities), so a plan is never predicted slower or bigger than its own placement run
     * freely. */
    g_autofree double *start1 = g_memdup2(start, sizeof(double) * (N + 1));
    uint64_t over = 0;
    double m2 = plan_simulate(plan, c, start, end, &over, error);
    if (m2 > m || over) {
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].after = -1;
        m2 = plan_simulate(plan, c, start, end, &over, error);
    }
    if (m2 > m || over) {
        for (int32_t i = 0; i < plan->n_transfers; i++)
            plan->transfers[i].priority = 0;
        memcpy(start, start1, sizeof(double) * N);
        m2 = m;
    }
    if (m2 < 0) {
        psim_plan_free(plan);
        return NULL;
    }
    plan->makespan_us = m2;
    memcpy(plan->planned_start, start, sizeof(double) * N);
    order_set(plan, p, plan->planned_start, rank);
    return plan;
}
