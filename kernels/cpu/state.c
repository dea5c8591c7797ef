/* Kernels of state: Variable/VariableV2 (read a variable of a container, initialising it from
 * its `value` attribute on first use), Assign/AssignAdd/AssignSub (replace its tensor), and
 * Save/Restore (checkpoint files, graph/checkpoint.c). Nothing here copies a variable: a read
 * is a reference, an assignment swaps in the tensor computed by the step (kernels/state.c). */
#include "cpu-private.h"

/* The variable a Variable node names: attrs container and shared_name (default: its name). */
static PsimVariable *node_variable(const PsimNode *v)
{
    const char *name = psim_node_attr_string(v, "shared_name", "");
    return psim_variable_get(psim_node_attr_string(v, "container", ""), *name ? name : v->name,
                             TRUE);
}

static PsimTensor *init_if_unset(const PsimTensor *cur, gpointer init, GError **error)
{
    (void)error;
    return psim_tensor_ref(cur ? (PsimTensor *)cur : init);
}

static gboolean run_variable(PsimKernelCtx *ctx, GError **error)
{
    const PsimNode *n = ctx->node;
    PsimVariable *var = node_variable(n);
    PsimTensor *t = psim_variable_read(var);
    if (!t) {
        const PsimAttr *a = psim_node_attr(n, "value");
        if (!a || a->type != PSIM_ATTR_TENSOR || !a->v.t) {
            KERR(ctx, error, "variable is read before it was assigned (no initial value)");
            return FALSE;
        }
        if (a->v.t->device >= 0 || a->v.t->dtype == PSIM_DTYPE_STRING) {
            KERR(ctx, error, "initial value must be a numeric host tensor");
            return FALSE;
        }
        /* Under the variable's lock, and only if still unset: another session (asynchronous
         * replicas) may have initialised it, and updated it, since the read above. */
        if (!psim_variable_update(var, init_if_unset, a->v.t, error))
            return FALSE;
        t = psim_variable_read(var);
    }
    PsimDType dt = n->n_outputs > 0 ? n->outputs[0].dtype : PSIM_DTYPE_UNDEFINED;
    if (dt != PSIM_DTYPE_UNDEFINED && dt != t->dtype) {
        KERR(ctx, error, "variable holds %s where the node declares %s", psim_dtype_name(t->dtype),
             psim_dtype_name(dt));
        psim_tensor_unref(t);
        return FALSE;
    }
    ctx->outputs[0] = t;
    return TRUE;
}

/* The variable that input 0 of an Assign-like node refers to; it must come straight from the
 * Variable node (the placer colocates them), not through a Recv or another op. */
static PsimVariable *assign_target(PsimKernelCtx *ctx, GError **error)
{
    const PsimNode *n = ctx->node;
    if (n->n_inputs < 2 || n->inputs[0].node < 0) {
        KERR(ctx, error, "needs a variable (input 0) and a value (input 1)");
        return NULL;
    }
    const PsimNode *src = psim_graph_node(ctx->graph, n->inputs[0].node);
    if (!psim_op_is_variable(src->op)) {
        KERR(ctx, error, "input 0 comes from '%s' (%s), not from a Variable on this device",
             src->name, src->op);
        return NULL;
    }
    return node_variable(src);
}

static gboolean run_assign(PsimKernelCtx *ctx, GError **error)
{
    PsimVariable *var = assign_target(ctx, error);
    if (!var)
        return FALSE;
    PsimTensor *cur = ctx->inputs[0], *val = ctx->inputs[1];
    if (!val) {
        KERR(ctx, error, "has no value to assign");
        return FALSE;
    }
    if (cur && psim_node_attr_int(ctx->node, "validate_shape", 1) && !psim__cpu_same_shape(cur, val)) {
        KERR(ctx, error, "assigns a value of another dtype or shape than the variable's");
        return FALSE;
    }
    psim_variable_assign(var, val);
    ctx->outputs[0] = psim_tensor_ref(val);
    return TRUE;
}

/* AssignAdd / AssignSub: the sum or difference with the variable's value at the time the kernel
 * runs (not the step's read of it: another session may have updated it since), computed and
 * assigned under the variable's lock, so that concurrent updates (asynchronous replicas) all
 * land. The new value is the output. */
typedef struct {
    PsimKernelCtx *ctx;
    const PsimTensor *d;
    gboolean sub;
} AssignUpdate;

static PsimTensor *assign_update(const PsimTensor *cur, gpointer data, GError **error)
{
    AssignUpdate *u = data;
    PsimKernelCtx *ctx = u->ctx;
    const PsimTensor *d = u->d;
    if (!cur)
        cur = ctx->inputs[0];
    if (!cur || !psim__cpu_same_shape(cur, d)) {
        KERR(ctx, error, "needs a value of the variable's dtype and shape");
        return NULL;
    }
    PsimTensor *out = psim__cpu_out(ctx, 0, cur->dtype, cur->rank, cur->dims, error);
    if (!out)
        return NULL;
    int64_t n = cur->n_elems;
    switch (cur->dtype) {
#define LOOP(T)                                                                                    \
    {                                                                                              \
        const T *a = cur->data, *b = d->data;                                                      \
        T *y = out->data;                                                                          \
        for (int64_t i = 0; i < n; i++)                                                            \
            y[i] = u->sub ? (T)(a[i] - b[i]) : (T)(a[i] + b[i]);                                   \
        break;                                                                                     \
    }
    case PSIM_DTYPE_FLOAT32: LOOP(float)
    case PSIM_DTYPE_FLOAT64: LOOP(double)
    case PSIM_DTYPE_INT32: LOOP(int32_t)
    case PSIM_DTYPE_INT64: LOOP(int64_t)
#undef LOOP
    default:
        KERR(ctx, error, "has no CPU kernel for %s", psim_dtype_name(cur->dtype));
        return NULL;
    }
    return psim_tensor_ref(out);
}

static gboolean run_assign_update(PsimKernelCtx *ctx, GError **error)
{
    PsimVariable *var = assign_target(ctx, error);
    if (!var)
        return FALSE;
    if (!ctx->inputs[1]) {
        KERR(ctx, error, "needs a value of the variable's dtype and shape");
        return FALSE;
    }
    AssignUpdate u = {ctx, ctx->inputs[1], !strcmp(ctx->node->op, "AssignSub")};
    return psim_variable_update(var, assign_update, &u, error);
}

static const char *filename_input(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *f = psim__cpu_in(ctx, 0);
    if (!f || f->dtype != PSIM_DTYPE_STRING || f->n_elems != 1 || !((char **)f->data)[0]) {
        KERR(ctx, error, "input 0 must be the file name (a string scalar)");
        return NULL;
    }
    return ((char **)f->data)[0];
}

static gboolean run_save(PsimKernelCtx *ctx, GError **error)
{
    const char *path = filename_input(ctx, error);
    if (!path)
        return FALSE;
    const char **names = NULL;
    const PsimAttr *a = psim_node_attr(ctx->node, "tensor_names");
    int32_t n = a && a->type == PSIM_ATTR_STRINGS ? a->n : 0;
    names = a && a->type == PSIM_ATTR_STRINGS ? a->v.strs : NULL;
    if (n != ctx->n_inputs - 1) {
        KERR(ctx, error, "has %d tensors to save but %d names (attribute tensor_names)",
             ctx->n_inputs - 1, n);
        return FALSE;
    }
    GError *err = NULL;
    if (!psim_checkpoint_write(path, n, names, ctx->inputs + 1, &err)) {
        KERR(ctx, error, "%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    return TRUE;
}

static gboolean run_restore(PsimKernelCtx *ctx, GError **error)
{
    const char *path = filename_input(ctx, error);
    if (!path)
        return FALSE;
    const PsimAttr *a = psim_node_attr(ctx->node, "tensor_names");
    int32_t want = a && a->type == PSIM_ATTR_STRINGS ? a->n : 0;
    if (want != ctx->n_outputs) {
        KERR(ctx, error, "has %d outputs but %d names (attribute tensor_names)", ctx->n_outputs,
             want);
        return FALSE;
    }
    int32_t n = 0;
    g_auto(GStrv) names = NULL;
    PsimTensor **ts = NULL;
    GError *err = NULL;
    if (!psim_checkpoint_read(path, &n, &names, &ts, &err)) {
        KERR(ctx, error, "%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    gboolean ok = TRUE;
    for (int32_t k = 0; k < want && ok; k++) {
        int32_t j = 0;
        while (j < n && strcmp(names[j], a->v.strs[k]))
            j++;
        if (j == n) {
            KERR(ctx, error, "%s has no tensor '%s'", path, a->v.strs[k]);
            ok = FALSE;
        } else if (ctx->node->outputs[k].dtype != PSIM_DTYPE_UNDEFINED &&
                   ctx->node->outputs[k].dtype != ts[j]->dtype) {
            KERR(ctx, error, "%s: tensor '%s' is %s, the node expects %s", path, names[j],
                 psim_dtype_name(ts[j]->dtype), psim_dtype_name(ctx->node->outputs[k].dtype));
            ok = FALSE;
        } else {
            ctx->outputs[k] = psim_tensor_ref(ts[j]);
        }
    }
    for (int32_t j = 0; j < n; j++)
        psim_tensor_unref(ts[j]);
    g_free(ts);
    return ok;
}

void psim__cpu_register_state(void)
{
    psim__cpu_add("VariableV2", "cpu-variable", "reads a variable of a container", run_variable,
                  NULL, NULL);
    psim__cpu_add("Variable", "cpu-variable", "reads a variable of a container", run_variable,
                  NULL, NULL);
    psim__cpu_add("Assign", "cpu-assign", "replaces a variable's tensor", run_assign, NULL, NULL);
    psim__cpu_add("AssignAdd", "cpu-assign-add", "adds to a variable", run_assign_update, NULL,
                  NULL);
    psim__cpu_add("AssignSub", "cpu-assign-sub", "subtracts from a variable", run_assign_update,
                  NULL, NULL);
    psim__cpu_add("Save", "cpu-save", "writes tensors to a checkpoint file", run_save, NULL, NULL);
    psim__cpu_add("Restore", "cpu-restore", "reads tensors of a checkpoint file", run_restore,
                  NULL, NULL);
}

/* ---- Queues: the queue ops take the queue's handle (a string scalar, "container\nname") ----- */

static gboolean run_queue(PsimKernelCtx *ctx, GError **error)
{
    const PsimNode *n = ctx->node;
    const PsimAttr *types = psim_node_attr(n, "component_types");
    if (!types || types->type != PSIM_ATTR_DTYPES || types->n < 1) {
        KERR(ctx, error, "a queue needs attribute component_types");
        return FALSE;
    }
    PsimQueueSpec spec = {.n_components = types->n,
                          .capacity = psim_node_attr_int(n, "capacity", -1),
                          .shuffle = !strcmp(n->op, "RandomShuffleQueueV2"),
                          .min_after_dequeue = psim_node_attr_int(n, "min_after_dequeue", 0),
                          .seed = (uint64_t)psim_node_attr_int(n, "seed", 0)};
    const char *container = psim_node_attr_string(n, "container", "");
    const char *name = psim_node_attr_string(n, "shared_name", "");
    if (!*name)
        name = n->name;
    GError *err = NULL;
    if (!psim_queue_get(container, name, &spec, &err)) {
        KERR(ctx, error, "%s", err->message);
        g_error_free(err);
        return FALSE;
    }
    /* A host string tensor: device allocators hold numbers only. */
    PsimTensor *h = psim_tensor_new(PSIM_DTYPE_STRING, 0, NULL, error);
    if (!h)
        return FALSE;
    ((char **)h->data)[0] = g_strconcat(container, "\n", name, NULL);
    psim_tensor_unref(ctx->outputs[0]);
    ctx->outputs[0] = h;
    return TRUE;
}

static PsimQueue *queue_of(PsimKernelCtx *ctx, GError **error)
{
    PsimTensor *h = psim__cpu_in(ctx, 0);
    const char *s = h && h->dtype == PSIM_DTYPE_STRING && h->n_elems == 1 ? ((char **)h->data)[0] : NULL;
    const char *nl = s ? strchr(s, '\n') : NULL;
    if (!nl) {
        KERR(ctx, error, "input 0 is not a queue handle");
        return NULL;
    }
    g_autofree char *container = g_strndup(s, (gsize)(nl - s));
    GError *err = NULL;
    PsimQueue *q = psim_queue_get(container, nl + 1, NULL, &err);
    if (!q) {
        KERR(ctx, error, "%s", err->message);
        g_error_free(err);
    }
    return q;
}

/* A numeric host tensor's row r (of its leading dim) as a tensor of its own. */
static PsimTensor *row_of(const PsimTensor *t, int64_t r, GError **error)
{
    PsimTensor *o = psim_tensor_new(t->dtype, t->rank - 1, t->dims + 1, error);
    if (o)
        memcpy(o->data, (const char *)t->data + (size_t)r * o->nbytes, o->nbytes);
    return o;
}

static gboolean run_enqueue(PsimKernelCtx *ctx, GError **error)
{
    PsimQueue *q = queue_of(ctx, error);
    if (!q)
        return FALSE;
    int32_t nc = ctx->n_inputs - 1;
    gboolean many = !strcmp(ctx->node->op, "QueueEnqueueManyV2");
    int64_t rows = 1;
    for (int32_t i = 0; i < nc; i++) {
        PsimTensor *c = ctx->inputs[1 + i];
        if (!c || c->device >= 0 || (many && (c->rank < 1 || c->dtype == PSIM_DTYPE_STRING ||
                                              c->dims[0] != ctx->inputs[1]->dims[0]))) {
            KERR(ctx, error, "component %d is absent, not in host memory or (enqueue many) "
                             "without the others' leading dimension",
                 i);
            return FALSE;
        }
        if (many)
            rows = c->dims[0];
    }
    GError *err = NULL;
    for (int64_t r = 0; r < rows; r++) {
        g_autofree PsimTensor **e = g_new0(PsimTensor *, nc + 1);
        gboolean ok = TRUE;
        for (int32_t i = 0; i < nc && ok; i++)
            ok = (e[i] = many ? row_of(ctx->inputs[1 + i], r, error)
                              : psim_tensor_ref(ctx->inputs[1 + i])) != NULL;
        ok = ok && psim_queue_enqueue(q, e, &err);
        for (int32_t i = 0; i < nc; i++)
            psim_tensor_unref(e[i]);
        if (!ok) {
            if (err) {
                KERR(ctx, error, "%s", err->message);
                g_error_free(err);
            }
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean run_dequeue(PsimKernelCtx *ctx, GError **error)
{
    PsimQueue *q = queue_of(ctx, error);
    if (!q)
        return FALSE;
    int32_t nc = ctx->n_outputs;
    gboolean many = !strcmp(ctx->node->op, "QueueDequeueManyV2");
    PsimTensor *nt = psim__cpu_in(ctx, 1);
    int64_t n = many && nt && nt->n_elems == 1 ? psim_tensor_get_i64(nt, 0) : 1;
    if (many && n < 1) {
        KERR(ctx, error, "needs a positive element count (input 1)");
        return FALSE;
    }
    g_autofree PsimTensor **e = g_new0(PsimTensor *, nc + 1);
    GError *err = NULL;
    for (int64_t r = 0; r < n; r++) {
        if (!psim_queue_dequeue(q, e, &err)) {
            KERR(ctx, error, "%s", err->message);
            g_error_free(err);
            return FALSE;
        }
        for (int32_t i = 0; i < nc; i++) {
            if (!many) {
                ctx->outputs[i] = e[i];
                continue;
            }
            if (r == 0) {
                int64_t dims[PSIM_CPU_MAX_RANK];
                dims[0] = n;
                for (int32_t d = 0; d < e[i]->rank && d + 1 < PSIM_CPU_MAX_RANK; d++)
                    dims[d + 1] = e[i]->dims[d];
                if (e[i]->rank + 1 > PSIM_CPU_MAX_RANK || e[i]->dtype == PSIM_DTYPE_STRING ||
                    !psim__cpu_out(ctx, i, e[i]->dtype, e[i]->rank + 1, dims, error)) {
                    if (error && !*error)
                        KERR(ctx, error, "component %d cannot be batched", i);
                    for (int32_t j = 0; j < nc; j++)
                        psim_tensor_unref(e[j]);
                    return FALSE;
                }
            }
            PsimTensor *o = ctx->outputs[i];
            if (e[i]->nbytes * (size_t)n != o->nbytes) {
                KERR(ctx, error, "component %d: elements of different shapes cannot be batched", i);
                for (int32_t j = 0; j < nc; j++)
                    psim_tensor_unref(e[j]);
                return FALSE;
            }
            memcpy((char *)o->data + (size_t)r * e[i]->nbytes, e[i]->data, e[i]->nbytes);
            psim_tensor_unref(e[i]);
        }
    }
    return TRUE;
}

static gboolean run_queue_close(PsimKernelCtx *ctx, GError **error)
{
    PsimQueue *q = queue_of(ctx, error);
    if (!q)
        return FALSE;
    psim_queue_close(q, psim_node_attr_int(ctx->node, "cancel_pending_enqueues", 0) != 0);
    return TRUE;
}

static gboolean run_queue_size(PsimKernelCtx *ctx, GError **error)
{
    PsimQueue *q = queue_of(ctx, error);
    PsimTensor *o = q ? psim__cpu_out(ctx, 0, PSIM_DTYPE_INT32, 0, NULL, error) : NULL;
    if (!o)
        return FALSE;
    ((int32_t *)o->data)[0] = (int32_t)MIN(psim_queue_size(q), G_MAXINT32);
    return TRUE;
}

void psim__cpu_register_queue(void)
{
    psim__cpu_add("FIFOQueueV2", "cpu-queue", "a first-in first-out queue's handle", run_queue,
                  NULL, NULL);
    psim__cpu_add("RandomShuffleQueueV2", "cpu-queue", "a shuffling queue's handle", run_queue,
                  NULL, NULL);
    psim__cpu_add("QueueEnqueueV2", "cpu-enqueue", "adds one element (blocks while full)",
                  run_enqueue, NULL, NULL);
    psim__cpu_add("QueueEnqueueManyV2", "cpu-enqueue", "adds each row as an element",
                  run_enqueue, NULL, NULL);
    psim__cpu_add("QueueDequeueV2", "cpu-dequeue", "takes one element (blocks while empty)",
                  run_dequeue, NULL, NULL);
    psim__cpu_add("QueueDequeueManyV2", "cpu-dequeue", "takes n elements, batched",
                  run_dequeue, NULL, NULL);
    psim__cpu_add("QueueCloseV2", "cpu-queue-close", "closes a queue", run_queue_close, NULL,
                  NULL);
    psim__cpu_add("QueueSizeV2", "cpu-queue-size", "elements in a queue", run_queue_size, NULL,
                  NULL);
}
