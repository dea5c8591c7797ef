/* Float32 GEMM for the CPU kernels (MatMul, Gemm, the 1x1 and im2col convolutions): oneDNN's
 * sgemm, on the calling thread only; OpenBLAS's for the smallest products.
 *
 * Why not OpenBLAS's everywhere: Debian's OpenBLAS (0.3.21, pthread build) hands every sgemm
 * call a packing buffer from one process-wide table, whatever thread or core calls (two threads
 * pinned to cores 0 and 1 get the same buffer). Two executor devices that take turns (a split
 * plan: one device's op, a transfer, the other's op) therefore pack into the same buffer, and
 * each call first pulls its lines back from the other core's cache. `bench-kernels turns M K N
 * 300` on this project's Intel VM, each thread with matrices of its own, a call each in turn
 * against one thread alone: plain cblas_sgemm 1.12-1.44x its time alone on shufflenet's and
 * ResNet's 1x1 shapes (58x24x784 22.3 -> 30.8 us, 116x116x196 40.6 -> 51.3 us); oneDNN's sgemm,
 * which packs into memory of the calling thread, 0.99-1.05x. A split plan's 1x1 convolutions ran
 * 10-35% slower than profiled (shufflenet_v2_x1_0, round-robin) partly for that reason.
 *
 * oneDNN's sgemm was also faster alone on every shape tried above about 64^3 multiply-adds (the
 * same bench: 58x24x784 17.8 against 22.3 us, 128^3 26.2 against 30.2; a standalone loop: 512^3
 * 1588 against 1707 us, 64x147x12544 1451 against 2052). Below that its call overhead (about 0.4
 * us) outweighs its speed, and OpenBLAS's packing buffer there is a few kilobytes: those stay on
 * OpenBLAS. docs/perf.md has the figures. */
#include "cpu-private.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

/* libgomp's (oneDNN's OpenMP runtime); declared here so that clang builds need no omp.h. */
extern void omp_set_num_threads(int n);

/* Products smaller than this (M * N * K) go to OpenBLAS. */
#define SMALL_GEMM (64 * 64 * 64)

void psim__dnnl_one_thread(void)
{
    static __thread gboolean done;
    if (!done) {
        omp_set_num_threads(1);
        done = TRUE;
    }
}

void psim__sgemm(gboolean ta, gboolean tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if ((double)M * (double)N * (double)K >= SMALL_GEMM) {
        psim__dnnl_one_thread();
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb, beta, c,
                       ldc) == dnnl_success)
            return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, a, (blasint)lda, b, (blasint)ldb, beta,
                c, (blasint)ldc);
}
