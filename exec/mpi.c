/* A plan run over MPI processes: each rank is the task /job:worker/replica:0/task:RANK with its
 * own devices. Rank 0 places and partitions, ships every task the plan once (its one setup
 * message: the plan with its graph, the cluster, the feed and fetch names), and then starts each
 * step with one small message per task: the step id and the feeds of that task's devices. Each
 * task runs its devices' part of the plan (exec/plan-exec.c) and answers with its fetches and
 * its step's span. Tensors between tasks travel as non-blocking point-to-point messages tagged
 * with the transfer's index, received straight into a buffer of the destination device.
 *
 * MPI runs with MPI_THREAD_MULTIPLE, and a tensor's way involves no other thread: the Send's
 * device thread sends it itself (MPI_Send up to 4 KiB, else MPI_Isend), and the destination
 * device's thread, while it has Recvs outstanding, tests the receives posted for it
 * (MPI_Testsome) and delivers what arrived.
 * Debian's OpenMPI 4.1 has no ULFM and no background progress, so one communication thread per
 * process completes what is still leaving, reads control messages, sends heartbeats and watches
 * the peers (rank 0 watches every task, a task watches rank 0). A peer
 * silent for PSIM_MPI_DEADLINE_US, or on this host a peer whose process has ended, fails the
 * step on the watcher with one line naming the task; every rank then ends with exit 1. docs/exec.md, "Over MPI". */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "exec-private.h"
#include "placesim/cost.h"
#include "placesim/formats.h"

#ifdef PSIM_HAVE_MPI
#include <mpi.h>

enum {
    TAG_SETUP = 1, /* rank 0 -> task: the plan, once */
    TAG_STEP,      /* rank 0 -> task: step id and feeds */
    TAG_REPLY,     /* task -> rank 0: status, span, fetches */
    TAG_STOP,      /* rank 0 -> task: no more steps */
    TAG_HEARTBEAT, /* both ways, every PSIM_MPI_HEARTBEAT_US */
    TAG_ABORT,     /* rank 0 -> task: a task failed, end now */
    TAG_QUIT,      /* rank 0 -> task: no more plans */
    TAG_TRACE,     /* rank 0 -> task: the last step's timeline (answered with a TAG_REPLY) */
};

#define HANDLE 1u                     /* the one cached plan's handle */
#define SETUP_STEP UINT64_MAX         /* a reply to the setup message */
#define TRACE_STEP (UINT64_MAX - 1)   /* a reply to TAG_TRACE */
#define CHUNK_BYTES (64u << 20)       /* large tensors go as several messages */
#define SMALL_SEND_BYTES 4096         /* at most this, a Send is a blocking MPI_Send (remote_send) */
#define IDLE_SPIN_US 2000.0           /* after activity, poll without sleeping this long */
#define PSIM_MPI_IDLE_SLEEP_US 1000 /* an idle thread's longest sleep */

typedef enum { POST_SEND, POST_RECV, POST_CTRL } PostKind;

typedef struct {
    PostKind kind;
    int peer, tag;
    PsimTensor *t;      /* SEND: held until sent; RECV: the destination buffer */
    uint16_t *half;     /* compressed float32: the 16-bit halves on the wire */
    void *bytes;        /* CTRL: the message (owned) */
    size_t n;           /* bytes on the wire */
    PsimRendezvousKey *key; /* RECV: delivered here at `step` */
    uint64_t step;
    int n_req, n_open; /* requests; RECV: those not yet complete */
    MPI_Request *req;
} Post;

typedef struct {
    int src, tag;
    guint8 *data;
    size_t n;
} Msg;

struct PsimMpi {
    int rank, size, local_rank, local_size;
    MPI_Comm ctrl, data;
    PsimCluster *cluster; /* rank 0: every task's devices; a task: its own until the setup */
    double *clock_offset; /* rank 0: task clock minus rank 0's (us) */
    GThread *thread;
    atomic_bool stop;
    GAsyncQueue *posts; /* Post* to the communication thread */
    GAsyncQueue *inbox; /* Msg* from it (control messages, and tag -1: a peer went silent) */
    /* Control messages are taken by the communication thread and by a thread waiting for one
     * (next_msg), one at a time under ctrl_lock so that the inbox keeps each sender's order. */
    pthread_mutex_t ctrl_lock;
    double *last_heard; /* per rank (under ctrl_lock) */
    gboolean *watch, *reported;
    int *pidfd; /* per watched peer on this host: its process (-1: none, or another host) */
    PsimMpiStats stats; /* rank 0's messages to each task */
    uint64_t *setup_msgs, *setup_bytes, *step_msgs, *step_bytes;
    double deadline_us;
    int32_t n_task_cores, *task_cores; /* this task's cores (its devices') */
    gboolean own_cores;                 /* no other task of this host shares them */
    /* The current plan part's rendezvous: a failed task, or a silent peer, aborts it so that
     * this process's devices stop waiting for Recvs that will not come. */
    PsimRendezvous *_Atomic local_rdv;
    _Atomic uint64_t cur_step;           /* rank 0: the step in flight (for the last word) */
    atomic_bool said;                    /* rank 0 has written the job's last word */
    atomic_bool ending;                  /* QUIT sent (rank 0) or seen (a task): exits are due */
    atomic_int n_leaving;    /* sends posted and not yet complete */
};

static void post_free(Post *p)
{
    if (p->t)
        psim_tensor_unref(p->t);
    g_free(p->half);
    g_free(p->bytes);
    g_free(p->req);
    g_free(p);
}

/* --- Messages: a small checked encoding ---------------------------------------------------- */

static void put(GByteArray *b, const void *p, size_t n) { g_byte_array_append(b, p, (guint)n); }
static void put_u64(GByteArray *b, uint64_t v) { put(b, &v, 8); }
static void put_f64(GByteArray *b, double v) { put(b, &v, 8); }
static void put_str(GByteArray *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

typedef struct {
    const guint8 *p, *end;
    gboolean bad;
} Reader;

static const void *take(Reader *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = TRUE;
        return NULL;
    }
    const void *q = r->p;
    r->p += n;
    return q;
}
static uint64_t get_u64(Reader *r)
{
    const void *q = take(r, 8);
    uint64_t v = 0;
    if (q)
        memcpy(&v, q, 8);
    return v;
}
static double get_f64(Reader *r)
{
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, 8);
    return v;
}
static const char *get_str(Reader *r, size_t *n)
{
    *n = get_u64(r);
    return take(r, *n);
}

/* Feeds and fetches ride in control messages, one MPI message each: at most this many bytes. */
#define MAX_CTRL_TENSOR_BYTES (1u << 30)

static gboolean put_tensor(GByteArray *b, const PsimTensor *t, GError **error)
{
    if (t->dtype == PSIM_DTYPE_STRING || t->device >= 0 || t->nbytes > MAX_CTRL_TENSOR_BYTES ||
        b->len > MAX_CTRL_TENSOR_BYTES) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_UNSUPPORTED,
                    "mpi: a feed or fetch crosses between tasks only as a host tensor of numbers of "
                    "at most 1 GiB (with the others of its message)");
        return FALSE;
    }
    put_u64(b, (uint64_t)t->dtype);
    put_u64(b, (uint64_t)t->rank);
    for (int32_t i = 0; i < t->rank; i++)
        put_u64(b, (uint64_t)t->dims[i]);
    put_str(b, t->data, t->nbytes);
    return TRUE;
}

static PsimTensor *get_tensor(Reader *r, GError **error)
{
    uint64_t dtype = get_u64(r), rank = get_u64(r);
    if (r->bad || dtype >= PSIM_DTYPE_N_TYPES || dtype == PSIM_DTYPE_STRING || rank > 32)
        goto bad;
    int64_t dims[32];
    for (uint64_t i = 0; i < rank; i++)
        dims[i] = (int64_t)get_u64(r);
    size_t n;
    const char *data = get_str(r, &n);
    if (r->bad)
        goto bad;
    PsimTensor *t = psim_tensor_new((PsimDType)dtype, (int32_t)rank, dims, error);
    if (!t)
        return NULL;
    if (t->nbytes != n) {
        psim_tensor_unref(t);
        goto bad;
    }
    memcpy(t->data, data, n);
    return t;
bad:
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "mpi: a malformed tensor in a message");
    return NULL;
}

/* --- The communication thread ------------------------------------------------------------- */

static void start(PsimMpi *m, Post *p)
{
    const guint8 *buf = p->half ? (const guint8 *)p->half : p->t ? p->t->data : p->bytes;
    size_t n = p->n;
    MPI_Comm comm = p->kind == POST_CTRL ? m->ctrl : m->data;
    /* A tensor over CHUNK_BYTES goes as several messages of its tag (MPI keeps them in order);
     * a control message is always one (the reader takes each as whole; they are capped). */
    p->n_req = n <= CHUNK_BYTES || p->kind == POST_CTRL ? 1 : (int)((n + CHUNK_BYTES - 1) / CHUNK_BYTES);
    p->req = g_new(MPI_Request, p->n_req);
    for (int k = 0; k < p->n_req; k++) {
        size_t chunk = p->n_req == 1 ? n : CHUNK_BYTES;
        size_t off = (size_t)k * chunk, len = MIN(chunk, n - MIN(n, off));
        if (p->kind == POST_RECV)
            MPI_Irecv((void *)(buf + off), (int)len, MPI_BYTE, p->peer, p->tag, comm, &p->req[k]);
        else
            MPI_Isend(buf + off, (int)len, MPI_BYTE, p->peer, p->tag, comm, &p->req[k]);
    }
}

/* A receive is complete: its tensor (NULL for control) goes to the Recv's rendezvous key. */
static void deliver(Post *p)
{
    PsimTensor *t = p->t;
    if (t && p->half) { /* float32 sent as its high 16 bits: the low ones arrive zero */
        uint32_t *out = t->data;
        for (int64_t i = 0; i < t->n_elems; i++)
            out[i] = (uint32_t)p->half[i] << 16;
    }
    psim_rendezvous_key_send(p->key, p->step, t);
}

static double now_us(void) { return psim_exec_now_us(); }

/* mpirun ends a job whose rank died by sending the others SIGTERM: the handler only notes it,
 * and the communication thread says what happened. */
static volatile sig_atomic_t terminated;
static void on_sigterm(int sig)
{
    (void)sig;
    terminated = 1;
}

/* The job is being ended from outside (a task died and mpirun noticed first): rank 0 names the
 * task it has not heard from for longest, and every rank exits 1. */
static G_GNUC_NORETURN void ended_by_launcher(PsimMpi *m)
{
    if (m->rank == 0 && !atomic_exchange(&m->said, TRUE)) {
        int worst = -1;
        double now = now_us(), age = 0;
        for (int r = 1; r < m->size; r++)
            if (now - m->last_heard[r] > age)
                age = now - m->last_heard[r], worst = r;
        if (worst > 0 && age > 1.5 * PSIM_MPI_HEARTBEAT_US)
            fprintf(stderr, "placesim: mpi: task %d (rank %d) died at step %" G_GUINT64_FORMAT
                    " (nothing heard from it for %.0f ms): mpirun ends the job\n",
                    worst, worst, atomic_load(&m->cur_step), age * 1e-3);
        else
            fprintf(stderr, "placesim: mpi: a task died at step %" G_GUINT64_FORMAT ": mpirun ends the job\n",
                    atomic_load(&m->cur_step));
        fflush(stderr);
    }
    _exit(1);
}

/* A peer on this host is watched through its process as well as its heartbeats: a pidfd turns
 * readable the moment the process ends. mpirun signals the survivors of a death about 1 s later
 * (its odls_base_sigkill_timeout) and may then end them before their output has crossed, so a
 * death noticed only by a 1 s heartbeat deadline raced it and the job's line was sometimes lost
 * (3 runs in 12 on a loaded 2-core machine); noticed within a heartbeat, the line is out and the
 * job over before mpirun acts. */
static uint64_t process_start_ticks(int pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", pid), *text = NULL;
    if (!g_file_get_contents(path, &text, NULL, NULL))
        return 0;
    const char *p = strrchr(text, ')'); /* the command name may hold spaces */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? g_ascii_strtoull(p + 1, NULL, 10) : 0;
}

/* This host, by its kernel's boot: processes are watched only on the same one. */
static uint64_t host_key(void)
{
    g_autofree char *id = NULL;
    if (!g_file_get_contents("/proc/sys/kernel/random/boot_id", &id, NULL, NULL))
        return 0;
    return g_str_hash(g_strstrip(id)) | (uint64_t)1 << 40;
}

static int open_process(int pid, uint64_t start_ticks)
{
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return -1;
    /* The same process, not one of that number in another pid namespace. */
    if (process_start_ticks(pid) != start_ticks) {
        close(fd);
        return -1;
    }
    return fd;
#else
    (void)pid, (void)start_ticks;
    return -1;
#endif
}

static gboolean process_ended(int fd)
{
    if (fd < 0)
        return FALSE;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP));
}

/* Takes one control message if one has come: a heartbeat only counts; the others take
 * effect here (an abort ends this task; a failed reply stops this process's devices waiting)
 * and go to the inbox. Whether one was taken. Any thread. */
static gboolean take_ctrl(PsimMpi *m)
{
    pthread_mutex_lock(&m->ctrl_lock);
    int flag = 0;
    MPI_Message handle;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->ctrl, &flag, &handle, &st);
    if (!flag) {
        pthread_mutex_unlock(&m->ctrl_lock);
        return FALSE;
    }
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    Msg *msg = g_new0(Msg, 1);
    msg->src = st.MPI_SOURCE;
    msg->tag = st.MPI_TAG;
    msg->n = (size_t)count;
    msg->data = g_malloc(msg->n + 1);
    MPI_Mrecv(msg->data, count, MPI_BYTE, &handle, MPI_STATUS_IGNORE);
    m->last_heard[msg->src] = now_us();
    if (msg->tag == TAG_HEARTBEAT) {
        pthread_mutex_unlock(&m->ctrl_lock);
        g_free(msg->data);
        g_free(msg);
        return TRUE;
    }
    if (msg->tag == TAG_ABORT) /* rank 0 has said why: this task ends, quietly */
        psim_mpi_abort(m);
    if (msg->tag == TAG_QUIT)
        atomic_store(&m->ending, TRUE);
    uint64_t ok = 1;
    if (msg->tag == TAG_REPLY && msg->n >= 16)
        memcpy(&ok, msg->data + 8, 8);
    PsimRendezvous *rdv = atomic_load(&m->local_rdv);
    if (!ok && rdv) /* a task failed: this process's devices stop waiting on it */
        psim_rendezvous_abort(rdv);
    if (!ok) /* its error is the job's line; its exit, which follows, is not news */
        atomic_store(&m->ending, TRUE);
    g_async_queue_push(m->inbox, msg);
    pthread_mutex_unlock(&m->ctrl_lock);
    return TRUE;
}

static gpointer comm_main(gpointer data)
{
    PsimMpi *m = data;
    /* On this task's cores, beside its devices' threads, never on another task's. */
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int32_t i = 0; i < m->n_task_cores; i++)
        CPU_SET(m->task_cores[i], &set);
    if (m->n_task_cores > 0)
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    g_autoptr(GPtrArray) active = g_ptr_array_new();
    static int heartbeat_payload;
    double last_beat = 0, last_busy = now_us(), last_turn = last_busy;
    while (!atomic_load(&m->stop)) {
        gboolean busy = FALSE, data_pending = FALSE;
        Post *p;
        while ((p = g_async_queue_try_pop(m->posts))) {
            g_ptr_array_add(active, p);
            busy = TRUE;
        }
        for (guint i = 0; i < active->len;) {
            p = g_ptr_array_index(active, i);
            int done = 0;
            MPI_Testall(p->n_req, p->req, &done, MPI_STATUSES_IGNORE);
            if (!done) {
                data_pending |= p->kind != POST_CTRL;
                i++;
                continue;
            }
            atomic_fetch_sub(&m->n_leaving, 1);
            post_free(p);
            g_ptr_array_remove_index_fast(active, i);
            busy = TRUE;
        }
        while (take_ctrl(m))
            busy = TRUE;
        if (terminated)
            ended_by_launcher(m);
        double t = now_us();
        /* This thread turns at least every PSIM_MPI_IDLE_SLEEP_US: a turn that took half the
         * deadline means this process itself did not run (stopped, as PSIM_FAULT's hang does,
         * or starved). The peers' silence over that time is its own, so they get a fresh
         * deadline rather than the blame: a task resumed only to be ended by mpirun said "rank
         * 0 stopped responding" beside rank 0's line naming it (cli-mpi under load). */
        if (t - last_turn > m->deadline_us / 2) {
            pthread_mutex_lock(&m->ctrl_lock);
            for (int r = 0; r < m->size; r++)
                m->last_heard[r] = MAX(m->last_heard[r], t);
            pthread_mutex_unlock(&m->ctrl_lock);
        }
        last_turn = t;
        if (t - last_beat >= PSIM_MPI_HEARTBEAT_US) {
            last_beat = t;
            for (int r = 0; r < m->size; r++) {
                if (!m->watch[r])
                    continue;
                MPI_Request req;
                MPI_Isend(&heartbeat_payload, 0, MPI_BYTE, r, TAG_HEARTBEAT, m->ctrl, &req);
                MPI_Request_free(&req);
                gboolean ended = !atomic_load(&m->ending) && process_ended(m->pidfd[r]);
                pthread_mutex_lock(&m->ctrl_lock);
                double heard = m->last_heard[r];
                pthread_mutex_unlock(&m->ctrl_lock);
                if ((ended || t - heard > m->deadline_us) && !m->reported[r]) {
                    m->reported[r] = TRUE;
                    /* Said at once, by this thread: mpirun may end the job any moment now. */
                    if (m->rank == 0 && !atomic_exchange(&m->said, TRUE)) {
                        if (ended)
                            fprintf(stderr, "placesim: mpi: task %d (rank %d) died at step %" G_GUINT64_FORMAT
                                    " (its process ended): the job ends\n", r, r, atomic_load(&m->cur_step));
                        else
                            fprintf(stderr, "placesim: mpi: task %d (rank %d) stopped responding at step %" G_GUINT64_FORMAT
                                    " (no message for %.1f s): the job ends\n",
                                    r, r, atomic_load(&m->cur_step), m->deadline_us * 1e-6);
                        fflush(stderr);
                    }
                    PsimRendezvous *rdv = atomic_load(&m->local_rdv);
                    if (rdv)
                        psim_rendezvous_abort(rdv);
                    Msg *msg = g_new0(Msg, 1);
                    msg->src = r;
                    msg->tag = -1;
                    g_async_queue_push(m->inbox, msg);
                }
            }
        }
        if (busy)
            last_busy = t;
        /* While sends are in flight, and for IDLE_SPIN_US after any activity, the thread polls,
         * yielding its core at every turn (it shares the task's cores with the device threads):
         * with it asleep between the steps of a loop, a 16 MiB tensor took 1.3x as long to
         * cross (bench-mpi-transfer) and a step's start waited on wake-ups. Once idle for long
         * it sleeps until something is posted, or for PSIM_MPI_IDLE_SLEEP_US to look for
         * messages (a thread waiting for one takes it in itself, next_msg): a thread woken
         * every 100 us instead preempted the kernels of its core so often that a model on one
         * task ran 35% slower (zfnet512 on task 0 alone: 79 ms against 57.6 ms in a plain
         * process; 59-61 ms with 1 ms). */
        if (data_pending || t - last_busy < IDLE_SPIN_US)
            sched_yield();
        else if ((p = g_async_queue_timeout_pop(m->posts, PSIM_MPI_IDLE_SLEEP_US)))
            g_async_queue_push_front(m->posts, p);
    }
    /* Whatever has not left by now (the job is ending) is let go. */
    for (guint i = 0; i < active->len; i++) {
        Post *p = g_ptr_array_index(active, i);
        for (int k = 0; k < p->n_req; k++)
            MPI_Request_free(&p->req[k]);
        post_free(p);
    }
    return NULL;
}

/* A send or control message leaves now, from the calling thread; what MPI has not completed
 * at once the communication thread completes. */
static void post(PsimMpi *m, Post *p)
{
    g_return_if_fail(p->kind != POST_RECV);
    start(m, p);
    int done = 0;
    MPI_Testall(p->n_req, p->req, &done, MPI_STATUSES_IGNORE);
    if (done) {
        post_free(p);
        return;
    }
    atomic_fetch_add(&m->n_leaving, 1);
    g_async_queue_push(m->posts, p);
}

static void post_ctrl(PsimMpi *m, int peer, int tag, GByteArray *b)
{
    Post *p = g_new0(Post, 1);
    p->kind = POST_CTRL;
    p->peer = peer;
    p->tag = tag;
    p->n = b->len;
    p->bytes = g_byte_array_free(b, FALSE);
    post(m, p);
}

/* How long a thread waiting for a control message takes it in itself before it leaves that
 * to the communication thread (which looks at least every PSIM_MPI_IDLE_SLEEP_US). */
#define CTRL_SPIN_US 2000.0

/* The next control message, from anyone (taking it in itself for a while: the step's message
 * or reply is due within microseconds in a loop of steps); NULL after `timeout_us` (< 0: wait
 * for ever). A task whose cores are its own looks with the pause hint for the first
 * PSIM_EXEC_PAUSE_SPIN_US, as a waiting device does, before it yields its core at each look:
 * yielding, it took its turn among the task's other yielding threads (the device's between
 * steps, the communication thread), and a one-transfer step over two tasks took 2.8-4.9 us a
 * hop against 1.0-2.5 with the pause (bench-mpi-transfer, docs/perf.md). */
static Msg *next_msg(PsimMpi *m, double timeout_us)
{
    double start = now_us(), spin_end = start + CTRL_SPIN_US;
    for (;;) {
        Msg *msg = g_async_queue_try_pop(m->inbox);
        if (msg)
            return msg;
        if (take_ctrl(m))
            continue;
        double t = now_us();
        if (timeout_us >= 0 && t - start >= timeout_us)
            return NULL;
        if (m->own_cores && t < start + PSIM_EXEC_PAUSE_SPIN_US) {
            for (int k = 0; k < 4; k++)
                psim__cpu_relax();
            continue;
        }
        if (t < spin_end) {
            sched_yield();
            continue;
        }
        if (timeout_us < 0)
            return g_async_queue_pop(m->inbox);
        return g_async_queue_timeout_pop(m->inbox, (guint64)MAX(timeout_us - (t - start), 1));
    }
}

static void msg_free(Msg *msg)
{
    if (msg) {
        g_free(msg->data);
        g_free(msg);
    }
}

/* --- Set-up: the world's cluster, clocks and links ---------------------------------------- */

/* This task's devices: one CPU device on this rank's share of the host's cores (ranks on one
 * host split its cores as `local:N` splits them among devices). */
static PsimCluster *task_cluster(PsimMpi *m)
{
    long n_cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_cores < 1)
        n_cores = 1;
    long per = m->local_size <= n_cores ? n_cores / m->local_size : 1;
    PsimCluster *c = psim_cluster_new();
    const char *host = psim_device_class_host()->type;
    g_autofree char *name = g_strdup_printf("/job:worker/replica:0/task:%d/device:%s:0", m->rank, host);
    PsimDevice *d = psim_cluster_device(c, psim_cluster_device_add(c, name, host, NULL));
    d->n_cores = (int32_t)per;
    d->cores = g_new(int32_t, per);
    for (long k = 0; k < per; k++)
        d->cores[k] = (int32_t)((m->local_rank * per + k) % n_cores);
    m->n_task_cores = d->n_cores;
    m->task_cores = g_memdup2(d->cores, sizeof(int32_t) * (size_t)per);
    m->own_cores = m->local_size <= n_cores;
    d->description = g_strdup(psim_fingerprint_host_cpu_model());
    d->host = g_strdup(g_get_host_name());
    return c;
}

/* Rank 0 and each task ping-pong: the task's clock offset (Cristian's, the round trip of least
 * delay), and the link's latency (half the 8-byte round trip) and bandwidth (of 8 MiB), the
 * least of REPS each (bandwidth: 8 MiB over its whole round trip, one way). Blocking calls, before
 * the communication thread starts. */
#define REPS 8
static void measure_links(PsimMpi *m, double *lat_us, double *bw_GBps)
{
    const size_t big = 8u << 20;
    g_autofree guint8 *buf = g_malloc0(big);
    for (int t = 1; t < m->size; t++) {
        if (m->rank != 0 && m->rank != t) {
            MPI_Barrier(m->ctrl);
            continue;
        }
        double best_rtt = INFINITY, best_big = INFINITY;
        for (int k = 0; k < REPS; k++) {
            double t0 = now_us(), remote = 0;
            if (m->rank == 0) {
                MPI_Send(&t0, 1, MPI_DOUBLE, t, 0, m->ctrl);
                MPI_Recv(&remote, 1, MPI_DOUBLE, t, 0, m->ctrl, MPI_STATUS_IGNORE);
                double t1 = now_us();
                if (t1 - t0 < best_rtt) {
                    best_rtt = t1 - t0;
                    m->clock_offset[t] = remote - 0.5 * (t0 + t1);
                }
                double b0 = now_us();
                MPI_Send(buf, (int)big, MPI_BYTE, t, 1, m->ctrl);
                MPI_Recv(buf, 1, MPI_BYTE, t, 1, m->ctrl, MPI_STATUS_IGNORE);
                best_big = MIN(best_big, now_us() - b0);
            } else {
                MPI_Recv(&remote, 1, MPI_DOUBLE, 0, 0, m->ctrl, MPI_STATUS_IGNORE);
                double mine = now_us();
                MPI_Send(&mine, 1, MPI_DOUBLE, 0, 0, m->ctrl);
                MPI_Recv(buf, (int)big, MPI_BYTE, 0, 1, m->ctrl, MPI_STATUS_IGNORE);
                MPI_Send(buf, 1, MPI_BYTE, 0, 1, m->ctrl);
            }
        }
        if (m->rank == 0) {
            lat_us[t] = 0.5 * best_rtt;
            /* The big round trip whole (its latency is small beside it): the least RTT of a pair
             * of ranks that share a core can be a time slice, as long as the big one. */
            bw_GBps[t] = MIN(big / MAX(best_big, 1e-3) / 1e3, 1e5);
        }
        MPI_Barrier(m->ctrl);
    }
}

/* Rank 0: every task's devices (gathered as cluster JSON) in one cluster, with the measured
 * link between each pair of tasks (the slower of their links to rank 0 for two tasks other
 * than 0). */
static gboolean world_cluster(PsimMpi *m, GError **error)
{
    g_autofree char *mine = psim_cluster_to_json(m->cluster);
    int len = (int)strlen(mine);
    g_autofree int *lens = g_new0(int, m->size);
    g_autofree int *offs = g_new0(int, m->size);
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, m->ctrl);
    int total = 0;
    for (int r = 0; m->rank == 0 && r < m->size; r++) {
        offs[r] = total;
        total += lens[r];
    }
    g_autofree char *all = g_malloc0((size_t)total + 1);
    MPI_Gatherv(mine, len, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, m->ctrl);
    g_autofree double *lat = g_new0(double, m->size);
    g_autofree double *bw = g_new0(double, m->size);
    measure_links(m, lat, bw);
    if (m->rank != 0)
        return TRUE;
    PsimCluster *w = psim_cluster_new();
    GArray *tasks = g_array_new(FALSE, FALSE, sizeof(int32_t));
    for (int r = 0; r < m->size; r++) {
        g_autofree char *where = g_strdup_printf("mpi task %d", r);
        g_autoptr(PsimCluster) c = psim_cluster_parse(where, all + offs[r], (gsize)lens[r], error);
        if (!c) {
            psim_cluster_free(w);
            g_array_free(tasks, TRUE);
            return FALSE;
        }
        for (int32_t i = 0; i < psim_cluster_n_devices(c); i++) {
            const PsimDevice *s = psim_cluster_device(c, i);
            int32_t id = psim_cluster_device_add(w, s->name, s->type, error);
            if (id < 0) {
                psim_cluster_free(w);
                g_array_free(tasks, TRUE);
                return FALSE;
            }
            PsimDevice *d = psim_cluster_device(w, id);
            d->memory_bytes = s->memory_bytes;
            d->peak_gflops = s->peak_gflops;
            d->mem_bw_GBps = s->mem_bw_GBps;
            d->launch_us = s->launch_us;
            d->n_cores = s->n_cores;
            d->cores = g_memdup2(s->cores, sizeof(int32_t) * (size_t)MAX(s->n_cores, 1));
            d->gpu_ordinal = s->gpu_ordinal;
            d->n_streams = s->n_streams;
            d->description = g_strdup(s->description);
            d->host = g_strdup(s->host);
            g_array_append_val(tasks, r);
        }
    }
    /* Within a task, the destination's thread copies (as in `local`); between tasks, MPI. On one
     * host MPI copies through shared memory on the destination's thread too: a large message is
     * read from the source process (Open MPI's CMA single copy) when the receiving device tests
     * its receives, between its kernels, and a small one copied out of the shared FIFO then. */
    int32_t n = psim_cluster_n_devices(w);
    for (int32_t a = 0; a < n; a++)
        for (int32_t b = 0; b < n; b++) {
            int32_t ta = g_array_index(tasks, int32_t, a), tb = g_array_index(tasks, int32_t, b);
            if (a == b)
                continue;
            const PsimDevice *da = psim_cluster_device(w, a), *db = psim_cluster_device(w, b);
            PsimLink l = {.by_destination = ta == tb || g_strcmp0(da->host, db->host) == 0};
            if (ta != tb) {
                int32_t x = ta == 0 ? tb : tb == 0 ? ta : -1;
                l.latency_us = x > 0 ? lat[x] : MAX(lat[ta], lat[tb]);
                l.bandwidth_GBps = x > 0 ? bw[x] : MIN(bw[ta], bw[tb]);
            } else {
                l.bandwidth_GBps = psim_cluster_default_link(w).bandwidth_GBps;
                l.latency_us = psim_cluster_default_link(w).latency_us;
            }
            psim_cluster_link_set(w, a, b, l);
        }
    g_array_free(tasks, TRUE);
    psim_cluster_free(m->cluster);
    m->cluster = w;
    return TRUE;
}

gboolean psim_mpi_available(void) { return TRUE; }

PsimMpi *psim_mpi_new(int *argc, char ***argv, GError **error)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "mpi: MPI_Init_thread failed");
        return NULL;
    }
    if (inited)
        MPI_Query_thread(&provided);
    /* Device threads send and test their own receives beside the communication thread. */
    if (provided < MPI_THREAD_MULTIPLE) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "mpi: the MPI library gives thread level %d; placesim needs MPI_THREAD_MULTIPLE (%d)",
                    provided, MPI_THREAD_MULTIPLE);
        return NULL;
    }
    PsimMpi *m = g_new0(PsimMpi, 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->ctrl);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->data);
    MPI_Comm shm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &shm);
    MPI_Comm_rank(shm, &m->local_rank);
    MPI_Comm_size(shm, &m->local_size);
    MPI_Comm_free(&shm);
    m->clock_offset = g_new0(double, m->size);
    m->last_heard = g_new0(double, m->size);
    pthread_mutex_init(&m->ctrl_lock, NULL);
    m->watch = g_new0(gboolean, m->size);
    m->reported = g_new0(gboolean, m->size);
    m->setup_msgs = g_new0(uint64_t, m->size);
    m->setup_bytes = g_new0(uint64_t, m->size);
    m->step_msgs = g_new0(uint64_t, m->size);
    m->step_bytes = g_new0(uint64_t, m->size);
    m->deadline_us = PSIM_MPI_DEADLINE_US;
    m->cluster = task_cluster(m);
    if (!world_cluster(m, error)) {
        psim_mpi_free(m);
        return NULL;
    }
    uint64_t me[3] = {(uint64_t)getpid(), process_start_ticks(getpid()), host_key()};
    g_autofree uint64_t *who = g_new0(uint64_t, 3 * (size_t)m->size);
    MPI_Allgather(me, 3, MPI_UINT64_T, who, 3, MPI_UINT64_T, m->ctrl);
    m->pidfd = g_new(int, m->size);
    for (int r = 0; r < m->size; r++) {
        m->watch[r] = r != m->rank && (m->rank == 0 || r == 0);
        m->last_heard[r] = now_us();
        gboolean here = m->watch[r] && me[2] && who[3 * r + 2] == me[2] && who[3 * r + 1];
        m->pidfd[r] = here ? open_process((int)who[3 * r], who[3 * r + 1]) : -1;
    }
    m->posts = g_async_queue_new();
    m->inbox = g_async_queue_new();
    struct sigaction sa = {.sa_handler = on_sigterm};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    m->thread = g_thread_new("psim-mpi", comm_main, m);
    return m;
}

void psim_mpi_free(PsimMpi *m)
{
    if (!m)
        return;
    if (m->thread) {
        /* Tasks waiting for a plan are told there will be no more; what is leaving (the last
         * replies, QUIT) leaves before the thread stops, for at most a deadline. */
        atomic_store(&m->ending, TRUE);
        if (m->rank == 0)
            for (int r = 1; r < m->size; r++)
                post_ctrl(m, r, TAG_QUIT, g_byte_array_new());
        double until = now_us() + m->deadline_us;
        while (atomic_load(&m->n_leaving) > 0 && now_us() < until)
            g_usleep(200);
        atomic_store(&m->stop, TRUE);
        g_thread_join(m->thread);
    }
    if (m->posts) {
        Post *p;
        while ((p = g_async_queue_try_pop(m->posts))) {
            for (int k = 0; k < p->n_req; k++) /* posted, not complete: let go */
                MPI_Request_free(&p->req[k]);
            post_free(p);
        }
        g_async_queue_unref(m->posts);
    }
    if (m->inbox) {
        Msg *msg;
        while ((msg = g_async_queue_try_pop(m->inbox)))
            msg_free(msg);
        g_async_queue_unref(m->inbox);
    }
    MPI_Comm_free(&m->ctrl);
    MPI_Comm_free(&m->data);
    psim_cluster_free(m->cluster);
    g_free(m->task_cores);
    g_free(m->clock_offset);
    g_free(m->last_heard);
    pthread_mutex_destroy(&m->ctrl_lock);
    g_free(m->watch);
    g_free(m->reported);
    for (int r = 0; m->pidfd && r < m->size; r++)
        if (m->pidfd[r] >= 0)
            close(m->pidfd[r]);
    g_free(m->pidfd);
    g_free(m->setup_msgs);
    g_free(m->setup_bytes);
    g_free(m->step_msgs);
    g_free(m->step_bytes);
    g_free(m);
    MPI_Finalize();
}

void psim_mpi_abort(PsimMpi *m)
{
    /* Tell every task (best effort: a dead one never reads it), give the messages a moment to
     * leave, and go: no rank waits on another that is gone. What is said is said: the watch
     * does not name a task that ends now as dead (it ends because of this). */
    if (m) {
        atomic_store(&m->ending, TRUE);
        if (m->rank == 0)
            atomic_store(&m->said, TRUE);
    }
    if (m && m->rank == 0 && m->thread)
        for (int r = 1; r < m->size; r++)
            post_ctrl(m, r, TAG_ABORT, g_byte_array_new());
    g_usleep(50000);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

int32_t psim_mpi_rank(const PsimMpi *m) { return m->rank; }
gboolean psim_mpi_said(const PsimMpi *m) { return atomic_load(&m->said); }
int32_t psim_mpi_size(const PsimMpi *m) { return m->size; }
PsimCluster *psim_mpi_cluster(PsimMpi *m) { return m->cluster; }

void psim_mpi_stats(const PsimMpi *m, int32_t task, PsimMpiStats *out)
{
    *out = (PsimMpiStats){0};
    if (task < 0 || task >= m->size)
        return;
    out->setup_messages = m->setup_msgs[task];
    out->setup_bytes = m->setup_bytes[task];
    out->step_messages = m->step_msgs[task];
    out->step_bytes = m->step_bytes[task];
}

/* --- The plan's part in each process ------------------------------------------------------ */

typedef struct {
    MPI_Request *req;
    Post **post;       /* per request: its Post */
    int *done_idx;     /* MPI_Testsome's scratch */
    int n, cap;
    int open;          /* Posts not yet delivered */
} RecvSet;

struct PsimMpiExec {
    PsimMpi *m;
    PsimPlan *plan; /* a task's: parsed from the setup message (owned); rank 0's: borrowed */
    gboolean own_plan;
    PsimPlanExec *px;
    gboolean *local;
    int32_t *task_of_dev; /* plan device -> rank */
    int32_t n_feeds, n_fetches;
    int32_t *feed_task, *fetch_task;
    PsimRemoteTransport remote;
    /* Per plan device of this task: the receives posted for its Recvs from other tasks this
     * step, tested by the device's own thread (chunks of one Post share it). */
    RecvSet *recv;
    uint64_t step;
    double step_us;
    double first_us; /* rank 0: the last step's start over all tasks, on rank 0's clock */
};

/* The rank whose task holds device `name` (its /task:T), or -1. */
static int32_t task_of_name(const char *name)
{
    const char *t = strstr(name, "/task:");
    return t ? (int32_t)g_ascii_strtoll(t + 6, NULL, 10) : -1;
}

/* A Send to another task: its tensor (compressed if the plan says) goes to the communication
 * thread, which holds a reference until MPI has sent it. */
static void remote_send(void *user, int32_t x, uint64_t step, PsimTensor *t)
{
    PsimMpiExec *e = user;
    const PsimTransfer *tr = &e->plan->transfers[x];
    /* A small tensor (or a control edge) leaves by a blocking send from this thread: MPI copies
     * it out at once (its eager protocol), with no request to complete and nothing to hand to
     * the communication thread. */
    gboolean halves = t && tr->compressed && t->dtype == PSIM_DTYPE_FLOAT32;
    int peer = e->task_of_dev[tr->dst];
    if (!t || (t->nbytes <= SMALL_SEND_BYTES && !halves)) {
        MPI_Send(t ? t->data : NULL, t ? (int)t->nbytes : 0, MPI_BYTE, peer, x, e->m->data);
        return;
    }
    Post *p = g_new0(Post, 1);
    p->kind = POST_SEND;
    p->peer = peer;
    p->tag = x;
    p->step = step;
    if (t) {
        p->t = psim_tensor_ref(t);
        p->n = t->nbytes;
        if (halves) {
            const uint32_t *a = t->data;
            p->half = g_new(uint16_t, t->n_elems + 1);
            for (int64_t i = 0; i < t->n_elems; i++)
                p->half[i] = (uint16_t)(psim_rounding_apply(a[i], tr->rounding) >> 16);
            p->n = (size_t)t->n_elems * 2;
        }
    }
    post(e->m, p);
}

/* The device `dst`'s thread: takes in the receives of its set that have completed. */
static gboolean remote_poll(void *user, int32_t dst)
{
    PsimMpiExec *e = user;
    RecvSet *rs = &e->recv[dst];
    if (rs->open == 0)
        return FALSE;
    int n_done = 0;
    MPI_Testsome(rs->n, rs->req, &n_done, rs->done_idx, MPI_STATUSES_IGNORE);
    gboolean any = FALSE;
    for (int k = 0; k < n_done && n_done != MPI_UNDEFINED; k++) {
        Post *p = rs->post[rs->done_idx[k]];
        rs->post[rs->done_idx[k]] = NULL;
        if (--p->n_open > 0)
            continue;
        deliver(p);
        post_free(p);
        rs->open--;
        any = TRUE;
    }
    return any;
}

/* Receives still posted (a step that failed, a plan going away) are cancelled, on the thread
 * that runs the steps, while no device runs. */
static void recvs_cancel(PsimMpiExec *e)
{
    for (int32_t d = 0; e->recv && d < e->plan->n_devices; d++) {
        RecvSet *rs = &e->recv[d];
        for (int k = 0; k < rs->n; k++) {
            Post *p = rs->post[k];
            if (!p)
                continue;
            MPI_Cancel(&rs->req[k]);
            MPI_Wait(&rs->req[k], MPI_STATUS_IGNORE);
            rs->post[k] = NULL;
            if (--p->n_open == 0)
                post_free(p);
        }
        rs->n = 0;
        rs->open = 0;
    }
}

/* Before a step: a receive posted for every transfer into this task from another, into a buffer
 * of the destination device (shapes are the plan's, checked static at set-up). */
static gboolean post_receives(PsimMpiExec *e, uint64_t step, GError **error)
{
    const PsimPlan *p = e->plan;
    PsimTransport *tp = psim__plan_exec_transport(e->px);
    recvs_cancel(e);
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *tr = &p->transfers[x];
        if (!e->local[tr->dst] || e->local[tr->src])
            continue;
        Post *q = g_new0(Post, 1);
        q->kind = POST_RECV;
        q->peer = e->task_of_dev[tr->src];
        q->tag = x;
        q->step = step;
        q->key = psim__transport_key(tp, x);
        if (!tr->control) {
            const PsimNode *src = psim_graph_node(p->graph, tr->port.node);
            const PsimOutput *o = &src->outputs[tr->port.index];
            q->t = psim__worker_tensor_alloc(psim__plan_exec_worker(e->px, tr->dst), o->dtype,
                                             o->rank, o->dims, FALSE, error);
            if (!q->t) {
                post_free(q);
                return FALSE;
            }
            q->n = q->t->nbytes;
            if (tr->compressed && o->dtype == PSIM_DTYPE_FLOAT32) {
                q->half = g_new(uint16_t, q->t->n_elems + 1);
                q->n = (size_t)q->t->n_elems * 2;
            }
        }
        start(e->m, q);
        q->n_open = q->n_req;
        RecvSet *rs = &e->recv[tr->dst];
        if (rs->n + q->n_req > rs->cap) {
            rs->cap = MAX(2 * rs->cap, rs->n + q->n_req);
            rs->req = g_renew(MPI_Request, rs->req, rs->cap);
            rs->post = g_renew(Post *, rs->post, rs->cap);
            rs->done_idx = g_renew(int, rs->done_idx, rs->cap);
        }
        for (int k = 0; k < q->n_req; k++) {
            rs->req[rs->n] = q->req[k];
            rs->post[rs->n++] = q;
        }
        rs->open++;
    }
    return TRUE;
}

static gboolean exec_init(PsimMpiExec *e, const char *const *feeds, int32_t n_feeds,
                          const char *const *fetches, int32_t n_fetches, GError **error)
{
    const PsimPlan *p = e->plan;
    const PsimGraph *g = p->graph;
    e->local = g_new0(gboolean, p->n_devices + 1);
    e->task_of_dev = g_new0(int32_t, p->n_devices + 1);
    for (int32_t d = 0; d < p->n_devices; d++) {
        e->task_of_dev[d] = task_of_name(p->devices[d]);
        if (e->task_of_dev[d] < 0 || e->task_of_dev[d] >= e->m->size) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "mpi: the plan's device %s is not a device of an MPI task (/job:worker/task:T, T < %d)",
                        p->devices[d], e->m->size);
            return FALSE;
        }
        e->local[d] = e->task_of_dev[d] == e->m->rank;
    }
    for (int32_t x = 0; x < p->n_transfers; x++) {
        const PsimTransfer *tr = &p->transfers[x];
        if (tr->control || e->task_of_dev[tr->src] == e->task_of_dev[tr->dst])
            continue;
        const PsimNode *src = psim_graph_node(g, tr->port.node);
        const PsimOutput *o = &src->outputs[tr->port.index];
        gboolean known = o->rank >= 0 && o->dtype != PSIM_DTYPE_STRING;
        for (int32_t i = 0; known && i < o->rank; i++)
            known = o->dims[i] >= 0;
        if (!known) {
            psim__exec_error(error, PSIM_ERROR_UNSUPPORTED, g, psim_graph_node(g, tr->recv),
                             "crosses between MPI tasks with a shape or type not known before the "
                             "step (only static numeric tensors cross tasks)");
            return FALSE;
        }
    }
    e->px = psim__plan_exec_new_part(p, e->m->cluster, e->local, feeds, n_feeds, fetches,
                                     n_fetches, FALSE, error);
    if (!e->px)
        return FALSE;
    /* A Recv from another task may wait on that task's long kernels: liveness across tasks is
     * the heartbeats' watch, and a failed task aborts this rendezvous. */
    psim_plan_exec_set_stall_timeout(e->px, -1);
    atomic_store(&e->m->local_rdv, psim__plan_exec_rendezvous(e->px));
    e->recv = g_new0(RecvSet, p->n_devices + 1);
    e->remote = (PsimRemoteTransport){.send = remote_send, .poll = remote_poll, .user = e};
    psim__plan_exec_set_remote(e->px, &e->remote);
    e->n_feeds = n_feeds;
    e->n_fetches = n_fetches;
    e->feed_task = g_new0(int32_t, n_feeds + 1);
    e->fetch_task = g_new0(int32_t, n_fetches + 1);
    for (int32_t i = 0; i < n_feeds + n_fetches; i++) {
        PsimPort port;
        gboolean is_feed = i < n_feeds;
        if (!psim__exec_resolve_ref(g, is_feed ? feeds[i] : fetches[i - n_feeds], !is_feed,
                                    &port, error))
            return FALSE;
        int32_t t = e->task_of_dev[p->device_of[port.node]];
        if (is_feed)
            e->feed_task[i] = t;
        else
            e->fetch_task[i - n_feeds] = t;
    }
    return TRUE;
}

void psim_mpi_exec_free(PsimMpiExec *e)
{
    if (!e)
        return;
    atomic_store(&e->m->local_rdv, NULL);
    recvs_cancel(e);
    for (int32_t d = 0; e->recv && d < e->plan->n_devices; d++) {
        g_free(e->recv[d].req);
        g_free(e->recv[d].post);
        g_free(e->recv[d].done_idx);
    }
    g_free(e->recv);
    if (e->m->rank == 0 && e->px)
        for (int r = 1; r < e->m->size; r++)
            post_ctrl(e->m, r, TAG_STOP, g_byte_array_new());
    psim_plan_exec_free(e->px);
    if (e->own_plan)
        psim_plan_free(e->plan);
    g_free(e->local);
    g_free(e->task_of_dev);
    g_free(e->feed_task);
    g_free(e->fetch_task);
    g_free(e);
}

/* Waits for a message with `tag` from task `src` (any task: -1); other tags are kept for
 * later... none arrive out of turn in this protocol, so anything else is an error. A silent
 * peer fails with the line naming it. */
static Msg *expect(PsimMpi *m, int tag, uint64_t step, GError **error)
{
    Msg *msg = next_msg(m, -1);
    if (msg->tag == -1) {
        if (m->rank == 0)
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "mpi: task %d (rank %d) stopped responding at step %" G_GUINT64_FORMAT
                        " (no message for %.1f s): the job ends",
                        msg->src, msg->src, step, m->deadline_us * 1e-6);
        else
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "mpi: task %d: rank 0 stopped responding (no message for %.1f s)",
                        m->rank, m->deadline_us * 1e-6);
        msg_free(msg);
        return NULL;
    }
    if (msg->tag != tag) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "mpi: task %d: unexpected message (tag %d from rank %d)", m->rank, msg->tag, msg->src);
        msg_free(msg);
        return NULL;
    }
    return msg;
}

/* A task's answer: status (and the error's text), its step's span, its fetches. */
static void reply(PsimMpiExec *e, uint64_t step, gboolean ok, const GError *err, double origin,
                  double end, PsimTensor **outputs)
{
    GByteArray *b = g_byte_array_new();
    put_u64(b, step);
    put_u64(b, ok);
    const char *text = ok || !err ? "" : err->message;
    put_str(b, text, strlen(text));
    put_f64(b, origin);
    put_f64(b, end);
    /* Fetches of numbers in host memory (others cannot cross: rank 0 gets none for them). */
    uint64_t n_out = 0;
    for (int32_t i = 0; ok && outputs && i < e->n_fetches; i++)
        n_out += outputs[i] && outputs[i]->dtype != PSIM_DTYPE_STRING && outputs[i]->device < 0;
    put_u64(b, n_out);
    for (int32_t i = 0; ok && outputs && i < e->n_fetches; i++)
        if (outputs[i] && outputs[i]->dtype != PSIM_DTYPE_STRING && outputs[i]->device < 0) {
            put_u64(b, (uint64_t)i);
            put_tensor(b, outputs[i], NULL);
        }
    post_ctrl(e->m, 0, TAG_REPLY, b);
}

PsimMpiExec *psim_mpi_exec_new(PsimMpi *m, const PsimPlan *plan, const char *const *feeds,
                               int32_t n_feeds, const char *const *fetches, int32_t n_fetches,
                               GError **error)
{
    g_return_val_if_fail(m->rank == 0, NULL);
    gsize plan_len = 0;
    g_autofree char *plan_json = psim_plan_to_json_full(plan, NULL, 0, &plan_len, error);
    if (!plan_json)
        return NULL;
    PsimMpiExec *e = g_new0(PsimMpiExec, 1);
    e->m = m;
    e->plan = (PsimPlan *)plan;
    if (!exec_init(e, feeds, n_feeds, fetches, n_fetches, error)) {
        psim_mpi_exec_free(e);
        return NULL;
    }
    g_autofree char *cluster_json = psim_cluster_to_json(m->cluster);
    for (int r = 1; r < m->size; r++) {
        GByteArray *b = g_byte_array_new();
        put_u64(b, HANDLE);
        put_str(b, plan_json, plan_len);
        put_str(b, cluster_json, strlen(cluster_json));
        put_u64(b, (uint64_t)n_feeds);
        for (int32_t i = 0; i < n_feeds; i++)
            put_str(b, feeds[i], strlen(feeds[i]));
        put_u64(b, (uint64_t)n_fetches);
        for (int32_t i = 0; i < n_fetches; i++)
            put_str(b, fetches[i], strlen(fetches[i]));
        m->setup_msgs[r]++;
        m->setup_bytes[r] += b->len;
        post_ctrl(m, r, TAG_SETUP, b);
    }
    /* Every task answers once it has built its part (or says why it could not). */
    for (int r = 1; r < m->size; r++) {
        Msg *msg = expect(m, TAG_REPLY, 0, error);
        if (!msg) {
            psim_mpi_exec_free(e);
            return NULL;
        }
        Reader rd = {msg->data, msg->data + msg->n, FALSE};
        get_u64(&rd);
        gboolean ok = get_u64(&rd) != 0;
        size_t n;
        const char *text = get_str(&rd, &n);
        if (!ok || rd.bad) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "mpi: task %d: %.*s", msg->src,
                        (int)(text ? n : 0), text ? text : "");
            msg_free(msg);
            psim_mpi_exec_free(e);
            return NULL;
        }
        msg_free(msg);
    }
    return e;
}

gboolean psim_mpi_exec_run(PsimMpiExec *e, PsimTensor *const *feeds, PsimTensor **outputs,
                           GError **error)
{
    PsimMpi *m = e->m;
    uint64_t step = e->step++;
    atomic_store(&m->cur_step, step);
    /* One message per task: the handle, the step, its devices' feeds. */
    for (int r = 1; r < m->size; r++) {
        GByteArray *b = g_byte_array_new();
        put_u64(b, HANDLE);
        put_u64(b, step);
        uint64_t n = 0;
        for (int32_t i = 0; i < e->n_feeds; i++)
            n += e->feed_task[i] == r;
        put_u64(b, n);
        for (int32_t i = 0; i < e->n_feeds; i++)
            if (e->feed_task[i] == r) {
                put_u64(b, (uint64_t)i);
                if (!put_tensor(b, feeds[i], error)) {
                    g_byte_array_free(b, TRUE);
                    return FALSE;
                }
            }
        m->step_msgs[r]++;
        m->step_bytes[r] += b->len;
        post_ctrl(m, r, TAG_STEP, b);
    }
    g_autofree PsimTensor **mine = g_new0(PsimTensor *, e->n_fetches + 1);
    psim__plan_exec_set_step(e->px, step);
    gboolean ok = post_receives(e, step, error) && psim_plan_exec_run(e->px, feeds, mine, error);
    /* The local step aborted because a task failed: the task's error says why, not this. */
    gboolean local_aborted = !ok && error && *error && strstr((*error)->message, "abort");
    double first = INFINITY, last = -INFINITY;
    if (ok && psim__plan_exec_busy(e->px)) {
        first = psim__plan_exec_origin_us(e->px);
        last = first + psim_plan_exec_step_us(e->px);
    }
    for (int32_t i = 0; i < e->n_fetches; i++)
        if (e->fetch_task[i] == 0 && outputs)
            outputs[i] = g_steal_pointer(&mine[i]);
        else if (mine[i])
            psim_tensor_unref(mine[i]);
    /* Every task's answer; the first failure names its task. */
    for (int r = 1; r < m->size; r++) {
        GError *err = NULL;
        Msg *msg = expect(m, TAG_REPLY, step, &err);
        if (!msg) {
            g_clear_error(error);
            g_propagate_error(error, err);
            return FALSE; /* a silent task: the caller ends the job */
        }
        Reader rd = {msg->data, msg->data + msg->n, FALSE};
        uint64_t s = get_u64(&rd);
        gboolean tok = get_u64(&rd) != 0;
        size_t n;
        const char *text = get_str(&rd, &n);
        double origin = get_f64(&rd), end = get_f64(&rd);
        uint64_t n_out = get_u64(&rd);
        if (rd.bad || s != step) {
            if (ok)
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                            "mpi: task %d: a malformed reply to step %" G_GUINT64_FORMAT, msg->src, step);
            ok = FALSE;
        } else if (!tok) {
            if (ok || local_aborted) {
                g_clear_error(error);
                g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "mpi: task %d: %.*s", msg->src,
                            (int)n, text);
                local_aborted = FALSE;
            }
            ok = FALSE;
        } else if (isfinite(origin)) {
            first = MIN(first, origin - m->clock_offset[msg->src]);
            last = MAX(last, end - m->clock_offset[msg->src]);
        }
        for (uint64_t k = 0; ok && k < n_out; k++) {
            uint64_t i = get_u64(&rd);
            PsimTensor *t = get_tensor(&rd, error);
            if (!t || i >= (uint64_t)e->n_fetches) {
                if (t)
                    psim_tensor_unref(t);
                if (error && !*error)
                    g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                                "mpi: task %d: a malformed fetch in its reply to step %" G_GUINT64_FORMAT,
                                msg->src, step);
                ok = FALSE;
                break;
            }
            if (outputs) {
                if (outputs[i])
                    psim_tensor_unref(outputs[i]);
                outputs[i] = t;
            } else
                psim_tensor_unref(t);
        }
        msg_free(msg);
    }
    if (!ok) {
        for (int32_t i = 0; outputs && i < e->n_fetches; i++)
            g_clear_pointer(&outputs[i], psim_tensor_unref);
        return FALSE;
    }
    e->step_us = isfinite(first) && isfinite(last) ? last - first : 0;
    e->first_us = first;
    return TRUE;
}

/* A task's answer to TAG_TRACE: its last step's ops and transfers, times from its own origin
 * (on its clock; NAN when its devices ran nothing). */
static void reply_trace(PsimMpiExec *e)
{
    GByteArray *b = g_byte_array_new();
    put_u64(b, TRACE_STEP);
    put_u64(b, 1); /* status ok, where every reply has it (take_ctrl reads it) */
    g_autoptr(PsimTimeline) tl = psim_timeline_new("", "run", e->plan->n_devices,
                                                   (const char *const *)e->plan->devices);
    gboolean busy = e->px && psim__plan_exec_busy(e->px);
    if (busy)
        psim_plan_exec_timeline_add(e->px, tl);
    put_f64(b, busy ? psim__plan_exec_origin_us(e->px) : NAN);
    put_u64(b, tl->ops->len);
    for (guint i = 0; i < tl->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(tl->ops, PsimTimelineOp, i);
        put_u64(b, (uint64_t)o->node);
        put_u64(b, (uint64_t)o->device);
        put_u64(b, (uint64_t)o->stream);
        put_f64(b, o->start);
        put_f64(b, o->end);
    }
    put_u64(b, tl->xfers->len);
    for (guint i = 0; i < tl->xfers->len; i++) {
        const PsimTimelineXfer *x = &g_array_index(tl->xfers, PsimTimelineXfer, i);
        put_u64(b, (uint64_t)x->transfer);
        put_f64(b, x->start);
        put_f64(b, x->end);
        put_u64(b, x->bytes);
    }
    post_ctrl(e->m, 0, TAG_REPLY, b);
}

gboolean psim_mpi_exec_timeline_add(PsimMpiExec *e, PsimTimeline *t, GError **error)
{
    PsimMpi *m = e->m;
    g_return_val_if_fail(m->rank == 0, FALSE);
    const PsimPlan *p = e->plan;
    int32_t n_nodes = psim_graph_n_nodes(p->graph);
    double first = isfinite(e->first_us) ? e->first_us : 0;
    /* Rank 0's own devices: from its origin to the step's. */
    if (e->px && psim__plan_exec_busy(e->px)) {
        g_autoptr(PsimTimeline) mine = psim_timeline_new("", "run", t->n_devices,
                                                         (const char *const *)t->devices);
        psim_plan_exec_timeline_add(e->px, mine);
        psim_timeline_append(t, mine, psim__plan_exec_origin_us(e->px) - first);
    }
    /* Every task's, brought to rank 0's clock. */
    for (int r = 1; r < m->size; r++) {
        post_ctrl(m, r, TAG_TRACE, g_byte_array_new());
        Msg *msg = expect(m, TAG_REPLY, e->step, error);
        if (!msg)
            return FALSE;
        Reader rd = {msg->data, msg->data + msg->n, FALSE};
        gboolean ok = get_u64(&rd) == TRACE_STEP;
        ok = get_u64(&rd) == 1 && ok;
        double origin = get_f64(&rd);
        double off = origin - m->clock_offset[r] - first;
        uint64_t n_ops = ok ? get_u64(&rd) : 0;
        for (uint64_t i = 0; ok && !rd.bad && i < n_ops; i++) {
            uint64_t v = get_u64(&rd), d = get_u64(&rd), st = get_u64(&rd);
            double s0 = get_f64(&rd), s1 = get_f64(&rd);
            ok = !rd.bad && v < (uint64_t)n_nodes && d < (uint64_t)t->n_devices;
            if (ok) {
                const PsimNode *n = psim_graph_node(p->graph, (int32_t)v);
                psim_timeline_op_add(t, n->name, n->op, (int32_t)v, (int32_t)d, (int32_t)st, s0 + off, s1 + off);
            }
        }
        uint64_t n_x = ok && !rd.bad ? get_u64(&rd) : 0;
        for (uint64_t i = 0; ok && !rd.bad && i < n_x; i++) {
            uint64_t x = get_u64(&rd);
            double s0 = get_f64(&rd), s1 = get_f64(&rd);
            uint64_t bytes = get_u64(&rd);
            ok = !rd.bad && x < (uint64_t)p->n_transfers;
            if (ok) {
                const PsimTransfer *tr = &p->transfers[x];
                psim_timeline_xfer_add(t, psim_graph_node(p->graph, tr->recv)->name, tr->key, (int32_t)x, tr->src,
                                       tr->dst, s0 + off, s1 + off, bytes);
            }
        }
        msg_free(msg);
        if (!ok || rd.bad) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "mpi: task %d: a malformed trace of step %" G_GUINT64_FORMAT,
                        r, e->step);
            return FALSE;
        }
    }
    t->step_time_us = e->step_us;
    return TRUE;
}

double psim_mpi_exec_step_us(const PsimMpiExec *e) { return e->step_us; }

static gboolean serve_plan(PsimMpi *m, Msg *msg, GError **error);

/* A task (rank > 0): plans (each a setup message, then steps until rank 0 says stop) until rank
 * 0 says there are no more. */
gboolean psim_mpi_serve(PsimMpi *m, GError **error)
{
    g_return_val_if_fail(m->rank != 0, FALSE);
    for (;;) {
        Msg *msg = next_msg(m, -1);
        if (msg->tag == TAG_QUIT) {
            msg_free(msg);
            return TRUE;
        }
        if (msg->tag != TAG_SETUP) {
            g_async_queue_push_front(m->inbox, msg);
            msg_free(expect(m, TAG_SETUP, 0, error));
            return FALSE;
        }
        if (!serve_plan(m, msg, error))
            return FALSE;
    }
}

/* One plan: msg is its setup message (taken). */
static gboolean serve_plan(PsimMpi *m, Msg *msg, GError **error)
{
    Reader rd = {msg->data, msg->data + msg->n, FALSE};
    get_u64(&rd);
    size_t plan_len, cl_len;
    const char *plan_json = get_str(&rd, &plan_len);
    const char *cl_json = get_str(&rd, &cl_len);
    uint64_t n_feeds = get_u64(&rd);
    g_autoptr(GPtrArray) feeds = g_ptr_array_new_with_free_func(g_free);
    for (uint64_t i = 0; !rd.bad && i < n_feeds && i < (1u << 20); i++) {
        size_t n;
        const char *s = get_str(&rd, &n);
        g_ptr_array_add(feeds, s ? g_strndup(s, n) : g_strdup(""));
    }
    uint64_t n_fetches = get_u64(&rd);
    g_autoptr(GPtrArray) fetches = g_ptr_array_new_with_free_func(g_free);
    for (uint64_t i = 0; !rd.bad && i < n_fetches && i < (1u << 20); i++) {
        size_t n;
        const char *s = get_str(&rd, &n);
        g_ptr_array_add(fetches, s ? g_strndup(s, n) : g_strdup(""));
    }
    PsimMpiExec *e = g_new0(PsimMpiExec, 1);
    e->m = m;
    GError *err = NULL;
    gboolean ok = !rd.bad;
    if (!ok)
        g_set_error(&err, PSIM_ERROR, PSIM_ERROR_RUNTIME, "a malformed setup message");
    if (ok) {
        PsimCluster *c = psim_cluster_parse("mpi setup", cl_json, cl_len, &err);
        ok = c != NULL;
        if (ok) {
            psim_cluster_free(m->cluster);
            m->cluster = c;
        }
    }
    if (ok) {
        e->plan = psim_plan_from_json("mpi setup", plan_json, plan_len, &err);
        e->own_plan = TRUE;
        ok = e->plan != NULL;
    }
    msg_free(msg);
    ok = ok && exec_init(e, (const char *const *)feeds->pdata, (int32_t)feeds->len,
                         (const char *const *)fetches->pdata, (int32_t)fetches->len, &err);
    /* A task that could not build its part says why to rank 0, which reports it and ends the
     * job: the task then waits, quietly, for rank 0's word like any other. */
    reply(e, SETUP_STEP, ok, err, NAN, NAN, NULL);
    g_clear_error(&err);
    gboolean built = ok;
    g_autofree PsimTensor **in = g_new0(PsimTensor *, feeds->len + 1);
    g_autofree PsimTensor **out = g_new0(PsimTensor *, fetches->len + 1);
    while (ok) {
        msg = next_msg(m, -1);
        if (msg->tag == TAG_STOP) {
            msg_free(msg);
            break;
        }
        if (msg->tag == TAG_TRACE) {
            msg_free(msg);
            reply_trace(e);
            continue;
        }
        if (msg->tag != TAG_STEP) {
            g_async_queue_push_front(m->inbox, msg);
            msg_free(expect(m, TAG_STEP, e->step, error));
            ok = FALSE;
            break;
        }
        rd = (Reader){msg->data, msg->data + msg->n, FALSE};
        get_u64(&rd);
        uint64_t step = get_u64(&rd), n_in = get_u64(&rd);
        e->step = step;
        /* The fault injector: PSIM_FAULT=rank:R,step:S kills task R (SIGKILL) as step S starts;
         * rank:R,hang:S stops it there (SIGSTOP: alive, silent). */
        if (psim_fault_due("rank", m->rank) && psim_fault_due("step", (int64_t)step))
            kill(getpid(), SIGKILL); /* silently: a task that dies says nothing */
        if (psim_fault_due("rank", m->rank) && psim_fault_due("hang", (int64_t)step)) {
            fprintf(stderr, "placesim: PSIM_FAULT: stopped at step %" G_GUINT64_FORMAT "\n", step);
            fflush(stderr);
            raise(SIGSTOP);
        }
        gboolean sok = !rd.bad;
        if (!sok)
            g_set_error(&err, PSIM_ERROR, PSIM_ERROR_RUNTIME, "a malformed step message");
        for (uint64_t k = 0; sok && k < n_in; k++) {
            uint64_t i = get_u64(&rd);
            PsimTensor *t = get_tensor(&rd, &err);
            sok = t && i < feeds->len;
            if (t && sok) {
                if (in[i])
                    psim_tensor_unref(in[i]);
                in[i] = t;
            } else if (t)
                psim_tensor_unref(t);
        }
        msg_free(msg);
        psim__plan_exec_set_step(e->px, step);
        sok = sok && !rd.bad && post_receives(e, step, &err) && psim_plan_exec_run(e->px, in, out, &err);
        if (!sok && !err)
            g_set_error(&err, PSIM_ERROR, PSIM_ERROR_RUNTIME, "a malformed step message");
        /* A task whose devices run nothing has no span: its empty step, started when the step
         * message arrived, is not part of the step. */
        double origin = NAN, end = NAN;
        if (sok && psim__plan_exec_busy(e->px)) {
            origin = psim__plan_exec_origin_us(e->px);
            end = origin + psim_plan_exec_step_us(e->px);
        }
        reply(e, step, sok, err, origin, end, out);
        g_clear_error(&err);
        for (guint i = 0; i < fetches->len; i++)
            g_clear_pointer(&out[i], psim_tensor_unref);
    }
    for (guint i = 0; i < feeds->len; i++)
        g_clear_pointer(&in[i], psim_tensor_unref);
    e->m = m;
    psim_mpi_exec_free(e);
    return built ? ok : TRUE;
}

/* --- Timing the transport --------------------------------------------------------------- */

/* The first device of task `task` in the world cluster, or NULL. */
static const PsimDevice *task_device(PsimMpi *m, int32_t task)
{
    for (int32_t i = 0; i < psim_cluster_n_devices(m->cluster); i++) {
        const PsimDevice *d = psim_cluster_device(m->cluster, i);
        if (task_of_name(d->name) == task)
            return d;
    }
    return NULL;
}

gboolean psim_mpi_pingpong_hops(PsimMpi *m, int32_t from, int32_t task, uint64_t bytes, int32_t hops,
                                int32_t rounds, double *us, GError **error)
{
    g_return_val_if_fail(m->rank == 0 && rounds > 0, FALSE);
    g_return_val_if_fail(from >= 0 && from < m->size && task >= 0 && task < m->size && from != task, FALSE);
    g_return_val_if_fail(hops > 0 && hops <= 4096, FALSE);
    const PsimDevice *d0 = task_device(m, from), *dt = task_device(m, task);
    g_return_val_if_fail(d0 && dt, FALSE);
    uint64_t n = MAX(bytes / 4, 1);
    /* w0 on `from` -> y0 on `task` -> w1 on `from` -> ... -> w<hops> on `from`. */
    GString *js = g_string_new(NULL);
    g_string_append_printf(js, "{\"format\": \"placesim.graph/1\", \"name\": \"pingpong\", \"nodes\": ["
        "{\"name\": \"w0\", \"op\": \"Placeholder\", \"device\": \"%s\", "
        "\"outputs\": [{\"dtype\": \"float32\", \"shape\": [%" G_GUINT64_FORMAT "]}]}", d0->name, n);
    for (int h = 0; h < hops; h++) {
        g_string_append_printf(js, ",{\"name\": \"y%d\", \"op\": \"Identity\", \"inputs\": [\"w%d:0\"], "
                               "\"device\": \"%s\"}", h, h, dt->name);
        g_string_append_printf(js, ",{\"name\": \"w%d\", \"op\": \"Identity\", \"inputs\": [\"y%d:0\"], "
                               "\"device\": \"%s\"}", h + 1, h, d0->name);
    }
    g_string_append(js, "]}");
    g_autofree char *json = g_string_free(js, FALSE);
    g_autofree char *fetch = g_strdup_printf("w%d:0", hops);
    g_autoptr(PsimGraph) g = psim_graph_load_data("pingpong.json", PSIM_FORMAT_JSON,
                                                  (const guint8 *)json, strlen(json), NULL, error);
    if (!g)
        return FALSE;
    g_autoptr(PsimCostModel) cm = psim_cost_model_new(m->cluster, NULL);
    PsimPlaceOptions po;
    psim_place_options_init(&po);
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, cm, &po, error);
    g_autoptr(PsimPlacement) pl = ctx ? psim_place(ctx, "heft", error) : NULL;
    g_autoptr(PsimPlan) plan = pl ? psim_plan_build(ctx, pl, error) : NULL;
    if (!plan)
        return FALSE;
    if (plan->n_transfers != 2 * hops) { /* the requests put each y alone on the task */
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "mpi: the ping-pong plan from task %d to task %d has %d transfers, not %d", from,
                    task, plan->n_transfers, 2 * hops);
        return FALSE;
    }
    const char *feeds[] = {"w0"}, *fetches[] = {fetch};
    PsimMpiExec *e = psim_mpi_exec_new(m, plan, feeds, 1, fetches, 1, error);
    if (!e)
        return FALSE;
    int64_t dims[1] = {(int64_t)n};
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, dims, error);
    gboolean ok = x != NULL;
    for (int32_t k = -3; ok && k < rounds; k++) {
        PsimTensor *out = NULL;
        ok = psim_mpi_exec_run(e, &x, &out, error);
        if (out)
            psim_tensor_unref(out);
        if (ok && k >= 0)
            us[k] = 0.5 * psim_mpi_exec_step_us(e) / hops;
    }
    psim_mpi_exec_free(e);
    return ok;
}

/* The links between every two tasks timed in passes, each size's half round
 * trips pooled over the passes (a host's spells last seconds: the samples of one stretch would
 * time one of them). */
struct PsimMpiLinkSession {
    PsimMpi *m;
    int32_t passes, n_sizes, n_pairs;
    uint64_t *bytes;  /* [n_sizes] */
    int32_t *pair_a, *pair_b; /* [n_pairs]: every two tasks, a < b */
    GArray **samples; /* [pair * n_sizes + k]: half round trips, us */
};

/* Rounds of a size in all: many of the short ones (their latency is noisy), few of the long. */
static int32_t link_rounds(uint64_t bytes)
{
    return bytes <= (64u << 10) ? 50 : bytes <= (4u << 20) ? 20 : 8;
}

/* Round trips in one step of a size's ping-pong. A link row is what a transfer costs inside a
 * plan's step; a step of one round trip also times its start on two tasks (the step message,
 * the other task's device taking it up: 1-3 us on this project's VM), which the plan's
 * transfers do not pay each, and which weighs on the small sizes only. */
static int32_t link_hops(uint64_t bytes)
{
    return bytes <= (64u << 10) ? 8 : 1;
}

PsimMpiLinkSession *psim_mpi_link_session_new(PsimMpi *m, uint64_t min_bytes, uint64_t max_bytes,
                                              int32_t passes)
{
    g_return_val_if_fail(m->rank == 0 && passes > 0, NULL);
    PsimMpiLinkSession *s = g_new0(PsimMpiLinkSession, 1);
    s->m = m;
    s->passes = passes;
    GArray *sizes = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    for (uint64_t b = MAX(min_bytes, 4); b <= max_bytes; b *= 4)
        g_array_append_val(sizes, b);
    s->n_sizes = (int32_t)sizes->len;
    s->bytes = (uint64_t *)g_array_free(sizes, FALSE);
    s->n_pairs = m->size * (m->size - 1) / 2;
    s->pair_a = g_new(int32_t, s->n_pairs + 1);
    s->pair_b = g_new(int32_t, s->n_pairs + 1);
    for (int32_t a = 0, i = 0; a < m->size; a++)
        for (int32_t b = a + 1; b < m->size; b++, i++) {
            s->pair_a[i] = a;
            s->pair_b[i] = b;
        }
    int32_t n = s->n_pairs * s->n_sizes;
    s->samples = g_new0(GArray *, n + 1);
    for (int32_t i = 0; i < n; i++)
        s->samples[i] = g_array_new(FALSE, FALSE, sizeof(double));
    return s;
}

void psim_mpi_link_session_free(PsimMpiLinkSession *s)
{
    if (!s)
        return;
    for (int32_t i = 0; i < s->n_pairs * s->n_sizes; i++)
        g_array_free(s->samples[i], TRUE);
    g_free(s->samples);
    g_free(s->bytes);
    g_free(s->pair_a);
    g_free(s->pair_b);
    g_free(s);
}

gboolean psim_mpi_link_session_pass(PsimMpiLinkSession *s, GError **error)
{
    PsimMpi *m = s->m;
    for (int32_t i = 0; i < s->n_pairs; i++)
        for (int32_t k = 0; k < s->n_sizes; k++) {
            uint64_t bytes = s->bytes[k];
            /* This pass's share of the size's rounds, at least 2. */
            int32_t rounds = MAX((link_rounds(bytes) + s->passes - 1) / s->passes, 2);
            g_autofree double *us = g_new(double, rounds);
            if (!psim_mpi_pingpong_hops(m, s->pair_a[i], s->pair_b[i], bytes, link_hops(bytes), rounds,
                                        us, error))
                return FALSE;
            g_array_append_vals(s->samples[i * s->n_sizes + k], us, (guint)rounds);
            if (isatty(STDERR_FILENO))
                fprintf(stderr, "\rplacesim: mpi links: task %d <-> task %d, %" G_GUINT64_FORMAT " bytes   ",
                        s->pair_a[i], s->pair_b[i], bytes);
        }
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r%60s\r", "");
    return TRUE;
}

int32_t psim_mpi_link_session_finish(PsimMpiLinkSession *s, PsimCostDb *db, GError **error)
{
    PsimMpi *m = s->m;
    int32_t rows = 0;
    for (int32_t i = 0; i < s->n_pairs; i++) {
        const PsimDevice *d0 = task_device(m, s->pair_a[i]), *dt = task_device(m, s->pair_b[i]);
        for (int32_t k = 0; k < s->n_sizes; k++) {
            GArray *a = s->samples[i * s->n_sizes + k];
            if (a->len == 0)
                continue;
            PsimTimingStats st;
            psim_timing_stats((double *)a->data, (int)a->len, &st);
            /* Both ways: the ping-pong times the pair's round trip. */
            if (!psim_cost_db_link_put(db, d0, dt, s->bytes[k], "mpi", &st, error) ||
                !psim_cost_db_link_put(db, dt, d0, s->bytes[k], "mpi", &st, error)) {
                psim_mpi_link_session_free(s);
                return -1;
            }
            rows += 2;
        }
    }
    psim_mpi_link_session_free(s);
    return rows;
}

int32_t psim_mpi_profile_links(PsimMpi *m, PsimCostDb *db, uint64_t min_bytes, uint64_t max_bytes,
                               GError **error)
{
    g_return_val_if_fail(m->rank == 0, -1);
    PsimMpiLinkSession *s = psim_mpi_link_session_new(m, min_bytes, max_bytes, 1);
    if (!psim_mpi_link_session_pass(s, error)) {
        psim_mpi_link_session_free(s);
        return -1;
    }
    return psim_mpi_link_session_finish(s, db, error);
}

#else /* no MPI in this build */

gboolean psim_mpi_available(void) { return FALSE; }

static void no_mpi(GError **error)
{
    g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                "--mpi: this placesim was built without MPI (install libopenmpi-dev and rebuild)");
}

PsimMpi *psim_mpi_new(int *argc, char ***argv, GError **error)
{
    (void)argc;
    (void)argv;
    no_mpi(error);
    return NULL;
}
void psim_mpi_free(PsimMpi *m) { (void)m; }
void psim_mpi_abort(PsimMpi *m)
{
    (void)m;
    _exit(1);
}
int32_t psim_mpi_rank(const PsimMpi *m) { return m ? 0 : 0; }
gboolean psim_mpi_said(const PsimMpi *m) { return m ? FALSE : FALSE; }
int32_t psim_mpi_size(const PsimMpi *m) { return m ? 1 : 1; }
PsimCluster *psim_mpi_cluster(PsimMpi *m) { return m ? NULL : NULL; }
void psim_mpi_stats(const PsimMpi *m, int32_t task, PsimMpiStats *out)
{
    (void)m;
    (void)task;
    *out = (PsimMpiStats){0};
}
PsimMpiExec *psim_mpi_exec_new(PsimMpi *m, const PsimPlan *plan, const char *const *feeds,
                               int32_t n_feeds, const char *const *fetches, int32_t n_fetches,
                               GError **error)
{
    (void)m, (void)plan, (void)feeds, (void)n_feeds, (void)fetches, (void)n_fetches;
    no_mpi(error);
    return NULL;
}
gboolean psim_mpi_exec_run(PsimMpiExec *e, PsimTensor *const *feeds, PsimTensor **outputs,
                           GError **error)
{
    (void)e, (void)feeds, (void)outputs;
    no_mpi(error);
    return FALSE;
}
double psim_mpi_exec_step_us(const PsimMpiExec *e) { return e ? 0 : 0; }
gboolean psim_mpi_exec_timeline_add(PsimMpiExec *e, PsimTimeline *t, GError **error)
{
    (void)e, (void)t;
    no_mpi(error);
    return FALSE;
}
void psim_mpi_exec_free(PsimMpiExec *e) { (void)e; }
gboolean psim_mpi_serve(PsimMpi *m, GError **error)
{
    (void)m;
    no_mpi(error);
    return FALSE;
}

gboolean psim_mpi_pingpong_hops(PsimMpi *m, int32_t from, int32_t task, uint64_t bytes, int32_t hops,
                                int32_t rounds, double *us, GError **error)
{
    (void)m, (void)from, (void)task, (void)bytes, (void)hops, (void)rounds, (void)us;
    no_mpi(error);
    return FALSE;
}

int32_t psim_mpi_profile_links(PsimMpi *m, PsimCostDb *db, uint64_t min_bytes, uint64_t max_bytes,
                               GError **error)
{
    (void)m, (void)db, (void)min_bytes, (void)max_bytes;
    no_mpi(error);
    return -1;
}

PsimMpiLinkSession *psim_mpi_link_session_new(PsimMpi *m, uint64_t min_bytes, uint64_t max_bytes,
                                              int32_t passes)
{
    (void)m, (void)min_bytes, (void)max_bytes, (void)passes;
    return NULL;
}

gboolean psim_mpi_link_session_pass(PsimMpiLinkSession *s, GError **error)
{
    (void)s;
    no_mpi(error);
    return FALSE;
}

int32_t psim_mpi_link_session_finish(PsimMpiLinkSession *s, PsimCostDb *db, GError **error)
{
    (void)s, (void)db;
    no_mpi(error);
    return -1;
}

void psim_mpi_link_session_free(PsimMpiLinkSession *s) { (void)s; }

#endif
