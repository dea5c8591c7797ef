/* Timelines into SQLite, one row per node and per transfer, so studies can be queried. */
#include <string.h>

#include "graph/sqlite-private.h"
#include "placesim/timeline.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, label TEXT, graph TEXT, kind TEXT,"
    " step_time_us REAL, critical_path_us REAL, created TEXT DEFAULT (datetime('now')));"
    "CREATE TABLE IF NOT EXISTS run_devices (run INTEGER REFERENCES runs(id), idx INTEGER,"
    " name TEXT, peak_memory_bytes INTEGER, PRIMARY KEY (run, idx));"
    "CREATE TABLE IF NOT EXISTS ops (run INTEGER REFERENCES runs(id), node TEXT, op TEXT,"
    " node_id INTEGER, device INTEGER, stream INTEGER, start_us REAL, end_us REAL);"
    "CREATE TABLE IF NOT EXISTS transfers (run INTEGER REFERENCES runs(id), name TEXT, key TEXT,"
    " transfer INTEGER, src INTEGER, dst INTEGER, start_us REAL, end_us REAL, bytes INTEGER);"
    "CREATE INDEX IF NOT EXISTS ops_run ON ops(run, node);"
    "CREATE INDEX IF NOT EXISTS transfers_run ON transfers(run);";

int64_t psim_timeline_save_sqlite(const PsimTimeline *t, const char *path, const char *label,
                                  GError **error)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t run = -1;
    gboolean open = FALSE, ok = FALSE;
    PSIM_SQLITE_CHECK(db, sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
        path, "save timeline", error);
    sqlite3_busy_timeout(db, 10000);
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL),
        path, "save timeline", error);
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
        path, "save timeline", error);
    open = TRUE;
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db, schema, NULL, NULL, NULL), path, "save timeline", error);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db, "INSERT INTO runs (label, graph, kind, step_time_us, critical_path_us) VALUES (?,?,?,?,?)", -1, &st, NULL),
        path, "save timeline", error);
    sqlite3_bind_text(st, 1, label ? label : t->graph, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, t->graph, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, t->kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, t->step_time_us);
    sqlite3_bind_double(st, 5, t->critical_path_us);
    PSIM_SQLITE_CHECK(db, sqlite3_step(st), path, "save timeline", error);
    sqlite3_finalize(st);
    st = NULL;
    run = sqlite3_last_insert_rowid(db);
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db, "INSERT INTO run_devices VALUES (?,?,?,?)", -1, &st, NULL),
        path, "save timeline", error);
    for (int32_t d = 0; d < t->n_devices; d++) {
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, d);
        sqlite3_bind_text(st, 3, t->devices[d], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)t->peak_memory[d]);
        PSIM_SQLITE_CHECK(db, sqlite3_step(st), path, "save timeline", error);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db, "INSERT INTO ops VALUES (?,?,?,?,?,?,?,?)", -1, &st, NULL),
        path, "save timeline", error);
    for (guint i = 0; i < t->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_text(st, 2, o->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, o->op, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, o->node);
        sqlite3_bind_int(st, 5, o->device);
        sqlite3_bind_int(st, 6, o->stream);
        sqlite3_bind_double(st, 7, o->start);
        sqlite3_bind_double(st, 8, o->end);
        PSIM_SQLITE_CHECK(db, sqlite3_step(st), path, "save timeline", error);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    PSIM_SQLITE_CHECK(db, sqlite3_prepare_v2(db, "INSERT INTO transfers VALUES (?,?,?,?,?,?,?,?,?)", -1, &st, NULL),
        path, "save timeline", error);
    for (guint i = 0; i < t->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_text(st, 2, x->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, x->key, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, x->transfer);
        sqlite3_bind_int(st, 5, x->src);
        sqlite3_bind_int(st, 6, x->dst);
        sqlite3_bind_double(st, 7, x->start);
        sqlite3_bind_double(st, 8, x->end);
        sqlite3_bind_int64(st, 9, (sqlite3_int64)x->bytes);
        PSIM_SQLITE_CHECK(db, sqlite3_step(st), path, "save timeline", error);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    PSIM_SQLITE_CHECK(db, sqlite3_exec(db, "COMMIT", NULL, NULL, NULL),
        path, "save timeline", error);
    open = FALSE;
    ok = TRUE;
out:
    sqlite3_finalize(st);
    if (open)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return ok ? run : -1;
}
