/* Source and structural ops: Const/Constant, Placeholder, Identity, NoOp, and the abstract Task
 * of task graphs, whose outputs are sized by annotation. */
#include "ops-private.h"

#include <string.h>

static gboolean infer_const(PsimGraph *g, PsimNode *n, GError **error)
{
    if (n->n_outputs >= 1 && n->outputs[0].value)
        return TRUE;
    const PsimAttr *a = psim_node_attr(n, "value");
    if (a && a->type == PSIM_ATTR_TENSOR && a->v.t) {
        psim_graph_output_value_set(g, n, 0, a->v.t);
        return TRUE;
    }
    (void)error;
    return TRUE; /* shape given in the file (JSON "outputs"), value made at run time by "fill" */
}

static gboolean infer_identity(PsimGraph *g, PsimNode *n, GError **error)
{
    const PsimOutput *in = psim__input(g, n, 0);
    if (!in) {
        psim__error_node(error, g, n, "%s needs one input", n->op);
        return FALSE;
    }
    psim_graph_output_set(g, n, 0, in->dtype, in->rank, in->dims);
    if (in->value)
        psim_graph_output_value_set(g, n, 0, in->value);
    return TRUE;
}

static gboolean infer_keep(PsimGraph *g, PsimNode *n, GError **error)
{
    (void)g;
    (void)n;
    (void)error;
    return TRUE;
}

static void count_zero(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    (void)g;
    (void)n;
    memset(out, 0, sizeof *out);
}

static void count_task(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    (void)g;
    memset(out, 0, sizeof *out);
    for (int32_t k = 0; k < n->n_outputs; k++)
        out->bytes_written += n->outputs[k].bytes;
}

static const PsimOpDef basic_ops[] = {
    {"Const", "a constant tensor (value attr or fill)", PSIM_OP_SOURCE, infer_const, count_zero},
    {"Constant", "ONNX constant", PSIM_OP_SOURCE, infer_const, count_zero},
    {"Placeholder", "a graph input, fed at run time", PSIM_OP_SOURCE, infer_keep, count_zero},
    {"Identity", "passes its input through", 0, infer_identity, count_zero},
    {"NoOp", "does nothing; used for control dependencies", 0, infer_keep, count_zero, NULL, -1},
    {"Task", "abstract task with annotated costs; no kernel", PSIM_OP_ABSTRACT, infer_keep,
     count_task},
    /* Partitioning inserts these: a Send consumes a tensor on its device, the matching Recv
     * produces it on another (outputs set by the partitioner). */
    {"Send", "sends a tensor to another device (partitioning)", 0, infer_keep, count_zero, NULL, -1},
    {"Recv", "receives a tensor from another device (partitioning)", 0, infer_keep, count_zero},
};

void psim__ops_register_basic(void)
{
    psim__ops_register_group(basic_ops, G_N_ELEMENTS(basic_ops));
}
