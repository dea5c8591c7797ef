/* For every STG graph on 2, 4, 8 and 16 identical devices with no communication, and every
 * placement algorithm: the simulator's static-order step time of the algorithm's plan must equal
 * the placer's own makespan_us. Prints the count of (graph, P, algorithm) runs and mismatches.
 *
 *   bench-stg-sim [STG_DIR] [SEARCH_BUDGET_MS]
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/placer.h"
#include "placesim/sim.h"
#include "placesim/formats.h"

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "../shared/data/stg/50";
    double budget = argc > 2 ? g_ascii_strtod(argv[2], NULL) : 100;
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    if (!d) {
        fprintf(stderr, "bench-stg-sim: %s: cannot open\n", dir);
        return 2;
    }
    GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
    for (const char *f; (f = g_dir_read_name(d));)
        if (g_str_has_suffix(f, ".stg"))
            g_ptr_array_add(files, g_build_filename(dir, f, NULL));
    g_ptr_array_sort(files, (GCompareFunc)g_strcmp0);
    static const int procs[] = {2, 4, 8, 16};
    long runs = 0, mismatches = 0;
    for (guint i = 0; i < files->len; i++) {
        GError *err = NULL;
        g_autoptr(PsimGraph) g = psim_graph_load(g_ptr_array_index(files, i), NULL, &err);
        if (!g) {
            fprintf(stderr, "%s\n", err->message);
            return 1;
        }
        for (size_t k = 0; k < G_N_ELEMENTS(procs); k++) {
            g_autoptr(PsimCluster) c = psim_cluster_new();
            for (int p = 0; p < procs[k]; p++) {
                g_autofree char *nm = g_strdup_printf("P:%d", p);
                psim_cluster_device_add(c, nm, "P", NULL);
            }
            psim_cluster_default_link_set(c, (PsimLink){0, 0, TRUE});
            g_autoptr(PsimCostModel) m = psim_cost_model_new(c, NULL);
            PsimPlaceOptions o;
            psim_place_options_init(&o);
            o.budget_ms = budget;
            g_autoptr(PsimPlaceCtx) ctx = psim_place_ctx_new(g, m, &o, &err);
            if (!ctx) {
                fprintf(stderr, "%s\n", err->message);
                return 1;
            }
            for (const PsimPlacer *const *pl = psim_placer_list(NULL); *pl; pl++) {
                if (!strcmp((*pl)->name, "file"))
                    continue;
                g_autoptr(PsimPlacement) p = psim_place(ctx, (*pl)->name, &err);
                g_autoptr(PsimPlan) plan = p ? psim_plan_build(ctx, p, &err) : NULL;
                PsimSimOptions so = {.order = PSIM_ORDER_STATIC, .no_timeline = TRUE};
                PsimSimResult r;
                if (!plan || !psim_sim_run(plan, m, &so, &r, NULL, &err)) {
                    fprintf(stderr, "%s P=%d %s: %s\n", psim_graph_name(g), procs[k], (*pl)->name,
                            err ? err->message : "failed");
                    return 1;
                }
                runs++;
                if (r.step_time_us != plan->makespan_us) {
                    mismatches++;
                    printf("MISMATCH %s P=%d %s: placer %.3f, simulator %.3f\n", psim_graph_name(g),
                           procs[k], (*pl)->name, plan->makespan_us, r.step_time_us);
                }
                psim_sim_result_clear(&r);
            }
        }
    }
    printf("%ld runs (%u graphs x %zu device counts x algorithms), %ld mismatches\n", runs,
           files->len, G_N_ELEMENTS(procs), mismatches);
    g_ptr_array_free(files, TRUE);
    return mismatches ? 1 : 0;
}
