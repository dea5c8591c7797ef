/* SQLite status codes into placesim errors, for every module that keeps an SQLite file (see
 * graph/sqlite-private.h): one message shape and one mapping to exit codes. */
#include "graph/sqlite-private.h"

void psim__sqlite_error(sqlite3 *sql, int rc, const char *path, const char *what, GError **error)
{
    if (!error || *error)
        return;
    /* The connection's message is the precise one (it names the table or column); without a
     * connection only the code's generic text is known. */
    /* SQLite's message may quote names read from a damaged file: one valid UTF-8 line. */
    g_autofree char *msg = g_utf8_make_valid(sql && sqlite3_errcode(sql) != SQLITE_OK ? sqlite3_errmsg(sql)
                                                                                     : sqlite3_errstr(rc), -1);
    g_strdelimit(msg, "\r\n", ' ');
    int ext = sql ? sqlite3_extended_errcode(sql) : rc;
    switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: corrupt or not an SQLite database (%s: %s)", path, what, msg);
        return;
    case SQLITE_IOERR:
        /* A file shorter than its header says is a truncated file, not a failing disk. */
        if (ext == SQLITE_IOERR_SHORT_READ) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "%s: corrupt or truncated SQLite database (%s: %s)", path, what, msg);
            return;
        }
        break;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s: %s", path, what, msg);
        return;
    default:
        break;
    }
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s: %s", path, what, msg);
}

void psim__sqlite_error_input(sqlite3 *sql, int rc, const char *path, const char *what, GError **error)
{
    if (!error || *error)
        return;
    psim__sqlite_error(sql, rc, path, what, error);
    /* While a file is being validated, SQLite's plain error, "out of memory" and "too big" come
     * from what the file claims (a damaged record header asks for a huge buffer: a 7.7 KB file
     * found by fuzz-costdb fails quick_check with SQLITE_NOMEM): the file's fault. Busy and a
     * failing disk stay the run's. */
    int code = rc & 0xff;
    if (code == SQLITE_ERROR)
        (*error)->code = PSIM_ERROR_INPUT;
    if (code == SQLITE_NOMEM || code == SQLITE_TOOBIG) {
        g_clear_error(error);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: corrupt SQLite database (%s: %s, asked for by a damaged record)", path, what,
                    sqlite3_errstr(rc));
    }
}
