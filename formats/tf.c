/* TensorFlow GraphDef import, binary (.pb, through protobuf-c) and text (.pbtxt, through
 * tf-text.c): NodeDefs become IR nodes, attrs become typed attrs, and TF ops that mean the same as
 * an IR (ONNX-named) op are mapped to it, turning constant axis/perm inputs into attrs. */
#include "tf-private.h"
#include "placesim/formats.h"

#include <math.h>
#include <string.h>

#include "graph/ops-private.h"
#include "tf.pb-c.h"

/* Nodes referencing more outputs than this are refused (a Split of 4096 is already absurd). */
#define MAX_OUTPUTS_PER_NODE 4096
/* Attrs a node may have. */
#define MAX_ATTRS_PER_NODE 256
/* Largest rank a file may state. */
#define MAX_RANK 64
/* Splat tensors (fewer values than elements) are expanded only within a budget of this many
 * bytes per file (plus the file's own size); beyond it one value stays a "fill" of its Const
 * node, so a small file cannot claim gigabytes. */
#define MAX_SPLAT_BYTES (64u << 20)

typedef struct {
    const char *path;
    PsimGraph *g;
    PsimTf__NodeDef **defs;
    size_t n_defs;
    GHashTable *by_name; /* name -> PsimTf__NodeDef* */
    int64_t outputs_left;
    uint64_t splat_left; /* bytes that splat expansion may still allocate */
} Tf;

/* ---- dtypes ---- */

PsimDType psim__tf_dtype_to_psim(int t)
{
    if (t > 100 && t < 200)
        t -= 100; /* reference types */
    switch (t) {
    case PSIM_TF__DATA_TYPE__DT_FLOAT: return PSIM_DTYPE_FLOAT32;
    case PSIM_TF__DATA_TYPE__DT_DOUBLE: return PSIM_DTYPE_FLOAT64;
    case PSIM_TF__DATA_TYPE__DT_INT32: case PSIM_TF__DATA_TYPE__DT_QINT32: return PSIM_DTYPE_INT32;
    case PSIM_TF__DATA_TYPE__DT_UINT8: case PSIM_TF__DATA_TYPE__DT_QUINT8: return PSIM_DTYPE_UINT8;
    case PSIM_TF__DATA_TYPE__DT_INT16: case PSIM_TF__DATA_TYPE__DT_QINT16: return PSIM_DTYPE_INT16;
    case PSIM_TF__DATA_TYPE__DT_INT8: case PSIM_TF__DATA_TYPE__DT_QINT8: return PSIM_DTYPE_INT8;
    case PSIM_TF__DATA_TYPE__DT_STRING: return PSIM_DTYPE_STRING;
    case PSIM_TF__DATA_TYPE__DT_COMPLEX64: return PSIM_DTYPE_COMPLEX64;
    case PSIM_TF__DATA_TYPE__DT_INT64: return PSIM_DTYPE_INT64;
    case PSIM_TF__DATA_TYPE__DT_BOOL: return PSIM_DTYPE_BOOL;
    case PSIM_TF__DATA_TYPE__DT_BFLOAT16: return PSIM_DTYPE_BFLOAT16;
    case PSIM_TF__DATA_TYPE__DT_UINT16: case PSIM_TF__DATA_TYPE__DT_QUINT16: return PSIM_DTYPE_UINT16;
    case PSIM_TF__DATA_TYPE__DT_COMPLEX128: return PSIM_DTYPE_COMPLEX128;
    case PSIM_TF__DATA_TYPE__DT_HALF: return PSIM_DTYPE_FLOAT16;
    case PSIM_TF__DATA_TYPE__DT_UINT32: return PSIM_DTYPE_UINT32;
    case PSIM_TF__DATA_TYPE__DT_UINT64: return PSIM_DTYPE_UINT64;
    default: return PSIM_DTYPE_UNDEFINED;
    }
}

int psim__tf_dtype_from_psim(PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: return PSIM_TF__DATA_TYPE__DT_FLOAT;
    case PSIM_DTYPE_FLOAT64: return PSIM_TF__DATA_TYPE__DT_DOUBLE;
    case PSIM_DTYPE_INT32: return PSIM_TF__DATA_TYPE__DT_INT32;
    case PSIM_DTYPE_UINT8: return PSIM_TF__DATA_TYPE__DT_UINT8;
    case PSIM_DTYPE_INT16: return PSIM_TF__DATA_TYPE__DT_INT16;
    case PSIM_DTYPE_INT8: return PSIM_TF__DATA_TYPE__DT_INT8;
    case PSIM_DTYPE_STRING: return PSIM_TF__DATA_TYPE__DT_STRING;
    case PSIM_DTYPE_COMPLEX64: return PSIM_TF__DATA_TYPE__DT_COMPLEX64;
    case PSIM_DTYPE_INT64: return PSIM_TF__DATA_TYPE__DT_INT64;
    case PSIM_DTYPE_BOOL: return PSIM_TF__DATA_TYPE__DT_BOOL;
    case PSIM_DTYPE_BFLOAT16: return PSIM_TF__DATA_TYPE__DT_BFLOAT16;
    case PSIM_DTYPE_UINT16: return PSIM_TF__DATA_TYPE__DT_UINT16;
    case PSIM_DTYPE_COMPLEX128: return PSIM_TF__DATA_TYPE__DT_COMPLEX128;
    case PSIM_DTYPE_FLOAT16: return PSIM_TF__DATA_TYPE__DT_HALF;
    case PSIM_DTYPE_UINT32: return PSIM_TF__DATA_TYPE__DT_UINT32;
    case PSIM_DTYPE_UINT64: return PSIM_TF__DATA_TYPE__DT_UINT64;
    default: return PSIM_TF__DATA_TYPE__DT_INVALID;
    }
}

/* ---- errors ---- */

static gboolean fail(Tf *tf, GError **error, const PsimTf__NodeDef *nd, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static gboolean fail(Tf *tf, GError **error, const PsimTf__NodeDef *nd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (nd && nd->name && *nd->name)
        psim__error_file(error, tf->path, "node '%s': %s", nd->name, msg);
    else
        psim__error_file(error, tf->path, "%s", msg);
    return FALSE;
}

/* Names, ops, devices and refs are proto strings: UTF-8, and (as TF's own name rules imply) no
 * control characters, which would also break one-line error messages and the text formats. */
static gboolean valid_text(const char *s)
{
    if (!g_utf8_validate(s, -1, NULL))
        return FALSE;
    for (; *s; s++)
        if ((guint8)*s < 0x20 || *s == 0x7f)
            return FALSE;
    return TRUE;
}

/* ---- shapes and tensors ---- */

/* A TensorShapeProto as rank and dims (g_free *dims). Unknown dims are -1; a fully known shape of
 * more than PSIM_MAX_ELEMENTS elements is refused. */
static gboolean shape_from_tf(Tf *tf, const PsimTf__NodeDef *nd, const char *what,
                              const PsimTf__TensorShapeProto *sp, int32_t *rank, int64_t **dims,
                              GError **error)
{
    *dims = NULL;
    if (!sp || (sp->has_unknown_rank && sp->unknown_rank)) {
        *rank = PSIM_RANK_UNKNOWN;
        return TRUE;
    }
    if (sp->n_dim > MAX_RANK)
        return fail(tf, error, nd, "%s: rank %zu exceeds %d", what, sp->n_dim, MAX_RANK);
    *rank = (int32_t)sp->n_dim;
    *dims = g_new(int64_t, sp->n_dim ? sp->n_dim : 1);
    for (size_t i = 0; i < sp->n_dim; i++) {
        int64_t d = sp->dim[i]->has_size ? sp->dim[i]->size : 0;
        if (d < -1) {
            g_clear_pointer(dims, g_free);
            return fail(tf, error, nd, "%s: dimension %zu is %" G_GINT64_FORMAT, what, i, d);
        }
        (*dims)[i] = d;
    }
    /* Even with unknown dims, the known ones alone must not describe an absurd size. */
    int64_t ne = 1;
    for (size_t i = 0; i < sp->n_dim; i++) {
        int64_t d = (*dims)[i];
        if (d <= 0)
            continue;
        if (ne > PSIM_MAX_ELEMENTS / d) {
            g_clear_pointer(dims, g_free);
            return fail(tf, error, nd, "%s: shape describes more than 2^36 elements", what);
        }
        ne *= d;
    }
    return TRUE;
}

/* Decodes a TensorProto. Values come from tensor_content or the typed *_val field of its dtype;
 * fewer values than elements repeat the last one (TF's splat convention), none means zeros.
 * When a splat of one value would exceed the file's budget and fill_out is given, no tensor is
 * made: *fill_out gets the value, *fill_shape the shape, and NULL is returned with no error. */
static PsimTensor *tensor_from_tf(Tf *tf, const PsimTf__NodeDef *nd, const char *what,
                                  const PsimTf__TensorProto *tp, gboolean *is_fill,
                                  double *fill_out, GError **error)
{
    if (is_fill)
        *is_fill = FALSE;
    PsimDType dt = psim__tf_dtype_to_psim(tp->has_dtype ? (int)tp->dtype : 0);
    if (dt == PSIM_DTYPE_UNDEFINED) {
        fail(tf, error, nd, "%s: tensor dtype %d is not supported", what,
             tp->has_dtype ? (int)tp->dtype : 0);
        return NULL;
    }
    int32_t rank = 0;
    g_autofree int64_t *dims = NULL;
    if (tp->tensor_shape) {
        if (!shape_from_tf(tf, nd, what, tp->tensor_shape, &rank, &dims, error))
            return NULL;
        if (rank < 0) {
            fail(tf, error, nd, "%s: a constant tensor needs a known shape", what);
            return NULL;
        }
    }
    int64_t ne = psim_shape_elems(rank, dims);
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] < 0) {
            fail(tf, error, nd, "%s: a constant tensor has an unknown dimension", what);
            return NULL;
        }
    if (ne < 0) {
        fail(tf, error, nd, "%s: tensor shape is too large", what);
        return NULL;
    }
    size_t es = psim_dtype_size(dt);
    gboolean has_content = tp->has_tensor_content && tp->tensor_content.len > 0;
    if (has_content) {
        if (dt == PSIM_DTYPE_STRING) {
            fail(tf, error, nd, "%s: string tensors cannot use tensor_content", what);
            return NULL;
        }
        if ((uint64_t)tp->tensor_content.len != (uint64_t)ne * es) {
            fail(tf, error, nd, "%s: tensor_content has %zu bytes, the %s shape needs %" G_GUINT64_FORMAT,
                 what, tp->tensor_content.len, psim_dtype_name(dt), (guint64)ne * es);
            return NULL;
        }
        PsimTensor *t = psim_tensor_new(dt, rank, dims, error);
        if (t && t->nbytes)
            memcpy(t->data, tp->tensor_content.data, t->nbytes);
        return t;
    }
    /* Typed values: count them in elements. */
    size_t m = 0;
    switch (dt) {
    case PSIM_DTYPE_FLOAT32: m = tp->n_float_val; break;
    case PSIM_DTYPE_FLOAT64: m = tp->n_double_val; break;
    case PSIM_DTYPE_INT32: case PSIM_DTYPE_INT16: case PSIM_DTYPE_INT8: case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_UINT16: m = tp->n_int_val; break;
    case PSIM_DTYPE_INT64: m = tp->n_int64_val; break;
    case PSIM_DTYPE_BOOL: m = tp->n_bool_val; break;
    case PSIM_DTYPE_FLOAT16: case PSIM_DTYPE_BFLOAT16: m = tp->n_half_val; break;
    case PSIM_DTYPE_UINT32: m = tp->n_uint32_val; break;
    case PSIM_DTYPE_UINT64: m = tp->n_uint64_val; break;
    case PSIM_DTYPE_COMPLEX64: m = tp->n_scomplex_val / 2; break;
    case PSIM_DTYPE_COMPLEX128: m = tp->n_dcomplex_val / 2; break;
    case PSIM_DTYPE_STRING: m = tp->n_string_val; break;
    default: break;
    }
    if ((uint64_t)m > (uint64_t)ne) {
        fail(tf, error, nd, "%s: %zu values for a tensor of %" G_GINT64_FORMAT " elements", what, m, ne);
        return NULL;
    }
    /* What expanding costs (strings are separate allocations), in double: no overflow. */
    double cost = (double)ne * (double)es;
    if (dt == PSIM_DTYPE_STRING) {
        cost = (double)ne * (double)(es + 32);
        for (size_t i = 0; i < m; i++)
            cost += (double)tp->string_val[i].len;
        if (m)
            cost += (double)(ne - (int64_t)m) * (double)tp->string_val[m - 1].len;
    }
    if ((uint64_t)m < (uint64_t)ne && cost > (double)tf->splat_left) {
        if (m <= 1 && is_fill && dt != PSIM_DTYPE_STRING && dt != PSIM_DTYPE_COMPLEX64 &&
            dt != PSIM_DTYPE_COMPLEX128) {
            /* One value for many elements: keep it as a fill. */
            double v = 0;
            if (m == 1) {
                PsimTensor one = {.dtype = dt, .rank = 0, .n_elems = 1};
                int64_t buf[2] = {0};
                one.data = buf;
                switch (dt) {
                case PSIM_DTYPE_FLOAT32: v = tp->float_val[0]; break;
                case PSIM_DTYPE_FLOAT64: v = tp->double_val[0]; break;
                case PSIM_DTYPE_INT64: v = (double)tp->int64_val[0]; break;
                case PSIM_DTYPE_BOOL: v = tp->bool_val[0] != 0; break;
                case PSIM_DTYPE_UINT32: v = tp->uint32_val[0]; break;
                case PSIM_DTYPE_UINT64: v = (double)tp->uint64_val[0]; break;
                case PSIM_DTYPE_FLOAT16: case PSIM_DTYPE_BFLOAT16: {
                    uint16_t h = (uint16_t)tp->half_val[0];
                    memcpy(buf, &h, 2);
                    v = psim_tensor_get_f64(&one, 0);
                    break;
                }
                default: v = tp->int_val[0]; break;
                }
            }
            *is_fill = TRUE;
            *fill_out = v;
            return NULL;
        }
        fail(tf, error, nd, "%s: %zu values would be repeated into %" G_GINT64_FORMAT
             " elements, more than this importer expands", what, m, ne);
        return NULL;
    }
    if ((uint64_t)m < (uint64_t)ne)
        tf->splat_left -= (uint64_t)cost;
    PsimTensor *t = psim_tensor_new(dt, rank, dims, error);
    if (!t) {
        fail(tf, error, nd, "%s: cannot make the tensor", what);
        return NULL;
    }
    if (m == 0 || ne == 0)
        return t;
    for (int64_t i = 0; i < ne; i++) {
        size_t k = (uint64_t)i < m ? (size_t)i : m - 1;
        char *d = (char *)t->data;
        switch (dt) {
        case PSIM_DTYPE_FLOAT32: ((float *)d)[i] = tp->float_val[k]; break;
        case PSIM_DTYPE_FLOAT64: ((double *)d)[i] = tp->double_val[k]; break;
        case PSIM_DTYPE_INT32: ((int32_t *)d)[i] = tp->int_val[k]; break;
        case PSIM_DTYPE_INT16: ((int16_t *)d)[i] = (int16_t)tp->int_val[k]; break;
        case PSIM_DTYPE_INT8: ((int8_t *)d)[i] = (int8_t)tp->int_val[k]; break;
        case PSIM_DTYPE_UINT8: ((uint8_t *)d)[i] = (uint8_t)tp->int_val[k]; break;
        case PSIM_DTYPE_UINT16: ((uint16_t *)d)[i] = (uint16_t)tp->int_val[k]; break;
        case PSIM_DTYPE_INT64: ((int64_t *)d)[i] = tp->int64_val[k]; break;
        case PSIM_DTYPE_BOOL: ((uint8_t *)d)[i] = tp->bool_val[k] != 0; break;
        case PSIM_DTYPE_FLOAT16: case PSIM_DTYPE_BFLOAT16:
            ((uint16_t *)d)[i] = (uint16_t)tp->half_val[k];
            break;
        case PSIM_DTYPE_UINT32: ((uint32_t *)d)[i] = tp->uint32_val[k]; break;
        case PSIM_DTYPE_UINT64: ((uint64_t *)d)[i] = tp->uint64_val[k]; break;
        case PSIM_DTYPE_COMPLEX64:
            ((float *)d)[2 * i] = tp->scomplex_val[2 * k];
            ((float *)d)[2 * i + 1] = tp->scomplex_val[2 * k + 1];
            break;
        case PSIM_DTYPE_COMPLEX128:
            ((double *)d)[2 * i] = tp->dcomplex_val[2 * k];
            ((double *)d)[2 * i + 1] = tp->dcomplex_val[2 * k + 1];
            break;
        case PSIM_DTYPE_STRING:
            ((char **)d)[i] = g_utf8_make_valid((const char *)tp->string_val[k].data,
                                                (gssize)tp->string_val[k].len);
            break;
        default: break;
        }
    }
    return t;
}

/* ---- attributes ---- */

/* AttrValue floats are float32: keep the shortest decimal that reads back as the same float
 * (1.5e-3f is stored as 1.5e-3, not 0.001500000013), as the ONNX importer does. */
static double float_attr(float f)
{
    if (!isfinite(f))
        return f;
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    for (int prec = 6; prec <= 9; prec++) {
        char fmt[8];
        g_snprintf(fmt, sizeof fmt, "%%.%dg", prec);
        g_ascii_formatd(buf, sizeof buf, fmt, f);
        double d = g_ascii_strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return f;
}

/* Attr strings are bytes in TF; the IR keeps text, so invalid UTF-8 is replaced (U+FFFD) and
 * the string ends at an embedded NUL. */
static char *bytes_to_string(const ProtobufCBinaryData *b)
{
    g_autofree char *s = g_strndup((const char *)b->data, b->len);
    return g_utf8_make_valid(s, -1);
}

static gboolean attr_convert(Tf *tf, PsimNode *n, const PsimTf__NodeDef *nd,
                             const PsimTf__NodeDef__AttrEntry *e, GError **error)
{
    PsimGraph *g = tf->g;
    const PsimTf__AttrValue *v = e->value;
    if (!e->key || !*e->key)
        return fail(tf, error, nd, "an attr has an empty name");
    if (!valid_text(e->key))
        return fail(tf, error, nd, "an attr name is not valid UTF-8 text");
    if (!v)
        return TRUE;
    g_autofree char *what = g_strdup_printf("attr '%s'", e->key);
    const char *key = e->key;
    if (v->list) {
        const PsimTf__AttrValue__ListValue *l = v->list;
        PsimAttr a = {.name = key};
        if (l->n_s) {
            g_autofree char **strs = g_new0(char *, l->n_s + 1);
            for (size_t i = 0; i < l->n_s; i++)
                strs[i] = bytes_to_string(&l->s[i]);
            psim_graph_node_attr_set_strings(g, n, key, (int32_t)l->n_s, (const char *const *)strs);
            for (size_t i = 0; i < l->n_s; i++)
                g_free(strs[i]);
            return TRUE;
        }
        if (l->n_f) {
            g_autofree double *f = g_new(double, l->n_f);
            for (size_t i = 0; i < l->n_f; i++)
                f[i] = float_attr(l->f[i]);
            psim_graph_node_attr_set_floats(g, n, key, (int32_t)l->n_f, f);
            return TRUE;
        }
        if (l->n_b) {
            g_autofree gboolean *b = g_new(gboolean, l->n_b);
            for (size_t i = 0; i < l->n_b; i++)
                b[i] = l->b[i] != 0;
            a.type = PSIM_ATTR_BOOLS;
            a.n = (int32_t)l->n_b;
            a.v.bools = b;
            psim_graph_node_attr_set(g, n, &a);
            return TRUE;
        }
        if (l->n_type) {
            g_autofree PsimDType *t = g_new(PsimDType, l->n_type);
            for (size_t i = 0; i < l->n_type; i++)
                t[i] = psim__tf_dtype_to_psim((int)l->type[i]);
            a.type = PSIM_ATTR_DTYPES;
            a.n = (int32_t)l->n_type;
            a.v.dts = t;
            psim_graph_node_attr_set(g, n, &a);
            return TRUE;
        }
        if (l->n_shape) {
            PsimShape *s = g_new0(PsimShape, l->n_shape);
            gboolean ok = TRUE;
            for (size_t i = 0; i < l->n_shape && ok; i++)
                ok = shape_from_tf(tf, nd, what, l->shape[i], &s[i].rank, &s[i].dims, error);
            if (ok) {
                a.type = PSIM_ATTR_SHAPES;
                a.n = (int32_t)l->n_shape;
                a.v.shapes = s;
                psim_graph_node_attr_set(g, n, &a);
            }
            for (size_t i = 0; i < l->n_shape; i++)
                g_free(s[i].dims);
            g_free(s);
            return ok;
        }
        if (l->n_tensor) {
            PsimTensor **ts = g_new0(PsimTensor *, l->n_tensor);
            gboolean ok = TRUE;
            for (size_t i = 0; i < l->n_tensor && ok; i++)
                ok = (ts[i] = tensor_from_tf(tf, nd, what, l->tensor[i], NULL, NULL, error)) != NULL;
            if (ok) {
                a.type = PSIM_ATTR_TENSORS;
                a.n = (int32_t)l->n_tensor;
                a.v.ts = ts;
                psim_graph_node_attr_set(g, n, &a);
            }
            for (size_t i = 0; i < l->n_tensor; i++)
                psim_tensor_unref(ts[i]);
            g_free(ts);
            return ok;
        }
        /* Ints, or an empty list (whose element type the file does not say). */
        psim_graph_node_attr_set_ints(g, n, key, (int32_t)l->n_i, l->i);
        return TRUE;
    }
    if (v->has_s) {
        g_autofree char *s = bytes_to_string(&v->s);
        psim_graph_node_attr_set_string(g, n, key, s);
    } else if (v->has_i) {
        psim_graph_node_attr_set_int(g, n, key, v->i);
    } else if (v->has_f) {
        psim_graph_node_attr_set_float(g, n, key, float_attr(v->f));
    } else if (v->has_b) {
        psim_graph_node_attr_set_bool(g, n, key, v->b != 0);
    } else if (v->has_type) {
        psim_graph_node_attr_set_dtype(g, n, key, psim__tf_dtype_to_psim((int)v->type));
    } else if (v->shape) {
        int32_t rank;
        g_autofree int64_t *dims = NULL;
        if (!shape_from_tf(tf, nd, what, v->shape, &rank, &dims, error))
            return FALSE;
        psim_graph_node_attr_set_shape(g, n, key, rank, dims);
    } else if (v->tensor) {
        gboolean is_fill = FALSE;
        double fill = 0;
        gboolean is_const = !strcmp(n->op, "Const") && !strcmp(key, "value");
        PsimTensor *t = tensor_from_tf(tf, nd, what, v->tensor, is_const ? &is_fill : NULL, &fill,
                                       error);
        if (is_fill) {
            /* The shape was validated by tensor_from_tf. */
            int32_t rank;
            g_autofree int64_t *dims = NULL;
            shape_from_tf(tf, nd, what, v->tensor->tensor_shape, &rank, &dims, NULL);
            psim_graph_node_attr_set_float(g, n, "fill", fill);
            psim_graph_output_set(g, n, 0, psim__tf_dtype_to_psim((int)v->tensor->dtype), rank, dims);
            return TRUE;
        }
        if (!t)
            return FALSE;
        psim_graph_node_attr_set_tensor(g, n, key, t);
        psim_tensor_unref(t);
    }
    return TRUE;
}

/* ---- constant inputs ---- */

static const PsimTf__NodeDef *producer(Tf *tf, const char *ref)
{
    g_autofree char *name = NULL;
    int32_t k;
    gboolean control;
    if (!psim_ref_parse(ref, &name, &k, &control) || control || k != 0)
        return NULL;
    return g_hash_table_lookup(tf->by_name, name);
}

/* The value of a small constant feeding `ref` (through Identity nodes), or NULL. */
static PsimTensor *const_value(Tf *tf, const char *ref)
{
    const PsimTf__NodeDef *p = producer(tf, ref);
    for (int hops = 0; p && hops < 32 && !g_strcmp0(p->op, "Identity") && p->n_input >= 1; hops++)
        p = producer(tf, p->input[0]);
    if (!p || g_strcmp0(p->op, "Const"))
        return NULL;
    for (size_t i = 0; i < p->n_attr; i++) {
        const PsimTf__NodeDef__AttrEntry *e = p->attr[i];
        if (g_strcmp0(e->key, "value") || !e->value || !e->value->tensor)
            continue;
        const PsimTf__TensorShapeProto *sp = e->value->tensor->tensor_shape;
        if (sp && sp->n_dim > 1)
            return NULL;
        /* A dim without its size field has size 0 (proto3's default), as shape_from_tf reads
         * it: treating it as unknown here made the file's constant a run-time input on import,
         * but a folded constant once exported with the explicit 0 and read again. */
        if (sp && sp->n_dim == 1 && (sp->dim[0]->size > 64 || sp->dim[0]->size < 0))
            return NULL;
        PsimTensor *t = tensor_from_tf(tf, p, "value", e->value->tensor, NULL, NULL, NULL);
        if (t && (t->dtype == PSIM_DTYPE_STRING || t->dtype == PSIM_DTYPE_COMPLEX64 ||
                  t->dtype == PSIM_DTYPE_COMPLEX128)) {
            psim_tensor_unref(t);
            return NULL;
        }
        return t;
    }
    return NULL;
}

static gboolean const_ints(Tf *tf, const char *ref, int64_t *out, int32_t *n, int32_t max)
{
    g_autoptr(PsimTensor) t = const_value(tf, ref);
    if (!t || t->n_elems > max)
        return FALSE;
    *n = (int32_t)t->n_elems;
    for (int64_t i = 0; i < t->n_elems; i++)
        out[i] = psim_tensor_get_i64(t, i);
    return TRUE;
}

static gboolean const_scalar_int(Tf *tf, const char *ref, int64_t *v)
{
    int32_t n = 0;
    int64_t buf[1];
    return const_ints(tf, ref, buf, &n, 1) && n == 1 && (*v = buf[0], TRUE);
}

/* The node name of a data ref, as a control ref "^name". */
static char *control_of(const char *ref)
{
    g_autofree char *name = NULL;
    int32_t k;
    gboolean control;
    if (!psim_ref_parse(ref, &name, &k, &control))
        return g_strdup(ref);
    return g_strconcat("^", name, NULL);
}

/* ---- op mapping ---- */

/* TF ops whose IR op of the same name means the same thing. */
static const char *const same_ops[] = {
    "Identity", "Relu", "Tanh", "Sigmoid", "Sub", "Mul", "Add", "Div", "Exp", "Log", "Sqrt",
    "Neg", "Pow", "Erf", "Softmax", "LogSoftmax", "Equal", "Less", "Greater", "NoOp", "Const",
    "Placeholder", "Gather", "MatMul", "Reshape", "Shape", "Size", "Tile", "Abs", "Floor", "Ceil",
    "Round", "Sign", "Reciprocal", "Sin", "Cos", "Elu", "Selu", "Softplus", "LeakyRelu", "Range",
    /* TF ops the IR defines with TF semantics. */
    "BiasAdd", "RandomUniform", "Variable", "VariableV2", "VarHandleOp", "ReadVariableOp",
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp",
};

/* Plain renames (inputs and attrs unchanged). */
static const struct {
    const char *tf, *ir;
} renames[] = {
    {"AddV2", "Add"}, {"RealDiv", "Div"}, {"Maximum", "Max"}, {"Minimum", "Min"},
    {"SelectV2", "Where"}, {"StopGradient", "Identity"}, {"Snapshot", "Identity"},
    {"LessEqual", "LessOrEqual"}, {"GreaterEqual", "GreaterOrEqual"}, {"LogicalAnd", "And"},
    {"LogicalOr", "Or"}, {"LogicalNot", "Not"}, {"FloorMod", "Mod"}, {"IsNan", "IsNaN"},
};

typedef struct {
    const char *op;          /* IR op */
    int32_t n_moved;         /* data inputs turned into control inputs (constant axes) */
    int32_t moved[4];
    int32_t n_outputs;       /* 0: from the op definition */
    gboolean converted;      /* op is the IR op of that name, not the TF op */
} Mapping;

static gboolean is_same_op(const char *op)
{
    for (guint i = 0; i < G_N_ELEMENTS(same_ops); i++)
        if (!strcmp(op, same_ops[i]))
            return TRUE;
    return FALSE;
}

/* Decides the IR op for nd and sets IR attrs on n (created with the TF op name). data[] are
 * the data input refs. Returns FALSE with an error only for malformed nodes. */
static gboolean map_op(Tf *tf, const PsimTf__NodeDef *nd, PsimNode *n, char **data, int32_t n_data,
                       Mapping *m, GError **error)
{
    PsimGraph *g = tf->g;
    const char *op = nd->op;
    m->op = op;
    m->n_moved = 0;
    m->n_outputs = 0;
    m->converted = FALSE;
    int64_t ints[64];
    int32_t n_ints = 0;
    int64_t axis;
    for (guint i = 0; i < G_N_ELEMENTS(renames); i++)
        if (!strcmp(op, renames[i].tf)) {
            m->op = renames[i].ir;
            m->converted = TRUE;
            return TRUE;
        }
    if (!strcmp(op, "BiasAdd") || !strcmp(op, "BiasAddV1")) {
        const char *fmt = psim_node_attr_string(n, "data_format", "NHWC");
        m->op = strcmp(fmt, "NCHW") != 0 ? "Add" : "BiasAdd";
        m->converted = TRUE;
        /* The data_format (TF's default where the file has none) marks the Add as a BiasAdd,
         * which is what the exporter writes it back as. */
        if (!psim_node_attr(n, "data_format"))
            psim_graph_node_attr_set_string(g, n, "data_format", fmt);
        return TRUE;
    }
    if (!strcmp(op, "BatchMatMul") || !strcmp(op, "BatchMatMulV2")) {
        /* MatMul batches as numpy does; adjoints are its transpose_a/transpose_b. */
        if (!psim_node_attr_int(n, "adj_x", 0) && !psim_node_attr_int(n, "adj_y", 0)) {
            m->op = "MatMul";
            m->converted = TRUE;
        }
        return TRUE;
    }
    if (!strcmp(op, "ConcatV2") || !strcmp(op, "Concat")) {
        gboolean v2 = !strcmp(op, "ConcatV2");
        if (n_data < 2)
            return fail(tf, error, nd, "%s needs an axis and at least one value", op);
        int32_t ax = v2 ? n_data - 1 : 0;
        if (!const_scalar_int(tf, data[ax], &axis))
            return TRUE; /* axis computed at run time: stays a TF op */
        m->op = "Concat";
        m->converted = TRUE;
        psim_graph_node_attr_set_int(g, n, "axis", axis);
        m->moved[m->n_moved++] = ax;
        return TRUE;
    }
    if (!strcmp(op, "Split") || !strcmp(op, "SplitV")) {
        gboolean v = !strcmp(op, "SplitV");
        int64_t ns = psim_node_attr_int(n, "num_split", -1);
        if (ns < 1 || ns > MAX_OUTPUTS_PER_NODE)
            return fail(tf, error, nd, "%s: num_split %" G_GINT64_FORMAT " is out of range", op, ns);
        if (n_data != (v ? 3 : 2))
            return fail(tf, error, nd, "%s needs %d inputs, has %d", op, v ? 3 : 2, n_data);
        m->n_outputs = (int32_t)ns;
        if (!const_scalar_int(tf, data[v ? 2 : 0], &axis))
            return TRUE;
        m->op = "Split";
        m->converted = TRUE;
        psim_graph_node_attr_set_int(g, n, "axis", axis);
        if (!v)
            psim_graph_node_attr_set_int(g, n, "num_outputs", ns);
        m->moved[m->n_moved++] = v ? 2 : 0;
        return TRUE;
    }
    if (!strcmp(op, "Unpack")) {
        int64_t num = psim_node_attr_int(n, "num", -1);
        if (num < 0 || num > MAX_OUTPUTS_PER_NODE)
            return fail(tf, error, nd, "Unpack: num %" G_GINT64_FORMAT " is out of range", num);
        m->n_outputs = num ? (int32_t)num : -1;
        return TRUE;
    }
    if (!strcmp(op, "Transpose") && n_data == 2 && const_ints(tf, data[1], ints, &n_ints, 64)) {
        m->op = "Transpose";
        m->converted = TRUE;
        psim_graph_node_attr_set_ints(g, n, "perm", n_ints, ints);
        m->moved[m->n_moved++] = 1;
        return TRUE;
    }
    if (!strcmp(op, "Squeeze")) {
        const int64_t *sd = NULL;
        int32_t k = psim_node_attr_ints(n, "squeeze_dims", &sd);
        if (k < 0)
            k = psim_node_attr_ints(n, "axis", &sd);
        if (k > 0)
            psim_graph_node_attr_set_ints(g, n, "axes", k, sd);
        m->op = "Squeeze";
        m->converted = TRUE;
        return TRUE;
    }
    if (!strcmp(op, "Reshape")) {
        m->converted = TRUE;
        psim_graph_node_attr_set_int(g, n, "allowzero", 1);
        return TRUE;
    }
    if (!strcmp(op, "Cast")) {
        const PsimAttr *a = psim_node_attr(n, "DstT");
        if (a && a->type == PSIM_ATTR_DTYPE && a->v.dt != PSIM_DTYPE_UNDEFINED) {
            psim_graph_node_attr_set_int(g, n, "to", a->v.dt);
            m->op = "Cast";
            m->converted = TRUE;
        }
        return TRUE;
    }
    if ((!strcmp(op, "Mean") || !strcmp(op, "Sum") || !strcmp(op, "Max") || !strcmp(op, "Min") ||
         !strcmp(op, "Prod")) && n_data == 2 && const_ints(tf, data[1], ints, &n_ints, 64)) {
        m->converted = TRUE;
        m->op = !strcmp(op, "Mean") ? "ReduceMean" : !strcmp(op, "Sum") ? "ReduceSum"
              : !strcmp(op, "Max") ? "ReduceMax" : !strcmp(op, "Min") ? "ReduceMin" : "ReduceProd";
        psim_graph_node_attr_set_ints(g, n, "axes", n_ints, ints);
        psim_graph_node_attr_set_int(g, n, "keepdims", psim_node_attr_int(n, "keep_dims", 0) != 0);
        /* TF reduces over exactly the axes listed: none is a no-op, not ONNX's "all". */
        psim_graph_node_attr_set_int(g, n, "noop_with_empty_axes", 1);
        m->moved[m->n_moved++] = 1;
        return TRUE;
    }
    if (!strcmp(op, "GatherV2") && n_data == 3 && psim_node_attr_int(n, "batch_dims", 0) == 0 &&
        const_scalar_int(tf, data[2], &axis)) {
        m->op = "Gather";
        m->converted = TRUE;
        psim_graph_node_attr_set_int(g, n, "axis", axis);
        m->moved[m->n_moved++] = 2;
        return TRUE;
    }
    if (!strcmp(op, "FusedBatchNorm"))
        m->n_outputs = 5;
    else if (!strcmp(op, "FusedBatchNormV3"))
        m->n_outputs = 6;
    else if (!strcmp(op, "Unique") || !strcmp(op, "TopKV2"))
        m->n_outputs = 2;
    return TRUE;
}

gboolean psim__tf_op_keeps_name(const char *op)
{
    /* TF ops whose names ONNX uses for other semantics, whether or not they are registered. */
    static const char *const clashes[] = {
        "Split", "Concat", "Transpose", "Max", "Min", "Sum", "Mean", "Prod", "Pad", "Slice",
        "Squeeze", "Cast", "Where", "MaxPool", "LRN", "Unique", "TopK", "Mod", "Conv",
    };
    for (guint i = 0; i < G_N_ELEMENTS(clashes); i++)
        if (!strcmp(op, clashes[i]))
            return FALSE;
    if (is_same_op(op) || psim__ops_tf_owns(op))
        return TRUE;
    return !psim_op_lookup(op);
}

/* The IR name of a TF op left unconverted: its own name, unless another IR op (ONNX-named) of
 * different meaning already has it, in which case it is prefixed "Tf" ("TfMaxPool"). */
static const char *unclashed_op(const char *op, const char *tf_op, gboolean converted)
{
    if (converted || strcmp(op, tf_op) != 0)
        return op;
    return psim__tf_op_keeps_name(op) ? op : NULL;
}

/* The IR op the exporter recorded for this node (PSIM_TF_IR_OP_ATTR), if it is the node's op
 * and a registered IR op; else NULL. Never Send or Recv: those exist only in plans, and the
 * exporter writes them as TF's _Send/_Recv. */
static const char *exported_ir_op(const PsimTf__NodeDef *nd)
{
    if (!strcmp(nd->op, "Send") || !strcmp(nd->op, "Recv"))
        return NULL;
    for (size_t i = 0; i < nd->n_attr; i++) {
        const PsimTf__NodeDef__AttrEntry *e = nd->attr[i];
        if (g_strcmp0(e->key, PSIM_TF_IR_OP_ATTR) || !e->value || !e->value->has_s)
            continue;
        const ProtobufCBinaryData *b = &e->value->s;
        if (b->len == strlen(nd->op) && !memcmp(b->data, nd->op, b->len) && psim_op_lookup(nd->op))
            return nd->op;
    }
    return NULL;
}

/* ---- nodes ---- */


static gboolean add_node(Tf *tf, const PsimTf__NodeDef *nd, GError **error)
{
    PsimGraph *g = tf->g;
    if (!nd->name || !*nd->name)
        return fail(tf, error, NULL, "a node has no name");
    if (!nd->op || !*nd->op)
        return fail(tf, error, nd, "node has no op");
    if (!valid_text(nd->name) || !valid_text(nd->op) || (nd->device && !valid_text(nd->device))) {
        g_autofree char *shown = g_strescape(nd->name, NULL);
        return fail(tf, error, NULL, "node '%s': name, op or device is not valid UTF-8 text "
                    "(or holds control characters)", shown);
    }
    for (size_t i = 0; i < nd->n_input; i++)
        if (nd->input[i] && !valid_text(nd->input[i]))
            return fail(tf, error, nd, "input %zu is not valid UTF-8 text", i);
    if (strchr(nd->name, ':') || nd->name[0] == '^')
        return fail(tf, error, nd, "not a valid TensorFlow node name (':' and a leading '^' "
                    "belong to input references)");
    /* Attrs first (on a node named after the TF op), then the mapping decides the IR op. */
    PsimNode *n = psim_graph_node_add(g, nd->name, nd->op, NULL);
    if (!n)
        return fail(tf, error, nd, "two nodes have this name");
    /* Attr lookup is a linear scan per node: bound it (real nodes have a few dozen). */
    if (nd->n_attr > MAX_ATTRS_PER_NODE)
        return fail(tf, error, nd, "%zu attrs, more than %d", nd->n_attr, MAX_ATTRS_PER_NODE);
    const char *ir_op = exported_ir_op(nd);
    int64_t ir_outputs = 0;
    for (size_t i = 0; i < nd->n_attr; i++) {
        /* The exporter's markers say what the op is; they are not attrs of the IR node. */
        const PsimTf__NodeDef__AttrEntry *e = nd->attr[i];
        if (ir_op && !g_strcmp0(e->key, PSIM_TF_IR_OUTPUTS_ATTR) && e->value && e->value->has_i) {
            ir_outputs = e->value->i;
            if (ir_outputs < 0 || ir_outputs > MAX_OUTPUTS_PER_NODE)
                return fail(tf, error, nd, "attr '%s': %" G_GINT64_FORMAT " is out of range",
                            e->key, ir_outputs);
            ir_outputs = ir_outputs ? ir_outputs : -1;
            continue;
        }
        if (ir_op && !g_strcmp0(e->key, PSIM_TF_IR_OP_ATTR))
            continue;
        if (!attr_convert(tf, n, nd, e, error))
            return FALSE;
    }
    g_autofree char **data = g_new0(char *, nd->n_input + 1);
    int32_t n_data = 0;
    for (size_t i = 0; i < nd->n_input; i++) {
        const char *r = nd->input[i];
        if (!r || !*r || !strcmp(r, "^"))
            return fail(tf, error, nd, "input %zu is empty", i);
        if (r[0] != '^') {
            if (n_data != (int32_t)i)
                return fail(tf, error, nd, "data input '%s' follows a control input", r);
            data[n_data++] = (char *)r;
        }
    }
    Mapping m = {.op = ir_op, .converted = TRUE, .n_outputs = (int32_t)ir_outputs};
    if (!ir_op && !map_op(tf, nd, n, data, n_data, &m, error))
        return FALSE;
    const char *op = unclashed_op(m.op, nd->op, m.converted);
    g_autofree char *prefixed = NULL;
    if (!op)
        op = prefixed = g_strconcat("Tf", nd->op, NULL);
    n->op = psim_graph_intern(g, op);
    /* Data inputs. */
    guint8 *moved = g_new0(guint8, n_data + 1);
    for (int32_t i = 0; i < m.n_moved; i++)
        moved[m.moved[i]] = 1;
    for (int32_t i = 0; i < n_data; i++)
        if (!moved[i])
            psim_graph_node_input_add_ref(g, n, data[i]);
    for (int32_t i = 0; i < n_data; i++)
        if (moved[i]) {
            g_autofree char *c = control_of(data[i]);
            psim_graph_node_input_add_ref(g, n, c);
        }
    g_free(moved);
    for (size_t i = n_data; i < nd->n_input; i++)
        psim_graph_node_input_add_ref(g, n, nd->input[i]);
    if (nd->device && *nd->device)
        psim_graph_node_device_set(g, n, nd->device);
    if (m.n_outputs) {
        int32_t k = m.n_outputs < 0 ? 0 : m.n_outputs;
        if (tf->outputs_left < k)
            return fail(tf, error, nd, "declares more outputs than the file can describe");
        tf->outputs_left -= k;
        psim_graph_node_outputs_set(g, n, k);
    }
    if (!strcmp(n->op, "Const")) {
        const PsimAttr *v = psim_node_attr(n, "value");
        if (!v && !psim_node_attr(n, "fill"))
            return fail(tf, error, nd, "Const has no 'value' attr");
        PsimDType dt = v && v->type == PSIM_ATTR_TENSOR ? v->v.t->dtype
                       : n->n_outputs ? n->outputs[0].dtype : PSIM_DTYPE_UNDEFINED;
        if (dt == PSIM_DTYPE_FLOAT32 || dt == PSIM_DTYPE_FLOAT64 || dt == PSIM_DTYPE_FLOAT16 ||
            dt == PSIM_DTYPE_BFLOAT16)
            n->flags |= PSIM_NODE_PARAMETER;
    } else if (!strcmp(n->op, "Placeholder")) {
        const PsimAttr *dt = psim_node_attr(n, "dtype");
        const PsimAttr *sh = psim_node_attr(n, "shape");
        PsimDType t = dt && dt->type == PSIM_ATTR_DTYPE ? dt->v.dt : PSIM_DTYPE_UNDEFINED;
        if (sh && sh->type == PSIM_ATTR_SHAPE)
            psim_graph_output_set(g, n, 0, t, sh->v.shape.rank, sh->v.shape.dims);
        else
            psim_graph_output_set(g, n, 0, t, PSIM_RANK_UNKNOWN, NULL);
        psim_graph_input_add(g, n->id);
    }
    return TRUE;
}

/* Unknown ops do not say how many outputs they have: give them what their consumers use,
 * within the file's budget, so that finalize need not guess. */
static gboolean size_unknown_ops(Tf *tf, GError **error)
{
    PsimGraph *g = tf->g;
    int32_t nn = psim_graph_n_nodes(g);
    g_autofree int32_t *need = g_new0(int32_t, nn ? nn : 1);
    for (size_t i = 0; i < tf->n_defs; i++) {
        const PsimTf__NodeDef *nd = tf->defs[i];
        for (size_t k = 0; k < nd->n_input; k++) {
            g_autofree char *name = NULL;
            int32_t idx;
            gboolean control;
            if (!psim_ref_parse(nd->input[k], &name, &idx, &control) || control)
                continue;
            PsimNode *src = psim_graph_node_find(g, name);
            if (!src)
                continue;
            if (idx >= MAX_OUTPUTS_PER_NODE)
                return fail(tf, error, nd, "input '%s' uses output %d, more than %d",
                            nd->input[k], idx, MAX_OUTPUTS_PER_NODE);
            need[src->id] = MAX(need[src->id], idx + 1);
        }
    }
    for (int32_t i = 0; i < nn; i++) {
        PsimNode *n = psim_graph_node(g, i);
        if (n->n_outputs || psim_op_lookup(n->op))
            continue;
        int32_t k = MAX(1, need[i]);
        if (tf->outputs_left < k)
            return fail(tf, error, NULL, "node '%s': its consumers use more outputs than the file "
                        "can describe", n->name);
        tf->outputs_left -= k;
        psim_graph_node_outputs_set(g, n, k);
    }
    return TRUE;
}

static PsimGraph *build(Tf *tf, GError **error)
{
    tf->by_name = g_hash_table_new(g_str_hash, g_str_equal);
    g_autofree char *base = g_path_get_basename(tf->path);
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
        *dot = '\0';
    tf->g = psim_graph_new(base);
    psim_graph_set_source(tf->g, tf->path);
    gboolean ok = TRUE;
    if (tf->n_defs == 0)
        ok = fail(tf, error, NULL, "the GraphDef has no nodes");
    for (size_t i = 0; ok && i < tf->n_defs; i++) {
        const PsimTf__NodeDef *nd = tf->defs[i];
        if (nd->name && *nd->name)
            g_hash_table_insert(tf->by_name, nd->name, (gpointer)nd);
    }
    for (size_t i = 0; ok && i < tf->n_defs; i++)
        ok = add_node(tf, tf->defs[i], error);
    ok = ok && size_unknown_ops(tf, error) && psim_graph_finalize(tf->g, error);
    g_hash_table_destroy(tf->by_name);
    if (!ok) {
        psim_graph_free(tf->g);
        return NULL;
    }
    return tf->g;
}

/* ---- binary wire format: the GraphDef's top level is walked here so that a bad node is
 * reported by its position and name; each NodeDef is unpacked by protobuf-c. ---- */

static gboolean read_varint(const guint8 **p, const guint8 *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        guint8 b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return TRUE;
        }
    }
    return FALSE;
}

/* The name field of a NodeDef that protobuf-c refused, if it can be read, for the message. */
static char *peek_name(const guint8 *p, const guint8 *end)
{
    uint64_t key, len;
    if (!read_varint(&p, end, &key) || key != 0x0a || !read_varint(&p, end, &len) ||
        len > (uint64_t)(end - p) || len > 256)
        return NULL;
    char *s = g_strndup((const char *)p, (gsize)len);
    return g_utf8_validate(s, -1, NULL) ? s : (g_free(s), NULL);
}

static gboolean parse_binary(Tf *tf, const guint8 *data, gsize len, GPtrArray *nodes,
                             GError **error)
{
    const guint8 *p = data, *end = data + len;
    while (p < end) {
        gsize at = (gsize)(p - data);
        uint64_t key, v;
        if (!read_varint(&p, end, &key))
            return fail(tf, error, NULL, "GraphDef: bad varint at byte offset %zu", at);
        uint32_t field = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
        if (field == 0 || key >> 32)
            return fail(tf, error, NULL, "GraphDef: invalid field number at byte offset %zu", at);
        switch (wt) {
        case 0:
            if (!read_varint(&p, end, &v))
                return fail(tf, error, NULL, "GraphDef: bad varint at byte offset %zu", at);
            break;
        case 1:
        case 5:
            if ((gsize)(end - p) < (wt == 1 ? 8u : 4u))
                return fail(tf, error, NULL, "GraphDef: truncated field %u at byte offset %zu",
                            field, at);
            p += wt == 1 ? 8 : 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return fail(tf, error, NULL, "GraphDef: field %u at byte offset %zu runs past the "
                            "end of the file (truncated?)", field, at);
            if (field == 1) {
                PsimTf__NodeDef *nd = psim_tf__node_def__unpack(NULL, (size_t)v, p);
                if (!nd) {
                    g_autofree char *name = peek_name(p, p + v);
                    if (name)
                        return fail(tf, error, NULL, "node '%s' (node %u, byte offset %zu): "
                                    "malformed NodeDef", name, nodes->len, at);
                    return fail(tf, error, NULL, "node %u at byte offset %zu: malformed NodeDef",
                                nodes->len, at);
                }
                g_ptr_array_add(nodes, nd);
            }
            p += v;
            break;
        }
        default:
            return fail(tf, error, NULL, "GraphDef: wire type %u at byte offset %zu is not valid "
                        "here (not a GraphDef?)", wt, at);
        }
        if (field == 1 && wt != 2)
            return fail(tf, error, NULL, "GraphDef: field 'node' at byte offset %zu has wire "
                        "type %u", at, wt);
    }
    return TRUE;
}

static void free_node(gpointer p)
{
    protobuf_c_message_free_unpacked(p, NULL);
}

PsimGraph *psim_import_tf(const char *path, const guint8 *data, gsize len, gboolean text,
                          GError **error)
{
    Tf tf = {.path = path ? path : "input"};
    /* Each output costs the file at least a couple of bytes somewhere; allow generous slack. */
    tf.outputs_left = 65536 + 4 * (int64_t)len;
    tf.splat_left = MAX_SPLAT_BYTES + (uint64_t)len;
    if (text) {
        PsimTf__GraphDef *gd = (PsimTf__GraphDef *)psim__pbtxt_parse(
            &psim_tf__graph_def__descriptor, tf.path, (const char *)data, len, error);
        if (!gd)
            return NULL;
        tf.defs = gd->node;
        tf.n_defs = gd->n_node;
        PsimGraph *g = build(&tf, error);
        protobuf_c_message_free_unpacked(&gd->base, NULL);
        return g;
    }
    g_autoptr(GPtrArray) nodes = g_ptr_array_new_with_free_func(free_node);
    if (!parse_binary(&tf, data, len, nodes, error))
        return NULL;
    tf.defs = (PsimTf__NodeDef **)nodes->pdata;
    tf.n_defs = nodes->len;
    return build(&tf, error);
}
