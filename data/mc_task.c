// data/mc_task.c: multiple-choice task files (data/mc_task.h; docs/formats.md "Task files").
// cJSON parses each line; utf8proc gives the case mappings of HellaSwag's capitalize().
#include "mc_task.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <utf8proc.h>

__attribute__((format(printf, 4, 5))) static int task_error(const char* path, int line, const char* field, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (line > 0 && field) fprintf(stderr, "error: task %s:%d: field '%s': ", path, line, field);
    else if (line > 0) fprintf(stderr, "error: task %s:%d: ", path, line);
    else fprintf(stderr, "error: task %s: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

void mc_fields_default(McFields* f) {
    snprintf(f->ctx, sizeof f->ctx, "context");
    snprintf(f->choices, sizeof f->choices, "choices");
    snprintf(f->gold, sizeof f->gold, "gold");
}

int mc_fields_parse(McFields* f, const char* spec, const char* what) {
    const char* p = spec;
    while (*p) {
        const char* eq = strchr(p, '=');
        const char* end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end) {
            fprintf(stderr, "error: %s '%s': expected KEY=NAME pairs separated by commas (keys: ctx, choices, gold)\n", what, spec);
            return -1;
        }
        char* dst = NULL;
        size_t kn = (size_t)(eq - p), vn = (size_t)(end - eq - 1);
        if (kn == 3 && strncmp(p, "ctx", 3) == 0) dst = f->ctx;
        else if (kn == 7 && strncmp(p, "choices", 7) == 0) dst = f->choices;
        else if (kn == 4 && strncmp(p, "gold", 4) == 0) dst = f->gold;
        if (!dst) {
            fprintf(stderr, "error: %s '%s': unknown key '%.*s' (accepted: ctx, choices, gold)\n", what, spec, (int)kn, p);
            return -1;
        }
        if (vn == 0 || vn >= sizeof f->ctx) {
            fprintf(stderr, "error: %s '%s': the field name for '%.*s' must be 1 .. %d characters\n", what, spec, (int)kn, p,
                    (int)sizeof f->ctx - 1);
            return -1;
        }
        memcpy(dst, eq + 1, vn);
        dst[vn] = 0;
        p = *end ? end + 1 : end;
    }
    return 0;
}

// Python's str.isspace() on ASCII (str.strip()'s default set): space, \t \n \v \f \r, \x1c-\x1f
static int is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

// Python's str.replace(from, to) (every non-overlapping occurrence, left to right, one pass)
static char* str_replace_all(const char* s, const char* from, const char* to) {
    size_t fl = strlen(from), tl = strlen(to), n = strlen(s), cap = n + 1;
    if (tl > fl) cap = n * (tl / fl + 1) + 1;
    char* out = malloc(cap);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (strncmp(s + i, from, fl) == 0) { memcpy(out + o, to, tl); o += tl; i += fl; }
        else out[o++] = s[i++];
    }
    out[o] = 0;
    return out;
}

char* mc_hellaswag_preprocess(const char* s) {
    // strip
    size_t a = 0, b = strlen(s);
    while (a < b && is_py_space((unsigned char)s[a])) a++;
    while (b > a && is_py_space((unsigned char)s[b - 1])) b--;
    char* t = malloc(b - a + 1);
    memcpy(t, s + a, b - a);
    t[b - a] = 0;
    // " [title]" -> ". "
    char* u = str_replace_all(t, " [title]", ". ");
    free(t);
    // re.sub("\[.*?\]", "", u): at each position a '[' followed by the nearest ']' on the same
    // line ('.' matches no newline) is removed with everything between; else the byte is kept
    size_t n = strlen(u), o = 0;
    char* v = malloc(n + 1);
    for (size_t i = 0; i < n;) {
        if (u[i] == '[') {
            size_t j = i + 1;
            while (j < n && u[j] != ']' && u[j] != '\n') j++;
            if (j < n && u[j] == ']') { i = j + 1; continue; }
        }
        v[o++] = u[i++];
    }
    v[o] = 0;
    free(u);
    char* w = str_replace_all(v, "  ", " ");
    free(v);
    return w;
}

// Python's str.capitalize(): the first code point title-cased, the others lower-cased (utf8proc's
// simple mappings; bytes that are not valid UTF-8 are copied)
static char* py_capitalize(const char* s) {
    size_t n = strlen(s), o = 0;
    char* out = malloc(4 * n + 1);
    int first = 1;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t*)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) { out[o++] = s[i++]; first = 0; continue; }
        cp = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        o += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t*)out + o);
        i += (size_t)k;
        first = 0;
    }
    out[o] = 0;
    return out;
}

static char* dup_str(const char* s) {
    size_t n = strlen(s);
    char* d = malloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

static void example_free(McExample* e) {
    free(e->context);
    for (int i = 0; i < e->n_choices; i++) free(e->choices[i]);
    free(e->choices);
    memset(e, 0, sizeof *e);
}

// a string field of obj, or an error naming it
static int get_str(const char* path, int line, const cJSON* obj, const char* key, const char** out, const char* hint) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return task_error(path, line, key, "missing (%s)", hint);
    if (!cJSON_IsString(v)) return task_error(path, line, key, "not a string");
    *out = v->valuestring;
    return 0;
}

// the choices list: strings, at least one, none empty; preprocessed (HellaSwag) or copied
static int get_choices(const char* path, int line, const cJSON* obj, const char* key, int hellaswag, McExample* e,
                       const char* hint) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return task_error(path, line, key, "missing (%s)", hint);
    if (!cJSON_IsArray(v)) return task_error(path, line, key, "not a list (a JSON array of strings)");
    int n = cJSON_GetArraySize(v);
    if (n < 1) return task_error(path, line, key, "empty list (a task line needs at least one choice)");
    e->choices = calloc((size_t)n, sizeof(char*));
    for (int i = 0; i < n; i++) {
        const cJSON* c = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(c)) return task_error(path, line, key, "element %d is not a string", i);
        e->choices[i] = hellaswag ? mc_hellaswag_preprocess(c->valuestring) : dup_str(c->valuestring);
        e->n_choices = i + 1;
        if (!e->choices[i][0])
            return task_error(path, line, key, "choice %d is empty%s (acc_norm divides by a choice's length)", i,
                              hellaswag ? " after HellaSwag's preprocessing" : "");
    }
    return 0;
}

// the gold index: an integer (HellaSwag: also a string of digits, as its files have it), in range
static int get_gold(const char* path, int line, const cJSON* obj, const char* key, int allow_str, McExample* e,
                    const char* hint) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return task_error(path, line, key, "missing (%s)", hint);
    long g = -1;
    if (cJSON_IsNumber(v) && v->valuedouble == (double)(long)v->valuedouble) g = (long)v->valuedouble;
    else if (allow_str && cJSON_IsString(v) && v->valuestring[0] && strspn(v->valuestring, "0123456789") == strlen(v->valuestring) &&
             strlen(v->valuestring) < 9)
        g = atol(v->valuestring);
    else return task_error(path, line, key, "not an integer%s", allow_str ? " (or a string of digits)" : "");
    if (g < 0 || g >= e->n_choices)
        return task_error(path, line, key, "%ld is out of range for %d choices (accepted: 0 .. %d)", g, e->n_choices, e->n_choices - 1);
    e->gold = (int)g;
    return 0;
}

static int parse_line(const char* path, int line, const cJSON* obj, const McFields* f, McExample* e, int* hellaswag) {
    e->line = line;
    *hellaswag = cJSON_GetObjectItemCaseSensitive(obj, "endings") != NULL;
    if (*hellaswag) {
        const char* hint = "HellaSwag's lines (those with \"endings\") need activity_label, ctx_a and ctx_b (or ctx), endings, label";
        const char *label = NULL, *ca = NULL, *cb = NULL;
        if (get_str(path, line, obj, "activity_label", &label, hint) != 0) return -1;
        char* ctx;
        if (cJSON_GetObjectItemCaseSensitive(obj, "ctx_a") || !cJSON_GetObjectItemCaseSensitive(obj, "ctx")) {
            if (get_str(path, line, obj, "ctx_a", &ca, hint) != 0 || get_str(path, line, obj, "ctx_b", &cb, hint) != 0) return -1;
            char* cap = py_capitalize(cb);
            ctx = malloc(strlen(ca) + strlen(cap) + 2);
            sprintf(ctx, "%s %s", ca, cap);
            free(cap);
        } else {
            if (get_str(path, line, obj, "ctx", &ca, hint) != 0) return -1;
            ctx = dup_str(ca);
        }
        char* q = malloc(strlen(label) + strlen(ctx) + 3);
        sprintf(q, "%s: %s", label, ctx);
        free(ctx);
        e->context = mc_hellaswag_preprocess(q);
        free(q);
        if (get_choices(path, line, obj, "endings", 1, e, hint) != 0) return -1;
        return get_gold(path, line, obj, "label", 1, e, hint);
    }
    char hint[400];
    snprintf(hint, sizeof hint, "a line needs \"%s\", \"%s\" and \"%s\", or HellaSwag's fields; --fields renames them", f->ctx,
             f->choices, f->gold);
    const char* c = NULL;
    if (get_str(path, line, obj, f->ctx, &c, hint) != 0) return -1;
    e->context = dup_str(c);
    if (get_choices(path, line, obj, f->choices, 0, e, hint) != 0) return -1;
    return get_gold(path, line, obj, f->gold, 0, e, hint);
}

int mc_task_load(McTask* t, const char* path, const McFields* fields, int limit) {
    memset(t, 0, sizeof *t);
    McFields def;
    if (!fields) { mc_fields_default(&def); fields = &def; }
    snprintf(t->path, sizeof t->path, "%s", path);
    const char* base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(t->name, sizeof t->name, "%s", base);
    char* dot = strrchr(t->name, '.');
    if (dot && dot != t->name) *dot = 0;
    FILE* f = fopen(path, "r");
    if (!f) return task_error(path, 0, NULL, "cannot open it (a JSONL file of multiple-choice examples: docs/formats.md \"Task files\")");
    char* buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int line = 0, rc = 0, cap_ex = 0;
    while ((limit <= 0 || t->n < limit) && (len = getline(&buf, &cap, f)) >= 0) {
        line++;
        ssize_t k = 0;
        while (k < len && is_py_space((unsigned char)buf[k])) k++;
        if (k == len) continue;   // a blank line
        const char* end = NULL;
        cJSON* obj = cJSON_ParseWithLengthOpts(buf, (size_t)len, &end, 0);
        if (!obj || !cJSON_IsObject(obj)) {
            const char* at = obj ? buf : cJSON_GetErrorPtr();
            rc = task_error(path, line, NULL, "not a JSON object (%s at column %d): each line must be one JSON object",
                            obj ? "another JSON value" : "invalid JSON", at && at >= buf && at <= buf + len ? (int)(at - buf) + 1 : 1);
            cJSON_Delete(obj);
            break;
        }
        while (end && end < buf + len && is_py_space((unsigned char)*end)) end++;
        if (end && end < buf + len && *end) {
            rc = task_error(path, line, NULL, "text after the JSON object at column %d: one object a line", (int)(end - buf) + 1);
            cJSON_Delete(obj);
            break;
        }
        if (t->n == cap_ex) {
            cap_ex = cap_ex ? 2 * cap_ex : 256;
            t->ex = realloc(t->ex, (size_t)cap_ex * sizeof *t->ex);
        }
        McExample* e = &t->ex[t->n];
        memset(e, 0, sizeof *e);
        int hs = 0;
        rc = parse_line(path, line, obj, fields, e, &hs);
        cJSON_Delete(obj);
        if (rc != 0) { example_free(e); break; }
        t->n++;
        t->n_hellaswag += hs;
    }
    free(buf);
    if (ferror(f) && rc == 0) rc = task_error(path, line, NULL, "read error");
    fclose(f);
    if (rc == 0 && t->n == 0) rc = task_error(path, 0, NULL, "no examples (the file has no non-blank line)");
    if (rc != 0) mc_task_free(t);
    return rc;
}

void mc_task_free(McTask* t) {
    for (int i = 0; i < t->n; i++) example_free(&t->ex[i]);
    free(t->ex);
    t->ex = NULL;
    t->n = 0;
}
