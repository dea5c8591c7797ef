/* The one way placesim turns SQLite status codes into errors (cost DB, timeline and study
 * databases): PSIM_SQLITE_CHECK makes a GError naming the file, the step and SQLite's message,
 * then jumps to the function's single cleanup label `out`. Not installed. */
#ifndef PLACESIM_GRAPH_SQLITE_PRIVATE_H
#define PLACESIM_GRAPH_SQLITE_PRIVATE_H

#include <sqlite3.h>

#include "placesim/graph.h"

/* Sets *error (if not already set) to "PATH: WHAT: SQLite's message" for status rc of
 * connection sql (which may be NULL). Codes that mean the file is at fault (corrupt, not a
 * database, cannot be opened, read-only, no permission, short read) are PSIM_ERROR_INPUT
 * (exit 2); the rest PSIM_ERROR_RUNTIME. */
void psim__sqlite_error(sqlite3 *sql, int rc, const char *path, const char *what, GError **error);
/* TRUE when rc is a success code of a call (OK, ROW or DONE). */
#define PSIM_SQLITE_OK(rc) ((rc) == SQLITE_OK || (rc) == SQLITE_ROW || (rc) == SQLITE_DONE)

/* Evaluates expr (an SQLite call); on failure sets *error as psim__sqlite_error does and jumps
 * to `out`. The status is left in rc_ for the statement's scope only: callers that need ROW
 * against DONE keep the call's value themselves and check that variable. */
#define PSIM_SQLITE_CHECK(sql, expr, path, what, error)                                        \
    do {                                                                                     \
        int rc_ = (expr);                                                                    \
        if (!PSIM_SQLITE_OK(rc_)) {                                                          \
            psim__sqlite_error((sql), rc_, (path), (what), (error));                         \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

/* The same for a call that runs placesim's own, valid SQL on a file it is still validating
 * (opening a cost DB): a plain SQLITE_ERROR there ("unsupported file format", "table already
 * exists", a malformed schema) is the file's fault, so PSIM_ERROR_INPUT too. */
void psim__sqlite_error_input(sqlite3 *sql, int rc, const char *path, const char *what, GError **error);
#define PSIM_SQLITE_CHECK_INPUT(sql, expr, path, what, error)                                  \
    do {                                                                                     \
        int rc_ = (expr);                                                                    \
        if (!PSIM_SQLITE_OK(rc_)) {                                                          \
            psim__sqlite_error_input((sql), rc_, (path), (what), (error));                   \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

#endif
