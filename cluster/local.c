/* "local" and "local:N": this machine as N CPU devices pinned to disjoint cores, plus every CUDA
 * GPU found. */
#include <string.h>
#include <unistd.h>

#include "placesim/cluster.h"
#include "placesim/graph.h"

int32_t psim_cluster_detect_devices(PsimCluster *c)
{
    int32_t n_classes, added = 0;
    const PsimDeviceClass *const *classes = psim_device_classes(&n_classes, NULL);
    for (int32_t i = 0; i < n_classes; i++)
        if (classes[i]->detect)
            added += classes[i]->detect(c);
    return added;
}

static char *cpu_model(void)
{
    g_autofree char *text = NULL;
    if (g_file_get_contents("/proc/cpuinfo", &text, NULL, NULL)) {
        char *p = strstr(text, "model name");
        if (p && (p = strchr(p, ':'))) {
            char *end = strchr(p, '\n');
            return g_strstrip(g_strndup(p + 1, end ? (gsize)(end - p - 1) : strlen(p + 1)));
        }
    }
    return g_strdup("unknown CPU");
}

PsimCluster *psim_cluster_from_spec(const char *spec, GError **error)
{
    if (!spec || !*spec)
        spec = "local";
    if (strcmp(spec, "local") && !g_str_has_prefix(spec, "local:"))
        return psim_cluster_load(spec, error);
    long n_cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_cores < 1)
        n_cores = 1;
    long n = n_cores;
    if (spec[5] == ':') {
        char *end;
        n = strtol(spec + 6, &end, 10);
        if (*end || n < 1 || n > 4096) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "--cluster '%s': expected local or local:N with N >= 1", spec);
            return NULL;
        }
    }
    PsimCluster *c = psim_cluster_new();
    g_autofree char *model = cpu_model();
    /* Disjoint core sets: device i gets cores [i*k, (i+1)*k) when there are enough, else core
     * i mod n_cores (oversubscribed, which the user asked for). */
    long per = n <= n_cores ? n_cores / n : 1;
    const char *host = psim_device_class_host()->type;
    for (long i = 0; i < n; i++) {
        g_autofree char *name = g_strdup_printf("/job:localhost/replica:0/task:0/device:%s:%ld", host, i);
        int32_t id = psim_cluster_device_add(c, name, host, NULL);
        PsimDevice *d = psim_cluster_device(c, id);
        d->n_cores = (int32_t)per;
        d->cores = g_new(int32_t, per);
        for (long k = 0; k < per; k++)
            d->cores[k] = (int32_t)((i * per + k) % n_cores);
        d->description = g_strdup(model);
        d->memory_bytes = 0;
    }
    /* The executor moves a tensor between devices of this process on the destination's own
     * thread, between its kernels (exec/transport.c): the simulator must charge that time to
     * the destination device. Rates stay the defaults until a profile measures the link. */
    PsimLink l = psim_cluster_default_link(c);
    l.by_destination = TRUE;
    psim_cluster_default_link_set(c, l);
    psim_cluster_detect_devices(c);
    return c;
}
