/* The feeds of the subcommands that run graphs (run, profile, study): one parser for --feed,
 * generated inputs (N(0, 1) by default, zeros, ones, the arange(n)/n ramp ONNX made its
 * reference outputs with) and TensorProto files; graphs that list no outputs fetch every tensor
 * nothing consumes. */
#include <string.h>

#include "tools/cli.h"

gboolean psim_cli_feed_names_input(const PsimNode *n, const char *name)
{
    if (!strcmp(name, n->name))
        return TRUE;
    size_t l = strlen(n->name);
    if (!strncmp(name, n->name, l) && !strcmp(name + l, ":0"))
        return TRUE;
    return n->n_outputs > 0 && n->outputs[0].name && !strcmp(n->outputs[0].name, name);
}

void psim_cli_feeds_clear(PsimCliFeeds *f)
{
    g_clear_pointer(&f->names, g_ptr_array_unref);
    g_clear_pointer(&f->fills, g_array_unref);
    g_clear_pointer(&f->files, g_ptr_array_unref);
    g_clear_pointer(&f->profile, g_array_unref);
}

gboolean psim_cli_feeds_parse(PsimCliFeeds *f, char *const *args, GError **error)
{
    memset(f, 0, sizeof *f);
    f->fill = PSIM_TENSOR_FILL_RANDOM;
    f->names = g_ptr_array_new_with_free_func(g_free);
    f->fills = g_array_new(FALSE, FALSE, sizeof(PsimTensorFill));
    f->files = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    for (char *const *p = args; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        PsimTensorFill fill;
        if (!eq) {
            if (!psim_tensor_fill_from_name(*p, &fill)) {
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                            "--feed '%s': expected random, uniform, zeros, ones, ramp, NAME=KIND or NAME=FILE.pb", *p);
                return FALSE;
            }
            if (f->fill_given) {
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                            "--feed '%s': the inputs not named already get '%s'", *p, psim_tensor_fill_name(f->fill));
                return FALSE;
            }
            f->fill = fill;
            f->fill_given = TRUE;
            continue;
        }
        if (eq == *p || !eq[1]) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "--feed '%s': expected NAME=random|uniform|zeros|ones|ramp or NAME=FILE.pb", *p);
            return FALSE;
        }
        g_autofree char *name = g_strndup(*p, (gsize)(eq - *p));
        for (guint k = 0; k < f->names->len; k++)
            if (!strcmp(g_ptr_array_index(f->names, k), name)) {
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--feed '%s': input '%s' is fed twice", *p, name);
                return FALSE;
            }
        PsimTensor *t = NULL;
        if (!psim_tensor_fill_from_name(eq + 1, &fill)) {
            fill = PSIM_TENSOR_FILL_RANDOM;
            if (!(t = psim_tensor_load_pb(eq + 1, NULL, error)))
                return FALSE;
        }
        g_ptr_array_add(f->names, g_steal_pointer(&name));
        g_array_append_val(f->fills, fill);
        g_ptr_array_add(f->files, t);
    }
    return TRUE;
}

/* Graph input k of g, k counting the listed inputs and then the Placeholders the file did not
 * list (placesim JSON may leave "inputs" out); NULL past the end. */
static const PsimNode *input_at(const PsimGraph *g, int32_t *k)
{
    if (*k < psim_graph_n_inputs(g))
        return psim_graph_node(g, psim_graph_input(g, (*k)++));
    for (int32_t v = *k - psim_graph_n_inputs(g); v < psim_graph_n_nodes(g); v++) {
        const PsimNode *n = psim_graph_node(g, v);
        if (strcmp(n->op, "Placeholder"))
            continue;
        gboolean listed = FALSE;
        for (int32_t i = 0; i < psim_graph_n_inputs(g) && !listed; i++)
            listed = psim_graph_input(g, i) == v;
        if (!listed) {
            *k = psim_graph_n_inputs(g) + v + 1;
            return n;
        }
    }
    return NULL;
}

/* The graph input named `name`, or NULL. */
static const PsimNode *find_input(const PsimGraph *g, const char *name)
{
    const PsimNode *n;
    for (int32_t k = 0; (n = input_at(g, &k));)
        if (n->n_outputs > 0 && psim_cli_feed_names_input(n, name))
            return n;
    return NULL;
}

gboolean psim_cli_feeds_check(const PsimCliFeeds *f, PsimGraph *const *graphs, int32_t n, GError **error)
{
    for (guint k = 0; k < f->names->len; k++) {
        const char *name = g_ptr_array_index(f->names, k);
        gboolean found = FALSE;
        for (int32_t i = 0; i < n && !found; i++)
            found = find_input(graphs[i], name) != NULL;
        if (!found) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "--feed %s=...: no graph has an input named '%s'",
                        name, name);
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean is_float(PsimDType t)
{
    return t == PSIM_DTYPE_FLOAT32 || t == PSIM_DTYPE_FLOAT64;
}

/* Input n of g generated with `fill`, in its shape with unknown dimensions as 1. */
static PsimTensor *generated_feed(const PsimGraph *g, const PsimNode *n, PsimTensorFill fill, GError **error)
{
    const char *src = psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g);
    const PsimOutput *o = &n->outputs[0];
    /* Integer inputs (class labels, indices) take zeros or ones: a generated value could fall
     * outside what the graph accepts. */
    gboolean int_fill = (o->dtype == PSIM_DTYPE_INT64 || o->dtype == PSIM_DTYPE_INT32) &&
                        (fill == PSIM_TENSOR_FILL_ZEROS || fill == PSIM_TENSOR_FILL_ONES);
    if (!is_float(o->dtype) && !int_fill) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: node '%s': --feed %s=%s: the input is %s; only float inputs are generated, integer ones as zeros or ones (give a FILE.pb)",
                    src, n->name, n->name, psim_tensor_fill_name(fill), psim_dtype_name(o->dtype));
        return NULL;
    }
    if (o->rank < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: node '%s': graph input of unknown rank: give it with --feed %s=FILE.pb",
                    src, n->name, n->name);
        return NULL;
    }
    g_autofree int64_t *dims = g_new(int64_t, o->rank + 1);
    for (int32_t i = 0; i < o->rank; i++)
        dims[i] = o->dims[i] >= 0 ? o->dims[i] : 1;
    PsimTensor *t = psim_tensor_new(o->dtype, o->rank, dims, error);
    if (!t) {
        g_prefix_error(error, "%s: node '%s': ", src, n->name);
        return NULL;
    }
    psim_tensor_fill(t, fill, psim_tensor_fill_seed(PSIM_TENSOR_FILL_SEED, n->name));
    return t;
}

gboolean psim_cli_feeds_make(const PsimCliFeeds *f, const PsimGraph *g, gboolean all, GPtrArray *names,
                             GPtrArray *tensors, GError **error)
{
    for (guint k = 0; k < f->names->len; k++) {
        const char *name = g_ptr_array_index(f->names, k);
        PsimTensor *file = g_ptr_array_index(f->files, k);
        const PsimNode *n = find_input(g, name);
        if (file && (n || all)) {
            /* (a name the graph lacks is the executor's to report: it may name any tensor) */
            g_ptr_array_add(names, g_strdup(name));
            g_ptr_array_add(tensors, psim_tensor_ref(file));
            continue;
        }
        if (!n && all) {
            const char *src = psim_graph_source(g) ? psim_graph_source(g) : psim_graph_name(g);
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE, "%s: --feed %s=%s: the graph has no input named '%s'",
                        src, name, psim_tensor_fill_name(g_array_index(f->fills, PsimTensorFill, k)), name);
            return FALSE;
        }
        if (!n)
            continue;
        PsimTensor *t = generated_feed(g, n, g_array_index(f->fills, PsimTensorFill, k), error);
        if (!t)
            return FALSE;
        g_ptr_array_add(names, g_strdup(name));
        g_ptr_array_add(tensors, t);
    }
    const PsimNode *n;
    for (int32_t k = 0; (n = input_at(g, &k));) {
        if (n->n_outputs < 1 || n->outputs[0].value || (n->flags & PSIM_NODE_PARAMETER))
            continue; /* an initializer */
        gboolean given = FALSE;
        for (guint k = 0; k < names->len && !given; k++)
            given = psim_cli_feed_names_input(n, g_ptr_array_index(names, k));
        if (given || !is_float(n->outputs[0].dtype))
            continue; /* other dtypes need --feed; the executor says so if they are needed */
        PsimTensor *t = generated_feed(g, n, f->fill, error);
        if (!t)
            return FALSE;
        g_ptr_array_add(names, g_strdup(n->name));
        g_ptr_array_add(tensors, t);
    }
    return TRUE;
}

void psim_cli_feeds_profile(PsimCliFeeds *f, PsimGraph *const *graphs, int32_t n, PsimProfileOptions *o)
{
    if (!f->profile)
        f->profile = g_array_new(FALSE, FALSE, sizeof(PsimProfileFeed));
    g_array_set_size(f->profile, 0);
    for (guint k = 0; k < f->names->len; k++)
        for (int32_t i = 0; i < n; i++) {
            const PsimNode *in = find_input(graphs[i], g_ptr_array_index(f->names, k));
            if (!in)
                continue;
            PsimProfileFeed pf = {.node = in->name, .fill = g_array_index(f->fills, PsimTensorFill, k),
                                  .value = g_ptr_array_index(f->files, k)};
            g_array_append_val(f->profile, pf);
        }
    o->fill = f->fill;
    o->feeds = (const PsimProfileFeed *)f->profile->data;
    o->n_feeds = (int32_t)f->profile->len;
}

void psim_cli_default_fetches(const PsimGraph *g, GArray *ports)
{
    for (int32_t i = 0; i < psim_graph_n_outputs(g); i++) {
        PsimPort p = psim_graph_output(g, i);
        g_array_append_val(ports, p);
    }
    if (ports->len)
        return;
    /* Files that list no outputs (TF GraphDefs): every tensor nothing consumes. */
    int32_t nn = psim_graph_n_nodes(g);
    g_autofree guint8 *used = g_new0(guint8, nn + 1);
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].node >= 0)
                used[n->inputs[k].node] = 1;
    }
    for (int32_t v = 0; v < nn; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        const PsimOpDef *d = psim_op_lookup(n->op);
        if (used[v] || (d && (d->flags & PSIM_OP_SOURCE)))
            continue;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            PsimPort p = {v, k};
            g_array_append_val(ports, p);
        }
    }
}
