/* Traces: Chrome trace JSON written and read back equal, valid JSON with one slice per op, the
 * SQLite tables, and the gnuplot Gantt chart. */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <sqlite3.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/timeline.h"

static PsimTimeline *sample(void)
{
    const char *devs[] = {"/job:localhost/replica:0/task:0/device:CPU:0",
                          "/job:localhost/replica:0/task:0/device:CPU:1"};
    PsimTimeline *t = psim_timeline_new("g \"q\"", "sim", 2, devs);
    psim_timeline_op_add(t, "conv1", "Conv", 0, 0, 0, 0, 12.5);
    psim_timeline_op_add(t, "relu1", "Relu", 1, 0, 0, 12.5, 13);
    psim_timeline_op_add(t, "fc", "Gemm", 3, 1, 0, 20.25, 30);
    psim_timeline_xfer_add(t, "recv_relu1", "0;1;relu1:0", 0, 0, 1, 13, 20.25, 4096);
    t->step_time_us = 30;
    t->critical_path_us = 29;
    t->peak_memory[0] = 1000;
    t->peak_memory[1] = 5000;
    return t;
}

static void test_chrome_roundtrip(void)
{
    g_autoptr(PsimTimeline) t = sample();
    gsize len;
    g_autofree char *json = psim_timeline_to_chrome(t, &len);
    /* Valid JSON, every op exactly once as an "X" slice of cat op, a flow pair. */
    g_autoptr(JsonParser) p = json_parser_new();
    g_assert_true(json_parser_load_from_data(p, json, (gssize)len, NULL));
    JsonArray *ev = json_object_get_array_member(json_node_get_object(json_parser_get_root(p)), "traceEvents");
    int ops = 0, flows = 0, conv = 0;
    for (guint i = 0; i < json_array_get_length(ev); i++) {
        JsonObject *e = json_array_get_object_element(ev, i);
        const char *ph = json_object_get_string_member(e, "ph");
        if (!strcmp(ph, "X") && !strcmp(json_object_get_string_member(e, "cat"), "op")) {
            ops++;
            conv += !strcmp(json_object_get_string_member(e, "name"), "conv1");
        }
        flows += !strcmp(ph, "s") || !strcmp(ph, "f");
    }
    g_assert_cmpint(ops, ==, 3);
    g_assert_cmpint(conv, ==, 1);
    g_assert_cmpint(flows, ==, 2);
    GError *err = NULL;
    g_autoptr(PsimTimeline) r = psim_timeline_parse_chrome("t.json", json, len, &err);
    g_assert_no_error(err);
    g_assert_cmpstr(r->graph, ==, "g \"q\"");
    g_assert_cmpint(r->ops->len, ==, 3);
    g_assert_cmpint(r->xfers->len, ==, 1);
    g_assert_cmpfloat(r->step_time_us, ==, 30);
    g_assert_cmpuint(r->peak_memory[1], ==, 5000);
    PsimTimelineOp *fc = &g_array_index(r->ops, PsimTimelineOp, 2);
    g_assert_cmpstr(fc->name, ==, "fc");
    g_assert_cmpfloat(fc->start, ==, 20.25);
    g_assert_cmpfloat(fc->end, ==, 30);
    PsimTimelineXfer *x = &g_array_index(r->xfers, PsimTimelineXfer, 0);
    g_assert_cmpuint(x->bytes, ==, 4096);
    g_assert_cmpint(x->src, ==, 0);
    g_assert_cmpint(x->dst, ==, 1);
    /* Writing what was read gives the same text. */
    g_autofree char *again = psim_timeline_to_chrome(r, NULL);
    g_assert_cmpstr(again, ==, json);
}

static void test_chrome_errors(void)
{
    const char *bad[] = {"{", "[]", "{\"traceEvents\": []}",
                         /* one string over two lines (parenthesised for clang) */
                         ("{\"otherData\": {\"placesim\": {\"devices\": [\"CPU:0\"]}}, \"traceEvents\": "
                          "[{\"ph\": \"X\", \"cat\": \"op\", \"name\": \"a\", \"pid\": 7, \"ts\": 0, \"dur\": 1, \"args\": {}}]}")};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        GError *err = NULL;
        g_assert_null(psim_timeline_parse_chrome("bad.json", bad[i], strlen(bad[i]), &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_true(g_str_has_prefix(err->message, "bad.json: "));
        g_clear_error(&err);
    }
}

/* Wrong-typed trace fields are errors naming the file and the event, not Json-CRITICALs (the
 * suite runs with fatal criticals) or silent zeros; deep nesting and /dev/zero end at once. */
static void test_chrome_typed(void)
{
#define PS(x) "{\"otherData\": {\"placesim\": {\"devices\": [\"CPU:0\"]" x "}}, \"traceEvents\": "
#define EV(x) PS("") "[{\"ph\": \"X\", \"cat\": \"op\", \"name\": \"a\", \"pid\": 0, \"ts\": 0, " \
                     "\"dur\": 1, " x "}]}"
    static const char *const cases[][2] = {
        {PS(", \"step_time_us\": \"fast\"") "[]}", "'step_time_us'"},
        {PS(", \"graph\": {}") "[]}", "'graph'"},
        {PS(", \"peak_memory_bytes\": [{}]") "[]}", "peak_memory_bytes"},
        {"{\"otherData\": {\"placesim\": {\"devices\": [{}]}}, \"traceEvents\": []}", "devices"},
        {"{\"otherData\": {\"placesim\": []}, \"traceEvents\": []}", "'placesim'"},
        {EV("\"args\": {\"op\": {}}"), "traceEvents[0].args: field 'op'"},
        {EV("\"args\": {\"node\": \"x\"}"), "traceEvents[0].args: field 'node'"},
        {EV("\"args\": {}, \"tid\": []"), "traceEvents[0]: field 'tid'"},
        {EV("\"args\": []"), "traceEvents[0]: field 'args'"},
        {PS("") "[{\"ph\": {}, \"cat\": \"op\"}]}", "traceEvents[0]: field 'ph'"},
        {PS("") "[{\"ph\": \"X\", \"cat\": \"op\", \"name\": \"a\", \"pid\": 0, \"ts\": \"0\", "
                "\"dur\": 1, \"args\": {}}]}", "traceEvents[0]: field 'ts'"},
    };
#undef EV
#undef PS
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;
        g_assert_null(psim_timeline_parse_chrome("bad.json", cases[i][0], strlen(cases[i][0]), &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!g_str_has_prefix(err->message, "bad.json: ") || !strstr(err->message, cases[i][1]))
            g_error("case %zu: '%s' lacks the file or '%s'", i, err->message, cases[i][1]);
        g_clear_error(&err);
    }
    GError *err = NULL;
    GString *deep = g_string_new("{\"traceEvents\": ");
    for (int i = 0; i < 100000; i++)
        g_string_append_c(deep, '[');
    g_assert_null(psim_timeline_parse_chrome("deep.json", deep->str, deep->len, &err));
    g_assert_nonnull(strstr(err->message, "deep.json: JSON nested deeper than 512 levels"));
    g_clear_error(&err);
    g_string_free(deep, TRUE);
    g_assert_null(psim_timeline_load_chrome("/dev/zero", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
}

static void test_sqlite(void)
{
    g_autoptr(PsimTimeline) t = sample();
    g_autofree char *dir = g_dir_make_tmp("psim-traces-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "t.sqlite", NULL);
    GError *err = NULL;
    g_assert_cmpint(psim_timeline_save_sqlite(t, path, "a", &err), ==, 1);
    g_assert_cmpint(psim_timeline_save_sqlite(t, path, "b", &err), ==, 2);
    g_assert_no_error(err);
    sqlite3 *db;
    g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "SELECT count(*), sum(end_us - start_us) FROM ops WHERE run = 2", -1, &st, NULL);
    g_assert_cmpint(sqlite3_step(st), ==, SQLITE_ROW);
    g_assert_cmpint(sqlite3_column_int(st, 0), ==, 3);
    g_assert_cmpfloat(sqlite3_column_double(st, 1), ==, 12.5 + 0.5 + 9.75);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "SELECT bytes FROM transfers WHERE run = 1", -1, &st, NULL);
    g_assert_cmpint(sqlite3_step(st), ==, SQLITE_ROW);
    g_assert_cmpint(sqlite3_column_int(st, 0), ==, 4096);
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* A file that is not SQLite is refused as bad input. */
    g_autofree char *junk = g_build_filename(dir, "junk.sqlite", NULL);
    g_file_set_contents(junk, "this is not a database at all, not even close.......", -1, NULL);
    g_assert_cmpint(psim_timeline_save_sqlite(t, junk, "x", &err), ==, -1);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_unlink(path);
    g_unlink(junk);
    g_autofree char *wal = g_strconcat(path, "-wal", NULL), *shm = g_strconcat(path, "-shm", NULL);
    g_unlink(wal);
    g_unlink(shm);
    g_rmdir(dir);
}

static void test_gantt(void)
{
    g_autofree char *gnuplot = g_find_program_in_path("gnuplot");
    if (!gnuplot) {
        g_test_skip("gnuplot is not installed");
        return;
    }
    g_autoptr(PsimTimeline) t = sample();
    g_autofree char *dir = g_dir_make_tmp("psim-gantt-XXXXXX", NULL);
    const char *exts[] = {"png", "svg"};
    for (int i = 0; i < 2; i++) {
        g_autofree char *name = g_strdup_printf("g.%s", exts[i]);
        g_autofree char *path = g_build_filename(dir, name, NULL);
        GError *err = NULL;
        g_assert_true(psim_timeline_plot_gantt(t, path, "test", &err));
        g_assert_no_error(err);
        g_autofree char *data = NULL;
        gsize len = 0;
        g_assert_true(g_file_get_contents(path, &data, &len, NULL));
        g_assert_cmpuint(len, >, 1000);
        if (i == 0)
            g_assert_cmpint(memcmp(data, "\x89PNG", 4), ==, 0);
        else
            g_assert_nonnull(strstr(data, "<svg"));
        g_unlink(path);
    }
    GError *err = NULL;
    g_assert_false(psim_timeline_plot_gantt(t, "x.gif", NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);
    g_rmdir(dir);
}

/* Measured = simulated with conv1 twice as long and fc missing: step error and rows follow. */
static void test_compare(void)
{
    g_autoptr(PsimTimeline) sim = sample();
    const char *devs[] = {sim->devices[0], sim->devices[1]};
    g_autoptr(PsimTimeline) run = psim_timeline_new("g", "run", 2, devs);
    psim_timeline_op_add(run, "conv1", "Conv", 0, 0, 0, 0, 25);
    psim_timeline_op_add(run, "relu1", "Relu", 1, 0, 0, 25, 25.5);
    psim_timeline_op_add(run, "extra", "Add", 9, 1, 0, 26, 27);
    run->step_time_us = 40;
    PsimCompare c;
    GError *err = NULL;
    g_assert_true(psim_timeline_compare(sim, run, &c, &err));
    g_assert_cmpfloat(c.error_pct, ==, -25);
    g_assert_cmpint(c.n_matched, ==, 2);
    g_assert_cmpint(c.n_only_sim, ==, 1);
    g_assert_cmpint(c.n_only_run, ==, 1);
    g_assert_cmpstr(c.rows[0].name, ==, "conv1");
    g_assert_cmpfloat(c.rows[0].sim_us, ==, 12.5);
    g_assert_cmpfloat(c.rows[0].run_us, ==, 25);
    g_assert_cmpfloat(c.median_abs_op_error_pct, ==, 50);
    g_autofree char *gnuplot = g_find_program_in_path("gnuplot");
    if (gnuplot) {
        g_autofree char *dir = g_dir_make_tmp("psim-cmp-XXXXXX", NULL);
        g_autofree char *path = g_build_filename(dir, "c.png", NULL);
        g_assert_true(psim_compare_plot(sim, run, &c, path, &err));
        g_assert_no_error(err);
        g_assert_true(g_file_test(path, G_FILE_TEST_EXISTS));
        g_unlink(path);
        g_rmdir(dir);
    }
    psim_compare_clear(&c);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/traces/chrome-roundtrip", test_chrome_roundtrip);
    g_test_add_func("/traces/chrome-errors", test_chrome_errors);
    g_test_add_func("/traces/chrome-typed", test_chrome_typed);
    g_test_add_func("/traces/sqlite", test_sqlite);
    g_test_add_func("/traces/gantt", test_gantt);
    g_test_add_func("/traces/compare", test_compare);
    return g_test_run();
}
