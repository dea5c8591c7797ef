/* placesim graph JSON ("placesim.graph/1"): reader through the yajl document (graph/jdoc.c), and a writer of our own so
 * that numbers keep their type and export -> import -> export is byte-identical. */
#include "graph/graph-private.h"
#include "placesim/formats.h"

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

/* An integer's decimal text (what %lld gives). */
void psim__json_int(GString *s, int64_t x)
{
    char buf[24], *e = buf + sizeof buf, *q = e;
    uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    do
        *--q = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (x < 0)
        *--q = '-';
    g_string_append_len(s, q, e - q);
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
    if (fabs(v) < 1e15 && v == (double)(int64_t)v && !(v == 0 && signbit(v))) {
        /* An integral value: what %.15g gives, without the search below (plans hold millions). */
        psim__json_int(s, (int64_t)v);
        if (force_point)
            g_string_append(s, ".0");
        return;
    }
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
        g_string_append_printf(s, "{\"%s\": [", psim_attr_type_name(a->type));
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

/* A number, or the strings the writer gives what JSON lacks ("nan", "inf", "-inf"). */
gboolean psim__j_double(const PsimJ *n, double *out)
{
    if (psim_j_number(n, out))
        return TRUE;
    const char *s = psim_j_string(n);
    if (!s)
        return FALSE;
    if (!strcmp(s, "nan")) *out = NAN;
    else if (!strcmp(s, "inf")) *out = INFINITY;
    else if (!strcmp(s, "-inf")) *out = -INFINITY;
    else return FALSE;
    return TRUE;
}

static gboolean read_dims(Ctx *c, const PsimJ *jn, const char *what, int32_t *rank, int64_t **dims,
                          GError **error)
{
    if (jn->type != PSIM_J_ARRAY)
        FAIL("%s must be a list of dimensions", what);
    uint32_t n = jn->n;
    if (n > 64)
        FAIL("%s has rank %u (at most 64)", what, n);
    *rank = (int32_t)n;
    *dims = psim_graph_alloc(c->g, sizeof(int64_t) * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) {
        const PsimJ *d = &jn->v.a[i];
        if (d->type == PSIM_J_NULL) {
            (*dims)[i] = PSIM_DIM_UNKNOWN;
        } else if (d->type == PSIM_J_INT) {
            int64_t v = d->v.i;
            if (v < -1)
                FAIL("%s: dimension %u is negative (%" G_GINT64_FORMAT ")", what, i, v);
            (*dims)[i] = v;
        } else {
            FAIL("%s: dimension %u is not an integer or null", what, i);
        }
    }
    int64_t known = 1;
    for (uint32_t i = 0; i < n; i++)
        if ((*dims)[i] > 0) {
            if (known > PSIM_MAX_ELEMENTS / (*dims)[i])
                FAIL("%s has over 2^36 elements", what);
            known *= (*dims)[i];
        }
    return TRUE;
}

static PsimTensor *read_tensor(Ctx *c, const PsimJ *o, GError **error)
{
#define TFAIL(...)                                                                               \
    do {                                                                                         \
        ctx_fail(c, error, "tensor: " __VA_ARGS__);                                              \
        return NULL;                                                                             \
    } while (0)
    if (o->type != PSIM_J_OBJECT)
        TFAIL("must be an object");
    const char *dn = psim_j_string(psim_j_get(o, "dtype"));
    PsimDType dt = psim_dtype_from_name(dn ? dn : "");
    if (dt == PSIM_DTYPE_UNDEFINED)
        TFAIL("unknown or missing dtype");
    int32_t rank = 0;
    int64_t *dims = NULL;
    const PsimJ *shape = psim_j_get(o, "shape");
    if (shape && !read_dims(c, shape, "tensor shape", &rank, &dims, error))
        return NULL;
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] < 0)
            TFAIL("shape dimension %d is unknown (a tensor's shape must be known)", i);
    g_autoptr(GError) terr = NULL;
    g_autoptr(PsimTensor) t = psim_tensor_new(dt, rank, dims, &terr);
    if (!t)
        TFAIL("%s", terr->message);
    const PsimJ *b64 = psim_j_get(o, "data_b64"), *data = psim_j_get(o, "data");
    if (b64) {
        const char *b = psim_j_string(b64);
        if (!b)
            TFAIL("data_b64 must be a string");
        gsize blen = 0;
        g_autofree guchar *raw = g_base64_decode(b, &blen);
        if (blen != t->nbytes)
            TFAIL("data_b64 holds %zu bytes, the shape needs %zu", (size_t)blen, t->nbytes);
        memcpy(t->data, raw, blen);
    } else if (data) {
        if (data->type != PSIM_J_ARRAY)
            TFAIL("data must be a list");
        if ((int64_t)data->n != t->n_elems)
            TFAIL("data has %u values, the shape needs %" G_GINT64_FORMAT, data->n, t->n_elems);
        for (int64_t i = 0; i < t->n_elems; i++) {
            const PsimJ *e = &data->v.a[i];
            double dv = 0;
            if (dt == PSIM_DTYPE_STRING) {
                if (e->type != PSIM_J_STRING)
                    TFAIL("string data must be strings");
                ((char **)t->data)[i] = g_strdup(e->v.s);
                continue;
            }
            if (!psim__j_double(e, &dv))
                TFAIL("data value %" G_GINT64_FORMAT " is not a number", i);
            gint64 iv = e->type == PSIM_J_INT ? e->v.i
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
            case PSIM_DTYPE_UINT64: /* integers above INT64_MAX are read as doubles */
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

static gboolean read_attr(Ctx *c, PsimNode *v, const char *name, const PsimJ *jn, GError **error)
{
    PsimGraph *g = c->g;
    /* Tensors read for a "tensors" list: held until psim_graph_node_attr_set has taken its
     * references (function scope, so they outlive the block that reads them). */
    g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    switch (jn->type) {
    case PSIM_J_INT: psim_graph_node_attr_set_int(g, v, name, jn->v.i); return TRUE;
    case PSIM_J_DOUBLE: psim_graph_node_attr_set_float(g, v, name, jn->v.d); return TRUE;
    case PSIM_J_BOOL: psim_graph_node_attr_set_bool(g, v, name, jn->v.b); return TRUE;
    case PSIM_J_STRING: psim_graph_node_attr_set_string(g, v, name, jn->v.s); return TRUE;
    case PSIM_J_NULL: FAIL("attr '%s' has an unsupported value", name);
    default: break;
    }
    if (jn->type == PSIM_J_ARRAY) {
        /* A bare list: ints if all are integers, else floats, else strings. */
        uint32_t n = jn->n;
        gboolean all_int = TRUE, all_num = TRUE, all_str = TRUE;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t t = jn->v.a[i].type;
            all_int &= t == PSIM_J_INT;
            all_num &= t == PSIM_J_INT || t == PSIM_J_DOUBLE;
            all_str &= t == PSIM_J_STRING;
        }
        if (all_int || all_num) {
            g_autofree int64_t *iv = g_new(int64_t, n ? n : 1);
            g_autofree double *fv = g_new(double, n ? n : 1);
            for (uint32_t i = 0; i < n; i++) {
                iv[i] = all_int ? jn->v.a[i].v.i : 0;
                psim_j_number(&jn->v.a[i], &fv[i]);
            }
            if (all_int)
                psim_graph_node_attr_set_ints(g, v, name, (int32_t)n, iv);
            else
                psim_graph_node_attr_set_floats(g, v, name, (int32_t)n, fv);
            return TRUE;
        }
        if (all_str) {
            g_autofree const char **sv = g_new(const char *, n ? n : 1);
            for (uint32_t i = 0; i < n; i++)
                sv[i] = jn->v.a[i].v.s;
            psim_graph_node_attr_set_strings(g, v, name, (int32_t)n, sv);
            return TRUE;
        }
        FAIL("attr '%s': a list must hold numbers or strings only", name);
    }
    if (jn->n != 1)
        FAIL("attr '%s': a typed value is an object with one key", name);
    const char *key = jn->v.m[0].key;
    const PsimJ *val = &jn->v.m[0].v;
    PsimAttr a = {.name = name};
    if (!strcmp(key, "dtype")) {
        a.type = PSIM_ATTR_DTYPE;
        const char *dn = psim_j_string(val);
        a.v.dt = psim_dtype_from_name(dn);
        /* "undefined" is what the writer gives a dtype the IR has no type for (TF resource). */
        if (a.v.dt == PSIM_DTYPE_UNDEFINED && g_strcmp0(dn, "undefined"))
            FAIL("attr '%s': unknown dtype", name);
    } else if (!strcmp(key, "shape")) {
        a.type = PSIM_ATTR_SHAPE;
        a.v.shape.rank = PSIM_RANK_UNKNOWN;
        if (val->type != PSIM_J_NULL &&
            !read_dims(c, val, "shape attr", &a.v.shape.rank, &a.v.shape.dims, error))
            return FALSE;
    } else if (!strcmp(key, "tensor")) {
        a.type = PSIM_ATTR_TENSOR;
        if (val->type != PSIM_J_NULL && !(a.v.t = read_tensor(c, val, error)))
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
        if (val->type != PSIM_J_ARRAY)
            FAIL("attr '%s': '%s' must be a list", name, key);
        uint32_t n = val->n;
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
        for (uint32_t i = 0; i < n; i++) {
            const PsimJ *e = &val->v.a[i];
            switch (a.type) {
            case PSIM_ATTR_INTS:
                if (e->type != PSIM_J_INT)
                    FAIL("attr '%s': ints must be integers", name);
                a.v.ints[i] = e->v.i;
                break;
            case PSIM_ATTR_FLOATS:
                if (!psim__j_double(e, &a.v.floats[i]))
                    FAIL("attr '%s': floats must be numbers", name);
                break;
            case PSIM_ATTR_STRINGS:
                if (e->type != PSIM_J_STRING)
                    FAIL("attr '%s': strings must be strings", name);
                a.v.strs[i] = e->v.s;
                break;
            case PSIM_ATTR_BOOLS:
                if (e->type != PSIM_J_BOOL)
                    FAIL("attr '%s': bools must be true or false", name);
                a.v.bools[i] = e->v.b;
                break;
            case PSIM_ATTR_DTYPES:
                a.v.dts[i] = psim_dtype_from_name(psim_j_string(e));
                if (a.v.dts[i] == PSIM_DTYPE_UNDEFINED && g_strcmp0(psim_j_string(e), "undefined"))
                    FAIL("attr '%s': unknown dtype", name);
                break;
            case PSIM_ATTR_SHAPES:
                a.v.shapes[i].rank = PSIM_RANK_UNKNOWN;
                if (e->type != PSIM_J_NULL &&
                    !read_dims(c, e, "shapes attr", &a.v.shapes[i].rank, &a.v.shapes[i].dims, error))
                    return FALSE;
                break;
            case PSIM_ATTR_TENSORS:
                a.v.ts[i] = NULL;
                if (e->type != PSIM_J_NULL) {
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

/* The members of object o, each key once (its last value), in order of their last appearance:
 * a repeated key in a file is read as json-glib reads it. */
static gboolean last_of_key(const PsimJ *o, uint32_t i)
{
    for (uint32_t k = i + 1; k < o->n; k++)
        if (!strcmp(o->v.m[k].key, o->v.m[i].key))
            return FALSE;
    return TRUE;
}

static gboolean read_node(Ctx *c, const PsimJ *o, guint idx, GError **error)
{
    c->node = NULL;
    if (o->type != PSIM_J_OBJECT)
        FAIL("nodes[%u] is not an object", idx);
    const char *nm = psim_j_string(psim_j_get(o, "name")), *op = psim_j_string(psim_j_get(o, "op"));
    if (!nm)
        FAIL("nodes[%u]: field 'name' is missing or not a string", idx);
    c->node = nm;
    if (!op)
        FAIL("field 'op' is missing or not a string");
    PsimNode *v = psim_graph_node_add(c->g, c->node, op, error);
    if (!v)
        return FALSE;
    c->node = v->name;
    const PsimJ *dm = psim_j_given(o, "domain");
    if (dm && dm->type != PSIM_J_STRING)
        FAIL("field 'domain' must be a string");
    if (dm)
        v->domain = psim_graph_intern(c->g, dm->v.s);
    const PsimJ *in = psim_j_get(o, "inputs");
    if (in) {
        if (in->type != PSIM_J_ARRAY)
            FAIL("field 'inputs' must be a list");
        for (uint32_t i = 0; i < in->n; i++) {
            const char *r = psim_j_string(&in->v.a[i]);
            if (!r)
                FAIL("inputs[%u] is not a string", i);
            if (r[0] == '\0')
                psim_graph_node_input_add(c->g, v, (PsimPort){-1, 0});
            else
                psim_graph_node_input_add_ref(c->g, v, r);
        }
    }
    const PsimJ *out = psim_j_get(o, "outputs");
    if (out) {
        if (out->type != PSIM_J_ARRAY)
            FAIL("field 'outputs' must be a list");
        uint32_t n = out->n;
        if (n > 65536)
            FAIL("too many outputs (%u)", n);
        psim_graph_node_outputs_set(c->g, v, (int32_t)n);
        for (uint32_t k = 0; k < n; k++) {
            const PsimJ *eo = &out->v.a[k];
            if (eo->type != PSIM_J_OBJECT)
                FAIL("outputs[%u] is not an object", k);
            PsimDType dt = PSIM_DTYPE_UNDEFINED;
            const PsimJ *dj = psim_j_given(eo, "dtype"), *nj = psim_j_given(eo, "name"),
                        *bj = psim_j_given(eo, "bytes");
            const char *dname = psim_j_string(dj), *oname = psim_j_string(nj);
            double bytes = -1;
            if ((dj && !dname) || (nj && !oname))
                FAIL("outputs[%u]: field '%s' must be a string", k, dj && !dname ? "dtype" : "name");
            if (bj && !psim_j_number(bj, &bytes))
                FAIL("outputs[%u]: field 'bytes' must be a number", k);
            if (bj && !(bytes >= 0 && bytes <= (double)PSIM_MAX_BYTES))
                FAIL("outputs[%u]: field 'bytes' = %g is out of range [0, %g]", k, bytes,
                     (double)PSIM_MAX_BYTES);
            if (dname) {
                dt = psim_dtype_from_name(dname);
                if (dt == PSIM_DTYPE_UNDEFINED)
                    FAIL("outputs[%u]: unknown dtype", k);
            }
            int32_t rank = PSIM_RANK_UNKNOWN;
            int64_t *dims = NULL;
            const PsimJ *shape = psim_j_get(eo, "shape");
            if (shape) {
                char what[48];
                g_snprintf(what, sizeof what, "outputs[%u].shape", k);
                if (!read_dims(c, shape, what, &rank, &dims, error))
                    return FALSE;
            }
            psim_graph_output_set(c->g, v, (int32_t)k, dt, rank, dims);
            if (oname)
                v->outputs[k].name = psim_graph_intern(c->g, oname);
            if (bytes >= 0)
                v->outputs[k].bytes = (uint64_t)bytes;
        }
    }
    const PsimJ *ao = psim_j_get(o, "attrs");
    if (ao) {
        if (ao->type != PSIM_J_OBJECT)
            FAIL("field 'attrs' must be an object");
        for (uint32_t i = 0; i < ao->n; i++)
            if (last_of_key(ao, i) && !read_attr(c, v, ao->v.m[i].key, &ao->v.m[i].v, error))
                return FALSE;
    }
    const char *fields[] = {"device", "assigned_device"};
    for (int i = 0; i < 2; i++) {
        const PsimJ *d = psim_j_given(o, fields[i]);
        if (!d)
            continue;
        if (d->type != PSIM_J_STRING)
            FAIL("field '%s' must be a string", fields[i]);
        if (i == 0)
            psim_graph_node_device_set(c->g, v, d->v.s);
        else
            psim_graph_node_assigned_set(c->g, v, d->v.s);
    }
    const PsimJ *pj = psim_j_given(o, "parameter");
    if (pj && pj->type != PSIM_J_BOOL)
        FAIL("field 'parameter' must be true or false");
    if (pj && pj->v.b)
        v->flags |= PSIM_NODE_PARAMETER;
    const PsimJ *co = psim_j_get(o, "cost_us");
    if (co) {
        if (co->type != PSIM_J_OBJECT)
            FAIL("field 'cost_us' must be an object of device -> microseconds");
        for (uint32_t i = 0; i < co->n; i++) {
            if (!last_of_key(co, i))
                continue;
            const char *dev = co->v.m[i].key;
            double us = -1;
            if (co->v.m[i].v.type == PSIM_J_NULL)
                FAIL("cost_us['%s'] must be a number of microseconds", dev);
            if (!psim_j_number(&co->v.m[i].v, &us))
                FAIL("cost_us: field '%s' must be a number", dev);
            if (!(us >= 0 && us <= PSIM_MAX_US))
                FAIL("cost_us: field '%s' = %g is out of range [0, %g]", dev, us, PSIM_MAX_US);
            psim_graph_node_cost_set(c->g, v, dev, us);
        }
    }
    return TRUE;
}

/* Reads a parsed graph document; the plan reader calls it on its "graph" member. */
PsimGraph *psim__import_json_root(const char *path, const PsimJ *o, GError **error)
{
    PsimJsonAt at = {path, NULL};
    if (o->type != PSIM_J_OBJECT) {
        psim__error_file(error, path, "the top level must be a JSON object");
        return NULL;
    }
    const char *fmt = NULL, *name = "graph";
    if (!psim_j_get_string(&at, o, "format", &fmt, error))
        return NULL;
    if (!fmt || strcmp(fmt, FORMAT_KEY) != 0) {
        psim__error_file(error, path, "field 'format': expected \"" FORMAT_KEY "\"");
        return NULL;
    }
    const PsimJ *a = NULL, *ia = NULL, *oa = NULL;
    int64_t opset = 0;
    if (!psim_j_get_string(&at, o, "name", &name, error) ||
        !psim_j_get_array(&at, o, "nodes", &a, error) ||
        !psim_j_get_array(&at, o, "inputs", &ia, error) ||
        !psim_j_get_array(&at, o, "outputs", &oa, error) ||
        !psim_j_get_int(&at, o, "onnx_opset", 1, 1000, &opset, error))
        return NULL;
    if (!a) {
        psim__error_file(error, path, "field 'nodes' is missing or not a list");
        return NULL;
    }
    g_autoptr(PsimGraph) g = psim_graph_new(name);
    psim_graph_set_source(g, path);
    if (opset)
        psim_graph_set_opset(g, opset);
    psim_graph_reserve(g, (int32_t)MIN(a->n, (uint32_t)G_MAXINT32 / 2));
    Ctx ctx = {.path = path, .g = g}, *c = &ctx;
    for (uint32_t i = 0; i < a->n; i++)
        if (!read_node(c, &a->v.a[i], i, error))
            return NULL;
    c->node = NULL;
    for (uint32_t i = 0; ia && i < ia->n; i++) {
        const char *nm = psim_j_string(&ia->v.a[i]);
        PsimNode *v = nm ? psim_graph_node_find(g, nm) : NULL;
        if (!v) {
            psim__error_file(error, path, "inputs[%u] names no node", i);
            return NULL;
        }
        psim_graph_input_add(g, v->id);
    }
    for (uint32_t i = 0; oa && i < oa->n; i++) {
        const char *r = psim_j_string(&oa->v.a[i]);
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
    g_autoptr(PsimJDoc) d = psim_jdoc_parse(path, data, len, error);
    return d ? psim__import_json_root(path, psim_jdoc_root(d), error) : NULL;
}
