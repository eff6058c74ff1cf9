// train/jsonl.h: the one writer of the run log's JSONL records (docs/metrics.md). Every record
// is one line, an object that starts with "type" and "step"; values are written by key, so
// commas, quotes and escapes come from here and every line is valid JSON by construction.
//
//   Jsonl j;
//   jsonl_begin(&j, f, "eval", step);        // {"type":"eval","step":N
//   jsonl_num(&j, "val_loss", vl);           // ,"val_loss":1.2345678901234567   (null if not finite)
//   jsonl_end(&j);                           // }\n
//
// Nested values: jsonl_obj / jsonl_arr open an object or array under a key (NULL: an element of
// the enclosing array), jsonl_close closes the innermost one; at most JSONL_MAX_DEPTH levels,
// the record included.
#pragma once
#include <stdio.h>

#define JSONL_MAX_DEPTH 8
#define JSONL_PATH_MAX 256

typedef struct {
    FILE* f;
    int depth;                          // open objects and arrays, the record itself included
    unsigned char any[JSONL_MAX_DEPTH]; // a value was written at this depth: the next needs a comma
    char close[JSONL_MAX_DEPTH];        // '}' or ']'
    // the mirror's view (jsonl_mirror): the key path of each open container ("layers/3"),
    // and the next element index of each open array
    int mirrored;                       // this record goes to the mirror too
    int path_len[JSONL_MAX_DEPTH];      // length of path at each depth
    int index[JSONL_MAX_DEPTH];
    char path[JSONL_PATH_MAX];
} Jsonl;

// A mirror of the numbers of every record written to one stream (TensorBoard: train/tb.h). At
// jsonl_end it gets the record: its type and step, every number in it with its key path (keys
// and array indices joined by '/': "loss", "layers/3/f_attn", "layers/3/gate_hist/0"), the value
// as written in the line (read back from its text: "%.6g" gives what the line says, not the
// double before formatting), and the first top-level string field named "name", "task" or "kind"
// (NULL if none): what names a record among records of its type (a task, a spike's kind).
// Nulls (non-finite numbers), strings and booleans are not numbers here.
typedef struct {
    const char* path;
    double v;
} JsonlNum;

typedef struct {
    const char* type;
    int step;
    const char* name;
    int n;
    const JsonlNum* num;
} JsonlRecord;

typedef void (*JsonlMirrorFn)(void* ctx, const JsonlRecord* rec);

// Records written to f from now on also go to fn(ctx, ...); fn = NULL ends it. One mirrored
// stream per process (the run log); a record opened with another stream is not mirrored.
void jsonl_mirror(FILE* f, JsonlMirrorFn fn, void* ctx);

void jsonl_begin(Jsonl* j, FILE* f, const char* type, int step);
void jsonl_end(Jsonl* j);                                   // closes the record and ends the line

// Values under key (NULL: an element of the enclosing array).
void jsonl_int(Jsonl* j, const char* key, long long v);
void jsonl_num(Jsonl* j, const char* key, double v);        // "%.17g": round-trips a double exactly
void jsonl_fmt(Jsonl* j, const char* key, const char* fmt, double v);   // a printf format of one double
void jsonl_str(Jsonl* j, const char* key, const char* s);
void jsonl_strn(Jsonl* j, const char* key, const unsigned char* s, int n);   // n bytes, any content
void jsonl_bool(Jsonl* j, const char* key, int v);
void jsonl_null(Jsonl* j, const char* key);
void jsonl_obj(Jsonl* j, const char* key);
void jsonl_arr(Jsonl* j, const char* key);
void jsonl_close(Jsonl* j);

// Writes s[0..n) as the body of a JSON string: quotes, backslashes and control bytes escaped,
// valid UTF-8 passed through, and any other byte written as \u00XX so the line stays valid JSON.
void jsonl_escape(FILE* f, const unsigned char* s, int n);
