/* The cluster container: devices, links per ordered pair with a default, and name matching. */
#include <math.h>
#include <string.h>

#include "placesim/cluster.h"
#include "placesim/graph.h"
#include "placesim/kernels.h"

/* Everything is linear in devices plus links: names are hashed, and only the links set for a
 * pair are stored (a dense n x n matrix of 65536 devices is 34 GB). */
struct PsimCluster {
    GPtrArray *devices;  /* PsimDevice* */
    GHashTable *by_name; /* full name -> index + 1 */
    GHashTable *by_short; /* short name -> index + 1 of its first device */
    GHashTable *n_short;  /* short name -> devices of that short name */
    GHashTable *links;   /* (src << 32 | dst) -> PsimLink* */
    GArray *n_from;      /* per device: links set from it */
    PsimLink default_link;
    uint64_t version;
};

static void device_free(PsimDevice *d)
{
    g_free(d->name);
    g_free(d->short_name);
    g_free(d->type);
    g_free(d->job);
    g_free(d->cores);
    g_free(d->host);
    g_free(d->description);
    g_free(d);
}

PsimCluster *psim_cluster_new(void)
{
    PsimCluster *c = g_new0(PsimCluster, 1);
    c->devices = g_ptr_array_new_with_free_func((GDestroyNotify)device_free);
    c->by_name = g_hash_table_new(g_str_hash, g_str_equal);
    c->by_short = g_hash_table_new(g_str_hash, g_str_equal);
    c->n_short = g_hash_table_new(g_str_hash, g_str_equal);
    c->links = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, g_free);
    c->n_from = g_array_new(FALSE, TRUE, sizeof(int32_t));
    c->default_link = (PsimLink){.bandwidth_GBps = 8, .latency_us = 2};
    c->version = 1;
    return c;
}

void psim_cluster_free(PsimCluster *c)
{
    if (!c)
        return;
    g_hash_table_destroy(c->by_name);
    g_hash_table_destroy(c->by_short);
    g_hash_table_destroy(c->n_short);
    g_ptr_array_free(c->devices, TRUE);
    g_hash_table_destroy(c->links);
    g_array_free(c->n_from, TRUE);
    g_free(c);
}

uint64_t psim_cluster_version(const PsimCluster *c) { return c->version; }
int32_t psim_cluster_n_devices(const PsimCluster *c) { return (int32_t)c->devices->len; }

gboolean psim_cluster_devices_share_cores(const PsimCluster *c, int32_t a, int32_t b)
{
    const PsimDevice *x = psim_cluster_device(c, a), *y = psim_cluster_device(c, b);
    if (a == b || !x || !y || x->n_cores <= 0 || y->n_cores <= 0 || g_strcmp0(x->host, y->host) != 0)
        return FALSE;
    for (int32_t i = 0; i < x->n_cores; i++)
        for (int32_t j = 0; j < y->n_cores; j++)
            if (x->cores[i] == y->cores[j])
                return TRUE;
    return FALSE;
}

gboolean psim_cluster_device_shares_cores(const PsimCluster *c, int32_t a)
{
    for (int32_t b = 0; b < psim_cluster_n_devices(c); b++)
        if (psim_cluster_devices_share_cores(c, a, b))
            return TRUE;
    return FALSE;
}

PsimDevice *psim_cluster_device(const PsimCluster *c, int32_t i)
{
    g_return_val_if_fail(i >= 0 && i < (int32_t)c->devices->len, NULL);
    return g_ptr_array_index(c->devices, i);
}

/* Splits a device name into its fields. Accepts "/job:J/replica:R/task:T/device:TYPE:N" (any
 * subset of the fields, in that order) and the short "TYPE:N". */
static gboolean parse_name(const char *name, char **job, int32_t *replica, int32_t *task,
                           char **type, int32_t *index)
{
    *job = NULL;
    *replica = *task = *index = -1;
    *type = NULL;
    if (!name || !*name)
        return FALSE;
    if (name[0] != '/') {
        const char *colon = strrchr(name, ':');
        if (!colon) {
            *type = g_strdup(name);
            return TRUE;
        }
        *type = g_strndup(name, (gsize)(colon - name));
        if (!strcmp(colon + 1, "*"))
            return **type != '\0';
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || v < 0 || v > 1 << 20 || colon[1] == '\0') {
            g_clear_pointer(type, g_free);
            return FALSE;
        }
        *index = (int32_t)v;
        return **type != '\0';
    }
    g_auto(GStrv) parts = g_strsplit(name + 1, "/", -1);
    for (int i = 0; parts[i]; i++) {
        const char *p = parts[i];
        if (g_str_has_prefix(p, "job:")) {
            g_free(*job); /* a name may repeat a part: the last one counts */
            *job = g_strdup(p + 4);
        }
        else if (g_str_has_prefix(p, "replica:"))
            *replica = (int32_t)atoi(p + 8);
        else if (g_str_has_prefix(p, "task:"))
            *task = (int32_t)atoi(p + 5);
        else if (g_str_has_prefix(p, "device:")) {
            char *j2;
            int32_t r2, t2;
            g_free(*type);
            if (!parse_name(p + 7, &j2, &r2, &t2, type, index))
                return FALSE;
        } else {
            g_clear_pointer(job, g_free);
            g_clear_pointer(type, g_free);
            return FALSE;
        }
    }
    return TRUE;
}

char *psim_device_name_full(const char *name)
{
    char *job, *type;
    int32_t replica, task, index;
    if (!parse_name(name, &job, &replica, &task, &type, &index) || !type || index < 0) {
        g_free(job);
        g_free(type);
        return NULL;
    }
    char *full = g_strdup_printf("/job:%s/replica:%d/task:%d/device:%s:%d", job ? job : "localhost",
                                 replica < 0 ? 0 : replica, task < 0 ? 0 : task, type, index);
    g_free(job);
    g_free(type);
    return full;
}

int32_t psim_cluster_device_add(PsimCluster *c, const char *name, const char *type, GError **error)
{
    char *job, *ptype;
    int32_t replica, task, index;
    if (!parse_name(name, &job, &replica, &task, &ptype, &index) || !ptype || index < 0) {
        g_free(job);
        g_free(ptype);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "device '%s': malformed name (expected /job:J/replica:R/task:T/device:TYPE:N or TYPE:N)",
                    name ? name : "");
        return -1;
    }
    PsimDevice *d = g_new0(PsimDevice, 1);
    d->job = job ? job : g_strdup("localhost");
    d->replica = replica < 0 ? 0 : replica;
    d->task = task < 0 ? 0 : task;
    d->type = g_strdup(type && *type ? type : ptype);
    d->index = index;
    d->name = g_strdup_printf("/job:%s/replica:%d/task:%d/device:%s:%d", d->job, d->replica,
                              d->task, ptype, index);
    d->short_name = g_strdup_printf("%s:%d", ptype, index);
    g_free(ptype);
    d->cls = psim_device_class_find(d->type);
    d->gpu_ordinal = -1;
    d->n_streams = 1;
    /* Nominal rates until calibrated: the class's, or for an abstract processor a CPU-like
     * device whose costs the graph gives. */
    d->peak_gflops = d->cls ? d->cls->peak_gflops : 50;
    d->mem_bw_GBps = d->cls ? d->cls->mem_bw_GBps : 20;
    d->launch_us = d->cls ? d->cls->launch_us : 0;
    if (g_hash_table_contains(c->by_name, d->name)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "device '%s': listed twice", d->name);
        device_free(d);
        return -1;
    }
    g_ptr_array_add(c->devices, d);
    g_hash_table_insert(c->by_name, d->name, GINT_TO_POINTER(c->devices->len));
    if (!g_hash_table_contains(c->by_short, d->short_name))
        g_hash_table_insert(c->by_short, d->short_name, GINT_TO_POINTER(c->devices->len));
    int n_short = GPOINTER_TO_INT(g_hash_table_lookup(c->n_short, d->short_name));
    g_hash_table_insert(c->n_short, d->short_name, GINT_TO_POINTER(n_short + 1));
    c->version++;
    return (int32_t)c->devices->len - 1;
}

int32_t psim_cluster_device_find(const PsimCluster *c, const char *name)
{
    int i = GPOINTER_TO_INT(g_hash_table_lookup(c->by_name, name));
    if (!i)
        i = GPOINTER_TO_INT(g_hash_table_lookup(c->by_short, name));
    if (i)
        return i - 1;
    g_autofree char *full = psim_device_name_full(name);
    if (full)
        i = GPOINTER_TO_INT(g_hash_table_lookup(c->by_name, full));
    return i - 1;
}

int32_t psim_cluster_links_from(const PsimCluster *c, int32_t src)
{
    return src >= 0 && (guint)src < c->n_from->len ? g_array_index(c->n_from, int32_t, src) : 0;
}

int32_t psim_cluster_short_name_count(const PsimCluster *c, const char *short_name)
{
    return GPOINTER_TO_INT(g_hash_table_lookup(c->n_short, short_name));
}

gboolean psim_device_matches(const PsimDevice *d, const char *request)
{
    if (!request || !*request)
        return TRUE;
    char *job, *type;
    int32_t replica, task, index;
    if (!parse_name(request, &job, &replica, &task, &type, &index))
        return FALSE;
    /* A short request of one word is a device type ("GPU") or a type with index. */
    gboolean ok = TRUE;
    if (job && strcmp(job, "*") && strcmp(job, d->job))
        ok = FALSE;
    if (replica >= 0 && replica != d->replica)
        ok = FALSE;
    if (task >= 0 && task != d->task)
        ok = FALSE;
    if (type && strcmp(type, "*")) {
        /* "device:CPU:0" names the device's own TYPE:N (its short name's type), which for abstract
         * processors may differ from d->type only in case. */
        const char *colon = strrchr(d->short_name, ':');
        g_autofree char *stype = g_strndup(d->short_name, (gsize)(colon - d->short_name));
        if (g_ascii_strcasecmp(type, stype) && g_ascii_strcasecmp(type, d->type))
            ok = FALSE;
    }
    if (index >= 0 && index != d->index)
        ok = FALSE;
    g_free(job);
    g_free(type);
    return ok;
}

void psim_cluster_link_set(PsimCluster *c, int32_t src, int32_t dst, PsimLink link)
{
    gint64 *k = g_new(gint64, 1);
    *k = (gint64)(((guint64)(guint32)src << 32) | (guint32)dst);
    if (src >= 0 && !g_hash_table_contains(c->links, k)) {
        if ((guint)src >= c->n_from->len)
            g_array_set_size(c->n_from, (guint)src + 1);
        g_array_index(c->n_from, int32_t, src)++;
    }
    g_hash_table_replace(c->links, k, g_memdup2(&link, sizeof link));
    c->version++;
}

void psim_cluster_default_link_set(PsimCluster *c, PsimLink link)
{
    c->default_link = link;
    c->version++;
}

PsimLink psim_cluster_default_link(const PsimCluster *c) { return c->default_link; }

gboolean psim_cluster_link_is_set(const PsimCluster *c, int32_t src, int32_t dst)
{
    gint64 k = (gint64)(((guint64)(guint32)src << 32) | (guint32)dst);
    return g_hash_table_contains(c->links, &k);
}

static int cmp_ends(const void *a, const void *b)
{
    const PsimLinkEnds *x = a, *y = b;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return x->dst < y->dst ? -1 : x->dst > y->dst;
}

PsimLinkEnds *psim_cluster_links_set(const PsimCluster *c, int32_t *n)
{
    PsimLinkEnds *e = g_new(PsimLinkEnds, g_hash_table_size(c->links) + 1);
    int32_t k = 0;
    GHashTableIter it;
    gpointer key;
    g_hash_table_iter_init(&it, c->links);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        guint64 v = *(const guint64 *)key;
        e[k++] = (PsimLinkEnds){(int32_t)(v >> 32), (int32_t)(guint32)v};
    }
    qsort(e, (size_t)k, sizeof *e, cmp_ends);
    *n = k;
    return e;
}

PsimLink psim_cluster_link(const PsimCluster *c, int32_t src, int32_t dst)
{
    if (src == dst)
        return (PsimLink){.bandwidth_GBps = INFINITY, .latency_us = 0};
    gint64 k = (gint64)(((guint64)(guint32)src << 32) | (guint32)dst);
    PsimLink *l = g_hash_table_lookup(c->links, &k);
    return l ? *l : c->default_link;
}

double psim_cluster_link_time(const PsimCluster *c, int32_t src, int32_t dst, uint64_t bytes)
{
    if (src == dst)
        return 0;
    PsimLink l = psim_cluster_link(c, src, dst);
    return psim_link_time(&l, bytes);
}

double psim_link_latency(const PsimLink *l)
{
    return l->curve ? l->curve->us[0] : l->latency_us;
}

/* The curve's time at x bytes (PsimLinkCurve). */
static double curve_time(const PsimLinkCurve *k, double x)
{
    if (x <= k->bytes[0])
        return k->us[0];
    int32_t lo = 0, hi = k->n - 1;
    if (x >= k->bytes[hi])
        lo = hi - 1;
    else
        while (hi - lo > 1) {
            int32_t mid = (lo + hi) / 2;
            if (k->bytes[mid] <= x)
                lo = mid;
            else
                hi = mid;
        }
    double slope = (k->us[lo + 1] - k->us[lo]) / (k->bytes[lo + 1] - k->bytes[lo]);
    if (x > k->bytes[k->n - 1] && !(slope > 0)) /* flat at the end: the mean rate */
        slope = k->us[k->n - 1] / k->bytes[k->n - 1];
    return k->us[lo] + (x - k->bytes[lo]) * slope;
}

double psim_link_time(const PsimLink *l, uint64_t bytes)
{
    return l->curve ? curve_time(l->curve, (double)bytes) : l->latency_us + psim_link_occupancy(l, bytes);
}

double psim_link_occupancy(const PsimLink *l, uint64_t bytes)
{
    if (l->curve)
        return curve_time(l->curve, (double)bytes) - l->curve->us[0];
    return l->bandwidth_GBps > 0 && isfinite(l->bandwidth_GBps)
               ? (double)bytes / (l->bandwidth_GBps * 1e3) : 0;
}

/* Every device of the cluster has a kernel for op at dt. */
static gboolean cluster_runs(const char *op, PsimDType dt, void *user)
{
    const PsimCluster *c = user;
    for (int32_t d = 0; d < psim_cluster_n_devices(c); d++)
        if (!psim_kernel_lookup(op, psim_cluster_device(c, d)->type, dt))
            return FALSE;
    return psim_cluster_n_devices(c) > 0;
}

gboolean psim_cluster_fuse(const PsimCluster *c, const PsimGraph *g, PsimGraph **fused, int32_t *n_removed,
                           GError **error)
{
    return psim_graph_fuse(g, cluster_runs, (void *)c, fused, n_removed, error);
}
