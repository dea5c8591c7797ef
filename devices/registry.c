/* The one table of device classes (include/placesim/device.h). A new kind of device is a folder
 * under devices/ that defines its PsimDeviceClass, and one line here. */
#include <string.h>

#include "placesim/device.h"
#include "placesim/graph.h"

/* The registration: one line X(name) per class, which devices/name/ defines as
 * psim_name_device_class. The first class with `host` is the host's. */
#define PSIM_DEVICE_CLASSES(X)                                                                     \
    X(cpu)                                                                                         \
    X(cuda)

#define DECLARE(name) extern const PsimDeviceClass psim_##name##_device_class;
#define ENTRY(name) &psim_##name##_device_class,
PSIM_DEVICE_CLASSES(DECLARE)
static const PsimDeviceClass *const builtin[] = {PSIM_DEVICE_CLASSES(ENTRY)};

/* The built-ins, then the plug-ins' classes: a snapshot array that is replaced, never changed, so
 * that readers need no lock (the old arrays are kept: classes are registered a few times per
 * process at most). */
#define MAX_CLASSES 64
static const PsimDeviceClass *const *_Atomic table = builtin;
static _Atomic int32_t n_table = G_N_ELEMENTS(builtin);
static GMutex lock;

const PsimDeviceClass *const *psim_device_classes(int32_t *n, int32_t *n_builtin)
{
    if (n_builtin)
        *n_builtin = G_N_ELEMENTS(builtin);
    /* The count first: a registration publishes the longer array before the count grows, so
     * the array read next holds at least that many. */
    *n = n_table;
    return table;
}

const PsimDeviceClass *psim_device_class_find(const char *type)
{
    int32_t n;
    const PsimDeviceClass *const *t = psim_device_classes(&n, NULL);
    for (int32_t i = 0; type && i < n; i++)
        if (!g_ascii_strcasecmp(t[i]->type, type))
            return t[i];
    return NULL;
}

const PsimDeviceClass *psim_device_class_host(void)
{
    for (size_t i = 0; i < G_N_ELEMENTS(builtin); i++)
        if (builtin[i]->host)
            return builtin[i];
    g_assert_not_reached();
}

gboolean psim_device_class_register(const PsimDeviceClass *cls, GError **error)
{
    g_return_val_if_fail(cls && cls->type, FALSE);
    g_mutex_lock(&lock);
    gboolean ok = FALSE;
    if (psim_device_class_find(cls->type))
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "device class '%s': a class of that type is registered already", cls->type);
    else if (n_table >= MAX_CLASSES)
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "device class '%s': at most %d classes",
                    cls->type, MAX_CLASSES);
    else {
        const PsimDeviceClass **t = g_new(const PsimDeviceClass *, n_table + 1);
        memcpy(t, table, sizeof *t * (size_t)n_table);
        t[n_table] = cls;
        table = t; /* published before the count grows */
        n_table = n_table + 1;
        ok = TRUE;
    }
    g_mutex_unlock(&lock);
    if (ok && cls->register_kernels)
        cls->register_kernels();
    return ok;
}
