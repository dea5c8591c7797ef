/* The profiler: runs each distinct kernel (by cost signature) and transfers between devices on
 * the real devices, and records their timings in the cost DB. CPU kernels are timed with the
 * monotonic clock on the device's own pinned thread (a PsimWorker); GPU kernels with CUPTI
 * activity records attributed to their node through external correlation ids (several CUDA
 * kernels launched by cuBLAS or cuDNN for one node are summed). */
#ifndef PLACESIM_PROFILER_H
#define PLACESIM_PROFILER_H

#include "placesim/cluster.h"
#include "placesim/cost.h"
#include "placesim/graph.h"

G_BEGIN_DECLS

typedef struct {
    const char *phase;  /* "kernels", "links", "calibrate" */
    int32_t done, total; /* kernels: (signature, device) pairs x rounds (passes) */
    double elapsed_ms;  /* since the profile started */
    const char *item;   /* what was just measured ("Conv on CPU:0"), or NULL */
} PsimProfileProgress;

/* What a CPU sample measures. MONOTONIC (the default): wall time on the monotonic clock around
 * the kernel, what the executor sees on an idle machine. THREAD_CPU: the pinned thread's CPU
 * time (CLOCK_THREAD_CPUTIME_ID), which leaves out the time the thread was descheduled: on a
 * shared or oversubscribed machine it still measures the kernel rather than the scheduler.
 * Valid for single-threaded kernels only (work done by other threads is not counted). */
typedef enum {
    PSIM_PROFILE_CLOCK_MONOTONIC = 0,
    PSIM_PROFILE_CLOCK_THREAD_CPU,
} PsimProfileClock;

/* "monotonic", "thread-cpu": the kernel rows' `source` column on CPUs. */
const char *psim_profile_clock_name(PsimProfileClock c);

/* How a CPU kernel's constant inputs (weights: initializers, Const values) are cached when it
 * is timed. WARM: as they are after the previous run of the same kernel (in cache when they fit).
 * COLD: evicted from every cache level (CLFLUSHOPT/CLFLUSH on x86-64, DC CIVAC on aarch64; no-op
 * elsewhere) before each timed run, outside the timed region, as in a real step where the
 * weights were last touched one step earlier and everything else ran in between. AUTO (the
 * default): COLD for a graph whose constant bytes exceed half the last-level cache (they cannot
 * stay cached from one step to the next), WARM otherwise. Inputs over 256 MiB are never flushed
 * (they cannot be cached anyway). GPU kernels are always timed warm. */
typedef enum {
    PSIM_PROFILE_WEIGHTS_AUTO = 0,
    PSIM_PROFILE_WEIGHTS_COLD,
    PSIM_PROFILE_WEIGHTS_WARM,
} PsimProfileWeights;

/* "auto", "cold", "warm" (the kernels.weights column holds "cold" or "warm"). */
const char *psim_profile_weights_name(PsimProfileWeights w);
/* FALSE for anything else. */
gboolean psim_profile_weights_from_name(const char *name, PsimProfileWeights *out);
/* Inputs larger than this are not evicted. */
#define PSIM_PROFILE_EVICT_MAX_BYTES (UINT64_C(256) << 20)
/* The last-level cache one core sees: /sys/devices/system/cpu/cpu0/cache (level 3), else
 * sysconf(_SC_LEVEL3_CACHE_SIZE), else 32 MiB. */
uint64_t psim_profile_llc_bytes(void);
/* The graph's resident constant bytes (psim_graph_stats' param_bytes). */
uint64_t psim_profile_constant_bytes(const PsimGraph *g);
/* w itself unless AUTO; then COLD when constant_bytes > llc_bytes / 2, else WARM. */
PsimProfileWeights psim_profile_weights_resolve(PsimProfileWeights w, uint64_t constant_bytes,
                                                uint64_t llc_bytes);
/* Writes back and evicts [p, p + bytes) from every cache level of this machine, then fences.
 * Returns the bytes covered (whole cache lines), or 0 where the architecture has no user-level
 * eviction (then it does nothing). */
size_t psim_profile_cache_evict(const void *p, size_t bytes);

/* How a graph input is fed in the run a profile predicts (`--feed NAME=...`): with a tensor
 * (a file's), used as it is when its dtype and shape are those the profiled node sees, else the
 * fill. */
typedef struct {
    const char *node; /* the graph input's node name */
    PsimTensorFill fill;
    const PsimTensor *value; /* or NULL */
} PsimProfileFeed;

typedef struct {
    int32_t reps;           /* at least this many timed runs after warm-up (default 10) */
    double max_rel_stddev;  /* stop once stddev/mean is at most this (default 0.02) */
    double budget_ms;       /* per (signature, device) or (pair, size): stop sampling after this
                             * much time even if the bound is not met (default 1000) */
    double warmup_ms;       /* warm-up: at least one run, then runs for this long (default 20) */
    gboolean force;         /* re-measure signatures the DB already has for the device */
    gboolean kernels;       /* measure kernels (default TRUE) */
    gboolean links;         /* measure transfers between every ordered device pair (TRUE) */
    gboolean calibrate;     /* measure each device's GEMM rate, copy bandwidth, launch (TRUE) */
    uint64_t link_min_bytes, link_max_bytes; /* default 1 KiB .. 256 MiB, in steps of x4 */
    uint64_t seed;          /* random input data */
    /* The data of kernels' non-constant float inputs, as the run being predicted is fed: graph
     * inputs named in feeds[] as said there, those not named and every intermediate tensor with
     * `fill` (default RANDOM: N(0, 1); `--feed KIND` of profile and study). Graph inputs are
     * drawn from the stream psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, name), as `run` draws
     * them; other dtypes are zeros. feeds is borrowed. */
    PsimTensorFill fill;
    const PsimProfileFeed *feeds;
    int32_t n_feeds;
    PsimProfileClock clock; /* CPU timing (GPU timing is always CUPTI's) */
    /* Passes over all (signature, device) pairs of a device, set up once: each pass times a
     * short burst (about 200 us, at least one run and reps / rounds) of every kernel still under
     * budget_ms * pass / rounds, and a row pools the samples of every pass. Spreading a
     * kernel's samples over the whole profile keeps the busy moments of a shared machine from
     * deciding its row (default 100). GPU kernels are timed in one stretch. */
    int32_t rounds;
    PsimProfileWeights weights; /* CPU kernels' constant inputs cold or warm (default AUTO) */
    void (*progress)(const PsimProfileProgress *p, void *user);
    void *progress_user;
} PsimProfileOptions;

/* Fills the defaults above. */
void psim_profile_options_init(PsimProfileOptions *o);

typedef struct PsimProfileReport {
    int32_t n_devices;
    int32_t n_signatures;  /* distinct signatures in the graphs (nodes that do work) */
    int32_t measured;      /* (signature, device) timings stored */
    int32_t skipped;       /* already in the DB (no --force) */
    int32_t unsupported;   /* no kernel for the device type, or unknown input shapes */
    int32_t failed;        /* the kernel reported an error on random inputs */
    int32_t link_rows;     /* (pair, size) timings stored */
    int32_t link_pairs;    /* pairs with a fitted link model */
    int32_t calibrations;  /* calibration rows stored */
    int32_t measured_cold; /* of `measured`, timed with cold weights */
    double elapsed_ms;
} PsimProfileReport;

typedef struct PsimProfiler PsimProfiler;

/* A profiler over cluster c (borrowed), writing into db (borrowed; may be NULL for
 * psim_profiler_measure_node alone). Starts one pinned worker per CPU device. opts may be NULL
 * (defaults). Free with psim_profiler_free. */
PsimProfiler *psim_profiler_new(const PsimCluster *c, PsimCostDb *db,
                                const PsimProfileOptions *opts, GError **error);
void psim_profiler_free(PsimProfiler *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimProfiler, psim_profiler_free)

/* TRUE if node n does work at run time that the profiler measures (not a source, not free, not
 * in the constant subgraph, not abstract). */
gboolean psim_profiler_node_measurable(const PsimGraph *g, const PsimNode *n,
                                       const gboolean *constant);

/* Times node n of g on device `device` now (warm-up, then repeats per the options, with g's
 * weights mode, psim_profiler_graph_weights) and fills *out; writes nothing. Inputs are random data in the inferred shapes, or the graph's known
 * values. PSIM_ERROR_UNSUPPORTED when the device type has no kernel for it or an input shape is
 * unknown; RUNTIME when the kernel fails. */
gboolean psim_profiler_measure_node(PsimProfiler *p, const PsimGraph *g, const PsimNode *n,
                                    int32_t device, PsimTimingStats *out, GError **error);

/* The weights mode (COLD or WARM) that kernels of g are timed with on CPUs under the options'
 * `weights` (AUTO resolved from g's constant bytes and psim_profile_llc_bytes()). */
PsimProfileWeights psim_profiler_graph_weights(PsimProfiler *p, const PsimGraph *g);

/* Times nodes[0..n_nodes) of g on `device` as psim_profiler_run times kernels (interleaved:
 * all set up once, then opts.rounds passes of a short burst each, paced to opts.budget_ms).
 * samples[i] gets node i's raw samples (a new GArray of double, microseconds), or NULL when it
 * could not be measured; then why[i] (when why is not NULL) gets the reason (g_free both).
 * *ref (may be NULL) gets the device's speed reference sampled among the passes (CPU devices;
 * zero otherwise).
 * FALSE only for a device index out of range. */
gboolean psim_profiler_measure_nodes(PsimProfiler *p, const PsimGraph *g, const PsimNode *const *nodes,
                                     int32_t n_nodes, int32_t device, GArray **samples, char **why,
                                     PsimSpeedRef *ref, GError **error);

/* Profiles graphs: every distinct signature on every device that can run it (skipping those in
 * the DB unless opts->force), then links and calibration as the options ask. *report may be
 * NULL. FALSE only on DB errors or when nothing could start; per-kernel failures are counted. */
gboolean psim_profiler_run(PsimProfiler *p, PsimGraph *const *graphs, int32_t n_graphs,
                           PsimProfileReport *report, GError **error);
/* A profile of one graph spread over other work: every (signature, device) of g that a device
 * can run (the DB's rows included) set up at once, timed in passes as psim_profiler_run times
 * them, a few passes at a time between the caller's own work, and stored (replacing the DB's
 * rows) at the end. `placesim study` runs its measured steps between the passes, so that the
 * rows it simulates with come from the same minutes of the host as the steps they are compared
 * with. Kernel progress is not reported while a session is open. */
typedef struct PsimProfileSession PsimProfileSession;
/* Sets the kernels up on every device (GPU kernels are timed here, in one stretch). UNSUPPORTED
 * when a device's kernels of g do not fit in one profile group's memory. */
PsimProfileSession *psim_profile_session_new(PsimProfiler *p, PsimGraph *g, GError **error);
/* Runs up to n more passes (of opts.rounds in all); returns how many ran. */
int32_t psim_profile_session_passes(PsimProfileSession *s, int32_t n);
/* Runs the passes left, stores the rows, fills *report (may be NULL) and frees s. FALSE on a DB
 * error. */
gboolean psim_profile_session_finish(PsimProfileSession *s, PsimProfileReport *report, GError **error);
/* Drops a session without storing anything. */
void psim_profile_session_free(PsimProfileSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimProfileSession, psim_profile_session_free)

/* Transfers between every ordered pair of devices at each size, and the fitted link model. The
 * CPU pairs in min(opts.rounds, 10) passes of a link session (below), so that a spell of a shared
 * host decides no row. */
gboolean psim_profiler_links(PsimProfiler *p, PsimProfileReport *report, GError **error);
/* The CPU devices' transfers profiled in passes spread over other work, as a profile session
 * spreads kernels: each psim_link_session_pass times every ordered pair of CPU devices at every
 * size for a share (1 / passes) of the per-size budget (min(budget_ms, 300) ms over all passes;
 * a size whose budget is spent rests), and what a transfer leaves its source to pay (the reclaim
 * curves); with `cold`, also a sample of each CPU device's cold-block curve at each distance.
 * The sizes are link_min_bytes x4 up to the first at least max_bytes (0: link_max_bytes). new
 * returns NULL without an error where fewer than two CPU devices have a worker (no link to time).
 * finish (one pass first when none ran) stores the link rows from all the passes' samples, the
 * fits, each source's send_us and handoff_us (mean over destinations and sizes of their medians),
 * its reclaim curves (mean over destinations of the median over the passes) and, with `cold`, the
 * cold-block curves, replacing the DB's; it frees s. `placesim study` runs one pass before each
 * measured round. */
typedef struct PsimLinkSession PsimLinkSession;
PsimLinkSession *psim_link_session_new(PsimProfiler *p, int32_t passes, gboolean cold, uint64_t max_bytes,
                                       GError **error);
gboolean psim_link_session_pass(PsimLinkSession *s, GError **error);
gboolean psim_link_session_finish(PsimLinkSession *s, PsimProfileReport *report, GError **error);
void psim_link_session_free(PsimLinkSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimLinkSession, psim_link_session_free)
/* Each device's GEMM rate, copy bandwidth and launch cost. */
gboolean psim_profiler_calibrate(PsimProfiler *p, PsimProfileReport *report, GError **error);

/* In-situ profiling (profile --in-situ): the whole graph runs on each CPU device of the cluster
 * (each device its own rows; the runs after a wait below once per fingerprint, shared by
 * identical hardware) as a single-device executor, for
 * `warmup` discarded steps and then `steps` measured ones; each op's time comes from the
 * executor's own per-op clock. Stored in the cost DB: per kernel signature a method 'insitu' row
 * (median_us: the median over the nodes sharing the signature of each node's trimmed mean over
 * the steps, psim_stats_trimmed_mean; n, mean, stddev and min over all their samples), which the cost model prefers to
 * kernel-alone rows; per device a "dispatch_us" calibration (the trimmed mean over the steps of the
 * mean gap between one op's end and the next op's start on the device's thread: the executor's
 * dispatch, which the cost model adds to every measured op); and with `busy` on a cluster of several CPU devices, "busy_factor" and "busy_devices"
 * calibrations (every CPU device runs the graph at once: the sum of a device's op times then
 * over the sum alone; psim_cost_model_busy_scale). GPU devices are not run (their executor times
 * are launches, not kernels). */
typedef struct {
    int32_t steps;  /* measured steps (default 20) */
    int32_t warmup; /* steps run first and discarded (default 3) */
    double warmup_ms; /* and warm-up lasts at least this long (default 0) */
    double record_ms; /* and each run records steps for at least this long (default 0): a graph of
                       * short steps gets more samples in the same wall time */
    gboolean busy;  /* also measure with every CPU device busy (default TRUE) */
    int32_t passes; /* psim_profiler_insitu and a session finished without a pass: the steps in
                     * this many passes one after another, each warmed up again (default 1; the
                     * CLI's 10: a shared host's slow spells last 50 ms to seconds, and one
                     * stretch of steps samples one of them) */
} PsimInsituOptions;

void psim_insitu_options_init(PsimInsituOptions *o);

typedef struct {
    int32_t n_runs;       /* devices the graph ran on alone */
    int32_t passes;       /* passes whose samples were pooled */
    int32_t n_nodes;      /* nodes timed per step (first device) */
    int32_t rows;         /* (signature, device) in-situ rows stored */
    int32_t node_rows;    /* (node, device) rows of nodes sharing a signature (psim_cost_insitu_node_key) */
    int32_t calibrations; /* calibration rows stored */
    int32_t idle_rows;    /* (signature, wait, device) rows of an op's extra time after a wait (psim_cost_idle_key) */
    double step_us;       /* the first device's median step, alone */
    double ops_us;        /* the step its rows predict: each node's row plus one dispatch gap */
    double dispatch_us;   /* its op-to-op gap (dispatch_us) */
    double busy_factor;   /* its factor with every device busy (1: not measured) */
    double idle_extra_us; /* us per op after the executor's wait spin (idle_extra_us, 0: none) */
    double idle_extra_long_us; /* the same after ten times that wait (idle_extra_long_us) */
    double elapsed_ms;
} PsimInsituReport;

/* Runs graph g (borrowed; it must stay unchanged during the call) in situ as above, with feeds
 * (feed_names[i] a ref of g, feeds[i] its tensor; borrowed) and fetches (refs or "^node"
 * targets), into the profiler's DB (which must be set). opts and report may be NULL. Errors: a
 * graph the executor cannot run whole (no kernel for a node, an input not fed: INPUT or
 * UNSUPPORTED, so callers fall back to psim_profiler_run), a kernel failing (RUNTIME), DB
 * errors. Rows stored before an error stay. */
gboolean psim_profiler_insitu(PsimProfiler *p, const PsimGraph *g, const char *const *feed_names,
                              PsimTensor *const *feeds, int32_t n_feeds, const char *const *fetches,
                              int32_t n_fetches, const PsimInsituOptions *opts, PsimInsituReport *report,
                              GError **error);

/* The same profile spread over other work: psim_insitu_session_new sets the executors up (the
 * feeds, fetches and g stay borrowed until the session is freed); each
 * psim_insitu_session_pass runs `warmup` steps (and warmup_ms) and then `steps` recorded steps
 * on each device alone and, with `busy`, on all at once, adding to the samples; finish (which
 * runs opts.passes passes sharing opts.steps when none ran) stores the rows and calibrations from all the
 * passes' samples and frees the session. `placesim study` runs one pass before each of its
 * measured rounds, so that the rows and the steps they are compared with sample the same
 * minutes of a shared host (docs/validation.md). psim_profiler_insitu is new, finish. */
typedef struct PsimInsituSession PsimInsituSession;
PsimInsituSession *psim_insitu_session_new(PsimProfiler *p, const PsimGraph *g, const char *const *feed_names,
                                           PsimTensor *const *feeds, int32_t n_feeds,
                                           const char *const *fetches, int32_t n_fetches,
                                           const PsimInsituOptions *opts, GError **error);
gboolean psim_insitu_session_pass(PsimInsituSession *s, int32_t steps, GError **error);
gboolean psim_insitu_session_finish(PsimInsituSession *s, PsimInsituReport *report, GError **error);
void psim_insitu_session_free(PsimInsituSession *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsimInsituSession, psim_insitu_session_free)

G_END_DECLS

#endif
