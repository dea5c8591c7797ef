/* Partitioning tests checked by hand: one Recv per (tensor, destination device), n - 1 pairs on
 * an alternating chain, control edges, colocation refusal, compression, the recv schedule, and
 * plan JSON round trips. Devices are forced with assigned_device. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "placesim/formats.h"

typedef struct {
    PsimGraph *g;
    PsimCluster *c;
    PsimCostModel *m;
    PsimPlaceCtx *ctx;
    PsimPlacement *p;
    PsimPlan *plan;
} T;

static PsimNode *node(PsimGraph *g, const char *name, double us, uint64_t bytes, const char *dev)
{
    PsimNode *n = psim_graph_node_add(g, name, "Task", NULL);
    psim_graph_node_outputs_set(g, n, 1);
    n->outputs[0].bytes = bytes;
    psim_graph_node_cost_set(g, n, "*", us);
    if (dev)
        psim_graph_node_assigned_set(g, n, dev);
    return n;
}

/* Places g (finalized here) on n_dev devices P:i with 1 GB/s links and 2 us latency. */
static void t_run(T *t, PsimGraph *g, int32_t n_dev, gboolean compress)
{
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(g, &err));
    t->g = g;
    t->c = psim_cluster_new();
    for (int32_t i = 0; i < n_dev; i++) {
        g_autofree char *nm = g_strdup_printf("P:%d", i);
        psim_cluster_device_add(t->c, nm, "P", NULL);
    }
    psim_cluster_default_link_set(t->c, (PsimLink){.bandwidth_GBps = 1, .latency_us = 2, .independent = TRUE});
    t->m = psim_cost_model_new(t->c, NULL);
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    o.compress = compress;
    t->ctx = psim_place_ctx_new(g, t->m, &o, &err);
    g_assert_no_error(err);
    t->p = psim_place(t->ctx, "heft", &err);
    g_assert_no_error(err);
    t->plan = psim_plan_build(t->ctx, t->p, &err);
    g_assert_no_error(err);
}

static void t_free(T *t)
{
    psim_plan_free(t->plan);
    psim_placement_free(t->p);
    psim_place_ctx_free(t->ctx);
    psim_cost_model_free(t->m);
    psim_cluster_free(t->c);
    psim_graph_free(t->g);
}

static const PsimNode *pnode(const T *t, const char *name)
{
    const PsimNode *n = psim_graph_node_find(t->plan->graph, name);
    g_assert_nonnull(n);
    return n;
}

static int32_t count_op(const T *t, const char *op)
{
    int32_t k = 0;
    for (int32_t v = 0; v < psim_graph_n_nodes(t->plan->graph); v++)
        k += !strcmp(psim_graph_node(t->plan->graph, v)->op, op);
    return k;
}

/* a on P:0 feeds b, c, d on P:1: one Send/Recv pair, shared by the three consumers. */
static void test_one_recv(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("fanout");
    node(g, "a", 5, 4000, "P:0");
    const char *cons[] = {"b", "c", "d"};
    for (int i = 0; i < 3; i++)
        psim_graph_node_input_add_ref(g, node(g, cons[i], 5, 10, "P:1"), "a:0");
    t_run(&t, g, 2, FALSE);
    g_assert_cmpint(t.plan->n_transfers, ==, 1);
    g_assert_cmpint(count_op(&t, "Send"), ==, 1);
    g_assert_cmpint(count_op(&t, "Recv"), ==, 1);
    const PsimTransfer *x = &t.plan->transfers[0];
    g_assert_cmpint(x->src, ==, 0);
    g_assert_cmpint(x->dst, ==, 1);
    g_assert_cmpuint(x->bytes, ==, 4000);
    g_assert_cmpint(t.plan->device_of[x->send], ==, 0);
    g_assert_cmpint(t.plan->device_of[x->recv], ==, 1);
    g_assert_cmpint(t.plan->transfer_of_recv[x->recv], ==, 0);
    for (int i = 0; i < 3; i++) {
        const PsimNode *n = pnode(&t, cons[i]);
        g_assert_cmpint(n->inputs[0].node, ==, x->recv);
    }
    g_assert_cmpstr(x->key, ==, "/job:localhost/replica:0/task:0/device:P:0;"
                                "/job:localhost/replica:0/task:0/device:P:1;a:0");
    /* a (5) + transfer (2 + 4000 B at 1 GB/s = 4 us) + one consumer (5) each, in a row. */
    g_assert_cmpfloat(t.plan->makespan_us, ==, 5 + 6 + 15);
    t_free(&t);
}

/* A chain of n nodes alternating between two devices: n - 1 pairs. */
static void test_alternating_chain(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("chain");
    const int n = 7;
    for (int i = 0; i < n; i++) {
        g_autofree char *nm = g_strdup_printf("n%d", i), *prev = g_strdup_printf("n%d", i - 1);
        PsimNode *v = node(g, nm, 1, 1000, i % 2 ? "P:1" : "P:0");
        if (i)
            psim_graph_node_input_add_ref(g, v, prev);
    }
    t_run(&t, g, 2, FALSE);
    g_assert_cmpint(t.plan->n_transfers, ==, n - 1);
    g_assert_cmpint(count_op(&t, "Send"), ==, n - 1);
    g_assert_cmpint(count_op(&t, "Recv"), ==, n - 1);
    /* n computations of 1 us and n - 1 transfers of 2 + 1 us. */
    g_assert_cmpfloat(t.plan->makespan_us, ==, n * 1 + (n - 1) * 3);
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE};
    PsimSimResult r = {0};
    g_assert_true(psim_sim_run(t.plan, t.m, &so, &r, NULL, NULL));
    g_assert_cmpfloat(r.step_time_us, ==, t.plan->makespan_us);
    psim_sim_result_clear(&r);
    t_free(&t);
}

/* A control edge across devices: a zero-byte pair; the consumer waits on the Recv. */
static void test_control_edge(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("control");
    node(g, "a", 3, 100, "P:0");
    PsimNode *b = node(g, "b", 3, 100, "P:1");
    psim_graph_node_input_add_ref(g, b, "^a");
    t_run(&t, g, 2, FALSE);
    g_assert_cmpint(t.plan->n_transfers, ==, 1);
    const PsimTransfer *x = &t.plan->transfers[0];
    g_assert_true(x->control);
    g_assert_cmpuint(x->bytes, ==, 0);
    const PsimNode *pb = pnode(&t, "b");
    g_assert_cmpint(pb->n_controls, ==, 1);
    g_assert_cmpint(pb->controls[0], ==, x->recv);
    g_assert_cmpint(pb->n_inputs, ==, 0);
    g_assert_nonnull(strstr(x->key, ";^a"));
    g_assert_cmpfloat(t.plan->makespan_us, ==, 3 + 2 + 3); /* latency only */
    t_free(&t);
}

/* A request that splits a colocation group is refused, naming the node and the device. */
static void test_colocation_refused(void)
{
    PsimGraph *g = psim_graph_new("coloc");
    node(g, "v", 1, 8, NULL);
    psim_graph_node_device_set(g, psim_graph_node_find(g, "v"), "P:0");
    PsimNode *r = node(g, "r", 1, 8, NULL);
    psim_graph_node_input_add_ref(g, r, "v");
    psim_graph_node_attr_set_string(g, r, "_class", "loc:@v");
    psim_graph_node_device_set(g, r, "P:1");
    g_assert_true(psim_graph_finalize(g, NULL));
    g_autoptr(PsimCluster) c = psim_cluster_new();
    psim_cluster_device_add(c, "P:0", "P", NULL);
    psim_cluster_device_add(c, "P:1", "P", NULL);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    g_autoptr(GError) err = NULL;
    g_assert_null(psim_place_ctx_new(g, m, NULL, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "node 'r'"));
    g_assert_nonnull(strstr(err->message, "colocated with 'v'"));
    g_assert_nonnull(strstr(err->message, "device:P:"));
    psim_graph_free(g);
}

/* Compression: a float32 tensor of 1024 bytes crosses as 512. */
static void test_compression(void)
{
    for (int pass = 0; pass < 2; pass++) {
        T t = {0};
        PsimGraph *g = psim_graph_new("compress");
        PsimNode *a = node(g, "a", 1, 0, "P:0");
        int64_t dims[] = {256};
        psim_graph_output_set(g, a, 0, PSIM_DTYPE_FLOAT32, 1, dims);
        PsimNode *i8 = node(g, "i", 1, 0, "P:0");
        psim_graph_output_set(g, i8, 0, PSIM_DTYPE_INT32, 1, dims);
        PsimNode *b = node(g, "b", 1, 4, "P:1");
        psim_graph_node_input_add_ref(g, b, "a:0");
        psim_graph_node_input_add_ref(g, b, "i:0");
        t_run(&t, g, 2, pass == 1);
        g_assert_cmpint(t.plan->n_transfers, ==, 2);
        for (int32_t k = 0; k < 2; k++) {
            const PsimTransfer *x = &t.plan->transfers[k];
            g_assert_cmpuint(x->raw_bytes, ==, 1024);
            gboolean f32 = x->port.node == a->id;
            g_assert_cmpint(x->compressed, ==, pass == 1 && f32);
            g_assert_cmpuint(x->bytes, ==, pass == 1 && f32 ? 512 : 1024);
        }
        t_free(&t);
    }
}

/* s (P:0) feeds long (P:1, 100 us) and side (P:0); join (P:1) waits for both, so side -> join
 * has slack. With `pre`, P:1 first runs a 40 us node that long waits for. */
static PsimGraph *slack_graph(gboolean pre)
{
    PsimGraph *g = psim_graph_new(pre ? "after" : "slack");
    node(g, "s", 1, 1000, "P:0");
    if (pre)
        node(g, "pre", 40, 10, "P:1");
    PsimNode *longp = node(g, "long", 100, 1000, "P:1");
    psim_graph_node_input_add_ref(g, longp, "s");
    if (pre)
        psim_graph_node_input_add_ref(g, longp, "^pre");
    PsimNode *side = node(g, "side", 1, 1000, "P:0");
    psim_graph_node_input_add_ref(g, side, "s");
    PsimNode *join = node(g, "join", 1, 10, "P:1");
    psim_graph_node_input_add_ref(g, join, "long");
    psim_graph_node_input_add_ref(g, join, "side");
    return g;
}

/* Recv scheduling: a transfer off the critical path is held back (earliest start after its
 * producer's end, priority = its slack > 0), one on it is not held at all, and the makespan
 * does not change. */
static void test_recv_schedule(void)
{
    T t = {0};
    t_run(&t, slack_graph(FALSE), 2, FALSE);
    /* s -> long crosses (critical), side -> join crosses (slack ~ 97 us). */
    g_assert_cmpint(t.plan->n_transfers, ==, 2);
    const PsimNode *nside = pnode(&t, "side");
    double crit_prio = -1, side_prio = -1;
    for (int32_t k = 0; k < 2; k++) {
        const PsimTransfer *x = &t.plan->transfers[k];
        if (x->port.node == nside->id) {
            side_prio = x->priority;
            g_assert_cmpfloat(x->earliest_start, >, 2);          /* side ends at 2 */
            /* ALAP: join starts at 1 + 3 + 100 = 104; the transfer takes 3 us; margin 3 us. */
            g_assert_cmpfloat(x->earliest_start, ==, 104 - 3 - 3);
            /* No node of P:1 finishes by 98 (long runs until 104): nothing to wait for, so
             * the plan's start is the simulator's, when side's Send is done. */
            g_assert_cmpint(x->after, ==, -1);
            g_assert_cmpfloat(t.plan->planned_start[x->recv], ==, 2);
        } else {
            crit_prio = x->priority;
            /* No slack: not held to its planned start (1), it goes as soon as s is done. */
            g_assert_cmpfloat(x->earliest_start, ==, 0);
            g_assert_cmpint(x->after, ==, -1);
            g_assert_cmpfloat(t.plan->planned_start[x->recv], ==, 1);
        }
    }
    g_assert_cmpfloat(crit_prio, ==, 0);
    g_assert_cmpfloat(side_prio, >, 90);
    g_assert_cmpfloat(t.plan->makespan_us, ==, 105);
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE};
    PsimSimResult r = {0};
    g_assert_true(psim_sim_run(t.plan, t.m, &so, &r, NULL, NULL));
    g_assert_cmpfloat(r.step_time_us, ==, 105);
    psim_sim_result_clear(&r);
    t_free(&t);
}

/* A held Recv waits for a node of its device: the one that, in the held schedule, finishes last
 * by the planned release time. Here P:1 runs `pre` (0..40) then `long` (from s's arrival) and
 * `join`; side -> join is released at about 136, when only `pre` has finished: it waits for
 * `pre`, and the simulator starts it when `pre` ends, not at its planned time. */
static void test_recv_after(void)
{
    T t = {0};
    t_run(&t, slack_graph(TRUE), 2, FALSE);
    const PsimNode *nside = pnode(&t, "side"), *npre = pnode(&t, "pre");
    const PsimTransfer *held = NULL;
    for (int32_t k = 0; k < t.plan->n_transfers; k++)
        if (t.plan->transfers[k].port.node == nside->id)
            held = &t.plan->transfers[k];
    g_assert_nonnull(held);
    g_assert_cmpfloat(held->earliest_start, >, 100);
    g_assert_cmpint(held->after, ==, npre->id);
    PsimSimOptions so = {.order = PSIM_ORDER_STATIC};
    PsimSimResult r = {0};
    g_autoptr(PsimTimeline) tl = NULL;
    g_assert_true(psim_sim_run(t.plan, t.m, &so, &r, &tl, NULL));
    double pre_end = -1, xfer_start = -1;
    for (guint k = 0; k < tl->ops->len; k++) {
        const PsimTimelineOp *o = &g_array_index(tl->ops, PsimTimelineOp, k);
        if (!strcmp(o->name, "pre"))
            pre_end = o->end;
    }
    for (guint k = 0; k < tl->xfers->len; k++) {
        const PsimTimelineXfer *x = &g_array_index(tl->xfers, PsimTimelineXfer, k);
        if (x->transfer == (int32_t)(held - t.plan->transfers))
            xfer_start = x->start;
    }
    g_assert_cmpfloat(pre_end, ==, 40);
    g_assert_cmpfloat(xfer_start, ==, pre_end);
    g_assert_cmpfloat(r.step_time_us, ==, t.plan->makespan_us);
    psim_sim_result_clear(&r);
    t_free(&t);
}

/* save -> load -> save is byte-identical, and the loaded plan has the same contents. */
static void test_json_round_trip(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("rt");
    node(g, "a", 5, 4000, "P:0");
    PsimNode *b = node(g, "b", 5, 40, "P:1");
    psim_graph_node_input_add_ref(g, b, "a:0");
    PsimNode *c = node(g, "c", 5, 40, "P:2");
    psim_graph_node_input_add_ref(g, c, "a:0");
    psim_graph_node_input_add_ref(g, c, "^b");
    t_run(&t, g, 3, FALSE);
    gsize l1, l2;
    g_autofree char *j1 = psim_plan_to_json(t.plan, &l1);
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimPlan) q = psim_plan_from_json("rt.json", j1, l1, &err);
    g_assert_no_error(err);
    g_autofree char *j2 = psim_plan_to_json(q, &l2);
    g_assert_cmpstr(j1, ==, j2);
    g_assert_cmpint(q->n_transfers, ==, t.plan->n_transfers);
    g_assert_cmpint(q->n_transfers, ==, 3);
    g_assert_cmpfloat(q->makespan_us, ==, t.plan->makespan_us);
    for (int32_t k = 0; k < q->n_transfers; k++) {
        g_assert_cmpint(q->transfers[k].recv, ==, t.plan->transfers[k].recv);
        g_assert_cmpstr(q->transfers[k].key, ==, t.plan->transfers[k].key);
        g_assert_cmpfloat(q->transfers[k].earliest_start, ==, t.plan->transfers[k].earliest_start);
        g_assert_cmpint(q->transfers[k].after, ==, t.plan->transfers[k].after);
    }
    /* The cluster the plan was made for travels with it, compact, and reads back as a cluster. */
    t.plan->cluster_json = psim_cluster_to_json(t.c);
    gsize l3, l4;
    g_autofree char *j3 = psim_plan_to_json(t.plan, &l3);
    g_assert_nonnull(strstr(j3, ",\n \"cluster\": {\"format\":\"placesim.cluster/1\""));
    g_autoptr(PsimPlan) q3 = psim_plan_from_json("rt.json", j3, l3, &err);
    g_assert_no_error(err);
    g_autofree char *j4 = psim_plan_to_json(q3, &l4);
    g_assert_cmpstr(j3, ==, j4);
    g_autoptr(PsimCluster) back = psim_cluster_parse("rt.json", q3->cluster_json, strlen(q3->cluster_json), &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cluster_n_devices(back), ==, 3);
    g_assert_cmpstr(psim_cluster_device(back, 2)->name, ==, psim_cluster_device(t.c, 2)->name);
    const char *cl = strstr(j3, "\"cluster\": "), *ge = strstr(j3, ",\n \"graph\"");
    g_assert_true(cl && ge && cl < ge);
    g_autofree char *head = g_strndup(j3, (gsize)(cl - j3));
    g_autofree char *notobj = g_strconcat(head, "\"cluster\": 7", ge, NULL);
    g_autoptr(PsimPlan) r0 = psim_plan_from_json("c.json", notobj, strlen(notobj), &err);
    g_assert_null(r0);
    g_assert_nonnull(strstr(err->message, "field 'cluster'"));
    g_clear_error(&err);
    /* Damaged files are errors, not crashes. */
    g_autofree char *bad = g_strdup(j1);
    char *at = strstr(bad, "\"placement\": [0");
    g_assert_nonnull(at);
    at[14] = '9';
    g_autoptr(PsimPlan) r = psim_plan_from_json("bad.json", bad, strlen(bad), &err);
    g_assert_null(r);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "bad.json"));
    g_clear_error(&err);
    g_autoptr(PsimPlan) r2 = psim_plan_from_json("cut.json", j1, l1 / 2, &err);
    g_assert_null(r2);
    g_assert_nonnull(err);
    t_free(&t);
}

/* Wrong-typed plan fields are errors naming the file and the field, never a Json-CRITICAL (the
 * suite runs with fatal criticals) nor a silent default. */
static void test_json_typed(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("typed");
    node(g, "a", 5, 4000, "P:0");
    PsimNode *b = node(g, "b", 5, 40, "P:1");
    psim_graph_node_input_add_ref(g, b, "a:0");
    t_run(&t, g, 2, FALSE);
    gsize len;
    g_autofree char *good = psim_plan_to_json(t.plan, &len);
    static const char *const cases[][3] = {
        {"\"compress\": false", "\"compress\": \"no\"", "'compress'"},
        {"\"rounding\": \"truncate\"", "\"rounding\": \"up\"", "'rounding'"},
        {"\"placement\": \\[", "\"placement\": [\"many\", ", "'placement'"},
        {"\"placement\": \\[[0-9]+", "\"placement\": [4611686018427387905", "placement[0]"},
        {"\"seq\": \\[[0-9]+", "\"seq\": [1", "seq[1]"},
        {"\"algo\": \"[^\"]*\"", "\"algo\": []", "'algo'"},
        {"\"start\": \\[", "\"start\": [{}, ", "'start'"},
        {"\"count\": [0-9]+", "\"count\": 7", "'transfers'"},
        {"\"after\": \\[", "\"after\": [\"x\", ", "'transfers.after'"},
        {"\"graph\": \\{\"format\": \"placesim.graph/1\"", "\"graph\": {\"format\": 5", "'format'"},
        {"\"graph\": \\{\"format\": \"placesim.graph/1\"", "\"graph\": {\"source\": \"x\"", "'graph'"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GRegex) re = g_regex_new(cases[i][0], 0, 0, NULL);
        g_autofree char *bad = g_regex_replace(re, good, -1, 0, cases[i][1], 0, NULL);
        g_assert_cmpstr(bad, !=, good);
        g_autoptr(GError) err = NULL;
        g_autoptr(PsimPlan) r = psim_plan_from_json("typed.json", bad, strlen(bad), &err);
        if (r)
            g_error("case %zu was read: %s", i, bad);
        g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
        if (!g_str_has_prefix(err->message, "typed.json: ") || !strstr(err->message, cases[i][2]))
            g_error("case %zu: '%s' lacks the file or '%s'", i, err->message, cases[i][2]);
    }
    t_free(&t);
}

/* A weight (free, no inputs) and the free node shaping it follow their consumer: HEFT alone
 * would put them on the first idle device and send them across. */
static void test_sources_follow(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("weights");
    node(g, "shape", 0, 8, NULL);
    PsimNode *w = node(g, "w", 0, 4000000, NULL);
    psim_graph_node_input_add_ref(g, w, "shape");
    node(g, "x", 5, 1000, "P:0");
    PsimNode *y = node(g, "y", 50, 1000, "P:1");
    psim_graph_node_input_add_ref(g, y, "w");
    t_run(&t, g, 2, FALSE);
    g_assert_cmpint(t.p->device_of[psim_graph_node_find(g, "w")->id], ==, 1);
    g_assert_cmpint(t.p->device_of[psim_graph_node_find(g, "shape")->id], ==, 1);
    g_assert_cmpint(t.plan->n_transfers, ==, 0);
    g_assert_cmpfloat(t.plan->makespan_us, ==, 50);
    t_free(&t);
}


/* A constant generator read on two devices: the other device gets a copy of it, no Send/Recv
 * pair, its memory resident there; the placement's own step and the plan's agree. */
static void test_constant_copies(void)
{
    T t = {0};
    PsimGraph *g = psim_graph_new("copies");
    PsimNode *w = psim_graph_node_add(g, "w", "Const", NULL);
    psim_graph_node_outputs_set(g, w, 1);
    w->outputs[0].bytes = 4000000;
    psim_graph_node_cost_set(g, w, "*", 0);
    psim_graph_node_assigned_set(g, w, "P:0");
    PsimNode *x = node(g, "x", 10, 1000, "P:0");
    psim_graph_node_input_add_ref(g, x, "w");
    PsimNode *y = node(g, "y", 50, 1000, "P:1");
    psim_graph_node_input_add_ref(g, y, "w");
    PsimNode *z = node(g, "z", 5, 1000, "P:1");
    psim_graph_node_input_add_ref(g, z, "w");
    t_run(&t, g, 2, FALSE);
    g_assert_cmpint(t.plan->n_transfers, ==, 0);
    g_assert_cmpint(count_op(&t, "Send"), ==, 0);
    g_assert_cmpint(count_op(&t, "Const"), ==, 2); /* w and one copy for both readers on P:1 */
    const PsimNode *c = pnode(&t, "w/_const_0_on_P_1");
    g_assert_cmpint(t.plan->device_of[c->id], ==, 1);
    g_assert_cmpint(pnode(&t, "y")->inputs[0].node, ==, c->id);
    g_assert_cmpint(pnode(&t, "z")->inputs[0].node, ==, c->id);
    g_assert_cmpint(pnode(&t, "x")->inputs[0].node, ==, psim_graph_node_find(g, "w")->id);
    g_assert_cmpuint(c->outputs[0].bytes, ==, 4000000);
    /* No transfer: P:1 runs y and z from the start. */
    g_assert_cmpfloat(t.plan->makespan_us, ==, 55);
    g_assert_cmpfloat(t.p->makespan_us, ==, t.plan->makespan_us);
    PsimSimOptions so = {0};
    PsimSimResult r;
    g_assert_true(psim_sim_run(t.plan, t.m, &so, &r, NULL, NULL));
    g_assert_cmpfloat(r.step_time_us, ==, 55);
    g_assert_cmpuint(r.peak_memory[0], >=, 4000000);
    g_assert_cmpuint(r.peak_memory[1], >=, 4000000);
    uint64_t r1_peak = r.peak_memory[1];
    psim_sim_result_clear(&r);
    /* The placement's own step counts the copy's memory on P:1 too. */
    g_autoptr(GError) err = NULL;
    g_autofree double *table = psim_cost_table(t.m, g, &err);
    g_assert_no_error(err);
    int32_t n = psim_graph_n_nodes(g);
    g_autofree double *cost = g_new(double, n);
    for (int32_t v = 0; v < n; v++)
        cost[v] = table[(size_t)v * 2 + t.p->device_of[v]];
    PsimSimResult pr;
    PsimSimPlacement pl = {.device_of = t.p->device_of, .seq = t.p->seq, .cost = cost, .result = &pr};
    g_assert_cmpfloat(psim_sim_placement_step(g, t.m, &pl, &err), ==, 55);
    g_assert_no_error(err);
    g_assert_cmpuint(pr.peak_memory[1], ==, r1_peak);
    psim_sim_result_clear(&pr);
    t_free(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/placer/partition/one-recv-per-tensor", test_one_recv);
    g_test_add_func("/placer/partition/alternating-chain", test_alternating_chain);
    g_test_add_func("/placer/partition/control-edge", test_control_edge);
    g_test_add_func("/placer/partition/colocation-refused", test_colocation_refused);
    g_test_add_func("/placer/partition/compression", test_compression);
    g_test_add_func("/placer/partition/recv-schedule", test_recv_schedule);
    g_test_add_func("/placer/partition/recv-after", test_recv_after);
    g_test_add_func("/placer/partition/json-round-trip", test_json_round_trip);
    g_test_add_func("/placer/partition/json-typed", test_json_typed);
    g_test_add_func("/placer/partition/sources-follow", test_sources_follow);
    g_test_add_func("/placer/partition/constant-copies", test_constant_copies);
    return g_test_run();
}
