/* Bandwidth of a transfer between two CPU devices of one process (issue 7's target: a 64 MiB
 * transfer reaches at least 70% of a plain memcpy's bandwidth). A plan runs x (fed, on CPU:0)
 * -> Identity on CPU:1, so its one transfer carries x from CPU:0 to CPU:1: CPU:1's own thread
 * allocates the destination's buffer and copies. Its time is the measured timeline's
 * transfer (copy start to arrival). The reference, in the same run and interleaved with it:
 * memcpy of the same size between two buffers that have been written before (warm pages), on
 * the calling thread. Also the whole step, and the thread CPU time of the reference copy.
 * Medians of RUNS steps.
 *   build/bench-exec-transfer [MiB] [RUNS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "placesim/exec.h"
#include "placesim/placer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* One error line and exit status 1 (a function, not a label: clang refuses a goto that jumps
 * over g_autoptr declarations). */
static int fail(const GError *err)
{
    fprintf(stderr, "%s\n", err ? err->message : "failed");
    return 1;
}

int main(int argc, char **argv)
{
    int mib = argc > 1 ? atoi(argv[1]) : 64, runs = argc > 2 ? atoi(argv[2]) : 9;
    if (mib < 1 || mib > 4096 || runs < 1) {
        fprintf(stderr, "usage: %s [MiB in 1..4096] [RUNS >= 1]\n", argv[0]);
        return 2;
    }
    g_autoptr(GError) err = NULL;
    int64_t n = (int64_t)mib * 1024 * 1024 / 4;
    g_autoptr(PsimGraph) g = psim_graph_new("transfer");
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", NULL);
    psim_graph_node_outputs_set(g, x, 1);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 1, &n);
    psim_graph_node_device_set(g, x, "CPU:0");
    psim_graph_input_add(g, x->id);
    PsimNode *y = psim_graph_node_add(g, "y", "Identity", NULL);
    psim_graph_node_input_add(g, y, (PsimPort){x->id, 0});
    psim_graph_node_outputs_set(g, y, 1);
    psim_graph_output_set(g, y, 0, PSIM_DTYPE_FLOAT32, 1, &n);
    psim_graph_node_device_set(g, y, "CPU:1");
    psim_graph_output_add(g, (PsimPort){y->id, 0});
    if (!psim_graph_finalize(g, &err))
        return fail(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    if (!c)
        return fail(err);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
    if (!ctx)
        return fail(err);
    g_autoptr(PsimPlacement) pl = psim_place(ctx, "heft", &err);
    if (!pl)
        return fail(err);
    g_autoptr(PsimPlan) plan = psim_plan_build(ctx, pl, &err);
    if (!plan)
        return fail(err);
    if (plan->n_transfers != 1) {
        fprintf(stderr, "expected one transfer, the plan has %d\n", plan->n_transfers);
        return 1;
    }
    const char *feeds[] = {"x:0"}, *fetches[] = {"y:0"};
    g_autoptr(PsimPlanExec) px = psim_plan_exec_new(plan, c, feeds, 1, fetches, 1, FALSE, &err);
    if (!px)
        return fail(err);
    g_autoptr(PsimTensor) in = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &n, &err);
    if (!in)
        return fail(err);
    for (int64_t i = 0; i < n; i++)
        ((float *)in->data)[i] = (float)i;
    size_t bytes = (size_t)n * 4;
    char *a = g_malloc(bytes), *b = g_malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double *xfer = g_new(double, runs), *step = g_new(double, runs), *ref = g_new(double, runs);
    double *ref_cpu = g_new(double, runs);
    for (int r = -2; r < runs; r++) { /* two warm-up steps fill the destination's pool */
        PsimTensor *out = NULL;
        if (!psim_plan_exec_run(px, &in, &out, &err))
            return fail(err);
        if (memcmp(out->data, in->data, bytes)) {
            fprintf(stderr, "the transfer changed the tensor\n");
            return 1;
        }
        psim_tensor_unref(out);
        g_autoptr(PsimTimeline) t = psim_timeline_new("transfer", "run", plan->n_devices,
                                                      (const char *const *)plan->devices);
        psim_plan_exec_timeline_add(px, t);
        const PsimTimelineXfer *tx = &g_array_index(t->xfers, PsimTimelineXfer, 0);
        double c0 = thread_cpu_us(), t0 = psim_exec_now_us();
        memcpy(b, a, bytes);
        double t1 = psim_exec_now_us(), c1 = thread_cpu_us();
        if (r < 0)
            continue;
        if (t->xfers->len != 1 || tx->bytes != bytes) {
            fprintf(stderr, "the timeline has no %zu-byte transfer\n", bytes);
            return 1;
        }
        xfer[r] = tx->end - tx->start;
        step[r] = psim_plan_exec_step_us(px);
        ref[r] = t1 - t0;
        ref_cpu[r] = c1 - c0;
        a[r % bytes] ^= b[(r * 7919) % bytes]; /* keep the reference copy observable */
    }
    double mx = median(xfer, runs), mr = median(ref, runs);
    printf("%d MiB, CPU:0 -> CPU:1 on local:2, median of %d steps\n", mib, runs);
    printf("| | time | bandwidth |\n|---|---|---|\n");
    printf("| transfer (destination thread, timeline) | %.0f us | %.2f GB/s |\n", mx, bytes / mx * 1e-3);
    printf("| memcpy reference (warm buffers) | %.0f us | %.2f GB/s |\n", mr, bytes / mr * 1e-3);
    printf("| memcpy reference, thread CPU time | %.0f us | %.2f GB/s |\n", median(ref_cpu, runs),
           bytes / median(ref_cpu, runs) * 1e-3);
    printf("| whole step (both devices) | %.0f us | |\n", median(step, runs));
    printf("transfer / memcpy bandwidth: %.0f%%\n", 100 * mr / mx);
    g_free(a);
    g_free(b);
    g_free(xfer);
    g_free(step);
    g_free(ref);
    g_free(ref_cpu);
    return 0;
}
