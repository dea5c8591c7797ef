/* libFuzzer target for the placesim JSON graph importer (and, through the round trip in
 * fuzz_one, its exporter). */
#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one("fuzz.json", PSIM_FORMAT_JSON, data, size, FALSE);
    return 0;
}
