/* The one cost model: how long node N takes on device D, and B bytes from D1 to D2, with the
 * source of each answer. Resolution order: a cost annotated in the graph, then a measured row in
 * the cost DB (matching device fingerprint), then an analytic estimate (FLOPs and bytes against
 * the device's calibrated peak rates, plus a launch cost). */
#ifndef PLACESIM_COST_H
#define PLACESIM_COST_H

#include "placesim/cluster.h"
#include "placesim/graph.h"

G_BEGIN_DECLS

typedef enum {
    PSIM_COST_SOURCE_NONE = 0,   /* the node cannot run on the device (cost is +inf) */
    PSIM_COST_SOURCE_ANNOTATION, /* cost_us in the graph file */
    PSIM_COST_SOURCE_MEASURED,   /* a kernel row in the cost DB */
    PSIM_COST_SOURCE_ESTIMATE,   /* analytic */
    PSIM_COST_SOURCE_FREE,       /* no work (sources, Identity, Send): zero */
} PsimCostSource;

/* "none", "annotated", "measured", "estimated", "free": the words reports and traces use. */
const char *psim_cost_source_name(PsimCostSource s);

typedef struct PsimCostDb PsimCostDb;
typedef struct PsimCostModel PsimCostModel;

/* A host-speed reference: the median microseconds, on one device, of two small fixed kernels
 * timed in among the profiled kernels (psim_profiler's passes): a cache-resident SGEMM
 * (compute-bound) and a ReLU over 1 MiB into an evicted output (memory-bound). On a shared
 * machine a core's speed drifts by 5-15% over minutes; a kernel row divided by the reference of
 * its own profile does not (docs/cost-db.md). 0 where unknown. */
typedef struct {
    double gemm_us;
    double stream_us;
} PsimSpeedRef;

/* How memory-bound node n is, from its FLOPs and bytes against the device's rates: the share of
 * the memory time in (FLOP time + memory time), in [0, 1]. */
double psim_cost_mem_weight(const PsimGraph *g, const PsimNode *n, double peak_gflops, double mem_bw_GBps);
/* The factor by which a kernel's time changes when the host's reference goes from `then` to
 * `now`: w * now.stream / then.stream + (1 - w) * now.gemm / then.gemm for memory weight w;
 * 1 when either reference or w is unknown. */
double psim_speed_ref_factor(const PsimSpeedRef *then, const PsimSpeedRef *now, double mem_weight);

/* A cost model over cluster c, reading measured rows from db when not NULL (both borrowed:
 * they must outlive the model). Free with psim_cost_model_free. */
PsimCostModel *psim_cost_model_new(const PsimCluster *c, PsimCostDb *db);
void psim_cost_model_free(PsimCostModel *m);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimCostModel, psim_cost_model_free)
const PsimCluster *psim_cost_model_cluster(const PsimCostModel *m);
/* Whether the model reads a cost DB, whose rows are per device (two devices of the same type
 * and rates can then cost the same node differently). */
gboolean psim_cost_model_has_db(const PsimCostModel *m);

/* The host's reference on `device` now (NULL: none, the default). With one set, a measured row
 * that carries its own profile's reference is scaled by psim_speed_ref_factor: the model then
 * answers for the host as fast as it is now, not as it was while profiling. */
void psim_cost_model_set_speed_ref(PsimCostModel *m, int32_t device, const PsimSpeedRef *now);

/* The factor by which ops of `device` slow down while n_busy devices of the step run at once
 * (shared caches and memory bandwidth): with n_busy >= 2 and a "busy_factor" calibration of the
 * device (profile --in-situ: its ops' time with every device of the cluster running the model at
 * once, over their time alone; measured with "busy_devices" devices), 1 + (factor - 1) *
 * min(1, (n_busy - 1) / (busy_devices - 1)); else 1. The cost model does not know the plan: the
 * simulator runs a node at this fraction of its pace while n_busy devices are busy, changing it
 * as they change (sim/sim.c, rescale_running). */
double psim_cost_model_busy_scale(PsimCostModel *m, int32_t device, int32_t n_busy);
/* The same from the device's two calibrations, read once (psim_cost_model_busy): factor 1 and
 * devices 0 without them. */
typedef struct {
    double factor, devices;
} PsimBusyScale;
void psim_cost_model_busy(PsimCostModel *m, int32_t device, PsimBusyScale *out);
static inline double psim_cost_busy_scale(const PsimBusyScale *b, int32_t n_busy)
{
    if (n_busy < 2 || b->factor == 1 || !(b->devices >= 2))
        return 1;
    double share = (n_busy - 1) / (b->devices - 1);
    return 1 + (b->factor - 1) * (share < 1 ? share : 1);
}
/* How much slower an op of a device runs when the device waited (for a Recv) right before it: a
 * core that waited runs its next kernel slower than one that went straight on, the more the
 * longer it waited (this project's VMs: 1-2 us per op after 50 us of waiting, 7-10 us after 300
 * us or more; docs/validation.md). A curve per device from its calibrations (profile --in-situ:
 * the mean per op of its time with the executor waiting before each, less its time without):
 * "idle_extra_us" after "idle_gap_us" of waiting and, where measured, "idle_extra_long_us" after
 * "idle_gap_long_us". n points (0: none). A time per op, not a factor: the same measurement gave
 * factors of 1.29-1.51 on a graph of 5-40 us ops and 0.99-1.02 on graphs of millisecond ops. */
typedef struct {
    int32_t n;
    double gap_us[2], extra_us[2];
} PsimIdleCurve;
void psim_cost_model_idle_curve(PsimCostModel *m, int32_t device, PsimIdleCurve *curve);
/* The same for node n of g: its signature's own points where the DB has an 'idle' row for each
 * of the device's waits (psim_cost_idle_key), else the device's curve. */
void psim_cost_model_node_idle_curve(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                                     PsimIdleCurve *curve);
/* What the executor's transfer from a CPU device to another (the destination's thread copies)
 * costs around the copy (profiler/hop.c), by the transfer's size: the Send, on the source's
 * thread right after the tensor's producer, and the hand-off, from the Send's end until the
 * destination can start its copy, which holds neither device. The link rows of such a pair time
 * the Send's end to the consumer's start; the simulator charges them less the hand-off to the
 * destination, starting no earlier than the hand-off's end. Both are calibrated per source
 * device at the link profile's hop sizes, 1 KiB x4 to 64 MiB ("send_1KiB_us" ..
 * "send_64MiB_us", "handoff_1KiB_us" ..): a Send of 1 KiB to 4 MiB takes 0.25-0.4 us on the
 * development VM and one of 64 MiB 4.5-7 us, so one figure for all sizes charged every small
 * transfer the large ones' Send (docs/validation.md). A DB with only the older figures for all
 * sizes ("send_us", "handoff_us") gives them at every size; without either, 0. */
#define PSIM_HOP_N 9
extern const uint64_t psim_hop_bytes[PSIM_HOP_N];
extern const char *const psim_hop_send_kinds[PSIM_HOP_N];
extern const char *const psim_hop_handoff_kinds[PSIM_HOP_N];
typedef struct {
    int32_t n; /* points (0: none, 0 us at every size) */
    double bytes[PSIM_HOP_N], us[PSIM_HOP_N];
} PsimHopCurve;
void psim_cost_model_hop(PsimCostModel *m, int32_t device, PsimHopCurve *send, PsimHopCurve *handoff);
/* The curve at `bytes`: linear between its points, its first value below them and its last
 * above (a fixed cost: not through 0). */
static inline double psim_cost_hop_us(const PsimHopCurve *c, double bytes)
{
    if (c->n == 0)
        return 0;
    if (bytes <= c->bytes[0])
        return c->us[0];
    for (int32_t k = 1; k < c->n; k++)
        if (bytes <= c->bytes[k])
            return c->us[k - 1] + (c->us[k] - c->us[k - 1]) * (bytes - c->bytes[k - 1]) / (c->bytes[k] - c->bytes[k - 1]);
    return c->us[c->n - 1];
}
/* The executor's host memory (exec/worker.c): a tensor's block is its bytes rounded up to 64 B,
 * taken from its worker's pool by size class (four classes per power of two, at most 25% slack)
 * and put back on top of its class when freed, so the next block of a class a device takes is
 * the one of that class it got back last. The simulator follows the same classes. */
#define PSIM_POOL_CLASSES 256
static inline uint64_t psim_pool_block_bytes(uint64_t nbytes)
{
    uint64_t sz = (nbytes + 63) & ~(uint64_t)63;
    return sz ? sz : 64;
}
/* The class of a block of `bytes` (psim_pool_block_bytes: at least 64) and its capacity. */
static inline int32_t psim_pool_class(uint64_t bytes, uint64_t *cap)
{
    int msb = 63 - __builtin_clzll((unsigned long long)(bytes - 1));
    uint64_t base = (uint64_t)1 << msb, step = base >> 2;
    uint64_t k = (bytes - base + step - 1) / step; /* 1..4 */
    if (cap)
        *cap = base + k * step;
    return msb * 4 + (int32_t)(k - 1);
}
/* What a CPU device pays after another device copied one of its tensors (a transfer between the
 * executor's CPU devices: the destination's thread copies): the block goes back to the source's
 * pool with its lines in the other core's cache, and whatever next writes into it must take them
 * back first (profiler/reclaim.c). Per device and block size, two curves: an op writing its
 * output there ("reclaim_4KiB_us" ... "reclaim_1MiB_us": a write after the other device read the
 * block less one after it read another, the store buffer drained), and a copy from another
 * device landing there ("reclaim_copy_4KiB_us" ...: its reads of the other core's lines overlap
 * most of it). The simulator charges the curve at a copied tensor's bytes to the next node or copy
 * of the source device that takes a block of the same pool class. Points from 4 KiB to 16 MiB:
 * where the two cores do not share a last-level cache (a hypervisor's placement of the vCPUs can
 * change from one minute to the next), a block the other core read keeps its lines in that
 * core's cache up to megabytes, and the cost grows with the block well past 1 MiB
 * (docs/validation.md, "reclaim past 1 MiB, and copies into warm blocks"). */
#define PSIM_RECLAIM_N 7
extern const uint64_t psim_reclaim_bytes[PSIM_RECLAIM_N];
extern const char *const psim_reclaim_kinds[PSIM_RECLAIM_N];
extern const char *const psim_reclaim_copy_kinds[PSIM_RECLAIM_N];
/* How many of psim_reclaim_bytes a profile measures for transfers of at most max_bytes: the
 * sizes up to the first at least max_bytes (0: all). */
static inline int32_t psim_reclaim_points(uint64_t max_bytes)
{
    int32_t n = 1;
    while (n < PSIM_RECLAIM_N && (max_bytes == 0 || psim_reclaim_bytes[n - 1] < max_bytes))
        n++;
    return n;
}
typedef struct {
    int32_t n; /* points (0: none) */
    double bytes[PSIM_RECLAIM_N], us[PSIM_RECLAIM_N];
} PsimReclaimCurve;
/* The device's curves (n 0 where none is calibrated; a DB that has the op curve but not the copy
 * curve, from before the copy curve was measured, gives the op curve for both). */
void psim_cost_model_reclaim(PsimCostModel *m, int32_t device, PsimReclaimCurve *op, PsimReclaimCurve *copy);
/* The curve at `bytes`: linear from 0 through its points, then its last value (a block larger
 * than the other core's cache has left no more of its lines there). */
static inline double psim_cost_reclaim_us(const PsimReclaimCurve *c, double bytes)
{
    double x0 = 0, y0 = 0;
    for (int32_t k = 0; k < c->n; k++) {
        if (bytes <= c->bytes[k])
            return y0 + (c->us[k] - y0) * (bytes - x0) / (c->bytes[k] - x0);
        x0 = c->bytes[k];
        y0 = c->us[k];
    }
    return y0;
}
/* How much of that cost is left once the reading core has moved on: its copy of the block sits in
 * its own caches only until it has written enough else to push it out, and then the next write
 * on the source pays (almost) nothing. Measured per source device (profiler/reclaim.c) as the op
 * curve is, with the destination copying psim_reclaim_after_bytes[j] of its own (as many bytes
 * read as written, as a kernel's inputs and output) between its read and the write
 * ("reclaim_256KiB_after_512KiB_us" ...), at each block size of the reclaim curve. On the
 * development VM (AMD EPYC, 1 MiB of L2 per vCPU), while its two vCPUs share a last-level
 * cache, a 256 KiB block's 23 us fell to 19 us after 256 KiB, 6-8 us after 512 KiB and 1.5-2 us
 * after 1-8 MiB; while they do not, the lines stay in the other core's last-level cache and most
 * of the cost is left after 8 MiB (docs/validation.md, "What the reader's cache still holds").
 * The simulator scales both curves by the fraction left (psim_cost_reclaim_left) at what the
 * reading device has written (its nodes' output blocks and the copies into it) from the read to
 * the write. */
#define PSIM_RECLAIM_AFTER_N 4
extern const uint64_t psim_reclaim_after_bytes[PSIM_RECLAIM_AFTER_N];
/* The calibration kind of block size k, distance j (a static string). */
const char *psim_reclaim_after_kind(int32_t k, int32_t j);
typedef struct {
    int32_t n; /* block sizes with the op curve's point and every distance's (0: none) */
    double bytes[PSIM_RECLAIM_N];
    double us0[PSIM_RECLAIM_N]; /* the op curve's point: right after the read */
    double us[PSIM_RECLAIM_N][PSIM_RECLAIM_AFTER_N];
} PsimReclaimAfter;
void psim_cost_model_reclaim_after(PsimCostModel *m, int32_t device, PsimReclaimAfter *out);
/* Size row k's fraction left after `written` bytes: its time linear from the op curve's point
 * at 0 through its points, then its last, over that point (1 where the point is 0). */
static inline double psim_cost_reclaim_after_row(const PsimReclaimAfter *a, int32_t k, double written)
{
    double x0 = 0, y0 = a->us0[k], y = a->us[k][PSIM_RECLAIM_AFTER_N - 1];
    for (int32_t j = 0; j < PSIM_RECLAIM_AFTER_N; j++) {
        double x = (double)psim_reclaim_after_bytes[j];
        if (written <= x) {
            y = y0 + (a->us[k][j] - y0) * (written - x0) / (x - x0);
            break;
        }
        x0 = x;
        y0 = a->us[k][j];
    }
    return a->us0[k] <= 0 || y >= a->us0[k] ? 1 : y / a->us0[k];
}
/* The fraction left of a `bytes` block's reclaim after the reader wrote `written` bytes: linear
 * in the block's size between the sizes measured, the nearest one's outside them; 1 without a
 * curve. */
static inline double psim_cost_reclaim_left(const PsimReclaimAfter *a, double bytes, double written)
{
    if (a->n == 0 || written <= 0)
        return 1;
    if (bytes <= a->bytes[0])
        return psim_cost_reclaim_after_row(a, 0, written);
    for (int32_t k = 1; k < a->n; k++)
        if (bytes <= a->bytes[k]) {
            double lo = psim_cost_reclaim_after_row(a, k - 1, written);
            double hi = psim_cost_reclaim_after_row(a, k, written);
            return lo + (hi - lo) * (bytes - a->bytes[k - 1]) / (a->bytes[k] - a->bytes[k - 1]);
        }
    return psim_cost_reclaim_after_row(a, a->n - 1, written);
}
/* What writing into a pooled block costs once its lines have gone cold: the executor hands a
 * node (or a copy) the block of its size class freed last, and how much of it is still in the
 * caches depends on how many bytes were written since it was last touched (its reuse distance).
 * In a one-device step that is mostly a block the node's own input just gave back; where a plan
 * splits the graph, a device often takes a block from the step before, tens of megabytes ago
 * (docs/validation.md, "Cold blocks"). Per device, the extra time of a 1 MiB write after
 * 1, 4, 16, 64 and 256 MiB of other writes over the same write into a block just used
 * ("cold_1MiB_us_per_MiB" ...), in microseconds per MiB written (profiler/cold.c). */
/* CPU-to-CPU link rows up to this size are timed through the executor's hop, whose copy lands
 * in a block the destination's pool just gave back (warm), and the simulator charges a copy the
 * cold-block curve for the block it takes, as a node; larger ones by the copy alone into a block
 * evicted from the caches (cold: profiler/links.c), whose cold-block time is in the row already.
 * 64 MiB since 2026-11-29 (1 MiB before: the 4 and 16 MiB rows were copies into evicted blocks,
 * 1.5x a step's copy into a warm block on a chain of 4 MiB tensors, and the copies of a split
 * plan that landed in a cold block paid no more: docs/validation.md, "reclaim past 1 MiB, and
 * copies into warm blocks"). */
#define PSIM_COST_HOP_MAX_BYTES (UINT64_C(64) << 20)
#define PSIM_COLD_N 5
extern const uint64_t psim_cold_distance_bytes[PSIM_COLD_N];
extern const char *const psim_cold_kinds[PSIM_COLD_N];
typedef struct {
    int32_t n; /* points (0: none) */
    double distance[PSIM_COLD_N], us_per_mib[PSIM_COLD_N];
} PsimColdCurve;
void psim_cost_model_cold(PsimCostModel *m, int32_t device, PsimColdCurve *out);
/* The extra microseconds of writing `bytes` into a block `distance` bytes of writes after it was
 * last touched: per MiB linear from 0 through the points, then the last value. A negative
 * distance (no block of the class was free: fresh memory) counts as the farthest point. */
static inline double psim_cost_cold_us(const PsimColdCurve *c, double distance, double bytes)
{
    if (!c || c->n < 1 || !(bytes > 0))
        return 0;
    double x0 = 0, y0 = 0, per = c->us_per_mib[c->n - 1];
    if (distance >= 0)
        for (int32_t k = 0; k < c->n; k++) {
            if (distance <= c->distance[k]) {
                per = y0 + (c->us_per_mib[k] - y0) * (distance - x0) / (c->distance[k] - x0);
                break;
            }
            x0 = c->distance[k];
            y0 = c->us_per_mib[k];
        }
    return per * bytes / 1048576.0;
}
/* The microseconds the simulator adds to a node that starts on a device after idle_us of waiting
 * (within the step, or since the device's last node of the step before): linear from 0 through
 * the curve's points, then its last value. */
static inline double psim_cost_idle_extra(const PsimIdleCurve *c, double idle_us)
{
    if (!c || c->n < 1 || !(idle_us > 0))
        return 0;
    double g0 = 0, e0 = 0;
    for (int32_t k = 0; k < c->n; k++) {
        if (idle_us < c->gap_us[k])
            return e0 + (c->extra_us[k] - e0) * (idle_us - g0) / (c->gap_us[k] - g0);
        g0 = c->gap_us[k], e0 = c->extra_us[k];
    }
    return e0;
}

/* The longest time the model answers, in microseconds. Finite costs and link times beyond it (a
 * graph's or a cluster's 1e308) are taken as this, so that the sums a schedule makes of them stay
 * finite (2^32 of them stay under 1e300) and its argmins and orders stay meaningful. */
#define PSIM_COST_MAX_US 1e290
/* us bounded to [0, PSIM_COST_MAX_US] (NaN: the bound); +inf ("cannot run") is kept. */
double psim_cost_bound(double us);

/* Microseconds for node n of g on device `device` (cluster index); +inf when it cannot run there
 * (no kernel for the device type, or a Task with no annotation for it). src may be NULL. A
 * measured answer is the row's median (an in-situ row before a kernel-alone one), scaled by
 * psim_cost_model_set_speed_ref, plus the device's "dispatch_us"
 * calibration (the executor's median op-to-op gap, profile --in-situ; 0 without it). */
double psim_cost_node(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                      PsimCostSource *src);
/* The same, also giving the kernels-table row id of the measured row that answered (*db_row;
 * -1 unless *src is MEASURED), for reports that show where each cost came from. src and db_row
 * may be NULL. */
double psim_cost_node_row(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                          PsimCostSource *src, int64_t *db_row);
/* Microseconds for `bytes` from device a to device b (0 when a == b). */
double psim_cost_transfer(PsimCostModel *m, uint64_t bytes, int32_t a, int32_t b);
/* The same with its source: MEASURED (the DB's link rows of the pair, interpolated:
 * psim_link_time), ESTIMATE (the cluster's link, or its default), FREE (a == b). src may be NULL. */
double psim_cost_transfer_src(PsimCostModel *m, uint64_t bytes, int32_t a, int32_t b,
                              PsimCostSource *src);
/* The link from device a to device b as the model sees it: the cluster's link (its contention
 * and copy flags) with latency and bandwidth replaced by the DB's fit of the pair and its curve
 * set to the pair's rows when it has them (*src MEASURED), else as the cluster gives them (ESTIMATE); FREE with infinite bandwidth when
 * a == b. Latency and the time of any size are bounded by PSIM_COST_MAX_US. The simulator and the placers read links through this, so that they and
 * psim_cost_transfer agree. src may be NULL. */
PsimLink psim_cost_link(PsimCostModel *m, int32_t a, int32_t b, PsimCostSource *src);
/* TRUE if some link from device a may differ from the cluster's (a link set from a in the
 * cluster, or the DB's timings from a): else psim_cost_link(m, a, b) is the cluster's default
 * link for every b != a, and callers keep one row for all such devices. */
gboolean psim_cost_link_from_own(PsimCostModel *m, int32_t a);
/* The rates the analytic estimate uses for a device: calibrated rows of the DB when present for
 * the device's fingerprint (*calibrated TRUE), else the cluster's figures. Any out may be NULL. */
void psim_cost_model_device_rates(PsimCostModel *m, int32_t device, double *peak_gflops,
                                  double *mem_bw_GBps, double *launch_us, gboolean *calibrated);
/* The whole table for a graph: n_nodes x n_devices, row-major, +inf where infeasible. g_free. */
double *psim_cost_table(PsimCostModel *m, const PsimGraph *g, GError **error);

/* Which nodes are evaluated once before any step, as the executor does: nodes whose outputs
 * are all known values, and nodes all of whose inputs (data and control) come from such nodes;
 * never Placeholders, fed nodes, Send/Recv, stateful or abstract ops. The cost model counts them as free and
 * the profiler skips them. Returns n_nodes flags (g_free), NULL on a cycle. */
gboolean *psim_cost_constant_nodes(const PsimGraph *g);
/* TRUE for ops that do no work at run time (Const, Placeholder, NoOp, Identity, Send...). */
gboolean psim_cost_op_is_free(const char *op);
/* TRUE for ops whose CPU kernel outputs a view of its input, taking no block of its own (Reshape,
 * Flatten, Squeeze, Unsqueeze, and the free ops). */
gboolean psim_cost_op_is_view(const char *op);

/* The signature that keys measurements: op, attrs, input dtypes and shapes, and the number of
 * outputs when more than one (not the device);
 * identical nodes share one (StarPU's footprint). g_free. */
char *psim_cost_signature(const PsimGraph *g, const PsimNode *n);

/* ---------------------------------------------------------------------------------------- */
/* The cost DB: an SQLite file of measured kernel and link timings and device calibrations,
 * keyed by device name and fingerprint. Schema and example queries: docs/cost-db.md. */

#define PSIM_COST_DB_SCHEMA_VERSION 5

/* What identifies the hardware and software a timing was measured with. Rows are used only for
 * a device whose fingerprint digest equals the current one. */
typedef struct PsimFingerprint {
    char *cpu_model;        /* the CPU (for GPUs: the host's CPU) */
    char *gpu_name;         /* GPU devices; "" otherwise */
    char *driver_version;   /* GPU: CUDA driver and runtime; "" for CPUs */
    char *library_versions; /* "placesim=0.1.0 openblas=..." (+ cuBLAS and cuDNN on GPUs) */
    int32_t n_cores;        /* cores the device's thread may use (CPU) */
    char *digest;           /* SHA-256 (hex, 16 chars) of the fields above and the type */
} PsimFingerprint;

/* The fingerprint of device d as seen by this process (its description is the CPU model or GPU
 * name; versions are this process's). Free with psim_fingerprint_free. */
PsimFingerprint *psim_fingerprint_new(const PsimDevice *d);
void psim_fingerprint_free(PsimFingerprint *f);
/* This host's CPU model (/proc/cpuinfo) and the host libraries' versions ("placesim=... openblas=
 * ..."), as the device classes' fingerprint hooks record them; static strings. */
const char *psim_fingerprint_host_cpu_model(void);
const char *psim_fingerprint_host_libraries(void);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimFingerprint, psim_fingerprint_free)

/* Summary statistics of repeated timings, in microseconds. */
typedef struct {
    int64_t n;
    double mean_us, stddev_us, min_us, median_us;
} PsimTimingStats;

/* Computes the statistics of n samples (sorts them in place). */
void psim_timing_stats(double *samples, int64_t n, PsimTimingStats *out);

/* Opens or creates a cost DB for writing (WAL mode, busy timeout, migrations to the current
 * schema). PSIM_ERROR_INPUT (exit 2) for a file that is not SQLite, a corrupt or truncated
 * database, an SQLite file that is not a cost DB, a schema version this build does not know
 * (negative, or newer), a table or column of its schema missing, or a file that cannot be
 * written (mode or folder). Free with psim_cost_db_close. */
PsimCostDb *psim_cost_db_open(const char *path, GError **error);
/* Opens an existing cost DB only to read it (SQLITE_OPEN_READONLY): no migration, no switch to
 * WAL, nothing written, so that a read-only file or folder serves the commands that only read
 * (place, sim, run, cluster, study --no-profile). A DB of an older schema is read as it is. The
 * same errors as psim_cost_db_open, and also for a missing or empty file; every write through
 * the handle fails with PSIM_ERROR_INPUT. Free with psim_cost_db_close. */
PsimCostDb *psim_cost_db_open_readonly(const char *path, GError **error);
void psim_cost_db_close(PsimCostDb *db);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimCostDb, psim_cost_db_close)
const char *psim_cost_db_path(const PsimCostDb *db);
int psim_cost_db_schema_version(PsimCostDb *db);

/* Stores (replacing) the timing of `signature` on device d; `source` is "clock" or "cupti".
 * Each write is one transaction, retried while another writer holds the lock. */
gboolean psim_cost_db_kernel_put(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 const char *op, const char *source, const PsimTimingStats *s,
                                 GError **error);
/* The same, recording how constant inputs were cached while timing: `weights` is "cold" or
 * "warm" (the profiler's modes), stored in the kernels.weights column (schema 3); NULL leaves the
 * column at its default '' (unknown: rows written before schema 3 were timed warm). */
gboolean psim_cost_db_kernel_put_weights(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                         const char *op, const char *source, const char *weights,
                                         const PsimTimingStats *s, GError **error);
/* Schema 4: the same with the host-speed reference measured alongside (ref may be NULL: the
 * columns stay NULL, as they do when ref is incomplete) and the kernel's memory weight
 * (psim_cost_mem_weight). */
gboolean psim_cost_db_kernel_put_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     const char *op, const char *source, const char *weights,
                                     const PsimSpeedRef *ref, double mem_weight,
                                     const PsimTimingStats *s, GError **error);
/* The timing of `signature` on device d: an in-situ row before a kernel-alone one (schema 5), and
 * a row of d with d's current fingerprint before one of another device with the same fingerprint
 * (identical hardware). Returns TRUE with *s filled when found.
 * *other_fingerprint (may be NULL) is set when only rows of d under another fingerprint exist. */
gboolean psim_cost_db_kernel_get(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 PsimTimingStats *s, gboolean *other_fingerprint, GError **error);
/* Schema 4: the same, with the host-speed reference measured alongside the row and the row's
 * memory weight (ref zeroed and mem_weight NAN for rows without them). Either may be NULL. */
gboolean psim_cost_db_kernel_get_ref(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     PsimTimingStats *s, PsimSpeedRef *ref, double *mem_weight,
                                     gboolean *other_fingerprint, GError **error);
/* The same, with the row's id in the kernels table (its SQLite rowid: `SELECT rowid, * FROM
 * kernels`) in *row_id, -1 when not found; reports use it to say which row answered. Any out but
 * s may be NULL. */
gboolean psim_cost_db_kernel_get_row(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                     PsimTimingStats *s, PsimSpeedRef *ref, double *mem_weight,
                                     int64_t *row_id, gboolean *other_fingerprint, GError **error);
/* TRUE if a row exists for (signature, d with its current fingerprint) (the profiler's skip). */
gboolean psim_cost_db_kernel_has(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                 GError **error);
/* TRUE if a kernel-alone row (method 'kernel') exists for (signature, d with its current
 * fingerprint), with *weights (free it) its weights mode: "cold", "warm", or "" for rows written
 * before schema 3. FALSE with *weights
 * NULL otherwise, or on error (*error set). */
gboolean psim_cost_db_kernel_get_weights(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                         char **weights, GError **error);
/* Schema 5: stores (replacing) an in-situ timing of `signature` on device d (kernels.method
 * 'insitu'): the executor's own per-op time in whole-model runs (psim_profiler_insitu), kept
 * beside the kernel-alone row (method 'kernel', every other put). psim_cost_db_kernel_get and
 * its variants answer with the in-situ row when there is one. INPUT error on a DB read at an
 * older schema. */
gboolean psim_cost_db_kernel_put_insitu(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                        const char *op, const char *source, const PsimTimingStats *s,
                                        GError **error);
/* In-situ rows of single nodes: a node whose signature other nodes of its graph share also gets
 * a row of its own under psim_cost_insitu_node_key (its signature, PSIM_COST_NODE_SEP, its name),
 * which the cost model prefers to the signature's: ops of one signature differ by where they run
 * in the step (zoo:transformer's first MatMul after a LayerNorm 3.3 us, the next two 1.8 us). */
#define PSIM_COST_NODE_SEP "\x1f@"
char *psim_cost_insitu_node_key(const char *signature, const PsimNode *n);
/* The extra time of a kernel after its device waited (profile --in-situ: each op of the graph
 * run again with the executor waiting gap_us before each, less its time without; the median
 * over the nodes of the signature) is a 'idle' row of its own, under this key (the signature,
 * PSIM_COST_IDLE_SEP, the wait): an op's slow-down after a wait is its own (zoo:transformer's
 * MatMuls 1.5-3.4 us after 50 us, its Reshapes and Transposes nothing), where the device's
 * idle_extra_us calibration is their mean. */
#define PSIM_COST_IDLE_SEP "\x1fidle="
char *psim_cost_idle_key(const char *signature, double gap_us);
gboolean psim_cost_db_idle_put(PsimCostDb *db, const PsimDevice *d, const char *signature, const char *op,
                               double gap_us, const PsimTimingStats *s, GError **error);
/* TRUE when the DB holds any such node row (FALSE before schema 5). */
gboolean psim_cost_db_has_node_rows(PsimCostDb *db, GError **error);
/* The row of `method` ("kernel" or "insitu") for signature on d (or on identical hardware, as
 * psim_cost_db_kernel_get): TRUE with *s (may be NULL) filled when found. Before schema 5 every
 * row is a "kernel" row. */
gboolean psim_cost_db_kernel_get_method(PsimCostDb *db, const PsimDevice *d, const char *signature,
                                        const char *method, PsimTimingStats *s, GError **error);
/* Stores the timing of a `bytes` transfer from src to dst. */
gboolean psim_cost_db_link_put(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                               uint64_t bytes, const char *source, const PsimTimingStats *s,
                               GError **error);
/* Fits latency + bytes / bandwidth (least squares on relative error, over the medians of the
 * pair's rows at every size, both devices under their current fingerprints; latency clamped at
 * 0). FALSE without error when fewer than two sizes were measured. *rms_rel and *n_sizes may be
 * NULL. Reads only. */
gboolean psim_cost_db_link_fit(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                               PsimLink *out, double *rms_rel, int *n_sizes, GError **error);
/* TRUE if the DB holds link timings from src (to any device): a placer asks the DB for the
 * pairs of such devices only, so that a cluster of many devices is not asked n^2 times. */
gboolean psim_cost_db_link_from(PsimCostDb *db, const PsimDevice *src, GError **error);
/* Records a fit in the link_fits table (for sqlite3 users; the model refits from the rows). */
gboolean psim_cost_db_link_fit_put(PsimCostDb *db, const PsimDevice *src, const PsimDevice *dst,
                                   const PsimLink *fit, int n_sizes, double rms_rel,
                                   GError **error);
/* The same fit on raw arrays (exposed for tests and tools): TRUE when n >= 2. */
/* The pair's measured timings as a curve (psim_link_time), or NULL (also without an error)
 * when the DB has fewer than two sizes of it. Free with psim_link_curve_free. */
PsimLinkCurve *psim_cost_db_link_curve(PsimCostDb *db, const PsimDevice *src,
                                       const PsimDevice *dst, GError **error);
void psim_link_curve_free(PsimLinkCurve *k);
gboolean psim_link_fit(const double *bytes, const double *us, int n, PsimLink *out,
                       double *rms_rel);
/* Calibration figures of a device: kind "gemm_gflops", "copy_GBps" or "launch_us" (calibrate);
 * "dispatch_us", "busy_factor" and "busy_devices" (profile --in-situ). */
gboolean psim_cost_db_calibration_put(PsimCostDb *db, const PsimDevice *d, const char *kind,
                                      double value, const char *detail, GError **error);
/* TRUE with *value when d (current fingerprint) has a calibration of `kind`. */
gboolean psim_cost_db_calibration_get(PsimCostDb *db, const PsimDevice *d, const char *kind,
                                      double *value, GError **error);
/* Which of a device's rates came from calibration rows (psim_cost_db_calibrate_cluster). */
typedef enum {
    PSIM_CALIBRATED_PEAK = 1 << 0,   /* peak_gflops from "gemm_gflops" */
    PSIM_CALIBRATED_MEM_BW = 1 << 1, /* mem_bw_GBps from "copy_GBps" */
    PSIM_CALIBRATED_LAUNCH = 1 << 2, /* launch_us from "launch_us" */
} PsimCalibrated;
/* Replaces each device's peak_gflops, mem_bw_GBps and launch_us in c by the DB's calibration of
 * that device (current fingerprint; psim_cost_db_calibration_get) where it has one, as the cost
 * model's estimates use them. which (may be NULL) gets n_devices PsimCalibrated flags. FALSE
 * with *error on a DB error (c may then be partly updated). Reads only. */
gboolean psim_cost_db_calibrate_cluster(PsimCostDb *db, PsimCluster *c, guint *which, GError **error);
/* One kernel row as psim_cost_db_kernel_foreach gives it (strings valid during the call only). */
typedef struct {
    int64_t id;              /* rowid in the kernels table (the db_row of traces) */
    const char *device;      /* the device's full name */
    const char *fingerprint; /* its fingerprint digest */
    const char *signature;
    const char *op;
    PsimTimingStats stats;
} PsimCostDbKernelRow;
typedef void (*PsimCostDbKernelFunc)(const PsimCostDbKernelRow *row, void *user);
/* Calls fn for every kernel row of the DB, whatever its fingerprint, in rowid order. FALSE with
 * *error on a DB error (fn may have been called for some rows). */
gboolean psim_cost_db_kernel_foreach(PsimCostDb *db, PsimCostDbKernelFunc fn, void *user, GError **error);
/* Row count of a table of the DB ("kernels", "links", "devices", "calibration"); -1 on error. */
int64_t psim_cost_db_count(PsimCostDb *db, const char *table, GError **error);

G_END_DECLS

#endif
