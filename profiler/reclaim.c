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
 * into warm blocks").
 *
 * In a step the reader does not stop at the read: it runs its next ops, which write their outputs
 * and push the block's lines out of its caches, so the write that takes the block a step later
 * pays little (the cnn's round-robin plan: its stem Conv takes the block the other core read
 * 400 us before, and ran 4 us slower than in a one-device step, not the 24 us of the curve). The
 * op curve is measured again with the destination copying 128 KiB, 512 KiB, 2 MiB and 8 MiB of
 * its own after each read, in both kinds of round (docs/validation.md, "What the reader's cache
 * still holds"). */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "profiler/profiler-private.h"

/* The two workers take turns through `turn` (0: the source writes, 1: the destination reads),
 * each spinning while it waits, as a device thread of the executor spins while it waits for a
 * Recv: a core that sleeps between turns lets its caches go, and the cost goes with them. Two
 * devices pinned to one core (psim_cluster_devices_share_cores: local:4 on two cores) yield it
 * instead: a spinning thread would hold the core the other needs until the scheduler's tick,
 * milliseconds a turn (a study of local:4 on this 2-core VM spent over 15 minutes here). */
typedef struct {
    const PsimProfileOptions *opts;
    gboolean yield;
    gint turn;
    int rounds;
    size_t bytes;
    size_t after;    /* the destination copies this much of its own after each read (0: none) */
    gboolean copy;   /* the source's write is a copy from zb (else from x) */
    const void *x;   /* on the source */
    void *y;         /* on the source: the block written and, in crossing rounds, read */
    void *dst;       /* on the destination: where it copies */
    const void *own; /* on the destination: the block it reads in baseline rounds */
    void *zb;        /* on the destination: written in its every turn (copy) */
    const void *from; /* on the destination: what it copies `after` bytes of, into to */
    void *to;
    double *us;      /* per round: the write's time */
} Turns;

static inline void wait_turn(const Turns *t, gint mine)
{
    while (g_atomic_int_get(&t->turn) != mine) {
        if (t->yield) {
            sched_yield();
            continue;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* One side's rounds: the source (side 0) times its write of y; the destination (side 1) copies
 * out y in odd rounds, so that round r's write follows a crossing read when r - 1 is odd, and its
 * own block in even rounds (and, for a copy, then writes zb, the tensor the source copies; with
 * `after`, then copies that much of its own, as its next ops would). */
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
            if (t->after) {
                memcpy(t->to, t->from, t->after);
                __asm__ __volatile__("" : : "r"(t->to) : "memory");
            }
        }
        g_atomic_int_set(&t->turn, !sd->side);
    }
    return TRUE;
}

/* Runs t's rounds (WARM unrecorded first) on a (source) and b (destination); the median write
 * after a crossing read less the median after a baseline read, in *extra. */
#define RECLAIM_WARM 4
static gboolean turns_run(PsimProfiler *p, int32_t a, int32_t b, Turns *t, double *extra, GError **error)
{
    Side src = {t, 0}, dst = {t, 1};
    psim_worker_post(p->workers[b], side_job, &dst);
    psim_worker_post(p->workers[a], side_job, &src);
    gboolean ok = psim_worker_wait(p->workers[a], error);
    ok = psim_worker_wait(p->workers[b], ok ? error : NULL) && ok;
    int n = t->rounds - RECLAIM_WARM;
    g_autofree double *cross = g_new(double, n + 1), *base = g_new(double, n + 1);
    int nc = 0, nb = 0;
    for (int r = RECLAIM_WARM; r < t->rounds; r++) {
        /* Round r's write comes after round r - 1's read. */
        if ((r - 1) & 1)
            cross[nc++] = t->us[r];
        else
            base[nb++] = t->us[r];
    }
    *extra = psim_stats_median(cross, nc) - psim_stats_median(base, nb);
    return ok;
}

/* Samples of each kind per size up to 1 MiB: a few milliseconds in all; fewer above, where one
 * round takes a millisecond or more (a median of each pass's few, then the passes' mean). With
 * the destination copying more of its own between its read and the write, fewer again: its copy
 * of up to 8 MiB is most of a round. */
#define RECLAIM_SAMPLES 150
#define RECLAIM_SAMPLES_LARGE 8
#define RECLAIM_AFTER_SAMPLES 30
#define RECLAIM_AFTER_SAMPLES_LARGE 8

gboolean psim__profiler_reclaim(PsimProfiler *p, int32_t a, int32_t b, uint64_t max_bytes,
                                double op_us[PSIM_RECLAIM_N], double copy_us[PSIM_RECLAIM_N],
                                double after[PSIM_RECLAIM_N * PSIM_RECLAIM_AFTER_N], GError **error)
{
    int32_t n_sizes = psim_reclaim_points(max_bytes); /* NAN for the others */
    for (int32_t k = 0; k < PSIM_RECLAIM_N; k++) {
        op_us[k] = copy_us[k] = NAN;
        for (int32_t j = 0; j < PSIM_RECLAIM_AFTER_N; j++)
            after[k * PSIM_RECLAIM_AFTER_N + j] = NAN;
    }
    const size_t max = psim_reclaim_bytes[n_sizes - 1];
    const size_t max_after = psim_reclaim_after_bytes[PSIM_RECLAIM_AFTER_N - 1];
    /* On a: x, then y; on b: the copy's destination, its own block, zb, then what it copies
     * after its reads and where to. */
    char *on_a = psim__profiler_touch(p, a, 2 * max, error);
    if (!on_a)
        return FALSE;
    char *on_b = psim__profiler_touch(p, b, 3 * max + 2 * max_after, error);
    if (!on_b) {
        psim__profiler_untouch(p, a, on_a);
        return FALSE;
    }
    gboolean ok = TRUE;
    double us[RECLAIM_WARM + 2 * RECLAIM_SAMPLES];
    /* Per size: by an op, by a copy, then by an op after each distance. */
    for (int k = 0; k < (2 + PSIM_RECLAIM_AFTER_N) * PSIM_RECLAIM_N && ok; k++) {
        int32_t size = k % PSIM_RECLAIM_N, kind = k / PSIM_RECLAIM_N; /* 0 op, 1 copy, 2.. after */
        if (size >= n_sizes)
            continue;
        uint64_t bytes = psim_reclaim_bytes[size];
        gboolean large = bytes > (UINT64_C(1) << 20);
        size_t after_bytes = kind >= 2 ? psim_reclaim_after_bytes[kind - 2] : 0;
        int samples = kind < 2 ? (large ? RECLAIM_SAMPLES_LARGE : RECLAIM_SAMPLES)
                               : (large || after_bytes > (UINT64_C(2) << 20) ? RECLAIM_AFTER_SAMPLES_LARGE
                                                                               : RECLAIM_AFTER_SAMPLES);
        Turns t = {.opts = &p->opts,
                   .yield = psim_cluster_devices_share_cores(p->cluster, a, b),
                   .rounds = RECLAIM_WARM + 2 * samples,
                   .bytes = bytes,
                   .after = after_bytes,
                   .copy = kind == 1,
                   .x = on_a,
                   .y = on_a + max,
                   .dst = on_b,
                   .own = on_b + max,
                   .zb = on_b + 2 * max,
                   .from = on_b + 3 * max,
                   .to = on_b + 3 * max + max_after,
                   .us = us};
        double extra;
        ok = turns_run(p, a, b, &t, &extra, error);
        if (!ok)
            break;
        if (kind < 2)
            (kind ? copy_us : op_us)[size] = MAX(extra, 0.0);
        else
            after[size * PSIM_RECLAIM_AFTER_N + kind - 2] = MAX(extra, 0.0);
    }
    psim__profiler_untouch(p, a, on_a);
    psim__profiler_untouch(p, b, on_b);
    return ok;
}
