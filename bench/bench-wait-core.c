/* What a wait and a turn on another core cost an op, outside the executor (issue 14;
 * docs/validation.md). Plain threads pinned to cores 0 and 1 and a streaming op (each element
 * scaled, made non-negative and written out), no graph, no kernels of the project.
 *
 * Part 1, the wait: a chain of K ops on one thread, once straight on after the same chain and
 * once after a wait of W us spent as the executor waits for a Recv (the pause hint for
 * PSIM_EXEC_PAUSE_SPIN_US, then sched_yield), alternating, REPS times each; per position in the
 * chain the mean time after the wait less straight on, and the sum over the chain. Working set
 * in the L2 (the ops reuse two 512 KiB buffers) or beyond it (eight 1 MiB buffers).
 *
 * Part 2, the turn: a chain of 40 ops of S KiB, each reading the previous op's output and writing
 * a block of its thread's pool of four: on one thread; on one thread copying its input into a
 * buffer of its own first; on two threads taking turns (op i on thread i % 2), each copying its
 * input from the other thread's block first, as the executor's destination thread copies a
 * transfer between CPU devices. The mean time of the ops alone (not the copies, not the waits).
 *   build/bench-wait-core [REPS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec-private.h"
#include "placesim/exec.h"

static volatile float sink;

/* The op: out = |in * 0.9999 + 0.0001| over n floats. */
static void op(const float *in, float *out, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        float v = in[j] * 0.9999f + 0.0001f;
        out[j] = v > 0 ? v : -v;
    }
}

static void pin(int core)
{
    cpu_set_t c;
    CPU_ZERO(&c);
    CPU_SET(core, &c);
    pthread_setaffinity_np(pthread_self(), sizeof c, &c);
}

/* As the executor waits for a Recv that has not come (exec/executor.c, inbox_wait). */
static void wait_us(double us)
{
    double now = psim_exec_now_us(), end = now + us, pause_end = now + PSIM_EXEC_PAUSE_SPIN_US;
    while ((now = psim_exec_now_us()) < end) {
        if (now < pause_end)
            psim__cpu_relax();
        else
            sched_yield();
    }
}

static float *block(size_t n)
{
    float *b = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!b) {
        fprintf(stderr, "bench-wait-core: out of memory\n");
        exit(1);
    }
    for (size_t j = 0; j < n; j++)
        b[j] = (float)(j % 7) - 3;
    return b;
}

#define K 8
static void part_wait(int reps, int n_bufs, size_t n)
{
    float **buf = malloc(sizeof(float *) * (size_t)(n_bufs + 1));
    for (int b = 0; b <= n_bufs; b++)
        buf[b] = block(n);
    static const double waits[] = {50, 500, 1500, 5000};
    for (size_t w = 0; w < sizeof waits / sizeof *waits; w++) {
        double straight[K] = {0}, after[K] = {0};
        for (int r = 0; r < reps; r++)
            for (int mode = 0; mode < 2; mode++) {
                for (int k = 0; k < K; k++) /* the chain once, to start from the same state */
                    op(buf[k % n_bufs], buf[(k + 1) % n_bufs], n);
                if (mode)
                    wait_us(waits[w]);
                for (int k = 0; k < K; k++) {
                    double t0 = psim_exec_now_us();
                    op(buf[k % n_bufs], buf[(k + 1) % n_bufs], n);
                    (mode ? after : straight)[k] += psim_exec_now_us() - t0;
                }
            }
        double sum = 0;
        printf("  wait %5.0f us: op %6.1f us straight on; after the wait, per position:", waits[w],
               straight[0] / reps);
        for (int k = 0; k < K; k++) {
            sum += (after[k] - straight[k]) / reps;
            printf(" %+.1f", (after[k] - straight[k]) / reps);
        }
        printf("  (chain %+.1f us)\n", sum);
    }
    for (int b = 0; b <= n_bufs; b++)
        free(buf[b]);
    free(buf);
}

#define CHAIN 40
typedef struct {
    int mode; /* 0 one thread, 1 one thread with a copy, 2 two threads taking turns */
    int reps;
    size_t n;
    float *pool[2][4], *copy[2][4];
    const float *out[CHAIN];
    atomic_int turn;
    double op_us[2];
    long n_ops[2];
} Turns;

typedef struct {
    Turns *t;
    int me;
} Arg;

static void *turns_thread(void *p)
{
    Arg *a = p;
    Turns *t = a->t;
    pin(a->me);
    int k = 0;
    for (int r = 0; r < t->reps; r++)
        for (int i = 0; i < CHAIN; i++) {
            if ((t->mode == 2 ? i % 2 : 0) != a->me)
                continue;
            double pause_end = psim_exec_now_us() + PSIM_EXEC_PAUSE_SPIN_US;
            while (atomic_load(&t->turn) != r * CHAIN + i) {
                if (psim_exec_now_us() < pause_end)
                    psim__cpu_relax();
                else
                    sched_yield();
            }
            const float *in = i ? t->out[i - 1] : t->pool[a->me][3];
            if (i && t->mode >= 1) {
                float *c = t->copy[a->me][k & 3];
                memcpy(c, in, t->n * sizeof(float));
                in = c;
            }
            float *out = t->pool[a->me][k++ & 3];
            if (out == in)
                out = t->pool[a->me][k++ & 3];
            double t0 = psim_exec_now_us();
            op(in, out, t->n);
            double t1 = psim_exec_now_us();
            t->out[i] = out;
            if (r >= 2 && i > 0) { /* two chains of warm-up; the first op reads no output */
                t->op_us[a->me] += t1 - t0;
                t->n_ops[a->me]++;
            }
            atomic_store(&t->turn, r * CHAIN + i + 1);
        }
    return NULL;
}

static double part_turns(int mode, int reps, size_t kib)
{
    Turns t = {.mode = mode, .reps = reps, .n = kib * 256};
    for (int th = 0; th < 2; th++)
        for (int b = 0; b < 4; b++) {
            t.pool[th][b] = block(t.n);
            t.copy[th][b] = block(t.n);
        }
    atomic_store(&t.turn, 0);
    Arg a0 = {&t, 0}, a1 = {&t, 1};
    pthread_t p0, p1;
    pthread_create(&p0, NULL, turns_thread, &a0);
    if (mode == 2)
        pthread_create(&p1, NULL, turns_thread, &a1);
    pthread_join(p0, NULL);
    if (mode == 2)
        pthread_join(p1, NULL);
    for (int th = 0; th < 2; th++)
        for (int b = 0; b < 4; b++) {
            free(t.pool[th][b]);
            free(t.copy[th][b]);
        }
    return (t.op_us[0] + t.op_us[1]) / (double)(t.n_ops[0] + t.n_ops[1]);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 300;
    if (reps < 3) {
        fprintf(stderr, "usage: bench-wait-core [REPS >= 3]\n");
        return 2;
    }
    pin(0);
    printf("part 1: %d ops after a wait against straight on, %d times each\n", K, reps);
    printf(" in the L2 (two 512 KiB buffers):\n");
    part_wait(reps, 2, 128 * 1024);
    printf(" beyond the L2 (eight 1 MiB buffers):\n");
    part_wait(reps, 8, 256 * 1024);
    printf("part 2: mean op of a chain of %d, %d times (us; ratio to one thread)\n", CHAIN, reps);
    printf("  %8s %12s %20s %22s\n", "KiB", "one thread", "one thread + copy", "two threads in turn");
    static const size_t sizes[] = {64, 1024, 4096};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        double one = part_turns(0, reps, sizes[s]), copy = part_turns(1, reps, sizes[s]),
               two = part_turns(2, reps, sizes[s]);
        printf("  %8zu %12.1f %13.1f (%.3f) %15.1f (%.3f)\n", sizes[s], one, copy, copy / one, two, two / one);
    }
    (void)sink;
    return 0;
}
