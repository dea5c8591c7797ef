/* TEMPORARY: functions declared in graph.h whose real implementation is being written. Each one
 * is deleted from here when its module lands. */
#include "graph-private.h"

#define NOT_YET(path) psim__error_file(error, path, "not implemented yet")

PsimGraph *psim_graph_prune(const PsimGraph *g, const char *const *feeds, int n_feeds,
                            const char *const *fetches, int n_fetches, GError **error)
{ (void)g; (void)feeds; (void)n_feeds; (void)fetches; (void)n_fetches; NOT_YET("prune"); return NULL; }
PsimGraph *psim_graph_cse(const PsimGraph *g, int32_t *n_merged, GError **error)
{ (void)g; (void)n_merged; NOT_YET("cse"); return NULL; }
int32_t psim_graph_fold_constants(PsimGraph *g, GError **error) { (void)g; (void)error; return 0; }
