/* Sessions over several devices (the whitepaper's master): the first run of a signature (feeds
 * and fetches) prunes the graph to it, places the pruned graph, partitions it into a plan and
 * instantiates one worker and executor per device; the result is cached, so that a later run
 * with the same signature only launches. Extending the graph or changing the cluster drops the
 * cache. */
#include <string.h>

#include "exec-private.h"

typedef struct {
    PsimGraph *pruned;
    PsimPlan *plan;
    PsimPlanExec *exec;
} Entry;

static void entry_free(gpointer p)
{
    Entry *en = p;
    /* The executors borrow the plan, which borrows nothing from the pruned graph. */
    psim_plan_exec_free(en->exec);
    psim_plan_free(en->plan);
    psim_graph_free(en->pruned);
    g_free(en);
}

struct PsimPlanSession {
    PsimGraph *g;
    const PsimCluster *c;
    PsimCostDb *db;
    char *algo;
    PsimPlaceOptions po;
    gboolean dynamic;
    PsimCostModel *model; /* over c, rebuilt when c changes */
    GHashTable *cache;    /* signature -> Entry */
    uint64_t graph_version, cluster_version;
    Entry *last;
    GString *sig;
    PsimPlanSessionStats stats;
};

PsimPlanSession *psim_plan_session_new(PsimGraph *g, const PsimCluster *c, PsimCostDb *db,
                                       const char *algo, const PsimPlaceOptions *po,
                                       gboolean dynamic, GError **error)
{
    g_return_val_if_fail(g != NULL && c != NULL && algo != NULL, NULL);
    if (!psim_placer_lookup(algo)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "no placement algorithm '%s'", algo);
        return NULL;
    }
    PsimPlanSession *s = g_new0(PsimPlanSession, 1);
    s->g = g;
    s->c = c;
    s->db = db;
    s->algo = g_strdup(algo);
    if (po)
        s->po = *po;
    else
        psim_place_options_init(&s->po);
    s->dynamic = dynamic;
    s->cache = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, entry_free);
    s->graph_version = psim_graph_version(g);
    s->cluster_version = psim_cluster_version(c);
    s->sig = g_string_sized_new(128);
    return s;
}

void psim_plan_session_free(PsimPlanSession *s)
{
    if (!s)
        return;
    g_hash_table_destroy(s->cache);
    psim_cost_model_free(s->model);
    g_string_free(s->sig, TRUE);
    g_free(s->algo);
    g_free(s);
}

/* Prunes, places, partitions and instantiates for one signature. */
static Entry *prepare(PsimPlanSession *s, int32_t n_feeds, const char *const *feed_names,
                      int32_t n_fetches, const char *const *fetches, GError **error)
{
    g_auto(GStrv) cf = psim__exec_canonical_refs(s->g, n_feeds, feed_names, FALSE, error);
    if (!cf)
        return NULL;
    g_auto(GStrv) ct = psim__exec_canonical_refs(s->g, n_fetches, fetches, TRUE, error);
    if (!ct)
        return NULL;
    if (!s->model)
        s->model = psim_cost_model_new(s->c, s->db);
    Entry *en = g_new0(Entry, 1);
    s->stats.n_prunes++;
    en->pruned = psim_graph_prune(s->g, (const char *const *)cf, n_feeds, (const char *const *)ct,
                                  n_fetches, error);
    if (!en->pruned)
        goto fail;
    {
        g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(en->pruned, s->model, &s->po, error);
        if (!ctx)
            goto fail;
        s->stats.n_places++;
        g_autoptr(PsimPlacement) pl = psim_place(ctx, s->algo, error);
        if (!pl)
            goto fail;
        s->stats.n_partitions++;
        en->plan = psim_plan_build(ctx, pl, error);
        if (!en->plan)
            goto fail;
    }
    s->stats.n_instantiations++;
    en->exec = psim_plan_exec_new(en->plan, s->c, (const char *const *)cf, n_feeds,
                                  (const char *const *)ct, n_fetches, s->dynamic, error);
    if (!en->exec)
        goto fail;
    return en;
fail:
    entry_free(en);
    return NULL;
}

gboolean psim_plan_session_run(PsimPlanSession *s, int32_t n_feeds, const char *const *feed_names,
                               PsimTensor *const *feeds, int32_t n_fetches,
                               const char *const *fetches, PsimTensor **outputs, GError **error)
{
    s->stats.n_runs++;
    if (psim_graph_version(s->g) != s->graph_version ||
        psim_cluster_version(s->c) != s->cluster_version) {
        g_hash_table_remove_all(s->cache);
        s->last = NULL;
        if (psim_cluster_version(s->c) != s->cluster_version)
            g_clear_pointer(&s->model, psim_cost_model_free);
        s->graph_version = psim_graph_version(s->g);
        s->cluster_version = psim_cluster_version(s->c);
        s->stats.n_invalidations++;
    }
    /* The signature is the refs as given: a hit costs one string build and one lookup. */
    GString *sig = s->sig;
    g_string_truncate(sig, 0);
    for (int32_t i = 0; i < n_feeds; i++) {
        g_string_append(sig, feed_names[i]);
        g_string_append_c(sig, '\x1f');
    }
    g_string_append_c(sig, '\x1e');
    for (int32_t i = 0; i < n_fetches; i++) {
        g_string_append(sig, fetches[i]);
        g_string_append_c(sig, '\x1f');
    }
    Entry *en = g_hash_table_lookup(s->cache, sig->str);
    if (en) {
        s->stats.n_cache_hits++;
    } else {
        en = prepare(s, n_feeds, feed_names, n_fetches, fetches, error);
        if (!en)
            return FALSE;
        g_hash_table_insert(s->cache, g_strdup(sig->str), en);
    }
    s->last = en;
    return psim_plan_exec_run(en->exec, feeds, outputs, error);
}

void psim_plan_session_stats(const PsimPlanSession *s, PsimPlanSessionStats *out)
{
    *out = s->stats;
}

PsimPlanExec *psim_plan_session_last_exec(PsimPlanSession *s)
{
    return s->last ? s->last->exec : NULL;
}

const PsimPlan *psim_plan_session_last_plan(PsimPlanSession *s)
{
    return s->last ? s->last->plan : NULL;
}
