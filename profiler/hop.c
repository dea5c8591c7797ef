/* What the executor pays for a transfer between two CPU devices, measured through the executor
 * itself: a two-device plan (x -> p = Neg on A, c = Neg(p) on B; A runs a lead Neg d before p,
 * so that B waits for the tensor) run step after step, each
 * sample from the step's measured records: the Send that runs on A right after p (p's end to
 * the Send's end), the hand-off (the Send's end to the start of B's copy: the rendezvous and B
 * noticing the arrival), and the hop proper, the Send's end to c's start (the hand-off, B's
 * copy, and the dispatch of c). A bare memcpy timed alone misses all of it but the copy
 * (docs/validation.md, "The executor hop"). The simulator charges the Send to A (it holds A's
 * thread) and the hand-off to neither device (a copy that arrived while B was busy costs B only
 * the rest). */
#include <math.h>
#include <string.h>

#include "profiler/profiler-private.h"

/* Elements of the lead node d (64 KiB of float32: a few microseconds of Neg). */
#define HOP_LEAD_ELEMS 16384

/* A node of one float32 output of n elements on device dev: a fed Placeholder when input < 0,
 * else op over input's output 0. */
static PsimNode *node_f32(PsimGraph *g, const char *name, const char *op, int32_t input, int64_t n,
                          const PsimDevice *dev)
{
    PsimNode *v = psim_graph_node_add(g, name, op, NULL);
    if (input >= 0)
        psim_graph_node_input_add(g, v, (PsimPort){input, 0});
    psim_graph_node_outputs_set(g, v, 1);
    psim_graph_output_set(g, v, 0, PSIM_DTYPE_FLOAT32, 1, &n);
    psim_graph_node_device_set(g, v, dev->name);
    if (input < 0)
        psim_graph_input_add(g, v->id);
    return v;
}

/* The chain's graph, its nodes requested on devices a and b; NULL with an error. */
static PsimGraph *hop_graph(const PsimDevice *a, const PsimDevice *b, int64_t n, GError **error)
{
    g_autoptr(PsimGraph) g = psim_graph_new("hop");
    PsimNode *x = node_f32(g, "x", "Placeholder", -1, n, a);
    /* d (after a control edge, p) runs first on a, long enough that b has taken up its step and
     * waits for the tensor, as a plan's destination does: b's step is posted after a's, and
     * with a tiny p the Send could otherwise end before b had started (its hand-off then timed
     * b's start: 1 KiB rows of about 1 us one way and 0.1 us the other). */
    PsimNode *z = node_f32(g, "z", "Placeholder", -1, HOP_LEAD_ELEMS, a);
    PsimNode *d = node_f32(g, "d", "Neg", z->id, HOP_LEAD_ELEMS, a);
    PsimNode *p = node_f32(g, "p", "Neg", x->id, n, a);
    psim_graph_node_control_add(g, p, d->id);
    PsimNode *c = node_f32(g, "c", "Neg", p->id, n, b);
    psim_graph_output_add(g, (PsimPort){c->id, 0});
    if (!psim_graph_finalize(g, error))
        return NULL;
    return g_steal_pointer(&g);
}

/* The last step's parts of the hop, on the steps' common origin: the Send after p on a (p's end to
 * the Send's end), the hand-off (the Send's end to the start of b's copy) and the hop proper (the
 * Send's end to c's start). FALSE when the step's records lack any of them, or (unless
 * late_ok) when b began its step after p had started. */
typedef struct {
    double send, handoff, hop;
} HopParts;

static gboolean last_parts(PsimPlanSession *s, gboolean late_ok, HopParts *out)
{
    PsimPlanExec *px = psim_plan_session_last_exec(s);
    const PsimPlan *plan = psim_plan_session_last_plan(s);
    if (!px || !plan || plan->n_transfers != 1)
        return FALSE;
    g_autoptr(PsimTimeline) t = psim_timeline_new("hop", "run", plan->n_devices, (const char *const *)plan->devices);
    psim_plan_exec_timeline_add(px, t);
    double p_end = NAN, c_start = NAN, copy_start = NAN;
    for (guint i = 0; i < t->ops->len; i++) {
        const PsimTimelineOp *o = &g_array_index(t->ops, PsimTimelineOp, i);
        if (!strcmp(o->name, "p"))
            p_end = o->end;
        else if (!strcmp(o->name, "c"))
            c_start = o->start;
    }
    if (t->xfers->len == 1)
        copy_start = g_array_index(t->xfers, PsimTimelineXfer, 0).start;
    /* The Send is not in the timeline (it is the transfer's half): its end from its device's
     * records, shifted to the common origin by p's end, which both have. */
    const PsimTransfer *tr = &plan->transfers[0];
    PsimExecStats st;
    psim_executor_stats(psim_plan_exec_executor(px, tr->src), &st);
    double p_start_here = NAN, p_end_here = NAN, send_end_here = NAN;
    for (int32_t k = 0; k < st.n_run; k++) {
        if (st.nodes[k] == tr->send)
            send_end_here = st.end[k];
        else if (st.nodes[k] == tr->port.node) {
            p_start_here = st.start[k];
            p_end_here = st.end[k];
        }
    }
    /* A step whose destination began after the producer (the lead node too short on a loaded
     * host) timed the destination's start, not a hop: it is not a sample. */
    PsimExecStats sb;
    psim_executor_stats(psim_plan_exec_executor(px, tr->dst), &sb);
    if (!late_ok && !(sb.step_start_us <= st.step_start_us + p_start_here))
        return FALSE;
    double send_end = send_end_here - p_end_here + p_end;
    *out = (HopParts){.send = send_end - p_end, .handoff = copy_start - send_end, .hop = c_start - send_end};
    return isfinite(out->send) && isfinite(out->handoff) && isfinite(out->hop);
}

gboolean psim__profiler_hop(PsimProfiler *p, int32_t a, int32_t b, uint64_t bytes, PsimSampler *sm, GArray *sends,
                            GArray *handoffs, GError **error)
{
    const PsimDevice *da = psim_cluster_device(p->cluster, a), *db = psim_cluster_device(p->cluster, b);
    int64_t n = (int64_t)MAX(bytes / 4, 1);
    g_autoptr(PsimGraph) g = hop_graph(da, db, n, error);
    if (!g)
        return FALSE;
    g_autoptr(PsimPlanSession) s = psim_plan_session_new(g, p->cluster, NULL, "heft", NULL, FALSE, error);
    if (!s)
        return FALSE;
    int64_t nz = HOP_LEAD_ELEMS;
    g_autoptr(PsimTensor) x = psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &n, error);
    g_autoptr(PsimTensor) z = x ? psim_tensor_new(PSIM_DTYPE_FLOAT32, 1, &nz, error) : NULL;
    if (!z)
        return FALSE;
    const char *feeds[] = {"x", "z"}, *fetches[] = {"c:0"};
    PsimTensor *fed[] = {x, z};
    gboolean ok = TRUE;
    int n_late = 0;
    /* Three unrecorded steps: the plan is made and the destination's pool holds its block. */
    for (int step = -3; ok; step++) {
        PsimTensor *y = NULL;
        ok = psim_plan_session_run(s, 2, feeds, fed, 1, fetches, &y, error);
        psim_tensor_unref(y);
        if (!ok)
            break;
        const PsimPlan *plan = psim_plan_session_last_plan(s);
        if (plan && plan->n_transfers != 1) {
            g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                        "hop %s -> %s: the plan has %d transfers, not one", da->short_name, db->short_name,
                        plan->n_transfers);
            ok = FALSE;
            break;
        }
        HopParts hp;
        /* (After 1000 steps in a row without one, a late destination's sample is taken.) */
        if (step >= 0 && last_parts(s, n_late >= 1000, &hp)) {
            n_late = 0;
            g_array_append_val(sends, hp.send);
            g_array_append_val(handoffs, hp.handoff);
            if (!psim__sampler_add(sm, MAX(hp.hop, 0.0)))
                break;
        } else if (step >= 0) {
            n_late++;
        }
    }
    return ok;
}
