/* libFuzzer target for the ONNX importer and ONNX TensorProto files: any input must give a
 * graph that survives what the tools do with it (fuzz-common.h) or a tensor, or one clean INPUT
 * error line naming the file; never a crash, a leak, a hang or an allocation beyond what the
 * input justifies. */
#include "fuzz-common.h"
#include "placesim/formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one("fuzz.onnx", PSIM_FORMAT_ONNX, data, size, FALSE);

    GError *err = NULL;
    char *name = NULL;
    PsimTensor *t = psim_tensor_parse_pb("fuzz.pb", data, size, &name, &err);
    if (t) {
        if (!name || t->n_elems < 0 || t->n_elems > PSIM_MAX_ELEMENTS ||
            t->nbytes != (size_t)t->n_elems * psim_dtype_size(t->dtype))
            abort();
        if (t->dtype != PSIM_DTYPE_STRING && t->n_elems > 0)
            (void)psim_tensor_get_f64(t, t->n_elems - 1);
        psim_tensor_unref(t);
    } else {
        fuzz_check_error(err, "fuzz.pb");
        g_clear_error(&err);
    }
    g_free(name);
    return 0;
}
