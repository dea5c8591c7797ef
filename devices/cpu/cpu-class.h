/* Internals of the CPU device class (devices/cpu/), shared by the folder's files. */
#ifndef PLACESIM_DEVICES_CPU_CLASS_H
#define PLACESIM_DEVICES_CPU_CLASS_H

#include "placesim/device.h"
#include "placesim/profiler.h"

/* The class's calibrate hook (calibrate.c). */
gboolean psim__cpu_calibrate(PsimProfiler *p, int32_t device, PsimProfileReport *report,
                             GError **error);

#endif
