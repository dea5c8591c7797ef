/* libFuzzer target for the plan JSON reader ("placesim.plan/2", and /1): an input either loads into a
 * plan that writes back out and reads again with the same nodes and transfers, or fails with one
 * INPUT error line naming the file. */
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    GError *err = NULL;
    PsimPlan *p = psim_plan_from_json("fuzz-plan.json", (const char *)data, size, &err);
    if (!p) {
        fuzz_check_error(err, "fuzz-plan.json");
        g_clear_error(&err);
        return 0;
    }
    gsize len = 0;
    char *json = psim_plan_to_json(p, &len);
    PsimPlan *p2 = psim_plan_from_json("fuzz-plan-roundtrip.json", json, len, &err);
    if (!p2 || psim_graph_n_nodes(p2->graph) != psim_graph_n_nodes(p->graph) ||
        p2->n_transfers != p->n_transfers)
        abort(); /* what we write we must read back */
    psim_plan_free(p2);
    g_free(json);
    psim_plan_free(p);
    return 0;
}
