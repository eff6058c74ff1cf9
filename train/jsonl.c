// train/jsonl.c: the JSONL record writer (train/jsonl.h).
#include "jsonl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The separator and the key of the next value at the current depth.
static void key_of(Jsonl* j, const char* key) {
    if (j->any[j->depth - 1]) fputc(',', j->f);
    j->any[j->depth - 1] = 1;
    if (key) {
        fputc('"', j->f);
        jsonl_escape(j->f, (const unsigned char*)key, (int)strlen(key));
        fputs("\":", j->f);
    }
}

static void open_(Jsonl* j, const char* key, char open, char close) {
    if (j->depth > 0) key_of(j, key);
    fputc(open, j->f);
    if (j->depth >= JSONL_MAX_DEPTH) abort();   // a record nested deeper than any the trainer writes
    j->any[j->depth] = 0;
    j->close[j->depth] = close;
    j->depth++;
}

// Length of the valid UTF-8 sequence starting at s[0] (of at most n bytes), or 0 if invalid.
static int utf8_len(const unsigned char* s, int n) {
    int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (int i = 1; i < len; i++) if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

void jsonl_escape(FILE* f, const unsigned char* s, int n) {
    for (int i = 0; i < n;) {
        unsigned char c = s[i];
        int u = utf8_len(s + i, n - i);
        if (c == '"' || c == '\\') { fprintf(f, "\\%c", c); i++; }
        else if (c == '\n') { fputs("\\n", f); i++; }
        else if (c < 0x20 || u == 0) { fprintf(f, "\\u%04x", c); i++; }
        else { fwrite(s + i, 1, (size_t)u, f); i += u; }
    }
}

void jsonl_begin(Jsonl* j, FILE* f, const char* type, int step) {
    j->f = f;
    j->depth = 0;
    open_(j, NULL, '{', '}');
    jsonl_str(j, "type", type);
    jsonl_int(j, "step", step);
}

void jsonl_close(Jsonl* j) {
    if (j->depth == 0) return;
    j->depth--;
    fputc(j->close[j->depth], j->f);
}

void jsonl_end(Jsonl* j) {
    while (j->depth > 0) jsonl_close(j);
    fputc('\n', j->f);
}

void jsonl_obj(Jsonl* j, const char* key) { open_(j, key, '{', '}'); }
void jsonl_arr(Jsonl* j, const char* key) { open_(j, key, '[', ']'); }

void jsonl_int(Jsonl* j, const char* key, long long v) {
    key_of(j, key);
    fprintf(j->f, "%lld", v);
}

void jsonl_fmt(Jsonl* j, const char* key, const char* fmt, double v) {
    key_of(j, key);
    if (isfinite(v)) fprintf(j->f, fmt, v);   // JSON has no NaN or Infinity
    else fputs("null", j->f);
}

// 17 significant digits round-trip a double exactly: two runs whose logged losses are equal
// computed the same bits (tests compare them with tolerance 0).
void jsonl_num(Jsonl* j, const char* key, double v) { jsonl_fmt(j, key, "%.17g", v); }

void jsonl_strn(Jsonl* j, const char* key, const unsigned char* s, int n) {
    key_of(j, key);
    fputc('"', j->f);
    jsonl_escape(j->f, s, n);
    fputc('"', j->f);
}

void jsonl_str(Jsonl* j, const char* key, const char* s) { jsonl_strn(j, key, (const unsigned char*)s, (int)strlen(s)); }

void jsonl_bool(Jsonl* j, const char* key, int v) {
    key_of(j, key);
    fputs(v ? "true" : "false", j->f);
}

void jsonl_null(Jsonl* j, const char* key) {
    key_of(j, key);
    fputs("null", j->f);
}
