/* Executor dispatch overhead on a chain of N one-element ops (issue 7's target: at most 2 us per
 * op). Side by side in one run: the executor stepping the chain, and the same kernel called N
 * times in a plain loop (the reference); overhead = (step - loop) / N. Medians of several runs.
 *   build/bench-exec-dispatch [N] [RUNS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placesim/exec.h"

/* y = x + 1 on one float, allocating its output as any kernel does. */
static gboolean inc_run(PsimKernelCtx *ctx, GError **error)
{
    const PsimTensor *a = ctx->inputs[0];
    PsimTensor *o = ctx->alloc(ctx, a->dtype, a->rank, a->dims, error);
    if (!o)
        return FALSE;
    ((float *)o->data)[0] = ((const float *)a->data)[0] + 1;
    ctx->outputs[0] = o;
    return TRUE;
}

static const PsimKernelDef inc_kernel = {
    .op = "BenchInc", .device_type = "CPU", .name = "bench-inc", .run = inc_run};

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000, runs = argc > 2 ? atoi(argv[2]) : 7;
    if (n < 1 || runs < 1) {
        fprintf(stderr, "usage: %s [N >= 1] [RUNS >= 1]\n", argv[0]);
        return 2;
    }
    psim_kernel_register(&inc_kernel);
    const char *ops[] = {"BenchInc", "Identity"};
    printf("chain of %d one-element ops, median of %d runs\n", n, runs);
    for (size_t o = 0; o < G_N_ELEMENTS(ops); o++) {
        g_autoptr(PsimGraph) g = psim_graph_new("chain");
        int64_t dims[1] = {1};
        char name[32];
        PsimNode *prev = psim_graph_node_add(g, "x", "Placeholder", NULL);
        psim_graph_node_outputs_set(g, prev, 1);
        psim_graph_output_set(g, prev, 0, PSIM_DTYPE_FLOAT32, 1, dims);
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "n%d", i);
            PsimNode *m = psim_graph_node_add(g, name, ops[o], NULL);
            psim_graph_node_input_add(g, m, (PsimPort){prev->id, 0});
            psim_graph_node_outputs_set(g, m, 1);
            psim_graph_output_set(g, m, 0, PSIM_DTYPE_FLOAT32, 1, dims);
            prev = m;
        }
        GError *err = NULL;
        if (!psim_graph_finalize(g, &err)) {
            fprintf(stderr, "%s\n", err->message);
            return 1;
        }
        g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
        g_autoptr(PsimWorker) w = psim_worker_new(psim_cluster_device(c, 0), &err);
        if (!w) {
            fprintf(stderr, "%s\n", err->message);
            return 1;
        }
        const char *feeds[] = {"x"}, *fetches[] = {name};
        g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, NULL, &err);
        if (!e) {
            fprintf(stderr, "%s: %s\n", ops[o], err->message);
            g_clear_error(&err);
            continue;
        }
        g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, dims, NULL);
        double *step = g_new(double, runs), *loop = g_new(double, runs);
        const PsimKernelDef *k = !strcmp(ops[o], "BenchInc") ? &inc_kernel : NULL;
        float result = 0;
        for (int r = 0; r < runs; r++) {
            PsimTensor *out = NULL;
            if (!psim_executor_run(e, &x, &out, &err)) {
                fprintf(stderr, "%s\n", err->message);
                return 1;
            }
            result = ((float *)out->data)[0];
            psim_tensor_unref(out);
            PsimExecStats st;
            psim_executor_stats(e, &st);
            step[r] = st.step_us;
            /* Reference: the same kernel in a plain loop, each output freed by the next. */
            PsimTensor *cur = psim_tensor_ref(x);
            double t0 = psim_exec_now_us();
            for (int i = 0; i < n; i++) {
                PsimTensor *next;
                if (k) {
                    next = psim_worker_tensor_new(w, cur->dtype, cur->rank, cur->dims, NULL);
                    ((float *)next->data)[0] = ((float *)cur->data)[0] + 1;
                } else {
                    next = psim_tensor_ref(cur);
                }
                psim_tensor_unref(cur);
                cur = next;
            }
            loop[r] = psim_exec_now_us() - t0;
            psim_tensor_unref(cur);
        }
        double ms = psim_stats_median(step, runs), ml = psim_stats_median(loop, runs);
        printf("%-9s executor step %10.1f us (%.3f us/op)   plain loop %10.1f us (%.3f us/op)   "
               "dispatch overhead %.3f us/op   [result %.0f]\n",
               ops[o], ms, ms / n, ml, ml / n, (ms - ml) / n, result);
        g_free(step);
        g_free(loop);
    }
    return 0;
}
