/* Default feeds and fetches shared by the subcommands that run graphs (run, study): each float
 * graph input not given gets arange(n)/n in its shape with unknown dimensions taken as 1 (how
 * ONNX made its reference outputs); graphs that list no outputs fetch every tensor nothing
 * consumes. */
#include <string.h>

#include "tools/cli.h"

gboolean psim_cli_feed_names_input(const PsimNode *n, const char *name)
{
    if (!strcmp(name, n->name))
        return TRUE;
    size_t l = strlen(n->name);
    if (!strncmp(name, n->name, l) && !strcmp(name + l, ":0"))
        return TRUE;
    return n->n_outputs > 0 && n->outputs[0].name && !strcmp(n->outputs[0].name, name);
}

static PsimTensor *arange_feed(const PsimGraph *g, const PsimNode *n, GError **error)
{
    const char *src = psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g);
    const PsimOutput *o = &n->outputs[0];
    if (o->rank < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: node '%s': graph input of unknown rank: give it with --feed %s=FILE.pb",
                    src, n->name, n->name);
        return NULL;
    }
    g_autofree int64_t *dims = g_new(int64_t, o->rank + 1);
    for (int32_t i = 0; i < o->rank; i++)
        dims[i] = o->dims[i] >= 0 ? o->dims[i] : 1;
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, o->rank, dims, error);
    if (!t) {
        g_prefix_error(error, "%s: node '%s': ", src, n->name);
        return NULL;
    }
    float *p = t->data;
    for (int64_t i = 0; i < t->n_elems; i++)
        p[i] = (float)((double)i / (double)t->n_elems);
    return t;
}

gboolean psim_cli_default_feeds(const PsimGraph *g, GPtrArray *names, GPtrArray *tensors,
                                GError **error)
{
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++) {
        const PsimNode *n = psim_graph_node(g, psim_graph_input(g, i));
        if (n->n_outputs < 1 || n->outputs[0].value || (n->flags & PSIM_NODE_PARAMETER))
            continue; /* an initializer */
        gboolean given = FALSE;
        for (guint k = 0; k < names->len && !given; k++)
            given = psim_cli_feed_names_input(n, g_ptr_array_index(names, k));
        if (given || n->outputs[0].dtype != PSIM_DTYPE_FLOAT32)
            continue; /* other dtypes need --feed; the executor says so if they are needed */
        PsimTensor *t = arange_feed(g, n, error);
        if (!t)
            return FALSE;
        g_ptr_array_add(names, g_strdup(n->name));
        g_ptr_array_add(tensors, t);
    }
    return TRUE;
}

void psim_cli_default_fetches(const PsimGraph *g, GArray *ports)
{
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort p = psim_graph_output(g, i);
        g_array_append_val(ports, p);
    }
    if (ports->len)
        return;
    /* Files that list no outputs (TF GraphDefs): every tensor nothing consumes. */
    int32_t nn = psim_graph_n_nodes(g);
    g_autofree guint8 *used = g_new0(guint8, nn + 1);
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0)
                used[n->inputs[k].node] = 1;
    }
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        const PsimOpDef *d = psim_op_lookup(n->op);
        if (used[v] || (d && (d->flags & PSIM_OP_SOURCE)))
            continue;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            PsimPort p = {v, k};
            g_array_append_val(ports, p);
        }
    }
}
