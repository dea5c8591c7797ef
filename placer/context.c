/* The placement problem: cost table by device class, edges with transfer sizes, link times,
 * and the constraints (device requests, kernels, assigned devices, colocation groups, memory).
 * Every algorithm reads only this, so that they all obey the same constraints. */
#include <stdarg.h>
#include <string.h>

#include "placer/placer-private.h"

void psim_place_options_init(PsimPlaceOptions *o)
{
    memset(o, 0, sizeof *o);
    o->budget_ms = 1000;
    o->seed = 1;
    o->recv_margin_us = -1;
}

/* The cluster's device types, "CPU, GPU", for messages (g_free). */
static char *device_types(const PsimCluster *cl)
{
    GString *s = g_string_new(NULL);
    for (int32_t d = 0; d < psim_cluster_n_devices(cl); d++) {
        const char *t = psim_cluster_device(cl, d)->type;
        g_autofree char *item = g_strdup_printf(", %s,", t);
        g_autofree char *all = g_strdup_printf(", %s,", s->str);
        if (!strstr(all, item))
            g_string_append_printf(s, "%s%s", s->len ? ", " : "", t);
    }
    return g_string_free(s, FALSE);
}

/* "TYPE:N" of a full or short device name (the key's tail after "device:"). */
static const char *short_key(const char *k)
{
    const char *p = strstr(k, "device:");
    return p ? p + 7 : k;
}

/* Devices share a cost class when nothing can tell them apart: same type and rates, no
 * annotation in the graph names one of them specifically, and no cost DB (its rows are per
 * device: the in-situ profile times each device on its own core, and two cores of one host
 * differ; until 2026-11-30 the placers costed every device of a class as its first, so that
 * their estimates and `placesim sim`'s differed). */
static void cost_classes(PsimPlaceCtx *c)
{
    const PsimGraph *g = c->g;
    g_autoptr(GHashTable) keys = g_hash_table_new(g_str_hash, g_str_equal);
    for (int32_t v = 0; v < c->n; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        for (int32_t k = 0; k < nd->n_costs; k++)
            g_hash_table_add(keys, (gpointer)nd->costs[k].device);
    }
    g_autoptr(GHashTable) cls = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    c->cls_of = g_new(int32_t, c->nd);
    c->n_cls = 0;
    for (int32_t d = 0; d < c->nd; d++) {
        const PsimDevice *dev = psim_cluster_device(c->cluster, d);
        gboolean named = FALSE;
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, keys);
        while (!named && g_hash_table_iter_next(&it, &k, NULL))
            named = !strcmp(k, dev->name) || !strcmp(short_key(k), dev->short_name);
        if (c->model && psim_cost_model_has_db(c->model))
            named = TRUE;
        char *key = named ? g_strdup_printf("#%d", d)
                          : g_strdup_printf("%s|%s|%.17g|%.17g|%.17g|%s", dev->type, dev->cls ? dev->cls->type : "",
                                            dev->peak_gflops, dev->mem_bw_GBps, dev->launch_us,
                                            dev->description ? dev->description : "");
        gpointer found;
        if (g_hash_table_lookup_extended(cls, key, NULL, &found)) {
            c->cls_of[d] = GPOINTER_TO_INT(found);
            g_free(key);
        } else {
            c->cls_of[d] = c->n_cls;
            g_hash_table_insert(cls, key, GINT_TO_POINTER(c->n_cls));
            c->n_cls++;
        }
    }
    int32_t *rep = g_new(int32_t, c->n_cls);
    for (int32_t d = c->nd - 1; d >= 0; d--)
        rep[c->cls_of[d]] = d;
    c->cost = g_new(double, (size_t)c->n * c->n_cls + 1);
    for (int32_t v = 0; v < c->n; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        for (int32_t k = 0; k < c->n_cls; k++)
            c->cost[(size_t)v * c->n_cls + k] = psim_cost_node(c->model, g, nd, rep[k], NULL);
    }
    g_free(rep);
}

static uint64_t wire_bytes(const PsimPlaceCtx *c, const PsimOutput *o)
{
    if (c->opt.compress && o->dtype == PSIM_DTYPE_FLOAT32)
        return o->bytes / 2;
    return o->bytes;
}

static void build_edges(PsimPlaceCtx *c)
{
    const PsimGraph *g = c->g;
    int32_t n = c->n;
    int64_t m = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        m += nd->n_inputs + nd->n_controls;
    }
    c->in_off = g_new(int32_t, n + 1);
    c->in_src = g_new(int32_t, m + 1);
    c->in_bytes = g_new(uint64_t, m + 1);
    g_autofree int32_t *slot = g_new(int32_t, n);
    for (int32_t v = 0; v < n; v++)
        slot[v] = -1;
    int32_t e = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        c->in_off[v] = e;
        int32_t first = e;
        for (int32_t k = 0; k < nd->n_inputs + nd->n_controls; k++) {
            int32_t u;
            uint64_t b = 0;
            if (k < nd->n_inputs) {
                u = nd->inputs[k].node;
                if (u < 0)
                    continue;
                b = wire_bytes(c, &psim_graph_node(g, u)->outputs[nd->inputs[k].index]);
            } else {
                u = nd->controls[k - nd->n_inputs];
            }
            if (slot[u] >= first && slot[u] < e && c->in_src[slot[u]] == u) {
                if (b > c->in_bytes[slot[u]])
                    c->in_bytes[slot[u]] = b;
                continue;
            }
            slot[u] = e;
            c->in_src[e] = u;
            c->in_bytes[e] = b;
            e++;
        }
    }
    c->in_off[n] = e;
    c->out_off = g_new0(int32_t, n + 1);
    c->out_dst = g_new(int32_t, e + 1);
    c->out_bytes = g_new(uint64_t, e + 1);
    for (int32_t i = 0; i < e; i++)
        c->out_off[c->in_src[i] + 1]++;
    for (int32_t v = 0; v < n; v++)
        c->out_off[v + 1] += c->out_off[v];
    g_autofree int32_t *fill = g_memdup2(c->out_off, sizeof(int32_t) * (n + 1));
    for (int32_t v = 0; v < n; v++)
        for (int32_t i = c->in_off[v]; i < c->in_off[v + 1]; i++) {
            int32_t u = c->in_src[i], j = fill[u]++;
            c->out_dst[j] = v;
            c->out_bytes[j] = c->in_bytes[i];
        }
}

static gboolean build_topo(PsimPlaceCtx *c, GError **error)
{
    int32_t n = c->n, head = 0, tail = 0;
    c->topo = g_new(int32_t, n + 1);
    c->topo_pos = g_new(int32_t, n + 1);
    g_autofree int32_t *deg = g_new(int32_t, n + 1);
    for (int32_t v = 0; v < n; v++) {
        deg[v] = c->in_off[v + 1] - c->in_off[v];
        if (!deg[v])
            c->topo[tail++] = v;
    }
    while (head < tail) {
        int32_t u = c->topo[head++];
        for (int32_t i = c->out_off[u]; i < c->out_off[u + 1]; i++)
            if (--deg[c->out_dst[i]] == 0)
                c->topo[tail++] = c->out_dst[i];
    }
    if (tail != n) {
        for (int32_t v = 0; v < n; v++)
            if (deg[v]) {
                psim_graph_node_error(error, c->g, v, "is on a cycle");
                return FALSE;
            }
    }
    for (int32_t i = 0; i < n; i++)
        c->topo_pos[c->topo[i]] = i;
    return TRUE;
}

static void link_fill(PsimPlaceCtx *c, size_t row, PsimLink l)
{
    c->lat[row] = l.latency_us > 0 ? l.latency_us : 0;
    c->inv_bw[row] = l.bandwidth_GBps > 0 && isfinite(l.bandwidth_GBps) ? 1.0 / (l.bandwidth_GBps * 1e3) : 0;
}

static void build_links(PsimPlaceCtx *c)
{
    int32_t nd = c->nd, n_rows = 1;
    c->link_row = g_new0(int32_t, nd + 1);
    for (int32_t a = 0; a < nd; a++)
        if (psim_cost_link_from_own(c->model, a))
            c->link_row[a] = n_rows++;
    c->lat = g_new0(double, (size_t)n_rows * nd + 1);
    c->inv_bw = g_new0(double, (size_t)n_rows * nd + 1);
    /* Row 0 as the model gives it (bounded) for a pair of devices with no links of their own. */
    PsimLink dflt = psim_cluster_default_link(c->cluster);
    for (int32_t a = 0; a < nd && nd > 1; a++)
        if (!c->link_row[a]) {
            PsimLink l = psim_cost_link(c->model, a, a ? 0 : 1, NULL);
            dflt.latency_us = l.latency_us;
            dflt.bandwidth_GBps = l.bandwidth_GBps;
            break;
        }
    for (int32_t b = 0; b < nd; b++)
        link_fill(c, (size_t)b, dflt);
    int32_t n_default = 0;
    for (int32_t a = 0; a < nd; a++) {
        if (!c->link_row[a]) {
            n_default++;
            continue;
        }
        for (int32_t b = 0; b < nd; b++) {
            size_t k = (size_t)c->link_row[a] * nd + b;
            if (a == b)
                continue;
            PsimLink l = psim_cost_link(c->model, a, b, NULL);
            link_fill(c, k, l);
            if (l.curve) {
                if (!c->curve)
                    c->curve = g_new0(const PsimLinkCurve *, (size_t)n_rows * nd + 1);
                c->curve[k] = l.curve;
            }
            c->mean_lat += c->lat[k];
            c->mean_inv_bw += c->inv_bw[k];
        }
    }
    if (n_default > 0 && nd > 1) {
        c->mean_lat += c->lat[0] * n_default * (nd - 1.0);
        c->mean_inv_bw += c->inv_bw[0] * n_default * (nd - 1.0);
    }
    if (nd > 1) {
        c->mean_lat /= (double)nd * (nd - 1);
        c->mean_inv_bw /= (double)nd * (nd - 1);
    }
}

double psim__xfer_mean_curves(const PsimPlaceCtx *c, uint64_t bytes)
{
    if (c->nd < 2)
        return 0;
    double sum = 0;
    for (int32_t a = 0; a < c->nd; a++)
        for (int32_t b = 0; b < c->nd; b++)
            if (a != b)
                sum += psim__xfer(c, a, b, bytes);
    return sum / ((double)c->nd * (c->nd - 1));
}

/* Ops that must live with the variable they read or write (TF's reference edges). */
static gboolean is_variable(const char *op)
{
    return psim_op_is_variable(op) || !strcmp(op, "VarHandleOp");
}

static gboolean uses_variable(const char *op)
{
    static const char *const ops[] = {"Assign", "AssignAdd", "AssignSub", "ReadVariableOp",
                                      "AssignVariableOp", "AssignAddVariableOp",
                                      "AssignSubVariableOp", "Identity", "ScatterUpdate",
                                      "ResourceGather", "IsVariableInitialized",
                                      "VarIsInitializedOp"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++)
        if (!strcmp(op, ops[i]))
            return TRUE;
    return g_str_has_prefix(op, "Apply") || g_str_has_prefix(op, "ResourceApply") ||
           g_str_has_prefix(op, "SparseApply");
}

static int32_t uf_find(int32_t *par, int32_t v)
{
    while (par[v] != v) {
        par[v] = par[par[v]];
        v = par[v];
    }
    return v;
}

static void uf_union(int32_t *par, int32_t a, int32_t b)
{
    a = uf_find(par, a);
    b = uf_find(par, b);
    if (a != b) {
        if (a < b)
            par[b] = a;
        else
            par[a] = b;
    }
}

static void colocate_class(const PsimPlaceCtx *c, int32_t *par, int32_t v, const char *s)
{
    if (!g_str_has_prefix(s, "loc:@"))
        return;
    const PsimNode *o = psim_graph_node_find(c->g, s + 5);
    if (o)
        uf_union(par, v, o->id);
}

/* Why node v cannot go on device d, for messages. */
static char *why_not(const PsimPlaceCtx *c, int32_t v, int32_t d)
{
    const PsimNode *nd = psim_graph_node(c->g, v);
    const PsimDevice *dev = psim_cluster_device(c->cluster, d);
    if (nd->device && !psim_device_matches(dev, nd->device))
        return g_strdup_printf("it requests device '%s'", nd->device);
    if (!isfinite(psim__cost(c, v, d)))
        return g_strdup_printf("op '%s' has no kernel or cost there", nd->op);
    return g_strdup("it is assigned elsewhere");
}

static gboolean build_constraints(PsimPlaceCtx *c, GError **error)
{
    const PsimGraph *g = c->g;
    int32_t n = c->n, nd = c->nd;
    c->fixed = g_new(int32_t, n);
    c->feas = g_new(int32_t, n);
    g_autofree guint8 *mask = g_new(guint8, nd);
    g_autoptr(GHashTable) ids = g_hash_table_new_full(g_bytes_hash, g_bytes_equal,
                                                      (GDestroyNotify)g_bytes_unref, NULL);
    GByteArray *masks = g_byte_array_new();
    gboolean ok = TRUE;
    for (int32_t v = 0; v < n && ok; v++) {
        const PsimNode *node = psim_graph_node(g, v);
        c->fixed[v] = -1;
        if (node->assigned_device) {
            c->fixed[v] = psim_cluster_device_find(c->cluster, node->assigned_device);
            if (c->fixed[v] < 0) {
                psim_graph_node_error(error, g, v, "assigned device '%s' is not in the cluster",
                           node->assigned_device);
                ok = FALSE;
                break;
            }
        }
        if (!node->device && c->fixed[v] < 0) {
            /* The common case: no request; feasible wherever its class has a finite cost. */
            gboolean all = TRUE;
            for (int32_t k = 0; k < c->n_cls && all; k++)
                all = isfinite(c->cost[(size_t)v * c->n_cls + k]);
            if (all) {
                c->feas[v] = -1;
                continue;
            }
        }
        int32_t n_ok = 0, n_match = 0;
        for (int32_t d = 0; d < nd; d++) {
            const PsimDevice *dev = psim_cluster_device(c->cluster, d);
            gboolean match = psim_device_matches(dev, node->device) && (c->fixed[v] < 0 || c->fixed[v] == d);
            n_match += match;
            mask[d] = match && isfinite(psim__cost(c, v, d));
            n_ok += mask[d];
        }
        if (!n_ok) {
            if (c->fixed[v] >= 0)
                psim_graph_node_error(error, g, v, "op '%s' cannot run on its assigned device '%s'",
                           node->op, node->assigned_device);
            else if (!n_match)
                psim_graph_node_error(error, g, v, "no device in the cluster matches requested device '%s'",
                           node->device);
            else {
                /* Say how to fix it: a kernel comes from a plug-in, a cost from an annotation. */
                g_autofree char *types = device_types(c->cluster);
                if (node->device)
                    psim_graph_node_error(error, g, v,
                               "op '%s' has no kernel or cost on requested device '%s' (device types %s); "
                               "load a plug-in with one with --plugin PATH.so, see docs/ops.md",
                               node->op, node->device, types);
                else
                    psim_graph_node_error(error, g, v,
                               "op '%s' has no kernel or cost on any device of the cluster (device types %s); "
                               "load a plug-in with one with --plugin PATH.so, see docs/ops.md",
                               node->op, types);
            }
            ok = FALSE;
            break;
        }
        if (n_ok == nd) {
            c->feas[v] = -1;
            continue;
        }
        GBytes *key = g_bytes_new(mask, nd);
        gpointer id;
        if (g_hash_table_lookup_extended(ids, key, NULL, &id)) {
            c->feas[v] = GPOINTER_TO_INT(id);
            g_bytes_unref(key);
        } else {
            c->feas[v] = c->n_masks;
            g_hash_table_insert(ids, key, GINT_TO_POINTER(c->n_masks));
            g_byte_array_append(masks, mask, nd);
            c->n_masks++;
        }
    }
    c->masks = g_byte_array_free(masks, FALSE);
    if (!ok)
        return FALSE;

    /* Colocation groups: `_class: loc:@x` attributes and variables with their users. */
    g_autofree int32_t *par = g_new(int32_t, n);
    for (int32_t v = 0; v < n; v++)
        par[v] = v;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *node = psim_graph_node(g, v);
        const PsimAttr *a = psim_node_attr(node, "_class");
        if (a && a->type == PSIM_ATTR_STRING)
            colocate_class(c, par, v, a->v.s);
        else if (a && a->type == PSIM_ATTR_STRINGS)
            for (int32_t k = 0; k < a->n; k++)
                colocate_class(c, par, v, a->v.strs[k]);
        /* A read (Identity) requested on a device of its own is not held to its variable's:
         * TensorFlow's caching_device read, a snapshot where its readers are (its
         * Identity takes the variable's value, not a reference). */
        gboolean own_read = !strcmp(node->op, "Identity") && node->device;
        if (uses_variable(node->op) && !own_read)
            for (int32_t k = 0; k < node->n_inputs; k++)
                if (node->inputs[k].node >= 0 && is_variable(psim_graph_node(g, node->inputs[k].node)->op))
                    uf_union(par, v, node->inputs[k].node);
    }
    c->group = g_new(int32_t, n);
    g_autofree int32_t *size = g_new0(int32_t, n);
    for (int32_t v = 0; v < n; v++)
        size[uf_find(par, v)]++;
    g_autofree int32_t *gid = g_new(int32_t, n);
    c->n_groups = 0;
    for (int32_t v = 0; v < n; v++) {
        int32_t r = uf_find(par, v);
        gid[v] = (r == v && size[v] > 1) ? c->n_groups++ : -1;
    }
    for (int32_t v = 0; v < n; v++)
        c->group[v] = gid[uf_find(par, v)];
    if (!c->n_groups)
        return TRUE;
    /* Each group's feasible devices: the intersection over its members. */
    int32_t ng = c->n_groups;
    g_autofree guint8 *gm = g_new(guint8, (size_t)ng * nd);
    memset(gm, 1, (size_t)ng * nd);
    g_autofree int32_t *gfirst = g_new(int32_t, ng), *gfix = g_new(int32_t, ng);
    for (int32_t k = 0; k < ng; k++)
        gfirst[k] = gfix[k] = -1;
    for (int32_t v = 0; v < n; v++) {
        int32_t k = c->group[v];
        if (k < 0)
            continue;
        if (gfirst[k] < 0)
            gfirst[k] = v;
        gboolean any = FALSE;
        int32_t lost = -1;
        for (int32_t d = 0; d < nd; d++) {
            gboolean f = psim__feasible(c, v, d);
            if (gm[(size_t)k * nd + d] && !f && lost < 0)
                lost = d;
            gm[(size_t)k * nd + d] &= f;
            any |= gm[(size_t)k * nd + d];
        }
        if (!any) {
            g_autofree char *why = why_not(c, v, lost >= 0 ? lost : 0);
            const PsimNode *node = psim_graph_node(g, v);
            psim_graph_node_error(error, g, v,
                       "cannot be colocated with '%s': no device suits the whole group (%s, device '%s' "
                       "refused)",
                       psim_graph_node(g, gfirst[k])->name, why,
                       psim_cluster_device(c->cluster, lost >= 0 ? lost : 0)->name);
            (void)node;
            return FALSE;
        }
    }
    /* Members take the group's mask (appended as new masks). */
    GByteArray *all = g_byte_array_new_take(c->masks, (gsize)c->n_masks * nd);
    int32_t *gmask = g_new(int32_t, ng);
    for (int32_t k = 0; k < ng; k++) {
        gmask[k] = c->n_masks++;
        g_byte_array_append(all, gm + (size_t)k * nd, nd);
    }
    c->masks = g_byte_array_free(all, FALSE);
    for (int32_t v = 0; v < n; v++)
        if (c->group[v] >= 0) {
            c->feas[v] = gmask[c->group[v]];
            if (c->fixed[v] >= 0)
                gfix[c->group[v]] = c->fixed[v];
        }
    for (int32_t v = 0; v < n; v++)
        if (c->group[v] >= 0 && gfix[c->group[v]] >= 0)
            c->fixed[v] = gfix[c->group[v]];
    g_free(gmask);
    return TRUE;
}

static void build_memory(PsimPlaceCtx *c)
{
    int32_t n = c->n, nd = c->nd;
    c->param_bytes = g_new0(uint64_t, n);
    c->out_bytes_total = g_new0(uint64_t, n);
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *node = psim_graph_node(c->g, v);
        uint64_t b = 0;
        for (int32_t k = 0; k < node->n_outputs; k++)
            b += node->outputs[k].bytes;
        if ((node->flags & PSIM_NODE_PARAMETER) || is_variable(node->op))
            c->param_bytes[v] = b;
        else
            c->out_bytes_total[v] = b;
    }
    c->capacity = g_new0(uint64_t, nd);
    for (int32_t d = 0; d < nd; d++) {
        uint64_t cap = psim_cluster_device(c->cluster, d)->memory_bytes;
        if (c->opt.mem_limit && (!cap || c->opt.mem_limit < cap))
            cap = c->opt.mem_limit;
        c->capacity[d] = cap;
    }
}

/* A model that cannot fit under the memory limits, whatever the placement: a node whose
 * inputs, outputs and parameters (held at once while it runs) exceed every device's limit, or
 * parameters beyond all the devices' limits together. INPUT error (exit 2) saying how many bytes
 * are needed and how many the cluster offers. */
static gboolean check_fits(const PsimPlaceCtx *c, GError **error)
{
    uint64_t most = 0, total = 0, params = 0;
    for (int32_t d = 0; d < c->nd; d++) {
        if (!c->capacity[d])
            return TRUE; /* a device without a limit takes anything */
        most = MAX(most, c->capacity[d]);
        total += c->capacity[d];
    }
    for (int32_t v = 0; v < c->n; v++) {
        const PsimNode *node = psim_graph_node(c->g, v);
        uint64_t need = c->param_bytes[v] + c->out_bytes_total[v];
        params += c->param_bytes[v];
        for (int32_t k = 0; k < node->n_inputs; k++) {
            PsimPort q = node->inputs[k];
            gboolean seen = q.node < 0;
            for (int32_t j = 0; j < k && !seen; j++)
                seen = node->inputs[j].node == q.node && node->inputs[j].index == q.index;
            if (!seen)
                need += psim_graph_node(c->g, q.node)->outputs[q.index].bytes;
        }
        if (need > most) {
            psim_graph_node_error(error, c->g, v,
                                  "needs %" G_GUINT64_FORMAT " bytes on one device (its inputs, outputs and "
                                  "parameters at once); the cluster offers at most %" G_GUINT64_FORMAT
                                  " bytes per device",
                                  need, most);
            return FALSE;
        }
    }
    if (params > total) {
        psim_graph_node_error(error, c->g, -1,
                              "the parameters need %" G_GUINT64_FORMAT " bytes; the cluster's %d devices "
                              "offer %" G_GUINT64_FORMAT " bytes in all",
                              params, c->nd, total);
        return FALSE;
    }
    return TRUE;
}

static void build_summaries(PsimPlaceCtx *c)
{
    int32_t n = c->n;
    c->min_cost = g_new(double, n + 1);
    c->mean_cost = g_new(double, n + 1);
    double work = 0;
    g_autofree int32_t *per_cls = g_new0(int32_t, c->n_cls);
    for (int32_t d = 0; d < c->nd; d++)
        per_cls[c->cls_of[d]]++;
    for (int32_t v = 0; v < n; v++) {
        double mn = INFINITY, s = 0;
        int32_t k = 0;
        if (c->feas[v] < 0) {
            for (int32_t j = 0; j < c->n_cls; j++) {
                double w = c->cost[(size_t)v * c->n_cls + j];
                mn = MIN(mn, w);
                s += w * per_cls[j];
            }
            c->min_cost[v] = mn;
            c->mean_cost[v] = s / c->nd;
            work += mn;
            continue;
        }
        for (int32_t d = 0; d < c->nd; d++)
            if (psim__feasible(c, v, d)) {
                double w = psim__cost(c, v, d);
                mn = MIN(mn, w);
                s += w;
                k++;
            }
        c->min_cost[v] = mn;
        c->mean_cost[v] = s / k;
        work += mn;
    }
    g_autofree double *bl = psim__blevel(c);
    double cp = 0;
    for (int32_t v = 0; v < n; v++)
        cp = MAX(cp, bl[v]);
    c->lower_bound = MAX(cp, work / c->nd);
}

PsimPlaceCtx *psim_place_ctx_new(const PsimGraph *g, PsimCostModel *m, const PsimPlaceOptions *o,
                                 GError **error)
{
    g_return_val_if_fail(g && m, NULL);
    PsimPlaceCtx *c = g_new0(PsimPlaceCtx, 1);
    c->g = g;
    c->model = m;
    c->cluster = psim_cost_model_cluster(m);
    if (o)
        c->opt = *o;
    else
        psim_place_options_init(&c->opt);
    c->n = psim_graph_n_nodes(g);
    c->nd = psim_cluster_n_devices(c->cluster);
    if (c->nd <= 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "the cluster has no devices");
        g_free(c);
        return NULL;
    }
    cost_classes(c);
    build_edges(c);
    build_links(c);
    if (!build_topo(c, error) || !build_constraints(c, error)) {
        psim_place_ctx_free(c);
        return NULL;
    }
    build_memory(c);
    if (!check_fits(c, error)) {
        psim_place_ctx_free(c);
        return NULL;
    }
    build_summaries(c);
    return c;
}

/* ---- coarsening: chains (a node with one successor that has one predecessor, both free of
 * colocation groups and with the same constraints) become one node whose cost is the sum. ---- */

PsimPlaceCtx *psim__coarsen(const PsimPlaceCtx *f, int32_t **coarse_of)
{
    int32_t n = f->n, nc = 0;
    int32_t *cid = g_new(int32_t, n + 1);
    for (int32_t i = 0; i < n; i++) {
        int32_t v = f->topo[i];
        int32_t u = f->in_off[v + 1] - f->in_off[v] == 1 ? f->in_src[f->in_off[v]] : -1;
        if (u >= 0 && f->out_off[u + 1] - f->out_off[u] == 1 && f->group[u] < 0 && f->group[v] < 0 &&
            f->feas[u] == f->feas[v] && f->fixed[u] == f->fixed[v])
            cid[v] = cid[u];
        else
            cid[v] = nc++;
    }
    PsimPlaceCtx *c = g_new0(PsimPlaceCtx, 1);
    c->g = NULL;
    c->shared = TRUE;
    c->model = f->model;
    c->cluster = f->cluster;
    c->opt = f->opt;
    c->n = nc;
    c->nd = f->nd;
    c->n_cls = f->n_cls;
    c->cls_of = f->cls_of;
    c->link_row = f->link_row;
    c->lat = f->lat;
    c->inv_bw = f->inv_bw;
    c->curve = f->curve;
    c->mean_lat = f->mean_lat;
    c->mean_inv_bw = f->mean_inv_bw;
    c->masks = f->masks;
    c->n_masks = f->n_masks;
    c->capacity = f->capacity;
    c->cost = g_new0(double, (size_t)nc * c->n_cls + 1);
    c->feas = g_new(int32_t, nc + 1);
    c->fixed = g_new(int32_t, nc + 1);
    c->group = g_new(int32_t, nc + 1);
    c->param_bytes = g_new0(uint64_t, nc + 1);
    c->out_bytes_total = g_new0(uint64_t, nc + 1);
    for (int32_t v = 0; v < n; v++) {
        int32_t k = cid[v];
        for (int32_t j = 0; j < c->n_cls; j++)
            c->cost[(size_t)k * c->n_cls + j] += f->cost[(size_t)v * c->n_cls + j];
        c->feas[k] = f->feas[v];
        c->fixed[k] = f->fixed[v];
        c->group[k] = f->group[v];
        c->param_bytes[k] += f->param_bytes[v];
        c->out_bytes_total[k] += f->out_bytes_total[v];
    }
    /* Edges between chains: from a chain's tail to another chain's head, unique per pair. */
    c->in_off = g_new0(int32_t, nc + 1);
    int64_t m = 0;
    for (int32_t v = 0; v < n; v++)
        for (int32_t i = f->in_off[v]; i < f->in_off[v + 1]; i++)
            if (cid[f->in_src[i]] != cid[v]) {
                c->in_off[cid[v] + 1]++;
                m++;
            }
    for (int32_t k = 0; k < nc; k++)
        c->in_off[k + 1] += c->in_off[k];
    c->in_src = g_new(int32_t, m + 1);
    c->in_bytes = g_new(uint64_t, m + 1);
    g_autofree int32_t *fill = g_memdup2(c->in_off, sizeof(int32_t) * (nc + 1));
    for (int32_t i = 0; i < n; i++) {
        int32_t v = f->topo[i];
        for (int32_t j = f->in_off[v]; j < f->in_off[v + 1]; j++)
            if (cid[f->in_src[j]] != cid[v]) {
                int32_t e = fill[cid[v]]++;
                c->in_src[e] = cid[f->in_src[j]];
                c->in_bytes[e] = f->in_bytes[j];
            }
    }
    c->out_off = g_new0(int32_t, nc + 1);
    c->out_dst = g_new(int32_t, m + 1);
    c->out_bytes = g_new(uint64_t, m + 1);
    for (int64_t i = 0; i < m; i++)
        c->out_off[c->in_src[i] + 1]++;
    for (int32_t k = 0; k < nc; k++)
        c->out_off[k + 1] += c->out_off[k];
    g_free(fill);
    fill = g_memdup2(c->out_off, sizeof(int32_t) * (nc + 1));
    for (int32_t k = 0; k < nc; k++)
        for (int32_t i = c->in_off[k]; i < c->in_off[k + 1]; i++) {
            int32_t e = fill[c->in_src[i]]++;
            c->out_dst[e] = k;
            c->out_bytes[e] = c->in_bytes[i];
        }
    /* Chains are numbered in the order of their heads in a topological order: already one. */
    c->topo = g_new(int32_t, nc + 1);
    c->topo_pos = g_new(int32_t, nc + 1);
    for (int32_t k = 0; k < nc; k++)
        c->topo[k] = c->topo_pos[k] = k;
    c->n_groups = 0;
    build_summaries(c);
    *coarse_of = cid;
    return c;
}

void psim_place_ctx_free(PsimPlaceCtx *c)
{
    if (!c)
        return;
    if (!c->shared) {
        g_free(c->cls_of);
        g_free(c->link_row);
        g_free(c->lat);
        g_free(c->inv_bw);
        g_free(c->curve);
        g_free(c->masks);
        g_free(c->capacity);
    }
    psim_place_ctx_free(c->coarse);
    g_free(c->coarse_of);
    g_free(c->cost);
    g_free(c->min_cost);
    g_free(c->mean_cost);
    g_free(c->in_off);
    g_free(c->in_src);
    g_free(c->in_bytes);
    g_free(c->out_off);
    g_free(c->out_dst);
    g_free(c->out_bytes);
    g_free(c->topo);
    g_free(c->topo_pos);
    g_free(c->feas);
    g_free(c->fixed);
    g_free(c->group);
    g_free(c->param_bytes);
    g_free(c->out_bytes_total);
    g_free(c);
}

double psim_place_ctx_lower_bound(const PsimPlaceCtx *c) { return c->lower_bound; }
