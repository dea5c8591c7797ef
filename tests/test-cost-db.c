/* Tests of the cost DB: schema and migrations, rows and fingerprints, bad files (not SQLite,
 * corrupt, foreign, newer schema), two processes writing one DB at once, and the link fit. */
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <sqlite3.h>

#include "cost/db-private.h"
#include "placesim/cost.h"
#include "placesim/sim.h"

static char *tmp_dir;

static char *tmp_path(const char *name) { return g_build_filename(tmp_dir, name, NULL); }

static PsimCluster *two_cpus(const char *model0, const char *model1)
{
    PsimCluster *c = psim_cluster_new();
    int32_t a = psim_cluster_device_add(c, "CPU:0", "CPU", NULL);
    int32_t b = psim_cluster_device_add(c, "CPU:1", "CPU", NULL);
    psim_cluster_device(c, a)->description = g_strdup(model0);
    psim_cluster_device(c, b)->description = g_strdup(model1);
    return c;
}

static PsimTimingStats stats(double median)
{
    return (PsimTimingStats){.n = 7, .mean_us = median * 1.01, .stddev_us = median * 0.01,
                             .min_us = median * 0.98, .median_us = median};
}

/* A cost DB at path with n kernel rows of op `op` (distinct signatures), closed; returns its
 * bytes (g_free) and their count in *len. */
static char *filled_db(const char *path, int n, const char *op, gsize *len)
{
    GError *err = NULL;
    PsimCostDb *db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    PsimTimingStats s = stats(10);
    for (int i = 0; i < n; i++) {
        g_autofree char *sig = g_strdup_printf("%s(float32[%dx512])", op, i);
        g_assert_true(psim_cost_db_kernel_put(db, psim_cluster_device(c, 0), sig, op, "monotonic", &s, &err));
    }
    psim_cost_db_close(db);
    char *data = NULL;
    g_assert_true(g_file_get_contents(path, &data, len, NULL));
    return data;
}

static char *raw_query(const char *path, const char *sql)
{
    sqlite3 *db;
    g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
    sqlite3_stmt *st;
    g_assert_cmpint(sqlite3_prepare_v2(db, sql, -1, &st, NULL), ==, SQLITE_OK);
    char *out = NULL;
    if (sqlite3_step(st) == SQLITE_ROW)
        out = g_strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
    g_assert_cmpint(sqlite3_exec(db, sql, NULL, NULL, NULL), ==, SQLITE_OK);
    sqlite3_close(db);
}

static void test_rows(void)
{
    g_autofree char *path = tmp_path("rows.db");
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, PSIM_COST_DB_SCHEMA_VERSION);
    g_autofree char *mode = raw_query(path, "PRAGMA journal_mode");
    g_assert_cmpstr(mode, ==, "wal");

    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    PsimDevice *d0 = psim_cluster_device(c, 0), *d1 = psim_cluster_device(c, 1);
    PsimTimingStats s = stats(120), got;
    g_assert_false(psim_cost_db_kernel_has(db, d0, "MatMul(x)", &err));
    g_assert_true(psim_cost_db_kernel_put(db, d0, "MatMul(x)", "MatMul", "monotonic", &s, &err));
    g_assert_no_error(err);
    g_assert_true(psim_cost_db_kernel_has(db, d0, "MatMul(x)", &err));
    g_assert_true(psim_cost_db_kernel_get(db, d0, "MatMul(x)", &got, NULL, &err));
    g_assert_cmpint(got.n, ==, 7);
    g_assert_cmpfloat(got.median_us, ==, 120);
    g_assert_cmpfloat(got.min_us, ==, s.min_us);
    /* Replacing keeps one row per (signature, device). */
    s = stats(100);
    g_assert_true(psim_cost_db_kernel_put(db, d0, "MatMul(x)", "MatMul", "monotonic", &s, &err));
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, 1);
    g_assert_true(psim_cost_db_kernel_get(db, d0, "MatMul(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    /* A device of identical hardware borrows the row, but has none of its own. */
    g_assert_false(psim_cost_db_kernel_has(db, d1, "MatMul(x)", &err));
    g_assert_true(psim_cost_db_kernel_get(db, d1, "MatMul(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    s = stats(90);
    g_assert_true(psim_cost_db_kernel_put(db, d1, "MatMul(x)", "MatMul", "monotonic", &s, &err));
    g_assert_true(psim_cost_db_kernel_get(db, d1, "MatMul(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 90);
    g_assert_true(psim_cost_db_kernel_get(db, d0, "MatMul(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    g_assert_cmpint(psim_cost_db_count(db, "devices", &err), ==, 2);

    /* Another CPU model: another fingerprint, the rows are not used, and the caller learns why. */
    g_free(d0->description);
    d0->description = g_strdup("cpu B");
    gboolean other = FALSE;
    g_assert_false(psim_cost_db_kernel_get(db, d0, "MatMul(x)", &got, &other, &err));
    g_assert_no_error(err);
    g_assert_true(other);
    g_assert_false(psim_cost_db_kernel_get(db, d0, "Relu(x)", &got, &other, &err));
    g_assert_false(other);

    double v = 0;
    g_assert_false(psim_cost_db_calibration_get(db, d1, "gemm_gflops", &v, &err));
    g_assert_true(psim_cost_db_calibration_put(db, d1, "gemm_gflops", 42.5, "sgemm 1024", &err));
    g_assert_true(psim_cost_db_calibration_get(db, d1, "gemm_gflops", &v, &err));
    g_assert_cmpfloat(v, ==, 42.5);
    g_assert_no_error(err);
    /* Users read the DB with sqlite3: the view joins the device names. */
    g_autofree char *dev = raw_query(path, "SELECT device FROM kernel_times WHERE median_us = 90");
    g_assert_cmpstr(dev, ==, "/job:localhost/replica:0/task:0/device:CPU:1");
}

static void test_fingerprint(void)
{
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    PsimDevice *d = psim_cluster_device(c, 0);
    g_autoptr(PsimFingerprint) f1 = psim_fingerprint_new(d);
    g_autoptr(PsimFingerprint) f2 = psim_fingerprint_new(psim_cluster_device(c, 1));
    g_assert_cmpstr(f1->digest, ==, f2->digest);
    g_assert_cmpint(strlen(f1->digest), ==, 16);
    g_assert_cmpstr(f1->cpu_model, ==, "cpu A");
    g_assert_nonnull(strstr(f1->library_versions, "openblas="));
    g_assert_nonnull(strstr(f1->library_versions, " onednn="));
    d->n_cores = 4; /* more cores: other timings */
    g_autoptr(PsimFingerprint) f3 = psim_fingerprint_new(d);
    g_assert_cmpstr(f1->digest, !=, f3->digest);
}

static void test_migration(void)
{
    g_autofree char *path = tmp_path("v1.db");
    GError *err = NULL;
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    PsimTimingStats s = stats(55);
    PsimCostDb *db = psim__cost_db_open_version(path, 1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, 1);
    g_assert_true(psim_cost_db_kernel_put(db, psim_cluster_device(c, 0), "Relu(x)", "Relu", "monotonic", &s, &err));
    g_assert_cmpint(psim_cost_db_count(db, "link_fits", &err), ==, -1); /* no such table in v1 */
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_RUNTIME);
    g_clear_error(&err);
    psim_cost_db_close(db);

    db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, PSIM_COST_DB_SCHEMA_VERSION);
    PsimTimingStats got;
    g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, 0), "Relu(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 55);
    g_assert_cmpint(psim_cost_db_count(db, "link_fits", &err), ==, 0);
    g_assert_no_error(err);
    /* Version 3's weights column: '' on the old row. */
    g_autofree char *w = NULL;
    g_assert_true(psim_cost_db_kernel_get_weights(db, psim_cluster_device(c, 0), "Relu(x)", &w, &err));
    g_assert_cmpstr(w, ==, "");
    psim_cost_db_close(db);
    g_autofree char *v = raw_query(path, "SELECT value FROM meta WHERE key = 'schema_version'");
    g_assert_cmpstr(v, ==, "5");
}

/* A DB made at schema `version` with one row of `us` for (d, sig) (weights NULL: put without
 * the weights column), then opened again: migrated to the current version. */
static PsimCostDb *migrated(const char *path, int version, const PsimDevice *d, const char *sig, const char *op,
                            const char *weights, double us)
{
    GError *err = NULL;
    PsimTimingStats s = stats(us);
    PsimCostDb *db = psim__cost_db_open_version(path, version, &err);
    g_assert_no_error(err);
    if (weights)
        g_assert_true(psim_cost_db_kernel_put_weights(db, d, sig, op, "monotonic", weights, &s, &err));
    else
        g_assert_true(psim_cost_db_kernel_put(db, d, sig, op, "monotonic", &s, &err));
    g_assert_no_error(err);
    psim_cost_db_close(db);
    db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, PSIM_COST_DB_SCHEMA_VERSION);
    return db;
}

/* A version-2 DB (before the weights column) opens, keeps its rows, and takes modes. */
static void test_migration_v2(void)
{
    g_autofree char *path = tmp_path("v2.db");
    GError *err = NULL;
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    const PsimDevice *d = psim_cluster_device(c, 0);
    PsimTimingStats s = stats(70);
    PsimCostDb *db = migrated(path, 2, d, "Gemm(x)", "Gemm", NULL, 70);
    PsimTimingStats got;
    g_assert_true(psim_cost_db_kernel_get(db, d, "Gemm(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 70);
    g_autofree char *w = NULL;
    g_assert_true(psim_cost_db_kernel_get_weights(db, d, "Gemm(x)", &w, &err));
    g_assert_cmpstr(w, ==, "");
    g_assert_true(psim_cost_db_kernel_put_weights(db, d, "Gemm(x)", "Gemm", "monotonic", "cold", &s, &err));
    g_assert_no_error(err);
    psim_cost_db_close(db);
    /* The view shows the column. */
    g_autofree char *v = raw_query(path, "SELECT weights FROM kernel_times WHERE signature = 'Gemm(x)'");
    g_assert_cmpstr(v, ==, "cold");
}

/* A version-3 DB opens at version 4: old rows have no speed reference; new rows keep theirs, and
 * the cost model scales a referenced row to the device's current reference. */
static void test_migration_v3_ref(void)
{
    g_autofree char *path = tmp_path("v3.db");
    GError *err = NULL;
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    const PsimDevice *d = psim_cluster_device(c, 0);
    PsimTimingStats s = stats(100);
    PsimCostDb *db = migrated(path, 3, d, "Old(x)", "Relu", "warm", 100);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, PSIM_COST_DB_SCHEMA_VERSION);
    PsimTimingStats got;
    PsimSpeedRef ref;
    double w;
    g_assert_true(psim_cost_db_kernel_get_ref(db, d, "Old(x)", &got, &ref, &w, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    g_assert_cmpfloat(ref.gemm_us, ==, 0);
    g_assert_true(isnan(w));
    PsimSpeedRef then = {40, 80};
    g_assert_true(psim_cost_db_kernel_put_ref(db, d, "New(x)", "Relu", "monotonic", "cold", &then, 0.25, &s, &err));
    g_assert_no_error(err);
    g_assert_true(psim_cost_db_kernel_get_ref(db, d, "New(x)", &got, &ref, &w, NULL, &err));
    g_assert_cmpfloat(ref.gemm_us, ==, 40);
    g_assert_cmpfloat(ref.stream_us, ==, 80);
    g_assert_cmpfloat(w, ==, 0.25);
    /* An incomplete reference leaves the columns NULL. */
    PsimSpeedRef half = {40, 0};
    g_assert_true(psim_cost_db_kernel_put_ref(db, d, "Half(x)", "Relu", "monotonic", "cold", &half, 0.5, &s, &err));
    g_assert_true(psim_cost_db_kernel_get_ref(db, d, "Half(x)", &got, &ref, &w, NULL, &err));
    g_assert_cmpfloat(ref.gemm_us, ==, 0);
    g_assert_true(isnan(w));

    /* The factor: w * stream ratio + (1 - w) * gemm ratio; 1 without both references. */
    PsimSpeedRef now = {44, 100}; /* compute 10% and memory 25% slower */
    g_assert_cmpfloat(fabs(psim_speed_ref_factor(&then, &now, 0.25) - (0.25 * 1.25 + 0.75 * 1.1)), <, 1e-12);
    g_assert_cmpfloat(psim_speed_ref_factor(&then, &half, 0.25), ==, 1);
    g_assert_cmpfloat(psim_speed_ref_factor(NULL, &now, 0.25), ==, 1);
    g_assert_cmpfloat(psim_speed_ref_factor(&then, &now, NAN), ==, 1);

    psim_cost_db_close(db);
    g_autofree char *v = raw_query(path, "SELECT ref_stream_us FROM kernel_times WHERE signature = 'New(x)'");
    g_assert_cmpstr(v, ==, "80.0");
}

static void expect_open_error(const char *path, const char *needle)
{
    GError *err = NULL;
    PsimCostDb *db = psim_cost_db_open(path, &err);
    g_assert_null(db);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    if (!strstr(err->message, path) || !strstr(err->message, needle))
        g_error("expected '%s' and '%s' in '%s'", path, needle, err->message);
    g_error_free(err);
}

static void test_bad_files(void)
{
    g_autofree char *text = tmp_path("text.db");
    g_assert_true(g_file_set_contents(text, "this is not a database, just some text\n", -1, NULL));
    expect_open_error(text, "not an SQLite database");

    /* Not files: a folder, and a device that never ends. */
    expect_open_error(tmp_dir, "not a regular file");
    expect_open_error("/dev/zero", "not a regular file");

    g_autofree char *newer = tmp_path("newer.db");
    GError *err = NULL;
    psim_cost_db_close(psim_cost_db_open(newer, &err));
    g_assert_no_error(err);
    raw_exec(newer, "PRAGMA user_version = 99");
    expect_open_error(newer, "newer");

    g_autofree char *foreign = tmp_path("foreign.db");
    raw_exec(foreign, "CREATE TABLE people(name TEXT); INSERT INTO people VALUES ('x')");
    expect_open_error(foreign, "not a placesim cost DB");

    /* A DB with several pages, then garbage over its second page onwards. */
    g_autofree char *corrupt = tmp_path("corrupt.db");
    gsize len;
    g_autofree char *data = filled_db(corrupt, 200, "Conv", &len);
    g_assert_cmpuint(len, >, 3 * 4096);
    for (gsize i = 4096; i < len; i++)
        data[i] = (char)(0xa5 ^ (i * 7));
    g_assert_true(g_file_set_contents(corrupt, data, (gssize)len, NULL));
    expect_open_error(corrupt, "corrupt");
}

/* Issue 20 item 4: PRAGMA user_version indexes the migration table; a negative or too large one
 * is refused by name, whether the DB is opened to write (migrate) or only to read. */
static void test_schema_version_range(void)
{
    GError *err = NULL;
    const int bad[] = {-3, -2147483647, PSIM_COST_DB_SCHEMA_VERSION + 1, 99};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *name = g_strdup_printf("version%zu.db", i);
        g_autofree char *path = tmp_path(name);
        psim_cost_db_close(psim_cost_db_open(path, &err));
        g_assert_no_error(err);
        g_autofree char *sql = g_strdup_printf("PRAGMA user_version = %d", bad[i]);
        raw_exec(path, sql);
        g_autofree char *needle = g_strdup_printf("schema version %d is not one this placesim knows (0..%d)",
                                                  bad[i], PSIM_COST_DB_SCHEMA_VERSION);
        expect_open_error(path, needle);
        PsimCostDb *db = psim_cost_db_open_readonly(path, &err);
        g_assert_null(db);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_nonnull(strstr(err->message, needle));
        g_clear_error(&err);
    }
}

/* Issue 20 item 11: a table or column dropped from a cost DB is an input error at open that
 * names the DB and the table (it was a warning per query, and exit 0). */
static void test_dropped_table(void)
{
    GError *err = NULL;
    const char *drops[][2] = {{"DROP TABLE calibration", "'calibration' is missing"},
                              {"DROP VIEW kernel_times; DROP TABLE kernels", "'kernels' is missing"},
                              {"DROP VIEW kernel_times; ALTER TABLE kernels DROP COLUMN mem_weight", "mem_weight"}};
    for (size_t i = 0; i < G_N_ELEMENTS(drops); i++) {
        g_autofree char *name = g_strdup_printf("dropped%zu.db", i);
        g_autofree char *path = tmp_path(name);
        psim_cost_db_close(psim_cost_db_open(path, &err));
        g_assert_no_error(err);
        raw_exec(path, drops[i][0]);
        expect_open_error(path, drops[i][1]);
        PsimCostDb *db = psim_cost_db_open_readonly(path, &err);
        g_assert_null(db);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_assert_nonnull(strstr(err->message, drops[i][1]));
        g_assert_nonnull(strstr(err->message, path));
        g_clear_error(&err);
    }
}

/* Issue 20 item 11: a cost DB cut short (a copy interrupted) is bad input, exit 2, not a runtime
 * failure; so is the same file opened read-only. */
static void test_truncated(void)
{
    g_autofree char *path = tmp_path("truncated.db");
    GError *err = NULL;
    gsize len;
    g_autofree char *data = filled_db(path, 300, "MatMul", &len);
    g_assert_cmpuint(len, >, 8 * 4096);
    const gsize cuts[] = {100, 4096 + 1000, len / 2, len - 4096};
    for (size_t i = 0; i < G_N_ELEMENTS(cuts); i++) {
        g_assert_true(g_file_set_contents(path, data, (gssize)cuts[i], NULL));
        expect_open_error(path, path);
        g_assert_true(g_file_set_contents(path, data, (gssize)cuts[i], NULL));
        g_assert_null(psim_cost_db_open_readonly(path, &err));
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        g_clear_error(&err);
    }
}

/* What a reader of a read-only DB must manage (run as a user that cannot write it): read every
 * row as the file has it, at its own schema version, and refuse only writes. */
static void check_readonly(const char *path, const PsimDevice *d)
{
    GError *err = NULL;
    PsimCostDb *db = psim_cost_db_open_readonly(path, &err);
    g_assert_no_error(err);
    g_assert_nonnull(db);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, 3); /* not migrated */
    PsimTimingStats got;
    g_assert_true(psim_cost_db_kernel_get(db, d, "Relu(x)", &got, NULL, &err));
    g_assert_no_error(err);
    g_assert_cmpfloat(got.median_us, ==, 33);
    double v = 0;
    g_assert_true(psim_cost_db_calibration_get(db, d, "gemm_gflops", &v, &err));
    g_assert_cmpfloat(v, ==, 146);
    PsimTimingStats s = stats(1);
    g_assert_false(psim_cost_db_kernel_put(db, d, "Exp(x)", "Exp", "monotonic", &s, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "read-only"));
    g_clear_error(&err);
    psim_cost_db_close(db);
    /* Opening to write says why it cannot. */
    g_assert_null(psim_cost_db_open(path, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    if (!strstr(err->message, path) || !strstr(err->message, "read-only"))
        g_error("unexpected: %s", err->message);
    g_clear_error(&err);
}

/* Runs check_readonly as a user without write access: root writes any file whatever its mode,
 * so as root the check runs in a child that has dropped to nobody. */
static void check_readonly_unprivileged(const char *path, const PsimDevice *d)
{
    if (geteuid() != 0) {
        check_readonly(path, d);
        return;
    }
    pid_t pid = fork();
    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(7);
        check_readonly(path, d);
        _exit(0);
    }
    int status;
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
}

/* Issue 20 item 11: a read-only DB (0444, or in a read-only folder) serves the commands that only
 * read it; opening read-only never migrates nor writes, even where writing is allowed. */
static void test_readonly(void)
{
    g_autofree char *dir = tmp_path("ro");
    g_assert_cmpint(g_mkdir(dir, 0755), ==, 0);
    g_assert_cmpint(g_chmod(tmp_dir, 0755), ==, 0); /* nobody passes through */
    g_autofree char *path = g_build_filename(dir, "old.db", NULL);
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    const PsimDevice *d = psim_cluster_device(c, 0);
    GError *err = NULL;
    PsimCostDb *db = psim__cost_db_open_version(path, 3, &err);
    g_assert_no_error(err);
    PsimTimingStats s = stats(33);
    g_assert_true(psim_cost_db_kernel_put(db, d, "Relu(x)", "Relu", "monotonic", &s, &err));
    g_assert_true(psim_cost_db_calibration_put(db, d, "gemm_gflops", 146, "", &err));
    g_assert_no_error(err);
    psim_cost_db_close(db);
    g_autofree char *before = NULL, *after = NULL;
    gsize n_before, n_after;
    g_assert_true(g_file_get_contents(path, &before, &n_before, NULL));

    /* Writable file, read-only handle: the file stays byte for byte as it was, version 3. */
    db = psim_cost_db_open_readonly(path, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_schema_version(db), ==, 3);
    psim_cost_db_close(db);
    g_assert_true(g_file_get_contents(path, &after, &n_after, NULL));
    g_assert_cmpmem(before, n_before, after, n_after);

    g_assert_cmpint(g_chmod(path, 0444), ==, 0);
    check_readonly_unprivileged(path, d);
    g_assert_cmpint(g_chmod(path, 0644), ==, 0);
    /* The file writable, its folder not: the WAL file cannot be made. */
    if (geteuid() == 0)
        g_assert_cmpint(chown(path, 65534, 65534), ==, 0);
    g_assert_cmpint(g_chmod(dir, 0555), ==, 0);
    check_readonly_unprivileged(path, d);
    g_assert_cmpint(g_chmod(dir, 0755), ==, 0);

    /* A missing or empty file has nothing to read. */
    g_autofree char *missing = tmp_path("missing.db");
    g_assert_null(psim_cost_db_open_readonly(missing, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    g_assert_false(g_file_test(missing, G_FILE_TEST_EXISTS));
    g_autofree char *empty = tmp_path("empty.db");
    g_assert_true(g_file_set_contents(empty, "", 0, NULL));
    g_assert_null(psim_cost_db_open_readonly(empty, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
}

static void count_row(const PsimCostDbKernelRow *row, void *user)
{
    g_assert_cmpint(row->id, >, 0);
    g_assert_cmpint(row->stats.n, >, 0);
    (*(int *)user)++;
}

/* The cost-DB fuzzer's seeds (tests/fuzz/corpus/costdb: made with this API at 512-byte pages,
 * then damaged): ok-* open both ways and read back their kernel rows; bad-* fail both ways with
 * one INPUT line that names the file. Replayed in every build, the sanitizer build included. */
static void test_corpus(void)
{
    const char *src = g_getenv("PSIM_SRC");
    g_autofree char *dir = g_build_filename(src ? src : "..", "tests", "fuzz", "corpus", "costdb", NULL);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    g_assert_nonnull(d);
    const char *base;
    int n_ok = 0, n_bad = 0;
    while ((base = g_dir_read_name(d))) {
        g_autofree char *orig = g_build_filename(dir, base, NULL);
        g_autofree char *data = NULL;
        gsize len;
        g_assert_true(g_file_get_contents(orig, &data, &len, NULL));
        g_autofree char *path = tmp_path(base);
        for (int pass = 0; pass < 2; pass++) {
            /* A fresh copy each time: opening to write migrates the file. */
            g_autofree char *wal = g_strconcat(path, "-wal", NULL), *shm = g_strconcat(path, "-shm", NULL);
            g_unlink(wal);
            g_unlink(shm);
            g_assert_true(g_file_set_contents(path, data, (gssize)len, NULL));
            GError *err = NULL;
            PsimCostDb *db = pass ? psim_cost_db_open(path, &err) : psim_cost_db_open_readonly(path, &err);
            if (g_str_has_prefix(base, "ok-")) {
                g_assert_no_error(err);
                int n = 0;
                g_assert_true(psim_cost_db_kernel_foreach(db, count_row, &n, &err));
                g_assert_cmpint(n, ==, 2);
                n_ok++;
            } else {
                g_assert_null(db);
                g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
                g_autofree char *prefix = g_strconcat(path, ": ", NULL);
                if (!g_str_has_prefix(err->message, prefix) || strchr(err->message, '\n'))
                    g_error("%s: not one line naming the file: %s", base, err->message);
                g_clear_error(&err);
                n_bad++;
            }
            psim_cost_db_close(db);
        }
    }
    g_assert_cmpint(n_ok, >=, 4);
    g_assert_cmpint(n_bad, >=, 12);
}

/* Two processes write 150 kernel rows and 30 link rows each, one transaction per row, into one
 * fresh DB (both also race to create the schema); every row must be there afterwards. */
static void test_concurrent_writers(void)
{
    g_autofree char *path = tmp_path("shared.db");
    enum { N_KERNELS = 150, N_LINKS = 30 };
    pid_t pids[2];
    int gate[2];
    g_assert_cmpint(pipe(gate), ==, 0);
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        g_assert_cmpint(pids[w], >=, 0);
        if (pids[w] == 0) {
            /* Both start together: wait until the parent closes the gate's write end. */
            char ch;
            close(gate[1]);
            if (read(gate[0], &ch, 1) != 0)
                _exit(6);
            GError *err = NULL;
            PsimCostDb *db = psim_cost_db_open(path, &err);
            if (!db) {
                g_printerr("writer %d: %s\n", w, err->message);
                _exit(3);
            }
            g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
            for (int i = 0; i < N_KERNELS; i++) {
                g_autofree char *sig = g_strdup_printf("Op%d(w%d)", i, w);
                PsimTimingStats s = stats(1000 * w + i + 1);
                if (!psim_cost_db_kernel_put(db, psim_cluster_device(c, w), sig, "Op", "monotonic", &s, &err)) {
                    g_printerr("writer %d: %s\n", w, err->message);
                    _exit(4);
                }
                if (i < N_LINKS) {
                    PsimTimingStats l = stats(i + 1);
                    if (!psim_cost_db_link_put(db, psim_cluster_device(c, w), psim_cluster_device(c, 1 - w),
                                               1024u << i % 20, "monotonic", &l, &err)) {
                        g_printerr("writer %d: %s\n", w, err->message);
                        _exit(5);
                    }
                }
            }
            psim_cost_db_close(db);
            _exit(0);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int w = 0; w < 2; w++) {
        int status;
        g_assert_cmpint(waitpid(pids[w], &status, 0), ==, pids[w]);
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    }
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", &err), ==, 2 * N_KERNELS);
    g_assert_cmpint(psim_cost_db_count(db, "links", &err), ==, 2 * 20); /* 20 distinct sizes each way */
    g_assert_cmpint(psim_cost_db_count(db, "devices", &err), ==, 2);
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < N_KERNELS; i++) {
            g_autofree char *sig = g_strdup_printf("Op%d(w%d)", i, w);
            PsimTimingStats got;
            g_assert_true(psim_cost_db_kernel_get(db, psim_cluster_device(c, w), sig, &got, NULL, &err));
            g_assert_cmpfloat(got.median_us, ==, 1000 * w + i + 1);
        }
}

static void test_link_fit(void)
{
    /* t = 4 us + bytes / 12 GB/s, with +-2% alternating noise, at 1 KiB .. 256 MiB. */
    double xs[10], ts[10];
    for (int i = 0; i < 10; i++) {
        xs[i] = 1024.0 * (1 << (2 * i));
        ts[i] = (4 + xs[i] / 12e3) * (i % 2 ? 1.02 : 0.98);
    }
    PsimLink l;
    double rms;
    g_assert_true(psim_link_fit(xs, ts, 10, &l, &rms));
    g_assert_cmpfloat(fabs(l.latency_us - 4) / 4, <, 0.05);
    g_assert_cmpfloat(fabs(l.bandwidth_GBps - 12) / 12, <, 0.05);
    g_assert_cmpfloat(rms, <, 0.03);
    g_assert_cmpfloat(rms, >, 0.01);
    /* One size cannot separate latency from bandwidth. */
    double one[2] = {4096, 4096};
    g_assert_false(psim_link_fit(one, ts, 2, &l, NULL));
    /* Time that does not grow with size: pure latency, unlimited bandwidth. */
    double flat[3] = {5, 5, 5}, sizes[3] = {1e3, 1e6, 1e8};
    g_assert_true(psim_link_fit(sizes, flat, 3, &l, NULL));
    g_assert_cmpfloat(l.bandwidth_GBps, ==, 0);
    g_assert_cmpfloat_with_epsilon(l.latency_us, 5, 1e-9);

    /* Through the DB and into the cost model. */
    g_autofree char *path = tmp_path("links.db");
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    for (int i = 0; i < 10; i++) {
        PsimTimingStats s = stats(ts[i]);
        g_assert_true(psim_cost_db_link_put(db, psim_cluster_device(c, 0), psim_cluster_device(c, 1),
                                            (uint64_t)xs[i], "monotonic", &s, &err));
    }
    int n_sizes = 0;
    g_assert_true(psim_cost_db_link_fit(db, psim_cluster_device(c, 0), psim_cluster_device(c, 1), &l, &rms, &n_sizes, &err));
    g_assert_cmpint(n_sizes, ==, 10);
    g_assert_true(psim_cost_db_link_fit_put(db, psim_cluster_device(c, 0), psim_cluster_device(c, 1), &l, n_sizes, rms, &err));
    g_assert_cmpint(psim_cost_db_count(db, "link_fits", &err), ==, 1);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
    PsimCostSource src;
    double t = psim_cost_transfer_src(m, 1 << 20, 0, 1, &src);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
    g_assert_cmpfloat(fabs(t - (4 + (1 << 20) / 12e3)) / t, <, 0.05);
    /* The reverse pair was never measured: the cluster's link answers. */
    t = psim_cost_transfer_src(m, 8000, 1, 0, &src);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
    g_assert_cmpfloat_with_epsilon(t, psim_cluster_link_time(c, 1, 0, 8000), 1e-9);
    g_assert_cmpfloat(psim_cost_transfer_src(m, 8000, 1, 1, &src), ==, 0);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_FREE);
    /* The link the simulator and placers read: the fit's rates, the cluster's flags. */
    PsimLink cl = psim_cluster_default_link(c);
    cl.by_destination = TRUE;
    psim_cluster_default_link_set(c, cl);
    PsimLink ml = psim_cost_link(m, 0, 1, &src);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
    g_assert_cmpfloat(ml.bandwidth_GBps, ==, l.bandwidth_GBps);
    g_assert_cmpfloat(ml.latency_us, ==, l.latency_us);
    g_assert_true(ml.by_destination);
    ml = psim_cost_link(m, 1, 0, &src);
    g_assert_cmpint(src, ==, PSIM_COST_SOURCE_ESTIMATE);
    g_assert_cmpfloat(ml.bandwidth_GBps, ==, cl.bandwidth_GBps);
    g_assert_no_error(err);
}

/* Transfers between two CPU cores have two regimes (in cache up to a few hundred KiB, from
 * memory beyond): no line fits both, so the model goes through the measured rows themselves.
 * Rows as the profiler wrote them on the 2-vCPU development VM (medians, us): the fit of these
 * (20.6 GB/s) under-predicts a 16 MiB copy 2.5-fold. */
static void test_link_curve(void)
{
    static const double xs[] = {1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};
    static const double ts[] = {4.43, 3.90, 4.62, 3.89, 9.60, 99.0, 521.0, 2098.0, 9023.0};
    int n = G_N_ELEMENTS(xs);
    g_autofree char *path = tmp_path("curve.db");
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    const PsimDevice *d0 = psim_cluster_device(c, 0), *d1 = psim_cluster_device(c, 1);
    g_assert_null(psim_cost_db_link_curve(db, d0, d1, &err)); /* nothing measured yet */
    g_assert_no_error(err);
    for (int i = 0; i < n; i++) {
        PsimTimingStats st = stats(ts[i]);
        g_assert_true(psim_cost_db_link_put(db, d0, d1, (uint64_t)xs[i], "monotonic", &st, &err));
    }
    PsimLink fit;
    g_assert_true(psim_cost_db_link_fit(db, d0, d1, &fit, NULL, NULL, &err));
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
    PsimCostSource src;
    /* At every measured size: the row's median (the dip at 4 KiB and 64 KiB lifted to the time
     * of the size below). */
    double prev = 0;
    for (int i = 0; i < n; i++) {
        double t = psim_cost_transfer_src(m, (uint64_t)xs[i], 0, 1, &src);
        g_assert_cmpint(src, ==, PSIM_COST_SOURCE_MEASURED);
        g_assert_cmpfloat_with_epsilon(t, MAX(ts[i], prev), 1e-9);
        prev = t;
    }
    /* Between sizes, linear in bytes; below the smallest, the smallest's time; past the
     * largest, the last segment's rate. */
    g_assert_cmpfloat_with_epsilon(psim_cost_transfer(m, 10u << 20, 0, 1), 521.0 + (2098.0 - 521.0) / 2, 1e-6);
    g_assert_cmpfloat_with_epsilon(psim_cost_transfer(m, 10, 0, 1), 4.43, 1e-9);
    double rate = (9023.0 - 2098.0) / (67108864.0 - 16777216.0);
    g_assert_cmpfloat_with_epsilon(psim_cost_transfer(m, 128u << 20, 0, 1), 9023.0 + rate * (64u << 20), 1e-6);
    /* The link the simulator and placers read carries the curve; its latency is the fixed cost
     * and its occupancy the rest. */
    PsimLink l = psim_cost_link(m, 0, 1, &src);
    g_assert_nonnull(l.curve);
    g_assert_cmpfloat(l.bandwidth_GBps, ==, fit.bandwidth_GBps);
    g_assert_cmpfloat_with_epsilon(psim_link_latency(&l), 4.43, 1e-9);
    g_assert_cmpfloat_with_epsilon(psim_link_occupancy(&l, 16777216) + psim_link_latency(&l), 2098.0, 1e-9);
    /* The line through the same rows is far off at 16 MiB (why the curve exists). */
    PsimLink line = fit;
    line.curve = NULL;
    g_assert_cmpfloat(psim_link_time(&line, 16777216), <, 0.6 * 2098.0);
    /* The pair never measured keeps the cluster's line. */
    l = psim_cost_link(m, 1, 0, &src);
    g_assert_null(l.curve);
    /* The simulator's transfer of a 16 MiB tensor from device 0 to 1 takes the curve's time. */
    g_autoptr(PsimGraph) g = psim_graph_new("hop");
    int64_t n16 = 4 << 20;
    PsimNode *x = psim_graph_node_add(g, "x", "Placeholder", NULL);
    psim_graph_node_outputs_set(g, x, 1);
    psim_graph_output_set(g, x, 0, PSIM_DTYPE_FLOAT32, 1, &n16);
    psim_graph_input_add(g, x->id);
    PsimNode *a = psim_graph_node_add(g, "a", "Neg", NULL);
    psim_graph_node_input_add(g, a, (PsimPort){x->id, 0});
    psim_graph_node_outputs_set(g, a, 1);
    psim_graph_output_set(g, a, 0, PSIM_DTYPE_FLOAT32, 1, &n16);
    PsimNode *b = psim_graph_node_add(g, "b", "Neg", NULL);
    psim_graph_node_input_add(g, b, (PsimPort){a->id, 0});
    psim_graph_node_outputs_set(g, b, 1);
    psim_graph_output_set(g, b, 0, PSIM_DTYPE_FLOAT32, 1, &n16);
    psim_graph_output_add(g, (PsimPort){b->id, 0});
    g_assert_true(psim_graph_finalize(g, &err));
    int32_t dev[3] = {0, 0, 1}, seq[3] = {0, 1, 2};
    double cost[3] = {0, 10, 10}, st[3], fin[3];
    PsimSimPlacement pl = {.device_of = dev, .seq = seq, .cost = cost, .start = st, .finish = fin};
    g_assert_cmpfloat(psim_sim_placement_step(g, m, &pl, &err), >, 0);
    g_assert_cmpfloat_with_epsilon(st[2] - fin[1], 2098.0, 1e-6);
    g_assert_no_error(err);
}

/* Schema 5: an in-situ row sits beside the kernel-alone row of the same (signature, device); the
 * reads answer with it, the profiler's weights check sees only the kernel row, and a version-4 DB
 * migrates keeping its rows and their rowids. */
static void test_insitu_rows(void)
{
    g_autofree char *path = tmp_path("insitu.db");
    GError *err = NULL;
    g_autoptr(PsimCluster) c = two_cpus("cpu A", "cpu A");
    const PsimDevice *d0 = psim_cluster_device(c, 0), *d1 = psim_cluster_device(c, 1);
    PsimTimingStats k = stats(100), i = stats(60), got;
    PsimCostDb *db = migrated(path, 4, d0, "Conv(x)", "Conv", "warm", 100);
    g_autofree char *rowid = raw_query(path, "SELECT rowid FROM kernels WHERE signature = 'Conv(x)'");
    g_assert_nonnull(rowid);
    g_assert_true(psim_cost_db_kernel_get_method(db, d0, "Conv(x)", "kernel", &got, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    g_assert_false(psim_cost_db_kernel_get_method(db, d0, "Conv(x)", "insitu", NULL, &err));
    g_assert_no_error(err);

    g_assert_true(psim_cost_db_kernel_put_insitu(db, d0, "Conv(x)", "Conv", "monotonic", &i, &err));
    g_assert_no_error(err);
    g_assert_cmpint(psim_cost_db_count(db, "kernels", NULL), ==, 2);
    int64_t row = -1;
    g_assert_true(psim_cost_db_kernel_get_row(db, d0, "Conv(x)", &got, NULL, NULL, &row, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 60);
    g_assert_cmpint(row, !=, g_ascii_strtoll(rowid, NULL, 10));
    /* Identical hardware shares the in-situ row, and prefers it to its own kernel row. */
    g_assert_true(psim_cost_db_kernel_put(db, d1, "Conv(x)", "Conv", "monotonic", &k, &err));
    g_assert_true(psim_cost_db_kernel_get(db, d1, "Conv(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 60);
    g_assert_true(psim_cost_db_kernel_get_method(db, d1, "Conv(x)", "kernel", &got, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    /* The kernel row's weights mode; an in-situ row alone has none. */
    g_autofree char *w = NULL;
    g_assert_true(psim_cost_db_kernel_get_weights(db, d0, "Conv(x)", &w, &err));
    g_assert_cmpstr(w, ==, "warm");
    g_assert_true(psim_cost_db_kernel_put_insitu(db, d0, "Relu(x)", "Relu", "monotonic", &i, &err));
    g_autofree char *w2 = NULL;
    g_assert_false(psim_cost_db_kernel_get_weights(db, d0, "Relu(x)", &w2, &err));
    g_assert_no_error(err);
    /* Replacing keeps one in-situ row. */
    PsimTimingStats i2 = stats(55);
    g_assert_true(psim_cost_db_kernel_put_insitu(db, d0, "Conv(x)", "Conv", "monotonic", &i2, &err));
    g_assert_cmpint(psim_cost_db_count(db, "kernels", NULL), ==, 4);
    g_assert_true(psim_cost_db_kernel_get(db, d0, "Conv(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 55);
    psim_cost_db_close(db);
    /* The migrated kernel row kept its rowid; the view shows the method. */
    g_autofree char *again = raw_query(path, "SELECT rowid FROM kernels WHERE signature = 'Conv(x)' AND method = 'kernel'"
                                             " AND device_id = (SELECT id FROM devices WHERE name LIKE '%CPU:0')");
    g_assert_cmpstr(again, ==, rowid);
    g_autofree char *v = raw_query(path, "SELECT count(*) FROM kernel_times WHERE method = 'insitu'");
    g_assert_cmpstr(v, ==, "2");
    /* Read-only at an older schema: no in-situ rows, and none can be written. */
    g_autofree char *old = tmp_path("insitu-v4.db");
    PsimCostDb *db4 = psim__cost_db_open_version(old, 4, &err);
    g_assert_true(psim_cost_db_kernel_put(db4, d0, "Conv(x)", "Conv", "monotonic", &k, &err));
    psim_cost_db_close(db4);
    db4 = psim_cost_db_open_readonly(old, &err);
    g_assert_no_error(err);
    g_assert_true(psim_cost_db_kernel_get(db4, d0, "Conv(x)", &got, NULL, &err));
    g_assert_cmpfloat(got.median_us, ==, 100);
    g_assert_false(psim_cost_db_kernel_get_method(db4, d0, "Conv(x)", "insitu", NULL, &err));
    g_assert_false(psim_cost_db_kernel_put_insitu(db4, d0, "Conv(x)", "Conv", "monotonic", &i, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_clear_error(&err);
    psim_cost_db_close(db4);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    tmp_dir = g_dir_make_tmp("psim-costdb-XXXXXX", NULL);
    g_test_add_func("/cost/db/rows", test_rows);
    g_test_add_func("/cost/db/fingerprint", test_fingerprint);
    g_test_add_func("/cost/db/migration", test_migration);
    g_test_add_func("/cost/db/migration-v2", test_migration_v2);
    g_test_add_func("/cost/db/migration-v3-ref", test_migration_v3_ref);
    g_test_add_func("/cost/db/bad-files", test_bad_files);
    g_test_add_func("/cost/db/schema-version-range", test_schema_version_range);
    g_test_add_func("/cost/db/dropped-table", test_dropped_table);
    g_test_add_func("/cost/db/truncated", test_truncated);
    g_test_add_func("/cost/db/readonly", test_readonly);
    g_test_add_func("/cost/db/corpus", test_corpus);
    g_test_add_func("/cost/db/concurrent-writers", test_concurrent_writers);
    g_test_add_func("/cost/db/link-fit", test_link_fit);
    g_test_add_func("/cost/db/link-curve", test_link_curve);
    g_test_add_func("/cost/db/insitu-rows", test_insitu_rows);
    int rc = g_test_run();
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    g_free(tmp_dir);
    return rc;
}
