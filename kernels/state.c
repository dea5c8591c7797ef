/* Variables in containers: the process-wide store that Variable, Assign and Save kernels use
 * (TensorFlow's resource containers). One lock guards the container table; each variable has
 * its own, held only to swap or take a reference to its tensor. */
#include <string.h>

#include "kernels-private.h"

struct PsimVariable {
    GMutex lock;
    PsimTensor *value;
};

static GMutex table_lock;
static GHashTable *containers; /* name -> GHashTable (variable name -> PsimVariable) */

static void variable_free(gpointer p)
{
    PsimVariable *v = p;
    psim_tensor_unref(v->value);
    g_mutex_clear(&v->lock);
    g_free(v);
}

static GHashTable *container_table(const char *container, gboolean create)
{
    if (!containers) {
        if (!create)
            return NULL;
        containers = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                           (GDestroyNotify)g_hash_table_unref);
    }
    const char *key = container ? container : "";
    GHashTable *t = g_hash_table_lookup(containers, key);
    if (!t && create) {
        t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, variable_free);
        g_hash_table_insert(containers, g_strdup(key), t);
    }
    return t;
}

PsimVariable *psim_variable_get(const char *container, const char *name, gboolean create)
{
    g_return_val_if_fail(name != NULL, NULL);
    g_mutex_lock(&table_lock);
    GHashTable *t = container_table(container, create);
    PsimVariable *v = t ? g_hash_table_lookup(t, name) : NULL;
    if (!v && t && create) {
        v = g_new0(PsimVariable, 1);
        g_mutex_init(&v->lock);
        g_hash_table_insert(t, g_strdup(name), v);
    }
    g_mutex_unlock(&table_lock);
    return v;
}

PsimTensor *psim_variable_read(PsimVariable *v)
{
    g_return_val_if_fail(v != NULL, NULL);
    g_mutex_lock(&v->lock);
    PsimTensor *t = v->value ? psim_tensor_ref(v->value) : NULL;
    g_mutex_unlock(&v->lock);
    return t;
}

void psim_variable_assign(PsimVariable *v, PsimTensor *t)
{
    g_return_if_fail(v != NULL && t != NULL);
    psim_tensor_ref(t);
    g_mutex_lock(&v->lock);
    PsimTensor *old = v->value;
    v->value = t;
    g_mutex_unlock(&v->lock);
    psim_tensor_unref(old);
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **psim_container_names(const char *container)
{
    GPtrArray *names = g_ptr_array_new();
    g_mutex_lock(&table_lock);
    GHashTable *t = container_table(container, FALSE);
    if (t) {
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, t);
        while (g_hash_table_iter_next(&it, &k, NULL))
            g_ptr_array_add(names, g_strdup(k));
    }
    g_mutex_unlock(&table_lock);
    g_ptr_array_sort(names, cmp_str);
    g_ptr_array_add(names, NULL);
    return (char **)g_ptr_array_free(names, FALSE);
}

void psim_container_reset(const char *container)
{
    g_mutex_lock(&table_lock);
    if (containers)
        g_hash_table_remove(containers, container ? container : "");
    g_mutex_unlock(&table_lock);
}
