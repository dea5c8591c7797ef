/* Checkpoint files: named tensors in one file, written atomically (a temporary file beside the
 * target, fsync, rename, fsync of the directory) and closed by a SHA-256 of everything before
 * it, so a reader tells a whole checkpoint from a partial or damaged one. Also the fault
 * injector (PSIM_FAULT) that recovery tests use. Layout, little-endian:
 *   "PSIMCKP1", u32 count, count x {u32 name bytes, name, i32 dtype, i32 rank, i64 dims[rank],
 *   u64 data bytes, data}, 32 bytes of SHA-256 over all of the above. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph-private.h"

#define MAGIC "PSIMCKP1"
#define DIGEST_BYTES 32
#define CKPT_MAX_RANK 32

gboolean psim_fault_due(const char *what, int64_t count)
{
    const char *spec = g_getenv("PSIM_FAULT");
    if (!spec || !*spec)
        return FALSE;
    g_auto(GStrv) items = g_strsplit(spec, ",", -1);
    size_t wl = strlen(what);
    for (char **it = items; *it; it++)
        if (!strncmp(*it, what, wl) && (*it)[wl] == ':' &&
            g_ascii_strtoll(*it + wl + 1, NULL, 10) == count)
            return TRUE;
    return FALSE;
}

void psim_fault_kill(const char *what, int64_t count)
{
    fprintf(stderr, "placesim: PSIM_FAULT: killed at %s %lld\n", what, (long long)count);
    fflush(stderr);
    kill(getpid(), SIGKILL);
    _exit(137);
}

static void put(GString *b, const void *p, size_t n) { g_string_append_len(b, p, (gssize)n); }
static void put_u32(GString *b, uint32_t v)
{
    v = GUINT32_TO_LE(v);
    put(b, &v, 4);
}
static void put_i64(GString *b, int64_t v)
{
    uint64_t u = GUINT64_TO_LE((uint64_t)v);
    put(b, &u, 8);
}

static gboolean write_all(int fd, const char *p, size_t n, const char *path, GError **error)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s", path, g_strerror(errno));
            return FALSE;
        }
        p += w;
        n -= (size_t)w;
    }
    return TRUE;
}

static int64_t saves; /* checkpoints this process began to write (PSIM_FAULT=save:K) */

gboolean psim_checkpoint_write(const char *path, int32_t n, const char *const *names,
                               PsimTensor *const *tensors, GError **error)
{
    g_return_val_if_fail(path && n >= 0 && (n == 0 || (names && tensors)), FALSE);
    for (int32_t i = 0; i < n; i++)
        if (!tensors[i] || tensors[i]->dtype == PSIM_DTYPE_STRING || tensors[i]->device >= 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                        "%s: tensor '%s' cannot be checkpointed (%s)", path, names[i],
                        !tensors[i] ? "absent" : tensors[i]->device >= 0 ? "not in host memory"
                                                                        : "strings");
            return FALSE;
        }
    g_autoptr(GString) b = g_string_new(MAGIC);
    put_u32(b, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) {
        const PsimTensor *t = tensors[i];
        size_t nl = strlen(names[i]);
        put_u32(b, (uint32_t)nl);
        put(b, names[i], nl);
        put_u32(b, (uint32_t)t->dtype);
        put_u32(b, (uint32_t)t->rank);
        for (int32_t d = 0; d < t->rank; d++)
            put_i64(b, t->dims[d]);
        put_i64(b, (int64_t)t->nbytes);
        put(b, t->data, t->nbytes);
    }
    guint8 digest[DIGEST_BYTES];
    gsize dl = sizeof digest;
    g_autoptr(GChecksum) cs = g_checksum_new(G_CHECKSUM_SHA256);
    g_checksum_update(cs, (const guchar *)b->str, b->len);
    g_checksum_get_digest(cs, digest, &dl);
    put(b, digest, DIGEST_BYTES);

    g_autofree char *tmp = g_strdup_printf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s", tmp, g_strerror(errno));
        return FALSE;
    }
    gboolean fault = psim_fault_due("save", ++saves);
    size_t first = fault ? b->len / 2 : b->len;
    gboolean ok = write_all(fd, b->str, first, tmp, error);
    if (ok && fault) {
        fsync(fd);
        psim_fault_kill("save", saves);
    }
    if (ok && fsync(fd) != 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: fsync: %s", tmp, g_strerror(errno));
        ok = FALSE;
    }
    close(fd);
    if (ok && rename(tmp, path) != 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: %s", path, g_strerror(errno));
        ok = FALSE;
    }
    if (!ok) {
        unlink(tmp);
        return FALSE;
    }
    /* The rename itself is durable only once the directory is. */
    g_autofree char *dir = g_path_get_dirname(path);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return TRUE;
}

typedef struct {
    const guint8 *p, *end;
} Reader;

static gboolean take(Reader *r, void *out, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return FALSE;
    memcpy(out, r->p, n);
    r->p += n;
    return TRUE;
}

gboolean psim_checkpoint_read(const char *path, int32_t *n_out, char ***names_out,
                              PsimTensor ***tensors_out, GError **error)
{
    g_return_val_if_fail(path && n_out && names_out && tensors_out, FALSE);
    g_autofree char *data = NULL;
    gsize len = 0;
    GError *err = NULL;
    if (!g_file_get_contents(path, &data, &len, &err)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s", err->message);
        g_error_free(err);
        return FALSE;
    }
#define BAD(...)                                                                                   \
    do {                                                                                           \
        g_autofree char *why_ = g_strdup_printf(__VA_ARGS__);                                     \
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: not a whole checkpoint: %s", path, \
                    why_);                                                                         \
        goto fail;                                                                                 \
    } while (0)
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *tensors = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    if (len < strlen(MAGIC) + 4 + DIGEST_BYTES || memcmp(data, MAGIC, strlen(MAGIC)))
        BAD("no placesim checkpoint header");
    {
        guint8 digest[DIGEST_BYTES];
        gsize dl = sizeof digest;
        g_autoptr(GChecksum) cs = g_checksum_new(G_CHECKSUM_SHA256);
        g_checksum_update(cs, (const guchar *)data, len - DIGEST_BYTES);
        g_checksum_get_digest(cs, digest, &dl);
        if (memcmp(digest, data + len - DIGEST_BYTES, DIGEST_BYTES))
            BAD("checksum mismatch (partial or damaged file)");
    }
    Reader r = {(const guint8 *)data + strlen(MAGIC), (const guint8 *)data + len - DIGEST_BYTES};
    uint32_t count;
    if (!take(&r, &count, 4))
        BAD("truncated count");
    count = GUINT32_FROM_LE(count);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t nl, dt, rank;
        if (!take(&r, &nl, 4) || (nl = GUINT32_FROM_LE(nl)) > (size_t)(r.end - r.p))
            BAD("entry %u: truncated name", i);
        char *name = g_strndup((const char *)r.p, nl);
        g_ptr_array_add(names, name);
        r.p += nl;
        if (!take(&r, &dt, 4) || !take(&r, &rank, 4))
            BAD("entry '%s': truncated header", name);
        dt = GUINT32_FROM_LE(dt);
        rank = GUINT32_FROM_LE(rank);
        if (rank > CKPT_MAX_RANK || dt == PSIM_DTYPE_STRING || psim_dtype_size((PsimDType)dt) == 0)
            BAD("entry '%s': bad dtype %u or rank %u", name, dt, rank);
        int64_t dims[CKPT_MAX_RANK];
        for (uint32_t d = 0; d < rank; d++) {
            uint64_t v;
            if (!take(&r, &v, 8))
                BAD("entry '%s': truncated dims", name);
            dims[d] = (int64_t)GUINT64_FROM_LE(v);
            if (dims[d] < 0)
                BAD("entry '%s': negative dim", name);
        }
        uint64_t nb;
        if (!take(&r, &nb, 8))
            BAD("entry '%s': truncated size", name);
        nb = GUINT64_FROM_LE(nb);
        PsimTensor *t = psim_shape_elems((int32_t)rank, dims) < 0
                            ? NULL
                            : psim_tensor_new((PsimDType)dt, (int32_t)rank, dims, NULL);
        if (!t)
            BAD("entry '%s': bad shape", name);
        g_ptr_array_add(tensors, t);
        if (nb != t->nbytes || nb > (size_t)(r.end - r.p))
            BAD("entry '%s': %llu data bytes where its shape needs %zu", name,
                (unsigned long long)nb, t->nbytes);
        memcpy(t->data, r.p, nb);
        r.p += nb;
    }
    if (r.p != r.end)
        BAD("%td bytes after the last entry", r.end - r.p);
#undef BAD
    *n_out = (int32_t)count;
    g_ptr_array_add(names, NULL);
    *names_out = (char **)g_ptr_array_free(names, FALSE);
    *tensors_out = (PsimTensor **)g_ptr_array_free(tensors, FALSE);
    return TRUE;
fail:
    g_ptr_array_unref(names);
    g_ptr_array_unref(tensors);
    return FALSE;
}
