/* Tests of cluster files (round trip, errors naming the file and the device or field), local:N
 * and GPU detection. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "placesim/cluster.h"
#include "placesim/graph.h"

static PsimCluster *parse(const char *json, GError **err)
{
    return psim_cluster_parse("c.json", json, strlen(json), err);
}

static void test_roundtrip(void)
{
    GError *err = NULL;
    g_autoptr(PsimCluster) c = parse(
        "{\"format\": \"placesim.cluster/1\", \"devices\": ["
        " {\"name\": \"/job:w/replica:0/task:1/device:CPU:0\", \"type\": \"CPU\", \"memory_bytes\": 8000000000,"
        "  \"peak_gflops\": 50, \"mem_bw_GBps\": 20, \"cores\": [0, 1], \"description\": \"test cpu\","
        "  \"host\": \"node-a\"},"
        " {\"name\": \"GPU:0\", \"type\": \"GPU\", \"peak_gflops\": 9000.5, \"mem_bw_GBps\": 900,"
        "  \"launch_us\": 4, \"streams\": 2, \"sm_count\": 80, \"compute_capability\": \"7.0\"}],"
        " \"links\": [{\"src\": \"CPU:0\", \"dst\": \"GPU:0\", \"bandwidth_GBps\": 12, \"latency_us\": 10},"
        "            {\"src\": \"GPU:0\", \"dst\": \"/job:w/replica:0/task:1/device:CPU:0\", \"latency_us\": 7,"
        "             \"by_destination\": true}],"
        " \"default_link\": {\"bandwidth_GBps\": 3, \"latency_us\": 1, \"independent\": true}}",
        &err);
    g_assert_no_error(err);
    g_assert_nonnull(c);
    g_assert_cmpint(psim_cluster_n_devices(c), ==, 2);
    const PsimDevice *cpu = psim_cluster_device(c, 0), *gpu = psim_cluster_device(c, 1);
    g_assert_cmpstr(cpu->job, ==, "w");
    g_assert_cmpint(cpu->task, ==, 1);
    g_assert_cmpint(cpu->n_cores, ==, 2);
    g_assert_cmpint(cpu->cores[1], ==, 1);
    g_assert_cmpuint(cpu->memory_bytes, ==, 8000000000u);
    g_assert_true(gpu->cls == psim_device_class_find("GPU"));
    g_assert_cmpint(gpu->n_streams, ==, 2);
    g_assert_cmpint(gpu->cc_major, ==, 7);
    g_assert_cmpint(gpu->gpu_ordinal, ==, 0);
    g_assert_cmpfloat(gpu->peak_gflops, ==, 9000.5);
    PsimLink l = psim_cluster_link(c, 0, 1);
    g_assert_cmpfloat(l.bandwidth_GBps, ==, 12);
    g_assert_true(l.independent); /* unset fields, "independent" included, come from the default */
    /* A link's unset fields come from the default link. */
    l = psim_cluster_link(c, 1, 0);
    g_assert_cmpfloat(l.bandwidth_GBps, ==, 3);
    g_assert_cmpfloat(l.latency_us, ==, 7);
    g_assert_true(l.by_destination);
    g_assert_false(psim_cluster_link(c, 0, 1).by_destination);
    g_assert_true(psim_cluster_default_link(c).independent);
    g_assert_cmpfloat_with_epsilon(psim_cluster_link_time(c, 0, 1, 12000), 11.0, 1e-9);

    g_autofree char *json = psim_cluster_to_json(c);
    g_autoptr(PsimCluster) c2 = parse(json, &err);
    g_assert_no_error(err);
    g_autofree char *json2 = psim_cluster_to_json(c2);
    g_assert_cmpstr(json, ==, json2);
    g_assert_cmpint(psim_cluster_device(c2, 0)->n_cores, ==, 2);
    g_assert_cmpfloat(psim_cluster_link(c2, 1, 0).latency_us, ==, 7);
    g_assert_true(psim_cluster_link(c2, 1, 0).by_destination);
    g_assert_cmpstr(psim_cluster_device(c2, 0)->description, ==, "test cpu");
    g_assert_cmpstr(psim_cluster_device(c2, 0)->host, ==, "node-a");
    g_assert_null(psim_cluster_device(c2, 1)->host);
}

static void expect_error(const char *json, const char *const *needles)
{
    GError *err = NULL;
    PsimCluster *c = parse(json, &err);
    g_assert_null(c);
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_true(g_str_has_prefix(err->message, "c.json: "));
    for (int i = 0; needles[i]; i++)
        if (!strstr(err->message, needles[i]))
            g_error("'%s' not in error '%s'", needles[i], err->message);
    g_error_free(err);
}

#define ERR(json, ...) expect_error(json, (const char *const[]){__VA_ARGS__, NULL})
#define HEAD "{\"format\": \"placesim.cluster/1\", "

static void test_errors(void)
{
    ERR("not json", "not valid JSON");
    ERR("[1]", "expected a JSON object");
    ERR("{\"devices\": []}", "format");
    ERR("{\"format\": \"placesim.graph/1\", \"devices\": []}", "placesim.graph/1");
    ERR(HEAD "\"devices\": {}}", "'devices'");
    ERR(HEAD "\"devices\": [{\"type\": \"CPU\"}]}", "devices[0]", "'name'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:x\"}]}", "CPU:x", "malformed");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\"}, {\"name\": \"CPU:0\"}]}", "CPU:0", "twice");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"peak_gflop\": 3}]}", "device 'CPU:0'", "'peak_gflop'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"peak_gflops\": -3}]}", "device 'CPU:0'", "'peak_gflops'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"mem_bw_GBps\": \"fast\"}]}", "'mem_bw_GBps'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"memory_bytes\": 1.5}]}", "'memory_bytes'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"cores\": [0, 0]}]}", "device 'CPU:0'", "twice");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"cores\": [-1]}]}", "cores[0]");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"streams\": 0}]}", "'streams'");
    ERR(HEAD "\"devices\": [{\"name\": \"GPU:0\", \"compute_capability\": \"nine\"}]}", "'compute_capability'");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\"}], \"links\": [{\"src\": \"CPU:0\", \"dst\": \"GPU:3\"}]}",
        "links[0]", "GPU:3");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\"}], \"links\": [{\"src\": \"CPU:0\", \"dst\": \"CPU:0\"}]}",
        "links[0]", "same device");
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\"}, {\"name\": \"CPU:1\"}], \"links\": [{\"src\": \"CPU:0\","
        " \"dst\": \"CPU:1\", \"latency_us\": -1}]}", "links[0]", "'latency_us'");
    ERR(HEAD "\"devices\": [], \"default_link\": {\"bandwidth_GBps\": 1, \"independent\": 1}}",
        "default_link", "'independent'");
    ERR(HEAD "\"devices\": [], \"default_link\": {\"by_destination\": \"yes\"}}", "default_link",
        "'by_destination'");
    ERR(HEAD "\"devices\": [], \"extra\": 1}", "unknown field 'extra'");

    GError *err = NULL;
    g_assert_null(psim_cluster_load("/nonexistent/c.json", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_nonnull(strstr(err->message, "/nonexistent/c.json"));
    g_clear_error(&err);
}

/* Numbers a placer divides by or sums are range-checked at load (costs of 1e308 overran the
 * placer), and wrong-typed fields name the device and field. */
static void test_ranges(void)
{
#define D(fields) HEAD "\"devices\": [{\"name\": \"CPU:0\", " fields "}]}"
    ERR(D("\"peak_gflops\": 1e308"), "device 'CPU:0'", "'peak_gflops'", "out of range");
    ERR(D("\"peak_gflops\": 0"), "device 'CPU:0'", "'peak_gflops'", "out of range");
    ERR(D("\"mem_bw_GBps\": 2e6"), "device 'CPU:0'", "'mem_bw_GBps'", "out of range");
    ERR(D("\"launch_us\": 1e308"), "device 'CPU:0'", "'launch_us'", "out of range");
    ERR(D("\"launch_us\": \"5\""), "device 'CPU:0'", "'launch_us'", "number");
    ERR(D("\"memory_bytes\": 9223372036854775807"), "device 'CPU:0'", "'memory_bytes'");
    ERR(D("\"streams\": {}"), "device 'CPU:0'", "'streams'");
    ERR(D("\"description\": 5"), "device 'CPU:0'", "'description'");
    ERR(D("\"host\": [1]"), "device 'CPU:0'", "'host'");
#undef D
    ERR(HEAD "\"devices\": [{\"name\": {}}]}", "devices[0]", "'name'");
    ERR(HEAD "\"name\": [], \"devices\": []}", "'name'");
    ERR(HEAD "\"devices\": [], \"default_link\": {\"latency_us\": 1e308}}", "default_link", "'latency_us'");
    ERR(HEAD "\"devices\": [], \"default_link\": {\"bandwidth_GBps\": 1e308}}", "default_link",
        "'bandwidth_GBps'");
    ERR(HEAD "\"devices\": [], \"default_link\": {\"bandwidth_GBps\": []}}", "default_link",
        "'bandwidth_GBps'");
    /* Names echoed from the file stay on one line. */
    ERR(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"x\\ny\": 1}]}", "unknown field 'x y'");
    /* Limits that are not errors: 0 bandwidth is a link without a bandwidth limit. */
    GError *err = NULL;
    g_autoptr(PsimCluster) c = parse(HEAD "\"devices\": [{\"name\": \"CPU:0\", \"launch_us\": 1e9, "
                                     "\"memory_bytes\": 4611686018427387904}], "
                                     "\"default_link\": {\"bandwidth_GBps\": 0}}", &err);
    g_assert_no_error(err);
    g_assert_cmpfloat(psim_cluster_device(c, 0)->launch_us, ==, 1e9);
    /* Nesting past the bound, and /dev/zero, end in an error naming the file. */
    GString *deep = g_string_new(HEAD "\"devices\": ");
    for (int i = 0; i < 100000; i++)
        g_string_append_c(deep, '[');
    g_assert_null(parse(deep->str, &err));
    g_assert_nonnull(strstr(err->message, "c.json: JSON nested deeper than 512 levels"));
    g_clear_error(&err);
    g_string_free(deep, TRUE);
    g_assert_null(psim_cluster_load("/dev/zero", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_INPUT);
    g_assert_true(g_str_has_prefix(err->message, "/dev/zero: "));
    g_clear_error(&err);
}

static void test_local(void)
{
    GError *err = NULL;
    long n_cores = sysconf(_SC_NPROCESSORS_ONLN);
    g_autoptr(PsimCluster) c = psim_cluster_from_spec("local:2", &err);
    g_assert_no_error(err);
    int32_t n_cpu = 0;
    for (int32_t i = 0; i < psim_cluster_n_devices(c); i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        if (!d->cls || !d->cls->host)
            continue;
        n_cpu++;
        g_assert_cmpint(d->n_cores, >=, 1);
        g_assert_nonnull(d->description);
    }
    g_assert_cmpint(n_cpu, ==, 2);
    if (n_cores >= 2) /* disjoint cores */
        g_assert_cmpint(psim_cluster_device(c, 0)->cores[0], !=, psim_cluster_device(c, 1)->cores[0]);
    /* The local cluster survives a trip through its file format. */
    g_autofree char *json = psim_cluster_to_json(c);
    g_autoptr(PsimCluster) c2 = parse(json, &err);
    g_assert_no_error(err);
    g_assert_cmpint(psim_cluster_n_devices(c2), ==, psim_cluster_n_devices(c));
    /* The executor copies on the destination's thread: local links say so, and keep it. */
    g_assert_true(psim_cluster_link(c, 0, 1).by_destination);
    g_assert_true(psim_cluster_link(c2, 1, 0).by_destination);
    g_assert_null(psim_cluster_from_spec("local:0", &err));
    g_assert_error(err, PSIM_ERROR, PSIM_ERROR_USAGE);
    g_clear_error(&err);
    g_assert_null(psim_cluster_from_spec("local:two", &err));
    g_clear_error(&err);
}

static void test_detect_gpus(void)
{
    g_autoptr(PsimCluster) c = psim_cluster_new();
    int32_t n = psim_cluster_detect_devices(c);
    g_assert_cmpint(n, ==, psim_cluster_n_devices(c));
    for (int32_t i = 0; i < n; i++) {
        const PsimDevice *d = psim_cluster_device(c, i);
        g_assert_true(d->cls == psim_device_class_find("GPU"));
        g_assert_cmpint(d->gpu_ordinal, ==, i);
        g_assert_cmpint(d->sm_count, >, 0);
        g_assert_cmpint(d->cc_major, >, 0);
        g_assert_cmpuint(d->memory_bytes, >, 0);
        g_assert_cmpfloat(d->peak_gflops, >, 0);
    }
#ifndef PSIM_HAVE_CUDA
    g_assert_cmpint(n, ==, 0);
#endif
    /* Asking twice appends GPU:n.. after the ones already there, never a duplicate name. */
    if (n > 0) {
        g_assert_cmpint(psim_cluster_detect_devices(c), ==, n);
        g_assert_cmpint(psim_cluster_device_find(c, "GPU:0"), ==, 0);
        g_autofree char *name = g_strdup_printf("GPU:%d", n);
        g_assert_cmpint(psim_cluster_device_find(c, name), ==, n);
    }
}

/* Resident memory of this process in bytes (Linux). */
static uint64_t rss_bytes(void)
{
    g_autofree char *statm = NULL;
    if (!g_file_get_contents("/proc/self/statm", &statm, NULL, NULL))
        return 0;
    unsigned long size = 0, resident = 0;
    if (sscanf(statm, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* 65536 identical devices (--cluster uniform:65536) in well under a second and a few MB: the
 * links are stored for the pairs set only (a dense 65536^2 table is 34 GB), names are hashed
 * (adding a device checked every other one: quadratic), and the accessors still answer for
 * every pair. */
static void test_sparse_uniform(void)
{
    uint64_t rss0 = rss_bytes();
    gint64 t0 = g_get_monotonic_time();
    g_autoptr(PsimCluster) c = psim_cluster_new();
    for (int32_t i = 0; i < 65536; i++) {
        char name[32];
        g_snprintf(name, sizeof name, "P:%d", i);
        g_assert_cmpint(psim_cluster_device_add(c, name, "P", NULL), ==, i);
    }
    psim_cluster_default_link_set(c, (PsimLink){.bandwidth_GBps = 10, .latency_us = 1, .independent = TRUE});
    psim_cluster_link_set(c, 7, 65535, (PsimLink){.bandwidth_GBps = 1, .latency_us = 9});
    double secs = (double)(g_get_monotonic_time() - t0) * 1e-6;
    uint64_t grown = rss_bytes() - rss0;
    g_test_message("uniform:65536 built in %.3f s, %.1f MB", secs, grown / 1e6);
    g_assert_cmpfloat(secs, <, 2.0); /* 0.3 s here; ASan builds are slower */
    g_assert_cmpuint(grown, <, 128u << 20); /* 27 MB here, 71 MB under ASan */
    g_assert_cmpint(psim_cluster_device_find(c, "P:65535"), ==, 65535);
    g_assert_cmpint(psim_cluster_device_find(c, "/job:localhost/replica:0/task:0/device:P:40000"), ==, 40000);
    g_assert_cmpint(psim_cluster_device_find(c, "P:65536"), ==, -1);
    g_assert_cmpint(psim_cluster_device_add(c, "P:3", "P", NULL), ==, -1); /* listed twice */
    g_assert_cmpfloat(psim_cluster_link(c, 65535, 7).latency_us, ==, 1);
    g_assert_cmpfloat(psim_cluster_link(c, 7, 65535).latency_us, ==, 9);
    g_assert_true(psim_cluster_link_is_set(c, 7, 65535));
    g_assert_cmpint(psim_cluster_links_from(c, 7), ==, 1);
    g_assert_cmpint(psim_cluster_links_from(c, 8), ==, 0);
    int32_t n_links;
    g_autofree PsimLinkEnds *ends = psim_cluster_links_set(c, &n_links);
    g_assert_cmpint(n_links, ==, 1);
    g_assert_cmpint(ends[0].src, ==, 7);
    g_assert_cmpint(ends[0].dst, ==, 65535);
}

/* A cluster file of 20000 devices and 20000 links loads in linear time: each device name was
 * compared with every other one and each link end searched linearly (some 1e9 string
 * comparisons here); now both are hashed. Its JSON export lists the links set, not every pair
 * (it took 40 s here, loading included). */
static void test_sparse_json(void)
{
    const int n = 20000;
    GString *s = g_string_new("{\"format\": \"placesim.cluster/1\", \"devices\": [");
    for (int i = 0; i < n; i++)
        g_string_append_printf(s, "%s{\"name\": \"/job:w/replica:0/task:%d/device:CPU:0\"}", i ? ", " : "", i);
    g_string_append(s, "], \"links\": [");
    for (int i = 0; i < n; i++)
        g_string_append_printf(s, "%s{\"src\": \"/job:w/replica:0/task:%d/device:CPU:0\", "
                                  "\"dst\": \"/job:w/replica:0/task:%d/device:CPU:0\", \"latency_us\": 3}",
                               i ? ", " : "", i, (i + 1) % n);
    g_string_append(s, "]}");
    g_autoptr(GError) err = NULL;
    gint64 t0 = g_get_monotonic_time();
    g_autoptr(PsimCluster) c = psim_cluster_parse("many.json", s->str, s->len, &err);
    double secs = (double)(g_get_monotonic_time() - t0) * 1e-6;
    g_string_free(s, TRUE);
    g_assert_no_error(err);
    g_test_message("%d devices and links loaded in %.3f s", n, secs);
    g_assert_cmpfloat(secs, <, 4.0);
    g_assert_cmpint(psim_cluster_n_devices(c), ==, n);
    g_assert_cmpfloat(psim_cluster_link(c, n - 1, 0).latency_us, ==, 3);
    g_assert_false(psim_cluster_link_is_set(c, 0, n - 1));
    t0 = g_get_monotonic_time();
    g_autofree char *json = psim_cluster_to_json(c);
    g_assert_cmpfloat((double)(g_get_monotonic_time() - t0) * 1e-6, <, 4.0);
    g_assert_nonnull(strstr(json, "\"/job:w/replica:0/task:19999/device:CPU:0\""));
    g_assert_nonnull(strstr(json, "\"src\""));
}

/* A device name that repeats a part takes the last one, and frees the first (fuzz-cluster found
 * the leak; LeakSanitizer in CI fails this test without the fix). */
static void test_name_repeated_part(void)
{
    g_autofree char *full = psim_device_name_full("/job:a/job:b/replica:1/task:2/device:CPU:3");
    g_assert_cmpstr(full, ==, "/job:b/replica:1/task:2/device:CPU:3");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/cluster/json/roundtrip", test_roundtrip);
    g_test_add_func("/cluster/name-repeated-part", test_name_repeated_part);
    g_test_add_func("/cluster/json/errors", test_errors);
    g_test_add_func("/cluster/json/ranges", test_ranges);
    g_test_add_func("/cluster/local", test_local);
    g_test_add_func("/cluster/detect-gpus", test_detect_gpus);
    g_test_add_func("/cluster/sparse/uniform-65536", test_sparse_uniform);
    g_test_add_func("/cluster/sparse/json-many", test_sparse_json);
    return g_test_run();
}
