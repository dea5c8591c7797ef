/* The fast JSON document: yajl's event parser (no recursion) feeding a compact tree built in one
 * arena. Children are collected on one value stack and copied into the arena as a contiguous
 * block when their container closes, so a container costs one allocation from the arena and no
 * per-value malloc; strings and keys are copied into the arena NUL-terminated. */
#include "graph/graph-private.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

enum { ARENA_BLOCK = 1 << 20 };

struct PsimJDoc {
    GPtrArray *blocks; /* g_free'd */
    char *cur;
    size_t left;
    PsimJ root;
};

static void *arena_alloc(PsimJDoc *d, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > d->left) {
        size_t sz = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK;
        char *b = g_malloc(sz);
        g_ptr_array_add(d->blocks, b);
        if (sz == n) /* a big block of its own: keep the current one for small values */
            return b;
        d->cur = b;
        d->left = sz;
    }
    void *p = d->cur;
    d->cur += n;
    d->left -= n;
    return p;
}

static const char *arena_str(PsimJDoc *d, const unsigned char *s, size_t len)
{
    char *p = arena_alloc(d, len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

typedef struct {
    guint start;     /* first child on the value stack */
    gboolean object;
    const char *key; /* the key this container is the value of (in an object), or NULL */
} Frame;

typedef struct {
    PsimJDoc *d;
    GArray *stack;  /* PsimJMember: the children of the open containers */
    GArray *frames; /* Frame */
    const char *key; /* the key just read, for the next value */
    gboolean too_deep;
} Builder;

static int add_value(Builder *b, PsimJ v)
{
    if (!b->frames->len) {
        b->d->root = v;
        return 1;
    }
    PsimJMember m = {b->key, v};
    b->key = NULL;
    g_array_append_val(b->stack, m);
    return 1;
}

static int on_null(void *ctx)
{
    return add_value(ctx, (PsimJ){.type = PSIM_J_NULL});
}

static int on_bool(void *ctx, int v)
{
    return add_value(ctx, (PsimJ){.type = PSIM_J_BOOL, .v.b = v != 0});
}

/* Integers exactly where they fit int64, else as doubles (as json-glib reads them). */
static int on_number(void *ctx, const char *s, size_t len)
{
    /* The common case, a short plain integer, without a copy or strtoll. */
    size_t i = s[0] == '-';
    if (len > i && len - i <= 18) {
        int64_t v = 0;
        size_t k = i;
        for (; k < len && s[k] >= '0' && s[k] <= '9'; k++)
            v = v * 10 + (s[k] - '0');
        if (k == len)
            return add_value(ctx, (PsimJ){.type = PSIM_J_INT, .v.i = i ? -v : v});
    }
    char small[64];
    g_autofree char *big = NULL;
    char *t = small;
    if (len >= sizeof small)
        t = big = g_malloc(len + 1);
    memcpy(t, s, len);
    t[len] = '\0';
    gboolean integral = !memchr(t, '.', len) && !memchr(t, 'e', len) && !memchr(t, 'E', len);
    if (integral) {
        errno = 0;
        char *end = NULL;
        long long v = strtoll(t, &end, 10);
        if (errno == 0 && end == t + len)
            return add_value(ctx, (PsimJ){.type = PSIM_J_INT, .v.i = (int64_t)v});
    }
    return add_value(ctx, (PsimJ){.type = PSIM_J_DOUBLE, .v.d = g_ascii_strtod(t, NULL)});
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    Builder *b = ctx;
    return add_value(b, (PsimJ){.type = PSIM_J_STRING, .n = (uint32_t)MIN(len, G_MAXUINT32),
                                .v.s = arena_str(b->d, s, len)});
}

static int on_key(void *ctx, const unsigned char *s, size_t len)
{
    Builder *b = ctx;
    b->key = arena_str(b->d, s, len);
    return 1;
}

static int open_container(Builder *b, gboolean object)
{
    if (b->frames->len >= PSIM_JSON_MAX_DEPTH) {
        b->too_deep = TRUE;
        return 0;
    }
    Frame f = {b->stack->len, object, b->key};
    b->key = NULL;
    g_array_append_val(b->frames, f);
    return 1;
}

static int close_container(Builder *b)
{
    Frame f = g_array_index(b->frames, Frame, b->frames->len - 1);
    g_array_set_size(b->frames, b->frames->len - 1);
    guint n = b->stack->len - f.start;
    const PsimJMember *kids = &g_array_index(b->stack, PsimJMember, f.start);
    PsimJ v = {.type = f.object ? PSIM_J_OBJECT : PSIM_J_ARRAY, .n = n};
    if (f.object) {
        PsimJMember *m = arena_alloc(b->d, sizeof(PsimJMember) * (n ? n : 1));
        memcpy(m, kids, sizeof(PsimJMember) * n);
        v.v.m = m;
    } else {
        PsimJ *a = arena_alloc(b->d, sizeof(PsimJ) * (n ? n : 1));
        for (guint i = 0; i < n; i++)
            a[i] = kids[i].v;
        v.v.a = a;
    }
    g_array_set_size(b->stack, f.start);
    b->key = f.key;
    return add_value(b, v);
}

static int on_start_map(void *ctx) { return open_container(ctx, TRUE); }
static int on_start_array(void *ctx) { return open_container(ctx, FALSE); }
static int on_end(void *ctx) { return close_container(ctx); }

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_bool,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

void psim_jdoc_free(PsimJDoc *d)
{
    if (!d)
        return;
    g_ptr_array_free(d->blocks, TRUE);
    g_free(d);
}

const PsimJ *psim_jdoc_root(const PsimJDoc *d)
{
    return &d->root;
}

PsimJDoc *psim_jdoc_parse(const char *path, const char *data, gsize len, GError **error)
{
    g_return_val_if_fail(data != NULL || len == 0, NULL);
    if (!path)
        path = "input";
    gsize i = 0;
    if (len >= 3 && !memcmp(data, "\xef\xbb\xbf", 3))
        i = 3; /* a UTF-8 byte order mark, as some editors write */
    gsize body = i;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    if (i == len) {
        psim__error_file(error, path, "empty file (expected a JSON object)");
        return NULL;
    }
    PsimJDoc *d = g_new0(PsimJDoc, 1);
    d->blocks = g_ptr_array_new_with_free_func(g_free);
    Builder b = {.d = d, .stack = g_array_sized_new(FALSE, FALSE, sizeof(PsimJMember), 1024),
                 .frames = g_array_sized_new(FALSE, FALSE, sizeof(Frame), 64)};
    yajl_handle h = yajl_alloc(&callbacks, NULL, &b);
    yajl_status st = yajl_parse(h, (const unsigned char *)data + body, len - body);
    gboolean at_end = st == yajl_status_ok;
    if (at_end)
        st = yajl_complete_parse(h);
    if (st != yajl_status_ok) {
        size_t at = body + (at_end ? len - body : yajl_get_bytes_consumed(h));
        int line = 1, col = 1;
        for (size_t k = 0; k < at && k < len; k++, col++)
            if (data[k] == '\n') {
                line++;
                col = 0;
            }
        if (b.too_deep) {
            psim__error_file(error, path, "JSON nested deeper than %d levels (line %d)",
                             PSIM_JSON_MAX_DEPTH, line);
        } else {
            unsigned char *m = yajl_get_error(h, 0, NULL, 0);
            g_autofree char *what = g_strstrip(g_strdup((const char *)m));
            yajl_free_error(h, m);
            const char *w = g_str_has_prefix(what, "parse error: ") ? what + 13
                            : g_str_has_prefix(what, "lexical error: ") ? what + 15 : what;
            for (char *p = (char *)w; *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                    *p = ' ';
            psim__error_file(error, path, "not valid JSON: line %d, column %d: %s", line, col, w);
        }
        yajl_free(h);
        g_array_free(b.stack, TRUE);
        g_array_free(b.frames, TRUE);
        psim_jdoc_free(d);
        return NULL;
    }
    yajl_free(h);
    g_array_free(b.stack, TRUE);
    g_array_free(b.frames, TRUE);
    return d;
}

PsimJDoc *psim_jdoc_load(const char *path, GError **error)
{
    g_autoptr(GBytes) b = psim__json_read(path, error);
    if (!b)
        return NULL;
    gsize len = 0;
    const char *data = g_bytes_get_data(b, &len);
    return psim_jdoc_parse(path, data ? data : "", len, error);
}

/* ---- access ---- */

const PsimJ *psim_j_get(const PsimJ *o, const char *key)
{
    if (!o || o->type != PSIM_J_OBJECT)
        return NULL;
    for (uint32_t i = o->n; i-- > 0;) /* the last of a repeated key wins */
        if (!strcmp(o->v.m[i].key, key))
            return &o->v.m[i].v;
    return NULL;
}

const PsimJ *psim_j_given(const PsimJ *o, const char *key)
{
    const PsimJ *v = psim_j_get(o, key);
    return v && v->type != PSIM_J_NULL ? v : NULL;
}

const char *psim_j_string(const PsimJ *v)
{
    return v && v->type == PSIM_J_STRING ? v->v.s : NULL;
}

gboolean psim_j_number(const PsimJ *v, double *out)
{
    if (v && v->type == PSIM_J_INT)
        *out = (double)v->v.i;
    else if (v && v->type == PSIM_J_DOUBLE)
        *out = v->v.d;
    else
        return FALSE;
    return TRUE;
}

gboolean psim_j_int(const PsimJ *v, int64_t *out)
{
    if (!v || v->type != PSIM_J_INT)
        return FALSE;
    *out = v->v.i;
    return TRUE;
}

/* The member key of o when it is given (not absent, not null) and of type t: *n (NULL when not
 * given); another type is an error saying what it must be. */
static gboolean given_as(const PsimJsonAt *at, const PsimJ *o, const char *key, PsimJType t,
                         const char *what, const PsimJ **n, GError **error)
{
    *n = psim_j_given(o, key);
    if (*n && (*n)->type != (uint32_t)t)
        return psim_json_fail(at, error, "field '%s' must be %s", key, what);
    return TRUE;
}

gboolean psim_j_get_string(const PsimJsonAt *at, const PsimJ *o, const char *key,
                           const char **out, GError **error)
{
    const PsimJ *n;
    if (!given_as(at, o, key, PSIM_J_STRING, "a string", &n, error))
        return FALSE;
    if (n)
        *out = n->v.s;
    return TRUE;
}

gboolean psim_j_get_number(const PsimJsonAt *at, const PsimJ *o, const char *key, double lo,
                           double hi, double *out, GError **error)
{
    const PsimJ *n = psim_j_given(o, key);
    double v;
    if (!n)
        return TRUE;
    if (!psim_j_number(n, &v))
        return psim_json_fail(at, error, "field '%s' must be a number", key);
    return psim__json_number_in(at, key, v, lo, hi, out, error);
}

gboolean psim_j_get_int(const PsimJsonAt *at, const PsimJ *o, const char *key, int64_t lo,
                        int64_t hi, int64_t *out, GError **error)
{
    const PsimJ *n;
    if (!given_as(at, o, key, PSIM_J_INT, "an integer", &n, error))
        return FALSE;
    return !n || psim__json_int_in(at, key, n->v.i, lo, hi, out, error);
}

gboolean psim_j_get_bool(const PsimJsonAt *at, const PsimJ *o, const char *key, gboolean *out,
                         GError **error)
{
    const PsimJ *n;
    if (!given_as(at, o, key, PSIM_J_BOOL, "true or false", &n, error))
        return FALSE;
    if (n)
        *out = n->v.b;
    return TRUE;
}

gboolean psim_j_get_array(const PsimJsonAt *at, const PsimJ *o, const char *key,
                          const PsimJ **out, GError **error)
{
    const PsimJ *n;
    if (!given_as(at, o, key, PSIM_J_ARRAY, "a list", &n, error))
        return FALSE;
    if (n)
        *out = n;
    return TRUE;
}

gboolean psim_j_get_object(const PsimJsonAt *at, const PsimJ *o, const char *key,
                           const PsimJ **out, GError **error)
{
    const PsimJ *n;
    if (!given_as(at, o, key, PSIM_J_OBJECT, "an object", &n, error))
        return FALSE;
    if (n)
        *out = n;
    return TRUE;
}

/* From formats/json.c: the JSON writer's string and number forms. */
void psim__json_string(GString *s, const char *v);
void psim__json_double(GString *s, double v, gboolean force_point);

void psim_j_write(GString *s, const PsimJ *v)
{
    switch (v->type) {
    case PSIM_J_NULL: g_string_append(s, "null"); break;
    case PSIM_J_BOOL: g_string_append(s, v->v.b ? "true" : "false"); break;
    case PSIM_J_INT: g_string_append_printf(s, "%" G_GINT64_FORMAT, v->v.i); break;
    case PSIM_J_DOUBLE: psim__json_double(s, v->v.d, TRUE); break;
    case PSIM_J_STRING: psim__json_string(s, v->v.s); break;
    case PSIM_J_ARRAY:
        g_string_append_c(s, '[');
        for (uint32_t i = 0; i < v->n; i++) {
            if (i)
                g_string_append_c(s, ',');
            psim_j_write(s, &v->v.a[i]);
        }
        g_string_append_c(s, ']');
        break;
    case PSIM_J_OBJECT:
        g_string_append_c(s, '{');
        for (uint32_t i = 0; i < v->n; i++) {
            if (i)
                g_string_append_c(s, ',');
            psim__json_string(s, v->v.m[i].key);
            g_string_append_c(s, ':');
            psim_j_write(s, &v->v.m[i].v);
        }
        g_string_append_c(s, '}');
        break;
    default: break;
    }
}
