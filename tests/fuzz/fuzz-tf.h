/* Checks shared by the TF GraphDef fuzz targets: on top of fuzz-common.h's error check, what
 * imports must survive a pbtxt export and re-import (same nodes and edges) and a JSON one. */
#ifndef PSIM_FUZZ_TF_H
#define PSIM_FUZZ_TF_H

#include "fuzz-common.h"
#include "placesim/formats.h"

/* Reads back an export: it must load, with the same node and edge counts. */
static inline void fuzz_tf_reload(const char *path, PsimFormat f, const char *text, gsize len,
                                  const PsimGraph *g)
{
    GError *err = NULL;
    PsimGraph *h = psim_graph_load_data(path, f, (const guint8 *)text, len, NULL, &err);
    if (!h || psim_graph_n_nodes(h) != psim_graph_n_nodes(g) ||
        psim_graph_n_edges(h) != psim_graph_n_edges(g))
        abort();
    psim_graph_free(h);
}

static inline void fuzz_tf_one(const char *path, PsimFormat f, const uint8_t *data, size_t size)
{
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data(path, f, data, size, NULL, &err);
    if (!g) {
        fuzz_check_error(err, path);
        g_clear_error(&err);
        return;
    }
    PsimGraphStats st;
    psim_graph_stats(g, &st);
    int32_t *order = psim_graph_topo_order(g, &err);
    if (!order)
        abort(); /* an imported graph is a DAG */
    g_free(order);
    /* A graph that came from TF reads back from pbtxt with the same nodes and edges. */
    char *text = psim_export_pbtxt(g, &err);
    if (!text)
        abort();
    fuzz_tf_reload("fuzz-roundtrip.pbtxt", PSIM_FORMAT_TF_PBTXT, text, strlen(text), g);
    g_free(text);
    gsize len = 0;
    char *json = psim_export_json(g, &len);
    fuzz_tf_reload("fuzz-roundtrip.json", PSIM_FORMAT_JSON, json, len, g);
    g_free(json);
    psim_graph_free(g);
}

#endif
