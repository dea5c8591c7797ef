/* Internals of the kernels module shared between the registry and the device kernel sets. */
#ifndef PLACESIM_KERNELS_PRIVATE_H
#define PLACESIM_KERNELS_PRIVATE_H

#include "placesim/kernels.h"

/* Registers the built-in CPU kernels (kernels/cpu/register.c): the CPU class's
 * register_kernels, called once by the registry. */
void psim__kernels_cpu_register(void);
#ifdef PSIM_HAVE_CUDA
/* Registers the built-in GPU kernels (kernels/cuda/common.c): the CUDA class's
 * register_kernels, called once by the registry in CUDA builds. Needs no GPU: the kernels fail at run time when there is none. */
void psim__kernels_cuda_register(void);
#endif
/* Registers an array of built-in definitions without triggering initialization (used by the
 * device kernel sets from within psim__kernels_init). */
void psim__kernels_add(const PsimKernelDef *defs, size_t n);
/* Registers the built-in kernels of every device kind, once (idempotent, thread-safe). Also sets
 * OpenBLAS to one thread: a CPU device is one pinned core, and BLAS threads would fight the
 * other devices' threads for cores. */
void psim__kernels_init(void);
/* Has OpenBLAS pick its kernels again when it chose a set older than the CPU offers (a CPU model
 * newer than the release; kernels/cpu/blas-core.c). Once; also run when the library loads. */
void psim__blas_core_check(void);

#endif
