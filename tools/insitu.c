/* In-situ profiling from the CLI (profile --in-situ, study): the graph's feeds and fetches as
 * `run` picks them, then an in-situ session (psim_insitu_session_*); a graph that cannot run
 * whole is reported so that the caller falls back to kernels timed alone. */
#include <stdio.h>

#include "placesim/exec.h"
#include "tools/cli.h"

struct PsimCliInsitu {
    GPtrArray *names, *tensors, *fetches; /* borrowed by the session: freed after it */
    PsimInsituSession *s;
};

void psim_cli_insitu_free(PsimCliInsitu *ci)
{
    if (!ci)
        return;
    psim_insitu_session_free(ci->s);
    g_ptr_array_unref(ci->names);
    g_ptr_array_unref(ci->tensors);
    g_ptr_array_unref(ci->fetches);
    g_free(ci);
}

/* FALSE with *error INPUT or UNSUPPORTED when g cannot run whole: warned about, not an error. */
static gboolean cannot_run(const PsimGraph *g, GError **error)
{
    if (!g_error_matches(*error, PSIM_ERROR, PSIM_ERROR_INPUT) &&
        !g_error_matches(*error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED))
        return FALSE;
    fprintf(stderr, "placesim: warning: %s: cannot run whole (%s); its kernels are timed alone\n",
            psim_graph_name(g), (*error)->message);
    g_clear_error(error);
    return TRUE;
}

PsimCliInsitu *psim_cli_insitu_new(PsimProfiler *p, const PsimGraph *g, const PsimCliFeeds *feeds,
                                   const PsimInsituOptions *o, GError **error)
{
    g_autoptr(PsimCliInsitu) ci = g_new0(PsimCliInsitu, 1);
    ci->names = g_ptr_array_new_with_free_func(g_free);
    ci->tensors = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    ci->fetches = g_ptr_array_new_with_free_func(g_free);
    GError *err = NULL;
    if (!psim_cli_feeds_make(feeds, g, FALSE, ci->names, ci->tensors, &err)) {
        if (!cannot_run(g, &err))
            g_propagate_error(error, err);
        return NULL;
    }
    g_autoptr(GArray) ports = g_array_new(FALSE, FALSE, sizeof(PsimPort));
    psim_cli_default_fetches(g, ports);
    for (guint k = 0; k < ports->len; k++)
        g_ptr_array_add(ci->fetches, psim_port_to_string(g, g_array_index(ports, PsimPort, k)));
    ci->s = psim_insitu_session_new(p, g, (const char *const *)ci->names->pdata,
                                    (PsimTensor *const *)ci->tensors->pdata, (int32_t)ci->names->len,
                                    (const char *const *)ci->fetches->pdata, (int32_t)ci->fetches->len, o, &err);
    if (!ci->s) {
        if (!cannot_run(g, &err))
            g_propagate_error(error, err);
        return NULL;
    }
    return g_steal_pointer(&ci);
}

void psim_cli_insitu_options(PsimInsituOptions *o, int32_t steps, int32_t passes)
{
    psim_insitu_options_init(o);
    o->steps = steps;
    o->passes = passes;
    o->warmup = 1;
    o->warmup_ms = PSIM_CLI_WARMUP_MS;
    o->record_ms = PSIM_CLI_MEASURE_MS;
}

gboolean psim_cli_insitu_pass(PsimCliInsitu *ci, int32_t steps, GError **error)
{
    return psim_insitu_session_pass(ci->s, steps, error);
}

gboolean psim_cli_insitu_finish(PsimCliInsitu *ci, PsimInsituReport *r, GError **error)
{
    /* The feeds must outlive the session: finish it before they go. */
    gboolean ok = psim_insitu_session_finish(g_steal_pointer(&ci->s), r, error);
    psim_cli_insitu_free(ci);
    return ok;
}

gboolean psim_cli_profile_insitu(PsimProfiler *p, const PsimGraph *g, const PsimCliFeeds *feeds,
                                 const PsimInsituOptions *o, PsimInsituReport *r, gboolean *ran,
                                 GError **error)
{
    GError *err = NULL;
    *ran = FALSE;
    PsimCliInsitu *ci = psim_cli_insitu_new(p, g, feeds, o, &err);
    if (!ci) {
        g_propagate_error(error, err);
        return err == NULL;
    }
    if (psim_cli_insitu_finish(ci, r, &err)) {
        *ran = TRUE;
        return TRUE;
    }
    if (cannot_run(g, &err))
        return TRUE;
    g_propagate_error(error, err);
    return FALSE;
}
