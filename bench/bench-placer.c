/* Placement speed on generated graphs: a random layered DAG of N Task nodes (1 to 3 inputs each
 * from the previous 1000 nodes, costs 1 to 100 us, outputs 1 kB to 1 MB) on D identical devices
 * with 10 GB/s, 5 us links. Times building the placement problem (cost table, edges,
 * constraints) and each algorithm (placement plus the engine's evaluation), median of R runs;
 * then partitioning its placement into a plan, beside one simulation of that plan, and the
 * run's peak memory.
 * Usage: bench-placer [N [D [R [ALGO...]]]] (default 100000 16 3 greedy heft). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "tests/gen-dag.h"

static double now_ms(void) { return (double)g_get_monotonic_time() / 1e3; }

/* CPU time of this process: on a shared, loaded machine it says more than wall time. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    int32_t n = argc > 1 ? atoi(argv[1]) : 100000;
    int32_t nd = argc > 2 ? atoi(argv[2]) : 16;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    const char *dflt[] = {"greedy", "heft"};
    const char **algos = argc > 4 ? (const char **)argv + 4 : dflt;
    int n_algos = argc > 4 ? argc - 4 : 2;
    if (n < 1 || nd < 1 || reps < 1) {
        fprintf(stderr, "usage: bench-placer [N [D [R [ALGO...]]]]\n");
        return 2;
    }
    double t0 = now_ms();
    g_autoptr(PsimGraph) g = psim_test_dag(n, 42, 1000, FALSE);
    printf("graph: %d nodes, %" G_GINT64_FORMAT " edges, built in %.0f ms\n", n,
           psim_graph_n_edges(g), now_ms() - t0);
    g_autoptr(PsimCluster) c = psim_cluster_new();
    for (int32_t d = 0; d < nd; d++) {
        char name[32];
        snprintf(name, sizeof name, "P:%d", d);
        psim_cluster_device_add(c, name, "P", NULL);
    }
    psim_cluster_default_link_set(c, (PsimLink){.bandwidth_GBps = 10, .latency_us = 5, .independent = TRUE});
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    double *ctx_ms = g_new(double, reps), *ctx_cpu = g_new(double, reps);
    PsimPlaceCtx *ctx = NULL;
    for (int r = 0; r < reps; r++) {
        psim_place_ctx_free(ctx);
        double a = now_ms(), ac = cpu_ms();
        ctx = psim_place_ctx_new(g, m, NULL, NULL);
        ctx_ms[r] = now_ms() - a;
        ctx_cpu[r] = cpu_ms() - ac;
        g_assert_nonnull(ctx);
    }
    psim_stats_sort(ctx_ms, reps);
    psim_stats_sort(ctx_cpu, reps);
    printf("problem (costs, edges, constraints): median %.0f ms wall, %.0f ms CPU, of %d\n",
           ctx_ms[reps / 2], ctx_cpu[reps / 2], reps);
    for (int k = 0; k < n_algos; k++) {
        double *ms = g_new(double, reps), *cpu = g_new(double, reps), span = 0, eval = 0;
        for (int r = 0; r < reps; r++) {
            g_autoptr(GError) err = NULL;
            double a = now_ms(), ac = cpu_ms();
            g_autoptr(PsimPlacement) p = psim_place(ctx, algos[k], &err);
            ms[r] = now_ms() - a;
            cpu[r] = cpu_ms() - ac;
            if (!p) {
                fprintf(stderr, "%s: %s\n", algos[k], err->message);
                return 1;
            }
            span = p->makespan_us;
            eval = p->evaluate_ms;
        }
        {
            /* Partitioning the last placement into a plan (Send/Recv, recv schedule). */
            g_autoptr(PsimPlacement) p = psim_place(ctx, algos[k], NULL);
            double a = now_ms(), ac = cpu_ms();
            g_autoptr(PsimPlan) plan = psim_plan_build(ctx, p, NULL);
            g_assert_nonnull(plan);
            double build_ms = now_ms() - a, build_cpu = cpu_ms() - ac;
            /* Beside it, the simulator on the same plan (static order, no timeline: what the
             * plan builder runs once inside), so the ratio holds on any machine. */
            PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE};
            PsimSimResult sr = {0};
            double b = now_ms(), bc = cpu_ms();
            g_assert_true(psim_sim_run(plan, m, &so, &sr, NULL, NULL));
            double sim_ms = now_ms() - b, sim_cpu = cpu_ms() - bc;
            psim_sim_result_clear(&sr);
            printf("%-8s plan: %d nodes, %d transfers, built in %.0f ms wall, %.0f ms CPU; "
                   "simulating it %.0f ms wall, %.0f ms CPU; build / simulate %.2f (CPU)\n",
                   algos[k], psim_graph_n_nodes(plan->graph), plan->n_transfers, build_ms,
                   build_cpu, sim_ms, sim_cpu, build_cpu / sim_cpu);
        }
        psim_stats_sort(ms, reps);
        psim_stats_sort(cpu, reps);
        printf("%-8s %d nodes on %d devices: median %.0f ms wall (min %.0f, max %.0f), %.0f ms CPU, "
               "of %d; makespan %.0f us; with the problem %.0f ms wall, %.0f ms CPU; the last run's "
               "evaluation (its simulated step) %.0f ms wall\n",
               algos[k], n, nd, ms[reps / 2], ms[0], ms[reps - 1], cpu[reps / 2], reps, span,
               ms[reps / 2] + ctx_ms[reps / 2], cpu[reps / 2] + ctx_cpu[reps / 2], eval);
        g_free(ms);
        g_free(cpu);
    }
    psim_place_ctx_free(ctx);
    g_free(ctx_ms);
    g_free(ctx_cpu);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak memory (max RSS) of the whole run: %.0f MB\n", ru.ru_maxrss / 1024.0);
    return 0;
}
