/* Transfers of a plan between CPU devices of one process (copies into the destination's memory,
 * Recvs held after a node, priorities on a busy link, compression), measured timelines with transfers
 * instead of Send/Recv ops, and sessions that cache pruned, placed and partitioned plans. */
#include <math.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/formats.h"
#include "placesim/placer.h"

#define N 250000 /* 1 MB float32 tensors: a copy takes long enough to keep a link busy */

/* "name=op(in1,in2)@CPU:d" lines; float32 [N] outputs; Placeholders are graph inputs. */
static PsimGraph *build(const char *const *lines)
{
    PsimGraph *g = psim_graph_new("xfer");
    int64_t dims[1] = {N};
    for (int i = 0; lines[i]; i++) {
        g_auto(GStrv) at = g_strsplit(lines[i], "@", 2);
        g_auto(GStrv) parts = g_strsplit_set(at[0], "=(),", -1);
        PsimNode *n = psim_graph_node_add(g, parts[0], parts[1], NULL);
        g_assert_nonnull(n);
        for (int k = 2; parts[k]; k++)
            if (*parts[k])
                psim_graph_node_input_add_ref(g, n, parts[k]);
        psim_graph_node_outputs_set(g, n, 1);
        psim_graph_output_set(g, n, 0, PSIM_DTYPE_FLOAT32, 1, dims);
        if (at[1])
            psim_graph_node_device_set(g, n, at[1]);
        if (!strcmp(parts[1], "Placeholder"))
            psim_graph_input_add(g, n->id);
    }
    g_autoptr(GError) err = NULL;
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    return g;
}

/* Values with all mantissa bits in use, so that cutting them to 16 bits shows. */
static PsimTensor *input(void)
{
    int64_t dims[1] = {N};
    PsimTensor *t = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, dims, NULL);
    for (int i = 0; i < N; i++)
        ((float *)t->data)[i] = 3.14159265f * (float)(i + 1) / 7.0f;
    return t;
}

static PsimPlan *plan_rounded(PsimGraph *g, PsimCluster *c, gboolean compress, PsimRounding r)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
    PsimPlaceOptions o;
    psim_place_options_init(&o);
    o.compress = compress;
    o.compress_rounding = r;
    g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlacement) pl = psim_place(ctx, "heft", &err);
    g_assert_no_error(err);
    PsimPlan *plan = psim_plan_build(ctx, pl, &err);
    g_assert_no_error(err);
    return plan;
}

static PsimPlan *plan_for(PsimGraph *g, PsimCluster *c, gboolean compress)
{
    return plan_rounded(g, c, compress, PSIM_ROUNDING_TRUNCATE);
}

static const PsimTimelineXfer *xfer_of(const PsimTimeline *t, int32_t x)
{
    for (guint k = 0; k < t->xfers->len; k++) {
        const PsimTimelineXfer *r = &g_array_index(t->xfers, PsimTimelineXfer, k);
        if (r->transfer == x)
            return r;
    }
    return NULL;
}

static const PsimTimelineOp *op_named(const PsimTimeline *t, const char *name)
{
    for (guint k = 0; k < t->ops->len; k++) {
        const PsimTimelineOp *r = &g_array_index(t->ops, PsimTimelineOp, k);
        if (!strcmp(r->name, name))
            return r;
    }
    return NULL;
}

/* Four tensors made on CPU:0 and consumed on CPU:1: four transfers on one link. */
static const char *fan_lines[] = {"x=Placeholder()@CPU:0", "y1=Neg(x)@CPU:0",
                                  "y2=Neg(x)@CPU:0",       "y3=Neg(x)@CPU:0",
                                  "y4=Neg(x)@CPU:0",       "z1=Neg(y1)@CPU:1",
                                  "z2=Neg(y2)@CPU:1",      "z3=Neg(y3)@CPU:1",
                                  "z4=Neg(y4)@CPU:1",      NULL};
static const char *fan_fetches[] = {"z1:0", "z2:0", "z3:0", "z4:0"};

static PsimTimeline *run_plan(PsimPlan *plan, PsimCluster *c, PsimTensor *x, PsimTensor **out,
                              int32_t n_out, int steps)
{
    g_autoptr(GError) err = NULL;
    const char *feeds[] = {"x:0"};
    g_autoptr(PsimPlanExec) px =
        psim_plan_exec_new(plan, c, feeds, 1, fan_fetches, n_out, FALSE, &err);
    g_assert_no_error(err);
    for (int s = 0; s < steps; s++) {
        for (int32_t i = 0; i < n_out; i++)
            g_clear_pointer(&out[i], psim_tensor_unref);
        g_assert_true(psim_plan_exec_run(px, &x, out, &err));
        g_assert_no_error(err);
    }
    PsimTimeline *t =
        psim_timeline_new("xfer", "run", plan->n_devices, (const char *const *)plan->devices);
    psim_plan_exec_timeline_add(px, t);
    return t;
}

/* Measured timelines: one op per node that is not a Send or Recv, one transfer per Send/Recv
 * pair, named and keyed as the simulator names them, a consumer never starts before its tensor
 * has arrived, and no copy overlaps a kernel of its destination (the destination copies). Outputs equal the single device's bit for bit (plain copies). */
static void test_timeline(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, FALSE);
    g_assert_cmpint(plan->n_transfers, ==, 4);
    g_autoptr(PsimTensor) x = input();
    PsimTensor *out[4] = {0};
    g_autoptr(PsimTimeline) t = run_plan(plan, c, x, out, 4, 3);
    g_assert_cmpint((int)t->ops->len, ==, 8); /* y1..y4, z1..z4 (the fed x does not run) */
    for (guint k = 0; k < t->ops->len; k++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, k);
        g_assert_cmpstr(o->op, !=, "Send");
        g_assert_cmpstr(o->op, !=, "Recv");
    }
    g_assert_cmpint((int)t->xfers->len, ==, 4);
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        const PsimTransfer *tr = &plan->transfers[i];
        const PsimTimelineXfer *r = xfer_of(t, i);
        g_assert_nonnull(r);
        g_assert_cmpint(plan->transfer_of_recv[tr->recv], ==, i);
        g_assert_cmpstr(r->name, ==, psim_graph_node(plan->graph, tr->recv)->name);
        g_assert_cmpstr(r->key, ==, tr->key);
        g_assert_cmpint(r->src, ==, 0);
        g_assert_cmpint(r->dst, ==, 1);
        g_assert_cmpuint(r->bytes, ==, (uint64_t)N * 4);
        g_assert_cmpuint(r->bytes, ==, tr->bytes);
        g_assert_cmpfloat(r->start, >=, 0);
        g_assert_cmpfloat(r->end, >=, r->start);
        g_assert_cmpfloat(r->end, <=, t->step_time_us);
        /* The producer ran before the copy started; the consumer after it arrived. */
        const PsimNode *prod = psim_graph_node(plan->graph, tr->port.node);
        g_assert_cmpfloat(op_named(t, prod->name)->end, <=, r->start);
        /* The destination's thread made the copy between its kernels: no op of the
         * destination overlaps it. */
        for (guint k = 0; k < t->ops->len; k++) {
            const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, k);
            if (o->device == r->dst)
                g_assert_true(o->end <= r->start || o->start >= r->end);
        }
        const int32_t *off, *succ;
        psim_graph_succ(plan->graph, &off, &succ);
        for (int32_t j = off[tr->recv]; j < off[tr->recv + 1]; j++) {
            const PsimTimelineOp *cons = op_named(t, psim_graph_node(plan->graph, succ[j])->name);
            g_assert_nonnull(cons);
            g_assert_cmpfloat(cons->start, >=, r->end);
        }
    }
    /* Bit for bit: -(-x) == x, every byte copied. */
    for (int i = 0; i < 4; i++) {
        g_assert_nonnull(out[i]);
        g_assert_cmpmem(out[i]->data, out[i]->nbytes, x->data, x->nbytes);
        psim_tensor_unref(out[i]);
    }
}

/* Four tensors to CPU:1 as in fan_lines, plus y7 (made from all four on CPU:0, after their
 * Sends) whose consumer z7 on CPU:1 the four transfers are held after. */
static const char *gate_lines[] = {"x=Placeholder()@CPU:0", "y1=Neg(x)@CPU:0",
                                   "y2=Neg(x)@CPU:0",       "y3=Neg(x)@CPU:0",
                                   "y4=Neg(x)@CPU:0",       "y5=Add(y1,y2)@CPU:0",
                                   "y6=Add(y5,y3)@CPU:0",   "y7=Add(y6,y4)@CPU:0",
                                   "z1=Neg(y1)@CPU:1",      "z2=Neg(y2)@CPU:1",
                                   "z3=Neg(y3)@CPU:1",      "z4=Neg(y4)@CPU:1",
                                   "z7=Neg(y7)@CPU:1",      NULL};

/* Transfers held after a node of their device wait for it, not for a time; once they are all
 * waiting, the destination copies them one at a time, lowest priority first. Nothing here
 * depends on how fast the machine is: z7 cannot finish before the four Sends are done. */
static void test_after_priority(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(gate_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, FALSE);
    g_assert_cmpint(plan->n_transfers, ==, 5);
    const PsimNode *z7 = psim_graph_node_find(plan->graph, "z7");
    const double prio[4] = {3, 1, 4, 2};
    int32_t held[4] = {-1, -1, -1, -1};
    for (int32_t i = 0; i < plan->n_transfers; i++) {
        const char *src = psim_graph_node(plan->graph, plan->transfers[i].port.node)->name;
        if (src[0] == 'y' && src[1] >= '1' && src[1] <= '4') {
            int k = src[1] - '1';
            held[k] = i;
            plan->transfers[i].after = z7->id;
            plan->transfers[i].priority = prio[k];
            /* A planned time far away is not waited for: only z7 is. */
            plan->transfers[i].earliest_start = 1e12;
        }
    }
    for (int k = 0; k < 4; k++)
        g_assert_cmpint(held[k], >=, 0);
    /* z7 first in CPU:1's order, before the nodes that wait for the held Recvs (else the plan
     * deadlocks, as psim_plan_check says). */
    int32_t d = plan->device_of[z7->id], *o = plan->order[d], at = -1;
    for (int32_t i = 0; i < plan->n_order[d]; i++)
        if (o[i] == z7->id)
            at = i;
    for (; at > 0; at--)
        o[at] = o[at - 1];
    o[0] = z7->id;
    psim_plan_check(plan, &err);
    g_assert_no_error(err);
    const char *feeds[] = {"x:0"}, *fetches[] = {"z1:0", "z2:0", "z3:0", "z4:0", "z7:0"};
    g_autoptr(PsimPlanExec) px = psim_plan_exec_new(plan, c, feeds, 1, fetches, 5, FALSE, &err);
    g_assert_no_error(err);
    g_autoptr(PsimTensor) x = input();
    PsimTensor *out[5] = {0};
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < 5; i++)
            g_clear_pointer(&out[i], psim_tensor_unref);
        g_assert_true(psim_plan_exec_run(px, &x, out, &err));
        g_assert_no_error(err);
    }
    for (int i = 0; i < 4; i++)
        g_assert_cmpmem(out[i]->data, out[i]->nbytes, x->data, x->nbytes);
    for (int i = 0; i < 5; i++)
        psim_tensor_unref(out[i]);
    g_autoptr(PsimTimeline) t = psim_timeline_new("xfer", "run", plan->n_devices,
                                                  (const char *const *)plan->devices);
    psim_plan_exec_timeline_add(px, t);
    const PsimTimelineOp *gate = op_named(t, "z7");
    g_assert_nonnull(gate);
    const PsimTimelineXfer *by_prio[4];
    for (int k = 0; k < 4; k++) {
        const PsimTimelineXfer *r = xfer_of(t, held[k]);
        g_assert_nonnull(r);
        g_assert_cmpfloat(r->start, >=, gate->end);
        by_prio[(int)prio[k] - 1] = r;
    }
    for (int k = 0; k + 1 < 4; k++)
        g_assert_cmpfloat(by_prio[k + 1]->start, >=, by_prio[k]->end);
    g_assert_cmpfloat(t->step_time_us, <, 1e6); /* the planned 1e12 us was not waited for */
}

/* A Send runs as soon as its input is ready, whatever its place in the device's order (the
 * simulator's rule): with every Send moved to the end of CPU:0's order, CPU:0 still runs each
 * Send right after its producer, before the next op of the order (checked on the order in which
 * CPU:0's executor ran its nodes, which does not depend on timing). */
static void test_eager_send(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, FALSE);
    g_assert_cmpint(plan->n_transfers, ==, 4);
    int32_t *ord = plan->order[0], n = plan->n_order[0], k = 0;
    g_autofree int32_t *sends = g_new(int32_t, n);
    int32_t n_sends = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!strcmp(psim_graph_node(plan->graph, ord[i])->op, "Send"))
            sends[n_sends++] = ord[i];
        else
            ord[k++] = ord[i];
    }
    g_assert_cmpint(n_sends, ==, 4);
    for (int32_t i = 0; i < n_sends; i++)
        ord[k++] = sends[i];
    g_autoptr(PsimTensor) x = input();
    PsimTensor *out[4] = {0};
    const char *feeds[] = {"x:0"};
    g_autoptr(PsimPlanExec) px = psim_plan_exec_new(plan, c, feeds, 1, fan_fetches, 4, FALSE, &err);
    g_assert_no_error(err);
    g_assert_true(psim_plan_exec_run(px, &x, out, &err));
    g_assert_no_error(err);
    for (int i = 0; i < 4; i++) {
        g_assert_cmpmem(out[i]->data, out[i]->nbytes, x->data, x->nbytes);
        psim_tensor_unref(out[i]);
    }
    PsimExecStats st;
    psim_executor_stats(psim_plan_exec_executor(px, 0), &st);
    /* Every Send directly follows the Neg it sends. */
    int32_t n_seen = 0;
    for (int32_t i = 0; i < st.n_run; i++) {
        const PsimNode *v = psim_graph_node(plan->graph, st.nodes[i]);
        if (strcmp(v->op, "Send"))
            continue;
        n_seen++;
        g_assert_cmpint(i, >, 0);
        g_assert_cmpint(v->inputs[0].node, ==, st.nodes[i - 1]);
    }
    g_assert_cmpint(n_seen, ==, 4);
}

/* Compression: float32 crosses as its high 16 bits (half the bytes) and arrives with the low
 * 16 bits zero. */
static void test_compression(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, TRUE);
    g_assert_cmpint(plan->n_transfers, ==, 4);
    for (int32_t i = 0; i < 4; i++) {
        g_assert_true(plan->transfers[i].compressed);
        g_assert_cmpuint(plan->transfers[i].bytes * 2, ==, plan->transfers[i].raw_bytes);
    }
    g_autoptr(PsimTensor) x = input();
    PsimTensor *out[4] = {0};
    g_autoptr(PsimTimeline) t = run_plan(plan, c, x, out, 4, 2);
    for (int32_t i = 0; i < 4; i++) {
        const PsimTimelineXfer *r = xfer_of(t, i);
        g_assert_nonnull(r);
        g_assert_cmpuint(r->bytes, ==, (uint64_t)N * 2);
        g_assert_cmpuint(r->bytes, ==, plan->transfers[i].bytes);
    }
    const uint32_t *a = x->data;
    int n_low = 0;
    for (int i = 0; i < N; i++)
        n_low += (a[i] & 0xFFFFu) != 0;
    g_assert_cmpint(n_low, >, N / 2); /* the input does use the low bits */
    for (int k = 0; k < 4; k++) {
        const uint32_t *b = out[k]->data;
        for (int i = 0; i < N; i++)
            if (b[i] != (a[i] & 0xFFFF0000u))
                g_error("output %d element %d: %08x, want %08x", k, i, b[i], a[i] & 0xFFFF0000u);
        psim_tensor_unref(out[k]);
    }
}

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The two roundings' documented bounds (plan.h, docs/exec.md) over ten million random floats
 * of every exponent, the boundaries (ties, the largest finite floats, the smallest normals),
 * subnormals, Inf and NaN: truncation's relative error < 2^-7 and never a larger magnitude;
 * RNE's <= 2^-8, ties to even, never farther from x than truncation, never Inf from a finite;
 * NaN stays NaN under RNE (and under truncation when quiet), Inf stays Inf. */
static void test_rounding_bounds(void)
{
    GRand *rnd = g_rand_new_with_seed(20);
    double worst_t = 0, worst_r = 0;
    int n_better = 0;
    for (int i = 0; i < 10000000 + 64; i++) {
        uint32_t bits = g_rand_int(rnd);
        switch (i - 10000000) {
        case 0: bits = 0x3F808000u; break; /* tie, kept lsb even: down */
        case 1: bits = 0x3F818000u; break; /* tie, kept lsb odd: up */
        case 2: bits = 0x7F7FFFFFu; break; /* largest float: past the largest finite bf16 */
        case 3: bits = 0x7F7F8000u; break;
        case 4: bits = 0xFF7FFFFFu; break;
        case 5: bits = 0x00800000u; break; /* smallest normal */
        case 6: bits = 0x007FFFFFu; break; /* largest subnormal: rounds up to a normal */
        case 7: bits = 0x00000001u; break; /* smallest subnormal */
        case 8: bits = 0x3F80FFFFu; break;
        default: break;
        }
        if ((bits & 0x7F800000u) == 0x7F800000u)
            continue; /* Inf and NaN below */
        uint32_t t = psim_rounding_apply(bits, PSIM_ROUNDING_TRUNCATE);
        uint32_t r = psim_rounding_apply(bits, PSIM_ROUNDING_RNE);
        g_assert_cmpuint(t & 0xFFFFu, ==, 0);
        g_assert_cmpuint(r & 0xFFFFu, ==, 0);
        double x = f32_of(bits), xt = f32_of(t), xr = f32_of(r);
        if (!isfinite(xr))
            g_error("%08x: RNE gave %08x, not finite", bits, r);
        double et = fabs(xt - x), er = fabs(xr - x);
        if (er > et)
            g_error("%08x: RNE error %g > truncation's %g", bits, er, et);
        if (fabs(xt) > fabs(x))
            g_error("%08x: truncation grew it to %08x", bits, t);
        n_better += er < et;
        if ((bits & 0x7F800000u) == 0) {
            /* Subnormal: absolute bounds (one bfloat16 subnormal step is 2^-133). */
            if (et >= ldexp(1, -133) || er > ldexp(1, -134))
                g_error("%08x: subnormal errors %g, %g", bits, et, er);
            continue;
        }
        double rt = et / fabs(x), rr = er / fabs(x);
        worst_t = MAX(worst_t, rt);
        worst_r = MAX(worst_r, rr);
        if (rt >= ldexp(1, -7) || rr > ldexp(1, -8))
            g_error("%08x: relative errors %g (truncate), %g (rne)", bits, rt, rr);
        /* A tie goes to the even neighbour (but for the saturated largest finite). */
        if ((bits & 0xFFFFu) == 0x8000u && (r & 0x7FFFFFFFu) != 0x7F7F0000u)
            g_assert_cmpuint((r >> 16) & 1u, ==, 0);
    }
    g_rand_free(rnd);
    /* The bounds are nearly reached: the test looked where it matters. */
    g_assert_cmpfloat(worst_t, >, ldexp(0.99, -7));
    g_assert_cmpfloat(worst_r, >, ldexp(0.99, -8));
    g_assert_cmpint(n_better, >, 4000000);
    g_assert_cmpuint(psim_rounding_apply(0x3F808000u, PSIM_ROUNDING_RNE), ==, 0x3F800000u);
    g_assert_cmpuint(psim_rounding_apply(0x3F818000u, PSIM_ROUNDING_RNE), ==, 0x3F820000u);
    g_assert_cmpuint(psim_rounding_apply(0x3F80FFFFu, PSIM_ROUNDING_RNE), ==, 0x3F810000u);
    g_assert_cmpuint(psim_rounding_apply(0x7F7FFFFFu, PSIM_ROUNDING_RNE), ==, 0x7F7F0000u);
    g_assert_cmpuint(psim_rounding_apply(0x007FFFFFu, PSIM_ROUNDING_RNE), ==, 0x00800000u);
    /* Inf, -Inf, and NaNs (quiet, negative, and one whose payload is only in the low bits). */
    static const uint32_t special[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u,
                                       0x7FA00000u};
    for (guint i = 0; i < G_N_ELEMENTS(special); i++) {
        uint32_t s = special[i], r = psim_rounding_apply(s, PSIM_ROUNDING_RNE);
        uint32_t t = psim_rounding_apply(s, PSIM_ROUNDING_TRUNCATE);
        float fs = f32_of(s), fr = f32_of(r), ft = f32_of(t);
        if (isinf(fs)) {
            g_assert_cmpuint(r, ==, s);
            g_assert_cmpuint(t, ==, s);
        } else {
            g_assert_true(isnan(fr));
            g_assert_cmpuint(r >> 31, ==, s >> 31);
            /* Truncation keeps a NaN whose payload reaches the high half (every quiet NaN). */
            g_assert_true(isnan(ft) == ((s & 0x007F0000u) != 0));
        }
    }
    /* Truncation is what it always was: the high half. */
    g_assert_cmpuint(psim_rounding_apply(0x7F800001u, PSIM_ROUNDING_TRUNCATE), ==, 0x7F800000u);
}

/* A plan that asks for RNE gets it in the executor, and records it in its JSON. */
static void test_compression_rne(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_rounded(g, c, TRUE, PSIM_ROUNDING_RNE);
    g_assert_cmpint(plan->n_transfers, ==, 4);
    for (int32_t i = 0; i < 4; i++) {
        g_assert_true(plan->transfers[i].compressed);
        g_assert_cmpint(plan->transfers[i].rounding, ==, PSIM_ROUNDING_RNE);
    }
    gsize len = 0;
    g_autofree char *json = psim_plan_to_json(plan, &len);
    g_assert_nonnull(strstr(json, "\"rounding\": \"rne\""));
    g_autoptr(PsimPlan) back = psim_plan_from_json("p.json", json, len, &err);
    g_assert_no_error(err);
    g_assert_cmpint(back->transfers[0].rounding, ==, PSIM_ROUNDING_RNE);
    g_autoptr(PsimTensor) x = input();
    PsimTensor *out[4] = {0};
    g_autoptr(PsimTimeline) t = run_plan(plan, c, x, out, 4, 1);
    g_assert_nonnull(t);
    const uint32_t *a = x->data;
    int n_up = 0;
    for (int k = 0; k < 4; k++) {
        const uint32_t *b = out[k]->data;
        for (int i = 0; i < N; i++) {
            /* z = -(-x): negation is exact, so what arrives is x rounded. */
            if (b[i] != psim_rounding_apply(a[i], PSIM_ROUNDING_RNE))
                g_error("output %d element %d: %08x, want %08x", k, i, b[i],
                        psim_rounding_apply(a[i], PSIM_ROUNDING_RNE));
            n_up += b[i] != (a[i] & 0xFFFF0000u);
        }
        psim_tensor_unref(out[k]);
    }
    g_assert_cmpint(n_up, >, N); /* about half of the elements round up */
}

/* The copy lands in the destination's memory: its worker accounts for it. */
static void test_destination_memory(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, FALSE);
    g_autoptr(PsimTensor) x = input();
    const char *feeds[] = {"x:0"};
    g_autoptr(PsimPlanExec) px = psim_plan_exec_new(plan, c, feeds, 1, fan_fetches, 4, FALSE, &err);
    g_assert_no_error(err);
    PsimTensor *out[4] = {0};
    g_assert_true(psim_plan_exec_run(px, &x, out, &err));
    g_assert_no_error(err);
    /* On CPU:1 at its peak: some received tensors and outputs; the outputs are still alive. */
    PsimExecStats st;
    psim_executor_stats(psim_plan_exec_executor(px, 1), &st);
    g_assert_cmpuint(st.peak_bytes, >=, (uint64_t)N * 4 * 5);
    for (int i = 0; i < 4; i++)
        psim_tensor_unref(out[i]);
}

/* A copy that cannot be allocated on the destination (out of its memory) fails the step with
 * its own error, naming the device, instead of hanging the Recv; the other device is not left
 * waiting either. */
static void test_destination_oom(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = build(fan_lines);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    g_autoptr(PsimPlan) plan = plan_for(g, c, FALSE);
    /* The same devices, CPU:1 with room for one received tensor and one output only. */
    for (int room = 0; room < 2; room++) {
        /* room 0: not even one received tensor fits (the copy fails); 1: the consumer's output
         * does not (a kernel fails). */
        g_autofree char *json = g_strdup_printf(
            "{\"format\": \"placesim.cluster/1\", \"devices\": ["
            "{\"name\": \"%s\", \"type\": \"CPU\", \"cores\": [0]},"
            "{\"name\": \"%s\", \"type\": \"CPU\", \"cores\": [0], \"memory_bytes\": %d}]}",
            plan->devices[0], plan->devices[1], room ? N * 4 * 2 + 1000 : N * 4 - 1000);
        g_autoptr(PsimCluster) small = psim_cluster_parse("small.json", json, strlen(json), &err);
        g_assert_no_error(err);
        g_autoptr(PsimTensor) x = input();
        const char *feeds[] = {"x:0"};
        g_autoptr(PsimPlanExec) px =
            psim_plan_exec_new(plan, small, feeds, 1, fan_fetches, 4, FALSE, &err);
        g_assert_no_error(err);
        for (int step = 0; step < 2; step++) {
            PsimTensor *out[4] = {0};
            g_assert_false(psim_plan_exec_run(px, &x, out, &err));
            g_assert_error(err, PSIM_ERROR, PSIM_ERROR_RUNTIME);
            g_test_message("%s", err->message);
            g_assert_nonnull(strstr(err->message, "out of memory"));
            g_assert_nonnull(strstr(err->message, "CPU:1"));
            if (room == 0)
                g_assert_nonnull(strstr(err->message, "cannot receive its tensor"));
            g_clear_error(&err);
            for (int i = 0; i < 4; i++)
                g_assert_null(out[i]);
        }
    }
}

/* A plan session: the first run of a signature prunes, places, partitions and instantiates;
 * cached runs do none of it; extending the graph and changing the cluster each drop the cache.
 * Outputs equal a single device's bit for bit. */
static void test_plan_session(void)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(PsimGraph) g = psim_zoo_make("cnn", &err);
    g_assert_no_error(err);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    const PsimNode *in = psim_graph_node(g, psim_graph_input(g, 0));
    g_autoptr(PsimTensor) x =
        psim_tensor_new(in->outputs[0].dtype, in->outputs[0].rank, in->outputs[0].dims, &err);
    g_assert_no_error(err);
    for (int64_t i = 0; i < x->n_elems; i++)
        ((float *)x->data)[i] = (float)i / (float)x->n_elems;
    g_autofree char *fetch = psim_port_to_string(g, psim_graph_output(g, 0));
    const char *feeds[] = {in->name}, *fetches[] = {fetch};

    g_autoptr(PsimSession) single = psim_session_new(g, c, NULL, NULL, &err);
    g_assert_no_error(err);
    PsimTensor *want = NULL;
    g_assert_true(psim_session_run(single, 1, feeds, &x, 1, fetches, &want, &err));
    g_assert_no_error(err);

    g_assert_null(psim_plan_session_new(g, c, NULL, "no-such-algo", NULL, FALSE, &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);

    g_autoptr(PsimPlanSession) s =
        psim_plan_session_new(g, c, NULL, "round-robin", NULL, FALSE, &err);
    g_assert_no_error(err);
    PsimPlanSessionStats st;
    for (int i = 0; i < 3; i++) {
        PsimTensor *got = NULL;
        g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fetches, &got, &err));
        g_assert_no_error(err);
        g_assert_cmpmem(got->data, got->nbytes, want->data, want->nbytes);
        psim_tensor_unref(got);
        psim_plan_session_stats(s, &st);
        g_assert_cmpuint(st.n_runs, ==, (uint64_t)i + 1);
        g_assert_cmpuint(st.n_prunes, ==, 1);
        g_assert_cmpuint(st.n_places, ==, 1);
        g_assert_cmpuint(st.n_partitions, ==, 1);
        g_assert_cmpuint(st.n_instantiations, ==, 1);
        g_assert_cmpuint(st.n_cache_hits, ==, (uint64_t)i);
    }
    const PsimPlan *plan = psim_plan_session_last_plan(s);
    g_assert_nonnull(plan);
    g_assert_cmpint(plan->n_devices, ==, 2);
    g_assert_cmpint(plan->n_transfers, >, 0);
    /* The plan was made from the pruned graph. */
    g_assert_cmpint(psim_graph_n_nodes(plan->graph), <=,
                    psim_graph_n_nodes(g) + 2 * plan->n_transfers);

    /* A second signature (a target) is a second entry; the first stays cached. */
    g_autofree char *target =
        g_strdup_printf("^%s", psim_graph_node(g, psim_graph_output(g, 0).node)->name);
    const char *targets[] = {target};
    g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, targets, NULL, &err));
    g_assert_no_error(err);
    PsimTensor *got = NULL;
    g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fetches, &got, &err));
    g_assert_no_error(err);
    psim_tensor_unref(got);
    psim_plan_session_stats(s, &st);
    g_assert_cmpuint(st.n_prunes, ==, 2);
    g_assert_cmpuint(st.n_cache_hits, ==, 3);

    /* Changing the cluster (a link) drops the cache. */
    PsimLink link = {.bandwidth_GBps = 4, .latency_us = 3};
    psim_cluster_link_set(c, 0, 1, link);
    g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fetches, &got, &err));
    g_assert_no_error(err);
    g_assert_cmpmem(got->data, got->nbytes, want->data, want->nbytes);
    psim_tensor_unref(got);
    psim_plan_session_stats(s, &st);
    g_assert_cmpuint(st.n_invalidations, ==, 1);
    g_assert_cmpuint(st.n_prunes, ==, 3);
    g_assert_cmpuint(st.n_places, ==, 3);
    g_assert_cmpuint(st.n_partitions, ==, 3);

    /* Extending the graph drops it too, and the new node can be fetched. */
    PsimNode *n = psim_graph_node_add(g, "extra", "Neg", NULL);
    psim_graph_node_input_add_ref(g, n, fetch);
    g_assert_true(psim_graph_finalize(g, &err));
    g_assert_no_error(err);
    const char *fx[] = {"extra:0"};
    g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fx, &got, &err));
    g_assert_no_error(err);
    g_assert_cmpint(got->n_elems, ==, want->n_elems);
    for (int64_t i = 0; i < got->n_elems; i++)
        g_assert_cmpfloat(((float *)got->data)[i], ==, -((float *)want->data)[i]);
    psim_tensor_unref(got);
    psim_plan_session_stats(s, &st);
    g_assert_cmpuint(st.n_invalidations, ==, 2);
    g_assert_cmpuint(st.n_prunes, ==, 4);
    g_assert_cmpuint(st.n_instantiations, ==, 4);
    /* And a cached run after it prunes nothing. */
    g_assert_true(psim_plan_session_run(s, 1, feeds, &x, 1, fx, &got, &err));
    g_assert_no_error(err);
    psim_tensor_unref(got);
    psim_plan_session_stats(s, &st);
    g_assert_cmpuint(st.n_prunes, ==, 4);
    g_assert_cmpuint(st.n_places, ==, 4);
    g_assert_cmpuint(st.n_partitions, ==, 4);
    g_assert_cmpuint(st.n_cache_hits, ==, 4);
    psim_tensor_unref(want);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/exec/transfer/timeline", test_timeline);
    g_test_add_func("/exec/transfer/after-priority", test_after_priority);
    g_test_add_func("/exec/transfer/compression", test_compression);
    g_test_add_func("/exec/transfer/rounding-bounds", test_rounding_bounds);
    g_test_add_func("/exec/transfer/compression-rne", test_compression_rne);
    g_test_add_func("/exec/transfer/eager-send", test_eager_send);
    g_test_add_func("/exec/transfer/destination-memory", test_destination_memory);
    g_test_add_func("/exec/transfer/destination-oom", test_destination_oom);
    g_test_add_func("/exec/plan-session", test_plan_session);
    return g_test_run();
}
