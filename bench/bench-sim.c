/* Simulator speed and memory: a generated graph of N Task nodes (default 1,000,000) placed on D
 * devices (default 64) with Send/Recv pairs for every crossing tensor, simulated in static and
 * dynamic order, with and without recording the timeline. Reports wall time (median of runs),
 * events per second, and the simulator's peak memory per node (peak RSS over the call).
 *
 *   bench-sim [N] [D] [RUNS]
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "placesim/sim.h"

/* Layers of W nodes; node j of a layer reads two tensors of the previous layer at positions
 * near j, so that a placement by position keeps most edges on one device. */
static PsimPlan *make_plan(int32_t n, int32_t nd, PsimCluster **out_cluster)
{
    int32_t w = nd * 8;
    GRand *rng = g_rand_new_with_seed(42);
    PsimGraph *g = psim_graph_new("bench-sim");
    g_autofree int32_t *dev = g_new(int32_t, (gsize)n * 3 + 16);
    char name[32];
    for (int32_t i = 0; i < n; i++) {
        g_snprintf(name, sizeof name, "n%d", i);
        PsimNode *v = psim_graph_node_add(g, name, "Task", NULL);
        psim_graph_node_outputs_set(g, v, 1);
        v->outputs[0].bytes = 1024u * (1 + g_rand_int_range(rng, 0, 64));
        psim_graph_node_cost_set(g, v, "*", 1 + g_rand_int_range(rng, 0, 10));
        int32_t layer = i / w, pos = i % w;
        dev[i] = pos / 8;
        if (layer > 0)
            for (int k = 0; k < 2; k++) {
                int32_t p = pos + g_rand_int_range(rng, -6, 7);
                p = CLAMP(p, 0, w - 1);
                int32_t src = (layer - 1) * w + p;
                gboolean dup = k == 1 && v->inputs[0].node == src;
                if (!dup)
                    psim_graph_node_input_add(g, v, (PsimPort){src, 0});
            }
    }
    /* Partition: one Send/Recv per (tensor, destination device). */
    GHashTable *recv_of = g_hash_table_new(g_int64_hash, g_int64_equal);
    GArray *xf = g_array_new(FALSE, TRUE, sizeof(PsimTransfer));
    g_autofree gint64 *keys = g_new(gint64, (gsize)n * 2 + 1);
    int32_t n_keys = 0;
    for (int32_t i = 0; i < n; i++) {
        PsimNode *v = psim_graph_node(g, i);
        for (int32_t k = 0; k < v->n_inputs; k++) {
            int32_t src = v->inputs[k].node;
            if (dev[src] == dev[i])
                continue;
            keys[n_keys] = (gint64)src * 1024 + dev[i];
            gpointer r = g_hash_table_lookup(recv_of, &keys[n_keys]);
            if (!r) {
                int32_t sid = psim_graph_n_nodes(g);
                g_snprintf(name, sizeof name, "s%d_%d", src, dev[i]);
                PsimNode *s = psim_graph_node_add(g, name, "Send", NULL);
                psim_graph_node_input_add(g, s, (PsimPort){src, 0});
                g_snprintf(name, sizeof name, "r%d_%d", src, dev[i]);
                PsimNode *rv = psim_graph_node_add(g, name, "Recv", NULL);
                psim_graph_node_outputs_set(g, rv, 1);
                rv->outputs[0].bytes = psim_graph_node(g, src)->outputs[0].bytes;
                dev[sid] = dev[src];
                dev[sid + 1] = dev[i];
                PsimTransfer t = {.send = sid, .recv = sid + 1, .src = dev[src], .dst = dev[i],
                                  .port = {src, 0}, .bytes = rv->outputs[0].bytes,
                                  .raw_bytes = rv->outputs[0].bytes, .after = -1, .key = ""};
                g_array_append_val(xf, t);
                r = GINT_TO_POINTER(sid + 1 + 1);
                g_hash_table_insert(recv_of, &keys[n_keys++], r);
                v = psim_graph_node(g, i);
            }
            v->inputs[k] = (PsimPort){GPOINTER_TO_INT(r) - 1, 0};
        }
    }
    g_hash_table_destroy(recv_of);
    int32_t total = psim_graph_n_nodes(g);
    PsimCluster *c = psim_cluster_new();
    const char **names = g_new(const char *, nd);
    for (int32_t d = 0; d < nd; d++) {
        g_snprintf(name, sizeof name, "CPU:%d", d);
        psim_cluster_device_add(c, name, "CPU", NULL);
        names[d] = psim_cluster_device(c, d)->name;
    }
    psim_cluster_default_link_set(c, (PsimLink){10, 2, FALSE});
    PsimPlan *p = psim_plan_new(g, nd, names);
    g_free(names);
    for (int32_t v = 0; v < total; v++)
        p->device_of[v] = dev[v];
    for (int32_t d = 0; d < nd; d++)
        p->order[d] = g_new(int32_t, total / nd + 1024);
    g_autofree int32_t *cap = g_new(int32_t, nd);
    for (int32_t d = 0; d < nd; d++)
        cap[d] = total / nd + 1024;
    for (int32_t v = 0; v < total; v++) {
        int32_t d = dev[v];
        if (p->n_order[d] == cap[d]) {
            cap[d] *= 2;
            p->order[d] = g_renew(int32_t, p->order[d], cap[d]);
        }
        p->order[d][p->n_order[d]++] = v;
        p->priority[v] = v;
    }
    p->n_transfers = (int32_t)xf->len;
    p->transfers = (PsimTransfer *)g_array_free(xf, FALSE);
    for (int32_t x = 0; x < p->n_transfers; x++)
        p->transfer_of_recv[p->transfers[x].recv] = x;
    g_rand_free(rng);
    *out_cluster = c;
    return p;
}

static long status_kb(const char *field)
{
    g_autofree char *text = NULL;
    if (!g_file_get_contents("/proc/self/status", &text, NULL, NULL))
        return -1;
    char *p = strstr(text, field);
    return p ? atol(p + strlen(field) + 1) : -1;
}

int main(int argc, char **argv)
{
    int32_t n = argc > 1 ? atoi(argv[1]) : 1000000;
    int32_t nd = argc > 2 ? atoi(argv[2]) : 64;
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    PsimCluster *c = NULL;
    gint64 t0 = g_get_monotonic_time();
    PsimPlan *p = make_plan(n, nd, &c);
    gint64 t1 = g_get_monotonic_time();
    PsimCostModel *m = psim_cost_model_new(c, NULL);
    /* Build the graph's cached adjacency before timing, as any earlier pass would have. */
    const int32_t *o, *s;
    psim_graph_succ(p->graph, &o, &s);
    printf("graph: %d nodes (%d with Send/Recv), %d transfers, %d devices; built in %.2f s\n", n,
           psim_graph_n_nodes(p->graph), p->n_transfers, nd, (t1 - t0) / 1e6);
    if (runs == 0) {
        /* One inline run, for profilers (callgrind --toggle-collect=psim_sim_run). */
        PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE};
        PsimSimResult res;
        if (!psim_sim_run(p, m, &so, &res, NULL, NULL))
            return 1;
        printf("step %.1f us, %" G_GINT64_FORMAT " events\n", res.step_time_us, res.events);
        psim_sim_result_clear(&res);
        return 0;
    }
    struct {
        const char *name;
        PsimOrder order;
        gboolean timeline;
    } cases[] = {{"static, no timeline", PSIM_ORDER_STATIC, FALSE},
                 {"static, timeline", PSIM_ORDER_STATIC, TRUE},
                 {"dynamic, no timeline", PSIM_ORDER_DYNAMIC, FALSE}};
    for (size_t ci = 0; ci < G_N_ELEMENTS(cases); ci++) {
        double times[64], per_node[64], cpus[64];
        int64_t events = 0;
        double step = 0;
        for (int r = 0; r < runs && r < 64; r++) {
            /* Each run in a child process so that its peak RSS is its own. */
            int fds[2];
            if (pipe(fds) != 0)
                return 1;
            pid_t pid = fork();
            if (pid == 0) {
                close(fds[0]);
                long before = status_kb("VmRSS:");
                FILE *f = fopen("/proc/self/clear_refs", "w");
                if (f) {
                    fputs("5", f);
                    fclose(f);
                }
                PsimSimOptions so = {.order = cases[ci].order, .no_timeline = !cases[ci].timeline};
                PsimSimResult res;
                PsimTimeline *tl = NULL;
                struct timespec ca, cb;
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
                gint64 a = g_get_monotonic_time();
                gboolean ok = psim_sim_run(p, m, &so, &res, cases[ci].timeline ? &tl : NULL, NULL);
                gint64 b = g_get_monotonic_time();
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
                double cpu = (cb.tv_sec - ca.tv_sec) + (cb.tv_nsec - ca.tv_nsec) / 1e9;
                long peak = status_kb("VmHWM:");
                double out[5] = {(b - a) / 1e6, (double)res.events, res.step_time_us,
                                 (double)(peak - before) * 1024.0 / n, cpu};
                if (!ok)
                    out[0] = -1;
                if (write(fds[1], out, sizeof out) != sizeof out)
                    _exit(1);
                _exit(0);
            }
            close(fds[1]);
            double in[5] = {0};
            if (read(fds[0], in, sizeof in) != sizeof in || in[0] < 0) {
                fprintf(stderr, "bench-sim: run failed\n");
                return 1;
            }
            close(fds[0]);
            waitpid(pid, NULL, 0);
            times[r] = in[0];
            events = (int64_t)in[1];
            step = in[2];
            per_node[r] = in[3];
            cpus[r] = in[4];
        }
        int k = MIN(runs, 64);
        psim_stats_sort(times, k);
        psim_stats_sort(per_node, k);
        psim_stats_sort(cpus, k);
        double med = times[k / 2], cpu = cpus[k / 2];
        printf("%-22s wall median %.3f s (min %.3f, max %.3f, %d runs)  cpu median %.3f s  %" G_GINT64_FORMAT
               " events  %.2f M events/s (wall) %.2f (cpu)  %.0f bytes/node  step %.1f us\n",
               cases[ci].name, med, times[0], times[k - 1], k, cpu, events, events / med / 1e6,
               events / cpu / 1e6, per_node[k / 2], step);
    }
    psim_cost_model_free(m);
    psim_plan_free(p);
    psim_cluster_free(c);
    return 0;
}
