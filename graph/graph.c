/* The graph container: an arena for names and arrays, stable node pages, name lookup, input
 * refs resolved at finalize, and cached successor/predecessor lists. */
#include "graph-private.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE_SHIFT 12
#define PAGE_SIZE (1 << PAGE_SHIFT)
#define ARENA_BLOCK (256 * 1024)

typedef struct {
    int32_t node;
    int32_t slot;    /* index in inputs (data) or controls (control) */
    gboolean control;
    const char *ref; /* arena string */
} PendingRef;

struct PsimGraph {
    char *name;
    char *source;
    uint64_t version;
    int64_t opset;         /* ONNX default-domain opset, 0 if unknown */
    int32_t n_nodes;
    GPtrArray *pages;      /* PsimNode[PAGE_SIZE] each */
    /* Name index: open addressing with linear probing, cap a power of two, at most half full.
     * A slot holds (hash << 32) | (id + 1), 0 when empty: 8 bytes a slot, a third of what a
     * GHashTable of string keys takes, which matters at millions of nodes. */
    uint64_t *index;
    uint32_t index_cap;
    GStringChunk *strings;
    GPtrArray *blocks;     /* arena blocks */
    char *cur;
    size_t cur_left;
    GArray *pending;       /* PendingRef */
    GArray *inputs;        /* int32 node ids */
    GArray *outputs;       /* PsimPort */
    GPtrArray *output_refs; /* char* refs resolved at finalize */
    GPtrArray *tensors;    /* tensors referenced from attrs/outputs: unref at free */
    gboolean grow_outputs;
    int64_t grown_outputs; /* outputs added by growing, bounded */
    /* Caches (mutable through const pointers). */
    uint64_t succ_version, pred_version;
    GRecMutex cache_lock; /* readers on several threads (executors) may fill the caches at once */
    int32_t *succ_off, *succ;
    int32_t *pred_off, *pred;
};

G_DEFINE_QUARK(psim-error-quark, psim_error)

/* Names and keys from files are echoed in errors: control characters (a newline in a node
 * name) would break the one-line error, so they become '?'. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20)
            *s = '?';
}

void psim__error_node(GError **error, const PsimGraph *g, const PsimNode *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    /* Errors are one line: messages quoting file content (json-glib's parse errors) may hold
     * line breaks. */
    g_strdelimit(msg, "\r\n", ' ');
    const char *src = g && g->source ? g->source : (g && g->name ? g->name : "graph");
    g_autofree char *line = n ? g_strdup_printf("%s: node '%s': %s", src, n->name, msg)
                              : g_strdup_printf("%s: %s", src, msg);
    one_line(line + strlen(src));
    g_set_error_literal(error, PSIM_ERROR, PSIM_ERROR_INPUT, line);
}

void psim__error_file(GError **error, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_strdelimit(msg, "\r\n", ' ');
    one_line(msg);
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", path ? path : "input", msg);
}

void psim_graph_node_error(GError **error, const PsimGraph *g, int32_t v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    const char *src = psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g);
    if (v >= 0 && v < psim_graph_n_nodes(g))
        psim__error_file(error, src, "node '%s': %s", psim_graph_node(g, v)->name, msg);
    else
        psim__error_file(error, src, "%s", msg);
}

PsimGraph *psim_graph_new(const char *name)
{
    PsimGraph *g = g_new0(PsimGraph, 1);
    g_rec_mutex_init(&g->cache_lock);
    g->name = g_strdup(name ? name : "graph");
    g->pages = g_ptr_array_new_with_free_func(g_free);
    g->strings = g_string_chunk_new(64 * 1024);
    g->blocks = g_ptr_array_new_with_free_func(g_free);
    g->pending = g_array_new(FALSE, FALSE, sizeof(PendingRef));
    g->inputs = g_array_new(FALSE, FALSE, sizeof(int32_t));
    g->outputs = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    g->output_refs = g_ptr_array_new_with_free_func(g_free);
    g->tensors = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    g->version = 1;
    psim__ops_init();
    return g;
}

void psim_graph_free(PsimGraph *g)
{
    if (!g)
        return;
    g_rec_mutex_clear(&g->cache_lock);
    g_free(g->name);
    g_free(g->source);
    g_ptr_array_free(g->pages, TRUE);
    free(g->index);
    g_string_chunk_free(g->strings);
    g_ptr_array_free(g->blocks, TRUE);
    g_array_free(g->pending, TRUE);
    g_array_free(g->inputs, TRUE);
    g_array_free(g->outputs, TRUE);
    g_ptr_array_free(g->output_refs, TRUE);
    g_ptr_array_free(g->tensors, TRUE);
    g_free(g->succ_off);
    g_free(g->succ);
    g_free(g->pred_off);
    g_free(g->pred);
    g_free(g);
}

const char *psim_graph_name(const PsimGraph *g) { return g->name; }
void psim_graph_set_name(PsimGraph *g, const char *name)
{
    g_free(g->name);
    g->name = g_strdup(name ? name : "graph");
}
const char *psim_graph_source(const PsimGraph *g) { return g->source; }
void psim_graph_set_source(PsimGraph *g, const char *path)
{
    g_free(g->source);
    g->source = g_strdup(path);
}
uint64_t psim_graph_version(const PsimGraph *g) { return g->version; }
int64_t psim_graph_opset(const PsimGraph *g) { return g->opset; }
void psim_graph_set_opset(PsimGraph *g, int64_t version) { g->opset = version > 0 ? version : 0; }
int32_t psim_graph_n_nodes(const PsimGraph *g) { return g->n_nodes; }
void psim__graph_set_grow_outputs(PsimGraph *g, gboolean grow) { g->grow_outputs = grow; }

void psim__graph_copy_meta(PsimGraph *to, const PsimGraph *from)
{
    psim_graph_set_name(to, from->name);
    psim_graph_set_source(to, from->source);
    to->opset = from->opset;
}

PsimNode *psim_graph_node(const PsimGraph *g, int32_t id)
{
    g_return_val_if_fail(id >= 0 && id < g->n_nodes, NULL);
    PsimNode *page = g_ptr_array_index(g->pages, id >> PAGE_SHIFT);
    return &page[id & (PAGE_SIZE - 1)];
}

static inline uint32_t index_start(uint32_t hash, uint32_t cap)
{
    /* Fibonacci hashing spreads g_str_hash's values over the table's bits. */
    return (uint32_t)(((uint64_t)hash * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

/* The slot holding `name`, or the empty slot where it would go. */
static uint32_t index_probe(const PsimGraph *g, const char *name, uint32_t hash)
{
    uint32_t mask = g->index_cap - 1;
    for (uint32_t i = index_start(hash, g->index_cap);; i = (i + 1) & mask) {
        uint64_t e = g->index[i];
        if (!e)
            return i;
        if ((uint32_t)(e >> 32) == hash &&
            strcmp(psim_graph_node(g, (int32_t)(uint32_t)e - 1)->name, name) == 0)
            return i;
    }
}

/* The index is probed at random: from 2 MiB up it asks for transparent huge pages, which
 * spares a TLB miss on most probes (a third of the time of adding a million nodes). */
static uint64_t *index_alloc(uint32_t cap)
{
    size_t bytes = (size_t)cap * sizeof(uint64_t);
#ifdef MADV_HUGEPAGE
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge) {
        void *p = NULL;
        if (posix_memalign(&p, huge, bytes) == 0) {
            madvise(p, bytes, MADV_HUGEPAGE);
            memset(p, 0, bytes);
            return p;
        }
    }
#endif
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        g_error("out of memory for a name index of %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

static void index_grow(PsimGraph *g)
{
    uint32_t cap = g->index_cap ? 2 * g->index_cap : 64;
    uint64_t *old = g->index;
    uint32_t old_cap = g->index_cap;
    g->index = index_alloc(cap);
    g->index_cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i]) {
            uint32_t j = index_start((uint32_t)(old[i] >> 32), cap);
            while (g->index[j])
                j = (j + 1) & (cap - 1);
            g->index[j] = old[i];
        }
    free(old);
}

static gboolean name_taken(const PsimGraph *g, const char *name)
{
    return g->index_cap && g->index[index_probe(g, name, g_str_hash(name))] != 0;
}

PsimNode *psim_graph_node_find(const PsimGraph *g, const char *name)
{
    if (!g->index_cap)
        return NULL;
    uint64_t e = g->index[index_probe(g, name, g_str_hash(name))];
    return e ? psim_graph_node(g, (int32_t)(uint32_t)e - 1) : NULL;
}

int64_t psim_graph_n_edges(const PsimGraph *g)
{
    int64_t e = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const PsimNode *n = psim_graph_node(g, i);
        for (int32_t k = 0; k < n->n_inputs; k++)
            e += n->inputs[k].node >= 0;
        e += n->n_controls;
    }
    return e;
}

void *psim_graph_alloc(PsimGraph *g, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        return NULL;
    if (size > ARENA_BLOCK / 4) {
        void *p = g_malloc0(size);
        g_ptr_array_add(g->blocks, p);
        return p;
    }
    if (size > g->cur_left) {
        g->cur = g_malloc0(ARENA_BLOCK);
        g_ptr_array_add(g->blocks, g->cur);
        g->cur_left = ARENA_BLOCK;
    }
    void *p = g->cur;
    g->cur += size;
    g->cur_left -= size;
    return p;
}

const char *psim_graph_intern(PsimGraph *g, const char *s)
{
    return s ? g_string_chunk_insert_const(g->strings, s) : NULL;
}

guint psim_int64_hash(gconstpointer key)
{
    guint64 h = (guint64)*(const gint64 *)key;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return (guint)h;
}

const char *psim__graph_store(PsimGraph *g, const char *s, size_t len)
{
    return g_string_chunk_insert_len(g->strings, s, (gssize)len);
}

const char *psim_graph_unique_name(PsimGraph *g, const char *base)
{
    if (!name_taken(g, base))
        return psim_graph_intern(g, base);
    for (int i = 1;; i++) {
        g_autofree char *s = g_strdup_printf("%s_%d", base, i);
        if (!name_taken(g, s))
            return psim_graph_intern(g, s);
    }
}

void psim_graph_reserve(PsimGraph *g, int32_t n_nodes)
{
    while ((uint64_t)n_nodes * 2 > g->index_cap && n_nodes < (1 << 30))
        index_grow(g);
}

/* Room for one more node, or FALSE with an error. */
static gboolean node_room(PsimGraph *g, const char *name, const char *op, GError **error)
{
    if (name[0] == '\0') {
        psim__error_node(error, g, NULL, "a node of op '%s' has an empty name", op);
        return FALSE;
    }
    /* 2^30 nodes would take over 100 GiB; the limit keeps the name index's size in range. */
    if (g->n_nodes >= (1 << 30)) {
        psim__error_node(error, g, NULL, "too many nodes");
        return FALSE;
    }
    if ((uint64_t)(g->n_nodes + 1) * 2 > g->index_cap)
        index_grow(g);
    return TRUE;
}

static PsimNode *node_insert(PsimGraph *g, const char *name, const char *op, uint32_t hash,
                             uint32_t slot);

PsimNode *psim_graph_node_add(PsimGraph *g, const char *name, const char *op, GError **error)
{
    g_return_val_if_fail(name && op, NULL);
    if (!node_room(g, name, op, error))
        return NULL;
    uint32_t hash = g_str_hash(name), slot = index_probe(g, name, hash);
    if (g->index[slot]) {
        psim__error_node(error, g, NULL, "node '%s': two nodes have this name", name);
        return NULL;
    }
    return node_insert(g, name, op, hash, slot);
}

PsimNode *psim_graph_node_add_unique(PsimGraph *g, const char *base, const char *op, GError **error)
{
    g_return_val_if_fail(base && op, NULL);
    if (!node_room(g, base, op, error))
        return NULL;
    uint32_t hash = g_str_hash(base), slot = index_probe(g, base, hash);
    if (!g->index[slot])
        return node_insert(g, base, op, hash, slot);
    return psim_graph_node_add(g, psim_graph_unique_name(g, base), op, error);
}

static PsimNode *node_insert(PsimGraph *g, const char *name, const char *op, uint32_t hash,
                             uint32_t slot)
{
    int32_t id = g->n_nodes;
    if ((id >> PAGE_SHIFT) >= (int32_t)g->pages->len)
        g_ptr_array_add(g->pages, g_new0(PsimNode, PAGE_SIZE));
    g->n_nodes++;
    PsimNode *n = psim_graph_node(g, id);
    memset(n, 0, sizeof *n);
    n->id = id;
    n->name = g_string_chunk_insert(g->strings, name);
    n->op = psim_graph_intern(g, op);
    g->index[slot] = ((uint64_t)hash << 32) | (uint32_t)(id + 1);
    g->version++;
    return n;
}

/* Arrays in nodes grow by doubling with an implicit capacity: the next power of two. Input and
 * control arrays start at two (most nodes have one or two inputs: this saves an allocation and
 * a copy per node); a one-element arena block of 8 or 4 bytes has room for two anyway, since
 * the arena rounds sizes up to 16. */
static void *grow_from(PsimGraph *g, void *arr, int32_t n, size_t elem, int32_t first)
{
    if ((n != 0 && (n & (n - 1)) != 0) || (n != 0 && n < first))
        return arr;
    int32_t cap = n ? 2 * n : first;
    void *p = psim_graph_alloc(g, (size_t)cap * elem);
    if (n)
        memcpy(p, arr, (size_t)n * elem);
    return p;
}

static void *grow(PsimGraph *g, void *arr, int32_t n, size_t elem)
{
    return grow_from(g, arr, n, elem, 1);
}

void psim_graph_node_input_add(PsimGraph *g, PsimNode *n, PsimPort p)
{
    n->inputs = grow_from(g, n->inputs, n->n_inputs, sizeof(PsimPort), 2);
    n->inputs[n->n_inputs++] = p;
    g->version++;
}

void psim_graph_node_control_add(PsimGraph *g, PsimNode *n, int32_t src)
{
    for (int32_t i = 0; i < n->n_controls; i++)
        if (n->controls[i] == src && src >= 0)
            return;
    n->controls = grow_from(g, n->controls, n->n_controls, sizeof(int32_t), 2);
    n->controls[n->n_controls++] = src;
    g->version++;
}

void psim_graph_node_input_add_ref(PsimGraph *g, PsimNode *n, const char *ref)
{
    PendingRef pr = {.node = n->id, .ref = g_string_chunk_insert(g->strings, ref)};
    if (ref[0] == '^') {
        pr.control = TRUE;
        pr.slot = n->n_controls;
        n->controls = grow_from(g, n->controls, n->n_controls, sizeof(int32_t), 2);
        n->controls[n->n_controls++] = -2;
    } else {
        pr.slot = n->n_inputs;
        psim_graph_node_input_add(g, n, (PsimPort){-2, 0});
    }
    g_array_append_val(g->pending, pr);
    g->version++;
}

void psim_graph_node_outputs_set(PsimGraph *g, PsimNode *n, int32_t n_outputs)
{
    if (n_outputs <= n->n_outputs) {
        n->n_outputs = n_outputs;
        return;
    }
    PsimOutput *o = psim_graph_alloc(g, sizeof(PsimOutput) * (size_t)n_outputs);
    if (n->n_outputs)
        memcpy(o, n->outputs, sizeof(PsimOutput) * (size_t)n->n_outputs);
    for (int32_t k = n->n_outputs; k < n_outputs; k++)
        o[k].rank = PSIM_RANK_UNKNOWN;
    n->outputs = o;
    n->n_outputs = n_outputs;
    g->version++;
}

void psim_graph_output_set(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype, int32_t rank,
                           const int64_t *dims)
{
    g_return_if_fail(k >= 0);
    if (k >= n->n_outputs)
        psim_graph_node_outputs_set(g, n, k + 1);
    PsimOutput *o = &n->outputs[k];
    o->dtype = dtype;
    if (rank >= 0 && !(rank == o->rank && dims && o->dims && memcmp(dims, o->dims, sizeof(int64_t) * (size_t)rank) == 0)) {
        o->dims = rank ? psim_graph_alloc(g, sizeof(int64_t) * (size_t)rank) : NULL;
        if (rank)
            memcpy(o->dims, dims, sizeof(int64_t) * (size_t)rank);
    }
    if (rank < 0)
        o->dims = NULL;
    o->rank = rank;
    int64_t ne = rank >= 0 ? psim_shape_elems(rank, o->dims) : -1;
    size_t es = psim_dtype_size(dtype);
    if (ne >= 0 && es > 0 && dtype != PSIM_DTYPE_STRING)
        o->bytes = (uint64_t)ne * es;
}

void psim_graph_output_value_set(PsimGraph *g, PsimNode *n, int32_t k, PsimTensor *t)
{
    psim_graph_output_set(g, n, k, t->dtype, t->rank, t->dims);
    g_ptr_array_add(g->tensors, psim_tensor_ref(t));
    n->outputs[k].value = t;
    if (t->dtype == PSIM_DTYPE_STRING)
        n->outputs[k].bytes = t->nbytes;
}

/* ---- attributes ---- */

static PsimAttr *attr_slot(PsimGraph *g, PsimNode *n, const char *name)
{
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    n->attrs = grow(g, n->attrs, n->n_attrs, sizeof(PsimAttr));
    PsimAttr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof *a);
    a->name = psim_graph_intern(g, name);
    return a;
}

void psim__node_attrs_set_interned(PsimGraph *g, PsimNode *n, const PsimAttr *attrs, int32_t count)
{
    g_return_if_fail(n->n_attrs == 0);
    if (count <= 0)
        return;
    /* Capacity is implicit (the next power of two, see grow_from): allocate that much. */
    int32_t cap = 1;
    while (cap < count)
        cap *= 2;
    n->attrs = psim_graph_alloc(g, sizeof(PsimAttr) * (size_t)cap);
    memcpy(n->attrs, attrs, sizeof(PsimAttr) * (size_t)count);
    n->n_attrs = count;
}

static void *arena_dup(PsimGraph *g, const void *src, size_t size)
{
    if (!size)
        return NULL;
    void *p = psim_graph_alloc(g, size);
    memcpy(p, src, size);
    return p;
}

void psim__attr_copy(PsimGraph *g, PsimAttr *dst, const PsimAttr *src)
{
    dst->name = psim_graph_intern(g, src->name);
    dst->type = src->type;
    dst->n = src->n;
    size_t n = src->n > 0 ? (size_t)src->n : 0;
    switch (src->type) {
    case PSIM_ATTR_INT: dst->v.i = src->v.i; break;
    case PSIM_ATTR_FLOAT: dst->v.f = src->v.f; break;
    case PSIM_ATTR_STRING: dst->v.s = g_string_chunk_insert_const(g->strings, src->v.s ? src->v.s : ""); break;
    case PSIM_ATTR_BOOL: dst->v.b = src->v.b; break;
    case PSIM_ATTR_DTYPE: dst->v.dt = src->v.dt; break;
    case PSIM_ATTR_SHAPE:
        dst->v.shape.rank = src->v.shape.rank;
        dst->v.shape.dims = src->v.shape.rank > 0
            ? arena_dup(g, src->v.shape.dims, sizeof(int64_t) * (size_t)src->v.shape.rank) : NULL;
        break;
    case PSIM_ATTR_TENSOR:
        dst->v.t = src->v.t;
        if (src->v.t)
            g_ptr_array_add(g->tensors, psim_tensor_ref(src->v.t));
        break;
    case PSIM_ATTR_INTS: dst->v.ints = arena_dup(g, src->v.ints, n * sizeof(int64_t)); break;
    case PSIM_ATTR_FLOATS: dst->v.floats = arena_dup(g, src->v.floats, n * sizeof(double)); break;
    case PSIM_ATTR_BOOLS: dst->v.bools = arena_dup(g, src->v.bools, n * sizeof(gboolean)); break;
    case PSIM_ATTR_DTYPES: dst->v.dts = arena_dup(g, src->v.dts, n * sizeof(PsimDType)); break;
    case PSIM_ATTR_STRINGS:
        dst->v.strs = psim_graph_alloc(g, n * sizeof(char *));
        for (size_t i = 0; i < n; i++)
            dst->v.strs[i] = g_string_chunk_insert_const(g->strings, src->v.strs[i] ? src->v.strs[i] : "");
        break;
    case PSIM_ATTR_SHAPES:
        dst->v.shapes = psim_graph_alloc(g, n * sizeof(PsimShape));
        for (size_t i = 0; i < n; i++) {
            dst->v.shapes[i].rank = src->v.shapes[i].rank;
            dst->v.shapes[i].dims = src->v.shapes[i].rank > 0
                ? arena_dup(g, src->v.shapes[i].dims, sizeof(int64_t) * (size_t)src->v.shapes[i].rank)
                : NULL;
        }
        break;
    case PSIM_ATTR_TENSORS:
        dst->v.ts = psim_graph_alloc(g, n * sizeof(PsimTensor *));
        for (size_t i = 0; i < n; i++) {
            dst->v.ts[i] = src->v.ts[i];
            if (src->v.ts[i])
                g_ptr_array_add(g->tensors, psim_tensor_ref(src->v.ts[i]));
        }
        break;
    }
}

void psim_graph_node_attr_set(PsimGraph *g, PsimNode *n, const PsimAttr *a)
{
    PsimAttr tmp;
    psim__attr_copy(g, &tmp, a);
    *attr_slot(g, n, a->name) = tmp;
}

#define SIMPLE_SETTER(fn, ctype, TYPE, field)                                                    \
    void fn(PsimGraph *g, PsimNode *n, const char *name, ctype v)                                \
    {                                                                                            \
        PsimAttr a = {.name = name, .type = TYPE};                                               \
        a.v.field = v;                                                                           \
        psim_graph_node_attr_set(g, n, &a);                                                      \
    }
SIMPLE_SETTER(psim_graph_node_attr_set_int, int64_t, PSIM_ATTR_INT, i)
SIMPLE_SETTER(psim_graph_node_attr_set_float, double, PSIM_ATTR_FLOAT, f)
SIMPLE_SETTER(psim_graph_node_attr_set_string, const char *, PSIM_ATTR_STRING, s)
SIMPLE_SETTER(psim_graph_node_attr_set_bool, gboolean, PSIM_ATTR_BOOL, b)
SIMPLE_SETTER(psim_graph_node_attr_set_dtype, PsimDType, PSIM_ATTR_DTYPE, dt)
SIMPLE_SETTER(psim_graph_node_attr_set_tensor, PsimTensor *, PSIM_ATTR_TENSOR, t)

void psim_graph_node_attr_set_shape(PsimGraph *g, PsimNode *n, const char *name, int32_t rank,
                                    const int64_t *dims)
{
    PsimAttr a = {.name = name, .type = PSIM_ATTR_SHAPE};
    a.v.shape.rank = rank;
    a.v.shape.dims = (int64_t *)dims;
    psim_graph_node_attr_set(g, n, &a);
}

void psim_graph_node_attr_set_ints(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                   const int64_t *v)
{
    PsimAttr a = {.name = name, .type = PSIM_ATTR_INTS, .n = count};
    a.v.ints = (int64_t *)v;
    psim_graph_node_attr_set(g, n, &a);
}

void psim_graph_node_attr_set_floats(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                     const double *v)
{
    PsimAttr a = {.name = name, .type = PSIM_ATTR_FLOATS, .n = count};
    a.v.floats = (double *)v;
    psim_graph_node_attr_set(g, n, &a);
}

void psim_graph_node_attr_set_strings(PsimGraph *g, PsimNode *n, const char *name, int32_t count,
                                      const char *const *v)
{
    PsimAttr a = {.name = name, .type = PSIM_ATTR_STRINGS, .n = count};
    a.v.strs = (const char **)v;
    psim_graph_node_attr_set(g, n, &a);
}

const char *psim_attr_type_name(PsimAttrType t)
{
    static const char *const names[] = {[PSIM_ATTR_INT] = "int",       [PSIM_ATTR_FLOAT] = "float",
                                        [PSIM_ATTR_STRING] = "string", [PSIM_ATTR_BOOL] = "bool",
                                        [PSIM_ATTR_DTYPE] = "dtype",   [PSIM_ATTR_SHAPE] = "shape",
                                        [PSIM_ATTR_TENSOR] = "tensor", [PSIM_ATTR_INTS] = "ints",
                                        [PSIM_ATTR_FLOATS] = "floats", [PSIM_ATTR_STRINGS] = "strings",
                                        [PSIM_ATTR_BOOLS] = "bools",   [PSIM_ATTR_DTYPES] = "dtypes",
                                        [PSIM_ATTR_SHAPES] = "shapes", [PSIM_ATTR_TENSORS] = "tensors"};
    return (int)t >= 0 && (size_t)t < G_N_ELEMENTS(names) && names[t] ? names[t] : "unknown";
}

const PsimAttr *psim_node_attr(const PsimNode *n, const char *name)
{
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t psim_node_attr_int(const PsimNode *n, const char *name, int64_t dflt)
{
    const PsimAttr *a = psim_node_attr(n, name);
    if (!a)
        return dflt;
    if (a->type == PSIM_ATTR_INT)
        return a->v.i;
    if (a->type == PSIM_ATTR_BOOL)
        return a->v.b;
    if (a->type == PSIM_ATTR_DTYPE)
        return a->v.dt;
    return dflt;
}

double psim_node_attr_float(const PsimNode *n, const char *name, double dflt)
{
    const PsimAttr *a = psim_node_attr(n, name);
    if (!a)
        return dflt;
    if (a->type == PSIM_ATTR_FLOAT)
        return a->v.f;
    if (a->type == PSIM_ATTR_INT)
        return (double)a->v.i;
    return dflt;
}

const char *psim_node_attr_string(const PsimNode *n, const char *name, const char *dflt)
{
    const PsimAttr *a = psim_node_attr(n, name);
    return a && a->type == PSIM_ATTR_STRING ? a->v.s : dflt;
}

int32_t psim_node_attr_ints(const PsimNode *n, const char *name, const int64_t **v)
{
    const PsimAttr *a = psim_node_attr(n, name);
    if (!a)
        return -1;
    if (a->type == PSIM_ATTR_INTS) {
        *v = a->v.ints;
        return a->n;
    }
    if (a->type == PSIM_ATTR_INT) {
        *v = &a->v.i;
        return 1;
    }
    return -1;
}

void psim_graph_node_cost_set(PsimGraph *g, PsimNode *n, const char *device, double us)
{
    for (int32_t i = 0; i < n->n_costs; i++)
        if (strcmp(n->costs[i].device, device) == 0) {
            n->costs[i].us = us;
            return;
        }
    n->costs = grow(g, n->costs, n->n_costs, sizeof(PsimCostAnn));
    n->costs[n->n_costs].device = psim_graph_intern(g, device);
    n->costs[n->n_costs].us = us;
    n->n_costs++;
}

void psim_graph_node_device_set(PsimGraph *g, PsimNode *n, const char *device)
{
    n->device = device && *device ? psim_graph_intern(g, device) : NULL;
}

void psim_graph_node_assigned_set(PsimGraph *g, PsimNode *n, const char *device)
{
    n->assigned_device = device && *device ? psim_graph_intern(g, device) : NULL;
}

/* Short device name: the part after "device:" ("CPU:0"), or the whole name. */
static const char *short_device(const char *name)
{
    /* Full names end in "/device:TYPE:N"; anything else is already short. */
    if (name[0] != '/')
        return name;
    const char *p = strrchr(name, '/');
    return p && strncmp(p + 1, "device:", 7) == 0 ? p + 8 : name;
}

gboolean psim_node_cost_lookup(const PsimNode *n, const char *device_name, const char *device_type,
                               double *us)
{
    if (n->n_costs == 0)
        return FALSE;
    /* One pass ranking each annotation: exact name 0, short name 1, type 2, "*" 3. Simulators
     * call this once per node, so the short form of the device is computed once. */
    const char *sn = NULL; /* the short form of device_name, computed on first need */
    int best = 4;
    double v = 0;
    for (int32_t i = 0; i < n->n_costs && best > 0; i++) {
        const char *d = n->costs[i].device;
        int rank = 4;
        if (d[0] == '*' && d[1] == '\0')
            rank = 3;
        else if (device_name && strcmp(d, device_name) == 0)
            rank = 0;
        else if (device_name && (sn || (sn = short_device(device_name))) &&
                 strcmp(short_device(d), sn) == 0)
            rank = 1;
        else if (device_type && g_ascii_strcasecmp(d, device_type) == 0)
            rank = 2;
        if (rank < best) {
            best = rank;
            v = n->costs[i].us;
        }
    }
    if (best == 4)
        return FALSE;
    *us = v;
    return TRUE;
}

/* ---- graph inputs and outputs ---- */

void psim_graph_input_add(PsimGraph *g, int32_t node) { g_array_append_val(g->inputs, node); }
int32_t psim_graph_n_inputs(const PsimGraph *g) { return (int32_t)g->inputs->len; }
int32_t psim_graph_input(const PsimGraph *g, int32_t i)
{
    return g_array_index(g->inputs, int32_t, i);
}
void psim_graph_output_add(PsimGraph *g, PsimPort p)
{
    g_array_append_val(g->outputs, p);
    g_ptr_array_add(g->output_refs, NULL);
}
void psim_graph_output_add_ref(PsimGraph *g, const char *ref)
{
    PsimPort p = {-2, 0};
    g_array_append_val(g->outputs, p);
    g_ptr_array_add(g->output_refs, g_strdup(ref));
}
void psim__graph_outputs_clear(PsimGraph *g)
{
    g_array_set_size(g->outputs, 0);
    g_ptr_array_set_size(g->output_refs, 0); /* frees the refs */
}
int32_t psim_graph_n_outputs(const PsimGraph *g) { return (int32_t)g->outputs->len; }
PsimPort psim_graph_output(const PsimGraph *g, int32_t i)
{
    return g_array_index(g->outputs, PsimPort, i);
}

gboolean psim_ref_parse(const char *ref, char **name, int32_t *index, gboolean *control)
{
    *control = FALSE;
    *index = 0;
    if (ref[0] == '^') {
        *control = TRUE;
        ref++;
    }
    if (ref[0] == '\0')
        return FALSE;
    const char *colon = strrchr(ref, ':');
    if (colon && !*control && colon[1] != '\0') {
        char *end = NULL;
        gint64 k = g_ascii_strtoll(colon + 1, &end, 10);
        if (end && *end == '\0' && k >= 0 && k < G_MAXINT32 && g_ascii_isdigit(colon[1])) {
            *name = g_strndup(ref, (gsize)(colon - ref));
            *index = (int32_t)k;
            return **name != '\0';
        }
    }
    *name = g_strdup(ref);
    return TRUE;
}

char *psim_port_to_string(const PsimGraph *g, PsimPort p)
{
    if (p.node < 0)
        return g_strdup("");
    return g_strdup_printf("%s:%d", psim_graph_node(g, p.node)->name, p.index);
}

static gboolean resolve_port(PsimGraph *g, const PsimNode *user, const char *ref, PsimPort *out,
                             gboolean *control, GError **error)
{
    g_autofree char *name = NULL;
    int32_t k;
    if (!psim_ref_parse(ref, &name, &k, control)) {
        psim__error_node(error, g, user, "malformed input '%s'", ref);
        return FALSE;
    }
    PsimNode *src = psim_graph_node_find(g, name);
    if (!src && !*control && strchr(ref, ':')) {
        /* A node name may itself contain a colon ("a:b" without an index). */
        src = psim_graph_node_find(g, ref);
        k = 0;
    }
    if (!src) {
        psim__error_node(error, g, user, "input '%s' names a missing node", ref);
        return FALSE;
    }
    out->node = src->id;
    out->index = k;
    return TRUE;
}

static gboolean check_port(PsimGraph *g, const PsimNode *user, PsimPort p, GError **error)
{
    if (p.node < 0)
        return TRUE;
    if (p.node >= g->n_nodes) {
        psim__error_node(error, g, user, "input refers to node id %d out of range", p.node);
        return FALSE;
    }
    PsimNode *src = psim_graph_node(g, p.node);
    if (p.index >= src->n_outputs) {
        /* Growing is bounded per node and in total, so that a hostile file cannot make a few
         * bytes ("x:4095") stand for thousands of outputs on every node. */
        if (g->grow_outputs && p.index < 4096 &&
            g->grown_outputs + (p.index + 1 - src->n_outputs) <= MAX(65536, 4 * (int64_t)g->n_nodes)) {
            g->grown_outputs += p.index + 1 - src->n_outputs;
            psim_graph_node_outputs_set(g, src, p.index + 1);
            return TRUE;
        }
        psim__error_node(error, g, user, "input '%s:%d' is out of range: '%s' has %d output(s)",
                         src->name, p.index, src->name, src->n_outputs);
        return FALSE;
    }
    return TRUE;
}

gboolean psim_graph_finalize(PsimGraph *g, GError **error)
{
    for (guint i = 0; i < g->pending->len; i++) {
        PendingRef *pr = &g_array_index(g->pending, PendingRef, i);
        PsimNode *n = psim_graph_node(g, pr->node);
        PsimPort p;
        gboolean control;
        if (!resolve_port(g, n, pr->ref, &p, &control, error))
            return FALSE;
        if (pr->control)
            n->controls[pr->slot] = p.node;
        else
            n->inputs[pr->slot] = p;
    }
    g_array_set_size(g->pending, 0);
    for (guint i = 0; i < g->outputs->len; i++) {
        const char *ref = g_ptr_array_index(g->output_refs, i);
        if (!ref)
            continue;
        gboolean control;
        PsimPort p;
        if (!resolve_port(g, NULL, ref, &p, &control, error))
            return FALSE;
        g_array_index(g->outputs, PsimPort, i) = p;
        g_free(g_ptr_array_index(g->output_refs, i));
        g_ptr_array_index(g->output_refs, i) = NULL;
    }
    /* Nodes whose file did not list outputs get their op's output count; unknown ops grow to
     * what their consumers use. */
    g_autofree guint8 *unlisted = g_new0(guint8, g->n_nodes ? g->n_nodes : 1);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        PsimNode *n = psim_graph_node(g, i);
        if (n->n_outputs)
            continue;
        const PsimOpDef *d = psim_op_lookup(n->op);
        if (!d) {
            unlisted[i] = 1;
            continue;
        }
        int32_t k = d->n_outputs ? d->n_outputs(n) : d->n_outputs_fixed < 0 ? 0 : MAX(1, d->n_outputs_fixed);
        if (k > 0)
            psim_graph_node_outputs_set(g, n, k);
    }
    gboolean grow_saved = g->grow_outputs;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        PsimNode *n = psim_graph_node(g, i);
        for (int32_t k = 0; k < n->n_inputs; k++) {
            PsimPort p = n->inputs[k];
            if (p.node >= 0 && p.node < g->n_nodes && unlisted[p.node])
                g->grow_outputs = TRUE;
            gboolean ok = check_port(g, n, p, error);
            g->grow_outputs = grow_saved;
            if (!ok)
                return FALSE;
        }
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        PsimNode *n = psim_graph_node(g, i);
        for (int32_t k = 0; k < n->n_controls; k++)
            if (n->controls[k] < 0 || n->controls[k] >= g->n_nodes) {
                psim__error_node(error, g, n, "control input out of range");
                return FALSE;
            }
    }
    for (guint i = 0; i < g->outputs->len; i++)
        if (!check_port(g, NULL, g_array_index(g->outputs, PsimPort, i), error))
            return FALSE;
    g->version++;
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    return order != NULL;
}

/* ---- successor and predecessor lists ---- */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t psim_ids_sort_unique(int32_t *ids, int32_t n)
{
    if (n < 2)
        return n;
    if (n <= 16) { /* most nodes have a few sources: insertion sort beats a qsort call there */
        for (int32_t i = 1; i < n; i++) {
            int32_t x = ids[i], j = i;
            for (; j > 0 && ids[j - 1] > x; j--)
                ids[j] = ids[j - 1];
            ids[j] = x;
        }
    } else {
        qsort(ids, (size_t)n, sizeof(int32_t), cmp_i32);
    }
    int32_t u = 1;
    for (int32_t i = 1; i < n; i++)
        if (ids[i] != ids[u - 1])
            ids[u++] = ids[i];
    return u;
}

/* Unique sources of n (data producers and control sources), written to buf; returns count. */
static int32_t node_sources(const PsimNode *n, int32_t *buf)
{
    int32_t c = 0;
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k].node >= 0)
            buf[c++] = n->inputs[k].node;
    for (int32_t k = 0; k < n->n_controls; k++)
        if (n->controls[k] >= 0)
            buf[c++] = n->controls[k];
    return psim_ids_sort_unique(buf, c);
}

static void build_pred(PsimGraph *g)
{
    int32_t n = g->n_nodes;
    g_free(g->pred_off);
    g_free(g->pred);
    g->pred_off = g_new(int32_t, (gsize)n + 1);
    int64_t total = 0;
    int32_t maxdeg = 0;
    for (int32_t i = 0; i < n; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        total += v->n_inputs + v->n_controls;
        maxdeg = MAX(maxdeg, v->n_inputs + v->n_controls);
    }
    g->pred = g_new(int32_t, total ? total : 1);
    int32_t *buf = g_new(int32_t, maxdeg ? maxdeg : 1);
    int32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        g->pred_off[i] = pos;
        int32_t c = node_sources(psim_graph_node(g, i), buf);
        memcpy(g->pred + pos, buf, sizeof(int32_t) * (size_t)c);
        pos += c;
    }
    g->pred_off[n] = pos;
    g_free(buf);
    g->pred_version = g->version;
}

void psim_graph_pred(const PsimGraph *cg, const int32_t **off, const int32_t **pred)
{
    PsimGraph *g = (PsimGraph *)cg;
    g_rec_mutex_lock(&g->cache_lock);
    if (g->pred_version != g->version || !g->pred_off)
        build_pred(g);
    *off = g->pred_off;
    *pred = g->pred;
    g_rec_mutex_unlock(&g->cache_lock);
}

void psim_graph_succ(const PsimGraph *cg, const int32_t **off, const int32_t **succ)
{
    PsimGraph *g = (PsimGraph *)cg;
    g_rec_mutex_lock(&g->cache_lock);
    if (g->succ_version != g->version || !g->succ_off) {
        const int32_t *po, *p;
        psim_graph_pred(g, &po, &p);
        int32_t n = g->n_nodes;
        g_free(g->succ_off);
        g_free(g->succ);
        g->succ_off = g_new0(int32_t, (gsize)n + 1);
        for (int32_t i = 0; i < po[n]; i++)
            g->succ_off[p[i] + 1]++;
        for (int32_t i = 0; i < n; i++)
            g->succ_off[i + 1] += g->succ_off[i];
        g->succ = g_new(int32_t, po[n] ? po[n] : 1);
        int32_t *fill = g_new(int32_t, (gsize)n + 1);
        memcpy(fill, g->succ_off, sizeof(int32_t) * ((size_t)n + 1));
        for (int32_t v = 0; v < n; v++)
            for (int32_t i = po[v]; i < po[v + 1]; i++)
                g->succ[fill[p[i]]++] = v;
        g_free(fill);
        g->succ_version = g->version;
    }
    *off = g->succ_off;
    *succ = g->succ;
    g_rec_mutex_unlock(&g->cache_lock);
}
