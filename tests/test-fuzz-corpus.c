/* Corpus regression test: every file under tests/fuzz/corpus/<target>/ (the fuzzers' seeds and
 * any crash regressions) is fed to psim_graph_load_data in its target's format. Nothing may
 * crash; files named ok-* must import; files named bad-* must fail; every failure is one INPUT
 * error line that starts with the file's path. Runs in the normal build (and under ASan/UBSan in
 * the sanitizer build). */
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"
#include "placesim/cluster.h"

/* Corpus folder (target name without "fuzz-") to format; "tf-pb" and "tf-pbtxt" name the
 * TensorFlow targets. */
static PsimFormat folder_format(const char *folder)
{
    if (g_str_has_prefix(folder, "tf-"))
        folder += 3;
    return psim_format_from_name(folder);
}

static void check_error(const GError *err, const char *path)
{
    g_assert_nonnull(err);
    g_assert_true(err->domain == PSIM_ERROR);
    g_assert_true(err->code == PSIM_ERROR_INPUT || err->code == PSIM_ERROR_UNSUPPORTED);
    g_autofree char *prefix = g_strconcat(path, ": ", NULL);
    if (!g_str_has_prefix(err->message, prefix) || strchr(err->message, '\n'))
        g_error("%s: error does not name the file on one line: '%s'", path, err->message);
}

/* The corpora of readers that are not graph importers: cluster and plan JSON. Returns 1 when
 * the file loads, 0 when it fails with a proper error; -1 when the folder is not one of them. */
static int run_other(const char *folder, const char *path, const guint8 *data, gsize len)
{
    GError *err = NULL;
    gboolean ok;
    if (!strcmp(folder, "cluster")) {
        PsimCluster *c = psim_cluster_parse(path, (const char *)data, len, &err);
        ok = c != NULL;
        psim_cluster_free(c);
    } else if (!strcmp(folder, "plan")) {
        PsimPlan *p = psim_plan_from_json(path, (const char *)data, len, &err);
        ok = p != NULL;
        psim_plan_free(p);
    } else {
        return -1;
    }
    if (!ok)
        check_error(err, path);
    g_clear_error(&err);
    return ok ? 1 : 0;
}

static int run_file(const char *path, const char *base, const char *folder, PsimFormat f,
                    gboolean training)
{
    g_autofree char *data = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &data, &len, NULL));
    /* A copy of exactly len bytes, without the NUL that g_file_get_contents adds, so that ASan
     * catches an importer reading past the end. */
    g_autofree guint8 *exact = g_memdup2(data, len ? len : 1);
    int other = run_other(folder, path, exact, len);
    if (other >= 0)
        return other;
    GError *err = NULL;
    PsimImportOptions opts = {.training = training};
    PsimGraph *g = psim_graph_load_data(path, f, exact, len, &opts, &err);
    if (g_str_has_prefix(base, "ok-") && !g)
        g_error("%s should import: %s", path, err->message);
    if (g_str_has_prefix(base, "bad-") && g)
        g_error("%s should fail to import", path);
    if (g) {
        g_autofree int32_t *order = psim_graph_topo_order(g, &err);
        g_assert_no_error(err);
        g_assert_nonnull(order);
        psim_graph_free(g);
        return 1;
    }
    check_error(err, path);
    g_clear_error(&err);
    return 0;
}

static void test_corpus(void)
{
    const char *src = g_getenv("PSIM_SRC");
    g_autofree char *root = g_build_filename(src ? src : "..", "tests", "fuzz", "corpus", NULL);
    g_autoptr(GDir) d = g_dir_open(root, 0, NULL);
    g_assert_nonnull(d);
    int n_files = 0, n_ok = 0, n_folders = 0;
    const char *folder;
    while ((folder = g_dir_read_name(d))) {
        g_autofree char *dir = g_build_filename(root, folder, NULL);
        /* Cost DBs are not graphs: tests/test-cost-db.c (/cost/db/corpus) replays them. */
        if (!g_file_test(dir, G_FILE_TEST_IS_DIR) || !strcmp(folder, "costdb"))
            continue;
        PsimFormat f = folder_format(folder);
        if (f == PSIM_FORMAT_UNKNOWN && strcmp(folder, "cluster") && strcmp(folder, "plan"))
            g_error("corpus folder '%s' names no format: add it to folder_format()", folder);
        n_folders++;
        g_autoptr(GDir) fd = g_dir_open(dir, 0, NULL);
        const char *base;
        while ((base = g_dir_read_name(fd))) {
            g_autofree char *path = g_build_filename(dir, base, NULL);
            if (!g_file_test(path, G_FILE_TEST_IS_REGULAR))
                continue;
            g_test_message("%s", path);
            n_ok += run_file(path, base, folder, f, FALSE);
            if (f == PSIM_FORMAT_PIPEDREAM)
                run_file(path, base, folder, f, TRUE);
            if (f == PSIM_FORMAT_ONNX) {
                /* The ONNX fuzzer also feeds its inputs to the TensorProto reader. */
                g_autofree char *data = NULL;
                gsize len = 0;
                g_assert_true(g_file_get_contents(path, &data, &len, NULL));
                GError *err = NULL;
                char *name = NULL;
                PsimTensor *t = psim_tensor_parse_pb(path, (const guint8 *)data, len, &name, &err);
                if (t)
                    psim_tensor_unref(t);
                else
                    check_error(err, path);
                g_clear_error(&err);
                g_free(name);
            }
            n_files++;
        }
    }
    g_test_message("%d files in %d folders, %d imported", n_files, n_folders, n_ok);
    g_assert_cmpint(n_folders, >=, 3);
    g_assert_cmpint(n_files, >=, 20);
    g_assert_cmpint(n_ok, >=, 6);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/fuzz/corpus", test_corpus);
    return g_test_run();
}
