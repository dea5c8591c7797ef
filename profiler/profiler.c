/* The profiler: one pinned worker per device, each distinct (signature, device) timed once with
 * warm-up and repeats until the relative standard deviation is under the bound or the budget is
 * spent, and the results stored in the cost DB. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "placesim/kernels.h"
#include "profiler/profiler-private.h"

#define MAX_SAMPLES 100000
#define MAX_WARNINGS 10

void psim_profile_options_init(PsimProfileOptions *o)
{
    *o = (PsimProfileOptions){
        .reps = 10,
        .max_rel_stddev = 0.02,
        .budget_ms = 1000,
        .warmup_ms = 20,
        .kernels = TRUE,
        .links = TRUE,
        .calibrate = TRUE,
        .link_min_bytes = 1024,
        .link_max_bytes = 256u << 20,
        .seed = 42,
        .rounds = 100,
    };
}

/* --- Sampling ---------------------------------------------------------------------------- */

const char *psim_profile_clock_name(PsimProfileClock c)
{
    return c == PSIM_PROFILE_CLOCK_THREAD_CPU ? "thread-cpu" : "monotonic";
}

double psim__profiler_clock_us(const PsimProfileOptions *o)
{
    if (o->clock == PSIM_PROFILE_CLOCK_THREAD_CPU) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    return psim_exec_now_us();
}

void psim__sampler_init(PsimSampler *s, const PsimProfileOptions *o, double budget_ms)
{
    *s = (PsimSampler){.opts = o, .budget_us = budget_ms * 1e3, .start_us = psim_exec_now_us()};
    s->samples = g_array_new(FALSE, FALSE, sizeof(double));
}

gboolean psim__sampler_add(PsimSampler *s, double us)
{
    g_array_append_val(s->samples, us);
    s->sum += us;
    s->sum_sq += us * us;
    int64_t n = s->samples->len;
    int64_t reps = MAX(s->opts->reps, 1);
    if (n >= MAX_SAMPLES)
        return FALSE;
    if (n >= reps) {
        double mean = s->sum / n;
        double var = (s->sum_sq - n * mean * mean) / (n > 1 ? n - 1 : 1);
        double rel = mean > 0 ? sqrt(MAX(var, 0)) / mean : 0;
        if (rel <= s->opts->max_rel_stddev)
            return FALSE;
    }
    /* Over budget: stop, but never with fewer than three samples (or reps, if fewer). */
    if (psim_exec_now_us() - s->start_us >= s->budget_us && n >= MIN(reps, 3))
        return FALSE;
    return TRUE;
}

void psim__sampler_finish(PsimSampler *s, PsimTimingStats *out)
{
    psim_timing_stats((double *)s->samples->data, s->samples->len, out);
    g_array_free(s->samples, TRUE);
    s->samples = NULL;
}

/* --- Profiler object --------------------------------------------------------------------- */

PsimProfiler *psim_profiler_new(const PsimCluster *c, PsimCostDb *db,
                                const PsimProfileOptions *opts, GError **error)
{
    PsimProfiler *p = g_new0(PsimProfiler, 1);
    p->cluster = c;
    p->db = db;
    if (opts)
        p->opts = *opts;
    else
        psim_profile_options_init(&p->opts);
    if (p->opts.rounds < 1 || p->opts.reps < 1 || !(p->opts.max_rel_stddev >= 0) || !(p->opts.budget_ms >= 0) ||
        !(p->opts.warmup_ms >= 0) || p->opts.link_min_bytes < 1 ||
        p->opts.link_max_bytes < p->opts.link_min_bytes || p->opts.weights < PSIM_PROFILE_WEIGHTS_AUTO ||
        p->opts.weights > PSIM_PROFILE_WEIGHTS_WARM) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "profiler options: rounds >= 1, reps >= 1, max-rel-stddev >= 0, budget >= 0, link sizes "
                    "1 <= min <= max, and weights auto, cold or warm are required");
        g_free(p);
        return NULL;
    }
    p->rng = p->opts.seed ? p->opts.seed : 1;
    p->llc_bytes = psim_profile_llc_bytes();
    p->n_devices = psim_cluster_n_devices(c);
    p->workers = g_new0(PsimWorker *, p->n_devices + 1);
    p->worker_errors = g_new0(char *, p->n_devices + 1);
    int32_t n_ok = 0;
    for (int32_t i = 0; i < p->n_devices; i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        GError *err = NULL;
        p->workers[i] = psim_worker_new(d, &err);
        if (!p->workers[i]) {
            p->worker_errors[i] = g_strdup(err->message);
            /* A device type without a worker (GPU before its worker class exists) is simply
             * not profiled for kernels; a CPU device that cannot be pinned is an error. */
            if (d->cls && d->cls->host) {
                g_propagate_error(error, err);
                psim_profiler_free(p);
                return NULL;
            }
            g_error_free(err);
        } else
            n_ok++;
    }
    (void)n_ok;
    return p;
}

void psim_profiler_free(PsimProfiler *p)
{
    if (!p)
        return;
    for (int32_t i = 0; i < p->n_devices; i++) {
        psim_worker_free(p->workers[i]);
        g_free(p->worker_errors[i]);
    }
    g_free(p->workers);
    g_free(p->worker_errors);
    g_free(p->info_constant);
    g_clear_pointer(&p->ref_gemm, psim_graph_free);
    g_clear_pointer(&p->ref_stream, psim_graph_free);
    g_free(p);
}

void psim__profiler_progress(PsimProfiler *p, const char *phase, int32_t done, int32_t total,
                             const char *item)
{
    if (!p->opts.progress)
        return;
    PsimProfileProgress pr = {.phase = phase, .done = done, .total = total,
                              .elapsed_ms = (psim_exec_now_us() - p->t0_us) / 1e3, .item = item};
    p->opts.progress(&pr, p->opts.progress_user);
}

gboolean psim_profiler_node_measurable(const PsimGraph *g, const PsimNode *n, const gboolean *constant)
{
    (void)g;
    if (psim_cost_op_is_free(n->op) || (n->flags & (PSIM_NODE_CONSTANT | PSIM_NODE_FED)))
        return FALSE;
    if (constant && constant[n->id])
        return FALSE;
    const PsimOpDef *d = psim_op_lookup(n->op);
    if (d && (d->flags & (PSIM_OP_ABSTRACT | PSIM_OP_SOURCE)))
        return FALSE;
    return TRUE;
}

/* --- Timing one node --------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The data of a non-constant input: the run's feed for a graph input (its file's tensor copied
 * when it fits, else its fill drawn as `run` draws it), the default fill for anything else.
 * N(0, 1) by default: the distribution the run it predicts sees, now that no kernel takes a
 * data-dependent path (vectorised math, denormals flushed); until issue 14, uniform [0.1, 1)
 * here against an arange ramp in `run` hid a 2.4x slower Sigmoid on real data. */
static void fill_input(const PsimProfileOptions *o, const PsimGraph *g, const PsimNode *src, PsimTensor *t,
                       uint64_t seed)
{
    gboolean graph_input = !strcmp(src->op, "Placeholder"); /* listed or not */
    for (int32_t i = 0; i < psim_graph_n_inputs(g) && !graph_input; i++)
        graph_input = psim_graph_input(g, i) == src->id;
    if (graph_input) {
        for (int32_t k = 0; k < o->n_feeds; k++) {
            const PsimProfileFeed *f = &o->feeds[k];
            if (strcmp(f->node, src->name))
                continue;
            const PsimTensor *v = f->value;
            if (v && v->dtype == t->dtype && v->rank == t->rank && v->device < 0 &&
                !memcmp(v->dims, t->dims, sizeof(int64_t) * (size_t)t->rank) && v->dtype != PSIM_DTYPE_STRING) {
                memcpy(t->data, v->data, t->nbytes);
                return;
            }
            psim_tensor_fill(t, f->fill, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, src->name));
            return;
        }
        psim_tensor_fill(t, o->fill, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, src->name));
        return;
    }
    psim_tensor_fill(t, o->fill, seed);
}

/* One node set up on a worker for timing. Its inputs, kernel state and workspace live from
 * node_setup to node_teardown (both on the worker's thread), so that it can be timed in one
 * stretch (node_sample) or in short bursts spread over a whole profile (node_burst). */
typedef struct {
    PsimProfiler *p;
    const PsimGraph *g;
    const PsimNode *n;
    const PsimKernelDef *k;
    uint64_t seed;
    gboolean cold; /* evict constant inputs before each timed run (CPU) */
    gboolean cpu;  /* a CPU device: outputs are evicted after each timed run */
    const gboolean *constant_nodes; /* psim_cost_constant_nodes(g), or NULL; setup only */
    PsimTensor **in, **outs;
    gboolean *constant; /* per input: resident (weights) */
    void *ws;
    gboolean prepared;
    PsimKernelCtx ctx;
} NodeBench;

static PsimTensor *worker_alloc(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank, const int64_t *dims,
                                GError **error)
{
    return psim_worker_tensor_new(ctx->alloc_user, dtype, rank, dims, error);
}

/* As the executor allocates for a kernel that writes every element (timed as a step runs it). */
static PsimTensor *worker_alloc_uninit(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                                       const int64_t *dims, GError **error)
{
    return psim_worker_tensor_new_uninit(ctx->alloc_user, dtype, rank, dims, error);
}

static gboolean node_error(GError **error, int code, const PsimGraph *g, const PsimNode *n,
                           const char *fmt, ...) G_GNUC_PRINTF(5, 6);
static gboolean node_error(GError **error, int code, const PsimGraph *g, const PsimNode *n,
                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    const char *src = psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g);
    g_set_error(error, PSIM_ERROR, code, "%s: node '%s': %s", src ? src : "graph", n->name, msg);
    return FALSE;
}

/* Builds input k of node n on the calling (worker) thread: the graph's known value, or data in
 * the inferred shape (fill_input). NULL for absent optional inputs (*ok stays TRUE). *constant is set
 * for a resident input: a known value, or an output of a node evaluated once before any step
 * (constant_nodes; the light models' weights come from ConstantOfShape, too big to fold). */
static PsimTensor *make_input(PsimWorker *w, const PsimProfileOptions *opts, const PsimGraph *g,
                              const PsimNode *n, int32_t k, uint64_t seed, const gboolean *constant_nodes, gboolean *ok,
                              gboolean *constant, GError **error)
{
    *ok = TRUE;
    *constant = FALSE;
    PsimPort port = n->inputs[k];
    if (port.node < 0)
        return NULL;
    *constant = constant_nodes && constant_nodes[port.node];
    const PsimNode *src = psim_graph_node(g, port.node);
    const PsimOutput *o = &src->outputs[port.index];
    if (o->value) {
        *constant = TRUE;
        return psim_tensor_ref(o->value);
    }
    if (o->dtype == PSIM_DTYPE_UNDEFINED || o->dtype == PSIM_DTYPE_STRING || o->rank < 0 ||
        psim_shape_elems(o->rank, o->dims) < 0) {
        *ok = FALSE;
        node_error(error, PSIM_ERROR_UNSUPPORTED, g, n,
                   "input %d ('%s') has no known dtype and shape to make data for", k, src->name);
        return NULL;
    }
    PsimTensor *t = psim_worker_tensor_new(w, o->dtype, o->rank, o->dims, error);
    if (!t) {
        *ok = FALSE;
        return NULL;
    }
    if (t->device < 0) {
        fill_input(opts, g, src, t, seed + (uint64_t)k * 7919);
        return t;
    }
    /* Device memory (a GPU): drawn on the host, then copied in once, before any timing. */
    g_autoptr(PsimTensor) h = psim_tensor_new(o->dtype, o->rank, o->dims, error);
    if (h)
        fill_input(opts, g, src, h, seed + (uint64_t)k * 7919);
    if (!h || !psim_worker_copy_in(w, t, h, error)) {
        psim_tensor_unref(t);
        *ok = FALSE;
        return NULL;
    }
    return t;
}

static void release_outputs(PsimTensor **outs, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        g_clear_pointer(&outs[i], psim_tensor_unref);
}

/* Frees what node_setup made (on the worker's thread: the tensors belong to its pool). */
static gboolean node_teardown(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    (void)error;
    NodeBench *b = arg;
    if (b->outs)
        release_outputs(b->outs, b->n->n_outputs);
    if (b->prepared && b->k->release)
        b->k->release(b->ctx.state);
    b->prepared = FALSE;
    g_clear_pointer(&b->ws, g_free);
    for (int32_t i = 0; b->in && i < b->n->n_inputs; i++)
        g_clear_pointer(&b->in[i], psim_tensor_unref);
    g_clear_pointer(&b->in, g_free);
    g_clear_pointer(&b->outs, g_free);
    g_clear_pointer(&b->constant, g_free);
    return TRUE;
}

/* Inputs, kernel state, workspace, then warm-up runs: caches, page faults of the outputs, lazy
 * initialization in libraries. On failure the caller still calls node_teardown. */
static gboolean node_setup(PsimWorker *w, void *arg, GError **error)
{
    NodeBench *b = arg;
    const PsimNode *n = b->n;
    const PsimProfileOptions *o = &b->p->opts;
    b->in = g_new0(PsimTensor *, n->n_inputs + 1);
    b->outs = g_new0(PsimTensor *, n->n_outputs + 1);
    b->constant = g_new0(gboolean, n->n_inputs + 1);
    b->ctx = (PsimKernelCtx){.graph = b->g, .node = n, .n_inputs = n->n_inputs, .inputs = b->in,
                             .n_outputs = n->n_outputs, .outputs = b->outs, .device = w,
                             .device_context = psim_worker_context(w),
                             .device_type = psim_worker_device_type(w), .alloc = worker_alloc,
                             .alloc_user = w, .alloc_uninit = worker_alloc_uninit};
    for (int32_t i = 0; i < n->n_inputs; i++) {
        gboolean made;
        b->in[i] = make_input(w, o, b->g, n, i, b->seed, b->constant_nodes, &made, &b->constant[i], error);
        if (!made)
            return FALSE;
        if (b->constant[i] && i < 64)
            b->ctx.constant_inputs |= UINT64_C(1) << i;
    }
    if (b->k->prepare && !b->k->prepare(b->g, n, w, &b->ctx.state, error))
        return FALSE;
    b->prepared = TRUE;
    b->ctx.workspace_bytes = b->k->workspace ? b->k->workspace(b->g, n) : 0;
    if (b->ctx.workspace_bytes) {
        b->ws = g_try_malloc0(b->ctx.workspace_bytes);
        if (!b->ws)
            return node_error(error, PSIM_ERROR_RUNTIME, b->g, n, "cannot allocate %zu bytes of workspace",
                              b->ctx.workspace_bytes);
        b->ctx.workspace = b->ws;
    }
    double warm_end = psim_exec_now_us() + o->warmup_ms * 1e3;
    int32_t runs = 0;
    do {
        gboolean r = b->k->run(&b->ctx, error);
        release_outputs(b->outs, n->n_outputs);
        if (!r)
            return FALSE;
    } while (++runs < 1000 && psim_exec_now_us() < warm_end);
    return TRUE;
}

/* One timed run on a CPU device. */
static gboolean node_timed_run(NodeBench *b, double *us, GError **error)
{
    const PsimNode *n = b->n;
    const PsimProfileOptions *o = &b->p->opts;
    /* Cold weights: the constant inputs come from DRAM, as in a step where everything else
     * ran since this node's previous run. Outside the timed region. */
    for (int32_t i = 0; b->cold && i < n->n_inputs; i++)
        if (b->constant[i] && b->in[i] && b->in[i]->data && b->in[i]->nbytes <= PSIM_PROFILE_EVICT_MAX_BYTES)
            psim_profile_cache_evict(b->in[i]->data, b->in[i]->nbytes);
    /* Weights the kernel keeps in a layout of its own (oneDNN's convolutions) are cold too. */
    const void *kept = NULL;
    size_t kept_bytes = 0;
    if (b->cold && b->k->state_memory && b->ctx.state)
        b->k->state_memory(b->ctx.state, &kept, &kept_bytes);
    if (kept && kept_bytes <= PSIM_PROFILE_EVICT_MAX_BYTES)
        psim_profile_cache_evict(kept, kept_bytes);
    double t0 = psim__profiler_clock_us(o);
    gboolean r = b->k->run(&b->ctx, error);
    double t1 = psim__profiler_clock_us(o);
    /* Cold outputs: in a step a node writes into a pooled block last used long before
     * (not the block it wrote a moment ago, as here), so the block leaves the caches before
     * it is handed out again. Without this, memory-bound nodes (Relu, BatchNormalization,
     * Sum, MaxPool) measured 30 to 130% faster than inside a step (docs/validation.md). */
    for (int32_t i = 0; b->cpu && i < n->n_outputs; i++)
        if (b->outs[i] && b->outs[i]->data && b->outs[i]->nbytes <= PSIM_PROFILE_EVICT_MAX_BYTES)
            psim_profile_cache_evict(b->outs[i]->data, b->outs[i]->nbytes);
    release_outputs(b->outs, n->n_outputs);
    *us = t1 - t0;
    return r;
}

/* Timing in one stretch: repeats until reps and the stddev bound, or the budget. */
typedef struct {
    NodeBench *b;
    double budget_ms;
    GArray *keep; /* raw samples are appended here when not NULL */
    PsimTimingStats *out;
} SampleJob;

static void keep_samples(SampleJob *j, const PsimSampler *s)
{
    if (j->keep)
        g_array_append_vals(j->keep, s->samples->data, s->samples->len);
}

/* One run for a class's time_runs: the last run's outputs go first. */
static gboolean node_launch(void *user, GError **error)
{
    NodeBench *b = user;
    release_outputs(b->outs, b->n->n_outputs);
    return b->k->run(&b->ctx, error);
}

static gboolean node_sample(PsimWorker *w, void *arg, GError **error)
{
    SampleJob *j = arg;
    NodeBench *b = j->b;
    PsimSampler s;
    psim__sampler_init(&s, &b->p->opts, j->budget_ms);
    const PsimDevice *dev = psim_worker_device(w);
    if (dev && dev->cls && dev->cls->time_runs) {
        /* The class times its own runs (asynchronous kernels: the host clock would time the
         * launch), eight at a time. */
        for (gboolean more = TRUE; more;) {
            double us[8];
            gboolean ok = dev->cls->time_runs(w, G_N_ELEMENTS(us), node_launch, b, us, error);
            release_outputs(b->outs, b->n->n_outputs);
            if (!ok) {
                g_array_free(s.samples, TRUE);
                return FALSE;
            }
            for (size_t r = 0; r < G_N_ELEMENTS(us) && more; r++)
                more = psim__sampler_add(&s, us[r]);
        }
        keep_samples(j, &s);
        psim__sampler_finish(&s, j->out);
        return TRUE;
    }
    for (;;) {
        double us;
        if (!node_timed_run(b, &us, error)) {
            g_array_free(s.samples, TRUE);
            return FALSE;
        }
        if (!psim__sampler_add(&s, us))
            break;
    }
    keep_samples(j, &s);
    psim__sampler_finish(&s, j->out);
    return TRUE;
}

/* Set-up, one stretch of timing, tear-down: one call on the worker. */
static gboolean node_once(PsimWorker *w, void *arg, GError **error)
{
    SampleJob *j = arg;
    gboolean ok = node_setup(w, j->b, error) && node_sample(w, j, error);
    node_teardown(w, j->b, NULL);
    return ok;
}

/* Reads every cache line of [p, p + bytes). */
static void touch(const void *p, size_t bytes)
{
    const volatile unsigned char *c = p;
    unsigned char x = 0;
    for (size_t i = 0; i < bytes; i += 64)
        x ^= c[i];
    (void)x;
}

/* One burst of an interleaved profile: a few timed runs, at least `min_runs`, for about
 * `burst_us`. Other nodes ran on this core since the last burst; in a step, a node's inputs
 * were just written by their producers. So inputs are read into the caches first, outside the
 * timed region: all of them up to the last-level cache's size, except weights timed cold. */
typedef struct {
    NodeBench *b;
    double burst_us;
    int32_t min_runs;
    GArray *samples;
    double spent_us; /* sum of the samples taken so far */
} BurstJob;

#define BURST_MAX_RUNS 64

static gboolean node_burst(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    BurstJob *j = arg;
    NodeBench *b = j->b;
    for (int32_t i = 0; i < b->n->n_inputs; i++)
        if (b->in[i] && b->in[i]->data && !(b->cold && b->constant[i]) && b->in[i]->nbytes <= b->p->llc_bytes)
            touch(b->in[i]->data, b->in[i]->nbytes);
    double start = psim_exec_now_us();
    int32_t runs = 0;
    do {
        double us;
        if (!node_timed_run(b, &us, error))
            return FALSE;
        g_array_append_val(j->samples, us);
        j->spent_us += us;
    } while (++runs < j->min_runs || (runs < BURST_MAX_RUNS && psim_exec_now_us() - start < j->burst_us));
    return TRUE;
}

void psim__profiler_graph_info(PsimProfiler *p, const PsimGraph *g)
{
    if (p->info_graph == g && p->info_graph_nodes == psim_graph_n_nodes(g))
        return;
    p->info_graph = g;
    p->info_graph_nodes = psim_graph_n_nodes(g);
    g_free(p->info_constant);
    p->info_constant = psim_cost_constant_nodes(g);
    p->info_mode = p->opts.weights != PSIM_PROFILE_WEIGHTS_AUTO
                       ? p->opts.weights
                       : psim_profile_weights_resolve(PSIM_PROFILE_WEIGHTS_AUTO, psim_profile_constant_bytes(g),
                                                      p->llc_bytes);
}

PsimProfileWeights psim_profiler_graph_weights(PsimProfiler *p, const PsimGraph *g)
{
    if (p->opts.weights != PSIM_PROFILE_WEIGHTS_AUTO)
        return p->opts.weights;
    psim__profiler_graph_info(p, g);
    return p->info_mode;
}

/* Fills *b for node n of g on `device`; UNSUPPORTED when the device has no worker or no kernel. */
static gboolean bench_init(PsimProfiler *p, const PsimGraph *g, const PsimNode *n, int32_t device,
                           NodeBench *b, GError **error)
{
    const PsimDevice *d = psim_cluster_device(p->cluster, device);
    if (!p->workers[device])
        return node_error(error, PSIM_ERROR_UNSUPPORTED, g, n, "device %s cannot run kernels here: %s",
                          d->short_name, p->worker_errors[device]);
    const PsimKernelDef *k = psim_kernel_for_node(g, n, d->type);
    if (!k)
        return node_error(error, PSIM_ERROR_UNSUPPORTED, g, n, "no %s kernel for op %s", d->type, n->op);
    psim__profiler_graph_info(p, g);
    *b = (NodeBench){.p = p, .g = g, .n = n, .k = k, .seed = splitmix(&p->rng),
                     .constant_nodes = p->info_constant,
                     .cold = d->cls->host && p->info_mode == PSIM_PROFILE_WEIGHTS_COLD,
                     .cpu = d->cls->host};
    return TRUE;
}

gboolean psim_profiler_measure_node(PsimProfiler *p, const PsimGraph *g, const PsimNode *n,
                                    int32_t device, PsimTimingStats *out, GError **error)
{
    g_return_val_if_fail(device >= 0 && device < p->n_devices, FALSE);
    NodeBench b;
    if (!bench_init(p, g, n, device, &b, error))
        return FALSE;
    SampleJob j = {.b = &b, .budget_ms = p->opts.budget_ms, .out = out};
    return psim_worker_call(p->workers[device], node_once, &j, error);
}

/* Progress of the kernels phase, naming the pair just timed (formatted only when someone
 * listens). */
static void kernel_progress(PsimProfiler *p, int32_t done, int32_t total, const PsimNode *n,
                            const PsimDevice *d)
{
    if (!p->opts.progress || p->quiet)
        return;
    g_autofree char *what = g_strdup_printf("%s on %s", n->op, d->short_name);
    psim__profiler_progress(p, "kernels", done, total, what);
}

/* --- Interleaved timing ------------------------------------------------------------------ */

/* A node to time on a device, and what came of it. */
typedef struct {
    const PsimGraph *g;
    const PsimNode *n;
    int32_t device;
    GArray *samples; /* raw samples (double, us); created by interleave() */
    GError *error;   /* why it could not be measured (samples then NULL) */
    PsimSpeedRef ref; /* the device's speed reference over the slot's passes (CPU) */
    /* private to interleave() */
    NodeBench b;
    gboolean live; /* set up, not yet torn down */
    double spent_us;
} Slot;

/* Nodes set up at once on one device are capped by the memory they hold. */
#define INTERLEAVE_MAX_BYTES ((uint64_t)4 << 30)
/* A burst lasts about this long (at least one run, and reps / rounds). */
#define BURST_US 200.0
/* The speed reference's kernels are timed (a burst each) at the start of each pass and then
 * every this often. */
#define REF_EVERY_US 10000.0

static void slot_drop(PsimProfiler *p, Slot *s, GError *err)
{
    if (s->live)
        psim_worker_call(p->workers[s->device], node_teardown, &s->b, NULL);
    s->live = FALSE;
    if (s->samples)
        g_array_free(s->samples, TRUE);
    s->samples = NULL;
    if (!s->error)
        s->error = err;
    else if (err)
        g_error_free(err);
}

/* The speed reference's two kernels, set up on device's worker as slots: a 256^3 MatMul
 * (compute-bound) and a Relu over [1, 128, 56, 56] float32 (1.6 MB in, 1.6 MB out: memory-bound,
 * a mid-sized activation of the light models). They are timed exactly as the profiled kernels
 * are (inputs read into the caches before each burst, output evicted after each run), so their
 * times move with the host's speed as those kernels' do. Returns 2, or 0 when they cannot be set
 * up (the rows then carry no reference); ref[k].g is set for the slots to drop afterwards. */
static int32_t ref_setup(PsimProfiler *p, int32_t dev, Slot *ref)
{
    memset(ref, 0, 2 * sizeof *ref);
    if (!p->ref_gemm) {
        const int64_t sq[2] = {256, 256};
        const int64_t *dims2[2] = {sq, sq};
        const int64_t act[4] = {1, 128, 56, 56};
        const int64_t *dims1[1] = {act};
        p->ref_gemm = psim__profiler_one_node("MatMul", 2, 2, dims2, sq, NULL);
        p->ref_stream = psim__profiler_one_node("Relu", 1, 4, dims1, act, NULL);
    }
    if (!p->ref_gemm || !p->ref_stream)
        return 0;
    PsimGraph *graphs[2] = {p->ref_gemm, p->ref_stream};
    for (int32_t k = 0; k < 2; k++) {
        Slot *s = &ref[k];
        *s = (Slot){.g = graphs[k], .n = psim_graph_node_find(graphs[k], "y"), .device = dev};
        GError *err = NULL;
        if (!bench_init(p, s->g, s->n, dev, &s->b, &err)) {
            g_error_free(err);
            return 0;
        }
        s->samples = g_array_new(FALSE, FALSE, sizeof(double));
        s->live = TRUE;
        if (!psim_worker_call(p->workers[dev], node_setup, &s->b, &err)) {
            g_error_free(err);
            return 0;
        }
    }
    return 2;
}

/* The slots of one device set up together, and the speed reference timed among their passes. */
typedef struct {
    int32_t dev;
    int32_t first, next; /* the group is dev's slots among slots[first..next) */
    int32_t n_live;
    Slot ref[2];
    int32_t n_ref;
    double last_ref;
} Group;

/* Sets up a group of dev's slots, from *next on: as many as fit in INTERLEAVE_MAX_BYTES (and
 * half the device's memory); *next then points past them. A GPU slot is timed at once, in one
 * stretch of the budget (CUPTI timings are steady), and not kept. */
static void group_setup(PsimProfiler *p, Slot *slots, int32_t n_slots, int32_t dev, int32_t *next, Group *gr,
                        int32_t *done, int32_t total)
{
    const PsimProfileOptions *o = &p->opts;
    const PsimDevice *d = psim_cluster_device(p->cluster, dev);
    memset(gr, 0, sizeof *gr);
    gr->dev = dev;
    gr->first = *next;
    gr->last_ref = -1e300;
    uint64_t cap = INTERLEAVE_MAX_BYTES;
    if (d->memory_bytes)
        cap = MIN(cap, d->memory_bytes / 2);
    uint64_t base = p->workers[dev] ? psim_worker_memory(p->workers[dev], NULL) : 0;
    for (; *next < n_slots; ++*next) {
        Slot *s = &slots[*next];
        if (s->device != dev || s->error)
            continue;
        if (gr->n_live > 0 && p->workers[dev] && psim_worker_memory(p->workers[dev], NULL) - base >= cap)
            break;
        GError *err = NULL;
        if (!bench_init(p, s->g, s->n, dev, &s->b, &err)) {
            slot_drop(p, s, err);
            *done += o->rounds;
            continue;
        }
        s->samples = g_array_new(FALSE, FALSE, sizeof(double));
        if (!d->cls->host) {
            PsimTimingStats st;
            SampleJob j = {.b = &s->b, .budget_ms = o->budget_ms, .keep = s->samples, .out = &st};
            if (!psim_worker_call(p->workers[dev], node_once, &j, &err))
                slot_drop(p, s, err);
            *done += o->rounds;
            kernel_progress(p, *done, total, s->n, d);
            continue;
        }
        s->live = TRUE;
        if (!psim_worker_call(p->workers[dev], node_setup, &s->b, &err)) {
            slot_drop(p, s, err);
            *done += o->rounds;
            continue;
        }
        gr->n_live++;
    }
    gr->next = *next;
    gr->n_ref = gr->n_live > 0 ? ref_setup(p, dev, gr->ref) : 0;
}

/* Pass r over the group: a burst of every live slot still under its share of the budget, with
 * the speed reference's kernels timed at the start and then every REF_EVERY_US. A node is paced
 * to its budget: it joins pass r while its timed total is under budget * (r + 1) / rounds. */
static void group_pass(PsimProfiler *p, Slot *slots, Group *gr, int32_t r, int32_t *done, int32_t total)
{
    const PsimProfileOptions *o = &p->opts;
    const PsimDevice *d = psim_cluster_device(p->cluster, gr->dev);
    int32_t rounds = o->rounds;
    double budget_us = o->budget_ms * 1e3;
    int32_t min_runs = MAX(1, (o->reps + rounds - 1) / rounds);
    double burst_us = MIN(BURST_US, budget_us / rounds);
    gboolean started = FALSE;
    for (int32_t i = gr->first; i < gr->next && gr->n_live > 0; i++) {
        Slot *s = &slots[i];
        if (s->device != gr->dev || !s->live)
            continue;
        if (gr->n_ref && (!started || psim_exec_now_us() - gr->last_ref >= REF_EVERY_US)) {
            for (int32_t k = 0; k < gr->n_ref; k++) {
                BurstJob j = {.b = &gr->ref[k].b, .burst_us = BURST_US, .min_runs = 1, .samples = gr->ref[k].samples};
                if (!psim_worker_call(p->workers[gr->dev], node_burst, &j, NULL))
                    gr->n_ref = 0;
            }
            gr->last_ref = psim_exec_now_us();
        }
        started = TRUE;
        if (s->samples->len >= 3 && s->spent_us >= budget_us * (r + 1) / rounds) {
            kernel_progress(p, ++*done, total, s->n, d);
            continue;
        }
        BurstJob j = {.b = &s->b, .burst_us = burst_us, .min_runs = min_runs, .samples = s->samples,
                      .spent_us = s->spent_us};
        GError *err = NULL;
        if (!psim_worker_call(p->workers[gr->dev], node_burst, &j, &err)) {
            slot_drop(p, s, err);
            gr->n_live--;
            *done += rounds - r;
            continue;
        }
        s->spent_us = j.spent_us;
        kernel_progress(p, ++*done, total, s->n, d);
    }
}

/* Tears the group down; its slots keep their samples and get the speed reference. */
static void group_finish(PsimProfiler *p, Slot *slots, Group *gr)
{
    PsimSpeedRef ref = {0, 0};
    if (gr->n_ref == 2 && gr->ref[0].samples->len && gr->ref[1].samples->len) {
        PsimTimingStats a, b;
        psim_timing_stats((double *)gr->ref[0].samples->data, gr->ref[0].samples->len, &a);
        psim_timing_stats((double *)gr->ref[1].samples->data, gr->ref[1].samples->len, &b);
        ref = (PsimSpeedRef){a.median_us, b.median_us};
    }
    for (int32_t k = 0; k < 2; k++)
        if (gr->ref[k].g)
            slot_drop(p, &gr->ref[k], NULL);
    for (int32_t i = gr->first; i < gr->next; i++)
        if (slots[i].device == gr->dev && slots[i].live) {
            psim_worker_call(p->workers[gr->dev], node_teardown, &slots[i].b, NULL);
            slots[i].live = FALSE;
            slots[i].ref = ref;
        }
    /* The next group starts from an empty pool, as a process that runs only its graph would:
     * with the blocks of earlier groups (up to 1 GiB) recycled into its inputs and outputs,
     * resnet50's Relu and BatchNormalization nodes timed 30% faster after alexnet's and
     * inception_v1's groups than in a process of their own. */
    if (p->workers[gr->dev])
        psim_worker_pool_release(p->workers[gr->dev]);
}

/* Times every slot. CPU nodes are set up together, a group per device (group_setup), and then
 * timed in opts.rounds passes over all of them, a short burst each per pass. Each node's samples
 * are thus spread over the whole profile: on a shared machine a core's speed wanders by 15-20%
 * over tens to hundreds of milliseconds (docs/validation.md), so samples taken in one stretch,
 * or a few, measure a moment rather than the machine. */
static void interleave(PsimProfiler *p, Slot *slots, int32_t n_slots, int32_t *done, int32_t total)
{
    for (int32_t dev = 0; dev < p->n_devices; dev++)
        for (int32_t next = 0; next < n_slots;) {
            Group gr;
            group_setup(p, slots, n_slots, dev, &next, &gr, done, total);
            for (int32_t r = 0; r < p->opts.rounds && gr.n_live > 0; r++)
                group_pass(p, slots, &gr, r, done, total);
            group_finish(p, slots, &gr);
        }
}

gboolean psim_profiler_measure_nodes(PsimProfiler *p, const PsimGraph *g, const PsimNode *const *nodes,
                                     int32_t n_nodes, int32_t device, GArray **samples, char **why,
                                     PsimSpeedRef *ref, GError **error)
{
    if (ref)
        *ref = (PsimSpeedRef){0, 0};
    if (device < 0 || device >= p->n_devices) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "no device %d in the cluster", device);
        return FALSE;
    }
    g_autofree Slot *slots = g_new0(Slot, n_nodes + 1);
    for (int32_t i = 0; i < n_nodes; i++)
        slots[i] = (Slot){.g = g, .n = nodes[i], .device = device};
    int32_t done = 0;
    p->t0_us = psim_exec_now_us();
    interleave(p, slots, n_nodes, &done, n_nodes * p->opts.rounds);
    for (int32_t i = 0; i < n_nodes; i++) {
        if (ref && slots[i].ref.gemm_us > 0)
            *ref = slots[i].ref;
        samples[i] = slots[i].samples;
        if (why)
            why[i] = slots[i].error ? g_strdup(slots[i].error->message) : NULL;
        g_clear_error(&slots[i].error);
    }
    return TRUE;
}

/* --- Profiling graphs -------------------------------------------------------------------- */

/* Index of the first input with neither a known value nor a known dtype and shape, or -1. */
static int32_t unknown_input(const PsimGraph *g, const PsimNode *n)
{
    for (int32_t k = 0; k < n->n_inputs; k++) {
        PsimPort port = n->inputs[k];
        if (port.node < 0)
            continue;
        const PsimOutput *o = &psim_graph_node(g, port.node)->outputs[port.index];
        if (!o->value && (o->dtype == PSIM_DTYPE_UNDEFINED || o->dtype == PSIM_DTYPE_STRING ||
                          o->rank < 0 || psim_shape_elems(o->rank, o->dims) < 0))
            return k;
    }
    return -1;
}

typedef struct {
    int32_t device;
    const PsimGraph *g;
    const PsimNode *n;
    char *sig;
} Item;

static void item_clear(Item *it) { g_free(it->sig); }

/* The weights mode of an item's row: kernels of a device that is not the host are timed warm. */
static const char *item_mode(PsimProfiler *p, const Item *it)
{
    const PsimDevice *d = psim_cluster_device(p->cluster, it->device);
    return psim_profile_weights_name(d->cls->host ? psim_profiler_graph_weights(p, it->g)
                                                  : PSIM_PROFILE_WEIGHTS_WARM);
}

/* Every distinct (signature, device) of the graphs that a device can run, into items (Item);
 * report->n_signatures and ->unsupported are counted, and nodes with an unknown input shape
 * named on stderr when `warn`. */
static void collect_items(PsimProfiler *p, PsimGraph *const *graphs, int32_t n_graphs, GArray *items,
                          PsimProfileReport *report, gboolean warn, int32_t *n_warned)
{
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GHashTable) sigs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (int32_t gi = 0; gi < n_graphs && p->opts.kernels; gi++) {
        const PsimGraph *g = graphs[gi];
        g_autofree gboolean *constant = psim_cost_constant_nodes(g);
        for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
            const PsimNode *n = psim_graph_node(g, v);
            if (!psim_profiler_node_measurable(g, n, constant))
                continue;
            char *sig = psim_cost_signature(g, n);
            g_hash_table_add(sigs, g_strdup(sig));
            int32_t unknown = unknown_input(g, n);
            for (int32_t d = 0; d < p->n_devices; d++) {
                const PsimDevice *dev = psim_cluster_device(p->cluster, d);
                char *key = g_strdup_printf("%d\n%s", d, sig);
                if (!g_hash_table_add(seen, key))
                    continue;
                if (!p->workers[d] || !psim_kernel_for_node(g, n, dev->type) || unknown >= 0) {
                    if (warn && unknown >= 0 && (*n_warned)++ < MAX_WARNINGS)
                        fprintf(stderr, "placesim: warning: %s: node '%s': input %d has an unknown shape; "
                                "not measured on %s\n", psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g),
                                n->name, unknown, dev->short_name);
                    report->unsupported++;
                    continue;
                }
                Item it = {.device = d, .g = g, .n = n, .sig = g_strdup(sig)};
                g_array_append_val(items, it);
            }
            g_free(sig);
        }
    }
    report->n_signatures = (int32_t)g_hash_table_size(sigs);
}

/* Stores the rows of the measured slots (slots[k] times items[slot_item[k]]), frees their
 * samples, and counts them in the report. FALSE on a DB error. */
static gboolean store_rows(PsimProfiler *p, Slot *slots, int32_t n_slots, GArray *items, const int32_t *slot_item,
                           PsimProfileReport *report, int32_t *n_warned, GError **error)
{
    gboolean ok = TRUE;
    for (int32_t k = 0; k < n_slots; k++) {
        Slot *s = &slots[k];
        Item *it = &g_array_index(items, Item, slot_item[k]);
        const PsimDevice *d = psim_cluster_device(p->cluster, it->device);
        if (s->error) {
            if (g_error_matches(s->error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED))
                report->unsupported++;
            else
                report->failed++;
            if ((*n_warned)++ < MAX_WARNINGS)
                fprintf(stderr, "placesim: warning: %s (not measured on %s)\n", s->error->message, d->short_name);
            g_clear_error(&s->error);
            continue;
        }
        if (ok && s->samples) {
            PsimTimingStats st;
            psim_timing_stats((double *)s->samples->data, s->samples->len, &st);
            const char *how = d->cls->timer ? d->cls->timer : psim_profile_clock_name(p->opts.clock);
            double w = psim_cost_mem_weight(it->g, it->n, d->peak_gflops, d->mem_bw_GBps);
            if (p->db && !psim_cost_db_kernel_put_ref(p->db, d, it->sig, it->n->op, how, item_mode(p, it),
                                                      &s->ref, w, &st, error))
                ok = FALSE;
            else {
                report->measured++;
                report->measured_cold += !strcmp(item_mode(p, it), "cold");
            }
        }
        if (s->samples)
            g_array_free(s->samples, TRUE);
        s->samples = NULL;
    }
    if (*n_warned > MAX_WARNINGS)
        fprintf(stderr, "placesim: warning: %d more nodes were not measured\n", *n_warned - MAX_WARNINGS);
    return ok;
}

gboolean psim_profiler_run(PsimProfiler *p, PsimGraph *const *graphs, int32_t n_graphs,
                           PsimProfileReport *report, GError **error)
{
    PsimProfileReport dummy;
    if (!report)
        report = &dummy;
    memset(report, 0, sizeof *report);
    report->n_devices = p->n_devices;
    p->t0_us = psim_exec_now_us();
    g_autoptr(GArray) items = g_array_new(FALSE, FALSE, sizeof(Item));
    g_array_set_clear_func(items, (GDestroyNotify)item_clear);
    int32_t n_warned = 0;
    collect_items(p, graphs, n_graphs, items, report, TRUE, &n_warned);
    int32_t n_items = (int32_t)items->len, rounds = p->opts.rounds, done = 0;
    int32_t total = n_items * rounds;
    /* Rows already in the DB (in the mode they would be timed in now) are kept. */
    g_autofree Slot *slots = g_new0(Slot, n_items + 1);
    g_autofree int32_t *slot_item = g_new0(int32_t, n_items + 1);
    int32_t n_slots = 0;
    for (int32_t i = 0; i < n_items; i++) {
        Item *it = &g_array_index(items, Item, i);
        const PsimDevice *d = psim_cluster_device(p->cluster, it->device);
        if (p->db && !p->opts.force) {
            GError *err = NULL;
            g_autofree char *had = NULL;
            gboolean has = psim_cost_db_kernel_get_weights(p->db, d, it->sig, &had, &err);
            if (err) {
                g_propagate_error(error, err);
                return FALSE;
            }
            /* A row timed in the other mode is measured again ('' is a row from before the
             * weights column: timed warm). */
            if (has && strcmp(had[0] ? had : "warm", item_mode(p, it)))
                has = FALSE;
            /* An in-situ row (profile --in-situ) is what the model answers with: the kernel
             * timed alone would not be used. */
            if (!has && !err)
                has = psim_cost_db_kernel_get_method(p->db, d, it->sig, "insitu", NULL, &err);
            if (err) {
                g_propagate_error(error, err);
                return FALSE;
            }
            if (has) {
                report->skipped++;
                done += rounds;
                kernel_progress(p, done, total, it->n, d);
                continue;
            }
        }
        slots[n_slots] = (Slot){.g = it->g, .n = it->n, .device = it->device};
        slot_item[n_slots++] = i;
    }
    /* One graph at a time: a kernel is timed among the kernels of its own graph, whose
     * working set (caches, TLBs, page tables) is the one a step of that graph has. Timed among
     * all six light models at once, resnet50's small nodes measured 20-35% slower than among
     * resnet50's alone, and than in its steps (docs/validation.md). */
    for (int32_t a = 0, b; a < n_slots; a = b) {
        for (b = a + 1; b < n_slots && slots[b].g == slots[a].g; b++)
            ;
        interleave(p, slots + a, b - a, &done, total);
    }
    if (!store_rows(p, slots, n_slots, items, slot_item, report, &n_warned, error))
        return FALSE;
    if (p->opts.links && p->db && !psim_profiler_links(p, report, error))
        return FALSE;
    if (p->opts.calibrate && p->db && !psim_profiler_calibrate(p, report, error))
        return FALSE;
    report->elapsed_ms = (psim_exec_now_us() - p->t0_us) / 1e3;
    return TRUE;
}

/* --- A profile spread over other work ---------------------------------------------------- */

struct PsimProfileSession {
    PsimProfiler *p;
    GArray *items; /* Item */
    Slot *slots;   /* slots[k] times items[k] */
    int32_t *slot_item;
    int32_t n_slots;
    Group *groups;
    int32_t n_groups;
    int32_t passes, done, total;
    int32_t n_warned;
    PsimProfileReport report;
};

void psim_profile_session_free(PsimProfileSession *s)
{
    if (!s)
        return;
    for (int32_t k = 0; k < s->n_groups; k++)
        group_finish(s->p, s->slots, &s->groups[k]);
    for (int32_t k = 0; k < s->n_slots; k++) {
        if (s->slots[k].samples)
            g_array_free(s->slots[k].samples, TRUE);
        g_clear_error(&s->slots[k].error);
    }
    g_array_free(s->items, TRUE);
    g_free(s->slots);
    g_free(s->slot_item);
    g_free(s->groups);
    s->p->quiet = FALSE;
    g_free(s);
}

PsimProfileSession *psim_profile_session_new(PsimProfiler *p, PsimGraph *g, GError **error)
{
    PsimProfileSession *s = g_new0(PsimProfileSession, 1);
    s->p = p;
    p->quiet = TRUE;
    s->report.n_devices = p->n_devices;
    s->items = g_array_new(FALSE, FALSE, sizeof(Item));
    g_array_set_clear_func(s->items, (GDestroyNotify)item_clear);
    /* The nodes it cannot time were named when the graph was first profiled. */
    collect_items(p, &g, 1, s->items, &s->report, FALSE, &s->n_warned);
    s->n_slots = (int32_t)s->items->len;
    s->slots = g_new0(Slot, s->n_slots + 1);
    s->slot_item = g_new0(int32_t, s->n_slots + 1);
    for (int32_t i = 0; i < s->n_slots; i++) {
        Item *it = &g_array_index(s->items, Item, i);
        s->slots[i] = (Slot){.g = it->g, .n = it->n, .device = it->device};
        s->slot_item[i] = i;
    }
    s->total = s->n_slots * p->opts.rounds;
    s->groups = g_new0(Group, p->n_devices + 1);
    for (int32_t dev = 0; dev < p->n_devices; dev++) {
        int32_t next = 0;
        Group *gr = &s->groups[s->n_groups++];
        group_setup(p, s->slots, s->n_slots, dev, &next, gr, &s->done, s->total);
        for (int32_t i = next; i < s->n_slots; i++)
            if (s->slots[i].device == dev && !s->slots[i].error) {
                const PsimDevice *d = psim_cluster_device(p->cluster, dev);
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                            "%s: the kernels of the graph need more memory on %s than a profile sets up at once",
                            psim_graph_name(g), d->short_name);
                psim_profile_session_free(s);
                return NULL;
            }
    }
    return s;
}

int32_t psim_profile_session_passes(PsimProfileSession *s, int32_t n)
{
    /* Device by device, as psim_profiler_run: a core kept busy through its passes (alternating
     * devices pass by pass left each core idle half the time, and the small kernels of the
     * built-in models then timed 10-20% slower than in a profile run). */
    int32_t ran = MAX(0, MIN(n, s->p->opts.rounds - s->passes));
    for (int32_t k = 0; k < s->n_groups; k++)
        for (int32_t r = s->passes; r < s->passes + ran; r++)
            group_pass(s->p, s->slots, &s->groups[k], r, &s->done, s->total);
    s->passes += ran;
    return ran;
}

gboolean psim_profile_session_finish(PsimProfileSession *s, PsimProfileReport *report, GError **error)
{
    psim_profile_session_passes(s, s->p->opts.rounds);
    for (int32_t k = 0; k < s->n_groups; k++)
        group_finish(s->p, s->slots, &s->groups[k]);
    s->n_groups = 0;
    gboolean ok = store_rows(s->p, s->slots, s->n_slots, s->items, s->slot_item, &s->report, &s->n_warned, error);
    if (report)
        *report = s->report;
    psim_profile_session_free(s);
    return ok;
}
