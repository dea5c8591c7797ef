/* placesim export: converts a graph to another format, optionally with a placement applied. */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "placesim/formats.h"

int psim_cmd_export(int argc, char **argv)
{
    g_autofree char *format = NULL, *out = NULL;
    gboolean training = FALSE;
    g_auto(PsimCliGraphOptions) go = {0};
    GOptionEntry entries[] = {
        {"format", 'f', 0, G_OPTION_ARG_STRING, &format,
         "Output format: json, dot, graphml or pbtxt (default: from the output name, else json)",
         "FMT"},
        {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Write to FILE instead of stdout", "FILE"},
        {"training", 0, 0, G_OPTION_ARG_NONE, &training, "PipeDream: expand into a training graph",
         NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("GRAPH - convert a graph to another format");
    g_option_context_add_main_entries(ctx, entries, NULL);
    psim_cli_graph_options_add(ctx, &go, PSIM_CLI_GRAPH_ALL);
    if (!psim_cli_parse(ctx, &argc, &argv, "export"))
        return 2;
    if (argc != 2)
        return psim_cli_usage("export", "expected one GRAPH");
    PsimFormat f = PSIM_FORMAT_JSON;
    if (format) {
        f = psim_format_from_name(format);
        if (f != PSIM_FORMAT_JSON && f != PSIM_FORMAT_DOT && f != PSIM_FORMAT_GRAPHML &&
            f != PSIM_FORMAT_TF_PBTXT)
            return psim_cli_usage("export", "unknown --format '%s' (json, dot, graphml, pbtxt)", format);
    } else if (out) {
        if (g_str_has_suffix(out, ".dot") || g_str_has_suffix(out, ".gv"))
            f = PSIM_FORMAT_DOT;
        else if (g_str_has_suffix(out, ".graphml"))
            f = PSIM_FORMAT_GRAPHML;
        else if (g_str_has_suffix(out, ".pbtxt"))
            f = PSIM_FORMAT_TF_PBTXT;
    }
    GError *err = NULL;
    go.training = training;
    if (!psim_cli_graph_options_check(&go, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimGraph) g = psim_cli_graph_load(argv[1], &go, &err);
    if (!g)
        return psim_cli_fail(err);
    /* stdout may be the export itself: the CSE count goes to stderr. */
    if (go.cse)
        fprintf(stderr, "placesim: cse removed %d node%s\n", go.n_cse_removed, go.n_cse_removed == 1 ? "" : "s");
    if (out) {
        g_autoptr(PsimCliOutputs) outs = psim_cli_outputs_new();
        const char *tmp = psim_cli_output(outs, out, FALSE, &err);
        if (!tmp || !psim_graph_save(g, tmp, f, &err) || !psim_cli_outputs_commit(outs, &err))
            return psim_cli_fail(err);
        return 0;
    }
    g_autofree char *text = NULL;
    gsize len = 0;
    switch (f) {
    case PSIM_FORMAT_DOT: text = psim_export_dot(g, &err); break;
    case PSIM_FORMAT_GRAPHML: text = psim_export_graphml(g, &err); break;
    case PSIM_FORMAT_TF_PBTXT: text = psim_export_pbtxt(g, &err); break;
    default: text = psim_export_json(g, &len); break;
    }
    if (!text)
        return psim_cli_fail(err);
    fwrite(text, 1, len ? len : strlen(text), stdout);
    return 0;
}
