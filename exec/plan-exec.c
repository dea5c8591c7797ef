/* Running a Plan: one worker and one executor per device of the plan, each over its partition
 * in the plan's static order (or by priority), tensors crossing through one rendezvous and
 * copied by the destination device's own thread (exec/transport.c). A step posts one closure per device and waits for all; a failure
 * on one device aborts the others' Recvs. */
#include <string.h>

#include "exec-private.h"

typedef struct {
    PsimExecutor *e;
    PsimTransport *tp;
    PsimTensor **feeds;   /* this device's feeds, in its executor's order */
    PsimTensor **outputs; /* this device's fetches */
    gboolean empty;       /* no node of the plan on this device: not part of the step's time */
} DevStep;

struct PsimPlanExec {
    const PsimPlan *plan;
    int32_t n_devices;
    PsimWorker **workers;
    PsimExecutor **execs;
    PsimRendezvous *rdv;
    PsimTransport *tp;
    int32_t n_feeds, n_fetches;
    int32_t *feed_dev, *feed_pos;   /* per feed: device and position among its feeds */
    int32_t *fetch_dev, *fetch_pos;
    DevStep *steps;
    uint64_t step;
    double step_us, origin_us;
};

static const PsimRecvCopier copier = {.copy = psim__transport_copy,
                                       .after = psim__transport_after};

static gboolean dev_step(PsimWorker *w, void *arg, GError **error)
{
    (void)w;
    DevStep *s = arg;
    if (!s->empty)
        psim__transport_origin(s->tp, psim_exec_now_us());
    return psim_executor_run_here(s->e, s->feeds, s->outputs, error);
}

PsimPlanExec *psim_plan_exec_new(const PsimPlan *p, const PsimCluster *c,
                                 const char *const *feeds, int32_t n_feeds,
                                 const char *const *fetches, int32_t n_fetches, gboolean dynamic,
                                 GError **error)
{
    return psim__plan_exec_new_part(p, c, NULL, feeds, n_feeds, fetches, n_fetches, dynamic,
                                    error);
}

PsimPlanExec *psim__plan_exec_new_part(const PsimPlan *p, const PsimCluster *c,
                                       const gboolean *local, const char *const *feeds,
                                       int32_t n_feeds, const char *const *fetches,
                                       int32_t n_fetches, gboolean dynamic, GError **error)
{
    /* The simulator's check: a plan that would deadlock or cross devices without a transfer is
     * refused here rather than found hanging in the middle of a step. */
    if (!psim_plan_check(p, error))
        return NULL;
    PsimPlanExec *x = g_new0(PsimPlanExec, 1);
    x->plan = p;
    x->n_devices = p->n_devices;
    x->workers = g_new0(PsimWorker *, p->n_devices + 1);
    x->execs = g_new0(PsimExecutor *, p->n_devices + 1);
    x->steps = g_new0(DevStep, p->n_devices + 1);
    x->rdv = psim_rendezvous_new();
    x->n_feeds = n_feeds;
    x->n_fetches = n_fetches;
    x->feed_dev = g_new0(int32_t, n_feeds + 1);
    x->feed_pos = g_new0(int32_t, n_feeds + 1);
    x->fetch_dev = g_new0(int32_t, n_fetches + 1);
    x->fetch_pos = g_new0(int32_t, n_fetches + 1);
    const PsimGraph *g = p->graph;
    /* Route feeds and fetches to the devices their nodes are placed on. */
    g_autofree int32_t *n_dev_feeds = g_new0(int32_t, p->n_devices + 1);
    g_autofree int32_t *n_dev_fetches = g_new0(int32_t, p->n_devices + 1);
    for (int32_t i = 0; i < n_feeds + n_fetches; i++) {
        gboolean is_feed = i < n_feeds;
        PsimPort port;
        if (!psim__exec_resolve_ref(g, is_feed ? feeds[i] : fetches[i - n_feeds], !is_feed, &port,
                                    error))
            goto fail;
        int32_t d = p->device_of[port.node];
        if (d < 0 || d >= p->n_devices) {
            psim__exec_error(error, PSIM_ERROR_INPUT, g, psim_graph_node(g, port.node),
                             "is not placed on any device of the plan");
            goto fail;
        }
        if (is_feed) {
            x->feed_dev[i] = d;
            x->feed_pos[i] = n_dev_feeds[d]++;
        } else {
            x->fetch_dev[i - n_feeds] = d;
            x->fetch_pos[i - n_feeds] = n_dev_fetches[d]++;
        }
    }
    for (int32_t d = 0; d < p->n_devices; d++) {
        int32_t ci = psim_cluster_device_find(c, p->devices[d]);
        if (ci < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "the plan's device %s is not in the cluster", p->devices[d]);
            goto fail;
        }
        if (local && !local[d]) { /* another process's: no worker, no executor here */
            x->steps[d].empty = TRUE;
            continue;
        }
        x->workers[d] = psim_worker_new(psim_cluster_device(c, ci), error);
        if (!x->workers[d])
            goto fail;
    }
    x->tp = psim__transport_new(p, x->workers, x->rdv, error);
    if (!x->tp)
        goto fail;
    for (int32_t d = 0; d < p->n_devices; d++) {
        int32_t ci = psim_cluster_device_find(c, p->devices[d]);
        if (ci < 0) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_INPUT,
                        "the plan's device %s is not in the cluster", p->devices[d]);
            goto fail;
        }
        if (!x->workers[d])
            continue;
        g_autofree const char **df = g_new0(const char *, n_dev_feeds[d] + 1);
        g_autofree const char **dt = g_new0(const char *, n_dev_fetches[d] + 1);
        for (int32_t i = 0; i < n_feeds; i++)
            if (x->feed_dev[i] == d)
                df[x->feed_pos[i]] = feeds[i];
        for (int32_t i = 0; i < n_fetches; i++)
            if (x->fetch_dev[i] == d)
                dt[x->fetch_pos[i]] = fetches[i];
        PsimExecOptions opts = {
            .order = dynamic ? PSIM_EXEC_ORDER_PRIORITY : PSIM_EXEC_ORDER_STATIC,
            .static_order = p->order[d], .n_static_order = p->n_order[d],
            .priority = p->priority, .device_of = p->device_of, .device = d,
            .rendezvous = x->rdv, .send_hook = psim__transport_send, .send_user = x->tp,
            .recv_copier = &copier, .recv_user = x->tp};
        x->execs[d] = psim_executor_new(g, x->workers[d], df, n_dev_feeds[d], dt,
                                        n_dev_fetches[d], &opts, error);
        if (!x->execs[d])
            goto fail;
        /* Its core is another device's too (local:4 on two cores, MPI tasks outnumbering their
         * host's cores): it yields it at once while it waits. */
        if (psim_cluster_device_shares_cores(c, ci))
            psim__executor_share_core(x->execs[d]);
        x->steps[d].e = x->execs[d];
        PsimExecStats st;
        psim_executor_stats(x->execs[d], &st);
        x->steps[d].empty = st.n_exec == 0;
        x->steps[d].tp = x->tp;
        x->steps[d].feeds = g_new0(PsimTensor *, n_dev_feeds[d] + 1);
        x->steps[d].outputs = g_new0(PsimTensor *, n_dev_fetches[d] + 1);
    }
    return x;
fail:
    psim_plan_exec_free(x);
    return NULL;
}

void psim_plan_exec_free(PsimPlanExec *x)
{
    if (!x)
        return;
    /* Executors first (they use the transport), then the transport, then the workers whose
     * memory the copies land in. */
    for (int32_t d = 0; d < x->n_devices; d++)
        psim_executor_free(x->execs[d]);
    psim__transport_free(x->tp);
    for (int32_t d = 0; d < x->n_devices; d++) {
        psim_worker_free(x->workers[d]);
        g_free(x->steps[d].feeds);
        g_free(x->steps[d].outputs);
    }
    psim_rendezvous_free(x->rdv);
    g_free(x->workers);
    g_free(x->execs);
    g_free(x->steps);
    g_free(x->feed_dev);
    g_free(x->feed_pos);
    g_free(x->fetch_dev);
    g_free(x->fetch_pos);
    g_free(x);
}

gboolean psim_plan_exec_run(PsimPlanExec *x, PsimTensor *const *feeds, PsimTensor **outputs,
                            GError **error)
{
    for (int32_t i = 0; i < x->n_feeds; i++)
        if (x->execs[x->feed_dev[i]]) /* (another process's device: not fed here) */
            x->steps[x->feed_dev[i]].feeds[x->feed_pos[i]] = feeds[i];
    for (int32_t d = 0; d < x->n_devices; d++)
        if (x->execs[d] && !psim_executor_check_feeds(x->execs[d], x->steps[d].feeds, error))
            return FALSE;
    psim__transport_step_begin(x->tp);
    for (int32_t d = 0; d < x->n_devices; d++) {
        if (!x->execs[d])
            continue;
        psim_executor_set_step(x->execs[d], x->step);
        psim_worker_post(x->workers[d], dev_step, &x->steps[d]);
    }
    x->step++;
    gboolean ok = TRUE;
    for (int32_t d = 0; d < x->n_devices; d++) {
        GError *err = NULL;
        if (x->workers[d] && !psim_worker_wait(x->workers[d], &err)) {
            /* The first device that failed by itself names the cause; the others only saw the
             * abort. */
            if (ok || (error && *error && strstr((*error)->message, "aborted") &&
                       !strstr(err->message, "aborted"))) {
                g_clear_error(error);
                g_propagate_error(error, err);
            } else {
                g_error_free(err);
            }
            ok = FALSE;
        }
    }
    if (!ok) {
        psim_rendezvous_reset(x->rdv);
        for (int32_t d = 0; d < x->n_devices; d++)
            for (int32_t i = 0; x->execs[d] && i < x->n_fetches; i++)
                if (x->fetch_dev[i] == d)
                    g_clear_pointer(&x->steps[d].outputs[x->fetch_pos[i]], psim_tensor_unref);
        return FALSE;
    }
    /* The step starts when the first device starts (earliest starts count from there). */
    /* Devices with nothing to run (a plan that leaves one idle) do not count: their empty
     * step could start before the others'. */
    double first = psim__transport_origin_get(x->tp);
    gboolean all_empty = first >= (double)INT64_MAX * 1e-3;
    if (all_empty)
        for (int32_t d = 0; d < x->n_devices; d++) {
            if (!x->execs[d])
                continue;
            PsimExecStats st;
            psim_executor_stats(x->execs[d], &st);
            if (d == 0 || st.step_start_us < first)
                first = st.step_start_us;
        }
    double last = first;
    for (int32_t d = 0; d < x->n_devices; d++) {
        if ((x->steps[d].empty && !all_empty) || !x->execs[d])
            continue;
        PsimExecStats st;
        psim_executor_stats(x->execs[d], &st);
        if (st.step_start_us + st.step_us > last)
            last = st.step_start_us + st.step_us;
    }
    x->origin_us = first;
    x->step_us = last - first;
    for (int32_t i = 0; i < x->n_fetches; i++) {
        if (!x->execs[x->fetch_dev[i]]) { /* another process's */
            if (outputs)
                outputs[i] = NULL;
            continue;
        }
        PsimTensor **slot = &x->steps[x->fetch_dev[i]].outputs[x->fetch_pos[i]];
        if (outputs)
            outputs[i] = *slot;
        else
            psim_tensor_unref(*slot);
        *slot = NULL;
    }
    return TRUE;
}

void psim_plan_exec_set_stall_timeout(PsimPlanExec *x, double seconds)
{
    for (int32_t d = 0; d < x->n_devices; d++)
        if (x->execs[d])
            psim_executor_set_stall_timeout(x->execs[d], seconds);
}

double psim_plan_exec_step_us(const PsimPlanExec *x) { return x->step_us; }
void psim__plan_exec_set_remote(PsimPlanExec *x, const PsimRemoteTransport *remote)
{
    psim__transport_set_remote(x->tp, remote);
    for (int32_t d = 0; remote->poll && d < x->n_devices; d++)
        if (x->execs[d])
            psim__executor_set_poll(x->execs[d], psim__transport_poll, x->tp);
}

void psim__plan_exec_set_step(PsimPlanExec *x, uint64_t step) { x->step = step; }
PsimRendezvous *psim__plan_exec_rendezvous(const PsimPlanExec *x) { return x->rdv; }

gboolean psim__plan_exec_busy(const PsimPlanExec *x)
{
    for (int32_t d = 0; d < x->n_devices; d++)
        if (x->execs[d] && !x->steps[d].empty)
            return TRUE;
    return FALSE;
}

double psim__plan_exec_origin_us(const PsimPlanExec *x) { return x->origin_us; }
PsimTransport *psim__plan_exec_transport(const PsimPlanExec *x) { return x->tp; }
PsimWorker *psim__plan_exec_worker(const PsimPlanExec *x, int32_t d) { return x->workers[d]; }
int32_t psim_plan_exec_n_devices(const PsimPlanExec *x) { return x->n_devices; }
PsimExecutor *psim_plan_exec_executor(const PsimPlanExec *x, int32_t d) { return x->execs[d]; }

/* Calls fn for every transfer the last step made, with its start and end (the transport's
 * clock) and bytes on the wire. */
typedef void (*XferVisit)(const PsimPlanExec *x, int32_t i, double start, double end,
                          uint64_t bytes, void *user);
static void last_transfers(const PsimPlanExec *x, XferVisit fn, void *user)
{
    for (int32_t i = 0; i < x->plan->n_transfers; i++) {
        double start, end;
        uint64_t bytes;
        if (psim__transport_record(x->tp, i, &start, &end, &bytes))
            fn(x, i, start, end, bytes, user);
    }
}

static void xfer_to_timeline(const PsimPlanExec *x, int32_t i, double start, double end,
                             uint64_t bytes, void *user)
{
    const PsimTransfer *tr = &x->plan->transfers[i];
    psim_timeline_xfer_add(user, psim_graph_node(x->plan->graph, tr->recv)->name, tr->key, i,
                           tr->src, tr->dst, start - x->origin_us, end - x->origin_us, bytes);
}

/* A variable's value: its node's output, or a read of it (an Identity of it). */
static gboolean reads_variable(const PsimGraph *g, int32_t v)
{
    const PsimNode *n = psim_graph_node(g, v);
    return psim_op_is_variable(n->op) ||
           (!strcmp(n->op, "Identity") && n->n_inputs == 1 && n->inputs[0].node >= 0 &&
            psim_op_is_variable(psim_graph_node(g, n->inputs[0].node)->op));
}

typedef struct {
    PsimLinkCount *all;
    int32_t nd;
} LinkTally;

static void xfer_to_links(const PsimPlanExec *x, int32_t i, double start, double end,
                          uint64_t bytes, void *user)
{
    (void)start, (void)end;
    LinkTally *lt = user;
    const PsimTransfer *tr = &x->plan->transfers[i];
    PsimLinkCount *l = &lt->all[(size_t)tr->src * lt->nd + tr->dst];
    l->messages++;
    l->bytes += bytes;
    l->variable_reads += !tr->control && tr->port.node >= 0 &&
                         reads_variable(x->plan->graph, tr->port.node);
}

void psim_plan_exec_timeline_add(const PsimPlanExec *x, PsimTimeline *t)
{
    const PsimPlan *p = x->plan;
    const PsimGraph *g = p->graph;
    for (int32_t d = 0; d < x->n_devices; d++) {
        if (!x->execs[d])
            continue;
        PsimExecStats st;
        psim_executor_stats(x->execs[d], &st);
        double off = st.step_start_us - x->origin_us;
        /* Send and Recv are no ops: their pairs are the transfers below, as the simulator
         * writes them, so that the two timelines compare per node and per transfer. */
        for (int32_t k = 0; k < st.n_run; k++) {
            int32_t v = st.nodes[k];
            if (p->transfer_of_recv[v] >= 0)
                continue;
            const PsimNode *n = psim_graph_node(g, v);
            if (!strcmp(n->op, "Send") || !strcmp(n->op, "Recv"))
                continue;
            psim_timeline_op_add(t, n->name, n->op, v, d, 0, st.start[k] + off, st.end[k] + off);
        }
        if (d < t->n_devices && st.peak_bytes > t->peak_memory[d])
            t->peak_memory[d] = st.peak_bytes;
    }
    last_transfers(x, xfer_to_timeline, t);
    t->step_time_us = x->step_us;
}

int32_t psim_plan_exec_link_counts(const PsimPlanExec *x, PsimLinkCount **out)
{
    int32_t nd = x->plan->n_devices;
    g_autofree PsimLinkCount *all = g_new0(PsimLinkCount, (size_t)nd * nd + 1);
    LinkTally lt = {all, nd};
    last_transfers(x, xfer_to_links, &lt);
    int32_t n = 0;
    for (int32_t a = 0; a < nd; a++)
        for (int32_t b = 0; b < nd; b++)
            if (all[(size_t)a * nd + b].messages) {
                all[n] = all[(size_t)a * nd + b];
                all[n].src = a, all[n].dst = b;
                n++;
            }
    *out = g_steal_pointer(&all);
    return n;
}
