/* Partitioning a placed graph (TF's graph_partition.cc): Send/Recv pairs where edges cross
 * devices, one Recv per (tensor, destination device). The plan builder (placer/) schedules what
 * this makes; the plan reader (formats/) makes it again from a plan file's graph and placement,
 * so that a plan file stores the placement and the schedule, not the partitioned graph. */
#define _GNU_SOURCE
#include <string.h>

#include "graph/graph-private.h"
#include "placesim/plan.h"

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
    const PsimGraph *g;
    const int32_t *device_of;
    gboolean compress_all;
    PsimRounding rounding;
    PsimGraph *pg;
    XferSlot *table;     /* open addressing, capacity mask + 1 */
    uint32_t mask;
    GArray *xfers;       /* PsimTransfer */
    int32_t *dev_of;     /* device of every plan node */
    const char **full;   /* per device: its full name, interned in pg */
    const char *const *brief;  /* per device: its short name */
    const char *a_key, *a_bytes, *a_compressed, *a_control; /* attribute names, interned */
    int32_t nd;
    GHashTable *replicas; /* (u * (nd + 1) + d) -> copy's id + 1 (replica_get) */
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
    PsimGraph *pg = pt->pg;
    const PsimNode *un = psim_graph_node(pt->g, u);
    int32_t s = pt->device_of[u];
    PsimTransfer t = {0};
    t.after = -1;
    t.src = s;
    t.dst = d;
    t.control = k < 0;
    t.port = (PsimPort){u, k < 0 ? 0 : k};
    if (k >= 0) {
        t.raw_bytes = un->outputs[k].bytes;
        t.compressed = psim_plan_output_compressed(un, k, pt->compress_all);
        t.rounding = t.compressed ? pt->rounding : PSIM_ROUNDING_TRUNCATE;
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

gboolean psim_plan_node_replicated(const PsimNode *n)
{
    return n->n_inputs == 0 && n->n_controls == 0 && !(n->flags & PSIM_NODE_FED) &&
           (!strcmp(n->op, "Const") || !strcmp(n->op, "Constant"));
}

/* The copy of constant generator u on device d (psim_plan_node_replicated), made on first use:
 * "u/_const_0_on_CPU_1", the same op, attributes, costs and value (shared, not copied: a
 * tensor is immutable), its output unnamed as a Recv's is. */
static int32_t replica_get(Part *pt, int32_t u, int32_t d, GError **error)
{
    int64_t key = (int64_t)u * (pt->nd + 1) + d;
    gpointer hit = g_hash_table_lookup(pt->replicas, &key);
    if (hit)
        return GPOINTER_TO_INT(hit) - 1;
    const PsimNode *un = psim_graph_node(pt->g, u);
    xfer_name(&pt->name, un->name, 0, "const", "_on_", pt->brief[d]);
    /* "u/_const_0_on_CPU_1": the index keeps the Send/Recv names' shape. */
    g_autofree char *name = g_strdup(psim_graph_node_find(pt->pg, pt->name.s)
                                         ? psim_graph_unique_name(pt->pg, pt->name.s) /* as Send/Recv names */
                                         : pt->name.s);
    PsimNode *c = psim__graph_node_copy_named(pt->pg, pt->g, un, name, FALSE, error);
    if (!c)
        return -1;
    c->device = NULL; /* its request was the generator's; the copy is placed by the plan */
    for (int32_t k = 0; k < c->n_outputs; k++)
        c->outputs[k].name = NULL; /* the tensor's name stays the generator's */
    c->assigned_device = pt->full[d];
    pt->dev_of[c->id] = d;
    g_hash_table_insert(pt->replicas, g_memdup2(&key, sizeof key), GINT_TO_POINTER(c->id + 1));
    return c->id;
}

PsimPlan *psim_plan_partition(const PsimGraph *g, const int32_t *device_of, int32_t nd,
                              const char *const *devices, const char *const *short_names,
                              gboolean compress_all, PsimRounding rounding, const char *what,
                              GError **error)
{
    int32_t n = psim_graph_n_nodes(g);
    PsimGraph *pg = psim_graph_new(psim_graph_name(g));
    if (psim_graph_source(g))
        psim_graph_set_source(pg, psim_graph_source(g));
    /* Kernels read the opset where ops changed meaning (Softmax before 13). */
    psim_graph_set_opset(pg, psim_graph_opset(g));
    /* Edges that cross devices bound the transfers: size the tables once. */
    int64_t cross = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *s = psim_graph_node(g, v);
        int32_t d = device_of[v];
        for (int32_t k = 0; k < s->n_inputs; k++)
            cross += s->inputs[k].node >= 0 && device_of[s->inputs[k].node] != d;
        for (int32_t k = 0; k < s->n_controls; k++)
            cross += device_of[s->controls[k]] != d;
    }
    if ((int64_t)n + 2 * cross >= (1 << 30)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "plan '%s': %d nodes with %" G_GINT64_FORMAT " edges across devices are too many for one plan",
                    what, n, cross);
        psim_graph_free(pg);
        return NULL;
    }
    int32_t n_max = n + 2 * (int32_t)cross;
    psim_graph_reserve(pg, n_max);
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)cross)
        cap *= 2;
    Part pt = {.g = g, .device_of = device_of, .compress_all = compress_all, .rounding = rounding,
               .pg = pg, .table = g_new0(XferSlot, cap), .mask = cap - 1,
               .xfers = g_array_sized_new(FALSE, TRUE, sizeof(PsimTransfer), (guint)cross),
               .dev_of = g_new(int32_t, n_max + 1), .full = g_new(const char *, nd + 1),
               .brief = short_names, .nd = nd,
               .replicas = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL)};
    for (int32_t d = 0; d < nd; d++)
        pt.full[d] = psim_graph_intern(pg, devices[d]);
    pt.a_key = psim_graph_intern(pg, "key");
    pt.a_bytes = psim_graph_intern(pg, "bytes");
    pt.a_compressed = psim_graph_intern(pg, "compressed");
    pt.a_control = psim_graph_intern(pg, "control");
    memcpy(pt.dev_of, device_of, sizeof(int32_t) * (size_t)n);
    gboolean ok = TRUE;
    for (int32_t v = 0; v < n && ok; v++) {
        PsimNode *copy = psim__graph_node_copy(pg, g, psim_graph_node(g, v), FALSE, error);
        ok = copy != NULL;
        if (ok)
            copy->assigned_device = pt.full[device_of[v]]; /* interned in pg above */
    }
    /* The transfers first (plan nodes n + 2x, n + 2x + 1, in the order of the edges), then the
     * constant copies (in the same order: psim_sim_placement_step numbers them so), then the
     * edges, each finding what it crosses by. */
    for (int pass = 0; pass < 2 && ok; pass++)
        for (int32_t v = 0; v < n && ok; v++) {
            const PsimNode *s = psim_graph_node(g, v);
            int32_t d = device_of[v];
            for (int32_t k = 0; k < s->n_inputs + (pass ? 0 : s->n_controls) && ok; k++) {
                int32_t u = k < s->n_inputs ? s->inputs[k].node : s->controls[k - s->n_inputs];
                if (u < 0 || device_of[u] == d)
                    continue;
                gboolean copy = k < s->n_inputs && psim_plan_node_replicated(psim_graph_node(g, u));
                if (pass == 0 && !copy)
                    ok = transfer_get(&pt, u, k < s->n_inputs ? s->inputs[k].index : -1, d, error) >= 0;
                else if (pass == 1 && copy)
                    ok = replica_get(&pt, u, d, error) >= 0;
            }
        }
    for (int32_t v = 0; v < n && ok; v++) {
        const PsimNode *s = psim_graph_node(g, v);
        PsimNode *t = psim_graph_node(pg, v);
        int32_t d = device_of[v];
        for (int32_t k = 0; k < s->n_inputs && ok; k++) {
            PsimPort in = s->inputs[k];
            if (in.node >= 0 && device_of[in.node] != d && psim_plan_node_replicated(psim_graph_node(g, in.node))) {
                int32_t r = replica_get(&pt, in.node, d, error);
                ok = r >= 0;
                in.node = r;
            } else if (in.node >= 0 && device_of[in.node] != d) {
                int32_t x = transfer_get(&pt, in.node, in.index, d, error);
                ok = x >= 0;
                if (ok)
                    in = (PsimPort){g_array_index(pt.xfers, PsimTransfer, x).recv, 0};
            }
            psim_graph_node_input_add(pg, t, in);
        }
        for (int32_t k = 0; k < s->n_controls && ok; k++) {
            int32_t u = s->controls[k];
            if (device_of[u] != d) {
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
    g_free(pt.key.s);
    g_free(pt.name.s);
    if (!ok || !psim_graph_finalize(pg, error)) {
        g_hash_table_destroy(pt.replicas);
        g_array_free(pt.xfers, TRUE);
        g_free(pt.dev_of);
        psim_graph_free(pg);
        return NULL;
    }
    PsimPlan *plan = psim_plan_new(pg, nd, devices);
    plan->algo = g_strdup(what);
    plan->n_placed = n;
    plan->compress_all = compress_all;
    plan->rounding = rounding;
    int32_t N = psim_graph_n_nodes(pg);
    memcpy(plan->device_of, pt.dev_of, sizeof(int32_t) * (size_t)N);
    g_free(pt.dev_of);
    plan->n_transfers = (int32_t)pt.xfers->len;
    plan->transfers = (PsimTransfer *)g_array_free(pt.xfers, FALSE);
    for (int32_t i = 0; i < plan->n_transfers; i++)
        plan->transfer_of_recv[plan->transfers[i].recv] = i;
    GHashTableIter it;
    gpointer key, val;
    g_hash_table_iter_init(&it, pt.replicas);
    while (g_hash_table_iter_next(&it, &key, &val))
        plan->copy_of[GPOINTER_TO_INT(val) - 1] = (int32_t)(*(const int64_t *)key / (nd + 1));
    g_hash_table_destroy(pt.replicas);
    return plan;
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
void psim_plan_order_set(PsimPlan *plan, const int32_t *seq, const double *key)
{
    int32_t N = psim_graph_n_nodes(plan->graph), nd = plan->n_devices, n = plan->n_placed;
    if (seq != plan->seq) {
        g_free(plan->seq);
        plan->seq = g_memdup2(seq, sizeof(int32_t) * (size_t)(n ? n : 1));
    }
    g_autofree int32_t *rank = g_new(int32_t, N + 1);
    for (int32_t i = 0; i < n; i++)
        rank[seq[i]] = i;
    for (int32_t v = n; v < N; v++)
        rank[v] = n + v;
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
            int32_t v = seq[i], d = plan->device_of[v];
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
        int32_t v = seq[i], d = plan->device_of[v];
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
        /* Constant copies (no inputs, resident) first, in id order; the rest as it is. */
        int32_t *o = plan->order[d], m = plan->n_order[d], c = 0;
        for (int32_t i = 0; i < m; i++)
            c += plan->copy_of[o[i]] >= 0;
        if (c == 0)
            continue;
        g_autofree int32_t *copy = g_memdup2(o, sizeof(int32_t) * (size_t)m);
        int32_t a = 0, b = c;
        for (int32_t i = 0; i < m; i++) {
            int32_t v = copy[i];
            o[plan->copy_of[v] >= 0 ? a++ : b++] = v;
        }
    }
}

