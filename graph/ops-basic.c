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
    /* ONNX Constant from opset 12: value_int, value_ints, value_float, value_floats. */
    static const struct {
        const char *name;
        PsimDType dt;
    } forms[] = {{"value_int", PSIM_DTYPE_INT64}, {"value_ints", PSIM_DTYPE_INT64},
                 {"value_float", PSIM_DTYPE_FLOAT32}, {"value_floats", PSIM_DTYPE_FLOAT32}};
    for (size_t i = 0; i < G_N_ELEMENTS(forms); i++) {
        if (!(a = psim_node_attr(n, forms[i].name)))
            continue;
        gboolean list = g_str_has_suffix(forms[i].name, "s");
        int64_t len = list ? MAX(a->n, 0) : 1;
        if ((a->type == PSIM_ATTR_INTS || a->type == PSIM_ATTR_FLOATS) != list)
            break;
        g_autoptr(PsimTensor) t = psim_tensor_new(forms[i].dt, list ? 1 : 0, &len, error);
        if (!t)
            return FALSE;
        for (int64_t j = 0; j < len; j++) {
            if (forms[i].dt == PSIM_DTYPE_INT64)
                ((int64_t *)t->data)[j] = list ? a->v.ints[j] : psim_node_attr_int(n, a->name, 0);
            else
                ((float *)t->data)[j] = (float)(list ? a->v.floats[j]
                                                     : psim_node_attr_float(n, a->name, 0));
        }
        psim_graph_output_value_set(g, n, 0, t);
        return TRUE;
    }
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
    {"Placeholder", "a graph input, fed at run time", PSIM_OP_SOURCE, psim__infer_keep, count_zero},
    {"Identity", "passes its input through", 0, infer_identity, count_zero},
    {"NoOp", "does nothing; used for control dependencies", 0, psim__infer_keep, count_zero, NULL, -1},
    {"Task", "abstract task with annotated costs; no kernel", PSIM_OP_ABSTRACT, psim__infer_keep,
     count_task},
    /* Partitioning inserts these: a Send consumes a tensor on its device, the matching Recv
     * produces it on another (outputs set by the partitioner). */
    {"Send", "sends a tensor to another device (partitioning)", 0, psim__infer_keep, count_zero, NULL, -1},
    {"Recv", "receives a tensor from another device (partitioning)", 0, psim__infer_keep, count_zero},
};

void psim__ops_register_basic(void)
{
    psim__ops_register_group(basic_ops, G_N_ELEMENTS(basic_ops));
}
