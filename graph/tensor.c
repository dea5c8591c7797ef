/* Dtypes and reference-counted dense tensors. */
#include "graph-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[PSIM_DTYPE_N_TYPES] = {
    [PSIM_DTYPE_UNDEFINED] = {"undefined", 0}, [PSIM_DTYPE_FLOAT32] = {"float32", 4},
    [PSIM_DTYPE_UINT8] = {"uint8", 1},         [PSIM_DTYPE_INT8] = {"int8", 1},
    [PSIM_DTYPE_UINT16] = {"uint16", 2},       [PSIM_DTYPE_INT16] = {"int16", 2},
    [PSIM_DTYPE_INT32] = {"int32", 4},         [PSIM_DTYPE_INT64] = {"int64", 8},
    [PSIM_DTYPE_STRING] = {"string", sizeof(char *)}, [PSIM_DTYPE_BOOL] = {"bool", 1},
    [PSIM_DTYPE_FLOAT16] = {"float16", 2},     [PSIM_DTYPE_FLOAT64] = {"float64", 8},
    [PSIM_DTYPE_UINT32] = {"uint32", 4},       [PSIM_DTYPE_UINT64] = {"uint64", 8},
    [PSIM_DTYPE_COMPLEX64] = {"complex64", 8}, [PSIM_DTYPE_COMPLEX128] = {"complex128", 16},
    [PSIM_DTYPE_BFLOAT16] = {"bfloat16", 2},
};

size_t psim_dtype_size(PsimDType t)
{
    return (unsigned)t < PSIM_DTYPE_N_TYPES ? dtypes[t].size : 0;
}

const char *psim_dtype_name(PsimDType t)
{
    return (unsigned)t < PSIM_DTYPE_N_TYPES ? dtypes[t].name : "undefined";
}

PsimDType psim_dtype_from_name(const char *name)
{
    if (!name)
        return PSIM_DTYPE_UNDEFINED;
    for (int i = 1; i < PSIM_DTYPE_N_TYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return (PsimDType)i;
    if (!strcmp(name, "float"))
        return PSIM_DTYPE_FLOAT32;
    if (!strcmp(name, "double"))
        return PSIM_DTYPE_FLOAT64;
    if (!strcmp(name, "half"))
        return PSIM_DTYPE_FLOAT16;
    return PSIM_DTYPE_UNDEFINED;
}

int64_t psim_shape_elems(int32_t rank, const int64_t *dims)
{
    if (rank < 0)
        return -1;
    int64_t n = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] == 0)
            n = 0;
        else if (n > PSIM_MAX_ELEMENTS / dims[i])
            return -1;
        else
            n *= dims[i];
    }
    return n <= PSIM_MAX_ELEMENTS ? n : -1;
}

static PsimTensor *tensor_header(PsimDType dtype, int32_t rank, const int64_t *dims, GError **error)
{
    if (rank < 0 || rank > 64) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "tensor rank %d is out of range", rank);
        return NULL;
    }
    int64_t ne = psim_shape_elems(rank, dims);
    if (ne < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "tensor shape is unknown, negative or too large (over 2^36 elements)");
        return NULL;
    }
    if (psim_dtype_size(dtype) == 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "tensor dtype %d is not supported", dtype);
        return NULL;
    }
    PsimTensor *t = g_new0(PsimTensor, 1);
    t->dtype = dtype;
    t->rank = rank;
    t->dims = g_new(int64_t, rank ? rank : 1);
    if (rank)
        memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    t->n_elems = ne;
    t->nbytes = (size_t)ne * psim_dtype_size(dtype);
    t->refcount = 1;
    t->device = -1;
    return t;
}

PsimTensor *psim_tensor_new(PsimDType dtype, int32_t rank, const int64_t *dims, GError **error)
{
    PsimTensor *t = tensor_header(dtype, rank, dims, error);
    if (!t)
        return NULL;
    size_t sz = (t->nbytes + 63) & ~(size_t)63;
    t->data = aligned_alloc(64, sz ? sz : 64);
    if (!t->data) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "out of memory for %zu bytes", t->nbytes);
        g_free(t->dims);
        g_free(t);
        return NULL;
    }
    memset(t->data, 0, sz ? sz : 64);
    return t;
}

PsimTensor *psim_tensor_new_wrap(PsimDType dtype, int32_t rank, const int64_t *dims, void *data,
                                 void (*release)(PsimTensor *, void *), void *user)
{
    PsimTensor *t = tensor_header(dtype, rank, dims, NULL);
    g_return_val_if_fail(t != NULL, NULL);
    t->data = data;
    t->release = release;
    t->release_user = user;
    return t;
}

PsimTensor *psim_tensor_ref(PsimTensor *t)
{
    if (t)
        g_atomic_int_inc(&t->refcount);
    return t;
}

void psim_tensor_unref(PsimTensor *t)
{
    if (!t || !g_atomic_int_dec_and_test(&t->refcount))
        return;
    if (t->release) {
        t->release(t, t->release_user);
    } else {
        if (t->dtype == PSIM_DTYPE_STRING && t->data) {
            char **s = t->data;
            for (int64_t i = 0; i < t->n_elems; i++)
                g_free(s[i]);
        }
        free(t->data);
    }
    g_free(t->dims);
    g_free(t);
}

PsimTensor *psim_tensor_copy(const PsimTensor *t)
{
    PsimTensor *c = psim_tensor_new(t->dtype, t->rank, t->dims, NULL);
    g_return_val_if_fail(c != NULL, NULL);
    if (t->dtype == PSIM_DTYPE_STRING) {
        char **src = t->data, **dst = c->data;
        for (int64_t i = 0; i < t->n_elems; i++)
            dst[i] = g_strdup(src[i]);
    } else if (t->nbytes) {
        memcpy(c->data, t->data, t->nbytes);
    }
    return c;
}

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else {
            e = 127 - 15 + 1;
            while (!(m & 0x400)) {
                m <<= 1;
                e--;
            }
            bits = s | (e << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* v saturated into [lo, hi] (NaN as 0): every conversion below is then defined. */
static double sat(double v, double lo, double hi)
{
    return isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
}

void psim_tensor_set_f64(PsimTensor *t, int64_t i, double v)
{
    void *d = t->data;
    switch (t->dtype) {
    case PSIM_DTYPE_FLOAT32: ((float *)d)[i] = (float)v; break;
    case PSIM_DTYPE_FLOAT64: ((double *)d)[i] = v; break;
    case PSIM_DTYPE_INT8: ((int8_t *)d)[i] = (int8_t)sat(v, INT8_MIN, INT8_MAX); break;
    case PSIM_DTYPE_UINT8: ((uint8_t *)d)[i] = (uint8_t)sat(v, 0, UINT8_MAX); break;
    case PSIM_DTYPE_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case PSIM_DTYPE_INT16: ((int16_t *)d)[i] = (int16_t)sat(v, INT16_MIN, INT16_MAX); break;
    case PSIM_DTYPE_UINT16: ((uint16_t *)d)[i] = (uint16_t)sat(v, 0, UINT16_MAX); break;
    case PSIM_DTYPE_INT32: ((int32_t *)d)[i] = (int32_t)sat(v, INT32_MIN, INT32_MAX); break;
    case PSIM_DTYPE_UINT32: ((uint32_t *)d)[i] = (uint32_t)sat(v, 0, UINT32_MAX); break;
    /* 2^63 and 2^64 are the first doubles out of range. */
    case PSIM_DTYPE_INT64:
        ((int64_t *)d)[i] = isnan(v) ? 0 : v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v;
        break;
    case PSIM_DTYPE_UINT64:
        ((uint64_t *)d)[i] = isnan(v) || v <= 0 ? 0 : v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
        break;
    default: break;
    }
}

double psim_tensor_get_f64(const PsimTensor *t, int64_t i)
{
    const void *d = t->data;
    switch (t->dtype) {
    case PSIM_DTYPE_FLOAT32: return ((const float *)d)[i];
    case PSIM_DTYPE_FLOAT64: return ((const double *)d)[i];
    case PSIM_DTYPE_FLOAT16: return half_to_float(((const uint16_t *)d)[i]);
    case PSIM_DTYPE_BFLOAT16: {
        uint32_t bits = (uint32_t)((const uint16_t *)d)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case PSIM_DTYPE_INT8: return ((const int8_t *)d)[i];
    case PSIM_DTYPE_UINT8: return ((const uint8_t *)d)[i];
    case PSIM_DTYPE_BOOL: return ((const uint8_t *)d)[i] != 0;
    case PSIM_DTYPE_INT16: return ((const int16_t *)d)[i];
    case PSIM_DTYPE_UINT16: return ((const uint16_t *)d)[i];
    case PSIM_DTYPE_INT32: return ((const int32_t *)d)[i];
    case PSIM_DTYPE_UINT32: return ((const uint32_t *)d)[i];
    case PSIM_DTYPE_INT64: return (double)((const int64_t *)d)[i];
    case PSIM_DTYPE_UINT64: return (double)((const uint64_t *)d)[i];
    default: return 0;
    }
}

int64_t psim_tensor_get_i64(const PsimTensor *t, int64_t i)
{
    const void *d = t->data;
    switch (t->dtype) {
    case PSIM_DTYPE_INT64: return ((const int64_t *)d)[i];
    case PSIM_DTYPE_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case PSIM_DTYPE_INT32: return ((const int32_t *)d)[i];
    case PSIM_DTYPE_UINT32: return ((const uint32_t *)d)[i];
    case PSIM_DTYPE_INT16: return ((const int16_t *)d)[i];
    case PSIM_DTYPE_UINT16: return ((const uint16_t *)d)[i];
    case PSIM_DTYPE_INT8: return ((const int8_t *)d)[i];
    case PSIM_DTYPE_UINT8:
    case PSIM_DTYPE_BOOL: return ((const uint8_t *)d)[i];
    default: {
        double v = psim_tensor_get_f64(t, i);
        return v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    }
    }
}
