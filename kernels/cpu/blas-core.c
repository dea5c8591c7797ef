/* OpenBLAS's kernel set, checked against the CPU.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model when it loads. A model newer than the
 * release knows falls back to its oldest x86-64 set: Debian's 0.3.21 takes Intel's family 6 model
 * 207 (Emerald Rapids, AVX-512) for a Prescott and runs sgemm on SSE3 at 33 GFLOP/s, where its
 * SkylakeX kernels give 155 on the same core (bench-kernels matmul 512, OPENBLAS_CORETYPE set by
 * hand). Every 1x1 convolution, Gemm and MatMul of a step would then be timed, and so placed, on
 * kernels 4-5x slower than the machine's.
 *
 * So, once, before any kernel runs: when the CPU (and the OS, which must save its registers)
 * offers a wider instruction set than the kernels OpenBLAS chose, ask OpenBLAS for the set it
 * documents for that level through its own OPENBLAS_CORETYPE, and have it pick again. A user's
 * OPENBLAS_CORETYPE is left alone, and a build without the dynamic-arch entry points is too. The
 * choice shows in the cost DB's fingerprint (openblas_get_config names the core), so rows timed
 * on one kernel set are never used for another. */
#include "kernels/kernels-private.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <strings.h>

/* 3: AVX-512 (F, CD, BW, DQ, VL), 2: AVX2 + FMA, 1: anything older. */
static int cpu_level(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 2;
#endif
    return 1;
}

/* The level of the kernel set OpenBLAS names (openblas_get_corename). */
static int core_level(const char *core)
{
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const avx2[] = {"haswell", "zen"};
    for (size_t i = 0; i < G_N_ELEMENTS(avx512); i++)
        if (!strcasecmp(core, avx512[i]))
            return 3;
    for (size_t i = 0; i < G_N_ELEMENTS(avx2); i++)
        if (!strcasecmp(core, avx2[i]))
            return 2;
    return 1;
}

void psim__blas_core_check(void)
{
    static gsize once = 0;
    if (!g_once_init_enter(&once))
        return;
    void (*reinit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    void (*quit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    const char *core = openblas_get_corename();
    int want = cpu_level();
    if (!getenv("OPENBLAS_CORETYPE") && reinit && quit && core && core_level(core) < want) {
        g_autofree char *was = g_strdup(core);
        setenv("OPENBLAS_CORETYPE", want == 3 ? "SkylakeX" : "Haswell", 1);
        quit();
        reinit();
        unsetenv("OPENBLAS_CORETYPE");
        g_debug("OpenBLAS chose %s kernels for this CPU; now %s", was, openblas_get_corename());
    }
    g_once_init_leave(&once, 1);
}

/* Before main and before any thread: the executables and tests that never reach the kernel
 * registry (a bare sgemm in a benchmark) get the same kernels as those that do. */
__attribute__((constructor)) static void blas_core_at_load(void)
{
    psim__blas_core_check();
}
