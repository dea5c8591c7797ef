/* libFuzzer target for the PipeDream profile importer, plain and expanded for training. */
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one("fuzz.txt", PSIM_FORMAT_PIPEDREAM, data, size, FALSE);
    fuzz_one("fuzz.txt", PSIM_FORMAT_PIPEDREAM, data, size, TRUE);
    return 0;
}
