/* Internals shared by the profiler's files: the profiler object, sampling, and the CUDA side
 * (the CUDA timer is the CUDA device class's, devices/cuda/). */
#ifndef PLACESIM_PROFILER_PRIVATE_H
#define PLACESIM_PROFILER_PRIVATE_H

#include "placesim/exec.h"
#include "placesim/profiler.h"

struct PsimProfiler {
    const PsimCluster *cluster;
    PsimCostDb *db;
    PsimProfileOptions opts;
    int32_t n_devices;
    PsimWorker **workers;  /* per device; NULL for devices without a worker class */
    char **worker_errors;  /* why a device has no worker */
    double t0_us;          /* start of the current run, for progress */
    uint64_t rng;
    uint64_t llc_bytes; /* psim_profile_llc_bytes(), read once: the AUTO weights decision, and
                         * inputs up to this size are read into the caches before each burst */
    /* The last graph measured (pointer and node count): its weights mode, and which nodes are
     * evaluated once before any step (psim_cost_constant_nodes: weights, folded or computed by
     * constant subgraphs), whose outputs are the inputs evicted in COLD mode. */
    const PsimGraph *info_graph;
    int32_t info_graph_nodes;
    PsimProfileWeights info_mode;
    gboolean *info_constant; /* NULL on a cycle */
    /* The speed reference's kernels (made on first use): a MatMul and a Relu. */
    PsimGraph *ref_gemm, *ref_stream;
    gboolean quiet; /* no kernel progress (a session's passes run among other work) */
};

/* Fills the last-graph cache above for g. */
void psim__profiler_graph_info(PsimProfiler *p, const PsimGraph *g);

/* Sampling state: warm-up, then samples until reps and the stddev bound, or the budget. */
typedef struct {
    const PsimProfileOptions *opts;
    double budget_us;
    double start_us;
    GArray *samples; /* double */
    double sum, sum_sq;
} PsimSampler;

/* Now in microseconds on the options' clock (CPU timings). */
double psim__profiler_clock_us(const PsimProfileOptions *o);

void psim__sampler_init(PsimSampler *s, const PsimProfileOptions *o, double budget_ms);
/* Adds a sample; TRUE while more are wanted. */
gboolean psim__sampler_add(PsimSampler *s, double us);
/* Computes the statistics and frees the samples. */
void psim__sampler_finish(PsimSampler *s, PsimTimingStats *out);

void psim__profiler_progress(PsimProfiler *p, const char *phase, int32_t done, int32_t total,
                             const char *item);

/* A buffer of `bytes` allocated and first touched on device's worker thread; free it with
 * untouch (on the same thread). */
void *psim__profiler_touch(PsimProfiler *p, int32_t device, size_t bytes, GError **error);
void psim__profiler_untouch(PsimProfiler *p, int32_t device, void *buf);
/* Times memcpy(dst, src, bytes) on device's worker thread. */
gboolean psim__profiler_copy(PsimProfiler *p, int32_t device, void *dst, const void *src,
                             size_t bytes, double budget_ms, PsimTimingStats *out, GError **error);
/* Transfers up to this size are timed through the executor (psim__profiler_hop), where its
 * hand-off is a large share of the time; larger ones by their copy alone, where it is not. */
#define PSIM_PROFILE_HOP_MAX_BYTES PSIM_COST_HOP_MAX_BYTES
/* Times what the executor pays to move a `bytes` tensor from CPU device a to CPU device b in a
 * two-device plan's steps (profiler/hop.c), for as long as sm wants samples: per step the hop,
 * the end of the Send on a to the consumer's start on b (into sm), the Send's time on a (appended
 * to sends) and the hand-off, the Send's end to the start of b's copy (to handoffs). */
gboolean psim__profiler_hop(PsimProfiler *p, int32_t a, int32_t b, uint64_t bytes, PsimSampler *sm, GArray *sends,
                            GArray *handoffs, GError **error);
/* What a transfer from CPU device a to CPU device b leaves a to pay, per size of
 * psim_reclaim_bytes up to the first at least max_bytes (0: all; NAN for the sizes above it)
 * (profiler/reclaim.c): the next write into the block by an op (op_us) and by a copy from b
 * (copy_us), and op_us when b has copied psim_reclaim_after_bytes[j] of its own between its read
 * and the write (after[k * PSIM_RECLAIM_AFTER_N + j]). */
gboolean psim__profiler_reclaim(PsimProfiler *p, int32_t a, int32_t b, uint64_t max_bytes,
                                double op_us[PSIM_RECLAIM_N], double copy_us[PSIM_RECLAIM_N],
                                double after[PSIM_RECLAIM_N * PSIM_RECLAIM_AFTER_N], GError **error);
/* A CPU device's cold-block curve (profiler/cold.c): per distance of psim_cold_distance_bytes, the
 * extra microseconds per MiB of a write into a block that many bytes of writes after it was last
 * touched. psim__profiler_cold adds n_hot timed writes into a block just written and n_cold per
 * distance to the samples; psim__cold_curve makes the curve of all the samples so far. */
typedef struct {
    GArray *hot;                /* double, us */
    GArray *cold[PSIM_COLD_N];  /* double, us, per distance */
} PsimColdSamples;
void psim__cold_samples_init(PsimColdSamples *s);
void psim__cold_samples_clear(PsimColdSamples *s);
gboolean psim__profiler_cold(PsimProfiler *p, int32_t dev, void *own, int n_cold, int n_hot, PsimColdSamples *out,
                             GError **error);
/* The buffer psim__profiler_cold uses: `own` when not NULL (that many bytes, first touched on
 * dev's worker: psim__profiler_touch), else one of its own for the call. */
size_t psim__cold_buffer_bytes(void);
void psim__cold_curve(const PsimColdSamples *s, double us_per_mib[PSIM_COLD_N]);
/* Fits and records the link model of (a, b) when at least two sizes were measured. */
gboolean psim__profiler_fit_pair(PsimProfiler *p, int32_t a, int32_t b, PsimProfileReport *report,
                                 GError **error);

/* A graph holding one node "y" of `op` over float32 Placeholder inputs "x0".. of the given
 * shapes (one output shape); the calibration and the speed reference time its node. */
/* Stores a calibration row (psim_cost_db_calibration_put) and counts it in the report. */
gboolean psim__profiler_calibration_put(PsimProfiler *p, const PsimDevice *d, const char *kind,
                                        double v, const char *detail,
                                        PsimProfileReport *report, GError **error);
PsimGraph *psim__profiler_one_node(const char *op, int32_t n_in, int32_t rank, const int64_t *const *in_dims,
                                   const int64_t *out_dims, GError **error);


#endif
