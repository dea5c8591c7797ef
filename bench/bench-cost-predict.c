/* Prediction accuracy of the cost model: for every node of a graph that the profiler measures,
 * the cost model's time on a device (from the cost DB, at the host's speed during the fresh
 * measurement: psim_cost_model_set_speed_ref) against a fresh standalone measurement of that node
 * made now. Prints the distribution of |predicted - fresh| / fresh, and the same for the raw rows.
 *
 *   bench-cost-predict GRAPH --db DB [--cluster local:2] [--device CPU:0]
 *                      [--clock monotonic|thread-cpu] [--budget-ms 1000] [--json] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placesim/profiler.h"
#include "placesim/formats.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, int n, double p)
{
    if (n == 0)
        return NAN;
    double k = (n - 1) * p / 100;
    int lo = (int)k, hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (k - lo);
}

int main(int argc, char **argv)
{
    const char *spec = "local:2", *dev_name = "CPU:0", *db_path = NULL, *clock = "monotonic", *weights = "auto";
    double budget = 1000;
    int rounds = 100;
    gboolean json = FALSE;
    GOptionEntry entries[] = {
        {"cluster", 0, 0, G_OPTION_ARG_STRING, &spec, "cluster", "SPEC"},
        {"device", 0, 0, G_OPTION_ARG_STRING, &dev_name, "device", "NAME"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &db_path, "cost DB", "DB"},
        {"clock", 0, 0, G_OPTION_ARG_STRING, &clock, "monotonic or thread-cpu", "CLOCK"},
        {"budget-ms", 0, 0, G_OPTION_ARG_DOUBLE, &budget, "budget per node", "MS"},
        {"rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "interleaved passes over all nodes, samples pooled (default 100)", "N"},
        {"weights", 0, 0, G_OPTION_ARG_STRING, &weights, "auto (default), cold or warm", "MODE"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH");
    g_option_context_add_main_entries(ctx, entries, NULL);
    GError *err = NULL;
    if (!g_option_context_parse(ctx, &argc, &argv, &err) || argc != 2 || !db_path) {
        fprintf(stderr, "usage: bench-cost-predict GRAPH --db DB [...]%s%s\n", err ? ": " : "",
                err ? err->message : "");
        return 2;
    }
    g_autoptr(PsimGraph) g = psim_graph_load(argv[1], NULL, &err);
    g_autoptr(PsimCluster) c = g ? psim_cluster_from_spec(spec, &err) : NULL;
    g_autoptr(PsimCostDb) db = c ? psim_cost_db_open_readonly(db_path, &err) : NULL;
    if (!db) {
        fprintf(stderr, "bench-cost-predict: %s\n", err->message);
        return 2;
    }
    int32_t dev = psim_cluster_device_find(c, dev_name);
    if (dev < 0) {
        fprintf(stderr, "bench-cost-predict: no device %s\n", dev_name);
        return 2;
    }
    PsimProfileOptions o;
    psim_profile_options_init(&o);
    o.budget_ms = budget;
    if (!psim_profile_weights_from_name(weights, &o.weights)) {
        fprintf(stderr, "bench-cost-predict: --weights must be auto, cold or warm\n");
        return 2;
    }
    o.rounds = rounds;
    o.clock = !strcmp(clock, "thread-cpu") ? PSIM_PROFILE_CLOCK_THREAD_CPU : PSIM_PROFILE_CLOCK_MONOTONIC;
    g_autoptr(PsimProfiler) p = psim_profiler_new(c, NULL, &o, &err);
    g_autoptr(PsimCostModel) m = psim_cost_model_new(c, db);
    if (!p) {
        fprintf(stderr, "bench-cost-predict: %s\n", err->message);
        return 1;
    }
    g_autofree gboolean *constant = psim_cost_constant_nodes(g);
    int32_t n = psim_graph_n_nodes(g), k = 0, not_measured = 0;
    g_autofree double *rel = g_new(double, n + 1);
    g_autofree double *rel_big = g_new(double, n + 1);
    int32_t k_big = 0;
    /* The nodes the DB has a measured row for: each is measured again now, alone, interleaved
     * as the profiler does, samples pooled over `rounds` passes. */
    g_autofree double *pred = g_new0(double, n + 1);
    g_autofree GArray **samples = g_new0(GArray *, n + 1);
    g_autofree const PsimNode **todo = g_new0(const PsimNode *, n + 1);
    g_autofree int32_t *todo_id = g_new0(int32_t, n + 1);
    int32_t n_todo = 0;
    for (int32_t v = 0; v < n; v++) {
        const PsimNode *node = psim_graph_node(g, v);
        if (!psim_profiler_node_measurable(g, node, constant))
            continue;
        PsimCostSource src;
        pred[v] = psim_cost_node(m, g, node, dev, &src);
        if (src != PSIM_COST_SOURCE_MEASURED) {
            not_measured++;
            continue;
        }
        todo_id[n_todo] = v;
        todo[n_todo++] = node;
    }
    g_autofree GArray **got = g_new0(GArray *, n_todo + 1);
    g_autofree char **why = g_new0(char *, n_todo + 1);
    PsimSpeedRef now;
    if (!psim_profiler_measure_nodes(p, g, todo, n_todo, dev, got, why, &now, &err)) {
        fprintf(stderr, "bench-cost-predict: %s\n", err->message);
        return 1;
    }
    for (int32_t i = 0; i < n_todo; i++) {
        samples[todo_id[i]] = got[i];
        if (why[i])
            fprintf(stderr, "bench-cost-predict: %s\n", why[i]);
        g_free(why[i]);
    }
    /* The model's answer for the host as fast as it was during the fresh measurement: each row
     * scaled by the speed reference sampled among the fresh passes against its own profile's
     * (psim_cost_model_set_speed_ref). The raw answer is reported beside it. */
    psim_cost_model_set_speed_ref(m, dev, &now);
    g_autofree double *raw = g_new(double, n + 1);
    int32_t k_raw = 0;
    for (int32_t v = 0; v < n; v++) {
        if (!samples[v])
            continue;
        const PsimNode *node = psim_graph_node(g, v);
        PsimTimingStats st;
        psim_timing_stats((double *)samples[v]->data, samples[v]->len, &st);
        g_array_free(samples[v], TRUE);
        double adj = psim_cost_node(m, g, node, dev, NULL);
        double r = fabs(adj - st.median_us) / st.median_us;
        raw[k_raw++] = fabs(pred[v] - st.median_us) / st.median_us;
        rel[k++] = r;
        if (st.median_us >= 100)
            rel_big[k_big++] = r;
        if (!json)
            printf("%-28s %-18s predicted %10.1f us (raw %10.1f)  fresh %10.1f us  %6.2f%% (raw %6.2f%%)\n",
                   node->name, node->op, adj, pred[v], st.median_us, 100 * r, 100 * raw[k_raw - 1]);
    }
    qsort(rel, (size_t)k, sizeof *rel, cmp);
    qsort(rel_big, (size_t)k_big, sizeof *rel_big, cmp);
    qsort(raw, (size_t)k_raw, sizeof *raw, cmp);
    int32_t within = 0, within_big = 0;
    for (int32_t i = 0; i < k; i++)
        within += rel[i] <= 0.05;
    for (int32_t i = 0; i < k_big; i++)
        within_big += rel_big[i] <= 0.05;
    if (json)
        printf("{\"graph\":\"%s\",\"device\":\"%s\",\"clock\":\"%s\",\"weights\":\"%s\",\"nodes\":%d,\"not_measured\":%d,"
               "\"median\":%.5f,\"p75\":%.5f,\"p90\":%.5f,\"within_5pct\":%d,"
               "\"nodes_ge_100us\":%d,\"median_ge_100us\":%.5f,\"within_5pct_ge_100us\":%d,"
               "\"median_raw\":%.5f,\"ref_now\":{\"gemm_us\":%.3f,\"stream_us\":%.3f}}\n",
               psim_graph_name(g), dev_name, clock, psim_profile_weights_name(psim_profiler_graph_weights(p, g)), k, not_measured, pct(rel, k, 50), pct(rel, k, 75),
               pct(rel, k, 90), within, k_big, pct(rel_big, k_big, 50), within_big, pct(raw, k_raw, 50),
               now.gemm_us, now.stream_us);
    else
        printf("nodes %d (not in the DB: %d); |pred-fresh|/fresh median %.2f%%, p75 %.2f%%, p90 %.2f%%; "
               "within 5%%: %d/%d; nodes >= 100 us: %d, median %.2f%%; without the speed reference "
               "(raw rows): median %.2f%%; reference now: SGEMM %.1f us, stream %.1f us\n",
               k, not_measured, 100 * pct(rel, k, 50), 100 * pct(rel, k, 75), 100 * pct(rel, k, 90),
               within, k, k_big, 100 * pct(rel_big, k_big, 50), 100 * pct(raw, k_raw, 50), now.gemm_us,
               now.stream_us);
    return 0;
}
