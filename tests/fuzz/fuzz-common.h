/* Shared checks of the libFuzzer targets: an input either imports into a consistent graph or
 * fails with one INPUT error line that names the file; a graph that imports survives what the
 * tools do with it (statistics, topological order, JSON export and re-import). */
#ifndef PSIM_FUZZ_COMMON_H
#define PSIM_FUZZ_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void fuzz_check_error(const GError *err, const char *path)
{
    size_t pl = strlen(path);
    if (!err || err->domain != PSIM_ERROR ||
        (err->code != PSIM_ERROR_INPUT && err->code != PSIM_ERROR_UNSUPPORTED) ||
        strncmp(err->message, path, pl) != 0 || strncmp(err->message + pl, ": ", 2) != 0 ||
        strchr(err->message, '\n'))
        abort();
}

/* Loads data as format f; on success exercises the graph, on failure checks the error. */
static inline void fuzz_one(const char *path, PsimFormat f, const uint8_t *data, size_t size,
                            gboolean training)
{
    GError *err = NULL;
    PsimImportOptions opts = {.training = training};
    PsimGraph *g = psim_graph_load_data(path, f, data, size, &opts, &err);
    if (!g) {
        fuzz_check_error(err, path);
        g_clear_error(&err);
        return;
    }
    PsimGraphStats st;
    psim_graph_stats(g, &st);
    int32_t n = psim_graph_n_nodes(g);
    int32_t *order = psim_graph_topo_order(g, &err);
    if (!order)
        abort(); /* an imported graph is a DAG */
    double *cost = g_new0(double, n ? n : 1);
    for (int32_t i = 0; i < n; i++)
        psim_node_cost_lookup(psim_graph_node(g, i), "/job:localhost/replica:0/task:0/device:GPU:0",
                              "GPU", &cost[i]);
    if (psim_graph_critical_path(g, cost, NULL, NULL, NULL, NULL, &err) < 0)
        abort();
    g_free(cost);
    g_free(order);
    gsize len = 0;
    char *json = psim_export_json(g, &len);
    PsimGraph *g2 = psim_graph_load_data("fuzz-roundtrip.json", PSIM_FORMAT_JSON, (const guint8 *)json,
                                         len, NULL, &err);
    if (!g2 || psim_graph_n_nodes(g2) != n)
        abort(); /* what we export we must read back */
    psim_graph_free(g2);
    g_free(json);
    psim_graph_free(g);
}

#endif
