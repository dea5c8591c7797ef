/* Placement JSON ("placesim.placement/1") and the `file` algorithm: an expert's placement read
 * from a file, ordered on each device by HEFT's rank with the devices held fixed. */
#include <json-glib/json-glib.h>
#include <string.h>

#include "placer/placer-private.h"

#define FORMAT_KEY "placesim.placement/1"

char *psim_placement_to_json(const PsimPlaceCtx *c, const PsimPlacement *p)
{
    g_autoptr(JsonBuilder) b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "format");
    json_builder_add_string_value(b, FORMAT_KEY);
    json_builder_set_member_name(b, "graph");
    json_builder_add_string_value(b, psim_graph_name(c->g));
    json_builder_set_member_name(b, "algo");
    json_builder_add_string_value(b, p->algo);
    json_builder_set_member_name(b, "makespan_us");
    json_builder_add_double_value(b, p->makespan_us);
    json_builder_set_member_name(b, "devices");
    json_builder_begin_object(b);
    for (int32_t i = 0; i < p->n_nodes; i++) {
        int32_t v = p->seq[i];
        json_builder_set_member_name(b, psim_graph_node(c->g, v)->name);
        json_builder_add_string_value(b, psim_cluster_device(c->cluster, p->device_of[v])->name);
    }
    json_builder_end_object(b);
    json_builder_end_object(b);
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autoptr(JsonNode) root = json_builder_get_root(b);
    json_generator_set_root(gen, root);
    json_generator_set_pretty(gen, TRUE);
    char *s = json_generator_to_data(gen, NULL);
    char *out = g_strconcat(s, "\n", NULL);
    g_free(s);
    return out;
}

gboolean psim_placement_save(const PsimPlaceCtx *c, const PsimPlacement *p, const char *path,
                             GError **error)
{
    g_autofree char *s = psim_placement_to_json(c, p);
    g_autoptr(GError) err = NULL;
    if (!g_file_set_contents(path, s, -1, &err)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s", path, err->message);
        return FALSE;
    }
    return TRUE;
}

gboolean psim_placement_read(const PsimPlaceCtx *c, const char *path, int32_t *device_of,
                             GError **error)
{
    g_autoptr(JsonNode) root = psim_json_load(path, error);
    if (!root)
        return FALSE;
    JsonObject *o = JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    const char *fmt = NULL, *gname = NULL, *algo = NULL;
    double makespan = 0;
    PsimJsonAt at = {path, NULL};
    /* graph, algo and makespan_us are not used, but a wrong type there is a damaged file. */
    if (o && (!psim_json_get_string(&at, o, "format", &fmt, error) ||
              !psim_json_get_string(&at, o, "graph", &gname, error) ||
              !psim_json_get_string(&at, o, "algo", &algo, error) ||
              !psim_json_get_number(&at, o, "makespan_us", 0, G_MAXDOUBLE, &makespan, error)))
        return FALSE;
    if (!fmt || strcmp(fmt, FORMAT_KEY)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: field 'format': expected \"" FORMAT_KEY "\"", path);
        return FALSE;
    }
    JsonNode *dn = json_object_get_member(o, "devices");
    if (!dn || !JSON_NODE_HOLDS_OBJECT(dn)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: field 'devices' is missing or not an object of node -> device", path);
        return FALSE;
    }
    JsonObject *devs = json_node_get_object(dn);
    for (int32_t v = 0; v < c->n; v++)
        device_of[v] = -1;
    g_autoptr(GList) keys = json_object_get_members(devs);
    for (GList *l = keys; l; l = l->next) {
        const char *name = l->data;
        const PsimNode *node = psim_graph_node_find(c->g, name);
        /* Names come from the file: psim_json_fail keeps a line break in one on one line. */
        if (!node)
            return psim_json_fail(&at, error, "node '%s': not in graph '%s'", name,
                                  psim_graph_name(c->g));
        const char *dname = psim_json_node_string(json_object_get_member(devs, name));
        if (!dname)
            return psim_json_fail(&at, error, "node '%s': the device must be a string", name);
        int32_t d = psim_cluster_device_find(c->cluster, dname);
        if (d < 0)
            return psim_json_fail(&at, error, "node '%s': device '%s' is not in the cluster", name,
                                  dname);
        if (!psim__feasible(c, node->id, d) || (c->fixed[node->id] >= 0 && c->fixed[node->id] != d))
            return psim_json_fail(&at, error,
                                  "node '%s': cannot be placed on device '%s' (its request, "
                                  "kernels or colocation group forbid it)", name, dname);
        device_of[node->id] = d;
    }
    for (int32_t v = 0; v < c->n; v++)
        if (device_of[v] < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: node '%s': has no device", path,
                        psim_graph_node(c->g, v)->name);
            return FALSE;
        }
    g_autofree int32_t *first = g_new(int32_t, c->n_groups + 1);
    for (int32_t k = 0; k < c->n_groups; k++)
        first[k] = -1;
    for (int32_t u = 0; u < c->n; u++) {
        int32_t k = c->group[u];
        if (k < 0)
            continue;
        if (first[k] < 0) {
            first[k] = u;
        } else if (device_of[u] != device_of[first[k]]) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: node '%s': on device '%s', away from '%s' it must be colocated with",
                        path, psim_graph_node(c->g, u)->name,
                        psim_cluster_device(c->cluster, device_of[u])->name,
                        psim_graph_node(c->g, first[k])->name);
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean place_file(PsimPlaceCtx *c, PsimPlacement *p, GError **error)
{
    if (!c->opt.placement_file) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "algorithm 'file' needs a placement file (--placement FILE)");
        return FALSE;
    }
    if (!psim_placement_read(c, c->opt.placement_file, p->device_of, error))
        return FALSE;
    g_autofree double *rank = psim__rank_upward(c);
    g_autofree int32_t *list = g_new(int32_t, c->n + 1), *fixed = g_memdup2(p->device_of, sizeof(int32_t) * (c->n + 1));
    psim__seq_by_key(c, rank, list);
    psim__list_insertion(c, list, fixed, p->device_of, p->start, p->finish, NULL);
    psim__seq_from_start(c, p->start, p->finish, p->seq);
    return TRUE;
}

const PsimPlacer psim__placer_file = {
    "file", "a placement read from placement JSON (the expert's), ordered by HEFT rank", place_file};
