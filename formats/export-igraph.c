/* DOT and GraphML export through igraph: the IR's nodes become vertices with string attributes
 * (name, op, device: the assigned device, else the requested one), its data and control
 * inputs become edges (kind, bytes, src_output, dst_input), and igraph writes the file into a
 * memory stream. */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <igraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { EXPORT_DOT, EXPORT_GRAPHML } ExportKind;

#define IG_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((expr) != IGRAPH_SUCCESS) {                                                            \
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: igraph failed in %s",          \
                        psim_graph_name(g), #expr);                                                \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static char *export_igraph(const PsimGraph *g, ExportKind kind, GError **error)
{
    psim__igraph_init();
    int32_t n = psim_graph_n_nodes(g);
    int64_t m = psim_graph_n_edges(g);
    igraph_t ig;
    gboolean ig_made = FALSE;
    igraph_vector_int_t edges;
    igraph_strvector_t names, ops, devices;
    igraph_vector_t bytes, src_out, dst_in;
    igraph_strvector_t kinds;
    char *buf = NULL, *result = NULL;
    size_t size = 0;
    FILE *f = NULL;

    /* igraph is not thread-safe: the same lock as every other use of it. */
    psim__igraph_lock();
    /* Vectors are made in order and `made` counts them, so that cleanup destroys exactly the
     * ones that exist when an allocation fails. */
    int made = 0;
    if (igraph_vector_int_init(&edges, 2 * m) == IGRAPH_SUCCESS && ++made &&
        igraph_strvector_init(&names, n) == IGRAPH_SUCCESS && ++made &&
        igraph_strvector_init(&ops, n) == IGRAPH_SUCCESS && ++made &&
        igraph_strvector_init(&devices, n) == IGRAPH_SUCCESS && ++made &&
        igraph_strvector_init(&kinds, m) == IGRAPH_SUCCESS && ++made &&
        igraph_vector_init(&bytes, m) == IGRAPH_SUCCESS && ++made &&
        igraph_vector_init(&src_out, m) == IGRAPH_SUCCESS && ++made &&
        igraph_vector_init(&dst_in, m) == IGRAPH_SUCCESS)
        ++made;
    if (made < 8) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: out of memory for %d nodes",
                    psim_graph_name(g), n);
        goto out;
    }
    int64_t e = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        IG_TRY(igraph_strvector_set(&names, v, nd->name));
        IG_TRY(igraph_strvector_set(&ops, v, nd->op));
        const char *dev = nd->assigned_device ? nd->assigned_device : nd->device;
        IG_TRY(igraph_strvector_set(&devices, v, dev ? dev : ""));
        for (int32_t k = 0; k < nd->n_inputs; k++) {
            PsimPort p = nd->inputs[k];
            if (p.node < 0)
                continue;
            const PsimNode *src = psim_graph_node(g, p.node);
            VECTOR(edges)[2 * e] = p.node;
            VECTOR(edges)[2 * e + 1] = v;
            IG_TRY(igraph_strvector_set(&kinds, e, "data"));
            VECTOR(bytes)[e] = p.index < src->n_outputs ? (double)src->outputs[p.index].bytes : 0;
            VECTOR(src_out)[e] = p.index;
            VECTOR(dst_in)[e] = k;
            e++;
        }
        for (int32_t k = 0; k < nd->n_controls; k++) {
            VECTOR(edges)[2 * e] = nd->controls[k];
            VECTOR(edges)[2 * e + 1] = v;
            IG_TRY(igraph_strvector_set(&kinds, e, "control"));
            VECTOR(bytes)[e] = 0;
            VECTOR(src_out)[e] = -1;
            VECTOR(dst_in)[e] = -1;
            e++;
        }
    }
    g_assert(e == m);
    IG_TRY(igraph_empty(&ig, n, IGRAPH_DIRECTED));
    ig_made = TRUE;
    IG_TRY(igraph_add_edges(&ig, &edges, NULL));
    IG_TRY(SETGAS(&ig, "name", psim_graph_name(g)));
    IG_TRY(SETVASV(&ig, "name", &names));
    IG_TRY(SETVASV(&ig, "op", &ops));
    IG_TRY(SETVASV(&ig, "device", &devices));
    if (kind == EXPORT_DOT)
        IG_TRY(SETVASV(&ig, "label", &names));
    IG_TRY(SETEASV(&ig, "kind", &kinds));
    IG_TRY(SETEANV(&ig, "bytes", &bytes));
    IG_TRY(SETEANV(&ig, "src_output", &src_out));
    IG_TRY(SETEANV(&ig, "dst_input", &dst_in));

    f = open_memstream(&buf, &size);
    if (!f) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot open a memory stream",
                    psim_graph_name(g));
        goto out;
    }
    if (kind == EXPORT_DOT)
        IG_TRY(igraph_write_graph_dot(&ig, f));
    else
        IG_TRY(igraph_write_graph_graphml(&ig, f, /*prefixattr=*/1));
    if (fclose(f) != 0) {
        f = NULL;
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot write the memory stream",
                    psim_graph_name(g));
        goto out;
    }
    f = NULL;
    result = g_strndup(buf, size);
out:
    if (f)
        fclose(f);
    free(buf);
    if (ig_made)
        igraph_destroy(&ig);
    if (made > 7)
        igraph_vector_destroy(&dst_in);
    if (made > 6)
        igraph_vector_destroy(&src_out);
    if (made > 5)
        igraph_vector_destroy(&bytes);
    if (made > 4)
        igraph_strvector_destroy(&kinds);
    if (made > 3)
        igraph_strvector_destroy(&devices);
    if (made > 2)
        igraph_strvector_destroy(&ops);
    if (made > 1)
        igraph_strvector_destroy(&names);
    if (made > 0)
        igraph_vector_int_destroy(&edges);
    psim__igraph_unlock();
    return result;
}

char *psim_export_dot(const PsimGraph *g, GError **error)
{
    return export_igraph(g, EXPORT_DOT, error);
}

char *psim_export_graphml(const PsimGraph *g, GError **error)
{
    return export_igraph(g, EXPORT_GRAPHML, error);
}
