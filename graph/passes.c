/* Graph passes that return new graphs: pruning to fetches given feeds (partial execution) and
 * common-subexpression elimination by value numbering. Both copy nodes with
 * psim__graph_node_copy and share constant tensors with the input graph.
 *
 * Pruning rule. A feed names a data tensor "node:k". Fetches are data tensors ("node:k"),
 * targets ("^node"), or a bare "node", which means "node:0" when the node has outputs and the
 * target otherwise; no fetches means the graph's outputs. The pruned graph keeps every node
 * that a fetch or target reaches backwards through data and control inputs, where the walk
 * stops at fed nodes: a fed node is kept, but as a source. It becomes a "Placeholder" flagged
 * PSIM_NODE_FED with the same name, outputs (dtype and shape, without any constant value) and
 * device request, and with no inputs, control inputs, attributes or cost annotations; its
 * PARAMETER and CONSTANT flags are cleared. All outputs of a fed node come from feeds, so a
 * kept consumer (or a fetch) of an output that was not fed is an error naming both nodes.
 * The new graph's inputs are the original inputs that were kept, then the fed nodes not among
 * them, in feed order; its outputs are the data fetches in order. */
#include "graph-private.h"
#include "ops-private.h"

#include <string.h>

PsimNode *psim__graph_node_copy(PsimGraph *to, const PsimGraph *from, const PsimNode *src,
                                gboolean edges, GError **error)
{
    return psim__graph_node_copy_named(to, from, src, src->name, edges, error);
}

PsimNode *psim__graph_node_copy_named(PsimGraph *to, const PsimGraph *from, const PsimNode *src,
                                      const char *name, gboolean edges, GError **error)
{
    (void)from;
    PsimNode *n = psim_graph_node_add(to, name, src->op, error);
    if (!n)
        return NULL;
    n->flags = src->flags;
    n->domain = psim_graph_intern(to, src->domain);
    psim_graph_node_device_set(to, n, src->device);
    psim_graph_node_assigned_set(to, n, src->assigned_device);
    for (int32_t i = 0; i < src->n_attrs; i++)
        psim_graph_node_attr_set(to, n, &src->attrs[i]);
    for (int32_t i = 0; i < src->n_costs; i++)
        psim_graph_node_cost_set(to, n, src->costs[i].device, src->costs[i].us);
    for (int32_t k = 0; edges && k < src->n_inputs; k++)
        psim_graph_node_input_add(to, n, src->inputs[k]);
    for (int32_t k = 0; edges && k < src->n_controls; k++)
        psim_graph_node_control_add(to, n, src->controls[k]);
    if (src->n_outputs > 0)
        psim_graph_node_outputs_set(to, n, src->n_outputs);
    for (int32_t k = 0; k < src->n_outputs; k++) {
        const PsimOutput *o = &src->outputs[k];
        if (o->value)
            psim_graph_output_value_set(to, n, k, o->value);
        else
            psim_graph_output_set(to, n, k, o->dtype, o->rank, o->dims);
        n->outputs[k].bytes = o->bytes;
        n->outputs[k].name = psim_graph_intern(to, o->name);
    }
    return n;
}

/* Resolves a ref to a node and output index; *control for "^node". */
static gboolean ref_lookup(const PsimGraph *g, const char *ref, const char *what, int32_t *node,
                           int32_t *index, gboolean *control, gboolean *bare, GError **error)
{
    g_autofree char *name = NULL;
    if (!ref || !psim_ref_parse(ref, &name, index, control)) {
        psim__error_node(error, g, NULL, "malformed %s '%s'", what, ref ? ref : "(null)");
        return FALSE;
    }
    const PsimNode *v = psim_graph_node_find(g, name);
    *bare = !*control && !strchr(ref, ':');
    if (!v && !*control && strchr(ref, ':')) {
        v = psim_graph_node_find(g, ref); /* a name with a colon in it */
        *index = 0;
        *bare = TRUE;
    }
    if (!v) {
        psim__error_node(error, g, NULL, "%s '%s' names a missing node", what, ref);
        return FALSE;
    }
    if (!*control && !*bare && *index >= v->n_outputs) {
        psim__error_node(error, g, v, "%s '%s' is out of range: the node has %d output(s)", what,
                         ref, v->n_outputs);
        return FALSE;
    }
    *node = v->id;
    return TRUE;
}

/* Copies the kept nodes (keep[id] != 0) in id order; new_id gets the mapping (-1 if dropped). */
static PsimGraph *copy_kept(const PsimGraph *g, const guint8 *keep, int32_t *new_id, GError **error)
{
    PsimGraph *out = psim_graph_new(psim_graph_name(g));
    psim__graph_copy_meta(out, g);
    int32_t nn = psim_graph_n_nodes(g), next = 0;
    for (int32_t i = 0; i < nn; i++) {
        new_id[i] = -1;
        if (!keep[i])
            continue;
        if (!psim__graph_node_copy(out, g, psim_graph_node(g, i), TRUE, error)) {
            psim_graph_free(out);
            return NULL;
        }
        new_id[i] = next++;
    }
    return out;
}

PsimGraph *psim_graph_prune(const PsimGraph *g, const char *const *feeds, int n_feeds,
                            const char *const *fetches, int n_fetches, GError **error)
{
    int32_t nn = psim_graph_n_nodes(g);
    g_autofree guint8 *fed = g_new0(guint8, nn ? nn : 1);
    g_autofree guint8 *keep = g_new0(guint8, nn ? nn : 1);
    g_autofree int32_t *new_id = g_new(int32_t, nn ? nn : 1);
    g_autoptr(GHashTable) fed_ports = g_hash_table_new(g_int64_hash, g_int64_equal);
    g_autoptr(GArray) fed_order = g_array_new(FALSE, FALSE, sizeof(int32_t));
    g_autofree gint64 *port_keys = g_new(gint64, n_feeds > 0 ? n_feeds : 1);
    for (int i = 0; i < n_feeds; i++) {
        int32_t node, index;
        gboolean control, bare;
        if (!ref_lookup(g, feeds[i], "feed", &node, &index, &control, &bare, error))
            return NULL;
        if (control || psim_graph_node(g, node)->n_outputs == 0) {
            psim__error_node(error, g, psim_graph_node(g, node),
                             "feed '%s' must name a data tensor", feeds[i]);
            return NULL;
        }
        port_keys[i] = ((gint64)node << 32) | (uint32_t)index;
        g_hash_table_add(fed_ports, &port_keys[i]);
        if (!fed[node])
            g_array_append_val(fed_order, node);
        fed[node] = 1;
    }
    /* Fetches: data ports and targets. */
    g_autoptr(GArray) outs = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    g_autoptr(GArray) stack = g_array_new(FALSE, FALSE, sizeof(int32_t));
    if (n_fetches == 0) {
        for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
            PsimPort p = psim_graph_output(g, i);
            g_array_append_val(outs, p);
            g_array_append_val(stack, p.node);
        }
        if (outs->len == 0) {
            psim__error_node(error, g, NULL, "nothing to fetch: no fetches and no graph outputs");
            return NULL;
        }
    }
    for (int i = 0; i < n_fetches; i++) {
        int32_t node, index;
        gboolean control, bare;
        if (!ref_lookup(g, fetches[i], "fetch", &node, &index, &control, &bare, error))
            return NULL;
        if (!control && (!bare || psim_graph_node(g, node)->n_outputs > 0)) {
            PsimPort p = {node, index};
            g_array_append_val(outs, p);
        }
        g_array_append_val(stack, node);
    }
    /* Walk back from the fetches, stopping at fed nodes. */
    const int32_t *po, *pred;
    psim_graph_pred(g, &po, &pred);
    while (stack->len) {
        int32_t v = g_array_index(stack, int32_t, stack->len - 1);
        g_array_set_size(stack, stack->len - 1);
        if (keep[v])
            continue;
        keep[v] = 1;
        if (fed[v])
            continue;
        for (int32_t i = po[v]; i < po[v + 1]; i++)
            if (!keep[pred[i]])
                g_array_append_val(stack, pred[i]);
    }
    /* Every use of a fed node must be of a fed output. */
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *u = psim_graph_node(g, v);
        if (!keep[v] || fed[v])
            continue;
        for (int32_t k = 0; k < u->n_inputs; k++) {
            PsimPort p = u->inputs[k];
            gint64 key = ((gint64)p.node << 32) | (uint32_t)p.index;
            if (p.node >= 0 && fed[p.node] && !g_hash_table_contains(fed_ports, &key)) {
                psim__error_node(error, g, u, "uses output %d of fed node '%s', which is not fed",
                                 p.index, psim_graph_node(g, p.node)->name);
                return NULL;
            }
        }
    }
    for (guint i = 0; i < outs->len; i++) {
        PsimPort p = g_array_index(outs, PsimPort, i);
        gint64 key = ((gint64)p.node << 32) | (uint32_t)p.index;
        if (fed[p.node] && !g_hash_table_contains(fed_ports, &key)) {
            psim__error_node(
                error, g, psim_graph_node(g, p.node),
                "output %d is fetched, but the node is cut by a feed of another output", p.index);
            return NULL;
        }
    }
    PsimGraph *out = copy_kept(g, keep, new_id, error);
    if (!out)
        return NULL;
    const char *placeholder = psim_graph_intern(out, "Placeholder");
    for (int32_t v = 0; v < nn; v++) {
        if (new_id[v] < 0)
            continue;
        PsimNode *n = psim_graph_node(out, new_id[v]);
        if (fed[v]) {
            n->op = placeholder;
            n->n_inputs = 0;
            n->n_controls = 0;
            n->n_attrs = 0;
            n->n_costs = 0;
            n->flags =
                (n->flags | PSIM_NODE_FED) & ~(uint32_t)(PSIM_NODE_CONSTANT | PSIM_NODE_PARAMETER);
            for (int32_t k = 0; k < n->n_outputs; k++)
                n->outputs[k].value = NULL;
            continue;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0)
                n->inputs[k].node = new_id[n->inputs[k].node];
        for (int32_t k = 0; k < n->n_controls; k++)
            n->controls[k] = new_id[n->controls[k]];
    }
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++) {
        int32_t v = psim_graph_input(g, i);
        if (v >= 0 && v < nn && new_id[v] >= 0)
            psim_graph_input_add(out, new_id[v]);
    }
    for (guint i = 0; i < fed_order->len; i++) {
        int32_t v = g_array_index(fed_order, int32_t, i), dup = 0;
        if (!keep[v])
            continue;
        for (int32_t j = 0; j < psim_graph_n_inputs(g); j++)
            dup |= psim_graph_input(g, j) == v;
        if (!dup)
            psim_graph_input_add(out, new_id[v]);
    }
    for (guint i = 0; i < outs->len; i++) {
        PsimPort p = g_array_index(outs, PsimPort, i);
        psim_graph_output_add(out, (PsimPort){new_id[p.node], p.index});
    }
    if (!psim_graph_finalize(out, error)) {
        psim_graph_free(out);
        return NULL;
    }
    /* A fed constant (an initializer given a value at run time): what was computed from its old
     * value, and flagged constant for it, is neither any more. The executor would otherwise
     * evaluate those nodes once, with the first run's feed. */
    gboolean fed_constant = FALSE;
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *src = psim_graph_node(g, v);
        gboolean valued = src->n_outputs > 0 && src->outputs[0].value;
        fed_constant |= fed[v] && keep[v] && ((src->flags & (PSIM_NODE_CONSTANT | PSIM_NODE_PARAMETER)) || valued);
    }
    if (fed_constant) {
        g_autofree int32_t *order = psim_graph_topo_order(out, error);
        if (!order) {
            psim_graph_free(out);
            return NULL;
        }
        int32_t on = psim_graph_n_nodes(out);
        g_autofree guint8 *tainted = g_new0(guint8, on ? on : 1);
        for (int32_t i = 0; i < on; i++) {
            PsimNode *n = psim_graph_node(out, order[i]);
            if (n->flags & PSIM_NODE_FED) {
                tainted[n->id] = 1;
                continue;
            }
            for (int32_t k = 0; k < n->n_inputs && !tainted[n->id]; k++)
                tainted[n->id] = n->inputs[k].node >= 0 && tainted[n->inputs[k].node];
            if (!tainted[n->id])
                continue;
            n->flags &= ~(uint32_t)PSIM_NODE_CONSTANT;
            for (int32_t k = 0; k < n->n_outputs; k++)
                n->outputs[k].value = NULL;
        }
    }
    return out;
}

/* ---- CSE ---- */

/* Keys are binary strings: fixed-width numbers and length-prefixed strings (no printf: CSE
 * runs over million-node graphs). */
static void put_i64(GString *k, int64_t v)
{
    g_string_append_len(k, (const char *)&v, sizeof v);
}

static void put_f64(GString *k, double v)
{
    g_string_append_len(k, (const char *)&v, sizeof v);
}

static void key_str(GString *k, const char *s)
{
    if (!s) {
        put_i64(k, -1);
        return;
    }
    size_t len = strlen(s);
    put_i64(k, (int64_t)len);
    g_string_append_len(k, s, (gssize)len);
}

static void key_dims(GString *k, int32_t rank, const int64_t *dims)
{
    put_i64(k, rank);
    for (int32_t i = 0; i < rank; i++)
        put_i64(k, dims[i]);
}

static void key_tensor(GString *k, const PsimTensor *t)
{
    if (!t) {
        put_i64(k, -1);
        return;
    }
    put_i64(k, t->dtype);
    key_dims(k, t->rank, t->dims);
    if (t->device >= 0 || !t->data) {
        put_i64(k, (int64_t)(intptr_t)t); /* device data: identity only */
        return;
    }
    if (t->dtype != PSIM_DTYPE_STRING && t->nbytes <= 64) {
        put_i64(k, (int64_t)t->nbytes);
        g_string_append_len(k, t->data, (gssize)t->nbytes);
        return;
    }
    g_autoptr(GChecksum) cs = g_checksum_new(G_CHECKSUM_SHA256);
    if (t->dtype == PSIM_DTYPE_STRING) {
        char *const *s = t->data;
        for (int64_t i = 0; i < t->n_elems; i++) {
            const char *e = s[i] ? s[i] : "";
            guint64 len = strlen(e);
            g_checksum_update(cs, (const guchar *)&len, sizeof len);
            g_checksum_update(cs, (const guchar *)e, (gssize)len);
        }
    } else {
        g_checksum_update(cs, t->data, (gssize)t->nbytes);
    }
    key_str(k, g_checksum_get_string(cs));
}

static void key_attr(GString *k, const PsimAttr *a)
{
    key_str(k, a->name);
    put_i64(k, a->type);
    put_i64(k, a->n);
    int32_t n = MAX(a->n, 0);
    switch (a->type) {
    case PSIM_ATTR_INT:
        put_i64(k, a->v.i);
        break;
    case PSIM_ATTR_FLOAT:
        put_f64(k, a->v.f);
        break;
    case PSIM_ATTR_STRING:
        key_str(k, a->v.s);
        break;
    case PSIM_ATTR_BOOL:
        put_i64(k, a->v.b != 0);
        break;
    case PSIM_ATTR_DTYPE:
        put_i64(k, a->v.dt);
        break;
    case PSIM_ATTR_SHAPE:
        key_dims(k, a->v.shape.rank, a->v.shape.dims);
        break;
    case PSIM_ATTR_TENSOR:
        key_tensor(k, a->v.t);
        break;
    case PSIM_ATTR_INTS:
        for (int32_t i = 0; i < n; i++)
            put_i64(k, a->v.ints[i]);
        break;
    case PSIM_ATTR_FLOATS:
        for (int32_t i = 0; i < n; i++)
            put_f64(k, a->v.floats[i]);
        break;
    case PSIM_ATTR_STRINGS:
        for (int32_t i = 0; i < n; i++)
            key_str(k, a->v.strs[i]);
        break;
    case PSIM_ATTR_BOOLS:
        for (int32_t i = 0; i < n; i++)
            put_i64(k, a->v.bools[i] != 0);
        break;
    case PSIM_ATTR_DTYPES:
        for (int32_t i = 0; i < n; i++)
            put_i64(k, a->v.dts[i]);
        break;
    case PSIM_ATTR_SHAPES:
        for (int32_t i = 0; i < n; i++)
            key_dims(k, a->v.shapes[i].rank, a->v.shapes[i].dims);
        break;
    case PSIM_ATTR_TENSORS:
        for (int32_t i = 0; i < n; i++)
            key_tensor(k, a->v.ts[i]);
        break;
    }
}

static int cmp_attr(const void *a, const void *b)
{
    return strcmp((*(const PsimAttr *const *)a)->name, (*(const PsimAttr *const *)b)->name);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_cost(const void *a, const void *b)
{
    return strcmp(((const PsimCostAnn *)a)->device, ((const PsimCostAnn *)b)->device);
}

/* Whether v may be merged with an equal node: pure, registered, not an input, a feed, an
 * initializer, stateful (variables, random) or abstract (Task). */
static gboolean mergeable(const PsimNode *v)
{
    const PsimOpDef *d = psim__op_for_node(v);
    if (!d || (d->flags & (PSIM_OP_STATEFUL | PSIM_OP_ABSTRACT)) || v->n_outputs == 0 ||
        (v->flags & (PSIM_NODE_FED | PSIM_NODE_PARAMETER)))
        return FALSE;
    if ((d->flags & PSIM_OP_SOURCE) && strcmp(v->op, "Const") && strcmp(v->op, "Constant"))
        return FALSE;
    return TRUE;
}

/* The value-numbering key of v: op, domain, devices, inputs by representative, control
 * inputs as a set, attrs by name, declared outputs and cost annotations. k is reused. */
static GBytes *node_key(GString *k, const PsimNode *v, const int32_t *rep)
{
    g_string_truncate(k, 0);
    key_str(k, v->op);
    key_str(k, v->domain);
    key_str(k, v->device);
    key_str(k, v->assigned_device);
    put_i64(k, v->n_inputs);
    for (int32_t i = 0; i < v->n_inputs; i++) {
        PsimPort p = v->inputs[i];
        put_i64(k, ((int64_t)(p.node >= 0 ? rep[p.node] : -1) << 32) | (uint32_t)p.index);
    }
    if (v->n_controls) {
        int32_t *c = g_new(int32_t, v->n_controls);
        for (int32_t i = 0; i < v->n_controls; i++)
            c[i] = rep[v->controls[i]];
        qsort(c, (size_t)v->n_controls, sizeof(int32_t), cmp_i32);
        for (int32_t i = 0; i < v->n_controls; i++)
            if (i == 0 || c[i] != c[i - 1])
                put_i64(k, c[i]);
        g_free(c);
    }
    put_i64(k, -2); /* end of controls */
    if (v->n_attrs) {
        const PsimAttr **a = g_new(const PsimAttr *, v->n_attrs);
        for (int32_t i = 0; i < v->n_attrs; i++)
            a[i] = &v->attrs[i];
        qsort(a, (size_t)v->n_attrs, sizeof(*a), cmp_attr);
        for (int32_t i = 0; i < v->n_attrs; i++)
            key_attr(k, a[i]);
        g_free(a);
    }
    put_i64(k, v->n_attrs);
    put_i64(k, v->n_outputs);
    for (int32_t i = 0; i < v->n_outputs; i++) {
        const PsimOutput *o = &v->outputs[i];
        put_i64(k, o->dtype);
        put_i64(k, (int64_t)o->bytes);
        key_dims(k, o->rank, o->dims);
        if (o->value && !strcmp(v->op, "Const"))
            key_tensor(k, o->value);
    }
    if (v->n_costs) {
        PsimCostAnn *c = g_memdup2(v->costs, sizeof(PsimCostAnn) * (size_t)v->n_costs);
        qsort(c, (size_t)v->n_costs, sizeof(PsimCostAnn), cmp_cost);
        for (int32_t i = 0; i < v->n_costs; i++) {
            key_str(k, c[i].device);
            put_f64(k, c[i].us);
        }
        g_free(c);
    }
    return g_bytes_new(k->str, k->len);
}

PsimGraph *psim_graph_cse(const PsimGraph *g, int32_t *n_merged, GError **error)
{
    int32_t nn = psim_graph_n_nodes(g), merged = 0;
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    if (!order)
        return NULL;
    g_autofree int32_t *rep = g_new(int32_t, nn ? nn : 1);
    g_autofree guint8 *keep = g_new0(guint8, nn ? nn : 1);
    g_autofree int32_t *new_id = g_new(int32_t, nn ? nn : 1);
    g_autoptr(GHashTable) seen =
        g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, NULL);
    g_autoptr(GString) buf = g_string_sized_new(256);
    for (int32_t i = 0; i < nn; i++) {
        int32_t v = order[i];
        const PsimNode *n = psim_graph_node(g, v);
        rep[v] = v;
        keep[v] = 1;
        if (!mergeable(n))
            continue;
        GBytes *key = node_key(buf, n, rep);
        gpointer hit;
        if (g_hash_table_lookup_extended(seen, key, NULL, &hit)) {
            rep[v] = GPOINTER_TO_INT(hit);
            keep[v] = 0;
            merged++;
            g_bytes_unref(key);
        } else {
            g_hash_table_insert(seen, key, GINT_TO_POINTER(v));
        }
    }
    PsimGraph *out = copy_kept(g, keep, new_id, error);
    if (!out)
        return NULL;
    for (int32_t v = 0; v < nn; v++) {
        if (new_id[v] < 0)
            continue;
        PsimNode *n = psim_graph_node(out, new_id[v]);
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0)
                n->inputs[k].node = new_id[rep[n->inputs[k].node]];
        /* Controls may collapse onto one representative: rebuild them as a set. */
        int32_t nc = n->n_controls;
        int32_t *old = g_memdup2(n->controls, sizeof(int32_t) * (size_t)(nc ? nc : 1));
        n->n_controls = 0;
        n->controls = NULL;
        for (int32_t k = 0; k < nc; k++)
            psim_graph_node_control_add(out, n, new_id[rep[old[k]]]);
        g_free(old);
    }
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++)
        psim_graph_input_add(out, new_id[rep[psim_graph_input(g, i)]]);
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort p = psim_graph_output(g, i);
        psim_graph_output_add(out, (PsimPort){new_id[rep[p.node]], p.index});
    }
    if (!psim_graph_finalize(out, error)) {
        psim_graph_free(out);
        return NULL;
    }
    if (n_merged)
        *n_merged = merged;
    return out;
}
