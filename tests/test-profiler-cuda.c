/* Tests of the CUPTI side of the profiler (needs a CUDA build and a GPU; exits 77, skipped,
 * otherwise): every CUDA kernel cuBLAS launches for one call is attributed to the external id
 * pushed around it, CUPTI's durations agree with CUDA events within 5% for kernels of at least
 * 50 us, and profiling a GPU cluster stores link rows and a calibration. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#ifndef PSIM_HAVE_CUDA
int main(void)
{
    printf("1..0 # SKIP built without CUDA\n");
    return 77;
}
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "devices/cuda/cuda-class.h"
#include "profiler/profiler-private.h"

static void test_attribution_and_events(void)
{
    GError *err = NULL;
    g_assert_true(psim__cupti_start(&err));
    g_assert_no_error(err);
    g_assert_cmpint(cudaSetDevice(0), ==, cudaSuccess);
    cublasHandle_t h;
    g_assert_cmpint(cublasCreate(&h), ==, CUBLAS_STATUS_SUCCESS);
    const int n = 2048;
    float *a, *b, *c;
    size_t bytes = (size_t)n * n * sizeof(float);
    g_assert_cmpint(cudaMalloc((void **)&a, bytes), ==, cudaSuccess);
    g_assert_cmpint(cudaMalloc((void **)&b, bytes), ==, cudaSuccess);
    g_assert_cmpint(cudaMalloc((void **)&c, bytes), ==, cudaSuccess);
    cudaMemset(a, 0, bytes);
    cudaMemset(b, 0, bytes);
    const float one = 1, zero = 0;
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n); /* warm-up */
    cudaDeviceSynchronize();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    enum { REPS = 20 };
    double ev_us[REPS], cupti_us[REPS];
    psim__cupti_flush(&err);
    psim__cupti_clear();
    for (int i = 0; i < REPS; i++) {
        /* An unattributed GEMM first keeps the GPU busy while the host records e0 and launches
         * the timed pair (with CUPTI's API tracing on, a launch costs tens of microseconds of
         * host time): the events then bracket the two kernels back to back, not the host's
         * launch latency after e0 (on the H200 that gap alone was 5% of the pair). */
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
        cudaEventRecord(e0, 0);
        psim__cupti_push(1000 + i);
        /* Two calls under one id: both are the "node". */
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, c, n, b, n, &zero, a, n);
        psim__cupti_pop();
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        ev_us[i] = ms * 1e3;
    }
    g_assert_true(psim__cupti_flush(&err));
    g_assert_no_error(err);
    double ratios[REPS];
    int32_t held = 0, corr = 0;
    psim__cupti_counts(&held, &corr);
    printf("# CUPTI holds %d timed records and %d external correlations\n", held, corr);
    for (int i = 0; i < REPS; i++) {
        int32_t nrec = 0;
        cupti_us[i] = psim__cupti_total_us(1000 + i, &nrec);
        g_assert_cmpint(nrec, >=, 2); /* both GEMMs' kernels attributed */
        g_assert_cmpfloat(cupti_us[i], >=, 50);
        ratios[i] = cupti_us[i] / ev_us[i];
    }
    /* Nothing is attributed to an id never pushed. */
    int32_t none = 0;
    g_assert_cmpfloat(psim__cupti_total_us(999, &none), ==, 0);
    g_assert_cmpint(none, ==, 0);
    PsimTimingStats st;
    psim_timing_stats(ratios, REPS, &st);
    printf("# CUPTI / CUDA events, median over %d runs of two %dx%d SGEMMs: %.4f (CUPTI %.1f us)\n",
           REPS, n, n, st.median_us, cupti_us[0]);
    g_assert_cmpfloat(fabs(st.median_us - 1), <, 0.05);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
}

/* This machine as local:1 (*c) and the index of its first GPU. */
static int32_t local_gpu(PsimCluster **c)
{
    GError *err = NULL;
    *c = psim_cluster_from_spec("local:1", &err);
    g_assert_no_error(err);
    int32_t gpu = -1;
    for (int32_t i = 0; i < psim_cluster_n_devices(*c); i++)
        if (psim_cluster_device(*c, i)->cls == psim_device_class_find("GPU") && gpu < 0)
            gpu = i;
    g_assert_cmpint(gpu, >=, 0);
    return gpu;
}

static void test_links_and_calibration(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = NULL;
    int32_t gpu = local_gpu(&c);
    g_autofree char *dir = g_dir_make_tmp("psim-cupti-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "gpu.db", NULL);
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.budget_ms = 50;
    o.link_max_bytes = 1 << 20;
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, db, &o, &err);
    g_assert_no_error(err);
    PsimProfileReport r = {0};
    g_assert_true(psim_profiler_links(p, &r, &err));
    g_assert_no_error(err);
    /* CPU:0 <-> GPU:0 at 1, 4, 16, 64, 256 KiB and 1 MiB, both ways. */
    g_assert_cmpint(r.link_rows, >=, 12);
    g_assert_cmpint(r.link_pairs, >=, 2);
    g_assert_true(psim_profiler_calibrate(p, &r, &err));
    double v = 0;
    g_assert_true(psim_cost_db_calibration_get(db, psim_cluster_device(c, gpu), "gemm_gflops", &v, &err));
    g_assert_cmpfloat(v, >, 100);
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);
    g_assert_cmpint(system(cmd), ==, 0);
}

/* Kernels timed on the GPU: the profiler draws each input on the host and copies it into
 * device memory (the worker class's from_host) before timing; every measurable node of
 * zoo:mlp gets a time, and a Gemm of the mlp's size takes well under a millisecond. */
static void test_kernels_on_gpu(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = NULL;
    int32_t gpu = local_gpu(&c);
    g_autoptr(PsimGraph) g = psim_zoo_make("mlp", &err);
    g_assert_no_error(err);
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.budget_ms = 20;
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, &o, &err);
    g_assert_no_error(err);
    int measured = 0;
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        const PsimNode *n = psim_graph_node(g, i);
        if (!psim_profiler_node_measurable(g, n, NULL))
            continue;
        PsimTimingStats st;
        if (!psim_profiler_measure_node(p, g, n, gpu, &st, &err))
            g_error("%s (%s) on the GPU: %s", n->name, n->op, err->message);
        g_assert_cmpfloat(st.median_us, >, 0);
        g_assert_cmpfloat(st.median_us, <, 1000);
        measured++;
    }
    g_assert_cmpint(measured, >=, 3);
}

int main(int argc, char **argv)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("1..0 # SKIP no CUDA GPU\n");
        return 77;
    }
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/profiler/cuda/attribution-and-events", test_attribution_and_events);
    g_test_add_func("/profiler/cuda/links-and-calibration", test_links_and_calibration);
    g_test_add_func("/profiler/cuda/kernels-on-gpu", test_kernels_on_gpu);
    return g_test_run();
}
#endif
