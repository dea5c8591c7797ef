/* libFuzzer target for the STG task-graph importer. */
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one("fuzz.stg", PSIM_FORMAT_STG, data, size, FALSE);
    return 0;
}
