/* Operator fusion: chains of nodes that one kernel runs in one pass become one node, before
 * anything is placed, profiled or simulated, so that the placer, the cost model, the simulator
 * and the executor all see the node that runs. ONNX Runtime makes the same three fusions at its
 * default optimization level, with the same com.microsoft ops, so a fused graph exported to ONNX
 * runs there too:
 *
 *   Conv -> Relu | LeakyRelu | Clip | HardSigmoid | Sigmoid | Tanh   =>  FusedConv(activation)
 *   x -> Sigmoid -> Mul(x, .)                                        =>  QuickGelu(alpha = 1)
 *   x -> Mul(x, alpha) -> Sigmoid -> Mul(x, .)                       =>  QuickGelu(alpha)
 *   x -> Div(., sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)
 *     (or the 0.5 on x first: Mul(Mul(x, 0.5), .))                   =>  Gelu
 *
 * A chain fuses only when every node but its last has one data consumer (the next node of the
 * chain), none is a graph output, fed, a parameter, constant-folded, annotated with costs or the
 * target of a control edge; all run on the same requested and assigned device, in ONNX's default
 * domain; the constants are the exact float values the exporters write (1.4142135, 1, 0.5); and
 * can_run says every device that may run the graph has a kernel for the fused op at the chain's
 * dtype. The fused node takes the Conv's name (a gated activation: its last node's), the last
 * node's output (name, dtype, shape) and the control inputs of the whole chain. Scalar constants
 * only the chain read are dropped with it. */
#include "graph-private.h"
#include "ops-private.h"

#include <math.h>
#include <string.h>

typedef enum { FUSE_NONE, FUSE_CONV, FUSE_QUICK_GELU, FUSE_GELU } FuseKind;

typedef struct {
    FuseKind kind;
    int32_t head;   /* the Conv (FUSE_CONV) */
    PsimPort x;     /* the gated activations' input */
    int32_t act;    /* the activation node (FUSE_CONV) */
    float alpha;    /* QuickGelu's */
} Fusion;

typedef struct {
    const PsimGraph *g;
    int32_t nn;
    int32_t *uses;    /* data consumers of output 0 */
    int32_t *uses_hi; /* data consumers of other outputs */
    guint8 *pinned;   /* a graph output or input, or a control-edge target */
    guint8 *drop;
    Fusion *at;       /* by the chain's last node */
    gboolean (*can_run)(const char *op, PsimDType dt, void *user);
    void *user;
} Fuser;

static gboolean default_domain(const PsimNode *v)
{
    return !v->domain || !*v->domain || !strcmp(v->domain, "ai.onnx");
}

static const PsimNode *node_of(const Fuser *f, PsimPort p)
{
    return p.node >= 0 && p.node < f->nn ? psim_graph_node(f->g, p.node) : NULL;
}

/* A node the chain may absorb or end with: op `op` (NULL: any) in the default domain, one
 * output, nothing that pins it. */
static gboolean plain(const Fuser *f, const PsimNode *v, const char *op)
{
    return v && (!op || !strcmp(v->op, op)) && default_domain(v) && v->n_outputs == 1 &&
           !(v->flags & (PSIM_NODE_FED | PSIM_NODE_PARAMETER | PSIM_NODE_CONSTANT)) &&
           v->n_costs == 0 && !f->drop[v->id] && f->at[v->id].kind == FUSE_NONE;
}

/* An interior node: plain, and its output read once, by the chain, and nowhere else. */
static gboolean interior(const Fuser *f, const PsimNode *v, const char *op)
{
    return plain(f, v, op) && f->uses[v->id] == 1 && !f->pinned[v->id];
}

static gboolean same_place(const PsimNode *a, const PsimNode *b)
{
    return g_strcmp0(a->device, b->device) == 0 && g_strcmp0(a->assigned_device, b->assigned_device) == 0;
}

/* The float value of a one-element float32 constant at p. */
static gboolean scalar(const Fuser *f, PsimPort p, float *out)
{
    const PsimNode *v = node_of(f, p);
    if (!v || p.index >= v->n_outputs)
        return FALSE;
    const PsimTensor *t = v->outputs[p.index].value;
    /* Rank 0 or 1 only: a [1, 1, 1] one would broadcast a lower-rank x up, which the fused
     * node does not. */
    if (!t || t->dtype != PSIM_DTYPE_FLOAT32 || t->n_elems != 1 || t->rank > 1)
        return FALSE;
    *out = *(const float *)t->data;
    return TRUE;
}

static gboolean is_scalar(const Fuser *f, PsimPort p, float want)
{
    float v;
    return scalar(f, p, &v) && v == want;
}

static gboolean same_port(PsimPort a, PsimPort b)
{
    return a.node == b.node && a.index == b.index;
}

/* Whether two-input node v reads port `with` beside the scalar `want`, either way round. */
static gboolean with_scalar(const Fuser *f, const PsimNode *v, PsimPort with, float want)
{
    return v->n_inputs == 2 && ((same_port(v->inputs[0], with) && is_scalar(f, v->inputs[1], want)) ||
                                (same_port(v->inputs[1], with) && is_scalar(f, v->inputs[0], want)));
}

/* v's one consumer (v's output is read once). */
static const PsimNode *consumer(const Fuser *f, const int32_t *next, const PsimNode *v)
{
    return next[v->id] >= 0 ? psim_graph_node(f->g, next[v->id]) : NULL;
}

static PsimDType out_dtype(const PsimNode *v)
{
    return v->n_outputs > 0 ? v->outputs[0].dtype : PSIM_DTYPE_UNDEFINED;
}

/* x -> Sigmoid -> Mul(x, .), or x -> Mul(x, alpha) -> Sigmoid -> Mul(x, .) (Keras's swish,
 * x sigmoid(beta x), as TF GraphDefs hold it): QuickGelu(alpha). */
static void match_quick_gelu(Fuser *f, const int32_t *next, const PsimNode *s)
{
    if (!interior(f, s, "Sigmoid") || s->n_inputs != 1)
        return;
    const PsimNode *m = consumer(f, next, s);
    if (!plain(f, m, "Mul") || m->n_inputs != 2 || !same_place(s, m))
        return;
    PsimPort x = s->inputs[0];
    float alpha = 1.0f;
    const PsimNode *scale = NULL, *sc = node_of(f, x);
    if (sc && interior(f, sc, "Mul") && sc->n_inputs == 2 && same_place(sc, s))
        for (int k = 0; k < 2 && !scale; k++)
            if (scalar(f, sc->inputs[1 - k], &alpha) &&
                ((m->inputs[0].node == s->id && same_port(m->inputs[1], sc->inputs[k])) ||
                 (m->inputs[1].node == s->id && same_port(m->inputs[0], sc->inputs[k])))) {
                scale = sc;
                x = sc->inputs[k];
            }
    if (!scale) {
        alpha = 1.0f;
        if (!((m->inputs[0].node == s->id && same_port(m->inputs[1], x)) ||
              (m->inputs[1].node == s->id && same_port(m->inputs[0], x))))
            return;
    }
    /* The fused node computes over x's shape: the chain's output must have it. */
    const PsimNode *xn = node_of(f, x);
    const PsimOutput *xo = xn ? &xn->outputs[x.index] : NULL, *mo = &m->outputs[0];
    if (!xo || xo->rank != mo->rank ||
        (xo->rank > 0 && memcmp(xo->dims, mo->dims, sizeof(int64_t) * (size_t)xo->rank)))
        return;
    if (!f->can_run("QuickGelu", out_dtype(m), f->user))
        return;
    f->drop[s->id] = 1;
    if (scale)
        f->drop[scale->id] = 1;
    f->at[m->id] = (Fusion){FUSE_QUICK_GELU, -1, x, -1, alpha};
}

/* x -> Div(., sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5), or with Mul(x, 0.5) as
 * the Add's partner. */
static void match_gelu(Fuser *f, const int32_t *next, const PsimNode *e)
{
    const float r2 = 1.41421353816986083984375f; /* sqrtf(2), as the exporters write it */
    if (!interior(f, e, "Erf") || e->n_inputs != 1)
        return;
    const PsimNode *d = node_of(f, e->inputs[0]);
    if (!interior(f, d, "Div") || d->n_inputs != 2 || !is_scalar(f, d->inputs[1], r2) ||
        !same_place(d, e))
        return;
    PsimPort x = d->inputs[0];
    const PsimNode *a = consumer(f, next, e);
    if (!interior(f, a, "Add") || !with_scalar(f, a, (PsimPort){e->id, 0}, 1.0f) || !same_place(a, e))
        return;
    const PsimNode *m = consumer(f, next, a);
    if (!plain(f, m, "Mul") || m->n_inputs != 2 || !same_place(m, e))
        return;
    PsimPort other = m->inputs[m->inputs[0].node == a->id ? 1 : 0];
    if (m->inputs[0].node != a->id && m->inputs[1].node != a->id)
        return;
    const PsimNode *tail = NULL, *half = NULL;
    if (same_port(other, x)) { /* (x (1 + erf)) 0.5 */
        if (!interior(f, m, "Mul"))
            return;
        const PsimNode *m2 = consumer(f, next, m);
        if (!plain(f, m2, "Mul") || !with_scalar(f, m2, (PsimPort){m->id, 0}, 0.5f) || !same_place(m2, e))
            return;
        tail = m2;
    } else { /* (x 0.5) (1 + erf) */
        half = node_of(f, other);
        if (!interior(f, half, "Mul") || !with_scalar(f, half, x, 0.5f) || !same_place(half, e))
            return;
        tail = m;
    }
    if (!f->can_run("Gelu", out_dtype(tail), f->user))
        return;
    f->drop[d->id] = f->drop[e->id] = f->drop[a->id] = 1;
    f->drop[half ? half->id : m->id] = 1;
    f->at[tail->id] = (Fusion){FUSE_GELU, -1, x, -1};
}

/* Conv -> an activation FusedConv takes. */
static void match_conv(Fuser *f, const PsimNode *act)
{
    static const char *const acts[] = {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "Sigmoid", "Tanh"};
    gboolean known = FALSE;
    for (size_t i = 0; i < G_N_ELEMENTS(acts) && act; i++)
        known = known || !strcmp(act->op, acts[i]);
    if (!known || !plain(f, act, NULL) || act->n_inputs < 1)
        return;
    const PsimNode *c = node_of(f, act->inputs[0]);
    if (!interior(f, c, "Conv") || act->inputs[0].index != 0 || c->n_inputs < 2 || c->n_inputs > 3 ||
        !same_place(c, act))
        return;
    if (!strcmp(act->op, "Clip")) { /* bounds: constant inputs (opset 11+) or attributes */
        float v;
        for (int32_t k = 1; k < act->n_inputs; k++)
            if (act->inputs[k].node >= 0 && !scalar(f, act->inputs[k], &v))
                return;
    } else if (act->n_inputs != 1)
        return;
    if (!f->can_run("FusedConv", out_dtype(act), f->user))
        return;
    f->drop[c->id] = 1;
    f->at[act->id] = (Fusion){FUSE_CONV, c->id, {-1, 0}, act->id};
}

/* FusedConv's "activation" and "activation_params" from the activation node. */
static void set_activation(const Fuser *f, PsimGraph *out, PsimNode *n, const PsimNode *act)
{
    psim_graph_node_attr_set_string(out, n, "activation", act->op);
    double p[2];
    int32_t np = 0;
    if (!strcmp(act->op, "LeakyRelu"))
        p[np++] = psim_node_attr_float(act, "alpha", 0.01);
    else if (!strcmp(act->op, "HardSigmoid")) {
        p[np++] = psim_node_attr_float(act, "alpha", 0.2);
        p[np++] = psim_node_attr_float(act, "beta", 0.5);
    } else if (!strcmp(act->op, "Clip")) {
        float lo = -INFINITY, hi = INFINITY;
        if (act->n_inputs > 1 && act->inputs[1].node >= 0)
            scalar(f, act->inputs[1], &lo);
        else if (act->n_inputs <= 1)
            lo = (float)psim_node_attr_float(act, "min", -INFINITY);
        if (act->n_inputs > 2 && act->inputs[2].node >= 0)
            scalar(f, act->inputs[2], &hi);
        else if (act->n_inputs <= 1)
            hi = (float)psim_node_attr_float(act, "max", INFINITY);
        p[np++] = lo;
        p[np++] = hi;
    }
    if (np)
        psim_graph_node_attr_set_floats(out, n, "activation_params", np, p);
}

/* The fused node standing for the chain that ends at tail (whose id it takes). Its inputs and
 * controls are old ids, remapped with the rest. */
static PsimNode *emit_fused(const Fuser *f, PsimGraph *out, const PsimNode *tail,
                            const Fusion *fu, GError **error)
{
    const PsimNode *head = fu->kind == FUSE_CONV ? psim_graph_node(f->g, fu->head) : tail;
    const char *op = fu->kind == FUSE_CONV ? "FusedConv" : fu->kind == FUSE_GELU ? "Gelu" : "QuickGelu";
    PsimNode *n = psim_graph_node_add(out, head->name, op, error);
    if (!n)
        return NULL;
    n->flags = tail->flags;
    n->domain = psim_graph_intern(out, "com.microsoft");
    psim_graph_node_device_set(out, n, tail->device);
    psim_graph_node_assigned_set(out, n, tail->assigned_device);
    if (fu->kind == FUSE_CONV) {
        for (int32_t i = 0; i < head->n_attrs; i++)
            psim_graph_node_attr_set(out, n, &head->attrs[i]);
        set_activation(f, out, n, psim_graph_node(f->g, fu->act));
        for (int32_t k = 0; k < head->n_inputs; k++)
            psim_graph_node_input_add(out, n, head->inputs[k]);
    } else {
        if (fu->kind == FUSE_QUICK_GELU)
            psim_graph_node_attr_set_float(out, n, "alpha", fu->alpha);
        psim_graph_node_input_add(out, n, fu->x);
    }
    psim_graph_node_outputs_set(out, n, 1);
    const PsimOutput *o = &tail->outputs[0];
    psim_graph_output_set(out, n, 0, o->dtype, o->rank, o->dims);
    n->outputs[0].bytes = o->bytes;
    n->outputs[0].name = psim_graph_intern(out, o->name);
    return n;
}

gboolean psim_graph_fuse(const PsimGraph *g, gboolean (*can_run)(const char *op, PsimDType dt, void *user),
                         void *user, PsimGraph **fused_graph, int32_t *n_removed, GError **error)
{
    int32_t nn = psim_graph_n_nodes(g), cap = nn ? nn : 1;
    Fuser f = {g, nn, g_new0(int32_t, cap), g_new0(int32_t, cap), g_new0(guint8, cap),
               g_new0(guint8, cap), g_new0(Fusion, cap), can_run, user};
    g_autofree int32_t *next = g_new(int32_t, cap);   /* the last consumer of output 0 */
    g_autofree int32_t *member = g_new(int32_t, cap); /* a chain's absorbed nodes, as a list */
    g_autofree int32_t *first = g_new(int32_t, cap);  /* by tail: its list's first member */
    g_autofree int32_t *read_by = g_new0(int32_t, cap); /* reads in the fused graph */
    g_autofree int32_t *new_id = g_new(int32_t, cap);
    gboolean ok = TRUE;
    PsimGraph *out = NULL;
    *fused_graph = NULL;
    if (n_removed)
        *n_removed = 0;
    for (int32_t v = 0; v < nn; v++)
        next[v] = member[v] = first[v] = -1;
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t k = 0; k < n->n_inputs; k++) {
            PsimPort p = n->inputs[k];
            if (p.node < 0)
                continue;
            if (p.index == 0) {
                f.uses[p.node]++;
                next[p.node] = v;
            } else
                f.uses_hi[p.node]++;
        }
        for (int32_t k = 0; k < n->n_controls; k++) /* a control edge's source stays itself */
            f.pinned[n->controls[k]] = 1;
    }
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++)
        f.pinned[psim_graph_output(g, i).node] = 1;
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++)
        f.pinned[psim_graph_input(g, i)] = 1;
    /* Gated activations first: their Sigmoid must not become a FusedConv's. */
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        if (!strcmp(n->op, "Erf"))
            match_gelu(&f, next, n);
        else if (!strcmp(n->op, "Sigmoid"))
            match_quick_gelu(&f, next, n);
    }
    for (int32_t v = 0; v < nn; v++)
        match_conv(&f, psim_graph_node(g, v));
    /* Each chain's absorbed nodes, walked back from its tail (their control inputs go to the
     * fused node). */
    int32_t n_chains = 0;
    g_autoptr(GArray) stack = g_array_new(FALSE, FALSE, sizeof(int32_t));
    for (int32_t v = 0; v < nn; v++) {
        if (f.at[v].kind == FUSE_NONE)
            continue;
        n_chains++;
        g_array_set_size(stack, 0);
        g_array_append_val(stack, v);
        while (stack->len) {
            int32_t u = g_array_index(stack, int32_t, stack->len - 1);
            g_array_set_size(stack, stack->len - 1);
            const PsimNode *un = psim_graph_node(g, u);
            for (int32_t k = 0; k < un->n_inputs; k++) {
                int32_t w = un->inputs[k].node;
                if (w >= 0 && f.drop[w] && member[w] == -1) {
                    member[w] = first[v] == -1 ? -2 : first[v]; /* -2: end of the list */
                    first[v] = w;
                    g_array_append_val(stack, w);
                }
            }
        }
    }
    if (n_chains == 0)
        goto done;
    /* Scalar constants that only absorbed nodes read go with them: count the reads of the graph
     * as it will be (a fused node reads its head's inputs, or x). */
    for (int32_t v = 0; v < nn; v++) {
        if (f.drop[v])
            continue;
        const Fusion *fu = &f.at[v];
        if (fu->kind == FUSE_NONE || fu->kind == FUSE_CONV) {
            const PsimNode *n = psim_graph_node(g, fu->kind == FUSE_CONV ? fu->head : v);
            for (int32_t k = 0; k < n->n_inputs; k++)
                if (n->inputs[k].node >= 0)
                    read_by[n->inputs[k].node]++;
        } else
            read_by[fu->x.node]++;
    }
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        float s;
        if (!f.drop[v] && read_by[v] == 0 && f.uses[v] > 0 && n->n_inputs == 0 && n->n_controls == 0 &&
            n->n_outputs == 1 && !f.pinned[v] && scalar(&f, (PsimPort){v, 0}, &s))
            f.drop[v] = 2;
    }
    out = psim_graph_new(psim_graph_name(g));
    psim__graph_copy_meta(out, g);
    int32_t next_id = 0, removed = 0;
    for (int32_t v = 0; v < nn && ok; v++) {
        new_id[v] = -1;
        const PsimNode *n = psim_graph_node(g, v);
        if (f.drop[v]) {
            removed++;
            continue;
        }
        gboolean chain = f.at[v].kind != FUSE_NONE;
        PsimNode *c = chain ? emit_fused(&f, out, n, &f.at[v], error)
                            : psim__graph_node_copy(out, g, n, TRUE, error);
        ok = c != NULL;
        if (ok && chain) /* the chain's control inputs (old ids, remapped below) */
            for (int32_t u = v; u >= 0; u = u == v ? first[v] : member[u]) {
                const PsimNode *un = psim_graph_node(g, u);
                for (int32_t k = 0; k < un->n_controls; k++)
                    psim_graph_node_control_add(out, c, un->controls[k]);
            }
        new_id[v] = next_id++;
    }
    for (int32_t v = 0; v < nn && ok; v++) {
        if (new_id[v] < 0)
            continue;
        PsimNode *n = psim_graph_node(out, new_id[v]);
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0)
                n->inputs[k].node = new_id[n->inputs[k].node];
        int32_t nc = n->n_controls;
        int32_t *old = g_memdup2(n->controls, sizeof(int32_t) * (size_t)(nc ? nc : 1));
        n->n_controls = 0;
        n->controls = NULL;
        for (int32_t k = 0; k < nc; k++)
            psim_graph_node_control_add(out, n, new_id[old[k]]);
        g_free(old);
    }
    if (ok) {
        for (int32_t i = 0; i < psim_graph_n_inputs(g); i++)
            psim_graph_input_add(out, new_id[psim_graph_input(g, i)]);
        for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
            PsimPort p = psim_graph_output(g, i);
            psim_graph_output_add(out, (PsimPort){new_id[p.node], p.index});
        }
        ok = psim_graph_finalize(out, error);
    }
    if (!ok) {
        psim_graph_free(out);
        out = NULL;
    } else if (n_removed)
        *n_removed = removed;
    *fused_graph = out;
done:
    g_free(f.uses);
    g_free(f.uses_hi);
    g_free(f.pinned);
    g_free(f.drop);
    g_free(f.at);
    return ok;
}
