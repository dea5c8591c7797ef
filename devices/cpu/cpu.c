/* The CPU device class: a host thread pinned to the device's cores runs its kernels one after
 * another; tensors live in host memory (the worker's pool); kernels are synchronous, so the
 * profiler's host clock times them. `local:N` carves N such devices out of this machine's cores
 * (cluster/local.c). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>

#include "devices/cpu/cpu-class.h"
#include "kernels/kernels-private.h"
#include "placesim/cost.h"
#include "placesim/exec.h"

static gboolean cpu_thread_init(PsimWorker *w, GError **error)
{
    const PsimDevice *d = psim_worker_device(w);
    if (!d || d->n_cores <= 0)
        return TRUE;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int32_t i = 0; i < d->n_cores; i++) {
        if (d->cores[i] < 0 || d->cores[i] >= CPU_SETSIZE) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "device %s: core %d does not exist",
                        psim_worker_name(w), d->cores[i]);
            return FALSE;
        }
        CPU_SET(d->cores[i], &set);
    }
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "device %s: cannot pin its thread to its %d core(s): %s", psim_worker_name(w),
                    d->n_cores, g_strerror(rc));
        return FALSE;
    }
    return TRUE;
}

static const PsimWorkerClass cpu_worker_class = {
    .description = "a host thread pinned to the device's cores; kernels run on it in turn",
    .thread_init = cpu_thread_init,
};

/* A CPU device's model is its description (a cluster file may describe another machine); this
 * host's CPU when it has none. */
static void cpu_fingerprint(const PsimDevice *d, PsimFingerprint *f)
{
    f->n_cores = MAX(d->n_cores, 1);
    f->cpu_model = g_strdup(d->description ? d->description : psim_fingerprint_host_cpu_model());
    f->library_versions = g_strdup(psim_fingerprint_host_libraries());
}

const PsimDeviceClass psim_cpu_device_class = {
    .type = "CPU",
    .description = "host cores: one pinned thread per device, OpenBLAS and own kernels",
    .peak_gflops = 50,
    .mem_bw_GBps = 20,
    .launch_us = 0.5,
    .host = TRUE,
    .fingerprint = cpu_fingerprint,
    .worker = &cpu_worker_class,
    .calibrate = psim__cpu_calibrate,
    .register_kernels = psim__kernels_cpu_register,
};
