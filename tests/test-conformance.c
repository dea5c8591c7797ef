/* ONNX conformance: every node test of Debian's libonnx-testdata whose ops we register for the
 * CPU (op and input dtype, as the kernel registry keys them) is loaded, run by the single-device
 * executor on the host worker, and compared with the expected outputs (|got - want| <= 1e-7 +
 * 1e-3 |want|, as ONNX's own runner). Prints every failure, then "N passed, M failed"; fails
 * below 95% of the tests run passed, or below 90% of all of them (a test that cannot run counted
 * as failed: issue 19). Exits 77 (skipped) when the test data is not installed.
 * PSIM_CONFORMANCE_DIR overrides the folder; PSIM_CONFORMANCE_ONLY=name runs one test. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "placesim/exec.h"
#include "placesim/kernels.h"

#include "onnx.pb-c.h"
#include "placesim/formats.h"

#define DEFAULT_DIR "/usr/share/libonnx-testdata/data/node"

typedef enum { T_PASS, T_FAIL, T_UNSUPPORTED } Verdict;

static PsimWorker *worker;

/* The first node of g whose op has no CPU kernel for its dtype, or NULL if all are covered. */
static const PsimNode *unsupported_node(const PsimGraph *g)
{
    for (int32_t i = 0; i < psim_graph_n_nodes(g); i++) {
        const PsimNode *n = psim_graph_node(g, i);
        if (!strcmp(n->op, "Placeholder") || (n->flags & PSIM_NODE_PARAMETER))
            continue;
        if (!psim_kernel_supported(g, n, "CPU"))
            return n;
    }
    return NULL;
}

/* Ops of the model's main graph straight from the file, so that a model the importer rejects
 * (control flow, sequences) is still classified by its ops. Sets *missing (g_free) to the first
 * op with no CPU kernel of any dtype; FALSE when the file does not parse. */
static gboolean file_ops_registered(const char *path, char **missing)
{
    g_autofree char *data = NULL;
    gsize len = 0;
    *missing = NULL;
    if (!g_file_get_contents(path, &data, &len, NULL))
        return FALSE;
    PsimOnnx__ModelProto *mp = psim_onnx__model_proto__unpack(NULL, len, (const uint8_t *)data);
    if (!mp)
        return FALSE;
    int32_t nk = 0;
    g_autofree const PsimKernelDef **all = psim_kernel_list(&nk);
    for (size_t i = 0; mp->graph && i < mp->graph->n_node && !*missing; i++) {
        const char *op = mp->graph->node[i]->op_type ? mp->graph->node[i]->op_type : "";
        gboolean found = FALSE;
        for (int32_t k = 0; k < nk && !found; k++)
            found = !strcmp(all[k]->op, op) && !strcmp(all[k]->device_type, "CPU");
        if (!found)
            *missing = g_strdup(op);
    }
    psim_onnx__model_proto__free_unpacked(mp, NULL);
    return TRUE;
}

/* ONNX 1.12's test data stores bfloat16 tensors as uint16 (numpy has no bfloat16): the same
 * bits, so they are compared and fed as such. */
static gboolean bf16_as_u16(PsimDType a, PsimDType b)
{
    return (a == PSIM_DTYPE_BFLOAT16 && b == PSIM_DTYPE_UINT16) ||
           (a == PSIM_DTYPE_UINT16 && b == PSIM_DTYPE_BFLOAT16);
}

static gboolean compare(const PsimTensor *got, const PsimTensor *want, char **why)
{
    if (got->dtype != want->dtype && !bf16_as_u16(got->dtype, want->dtype)) {
        *why = g_strdup_printf("dtype %s, expected %s", psim_dtype_name(got->dtype),
                               psim_dtype_name(want->dtype));
        return FALSE;
    }
    gboolean same = got->rank == want->rank;
    for (int32_t i = 0; same && i < got->rank; i++)
        same = got->dims[i] == want->dims[i];
    if (!same) {
        GString *s = g_string_new("shape [");
        for (int32_t i = 0; i < got->rank; i++)
            g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", got->dims[i]);
        g_string_append(s, "], expected [");
        for (int32_t i = 0; i < want->rank; i++)
            g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "", want->dims[i]);
        g_string_append(s, "]");
        *why = g_string_free(s, FALSE);
        return FALSE;
    }
    if (want->dtype == PSIM_DTYPE_STRING) {
        *why = g_strdup("string outputs are not compared");
        return FALSE;
    }
    gboolean exact = want->dtype != PSIM_DTYPE_FLOAT32 && want->dtype != PSIM_DTYPE_FLOAT64 &&
                     want->dtype != PSIM_DTYPE_FLOAT16 && want->dtype != PSIM_DTYPE_BFLOAT16;
    if (bf16_as_u16(got->dtype, want->dtype)) {
        if (memcmp(got->data, want->data, want->nbytes)) {
            *why = g_strdup("bfloat16 bits differ");
            return FALSE;
        }
        return TRUE;
    }
    for (int64_t i = 0; i < want->n_elems; i++) {
        if (exact) {
            if (psim_tensor_get_i64(got, i) != psim_tensor_get_i64(want, i)) {
                *why = g_strdup_printf("element %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT
                                       ", expected %" G_GINT64_FORMAT, i,
                                       psim_tensor_get_i64(got, i), psim_tensor_get_i64(want, i));
                return FALSE;
            }
            continue;
        }
        double g = psim_tensor_get_f64(got, i), w = psim_tensor_get_f64(want, i);
        if (isnan(w) ? isnan(g) : (isinf(w) ? g == w : fabs(g - w) <= 1e-7 + 1e-3 * fabs(w)))
            continue;
        *why = g_strdup_printf("element %" G_GINT64_FORMAT ": %.7g, expected %.7g", i, g, w);
        return FALSE;
    }
    return TRUE;
}

static Verdict run_one(const char *dir, char **why)
{
    g_autofree char *model = g_build_filename(dir, "model.onnx", NULL);
    g_autofree char *data = g_build_filename(dir, "test_data_set_0", NULL);
    GError *err = NULL;
    char *missing = NULL;
    if (file_ops_registered(model, &missing) && missing) {
        *why = missing;
        return T_UNSUPPORTED;
    }
    g_autoptr(PsimGraph) g = psim_graph_load(model, NULL, &err);
    if (!g) {
        *why = g_strdup_printf("load: %s", err->message);
        g_error_free(err);
        return T_FAIL;
    }
    const PsimNode *u = unsupported_node(g);
    if (u) {
        *why = g_strdup_printf("%s", u->op);
        return T_UNSUPPORTED;
    }
    /* Feeds: the graph inputs that are not initializers, in order, from input_<i>.pb. */
    GPtrArray *feed_names = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *feeds = g_ptr_array_new_with_free_func((GDestroyNotify)psim_tensor_unref);
    GPtrArray *fetches = g_ptr_array_new_with_free_func(g_free);
    PsimTensor **outs = NULL;
    PsimExecutor *e = NULL;
    Verdict v = T_FAIL;
    int32_t k = 0;
    for (int32_t i = 0; i < psim_graph_n_inputs(g); i++) {
        const PsimNode *n = psim_graph_node(g, psim_graph_input(g, i));
        if (n->flags & PSIM_NODE_PARAMETER || (n->n_outputs > 0 && n->outputs[0].value))
            continue;
        g_autofree char *file = g_strdup_printf("input_%d.pb", k++);
        g_autofree char *path = g_build_filename(data, file, NULL);
        if (!g_file_test(path, G_FILE_TEST_EXISTS))
            continue; /* an optional input left out */
        PsimTensor *t = psim_tensor_load_pb(path, NULL, &err);
        if (!t) {
            *why = g_strdup_printf("input: %s", err->message);
            goto out;
        }
        if (n->n_outputs > 0 && bf16_as_u16(t->dtype, n->outputs[0].dtype))
            t->dtype = PSIM_DTYPE_BFLOAT16;
        g_ptr_array_add(feeds, t);
        g_ptr_array_add(feed_names, g_strdup(n->name));
    }
    int32_t n_out = psim_graph_n_outputs(g);
    for (int32_t i = 0; i < n_out; i++)
        g_ptr_array_add(fetches, psim_port_to_string(g, psim_graph_output(g, i)));
    e = psim_executor_new(
        g, worker, (const char *const *)feed_names->pdata, (int32_t)feed_names->len,
        (const char *const *)fetches->pdata, n_out, NULL, &err);
    if (!e) {
        *why = g_strdup_printf("prepare: %s", err->message);
        goto out;
    }
    outs = g_new0(PsimTensor *, n_out + 1);
    if (!psim_executor_run(e, (PsimTensor *const *)feeds->pdata, outs, &err)) {
        *why = g_strdup_printf("run: %s", err->message);
        goto out;
    }
    v = T_PASS;
    for (int32_t i = 0; i < n_out && v == T_PASS; i++) {
        g_autofree char *file = g_strdup_printf("output_%d.pb", i);
        g_autofree char *path = g_build_filename(data, file, NULL);
        g_autoptr(PsimTensor) want = psim_tensor_load_pb(path, NULL, &err);
        if (!want) {
            *why = g_strdup_printf("expected output: %s", err->message);
            v = T_FAIL;
            break;
        }
        char *w = NULL;
        if (!outs[i] || !compare(outs[i], want, &w)) {
            *why = g_strdup_printf("output %d: %s", i, w ? w : "missing");
            g_free(w);
            v = T_FAIL;
        }
    }
out:
    g_clear_error(&err);
    psim_executor_free(e);
    for (int32_t i = 0; outs && i < n_out; i++)
        psim_tensor_unref(outs[i]);
    g_free(outs);
    g_ptr_array_free(feed_names, TRUE);
    g_ptr_array_free(feeds, TRUE);
    g_ptr_array_free(fetches, TRUE);
    return v;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void)
{
    const char *root = g_getenv("PSIM_CONFORMANCE_DIR");
    root = root ? root : DEFAULT_DIR;
    const char *only = g_getenv("PSIM_CONFORMANCE_ONLY");
    GDir *d = g_dir_open(root, 0, NULL);
    if (!d) {
        printf("skipped: %s is absent (install libonnx-testdata)\n", root);
        return 77;
    }
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    for (const char *e; (e = g_dir_read_name(d));)
        if (!only || !strcmp(only, e))
            g_ptr_array_add(names, g_strdup(e));
    g_dir_close(d);
    qsort(names->pdata, names->len, sizeof(gpointer), cmp_str);
    GError *err = NULL;
    worker = psim_worker_new(NULL, &err);
    if (!worker) {
        printf("no host worker: %s\n", err->message);
        return 1;
    }
    int passed = 0, failed = 0, unsupported = 0;
    for (guint i = 0; i < names->len; i++) {
        const char *name = g_ptr_array_index(names, i);
        g_autofree char *dir = g_build_filename(root, name, NULL);
        g_autofree char *model = g_build_filename(dir, "model.onnx", NULL);
        if (!g_file_test(model, G_FILE_TEST_EXISTS))
            continue;
        char *why = NULL;
        if (g_getenv("PSIM_CONFORMANCE_VERBOSE"))
            fprintf(stderr, "# %s\n", name);
        Verdict v = run_one(dir, &why);
        if (v == T_PASS)
            passed++;
        else if (v == T_FAIL) {
            failed++;
            printf("FAIL %s: %s\n", name, why ? why : "?");
        } else {
            unsupported++;
            if (g_getenv("PSIM_CONFORMANCE_VERBOSE"))
                printf("not registered %s: %s\n", name, why);
        }
        g_free(why);
        fflush(stdout);
    }
    psim_worker_free(worker);
    g_ptr_array_free(names, TRUE);
    int total = passed + failed;
    printf("%d passed, %d failed (%d tests not run: an op or dtype without a CPU kernel)\n",
           passed, failed, unsupported);
    if (total == 0)
        return 1;
    double rate = (double)passed / total;
    /* Issue 19's measure: every test of the package, a test that cannot run counted as failed. */
    double overall = (double)passed / (total + unsupported);
    printf("pass rate %.1f%% of the tests run (at least 95%% required), %.1f%% of all %d (at least "
           "90%% required)\n", 100 * rate, 100 * overall, total + unsupported);
    if (only) /* one test: the share of all is not the question */
        return rate >= 0.95 ? 0 : 1;
    return rate >= 0.95 && overall >= 0.90 ? 0 : 1;
}
