/* What a transfer between two CPU devices leaves its source device to pay, measured on their
 * workers (docs/validation.md, "What a transfer leaves behind").
 *
 * The executor's destination thread copies a tensor out of the source's block; the block goes
 * back to the source's pool with its lines in the destination core's cache, and whatever of the
 * source next writes into it must take each line back from that core first. On this project's
 * Intel VM a 200 KB write took 13.8 us after the other core had read the block against 4.4 us
 * when it had not. The link rows do not see it (it is paid after the transfer, on the other
 * device), nor do the in-situ rows (nothing crosses in a one-device run), so a plan that moves a
 * tensor at every op (round-robin) ran 10-15% slower than simulated.
 *
 * Per size, two kinds of write into the block, each timed on the source's worker up to the point
 * where its stores have left the core (a fence: a small block's stores otherwise sit in the store
 * buffer past the clock, and the next op pays for them; 8 KiB measured 0.1 us without, 0.7 us
 * with): an op's output (a copy from a block of its own: the C library's widest vector stores, as
 * fast as a kernel writes), and a copy from a block the destination has just written (what the
 * executor does when the other device sends a tensor back: its reads of the other core's lines
 * overlap most of the cost). Between two writes the destination's worker reads either that block
 * (crossing) or a block of its own of the same size (baseline), in turn, so that both kinds of
 * sample see the same rhythm of turns. The cost is the crossing samples' median less the
 * baseline's.
 *
 * Sizes up to 16 MiB: where the host runs the two vCPUs on cores that share their last-level
 * cache, the cost stops growing at about the size of the other core's own cache (256 KiB-1 MiB);
 * where it runs them on cores that do not (the same VM switches between the two for minutes at a
 * time), a block the other core read keeps megabytes of lines there, and a 1 MiB copy into it
 * took 150-200 us more instead of 0-1 (docs/validation.md, "reclaim past 1 MiB, and copies
 * into warm blocks"). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "profiler/profiler-private.h"

/* The two workers take turns through `turn` (0: the source writes, 1: the destination reads),
 * each spinning while it waits, as a device thread of the executor spins while it waits for a
 * Recv: a core that sleeps between turns lets its caches go, and the cost goes with them. */
typedef struct {
    const PsimProfileOptions *opts;
    gint turn;
    int rounds;
    size_t bytes;
    gboolean copy;   /* the source's write is a copy from zb (else from x) */
    const void *x;   /* on the source */
    void *y;         /* on the source: the block written and, in crossing rounds, read */
    void *dst;       /* on the destination: where it copies */
    const void *own; /* on the destination: the block it reads in baseline rounds */
    void *zb;        /* on the destination: written in its every turn (copy) */
    double *us;      /* per round: the write's time */
} Turns;

static inline void wait_turn(const Turns *t, gint mine)
{
    while (g_atomic_int_get(&t->turn) != mine) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* One side's rounds: the source (side 0) times its write of y; the destination (side 1) copies
 * out y in odd rounds, so that round r's write follows a crossing read when r - 1 is odd, and its
 * own block in even rounds (and, for a copy, then writes zb, the tensor the source copies). */
typedef struct {
    Turns *t;
    gint side;
} Side;

static gboolean side_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    const Side *sd = arg;
    Turns *t = sd->t;
    for (int r = 0; r < t->rounds; r++) {
        wait_turn(t, sd->side);
        if (sd->side == 0) {
            double t0 = psim__profiler_clock_us(t->opts);
            memcpy(t->y, t->copy ? t->zb : t->x, t->bytes);
            atomic_thread_fence(memory_order_seq_cst); /* the stores leave the core */
            t->us[r] = psim__profiler_clock_us(t->opts) - t0;
        } else {
            memcpy(t->dst, r & 1 ? (const void *)t->y : t->own, t->bytes);
            __asm__ __volatile__("" : : "r"(t->dst) : "memory");
            if (t->copy) {
                memcpy(t->zb, t->own, t->bytes);
                __asm__ __volatile__("" : : "r"(t->zb) : "memory");
            }
        }
        g_atomic_int_set(&t->turn, !sd->side);
    }
    return TRUE;
}

/* Samples of each kind per size up to 1 MiB: a few milliseconds in all; fewer above, where one
 * round takes a millisecond or more (a median of each pass's few, then the passes' mean). */
#define RECLAIM_SAMPLES 150
#define RECLAIM_SAMPLES_LARGE 8

gboolean psim__profiler_reclaim(PsimProfiler *p, int32_t a, int32_t b, uint64_t max_bytes,
                                double op_us[PSIM_RECLAIM_N], double copy_us[PSIM_RECLAIM_N], GError **error)
{
    int32_t n_sizes = psim_reclaim_points(max_bytes); /* NAN for the others */
    for (int32_t k = 0; k < PSIM_RECLAIM_N; k++)
        op_us[k] = copy_us[k] = NAN;
    const size_t max = psim_reclaim_bytes[n_sizes - 1];
    /* On a: x, then y; on b: the copy's destination, its own block, then zb. */
    char *on_a = psim__profiler_touch(p, a, 2 * max, error);
    if (!on_a)
        return FALSE;
    char *on_b = psim__profiler_touch(p, b, 3 * max, error);
    if (!on_b) {
        psim__profiler_untouch(p, a, on_a);
        return FALSE;
    }
    gboolean ok = TRUE;
    /* Four unrecorded rounds, then baseline and crossing writes in turn. */
    enum { WARM = 4, ROUNDS = WARM + 2 * RECLAIM_SAMPLES };
    double us[ROUNDS], cross[RECLAIM_SAMPLES], base[RECLAIM_SAMPLES];
    for (int k = 0; k < 2 * PSIM_RECLAIM_N && ok; k++) {
        if (k % PSIM_RECLAIM_N >= n_sizes)
            continue;
        gboolean copy = k >= PSIM_RECLAIM_N;
        uint64_t bytes = psim_reclaim_bytes[k % PSIM_RECLAIM_N];
        int rounds = WARM + 2 * (bytes > (UINT64_C(1) << 20) ? RECLAIM_SAMPLES_LARGE : RECLAIM_SAMPLES);
        Turns t = {.opts = &p->opts,
                   .rounds = rounds,
                   .bytes = bytes,
                   .copy = copy,
                   .x = on_a,
                   .y = on_a + max,
                   .dst = on_b,
                   .own = on_b + max,
                   .zb = on_b + 2 * max,
                   .us = us};
        Side src = {&t, 0}, dst = {&t, 1};
        psim_worker_post(p->workers[b], side_job, &dst);
        psim_worker_post(p->workers[a], side_job, &src);
        ok = psim_worker_wait(p->workers[a], error);
        ok = psim_worker_wait(p->workers[b], ok ? error : NULL) && ok;
        int nc = 0, nb = 0;
        for (int r = WARM; r < rounds; r++) {
            /* Round r's write comes after round r - 1's read. */
            if ((r - 1) & 1)
                cross[nc++] = us[r];
            else
                base[nb++] = us[r];
        }
        if (ok)
            (copy ? copy_us : op_us)[k % PSIM_RECLAIM_N] =
                MAX(psim_stats_median(cross, nc) - psim_stats_median(base, nb), 0.0);
    }
    psim__profiler_untouch(p, a, on_a);
    psim__profiler_untouch(p, b, on_b);
    return ok;
}
