/* The plan builder gives the same plans as before a rewrite: for the built-in models and
 * generated task graphs, on shared and independent links, with every algorithm, a SHA-256 of
 * everything a plan holds (its graph node by node, device per node, orders, transfers with their
 * gates and priorities, planned starts and makespan as exact hex floats) is compared with
 * tests/data/plan-golden.txt. That file was written by this test (`test-plan-golden --write
 * FILE`) with the plan builder of main at d6d99c3, before partitioning was rewritten over flat
 * arrays (issue 15), and written again at the commit that gave constant generators a copy on
 * each device that reads them instead of a Send/Recv pair (only the transformer's 24 plans
 * changed: its shape constants are read on several devices); a plan that differs in any bit
 * fails, naming the case. */
#include <stdio.h>
#include <string.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "gen-dag.h"
#include "test-util.h"

static void put(GChecksum *h, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void put(GChecksum *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *s = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_checksum_update(h, (const guchar *)s, (gssize)strlen(s));
}

static void put_attr(GChecksum *h, const PsimAttr *a)
{
    put(h, " %s/%d/%d=", a->name, (int)a->type, a->n);
    switch (a->type) {
    case PSIM_ATTR_INT: put(h, "%" G_GINT64_FORMAT, a->v.i); break;
    case PSIM_ATTR_FLOAT: put(h, "%a", a->v.f); break;
    case PSIM_ATTR_STRING: put(h, "%s", a->v.s ? a->v.s : "(null)"); break;
    case PSIM_ATTR_BOOL: put(h, "%d", (int)a->v.b); break;
    case PSIM_ATTR_DTYPE: put(h, "%d", (int)a->v.dt); break;
    case PSIM_ATTR_SHAPE:
        for (int32_t i = 0; i < a->v.shape.rank; i++)
            put(h, "%" G_GINT64_FORMAT ",", a->v.shape.dims[i]);
        break;
    case PSIM_ATTR_INTS:
        for (int32_t i = 0; i < a->n; i++)
            put(h, "%" G_GINT64_FORMAT ",", a->v.ints[i]);
        break;
    case PSIM_ATTR_FLOATS:
        for (int32_t i = 0; i < a->n; i++)
            put(h, "%a,", a->v.floats[i]);
        break;
    case PSIM_ATTR_STRINGS:
        for (int32_t i = 0; i < a->n; i++)
            put(h, "%s,", a->v.strs[i]);
        break;
    default: put(h, "?"); break; /* tensors: their presence and count above */
    }
}

/* The SHA-256 of plan, as hex. */
static char *plan_digest(const PsimPlan *p)
{
    GChecksum *h = g_checksum_new(G_CHECKSUM_SHA256);
    const PsimGraph *g = p->graph;
    int32_t N = psim_graph_n_nodes(g);
    put(h, "%s|%d|%d|%a\n", p->algo, p->n_devices, N, p->makespan_us);
    for (int32_t d = 0; d < p->n_devices; d++)
        put(h, "dev %s\n", p->devices[d]);
    for (int32_t v = 0; v < N; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        put(h, "n %d %s %s %s %s %u dev=%d start=%a prio=%a tor=%d in", v, n->name, n->op,
            n->assigned_device ? n->assigned_device : "-", n->device ? n->device : "-", n->flags,
            p->device_of[v], p->planned_start[v], p->priority[v], p->transfer_of_recv[v]);
        for (int32_t k = 0; k < n->n_inputs; k++)
            put(h, " %d:%d", n->inputs[k].node, n->inputs[k].index);
        put(h, " ctl");
        for (int32_t k = 0; k < n->n_controls; k++)
            put(h, " %d", n->controls[k]);
        put(h, " out");
        for (int32_t k = 0; k < n->n_outputs; k++) {
            const PsimOutput *o = &n->outputs[k];
            put(h, " %d/%d/%" G_GUINT64_FORMAT "[", (int)o->dtype, o->rank, o->bytes);
            for (int32_t i = 0; i < o->rank; i++)
                put(h, "%" G_GINT64_FORMAT ",", o->dims[i]);
            put(h, "]");
        }
        put(h, " attrs");
        for (int32_t k = 0; k < n->n_attrs; k++)
            put_attr(h, &n->attrs[k]);
        put(h, " costs");
        for (int32_t k = 0; k < n->n_costs; k++)
            put(h, " %s=%a", n->costs[k].device, n->costs[k].us);
        put(h, "\n");
    }
    for (int32_t d = 0; d < p->n_devices; d++) {
        put(h, "order %d:", d);
        for (int32_t i = 0; i < p->n_order[d]; i++)
            put(h, " %d", p->order[d][i]);
        put(h, "\n");
    }
    for (int32_t i = 0; i < p->n_transfers; i++) {
        const PsimTransfer *t = &p->transfers[i];
        put(h, "t %d %d %d %d %d:%d %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %d %d %d %d %a %a %s\n",
            t->send, t->recv, t->src, t->dst, t->port.node, t->port.index, t->bytes, t->raw_bytes,
            (int)t->control, (int)t->compressed, (int)t->rounding, t->after, t->earliest_start,
            t->priority, t->key);
    }
    char *s = g_strdup(g_checksum_get_string(h));
    g_checksum_free(h);
    return s;
}

static PsimCluster *cluster(int32_t nd, gboolean independent)
{
    PsimCluster *c = psim_cluster_new();
    for (int32_t d = 0; d < nd; d++) {
        g_autofree char *name = g_strdup_printf("CPU:%d", d);
        psim_cluster_device_add(c, name, "CPU", NULL);
    }
    psim_cluster_default_link_set(c, (PsimLink){.bandwidth_GBps = 2, .latency_us = 3, .independent = independent});
    return c;
}

typedef struct {
    char *name;
    char *digest;
} Case;

/* Every case: model x cluster x compression x algorithm, digests in a fixed order. */
static GPtrArray *run_cases(void)
{
    GPtrArray *out = g_ptr_array_new();
    int32_t n_zoo = 0;
    const char *const *zoo = psim_zoo_list(&n_zoo);
    const char *gen[] = {"gen300", "gen3000"};
    for (int32_t mi = 0; mi < n_zoo + 2; mi++) {
        g_autoptr(GError) err = NULL;
        g_autoptr(PsimGraph) g = mi < n_zoo ? psim_zoo_make(zoo[mi], &err)
                                            : psim_test_dag(mi == n_zoo ? 300 : 3000, 7 + (guint32)mi, 50, TRUE);
        g_assert_no_error(err);
        const char *model = mi < n_zoo ? zoo[mi] : gen[mi - n_zoo];
        for (int ci = 0; ci < 3; ci++) {
            int32_t nd = ci == 0 ? 2 : ci == 1 ? 3 : 4;
            gboolean independent = ci != 1, compress = ci == 2;
            g_autoptr(PsimCluster) c = cluster(nd, independent);
            g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
            PsimPlaceOptions o;
            psim_place_options_init(&o);
            o.compress = compress;
            o.budget_ms = 20;
            g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
            g_assert_no_error(err);
            int32_t n_alg = 0;
            const PsimPlacer *const *alg = psim_placer_list(&n_alg);
            for (int32_t ai = 0; ai < n_alg; ai++) {
                if (!strcmp(alg[ai]->name, "file"))
                    continue;
                g_autoptr(PsimPlan) plan = test_place_plan(ctx, alg[ai]->name, NULL);
                g_assert_true(psim_plan_check(plan, &err));
                Case *k = g_new(Case, 1);
                k->name = g_strdup_printf("%s/%d%s%s/%s", model, nd, independent ? "i" : "s",
                                          compress ? "c" : "", alg[ai]->name);
                k->digest = plan_digest(plan);
                g_ptr_array_add(out, k);
            }
        }
    }
    return out;
}

static void case_free(gpointer p)
{
    Case *k = p;
    g_free(k->name);
    g_free(k->digest);
    g_free(k);
}

static void test_golden(void)
{
    const char *src = g_getenv("PSIM_SRC");
    g_autofree char *path = g_build_filename(src ? src : ".", "tests", "data", "plan-golden.txt", NULL);
    g_autofree char *text = NULL;
    g_autoptr(GError) err = NULL;
    g_assert_true(g_file_get_contents(path, &text, NULL, &err));
    g_autoptr(GHashTable) want = g_hash_table_new(g_str_hash, g_str_equal);
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        char *sp = strchr(*l, ' ');
        if (**l == '#' || !sp)
            continue;
        *sp = '\0';
        g_hash_table_insert(want, *l, sp + 1);
    }
    GPtrArray *cases = run_cases();
    g_assert_cmpuint(cases->len, ==, g_hash_table_size(want));
    int bad = 0;
    for (guint i = 0; i < cases->len; i++) {
        Case *k = g_ptr_array_index(cases, i);
        const char *w = g_hash_table_lookup(want, k->name);
        if (!w || strcmp(w, k->digest)) {
            g_printerr("plan %s differs from tests/data/plan-golden.txt\n", k->name);
            bad++;
        }
    }
    g_ptr_array_set_free_func(cases, case_free);
    g_ptr_array_free(cases, TRUE);
    g_assert_cmpint(bad, ==, 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 2;
        fprintf(f, "# Plan digests (tests/test-plan-golden.c): CASE SHA256\n");
        GPtrArray *cases = run_cases();
        for (guint i = 0; i < cases->len; i++) {
            Case *k = g_ptr_array_index(cases, i);
            fprintf(f, "%s %s\n", k->name, k->digest);
        }
        g_ptr_array_set_free_func(cases, case_free);
        g_ptr_array_free(cases, TRUE);
        return fclose(f) ? 1 : 0;
    }
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/plan/golden", test_golden);
    return g_test_run();
}
