/* Importer for PipeDream profile graphs (msr-fiddle/pipedream profiler output): node lines
 * "NAME -- LayerRepr -- forward_compute_time=MS, backward_compute_time=MS, activation_size=B,
 * parameter_size=B" and edge lines "\tA -- B". Layers become `Task` nodes (inputs become
 * `Placeholder`s) with their measured times kept as cost annotations on device type "GPU";
 * parameters become `Const` parameter nodes feeding their layer. With `training`, the graph is
 * expanded with one backward node per layer, in reverse topological order, and gradient edges. */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <math.h>
#include <string.h>

/* Sizes beyond 2^50 bytes (a petabyte) are not a profile of a real layer. */
#define MAX_BYTES 1125899906842624.0
/* Times in milliseconds: the graph's cost bound (PSIM_MAX_US), so that an export reads back. */
#define MAX_MS (PSIM_MAX_US / 1000.0)
#define COST_DEVICE "GPU"

typedef struct {
    const char *name; /* graph arena */
    const char *repr;
    double fwd_ms, bwd_ms;
    uint64_t act_bytes, param_bytes;
    int32_t n_parts;   /* activation listed per output ("[a; b]"), else 0 */
    int64_t parts[16];
    gboolean input;
    int64_t line;
    int32_t node;  /* forward node id */
    int32_t param; /* parameter node id or -1 */
    GArray *preds; /* layer indices, in file order of the edges */
    GArray *succs;
} Layer;

static const char *find_sep(const char *p, const char *end)
{
    for (; p + 4 <= end; p++)
        if (p[0] == ' ' && p[1] == '-' && p[2] == '-' && p[3] == ' ')
            return p;
    return NULL;
}

static const char *rfind_sep(const char *begin, const char *end)
{
    for (const char *p = end - 4; p >= begin; p--)
        if (p[0] == ' ' && p[1] == '-' && p[2] == '-' && p[3] == ' ')
            return p;
    return NULL;
}

static void trim(const char **b, const char **e)
{
    while (*b < *e && g_ascii_isspace(**b))
        (*b)++;
    while (*e > *b && g_ascii_isspace((*e)[-1]))
        (*e)--;
}

/* Parses "key=val, key=val, ..." into the layer; the four keys are required. */
static gboolean parse_fields(const char *path, int64_t line, const char *name, const char *p,
                             const char *end, Layer *l, GError **error)
{
    static const char *const keys[] = {"forward_compute_time", "backward_compute_time",
                                       "activation_size", "parameter_size"};
    double vals[4];
    gboolean seen[4] = {FALSE, FALSE, FALSE, FALSE};
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *fe = comma ? comma : end, *fb = p;
        trim(&fb, &fe);
        const char *eq = memchr(fb, '=', (size_t)(fe - fb));
        if (!eq) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': expected "
                             "key=value fields after the second ' -- '", line, name);
            return FALSE;
        }
        int k = -1;
        for (int i = 0; i < 4; i++)
            if ((size_t)(eq - fb) == strlen(keys[i]) && memcmp(fb, keys[i], (size_t)(eq - fb)) == 0)
                k = i;
        if (k >= 0) {
            /* Layers with several outputs (LSTMs) list their sizes as "[a; b; c]": the
             * activation is their sum, each part kept in the attr "activation_sizes". */
            const char *vb = eq + 1, *ve = fe;
            gboolean list = k == 2 && ve - vb >= 2 && *vb == '[' && ve[-1] == ']';
            if (list) {
                vb++;
                ve--;
            }
            double sum = 0, max = k < 2 ? MAX_MS : MAX_BYTES;
            int32_t n_parts = 0;
            while (vb <= ve) {
                const char *pe = list ? memchr(vb, ';', (size_t)(ve - vb)) : NULL;
                const char *xb = vb, *xe = pe ? pe : ve;
                trim(&xb, &xe);
                char buf[64], *stop = NULL;
                double v = NAN;
                size_t vl = (size_t)(xe - xb);
                if (vl > 0 && vl < sizeof buf) {
                    memcpy(buf, xb, vl);
                    buf[vl] = '\0';
                    v = g_ascii_strtod(buf, &stop);
                }
                if (!stop || stop == buf || *stop != '\0' || !isfinite(v) || v < 0 || v > max ||
                    n_parts >= (int32_t)G_N_ELEMENTS(l->parts)) {
                    psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': field "
                                     "'%s' must be a number from 0 to %g%s", line, name, keys[k],
                                     max, k == 2 ? " or a list of up to 16 such '[a; b]'" : "");
                    return FALSE;
                }
                if (list)
                    l->parts[n_parts] = (int64_t)v;
                n_parts++;
                sum += v;
                if (!pe)
                    break;
                vb = pe + 1;
            }
            if (sum > max) {
                psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': field '%s' "
                                 "sums to more than %g", line, name, keys[k], max);
                return FALSE;
            }
            if (list)
                l->n_parts = n_parts;
            vals[k] = sum;
            seen[k] = TRUE;
        }
        p = comma ? comma + 1 : end;
    }
    for (int i = 0; i < 4; i++)
        if (!seen[i]) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': field '%s' is "
                             "missing", line, name, keys[i]);
            return FALSE;
        }
    l->fwd_ms = vals[0];
    l->bwd_ms = vals[1];
    l->act_bytes = (uint64_t)vals[2];
    l->param_bytes = (uint64_t)vals[3];
    return TRUE;
}

static gboolean valid_name(const char *b, const char *e)
{
    if (b == e)
        return FALSE;
    for (const char *p = b; p < e; p++)
        if (g_ascii_isspace(*p) || *p == '^' || *p == ':' || *p == '/' || !g_ascii_isprint(*p))
            return FALSE;
    return TRUE;
}

typedef struct {
    const char *path;
    GArray *layers;     /* Layer */
    GHashTable *by_name; /* name -> index + 1 */
    GHashTable *edges;   /* "a\nb" set, to refuse duplicates */
} Parse;

static void parse_clear(Parse *ps)
{
    for (guint i = 0; i < ps->layers->len; i++) {
        Layer *l = &g_array_index(ps->layers, Layer, i);
        g_array_free(l->preds, TRUE);
        g_array_free(l->succs, TRUE);
    }
    g_array_free(ps->layers, TRUE);
    g_hash_table_destroy(ps->by_name);
    g_hash_table_destroy(ps->edges);
}

static gboolean parse_text(Parse *ps, PsimGraph *g, const char *data, gsize len, GError **error)
{
    const char *path = ps->path, *p = data, *end = data + len;
    GArray *edge_lines = g_array_new(FALSE, FALSE, sizeof(const char *) * 3);
    gboolean ok = FALSE;
    int64_t line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *b = p, *e = nl ? nl : end;
        p = nl ? nl + 1 : end;
        line++;
        trim(&b, &e);
        if (b == e)
            continue;
        if (memchr(b, '\0', (size_t)(e - b)) || !g_utf8_validate_len(b, (gsize)(e - b), NULL)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": not UTF-8 text", line);
            goto out;
        }
        const char *s1 = find_sep(b, e), *s2 = s1 ? rfind_sep(s1 + 4, e) : NULL;
        if (!s1) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": expected 'NAME -- Layer -- "
                             "fields' or 'A -- B'", line);
            goto out;
        }
        const char *ne = s1, *nb = b;
        trim(&nb, &ne);
        if (!valid_name(nb, ne)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": bad node name '%.*s'", line,
                             (int)MIN(ne - nb, 64), nb);
            goto out;
        }
        g_autofree char *name = g_strndup(nb, (gsize)(ne - nb));
        if (!s2) {
            /* An edge "A -- B": resolved once every node line is read. */
            const char *db = s1 + 4, *de = e;
            trim(&db, &de);
            if (!valid_name(db, de)) {
                psim__error_file(error, path, "line %" G_GINT64_FORMAT ": bad edge target '%.*s'",
                                 line, (int)MIN(de - db, 64), db);
                goto out;
            }
            const char *rec[3] = {psim_graph_intern(g, name), NULL, (const char *)(intptr_t)line};
            g_autofree char *dst = g_strndup(db, (gsize)(de - db));
            rec[1] = psim_graph_intern(g, dst);
            g_array_append_vals(edge_lines, rec, 1);
            continue;
        }
        if (g_hash_table_contains(ps->by_name, name)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": node '%s': defined twice",
                             line, name);
            goto out;
        }
        Layer l = {.name = psim_graph_intern(g, name), .line = line, .node = -1, .param = -1};
        const char *rb = s1 + 4, *re = s2;
        trim(&rb, &re);
        g_autofree char *repr = g_strndup(rb, (gsize)(re - rb));
        l.repr = psim_graph_intern(g, repr);
        /* PipeDream's profiler names the model's inputs "Input", "Input0", "Input1", ... */
        l.input = g_str_has_prefix(repr, "Input") &&
                  (repr[5] == '\0' || strspn(repr + 5, "0123456789") == strlen(repr + 5));
        if (!parse_fields(path, line, name, s2 + 4, e, &l, error))
            goto out;
        l.preds = g_array_new(FALSE, FALSE, sizeof(int32_t));
        l.succs = g_array_new(FALSE, FALSE, sizeof(int32_t));
        g_array_append_val(ps->layers, l);
        g_hash_table_insert(ps->by_name, (gpointer)l.name, GINT_TO_POINTER(ps->layers->len));
    }
    if (ps->layers->len == 0) {
        psim__error_file(error, path, "no node lines ('NAME -- Layer -- fields')");
        goto out;
    }
    for (guint i = 0; i < edge_lines->len; i++) {
        const char **rec = &g_array_index(edge_lines, const char *, 3 * i);
        int64_t eline = (int64_t)(intptr_t)rec[2];
        int32_t ab = GPOINTER_TO_INT(g_hash_table_lookup(ps->by_name, rec[0])) - 1;
        int32_t bb = GPOINTER_TO_INT(g_hash_table_lookup(ps->by_name, rec[1])) - 1;
        if (ab < 0 || bb < 0) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": edge '%s -- %s' names a "
                             "missing node '%s'", eline, rec[0], rec[1], ab < 0 ? rec[0] : rec[1]);
            goto out;
        }
        char *key = g_strconcat(rec[0], "\n", rec[1], NULL);
        if (!g_hash_table_add(ps->edges, key)) {
            psim__error_file(error, path, "line %" G_GINT64_FORMAT ": edge '%s -- %s' is listed "
                             "twice", eline, rec[0], rec[1]);
            goto out;
        }
        g_array_append_val(g_array_index(ps->layers, Layer, bb).preds, ab);
        g_array_append_val(g_array_index(ps->layers, Layer, ab).succs, bb);
    }
    ok = TRUE;
out:
    g_array_free(edge_lines, TRUE);
    return ok;
}

static gboolean build_forward(Parse *ps, PsimGraph *g, GError **error)
{
    for (guint i = 0; i < ps->layers->len; i++) {
        Layer *l = &g_array_index(ps->layers, Layer, i);
        PsimNode *v = psim_graph_node_add(g, l->name, l->input ? "Placeholder" : "Task", error);
        if (!v)
            return FALSE;
        l->node = v->id;
        psim_graph_node_attr_set_string(g, v, "layer", l->repr);
        if (l->n_parts)
            psim_graph_node_attr_set_ints(g, v, "activation_sizes", l->n_parts, l->parts);
        psim_graph_node_cost_set(g, v, COST_DEVICE, l->fwd_ms * 1000.0);
        psim_graph_node_outputs_set(g, v, 1);
        v->outputs[0].bytes = l->act_bytes;
        if (l->input)
            psim_graph_input_add(g, v->id);
    }
    for (guint i = 0; i < ps->layers->len; i++) {
        Layer *l = &g_array_index(ps->layers, Layer, i);
        PsimNode *v = psim_graph_node(g, l->node);
        if (l->input && l->preds->len) {
            psim__error_node(error, g, v, "an input layer ('%s') has predecessors", l->repr);
            return FALSE;
        }
        for (guint k = 0; k < l->preds->len; k++) {
            const Layer *u = &g_array_index(ps->layers, Layer, g_array_index(l->preds, int32_t, k));
            psim_graph_node_input_add(g, v, (PsimPort){u->node, 0});
        }
        if (l->param_bytes) {
            g_autofree char *pname = g_strconcat(l->name, "/param", NULL);
            PsimNode *pv = psim_graph_node_add(g, pname, "Const", error);
            if (!pv)
                return FALSE;
            v = psim_graph_node(g, l->node);
            pv->flags |= PSIM_NODE_PARAMETER;
            psim_graph_node_outputs_set(g, pv, 1);
            pv->outputs[0].bytes = l->param_bytes;
            l->param = pv->id;
            psim_graph_node_input_add(g, v, (PsimPort){pv->id, 0});
        }
    }
    return TRUE;
}

/* Backward nodes "NAME/backward" in reverse topological order. Output k of a backward node is
 * the gradient with respect to its layer's k-th input (sized as that input's activation); a
 * layer with parameters has one more output, the weight gradient, which becomes a graph output.
 * The backward node of v reads v's forward activation, the gradient from the backward node of
 * each successor, and v's parameters. */
static gboolean build_backward(Parse *ps, PsimGraph *g, GError **error)
{
    int32_t n_fwd = psim_graph_n_nodes(g);
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    if (!order)
        return FALSE;
    g_autofree int32_t *layer_of = g_new(int32_t, n_fwd);
    for (int32_t i = 0; i < n_fwd; i++)
        layer_of[i] = -1;
    for (guint i = 0; i < ps->layers->len; i++)
        layer_of[g_array_index(ps->layers, Layer, i).node] = (int32_t)i;
    g_autofree int32_t *bwd = g_new(int32_t, ps->layers->len);
    for (guint i = 0; i < ps->layers->len; i++)
        bwd[i] = -1;
    for (int32_t oi = n_fwd - 1; oi >= 0; oi--) {
        int32_t li = layer_of[order[oi]];
        if (li < 0)
            continue;
        Layer *l = &g_array_index(ps->layers, Layer, li);
        if (l->input)
            continue;
        g_autofree char *bname = g_strconcat(l->name, "/backward", NULL);
        PsimNode *b = psim_graph_node_add(g, bname, "Task", error);
        if (!b)
            return FALSE;
        bwd[li] = b->id;
        psim_graph_node_attr_set_string(g, b, "layer", l->repr);
        psim_graph_node_attr_set_string(g, b, "forward", l->name);
        psim_graph_node_cost_set(g, b, COST_DEVICE, l->bwd_ms * 1000.0);
        int32_t n_out = (int32_t)l->preds->len + (l->param >= 0);
        psim_graph_node_outputs_set(g, b, MAX(n_out, 1));
        for (guint k = 0; k < l->preds->len; k++) {
            const Layer *u = &g_array_index(ps->layers, Layer, g_array_index(l->preds, int32_t, k));
            b->outputs[k].bytes = u->act_bytes;
        }
        if (l->param >= 0) {
            b->outputs[n_out - 1].bytes = l->param_bytes;
            psim_graph_output_add(g, (PsimPort){b->id, n_out - 1});
        }
        psim_graph_node_input_add(g, b, (PsimPort){l->node, 0});
        for (guint k = 0; k < l->succs->len; k++) {
            int32_t si = g_array_index(l->succs, int32_t, k);
            const Layer *s = &g_array_index(ps->layers, Layer, si);
            int32_t idx = -1;
            for (guint j = 0; j < s->preds->len && idx < 0; j++)
                if (g_array_index(s->preds, int32_t, j) == li)
                    idx = (int32_t)j;
            /* Successors are later in topological order, so their backward nodes exist. */
            g_assert(bwd[si] >= 0 && idx >= 0);
            psim_graph_node_input_add(g, b, (PsimPort){bwd[si], idx});
        }
        if (l->param >= 0)
            psim_graph_node_input_add(g, b, (PsimPort){l->param, 0});
    }
    return TRUE;
}

PsimGraph *psim_import_pipedream(const char *path, const char *data, gsize len,
                                 gboolean training, GError **error)
{
    g_return_val_if_fail(data || len == 0, NULL);
    g_autofree char *base = g_path_get_basename(path ? path : "pipedream");
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
        *dot = '\0';
    g_autoptr(PsimGraph) g = psim_graph_new(base);
    psim_graph_set_source(g, path);
    Parse ps = {.path = path,
                .layers = g_array_new(FALSE, FALSE, sizeof(Layer)),
                .by_name = g_hash_table_new(g_str_hash, g_str_equal),
                .edges = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
    gboolean ok = parse_text(&ps, g, data, len, error) && build_forward(&ps, g, error) &&
                  psim_graph_finalize(g, error);
    if (ok) {
        /* The forward sinks (the loss, or the model's outputs) are the graph's outputs. */
        for (guint i = 0; i < ps.layers->len; i++) {
            const Layer *l = &g_array_index(ps.layers, Layer, i);
            if (!l->succs->len && !l->input)
                psim_graph_output_add(g, (PsimPort){l->node, 0});
        }
        if (training)
            ok = build_backward(&ps, g, error) && psim_graph_finalize(g, error);
    }
    parse_clear(&ps);
    return ok ? g_steal_pointer(&g) : NULL;
}
