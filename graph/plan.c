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
