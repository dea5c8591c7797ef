/* placesim graph JSON ("placesim.graph/1"): reader through json-glib, and a writer of our own so
 * that numbers keep their type and export -> import -> export is byte-identical. */
#include "graph/graph-private.h"
#include "placesim/formats.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#define FORMAT_KEY "placesim.graph/1"

/* ---- writer ---- */

void psim__json_string(GString *s, const char *v)
{
    g_string_append_c(s, '"');
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        switch (*p) {
        case '"': g_string_append(s, "\\\""); break;
        case '\\': g_string_append(s, "\\\\"); break;
        case '\n': g_string_append(s, "\\n"); break;
        case '\r': g_string_append(s, "\\r"); break;
        case '\t': g_string_append(s, "\\t"); break;
        default:
            if (*p < 0x20)
                g_string_append_printf(s, "\\u%04x", *p);
            else
                g_string_append_c(s, (char)*p);
        }
    }
    g_string_append_c(s, '"');
}

/* Shortest text that reads back as the same double; force_point keeps a float a float. */
void psim__json_double(GString *s, double v, gboolean force_point)
{
    if (!isfinite(v)) {
        /* JSON has no inf/nan: strings that our reader turns back into numbers. */
        g_string_append(s, isnan(v) ? "\"nan\"" : v > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        g_snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (g_ascii_strtod(buf, NULL) == v)
            break;
    }
    g_string_append(s, buf);
    if (force_point && !strpbrk(buf, ".eE"))
        g_string_append(s, ".0");
}

static void write_dims(GString *s, int32_t rank, const int64_t *dims)
{
    g_string_append_c(s, '[');
    for (int32_t i = 0; i < rank; i++) {
        if (i)
            g_string_append(s, ", ");
        if (dims[i] < 0)
            g_string_append(s, "null");
        else
            g_string_append_printf(s, "%" G_GINT64_FORMAT, dims[i]);
    }
    g_string_append_c(s, ']');
}

static void write_tensor(GString *s, const PsimTensor *t)
{
    g_string_append(s, "{\"dtype\": ");
    psim__json_string(s, psim_dtype_name(t->dtype));
    g_string_append(s, ", \"shape\": ");
    write_dims(s, t->rank, t->dims);
    if (t->dtype == PSIM_DTYPE_STRING) {
        g_string_append(s, ", \"data\": [");
        for (int64_t i = 0; i < t->n_elems; i++) {
            if (i)
                g_string_append(s, ", ");
            const char *v = ((char **)t->data)[i];
            psim__json_string(s, v ? v : "");
        }
        g_string_append(s, "]}");
        return;
    }
    if (t->n_elems <= 64 && t->dtype != PSIM_DTYPE_FLOAT16 && t->dtype != PSIM_DTYPE_BFLOAT16 &&
        t->dtype != PSIM_DTYPE_COMPLEX64 && t->dtype != PSIM_DTYPE_COMPLEX128) {
        g_string_append(s, ", \"data\": [");
        gboolean fl = t->dtype == PSIM_DTYPE_FLOAT32 || t->dtype == PSIM_DTYPE_FLOAT64;
        for (int64_t i = 0; i < t->n_elems; i++) {
            if (i)
                g_string_append(s, ", ");
            if (fl)
                psim__json_double(s, psim_tensor_get_f64(t, i), TRUE);
            else if (t->dtype == PSIM_DTYPE_UINT64)
                g_string_append_printf(s, "%" G_GUINT64_FORMAT, ((const uint64_t *)t->data)[i]);
            else
                g_string_append_printf(s, "%" G_GINT64_FORMAT, psim_tensor_get_i64(t, i));
        }
        g_string_append(s, "]}");
        return;
    }
    g_autofree char *b64 = g_base64_encode(t->data, t->nbytes);
    g_string_append(s, ", \"data_b64\": \"");
    g_string_append(s, b64);
    g_string_append(s, "\"}");
}

static void write_attr(GString *s, const PsimAttr *a)
{
    switch (a->type) {
    case PSIM_ATTR_INT: g_string_append_printf(s, "%" G_GINT64_FORMAT, a->v.i); break;
    case PSIM_ATTR_FLOAT: psim__json_double(s, a->v.f, TRUE); break;
    case PSIM_ATTR_STRING: psim__json_string(s, a->v.s); break;
    case PSIM_ATTR_BOOL: g_string_append(s, a->v.b ? "true" : "false"); break;
    case PSIM_ATTR_DTYPE:
        g_string_append(s, "{\"dtype\": ");
        psim__json_string(s, psim_dtype_name(a->v.dt));
        g_string_append_c(s, '}');
        break;
    case PSIM_ATTR_SHAPE:
        g_string_append(s, "{\"shape\": ");
        if (a->v.shape.rank < 0)
            g_string_append(s, "null");
        else
            write_dims(s, a->v.shape.rank, a->v.shape.dims);
        g_string_append_c(s, '}');
        break;
    case PSIM_ATTR_TENSOR:
        g_string_append(s, "{\"tensor\": ");
        if (a->v.t)
            write_tensor(s, a->v.t);
        else
            g_string_append(s, "null");
        g_string_append_c(s, '}');
        break;
    default: {
        /* Lists: a typed wrapper so that empty lists and float lists keep their type. */
        static const char *const keys[] = {[PSIM_ATTR_INTS] = "ints", [PSIM_ATTR_FLOATS] = "floats",
                                           [PSIM_ATTR_STRINGS] = "strings", [PSIM_ATTR_BOOLS] = "bools",
                                           [PSIM_ATTR_DTYPES] = "dtypes", [PSIM_ATTR_SHAPES] = "shapes",
                                           [PSIM_ATTR_TENSORS] = "tensors"};
        g_string_append_printf(s, "{\"%s\": [", keys[a->type]);
        for (int32_t i = 0; i < a->n; i++) {
            if (i)
                g_string_append(s, ", ");
            switch (a->type) {
            case PSIM_ATTR_INTS: g_string_append_printf(s, "%" G_GINT64_FORMAT, a->v.ints[i]); break;
            case PSIM_ATTR_FLOATS: psim__json_double(s, a->v.floats[i], TRUE); break;
            case PSIM_ATTR_STRINGS: psim__json_string(s, a->v.strs[i]); break;
            case PSIM_ATTR_BOOLS: g_string_append(s, a->v.bools[i] ? "true" : "false"); break;
            case PSIM_ATTR_DTYPES: psim__json_string(s, psim_dtype_name(a->v.dts[i])); break;
            case PSIM_ATTR_SHAPES:
                if (a->v.shapes[i].rank < 0)
                    g_string_append(s, "null");
                else
                    write_dims(s, a->v.shapes[i].rank, a->v.shapes[i].dims);
                break;
            case PSIM_ATTR_TENSORS:
                if (a->v.ts[i])
                    write_tensor(s, a->v.ts[i]);
                else
                    g_string_append(s, "null");
                break;
            default: break;
            }
        }
        g_string_append(s, "]}");
    }
    }
}

char *psim_export_json(const PsimGraph *g, gsize *len)
{
    GString *s = g_string_sized_new(4096);
    g_string_append(s, "{\"format\": \"" FORMAT_KEY "\", \"name\": ");
    psim__json_string(s, psim_graph_name(g));
    /* ONNX ops changed meaning between opsets: keep the graph's so that a re-import infers the
     * same shapes (Dropout's mask dtype, Softmax's axis handling). */
    if (psim_graph_opset(g) > 0)
        g_string_append_printf(s, ", \"onnx_opset\": %" G_GINT64_FORMAT, psim_graph_opset(g));
    int32_t ni = psim_graph_n_inputs(g), no = psim_graph_n_outputs(g);
    if (ni) {
        g_string_append(s, ",\n \"inputs\": [");
        for (int32_t i = 0; i < ni; i++) {
            if (i)
                g_string_append(s, ", ");
            psim__json_string(s, psim_graph_node(g, psim_graph_input(g, i))->name);
        }
        g_string_append_c(s, ']');
    }
    if (no) {
        g_string_append(s, ",\n \"outputs\": [");
        for (int32_t i = 0; i < no; i++) {
            if (i)
                g_string_append(s, ", ");
            g_autofree char *r = psim_port_to_string(g, psim_graph_output(g, i));
            psim__json_string(s, r);
        }
        g_string_append_c(s, ']');
    }
    g_string_append(s, ",\n \"nodes\": [");
    int32_t n = psim_graph_n_nodes(g);
    for (int32_t i = 0; i < n; i++) {
        const PsimNode *v = psim_graph_node(g, i);
        g_string_append(s, i ? ",\n  {" : "\n  {");
        g_string_append(s, "\"name\": ");
        psim__json_string(s, v->name);
        g_string_append(s, ", \"op\": ");
        psim__json_string(s, v->op);
        if (v->domain) {
            g_string_append(s, ", \"domain\": ");
            psim__json_string(s, v->domain);
        }
        if (v->n_inputs || v->n_controls) {
            g_string_append(s, ", \"inputs\": [");
            gboolean first = TRUE;
            for (int32_t k = 0; k < v->n_inputs; k++) {
                if (!first)
                    g_string_append(s, ", ");
                first = FALSE;
                g_autofree char *r = psim_port_to_string(g, v->inputs[k]);
                psim__json_string(s, r);
            }
            for (int32_t k = 0; k < v->n_controls; k++) {
                if (!first)
                    g_string_append(s, ", ");
                first = FALSE;
                g_string_append(s, "\"^");
                GString *tmp = g_string_new(NULL);
                psim__json_string(tmp, psim_graph_node(g, v->controls[k])->name);
                g_string_append_len(s, tmp->str + 1, (gssize)tmp->len - 1);
                g_string_free(tmp, TRUE);
            }
            g_string_append_c(s, ']');
        }
        if (v->n_outputs) {
            g_string_append(s, ", \"outputs\": [");
            for (int32_t k = 0; k < v->n_outputs; k++) {
                const PsimOutput *o = &v->outputs[k];
                g_string_append(s, k ? ", {" : "{");
                gboolean any = FALSE;
                if (o->name) {
                    g_string_append(s, "\"name\": ");
                    psim__json_string(s, o->name);
                    any = TRUE;
                }
                if (o->dtype != PSIM_DTYPE_UNDEFINED) {
                    g_string_append(s, any ? ", \"dtype\": " : "\"dtype\": ");
                    psim__json_string(s, psim_dtype_name(o->dtype));
                    any = TRUE;
                }
                if (o->rank >= 0) {
                    g_string_append(s, any ? ", \"shape\": " : "\"shape\": ");
                    write_dims(s, o->rank, o->dims);
                    any = TRUE;
                }
                gboolean derived = o->dtype != PSIM_DTYPE_UNDEFINED && o->dtype != PSIM_DTYPE_STRING &&
                                   psim_shape_elems(o->rank, o->dims) >= 0;
                if (o->bytes && !derived)
                    g_string_append_printf(s, "%s\"bytes\": %" G_GUINT64_FORMAT, any ? ", " : "",
                                           o->bytes);
                g_string_append_c(s, '}');
            }
            g_string_append_c(s, ']');
        }
        if (v->n_attrs) {
            g_string_append(s, ", \"attrs\": {");
            for (int32_t k = 0; k < v->n_attrs; k++) {
                if (k)
                    g_string_append(s, ", ");
                psim__json_string(s, v->attrs[k].name);
                g_string_append(s, ": ");
                write_attr(s, &v->attrs[k]);
            }
            g_string_append_c(s, '}');
        }
        if (v->device) {
            g_string_append(s, ", \"device\": ");
            psim__json_string(s, v->device);
        }
        if (v->assigned_device) {
            g_string_append(s, ", \"assigned_device\": ");
            psim__json_string(s, v->assigned_device);
        }
        if (v->flags & PSIM_NODE_PARAMETER)
            g_string_append(s, ", \"parameter\": true");
        if (v->n_costs) {
            g_string_append(s, ", \"cost_us\": {");
            for (int32_t k = 0; k < v->n_costs; k++) {
                if (k)
                    g_string_append(s, ", ");
                psim__json_string(s, v->costs[k].device);
                g_string_append(s, ": ");
                psim__json_double(s, v->costs[k].us, FALSE);
            }
            g_string_append_c(s, '}');
        }
        g_string_append_c(s, '}');
    }
    g_string_append(s, "\n ]}\n");
    if (len)
        *len = s->len;
    return g_string_free(s, FALSE);
}

/* ---- reader ---- */

typedef struct {
    const char *path;
    PsimGraph *g;
    const char *node; /* current node name for messages */
} Ctx;

static gboolean ctx_fail(const Ctx *c, GError **error, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean ctx_fail(const Ctx *c, GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_autofree char *line = c->node ? g_strdup_printf("%s: node '%s': %s", c->path, c->node, msg)
                                    : g_strdup_printf("%s: %s", c->path, msg);
    /* Keys and names from the file are echoed: keep the error on one line. */
    for (char *p = line + strlen(c->path); *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    g_set_error_literal(error, PSIM_ERROR, PSIM_ERROR_INPUT, line);
    return FALSE;
}

#define FAIL(...) return ctx_fail(c, error, __VA_ARGS__)

static gboolean is_number(JsonNode *n)
{
    if (!JSON_NODE_HOLDS_VALUE(n))
        return FALSE;
    GType t = json_node_get_value_type(n);
    return t == G_TYPE_INT64 || t == G_TYPE_DOUBLE;
}

static gboolean get_double(JsonNode *n, double *out)
{
    if (is_number(n)) {
        *out = json_node_get_double(n);
        return TRUE;
    }
    if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
        const char *s = json_node_get_string(n);
        if (!strcmp(s, "nan")) *out = NAN;
        else if (!strcmp(s, "inf")) *out = INFINITY;
        else if (!strcmp(s, "-inf")) *out = -INFINITY;
        else return FALSE;
        return TRUE;
    }
    return FALSE;
}

static gboolean read_dims(Ctx *c, JsonNode *jn, const char *what, int32_t *rank, int64_t **dims,
                          GError **error)
{
    if (!JSON_NODE_HOLDS_ARRAY(jn))
        FAIL("%s must be a list of dimensions", what);
    JsonArray *a = json_node_get_array(jn);
    guint n = json_array_get_length(a);
    if (n > 64)
        FAIL("%s has rank %u (at most 64)", what, n);
    *rank = (int32_t)n;
    *dims = psim_graph_alloc(c->g, sizeof(int64_t) * (n ? n : 1));
    for (guint i = 0; i < n; i++) {
        JsonNode *d = json_array_get_element(a, i);
        if (JSON_NODE_HOLDS_NULL(d)) {
            (*dims)[i] = PSIM_DIM_UNKNOWN;
        } else if (JSON_NODE_HOLDS_VALUE(d) && json_node_get_value_type(d) == G_TYPE_INT64) {
            int64_t v = json_node_get_int(d);
            if (v < -1)
                FAIL("%s: dimension %u is negative (%" G_GINT64_FORMAT ")", what, i, v);
            (*dims)[i] = v;
        } else {
            FAIL("%s: dimension %u is not an integer or null", what, i);
        }
    }
    int64_t known = 1;
    for (guint i = 0; i < n; i++)
        if ((*dims)[i] > 0) {
            if (known > PSIM_MAX_ELEMENTS / (*dims)[i])
                FAIL("%s has over 2^36 elements", what);
            known *= (*dims)[i];
        }
    return TRUE;
}

static PsimTensor *read_tensor(Ctx *c, JsonNode *jn, GError **error)
{
#define TFAIL(...)                                                                               \
    do {                                                                                         \
        ctx_fail(c, error, "tensor: " __VA_ARGS__);                                              \
        return NULL;                                                                             \
    } while (0)
    if (!JSON_NODE_HOLDS_OBJECT(jn))
        TFAIL("must be an object");
    JsonObject *o = json_node_get_object(jn);
    const char *dn = psim_json_node_string(json_object_get_member(o, "dtype"));
    PsimDType dt = psim_dtype_from_name(dn ? dn : "");
    if (dt == PSIM_DTYPE_UNDEFINED)
        TFAIL("unknown or missing dtype");
    int32_t rank = 0;
    int64_t *dims = NULL;
    if (json_object_has_member(o, "shape") &&
        !read_dims(c, json_object_get_member(o, "shape"), "tensor shape", &rank, &dims, error))
        return NULL;
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] < 0)
            TFAIL("shape dimension %d is unknown (a tensor's shape must be known)", i);
    g_autoptr(GError) terr = NULL;
    g_autoptr(PsimTensor) t = psim_tensor_new(dt, rank, dims, &terr);
    if (!t)
        TFAIL("%s", terr->message);
    if (json_object_has_member(o, "data_b64")) {
        const char *b = psim_json_node_string(json_object_get_member(o, "data_b64"));
        if (!b)
            TFAIL("data_b64 must be a string");
        gsize blen = 0;
        g_autofree guchar *raw = g_base64_decode(b, &blen);
        if (blen != t->nbytes)
            TFAIL("data_b64 holds %zu bytes, the shape needs %zu", (size_t)blen, t->nbytes);
        memcpy(t->data, raw, blen);
    } else if (json_object_has_member(o, "data")) {
        JsonNode *dn = json_object_get_member(o, "data");
        if (!JSON_NODE_HOLDS_ARRAY(dn))
            TFAIL("data must be a list");
        JsonArray *a = json_node_get_array(dn);
        if ((int64_t)json_array_get_length(a) != t->n_elems)
            TFAIL("data has %u values, the shape needs %" G_GINT64_FORMAT,
                  json_array_get_length(a), t->n_elems);
        for (int64_t i = 0; i < t->n_elems; i++) {
            JsonNode *e = json_array_get_element(a, (guint)i);
            double dv = 0;
            if (dt == PSIM_DTYPE_STRING) {
                if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_STRING)
                    TFAIL("string data must be strings");
                ((char **)t->data)[i] = g_strdup(json_node_get_string(e));
                continue;
            }
            if (!get_double(e, &dv))
                TFAIL("data value %" G_GINT64_FORMAT " is not a number", i);
            gint64 iv = JSON_NODE_HOLDS_VALUE(e) && json_node_get_value_type(e) == G_TYPE_INT64
                            ? json_node_get_int(e)
                        : dv != dv ? 0 : dv >= 9.2233720368547758e18 ? INT64_MAX
                        : dv <= -9.2233720368547758e18 ? INT64_MIN : (gint64)dv;
            void *d = t->data;
            switch (dt) {
            case PSIM_DTYPE_FLOAT32: ((float *)d)[i] = (float)dv; break;
            case PSIM_DTYPE_FLOAT64: ((double *)d)[i] = dv; break;
            case PSIM_DTYPE_INT8: ((int8_t *)d)[i] = (int8_t)iv; break;
            case PSIM_DTYPE_UINT8: ((uint8_t *)d)[i] = (uint8_t)iv; break;
            case PSIM_DTYPE_BOOL: ((uint8_t *)d)[i] = iv != 0; break;
            case PSIM_DTYPE_INT16: ((int16_t *)d)[i] = (int16_t)iv; break;
            case PSIM_DTYPE_UINT16: ((uint16_t *)d)[i] = (uint16_t)iv; break;
            case PSIM_DTYPE_INT32: ((int32_t *)d)[i] = (int32_t)iv; break;
            case PSIM_DTYPE_UINT32: ((uint32_t *)d)[i] = (uint32_t)iv; break;
            case PSIM_DTYPE_INT64: ((int64_t *)d)[i] = iv; break;
            case PSIM_DTYPE_UINT64: /* json-glib reads integers above INT64_MAX as doubles */
                ((uint64_t *)d)[i] = dv >= 9.2233720368547758e18 && dv < 1.8446744073709552e19
                                         ? (uint64_t)dv : (uint64_t)iv;
                break;
            default: TFAIL("dtype %s needs data_b64", psim_dtype_name(dt));
            }
        }
    }
    return g_steal_pointer(&t);
#undef TFAIL
}

static gboolean read_attr(Ctx *c, PsimNode *v, const char *name, JsonNode *jn, GError **error)
{
    PsimGraph *g = c->g;
    /* Tensors read for a "tensors" list: held until psim_graph_node_attr_set has taken its
     * references (function scope, so they outlive the block that reads them). */
    g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    if (JSON_NODE_HOLDS_VALUE(jn)) {
        GType t = json_node_get_value_type(jn);
        if (t == G_TYPE_INT64)
            psim_graph_node_attr_set_int(g, v, name, json_node_get_int(jn));
        else if (t == G_TYPE_DOUBLE)
            psim_graph_node_attr_set_float(g, v, name, json_node_get_double(jn));
        else if (t == G_TYPE_BOOLEAN)
            psim_graph_node_attr_set_bool(g, v, name, json_node_get_boolean(jn));
        else
            psim_graph_node_attr_set_string(g, v, name, json_node_get_string(jn));
        return TRUE;
    }
    if (JSON_NODE_HOLDS_ARRAY(jn)) {
        /* A bare list: ints if all are integers, else floats, else strings. */
        JsonArray *a = json_node_get_array(jn);
        guint n = json_array_get_length(a);
        gboolean all_int = TRUE, all_num = TRUE, all_str = TRUE;
        for (guint i = 0; i < n; i++) {
            JsonNode *e = json_array_get_element(a, i);
            GType t = JSON_NODE_HOLDS_VALUE(e) ? json_node_get_value_type(e) : G_TYPE_NONE;
            all_int &= t == G_TYPE_INT64;
            all_num &= t == G_TYPE_INT64 || t == G_TYPE_DOUBLE;
            all_str &= t == G_TYPE_STRING;
        }
        if (all_int || all_num) {
            g_autofree int64_t *iv = g_new(int64_t, n ? n : 1);
            g_autofree double *fv = g_new(double, n ? n : 1);
            for (guint i = 0; i < n; i++) {
                JsonNode *e = json_array_get_element(a, i);
                iv[i] = all_int ? json_node_get_int(e) : 0;
                fv[i] = json_node_get_double(e);
            }
            if (all_int)
                psim_graph_node_attr_set_ints(g, v, name, (int32_t)n, iv);
            else
                psim_graph_node_attr_set_floats(g, v, name, (int32_t)n, fv);
            return TRUE;
        }
        if (all_str) {
            g_autofree const char **sv = g_new(const char *, n ? n : 1);
            for (guint i = 0; i < n; i++)
                sv[i] = json_array_get_string_element(a, i);
            psim_graph_node_attr_set_strings(g, v, name, (int32_t)n, sv);
            return TRUE;
        }
        FAIL("attr '%s': a list must hold numbers or strings only", name);
    }
    if (!JSON_NODE_HOLDS_OBJECT(jn))
        FAIL("attr '%s' has an unsupported value", name);
    JsonObject *o = json_node_get_object(jn);
    if (json_object_get_size(o) != 1)
        FAIL("attr '%s': a typed value is an object with one key", name);
    g_autoptr(GList) keys = json_object_get_members(o);
    const char *key = keys->data;
    JsonNode *val = json_object_get_member(o, key);
    PsimAttr a = {.name = name};
    if (!strcmp(key, "dtype")) {
        a.type = PSIM_ATTR_DTYPE;
        const char *dn = psim_json_node_string(val);
        a.v.dt = psim_dtype_from_name(dn);
        /* "undefined" is what the writer gives a dtype the IR has no type for (TF resource). */
        if (a.v.dt == PSIM_DTYPE_UNDEFINED && g_strcmp0(dn, "undefined"))
            FAIL("attr '%s': unknown dtype", name);
    } else if (!strcmp(key, "shape")) {
        a.type = PSIM_ATTR_SHAPE;
        a.v.shape.rank = PSIM_RANK_UNKNOWN;
        if (!JSON_NODE_HOLDS_NULL(val) &&
            !read_dims(c, val, "shape attr", &a.v.shape.rank, &a.v.shape.dims, error))
            return FALSE;
    } else if (!strcmp(key, "tensor")) {
        a.type = PSIM_ATTR_TENSOR;
        if (!JSON_NODE_HOLDS_NULL(val) && !(a.v.t = read_tensor(c, val, error)))
            return FALSE;
        psim_graph_node_attr_set(g, v, &a);
        psim_tensor_unref(a.v.t);
        return TRUE;
    } else {
        static const struct {
            const char *key;
            PsimAttrType type;
        } lists[] = {{"ints", PSIM_ATTR_INTS},       {"floats", PSIM_ATTR_FLOATS},
                     {"strings", PSIM_ATTR_STRINGS}, {"bools", PSIM_ATTR_BOOLS},
                     {"dtypes", PSIM_ATTR_DTYPES},   {"shapes", PSIM_ATTR_SHAPES},
                     {"tensors", PSIM_ATTR_TENSORS}};
        gboolean found = FALSE;
        for (size_t i = 0; i < G_N_ELEMENTS(lists); i++)
            if (!strcmp(key, lists[i].key)) {
                a.type = lists[i].type;
                found = TRUE;
            }
        if (!found)
            FAIL("attr '%s': unknown typed key '%s'", name, key);
        if (!JSON_NODE_HOLDS_ARRAY(val))
            FAIL("attr '%s': '%s' must be a list", name, key);
        JsonArray *arr = json_node_get_array(val);
        guint n = json_array_get_length(arr);
        a.n = (int32_t)n;
        size_t cnt = n ? n : 1;
        switch (a.type) {
        case PSIM_ATTR_INTS: a.v.ints = psim_graph_alloc(g, cnt * sizeof(int64_t)); break;
        case PSIM_ATTR_FLOATS: a.v.floats = psim_graph_alloc(g, cnt * sizeof(double)); break;
        case PSIM_ATTR_STRINGS: a.v.strs = psim_graph_alloc(g, cnt * sizeof(char *)); break;
        case PSIM_ATTR_BOOLS: a.v.bools = psim_graph_alloc(g, cnt * sizeof(gboolean)); break;
        case PSIM_ATTR_DTYPES: a.v.dts = psim_graph_alloc(g, cnt * sizeof(PsimDType)); break;
        case PSIM_ATTR_SHAPES: a.v.shapes = psim_graph_alloc(g, cnt * sizeof(PsimShape)); break;
        case PSIM_ATTR_TENSORS: a.v.ts = psim_graph_alloc(g, cnt * sizeof(PsimTensor *)); break;
        default: break;
        }
        for (guint i = 0; i < n; i++) {
            JsonNode *e = json_array_get_element(arr, i);
            GType t = JSON_NODE_HOLDS_VALUE(e) ? json_node_get_value_type(e) : G_TYPE_NONE;
            switch (a.type) {
            case PSIM_ATTR_INTS:
                if (t != G_TYPE_INT64)
                    FAIL("attr '%s': ints must be integers", name);
                a.v.ints[i] = json_node_get_int(e);
                break;
            case PSIM_ATTR_FLOATS:
                if (!get_double(e, &a.v.floats[i]))
                    FAIL("attr '%s': floats must be numbers", name);
                break;
            case PSIM_ATTR_STRINGS:
                if (t != G_TYPE_STRING)
                    FAIL("attr '%s': strings must be strings", name);
                a.v.strs[i] = json_node_get_string(e);
                break;
            case PSIM_ATTR_BOOLS:
                if (t != G_TYPE_BOOLEAN)
                    FAIL("attr '%s': bools must be true or false", name);
                a.v.bools[i] = json_node_get_boolean(e);
                break;
            case PSIM_ATTR_DTYPES:
                a.v.dts[i] = psim_dtype_from_name(t == G_TYPE_STRING ? json_node_get_string(e) : NULL);
                if (a.v.dts[i] == PSIM_DTYPE_UNDEFINED &&
                    g_strcmp0(t == G_TYPE_STRING ? json_node_get_string(e) : NULL, "undefined"))
                    FAIL("attr '%s': unknown dtype", name);
                break;
            case PSIM_ATTR_SHAPES:
                a.v.shapes[i].rank = PSIM_RANK_UNKNOWN;
                if (!JSON_NODE_HOLDS_NULL(e) &&
                    !read_dims(c, e, "shapes attr", &a.v.shapes[i].rank, &a.v.shapes[i].dims, error))
                    return FALSE;
                break;
            case PSIM_ATTR_TENSORS:
                a.v.ts[i] = NULL;
                if (!JSON_NODE_HOLDS_NULL(e)) {
                    if (!(a.v.ts[i] = read_tensor(c, e, error)))
                        return FALSE;
                    g_ptr_array_add(owned, a.v.ts[i]);
                }
                break;
            default: break;
            }
        }
    }
    psim_graph_node_attr_set(g, v, &a);
    return TRUE;
}

static gboolean read_node(Ctx *c, JsonNode *jn, guint idx, GError **error)
{
    c->node = NULL;
    if (!JSON_NODE_HOLDS_OBJECT(jn))
        FAIL("nodes[%u] is not an object", idx);
    JsonObject *o = json_node_get_object(jn);
    JsonNode *nm = json_object_get_member(o, "name"), *op = json_object_get_member(o, "op");
    if (!nm || !JSON_NODE_HOLDS_VALUE(nm) || json_node_get_value_type(nm) != G_TYPE_STRING)
        FAIL("nodes[%u]: field 'name' is missing or not a string", idx);
    c->node = json_node_get_string(nm);
    if (!op || !JSON_NODE_HOLDS_VALUE(op) || json_node_get_value_type(op) != G_TYPE_STRING)
        FAIL("field 'op' is missing or not a string");
    PsimNode *v = psim_graph_node_add(c->g, c->node, json_node_get_string(op), error);
    if (!v)
        return FALSE;
    c->node = v->name;
    g_autofree char *where = g_strdup_printf("node '%s'", v->name);
    PsimJsonAt nat = {c->path, where};
    const char *domain = NULL;
    if (!psim_json_get_string(&nat, o, "domain", &domain, error))
        return FALSE;
    if (domain)
        v->domain = psim_graph_intern(c->g, domain);
    JsonNode *in = json_object_get_member(o, "inputs");
    if (in) {
        if (!JSON_NODE_HOLDS_ARRAY(in))
            FAIL("field 'inputs' must be a list");
        JsonArray *a = json_node_get_array(in);
        for (guint i = 0; i < json_array_get_length(a); i++) {
            JsonNode *e = json_array_get_element(a, i);
            if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_STRING)
                FAIL("inputs[%u] is not a string", i);
            const char *r = json_node_get_string(e);
            if (r[0] == '\0')
                psim_graph_node_input_add(c->g, v, (PsimPort){-1, 0});
            else
                psim_graph_node_input_add_ref(c->g, v, r);
        }
    }
    JsonNode *out = json_object_get_member(o, "outputs");
    if (out) {
        if (!JSON_NODE_HOLDS_ARRAY(out))
            FAIL("field 'outputs' must be a list");
        JsonArray *a = json_node_get_array(out);
        guint n = json_array_get_length(a);
        if (n > 65536)
            FAIL("too many outputs (%u)", n);
        psim_graph_node_outputs_set(c->g, v, (int32_t)n);
        for (guint k = 0; k < n; k++) {
            JsonNode *e = json_array_get_element(a, k);
            if (!JSON_NODE_HOLDS_OBJECT(e))
                FAIL("outputs[%u] is not an object", k);
            JsonObject *eo = json_node_get_object(e);
            g_autofree char *owhere = g_strdup_printf("node '%s': outputs[%u]", v->name, k);
            PsimJsonAt oat = {c->path, owhere};
            PsimDType dt = PSIM_DTYPE_UNDEFINED;
            const char *dname = NULL, *oname = NULL;
            double bytes = -1;
            if (!psim_json_get_string(&oat, eo, "dtype", &dname, error) ||
                !psim_json_get_string(&oat, eo, "name", &oname, error) ||
                !psim_json_get_number(&oat, eo, "bytes", 0, (double)PSIM_MAX_BYTES, &bytes, error))
                return FALSE;
            if (dname) {
                dt = psim_dtype_from_name(dname);
                if (dt == PSIM_DTYPE_UNDEFINED)
                    FAIL("outputs[%u]: unknown dtype", k);
            }
            int32_t rank = PSIM_RANK_UNKNOWN;
            int64_t *dims = NULL;
            if (json_object_has_member(eo, "shape")) {
                g_autofree char *what = g_strdup_printf("outputs[%u].shape", k);
                if (!read_dims(c, json_object_get_member(eo, "shape"), what, &rank, &dims, error))
                    return FALSE;
            }
            psim_graph_output_set(c->g, v, (int32_t)k, dt, rank, dims);
            if (oname)
                v->outputs[k].name = psim_graph_intern(c->g, oname);
            if (bytes >= 0)
                v->outputs[k].bytes = (uint64_t)bytes;
        }
    }
    JsonNode *at = json_object_get_member(o, "attrs");
    if (at) {
        if (!JSON_NODE_HOLDS_OBJECT(at))
            FAIL("field 'attrs' must be an object");
        JsonObject *ao = json_node_get_object(at);
        g_autoptr(GList) keys = json_object_get_members(ao);
        for (GList *l = keys; l; l = l->next)
            if (!read_attr(c, v, l->data, json_object_get_member(ao, l->data), error))
                return FALSE;
    }
    const char *fields[] = {"device", "assigned_device"};
    for (int i = 0; i < 2; i++) {
        JsonNode *d = json_object_get_member(o, fields[i]);
        if (!d || JSON_NODE_HOLDS_NULL(d))
            continue;
        if (!JSON_NODE_HOLDS_VALUE(d) || json_node_get_value_type(d) != G_TYPE_STRING)
            FAIL("field '%s' must be a string", fields[i]);
        if (i == 0)
            psim_graph_node_device_set(c->g, v, json_node_get_string(d));
        else
            psim_graph_node_assigned_set(c->g, v, json_node_get_string(d));
    }
    gboolean param = FALSE;
    if (!psim_json_get_bool(&nat, o, "parameter", &param, error))
        return FALSE;
    if (param)
        v->flags |= PSIM_NODE_PARAMETER;
    JsonNode *cost = json_object_get_member(o, "cost_us");
    if (cost) {
        if (!JSON_NODE_HOLDS_OBJECT(cost))
            FAIL("field 'cost_us' must be an object of device -> microseconds");
        JsonObject *co = json_node_get_object(cost);
        g_autofree char *cwhere = g_strdup_printf("node '%s': cost_us", v->name);
        PsimJsonAt cat = {c->path, cwhere};
        g_autoptr(GList) keys = json_object_get_members(co);
        for (GList *l = keys; l; l = l->next) {
            double us = -1;
            if (!psim_json_get_number(&cat, co, l->data, 0, PSIM_MAX_US, &us, error))
                return FALSE;
            if (us < 0)
                FAIL("cost_us['%s'] must be a number of microseconds", (char *)l->data);
            psim_graph_node_cost_set(c->g, v, l->data, us);
        }
    }
    return TRUE;
}

/* Reads a parsed graph document; the plan reader calls it on its "graph" member. */
PsimGraph *psim__import_json_root(const char *path, JsonNode *root, GError **error)
{
    PsimJsonAt at = {path, NULL};
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
        psim__error_file(error, path, "the top level must be a JSON object");
        return NULL;
    }
    JsonObject *o = json_node_get_object(root);
    const char *fmt = NULL, *name = "graph";
    if (!psim_json_get_string(&at, o, "format", &fmt, error))
        return NULL;
    if (!fmt || strcmp(fmt, FORMAT_KEY) != 0) {
        psim__error_file(error, path, "field 'format': expected \"" FORMAT_KEY "\"");
        return NULL;
    }
    JsonArray *a = NULL, *ia = NULL, *oa = NULL;
    int64_t opset = 0;
    if (!psim_json_get_string(&at, o, "name", &name, error) ||
        !psim_json_get_array(&at, o, "nodes", &a, error) ||
        !psim_json_get_array(&at, o, "inputs", &ia, error) ||
        !psim_json_get_array(&at, o, "outputs", &oa, error) ||
        !psim_json_get_int(&at, o, "onnx_opset", 1, 1000, &opset, error))
        return NULL;
    if (!a) {
        psim__error_file(error, path, "field 'nodes' is missing or not a list");
        return NULL;
    }
    g_autoptr(PsimGraph) g = psim_graph_new(name);
    psim_graph_set_source(g, path);
    if (opset)
        psim_graph_set_opset(g, opset);
    Ctx ctx = {.path = path, .g = g}, *c = &ctx;
    for (guint i = 0; i < json_array_get_length(a); i++)
        if (!read_node(c, json_array_get_element(a, i), i, error))
            return NULL;
    c->node = NULL;
    for (guint i = 0; ia && i < json_array_get_length(ia); i++) {
        const char *nm = psim_json_node_string(json_array_get_element(ia, i));
        PsimNode *v = nm ? psim_graph_node_find(g, nm) : NULL;
        if (!v) {
            psim__error_file(error, path, "inputs[%u] names no node", i);
            return NULL;
        }
        psim_graph_input_add(g, v->id);
    }
    for (guint i = 0; oa && i < json_array_get_length(oa); i++) {
        const char *r = psim_json_node_string(json_array_get_element(oa, i));
        if (!r || !*r) {
            psim__error_file(error, path, "outputs[%u] is not a tensor name", i);
            return NULL;
        }
        psim_graph_output_add_ref(g, r);
    }
    if (!psim_graph_finalize(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

PsimGraph *psim_import_json(const char *path, const char *data, gsize len, GError **error)
{
    g_autoptr(JsonNode) root = psim_json_parse(path, data, len, error);
    return root ? psim__import_json_root(path, root, error) : NULL;
}
