// data/hf_tokenizer.c: a Hugging Face tokenizer.json as a Tokenizer (rules in hf_tokenizer.h).
// Sections: the ByteLevel alphabet; reading and checking the JSON (cJSON); the regex (PCRE2 JIT);
// added tokens; the vocabulary and merges; splitting text into pre-tokens (and NFC, utf8proc).
//
// Why cJSON (libcjson-dev) and not jansson: both parse a Qwen-size tokenizer.json (7 MB, 151k
// tokens, 151k merges) well under a second, but cJSON keeps an object's members as a list in
// file order (we walk them once; jansson hashes every key first) and is one small library with a
// plain tree API; measured in docs/formats.md.
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include "hf_tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>


// GPT-2's pattern: what ByteLevel(use_regex=true) splits with
#define HF_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static const char* const hf_eot_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

typedef struct { int id; int len; size_t off; } HfAdded;

struct TokHf {
    char* json;                 // the file's bytes
    size_t json_len;
    pcre2_code* re;
    pcre2_match_data* md;
    pcre2_match_context* mctx;  // the JIT stack below
    pcre2_jit_stack* jit_stack;
    size_t context;             // bytes of text before a match start the pattern may look at (0: none)
    int err_rc;                 // the last negative match result other than no-match (0: none)
    size_t err_off;             // and the offset in the text where that match started
    // added tokens sorted by (first byte, length descending); bucket[b] = [start[b], start[b+1])
    HfAdded* added;
    int n_added, max_added;     // count, longest content in bytes
    int start[257];
    unsigned char* added_text;
    int single_first;           // the first byte shared by every added token, or -1 (then a table scan)
    // model.vocab bytes -> id (ignore_merges and resolving merges); open addressing, -1 empty
    int32_t* vslots;
    size_t vcap;
    int ignore_merges;
    int nfc;                    // normalizer NFC (Qwen2/3): each text between added tokens is put in NFC first
    // NFC scratch (hf_segment_nfc): the normalized text, its units' starts, the pre-tokens found
    unsigned char* nbuf; size_t ncap;
    size_t* ustart; size_t ucap;     // pairs (original offset, normalized offset) of each unit
    size_t* pcs; size_t pcap;        // pairs (start, end) of pre-tokens in nbuf
    char eot_text[64];
};

// ================================================================================================
// the ByteLevel alphabet: byte b is spelled as code point hf_byte_cp[b] (GPT-2's bytes_to_unicode:
// printable Latin-1 bytes as themselves, the other 68 as U+0100.. in byte order)
// ================================================================================================

static int hf_byte_cp[256];
static int hf_cp_byte[512];  // code point -> byte, -1 if not in the alphabet

static void hf_alphabet_init(void) {
    int n = 0;
    for (int c = 0; c < 512; c++) hf_cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        hf_byte_cp[b] = printable ? b : 256 + n++;
        hf_cp_byte[hf_byte_cp[b]] = b;
    }
}

// Decodes one UTF-8 character of s (NUL-terminated) into *cp; returns its length (0 if invalid).
static int hf_utf8(const unsigned char* s, int* cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) { *cp = ((s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if ((s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        *cp = ((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if ((s[0] & 0xF8) == 0xF0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
        *cp = ((s[0] & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

// A ByteLevel spelling -> its bytes in out (room for strlen(s) bytes). Returns the byte count, or
// -1 with *bad the first code point outside the alphabet.
static int hf_unspell(const char* s, unsigned char* out, int* bad) {
    const unsigned char* p = (const unsigned char*)s;
    int n = 0;
    while (*p) {
        int cp, l = hf_utf8(p, &cp);
        if (l == 0) { *bad = *p; return -1; }
        if (cp >= 512 || hf_cp_byte[cp] < 0) { *bad = cp; return -1; }
        out[n++] = (unsigned char)hf_cp_byte[cp];
        p += l;
    }
    return n;
}

// ================================================================================================
// small helpers
// ================================================================================================

static uint64_t hf_hash(const unsigned char* p, size_t n) {  // FNV-1a, then a splitmix finish
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    h ^= h >> 31; h *= 0xbf58476d1ce4e5b9ULL; h ^= h >> 29;
    return h;
}

// the vocabulary map: bytes of token id live in t->bytes[t->offsets[id] ..]
static int hf_vocab_get(const Tokenizer* t, const unsigned char* p, size_t n) {
    const TokHf* H = t->hf;
    size_t mask = H->vcap - 1;
    for (size_t i = hf_hash(p, n) & mask;; i = (i + 1) & mask) {
        int32_t id = H->vslots[i];
        if (id < 0) return -1;
        if ((size_t)(t->offsets[id + 1] - t->offsets[id]) == n && memcmp(t->bytes + t->offsets[id], p, n) == 0) return id;
    }
}

static void hf_vocab_put(Tokenizer* t, int id) {
    TokHf* H = t->hf;
    const unsigned char* p = t->bytes + t->offsets[id];
    size_t n = (size_t)(t->offsets[id + 1] - t->offsets[id]), mask = H->vcap - 1;
    for (size_t i = hf_hash(p, n) & mask;; i = (i + 1) & mask) {
        int32_t o = H->vslots[i];
        if (o < 0) { H->vslots[i] = id; return; }
        if ((size_t)(t->offsets[o + 1] - t->offsets[o]) == n && memcmp(t->bytes + t->offsets[o], p, n) == 0) return;
    }
}

static const char* hf_type(const cJSON* o) {  // the "type" member of an object, or ""
    const cJSON* ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "";
}

static int hf_is_true(const cJSON* o, const char* key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

// a member that must be null, absent, or an empty string
static int hf_is_unset(const cJSON* o, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0');
}

// ================================================================================================
// the regex: the pattern as the `tokenizers` library reads it (Oniguruma, Ruby syntax), rewritten
// for PCRE2 and compiled with JIT. What differs, and becomes here (docs/formats.md has the table):
//   X{n,m}+ X{n,}+ X{n}+   Ruby: one or more runs of X{..} (not possessive) -> (?:X{n,m})+
//   X{n}?                  Ruby: X{n} optional (not lazy)                     -> (?:X{n})?
//   {,m}                   Ruby: {0,m} (PCRE2 10.42: literal text)            -> {0,m}
//   \h \H                  Ruby: a hex digit (PCRE2: horizontal space)        -> [0-9a-fA-F] and its complement
//   \w \W \b \B            Ruby: word = Alphabetic, marks, Nd, Pc, and 6 Latin-1 No (PCRE2: L, N, _)
//   \s \S                  Ruby: Unicode White_Space (PCRE2 adds U+180E)
//   ^ $                    Ruby: at every line start / end (PCRE2_MULTILINE); newline is LF only
//   (?m)                   Ruby: dot matches newline                          -> (?s)
//   \uHHHH                 Ruby: a code point (PCRE2: an error)               -> \x{HHHH}
// Refused (one line naming the construct and its offset): (?s) and other options Ruby lacks,
// POSIX brackets [:..:] (Ruby: Unicode Alphabetic etc.; PCRE2: general categories), nested
// classes and && inside a class (Ruby set operations), \W and \H inside a class, the absence
// operator (?~..).
// ================================================================================================

// Unicode White_Space, what Oniguruma's \s matches, as class items; and its complement
#define HF_WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define HF_NOT_WS "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}" \
                  "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}"
// Oniguruma's Unicode \w (measured against tokenizers 0.23 on every code point: equal on all
// characters of PCRE2's Unicode 14 tables; Oniguruma's newer tables add ones assigned later)
#define HF_WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"
#define HF_HEX "0-9a-fA-F"
#define HF_NOT_HEX "\\x{0}-\\x{2F}\\x{3A}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{10FFFF}"

typedef struct {
    char* s;          // the PCRE2 pattern being written
    size_t* from;     // from[k]: the offset in the original pattern that output byte k came from
    size_t n, cap;
    int oom;
} HfOut;

static void hf_emit(HfOut* o, const char* p, size_t len, size_t from) {
    if (o->n + len + 1 > o->cap) {
        size_t c = o->cap ? o->cap : 256;
        while (c < o->n + len + 1) c *= 2;
        char* s = realloc(o->s, c);
        size_t* f = s ? realloc(o->from, c * sizeof(size_t)) : NULL;
        if (s) o->s = s;
        if (!f) { o->oom = 1; return; }
        o->from = f;
        o->cap = c;
    }
    memcpy(o->s + o->n, p, len);
    for (size_t k = 0; k < len; k++) o->from[o->n + k] = from;
    o->n += len;
    o->s[o->n] = '\0';
}
static void hf_emits(HfOut* o, const char* p, size_t from) { hf_emit(o, p, strlen(p), from); }

// inserts text at output offset at (wrapping an atom in a group)
static void hf_insert(HfOut* o, size_t at, const char* p, size_t from) {
    size_t len = strlen(p), tail = o->n - at;
    hf_emit(o, p, len, from);  // grows; then move into place
    if (o->oom) return;
    memmove(o->s + at + len, o->s + at, tail);
    memmove(o->from + at + len, o->from + at, tail * sizeof(size_t));
    memcpy(o->s + at, p, len);
    for (size_t k = 0; k < len; k++) o->from[at + k] = from;
}

// {n}, {n,}, {n,m} or {,m} at p: its length, with *lo_missing set for {,m}; 0 when it is literal text
static size_t hf_interval(const char* p, int* lo_missing, int* exact) {
    size_t k = 1, d1 = 0, d2 = 0;
    while (p[k] >= '0' && p[k] <= '9') { k++; d1++; }
    int comma = p[k] == ',';
    if (comma) { k++; while (p[k] >= '0' && p[k] <= '9') { k++; d2++; } }
    if (p[k] != '}' || (d1 == 0 && d2 == 0)) return 0;
    *lo_missing = d1 == 0;
    *exact = !comma;
    return k + 1;
}

#define HF_REFUSE(...) do { tok_error(path, __VA_ARGS__); free(o.s); free(o.from); return -1; } while (0)

// pat (Ruby syntax) -> out->s (PCRE2); 0, or -1 after one line naming the construct and offset
static int hf_translate(const char* pat, const char* path, HfOut* out) {
    HfOut o = {0};
    const size_t n = strlen(pat);
    int in_class = 0;
    long atom = -1;                 // output offset of the last atom (what a quantifier repeats), -1: none
    size_t groups[256]; int depth = 0;
    hf_emit(&o, "", 0, 0);
    for (size_t i = 0; i < n && !o.oom;) {
        const char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            const char d = pat[i + 1];
            size_t at = o.n;
            const char* rep = NULL;
            if (!in_class) {
                rep = d == 's' ? "[" HF_WS "]" : d == 'S' ? "[^" HF_WS "]" : d == 'h' ? "[" HF_HEX "]" : d == 'H' ? "[^" HF_HEX "]"
                    : d == 'w' ? "[" HF_WORD "]" : d == 'W' ? "[^" HF_WORD "]"
                    : d == 'b' ? "(?:(?<=[" HF_WORD "])(?![" HF_WORD "])|(?<![" HF_WORD "])(?=[" HF_WORD "]))"
                    : d == 'B' ? "(?:(?<=[" HF_WORD "])(?=[" HF_WORD "])|(?<![" HF_WORD "])(?![" HF_WORD "]))" : NULL;
            } else {
                if (d == 'W' || d == 'H')
                    HF_REFUSE("pre_tokenizer Split regex: \\%c inside a [...] class (pattern offset %zu) is not supported", d, i);
                rep = d == 's' ? HF_WS : d == 'S' ? HF_NOT_WS : d == 'h' ? HF_HEX : d == 'w' ? HF_WORD : NULL;
            }
            if (rep) { hf_emits(&o, rep, i); i += 2; atom = (long)at; continue; }
            if (d == 'u') {  // \uHHHH
                size_t k = 2;
                while (k < 6 && i + k < n && strchr("0123456789abcdefABCDEF", pat[i + k]) && pat[i + k]) k++;
                if (k != 6) HF_REFUSE("pre_tokenizer Split regex: \\u at pattern offset %zu wants 4 hex digits", i);
                char x[16];
                snprintf(x, sizeof x, "\\x{%.4s}", pat + i + 2);
                hf_emits(&o, x, i);
                i += 6;
                atom = (long)at;
                continue;
            }
            size_t k = 2;  // \p{..}, \x{..}, \k<..>: copied whole; else the escaped character (UTF-8)
            if ((d == 'p' || d == 'P' || d == 'x') && i + 2 < n && pat[i + 2] == '{') {
                const char* e = strchr(pat + i, '}');
                if (e) k = (size_t)(e - (pat + i)) + 1;
            } else while (i + k < n && ((unsigned char)pat[i + k] & 0xC0) == 0x80) k++;
            hf_emit(&o, pat + i, k, i);
            i += k;
            atom = (long)at;
            continue;
        }
        if (in_class) {
            if (c == '[') {
                if (pat[i + 1] == ':')
                    HF_REFUSE("pre_tokenizer Split regex: the POSIX bracket [:...:] at pattern offset %zu is not supported "
                              "(Oniguruma reads it as a Unicode property, PCRE2 as general categories)", i);
                HF_REFUSE("pre_tokenizer Split regex: a class inside a class at pattern offset %zu (Oniguruma set syntax) "
                          "is not supported", i);
            }
            if (c == '&' && pat[i + 1] == '&')
                HF_REFUSE("pre_tokenizer Split regex: && (class intersection) at pattern offset %zu is not supported", i);
            if (c == ']') in_class = 0;
            hf_emit(&o, &c, 1, i);
            i++;
            continue;
        }
        if (c == '[') {
            atom = (long)o.n;
            in_class = 1;
            hf_emit(&o, "[", 1, i++);
            if (pat[i] == '^') hf_emit(&o, "^", 1, i++);
            if (pat[i] == ']') hf_emit(&o, "]", 1, i++);  // a literal ] first in a class
            continue;
        }
        if (c == '(') {
            if (depth == (int)(sizeof groups / sizeof groups[0]))
                HF_REFUSE("pre_tokenizer Split regex: groups nested deeper than %d", depth);
            groups[depth++] = o.n;
            if (pat[i + 1] == '?' && pat[i + 2] == '~')
                HF_REFUSE("pre_tokenizer Split regex: the absence operator (?~...) at pattern offset %zu is not supported", i);
            if (pat[i + 1] == '?' && strchr("imxs-", pat[i + 2]) && pat[i + 2]) {  // options: (?imx-imx) or (?imx-imx:
                size_t k = i + 2;
                hf_emit(&o, "(?", 2, i);
                for (; k < n && pat[k] != ')' && pat[k] != ':'; k++) {
                    char f = pat[k];
                    if (f != 'i' && f != 'm' && f != 'x' && f != '-')
                        HF_REFUSE("pre_tokenizer Split regex: option '%c' in (?%c...) at pattern offset %zu: Oniguruma's Ruby "
                                  "syntax has only i, m (dot matches newline) and x; the tokenizers library refuses it", f, f, i);
                    char g = f == 'm' ? 's' : f;  // Ruby's m is PCRE2's s
                    hf_emit(&o, &g, 1, k);
                }
                i = k;
                continue;
            }
            hf_emit(&o, "(", 1, i++);
            continue;
        }
        if (c == ')') {
            atom = depth > 0 ? (long)groups[--depth] : -1;
            hf_emit(&o, ")", 1, i++);
            continue;
        }
        if (c == '{') {
            int lo_missing = 0, exact = 0;
            size_t len = hf_interval(pat + i, &lo_missing, &exact);
            if (len > 0) {
                if (lo_missing) { hf_emit(&o, "{0", 2, i); hf_emit(&o, pat + i + 1, len - 1, i); }
                else hf_emit(&o, pat + i, len, i);
                size_t q = i + len;
                if (atom >= 0 && (pat[q] == '+' || (pat[q] == '?' && exact))) {  // Ruby: a repeat of the repeat
                    hf_insert(&o, (size_t)atom, "(?:", q);
                    char tail[3] = {')', pat[q], 0};
                    hf_emits(&o, tail, q);
                    q++;
                }
                i = q;
                continue;
            }
        }
        if (c == '|') atom = -1;
        else if (c != '*' && c != '+' && c != '?' && c != '{' && ((unsigned char)c & 0xC0) != 0x80) atom = (long)o.n;
        hf_emit(&o, &c, 1, i++);
    }
    if (o.oom) { free(o.s); free(o.from); tok_error(path, "out of memory"); return -1; }
    *out = o;
    return 0;
}
#undef HF_REFUSE

static int hf_compile(TokHf* H, const char* pattern, const char* path) {
    HfOut o;
    if (hf_translate(pattern, path, &o) != 0) return -1;
    int err;
    PCRE2_SIZE at;
    // UCP: \p{..} and classes by Unicode properties; MATCH_INVALID_UTF: any bytes are a valid
    // subject, and no pattern item matches a byte that is not valid UTF-8; MULTILINE: Ruby's ^ and
    // $ (every line); newline LF only, as Oniguruma's
    pcre2_compile_context* cc = pcre2_compile_context_create(NULL);
    if (!cc || pcre2_set_newline(cc, PCRE2_NEWLINE_LF) != 0) { free(o.s); free(o.from); tok_error(path, "out of memory"); return -1; }
    H->re = pcre2_compile((PCRE2_SPTR)o.s, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &at, cc);
    pcre2_compile_context_free(cc);
    size_t orig = o.n ? o.from[at < o.n ? at : o.n - 1] : 0;
    free(o.s);
    free(o.from);
    if (!H->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        tok_error(path, "pre_tokenizer Split regex does not compile (PCRE2, near pattern offset %zu): %s", orig, msg);
        return -1;
    }
    // PARTIAL_HARD too: streaming asks whether a match could change with more text
    err = pcre2_jit_compile(H->re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    if (err != 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        tok_error(path, "PCRE2 JIT compilation of the pre_tokenizer regex failed: %s (a PCRE2 built without JIT?)", msg);
        return -1;
    }
    // the text before a match start that the pattern can look at (lookbehind, \b, ^): kept when
    // streaming, in bytes (4 per character), 0 when none
    uint32_t lb = 0;
    pcre2_pattern_info(H->re, PCRE2_INFO_MAXLOOKBEHIND, &lb);
    H->context = lb > 0 || strchr(pattern, '^') ? 4 * (size_t)lb + 8 : 0;
    H->md = pcre2_match_data_create_from_pattern(H->re, NULL);
    // a JIT stack of up to 8 MiB (PCRE2's default is 32 KiB): deep matches are the library's too
    H->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    H->mctx = pcre2_match_context_create(NULL);
    if (!H->md || !H->jit_stack || !H->mctx) { tok_error(path, "out of memory"); return -1; }
    pcre2_jit_stack_assign(H->mctx, NULL, H->jit_stack);
    return 0;
}

// The pattern the pre_tokenizer splits with, or NULL after an error naming the part.
static const char* hf_pre_tokenizer(const cJSON* root, const char* path) {
    const cJSON* pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!pt || cJSON_IsNull(pt)) {
        tok_error(path, "pre_tokenizer is null: not a byte-level BPE (want ByteLevel, or Sequence [Split, ByteLevel])");
        return NULL;
    }
    const char* ty = hf_type(pt);
    if (strcmp(ty, "ByteLevel") == 0) {
        if (hf_is_true(pt, "add_prefix_space")) {
            tok_error(path, "pre_tokenizer ByteLevel add_prefix_space is true: adding a space changes the text; not supported");
            return NULL;
        }
        const cJSON* ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        if (ur && !cJSON_IsTrue(ur)) {
            tok_error(path, "pre_tokenizer ByteLevel without use_regex and without a Split: no pre-tokenizer regex");
            return NULL;
        }
        return HF_GPT2_PATTERN;
    }
    const cJSON* list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (strcmp(ty, "Sequence") != 0 || cJSON_GetArraySize(list) != 2) {
        tok_error(path, "pre_tokenizer '%s' is not supported (want ByteLevel, or Sequence [Split, ByteLevel])",
                 ty[0] ? ty : "?");
        return NULL;
    }
    const cJSON* sp = cJSON_GetArrayItem(list, 0);
    const cJSON* bl = cJSON_GetArrayItem(list, 1);
    if (strcmp(hf_type(sp), "Split") != 0 || strcmp(hf_type(bl), "ByteLevel") != 0) {
        tok_error(path, "pre_tokenizer Sequence [%s, %s] is not supported (want [Split, ByteLevel])", hf_type(sp), hf_type(bl));
        return NULL;
    }
    if (hf_is_true(bl, "use_regex") || hf_is_true(bl, "add_prefix_space")) {
        tok_error(path, "pre_tokenizer Sequence: its ByteLevel must have use_regex and add_prefix_space false");
        return NULL;
    }
    const cJSON* beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 || hf_is_true(sp, "invert")) {
        tok_error(path, "pre_tokenizer Split: behavior '%s'%s is not supported (want Isolated, invert false)",
                 cJSON_IsString(beh) ? beh->valuestring : "?", hf_is_true(sp, "invert") ? " with invert" : "");
        return NULL;
    }
    const cJSON* re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sp, "pattern"), "Regex");
    if (!cJSON_IsString(re)) {
        tok_error(path, "pre_tokenizer Split: pattern is not {\"Regex\": \"...\"} (a String pattern is not supported)");
        return NULL;
    }
    return re->valuestring;
}

// ================================================================================================
// added tokens
// ================================================================================================

static int hf_added_cmp(const void* x, const void* y, void* text) {
    const HfAdded *a = x, *b = y;
    const unsigned char* s = text;
    if (s[a->off] != s[b->off]) return s[a->off] < s[b->off] ? -1 : 1;
    return b->len - a->len;  // longest first: the longest match at a position wins
}

static unsigned char* hf_sort_text;  // qsort has no context argument in C99
static int hf_added_cmp_q(const void* x, const void* y) { return hf_added_cmp(x, y, hf_sort_text); }

static int hf_added_load(TokHf* H, const cJSON* root, const char* path, int* max_id) {
    const cJSON* arr = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (arr && !cJSON_IsNull(arr) && !cJSON_IsArray(arr)) { tok_error(path, "added_tokens is not an array"); return -1; }
    int n = cJSON_GetArraySize(arr);
    size_t text = 0;
    H->added = calloc((size_t)n + 1, sizeof(HfAdded));
    const cJSON* a;
    cJSON_ArrayForEach(a, arr) {
        const cJSON* c = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (cJSON_IsString(c)) text += strlen(c->valuestring);
    }
    H->added_text = malloc(text + 1);
    if (!H->added || !H->added_text) { tok_error(path, "out of memory"); return -1; }
    int k = 0;
    size_t off = 0;
    cJSON_ArrayForEach(a, arr) {
        const cJSON* id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON* c = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 30) || !cJSON_IsString(c) ||
            c->valuestring[0] == '\0') {
            tok_error(path, "added_tokens[%d]: want an integer id in [0, 2^30) and a non-empty content string", k);
            return -1;
        }
        static const char* const opts[] = {"lstrip", "rstrip", "single_word"};
        for (int o = 0; o < 3; o++)
            if (hf_is_true(a, opts[o])) {
                tok_error(path, "added_tokens[%d] '%s': %s true is not supported (only tokens matched as they are)", k,
                         c->valuestring, opts[o]);
                return -1;
            }
        size_t len = strlen(c->valuestring);
        H->added[k] = (HfAdded){.id = id->valueint, .len = (int)len, .off = off};
        memcpy(H->added_text + off, c->valuestring, len);
        off += len;
        if (id->valueint > *max_id) *max_id = id->valueint;
        if ((int)len > H->max_added) H->max_added = (int)len;
        k++;
    }
    H->n_added = k;
    hf_sort_text = H->added_text;
    qsort(H->added, (size_t)k, sizeof(HfAdded), hf_added_cmp_q);
    int b = 0;
    for (int i = 0; i <= 256; i++) {  // bucket starts by first byte
        while (b < k && H->added_text[H->added[b].off] < i) b++;
        H->start[i] = b;
    }
    H->single_first = k > 0 && H->added_text[H->added[0].off] == H->added_text[H->added[k - 1].off]
                          ? H->added_text[H->added[0].off] : -1;
    return 0;
}

int hf_tokenizer_added_id(const Tokenizer* t, const unsigned char* p, size_t n) {
    const TokHf* H = t->hf;
    if (!H || n > (size_t)H->max_added) return -1;
    for (int k = H->start[p[0]]; k < H->start[p[0] + 1]; k++)
        if ((size_t)H->added[k].len == n && memcmp(H->added_text + H->added[k].off, p, n) == 0) return H->added[k].id;
    return -1;
}

int hf_tokenizer_whole_id(const Tokenizer* t, const unsigned char* p, size_t n) {
    return t->hf && t->hf->ignore_merges ? hf_vocab_get(t, p, n) : -1;
}

// The first position p in [from, end) where an added token starts (the longest there: *len), or
// SIZE_MAX. Tokens may run past end up to n.
static size_t hf_find_added(const TokHf* H, const unsigned char* s, size_t n, size_t from, size_t end, size_t* len) {
    if (H->n_added == 0) return SIZE_MAX;
    for (size_t p = from; p < end; p++) {
        if (H->single_first >= 0) {  // one first byte (often '<'): memchr
            const unsigned char* q = memchr(s + p, H->single_first, end - p);
            if (!q) return SIZE_MAX;
            p = (size_t)(q - s);
        }
        for (int k = H->start[s[p]]; k < H->start[s[p] + 1]; k++) {
            size_t l = (size_t)H->added[k].len;
            if (p + l <= n && memcmp(H->added_text + H->added[k].off, s + p, l) == 0) { *len = l; return p; }
        }
    }
    return SIZE_MAX;
}

// ================================================================================================
// loading
// ================================================================================================

int hf_tokenizer_is_json(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return 1;
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {}
    fclose(f);
    // '{'; or what the JSON loader names better than "wrong magic": a top-level array, a UTF-8
    // byte-order mark, any file named *.json
    size_t l = strlen(path);
    return c == '{' || c == '[' || c == 0xEF || (l >= 5 && strcmp(path + l - 5, ".json") == 0);
}

void hf_tokenizer_free(Tokenizer* t) {
    TokHf* H = t->hf;
    free(t->merge_ids);
    free(t->byte_ids);
    t->merge_ids = t->byte_ids = NULL;
    if (!H) return;
    free(H->json);
    if (H->md) pcre2_match_data_free(H->md);
    if (H->mctx) pcre2_match_context_free(H->mctx);
    if (H->jit_stack) pcre2_jit_stack_free(H->jit_stack);
    if (H->re) pcre2_code_free(H->re);
    free(H->added);
    free(H->added_text);
    free(H->vslots);
    free(H->nbuf);
    free(H->ustart);
    free(H->pcs);
    free(H);
    t->hf = NULL;
}

const char* hf_tokenizer_json(const Tokenizer* t, size_t* len) {
    *len = t->hf ? t->hf->json_len : 0;
    return t->hf ? t->hf->json : NULL;
}

const char* hf_tokenizer_eot_text(const Tokenizer* t) { return t->hf ? t->hf->eot_text : ""; }

// The line and column of byte offset `at` in text, for a JSON error.
static void hf_line_col(const char* text, size_t at, int* line, int* col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

// model: byte-level BPE settings; returns the model object or NULL after an error
static const cJSON* hf_model(const cJSON* root, const char* path) {
    const cJSON* m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(m)) { tok_error(path, "no \"model\" object: not a tokenizer.json"); return NULL; }
    const char* ty = hf_type(m);
    if (ty[0] && strcmp(ty, "BPE") != 0) {
        tok_error(path, "model.type is '%s': only byte-level BPE is supported", ty);
        return NULL;
    }
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "vocab")) ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "merges"))) {
        tok_error(path, "model: want a \"vocab\" object and a \"merges\" array (a BPE model)");
        return NULL;
    }
    if (!hf_is_unset(m, "dropout")) { tok_error(path, "model.dropout is set: BPE dropout is random; not supported"); return NULL; }
    if (!hf_is_unset(m, "continuing_subword_prefix") || !hf_is_unset(m, "end_of_word_suffix")) {
        tok_error(path, "model.continuing_subword_prefix / end_of_word_suffix is set: not a byte-level BPE");
        return NULL;
    }
    if (hf_is_true(m, "byte_fallback")) {
        tok_error(path, "model.byte_fallback is true: a SentencePiece-style BPE, not byte-level; not supported");
        return NULL;
    }
    return m;
}

// merges[r] as two spellings: "a b" (one space) or ["a", "b"]; 0, or -1 after an error
static int hf_merge_parts(const cJSON* e, int r, char* buf, size_t cap, const char** a, const char** b, const char* path) {
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
        *a = cJSON_GetArrayItem(e, 0)->valuestring;
        *b = cJSON_GetArrayItem(e, 1)->valuestring;
        return 0;
    }
    if (cJSON_IsString(e)) {
        const char* s = e->valuestring;
        const char* sp = strchr(s, ' ');
        size_t l = strlen(s);
        if (sp && sp != s && sp[1] && !strchr(sp + 1, ' ') && l < cap) {
            memcpy(buf, s, l + 1);
            buf[sp - s] = '\0';
            *a = buf;
            *b = buf + (sp - s) + 1;
            return 0;
        }
    }
    char* txt = cJSON_PrintUnformatted(e);
    tok_error(path, "model.merges[%d] is %.60s: want \"a b\" or [\"a\", \"b\"]", r, txt ? txt : "?");
    free(txt);
    return -1;
}

static int hf_build(Tokenizer* t, const cJSON* root, const char* path) {
    TokHf* H = t->hf;
    const cJSON* norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && strcmp(hf_type(norm), "NFC") == 0) H->nfc = 1;  // Qwen2/3: supported (utf8proc)
    else if (norm && !cJSON_IsNull(norm) &&
             !(strcmp(hf_type(norm), "Sequence") == 0 &&
               cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(norm, "normalizers")) == 0)) {
        tok_error(path, "normalizer '%s' changes the text before splitting; not supported (want null or NFC)", hf_type(norm));
        return -1;
    }
    const cJSON* dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && strcmp(hf_type(dec), "ByteLevel") != 0) {
        tok_error(path, "decoder '%s' is not supported (want ByteLevel or null)", hf_type(dec));
        return -1;
    }
    const char* pattern = hf_pre_tokenizer(root, path);
    if (!pattern) return -1;
    const cJSON* m = hf_model(root, path);
    if (!m) return -1;
    H->ignore_merges = hf_is_true(m, "ignore_merges");
    int max_id = -1;
    if (hf_added_load(H, root, path, &max_id) != 0) return -1;

    // 1. ids and the byte length of every token
    const cJSON* vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON* e;
    int nv = 0;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 30) || e->valuedouble != (double)e->valueint) {
            tok_error(path, "model.vocab[\"%.40s\"] is not an integer id in [0, 2^30)", e->string);
            return -1;
        }
        if (e->valueint > max_id) max_id = e->valueint;
        nv++;
    }
    if (max_id < 0) { tok_error(path, "model.vocab is empty"); return -1; }
    // ids index tables of max_id + 1 entries: a few unused ids are fine, an id far above the count
    // of tokens (a 2^30 - 1 among 50k) would size them for a vocabulary that is not there
    if ((int64_t)max_id + 1 > 2 * ((int64_t)nv + H->n_added) + 1024) {
        const char* who = "?";
        cJSON_ArrayForEach(e, vocab) if (e->valueint == max_id) who = e->string;
        for (int k = 0; k < H->n_added; k++) if (H->added[k].id == max_id) who = "(an added token)";
        tok_error(path, "id %d (\"%.40s\") is far above the %d tokens of model.vocab and added_tokens: ids must number the "
                  "tokens (at most 2 x their count + 1024, here %lld); renumber it", max_id, who, nv + H->n_added,
                  2 * ((long long)nv + H->n_added) + 1024);
        return -1;
    }
    const int V = max_id + 1;
    t->vocab_size = V;
    t->offsets = calloc((size_t)V + 1, sizeof(int64_t));
    char* is_vocab = calloc((size_t)V, 1);  // 1: from model.vocab, 2: an added token
    if (!t->offsets || !is_vocab) { free(is_vocab); tok_error(path, "out of memory"); return -1; }
    int64_t* len = t->offsets + 1;
    size_t longest = 0;
    for (int k = 0; k < H->n_added; k++) { len[H->added[k].id] = H->added[k].len; is_vocab[H->added[k].id] = 2; }
    cJSON_ArrayForEach(e, vocab) {
        size_t l = strlen(e->string);
        if (l > longest) longest = l;
        if (is_vocab[e->valueint] == 2) {  // an added token: its content is its text, which must be this token's
            int k = 0;
            while (k < H->n_added && H->added[k].id != e->valueint) k++;
            if ((size_t)H->added[k].len != l || memcmp(H->added_text + H->added[k].off, e->string, l) != 0) {
                tok_error(path, "added token '%.*s' has id %d, which model.vocab gives to \"%.40s\": two tokens with one id "
                          "(the tokenizers library would renumber the added token; give it an unused id)",
                          H->added[k].len, (const char*)H->added_text + H->added[k].off, e->valueint, e->string);
                free(is_vocab);
                return -1;
            }
            continue;
        }
        if (is_vocab[e->valueint] == 1) {
            tok_error(path, "model.vocab gives id %d to two tokens (one is \"%.40s\")", e->valueint, e->string);
            free(is_vocab);
            return -1;
        }
        is_vocab[e->valueint] = 1;
        int cp = 0, nb = 0;
        const unsigned char* p = (const unsigned char*)e->string;
        while (*p) {  // count characters; each is one byte
            int c, l1 = hf_utf8(p, &c);
            if (l1 == 0 || c >= 512 || hf_cp_byte[c] < 0) { cp = l1 ? c : *p; nb = -1; break; }
            p += l1;
            nb++;
        }
        if (nb < 0) {
            tok_error(path, "model.vocab token \"%.40s\" (id %d) has U+%04X, not a ByteLevel character: not a byte-level BPE",
                     e->string, e->valueint, cp);
            free(is_vocab);
            return -1;
        }
        len[e->valueint] = nb;
    }
    for (int i = 0; i < V; i++) t->offsets[i + 1] += t->offsets[i];
    t->bytes = malloc((size_t)t->offsets[V] + 1);
    unsigned char* tmp = malloc(longest + 1);
    if (!t->bytes || !tmp) { free(is_vocab); free(tmp); tok_error(path, "out of memory"); return -1; }
    for (int k = 0; k < H->n_added; k++)
        memcpy(t->bytes + t->offsets[H->added[k].id], H->added_text + H->added[k].off, (size_t)H->added[k].len);
    int bad;
    cJSON_ArrayForEach(e, vocab)
        if (is_vocab[e->valueint] == 1) hf_unspell(e->string, t->bytes + t->offsets[e->valueint], &bad);

    // 2. the bytes -> id map over model.vocab; the 256 ByteLevel characters
    H->vcap = 64;
    while (H->vcap < 2 * (size_t)nv) H->vcap *= 2;
    H->vslots = malloc(H->vcap * sizeof(int32_t));
    t->byte_ids = malloc(256 * sizeof(int));
    if (!H->vslots || !t->byte_ids) { free(is_vocab); free(tmp); tok_error(path, "out of memory"); return -1; }
    for (size_t i = 0; i < H->vcap; i++) H->vslots[i] = -1;
    for (int i = 0; i < V; i++) if (is_vocab[i] == 1) hf_vocab_put(t, i);
    free(is_vocab);
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_ids[b] = hf_vocab_get(t, &c, 1);
        if (t->byte_ids[b] < 0) {
            tok_error(path, "model.vocab has no token for byte 0x%02X (ByteLevel U+%04X): not a byte-level BPE vocabulary",
                     b, hf_byte_cp[b]);
            free(tmp);
            return -1;
        }
    }

    // 3. merges, in rank order
    const cJSON* merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    const int M = cJSON_GetArraySize(merges);
    t->n_merges = M;
    t->merges = calloc((size_t)M * 2 + 2, sizeof(int));
    t->merge_ids = calloc((size_t)M + 1, sizeof(int));
    int* made_at = malloc((size_t)V * sizeof(int));  // the first merge that makes each id
    size_t cap = 2 * longest + 2;
    char* sbuf = malloc(cap + 1);
    unsigned char* joined = malloc(2 * longest + 2);
    if (!t->merges || !t->merge_ids || !made_at || !sbuf || !joined) {
        free(tmp); free(made_at); free(sbuf); free(joined);
        tok_error(path, "out of memory");
        return -1;
    }
    for (int i = 0; i < V; i++) made_at[i] = INT_MAX;
    int r = 0, rc = 0;
    cJSON_ArrayForEach(e, merges) {
        const char* part[2];
        int id[2];
        size_t lp[2];
        if (hf_merge_parts(e, r, sbuf, cap, &part[0], &part[1], path) != 0) { rc = -1; break; }
        for (int s = 0; s < 2 && rc == 0; s++) {
            int l = strlen(part[s]) <= longest ? hf_unspell(part[s], tmp, &bad) : -1;
            id[s] = l > 0 ? hf_vocab_get(t, tmp, (size_t)l) : -1;
            if (id[s] < 0) {
                tok_error(path, "model.merges[%d] (\"%.40s\", \"%.40s\") names \"%.40s\", which is not in model.vocab", r,
                         part[0], part[1], part[s]);
                rc = -1;
                break;
            }
            lp[s] = (size_t)l;
            memcpy(joined + (s ? lp[0] : 0), tmp, (size_t)l);
        }
        if (rc != 0) break;
        int z = hf_vocab_get(t, joined, lp[0] + lp[1]);
        if (z < 0) {
            tok_error(path, "model.merges[%d] (\"%.40s\", \"%.40s\"): their concatenation is not in model.vocab", r,
                     part[0], part[1]);
            rc = -1;
            break;
        }
        t->merges[2 * r] = id[0];
        t->merges[2 * r + 1] = id[1];
        t->merge_ids[r] = z;
        if (made_at[z] > r) made_at[z] = r;
        r++;
    }
    // bpe_simple (tokenizer.c) merges every occurrence of the best pair in one sweep: the same as
    // the rank-ordered heap only when a merge never uses a token that a later merge makes
    for (int i = 0; rc == 0 && i < M; i++)
        if ((made_at[t->merges[2 * i]] != INT_MAX && made_at[t->merges[2 * i]] > i) ||
            (made_at[t->merges[2 * i + 1]] != INT_MAX && made_at[t->merges[2 * i + 1]] > i))
            t->heap_only = 1;
    free(tmp); free(made_at); free(sbuf); free(joined);
    if (rc != 0) return -1;

    // 4. end-of-text by name; the regex
    t->eot = -1;
    for (size_t k = 0; k < sizeof(hf_eot_names) / sizeof(hf_eot_names[0]) && t->eot < 0; k++) {
        const char* nm = hf_eot_names[k];
        int id = hf_tokenizer_added_id(t, (const unsigned char*)nm, strlen(nm));
        if (id < 0) id = hf_vocab_get(t, (const unsigned char*)nm, strlen(nm));
        if (id >= 0) { t->eot = id; snprintf(H->eot_text, sizeof H->eot_text, "%s", nm); }
    }
    if (hf_compile(H, pattern, path) != 0) return -1;
    t->can_encode = 1;
    return 0;   // (the rank map and cache: tokenizer_load, data/tokenizer.c)
}

// What cJSON accepts and JSON (and the `tokenizers` library, serde_json) does not, or what cJSON
// reads differently: a UTF-8 byte-order mark, a control byte outside a string (cJSON skips any
// byte <= 0x20 as whitespace) or inside one, and \u0000 in a string (cJSON ends the string there,
// so a vocabulary key would be cut). 0, or -1 after one line naming the line and column.
static int hf_json_prescan(const char* js, size_t n, const char* path) {
    int line, col;
    if (n >= 3 && memcmp(js, "\xEF\xBB\xBF", 3) == 0) {
        tok_error(path, "starts with a UTF-8 byte-order mark, which JSON does not allow (the tokenizers library refuses "
                        "the file too): remove the first 3 bytes");
        return -1;
    }
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)js[i];
        if (c < 0x20 && (in_str || (c != ' ' && c != '\t' && c != '\n' && c != '\r'))) {
            hf_line_col(js, i, &line, &col);
            tok_error(path, "byte 0x%02X at line %d, column %d %s: not valid JSON (the tokenizers library refuses the file)",
                      c, line, col, in_str ? "inside a string (control bytes must be escaped)" : "outside a string (JSON whitespace is "
                      "space, tab, CR, LF)");
            return -1;
        }
        if (c == '"') in_str = !in_str;
        else if (c == '\\' && in_str && i + 1 < n) {
            if (js[i + 1] == 'u' && i + 5 < n && memcmp(js + i + 2, "0000", 4) == 0) {
                hf_line_col(js, i, &line, &col);
                tok_error(path, "\\u0000 (a NUL character) in a string at line %d, column %d: no byte-level BPE token holds "
                                "one (ByteLevel spells byte 0 as U+0100); not supported", line, col);
                return -1;
            }
            i++;  // the escaped character (\" does not end the string)
        }
    }
    return 0;
}

int hf_tokenizer_load(Tokenizer* t, const char* path_in) {
    memset(t, 0, sizeof(*t));
    static int alphabet_ready = 0;
    if (!alphabet_ready) { hf_alphabet_init(); alphabet_ready = 1; }
    char path[4096];
    struct stat st;
    if (stat(path_in, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/tokenizer.json", path_in);
    else snprintf(path, sizeof path, "%s", path_in);
    FILE* f = fopen(path, "rb");
    if (!f) { tok_error(path, "cannot open: %s", strerror(errno)); return -1; }
    t->hf = calloc(1, sizeof(TokHf));
    TokHf* H = t->hf;
    if (!H || fstat(fileno(f), &st) != 0) { fclose(f); tok_error(path, "out of memory or cannot stat"); free(H); t->hf = NULL; return -1; }
    H->json_len = (size_t)st.st_size;
    H->json = malloc(H->json_len + 1);
    if (!H->json || fread(H->json, 1, H->json_len, f) != H->json_len) {
        fclose(f);
        tok_error(path, "read error: %s", strerror(errno));
        return -1;
    }
    fclose(f);
    H->json[H->json_len] = '\0';
    if (hf_json_prescan(H->json, H->json_len, path) != 0) return -1;
    const char* end = NULL;
    cJSON* root = cJSON_ParseWithLengthOpts(H->json, H->json_len, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - H->json) : 0;
        int line, col;
        hf_line_col(H->json, at, &line, &col);
        if (at >= H->json_len)
            tok_error(path, "broken JSON: the text ends inside it at line %d, column %d (byte %zu); truncated?", line, col, at);
        else tok_error(path, "broken JSON at line %d, column %d (byte %zu): near \"%.20s\"", line, col, at, H->json + at);
        return -1;
    }
    size_t rest = end ? (size_t)(end - H->json) : H->json_len;
    while (rest < H->json_len && strchr(" \t\r\n", H->json[rest])) rest++;
    int rc;
    if (rest < H->json_len) {
        int line, col;
        hf_line_col(H->json, rest, &line, &col);
        tok_error(path, "text after the JSON value at line %d, column %d: \"%.20s\" (the tokenizers library refuses the file)",
                  line, col, H->json + rest);
        rc = -1;
    } else if (!cJSON_IsObject(root))
        rc = (tok_error(path, "the JSON's top level is %s, not an object: not a tokenizer.json",
                        cJSON_IsArray(root) ? "an array" : cJSON_IsString(root) ? "a string" : "a number, true, false or null"), -1);
    else rc = hf_build(t, root, path);
    cJSON_Delete(root);
    return rc;
}

// ================================================================================================
// splitting text into pre-tokens
// ================================================================================================

// grows *buf (of *cap elements of size elem) to hold need; 0, or -1 when out of memory
static int hf_grow(void** buf, size_t* cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void* g = realloc(*buf, c * elem);
    if (!g) return -1;
    *buf = g;
    *cap = c;
    return 0;
}

// the length of the valid UTF-8 character at p[0..n), or 0 (what Python's decoder and PCRE2 accept:
// no overlongs, no surrogates, nothing above U+10FFFF)
static size_t hf_valid_char(const unsigned char* p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t l = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (l == 0 || l > n) return 0;
    for (size_t k = 1; k < l; k++) if ((p[k] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    if (c == 0xF0 && p[1] < 0x90) return 0;   // overlong
    if (c == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
    return l;
}

// The combining marks that utf8proc 2.8 (Unicode 15) reorders and the `tokenizers` library's NFC
// does not: its tables are older (Unicode 9), so these marks of Unicode 10-15 have combining
// class 0 there, compose with nothing and block reordering and composition across them. Found by
// normalizing every code point c in "a" c U+0334, "a" c U+0301, c "a", c alone, "a" U+0334 c with
// both (tokenizers 0.23, utf8proc 2.8): these 108 code points are all that differ.
static const uint32_t hf_nfc_frozen_ranges[][2] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE}, {0x0C3C, 0x0C3C}, {0x0D3B, 0x0D3C},
    {0x0EBA, 0x0EBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0xA82C, 0xA82C}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070},
    {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x1193D, 0x1193E}, {0x11943, 0x11943},
    {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42},
    {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F},
    {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};

// 1 when the valid UTF-8 character p[0..l) is one of them
static int hf_nfc_frozen(const unsigned char* p, size_t l) {
    if (l < 2 || p[0] < 0xDF) return 0;  // all are U+07FD and above
    int cp;
    hf_utf8(p, &cp);
    for (size_t r = 0; r < sizeof hf_nfc_frozen_ranges / sizeof hf_nfc_frozen_ranges[0]; r++)
        if ((uint32_t)cp >= hf_nfc_frozen_ranges[r][0] && (uint32_t)cp <= hf_nfc_frozen_ranges[r][1]) return 1;
    return 0;
}

// Appends NFC(p[0..n)) to H->nbuf at *w, as the `tokenizers` library normalizes: valid UTF-8 runs
// normalized by utf8proc, each cut at the marks above (copied as they are), invalid bytes copied
// (they stay gaps for the regex, as the `tokenizers` reference treats them). -1: no memory.
static int hf_nfc_append(TokHf* H, const unsigned char* p, size_t n, size_t* w) {
    size_t k = 0;
    while (k < n) {
        size_t v = k, l = 0;
        while (v < n && (l = hf_valid_char(p + v, n - v)) > 0 && !hf_nfc_frozen(p + v, l)) v += l;
        size_t hi = k;  // below 0xCC (code points below U+0300) NFC changes nothing: copy
        while (hi < v && p[hi] < 0xCC) hi++;
        if (v > k && hi == v) {
            if (hf_grow((void**)&H->nbuf, &H->ncap, *w + (v - k), 1) != 0) return -1;
            memcpy(H->nbuf + *w, p + k, v - k);
            *w += v - k;
            k = v;
        } else if (v > k) {
            utf8proc_uint8_t* out = NULL;
            utf8proc_ssize_t m = utf8proc_map(p + k, (utf8proc_ssize_t)(v - k), &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0 || hf_grow((void**)&H->nbuf, &H->ncap, *w + (size_t)m, 1) != 0) { free(out); return -1; }
            memcpy(H->nbuf + *w, out, (size_t)m);
            *w += (size_t)m;
            free(out);
            k = v;
        }
        if (k < n && l > 0 && hf_valid_char(p + k, n - k) == l && hf_nfc_frozen(p + k, l)) {
            if (hf_grow((void**)&H->nbuf, &H->ncap, *w + l, 1) != 0) return -1;
            memcpy(H->nbuf + *w, p + k, l);
            *w += l;
            k += l;
            continue;
        }
        size_t b = k;
        while (b < n && hf_valid_char(p + b, n - b) == 0) b++;
        if (b > k) {
            if (hf_grow((void**)&H->nbuf, &H->ncap, *w + (b - k), 1) != 0) return -1;
            memcpy(H->nbuf + *w, p + k, b - k);
            *w += b - k;
            k = b;
        }
    }
    return 0;
}

// Pre-tokens of the segment s[i..seg) (no added token inside) for a tokenizer with normalizer NFC:
// the text is put in NFC, then split by the regex, the pre-tokens being bytes of the normalized
// text. s[sg..i) is earlier text of the same segment, already split (context for lookbehind; it is
// normalized too, not split again). final: the segment is complete; else more text may follow and
// only what cannot change is taken. NFC is local: a boundary before an ASCII character is never
// crossed by normalization (ASCII is NFC_QC=Yes, combining class 0), so the text is normalized in
// units that each start at an ASCII character (or at sg or i), and a streamed cut is made only at
// a unit start that is also a pre-token boundary. Returns the original offset reached, or
// HF_SPLIT_FAILED (piece failed or no memory) or HF_SPLIT_REGEX (a match error).
static size_t hf_segment_nfc(const Tokenizer* t, const unsigned char* s, size_t sg, size_t i, size_t seg, int final,
                             int (*piece)(void* ctx, const unsigned char* p, size_t len), void* ctx) {
    TokHf* H = t->hf;
    size_t c = seg;
    if (!final) {  // only text before an ASCII character is stable (s[seg] exists: seg < n when streaming);
                   // step 3 alone would keep the result right, this saves normalizing a unit cut short
        while (c > i && s[c] >= 0x80) c--;
        if (c == i) return i;
    }
    // 1. the units and their normalized text; k0: where s[i] starts in it
    size_t w = 0, nu = 0, k0 = 0;
    for (size_t u = sg; u < c;) {
        size_t e = u + 1;
        while (e < c && s[e] >= 0x80 && e != i) e++;
        if (hf_grow((void**)&H->ustart, &H->ucap, 2 * nu + 2, sizeof(size_t)) != 0) return HF_SPLIT_FAILED;
        if (u == i) k0 = w;
        H->ustart[2 * nu] = u;
        H->ustart[2 * nu + 1] = w;
        nu++;
        if (hf_nfc_append(H, s + u, e - u, &w) != 0) return HF_SPLIT_FAILED;
        u = e;
    }
    // 2. the regex over the normalized text from k0, pre-tokens collected
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(H->md);
    size_t np = 0, k = k0, pos = k0;  // k: where the next pre-token starts; pos: where the search goes on
#define HF_PUSH(a, b) do { if (hf_grow((void**)&H->pcs, &H->pcap, 2 * np + 2, sizeof(size_t)) != 0) return HF_SPLIT_FAILED; \
                           H->pcs[2 * np] = (a); H->pcs[2 * np + 1] = (b); np++; } while (0)
    while (k < w) {
        int rc = pos <= w ? pcre2_jit_match(H->re, H->nbuf, w, pos, final ? 0 : PCRE2_PARTIAL_HARD, H->md, H->mctx)
                          : PCRE2_ERROR_NOMATCH;
        if (rc == PCRE2_ERROR_PARTIAL) break;
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!final) break;
            HF_PUSH(k, w);
            k = w;
            break;
        }
        if (rc < 0) {  // the match limit, the JIT stack: the library stops too; so do we, saying where
            size_t u = 0;
            while (u + 1 < nu && H->ustart[2 * (u + 1) + 1] <= k) u++;
            H->err_rc = rc;
            H->err_off = nu ? H->ustart[2 * u] : i;
            return HF_SPLIT_REGEX;
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > k) { HF_PUSH(k, ms); k = ms; }
        if (me == ms) {  // an empty match only splits; the search goes on one character later (as onig's find_iter)
            pos = ms + 1;
            while (pos < w && (H->nbuf[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        HF_PUSH(ms, me);
        k = pos = me;
    }
#undef HF_PUSH
    // 3. final: every pre-token; streaming: those up to the last one that ends at a unit start
    size_t take = np, reached = final ? seg : i;
    if (!final) {
        take = 0;
        size_t u = 0;
        for (size_t j = 0; j < np; j++) {
            size_t e = H->pcs[2 * j + 1];
            while (u < nu && H->ustart[2 * u + 1] < e) u++;
            if (u < nu && H->ustart[2 * u + 1] == e) { take = j + 1; reached = H->ustart[2 * u]; }
        }
    }
    for (size_t j = 0; j < take; j++)
        if (piece(ctx, H->nbuf + H->pcs[2 * j], H->pcs[2 * j + 1] - H->pcs[2 * j]) != 0) return HF_SPLIT_FAILED;
    return reached;
}

size_t hf_tokenizer_split_from(const Tokenizer* t, const unsigned char* s, size_t n, size_t start, int eof,
                               int (*piece)(void* ctx, const unsigned char* p, size_t len), void* ctx, size_t* seg_start) {
    TokHf* H = t->hf;
    size_t lim = n;  // pre-tokens are final only inside s[0..lim)
    if (!eof) {
        // an added token starting at p is known only when p + max_added <= n; and s[0..lim) must
        // not end inside a UTF-8 character (PCRE2 would see an invalid byte, not a partial one)
        size_t keep = (size_t)H->max_added + 4;
        lim = n > keep ? n - keep : 0;
        while (lim > 0 && (s[lim] & 0xC0) == 0x80) lim--;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(H->md);
    size_t i = start, sg = 0;  // sg: where the current segment starts (the regex's subject)
#define HF_DONE(r) do { if (seg_start) *seg_start = sg; return (r); } while (0)
    while (i < lim) {
        size_t alen = 0;
        size_t a = hf_find_added(H, s, n, i, lim, &alen);
        size_t seg = a != SIZE_MAX ? a : lim;
        int final = a != SIZE_MAX || eof;  // the text between i and seg is complete
        if (H->nfc && i < seg) {
            // bytes below 0xCC are code points below U+0300: no combining marks, nothing NFC changes
            size_t q = i;
            while (q < seg && s[q] < 0xCC) q++;
            if (q < seg) {
                size_t r = hf_segment_nfc(t, s, sg, i, seg, final, piece, ctx);
                if (r == HF_SPLIT_FAILED || r == HF_SPLIT_REGEX) return r;
                if (r < seg) HF_DONE(r);  // streaming: the rest waits for more text
                i = seg;
            }
        }
        size_t pos = i;  // where the search goes on (past i after an empty match)
        while (i < seg) {
            // the subject is the segment: lookbehind, \b and ^ see its start as the text's start
            int rc = pos <= seg ? pcre2_jit_match(H->re, s + sg, seg - sg, pos - sg, final ? 0 : PCRE2_PARTIAL_HARD, H->md, H->mctx)
                                : PCRE2_ERROR_NOMATCH;
            if (rc == PCRE2_ERROR_PARTIAL) HF_DONE(i);  // the next pre-token depends on text not read yet
            if (rc == PCRE2_ERROR_NOMATCH) {            // no match: the rest is one gap pre-token
                if (!final) HF_DONE(i);
                if (piece(ctx, s + i, seg - i) != 0) return HF_SPLIT_FAILED;
                i = seg;
                break;
            }
            if (rc < 0) {  // the match limit, the JIT stack: the library stops too; so do we, saying where
                H->err_rc = rc;
                H->err_off = i;
                return HF_SPLIT_REGEX;
            }
            size_t ms = sg + ov[0], me = sg + ov[1];
            if (ms > i) {  // a gap (e.g. invalid UTF-8)
                if (piece(ctx, s + i, ms - i) != 0) return HF_SPLIT_FAILED;
                i = ms;
            }
            if (me == ms) {  // an empty match only splits; the search goes on one character later (as onig's find_iter)
                pos = ms + 1;
                while (pos < seg && (s[pos] & 0xC0) == 0x80) pos++;
                continue;
            }
            if (piece(ctx, s + ms, me - ms) != 0) return HF_SPLIT_FAILED;
            i = pos = me;
        }
        if (a == SIZE_MAX) break;
        if (piece(ctx, s + a, alen) != 0) return HF_SPLIT_FAILED;
        i = a + alen;
        sg = i;
    }
    HF_DONE(i);
#undef HF_DONE
}

size_t hf_tokenizer_split(const Tokenizer* t, const unsigned char* s, size_t n, int eof,
                          int (*piece)(void* ctx, const unsigned char* p, size_t len), void* ctx) {
    return hf_tokenizer_split_from(t, s, n, 0, eof, piece, ctx, NULL);
}

size_t hf_tokenizer_context(const Tokenizer* t) { return t->hf ? t->hf->context : 0; }

const char* hf_tokenizer_regex_error(const Tokenizer* t, size_t* off) {
    static char msg[320];
    PCRE2_UCHAR m[160];
    pcre2_get_error_message(t->hf->err_rc, m, sizeof m);
    snprintf(msg, sizeof msg, "%s%s", (const char*)m,
             t->hf->err_rc == PCRE2_ERROR_MATCHLIMIT ? " (catastrophic backtracking; the tokenizers library stops too)" : "");
    *off = t->hf->err_off;
    return msg;
}
