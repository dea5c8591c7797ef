/* What a copy between the executor's CPU devices costs when its destination block was last read
 * by the other core, against a block of the copier's own (issue 14; docs/validation.md, "Cross-
 * core copies"). Plain threads pinned to cores 0 and 1, no graph, no kernels of the project.
 *
 * Per round, core 1 writes the source block (a tensor it just produced), then core 0 copies it
 * into a destination block of one of two kinds, alternating round by round:
 *   own   a block only core 0 ever touches (the link profile's state, profiler/links.c);
 *   read  a block core 1 copied out just before (in a round-robin step, the destination's
 *         newest free block is often its own last output, which the other device copied out).
 * Prints, per size, the median copy time of each kind and their ratio; with REPEAT > 1, the
 * whole table REPEAT times PAUSE seconds apart, to show the host's state change over minutes (on
 * the 2-vCPU AMD VM of 2026-11-29 the `read` copy of 1 MiB took 33 us in some minutes and
 * 365-423 us in others, with `own` at 23-43 us: where the hypervisor places the two vCPUs).
 *   build/bench-cross-core [ROUNDS] [REPEAT] [PAUSE] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#define MAX_BYTES (16u << 20)
#define MAX_ROUNDS 1000

typedef struct {
    size_t bytes;
    int rounds;
    char *src, *own, *read, *scratch;
    atomic_int turn; /* 0: core 1's turn, 1: core 0's */
    double us[2][MAX_ROUNDS];
} Bench;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void pin(int core)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void wait_turn(Bench *b, int mine)
{
    while (atomic_load(&b->turn) != mine) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* Core 1: in a `read` round, copies the destination block out first; then writes the source. */
static void *producer(void *p)
{
    Bench *b = p;
    pin(1);
    for (int r = 0; r < 2 * b->rounds; r++) {
        wait_turn(b, 0);
        if (r & 1)
            memcpy(b->scratch, b->read, b->bytes);
        memset(b->src, r & 0x7f, b->bytes);
        atomic_store(&b->turn, 1);
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void run(Bench *b)
{
    atomic_store(&b->turn, 0);
    pthread_t th;
    pthread_create(&th, NULL, producer, b);
    for (int r = 0; r < 2 * b->rounds; r++) {
        wait_turn(b, 1);
        char *dst = r & 1 ? b->read : b->own;
        double t0 = now_us();
        memcpy(dst, b->src, b->bytes);
        __asm__ __volatile__("" : : "r"(dst) : "memory");
        b->us[r & 1][r / 2] = now_us() - t0;
        atomic_store(&b->turn, 0);
    }
    pthread_join(th, NULL);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 100, repeat = argc > 2 ? atoi(argv[2]) : 1;
    int pause_s = argc > 3 ? atoi(argv[3]) : 30;
    if (rounds < 4 || rounds > MAX_ROUNDS || repeat < 1 || pause_s < 0) {
        fprintf(stderr, "usage: bench-cross-core [ROUNDS 4-%d] [REPEAT] [PAUSE]\n", MAX_ROUNDS);
        return 2;
    }
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        fprintf(stderr, "bench-cross-core: needs two cores\n");
        return 2;
    }
    Bench *b = g_new0(Bench, 1);
    b->src = g_malloc(MAX_BYTES);
    b->scratch = g_malloc(MAX_BYTES);
    b->own = g_malloc(MAX_BYTES);
    b->read = g_malloc(MAX_BYTES);
    memset(b->src, 1, MAX_BYTES);
    memset(b->scratch, 1, MAX_BYTES);
    memset(b->own, 1, MAX_BYTES);
    memset(b->read, 1, MAX_BYTES);
    printf("| time | bytes | own block, us | block the other core read, us | read / own |\n");
    printf("|---|---|---|---|---|\n");
    for (int k = 0; k < repeat; k++) {
        if (k > 0)
            sleep((unsigned)pause_s);
        for (size_t bytes = 1u << 20; bytes <= MAX_BYTES; bytes <<= 2) {
            b->bytes = bytes;
            b->rounds = rounds;
            run(b);
            /* The first few rounds map pages and fill the caches. */
            double own = median(b->us[0] + 2, rounds - 2), read = median(b->us[1] + 2, rounds - 2);
            g_autoptr(GDateTime) t = g_date_time_new_now_utc();
            g_autofree char *ts = g_date_time_format(t, "%H:%M:%S");
            printf("| %s | %zu | %.1f | %.1f | %.2f |\n", ts, bytes, own, read, read / own);
            fflush(stdout);
        }
    }
    g_free(b->src);
    g_free(b->scratch);
    g_free(b->own);
    g_free(b->read);
    g_free(b);
    return 0;
}
