/* Tests of the DOT and GraphML exporters (through igraph): every node and edge is written with
 * its attributes, the device is the assigned one else the requested one, names with markup
 * characters are escaped, and the GraphML is well-formed XML with unique key ids. */
#include <glib/gstdio.h>
#include <string.h>

#include "placesim/graph.h"
#include "placesim/formats.h"

static int count(const char *s, const char *needle)
{
    int c = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        c++;
    return c;
}

static PsimGraph *make_graph(void)
{
    const char *json =
        "{\"format\": \"placesim.graph/1\", \"name\": \"tiny\", \"nodes\": ["
        "{\"name\": \"x\", \"op\": \"Placeholder\", \"outputs\": [{\"dtype\": \"float32\", \"shape\": [2, 3]}]},"
        "{\"name\": \"a<&>\\\"b\", \"op\": \"Task\", \"inputs\": [\"x:0\", \"x:0\"], \"outputs\": [{\"bytes\": 7}], \"device\": \"GPU:*\"},"
        "{\"name\": \"c\", \"op\": \"Task\", \"inputs\": [\"a<&>\\\"b:0\", \"^x\"], \"outputs\": [{\"bytes\": 5}],"
        " \"device\": \"CPU:*\", \"assigned_device\": \"/job:localhost/replica:0/task:0/device:CPU:1\"}]}";
    GError *err = NULL;
    PsimGraph *g = psim_graph_load_data("t.json", PSIM_FORMAT_JSON, (const guint8 *)json, strlen(json), NULL, &err);
    g_assert_no_error(err);
    return g;
}

static void test_dot(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *dot = psim_export_dot(g, &err);
    g_assert_no_error(err);
    g_assert_true(g_str_has_prefix(strstr(dot, "digraph"), "digraph {"));
    g_assert_cmpint(count(dot, " -> "), ==, 4);
    g_assert_cmpint(count(dot, "op=Task"), ==, 2);
    g_assert_nonnull(strstr(dot, "device=\"/job:localhost/replica:0/task:0/device:CPU:1\""));
    g_assert_nonnull(strstr(dot, "device=\"GPU:*\""));
    g_assert_nonnull(strstr(dot, "kind=control"));
    g_assert_nonnull(strstr(dot, "bytes=24"));
    /* The quote inside the name is escaped, so the name stays one DOT string. */
    g_assert_nonnull(strstr(dot, "name=\"a<&>\\\"b\""));
}

static void on_start(GMarkupParseContext *ctx, const char *el, const char **names, const char **values,
                     gpointer user, GError **error)
{
    (void)ctx;
    (void)error;
    GHashTable *keys = user;
    if (strcmp(el, "key"))
        return;
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], "id"))
            g_assert_true(g_hash_table_add(keys, g_strdup(values[i])));
}

static void test_graphml(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *xml = psim_export_graphml(g, &err);
    g_assert_no_error(err);
    g_assert_cmpint(count(xml, "<node "), ==, 3);
    g_assert_cmpint(count(xml, "<edge "), ==, 4);
    g_assert_nonnull(strstr(xml, "a&lt;&amp;&gt;&quot;b"));
    g_assert_nonnull(strstr(xml, ">/job:localhost/replica:0/task:0/device:CPU:1<"));
    g_assert_nonnull(strstr(xml, ">control<"));
    g_autoptr(GHashTable) keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GMarkupParser parser = {.start_element = on_start};
    g_autoptr(GMarkupParseContext) ctx = g_markup_parse_context_new(&parser, 0, keys, NULL);
    g_assert_true(g_markup_parse_context_parse(ctx, xml, -1, &err));
    g_assert_true(g_markup_parse_context_end_parse(ctx, &err));
    g_assert_no_error(err);
    g_assert_cmpint(g_hash_table_size(keys), >=, 8);
}

static void test_save(void)
{
    g_autoptr(PsimGraph) g = make_graph();
    GError *err = NULL;
    g_autofree char *dir = g_dir_make_tmp("psim-export-XXXXXX", &err);
    g_assert_no_error(err);
    g_autofree char *path = g_build_filename(dir, "g.graphml", NULL);
    g_assert_true(psim_graph_save(g, path, PSIM_FORMAT_GRAPHML, &err));
    g_autofree char *text = NULL;
    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    g_autofree char *direct = psim_export_graphml(g, &err);
    g_assert_cmpstr(text, ==, direct);
    g_remove(path);
    g_rmdir(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/graph/export/dot", test_dot);
    g_test_add_func("/graph/export/graphml", test_graphml);
    g_test_add_func("/graph/export/save", test_save);
    return g_test_run();
}
