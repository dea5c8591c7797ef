/* Protobuf text format (.pbtxt) reading, driven by protobuf-c descriptors so that the parsed
 * message is the very struct the binary path produces. A small tokenizer (names, numbers,
 * quoted strings with C escapes, punctuation, # comments) feeds a recursive-descent parser whose
 * depth is bounded; unknown fields are skipped without recursion. */
#include "tf-private.h"
#include "placesim/formats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TOK_EOF, TOK_IDENT, TOK_NUMBER, TOK_STRING, TOK_PUNCT } TokKind;

typedef struct {
    const char *path;
    const char *p, *end;
    int line;     /* line of the current token */
    TokKind kind; /* the current token */
    char punct;
    GString *text; /* identifier or number text, or the decoded bytes of a string */
    GError **error;
} Lex;

static gboolean lex_fail(Lex *lx, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean lex_fail(Lex *lx, const char *fmt, ...)
{
    if (lx->error && *lx->error)
        return FALSE;
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    psim__error_file(lx->error, lx->path, "line %d: %s", lx->line, msg);
    return FALSE;
}

static void skip_space(Lex *lx)
{
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == '\n') {
            lx->line++;
            lx->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->p++;
        } else if (c == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
        } else {
            break;
        }
    }
}

static int hexval(char c)
{
    return g_ascii_isdigit(c) ? c - '0' : g_ascii_isxdigit(c) ? g_ascii_tolower(c) - 'a' + 10 : -1;
}

/* Reads one quoted string at lx->p (on the quote), appending its bytes to lx->text. */
static gboolean read_string(Lex *lx)
{
    char q = *lx->p++;
    while (lx->p < lx->end && *lx->p != q) {
        char c = *lx->p++;
        if (c == '\n')
            return lex_fail(lx, "newline inside a string");
        if (c != '\\') {
            g_string_append_c(lx->text, c);
            continue;
        }
        if (lx->p >= lx->end)
            break;
        c = *lx->p++;
        switch (c) {
        case 'n': g_string_append_c(lx->text, '\n'); break;
        case 'r': g_string_append_c(lx->text, '\r'); break;
        case 't': g_string_append_c(lx->text, '\t'); break;
        case 'v': g_string_append_c(lx->text, '\v'); break;
        case 'f': g_string_append_c(lx->text, '\f'); break;
        case 'a': g_string_append_c(lx->text, '\a'); break;
        case 'b': g_string_append_c(lx->text, '\b'); break;
        case '\\': case '\'': case '"': case '?': g_string_append_c(lx->text, c); break;
        case 'x': case 'X': {
            int v = 0, n = 0;
            while (n < 2 && lx->p < lx->end && hexval(*lx->p) >= 0)
                v = v * 16 + hexval(*lx->p++), n++;
            if (!n)
                return lex_fail(lx, "bad \\x escape in a string");
            g_string_append_c(lx->text, (char)v);
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                int v = c - '0', n = 1;
                while (n < 3 && lx->p < lx->end && *lx->p >= '0' && *lx->p <= '7')
                    v = v * 8 + (*lx->p++ - '0'), n++;
                if (v > 255)
                    return lex_fail(lx, "octal escape \\%o is out of range", (unsigned)v);
                g_string_append_c(lx->text, (char)v);
            } else {
                return lex_fail(lx, "unknown escape '\\%c' in a string", g_ascii_isprint(c) ? c : '?');
            }
        }
    }
    if (lx->p >= lx->end)
        return lex_fail(lx, "unterminated string");
    lx->p++;
    return TRUE;
}

/* Moves to the next token. FALSE (with the error set) on a lexical error. */
static gboolean advance(Lex *lx)
{
    skip_space(lx);
    g_string_truncate(lx->text, 0);
    if (lx->p >= lx->end) {
        lx->kind = TOK_EOF;
        return TRUE;
    }
    char c = *lx->p;
    if (c == '"' || c == '\'') {
        lx->kind = TOK_STRING;
        /* Adjacent literals concatenate, as in C. */
        do {
            if (!read_string(lx))
                return FALSE;
            skip_space(lx);
        } while (lx->p < lx->end && (*lx->p == '"' || *lx->p == '\''));
        return TRUE;
    }
    if (g_ascii_isalpha(c) || c == '_') {
        lx->kind = TOK_IDENT;
        while (lx->p < lx->end && (g_ascii_isalnum(*lx->p) || *lx->p == '_'))
            g_string_append_c(lx->text, *lx->p++);
        return TRUE;
    }
    if (g_ascii_isdigit(c) || ((c == '-' || c == '+' || c == '.') && lx->p + 1 < lx->end &&
                               (g_ascii_isalnum(lx->p[1]) || lx->p[1] == '.'))) {
        lx->kind = TOK_NUMBER;
        g_string_append_c(lx->text, *lx->p++);
        while (lx->p < lx->end) {
            char d = *lx->p;
            char prev = lx->text->str[lx->text->len - 1];
            gboolean hex = lx->text->len >= 2 && (lx->text->str[1] == 'x' || lx->text->str[1] == 'X' ||
                                                  (lx->text->len >= 3 && (lx->text->str[2] == 'x' ||
                                                                          lx->text->str[2] == 'X')));
            if (g_ascii_isalnum(d) || d == '.' || d == '_' ||
                ((d == '-' || d == '+') && (prev == 'e' || prev == 'E') && !hex))
                g_string_append_c(lx->text, *lx->p++);
            else
                break;
            if (lx->text->len > 256)
                return lex_fail(lx, "number is too long");
        }
        return TRUE;
    }
    if (strchr("{}<>:[],;", c)) {
        lx->kind = TOK_PUNCT;
        lx->punct = c;
        lx->p++;
        return TRUE;
    }
    return lex_fail(lx, "unexpected character '%c' (0x%02x)", g_ascii_isprint(c) ? c : '?',
                    (unsigned)(guint8)c);
}

static gboolean is_punct(const Lex *lx, char c)
{
    return lx->kind == TOK_PUNCT && lx->punct == c;
}

static const char *token_desc(const Lex *lx)
{
    switch (lx->kind) {
    case TOK_EOF: return "end of file";
    case TOK_IDENT: return "a name";
    case TOK_NUMBER: return "a number";
    case TOK_STRING: return "a string";
    default: return "punctuation";
    }
}

/* ---- values ---- */

static gboolean parse_int(Lex *lx, const char *field, gboolean is_signed, int64_t lo, uint64_t hi,
                          uint64_t *out)
{
    if (lx->kind != TOK_NUMBER)
        return lex_fail(lx, "field '%s' wants an integer, found %s", field, token_desc(lx));
    const char *s = lx->text->str;
    gboolean neg = s[0] == '-';
    const char *digits = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
    int base = 10;
    if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        base = 16;
        digits += 2;
    }
    if (!*digits)
        return lex_fail(lx, "field '%s': '%s' is not an integer", field, s);
    errno = 0;
    char *endp = NULL;
    guint64 mag = g_ascii_strtoull(digits, &endp, base);
    if (*endp || errno || !g_ascii_isxdigit(digits[0]))
        return lex_fail(lx, "field '%s': '%s' is not an integer", field, s);
    if (neg) {
        if (!is_signed || mag > (guint64)INT64_MAX + 1)
            return lex_fail(lx, "field '%s': %s is out of range", field, s);
        int64_t v = mag == (guint64)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        if (v < lo)
            return lex_fail(lx, "field '%s': %s is out of range", field, s);
        *out = (uint64_t)v;
    } else {
        if (mag > hi)
            return lex_fail(lx, "field '%s': %s is out of range", field, s);
        *out = mag;
    }
    return TRUE;
}

static gboolean parse_double(Lex *lx, const char *field, double *out)
{
    const char *s = lx->text->str;
    if (lx->kind == TOK_IDENT || lx->kind == TOK_NUMBER) {
        const char *w = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
        double sign = s[0] == '-' ? -1 : 1;
        if (!g_ascii_strcasecmp(w, "inf") || !g_ascii_strcasecmp(w, "infinity") ||
            !g_ascii_strcasecmp(w, "inff")) {
            *out = sign * INFINITY;
            return TRUE;
        }
        if (!g_ascii_strcasecmp(w, "nan") || !g_ascii_strcasecmp(w, "nanf")) {
            *out = NAN;
            return TRUE;
        }
    }
    if (lx->kind != TOK_NUMBER)
        return lex_fail(lx, "field '%s' wants a number, found %s", field, token_desc(lx));
    g_autofree char *t = g_strdup(s);
    size_t n = strlen(t);
    gboolean hex = strstr(t, "0x") || strstr(t, "0X");
    if (n > 1 && (t[n - 1] == 'f' || t[n - 1] == 'F') && !hex)
        t[n - 1] = '\0';
    char *endp = NULL;
    errno = 0;
    double v = g_ascii_strtod(t, &endp);
    if (*endp || endp == t || hex)
        return lex_fail(lx, "field '%s': '%s' is not a number", field, s);
    *out = v;
    return TRUE;
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM:
    case PROTOBUF_C_TYPE_FLOAT:
        return 4;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
    }
    return 0;
}

/* Where the next value of field f goes: a new element of a repeated field (the count is bumped
 * by the caller through *count once the value is written), or the optional field itself. */
static void *value_slot(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, size_t **count)
{
    char *base = (char *)m;
    *count = NULL;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *n = (size_t *)(base + f->quantifier_offset);
        void **arr = (void **)(base + f->offset);
        size_t es = elem_size(f->type);
        if (*n == 0 || (*n & (*n - 1)) == 0) {
            size_t cap = *n ? *n * 2 : 1;
            void *grown = realloc(*arr, cap * es);
            if (!grown)
                g_error("out of memory");
            *arr = grown;
        }
        *count = n;
        return (char *)*arr + *n * es;
    }
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE &&
        f->label == PROTOBUF_C_LABEL_OPTIONAL)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    return base + f->offset;
}

static gboolean parse_scalar(Lex *lx, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    uint64_t u = 0;
    double d = 0;
    const char *name = f->name;
    /* Parse first, then store, so that a failure leaves the message consistent. */
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
        if (!parse_int(lx, name, TRUE, INT32_MIN, INT32_MAX, &u))
            return FALSE;
        break;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
        if (!parse_int(lx, name, TRUE, INT64_MIN, INT64_MAX, &u))
            return FALSE;
        break;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
        if (!parse_int(lx, name, FALSE, 0, UINT32_MAX, &u))
            return FALSE;
        break;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        if (!parse_int(lx, name, FALSE, 0, UINT64_MAX, &u))
            return FALSE;
        break;
    case PROTOBUF_C_TYPE_FLOAT: case PROTOBUF_C_TYPE_DOUBLE:
        if (!parse_double(lx, name, &d))
            return FALSE;
        break;
    case PROTOBUF_C_TYPE_BOOL: {
        const char *s = lx->text->str;
        if ((lx->kind == TOK_IDENT && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "t"))) ||
            (lx->kind == TOK_NUMBER && !strcmp(s, "1")))
            u = 1;
        else if ((lx->kind == TOK_IDENT && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "f"))) ||
                 (lx->kind == TOK_NUMBER && !strcmp(s, "0")))
            u = 0;
        else
            return lex_fail(lx, "field '%s' wants true or false", name);
        break;
    }
    case PROTOBUF_C_TYPE_ENUM:
        if (lx->kind == TOK_IDENT) {
            const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value_by_name(
                (const ProtobufCEnumDescriptor *)f->descriptor, lx->text->str);
            if (!ev)
                return lex_fail(lx, "field '%s': unknown value '%s'", name, lx->text->str);
            u = (uint64_t)(int64_t)ev->value;
        } else if (!parse_int(lx, name, TRUE, INT32_MIN, INT32_MAX, &u)) {
            return FALSE;
        }
        break;
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_BYTES:
        if (lx->kind != TOK_STRING)
            return lex_fail(lx, "field '%s' wants a quoted string, found %s", name, token_desc(lx));
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        return lex_fail(lx, "field '%s' wants a message in braces", name);
    }
    size_t *count;
    void *slot = value_slot(m, f, &count);
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM: {
        uint32_t v = (uint32_t)u;
        memcpy(slot, &v, 4);
        break;
    }
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        memcpy(slot, &u, 8);
        break;
    case PROTOBUF_C_TYPE_FLOAT: {
        float v = (float)d;
        memcpy(slot, &v, 4);
        break;
    }
    case PROTOBUF_C_TYPE_DOUBLE: memcpy(slot, &d, 8); break;
    case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)slot = u != 0; break;
    case PROTOBUF_C_TYPE_STRING: {
        char **sp = slot;
        if (!count && *sp && *sp != f->default_value)
            free(*sp);
        /* A C string: text after an embedded NUL is dropped. */
        *sp = malloc(lx->text->len + 1);
        if (!*sp)
            g_error("out of memory");
        memcpy(*sp, lx->text->str, lx->text->len + 1);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *bd = slot;
        if (!count && bd->data && (!f->default_value ||
                                   bd->data != ((const ProtobufCBinaryData *)f->default_value)->data))
            free(bd->data);
        bd->len = lx->text->len;
        bd->data = malloc(lx->text->len ? lx->text->len : 1);
        if (!bd->data)
            g_error("out of memory");
        memcpy(bd->data, lx->text->str, lx->text->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: break;
    }
    if (count)
        (*count)++;
    return advance(lx);
}

/* ---- messages ---- */

static gboolean parse_body(Lex *lx, ProtobufCMessage *m, int depth, char close);

static ProtobufCMessage *message_new(const ProtobufCMessageDescriptor *d)
{
    ProtobufCMessage *sub = malloc(d->sizeof_message);
    if (!sub)
        g_error("out of memory");
    d->message_init(sub);
    return sub;
}

static gboolean parse_sub_message(Lex *lx, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                                  int depth)
{
    char close;
    if (is_punct(lx, '{'))
        close = '}';
    else if (is_punct(lx, '<'))
        close = '>';
    else
        return lex_fail(lx, "field '%s' wants '{', found %s", f->name, token_desc(lx));
    if (depth + 1 > PSIM_PBTXT_MAX_DEPTH)
        return lex_fail(lx, "messages are nested deeper than %d levels", PSIM_PBTXT_MAX_DEPTH);
    const ProtobufCMessageDescriptor *d = f->descriptor;
    ProtobufCMessage *sub;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *count;
        ProtobufCMessage **slot = value_slot(m, f, &count);
        sub = *slot = message_new(d);
        (*count)++;
    } else {
        /* A singular message given twice merges, as in protobuf's own text parser. */
        ProtobufCMessage **slot = (ProtobufCMessage **)((char *)m + f->offset);
        if (!*slot)
            *slot = message_new(d);
        sub = *slot;
    }
    if (!advance(lx))
        return FALSE;
    return parse_body(lx, sub, depth + 1, close);
}

/* Skips the value of a field this schema does not know: a scalar, a [list] or a balanced
 * {message}, counting brackets instead of recursing. */
static gboolean skip_value(Lex *lx, const char *name)
{
    gboolean colon = is_punct(lx, ':');
    if (colon && !advance(lx))
        return FALSE;
    if (lx->kind == TOK_PUNCT && (lx->punct == '{' || lx->punct == '<' || lx->punct == '[')) {
        int64_t level = 0;
        do {
            if (lx->kind == TOK_EOF)
                return lex_fail(lx, "unexpected end of file inside field '%s'", name);
            if (lx->kind == TOK_PUNCT && strchr("{<[", lx->punct))
                level++;
            else if (lx->kind == TOK_PUNCT && strchr("}>]", lx->punct))
                level--;
            if (!advance(lx))
                return FALSE;
        } while (level > 0);
        return TRUE;
    }
    if (!colon)
        return lex_fail(lx, "expected ':' or '{' after field '%s'", name);
    if (lx->kind == TOK_IDENT || lx->kind == TOK_NUMBER || lx->kind == TOK_STRING)
        return advance(lx);
    return lex_fail(lx, "field '%s' has no value", name);
}

static gboolean parse_body(Lex *lx, ProtobufCMessage *m, int depth, char close)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (;;) {
        if (lx->kind == TOK_EOF) {
            if (!close)
                return TRUE;
            return lex_fail(lx, "unexpected end of file: '%c' expected to close a '%s'", close,
                            d->short_name);
        }
        if (close && is_punct(lx, close))
            return advance(lx);
        if (lx->kind != TOK_IDENT)
            return lex_fail(lx, "expected a field name of %s, found %s%s%c%s", d->short_name,
                            token_desc(lx), lx->kind == TOK_PUNCT ? " '" : "",
                            lx->kind == TOK_PUNCT ? lx->punct : ' ', lx->kind == TOK_PUNCT ? "'" : "");
        g_autofree char *name = g_strdup(lx->text->str);
        if (!advance(lx))
            return FALSE;
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);
        if (!f) {
            if (!skip_value(lx, name))
                return FALSE;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (is_punct(lx, ':') && !advance(lx))
                return FALSE;
            if (is_punct(lx, '[')) {
                if (f->label != PROTOBUF_C_LABEL_REPEATED)
                    return lex_fail(lx, "field '%s' is not repeated", name);
                if (!advance(lx))
                    return FALSE;
                while (!is_punct(lx, ']')) {
                    if (!parse_sub_message(lx, m, f, depth))
                        return FALSE;
                    if (is_punct(lx, ',') && !advance(lx))
                        return FALSE;
                }
                if (!advance(lx))
                    return FALSE;
            } else if (!parse_sub_message(lx, m, f, depth)) {
                return FALSE;
            }
        } else {
            if (!is_punct(lx, ':'))
                return lex_fail(lx, "expected ':' after field '%s'", name);
            if (!advance(lx))
                return FALSE;
            if (is_punct(lx, '[')) {
                if (f->label != PROTOBUF_C_LABEL_REPEATED)
                    return lex_fail(lx, "field '%s' is not repeated", name);
                if (!advance(lx))
                    return FALSE;
                while (!is_punct(lx, ']')) {
                    if (!parse_scalar(lx, m, f))
                        return FALSE;
                    if (is_punct(lx, ','))  {
                        if (!advance(lx))
                            return FALSE;
                    } else if (!is_punct(lx, ']')) {
                        return lex_fail(lx, "expected ',' or ']' in the list of '%s'", name);
                    }
                }
                if (!advance(lx))
                    return FALSE;
            } else if (!parse_scalar(lx, m, f)) {
                return FALSE;
            }
        }
        if ((is_punct(lx, ',') || is_punct(lx, ';')) && !advance(lx))
            return FALSE;
    }
}

ProtobufCMessage *psim__pbtxt_parse(const ProtobufCMessageDescriptor *desc, const char *path,
                                    const char *data, gsize len, GError **error)
{
    Lex lx = {.path = path ? path : "input", .p = data, .end = data + len, .line = 1,
              .error = error};
    lx.text = g_string_new(NULL);
    ProtobufCMessage *m = message_new(desc);
    gboolean ok = advance(&lx) && parse_body(&lx, m, 0, 0);
    g_string_free(lx.text, TRUE);
    if (!ok) {
        protobuf_c_message_free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void psim__pbtxt_quote(GString *s, const void *data, gsize len)
{
    const guint8 *p = data;
    g_string_append_c(s, '"');
    for (gsize i = 0; i < len; i++) {
        guint8 c = p[i];
        switch (c) {
        case '\n': g_string_append(s, "\\n"); break;
        case '\r': g_string_append(s, "\\r"); break;
        case '\t': g_string_append(s, "\\t"); break;
        case '"': g_string_append(s, "\\\""); break;
        case '\'': g_string_append(s, "\\'"); break;
        case '\\': g_string_append(s, "\\\\"); break;
        default:
            if (c >= 0x20 && c < 0x7f)
                g_string_append_c(s, (char)c);
            else
                g_string_append_printf(s, "\\%03o", c);
        }
    }
    g_string_append_c(s, '"');
}
