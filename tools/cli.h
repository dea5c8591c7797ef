/* Shared helpers of the placesim subcommands: errors and exit codes, graph loading, JSON output.
 * Exit codes: 0 ok, 2 bad input or usage, 1 runtime failure. */
#ifndef PLACESIM_TOOLS_CLI_H
#define PLACESIM_TOOLS_CLI_H

#include <json-glib/json-glib.h>

#include "placesim/cluster.h"
#include "placesim/graph.h"
#include "placesim/plan.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} PsimCommand;

/* Prints "placesim: MESSAGE" on stderr and returns the exit code for the error (2 for input and
 * usage errors, 1 otherwise). Frees err. */
int psim_cli_fail(GError *err);
/* Prints a usage error "placesim SUB: message" and returns 2. */
int psim_cli_usage(const char *sub, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* Parses options with GOption; on error prints it and returns FALSE (the caller exits 2). */
gboolean psim_cli_parse(GOptionContext *ctx, int *argc, char ***argv, const char *sub);
/* Loads a graph file, or a built-in model written "zoo:NAME" or a bare zoo name when no file of
 * that name exists. */
PsimGraph *psim_cli_load_graph(const char *spec, gboolean training, GError **error);
/* Loads plan file plan_path; with graph_spec (the GRAPH argument given beside --plan; NULL: none)
 * also that graph, which must be the plan's (an INPUT error naming both otherwise). */
PsimPlan *psim_cli_load_plan(const char *plan_path, const char *graph_spec, gboolean training,
                             GError **error);
/* The cluster for --cluster SPEC: "local", "local:N", a cluster JSON file, or
 * "uniform:P[:GBPS[:LATENCY_US]]" / "stg:P" (P identical devices of the type the graph's cost
 * annotations name, joined by independent links). g may be NULL for the first forms. */
PsimCluster *psim_cli_cluster(const char *spec, const PsimGraph *g, GError **error);
/* Prints the builder's root as one JSON object on stdout and frees the builder. */
void psim_cli_print_json(JsonBuilder *b);
/* TRUE when stderr is a terminal (progress bars go there only then). */
gboolean psim_cli_stderr_tty(void);

/* Default feeds (names and tensors appended; inputs already named are skipped) and fetches (refs
 * appended as PsimPort) for running a graph; see tools/feeds.c. */
gboolean psim_cli_default_feeds(const PsimGraph *g, GPtrArray *names, GPtrArray *tensors,
                                GError **error);
void psim_cli_default_fetches(const PsimGraph *g, GArray *ports);
/* Does feed name `name` designate output 0 of node n? (node name, "node:0", tensor name) */
gboolean psim_cli_feed_names_input(const PsimNode *n, const char *name);

int psim_cmd_inspect(int argc, char **argv);
int psim_cmd_export(int argc, char **argv);
int psim_cmd_compare(int argc, char **argv);
int psim_cmd_sim(int argc, char **argv);
int psim_cmd_study(int argc, char **argv);
int psim_cmd_cluster(int argc, char **argv);
int psim_cmd_profile(int argc, char **argv);
int psim_cmd_run(int argc, char **argv);
int psim_cmd_place(int argc, char **argv);

#endif
