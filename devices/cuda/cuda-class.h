/* Internals of the CUDA device class (devices/cuda/): CUPTI activity collection and the
 * profiler's hooks, shared by the folder's files. The CUDA parts are built only with
 * PSIM_HAVE_CUDA; the class itself (cuda.c) always is, so that clusters describing GPUs are
 * simulated in every build. */
#ifndef PLACESIM_DEVICES_CUDA_CLASS_H
#define PLACESIM_DEVICES_CUDA_CLASS_H

#include "placesim/cluster.h"
#include "placesim/device.h"
#include "placesim/profiler.h"

#ifdef PSIM_HAVE_CUDA
#include "placesim/exec.h"

/* CUPTI activity collection (cupti.c). Started once per process; records of work launched
 * between push(id) and pop() on the calling thread are attributed to external id `id`. */
gboolean psim__cupti_start(GError **error);
void psim__cupti_push(uint64_t id);
void psim__cupti_pop(void);
/* Flushes CUPTI's buffers (call after synchronizing the device). */
gboolean psim__cupti_flush(GError **error);
/* Total microseconds of kernels, memcpys and memsets attributed to external id `id` since the
 * last clear; *n_records (may be NULL) gets how many records. */
double psim__cupti_total_us(uint64_t id, int32_t *n_records);
void psim__cupti_clear(void);
/* How many timed records and external correlations are held (diagnostics). */
void psim__cupti_counts(int32_t *n_records, int32_t *n_correlations);
/* Waits for the current device's work; a RUNTIME error naming the CUDA error otherwise. */
gboolean psim__cuda_sync(GError **error);

/* The class's hooks (include/placesim/device.h). */
extern const PsimDeviceClass psim_cuda_device_class; /* cuda.c */
extern const PsimWorkerClass psim__gpu_worker_class; /* worker.c */
int32_t psim__cuda_detect(PsimCluster *c);           /* detect.c */
gboolean psim__cuda_profile_links(PsimProfiler *p, PsimProfileReport *report, GError **error);
gboolean psim__cuda_calibrate(PsimProfiler *p, int32_t device, PsimProfileReport *report,
                              GError **error); /* profile.c */
gboolean psim__cuda_time_runs(PsimWorker *w, int32_t n, PsimTimedRunFn run, void *user, double *us,
                              GError **error); /* profile.c */
#endif

#endif
