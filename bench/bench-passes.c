/* Speed of the graph passes on a generated model-like graph: fold + infer (one topological
 * pass), CSE and prune, each the median CPU and wall time of R runs.
 * The graph: a Placeholder [64, 256], then N/15 blocks of 15 nodes: MatMul with a weight made
 * by ConstantOfShape from an int64 Const, Add of a bias made the same way, Relu, a duplicate
 * Relu (for CSE) and their sum, and a Shape -> Gather -> Concat -> Reshape chain (shape
 * arithmetic to fold). Prune feeds block 1's Add and fetches the last Reshape.
 * Usage: bench-passes [--nodes N] [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "placesim/graph.h"

static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static PsimNode *add(PsimGraph *g, const char *op, int64_t i, const char *tag)
{
    char name[64];
    g_snprintf(name, sizeof name, "b%" G_GINT64_FORMAT "/%s", i, tag);
    PsimNode *n = psim_graph_node_add(g, name, op, NULL);
    g_assert(n);
    return n;
}

static void in(PsimGraph *g, PsimNode *n, const PsimNode *src)
{
    psim_graph_node_input_add(g, n, (PsimPort){src->id, 0});
}

static PsimNode *int_const(PsimGraph *g, int64_t i, const char *tag, int32_t n, const int64_t *v)
{
    int64_t len = n;
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, &len, NULL);
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    PsimNode *c = add(g, "Const", i, tag);
    psim_graph_node_attr_set_tensor(g, c, "value", t);
    psim_tensor_unref(t);
    return c;
}

static PsimGraph *make(int64_t n_nodes, char **fetch)
{
    PsimGraph *g = psim_graph_new("bench");
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", NULL);
    int64_t d[2] = {64, 256};
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 2, d);
    static const int64_t wshape[2] = {256, 256}, bshape[1] = {256}, zero[1] = {0},
                         one_dim[1] = {256};
    PsimNode *cur = x;
    for (int64_t i = 0; i < n_nodes / 15; i++) {
        PsimNode *ws = int_const(g, i, "wshape", 2, wshape);
        PsimNode *w = add(g, "ConstantOfShape", i, "w");
        in(g, w, ws);
        PsimNode *mm = add(g, "MatMul", i, "mm");
        in(g, mm, cur);
        in(g, mm, w);
        PsimNode *bs = int_const(g, i, "bshape", 1, bshape);
        PsimNode *b = add(g, "ConstantOfShape", i, "b");
        in(g, b, bs);
        PsimNode *a = add(g, "Add", i, "add");
        in(g, a, mm);
        in(g, a, b);
        PsimNode *r1 = add(g, "Relu", i, "relu");
        in(g, r1, a);
        PsimNode *r2 = add(g, "Relu", i, "relu_dup");
        in(g, r2, a);
        PsimNode *s = add(g, "Shape", i, "shape");
        in(g, s, r1);
        PsimNode *z = int_const(g, i, "zero", 1, zero);
        PsimNode *ga = add(g, "Gather", i, "batch");
        in(g, ga, s);
        in(g, ga, z);
        PsimNode *od = int_const(g, i, "dim", 1, one_dim);
        PsimNode *c = add(g, "Concat", i, "newshape");
        psim_graph_node_attr_set_int(g, c, "axis", 0);
        in(g, c, ga);
        in(g, c, od);
        PsimNode *sum = add(g, "Add", i, "sum");
        in(g, sum, r1);
        in(g, sum, r2);
        PsimNode *re = add(g, "Reshape", i, "reshape");
        in(g, re, sum);
        in(g, re, c);
        cur = re;
    }
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        PsimNode *n = psim_graph_node(g, i);
        if (!n->n_outputs)
            psim_graph_node_outputs_set(g, n, 1);
    }
    *fetch = g_strdup_printf("%s:0", cur->name);
    GError *err = NULL;
    if (!psim_graph_finalize(g, &err))
        g_error("%s", err->message);
    return g;
}

int main(int argc, char **argv)
{
    int64_t n_nodes = 1000000;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--nodes"))
            n_nodes = g_ascii_strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    if (n_nodes < 30 || reps < 1 || reps > 99) {
        fprintf(stderr, "usage: bench-passes [--nodes N>=30] [--reps 1..99]\n");
        return 2;
    }
    enum { FOLD, CSE, PRUNE, N_PASS };
    static const char *const names[N_PASS] = {"fold+infer", "cse", "prune"};
    double cpu[N_PASS][99], wall[N_PASS][99];
    int32_t nodes = 0, folded = 0, merged = 0, kept = 0;
    for (int r = 0; r < reps; r++) {
        char *fetch = NULL;
        PsimGraph *g = make(n_nodes, &fetch);
        nodes = psim_graph_n_nodes(g);
        GError *err = NULL;
        double c0 = cpu_now(), w0 = g_get_monotonic_time() / 1e6;
        folded = psim_graph_fold_constants(g, &err);
        double c1 = cpu_now(), w1 = g_get_monotonic_time() / 1e6;
        PsimGraph *c = psim_graph_cse(g, &merged, &err);
        double c2 = cpu_now(), w2 = g_get_monotonic_time() / 1e6;
        const char *fetches[] = {fetch}, *feeds[] = {"b1/add:0"};
        PsimGraph *p = psim_graph_prune(g, feeds, 1, fetches, 1, &err);
        double c3 = cpu_now(), w3 = g_get_monotonic_time() / 1e6;
        if (folded < 0 || !c || !p)
            g_error("%s", err ? err->message : "pass failed");
        kept = psim_graph_n_nodes(p);
        cpu[FOLD][r] = c1 - c0;
        cpu[CSE][r] = c2 - c1;
        cpu[PRUNE][r] = c3 - c2;
        wall[FOLD][r] = w1 - w0;
        wall[CSE][r] = w2 - w1;
        wall[PRUNE][r] = w3 - w2;
        psim_graph_free(p);
        psim_graph_free(c);
        psim_graph_free(g);
        g_free(fetch);
    }
    printf("graph: %d nodes; folded %d, CSE merged %d, prune kept %d\n", nodes, folded, merged,
           kept);
    printf("%-11s %12s %12s   (median of %d)\n", "pass", "CPU s", "wall s", reps);
    for (int k = 0; k < N_PASS; k++) {
        psim_stats_sort(cpu[k], reps);
        psim_stats_sort(wall[k], reps);
        printf("%-11s %12.3f %12.3f\n", names[k], cpu[k][reps / 2], wall[k][reps / 2]);
    }
    return 0;
}
