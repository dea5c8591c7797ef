/* Kernel benchmarks (run by bench/bench-kernels.sh, figures in docs/perf.md).
 *   bench-kernels matmul N REPS      our MatMul kernel vs a plain cblas_sgemm, N x N x N float32,
 *                                    one core; runs interleaved, medians of wall and thread CPU
 *   bench-kernels model FILE STEPS [FEED]
 *                                    one graph on a host worker through the single-device
 *                                    executor, fed as `run --feed FEED` feeds it (random, zeros,
 *                                    ones or ramp; default ramp, arange(n)/n); per-step wall and
 *                                    worker-thread CPU time (medians after one warm-up), and
 *                                    per-op-type time (mean wall per step, and the sum of each
 *                                    node's fastest step)
 *   bench-kernels turns M K N REPS  float32 [M,K] x [K,N] by our MatMul kernel and by a plain
 *                                    cblas_sgemm, each on one thread alone and on two threads
 *                                    (cores 0 and 1, matrices of their own) taking turns, as two
 *                                    executor devices of a split plan do; medians of wall time
 *   bench-kernels feeds FILE STEPS FEED_A FEED_B
 *                                    model's figures for two feeds, their steps in turn on one
 *                                    executor (bench/feed-sensitivity.sh)
 *   bench-kernels nodes FILE OP REPS [FEED]
 *                                    each OP node alone on its static input shapes (fed FEED, or
 *                                    a fixed pattern in [0, 1)): best thread CPU time and GFLOP/s
 *                                    (PSIM_BENCH_NODES=1 in model mode prints per-node wall
 *                                    times instead)
 * The machine is shared: thread CPU time is the figure that says what the kernels cost. */
#define _GNU_SOURCE
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "placesim/exec.h"
#include "placesim/kernels.h"
#include "placesim/formats.h"

static double now_us(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static PsimTensor *host_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                              GError **error)
{
    (void)ctx;
    return psim_tensor_new(dt, r, d, error);
}

/* The executor's allocator (block reuse, as in a real step), for the MatMul comparison. */
static PsimTensor *worker_alloc(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                                GError **error)
{
    return psim_worker_tensor_new(ctx->alloc_user, dt, r, d, error);
}

static int bench_matmul(int64_t n, int reps)
{
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, NULL);
    /* The registry sets OpenBLAS to one thread at init; the plain call runs under the same. */
    g_assert_nonnull(psim_kernel_lookup("MatMul", "CPU", PSIM_DTYPE_FLOAT32));
    openblas_set_num_threads(1);
    int64_t d[2] = {n, n};
    PsimTensor *a = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    PsimTensor *b = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    PsimTensor *c = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    GRand *r = g_rand_new_with_seed(1);
    for (int64_t i = 0; i < n * n; i++) {
        ((float *)a->data)[i] = (float)g_rand_double_range(r, -1, 1);
        ((float *)b->data)[i] = (float)g_rand_double_range(r, -1, 1);
    }
    g_rand_free(r);
    g_autoptr(PsimGraph) g = psim_graph_new("bench");
    PsimNode *node = psim_graph_node_add(g, "mm", "MatMul", NULL);
    psim_graph_node_outputs_set(g, node, 1);
    const PsimKernelDef *def = psim_kernel_lookup("MatMul", "CPU", PSIM_DTYPE_FLOAT32);
    double *kw = g_new(double, reps), *kc = g_new(double, reps), *bw = g_new(double, reps),
           *bc = g_new(double, reps);
    for (int i = -1; i < reps; i++) {
        PsimTensor *in[2] = {a, b}, *out[1] = {NULL};
        PsimKernelCtx ctx = {.graph = g, .node = node, .n_inputs = 2, .inputs = in,
                             .n_outputs = 1, .outputs = out, .device_type = "CPU",
                             .alloc = worker_alloc, .alloc_user = w};
        double w0 = now_us(CLOCK_MONOTONIC), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
        if (!def->run(&ctx, NULL))
            return 1;
        double w1 = now_us(CLOCK_MONOTONIC), c1 = now_us(CLOCK_THREAD_CPUTIME_ID);
        psim_tensor_unref(out[0]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)n, (blasint)n,
                    1.0f, a->data, (blasint)n, b->data, (blasint)n, 0.0f, c->data, (blasint)n);
        double w2 = now_us(CLOCK_MONOTONIC), c2 = now_us(CLOCK_THREAD_CPUTIME_ID);
        if (i < 0)
            continue; /* warm-up */
        kw[i] = w1 - w0, kc[i] = c1 - c0, bw[i] = w2 - w1, bc[i] = c2 - c1;
    }
    double flop = 2.0 * (double)n * n * n;
    double mkw = psim_stats_median(kw, reps), mkc = psim_stats_median(kc, reps),
           mbw = psim_stats_median(bw, reps), mbc = psim_stats_median(bc, reps);
    printf("{\"bench\": \"matmul\", \"n\": %" G_GINT64_FORMAT ", \"reps\": %d, "
           "\"kernel_wall_ms\": %.2f, \"kernel_cpu_ms\": %.2f, \"sgemm_wall_ms\": %.2f, "
           "\"sgemm_cpu_ms\": %.2f, \"kernel_gflops_cpu\": %.1f, \"sgemm_gflops_cpu\": %.1f, "
           "\"ratio_cpu\": %.3f, \"ratio_wall\": %.3f}\n",
           n, reps, mkw / 1e3, mkc / 1e3, mbw / 1e3, mbc / 1e3, flop / mkc / 1e3, flop / mbc / 1e3,
           mbc / mkc, mbw / mkw);
    psim_tensor_unref(a);
    psim_tensor_unref(b);
    psim_tensor_unref(c);
    return 0;
}

/* One side of `turns`: its matrices, the call it makes, its samples. */
typedef struct {
    int core, me;
    gboolean kernel; /* the MatMul kernel, else cblas_sgemm */
    int64_t m, k, n;
    int reps;
    PsimTensor *a, *b, *c;
    PsimWorker *pool; /* the kernel's outputs come from its block pool, as in a step */
    const PsimGraph *g; /* one MatMul node, and its kernel */
    const PsimNode *node;
    const PsimKernelDef *def;
    double *us;
    gint *turn; /* NULL: alone */
} Turn;

static PsimTensor *worker_alloc_uninit(PsimKernelCtx *ctx, PsimDType dt, int32_t r, const int64_t *d,
                                       GError **error)
{
    return psim_worker_tensor_new_uninit(ctx->alloc_user, dt, r, d, error);
}

static void turn_call(Turn *t)
{
    if (t->kernel) {
        PsimTensor *in[2] = {t->a, t->b}, *out[1] = {NULL};
        PsimKernelCtx ctx = {.graph = t->g,
                             .node = t->node,
                             .n_inputs = 2,
                             .inputs = in,
                             .n_outputs = 1,
                             .outputs = out,
                             .device_type = "CPU",
                             .alloc = worker_alloc,
                             .alloc_uninit = worker_alloc_uninit,
                             .alloc_user = t->pool};
        double t0 = now_us(CLOCK_MONOTONIC);
        gboolean ok = t->def->run(&ctx, NULL);
        double t1 = now_us(CLOCK_MONOTONIC);
        g_assert_true(ok);
        psim_tensor_unref(out[0]);
        t->us[0] = t1 - t0;
    } else {
        double t0 = now_us(CLOCK_MONOTONIC);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)t->m, (blasint)t->n, (blasint)t->k,
                    1.0f, t->a->data, (blasint)t->k, t->b->data, (blasint)t->n, 0.0f, t->c->data,
                    (blasint)t->n);
        t->us[0] = now_us(CLOCK_MONOTONIC) - t0;
    }
}

static void *turn_thread(void *arg)
{
    Turn *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    psim_kernel_thread_init();
    double *all = t->us;
    for (int i = -3; i < t->reps; i++) {
        if (t->turn)
            while (g_atomic_int_get(t->turn) != t->me)
                ;
        double one;
        t->us = &one;
        turn_call(t);
        t->us = all;
        if (i >= 0)
            all[i] = one;
        if (t->turn)
            g_atomic_int_set(t->turn, !t->me);
    }
    return NULL;
}

static PsimTensor *random_matrix(int64_t r, int64_t c, GRand *g)
{
    int64_t d[2] = {r, c};
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    for (int64_t i = 0; i < r * c; i++)
        ((float *)t->data)[i] = (float)g_rand_double_range(g, -1, 1);
    return t;
}

static int bench_turns(int64_t m, int64_t k, int64_t n, int reps)
{
    if (m < 1 || k < 1 || n < 1 || reps < 1) {
        fprintf(stderr, "bench-kernels turns: M, K, N and REPS must be positive integers\n");
        return 2;
    }
    const PsimKernelDef *def = psim_kernel_lookup("MatMul", "CPU", PSIM_DTYPE_FLOAT32);
    g_assert_nonnull(def);
    g_autoptr(PsimGraph) mg = psim_graph_new("bench");
    PsimNode *node = psim_graph_node_add(mg, "mm", "MatMul", NULL);
    psim_graph_node_outputs_set(mg, node, 1);
    openblas_set_num_threads(1);
    /* OpenBLAS's pool thread polls (sched_yield) for a while after the library loads: let it go
     * to sleep before timing anything. */
    g_usleep(500000);
    GRand *g = g_rand_new_with_seed(1);
    Turn side[2];
    for (int s = 0; s < 2; s++)
        side[s] = (Turn){.core = s,
                         .me = s,
                         .m = m,
                         .k = k,
                         .n = n,
                         .reps = reps,
                         .a = random_matrix(m, k, g),
                         .b = random_matrix(k, n, g),
                         .c = random_matrix(m, n, g),
                         .pool = psim_worker_new(NULL, NULL),
                         .g = mg,
                         .node = node,
                         .def = def,
                         .us = g_new(double, reps)};
    g_rand_free(g);
    printf("{\"bench\": \"turns\", \"m\": %" G_GINT64_FORMAT ", \"k\": %" G_GINT64_FORMAT
           ", \"n\": %" G_GINT64_FORMAT ", \"reps\": %d", m, k, n, reps);
    for (int kernel = 1; kernel >= 0; kernel--) {
        const char *name = kernel ? "kernel" : "sgemm";
        /* Alone: side 0 on core 0. */
        side[0].kernel = kernel, side[0].turn = NULL;
        pthread_t th[2];
        pthread_create(&th[0], NULL, turn_thread, &side[0]);
        pthread_join(th[0], NULL);
        double alone = psim_stats_median(side[0].us, reps);
        gint turn = 0;
        for (int s = 0; s < 2; s++) {
            side[s].kernel = kernel, side[s].turn = &turn;
            pthread_create(&th[s], NULL, turn_thread, &side[s]);
        }
        for (int s = 0; s < 2; s++)
            pthread_join(th[s], NULL);
        double turns = (psim_stats_median(side[0].us, reps) + psim_stats_median(side[1].us, reps)) / 2;
        printf(", \"%s_alone_us\": %.2f, \"%s_turns_us\": %.2f, \"%s_turns_over_alone\": %.3f", name,
               alone, name, turns, name, turns / alone);
    }
    printf("}\n");
    for (int s = 0; s < 2; s++) {
        psim_tensor_unref(side[s].a);
        psim_tensor_unref(side[s].b);
        psim_tensor_unref(side[s].c);
        psim_worker_free(side[s].pool);
        g_free(side[s].us);
    }
    return 0;
}

typedef struct {
    PsimExecutor *e;
    PsimTensor **feeds, **outs;
    int32_t n_out;
    double cpu_us;
} StepArg;

static gboolean step_here(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    StepArg *s = arg;
    double c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
    gboolean ok = psim_executor_run_here(s->e, s->feeds, s->outs, error);
    s->cpu_us = now_us(CLOCK_THREAD_CPUTIME_ID) - c0;
    for (int32_t i = 0; i < s->n_out; i++)
        g_clear_pointer(&s->outs[i], psim_tensor_unref);
    return ok;
}

/* One step on worker w, its wall time in *wall_us (its CPU time in s->cpu_us); FALSE after the
 * error on stderr. */
static gboolean timed_step(PsimWorker *w, StepArg *s, double *wall_us)
{
    GError *err = NULL;
    double w0 = psim_exec_now_us();
    if (!psim_worker_call(w, step_here, s, &err)) {
        fprintf(stderr, "%s\n", err->message);
        g_error_free(err);
        return FALSE;
    }
    *wall_us = psim_exec_now_us() - w0;
    return TRUE;
}

/* Prints {"OP": ms, ...}: per op type, the sum over its nodes of their fastest step
 * (node_min[v] < 0: node v did not run). */
static void print_per_op_min(const PsimGraph *g, const double *node_min)
{
    g_autoptr(GHashTable) per_op = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        if (node_min[v] < 0)
            continue;
        const char *op = psim_graph_node(g, v)->op;
        double *acc = g_hash_table_lookup(per_op, op);
        if (!acc) {
            acc = g_new0(double, 1);
            g_hash_table_insert(per_op, (gpointer)op, acc);
        }
        *acc += node_min[v];
    }
    GHashTableIter it;
    gpointer key, val;
    g_hash_table_iter_init(&it, per_op);
    gboolean first = TRUE;
    printf("{");
    while (g_hash_table_iter_next(&it, &key, &val)) {
        printf("%s\"%s\": %.3f", first ? "" : ", ", (const char *)key, *(double *)val / 1e3);
        first = FALSE;
    }
    printf("}");
}

/* The graph's float inputs filled as `run --feed FILL` fills them (unknown dims as 1): tensors
 * appended, and their names when `names` is given. FALSE (reported) on an absurd shape. */
static gboolean model_feeds(const PsimGraph *g, PsimTensorFill fill, GPtrArray *names, GPtrArray *tensors)
{
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++) {
        const PsimNode *n = psim_graph_node(g, psim_graph_input(g, i));
        if (n->n_outputs < 1 || n->outputs[0].value || (n->flags & PSIM_NODE_PARAMETER) ||
            n->outputs[0].rank < 0 || n->outputs[0].rank > 16)
            continue;
        int64_t dims[16];
        for (int32_t k = 0; k < n->outputs[0].rank; k++)
            dims[k] = n->outputs[0].dims[k] >= 0 ? n->outputs[0].dims[k] : 1;
        GError *err = NULL;
        PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, n->outputs[0].rank, dims, &err);
        if (!t) {
            fprintf(stderr, "%s\n", err->message);
            g_error_free(err);
            return FALSE;
        }
        psim_tensor_fill(t, fill, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, n->name));
        g_ptr_array_add(tensors, t);
        if (names)
            g_ptr_array_add(names, g_strdup(n->name));
    }
    return TRUE;
}

static gboolean cpu_runs(const char *op, PsimDType dt, void *user)
{
    (void)user;
    return psim_kernel_lookup(op, "CPU", dt) != NULL;
}

/* The model at path and the fill FEED names (dflt when NULL); NULL after one line on stderr. */
static PsimGraph *load_with_feed(const char *path, const char *feed, PsimTensorFill dflt, PsimTensorFill *fill)
{
    *fill = dflt;
    if (feed && !psim_tensor_fill_from_name(feed, fill)) {
        fprintf(stderr, "bench-kernels: FEED must be random, zeros, ones or ramp, not '%s'\n", feed);
        return NULL;
    }
    GError *err = NULL;
    PsimGraph *g = psim_graph_load(path, NULL, &err), *f = NULL;
    /* Fused as `placesim run` fuses it on a CPU (graph/fuse.c). */
    if (g && !psim_graph_fuse(g, cpu_runs, NULL, &f, NULL, &err))
        g_clear_pointer(&g, psim_graph_free);
    if (f) {
        psim_graph_free(g);
        g = f;
    }
    if (!g) {
        fprintf(stderr, "%s\n", err->message);
        g_error_free(err);
    }
    return g;
}

static int bench_model(const char *path, int steps, const char *feed)
{
    PsimTensorFill fill;
    g_autoptr(PsimGraph) g = load_with_feed(path, feed, PSIM_TENSOR_FILL_RAMP, &fill);
    if (!g)
        return 2;
    GError *err = NULL;
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    if (!model_feeds(g, fill, names, feeds))
        return 2;
    int32_t n_out = psim_graph_n_outputs(g);
    GPtrArray *fetches = g_ptr_array_new_with_free_func(g_free);
    for (int32_t i = 0; i < n_out; i++)
        g_ptr_array_add(fetches, psim_port_to_string(g, psim_graph_output(g, i)));
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    PsimExecutor *e = w ? psim_executor_new(g, w, (const char *const *)names->pdata,
                                            (int32_t)names->len,
                                            (const char *const *)fetches->pdata, n_out, NULL,
                                            &err)
                        : NULL;
    if (!e) {
        fprintf(stderr, "%s\n", err->message);
        return 2;
    }
    StepArg s = {e, (PsimTensor **)feeds->pdata, g_new0(PsimTensor *, n_out + 1), n_out, 0};
    double *wall = g_new(double, steps), *cpu = g_new(double, steps);
    GHashTable *per_op = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
    /* Each node's fastest step: on a loaded machine the minimum is what the kernel costs, the
     * mean also what the other processes took from it. */
    double *node_min = g_new(double, psim_graph_n_nodes(g) + 1);
    for (int32_t v = 0; v <= psim_graph_n_nodes(g); v++)
        node_min[v] = -1;
    for (int i = -1; i < steps; i++) {
        double wall_us;
        if (!timed_step(w, &s, &wall_us))
            return 1;
        if (i < 0)
            continue;
        wall[i] = wall_us;
        cpu[i] = s.cpu_us;
        PsimExecStats st;
        psim_executor_stats(e, &st);
        for (int32_t k = 0; k < st.n_run; k++) {
            const PsimNode *nd = psim_graph_node(g, st.nodes[k]);
            const char *op = nd->op;
            if (i == steps - 1 && g_getenv("PSIM_BENCH_NODES")) {
                /* Per node: op, FLOPs, wall time and GFLOP/s (to find slow shapes). */
                PsimOpCount c;
                psim_graph_node_count(g, nd, &c);
                double us = st.end[k] - st.start[k];
                fprintf(stderr, "%-12s %-24s %10.1f MFLOP %9.1f us %7.1f GFLOP/s\n", op, nd->name,
                        c.flops / 1e6, us, us > 0 ? c.flops / us / 1e3 : 0);
            }
            double *acc = g_hash_table_lookup(per_op, op);
            if (!acc) {
                acc = g_new0(double, 1);
                g_hash_table_insert(per_op, (gpointer)op, acc);
            }
            *acc += (st.end[k] - st.start[k]) / steps;
            double us = st.end[k] - st.start[k];
            if (node_min[st.nodes[k]] < 0 || us < node_min[st.nodes[k]])
                node_min[st.nodes[k]] = us;
        }
    }
    printf("{\"bench\": \"model\", \"graph\": \"%s\", \"feed\": \"%s\", \"steps\": %d, "
           "\"wall_ms\": %.2f, \"cpu_ms\": %.2f, \"per_op_wall_ms\": {",
           psim_graph_name(g), psim_tensor_fill_name(fill), steps, psim_stats_median(wall, steps) / 1e3,
           psim_stats_median(cpu, steps) / 1e3);
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, per_op);
    gboolean first = TRUE;
    while (g_hash_table_iter_next(&it, &k, &v)) {
        printf("%s\"%s\": %.2f", first ? "" : ", ", (const char *)k, *(double *)v / 1e3);
        first = FALSE;
    }
    /* The sum over each op type's nodes of their fastest step. */
    printf("}, \"per_op_min_ms\": ");
    print_per_op_min(g, node_min);
    printf("}\n");
    g_free(node_min);
    psim_executor_free(e);
    g_free(s.outs);
    g_ptr_array_free(names, TRUE);
    g_ptr_array_free(feeds, TRUE);
    g_ptr_array_free(fetches, TRUE);
    g_hash_table_destroy(per_op);
    return 0;
}

/* Per feed of bench_feeds: its inputs, and per step and per node what it cost. */
typedef struct {
    PsimTensorFill fill;
    GPtrArray *tensors;
    double *wall, *cpu, *node_min;
} FeedRun;

/* Two feeds of one graph on one executor, step by step in turn (A, B, A, B, ...): a slow spell
 * of a shared machine falls on both. Per feed: median wall and worker CPU per step, and per op
 * type the sum of each node's fastest step. */
static int bench_feeds(const char *path, int steps, const char *fa, const char *fb)
{
    FeedRun f[2] = {{0}, {0}};
    if (!psim_tensor_fill_from_name(fa, &f[0].fill) || !psim_tensor_fill_from_name(fb, &f[1].fill)) {
        fprintf(stderr, "bench-kernels: FEED must be random, zeros, ones or ramp\n");
        return 2;
    }
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
    if (!g) {
        fprintf(stderr, "%s\n", err->message);
        return 2;
    }
    int32_t nn = psim_graph_n_nodes(g);
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    for (int k = 0; k < 2; k++) {
        f[k].tensors = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
        f[k].wall = g_new(double, steps);
        f[k].cpu = g_new(double, steps);
        f[k].node_min = g_new(double, nn + 1);
        for (int32_t v = 0; v <= nn; v++)
            f[k].node_min[v] = -1;
    }
    for (int k = 0; k < 2; k++)
        if (!model_feeds(g, f[k].fill, k ? NULL : names, f[k].tensors))
            return 2;
    int32_t n_out = psim_graph_n_outputs(g);
    g_autoptr(GPtrArray) fetches = g_ptr_array_new_with_free_func(g_free);
    for (int32_t i = 0; i < n_out; i++)
        g_ptr_array_add(fetches, psim_port_to_string(g, psim_graph_output(g, i)));
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    PsimExecutor *e = w ? psim_executor_new(g, w, (const char *const *)names->pdata, (int32_t)names->len,
                                            (const char *const *)fetches->pdata, n_out, NULL, &err)
                        : NULL;
    if (!e) {
        fprintf(stderr, "%s\n", err->message);
        return 2;
    }
    g_autofree PsimTensor **outs = g_new0(PsimTensor *, n_out + 1);
    for (int i = -1; i < steps; i++)
        for (int k = 0; k < 2; k++) {
            StepArg s = {e, (PsimTensor **)f[k].tensors->pdata, outs, n_out, 0};
            double wall_us;
            if (!timed_step(w, &s, &wall_us))
                return 1;
            if (i < 0)
                continue; /* a warm-up step of each */
            f[k].wall[i] = wall_us;
            f[k].cpu[i] = s.cpu_us;
            PsimExecStats st;
            psim_executor_stats(e, &st);
            for (int32_t j = 0; j < st.n_run; j++) {
                double us = st.end[j] - st.start[j], *m = &f[k].node_min[st.nodes[j]];
                if (*m < 0 || us < *m)
                    *m = us;
            }
        }
    printf("{\"bench\": \"feeds\", \"graph\": \"%s\", \"steps\": %d, \"feeds\": {", psim_graph_name(g), steps);
    for (int k = 0; k < 2; k++) {
        printf("%s\"%s\": {\"wall_ms\": %.3f, \"cpu_ms\": %.3f, \"per_op_min_ms\": ", k ? ", " : "",
               psim_tensor_fill_name(f[k].fill), psim_stats_median(f[k].wall, steps) / 1e3,
               psim_stats_median(f[k].cpu, steps) / 1e3);
        print_per_op_min(g, f[k].node_min);
        printf("}");
    }
    printf("}}\n");
    psim_executor_free(e);
    for (int k = 0; k < 2; k++) {
        g_ptr_array_free(f[k].tensors, TRUE);
        g_free(f[k].wall);
        g_free(f[k].cpu);
        g_free(f[k].node_min);
    }
    return 0;
}

/* Each node of op `op` whose input shapes are known, run alone on random inputs: the minimum
 * thread CPU time of REPS runs and the GFLOP/s it means (to find slow shapes). */
static int bench_nodes(const char *path, const char *op, int reps, const char *feed)
{
    PsimTensorFill fill;
    g_autoptr(PsimGraph) g = load_with_feed(path, feed, PSIM_TENSOR_FILL_RANDOM, &fill);
    if (!g)
        return 2;
    GError *err = NULL;
    double total = 0;
    for (int32_t id = 0; id < psim_graph_n_nodes(g); id++) {
        const PsimNode *n = psim_graph_node(g, id);
        if (strcmp(n->op, op))
            continue;
        PsimTensor *in[8] = {NULL};
        gboolean ok = n->n_inputs <= 8;
        for (int32_t k = 0; k < n->n_inputs && ok; k++) {
            const PsimNode *src = psim_graph_node(g, n->inputs[k].node);
            const PsimOutput *o = &src->outputs[n->inputs[k].index];
            in[k] = psim_tensor_new(o->dtype, o->rank, o->dims, NULL);
            ok = in[k] != NULL;
            if (ok && feed)
                psim_tensor_fill(in[k], fill, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, src->name));
            for (int64_t i = 0; ok && !feed && o->dtype == PSIM_DTYPE_FLOAT32 && i < in[k]->n_elems; i++)
                ((float *)in[k]->data)[i] = (float)((i * 7919) % 1000) / 1000.0f;
        }
        const PsimKernelDef *def = ok ? psim_kernel_for_node(g, n, "CPU") : NULL;
        double best = 1e300;
        for (int r = 0; def && r < reps; r++) {
            PsimTensor *out[8] = {NULL};
            PsimKernelCtx ctx = {.graph = g, .node = n, .n_inputs = n->n_inputs, .inputs = in,
                                 .n_outputs = n->n_outputs, .outputs = out,
                                 .device_type = "CPU", .alloc = host_alloc};
            double c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
            if (!def->run(&ctx, &err)) {
                fprintf(stderr, "%s\n", err->message);
                return 1;
            }
            best = MIN(best, now_us(CLOCK_THREAD_CPUTIME_ID) - c0);
            for (int32_t k = 0; k < n->n_outputs; k++)
                psim_tensor_unref(out[k]);
        }
        PsimOpCount c;
        psim_graph_node_count(g, n, &c);
        if (def) {
            /* Input 0 without its batch dim, input 1 whole (as many dims as each has). */
            g_autoptr(GString) shapes = g_string_new("");
            for (int32_t k = 0; k < MIN(n->n_inputs, 2); k++) {
                const PsimTensor *t = in[k];
                g_string_append(shapes, k ? " w[" : "x[");
                for (int32_t d = k ? 0 : 1; t && d < t->rank; d++)
                    g_string_append_printf(shapes, "%s%" G_GINT64_FORMAT, d > (k ? 0 : 1) ? "," : "", t->dims[d]);
                g_string_append_c(shapes, ']');
            }
            printf("%-20s %s %8.1f MFLOP %8.0f us %6.1f GFLOP/s\n", n->name, shapes->str, c.flops / 1e6, best,
                   c.flops / best / 1e3);
            total += best;
        }
        for (int32_t k = 0; k < 8; k++)
            if (in[k])
                psim_tensor_unref(in[k]);
    }
    printf("total %.1f ms\n", total / 1e3);
    return 0;
}

int main(int argc, char **argv)
{
    /* The nodes and matmul modes run kernels on this thread: in the executor's float mode. */
    psim_kernel_thread_init();
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "nodes"))
        return bench_nodes(argv[2], argv[3], atoi(argv[4]), argc == 6 ? argv[5] : NULL);
    if (argc == 4 && !strcmp(argv[1], "matmul"))
        return bench_matmul(g_ascii_strtoll(argv[2], NULL, 10), atoi(argv[3]));
    if (argc == 6 && !strcmp(argv[1], "turns"))
        return bench_turns(g_ascii_strtoll(argv[2], NULL, 10), g_ascii_strtoll(argv[3], NULL, 10),
                           g_ascii_strtoll(argv[4], NULL, 10), atoi(argv[5]));
    if (argc == 6 && !strcmp(argv[1], "feeds"))
        return bench_feeds(argv[2], atoi(argv[3]), argv[4], argv[5]);
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "model"))
        return bench_model(argv[2], atoi(argv[3]), argc == 5 ? argv[4] : NULL);
    fprintf(stderr, "usage: bench-kernels matmul N REPS | turns M K N REPS | model FILE.onnx STEPS [FEED] | feeds FILE.onnx "
                    "STEPS FEED_A FEED_B | nodes FILE.onnx OP REPS [FEED]\n");
    return 2;
}
