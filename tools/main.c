/* The placesim command line: one binary, a subcommand per step of the pipeline. */
#include <stdio.h>
#include <string.h>
#include <stdarg.h>
#include <unistd.h>
#include <execinfo.h>
#include <signal.h>

#include <math.h>

#include "tools/cli.h"
#include "placesim/formats.h"

/* In pipeline order: look at a graph and a cluster, measure, place, simulate, run, compare. */
static const PsimCommand commands[] = {
    {"inspect", "summarize a graph: nodes, ops, FLOPs, parameters, critical path", psim_cmd_inspect},
    {"cluster", "print a cluster's devices and links (a cluster file or this machine)", psim_cmd_cluster},
    {"profile", "measure kernel and transfer costs on real devices into a cost DB", psim_cmd_profile},
    {"place", "place a graph on a cluster and partition it into a plan", psim_cmd_place},
    {"sim", "simulate one step of a plan: step time, memory, critical path, traces", psim_cmd_sim},
    {"run", "run a graph (or a plan on several devices) for real; check outputs, time steps", psim_cmd_run},
    {"compare", "compare a simulated trace with a measured one (errors, plots)", psim_cmd_compare},
    {"study", "profile, place, simulate, run and compare graphs x algorithms; report and plots", psim_cmd_study},
    {"export", "convert a graph to JSON, DOT, GraphML or TF pbtxt", psim_cmd_export},
    {"train", "train a model for real: variables, gradients, optimizers, checkpoints", psim_cmd_train},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: placesim COMMAND [OPTIONS] [ARGS]\n\n"
               "Places dataflow graphs on devices, simulation first.\n\nCommands:\n");
    for (size_t i = 0; i < G_N_ELEMENTS(commands); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'placesim COMMAND --help' for a command's options.\n"
               "Exit codes: 0 ok, 2 bad input or usage, 1 runtime failure.\n");
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PSIM_OWN_CRASH_HANDLER 0 /* the sanitizers report crashes themselves */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(undefined_behavior_sanitizer)
#define PSIM_OWN_CRASH_HANDLER 0
#endif
#endif
#ifndef PSIM_OWN_CRASH_HANDLER
#define PSIM_OWN_CRASH_HANDLER 1
#endif

#if PSIM_OWN_CRASH_HANDLER
/* A crash is a bug: say so on one line, then print the stack (frames as binary(+offset), which
 * `addr2line -e placesim OFFSET` resolves against the same build even when the binary was
 * stripped), and die of the same signal. Only async-signal-safe calls. */
static void on_crash(int sig)
{
    static const char head[] = "placesim: crashed (a bug; please report it with this stack): ";
    char num[16];
    int n = 0;
    for (int v = sig; n < 3; v /= 10) {
        num[n++] = (char)('0' + v % 10);
        if (v < 10)
            break;
    }
    if (write(STDERR_FILENO, head, sizeof head - 1) < 0)
        _exit(128 + sig);
    const char sigw[] = "signal ";
    if (write(STDERR_FILENO, sigw, sizeof sigw - 1) < 0)
        _exit(128 + sig);
    while (n > 0)
        if (write(STDERR_FILENO, &num[--n], 1) < 0)
            _exit(128 + sig);
    if (write(STDERR_FILENO, "\n", 1) < 0)
        _exit(128 + sig);
    void *frames[64];
    int nf = backtrace(frames, 64);
    backtrace_symbols_fd(frames, nf, STDERR_FILENO);
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

int main(int argc, char **argv)
{
#if PSIM_OWN_CRASH_HANDLER
    {
        void *warm[1];
        backtrace(warm, 1); /* loads libgcc's unwinder now, not inside the handler */
        static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
        for (size_t i = 0; i < G_N_ELEMENTS(sigs); i++)
            signal(sigs[i], on_crash);
    }
#endif
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("placesim 0.1.0\n");
        return 0;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(commands); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "placesim: unknown command '%s' (see 'placesim --help')\n", argv[1]);
    return 2;
}

int psim_cli_exit_code(const GError *err)
{
    if (!err)
        return 0;
    if (err->domain == PSIM_ERROR &&
        (err->code == PSIM_ERROR_INPUT || err->code == PSIM_ERROR_USAGE ||
         err->code == PSIM_ERROR_UNSUPPORTED))
        return 2;
    return 1;
}

static gboolean quiet_rank;

void psim_cli_mpi_flags(gboolean mpi)
{
    const char *rank = g_getenv("OMPI_COMM_WORLD_RANK") ? g_getenv("OMPI_COMM_WORLD_RANK") : g_getenv("PMI_RANK");
    quiet_rank = mpi && rank && strcmp(rank, "0");
}

int psim_cli_flags_failed(GError *err, gboolean mpi)
{
    psim_cli_mpi_flags(mpi);
    return err ? psim_cli_fail(err) : 2;
}

int psim_cli_mpi_fail(PsimMpi *m, GError *err)
{
    if (!m)
        return psim_cli_fail(err);
    if (psim_mpi_said(m))
        g_error_free(err);
    else
        psim_cli_fail(err);
    psim_mpi_abort(m);
}

PsimMpi *psim_cli_mpi_start(int *argc, char ***argv, int *code)
{
    GError *err = NULL;
    *code = 0;
    PsimMpi *m = psim_mpi_new(argc, argv, &err);
    if (!m) {
        *code = psim_cli_fail(err);
        return NULL;
    }
    psim_cli_mpi_flags(FALSE);
    if (psim_mpi_rank(m) == 0)
        return m;
    if (!psim_mpi_serve(m, &err)) {
        psim_cli_fail(err);
        psim_mpi_abort(m);
    }
    psim_mpi_free(m);
    return NULL;
}

int psim_cli_fail(GError *err)
{
    int code = psim_cli_exit_code(err);
    if (err && quiet_rank) {
        g_error_free(err);
    } else if (err) {
        /* One line whatever the message quotes (a library's text, a name from a file). */
        g_strdelimit(err->message, "\r\n", ' ');
        fprintf(stderr, "placesim: %s\n", err->message);
        g_error_free(err);
    } else {
        code = 1; /* a failure without a reason is still a failure */
        fprintf(stderr, "placesim: failed without a reason\n");
    }
    return code;
}

int psim_cli_usage(const char *sub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    return psim_cli_fail(g_error_new(PSIM_ERROR, PSIM_ERROR_USAGE, "%s: %s (see 'placesim %s --help')",
                                     sub, msg, sub));
}

gboolean psim_cli_parse(GOptionContext *ctx, int *argc, char ***argv, const char *sub)
{
    g_autoptr(GError) err = NULL;
    if (!g_option_context_parse(ctx, argc, argv, &err)) {
        psim_cli_usage(sub, "%s", err->message);
        return FALSE;
    }
    return TRUE;
}

/* TRUE when spec names a built-in model ("zoo:NAME", or a NAME of the zoo that is no file). */
static gboolean is_zoo(const char *spec)
{
    if (g_str_has_prefix(spec, "zoo:"))
        return TRUE;
    if (g_file_test(spec, G_FILE_TEST_EXISTS))
        return FALSE;
    int32_t n = 0;
    const char *const *names = psim_zoo_list(&n);
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(names[i], spec))
            return TRUE;
    return FALSE;
}

char *psim_cli_graph_source(const char *spec)
{
    if (!strcmp(spec, "-"))
        return NULL;
    if (is_zoo(spec))
        return g_str_has_prefix(spec, "zoo:") ? g_strdup(spec) : g_strconcat("zoo:", spec, NULL);
    return g_canonicalize_filename(spec, NULL);
}

PsimGraph *psim_cli_load_graph_with(const char *spec, const PsimImportOptions *opts, GError **error)
{
    gboolean zoo = is_zoo(spec);
    const char *name = g_str_has_prefix(spec, "zoo:") ? spec + 4 : spec;
    PsimZooShape shape;
    if (zoo && opts && opts->batch > 0 && opts->n_shapes == 0 && psim_zoo_shape(name, &shape)) {
        shape.batch = opts->batch; /* mlp and cnn are made for any batch */
        return psim_zoo_make_shaped(name, &shape, error);
    }
    if (zoo && opts && (opts->batch > 0 || opts->n_shapes > 0)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "%s: --shape applies to graph files, and --batch to them and to the built-in mlp "
                    "and cnn; this built-in model has a fixed shape", spec);
        return NULL;
    }
    if (zoo)
        return psim_zoo_make(name, error);
    return psim_graph_load(spec, opts, error);
}

PsimGraph *psim_cli_load_graph(const char *spec, gboolean training, GError **error)
{
    PsimImportOptions opts = {.training = training};
    return psim_cli_load_graph_with(spec, &opts, error);
}

PsimPlan *psim_cli_load_plan(const char *plan_path, const char *graph_spec, gboolean training,
                             GError **error)
{
    /* A plan that refers to its graph reads GRAPH instead (a moved file): checked by SHA-256. */
    g_autofree char *source = graph_spec && !training ? psim_cli_graph_source(graph_spec) : NULL;
    g_autoptr(PsimPlan) plan = psim_plan_load_with(plan_path, source, error);
    if (!plan || !graph_spec || (source && plan->graph_source))
        return g_steal_pointer(&plan);
    g_autoptr(PsimGraph) g = psim_cli_load_graph(graph_spec, training, error);
    if (!g)
        return NULL;
    g_autoptr(GError) first = NULL;
    if (psim_plan_check_graph(plan, plan_path, g, graph_spec, &first))
        return g_steal_pointer(&plan);
    /* A plan made from the graph fused on its cluster (psim_cli_graph_fuse): GRAPH fused the
     * same way. */
    g_autoptr(PsimCluster) c =
        plan->cluster_json ? psim_cluster_parse(plan_path, plan->cluster_json, strlen(plan->cluster_json), NULL) : NULL;
    PsimCliGraphOptions go = {.training = training};
    if (c && psim_cli_graph_fuse(&g, c, &go, NULL) && go.n_fuse_removed > 0 &&
        psim_plan_check_graph(plan, plan_path, g, graph_spec, NULL))
        return g_steal_pointer(&plan);
    g_propagate_error(error, g_steal_pointer(&first));
    return NULL;
}

void psim_cli_json_double(JsonBuilder *b, const char *name, double v)
{
    json_builder_set_member_name(b, name);
    if (isfinite(v))
        json_builder_add_double_value(b, v);
    else
        json_builder_add_null_value(b);
}

void psim_cli_json_int(JsonBuilder *b, const char *name, gint64 v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_int_value(b, v);
}

void psim_cli_json_string(JsonBuilder *b, const char *name, const char *v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_string_value(b, v);
}

void psim_cli_print_json(JsonBuilder *b)
{
    g_autoptr(JsonGenerator) gen = json_generator_new();
    g_autoptr(JsonNode) root = json_builder_get_root(b);
    json_generator_set_root(gen, root);
    json_generator_set_pretty(gen, FALSE);
    g_autofree char *s = json_generator_to_data(gen, NULL);
    printf("%s\n", s);
    g_object_unref(b);
}

gboolean psim_cli_stderr_tty(void) { return isatty(2); }

/* "uniform:P[:GBPS[:LATENCY_US]]": P identical devices joined by identical independent links
 * (transfers do not share them, the HEFT papers' model; free when no
 * bandwidth is given), of the device type the graph's cost annotations name when they all name
 * one type ("P" otherwise; annotations keyed "P:0", "P:1"... then address the devices one by
 * one). "stg:P" is uniform:P, the setting of the STG studies (no communication cost). */
static PsimCluster *identical_cluster(const PsimGraph *g, const char *spec, GError **error)
{
    char *end;
    long p = strtol(spec, &end, 10);
    double bw = 0, lat = 0;
    if (*end == ':') {
        bw = g_ascii_strtod(end + 1, &end);
        if (*end == ':')
            lat = g_ascii_strtod(end + 1, &end);
    }
    if (*end || p < 1 || p > 65536 || !(bw >= 0) || !(lat >= 0) || isinf(lat)) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "--cluster uniform:P[:GBPS[:LATENCY_US]]: expected a device count from 1 to "
                    "65536 and non-negative rates, not '%s'", spec);
        return NULL;
    }
    const char *type = NULL;
    gboolean mixed = FALSE;
    for (int32_t v = 0; g && v < psim_graph_n_nodes(g) && !mixed; v++) {
        const PsimNode *n = psim_graph_node(g, v);
        for (int32_t k = 0; k < n->n_costs && !mixed; k++) {
            if (!type)
                type = n->costs[k].device;
            else if (strcmp(type, n->costs[k].device))
                mixed = TRUE;
        }
    }
    if (!type || mixed || strchr(type, ':') || strchr(type, '/') || strchr(type, '*'))
        type = "P";
    PsimCluster *c = psim_cluster_new();
    for (long i = 0; i < p; i++) {
        g_autofree char *name = g_strdup_printf("%s:%ld", type, i);
        if (psim_cluster_device_add(c, name, type, error) < 0) {
            psim_cluster_free(c);
            return NULL;
        }
    }
    psim_cluster_default_link_set(c, (PsimLink){.bandwidth_GBps = bw, .latency_us = lat, .independent = TRUE});
    return c;
}

PsimCluster *psim_cli_cluster(const char *spec, const PsimGraph *g, GError **error)
{
    if (!spec)
        spec = "local";
    if (!*spec) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_USAGE,
                    "--cluster: expected local[:N], uniform:P[:GBPS[:LATENCY_US]], stg:P or a cluster file, not ''");
        return NULL;
    }
    if (g_str_has_prefix(spec, "stg:"))
        return identical_cluster(g, spec + 4, error);
    if (g_str_has_prefix(spec, "uniform:"))
        return identical_cluster(g, spec + 8, error);
    return psim_cluster_from_spec(spec, error);
}
