/* Bounded reading of input files. Every file the CLI reads (graphs, clusters, plans, placements,
 * traces, tensors) comes through psim_input_read, so that /dev/zero, an endless pipe or a huge
 * file ends in one error line instead of a hang or an out-of-memory kill. */
#include "graph/graph-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Streams are read in chunks of this size; the sniff sees the first PSIM_INPUT_HEAD bytes. */
#define CHUNK (64 * 1024)

static gboolean fail_errno(GError **error, const char *path, const char *what, int err)
{
    psim__error_file(error, path, "cannot %s: %s", what, g_strerror(err));
    return FALSE;
}

static gboolean sniff_ok(const char *path, const guint8 *head, gsize len, PsimInputSniff sniff,
                         GError **error)
{
    const char *why = sniff ? sniff(path, head, MIN(len, PSIM_INPUT_HEAD)) : NULL;
    if (why) {
        psim__error_file(error, path, "%s", why);
        return FALSE;
    }
    return TRUE;
}

static GBytes *too_big(GError **error, const char *path, guint64 max_bytes)
{
    psim__error_file(error, path, "larger than %" G_GUINT64_FORMAT " MiB, the limit for this kind of file",
                     max_bytes >> 20);
    return NULL;
}

/* Pipes, character devices, stdin and files whose size stat does not tell (/proc): read until
 * the end, the size limit, or the first chunk failing the sniff, whichever comes first. */
static GBytes *read_stream(int fd, const char *path, guint64 max_bytes, PsimInputSniff sniff,
                           GError **error)
{
    g_autoptr(GByteArray) buf = g_byte_array_sized_new(CHUNK);
    gboolean sniffed = FALSE;
    /* A GByteArray counts in guint. */
    max_bytes = MIN(max_bytes, (guint64)G_MAXUINT - 2 * CHUNK);
    for (;;) {
        if ((guint64)buf->len > max_bytes)
            return too_big(error, path, max_bytes);
        guint old = buf->len;
        g_byte_array_set_size(buf, old + CHUNK);
        ssize_t n = read(fd, buf->data + old, CHUNK);
        if (n < 0 && errno == EINTR) {
            g_byte_array_set_size(buf, old);
            continue;
        }
        if (n < 0) {
            int err = errno;
            fail_errno(error, path, "read", err);
            return NULL;
        }
        g_byte_array_set_size(buf, old + (guint)n);
        if (!sniffed && (n == 0 || buf->len >= PSIM_INPUT_HEAD)) {
            if (!sniff_ok(path, buf->data, buf->len, sniff, error))
                return NULL;
            sniffed = TRUE;
        }
        if (n == 0)
            break;
    }
    return g_byte_array_free_to_bytes(g_steal_pointer(&buf));
}

GBytes *psim_input_read(const char *path, guint64 max_bytes, PsimInputSniff sniff, GError **error)
{
    g_return_val_if_fail(path != NULL, NULL);
    if (!strcmp(path, "-"))
        return read_stream(STDIN_FILENO, path, max_bytes, sniff, error);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        fail_errno(error, path, "read", err);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int err = errno;
        close(fd);
        fail_errno(error, path, "read", err);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        psim__error_file(error, path, "is a directory, not a file");
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        GBytes *b = read_stream(fd, path, max_bytes, sniff, error);
        close(fd);
        return b;
    }
    if ((guint64)st.st_size > max_bytes) {
        close(fd);
        return too_big(error, path, max_bytes);
    }
    /* Regular files are mapped: a 2 GiB model is not copied. */
    g_autoptr(GError) merr = NULL;
    GMappedFile *mf = g_mapped_file_new_from_fd(fd, FALSE, &merr);
    close(fd);
    if (!mf) {
        psim__error_file(error, path, "cannot read: %s", merr->message);
        return NULL;
    }
    GBytes *b = g_mapped_file_get_bytes(mf);
    g_mapped_file_unref(mf);
    gsize len = 0;
    const guint8 *data = g_bytes_get_data(b, &len);
    if (!sniff_ok(path, data, len, sniff, error)) {
        g_bytes_unref(b);
        return NULL;
    }
    return b;
}
