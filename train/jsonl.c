// train/jsonl.c: the JSONL record writer (train/jsonl.h).
#include "jsonl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The mirror (jsonl_mirror): the stream it follows, and the numbers of the record being written,
// their paths in one arena of NUL-terminated strings (offsets: the arena grows).
static struct {
    FILE* f;
    JsonlMirrorFn fn;
    void* ctx;
    char type[64], name[256];
    int step, has_name;
    char* arena;
    size_t arena_len, arena_cap;
    size_t* off;
    double* v;
    JsonlNum* num;
    int n, cap;
} g_mirror;

void jsonl_mirror(FILE* f, JsonlMirrorFn fn, void* ctx) {
    g_mirror.f = fn ? f : NULL;
    g_mirror.fn = fn;
    g_mirror.ctx = ctx;
    if (!fn) {
        free(g_mirror.arena); free(g_mirror.off); free(g_mirror.v); free(g_mirror.num);
        memset(&g_mirror, 0, sizeof g_mirror);
    }
}

static void* xrealloc(void* p, size_t n) {
    void* q = realloc(p, n);
    if (!q) { fprintf(stderr, "error: out of memory (the run log's TensorBoard mirror)\n"); exit(1); }
    return q;
}

// one number of the record: its path (j->path[0..len)) and value
static void mirror_num(const Jsonl* j, int len, double v) {
    if (!isfinite(v)) return;   // the line says null
    if (g_mirror.n == g_mirror.cap) {
        g_mirror.cap = g_mirror.cap ? 2 * g_mirror.cap : 64;
        g_mirror.off = xrealloc(g_mirror.off, (size_t)g_mirror.cap * sizeof *g_mirror.off);
        g_mirror.v = xrealloc(g_mirror.v, (size_t)g_mirror.cap * sizeof *g_mirror.v);
    }
    if (g_mirror.arena_len + (size_t)len + 1 > g_mirror.arena_cap) {
        g_mirror.arena_cap = 2 * (g_mirror.arena_len + (size_t)len + 1) + 1024;
        g_mirror.arena = xrealloc(g_mirror.arena, g_mirror.arena_cap);
    }
    g_mirror.off[g_mirror.n] = g_mirror.arena_len;
    g_mirror.v[g_mirror.n++] = v;
    memcpy(g_mirror.arena + g_mirror.arena_len, j->path, (size_t)len);
    g_mirror.arena[g_mirror.arena_len + (size_t)len] = '\0';
    g_mirror.arena_len += (size_t)len + 1;
}

// The separator and the key of the next value at the current depth. Returns the length of the
// value's key path, left in j->path (mirrored records; 0 otherwise).
static int key_of(Jsonl* j, const char* key) {
    const int d = j->depth - 1;
    if (j->any[d]) fputc(',', j->f);
    j->any[d] = 1;
    if (key) {
        fputc('"', j->f);
        jsonl_escape(j->f, (const unsigned char*)key, (int)strlen(key));
        fputs("\":", j->f);
    }
    if (!j->mirrored) return 0;
    int len = j->path_len[d];
    const int room = JSONL_PATH_MAX - len;
    int w = key ? snprintf(j->path + len, (size_t)room, "%s%s", len ? "/" : "", key)
                : snprintf(j->path + len, (size_t)room, "%s%d", len ? "/" : "", j->index[d]++);
    len += w < room ? w : room - 1;   // a path too long for the buffer is cut (none the trainer writes)
    return len;
}

static void open_(Jsonl* j, const char* key, char open, char close) {
    const int len = j->depth > 0 ? key_of(j, key) : 0;
    fputc(open, j->f);
    if (j->depth >= JSONL_MAX_DEPTH) abort();   // a record nested deeper than any the trainer writes
    j->any[j->depth] = 0;
    j->close[j->depth] = close;
    j->path_len[j->depth] = len;
    j->index[j->depth] = 0;
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
    j->mirrored = 0;   // type and step are the record's, not its numbers
    open_(j, NULL, '{', '}');
    jsonl_str(j, "type", type);
    jsonl_int(j, "step", step);
    if (g_mirror.fn && f == g_mirror.f) {
        j->mirrored = 1;
        snprintf(g_mirror.type, sizeof g_mirror.type, "%s", type);
        g_mirror.step = step;
        g_mirror.has_name = 0;
        g_mirror.n = 0;
        g_mirror.arena_len = 0;
    }
}

void jsonl_close(Jsonl* j) {
    if (j->depth == 0) return;
    j->depth--;
    fputc(j->close[j->depth], j->f);
}

void jsonl_end(Jsonl* j) {
    while (j->depth > 0) jsonl_close(j);
    fputc('\n', j->f);
    if (!j->mirrored) return;
    j->mirrored = 0;
    g_mirror.num = xrealloc(g_mirror.num, (size_t)(g_mirror.n ? g_mirror.n : 1) * sizeof *g_mirror.num);
    for (int i = 0; i < g_mirror.n; i++) g_mirror.num[i] = (JsonlNum){g_mirror.arena + g_mirror.off[i], g_mirror.v[i]};
    JsonlRecord rec = {g_mirror.type, g_mirror.step, g_mirror.has_name ? g_mirror.name : NULL, g_mirror.n, g_mirror.num};
    g_mirror.fn(g_mirror.ctx, &rec);
}

void jsonl_obj(Jsonl* j, const char* key) { open_(j, key, '{', '}'); }
void jsonl_arr(Jsonl* j, const char* key) { open_(j, key, '[', ']'); }

void jsonl_int(Jsonl* j, const char* key, long long v) {
    const int len = key_of(j, key);
    fprintf(j->f, "%lld", v);
    if (j->mirrored) mirror_num(j, len, (double)v);
}

void jsonl_fmt(Jsonl* j, const char* key, const char* fmt, double v) {
    const int len = key_of(j, key);
    if (!isfinite(v)) { fputs("null", j->f); return; }   // JSON has no NaN or Infinity
    char text[512];   // "%.1f" of the largest double: 311 characters
    snprintf(text, sizeof text, fmt, v);
    fputs(text, j->f);
    if (j->mirrored) mirror_num(j, len, strtod(text, NULL));   // the value the line says
}

// 17 significant digits round-trip a double exactly: two runs whose logged losses are equal
// computed the same bits (tests compare them with tolerance 0).
void jsonl_num(Jsonl* j, const char* key, double v) { jsonl_fmt(j, key, "%.17g", v); }

void jsonl_strn(Jsonl* j, const char* key, const unsigned char* s, int n) {
    key_of(j, key);
    // the record's name for the mirror: its first top-level "name", "task" or "kind"
    if (j->mirrored && j->depth == 1 && !g_mirror.has_name && key &&
        (strcmp(key, "name") == 0 || strcmp(key, "task") == 0 || strcmp(key, "kind") == 0)) {
        const int m = n < (int)sizeof g_mirror.name - 1 ? n : (int)sizeof g_mirror.name - 1;
        memcpy(g_mirror.name, s, (size_t)m);
        g_mirror.name[m] = '\0';
        g_mirror.has_name = 1;
    }
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
