/* Plan JSON. "placesim.plan/2" (written): the placed graph, by reference (its source and the
 * SHA-256 of the source's bytes) or embedded as graph JSON, the placement, and the schedule as
 * flat lists: each device's order, each node's planned start and priority, each transfer's gate,
 * earliest start and priority. The reader partitions the graph again (psim_plan_partition: the
 * same Send/Recv nodes in the same order), so the file holds no Send/Recv node, name or key.
 * "placesim.plan/1" (read only): the partitioned graph embedded, nodes and transfers by name.
 * Written by hand so that save -> load -> save is byte-identical; read through the yajl document
 * (graph/jdoc.c) with every index checked. */
#include "graph/graph-private.h"
#include "placesim/cluster.h"
#include "placesim/formats.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "placesim/plan.h"

#define FORMAT_KEY_1 "placesim.plan/1"
#define FORMAT_KEY "placesim.plan/2"

/* From json.c. */
void psim__json_string(GString *s, const char *v);
void psim__json_double(GString *s, double v, gboolean force_point);
void psim__json_int(GString *s, int64_t x);
PsimGraph *psim__import_json_root(const char *path, const PsimJ *root, GError **error);
gboolean psim__j_double(const PsimJ *n, double *out);

/* ---- the graph a plan refers to ---- */

char *psim_graph_source_sha256(const char *source, GError **error)
{
    if (g_str_has_prefix(source, "zoo:")) {
        g_autoptr(PsimGraph) g = psim_zoo_make(source + 4, error);
        if (!g)
            return NULL;
        gsize len = 0;
        g_autofree char *j = psim_export_json(g, &len);
        return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)j, len);
    }
    g_autoptr(GBytes) b = psim_input_read(source, PSIM_INPUT_MAX_BYTES, NULL, error);
    if (!b)
        return NULL;
    return g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, b);
}

/* The graph the plan's first n_placed nodes were partitioned from: those nodes with their
 * inputs from Recv nodes traced back to the tensors sent. */
static PsimGraph *placed_graph(const PsimPlan *p, GError **error)
{
    const PsimGraph *pg = p->graph;
    g_autoptr(PsimGraph) g = psim_graph_new(psim_graph_name(pg));
    if (psim_graph_source(pg))
        psim_graph_set_source(g, psim_graph_source(pg));
    psim_graph_set_opset(g, psim_graph_opset(pg));
    psim_graph_reserve(g, p->n_placed);
    for (int32_t v = 0; v < p->n_placed; v++)
        if (!psim__graph_node_copy(g, pg, psim_graph_node(pg, v), FALSE, error))
            return NULL;
    for (int32_t v = 0; v < p->n_placed; v++) {
        const PsimNode *s = psim_graph_node(pg, v);
        PsimNode *t = psim_graph_node(g, v);
        for (int32_t k = 0; k < s->n_inputs; k++) {
            PsimPort in = s->inputs[k];
            int32_t x = in.node >= 0 ? p->transfer_of_recv[in.node] : -1;
            if (in.node >= 0 && p->copy_of[in.node] >= 0)
                in.node = p->copy_of[in.node]; /* a constant's copy: the generator itself */
            psim_graph_node_input_add(g, t, x >= 0 ? p->transfers[x].port : in);
        }
        for (int32_t k = 0; k < s->n_controls; k++) {
            int32_t u = s->controls[k], x = p->transfer_of_recv[u];
            psim_graph_node_control_add(g, t, x >= 0 ? p->transfers[x].port.node : u);
        }
    }
    for (int32_t i = 0; i < psim_graph_n_inputs(pg); i++)
        psim_graph_input_add(g, psim_graph_input(pg, i));
    for (int32_t i = 0; i < psim_graph_n_outputs(pg); i++)
        psim_graph_output_add(g, psim_graph_output(pg, i));
    if (!psim_graph_finalize(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

/* ---- writer ---- */

static void put_ints(GString *s, const int32_t *v, int32_t n)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < n; i++) {
        if (i)
            g_string_append_c(s, ',');
        psim__json_int(s, v[i]);
    }
    g_string_append_c(s, ']');
}

static void put_doubles(GString *s, const double *v, int32_t n)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < n; i++) {
        if (i)
            g_string_append_c(s, ',');
        psim__json_double(s, v[i], FALSE);
    }
    g_string_append_c(s, ']');
}

static void put_strings(GString *s, char *const *v, int32_t n)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < n; i++) {
        if (i)
            g_string_append(s, ", ");
        psim__json_string(s, v[i]);
    }
    g_string_append_c(s, ']');
}

char *psim_plan_to_json_full(const PsimPlan *p, const char *graph_sha256, unsigned flags,
                             gsize *len, GError **error)
{
    int32_t N = psim_graph_n_nodes(p->graph), nt = p->n_transfers;
    GString *s = g_string_sized_new(4096 + (gsize)N * 24);
    g_string_append(s, "{\"format\": \"" FORMAT_KEY "\", \"algo\": ");
    psim__json_string(s, p->algo ? p->algo : "");
    g_string_append(s, ", \"makespan_us\": ");
    psim__json_double(s, p->makespan_us, FALSE);
    g_string_append(s, ",\n \"devices\": ");
    put_strings(s, p->devices, p->n_devices);
    g_string_append_printf(s, ",\n \"compress\": %s, \"rounding\": \"%s\"",
                           p->compress_all ? "true" : "false", psim_rounding_name(p->rounding));
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
    if (p->graph_source && graph_sha256) {
        g_string_append(s, "{\"source\": ");
        psim__json_string(s, p->graph_source);
        g_string_append(s, ", \"sha256\": ");
        psim__json_string(s, graph_sha256);
        if (p->graph_fused)
            g_string_append(s, ", \"fused\": true");
        g_string_append_printf(s, ", \"nodes\": %d}", p->n_placed);
    } else {
        g_autoptr(PsimGraph) g = placed_graph(p, error);
        if (!g) {
            g_string_free(s, TRUE);
            return NULL;
        }
        gsize glen = 0;
        g_autofree char *gj = psim_export_json(g, &glen);
        while (glen && (gj[glen - 1] == '\n' || gj[glen - 1] == ' '))
            glen--;
        g_string_append_len(s, gj, (gssize)glen);
    }
    g_string_append(s, ",\n \"placement\": ");
    put_ints(s, p->device_of, p->n_placed);
    if (p->seq && !(flags & PSIM_PLAN_JSON_ORDERS)) {
        /* The orders follow from the placement's order and the planned starts. */
        g_string_append(s, ",\n \"seq\": ");
        put_ints(s, p->seq, p->n_placed);
    } else {
        /* Each device's order by node name, as one would edit it by hand. */
        g_string_append(s, ",\n \"order\": [");
        for (int32_t d = 0; d < p->n_devices; d++) {
            g_string_append(s, d ? ",\n  [" : "\n  [");
            for (int32_t i = 0; i < p->n_order[d]; i++) {
                if (i)
                    g_string_append(s, ", ");
                psim__json_string(s, psim_graph_node(p->graph, p->order[d][i])->name);
            }
            g_string_append_c(s, ']');
        }
        g_string_append_c(s, ']');
    }
    g_string_append(s, ",\n \"start\": ");
    put_doubles(s, p->planned_start, N);
    g_string_append(s, ",\n \"priority\": ");
    put_doubles(s, p->priority, N);
    g_autofree int32_t *after = g_new(int32_t, nt + 1);
    g_autofree double *early = g_new(double, nt + 1), *prio = g_new(double, nt + 1);
    for (int32_t i = 0; i < nt; i++) {
        after[i] = p->transfers[i].after;
        early[i] = p->transfers[i].earliest_start;
        prio[i] = p->transfers[i].priority;
    }
    g_string_append_printf(s, ",\n \"transfers\": {\"count\": %d,\n  \"after\": ", nt);
    put_ints(s, after, nt);
    g_string_append(s, ",\n  \"earliest_start\": ");
    put_doubles(s, early, nt);
    g_string_append(s, ",\n  \"priority\": ");
    put_doubles(s, prio, nt);
    g_string_append(s, "}}\n");
    if (len)
        *len = s->len;
    return g_string_free(s, FALSE);
}

char *psim_plan_to_json(const PsimPlan *p, gsize *len)
{
    g_autoptr(GError) err = NULL;
    char *s = psim_plan_to_json_full(p, NULL, 0, len, &err);
    g_return_val_if_fail(s, NULL); /* the plan's own graph always partitions back */
    return s;
}

gboolean psim_plan_save(const PsimPlan *p, const char *path, GError **error)
{
    return psim_plan_save_full(p, path, 0, error);
}

gboolean psim_plan_save_full(const PsimPlan *p, const char *path, unsigned flags, GError **error)
{
    return psim_plan_save_sha(p, path, flags, NULL, error);
}

gboolean psim_plan_save_sha(const PsimPlan *p, const char *path, unsigned flags, const char *graph_sha256,
                            GError **error)
{
    g_autofree char *sha = graph_sha256 ? g_strdup(graph_sha256) : NULL;
    if (p->graph_source && !sha && !(sha = psim_graph_source_sha256(p->graph_source, error)))
        return FALSE;
    gsize len;
    g_autofree char *s = psim_plan_to_json_full(p, sha, flags, &len, error);
    if (!s)
        return FALSE;
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

static gboolean get_int(const PsimJ *n, int64_t lo, int64_t hi, int64_t *out)
{
    return psim_j_int(n, out) && *out >= lo && *out <= hi;
}

static const PsimJ *get_array(const PsimJ *o, const char *m)
{
    const PsimJ *n = psim_j_get(o, m);
    return n && n->type == PSIM_J_ARRAY ? n : NULL;
}

/* Fields of both versions: algo, makespan, devices, cluster. */
static gboolean read_head(const char *path, const PsimJ *o, const char **algo, double *makespan,
                          const PsimJ **devices, char **cluster_json, GError **error)
{
    PsimJsonAt at = {path, NULL};
    if (!psim_j_get_string(&at, o, "algo", algo, error))
        return FALSE;
    if (!psim__j_double(psim_j_get(o, "makespan_us"), makespan)) {
        psim__error_file(error, path, "field 'makespan_us' must be a number");
        return FALSE;
    }
    const PsimJ *da = get_array(o, "devices");
    if (!da || da->n == 0 || da->n > 1u << 20) {
        psim__error_file(error, path, "field 'devices': expected a list of 1 to 2^20 device names");
        return FALSE;
    }
    for (uint32_t d = 0; d < da->n; d++)
        if (da->v.a[d].type != PSIM_J_STRING) {
            psim__error_file(error, path, "devices[%u] is not a string", d);
            return FALSE;
        }
    *devices = da;
    /* The cluster it was made for, when the plan says (checked where it is used). */
    const PsimJ *cn = psim_j_given(o, "cluster");
    if (cn) {
        if (cn->type != PSIM_J_OBJECT) {
            psim__error_file(error, path, "field 'cluster' must be a cluster object (placesim.cluster/1)");
            return FALSE;
        }
        /* Kept as text: the cluster reader parses it where the plan is used. */
        GString *s = g_string_new(NULL);
        psim_j_write(s, cn);
        *cluster_json = g_string_free(s, FALSE);
    }
    return TRUE;
}

/* A device's short name ("CPU:1"), as the cluster gives it: what follows "/device:". */
static char **short_names(char *const *devs, uint32_t nd)
{
    char **out = g_new0(char *, nd + 1);
    for (uint32_t d = 0; d < nd; d++) {
        const char *s = strstr(devs[d], "/device:");
        out[d] = g_strdup(s ? s + 8 : devs[d]);
    }
    return out;
}

static char **device_names(const PsimJ *da)
{
    char **devs = g_new0(char *, da->n + 1);
    for (uint32_t d = 0; d < da->n; d++)
        devs[d] = g_strdup(da->v.a[d].v.s);
    return devs;
}

/* An int list of exactly n entries, each in [lo, hi], into out. */
static gboolean read_ints(const char *path, const PsimJ *a, const char *what, uint32_t n,
                          int64_t lo, int64_t hi, int32_t *out, GError **error)
{
    if (!a || a->type != PSIM_J_ARRAY || a->n != n) {
        psim__error_file(error, path, "field '%s' must be a list of %u integers", what, n);
        return FALSE;
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        if (!get_int(&a->v.a[i], lo, hi, &v)) {
            psim__error_file(error, path, "%s[%u] must be an integer in [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
                             what, i, lo, hi);
            return FALSE;
        }
        out[i] = (int32_t)v;
    }
    return TRUE;
}

static gboolean read_doubles(const char *path, const PsimJ *a, const char *what, uint32_t n,
                             double *out, GError **error)
{
    if (!a || a->type != PSIM_J_ARRAY || a->n != n) {
        psim__error_file(error, path, "field '%s' must be a list of %u numbers", what, n);
        return FALSE;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!psim__j_double(&a->v.a[i], &out[i])) {
            psim__error_file(error, path, "%s[%u] is not a number", what, i);
            return FALSE;
        }
    return TRUE;
}

/* A graph embedded in a plan, given the values that loading it from a file gives (shape
 * inference sets each constant's output value from its attribute): the cost model's signatures
 * read them (a Reshape's shape argument), so without them `sim --plan` found no row for a node
 * that `place` had costed from the same cost DB. */
static PsimGraph *embedded_graph(const char *path, const PsimJ *gn, GError **error)
{
    g_autoptr(PsimGraph) g = psim__import_json_root(path, gn, error);
    if (!g || !psim_graph_infer_shapes(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

/* The graph of a plan/2 file: embedded, or read from its source and checked against the hash
 * (then fused for cluster_json where the reference says so: *fused). */
static PsimGraph *plan2_graph(const char *path, const PsimJ *gn, const char *graph_path, const char *cluster_json,
                              char **source, gboolean *fused, GError **error)
{
    *fused = FALSE;
    if (!gn || gn->type != PSIM_J_OBJECT) {
        psim__error_file(error, path, "field 'graph' is missing or not an object");
        return NULL;
    }
    if (psim_j_get(gn, "format"))
        return embedded_graph(path, gn, error);
    const char *src = psim_j_string(psim_j_get(gn, "source")), *sha = psim_j_string(psim_j_get(gn, "sha256"));
    if (!src || !sha) {
        psim__error_file(error, path, "field 'graph': expected a graph, or 'source' and 'sha256' strings");
        return NULL;
    }
    if (!*src || !strcmp(src, "-")) {
        psim__error_file(error, path, "field 'graph': 'source' must name a graph file or zoo:NAME");
        return NULL;
    }
    /* A graph given beside the plan stands for its source (a file that moved): the same bytes. */
    const char *stored = src;
    if (graph_path)
        src = graph_path;
    g_autofree char *now = NULL;
    g_autoptr(PsimGraph) g = NULL;
    if (g_str_has_prefix(src, "zoo:")) {
        g = psim_zoo_make(src + 4, error);
        if (!g)
            return NULL;
        gsize len = 0;
        g_autofree char *j = psim_export_json(g, &len);
        now = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)j, len);
    } else {
        g_autoptr(GError) lerr = NULL;
        g = psim_graph_load_hashed(src, &now, &lerr);
        if (!g) {
            psim__error_file(error, path, "its graph '%s' cannot be read: %s", src, lerr->message);
            return NULL;
        }
    }
    if (strcmp(now, sha) && src != stored) {
        psim__error_file(error, path, "graph '%s' is not the plan's graph '%s' (SHA-256 %.12s..., the plan says %.12s...)",
                         src, stored, now, sha);
        return NULL;
    }
    if (strcmp(now, sha)) {
        psim__error_file(error, path, "its graph '%s' has changed since the plan was made (SHA-256 %.12s..., the plan says %.12s...)",
                         src, now, sha);
        return NULL;
    }
    PsimJsonAt at = {path, "graph"};
    if (!psim_j_get_bool(&at, gn, "fused", fused, error))
        return NULL;
    if (*fused) {
        if (!cluster_json) {
            psim__error_file(error, path, "field 'graph': its graph '%s' is fused for a cluster the plan does not carry",
                             src);
            return NULL;
        }
        g_autoptr(GError) ferr = NULL;
        g_autoptr(PsimCluster) c = psim_cluster_parse(path, cluster_json, strlen(cluster_json), &ferr);
        PsimGraph *f = NULL;
        int32_t removed = 0;
        if (!c || !psim_cluster_fuse(c, g, &f, &removed, &ferr)) {
            psim__error_file(error, path, "its graph '%s' cannot be fused for its cluster: %s", src, ferr->message);
            return NULL;
        }
        if (f) {
            psim_graph_free(g);
            g = f;
        }
    }
    *source = g_strdup(src);
    return g_steal_pointer(&g);
}

static PsimPlan *plan2_from_root(const char *path, const PsimJ *o, const char *graph_path,
                                 GError **error)
{
    PsimPlan *p = NULL;
    char **devs = NULL, **shorts = NULL, *cluster_json = NULL, *source = NULL;
    const char *algo = "", *rounding = "truncate";
    double makespan = 0;
    const PsimJ *da = NULL;
    gboolean compress = FALSE, graph_fused = FALSE;
    PsimJsonAt at = {path, NULL};
    if (!read_head(path, o, &algo, &makespan, &da, &cluster_json, error) ||
        !psim_j_get_bool(&at, o, "compress", &compress, error) ||
        !psim_j_get_string(&at, o, "rounding", &rounding, error))
        goto fail;
    uint32_t nd = da->n;
    PsimRounding rnd;
    if (!psim_rounding_from_name(rounding, &rnd))
        FAIL("field 'rounding' must be \"truncate\" or \"rne\"");
    devs = device_names(da);
    shorts = short_names(devs, nd);
    {
        g_autoptr(PsimGraph) g = plan2_graph(path, psim_j_get(o, "graph"), graph_path, cluster_json, &source,
                                             &graph_fused, error);
        if (!g)
            goto fail;
        psim_graph_set_source(g, path); /* messages about the plan name the plan file */
        int32_t n = psim_graph_n_nodes(g);
        g_autofree int32_t *place = g_new(int32_t, n + 1);
        if (!read_ints(path, psim_j_get(o, "placement"), "placement", (uint32_t)n, 0, nd - 1, place, error))
            goto fail;
        g_autoptr(GError) perr = NULL;
        p = psim_plan_partition(g, place, (int32_t)nd, (const char *const *)devs,
                                (const char *const *)shorts, compress, rnd, algo, &perr);
        if (!p)
            FAIL("its placement does not partition: %s", perr->message);
    }
    p->makespan_us = makespan;
    p->cluster_json = g_steal_pointer(&cluster_json);
    p->graph_source = g_steal_pointer(&source);
    p->graph_fused = graph_fused;
    {
        int32_t N = psim_graph_n_nodes(p->graph), nt = p->n_transfers;
        const PsimJ *st = psim_j_get(o, "start");
        if (st && st->type == PSIM_J_ARRAY && st->n != (uint32_t)N)
            FAIL("field 'start' has %u numbers where its placement partitions into %d nodes (saved before constants "
                 "were copied to the devices that read them, or edited: place the graph again)",
                 st->n, N);
        if (!read_doubles(path, psim_j_get(o, "start"), "start", (uint32_t)N, p->planned_start, error) ||
            !read_doubles(path, psim_j_get(o, "priority"), "priority", (uint32_t)N, p->priority, error))
            goto fail;
        const PsimJ *sq = psim_j_get(o, "seq"), *oa = get_array(o, "order");
        if (sq) {
            int32_t n = p->n_placed;
            g_autofree int32_t *seq = g_new(int32_t, n + 1);
            g_autofree guint8 *seen = g_new0(guint8, n + 1);
            if (!read_ints(path, sq, "seq", (uint32_t)n, 0, n - 1, seq, error))
                goto fail;
            for (int32_t i = 0; i < n; i++) {
                if (seen[seq[i]])
                    FAIL("seq[%d]: node %d listed twice", i, seq[i]);
                seen[seq[i]] = 1;
            }
            psim_plan_order_set(p, seq, p->planned_start);
        } else if (!oa || oa->n != nd) {
            FAIL("field 'seq' (the placement's order) or 'order' (one list per device, %u) is missing", nd);
        }
        for (uint32_t d = 0; !sq && d < nd; d++) {
            const PsimJ *l = &oa->v.a[d];
            if (l->type != PSIM_J_ARRAY || l->n > (uint32_t)N)
                FAIL("order[%u] is not a list of at most %d nodes", d, N);
            p->order[d] = g_new(int32_t, l->n + 1);
            p->n_order[d] = (int32_t)l->n;
            for (uint32_t i = 0; i < l->n; i++) {
                /* by node id, or by name (plan nodes have the names the partition gives them) */
                const char *nm = psim_j_string(&l->v.a[i]);
                const PsimNode *v = nm ? psim_graph_node_find(p->graph, nm) : NULL;
                int64_t id = -1;
                if (v)
                    id = v->id;
                else if (!get_int(&l->v.a[i], 0, N - 1, &id))
                    FAIL("order[%u][%u] names no node of the plan", d, i);
                p->order[d][i] = (int32_t)id;
            }
        }
        const PsimJ *to = psim_j_get(o, "transfers");
        int64_t count = -1;
        if (!to || to->type != PSIM_J_OBJECT || !get_int(psim_j_get(to, "count"), 0, G_MAXINT32, &count))
            FAIL("field 'transfers' must be an object with 'count', 'after', 'earliest_start' and 'priority'");
        if (count != nt)
            FAIL("field 'transfers': the plan lists %" G_GINT64_FORMAT " transfers, its placement makes %d",
                 count, nt);
        g_autofree int32_t *after = g_new(int32_t, nt + 1);
        g_autofree double *early = g_new(double, nt + 1), *prio = g_new(double, nt + 1);
        if (!read_ints(path, psim_j_get(to, "after"), "transfers.after", (uint32_t)nt, -1, N - 1, after, error) ||
            !read_doubles(path, psim_j_get(to, "earliest_start"), "transfers.earliest_start", (uint32_t)nt, early, error) ||
            !read_doubles(path, psim_j_get(to, "priority"), "transfers.priority", (uint32_t)nt, prio, error))
            goto fail;
        for (int32_t i = 0; i < nt; i++) {
            p->transfers[i].after = after[i];
            p->transfers[i].earliest_start = early[i];
            p->transfers[i].priority = prio[i];
        }
    }
    /* What the simulator and the executor would refuse is refused as the file is read. */
    if (!psim_plan_check(p, error))
        goto fail;
    g_strfreev(devs);
    g_strfreev(shorts);
    return p;
fail:
    g_strfreev(devs);
    g_strfreev(shorts);
    g_free(cluster_json);
    g_free(source);
    psim_plan_free(p);
    return NULL;
}

/* placesim.plan/1: the partitioned graph embedded, everything by name. */
static PsimPlan *plan1_from_root(const char *path, const PsimJ *o, GError **error)
{
    PsimPlan *p = NULL;
    char **devs = NULL, *cluster_json = NULL;
    const char *algo = "";
    double makespan = 0;
    const PsimJ *da = NULL;
    if (!read_head(path, o, &algo, &makespan, &da, &cluster_json, error))
        goto fail;
    const PsimJ *gn = psim_j_get(o, "graph");
    if (!gn || gn->type != PSIM_J_OBJECT)
        FAIL("field 'graph' is missing or not an object");
    const PsimJ *na = get_array(o, "nodes"), *oa = get_array(o, "order"), *ta = get_array(o, "transfers");
    if (!na || !oa || !ta)
        FAIL("fields 'devices', 'nodes', 'order' and 'transfers' must be lists");
    uint32_t nd = da->n;
    devs = device_names(da);
    {
        PsimGraph *g = embedded_graph(path, gn, error);
        if (!g)
            goto fail;
        p = psim_plan_new(g, (int32_t)nd, (const char *const *)devs);
    }
    int32_t n = psim_graph_n_nodes(p->graph);
    p->algo = g_strdup(algo);
    p->makespan_us = makespan;
    p->cluster_json = g_steal_pointer(&cluster_json);
    if (na->n != (uint32_t)n)
        FAIL("field 'nodes' lists %u nodes, the graph has %d", na->n, n);
    for (int32_t v = 0; v < n; v++) {
        const PsimJ *no = &na->v.a[v];
        const char *nm = psim_j_string(psim_j_get(no, "name"));
        if (!nm || strcmp(nm, psim_graph_node(p->graph, v)->name))
            FAIL("nodes[%d]: expected node '%s'", v, psim_graph_node(p->graph, v)->name);
        int64_t d;
        if (!get_int(psim_j_get(no, "device"), 0, (int64_t)nd - 1, &d))
            FAIL("node '%s': field 'device' must be a device index below %u", nm, nd);
        p->device_of[v] = (int32_t)d;
        if (!psim__j_double(psim_j_get(no, "start"), &p->planned_start[v]) ||
            !psim__j_double(psim_j_get(no, "priority"), &p->priority[v]))
            FAIL("node '%s': fields 'start' and 'priority' must be numbers", nm);
    }
    if (oa->n != nd)
        FAIL("field 'order' must hold one list per device (%u)", nd);
    {
        g_autofree guint8 *seen = g_new0(guint8, n + 1);
        for (uint32_t d = 0; d < nd; d++) {
            const PsimJ *l = &oa->v.a[d];
            if (l->type != PSIM_J_ARRAY)
                FAIL("order[%u] is not a list", d);
            if (l->n > (uint32_t)n)
                FAIL("order[%u] lists more nodes than the graph has", d);
            p->order[d] = g_new(int32_t, l->n + 1);
            for (uint32_t i = 0; i < l->n; i++) {
                const char *nm = psim_j_string(&l->v.a[i]);
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
    uint32_t nt = ta->n;
    if (nt > (uint32_t)n)
        FAIL("field 'transfers' lists more transfers than the graph has nodes");
    p->n_transfers = (int32_t)nt;
    p->transfers = g_new0(PsimTransfer, nt + 1);
    for (uint32_t i = 0; i < nt; i++) {
        PsimTransfer *t = &p->transfers[i];
        const PsimJ *to = &ta->v.a[i];
        if (to->type != PSIM_J_OBJECT)
            FAIL("transfers[%u] is not an object", i);
        char where[32];
        g_snprintf(where, sizeof where, "transfers[%u]", i);
        PsimJsonAt tat = {path, where};
        const char *sn = NULL, *rn = NULL, *ten = NULL, *key = NULL;
        if (!psim_j_get_string(&tat, to, "send", &sn, error) ||
            !psim_j_get_string(&tat, to, "recv", &rn, error) ||
            !psim_j_get_string(&tat, to, "tensor", &ten, error) ||
            !psim_j_get_string(&tat, to, "key", &key, error))
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
        if (!get_int(psim_j_get(to, "src"), 0, (int64_t)nd - 1, &a) ||
            !get_int(psim_j_get(to, "dst"), 0, (int64_t)nd - 1, &b))
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
        if (!psim_j_get_int(&tat, to, "bytes", 0, PSIM_MAX_BYTES, &bytes, error) ||
            !psim_j_get_int(&tat, to, "raw_bytes", 0, PSIM_MAX_BYTES, &raw, error))
            goto fail;
        if (bytes < 0 || raw < 0)
            FAIL("transfers[%u]: 'bytes' and 'raw_bytes' must be non-negative integers", i);
        t->bytes = (uint64_t)bytes;
        t->raw_bytes = (uint64_t)raw;
        gboolean tcontrol = FALSE, compressed = FALSE;
        if (!psim_j_get_bool(&tat, to, "control", &tcontrol, error) ||
            !psim_j_get_bool(&tat, to, "compressed", &compressed, error))
            goto fail;
        t->control = tcontrol;
        t->compressed = compressed;
        /* Plans from before the choice existed were truncated. */
        const char *rounding = NULL;
        if (!psim_j_get_string(&tat, to, "rounding", &rounding, error))
            goto fail;
        if (rounding && !psim_rounding_from_name(rounding, &t->rounding))
            FAIL("transfers[%u]: field 'rounding' must be \"truncate\" or \"rne\"", i);
        if (t->control != control)
            FAIL("transfers[%u]: 'control' disagrees with its tensor '%s'", i, ten);
        if (!psim__j_double(psim_j_get(to, "earliest_start"), &t->earliest_start) ||
            !psim__j_double(psim_j_get(to, "priority"), &t->priority))
            FAIL("transfers[%u]: 'earliest_start' and 'priority' must be numbers", i);
        t->key = psim_graph_intern(p->graph, key ? key : "");
        /* The node the Recv waits for; plans from before gates existed have none (their
         * earliest_start, a clock time, is not waited for). */
        const char *after = NULL;
        if (!psim_j_get_string(&tat, to, "after", &after, error))
            goto fail;
        const PsimNode *av = after ? psim_graph_node_find(p->graph, after) : NULL;
        if (after && !av)
            FAIL("transfers[%u]: field 'after' names no node of the graph", i);
        t->after = av ? av->id : -1;
    }
    /* A plan/1 file does not say how its graph was partitioned; it is read only when it is
     * what psim_plan_partition makes of its placed nodes (which come first, as every placer
     * wrote them), so that it can be saved again as plan/2 with nothing lost. */
    p->n_placed = 0;
    while (p->n_placed < n && strcmp(psim_graph_node(p->graph, p->n_placed)->op, "Send") &&
           strcmp(psim_graph_node(p->graph, p->n_placed)->op, "Recv"))
        p->n_placed++;
    for (int32_t i = 0; i < p->n_transfers; i++)
        if (p->transfers[i].compressed) {
            p->compress_all = TRUE; /* a plan/1 file does not say which: all or by attribute */
            p->rounding = p->transfers[i].rounding;
        }
    if (!psim_plan_check(p, error))
        goto fail;
    {
        g_auto(GStrv) shorts = short_names(devs, nd);
        g_autoptr(GError) perr = NULL;
        g_autoptr(PsimGraph) g = placed_graph(p, &perr);
        g_autoptr(PsimPlan) q = NULL;
        for (int pass = 0; g && pass < 2 && !q; pass++) {
            /* compressed by --compress, else by the producers' _compress attributes */
            q = psim_plan_partition(g, p->device_of, (int32_t)nd, (const char *const *)devs,
                                    (const char *const *)shorts, p->compress_all, p->rounding,
                                    algo, NULL);
            gboolean same = q && psim_graph_n_nodes(q->graph) == n && q->n_transfers == p->n_transfers;
            for (int32_t i = 0; same && i < p->n_transfers; i++) {
                const PsimTransfer *a = &p->transfers[i], *b = &q->transfers[i];
                same = a->send == b->send && a->recv == b->recv && a->port.node == b->port.node &&
                       a->port.index == b->port.index && a->dst == b->dst &&
                       a->compressed == b->compressed && a->control == b->control;
            }
            if (!same) {
                g_clear_pointer(&q, psim_plan_free);
                if (!p->compress_all)
                    break;
                p->compress_all = FALSE;
            }
        }
        if (!q)
            FAIL("a placesim.plan/1 file is read only as placesim made it: its Send/Recv nodes are not those its placement makes (place the graph again)");
        /* The partition's own account of its nodes: which are placed, which copy a constant. */
        p->n_placed = q->n_placed;
        memcpy(p->copy_of, q->copy_of, sizeof(int32_t) * (size_t)n);
    }
    g_strfreev(devs);
    return p;
fail:
    g_strfreev(devs);
    g_free(cluster_json);
    psim_plan_free(p);
    return NULL;
}

static PsimPlan *plan_from_root(const char *path, const PsimJ *root, const char *graph_path,
                                GError **error)
{
    if (root->type != PSIM_J_OBJECT) {
        psim__error_file(error, path, "the top level must be a JSON object");
        return NULL;
    }
    const char *fmt = NULL;
    PsimJsonAt at = {path, NULL};
    if (!psim_j_get_string(&at, root, "format", &fmt, error))
        return NULL;
    if (fmt && !strcmp(fmt, FORMAT_KEY))
        return plan2_from_root(path, root, graph_path, error);
    if (fmt && !strcmp(fmt, FORMAT_KEY_1))
        return plan1_from_root(path, root, error);
    psim__error_file(error, path, "field 'format': expected \"" FORMAT_KEY "\" (or \"" FORMAT_KEY_1 "\")");
    return NULL;
}

PsimPlan *psim_plan_from_json(const char *path, const char *data, gsize len, GError **error)
{
    g_autoptr(PsimJDoc) d = psim_jdoc_parse(path, data, len, error);
    return d ? plan_from_root(path, psim_jdoc_root(d), NULL, error) : NULL;
}

PsimPlan *psim_plan_load_with(const char *path, const char *graph_path, GError **error)
{
    g_autoptr(PsimJDoc) d = psim_jdoc_load(path, error);
    return d ? plan_from_root(path, psim_jdoc_root(d), graph_path, error) : NULL;
}

PsimPlan *psim_plan_load(const char *path, GError **error)
{
    return psim_plan_load_with(path, NULL, error);
}
