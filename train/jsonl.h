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

typedef struct {
    FILE* f;
    int depth;                          // open objects and arrays, the record itself included
    unsigned char any[JSONL_MAX_DEPTH]; // a value was written at this depth: the next needs a comma
    char close[JSONL_MAX_DEPTH];        // '}' or ']'
} Jsonl;

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
