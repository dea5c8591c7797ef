/* Helpers shared by the op definition files (ops-*.c). */
#ifndef PLACESIM_OPS_PRIVATE_H
#define PLACESIM_OPS_PRIVATE_H

#include "graph-private.h"

/* Registers an array of definitions (called under psim__ops_init only). */
void psim__ops_register_group(const PsimOpDef *defs, size_t n);
void psim__ops_register_basic(void);
void psim__ops_register_tf(void);

/* The tensor feeding input k of n, or NULL when the input is absent. */
static inline const PsimOutput *psim__input(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    if (k >= n->n_inputs || n->inputs[k].node < 0)
        return NULL;
    const PsimNode *src = psim_graph_node(g, n->inputs[k].node);
    return n->inputs[k].index < src->n_outputs ? &src->outputs[n->inputs[k].index] : NULL;
}

#endif
