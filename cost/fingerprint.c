/* Device fingerprints: the hardware and software versions a timing depends on. A measured row is
 * used only while the fingerprint it was stored under is the current one. */
#include <string.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "placesim/cost.h"


/* This host's CPU model, read once. */
const char *psim_fingerprint_host_cpu_model(void)
{
    static char *model;
    if (g_once_init_enter(&model)) {
        char *m = NULL;
        g_autofree char *text = NULL;
        if (g_file_get_contents("/proc/cpuinfo", &text, NULL, NULL)) {
            char *p = strstr(text, "model name");
            if (p && (p = strchr(p, ':'))) {
                char *end = strchr(p, '\n');
                m = g_strstrip(g_strndup(p + 1, end ? (gsize)(end - p - 1) : strlen(p + 1)));
            }
        }
        g_once_init_leave(&model, m ? m : g_strdup("unknown CPU"));
    }
    return model;
}

/* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64" -> "0.3.21-Zen"-like: the whole
 * configuration string without spaces, since the core type it picked changes the timings; then
 * oneDNN's version. */
const char *psim_fingerprint_host_libraries(void)
{
    static char *libs;
    if (g_once_init_enter(&libs)) {
        g_autofree char *cfg = g_strdup(openblas_get_config());
        g_strdelimit(g_strstrip(cfg), " ", '_');
        /* oneDNN runs the CPU convolutions and most sgemms (kernels/cpu/gemm.c; "sgemm=onednn"
         * since 2026-11-28, so rows timed on OpenBLAS's are not reused): its version (and so its
         * kernels) changes their time. */
        const dnnl_version_t *dv = dnnl_version();
        /* kernels=: the date of the last change that moved a CPU kernel's time by design
         * (2026-11-30: Einsum as GEMMs, last-axis Softmax, Resize by planes, 3-D Conv, grouped
         * Convs of 8+ channels on oneDNN), so that rows timed before are not reused. */
        g_once_init_leave(
            &libs, g_strdup_printf("placesim=%s openblas=%s onednn=%d.%d.%d sgemm=onednn kernels=20261130",
                                   PSIM_VERSION_STRING, cfg, dv->major, dv->minor, dv->patch));
    }
    return libs;
}

PsimFingerprint *psim_fingerprint_new(const PsimDevice *d)
{
    PsimFingerprint *f = g_new0(PsimFingerprint, 1);
    if (d->cls && d->cls->fingerprint)
        d->cls->fingerprint(d, f);
    else { /* an abstract processor: its description, on this host */
        f->cpu_model = g_strdup(d->description ? d->description : psim_fingerprint_host_cpu_model());
        f->library_versions = g_strdup(psim_fingerprint_host_libraries());
    }
    char **fields[] = {&f->cpu_model, &f->gpu_name, &f->driver_version, &f->library_versions};
    for (size_t i = 0; i < G_N_ELEMENTS(fields); i++)
        if (!*fields[i])
            *fields[i] = g_strdup("");
    g_autofree char *all = g_strdup_printf("%s\n%s\n%s\n%s\n%s\n%d", d->type, f->cpu_model, f->gpu_name,
                                           f->driver_version, f->library_versions, f->n_cores);
    g_autofree char *sha = g_compute_checksum_for_string(G_CHECKSUM_SHA256, all, -1);
    f->digest = g_strndup(sha, 16);
    return f;
}

void psim_fingerprint_free(PsimFingerprint *f)
{
    if (!f)
        return;
    g_free(f->cpu_model);
    g_free(f->gpu_name);
    g_free(f->driver_version);
    g_free(f->library_versions);
    g_free(f->digest);
    g_free(f);
}
