/* The training step as a graph (whitepaper sections 4.1 and 2): the forward pass and its
 * gradients (graph/grad.c), every trained parameter turned into a Variable initialised from its
 * weights, an optimizer node per parameter (ONNX's Momentum or Adam) whose outputs are assigned
 * back to the parameter and to its optimizer state (more Variables), a global step counter, and
 * one target, train_op, that depends on every assignment. Running the target once is one step;
 * variables keep their values across steps in their container. */
#include <string.h>

#include "graph-private.h"

#define TRAINING_DOMAIN "ai.onnx.preview.training"

typedef struct {
    PsimGraph *g;
    const char *container;
    gboolean deltas; /* updates as AssignAdd of a difference (async_updates) */
    GError **error;
} Step;

/* The PS device of the k-th variable (NULL without requests). */
static const char *ps_device(const PsimTrainSpec *spec, int32_t k)
{
    return spec->ps_devices && spec->n_ps > 0 ? spec->ps_devices[k % spec->n_ps] : NULL;
}

static PsimNode *add(Step *s, const char *name, const char *op)
{
    PsimNode *n = psim_graph_node_add_unique(s->g, name, op, s->error);
    if (n)
        psim_graph_node_outputs_set(s->g, n, 1);
    return n;
}

static PsimNode *scalar(Step *s, const char *name, PsimDType dt, double v)
{
    PsimNode *n = add(s, name, "Const");
    PsimTensor *t = n ? psim_tensor_new(dt, 0, NULL, s->error) : NULL;
    if (!t)
        return NULL;
    psim_tensor_set_f64(t, 0, v);
    psim_graph_node_attr_set_tensor(s->g, n, "value", t);
    psim_graph_output_value_set(s->g, n, 0, t);
    psim_tensor_unref(t);
    n->flags |= PSIM_NODE_CONSTANT;
    return n;
}

/* Node `op` (one output) of the first outputs of its n inputs; NULL when one of them is (an
 * earlier node failed: the error is set) or with the error. */
static PsimNode *apply(Step *s, const char *name, const char *op, int n, PsimNode *const *in)
{
    for (int i = 0; i < n; i++)
        if (!in[i])
            return NULL;
    PsimNode *v = add(s, name, op);
    for (int i = 0; v && i < n; i++)
        psim_graph_node_input_add(s->g, v, (PsimPort){in[i]->id, 0});
    return v;
}
#define UNARY(s, name, op, a) apply(s, name, op, 1, (PsimNode *const[]){a})
#define BINARY(s, name, op, a, b) apply(s, name, op, 2, (PsimNode *const[]){a, b})

/* The learning rate at the step's global step t: lr * (1 + cos(pi * min(t, T) / T)) / 2 for T =
 * spec->lr_decay_steps, float32, from the step's read of the counter (the value the optimizers'
 * update count sees). */
static PsimNode *cosine_lr(Step *s, PsimNode *step, const PsimTrainSpec *spec)
{
    double T = (double)spec->lr_decay_steps;
    PsimNode *cast = UNARY(s, "train/lr_schedule/step", "Cast", step);
    PsimNode *last = scalar(s, "train/lr_schedule/decay_steps", PSIM_DTYPE_FLOAT32, T);
    PsimNode *rad = scalar(s, "train/lr_schedule/radians_per_step", PSIM_DTYPE_FLOAT32, G_PI / T);
    PsimNode *one = scalar(s, "train/lr_schedule/one", PSIM_DTYPE_FLOAT32, 1);
    PsimNode *half = scalar(s, "train/lr_schedule/half_lr", PSIM_DTYPE_FLOAT32, spec->lr / 2);
    if (cast)
        psim_graph_node_attr_set_int(s->g, cast, "to", 1); /* ONNX TensorProto FLOAT */
    PsimNode *t = BINARY(s, "train/lr_schedule/clipped", "Min", cast, last);
    PsimNode *a = BINARY(s, "train/lr_schedule/angle", "Mul", t, rad);
    PsimNode *c = UNARY(s, "train/lr_schedule/cos", "Cos", a);
    PsimNode *u = BINARY(s, "train/lr_schedule/one_plus_cos", "Add", c, one);
    return BINARY(s, "train/learning_rate", "Mul", u, half);
}

/* Makes node n a Variable whose initial value is t (a reference is kept). */
static void make_variable(Step *s, PsimNode *n, PsimTensor *t)
{
    n->op = psim_graph_intern(s->g, "VariableV2");
    n->outputs[0].value = NULL; /* the graph's tensor list keeps its reference */
    psim_graph_node_attr_set_tensor(s->g, n, "value", t);
    psim_graph_node_attr_set_dtype(s->g, n, "dtype", t->dtype);
    psim_graph_node_attr_set_shape(s->g, n, "shape", t->rank, t->dims);
    psim_graph_node_attr_set_string(s->g, n, "container", s->container);
    n->flags |= PSIM_NODE_PARAMETER;
    n->flags &= ~(uint32_t)PSIM_NODE_CONSTANT;
}

/* A new Variable named name, of zeros like t. */
static PsimNode *state_variable(Step *s, const char *name, const PsimTensor *like)
{
    PsimNode *n = add(s, name, "Const");
    PsimTensor *z = n ? psim_tensor_new(like->dtype, like->rank, like->dims, s->error) : NULL;
    if (!z)
        return NULL;
    psim_graph_output_set(s->g, n, 0, z->dtype, z->rank, z->dims);
    make_variable(s, n, z);
    psim_tensor_unref(z);
    return n;
}

static PsimNode *assign(Step *s, PsimNode *var, PsimPort value, PsimNode *train_op)
{
    g_autofree char *name = g_strconcat(var->name, s->deltas ? "/AssignAdd" : "/Assign", NULL);
    PsimNode *a = add(s, name, s->deltas ? "AssignAdd" : "Assign");
    if (!a)
        return NULL;
    if (s->deltas) { /* value - the step's read, added to the value the variable has then */
        g_autofree char *dn = g_strconcat(var->name, "/delta", NULL);
        PsimNode *d = add(s, dn, "Sub");
        if (!d)
            return NULL;
        psim_graph_node_input_add(s->g, d, value);
        psim_graph_node_input_add(s->g, d, (PsimPort){var->id, 0});
        psim_graph_node_device_set(s->g, d, var->device);
        value = (PsimPort){d->id, 0};
    }
    psim_graph_node_input_add(s->g, a, (PsimPort){var->id, 0});
    psim_graph_node_input_add(s->g, a, value);
    psim_graph_node_control_add(s->g, train_op, a->id);
    return a;
}

static PsimNode *placeholder(Step *s, const char *name, PsimDType dt)
{
    PsimNode *n = add(s, name, "Placeholder");
    if (n)
        psim_graph_output_set(s->g, n, 0, dt, 0, NULL);
    return n;
}

static gint cmp_node_name(gconstpointer a, gconstpointer b)
{
    return strcmp((*(PsimNode *const *)a)->name, (*(PsimNode *const *)b)->name);
}

/* The checkpoint ops: checkpoint/Save writes every variable (by name) and the input position
 * (checkpoint/epoch and checkpoint/cursor, fed) to the file named by checkpoint/path (fed);
 * checkpoint/Restore reads them back, Assigned to the variables, with checkpoint/restore_op after
 * every Assign (its outputs "input/epoch" and "input/cursor" are the position). */
static gboolean checkpoint_ops(Step *s)
{
    PsimGraph *g = s->g;
    g_autoptr(GPtrArray) vars = g_ptr_array_new();
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++)
        if (!strcmp(psim_graph_node(g, v)->op, "VariableV2"))
            g_ptr_array_add(vars, psim_graph_node(g, v));
    g_ptr_array_sort(vars, cmp_node_name);
    int32_t nv = (int32_t)vars->len, nt = nv + 2;
    g_autofree const char **names = g_new(const char *, nt);
    g_autofree PsimDType *dts = g_new(PsimDType, nt);
    for (int32_t i = 0; i < nv; i++) {
        const PsimNode *v = g_ptr_array_index(vars, i);
        names[i] = v->name;
        dts[i] = v->outputs[0].dtype;
    }
    names[nv] = "input/epoch";
    names[nv + 1] = "input/cursor";
    dts[nv] = dts[nv + 1] = PSIM_DTYPE_INT64;
    PsimNode *path = placeholder(s, "checkpoint/path", PSIM_DTYPE_STRING);
    PsimNode *epoch = placeholder(s, "checkpoint/epoch", PSIM_DTYPE_INT64);
    PsimNode *cursor = placeholder(s, "checkpoint/cursor", PSIM_DTYPE_INT64);
    PsimNode *save = path && epoch && cursor
                         ? psim_graph_node_add_unique(g, "checkpoint/Save", "Save", s->error)
                         : NULL;
    PsimNode *restore = save ? add(s, "checkpoint/Restore", "Restore") : NULL;
    PsimNode *done = restore ? psim_graph_node_add_unique(g, "checkpoint/restore_op", "NoOp", s->error)
                             : NULL;
    if (!done)
        return FALSE;
    psim_graph_node_input_add(g, save, (PsimPort){path->id, 0});
    for (int32_t i = 0; i < nv; i++)
        psim_graph_node_input_add(g, save, (PsimPort){((PsimNode *)g_ptr_array_index(vars, i))->id, 0});
    psim_graph_node_input_add(g, save, (PsimPort){epoch->id, 0});
    psim_graph_node_input_add(g, save, (PsimPort){cursor->id, 0});
    psim_graph_node_attr_set_strings(g, save, "tensor_names", nt, names);
    psim_graph_node_input_add(g, restore, (PsimPort){path->id, 0});
    psim_graph_node_outputs_set(g, restore, nt);
    psim_graph_node_attr_set_strings(g, restore, "tensor_names", nt, names);
    PsimAttr da = {.name = "dtypes", .type = PSIM_ATTR_DTYPES, .n = nt, .v.dts = dts};
    psim_graph_node_attr_set(g, restore, &da);
    for (int32_t i = 0; i < nt; i++)
        psim_graph_output_set(g, restore, i, dts[i], PSIM_RANK_UNKNOWN, NULL);
    for (int32_t i = 0; i < nv; i++) {
        PsimNode *v = g_ptr_array_index(vars, i);
        g_autofree char *an = g_strconcat(v->name, "/Restore", NULL);
        PsimNode *a = add(s, an, "Assign");
        if (!a)
            return FALSE;
        psim_graph_node_input_add(g, a, (PsimPort){v->id, 0});
        psim_graph_node_input_add(g, a, (PsimPort){restore->id, i});
        psim_graph_node_control_add(g, done, a->id);
    }
    return TRUE;
}

/* The queue node of the input pipeline (the same queue in the step and in the feeder graph:
 * one container, one shared name). */
static PsimNode *input_queue_node(PsimGraph *g, const char *container, int32_t n,
                                  const PsimNode *const *comps, int64_t capacity, GError **error)
{
    PsimNode *q = psim_graph_node_add(g, "input/queue", "FIFOQueueV2", error);
    if (!q)
        return NULL;
    psim_graph_node_outputs_set(g, q, 1);
    g_autofree PsimDType *dts = g_new(PsimDType, n);
    g_autofree PsimShape *shapes = g_new(PsimShape, n);
    for (int32_t k = 0; k < n; k++) {
        dts[k] = comps[k]->outputs[0].dtype;
        shapes[k] = (PsimShape){comps[k]->outputs[0].rank, comps[k]->outputs[0].dims};
    }
    PsimAttr ta = {.name = "component_types", .type = PSIM_ATTR_DTYPES, .n = n, .v.dts = dts};
    PsimAttr sa = {.name = "shapes", .type = PSIM_ATTR_SHAPES, .n = n, .v.shapes = shapes};
    psim_graph_node_attr_set(g, q, &ta);
    psim_graph_node_attr_set(g, q, &sa);
    psim_graph_node_attr_set_int(g, q, "capacity", capacity);
    psim_graph_node_attr_set_string(g, q, "container", container);
    psim_graph_node_attr_set_string(g, q, "shared_name", "input");
    return q;
}

/* The step reads its inputs from a queue: input/dequeue takes one element (every graph input,
 * in order) and every consumer of an input reads the dequeued tensor instead. With nr replicas
 * the graph's inputs are nr runs of one element's; replica r's dequeue ("replica_r/input/
 * dequeue", beside the queue) takes the next element after replica r - 1's (a control edge), so
 * that the replicas' batches are the queue's elements in order. */
static gboolean input_from_queue(Step *s, int64_t capacity, int32_t nr, const PsimTrainSpec *spec,
                                 PsimTrainInfo *info)
{
    PsimGraph *g = s->g;
    int32_t n = psim_graph_n_inputs(g) / nr;
    g_autofree const PsimNode **comps = g_new(const PsimNode *, n + 1);
    for (int32_t k = 0; k < n; k++)
        comps[k] = psim_graph_node(g, psim_graph_input(g, k));
    PsimNode *q = input_queue_node(g, s->container, n, comps, capacity, s->error);
    if (!q)
        return FALSE;
    psim_graph_node_device_set(g, q, ps_device(spec, 0));
    g_autofree int32_t *slot = g_new(int32_t, psim_graph_n_nodes(g) + 1);
    g_autofree PsimPort *to = g_new(PsimPort, (size_t)n * nr + 1);
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++)
        slot[v] = -1;
    PsimNode *prev = NULL;
    for (int32_t r = 0; r < nr; r++) {
        g_autofree char *name = nr > 1 ? g_strdup_printf("replica_%d/input/dequeue", r)
                                       : g_strdup("input/dequeue");
        PsimNode *dq = psim_graph_node_add(g, name, "QueueDequeueV2", s->error);
        if (!dq)
            return FALSE;
        psim_graph_node_input_add(g, dq, (PsimPort){q->id, 0});
        psim_graph_node_attr_set(g, dq, psim_node_attr(q, "component_types"));
        psim_graph_node_outputs_set(g, dq, n);
        if (prev)
            psim_graph_node_control_add(g, dq, prev->id);
        /* With the queue: a queue's handle does not cross devices, its elements do. */
        psim_graph_node_device_set(g, dq, q->device);
        if (r == 0)
            info->dequeue = g_strdup(dq->name);
        prev = dq;
        for (int32_t k = 0; k < n; k++) {
            slot[psim_graph_input(g, r * n + k)] = r * n + k;
            to[r * n + k] = (PsimPort){dq->id, k};
        }
    }
    for (int32_t v = 0; v < psim_graph_n_nodes(g); v++) {
        PsimNode *nv = psim_graph_node(g, v);
        for (int32_t i = 0; i < nv->n_inputs; i++)
            if (nv->inputs[i].node >= 0 && slot[nv->inputs[i].node] >= 0)
                nv->inputs[i] = to[slot[nv->inputs[i].node]];
    }
    /* The components by their names in one copy of the model. */
    info->n_components = n;
    info->components = g_new0(char *, n + 1);
    for (int32_t k = 0; k < n; k++) {
        const char *name = comps[k]->name;
        if (nr > 1 && g_str_has_prefix(name, "replica_0/"))
            name += strlen("replica_0/");
        info->components[k] = g_strdup(name);
    }
    return TRUE;
}

PsimGraph *psim_graph_train_feeder(const PsimGraph *step, GError **error)
{
    g_return_val_if_fail(step != NULL, NULL);
    const PsimNode *sq = psim_graph_node_find(step, "input/queue");
    if (!sq) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "graph '%s' takes its inputs as feeds, not from a queue", psim_graph_name(step));
        return NULL;
    }
    g_autoptr(PsimGraph) g = psim_graph_new("input-feeder");
    const PsimAttr *types = psim_node_attr(sq, "component_types");
    const PsimAttr *shapes = psim_node_attr(sq, "shapes");
    int32_t n = types->n;
    g_autofree PsimNode **comps = g_new(PsimNode *, n + 1);
    for (int32_t k = 0; k < n; k++) {
        g_autofree char *name = g_strdup_printf("input/component_%d", k);
        comps[k] = psim_graph_node_add(g, name, "Placeholder", error);
        if (!comps[k])
            return NULL;
        psim_graph_node_outputs_set(g, comps[k], 1);
        psim_graph_output_set(g, comps[k], 0, types->v.dts[k], shapes->v.shapes[k].rank,
                              shapes->v.shapes[k].dims);
        psim_graph_input_add(g, comps[k]->id);
    }
    PsimNode *q = input_queue_node(g, psim_node_attr_string(sq, "container", ""), n,
                                   (const PsimNode *const *)comps,
                                   psim_node_attr_int(sq, "capacity", -1), error);
    PsimNode *enq = q ? psim_graph_node_add(g, "input/enqueue", "QueueEnqueueV2", error) : NULL;
    PsimNode *close = enq ? psim_graph_node_add(g, "input/close", "QueueCloseV2", error) : NULL;
    if (!close)
        return NULL;
    psim_graph_node_input_add(g, enq, (PsimPort){q->id, 0});
    for (int32_t k = 0; k < n; k++)
        psim_graph_node_input_add(g, enq, (PsimPort){comps[k]->id, 0});
    psim_graph_node_input_add(g, close, (PsimPort){q->id, 0});
    if (!psim_graph_finalize(g, error) || !psim_graph_infer_shapes(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

/* The mean of nr ports of one shape (Sum, then Mul by 1/nr), named base/replica_mean; on
 * `device` when given. */
static PsimPort mean_of(PsimGraph *g, const char *base, const PsimPort *in, int32_t nr,
                        const char *device, GError **error)
{
    const PsimOutput *o = &psim_graph_node(g, in[0].node)->outputs[in[0].index];
    g_autofree char *sn = g_strconcat(base, "/replica_sum", NULL);
    g_autofree char *cn = g_strconcat(base, "/replica_scale", NULL);
    g_autofree char *mn = g_strconcat(base, "/replica_mean", NULL);
    PsimNode *sum = psim_graph_node_add_unique(g, sn, "Sum", error);
    PsimNode *c = sum ? psim_graph_node_add_unique(g, cn, "Const", error) : NULL;
    PsimNode *mean = c ? psim_graph_node_add_unique(g, mn, "Mul", error) : NULL;
    PsimTensor *k = mean ? psim_tensor_new(o->dtype, 0, NULL, error) : NULL;
    if (!k)
        return (PsimPort){-1, 0};
    psim_tensor_set_f64(k, 0, 1.0 / nr);
    psim_graph_node_outputs_set(g, c, 1);
    psim_graph_node_attr_set_tensor(g, c, "value", k);
    psim_graph_output_value_set(g, c, 0, k);
    psim_tensor_unref(k);
    c->flags |= PSIM_NODE_CONSTANT;
    psim_graph_node_outputs_set(g, sum, 1);
    psim_graph_node_outputs_set(g, mean, 1);
    for (int32_t r = 0; r < nr; r++)
        psim_graph_node_input_add(g, sum, in[r]);
    psim_graph_node_input_add(g, mean, (PsimPort){sum->id, 0});
    psim_graph_node_input_add(g, mean, (PsimPort){c->id, 0});
    psim_graph_output_set(g, sum, 0, o->dtype, o->rank, o->dims);
    psim_graph_output_set(g, mean, 0, o->dtype, o->rank, o->dims);
    psim_graph_node_device_set(g, sum, device);
    psim_graph_node_device_set(g, c, device);
    psim_graph_node_device_set(g, mean, device);
    return (PsimPort){mean->id, 0};
}

/* A read of variable `var` (the k-th) by a node of replica r, as spec->variable_reads says:
 * PSIM_READ_PER_OP, a read of its own beside the variable (TensorFlow's ReadVariableOp without
 * a caching_device: every read crosses on its own); PSIM_READ_CACHED, the replica's one read
 * on its worker (*cached keeps it), which every reader there shares (caching_device on the
 * worker: the value crosses once a step). The read's node id, or -1 with an error. */
static int32_t variable_read(PsimGraph *g, int32_t var, int32_t r, const PsimTrainSpec *spec,
                             int32_t k, int32_t *cached, GError **error)
{
    gboolean per_op = spec->variable_reads == PSIM_READ_PER_OP;
    if (!per_op && *cached >= 0)
        return *cached;
    const PsimNode *v = psim_graph_node(g, var);
    g_autofree char *name = per_op ? g_strdup_printf("%s/read/replica_%d", v->name, r)
                                   : g_strdup_printf("replica_%d/%s/cached", r, v->name);
    PsimNode *rd = psim_graph_node_add_unique(g, name, "Identity", error);
    if (!rd)
        return -1;
    v = psim_graph_node(g, var);
    psim_graph_node_outputs_set(g, rd, 1);
    psim_graph_output_set(g, rd, 0, v->outputs[0].dtype, v->outputs[0].rank, v->outputs[0].dims);
    psim_graph_node_input_add(g, rd, (PsimPort){var, 0});
    psim_graph_node_device_set(g, rd, per_op ? ps_device(spec, k)
                                      : spec->worker_devices ? spec->worker_devices[r] : NULL);
    if (!per_op)
        *cached = rd->id;
    return rd->id;
}

/* Synchronous data parallelism (the whitepaper's Figure 7, top): nr copies of the forward and
 * gradient graph t, replica r's nodes named "replica_r/NAME" (on worker_devices[r] when given),
 * all reading the one copy of each of the np trained parameters params[]. Each parameter's
 * gradient is the mean of the replicas' (on its PS device): for a loss that is a mean over the
 * batch, the gradient of one copy fed all nr batches at once, up to float rounding. The result
 * has t's outputs in t's order (replica 0's, the loss the replicas' mean, the gradients the
 * means); params[] and *loss are updated to its ids; its inputs are every replica's, replica
 * by replica. */
static PsimGraph *replicate(const PsimGraph *t, int32_t nr, int32_t np, int32_t *params,
                            PsimPort *loss, const PsimTrainSpec *spec, GError **error)
{
    int32_t n = psim_graph_n_nodes(t), n_out = psim_graph_n_outputs(t);
    if ((int64_t)nr * n > (INT64_C(1) << 28)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "training: %d replicas of a %d-node step graph exceed 2^28 nodes", nr, n);
        return NULL;
    }
    g_autoptr(PsimGraph) out = psim_graph_new(psim_graph_name(t));
    psim__graph_copy_meta(out, t);
    psim_graph_reserve(out, nr * n + 8 * np + 64);
    g_autofree int32_t *shared = g_new(int32_t, n + 1);
    g_autofree int32_t *map = g_new(int32_t, (size_t)nr * n + 1);
    for (int32_t v = 0; v < n; v++)
        shared[v] = -1;
    for (int32_t k = 0; k < np; k++) {
        PsimNode *c = psim__graph_node_copy(out, t, psim_graph_node(t, params[k]), FALSE, error);
        if (!c)
            return NULL;
        shared[params[k]] = c->id;
        params[k] = c->id;
    }
    for (int32_t r = 0; r < nr; r++)
        for (int32_t v = 0; v < n; v++) {
            if (shared[v] >= 0) {
                map[(size_t)r * n + v] = shared[v];
                continue;
            }
            const PsimNode *src = psim_graph_node(t, v);
            g_autofree char *name = g_strdup_printf("replica_%d/%s", r, src->name);
            PsimNode *c = psim__graph_node_copy_named(out, t, src, name, FALSE, error);
            if (!c)
                return NULL;
            if (spec->worker_devices)
                psim_graph_node_device_set(out, c, spec->worker_devices[r]);
            map[(size_t)r * n + v] = c->id;
        }
    g_autofree int32_t *param_k = g_new(int32_t, n + 1);
    g_autofree int32_t *cached = g_new(int32_t, (size_t)nr * np + 1);
    for (int32_t v = 0; v < n; v++)
        param_k[v] = -1;
    for (int32_t k = 0; k < np; k++)
        param_k[psim_graph_node_find(t, psim_graph_node(out, params[k])->name)->id] = k;
    for (size_t i = 0; i < (size_t)nr * np; i++)
        cached[i] = -1;
    for (int32_t r = 0; r < nr; r++)
        for (int32_t v = 0; v < n; v++) {
            if (shared[v] >= 0)
                continue;
            const PsimNode *src = psim_graph_node(t, v);
            int32_t cid = map[(size_t)r * n + v];
            for (int32_t i = 0; i < src->n_inputs; i++) {
                PsimPort in = src->inputs[i];
                PsimPort to = in.node >= 0 ? (PsimPort){map[(size_t)r * n + in.node], in.index} : in;
                int32_t k = in.node >= 0 ? param_k[in.node] : -1;
                if (k >= 0 && spec->variable_reads != PSIM_READ_DIRECT) {
                    to.node = variable_read(out, params[k], r, spec, k, &cached[(size_t)r * np + k], error);
                    if (to.node < 0)
                        return NULL;
                }
                psim_graph_node_input_add(out, psim_graph_node(out, cid), to);
            }
            PsimNode *c = psim_graph_node(out, cid);
            for (int32_t i = 0; i < src->n_controls; i++)
                psim_graph_node_control_add(out, c, map[(size_t)r * n + src->controls[i]]);
        }
    for (int32_t r = 0; r < nr; r++)
        for (int32_t i = 0; i < psim_graph_n_inputs(t); i++)
            psim_graph_input_add(out, map[(size_t)r * n + psim_graph_input(t, i)]);
    g_autofree PsimPort *each = g_new(PsimPort, nr);
    for (int32_t r = 0; r < nr; r++)
        each[r] = (PsimPort){map[(size_t)r * n + loss->node], loss->index};
    PsimPort mean_loss = mean_of(out, "train/replica_loss", each, nr, ps_device(spec, 0), error);
    if (mean_loss.node < 0)
        return NULL;
    for (int32_t i = 0; i < n_out; i++) {
        PsimPort o = psim_graph_output(t, i);
        if (i < n_out - np) {
            gboolean is_loss = o.node == loss->node && o.index == loss->index;
            psim_graph_output_add(out, is_loss ? mean_loss : (PsimPort){map[o.node], o.index});
            continue;
        }
        int32_t k = i - (n_out - np);
        for (int32_t r = 0; r < nr; r++)
            each[r] = (PsimPort){map[(size_t)r * n + o.node], o.index};
        PsimPort g = mean_of(out, psim_graph_node(out, params[k])->name, each, nr, ps_device(spec, k), error);
        if (g.node < 0)
            return NULL;
        psim_graph_output_add(out, g);
    }
    *loss = mean_loss;
    return g_steal_pointer(&out);
}

/* As TensorFlow's group(): the step's target waits on one NoOp per other device, each waiting
 * on that device's updates, so that a step sends one control message per parameter server
 * instead of one per update (28 a step from the second PS of a 2-replica cnn before). */
static gboolean group_controls(Step *s, int32_t target)
{
    PsimGraph *g = s->g;
    g_autoptr(GHashTable) by_dev = g_hash_table_new(g_str_hash, g_str_equal);
    PsimNode *t = psim_graph_node(g, target);
    int32_t n = t->n_controls, kept = 0;
    g_autofree int32_t *old = g_memdup2(t->controls, sizeof(int32_t) * (size_t)MAX(n, 1));
    g_autofree int32_t *keep = g_new(int32_t, n + 1);
    for (int32_t i = 0; i < n; i++) {
        const char *dev = psim_graph_node(g, old[i])->device;
        t = psim_graph_node(g, target);
        if (!dev || (t->device && !strcmp(dev, t->device))) {
            keep[kept++] = old[i];
            continue;
        }
        gpointer grp = g_hash_table_lookup(by_dev, dev);
        if (!grp) {
            g_autofree char *name = g_strconcat(t->name, "/group", NULL);
            PsimNode *nn = psim_graph_node_add_unique(g, name, "NoOp", s->error);
            if (!nn)
                return FALSE;
            psim_graph_node_device_set(g, nn, dev);
            grp = GINT_TO_POINTER(nn->id + 1);
            g_hash_table_insert(by_dev, (gpointer)psim_graph_node(g, nn->id)->device, grp);
            keep[kept++] = nn->id;
        }
        psim_graph_node_control_add(g, psim_graph_node(g, GPOINTER_TO_INT(grp) - 1), old[i]);
    }
    t = psim_graph_node(g, target);
    memcpy(t->controls, keep, sizeof(int32_t) * (size_t)kept);
    t->n_controls = kept;
    return TRUE;
}

static char *ref_format(const PsimGraph *g, PsimPort p)
{
    return g_strdup_printf("%s:%d", psim_graph_node(g, p.node)->name, p.index);
}

PsimGraph *psim_graph_train_step(const PsimGraph *g, const PsimTrainSpec *spec,
                                 PsimTrainInfo *info, GError **error)
{
    g_return_val_if_fail(g && spec && info, NULL);
    memset(info, 0, sizeof *info);
    if (!(spec->lr > 0) || spec->momentum < 0 || spec->momentum >= 1 || spec->beta1 < 0 ||
        spec->beta1 >= 1 || spec->beta2 < 0 || spec->beta2 >= 1 || spec->epsilon < 0 ||
        spec->weight_decay < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "training: the learning rate must be > 0, momentum and betas in [0, 1)");
        return NULL;
    }
    int32_t np = 0;
    g_autofree int32_t *params = NULL;
    PsimPort loss;
    g_autoptr(PsimGraph) t = psim__graph_training(g, spec->loss, &np, &params, &loss, error);
    if (!t)
        return NULL;
    int32_t nr = MAX(spec->replicas, 1);
    if (nr > 1) {
        PsimGraph *rep = replicate(t, nr, np, params, &loss, spec, error);
        if (!rep)
            return NULL;
        psim_graph_free(t);
        t = rep;
    }
    int32_t n_out = psim_graph_n_outputs(t);
    Step s = {.g = t, .container = spec->container ? spec->container : "",
              .deltas = spec->async_updates, .error = error};
    /* One replica of asynchronous training: the model's nodes on its worker. */
    for (int32_t v = 0; nr == 1 && spec->worker_devices && v < psim_graph_n_nodes(t); v++)
        psim_graph_node_device_set(t, psim_graph_node(t, v), spec->worker_devices[0]);
    PsimNode *train_op = psim_graph_node_add_unique(t, "train_op", "NoOp", error);
    PsimNode *step = add(&s, "global_step", "Const");
    PsimNode *one = scalar(&s, "train/one", PSIM_DTYPE_INT64, 1);
    if (!train_op || !step || !one)
        return NULL;
    g_autoptr(PsimTensor) zero = psim_tensor_new(PSIM_DTYPE_INT64, 0, NULL, error);
    if (!zero)
        return NULL;
    psim_graph_output_set(t, step, 0, PSIM_DTYPE_INT64, 0, NULL);
    make_variable(&s, step, zero);
    PsimNode *lr = spec->lr_decay_steps > 0 ? cosine_lr(&s, step, spec)
                                            : scalar(&s, "train/learning_rate", PSIM_DTYPE_FLOAT32, spec->lr);
    if (!lr)
        return NULL;
    /* Adam's update count starts at 1 for the first step (bias correction as in Kingma & Ba);
     * Momentum's at 0 (ONNX: the first step takes the gradient whole). */
    PsimPort count = {step->id, 0};
    gboolean adam = spec->optimizer == PSIM_OPTIMIZER_ADAM;
    if (adam) {
        PsimNode *c = add(&s, "train/update_count", "Add");
        if (!c)
            return NULL;
        psim_graph_node_input_add(t, c, (PsimPort){step->id, 0});
        psim_graph_node_input_add(t, c, (PsimPort){one->id, 0});
        count = (PsimPort){c->id, 0};
    }
    for (int32_t k = 0; k < np; k++) {
        PsimNode *p = psim_graph_node(t, params[k]);
        PsimTensor *init = p->outputs[0].value;
        PsimPort grad = psim_graph_output(t, n_out - np + k);
        if (!init) {
            psim__error_node(error, t, p, "parameter has no value to start training from");
            return NULL;
        }
        make_variable(&s, p, init);
        const char *dev = ps_device(spec, k);
        if (dev) /* without requests, the model's own (if any) stays */
            psim_graph_node_device_set(t, p, dev);
        g_autofree char *vn = g_strconcat(p->name, adam ? "/adam_m" : "/momentum", NULL);
        g_autofree char *hn = g_strconcat(p->name, "/adam_v", NULL);
        PsimNode *v = adam || spec->momentum > 0 ? state_variable(&s, vn, init) : NULL;
        PsimNode *h = adam ? state_variable(&s, hn, init) : NULL;
        if ((adam || spec->momentum > 0) && !v)
            return NULL;
        if (adam && !h)
            return NULL;
        if (v)
            psim_graph_node_device_set(t, v, dev);
        if (h)
            psim_graph_node_device_set(t, h, dev);
        g_autofree char *on = g_strconcat(p->name, adam ? "/Adam" : "/Momentum", NULL);
        PsimNode *opt = add(&s, on, adam ? "Adam" : "Momentum");
        if (!opt)
            return NULL;
        opt->domain = psim_graph_intern(t, TRAINING_DOMAIN);
        psim_graph_node_outputs_set(t, opt, adam ? 3 : 2);
        psim_graph_node_device_set(t, opt, dev);
        psim_graph_node_input_add(t, opt, (PsimPort){lr->id, 0});
        psim_graph_node_input_add(t, opt, count);
        psim_graph_node_input_add(t, opt, (PsimPort){p->id, 0});
        psim_graph_node_input_add(t, opt, grad);
        /* Plain SGD is Momentum with alpha 0: the state input is then never read. */
        psim_graph_node_input_add(t, opt, v ? (PsimPort){v->id, 0} : grad);
        if (h)
            psim_graph_node_input_add(t, opt, (PsimPort){h->id, 0});
        psim_graph_node_attr_set_float(t, opt, "norm_coefficient", spec->weight_decay);
        if (adam) {
            psim_graph_node_attr_set_float(t, opt, "alpha", spec->beta1);
            psim_graph_node_attr_set_float(t, opt, "beta", spec->beta2);
            psim_graph_node_attr_set_float(t, opt, "epsilon", spec->epsilon);
        } else {
            psim_graph_node_attr_set_float(t, opt, "alpha", spec->momentum);
            psim_graph_node_attr_set_float(t, opt, "beta", 1.0);
            psim_graph_node_attr_set_string(t, opt, "mode", "standard");
        }
        if (!assign(&s, p, (PsimPort){opt->id, 0}, train_op) ||
            (v && !assign(&s, v, (PsimPort){opt->id, 1}, train_op)) ||
            (h && !assign(&s, h, (PsimPort){opt->id, 2}, train_op)))
            return NULL;
    }
    PsimNode *inc = add(&s, "global_step/AssignAdd", "AssignAdd");
    if (!inc)
        return NULL;
    psim_graph_node_input_add(t, inc, (PsimPort){step->id, 0});
    psim_graph_node_input_add(t, inc, (PsimPort){one->id, 0});
    psim_graph_node_control_add(t, train_op, inc->id);
    if (spec->checkpoint_ops && !checkpoint_ops(&s))
        return NULL;
    if (spec->input_queue > 0 && !input_from_queue(&s, spec->input_queue, nr, spec, info))
        return NULL;
    /* The outputs: the loss once the step's updates are done (TensorFlow's identity under
     * control_dependencies([train_op])), so that fetching the graph's outputs runs the whole
     * step; then the class scores. */
    PsimNode *after = add(&s, "train/loss", "Identity");
    if (!after)
        return NULL;
    psim_graph_node_input_add(t, after, loss);
    psim_graph_node_control_add(t, after, train_op->id);
    PsimPort scores = psim_graph_output(t, 0);
    gboolean has_scores = scores.node != loss.node;
    psim__graph_outputs_clear(t);
    psim_graph_output_add(t, (PsimPort){after->id, 0});
    /* Requests: what is not a replica's, and has none yet, goes with the first PS (the
     * Assigns and AssignAdds with their variables). */
    for (int32_t v = 0; spec->ps_devices && v < psim_graph_n_nodes(t); v++) {
        PsimNode *nv = psim_graph_node(t, v);
        if (nv->device || (nr > 1 && g_str_has_prefix(nv->name, "replica_")))
            continue;
        const char *dev = ps_device(spec, 0);
        if ((!strcmp(nv->op, "Assign") || !strcmp(nv->op, "AssignAdd") || !strcmp(nv->op, "AssignSub")) &&
            nv->n_inputs > 0 && nv->inputs[0].node >= 0)
            dev = psim_graph_node(t, nv->inputs[0].node)->device;
        psim_graph_node_device_set(t, nv, dev);
    }
    if (has_scores)
        psim_graph_output_add(t, scores);
    if (spec->ps_devices && !group_controls(&s, train_op->id))
        return NULL;
    if (!psim_graph_finalize(t, error) || !psim_graph_infer_shapes(t, error))
        return NULL;
    info->n_variables = np;
    info->replicas = nr;
    const PsimNode *save = psim_graph_node_find(t, "checkpoint/Save");
    info->n_saved = save ? psim_node_attr(save, "tensor_names")->n : 0;
    info->loss = ref_format(t, loss);
    info->scores = has_scores ? ref_format(t, scores) : NULL;
    info->train_op = g_strdup(train_op->name);
    info->global_step = g_strdup(step->name);
    return g_steal_pointer(&t);
}

void psim_train_info_clear(PsimTrainInfo *info)
{
    g_clear_pointer(&info->loss, g_free);
    g_clear_pointer(&info->scores, g_free);
    g_clear_pointer(&info->train_op, g_free);
    g_clear_pointer(&info->global_step, g_free);
    g_clear_pointer(&info->components, g_strfreev);
    g_clear_pointer(&info->dequeue, g_free);
    info->n_components = 0;
}
