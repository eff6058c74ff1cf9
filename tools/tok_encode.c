// tools/tok_encode.c: a text -> our token ids on the command line, and the Hugging Face tokenizer
// export (tools/export_tokenizer.h) of a tokenizer file; for checks against other tokenizers
// (tests/interop/check_tokenizer.py) and for users comparing with other frameworks.
//
//   tok_encode TOKENIZER [--nul] [FILE]
//       encodes FILE (default: stdin) with tokenizer_encode and prints the ids on one line,
//       separated by spaces. End-of-text is never produced ("<|endoftext|>" in the text is
//       bytes). With --nul the input is several texts, each ended by a NUL byte (a last text
//       without one counts too): one line of ids per text (an empty line for an empty text).
//   tok_encode TOKENIZER --export-hf DIR [--model-max-length N]
//       writes DIR/tokenizer.json, tokenizer_config.json and special_tokens_map.json.
//   tok_encode TOKENIZER.json --stream-step N [FILE]
//       (a tokenizer.json) the same ids as without it, but cut into pre-tokens the way prepare
//       streams a file: the text arrives N bytes at a time and each call cuts only what is final
//       (hf_tokenizer_split with eof 0), the rest waits for more; for tests of that logic.
// TOKENIZER is a tokenizer.bin in our format (prepare writes one), or a Hugging Face
// tokenizer.json (data/hf_tokenizer.h). Errors: one line, exit 1.
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "tools/export_tokenizer.h"

static void usage(FILE* f) {
    fprintf(f,
        "usage: tok_encode TOKENIZER [--nul] [FILE]\n"
        "       tok_encode TOKENIZER --export-hf DIR [--model-max-length N]\n"
        "       tok_encode TOKENIZER.json --stream-step N [FILE]\n"
        "\n"
        "Prints the token ids of FILE (default stdin) on one line. --nul: the input holds texts each\n"
        "ended by a NUL byte; one line of ids per text. --export-hf: writes the tokenizer as Hugging\n"
        "Face files (tokenizer.json, tokenizer_config.json, special_tokens_map.json) into DIR.\n");
}

static int print_ids(const Tokenizer* tok, const char* text, size_t len) {
    int* ids = NULL;
    size_t n = 0;
    if (len > 0 && tokenizer_encode(tok, text, len, &ids, &n) != 0) { free(ids); return -1; }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

typedef struct { const Tokenizer* tok; int* ids; size_t n, cap; } StreamIds;
static int stream_piece(void* ctx, const unsigned char* p, size_t len) {
    StreamIds* s = ctx;
    if (s->n + len > s->cap) {
        size_t c = 2 * (s->n + len);
        int* g = realloc(s->ids, c * sizeof(int));
        if (!g) return -1;
        s->ids = g;
        s->cap = c;
    }
    s->n += tokenizer_encode_piece(s->tok, p, len, s->ids + s->n);
    return 0;
}

// text[0..len) fed step bytes at a time to hf_tokenizer_split_from (eof 0), then the rest with eof
// 1; up to hf_tokenizer_context() bytes of the segment before the cut are kept, as prepare does
static int print_ids_streamed(const Tokenizer* tok, const char* text, size_t len, size_t step) {
    StreamIds s = {.tok = tok};
    const unsigned char* u = (const unsigned char*)text;
    size_t pos = 0, ctx = 0;  // bytes cut into pre-tokens so far; of them, kept as context
    for (size_t k = step;; k += step) {
        int eof = k >= len;
        size_t seg = 0, r = hf_tokenizer_split_from(tok, u + pos - ctx, (eof ? len : k) - (pos - ctx), ctx, eof, stream_piece,
                                                    &s, &seg);
        if (r == HF_SPLIT_FAILED || r == HF_SPLIT_REGEX) {
            free(s.ids);
            fprintf(stderr, "error: tok_encode: %s\n", r == HF_SPLIT_REGEX ? "the pre_tokenizer regex failed" : "out of memory");
            return -1;
        }
        if (eof) break;
        size_t keep = r - seg < hf_tokenizer_context(tok) ? r - seg : hf_tokenizer_context(tok);
        while (keep > 0 && (u[pos - ctx + r - keep] & 0xC0) == 0x80) keep--;
        pos += r - ctx;
        ctx = keep;
    }
    for (size_t i = 0; i < s.n; i++) printf(i ? " %d" : "%d", s.ids[i]);
    putchar('\n');
    free(s.ids);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) { usage(stdout); return 0; }
    if (argc < 2) { usage(stderr); return 1; }
    const char *tok_path = argv[1], *file = NULL, *export_dir = NULL;
    int nul = 0;
    long max_len = 0, step = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--nul") == 0) nul = 1;
        else if (strcmp(argv[i], "--export-hf") == 0 && i + 1 < argc) export_dir = argv[++i];
        else if (strcmp(argv[i], "--stream-step") == 0 && i + 1 < argc) {
            char* end;
            step = strtol(argv[++i], &end, 10);
            if (*end || step < 1) { fprintf(stderr, "error: tok_encode: --stream-step must be a positive integer, got '%s'\n", argv[i]); return 1; }
        }
        else if (strcmp(argv[i], "--model-max-length") == 0 && i + 1 < argc) {
            char* end;
            max_len = strtol(argv[++i], &end, 10);
            if (*end || max_len < 0 || max_len > 1L << 30) {
                fprintf(stderr, "error: tok_encode: --model-max-length must be an integer in [0, 2^30], got '%s'\n", argv[i]);
                return 1;
            }
        } else if (argv[i][0] != '-' && !file) file = argv[i];
        else { fprintf(stderr, "error: tok_encode: unknown or incomplete argument '%s' (see tok_encode --help)\n", argv[i]); return 1; }
    }
    Tokenizer tok;
    if (tokenizer_load(&tok, tok_path) != 0) return 1;
    int rc = 0;
    if (export_dir) {
        rc = export_tokenizer_hf(export_dir, &tok, (int)max_len, stdout) == 0 ? 0 : 1;
        tokenizer_free(&tok);
        return rc;
    }
    if (!tok.can_encode) {
        fprintf(stderr, "error: tok_encode: tokenizer '%s' is an llm.c file without merges; it can decode, not encode\n", tok_path);
        tokenizer_free(&tok);
        return 1;
    }
    FILE* in = file ? fopen(file, "rb") : stdin;
    if (!in) { fprintf(stderr, "error: tok_encode: cannot open '%s': %s\n", file, strerror(errno)); tokenizer_free(&tok); return 1; }
    char* buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {  // the whole input
        if (len + 65536 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char* g = realloc(buf, cap);
            if (!g) { fprintf(stderr, "error: tok_encode: out of memory\n"); rc = 1; break; }
            buf = g;
        }
        size_t got = fread(buf + len, 1, cap - len, in);
        len += got;
        if (got == 0) {
            if (ferror(in)) { fprintf(stderr, "error: tok_encode: reading '%s' failed\n", file ? file : "stdin"); rc = 1; }
            break;
        }
    }
    if (file) fclose(in);
    if (step && !tokenizer_is_hf(&tok)) {
        fprintf(stderr, "error: tok_encode: --stream-step needs a tokenizer.json ('%s' is not one)\n", tok_path);
        rc = 1;
    }
    if (rc == 0 && step && !nul) rc = print_ids_streamed(&tok, buf, len, (size_t)step) == 0 ? 0 : 1;
    else if (rc == 0 && !nul) rc = print_ids(&tok, buf, len) == 0 ? 0 : 1;
    for (size_t s = 0; rc == 0 && nul && s < len;) {
        char* z = memchr(buf + s, '\0', len - s);
        size_t e = z ? (size_t)(z - buf) : len;
        if (print_ids(&tok, buf + s, e - s) != 0) rc = 1;
        s = e + 1;
    }
    if (fflush(stdout) != 0) { fprintf(stderr, "error: tok_encode: writing the ids failed\n"); rc = 1; }
    free(buf);
    tokenizer_free(&tok);
    return rc;
}
