/* Random layered DAGs of Task nodes, for tests and benchmarks (bench/bench-placer.c,
 * tests/test-plan-golden.c): node i has a cost of 1 to 100 us on any device, outputs of 1 kB to
 * 1 MB, and 1 to 3 inputs from the previous `window` nodes. With `extras`, every third node has
 * two outputs, inputs read either, and one input in eight is a control edge. The same n, seed,
 * window and extras give the same graph. */
#ifndef PSIM_TESTS_GEN_DAG_H
#define PSIM_TESTS_GEN_DAG_H

#include <stdio.h>

#include "placesim/graph.h"

static inline PsimGraph *psim_test_dag(int32_t n, guint32 seed, int32_t window, gboolean extras)
{
    GRand *r = g_rand_new_with_seed(seed);
    PsimGraph *g = psim_graph_new("generated");
    char name[32];
    for (int32_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "t%d", i);
        PsimNode *v = psim_graph_node_add(g, name, "Task", NULL);
        psim_graph_node_outputs_set(g, v, 1 + (extras && i % 3 == 0));
        for (int32_t k = 0; k < v->n_outputs; k++)
            v->outputs[k].bytes = (uint64_t)g_rand_int_range(r, 1000, 1000000);
        psim_graph_node_cost_set(g, v, "*", g_rand_int_range(r, 1, 101));
        if (i == 0)
            continue;
        int k = g_rand_int_range(r, 1, 4);
        int32_t last = -1;
        for (int j = 0; j < k; j++) {
            int32_t u = i - g_rand_int_range(r, 1, MIN(i, window) + 1);
            if (!extras) {
                if (u == last)
                    continue;
                last = u;
                psim_graph_node_input_add(g, v, (PsimPort){u, 0});
            } else if (g_rand_int_range(r, 0, 8) == 0) {
                psim_graph_node_control_add(g, v, u);
            } else {
                const PsimNode *un = psim_graph_node(g, u);
                psim_graph_node_input_add(g, v, (PsimPort){u, g_rand_int_range(r, 0, un->n_outputs)});
            }
        }
    }
    g_rand_free(r);
    g_assert_true(psim_graph_finalize(g, NULL));
    return g;
}

#endif
