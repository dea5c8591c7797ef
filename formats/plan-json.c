/* Plan JSON ("placesim.plan/1"): the partitioned graph (as placesim graph JSON), devices, per-node
 * device, planned start and priority, per-device order, and the transfers. Written by hand so
 * that save -> load -> save is byte-identical; read through json-glib with every index checked. */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "placesim/plan.h"

#define FORMAT_KEY "placesim.plan/1"

/* From json.c. */
void psim__json_string(GString *s, const char *v);
void psim__json_double(GString *s, double v, gboolean force_point);
PsimGraph *psim__import_json_root(const char *path, JsonNode *root, GError **error);

char *psim_plan_to_json(const PsimPlan *p, gsize *len)
{
    const PsimGraph *g = p->graph;
    int32_t n = psim_graph_n_nodes(g);
    GString *s = g_string_sized_new(4096);
    g_string_append(s, "{\"format\": \"" FORMAT_KEY "\", \"algo\": ");
    psim__json_string(s, p->algo ? p->algo : "");
    g_string_append(s, ", \"makespan_us\": ");
    psim__json_double(s, p->makespan_us, FALSE);
    g_string_append(s, ",\n \"devices\": [");
    for (int32_t d = 0; d < p->n_devices; d++) {
        if (d)
            g_string_append(s, ", ");
        psim__json_string(s, p->devices[d]);
    }
    g_string_append(s, "],\n \"nodes\": [");
    for (int32_t v = 0; v < n; v++) {
        g_string_append(s, v ? ",\n  {\"name\": " : "\n  {\"name\": ");
        psim__json_string(s, psim_graph_node(g, v)->name);
        g_string_append_printf(s, ", \"device\": %d, \"start\": ", p->device_of[v]);
        psim__json_double(s, p->planned_start[v], FALSE);
        g_string_append(s, ", \"priority\": ");
        psim__json_double(s, p->priority[v], FALSE);
        g_string_append_c(s, '}');
    }
    g_string_append(s, "],\n \"order\": [");
    for (int32_t d = 0; d < p->n_devices; d++) {
        g_string_append(s, d ? ",\n  [" : "\n  [");
        for (int32_t i = 0; i < p->n_order[d]; i++) {
            if (i)
                g_string_append(s, ", ");
            psim__json_string(s, psim_graph_node(g, p->order[d][i])->name);
        }
        g_string_append_c(s, ']');
    }
    g_string_append(s, "],\n \"transfers\": [");
    for (int32_t i = 0; i < p->n_transfers; i++) {
        const PsimTransfer *t = &p->transfers[i];
        g_string_append(s, i ? ",\n  {\"send\": " : "\n  {\"send\": ");
        psim__json_string(s, psim_graph_node(g, t->send)->name);
        g_string_append(s, ", \"recv\": ");
        psim__json_string(s, psim_graph_node(g, t->recv)->name);
        g_string_append_printf(s, ", \"src\": %d, \"dst\": %d, \"tensor\": ", t->src, t->dst);
        g_autofree char *ref = NULL;
        if (t->control)
            ref = g_strdup_printf("^%s", psim_graph_node(g, t->port.node)->name);
        else
            ref = g_strdup_printf("%s:%d", psim_graph_node(g, t->port.node)->name, t->port.index);
        psim__json_string(s, ref);
        g_string_append_printf(s, ", \"bytes\": %" G_GUINT64_FORMAT ", \"raw_bytes\": %" G_GUINT64_FORMAT
                               ", \"control\": %s, \"compressed\": %s",
                               t->bytes, t->raw_bytes, t->control ? "true" : "false",
                               t->compressed ? "true" : "false");
        if (t->compressed)
            g_string_append_printf(s, ", \"rounding\": \"%s\"", psim_rounding_name(t->rounding));
        if (t->after >= 0) {
            g_string_append(s, ", \"after\": ");
            psim__json_string(s, psim_graph_node(g, t->after)->name);
        }
        g_string_append(s, ", \"earliest_start\": ");
        psim__json_double(s, t->earliest_start, FALSE);
        g_string_append(s, ", \"priority\": ");
        psim__json_double(s, t->priority, FALSE);
        g_string_append(s, ", \"key\": ");
        psim__json_string(s, t->key ? t->key : "");
        g_string_append_c(s, '}');
    }
    g_string_append_c(s, ']');
    if (p->cluster_json) {
        /* Compact, as the reader gives it back: save -> load -> save stays byte-identical. */
        g_autoptr(JsonNode) cn = json_from_string(p->cluster_json, NULL);
        if (cn) {
            g_autofree char *cj = json_to_string(cn, FALSE);
            g_string_append(s, ",\n \"cluster\": ");
            g_string_append(s, cj);
        }
    }
    g_string_append(s, ",\n \"graph\": ");
    gsize glen = 0;
    g_autofree char *gj = psim_export_json(g, &glen);
    while (glen && (gj[glen - 1] == '\n' || gj[glen - 1] == ' '))
        glen--;
    g_string_append_len(s, gj, (gssize)glen);
    g_string_append(s, "}\n");
    if (len)
        *len = s->len;
    return g_string_free(s, FALSE);
}

gboolean psim_plan_save(const PsimPlan *p, const char *path, GError **error)
{
    gsize len;
    g_autofree char *s = psim_plan_to_json(p, &len);
    g_autoptr(GError) err = NULL;
    if (!g_file_set_contents(path, s, (gssize)len, &err)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s", path, err->message);
        return FALSE;
    }
    return TRUE;
}

/* ---- reader ---- */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        psim__error_file(error, path, __VA_ARGS__);                                                \
        goto fail;                                                                                 \
    } while (0)

static gboolean get_num(JsonNode *n, double *out)
{
    if (!n || !JSON_NODE_HOLDS_VALUE(n))
        return FALSE;
    GType t = json_node_get_value_type(n);
    if (t == G_TYPE_INT64)
        *out = (double)json_node_get_int(n);
    else if (t == G_TYPE_DOUBLE)
        *out = json_node_get_double(n);
    else if (t == G_TYPE_STRING) {
        const char *s = json_node_get_string(n);
        if (!strcmp(s, "inf"))
            *out = INFINITY;
        else if (!strcmp(s, "-inf"))
            *out = -INFINITY;
        else if (!strcmp(s, "nan"))
            *out = NAN;
        else
            return FALSE;
    } else
        return FALSE;
    return TRUE;
}

static gboolean get_int(JsonNode *n, int64_t lo, int64_t hi, int64_t *out)
{
    if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64)
        return FALSE;
    *out = json_node_get_int(n);
    return *out >= lo && *out <= hi;
}

static const char *get_str(JsonObject *o, const char *m)
{
    JsonNode *n = json_object_get_member(o, m);
    if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
        return NULL;
    return json_node_get_string(n);
}

static JsonArray *get_array(JsonObject *o, const char *m)
{
    JsonNode *n = json_object_get_member(o, m);
    return n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
}

static PsimPlan *plan_from_root(const char *path, JsonNode *root, GError **error)
{
    PsimPlan *p = NULL;
    char **devs = NULL;
    PsimJsonAt at = {path, NULL};
    if (!JSON_NODE_HOLDS_OBJECT(root))
        FAIL("the top level must be a JSON object");
    JsonObject *o = json_node_get_object(root);
    const char *fmt = NULL, *algo = "";
    if (!psim_json_get_string(&at, o, "format", &fmt, error) ||
        !psim_json_get_string(&at, o, "algo", &algo, error))
        goto fail;
    if (!fmt || strcmp(fmt, FORMAT_KEY))
        FAIL("field 'format': expected \"" FORMAT_KEY "\"");
    JsonNode *gn = json_object_get_member(o, "graph");
    if (!gn || !JSON_NODE_HOLDS_OBJECT(gn))
        FAIL("field 'graph' is missing or not an object");
    JsonArray *da = get_array(o, "devices"), *na = get_array(o, "nodes"), *oa = get_array(o, "order"),
              *ta = get_array(o, "transfers");
    if (!da || !na || !oa || !ta)
        FAIL("fields 'devices', 'nodes', 'order' and 'transfers' must be lists");
    guint nd = json_array_get_length(da);
    if (nd == 0 || nd > 1u << 20)
        FAIL("field 'devices': expected 1 to 2^20 devices, found %u", nd);
    devs = g_new0(char *, nd + 1);
    for (guint d = 0; d < nd; d++) {
        JsonNode *e = json_array_get_element(da, d);
        if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_STRING)
            FAIL("devices[%u] is not a string", d);
        devs[d] = g_strdup(json_node_get_string(e));
    }
    {
        PsimGraph *g = psim__import_json_root(path, gn, error);
        if (!g)
            goto fail;
        p = psim_plan_new(g, (int32_t)nd, (const char *const *)devs);
    }
    int32_t n = psim_graph_n_nodes(p->graph);
    p->algo = g_strdup(algo);
    if (!get_num(json_object_get_member(o, "makespan_us"), &p->makespan_us))
        FAIL("field 'makespan_us' must be a number");
    if (json_array_get_length(na) != (guint)n)
        FAIL("field 'nodes' lists %u nodes, the graph has %d", json_array_get_length(na), n);
    for (int32_t v = 0; v < n; v++) {
        JsonNode *e = json_array_get_element(na, (guint)v);
        JsonObject *no = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
        const char *nm = no ? get_str(no, "name") : NULL;
        if (!nm || strcmp(nm, psim_graph_node(p->graph, v)->name))
            FAIL("nodes[%d]: expected node '%s'", v, psim_graph_node(p->graph, v)->name);
        int64_t d;
        if (!get_int(json_object_get_member(no, "device"), 0, (int64_t)nd - 1, &d))
            FAIL("node '%s': field 'device' must be a device index below %u", nm, nd);
        p->device_of[v] = (int32_t)d;
        if (!get_num(json_object_get_member(no, "start"), &p->planned_start[v]) ||
            !get_num(json_object_get_member(no, "priority"), &p->priority[v]))
            FAIL("node '%s': fields 'start' and 'priority' must be numbers", nm);
    }
    if (json_array_get_length(oa) != nd)
        FAIL("field 'order' must hold one list per device (%u)", nd);
    {
        g_autofree guint8 *seen = g_new0(guint8, n + 1);
        for (guint d = 0; d < nd; d++) {
            JsonNode *e = json_array_get_element(oa, d);
            if (!JSON_NODE_HOLDS_ARRAY(e))
                FAIL("order[%u] is not a list", d);
            JsonArray *l = json_node_get_array(e);
            guint k = json_array_get_length(l);
            if (k > (guint)n)
                FAIL("order[%u] lists more nodes than the graph has", d);
            p->order[d] = g_new(int32_t, k + 1);
            for (guint i = 0; i < k; i++) {
                const char *nm = psim_json_node_string(json_array_get_element(l, i));
                const PsimNode *v = nm ? psim_graph_node_find(p->graph, nm) : NULL;
                if (!v)
                    FAIL("order[%u][%u] names no node", d, i);
                if (p->device_of[v->id] != (int32_t)d || seen[v->id])
                    FAIL("node '%s': listed in the order of device %u, but it is on device %d or listed twice",
                         nm, d, p->device_of[v->id]);
                seen[v->id] = 1;
                p->order[d][p->n_order[d]++] = v->id;
            }
        }
        for (int32_t v = 0; v < n; v++)
            if (!seen[v])
                FAIL("node '%s': missing from the order of its device", psim_graph_node(p->graph, v)->name);
    }
    guint nt = json_array_get_length(ta);
    if (nt > (guint)n)
        FAIL("field 'transfers' lists more transfers than the graph has nodes");
    p->n_transfers = (int32_t)nt;
    p->transfers = g_new0(PsimTransfer, nt + 1);
    for (guint i = 0; i < nt; i++) {
        PsimTransfer *t = &p->transfers[i];
        JsonNode *e = json_array_get_element(ta, i);
        JsonObject *to = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
        if (!to)
            FAIL("transfers[%u] is not an object", i);
        g_autofree char *where = g_strdup_printf("transfers[%u]", i);
        PsimJsonAt tat = {path, where};
        const char *sn = NULL, *rn = NULL, *ten = NULL, *key = NULL;
        if (!psim_json_get_string(&tat, to, "send", &sn, error) ||
            !psim_json_get_string(&tat, to, "recv", &rn, error) ||
            !psim_json_get_string(&tat, to, "tensor", &ten, error) ||
            !psim_json_get_string(&tat, to, "key", &key, error))
            goto fail;
        const PsimNode *sv = sn ? psim_graph_node_find(p->graph, sn) : NULL;
        const PsimNode *rv = rn ? psim_graph_node_find(p->graph, rn) : NULL;
        if (!sv || strcmp(sv->op, "Send") || !rv || strcmp(rv->op, "Recv"))
            FAIL("transfers[%u]: 'send' and 'recv' must name a Send and a Recv node", i);
        if (p->transfer_of_recv[rv->id] >= 0)
            FAIL("transfers[%u]: Recv '%s' belongs to two transfers", i, rn);
        t->send = sv->id;
        t->recv = rv->id;
        p->transfer_of_recv[rv->id] = (int32_t)i;
        int64_t a, b;
        if (!get_int(json_object_get_member(to, "src"), 0, (int64_t)nd - 1, &a) ||
            !get_int(json_object_get_member(to, "dst"), 0, (int64_t)nd - 1, &b))
            FAIL("transfers[%u]: 'src' and 'dst' must be device indices", i);
        t->src = (int32_t)a;
        t->dst = (int32_t)b;
        g_autofree char *pname = NULL;
        int32_t idx;
        gboolean control;
        const PsimNode *pv;
        if (!ten || !psim_ref_parse(ten, &pname, &idx, &control) ||
            !(pv = psim_graph_node_find(p->graph, pname)) || idx < 0 ||
            (!control && idx >= pv->n_outputs))
            FAIL("transfers[%u]: field 'tensor' names no tensor of the graph", i);
        t->port = (PsimPort){pv->id, control ? 0 : idx};
        int64_t bytes = -1, raw = -1;
        if (!psim_json_get_int(&tat, to, "bytes", 0, PSIM_MAX_BYTES, &bytes, error) ||
            !psim_json_get_int(&tat, to, "raw_bytes", 0, PSIM_MAX_BYTES, &raw, error))
            goto fail;
        if (bytes < 0 || raw < 0)
            FAIL("transfers[%u]: 'bytes' and 'raw_bytes' must be non-negative integers", i);
        t->bytes = (uint64_t)bytes;
        t->raw_bytes = (uint64_t)raw;
        gboolean tcontrol = FALSE, compressed = FALSE;
        if (!psim_json_get_bool(&tat, to, "control", &tcontrol, error) ||
            !psim_json_get_bool(&tat, to, "compressed", &compressed, error))
            goto fail;
        t->control = tcontrol;
        t->compressed = compressed;
        /* Plans from before the choice existed were truncated. */
        const char *rounding = NULL;
        if (!psim_json_get_string(&tat, to, "rounding", &rounding, error))
            goto fail;
        if (rounding && !psim_rounding_from_name(rounding, &t->rounding))
            FAIL("transfers[%u]: field 'rounding' must be \"truncate\" or \"rne\"", i);
        if (t->control != control)
            FAIL("transfers[%u]: 'control' disagrees with its tensor '%s'", i, ten);
        if (!get_num(json_object_get_member(to, "earliest_start"), &t->earliest_start) ||
            !get_num(json_object_get_member(to, "priority"), &t->priority))
            FAIL("transfers[%u]: 'earliest_start' and 'priority' must be numbers", i);
        t->key = psim_graph_intern(p->graph, key ? key : "");
        /* The node the Recv waits for; plans from before gates existed have none (their
         * earliest_start, a clock time, is not waited for). */
        const char *after = NULL;
        if (!psim_json_get_string(&tat, to, "after", &after, error))
            goto fail;
        const PsimNode *av = after ? psim_graph_node_find(p->graph, after) : NULL;
        if (after && !av)
            FAIL("transfers[%u]: field 'after' names no node of the graph", i);
        t->after = av ? av->id : -1;
    }
    /* The cluster it was made for, when the plan says (checked where it is used). */
    JsonNode *cn = json_object_get_member(o, "cluster");
    if (cn && !JSON_NODE_HOLDS_NULL(cn)) {
        if (!JSON_NODE_HOLDS_OBJECT(cn))
            FAIL("field 'cluster' must be a cluster object (placesim.cluster/1)");
        p->cluster_json = json_to_string(cn, FALSE);
    }
    /* What the simulator and the executor would refuse is refused as the file is read. */
    if (!psim_plan_check(p, error))
        goto fail;
    g_strfreev(devs);
    return p;
fail:
    g_strfreev(devs);
    psim_plan_free(p);
    return NULL;
}

PsimPlan *psim_plan_from_json(const char *path, const char *data, gsize len, GError **error)
{
    g_autoptr(JsonNode) root = psim_json_parse(path, data, len, error);
    return root ? plan_from_root(path, root, error) : NULL;
}

PsimPlan *psim_plan_load(const char *path, GError **error)
{
    g_autoptr(JsonNode) root = psim_json_load(path, error);
    return root ? plan_from_root(path, root, error) : NULL;
}
