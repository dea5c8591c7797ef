/* ONNX through protobuf-c and our own subset of the public schema (proto/onnx.proto): the model
 * importer (ModelProto -> PsimGraph) and ONNX TensorProto files (.pb) read and written. Decoding
 * runs under a byte budget proportional to the input, and every count and size is checked
 * against what the file holds before memory is allocated for it. */
#include "graph/graph-private.h"
#include "placesim/formats.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* protobuf-c expands an input byte into at most a few dozen bytes of structs (an empty
 * sub-message of two bytes becomes a pointer plus a struct): this bounds it with room to spare. */
#define BUDGET_PER_BYTE 96
#define BUDGET_BASE ((size_t)16 << 20)
/* ONNX ops have at most a few dozen attributes; more is hostile (and the IR's attribute lookup
 * is linear). */
#define MAX_ATTRS 256
#define MAX_RANK 64

/* ---- decoding under a budget ---- */

typedef struct {
    size_t live;
    size_t limit;
    gboolean exceeded;
} Budget;

#define HDR 16 /* keeps the returned pointer aligned for any type */

static void *budget_alloc(void *data, size_t size)
{
    Budget *b = data;
    if (size > b->limit - b->live || size > SIZE_MAX - HDR) {
        b->exceeded = TRUE;
        return NULL;
    }
    char *p = malloc(size + HDR);
    if (!p) {
        b->exceeded = TRUE;
        return NULL;
    }
    memcpy(p, &size, sizeof size);
    b->live += size;
    return p + HDR;
}

static void budget_free(void *data, void *ptr)
{
    if (!ptr)
        return;
    Budget *b = data;
    char *p = (char *)ptr - HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    b->live -= size;
    free(p);
}

typedef struct {
    Budget budget;
    ProtobufCAllocator alloc;
    ProtobufCMessage *msg;
} Decoded;

static gboolean decode(Decoded *d, const ProtobufCMessageDescriptor *desc, const char *path,
                       const guint8 *data, gsize len, const char *what, GError **error)
{
    d->budget = (Budget){.limit = BUDGET_BASE + (len < (SIZE_MAX - BUDGET_BASE) / BUDGET_PER_BYTE
                                                     ? len * BUDGET_PER_BYTE
                                                     : SIZE_MAX - BUDGET_BASE)};
    d->alloc = (ProtobufCAllocator){.alloc = budget_alloc, .free = budget_free,
                                    .allocator_data = &d->budget};
    d->msg = protobuf_c_message_unpack(desc, &d->alloc, len, data);
    if (d->msg)
        return TRUE;
    if (d->budget.exceeded)
        psim__error_file(error, path, "not a valid %s: decoding it needs more memory than its %"
                         G_GSIZE_FORMAT " bytes justify", what, len);
    else
        psim__error_file(error, path, "not a valid %s: the protobuf encoding is malformed or "
                         "truncated", what);
    return FALSE;
}

/* Names come from the file: escape control characters so that an error stays one line, and
 * make it valid UTF-8. */
static void error_one_line(GError **error)
{
    if (!error || !*error)
        return;
    if (!g_utf8_validate((*error)->message, -1, NULL)) {
        char *v = g_utf8_make_valid((*error)->message, -1);
        g_free((*error)->message);
        (*error)->message = v;
    }
    const char *m = (*error)->message;
    gboolean clean = TRUE;
    for (const char *p = m; *p && clean; p++)
        clean = (guchar)*p >= 0x20 && *p != 0x7f;
    if (clean)
        return;
    GString *s = g_string_sized_new(strlen(m) + 16);
    for (const char *p = m; *p; p++) {
        if ((guchar)*p < 0x20 || *p == 0x7f)
            g_string_append_printf(s, "\\x%02x", (guchar)*p);
        else
            g_string_append_c(s, *p);
    }
    g_free((*error)->message);
    (*error)->message = g_string_free(s, FALSE);
}

static void decoded_clear(Decoded *d)
{
    if (d->msg)
        protobuf_c_message_free_unpacked(d->msg, &d->alloc);
    d->msg = NULL;
}

/* ---- TensorProto <-> PsimTensor ---- */

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* ONNX strings must be UTF-8 and everything downstream (JSON) relies on it. Names and text
 * that only label things are made valid (invalid bytes become U+FFFD, as do NULs inside bytes
 * fields); names that select behaviour (op types, domains, attribute names) are refused. */
static char *text_valid(const void *data, gssize len)
{
    return data && len != 0 ? g_utf8_make_valid(data, len) : g_strdup("");
}

static void set_err(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void set_err(GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, PSIM_ERROR, PSIM_ERROR_INPUT, msg);
}

/* Checks one typed-data field's value count against the shape; FALSE with error otherwise. */
static gboolean check_count(const char *field, size_t have, int64_t need, GError **error)
{
    if ((uint64_t)need == have)
        return TRUE;
    if (have == 0)
        set_err(error, "no data for its %" G_GINT64_FORMAT " elements (neither raw_data nor %s)",
                need, field);
    else
        set_err(error, "%s has %zu values, the shape needs %" G_GINT64_FORMAT, field, have, need);
    return FALSE;
}

static void swap_to_host(void *data, size_t nbytes, size_t unit)
{
#if G_BYTE_ORDER == G_BIG_ENDIAN
    guint8 *p = data;
    for (size_t i = 0; i + unit <= nbytes; i += unit)
        for (size_t a = 0, b = unit - 1; a < b; a++, b--) {
            guint8 x = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = x;
        }
#else
    (void)data;
    (void)nbytes;
    (void)unit;
#endif
}

/* The dtypes whose typed values travel in int32_data (ONNX's rule). */
static gboolean in_int32_data(PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_INT32: case PSIM_DTYPE_INT16: case PSIM_DTYPE_INT8: case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_UINT16: case PSIM_DTYPE_BOOL: case PSIM_DTYPE_FLOAT16:
    case PSIM_DTYPE_BFLOAT16:
        return TRUE;
    default:
        return FALSE;
    }
}

/* External data (ONNX's rule for models over protobuf's 2 GB, and for keeping weights apart):
 * the tensor's little-endian bytes sit in the file `location`, relative to the model's folder,
 * from `offset` (0 by default) for `length` bytes (the shape's size by default). The location
 * must stay inside that folder: no absolute path, no "..". Reads exactly `nbytes` into dst. */
static gboolean read_external(const PsimOnnx__TensorProto *tp, const char *dir, void *dst,
                              guint64 nbytes, GError **error)
{
    const char *loc = NULL;
    guint64 offset = 0, length = nbytes;
    gboolean have_len = FALSE;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const char *k = str_or_empty(tp->external_data[i]->key);
        const char *v = str_or_empty(tp->external_data[i]->value);
        if (!strcmp(k, "location")) {
            loc = v;
        } else if (!strcmp(k, "offset") || !strcmp(k, "length")) {
            guint64 x;
            if (!g_ascii_string_to_unsigned(v, 10, 0, G_MAXINT64, &x, NULL)) {
                set_err(error, "external data: %s '%s' is not a byte count", k, v);
                return FALSE;
            }
            if (k[0] == 'o')
                offset = x;
            else
                length = x, have_len = TRUE;
        }
    }
    if (!loc || !*loc) {
        set_err(error, "external data without a location");
        return FALSE;
    }
    g_autofree char *valid = text_valid(loc, -1);
    g_auto(GStrv) parts = g_strsplit_set(loc, "/\\", -1);
    gboolean escapes = g_path_is_absolute(loc);
    for (int i = 0; parts[i] && !escapes; i++)
        escapes = !strcmp(parts[i], "..");
    if (escapes) {
        set_err(error, "external data location '%s' leaves the model's folder", valid);
        return FALSE;
    }
    if (!dir) {
        set_err(error, "external data ('%s') needs the model's folder, and this tensor has none",
                valid);
        return FALSE;
    }
    if (have_len && length != nbytes) {
        set_err(error, "external data '%s': length %" G_GUINT64_FORMAT
                " bytes, the shape needs %" G_GUINT64_FORMAT, valid, length, nbytes);
        return FALSE;
    }
    g_autofree char *path = g_build_filename(dir, loc, NULL);
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(error, "external data '%s': %s", valid, g_strerror(errno));
        return FALSE;
    }
    struct stat st;
    gboolean ok = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    if (!ok)
        set_err(error, "external data '%s' is not a regular file", valid);
    else if (offset > (guint64)st.st_size || nbytes > (guint64)st.st_size - offset) {
        set_err(error, "external data '%s' has %" G_GUINT64_FORMAT " bytes, the tensor needs %"
                G_GUINT64_FORMAT " from offset %" G_GUINT64_FORMAT, valid, (guint64)st.st_size,
                nbytes, offset);
        ok = FALSE;
    } else if (nbytes && (fseeko(f, (off_t)offset, SEEK_SET) != 0 ||
                          fread(dst, 1, nbytes, f) != nbytes)) {
        set_err(error, "external data '%s': cannot read %" G_GUINT64_FORMAT " bytes at %"
                G_GUINT64_FORMAT, valid, nbytes, offset);
        ok = FALSE;
    }
    fclose(f);
    return ok;
}

/* A host tensor from a TensorProto; the error message names no file (callers prefix it). dir is
 * the folder external data is relative to (NULL: external data is an error). */
static PsimTensor *tensor_from_proto(const PsimOnnx__TensorProto *tp, const char *dir,
                                     GError **error)
{
    if (tp->segment) {
        set_err(error, "segmented tensors are not supported");
        return NULL;
    }
    gboolean external =
        (tp->has_data_location &&
         tp->data_location == PSIM_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        tp->n_external_data > 0;
    int32_t dt = tp->has_data_type ? tp->data_type : 0;
    if (dt <= PSIM_DTYPE_UNDEFINED || dt >= PSIM_DTYPE_N_TYPES) {
        set_err(error, "data_type %d is not a known dtype", dt);
        return NULL;
    }
    PsimDType dtype = (PsimDType)dt;
    if (tp->n_dims > MAX_RANK) {
        set_err(error, "rank %zu is over %d", tp->n_dims, MAX_RANK);
        return NULL;
    }
    int32_t rank = (int32_t)tp->n_dims;
    for (int32_t i = 0; i < rank; i++)
        if (tp->dims[i] < 0) {
            set_err(error, "dims[%d] is negative (%" G_GINT64_FORMAT ")", i, tp->dims[i]);
            return NULL;
        }
    /* Zero dims do not excuse absurd ones: the product of the non-zero dims is bounded too (the
     * rule placesim JSON applies, so what imports here exports and reads back). */
    int64_t known = 1;
    for (int32_t i = 0; i < rank && known >= 0; i++)
        if (tp->dims[i] > 0)
            known = known > PSIM_MAX_ELEMENTS / tp->dims[i] ? -1 : known * tp->dims[i];
    int64_t ne = known < 0 ? -1 : psim_shape_elems(rank, tp->dims);
    if (ne < 0) {
        set_err(error, "its shape has more than 2^36 elements");
        return NULL;
    }
    size_t esize = psim_dtype_size(dtype);
    gboolean complex = dtype == PSIM_DTYPE_COMPLEX64 || dtype == PSIM_DTYPE_COMPLEX128;
    int64_t nvals = complex ? 2 * ne : ne;

    /* Check the data against the shape before allocating anything for it. */
    gboolean raw = tp->has_raw_data && dtype != PSIM_DTYPE_STRING;
    if (tp->has_raw_data && dtype == PSIM_DTYPE_STRING && tp->raw_data.len > 0) {
        set_err(error, "string tensors cannot use raw_data");
        return NULL;
    }
    if (external) {
        if (dtype == PSIM_DTYPE_STRING) {
            set_err(error, "string tensors cannot use external data");
            return NULL;
        }
        PsimTensor *t = psim_tensor_new(dtype, rank, tp->dims, error);
        if (t && !read_external(tp, dir, t->data, t->nbytes, error)) {
            psim_tensor_unref(t);
            return NULL;
        }
        if (t)
            swap_to_host(t->data, t->nbytes, complex ? esize / 2 : esize);
        return t;
    }
    if (raw) {
        if (tp->raw_data.len != (uint64_t)ne * esize) {
            set_err(error, "raw_data has %zu bytes, the shape needs %" G_GUINT64_FORMAT,
                    tp->raw_data.len, (guint64)ne * esize);
            return NULL;
        }
    } else {
        gboolean ok;
        switch (dtype) {
        case PSIM_DTYPE_FLOAT32:
        case PSIM_DTYPE_COMPLEX64: ok = check_count("float_data", tp->n_float_data, nvals, error); break;
        case PSIM_DTYPE_INT64: ok = check_count("int64_data", tp->n_int64_data, nvals, error); break;
        case PSIM_DTYPE_FLOAT64:
        case PSIM_DTYPE_COMPLEX128: ok = check_count("double_data", tp->n_double_data, nvals, error); break;
        case PSIM_DTYPE_UINT32:
        case PSIM_DTYPE_UINT64: ok = check_count("uint64_data", tp->n_uint64_data, nvals, error); break;
        case PSIM_DTYPE_STRING: ok = check_count("string_data", tp->n_string_data, nvals, error); break;
        default: ok = check_count("int32_data", tp->n_int32_data, nvals, error); break;
        }
        if (!ok)
            return NULL;
    }

    PsimTensor *t = psim_tensor_new(dtype, rank, tp->dims, error);
    if (!t)
        return NULL;
    if (raw) {
        if (t->nbytes)
            memcpy(t->data, tp->raw_data.data, t->nbytes);
        swap_to_host(t->data, t->nbytes, complex ? esize / 2 : esize);
        return t;
    }
    void *d = t->data;
    if (nvals == 0)
        return t;
    if (dtype == PSIM_DTYPE_FLOAT32 || dtype == PSIM_DTYPE_COMPLEX64) {
        memcpy(d, tp->float_data, sizeof(float) * (size_t)nvals);
    } else if (dtype == PSIM_DTYPE_FLOAT64 || dtype == PSIM_DTYPE_COMPLEX128) {
        memcpy(d, tp->double_data, sizeof(double) * (size_t)nvals);
    } else if (dtype == PSIM_DTYPE_INT64) {
        memcpy(d, tp->int64_data, sizeof(int64_t) * (size_t)nvals);
    } else if (dtype == PSIM_DTYPE_UINT64) {
        memcpy(d, tp->uint64_data, sizeof(uint64_t) * (size_t)nvals);
    } else if (dtype == PSIM_DTYPE_UINT32) {
        for (int64_t i = 0; i < nvals; i++)
            ((uint32_t *)d)[i] = (uint32_t)tp->uint64_data[i];
    } else if (dtype == PSIM_DTYPE_STRING) {
        for (int64_t i = 0; i < nvals; i++)
            ((char **)d)[i] = text_valid(tp->string_data[i].data, (gssize)tp->string_data[i].len);
    } else {
        g_assert(in_int32_data(dtype));
        for (int64_t i = 0; i < nvals; i++) {
            int32_t v = tp->int32_data[i];
            switch (esize) {
            case 1: ((uint8_t *)d)[i] = dtype == PSIM_DTYPE_BOOL ? v != 0 : (uint8_t)v; break;
            case 2: ((uint16_t *)d)[i] = (uint16_t)v; break;
            default: ((int32_t *)d)[i] = v; break;
            }
        }
    }
    return t;
}

PsimTensor *psim_tensor_parse_pb(const char *path, const guint8 *data, gsize len, char **name,
                                 GError **error)
{
    Decoded d;
    if (!decode(&d, &psim_onnx__tensor_proto__descriptor, path, data, len, "ONNX TensorProto",
                error))
        return NULL;
    const PsimOnnx__TensorProto *tp = (const PsimOnnx__TensorProto *)d.msg;
    g_autofree char *dir = path ? g_path_get_dirname(path) : NULL;
    PsimTensor *t = tensor_from_proto(tp, dir, error);
    if (!t) {
        g_prefix_error(error, "%s: tensor '%s': ", path ? path : "input", str_or_empty(tp->name));
        error_one_line(error);
    }
    else if (name)
        *name = text_valid(str_or_empty(tp->name), -1);
    decoded_clear(&d);
    return t;
}

/* A TensorProto opens with a field tag, never 0: a stream of zeros stops at once. */
static const char *sniff_tensor(const char *path, const guint8 *head, gsize len)
{
    (void)path;
    return len && head[0] == 0 ? "not an ONNX TensorProto (it starts with a NUL byte)" : NULL;
}

PsimTensor *psim_tensor_load_pb(const char *path, char **name, GError **error)
{
    g_autoptr(GBytes) b = psim_input_read(path, PSIM_INPUT_MAX_BYTES, sniff_tensor, error);
    if (!b)
        return NULL;
    gsize len = 0;
    const guint8 *data = g_bytes_get_data(b, &len);
    static const guint8 empty[1] = {0};
    return psim_tensor_parse_pb(path, data ? data : empty, len, name, error);
}

gboolean psim_tensor_save_pb(const PsimTensor *t, const char *name, const char *path,
                             GError **error)
{
    g_return_val_if_fail(t != NULL && path != NULL, FALSE);
    if (t->device >= 0 || t->dtype <= PSIM_DTYPE_UNDEFINED || t->dtype >= PSIM_DTYPE_N_TYPES) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "%s: only host tensors of a known dtype can be saved", path);
        return FALSE;
    }
    PsimOnnx__TensorProto tp = PSIM_ONNX__TENSOR_PROTO__INIT;
    tp.n_dims = (size_t)t->rank;
    tp.dims = t->dims;
    tp.has_data_type = TRUE;
    tp.data_type = t->dtype;
    tp.name = (char *)name;
    g_autofree ProtobufCBinaryData *strs = NULL;
#if G_BYTE_ORDER == G_BIG_ENDIAN
    g_autofree guint8 *swapped = NULL;
#endif
    if (t->dtype == PSIM_DTYPE_STRING) {
        strs = g_new0(ProtobufCBinaryData, t->n_elems ? (gsize)t->n_elems : 1);
        for (int64_t i = 0; i < t->n_elems; i++) {
            const char *s = str_or_empty(((char *const *)t->data)[i]);
            strs[i] = (ProtobufCBinaryData){.len = strlen(s), .data = (guint8 *)s};
        }
        tp.n_string_data = (size_t)t->n_elems;
        tp.string_data = strs;
    } else {
        tp.has_raw_data = TRUE;
        tp.raw_data.len = t->nbytes;
        tp.raw_data.data = t->data;
#if G_BYTE_ORDER == G_BIG_ENDIAN
        swapped = g_memdup2(t->data, t->nbytes);
        size_t es = psim_dtype_size(t->dtype);
        swap_to_host(swapped, t->nbytes, t->dtype == PSIM_DTYPE_COMPLEX64 || t->dtype == PSIM_DTYPE_COMPLEX128 ? es / 2 : es);
        tp.raw_data.data = swapped;
#endif
    }
    size_t size = psim_onnx__tensor_proto__get_packed_size(&tp);
    g_autofree guint8 *buf = g_malloc(size ? size : 1);
    psim_onnx__tensor_proto__pack(&tp, buf);
    g_autoptr(GError) werr = NULL;
    if (!g_file_set_contents(path, (const char *)buf, (gssize)size, &werr)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot write: %s", path,
                    werr->message);
        return FALSE;
    }
    return TRUE;
}

/* ---- ModelProto -> PsimGraph ---- */

typedef struct {
    const char *path;
    char *dir;            /* the model's folder: external data is relative to it */
    PsimGraph *g;
    GHashTable *tensors;  /* tensor name (owned by the decoded message) -> index + 1 in ports */
    GArray *ports;        /* PsimPort */
    GHashTable *suffixes; /* base name -> next suffix to try (unique names in amortized O(1)) */
} Importer;

static void fail(Importer *im, GError **error, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void fail(Importer *im, GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    psim__error_file(error, im->path, "%s", msg);
}

/* An unused node name made from raw ("raw", "raw_1", ...): valid UTF-8, and not starting with
 * '^' (which would read as a control input in refs). Tensor names stay as the file has them. */
static const char *unique_name(Importer *im, const char *raw)
{
    g_autofree char *base = text_valid(raw, -1);
    if (base[0] == '^')
        base[0] = '_';
    if (!psim_graph_node_find(im->g, base))
        return psim_graph_intern(im->g, base);
    gpointer next = g_hash_table_lookup(im->suffixes, base);
    for (guint k = next ? GPOINTER_TO_UINT(next) : 1;; k++) {
        g_autofree char *s = g_strdup_printf("%s_%u", base, k);
        if (!psim_graph_node_find(im->g, s)) {
            g_hash_table_insert(im->suffixes, g_strdup(base), GUINT_TO_POINTER(k + 1));
            return psim_graph_intern(im->g, s);
        }
    }
}

/* Records that tensor `name` is output k of node n; a second producer is an error. */
static gboolean tensor_define(Importer *im, const char *name, PsimNode *n, int32_t k,
                              GError **error)
{
    gpointer prev = g_hash_table_lookup(im->tensors, name);
    if (prev) {
        PsimPort p = g_array_index(im->ports, PsimPort, GPOINTER_TO_UINT(prev) - 1);
        fail(im, error, "node '%s': tensor '%s' has two producers (also node '%s')", n->name,
             name, psim_graph_node(im->g, p.node)->name);
        return FALSE;
    }
    PsimPort p = {n->id, k};
    g_array_append_val(im->ports, p);
    g_hash_table_insert(im->tensors, (gpointer)name, GUINT_TO_POINTER(im->ports->len));
    g_autofree char *valid = text_valid(name, -1);
    n->outputs[k].name = psim_graph_intern(im->g, valid);
    return TRUE;
}

static gboolean tensor_lookup(Importer *im, const char *name, PsimPort *out)
{
    gpointer v = g_hash_table_lookup(im->tensors, name);
    if (!v)
        return FALSE;
    *out = g_array_index(im->ports, PsimPort, GPOINTER_TO_UINT(v) - 1);
    return TRUE;
}

static gboolean import_initializer(Importer *im, const PsimOnnx__TensorProto *tp, size_t i,
                                   GError **error)
{
    const char *tname = str_or_empty(tp->name);
    if (!*tname) {
        fail(im, error, "initializer #%zu has no name", i);
        return FALSE;
    }
    PsimTensor *t = tensor_from_proto(tp, im->dir, error);
    if (!t) {
        g_prefix_error(error, "%s: initializer '%s': ", im->path, tname);
        return FALSE;
    }
    PsimNode *n = psim_graph_node_add(im->g, unique_name(im, tname), "Const", error);
    g_assert(n != NULL); /* the name is unused */
    n->flags |= PSIM_NODE_PARAMETER;
    psim_graph_node_attr_set_tensor(im->g, n, "value", t);
    psim_graph_node_outputs_set(im->g, n, 1);
    psim_graph_output_value_set(im->g, n, 0, t);
    psim_tensor_unref(t);
    return tensor_define(im, tname, n, 0, error);
}

/* The dtype and shape a ValueInfoProto declares (`what` names it in errors: "graph input 'x'").
 * Non-tensor types and missing parts are unknown; symbolic dims are PSIM_DIM_UNKNOWN. */
static gboolean value_info_type(Importer *im, const PsimOnnx__ValueInfoProto *vi,
                                const char *what, PsimDType *dtype, int32_t *rank,
                                int64_t *dims, GError **error)
{
    const char *tname = str_or_empty(vi->name);
    *dtype = PSIM_DTYPE_UNDEFINED;
    *rank = PSIM_RANK_UNKNOWN;
    const PsimOnnx__TypeProto *type = vi->type;
    if (!type || type->value_case != PSIM_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
        return TRUE;
    const PsimOnnx__TypeProto__Tensor *tt = type->tensor_type;
    int32_t et = tt->has_elem_type ? tt->elem_type : 0;
    if (et < 0 || et >= PSIM_DTYPE_N_TYPES) {
        fail(im, error, "%s '%s': elem_type %d is not a known dtype", what, tname, et);
        return FALSE;
    }
    *dtype = (PsimDType)et;
    if (!tt->shape)
        return TRUE;
    if (tt->shape->n_dim > MAX_RANK) {
        fail(im, error, "%s '%s': rank %zu is over %d", what, tname, tt->shape->n_dim, MAX_RANK);
        return FALSE;
    }
    *rank = (int32_t)tt->shape->n_dim;
    int64_t known = 1;
    for (int32_t i = 0; i < *rank; i++) {
        const PsimOnnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
        dims[i] = PSIM_DIM_UNKNOWN;
        if (dim->value_case != PSIM_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            continue;
        if (dim->dim_value < 0) {
            fail(im, error, "%s '%s': dimension %d is negative (%" G_GINT64_FORMAT ")", what,
                 tname, i, dim->dim_value);
            return FALSE;
        }
        dims[i] = dim->dim_value;
        if (dims[i] > 0 && known > PSIM_MAX_ELEMENTS / dims[i]) {
            fail(im, error, "%s '%s': its shape has more than 2^36 elements", what, tname);
            return FALSE;
        }
        known *= dims[i] ? dims[i] : 1;
    }
    return TRUE;
}

static gboolean import_input(Importer *im, const PsimOnnx__ValueInfoProto *vi, GError **error)
{
    const char *tname = str_or_empty(vi->name);
    PsimDType dtype;
    int32_t rank;
    int64_t dims[MAX_RANK];
    if (!value_info_type(im, vi, "graph input", &dtype, &rank, dims, error))
        return FALSE;
    PsimNode *n = psim_graph_node_add(im->g, unique_name(im, tname), "Placeholder", error);
    g_assert(n != NULL);
    psim_graph_node_outputs_set(im->g, n, 1);
    psim_graph_output_set(im->g, n, 0, dtype, rank, dims);
    psim_graph_input_add(im->g, n->id);
    return tensor_define(im, tname, n, 0, error);
}

/* Shapes the file declares for node outputs (value_info, graph outputs) seed those outputs:
 * shape inference replaces them for the ops it knows, and they stay for the ops it does not
 * (custom domains), so that those still have sizes. Names that no node produces are ignored, as
 * ONNX tools do. */
static gboolean declare_value(Importer *im, const PsimOnnx__ValueInfoProto *vi, const char *what,
                              GError **error)
{
    PsimPort p;
    if (!tensor_lookup(im, str_or_empty(vi->name), &p))
        return TRUE;
    PsimNode *n = psim_graph_node(im->g, p.node);
    if (n->flags & PSIM_NODE_PARAMETER || !strcmp(n->op, "Placeholder"))
        return TRUE;
    PsimDType dtype;
    int32_t rank;
    int64_t dims[MAX_RANK];
    if (!value_info_type(im, vi, what, &dtype, &rank, dims, error))
        return FALSE;
    if (dtype != PSIM_DTYPE_UNDEFINED || rank >= 0) {
        const char *name = n->outputs[p.index].name;
        psim_graph_output_set(im->g, n, p.index, dtype, rank, dims);
        n->outputs[p.index].name = name;
    }
    return TRUE;
}

/* ONNX float attributes are float32: keep the shortest decimal that reads back as the same
 * float (1e-5f becomes 1e-5, not 9.99999974737875e-06), so that exports and comparisons read as
 * the model's author wrote them while a cast back to float still gives the file's bits. */
static double float_attr(float f)
{
    if (!isfinite(f))
        return f;
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    static const char *const fmts[] = {"%.6g", "%.7g", "%.8g", "%.9g"};
    for (size_t i = 0; i < G_N_ELEMENTS(fmts); i++) {
        g_ascii_formatd(buf, sizeof buf, fmts[i], (double)f);
        double d = g_ascii_strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return f;
}

static const char *attr_type_name(int t)
{
    static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR",
                                        "GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
                                        "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
                                        "TYPE_PROTO", "TYPE_PROTOS"};
    return t >= 0 && t < (int)G_N_ELEMENTS(names) ? names[t] : "unknown";
}

/* ONNX files before IR version 2 may omit an attribute's type: guess it from the field set. */
static int attr_type_of(const PsimOnnx__AttributeProto *a)
{
    if (a->has_type)
        return a->type;
    if (a->has_f) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (a->has_s) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->t) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->n_floats) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    if (a->n_tensors) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
    return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static gboolean import_attr(Importer *im, PsimNode *n, const PsimOnnx__AttributeProto *a,
                            size_t idx, GError **error)
{
    PsimGraph *g = im->g;
    const char *aname = str_or_empty(a->name);
    if (!*aname) {
        fail(im, error, "node '%s': attribute #%zu has no name", n->name, idx);
        return FALSE;
    }
    if (!g_utf8_validate(aname, -1, NULL)) {
        fail(im, error, "node '%s': attribute #%zu's name is not valid UTF-8", n->name, idx);
        return FALSE;
    }
    if (psim_node_attr(n, aname)) {
        fail(im, error, "node '%s': attribute '%s' appears twice", n->name, aname);
        return FALSE;
    }
    if (a->ref_attr_name && *a->ref_attr_name) {
        fail(im, error, "node '%s': attribute '%s' refers to a function attribute, which only "
             "function bodies may do", n->name, aname);
        return FALSE;
    }
    int type = attr_type_of(a);
    switch (type) {
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        psim_graph_node_attr_set_float(g, n, aname, float_attr(a->f));
        return TRUE;
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        psim_graph_node_attr_set_int(g, n, aname, a->i);
        return TRUE;
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
        g_autofree char *s = text_valid(a->s.data, (gssize)a->s.len);
        psim_graph_node_attr_set_string(g, n, aname, s);
        return TRUE;
    }
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (!a->t) {
            fail(im, error, "node '%s': attribute '%s': type TENSOR but no tensor", n->name, aname);
            return FALSE;
        }
        PsimTensor *t = tensor_from_proto(a->t, im->dir, error);
        if (!t) {
            g_prefix_error(error, "%s: node '%s': attribute '%s': ", im->path, n->name, aname);
            return FALSE;
        }
        psim_graph_node_attr_set_tensor(g, n, aname, t);
        psim_tensor_unref(t);
        return TRUE;
    }
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
        g_autofree double *v = g_new(double, a->n_floats ? a->n_floats : 1);
        for (size_t i = 0; i < a->n_floats; i++)
            v[i] = float_attr(a->floats[i]);
        psim_graph_node_attr_set_floats(g, n, aname, (int32_t)a->n_floats, v);
        return TRUE;
    }
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        psim_graph_node_attr_set_ints(g, n, aname, (int32_t)a->n_ints, a->ints);
        return TRUE;
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
        g_autoptr(GPtrArray) v = g_ptr_array_new_with_free_func(g_free);
        for (size_t i = 0; i < a->n_strings; i++)
            g_ptr_array_add(v, text_valid(a->strings[i].data, (gssize)a->strings[i].len));
        psim_graph_node_attr_set_strings(g, n, aname, (int32_t)a->n_strings,
                                         (const char *const *)v->pdata);
        return TRUE;
    }
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: {
        g_autoptr(GPtrArray) v = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
        for (size_t i = 0; i < a->n_tensors; i++) {
            PsimTensor *t = tensor_from_proto(a->tensors[i], im->dir, error);
            if (!t) {
                g_prefix_error(error, "%s: node '%s': attribute '%s': tensor %zu: ", im->path,
                               n->name, aname, i);
                return FALSE;
            }
            g_ptr_array_add(v, t);
        }
        PsimAttr pa = {.name = aname, .type = PSIM_ATTR_TENSORS, .n = (int32_t)a->n_tensors};
        pa.v.ts = (PsimTensor **)v->pdata;
        psim_graph_node_attr_set(g, n, &pa);
        return TRUE;
    }
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
    case PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        fail(im, error, "node '%s': attribute '%s' holds a subgraph (control flow), which is not "
             "supported", n->name, aname);
        return FALSE;
    default:
        fail(im, error, "node '%s': attribute '%s' has type %s (%d), which is not supported",
             n->name, aname, attr_type_name(type), type);
        return FALSE;
    }
}

/* Creates node i with its outputs and attributes; inputs are wired in a second pass so that
 * producers may follow their consumers in the file. */
static PsimNode *import_node(Importer *im, const PsimOnnx__NodeProto *np, size_t i,
                             GError **error)
{
    const char *op = str_or_empty(np->op_type);
    const char *oname = str_or_empty(np->name);
    if (!*op) {
        fail(im, error, "node #%zu ('%s') has no op_type", i, oname);
        return NULL;
    }
    if (!g_utf8_validate(op, -1, NULL) || !g_utf8_validate(str_or_empty(np->domain), -1, NULL)) {
        fail(im, error, "node #%zu: op_type or domain is not valid UTF-8", i);
        return NULL;
    }
    if (np->n_attribute > MAX_ATTRS || np->n_output > G_MAXINT32 / 2 ||
        np->n_input > G_MAXINT32 / 2) {
        fail(im, error, "node #%zu ('%s'): %zu attributes, %zu inputs, %zu outputs is too many",
             i, oname, np->n_attribute, np->n_input, np->n_output);
        return NULL;
    }
    /* The file's name when it has one, else the first output's, else the op. */
    const char *base = oname;
    for (size_t k = 0; !*base && k < np->n_output; k++)
        base = str_or_empty(np->output[k]);
    if (!*base)
        base = op;
    PsimNode *n = psim_graph_node_add(im->g, unique_name(im, base), op, error);
    g_assert(n != NULL);
    const char *domain = str_or_empty(np->domain);
    if (*domain && strcmp(domain, "ai.onnx") != 0)
        n->domain = psim_graph_intern(im->g, domain);
    psim_graph_node_outputs_set(im->g, n, (int32_t)np->n_output);
    for (size_t k = 0; k < np->n_output; k++) {
        const char *tname = str_or_empty(np->output[k]);
        if (*tname && !tensor_define(im, tname, n, (int32_t)k, error))
            return NULL;
    }
    for (size_t k = 0; k < np->n_attribute; k++)
        if (!import_attr(im, n, np->attribute[k], k, error))
            return NULL;
    return n;
}

static gboolean import_graph(Importer *im, const PsimOnnx__GraphProto *gp, GError **error)
{
    PsimGraph *g = im->g;
    /* Graph inputs that are initializers are constants, not inputs. */
    g_autoptr(GHashTable) inits = g_hash_table_new(g_str_hash, g_str_equal);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        if (!import_initializer(im, gp->initializer[i], i, error))
            return FALSE;
        g_hash_table_add(inits, gp->initializer[i]->name);
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *tname = str_or_empty(gp->input[i]->name);
        if (!*tname) {
            fail(im, error, "graph input #%zu has no name", i);
            return FALSE;
        }
        if (g_hash_table_contains(inits, tname))
            continue;
        if (!import_input(im, gp->input[i], error))
            return FALSE;
    }
    int32_t first = psim_graph_n_nodes(g);
    if (gp->n_node > (size_t)(G_MAXINT32 / 2)) {
        fail(im, error, "%zu nodes is too many", gp->n_node);
        return FALSE;
    }
    for (size_t i = 0; i < gp->n_node; i++)
        if (!import_node(im, gp->node[i], i, error))
            return FALSE;
    for (size_t i = 0; i < gp->n_node; i++) {
        const PsimOnnx__NodeProto *np = gp->node[i];
        PsimNode *n = psim_graph_node(g, first + (int32_t)i);
        for (size_t k = 0; k < np->n_input; k++) {
            const char *tname = str_or_empty(np->input[k]);
            PsimPort p = {-1, 0};
            if (*tname && !tensor_lookup(im, tname, &p)) {
                fail(im, error, "node '%s': input %zu '%s' names a missing tensor", n->name, k,
                     tname);
                return FALSE;
            }
            psim_graph_node_input_add(g, n, p);
        }
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *tname = str_or_empty(gp->output[i]->name);
        PsimPort p;
        if (!tensor_lookup(im, tname, &p)) {
            fail(im, error, "graph output #%zu '%s' names a missing tensor", i, tname);
            return FALSE;
        }
        psim_graph_output_add(g, p);
        if (!declare_value(im, gp->output[i], "graph output", error))
            return FALSE;
    }
    for (size_t i = 0; i < gp->n_value_info; i++)
        if (!declare_value(im, gp->value_info[i], "value_info", error))
            return FALSE;
    return TRUE;
}

static PsimGraph *graph_from_model(const char *path, const PsimOnnx__ModelProto *mp,
                                   GError **error)
{
    if (!mp->graph) {
        psim__error_file(error, path, "not a valid ONNX model: it has no graph (field 7)");
        return NULL;
    }
    const char *gname = str_or_empty(mp->graph->name);
    g_autofree char *base = g_path_get_basename(path);
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
        *dot = '\0';
    g_autofree char *valid = text_valid(*gname ? gname : base, -1);
    PsimGraph *g = psim_graph_new(valid);
    psim_graph_set_source(g, path);
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const char *dom = str_or_empty(mp->opset_import[i]->domain);
        if (!*dom || !strcmp(dom, "ai.onnx"))
            psim_graph_set_opset(g, mp->opset_import[i]->version);
    }
    Importer im = {
        .path = path,
        .dir = g_path_get_dirname(path),
        .g = g,
        .tensors = g_hash_table_new(g_str_hash, g_str_equal),
        .ports = g_array_new(FALSE, FALSE, sizeof(PsimPort)),
        .suffixes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
    };
    gboolean ok = import_graph(&im, mp->graph, error) && psim_graph_finalize(g, error);
    g_hash_table_destroy(im.tensors);
    g_array_free(im.ports, TRUE);
    g_hash_table_destroy(im.suffixes);
    g_free(im.dir);
    if (!ok) {
        psim_graph_free(g);
        return NULL;
    }
    return g;
}

PsimGraph *psim_import_onnx(const char *path, const guint8 *data, gsize len, GError **error)
{
    if (!path)
        path = "model.onnx";
    Decoded d;
    if (!decode(&d, &psim_onnx__model_proto__descriptor, path, data, len, "ONNX model", error))
        return NULL;
    PsimGraph *g = graph_from_model(path, (const PsimOnnx__ModelProto *)d.msg, error);
    error_one_line(error);
    decoded_clear(&d);
    return g;
}
