/* libFuzzer target for the binary TensorFlow GraphDef importer: any input must give a graph or
 * one clean INPUT error line naming the file; what imports must export to pbtxt and JSON and
 * read back with the same nodes and edges. */
#include "fuzz-tf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_tf_one("fuzz.pb", PSIM_FORMAT_TF_PB, data, size);
    return 0;
}
