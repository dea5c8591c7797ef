/* The gradient pass (graph/grad.c) against central finite differences in float64: for each
 * covered op, a small graph y = OP(inputs), loss = sum(y * R) with R fixed and irregular (so that
 * every element of y matters differently), the gradient graph run by the executor, and every
 * element of every input perturbed by +-h through the same executor. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/formats.h"
#include "placesim/graph.h"

/* When set, each case is also written here (graph JSON, feeds, gradients) for PyTorch. */
static const char *dump_dir;
static int n_dumped;

static void put_tensor(GString *s, const PsimTensor *t)
{
    g_string_append(s, "{\"shape\": [");
    for (int32_t i = 0; i < t->rank; i++)
        g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? ", " : "", t->dims[i]);
    g_string_append(s, "], \"data\": [");
    for (int64_t i = 0; i < t->n_elems; i++)
        g_string_append_printf(s, "%s%.17g", i ? ", " : "", psim_tensor_get_f64(t, i));
    g_string_append(s, "]}");
}

typedef struct {
    PsimGraph *g;
    int n_in;
    char names[4][16];
    PsimTensor *vals[4];
} Case;

static uint32_t seed = 12345;
static double rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0;
}

static PsimTensor *t64(int32_t rank, const int64_t *dims, double lo_abs)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT64, rank, dims, NULL);
    for (int64_t i = 0; i < t->n_elems; i++) {
        double v = rnd();
        /* away from 0 where the op has a kink or a pole (Relu, Log, Div) */
        if (fabs(v) < lo_abs)
            v = v < 0 ? -lo_abs - 0.1 : lo_abs + 0.1;
        ((double *)t->data)[i] = v;
    }
    return t;
}

/* A float64 Placeholder input. */
static PsimNode *input(Case *c, const char *name, int32_t rank, const int64_t *dims, double lo_abs)
{
    PsimNode *v = psim_graph_node_add(c->g, name, "Placeholder", NULL);
    psim_graph_node_outputs_set(c->g, v, 1);
    psim_graph_output_set(c->g, v, 0, PSIM_DTYPE_FLOAT64, rank, dims);
    psim_graph_input_add(c->g, v->id);
    g_strlcpy(c->names[c->n_in], name, sizeof c->names[0]);
    c->vals[c->n_in++] = t64(rank, dims, lo_abs);
    return v;
}

static PsimNode *op(Case *c, const char *name, const char *opn, int n, const int32_t *in)
{
    PsimNode *v = psim_graph_node_add(c->g, name, opn, NULL);
    for (int i = 0; i < n; i++)
        psim_graph_node_input_add(c->g, v, (PsimPort){in[i], 0});
    psim_graph_node_outputs_set(c->g, v, 1);
    return v;
}

/* loss = ReduceSum(y * R), R a fixed float64 constant of y's shape. */
static int32_t weighted_sum(Case *c, int32_t y)
{
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(c->g, &err) && psim_graph_infer_shapes(c->g, &err));
    const PsimOutput *o = &psim_graph_node(c->g, y)->outputs[0];
    PsimNode *r = psim_graph_node_add(c->g, "R", "Const", NULL);
    psim_graph_node_outputs_set(c->g, r, 1);
    g_autoptr(PsimTensor) rt = t64(o->rank, o->dims, 0.05);
    psim_graph_node_attr_set_tensor(c->g, r, "value", rt);
    psim_graph_output_value_set(c->g, r, 0, rt);
    PsimNode *m = op(c, "yR", "Mul", 2, (int32_t[]){y, r->id});
    PsimNode *l = op(c, "loss", "ReduceSum", 1, (int32_t[]){m->id});
    psim_graph_node_attr_set_int(c->g, l, "keepdims", 0);
    return l->id;
}

static PsimCluster *cluster;

/* Runs fetches in session s with the case's inputs (vals, one of them possibly changed). */
static void run(PsimSession *s, Case *c, int n_fetch, const char *const *fetch, PsimTensor **out)
{
    g_autoptr(GError) err = NULL;
    const char *feeds[4];
    for (int i = 0; i < c->n_in; i++)
        feeds[i] = c->names[i];
    if (!psim_session_run(s, c->n_in, feeds, c->vals, n_fetch, fetch, out, &err))
        g_error("run: %s", err->message);
}

static double loss_at(PsimSession *s, Case *c)
{
    const char *f[] = {"loss"};
    PsimTensor *l = NULL;
    run(s, c, 1, f, &l);
    double v = psim_tensor_get_f64(l, 0);
    psim_tensor_unref(l);
    return v;
}

/* The case's loss differentiated by every input: each gradient element against central
 * differences to 1e-6 relative (plus 1e-8 absolute). */
static void check(Case *c, int32_t loss)
{
    g_autoptr(GError) err = NULL;
    PsimPort wrt[4], grads[4];
    for (int i = 0; i < c->n_in; i++)
        wrt[i] = (PsimPort){psim_graph_node_find(c->g, c->names[i])->id, 0};
    g_autoptr(PsimGraph) gg = psim_graph_gradients(c->g, (PsimPort){loss, 0}, c->n_in, wrt, grads, &err);
    g_assert_no_error(err);
    g_assert_nonnull(gg);
    char *names[4] = {0};
    const char *fetch[4];
    for (int i = 0; i < c->n_in; i++)
        fetch[i] = names[i] = psim_port_to_string(gg, grads[i]);
    PsimTensor *out[4] = {0};
    g_autoptr(PsimSession) gs = psim_session_new(gg, cluster, NULL, NULL, &err);
    g_autoptr(PsimSession) fs = psim_session_new(c->g, cluster, NULL, NULL, &err);
    g_assert_no_error(err);
    run(gs, c, c->n_in, fetch, out);
    if (dump_dir) {
        g_autoptr(GString) s = g_string_new("{\"graph\": ");
        g_autofree char *gj = psim_export_json(c->g, NULL);
        g_string_append(s, gj);
        g_string_append(s, ", \"loss\": ");
        g_string_append_printf(s, "\"%s\"", psim_graph_node(c->g, loss)->name);
        for (int pass = 0; pass < 2; pass++) {
            g_string_append(s, pass ? ", \"grads\": {" : ", \"feeds\": {");
            for (int i = 0; i < c->n_in; i++) {
                g_string_append_printf(s, "%s\"%s\": ", i ? ", " : "", c->names[i]);
                put_tensor(s, pass ? out[i] : c->vals[i]);
            }
            g_string_append_c(s, '}');
        }
        g_string_append(s, "}\n");
        g_autofree char *path = g_strdup_printf("%s/case-%03d.json", dump_dir, n_dumped++);
        g_assert_true(g_file_set_contents(path, s->str, (gssize)s->len, NULL));
    }
    const double h = 1e-6;
    for (int i = 0; i < c->n_in; i++) {
        g_assert_cmpint(out[i]->n_elems, ==, c->vals[i]->n_elems);
        g_assert_cmpint(out[i]->dtype, ==, PSIM_DTYPE_FLOAT64);
        double *x = c->vals[i]->data;
        for (int64_t k = 0; k < c->vals[i]->n_elems; k++) {
            double keep = x[k];
            x[k] = keep + h;
            double up = loss_at(fs, c);
            x[k] = keep - h;
            double down = loss_at(fs, c);
            x[k] = keep;
            double fd = (up - down) / (2 * h), an = ((double *)out[i]->data)[k];
            if (fabs(an - fd) > 1e-8 + 1e-6 * fabs(fd))
                g_error("%s: d loss / d %s[%" G_GINT64_FORMAT "]: gradient %.12g, central difference %.12g",
                        psim_graph_name(c->g), c->names[i], k, an, fd);
        }
        psim_tensor_unref(out[i]);
        g_free(names[i]);
    }
    for (int i = 0; i < c->n_in; i++)
        psim_tensor_unref(c->vals[i]);
    g_clear_pointer(&fs, psim_session_free); /* before the graph it runs */
    psim_graph_free(c->g);
}

static Case start(const char *name)
{
    Case c = {.g = psim_graph_new(name)};
    return c;
}

static void test_binary(void)
{
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
        /* a [2,3,4] with b [3,1] broadcast, and b [2,3,4] with a scalar */
        Case c = start(ops[i]);
        PsimNode *a = input(&c, "a", 3, (int64_t[]){2, 3, 4}, 0.3);
        PsimNode *b = input(&c, "b", 2, (int64_t[]){3, 1}, 0.3);
        PsimNode *y = op(&c, "y", ops[i], 2, (int32_t[]){a->id, b->id});
        check(&c, weighted_sum(&c, y->id));
        Case c2 = start(ops[i]);
        PsimNode *s = input(&c2, "s", 0, NULL, 0.3);
        PsimNode *b2 = input(&c2, "b", 3, (int64_t[]){2, 3, 4}, 0.3);
        PsimNode *y2 = op(&c2, "y", ops[i], 2, (int32_t[]){b2->id, s->id});
        check(&c2, weighted_sum(&c2, y2->id));
    }
}

static void test_unary(void)
{
    const char *ops[] = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Identity"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) {
        Case c = start(ops[i]);
        PsimNode *x = input(&c, "x", 2, (int64_t[]){3, 5}, 0.2);
        int32_t in = x->id;
        if (!strcmp(ops[i], "Log") || !strcmp(ops[i], "Sqrt")) /* positive inputs */
            in = op(&c, "xx", "Mul", 2, (int32_t[]){x->id, x->id})->id;
        PsimNode *y = op(&c, "y", ops[i], 1, &in);
        check(&c, weighted_sum(&c, y->id));
    }
}

static void test_matmul_gemm(void)
{
    Case c = start("MatMul");
    PsimNode *a = input(&c, "a", 2, (int64_t[]){3, 4}, 0);
    PsimNode *b = input(&c, "b", 2, (int64_t[]){4, 5}, 0);
    PsimNode *y = op(&c, "y", "MatMul", 2, (int32_t[]){a->id, b->id});
    check(&c, weighted_sum(&c, y->id));
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            Case g = start("Gemm");
            PsimNode *ga = input(&g, "a", 2, ta ? (int64_t[]){4, 3} : (int64_t[]){3, 4}, 0);
            PsimNode *gb = input(&g, "b", 2, tb ? (int64_t[]){5, 4} : (int64_t[]){4, 5}, 0);
            PsimNode *gc = input(&g, "c", 1, (int64_t[]){5}, 0);
            PsimNode *gy = op(&g, "y", "Gemm", 3, (int32_t[]){ga->id, gb->id, gc->id});
            psim_graph_node_attr_set_int(g.g, gy, "transA", ta);
            psim_graph_node_attr_set_int(g.g, gy, "transB", tb);
            psim_graph_node_attr_set_float(g.g, gy, "alpha", 0.7);
            psim_graph_node_attr_set_float(g.g, gy, "beta", 1.3);
            check(&g, weighted_sum(&g, gy->id));
        }
}

static void test_shape_ops(void)
{
    Case c = start("Transpose");
    PsimNode *x = input(&c, "x", 3, (int64_t[]){2, 3, 4}, 0);
    PsimNode *t = op(&c, "t", "Transpose", 1, (int32_t[]){x->id});
    psim_graph_node_attr_set_ints(c.g, t, "perm", 3, (int64_t[]){1, 2, 0});
    PsimNode *f = op(&c, "f", "Flatten", 1, (int32_t[]){t->id});
    check(&c, weighted_sum(&c, f->id));
    const char *red[] = {"ReduceSum", "ReduceMean"};
    for (int i = 0; i < 2; i++)
        for (int keep = 0; keep < 2; keep++) {
            Case r = start(red[i]);
            PsimNode *rx = input(&r, "x", 3, (int64_t[]){2, 3, 4}, 0);
            PsimNode *ry = op(&r, "y", red[i], 1, (int32_t[]){rx->id});
            psim_graph_node_attr_set_ints(r.g, ry, "axes", 2, (int64_t[]){0, -1});
            psim_graph_node_attr_set_int(r.g, ry, "keepdims", keep);
            check(&r, weighted_sum(&r, ry->id));
        }
}

/* A two-layer MLP with a softmax cross-entropy loss: the gradients of its weights and biases,
 * and a tensor used twice (x feeds both layers' inputs through a skip). */
static void test_mlp_loss(void)
{
    Case c = start("mlp");
    PsimNode *x = input(&c, "x", 2, (int64_t[]){4, 6}, 0);
    PsimNode *w1 = input(&c, "w1", 2, (int64_t[]){6, 5}, 0);
    PsimNode *b1 = input(&c, "b1", 1, (int64_t[]){5}, 0);
    PsimNode *w2 = input(&c, "w2", 2, (int64_t[]){5, 3}, 0);
    PsimNode *h = op(&c, "h", "Gemm", 3, (int32_t[]){x->id, w1->id, b1->id});
    PsimNode *r = op(&c, "r", "Relu", 1, (int32_t[]){h->id});
    PsimNode *s = op(&c, "s", "Sigmoid", 1, (int32_t[]){h->id});
    PsimNode *hs = op(&c, "hs", "Add", 2, (int32_t[]){r->id, s->id});
    PsimNode *z = op(&c, "z", "MatMul", 2, (int32_t[]){hs->id, w2->id});
    PsimNode *lab = psim_graph_node_add(c.g, "labels", "Const", NULL);
    psim_graph_node_outputs_set(c.g, lab, 1);
    g_autoptr(PsimTensor) lt = psim_tensor_new(PSIM_DTYPE_INT64, 1, (int64_t[]){4}, NULL);
    int64_t lv[4] = {2, 0, 1, 2};
    memcpy(lt->data, lv, sizeof lv);
    psim_graph_node_attr_set_tensor(c.g, lab, "value", lt);
    psim_graph_output_value_set(c.g, lab, 0, lt);
    PsimNode *loss = op(&c, "loss", "SoftmaxCrossEntropyLoss", 2, (int32_t[]){z->id, lab->id});
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(c.g, &err) && psim_graph_infer_shapes(c.g, &err));
    check(&c, loss->id);
    /* And the softmax itself, along the last axis. */
    Case m = start("Softmax");
    PsimNode *mx = input(&m, "x", 2, (int64_t[]){3, 4}, 0);
    PsimNode *my = op(&m, "y", "Softmax", 1, (int32_t[]){mx->id});
    psim_graph_node_attr_set_int(m.g, my, "axis", -1);
    check(&m, weighted_sum(&m, my->id));
}

/* Split and Slice on their own, then recurrent cells written in primitive ops, as TensorFlow's
 * BasicLSTMCell and GRUCell are: an LSTM cell (gates from one MatMul of [x, h] split in four)
 * and a GRU cell (gates sliced out of the pre-activations), by their inputs, state and weights. */
static void test_rnn_cells(void)
{
    Case sp = start("Split");
    PsimNode *sx = input(&sp, "x", 2, (int64_t[]){3, 7}, 0);
    PsimNode *sv = op(&sp, "y", "Split", 1, (int32_t[]){sx->id});
    psim_graph_node_outputs_set(sp.g, sv, 3);
    psim_graph_node_attr_set_int(sp.g, sv, "axis", 1);
    psim_graph_node_attr_set_ints(sp.g, sv, "split", 3, (int64_t[]){2, 4, 1});
    /* Outputs 0 and 2 reach the loss, output 1 does not: its gradient is zeros. */
    PsimNode *sm = psim_graph_node_add(sp.g, "m", "Mul", NULL);
    psim_graph_node_input_add(sp.g, sm, (PsimPort){sv->id, 0});
    psim_graph_node_input_add(sp.g, sm, (PsimPort){sv->id, 2});
    psim_graph_node_outputs_set(sp.g, sm, 1);
    check(&sp, weighted_sum(&sp, sm->id));

    Case sl = start("Slice");
    PsimNode *lx = input(&sl, "x", 3, (int64_t[]){2, 5, 6}, 0);
    PsimNode *lv = psim_graph_node_add(sl.g, "y", "Slice", NULL);
    psim_graph_node_input_add(sl.g, lv, (PsimPort){lx->id, 0});
    psim_graph_node_attr_set_ints(sl.g, lv, "starts", 2, (int64_t[]){1, -4});
    psim_graph_node_attr_set_ints(sl.g, lv, "ends", 2, (int64_t[]){4, 100});
    psim_graph_node_attr_set_ints(sl.g, lv, "axes", 2, (int64_t[]){1, 2});
    psim_graph_node_outputs_set(sl.g, lv, 1);
    check(&sl, weighted_sum(&sl, lv->id));

    /* LSTM: z = [x, h] W; i, f, o, g = split(z); c' = s(f) c + s(i) tanh(g); h' = s(o) tanh(c'). */
    Case l = start("lstm-cell");
    int64_t B = 2, I = 3, H = 4;
    PsimNode *x = input(&l, "x", 2, (int64_t[]){B, I}, 0);
    PsimNode *h = input(&l, "h", 2, (int64_t[]){B, H}, 0);
    PsimNode *c = input(&l, "c", 2, (int64_t[]){B, H}, 0);
    PsimNode *w = input(&l, "w", 2, (int64_t[]){I + H, 4 * H}, 0);
    PsimNode *xh = op(&l, "xh", "Concat", 2, (int32_t[]){x->id, h->id});
    psim_graph_node_attr_set_int(l.g, xh, "axis", 1);
    PsimNode *z = op(&l, "z", "MatMul", 2, (int32_t[]){xh->id, w->id});
    PsimNode *gates = op(&l, "gates", "Split", 1, (int32_t[]){z->id});
    psim_graph_node_outputs_set(l.g, gates, 4);
    psim_graph_node_attr_set_int(l.g, gates, "axis", 1);
    const char *gn[4] = {"i", "f", "o", "g"};
    int32_t g4[4];
    for (int k = 0; k < 4; k++) {
        PsimNode *a = psim_graph_node_add(l.g, gn[k], k < 3 ? "Sigmoid" : "Tanh", NULL);
        psim_graph_node_input_add(l.g, a, (PsimPort){gates->id, k});
        psim_graph_node_outputs_set(l.g, a, 1);
        g4[k] = a->id;
    }
    PsimNode *fc = op(&l, "fc", "Mul", 2, (int32_t[]){g4[1], c->id});
    PsimNode *ig = op(&l, "ig", "Mul", 2, (int32_t[]){g4[0], g4[3]});
    PsimNode *c2 = op(&l, "c2", "Add", 2, (int32_t[]){fc->id, ig->id});
    PsimNode *tc = op(&l, "tc", "Tanh", 1, (int32_t[]){c2->id});
    PsimNode *h2 = op(&l, "h2", "Mul", 2, (int32_t[]){g4[2], tc->id});
    PsimNode *out = op(&l, "out", "Add", 2, (int32_t[]){h2->id, c2->id}); /* both states count */
    check(&l, weighted_sum(&l, out->id));

    /* GRU: r, u from sigmoid of slices of [x, h] W; n = tanh(x Wn + r * (h Un));
     * h' = (1 - u) n + u h. */
    Case gr = start("gru-cell");
    PsimNode *gx = input(&gr, "x", 2, (int64_t[]){B, I}, 0);
    PsimNode *gh = input(&gr, "h", 2, (int64_t[]){B, H}, 0);
    PsimNode *gw = input(&gr, "w", 2, (int64_t[]){I + H, 2 * H}, 0);
    PsimNode *gu = input(&gr, "u", 2, (int64_t[]){I + H, H}, 0);
    PsimNode *gxh = op(&gr, "xh", "Concat", 2, (int32_t[]){gx->id, gh->id});
    psim_graph_node_attr_set_int(gr.g, gxh, "axis", 1);
    PsimNode *ru = op(&gr, "ru", "Sigmoid", 1,
                      (int32_t[]){op(&gr, "zru", "MatMul", 2, (int32_t[]){gxh->id, gw->id})->id});
    int32_t part[2];
    for (int k = 0; k < 2; k++) {
        PsimNode *sv2 = psim_graph_node_add(gr.g, k ? "u_gate" : "r_gate", "Slice", NULL);
        psim_graph_node_input_add(gr.g, sv2, (PsimPort){ru->id, 0});
        psim_graph_node_attr_set_ints(gr.g, sv2, "starts", 1, (int64_t[]){k * H});
        psim_graph_node_attr_set_ints(gr.g, sv2, "ends", 1, (int64_t[]){(k + 1) * H});
        psim_graph_node_attr_set_ints(gr.g, sv2, "axes", 1, (int64_t[]){1});
        psim_graph_node_outputs_set(gr.g, sv2, 1);
        part[k] = sv2->id;
    }
    PsimNode *rh = op(&gr, "rh", "Mul", 2, (int32_t[]){part[0], gh->id});
    PsimNode *xrh = op(&gr, "xrh", "Concat", 2, (int32_t[]){gx->id, rh->id});
    psim_graph_node_attr_set_int(gr.g, xrh, "axis", 1);
    PsimNode *nn = op(&gr, "n", "Tanh", 1,
                      (int32_t[]){op(&gr, "zn", "MatMul", 2, (int32_t[]){xrh->id, gu->id})->id});
    PsimNode *un = op(&gr, "un", "Mul", 2, (int32_t[]){part[1], nn->id});
    PsimNode *uh = op(&gr, "uh", "Mul", 2, (int32_t[]){part[1], gh->id});
    /* (1 - u) n + u h = n - u n + u h */
    PsimNode *h3 = op(&gr, "h3", "Add", 2,
                      (int32_t[]){op(&gr, "n_un", "Sub", 2, (int32_t[]){nn->id, un->id})->id, uh->id});
    check(&gr, weighted_sum(&gr, h3->id));
}

/* Conv in 2-D: strides with a remainder (output_padding), pads, dilations, a bias; a grouped one
 * (input gradient only); and a small CNN: Conv, Relu, GlobalAveragePool, Flatten, Gemm, loss. */
static void test_conv(void)
{
    static const struct {
        int64_t h, w, k, s, p, d;
    } geo[] = {{5, 5, 3, 1, 1, 1}, {6, 7, 3, 2, 1, 1}, {7, 6, 2, 1, 0, 2}, {6, 6, 3, 3, 2, 1}};
    for (size_t i = 0; i < G_N_ELEMENTS(geo); i++) {
        Case c = start("Conv");
        PsimNode *x = input(&c, "x", 4, (int64_t[]){2, 3, geo[i].h, geo[i].w}, 0);
        PsimNode *w = input(&c, "w", 4, (int64_t[]){4, 3, geo[i].k, geo[i].k}, 0);
        PsimNode *b = input(&c, "b", 1, (int64_t[]){4}, 0);
        PsimNode *y = op(&c, "y", "Conv", 3, (int32_t[]){x->id, w->id, b->id});
        psim_graph_node_attr_set_ints(c.g, y, "strides", 2, (int64_t[]){geo[i].s, geo[i].s});
        psim_graph_node_attr_set_ints(c.g, y, "dilations", 2, (int64_t[]){geo[i].d, geo[i].d});
        psim_graph_node_attr_set_ints(c.g, y, "pads", 4, (int64_t[]){geo[i].p, geo[i].p, geo[i].p, 0});
        check(&c, weighted_sum(&c, y->id));
    }
    /* grouped (2 groups, and depthwise with a stride) */
    static const int64_t grp[][4] = {{4, 6, 2, 1}, {3, 6, 3, 2}, {4, 4, 4, 2}, {5, 5, 5, 1}}; /* C, M, group, stride */
    for (size_t i = 0; i < G_N_ELEMENTS(grp); i++) {
        Case gc = start("Conv");
        PsimNode *gx = input(&gc, "x", 4, (int64_t[]){2, grp[i][0], 5, 6}, 0);
        PsimNode *gw = input(&gc, "w", 4, (int64_t[]){grp[i][1], grp[i][0] / grp[i][2], 3, 3}, 0);
        PsimNode *gy = op(&gc, "y", "Conv", 2, (int32_t[]){gx->id, gw->id});
        psim_graph_node_attr_set_int(gc.g, gy, "group", grp[i][2]);
        psim_graph_node_attr_set_ints(gc.g, gy, "strides", 2, (int64_t[]){grp[i][3], grp[i][3]});
        psim_graph_node_attr_set_ints(gc.g, gy, "pads", 4, (int64_t[]){1, 1, 1, 1});
        check(&gc, weighted_sum(&gc, gy->id));
    }
    /* a small CNN to a softmax cross-entropy loss */
    Case n = start("cnn");
    PsimNode *img = input(&n, "img", 4, (int64_t[]){3, 2, 6, 6}, 0);
    PsimNode *k = input(&n, "k", 4, (int64_t[]){4, 2, 3, 3}, 0);
    PsimNode *fw = input(&n, "fw", 2, (int64_t[]){4, 5}, 0);
    PsimNode *cv = op(&n, "cv", "Conv", 2, (int32_t[]){img->id, k->id});
    psim_graph_node_attr_set_ints(n.g, cv, "pads", 4, (int64_t[]){1, 1, 1, 1});
    PsimNode *r = op(&n, "r", "Relu", 1, (int32_t[]){cv->id});
    PsimNode *gp = op(&n, "gp", "GlobalAveragePool", 1, (int32_t[]){r->id});
    PsimNode *fl = op(&n, "fl", "Flatten", 1, (int32_t[]){gp->id});
    PsimNode *z = op(&n, "z", "Gemm", 2, (int32_t[]){fl->id, fw->id});
    PsimNode *lab = op(&n, "labels", "Const", 0, NULL);
    g_autoptr(PsimTensor) lt = psim_tensor_new(PSIM_DTYPE_INT64, 1, (int64_t[]){3}, NULL);
    int64_t lv[3] = {4, 0, 2};
    memcpy(lt->data, lv, sizeof lv);
    psim_graph_node_attr_set_tensor(n.g, lab, "value", lt);
    psim_graph_output_value_set(n.g, lab, 0, lt);
    PsimNode *loss = op(&n, "loss", "SoftmaxCrossEntropyLoss", 2, (int32_t[]){z->id, lab->id});
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(n.g, &err) && psim_graph_infer_shapes(n.g, &err));
    check(&n, loss->id);
}

/* MaxPool (windows apart and overlapping), AveragePool (with and without the pads counted),
 * Concat. */
static void test_pool_concat(void)
{
    static const struct {
        const char *op;
        int64_t k, s, p, incl;
    } pc[] = {{"MaxPool", 2, 2, 0, 0}, {"MaxPool", 3, 2, 1, 0}, {"AveragePool", 3, 2, 1, 0},
              {"AveragePool", 3, 2, 1, 1}, {"AveragePool", 2, 1, 0, 0}};
    for (size_t i = 0; i < G_N_ELEMENTS(pc); i++) {
        Case c = start(pc[i].op);
        PsimNode *x = input(&c, "x", 4, (int64_t[]){2, 3, 7, 6}, 0);
        PsimNode *y = op(&c, "y", pc[i].op, 1, (int32_t[]){x->id});
        psim_graph_node_attr_set_ints(c.g, y, "kernel_shape", 2, (int64_t[]){pc[i].k, pc[i].k});
        psim_graph_node_attr_set_ints(c.g, y, "strides", 2, (int64_t[]){pc[i].s, pc[i].s});
        psim_graph_node_attr_set_ints(c.g, y, "pads", 4, (int64_t[]){pc[i].p, pc[i].p, pc[i].p, pc[i].p});
        if (pc[i].incl)
            psim_graph_node_attr_set_int(c.g, y, "count_include_pad", 1);
        check(&c, weighted_sum(&c, y->id));
    }
    Case cl = start("Clip");
    PsimNode *cx = input(&cl, "x", 2, (int64_t[]){4, 5}, 0.05);
    PsimNode *cy = op(&cl, "y", "Clip", 1, (int32_t[]){cx->id});
    psim_graph_node_attr_set_float(cl.g, cy, "min", -0.5);
    psim_graph_node_attr_set_float(cl.g, cy, "max", 0.6);
    check(&cl, weighted_sum(&cl, cy->id));
    Case c = start("Concat");
    PsimNode *a = input(&c, "a", 3, (int64_t[]){2, 3, 4}, 0);
    PsimNode *b = input(&c, "b", 3, (int64_t[]){2, 5, 4}, 0);
    PsimNode *y = op(&c, "y", "Concat", 3, (int32_t[]){a->id, b->id, a->id});
    psim_graph_node_attr_set_int(c.g, y, "axis", 1);
    check(&c, weighted_sum(&c, y->id));
}

/* BatchNormalization in training mode (batch statistics) and in inference mode (given ones):
 * the gradients of X, scale and B; the running statistics are constants. */
static void test_batchnorm(void)
{
    for (int training = 0; training < 2; training++) {
        Case c = start(training ? "BatchNormalization-training" : "BatchNormalization");
        PsimNode *x = input(&c, "x", 4, (int64_t[]){3, 2, 3, 2}, 0);
        PsimNode *g = input(&c, "scale", 1, (int64_t[]){2}, 0.2);
        PsimNode *b = input(&c, "bias", 1, (int64_t[]){2}, 0);
        int32_t stats[2];
        for (int k = 0; k < 2; k++) {
            PsimNode *v = op(&c, k ? "var" : "mean", "Const", 0, NULL);
            g_autoptr(PsimTensor) t = t64(1, (int64_t[]){2}, 0.3);
            if (k) /* a variance is positive */
                for (int i = 0; i < 2; i++)
                    ((double *)t->data)[i] = fabs(((double *)t->data)[i]) + 0.5;
            psim_graph_node_attr_set_tensor(c.g, v, "value", t);
            psim_graph_output_value_set(c.g, v, 0, t);
            stats[k] = v->id;
        }
        PsimNode *y = op(&c, "y", "BatchNormalization", 5, (int32_t[]){x->id, g->id, b->id, stats[0], stats[1]});
        psim_graph_node_attr_set_float(c.g, y, "epsilon", 1e-3);
        psim_graph_node_attr_set_int(c.g, y, "training_mode", training);
        check(&c, weighted_sum(&c, y->id));
    }
}

/* An op without a gradient yet is an error naming the node; a non-scalar loss too. */
static void test_errors(void)
{
    Case c = start("errors");
    PsimNode *x = input(&c, "x", 2, (int64_t[]){3, 4}, 0);
    PsimNode *y = op(&c, "y", "Cos", 1, (int32_t[]){x->id});
    int32_t loss = weighted_sum(&c, y->id);
    PsimPort wrt = {x->id, 0}, grad;
    g_autoptr(GError) err = NULL;
    g_assert_null(psim_graph_gradients(c.g, (PsimPort){loss, 0}, 1, &wrt, &grad, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "'y'"));
    g_assert_nonnull(strstr(err->message, "Cos"));
    g_clear_error(&err);
    g_assert_null(psim_graph_gradients(c.g, (PsimPort){y->id, 0}, 1, &wrt, &grad, &err));
    g_assert_nonnull(strstr(err->message, "scalar"));
    psim_tensor_unref(c.vals[0]);
    psim_graph_free(c.g);
}

/* The same cases against PyTorch's autograd (float64, to 1e-4 relative): skipped when
 * /usr/bin/python3 has no torch (Debian's python3-torch). */
static void test_torch(void)
{
    const char *py = "/usr/bin/python3";
    g_autofree char *script = g_build_filename(g_getenv("PSIM_SRC") ? g_getenv("PSIM_SRC") : ".",
                                               "tests", "grad-torch.py", NULL);
    int status = -1;
    const char *probe[] = {py, "-c", "import torch", NULL};
    if (!g_file_test(py, G_FILE_TEST_IS_EXECUTABLE) ||
        !g_spawn_sync(NULL, (char **)probe, NULL, G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                      NULL, NULL, NULL, NULL, &status, NULL) ||
        !g_spawn_check_wait_status(status, NULL)) {
        g_test_skip("PyTorch (python3-torch) is not installed");
        return;
    }
    g_autofree char *dir = g_dir_make_tmp("grad-torch-XXXXXX", NULL);
    g_assert_nonnull(dir);
    dump_dir = dir;
    n_dumped = 0;
    test_binary();
    test_unary();
    test_matmul_gemm();
    test_shape_ops();
    test_mlp_loss();
    test_conv();
    test_pool_concat();
    test_batchnorm();
    test_rnn_cells();
    dump_dir = NULL;
    const char *argv[] = {py, script, dir, NULL};
    g_autofree char *out = NULL, *err = NULL;
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status, NULL));
    if (!g_spawn_check_wait_status(status, NULL))
        g_error("grad-torch.py: %s%s", out, err);
    g_assert_nonnull(strstr(out, "cases agree"));
    g_test_message("%s", out);
    for (int i = 0; i < n_dumped; i++) {
        g_autofree char *p = g_strdup_printf("%s/case-%03d.json", dir, i);
        g_unlink(p);
    }
    g_rmdir(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    cluster = psim_cluster_from_spec("local:1", NULL);
    g_test_add_func("/graph/grad/binary", test_binary);
    g_test_add_func("/graph/grad/unary", test_unary);
    g_test_add_func("/graph/grad/matmul-gemm", test_matmul_gemm);
    g_test_add_func("/graph/grad/shape-ops", test_shape_ops);
    g_test_add_func("/graph/grad/mlp-loss", test_mlp_loss);
    g_test_add_func("/graph/grad/conv", test_conv);
    g_test_add_func("/graph/grad/pool-concat", test_pool_concat);
    g_test_add_func("/graph/grad/batchnorm", test_batchnorm);
    g_test_add_func("/graph/grad/rnn-cells", test_rnn_cells);
    g_test_add_func("/graph/grad/errors", test_errors);
    g_test_add_func("/graph/grad/torch", test_torch);
    int rc = g_test_run();
    psim_cluster_free(cluster);
    return rc;
}
