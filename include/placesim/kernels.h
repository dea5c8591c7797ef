/* The kernel registry, keyed by (op, device type, dtype). A kernel states its workspace needs
 * and whether it is asynchronous; placement asks the registry which device types can run a
 * node. The execution interface (PsimKernelDef's run) is defined here too. */
#ifndef PLACESIM_KERNELS_H
#define PLACESIM_KERNELS_H

#include "placesim/graph.h"

G_BEGIN_DECLS

typedef struct PsimKernelDef PsimKernelDef;

/* TRUE if some registered kernel runs node n of g on devices of `device_type` ("CPU", "GPU"):
 * matched on op and the dtype of its first data input (or output). */
gboolean psim_kernel_supported(const PsimGraph *g, const PsimNode *n, const char *device_type);

G_END_DECLS

#endif
