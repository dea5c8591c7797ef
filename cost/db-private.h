/* Internals of the cost DB shared with its tests. */
#ifndef PLACESIM_COST_DB_PRIVATE_H
#define PLACESIM_COST_DB_PRIVATE_H

#include "placesim/cost.h"

/* Opens the DB migrated to `version` (<= PSIM_COST_DB_SCHEMA_VERSION): tests make old DBs. */
PsimCostDb *psim__cost_db_open_version(const char *path, int version, GError **error);
/* Runs SQL on the DB inside a write transaction (tests, tools). */
gboolean psim__cost_db_exec(PsimCostDb *db, const char *sql, GError **error);

#endif
