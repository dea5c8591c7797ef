/* Timelines as Chrome Trace Event JSON (Perfetto, chrome://tracing): writer and reader. */
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/timeline.h"

static void jstr(GString *s, const char *v)
{
    g_string_append_c(s, '"');
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            g_string_append_c(s, '\\'), g_string_append_c(s, (char)*p);
        else if (*p < 0x20)
            g_string_append_printf(s, "\\u%04x", *p);
        else
            g_string_append_c(s, (char)*p);
    }
    g_string_append_c(s, '"');
}

static void jnum(GString *s, double v)
{
    char buf[40];
    if (!isfinite(v))
        v = 0;
    g_ascii_formatd(buf, sizeof buf, "%.17g", v);
    /* Shorter when exact: most times are round numbers of microseconds. */
    char short_buf[40];
    g_ascii_formatd(short_buf, sizeof short_buf, "%.6f", v);
    char *end = short_buf + strlen(short_buf) - 1;
    while (*end == '0')
        *end-- = '\0';
    if (*end == '.')
        *end = '\0';
    g_string_append(s, g_ascii_strtod(short_buf, NULL) == v ? short_buf : buf);
}

/* Link tracks are numbered after the streams: 1000 + peer device. */
#define LINK_TID 1000

static gint cmp_pair(gconstpointer a, gconstpointer b)
{
    gint64 x = *(const gint64 *)a, y = *(const gint64 *)b;
    return x < y ? -1 : x > y;
}

char *psim_timeline_to_chrome(const PsimTimeline *t, gsize *len)
{
    GString *s = g_string_sized_new(256 + 160 * (t->ops->len + 2 * t->xfers->len));
    g_string_append(s, "{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"placesim\": {\"graph\": ");
    jstr(s, t->graph);
    g_string_append(s, ", \"kind\": ");
    jstr(s, t->kind);
    g_string_append(s, ", \"step_time_us\": ");
    jnum(s, t->step_time_us);
    g_string_append(s, ", \"critical_path_us\": ");
    jnum(s, t->critical_path_us);
    g_string_append(s, ", \"devices\": [");
    for (int32_t d = 0; d < t->n_devices; d++) {
        if (d)
            g_string_append(s, ", ");
        jstr(s, t->devices[d]);
    }
    g_string_append(s, "], \"peak_memory_bytes\": [");
    for (int32_t d = 0; d < t->n_devices; d++)
        g_string_append_printf(s, "%s%" G_GUINT64_FORMAT, d ? ", " : "", t->peak_memory[d]);
    g_string_append(s, "]}},\n\"traceEvents\": [\n");
    gboolean first = TRUE;
#define SEP() (first ? (first = FALSE, "") : ",\n")
    /* Track names: processes are devices; threads are streams and links. */
    g_autofree uint32_t *streams = g_new0(uint32_t, t->n_devices + 1);
    for (guint i = 0; i < t->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        if (o->device >= 0 && o->device < t->n_devices && o->stream >= 0 && o->stream < 32)
            streams[o->device] |= 1u << o->stream;
    }
    /* The pairs that carry transfers, once each, sorted by (src, dst) and by (dst, src): not an
     * nd x nd table, which thousands of devices would not fit. */
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
    g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(gint64));
    g_autoptr(GArray) in = g_array_new(FALSE, FALSE, sizeof(gint64));
    for (guint i = 0; i < t->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        if (x->src < 0 || x->dst < 0 || x->src >= t->n_devices || x->dst >= t->n_devices)
            continue;
        gint64 k = ((gint64)x->src << 32) | x->dst, r = ((gint64)x->dst << 32) | x->src;
        if (g_hash_table_contains(seen, &k))
            continue;
        g_hash_table_add(seen, g_memdup2(&k, sizeof k));
        g_array_append_val(out, k);
        g_array_append_val(in, r);
    }
    g_array_sort(out, cmp_pair);
    g_array_sort(in, cmp_pair);
    guint io = 0, ii = 0;
    for (int32_t d = 0; d < t->n_devices; d++) {
        g_string_append_printf(s, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": ", SEP(), d);
        jstr(s, t->devices[d]);
        g_string_append(s, "}}");
        g_string_append_printf(s, "%s{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, \"args\": {\"sort_index\": %d}}", SEP(), d, d);
        for (int k = 0; k < 32; k++)
            if (streams[d] >> k & 1u)
                g_string_append_printf(s, "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"stream %d\"}}", SEP(), d, k, k);
        /* Peers in increasing order, "to" before "from" for each. */
        for (;;) {
            gint64 ko = io < out->len ? g_array_index(out, gint64, io) : -1;
            gint64 ki = ii < in->len ? g_array_index(in, gint64, ii) : -1;
            gboolean to = ko >= 0 && (ko >> 32) == d, from = ki >= 0 && (ki >> 32) == d;
            if (!to && !from)
                break;
            int32_t eo = to ? (int32_t)(ko & 0xffffffff) : INT32_MAX;
            int32_t ei = from ? (int32_t)(ki & 0xffffffff) : INT32_MAX;
            int32_t e = MIN(eo, ei);
            if (eo == e) {
                io++;
                g_string_append_printf(s, "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", SEP(), d, LINK_TID + e);
                g_autofree char *nm = g_strdup_printf("to %s", t->devices[e]);
                jstr(s, nm);
                g_string_append(s, "}}");
            }
            if (ei == e) {
                ii++;
                g_string_append_printf(s, "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", SEP(), d, LINK_TID + t->n_devices + e);
                g_autofree char *nm = g_strdup_printf("from %s", t->devices[e]);
                jstr(s, nm);
                g_string_append(s, "}}");
            }
        }
    }
    for (guint i = 0; i < t->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        g_string_append_printf(s, "%s{\"ph\": \"X\", \"cat\": \"op\", \"name\": ", SEP());
        jstr(s, o->name);
        g_string_append_printf(s, ", \"pid\": %d, \"tid\": %d, \"ts\": ", o->device, o->stream);
        jnum(s, o->start);
        g_string_append(s, ", \"dur\": ");
        jnum(s, o->end - o->start);
        g_string_append(s, ", \"args\": {\"op\": ");
        jstr(s, o->op);
        g_string_append_printf(s, ", \"node\": %d", o->node);
        if (o->cost_source) {
            g_string_append(s, ", \"cost_source\": ");
            jstr(s, o->cost_source);
        }
        if (o->db_row >= 0)
            g_string_append_printf(s, ", \"db_row\": %" G_GINT64_FORMAT, o->db_row);
        g_string_append(s, "}}");
    }
    for (guint i = 0; i < t->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        for (int side = 0; side < 2; side++) {
            int32_t pid = side ? x->dst : x->src;
            int32_t tid = side ? LINK_TID + t->n_devices + x->src : LINK_TID + x->dst;
            g_string_append_printf(s, "%s{\"ph\": \"X\", \"cat\": \"%s\", \"name\": ", SEP(),
                                   side ? "transfer" : "send");
            jstr(s, x->name);
            g_string_append_printf(s, ", \"pid\": %d, \"tid\": %d, \"ts\": ", pid, tid);
            jnum(s, x->start);
            g_string_append(s, ", \"dur\": ");
            jnum(s, x->end - x->start);
            g_string_append_printf(s, ", \"args\": {\"bytes\": %" G_GUINT64_FORMAT ", \"transfer\": %d, \"src\": %d, \"dst\": %d, \"key\": ",
                                   x->bytes, x->transfer, x->src, x->dst);
            jstr(s, x->key);
            g_string_append(s, "}}");
        }
        /* A flow arrow from the send slice to the receive slice. */
        g_string_append_printf(s, "%s{\"ph\": \"s\", \"cat\": \"flow\", \"name\": \"xfer\", \"id\": %u, \"pid\": %d, \"tid\": %d, \"ts\": ",
                               SEP(), i, x->src, LINK_TID + x->dst);
        jnum(s, x->start);
        g_string_append(s, "}");
        g_string_append_printf(s, "%s{\"ph\": \"f\", \"bp\": \"e\", \"cat\": \"flow\", \"name\": \"xfer\", \"id\": %u, \"pid\": %d, \"tid\": %d, \"ts\": ",
                               SEP(), i, x->dst, LINK_TID + t->n_devices + x->src);
        jnum(s, x->end);
        g_string_append(s, "}");
    }
#undef SEP
    g_string_append(s, "\n]}\n");
    if (len)
        *len = s->len;
    return g_string_free(s, FALSE);
}

gboolean psim_timeline_save_chrome(const PsimTimeline *t, const char *path, GError **error)
{
    gsize len;
    g_autofree char *text = psim_timeline_to_chrome(t, &len);
    g_autoptr(GError) err = NULL;
    if (!g_file_set_contents(path, text, (gssize)len, &err)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot write: %s", path, err->message);
        return FALSE;
    }
    return TRUE;
}

static gboolean fail(GError **error, const char *path, const char *msg)
{
    return psim_json_fail(&(PsimJsonAt){path, NULL}, error, "%s", msg);
}

/* One op or transfer event; other events (metadata, flows, other tools' kinds) are skipped. */
static gboolean read_event(PsimTimeline *t, JsonObject *e, guint i, const char *path, GError **error)
{
    g_autofree char *where = g_strdup_printf("traceEvents[%u]", i);
    PsimJsonAt at = {path, where};
    const char *ph = "", *cat = "";
    if (!psim_json_get_string(&at, e, "ph", &ph, error) ||
        !psim_json_get_string(&at, e, "cat", &cat, error))
        return FALSE;
    if (strcmp(ph, "X") || (strcmp(cat, "op") && strcmp(cat, "transfer")))
        return TRUE;
    const char *name = NULL;
    JsonObject *args = NULL;
    int64_t pid = -1, tid = 0;
    double ts = NAN, dur = NAN;
    int32_t nd = t->n_devices;
    if (!psim_json_get_string(&at, e, "name", &name, error) ||
        !psim_json_get_object(&at, e, "args", &args, error) ||
        !psim_json_get_int(&at, e, "pid", 0, nd - 1, &pid, error) ||
        !psim_json_get_int(&at, e, "tid", 0, INT32_MAX, &tid, error) ||
        !psim_json_get_number(&at, e, "ts", -1e18, 1e18, &ts, error) ||
        !psim_json_get_number(&at, e, "dur", 0, PSIM_MAX_US * 1e3, &dur, error))
        return FALSE;
    if (!name || !args || pid < 0 || isnan(ts) || isnan(dur))
        return psim_json_fail(&at, error, "an %s event needs name, pid (a device), ts, dur and args", cat);
    g_autofree char *awhere = g_strdup_printf("traceEvents[%u].args", i);
    PsimJsonAt aat = {path, awhere};
    if (!strcmp(cat, "op")) {
        const char *op = "";
        int64_t node = -1;
        if (!psim_json_get_string(&aat, args, "op", &op, error) ||
            !psim_json_get_int(&aat, args, "node", -1, INT32_MAX, &node, error))
            return FALSE;
        psim_timeline_op_add(t, name, op, (int32_t)node, (int32_t)pid, (int32_t)tid, ts, ts + dur);
        return TRUE;
    }
    const char *key = "";
    int64_t src = -1, dst = -1, xfer = -1, bytes = 0;
    if (!psim_json_get_string(&aat, args, "key", &key, error) ||
        !psim_json_get_int(&aat, args, "src", 0, nd - 1, &src, error) ||
        !psim_json_get_int(&aat, args, "dst", 0, nd - 1, &dst, error) ||
        !psim_json_get_int(&aat, args, "transfer", -1, INT32_MAX, &xfer, error) ||
        !psim_json_get_int(&aat, args, "bytes", 0, PSIM_MAX_BYTES, &bytes, error))
        return FALSE;
    if (src < 0 || dst < 0)
        return psim_json_fail(&at, error, "transfer '%s' has no valid src/dst", name);
    psim_timeline_xfer_add(t, name, key, (int32_t)xfer, (int32_t)src, (int32_t)dst, ts, ts + dur,
                           (uint64_t)bytes);
    return TRUE;
}

static PsimTimeline *timeline_from_root(const char *path, JsonNode *root, GError **error)
{
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
        fail(error, path, "a Chrome trace must be a JSON object with traceEvents");
        return NULL;
    }
    JsonObject *o = json_node_get_object(root);
    JsonArray *ev = NULL;
    JsonObject *od = NULL, *ps = NULL;
    PsimJsonAt at = {path, NULL};
    if (!psim_json_get_array(&at, o, "traceEvents", &ev, error) ||
        !psim_json_get_object(&at, o, "otherData", &od, error) ||
        (od && !psim_json_get_object(&at, od, "placesim", &ps, error)))
        return NULL;
    if (!ev) {
        fail(error, path, "field 'traceEvents' is missing or not a list");
        return NULL;
    }
    if (!ps) {
        fail(error, path, "not a placesim trace (otherData.placesim is missing)");
        return NULL;
    }
    PsimJsonAt pat = {path, "otherData.placesim"};
    JsonArray *da = NULL, *pm = NULL;
    const char *graph = "graph", *kind = "sim";
    double step = 0, crit = 0;
    if (!psim_json_get_array(&pat, ps, "devices", &da, error) ||
        !psim_json_get_array(&pat, ps, "peak_memory_bytes", &pm, error) ||
        !psim_json_get_string(&pat, ps, "graph", &graph, error) ||
        !psim_json_get_string(&pat, ps, "kind", &kind, error) ||
        !psim_json_get_number(&pat, ps, "step_time_us", 0, PSIM_MAX_US * 1e3, &step, error) ||
        !psim_json_get_number(&pat, ps, "critical_path_us", 0, PSIM_MAX_US * 1e3, &crit, error))
        return NULL;
    if (!da) {
        fail(error, path, "otherData.placesim.devices is missing");
        return NULL;
    }
    int32_t nd = (int32_t)MIN(json_array_get_length(da), 1u << 20);
    g_autofree const char **names = g_new0(const char *, nd + 1);
    for (int32_t d = 0; d < nd; d++) {
        names[d] = psim_json_node_string(json_array_get_element(da, (guint)d));
        if (!names[d]) {
            fail(error, path, "otherData.placesim.devices must hold strings");
            return NULL;
        }
    }
    g_autoptr(PsimTimeline) t = psim_timeline_new(graph, kind, nd, names);
    t->step_time_us = step;
    t->critical_path_us = crit;
    for (int32_t d = 0; pm && d < nd && d < (int32_t)json_array_get_length(pm); d++) {
        int64_t b;
        if (!psim_json_node_int(json_array_get_element(pm, (guint)d), &b) || b < 0 ||
            b > PSIM_MAX_BYTES) {
            fail(error, path, "otherData.placesim.peak_memory_bytes must hold byte counts");
            return NULL;
        }
        t->peak_memory[d] = (uint64_t)b;
    }
    for (guint i = 0; i < json_array_get_length(ev); i++) {
        JsonNode *en = json_array_get_element(ev, i);
        if (JSON_NODE_HOLDS_OBJECT(en) &&
            !read_event(t, json_node_get_object(en), i, path, error))
            return NULL;
    }
    return g_steal_pointer(&t);
}

PsimTimeline *psim_timeline_parse_chrome(const char *path, const char *data, gsize len,
                                         GError **error)
{
    g_autoptr(JsonNode) root = psim_json_parse(path, data, len, error);
    return root ? timeline_from_root(path, root, error) : NULL;
}

PsimTimeline *psim_timeline_load_chrome(const char *path, GError **error)
{
    g_autoptr(JsonNode) root = psim_json_load(path, error);
    return root ? timeline_from_root(path, root, error) : NULL;
}
