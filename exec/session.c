/* Sessions: a graph on a cluster device, with a cache of prepared executors keyed by the run's
 * signature (feeds and fetches). A miss prepares an executor for what the fetches need (cut at
 * the feeds); a hit only launches. Extending the graph or changing the cluster
 * invalidates the cache. */
#include <string.h>

#include "exec-private.h"

typedef struct {
    PsimGraph *pruned; /* a pruned copy of the graph when one was made, or NULL */
    PsimExecutor *exec;
} Entry;

static void entry_free(gpointer p)
{
    Entry *en = p;
    psim_executor_free(en->exec);
    psim_graph_free(en->pruned);
    g_free(en);
}

struct PsimSession {
    PsimGraph *g;
    const PsimCluster *c;
    PsimWorker *w;
    PsimExecOptions opts;
    GHashTable *cache; /* signature -> Entry */
    uint64_t graph_version, cluster_version;
    PsimExecutor *last;
    PsimSessionStats stats;
};

PsimSession *psim_session_new(PsimGraph *g, const PsimCluster *c, const char *device,
                              const PsimExecOptions *opts, GError **error)
{
    g_return_val_if_fail(g != NULL && c != NULL, NULL);
    int32_t d = -1;
    if (device) {
        d = psim_cluster_device_find(c, device);
        if (d < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "device '%s' is not in the cluster", device);
            return NULL;
        }
    } else {
        for (int32_t i = 0; i < psim_cluster_n_devices(c) && d < 0; i++)
            if (psim_cluster_device(c, i)->cls && psim_cluster_device(c, i)->cls->host)
                d = i;
        if (d < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "the cluster has no host (CPU) device");
            return NULL;
        }
    }
    if (opts && (opts->order == PSIM_EXEC_ORDER_STATIC || opts->priority)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "a session orders nodes itself (FIFO); static orders and priorities come "
                    "with a plan");
        return NULL;
    }
    PsimWorker *w = psim_worker_new(psim_cluster_device(c, d), error);
    if (!w)
        return NULL;
    PsimSession *s = g_new0(PsimSession, 1);
    s->g = g;
    s->c = c;
    s->w = w;
    if (opts)
        s->opts = *opts;
    s->cache = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, entry_free);
    s->graph_version = psim_graph_version(g);
    s->cluster_version = psim_cluster_version(c);
    return s;
}

void psim_session_free(PsimSession *s)
{
    if (!s)
        return;
    g_hash_table_destroy(s->cache);
    psim_worker_free(s->w);
    g_free(s);
}

/* Canonical "node:k" / "^node" refs, so that a tensor name and its node ref share a signature
 * and the pruner sees node refs only. */
char **psim__exec_canonical_refs(const PsimGraph *g, int32_t n, const char *const *refs,
                                 gboolean allow_target, GError **error)
{
    char **out = g_new0(char *, n + 1);
    for (int32_t i = 0; i < n; i++) {
        PsimPort p;
        if (!psim__exec_resolve_ref(g, refs[i], allow_target, &p, error)) {
            g_strfreev(out);
            return NULL;
        }
        const PsimNode *node = psim_graph_node(g, p.node);
        out[i] = p.index < 0 ? g_strdup_printf("^%s", node->name)
                             : g_strdup_printf("%s:%d", node->name, p.index);
    }
    return out;
}

gboolean psim_session_run(PsimSession *s, int32_t n_feeds, const char *const *feed_names,
                          PsimTensor *const *feeds, int32_t n_fetches,
                          const char *const *fetches, PsimTensor **outputs, GError **error)
{
    s->stats.n_runs++;
    if (psim_graph_version(s->g) != s->graph_version ||
        psim_cluster_version(s->c) != s->cluster_version) {
        g_hash_table_remove_all(s->cache);
        s->last = NULL;
        s->graph_version = psim_graph_version(s->g);
        s->cluster_version = psim_cluster_version(s->c);
        s->stats.n_invalidations++;
    }
    /* The signature is the refs as given: a hit costs one string build and one lookup. */
    g_autoptr(GString) sig = g_string_new(NULL);
    for (int32_t i = 0; i < n_feeds; i++)
        g_string_append_printf(sig, "%s\x1f", feed_names[i]);
    g_string_append_c(sig, '\x1e');
    for (int32_t i = 0; i < n_fetches; i++)
        g_string_append_printf(sig, "%s\x1f", fetches[i]);
    Entry *en = g_hash_table_lookup(s->cache, sig->str);
    if (en) {
        s->stats.n_cache_hits++;
    } else {
        g_auto(GStrv) cf = psim__exec_canonical_refs(s->g, n_feeds, feed_names, FALSE, error);
        if (!cf)
            return FALSE;
        g_auto(GStrv) ct = psim__exec_canonical_refs(s->g, n_fetches, fetches, TRUE, error);
        if (!ct)
            return FALSE;
        s->stats.n_prunes++;
        /* One device: the executor itself keeps only what the fetches need, cut at the feeds,
         * so the graph is not copied. (With a plan, the graph is pruned with
         * psim_graph_prune before it is placed and partitioned.) */
        PsimGraph *pruned = NULL;
        PsimExecutor *e = psim_executor_new(s->g, s->w, (const char *const *)cf, n_feeds,
                                            (const char *const *)ct, n_fetches, &s->opts, error);
        if (!e)
            return FALSE;
        en = g_new0(Entry, 1);
        en->pruned = pruned;
        en->exec = e;
        g_hash_table_insert(s->cache, g_strdup(sig->str), en);
    }
    s->last = en->exec;
    return psim_executor_run(en->exec, feeds, outputs, error);
}

void psim_session_stats(const PsimSession *s, PsimSessionStats *out) { *out = s->stats; }
PsimExecutor *psim_session_last_executor(PsimSession *s) { return s->last; }
PsimWorker *psim_session_worker(PsimSession *s) { return s->w; }
