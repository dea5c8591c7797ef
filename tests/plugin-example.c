/* An example placesim plug-in: registers the op SquarePlusOne (y = x * x + 1, float32) with its
 * shape inference and a CPU kernel. Built as a MODULE library; psim_plugin_load runs
 * psim_plugin_init. It links against nothing: the host program exports the placesim API. */
#include <gmodule.h>

#include "placesim/kernels.h"

static gboolean infer(PsimGraph *g, PsimNode *n, GError **error)
{
    if (n->n_inputs != 1 || n->inputs[0].node < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "node '%s': SquarePlusOne needs one input",
                    n->name);
        return FALSE;
    }
    const PsimNode *src = psim_graph_node(g, n->inputs[0].node);
    const PsimOutput *in = &src->outputs[n->inputs[0].index];
    psim_graph_output_set(g, n, 0, in->dtype, in->rank, in->dims);
    return TRUE;
}

static gboolean run(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *x = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL;
    if (!x || x->dtype != PSIM_DTYPE_FLOAT32) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "node '%s': needs a float32 input",
                    ctx->node->name);
        return FALSE;
    }
    PsimTensor *y = ctx->alloc(ctx, PSIM_DTYPE_FLOAT32, x->rank, x->dims, error);
    if (!y)
        return FALSE;
    const float *a = x->data;
    float *b = y->data;
    for (int64_t i = 0; i < x->n_elems; i++)
        b[i] = a[i] * a[i] + 1.0f;
    ctx->outputs[0] = y;
    return TRUE;
}

static const PsimOpDef op = {"SquarePlusOne", "x * x + 1 (example plug-in op)", 0, infer, NULL};

static const PsimKernelDef kernel = {
    .op = "SquarePlusOne",
    .device_type = "CPU",
    .dtype = PSIM_DTYPE_FLOAT32,
    .name = "example-square-plus-one",
    .description = "x * x + 1 on the host",
    .run = run,
};

G_MODULE_EXPORT gboolean psim_plugin_init(GError **error);

G_MODULE_EXPORT gboolean psim_plugin_init(GError **error)
{
    (void)error;
    psim_op_register(&op);
    psim_kernel_register(&kernel);
    return TRUE;
}
