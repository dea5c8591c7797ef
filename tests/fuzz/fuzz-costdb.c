/* libFuzzer target for the cost-DB opener: the input is written to a file and opened as a cost
 * DB, read-only and then to write (migrating it); every kernel row is read back through the
 * public API, every table counted, and one row written. An input either opens or fails with one
 * INPUT error line that names the file; nothing crashes, hangs or indexes out of bounds. */
#include <unistd.h>

#include <glib/gstdio.h>

#include "fuzz-common.h"
#include "placesim/cost.h"

static char *db_path;

/* The SQLite side files of the previous input must not leak into this one. */
static void remove_db(void)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < G_N_ELEMENTS(suffixes); i++) {
        g_autofree char *p = g_strconcat(db_path, suffixes[i], NULL);
        g_unlink(p);
    }
}

static void on_row(const PsimCostDbKernelRow *row, void *user)
{
    int64_t *n = user;
    /* Touch every field: ASan sees a string that is not there. */
    if (strlen(row->device) + strlen(row->fingerprint) + strlen(row->signature) + strlen(row->op) > (size_t)-2)
        abort();
    (*n)++;
}

/* Reads everything the DB has through the API; FALSE when a read failed (and checks how). */
static void read_all(PsimCostDb *db, PsimCluster *c)
{
    static const char *const tables[] = {"kernels", "links", "devices", "calibration", "link_fits"};
    GError *err = NULL;
    int64_t n = 0;
    if (!psim_cost_db_kernel_foreach(db, on_row, &n, &err)) {
        fuzz_check_error(err, db_path);
        g_clear_error(&err);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(tables); i++) {
        /* link_fits does not exist before schema 2: a runtime error there is the API's answer. */
        if (psim_cost_db_count(db, tables[i], &err) < 0 && err)
            g_clear_error(&err);
    }
    PsimTimingStats s;
    PsimSpeedRef ref;
    double w, v;
    int64_t row;
    gboolean other;
    const PsimDevice *d = psim_cluster_device(c, 0);
    psim_cost_db_kernel_get_row(db, d, "Relu(float32[1x4])", &s, &ref, &w, &row, &other, &err);
    g_clear_error(&err);
    psim_cost_db_calibration_get(db, d, "gemm_gflops", &v, &err);
    g_clear_error(&err);
    PsimLink l;
    psim_cost_db_link_fit(db, d, psim_cluster_device(c, 1), &l, NULL, NULL, &err);
    g_clear_error(&err);
    psim_cost_db_calibrate_cluster(db, c, NULL, &err);
    g_clear_error(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!db_path) {
        char *dir = g_dir_make_tmp("fuzz-costdb-XXXXXX", NULL);
        if (!dir)
            abort();
        db_path = g_build_filename(dir, "fuzz.db", NULL);
        g_free(dir);
    }
    PsimCluster *c = psim_cluster_new();
    psim_cluster_device_add(c, "CPU:0", "CPU", NULL);
    psim_cluster_device_add(c, "CPU:1", "CPU", NULL);
    GError *err = NULL;
    for (int pass = 0; pass < 2; pass++) {
        remove_db();
        if (!g_file_set_contents(db_path, (const char *)data, (gssize)size, NULL))
            abort();
        PsimCostDb *db = pass == 0 ? psim_cost_db_open_readonly(db_path, &err) : psim_cost_db_open(db_path, &err);
        if (!db) {
            fuzz_check_error(err, db_path);
            g_clear_error(&err);
            continue;
        }
        read_all(db, c);
        if (pass == 1) {
            PsimTimingStats s = {.n = 3, .mean_us = 2, .stddev_us = 0.1, .min_us = 1.9, .median_us = 2};
            psim_cost_db_kernel_put(db, psim_cluster_device(c, 0), "Relu(float32[1x4])", "Relu", "monotonic", &s, &err);
            g_clear_error(&err);
            read_all(db, c);
        }
        psim_cost_db_close(db);
    }
    psim_cluster_free(c);
    remove_db();
    return 0;
}
