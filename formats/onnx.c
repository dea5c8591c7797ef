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

/* How deep a model's subgraphs nest, read from the wire format without decoding it: only the
 * path that can recurse is followed (ModelProto.graph 7 -> GraphProto.node 1 -> NodeProto.
 * attribute 5 -> AttributeProto.g 6 / graphs 11 -> GraphProto ...). Returns FALSE when a graph
 * nests deeper than MAX_SUBGRAPH_DEPTH (or the encoding is malformed: the decoder then says so). */
#define MAX_SUBGRAPH_DEPTH 16
enum { WIRE_MODEL, WIRE_GRAPH, WIRE_NODE, WIRE_ATTR };

static gboolean wire_varint(const guint8 **p, const guint8 *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        guint8 b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return TRUE;
    }
    return FALSE;
}

static gboolean subgraph_depth_ok(const guint8 *p, const guint8 *end, int kind, int depth)
{
    if (kind == WIRE_GRAPH && ++depth > MAX_SUBGRAPH_DEPTH)
        return FALSE;
    while (p < end) {
        uint64_t key, v;
        if (!wire_varint(&p, end, &key))
            return TRUE;
        int field = (int)(key >> 3), wt = (int)(key & 7);
        switch (wt) {
        case 0:
            if (!wire_varint(&p, end, &v))
                return TRUE;
            break;
        case 1: if (end - p < 8) return TRUE; p += 8; break;
        case 5: if (end - p < 4) return TRUE; p += 4; break;
        case 2: {
            if (!wire_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return TRUE;
            int sub = kind == WIRE_MODEL && field == 7   ? WIRE_GRAPH
                      : kind == WIRE_GRAPH && field == 1 ? WIRE_NODE
                      : kind == WIRE_NODE && field == 5  ? WIRE_ATTR
                      : kind == WIRE_ATTR && (field == 6 || field == 11) ? WIRE_GRAPH
                                                                          : -1;
            if (sub >= 0 && !subgraph_depth_ok(p, p + v, sub, depth))
                return FALSE;
            p += v;
            break;
        }
        default:
            return TRUE; /* groups and bad wire types: the decoder reports them */
        }
    }
    return TRUE;
}

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

/* A TensorProto of host tensor t named `name`, pointing into t's data (raw_data; strings as
 * string_data). What it allocates goes into keep (g_free'd by the caller). */
static void tensor_proto_of(const PsimTensor *t, const char *name, PsimOnnx__TensorProto *tp, GPtrArray *keep)
{
    *tp = (PsimOnnx__TensorProto)PSIM_ONNX__TENSOR_PROTO__INIT;
    tp->n_dims = (size_t)t->rank;
    tp->dims = t->dims;
    tp->has_data_type = TRUE;
    tp->data_type = t->dtype;
    tp->name = (char *)name;
    if (t->dtype == PSIM_DTYPE_STRING) {
        ProtobufCBinaryData *strs = g_new0(ProtobufCBinaryData, t->n_elems ? (gsize)t->n_elems : 1);
        g_ptr_array_add(keep, strs);
        for (int64_t i = 0; i < t->n_elems; i++) {
            const char *s = str_or_empty(((char *const *)t->data)[i]);
            strs[i] = (ProtobufCBinaryData){.len = strlen(s), .data = (guint8 *)s};
        }
        tp->n_string_data = (size_t)t->n_elems;
        tp->string_data = strs;
        return;
    }
    tp->has_raw_data = TRUE;
    tp->raw_data.len = t->nbytes;
    tp->raw_data.data = t->data;
#if G_BYTE_ORDER == G_BIG_ENDIAN
    guint8 *swapped = g_memdup2(t->data, t->nbytes);
    g_ptr_array_add(keep, swapped);
    size_t es = psim_dtype_size(t->dtype);
    swap_to_host(swapped, t->nbytes, t->dtype == PSIM_DTYPE_COMPLEX64 || t->dtype == PSIM_DTYPE_COMPLEX128 ? es / 2 : es);
    tp->raw_data.data = swapped;
#endif
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
    g_autoptr(GPtrArray) keep = g_ptr_array_new_with_free_func(g_free);
    PsimOnnx__TensorProto tp;
    tensor_proto_of(t, name, &tp, keep);
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
    GHashTable *tensors;  /* tensor name (owned by the decoded message) -> index + 1 in ports:
                             the innermost scope (a Loop body's iteration, or the graph) */
    GPtrArray *outer;     /* the scopes around it, innermost last (GHashTable *) */
    GArray *ports;        /* PsimPort */
    GHashTable *suffixes; /* base name -> next suffix to try (unique names in amortized O(1)) */
    const char *prefix;   /* prepended to node names: "LOOP/ITER/" inside an unrolled body */
    int64_t unrolled;     /* nodes made by unrolling Loops so far */
    int64_t unroll_cap;   /* the most Loops may unroll to (UNROLL_BASE, UNROLL_PER_BYTE) */
} Importer;

/* Loops are unrolled at import: at most this many nodes in all their iterations, and at most
 * UNROLL_PER_BYTE per byte of the file beyond the first UNROLL_BASE, so that a small file
 * cannot ask for a graph that takes long to build (as the decoder's byte budget bounds its
 * memory). */
#define MAX_UNROLLED_NODES ((int64_t)1 << 22)
#define UNROLL_BASE ((int64_t)1 << 16)
#define UNROLL_PER_BYTE 16

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
    g_autofree char *base = *im->prefix ? g_strconcat(im->prefix, raw, NULL) : text_valid(raw, -1);
    if (*im->prefix) {
        char *valid = text_valid(base, -1);
        g_free(base);
        base = valid;
    }
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
    /* In an unrolled body each iteration's tensor is named after its iteration. */
    g_autofree char *full = g_strconcat(im->prefix, name, NULL);
    g_autofree char *valid = text_valid(full, -1);
    n->outputs[k].name = psim_graph_intern(im->g, valid);
    return TRUE;
}

/* Tensor `name` of the innermost scope is the value at port p (a Loop body's input, a Loop's
 * output). */
static gboolean tensor_alias(Importer *im, const char *name, PsimPort p, const char *what,
                             GError **error)
{
    if (g_hash_table_lookup(im->tensors, name)) {
        fail(im, error, "%s: tensor '%s' has two producers", what, name);
        return FALSE;
    }
    g_array_append_val(im->ports, p);
    g_hash_table_insert(im->tensors, (gpointer)name, GUINT_TO_POINTER(im->ports->len));
    return TRUE;
}

/* The innermost scope that defines `name`, then the ones around it (a body may read the values
 * of the graphs around it). */
static gboolean tensor_lookup(Importer *im, const char *name, PsimPort *out)
{
    gpointer v = g_hash_table_lookup(im->tensors, name);
    for (guint k = im->outer ? im->outer->len : 0; !v && k > 0; k--)
        v = g_hash_table_lookup(g_ptr_array_index(im->outer, k - 1), name);
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
    if (a->g) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->n_graphs) return PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
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

static gboolean is_loop(const PsimOnnx__NodeProto *np)
{
    const char *d = str_or_empty(np->domain);
    return !strcmp(str_or_empty(np->op_type), "Loop") && (!*d || !strcmp(d, "ai.onnx"));
}

static gboolean unroll_loop(Importer *im, const PsimOnnx__NodeProto *np, size_t i,
                            GError **error);

/* Wires node n's inputs as np names them when every one is defined (or when `must`, failing on
 * the first that is not); whether it did. */
static gboolean wire_inputs(Importer *im, PsimNode *n, const PsimOnnx__NodeProto *np, gboolean must,
                            GError **error)
{
    PsimPort few[16];
    g_autofree PsimPort *many = np->n_input > G_N_ELEMENTS(few) ? g_new(PsimPort, np->n_input) : NULL;
    PsimPort *ports = many ? many : few;
    for (size_t k = 0; k < np->n_input; k++) {
        const char *tname = str_or_empty(np->input[k]);
        ports[k] = (PsimPort){-1, 0};
        if (*tname && !tensor_lookup(im, tname, &ports[k])) {
            if (must)
                fail(im, error, "node '%s': input %zu '%s' names a missing tensor", n->name, k,
                     tname);
            return FALSE;
        }
    }
    for (size_t k = 0; k < np->n_input; k++)
        psim_graph_node_input_add(im->g, n, ports[k]);
    return TRUE;
}

/* The nodes of a graph or of one iteration of a Loop's body, in the innermost scope: each is
 * created with its outputs and attributes; the nodes whose inputs are all defined are wired;
 * then each Loop is unrolled (in file order: ONNX sorts nodes, so a Loop's inputs are defined
 * by then, and what makes its trip count is wired); then the nodes left are wired (they read a
 * Loop's outputs, or producers that follow them in the file). */
static gboolean import_nodes(Importer *im, PsimOnnx__NodeProto *const *nodes, size_t n_nodes,
                             GError **error)
{
    PsimGraph *g = im->g;
    if (n_nodes > (size_t)(G_MAXINT32 / 2)) {
        fail(im, error, "%zu nodes is too many", n_nodes);
        return FALSE;
    }
    g_autofree int32_t *id = g_new(int32_t, n_nodes + 1);
    for (size_t i = 0; i < n_nodes; i++) {
        id[i] = -1;
        if (is_loop(nodes[i]))
            continue;
        PsimNode *n = import_node(im, nodes[i], i, error);
        if (!n)
            return FALSE;
        id[i] = n->id;
    }
    g_autofree gboolean *wired = g_new0(gboolean, n_nodes + 1);
    for (size_t i = 0; i < n_nodes; i++)
        if (id[i] >= 0)
            wired[i] = wire_inputs(im, psim_graph_node(g, id[i]), nodes[i], FALSE, error);
    for (size_t i = 0; i < n_nodes; i++)
        if (id[i] < 0 && !unroll_loop(im, nodes[i], i, error))
            return FALSE;
    for (size_t i = 0; i < n_nodes; i++)
        if (id[i] >= 0 && !wired[i] && !wire_inputs(im, psim_graph_node(g, id[i]), nodes[i], TRUE, error))
            return FALSE;
    return TRUE;
}

/* The value at port p when a Const (an initializer) or a Constant node makes it, through Identity
 * nodes, as a one-element integer or boolean (a Constant's value_int too). */
static gboolean const_int(Importer *im, PsimPort p, int64_t *v)
{
    const PsimNode *n = NULL;
    for (int hops = 0; p.node >= 0 && hops < 64; hops++) {
        n = psim_graph_node(im->g, p.node);
        if (strcmp(n->op, "Identity") || n->n_inputs != 1)
            break;
        p = n->inputs[0];
    }
    if (!n || p.node < 0 || (strcmp(n->op, "Const") && strcmp(n->op, "Constant")))
        return FALSE;
    const PsimAttr *a = psim_node_attr(n, "value");
    const PsimAttr *ai = psim_node_attr(n, "value_int");
    if (!a && ai && ai->type == PSIM_ATTR_INT) {
        *v = ai->v.i;
        return TRUE;
    }
    const PsimTensor *t = a && a->type == PSIM_ATTR_TENSOR ? a->v.t : NULL;
    if (!t || t->n_elems != 1 || !t->data)
        return FALSE;
    switch (t->dtype) {
    case PSIM_DTYPE_INT64: *v = *(const int64_t *)t->data; return TRUE;
    case PSIM_DTYPE_INT32: *v = *(const int32_t *)t->data; return TRUE;
    case PSIM_DTYPE_BOOL: *v = *(const uint8_t *)t->data != 0; return TRUE;
    default: return FALSE;
    }
}

/* A new Const node (named prefix + base) holding t (taken). */
static PsimPort const_node(Importer *im, const char *base, PsimTensor *t)
{
    PsimNode *n = psim_graph_node_add(im->g, unique_name(im, base), "Const", NULL);
    g_assert(n != NULL);
    psim_graph_node_attr_set_tensor(im->g, n, "value", t);
    psim_graph_node_outputs_set(im->g, n, 1);
    psim_graph_output_value_set(im->g, n, 0, t);
    psim_tensor_unref(t);
    return (PsimPort){n->id, 0};
}

static PsimTensor *scalar_tensor(PsimDType dtype, int64_t v)
{
    PsimTensor *t = psim_tensor_new(dtype, 0, NULL, NULL);
    if (dtype == PSIM_DTYPE_INT64)
        *(int64_t *)t->data = v;
    else
        *(uint8_t *)t->data = (uint8_t)(v != 0);
    return t;
}

/* A Loop with a trip count known at import and a condition that stays true is unrolled: its
 * body is imported once per iteration (nodes named LOOP/ITER/NAME), iteration i's iter_num a
 * constant i, its cond a constant true, its loop-carried inputs the previous iteration's
 * outputs (the Loop's inputs first), values of the graphs around it read where they are; the
 * Loop's outputs are the last iteration's loop-carried values and, for each scan output, the
 * iterations' values stacked on a new first axis (Unsqueeze, Concat). A trip count computed
 * when the graph runs, or a condition the body computes, is refused (no control flow in the
 * IR: docs/onnx.md). */
static gboolean unroll_loop(Importer *im, const PsimOnnx__NodeProto *np, size_t idx,
                            GError **error)
{
    const char *oname = str_or_empty(np->name);
    const char *lname = *oname ? oname : np->n_output ? str_or_empty(np->output[0]) : "Loop";
    if (!*lname)
        lname = "Loop";
    const PsimOnnx__GraphProto *body = NULL;
    for (size_t k = 0; k < np->n_attribute; k++) {
        const PsimOnnx__AttributeProto *a = np->attribute[k];
        if (!strcmp(str_or_empty(a->name), "body") && a->g && !body)
            body = a->g;
        else {
            fail(im, error, "node #%zu ('%s', Loop): attribute '%s' is not a Loop's", idx, lname,
                 str_or_empty(a->name));
            return FALSE;
        }
    }
    if (!body) {
        fail(im, error, "node #%zu ('%s', Loop): it has no body graph", idx, lname);
        return FALSE;
    }
    if (np->n_input < 2 || body->n_input != np->n_input || body->n_output < body->n_input - 1 ||
        np->n_output != body->n_output - 1) {
        fail(im, error, "node #%zu ('%s', Loop): %zu inputs and %zu outputs do not match its body's "
             "%zu inputs (iter_num, cond, %zu loop-carried) and %zu outputs (cond, loop-carried, "
             "scan)", idx, lname, np->n_input, np->n_output, body->n_input,
             body->n_input >= 2 ? body->n_input - 2 : 0, body->n_output);
        return FALSE;
    }
    size_t n_carried = np->n_input - 2, n_scan = body->n_output - 1 - n_carried;
    /* The trip count: a constant. */
    const char *mname = str_or_empty(np->input[0]);
    PsimPort mp;
    int64_t trips = -1;
    if (!*mname || !tensor_lookup(im, mname, &mp) || !const_int(im, mp, &trips) ||
        trips < 0) {
        fail(im, error, "node '%s' (Loop): its trip count%s%s%s is not a constant (a loop whose "
             "length is known only when the graph runs is not supported: Loops are unrolled at "
             "import)", lname, *mname ? " '" : "", mname, *mname ? "'" : "");
        return FALSE;
    }
    const char *cname = str_or_empty(np->input[1]);
    PsimPort cp;
    int64_t cond = 1;
    if (*cname && (!tensor_lookup(im, cname, &cp) || !const_int(im, cp, &cond))) {
        fail(im, error, "node '%s' (Loop): its condition '%s' is not a constant", lname, cname);
        return FALSE;
    }
    if (!cond)
        trips = 0;
    if (trips > 0 && (int64_t)body->n_node > (im->unroll_cap - im->unrolled) / trips) {
        fail(im, error, "node '%s' (Loop): %" G_GINT64_FORMAT " iterations of %zu nodes is more "
             "than the %" G_GINT64_FORMAT " nodes Loops may unroll to in a file of this size",
             lname, trips, body->n_node, im->unroll_cap);
        return FALSE;
    }
    if (trips == 0 && n_scan > 0) {
        fail(im, error, "node '%s' (Loop): no iteration and %zu scan outputs (of unknown shape)",
             lname, n_scan);
        return FALSE;
    }
    im->unrolled += trips * (int64_t)body->n_node;
    g_autofree PsimPort *carried = g_new(PsimPort, n_carried + 1);
    for (size_t j = 0; j < n_carried; j++) {
        const char *vname = str_or_empty(np->input[2 + j]);
        if (!*vname || !tensor_lookup(im, vname, &carried[j])) {
            fail(im, error, "node '%s' (Loop): input %zu '%s' names a missing tensor", lname,
                 2 + j, vname);
            return FALSE;
        }
    }
    g_autofree PsimPort *scans = g_new(PsimPort, (size_t)trips * n_scan + 1);
    const char *outer_prefix = im->prefix;
    g_autofree char *loop_prefix = g_strconcat(outer_prefix, lname, "/", NULL);
    im->prefix = loop_prefix;
    PsimPort truth = const_node(im, "cond", scalar_tensor(PSIM_DTYPE_BOOL, 1));
    gboolean ok = TRUE;
    for (int64_t it = 0; ok && it < trips; it++) {
        g_autofree char *iter_prefix = g_strdup_printf("%s%" G_GINT64_FORMAT "/", loop_prefix, it);
        g_ptr_array_add(im->outer, im->tensors);
        im->tensors = g_hash_table_new(g_str_hash, g_str_equal);
        im->prefix = iter_prefix;
        g_autofree char *what = g_strdup_printf("Loop '%s', iteration %" G_GINT64_FORMAT, lname, it);
        PsimPort iter = const_node(im, "iter_num", scalar_tensor(PSIM_DTYPE_INT64, it));
        ok = tensor_alias(im, str_or_empty(body->input[0]->name), iter, what, error) &&
             tensor_alias(im, str_or_empty(body->input[1]->name), truth, what, error);
        for (size_t j = 0; ok && j < n_carried; j++)
            ok = tensor_alias(im, str_or_empty(body->input[2 + j]->name), carried[j], what, error);
        for (size_t k = 0; ok && k < body->n_initializer; k++)
            ok = import_initializer(im, body->initializer[k], k, error);
        ok = ok && import_nodes(im, body->node, body->n_node, error);
        PsimPort out;
        int64_t stays = 0;
        const char *coname = ok ? str_or_empty(body->output[0]->name) : "";
        if (ok && (!tensor_lookup(im, coname, &out) || !const_int(im, out, &stays) ||
                   !stays)) {
            fail(im, error, "node '%s' (Loop): its body computes its condition '%s' (a loop that "
                 "may end early is not supported: Loops are unrolled at import)", lname, coname);
            ok = FALSE;
        }
        for (size_t j = 0; ok && j < n_carried + n_scan; j++) {
            const char *vname = str_or_empty(body->output[1 + j]->name);
            if (!tensor_lookup(im, vname, &out)) {
                fail(im, error, "%s: body output '%s' names a missing tensor", what, vname);
                ok = FALSE;
            } else if (j < n_carried) {
                carried[j] = out;
            } else {
                scans[(j - n_carried) * (size_t)trips + (size_t)it] = out;
            }
        }
        g_hash_table_destroy(im->tensors);
        im->tensors = g_ptr_array_steal_index(im->outer, im->outer->len - 1);
        im->prefix = loop_prefix;
    }
    /* Scan outputs: each iteration's value with a new first axis, concatenated. */
    PsimPort axes = {-1, 0};
    for (size_t k = 0; ok && k < n_scan; k++) {
        if (axes.node < 0) {
            int64_t one = 1;
            PsimTensor *t = psim_tensor_new(PSIM_DTYPE_INT64, 1, &one, NULL);
            *(int64_t *)t->data = 0;
            axes = const_node(im, "axes", t);
        }
        g_autofree char *cbase = g_strdup_printf("scan_%zu", k);
        PsimNode *cat = psim_graph_node_add(im->g, unique_name(im, cbase), "Concat", NULL);
        psim_graph_node_attr_set_int(im->g, cat, "axis", 0);
        psim_graph_node_outputs_set(im->g, cat, 1);
        for (int64_t it = 0; it < trips; it++) {
            g_autofree char *ubase = g_strdup_printf("%" G_GINT64_FORMAT "/scan_%zu", it, k);
            PsimNode *u = psim_graph_node_add(im->g, unique_name(im, ubase), "Unsqueeze", NULL);
            psim_graph_node_outputs_set(im->g, u, 1);
            psim_graph_node_input_add(im->g, u, scans[k * (size_t)trips + (size_t)it]);
            psim_graph_node_input_add(im->g, u, axes);
            psim_graph_node_input_add(im->g, cat, (PsimPort){u->id, 0});
        }
        const char *sname = str_or_empty(np->output[n_carried + k]);
        im->prefix = outer_prefix;
        if (*sname)
            ok = tensor_define(im, sname, cat, 0, error);
        im->prefix = loop_prefix;
    }
    im->prefix = outer_prefix;
    for (size_t j = 0; ok && j < n_carried; j++) {
        const char *vname = str_or_empty(np->output[j]);
        if (!*vname)
            continue;
        ok = tensor_alias(im, vname, carried[j], lname, error);
        /* The last iteration's value goes by the Loop's output name (as a graph output, in
         * --check's and the exports' names); a value from outside the Loop keeps its own. */
        PsimNode *src = carried[j].node >= 0 ? psim_graph_node(im->g, carried[j].node) : NULL;
        if (ok && trips > 0 && src && g_str_has_prefix(src->name, loop_prefix)) {
            g_autofree char *full = g_strconcat(outer_prefix, vname, NULL);
            g_autofree char *valid = text_valid(full, -1);
            src->outputs[carried[j].index].name = psim_graph_intern(im->g, valid);
        }
    }
    return ok;
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
    if (!import_nodes(im, gp->node, gp->n_node, error))
        return FALSE;
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
                                   gsize file_len, GError **error)
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
        .outer = g_ptr_array_new(),
        .unroll_cap = MIN(MAX_UNROLLED_NODES,
                          UNROLL_BASE + (int64_t)MIN(file_len, (gsize)MAX_UNROLLED_NODES) * UNROLL_PER_BYTE),
        .prefix = "",
    };
    gboolean ok = import_graph(&im, mp->graph, error) && psim_graph_finalize(g, error);
    g_hash_table_destroy(im.tensors);
    g_ptr_array_free(im.outer, TRUE);
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
    if (!subgraph_depth_ok(data, data + len, WIRE_MODEL, -1)) {
        psim__error_file(error, path, "its subgraphs (Loop, If or Scan bodies) nest more than %d "
                         "deep", MAX_SUBGRAPH_DEPTH);
        return NULL;
    }
    if (!decode(&d, &psim_onnx__model_proto__descriptor, path, data, len, "ONNX model", error))
        return NULL;
    PsimGraph *g = graph_from_model(path, (const PsimOnnx__ModelProto *)d.msg, len, error);
    error_one_line(error);
    decoded_clear(&d);
    return g;
}

/* ---- PsimGraph -> ModelProto ----
 * Placeholders become the graph's inputs, Consts with a value its initializers, every other node
 * a NodeProto with its op, domain and attributes as they are (a graph read from ONNX, fused or
 * made into a training step, writes back as ONNX; ops of other formats keep their names). Each
 * output is named by its source tensor name when it has one, else by its node ("NODE",
 * "NODE:K"), made unique. ONNX has no control edges and no devices: a node's control inputs and
 * its device go into its doc_string. */

typedef struct {
    GPtrArray *keep; /* everything the message points to that we allocated */
    GHashTable *used;
    char **names;    /* by port: off[node] + k */
    int32_t *off;
} OnnxOut;

static char *kept(OnnxOut *o, char *s)
{
    g_ptr_array_add(o->keep, s);
    return s;
}

static void *kept_new0(OnnxOut *o, size_t n, size_t size)
{
    void *p = g_malloc0(n ? n * size : size);
    g_ptr_array_add(o->keep, p);
    return p;
}

static const char *port_name(const OnnxOut *o, PsimPort p)
{
    return p.node < 0 ? "" : o->names[o->off[p.node] + p.index];
}

static void assign_names(OnnxOut *o, const PsimGraph *g)
{
    int32_t n = psim_graph_n_nodes(g);
    o->off = kept_new0(o, (size_t)n + 1, sizeof(int32_t));
    for (int32_t v = 0; v < n; v++)
        o->off[v + 1] = o->off[v] + psim_graph_node(g, v)->n_outputs;
    o->names = kept_new0(o, (size_t)o->off[n] + 1, sizeof(char *));
    for (int pass = 0; pass < 2; pass++) /* source names first, so that none is renamed */
        for (int32_t v = 0; v < n; v++) {
            const PsimNode *nd = psim_graph_node(g, v);
            for (int32_t k = 0; k < nd->n_outputs; k++) {
                const char *src = nd->outputs[k].name;
                gboolean has = src && *src;
                if (has != !pass || o->names[o->off[v] + k])
                    continue;
                char *base = has ? g_strdup(src) : k ? g_strdup_printf("%s:%d", nd->name, k) : g_strdup(nd->name);
                char *name = base;
                for (int i = 1; g_hash_table_contains(o->used, name); i++) {
                    if (name != base)
                        g_free(name);
                    name = g_strdup_printf("%s_%d", base, i);
                }
                if (name != base)
                    g_free(base);
                g_hash_table_add(o->used, name);
                o->names[o->off[v] + k] = name; /* owned by o->used */
            }
        }
}

static PsimOnnx__ValueInfoProto *value_info(OnnxOut *o, const char *name, const PsimOutput *out)
{
    PsimOnnx__ValueInfoProto *vi = kept_new0(o, 1, sizeof *vi);
    psim_onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    if (out->dtype <= PSIM_DTYPE_UNDEFINED && out->rank < 0)
        return vi;
    PsimOnnx__TypeProto *tp = kept_new0(o, 1, sizeof *tp);
    psim_onnx__type_proto__init(tp);
    PsimOnnx__TypeProto__Tensor *tt = kept_new0(o, 1, sizeof *tt);
    psim_onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = out->dtype > PSIM_DTYPE_UNDEFINED;
    tt->elem_type = out->dtype;
    if (out->rank >= 0) {
        PsimOnnx__TensorShapeProto *sp = kept_new0(o, 1, sizeof *sp);
        psim_onnx__tensor_shape_proto__init(sp);
        sp->n_dim = (size_t)out->rank;
        sp->dim = kept_new0(o, (size_t)out->rank, sizeof(PsimOnnx__TensorShapeProto__Dimension *));
        for (int32_t i = 0; i < out->rank; i++) {
            PsimOnnx__TensorShapeProto__Dimension *d = kept_new0(o, 1, sizeof *d);
            psim_onnx__tensor_shape_proto__dimension__init(d);
            if (out->dims[i] >= 0) {
                d->value_case = PSIM_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = out->dims[i];
            }
            sp->dim[i] = d;
        }
        tt->shape = sp;
    }
    tp->value_case = PSIM_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

/* One attribute; FALSE (with error) for a type ONNX cannot hold. */
static gboolean attr_proto(OnnxOut *o, const PsimGraph *g, const PsimNode *n, const PsimAttr *a,
                           PsimOnnx__AttributeProto *ap, GError **error)
{
    psim_onnx__attribute_proto__init(ap);
    ap->name = (char *)a->name;
    ap->has_type = TRUE;
    switch (a->type) {
    case PSIM_ATTR_INT:
    case PSIM_ATTR_BOOL:
    case PSIM_ATTR_DTYPE:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        ap->has_i = TRUE;
        ap->i = a->type == PSIM_ATTR_INT ? a->v.i : a->type == PSIM_ATTR_BOOL ? (a->v.b != 0) : (int64_t)a->v.dt;
        return TRUE;
    case PSIM_ATTR_FLOAT:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        ap->has_f = TRUE;
        ap->f = (float)a->v.f;
        return TRUE;
    case PSIM_ATTR_STRING:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = TRUE;
        ap->s = (ProtobufCBinaryData){.len = strlen(str_or_empty(a->v.s)), .data = (guint8 *)str_or_empty(a->v.s)};
        return TRUE;
    case PSIM_ATTR_TENSOR: {
        if (!a->v.t || a->v.t->device >= 0) {
            psim_graph_node_error(error, g, n->id, "attribute '%s': no host tensor to write", a->name);
            return FALSE;
        }
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        ap->t = kept_new0(o, 1, sizeof *ap->t);
        tensor_proto_of(a->v.t, NULL, ap->t, o->keep);
        return TRUE;
    }
    case PSIM_ATTR_SHAPE:
    case PSIM_ATTR_INTS:
    case PSIM_ATTR_BOOLS:
    case PSIM_ATTR_DTYPES: {
        int32_t cnt = a->type == PSIM_ATTR_SHAPE ? a->v.shape.rank : a->n;
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        ap->n_ints = (size_t)MAX(cnt, 0);
        ap->ints = kept_new0(o, ap->n_ints, sizeof(int64_t));
        for (int32_t i = 0; i < cnt; i++)
            ap->ints[i] = a->type == PSIM_ATTR_SHAPE   ? a->v.shape.dims[i]
                          : a->type == PSIM_ATTR_INTS  ? a->v.ints[i]
                          : a->type == PSIM_ATTR_BOOLS ? (a->v.bools[i] != 0)
                                                       : (int64_t)a->v.dts[i];
        return TRUE;
    }
    case PSIM_ATTR_FLOATS:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        ap->n_floats = (size_t)a->n;
        ap->floats = kept_new0(o, ap->n_floats, sizeof(float));
        for (int32_t i = 0; i < a->n; i++)
            ap->floats[i] = (float)a->v.floats[i];
        return TRUE;
    case PSIM_ATTR_STRINGS:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        ap->n_strings = (size_t)a->n;
        ap->strings = kept_new0(o, ap->n_strings, sizeof(ProtobufCBinaryData));
        for (int32_t i = 0; i < a->n; i++)
            ap->strings[i] = (ProtobufCBinaryData){.len = strlen(str_or_empty(a->v.strs[i])),
                                                   .data = (guint8 *)str_or_empty(a->v.strs[i])};
        return TRUE;
    case PSIM_ATTR_TENSORS:
        ap->type = PSIM_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
        ap->n_tensors = (size_t)a->n;
        ap->tensors = kept_new0(o, ap->n_tensors, sizeof(PsimOnnx__TensorProto *));
        for (int32_t i = 0; i < a->n; i++) {
            if (!a->v.ts[i] || a->v.ts[i]->device >= 0) {
                psim_graph_node_error(error, g, n->id, "attribute '%s': no host tensor to write", a->name);
                return FALSE;
            }
            ap->tensors[i] = kept_new0(o, 1, sizeof(PsimOnnx__TensorProto));
            tensor_proto_of(a->v.ts[i], NULL, ap->tensors[i], o->keep);
        }
        return TRUE;
    default:
        psim_graph_node_error(error, g, n->id, "attribute '%s' is a %s, which ONNX cannot hold", a->name,
                              psim_attr_type_name(a->type));
        return FALSE;
    }
}

/* ONNX's IR version for a default-domain opset (onnx/helper.py's table). */
static int64_t ir_version_for(int64_t opset)
{
    return opset <= 8 ? 3 : opset == 9 ? 4 : opset == 10 ? 5 : opset == 11 ? 6 : opset <= 14 ? 7
           : opset <= 18 ? 8 : opset <= 20 ? 9 : 10;
}

char *psim_export_onnx(const PsimGraph *g, gsize *len, GError **error)
{
    /* ONNX lists nodes in a topological order: the graph's own when it is one (a graph read
     * from ONNX writes back in its file's order), else a computed one. */
    int32_t n = psim_graph_n_nodes(g);
    gboolean own = TRUE;
    for (int32_t v = 0; v < n && own; v++) {
        const PsimNode *nd = psim_graph_node(g, v);
        for (int32_t k = 0; k < nd->n_inputs && own; k++)
            own = nd->inputs[k].node < v;
    }
    g_autofree int32_t *order = own ? g_new(int32_t, n + 1) : psim_graph_topo_order(g, error);
    if (!order)
        return NULL;
    for (int32_t v = 0; own && v < n; v++)
        order[v] = v;
    OnnxOut o = {g_ptr_array_new_with_free_func(g_free), g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
                 NULL, NULL};
    assign_names(&o, g);
    PsimOnnx__GraphProto gp = PSIM_ONNX__GRAPH_PROTO__INIT;
    gp.name = (char *)str_or_empty(psim_graph_name(g));
    gp.node = kept_new0(&o, (size_t)n, sizeof(PsimOnnx__NodeProto *));
    gp.initializer = kept_new0(&o, (size_t)n, sizeof(PsimOnnx__TensorProto *));
    gp.input = kept_new0(&o, (size_t)n, sizeof(PsimOnnx__ValueInfoProto *));
    g_autoptr(GHashTable) domains = g_hash_table_new(g_str_hash, g_str_equal);
    gboolean ok = TRUE;
    for (int32_t i = 0; i < n && ok; i++) {
        const PsimNode *nd = psim_graph_node(g, order[i]);
        if (!strcmp(nd->op, "Placeholder") && nd->n_inputs == 0 && nd->n_outputs == 1) {
            gp.input[gp.n_input++] = value_info(&o, port_name(&o, (PsimPort){nd->id, 0}), &nd->outputs[0]);
            continue;
        }
        if (!strcmp(nd->op, "Const") && nd->n_inputs == 0 && nd->n_outputs == 1) {
            const PsimTensor *t = nd->outputs[0].value;
            if (!t || t->device >= 0) {
                psim_graph_node_error(error, g, nd->id, "a Const without a host value cannot be written to ONNX");
                ok = FALSE;
                break;
            }
            PsimOnnx__TensorProto *tp = kept_new0(&o, 1, sizeof *tp);
            tensor_proto_of(t, port_name(&o, (PsimPort){nd->id, 0}), tp, o.keep);
            gp.initializer[gp.n_initializer++] = tp;
            continue;
        }
        PsimOnnx__NodeProto *np = kept_new0(&o, 1, sizeof *np);
        psim_onnx__node_proto__init(np);
        np->name = (char *)nd->name;
        np->op_type = (char *)nd->op;
        /* A plan's transfers are no ONNX op: they go in a domain of ours (readers such as
         * Netron show them; runtimes refuse them by name rather than mistake them). */
        const char *domain = nd->domain && *nd->domain ? nd->domain
                             : !strcmp(nd->op, "Send") || !strcmp(nd->op, "Recv") ? "ai.placesim"
                                                                                   : NULL;
        if (domain) {
            np->domain = (char *)domain;
            g_hash_table_add(domains, (char *)domain);
        }
        np->n_input = (size_t)nd->n_inputs;
        np->input = kept_new0(&o, np->n_input, sizeof(char *));
        for (int32_t k = 0; k < nd->n_inputs; k++)
            np->input[k] = (char *)port_name(&o, nd->inputs[k]);
        np->n_output = (size_t)nd->n_outputs;
        np->output = kept_new0(&o, np->n_output, sizeof(char *));
        for (int32_t k = 0; k < nd->n_outputs; k++)
            np->output[k] = (char *)port_name(&o, (PsimPort){nd->id, k});
        np->n_attribute = (size_t)nd->n_attrs;
        np->attribute = kept_new0(&o, np->n_attribute, sizeof(PsimOnnx__AttributeProto *));
        for (int32_t k = 0; k < nd->n_attrs && ok; k++) {
            np->attribute[k] = kept_new0(&o, 1, sizeof(PsimOnnx__AttributeProto));
            ok = attr_proto(&o, g, nd, &nd->attrs[k], np->attribute[k], error);
        }
        const char *dev = nd->assigned_device ? nd->assigned_device : nd->device;
        if (dev || nd->n_controls) {
            GString *doc = g_string_new(NULL);
            if (dev)
                g_string_append_printf(doc, "device: %s", dev);
            for (int32_t k = 0; k < nd->n_controls; k++)
                g_string_append_printf(doc, "%s%s", k ? ", " : dev ? "; control inputs: " : "control inputs: ",
                                       psim_graph_node(g, nd->controls[k])->name);
            np->doc_string = kept(&o, g_string_free(doc, FALSE));
        }
        gp.node[gp.n_node++] = np;
    }
    int32_t n_out = psim_graph_n_outputs(g);
    gp.output = kept_new0(&o, (size_t)n_out, sizeof(PsimOnnx__ValueInfoProto *));
    for (int32_t i = 0; i < n_out && ok; i++) {
        PsimPort p = psim_graph_output(g, i);
        gp.output[gp.n_output++] = value_info(&o, port_name(&o, p), &psim_graph_node(g, p.node)->outputs[p.index]);
    }
    char *buf = NULL;
    if (ok) {
        int64_t opset = psim_graph_opset(g) > 0 ? psim_graph_opset(g) : 17;
        PsimOnnx__ModelProto mp = PSIM_ONNX__MODEL_PROTO__INIT;
        mp.has_ir_version = TRUE;
        mp.ir_version = MAX(ir_version_for(opset), 4); /* IR 3 would list every initializer as an input too */
        mp.producer_name = "placesim";
        mp.producer_version = PSIM_VERSION_STRING;
        mp.graph = &gp;
        guint nd = g_hash_table_size(domains);
        mp.opset_import = kept_new0(&o, nd + 1, sizeof(PsimOnnx__OperatorSetIdProto *));
        PsimOnnx__OperatorSetIdProto *os = kept_new0(&o, nd + 1, sizeof(PsimOnnx__OperatorSetIdProto));
        psim_onnx__operator_set_id_proto__init(&os[0]);
        os[0].domain = "";
        os[0].has_version = TRUE;
        os[0].version = opset;
        mp.opset_import[mp.n_opset_import++] = &os[0];
        GHashTableIter it;
        gpointer key;
        g_hash_table_iter_init(&it, domains);
        while (g_hash_table_iter_next(&it, &key, NULL)) {
            PsimOnnx__OperatorSetIdProto *d = &os[mp.n_opset_import];
            psim_onnx__operator_set_id_proto__init(d);
            d->domain = key;
            d->has_version = TRUE;
            d->version = 1;
            mp.opset_import[mp.n_opset_import++] = d;
        }
        size_t size = psim_onnx__model_proto__get_packed_size(&mp);
        buf = g_malloc(size ? size : 1);
        psim_onnx__model_proto__pack(&mp, (guint8 *)buf);
        *len = size;
    }
    g_ptr_array_free(o.keep, TRUE);
    g_hash_table_destroy(o.used);
    return buf;
}
