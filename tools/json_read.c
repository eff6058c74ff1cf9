// tools/json_read.c: the JSON reader of tools/json_read.h (recursive descent, depth-limited).
#include "json_read.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char* s; size_t n, i; char* err; size_t errn; int depth; } P;

static int fail(P* p, const char* what) {
    snprintf(p->err, p->errn, "%s at byte %zu", what, p->i);
    return -1;
}
static void ws(P* p) { while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]) && p->s[p->i]) p->i++; }
static int lit(P* p, const char* w) {
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k) != 0) return 0;
    p->i += k;
    return 1;
}

static void put_utf8(char* o, size_t* k, unsigned c) {
    if (c < 0x80) o[(*k)++] = (char)c;
    else if (c < 0x800) { o[(*k)++] = (char)(0xC0 | c >> 6); o[(*k)++] = (char)(0x80 | (c & 63)); }
    else if (c < 0x10000) { o[(*k)++] = (char)(0xE0 | c >> 12); o[(*k)++] = (char)(0x80 | (c >> 6 & 63)); o[(*k)++] = (char)(0x80 | (c & 63)); }
    else { o[(*k)++] = (char)(0xF0 | c >> 18); o[(*k)++] = (char)(0x80 | (c >> 12 & 63)); o[(*k)++] = (char)(0x80 | (c >> 6 & 63)); o[(*k)++] = (char)(0x80 | (c & 63)); }
}

static int hex4(P* p, unsigned* c) {
    if (p->n - p->i < 4) return fail(p, "short \\u escape");
    *c = 0;
    for (int j = 0; j < 4; j++) {
        char h = p->s[p->i++];
        *c = *c * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
                                  h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
        if (*c >= 0x10000 * 16) return fail(p, "bad \\u escape");
    }
    return 0;
}

static int str(P* p, char** out) {
    p->i++;   // the opening quote
    size_t start = p->i, cap = 16;
    while (p->i < p->n && p->s[p->i] != '"') { cap += 4; if (p->s[p->i] == '\\') p->i++; p->i++; }
    if (p->i >= p->n) return fail(p, "unterminated string");
    char* o = malloc(cap + (p->i - start) * 4);
    if (!o) return fail(p, "out of memory");
    size_t k = 0;
    p->i = start;
    while (p->s[p->i] != '"') {
        char c = p->s[p->i++];
        if (c != '\\') { o[k++] = c; continue; }
        char e = p->s[p->i++];
        const char* from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char* f = strchr(from, e);
        if (e && f) { o[k++] = to[f - from]; continue; }
        if (e != 'u') { free(o); return fail(p, "bad escape"); }
        unsigned cp;
        if (hex4(p, &cp)) { free(o); return -1; }
        if (cp >= 0xD800 && cp < 0xDC00 && lit(p, "\\u")) {
            unsigned lo;
            if (hex4(p, &lo)) { free(o); return -1; }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        put_utf8(o, &k, cp);
    }
    p->i++;
    o[k] = 0;
    *out = o;
    return 0;
}

static int value(P* p, Jv* v);

static int push(P* p, Jv* v, char* key) {
    Jv* it = realloc(v->items, (size_t)(v->n + 1) * sizeof(Jv));
    if (!it) return fail(p, "out of memory");
    v->items = it;
    if (v->kind == JV_OBJ) {
        char** ks = realloc(v->keys, (size_t)(v->n + 1) * sizeof(char*));
        if (!ks) return fail(p, "out of memory");
        v->keys = ks;
        v->keys[v->n] = key;
    }
    memset(&v->items[v->n], 0, sizeof(Jv));
    v->n++;
    return value(p, &v->items[v->n - 1]);
}

static int value(P* p, Jv* v) {
    memset(v, 0, sizeof *v);
    ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end");
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        if (++p->depth > 64) return fail(p, "nested too deep");
        v->kind = c == '{' ? JV_OBJ : JV_ARR;
        char close = c == '{' ? '}' : ']';
        p->i++;
        ws(p);
        if (p->i < p->n && p->s[p->i] == close) { p->i++; p->depth--; return 0; }
        for (;;) {
            char* key = NULL;
            if (v->kind == JV_OBJ) {
                ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a key");
                if (str(p, &key)) return -1;
                ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') { free(key); return fail(p, "expected ':'"); }
                p->i++;
            }
            if (push(p, v, key)) return -1;
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == close) { p->i++; p->depth--; return 0; }
            return fail(p, "expected ',' or a closing bracket");
        }
    }
    if (c == '"') { v->kind = JV_STR; return str(p, &v->str); }
    if (lit(p, "true")) { v->kind = JV_BOOL; v->b = 1; return 0; }
    if (lit(p, "false")) { v->kind = JV_BOOL; return 0; }
    if (lit(p, "null")) { v->kind = JV_NULL; return 0; }
    char buf[64];
    size_t k = 0;
    while (p->i < p->n && k < sizeof buf - 1 && strchr("+-0123456789.eE", p->s[p->i]) && p->s[p->i]) buf[k++] = p->s[p->i++];
    buf[k] = 0;
    char* end;
    v->num = strtod(buf, &end);
    if (k == 0 || *end) return fail(p, "bad value");
    v->kind = JV_NUM;
    return 0;
}

int jv_parse(const char* text, size_t len, Jv* out, char* err, size_t errn) {
    P p = {text, len, 0, err, errn, 0};
    if (value(&p, out)) { jv_free(out); return -1; }
    ws(&p);
    if (p.i != p.n && !(p.i < p.n && p.s[p.i] == 0)) { jv_free(out); return fail(&p, "trailing bytes"); }
    return 0;
}

const Jv* jv_get(const Jv* obj, const char* key) {
    if (!obj || obj->kind != JV_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++) if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

void jv_free(Jv* v) {
    for (int i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items); free(v->keys); free(v->str);
    memset(v, 0, sizeof *v);
}
