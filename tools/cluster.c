/* placesim cluster: the devices and links of a cluster file or of this machine ("local[:N]").
 * --json prints the cluster in its own file format, so the output can be saved and edited;
 * --db puts in each device's calibrated rates from a cost DB, as the cost model uses them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/cluster.h"
#include "placesim/cost.h"
#include "placesim/exec.h"
#include "tools/cli.h"

static void print_link(const char *src, const char *dst, PsimLink l)
{
    if (l.bandwidth_GBps > 0 && isfinite(l.bandwidth_GBps))
        printf("  %-10s -> %-10s %10.3f GB/s %10.3f us%s%s\n", src, dst, l.bandwidth_GBps,
               l.latency_us, l.independent ? "  independent" : "",
               l.by_destination ? "  copied by destination" : "");
    else
        printf("  %-10s -> %-10s %15s %10.3f us%s%s\n", src, dst, "unlimited", l.latency_us,
               l.independent ? "  independent" : "",
               l.by_destination ? "  copied by destination" : "");
}

/* A device in the links' list: its short name, or its full one where tasks share short names. */
static const char *link_end(const PsimCluster *c, int32_t i)
{
    const PsimDevice *d = psim_cluster_device(c, i);
    return psim_cluster_short_name_count(c, d->short_name) > 1 ? d->name : d->short_name;
}

static int print_cluster(PsimCluster *c, const char *db_path, gboolean json);

/* cluster --mpi: every task's devices and the links between tasks as rank 0 measured them. */
static int cluster_mpi(int *argc, char ***argv, const char *db_path, gboolean json)
{
    int code = 0;
    PsimMpi *m = psim_cli_mpi_start(argc, argv, &code);
    if (!m)
        return code;
    code = print_cluster(psim_mpi_cluster(m), db_path, json);
    psim_mpi_free(m);
    return code;
}

int psim_cmd_cluster(int argc, char **argv)
{
    gboolean json = FALSE, mpi = FALSE;
    g_autofree char *spec = NULL, *db_path = NULL;
    GOptionEntry entries[] = {
        {"cluster", 'c', 0, G_OPTION_ARG_STRING, &spec,
         "A cluster file, or local[:N] (this machine: N CPU devices, plus its GPUs)", "SPEC"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path,
         "Cost DB: devices take their calibrated peak, bandwidth and launch cost from it (read only)", "DB"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the cluster as placesim.cluster/1 JSON", NULL},
        {"mpi", 0, 0, G_OPTION_ARG_NONE, &mpi,
         "under mpirun: every task's devices (/job:worker/task:RANK) and the links between tasks, "
         "timed by rank 0 at start-up (what run --mpi places on)", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("- print a cluster's devices and links");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!psim_cli_parse(ctx, &argc, &argv, "cluster"))
        return 2;
    if (argc != 1)
        return psim_cli_usage("cluster", "unexpected argument '%s'", argv[1]);
    psim_cli_mpi_flags(mpi);
    if (mpi && spec)
        return psim_cli_usage("cluster", "--mpi: the cluster is the MPI tasks' devices; --cluster does not apply");
    if (mpi)
        return cluster_mpi(&argc, &argv, db_path, json);
    GError *err = NULL;
    g_autoptr(PsimCluster) c = psim_cluster_from_spec(spec ? spec : "local", &err);
    if (!c)
        return psim_cli_fail(err);
    return print_cluster(c, db_path, json);
}

static int print_cluster(PsimCluster *c, const char *db_path, gboolean json)
{
    GError *err = NULL;
    g_autofree guint *calibrated = g_new0(guint, psim_cluster_n_devices(c) + 1);
    if (db_path) {
        g_autoptr(PsimCostDb) db = psim_cost_db_open_readonly(db_path, &err);
        if (!db || !psim_cost_db_calibrate_cluster(db, c, calibrated, &err))
            return psim_cli_fail(err);
    }
    if (json) {
        g_autofree char *s = psim_cluster_to_json(c);
        printf("%s\n", s);
        return 0;
    }
    int32_t n = psim_cluster_n_devices(c);
    printf("devices (%d):\n", n);
    for (int32_t i = 0; i < n; i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        printf("  %-10s %s\n", d->short_name, d->name);
        g_autofree char *gpu = d->cc_major ? g_strdup_printf(" (cc %d.%d, %d SMs)", d->cc_major,
                                                               d->cc_minor, d->sm_count)
                                           : g_strdup("");
        printf("    type %s, %s%s\n", d->type, d->description ? d->description : "no description", gpu);
        /* Say which figures a measurement gave: the rest are the cluster's defaults. */
        printf("    peak %.1f GFLOP/s%s, memory bandwidth %.1f GB/s%s, launch %.2f us%s, %d stream%s\n",
               d->peak_gflops, calibrated[i] & PSIM_CALIBRATED_PEAK ? " (calibrated)" : "",
               d->mem_bw_GBps, calibrated[i] & PSIM_CALIBRATED_MEM_BW ? " (calibrated)" : "",
               d->launch_us, calibrated[i] & PSIM_CALIBRATED_LAUNCH ? " (calibrated)" : "",
               d->n_streams, d->n_streams == 1 ? "" : "s");
        if (d->memory_bytes)
            printf("    memory %.3f GB\n", d->memory_bytes / 1e9);
        else
            printf("    memory unlimited\n");
        if (d->n_cores > 0) {
            printf("    cores");
            for (int32_t k = 0; k < d->n_cores; k++)
                printf("%s%d", k ? "," : " ", d->cores[k]);
            if (d->host)
                printf(" of host %s", d->host);
            /* Devices on one core take turns (the simulator runs them so: docs/sim.md). */
            for (int32_t j = 0, first = 1; j < n; j++)
                if (psim_cluster_devices_share_cores(c, i, j)) {
                    printf("%s%s", first ? ", shared with " : ", ", link_end(c, j));
                    first = 0;
                }
            printf("\n");
        }
        if (d->gpu_ordinal >= 0)
            printf("    CUDA ordinal %d\n", d->gpu_ordinal);
    }
    printf("links:\n");
    print_link("default", "", psim_cluster_default_link(c));
    int32_t n_links;
    g_autofree PsimLinkEnds *ends = psim_cluster_links_set(c, &n_links);
    for (int32_t i = 0; i < n_links; i++)
        if (ends[i].src != ends[i].dst)
            print_link(link_end(c, ends[i].src), link_end(c, ends[i].dst),
                       psim_cluster_link(c, ends[i].src, ends[i].dst));
    return 0;
}
