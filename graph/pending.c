/* TEMPORARY: functions declared in graph.h whose real implementation is being written. Each one
 * is deleted from here when its module lands. */
#include "graph-private.h"

#define NOT_YET(path) psim__error_file(error, path, "not implemented yet")

