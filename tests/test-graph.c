/* Tests of the graph IR core: building, refs, finalize errors, topological order, critical
 * path, and the JSON format (round trip and errors). */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static PsimGraph *load_str(const char *json, GError **err)
{
    return psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json), NULL, err);
}

static void test_build_topo(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("t");
    GError *err = NULL;
    PsimNode *c = psim_graph_node_add(g, "c", "Task", &err);
    PsimNode *a = psim_graph_node_add(g, "a", "Task", &err);
    PsimNode *b = psim_graph_node_add(g, "b", "Task", &err);
    g_assert_no_error(err);
    psim_graph_node_outputs_set(g, a, 1);
    psim_graph_node_outputs_set(g, b, 1);
    psim_graph_node_input_add_ref(g, b, "a:0");
    psim_graph_node_input_add_ref(g, c, "b");
    psim_graph_node_input_add_ref(g, c, "^a");
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    g_assert_cmpint(psim_graph_n_edges(g), ==, 3);
    g_autofree int32_t *order = psim_graph_topo_order(g, &err);
    g_assert_nonnull(order);
    g_assert_cmpint(order[0], ==, a->id);
    g_assert_cmpint(order[1], ==, b->id);
    g_assert_cmpint(order[2], ==, c->id);
    double cost[3] = {[0] = 5, [1] = 2, [2] = 3};
    int32_t *path = NULL, np = 0;
    double cp = psim_graph_critical_path(g, cost, NULL, NULL, &path, &np, &err);
    g_assert_cmpfloat(cp, ==, 10);
    g_assert_cmpint(np, ==, 3);
    g_free(path);
    g_assert_null(psim_graph_node_add(g, "a", "Task", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
}

static void test_cycle(void)
{
    GError *err = NULL;
    PsimGraph *g = load_str("{\"format\": \"placesim.graph/1\", \"nodes\": ["
                            "{\"name\": \"a\", \"op\": \"Task\", \"inputs\": [\"c:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"b\", \"op\": \"Task\", \"inputs\": [\"a:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"c\", \"op\": \"Task\", \"inputs\": [\"b:0\"], \"outputs\": [{\"bytes\": 4}]},"
                            "{\"name\": \"d\", \"op\": \"Task\", \"inputs\": [\"c:0\"]}]}",
                            &err);
    g_assert_null(g);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "cycle"));
    g_assert_true(strstr(err->message, "'a'") || strstr(err->message, "'b'") || strstr(err->message, "'c'"));
    g_clear_error(&err);
}

static void test_bad_refs(void)
{
    static const char *const cases[][2] = {
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\", \"inputs\": [\"zz:0\"]}]}", "missing node"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\", \"outputs\": [{\"bytes\": 1}]}, {\"name\": \"b\", \"op\": \"Task\", \"inputs\": [\"a:3\"]}]}", "out of range"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Task\"}, {\"name\": \"a\", \"op\": \"Task\"}]}", "two nodes"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1048576, 1048576, 1024]}]}]}", "2^36"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"a\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [-5]}]}]}", "negative"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"op\": \"Task\"}]}", "'name'"},
        {"{\"format\": \"placesim.graph/2\", \"nodes\": []}", "format"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [", "not valid JSON"},
        {"{\"format\": \"placesim.graph/1\", \"nodes\": [{\"name\": \"t\", \"op\": \"Task\", \"cost_us\": {\"P1\": -3}}]}", "cost_us"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        PsimGraph *g = load_str(cases[i][0], &err);
        g_assert_null(g);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!strstr(err->message, cases[i][1]))
            g_error("case %zu: '%s' lacks '%s'", i, err->message, cases[i][1]);
        g_assert_true(g_str_has_prefix(err->message, "t.json: "));
        g_clear_error(&err);
    }
}

static void test_json_roundtrip(void)
{
    const char *src =
        "{\"format\": \"placesim.graph/1\", \"name\": \"tiny\",\n"
        " \"nodes\": [\n"
        "  {\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [32, 64]}]},\n"
        "  {\"name\": \"w\", \"op\": \"Const\", \"attrs\": {\"fill\": 0.5, \"k\": 2, \"s\": \"hi\", \"l\": [1, 2], \"f\": {\"floats\": [1.0, 2.5]},"
        "    \"dt\": {\"dtype\": \"int64\"}, \"sh\": {\"shape\": [2, null]}, \"t\": {\"tensor\": {\"dtype\": \"int64\", \"shape\": [2], \"data\": [3, 4]}}},"
        "   \"outputs\": [{\"dtype\": \"float32\", \"shape\": [64, 64]}]},\n"
        "  {\"name\": \"y\", \"op\": \"MatMul\", \"inputs\": [\"x:0\", \"w:0\"], \"device\": \"CPU:*\"},\n"
        "  {\"name\": \"t\", \"op\": \"Task\", \"inputs\": [\"y:0\", \"^x\"], \"outputs\": [{\"bytes\": 18}],\n"
        "   \"cost_us\": {\"P1\": 14, \"P2\": 16.25, \"GPU\": 9}}\n"
        " ]}";
    GError *err = NULL;
    g_autoptr(PsimGraph) g1 = load_str(src, &err);
    g_assert_no_error(err);
    gsize l1, l2;
    g_autofree char *e1 = psim_export_json(g1, &l1);
    g_autoptr(PsimGraph) g2 = load_str(e1, &err);
    g_assert_no_error(err);
    g_autofree char *e2 = psim_export_json(g2, &l2);
    g_assert_cmpstr(e1, ==, e2);
    PsimNode *t = psim_graph_node_find(g2, "t");
    double us = 0;
    g_assert_true(psim_node_cost_lookup(t, "/job:localhost/replica:0/task:0/device:P2:0", "P2", &us));
    g_assert_cmpfloat(us, ==, 16.25);
    g_assert_cmpint(t->outputs[0].bytes, ==, 18);
    g_assert_cmpint(t->n_controls, ==, 1);
    PsimNode *w = psim_graph_node_find(g2, "w");
    g_assert_cmpfloat(psim_node_attr_float(w, "fill", 0), ==, 0.5);
    g_assert_cmpint(psim_node_attr(w, "fill")->type, ==, PSIM_ATTR_FLOAT);
    g_assert_cmpint(psim_node_attr(w, "f")->type, ==, PSIM_ATTR_FLOATS);
    g_assert_cmpint(psim_node_attr(w, "k")->type, ==, PSIM_ATTR_INT);
    g_assert_cmpint(psim_node_attr(w, "t")->v.t->dtype, ==, PSIM_DTYPE_INT64);
    g_assert_cmpint(w->outputs[0].bytes, ==, 64 * 64 * 4);
    g_assert_cmpstr(psim_graph_node_find(g2, "y")->device, ==, "CPU:*");
}

/* The one median every module uses: odd and even counts, unsorted input (sorted in place),
 * ties, one value, none. */
static void test_stats_median(void)
{
    double odd[] = {5, 1, 4, 2, 3};
    g_assert_cmpfloat(psim_stats_median(odd, 5), ==, 3);
    for (int i = 0; i < 5; i++)
        g_assert_cmpfloat(odd[i], ==, i + 1);
    double even[] = {10, -2, 7, 1};
    g_assert_cmpfloat(psim_stats_median(even, 4), ==, 4);
    double ties[] = {2, 2, 9, 2};
    g_assert_cmpfloat(psim_stats_median(ties, 4), ==, 2);
    double one[] = {42};
    g_assert_cmpfloat(psim_stats_median(one, 1), ==, 42);
    g_assert_true(isnan(psim_stats_median(one, 0)));
    /* Trimmed mean: 10 values, one dropped at each end; a bimodal set follows the shares. */
    double ten[] = {100, 1, 2, 3, 4, 5, 6, 7, 8, -50};
    g_assert_cmpfloat_with_epsilon(psim_stats_trimmed_mean(ten, 10, 0.1), 36.0 / 8, 1e-12);
    double plain[] = {4, 1, 7};
    g_assert_cmpfloat_with_epsilon(psim_stats_trimmed_mean(plain, 3, 0.1), 4, 1e-12);
    double two[] = {1, 3};
    g_assert_cmpfloat(psim_stats_trimmed_mean(two, 2, 0.5), ==, 2); /* nothing left: median */
    double mix[20];
    for (int i = 0; i < 20; i++)
        mix[i] = i < 9 ? 60 : 90; /* 9 fast, 11 slow: the median is slow, the mean in between */
    g_assert_cmpfloat(psim_stats_median(mix, 20), ==, 90);
    g_assert_cmpfloat_with_epsilon(psim_stats_trimmed_mean(mix, 20, 0.1), (7 * 60 + 9 * 90) / 16.0, 1e-12);
    g_assert_true(isnan(psim_stats_trimmed_mean(one, 0, 0.1)));
    double v[] = {3, -1, 2};
    psim_stats_sort(v, 3);
    g_assert_cmpfloat(v[0], ==, -1);
    g_assert_cmpfloat(v[2], ==, 3);
    double a = 1, b = 2;
    g_assert_cmpint(psim_stats_cmp_double(&a, &b), <, 0);
    g_assert_cmpint(psim_stats_cmp_double(&b, &a), >, 0);
    g_assert_cmpint(psim_stats_cmp_double(&a, &a), ==, 0);
}

/* Wrong-typed fields and out-of-range numbers are errors naming the file, the node and the
 * field; none may raise a Json-CRITICAL (the suite runs with fatal criticals) or pass silently. */
static void test_json_typed(void)
{
#define G "{\"format\": \"placesim.graph/1\", "
#define N1 G "\"nodes\": [{\"name\": \"t\", \"op\": \"Task\", "
    static const char *const cases[][2] = {
        {G "\"name\": {}, \"nodes\": []}", "'name'"},
        {"{\"format\": 1, \"nodes\": []}", "'format'"},
        {G "\"nodes\": [], \"inputs\": \"x\"}", "'inputs'"},
        {G "\"nodes\": [{\"name\": \"t\", \"op\": \"Task\"}], \"inputs\": [{}]}", "inputs[0]"},
        {G "\"nodes\": [{\"name\": \"t\", \"op\": \"Task\"}], \"outputs\": [[]]}", "outputs[0]"},
        {G "\"nodes\": [], \"onnx_opset\": \"13\"}", "'onnx_opset'"},
        {N1 "\"domain\": {}}]}", "node 't': field 'domain'"},
        {N1 "\"parameter\": \"yes\"}]}", "node 't': field 'parameter'"},
        {N1 "\"outputs\": [{\"name\": 3}]}]}", "node 't': outputs[0]: field 'name'"},
        {N1 "\"outputs\": [{\"dtype\": []}]}]}", "node 't': outputs[0]: field 'dtype'"},
        {N1 "\"outputs\": [{\"bytes\": \"4\"}]}]}", "node 't': outputs[0]: field 'bytes'"},
        {N1 "\"outputs\": [{\"bytes\": 1e300}]}]}", "node 't': outputs[0]: field 'bytes'"},
        {N1 "\"cost_us\": {\"P\": \"fast\"}}]}", "node 't': cost_us: field 'P'"},
        {N1 "\"cost_us\": {\"P\": {}}}]}", "node 't': cost_us: field 'P'"},
        {N1 "\"cost_us\": {\"P\": 1e308}}]}", "out of range"},
        {N1 "\"cost_us\": {\"P\": \"inf\"}}]}", "node 't': cost_us: field 'P'"},
        {N1 "\"attrs\": {\"t\": {\"tensor\": {\"dtype\": {}, \"shape\": []}}}}]}", "dtype"},
        {N1 "\"attrs\": {\"t\": {\"tensor\": {\"dtype\": \"int8\", \"data_b64\": 5}}}}]}", "data_b64"},
        {N1 "\"attrs\": {\"d\": {\"dtype\": {}}}}]}", "unknown dtype"},
    };
#undef N1
#undef G
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        PsimGraph *g = load_str(cases[i][0], &err);
        g_assert_null(g);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!g_str_has_prefix(err->message, "t.json: ") || !strstr(err->message, cases[i][1]))
            g_error("case %zu: '%s' lacks the file or '%s'", i, err->message, cases[i][1]);
        g_clear_error(&err);
    }
}

/* JSON nested 100,000 levels deep overflowed json-glib's recursive parser: the scan before it
 * refuses more than PSIM_JSON_MAX_DEPTH levels, counting brackets outside strings only. */
static void test_json_depth(void)
{
    GError *err = NULL;
    GString *s = g_string_new(NULL);
    for (int i = 0; i < 100000; i++)
        g_string_append_c(s, '[');
    g_assert_null(psim_json_parse("deep.json", s->str, s->len, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_true(g_str_has_prefix(err->message, "deep.json: JSON nested deeper than 512 levels"));
    g_clear_error(&err);
    /* The graph reader takes the same path. */
    g_string_prepend(s, "{\"format\": \"placesim.graph/1\", \"nodes\": ");
    g_assert_null(load_str(s->str, &err));
    g_assert_nonnull(strstr(err->message, "nested deeper than 512"));
    g_clear_error(&err);
    /* 512 levels parse; 513 do not. */
    for (int depth = 512; depth <= 513; depth++) {
        g_string_truncate(s, 0);
        for (int i = 0; i < depth; i++)
            g_string_append_c(s, '[');
        for (int i = 0; i < depth; i++)
            g_string_append_c(s, ']');
        JsonNode *root = psim_json_parse("d.json", s->str, s->len, &err);
        if (depth == 512) {
            g_assert_no_error(err);
            g_assert_nonnull(root);
            json_node_unref(root);
        } else {
            g_assert_null(root);
            g_clear_error(&err);
        }
    }
    /* Brackets inside strings, escaped quotes included, are text. */
    g_string_assign(s, "{\"a\": \"\\\"");
    for (int i = 0; i < 1000; i++)
        g_string_append_c(s, '[');
    g_string_append(s, "\"}");
    JsonNode *root = psim_json_parse("s.json", s->str, s->len, &err);
    g_assert_no_error(err);
    json_node_unref(root);
    g_string_free(s, TRUE);
    /* json-glib's errors become one line naming the file, without its "<data>". */
    const char *bad = "{\"a\":\n 1,,}";
    g_assert_null(psim_json_parse("bad.json", bad, strlen(bad), &err));
    g_assert_true(g_str_has_prefix(err->message, "bad.json: not valid JSON: line 2"));
    g_assert_null(strchr(err->message, '\n'));
    g_assert_null(strstr(err->message, "<data>"));
    g_clear_error(&err);
    g_assert_null(psim_json_parse("nul.json", "{\"a\": \"\0\"}", 10, &err));
    g_assert_nonnull(strstr(err->message, "control byte 0x00"));
    g_clear_error(&err);
}

static const char *sniff_no_nul(const char *path, const guint8 *head, gsize len)
{
    (void)path;
    return len && head[0] == 0 ? "starts with NUL" : NULL;
}

/* psim_input_read: regular files whole, streams bounded, /dev/zero stopped by the sniff at once
 * (issue: /dev/zero as a cluster, plan or trace never ended). */
static void test_input_read(void)
{
    GError *err = NULL;
    g_autofree char *dir = g_dir_make_tmp("psim-io-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "f.txt", NULL);
    g_assert_true(g_file_set_contents(path, "hello", 5, NULL));
    GBytes *b = psim_input_read(path, 5, NULL, &err);
    g_assert_no_error(err);
    gsize len;
    const char *data = g_bytes_get_data(b, &len);
    g_assert_cmpmem(data, len, "hello", 5);
    g_bytes_unref(b);
    /* Over the limit: refused before reading. */
    g_assert_null(psim_input_read(path, 4, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_true(g_str_has_prefix(err->message, path));
    g_clear_error(&err);
    /* A directory, a missing file. */
    g_assert_null(psim_input_read(dir, 1 << 20, NULL, &err));
    g_assert_nonnull(strstr(err->message, "directory"));
    g_clear_error(&err);
    g_autofree char *missing = g_build_filename(dir, "missing", NULL);
    g_assert_null(psim_input_read(missing, 1 << 20, NULL, &err));
    g_assert_true(g_str_has_prefix(err->message, missing));
    g_clear_error(&err);
    /* An endless stream: the sniff stops it at its first bytes, the limit without one. */
    gint64 t0 = g_get_monotonic_time();
    g_assert_null(psim_input_read("/dev/zero", PSIM_INPUT_MAX_BYTES, sniff_no_nul, &err));
    g_assert_cmpstr(err->message, ==, "/dev/zero: starts with NUL");
    g_clear_error(&err);
    g_assert_null(psim_input_read("/dev/zero", 1 << 20, NULL, &err));
    g_assert_true(g_str_has_prefix(err->message, "/dev/zero: larger than 1 MiB"));
    g_clear_error(&err);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC);
    /* Every JSON file kind goes through psim_json_load. */
    g_assert_null(psim_json_load("/dev/zero", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_assert_null(psim_graph_load("/dev/zero", NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_remove(path);
    g_rmdir(dir);
}

/* Generated data (graph/fill.c): N(0, 1) from a seed, reproducible and different per seed and
 * per input name; zeros, ones, the arange(n)/n ramp; other dtypes zeroed; names round-trip. */
static void test_fill(void)
{
    int64_t d[2] = {1000, 101}; /* odd: the last normal of a Box-Muller pair is dropped */
    g_autoptr(PsimTensor) a = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    g_autoptr(PsimTensor) b = psim_tensor_new(PSIM_DTYPE_FLOAT32, 2, d, NULL);
    g_autoptr(PsimTensor) c = psim_tensor_new(PSIM_DTYPE_FLOAT64, 2, d, NULL);
    uint64_t seed = psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, "input");
    g_assert_cmpuint(seed, ==, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, "input"));
    g_assert_cmpuint(seed, !=, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, "input2"));
    g_assert_cmpuint(seed, !=, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED + 1, "input"));
    psim_tensor_fill(a, PSIM_TENSOR_FILL_RANDOM, seed);
    psim_tensor_fill(b, PSIM_TENSOR_FILL_RANDOM, seed);
    psim_tensor_fill(c, PSIM_TENSOR_FILL_RANDOM, seed);
    g_assert_cmpmem(a->data, a->nbytes, b->data, b->nbytes);
    const float *x = a->data;
    double sum = 0, sq = 0, mx = 0;
    int64_t neg = 0, beyond3 = 0;
    for (int64_t i = 0; i < a->n_elems; i++) {
        g_assert_true(isfinite(x[i]));
        g_assert_cmpfloat(x[i], ==, (float)((double *)c->data)[i]); /* one stream, two dtypes */
        sum += x[i], sq += (double)x[i] * x[i];
        mx = MAX(mx, fabs(x[i]));
        neg += x[i] < 0;
        beyond3 += fabs(x[i]) > 3;
    }
    double n = (double)a->n_elems, mean = sum / n, sd = sqrt(sq / n - mean * mean);
    /* 101000 draws: the mean's standard error is 0.003, the sd's 0.0022. */
    g_assert_cmpfloat(fabs(mean), <, 0.015);
    g_assert_cmpfloat(fabs(sd - 1), <, 0.011);
    g_assert_cmpfloat(fabs(neg / n - 0.5), <, 0.01);
    g_assert_cmpfloat(beyond3 / n, >, 0.0015); /* 0.27% of N(0,1) lies beyond 3 sd */
    g_assert_cmpfloat(beyond3 / n, <, 0.0040);
    g_assert_cmpfloat(mx, <, 6.5);
    psim_tensor_fill(b, PSIM_TENSOR_FILL_RANDOM, seed + 1);
    g_assert_true(memcmp(a->data, b->data, a->nbytes) != 0);

    psim_tensor_fill(a, PSIM_TENSOR_FILL_RAMP, 0);
    for (int64_t i = 0; i < a->n_elems; i += 997)
        g_assert_cmpfloat(x[i], ==, (float)((double)i / n));
    psim_tensor_fill(a, PSIM_TENSOR_FILL_ONES, 0);
    g_assert_cmpfloat(x[0], ==, 1.0f);
    g_assert_cmpfloat(x[a->n_elems - 1], ==, 1.0f);
    psim_tensor_fill(a, PSIM_TENSOR_FILL_ZEROS, 0);
    g_assert_cmpfloat(x[0], ==, 0.0f);
    g_assert_cmpfloat(x[a->n_elems - 1], ==, 0.0f);
    /* Integer tensors stay valid indices whatever the fill. */
    g_autoptr(PsimTensor) ids = psim_tensor_new(PSIM_DTYPE_INT64, 2, d, NULL);
    memset(ids->data, 0x5A, ids->nbytes);
    psim_tensor_fill(ids, PSIM_TENSOR_FILL_RANDOM, seed);
    g_assert_cmpint(psim_tensor_get_i64(ids, 0), ==, 0);
    g_assert_cmpint(psim_tensor_get_i64(ids, ids->n_elems - 1), ==, 0);

    const char *kinds[] = {"random", "zeros", "ones", "ramp"};
    for (size_t k = 0; k < G_N_ELEMENTS(kinds); k++) {
        PsimTensorFill f;
        g_assert_true(psim_tensor_fill_from_name(kinds[k], &f));
        g_assert_cmpstr(psim_tensor_fill_name(f), ==, kinds[k]);
    }
    PsimTensorFill f;
    g_assert_false(psim_tensor_fill_from_name("normal", &f));
    g_assert_false(psim_tensor_fill_from_name(NULL, &f));
}

/* psim_tensor_set_f64 stores every numeric dtype, saturating integers (NaN as 0), and
 * psim_tensor_get_f64 reads it back. */
static void test_tensor_set_f64(void)
{
    const struct {
        PsimDType dt;
        double in, want;
    } cases[] = {
        {PSIM_DTYPE_FLOAT32, 0.1, (double)0.1f},  {PSIM_DTYPE_FLOAT64, -2.5, -2.5},
        {PSIM_DTYPE_INT32, 3e9, 2147483647},      {PSIM_DTYPE_INT32, -3e9, -2147483648.0},
        {PSIM_DTYPE_INT32, -7.9, -7},             {PSIM_DTYPE_INT32, NAN, 0},
        {PSIM_DTYPE_UINT8, -1, 0},                {PSIM_DTYPE_UINT8, 300, 255},
        {PSIM_DTYPE_INT8, -200, -128},            {PSIM_DTYPE_INT16, 40000, 32767},
        {PSIM_DTYPE_UINT16, 70000, 65535},        {PSIM_DTYPE_UINT32, 5e9, 4294967295.0},
        {PSIM_DTYPE_INT64, 1e30, 9223372036854775807.0}, {PSIM_DTYPE_INT64, -1e30, -9223372036854775808.0},
        {PSIM_DTYPE_UINT64, -5, 0},               {PSIM_DTYPE_BOOL, 0.5, 1},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        int64_t d[1] = {1};
        g_autoptr(PsimTensor) t = psim_tensor_new(cases[i].dt, 1, d, NULL);
        psim_tensor_set_f64(t, 0, cases[i].in);
        g_assert_cmpfloat(psim_tensor_get_f64(t, 0), ==, cases[i].want);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/build-topo", test_build_topo);
    g_test_add_func("/graph/fill", test_fill);
    g_test_add_func("/graph/tensor-set-f64", test_tensor_set_f64);
    g_test_add_func("/graph/cycle", test_cycle);
    g_test_add_func("/graph/bad-refs", test_bad_refs);
    g_test_add_func("/graph/json-roundtrip", test_json_roundtrip);
    g_test_add_func("/graph/json-typed", test_json_typed);
    g_test_add_func("/graph/json-depth", test_json_depth);
    g_test_add_func("/graph/input-read", test_input_read);
    g_test_add_func("/graph/stats/median", test_stats_median);
    return g_test_run();
}
