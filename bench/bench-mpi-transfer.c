/* A tensor between two MPI tasks through placesim's transport against a plain MPI ping-pong,
 * in the same run (issue 16): run as
 *   mpirun -np 2 build/bench-mpi-transfer [ROUNDS]
 * First, before placesim starts, rank 0 and 1 ping-pong with MPI_Send/MPI_Recv (1 KiB and 16 MiB);
 * then placesim runs the plan x (task 0) -> y = Identity(x) (task 1) -> z = Identity(y) (task 0),
 * whose step is one transfer each way (Identity shares its input: no copy), and for 1 KiB the
 * same with HOPS round trips in one step (x -> y0 -> w1 -> y1 -> ..., default 32): a transfer
 * within a step, without the step's start. Each figure is the median over ROUNDS (default 200
 * for 1 KiB, 20 for 16 MiB) of half a round trip; bandwidth is bytes over that. Prints one line
 * per size and method, and the ratios. Run as mpirun -np 2 build/bench-mpi-transfer [ROUNDS [HOPS]]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/formats.h"
#include "placesim/placer.h"

#ifdef PSIM_HAVE_MPI
#include <mpi.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Half the round trip of `bytes` by MPI_Send/MPI_Recv, median of n (after 3 warm-ups). */
static double plain_us(int rank, size_t bytes, int n)
{
    char *buf = g_malloc0(bytes);
    double *t = g_new(double, n);
    for (int k = -3; k < n; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
        if (k >= 0)
            t[k] = 0.5 * (MPI_Wtime() - t0) * 1e6;
    }
    double m = median(t, n);
    g_free(t);
    g_free(buf);
    return m;
}

/* Rank 0: placesim's half round trips through task 1, `hops` round trips a step
 * (psim_mpi_pingpong_hops), median of n. */
static double placesim_us(PsimMpi *m, size_t bytes, int hops, int n, GError **error)
{
    double *t = g_new(double, n);
    double r = psim_mpi_pingpong_hops(m, 0, 1, bytes, hops, n, t, error) ? median(t, n) : -1;
    g_free(t);
    return r;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "bench-mpi-transfer: run it with mpirun -np 2\n");
        MPI_Finalize();
        return 2;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 0;
    const size_t sizes[2] = {1024, 16u << 20};
    const int n[2] = {rounds > 0 ? rounds : 200, rounds > 0 ? rounds : 20};
    double plain[2];
    for (int i = 0; i < 2; i++)
        plain[i] = plain_us(rank, sizes[i], n[i]);
    GError *err = NULL;
    PsimMpi *m = psim_mpi_new(&argc, &argv, &err);
    if (!m) {
        fprintf(stderr, "bench-mpi-transfer: %s\n", err->message);
        return 1;
    }
    if (rank != 0) {
        /* Task 1 serves both plans, one after the other. */
        if (!psim_mpi_serve(m, &err)) {
            fprintf(stderr, "bench-mpi-transfer: task 1: %s\n", err->message);
            psim_mpi_abort(m);
        }
        psim_mpi_free(m);
        return 0;
    }
    int hops = argc > 2 ? atoi(argv[2]) : 32;
    if (hops < 1 || hops > 4096)
        hops = 32;
    double ours[3];
    for (int i = 0; i < 3; i++) {
        ours[i] = i < 2 ? placesim_us(m, sizes[i], 1, n[i], &err) : placesim_us(m, sizes[0], hops, n[0], &err);
        if (ours[i] < 0) {
            fprintf(stderr, "bench-mpi-transfer: %s\n", err->message);
            psim_mpi_abort(m);
        }
    }
    printf("size      method    half round trip   bandwidth\n");
    for (int i = 0; i < 2; i++) {
        printf("%-9s plain-mpi %12.2f us %8.3f GB/s\n", i ? "16MiB" : "1KiB", plain[i], sizes[i] / plain[i] / 1e3);
        printf("%-9s placesim  %12.2f us %8.3f GB/s\n", i ? "16MiB" : "1KiB", ours[i], sizes[i] / ours[i] / 1e3);
    }
    printf("1KiB      placesim, %d round trips a step %6.2f us %8.3f GB/s\n", hops, ours[2], sizes[0] / ours[2] / 1e3);
    printf("1 KiB latency: placesim / plain = %.2f (target <= 2); within a step %.2f\n", ours[0] / plain[0],
           ours[2] / plain[0]);
    printf("16 MiB bandwidth: placesim / plain = %.3f (target >= 0.90)\n", plain[1] / ours[1]);
    psim_mpi_free(m);
    return 0;
}

#else
int main(void)
{
    fprintf(stderr, "bench-mpi-transfer: this build has no MPI\n");
    return 2;
}
#endif
