/* The cost DB: SQLite in WAL mode with a busy timeout, a versioned schema with migrations, and
 * one transaction per write so that several profilers can share a file. docs/cost-db.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cost/db-private.h"

struct PsimCostDb {
    sqlite3 *sql;
    char *path;
    GMutex lock;
    GHashTable *dev_ids; /* "name\ndigest" -> gint64 id (device rows never change id) */
    int version;         /* the schema version it was opened at */
};

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
    "  signature TEXT NOT NULL,"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"
    "  op TEXT NOT NULL,"
    "  n INTEGER NOT NULL CHECK (n > 0),"
    "  mean_us REAL NOT NULL, stddev_us REAL NOT NULL, min_us REAL NOT NULL, median_us REAL NOT NULL,"
    "  source TEXT NOT NULL,"
    "  measured_at TEXT NOT NULL,"
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
};
G_STATIC_ASSERT(G_N_ELEMENTS(migrations) == PSIM_COST_DB_SCHEMA_VERSION);

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* SQLite codes that mean the file itself is bad (exit 2), not the run. */
static int error_code(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
        return PSIM_ERROR_INPUT;
    default:
        return PSIM_ERROR_RUNTIME;
    }
}

static void sql_error(PsimCostDb *db, int rc, const char *what, GError **error)
{
    const char *msg = db->sql ? sqlite3_errmsg(db->sql) : sqlite3_errstr(rc);
    if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB)
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: corrupt or not a cost DB (%s: %s)",
                    db->path, what, msg);
    else
        g_set_error(error, PSIM_ERROR, error_code(rc), "%s: %s: %s", db->path, what, msg);
}

/* Turns an SQLite status into a GError and jumps to the cleanup label `out`. */
#define PSIM_SQLITE_CHECK(db, expr, what)                                                    \
    do {                                                                                     \
        int rc_ = (expr);                                                                    \
        if (rc_ != SQLITE_OK && rc_ != SQLITE_ROW && rc_ != SQLITE_DONE) {                   \
            sql_error((db), rc_, (what), error);                                             \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

static int exec(PsimCostDb *db, const char *sql) { return sqlite3_exec(db->sql, sql, NULL, NULL, NULL); }

/* BEGIN IMMEDIATE takes the write lock up front (no deadlock between two readers upgrading);
 * the busy timeout waits for the other writer, and we retry on top of it for long holders. */
static gboolean begin(PsimCostDb *db, GError **error)
{
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 20; attempt++) {
        rc = exec(db, "BEGIN IMMEDIATE");
        if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
            break;
        g_usleep(50000);
    }
    if (rc != SQLITE_OK) {
        sql_error(db, rc, "begin transaction", error);
        return FALSE;
    }
    return TRUE;
}

static gboolean commit(PsimCostDb *db, GError **error)
{
    int rc = exec(db, "COMMIT");
    if (rc != SQLITE_OK) {
        sql_error(db, rc, "commit", error);
        exec(db, "ROLLBACK");
        return FALSE;
    }
    return TRUE;
}

static void rollback(PsimCostDb *db) { exec(db, "ROLLBACK"); }

static gboolean check_header(const char *path, GError **error)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return TRUE; /* created on open */
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", path, g_strerror(errno));
        return FALSE;
    }
    char head[16];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got == 0)
        return TRUE; /* an empty file becomes a new DB, as sqlite3 does */
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

static gboolean migrate(PsimCostDb *db, int target, GError **error)
{
    gboolean ok = FALSE;
    sqlite3_stmt *st = NULL;
    int v = 0;
    if (!begin(db, error))
        return FALSE;
    PSIM_SQLITE_CHECK(db, user_version(db, &v), "read schema version");
    if (v > target) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: cost DB schema version %d is newer than this placesim's (%d); "
                    "use a newer placesim or another DB", db->path, v, target);
        goto out;
    }
    if (v == 0) {
        /* A version-0 file must be empty: anything else is someone else's database. */
        PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
                          "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 1",
                          -1, &st, NULL), "read schema");
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: an SQLite database but not a placesim cost DB (it has table '%s' and "
                        "no schema version)", db->path, (const char *)sqlite3_column_text(st, 0));
            goto out;
        }
        PSIM_SQLITE_CHECK(db, rc, "read schema");
    }
    for (int i = v; i < target; i++)
        PSIM_SQLITE_CHECK(db, exec(db, migrations[i]), "migrate schema");
    if (v != target) {
        g_autofree char *sql = g_strdup_printf(
            "PRAGMA user_version = %d;"
            "INSERT INTO meta VALUES ('schema_version', '%d') ON CONFLICT(key) DO UPDATE SET value = excluded.value;",
            target, target);
        PSIM_SQLITE_CHECK(db, exec(db, sql), "record schema version");
        PSIM_SQLITE_CHECK(db, exec(db,
            "INSERT INTO meta VALUES ('created_by', 'placesim " PSIM_VERSION_STRING "') ON CONFLICT(key) DO NOTHING;"
            "INSERT INTO meta VALUES ('created_at', " NOW ") ON CONFLICT(key) DO NOTHING;"),
            "record schema version");
    }
    ok = commit(db, error);
out:
    sqlite3_finalize(st);
    if (!ok)
        rollback(db);
    return ok;
}

PsimCostDb *psim__cost_db_open_version(const char *path, int version, GError **error)
{
    g_return_val_if_fail(path && version >= 1 && version <= PSIM_COST_DB_SCHEMA_VERSION, NULL);
    if (!check_header(path, error))
        return NULL;
    PsimCostDb *db = g_new0(PsimCostDb, 1);
    db->path = g_strdup(path);
    g_mutex_init(&db->lock);
    db->dev_ids = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_open_v2(path, &db->sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: cannot open the cost DB: %s", path,
                    db->sql ? sqlite3_errmsg(db->sql) : sqlite3_errstr(rc));
        goto out;
    }
    sqlite3_extended_result_codes(db->sql, 0);
    sqlite3_busy_timeout(db->sql, 60000);
    /* WAL: readers never block the writer, and writers queue on one lock. */
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql, "PRAGMA journal_mode = WAL", -1, &st, NULL), "open");
    /* Switching a new file to WAL takes an exclusive lock, and SQLite may answer BUSY at once,
     * without its busy handler, when another process is creating the same DB: retry. */
    rc = sqlite3_step(st);
    for (int tries = 0; (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 3000; tries++) {
        g_usleep(20000);
        sqlite3_reset(st);
        rc = sqlite3_step(st);
    }
    PSIM_SQLITE_CHECK(db, rc, "set WAL mode");
    if (rc != SQLITE_ROW || g_ascii_strcasecmp((const char *)sqlite3_column_text(st, 0), "wal")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot switch the cost DB to WAL mode", path);
        goto out;
    }
    g_clear_pointer(&st, sqlite3_finalize);
    PSIM_SQLITE_CHECK(db, exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON"), "open");
    /* quick_check reads every page once: cheap for a cost DB, and a damaged file is caught
     * here rather than half way through a profile. */
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql, "PRAGMA quick_check", -1, &st, NULL), "check");
    rc = sqlite3_step(st);
    for (int tries = 0; (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 3000; tries++) {
        g_usleep(20000);
        sqlite3_reset(st);
        rc = sqlite3_step(st);
    }
    PSIM_SQLITE_CHECK(db, rc, "check integrity");
    if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: corrupt cost DB: %s", path,
                    (const char *)sqlite3_column_text(st, 0));
        goto out;
    }
    g_clear_pointer(&st, sqlite3_finalize);
    if (!migrate(db, version, error))
        goto out;
    db->version = version;
    return db;
out:
    sqlite3_finalize(st);
    psim_cost_db_close(db);
    return NULL;
}

PsimCostDb *psim_cost_db_open(const char *path, GError **error)
{
    return psim__cost_db_open_version(path, PSIM_COST_DB_SCHEMA_VERSION, error);
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
            sql_error(db, rc, "exec", error);
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
        PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
            "INSERT INTO devices(name, type, fingerprint, cpu_model, gpu_name, driver_version,"
            " library_versions, n_cores, host, first_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")"
            " ON CONFLICT(name, fingerprint) DO NOTHING", -1, &st, NULL), "add device");
        sqlite3_bind_text(st, 1, d->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, d->type, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, f->cpu_model, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 5, f->gpu_name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 6, f->driver_version, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 7, f->library_versions, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 8, f->n_cores);
        sqlite3_bind_text(st, 9, g_get_host_name(), -1, SQLITE_TRANSIENT);
        PSIM_SQLITE_CHECK(db, sqlite3_step(st), "add device");
        g_clear_pointer(&st, sqlite3_finalize);
    }
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql, "SELECT id FROM devices WHERE name = ?1 AND fingerprint = ?2",
                                             -1, &st, NULL), "find device");
    sqlite3_bind_text(st, 1, d->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "find device");
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

gboolean psim_cost_db_kernel_put_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     const char *op, const char *source, const char *weights,
                                     const PsimSpeedRef *ref, double mem_weight,
                                     const PsimTimingStats *s, GError **error)
{
    g_return_val_if_fail(db && d && signature && s && s->n > 0, FALSE);
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        ref ? "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
              " median_us, source, measured_at, weights, ref_gemm_us, ref_stream_us, mem_weight)"
              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ", ?10, ?11, ?12, ?13)"
        : weights
        ? "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
          " median_us, source, measured_at, weights) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ", ?10)"
        : "INSERT OR REPLACE INTO kernels(signature, device_id, op, n, mean_us, stddev_us, min_us,"
          " median_us, source, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")",
        -1, &st, NULL), "store kernel timing");
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_text(st, 3, op ? op : "", -1, SQLITE_TRANSIENT);
    bind_stats(st, 4, s);
    sqlite3_bind_text(st, 9, source ? source : "clock", -1, SQLITE_TRANSIENT);
    if (weights || ref)
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
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), "store kernel timing");
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

gboolean psim_cost_db_kernel_get(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 PsimTimingStats *s, gboolean *other_fingerprint, GError **error)
{
    return psim_cost_db_kernel_get_ref(db, d, signature, s, NULL, NULL, other_fingerprint, error);
}

gboolean psim_cost_db_kernel_get_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     PsimTimingStats *s, PsimSpeedRef *ref, double *mem_weight,
                                     gboolean *other_fingerprint, GError **error)
{
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        with_ref ? "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us, k.ref_gemm_us, k.ref_stream_us,"
                   " k.mem_weight FROM kernels k"
                   " JOIN devices d ON d.id = k.device_id WHERE k.signature = ?1 AND d.fingerprint = ?2"
                   " ORDER BY (d.name = ?3) DESC, k.n DESC LIMIT 1"
                 : "SELECT k.n, k.mean_us, k.stddev_us, k.min_us, k.median_us FROM kernels k"
                   " JOIN devices d ON d.id = k.device_id WHERE k.signature = ?1 AND d.fingerprint = ?2"
                   " ORDER BY (d.name = ?3) DESC, k.n DESC LIMIT 1", -1, &st, NULL), "read kernel timing");
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, d->name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "read kernel timing");
    if (rc == SQLITE_ROW) {
        read_stats(st, 0, s);
        if (with_ref && sqlite3_column_type(st, 5) != SQLITE_NULL && sqlite3_column_type(st, 7) != SQLITE_NULL) {
            if (ref)
                *ref = (PsimSpeedRef){sqlite3_column_double(st, 5), sqlite3_column_double(st, 6)};
            if (mem_weight)
                *mem_weight = sqlite3_column_double(st, 7);
        }
        found = TRUE;
    } else if (other_fingerprint) {
        g_clear_pointer(&st, sqlite3_finalize);
        PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
            "SELECT 1 FROM kernels k JOIN devices d ON d.id = k.device_id"
            " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint != ?3 LIMIT 1", -1, &st, NULL),
            "read kernel timing");
        sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, d->name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
        PSIM_SQLITE_CHECK(db, rc, "read kernel timing");
        *other_fingerprint = rc == SQLITE_ROW;
    }
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

gboolean psim_cost_db_kernel_has(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 GError **error)
{
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "SELECT 1 FROM kernels k JOIN devices d ON d.id = k.device_id"
        " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint = ?3", -1, &st, NULL), "read kernel timing");
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, d->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "read kernel timing");
    found = rc == SQLITE_ROW;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return found;
}

gboolean psim_cost_db_kernel_get_weights(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                         char **weights, GError **error)
{
    g_autoptr(PsimFingerprint) f = psim_fingerprint_new(d);
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    *weights = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "SELECT k.weights FROM kernels k JOIN devices d ON d.id = k.device_id"
        " WHERE k.signature = ?1 AND d.name = ?2 AND d.fingerprint = ?3", -1, &st, NULL), "read kernel timing");
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, d->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, f->digest, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "read kernel timing");
    if (rc == SQLITE_ROW) {
        const unsigned char *w = sqlite3_column_text(st, 0);
        *weights = g_strdup(w ? (const char *)w : "");
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO links(src_id, dst_id, bytes, n, mean_us, stddev_us, min_us,"
        " median_us, source, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, " NOW ")",
        -1, &st, NULL), "store link timing");
    sqlite3_bind_int64(st, 1, is);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)bytes);
    bind_stats(st, 4, s);
    sqlite3_bind_text(st, 9, source ? source : "clock", -1, SQLITE_TRANSIENT);
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), "store link timing");
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

gboolean psim_cost_db_link_fit(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                               PsimLink *out, double *rms_rel, int *n_sizes, GError **error)
{
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    g_autoptr(PsimFingerprint) fd = psim_fingerprint_new(dst);
    g_autoptr(GArray) xs = g_array_new(FALSE, FALSE, sizeof(double));
    g_autoptr(GArray) ts = g_array_new(FALSE, FALSE, sizeof(double));
    gboolean fitted = FALSE;
    sqlite3_stmt *st = NULL;
    double rms = 0;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "SELECT l.bytes, l.median_us FROM links l JOIN devices s ON s.id = l.src_id"
        " JOIN devices d ON d.id = l.dst_id WHERE s.name = ?1 AND s.fingerprint = ?2"
        " AND d.name = ?3 AND d.fingerprint = ?4 ORDER BY l.bytes", -1, &st, NULL), "read link timings");
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
    PSIM_SQLITE_CHECK(db, rc, "read link timings");
    fitted = psim_link_fit((double *)xs->data, (double *)ts->data, (int)xs->len, out, &rms);
    if (fitted && rms_rel)
        *rms_rel = rms;
    if (fitted && n_sizes)
        *n_sizes = (int)xs->len;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return fitted;
}

gboolean psim_cost_db_link_from(PsimCostDb *db, const PsimDevice *src, GError **error)
{
    g_autoptr(PsimFingerprint) fs = psim_fingerprint_new(src);
    gboolean any = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "SELECT 1 FROM links l JOIN devices s ON s.id = l.src_id"
        " WHERE s.name = ?1 AND s.fingerprint = ?2 LIMIT 1", -1, &st, NULL), "read link timings");
    sqlite3_bind_text(st, 1, src->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, fs->digest, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "read link timings");
    any = rc == SQLITE_ROW;
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return any;
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO link_fits VALUES (?1, ?2, ?3, ?4, ?5, ?6, " NOW ")", -1, &st, NULL),
        "store link fit");
    sqlite3_bind_int64(st, 1, is);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_double(st, 3, fit->latency_us);
    sqlite3_bind_double(st, 4, fit->bandwidth_GBps);
    sqlite3_bind_int(st, 5, n_sizes);
    sqlite3_bind_double(st, 6, rms_rel);
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), "store link fit");
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "INSERT OR REPLACE INTO calibration VALUES (?1, ?2, ?3, ?4, " NOW ")", -1, &st, NULL),
        "store calibration");
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, value);
    sqlite3_bind_text(st, 4, detail ? detail : "", -1, SQLITE_TRANSIENT);
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), "store calibration");
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
    gboolean found = FALSE;
    sqlite3_stmt *st = NULL;
    g_mutex_lock(&db->lock);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql,
        "SELECT c.value FROM calibration c JOIN devices d ON d.id = c.device_id"
        " WHERE c.kind = ?1 AND d.fingerprint = ?2 ORDER BY (d.name = ?3) DESC LIMIT 1", -1, &st, NULL),
        "read calibration");
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, f->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, d->name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    PSIM_SQLITE_CHECK(db, rc, "read calibration");
    if (rc == SQLITE_ROW) {
        *value = sqlite3_column_double(st, 0);
        found = TRUE;
    }
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
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL), "count rows");
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), "count rows");
    n = sqlite3_column_int64(st, 0);
out:
    sqlite3_finalize(st);
    g_mutex_unlock(&db->lock);
    return n;
}
