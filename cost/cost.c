/* The cost model: annotations first, then measured rows, then the analytic estimate with each
 * device's calibrated rates; transfers from the fitted link model, else the cluster's links.
 * A DB row stored under another device fingerprint is never used: the first time one is found
 * for a device, a warning goes to stderr and the model falls back to the estimate. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/cost.h"
#include "placesim/kernels.h"

typedef struct {
    gboolean loaded, calibrated, warned;
    int8_t link_own; /* psim_cost_link_from_own: 0 not asked yet, 1 no, 2 yes */
    double peak_gflops, mem_bw_GBps, launch_us;
    PsimSpeedRef now; /* psim_cost_model_set_speed_ref; zero: none */
    /* From profile --in-situ (calibration rows): the executor's median gap between two ops,
     * added to every measured op (0 without the row), and how much slower ops ran with
     * busy_devices devices busy at once (1 and 0 without the rows). */
    double dispatch_us, busy_factor, busy_devices;
    PsimIdleCurve idle; /* per op after the device waited (n 0: none) */
    PsimReclaimCurve reclaim, reclaim_copy; /* psim_cost_model_reclaim (n 0: none) */
    PsimReclaimAfter reclaim_after;         /* psim_cost_model_reclaim_after (n 0: none) */
    PsimColdCurve cold;                     /* psim_cost_model_cold (n 0: none) */
    PsimHopCurve *hop; /* psim_cost_model_hop: the Send's and the hand-off's curves; NULL: none
                        * (a cluster of 65,536 devices without a DB holds no curves) */
} DeviceRates;

/* A measured row as the model keeps it. */
typedef struct {
    double median_us;
    PsimSpeedRef ref; /* of the row's profile; zero: none */
    double mem_weight;
    int64_t row;      /* its rowid in the kernels table */
} Measured;

typedef struct {
    gboolean loaded, measured;
    PsimLink link;
    const PsimLinkCurve *curve; /* the pair's timings, owned by the model's curves */
} LinkFit;

typedef struct {
    uint64_t version;
    int32_t n_nodes;
    gboolean *mask;
} ConstMask;

static void const_mask_free(ConstMask *c)
{
    g_free(c->mask);
    g_free(c);
}

/* A graph's nodes' idle curves asked so far (psim_cost_model_node_idle_curve), by node id times
 * the devices plus device: a placer simulates the same graph thousands of times. */
typedef struct {
    uint64_t version;
    int32_t n_nodes, n_dev;
    GHashTable *curves; /* int64 key -> PsimIdleCurve* */
} IdleCache;

static void idle_cache_free(IdleCache *c)
{
    g_hash_table_destroy(c->curves);
    g_free(c);
}

struct PsimCostModel {
    const PsimCluster *cluster;
    PsimCostDb *db;
    GMutex lock;
    int32_t n_dev;
    DeviceRates *rates;   /* n_dev */
    GHashTable *links;    /* (a << 32 | b) -> LinkFit*, for the pairs asked (not n_dev^2) */
    /* Every link curve loaded, kept until the model is freed: the links handed out point at
     * them, and the simulator or a placer may hold one while the model's caches are reset. */
    GPtrArray *curves;
    GHashTable *measured; /* "device\nsignature" (or node key) -> Measured*, or NULL: no row */
    int node_rows;        /* the DB has in-situ node rows: -1 not asked yet, 0, 1 */
    GHashTable *constant; /* PsimGraph* -> ConstMask*, checked against the graph's version */
    GHashTable *idle;     /* PsimGraph* -> IdleCache*, likewise */
    gboolean db_error_warned;
};

const char *psim_cost_source_name(PsimCostSource s)
{
    switch (s) {
    case PSIM_COST_SOURCE_ANNOTATION: return "annotated";
    case PSIM_COST_SOURCE_MEASURED: return "measured";
    case PSIM_COST_SOURCE_ESTIMATE: return "estimated";
    case PSIM_COST_SOURCE_FREE: return "free";
    default: return "none";
    }
}

PsimCostModel *psim_cost_model_new(const PsimCluster *c, PsimCostDb *db)
{
    PsimCostModel *m = g_new0(PsimCostModel, 1);
    m->cluster = c;
    m->db = db;
    g_mutex_init(&m->lock);
    m->measured = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    m->node_rows = -1;
    m->constant = g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)const_mask_free);
    m->idle = g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)idle_cache_free);
    m->links = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, g_free);
    m->curves = g_ptr_array_new_with_free_func((GDestroyNotify)psim_link_curve_free);
    return m;
}

/* Frees the per-device caches (with the lock held, or from psim_cost_model_free). */
static void rates_free(PsimCostModel *m)
{
    for (int32_t d = 0; m->rates && d < m->n_dev; d++)
        g_free(m->rates[d].hop);
    g_clear_pointer(&m->rates, g_free);
}

void psim_cost_model_free(PsimCostModel *m)
{
    if (!m)
        return;
    g_hash_table_destroy(m->measured);
    g_hash_table_destroy(m->constant);
    g_hash_table_destroy(m->idle);
    rates_free(m);
    g_hash_table_destroy(m->links);
    g_ptr_array_unref(m->curves);
    g_mutex_clear(&m->lock);
    g_free(m);
}

const PsimCluster *psim_cost_model_cluster(const PsimCostModel *m) { return m->cluster; }
gboolean psim_cost_model_has_db(const PsimCostModel *m) { return m->db != NULL; }

/* Per-device caches follow the cluster if devices were added after the model was made. Called
 * with the lock held. */
static void ensure_size(PsimCostModel *m)
{
    int32_t n = psim_cluster_n_devices(m->cluster);
    if (n == m->n_dev)
        return;
    rates_free(m);
    g_hash_table_remove_all(m->links);
    m->rates = g_new0(DeviceRates, n ? n : 1);
    m->n_dev = n;
    g_hash_table_remove_all(m->measured);
    g_hash_table_remove_all(m->idle);
    m->node_rows = -1;
}

static void warn_db_error(PsimCostModel *m, GError *err)
{
    if (!m->db_error_warned)
        fprintf(stderr, "placesim: warning: %s; using estimates\n", err->message);
    m->db_error_warned = TRUE;
    g_error_free(err);
}

/* A curve's points from device d's calibration rows kinds[0..n) at xs: those the DB has, in
 * order (each at least 0, bounded); returns how many. Stops at the first DB error (*err). */
static int32_t curve_points(PsimCostModel *m, const PsimDevice *d, const char *const *kinds, const uint64_t *xs,
                            int32_t n, double *x, double *y, GError **err)
{
    int32_t got = 0;
    double v;
    for (int32_t k = 0; k < n && !*err; k++)
        if (psim_cost_db_calibration_get(m->db, d, kinds[k], &v, err) && v >= 0 && isfinite(v)) {
            x[got] = (double)xs[k];
            y[got++] = MIN(v, PSIM_COST_MAX_US);
        }
    return got;
}

static DeviceRates *rates(PsimCostModel *m, int32_t device)
{
    DeviceRates *r = &m->rates[device];
    if (r->loaded)
        return r;
    const PsimDevice *d = psim_cluster_device(m->cluster, device);
    r->peak_gflops = d->peak_gflops;
    r->mem_bw_GBps = d->mem_bw_GBps;
    r->launch_us = d->launch_us;
    r->busy_factor = 1;
    r->idle = (PsimIdleCurve){0};
    if (m->db) {
        GError *err = NULL;
        double v;
        if (psim_cost_db_calibration_get(m->db, d, "gemm_gflops", &v, &err) && v > 0 && isfinite(v)) {
            r->peak_gflops = v;
            r->calibrated = TRUE;
        }
        if (!err && psim_cost_db_calibration_get(m->db, d, "copy_GBps", &v, &err) && v > 0 && isfinite(v)) {
            r->mem_bw_GBps = v;
            r->calibrated = TRUE;
        }
        if (!err && psim_cost_db_calibration_get(m->db, d, "launch_us", &v, &err) && v >= 0 && isfinite(v)) {
            r->launch_us = v;
            r->calibrated = TRUE;
        }
        if (!err && psim_cost_db_calibration_get(m->db, d, "dispatch_us", &v, &err) && v >= 0 && isfinite(v))
            r->dispatch_us = MIN(v, PSIM_COST_MAX_US);
        /* The hop's curves; a DB from before them has one figure for all sizes. */
        PsimHopCurve hop[2] = {{0}, {0}};
        hop[0].n = curve_points(m, d, psim_hop_send_kinds, psim_hop_bytes, PSIM_HOP_N, hop[0].bytes, hop[0].us, &err);
        hop[1].n = curve_points(m, d, psim_hop_handoff_kinds, psim_hop_bytes, PSIM_HOP_N, hop[1].bytes, hop[1].us,
                                &err);
        static const char *const hop_all_sizes[2] = {"send_us", "handoff_us"};
        for (int k = 0; k < 2 && !err; k++)
            if (hop[k].n == 0 && psim_cost_db_calibration_get(m->db, d, hop_all_sizes[k], &v, &err) && v >= 0 &&
                isfinite(v))
                hop[k] = (PsimHopCurve){.n = 1, .bytes = {0}, .us = {MIN(v, PSIM_COST_MAX_US)}};
        if (hop[0].n > 0 || hop[1].n > 0)
            r->hop = g_memdup2(hop, sizeof hop);
        if (!err && psim_cost_db_calibration_get(m->db, d, "busy_factor", &v, &err) && v > 0 && isfinite(v) &&
            psim_cost_db_calibration_get(m->db, d, "busy_devices", &r->busy_devices, &err) &&
            r->busy_devices >= 2 && isfinite(r->busy_devices))
            r->busy_factor = MIN(v, 1e6);
        /* The idle curve's points, each an extra time after a gap, the gaps increasing. */
        static const char *const idle_kinds[2][2] = {{"idle_extra_us", "idle_gap_us"},
                                                     {"idle_extra_long_us", "idle_gap_long_us"}};
        for (int k = 0; k < 2 && !err && r->idle.n == k; k++) {
            double gap;
            if (psim_cost_db_calibration_get(m->db, d, idle_kinds[k][0], &v, &err) && v >= 0 && isfinite(v) &&
                psim_cost_db_calibration_get(m->db, d, idle_kinds[k][1], &gap, &err) && gap > 0 && isfinite(gap) &&
                (k == 0 || gap > r->idle.gap_us[0])) {
                r->idle.gap_us[k] = gap;
                r->idle.extra_us[k] = MIN(v, PSIM_COST_MAX_US);
                r->idle.n = k + 1;
            }
        }
        /* The reclaim curves: the points the DB has, in size order (a DB from before the small
         * sizes were measured has the last three); the cold-block curve likewise. */
        r->reclaim.n = curve_points(m, d, psim_reclaim_kinds, psim_reclaim_bytes, PSIM_RECLAIM_N,
                                    r->reclaim.bytes, r->reclaim.us, &err);
        r->reclaim_copy.n = curve_points(m, d, psim_reclaim_copy_kinds, psim_reclaim_bytes, PSIM_RECLAIM_N,
                                         r->reclaim_copy.bytes, r->reclaim_copy.us, &err);
        if (r->reclaim_copy.n == 0)
            r->reclaim_copy = r->reclaim;
        /* What is left of it after the reader wrote more: the sizes with every point. */
        for (int32_t k = 0; k < PSIM_RECLAIM_N && !err; k++) {
            PsimReclaimAfter *a = &r->reclaim_after;
            double us0;
            if (!psim_cost_db_calibration_get(m->db, d, psim_reclaim_kinds[k], &us0, &err) || !(us0 >= 0) ||
                !isfinite(us0))
                continue;
            int32_t j = 0;
            for (; j < PSIM_RECLAIM_AFTER_N && !err; j++)
                if (!psim_cost_db_calibration_get(m->db, d, psim_reclaim_after_kind(k, j), &v, &err) || !(v >= 0) ||
                    !isfinite(v))
                    break;
                else
                    a->us[a->n][j] = MIN(v, PSIM_COST_MAX_US);
            if (j == PSIM_RECLAIM_AFTER_N) {
                a->us0[a->n] = MIN(us0, PSIM_COST_MAX_US);
                a->bytes[a->n++] = (double)psim_reclaim_bytes[k];
            }
        }
        r->cold.n = curve_points(m, d, psim_cold_kinds, psim_cold_distance_bytes, PSIM_COLD_N, r->cold.distance,
                                 r->cold.us_per_mib, &err);
        if (err)
            warn_db_error(m, err);
    }
    r->loaded = TRUE;
    return r;
}

void psim_cost_model_device_rates(PsimCostModel *m, int32_t device, double *peak_gflops,
                                  double *mem_bw_GBps, double *launch_us, gboolean *calibrated)
{
    g_return_if_fail(device >= 0 && device < psim_cluster_n_devices(m->cluster));
    g_mutex_lock(&m->lock);
    ensure_size(m);
    DeviceRates *r = rates(m, device);
    if (peak_gflops)
        *peak_gflops = r->peak_gflops;
    if (mem_bw_GBps)
        *mem_bw_GBps = r->mem_bw_GBps;
    if (launch_us)
        *launch_us = r->launch_us;
    if (calibrated)
        *calibrated = r->calibrated;
    g_mutex_unlock(&m->lock);
}

double psim_cost_mem_weight(const PsimGraph *g, const PsimNode *n, double peak_gflops, double mem_bw_GBps)
{
    PsimOpCount c;
    psim_graph_node_count(g, n, &c);
    double flop_us = peak_gflops > 0 ? c.flops / (peak_gflops * 1e3) : 0;
    double byte_us = mem_bw_GBps > 0 ? (double)(c.bytes_read + c.bytes_written) / (mem_bw_GBps * 1e3) : 0;
    return flop_us + byte_us > 0 ? byte_us / (flop_us + byte_us) : 1;
}

double psim_speed_ref_factor(const PsimSpeedRef *then, const PsimSpeedRef *now, double mem_weight)
{
    if (!then || !now || !(then->gemm_us > 0) || !(then->stream_us > 0) || !(now->gemm_us > 0) ||
        !(now->stream_us > 0) || !(mem_weight >= 0 && mem_weight <= 1))
        return 1;
    return mem_weight * now->stream_us / then->stream_us + (1 - mem_weight) * now->gemm_us / then->gemm_us;
}

void psim_cost_model_set_speed_ref(PsimCostModel *m, int32_t device, const PsimSpeedRef *now)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    if (device >= 0 && device < m->n_dev)
        m->rates[device].now = now ? *now : (PsimSpeedRef){0, 0};
    g_mutex_unlock(&m->lock);
}

double psim_cost_model_busy_scale(PsimCostModel *m, int32_t device, int32_t n_busy)
{
    PsimBusyScale b;
    psim_cost_model_busy(m, device, &b);
    return psim_cost_busy_scale(&b, n_busy);
}

void psim_cost_model_busy(PsimCostModel *m, int32_t device, PsimBusyScale *out)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    *out = (PsimBusyScale){1, 0};
    if (device >= 0 && device < m->n_dev)
        *out = (PsimBusyScale){rates(m, device)->busy_factor, rates(m, device)->busy_devices};
    g_mutex_unlock(&m->lock);
}

void psim_cost_model_idle_curve(PsimCostModel *m, int32_t device, PsimIdleCurve *curve)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    *curve = (PsimIdleCurve){0};
    if (device >= 0 && device < m->n_dev)
        *curve = rates(m, device)->idle;
    g_mutex_unlock(&m->lock);
}

static Measured *measured_row(PsimCostModel *m, int32_t device, const char *sig);

void psim_cost_model_node_idle_curve(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                                     PsimIdleCurve *curve)
{
    psim_cost_model_idle_curve(m, device, curve);
    if (!m->db || curve->n < 1 || device < 0)
        return;
    g_mutex_lock(&m->lock);
    IdleCache *c = g_hash_table_lookup(m->idle, g);
    if (!c || c->version != psim_graph_version(g) || c->n_nodes != psim_graph_n_nodes(g) || c->n_dev != m->n_dev) {
        c = g_new0(IdleCache, 1);
        c->version = psim_graph_version(g);
        c->n_nodes = psim_graph_n_nodes(g);
        c->n_dev = m->n_dev;
        c->curves = g_hash_table_new_full(psim_int64_hash, g_int64_equal, g_free, g_free);
        g_hash_table_replace(m->idle, (gpointer)g, c);
    }
    gint64 key = (gint64)n->id * m->n_dev + device;
    const PsimIdleCurve *known = g_hash_table_lookup(c->curves, &key);
    if (known) {
        *curve = *known;
        g_mutex_unlock(&m->lock);
        return;
    }
    g_autofree char *sig = psim_cost_signature(g, n);
    PsimIdleCurve own = *curve;
    int32_t k = 0;
    for (; k < curve->n; k++) {
        g_autofree char *rk = psim_cost_idle_key(sig, curve->gap_us[k]);
        const Measured *row = measured_row(m, device, rk);
        if (!row || !(row->median_us >= 0) || !isfinite(row->median_us))
            break;
        own.extra_us[k] = MIN(row->median_us, PSIM_COST_MAX_US);
    }
    /* Only a whole curve of the signature's own: one point of it and one of the device's mean
     * would make a curve that neither measured. */
    if (k == curve->n)
        *curve = own;
    g_hash_table_insert(c->curves, g_memdup2(&key, sizeof key), g_memdup2(curve, sizeof *curve));
    g_mutex_unlock(&m->lock);
}

const uint64_t psim_reclaim_bytes[PSIM_RECLAIM_N] = {UINT64_C(4) << 10,   UINT64_C(16) << 10, UINT64_C(64) << 10,
                                                     UINT64_C(256) << 10, UINT64_C(1) << 20,  UINT64_C(4) << 20,
                                                     UINT64_C(16) << 20};
const char *const psim_reclaim_kinds[PSIM_RECLAIM_N] = {"reclaim_4KiB_us",   "reclaim_16KiB_us", "reclaim_64KiB_us",
                                                        "reclaim_256KiB_us", "reclaim_1MiB_us",  "reclaim_4MiB_us",
                                                        "reclaim_16MiB_us"};
const char *const psim_reclaim_copy_kinds[PSIM_RECLAIM_N] = {
    "reclaim_copy_4KiB_us", "reclaim_copy_16KiB_us", "reclaim_copy_64KiB_us", "reclaim_copy_256KiB_us",
    "reclaim_copy_1MiB_us", "reclaim_copy_4MiB_us",  "reclaim_copy_16MiB_us"};

const uint64_t psim_reclaim_after_bytes[PSIM_RECLAIM_AFTER_N] = {UINT64_C(128) << 10, UINT64_C(512) << 10,
                                                                 UINT64_C(2) << 20, UINT64_C(8) << 20};

const char *psim_reclaim_after_kind(int32_t k, int32_t j)
{
    static const char *const sizes[PSIM_RECLAIM_N] = {"4KiB", "16KiB", "64KiB", "256KiB", "1MiB", "4MiB", "16MiB"};
    static const char *const after[PSIM_RECLAIM_AFTER_N] = {"128KiB", "512KiB", "2MiB", "8MiB"};
    static char kinds[PSIM_RECLAIM_N * PSIM_RECLAIM_AFTER_N][48];
    static gsize once = 0;
    if (g_once_init_enter(&once)) {
        for (int32_t a = 0; a < PSIM_RECLAIM_N; a++)
            for (int32_t b = 0; b < PSIM_RECLAIM_AFTER_N; b++)
                g_snprintf(kinds[a * PSIM_RECLAIM_AFTER_N + b], sizeof kinds[0], "reclaim_%s_after_%s_us",
                           sizes[a], after[b]);
        g_once_init_leave(&once, 1);
    }
    g_return_val_if_fail(k >= 0 && k < PSIM_RECLAIM_N && j >= 0 && j < PSIM_RECLAIM_AFTER_N, NULL);
    return kinds[k * PSIM_RECLAIM_AFTER_N + j];
}

void psim_cost_model_reclaim_after(PsimCostModel *m, int32_t device, PsimReclaimAfter *out)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    *out = (PsimReclaimAfter){0};
    if (device >= 0 && device < m->n_dev)
        *out = rates(m, device)->reclaim_after;
    g_mutex_unlock(&m->lock);
}

const uint64_t psim_cold_distance_bytes[PSIM_COLD_N] = {UINT64_C(1) << 20, UINT64_C(4) << 20, UINT64_C(16) << 20,
                                                        UINT64_C(64) << 20, UINT64_C(256) << 20};
const char *const psim_cold_kinds[PSIM_COLD_N] = {"cold_1MiB_us_per_MiB", "cold_4MiB_us_per_MiB",
                                                  "cold_16MiB_us_per_MiB", "cold_64MiB_us_per_MiB",
                                                  "cold_256MiB_us_per_MiB"};

void psim_cost_model_cold(PsimCostModel *m, int32_t device, PsimColdCurve *out)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    *out = (PsimColdCurve){0};
    if (device >= 0 && device < m->n_dev)
        *out = rates(m, device)->cold;
    g_mutex_unlock(&m->lock);
}

void psim_cost_model_reclaim(PsimCostModel *m, int32_t device, PsimReclaimCurve *op, PsimReclaimCurve *copy)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    if (op)
        *op = (PsimReclaimCurve){0};
    if (copy)
        *copy = (PsimReclaimCurve){0};
    if (device >= 0 && device < m->n_dev) {
        const DeviceRates *r = rates(m, device);
        if (op)
            *op = r->reclaim;
        if (copy)
            *copy = r->reclaim_copy;
    }
    g_mutex_unlock(&m->lock);
}

const uint64_t psim_hop_bytes[PSIM_HOP_N] = {UINT64_C(1) << 10,  UINT64_C(4) << 10,  UINT64_C(16) << 10,
                                             UINT64_C(64) << 10, UINT64_C(256) << 10, UINT64_C(1) << 20,
                                             UINT64_C(4) << 20,  UINT64_C(16) << 20,  UINT64_C(64) << 20};
const char *const psim_hop_send_kinds[PSIM_HOP_N] = {"send_1KiB_us",   "send_4KiB_us", "send_16KiB_us",
                                                     "send_64KiB_us",  "send_256KiB_us", "send_1MiB_us",
                                                     "send_4MiB_us",   "send_16MiB_us", "send_64MiB_us"};
const char *const psim_hop_handoff_kinds[PSIM_HOP_N] = {
    "handoff_1KiB_us",   "handoff_4KiB_us", "handoff_16KiB_us", "handoff_64KiB_us", "handoff_256KiB_us",
    "handoff_1MiB_us",   "handoff_4MiB_us", "handoff_16MiB_us", "handoff_64MiB_us"};

void psim_cost_model_hop(PsimCostModel *m, int32_t device, PsimHopCurve *send, PsimHopCurve *handoff)
{
    g_mutex_lock(&m->lock);
    ensure_size(m);
    const DeviceRates *r = device >= 0 && device < m->n_dev ? rates(m, device) : NULL;
    *send = r && r->hop ? r->hop[0] : (PsimHopCurve){0};
    *handoff = r && r->hop ? r->hop[1] : (PsimHopCurve){0};
    g_mutex_unlock(&m->lock);
}

char *psim_cost_insitu_node_key(const char *signature, const PsimNode *n)
{
    return g_strconcat(signature, PSIM_COST_NODE_SEP, n->name, NULL);
}

char *psim_cost_idle_key(const char *signature, double gap_us)
{
    return g_strdup_printf("%s" PSIM_COST_IDLE_SEP "%.0f", signature, gap_us);
}

/* The DB's row for `sig` (a signature or a node key) on device, cached; NULL when none. */
static Measured *measured_row(PsimCostModel *m, int32_t device, const char *sig)
{
    g_autofree char *key = g_strdup_printf("%d\n%s", device, sig);
    gpointer v;
    if (g_hash_table_lookup_extended(m->measured, key, NULL, &v))
        return v;
    const PsimDevice *d = psim_cluster_device(m->cluster, device);
    PsimTimingStats st;
    gboolean other = FALSE;
    GError *err = NULL;
    Measured got, *row = NULL;
    if (psim_cost_db_kernel_get_row(m->db, d, sig, &st, &got.ref, &got.mem_weight, &got.row, &other, &err)) {
        got.median_us = st.median_us;
        row = g_memdup2(&got, sizeof got);
    } else if (err)
        warn_db_error(m, err);
    else if (other && !m->rates[device].warned) {
        fprintf(stderr,
                "placesim: warning: cost DB %s: timings of %s were measured under another device "
                "fingerprint (different hardware or library versions); they are not used "
                "(profile again to use measurements)\n",
                psim_cost_db_path(m->db), d->short_name);
        m->rates[device].warned = TRUE;
    }
    g_hash_table_insert(m->measured, g_steal_pointer(&key), row);
    return row;
}

/* The measured median of node n on device: its in-situ node row, else its signature's row
 * (scaled to the device's current speed reference when both it and the row's are known), or NAN;
 * *row_id its kernels rowid. Called with the lock held. */
static double measured(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                       int64_t *row_id)
{
    g_autofree char *sig = psim_cost_signature(g, n);
    Measured *row = NULL;
    if (m->node_rows < 0) {
        GError *err = NULL;
        m->node_rows = psim_cost_db_has_node_rows(m->db, &err);
        if (err)
            warn_db_error(m, err);
    }
    if (m->node_rows) {
        g_autofree char *nk = psim_cost_insitu_node_key(sig, n);
        row = measured_row(m, device, nk);
    }
    if (!row)
        row = measured_row(m, device, sig);
    if (!row)
        return NAN;
    *row_id = row->row;
    return row->median_us * psim_speed_ref_factor(&row->ref, &m->rates[device].now, row->mem_weight);
}

gboolean psim_cost_op_is_free(const char *op)
{
    static const char *const free_ops[] = {"Const", "Constant", "Placeholder", "NoOp", "Send",
                                           "Identity", "Dropout"};
    for (size_t i = 0; i < G_N_ELEMENTS(free_ops); i++)
        if (!strcmp(op, free_ops[i]))
            return TRUE;
    return FALSE;
}

gboolean psim_cost_op_is_view(const char *op)
{
    /* The CPU kernels that hand out their input's block (kernels/cpu/shape.c). */
    static const char *const views[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
    if (psim_cost_op_is_free(op))
        return TRUE;
    for (size_t i = 0; i < G_N_ELEMENTS(views); i++)
        if (!strcmp(op, views[i]))
            return TRUE;
    return FALSE;
}

/* TRUE if n is in g's constant subgraph (evaluated once, before any step). */
static gboolean is_constant(PsimCostModel *m, const PsimGraph *g, const PsimNode *n)
{
    if (n->flags & PSIM_NODE_CONSTANT)
        return TRUE;
    g_mutex_lock(&m->lock);
    ConstMask *c = g_hash_table_lookup(m->constant, g);
    if (!c || c->version != psim_graph_version(g) || c->n_nodes != psim_graph_n_nodes(g)) {
        c = g_new0(ConstMask, 1);
        c->version = psim_graph_version(g);
        c->n_nodes = psim_graph_n_nodes(g);
        c->mask = psim_cost_constant_nodes(g);
        g_hash_table_replace(m->constant, (gpointer)g, c);
    }
    gboolean yes = c->mask && n->id >= 0 && n->id < c->n_nodes && c->mask[n->id];
    g_mutex_unlock(&m->lock);
    return yes;
}

double psim_cost_bound(double us)
{
    if (isnan(us))
        return PSIM_COST_MAX_US;
    if (isinf(us))
        return us > 0 ? us : 0;
    return CLAMP(us, 0, PSIM_COST_MAX_US);
}

/* A link whose latency and transfer of any 64-bit size stay within PSIM_COST_MAX_US each. */
static PsimLink link_bound(PsimLink l)
{
    const double min_bw = (double)UINT64_MAX / (PSIM_COST_MAX_US * 1e3);
    l.latency_us = MIN(psim_cost_bound(l.latency_us), PSIM_COST_MAX_US);
    if (l.bandwidth_GBps > 0 && l.bandwidth_GBps < min_bw)
        l.bandwidth_GBps = min_bw;
    return l;
}

static double node_cost(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                      PsimCostSource *src)
{
    return psim_cost_node_row(m, g, n, device, src, NULL);
}

double psim_cost_node_row(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                          PsimCostSource *src, int64_t *db_row)
{
    PsimCostSource dummy;
    int64_t no_row;
    if (!src)
        src = &dummy;
    if (!db_row)
        db_row = &no_row;
    *db_row = -1;
    const PsimDevice *d = psim_cluster_device(m->cluster, device);
    double us;
    if (psim_node_cost_lookup(n, d->name, d->type, &us)) {
        *src = PSIM_COST_SOURCE_ANNOTATION;
        return us;
    }
    if (psim_cost_op_is_free(n->op) || is_constant(m, g, n)) {
        *src = PSIM_COST_SOURCE_FREE;
        return 0;
    }
    const PsimOpDef *def = psim_op_lookup(n->op);
    if ((def && (def->flags & PSIM_OP_ABSTRACT)) || !d->cls ||
        !psim_kernel_supported(g, n, d->type)) {
        *src = PSIM_COST_SOURCE_NONE;
        return INFINITY;
    }
    g_mutex_lock(&m->lock);
    ensure_size(m);
    if (m->db) {
        us = measured(m, g, n, device, db_row);
        if (!isnan(us)) {
            /* A row times the kernel alone; in a step the executor also spends its dispatch gap
             * on every op. (Ops run slower while other devices share the caches: the simulator,
             * which knows how many run, scales by psim_cost_model_busy_scale.) */
            us += rates(m, device)->dispatch_us;
            g_mutex_unlock(&m->lock);
            *src = PSIM_COST_SOURCE_MEASURED;
            return us;
        }
    }
    DeviceRates r = *rates(m, device);
    g_mutex_unlock(&m->lock);
    PsimOpCount c;
    psim_graph_node_count(g, n, &c);
    double flop_us = r.peak_gflops > 0 ? c.flops / (r.peak_gflops * 1e3) : 0;
    double byte_us = r.mem_bw_GBps > 0 ? (double)(c.bytes_read + c.bytes_written) / (r.mem_bw_GBps * 1e3) : 0;
    *src = PSIM_COST_SOURCE_ESTIMATE;
    return MAX(flop_us, byte_us) + r.launch_us;
}

double psim_cost_node(PsimCostModel *m, const PsimGraph *g, const PsimNode *n, int32_t device,
                      PsimCostSource *src)
{
    return psim_cost_bound(node_cost(m, g, n, device, src));
}

gboolean psim_cost_link_from_own(PsimCostModel *m, int32_t a)
{
    if (psim_cluster_links_from(m->cluster, a) > 0)
        return TRUE;
    if (!m->db)
        return FALSE;
    g_mutex_lock(&m->lock);
    ensure_size(m);
    DeviceRates *r = &m->rates[a];
    if (!r->link_own) {
        GError *err = NULL;
        r->link_own = psim_cost_db_link_from(m->db, psim_cluster_device(m->cluster, a), &err) ? 2 : 1;
        if (err) {
            warn_db_error(m, err);
            r->link_own = 2; /* psim_cost_link asks, and warns, pair by pair */
        }
    }
    gboolean own = r->link_own == 2;
    g_mutex_unlock(&m->lock);
    return own;
}

PsimLink psim_cost_link(PsimCostModel *m, int32_t a, int32_t b, PsimCostSource *src)
{
    PsimCostSource dummy;
    if (!src)
        src = &dummy;
    PsimLink l = psim_cluster_link(m->cluster, a, b);
    if (a == b) {
        *src = PSIM_COST_SOURCE_FREE;
        return l;
    }
    *src = PSIM_COST_SOURCE_ESTIMATE;
    if (m->db) {
        g_mutex_lock(&m->lock);
        ensure_size(m);
        gint64 key = (gint64)(((guint64)(guint32)a << 32) | (guint32)b);
        LinkFit *f = g_hash_table_lookup(m->links, &key);
        if (!f) {
            f = g_new0(LinkFit, 1);
            g_hash_table_insert(m->links, g_memdup2(&key, sizeof key), f);
        }
        if (!f->loaded) {
            GError *err = NULL;
            f->measured = psim_cost_db_link_fit(m->db, psim_cluster_device(m->cluster, a),
                                                psim_cluster_device(m->cluster, b), &f->link, NULL,
                                                NULL, &err);
            if (err)
                warn_db_error(m, err);
            else if (f->measured) {
                PsimLinkCurve *k = psim_cost_db_link_curve(m->db, psim_cluster_device(m->cluster, a),
                                                           psim_cluster_device(m->cluster, b), &err);
                if (err)
                    warn_db_error(m, err);
                if (k)
                    g_ptr_array_add(m->curves, k);
                f->curve = k;
            }
            f->loaded = TRUE;
        }
        LinkFit fit = *f;
        g_mutex_unlock(&m->lock);
        if (fit.measured) {
            *src = PSIM_COST_SOURCE_MEASURED;
            l.latency_us = fit.link.latency_us;
            l.bandwidth_GBps = fit.link.bandwidth_GBps;
            l.curve = fit.curve;
        }
    }
    return link_bound(l);
}

double psim_cost_transfer_src(PsimCostModel *m, uint64_t bytes, int32_t a, int32_t b,
                              PsimCostSource *src)
{
    if (a == b) {
        if (src)
            *src = PSIM_COST_SOURCE_FREE;
        return 0;
    }
    PsimLink l = psim_cost_link(m, a, b, src);
    return psim_cost_bound(psim_link_time(&l, bytes));
}

double psim_cost_transfer(PsimCostModel *m, uint64_t bytes, int32_t a, int32_t b)
{
    return psim_cost_transfer_src(m, bytes, a, b, NULL);
}

double *psim_cost_table(PsimCostModel *m, const PsimGraph *g, GError **error)
{
    (void)error;
    int32_t n = psim_graph_n_nodes(g), nd = psim_cluster_n_devices(m->cluster);
    double *t = g_new(double, (gsize)n * (gsize)nd + 1);
    for (int32_t i = 0; i < n; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        for (int32_t d = 0; d < nd; d++)
            t[(size_t)i * nd + d] = psim_cost_node(m, g, v, d, NULL);
    }
    return t;
}

static void sig_attr(GString *s, const PsimAttr *a)
{
    g_string_append_printf(s, "%s=", a->name);
    switch (a->type) {
    case PSIM_ATTR_INT: g_string_append_printf(s, "%" G_GINT64_FORMAT, a->v.i); break;
    case PSIM_ATTR_FLOAT: g_string_append_printf(s, "%.9g", a->v.f); break;
    case PSIM_ATTR_STRING: g_string_append(s, a->v.s); break;
    case PSIM_ATTR_BOOL: g_string_append(s, a->v.b ? "1" : "0"); break;
    case PSIM_ATTR_DTYPE: g_string_append(s, psim_dtype_name(a->v.dt)); break;
    case PSIM_ATTR_INTS:
        for (int32_t i = 0; i < a->n; i++)
            g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", a->v.ints[i]);
        break;
    case PSIM_ATTR_FLOATS:
        for (int32_t i = 0; i < a->n; i++)
            g_string_append_printf(s, "%s%.9g", i ? "," : "", a->v.floats[i]);
        break;
    case PSIM_ATTR_STRINGS:
        for (int32_t i = 0; i < a->n; i++)
            g_string_append_printf(s, "%s%s", i ? "," : "", a->v.strs[i]);
        break;
    case PSIM_ATTR_TENSOR:
        if (a->v.t) {
            /* Small tensors (shape arguments) change the work; big ones (weights) only by shape. */
            g_string_append_printf(s, "%s[", psim_dtype_name(a->v.t->dtype));
            for (int32_t i = 0; i < a->v.t->rank; i++)
                g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "x" : "", a->v.t->dims[i]);
            g_string_append_c(s, ']');
            if (a->v.t->n_elems <= 16 && a->v.t->dtype != PSIM_DTYPE_STRING) {
                g_autofree char *h = g_compute_checksum_for_data(G_CHECKSUM_MD5, a->v.t->data, a->v.t->nbytes);
                g_string_append_printf(s, "#%.8s", h);
            }
        }
        break;
    default: g_string_append(s, "?"); break;
    }
    g_string_append_c(s, ';');
}

static int cmp_attr(const void *a, const void *b)
{
    return strcmp((*(const PsimAttr *const *)a)->name, (*(const PsimAttr *const *)b)->name);
}

/* The output a node reads through port p: a Recv's is its Send's, so a shape argument sent from
 * another device (a Slice's starts on round-robin) keeps its value in the signature and finds the
 * row profiled on one device. */
static const PsimOutput *sig_output(const PsimGraph *g, PsimPort p)
{
    const PsimNode *u = psim_graph_node(g, p.node);
    while (!strcmp(u->op, "Recv") && u->n_controls == 1 && p.index == 0) {
        const PsimNode *s = psim_graph_node(g, u->controls[0]);
        if (strcmp(s->op, "Send") || s->n_inputs != 1 || s->inputs[0].node < 0)
            break;
        p = s->inputs[0];
        u = psim_graph_node(g, p.node);
    }
    return &u->outputs[p.index];
}

char *psim_cost_signature(const PsimGraph *g, const PsimNode *n)
{
    GString *s = g_string_new(n->op);
    g_string_append_c(s, '(');
    for (int32_t k = 0; k < n->n_inputs; k++) {
        if (k)
            g_string_append_c(s, ',');
        if (n->inputs[k].node < 0) {
            g_string_append(s, "-");
            continue;
        }
        const PsimOutput *o = sig_output(g, n->inputs[k]);
        g_string_append(s, psim_dtype_name(o->dtype));
        g_string_append_c(s, '[');
        for (int32_t i = 0; i < o->rank; i++)
            g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "x" : "", o->dims[i]);
        g_string_append_c(s, ']');
        /* Shape-like constant inputs (Reshape's shape) are part of the work's definition. */
        if (o->value && o->value->n_elems <= 16 && o->value->dtype == PSIM_DTYPE_INT64) {
            g_string_append_c(s, '=');
            for (int64_t i = 0; i < o->value->n_elems; i++)
                g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", psim_tensor_get_i64(o->value, i));
        }
    }
    g_string_append(s, "){");
    g_autofree const PsimAttr **as = g_new(const PsimAttr *, n->n_attrs + 1);
    for (int32_t i = 0; i < n->n_attrs; i++)
        as[i] = &n->attrs[i];
    qsort(as, (size_t)n->n_attrs, sizeof *as, cmp_attr);
    for (int32_t i = 0; i < n->n_attrs; i++)
        sig_attr(s, as[i]);
    g_string_append_c(s, '}');
    /* How many outputs the node asks for is part of the work: MaxPool with its Indices takes
     * another kernel than without (the training graph has both, of one input). */
    if (n->n_outputs > 1)
        g_string_append_printf(s, "->%d", n->n_outputs);
    return g_string_free(s, FALSE);
}
