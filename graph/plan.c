/* The Plan container (made by placer/, run by sim/ and exec/). */
#include <string.h>

#include "placesim/plan.h"

PsimPlan *psim_plan_new(PsimGraph *graph, int32_t n_devices, const char *const *devices)
{
    PsimPlan *p = g_new0(PsimPlan, 1);
    int32_t n = psim_graph_n_nodes(graph);
    p->graph = graph;
    p->n_devices = n_devices;
    p->devices = g_new0(char *, (gsize)n_devices + 1);
    for (int32_t i = 0; i < n_devices; i++)
        p->devices[i] = g_strdup(devices[i]);
    p->device_of = g_new(int32_t, n ? n : 1);
    for (int32_t i = 0; i < n; i++)
        p->device_of[i] = -1;
    p->n_order = g_new0(int32_t, n_devices ? n_devices : 1);
    p->order = g_new0(int32_t *, n_devices ? n_devices : 1);
    p->planned_start = g_new0(double, n ? n : 1);
    p->priority = g_new0(double, n ? n : 1);
    p->transfer_of_recv = g_new(int32_t, n ? n : 1);
    for (int32_t i = 0; i < n; i++)
        p->transfer_of_recv[i] = -1;
    return p;
}

void psim_plan_free(PsimPlan *p)
{
    if (!p)
        return;
    psim_graph_free(p->graph);
    g_free(p->algo);
    g_strfreev(p->devices);
    g_free(p->device_of);
    for (int32_t i = 0; i < p->n_devices; i++)
        g_free(p->order[i]);
    g_free(p->order);
    g_free(p->n_order);
    g_free(p->planned_start);
    g_free(p->priority);
    g_free(p->transfers);
    g_free(p->transfer_of_recv);
    g_free(p);
}

const char *psim_rounding_name(PsimRounding r)
{
    return r == PSIM_ROUNDING_RNE ? "rne" : "truncate";
}

gboolean psim_rounding_from_name(const char *name, PsimRounding *out)
{
    if (!g_strcmp0(name, "truncate"))
        *out = PSIM_ROUNDING_TRUNCATE;
    else if (!g_strcmp0(name, "rne"))
        *out = PSIM_ROUNDING_RNE;
    else
        return FALSE;
    return TRUE;
}

uint32_t psim_rounding_apply(uint32_t bits, PsimRounding r)
{
    if (r == PSIM_ROUNDING_TRUNCATE)
        return bits & 0xFFFF0000u;
    if ((bits & 0x7F800000u) == 0x7F800000u) {
        /* Inf as it is; a NaN quiet, so that no payload bit is needed to keep it a NaN. */
        return (bits & 0x007FFFFFu) ? (bits & 0xFFFF0000u) | 0x00400000u : bits;
    }
    /* Adding half an ulp less one, plus the kept lsb, carries into the kept bits exactly when
     * the dropped half is above half an ulp, or at half with an odd kept lsb. */
    uint32_t lsb = (bits >> 16) & 1u;
    uint32_t y = (bits + 0x7FFFu + lsb) & 0xFFFF0000u;
    /* Past the largest finite bfloat16 the carry reaches the exponent's all-ones: stay finite. */
    if ((y & 0x7F800000u) == 0x7F800000u)
        y = (bits & 0x80000000u) | 0x7F7F0000u;
    return y;
}
