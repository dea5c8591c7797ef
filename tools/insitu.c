/* In-situ profiling from the CLI (profile --in-situ, study): the graph's feeds and fetches as
 * `run` picks them, then psim_profiler_insitu; a graph that cannot run whole is reported so that
 * the caller falls back to kernels timed alone. */
#include <stdio.h>

#include "placesim/exec.h"
#include "tools/cli.h"

static gboolean insitu(PsimProfiler *p, const PsimGraph *g, const PsimCliFeeds *feeds,
                       const PsimInsituOptions *o, PsimInsituReport *r, GError **error)
{
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GPtrArray) tensors = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    if (!psim_cli_feeds_make(feeds, g, FALSE, names, tensors, error))
        return FALSE;
    g_autoptr(GArray) ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    psim_cli_default_fetches(g, ports);
    g_autoptr(GPtrArray) fetches = g_ptr_array_new_with_free_func(g_free);
    for (guint k = 0; k < ports->len; k++)
        g_ptr_array_add(fetches, psim_port_to_string(g, g_array_index(ports, PsimPort, k)));
    return psim_profiler_insitu(p, g, (const char *const *)names->pdata, (PsimTensor *const *)tensors->pdata,
                                (int32_t)names->len, (const char *const *)fetches->pdata,
                                (int32_t)fetches->len, o, r, error);
}

gboolean psim_cli_profile_insitu(PsimProfiler *p, const PsimGraph *g, const PsimCliFeeds *feeds,
                                 const PsimInsituOptions *o, PsimInsituReport *r, gboolean *ran,
                                 GError **error)
{
    GError *err = NULL;
    *ran = insitu(p, g, feeds, o, r, &err);
    if (*ran)
        return TRUE;
    if (!g_error_matches(err, PSIM_ERROR, PSIM_ERROR_INPUT) &&
        !g_error_matches(err, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED)) {
        g_propagate_error(error, err);
        return FALSE;
    }
    fprintf(stderr, "placesim: warning: %s: cannot run whole (%s); its kernels are timed alone\n",
            psim_graph_name(g), err->message);
    g_error_free(err);
    return TRUE;
}
