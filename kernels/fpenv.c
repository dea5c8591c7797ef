/* The floating-point mode of threads that run kernels: flush-to-zero and denormals-are-zero.
 * On x86 an operation that reads or makes a denormal takes a microcode assist of about a hundred
 * cycles, so without them a kernel's time depends on its data (a Sigmoid of N(0,1) activations
 * makes denormals where exp(-|x|) underflows, and every Mul and Conv that reads them slows). */
#include "kernels-private.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_DAZ 0x0040u /* denormal operands read as zero */
#define MXCSR_FTZ 0x8000u /* denormal results written as zero */
#endif

void psim_kernel_thread_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | MXCSR_DAZ | MXCSR_FTZ);
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    fpcr |= UINT64_C(1) << 24; /* FZ: flush denormal inputs and results to zero */
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
}

gboolean psim_kernel_thread_flushes(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ);
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr >> 24) & 1;
#else
    return FALSE;
#endif
}
