// tools/json_read.h: a small JSON reader for the files import reads (Hugging Face config.json,
// the safetensors header): objects, arrays, strings (with \uXXXX escapes), numbers, true,
// false, null, into a tree. Errors name the byte offset.
#pragma once
#include <stddef.h>

typedef enum { JV_NULL = 0, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } JvKind;

typedef struct Jv {
    JvKind kind;
    int b;              // JV_BOOL
    double num;         // JV_NUM
    char* str;          // JV_STR (NUL-terminated, UTF-8)
    int n;              // JV_ARR / JV_OBJ: elements
    char** keys;        // JV_OBJ: [n]
    struct Jv* items;   // JV_ARR / JV_OBJ: [n]
} Jv;

// Parses text[0..len) into *out. Returns 0, or -1 with a message (what, at which byte) in err.
int jv_parse(const char* text, size_t len, Jv* out, char* err, size_t errn);
// The value under key of an object (NULL when absent or not an object).
const Jv* jv_get(const Jv* obj, const char* key);
void jv_free(Jv* v);
