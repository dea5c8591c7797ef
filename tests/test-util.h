/* Helpers the test programs share. */
#ifndef PLACESIM_TEST_UTIL_H
#define PLACESIM_TEST_UTIL_H

#include <string.h>

#include "placesim/graph.h"

/* How many nodes of g run op. */
static inline int32_t test_count_op(const PsimGraph *g, const char *op)
{
    int32_t c = 0;
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++)
        c += !strcmp(psim_graph_node(g, i)->op, op);
    return c;
}

#endif
