/* Cold weights: evicting a buffer from the cache hierarchy, the size of the last-level cache, a
 * graph's constant bytes, and the AUTO decision between timing kernels with their weights cold
 * (evicted before each timed run) or warm (left in cache by the previous run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "profiler/profiler-private.h"

const char *psim_profile_weights_name(PsimProfileWeights w)
{
    switch (w) {
    case PSIM_PROFILE_WEIGHTS_COLD:
        return "cold";
    case PSIM_PROFILE_WEIGHTS_WARM:
        return "warm";
    default:
        return "auto";
    }
}

gboolean psim_profile_weights_from_name(const char *name, PsimProfileWeights *out)
{
    static const PsimProfileWeights all[] = {PSIM_PROFILE_WEIGHTS_AUTO, PSIM_PROFILE_WEIGHTS_COLD,
                                             PSIM_PROFILE_WEIGHTS_WARM};
    for (size_t i = 0; name && i < G_N_ELEMENTS(all); i++)
        if (!strcmp(name, psim_profile_weights_name(all[i]))) {
            *out = all[i];
            return TRUE;
        }
    return FALSE;
}

/* "32768K", "8M", "1G", "512" (bytes). 0 when unparsable. */
static uint64_t parse_size(const char *s)
{
    char *end = NULL;
    guint64 v = g_ascii_strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'K': case 'k': return v << 10;
    case 'M': case 'm': return v << 20;
    case 'G': case 'g': return v << 30;
    default: return v;
    }
}

uint64_t psim_profile_llc_bytes(void)
{
    /* sysfs first: it gives the L3 that cpu0 shares (one CCX on AMD), whereas glibc's sysconf
     * can report the sum over the package (320 MiB on a 32 MiB-per-CCX EPYC guest). */
    for (int i = 0; i < 16; i++) {
        g_autofree char *dir = g_strdup_printf("/sys/devices/system/cpu/cpu0/cache/index%d", i);
        g_autofree char *lpath = g_build_filename(dir, "level", NULL);
        g_autofree char *level = NULL, *size = NULL;
        if (!g_file_get_contents(lpath, &level, NULL, NULL))
            break;
        if (atoi(level) != 3)
            continue;
        g_autofree char *spath = g_build_filename(dir, "size", NULL);
        if (g_file_get_contents(spath, &size, NULL, NULL)) {
            uint64_t b = parse_size(g_strstrip(size));
            if (b)
                return b;
        }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0)
        return (uint64_t)l3;
#endif
    return UINT64_C(32) << 20;
}

uint64_t psim_profile_constant_bytes(const PsimGraph *g)
{
    PsimGraphStats st;
    psim_graph_stats(g, &st);
    return st.param_bytes;
}

PsimProfileWeights psim_profile_weights_resolve(PsimProfileWeights w, uint64_t constant_bytes,
                                                uint64_t llc_bytes)
{
    if (w != PSIM_PROFILE_WEIGHTS_AUTO)
        return w;
    return constant_bytes > llc_bytes / 2 ? PSIM_PROFILE_WEIGHTS_COLD : PSIM_PROFILE_WEIGHTS_WARM;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) static void flush_opt(uintptr_t a, uintptr_t end)
{
    for (; a < end; a += 64)
        _mm_clflushopt((void *)a);
}
#endif

size_t psim_profile_cache_evict(const void *p, size_t bytes)
{
    if (!p || !bytes)
        return 0;
#if defined(__x86_64__) || defined(__i386__)
    /* CLFLUSH's line size is 64 bytes on every x86-64 made; CLFLUSHOPT is the same eviction
     * without ordering each flush against the others (several times faster on big buffers). */
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + bytes;
    size_t lines = (end - a + 63) / 64;
    static int opt = -1; /* atomic: profiler threads may race to set it, to the same value */
    int o = __atomic_load_n(&opt, __ATOMIC_RELAXED);
    if (o < 0) {
        /* CPUID leaf 7, EBX bit 23 (CLFLUSHOPT), read directly: clang 14's
         * __builtin_cpu_supports does not know the "clflushopt" feature name. */
        unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
        o = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 23)) ? 1 : 0;
        __atomic_store_n(&opt, o, __ATOMIC_RELAXED);
    }
    _mm_mfence();
    if (o)
        flush_opt(a, end);
    else
        for (; a < end; a += 64)
            _mm_clflush((void *)a);
    _mm_mfence();
    return lines * 64;
#elif defined(__aarch64__)
    /* CTR_EL0.DminLine: log2 of the smallest data cache line in 4-byte words. */
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    uintptr_t line = (uintptr_t)4 << ((ctr >> 16) & 0xf);
    uintptr_t a = (uintptr_t)p & ~(line - 1), end = (uintptr_t)p + bytes;
    size_t lines = (end - a + line - 1) / line;
    __asm__ volatile("dsb ish" ::: "memory");
    for (; a < end; a += line)
        __asm__ volatile("dc civac, %0" ::"r"(a) : "memory");
    __asm__ volatile("dsb ish" ::: "memory");
    return lines * line;
#else
    return 0;
#endif
}
