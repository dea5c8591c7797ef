/* Helpers the test programs share. */
#ifndef PLACESIM_TEST_UTIL_H
#define PLACESIM_TEST_UTIL_H

#include <string.h>

#include "placesim/graph.h"
#include "placesim/placer.h"

/* How many nodes of g run op. */
static inline int32_t test_count_op(const PsimGraph *g, const char *op)
{
    int32_t c = 0;
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++)
        c += !strcmp(psim_graph_node(g, i)->op, op);
    return c;
}

/* Places ctx's graph with algorithm `algo` and partitions it into its plan, failing the test on
 * an error; *placement (NULL: not wanted) gets the placement, for the caller to free. */
static inline PsimPlan *test_place_plan(PsimPlaceCtx *ctx, const char *algo, PsimPlacement **placement)
{
    GError *err = NULL;
    PsimPlacement *p = psim_place(ctx, algo, &err);
    g_assert_no_error(err);
    PsimPlan *plan = psim_plan_build(ctx, p, &err);
    g_assert_no_error(err);
    if (placement)
        *placement = p;
    else
        psim_placement_free(p);
    return plan;
}

#endif
