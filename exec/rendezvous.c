/* The rendezvous table: Send puts a tensor under "key;step", Recv asks for it with a callback that
 * runs as soon as both sides have arrived (on the thread of whichever came second), so that a
 * Recv never blocks a device thread. In one process a transfer between CPU devices hands the
 * tensor off (a new reference). An abort wakes every waiting and future Recv with an error, so
 * that a step failing on one device never leaves the others waiting. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "exec-private.h"

typedef struct {
    gboolean sent;
    PsimTensor *tensor; /* sent value (NULL for control transfers) */
    PsimRecvDone done;  /* a waiting Recv, or NULL */
    void *user;
} Slot;

struct PsimRendezvous {
    pthread_mutex_t lock;
    GHashTable *slots; /* "key;step" -> Slot* */
    gboolean aborted;
    /* Nodes completed by every device that shares the table (the executor's deadlock detector
     * watches it): relaxed, only ever compared for change. */
    atomic_uint_fast64_t progress;
};

static void slot_free(gpointer p)
{
    Slot *s = p;
    psim_tensor_unref(s->tensor);
    g_free(s);
}

PsimRendezvous *psim_rendezvous_new(void)
{
    PsimRendezvous *r = g_new0(PsimRendezvous, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->slots = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, slot_free);
    return r;
}

void psim_rendezvous_free(PsimRendezvous *r)
{
    if (!r)
        return;
    g_hash_table_destroy(r->slots);
    pthread_mutex_destroy(&r->lock);
    g_free(r);
}

/* "key;step" in buf when it fits (the common case: no allocation on the hop's path), else in a
 * new string; full_key_free frees only the latter. */
static char *full_key(char *buf, size_t size, const char *key, uint64_t step)
{
    int n = g_snprintf(buf, size, "%s;%" G_GUINT64_FORMAT, key, step);
    return n >= 0 && (size_t)n < size ? buf : g_strdup_printf("%s;%" G_GUINT64_FORMAT, key, step);
}

static void full_key_free(char *k, const char *buf)
{
    if (k != buf)
        g_free(k);
}

/* The key the table owns. */
static char *full_key_own(char *k, const char *buf) { return k == buf ? g_strdup(k) : k; }

void psim_rendezvous_send(PsimRendezvous *r, const char *key, uint64_t step, PsimTensor *t)
{
    char buf[192];
    char *k = full_key(buf, sizeof buf, key, step);
    PsimRecvDone done = NULL;
    void *user = NULL;
    pthread_mutex_lock(&r->lock);
    Slot *s = g_hash_table_lookup(r->slots, k);
    if (s && s->done) {
        done = s->done;
        user = s->user;
        g_hash_table_remove(r->slots, k);
        full_key_free(k, buf);
    } else if (!s) {
        s = g_new0(Slot, 1);
        s->sent = TRUE;
        s->tensor = psim_tensor_ref(t);
        g_hash_table_insert(r->slots, full_key_own(k, buf), s);
    } else {
        full_key_free(k, buf); /* sent twice: keep the first */
    }
    gboolean aborted = r->aborted;
    pthread_mutex_unlock(&r->lock);
    if (done)
        done(aborted ? NULL : psim_tensor_ref(t), !aborted, user);
}

void psim_rendezvous_recv_async(PsimRendezvous *r, const char *key, uint64_t step,
                                PsimRecvDone done, void *user)
{
    char buf[192];
    char *k = full_key(buf, sizeof buf, key, step);
    PsimTensor *t = NULL;
    gboolean ready = FALSE, aborted;
    pthread_mutex_lock(&r->lock);
    aborted = r->aborted;
    Slot *s = g_hash_table_lookup(r->slots, k);
    if (!aborted && s && s->sent) {
        t = s->tensor;
        s->tensor = NULL;
        ready = TRUE;
        g_hash_table_remove(r->slots, k);
        full_key_free(k, buf);
    } else if (!aborted) {
        s = g_new0(Slot, 1);
        s->done = done;
        s->user = user;
        g_hash_table_replace(r->slots, full_key_own(k, buf), s);
    } else {
        full_key_free(k, buf);
    }
    pthread_mutex_unlock(&r->lock);
    if (ready || aborted)
        done(t, !aborted, user);
}

void psim_rendezvous_abort(PsimRendezvous *r)
{
    GPtrArray *waiting = g_ptr_array_new_with_free_func(g_free);
    pthread_mutex_lock(&r->lock);
    r->aborted = TRUE;
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, r->slots);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        Slot *s = v;
        if (s->done) {
            Slot *copy = g_memdup2(s, sizeof *s);
            g_ptr_array_add(waiting, copy);
            g_hash_table_iter_remove(&it);
        }
    }
    pthread_mutex_unlock(&r->lock);
    for (guint i = 0; i < waiting->len; i++) {
        Slot *s = g_ptr_array_index(waiting, i);
        s->done(NULL, FALSE, s->user);
    }
    g_ptr_array_free(waiting, TRUE);
}

void psim_rendezvous_reset(PsimRendezvous *r)
{
    pthread_mutex_lock(&r->lock);
    r->aborted = FALSE;
    g_hash_table_remove_all(r->slots);
    pthread_mutex_unlock(&r->lock);
}

gboolean psim_rendezvous_aborted(PsimRendezvous *r)
{
    pthread_mutex_lock(&r->lock);
    gboolean a = r->aborted;
    pthread_mutex_unlock(&r->lock);
    return a;
}

void psim__rendezvous_progress_add(PsimRendezvous *r)
{
    atomic_fetch_add_explicit(&r->progress, 1, memory_order_relaxed);
}

uint64_t psim__rendezvous_progress(PsimRendezvous *r)
{
    return (uint64_t)atomic_load_explicit(&r->progress, memory_order_relaxed);
}
