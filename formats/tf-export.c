/* TensorFlow text GraphDef (.pbtxt) export of any graph. IR ops that the importer mapped from TF
 * ops are written back under their TF names, constant axes that were turned into attrs become
 * inputs again, and each node's device field is its assigned device, else its requested one. */
#include <math.h>
#include <string.h>

#include "tf-private.h"
#include "placesim/formats.h"
#include "tf.pb-c.h"

static const char *tf_type_name(PsimDType t)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &psim_tf__data_type__descriptor, psim__tf_dtype_from_psim(t));
    return v ? v->name : "DT_INVALID";
}

static void indent(GString *s, int level)
{
    for (int i = 0; i < level; i++)
        g_string_append(s, "  ");
}

/* The shortest decimal that reads back as v (as a double; AttrValue.f is float32, and a value
 * imported from one is already its shortest float decimal). */
static void write_float(GString *s, double v)
{
    if (isnan(v)) {
        g_string_append(s, "nan");
        return;
    }
    if (isinf(v)) {
        g_string_append(s, v > 0 ? "inf" : "-inf");
        return;
    }
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    for (int prec = 1; prec <= 17; prec++) {
        char fmt[8];
        g_snprintf(fmt, sizeof fmt, "%%.%dg", prec);
        g_ascii_formatd(buf, sizeof buf, fmt, v);
        if (g_ascii_strtod(buf, NULL) == v)
            break;
    }
    g_string_append(s, buf);
}

static void write_shape(GString *s, int32_t rank, const int64_t *dims)
{
    g_string_append(s, "{");
    if (rank < 0)
        g_string_append(s, " unknown_rank: true");
    for (int32_t i = 0; i < rank; i++)
        g_string_append_printf(s, " dim { size: %" G_GINT64_FORMAT " }", dims[i]);
    g_string_append(s, " }");
}

static void write_tensor(GString *s, const PsimTensor *t)
{
    g_string_append_printf(s, "{ dtype: %s tensor_shape ", tf_type_name(t->dtype));
    write_shape(s, t->rank, t->dims);
    if (t->dtype == PSIM_DTYPE_STRING) {
        for (int64_t i = 0; i < t->n_elems; i++) {
            const char *v = ((char **)t->data)[i];
            g_string_append(s, " string_val: ");
            psim__pbtxt_quote(s, v ? v : "", v ? strlen(v) : 0);
        }
    } else if (t->nbytes) {
        g_string_append(s, " tensor_content: ");
        psim__pbtxt_quote(s, t->data, t->nbytes);
    }
    g_string_append(s, " }");
}

/* A Const of a known shape with no value (JSON "fill", or a large TF splat). */
static void write_fill_tensor(GString *s, const PsimOutput *o, double fill)
{
    PsimDType dt = o->dtype ? o->dtype : PSIM_DTYPE_FLOAT32;
    g_string_append_printf(s, "{ dtype: %s tensor_shape ", tf_type_name(dt));
    write_shape(s, o->rank < 0 ? 0 : o->rank, o->dims);
    switch (dt) {
    case PSIM_DTYPE_FLOAT32: g_string_append(s, " float_val: "); write_float(s, fill); break;
    case PSIM_DTYPE_FLOAT64: g_string_append(s, " double_val: "); write_float(s, fill); break;
    case PSIM_DTYPE_INT64: g_string_append_printf(s, " int64_val: %" G_GINT64_FORMAT, (gint64)fill); break;
    case PSIM_DTYPE_BOOL: g_string_append_printf(s, " bool_val: %s", fill != 0 ? "true" : "false"); break;
    case PSIM_DTYPE_INT32: case PSIM_DTYPE_INT16: case PSIM_DTYPE_INT8: case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_UINT16:
        g_string_append_printf(s, " int_val: %d", (int)fill);
        break;
    default: break; /* zeros */
    }
    g_string_append(s, " }");
}

static void write_attr_value(GString *s, const PsimAttr *a)
{
    switch (a->type) {
    case PSIM_ATTR_INT: g_string_append_printf(s, "{ i: %" G_GINT64_FORMAT " }", a->v.i); break;
    case PSIM_ATTR_FLOAT: g_string_append(s, "{ f: "); write_float(s, a->v.f); g_string_append(s, " }"); break;
    case PSIM_ATTR_STRING:
        g_string_append(s, "{ s: ");
        psim__pbtxt_quote(s, a->v.s ? a->v.s : "", a->v.s ? strlen(a->v.s) : 0);
        g_string_append(s, " }");
        break;
    case PSIM_ATTR_BOOL: g_string_append_printf(s, "{ b: %s }", a->v.b ? "true" : "false"); break;
    case PSIM_ATTR_DTYPE: g_string_append_printf(s, "{ type: %s }", tf_type_name(a->v.dt)); break;
    case PSIM_ATTR_SHAPE:
        g_string_append(s, "{ shape ");
        write_shape(s, a->v.shape.rank, a->v.shape.dims);
        g_string_append(s, " }");
        break;
    case PSIM_ATTR_TENSOR:
        g_string_append(s, "{ tensor ");
        if (a->v.t)
            write_tensor(s, a->v.t);
        else
            g_string_append(s, "{ }");
        g_string_append(s, " }");
        break;
    default:
        g_string_append(s, "{ list {");
        for (int32_t i = 0; i < a->n; i++) {
            switch (a->type) {
            case PSIM_ATTR_INTS: g_string_append_printf(s, " i: %" G_GINT64_FORMAT, a->v.ints[i]); break;
            case PSIM_ATTR_FLOATS: g_string_append(s, " f: "); write_float(s, a->v.floats[i]); break;
            case PSIM_ATTR_STRINGS:
                g_string_append(s, " s: ");
                psim__pbtxt_quote(s, a->v.strs[i], strlen(a->v.strs[i]));
                break;
            case PSIM_ATTR_BOOLS: g_string_append_printf(s, " b: %s", a->v.bools[i] ? "true" : "false"); break;
            case PSIM_ATTR_DTYPES: g_string_append_printf(s, " type: %s", tf_type_name(a->v.dts[i])); break;
            case PSIM_ATTR_SHAPES:
                g_string_append(s, " shape ");
                write_shape(s, a->v.shapes[i].rank, a->v.shapes[i].dims);
                break;
            case PSIM_ATTR_TENSORS:
                g_string_append(s, " tensor ");
                if (a->v.ts[i])
                    write_tensor(s, a->v.ts[i]);
                else
                    g_string_append(s, "{ }");
                break;
            default: break;
            }
        }
        g_string_append(s, " } }");
    }
}

static void write_attr(GString *s, const char *name, const PsimAttr *a)
{
    indent(s, 1);
    g_string_append(s, "attr { key: ");
    psim__pbtxt_quote(s, name, strlen(name));
    g_string_append(s, " value ");
    write_attr_value(s, a);
    g_string_append(s, " }\n");
}

/* How an IR op is written in TF: its TF name, the attrs the importer added (not written), and
 * where a constant axis input goes back (-1: none; INT_MAX: last). */
typedef struct {
    const char *ir, *tf;
    const char *skip[4];
    const char *axis_attr; /* the attr holding the constant input's value */
    int axis_pos;
} Reverse;

static const Reverse reverses[] = {
    {"Add", "AddV2", {NULL}, NULL, -1},
    {"Div", "RealDiv", {NULL}, NULL, -1},
    {"Max", "Maximum", {NULL}, NULL, -1},
    {"Min", "Minimum", {NULL}, NULL, -1},
    {"Where", "SelectV2", {NULL}, NULL, -1},
    {"LessOrEqual", "LessEqual", {NULL}, NULL, -1},
    {"GreaterOrEqual", "GreaterEqual", {NULL}, NULL, -1},
    {"And", "LogicalAnd", {NULL}, NULL, -1},
    {"Or", "LogicalOr", {NULL}, NULL, -1},
    {"Not", "LogicalNot", {NULL}, NULL, -1},
    {"Mod", "FloorMod", {NULL}, NULL, -1},
    {"IsNaN", "IsNan", {NULL}, NULL, -1},
    {"Reshape", "Reshape", {"allowzero"}, NULL, -1},
    {"Cast", "Cast", {"to"}, NULL, -1},
    {"Squeeze", "Squeeze", {"axes"}, NULL, -1},
    {"Concat", "ConcatV2", {"axis"}, "axis", G_MAXINT},
    {"Split", "Split", {"axis", "num_outputs"}, "axis", 0},
    {"Transpose", "Transpose", {"perm"}, "perm", 1},
    {"Gather", "GatherV2", {"axis"}, "axis", 2},
    {"ReduceMean", "Mean", {"axes", "keepdims", "noop_with_empty_axes"}, "axes", 1},
    {"ReduceSum", "Sum", {"axes", "keepdims", "noop_with_empty_axes"}, "axes", 1},
    {"ReduceMax", "Max", {"axes", "keepdims", "noop_with_empty_axes"}, "axes", 1},
    {"ReduceMin", "Min", {"axes", "keepdims", "noop_with_empty_axes"}, "axes", 1},
    {"ReduceProd", "Prod", {"axes", "keepdims", "noop_with_empty_axes"}, "axes", 1},
};

static const Reverse *reverse_of(const PsimNode *n)
{
    for (guint i = 0; i < G_N_ELEMENTS(reverses); i++)
        if (!strcmp(n->op, reverses[i].ir))
            return &reverses[i];
    return NULL;
}

static gboolean skipped(const Reverse *r, const char *attr)
{
    for (int i = 0; r && i < 4 && r->skip[i]; i++)
        if (!strcmp(r->skip[i], attr))
            return TRUE;
    return FALSE;
}

/* The attr's ints (INT as one) equal the tensor's values. */
static gboolean tensor_matches(const PsimTensor *t, const PsimAttr *a)
{
    if (!t || !a || t->dtype == PSIM_DTYPE_STRING || t->rank > 1)
        return FALSE;
    const int64_t *v = a->type == PSIM_ATTR_INT ? &a->v.i : a->type == PSIM_ATTR_INTS ? a->v.ints : NULL;
    int32_t n = a->type == PSIM_ATTR_INT ? 1 : a->n;
    /* A scalar and a one-element vector both give one axis; no axes (an INTS attr of length 0
     * has no array) match an empty tensor. */
    if (a->type != PSIM_ATTR_INT && a->type != PSIM_ATTR_INTS)
        return FALSE;
    if ((!v && n > 0) || t->n_elems != n)
        return FALSE;
    for (int32_t i = 0; i < n; i++)
        if (psim_tensor_get_i64(t, i) != v[i])
            return FALSE;
    return TRUE;
}

static void write_ref(GString *s, const char *ref)
{
    indent(s, 1);
    g_string_append(s, "input: ");
    psim__pbtxt_quote(s, ref, strlen(ref));
    g_string_append_c(s, '\n');
}

/* Exported node names: a name TF could not parse back (':' or a leading '^', as ONNX tensor
 * names have) is rewritten, with a suffix where needed to stay unique. */
typedef struct {
    const PsimGraph *g;
    const char **names; /* by node id */
    GHashTable *taken;  /* exported names in use */
} Names;

static const char *tf_name(const Names *nm, int32_t id)
{
    return nm->names[id];
}

static char *port_ref(const Names *nm, PsimPort p)
{
    const char *src = tf_name(nm, p.node);
    return p.index ? g_strdup_printf("%s:%d", src, p.index) : g_strdup(src);
}

/* An axis Const the exporter adds for a node whose axis has no Const input any more. It is
 * written exactly as the Const the importer makes of it would be exported (dtype, then value as
 * tensor_content), so that a second export gives the same text. */
static void write_axis_const(GString *s, const char *name, const PsimAttr *a)
{
    int32_t n = a->type == PSIM_ATTR_INT ? 1 : a->n;
    int64_t len = n;
    g_autoptr(PsimTensor) t =
        psim_tensor_new(PSIM_DTYPE_INT64, a->type == PSIM_ATTR_INTS ? 1 : 0, &len, NULL);
    if (n)
        memcpy(t->data, a->type == PSIM_ATTR_INT ? &a->v.i : a->v.ints, (size_t)n * sizeof(int64_t));
    g_string_append(s, "node {\n");
    indent(s, 1);
    g_string_append(s, "name: ");
    psim__pbtxt_quote(s, name, strlen(name));
    g_string_append(s, "\n  op: \"Const\"\n");
    PsimAttr dt = {.name = "dtype", .type = PSIM_ATTR_DTYPE, .v.dt = PSIM_DTYPE_INT64};
    write_attr(s, "dtype", &dt);
    PsimAttr value = {.name = "value", .type = PSIM_ATTR_TENSOR, .v.t = t};
    write_attr(s, "value", &value);
    g_string_append(s, "}\n");
}

static const char *tf_op_name(const PsimNode *n, const Reverse *r, char *buf, size_t len)
{
    if (r) {
        if (!strcmp(n->op, "Split") && n->n_inputs >= 2 && n->inputs[1].node >= 0)
            return "SplitV";
        /* The importer reads an NHWC BiasAdd as an Add and keeps its data_format, which no other
         * Add has (AddV2 has no such attr). */
        if (!strcmp(n->op, "Add") && psim_node_attr(n, "data_format"))
            return "BiasAdd";
        return r->tf;
    }
    /* "TfMaxPool": a TF op renamed on import because an IR op of another meaning has its name. */
    if (!strncmp(n->op, "Tf", 2) && g_ascii_isupper(n->op[2])) {
        g_strlcpy(buf, n->op + 2, len);
        return buf;
    }
    return n->op;
}

static void write_string_attr(GString *s, const char *name, const char *v)
{
    PsimAttr a = {.name = name, .type = PSIM_ATTR_STRING, .v.s = v};
    write_attr(s, name, &a);
}

static void write_device(GString *s, const char *dev)
{
    if (!dev)
        return;
    indent(s, 1);
    g_string_append(s, "device: ");
    psim__pbtxt_quote(s, dev, strlen(dev));
    g_string_append_c(s, '\n');
}

/* A plan's Send or Recv (attr "key" = "SRC;DST;TENSOR") as TF's _Send/_Recv, with the attrs TF's
 * graph partitioner gives them (in its alphabetical order). A Recv has no inputs in TF: the
 * control edge from its Send only orders the pair inside placesim's one graph. A control
 * transfer sends a dummy scalar, as TF's partitioner does, from a Const that waits for the
 * producer. */
static void write_transfer(GString *s, const Names *nm, const PsimNode *n, gboolean send)
{
    const PsimGraph *g = nm->g;
    g_auto(GStrv) parts = g_strsplit(psim_node_attr_string(n, "key", ""), ";", 3);
    const char *src = parts[0] ? parts[0] : "", *dst = src[0] && parts[1] ? parts[1] : "";
    const char *tensor = dst[0] && parts[2] ? parts[2] : "";
    gboolean control = psim_node_attr_int(n, "control", 0) != 0;
    const char *name = tf_name(nm, n->id);
    g_autofree char *dummy = NULL;
    PsimDType dt = PSIM_DTYPE_FLOAT32;
    if (send && control) {
        g_autofree char *base = g_strconcat(name, "/dummy", NULL);
        dummy = g_strdup(base);
        for (int i = 1; g_hash_table_contains(nm->taken, dummy); i++) {
            g_free(dummy);
            dummy = g_strdup_printf("%s_%d", base, i);
        }
        g_hash_table_add(nm->taken, g_strdup(dummy));
        g_string_append(s, "node {\n  name: ");
        psim__pbtxt_quote(s, dummy, strlen(dummy));
        g_string_append(s, "\n  op: \"Const\"\n");
        for (int32_t k = 0; k < n->n_controls; k++) {
            g_autofree char *ref = g_strconcat("^", tf_name(nm, n->controls[k]), NULL);
            write_ref(s, ref);
        }
        write_device(s, src);
        g_string_append(s, "  attr { key: \"dtype\" value { type: DT_FLOAT } }\n"
                           "  attr { key: \"value\" value { tensor { dtype: DT_FLOAT tensor_shape { }"
                           " float_val: 0 } } }\n}\n");
    } else if (send && n->n_inputs > 0 && n->inputs[0].node >= 0) {
        const PsimNode *u = psim_graph_node(g, n->inputs[0].node);
        dt = u->outputs[n->inputs[0].index].dtype;
    } else if (!send && !control && n->n_outputs > 0) {
        dt = n->outputs[0].dtype;
    }
    g_string_append(s, "node {\n  name: ");
    psim__pbtxt_quote(s, name, strlen(name));
    g_string_append(s, send ? "\n  op: \"_Send\"\n" : "\n  op: \"_Recv\"\n");
    if (dummy) {
        write_ref(s, dummy);
    } else if (send) {
        for (int32_t k = 0; k < n->n_inputs; k++) {
            g_autofree char *ref = port_ref(nm, n->inputs[k]);
            write_ref(s, ref);
        }
        for (int32_t k = 0; k < n->n_controls; k++) {
            g_autofree char *ref = g_strconcat("^", tf_name(nm, n->controls[k]), NULL);
            write_ref(s, ref);
        }
    }
    write_device(s, n->assigned_device ? n->assigned_device : n->device);
    PsimAttr t = {.name = "T", .type = PSIM_ATTR_DTYPE, .v.dt = dt};
    if (send)
        write_attr(s, "T", &t);
    PsimAttr b = {.name = "client_terminated", .type = PSIM_ATTR_BOOL, .v.b = FALSE};
    write_attr(s, "client_terminated", &b);
    write_string_attr(s, "recv_device", dst);
    write_string_attr(s, "send_device", src);
    PsimAttr inc = {.name = "send_device_incarnation", .type = PSIM_ATTR_INT, .v.i = 1};
    write_attr(s, "send_device_incarnation", &inc);
    write_string_attr(s, "tensor_name", tensor);
    if (!send)
        write_attr(s, "tensor_type", &t);
    g_string_append(s, "}\n");
}

/* Whether n is a plan's Send or Recv (partitioning gives them a rendezvous key). */
static gboolean is_transfer(const PsimNode *n, gboolean *send)
{
    *send = !strcmp(n->op, "Send");
    return (*send || !strcmp(n->op, "Recv")) && psim_node_attr(n, "key");
}

static void write_node(GString *s, const Names *nm, const PsimNode *n)
{
    gboolean send;
    if (is_transfer(n, &send)) {
        write_transfer(s, nm, n, send);
        return;
    }
    const PsimGraph *g = nm->g;
    GHashTable *names = nm->taken;
    const Reverse *r = reverse_of(n);
    const PsimAttr *axis = r && r->axis_attr ? psim_node_attr(n, r->axis_attr) : NULL;
    if (axis && axis->type != PSIM_ATTR_INT && axis->type != PSIM_ATTR_INTS)
        axis = NULL;
    /* The control input that carried the constant axis on import, if it still matches. */
    int32_t axis_src = -1, axis_k = -1;
    g_autofree char *axis_name = NULL;
    if (axis) {
        for (int32_t k = 0; k < n->n_controls && axis_src < 0; k++) {
            const PsimNode *c = psim_graph_node(g, n->controls[k]);
            if (c->n_outputs > 0 && tensor_matches(c->outputs[0].value, axis))
                axis_src = n->controls[k], axis_k = k;
        }
        if (axis_src < 0) {
            g_autofree char *base = g_strconcat(tf_name(nm, n->id), "/axis", NULL);
            axis_name = g_strdup(base);
            for (int i = 1; g_hash_table_contains(names, axis_name); i++) {
                g_free(axis_name);
                axis_name = g_strdup_printf("%s_%d", base, i);
            }
            g_hash_table_add(names, g_strdup(axis_name));
            (void)names;
            write_axis_const(s, axis_name, axis);
        }
    }
    char buf[256];
    const char *op = tf_op_name(n, r, buf, sizeof buf);
    g_string_append(s, "node {\n");
    indent(s, 1);
    g_string_append(s, "name: ");
    psim__pbtxt_quote(s, tf_name(nm, n->id), strlen(tf_name(nm, n->id)));
    g_string_append(s, "\n");
    indent(s, 1);
    g_string_append(s, "op: ");
    psim__pbtxt_quote(s, op, strlen(op));
    g_string_append(s, "\n");
    const char *axis_ref = axis ? (axis_src >= 0 ? tf_name(nm, axis_src) : axis_name) : NULL;
    int pos = axis ? (r->axis_pos == G_MAXINT ? n->n_inputs : r->axis_pos) : -1;
    /* A Split with a sizes input is a SplitV: value, sizes, axis. */
    if (axis && !strcmp(n->op, "Split") && !strcmp(op, "SplitV"))
        pos = 2;
    int32_t written = 0;
    for (int32_t k = 0; k <= n->n_inputs; k++) {
        if (written == pos)
            write_ref(s, axis_ref), written++;
        if (k == n->n_inputs)
            break;
        if (n->inputs[k].node < 0)
            continue; /* absent optional input */
        g_autofree char *ref = port_ref(nm, n->inputs[k]);
        write_ref(s, ref);
        written++;
    }
    if (axis && written <= pos)
        write_ref(s, axis_ref);
    for (int32_t k = 0; k < n->n_controls; k++) {
        /* Only the control the importer made of the axis input; the file's own stay. */
        if (k == axis_k)
            continue;
        g_autofree char *ref = g_strconcat("^", tf_name(nm, n->controls[k]), NULL);
        write_ref(s, ref);
    }
    write_device(s, n->assigned_device ? n->assigned_device : n->device);
    gboolean is_const = !strcmp(n->op, "Const") || !strcmp(n->op, "Constant");
    gboolean has_value = FALSE, has_dtype = FALSE, has_shape = FALSE;
    /* An IR op that TF knows by another meaning, or not at all, says so (below), so that the
     * importer reads it back as this IR op rather than as a TF op of that name ("TfConv"). */
    gboolean marked = !r && op == n->op && psim_op_lookup(n->op) && !psim__tf_op_keeps_name(n->op);
    for (int32_t i = 0; i < n->n_attrs; i++) {
        const PsimAttr *a = &n->attrs[i];
        if (skipped(r, a->name) || (is_const && !strcmp(a->name, "fill")) ||
            (marked && g_str_has_prefix(a->name, "_placesim_")))
            continue;
        has_value |= !strcmp(a->name, "value");
        has_dtype |= !strcmp(a->name, "dtype");
        has_shape |= !strcmp(a->name, "shape");
        write_attr(s, a->name, a);
    }
    /* Attrs TF needs that other formats keep elsewhere. */
    if (r && !strcmp(n->op, "Cast") && !psim_node_attr(n, "DstT")) {
        PsimAttr t = {.name = "DstT", .type = PSIM_ATTR_DTYPE};
        t.v.dt = (PsimDType)psim_node_attr_int(n, "to", 0);
        write_attr(s, "DstT", &t);
    }
    /* keep_dims is false when absent in TF, so only a true one is written: a TF node without
     * it reads back without it. */
    if (r && !strncmp(n->op, "Reduce", 6) && !psim_node_attr(n, "keep_dims") &&
        psim_node_attr_int(n, "keepdims", 1) != 0) {
        PsimAttr kd = {.name = "keep_dims", .type = PSIM_ATTR_BOOL};
        kd.v.b = psim_node_attr_int(n, "keepdims", 1) != 0;
        write_attr(s, "keep_dims", &kd);
    }
    if (r && !strcmp(n->op, "Squeeze") && !psim_node_attr(n, "squeeze_dims") &&
        psim_node_attr(n, "axes")) {
        PsimAttr sd = *psim_node_attr(n, "axes");
        sd.name = "squeeze_dims";
        write_attr(s, "squeeze_dims", &sd);
    }
    if (r && !strcmp(n->op, "Split") && !psim_node_attr(n, "num_split")) {
        PsimAttr ns = {.name = "num_split", .type = PSIM_ATTR_INT};
        ns.v.i = n->n_outputs;
        write_attr(s, "num_split", &ns);
    }
    const PsimOutput *o0 = n->n_outputs > 0 ? &n->outputs[0] : NULL;
    if (is_const && !has_value && o0) {
        indent(s, 1);
        g_string_append(s, "attr { key: \"value\" value { tensor ");
        if (o0->value)
            write_tensor(s, o0->value);
        else
            write_fill_tensor(s, o0, psim_node_attr_float(n, "fill", 0));
        g_string_append(s, " } }\n");
    }
    if ((is_const || !strcmp(n->op, "Placeholder")) && !has_dtype && o0 && o0->dtype) {
        PsimAttr dt = {.name = "dtype", .type = PSIM_ATTR_DTYPE};
        dt.v.dt = o0->dtype;
        write_attr(s, "dtype", &dt);
    }
    /* No shape attr is TF's unknown rank: writing one would add an attr on the way back. */
    if (!strcmp(n->op, "Placeholder") && !has_shape && o0 && o0->rank >= 0) {
        PsimAttr sh = {.name = "shape", .type = PSIM_ATTR_SHAPE};
        sh.v.shape.rank = o0->rank;
        sh.v.shape.dims = o0->dims;
        write_attr(s, "shape", &sh);
    }
    if (marked) {
        PsimAttr ir = {.name = PSIM_TF_IR_OP_ATTR, .type = PSIM_ATTR_STRING, .v.s = n->op};
        write_attr(s, PSIM_TF_IR_OP_ATTR, &ir);
        const PsimOpDef *d = psim_op_lookup(n->op);
        int32_t k = d->n_outputs ? d->n_outputs(n) : d->n_outputs_fixed < 0 ? 0 : MAX(1, d->n_outputs_fixed);
        if (k != n->n_outputs) {
            PsimAttr no = {.name = PSIM_TF_IR_OUTPUTS_ATTR, .type = PSIM_ATTR_INT, .v.i = n->n_outputs};
            write_attr(s, PSIM_TF_IR_OUTPUTS_ATTR, &no);
        }
    }
    g_string_append(s, "}\n");
}

char *psim_export_pbtxt(const PsimGraph *g, GError **error)
{
    (void)error;
    GString *s = g_string_new(NULL);
    int32_t nn = psim_graph_n_nodes(g);
    Names nm = {.g = g, .names = g_new0(const char *, nn ? nn : 1)};
    nm.taken = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func(g_free);
    for (int32_t i = 0; i < nn; i++) {
        const char *name = psim_graph_node(g, i)->name;
        if (!strchr(name, ':') && name[0] != '^')
            g_hash_table_add(nm.taken, g_strdup(name));
    }
    for (int32_t i = 0; i < nn; i++) {
        const char *name = psim_graph_node(g, i)->name;
        if (!strchr(name, ':') && name[0] != '^') {
            nm.names[i] = name;
            continue;
        }
        g_autofree char *base = g_strdup(name[0] == '^' ? name + 1 : name);
        g_strdelimit(base, ":", '_');
        if (!*base) {
            g_free(base);
            base = g_strdup("node");
        }
        char *fixed = g_strdup(base);
        for (int k = 1; g_hash_table_contains(nm.taken, fixed); k++) {
            g_free(fixed);
            fixed = g_strdup_printf("%s_%d", base, k);
        }
        g_hash_table_add(nm.taken, g_strdup(fixed));
        g_ptr_array_add(owned, fixed);
        nm.names[i] = fixed;
    }
    for (int32_t i = 0; i < nn; i++)
        write_node(s, &nm, psim_graph_node(g, i));
    g_string_append(s, "versions {\n  producer: 27\n}\n");
    g_hash_table_destroy(nm.taken);
    g_free(nm.names);
    return g_string_free(s, FALSE);
}
