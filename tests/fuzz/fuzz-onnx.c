/* libFuzzer target for the ONNX importer and ONNX TensorProto files: any input must give a
 * graph or tensor, or one clean INPUT error line naming the file; never a crash, a leak, a
 * hang or an allocation beyond what the input justifies. */
#include <stdlib.h>
#include <string.h>

#include "placesim/graph.h"

/* A failure must be reported as one line that names the file. */
static void check_error(const GError *err, const char *path)
{
    if (!err || err->domain != PSIM_ERROR ||
        (err->code != PSIM_ERROR_INPUT && err->code != PSIM_ERROR_UNSUPPORTED) ||
        !g_str_has_prefix(err->message, path) || strchr(err->message, '\n'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("fuzz.onnx", PSIM_FORMAT_ONNX, data, size, NULL, &err);
    if (g) {
        /* Whatever imported must be a consistent graph: walk it as the tools do. */
        PsimGraphStats st;
        psim_graph_stats(g, &st);
        gsize len = 0;
        g_free(psim_export_json(g, &len));
        psim_graph_free(g);
    } else {
        check_error(err, "fuzz.onnx: ");
        g_clear_error(&err);
    }
    char *name = NULL;
    PsimTensor *t = psim_tensor_parse_pb("fuzz.pb", data, size, &name, &err);
    if (t) {
        if (!name || t->n_elems < 0 || t->n_elems > PSIM_MAX_ELEMENTS)
            abort();
        if (t->dtype != PSIM_DTYPE_STRING && t->n_elems > 0)
            (void)psim_tensor_get_f64(t, t->n_elems - 1);
        psim_tensor_unref(t);
    } else {
        check_error(err, "fuzz.pb: ");
        g_clear_error(&err);
    }
    g_free(name);
    return 0;
}
