/* The single-device executor: pending-count order, tensors released after their last consumer,
 * partial execution, constant subgraphs evaluated once, and clear errors. The ops and kernels
 * here are tiny test ones registered by this file (X* ops), so that these tests do not depend on
 * the real kernels. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "placesim/exec.h"
#include "placesim/placer.h"
#include "test-util.h"

#define N_ELEM 10000 /* 40 KB tensors: large enough for the worker's block pool */

static int count_runs;   /* XCount kernel invocations */
static uint64_t live_seen_max; /* most live bytes any XScale saw while running */

static gboolean scale_run(PsimKernelCtx *ctx, GError **error)
{
    const PsimTensor *a = ctx->inputs[0];
    PsimTensor *o = ctx->alloc(ctx, a->dtype, a->rank, a->dims, error);
    if (!o)
        return FALSE;
    const float *x = a->data;
    float *y = o->data;
    for (int64_t i = 0; i < a->n_elems; i++)
        y[i] = 2 * x[i];
    ctx->outputs[0] = o;
    uint64_t live = psim_worker_memory(ctx->device, NULL);
    if (live > live_seen_max)
        live_seen_max = live;
    return TRUE;
}

static gboolean add_run(PsimKernelCtx *ctx, GError **error)
{
    const PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1];
    if (a->n_elems != b->n_elems) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "XAdd: sizes differ");
        return FALSE;
    }
    PsimTensor *o = ctx->alloc(ctx, a->dtype, a->rank, a->dims, error);
    if (!o)
        return FALSE;
    const float *x = a->data, *z = b->data;
    float *y = o->data;
    for (int64_t i = 0; i < a->n_elems; i++)
        y[i] = x[i] + z[i];
    ctx->outputs[0] = o;
    return TRUE;
}

static gboolean count_run(PsimKernelCtx *ctx, GError **error)
{
    (void)error;
    g_atomic_int_inc(&count_runs);
    ctx->outputs[0] = psim_tensor_ref(ctx->inputs[0]);
    return TRUE;
}

static gboolean fail_run(PsimKernelCtx *ctx, GError **error)
{
    (void)ctx;
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "simulated device failure");
    return FALSE;
}

static const PsimKernelDef test_kernels[] = {
    {.op = "XScale", .device_type = "CPU", .name = "test-scale", .run = scale_run},
    {.op = "XAdd", .device_type = "CPU", .name = "test-add", .run = add_run},
    {.op = "XCount", .device_type = "CPU", .name = "test-count", .run = count_run},
    {.op = "XFail", .device_type = "CPU", .name = "test-fail", .run = fail_run},
};

/* Builds a graph from "name=op(in1,in2)" lines; every node outputs float32 [N_ELEM] and a node
 * of op Placeholder is a graph input. */
static PsimGraph *build(const char *const *lines)
{
    PsimGraph *g = psim_graph_new("test");
    int64_t dims[1] = {N_ELEM};
    for (int i = 0; lines[i]; i++) {
        g_auto(GStrv) parts = g_strsplit_set(lines[i], "=(),", -1);
        PsimNode *n = psim_graph_node_add(g, parts[0], parts[1], NULL);
        g_assert_nonnull(n);
        for (int k = 2; parts[k]; k++)
            if (*parts[k])
                psim_graph_node_input_add_ref(g, n, parts[k]);
        psim_graph_node_outputs_set(g, n, 1);
        psim_graph_output_set(g, n, 0, PSIM_DTYPE_FLOAT32, 1, dims);
        if (!strcmp(parts[1], "Placeholder"))
            psim_graph_input_add(g, n->id);
    }
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    return g;
}

static PsimTensor *vec(float v)
{
    int64_t dims[1] = {N_ELEM};
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, dims, NULL);
    for (int i = 0; i < N_ELEM; i++)
        ((float *)t->data)[i] = v + (float)i;
    return t;
}

static int position(const PsimExecStats *st, const PsimGraph *g, const char *name)
{
    int32_t id = psim_graph_node_find(g, name)->id;
    for (int32_t k = 0; k < st->n_run; k++)
        if (st->nodes[k] == id)
            return k;
    return -1;
}

/* A diamond with a long branch: every node must run after all its inputs, whatever the order. */
static void test_order(void)
{
    const char *lines[] = {"x=Placeholder()", "a=XScale(x)", "b=XScale(a)", "c=XScale(b)",
                           "d=XScale(x)",     "e=XAdd(c,d)", "f=XAdd(e,a)", NULL};
    g_autoptr(PsimGraph) g = build(lines);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x"}, *fetches[] = {"f"};
    PsimExecOrder orders[] = {PSIM_EXEC_ORDER_FIFO, PSIM_EXEC_ORDER_PRIORITY};
    for (int o = 0; o < 2; o++) {
        /* Priorities that favour the short branch (d) first. */
        double prio[7] = {0, 5, 5, 5, 1, 0, 0};
        PsimExecOptions opts = {.order = orders[o], .priority = prio};
        g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, &opts, &err);
        g_assert_no_error(err);
        g_autoptr(PsimTensor) x = vec(1);
        PsimTensor *out = NULL;
        g_assert_true(psim_executor_run(e, &x, &out, &err));
        g_assert_no_error(err);
        /* f = 8x + 2x + 2x = 12x */
        for (int i = 0; i < N_ELEM; i++)
            g_assert_cmpfloat(((float *)out->data)[i], ==, 12 * (1 + (float)i));
        psim_tensor_unref(out);
        PsimExecStats st;
        psim_executor_stats(e, &st);
        g_assert_cmpint(st.n_run, ==, 6);
        const char *edges[][2] = {{"a", "b"}, {"b", "c"}, {"c", "e"}, {"d", "e"},
                                  {"e", "f"}, {"a", "f"}};
        for (size_t k = 0; k < G_N_ELEMENTS(edges); k++)
            g_assert_cmpint(position(&st, g, edges[k][0]), <, position(&st, g, edges[k][1]));
        for (int32_t k = 0; k < st.n_run; k++)
            g_assert_cmpfloat(st.start[k], <=, st.end[k]);
        for (int32_t k = 1; k < st.n_run; k++)
            g_assert_cmpfloat(st.end[k - 1], <=, st.start[k]);
        if (orders[o] == PSIM_EXEC_ORDER_PRIORITY)
            g_assert_cmpint(position(&st, g, "d"), ==, 0);
        else /* FIFO: a and d both ready at the start; a is first by id */
            g_assert_cmpint(position(&st, g, "a"), ==, 0);
    }
    /* A static order that is not topological is an error naming the node. */
    int32_t bad[] = {1, 3, 2, 4, 5, 6}; /* c before b */
    PsimExecOptions opts = {.order = PSIM_EXEC_ORDER_STATIC, .static_order = bad,
                            .n_static_order = 6};
    g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, &opts, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = vec(1);
    PsimTensor *out = NULL;
    g_assert_false(psim_executor_run(e, &x, &out, &err));
    g_assert_null(out);
    g_assert_nonnull(strstr(err->message, "node 'c'"));
    g_assert_cmpuint(psim_worker_memory(w, NULL), ==, 0); /* the failed step released all */
}

/* A chain of 12 scalings: with release after the last consumer, at most an input and an output
 * are alive at any time; keeping them all would need 12. */
static void test_release(void)
{
    GPtrArray *lines = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(lines, g_strdup("x=Placeholder()"));
    g_ptr_array_add(lines, g_strdup("s0=XScale(x)"));
    for (int i = 1; i < 12; i++)
        g_ptr_array_add(lines, g_strdup_printf("s%d=XScale(s%d)", i, i - 1));
    g_ptr_array_add(lines, NULL);
    g_autoptr(PsimGraph) g = build((const char *const *)lines->pdata);
    g_ptr_array_free(lines, TRUE);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x"}, *fetches[] = {"s11:0"};
    g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, NULL, &err);
    g_assert_no_error(err);
    const uint64_t one = N_ELEM * sizeof(float);
    for (int step = 0; step < 3; step++) {
        live_seen_max = 0;
        g_autoptr(PsimTensor) x = vec(0);
        PsimTensor *out = NULL;
        g_assert_true(psim_executor_run(e, &x, &out, &err));
        g_assert_cmpfloat(((float *)out->data)[3], ==, 3.0f * 4096);
        PsimExecStats st;
        psim_executor_stats(e, &st);
        g_assert_cmpuint(st.peak_bytes, ==, 2 * one);
        g_assert_cmpuint(live_seen_max, ==, 2 * one);
        /* After the step only the fetched tensor is alive, until the caller drops it. */
        g_assert_cmpuint(psim_worker_memory(w, NULL), ==, one);
        psim_tensor_unref(out);
        g_assert_cmpuint(psim_worker_memory(w, NULL), ==, 0);
    }
}

/* Feeding an intermediate tensor cuts its producers: they do not run and their inputs need no
 * feed. */
static void test_partial(void)
{
    const char *lines[] = {"x=Placeholder()", "a=XCount(x)", "b=XScale(a)", "c=XAdd(b,b)",
                           "d=XScale(x)", NULL};
    g_autoptr(PsimGraph) g = build(lines);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"b:0"}, *fetches[] = {"c"};
    g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, NULL, &err);
    g_assert_no_error(err);
    count_runs = 0;
    g_autoptr(PsimTensor) b = vec(3);
    PsimTensor *out = NULL;
    g_assert_true(psim_executor_run(e, &b, &out, &err));
    g_assert_no_error(err);
    g_assert_cmpfloat(((float *)out->data)[10], ==, 2 * 13.0f);
    psim_tensor_unref(out);
    PsimExecStats st;
    psim_executor_stats(e, &st);
    g_assert_cmpint(st.n_run, ==, 1); /* only c */
    g_assert_cmpint(st.n_fed, ==, 1);
    g_assert_cmpint(count_runs, ==, 0);

    /* Without the feed, x is needed and not fed. */
    const char *none[] = {NULL};
    g_autoptr(PsimExecutor) e2 = psim_executor_new(g, w, none, 0, fetches, 1, NULL, &err);
    g_assert_null(e2);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "node 'x'"));
    g_assert_nonnull(strstr(err->message, "not fed"));
    g_clear_error(&err);

    /* Targets run and return nothing; fetching a fed tensor returns the feed. */
    const char *fetches3[] = {"^d", "b:0"}, *feeds3[] = {"x", "b"};
    g_autoptr(PsimExecutor) e3 = psim_executor_new(g, w, feeds3, 2, fetches3, 2, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = vec(0);
    PsimTensor *in3[2] = {x, b}, *out3[2] = {NULL, NULL};
    g_assert_true(psim_executor_run(e3, in3, out3, &err));
    g_assert_null(out3[0]);
    g_assert_true(out3[1] == b);
    psim_tensor_unref(out3[1]);
    psim_executor_stats(e3, &st);
    g_assert_cmpint(st.n_run, ==, 1); /* d */
}

/* Weights made from constants (XCount over a known Const) are computed once when prepared. */
static void test_constant_once(void)
{
    const char *lines[] = {"x=Placeholder()", "w=Const()", "k=XCount(w)", "k2=XScale(k)",
                           "y=XAdd(x,k2)", NULL};
    g_autoptr(PsimGraph) g = build(lines);
    PsimNode *wn = psim_graph_node_find(g, "w");
    g_autoptr(PsimTensor) wv = vec(100);
    psim_graph_output_value_set(g, wn, 0, wv);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x"}, *fetches[] = {"y"};
    for (int fold = 0; fold < 2; fold++) {
        PsimExecOptions opts = {.no_constant_folding = fold == 1};
        count_runs = 0;
        g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, fetches, 1, &opts, &err);
        g_assert_no_error(err);
        for (int step = 0; step < 3; step++) {
            g_autoptr(PsimTensor) x = vec((float)step);
            PsimTensor *out = NULL;
            g_assert_true(psim_executor_run(e, &x, &out, &err));
            g_assert_cmpfloat(((float *)out->data)[5], ==, step + 5 + 2 * 105.0f);
            psim_tensor_unref(out);
        }
        PsimExecStats st;
        psim_executor_stats(e, &st);
        g_assert_cmpint(count_runs, ==, fold ? 3 : 1);
        g_assert_cmpint(st.n_const, ==, fold ? 0 : 2);
        g_assert_cmpint(st.n_run, ==, fold ? 3 : 1);
    }
    g_assert_cmpuint(psim_worker_memory(w, NULL), ==, 0);
}

static void test_errors(void)
{
    const char *lines[] = {"x=Placeholder()", "a=XScale(x)", "m=XMissing(a)", "f=XFail(a)",
                           NULL};
    g_autoptr(PsimGraph) g = build(lines);
    psim_graph_set_source(g, "t.json");
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x"};

    /* No kernel for an op: an input error naming file, node, op and device type, and the way
     * out (a plug-in). */
    const char *f1[] = {"m"};
    g_assert_null(psim_executor_new(g, w, feeds, 1, f1, 1, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_cmpstr(err->message, ==, "t.json: node 'm': no CPU kernel for op 'XMissing' (float32); load a "
                                      "plug-in with one with --plugin PATH.so, see docs/ops.md");
    g_clear_error(&err);

    /* A ref naming nothing. */
    const char *f2[] = {"nope:0"};
    g_assert_null(psim_executor_new(g, w, feeds, 1, f2, 1, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);

    const char *f3[] = {"a"};
    g_autoptr(PsimExecutor) e = psim_executor_new(g, w, feeds, 1, f3, 1, NULL, &err);
    g_assert_no_error(err);
    PsimTensor *out = NULL;
    /* Missing feed. */
    PsimTensor *nofeed[1] = {NULL};
    g_assert_false(psim_executor_run(e, nofeed, &out, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "node 'x'"));
    g_clear_error(&err);
    /* Wrong shape. */
    int64_t d2[2] = {10, 100};
    g_autoptr(PsimTensor) wrong = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d2, NULL);
    g_assert_false(psim_executor_run(e, &wrong, &out, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_cmpstr(err->message, ==,
                    "t.json: node 'x': feed has shape [10,100] but the graph expects [10000] "
                    "(-1: any)");
    g_clear_error(&err);
    /* Wrong dtype. */
    int64_t d1[1] = {N_ELEM};
    g_autoptr(PsimTensor) wrongt = psim_tensor_new(PSIM_DTYPE_INT64, 1, d1, NULL);
    g_assert_false(psim_executor_run(e, &wrongt, &out, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "int64"));
    g_clear_error(&err);
    g_assert_null(out);

    /* A kernel failure is a runtime error naming the node; nothing leaks. */
    const char *f4[] = {"f"};
    g_autoptr(PsimExecutor) e4 = psim_executor_new(g, w, feeds, 1, f4, 1, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = vec(0);
    g_assert_false(psim_executor_run(e4, &x, &out, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_RUNTIME);
    g_assert_cmpstr(err->message, ==, "t.json: node 'f': simulated device failure");
    g_clear_error(&err);
    g_assert_cmpuint(psim_worker_memory(w, NULL), ==, 0);
}

/* A worker pinned to a core runs there; a core that does not exist is a clear error. */
static void test_worker(void)
{
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    g_assert_nonnull(c);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(psim_cluster_device(c, 0), &err);
    g_assert_no_error(err);
    g_assert_cmpstr(psim_worker_device_type(w), ==, "CPU");
    g_assert_cmpstr(psim_worker_name(w), ==, "CPU:0");
    PsimCluster *bad = psim_cluster_new();
    int32_t id = psim_cluster_device_add(bad, "CPU:0", "CPU", NULL);
    PsimDevice *d = psim_cluster_device(bad, id);
    d->n_cores = 1;
    d->cores = g_new(int32_t, 1);
    d->cores[0] = 100000;
    g_assert_null(psim_worker_new(d, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "CPU:0"));
    g_clear_error(&err);
    psim_cluster_free(bad);
}

static gboolean flushes_job(PsimWorker *w, void *arg, GError **error)
{
    (void)w, (void)error;
    *(gboolean *)arg = psim_kernel_thread_flushes();
    return TRUE;
}

/* Kernels run with flush-to-zero and denormals-are-zero on every worker (exec/worker.c), so a
 * denormal costs no microcode assist and a kernel's time does not depend on its data: the
 * worker's mode is set, a denormal input reads as zero and a denormal result is written as zero. */
static void test_denormals(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    gboolean flushes = FALSE;
    g_assert_true(psim_worker_call(w, flushes_job, &flushes, &err));
#if defined(__x86_64__) || defined(__aarch64__)
    g_assert_true(flushes);
#endif
    /* x = [1e-39 (denormal), 1e-20, 2, ...]: x + x is 2e-39 and x * x 1e-40 without the mode. */
    const char *lines[] = {"x=Placeholder()", "a=Add(x,x)", "m=Mul(x,x)", NULL};
    g_autoptr(PsimGraph) g = build(lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = vec(0);
    float *xv = x->data;
    xv[0] = 1e-39f;
    xv[1] = 1e-20f;
    g_assert_cmpint(fpclassify(xv[0]), ==, FP_SUBNORMAL);
    const char *feeds[] = {"x"}, *fetch[] = {"a", "m"};
    PsimTensor *out[2] = {NULL, NULL};
    g_assert_true(psim_session_run(s, 1, feeds, &x, 2, fetch, out, &err));
    g_assert_no_error(err);
#if defined(__x86_64__) || defined(__aarch64__)
    g_assert_cmpfloat(((float *)out[0]->data)[0], ==, 0.0f); /* denormal in: read as zero */
    g_assert_cmpfloat(((float *)out[1]->data)[1], ==, 0.0f); /* denormal out: written as zero */
#endif
    g_assert_cmpfloat(((float *)out[0]->data)[2], ==, 4.0f);
    g_assert_cmpfloat(((float *)out[1]->data)[2], ==, 4.0f);
    psim_tensor_unref(out[0]);
    psim_tensor_unref(out[1]);
}

/* A convolution whose weights are an initializer fed at run time: the kernel keeps weights in its
 * own layout only while the executor holds them constant (PsimKernelCtx.constant_inputs), so a
 * second run with other values in the same fed tensor, at the same address, gives the
 * convolution of the new values (a kernel keyed by the address alone would reuse the first). */
static PsimGraph *conv_graph(PsimTensor *w)
{
    g_autoptr(GError) err = NULL;
    PsimGraph *g = psim_graph_new("conv");
    int64_t xd[4] = {1, 4, 6, 6}, yd[4] = {1, 8, 6, 6};
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", &err);
    psim_graph_node_outputs_set(g, x, 1);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 4, xd);
    PsimNode *c = psim_graph_node_add(g, "w", "Const", &err);
    psim_graph_node_attr_set_tensor(g, c, "value", w);
    psim_graph_node_outputs_set(g, c, 1);
    psim_graph_output_value_set(g, c, 0, w);
    PsimNode *y = psim_graph_node_add(g, "y", "Conv", &err);
    psim_graph_node_input_add(g, y, (PsimPort){x->id, 0});
    psim_graph_node_input_add(g, y, (PsimPort){c->id, 0});
    psim_graph_node_attr_set_ints(g, y, "pads", 4, (int64_t[]){1, 1, 1, 1});
    psim_graph_node_outputs_set(g, y, 1);
    psim_graph_output_set(g, y, 0, PSIM_DTYPE_FLOAT32, 4, yd);
    psim_graph_input_add(g, x->id);
    psim_graph_output_add(g, (PsimPort){y->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_cmpint(psim_graph_fold_constants(g, &err), >=, 0); /* as a loaded model */
    g_assert_no_error(err);
    return g;
}

static PsimTensor *fill_seq(int32_t rank, const int64_t *dims, float scale)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, rank, dims, NULL);
    for (int64_t i = 0; i < t->n_elems; i++)
        ((float *)t->data)[i] = scale * (float)((i * 37) % 11 - 5);
    return t;
}

static void test_conv_fed_weights(void)
{
    int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {8, 4, 3, 3};
    g_autoptr(PsimTensor) x = fill_seq(4, xd, 0.1f);
    g_autoptr(PsimTensor) w0 = fill_seq(4, wd, 1.0f), w1 = fill_seq(4, wd, 1.0f);
    g_autoptr(PsimGraph) g = conv_graph(w0);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x", "w"}, *fetch[] = {"y"};
    PsimTensor *in[2] = {x, w1}, *out = NULL;
    g_assert_true(psim_session_run(s, 2, feeds, in, 1, fetch, &out, &err));
    g_assert_no_error(err);
    g_clear_pointer(&out, psim_tensor_unref);
    /* New values in the same fed tensor (the same address). */
    for (int64_t i = 0; i < w1->n_elems; i++)
        ((float *)w1->data)[i] = -0.5f * ((float *)w1->data)[i] + 0.25f;
    g_assert_true(psim_session_run(s, 2, feeds, in, 1, fetch, &out, &err));
    g_assert_no_error(err);
    /* The same convolution with those values as the graph's own constant. */
    g_autoptr(PsimGraph) g2 = conv_graph(w1);
    g_autoptr(PsimSession) s2 = psim_session_new(g2, c, NULL, NULL, &err);
    PsimTensor *want = NULL;
    g_assert_true(psim_session_run(s2, 1, feeds, &x, 1, fetch, &want, &err));
    g_assert_no_error(err);
    for (int64_t i = 0; i < want->n_elems; i++)
        g_assert_cmpfloat_with_epsilon(((float *)out->data)[i], ((float *)want->data)[i], 1e-4);
    psim_tensor_unref(out);
    psim_tensor_unref(want);
}

/* Operator fusion (graph/fuse.c): Conv + Relu and Conv + Clip become FusedConv, Sigmoid and Mul
 * QuickGelu, the five nodes of an exported GELU Gelu, and each fused graph computes bit for bit
 * what the unfused one does; a Conv whose output is also read elsewhere (here: a graph output)
 * stays, and nothing fuses where a device lacks the fused kernel. */
static PsimNode *fuse_node(PsimGraph *g, const char *name, const char *op, int n_in, const PsimNode *const *in)
{
    g_autoptr(GError) err = NULL;
    PsimNode *n = psim_graph_node_add(g, name, op, &err);
    g_assert_no_error(err);
    for (int k = 0; k < n_in; k++)
        psim_graph_node_input_add(g, n, (PsimPort){in[k]->id, 0});
    psim_graph_node_outputs_set(g, n, 1);
    return n;
}

static PsimNode *fuse_const(PsimGraph *g, const char *name, PsimTensor *t)
{
    PsimNode *c = fuse_node(g, name, "Const", 0, NULL);
    psim_graph_node_attr_set_tensor(g, c, "value", t);
    psim_graph_output_value_set(g, c, 0, t);
    return c;
}

static PsimNode *fuse_scalar(PsimGraph *g, const char *name, float v)
{
    g_autoptr(PsimTensor) t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL);
    *(float *)t->data = v;
    return fuse_const(g, name, t);
}

static PsimGraph *fuse_graph(void)
{
    g_autoptr(GError) err = NULL;
    PsimGraph *g = psim_graph_new("fuse");
    int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {8, 4, 3, 3}, w2d[4] = {8, 8, 1, 1};
    PsimNode *x = fuse_node(g, "x", "Placeholder", 0, NULL);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 4, xd);
    g_autoptr(PsimTensor) wt = fill_seq(4, wd, 0.1f), w2t = fill_seq(4, w2d, 0.3f);
    PsimNode *w = fuse_const(g, "w", wt), *w2 = fuse_const(g, "w2", w2t);
    PsimNode *c1 = fuse_node(g, "c1", "Conv", 2, (const PsimNode *[]){x, w});
    psim_graph_node_attr_set_ints(g, c1, "pads", 4, (int64_t[]){1, 1, 1, 1});
    PsimNode *r = fuse_node(g, "r", "Relu", 1, (const PsimNode *[]){c1});
    PsimNode *c2 = fuse_node(g, "c2", "Conv", 2, (const PsimNode *[]){r, w2});
    PsimNode *lo = fuse_scalar(g, "lo", -0.5f), *hi = fuse_scalar(g, "hi", 2.0f);
    PsimNode *clip = fuse_node(g, "clip", "Clip", 3, (const PsimNode *[]){c2, lo, hi});
    PsimNode *sg = fuse_node(g, "sg", "Sigmoid", 1, (const PsimNode *[]){clip});
    PsimNode *m = fuse_node(g, "m", "Mul", 2, (const PsimNode *[]){clip, sg});
    PsimNode *r2 = fuse_scalar(g, "r2", 1.41421353816986083984375f), *one = fuse_scalar(g, "one", 1.0f);
    PsimNode *half = fuse_scalar(g, "half", 0.5f);
    PsimNode *d = fuse_node(g, "d", "Div", 2, (const PsimNode *[]){m, r2});
    PsimNode *e = fuse_node(g, "e", "Erf", 1, (const PsimNode *[]){d});
    PsimNode *a = fuse_node(g, "a", "Add", 2, (const PsimNode *[]){e, one});
    PsimNode *mm = fuse_node(g, "mm", "Mul", 2, (const PsimNode *[]){m, a});
    PsimNode *out = fuse_node(g, "out", "Mul", 2, (const PsimNode *[]){mm, half});
    /* A Conv read twice (by its Relu and as a graph output): not fused. */
    PsimNode *c3 = fuse_node(g, "c3", "Conv", 2, (const PsimNode *[]){x, w});
    PsimNode *r3 = fuse_node(g, "r3", "Relu", 1, (const PsimNode *[]){c3});
    psim_graph_input_add(g, x->id);
    psim_graph_output_add(g, (PsimPort){out->id, 0});
    psim_graph_output_add(g, (PsimPort){r3->id, 0});
    psim_graph_output_add(g, (PsimPort){c3->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_cmpint(psim_graph_fold_constants(g, &err), >=, 0);
    g_assert_no_error(err);
    return g;
}

static gboolean runs_all(const char *op, PsimDType dt, void *user)
{
    (void)user;
    return psim_kernel_lookup(op, "CPU", dt) != NULL;
}

static gboolean runs_none(const char *op, PsimDType dt, void *user)
{
    (void)op, (void)dt, (void)user;
    return FALSE;
}

static void test_fuse(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = fuse_graph();
    PsimGraph *none = NULL;
    int32_t removed = -1;
    g_assert_true(psim_graph_fuse(g, runs_none, NULL, &none, &removed, &err));
    g_assert_null(none);
    g_assert_cmpint(removed, ==, 0);
    g_autoptr(PsimGraph) f = NULL;
    g_assert_true(psim_graph_fuse(g, runs_all, NULL, &f, &removed, &err));
    g_assert_no_error(err);
    g_assert_nonnull(f);
    g_assert_cmpint(test_count_op(f, "FusedConv"), ==, 2);
    g_assert_cmpint(test_count_op(f, "QuickGelu"), ==, 1);
    g_assert_cmpint(test_count_op(f, "Gelu"), ==, 1);
    g_assert_cmpint(test_count_op(f, "Conv"), ==, 1);
    g_assert_cmpint(test_count_op(f, "Relu"), ==, 1);
    for (const char *gone[] = {"Clip", "Sigmoid", "Div", "Erf", "Add", "Mul", NULL}, **o = gone; *o; o++)
        g_assert_cmpint(test_count_op(f, *o), ==, 0);
    /* Each chain's last node becomes the fused one; gone are 2 Convs, the Sigmoid, Div, Erf, Add,
     * the inner Mul, and the five scalars only they read. */
    g_assert_cmpint(removed, ==, 7 + 5);
    g_assert_cmpint(psim_graph_n_nodes(f), ==, psim_graph_n_nodes(g) - removed);
    const PsimNode *fc = psim_graph_node_find(f, "c1"), *fclip = psim_graph_node_find(f, "c2");
    g_assert_cmpstr(fc->op, ==, "FusedConv");
    g_assert_cmpstr(psim_node_attr_string(fc, "activation", NULL), ==, "Relu");
    g_assert_cmpstr(fc->domain, ==, "com.microsoft");
    const PsimAttr *p = psim_node_attr(fclip, "activation_params");
    g_assert_true(p && p->n == 2 && p->v.floats[0] == -0.5 && p->v.floats[1] == 2.0);
    g_assert_cmpstr(psim_graph_node_find(f, "m")->op, ==, "QuickGelu");
    g_assert_cmpstr(psim_graph_node_find(f, "out")->op, ==, "Gelu");
    /* The same outputs, bit for bit. */
    int64_t xd[4] = {1, 4, 6, 6};
    g_autoptr(PsimTensor) x = fill_seq(4, xd, 0.37f);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    const char *feeds[] = {"x"}, *fetch[] = {"out", "r3", "c3"};
    PsimTensor *a[3] = {NULL}, *b[3] = {NULL};
    g_autoptr(PsimSession) s1 = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_true(psim_session_run(s1, 1, feeds, &x, 3, fetch, a, &err));
    g_autoptr(PsimSession) s2 = psim_session_new(f, c, NULL, NULL, &err);
    g_assert_true(psim_session_run(s2, 1, feeds, &x, 3, fetch, b, &err));
    g_assert_no_error(err);
    for (int k = 0; k < 3; k++) {
        g_assert_cmpint(a[k]->n_elems, ==, b[k]->n_elems);
        g_assert_true(memcmp(a[k]->data, b[k]->data, sizeof(float) * (size_t)a[k]->n_elems) == 0);
        psim_tensor_unref(a[k]);
        psim_tensor_unref(b[k]);
    }
}

/* Keras's swish as TF GraphDefs hold it, x -> Mul(x, beta) -> Sigmoid -> Mul(x, .), fuses into
 * QuickGelu(alpha = beta) (either operand order of both Muls), computing bit for bit what the
 * three nodes do; a gate of another tensor than the scaled one does not fuse. */
static void test_fuse_scaled_swish(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("swish");
    int64_t xd[2] = {3, 50};
    PsimNode *x = fuse_node(g, "x", "Placeholder", 0, NULL);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 2, xd);
    PsimNode *b1 = fuse_scalar(g, "b1", 1.702f), *b2 = fuse_scalar(g, "b2", 1.0f), *b3 = fuse_scalar(g, "b3", 2.0f);
    PsimNode *s1 = fuse_node(g, "s1", "Mul", 2, (const PsimNode *[]){x, b1});
    PsimNode *g1 = fuse_node(g, "g1", "Sigmoid", 1, (const PsimNode *[]){s1});
    PsimNode *o1 = fuse_node(g, "o1", "Mul", 2, (const PsimNode *[]){x, g1});
    PsimNode *s2 = fuse_node(g, "s2", "Mul", 2, (const PsimNode *[]){b2, o1});
    PsimNode *g2 = fuse_node(g, "g2", "Sigmoid", 1, (const PsimNode *[]){s2});
    PsimNode *o2 = fuse_node(g, "o2", "Mul", 2, (const PsimNode *[]){g2, o1});
    PsimNode *s3 = fuse_node(g, "s3", "Mul", 2, (const PsimNode *[]){o2, b3});
    PsimNode *g3 = fuse_node(g, "g3", "Sigmoid", 1, (const PsimNode *[]){s3});
    PsimNode *o3 = fuse_node(g, "o3", "Mul", 2, (const PsimNode *[]){x, g3}); /* gates x, scaled o2 */
    psim_graph_input_add(g, x->id);
    psim_graph_output_add(g, (PsimPort){o3->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_cmpint(psim_graph_fold_constants(g, &err), >=, 0);
    g_autoptr(PsimGraph) f = NULL;
    int32_t removed = -1;
    g_assert_true(psim_graph_fuse(g, runs_all, NULL, &f, &removed, &err));
    g_assert_no_error(err);
    g_assert_cmpint(test_count_op(f, "QuickGelu"), ==, 2);
    g_assert_cmpint(removed, ==, 2 * 2 + 2); /* two Muls and Sigmoids, the scalars 1.702 and 1 */
    const PsimNode *q1 = psim_graph_node_find(f, "o1"), *q2 = psim_graph_node_find(f, "o2");
    g_assert_cmpstr(q1->op, ==, "QuickGelu");
    g_assert_cmpfloat(psim_node_attr_float(q1, "alpha", 0), ==, (double)1.702f);
    g_assert_cmpfloat(psim_node_attr_float(q2, "alpha", 0), ==, 1.0);
    g_assert_cmpstr(psim_graph_node_find(f, "o3")->op, ==, "Mul");
    g_autoptr(PsimTensor) xv = fill_seq(2, xd, 0.23f);
    for (int64_t i = 0; i < xv->n_elems; i++)
        ((float *)xv->data)[i] = ((float *)xv->data)[i] * 9.0f - 4.5f;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    const char *feeds[] = {"x"}, *fetch[] = {"o3"};
    PsimTensor *a = NULL, *b = NULL;
    g_autoptr(PsimSession) sa = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_true(psim_session_run(sa, 1, feeds, &xv, 1, fetch, &a, &err));
    g_autoptr(PsimSession) sb = psim_session_new(f, c, NULL, NULL, &err);
    g_assert_true(psim_session_run(sb, 1, feeds, &xv, 1, fetch, &b, &err));
    g_assert_no_error(err);
    g_assert_true(memcmp(a->data, b->data, a->nbytes) == 0);
    psim_tensor_unref(a);
    psim_tensor_unref(b);
}

/* Sessions cache one executor per signature; a cached run prepares nothing; extending the graph
 * invalidates the cache. */
static void test_session(void)
{
    const char *lines[] = {"x=Placeholder()", "a=XScale(x)", "b=XScale(a)", NULL};
    g_autoptr(PsimGraph) g = build(lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = vec(1);
    const char *feeds[] = {"x"}, *fb[] = {"b"}, *fa[] = {"a:0"};
    PsimTensor *out = NULL;
    PsimSessionStats st;
    for (int i = 0; i < 3; i++) {
        g_assert_true(psim_session_run(s, 1, feeds, &x, 1, fb, &out, &err));
        g_assert_cmpfloat(((float *)out->data)[2], ==, 4 * 3.0f);
        psim_tensor_unref(out);
    }
    psim_session_stats(s, &st);
    g_assert_cmpuint(st.n_runs, ==, 3);
    g_assert_cmpuint(st.n_prunes, ==, 1);
    g_assert_cmpuint(st.n_cache_hits, ==, 2);
    g_assert_true(psim_session_run(s, 1, feeds, &x, 1, fa, &out, &err));
    g_assert_cmpfloat(((float *)out->data)[2], ==, 2 * 3.0f);
    psim_tensor_unref(out);
    psim_session_stats(s, &st);
    g_assert_cmpuint(st.n_prunes, ==, 2);

    /* Extend the graph: c = XAdd(b, x). The cache is dropped and the new node is fetchable. */
    PsimNode *n = psim_graph_node_add(g, "c", "XAdd", NULL);
    psim_graph_node_input_add_ref(g, n, "b");
    psim_graph_node_input_add_ref(g, n, "x");
    psim_graph_node_outputs_set(g, n, 1);
    int64_t dims[1] = {N_ELEM};
    psim_graph_output_set(g, n, 0, PSIM_DTYPE_FLOAT32, 1, dims);
    g_assert_true(psim_graph_finalize(g, &err));
    const char *fc[] = {"c"};
    g_assert_true(psim_session_run(s, 1, feeds, &x, 1, fc, &out, &err));
    g_assert_no_error(err);
    g_assert_cmpfloat(((float *)out->data)[2], ==, 5 * 3.0f);
    psim_tensor_unref(out);
    g_assert_true(psim_session_run(s, 1, feeds, &x, 1, fb, &out, &err));
    psim_tensor_unref(out);
    psim_session_stats(s, &st);
    g_assert_cmpuint(st.n_invalidations, ==, 1);
    g_assert_cmpuint(st.n_prunes, ==, 4);
    g_assert_cmpuint(st.n_cache_hits, ==, 2);

    /* A device that is not in the cluster. */
    g_assert_null(psim_session_new(g, c, "GPU:7", NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
}

/* A plan on two CPU devices: each device's executor runs its partition in the plan's static
 * order, tensors cross through Send/Recv and the rendezvous, and the outputs equal the single
 * device's bit for bit (the same kernels run). */
typedef struct {
    PsimExecutor *e;
    PsimTensor **feeds;
    PsimTensor **outputs;
} DevRun;

static gboolean dev_run(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    DevRun *r = arg;
    return psim_executor_run_here(r->e, r->feeds, r->outputs, error);
}

static void test_plan_two_devices(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_zoo_make("cnn", &err);
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlacement) pl = psim_place(ctx, "round-robin", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = psim_plan_build(ctx, pl, &err);
    g_assert_no_error(err);
    g_assert_cmpint(plan->n_devices, ==, 2);
    g_assert_cmpint(plan->n_transfers, >, 0);

    /* Inputs: arange(n)/n; one output. */
    g_assert_cmpint(psim_graph_n_outputs(g), >=, 1);
    PsimPort out = psim_graph_output(g, 0);
    const PsimNode *in = psim_graph_node(g, psim_graph_input(g, 0));
    g_autoptr(PsimTensor) x = psim_tensor_new(in->outputs[0].dtype, in->outputs[0].rank,
                                              in->outputs[0].dims, &err);
    g_assert_no_error(err);
    for (int64_t i = 0; i < x->n_elems; i++)
        ((float *)x->data)[i] = (float)i / (float)x->n_elems;
    g_autofree char *fetch = psim_port_to_string(g, out);
    const char *feeds[] = {in->name}, *fetches[] = {fetch};

    g_autoptr(PsimWorker) w1 = psim_worker_new(psim_cluster_device(c, 0), &err);
    g_autoptr(PsimExecutor) single = psim_executor_new(g, w1, feeds, 1, fetches, 1, NULL, &err);
    g_assert_no_error(err);
    PsimTensor *want = NULL;
    g_assert_true(psim_executor_run(single, &x, &want, &err));
    g_assert_no_error(err);

    g_autoptr(PsimRendezvous) rdv = psim_rendezvous_new();
    PsimWorker *w[2];
    PsimExecutor *e[2];
    for (int d = 0; d < 2; d++) {
        w[d] = psim_worker_new(psim_cluster_device(c, d), &err);
        g_assert_no_error(err);
        PsimExecOptions opts = {.order = PSIM_EXEC_ORDER_STATIC, .static_order = plan->order[d],
                                .n_static_order = plan->n_order[d],
                                .device_of = plan->device_of, .device = d, .rendezvous = rdv};
        gboolean has_in = plan->device_of[in->id] == d, has_out = plan->device_of[out.node] == d;
        e[d] = psim_executor_new(plan->graph, w[d], feeds, has_in, fetches, has_out, &opts, &err);
        g_assert_no_error(err);
    }
    for (uint64_t step = 0; step < 3; step++) {
        PsimTensor *got = NULL;
        DevRun runs[2];
        for (int d = 0; d < 2; d++) {
            runs[d] = (DevRun){e[d], &x, plan->device_of[out.node] == d ? &got : NULL};
            psim_executor_set_step(e[d], step);
            psim_worker_post(w[d], dev_run, &runs[d]);
        }
        for (int d = 0; d < 2; d++) {
            psim_worker_wait(w[d], &err);
            g_assert_no_error(err);
        }
        g_assert_nonnull(got);
        g_assert_cmpint(got->n_elems, ==, want->n_elems);
        g_assert_cmpmem(got->data, got->nbytes, want->data, want->nbytes);
        psim_tensor_unref(got);
    }
    PsimExecStats st[2];
    for (int d = 0; d < 2; d++)
        psim_executor_stats(e[d], &st[d]);
    g_assert_cmpint(st[0].n_exec + st[1].n_exec, >, 0);

    /* A failure on one device aborts the other's waiting Recvs instead of hanging it: feed the
     * device with the input a tensor of the wrong shape... which is caught before the step; so
     * abort the rendezvous by hand as a failing device would, and the other fails cleanly. */
    int consumer = plan->device_of[in->id] == 0 ? 1 : 0;
    psim_rendezvous_abort(rdv);
    PsimTensor *got = NULL;
    DevRun r = {e[consumer], &x, plan->device_of[out.node] == consumer ? &got : NULL};
    psim_executor_set_step(e[consumer], 99);
    psim_worker_post(w[consumer], dev_run, &r);
    g_assert_false(psim_worker_wait(w[consumer], &err));
    g_assert_nonnull(strstr(err->message, "aborted"));
    g_clear_error(&err);
    g_assert_null(got);
    psim_rendezvous_reset(rdv);

    /* The same through psim_plan_exec, static and dynamic (priority) orders. */
    for (int dyn = 0; dyn < 2; dyn++) {
        g_autoptr(PsimPlanExec) px =
            psim_plan_exec_new(plan, c, feeds, 1, fetches, 1, dyn, &err);
        g_assert_no_error(err);
        for (int step = 0; step < 2; step++) {
            PsimTensor *o2 = NULL;
            g_assert_true(psim_plan_exec_run(px, &x, &o2, &err));
            g_assert_no_error(err);
            g_assert_cmpmem(o2->data, o2->nbytes, want->data, want->nbytes);
            psim_tensor_unref(o2);
        }
        g_assert_cmpfloat(psim_plan_exec_step_us(px), >, 0);
        const char *names[2] = {plan->devices[0], plan->devices[1]};
        g_autoptr(PsimTimeline) tl = psim_timeline_new("cnn", "run", 2, names);
        psim_plan_exec_timeline_add(px, tl);
        /* Send/Recv pairs are transfers in the timeline, not ops. */
        int32_t n_nodes = 0;
        for (int d = 0; d < 2; d++) {
            PsimExecStats s2;
            psim_executor_stats(psim_plan_exec_executor(px, d), &s2);
            for (int32_t k = 0; k < s2.n_run; k++) {
                const char *op = psim_graph_node(plan->graph, s2.nodes[k])->op;
                n_nodes += strcmp(op, "Send") && strcmp(op, "Recv");
            }
        }
        g_assert_cmpint((int)tl->ops->len, ==, n_nodes);
        g_assert_cmpint((int)tl->xfers->len, ==, plan->n_transfers);
        /* A feed of the wrong shape is caught before any device starts. */
        int64_t one = 1;
        g_autoptr(PsimTensor) bad = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &one, NULL);
        PsimTensor *o3 = NULL;
        g_assert_false(psim_plan_exec_run(px, &bad, &o3, &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_clear_error(&err);
    }

    psim_tensor_unref(want);
    for (int d = 0; d < 2; d++) {
        psim_executor_free(e[d]);
        psim_worker_free(w[d]);
    }
}

/* Orders that deadlock, run through the executor API directly (psim_plan_exec_new would refuse
 * the plan: psim_plan_check): on CPU:0 b0 comes before a0, on CPU:1 b1 before a1, and each b
 * waits for the other device's a. Every device then waits on its Recvs for ever; the deadlock
 * detector fails the step once no device has completed a node for the stall timeout, with a
 * RUNTIME error naming the waiting Recvs. */
static void test_plan_deadlock(void)
{
    static const char *const lines[] = {"x=Placeholder()", "a0=XScale(x)", "a1=XScale(x)",
                                        "b0=XScale(a1)",   "b1=XScale(a0)", "out=XAdd(b0,b1)",
                                        NULL};
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, NULL, &err);
    g_assert_no_error(err);
    int32_t n = psim_graph_n_nodes(g);
    g_autoptr(PsimPlacement) pl = psim_placement_new(n, 2, "test");
    for (int32_t v = 0; v < n; v++) {
        const char *name = psim_graph_node(g, v)->name;
        pl->device_of[v] = !strcmp(name, "a1") || !strcmp(name, "b1");
        pl->seq[v] = v;
    }
    g_autoptr(PsimPlan) plan = psim_plan_build(ctx, pl, &err);
    g_assert_no_error(err);
    g_assert_true(psim_plan_check(plan, &err));
    /* Each device: its Recvs first (all asked at once), its compute nodes with b before a, its
     * Sends last. */
    for (int32_t d = 0; d < 2; d++) {
        int32_t k = 0, *ord = plan->order[d];
        for (int pass = 0; pass < 3; pass++)
            for (int32_t v = 0; v < psim_graph_n_nodes(plan->graph); v++) {
                const char *op = psim_graph_node(plan->graph, v)->op;
                int kind = !strcmp(op, "Recv") ? 0 : !strcmp(op, "Send") ? 2 : 1;
                if (plan->device_of[v] == d && kind == pass)
                    ord[k++] = v;
            }
        g_assert_cmpint(k, ==, plan->n_order[d]);
        int32_t a = psim_graph_node_find(plan->graph, d ? "a1" : "a0")->id;
        int32_t b = psim_graph_node_find(plan->graph, d ? "b1" : "b0")->id;
        for (int32_t i = 0; i < k; i++)
            ord[i] = ord[i] == a ? b : ord[i] == b ? a : ord[i];
    }
    g_assert_false(psim_plan_check(plan, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "deadlocks"));
    g_clear_error(&err);

    g_autoptr(PsimRendezvous) rdv = psim_rendezvous_new();
    PsimWorker *w[2];
    PsimExecutor *e[2];
    const char *feeds[] = {"x"}, *fetches[] = {"out:0"};
    for (int d = 0; d < 2; d++) {
        w[d] = psim_worker_new(psim_cluster_device(c, d), &err);
        g_assert_no_error(err);
        PsimExecOptions opts = {.order = PSIM_EXEC_ORDER_STATIC, .static_order = plan->order[d],
                                .n_static_order = plan->n_order[d], .device_of = plan->device_of,
                                .device = d, .rendezvous = rdv, .stall_timeout_s = 0.3};
        e[d] = psim_executor_new(plan->graph, w[d], feeds, d == 0, fetches, d == 0, &opts, &err);
        g_assert_no_error(err);
    }
    g_autoptr(PsimTensor) x = vec(1);
    PsimTensor *got = NULL;
    DevRun runs[2] = {{e[0], &x, &got}, {e[1], NULL, NULL}};
    alarm(60); /* a hang is a failure, not a stuck test */
    double t0 = psim_exec_now_us();
    for (int d = 0; d < 2; d++) {
        psim_executor_set_step(e[d], 0);
        psim_worker_post(w[d], dev_run, &runs[d]);
    }
    int n_deadlock = 0;
    for (int d = 0; d < 2; d++) {
        GError *derr = NULL;
        g_assert_false(psim_worker_wait(w[d], &derr));
        g_assert_nonnull(derr);
        g_assert_cmpint(derr->code, ==, PSIM_ERROR_RUNTIME);
        g_test_message("device %d: %s", d, derr->message);
        if (strstr(derr->message, "deadlock")) {
            n_deadlock++;
            g_assert_nonnull(strstr(derr->message, "_recv_"));
        } else {
            g_assert_nonnull(strstr(derr->message, "aborted"));
        }
        g_error_free(derr);
    }
    double waited_s = (psim_exec_now_us() - t0) * 1e-6;
    alarm(0);
    g_assert_cmpint(n_deadlock, >=, 1);
    g_assert_cmpfloat(waited_s, >=, 0.3);
    g_assert_cmpfloat(waited_s, <, 10);
    g_assert_null(got);
    for (int d = 0; d < 2; d++) {
        psim_executor_free(e[d]);
        psim_worker_free(w[d]);
    }
}

/* The rendezvous: a key's handle and its string meet in one entry; steps are kept apart (a Send
 * of the next step before this step's Recv), a tensor waits for its Recv and a Recv for its
 * tensor, an abort fails the waiting and the future Recvs until a reset, which keeps handles. */
typedef struct {
    int calls, ok;
    PsimTensor *t;
} Got;

static void got_done(PsimTensor *t, gboolean ok, void *user)
{
    Got *g = user;
    g->calls++;
    g->ok += ok;
    psim_tensor_unref(g->t);
    g->t = t;
}

static void test_rendezvous(void)
{
    GError *err = NULL;
    g_autoptr(PsimRendezvous) r = psim_rendezvous_new();
    PsimRendezvousKey *k = psim_rendezvous_key(r, "a;CPU:0->CPU:1");
    g_assert_true(psim_rendezvous_key(r, "a;CPU:0->CPU:1") == k);
    g_assert_true(psim_rendezvous_key(r, "b") != k);
    g_autoptr(PsimTensor) t0 = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, (int64_t[]){4}, &err);
    g_autoptr(PsimTensor) t1 = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, (int64_t[]){4}, &err);
    g_assert_no_error(err);
    Got g0 = {0}, g1 = {0};
    psim_rendezvous_send(r, "a;CPU:0->CPU:1", 1, t1); /* step 1 first */
    psim_rendezvous_key_recv_async(k, 0, got_done, &g0);
    g_assert_cmpint(g0.calls, ==, 0); /* step 0 not sent yet */
    psim_rendezvous_key_recv_async(k, 1, got_done, &g1);
    g_assert_cmpint(g1.calls, ==, 1);
    g_assert_true(g1.t == t1);
    psim_rendezvous_key_send(k, 0, t0);
    g_assert_cmpint(g0.calls, ==, 1);
    g_assert_cmpint(g0.ok, ==, 1);
    g_assert_true(g0.t == t0);
    /* Abort: a waiting Recv and a later one fail; a reset clears what was sent and the flag. */
    Got g2 = {0}, g3 = {0}, g4 = {0};
    psim_rendezvous_recv_async(r, "b", 2, got_done, &g2);
    psim_rendezvous_key_send(k, 5, t0);
    psim_rendezvous_abort(r);
    g_assert_true(psim_rendezvous_aborted(r));
    g_assert_cmpint(g2.calls, ==, 1);
    g_assert_cmpint(g2.ok, ==, 0);
    psim_rendezvous_key_recv_async(k, 3, got_done, &g3);
    g_assert_cmpint(g3.calls, ==, 1);
    g_assert_cmpint(g3.ok, ==, 0);
    psim_rendezvous_reset(r);
    g_assert_false(psim_rendezvous_aborted(r));
    psim_rendezvous_key_recv_async(k, 5, got_done, &g4);
    g_assert_cmpint(g4.calls, ==, 0); /* the step-5 tensor went with the reset */
    psim_rendezvous_key_send(k, 5, t1);
    g_assert_cmpint(g4.ok, ==, 1);
    g_assert_true(g4.t == t1);
    for (Got *g[] = {&g0, &g1, &g2, &g3, &g4}, **p = g; p < g + 5; p++)
        psim_tensor_unref((*p)->t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(test_kernels); i++)
        psim_kernel_register(&test_kernels[i]);
    g_test_add_func("/exec/order", test_order);
    g_test_add_func("/exec/denormals", test_denormals);
    g_test_add_func("/exec/release", test_release);
    g_test_add_func("/exec/partial", test_partial);
    g_test_add_func("/exec/constant-once", test_constant_once);
    g_test_add_func("/exec/errors", test_errors);
    g_test_add_func("/exec/worker", test_worker);
    g_test_add_func("/exec/session", test_session);
    g_test_add_func("/exec/plan/two-devices", test_plan_two_devices);
    g_test_add_func("/exec/plan/deadlock", test_plan_deadlock);
    g_test_add_func("/exec/rendezvous", test_rendezvous);
    g_test_add_func("/exec/conv-fed-weights", test_conv_fed_weights);
    g_test_add_func("/exec/fuse", test_fuse);
    g_test_add_func("/exec/fuse-scaled-swish", test_fuse_scaled_swish);
    return g_test_run();
}
