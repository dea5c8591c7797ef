/* The built-in model zoo: small real models built in code so that a fresh clone runs without
 * files. Ops follow ONNX semantics (attribute names, input order); weights are real float32
 * tensors with a deterministic pseudo-random pattern (Const nodes with attr `value`, flagged as
 * parameters), and each model has one float32 Placeholder input. */
#include "graph-private.h"

#include <math.h>
#include <string.h>

typedef struct {
    PsimGraph *g;
    GError **error;
    gboolean ok;
    PsimZooShape shape; /* input [batch, channels, height, width] and classes (mlp, cnn) */
} Builder;

/* A deterministic generator per weight, seeded from its name, so that every weight has its own
 * reproducible values whatever order the graph is built in. */
static uint32_t xorshift(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static int32_t add_node(Builder *b, const char *name, const char *op, int n_in, const int32_t *in)
{
    if (!b->ok)
        return -1;
    PsimNode *v = psim_graph_node_add(b->g, name, op, b->error);
    if (!v) {
        b->ok = FALSE;
        return -1;
    }
    for (int i = 0; i < n_in; i++)
        psim_graph_node_input_add(b->g, v, (PsimPort){in[i], 0});
    /* Every op used here has one output (BatchNormalization and LayerNormalization in their
     * inference form). */
    psim_graph_node_outputs_set(b->g, v, 1);
    return v->id;
}

static PsimNode *node(Builder *b, int32_t id)
{
    return b->ok && id >= 0 ? psim_graph_node(b->g, id) : NULL;
}

/* A constant tensor node; `parameter` marks weights (resident, counted as parameter bytes). */
static int32_t add_const(Builder *b, const char *name, PsimTensor *t, gboolean parameter)
{
    int32_t id = add_node(b, name, "Const", 0, NULL);
    PsimNode *v = node(b, id);
    if (v) {
        psim_graph_node_attr_set_tensor(b->g, v, "value", t);
        psim_graph_output_value_set(b->g, v, 0, t);
        if (parameter)
            v->flags |= PSIM_NODE_PARAMETER;
        else
            v->flags |= PSIM_NODE_CONSTANT;
    }
    psim_tensor_unref(t);
    return id;
}

/* A float32 weight uniform in [center - scale, center + scale). */
static int32_t weight(Builder *b, const char *name, int32_t rank, const int64_t *dims, double center,
                      double scale)
{
    if (!b->ok)
        return -1;
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, rank, dims, b->error);
    if (!t) {
        b->ok = FALSE;
        return -1;
    }
    uint32_t s = g_str_hash(name) | 1u;
    float *p = t->data;
    for (int64_t i = 0; i < t->n_elems; i++)
        p[i] = (float)(center + scale * ((double)(xorshift(&s) >> 8) / (double)(1u << 23) - 1.0));
    return add_const(b, name, t, TRUE);
}

static int32_t scalar(Builder *b, const char *name, float value)
{
    if (!b->ok)
        return -1;
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 0, NULL, b->error);
    if (!t) {
        b->ok = FALSE;
        return -1;
    }
    ((float *)t->data)[0] = value;
    return add_const(b, name, t, FALSE);
}

static int32_t int64s(Builder *b, const char *name, int32_t n, const int64_t *v)
{
    if (!b->ok)
        return -1;
    int64_t dims[1] = {n};
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, dims, b->error);
    if (!t) {
        b->ok = FALSE;
        return -1;
    }
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return add_const(b, name, t, FALSE);
}

static int32_t input(Builder *b, const char *name, int32_t rank, const int64_t *dims)
{
    int32_t id = add_node(b, name, "Placeholder", 0, NULL);
    PsimNode *v = node(b, id);
    if (v) {
        psim_graph_output_set(b->g, v, 0, PSIM_DTYPE_FLOAT32, rank, dims);
        psim_graph_input_add(b->g, id);
    }
    return id;
}

static int32_t op1(Builder *b, const char *name, const char *op, int32_t x)
{
    return add_node(b, name, op, 1, &x);
}

static int32_t op2(Builder *b, const char *name, const char *op, int32_t x, int32_t y)
{
    int32_t in[2] = {x, y};
    return add_node(b, name, op, 2, in);
}

static void set_ints(Builder *b, int32_t id, const char *attr, int32_t n, const int64_t *v)
{
    PsimNode *nd = node(b, id);
    if (nd)
        psim_graph_node_attr_set_ints(b->g, nd, attr, n, v);
}

static void set_int(Builder *b, int32_t id, const char *attr, int64_t v)
{
    PsimNode *nd = node(b, id);
    if (nd)
        psim_graph_node_attr_set_int(b->g, nd, attr, v);
}

static void set_float(Builder *b, int32_t id, const char *attr, double v)
{
    PsimNode *nd = node(b, id);
    if (nd)
        psim_graph_node_attr_set_float(b->g, nd, attr, v);
}

/* ---- mlp: 784 -> 256 -> 128 -> 10 at batch 64 ---- */

static int32_t dense_gemm(Builder *b, const char *scope, int32_t x, int64_t in, int64_t out)
{
    g_autofree char *wn = g_strconcat(scope, "/W", NULL), *bn = g_strconcat(scope, "/B", NULL),
                    *gn = g_strconcat(scope, "/Gemm", NULL);
    int64_t wd[2] = {out, in}, bd[1] = {out};
    int32_t in3[3] = {x, weight(b, wn, 2, wd, 0, 1 / sqrt((double)in)), weight(b, bn, 1, bd, 0, 0.1)};
    int32_t y = add_node(b, gn, "Gemm", 3, in3);
    set_int(b, y, "transB", 1);
    return y;
}

static void build_mlp(Builder *b)
{
    const PsimZooShape *sh = &b->shape;
    int64_t features = sh->channels * sh->height * sh->width;
    int64_t xd[2] = {sh->batch, features};
    int32_t x = input(b, "input", 2, xd);
    int32_t h = op1(b, "fc1/Relu", "Relu", dense_gemm(b, "fc1", x, features, 256));
    /* The second layer as MatMul + Add, as TensorFlow and PyTorch exports write it. */
    int64_t wd[2] = {256, 128}, bd[1] = {128};
    int32_t mm = op2(b, "fc2/MatMul", "MatMul", h, weight(b, "fc2/W", 2, wd, 0, 1 / 16.0));
    int32_t add = op2(b, "fc2/Add", "Add", mm, weight(b, "fc2/B", 1, bd, 0, 0.1));
    h = op1(b, "fc2/Relu", "Relu", add);
    int32_t logits = dense_gemm(b, "fc3", h, 128, sh->classes);
    int32_t y = op1(b, "output", "Softmax", logits);
    set_int(b, y, "axis", -1);
    if (b->ok)
        psim_graph_output_add(b->g, (PsimPort){y, 0});
}

/* ---- cnn: a small ResNet at 1x3x64x64 ---- */

static int32_t conv_bn(Builder *b, const char *scope, int32_t x, int64_t cin, int64_t cout, int64_t k,
                       int64_t stride, gboolean relu)
{
    g_autofree char *wn = g_strconcat(scope, "/W", NULL), *cn = g_strconcat(scope, "/Conv", NULL),
                    *sn = g_strconcat(scope, "/bn/scale", NULL), *bn = g_strconcat(scope, "/bn/B", NULL),
                    *mn = g_strconcat(scope, "/bn/mean", NULL), *vn = g_strconcat(scope, "/bn/var", NULL),
                    *nn = g_strconcat(scope, "/BatchNormalization", NULL),
                    *rn = g_strconcat(scope, "/Relu", NULL);
    int64_t wd[4] = {cout, cin, k, k}, cd[1] = {cout};
    int32_t w = weight(b, wn, 4, wd, 0, 1 / sqrt((double)(cin * k * k)));
    int32_t conv = op2(b, cn, "Conv", x, w);
    int64_t ks[2] = {k, k}, st[2] = {stride, stride}, pads[4] = {k / 2, k / 2, k / 2, k / 2};
    set_ints(b, conv, "kernel_shape", 2, ks);
    set_ints(b, conv, "strides", 2, st);
    set_ints(b, conv, "pads", 4, pads);
    int32_t bn_in[5] = {conv, weight(b, sn, 1, cd, 1, 0.1), weight(b, bn, 1, cd, 0, 0.1),
                        weight(b, mn, 1, cd, 0, 0.1), weight(b, vn, 1, cd, 1, 0.1)};
    int32_t y = add_node(b, nn, "BatchNormalization", 5, bn_in);
    set_float(b, y, "epsilon", 1e-5);
    return relu ? op1(b, rn, "Relu", y) : y;
}

static int32_t res_block(Builder *b, const char *scope, int32_t x, int64_t cin, int64_t cout,
                         int64_t stride)
{
    g_autofree char *s1 = g_strconcat(scope, "/conv1", NULL), *s2 = g_strconcat(scope, "/conv2", NULL),
                    *sd = g_strconcat(scope, "/shortcut", NULL), *an = g_strconcat(scope, "/Add", NULL),
                    *rn = g_strconcat(scope, "/Relu", NULL);
    int32_t h = conv_bn(b, s1, x, cin, cout, 3, stride, TRUE);
    h = conv_bn(b, s2, h, cout, cout, 3, 1, FALSE);
    int32_t skip = stride != 1 || cin != cout ? conv_bn(b, sd, x, cin, cout, 1, stride, FALSE) : x;
    return op1(b, rn, "Relu", op2(b, an, "Add", h, skip));
}

static void build_cnn(Builder *b)
{
    const PsimZooShape *sh = &b->shape;
    int64_t xd[4] = {sh->batch, sh->channels, sh->height, sh->width};
    int32_t x = input(b, "input", 4, xd);
    int32_t h = conv_bn(b, "stem", x, sh->channels, 16, 3, 1, TRUE);
    h = op1(b, "stem/MaxPool", "MaxPool", h);
    int64_t ks[2] = {2, 2};
    set_ints(b, h, "kernel_shape", 2, ks);
    set_ints(b, h, "strides", 2, ks);
    h = res_block(b, "block1", h, 16, 16, 1);
    h = res_block(b, "block2", h, 16, 32, 2);
    h = res_block(b, "block3", h, 32, 64, 2);
    h = op1(b, "pool", "GlobalAveragePool", h);
    h = op1(b, "flatten", "Flatten", h);
    set_int(b, h, "axis", 1);
    h = dense_gemm(b, "fc", h, 64, b->shape.classes);
    if (b->ok)
        psim_graph_output_add(b->g, (PsimPort){h, 0});
}

/* ---- transformer: two pre-norm encoder blocks, batch 2, 16 tokens, width 64, 4 heads ---- */

enum { TB = 2, TS = 16, TD = 64, TH = 4, TDH = TD / TH, TF = 256 };

static int32_t linear(Builder *b, const char *scope, int32_t x, int64_t in, int64_t out)
{
    g_autofree char *wn = g_strconcat(scope, "/W", NULL), *bn = g_strconcat(scope, "/B", NULL),
                    *mn = g_strconcat(scope, "/MatMul", NULL), *an = g_strconcat(scope, "/Add", NULL);
    int64_t wd[2] = {in, out}, bd[1] = {out};
    int32_t mm = op2(b, mn, "MatMul", x, weight(b, wn, 2, wd, 0, 1 / sqrt((double)in)));
    return op2(b, an, "Add", mm, weight(b, bn, 1, bd, 0, 0.02));
}

static int32_t layer_norm(Builder *b, const char *scope, int32_t x)
{
    g_autofree char *gn = g_strconcat(scope, "/gamma", NULL), *bn = g_strconcat(scope, "/beta", NULL),
                    *ln = g_strconcat(scope, "/LayerNormalization", NULL);
    int64_t d[1] = {TD};
    int32_t in[3] = {x, weight(b, gn, 1, d, 1, 0.05), weight(b, bn, 1, d, 0, 0.05)};
    int32_t y = add_node(b, ln, "LayerNormalization", 3, in);
    set_int(b, y, "axis", -1);
    set_float(b, y, "epsilon", 1e-5);
    return y;
}

/* [B, S, D] -> [B, H, S, Dh] (perm 0,2,1,3) or, for keys, [B, H, Dh, S] (perm 0,2,3,1). */
static int32_t split_heads(Builder *b, const char *scope, int32_t x, int32_t shape, gboolean keys)
{
    g_autofree char *rn = g_strconcat(scope, "/Reshape", NULL), *tn = g_strconcat(scope, "/Transpose", NULL);
    int32_t r = op2(b, rn, "Reshape", x, shape);
    int32_t t = op1(b, tn, "Transpose", r);
    int64_t perm_q[4] = {0, 2, 1, 3}, perm_k[4] = {0, 2, 3, 1};
    set_ints(b, t, "perm", 4, keys ? perm_k : perm_q);
    return t;
}

static int32_t encoder(Builder *b, const char *scope, int32_t x, int32_t heads_shape, int32_t model_shape,
                       int32_t attn_scale, int32_t sqrt2, int32_t one, int32_t half)
{
#define S(suffix) g_autofree char *suffix = g_strconcat(scope, "/" #suffix, NULL)
    S(ln1); S(wq); S(wk); S(wv); S(qh); S(kh); S(vh); S(scores); S(scaled); S(probs); S(ctx);
    S(ctx_t); S(ctx_r); S(out); S(res1); S(ln2); S(ff1); S(gelu_div); S(gelu_erf); S(gelu_add);
    S(gelu_mul); S(gelu); S(ff2); S(res2);
#undef S
    int32_t h = layer_norm(b, ln1, x);
    int32_t q = split_heads(b, qh, linear(b, wq, h, TD, TD), heads_shape, FALSE);
    int32_t k = split_heads(b, kh, linear(b, wk, h, TD, TD), heads_shape, TRUE);
    int32_t v = split_heads(b, vh, linear(b, wv, h, TD, TD), heads_shape, FALSE);
    int32_t s = op2(b, scaled, "Mul", op2(b, scores, "MatMul", q, k), attn_scale);
    int32_t p = op1(b, probs, "Softmax", s);
    set_int(b, p, "axis", -1);
    int32_t c = op1(b, ctx_t, "Transpose", op2(b, ctx, "MatMul", p, v));
    int64_t perm[4] = {0, 2, 1, 3};
    set_ints(b, c, "perm", 4, perm);
    c = op2(b, ctx_r, "Reshape", c, model_shape);
    int32_t x1 = op2(b, res1, "Add", x, linear(b, out, c, TD, TD));
    h = layer_norm(b, ln2, x1);
    int32_t f = linear(b, ff1, h, TD, TF);
    /* GELU(f) = 0.5 * f * (1 + erf(f / sqrt(2))). */
    int32_t e = op1(b, gelu_erf, "Erf", op2(b, gelu_div, "Div", f, sqrt2));
    int32_t gl = op2(b, gelu, "Mul", op2(b, gelu_mul, "Mul", f, op2(b, gelu_add, "Add", e, one)), half);
    return op2(b, res2, "Add", x1, linear(b, ff2, gl, TF, TD));
}

static void build_transformer(Builder *b)
{
    int64_t xd[3] = {TB, TS, TD};
    int32_t x = input(b, "input", 3, xd);
    int64_t hs[4] = {TB, TS, TH, TDH}, ms[3] = {TB, TS, TD};
    int32_t heads_shape = int64s(b, "const/heads_shape", 4, hs);
    int32_t model_shape = int64s(b, "const/model_shape", 3, ms);
    int32_t attn_scale = scalar(b, "const/attn_scale", (float)(1 / sqrt((double)TDH)));
    int32_t sqrt2 = scalar(b, "const/sqrt2", (float)sqrt(2.0));
    int32_t one = scalar(b, "const/one", 1.0f);
    int32_t half = scalar(b, "const/half", 0.5f);
    int32_t h = encoder(b, "enc0", x, heads_shape, model_shape, attn_scale, sqrt2, one, half);
    h = encoder(b, "enc1", h, heads_shape, model_shape, attn_scale, sqrt2, one, half);
    h = layer_norm(b, "final_ln", h);
    if (b->ok)
        psim_graph_output_add(b->g, (PsimPort){h, 0});
}

typedef struct {
    const char *name;
    const char *description;
    void (*build)(Builder *b);
    PsimZooShape shape; /* the default; all zero: the model takes no other */
} ZooModel;

static const ZooModel models[] = {
    {"mlp", "3-layer perceptron 784-256-128-10, batch 64 (Gemm, MatMul+Add, Relu, Softmax)",
     build_mlp, {64, 1, 28, 28, 10}},
    {"cnn", "small ResNet at 1x3x64x64: Conv/BatchNormalization/Relu, MaxPool, 3 residual blocks, "
            "GlobalAveragePool, Gemm", build_cnn, {1, 3, 64, 64, 10}},
    {"transformer", "two pre-norm encoder blocks, batch 2 x 16 tokens x 64, 4 heads, Erf GELU",
     build_transformer},
};

const char *const *psim_zoo_list(int32_t *n)
{
    static const char *const names[] = {"mlp", "cnn", "transformer", NULL};
    G_STATIC_ASSERT(G_N_ELEMENTS(names) == G_N_ELEMENTS(models) + 1);
    *n = (int32_t)G_N_ELEMENTS(models);
    return names;
}

const char *psim_zoo_description(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(models); i++)
        if (!strcmp(models[i].name, name))
            return models[i].description;
    return NULL;
}

gboolean psim_zoo_shape(const char *name, PsimZooShape *out)
{
    for (size_t i = 0; i < G_N_ELEMENTS(models); i++)
        if (!strcmp(models[i].name, name) && models[i].shape.batch) {
            *out = models[i].shape;
            return TRUE;
        }
    return FALSE;
}

PsimGraph *psim_zoo_make(const char *name, GError **error)
{
    return psim_zoo_make_shaped(name, NULL, error);
}

PsimGraph *psim_zoo_make_shaped(const char *name, const PsimZooShape *shape, GError **error)
{
    g_return_val_if_fail(name != NULL, NULL);
    const ZooModel *m = NULL;
    for (size_t i = 0; i < G_N_ELEMENTS(models); i++)
        if (!strcmp(models[i].name, name))
            m = &models[i];
    if (!m) {
        GString *known = g_string_new(NULL);
        for (size_t i = 0; i < G_N_ELEMENTS(models); i++)
            g_string_append_printf(known, "%s%s", i ? ", " : "", models[i].name);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "zoo:%s: no such built-in model (known: %s)",
                    name, known->str);
        g_string_free(known, TRUE);
        return NULL;
    }
    g_autoptr(PsimGraph) g = psim_graph_new(m->name);
    /* A reshaped model is not the one "zoo:NAME" names (plans refer to graphs by source). */
    g_autofree char *source = shape ? NULL : g_strconcat("zoo:", m->name, NULL);
    if (source)
        psim_graph_set_source(g, source);
    Builder b = {.g = g, .error = error, .ok = TRUE, .shape = m->shape};
    if (shape) {
        if (!m->shape.batch) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "zoo:%s: its input shape is fixed",
                        m->name);
            return NULL;
        }
        if (shape->batch < 1 || shape->channels < 1 || shape->height < 1 || shape->width < 1 ||
            shape->classes < 2 || shape->batch > 65536 || shape->channels > 4096 ||
            shape->height > 4096 || shape->width > 4096 || shape->classes > 1000000) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "zoo:%s: input %lldx%lldx%lldx%lld with %lld classes is out of range",
                        m->name, (long long)shape->batch, (long long)shape->channels,
                        (long long)shape->height, (long long)shape->width,
                        (long long)shape->classes);
            return NULL;
        }
        b.shape = *shape;
    }
    m->build(&b);
    if (!b.ok || !psim_graph_finalize(g, error) || psim_graph_fold_constants(g, error) < 0 ||
        !psim_graph_infer_shapes(g, error))
        return NULL;
    return g_steal_pointer(&g);
}
