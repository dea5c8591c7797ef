/* Graph IR scale and import speed: builds a generated layered random DAG of N Task nodes (about
 * two inputs each, byte-sized outputs), sorts it topologically, and reports wall time (median of
 * R runs) and peak memory per node; then times the import of every shared model file.
 * Each build runs in a forked child so that its peak RSS is its own. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

typedef struct {
    double build_s, topo_s;
    double cpu_s; /* user + system CPU time of build and sort (less sensitive to a busy machine) */
    long rss_before_kb, hwm_kb;
    int64_t edges;
    int ok;
} Run;

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}

/* Resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+). */
static void reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1)
            perror("clear_refs");
        close(fd);
    }
}

static uint32_t xorshift(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

/* Layers of `width` nodes; a node of layer L > 0 reads one node of layer L-1 and, three times in
 * four, one more node of the previous four layers. */
static PsimGraph *generate(int32_t n, int32_t width)
{
    PsimGraph *g = psim_graph_new("random-dag");
    uint32_t s = 12345;
    char name[32];
    for (int32_t i = 0; i < n; i++) {
        /* Names "n<i>" written by hand: g_snprintf would be a fifth of the build time, which
         * importers reading names from a file do not pay. */
        char digits[16];
        int nd = 0;
        for (int32_t x = i; nd == 0 || x > 0; x /= 10)
            digits[nd++] = (char)('0' + x % 10);
        name[0] = 'n';
        for (int k = 0; k < nd; k++)
            name[1 + k] = digits[nd - 1 - k];
        name[1 + nd] = '\0';
        PsimNode *v = psim_graph_node_add(g, name, "Task", NULL);
        psim_graph_node_outputs_set(g, v, 1);
        v->outputs[0].bytes = 1024 + xorshift(&s) % 65536;
        int32_t layer = i / width;
        if (layer == 0)
            continue;
        int32_t prev = (layer - 1) * width + (int32_t)(xorshift(&s) % (uint32_t)width);
        psim_graph_node_input_add(g, v, (PsimPort){prev, 0});
        if (xorshift(&s) % 4 != 0) {
            int32_t lo = MAX(0, layer - 4) * width;
            int32_t other = lo + (int32_t)(xorshift(&s) % (uint32_t)(layer * width - lo));
            if (other != prev)
                psim_graph_node_input_add(g, v, (PsimPort){other, 0});
        }
    }
    return g;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static Run run_once(int32_t n, int32_t width)
{
    Run r = {0};
    double c0 = cpu_seconds();
    reset_hwm();
    r.rss_before_kb = status_kb("VmRSS");
    gint64 t0 = g_get_monotonic_time();
    PsimGraph *g = generate(n, width);
    gint64 t1 = g_get_monotonic_time();
    GError *err = NULL;
    int32_t *order = psim_graph_topo_order(g, &err);
    gint64 t2 = g_get_monotonic_time();
    r.cpu_s = cpu_seconds() - c0;
    r.hwm_kb = status_kb("VmHWM");
    r.build_s = (t1 - t0) / 1e6;
    r.topo_s = (t2 - t1) / 1e6;
    r.edges = psim_graph_n_edges(g);
    /* Check the order: every node after its inputs. */
    r.ok = order != NULL;
    if (order) {
        int32_t *pos = g_new(int32_t, n);
        for (int32_t i = 0; i < n; i++)
            pos[order[i]] = i;
        for (int32_t v = 0; v < n && r.ok; v++) {
            const PsimNode *nd = psim_graph_node(g, v);
            for (int32_t k = 0; k < nd->n_inputs; k++)
                if (pos[nd->inputs[k].node] >= pos[v])
                    r.ok = 0;
        }
        g_free(pos);
    } else {
        fprintf(stderr, "topo: %s\n", err->message);
        g_error_free(err);
    }
    g_free(order);
    psim_graph_free(g);
    return r;
}

static Run run_forked(int32_t n, int32_t width)
{
    int fds[2];
    Run r = {0};
    if (pipe(fds) != 0)
        return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        Run c = run_once(n, width);
        ssize_t w = write(fds[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r)
        memset(&r, 0, sizeof r);
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return r;
}

static int cmp_path(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Times psim_graph_load on each file (median of reps); returns how many loaded. */
static int time_imports(const char *label, const char *dir, const char *suffix, gboolean training,
                        int reps, gboolean per_file)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    if (!d) {
        printf("%-12s (no folder %s)\n", label, dir);
        return 0;
    }
    GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
    const char *f;
    while ((f = g_dir_read_name(d)))
        if (g_str_has_suffix(f, suffix) && strcmp(f, "LICENSE.txt"))
            g_ptr_array_add(files, g_build_filename(dir, f, NULL));
    g_ptr_array_sort(files, cmp_path);
    int loaded = 0;
    double total_ms = 0, total_cpu_ms = 0;
    int64_t total_nodes = 0;
    PsimImportOptions opts = {.training = training};
    for (guint i = 0; i < files->len; i++) {
        const char *path = g_ptr_array_index(files, i);
        double *t = g_new(double, reps), *c = g_new(double, reps);
        int32_t nodes = -1;
        char *errmsg = NULL;
        for (int r = 0; r < reps; r++) {
            GError *err = NULL;
            gint64 t0 = g_get_monotonic_time();
            double c0 = cpu_seconds();
            PsimGraph *g = psim_graph_load(path, &opts, &err);
            t[r] = (g_get_monotonic_time() - t0) / 1e3;
            c[r] = (cpu_seconds() - c0) * 1e3;
            if (g) {
                nodes = psim_graph_n_nodes(g);
                psim_graph_free(g);
            } else if (!errmsg) {
                errmsg = g_strdup(err->message);
            }
            g_clear_error(&err);
        }
        double ms = psim_stats_median(t, reps), cms = psim_stats_median(c, reps);
        g_free(t);
        g_free(c);
        g_autofree char *base = g_path_get_basename(path);
        if (nodes >= 0) {
            loaded++;
            total_ms += ms;
            total_cpu_ms += cms;
            total_nodes += nodes;
            if (per_file)
                printf("%-12s %-24s %7d nodes %9.3f ms wall %9.3f ms CPU\n", label, base, nodes, ms,
                       cms);
        } else {
            printf("%-12s %-28s FAILED: %s\n", label, base, errmsg);
        }
        g_free(errmsg);
    }
    if (!per_file || loaded > 1)
        printf("%-12s %-24s %7" G_GINT64_FORMAT " nodes %9.3f ms wall %9.3f ms CPU (%d of %u files)\n",
               label, "total", total_nodes, total_ms, total_cpu_ms, loaded, files->len);
    g_ptr_array_free(files, TRUE);
    return loaded;
}

int main(int argc, char **argv)
{
    int nodes = 1000000, reps = 5, width = 1000;
    gboolean no_import = FALSE, no_scale = FALSE;
    g_autofree char *data = NULL;
    GOptionEntry entries[] = {
        {"nodes", 'n', 0, G_OPTION_ARG_INT, &nodes, "Nodes of the generated graph (1000000)", "N"},
        {"width", 'w', 0, G_OPTION_ARG_INT, &width, "Nodes per layer (1000)", "W"},
        {"reps", 'r', 0, G_OPTION_ARG_INT, &reps, "Repetitions; medians are reported (5)", "R"},
        {"data", 'd', 0, G_OPTION_ARG_FILENAME, &data, "Shared data folder ($PSIM_DATA)", "DIR"},
        {"no-import", 0, 0, G_OPTION_ARG_NONE, &no_import, "Skip the import timings", NULL},
        {"no-scale", 0, 0, G_OPTION_ARG_NONE, &no_scale, "Skip the generated graph", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx = g_option_context_new("- graph IR scale and import benchmark");
    g_option_context_add_main_entries(ctx, entries, NULL);
    GError *err = NULL;
    if (!g_option_context_parse(ctx, &argc, &argv, &err) || nodes < 1 || reps < 1 || width < 1) {
        fprintf(stderr, "bench-graph: %s\n", err ? err->message : "bad --nodes, --width or --reps");
        return 2;
    }
    if (!data)
        data = g_strdup(g_getenv("PSIM_DATA") ? g_getenv("PSIM_DATA") : "../shared/data");
    int rc = 0;
    if (!no_scale) {
        double *b = g_new(double, reps), *t = g_new(double, reps), *tot = g_new(double, reps),
               *bpn = g_new(double, reps), *cpu = g_new(double, reps);
        int64_t edges = 0;
        for (int r = 0; r < reps; r++) {
            Run x = run_forked(nodes, width);
            if (!x.ok) {
                fprintf(stderr, "bench-graph: run %d failed (bad order or child died)\n", r);
                return 1;
            }
            b[r] = x.build_s;
            t[r] = x.topo_s;
            tot[r] = x.build_s + x.topo_s;
            cpu[r] = x.cpu_s;
            bpn[r] = (x.hwm_kb - x.rss_before_kb) * 1024.0 / nodes;
            edges = x.edges;
        }
        double mt = psim_stats_median(tot, reps), mb = psim_stats_median(bpn, reps);
        printf("generated DAG: %d nodes, %" G_GINT64_FORMAT " edges, %d per layer; median of %d runs\n",
               nodes, edges, width, reps);
        printf("  build            %8.3f s\n", psim_stats_median(b, reps));
        printf("  topological sort %8.3f s\n", psim_stats_median(t, reps));
        printf("  build + sort     %8.3f s   (target < 1 s: %s)\n", mt, mt < 1 ? "met" : "MISSED");
        printf("  CPU time         %8.3f s   (user + system of build + sort)\n",
               psim_stats_median(cpu, reps));
        printf("  peak RSS delta   %8.1f bytes/node   (target < 400: %s)\n", mb, mb < 400 ? "met" : "MISSED");
        if (mt >= 1 || mb >= 400)
            rc = 3;
        g_free(b);
        g_free(t);
        g_free(tot);
        g_free(bpn);
        g_free(cpu);
    }
    if (!no_import) {
        printf("import (psim_graph_load: read, parse, finalize, fold, infer shapes), median of %d "
               "(CPU = user + system time of the process):\n", reps);
        g_autofree char *onnx = g_build_filename(data, "onnx-light", NULL);
        g_autofree char *tf = g_build_filename(data, "tf", NULL);
        g_autofree char *pd = g_build_filename(data, "pipedream", NULL);
        g_autofree char *stg = g_build_filename(data, "stg", "50", NULL);
        time_imports("onnx", onnx, ".onnx", FALSE, reps, TRUE);
        time_imports("tf", tf, ".pb", FALSE, reps, TRUE);
        time_imports("pipedream", pd, ".txt", FALSE, reps, TRUE);
        time_imports("pd-training", pd, ".txt", TRUE, reps, FALSE);
        time_imports("stg", stg, ".stg", FALSE, reps, FALSE);
    }
    return rc;
}
