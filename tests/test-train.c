/* Training: variables in containers (values survive steps, reads are snapshots, reset), the
 * optimizer ops against their formulas (Momentum as PyTorch's SGD with momentum, Nesterov, Adam,
 * Adagrad), checkpoint files (round trip; truncated or damaged files refused), and the training
 * step graph: the built-in mlp learns a synthetic task, and the same steps placed round-robin
 * on two devices give bit-identical variables. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "placesim/cluster.h"
#include "placesim/exec.h"
#include "placesim/kernels.h"
#include "placesim/placer.h"

static PsimTensor *vec(const float *v, int64_t n)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &n, NULL);
    memcpy(t->data, v, sizeof(float) * (size_t)n);
    return t;
}

static PsimNode *node1(PsimGraph *g, const char *name, const char *op)
{
    PsimNode *n = psim_graph_node_add(g, name, op, NULL);
    g_assert_nonnull(n);
    psim_graph_node_outputs_set(g, n, 1);
    return n;
}

static PsimNode *const_node(PsimGraph *g, const char *name, PsimTensor *t)
{
    PsimNode *n = node1(g, name, "Const");
    psim_graph_node_attr_set_tensor(g, n, "value", t);
    psim_graph_output_value_set(g, n, 0, t);
    return n;
}

static PsimNode *variable(PsimGraph *g, const char *name, const char *container, PsimTensor *init)
{
    PsimNode *n = node1(g, name, "VariableV2");
    psim_graph_node_attr_set_tensor(g, n, "value", init);
    psim_graph_node_attr_set_string(g, n, "container", container);
    psim_graph_node_attr_set_dtype(g, n, "dtype", init->dtype);
    psim_graph_node_attr_set_shape(g, n, "shape", init->rank, init->dims);
    return n;
}

static const float *value_of(const char *container, const char *name)
{
    PsimTensor *t = psim_variable_read(psim_variable_get(container, name, FALSE));
    g_assert_nonnull(t);
    const float *v = t->data;
    psim_tensor_unref(t); /* the container keeps its own reference */
    return v;
}

/* AssignAdd accumulates across steps; a read in the same step as an Assign sees the value the
 * step started with (Mul of the read, whatever the order); reset drops the values. */
static void test_variables(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("vars");
    const float one[2] = {1, 2}, inc[2] = {10, 20}, two[1] = {2};
    g_autoptr(PsimTensor) t0 = vec(one, 2), td = vec(inc, 2), t2 = vec(two, 1);
    PsimNode *v = variable(g, "v", "t-vars", t0);
    PsimNode *d = const_node(g, "d", td), *k = const_node(g, "k", t2);
    PsimNode *add = node1(g, "add", "AssignAdd");
    psim_graph_node_input_add(g, add, (PsimPort){v->id, 0});
    psim_graph_node_input_add(g, add, (PsimPort){d->id, 0});
    PsimNode *mul = node1(g, "mul", "Mul");
    psim_graph_node_input_add(g, mul, (PsimPort){v->id, 0});
    psim_graph_node_input_add(g, mul, (PsimPort){k->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_true(psim_graph_infer_shapes(g, &err));
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    psim_container_reset("t-vars");
    for (int step = 0; step < 3; step++) {
        const char *fetch[] = {"mul", "^add"};
        PsimTensor *out[2] = {NULL, NULL};
        g_assert_true(psim_session_run(s, 0, NULL, NULL, 2, fetch, out, &err));
        g_assert_no_error(err);
        const float *m = out[0]->data;
        /* The step read v before its AssignAdd whatever ran first: 2 * (1 + 10 * step). */
        g_assert_cmpfloat(m[0], ==, 2 * (1 + 10.0f * (float)step));
        g_assert_cmpfloat(m[1], ==, 2 * (2 + 20.0f * (float)step));
        psim_tensor_unref(out[0]);
        const float *now = value_of("t-vars", "v");
        g_assert_cmpfloat(now[0], ==, 1 + 10.0f * (float)(step + 1));
    }
    g_auto(GStrv) names = psim_container_names("t-vars");
    g_assert_cmpint(g_strv_length(names), ==, 1);
    g_assert_cmpstr(names[0], ==, "v");
    psim_container_reset("t-vars");
    g_assert_null(psim_variable_get("t-vars", "v", FALSE));
    /* After the reset the variable starts again from its initial value. */
    const char *fetch[] = {"mul"};
    PsimTensor *out[1] = {NULL};
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, fetch, out, &err));
    g_assert_cmpfloat(((float *)out[0]->data)[0], ==, 2.0f);
    psim_tensor_unref(out[0]);
    psim_container_reset("t-vars");
}

/* An Assign whose input 0 is not a Variable is refused, naming the node. */
static void test_assign_needs_variable(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("bad-assign");
    const float one[1] = {1};
    g_autoptr(PsimTensor) t = vec(one, 1);
    PsimNode *a = const_node(g, "a", t);
    PsimNode *as = node1(g, "as", "Assign");
    psim_graph_node_input_add(g, as, (PsimPort){a->id, 0});
    psim_graph_node_input_add(g, as, (PsimPort){a->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_true(psim_graph_infer_shapes(g, &err));
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    PsimExecOptions o = {.no_constant_folding = TRUE};
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, &o, &err);
    const char *fetch[] = {"^as"};
    g_assert_false(psim_session_run(s, 0, NULL, NULL, 1, fetch, NULL, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "'as'"));
    g_assert_nonnull(strstr(err->message, "not from a Variable"));
}

/* Runs one optimizer node over x, g and state tensors (float32, 3 elements) and returns its
 * outputs (caller unrefs). */
static void run_optimizer(const char *op, const char *mode, double alpha, double beta, double r,
                          int64_t t, int n_state, const float *const *in, PsimTensor **out)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("opt");
    g_autoptr(PsimTensor) rt = psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, NULL);
    g_autoptr(PsimTensor) tt = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, NULL);
    ((float *)rt->data)[0] = (float)r;
    ((int64_t *)tt->data)[0] = t;
    PsimNode *rn = const_node(g, "r", rt), *tn = const_node(g, "t", tt);
    PsimNode *o = node1(g, "o", op);
    o->domain = psim_graph_intern(g, "ai.onnx.preview.training");
    psim_graph_node_outputs_set(g, o, 2 + n_state - 1);
    psim_graph_node_input_add(g, o, (PsimPort){rn->id, 0});
    psim_graph_node_input_add(g, o, (PsimPort){tn->id, 0});
    for (int k = 0; k < 2 + n_state; k++) {
        g_autofree char *name = g_strdup_printf("in%d", k);
        g_autoptr(PsimTensor) v = vec(in[k], 3);
        psim_graph_node_input_add(g, o, (PsimPort){const_node(g, name, v)->id, 0});
    }
    if (mode)
        psim_graph_node_attr_set_string(g, o, "mode", mode);
    psim_graph_node_attr_set_float(g, o, "alpha", alpha);
    psim_graph_node_attr_set_float(g, o, "beta", beta);
    psim_graph_node_attr_set_float(g, o, "epsilon", 1e-3);
    psim_graph_node_attr_set_float(g, o, "norm_coefficient", 0.01);
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_true(psim_graph_infer_shapes(g, &err));
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    PsimExecOptions eo = {.no_constant_folding = TRUE};
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, &eo, &err);
    const char *fetch[3] = {"o:0", "o:1", "o:2"};
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1 + n_state, fetch, out, &err));
    g_assert_no_error(err);
}

static void assert_near(const PsimTensor *t, const double *want)
{
    for (int i = 0; i < 3; i++)
        g_assert_cmpfloat(fabs(((float *)t->data)[i] - want[i]), <=, 1e-6 * (1 + fabs(want[i])));
}

/* The optimizers against their formulas, with an L2 coefficient of 0.01 on x. */
static void test_optimizers(void)
{
    const float x[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.3f, 0.1f, -0.7f}, v[3] = {0.2f, -0.1f, 0.0f},
                h[3] = {0.5f, 0.25f, 0.1f};
    const double r = 0.1, mu = 0.9, b1 = 0.8, b2 = 0.95, eps = 1e-3, l2 = 0.01;
    double wx[3], wv[3], wh[3];
    for (int step = 0; step < 2; step++) {
        /* Momentum: PyTorch's SGD (dampening 0): v = mu v + g (the first step v = g). */
        const float *in[3] = {x, g, v};
        PsimTensor *out[3] = {NULL};
        run_optimizer("Momentum", "standard", mu, 1.0, r, step, 1, in, out);
        for (int i = 0; i < 3; i++) {
            double gr = g[i] + l2 * x[i];
            wv[i] = (step ? mu * v[i] : mu * v[i]) + gr;
            wx[i] = x[i] - r * wv[i];
        }
        assert_near(out[0], wx);
        assert_near(out[1], wv);
        psim_tensor_unref(out[0]);
        psim_tensor_unref(out[1]);
        run_optimizer("Momentum", "nesterov", mu, 1.0, r, step, 1, in, out);
        for (int i = 0; i < 3; i++)
            wx[i] = x[i] - r * ((g[i] + l2 * x[i]) + mu * wv[i]);
        assert_near(out[0], wx);
        psim_tensor_unref(out[0]);
        psim_tensor_unref(out[1]);
    }
    for (int64_t t = 0; t < 4; t += 3) {
        const float *in[4] = {x, g, v, h};
        PsimTensor *out[3] = {NULL};
        run_optimizer("Adam", NULL, b1, b2, r, t, 2, in, out);
        double ra = t > 0 ? r * sqrt(1 - pow(b2, (double)t)) / (1 - pow(b1, (double)t)) : r;
        for (int i = 0; i < 3; i++) {
            double gr = g[i] + l2 * x[i];
            wv[i] = b1 * v[i] + (1 - b1) * gr;
            wh[i] = b2 * h[i] + (1 - b2) * gr * gr;
            wx[i] = x[i] - ra * wv[i] / (sqrt(wh[i]) + eps);
        }
        assert_near(out[0], wx);
        assert_near(out[1], wv);
        assert_near(out[2], wh);
        for (int k = 0; k < 3; k++)
            psim_tensor_unref(out[k]);
    }
    const float *in[3] = {x, g, h};
    PsimTensor *out[3] = {NULL};
    run_optimizer("Adagrad", NULL, 0, 0, r, 2, 1, in, out);
    for (int i = 0; i < 3; i++) {
        double gr = g[i] + l2 * x[i];
        wh[i] = h[i] + gr * gr;
        wx[i] = x[i] - r * gr / (sqrt(wh[i]) + eps);
    }
    assert_near(out[0], wx);
    assert_near(out[1], wh);
    psim_tensor_unref(out[0]);
    psim_tensor_unref(out[1]);
}

/* Checkpoint files: a round trip keeps names, dtypes, shapes and bytes; a truncated or damaged
 * file is an INPUT error naming it; no temporary file is left behind. */
static void test_checkpoint_file(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("psim-ckpt-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "c.psck", NULL);
    const float a[3] = {1.5f, -2, 3};
    g_autoptr(PsimTensor) ta = vec(a, 3);
    g_autoptr(PsimTensor) tb = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, NULL);
    ((int64_t *)tb->data)[0] = 12345678901LL;
    const char *names[2] = {"w/a", "step"};
    PsimTensor *ts[2] = {ta, tb};
    g_assert_true(psim_checkpoint_write(path, 2, names, ts, &err));
    g_assert_no_error(err);
    int32_t n = 0;
    char **rn = NULL;
    PsimTensor **rt = NULL;
    g_assert_true(psim_checkpoint_read(path, &n, &rn, &rt, &err));
    g_assert_cmpint(n, ==, 2);
    g_assert_cmpstr(rn[0], ==, "w/a");
    g_assert_cmpstr(rn[1], ==, "step");
    g_assert_cmpint(rt[0]->dtype, ==, PSIM_DTYPE_FLOAT32);
    g_assert_cmpint(rt[0]->rank, ==, 1);
    g_assert_cmpmem(rt[0]->data, rt[0]->nbytes, a, sizeof a);
    g_assert_cmpint(rt[1]->rank, ==, 0);
    g_assert_cmpint(((int64_t *)rt[1]->data)[0], ==, 12345678901LL);
    for (int32_t i = 0; i < n; i++)
        psim_tensor_unref(rt[i]);
    g_free(rt);
    g_strfreev(rn);
    /* Nothing but the checkpoint in the folder. */
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    int files = 0;
    while (g_dir_read_name(d))
        files++;
    g_assert_cmpint(files, ==, 1);
    g_autofree char *data = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    /* Truncated, then one byte flipped: both refused. */
    g_autofree char *bad = g_build_filename(dir, "bad.psck", NULL);
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0)
            g_assert_true(g_file_set_contents(bad, data, (gssize)len - 10, NULL));
        else {
            data[len / 2] ^= 0x40;
            g_assert_true(g_file_set_contents(bad, data, (gssize)len, NULL));
        }
        g_clear_error(&err);
        g_assert_false(psim_checkpoint_read(bad, &n, &rn, &rt, &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_nonnull(strstr(err->message, "bad.psck"));
        g_assert_nonnull(strstr(err->message, "not a whole checkpoint"));
    }
    unlink(bad);
    unlink(path);
    rmdir(dir);
}

/* A synthetic task the mlp can learn: ten class prototypes of +-1 over 784 features, each
 * example its class's prototype plus uniform noise of the same size. */
static void synth_batch(GRand *r, PsimTensor *x, PsimTensor *y)
{
    float *xd = x->data;
    int64_t *yd = y->data;
    for (int64_t b = 0; b < y->n_elems; b++) {
        int64_t label = g_rand_int_range(r, 0, 10);
        for (int64_t i = 0; i < 784; i++) {
            uint32_t h = (uint32_t)(label * 7919 + i * 104729) * 2654435761u;
            xd[b * 784 + i] = ((h >> 16) & 1 ? 1.0f : -1.0f) + (float)g_rand_double_range(r, -1, 1);
        }
        yd[b] = label;
    }
}

/* Runs `steps` training steps of the mlp on cluster spec/algo (the learning rate decayed to 0
 * over `decay` steps, 0: constant; each step's rate in lr[step] when lr is not NULL); returns
 * the mean loss of the first and last five steps. */
static void train_steps_with(const char *spec, const char *algo, int steps, int64_t decay, double *lr,
                             double *first, double *last)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) base = psim_zoo_make("mlp", &err);
    g_assert_no_error(err);
    PsimTrainSpec ts = {.optimizer = PSIM_OPTIMIZER_SGD, .lr = 0.05, .lr_decay_steps = decay,
                        .momentum = 0.9, .container = "t-train"};
    PsimTrainInfo info;
    g_autoptr(PsimGraph) g = psim_graph_train_step(base, &ts, &info, &err);
    g_assert_no_error(err);
    g_assert_cmpint(info.n_variables, ==, 6);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec(spec, &err);
    g_autoptr(PsimPlanSession) s = psim_plan_session_new(g, c, NULL, algo, NULL, FALSE, &err);
    g_assert_no_error(err);
    psim_container_reset("t-train");
    int64_t xd[2] = {64, 784}, yd[1] = {64};
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, xd, NULL);
    g_autoptr(PsimTensor) y = psim_tensor_new(PSIM_DTYPE_INT64, 1, yd, NULL);
    GRand *r = g_rand_new_with_seed(3);
    g_autofree char *tgt = g_strconcat("^", info.train_op, NULL);
    const char *feeds[2] = {"input", "labels"}, *fetch[3] = {info.loss, tgt, "train/learning_rate:0"};
    *first = *last = 0;
    for (int i = 0; i < steps; i++) {
        synth_batch(r, x, y);
        PsimTensor *in[2] = {x, y}, *out[3] = {NULL, NULL, NULL};
        g_assert_true(psim_plan_session_run(s, 2, feeds, in, lr ? 3 : 2, fetch, out, &err));
        g_assert_no_error(err);
        double l = psim_tensor_get_f64(out[0], 0);
        psim_tensor_unref(out[0]);
        if (lr) {
            lr[i] = psim_tensor_get_f64(out[2], 0);
            psim_tensor_unref(out[2]);
        }
        if (i < 5)
            *first += l / 5;
        if (i >= steps - 5)
            *last += l / 5;
    }
    g_rand_free(r);
    g_autoptr(PsimTensor) step = psim_variable_read(psim_variable_get("t-train", "global_step", FALSE));
    g_assert_cmpint(((int64_t *)step->data)[0], ==, steps);
    g_auto(GStrv) names = psim_container_names("t-train");
    g_assert_cmpint(g_strv_length(names), ==, 13); /* 6 weights, 6 momenta, the step */
    psim_train_info_clear(&info);
}

static void train_steps(const char *spec, const char *algo, int steps, double *first, double *last)
{
    train_steps_with(spec, algo, steps, 0, NULL, first, last);
}

static void test_train_step_learns(void)
{
    double first, last;
    train_steps("local:1", "single", 60, &first, &last);
    g_assert_cmpfloat(first, >, 2.0);       /* ln(10) = 2.30 at the start */
    g_assert_cmpfloat(last, <, 0.6 * first); /* and clearly lower after 60 steps */
    psim_container_reset("t-train");
}

/* --lr-schedule cosine: the rate each step reads is lr (1 + cos(pi min(t, T) / T)) / 2 at global
 * step t, from lr at the first step to 0 at step T and after (T = 4 here). */
static void test_cosine_learning_rate(void)
{
    double first, last, lr[7];
    train_steps_with("local:1", "single", 7, 4, lr, &first, &last);
    for (int t = 0; t < 7; t++)
        g_assert_cmpfloat_with_epsilon(lr[t], 0.05 * (1 + cos(G_PI * MIN(t, 4) / 4)) / 2, 1e-8);
    psim_container_reset("t-train");
}

/* The same steps placed round-robin on two devices (variables colocated with their Assigns,
 * tensors crossing through Send/Recv) end with the very same variables. */
static void test_train_step_two_devices(void)
{
    double f1, l1, f2, l2;
    train_steps("local:1", "single", 8, &f1, &l1);
    g_autoptr(PsimTensor) w1 = psim_variable_read(psim_variable_get("t-train", "fc1/W", FALSE));
    g_autoptr(PsimTensor) m1 = psim_variable_read(psim_variable_get("t-train", "fc3/B/momentum", FALSE));
    train_steps("local:2", "round-robin", 8, &f2, &l2);
    g_autoptr(PsimTensor) w2 = psim_variable_read(psim_variable_get("t-train", "fc1/W", FALSE));
    g_autoptr(PsimTensor) m2 = psim_variable_read(psim_variable_get("t-train", "fc3/B/momentum", FALSE));
    g_assert_true(w1 != w2);
    g_assert_cmpmem(w1->data, w1->nbytes, w2->data, w2->nbytes);
    g_assert_cmpmem(m1->data, m1->nbytes, m2->data, m2->nbytes);
    g_assert_cmpfloat(l1, ==, l2);
    psim_container_reset("t-train");
}

/* ConvGrad in float32 against its float64 loops, on a strided, padded convolution of C to M
 * channels: grouped (the batched sgemm path for several images, the per-image path for one), or
 * ungrouped (oneDNN's backward convolutions), dilated dil times in height. */
static void conv_grad_case(int64_t N, int64_t group, int64_t C, int64_t M, int64_t dil)
{
    g_autoptr(GError) err = NULL;
    int64_t xd[4] = {N, C, 9, 8}, wd[4] = {M, C / group, 3, 3};
    PsimTensor *out[2][3] = {{NULL}};
    for (int f = 0; f < 2; f++) {
        PsimDType dt = f ? PSIM_DTYPE_FLOAT64 : PSIM_DTYPE_FLOAT32;
        g_autoptr(PsimGraph) g = psim_graph_new("cg");
        g_autoptr(PsimTensor) x = psim_tensor_new(dt, 4, xd, NULL);
        g_autoptr(PsimTensor) w = psim_tensor_new(dt, 4, wd, NULL);
        psim_tensor_fill(x, PSIM_TENSOR_FILL_RANDOM, 1);
        psim_tensor_fill(w, PSIM_TENSOR_FILL_RANDOM, 2);
        /* Output 5x4 (stride 2, pad 1 both ways; a dilation of 2 in height: 4x4). */
        int64_t yd[4] = {N, M, (9 + 2 - (2 * dil + 1)) / 2 + 1, 4};
        g_autoptr(PsimTensor) dy = psim_tensor_new(dt, 4, yd, NULL);
        psim_tensor_fill(dy, PSIM_TENSOR_FILL_RANDOM, 3);
        PsimNode *c = node1(g, "cg", "ConvGrad");
        c->domain = psim_graph_intern(g, "com.microsoft");
        psim_graph_node_outputs_set(g, c, 3);
        psim_graph_node_input_add(g, c, (PsimPort){const_node(g, "dy", dy)->id, 0});
        psim_graph_node_input_add(g, c, (PsimPort){const_node(g, "x", x)->id, 0});
        psim_graph_node_input_add(g, c, (PsimPort){const_node(g, "w", w)->id, 0});
        int64_t st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
        psim_graph_node_attr_set_ints(g, c, "strides", 2, st);
        psim_graph_node_attr_set_ints(g, c, "pads", 4, pads);
        psim_graph_node_attr_set_int(g, c, "group", group);
        psim_graph_node_attr_set_ints(g, c, "dilations", 2, (int64_t[]){dil, 1});
        g_assert_true(psim_graph_finalize(g, &err));
        g_assert_true(psim_graph_infer_shapes(g, &err));
        g_autoptr(PsimCluster) cl = psim_cluster_from_spec("local:1", NULL);
        PsimExecOptions eo = {.no_constant_folding = TRUE};
        g_autoptr(PsimSession) s = psim_session_new(g, cl, NULL, &eo, &err);
        const char *fetch[3] = {"cg:0", "cg:1", "cg:2"};
        g_assert_true(psim_session_run(s, 0, NULL, NULL, 3, fetch, out[f], &err));
        g_assert_no_error(err);
    }
    for (int k = 0; k < 3; k++) {
        double scale = 0;
        for (int64_t i = 0; i < out[1][k]->n_elems; i++)
            scale = MAX(scale, fabs(psim_tensor_get_f64(out[1][k], i)));
        g_assert_cmpfloat(scale, >, 0);
        for (int64_t i = 0; i < out[1][k]->n_elems; i++)
            g_assert_cmpfloat(fabs(psim_tensor_get_f64(out[0][k], i) - psim_tensor_get_f64(out[1][k], i)),
                              <=, 1e-5 * scale);
        psim_tensor_unref(out[0][k]);
        psim_tensor_unref(out[1][k]);
    }
}

static void test_conv_grad(void)
{
    conv_grad_case(1, 2, 4, 6, 1);
    conv_grad_case(5, 2, 4, 6, 1);
    conv_grad_case(1, 1, 4, 6, 2);
    conv_grad_case(5, 1, 4, 6, 2);
    /* undilated, channels enough for oneDNN's blocked layouts: dY reordered once for both
     * gradients */
    conv_grad_case(4, 1, 16, 32, 1);
}

/* Queues through their ops: EnqueueMany of 5 rows, DequeueMany of 2 (in order), Dequeue of one,
 * Size; after Close, the rest drains and then a dequeue fails (out of range). */
static void test_queue_ops(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_new("queue");
    PsimNode *q = node1(g, "q", "FIFOQueueV2");
    PsimDType dts[1] = {PSIM_DTYPE_FLOAT32};
    PsimAttr ta = {.name = "component_types", .type = PSIM_ATTR_DTYPES, .n = 1, .v.dts = dts};
    psim_graph_node_attr_set(g, q, &ta);
    psim_graph_node_attr_set_string(g, q, "container", "t-queue");
    psim_graph_node_attr_set_int(g, q, "capacity", 10);
    const float rows[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t d2[2] = {5, 2};
    g_autoptr(PsimTensor) five = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d2, NULL);
    memcpy(five->data, rows, sizeof rows);
    PsimNode *src = const_node(g, "rows", five);
    PsimNode *enq = psim_graph_node_add(g, "enq", "QueueEnqueueManyV2", NULL);
    psim_graph_node_input_add(g, enq, (PsimPort){q->id, 0});
    psim_graph_node_input_add(g, enq, (PsimPort){src->id, 0});
    g_autoptr(PsimTensor) two = psim_tensor_new(PSIM_DTYPE_INT32, 0, NULL, NULL);
    ((int32_t *)two->data)[0] = 2;
    PsimNode *nn = const_node(g, "two", two);
    PsimNode *dm = node1(g, "dm", "QueueDequeueManyV2");
    psim_graph_node_input_add(g, dm, (PsimPort){q->id, 0});
    psim_graph_node_input_add(g, dm, (PsimPort){nn->id, 0});
    psim_graph_node_attr_set(g, dm, &ta);
    PsimNode *d1 = node1(g, "d1", "QueueDequeueV2");
    psim_graph_node_input_add(g, d1, (PsimPort){q->id, 0});
    psim_graph_node_attr_set(g, d1, &ta);
    PsimNode *sz = node1(g, "size", "QueueSizeV2");
    psim_graph_node_input_add(g, sz, (PsimPort){q->id, 0});
    PsimNode *cl = psim_graph_node_add(g, "close", "QueueCloseV2", NULL);
    psim_graph_node_input_add(g, cl, (PsimPort){q->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_true(psim_graph_infer_shapes(g, &err));
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:1", NULL);
    PsimExecOptions eo = {.no_constant_folding = TRUE};
    g_autoptr(PsimSession) s = psim_session_new(g, c, NULL, &eo, &err);
    psim_container_reset("t-queue");
    const char *f_enq[1] = {"^enq"}, *f_dm[1] = {"dm"}, *f_d1[1] = {"d1"}, *f_sz[1] = {"size"},
               *f_cl[1] = {"^close"};
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, f_enq, NULL, &err));
    PsimTensor *o[1] = {NULL};
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, f_sz, o, &err));
    g_assert_cmpint(((int32_t *)o[0]->data)[0], ==, 5);
    psim_tensor_unref(o[0]);
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, f_dm, o, &err));
    g_assert_cmpint(o[0]->rank, ==, 2);
    g_assert_cmpint(o[0]->dims[0], ==, 2);
    g_assert_cmpint(o[0]->dims[1], ==, 2);
    g_assert_cmpmem(o[0]->data, o[0]->nbytes, rows, 4 * sizeof(float));
    psim_tensor_unref(o[0]);
    g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, f_cl, NULL, &err));
    for (int i = 2; i < 5; i++) {
        g_assert_true(psim_session_run(s, 0, NULL, NULL, 1, f_d1, o, &err));
        g_assert_cmpfloat(((float *)o[0]->data)[0], ==, rows[2 * i]);
        psim_tensor_unref(o[0]);
    }
    g_assert_false(psim_session_run(s, 0, NULL, NULL, 1, f_d1, o, &err));
    g_assert_nonnull(strstr(err->message, "closed, empty queue"));
    g_clear_error(&err);
    g_assert_false(psim_session_run(s, 0, NULL, NULL, 1, f_enq, NULL, &err));
    g_assert_nonnull(strstr(err->message, "closed queue"));
    psim_container_reset("t-queue");
}

/* A bounded queue blocks its producer until the consumer takes elements: a thread enqueues 50
 * elements into a queue of 3 while this one dequeues them all, in order. A shuffling queue
 * gives a permutation, the same one for the same seed. */
static gpointer produce(gpointer p)
{
    PsimQueue *q = p;
    for (int i = 0; i < 50; i++) {
        PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, NULL);
        ((int64_t *)t->data)[0] = i;
        g_assert_true(psim_queue_enqueue(q, &t, NULL));
        g_assert_cmpint(psim_queue_size(q), <=, 3);
        psim_tensor_unref(t);
    }
    return NULL;
}

static void shuffle_order(uint64_t seed, int64_t *out)
{
    PsimQueueSpec sp = {.n_components = 1, .shuffle = TRUE, .min_after_dequeue = 4, .seed = seed};
    PsimQueue *q = psim_queue_get("t-queue", "shuffle", &sp, NULL);
    for (int i = 0; i < 20; i++) {
        PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, NULL);
        ((int64_t *)t->data)[0] = i;
        g_assert_true(psim_queue_enqueue(q, &t, NULL));
        psim_tensor_unref(t);
    }
    psim_queue_close(q, FALSE);
    for (int i = 0; i < 20; i++) {
        PsimTensor *t = NULL;
        g_assert_true(psim_queue_dequeue(q, &t, NULL));
        out[i] = ((int64_t *)t->data)[0];
        psim_tensor_unref(t);
    }
    g_assert_false(psim_queue_dequeue(q, &(PsimTensor *){NULL}, NULL));
    psim_container_reset("t-queue");
}

static void test_queue_threads(void)
{
    PsimQueueSpec sp = {.n_components = 1, .capacity = 3};
    PsimQueue *q = psim_queue_get("t-queue", "bounded", &sp, NULL);
    GThread *th = g_thread_new("producer", produce, q);
    for (int i = 0; i < 50; i++) {
        PsimTensor *t = NULL;
        g_assert_true(psim_queue_dequeue(q, &t, NULL));
        g_assert_cmpint(((int64_t *)t->data)[0], ==, i);
        psim_tensor_unref(t);
    }
    g_thread_join(th);
    psim_container_reset("t-queue");
    int64_t a[20], b[20], c[20];
    shuffle_order(7, a);
    shuffle_order(7, b);
    shuffle_order(8, c);
    g_assert_cmpmem(a, sizeof a, b, sizeof b);
    g_assert_true(memcmp(a, c, sizeof a) != 0);
    int seen[20] = {0}, moved = 0;
    for (int i = 0; i < 20; i++) {
        seen[a[i]]++;
        moved += a[i] != i;
    }
    for (int i = 0; i < 20; i++)
        g_assert_cmpint(seen[i], ==, 1);
    g_assert_cmpint(moved, >, 10);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/train/variables/persist-snapshot-reset", test_variables);
    g_test_add_func("/train/variables/assign-needs-variable", test_assign_needs_variable);
    g_test_add_func("/train/optimizers/formulas", test_optimizers);
    g_test_add_func("/train/checkpoint/file", test_checkpoint_file);
    g_test_add_func("/train/queue/ops", test_queue_ops);
    g_test_add_func("/train/queue/threads-and-shuffle", test_queue_threads);
    g_test_add_func("/train/conv-grad/float32-as-float64", test_conv_grad);
    g_test_add_func("/train/step/mlp-learns", test_train_step_learns);
    g_test_add_func("/train/step/cosine-learning-rate", test_cosine_learning_rate);
    g_test_add_func("/train/step/two-devices-same-variables", test_train_step_two_devices);
    return g_test_run();
}
