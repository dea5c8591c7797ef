/* Tests of the ONNX importer and ONNX TensorProto files: the shared model-zoo graphs (counts
 * checked against an independent scan of the protobuf wire format), tensors of every dtype in
 * ONNX's own test data, hand-encoded models for each error the importer reports, and corrupted
 * files that must fail cleanly. The encoder and scanner here are deliberately independent of
 * the generated protobuf-c code under test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>

#include "onnx.pb-c.h"
#include "placesim/graph.h"
#include "placesim/exec.h"
#include "placesim/formats.h"

static const char *data_dir(void)
{
    const char *d = g_getenv("PSIM_DATA");
    return d ? d : "../shared/data";
}

/* ---- a minimal protobuf encoder ---- */

static void put_varint(GByteArray *b, uint64_t v)
{
    do {
        guint8 c = (guint8)(v & 0x7f);
        v >>= 7;
        if (v)
            c |= 0x80;
        g_byte_array_append(b, &c, 1);
    } while (v);
}

static void put_int(GByteArray *b, int field, int64_t v)
{
    put_varint(b, (uint64_t)field << 3);
    put_varint(b, (uint64_t)v);
}

static void put_bytes(GByteArray *b, int field, const void *d, size_t n)
{
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    g_byte_array_append(b, d, (guint)n);
}

static void put_str(GByteArray *b, int field, const char *s) { put_bytes(b, field, s, strlen(s)); }

/* Appends sub-message m as field `field` and frees m. */
static void put_msg(GByteArray *b, int field, GByteArray *m)
{
    put_bytes(b, field, m->data, m->len);
    g_byte_array_unref(m);
}

static GByteArray *tensor_pb(const char *name, int dtype, int rank, const int64_t *dims,
                             const void *raw, size_t raw_len)
{
    GByteArray *t = g_byte_array_new();
    for (int i = 0; i < rank; i++)
        put_int(t, 1, dims[i]);
    put_int(t, 2, dtype);
    if (name)
        put_str(t, 8, name);
    if (raw)
        put_bytes(t, 9, raw, raw_len);
    return t;
}

/* A ValueInfoProto for a tensor; dims < 0 become the symbolic dimension "N". */
static GByteArray *value_info(const char *name, int elem_type, int rank, const int64_t *dims)
{
    GByteArray *shape = g_byte_array_new();
    for (int i = 0; i < rank; i++) {
        GByteArray *d = g_byte_array_new();
        if (dims[i] == INT64_MIN)
            put_int(d, 1, -7);
        else if (dims[i] < 0)
            put_str(d, 2, "N");
        else
            put_int(d, 1, dims[i]);
        put_msg(shape, 1, d);
    }
    GByteArray *tt = g_byte_array_new();
    put_int(tt, 1, elem_type);
    put_msg(tt, 2, shape);
    GByteArray *type = g_byte_array_new();
    put_msg(type, 1, tt);
    GByteArray *vi = g_byte_array_new();
    put_str(vi, 1, name);
    put_msg(vi, 2, type);
    return vi;
}

/* A NodeProto; ins and outs are comma-separated tensor names (empty entries allowed). */
static GByteArray *node_pb(const char *name, const char *op, const char *ins, const char *outs)
{
    GByteArray *n = g_byte_array_new();
    g_auto(GStrv) iv = g_strsplit(ins, ",", -1);
    g_auto(GStrv) ov = g_strsplit(outs, ",", -1);
    for (int i = 0; *ins && iv[i]; i++)
        put_str(n, 1, iv[i]);
    for (int i = 0; *outs && ov[i]; i++)
        put_str(n, 2, ov[i]);
    if (name)
        put_str(n, 3, name);
    put_str(n, 4, op);
    return n;
}

static GByteArray *attr_ints(const char *name, int n, const int64_t *v)
{
    GByteArray *a = g_byte_array_new();
    put_str(a, 1, name);
    for (int i = 0; i < n; i++)
        put_int(a, 8, v[i]);
    put_int(a, 20, 7);
    return a;
}

static GByteArray *model_pb(GByteArray *graph, int opset)
{
    GByteArray *m = g_byte_array_new();
    put_int(m, 1, 8);
    put_str(m, 2, "placesim-test");
    put_msg(m, 7, graph);
    GByteArray *op = g_byte_array_new();
    put_str(op, 1, "");
    put_int(op, 2, opset);
    put_msg(m, 8, op);
    return m;
}

/* x (float32 [N,4]) -> Relu -> r ; r + w (initializer, also listed as a graph input) -> y. */
static GByteArray *small_graph(void)
{
    GByteArray *g = g_byte_array_new();
    put_msg(g, 1, node_pb(NULL, "Relu", "x", "r"));
    GByteArray *add = node_pb("", "Add", "r,w", "y");
    static const int64_t perm[] = {1, 0};
    put_msg(add, 5, attr_ints("unused_ints", 2, perm));
    GByteArray *fa = g_byte_array_new();
    put_str(fa, 1, "eps");
    float eps = 1e-5f;
    put_varint(fa, 2 << 3 | 5);
    g_byte_array_append(fa, (const guint8 *)&eps, 4);
    put_int(fa, 20, 1);
    put_msg(add, 5, fa);
    put_msg(g, 1, add);
    put_str(g, 2, "small");
    static const float w[4] = {1, 2, 3, 4};
    static const int64_t wd[] = {4};
    put_msg(g, 5, tensor_pb("w", 1, 1, wd, w, sizeof w));
    static const int64_t xd[] = {-1, 4};
    put_msg(g, 11, value_info("x", 1, 2, xd));
    put_msg(g, 11, value_info("w", 1, 1, wd));
    put_msg(g, 12, value_info("y", 1, 2, xd));
    return g;
}

static PsimGraph *import_bytes(GByteArray *b, GError **err)
{
    PsimGraph *g = psim_graph_load_data("t.onnx", PSIM_FORMAT_ONNX, b->data, b->len, NULL, err);
    g_byte_array_unref(b);
    return g;
}

/* ---- an independent wire-format scan of a ModelProto (counts to check the importer by) ---- */

typedef struct {
    const guint8 *p, *end;
} Rd;

static gboolean rd_varint(Rd *r, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && r->p < r->end; s += 7) {
        guint8 c = *r->p++;
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80))
            return TRUE;
    }
    return FALSE;
}

/* Next field: number, wire type, and for length-delimited ones the payload. */
static gboolean rd_field(Rd *r, int *field, int *wt, Rd *sub)
{
    uint64_t key, v;
    if (r->p >= r->end || !rd_varint(r, &key))
        return FALSE;
    *field = (int)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0: return rd_varint(r, &v);
    case 1: r->p += 8; return r->p <= r->end;
    case 5: r->p += 4; return r->p <= r->end;
    case 2:
        if (!rd_varint(r, &v) || v > (uint64_t)(r->end - r->p))
            return FALSE;
        sub->p = r->p;
        sub->end = r->p + v;
        r->p += v;
        return TRUE;
    default: return FALSE;
    }
}

/* The string field `want` of a message, newly allocated ("" when absent). */
static char *rd_string_field(Rd m, int want)
{
    int f, wt;
    Rd sub;
    char *s = NULL;
    while (rd_field(&m, &f, &wt, &sub))
        if (f == want && wt == 2) {
            g_free(s);
            s = g_strndup((const char *)sub.p, (gsize)(sub.end - sub.p));
        }
    return s ? s : g_strdup("");
}

typedef struct {
    int nodes, initializers, inputs_not_init;
} Scan;

static Scan scan_model(const guint8 *data, gsize len)
{
    Scan s = {0};
    Rd r = {data, data + len}, graph = {0}, sub;
    int f, wt;
    while (rd_field(&r, &f, &wt, &sub))
        if (f == 7 && wt == 2)
            graph = sub;
    g_assert_nonnull(graph.p);
    g_autoptr(GHashTable) inits = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GPtrArray) inputs = g_ptr_array_new_with_free_func(g_free);
    Rd gr = graph;
    while (rd_field(&gr, &f, &wt, &sub)) {
        if (f == 1 && wt == 2)
            s.nodes++;
        else if (f == 5 && wt == 2) {
            s.initializers++;
            g_hash_table_add(inits, rd_string_field(sub, 8));
        } else if (f == 11 && wt == 2)
            g_ptr_array_add(inputs, rd_string_field(sub, 1));
    }
    for (guint i = 0; i < inputs->len; i++)
        s.inputs_not_init += !g_hash_table_contains(inits, g_ptr_array_index(inputs, i));
    return s;
}

/* The model with the shapes it declares for graph outputs and intermediate values removed, so
 * that only shape inference can give them (re-encoded with the generated code). */
static GByteArray *strip_declared_shapes(const guint8 *data, gsize len)
{
    PsimOnnx__ModelProto *m = psim_onnx__model_proto__unpack(NULL, len, data);
    g_assert_nonnull(m);
    g_assert_nonnull(m->graph);
    PsimOnnx__GraphProto *g = m->graph;
    g_autofree PsimOnnx__TypeProto **types = g_new0(PsimOnnx__TypeProto *, g->n_output + 1);
    for (size_t i = 0; i < g->n_output; i++) {
        types[i] = g->output[i]->type;
        g->output[i]->type = NULL;
    }
    size_t n_vi = g->n_value_info;
    g->n_value_info = 0;
    GByteArray *out = g_byte_array_new();
    g_byte_array_set_size(out, (guint)psim_onnx__model_proto__get_packed_size(m));
    psim_onnx__model_proto__pack(m, out->data);
    for (size_t i = 0; i < g->n_output; i++)
        g->output[i]->type = types[i];
    g->n_value_info = n_vi;
    psim_onnx__model_proto__free_unpacked(m, NULL);
    return out;
}

/* ---- the shared model-zoo graphs ---- */

static const struct {
    const char *name;
    int nodes, initializers; /* as python onnx 1.23.2 counts them in the file */
    int64_t out_dims[4];
    int out_rank;
} light[] = {
    {"bvlc_alexnet", 40, 17, {1, 1000}, 2},  {"inception_v1", 237, 118, {1, 1000}, 2},
    {"resnet50", 415, 269, {1, 1000}, 2},    {"squeezenet", 105, 52, {1, 1000, 1, 1}, 4},
    {"vgg19", 82, 39, {1, 1000}, 2},         {"zfnet512", 38, 18, {1, 1000}, 2},
};

static void check_output_shape(const PsimGraph *g, const PsimTensor *t)
{
    PsimPort op = psim_graph_output(g, 0);
    const PsimOutput *o = &psim_graph_node(g, op.node)->outputs[op.index];
    g_assert_cmpint(o->dtype, ==, t->dtype);
    g_assert_cmpint(o->rank, ==, t->rank);
    g_assert_cmpmem(o->dims, sizeof(int64_t) * (size_t)o->rank, t->dims,
                    sizeof(int64_t) * (size_t)t->rank);
    g_assert_cmpuint(o->bytes, ==, t->nbytes);
}

static void test_light_models(void)
{
    for (size_t m = 0; m < G_N_ELEMENTS(light); m++) {
        g_autofree char *path = g_strdup_printf("%s/onnx-light/%s.onnx", data_dir(), light[m].name);
        g_autoptr(GMappedFile) mf = g_mapped_file_new(path, FALSE, NULL);
        if (!mf) {
            g_test_skip("shared data not found (set PSIM_DATA)");
            return;
        }
        Scan s = scan_model((const guint8 *)g_mapped_file_get_contents(mf),
                            g_mapped_file_get_length(mf));
        g_assert_cmpint(s.nodes, ==, light[m].nodes);
        g_assert_cmpint(s.initializers, ==, light[m].initializers);
        g_assert_cmpint(s.inputs_not_init, ==, 1);

        GError *err = NULL;
        g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
        g_assert_no_error(err);
        g_assert_nonnull(g);
        g_assert_cmpint(psim_graph_n_nodes(g), ==, s.nodes + s.initializers + s.inputs_not_init);
        g_assert_cmpint(psim_graph_opset(g), ==, 9);
        g_assert_cmpint(psim_graph_n_inputs(g), ==, 1);
        g_assert_cmpint(psim_graph_n_outputs(g), ==, 1);
        int n_param = 0, n_placeholder = 0;
        for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
            const PsimNode *n = psim_graph_node(g, i);
            g_assert_true(n->name && *n->name);
            g_assert_true(psim_graph_node_find(g, n->name) == n);
            if (n->flags & PSIM_NODE_PARAMETER) {
                n_param++;
                g_assert_cmpstr(n->op, ==, "Const");
                g_assert_nonnull(n->outputs[0].value);
            }
            if (!strcmp(n->op, "Placeholder")) {
                n_placeholder++;
                g_assert_cmpint(psim_graph_input(g, 0), ==, n->id);
                /* Every input of the six is float32 [1, 3, 224, 224]. */
                g_assert_cmpint(n->outputs[0].dtype, ==, PSIM_DTYPE_FLOAT32);
                g_assert_cmpint(n->outputs[0].rank, ==, 4);
                g_assert_cmpint(n->outputs[0].dims[1], ==, 3);
                g_assert_cmpint(n->outputs[0].dims[3], ==, 224);
            }
            for (int32_t k = 0; k < n->n_outputs; k++)
                g_assert_true(n->outputs[k].name && *n->outputs[k].name);
        }
        g_assert_cmpint(n_param, ==, s.initializers);
        g_assert_cmpint(n_placeholder, ==, 1);

        /* The expected output is a float32 TensorProto of the model's output shape. */
        g_autofree char *out = g_strdup_printf("%s/onnx-light/%s_output_0.pb", data_dir(),
                                               light[m].name);
        g_autoptr(PsimTensor) t = psim_tensor_load_pb(out, NULL, &err);
        g_assert_no_error(err);
        g_assert_cmpint(t->dtype, ==, PSIM_DTYPE_FLOAT32);
        g_assert_cmpint(t->rank, ==, light[m].out_rank);
        for (int i = 0; i < t->rank; i++)
            g_assert_cmpint(t->dims[i], ==, light[m].out_dims[i]);
        /* The graph output has the expected output's shape (declared in the file here). */
        check_output_shape(g, t);
        /* Shape inference alone gives it the same shape, once the declarations are gone. */
        g_autoptr(GByteArray) bare = strip_declared_shapes(
            (const guint8 *)g_mapped_file_get_contents(mf), g_mapped_file_get_length(mf));
        g_autoptr(PsimGraph) gi = psim_graph_load_data(path, PSIM_FORMAT_ONNX, bare->data,
                                                       bare->len, NULL, &err);
        g_assert_no_error(err);
        check_output_shape(gi, t);
        /* A softmax: the probabilities sum to one. */
        double sum = 0;
        for (int64_t i = 0; i < t->n_elems; i++)
            sum += psim_tensor_get_f64(t, i);
        g_assert_cmpfloat_with_epsilon(sum, 1.0, 1e-4);
    }
}

/* Names: ONNX names are kept when given, otherwise made from the first output; graph inputs
 * that are initializers are constants. */
static void test_names_and_inputs(void)
{
    GError *err = NULL;
    g_autoptr(PsimGraph) g = import_bytes(model_pb(small_graph(), 13), &err);
    g_assert_no_error(err);
    g_assert_cmpstr(psim_graph_name(g), ==, "small");
    g_assert_cmpint(psim_graph_opset(g), ==, 13);
    g_assert_cmpint(psim_graph_n_nodes(g), ==, 4); /* w, x, Relu, Add */
    g_assert_cmpint(psim_graph_n_inputs(g), ==, 1);
    const PsimNode *x = psim_graph_node(g, psim_graph_input(g, 0));
    g_assert_cmpstr(x->name, ==, "x");
    g_assert_cmpstr(x->op, ==, "Placeholder");
    g_assert_cmpint(x->outputs[0].rank, ==, 2);
    g_assert_cmpint(x->outputs[0].dims[0], ==, PSIM_DIM_UNKNOWN);
    g_assert_cmpint(x->outputs[0].dims[1], ==, 4);
    const PsimNode *w = psim_graph_node_find(g, "w");
    g_assert_cmpstr(w->op, ==, "Const");
    g_assert_true(w->flags & PSIM_NODE_PARAMETER);
    const PsimAttr *v = psim_node_attr(w, "value");
    g_assert_nonnull(v);
    g_assert_cmpint(v->type, ==, PSIM_ATTR_TENSOR);
    g_assert_cmpfloat(psim_tensor_get_f64(v->v.t, 3), ==, 4.0);
    const PsimNode *relu = psim_graph_node_find(g, "r");
    const PsimNode *add = psim_graph_node_find(g, "y");
    g_assert_nonnull(relu);
    g_assert_nonnull(add);
    g_assert_cmpstr(add->op, ==, "Add");
    g_assert_cmpstr(add->outputs[0].name, ==, "y");
    g_assert_cmpint(add->inputs[0].node, ==, relu->id);
    g_assert_cmpint(add->inputs[1].node, ==, w->id);
    const int64_t *ints;
    g_assert_cmpint(psim_node_attr_ints(add, "unused_ints", &ints), ==, 2);
    g_assert_cmpint(ints[0], ==, 1);
    /* float32 attributes read as the decimal their author wrote. */
    g_assert_cmpfloat(psim_node_attr_float(add, "eps", 0), ==, 1e-5);
    PsimPort o = psim_graph_output(g, 0);
    g_assert_cmpint(o.node, ==, add->id);

    /* A named node keeps its name; clashes get a suffix; empty inputs are absent; a domain is
     * kept. */
    GByteArray *gb = g_byte_array_new();
    put_msg(gb, 1, node_pb("x", "Relu", "x", "a"));
    put_msg(gb, 1, node_pb(NULL, "Relu", "a", "b"));
    put_msg(gb, 1, node_pb("b", "Relu", "a", "b2"));
    GByteArray *clip = node_pb(NULL, "Mystery", "b,,b2", "c");
    put_str(clip, 7, "com.example");
    put_msg(gb, 1, clip);
    put_msg(gb, 1, node_pb(NULL, "Dropout", "c", ",mask"));
    static const int64_t xd[] = {2, 2};
    put_msg(gb, 11, value_info("x", 1, 2, xd));
    put_msg(gb, 12, value_info("c", 1, 2, xd));
    g_autoptr(PsimGraph) g2 = import_bytes(model_pb(gb, 9), &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(g2), ==, 6);
    g_assert_cmpstr(psim_graph_node(g2, 1)->name, ==, "x_1");
    g_assert_cmpstr(psim_graph_node(g2, 2)->name, ==, "b");
    g_assert_cmpstr(psim_graph_node(g2, 3)->name, ==, "b_1");
    const PsimNode *c = psim_graph_node(g2, 4);
    g_assert_cmpstr(c->name, ==, "c");
    g_assert_cmpstr(c->domain, ==, "com.example");
    /* An op shape inference does not know keeps the shape the file declares. */
    g_assert_cmpint(c->outputs[0].dtype, ==, PSIM_DTYPE_FLOAT32);
    g_assert_cmpint(c->outputs[0].rank, ==, 2);
    g_assert_cmpint(c->outputs[0].dims[1], ==, 2);
    g_assert_cmpuint(c->outputs[0].bytes, ==, 16);
    g_assert_cmpint(c->n_inputs, ==, 3);
    g_assert_cmpint(c->inputs[1].node, ==, -1);
    g_assert_cmpint(c->inputs[2].node, ==, 3);
    const PsimNode *drop = psim_graph_node(g2, 5);
    g_assert_cmpstr(drop->name, ==, "mask");

    /* Names that would not survive JSON or refs: invalid UTF-8 is replaced, a leading '^' (a
     * control input in refs) is not kept; the graph still round-trips through JSON. */
    gb = g_byte_array_new();
    put_msg(gb, 1, node_pb("^ctl", "Relu", "in\xff", "out\xfe"));
    put_msg(gb, 11, value_info("in\xff", 1, 2, xd));
    put_msg(gb, 12, value_info("out\xfe", 1, 2, xd));
    g_autoptr(PsimGraph) g3 = import_bytes(model_pb(gb, 9), &err);
    g_assert_no_error(err);
    g_assert_cmpstr(psim_graph_node(g3, 0)->name, ==, "in\xef\xbf\xbd");
    g_assert_cmpstr(psim_graph_node(g3, 1)->name, ==, "_ctl");
    g_assert_cmpstr(psim_graph_node(g3, 1)->outputs[0].name, ==, "out\xef\xbf\xbd");
    g_assert_cmpint(psim_graph_node(g3, 1)->inputs[0].node, ==, 0);
    gsize jl = 0;
    g_autofree char *j = psim_export_json(g3, &jl);
    g_autoptr(PsimGraph) g4 = psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)j,
                                                   jl, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_node(g4, 1)->inputs[0].node, ==, 0);
    g_assert_cmpint(drop->n_outputs, ==, 2);
    g_assert_null(drop->outputs[0].name);
}

/* Each hostile or broken model gives one INPUT error naming the file and what is wrong. */
static void test_errors(void)
{
    static const int64_t d2[] = {2, 2}, huge[] = {1 << 20, 1 << 20}, neg[] = {-3},
                         huge_in[] = {1 << 20, 1 << 20, 1 << 10, -1};
    static const float four[4] = {0};
    typedef struct {
        GByteArray *model;
        const char *expect;
    } Case;
    Case cases[32];
    int nc = 0;
    GByteArray *g;

    g = g_byte_array_new();
    put_msg(g, 1, node_pb("n1", "Relu", "nope", "y"));
    cases[nc++] = (Case){model_pb(g, 9), "node 'n1': input 0 'nope' names a missing tensor"};

    g = g_byte_array_new();
    put_msg(g, 11, value_info("x", 1, 2, d2));
    put_msg(g, 1, node_pb("p", "Relu", "x", "y"));
    put_msg(g, 1, node_pb("q", "Relu", "x", "y"));
    cases[nc++] = (Case){model_pb(g, 9), "tensor 'y' has two producers"};

    g = g_byte_array_new();
    put_msg(g, 11, value_info("x", 1, 2, d2));
    put_msg(g, 11, value_info("x", 1, 2, d2));
    cases[nc++] = (Case){model_pb(g, 9), "tensor 'x' has two producers"};

    g = g_byte_array_new();
    put_msg(g, 5, tensor_pb("w", 1, 2, huge, NULL, 0));
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': its shape has more than 2^36"};

    static const int64_t large[] = {1 << 16, 1 << 16};
    g = g_byte_array_new();
    put_msg(g, 5, tensor_pb("w", 1, 2, large, NULL, 0));
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': no data for its 4294967296 elements"};

    g = g_byte_array_new();
    put_msg(g, 5, tensor_pb("w", 1, 2, d2, four, 12));
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': raw_data has 12 bytes, the shape needs 16"};

    g = g_byte_array_new();
    put_msg(g, 5, tensor_pb("w", 1, 1, neg, NULL, 0));
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': dims[0] is negative"};

    g = g_byte_array_new();
    put_msg(g, 11, value_info("x", 1, 4, huge_in));
    cases[nc++] = (Case){model_pb(g, 9), "graph input 'x': its shape has more than 2^36"};

    static const int64_t negdim[] = {INT64_MIN};
    g = g_byte_array_new();
    put_msg(g, 11, value_info("x", 1, 1, negdim));
    cases[nc++] = (Case){model_pb(g, 9), "graph input 'x': dimension 0 is negative"};

    g = g_byte_array_new();
    put_msg(g, 11, value_info("x", 1, 2, d2));
    put_msg(g, 1, node_pb("p", "Relu", "x", "r"));
    put_msg(g, 13, value_info("r", 1, 1, negdim));
    cases[nc++] = (Case){model_pb(g, 9), "value_info 'r': dimension 0 is negative"};

    GByteArray *ext = tensor_pb("w", 1, 2, d2, NULL, 0);
    put_int(ext, 14, 1);
    g = g_byte_array_new();
    put_msg(g, 5, ext);
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': external data"};

    g = g_byte_array_new();
    put_msg(g, 1, node_pb("bad", "Rel\xffu", "", "y"));
    cases[nc++] = (Case){model_pb(g, 9), "node #0: op_type or domain is not valid UTF-8"};

    GByteArray *loop = node_pb("loop", "If", "", "y");
    GByteArray *a = g_byte_array_new();
    put_str(a, 1, "then_branch");
    put_bytes(a, 6, "", 0);
    put_int(a, 20, 5);
    put_msg(loop, 5, a);
    g = g_byte_array_new();
    put_msg(g, 1, loop);
    cases[nc++] = (Case){model_pb(g, 9), "node 'loop': attribute 'then_branch' holds a subgraph"};

    g = g_byte_array_new();
    put_msg(g, 1, node_pb("a", "Relu", "z", "y"));
    put_msg(g, 1, node_pb("b", "Relu", "y", "z"));
    cases[nc++] = (Case){model_pb(g, 9), "cycle"};

    g = g_byte_array_new();
    put_msg(g, 1, node_pb("self", "Relu", "y", "y"));
    cases[nc++] = (Case){model_pb(g, 9), "node 'self': the graph has a cycle"};

    g = g_byte_array_new();
    put_msg(g, 1, node_pb("a", "", "", "y"));
    cases[nc++] = (Case){model_pb(g, 9), "node #0 ('a') has no op_type"};

    g = g_byte_array_new();
    put_msg(g, 12, value_info("ghost", 1, 2, d2));
    cases[nc++] = (Case){model_pb(g, 9), "graph output #0 'ghost' names a missing tensor"};

    GByteArray *bad = tensor_pb("w", 99, 2, d2, four, 16);
    g = g_byte_array_new();
    put_msg(g, 5, bad);
    cases[nc++] = (Case){model_pb(g, 9), "initializer 'w': data_type 99"};

    GByteArray *nog = g_byte_array_new();
    put_int(nog, 1, 8);
    cases[nc++] = (Case){nog, "has no graph"};

    GByteArray *trunc = model_pb(small_graph(), 9);
    g_byte_array_set_size(trunc, trunc->len - 3);
    cases[nc++] = (Case){trunc, "malformed or truncated"};

    g_assert_cmpint(nc, <=, (int)G_N_ELEMENTS(cases));
    for (int i = 0; i < nc; i++) {
        GError *err = NULL;
        PsimGraph *gr = import_bytes(cases[i].model, &err);
        g_assert_null(gr);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!g_str_has_prefix(err->message, "t.onnx: ") || !strstr(err->message, cases[i].expect))
            g_error("case %d: '%s' lacks '%s'", i, err->message, cases[i].expect);
        g_assert_null(strchr(err->message, '\n'));
        g_clear_error(&err);
    }
}

/* Truncations at many offsets and random byte flips: a graph or a clean INPUT error, never a
 * crash (the sanitizer build checks the memory side). */
static void test_corrupt(void)
{
    g_autofree char *path = g_strdup_printf("%s/onnx-light/squeezenet.onnx", data_dir());
    gchar *raw = NULL;
    gsize len = 0;
    if (!g_file_get_contents(path, &raw, &len, NULL)) {
        g_test_skip("shared data not found (set PSIM_DATA)");
        return;
    }
    g_autofree guint8 *data = (guint8 *)raw;
    int failed = 0, tried = 0;
    for (gsize cut = 0; cut < len; cut += 1 + cut / 16, tried++) {
        GError *err = NULL;
        PsimGraph *g = psim_graph_load_data("cut.onnx", PSIM_FORMAT_ONNX, data, cut, NULL, &err);
        if (!g) {
            g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
            g_assert_true(g_str_has_prefix(err->message, "cut.onnx: "));
            failed++;
        }
        psim_graph_free(g);
        g_clear_error(&err);
    }
    /* The graph is the file's last big field: every cut inside it must fail. */
    g_assert_cmpint(failed, >=, tried - 2);
    g_autoptr(GRand) r = g_rand_new_with_seed(42);
    g_autofree guint8 *buf = g_malloc(len);
    int flip_failed = 0;
    for (int i = 0; i < 2000; i++) {
        memcpy(buf, data, len);
        for (int k = 0, nk = g_rand_int_range(r, 1, 4); k < nk; k++)
            buf[g_rand_int_range(r, 0, (gint32)len)] ^= (guint8)g_rand_int_range(r, 1, 256);
        GError *err = NULL;
        PsimGraph *g = psim_graph_load_data("flip.onnx", PSIM_FORMAT_ONNX, buf, len, NULL, &err);
        if (!g) {
            g_assert_nonnull(err);
            g_assert_true(g_str_has_prefix(err->message, "flip.onnx: "));
            if (strchr(err->message, '\n'))
                g_error("flip %d: %s", i, err->message);
            flip_failed++;
        }
        psim_graph_free(g);
        g_clear_error(&err);
    }
    g_test_message("%d of %d cuts and %d of 2000 flips rejected", failed, tried, flip_failed);
    g_assert_cmpint(flip_failed, >, 0);
}

/* An imported model survives placesim JSON: export, import, export gives the same bytes, with
 * every attribute kind ONNX has (tensor lists included) and the light models (whose opset 9
 * semantics, Dropout's float mask, must survive the trip). */
static void check_json_stable(const PsimGraph *g)
{
    gsize len1 = 0, len2 = 0;
    g_autofree char *j1 = psim_export_json(g, &len1);
    GError *err = NULL;
    g_autoptr(PsimGraph) g2 = psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)j1,
                                                   len1, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_nodes(g2), ==, psim_graph_n_nodes(g));
    g_autofree char *j2 = psim_export_json(g2, &len2);
    g_assert_cmpmem(j1, len1, j2, len2);
}

/* A model of one custom-domain node with attributes of several types (ints, tensors, strings,
 * a string) between a graph input and output. */
static GByteArray *mystery_model(void)
{
    GByteArray *gb = g_byte_array_new();
    GByteArray *n = node_pb("all", "Mystery", "x", "y");
    put_str(n, 7, "com.example");
    static const int64_t ints[] = {1, -2, 3}, d2[] = {2}, d1[] = {1};
    put_msg(n, 5, attr_ints("ints", 3, ints));
    GByteArray *a = g_byte_array_new();
    put_str(a, 1, "tensors");
    static const int32_t tv[2] = {7, -7};
    static const double dv[1] = {0.25};
    put_msg(a, 10, tensor_pb("t0", PSIM_DTYPE_INT32, 1, d2, tv, sizeof tv));
    put_msg(a, 10, tensor_pb("t1", PSIM_DTYPE_FLOAT64, 1, d1, dv, sizeof dv));
    put_int(a, 20, 9);
    put_msg(n, 5, a);
    a = g_byte_array_new();
    put_str(a, 1, "strings");
    put_str(a, 9, "p");
    put_str(a, 9, "q");
    put_int(a, 20, 8);
    put_msg(n, 5, a);
    a = g_byte_array_new();
    put_str(a, 1, "s");
    put_str(a, 4, "text");
    put_int(a, 20, 3);
    put_msg(n, 5, a);
    put_msg(gb, 1, n);
    static const int64_t xd[] = {2};
    put_msg(gb, 11, value_info("x", 1, 1, xd));
    put_msg(gb, 12, value_info("y", 1, 1, xd));
    return model_pb(gb, 13);
}

static void test_json_roundtrip(void)
{
    GError *err = NULL;
    g_autoptr(PsimGraph) g = import_bytes(mystery_model(), &err);
    g_assert_no_error(err);
    const PsimNode *all = psim_graph_node_find(g, "all");
    const PsimAttr *ts = psim_node_attr(all, "tensors");
    g_assert_cmpint(ts->type, ==, PSIM_ATTR_TENSORS);
    g_assert_cmpint(ts->n, ==, 2);
    g_assert_cmpint(psim_tensor_get_i64(ts->v.ts[0], 1), ==, -7);
    g_assert_cmpfloat(psim_tensor_get_f64(ts->v.ts[1], 0), ==, 0.25);
    const PsimAttr *ss = psim_node_attr(all, "strings");
    g_assert_cmpint(ss->n, ==, 2);
    g_assert_cmpstr(ss->v.strs[1], ==, "q");
    g_assert_cmpstr(psim_node_attr_string(all, "s", NULL), ==, "text");
    check_json_stable(g);

    for (size_t m = 0; m < G_N_ELEMENTS(light); m++) {
        g_autofree char *path = g_strdup_printf("%s/onnx-light/%s.onnx", data_dir(), light[m].name);
        if (!g_file_test(path, G_FILE_TEST_EXISTS))
            return;
        g_autoptr(PsimGraph) lg = psim_graph_load(path, NULL, &err);
        g_assert_no_error(err);
        check_json_stable(lg);
    }
}

/* ---- Export to ONNX ---- */

/* g written as ONNX (psim_export_onnx) and read back is the same graph: the same JSON export. */
static void check_onnx_roundtrip(const PsimGraph *g)
{
    GError *err = NULL;
    gsize len = 0;
    g_autofree char *bytes = psim_export_onnx(g, &len, &err);
    g_assert_no_error(err);
    g_assert_nonnull(bytes);
    g_autoptr(PsimGraph) g2 = psim_graph_load_data("rt.onnx", PSIM_FORMAT_ONNX, (const guint8 *)bytes, len, NULL, &err);
    g_assert_no_error(err);
    gsize l1 = 0, l2 = 0;
    g_autofree char *j1 = psim_export_json(g, &l1);
    g_autofree char *j2 = psim_export_json(g2, &l2);
    g_assert_cmpmem(j1, l1, j2, l2);
}

static void test_onnx_export(void)
{
    /* A custom-domain node with attributes of several types; a graph input and output. */
    GError *err = NULL;
    g_autoptr(PsimGraph) g = import_bytes(mystery_model(), &err);
    g_assert_no_error(err);
    check_onnx_roundtrip(g);
    /* Real models: initializers, every op's attributes, shapes. */
    for (size_t m = 0; m < G_N_ELEMENTS(light); m++) {
        if (strcmp(light[m].name, "squeezenet") && strcmp(light[m].name, "inception_v1"))
            continue; /* the others are the same ops, larger */
        g_autofree char *path = g_strdup_printf("%s/onnx-light/%s.onnx", data_dir(), light[m].name);
        if (!g_file_test(path, G_FILE_TEST_EXISTS))
            continue;
        g_autoptr(PsimGraph) lg = psim_graph_load(path, NULL, &err);
        g_assert_no_error(err);
        check_onnx_roundtrip(lg);
    }
    /* A Const without a value cannot be written: an error naming it. */
    g_autoptr(PsimGraph) bad = psim_graph_new("bad");
    PsimNode *c = psim_graph_node_add(bad, "empty", "Const", &err);
    g_assert_no_error(err);
    psim_graph_node_outputs_set(bad, c, 1);
    g_assert_true(psim_graph_finalize(bad, &err));
    gsize len = 0;
    g_assert_null(psim_export_onnx(bad, &len, &err));
    g_assert_nonnull(strstr(err->message, "'empty'"));
    g_clear_error(&err);
}

/* ---- TensorProto files ---- */

static void check_roundtrip(const PsimTensor *t, const char *name)
{
    g_autofree char *dir = g_dir_make_tmp("psim-onnx-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "t.pb", NULL);
    GError *err = NULL;
    g_assert_true(psim_tensor_save_pb(t, name, path, &err));
    g_assert_no_error(err);
    g_autofree char *name2 = NULL;
    g_autoptr(PsimTensor) u = psim_tensor_load_pb(path, &name2, &err);
    g_assert_no_error(err);
    g_assert_cmpstr(name2, ==, name);
    g_assert_cmpint(u->dtype, ==, t->dtype);
    g_assert_cmpint(u->rank, ==, t->rank);
    g_assert_cmpmem(u->dims, sizeof(int64_t) * (size_t)u->rank, t->dims,
                    sizeof(int64_t) * (size_t)t->rank);
    if (t->dtype == PSIM_DTYPE_STRING)
        for (int64_t i = 0; i < t->n_elems; i++)
            g_assert_cmpstr(((char **)u->data)[i], ==, ((char **)t->data)[i]);
    else
        g_assert_cmpmem(u->data, u->nbytes, t->data, t->nbytes);
    g_unlink(path);
    g_rmdir(dir);
}

/* Whether graph input (field 11) or output (field 12) number k of a model is a tensor. */
static gboolean io_is_tensor(const guint8 *data, gsize len, int field, int k)
{
    Rd r = {data, data + len}, graph = {0}, sub, vi = {0}, type = {0};
    int f, wt, seen = 0;
    while (rd_field(&r, &f, &wt, &sub))
        if (f == 7 && wt == 2)
            graph = sub;
    while (graph.p && rd_field(&graph, &f, &wt, &sub))
        if (f == field && wt == 2 && seen++ == k)
            vi = sub;
    while (vi.p && rd_field(&vi, &f, &wt, &sub))
        if (f == 2 && wt == 2)
            type = sub;
    while (type.p && rd_field(&type, &f, &wt, &sub))
        if (f == 1 && wt == 2)
            return TRUE;
    return FALSE;
}

static const char *testdata = "/usr/share/libonnx-testdata/data/node";

/* Files of ONNX's conformance data, one per dtype, with values python's onnx reads there. */
static void test_tensor_files(void)
{
    static const struct {
        const char *file, *name;
        PsimDType dtype;
        int rank;
        int64_t d0;
        double v[3];
    } cases[] = {
        {"test_clip_default_int8_inbounds/test_data_set_0/input_0.pb", "x", PSIM_DTYPE_INT8, 1, 3, {-1, 0, 1}},
        {"test_cast_DOUBLE_to_FLOAT16/test_data_set_0/output_0.pb", "output", PSIM_DTYPE_FLOAT16, 2, 3, {0.158935546875, 0.1103515625, 0.65625}},
        {"test_and2d/test_data_set_0/input_0.pb", "x", PSIM_DTYPE_BOOL, 2, 3, {1, 1, 1}},
        {"test_bitshift_left_uint64/test_data_set_0/input_0.pb", "x", PSIM_DTYPE_UINT64, 1, 3, {16, 4, 1}},
        {"test_max_int16/test_data_set_0/input_0.pb", "data_0", PSIM_DTYPE_INT16, 1, 3, {3, 2, 1}},
        {"test_bernoulli/test_data_set_0/input_0.pb", "x", PSIM_DTYPE_FLOAT64, 1, 10, {0.5488135039273248, 0.7151893663724195, 0.6027633760716439}},
        {"test_cast_FLOAT_to_STRING/test_data_set_0/output_0.pb", "output", PSIM_DTYPE_STRING, 2, 3, {0}},
    };
    if (!g_file_test(testdata, G_FILE_TEST_IS_DIR)) {
        g_test_skip("libonnx-testdata is not installed");
        return;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *path = g_build_filename(testdata, cases[i].file, NULL);
        GError *err = NULL;
        g_autofree char *name = NULL;
        g_autoptr(PsimTensor) t = psim_tensor_load_pb(path, &name, &err);
        g_assert_no_error(err);
        g_assert_cmpstr(name, ==, cases[i].name);
        g_assert_cmpint(t->dtype, ==, cases[i].dtype);
        g_assert_cmpint(t->rank, ==, cases[i].rank);
        g_assert_cmpint(t->dims[0], ==, cases[i].d0);
        if (t->dtype == PSIM_DTYPE_STRING)
            g_assert_cmpstr(((char **)t->data)[0], ==, "0.9767611"); /* from string_data */
        else
            for (int k = 0; k < 3; k++)
                g_assert_cmpfloat(psim_tensor_get_f64(t, k), ==, cases[i].v[k]);
        check_roundtrip(t, name);
    }

    /* Every tensor file of the conformance data reads; the test's model.onnx says which files
     * hold tensors (the others hold sequences, maps or optionals: other messages). */
    g_autoptr(GDir) d = g_dir_open(testdata, 0, NULL);
    const char *test;
    int n_ok = 0, n_other = 0;
    while ((test = g_dir_read_name(d))) {
        g_autofree char *set = g_build_filename(testdata, test, "test_data_set_0", NULL);
        g_autofree char *model = g_build_filename(testdata, test, "model.onnx", NULL);
        gchar *mdata = NULL;
        gsize mlen = 0;
        if (!g_file_get_contents(model, &mdata, &mlen, NULL))
            continue;
        g_autofree guint8 *mbytes = (guint8 *)mdata;
        g_autoptr(GDir) sd = g_dir_open(set, 0, NULL);
        const char *f;
        while (sd && (f = g_dir_read_name(sd))) {
            int k;
            gboolean is_input = sscanf(f, "input_%d.pb", &k) == 1;
            if (!is_input && sscanf(f, "output_%d.pb", &k) != 1)
                continue;
            gboolean tensor = io_is_tensor(mbytes, mlen, is_input ? 11 : 12, k);
            g_autofree char *path = g_build_filename(set, f, NULL);
            GError *err = NULL;
            g_autofree char *name = NULL;
            g_autoptr(PsimTensor) t = psim_tensor_load_pb(path, &name, &err);
            if (!tensor) {
                n_other++;
                g_clear_error(&err);
                continue;
            }
            if (!t)
                g_error("%s", err->message);
            n_ok++;
            if (n_ok % 16 == 0)
                check_roundtrip(t, name);
        }
    }
    g_test_message("%d tensor files read, %d non-tensor files skipped", n_ok, n_other);
    g_assert_cmpint(n_ok, >, 2000);
}

/* The typed-data fields (not raw_data) for each dtype family, and their errors. */
static void test_tensor_typed(void)
{
    GError *err = NULL;
    static const int64_t d3[] = {3};
    struct {
        int dtype, field;
        int64_t v[3];
    } ints[] = {
        {PSIM_DTYPE_INT8, 5, {-1, 2, 127}},   {PSIM_DTYPE_UINT16, 5, {1, 65535, 7}},
        {PSIM_DTYPE_BOOL, 5, {0, 1, 1}},      {PSIM_DTYPE_INT32, 5, {-5, 0, 1 << 30}},
        {PSIM_DTYPE_INT64, 7, {-(INT64_C(1) << 40), 3, 9}},
        {PSIM_DTYPE_UINT32, 11, {4000000000, 1, 2}},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(ints); i++) {
        GByteArray *t = tensor_pb("t", ints[i].dtype, 1, d3, NULL, 0);
        GByteArray *packed = g_byte_array_new();
        for (int k = 0; k < 3; k++)
            put_varint(packed, (uint64_t)ints[i].v[k]);
        put_bytes(t, ints[i].field, packed->data, packed->len);
        g_byte_array_unref(packed);
        g_autoptr(PsimTensor) x = psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err);
        g_assert_no_error(err);
        for (int k = 0; k < 3; k++)
            g_assert_cmpint(psim_tensor_get_i64(x, k), ==, ints[i].v[k]);
        g_byte_array_unref(t);
    }
    /* float_data and double_data, packed and unpacked. */
    GByteArray *t = tensor_pb("f", PSIM_DTYPE_FLOAT32, 1, d3, NULL, 0);
    float fv[3] = {1.5f, -2.25f, 1e30f};
    for (int k = 0; k < 3; k++) {
        put_varint(t, 4 << 3 | 5);
        g_byte_array_append(t, (const guint8 *)&fv[k], 4);
    }
    g_autoptr(PsimTensor) f = psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpfloat(psim_tensor_get_f64(f, 2), ==, 1e30f);
    g_byte_array_unref(t);
    double dv[3] = {0.1, -3, 1e300};
    t = tensor_pb("d", PSIM_DTYPE_FLOAT64, 1, d3, NULL, 0);
    put_bytes(t, 10, dv, sizeof dv);
    g_autoptr(PsimTensor) dd = psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpfloat(psim_tensor_get_f64(dd, 0), ==, 0.1);
    g_byte_array_unref(t);

    /* Too few values, and absurd shapes without data: clean errors naming the file. */
    t = tensor_pb("short", PSIM_DTYPE_FLOAT64, 1, d3, NULL, 0);
    put_bytes(t, 10, dv, 16);
    g_assert_null(psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_cmpstr(err->message, ==, "t.pb: tensor 'short': double_data has 2 values, the shape needs 3");
    g_clear_error(&err);
    g_byte_array_unref(t);
    static const int64_t big[] = {INT64_C(1) << 40};
    t = tensor_pb("big", PSIM_DTYPE_FLOAT32, 1, big, NULL, 0);
    g_assert_null(psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "2^36"));
    g_clear_error(&err);
    g_byte_array_unref(t);
    static const int64_t zero_big[] = {0, INT64_C(1) << 40};
    t = tensor_pb("zb", PSIM_DTYPE_FLOAT32, 2, zero_big, NULL, 0);
    g_assert_null(psim_tensor_parse_pb("t.pb", t->data, t->len, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "2^36"));
    g_clear_error(&err);
    g_byte_array_unref(t);
    static const guint8 junk[] = {0xff, 0xff, 0xff};
    g_assert_null(psim_tensor_parse_pb("t.pb", junk, sizeof junk, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_assert_null(psim_tensor_load_pb("/nonexistent/t.pb", NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);

    /* A written tensor of each numeric dtype reads back bit for bit. */
    for (int dt = 1; dt < PSIM_DTYPE_N_TYPES; dt++) {
        if (dt == PSIM_DTYPE_STRING)
            continue;
        static const int64_t d23[] = {2, 3};
        g_autoptr(PsimTensor) x = psim_tensor_new((PsimDType)dt, 2, d23, &err);
        g_assert_no_error(err);
        for (size_t b = 0; b < x->nbytes; b++)
            ((guint8 *)x->data)[b] = (guint8)(b * 37 + (size_t)dt);
        if (dt == PSIM_DTYPE_BOOL)
            for (size_t b = 0; b < x->nbytes; b++)
                ((guint8 *)x->data)[b] &= 1;
        check_roundtrip(x, psim_dtype_name((PsimDType)dt));
    }
}

/* An ONNX model whose initializer w (float32 [4]) keeps its bytes in another file (ONNX's
 * external data: location relative to the model's folder, offset, length). */
static GByteArray *external_model(const char *location, const char *offset, const char *length)
{
    GByteArray *g = g_byte_array_new();
    put_msg(g, 1, node_pb("y", "Add", "x,w", "y"));
    put_str(g, 2, "ext");
    static const int64_t wd[] = {4};
    GByteArray *t = tensor_pb("w", 1, 1, wd, NULL, 0);
    const char *kv[][2] = {{"location", location}, {"offset", offset}, {"length", length}};
    for (int i = 0; i < 3; i++) {
        if (!kv[i][1])
            continue;
        GByteArray *e = g_byte_array_new();
        put_str(e, 1, kv[i][0]);
        put_str(e, 2, kv[i][1]);
        put_msg(t, 13, e);
    }
    put_int(t, 14, 1);
    put_msg(g, 5, t);
    put_msg(g, 11, value_info("x", 1, 1, wd));
    put_msg(g, 12, value_info("y", 1, 1, wd));
    return model_pb(g, 13);
}

static void test_external_data(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-ext-XXXXXX", NULL);
    g_assert_nonnull(dir);
    g_autofree char *model = g_build_filename(dir, "m.onnx", NULL);
    g_autofree char *bin = g_build_filename(dir, "m.weights", NULL);
    /* 8 bytes of something else, then w. */
    const float w[4] = {1.5f, -2.0f, 3.25f, 1e-30f};
    guint8 bytes[8 + sizeof w] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3};
    memcpy(bytes + 8, w, sizeof w);
    g_assert_true(g_file_set_contents(bin, (const char *)bytes, sizeof bytes, NULL));

    GError *err = NULL;
    GByteArray *b = external_model("m.weights", "8", "16");
    PsimGraph *g = psim_graph_load_data(model, PSIM_FORMAT_ONNX, b->data, b->len, NULL, &err);
    g_byte_array_unref(b);
    g_assert_no_error(err);
    const PsimAttr *v = psim_node_attr(psim_graph_node_find(g, "w"), "value");
    g_assert_nonnull(v);
    for (int i = 0; i < 4; i++)
        g_assert_cmpfloat(psim_tensor_get_f64(v->v.t, i), ==, (double)w[i]);
    psim_graph_free(g);

    /* Offset and length default to 0 and the shape's size. */
    g_assert_true(g_file_set_contents(bin, (const char *)w, sizeof w, NULL));
    b = external_model("m.weights", NULL, NULL);
    g = psim_graph_load_data(model, PSIM_FORMAT_ONNX, b->data, b->len, NULL, &err);
    g_byte_array_unref(b);
    g_assert_no_error(err);
    v = psim_node_attr(psim_graph_node_find(g, "w"), "value");
    g_assert_cmpfloat(psim_tensor_get_f64(v->v.t, 2), ==, 3.25);
    psim_graph_free(g);

    /* Each bad case is one line naming the model and the initializer. */
    const struct {
        const char *loc, *off, *len, *expect;
    } bad[] = {
        {"nope.bin", NULL, NULL, "external data 'nope.bin': No such file"},
        {"../m.weights", NULL, NULL, "leaves the model's folder"},
        {"/etc/hostname", NULL, NULL, "leaves the model's folder"},
        {"m.weights", "4", NULL, "has 16 bytes, the tensor needs 16 from offset 4"},
        {"m.weights", NULL, "12", "length 12 bytes, the shape needs 16"},
        {"m.weights", "x", NULL, "offset 'x' is not a byte count"},
        {"", NULL, NULL, "external data without a location"},
        {".", NULL, NULL, "is not a regular file"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        b = external_model(bad[i].loc, bad[i].off, bad[i].len);
        g = psim_graph_load_data(model, PSIM_FORMAT_ONNX, b->data, b->len, NULL, &err);
        g_byte_array_unref(b);
        g_assert_null(g);
        g_assert_nonnull(err);
        if (!strstr(err->message, bad[i].expect) || !strstr(err->message, "initializer 'w'") ||
            !strstr(err->message, model) || strchr(err->message, '\n'))
            g_error("case %zu: '%s' does not say '%s'", i, err->message, bad[i].expect);
        g_clear_error(&err);
    }
    g_assert_cmpint(g_remove(bin), ==, 0);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

/* ---- Loops, unrolled at import ---- */

static GByteArray *attr_graph(const char *name, GByteArray *graph)
{
    GByteArray *a = g_byte_array_new();
    put_str(a, 1, name);
    put_msg(a, 6, graph);
    put_int(a, 20, 5);
    return a;
}

static GByteArray *attr_int(const char *name, int64_t v)
{
    GByteArray *a = g_byte_array_new();
    put_str(a, 1, name);
    put_int(a, 3, v);
    put_int(a, 20, 2);
    return a;
}

static GByteArray *scalar_pb(const char *name, int dtype, int64_t v)
{
    uint8_t b = (uint8_t)(v != 0);
    return dtype == 9 ? tensor_pb(name, 9, 0, NULL, &b, 1) : tensor_pb(name, 7, 0, NULL, &v, 8);
}

/* A Loop body's inputs (i, c, v [2]) and first outputs (c_out, v_out [2]). */
static void body_signature(GByteArray *b)
{
    static const int64_t d2[] = {2};
    put_msg(b, 11, value_info("i", 7, 0, NULL));
    put_msg(b, 11, value_info("c", 9, 0, NULL));
    put_msg(b, 11, value_info("v", 1, 1, d2));
    put_msg(b, 12, value_info("c_out", 9, 0, NULL));
    put_msg(b, 12, value_info("v_out", 1, 1, d2));
}

/* The body (i, c, v) -> (c_out, v_out, s): v_out = v * 2 + float(i), s = v_out + y, where y is
 * the outer graph's. c_out = Identity(c), or Less(i, 5) when the body computes its condition. */
static GByteArray *body_pb(gboolean computed_cond)
{
    static const int64_t d2[] = {2};
    GByteArray *b = g_byte_array_new();
    if (computed_cond)
        put_msg(b, 1, node_pb("less", "Less", "i,lim", "c_out"));
    else
        put_msg(b, 1, node_pb(NULL, "Identity", "c", "c_out"));
    GByteArray *cast = node_pb("cast", "Cast", "i", "fi");
    put_msg(cast, 5, attr_int("to", 1));
    put_msg(b, 1, cast);
    put_msg(b, 1, node_pb("mul", "Mul", "v,two", "v2"));
    put_msg(b, 1, node_pb("add", "Add", "v2,fi", "v_out"));
    put_msg(b, 1, node_pb("scan", "Add", "v_out,y", "s"));
    put_str(b, 2, "body");
    float two = 2;
    put_msg(b, 5, tensor_pb("two", 1, 0, NULL, &two, 4));
    if (computed_cond)
        put_msg(b, 5, scalar_pb("lim", 7, 5));
    body_signature(b);
    put_msg(b, 12, value_info("s", 1, 1, d2));
    return b;
}

/* Where a Loop's trip count comes from. */
enum { M_INITIALIZER, M_INPUT, M_CONSTANT_INT };

/* x [2] -> Loop(M = trips, cond = true, x) -> (vf, scans [trips, 2]); M an initializer, a graph
 * input, or Identity(Constant(value_int = trips)). */
static GByteArray *loop_model(gboolean computed_cond, int m_from, int64_t trips)
{
    static const int64_t d2[] = {2}, d32[] = {3, 2};
    GByteArray *g = g_byte_array_new();
    if (m_from == M_CONSTANT_INT) {
        GByteArray *k = node_pb("k", "Constant", "", "Mk");
        put_msg(k, 5, attr_int("value_int", trips));
        put_msg(g, 1, k);
        put_msg(g, 1, node_pb("mid", "Identity", "Mk", "M"));
    }
    GByteArray *loop = node_pb("loop", "Loop", "M,cond,x", "vf,scans");
    put_msg(loop, 5, attr_graph("body", body_pb(computed_cond)));
    put_msg(g, 1, loop);
    put_str(g, 2, "loopy");
    if (m_from == M_INITIALIZER)
        put_msg(g, 5, scalar_pb("M", 7, trips));
    put_msg(g, 5, scalar_pb("cond", 9, 1));
    static const float y[2] = {10, 100};
    put_msg(g, 5, tensor_pb("y", 1, 1, d2, y, sizeof y));
    put_msg(g, 11, value_info("x", 1, 1, d2));
    if (m_from == M_INPUT)
        put_msg(g, 11, value_info("M", 7, 0, NULL));
    put_msg(g, 12, value_info("vf", 1, 1, d2));
    put_msg(g, 12, value_info("scans", 1, 2, d32));
    return model_pb(g, 13);
}

/* Loops nested `depth` deep, each of M = 2 iterations; the innermost body adds 1 to v, each
 * body around it doubles what its inner Loop gives. */
static GByteArray *nested_body(int depth)
{
    GByteArray *b = g_byte_array_new();
    put_msg(b, 1, node_pb(NULL, "Identity", "c", "c_out"));
    if (depth > 1) {
        g_autofree char *outs = g_strdup_printf("w%d", depth);
        GByteArray *loop = node_pb(NULL, "Loop", "M,c,v", outs);
        put_msg(loop, 5, attr_graph("body", nested_body(depth - 1)));
        put_msg(b, 1, loop);
        g_autofree char *ins = g_strdup_printf("w%d,w%d", depth, depth);
        put_msg(b, 1, node_pb(NULL, "Add", ins, "v_out"));
    } else {
        put_msg(b, 1, node_pb(NULL, "Add", "v,one", "v_out"));
    }
    put_str(b, 2, "body");
    body_signature(b);
    return b;
}

static GByteArray *nested_model(int depth)
{
    static const int64_t d2[] = {2};
    GByteArray *g = g_byte_array_new();
    GByteArray *loop = node_pb("outer", "Loop", "M,cond,x", "vf");
    put_msg(loop, 5, attr_graph("body", nested_body(depth)));
    put_msg(g, 1, loop);
    put_str(g, 2, "nested");
    put_msg(g, 5, scalar_pb("M", 7, 2));
    put_msg(g, 5, scalar_pb("cond", 9, 1));
    static const float one[2] = {1, 1};
    put_msg(g, 5, tensor_pb("one", 1, 1, d2, one, sizeof one));
    put_msg(g, 11, value_info("x", 1, 1, d2));
    put_msg(g, 12, value_info("vf", 1, 1, d2));
    return model_pb(g, 13);
}

/* Runs g on the host with x = {1, 2}; its outputs into out[] (n of them). */
static void run_loop_graph(PsimGraph *g, PsimTensor **out, int32_t n)
{
    GError *err = NULL;
    g_autoptr(PsimWorker) w = psim_worker_new(NULL, &err);
    g_assert_no_error(err);
    int64_t d2 = 2;
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &d2, &err);
    ((float *)x->data)[0] = 1;
    ((float *)x->data)[1] = 2;
    g_assert_cmpint(psim_graph_n_outputs(g), ==, n);
    g_autoptr(GPtrArray) fetches = g_ptr_array_new_with_free_func(g_free);
    for (int32_t i = 0; i < n; i++)
        g_ptr_array_add(fetches, psim_port_to_string(g, psim_graph_output(g, i)));
    const char *feeds[] = {"x"};
    PsimExecutor *e = psim_executor_new(g, w, feeds, 1, (const char *const *)fetches->pdata, n,
                                        NULL, &err);
    g_assert_no_error(err);
    g_assert_true(psim_executor_run(e, &x, out, &err));
    g_assert_no_error(err);
    psim_executor_free(e);
}

static void test_loop(void)
{
    GError *err = NULL;
    /* v: [1,2] -> 2v+0 = [2,4] -> 2v+1 = [5,9] -> 2v+2 = [12,20]; scans = each + [10,100]. */
    g_autoptr(PsimGraph) g = import_bytes(loop_model(FALSE, M_INITIALIZER, 3), &err);
    g_assert_no_error(err);
    /* The trip count from an initializer, or from a Constant's value_int through an Identity. */
    g_autoptr(PsimGraph) gk = import_bytes(loop_model(FALSE, M_CONSTANT_INT, 3), &err);
    g_assert_no_error(err);
    for (int v = 0; v < 2; v++) {
        PsimTensor *out[2] = {NULL, NULL};
        run_loop_graph(v ? gk : g, out, 2);
        static const float vf[] = {12, 20}, scans[] = {12, 104, 15, 109, 22, 120};
        g_assert_cmpint(out[0]->n_elems, ==, 2);
        g_assert_cmpint(out[1]->rank, ==, 2);
        g_assert_cmpint(out[1]->dims[0], ==, 3);
        g_assert_cmpint(out[1]->dims[1], ==, 2);
        for (int i = 0; i < 2; i++)
            g_assert_cmpfloat(((float *)out[0]->data)[i], ==, vf[i]);
        for (int i = 0; i < 6; i++)
            g_assert_cmpfloat(((float *)out[1]->data)[i], ==, scans[i]);
        psim_tensor_unref(out[0]);
        psim_tensor_unref(out[1]);
    }
    /* Each iteration's nodes are named after it. */
    g_assert_nonnull(psim_graph_node_find(g, "loop/0/mul"));
    g_assert_nonnull(psim_graph_node_find(g, "loop/2/scan"));
    g_assert_null(psim_graph_node_find(g, "loop/3/mul"));
    /* The Loop's outputs keep their names: the last iteration's value is "vf". */
    PsimPort o0 = psim_graph_output(g, 0), o1 = psim_graph_output(g, 1);
    g_assert_cmpstr(psim_graph_node(g, o0.node)->name, ==, "loop/2/add");
    g_assert_cmpstr(psim_graph_node(g, o0.node)->outputs[o0.index].name, ==, "vf");
    g_assert_cmpstr(psim_graph_node(g, o1.node)->outputs[o1.index].name, ==, "scans");

    /* Nested three deep, M = 2 each: innermost v+1 twice, then each level doubles twice:
     * f1(v) = v + 2, f2(v) = 2 f1(2 f1(v)) ... computed below. */
    g_autoptr(PsimGraph) n3 = import_bytes(nested_model(3), &err);
    g_assert_no_error(err);
    PsimTensor *o3 = NULL;
    run_loop_graph(n3, &o3, 1);
    for (int i = 0; i < 2; i++) {
        /* level 1: one iteration adds 1; level k: one iteration is twice level k-1's loop. */
        double v = i + 1;
        for (int a = 0; a < 2; a++) {     /* outer (depth 3) */
            double w = v;
            for (int b = 0; b < 2; b++) { /* depth 2 */
                double u = w;
                for (int c = 0; c < 2; c++) /* depth 1 */
                    u = u + 1;
                w = 2 * u;
            }
            v = 2 * w;
        }
        g_assert_cmpfloat(((float *)o3->data)[i], ==, v);
    }
    psim_tensor_unref(o3);

    /* Refused, with one line naming the Loop. */
    struct {
        GByteArray *model;
        const char *expect;
    } bad[] = {
        {loop_model(TRUE, M_INITIALIZER, 3), "node 'loop' (Loop): its body computes its condition 'c_out'"},
        {loop_model(FALSE, M_INPUT, 3), "node 'loop' (Loop): its trip count 'M' is not a constant"},
        /* 100,000 iterations of 5 nodes from a file of a few hundred bytes. */
        {loop_model(FALSE, M_INITIALIZER, 100000), "100000 iterations of 5 nodes is more than the"},
        {nested_model(17), "nest more than 16 deep"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        PsimGraph *b = import_bytes(bad[i].model, &err);
        g_assert_null(b);
        g_assert_nonnull(err);
        if (!strstr(err->message, bad[i].expect) || strchr(err->message, '\n'))
            g_error("case %zu: '%s' does not say '%s'", i, err->message, bad[i].expect);
        g_clear_error(&err);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/onnx/loop", test_loop);
    g_test_add_func("/graph/onnx/light-models", test_light_models);
    g_test_add_func("/graph/onnx/names-inputs", test_names_and_inputs);
    g_test_add_func("/graph/onnx/errors", test_errors);
    g_test_add_func("/graph/onnx/corrupt", test_corrupt);
    g_test_add_func("/graph/onnx/json-roundtrip", test_json_roundtrip);
    g_test_add_func("/graph/onnx/export", test_onnx_export);
    g_test_add_func("/graph/onnx/tensor-files", test_tensor_files);
    g_test_add_func("/graph/onnx/tensor-typed", test_tensor_typed);
    g_test_add_func("/graph/onnx/external-data", test_external_data);
    return g_test_run();
}
