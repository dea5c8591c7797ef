/* IDX files (the MNIST family's format: a magic of two zero bytes, an element type and a rank,
 * big-endian u32 dims, then the elements), plain or gzip-compressed, as host tensors. Only
 * unsigned bytes (type 0x08) are read: every dataset of that family stores images and labels
 * so. */
#include <gio/gio.h>
#include <string.h>

#include "placesim/formats.h"

#define IDX_MAX_BYTES ((gsize)1 << 32)

static gboolean read_all(const char *path, GByteArray **out, GError **error)
{
    g_autoptr(GFile) f = g_file_new_for_path(path);
    GError *err = NULL;
    g_autoptr(GFileInputStream) fin = g_file_read(f, NULL, &err);
    if (!fin) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", path, err->message);
        g_error_free(err);
        return FALSE;
    }
    g_autoptr(GInputStream) in = NULL;
    if (g_str_has_suffix(path, ".gz")) {
        g_autoptr(GZlibDecompressor) z = g_zlib_decompressor_new(G_ZLIB_COMPRESSOR_FORMAT_GZIP);
        in = g_converter_input_stream_new(G_INPUT_STREAM(fin), G_CONVERTER(z));
    } else {
        in = G_INPUT_STREAM(g_object_ref(fin));
    }
    GByteArray *b = g_byte_array_new();
    guint8 buf[65536];
    for (;;) {
        gssize n = g_input_stream_read(in, buf, sizeof buf, NULL, &err);
        if (n < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: %s", path, err->message);
            g_error_free(err);
            g_byte_array_unref(b);
            return FALSE;
        }
        if (n == 0)
            break;
        if (b->len + (gsize)n > IDX_MAX_BYTES) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: larger than 4 GiB", path);
            g_byte_array_unref(b);
            return FALSE;
        }
        g_byte_array_append(b, buf, (guint)n);
    }
    *out = b;
    return TRUE;
}

PsimTensor *psim_idx_load(const char *path, GError **error)
{
    g_return_val_if_fail(path != NULL, NULL);
    GByteArray *b = NULL;
    if (!read_all(path, &b, error))
        return NULL;
    g_autoptr(GByteArray) data = b;
    if (data->len < 4 || data->data[0] || data->data[1]) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: not an IDX file (bad magic)", path);
        return NULL;
    }
    int type = data->data[2], rank = data->data[3];
    if (type != 0x08) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: IDX element type 0x%02x is not unsigned bytes (0x08)", path, type);
        return NULL;
    }
    if (rank < 1 || rank > 8 || data->len < 4 + 4 * (guint)rank) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: IDX rank %d or header truncated",
                    path, rank);
        return NULL;
    }
    int64_t dims[8];
    for (int d = 0; d < rank; d++) {
        const guint8 *p = data->data + 4 + 4 * d;
        dims[d] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
    }
    int64_t n = psim_shape_elems(rank, dims);
    gsize head = 4 + 4 * (gsize)rank;
    if (n < 0 || (gsize)n != data->len - head) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "%s: IDX header describes %lld elements but the file holds %zu", path,
                    (long long)n, (size_t)(data->len - head));
        return NULL;
    }
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_UINT8, rank, dims, error);
    if (t)
        memcpy(t->data, data->data + head, (size_t)n);
    return t;
}
