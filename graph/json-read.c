/* JSON reading through json-glib, for the small files (cluster, placement, trace): a bounded read,
 * an iterative scan that refuses deep nesting before json-glib's recursive parser can overflow the
 * stack, and typed member getters whose errors name the file, place and field. Graphs and plans,
 * which can be large, are read through the yajl document (graph/jdoc.c) with the same getters. */
#include "graph/graph-private.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- reading and parsing ---- */

static const char *sniff_json(const char *path, const guint8 *head, gsize len)
{
    (void)path;
    gsize i = 0;
    if (len >= 3 && !memcmp(head, "\xef\xbb\xbf", 3))
        i = 3; /* a UTF-8 byte order mark, as some editors write */
    while (i < len && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r'))
        i++;
    if (i == len)
        return len ? NULL : "empty file (expected a JSON object)";
    if (head[i] != '{' && head[i] != '[')
        return "not JSON (the first character is not '{')";
    for (; i < len; i++)
        if (head[i] < 0x20 && head[i] != '\t' && head[i] != '\n' && head[i] != '\r')
            return "not JSON text (it holds control bytes)";
    return NULL;
}

/* Brackets are counted outside strings only; the scan keeps no stack, so its own depth is not
 * bounded by anything but the count. Raw control bytes other than white space are refused as
 * the JSON grammar says (json-glib would take them inside strings). */
static gboolean scan_json(const char *path, const char *data, gsize len, GError **error)
{
    int depth = 0, line = 1;
    gboolean in_string = FALSE, escape = FALSE;
    for (gsize i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)data[i];
        if (ch == '\n')
            line++;
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            psim__error_file(error, path, "not valid JSON: line %d: control byte 0x%02x", line, ch);
            return FALSE;
        }
        if (in_string) {
            if (escape)
                escape = FALSE;
            else if (ch == '\\')
                escape = TRUE;
            else if (ch == '"')
                in_string = FALSE;
        } else if (ch == '"') {
            in_string = TRUE;
        } else if (ch == '{' || ch == '[') {
            if (++depth > PSIM_JSON_MAX_DEPTH) {
                psim__error_file(error, path, "JSON nested deeper than %d levels (line %d)",
                                 PSIM_JSON_MAX_DEPTH, line);
                return FALSE;
            }
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    return TRUE;
}

JsonNode *psim_json_parse(const char *path, const char *data, gsize len, GError **error)
{
    g_return_val_if_fail(data != NULL || len == 0, NULL);
    if (!path)
        path = "input";
    if (!scan_json(path, data, len, error))
        return NULL;
    g_autoptr(JsonParser) parser = json_parser_new_immutable();
    g_autoptr(GError) perr = NULL;
    if (!json_parser_load_from_data(parser, data ? data : "", (gssize)len, &perr)) {
        /* json-glib says "<data>:LINE:COL: Parse error: WHAT": keep the place and the what. */
        const char *m = perr->message;
        int ln = 0, col = 0, used = 0;
        if (g_str_has_prefix(m, "<data>:") && sscanf(m + 7, "%d:%d: %n", &ln, &col, &used) == 2 &&
            used > 0) {
            m += 7 + used;
            if (g_str_has_prefix(m, "Parse error: "))
                m += strlen("Parse error: ");
            psim__error_file(error, path, "not valid JSON: line %d, column %d: %s", ln, col, m);
        } else {
            psim__error_file(error, path, "not valid JSON: %s", m);
        }
        return NULL;
    }
    JsonNode *root = json_parser_get_root(parser);
    if (!root) {
        psim__error_file(error, path, "empty file (expected a JSON object)");
        return NULL;
    }
    return json_node_ref(root);
}

GBytes *psim__json_read(const char *path, GError **error)
{
    return psim_input_read(path, PSIM_INPUT_MAX_BYTES, sniff_json, error);
}

JsonNode *psim_json_load(const char *path, GError **error)
{
    g_autoptr(GBytes) b = psim__json_read(path, error);
    if (!b)
        return NULL;
    gsize len = 0;
    const char *data = g_bytes_get_data(b, &len);
    return psim_json_parse(path, data ? data : "", len, error);
}

/* ---- typed access ---- */

gboolean psim_json_fail(const PsimJsonAt *at, GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (at->where)
        psim__error_file(error, at->path, "%s: %s", at->where, msg);
    else
        psim__error_file(error, at->path, "%s", msg);
    return FALSE;
}

gboolean psim__json_number_in(const PsimJsonAt *at, const char *key, double v, double lo,
                              double hi, double *out, GError **error)
{
    if (!isfinite(v) || v < lo || v > hi)
        return psim_json_fail(at, error, "field '%s' = %g is out of range [%g, %g]", key, v, lo, hi);
    *out = v;
    return TRUE;
}

gboolean psim__json_int_in(const PsimJsonAt *at, const char *key, int64_t v, int64_t lo,
                           int64_t hi, int64_t *out, GError **error)
{
    if (v < lo || v > hi)
        return psim_json_fail(at, error,
                              "field '%s' = %" G_GINT64_FORMAT " is out of range [%" G_GINT64_FORMAT
                              ", %" G_GINT64_FORMAT "]", key, v, lo, hi);
    *out = v;
    return TRUE;
}

/* The member, or NULL when it is absent or JSON null (both mean "not given"). */
static JsonNode *member(JsonObject *o, const char *key)
{
    JsonNode *n = json_object_get_member(o, key);
    return n && !JSON_NODE_HOLDS_NULL(n) ? n : NULL;
}

static GType value_type(JsonNode *n)
{
    return n && JSON_NODE_HOLDS_VALUE(n) ? json_node_get_value_type(n) : G_TYPE_INVALID;
}

const char *psim_json_node_string(JsonNode *n)
{
    return value_type(n) == G_TYPE_STRING ? json_node_get_string(n) : NULL;
}

gboolean psim_json_node_number(JsonNode *n, double *out)
{
    GType t = value_type(n);
    if (t == G_TYPE_INT64)
        *out = (double)json_node_get_int(n);
    else if (t == G_TYPE_DOUBLE)
        *out = json_node_get_double(n);
    else
        return FALSE;
    return TRUE;
}

gboolean psim_json_node_int(JsonNode *n, int64_t *out)
{
    if (value_type(n) != G_TYPE_INT64)
        return FALSE;
    *out = json_node_get_int(n);
    return TRUE;
}

gboolean psim_json_get_string(const PsimJsonAt *at, JsonObject *o, const char *key,
                              const char **out, GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    if (value_type(n) != G_TYPE_STRING)
        return psim_json_fail(at, error, "field '%s' must be a string", key);
    *out = json_node_get_string(n);
    return TRUE;
}

gboolean psim_json_get_number(const PsimJsonAt *at, JsonObject *o, const char *key, double lo,
                              double hi, double *out, GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    double v;
    if (!psim_json_node_number(n, &v))
        return psim_json_fail(at, error, "field '%s' must be a number", key);
    return psim__json_number_in(at, key, v, lo, hi, out, error);
}

gboolean psim_json_get_int(const PsimJsonAt *at, JsonObject *o, const char *key, int64_t lo,
                           int64_t hi, int64_t *out, GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    int64_t v;
    if (!psim_json_node_int(n, &v))
        return psim_json_fail(at, error, "field '%s' must be an integer", key);
    return psim__json_int_in(at, key, v, lo, hi, out, error);
}

gboolean psim_json_get_bool(const PsimJsonAt *at, JsonObject *o, const char *key, gboolean *out,
                            GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    if (value_type(n) != G_TYPE_BOOLEAN)
        return psim_json_fail(at, error, "field '%s' must be true or false", key);
    *out = json_node_get_boolean(n);
    return TRUE;
}

gboolean psim_json_get_array(const PsimJsonAt *at, JsonObject *o, const char *key,
                             JsonArray **out, GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    if (!JSON_NODE_HOLDS_ARRAY(n))
        return psim_json_fail(at, error, "field '%s' must be a list", key);
    *out = json_node_get_array(n);
    return TRUE;
}

gboolean psim_json_get_object(const PsimJsonAt *at, JsonObject *o, const char *key,
                              JsonObject **out, GError **error)
{
    JsonNode *n = member(o, key);
    if (!n)
        return TRUE;
    if (!JSON_NODE_HOLDS_OBJECT(n))
        return psim_json_fail(at, error, "field '%s' must be an object", key);
    *out = json_node_get_object(n);
    return TRUE;
}
