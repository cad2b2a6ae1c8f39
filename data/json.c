#include "data/json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

/* Deeper nesting is refused rather than risking the stack on hostile input. */
#define JSON_MAX_DEPTH 512

typedef struct Parser {
    const char *s;
    size_t n, i;
    char *err;
    size_t errlen;
    bool failed;
} Parser;

static bool perr(Parser *p, const char *fmt, ...) {
    if (p->failed) return false;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') line++, col = 1;
        else col++;
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %zu, column %zu: %s", line, col, msg);
    p->failed = true;
    return false;
}

static void skip_ws(Parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* At the opening quote; the decoded string is never longer than its source. */
static bool parse_string(Parser *p, char **out, size_t *len) {
    p->i++;
    size_t start = p->i, end = start;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return perr(p, "a string is not closed");
    char *o = (char *)xmalloc(end - start + 1);
    size_t k = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            free(o);
            return perr(p, "control character 0x%02x inside a string (escape it)", c);
        }
        if (c != '\\') {
            o[k++] = (char)c;
            p->i++;
            continue;
        }
        char e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            int v = p->i + 4 <= end ? hex4(p->s + p->i) : -1;
            if (v < 0) {
                free(o);
                return perr(p, "bad \\u escape");
            }
            p->i += 4;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= end && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                int lo = hex4(p->s + p->i + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    p->i += 6;
                }
            }
            k += put_utf8(o + k, cp);
            break;
        }
        default:
            free(o);
            return perr(p, "unknown escape '\\%c'", e);
        }
    }
    p->i = end + 1;
    o[k] = 0;
    *out = o;
    *len = k;
    return true;
}

static bool parse_value(Parser *p, JsonValue *v, int depth);

static bool parse_container(Parser *p, JsonValue *v, int depth, bool object) {
    if (depth >= JSON_MAX_DEPTH) return perr(p, "nested deeper than %d levels", JSON_MAX_DEPTH);
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    char close = object ? '}' : ']';
    size_t cap = 0;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return true;
    }
    for (;;) {
        if (v->len == cap) {
            cap = cap ? cap * 2 : 4;
            v->items = (JsonValue *)xrealloc(v->items, cap * sizeof(JsonValue));
            if (object) v->keys = (char **)xrealloc(v->keys, cap * sizeof(char *));
        }
        JsonValue *item = &v->items[v->len];
        memset(item, 0, sizeof *item);
        skip_ws(p);
        if (object) {
            size_t kl;
            if (p->i >= p->n || p->s[p->i] != '"') return perr(p, "expected a member name in quotes");
            if (!parse_string(p, &v->keys[v->len], &kl)) return false;
            v->len++; /* counted now, so json_free frees the key whatever follows */
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return perr(p, "expected ':' after a member name");
            p->i++;
            if (!parse_value(p, item, depth + 1)) return false;
        } else {
            v->len++;
            if (!parse_value(p, item, depth + 1)) return false;
        }
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return true;
        }
        return perr(p, "expected ',' or '%c'", close);
    }
}

static bool parse_value(Parser *p, JsonValue *v, int depth) {
    skip_ws(p);
    if (p->i >= p->n) return perr(p, "the text ends where a value should be");
    char c = p->s[p->i];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    }
    static const char *words[] = {"null", "true", "false"};
    for (int w = 0; w < 3; w++) {
        size_t wl = strlen(words[w]);
        if (p->n - p->i >= wl && !memcmp(p->s + p->i, words[w], wl)) {
            v->type = w == 0 ? JSON_NULL : JSON_BOOL;
            v->boolean = w == 1;
            p->i += wl;
            return true;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t k = 0;
        while (p->i < p->n && k + 1 < sizeof buf && strchr("+-0123456789.eE", p->s[p->i])) buf[k++] = p->s[p->i++];
        buf[k] = 0;
        char *endp;
        v->type = JSON_NUMBER;
        v->number = strtod(buf, &endp);
        if (*endp) return perr(p, "bad number '%s'", buf);
        return true;
    }
    return perr(p, "unexpected character '%c'", c);
}

static void free_inner(JsonValue *v) {
    free(v->str);
    for (size_t k = 0; k < v->len && (v->type == JSON_ARRAY || v->type == JSON_OBJECT); k++) {
        free_inner(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
}

void json_free(JsonValue *v) {
    if (!v) return;
    free_inner(v);
    free(v);
}

bool json_parse(const char *text, size_t n, JsonValue **out, char *err, size_t errlen) {
    Parser p = {text, n, 0, err, errlen, false};
    JsonValue *v = (JsonValue *)xcalloc(1, sizeof(JsonValue));
    bool ok = parse_value(&p, v, 0);
    if (ok) {
        skip_ws(&p);
        if (p.i < n) ok = perr(&p, "text follows the value");
    }
    if (!ok) {
        json_free(v);
        v = NULL;
    }
    *out = v;
    return ok;
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (size_t k = 0; k < v->len; k++)
        if (!strcmp(v->keys[k], key)) return &v->items[k];
    return NULL;
}

const char *json_get_str(const JsonValue *v, const char *key) {
    const JsonValue *m = json_get(v, key);
    return m && m->type == JSON_STRING ? m->str : NULL;
}

bool json_get_bool(const JsonValue *v, const char *key, bool dflt) {
    const JsonValue *m = json_get(v, key);
    return m && m->type == JSON_BOOL ? m->boolean : dflt;
}
