/* The CUDA class's detect hook: this machine's GPUs through the CUDA runtime. Without a driver
 * or a GPU at run time there are simply none. Built only with PSIM_HAVE_CUDA. */
#include "devices/cuda/cuda-class.h"
#include "placesim/graph.h"

#ifdef PSIM_HAVE_CUDA
#include <cuda_runtime.h>

/* FP32 lanes per SM by architecture (the CUDA programming guide's throughput table). */
static int fp32_per_sm(int major, int minor)
{
    switch (major) {
    case 6: return minor == 0 ? 64 : 128;
    case 7: return 64;
    case 8: return minor == 0 ? 64 : 128;
    default: return major >= 9 ? 128 : 64;
    }
}

static int attr(enum cudaDeviceAttr a, int dev)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return v;
}

int32_t psim__cuda_detect(PsimCluster *c)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        /* No driver, or a driver without devices: clear the sticky error and report none. */
        (void)cudaGetLastError();
        return 0;
    }
    int32_t first = 0;
    for (int32_t i = 0; i < psim_cluster_n_devices(c); i++)
        if (psim_cluster_device(c, i)->cls == &psim_cuda_device_class)
            first++;
    int32_t added = 0;
    for (int dev = 0; dev < n; dev++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        g_autofree char *name = g_strdup_printf("/job:localhost/replica:0/task:0/device:GPU:%d", first + added);
        int32_t id = psim_cluster_device_add(c, name, "GPU", NULL);
        if (id < 0)
            continue;
        PsimDevice *d = psim_cluster_device(c, id);
        d->gpu_ordinal = dev;
        d->description = g_strdup(p.name);
        d->memory_bytes = p.totalGlobalMem;
        d->sm_count = p.multiProcessorCount;
        d->cc_major = p.major;
        d->cc_minor = p.minor;
        /* Nominal rates until the profiler calibrates the device: clocks are in kHz. */
        double clock_khz = attr(cudaDevAttrClockRate, dev);
        double mem_khz = attr(cudaDevAttrMemoryClockRate, dev);
        double bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth, dev);
        if (clock_khz > 0)
            d->peak_gflops = d->sm_count * fp32_per_sm(p.major, p.minor) * 2.0 * clock_khz / 1e6;
        if (mem_khz > 0 && bus_bits > 0)
            d->mem_bw_GBps = 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
        added++;
    }
    return added;
}

#endif
