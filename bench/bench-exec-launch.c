/* Launch overhead of a cached run (issue 7's target: a run whose signature is cached launches in
 * at most 20 us plus its ops). A plan session runs a small graph (a chain of N Neg ops on 1024
 * floats) after its first run has pruned, placed, partitioned and instantiated it; overhead =
 * the run's wall time, measured around psim_plan_session_run by the caller, minus the sum of its
 * ops' times (the reference, measured in the same run by the executors' clocks). Also per run:
 * the process's CPU time (all threads) minus the ops, since wall time on a loaded machine
 * counts waiting for a core. Medians of RUNS runs, on local:1 (one device) and local:2
 * (round-robin: every hop of the chain is a transfer, whose copies count as overhead).
 *   build/bench-exec-launch [N] [RUNS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "placesim/exec.h"

static double cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, runs = argc > 2 ? atoi(argv[2]) : 201;
    if (n < 1 || n > 100000 || runs < 1) {
        fprintf(stderr, "usage: %s [N in 1..100000] [RUNS >= 1]\n", argv[0]);
        return 2;
    }
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("chain");
    int64_t dims[1] = {1024};
    char name[32];
    PsimNode *prev = psim_graph_node_add(g, "x", "Placeholder", NULL);
    psim_graph_node_outputs_set(g, prev, 1);
    psim_graph_output_set(g, prev, 0, PSIM_DTYPE_FLOAT32, 1, dims);
    psim_graph_input_add(g, prev->id);
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "n%d", i);
        PsimNode *m = psim_graph_node_add(g, name, "Neg", NULL);
        psim_graph_node_input_add(g, m, (PsimPort){prev->id, 0});
        psim_graph_node_outputs_set(g, m, 1);
        psim_graph_output_set(g, m, 0, PSIM_DTYPE_FLOAT32, 1, dims);
        prev = m;
    }
    psim_graph_output_add(g, (PsimPort){prev->id, 0});
    if (!psim_graph_finalize(g, &err)) {
        fprintf(stderr, "%s\n", err->message);
        return 1;
    }
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, dims, NULL);
    char last[32];
    snprintf(last, sizeof last, "n%d:0", n - 1);
    const char *feeds[] = {"x:0"}, *fetches[] = {last};
    printf("chain of %d Neg ops on 1024 floats, cached plan-session runs, median of %d runs\n", n,
           runs);
    printf("| cluster | transfers | run (wall) | ops | overhead (wall) | run (CPU, all threads) "
           "| overhead (CPU) |\n|---|---|---|---|---|---|---|\n");
    const char *specs[] = {"local:1", "local:2"};
    for (size_t k = 0; k < G_N_ELEMENTS(specs); k++) {
        g_autoptr(PsimCluster) c = psim_cluster_from_spec(specs[k], &err);
        if (!c) {
            fprintf(stderr, "%s\n", err->message);
            return 1;
        }
        g_autoptr(PsimPlanSession) s =
            psim_plan_session_new(g, c, NULL, "round-robin", NULL, FALSE, &err);
        if (!s) {
            fprintf(stderr, "%s\n", err->message);
            return 1;
        }
        double *wall = g_new(double, runs), *ops = g_new(double, runs), *cpu = g_new(double, runs);
        double *ow = g_new(double, runs), *oc = g_new(double, runs);
        int32_t n_xfers = 0;
        for (int r = -3; r < runs; r++) { /* the first run prepares; two more warm up */
            PsimTensor *out = NULL;
            double c0 = cpu_us(), t0 = psim_exec_now_us();
            gboolean ok = psim_plan_session_run(s, 1, feeds, &x, 1, fetches, &out, &err);
            double t1 = psim_exec_now_us(), c1 = cpu_us();
            if (!ok) {
                fprintf(stderr, "%s\n", err->message);
                return 1;
            }
            psim_tensor_unref(out);
            if (r < 0)
                continue;
            PsimPlanExec *px = psim_plan_session_last_exec(s);
            const PsimPlan *plan = psim_plan_session_last_plan(s);
            n_xfers = plan->n_transfers;
            double sum = 0;
            for (int32_t d = 0; d < psim_plan_exec_n_devices(px); d++) {
                PsimExecStats st;
                psim_executor_stats(psim_plan_exec_executor(px, d), &st);
                for (int32_t i = 0; i < st.n_run; i++) {
                    const char *op = psim_graph_node(plan->graph, st.nodes[i])->op;
                    if (strcmp(op, "Send") && strcmp(op, "Recv"))
                        sum += st.end[i] - st.start[i];
                }
            }
            wall[r] = t1 - t0;
            ops[r] = sum;
            cpu[r] = c1 - c0;
            ow[r] = wall[r] - sum;
            oc[r] = cpu[r] - sum;
        }
        /* Reference: the same graph by one executor on one worker (psim_executor_run: one
         * hand-off to the worker's thread and back), no session, no plan. */
        double *rw = g_new(double, runs), *rc = g_new(double, runs);
        if (k == 0) {
            g_autoptr(PsimWorker) w = psim_worker_new(psim_cluster_device(c, 0), &err);
            g_autoptr(PsimExecutor) e =
                w ? psim_executor_new(g, w, feeds, 1, fetches, 1, NULL, &err) : NULL;
            if (!e) {
                fprintf(stderr, "%s\n", err->message);
                return 1;
            }
            for (int r = -3; r < runs; r++) {
                PsimTensor *out = NULL;
                double c0 = cpu_us(), t0 = psim_exec_now_us();
                gboolean ok = psim_executor_run(e, &x, &out, &err);
                double t1 = psim_exec_now_us(), c1 = cpu_us();
                if (!ok) {
                    fprintf(stderr, "%s\n", err->message);
                    return 1;
                }
                psim_tensor_unref(out);
                if (r < 0)
                    continue;
                PsimExecStats es;
                psim_executor_stats(e, &es);
                double sum = 0;
                for (int32_t i = 0; i < es.n_run; i++)
                    sum += es.end[i] - es.start[i];
                rw[r] = t1 - t0 - sum;
                rc[r] = c1 - c0 - sum;
            }
            printf("| %s, one executor, no session (reference) | 0 | | | %.1f us | | %.1f us |\n",
                   specs[k], psim_stats_median(rw, runs), psim_stats_median(rc, runs));
        }
        g_free(rw);
        g_free(rc);
        PsimPlanSessionStats st;
        psim_plan_session_stats(s, &st);
        if (st.n_prunes != 1 || st.n_places != 1 || st.n_partitions != 1) {
            fprintf(stderr, "the cached runs prepared again (%" G_GUINT64_FORMAT " prunes)\n",
                    st.n_prunes);
            return 1;
        }
        printf("| %s | %d | %.1f us | %.1f us | %.1f us | %.1f us | %.1f us |\n", specs[k], n_xfers,
               psim_stats_median(wall, runs), psim_stats_median(ops, runs),
               psim_stats_median(ow, runs), psim_stats_median(cpu, runs),
               psim_stats_median(oc, runs));
        g_free(wall);
        g_free(ops);
        g_free(cpu);
        g_free(ow);
        g_free(oc);
    }
    return 0;
}
