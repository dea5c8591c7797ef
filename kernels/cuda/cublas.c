/* cuBLAS, opened when a GPU first needs it (psim__cublas). Linked directly, cuBLAS brings
 * cuBLASLt, whose loading alone mapped and relocated about 210 MB and took 0.1 s in every
 * process, GPU or not (`placesim --version`: 235 MB and 0.11 s of RSS and wall time against 16
 * MB and 0.01 s without it), which was most of `sim --plan`'s and `place --plan`'s memory at
 * 100,000 nodes (docs/perf.md). The few entry points the kernels and the profiler call are
 * resolved here instead; cuDNN and the CUDA runtime stay linked (16 MB between them). */
#include "kernels/cuda/cuda-private.h"

#include <dlfcn.h>

static PsimCublas lib;
static char *load_error; /* why cuBLAS could not be opened (NULL: it was) */

static cublasStatus_t missing_create(cublasHandle_t *h)
{
    *h = NULL;
    return CUBLAS_STATUS_NOT_INITIALIZED;
}
static cublasStatus_t missing_handle(cublasHandle_t h)
{
    (void)h;
    return CUBLAS_STATUS_NOT_INITIALIZED;
}
static cublasStatus_t missing_set_stream(cublasHandle_t h, cudaStream_t s)
{
    (void)h;
    (void)s;
    return CUBLAS_STATUS_NOT_INITIALIZED;
}
static cublasStatus_t missing_set_math_mode(cublasHandle_t h, cublasMath_t mode)
{
    (void)h;
    (void)mode;
    return CUBLAS_STATUS_NOT_INITIALIZED;
}
static cublasStatus_t missing_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                    int n, int k, const float *alpha, const float *a, int lda,
                                    const float *b, int ldb, const float *beta, float *c, int ldc)
{
    (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return CUBLAS_STATUS_NOT_INITIALIZED;
}
static const char *missing_status_string(cublasStatus_t st)
{
    (void)st;
    return load_error;
}

/* Opens `name` and resolves every entry point into l; FALSE (l untouched) with *why set if any
 * is missing. */
static gboolean open_cublas(const char *name, PsimCublas *l, char **why)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *why = g_strdup(dlerror());
        return FALSE;
    }
    PsimCublas t = {
        .create = (__typeof__(t.create))dlsym(h, "cublasCreate_v2"),
        .destroy = (__typeof__(t.destroy))dlsym(h, "cublasDestroy_v2"),
        .set_stream = (__typeof__(t.set_stream))dlsym(h, "cublasSetStream_v2"),
        .set_math_mode = (__typeof__(t.set_math_mode))dlsym(h, "cublasSetMathMode"),
        .sgemm = (__typeof__(t.sgemm))dlsym(h, "cublasSgemm_v2"),
        .status_string = (__typeof__(t.status_string))dlsym(h, "cublasGetStatusString"),
    };
    if (!t.create || !t.destroy || !t.set_stream || !t.set_math_mode || !t.sgemm || !t.status_string) {
        *why = g_strdup_printf("%s lacks an entry point placesim calls", name);
        dlclose(h);
        return FALSE;
    }
    *l = t; /* the library stays open for the process */
    return TRUE;
}

const PsimCublas *psim__cublas(void)
{
    static gsize once = 0;
    if (g_once_init_enter(&once)) {
        g_autofree char *why = NULL, *why_path = NULL;
        /* By its soname as the loader finds it, then where the build found it. */
        if (!open_cublas(PSIM_CUBLAS_SONAME, &lib, &why) && !open_cublas(PSIM_CUBLAS_PATH, &lib, &why_path)) {
            load_error = g_strdup_printf("cuBLAS could not be loaded: %s; %s", why, why_path);
            lib = (PsimCublas){missing_create, missing_handle, missing_set_stream, missing_set_math_mode,
                               missing_sgemm, missing_status_string};
        }
        g_once_init_leave(&once, 1);
    }
    return &lib;
}
