/* Plug-ins: shared libraries (GModule) that register more ops and kernels from an exported
 *   gboolean psim_plugin_init(GError **error);
 * They stay loaded for the life of the process, since their definitions are registered by
 * pointer. */
#include "kernels-private.h"

#include "graph/graph-private.h"

#include <gmodule.h>

typedef gboolean (*PsimPluginInit)(GError **error);

gboolean psim_plugin_load(const char *path, GError **error)
{
    g_return_val_if_fail(path != NULL, FALSE);
    psim__kernels_init();
    if (!g_module_supported()) {
        psim__error_file(error, path, "this platform cannot load plug-ins");
        return FALSE;
    }
    /* Lazy binding would defer a missing symbol to a crash at call time: resolve all now. */
    GModule *m = g_module_open(path, G_MODULE_BIND_LOCAL);
    if (!m) {
        psim__error_file(error, path, "cannot load plug-in: %s", g_module_error());
        return FALSE;
    }
    gpointer sym = NULL;
    if (!g_module_symbol(m, "psim_plugin_init", &sym) || !sym) {
        psim__error_file(error, path, "not a placesim plug-in: no psim_plugin_init symbol");
        g_module_close(m);
        return FALSE;
    }
    GError *err = NULL;
    if (!((PsimPluginInit)sym)(&err)) {
        psim__error_file(error, path, "plug-in init failed: %s",
                         err ? err->message : "no reason given");
        g_clear_error(&err);
        /* It may have registered some definitions before failing: keep it loaded. */
        g_module_make_resident(m);
        return FALSE;
    }
    g_module_make_resident(m);
    return TRUE;
}
