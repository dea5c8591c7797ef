/* Devices and links: cluster files, the "local" machine, and device-name matching.
 * Device names are /job:J/replica:R/task:T/device:TYPE:N; short forms such as "CPU:0" are
 * accepted wherever a name is read. Rates: GB/s and GFLOP/s with G = 10^9. */
#ifndef PLACESIM_CLUSTER_H
#define PLACESIM_CLUSTER_H

#include <glib.h>
#include <stdint.h>

#include "placesim/device.h"
#include "placesim/graph.h"

G_BEGIN_DECLS

typedef struct PsimDevice {
    char *name;        /* full name */
    char *short_name;  /* "TYPE:N" */
    char *type;        /* "CPU", "GPU", or an abstract type name */
    /* What the kind of device does (include/placesim/device.h); NULL for a type without a
     * class (abstract processors of task graphs, "P1"): simulated from given costs only. */
    const PsimDeviceClass *cls;
    int32_t index;     /* N in TYPE:N */
    char *job;
    int32_t replica, task;
    uint64_t memory_bytes; /* 0: unlimited */
    double peak_gflops;
    double mem_bw_GBps;
    double launch_us;      /* fixed cost per kernel launch */
    int32_t n_cores;
    int32_t *cores;        /* CPU devices: the cores its thread is pinned to */
    /* The machine it is on (cluster JSON "host"; MPI tasks name theirs); NULL: unnamed, the
     * same machine as every other unnamed device. Devices of one host whose cores overlap
     * share those cores (psim_cluster_devices_share_cores). */
    char *host;
    int32_t gpu_ordinal;   /* GPU devices: CUDA ordinal; -1 otherwise */
    int32_t n_streams;     /* compute streams (CPU: 1; GPU: configurable) */
    char *description;     /* CPU model or GPU name */
    int32_t sm_count, cc_major, cc_minor;
} PsimDevice;

typedef struct {
    double bandwidth_GBps; /* <= 0 or inf: free */
    double latency_us;
    /* FALSE (default): concurrent transfers on the link share its bandwidth. TRUE: every
     * transfer gets the whole bandwidth, the contention-free model of the classic scheduling
     * papers (HEFT); cluster JSON "independent": true. */
    gboolean independent;
    /* TRUE: the destination device's own thread makes the copy, between its kernels, as the
     * executor does between CPU devices of one process (placesim's `local` clusters): a
     * transfer then occupies the destination device for its whole time, not only the link.
     * Cluster JSON "by_destination": true. */
    gboolean by_destination;
    /* Measured timings of the pair, when the cost model has them (psim_cost_link; owned by the
     * model, NULL in a cluster's own links): a transfer's time is then interpolated between
     * them rather than latency + bytes / bandwidth (psim_link_time). */
    const struct PsimLinkCurve *curve;
} PsimLink;

/* A link's time against its size, as measured: n >= 2 sizes ascending, their times made
 * non-decreasing. Between two sizes the time is linear in bytes; below the smallest it is the
 * smallest's time (the hop's fixed cost); past the largest it grows at the last segment's
 * rate. */
typedef struct PsimLinkCurve {
    int32_t n;
    double *bytes, *us;
} PsimLinkCurve;

/* Microseconds for one transfer of `bytes` over l: its curve when it has one, else latency +
 * bytes / bandwidth (bandwidth <= 0 or inf: latency only). */
double psim_link_time(const PsimLink *l, uint64_t bytes);
/* The part of psim_link_time that keeps the link (or, by_destination, the destination device)
 * busy: the time less the link's fixed latency (the curve's smallest time, or latency_us). */
double psim_link_occupancy(const PsimLink *l, uint64_t bytes);
/* The fixed latency psim_link_occupancy leaves out. */
double psim_link_latency(const PsimLink *l);

typedef struct PsimCluster PsimCluster;

/* An empty cluster; free with psim_cluster_free. */
PsimCluster *psim_cluster_new(void);
void psim_cluster_free(PsimCluster *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimCluster, psim_cluster_free)

/* Adds a device named `name` (full or short) of `type`; fills defaults (1 stream, job
 * localhost). Returns its index, or -1 with an error if the name is taken or malformed. The
 * returned device (psim_cluster_device) can be edited until the cluster is used. */
int32_t psim_cluster_device_add(PsimCluster *c, const char *name, const char *type, GError **error);
int32_t psim_cluster_n_devices(const PsimCluster *c);
PsimDevice *psim_cluster_device(const PsimCluster *c, int32_t i);
/* Index of the device with this full or short name, or -1. */
int32_t psim_cluster_device_find(const PsimCluster *c, const char *name);
/* TRUE if devices a != b run on a core in common: both list cores, on the same host (both
 * unnamed counts as the same), and the lists meet (MPI tasks outnumbering a host's cores). Their
 * threads then take turns on it, and the simulator runs their work one device at a time. */
gboolean psim_cluster_devices_share_cores(const PsimCluster *c, int32_t a, int32_t b);
/* TRUE if device a shares cores with any other device of c. */
gboolean psim_cluster_device_shares_cores(const PsimCluster *c, int32_t a);
/* TRUE if device d satisfies a request: a full or partial name ("/job:w/device:GPU:*",
 * "CPU:*", "GPU:1"), or a bare type ("GPU"). Empty or NULL matches everything. */
gboolean psim_device_matches(const PsimDevice *d, const char *request);
/* Normalizes a full or short name to the full form; g_free. NULL if malformed. */
char *psim_device_name_full(const char *name);

void psim_cluster_link_set(PsimCluster *c, int32_t src, int32_t dst, PsimLink link);
void psim_cluster_default_link_set(PsimCluster *c, PsimLink link);
PsimLink psim_cluster_default_link(const PsimCluster *c);
/* TRUE if a link was set for the ordered pair (src, dst) (else the default applies). */
gboolean psim_cluster_link_is_set(const PsimCluster *c, int32_t src, int32_t dst);
/* The ordered pairs that have a link set (psim_cluster_link_set), sorted by src then dst, in a
 * new array of *n entries (g_free): the links are stored only for these, so that a cluster is
 * linear in its devices and links. */
typedef struct {
    int32_t src, dst;
} PsimLinkEnds;
PsimLinkEnds *psim_cluster_links_set(const PsimCluster *c, int32_t *n);
/* How many links are set from device src (to devices other than the default's). */
int32_t psim_cluster_links_from(const PsimCluster *c, int32_t src);
/* How many devices have this short name ("TYPE:N": several only across jobs or tasks). */
int32_t psim_cluster_short_name_count(const PsimCluster *c, const char *short_name);
/* The link from src to dst: the one set for the pair, else the default. src == dst is free. */
PsimLink psim_cluster_link(const PsimCluster *c, int32_t src, int32_t dst);
/* Time in microseconds for `bytes` from src to dst by the cluster's link (psim_link_time). */
double psim_cluster_link_time(const PsimCluster *c, int32_t src, int32_t dst, uint64_t bytes);

/* Bumped on every change; caches (sessions) compare it. */
uint64_t psim_cluster_version(const PsimCluster *c);

/* Cluster JSON ("placesim.cluster/1"). Errors name the file and the device or field. */
PsimCluster *psim_cluster_load(const char *path, GError **error);
PsimCluster *psim_cluster_parse(const char *path, const char *data, gsize len, GError **error);
/* psim_graph_fuse for cluster c: a chain fuses where every device of c has a kernel for the
 * fused op (the fusions every command makes by default, and a plan file's reader makes again
 * for a graph it refers to as fused). *fused and *n_removed as psim_graph_fuse. */
gboolean psim_cluster_fuse(const PsimCluster *c, const PsimGraph *g, PsimGraph **fused, int32_t *n_removed,
                           GError **error);
char *psim_cluster_to_json(const PsimCluster *c);
/* "local", "local:N" (this machine: N CPU devices on disjoint cores, plus every CUDA GPU), or a
 * cluster file. */
PsimCluster *psim_cluster_from_spec(const char *spec, GError **error);
/* This machine's devices of every class that can find its own (CUDA GPUs: none without a driver
 * or toolkit) appended to c; returns how many. */
int32_t psim_cluster_detect_devices(PsimCluster *c);

G_END_DECLS

#endif
