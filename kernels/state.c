/* Variables and queues in containers: the process-wide store that the Variable, Assign, Save
 * and queue kernels use (TensorFlow's resource containers). One lock guards the container table; each variable has
 * its own, held only to swap or take a reference to its tensor. */
#include <string.h>

#include "kernels-private.h"

struct PsimVariable {
    GMutex lock;
    PsimTensor *value;
};

static GMutex table_lock;
static GHashTable *containers; /* name -> GHashTable (variable name -> PsimVariable) */
static GHashTable *queues;     /* "container\nname" -> PsimQueue */

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

gboolean psim_variable_update(PsimVariable *v, PsimVariableUpdate fn, gpointer data, GError **error)
{
    g_return_val_if_fail(v != NULL && fn != NULL, FALSE);
    g_mutex_lock(&v->lock);
    PsimTensor *t = fn(v->value, data, error), *old = NULL;
    if (t) {
        old = v->value;
        v->value = t;
    }
    g_mutex_unlock(&v->lock);
    psim_tensor_unref(old);
    return t != NULL;
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
    g_autofree char *prefix = g_strconcat(container ? container : "", "\n", NULL);
    g_mutex_lock(&table_lock);
    if (containers)
        g_hash_table_remove(containers, container ? container : "");
    if (queues) {
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, queues);
        while (g_hash_table_iter_next(&it, &k, NULL))
            if (g_str_has_prefix(k, prefix))
                g_hash_table_iter_remove(&it);
    }
    g_mutex_unlock(&table_lock);
}

/* ---- Queues ------------------------------------------------------------------------------ */

struct PsimQueue {
    GMutex lock;
    GCond changed;
    PsimQueueSpec spec;
    GPtrArray *items; /* PsimTensor *[n_components] each, oldest first */
    gboolean closed, cancelled;
    GRand *rand;
};


static void element_free(gpointer p, int32_t n)
{
    PsimTensor **e = p;
    for (int32_t i = 0; i < n; i++)
        psim_tensor_unref(e[i]);
    g_free(e);
}

static void queue_free(gpointer p)
{
    PsimQueue *q = p;
    for (guint i = 0; i < q->items->len; i++)
        element_free(g_ptr_array_index(q->items, i), q->spec.n_components);
    g_ptr_array_free(q->items, TRUE);
    if (q->rand)
        g_rand_free(q->rand);
    g_cond_clear(&q->changed);
    g_mutex_clear(&q->lock);
    g_free(q);
}

PsimQueue *psim_queue_get(const char *container, const char *name, const PsimQueueSpec *spec,
                          GError **error)
{
    g_return_val_if_fail(name != NULL, NULL);
    g_autofree char *key = g_strconcat(container ? container : "", "\n", name, NULL);
    g_mutex_lock(&table_lock);
    if (!queues)
        queues = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, queue_free);
    PsimQueue *q = g_hash_table_lookup(queues, key);
    if (!q && spec) {
        q = g_new0(PsimQueue, 1);
        g_mutex_init(&q->lock);
        g_cond_init(&q->changed);
        q->spec = *spec;
        q->items = g_ptr_array_new();
        if (spec->shuffle)
            q->rand = g_rand_new_with_seed((guint32)(spec->seed ^ (spec->seed >> 32)));
        g_hash_table_insert(queues, g_steal_pointer(&key), q);
    }
    g_mutex_unlock(&table_lock);
    if (!q)
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "queue '%s' does not exist", name);
    else if (spec && spec->n_components != q->spec.n_components) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                    "queue '%s' exists with %d components, not %d", name, q->spec.n_components,
                    spec->n_components);
        return NULL;
    }
    return q;
}

gboolean psim_queue_enqueue(PsimQueue *q, PsimTensor *const *components, GError **error)
{
    g_mutex_lock(&q->lock);
    while (!q->closed && q->spec.capacity > 0 && (int64_t)q->items->len >= q->spec.capacity)
        g_cond_wait(&q->changed, &q->lock);
    if (q->closed) {
        g_mutex_unlock(&q->lock);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "enqueue into a closed queue");
        return FALSE;
    }
    PsimTensor **e = g_new(PsimTensor *, q->spec.n_components);
    for (int32_t i = 0; i < q->spec.n_components; i++)
        e[i] = psim_tensor_ref(components[i]);
    g_ptr_array_add(q->items, e);
    g_cond_broadcast(&q->changed);
    g_mutex_unlock(&q->lock);
    return TRUE;
}

gboolean psim_queue_dequeue(PsimQueue *q, PsimTensor **components, GError **error)
{
    g_mutex_lock(&q->lock);
    int64_t keep = q->spec.shuffle ? MAX(q->spec.min_after_dequeue, 0) : 0;
    while (!q->closed && (int64_t)q->items->len <= keep)
        g_cond_wait(&q->changed, &q->lock);
    if (q->items->len == 0) {
        g_mutex_unlock(&q->lock);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "dequeue from a closed, empty queue (out of range)");
        return FALSE;
    }
    guint at = q->spec.shuffle ? (guint)g_rand_int_range(q->rand, 0, (gint32)q->items->len) : 0;
    PsimTensor **e = q->spec.shuffle ? g_ptr_array_steal_index_fast(q->items, at)
                                     : g_ptr_array_steal_index(q->items, at);
    g_cond_broadcast(&q->changed);
    g_mutex_unlock(&q->lock);
    memcpy(components, e, sizeof(PsimTensor *) * (size_t)q->spec.n_components);
    g_free(e);
    return TRUE;
}

void psim_queue_close(PsimQueue *q, gboolean cancel)
{
    g_mutex_lock(&q->lock);
    q->closed = TRUE;
    q->cancelled |= cancel;
    g_cond_broadcast(&q->changed);
    g_mutex_unlock(&q->lock);
}

int64_t psim_queue_size(PsimQueue *q)
{
    g_mutex_lock(&q->lock);
    int64_t n = (int64_t)q->items->len;
    g_mutex_unlock(&q->lock);
    return n;
}
