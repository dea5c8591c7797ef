/* The op registry, graph-wide shape inference, counts and statistics. Op definitions live in
 * ops-*.c files, each registering its group from psim__ops_init. */
#include "graph-private.h"
#include "ops-private.h"

#include <string.h>

static GHashTable *registry; /* name -> const PsimOpDef* */
static GMutex registry_lock;

void psim_op_register(const PsimOpDef *def)
{
    psim__ops_init();
    g_mutex_lock(&registry_lock);
    g_hash_table_replace(registry, (gpointer)def->name, (gpointer)def);
    g_mutex_unlock(&registry_lock);
}

const PsimOpDef *psim_op_lookup(const char *name)
{
    psim__ops_init();
    g_mutex_lock(&registry_lock);
    const PsimOpDef *d = g_hash_table_lookup(registry, name);
    g_mutex_unlock(&registry_lock);
    return d;
}

gboolean psim_op_is_variable(const char *op)
{
    return op && (!strcmp(op, "VariableV2") || !strcmp(op, "Variable"));
}

static int cmp_def(const void *a, const void *b)
{
    return strcmp((*(const PsimOpDef *const *)a)->name, (*(const PsimOpDef *const *)b)->name);
}

const PsimOpDef **psim_op_list(int32_t *n)
{
    psim__ops_init();
    g_mutex_lock(&registry_lock);
    guint len = g_hash_table_size(registry), i = 0;
    gpointer *vals = g_new(gpointer, len + 1);
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, registry);
    while (g_hash_table_iter_next(&it, &k, &v))
        vals[i++] = v;
    g_mutex_unlock(&registry_lock);
    qsort(vals, len, sizeof(gpointer), cmp_def);
    *n = (int32_t)len;
    return (const PsimOpDef **)vals;
}

void psim__ops_register_group(const PsimOpDef *defs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g_hash_table_replace(registry, (gpointer)defs[i].name, (gpointer)&defs[i]);
}

void psim__ops_init(void)
{
    static gsize once = 0;
    if (g_once_init_enter(&once)) {
        registry = g_hash_table_new(g_str_hash, g_str_equal);
        psim__ops_register_basic();
        psim__ops_register_tf();
        psim__ops_register_math();
        psim__ops_register_nn();
        psim__ops_register_shape();
        psim__ops_register_train();
        g_once_init_leave(&once, 1);
    }
}

const PsimOpDef *psim__op_for_node(const PsimNode *n)
{
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) {
        const PsimOpDef *d = psim_op_lookup(n->op);
        return d && d->domain && !strcmp(n->domain, d->domain) ? d : NULL;
    }
    return psim_op_lookup(n->op);
}

gboolean psim_graph_infer_shapes(PsimGraph *g, GError **error)
{
    g_autofree int32_t *order = psim_graph_topo_order(g, error);
    if (!order)
        return FALSE;
    int32_t n = psim_graph_n_nodes(g);
    for (int32_t i = 0; i < n; i++) {
        PsimNode *v = psim_graph_node(g, order[i]);
        if (v->flags & PSIM_NODE_FED)
            continue;
        const PsimOpDef *d = psim__op_for_node(v);
        if (d && d->infer && !d->infer(g, v, error))
            return FALSE;
    }
    return TRUE;
}

void psim_graph_node_count(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    const PsimOpDef *d = psim__op_for_node(n);
    if (d && d->count) {
        d->count(g, n, out);
        return;
    }
    /* Unknown ops: count the bytes they move, no FLOPs. */
    for (int32_t k = 0; k < n->n_inputs; k++) {
        const PsimOutput *o = psim__input(g, n, k);
        if (o)
            out->bytes_read += o->bytes;
    }
    for (int32_t k = 0; k < n->n_outputs; k++)
        out->bytes_written += n->outputs[k].bytes;
}

static gboolean is_float_dtype(PsimDType t)
{
    return t == PSIM_DTYPE_FLOAT32 || t == PSIM_DTYPE_FLOAT64 || t == PSIM_DTYPE_FLOAT16 ||
           t == PSIM_DTYPE_BFLOAT16;
}

/* Parameters are what stays resident between steps: outputs of constant nodes (initializers,
 * Const, and constant subgraphs such as weights made by ConstantOfShape) that a non-constant
 * node consumes, or that nothing consumes. Constants consumed only inside a constant subgraph
 * (the shape feeding ConstantOfShape) are not counted, so a weight is counted once. Outputs of
 * folded or constant subgraphs count only when they are float weights; initializers and Const
 * nodes count whatever their dtype. */
void psim_graph_stats(const PsimGraph *g, PsimGraphStats *out)
{
    memset(out, 0, sizeof *out);
    out->n_nodes = psim_graph_n_nodes(g);
    out->n_edges = psim_graph_n_edges(g);
    int32_t nn = out->n_nodes;
    g_autofree guint8 *cst = g_new0(guint8, nn ? nn : 1);
    g_autofree guint8 *live = g_new0(guint8, nn ? nn : 1); /* 1: consumed by a non-constant */
    g_autofree guint8 *used = g_new0(guint8, nn ? nn : 1);
    for (int32_t i = 0; i < nn; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        cst[i] = (v->flags & (PSIM_NODE_CONSTANT | PSIM_NODE_PARAMETER)) || !strcmp(v->op, "Const") ||
                 !strcmp(v->op, "Constant");
    }
    for (int32_t i = 0; i < nn; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        for (int32_t k = 0; k < v->n_inputs; k++) {
            int32_t src = v->inputs[k].node;
            if (src < 0)
                continue;
            used[src] = 1;
            if (!cst[i])
                live[src] = 1;
        }
    }
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort p = psim_graph_output(g, i);
        if (p.node >= 0)
            live[p.node] = 1;
    }
    for (int32_t i = 0; i < nn; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        if (cst[i]) {
            if (!live[i] && used[i])
                continue;
            gboolean source = (v->flags & PSIM_NODE_PARAMETER) || !strcmp(v->op, "Const") ||
                              !strcmp(v->op, "Constant");
            for (int32_t k = 0; k < v->n_outputs; k++)
                if (source || is_float_dtype(v->outputs[k].dtype))
                    out->param_bytes += v->outputs[k].bytes;
            continue;
        }
        PsimOpCount c;
        psim_graph_node_count(g, v, &c);
        out->flops += c.flops;
        for (int32_t k = 0; k < v->n_outputs; k++)
            out->activation_bytes += v->outputs[k].bytes;
    }
}
