/* Output files of the subcommands: each is written to a temporary file in its own folder and
 * renamed over the target only when the whole command has succeeded, so that a failure in a
 * later step never leaves an earlier output overwritten or half written. */
#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"

typedef struct {
    char *path;
    char *tmp;
} Output;

struct PsimCliOutputs {
    GArray *files;   /* Output */
    GPtrArray *dirs; /* folders this command created, removed again when it fails */
    gboolean committed;
};

PsimCliOutputs *psim_cli_outputs_new(void)
{
    PsimCliOutputs *o = g_new0(PsimCliOutputs, 1);
    o->files = g_array_new(FALSE, TRUE, sizeof(Output));
    o->dirs = g_ptr_array_new_with_free_func(g_free);
    return o;
}

void psim_cli_outputs_free(PsimCliOutputs *o)
{
    if (!o)
        return;
    for (guint i = 0; i < o->files->len; i++) {
        Output *f = &g_array_index(o->files, Output, i);
        if (!o->committed && f->tmp)
            g_unlink(f->tmp);
        g_free(f->path);
        g_free(f->tmp);
    }
    /* Only empty folders go: rmdir leaves one that something else wrote into. */
    for (guint i = o->dirs->len; !o->committed && i > 0; i--)
        g_rmdir(g_ptr_array_index(o->dirs, i - 1));
    g_array_free(o->files, TRUE);
    g_ptr_array_free(o->dirs, TRUE);
    g_free(o);
}

static gboolean parent_check(const char *path, GError **error)
{
    g_autofree char *dir = g_path_get_dirname(path);
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: the folder %s does not exist", path, dir);
        return FALSE;
    }
    return TRUE;
}

gboolean psim_cli_output_dir(PsimCliOutputs *o, const char *dir, GError **error)
{
    if (g_file_test(dir, G_FILE_TEST_IS_DIR))
        return TRUE;
    if (!parent_check(dir, error))
        return FALSE;
    if (g_mkdir(dir, 0755) != 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: cannot create the folder: %s", dir,
                    g_strerror(errno));
        return FALSE;
    }
    g_ptr_array_add(o->dirs, g_strdup(dir));
    return TRUE;
}

const char *psim_cli_output(PsimCliOutputs *o, const char *path, gboolean keep, GError **error)
{
    g_return_val_if_fail(!o->committed, NULL);
    for (guint i = 0; i < o->files->len; i++) {
        Output *f = &g_array_index(o->files, Output, i);
        if (!strcmp(f->path, path))
            return f->tmp;
    }
    if (!parent_check(path, error))
        return NULL;
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT, "%s: is a folder, not a file", path);
        return NULL;
    }
    /* The base name stays at the end: writers pick a format by extension (gnuplot's .png). */
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *base = g_path_get_basename(path);
    g_autofree char *name = g_strdup_printf(".placesim-XXXXXX-%s", base);
    char *tmp = g_build_filename(dir, name, NULL);
    int fd = g_mkstemp_full(tmp, O_RDWR, 0666);
    if (fd < 0) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot create a file in %s: %s", path,
                    dir, g_strerror(errno));
        g_free(tmp);
        return NULL;
    }
    close(fd);
    Output f = {g_strdup(path), tmp};
    g_array_append_val(o->files, f);
    if (keep && g_file_test(path, G_FILE_TEST_IS_REGULAR)) {
        /* Appending (SQLite): the new rows go into a copy, so a failure leaves the old file. */
        g_autoptr(GFile) src = g_file_new_for_path(path);
        g_autoptr(GFile) dst = g_file_new_for_path(tmp);
        g_autoptr(GError) err = NULL;
        if (!g_file_copy(src, dst, G_FILE_COPY_OVERWRITE, NULL, NULL, NULL, &err)) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot copy: %s", path, err->message);
            return NULL;
        }
    }
    return tmp;
}

gboolean psim_cli_outputs_commit(PsimCliOutputs *o, GError **error)
{
    for (guint i = 0; i < o->files->len; i++) {
        Output *f = &g_array_index(o->files, Output, i);
        if (g_rename(f->tmp, f->path) != 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s: cannot write: %s", f->path,
                        g_strerror(errno));
            /* What is renamed stays; the rest is removed by free. */
            for (guint k = 0; k < i; k++)
                g_clear_pointer(&g_array_index(o->files, Output, k).tmp, g_free);
            return FALSE;
        }
    }
    o->committed = TRUE;
    return TRUE;
}
