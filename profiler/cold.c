/* What a CPU device pays to write into a pooled block whose lines went cold (psim_cost_cold_us;
 * docs/validation.md, "Cold blocks"), measured on the device's worker.
 *
 * The executor's pool hands a node the block of its size class that came back last. In a
 * one-device step that is usually the block the node's own input has just given back, still in
 * the core's caches, and the in-situ rows are timed that way. Where a plan splits the graph, a
 * device often takes a block it last wrote in the step before: densenet121's first Relu on the
 * second device of a round-robin plan took 88 us against 30 us when its output block was
 * written just before it (same input, same kernel). How cold a block is depends on how many
 * bytes were written since it was last touched (its reuse distance): past the core's own cache
 * the lines come from the shared one, past that from memory.
 *
 * Per distance D of psim_cold_distance_bytes: a 1 MiB copy into block y from a source x that was
 * just read (so that only y is cold), after D bytes of writes into another buffer, against the
 * same copy right after a copy into y (hot). The extra per MiB is the median of the first less
 * the median of the second, over all the samples taken (in one go by the calibration, pooled
 * over passes by a link session's refresh). */
#include <string.h>

#include "profiler/profiler-private.h"

#define COLD_BLOCK (UINT64_C(1) << 20)

typedef struct {
    const PsimProfileOptions *opts;
    char *x, *y, *ev;
    int n_cold, n_hot;
    PsimColdSamples *out;
} ColdJob;

static double timed_write(const PsimProfileOptions *o, char *y, const char *x)
{
    double t0 = psim__profiler_clock_us(o);
    memcpy(y, x, COLD_BLOCK);
    /* The stores leave the core (a full fence; spelled out on x86, where ThreadSanitizer's
     * build rejects the atomic fence). */
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("mfence" : : : "memory");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
    __asm__ __volatile__("" : : "r"(y) : "memory");
    return psim__profiler_clock_us(o) - t0;
}

static void touch_read(const char *x, size_t n)
{
    volatile char sink = 0;
    char acc = 0;
    for (size_t i = 0; i < n; i += 64)
        acc ^= x[i];
    sink = acc;
    (void)sink;
}

static gboolean cold_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    ColdJob *j = arg;
    memcpy(j->y, j->x, COLD_BLOCK);
    for (int r = 0; r < j->n_hot; r++) {
        memcpy(j->y, j->x, COLD_BLOCK);
        double us = timed_write(j->opts, j->y, j->x);
        g_array_append_val(j->out->hot, us);
    }
    for (int k = 0; k < PSIM_COLD_N; k++) {
        size_t d = (size_t)psim_cold_distance_bytes[k];
        for (int r = 0; r < j->n_cold; r++) {
            memset(j->ev, (int)(j->out->cold[k]->len + 1), d);
            touch_read(j->x, COLD_BLOCK);
            double us = timed_write(j->opts, j->y, j->x);
            g_array_append_val(j->out->cold[k], us);
        }
    }
    return TRUE;
}

void psim__cold_samples_init(PsimColdSamples *s)
{
    s->hot = g_array_new(FALSE, FALSE, sizeof(double));
    for (int k = 0; k < PSIM_COLD_N; k++)
        s->cold[k] = g_array_new(FALSE, FALSE, sizeof(double));
}

void psim__cold_samples_clear(PsimColdSamples *s)
{
    if (s->hot)
        g_array_free(s->hot, TRUE);
    for (int k = 0; k < PSIM_COLD_N; k++)
        if (s->cold[k])
            g_array_free(s->cold[k], TRUE);
    memset(s, 0, sizeof *s);
}

size_t psim__cold_buffer_bytes(void)
{
    return 2 * COLD_BLOCK + (size_t)psim_cold_distance_bytes[PSIM_COLD_N - 1];
}

gboolean psim__profiler_cold(PsimProfiler *p, int32_t dev, void *own, int n_cold, int n_hot, PsimColdSamples *out,
                             GError **error)
{
    char *buf = own ? own : psim__profiler_touch(p, dev, psim__cold_buffer_bytes(), error);
    if (!buf)
        return FALSE;
    ColdJob j = {.opts = &p->opts,
                 .x = buf,
                 .y = buf + COLD_BLOCK,
                 .ev = buf + 2 * COLD_BLOCK,
                 .n_cold = n_cold,
                 .n_hot = n_hot,
                 .out = out};
    psim_worker_post(p->workers[dev], cold_job, &j);
    gboolean ok = psim_worker_wait(p->workers[dev], error);
    if (!own)
        psim__profiler_untouch(p, dev, buf);
    return ok;
}

void psim__cold_curve(const PsimColdSamples *s, double us_per_mib[PSIM_COLD_N])
{
    double base = psim_stats_median((double *)s->hot->data, s->hot->len);
    for (int k = 0; k < PSIM_COLD_N; k++)
        us_per_mib[k] = MAX(psim_stats_median((double *)s->cold[k]->data, s->cold[k]->len) - base, 0.0) *
                        1048576.0 / (double)COLD_BLOCK;
}
