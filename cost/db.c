/* The cost DB: SQLite in WAL mode with a busy timeout, a versioned schema with migrations, and
 * one transaction per write so that several profilers can share a file. docs/cost-db.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cost/db-private.h"
#include "graph/sqlite-private.h"

struct PsimCostDb {
    sqlite3 *sql;
    char *path;
    GMutex lock;
    GHashTable *dev_ids; /* "name\ndigest" -> gint64 id (device rows never change id) */
    int version;         /* the schema version it was opened at (read-only: the file's) */
    gboolean readonly;   /* psim_cost_db_open_readonly: every write is refused */
};

/* The kernels table's columns of version 1, which every later version keeps. */
#define KERNEL_COLUMNS                                                                            \
    "  signature TEXT NOT NULL,"                                                                  \
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"                                        \
    "  op TEXT NOT NULL,"                                                                         \
    "  n INTEGER NOT NULL CHECK (n > 0),"                                                         \
    "  mean_us REAL NOT NULL, stddev_us REAL NOT NULL, min_us REAL NOT NULL, median_us REAL NOT NULL," \
    "  source TEXT NOT NULL,"                                                                     \
    "  measured_at TEXT NOT NULL,"

/* The schema's history: migrations[v] takes a DB from version v to v + 1. Never edit a released
 * entry; append a new one and bump PSIM_COST_DB_SCHEMA_VERSION. */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE devices("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  fingerprint TEXT NOT NULL,"
    "  cpu_model TEXT NOT NULL,"
    "  gpu_name TEXT NOT NULL,"
    "  driver_version TEXT NOT NULL,"
    "  library_versions TEXT NOT NULL,"
    "  n_cores INTEGER NOT NULL,"
    "  host TEXT NOT NULL,"
    "  first_seen TEXT NOT NULL,"
    "  UNIQUE(name, fingerprint));"
    "CREATE TABLE kernels("
    KERNEL_COLUMNS
    "  PRIMARY KEY(signature, device_id));"
    "CREATE TABLE links("
    "  src_id INTEGER NOT NULL REFERENCES devices(id),"
    "  dst_id INTEGER NOT NULL REFERENCES devices(id),"
    "  bytes INTEGER NOT NULL,"
    "  n INTEGER NOT NULL CHECK (n > 0),"
    "  mean_us REAL NOT NULL, stddev_us REAL NOT NULL, min_us REAL NOT NULL, median_us REAL NOT NULL,"
    "  source TEXT NOT NULL,"
    "  measured_at TEXT NOT NULL,"
    "  PRIMARY KEY(src_id, dst_id, bytes));"
    "CREATE TABLE calibration("
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"
    "  kind TEXT NOT NULL,"
    "  value REAL NOT NULL,"
    "  detail TEXT NOT NULL,"
    "  measured_at TEXT NOT NULL,"
    "  PRIMARY KEY(device_id, kind));",
    /* 1 -> 2: the fitted link model per pair, and a readable view of kernel rows. */
    "CREATE TABLE link_fits("
    "  src_id INTEGER NOT NULL REFERENCES devices(id),"
    "  dst_id INTEGER NOT NULL REFERENCES devices(id),"
    "  latency_us REAL NOT NULL,"
    "  bandwidth_GBps REAL NOT NULL,"
    "  n_sizes INTEGER NOT NULL,"
    "  rms_rel_error REAL NOT NULL,"
    "  fitted_at TEXT NOT NULL,"
    "  PRIMARY KEY(src_id, dst_id));"
    "CREATE VIEW kernel_times AS"
    "  SELECT d.name AS device, d.fingerprint AS fingerprint, k.op AS op, k.signature AS signature,"
    "         k.n AS n, k.median_us AS median_us, k.mean_us AS mean_us, k.stddev_us AS stddev_us,"
    "         k.min_us AS min_us, k.source AS source, k.measured_at AS measured_at"
    "  FROM kernels k JOIN devices d ON d.id = k.device_id;",
    /* 2 -> 3: how constant inputs (weights) were cached when a kernel was timed: 'cold'
     * (evicted before each run), 'warm' (left in cache), '' (rows of older versions: warm). */
    "ALTER TABLE kernels ADD COLUMN weights TEXT NOT NULL DEFAULT '';"
    "DROP VIEW kernel_times;"
    "CREATE VIEW kernel_times AS"
    "  SELECT d.name AS device, d.fingerprint AS fingerprint, k.op AS op, k.signature AS signature,"
    "         k.n AS n, k.median_us AS median_us, k.mean_us AS mean_us, k.stddev_us AS stddev_us,"
    "         k.min_us AS min_us, k.source AS source, k.measured_at AS measured_at,"
    "         k.weights AS weights"
    "  FROM kernels k JOIN devices d ON d.id = k.device_id;",
    /* 3 -> 4: the host-speed reference (PsimSpeedRef) measured alongside each kernel row, and
     * how memory-bound the kernel is (0 compute .. 1 memory); NULL for older rows. */
    "ALTER TABLE kernels ADD COLUMN ref_gemm_us REAL;"
    "ALTER TABLE kernels ADD COLUMN ref_stream_us REAL;"
    "ALTER TABLE kernels ADD COLUMN mem_weight REAL;"
    "DROP VIEW kernel_times;"
    "CREATE VIEW kernel_times AS"
    "  SELECT d.name AS device, d.fingerprint AS fingerprint, k.op AS op, k.signature AS signature,"
    "         k.n AS n, k.median_us AS median_us, k.mean_us AS mean_us, k.stddev_us AS stddev_us,"
    "         k.min_us AS min_us, k.source AS source, k.measured_at AS measured_at,"
    "         k.weights AS weights, k.ref_gemm_us AS ref_gemm_us, k.ref_stream_us AS ref_stream_us,"
    "         k.mem_weight AS mem_weight"
    "  FROM kernels k JOIN devices d ON d.id = k.device_id;",
    /* 4 -> 5: how a row was measured: 'kernel' (each kernel timed alone, the profiler's passes)
     * or 'insitu' (the executor's own per-op times in whole-model runs, profile --in-situ). Both
     * may exist for one (signature, device), so the key takes the method: SQLite cannot change
     * a primary key in place, so the table is copied (rowids kept: traces cite them). */
    "CREATE TABLE kernels_v5("
    KERNEL_COLUMNS
    "  weights TEXT NOT NULL DEFAULT '',"
    "  ref_gemm_us REAL, ref_stream_us REAL, mem_weight REAL,"
    "  method TEXT NOT NULL DEFAULT 'kernel',"
    "  PRIMARY KEY(signature, device_id, method));"
    "INSERT INTO kernels_v5(rowid, signature, device_id, op, n, mean_us, stddev_us, min_us, median_us,"
    "  source, measured_at, weights, ref_gemm_us, ref_stream_us, mem_weight)"
    "  SELECT rowid, signature, device_id, op, n, mean_us, stddev_us, min_us, median_us, source,"
    "  measured_at, weights, ref_gemm_us, ref_stream_us, mem_weight FROM kernels;"
    "DROP VIEW kernel_times;"
    "DROP TABLE kernels;"
    "ALTER TABLE kernels_v5 RENAME TO kernels;"
    "CREATE VIEW kernel_times AS"
    "  SELECT d.name AS device, d.fingerprint AS fingerprint, k.op AS op, k.signature AS signature,"
    "         k.n AS n, k.median_us AS median_us, k.mean_us AS mean_us, k.stddev_us AS stddev_us,"
    "         k.min_us AS min_us, k.source AS source, k.measured_at AS measured_at,"
    "         k.weights AS weights, k.ref_gemm_us AS ref_gemm_us, k.ref_stream_us AS ref_stream_us,"
    "         k.mem_weight AS mem_weight, k.method AS method"
    "  FROM kernels k JOIN devices d ON d.id = k.device_id;",
};
G_STATIC_ASSERT(G_N_ELEMENTS(migrations) == PSIM_COST_DB_SCHEMA_VERSION);

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* What each schema version holds that placesim reads or writes: a DB missing one of these tables
 * or columns (dropped by hand, or a damaged file) is refused at open, naming the table, rather
 * than failing query by query later. */
static const struct {
    int since;
    const char *table;
    const char *columns;
} expected[] = {
    {1, "meta", "key, value"},
    {1, "devices", "id, name, type, fingerprint, cpu_model, gpu_name, driver_version, library_versions,"
                   " n_cores, host, first_seen"},
    {1, "kernels", "signature, device_id, op, n, mean_us, stddev_us, min_us, median_us, source, measured_at"},
    {1, "links", "src_id, dst_id, bytes, n, mean_us, stddev_us, min_us, median_us, source, measured_at"},
    {1, "calibration", "device_id, kind, value, detail, measured_at"},
    {2, "link_fits", "src_id, dst_id, latency_us, bandwidth_GBps, n_sizes, rms_rel_error, fitted_at"},
    {3, "kernels", "weights"},
    {4, "kernels", "ref_gemm_us, ref_stream_us, mem_weight"},
    {5, "kernels", "method"},
};

static int exec(PsimCostDb *db, const char *sql) { return sqlite3_exec(db->sql, sql, NULL, NULL, NULL); }

/* A command that writes met a DB it cannot write: the file's mode, or a writable file in a
 * read-only folder (where no WAL file or lock can be made). */
static void readonly_error(PsimCostDb *db, GError **error)
{
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                "%s: the cost DB is read-only (file mode or folder) and this command writes to it: "
                "make it writable or give another --db", db->path);
}

/* BEGIN IMMEDIATE takes the write lock up front (no deadlock between two readers upgrading);
 * the busy timeout waits for the other writer, and we retry on top of it for long holders. */
static gboolean begin(PsimCostDb *db, GError **error)
{
    if (db->readonly) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: the cost DB was opened read-only; this step writes to it", db->path);
        return FALSE;
    }
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 20; attempt++) {
        rc = exec(db, "BEGIN IMMEDIATE");
        if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
            break;
        g_usleep(50000);
    }
    if ((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN) {
        readonly_error(db, error);
        return FALSE;
    }
    if (rc != SQLITE_OK) {
        psim__sqlite_error(db->sql, rc, db->path, "begin transaction", error);
        return FALSE;
    }
    return TRUE;
}

static gboolean commit(PsimCostDb *db, GError **error)
{
    int rc = exec(db, "COMMIT");
    if (rc != SQLITE_OK) {
        psim__sqlite_error(db->sql, rc, db->path, "commit", error);
        exec(db, "ROLLBACK");
        return FALSE;
    }
    return TRUE;
}

static void rollback(PsimCostDb *db) { exec(db, "ROLLBACK"); }

/* A file that is not SQLite is refused before SQLite sees it. A missing or empty file becomes a
 * new DB, as sqlite3 does, unless the DB is only to be read (then there is nothing to read). */
static gboolean check_header(const char *path, gboolean readonly, GError **error)
{
    /* A folder, a device or a pipe (reading /dev/zero or a FIFO would never end). */
    if (g_file_test(path, G_FILE_TEST_EXISTS) && !g_file_test(path, G_FILE_TEST_IS_REGULAR)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: not a regular file, so not a cost DB", path);
        return FALSE;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT && !readonly)
            return TRUE; /* created on open */
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", path, g_strerror(errno));
        return FALSE;
    }
    char head[16];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got == 0 && !readonly)
        return TRUE;
    if (got == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: an empty file, not a cost DB (placesim profile fills one)", path);
        return FALSE;
    }
    if (got < sizeof head || memcmp(head, "SQLite format 3", 16)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: not an SQLite database (no SQLite header); expected a cost DB", path);
        return FALSE;
    }
    return TRUE;
}

static int user_version(PsimCostDb *db, int *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db->sql, "PRAGMA user_version", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *v = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* The file's schema version, which must be one this build knows: it indexes migrations[]. */
static gboolean schema_version(PsimCostDb *db, int *v, GError **error)
{
    int rc = user_version(db, v);
    if (rc != SQLITE_OK) {
        psim__sqlite_error_input(db->sql, rc, db->path, "read schema version", error);
        return FALSE;
    }
    if (*v < 0 || *v > PSIM_COST_DB_SCHEMA_VERSION) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: schema version %d is not one this placesim knows (0..%d)%s", db->path, *v,
                    PSIM_COST_DB_SCHEMA_VERSION,
                    *v > 0 ? "; written by a newer placesim? use a newer placesim or another DB" : "");
        return FALSE;
    }
    return TRUE;
}

/* A version-0 file must be empty: anything else is someone else's database. */
static gboolean check_empty(PsimCostDb *db, GError **error)
{
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    PSIM_SQLITE_CHECK_INPUT(db->sql, sqlite3_prepare_v2(db->sql,
                      "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 1",
                      -1, &st, NULL), db->path, "read schema", error);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK_INPUT(db->sql, rc, db->path, "read schema", error);
    if (rc == SQLITE_ROW) {
        const char *table = (const char *)sqlite3_column_text(st, 0);
        g_autofree char *name = g_utf8_make_valid(table ? table : "", -1);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: an SQLite database but not a placesim cost DB (it has table '%s' and "
                    "no schema version)", db->path, g_strdelimit(name, "\r\n", ' '));
        goto out;
    }
    ok = TRUE;
out:
    sqlite3_finalize(st);
    return ok;
}

/* Every table and column that schema `version` promises (expected[]) is there. */
static gboolean check_schema(PsimCostDb *db, int version, GError **error)
{
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    for (size_t i = 0; i < G_N_ELEMENTS(expected); i++) {
        if (expected[i].since > version)
            continue;
        PSIM_SQLITE_CHECK_INPUT(db->sql, sqlite3_prepare_v2(db->sql,
                          "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &st,
                          NULL), db->path, "read schema", error);
        sqlite3_bind_text(st, 1, expected[i].table, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        PSIM_SQLITE_CHECK_INPUT(db->sql, rc, db->path, "read schema", error);
        g_clear_pointer(&st, sqlite3_finalize);
        if (rc != SQLITE_ROW) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: table '%s' is missing (schema version %d has it): a damaged cost DB; "
                        "profile into a new one", db->path, expected[i].table, version);
            goto out;
        }
        g_autofree char *sql = g_strdup_printf("SELECT %s FROM \"%s\" LIMIT 0", expected[i].columns,
                                               expected[i].table);
        if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: table '%s': %s (schema version %d has it): a damaged cost DB; "
                        "profile into a new one", db->path, expected[i].table,
                        sqlite3_errmsg(db->sql), version);
            goto out;
        }
        g_clear_pointer(&st, sqlite3_finalize);
    }
    ok = TRUE;
out:
    sqlite3_finalize(st);
    return ok;
}

static gboolean migrate(PsimCostDb *db, int target, GError **error)
{
    gboolean ok = FALSE;
    int v = 0;
    if (!begin(db, error))
        return FALSE;
    /* Read again inside the write lock: another process may have migrated the file meanwhile. */
    if (!schema_version(db, &v, error))
        goto out;
    if (v > target) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: cost DB schema version %d is newer than this one (%d)", db->path, v, target);
        goto out;
    }
    if (v == 0 ? !check_empty(db, error) : !check_schema(db, v, error))
        goto out;
    for (int i = v; i < target; i++)
        PSIM_SQLITE_CHECK_INPUT(db->sql, exec(db, migrations[i]), db->path, "migrate schema", error);
    if (v != target) {
        g_autofree char *sql = g_strdup_printf(
            "PRAGMA user_version = %d;"
            "INSERT INTO meta VALUES ('schema_version', '%d') ON CONFLICT(key) DO UPDATE SET value = excluded.value;",
            target, target);
        PSIM_SQLITE_CHECK_INPUT(db->sql, exec(db, sql), db->path, "record schema version", error);
        PSIM_SQLITE_CHECK_INPUT(db->sql, exec(db,
            "INSERT INTO meta VALUES ('created_by', 'placesim " PSIM_VERSION_STRING "') ON CONFLICT(key) DO NOTHING;"
            "INSERT INTO meta VALUES ('created_at', " NOW ") ON CONFLICT(key) DO NOTHING;"),
            db->path, "record schema version", error);
    }
    ok = commit(db, error);
out:
    if (!ok)
        rollback(db);
    return ok;
}

/* Runs a one-row PRAGMA, retrying while another process holds the lock: switching a new file to
 * WAL takes an exclusive lock, and SQLite may answer BUSY at once, without its busy handler,
 * when another process is creating the same DB. The statement is left in *st for its row. */
static int pragma_retry(PsimCostDb *db, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(db->sql, sql, -1, st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(*st);
    for (int tries = 0; (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 3000; tries++) {
        g_usleep(20000);
        sqlite3_reset(*st);
        rc = sqlite3_step(*st);
    }
    return rc;
}

/* Opens the SQLite connection. Read-only: SQLITE_OPEN_READONLY, and when a WAL file's shared
 * memory can be neither found nor created (a read-only folder, or a 0444 file after its last
 * writer closed it cleanly, so no WAL content exists), the file is opened immutable. */
static gboolean db_connect(PsimCostDb *db, GError **error)
{
    gboolean ok = FALSE;
    int flags = SQLITE_OPEN_FULLMUTEX |
                (db->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    PSIM_SQLITE_CHECK_INPUT(db->sql, sqlite3_open_v2(db->path, &db->sql, flags, NULL), db->path,
                      "cannot open the cost DB", error);
    sqlite3_busy_timeout(db->sql, 60000);
    if (db->readonly) {
        int v, rc = user_version(db, &v);
        if ((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN) {
            sqlite3_close(db->sql);
            db->sql = NULL;
            g_autofree char *esc = g_uri_escape_string(db->path, "/", FALSE);
            g_autofree char *uri = g_strconcat("file:", esc, "?immutable=1", NULL);
            PSIM_SQLITE_CHECK_INPUT(db->sql, sqlite3_open_v2(uri, &db->sql, flags | SQLITE_OPEN_URI, NULL),
                              db->path, "cannot open the cost DB", error);
        }
    } else if (sqlite3_db_readonly(db->sql, "main") == 1) {
        readonly_error(db, error);
        goto out;
    }
    ok = TRUE;
out:
    return ok;
}

static PsimCostDb *open_db(const char *path, int version, gboolean readonly, GError **error)
{
    if (!check_header(path, readonly, error))
        return NULL;
    PsimCostDb *db = g_new0(PsimCostDb, 1);
    db->path = g_strdup(path);
    db->readonly = readonly;
    g_mutex_init(&db->lock);
    db->dev_ids = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    sqlite3_stmt *st = NULL;
    int rc;
    if (!db_connect(db, error))
        goto out;
    if (!readonly) {
        /* WAL: readers never block the writer, and writers queue on one lock. A reader leaves
         * the journal mode as the writers set it. */
        rc = pragma_retry(db, "PRAGMA journal_mode = WAL", &st);
        if ((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN) {
            readonly_error(db, error);
            goto out;
        }
        PSIM_SQLITE_CHECK_INPUT(db->sql, rc, path, "set WAL mode", error);
        if (rc != SQLITE_ROW || g_ascii_strcasecmp((const char *)sqlite3_column_text(st, 0), "wal")) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot switch the cost DB to WAL mode", path);
            goto out;
        }
        g_clear_pointer(&st, sqlite3_finalize);
        PSIM_SQLITE_CHECK_INPUT(db->sql, exec(db, "PRAGMA synchronous = NORMAL"), path, "open", error);
    }
    PSIM_SQLITE_CHECK_INPUT(db->sql, exec(db, "PRAGMA foreign_keys = ON"), path, "open", error);
    /* quick_check reads every page once: cheap for a cost DB, and a damaged file is caught
     * here rather than half way through a profile. */
    rc = pragma_retry(db, "PRAGMA quick_check", &st);
    PSIM_SQLITE_CHECK_INPUT(db->sql, rc, path, "check integrity", error);
    if (rc == SQLITE_ROW && g_strcmp0((const char *)sqlite3_column_text(st, 0), "ok")) {
        /* SQLite's report spans lines and may quote damaged bytes: its first finding, on the
         * one error line, says enough. */
        const char *report = (const char *)sqlite3_column_text(st, 0);
        g_auto(GStrv) lines = g_strsplit(report ? report : "", "\n", 3);
        const char *first = lines[0] && strstr(lines[0], "***") && lines[1] ? lines[1] : lines[0];
        g_autofree char *valid = g_utf8_make_valid(first ? first : "", -1);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: corrupt cost DB: %s", path, valid);
        goto out;
    }
    g_clear_pointer(&st, sqlite3_finalize);
    if (readonly) {
        /* Read as it is: no migration (that would write); queries follow db->version. */
        int v = 0;
        if (!schema_version(db, &v, error))
            goto out;
        if (v == 0) {
            if (check_empty(db, error))
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                            "%s: an empty cost DB (no schema yet; placesim profile fills one)", path);
            goto out;
        }
        if (!check_schema(db, v, error))
            goto out;
        db->version = v;
    } else {
        if (!migrate(db, version, error))
            goto out;
        db->version = version;
    }
    return db;
out:
    sqlite3_finalize(st);
    psim_cost_db_close(db);
    return NULL;
}

PsimCostDb *psim__cost_db_open_version(const char *path, int version, GError **error)
{
    g_return_val_if_fail(path && version >= 1 && version <= PSIM_COST_DB_SCHEMA_VERSION, NULL);
    return open_db(path, version, FALSE, error);
}

PsimCostDb *psim_cost_db_open(const char *path, GError **error)
{
    g_return_val_if_fail(path, NULL);
    return open_db(path, PSIM_COST_DB_SCHEMA_VERSION, FALSE, error);
}

PsimCostDb *psim_cost_db_open_readonly(const char *path, GError **error)
{
    g_return_val_if_fail(path, NULL);
    return open_db(path, 0, TRUE, error);
}

void psim_cost_db_close(PsimCostDb *db)
{
    if (!db)
        return;
    sqlite3_close(db->sql);
    g_hash_table_destroy(db->dev_ids);
    g_mutex_clear(&db->lock);
    g_free(db->path);
    g_free(db);
}

const char *psim_cost_db_path(const PsimCostDb *db) { return db->path; }

int psim_cost_db_schema_version(PsimCostDb *db)
{
    int v = -1;
    g_mutex_lock(&db->lock);
    if (user_version(db, &v) != SQLITE_OK)
        v = -1;
    g_mutex_unlock(&db->lock);
    return v;
}

gboolean psim__cost_db_exec(PsimCostDb *db, const char *sql, GError **error)
{
    gboolean ok = FALSE;
    g_mutex_lock(&db->lock);
    if (begin(db, error)) {
        int rc = exec(db, sql);
        if (rc == SQLITE_OK)
            ok = commit(db, error);
        else {
            psim__sqlite_error(db->sql, rc, db->path, "exec", error);
            rollback(db);
        }
    }
    g_mutex_unlock(&db->lock);
    return ok;
}

/* The id of device d's row under its current fingerprint, inserted when `create` (inside the
 * caller's write transaction); 0 when absent. */
static gboolean device_id(PsimCostDb *db, const PsimDevice *d, const PsimFingerprint *f,
                          gboolean create, gint64 *id, GError **error)
{
    g_autofree char *key = g_strdup_printf("%s\n%s", d->name, f->digest);
    gint64 *cached = g_hash_table_lookup(db->dev_ids, key);
    if (cached) {
        *id = *cached;
        return TRUE;
    }
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    *id = 0;
    if (create) {
        PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
            "INSERT INTO devices(name, type, fingerprint, cpu_model, gpu_name, driver_version,"
            " library_versions, n_cores, host, first_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")"
            " ON CONFLICT(name, fingerprint) DO NOTHING", -1, &st, NULL), db->path, "add device", error);
        sqlite3_bind_text(st, 1, d->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, d->type, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, f->cpu_model, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 5, f->gpu_name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 6, f->driver_version, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 7, f->library_versions, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 8, f->n_cores);
        sqlite3_bind_text(st, 9, g_get_host_name(), -1, SQLITE_TRANSIENT);
        PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "add device", error);
        g_clear_pointer(&st, sqlite3_finalize);
    }
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql, "SELECT id FROM devices WHERE name = ?1 AND fingerprint = ?2",
                                             -1, &st, NULL), db->path, "find device", error);
    sqlite3_bind_text(st, 1, d->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, "find device", error);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        g_hash_table_insert(db->dev_ids, g_steal_pointer(&key), g_memdup2(id, sizeof *id));
    }
    ok = TRUE;
out:
    sqlite3_finalize(st);
    return ok;
}

static void bind_stats(sqlite3_stmt *st, int first, const PsimTimingStats *s)
{
    sqlite3_bind_int64(st, first, s->n);
    sqlite3_bind_double(st, first + 1, s->mean_us);
    sqlite3_bind_double(st, first + 2, s->stddev_us);
    sqlite3_bind_double(st, first + 3, s->min_us);
    sqlite3_bind_double(st, first + 4, s->median_us);
}

static void read_stats(sqlite3_stmt *st, int first, PsimTimingStats *s)
{
    s->n = sqlite3_column_int64(st, first);
    s->mean_us = sqlite3_column_double(st, first + 1);
    s->stddev_us = sqlite3_column_double(st, first + 2);
    s->min_us = sqlite3_column_double(st, first + 3);
    s->median_us = sqlite3_column_double(st, first + 4);
}

gboolean psim_cost_db_kernel_put(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 const char *op, const char *source, const PsimTimingStats *s,
                                 GError **error)
{
    return psim_cost_db_kernel_put_weights(db, d, signature, op, source, NULL, s, error);
}

gboolean psim_cost_db_kernel_put_weights(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                         const char *op, const char *source, const char *weights,
                                         const PsimTimingStats *s, GError **error)
{
    return psim_cost_db_kernel_put_ref(db, d, signature, op, source, weights, NULL, NAN, s, error);
}

/* One kernels row: a kernel timed alone (with its weights mode and the host's reference when
 * given), or another method's (NULL: 'kernel'; 'insitu': times from whole-model runs; 'idle':
 * the extra time of an op after its device waited, under psim_cost_idle_key). */
static gboolean kernel_put_row(PsimCostDb *db, const PsimDevice *d, const char *signature, const char *op,
                               const char *source, const char *weights, const PsimSpeedRef *ref,
                               double mem_weight, const char *method, const PsimTimingStats *s, GError **error)
{
    g_return_val_if_fail(db && d && signature && s && s->n > 0, FALSE);
    gboolean with_method = method != NULL;
    if (with_method && db->version < 5) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: schema version %d has no in-situ rows (5 has): open it to write to migrate it",
                    db->path, db->version);
        return FALSE;
    }
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    gboolean ok = FALSE, open = FALSE;
    sqlite3_stmt *st = NULL;
    gint64 id;
    g_mutex_lock(&db->lock);
    if (!(open = begin(db, error)))
        goto out;
    if (!device_id(db, d, f, TRUE, &id, error))
        goto out;
    /* Without a mode (or a reference) the columns are left out (their defaults), so that tests
     * can still write rows into DBs made at older schema versions. */
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        with_method ? "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
                      " median_us, source, measured_at, method) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ", ?10)"
        : ref ? "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
              " median_us, source, measured_at, weights, ref_gemm_us, ref_stream_us, mem_weight)"
              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ", ?10, ?11, ?12, ?13)"
        : weights
        ? "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
          " median_us, source, measured_at, weights) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ", ?10)"
        : "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
          " median_us, source, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")",
        -1, &st, NULL), db->path, "store kernel timing", error);
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_text(st, 3, op ? op : "", -1, SQLITE_TRANSIENT);
    bind_stats(st, 4, s);
    sqlite3_bind_text(st, 9, source ? source : "clock", -1, SQLITE_TRANSIENT);
    if (with_method)
        sqlite3_bind_text(st, 10, method, -1, SQLITE_TRANSIENT);
    else if (weights || ref)
        sqlite3_bind_text(st, 10, weights ? weights : "", -1, SQLITE_TRANSIENT);
    if (ref) {
        if (ref->gemm_us > 0 && ref->stream_us > 0 && isfinite(mem_weight)) {
            sqlite3_bind_double(st, 11, ref->gemm_us);
            sqlite3_bind_double(st, 12, ref->stream_us);
            sqlite3_bind_double(st, 13, mem_weight);
        } else
            for (int i = 11; i <= 13; i++)
                sqlite3_bind_null(st, i);
    }
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "store kernel timing", error);
    g_clear_pointer(&st, sqlite3_finalize);
    ok = commit(db, error);
    open = FALSE;
out:
    sqlite3_finalize(st);
    if (open)
        rollback(db);
    if (!ok)
        g_hash_table_remove_all(db->dev_ids); /* a rolled-back insert's id is void */
    g_mutex_unlock(&db->lock);
    return ok;
}

gboolean psim_cost_db_kernel_put_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     const char *op, const char *source, const char *weights,
                                     const PsimSpeedRef *ref, double mem_weight,
                                     const PsimTimingStats *s, GError **error)
{
    return kernel_put_row(db, d, signature, op, source, weights, ref, mem_weight, NULL, s, error);
}

gboolean psim_cost_db_kernel_get(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 PsimTimingStats *s, gboolean *other_fingerprint, GError **error)
{
    return psim_cost_db_kernel_get_ref(db, d, signature, s, NULL, NULL, other_fingerprint, error);
}

gboolean psim_cost_db_kernel_get_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     PsimTimingStats *s, PsimSpeedRef *ref, double *mem_weight,
                                     gboolean *other_fingerprint, GError **error)
{
    return psim_cost_db_kernel_get_row(db, d, signature, s, ref, mem_weight, NULL, other_fingerprint, error);
}

gboolean psim_cost_db_kernel_get_row(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     PsimTimingStats *s, PsimSpeedRef *ref, double *mem_weight,
                                     int64_t *row_id, gboolean *other_fingerprint, GError **error)
{
    if (row_id)
        *row_id = -1;
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    if (ref)
        *ref = (PsimSpeedRef){0, 0};
    if (mem_weight)
        *mem_weight = NAN;
    gboolean with_ref = (ref || mem_weight) && db->version >= 4;
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    if (other_fingerprint)
        *other_fingerprint = FALSE;
    g_mutex_lock(&db->lock);
    /* This device's own row first, then one of identical hardware (same fingerprint). */
    /* An in-situ row (schema 5) before a kernel-alone one: it was timed in the chain of a real
     * step (producers' outputs in cache, the executor's own dispatch), which is what the model
     * predicts. */
    g_autofree char *sql = g_strdup_printf(
        "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us, k.rowid%s FROM kernels k"
        " JOIN devices d ON d.id = k.device_id WHERE k.signature = ?1 AND d.fingerprint = ?2"
        " ORDER BY %s(d.name = ?3) DESC, k.n DESC LIMIT 1",
        with_ref ? ", k.ref_gemm_us, k.ref_stream_us, k.mem_weight" : "",
        db->version >= 5 ? "(k.method = 'insitu') DESC, " : "");
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL),
                       db->path, "read kernel timing", error);
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, d->name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, "read kernel timing", error);
    if (rc == SQLITE_ROW) {
        read_stats(st, 0, s);
        if (row_id)
            *row_id = sqlite3_column_int64(st, 5);
        if (with_ref && sqlite3_column_type(st, 6) != SQLITE_NULL && sqlite3_column_type(st, 8) != SQLITE_NULL) {
            if (ref)
                *ref = (PsimSpeedRef){sqlite3_column_double(st, 6), sqlite3_column_double(st, 7)};
            if (mem_weight)
                *mem_weight = sqlite3_column_double(st, 8);
        }
        found = TRUE;
    } else if (other_fingerprint) {
        g_clear_pointer(&st, sqlite3_finalize);
        PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
            "SELECT 1 FROM kernels k JOIN devices d ON d.id = k.device_id"
            " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint != ?3 LIMIT 1", -1, &st, NULL),
            db->path, "read kernel timing", error);
        sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, d->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        PSIM_SQLITE_CHECK(db->sql, rc, db->path, "read kernel timing", error);
        *other_fingerprint = rc == SQLITE_ROW;
    }
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

/* Runs sql with text parameters ?1..?n (params) and reads its first row's first column: as
 * text into *text ("" for NULL) or as a number into *num (either may be NULL: only whether there
 * is a row). Returns whether there was a row; FALSE with error set on a database error, which
 * `what` names ("read kernel timing"). */
static gboolean query_first(PsimCostDb *db, const char *what, const char *sql, const char *const *params,
                            int n_params, char **text, double *num, GError **error)
{
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL), db->path, what, error);
    for (int i = 0; i < n_params; i++)
        sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, what, error);
    found = rc == SQLITE_ROW;
    if (found && text) {
        const unsigned char *w = sqlite3_column_text(st, 0);
        *text = g_strdup(w ? (const char *)w : "");
    }
    if (found && num)
        *num = sqlite3_column_double(st, 0);
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

/* query_first with ?1 signature, ?2 device name, ?3 fingerprint digest. */
static gboolean kernel_query(PsimCostDb *db, const PsimDevice *d, const char *signature, const char *sql,
                             char **text, GError **error)
{
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    const char *params[] = {signature, d->name, f->digest};
    return query_first(db, "read kernel timing", sql, params, 3, text, NULL, error);
}

gboolean psim_cost_db_kernel_has(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 GError **error)
{
    return kernel_query(db, d, signature,
                        "SELECT 1 FROM kernels k JOIN devices d ON d.id = k.device_id"
                        " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint = ?3", NULL, error);
}

gboolean psim_cost_db_kernel_get_weights(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                         char **weights, GError **error)
{
    *weights = NULL;
    return kernel_query(db, d, signature,
                        db->version >= 5 ? "SELECT k.weights FROM kernels k JOIN devices d ON d.id = k.device_id"
                                           " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint = ?3"
                                           " AND k.method = 'kernel'"
                                         : "SELECT k.weights FROM kernels k JOIN devices d ON d.id = k.device_id"
                                           " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint = ?3",
                        weights, error);
}

gboolean psim_cost_db_kernel_put_insitu(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                        const char *op, const char *source, const PsimTimingStats *s,
                                        GError **error)
{
    return kernel_put_row(db, d, signature, op, source ? source : "monotonic", NULL, NULL, NAN, "insitu", s, error);
}

gboolean psim_cost_db_idle_put(PsimCostDb *db, const PsimDevice *d, const char *signature, const char *op,
                               double gap_us, const PsimTimingStats *s, GError **error)
{
    g_autofree char *key = psim_cost_idle_key(signature, gap_us);
    return kernel_put_row(db, d, key, op, "monotonic", NULL, NULL, NAN, "idle", s, error);
}

gboolean psim_cost_db_kernel_get_method(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                        const char *method, PsimTimingStats *s, GError **error)
{
    if (db->version < 5 && strcmp(method, "kernel"))
        return FALSE;
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        db->version >= 5 ? "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us FROM kernels k"
                           " JOIN devices d ON d.id = k.device_id WHERE k.signature = ?1"
                           " AND d.fingerprint = ?2 AND k.method = ?4 ORDER BY (d.name = ?3) DESC LIMIT 1"
                         : "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us FROM kernels k"
                           " JOIN devices d ON d.id = k.device_id WHERE k.signature = ?1"
                           " AND d.fingerprint = ?2 AND ?4 = ?4 ORDER BY (d.name = ?3) DESC LIMIT 1",
        -1, &st, NULL), db->path, "read kernel timing", error);
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, d->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, method, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, "read kernel timing", error);
    if (rc == SQLITE_ROW) {
        if (s)
            read_stats(st, 0, s);
        found = TRUE;
    }
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

gboolean psim_cost_db_link_put(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                               uint64_t bytes, const char *source, const PsimTimingStats *s,
                               GError **error)
{
    g_return_val_if_fail(db && src && dst && s && s->n > 0, FALSE);
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    g_autoptr(PsimFingerprint) fd = psim_fingerprint_new(dst);
    gboolean ok = FALSE, open = FALSE;
    sqlite3_stmt *st = NULL;
    gint64 is, id;
    g_mutex_lock(&db->lock);
    if (!(open = begin(db, error)))
        goto out;
    if (!device_id(db, src, fs, TRUE, &is, error) || !device_id(db, dst, fd, TRUE, &id, error))
        goto out;
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO links(src_id, dst_id, bytes, n, mean_us, stddev_us, min_us,"
        " median_us, source, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")",
        -1, &st, NULL), db->path, "store link timing", error);
    sqlite3_bind_int64(st, 1, is);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)bytes);
    bind_stats(st, 4, s);
    sqlite3_bind_text(st, 9, source ? source : "clock", -1, SQLITE_TRANSIENT);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "store link timing", error);
    g_clear_pointer(&st, sqlite3_finalize);
    ok = commit(db, error);
    open = FALSE;
out:
    sqlite3_finalize(st);
    if (open)
        rollback(db);
    if (!ok)
        g_hash_table_remove_all(db->dev_ids);
    g_mutex_unlock(&db->lock);
    return ok;
}

/* The pair's rows, sizes ascending, into xs and ts (median times). */
static gboolean link_rows(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst, GArray *xs,
                          GArray *ts, GError **error)
{
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    g_autoptr(PsimFingerprint) fd = psim_fingerprint_new(dst);
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "SELECT l.bytes, l.median_us FROM links l JOIN devices s ON s.id = l.src_id"
        " JOIN devices d ON d.id = l.dst_id WHERE s.name = ?1 AND s.fingerprint = ?2"
        " AND d.name = ?3 AND d.fingerprint = ?4 ORDER BY l.bytes", -1, &st, NULL),
            db->path, "read link timings", error);
    sqlite3_bind_text(st, 1, src->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, fs->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, dst->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, fd->digest, -1, SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        double x = (double)sqlite3_column_int64(st, 0), t = sqlite3_column_double(st, 1);
        g_array_append_val(xs, x);
        g_array_append_val(ts, t);
    }
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, "read link timings", error);
    ok = TRUE;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return ok;
}

gboolean psim_cost_db_link_fit(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                               PsimLink *out, double *rms_rel, int *n_sizes, GError **error)
{
    g_autoptr(GArray) xs = g_array_new(FALSE, FALSE, sizeof(double));
    g_autoptr(GArray) ts = g_array_new(FALSE, FALSE, sizeof(double));
    double rms = 0;
    if (!link_rows(db, src, dst, xs, ts, error))
        return FALSE;
    gboolean fitted = psim_link_fit((double *)xs->data, (double *)ts->data, (int)xs->len, out, &rms);
    if (fitted && rms_rel)
        *rms_rel = rms;
    if (fitted && n_sizes)
        *n_sizes = (int)xs->len;
    return fitted;
}

PsimLinkCurve *psim_cost_db_link_curve(PsimCostDb *db, const PsimDevice *src,
                                       const PsimDevice *dst, GError **error)
{
    g_autoptr(GArray) xs = g_array_new(FALSE, FALSE, sizeof(double));
    g_autoptr(GArray) ts = g_array_new(FALSE, FALSE, sizeof(double));
    if (!link_rows(db, src, dst, xs, ts, error))
        return NULL;
    PsimLinkCurve *k = g_new0(PsimLinkCurve, 1);
    k->bytes = g_new(double, xs->len + 1);
    k->us = g_new(double, xs->len + 1);
    for (guint i = 0; i < xs->len; i++) {
        double x = g_array_index(xs, double, i), t = g_array_index(ts, double, i);
        if (!(x >= 0) || !(t >= 0) || !isfinite(t) || (k->n > 0 && x <= k->bytes[k->n - 1]))
            continue;
        k->bytes[k->n] = x;
        /* A larger transfer never costs less than a smaller one: noise at the small sizes
         * would otherwise make the curve dip. */
        k->us[k->n] = MIN(k->n > 0 ? MAX(t, k->us[k->n - 1]) : t, PSIM_COST_MAX_US);
        k->n++;
    }
    if (k->n < 2) {
        psim_link_curve_free(k);
        return NULL;
    }
    return k;
}

void psim_link_curve_free(PsimLinkCurve *k)
{
    if (!k)
        return;
    g_free(k->bytes);
    g_free(k->us);
    g_free(k);
}

gboolean psim_cost_db_link_from(PsimCostDb *db, const PsimDevice *src, GError **error)
{
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    const char *params[] = {src->name, fs->digest};
    return query_first(db, "read link timings",
                       "SELECT 1 FROM links l JOIN devices s ON s.id = l.src_id"
                       " WHERE s.name = ?1 AND s.fingerprint = ?2 LIMIT 1", params, 2, NULL, NULL, error);
}

gboolean psim_cost_db_link_fit_put(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                                   const PsimLink *fit, int n_sizes, double rms_rel, GError **error)
{
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    g_autoptr(PsimFingerprint) fd = psim_fingerprint_new(dst);
    gboolean ok = FALSE, open = FALSE;
    sqlite3_stmt *st = NULL;
    gint64 is, id;
    g_mutex_lock(&db->lock);
    if (!(open = begin(db, error)))
        goto out;
    if (!device_id(db, src, fs, TRUE, &is, error) || !device_id(db, dst, fd, TRUE, &id, error))
        goto out;
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO link_fits VALUES (?1, ?2, ?3, ?4, ?5, ?6, " NOW ")", -1, &st, NULL),
        db->path, "store link fit", error);
    sqlite3_bind_int64(st, 1, is);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_double(st, 3, fit->latency_us);
    sqlite3_bind_double(st, 4, fit->bandwidth_GBps);
    sqlite3_bind_int(st, 5, n_sizes);
    sqlite3_bind_double(st, 6, rms_rel);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "store link fit", error);
    g_clear_pointer(&st, sqlite3_finalize);
    ok = commit(db, error);
    open = FALSE;
out:
    sqlite3_finalize(st);
    if (open)
        rollback(db);
    if (!ok)
        g_hash_table_remove_all(db->dev_ids);
    g_mutex_unlock(&db->lock);
    return ok;
}

gboolean psim_cost_db_calibration_put(PsimCostDb *db, const PsimDevice *d, const char *kind,
                                      double value, const char *detail, GError **error)
{
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    gboolean ok = FALSE, open = FALSE;
    sqlite3_stmt *st = NULL;
    gint64 id;
    g_mutex_lock(&db->lock);
    if (!(open = begin(db, error)))
        goto out;
    if (!device_id(db, d, f, TRUE, &id, error))
        goto out;
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO calibration VALUES (?1, ?2, ?3, ?4, " NOW ")", -1, &st, NULL),
        db->path, "store calibration", error);
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, value);
    sqlite3_bind_text(st, 4, detail ? detail : "", -1, SQLITE_TRANSIENT);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "store calibration", error);
    g_clear_pointer(&st, sqlite3_finalize);
    ok = commit(db, error);
    open = FALSE;
out:
    sqlite3_finalize(st);
    if (open)
        rollback(db);
    if (!ok)
        g_hash_table_remove_all(db->dev_ids);
    g_mutex_unlock(&db->lock);
    return ok;
}

gboolean psim_cost_db_calibration_get(PsimCostDb *db, const PsimDevice *d, const char *kind,
                                      double *value, GError **error)
{
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    const char *params[] = {kind, f->digest, d->name};
    return query_first(db, "read calibration",
                       "SELECT c.value FROM calibration c JOIN devices d ON d.id = c.device_id"
                       " WHERE c.kind = ?1 AND d.fingerprint = ?2 ORDER BY (d.name = ?3) DESC LIMIT 1",
                       params, 3, NULL, value, error);
}

gboolean psim_cost_db_calibrate_cluster(PsimCostDb *db, PsimCluster *c, guint *which, GError **error)
{
    g_return_val_if_fail(db && c, FALSE);
    for (int32_t i = 0; i < psim_cluster_n_devices(c); i++) {
        PsimDevice *d = psim_cluster_device(c, i);
        double peak = 0, bw = 0, launch = -1;
        GError *err = NULL;
        guint got = 0;
        /* The cost model's rules (cost/cost.c rates()): rates must be positive, launch not
         * negative; anything else leaves the cluster's own figure. */
        if (psim_cost_db_calibration_get(db, d, "gemm_gflops", &peak, &err) && peak > 0 && isfinite(peak))
            d->peak_gflops = peak, got |= PSIM_CALIBRATED_PEAK;
        if (!err && psim_cost_db_calibration_get(db, d, "copy_GBps", &bw, &err) && bw > 0 && isfinite(bw))
            d->mem_bw_GBps = bw, got |= PSIM_CALIBRATED_MEM_BW;
        if (!err && psim_cost_db_calibration_get(db, d, "launch_us", &launch, &err) && launch >= 0 &&
            isfinite(launch))
            d->launch_us = launch, got |= PSIM_CALIBRATED_LAUNCH;
        if (err) {
            g_propagate_error(error, err);
            return FALSE;
        }
        if (which)
            which[i] = got;
    }
    return TRUE;
}

/* Columns are NOT NULL in the schema, but a damaged file may still hold NULL anywhere. */
static const char *column_text(sqlite3_stmt *st, int i)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? t : "";
}

gboolean psim_cost_db_kernel_foreach(PsimCostDb *db, PsimCostDbKernelFunc fn, void *user, GError **error)
{
    g_return_val_if_fail(db && fn, FALSE);
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    int rc;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us, k.rowid, d.name, d.fingerprint,"
        " k.signature, k.op FROM kernels k JOIN devices d ON d.id = k.device_id ORDER BY k.rowid",
        -1, &st, NULL), db->path, "read kernel timings", error);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        PsimCostDbKernelRow row;
        read_stats(st, 0, &row.stats);
        row.id = sqlite3_column_int64(st, 5);
        row.device = column_text(st, 6);
        row.fingerprint = column_text(st, 7);
        row.signature = column_text(st, 8);
        row.op = column_text(st, 9);
        fn(&row, user);
    }
    PSIM_SQLITE_CHECK(db->sql, rc, db->path, "read kernel timings", error);
    ok = TRUE;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return ok;
}

gboolean psim_cost_db_has_node_rows(PsimCostDb *db, GError **error)
{
    if (db->version < 5)
        return FALSE;
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql,
        "SELECT EXISTS(SELECT 1 FROM kernels WHERE method = 'insitu' AND instr(signature, '" PSIM_COST_NODE_SEP "') > 0)",
        -1, &st, NULL), db->path, "look for in-situ node rows", error);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "look for in-situ node rows", error);
    found = sqlite3_column_int(st, 0) != 0;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

int64_t psim_cost_db_count(PsimCostDb *db, const char *table, GError **error)
{
    static const char *const tables[] = {"kernels", "links", "devices", "calibration", "link_fits", NULL};
    g_return_val_if_fail(g_strv_contains(tables, table), -1);
    int64_t n = -1;
    sqlite3_stmt *st = NULL;
    g_autofree char *sql = g_strdup_printf("SELECT count(*) FROM %s", table);
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL),
        db->path, "count rows", error);
    PSIM_SQLITE_CHECK(db->sql, sqlite3_step(st), db->path, "count rows", error);
    n = sqlite3_column_int64(st, 0);
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return n;
}
