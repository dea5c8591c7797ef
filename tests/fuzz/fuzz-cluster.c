/* libFuzzer target for the cluster JSON reader ("placesim.cluster/1"): an input either loads
 * into a cluster whose links can all be asked for, or fails with one INPUT error line naming
 * the file. */
#include "fuzz-common.h"
#include "placesim/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    GError *err = NULL;
    PsimCluster *c = psim_cluster_parse("fuzz-cluster.json", (const char *)data, size, &err);
    if (!c) {
        fuzz_check_error(err, "fuzz-cluster.json");
        g_clear_error(&err);
        return 0;
    }
    int32_t n = psim_cluster_n_devices(c);
    for (int32_t a = 0; a < n && a < 64; a++)
        for (int32_t b = 0; b < n && b < 64; b++)
            (void)psim_cluster_link_time(c, a, b, 1024);
    psim_cluster_free(c);
    return 0;
}
