/* Simulator tests on hand-built plans whose timelines were computed by hand: shared links,
 * latency, Recvs held after a node, memory peaks, capacity, static vs dynamic order, the engine. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "placesim/formats.h"

/* A tiny builder: Task nodes with one output of `bytes` and cost `us` on every device of
 * type P. Devices are P:0 .. P:n-1. */
typedef struct {
    PsimGraph *g;
    PsimCluster *c;
    GArray *xfers;
    int32_t *dev; /* per node */
    int32_t n_alloc;
} B;

static void b_init(B *b, int32_t n_dev, double GBps, double lat, gboolean independent)
{
    b->g = psim_graph_new("t");
    b->c = psim_cluster_new();
    for (int32_t i = 0; i < n_dev; i++) {
        g_autofree char *nm = g_strdup_printf("P:%d", i);
        g_assert_cmpint(psim_cluster_device_add(b->c, nm, "P", NULL), ==, i);
    }
    psim_cluster_default_link_set(b->c, (PsimLink){GBps, lat, independent});
    b->xfers = g_array_new(FALSE, TRUE, sizeof(PsimTransfer));
    b->n_alloc = 64;
    b->dev = g_new0(int32_t, b->n_alloc);
}

static PsimNode *b_node(B *b, const char *name, double us, uint64_t bytes, int32_t dev,
                        const char *in1, const char *in2)
{
    PsimNode *n = psim_graph_node_add(b->g, name, "Task", NULL);
    g_assert_nonnull(n);
    psim_graph_node_outputs_set(b->g, n, 1);
    n->outputs[0].bytes = bytes;
    psim_graph_node_cost_set(b->g, n, "P", us);
    if (in1)
        psim_graph_node_input_add_ref(b->g, n, in1);
    if (in2)
        psim_graph_node_input_add_ref(b->g, n, in2);
    b->dev[n->id] = dev;
    return n;
}

/* A Send of `src`'s output 0 from its device to dst, and the Recv on dst named recv_name, held
 * until node `after` (on dst) has finished when it is not NULL. */
static void b_xfer(B *b, const char *src, int32_t dst, const char *recv_name, const char *after,
                   double priority)
{
    PsimNode *p = psim_graph_node_find(b->g, src);
    g_autofree char *sname = g_strdup_printf("send_%s", recv_name);
    PsimNode *s = psim_graph_node_add(b->g, sname, "Send", NULL);
    psim_graph_node_input_add(b->g, s, (PsimPort){p->id, 0});
    PsimNode *r = psim_graph_node_add(b->g, recv_name, "Recv", NULL);
    psim_graph_node_outputs_set(b->g, r, 1);
    r->outputs[0].bytes = p->outputs[0].bytes;
    b->dev[s->id] = b->dev[p->id];
    b->dev[r->id] = dst;
    PsimTransfer t = {.send = s->id, .recv = r->id, .src = b->dev[p->id], .dst = dst,
                      .port = {p->id, 0}, .bytes = p->outputs[0].bytes,
                      .raw_bytes = p->outputs[0].bytes,
                      .after = after ? psim_graph_node_find(b->g, after)->id : -1,
                      .priority = priority, .key = recv_name};
    g_array_append_val(b->xfers, t);
}

/* Builds the plan: order on each device = node id order. */
static PsimPlan *b_plan(B *b)
{
    GError *err = NULL;
    g_assert_true(psim_graph_finalize(b->g, &err));
    int32_t nd = psim_cluster_n_devices(b->c), n = psim_graph_n_nodes(b->g);
    g_autofree const char **names = g_new(const char *, nd);
    for (int32_t d = 0; d < nd; d++)
        names[d] = psim_cluster_device(b->c, d)->name;
    PsimPlan *p = psim_plan_new(b->g, nd, names);
    b->g = NULL;
    for (int32_t v = 0; v < n; v++)
        p->device_of[v] = b->dev[v];
    for (int32_t d = 0; d < nd; d++) {
        p->order[d] = g_new(int32_t, n);
        for (int32_t v = 0; v < n; v++)
            if (b->dev[v] == d)
                p->order[d][p->n_order[d]++] = v;
    }
    p->n_transfers = (int32_t)b->xfers->len;
    p->transfers = (PsimTransfer *)g_array_free(b->xfers, FALSE);
    b->xfers = NULL;
    for (int32_t x = 0; x < p->n_transfers; x++)
        p->transfer_of_recv[p->transfers[x].recv] = x;
    for (int32_t v = 0; v < n; v++)
        p->priority[v] = v;
    return p;
}

static void b_free(B *b)
{
    psim_graph_free(b->g);
    psim_cluster_free(b->c);
    if (b->xfers)
        g_array_free(b->xfers, TRUE);
    g_free(b->dev);
}

static const PsimTimelineOp *op(const PsimTimeline *t, const char *name)
{
    for (guint i = 0; i < t->ops->len; i++) {
        PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        if (!strcmp(o->name, name))
            return o;
    }
    g_error("no op %s", name);
    return NULL;
}

static double op_start(const PsimTimeline *t, const char *name) { return op(t, name)->start; }
static double op_end(const PsimTimeline *t, const char *name) { return op(t, name)->end; }

static const PsimTimelineXfer *xfer(const PsimTimeline *t, const char *name)
{
    for (guint i = 0; i < t->xfers->len; i++) {
        PsimTimelineXfer *x = &g_array_index(t->xfers, PsimTimelineXfer, i);
        if (!strcmp(x->name, name))
            return x;
    }
    g_error("no transfer %s", name);
    return NULL;
}

static PsimTimeline *run(PsimPlan *p, PsimCluster *c, PsimOrder order, PsimSimResult *r)
{
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    PsimSimOptions o = {.order = order};
    PsimTimeline *t = NULL;
    GError *err = NULL;
    gboolean ok = psim_sim_run(p, m, &o, r, &t, &err);
    g_assert_no_error(err);
    g_assert_true(ok);
    return t;
}

/* Two 100-byte tensors cross one shared link of 1 byte/us with latency 5 after A ends at 10:
 * the first occupies the link 10..110 and arrives at 115; the second waits, occupies 110..210
 * and arrives at 215. */
static void test_shared_link(void)
{
    B b;
    b_init(&b, 2, 0.001, 5, FALSE);
    b_node(&b, "A", 10, 100, 0, NULL, NULL);
    b_node(&b, "A2", 0, 100, 0, "A:0", NULL);
    b_xfer(&b, "A", 1, "rA", NULL, 1);
    b_xfer(&b, "A2", 1, "rA2", NULL, 2);
    b_node(&b, "B", 3, 4, 1, "rA:0", NULL);
    b_node(&b, "C", 3, 4, 1, "rA2:0", NULL);
    g_autoptr(PsimPlan) p = b_plan(&b);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_STATIC, &r);
    g_assert_cmpfloat(xfer(t, "rA")->start, ==, 10);
    g_assert_cmpfloat(xfer(t, "rA")->end, ==, 115);
    g_assert_cmpfloat(xfer(t, "rA2")->start, ==, 110);
    g_assert_cmpfloat(xfer(t, "rA2")->end, ==, 215);
    g_assert_cmpfloat(op_start(t, "B"), ==, 115);
    g_assert_cmpfloat(op_start(t, "C"), ==, 215);
    g_assert_cmpfloat(r.step_time_us, ==, 218);
    psim_sim_result_clear(&r);
    b_free(&b);
}

/* The same with an independent link: both arrive at 115. And with priorities reversed on a
 * shared link, the second tensor goes first. */
static void test_independent_and_priority(void)
{
    for (int mode = 0; mode < 2; mode++) {
        B b;
        b_init(&b, 2, 0.001, 5, mode == 0);
        b_node(&b, "A", 10, 100, 0, NULL, NULL);
        b_node(&b, "A2", 0, 100, 0, "A:0", NULL);
        b_xfer(&b, "A", 1, "rA", NULL, 2);
        b_xfer(&b, "A2", 1, "rA2", NULL, 1);
        b_node(&b, "B", 3, 4, 1, "rA:0", NULL);
        g_autoptr(PsimPlan) p = b_plan(&b);
        PsimSimResult r;
        /* Requested at the same time (A2 costs 0): priority decides who waits. */
        g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_STATIC, &r);
        if (mode == 0) {
            g_assert_cmpfloat(xfer(t, "rA")->end, ==, 115);
            g_assert_cmpfloat(xfer(t, "rA2")->end, ==, 115);
        } else {
            /* rA was requested first and took the free link; rA2 waits for it. */
            g_assert_cmpfloat(xfer(t, "rA")->end, ==, 115);
            g_assert_cmpfloat(xfer(t, "rA2")->start, ==, 110);
        }
        psim_sim_result_clear(&r);
        b_free(&b);
    }
    /* Three transfers queued behind a busy link leave in priority order, not request order. */
    B b;
    b_init(&b, 2, 0.001, 0, FALSE);
    b_node(&b, "A", 10, 100, 0, NULL, NULL);
    b_node(&b, "X", 0, 10, 0, "A:0", NULL);
    b_node(&b, "Y", 0, 10, 0, "A:0", NULL);
    b_xfer(&b, "A", 1, "rA", NULL, 0);
    b_xfer(&b, "X", 1, "rX", NULL, 9);
    b_xfer(&b, "Y", 1, "rY", NULL, 1);
    g_autoptr(PsimPlan) p = b_plan(&b);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_STATIC, &r);
    g_assert_cmpfloat(xfer(t, "rA")->end, ==, 110);
    g_assert_cmpfloat(xfer(t, "rY")->start, ==, 110);
    g_assert_cmpfloat(xfer(t, "rY")->end, ==, 120);
    g_assert_cmpfloat(xfer(t, "rX")->start, ==, 120);
    psim_sim_result_clear(&r);
    b_free(&b);
}

/* Links copied by the destination device (the executor's CPU-to-CPU transfers): the copy waits
 * until the destination is between nodes and occupies it. A ends at 10 on P:0; P:1 runs C from 0
 * to 100; rA2 (50 bytes, priority 1) and rA (100 bytes, priority 2) are requested at 10 and
 * copied by P:1 in priority order from 100: rA2 100..155 (5 + 50), rA 155..260; B then runs
 * 260..263. On a plain link the same plan ends at 168 (rA 10..115, rA2 110..165, B 165..168). */
static void test_by_destination(void)
{
    for (int mode = 0; mode < 2; mode++) {
        B b;
        b_init(&b, 2, 0.001, 5, FALSE);
        PsimLink l = psim_cluster_default_link(b.c);
        l.by_destination = mode == 0;
        psim_cluster_default_link_set(b.c, l);
        b_node(&b, "C", 100, 4, 1, NULL, NULL);
        b_node(&b, "A", 10, 100, 0, NULL, NULL);
        b_node(&b, "A2", 0, 50, 0, "A:0", NULL);
        b_xfer(&b, "A", 1, "rA", NULL, 2);
        b_xfer(&b, "A2", 1, "rA2", NULL, 1);
        b_node(&b, "B", 3, 4, 1, "rA:0", "rA2:0");
        g_autoptr(PsimPlan) p = b_plan(&b);
        for (int order = 0; order < 2; order++) {
            PsimSimResult r;
            g_autoptr(PsimTimeline) t =
                run(p, b.c, order ? PSIM_ORDER_DYNAMIC : PSIM_ORDER_STATIC, &r);
            if (mode == 0) {
                g_assert_cmpfloat(xfer(t, "rA2")->start, ==, 100);
                g_assert_cmpfloat(xfer(t, "rA2")->end, ==, 155);
                g_assert_cmpfloat(xfer(t, "rA")->start, ==, 155);
                g_assert_cmpfloat(xfer(t, "rA")->end, ==, 260);
                g_assert_cmpfloat(op_start(t, "B"), ==, 260);
                g_assert_cmpfloat(r.step_time_us, ==, 263);
            } else {
                g_assert_cmpfloat(xfer(t, "rA")->end, ==, 115);
                g_assert_cmpfloat(r.step_time_us, ==, 168);
            }
            psim_sim_result_clear(&r);
        }
        b_free(&b);
    }
}

/* MPI tasks outnumbering a host's cores: P:0 and P:2 run on core 0 of host h, P:1 on core 1.
 * A (100 us, P:0) takes the core at 0, so C (30 us, P:2) waits for it: 100..130. X (P:1,
 * 50..60) sends 100 bytes to P:2 over a 1 byte/us link whose destination copies: the copy
 * needs core 0 too, and goes before P:2's next node (the executor's rule): 100..200, then C
 * 200..230, D 230..235. With P:2 on another host nothing is shared: C 0..30, the copy
 * 60..160, D 160..165, the step A's 100 .. D's 165. */
static void test_shared_cores(void)
{
    for (int shared = 0; shared < 2; shared++) {
        B b;
        b_init(&b, 3, 0.001, 0, FALSE);
        PsimLink l = psim_cluster_default_link(b.c);
        l.by_destination = TRUE;
        psim_cluster_default_link_set(b.c, l);
        for (int32_t d = 0; d < 3; d++) {
            PsimDevice *dv = psim_cluster_device(b.c, d);
            dv->n_cores = 1;
            dv->cores = g_new(int32_t, 1);
            dv->cores[0] = d == 1;
            dv->host = g_strdup(d == 2 && !shared ? "g" : "h");
        }
        g_assert_true(psim_cluster_devices_share_cores(b.c, 0, 2) == shared);
        g_assert_false(psim_cluster_devices_share_cores(b.c, 0, 1));
        b_node(&b, "A", 100, 0, 0, NULL, NULL);
        b_node(&b, "B", 50, 0, 1, NULL, NULL);
        b_node(&b, "X", 10, 100, 1, "B", NULL);
        b_node(&b, "C", 30, 0, 2, NULL, NULL);
        b_xfer(&b, "X", 2, "rX", NULL, 1);
        b_node(&b, "D", 5, 0, 2, "rX:0", "C");
        g_autoptr(PsimPlan) p = b_plan(&b);
        for (int order = 0; order < 2; order++) {
            PsimSimResult r;
            g_autoptr(PsimTimeline) t = run(p, b.c, order ? PSIM_ORDER_DYNAMIC : PSIM_ORDER_STATIC, &r);
            g_assert_cmpfloat(op_end(t, "A"), ==, 100);
            g_assert_cmpfloat(op_end(t, "X"), ==, 60);
            g_assert_cmpfloat(op_start(t, "C"), ==, shared ? 200 : 0);
            g_assert_cmpfloat(xfer(t, "rX")->start, ==, shared ? 100 : 60);
            g_assert_cmpfloat(xfer(t, "rX")->end, ==, shared ? 200 : 160);
            g_assert_cmpfloat(r.step_time_us, ==, shared ? 235 : 165);
            psim_sim_result_clear(&r);
        }
        b_free(&b);
    }
}

/* Latency is paid once per transfer, not per byte or per hop: 10 + 100/1 + 5 = 115, and a
 * zero-byte (control) transfer costs exactly the latency. */
static void test_latency_once(void)
{
    B b;
    b_init(&b, 2, 0.001, 5, FALSE);
    b_node(&b, "A", 10, 100, 0, NULL, NULL);
    b_node(&b, "Z", 1, 0, 0, NULL, NULL);
    b_xfer(&b, "A", 1, "rA", NULL, 0);
    b_xfer(&b, "Z", 1, "rZ", NULL, 0);
    g_autoptr(PsimPlan) p = b_plan(&b);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_STATIC, &r);
    g_assert_cmpfloat(xfer(t, "rA")->end, ==, 115);
    /* Z ends at 11, but the link is busy until 110; then 0 bytes + 5 latency. */
    g_assert_cmpfloat(xfer(t, "rZ")->start, ==, 110);
    g_assert_cmpfloat(xfer(t, "rZ")->end, ==, 115);
    g_assert_cmpfloat(r.lower_bound_us, ==, 115);
    psim_sim_result_clear(&r);
    b_free(&b);
}

/* A Recv held after H (its device's node, finishing at 50) does not start at 10 when its
 * tensor is ready: it waits for H, not for a time. */
static void test_recv_after(void)
{
    B b;
    b_init(&b, 2, 0.001, 5, FALSE);
    b_node(&b, "A", 10, 20, 0, NULL, NULL);
    b_node(&b, "H", 50, 4, 1, NULL, NULL);
    b_xfer(&b, "A", 1, "rA", "H", 0);
    b_node(&b, "B", 1, 4, 1, "rA:0", NULL);
    g_autoptr(PsimPlan) p = b_plan(&b);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_STATIC, &r);
    g_assert_cmpfloat(op_end(t, "H"), ==, 50);
    g_assert_cmpfloat(xfer(t, "rA")->start, ==, 50);
    g_assert_cmpfloat(xfer(t, "rA")->end, ==, 75);
    g_assert_cmpfloat(op_start(t, "B"), ==, 75);
    g_assert_cmpfloat(r.step_time_us, ==, 76);
    psim_sim_result_clear(&r);
    b_free(&b);
}

/* A (10 B) feeds B and C (100 B each), which feed D and E (1 B, fetched). With one stream the
 * peak is 10 + 100 + 1 = 111 (A, C, and D's kept output); with two streams B and C overlap from
 * time 1 to 6: 10 + 100 + 100 = 210 (at 6 A is freed before D and E start). A capacity of 150
 * is exceeded only then, when C starts at time 1. */
static void test_memory_overlap(void)
{
    for (int streams = 1; streams <= 2; streams++) {
        B b;
        b_init(&b, 1, 1, 0, FALSE);
        psim_cluster_device(b.c, 0)->n_streams = streams;
        psim_cluster_device(b.c, 0)->memory_bytes = 150;
        b_node(&b, "A", 1, 10, 0, NULL, NULL);
        b_node(&b, "B", 5, 100, 0, "A:0", NULL);
        b_node(&b, "D", 1, 1, 0, "B:0", NULL);
        b_node(&b, "C", 5, 100, 0, "A:0", NULL);
        b_node(&b, "E", 1, 1, 0, "C:0", NULL);
        g_autoptr(PsimPlan) p = b_plan(&b);
        psim_graph_output_add(p->graph, (PsimPort){psim_graph_node_find(p->graph, "D")->id, 0});
        psim_graph_output_add(p->graph, (PsimPort){psim_graph_node_find(p->graph, "E")->id, 0});
        PsimSimResult r;
        g_autoptr(PsimTimeline) t = run(p, b.c, PSIM_ORDER_DYNAMIC, &r);
        g_assert_nonnull(t);
        if (streams == 1) {
            g_assert_cmpuint(r.peak_memory[0], ==, 111);
            g_assert_cmpint(r.over_device, ==, -1);
        } else {
            g_assert_cmpuint(r.peak_memory[0], ==, 210);
            g_assert_cmpint(r.over_device, ==, 0);
            g_assert_cmpstr(psim_graph_node(p->graph, r.over_node)->name, ==, "C");
            g_assert_cmpfloat(r.over_time_us, ==, 1);
        }
        psim_sim_result_clear(&r);
        b_free(&b);
    }
}

/* Static order follows the plan even when another ready node could go first; dynamic order
 * takes the ready node of lowest priority. A static order against the dependencies deadlocks
 * and is reported, naming a node. */
static void test_static_dynamic(void)
{
    B b;
    b_init(&b, 1, 1, 0, FALSE);
    b_node(&b, "A", 10, 1, 0, NULL, NULL);
    b_node(&b, "B", 1, 1, 0, "A:0", NULL);
    b_node(&b, "C", 1, 1, 0, NULL, NULL);
    g_autoptr(PsimPlan) p = b_plan(&b);
    /* Order A, B, C; priorities favour C. */
    p->priority[2] = -1;
    PsimSimResult r;
    PsimTimeline *t = run(p, b.c, PSIM_ORDER_STATIC, &r);
    g_assert_cmpfloat(op_start(t, "C"), ==, 11);
    psim_timeline_free(t);
    psim_sim_result_clear(&r);
    t = run(p, b.c, PSIM_ORDER_DYNAMIC, &r);
    g_assert_cmpfloat(op_start(t, "C"), ==, 0);
    g_assert_cmpfloat(op_start(t, "A"), ==, 1);
    psim_timeline_free(t);
    psim_sim_result_clear(&r);
    /* Swap A and B in the static order: B waits for A forever. */
    p->order[0][0] = 1;
    p->order[0][1] = 0;
    g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, NULL);
    GError *err = NULL;
    PsimSimOptions o = {.order = PSIM_ORDER_STATIC};
    g_assert_false(psim_sim_run(p, m, &o, &r, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "deadlock"));
    g_clear_error(&err);
    b_free(&b);
}

/* Same inputs, same timeline, field by field. */
static void test_deterministic(void)
{
    B b;
    b_init(&b, 3, 0.01, 1, FALSE);
    char name[16], in[20];
    for (int i = 0; i < 60; i++) {
        g_snprintf(name, sizeof name, "n%d", i);
        g_snprintf(in, sizeof in, "n%d:0", i / 2);
        b_node(&b, name, 1 + i % 7, 100 + i, 0, i ? in : NULL, NULL);
    }
    g_autoptr(PsimPlan) p = b_plan(&b);
    PsimSimResult r1, r2;
    g_autoptr(PsimTimeline) t1 = run(p, b.c, PSIM_ORDER_DYNAMIC, &r1);
    g_autoptr(PsimTimeline) t2 = run(p, b.c, PSIM_ORDER_DYNAMIC, &r2);
    g_assert_cmpuint(t1->ops->len, ==, t2->ops->len);
    for (guint i = 0; i < t1->ops->len; i++) {
        PsimTimelineOp *a = &g_array_index(t1->ops, PsimTimelineOp, i);
        PsimTimelineOp *c = &g_array_index(t2->ops, PsimTimelineOp, i);
        g_assert_cmpstr(a->name, ==, c->name);
        g_assert_true(a->start == c->start && a->end == c->end && a->device == c->device);
    }
    psim_sim_result_clear(&r1);
    psim_sim_result_clear(&r2);
    b_free(&b);
}

/* The incremental engine agrees with the simulator for a plan committed in one order: a chain
 * A(dev0) -> B(dev1) -> C(dev0) over a link of 1 byte/us and latency 2. */
static void test_engine(void)
{
    g_autoptr(PsimGraph) g = psim_graph_new("e");
    g_autoptr(PsimCluster) c = psim_cluster_new();
    psim_cluster_device_add(c, "P:0", "P", NULL);
    psim_cluster_device_add(c, "P:1", "P", NULL);
    psim_cluster_default_link_set(c, (PsimLink){0.001, 2, FALSE});
    const char *names[] = {"A", "B", "C"};
    for (int i = 0; i < 3; i++) {
        PsimNode *n = psim_graph_node_add(g, names[i], "Task", NULL);
        psim_graph_node_outputs_set(g, n, 1);
        n->outputs[0].bytes = 10;
        psim_graph_node_cost_set(g, n, "P", 5);
        if (i)
            psim_graph_node_input_add(g, n, (PsimPort){i - 1, 0});
    }
    g_assert_true(psim_graph_finalize(g, NULL));
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    g_autoptr(PsimSimEngine) e = psim_sim_engine_new(g, m, NULL);
    g_assert_cmpfloat(psim_sim_engine_commit(e, 0, 0), ==, 5);
    g_assert_cmpfloat(psim_sim_engine_probe(e, 1, 0, NULL), ==, 10);
    g_assert_cmpfloat(psim_sim_engine_probe(e, 1, 1, NULL), ==, 5 + 10 + 2 + 5);
    g_assert_cmpfloat(psim_sim_engine_commit(e, 1, 1), ==, 22);
    g_assert_cmpfloat(psim_sim_engine_probe(e, 2, 0, NULL), ==, 22 + 12 + 5);
    g_assert_cmpfloat(psim_sim_engine_probe(e, 2, 1, NULL), ==, 27);
    g_assert_cmpfloat(psim_sim_engine_commit(e, 2, 1), ==, 27);
    g_assert_cmpfloat(psim_sim_engine_makespan(e), ==, 27);
}

/* resnet50 placed by heft on local:2, simulated, written as a Chrome trace: valid JSON in
 * which every node of the plan the executor runs in the step (not Send/Recv, constants or the
 * fed input) appears exactly once as an op slice; and the
 * Gantt chart is a PNG. */
static void test_resnet50_trace(void)
{
    const char *data = g_getenv("PSIM_DATA");
    g_autofree char *path = g_build_filename(data ? data : "../shared/data", "onnx-light", "resnet50.onnx", NULL);
    if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
        g_test_skip("no shared data");
        return;
    }
    GError *err = NULL;
    g_autoptr(PsimGraph) g = psim_graph_load(path, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    g_autoptr(PsimPlaceCtx) pc = psim_place_ctx_new(g, m, NULL, &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlacement) pl = psim_place(pc, "heft", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = psim_plan_build(pc, pl, &err);
    g_assert_no_error(err);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = NULL;
    g_assert_true(psim_sim_run(plan, m, NULL, &r, &t, &err));
    g_autofree char *dir = g_dir_make_tmp("psim-r50-XXXXXX", NULL);
    g_autofree char *trace = g_build_filename(dir, "r50.json", NULL);
    g_autofree char *png = g_build_filename(dir, "r50.png", NULL);
    g_assert_true(psim_timeline_save_chrome(t, trace, &err));
    g_autoptr(JsonParser) parser = json_parser_new();
    g_assert_true(json_parser_load_from_file(parser, trace, &err));
    g_assert_no_error(err);
    JsonArray *ev = json_object_get_array_member(json_node_get_object(json_parser_get_root(parser)), "traceEvents");
    g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
    for (guint i = 0; i < json_array_get_length(ev); i++) {
        JsonObject *e = json_array_get_object_element(ev, i);
        if (strcmp(json_object_get_string_member(e, "ph"), "X") ||
            strcmp(json_object_get_string_member(e, "cat"), "op"))
            continue;
        const char *name = json_object_get_string_member(e, "name");
        g_assert_false(g_hash_table_contains(seen, name));
        g_hash_table_add(seen, (gpointer)name);
        g_assert_cmpfloat(json_object_get_double_member(e, "ts") + json_object_get_double_member(e, "dur"),
                          <=, r.step_time_us + 1e-6);
    }
    /* Every node the executor runs in the step is there once; what it evaluates before the
     * step (constants, weights, known shapes) or is fed (the input) is not. */
    g_autofree gboolean *folded = psim_cost_constant_nodes(plan->graph);
    int32_t expect = 0, n_folded = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(plan->graph); v++) {
        const PsimNode *n = psim_graph_node(plan->graph, v);
        if (!strcmp(n->op, "Send") || !strcmp(n->op, "Recv"))
            continue;
        if (folded[v] || !strcmp(n->op, "Placeholder")) {
            g_assert_false(g_hash_table_contains(seen, n->name));
            n_folded++;
            continue;
        }
        expect++;
        g_assert_true(g_hash_table_contains(seen, n->name));
    }
    g_assert_cmpint(g_hash_table_size(seen), ==, expect);
    g_assert_cmpint(expect + n_folded, ==, psim_graph_n_nodes(g));
    g_assert_cmpint(expect, >, 100); /* resnet50's convolutions, batch norms, relus ... */
    g_autofree char *gnuplot = g_find_program_in_path("gnuplot");
    if (gnuplot) {
        g_assert_true(psim_timeline_plot_gantt(t, png, "resnet50", &err));
        g_assert_no_error(err);
        g_autofree char *bytes = NULL;
        gsize len = 0;
        g_assert_true(g_file_get_contents(png, &bytes, &len, NULL));
        g_assert_cmpuint(len, >, 1000);
        g_assert_cmpint(memcmp(bytes, "\x89PNG", 4), ==, 0);
        g_unlink(png);
    }
    g_unlink(trace);
    g_rmdir(dir);
    psim_sim_result_clear(&r);
}

/* A node that starts after its device waited takes the device's idle curve longer, linearly
 * in the wait up to idle_gap_us, flat after. Within the step: P:1 runs D (0..10), then waits
 * for A (P:0, arrives at once) to run C (100 us); E right after C did not wait (10 us). Across
 * steps: P:0 ends its part (A) long before the step ends and waits into the next step, so A,
 * its first node, is charged that wait (116 us: 15); D is not (P:1 ends the step). So A runs
 * 0..45, C waits 35 us: 100 + 15 * 35 / 50 = 110.5, and the step is 165.5. Without the rows A
 * ends at 30, C takes 100, the step 140. */
/* P:1 runs D (0..10) then, after a Send of A (P:0, 0..30), C (100 us): C waits 20 us. */
static void idle_plan(B *b)
{
    b_init(b, 2, 0, 0, TRUE);
    for (int32_t d = 0; d < 2; d++)
        psim_cluster_device(b->c, d)->description = g_strdup("test device");
    b_node(b, "D", 10, 0, 1, NULL, NULL);
    b_node(b, "A", 30, 0, 0, NULL, NULL);
    b_xfer(b, "A", 1, "rA", NULL, 0);
    b_node(b, "C", 100, 0, 1, "rA", "D");
}

/* Removes the cost DB at path with its write-ahead log and shared-memory files. */
static void db_unlink(const char *path)
{
    for (const char *const *sfx = (const char *const[]){"", "-wal", "-shm", NULL}; *sfx; sfx++) {
        g_autofree char *f = g_strconcat(path, *sfx, NULL);
        g_unlink(f);
    }
}

/* Simulates p (static order) with the cost DB at path; `with`: both devices get the idle point
 * 15 us after 50 us first. */
static PsimTimeline *idle_run(B *b, PsimPlan *p, const char *path, gboolean with, PsimSimResult *r)
{
    GError *err = NULL;
    g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
    g_assert_no_error(err);
    for (int32_t d = 0; d < 2 && with; d++) {
        g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b->c, d), "idle_extra_us", 15, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b->c, d), "idle_gap_us", 50, "t", &err));
    }
    g_autoptr(PsimCostModel) m = psim_cost_model_new(b->c, db);
    PsimSimOptions o = {.order = PSIM_ORDER_STATIC};
    PsimTimeline *t = NULL;
    g_assert_true(psim_sim_run(p, m, &o, r, &t, &err));
    g_assert_no_error(err);
    return t;
}

/* Builds b's plan and simulates it (static order) with db; frees the plan and b. */
static PsimTimeline *db_run(B *b, PsimCostDb *db)
{
    PsimPlan *p = b_plan(b);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(b->c, db);
    PsimSimOptions o = {.order = PSIM_ORDER_STATIC};
    PsimSimResult r;
    PsimTimeline *t = NULL;
    GError *err = NULL;
    g_assert_true(psim_sim_run(p, m, &o, &r, &t, &err));
    g_assert_no_error(err);
    psim_sim_result_clear(&r);
    psim_plan_free(p);
    b_free(b);
    return t;
}

static void test_idle(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-idle-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "c.db", NULL);
    for (int with = 0; with < 2; with++) {
        B b;
        idle_plan(&b);
        b_node(&b, "E", 10, 0, 1, "C", NULL);
        PsimPlan *p = b_plan(&b);
        PsimSimResult r;
        g_autoptr(PsimTimeline) t = idle_run(&b, p, path, with, &r);
        g_assert_cmpfloat_with_epsilon(op_end(t, "D"), 10, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "A"), with ? 45 : 30, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_start(t, "C"), with ? 45 : 30, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "C") - op_start(t, "C"), with ? 110.5 : 100, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "E") - op_start(t, "E"), 10, 1e-9);
        g_assert_cmpfloat_with_epsilon(r.step_time_us, with ? 165.5 : 140, 1e-9);
        psim_sim_result_clear(&r);
        psim_plan_free(p);
        b_free(&b);
    }
    /* The curve: linear from 0 through its points, then flat. */
    PsimIdleCurve one = {1, {50, 0}, {15, 0}}, two = {2, {50, 500}, {15, 60}}, none = {0};
    g_assert_cmpfloat(psim_cost_idle_extra(&one, 0), ==, 0);
    g_assert_cmpfloat_with_epsilon(psim_cost_idle_extra(&one, 500), 15, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_idle_extra(&one, 10), 3, 1e-12);
    g_assert_cmpfloat(psim_cost_idle_extra(&none, 500), ==, 0);
    g_assert_cmpfloat_with_epsilon(psim_cost_idle_extra(&two, 10), 3, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_idle_extra(&two, 275), 37.5, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_idle_extra(&two, 5000), 60, 1e-12);
    /* A second point from the DB (2 us after 10, 12 after 30, flat after): A waited 107 us from
     * the step before (the first pass's step, 137, less A's end, 30), 12; so C starts at 42,
     * having waited 32 us: 12. */
    {
        B b;
        idle_plan(&b);
        PsimPlan *p = b_plan(&b);
        GError *err = NULL;
        g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
        for (int32_t d = 0; d < 2; d++) {
            const PsimDevice *dev = psim_cluster_device(b.c, d);
            g_assert_true(psim_cost_db_calibration_put(db, dev, "idle_extra_us", 2, "t", &err) &&
                          psim_cost_db_calibration_put(db, dev, "idle_gap_us", 10, "t", &err) &&
                          psim_cost_db_calibration_put(db, dev, "idle_extra_long_us", 12, "t", &err) &&
                          psim_cost_db_calibration_put(db, dev, "idle_gap_long_us", 30, "t", &err));
        }
        g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
        PsimIdleCurve c;
        psim_cost_model_idle_curve(m, 1, &c);
        g_assert_cmpint(c.n, ==, 2);
        PsimSimOptions o = {.order = PSIM_ORDER_STATIC};
        PsimSimResult r;
        g_autoptr(PsimTimeline) t = NULL;
        g_assert_true(psim_sim_run(p, m, &o, &r, &t, &err));
        g_assert_no_error(err);
        g_assert_cmpfloat_with_epsilon(op_start(t, "C"), 42, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "C") - op_start(t, "C"), 100 + 12, 1e-9);
        psim_sim_result_clear(&r);
        /* C's signature's own points (0.5 us after 10, 1.5 after 30: profile --in-situ's 'idle'
         * rows) replace the device's: its 32 us wait costs 1.5 (A keeps the device's curve).
         * One of them alone is no curve: the device's stays. */
        const PsimNode *c_node = psim_graph_node_find(p->graph, "C");
        g_autofree char *sig = psim_cost_signature(p->graph, c_node);
        for (int rows = 1; rows <= 2; rows++) {
            for (int32_t d = 0; d < 2; d++) {
                const PsimDevice *dev = psim_cluster_device(b.c, d);
                PsimTimingStats st = {.n = 1, .mean_us = rows == 1 ? 0.5 : 1.5, .median_us = rows == 1 ? 0.5 : 1.5};
                g_assert_true(psim_cost_db_idle_put(db, dev, sig, c_node->op, rows == 1 ? 10 : 30, &st, &err));
            }
            g_autoptr(PsimCostModel) m2 = psim_cost_model_new(b.c, db);
            PsimIdleCurve own;
            psim_cost_model_node_idle_curve(m2, p->graph, c_node, 1, &own);
            g_assert_cmpint(own.n, ==, 2);
            g_assert_cmpfloat(own.extra_us[0], ==, rows == 1 ? 2 : 0.5);
            g_autoptr(PsimTimeline) t2 = NULL;
            g_assert_true(psim_sim_run(p, m2, &o, &r, &t2, &err));
            g_assert_no_error(err);
            g_assert_cmpfloat_with_epsilon(op_start(t2, "C"), 42, 1e-9);
            g_assert_cmpfloat_with_epsilon(op_end(t2, "C") - op_start(t2, "C"), rows == 1 ? 112 : 101.5, 1e-9);
            psim_sim_result_clear(&r);
        }
        psim_plan_free(p);
        b_free(&b);
    }
    db_unlink(path);
    g_rmdir(dir);
}

/* Ops slowed by a busy neighbour are slowed for the part they overlap it (busy_factor 1.5 with 2
 * devices): A (100 us, P:0) beside B then C (20 and 10 us, P:1, from 0 to 45 at 1.5x) does 30 us
 * of its work by 45 and the other 70 alone: it ends at 115, not at 150 as when a node paid the
 * factor whole for a neighbour busy when it started. Without the calibration: 100 and 30. */
static void test_busy_overlap(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-busy-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "c.db", NULL);
    for (int with = 0; with < 2; with++) {
        B b;
        b_init(&b, 2, 0, 0, TRUE);
        for (int32_t d = 0; d < 2; d++)
            psim_cluster_device(b.c, d)->description = g_strdup("test device");
        b_node(&b, "A", 100, 0, 0, NULL, NULL);
        b_node(&b, "B", 20, 0, 1, NULL, NULL);
        b_node(&b, "C", 10, 0, 1, "B", NULL);
        PsimPlan *p = b_plan(&b);
        GError *err = NULL;
        g_autoptr(PsimCostDb) db = psim_cost_db_open(path, &err);
        g_assert_no_error(err);
        for (int32_t d = 0; d < 2 && with; d++) {
            const PsimDevice *dev = psim_cluster_device(b.c, d);
            g_assert_true(psim_cost_db_calibration_put(db, dev, "busy_factor", 1.5, "t", &err) &&
                          psim_cost_db_calibration_put(db, dev, "busy_devices", 2, "t", &err));
        }
        g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
        PsimSimOptions o = {.order = PSIM_ORDER_STATIC};
        PsimSimResult r;
        g_autoptr(PsimTimeline) t = NULL;
        g_assert_true(psim_sim_run(p, m, &o, &r, &t, &err));
        g_assert_no_error(err);
        g_assert_cmpfloat_with_epsilon(op_end(t, "B"), with ? 30 : 20, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "C"), with ? 45 : 30, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "A"), with ? 115 : 100, 1e-9);
        g_assert_cmpfloat_with_epsilon(r.step_time_us, with ? 115 : 100, 1e-9);
        psim_sim_result_clear(&r);
        psim_plan_free(p);
        b_free(&b);
        db_unlink(path);
    }
    g_rmdir(dir);
}

/* Two devices of one model ("test device": they share cost-DB rows) joined by a shared link
 * whose destination makes the copy (the executor's CPU devices). */
static void b_init_by_dst(B *b, double GBps, double lat)
{
    b_init(b, 2, GBps, lat, FALSE);
    PsimLink l = psim_cluster_default_link(b->c);
    l.by_destination = TRUE;
    psim_cluster_default_link_set(b->c, l);
    for (int32_t d = 0; d < 2; d++)
        psim_cluster_device(b->c, d)->description = g_strdup("test device");
}

/* A copy does not end a device's wait: P:1 runs D (0..10), then copies A's 10 kB at 1 GB/s on
 * arrival (a by-destination link: 45..55; A, P:0's first node, waited from the step before
 * and ends at 45, as in test_idle), then C (100 us) waited 45 us since D: 100 + 15 * 45 / 50 =
 * 113.5, not 100 as if the copy had been work that ended the wait. */
static void test_idle_after_copy(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-idle-copy-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "c.db", NULL);
    B b;
    b_init_by_dst(&b, 1, 0);
    b_node(&b, "D", 10, 0, 1, NULL, NULL);
    b_node(&b, "A", 30, 10000, 0, NULL, NULL);
    b_xfer(&b, "A", 1, "rA", NULL, 0);
    b_node(&b, "C", 100, 0, 1, "rA", "D");
    PsimPlan *p = b_plan(&b);
    PsimSimResult r;
    g_autoptr(PsimTimeline) t = idle_run(&b, p, path, TRUE, &r);
    g_assert_cmpfloat_with_epsilon(op_start(t, "C"), 55, 1e-9);
    g_assert_cmpfloat_with_epsilon(op_end(t, "C") - op_start(t, "C"), 113.5, 1e-9);
    psim_sim_result_clear(&r);
    psim_plan_free(p);
    b_free(&b);
    db_unlink(path);
    g_rmdir(dir);
}

/* A hop on a by-destination link of 1 GB/s and `lat` us: A (10 us, `bytes` out) on P:0, its
 * successor G (20) there, its Recv rA on P:1 and rA's consumer B (7); with `busy`, D (30) on P:1
 * first. */
static void b_hop(B *b, double lat, uint64_t bytes, gboolean busy)
{
    b_init_by_dst(b, 1, lat);
    if (busy)
        b_node(b, "D", 30, 0, 1, NULL, NULL);
    b_node(b, "A", 10, bytes, 0, NULL, NULL);
    b_node(b, "G", 20, 0, 0, "A", NULL);
    b_xfer(b, "A", 1, "rA", NULL, 0);
    b_node(b, "B", 7, 0, 1, "rA", NULL);
}

/* A transfer's Send and hand-off (psim_cost_model_hop; P:0's send_us 2, handoff_us 3; the link
 * 1 GB/s + 5 us from the Send's end to the consumer's start). A (0..10) on P:0 sends 1000 bytes
 * to P:1: the Send holds P:0 until 12, so G starts at 12, not 10; the copy can start at 15. With
 * P:1 busy until 30 (D) it copies 30..33 (6 us of the link less the 3 of the hand-off) and B
 * starts at 33; with P:1 idle, 15..18. Without the calibrations, G starts at 10 and the copy
 * takes the link's 6 us from 10 (or from 30 after D). */
static void test_send_handoff(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-hop-XXXXXX", NULL);
    for (int with = 0; with < 2; with++)
        for (int busy = 0; busy < 2; busy++) {
            g_autofree char *path = g_strdup_printf("%s/c%d%d.db", dir, with, busy);
            B b;
            b_hop(&b, 5, 1000, busy);
            GError *err = NULL;
            PsimCostDb *db = psim_cost_db_open(path, &err);
            g_assert_no_error(err);
            if (with) {
                g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, 0), "send_us", 2, "t", &err));
                g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, 0), "handoff_us", 3, "t", &err));
            }
            {
                g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
                PsimHopCurve send, handoff;
                psim_cost_model_hop(m, 0, &send, &handoff);
                g_assert_cmpint(send.n, ==, with ? 1 : 0); /* one figure for every size */
                g_assert_cmpfloat(psim_cost_hop_us(&send, 1000), ==, with ? 2 : 0);
                g_assert_cmpfloat(psim_cost_hop_us(&send, 1e9), ==, with ? 2 : 0);
                g_assert_cmpfloat(psim_cost_hop_us(&handoff, 1000), ==, with ? 3 : 0);
            }
            g_autoptr(PsimTimeline) t = db_run(&b, db);
            double copy_start = busy ? 30 : with ? 15 : 10, copy = with ? 3 : 6;
            g_assert_cmpfloat_with_epsilon(op_start(t, "G"), with ? 12 : 10, 1e-9);
            g_assert_cmpfloat_with_epsilon(xfer(t, "rA")->start, copy_start, 1e-9);
            g_assert_cmpfloat_with_epsilon(xfer(t, "rA")->end, copy_start + copy, 1e-9);
            g_assert_cmpfloat_with_epsilon(op_start(t, "B"), copy_start + copy, 1e-9);
            psim_cost_db_close(db);
            db_unlink(path);
        }
    g_rmdir(dir);
}

/* The Send and the hand-off by transfer size (send_1KiB_us .. , handoff_1KiB_us ..; the
 * figures for all sizes, send_us 100 and handoff_us 100, are then not read): P:0's Send of 1 KiB
 * takes 1 us and of 64 KiB 5 (linear between, flat outside), its hand-off 2 and 4. A (0..10) on
 * P:0 sends its output to P:1 (link 1 GB/s + 50 us from the Send's end to the consumer's start):
 * G, A's successor on P:0, starts when the Send ends, the copy when the hand-off does. */
static void test_send_handoff_sizes(void)
{
    g_autofree char *dir = g_dir_make_tmp("psim-hop-sizes-XXXXXX", NULL);
    const uint64_t sizes[3] = {1024, 65536, 16384};
    for (int k = 0; k < 3; k++) {
        g_autofree char *path = g_strdup_printf("%s/c%d.db", dir, k);
        B b;
        b_hop(&b, 50, sizes[k], FALSE);
        GError *err = NULL;
        PsimCostDb *db = psim_cost_db_open(path, &err);
        g_assert_no_error(err);
        const PsimDevice *d0 = psim_cluster_device(b.c, 0);
        g_assert_true(psim_cost_db_calibration_put(db, d0, "send_us", 100, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, d0, "handoff_us", 100, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, d0, "send_1KiB_us", 1, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, d0, "send_64KiB_us", 5, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, d0, "handoff_1KiB_us", 2, "t", &err));
        g_assert_true(psim_cost_db_calibration_put(db, d0, "handoff_64KiB_us", 4, "t", &err));
        double send = k == 0 ? 1 : k == 1 ? 5 : 1 + 4.0 * (16384 - 1024) / (65536 - 1024);
        double handoff = k == 0 ? 2 : k == 1 ? 4 : 2 + 2.0 * (16384 - 1024) / (65536 - 1024);
        {
            g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
            PsimHopCurve cs, ch;
            psim_cost_model_hop(m, 0, &cs, &ch);
            g_assert_cmpint(cs.n, ==, 2);
            g_assert_cmpfloat_with_epsilon(psim_cost_hop_us(&cs, (double)sizes[k]), send, 1e-9);
            g_assert_cmpfloat_with_epsilon(psim_cost_hop_us(&ch, (double)sizes[k]), handoff, 1e-9);
            g_assert_cmpfloat(psim_cost_hop_us(&cs, 10), ==, 1);
            g_assert_cmpfloat(psim_cost_hop_us(&cs, 1e9), ==, 5);
        }
        g_autoptr(PsimTimeline) t = db_run(&b, db);
        double link = 50 + (double)sizes[k] / 1e3; /* 1 GB/s: 1 byte per ns */
        g_assert_cmpfloat_with_epsilon(op_start(t, "G"), 10 + send, 1e-9);
        g_assert_cmpfloat_with_epsilon(xfer(t, "rA")->start, 10 + send + handoff, 1e-9);
        g_assert_cmpfloat_with_epsilon(xfer(t, "rA")->end, 10 + send + link, 1e-6);
        psim_cost_db_close(db);
        db_unlink(path);
    }
    g_rmdir(dir);
}

/* What a copy out of a device leaves it to pay (psim_cost_model_reclaim): a 128 KiB tensor of
 * P:0 copied to P:1 (the destination copies) costs, once its block is free, the node or copy of
 * P:0 that takes that block the op curve at 128 KiB, 4 + (10 - 4) / 3 = 6 us, or, for a copy
 * into P:0, the copy curve, 2 + (5 - 2) / 3 = 3 us. The simulator keeps each device's pool as
 * the executor does, the newest block of a class handed out first, and the step as it repeats
 * (the blocks one step frees are the next one's): in the first graph, A takes the block K freed
 * a step before and H the one A left (read by P:1: it pays), while K takes the one H freed
 * (nothing); a node whose output is of another class and a view (Reshape) pay nothing. A DB with
 * the op curve's three large points only (before the small sizes and the copy curve were
 * measured) gives the op curve for copies too. */
static void test_reclaim(void)
{
    PsimReclaimCurve c = {3, {65536, 262144, 1048576}, {4, 10, 16}}, none = {0};
    g_assert_cmpfloat(psim_cost_reclaim_us(&c, 0), ==, 0);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_us(&c, 32768), 2, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_us(&c, 131072), 6, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_us(&c, 1 << 24), 16, 1e-12);
    g_assert_cmpfloat(psim_cost_reclaim_us(&none, 131072), ==, 0);
    uint64_t cap;
    g_assert_cmpint(psim_pool_class(131072, &cap), ==, psim_pool_class(131008, NULL));
    g_assert_cmpint(cap, ==, 131072);
    g_assert_cmpint(psim_pool_class(131072 + 64, NULL), !=, psim_pool_class(131072, NULL));
    g_assert_cmpint(psim_pool_block_bytes(1000), ==, 1024);
    static const double op_us[PSIM_RECLAIM_N] = {1, 2, 4, 10, 16, 40, 100},
                        copy_us[PSIM_RECLAIM_N] = {0.5, 1, 2, 5, 8, 20, 50};
    g_autofree char *dir = g_dir_make_tmp("psim-reclaim-XXXXXX", NULL);
    for (int with = 0; with < 3; with++) {
        g_autofree char *path = g_strdup_printf("%s/c%d.db", dir, with);
        B b;
        b_init_by_dst(&b, 1, 5);
        b_node(&b, "A", 10, 131072, 0, NULL, NULL);
        b_node(&b, "H", 200, 131072, 0, "A", NULL); /* starts before A's copy ends */
        b_node(&b, "G", 20, 64, 0, "H", NULL);      /* after it, another class */
        PsimNode *v = psim_graph_node_add(b.g, "V", "Reshape", NULL); /* a view */
        psim_graph_node_outputs_set(b.g, v, 1);
        v->outputs[0].bytes = 131072;
        psim_graph_node_cost_set(b.g, v, "P", 1);
        psim_graph_node_input_add_ref(b.g, v, "G");
        b.dev[v->id] = 0;
        b_node(&b, "K", 20, 131072, 0, "V", NULL); /* the class: pays */
        b_xfer(&b, "A", 1, "rA", NULL, 0);
        b_node(&b, "B", 200, 1000, 1, "rA", NULL);
        b_xfer(&b, "B", 0, "rB", NULL, 0); /* a copy into P:0 after K ran */
        b_node(&b, "F", 7, 0, 0, "rB", "K");
        GError *err = NULL;
        PsimCostDb *db = psim_cost_db_open(path, &err);
        g_assert_no_error(err);
        /* with 1: both curves; 2: the op curve's 64 KiB, 256 KiB and 1 MiB points only (a DB
         * from before the small and the large sizes). */
        for (int32_t d = 0; d < 2 && with; d++)
            for (int k = with == 1 ? 0 : 2; k < (with == 1 ? PSIM_RECLAIM_N : 5); k++) {
                g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, d), psim_reclaim_kinds[k],
                                                           op_us[k], "t", &err));
                if (with == 1)
                    g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, d),
                                                               psim_reclaim_copy_kinds[k], copy_us[k], "t", &err));
            }
        {
            g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
            PsimReclaimCurve got, got_copy;
            psim_cost_model_reclaim(m, 0, &got, &got_copy);
            g_assert_cmpint(got.n, ==, with == 0 ? 0 : with == 1 ? PSIM_RECLAIM_N : 3);
            g_assert_cmpint(got_copy.n, ==, got.n);
        }
        g_autoptr(PsimTimeline) t = db_run(&b, db);
        double extra = with ? 6 : 0, copy_extra = with == 1 ? 3 : with == 2 ? 6 : 0;
        g_assert_cmpfloat_with_epsilon(op_end(t, "H") - op_start(t, "H"), 200 + extra, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "G") - op_start(t, "G"), 20, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "V") - op_start(t, "V"), 1, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t, "K") - op_start(t, "K"), 20, 1e-9);
        /* rB (1000 bytes at 1 GB/s + 5) takes its own block of the step before: nothing. */
        g_assert_cmpfloat_with_epsilon(xfer(t, "rB")->end - xfer(t, "rB")->start, 6, 1e-9);
        /* B's 128 KiB back into P:0 is P:0's next block of the class: the copy pays its curve. */
        b_init_by_dst(&b, 1, 5);
        b_node(&b, "A", 10, 131072, 0, NULL, NULL);
        b_xfer(&b, "A", 1, "rA", NULL, 0);
        b_node(&b, "B", 3, 131072, 1, "rA", NULL);
        b_xfer(&b, "B", 0, "rB", NULL, 0);
        b_node(&b, "F", 7, 131072, 0, "rB", NULL);
        g_autoptr(PsimTimeline) t2 = db_run(&b, db);
        g_assert_cmpfloat_with_epsilon(xfer(t2, "rB")->end - xfer(t2, "rB")->start, 5 + 131.072 + copy_extra,
                                       1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t2, "F") - op_start(t2, "F"), 7, 1e-9);
        /* A's block goes back to the pool when its last reader on P:0 (Y) is done, not when the
         * copy ends: X, after the copy but while Y still needs A, takes another block and pays
         * nothing; Z, after Y, pays. */
        b_init_by_dst(&b, 1, 5);
        b_node(&b, "A", 10, 131072, 0, NULL, NULL);
        b_node(&b, "H", 200, 64, 0, "A", NULL);
        b_node(&b, "X", 20, 131072, 0, "H", NULL);
        b_node(&b, "Y", 20, 64, 0, "X", "A");
        b_node(&b, "Z", 20, 131072, 0, "Y", NULL);
        b_xfer(&b, "A", 1, "rA", NULL, 0);
        b_node(&b, "B", 3, 0, 1, "rA", NULL);
        g_autoptr(PsimTimeline) t3 = db_run(&b, db);
        g_assert_cmpfloat_with_epsilon(op_end(t3, "X") - op_start(t3, "X"), 20, 1e-9);
        g_assert_cmpfloat_with_epsilon(op_end(t3, "Z") - op_start(t3, "Z"), 20 + extra, 1e-9);
        psim_cost_db_close(db);
        db_unlink(path);
    }
    g_rmdir(dir);
}

/* What is left of the reclaim once the reader has written more (psim_cost_model_reclaim_after):
 * per block size, the op curve's point at 0, then the times after 128 KiB, 512 KiB, 2 MiB and 8
 * MiB, linear between them and flat after; a fraction of the point at 0, interpolated in the
 * block's size. In a step: A's 128 KiB is copied to P:1, which then writes W's 1 MiB and W2's
 * 64 bytes before K, on P:0, takes A's block: with the curves at 1, 1/2, 1/4 and 1/4 of each
 * point, K pays 6 us (the op curve at 128 KiB) times 1/2 - 1/4 * (1,048,640 - 524,288) /
 * (2,097,152 - 524,288); without W in between (P:1 wrote nothing since), all 6 us; without the
 * curves, 6 us either way. */
static void test_reclaim_after(void)
{
    PsimReclaimAfter a = {.n = 2, .bytes = {65536, 262144}, .us0 = {4, 10}, .us = {{4, 2, 1, 1}, {10, 5, 1, 0}}};
    PsimReclaimAfter none = {0};
    g_assert_cmpfloat(psim_cost_reclaim_left(&none, 65536, 1e9), ==, 1);
    g_assert_cmpfloat(psim_cost_reclaim_left(&a, 65536, 0), ==, 1);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 65536, 65536), 1, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 65536, 327680), 0.75, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 262144, 327680), 0.75, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 4096, 1e9), 0.25, 1e-12);  /* below: the first */
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 1 << 24, 1e9), 0, 1e-12);   /* above: the last */
    g_assert_cmpfloat_with_epsilon(psim_cost_reclaim_left(&a, 163840, 1e9), 0.125, 1e-12); /* between */
    g_assert_cmpstr(psim_reclaim_after_kind(3, 1), ==, "reclaim_256KiB_after_512KiB_us");
    static const double op_us[PSIM_RECLAIM_N] = {1, 2, 4, 10, 16, 40, 100};
    static const double left[PSIM_RECLAIM_AFTER_N] = {1, 0.5, 0.25, 0.25};
    g_autofree char *dir = g_dir_make_tmp("psim-reclaim-after-XXXXXX", NULL);
    for (int with = 0; with < 2; with++)
        for (int between = 0; between < 2; between++) {
            g_autofree char *path = g_strdup_printf("%s/c%d%d.db", dir, with, between);
            GError *err = NULL;
            PsimCostDb *db = psim_cost_db_open(path, &err);
            g_assert_no_error(err);
            B b;
            b_init_by_dst(&b, 1, 5);
            b_node(&b, "A", 10, 131072, 0, NULL, NULL);
            b_xfer(&b, "A", 1, "rA", NULL, 0);
            b_node(&b, "W", 20, between ? 1048576 : 64, 1, "rA", NULL);
            b_node(&b, "W2", 5, 64, 1, "W", NULL);
            b_xfer(&b, "W2", 0, "rW2", NULL, 0);
            b_node(&b, "K", 30, 131072, 0, "rW2", NULL);
            for (int32_t d = 0; d < 2; d++)
                for (int k = 0; k < PSIM_RECLAIM_N; k++) {
                    g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, d), psim_reclaim_kinds[k],
                                                               op_us[k], "t", &err));
                    for (int j = 0; with && j < PSIM_RECLAIM_AFTER_N; j++)
                        g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, d),
                                                                   psim_reclaim_after_kind(k, j), op_us[k] * left[j],
                                                                   "t", &err));
                }
            {
                g_autoptr(PsimCostModel) m = psim_cost_model_new(b.c, db);
                PsimReclaimAfter got;
                psim_cost_model_reclaim_after(m, 1, &got);
                g_assert_cmpint(got.n, ==, with ? PSIM_RECLAIM_N : 0);
                if (with) {
                    g_assert_cmpfloat(got.us0[3], ==, 10);
                    g_assert_cmpfloat(got.us[3][1], ==, 5);
                }
            }
            g_autoptr(PsimTimeline) t = db_run(&b, db);
            double f = with && between ? 0.5 - 0.25 * (1048640.0 - 524288) / (2097152.0 - 524288) : 1;
            g_assert_cmpfloat_with_epsilon(op_end(t, "K") - op_start(t, "K"), 30 + 6 * f, 1e-9);
            psim_cost_db_close(db);
            db_unlink(path);
        }
    g_rmdir(dir);
}

/* Cold blocks (psim_cost_model_cold): the curve per MiB, linear from 0 through its points, flat
 * after the last, fresh memory (a negative distance) at the last; and in a step, what a node's
 * block costs beyond what the one-device run its time comes from paid. On one device the
 * simulator's pool and the reference are the same, so no node pays anything; split over two
 * devices, nodes take blocks written longer ago (the other device wrote in between, and copies
 * take blocks too) and the step grows. */
static void test_cold_block(void)
{
    PsimColdCurve c = {3, {1 << 20, 4 << 20, 16 << 20}, {2, 8, 20}}, none = {0};
    g_assert_cmpfloat(psim_cost_cold_us(&c, 0, 1 << 20), ==, 0);
    g_assert_cmpfloat_with_epsilon(psim_cost_cold_us(&c, 512 << 10, 1 << 20), 1, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_cold_us(&c, 2.5 * (1 << 20), 2 << 20), 10, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_cold_us(&c, 1e12, 1 << 20), 20, 1e-12);
    g_assert_cmpfloat_with_epsilon(psim_cost_cold_us(&c, -1, 512 << 10), 10, 1e-12);
    g_assert_cmpfloat(psim_cost_cold_us(&none, 1e12, 1 << 20), ==, 0);
    g_autofree char *dir = g_dir_make_tmp("psim-cold-XXXXXX", NULL);
    double step[2][2]; /* [split][with the curve] */
    for (int with = 0; with < 2; with++) {
        g_autofree char *path = g_strdup_printf("%s/c%d.db", dir, with);
        GError *err = NULL;
        PsimCostDb *db = psim_cost_db_open(path, &err);
        g_assert_no_error(err);
        for (int split = 0; split < 2; split++) {
            static const double per_mib[PSIM_COLD_N] = {0, 10, 10, 10, 10};
            B b;
            b_init_by_dst(&b, 10, 1);
            for (int32_t d = 0; d < 2 && with; d++)
                for (int k = 0; k < PSIM_COLD_N; k++)
                    g_assert_true(psim_cost_db_calibration_put(db, psim_cluster_device(b.c, d), psim_cold_kinds[k],
                                                               per_mib[k], "t", &err));
            b_node(&b, "A", 100, 1 << 20, 0, NULL, NULL);
            b_node(&b, "B", 100, 1 << 20, split, split ? "rA" : "A", NULL);
            b_node(&b, "C", 100, 1 << 20, 0, split ? "rB" : "B", NULL);
            b_node(&b, "D", 10, 64, 0, "C", NULL);
            if (split) {
                b_xfer(&b, "A", 1, "rA", NULL, 0);
                b_xfer(&b, "B", 0, "rB", NULL, 0);
            }
            g_autoptr(PsimTimeline) t = db_run(&b, db);
            if (!split) {
                g_assert_cmpfloat_with_epsilon(op_end(t, "A") - op_start(t, "A"), 100, 1e-9);
                g_assert_cmpfloat_with_epsilon(op_end(t, "B") - op_start(t, "B"), 100, 1e-9);
                g_assert_cmpfloat_with_epsilon(op_end(t, "C") - op_start(t, "C"), 100, 1e-9);
                g_assert_cmpfloat_with_epsilon(op_end(t, "D") - op_start(t, "D"), 10, 1e-9);
            }
            step[split][with] = op_end(t, "D");
        }
        psim_cost_db_close(db);
        db_unlink(path);
    }
    g_assert_cmpfloat_with_epsilon(step[0][1], step[0][0], 1e-9);
    g_assert_cmpfloat(step[1][1], >, step[1][0] + 1);
    g_rmdir(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/sim/shared-link", test_shared_link);
    g_test_add_func("/sim/idle", test_idle);
    g_test_add_func("/sim/busy-overlap", test_busy_overlap);
    g_test_add_func("/sim/idle/after-copy", test_idle_after_copy);
    g_test_add_func("/sim/reclaim", test_reclaim);
    g_test_add_func("/sim/reclaim-after", test_reclaim_after);
    g_test_add_func("/sim/cold-block", test_cold_block);
    g_test_add_func("/sim/send-handoff", test_send_handoff);
    g_test_add_func("/sim/send-handoff-sizes", test_send_handoff_sizes);
    g_test_add_func("/sim/independent-and-priority", test_independent_and_priority);
    g_test_add_func("/sim/latency-once", test_latency_once);
    g_test_add_func("/sim/by-destination", test_by_destination);
    g_test_add_func("/sim/shared-cores", test_shared_cores);
    g_test_add_func("/sim/recv-after", test_recv_after);
    g_test_add_func("/sim/memory-overlap", test_memory_overlap);
    g_test_add_func("/sim/static-dynamic", test_static_dynamic);
    g_test_add_func("/sim/deterministic", test_deterministic);
    g_test_add_func("/sim/engine", test_engine);
    g_test_add_func("/sim/resnet50-trace", test_resnet50_trace);
    return g_test_run();
}
