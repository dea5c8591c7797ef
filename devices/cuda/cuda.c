/* The GPU device class, driven by CUDA: a host thread per GPU drives one stream with cuBLAS and
 * cuDNN handles (worker.c), kernels run asynchronously and are timed by CUPTI (cupti.c,
 * profile.c), this machine's GPUs are found through the runtime (detect.c). Without the CUDA
 * toolkit at build time the class still describes GPUs for the simulator (cluster files), with
 * no worker, timer or detection. */
#include "devices/cuda/cuda-class.h"
#include "placesim/cost.h"

#ifdef PSIM_HAVE_CUDA
#include <cuda_runtime.h>
#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
#endif
#if __has_include(<cudnn_version.h>)
#include <cudnn_version.h>
#endif
#include "kernels/kernels-private.h"
#endif

static void cuda_fingerprint(const PsimDevice *d, PsimFingerprint *f)
{
    f->cpu_model = g_strdup(psim_fingerprint_host_cpu_model());
    f->gpu_name = g_strdup(d->description ? d->description : "unknown GPU");
    int drv = 0, rt = 0;
#ifdef PSIM_HAVE_CUDA
    if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess)
        (void)cudaGetLastError();
#endif
    f->driver_version = g_strdup_printf("driver=%d runtime=%d", drv, rt);
    GString *libs = g_string_new(psim_fingerprint_host_libraries());
#if defined(PSIM_HAVE_CUDA) && defined(CUBLAS_VER_MAJOR)
    g_string_append_printf(libs, " cublas=%d.%d.%d", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
                           CUBLAS_VER_PATCH);
#endif
#if defined(PSIM_HAVE_CUDA) && defined(CUDNN_MAJOR)
    g_string_append_printf(libs, " cudnn=%d.%d.%d", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
#endif
    f->library_versions = g_string_free(libs, FALSE);
}

const PsimDeviceClass psim_cuda_device_class = {
    .type = "GPU",
    .description =
        "a CUDA GPU: one stream per device, cuBLAS, cuDNN and own kernels, timed by CUPTI",
    .peak_gflops = 10000,
    .mem_bw_GBps = 1000,
    .launch_us = 5,
    .ordinal_is_index = TRUE,
    .streams = TRUE,
    .fingerprint = cuda_fingerprint,
#ifdef PSIM_HAVE_CUDA
    .detect = psim__cuda_detect,
    .worker = &psim__gpu_worker_class,
    .timer = "cupti",
    .time_runs = psim__cuda_time_runs,
    .calibrate = psim__cuda_calibrate,
    .profile_links = psim__cuda_profile_links,
    .register_kernels = psim__kernels_cuda_register,
#endif
};
