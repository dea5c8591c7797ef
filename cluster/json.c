/* Cluster JSON ("placesim.cluster/1"): reading with errors that name the file and the device or
 * field at fault, and writing (the inverse, so a detected machine can be saved and edited). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-glib/json-glib.h>

#include "placesim/cluster.h"
#include "placesim/graph.h"

#define MAX_CORES 65536

static gboolean fail(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean fail(GError **error, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    /* Through psim_json_fail: names echoed from the file lose their line breaks. */
    return psim_json_fail(&(PsimJsonAt){path, NULL}, error, "%s", msg);
}

static gboolean check_keys(JsonObject *o, const char *const *allowed, const char *path,
                           const char *where, GError **error)
{
    g_autoptr(GList) members = json_object_get_members(o);
    for (GList *l = members; l; l = l->next) {
        if (!g_strv_contains(allowed, l->data))
            return fail(error, path, "%s: unknown field '%s'", where, (const char *)l->data);
    }
    return TRUE;
}

static gboolean parse_link(JsonObject *o, PsimLink *link, const char *path, const char *where,
                           GError **error)
{
    static const char *const keys[] = {"src", "dst", "bandwidth_GBps", "latency_us", "independent",
                                       "by_destination", NULL};
    if (!check_keys(o, keys, path, where, error))
        return FALSE;
    PsimJsonAt at = {path, where};
    gboolean indep = link->independent, by_dst = link->by_destination;
    /* A bandwidth of 0 is a link without a bandwidth limit (transfers cost their latency). */
    if (!psim_json_get_number(&at, o, "bandwidth_GBps", 0, PSIM_MAX_RATE, &link->bandwidth_GBps, error) ||
        !psim_json_get_number(&at, o, "latency_us", 0, PSIM_MAX_US, &link->latency_us, error) ||
        !psim_json_get_bool(&at, o, "independent", &indep, error) ||
        !psim_json_get_bool(&at, o, "by_destination", &by_dst, error))
        return FALSE;
    link->independent = indep;
    link->by_destination = by_dst;
    return TRUE;
}

static gboolean parse_device(PsimCluster *c, JsonNode *dn, guint i, const char *path, GError **error)
{
    g_autofree char *where = g_strdup_printf("devices[%u]", i);
    if (!JSON_NODE_HOLDS_OBJECT(dn))
        return fail(error, path, "%s: expected an object", where);
    JsonObject *o = json_node_get_object(dn);
    static const char *const keys[] = {"name", "type", "memory_bytes", "peak_gflops", "mem_bw_GBps",
                                       "launch_us", "cores", "gpu_ordinal", "streams",
                                       "description", "sm_count", "compute_capability", "host",
                                       NULL};
    const char *name = NULL, *type = NULL, *desc = NULL, *cc = NULL, *host = NULL;
    PsimJsonAt at = {path, where};
    if (!psim_json_get_string(&at, o, "name", &name, error))
        return FALSE;
    if (!name)
        return fail(error, path, "%s: missing field 'name'", where);
    g_free(where);
    where = g_strdup_printf("device '%s'", name);
    at.where = where;
    if (!psim_json_get_string(&at, o, "type", &type, error) ||
        !psim_json_get_string(&at, o, "description", &desc, error) ||
        !psim_json_get_string(&at, o, "host", &host, error) ||
        !psim_json_get_string(&at, o, "compute_capability", &cc, error))
        return FALSE;
    if (!check_keys(o, keys, path, where, error))
        return FALSE;
    GError *err = NULL;
    int32_t id = psim_cluster_device_add(c, name, type, &err);
    if (id < 0) {
        fail(error, path, "%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    PsimDevice *d = psim_cluster_device(c, id);
    int64_t mem = 0, ordinal = -1, streams = d->n_streams, sms = 0;
    /* Rates divide costs: 0 would make them infinite, so the smallest is a tiny positive one. */
    if (!psim_json_get_int(&at, o, "memory_bytes", 0, PSIM_MAX_BYTES, &mem, error) ||
        !psim_json_get_number(&at, o, "peak_gflops", 1e-6, PSIM_MAX_RATE, &d->peak_gflops, error) ||
        !psim_json_get_number(&at, o, "mem_bw_GBps", 1e-6, PSIM_MAX_RATE, &d->mem_bw_GBps, error) ||
        !psim_json_get_number(&at, o, "launch_us", 0, PSIM_MAX_US, &d->launch_us, error) ||
        !psim_json_get_int(&at, o, "gpu_ordinal", -1, 4096, &ordinal, error) ||
        !psim_json_get_int(&at, o, "streams", 1, 1024, &streams, error) ||
        !psim_json_get_int(&at, o, "sm_count", 0, 1 << 20, &sms, error))
        return FALSE;
    d->memory_bytes = (uint64_t)mem;
    d->gpu_ordinal = ordinal < 0 && d->cls && d->cls->ordinal_is_index ? d->index : (int32_t)ordinal;
    d->n_streams = (int32_t)streams;
    d->sm_count = (int32_t)sms;
    if (desc)
        d->description = g_strdup(desc);
    if (host)
        d->host = g_strdup(host);
    if (cc) {
        unsigned maj, min;
        char extra;
        if (sscanf(cc, "%u.%u%c", &maj, &min, &extra) != 2 || maj > 1000 || min > 1000)
            return fail(error, path, "%s: field 'compute_capability' must look like \"9.0\"", where);
        d->cc_major = (int32_t)maj;
        d->cc_minor = (int32_t)min;
    }
    JsonNode *cn = json_object_get_member(o, "cores");
    if (cn) {
        if (!JSON_NODE_HOLDS_ARRAY(cn))
            return fail(error, path, "%s: field 'cores' must be an array of core numbers", where);
        JsonArray *a = json_node_get_array(cn);
        guint n = json_array_get_length(a);
        if (n > MAX_CORES)
            return fail(error, path, "%s: field 'cores' lists %u cores (at most %d)", where, n, MAX_CORES);
        d->cores = g_new(int32_t, n ? n : 1);
        d->n_cores = (int32_t)n;
        for (guint k = 0; k < n; k++) {
            JsonNode *e = json_array_get_element(a, k);
            if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_INT64 ||
                json_node_get_int(e) < 0 || json_node_get_int(e) >= MAX_CORES)
                return fail(error, path, "%s: cores[%u] must be a core number in [0, %d)", where, k, MAX_CORES);
            d->cores[k] = (int32_t)json_node_get_int(e);
            for (guint j = 0; j < k; j++)
                if (d->cores[j] == d->cores[k])
                    return fail(error, path, "%s: core %d listed twice in 'cores'", where, d->cores[k]);
        }
    }
    return TRUE;
}

static int32_t find_endpoint(PsimCluster *c, JsonObject *o, const char *key, const char *path,
                             const char *where, GError **error)
{
    const char *name = NULL;
    PsimJsonAt at = {path, where};
    if (!psim_json_get_string(&at, o, key, &name, error))
        return -1;
    if (!name) {
        fail(error, path, "%s: missing field '%s'", where, key);
        return -1;
    }
    int32_t id = psim_cluster_device_find(c, name);
    if (id < 0)
        fail(error, path, "%s: field '%s' names device '%s', which is not in 'devices'", where, key, name);
    return id;
}

static PsimCluster *cluster_from_root(const char *path, JsonNode *root, GError **error)
{
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
        fail(error, path, "expected a JSON object with \"format\": \"placesim.cluster/1\"");
        return NULL;
    }
    JsonObject *o = json_node_get_object(root);
    const char *format = NULL, *cname = NULL;
    PsimJsonAt at = {path, NULL};
    if (!psim_json_get_string(&at, o, "format", &format, error))
        return NULL;
    if (!format || strcmp(format, "placesim.cluster/1")) {
        fail(error, path, "field 'format': expected \"placesim.cluster/1\", found %s%s%s",
             format ? "\"" : "", format ? format : "none", format ? "\"" : "");
        return NULL;
    }
    static const char *const keys[] = {"format", "name", "devices", "links", "default_link", NULL};
    if (!check_keys(o, keys, path, "cluster", error) ||
        !psim_json_get_string(&at, o, "name", &cname, error))
        return NULL;
    g_autoptr(PsimCluster) c = psim_cluster_new();
    JsonNode *dn = json_object_get_member(o, "devices");
    if (!dn || !JSON_NODE_HOLDS_ARRAY(dn)) {
        fail(error, path, "field 'devices': expected an array of devices");
        return NULL;
    }
    JsonArray *devs = json_node_get_array(dn);
    for (guint i = 0; i < json_array_get_length(devs); i++)
        if (!parse_device(c, json_array_get_element(devs, i), i, path, error))
            return NULL;
    JsonNode *ln = json_object_get_member(o, "default_link");
    if (ln) {
        if (!JSON_NODE_HOLDS_OBJECT(ln)) {
            fail(error, path, "field 'default_link': expected an object");
            return NULL;
        }
        PsimLink link = psim_cluster_default_link(c);
        if (json_object_has_member(json_node_get_object(ln), "src") ||
            json_object_has_member(json_node_get_object(ln), "dst")) {
            fail(error, path, "default_link: 'src' and 'dst' belong in 'links'");
            return NULL;
        }
        if (!parse_link(json_node_get_object(ln), &link, path, "default_link", error))
            return NULL;
        psim_cluster_default_link_set(c, link);
    }
    ln = json_object_get_member(o, "links");
    if (ln) {
        if (!JSON_NODE_HOLDS_ARRAY(ln)) {
            fail(error, path, "field 'links': expected an array of links");
            return NULL;
        }
        JsonArray *links = json_node_get_array(ln);
        for (guint i = 0; i < json_array_get_length(links); i++) {
            g_autofree char *where = g_strdup_printf("links[%u]", i);
            JsonNode *e = json_array_get_element(links, i);
            if (!JSON_NODE_HOLDS_OBJECT(e)) {
                fail(error, path, "%s: expected an object", where);
                return NULL;
            }
            JsonObject *lo = json_node_get_object(e);
            int32_t s = find_endpoint(c, lo, "src", path, where, error);
            if (s < 0)
                return NULL;
            int32_t t = find_endpoint(c, lo, "dst", path, where, error);
            if (t < 0)
                return NULL;
            if (s == t) {
                fail(error, path, "%s: src and dst are the same device '%s'", where,
                     psim_cluster_device(c, s)->short_name);
                return NULL;
            }
            /* Unset fields take the default link's values. */
            PsimLink link = psim_cluster_default_link(c);
            if (!parse_link(lo, &link, path, where, error))
                return NULL;
            psim_cluster_link_set(c, s, t, link);
        }
    }
    return g_steal_pointer(&c);
}

PsimCluster *psim_cluster_parse(const char *path, const char *data, gsize len, GError **error)
{
    g_return_val_if_fail(data || !len, NULL);
    if (!path)
        path = "<cluster>";
    g_autoptr(JsonNode) root = psim_json_parse(path, data ? data : "", len, error);
    return root ? cluster_from_root(path, root, error) : NULL;
}

PsimCluster *psim_cluster_load(const char *path, GError **error)
{
    g_autoptr(JsonNode) root = psim_json_load(path, error);
    return root ? cluster_from_root(path, root, error) : NULL;
}

static void add_link(JsonBuilder *b, PsimLink l)
{
    json_builder_set_member_name(b, "bandwidth_GBps");
    json_builder_add_double_value(b, l.bandwidth_GBps > 0 && isfinite(l.bandwidth_GBps) ? l.bandwidth_GBps : 0);
    json_builder_set_member_name(b, "latency_us");
    json_builder_add_double_value(b, l.latency_us);
    if (l.independent) {
        json_builder_set_member_name(b, "independent");
        json_builder_add_boolean_value(b, TRUE);
    }
    if (l.by_destination) {
        json_builder_set_member_name(b, "by_destination");
        json_builder_add_boolean_value(b, TRUE);
    }
}

static gboolean link_equal(PsimLink a, PsimLink b)
{
    return a.bandwidth_GBps == b.bandwidth_GBps && a.latency_us == b.latency_us &&
           !a.independent == !b.independent && !a.by_destination == !b.by_destination;
}

/* The short name when it is unambiguous in c, else the full name. */
static const char *link_end_name(const PsimCluster *c, int32_t i)
{
    const PsimDevice *d = psim_cluster_device(c, i);
    return psim_cluster_short_name_count(c, d->short_name) > 1 ? d->name : d->short_name;
}

char *psim_cluster_to_json(const PsimCluster *c)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "format");
    json_builder_add_string_value(b, "placesim.cluster/1");
    json_builder_set_member_name(b, "devices");
    json_builder_begin_array(b);
    int32_t n = psim_cluster_n_devices(c);
    for (int32_t i = 0; i < n; i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "name");
        json_builder_add_string_value(b, d->name);
        json_builder_set_member_name(b, "type");
        json_builder_add_string_value(b, d->type);
        if (d->description) {
            json_builder_set_member_name(b, "description");
            json_builder_add_string_value(b, d->description);
        }
        if (d->host) {
            json_builder_set_member_name(b, "host");
            json_builder_add_string_value(b, d->host);
        }
        json_builder_set_member_name(b, "memory_bytes");
        json_builder_add_int_value(b, (gint64)d->memory_bytes);
        json_builder_set_member_name(b, "peak_gflops");
        json_builder_add_double_value(b, d->peak_gflops);
        json_builder_set_member_name(b, "mem_bw_GBps");
        json_builder_add_double_value(b, d->mem_bw_GBps);
        json_builder_set_member_name(b, "launch_us");
        json_builder_add_double_value(b, d->launch_us);
        json_builder_set_member_name(b, "streams");
        json_builder_add_int_value(b, d->n_streams);
        if (d->n_cores > 0) {
            json_builder_set_member_name(b, "cores");
            json_builder_begin_array(b);
            for (int32_t k = 0; k < d->n_cores; k++)
                json_builder_add_int_value(b, d->cores[k]);
            json_builder_end_array(b);
        }
        if (d->gpu_ordinal >= 0) {
            json_builder_set_member_name(b, "gpu_ordinal");
            json_builder_add_int_value(b, d->gpu_ordinal);
        }
        if (d->sm_count > 0) {
            json_builder_set_member_name(b, "sm_count");
            json_builder_add_int_value(b, d->sm_count);
        }
        if (d->cc_major > 0) {
            g_autofree char *cc = g_strdup_printf("%d.%d", d->cc_major, d->cc_minor);
            json_builder_set_member_name(b, "compute_capability");
            json_builder_add_string_value(b, cc);
        }
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    PsimLink dflt = psim_cluster_default_link(c);
    json_builder_set_member_name(b, "links");
    json_builder_begin_array(b);
    int32_t n_links;
    g_autofree PsimLinkEnds *ends = psim_cluster_links_set(c, &n_links);
    for (int32_t i = 0; i < n_links; i++) {
        int32_t s = ends[i].src, t = ends[i].dst;
        PsimLink l = psim_cluster_link(c, s, t);
        if (s == t || link_equal(l, dflt))
            continue;
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "src");
        json_builder_add_string_value(b, link_end_name(c, s));
        json_builder_set_member_name(b, "dst");
        json_builder_add_string_value(b, link_end_name(c, t));
        add_link(b, l);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "default_link");
    json_builder_begin_object(b);
    add_link(b, dflt);
    json_builder_end_object(b);
    json_builder_end_object(b);
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autoptr(JsonNode) root = json_builder_get_root(b);
    json_generator_set_root(gen, root);
    json_generator_set_pretty(gen, TRUE);
    json_generator_set_indent(gen, 1);
    return json_generator_to_data(gen, NULL);
}
