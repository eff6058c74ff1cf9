// tools/export_tokenizer.c: tokenizer.bin (or an imported tokenizer.json, written back unchanged) ->
// tokenizer.json + tokenizer_config.json +
// special_tokens_map.json for Hugging Face (layout in export_tokenizer.h and docs/formats.md).
//
// The `tokenizers` pipeline that reproduces tokenizer_encode:
//   no normalizer
//   pre_tokenizer Sequence[ Split(EXPORT_TOKENIZER_REGEX, "Isolated"),   our rules 1-6
//                           ByteLevel(add_prefix_space false, use_regex false) ]   bytes -> chars
//   model BPE: vocab {spelling(token bytes): id}, merges in rank order ("left right"),
//              ignore_merges false (a piece found whole in the vocab is still merged pair by pair)
//   decoder ByteLevel; no post-processor (nothing added around a text)
// spelling() is GPT-2's bytes_to_unicode: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
// themselves, the 68 others become U+0100.. in byte order (so a space is 'Ġ' U+0120, '\n' 'Ċ').
// Token id 256+i is merge i, so BPE's "merge (a, b) -> vocab[a b]" gives our id exactly when
// no two tokens share their bytes; that is checked.
#define _GNU_SOURCE
#include "export_tokenizer.h"

#include "data/hf_tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// GPT-2's bytes_to_unicode: the code point that stands for byte b
static unsigned byte_char(unsigned b) {
    static unsigned table[256];
    static int ready = 0;
    if (!ready) {
        unsigned n = 0;
        for (unsigned c = 0; c < 256; c++) {
            int keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
            table[c] = keep ? c : 256 + n++;
        }
        ready = 1;
    }
    return table[b];
}

// the byte-level spelling of p[0..n) as the inside of a JSON string (UTF-8, '"' and '\' escaped)
static void put_spelling(FILE* f, const unsigned char* p, int n) {
    for (int i = 0; i < n; i++) {
        unsigned c = byte_char(p[i]);
        if (c == '"' || c == '\\') { fputc('\\', f); fputc((int)c, f); }
        else if (c < 0x80) fputc((int)c, f);
        else { fputc((int)(0xC0 | (c >> 6)), f); fputc((int)(0x80 | (c & 0x3F)), f); }  // c < 0x800
    }
}

static int write_file_atomic(const char* path, const char* text, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) { fprintf(stderr, "error: export: cannot create '%s': %s\n", tmp, strerror(errno)); return -1; }
    int ok = fwrite(text, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) { ok = 0; err = errno; }
    if (ok && rename(tmp, path) != 0) { ok = 0; err = errno; }
    if (!ok) {
        fprintf(stderr, "error: export: writing '%s' failed: %s\n", path, strerror(err));
        unlink(tmp);
        return -1;
    }
    return 0;
}

typedef struct { const unsigned char* p; int n; int id; } TokRef;
static int tokref_cmp(const void* x, const void* y) {
    const TokRef *a = x, *b = y;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    int c = memcmp(a->p, b->p, (size_t)a->n);
    return c ? c : (a->id < b->id ? -1 : a->id > b->id);
}

// Checks that the tokenizer is ours (merges known, EOT last) and that no two ids share their
// bytes. `path` names tokenizer.json for the message.
static int check_exportable(const Tokenizer* t, const char* path) {
    const int V = t->vocab_size, M = t->n_merges;
    if (!t->can_encode) {
        fprintf(stderr, "error: export: '%s': the tokenizer has no merges (llm.c's gpt2_tokenizer.bin can decode, not "
                        "encode); export a tokenizer in our format (prepare's tokenizer.bin)\n", path);
        return -1;
    }
    if (V != 256 + M + 1 || t->eot != V - 1) {
        fprintf(stderr, "error: export: '%s': unexpected layout: vocab_size %d, %d merges, end-of-text id %d "
                        "(expected 256 + merges + 1, end-of-text last)\n", path, V, M, t->eot);
        return -1;
    }
    TokRef* r = malloc((size_t)V * sizeof(TokRef));
    if (!r) { fprintf(stderr, "error: export: '%s': out of memory\n", path); return -1; }
    for (int i = 0; i < V; i++) {
        r[i].id = i;
        r[i].p = tokenizer_token_bytes(t, i, &r[i].n);
    }
    qsort(r, (size_t)V, sizeof(TokRef), tokref_cmp);
    int rc = 0;
    for (int i = 1; i < V && rc == 0; i++)
        if (r[i].n == r[i - 1].n && memcmp(r[i].p, r[i - 1].p, (size_t)r[i].n) == 0) {
            fprintf(stderr, "error: export: '%s': tokens %d and %d have the same bytes (%d of them); a tokenizer.json "
                            "vocabulary maps each string to one id, so it cannot reproduce both\n",
                    path, r[i - 1].id, r[i].id, r[i].n);
            rc = -1;
        }
    free(r);
    return rc;
}

static char* tokenizer_json(const Tokenizer* t, size_t* len) {
    char* text = NULL;
    FILE* f = open_memstream(&text, len);
    if (!f) return NULL;
    const int V = t->vocab_size, M = t->n_merges;
    int n;
    const unsigned char* p;
    fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n");
    fprintf(f, "  \"added_tokens\": [\n    {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, "
               "\"rstrip\": false, \"normalized\": false, \"special\": true}\n  ],\n", t->eot, TOKENIZER_EOT_TEXT);
    fprintf(f, "  \"normalizer\": null,\n");
    fprintf(f, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n");
    fprintf(f, "    {\"type\": \"Split\", \"pattern\": {\"Regex\": \"");
    for (const char* s = EXPORT_TOKENIZER_REGEX; *s; s++) {  // as a JSON string
        if (*s == '\\' || *s == '"') fputc('\\', f);
        fputc(*s, f);
    }
    fprintf(f, "\"}, \"behavior\": \"Isolated\", \"invert\": false},\n");
    fprintf(f, "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n");
    fprintf(f, "  ]},\n");
    fprintf(f, "  \"post_processor\": null,\n");
    fprintf(f, "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
               "\"use_regex\": false},\n");
    fprintf(f, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
               "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
               "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n");
    fprintf(f, "    \"vocab\": {");
    for (int i = 0; i < V; i++) {
        p = tokenizer_token_bytes(t, i, &n);
        fprintf(f, "%s\n      \"", i ? "," : "");
        put_spelling(f, p, n);  // the end-of-text token "<|endoftext|>" spells itself, as in GPT-2's
        fprintf(f, "\": %d", i);
    }
    fprintf(f, "\n    },\n    \"merges\": [");
    for (int i = 0; i < M; i++) {
        fprintf(f, "%s\n      \"", i ? "," : "");
        p = tokenizer_token_bytes(t, t->merges[2 * i], &n);
        put_spelling(f, p, n);
        fputc(' ', f);
        p = tokenizer_token_bytes(t, t->merges[2 * i + 1], &n);
        put_spelling(f, p, n);
        fputc('"', f);
    }
    fprintf(f, "\n    ]\n  }\n}\n");
    if (fclose(f) != 0) { free(text); return NULL; }
    return text;
}

int export_tokenizer_hf(const char* out_dir, const Tokenizer* tok, int model_max_length, FILE* log) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
    const int hf = tokenizer_is_hf(tok);
    if (!hf && check_exportable(tok, path) != 0) return -1;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: export: cannot create the output directory '%s': %s\n", out_dir, strerror(errno));
        return -1;
    }
    size_t len = 0;
    int rc;
    char* text;
    if (hf) {  // a tokenizer.json that was loaded: written back byte for byte
        const char* json = hf_tokenizer_json(tok, &len);
        rc = write_file_atomic(path, json, len);
    } else {
        text = tokenizer_json(tok, &len);
        if (!text) { fprintf(stderr, "error: export: '%s': out of memory\n", path); return -1; }
        rc = write_file_atomic(path, text, len);
        free(text);
    }
    if (rc != 0) return -1;
    if (log) fprintf(log, "export: %s: %sbyte-level BPE, vocab_size %d, %d merges, end-of-text id %d\n", path,
                     hf ? "the imported tokenizer.json unchanged: " : "", tok->vocab_size, tok->n_merges, tok->eot);

    // tokenizer_config.json: the class to load it with, the special tokens, the maximum length.
    // An imported tokenizer.json keeps its added tokens as tokens (split_special_tokens false:
    // prepare cut them out of the text too); ours encodes "<|endoftext|>" in a text as bytes.
    const char* eot = hf ? hf_tokenizer_eot_text(tok) : TOKENIZER_EOT_TEXT;
    text = NULL;
    FILE* f = open_memstream(&text, &len);
    if (!f) { fprintf(stderr, "error: export: out of memory\n"); return -1; }
    fprintf(f, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n");
    if (tok->eot >= 0)  // an imported tokenizer.json may have no end-of-text token
        fprintf(f, "  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n  \"unk_token\": \"%s\",\n", eot, eot, eot);
    fprintf(f, "  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n  \"add_prefix_space\": false,\n");
    fprintf(f, "  \"clean_up_tokenization_spaces\": false,\n  \"split_special_tokens\": %s,\n", hf ? "false" : "true");
    if (model_max_length > 0) fprintf(f, "  \"model_max_length\": %d,\n", model_max_length);
    if (tok->eot >= 0)
        fprintf(f, "  \"added_tokens_decoder\": {\"%d\": {\"content\": \"%s\", \"lstrip\": false, \"normalized\": false, "
                   "\"rstrip\": false, \"single_word\": false, \"special\": true}}\n}\n", tok->eot, eot);
    else fprintf(f, "  \"added_tokens_decoder\": {}\n}\n");
    if (fclose(f) != 0) { free(text); fprintf(stderr, "error: export: out of memory\n"); return -1; }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", out_dir);
    rc = write_file_atomic(path, text, len);
    free(text);
    if (rc != 0) return -1;
    if (log) fprintf(log, "export: %s\n", path);

    text = NULL;
    f = open_memstream(&text, &len);
    if (!f) { fprintf(stderr, "error: export: out of memory\n"); return -1; }
    if (tok->eot >= 0) fprintf(f, "{\n  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n  \"unk_token\": \"%s\"\n}\n", eot, eot, eot);
    else fprintf(f, "{}\n");
    if (fclose(f) != 0) { free(text); fprintf(stderr, "error: export: out of memory\n"); return -1; }
    snprintf(path, sizeof path, "%s/special_tokens_map.json", out_dir);
    rc = write_file_atomic(path, text, len);
    free(text);
    if (rc != 0) return -1;
    if (log) fprintf(log, "export: %s\n", path);
    return 0;
}
