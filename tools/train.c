/* placesim train: trains a model for real. The training step is a graph (graph/train.c:
 * forward, gradients, optimizer ops, variables), placed on a cluster and run by a plan session;
 * the input pipeline reads IDX files (fashion-mnist by default) and batches them in a seeded
 * shuffle; checkpoints are Save ops written atomically; with --max-restarts the job runs in a
 * child process and is restarted from the newest whole checkpoint when it dies (the
 * whitepaper's abort-and-restart). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "placesim/exec.h"
#include "placesim/formats.h"
#include "placesim/kernels.h"
#include "placesim/placer.h"
#include "tools/cli.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define CONTAINER "train"
/* Batches the input pipeline prepares ahead of the steps. */
#define QUEUE_BATCHES 8

typedef struct {
    PsimTensor *images; /* uint8 [N, H, W] */
    PsimTensor *labels; /* uint8 [N] */
} Split;

typedef struct {
    /* Flags. */
    char *data, *optimizer, *cluster_spec, *algo, *ckpt_dir, *save_vars;
    char *epochs_s, *batch_s, *lr_s, *momentum_s, *wd_s, *steps_s, *seed_s, *every_s, *restarts_s;
    char *replicas_s, *ps_s, *caching, *schedule, *inputs;
    PsimVariableReads reads;
    gboolean resume, json, async;
    int64_t epochs, batch, steps, seed, every, max_restarts, replicas, n_ps;
    double lr, momentum, weight_decay;
    const char *model;
    /* State. */
    Split train, test;
    int64_t example_elems;
    /* A pixel p goes into the graph as p * in_scale + in_bias: (p / 255 - mean) / deviation of
     * the training images' pixels (--inputs standard), or p / 255 (--inputs unit). */
    float in_scale, in_bias;
    PsimGraph *g;
    PsimTrainInfo info;
    PsimCluster *cluster;
    PsimPlanSession *session;
    /* Data parallelism: the workers' and the parameter servers' device names (the cluster's). */
    const char **workers, **ps;
    /* --async: replica r >= 1's own step graph, its train info and its session ([r - 1]). */
    PsimGraph **more_g;
    PsimTrainInfo *more_info;
    PsimPlanSession **more_session;
    /* The last training step's transfers per pair of devices (--json "links"). */
    PsimLinkCount *links;
    int32_t n_links;
    char **link_devices; /* the plan's device names (g_strfreev) */
    char *input_name;
    int64_t epoch, cursor, global_step; /* the input position and the steps done */
    JsonBuilder *epochs_json;
    double last_accuracy;
    int64_t restarts;
    gboolean warm; /* a step has run in this process */
} Train;

static void split_clear(Split *s)
{
    g_clear_pointer(&s->images, psim_tensor_unref);
    g_clear_pointer(&s->labels, psim_tensor_unref);
}

/* Batches of an epoch the input pipeline makes: whole steps of the replicas only. */
static int64_t epoch_batches(const Train *t)
{
    int64_t b = t->train.labels->n_elems / t->batch;
    return b - b % t->replicas;
}

/* --- Data --------------------------------------------------------------------------------- */

static char *data_file(const char *dir, const char *stem)
{
    g_autofree char *plain = g_build_filename(dir, stem, NULL);
    if (g_file_test(plain, G_FILE_TEST_EXISTS))
        return g_steal_pointer(&plain);
    return g_strconcat(plain, ".gz", NULL);
}

static gboolean split_load(Split *s, const char *dir, const char *prefix, GError **error)
{
    g_autofree char *is = g_strconcat(prefix, "-images-idx3-ubyte", NULL),
                    *ls = g_strconcat(prefix, "-labels-idx1-ubyte", NULL);
    g_autofree char *ip = data_file(dir, is), *lp = data_file(dir, ls);
    s->images = psim_idx_load(ip, error);
    s->labels = s->images ? psim_idx_load(lp, error) : NULL;
    if (!s->labels)
        return FALSE;
    if (s->images->rank < 2 || s->labels->rank != 1 || s->images->dims[0] != s->labels->dims[0] ||
        s->labels->dims[0] < 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: %lld labels for %lld images (or not images of rank >= 2)", lp,
                    (long long)s->labels->n_elems, (long long)s->images->dims[0]);
        return FALSE;
    }
    const guint8 *l = s->labels->data;
    for (int64_t i = 0; i < s->labels->n_elems; i++)
        if (l[i] > 9) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: label %lld is %d (not 0-9)", lp,
                        (long long)i, l[i]);
            return FALSE;
        }
    return TRUE;
}

static gboolean data_load(Train *t, GError **error)
{
    const char *dir = !t->data || !strcmp(t->data, "fashion-mnist") ? DEFAULT_DATA : t->data;
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: no such data folder (install dataset-fashion-mnist, or give --data DIR "
                    "with train-/t10k- IDX files)",
                    dir);
        return FALSE;
    }
    if (!split_load(&t->train, dir, "train", error) || !split_load(&t->test, dir, "t10k", error))
        return FALSE;
    t->example_elems = t->train.images->n_elems / t->train.images->dims[0];
    if (t->test.images->n_elems / t->test.images->dims[0] != t->example_elems) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: test images differ in size from "
                                                         "training images",
                    dir);
        return FALSE;
    }
    return TRUE;
}

/* The order of epoch e's examples: a Fisher-Yates shuffle seeded by the seed and the epoch, so
 * a resumed run sees the same batches as an uninterrupted one. */
static int64_t *epoch_order(int64_t n, int64_t seed, int64_t epoch)
{
    int64_t *p = g_new(int64_t, n);
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    GRand *r = g_rand_new_with_seed((guint32)(seed * 1000003 + epoch));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)g_rand_int_range(r, 0, (gint32)(i + 1));
        int64_t x = p[i];
        p[i] = p[j];
        p[j] = x;
    }
    g_rand_free(r);
    return p;
}

/* The mean and the standard deviation of the training images' pixels over 255 (the
 * statistics an input standardisation takes from the data, as torchvision's Normalize takes
 * them from the training set), and the affine map of a pixel into the graph. */
static void input_scaling(Train *t)
{
    t->in_scale = 1.0f / 255.0f;
    t->in_bias = 0;
    if (!strcmp(t->inputs, "unit") || t->train.images->n_elems == 0)
        return;
    const guint8 *p = t->train.images->data;
    int64_t n = t->train.images->n_elems;
    uint64_t hist[256] = {0};
    for (int64_t i = 0; i < n; i++)
        hist[p[i]]++;
    double s = 0, ss = 0;
    for (int v = 0; v < 256; v++) {
        s += (double)hist[v] * v;
        ss += (double)hist[v] * v * v;
    }
    double mean = s / (double)n / 255, var = ss / (double)n - (s / (double)n) * (s / (double)n);
    double dev = var > 0 ? sqrt(var) / 255 : 1;
    t->in_scale = (float)(1 / (255 * dev));
    t->in_bias = (float)(-mean / dev);
}

/* Batch of examples idx[0..n) (n <= batch; the rest zeros) as the graph's input and labels. */
static void batch_fill(const Train *t, const Split *s, const int64_t *idx, int64_t n, int64_t elems,
                       PsimTensor *x, PsimTensor *y)
{
    float *xd = x->data;
    int64_t *yd = y->data;
    const guint8 *img = s->images->data, *lab = s->labels->data;
    memset(xd, 0, x->nbytes);
    memset(yd, 0, y->nbytes);
    for (int64_t b = 0; b < n; b++) {
        const guint8 *src = img + idx[b] * elems;
        for (int64_t i = 0; i < elems; i++)
            xd[b * elems + i] = (float)src[i] * t->in_scale + t->in_bias;
        yd[b] = lab[idx[b]];
    }
}

/* --- The model ---------------------------------------------------------------------------- */

static gboolean is_builtin(const char *m)
{
    if (g_str_has_prefix(m, "zoo:"))
        m += 4;
    return !strcmp(m, "mlp") || !strcmp(m, "cnn");
}

/* --lr-schedule cosine: the learning rate reaches 0 at the last step of --epochs (the global
 * step counts a synchronous step of the replicas once, an asynchronous replica's step each). */
static int64_t lr_decay_steps(const Train *t)
{
    if (strcmp(t->schedule, "cosine"))
        return 0;
    return MAX(1, t->epochs * (epoch_batches(t) / (t->async ? 1 : t->replicas)));
}

static gboolean model_build(Train *t, GError **error)
{
    g_autoptr(PsimGraph) base = NULL;
    const PsimTensor *im = t->train.images;
    if (is_builtin(t->model) && !g_file_test(t->model, G_FILE_TEST_EXISTS)) {
        PsimZooShape sh = {t->batch, 1, im->rank >= 3 ? im->dims[1] : 1, im->dims[im->rank - 1], 10};
        base = psim_zoo_make_shaped(t->model + (g_str_has_prefix(t->model, "zoo:") ? 4 : 0), &sh,
                                    error);
    } else if (!g_file_test(t->model, G_FILE_TEST_EXISTS) &&
               psim_zoo_description(t->model + (g_str_has_prefix(t->model, "zoo:") ? 4 : 0))) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: %s is not an image classifier: train takes mlp, cnn or a model file",
                    t->model);
        return FALSE;
    } else {
        PsimImportOptions io = {.batch = t->batch};
        base = psim_cli_load_graph_with(t->model, &io, error);
    }
    if (!base)
        return FALSE;
    if (psim_graph_n_inputs(base) != 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: a model to train on images has one input (this one has %d)", t->model,
                    psim_graph_n_inputs(base));
        return FALSE;
    }
    const PsimNode *in = psim_graph_node(base, psim_graph_input(base, 0));
    const PsimOutput *o = &in->outputs[0];
    int64_t n = o->rank > 0 ? psim_shape_elems(o->rank, o->dims) : -1;
    if (o->dtype != PSIM_DTYPE_FLOAT32 || n < 0 || o->dims[0] != t->batch ||
        n != t->batch * t->example_elems) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: input '%s' is not float32 [%lld, ...] of %lld elements per example",
                    t->model, in->name, (long long)t->batch, (long long)t->example_elems);
        return FALSE;
    }
    t->input_name = g_strdup(in->name);
    PsimTrainSpec spec = {
        .optimizer = !strcmp(t->optimizer, "adam") ? PSIM_OPTIMIZER_ADAM : PSIM_OPTIMIZER_SGD,
        .lr = t->lr, .lr_decay_steps = lr_decay_steps(t), .momentum = t->momentum,
        .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8,
        .weight_decay = t->weight_decay, .container = CONTAINER, .checkpoint_ops = TRUE,
        .input_queue = QUEUE_BATCHES * t->replicas, .replicas = (int32_t)t->replicas,
        .variable_reads = t->reads};
    if (t->workers) {
        spec.worker_devices = t->workers;
        spec.ps_devices = t->ps;
        spec.n_ps = (int32_t)t->n_ps;
    }
    if (!t->async) {
        t->g = psim_graph_train_step(base, &spec, &t->info, error);
        return t->g != NULL;
    }
    /* Asynchronous: a step graph per replica (the model on its worker), all on the same
     * variables and input queue (by name, in the container). */
    spec.replicas = 1;
    spec.async_updates = TRUE;
    t->more_g = g_new0(PsimGraph *, t->replicas);
    t->more_info = g_new0(PsimTrainInfo, t->replicas);
    for (int64_t r = 0; r < t->replicas; r++) {
        spec.worker_devices = t->workers + r;
        PsimGraph *g = psim_graph_train_step(base, &spec, r ? &t->more_info[r - 1] : &t->info, error);
        if (!g)
            return FALSE;
        if (r)
            t->more_g[r - 1] = g;
        else
            t->g = g;
    }
    return TRUE;
}

/* --- Steps, evaluation, checkpoints ------------------------------------------------------- */

static PsimTensor *input_tensor(const Train *t, GError **error)
{
    g_autofree char *name = t->info.replicas > 1 ? g_strconcat("replica_0/", t->input_name, NULL)
                                            : g_strdup(t->input_name);
    const PsimNode *in = psim_graph_node_find(t->g, name);
    return psim_tensor_new(PSIM_DTYPE_FLOAT32, in->outputs[0].rank, in->outputs[0].dims, error);
}

static gboolean evaluate(Train *t, double *accuracy, GError **error)
{
    if (!t->info.scores) {
        *accuracy = NAN;
        return TRUE;
    }
    g_autoptr(PsimTensor) x = input_tensor(t, error);
    int64_t ld[1] = {t->batch};
    g_autoptr(PsimTensor) y = x ? psim_tensor_new(PSIM_DTYPE_INT64, 1, ld, error) : NULL;
    if (!y)
        return FALSE;
    int64_t n = t->test.labels->n_elems, correct = 0;
    g_autofree int64_t *idx = g_new(int64_t, t->batch);
    /* The test batches are fed in place of the queue's element (what the step reads). */
    g_autofree char *dq = g_strconcat(t->info.dequeue, ":0", NULL);
    const char *feed_names[1] = {dq};
    const char *fetches[1] = {t->info.scores};
    for (int64_t at = 0; at < n; at += t->batch) {
        int64_t m = MIN(t->batch, n - at);
        for (int64_t b = 0; b < m; b++)
            idx[b] = at + b;
        batch_fill(t, &t->test, idx, m, t->example_elems, x, y);
        PsimTensor *feeds[1] = {x}, *out[1] = {NULL};
        if (!psim_plan_session_run(t->session, 1, feed_names, feeds, 1, fetches, out, error))
            return FALSE;
        g_autoptr(PsimTensor) s = out[0];
        int64_t classes = s->n_elems / t->batch;
        const int64_t *yd = y->data;
        for (int64_t b = 0; b < m; b++) {
            int64_t best = 0;
            for (int64_t c = 1; c < classes; c++)
                if (psim_tensor_get_f64(s, b * classes + c) > psim_tensor_get_f64(s, b * classes + best))
                    best = c;
            correct += best == yd[b];
        }
    }
    *accuracy = (double)correct / (double)n;
    return TRUE;
}

static PsimTensor *int_scalar(int64_t v)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, NULL);
    ((int64_t *)t->data)[0] = v;
    return t;
}

static PsimTensor *string_scalar(const char *s)
{
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_STRING, 0, NULL, NULL);
    ((char **)t->data)[0] = g_strdup(s);
    return t;
}

static char *checkpoint_path(const Train *t, int64_t step)
{
    g_autofree char *base = g_strdup_printf("ckpt-%08lld.psck", (long long)step);
    return g_build_filename(t->ckpt_dir, base, NULL);
}

static gboolean checkpoint_save(Train *t, GError **error)
{
    g_autofree char *path = checkpoint_path(t, t->global_step);
    g_autoptr(PsimTensor) p = string_scalar(path);
    g_autoptr(PsimTensor) e = int_scalar(t->epoch);
    g_autoptr(PsimTensor) c = int_scalar(t->cursor);
    const char *names[3] = {"checkpoint/path", "checkpoint/epoch", "checkpoint/cursor"};
    PsimTensor *feeds[3] = {p, e, c};
    const char *fetches[1] = {"^checkpoint/Save"};
    return psim_plan_session_run(t->session, 3, names, feeds, 1, fetches, NULL, error);
}

static gint cmp_desc(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

/* Restores the newest whole checkpoint of --checkpoint-dir; partial or damaged ones are skipped
 * with a warning. *found FALSE when there is none. */
static gboolean checkpoint_restore(Train *t, gboolean *found, GError **error)
{
    *found = FALSE;
    g_autoptr(GDir) d = g_dir_open(t->ckpt_dir, 0, NULL);
    if (!d)
        return TRUE;
    g_autoptr(GPtrArray) files = g_ptr_array_new_with_free_func(g_free);
    const char *name;
    while ((name = g_dir_read_name(d))) {
        if (g_str_has_prefix(name, "ckpt-") && g_str_has_suffix(name, ".psck")) {
            g_ptr_array_add(files, g_strdup(name));
        } else if (g_str_has_prefix(name, "ckpt-") && strstr(name, ".psck.tmp.")) {
            /* A checkpoint whose writer died before its rename: never whole, so removed. */
            g_autofree char *tmp = g_build_filename(t->ckpt_dir, name, NULL);
            fprintf(stderr, "placesim: train: removing %s (a checkpoint never finished)\n", tmp);
            unlink(tmp);
        }
    }
    g_ptr_array_sort(files, cmp_desc);
    for (guint i = 0; i < files->len; i++) {
        g_autofree char *path = g_build_filename(t->ckpt_dir, g_ptr_array_index(files, i), NULL);
        int32_t n = 0;
        char **names = NULL;
        PsimTensor **ts = NULL;
        GError *err = NULL;
        if (!psim_checkpoint_read(path, &n, &names, &ts, &err)) {
            fprintf(stderr, "placesim: train: warning: skipping %s\n", err->message);
            g_error_free(err);
            continue;
        }
        for (int32_t k = 0; k < n; k++)
            psim_tensor_unref(ts[k]);
        g_free(ts);
        g_strfreev(names);
        g_autoptr(PsimTensor) p = string_scalar(path);
        const char *feed_names[1] = {"checkpoint/path"};
        PsimTensor *feeds[1] = {p};
        g_autofree char *fe = g_strdup_printf("checkpoint/Restore:%d", t->info.n_saved - 2);
        g_autofree char *fc = g_strdup_printf("checkpoint/Restore:%d", t->info.n_saved - 1);
        g_autofree char *fs = g_strdup_printf("%s:0", t->info.global_step);
        const char *fetches[4] = {fe, fc, "^checkpoint/restore_op", fs};
        PsimTensor *out[4] = {NULL};
        if (!psim_plan_session_run(t->session, 1, feed_names, feeds, 3, fetches, out, error))
            return FALSE;
        t->epoch = psim_tensor_get_i64(out[0], 0);
        t->cursor = psim_tensor_get_i64(out[1], 0);
        psim_tensor_unref(out[0]);
        psim_tensor_unref(out[1]);
        /* The step counter as restored (read by a run of its own, after the Assigns). */
        const char *step_fetch[1] = {fs};
        PsimTensor *so[1] = {NULL};
        if (!psim_plan_session_run(t->session, 0, NULL, NULL, 1, step_fetch, so, error))
            return FALSE;
        t->global_step = psim_tensor_get_i64(so[0], 0);
        psim_tensor_unref(so[0]);
        if (t->cursor % t->replicas != 0 || t->cursor > epoch_batches(t)) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "train: %s: its input position (batch %lld of the epoch) is not a step of "
                        "%lld replicas: resume with the --replicas it was written with",
                        path, (long long)t->cursor, (long long)t->replicas);
            return FALSE;
        }
        fprintf(stderr, "placesim: train: resumed from %s (step %lld, epoch %lld)\n", path,
                (long long)t->global_step, (long long)t->epoch + 1);
        *found = TRUE;
        return TRUE;
    }
    return TRUE;
}

static gboolean save_variables(const char *dir, GError **error)
{
    if (g_mkdir_with_parents(dir, 0755) != 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", dir, g_strerror(errno));
        return FALSE;
    }
    g_auto(GStrv) names = psim_container_names(CONTAINER);
    for (char **n = names; *n; n++) {
        g_autoptr(PsimTensor) v = psim_variable_read(psim_variable_get(CONTAINER, *n, FALSE));
        if (!v)
            continue;
        g_autofree char *file = g_strdelimit(g_strconcat(*n, ".pb", NULL), "/", '_');
        g_autofree char *path = g_build_filename(dir, file, NULL);
        if (!psim_tensor_save_pb(v, *n, path, error))
            return FALSE;
    }
    return TRUE;
}

/* --- The input pipeline: a thread running the feeder graph's enqueue ---------------------- */

typedef struct {
    Train *t;
    PsimGraph *g;
    /* An unpinned host worker: the pipeline must not take a device's core from the steps. */
    PsimWorker *w;
    PsimExecutor *enqueue, *close;
    GThread *thread;
    int64_t epoch, cursor, remaining; /* where it starts; batches to make (-1: all epochs) */
    gint stop;
    GError *error;
} Feeder;

static gpointer feeder_main(gpointer p)
{
    Feeder *f = p;
    Train *t = f->t;
    int64_t n = t->train.labels->n_elems, per_epoch = epoch_batches(t), ld[1] = {t->batch};
    const PsimNode *in = psim_graph_node_find(f->g, "input/component_0");
    GError *err = NULL;
    for (int64_t e = f->epoch; e < t->epochs && f->remaining != 0; e++, f->cursor = 0) {
        g_autofree int64_t *order = epoch_order(n, t->seed, e);
        for (; f->cursor < per_epoch && f->remaining != 0; f->cursor++, f->remaining--) {
            /* Fresh tensors each time: the queue keeps the ones it holds. */
            g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, in->outputs[0].rank,
                                                      in->outputs[0].dims, NULL);
            g_autoptr(PsimTensor) y = psim_tensor_new(PSIM_DTYPE_INT64, 1, ld, NULL);
            batch_fill(t, &t->train, order + f->cursor * t->batch, t->batch, t->example_elems, x, y);
            PsimTensor *feeds[2] = {x, y};
            if (!psim_executor_run(f->enqueue, feeds, NULL, &err)) {
                if (g_atomic_int_get(&f->stop))
                    g_clear_error(&err); /* the steps are over: the queue was cancelled */
                else
                    f->error = err;
                return NULL;
            }
        }
    }
    if (!psim_executor_run(f->close, NULL, NULL, &err))
        f->error = err;
    return NULL;
}

static Feeder *feeder_start(Train *t, GError **error)
{
    Feeder *f = g_new0(Feeder, 1);
    f->t = t;
    f->epoch = t->epoch;
    f->cursor = t->cursor;
    /* A synchronous step takes a batch per replica, an asynchronous one a batch. */
    f->remaining = t->steps > 0 ? MAX(t->steps - t->global_step, 0) * (t->async ? 1 : t->replicas) : -1;
    const char *names[2] = {"input/component_0", "input/component_1"};
    const char *enqueue[1] = {"^input/enqueue"}, *close[1] = {"^input/close"};
    f->g = psim_graph_train_feeder(t->g, error);
    f->w = f->g ? psim_worker_new(NULL, error) : NULL;
    f->enqueue = f->w ? psim_executor_new(f->g, f->w, names, 2, enqueue, 1, NULL, error) : NULL;
    f->close = f->enqueue ? psim_executor_new(f->g, f->w, NULL, 0, close, 1, NULL, error) : NULL;
    if (!f->close) {
        psim_executor_free(f->enqueue);
        psim_worker_free(f->w);
        psim_graph_free(f->g);
        g_free(f);
        return NULL;
    }
    f->thread = g_thread_new("input", feeder_main, f);
    return f;
}

/* Stops the pipeline (cancelling an enqueue waiting for room) and returns its error, if any. */
static gboolean feeder_stop(Feeder *f, GError **error)
{
    if (!f)
        return TRUE;
    g_atomic_int_set(&f->stop, 1);
    PsimQueue *q = psim_queue_get(CONTAINER, "input", NULL, NULL);
    if (q)
        psim_queue_close(q, TRUE);
    g_thread_join(f->thread);
    gboolean ok = f->error == NULL;
    if (!ok)
        g_propagate_error(error, f->error);
    psim_executor_free(f->enqueue);
    psim_executor_free(f->close);
    psim_worker_free(f->w);
    psim_graph_free(f->g);
    g_free(f);
    return ok;
}

/* --- The loop ----------------------------------------------------------------------------- */

static void progress(const Train *t, int64_t done, int64_t per_epoch, double loss, double ex_s)
{
    if (t->json && !psim_cli_stderr_tty())
        return;
    if (psim_cli_stderr_tty()) {
        int w = 24, fill = per_epoch ? (int)(w * done / per_epoch) : w;
        fprintf(stderr, "\rtrain: epoch %lld/%lld [%.*s%*s] %lld/%lld loss %.4f %.0f ex/s ",
                (long long)t->epoch + 1, (long long)t->epochs, fill, "########################",
                w - fill, "", (long long)done, (long long)per_epoch, loss, ex_s);
    }
}

/* Keeps the step just run's transfers per pair of devices. */
static void links_note(Train *t)
{
    PsimPlanExec *px = psim_plan_session_last_exec(t->session);
    const PsimPlan *p = psim_plan_session_last_plan(t->session);
    if (!px || !p)
        return;
    g_free(t->links);
    t->n_links = psim_plan_exec_link_counts(px, &t->links);
    if (!t->link_devices) {
        t->link_devices = g_new0(char *, p->n_devices + 1);
        for (int32_t d = 0; d < p->n_devices; d++)
            t->link_devices[d] = g_strdup(p->devices[d]);
    }
}

static gboolean train_loop(Train *t, GError **error)
{
    /* per_epoch and the cursor count batches of --batch; a step takes one per replica. */
    int64_t n = t->train.labels->n_elems, per_epoch = epoch_batches(t);
    if (per_epoch < 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "train: --batch %lld x %lld replicas "
                                                         "exceeds the %lld training examples",
                    (long long)t->batch, (long long)t->replicas, (long long)n);
        return FALSE;
    }
    if (t->info.n_components != 2 || strcmp(t->info.components[0], t->input_name) ||
        strcmp(t->info.components[1], "labels")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: the training graph's inputs are not "
                                                         "the images and their labels",
                    t->model);
        return FALSE;
    }
    g_autofree char *tgt = g_strconcat("^", t->info.train_op, NULL);
    const char *fetches[2] = {t->info.loss, tgt};
    gboolean stop = FALSE;
    for (; t->epoch < t->epochs && !stop; t->epoch++, t->cursor = 0) {
        /* Examples/s over the epoch's steps, the process's first step left out (it prepares
         * the plan: placement, partitions, kernels). */
        double loss_sum = 0, t0 = (double)g_get_monotonic_time();
        int64_t steps = 0, timed = 0;
        while (t->cursor < per_epoch) {
            if (t->steps > 0 && t->global_step >= t->steps) {
                stop = TRUE;
                break;
            }
            if (psim_fault_due("step", t->global_step + 1))
                psim_fault_kill("step", t->global_step + 1);
            /* The batch comes from the input pipeline's queue (input/dequeue in the step). */
            PsimTensor *out[2] = {NULL, NULL};
            if (!psim_plan_session_run(t->session, 0, NULL, NULL, 2, fetches, out, error))
                return FALSE;
            double l = psim_tensor_get_f64(out[0], 0);
            psim_tensor_unref(out[0]);
            if (!isfinite(l)) {
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                            "train: the loss is %g at step %lld (lower --lr)", l,
                            (long long)t->global_step + 1);
                return FALSE;
            }
            loss_sum += l;
            steps++;
            t->cursor += t->replicas;
            t->global_step++;
            if (!t->warm) {
                t->warm = TRUE;
                t0 = (double)g_get_monotonic_time();
            } else {
                timed++;
            }
            double ex_s = (double)(timed * t->batch * t->replicas) / (((double)g_get_monotonic_time() - t0) / 1e6);
            progress(t, t->cursor, per_epoch, loss_sum / (double)steps, ex_s);
            if (t->ckpt_dir && t->every > 0 && t->global_step % t->every == 0) {
                /* The position saved is the next batch's (this epoch, or the next one's start). */
                int64_t e = t->epoch, c = t->cursor;
                if (t->cursor == per_epoch) {
                    t->epoch++;
                    t->cursor = 0;
                }
                gboolean ok = checkpoint_save(t, error);
                t->epoch = e;
                t->cursor = c;
                if (!ok)
                    return FALSE;
            }
        }
        if (steps == 0)
            continue;
        links_note(t); /* the last training step's (the evaluation below runs other steps) */
        double secs = ((double)g_get_monotonic_time() - t0) / 1e6, acc;
        double ex_s = timed > 0 ? (double)(timed * t->batch * t->replicas) / secs : NAN;
        if (!evaluate(t, &acc, error))
            return FALSE;
        t->last_accuracy = acc;
        if (psim_cli_stderr_tty())
            fputc('\n', stderr);
        if (!t->json || psim_cli_stderr_tty())
            fprintf(stderr, "train: epoch %lld: loss %.4f, test accuracy %.2f%%, %.0f examples/s%s\n",
                    (long long)t->epoch + 1, loss_sum / (double)steps, 100 * acc, ex_s,
                    t->cursor < per_epoch ? " (stopped early: --steps)" : "");
        json_builder_begin_object(t->epochs_json);
        psim_cli_json_int(t->epochs_json, "epoch", t->epoch + 1);
        psim_cli_json_double(t->epochs_json, "loss", loss_sum / (double)steps);
        psim_cli_json_double(t->epochs_json, "test_accuracy", acc);
        psim_cli_json_double(t->epochs_json, "examples_per_s", ex_s);
        psim_cli_json_int(t->epochs_json, "steps", steps);
        json_builder_end_object(t->epochs_json);
    }
    return TRUE;
}

/* --async: each replica's thread runs its own session's steps, claiming the epoch's batches
 * one at a time, until the epoch (or --steps) is done; nobody waits for another replica. */
typedef struct {
    Train *t;
    PsimPlanSession *session;
    const char *loss, *train_op;
    int64_t per_epoch, limit; /* batches this epoch; steps left in all (-1: no limit) */
    gint *claimed;
    GMutex *lock;
    double *loss_sum;
    int64_t *steps;
    int64_t mine; /* steps this replica ran */
    GError *error;
} AsyncReplica;

static gpointer async_replica_main(gpointer p)
{
    AsyncReplica *a = p;
    g_autofree char *tgt = g_strconcat("^", a->train_op, NULL);
    const char *fetches[2] = {a->loss, tgt};
    for (;;) {
        gint k = g_atomic_int_add(a->claimed, 1);
        if (k >= a->per_epoch || (a->limit >= 0 && k >= a->limit))
            break;
        PsimTensor *out[2] = {NULL, NULL};
        if (!psim_plan_session_run(a->session, 0, NULL, NULL, 2, fetches, out, &a->error))
            break;
        double l = psim_tensor_get_f64(out[0], 0);
        psim_tensor_unref(out[0]);
        g_mutex_lock(a->lock);
        *a->loss_sum += l;
        (*a->steps)++;
        g_mutex_unlock(a->lock);
        a->mine++;
        if (!isfinite(l)) {
            g_set_error(&a->error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "train: the loss is %g (lower --lr)", l);
            break;
        }
    }
    return NULL;
}

static gboolean train_loop_async(Train *t, GError **error)
{
    int64_t per_epoch = epoch_batches(t);
    if (per_epoch < 1) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "train: --batch %lld exceeds the %lld "
                                                         "training examples",
                    (long long)t->batch, (long long)t->train.labels->n_elems);
        return FALSE;
    }
    for (; t->epoch < t->epochs; t->epoch++, t->cursor = 0) {
        int64_t left = t->steps > 0 ? t->steps - t->global_step : -1;
        if (left == 0)
            break;
        gint claimed = 0;
        GMutex lock;
        g_mutex_init(&lock);
        double loss_sum = 0, t0 = (double)g_get_monotonic_time();
        int64_t steps = 0;
        g_autofree AsyncReplica *a = g_new0(AsyncReplica, t->replicas);
        g_autofree GThread **th = g_new0(GThread *, t->replicas);
        for (int64_t r = 0; r < t->replicas; r++) {
            const PsimTrainInfo *info = r ? &t->more_info[r - 1] : &t->info;
            a[r] = (AsyncReplica){t, r ? t->more_session[r - 1] : t->session, info->loss,
                                  info->train_op, per_epoch, left, &claimed, &lock, &loss_sum,
                                  &steps, 0, NULL};
            th[r] = g_thread_new("replica", async_replica_main, &a[r]);
        }
        GError *first = NULL;
        for (int64_t r = 0; r < t->replicas; r++) {
            g_thread_join(th[r]);
            if (a[r].error && !first)
                first = a[r].error;
            else if (a[r].error)
                g_error_free(a[r].error);
        }
        g_mutex_clear(&lock);
        if (first) {
            g_propagate_error(error, first);
            return FALSE;
        }
        double secs = ((double)g_get_monotonic_time() - t0) / 1e6, acc;
        t->global_step += steps;
        t->cursor = steps;
        if (!evaluate(t, &acc, error))
            return FALSE;
        t->last_accuracy = acc;
        double ex_s = (double)(steps * t->batch) / secs;
        if (!t->json || psim_cli_stderr_tty())
            fprintf(stderr, "train: epoch %lld: loss %.4f, test accuracy %.2f%%, %.0f examples/s "
                            "(%lld asynchronous replicas)%s\n",
                    (long long)t->epoch + 1, loss_sum / (double)MAX(steps, 1), 100 * acc, ex_s,
                    (long long)t->replicas, steps < per_epoch ? " (stopped early: --steps)" : "");
        json_builder_begin_object(t->epochs_json);
        psim_cli_json_int(t->epochs_json, "epoch", t->epoch + 1);
        psim_cli_json_double(t->epochs_json, "loss", loss_sum / (double)MAX(steps, 1));
        psim_cli_json_double(t->epochs_json, "test_accuracy", acc);
        psim_cli_json_double(t->epochs_json, "examples_per_s", ex_s);
        psim_cli_json_int(t->epochs_json, "steps", steps);
        json_builder_set_member_name(t->epochs_json, "replica_steps");
        json_builder_begin_array(t->epochs_json);
        for (int64_t r = 0; r < t->replicas; r++)
            json_builder_add_int_value(t->epochs_json, a[r].mine);
        json_builder_end_array(t->epochs_json);
        json_builder_end_object(t->epochs_json);
    }
    return TRUE;
}

static gboolean options_check(Train *t, GError **error)
{
    if (!psim_cli_flag_int("--epochs", t->epochs_s, 1, 100000, &t->epochs, error) ||
        !psim_cli_flag_int("--batch", t->batch_s, 1, 65536, &t->batch, error) ||
        !psim_cli_flag_int("--steps", t->steps_s, 1, INT64_C(1) << 40, &t->steps, error) ||
        !psim_cli_flag_int("--seed", t->seed_s, 0, G_MAXINT32, &t->seed, error) ||
        !psim_cli_flag_int("--checkpoint-every", t->every_s, 1, INT64_C(1) << 40, &t->every, error) ||
        !psim_cli_flag_int("--max-restarts", t->restarts_s, 0, 1000, &t->max_restarts, error) ||
        !psim_cli_flag_int("--replicas", t->replicas_s, 1, 1024, &t->replicas, error) ||
        !psim_cli_flag_int("--ps", t->ps_s, 1, 1024, &t->n_ps, error) ||
        !psim_cli_caching_device(t->caching, &t->reads, error) ||
        !psim_cli_flag_double("--momentum", t->momentum_s, 0, 0.999999, &t->momentum, error) ||
        !psim_cli_flag_double("--weight-decay", t->wd_s, 0, 1, &t->weight_decay, error))
        return FALSE;
    if (strcmp(t->optimizer, "sgd") && strcmp(t->optimizer, "adam")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --optimizer '%s' is neither sgd nor adam", t->optimizer);
        return FALSE;
    }
    if (strcmp(t->schedule, "cosine") && strcmp(t->schedule, "constant")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --lr-schedule '%s' is neither cosine nor constant", t->schedule);
        return FALSE;
    }
    if (strcmp(t->inputs, "standard") && strcmp(t->inputs, "unit")) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --inputs '%s' is neither standard nor unit", t->inputs);
        return FALSE;
    }
    t->lr = !strcmp(t->optimizer, "adam") ? 0.001 : 0.01;
    if (!psim_cli_flag_double("--lr", t->lr_s, 1e-12, 100, &t->lr, error))
        return FALSE;
    if (t->caching && (t->replicas < 2 || t->async)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --caching-device needs synchronous --replicas N > 1");
        return FALSE;
    }
    if (t->async && (t->replicas < 2 || t->ckpt_dir)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --async needs --replicas N > 1 and takes no checkpoints (--checkpoint-dir)");
        return FALSE;
    }
    if ((t->resume || t->every_s || t->max_restarts > 0) && !t->ckpt_dir) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "train: --resume, --checkpoint-every and --max-restarts need --checkpoint-dir");
        return FALSE;
    }
    if (t->ckpt_dir && !t->every_s)
        t->every = 1000;
    if (t->ckpt_dir && g_mkdir_with_parents(t->ckpt_dir, 0755) != 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", t->ckpt_dir, g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

/* One run of the job (the whole of it without --max-restarts; a child's part with it). */
static int train_run(Train *t)
{
    GError *err = NULL;
    if (!data_load(t, &err))
        return psim_cli_fail(err);
    input_scaling(t);
    t->cluster = psim_cli_cluster(t->cluster_spec ? t->cluster_spec : "local:1", NULL, &err);
    if (!t->cluster ||
        ((t->replicas > 1 || t->ps_s) &&
         !psim_cli_replica_devices(t->cluster, t->replicas, t->n_ps, &t->workers, &t->ps, &err)) ||
        !model_build(t, &err))
        return psim_cli_fail(err);
    t->session = psim_plan_session_new(t->g, t->cluster, NULL, t->algo ? t->algo : "single", NULL,
                                       FALSE, &err);
    if (!t->session)
        return psim_cli_fail(err);
    if (t->async) {
        t->more_session = g_new0(PsimPlanSession *, t->replicas);
        for (int64_t r = 1; r < t->replicas; r++)
            if (!(t->more_session[r - 1] = psim_plan_session_new(t->more_g[r - 1], t->cluster, NULL,
                                                                 t->algo ? t->algo : "single",
                                                                 NULL, FALSE, &err)))
                return psim_cli_fail(err);
    }
    psim_container_reset(CONTAINER);
    if (t->resume) {
        gboolean found;
        if (!checkpoint_restore(t, &found, &err))
            return psim_cli_fail(err);
        if (!found)
            fprintf(stderr, "placesim: train: no checkpoint in %s: starting afresh\n", t->ckpt_dir);
    }
    t->epochs_json = json_builder_new();
    json_builder_begin_array(t->epochs_json);
    t->last_accuracy = NAN;
    Feeder *feeder = feeder_start(t, &err);
    if (!feeder)
        return psim_cli_fail(err);
    gboolean ok = t->async ? train_loop_async(t, &err) : train_loop(t, &err);
    GError *ferr = NULL;
    if (!feeder_stop(feeder, ok ? &err : &ferr) || !ok) {
        g_clear_error(&ferr);
        return psim_cli_fail(err);
    }
    json_builder_end_array(t->epochs_json);
    if (t->save_vars && !save_variables(t->save_vars, &err))
        return psim_cli_fail(err);
    if (t->json) {
        g_autoptr(JsonBuilder) b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "epochs");
        json_builder_add_value(b, json_builder_get_root(t->epochs_json));
        psim_cli_json_double(b, "test_accuracy", t->last_accuracy);
        psim_cli_json_int(b, "steps", t->global_step);
        psim_cli_json_int(b, "variables", t->info.n_variables);
        psim_cli_json_int(b, "replicas", t->replicas);
        /* What a user feeding the trained model must do to its pixels. */
        psim_cli_json_double(b, "input_scale", t->in_scale);
        psim_cli_json_double(b, "input_bias", t->in_bias);
        /* The last training step's transfers: messages, bytes and variable reads per link. */
        json_builder_set_member_name(b, "links");
        json_builder_begin_array(b);
        for (int32_t i = 0; i < t->n_links; i++) {
            const PsimLinkCount *l = &t->links[i];
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "from");
            json_builder_add_string_value(b, t->link_devices[l->src]);
            json_builder_set_member_name(b, "to");
            json_builder_add_string_value(b, t->link_devices[l->dst]);
            psim_cli_json_int(b, "messages", (int64_t)l->messages);
            psim_cli_json_int(b, "bytes", (int64_t)l->bytes);
            psim_cli_json_int(b, "variable_reads", (int64_t)l->variable_reads);
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        psim_cli_json_int(b, "restarts", t->restarts);
        json_builder_end_object(b);
        psim_cli_print_json(g_steal_pointer(&b));
    } else {
        printf("steps %lld, test accuracy %.2f%%\n", (long long)t->global_step,
               100 * t->last_accuracy);
    }
    return 0;
}

/* --max-restarts: the job runs in a child; when it dies (a signal, or exit status 1: a runtime
 * failure), it is started again from the newest checkpoint, up to R times. The fault injector
 * fires in the first run only. */
static int supervise(Train *t)
{
    for (int64_t r = 0;; r++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return psim_cli_fail(g_error_new(PSIM_ERROR, PSIM_ERROR_RUNTIME, "train: fork: %s",
                                             g_strerror(errno)));
        if (pid == 0) {
            if (r > 0) {
                g_unsetenv("PSIM_FAULT");
                t->resume = TRUE;
                t->restarts = r;
            }
            int rc = train_run(t);
            fflush(NULL); /* _exit does not flush stdio: the JSON would be lost in a pipe */
            _exit(rc);
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (WIFEXITED(status) && WEXITSTATUS(status) != 1)
            return WEXITSTATUS(status);
        if (r >= t->max_restarts) {
            fprintf(stderr, "placesim: train: the job died %s; no restarts left\n",
                    WIFSIGNALED(status) ? "by a signal" : "with exit status 1");
            return 1;
        }
        fprintf(stderr, "placesim: train: the job died (%s %d); restarting from the newest "
                        "checkpoint (restart %lld of %lld)\n",
                WIFSIGNALED(status) ? "signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), (long long)r + 1,
                (long long)t->max_restarts);
    }
}

int psim_cmd_train(int argc, char **argv)
{
    Train t = {.optimizer = NULL, .epochs = 1, .batch = 64, .seed = 42, .momentum = 0.9,
               .replicas = 1, .n_ps = 1};
    GOptionEntry entries[] = {
        {"data", 0, 0, G_OPTION_ARG_STRING, &t.data,
         "fashion-mnist (" DEFAULT_DATA ", the default) or a folder of IDX files "
         "(train-images-idx3-ubyte[.gz], train-labels-, t10k-images-, t10k-labels-)", "DIR"},
        {"epochs", 0, 0, G_OPTION_ARG_STRING, &t.epochs_s, "passes over the training set (default 1)", "E"},
        {"batch", 0, 0, G_OPTION_ARG_STRING, &t.batch_s, "examples per step and replica (default 64)", "B"},
        {"replicas", 0, 0, G_OPTION_ARG_STRING, &t.replicas_s,
         "synchronous data parallelism: N copies of the model, replica r on the cluster's device r, "
         "each on its own batch; the gradients' mean updates the variables once a step (default 1)", "N"},
        {"async", 0, 0, G_OPTION_ARG_NONE, &t.async,
         "with --replicas: asynchronous replicas, each running its own steps on the shared "
         "variables and applying its own updates (no checkpoints)", NULL},
        {"caching-device", 0, 0, G_OPTION_ARG_STRING, &t.caching,
         "with --replicas: none (the default: each op reading a variable reads it through on its own, "
         "as TensorFlow's reads without a caching_device) or worker (one read per variable and worker, "
         "on the worker, shared by its readers)", "WHERE"},
        {"ps", 0, 0, G_OPTION_ARG_STRING, &t.ps_s,
         "parameter servers: the variables round-robin on K devices, those after the replicas' or, "
         "when the cluster has no more, its first K (default 1)", "K"},
        {"optimizer", 0, 0, G_OPTION_ARG_STRING, &t.optimizer, "sgd (with momentum, the default) or adam", "NAME"},
        {"lr", 0, 0, G_OPTION_ARG_STRING, &t.lr_s, "learning rate (default 0.01 for sgd, 0.001 for adam)", "X"},
        {"lr-schedule", 0, 0, G_OPTION_ARG_STRING, &t.schedule,
         "cosine (the default: from --lr down to 0 at the end of --epochs, a half cosine over the "
         "global step) or constant", "NAME"},
        {"inputs", 0, 0, G_OPTION_ARG_STRING, &t.inputs,
         "standard (the default: pixels less the training images' mean pixel, over their standard "
         "deviation) or unit (pixels over 255)", "SCALE"},
        {"momentum", 0, 0, G_OPTION_ARG_STRING, &t.momentum_s, "sgd's momentum (default 0.9; 0: plain SGD)", "M"},
        {"weight-decay", 0, 0, G_OPTION_ARG_STRING, &t.wd_s, "L2 coefficient added to every gradient (default 0)", "W"},
        {"steps", 0, 0, G_OPTION_ARG_STRING, &t.steps_s, "stop once N steps are done in all", "N"},
        {"seed", 0, 0, G_OPTION_ARG_STRING, &t.seed_s, "seed of the shuffle (default 42)", "S"},
        {"cluster", 0, 0, G_OPTION_ARG_STRING, &t.cluster_spec, "devices to train on (default local:1)", "SPEC"},
        {"algo", 0, 0, G_OPTION_ARG_STRING, &t.algo, "placement algorithm (default single)", "NAME"},
        {"checkpoint-dir", 0, 0, G_OPTION_ARG_FILENAME, &t.ckpt_dir, "folder of checkpoints (ckpt-STEP.psck)", "DIR"},
        {"checkpoint-every", 0, 0, G_OPTION_ARG_STRING, &t.every_s, "write a checkpoint every K steps (default 1000)", "K"},
        {"resume", 0, 0, G_OPTION_ARG_NONE, &t.resume, "start from the newest whole checkpoint of --checkpoint-dir", NULL},
        {"max-restarts", 0, 0, G_OPTION_ARG_STRING, &t.restarts_s,
         "run the job in a child process and restart it from the newest checkpoint when it dies, up to R times", "R"},
        {"save-variables", 0, 0, G_OPTION_ARG_FILENAME, &t.save_vars,
         "at the end, write every variable as DIR/NAME.pb (ONNX TensorProto; '/' in NAME becomes '_')", "DIR"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &t.json, "print the figures as one JSON object", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("MODEL");
    g_option_context_set_summary(
        ctx, "Trains MODEL for real: mlp or cnn (built in, shaped to the data) or an ONNX model whose "
             "one input takes a batch of the data's images; the step is a graph (forward, gradients, "
             "optimizer ops on variables) placed on --cluster by --algo.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!psim_cli_parse(ctx, &argc, &argv, "train"))
        return 2;
    if (argc != 2)
        return psim_cli_usage("train", "needs one MODEL (mlp, cnn or a model file)");
    t.model = argv[1];
    if (!t.optimizer)
        t.optimizer = g_strdup("sgd");
    if (!t.schedule)
        t.schedule = g_strdup("cosine");
    if (!t.inputs)
        t.inputs = g_strdup("standard");
    GError *err = NULL;
    int rc;
    if (!options_check(&t, &err))
        rc = psim_cli_fail(err);
    else
        rc = t.max_restarts > 0 ? supervise(&t) : train_run(&t);
    split_clear(&t.train);
    split_clear(&t.test);
    psim_plan_session_free(t.session);
    for (int64_t r = 1; r < t.replicas; r++) {
        if (t.more_session)
            psim_plan_session_free(t.more_session[r - 1]);
        if (t.more_g)
            psim_graph_free(t.more_g[r - 1]);
        if (t.more_info)
            psim_train_info_clear(&t.more_info[r - 1]);
    }
    g_free(t.more_session);
    g_free(t.links);
    g_strfreev(t.link_devices);
    g_free(t.more_g);
    g_free(t.more_info);
    psim_cluster_free(t.cluster);
    psim_train_info_clear(&t.info);
    psim_graph_free(t.g);
    if (t.epochs_json)
        g_object_unref(t.epochs_json);
    g_free(t.input_name);
    g_free(t.data);
    g_free(t.optimizer);
    g_free(t.schedule);
    g_free(t.inputs);
    g_free(t.cluster_spec);
    g_free(t.algo);
    g_free(t.ckpt_dir);
    g_free(t.save_vars);
    g_free(t.epochs_s);
    g_free(t.batch_s);
    g_free(t.lr_s);
    g_free(t.momentum_s);
    g_free(t.wd_s);
    g_free(t.steps_s);
    g_free(t.seed_s);
    g_free(t.every_s);
    g_free(t.restarts_s);
    g_free(t.replicas_s);
    g_free(t.ps_s);
    g_free(t.caching);
    g_free(t.workers);
    g_free(t.ps);
    return rc;
}
