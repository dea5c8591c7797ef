/* Internals shared by the executor's files (not installed). */
#ifndef PLACESIM_EXEC_PRIVATE_H
#define PLACESIM_EXEC_PRIVATE_H

#include "placesim/exec.h"

/* "FILE: node 'x': message" with an explicit error code (node may be NULL). */
void psim__exec_error(GError **error, int code, const PsimGraph *g, const PsimNode *n,
                      const char *fmt, ...) G_GNUC_PRINTF(5, 6);

/* ctx->alloc of the executor: allocates on the worker in ctx->alloc_user. */
PsimTensor *psim__exec_alloc(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                             const int64_t *dims, GError **error);

/* Resolves a ref: "node", "node:k", "^node" (when allow_target; port->index is then -1), or a
 * tensor name (PsimOutput.name). INPUT error naming the ref otherwise. */
gboolean psim__exec_resolve_ref(const PsimGraph *g, const char *ref, gboolean allow_target,
                                PsimPort *port, GError **error);

#endif
