/* The rendezvous table: Send puts a tensor under (key, step), Recv asks for it with a callback
 * that runs as soon as both sides have arrived (on the thread of whichever came second), so that
 * a Recv never blocks a device thread. In one process a transfer between CPU devices hands the
 * tensor off (a new reference). An abort wakes every waiting and future Recv with an error, so
 * that a step failing on one device never leaves the others waiting.
 *
 * Each key has an entry of its own, made the first time the key is seen and kept until the table
 * is freed, with its own lock and its pending (step) slots, usually one. A device that holds the
 * entry's handle (psim_rendezvous_key) sends and receives without formatting, hashing or the
 * table's lock: a step of a split plan asks for every Recv of a device at its start, and through
 * one table lock and "key;step" strings that took 50-100 us of the step on two devices at once
 * (docs/validation.md). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "exec-private.h"

typedef struct {
    uint64_t step;
    gboolean sent;
    PsimTensor *tensor; /* sent value (NULL for control transfers) */
    PsimRecvDone done;  /* a waiting Recv, or NULL */
    void *user;
} Slot;

struct PsimRendezvousKey {
    pthread_mutex_t lock;
    GArray *slots; /* Slot: the steps sent or asked for and not yet matched */
    PsimRendezvous *r;
};

struct PsimRendezvous {
    pthread_mutex_t lock; /* the key table */
    GHashTable *keys;     /* key -> PsimRendezvousKey* */
    atomic_bool aborted;
    /* Nodes completed by every device that shares the table (the executor's deadlock detector
     * watches it): relaxed, only ever compared for change. */
    atomic_uint_fast64_t progress;
};

static void key_clear(PsimRendezvousKey *k)
{
    for (guint i = 0; i < k->slots->len; i++)
        psim_tensor_unref(g_array_index(k->slots, Slot, i).tensor);
    g_array_set_size(k->slots, 0);
}

static void key_free(gpointer p)
{
    PsimRendezvousKey *k = p;
    key_clear(k);
    g_array_free(k->slots, TRUE);
    pthread_mutex_destroy(&k->lock);
    g_free(k);
}

PsimRendezvous *psim_rendezvous_new(void)
{
    PsimRendezvous *r = g_new0(PsimRendezvous, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, key_free);
    return r;
}

void psim_rendezvous_free(PsimRendezvous *r)
{
    if (!r)
        return;
    g_hash_table_destroy(r->keys);
    pthread_mutex_destroy(&r->lock);
    g_free(r);
}

PsimRendezvousKey *psim_rendezvous_key(PsimRendezvous *r, const char *key)
{
    pthread_mutex_lock(&r->lock);
    PsimRendezvousKey *k = g_hash_table_lookup(r->keys, key);
    if (!k) {
        k = g_new0(PsimRendezvousKey, 1);
        pthread_mutex_init(&k->lock, NULL);
        k->slots = g_array_sized_new(FALSE, FALSE, sizeof(Slot), 2);
        k->r = r;
        g_hash_table_insert(r->keys, g_strdup(key), k);
    }
    pthread_mutex_unlock(&r->lock);
    return k;
}

/* The slot of step in k (k locked), or -1. */
static int slot_of(PsimRendezvousKey *k, uint64_t step)
{
    for (guint i = 0; i < k->slots->len; i++)
        if (g_array_index(k->slots, Slot, i).step == step)
            return (int)i;
    return -1;
}

void psim_rendezvous_key_send(PsimRendezvousKey *k, uint64_t step, PsimTensor *t)
{
    PsimRecvDone done = NULL;
    void *user = NULL;
    pthread_mutex_lock(&k->lock);
    int i = slot_of(k, step);
    if (i >= 0 && g_array_index(k->slots, Slot, i).done) {
        Slot *s = &g_array_index(k->slots, Slot, i);
        done = s->done;
        user = s->user;
        g_array_remove_index_fast(k->slots, (guint)i);
    } else if (i < 0) {
        Slot s = {.step = step, .sent = TRUE, .tensor = psim_tensor_ref(t)};
        g_array_append_val(k->slots, s);
    } /* else sent twice: keep the first */
    gboolean aborted = atomic_load(&k->r->aborted);
    pthread_mutex_unlock(&k->lock);
    if (done)
        done(aborted ? NULL : psim_tensor_ref(t), !aborted, user);
}

void psim_rendezvous_key_recv_async(PsimRendezvousKey *k, uint64_t step, PsimRecvDone done, void *user)
{
    PsimTensor *t = NULL;
    gboolean ready = FALSE;
    pthread_mutex_lock(&k->lock);
    /* Read under the entry's lock: an abort sets the flag before it takes any entry's lock to
     * fail the waiting Recvs, so a Recv either sees the flag or is found waiting. */
    gboolean aborted = atomic_load(&k->r->aborted);
    int i = slot_of(k, step);
    if (!aborted && i >= 0 && g_array_index(k->slots, Slot, i).sent) {
        t = g_array_index(k->slots, Slot, i).tensor;
        ready = TRUE;
        g_array_remove_index_fast(k->slots, (guint)i);
    } else if (!aborted) {
        Slot s = {.step = step, .done = done, .user = user};
        if (i >= 0)
            g_array_index(k->slots, Slot, i) = s; /* asked twice: the last one waits */
        else
            g_array_append_val(k->slots, s);
    }
    pthread_mutex_unlock(&k->lock);
    if (ready || aborted)
        done(t, !aborted, user);
}

void psim_rendezvous_send(PsimRendezvous *r, const char *key, uint64_t step, PsimTensor *t)
{
    psim_rendezvous_key_send(psim_rendezvous_key(r, key), step, t);
}

void psim_rendezvous_recv_async(PsimRendezvous *r, const char *key, uint64_t step,
                                PsimRecvDone done, void *user)
{
    psim_rendezvous_key_recv_async(psim_rendezvous_key(r, key), step, done, user);
}

/* Calls fn on every entry, each locked, the table locked throughout. */
static void each_key(PsimRendezvous *r, void (*fn)(PsimRendezvousKey *k, void *user), void *user)
{
    pthread_mutex_lock(&r->lock);
    GHashTableIter it;
    gpointer kk, v;
    g_hash_table_iter_init(&it, r->keys);
    while (g_hash_table_iter_next(&it, &kk, &v)) {
        PsimRendezvousKey *k = v;
        pthread_mutex_lock(&k->lock);
        fn(k, user);
        pthread_mutex_unlock(&k->lock);
    }
    pthread_mutex_unlock(&r->lock);
}

/* Moves k's waiting Recvs to `waiting` (a GArray of Slot). */
static void take_waiting(PsimRendezvousKey *k, void *waiting)
{
    for (guint i = 0; i < k->slots->len;) {
        Slot *s = &g_array_index(k->slots, Slot, i);
        if (s->done) {
            g_array_append_val((GArray *)waiting, *s);
            g_array_remove_index_fast(k->slots, i);
        } else {
            i++;
        }
    }
}

static void clear_key(PsimRendezvousKey *k, void *user)
{
    (void)user;
    key_clear(k);
}

void psim_rendezvous_abort(PsimRendezvous *r)
{
    g_autoptr(GArray) waiting = g_array_new(FALSE, FALSE, sizeof(Slot));
    /* Set before any entry is locked: a Recv either sees it or is found waiting. */
    atomic_store(&r->aborted, TRUE);
    each_key(r, take_waiting, waiting);
    for (guint i = 0; i < waiting->len; i++) {
        Slot *s = &g_array_index(waiting, Slot, i);
        s->done(NULL, FALSE, s->user);
    }
}

void psim_rendezvous_reset(PsimRendezvous *r)
{
    each_key(r, clear_key, NULL);
    atomic_store(&r->aborted, FALSE);
}

gboolean psim_rendezvous_aborted(PsimRendezvous *r)
{
    return atomic_load(&r->aborted);
}

void psim__rendezvous_progress_add(PsimRendezvous *r)
{
    atomic_fetch_add_explicit(&r->progress, 1, memory_order_relaxed);
}

uint64_t psim__rendezvous_progress(PsimRendezvous *r)
{
    return (uint64_t)atomic_load_explicit(&r->progress, memory_order_relaxed);
}
