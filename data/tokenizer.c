// data/tokenizer.c: byte-level BPE (rules and layout in tokenizer.h, file format in
// docs/formats.md). Sections: hashing and maps; the pre-tokenizer; streaming files as
// documents; encoding (a cached per-piece merge loop); training (pre-token counts, then merges
// with incremental pair counts and a lazy max-heap); save and load.
#define _POSIX_C_SOURCE 200809L
#include "tokenizer.h"

#include <cjson/cJSON.h>

#include "decompress.h"
#include "hf_tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


// ================================================================================================
// hashing and maps
// ================================================================================================

static inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline uint64_t hash_bytes(const unsigned char* p, size_t n) {  // FNV-1a, then mixed
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return mix64(h ^ n);
}

static inline uint64_t pair_key(int a, int b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// uint64 -> int32 map; open addressing, linear probing; vals[i] < 0 marks an empty slot.
typedef struct {
    uint64_t* keys;
    int32_t* vals;
    size_t cap;  // power of two
    size_t n;
} U64Map;

static int u64map_init(U64Map* m, size_t expected) {
    size_t cap = 64;
    while (cap < expected * 2) cap *= 2;
    m->keys = malloc(cap * sizeof(uint64_t));
    m->vals = malloc(cap * sizeof(int32_t));
    m->cap = cap;
    m->n = 0;
    if (!m->keys || !m->vals) { free(m->keys); free(m->vals); m->keys = NULL; m->vals = NULL; return -1; }
    for (size_t i = 0; i < cap; i++) m->vals[i] = -1;
    return 0;
}

static void u64map_free(U64Map* m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static inline int32_t u64map_get(const U64Map* m, uint64_t key) {  // -1 when absent
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->vals[i] < 0) return -1;
        if (m->keys[i] == key) return m->vals[i];
    }
}

static int u64map_put(U64Map* m, uint64_t key, int32_t val) {  // val >= 0; insert or overwrite
    if ((m->n + 1) * 2 > m->cap) {  // keep the load factor <= 1/2
        U64Map g;
        if (u64map_init(&g, m->cap) != 0) return -1;  // doubles the capacity
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i] >= 0) u64map_put(&g, m->keys[i], m->vals[i]);
        u64map_free(m);
        *m = g;
    }
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->vals[i] < 0) { m->keys[i] = key; m->vals[i] = val; m->n++; return 0; }
        if (m->keys[i] == key) { m->vals[i] = val; return 0; }
    }
}

struct TokRankMap { U64Map map; };

// ================================================================================================
// the pre-tokenizer
// ================================================================================================

static inline int is_space(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); }  // \t \n \v \f \r
static inline int is_letter(unsigned c) { return ((c | 32u) - 'a') < 26u || c >= 0x80; }
static inline int is_digit(unsigned c) { return (c - '0') < 10u; }
enum { CLS_SPACE, CLS_LETTER, CLS_DIGIT, CLS_OTHER };
static inline int byte_class(unsigned c) {
    return is_space(c) ? CLS_SPACE : is_letter(c) ? CLS_LETTER : is_digit(c) ? CLS_DIGIT : CLS_OTHER;
}

size_t tokenizer_next_piece(const unsigned char* s, size_t n, size_t i, int eof) {
// reading s[k] is needed but the text may continue beyond n: ask for more
#define NEED(k) do { if ((k) >= n && !eof) return 0; } while (0)
    unsigned c = s[i];
    // 1. contractions: 's 't 'm 'd 're 've 'll
    if (c == '\'') {
        NEED(i + 1);
        if (i + 1 < n) {
            unsigned d = s[i + 1];
            if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
            if (d == 'r' || d == 'v' || d == 'l') {
                NEED(i + 2);
                if (i + 2 < n) {
                    unsigned e = s[i + 2];
                    if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
                }
            }
        }
    }
    // 2-4. an optional space, then a run of one class (letters, digits or other)
    size_t j = i;
    if (c == ' ') {
        NEED(i + 1);
        if (i + 1 < n && !is_space(s[i + 1])) j = i + 1;
    }
    if (!is_space(s[j])) {
        int cls = byte_class(s[j]);
        size_t k = j + 1;
        while (k < n && byte_class(s[k]) == cls) k++;
        NEED(k);
        return k;
    }
    // 5-6. whitespace: \s+(?!\S) then \s+
    size_t k = i + 1;
    while (k < n && is_space(s[k])) k++;
    NEED(k);
    if (k == n) return n;          // the run reaches the end of the text
    if (k - i >= 2) return k - 1;  // leave the last whitespace byte to the word that follows
    return k;                      // a single whitespace byte before a non-space
#undef NEED
}

size_t tokenizer_safe_cut(const Tokenizer* t, const unsigned char* s, size_t from, size_t n) {
    if (t && t->hf) return 0;  // a tokenizer.json's regex: no such proof
    // A space after a non-space byte: the piece before it (a contraction or a run of one class,
    // rules 1-4) ends there whatever follows, with or without eof, and a piece starts at the space
    // (rules 2-6 start there; none looks behind). So the text before and the text from it on cut
    // into the same pieces as the whole.
    for (size_t i = n; i-- > from + 1;)
        if (s[i] == ' ' && !is_space(s[i - 1])) return i;
    return 0;
}

// ================================================================================================
// streaming a file as documents of pre-tokens
// ================================================================================================

#define STREAM_CHUNK (1u << 20)           // bytes per fread
#define STREAM_DOC_FLUSH (1u << 20)       // pre-tokenize pending document text beyond this
#define STREAM_MAX_PIECE (16u << 20)      // a longer pre-token is cut

typedef struct {
    const TokenizerStream* cb;
    const char* path;    // the text file (for messages)
    unsigned char* doc;  // pending document text not yet cut into pieces (after ctx bytes already cut)
    size_t len, cap;
    size_t ctx;          // doc[0..ctx): text already cut, kept for a tokenizer.json regex that looks behind
    size_t flush_at;     // pre-tokenize when len reaches this (pending text of a long piece is not rescanned per line)
    int started;         // doc_begin called for the current document
    int64_t doc_no;      // the current document's number in the file, from 1 (a .jsonl file: its line)
    int64_t doc_off;     // the document offset of doc[0]
    int64_t end_off;     // the file offset just after doc[len) (-1 in a .jsonl file)
} DocState;

static int doc_piece(void* ctx, const unsigned char* p, size_t n) {
    DocState* d = ctx;
    if (!d->started) {
        if (d->cb->doc_begin && d->cb->doc_begin(d->cb->ctx) != 0) return -1;
        d->started = 1;
    }
    return d->cb->piece ? d->cb->piece(d->cb->ctx, p, n) : 0;
}

// Emits the final pieces of doc[ctx..len) (all of them when eof), keeps the rest.
static int doc_flush(DocState* d, int eof) {
    size_t i = d->ctx, seg = 0;
    const Tokenizer* tok = d->cb->tok;
    if (tok && tok->hf) {  // a tokenizer.json's added tokens and regex
        i = hf_tokenizer_split_from(tok, d->doc, d->len, d->ctx, eof, doc_piece, d, &seg);
        if (i == d->ctx && !eof && d->len > STREAM_MAX_PIECE)  // a pathological pre-token: cut it
            i = hf_tokenizer_split_from(tok, d->doc, d->len, d->ctx, 1, doc_piece, d, &seg);
        if (i == HF_SPLIT_REGEX) {
            size_t off;
            const char* msg = hf_tokenizer_regex_error(tok, &off);
            if (d->end_off >= 0)
                fprintf(stderr, "error: text '%s': document %lld, byte %lld of it (byte %lld of the file): the tokenizer's "
                        "pre_tokenizer regex failed: %s\n", d->path, (long long)d->doc_no, (long long)(d->doc_off + (int64_t)off),
                        (long long)(d->end_off - (int64_t)(d->len - off)), msg);
            else
                fprintf(stderr, "error: text '%s': line %lld (a document), byte %lld of the document: the tokenizer's "
                        "pre_tokenizer regex failed: %s\n", d->path, (long long)d->doc_no, (long long)(d->doc_off + (int64_t)off), msg);
            return -1;
        }
        if (i == HF_SPLIT_FAILED) return -1;
    }
    while (!(tok && tok->hf) && i < d->len) {
        size_t e = tokenizer_next_piece(d->doc, d->len, i, eof);
        if (e == 0) {
            if (i == 0 && d->len > STREAM_MAX_PIECE) e = d->len;  // a pathological pre-token: cut it
            else break;
        }
        if (!d->started) {
            if (d->cb->doc_begin && d->cb->doc_begin(d->cb->ctx) != 0) return -1;
            d->started = 1;
        }
        if (d->cb->piece && d->cb->piece(d->cb->ctx, d->doc + i, e - i) != 0) return -1;
        i = e;
    }
    // keep up to hf_tokenizer_context() bytes of the segment before i (from a character start)
    size_t keep = 0;
    if (!eof && tok && tok->hf && hf_tokenizer_context(tok) > 0) {
        keep = i - seg < hf_tokenizer_context(tok) ? i - seg : hf_tokenizer_context(tok);
        while (keep > 0 && (d->doc[i - keep] & 0xC0) == 0x80) keep--;
    }
    if (i - keep > 0) {
        memmove(d->doc, d->doc + (i - keep), d->len - (i - keep));
        d->len -= i - keep;
        d->doc_off += (int64_t)(i - keep);
    }
    d->ctx = keep;
    d->flush_at = d->len + STREAM_DOC_FLUSH;
    if (eof) {  // the next piece begins a new document
        d->started = 0;
        d->len = d->ctx = 0;
        d->doc_off = 0;
        d->doc_no++;
    }
    return 0;
}

static int doc_append(DocState* d, const unsigned char* p, size_t n, const char* path) {
    if (d->len + n > d->cap) {
        size_t cap = d->cap ? d->cap : STREAM_DOC_FLUSH + STREAM_CHUNK;
        while (cap < d->len + n) cap *= 2;
        unsigned char* g = realloc(d->doc, cap);
        if (!g) { tok_error(path, "out of memory reading the text"); return -1; }
        d->doc = g;
        d->cap = cap;
    }
    memcpy(d->doc + d->len, p, n);
    d->len += n;
    if (d->len >= d->flush_at) return doc_flush(d, 0);
    return 0;
}

// line = the line's bytes including its '\n' if any
static int is_separator_line(const unsigned char* line, size_t n) {
    static const char sep[] = TOKENIZER_EOT_TEXT;
    const size_t sn = sizeof(sep) - 1;
    if (n > 0 && line[n - 1] == '\n') n--;
    if (n > 0 && line[n - 1] == '\r') n--;
    return n == sn && memcmp(line, sep, sn) == 0;
}

int tokenizer_is_jsonl_name(const char* path) {
    static const char* const ends[] = {".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.xz"};
    size_t plen = strlen(path);
    for (size_t k = 0; k < sizeof(ends) / sizeof(ends[0]); k++) {
        size_t el = strlen(ends[k]);
        if (plen > el && strcmp(path + plen - el, ends[k]) == 0) return 1;
    }
    return 0;
}

// the lines of a (decompressed) file, each whole in memory: *line = the line with its '\n' if any
typedef struct {
    Decomp* z;
    const char* path;
    char* buf;
    size_t start, scanned, len, cap;  // buf[start..len) not yet returned; buf[start..scanned) holds no '\n'
    int eof;
} LineReader;

// the length of the next line (0 at the end of the file), or -1 after a read error (reported)
static ssize_t line_next(LineReader* r, char** line) {
    for (;;) {
        char* nl = memchr(r->buf + r->scanned, '\n', r->len - r->scanned);
        if (nl || (r->eof && r->len > r->start)) {
            size_t n = nl ? (size_t)(nl + 1 - (r->buf + r->start)) : r->len - r->start;
            *line = r->buf + r->start;
            r->start += n;
            r->scanned = r->start;
            return (ssize_t)n;
        }
        if (r->eof) return 0;
        r->scanned = r->len;
        if (r->start > 0) {  // keep only the partial line
            memmove(r->buf, r->buf + r->start, r->len - r->start);
            r->len -= r->start;
            r->scanned -= r->start;
            r->start = 0;
        }
        if (r->cap - r->len < STREAM_CHUNK) {
            size_t cap = r->cap ? 2 * r->cap : 2 * STREAM_CHUNK;
            char* g = realloc(r->buf, cap);
            if (!g) { tok_error(r->path, "out of memory for a line of %zu bytes", r->len); return -1; }
            r->buf = g;
            r->cap = cap;
        }
        ssize_t got = decomp_read(r->z, r->buf + r->len, r->cap - r->len);
        if (got < 0) return -1;
        if (got == 0) r->eof = 1;
        r->len += (size_t)got;
    }
}

// JSON lines: each non-blank line is an object whose string member `field` is one document
static int read_jsonl(const char* path, const char* field, const TokenizerDocSink* sink) {
    Decomp* z = decomp_open(path);
    if (!z) return -1;
    LineReader r = {.z = z, .path = path};
    char* line;
    ssize_t got;
    int64_t lineno = 0, seen = 0;
    int rc = 0;
    while (rc == 0 && (got = line_next(&r, &line)) > 0) {
        lineno++;
        int64_t in = decomp_in_bytes(z);
        if (sink->progress && in > seen) sink->progress(sink->ctx, (size_t)(in - seen));
        seen = in;
        size_t k = 0;
        while (k < (size_t)got && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)got) continue;  // a blank line
        if (memchr(line, 0, (size_t)got)) {
            tok_error(path, "line %lld holds a NUL byte: binary data, not JSON text", (long long)lineno);
            rc = -1;
            break;
        }
        cJSON* o = cJSON_ParseWithLength(line, (size_t)got);
        const cJSON* v = o ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
        if (!o) tok_error(path, "line %lld is not JSON (a .jsonl file holds one JSON object a line)", (long long)lineno);
        else if (!cJSON_IsString(v))
            tok_error(path, "line %lld has no string field \"%s\" (choose the field with --field NAME)", (long long)lineno, field);
        else {  // the whole document at once: cJSON has decoded its escapes
            size_t n = strlen(v->valuestring);
            rc = n ? sink->text(sink->ctx, (const unsigned char*)v->valuestring, n, lineno, -1) : 0;
            if (rc == 0 && n) rc = sink->doc_end(sink->ctx);
            cJSON_Delete(o);
            continue;
        }
        cJSON_Delete(o);
        rc = -1;
    }
    if (rc == 0 && got < 0) rc = -1;
    free(r.buf);
    decomp_close(z);
    return rc;
}

int tokenizer_read_docs(const char* path, const char* jsonl_field, const TokenizerDocSink* sink) {
    if (jsonl_field && tokenizer_is_jsonl_name(path)) return read_jsonl(path, jsonl_field, sink);
    Decomp* z = decomp_open(path);
    if (!z) return -1;
    const int packed = decomp_format(z) != DECOMP_PLAIN;
    int64_t fpos = 0;         // the (decompressed) text offset of raw[0]
    int64_t seen = 0;         // file bytes reported to progress
    int64_t doc_no = 1;       // the current document's number in the file
    unsigned char* raw = malloc(STREAM_CHUNK);
    if (!raw) { tok_error(path, "out of memory"); decomp_close(z); return -1; }
    size_t rlen = 0;          // raw[0..rlen) not yet consumed
    int at_line_start = 1;    // raw[0] begins a line (a separator can only be a whole line)
    int rc = 0, eof = 0;
    while (!eof && rc == 0) {
        ssize_t sgot = decomp_read(z, raw + rlen, STREAM_CHUNK - rlen);
        if (sgot < 0) { rc = -1; break; }  // (decomp_read said why)
        size_t got = (size_t)sgot;
        if (got < STREAM_CHUNK - rlen) eof = 1;  // decomp_read fills the buffer until the end of the text
        const unsigned char* nul = memchr(raw + rlen, 0, got);
        if (nul) {  // text holds no NUL byte: binary data (or UTF-16) read as text would make shards of noise
            fprintf(stderr, "error: text '%s': a NUL byte at offset %lld%s: binary data, not UTF-8 text%s\n", path,
                    (long long)(fpos + (nul - raw)), packed ? " of the decompressed text" : "",
                      fpos == 0 && rlen == 0 && got >= 2 && ((raw[0] == 0xFF && raw[1] == 0xFE) || (raw[0] == 0xFE && raw[1] == 0xFF))
                          ? " (it starts like UTF-16: convert it to UTF-8)" : "");
            rc = -1;
            break;
        }
        rlen += got;
        int64_t in = decomp_in_bytes(z);
        if (sink->progress && in > seen) sink->progress(sink->ctx, (size_t)(in - seen));
        seen = in;
        size_t pos = 0;
        while (rc == 0 && pos < rlen) {
            unsigned char* nl = memchr(raw + pos, '\n', rlen - pos);
            size_t n = nl ? (size_t)(nl - (raw + pos)) + 1 : rlen - pos;
            if (nl || eof) {  // a whole line (or the last one, without a newline)
                if (at_line_start && is_separator_line(raw + pos, n)) { rc = sink->doc_end(sink->ctx); doc_no++; }
                else rc = sink->text(sink->ctx, raw + pos, n, doc_no, fpos + (int64_t)(pos + n));
                pos += n;
                at_line_start = 1;
            } else if (at_line_start && rlen - pos <= 16) {
                break;  // short partial line: it might still be a separator; read more
            } else {    // a partial line that cannot be a separator (or continues one that is not)
                rc = sink->text(sink->ctx, raw + pos, rlen - pos, doc_no, fpos + (int64_t)rlen);
                pos = rlen;
                at_line_start = 0;
            }
        }
        memmove(raw, raw + pos, rlen - pos);
        rlen -= pos;
        fpos += (int64_t)pos;
    }
    if (rc == 0) rc = sink->doc_end(sink->ctx);  // a file ends its last document
    free(raw);
    decomp_close(z);
    return rc;
}

// DocState as the sink of tokenizer_read_docs: tokenizer_stream_file's pre-tokenizing reader
static int state_text(void* ctx, const unsigned char* p, size_t n, int64_t doc_no, int64_t end_off) {
    DocState* d = ctx;
    d->doc_no = doc_no;
    d->end_off = end_off;
    return doc_append(d, p, n, d->path);
}

static int state_doc_end(void* ctx) { return doc_flush(ctx, 1); }

static void state_progress(void* ctx, size_t bytes) {
    DocState* d = ctx;
    if (d->cb->progress) d->cb->progress(d->cb->ctx, bytes);
}

int tokenizer_stream_file(const char* path, const TokenizerStream* stream) {
    DocState d = {.cb = stream, .path = path, .flush_at = STREAM_DOC_FLUSH, .doc_no = 1};
    TokenizerDocSink sink = {.text = state_text, .doc_end = state_doc_end, .progress = state_progress, .ctx = &d};
    int rc = tokenizer_read_docs(path, stream->jsonl_field, &sink);
    free(d.doc);
    return rc;
}

int tokenizer_stream_doc(const TokenizerStream* stream, const char* path, int64_t doc_no, int64_t end_off,
                         const unsigned char* text, size_t n) {
    // the whole text at once (doc_flush moves nothing at eof, so text stays untouched)
    DocState d = {.cb = stream, .path = path, .doc = (unsigned char*)text, .len = n, .doc_no = doc_no, .end_off = end_off};
    return n ? doc_flush(&d, 1) : 0;
}

// ================================================================================================
// building a tokenizer from its merges; token bytes; the encode cache
// ================================================================================================

struct TokCache {
    uint32_t* slots;        // entry index + 1; 0 = empty
    size_t cap;             // power of two
    struct CacheEntry { uint64_t h; int64_t koff, ioff; int32_t klen, nids; }* e;
    size_t ne, cape;
    unsigned char* kbuf; size_t klen, kcap;
    int* ibuf; size_t ilen, icap;
};
#define CACHE_SLOTS (1u << 19)
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_KEY 256       // longer pieces are not cached

static TokCache* cache_new(void) {
    TokCache* c = calloc(1, sizeof(TokCache));
    if (!c) return NULL;
    c->cap = CACHE_SLOTS;
    c->slots = calloc(c->cap, sizeof(uint32_t));
    if (!c->slots) { free(c); return NULL; }
    return c;
}

static void cache_free(TokCache* c) {
    if (!c) return;
    free(c->slots); free(c->e); free(c->kbuf); free(c->ibuf); free(c);
}

static const int* cache_get(const TokCache* c, const unsigned char* p, size_t n, uint64_t h, int* nids) {
    size_t mask = c->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t s = c->slots[i];
        if (!s) return NULL;
        const struct CacheEntry* e = &c->e[s - 1];
        if (e->h == h && (size_t)e->klen == n && memcmp(c->kbuf + e->koff, p, n) == 0) {
            *nids = e->nids;
            return c->ibuf + e->ioff;
        }
    }
}

// Grows array p (of *cap elements) to hold need; NULL on failure (p kept).
static void* grow_from(void* p, size_t* cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    void* g = realloc(p, c * elem);
    if (g) *cap = c;
    return g;
}
static void* grow(void* p, size_t* cap, size_t need, size_t elem) { return grow_from(p, cap, need, elem, 1024); }

static void cache_put(TokCache* c, const unsigned char* p, size_t n, uint64_t h, const int* ids, int nids) {
    if (n > CACHE_MAX_KEY) return;
    if (c->ne >= CACHE_MAX_ENTRIES) {  // full: start over (bounded memory on any corpus)
        memset(c->slots, 0, c->cap * sizeof(uint32_t));
        c->ne = c->klen = c->ilen = 0;
    }
    void* g;
    if (!(g = grow(c->e, &c->cape, c->ne + 1, sizeof(*c->e)))) return;
    c->e = g;
    if (!(g = grow(c->kbuf, &c->kcap, c->klen + n, 1))) return;
    c->kbuf = g;
    if (!(g = grow(c->ibuf, &c->icap, c->ilen + (size_t)nids, sizeof(int)))) return;
    c->ibuf = g;
    struct CacheEntry* e = &c->e[c->ne];
    e->h = h; e->koff = (int64_t)c->klen; e->klen = (int32_t)n; e->ioff = (int64_t)c->ilen; e->nids = nids;
    memcpy(c->kbuf + c->klen, p, n);
    memcpy(c->ibuf + c->ilen, ids, (size_t)nids * sizeof(int));
    c->klen += n;
    c->ilen += (size_t)nids;
    c->ne++;
    size_t mask = c->cap - 1;
    size_t i = h & mask;
    while (c->slots[i]) i = (i + 1) & mask;
    c->slots[i] = (uint32_t)c->ne;
}

void tokenizer_free(Tokenizer* t) {
    if (!t) return;
    free(t->merges);
    free(t->bytes);
    free(t->offsets);
    if (t->ranks) { u64map_free(&t->ranks->map); free(t->ranks); }
    cache_free(t->cache);
    hf_tokenizer_free(t);
    memset(t, 0, sizeof(*t));
}

// Fills t from its merges (t->merges[2*M] owned by t, already set): token bytes, eot, the rank
// map and the cache. `what` names the file or operation for messages.
static int tok_build(Tokenizer* t, int M, const char* what) {
    static const char eot_text[] = TOKENIZER_EOT_TEXT;
    const int V = 256 + M + 1;
    t->vocab_size = V;
    t->n_merges = M;
    t->eot = V - 1;
    t->can_encode = 1;
    t->offsets = malloc((size_t)(V + 1) * sizeof(int64_t));
    if (!t->offsets) { tok_error(what, "out of memory"); return -1; }
    int64_t total = 256 + (int64_t)sizeof(eot_text) - 1;
    int64_t* len = t->offsets + 1;  // lengths first, prefix-summed below
    for (int i = 0; i < 256; i++) len[i] = 1;
    for (int i = 0; i < M; i++) {
        len[256 + i] = len[t->merges[2 * i]] + len[t->merges[2 * i + 1]];
        total += len[256 + i];
    }
    len[V - 1] = (int64_t)sizeof(eot_text) - 1;
    t->bytes = malloc((size_t)total);
    if (!t->bytes) { tok_error(what, "out of memory"); return -1; }
    t->offsets[0] = 0;
    for (int i = 0; i < V; i++) t->offsets[i + 1] += t->offsets[i];
    for (int i = 0; i < 256; i++) t->bytes[i] = (unsigned char)i;
    for (int i = 0; i < M; i++) {
        int a = t->merges[2 * i], b = t->merges[2 * i + 1];
        unsigned char* dst = t->bytes + t->offsets[256 + i];
        int64_t la = t->offsets[a + 1] - t->offsets[a];
        memcpy(dst, t->bytes + t->offsets[a], (size_t)la);
        memcpy(dst + la, t->bytes + t->offsets[b], (size_t)(t->offsets[b + 1] - t->offsets[b]));
    }
    memcpy(t->bytes + t->offsets[V - 1], eot_text, sizeof(eot_text) - 1);
    return tokenizer_index_merges(t, what);
}

int tokenizer_is_hf(const Tokenizer* t) { return t->hf != NULL; }

int tokenizer_index_merges(Tokenizer* t, const char* what) {
    const int M = t->n_merges;
    t->ranks = calloc(1, sizeof(TokRankMap));
    if (!t->ranks || u64map_init(&t->ranks->map, (size_t)M + 1) != 0) { tok_error(what, "out of memory"); return -1; }
    // a pair listed twice (training never writes one; a hand-made file may) keeps its first, lowest
    // rank, as "lowest rank first" and "the merge list in order" both say; the later id is never produced
    for (int i = 0; i < M; i++) {
        uint64_t key = pair_key(t->merges[2 * i], t->merges[2 * i + 1]);
        if (u64map_get(&t->ranks->map, key) >= 0) continue;
        if (u64map_put(&t->ranks->map, key, i) != 0) {
            tok_error(what, "out of memory");
            return -1;
        }
    }
    t->cache = cache_new();
    if (!t->cache) { tok_error(what, "out of memory"); return -1; }
    return 0;
}

int tokenizer_vocab_size(const Tokenizer* t) { return t->vocab_size; }
int tokenizer_eot(const Tokenizer* t) { return t->eot; }

const unsigned char* tokenizer_token_bytes(const Tokenizer* t, int id, int* len) {
    if (id < 0 || id >= t->vocab_size) { if (len) *len = 0; return NULL; }
    if (len) *len = (int)(t->offsets[id + 1] - t->offsets[id]);
    return t->bytes + t->offsets[id];
}

int tokenizer_decode(const Tokenizer* t, const int* ids, size_t n, char** out, size_t* len) {
    size_t add = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size) {
            fprintf(stderr, "error: tokenizer_decode: id %d at position %zu is outside the vocabulary [0, %d)\n",
                    ids[i], i, t->vocab_size);
            return -1;
        }
        add += (size_t)(t->offsets[ids[i] + 1] - t->offsets[ids[i]]);
    }
    char* g = realloc(*out, *len + add + 1);  // +1: room for a terminating zero
    if (!g) { fprintf(stderr, "error: tokenizer_decode: out of memory\n"); return -1; }
    *out = g;
    char* dst = g + *len;
    for (size_t i = 0; i < n; i++) {
        size_t l = (size_t)(t->offsets[ids[i] + 1] - t->offsets[ids[i]]);
        memcpy(dst, t->bytes + t->offsets[ids[i]], l);
        dst += l;
    }
    *len += add;
    g[*len] = '\0';
    return 0;
}

// ================================================================================================
// encoding
// ================================================================================================

static inline int rank_of(const Tokenizer* t, int a, int b) {
    return u64map_get(&t->ranks->map, pair_key(a, b));
}

// Short pieces: repeatedly find the lowest-rank adjacent pair, merge its occurrences left to
// right. O(n^2) lookups, needs no memory beyond ids[0..n).
static size_t bpe_simple(const Tokenizer* t, int* ids, size_t m) {
    while (m >= 2) {
        int best = INT_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            int r = rank_of(t, ids[i], ids[i + 1]);
            if (r >= 0 && r < best) { best = r; bi = i; }
        }
        if (best == INT_MAX) break;
        int a = ids[bi], b = ids[bi + 1], z = t->merge_ids ? t->merge_ids[best] : 256 + best;
        size_t w = bi;
        for (size_t i = bi; i < m;) {
            if (i + 1 < m && ids[i] == a && ids[i + 1] == b) { ids[w++] = z; i += 2; }
            else ids[w++] = ids[i++];
        }
        m = w;
    }
    return m;
}

// Long pieces: a linked list of nodes and a min-heap of (rank, left node), O(n log n). Entries
// go stale when a node merges; they are checked on pop. Same order as bpe_simple: rank first,
// then left to right, and a merge only creates pairs of higher rank.
typedef struct { int rank; int pos; } RankPos;
static inline int rp_less(RankPos x, RankPos y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }
static void rp_push(RankPos* h, size_t* n, RankPos x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!rp_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}
static RankPos rp_pop(RankPos* h, size_t* n) {
    RankPos top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && rp_less(h[c + 1], h[c])) c++;
        if (!rp_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

static size_t bpe_heap(const Tokenizer* t, int* ids, size_t m) {
    int* next = malloc(m * sizeof(int));
    int* prev = malloc(m * sizeof(int));
    RankPos* heap = malloc(2 * m * sizeof(RankPos));  // <= m-1 initial + 2 per merge (< m merges)
    if (!next || !prev || !heap) { free(next); free(prev); free(heap); return bpe_simple(t, ids, m); }
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int)i + 1 : -1;
        prev[i] = (int)i - 1;
        if (i + 1 < m) {
            int r = rank_of(t, ids[i], ids[i + 1]);
            if (r >= 0) rp_push(heap, &hn, (RankPos){r, (int)i});
        }
    }
    while (hn) {
        RankPos top = rp_pop(heap, &hn);
        int i = top.pos, j = next[i];
        if (ids[i] < 0 || j < 0 || rank_of(t, ids[i], ids[j]) != top.rank) continue;  // stale
        ids[i] = t->merge_ids ? t->merge_ids[top.rank] : 256 + top.rank;  // node i becomes the merged token, node j dies
        ids[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (prev[i] >= 0) {
            int r = rank_of(t, ids[prev[i]], ids[i]);
            if (r >= 0) rp_push(heap, &hn, (RankPos){r, prev[i]});
        }
        if (next[i] >= 0) {
            int r = rank_of(t, ids[i], ids[next[i]]);
            if (r >= 0) rp_push(heap, &hn, (RankPos){r, i});
        }
    }
    size_t w = 0;
    for (int i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
    free(next); free(prev); free(heap);
    return w;
}

size_t tokenizer_encode_piece(const Tokenizer* t, const unsigned char* p, size_t n, int* dst) {
    if (t->hf) {  // a tokenizer.json: an added token cut out by hf_tokenizer_split is one id
        int id = hf_tokenizer_added_id(t, p, n);
        if (id >= 0) { dst[0] = id; return 1; }
    }
    if (n == 1) { dst[0] = t->byte_ids ? t->byte_ids[p[0]] : p[0]; return 1; }
    uint64_t h = hash_bytes(p, n);
    int nids = 0;
    const int* hit = t->cache ? cache_get(t->cache, p, n, h, &nids) : NULL;
    if (hit) {
        memcpy(dst, hit, (size_t)nids * sizeof(int));
        return (size_t)nids;
    }
    int whole = hf_tokenizer_whole_id(t, p, n);  // model.ignore_merges: a piece in the vocabulary is itself
    if (whole >= 0) {
        dst[0] = whole;
        if (t->cache) cache_put(t->cache, p, n, h, dst, 1);
        return 1;
    }
    if (t->byte_ids) for (size_t i = 0; i < n; i++) dst[i] = t->byte_ids[p[i]];
    else for (size_t i = 0; i < n; i++) dst[i] = p[i];
    size_t m = n <= 64 && !t->heap_only ? bpe_simple(t, dst, n) : bpe_heap(t, dst, n);
    if (t->cache) cache_put(t->cache, p, n, h, dst, (int)m);
    return m;
}

// tokenizer_encode of a tokenizer.json: its pre-tokens go here
typedef struct { const Tokenizer* t; int* buf; size_t n, cap; } EncodeAcc;
static int encode_acc_piece(void* ctx, const unsigned char* p, size_t len) {
    EncodeAcc* a = ctx;
    if (a->n + len > a->cap) {
        size_t c = a->cap + a->cap / 2;
        if (c < a->n + len) c = a->n + len;
        int* g = realloc(a->buf, c * sizeof(int));
        if (!g) return -1;
        a->buf = g;
        a->cap = c;
    }
    a->n += tokenizer_encode_piece(a->t, p, len, a->buf + a->n);
    return 0;
}

int tokenizer_encode(const Tokenizer* t, const char* text, size_t len, int** out, size_t* n_out) {
    if (!t->can_encode) {
        fprintf(stderr, "error: tokenizer_encode: this tokenizer was loaded from an llm.c file, which has no merges; "
                        "it can decode only\n");
        return -1;
    }
    if (t->hf) {
        EncodeAcc a = {.t = t, .buf = *out, .n = *n_out, .cap = *n_out};
        size_t r = len ? hf_tokenizer_split(t, (const unsigned char*)text, len, 1, encode_acc_piece, &a) : 0;
        *out = a.buf;
        if (r == HF_SPLIT_REGEX) {
            size_t off;
            const char* msg = hf_tokenizer_regex_error(t, &off);
            fprintf(stderr, "error: tokenizer_encode: at byte %zu of the text: the tokenizer's pre_tokenizer regex failed: %s\n", off, msg);
            return -1;
        }
        if (r == HF_SPLIT_FAILED) { fprintf(stderr, "error: tokenizer_encode: out of memory\n"); return -1; }
        *n_out = a.n;
        return 0;
    }
    const unsigned char* s = (const unsigned char*)text;
    size_t n = *n_out, cap = n + len / 3 + 16;
    int* buf = realloc(*out, cap * sizeof(int));
    if (!buf) { fprintf(stderr, "error: tokenizer_encode: out of memory\n"); return -1; }
    for (size_t i = 0; i < len;) {
        size_t e = tokenizer_next_piece(s, len, i, 1);
        if (n + (e - i) > cap) {
            size_t c = cap + cap / 2;
            if (c < n + (e - i)) c = n + (e - i);
            int* g = realloc(buf, c * sizeof(int));
            if (!g) { *out = buf; fprintf(stderr, "error: tokenizer_encode: out of memory\n"); return -1; }
            buf = g;
            cap = c;
        }
        n += tokenizer_encode_piece(t, s + i, e - i, buf + n);
        i = e;
    }
    int* g = realloc(buf, (n ? n : 1) * sizeof(int));  // give back the slack
    *out = g ? g : buf;
    *n_out = n;
    return 0;
}

// ================================================================================================
// training
// ================================================================================================

// Distinct pre-tokens with counts: open addressing over an entry array; bytes in one arena.
typedef struct { uint64_t h; int64_t off, count; int32_t len; } PieceEntry;
typedef struct {
    uint32_t* slots;  // entry index + 1
    size_t cap;
    PieceEntry* e;
    size_t ne, cape;
    unsigned char* arena;
    size_t alen, acap;
    int oom;
    int64_t bytes, pieces;  // totals seen
} PieceCounts;

static int pc_rehash(PieceCounts* pc) {
    size_t cap = pc->cap ? pc->cap * 2 : 1u << 16;
    uint32_t* s = calloc(cap, sizeof(uint32_t));
    if (!s) return -1;
    for (size_t k = 0; k < pc->ne; k++) {
        size_t i = pc->e[k].h & (cap - 1);
        while (s[i]) i = (i + 1) & (cap - 1);
        s[i] = (uint32_t)k + 1;
    }
    free(pc->slots);
    pc->slots = s;
    pc->cap = cap;
    return 0;
}

static int pc_add(void* ctx, const unsigned char* p, size_t n) {
    PieceCounts* pc = ctx;
    pc->bytes += (int64_t)n;
    pc->pieces++;
    if (n < 2) return 0;  // a single byte holds no pair
    uint64_t h = hash_bytes(p, n);
    size_t mask = pc->cap - 1;
    size_t i = h & mask;
    for (; pc->slots[i]; i = (i + 1) & mask) {
        PieceEntry* e = &pc->e[pc->slots[i] - 1];
        if (e->h == h && (size_t)e->len == n && memcmp(pc->arena + e->off, p, n) == 0) { e->count++; return 0; }
    }
    if (n > INT32_MAX || pc->ne >= INT32_MAX - 1) { pc->oom = 1; return -1; }
    void* g;
    if (!(g = grow(pc->e, &pc->cape, pc->ne + 1, sizeof(PieceEntry)))) { pc->oom = 1; return -1; }
    pc->e = g;
    if (!(g = grow(pc->arena, &pc->acap, pc->alen + n, 1))) { pc->oom = 1; return -1; }
    pc->arena = g;
    pc->e[pc->ne] = (PieceEntry){.h = h, .off = (int64_t)pc->alen, .count = 1, .len = (int32_t)n};
    memcpy(pc->arena + pc->alen, p, n);
    pc->alen += n;
    pc->slots[i] = (uint32_t)++pc->ne;
    if (pc->ne * 2 > pc->cap && pc_rehash(pc) != 0) { pc->oom = 1; return -1; }
    return 0;
}

// A pair of ids with its count over the corpus and the words that (may) contain it.
typedef struct {
    int64_t count;
    int32_t a, b;
    int32_t* where;       // word indices; may hold words that no longer contain the pair
    int32_t nwhere, capwhere;
    int32_t touched_at;   // merge index that last raised the count (for the heap push)
} Pair;

typedef struct { int64_t count; int32_t a, b; } HeapItem;  // a max-heap on (count, then low a, low b)
static inline int hi_before(HeapItem x, HeapItem y) {
    if (x.count != y.count) return x.count > y.count;
    if (x.a != y.a) return x.a < y.a;
    return x.b < y.b;
}

typedef struct {
    U64Map index;  // pair key -> index into pairs
    Pair* pairs;
    size_t np, capp;
    HeapItem* heap;
    size_t nh, caph;
    int oom;
} PairTable;

static int32_t pt_get(PairTable* pt, int a, int b, int create) {
    uint64_t key = pair_key(a, b);
    int32_t k = u64map_get(&pt->index, key);
    if (k >= 0 || !create) return k;
    void* g = grow(pt->pairs, &pt->capp, pt->np + 1, sizeof(Pair));
    if (!g || pt->np >= INT32_MAX) { pt->oom = 1; return -1; }
    pt->pairs = g;
    k = (int32_t)pt->np++;
    pt->pairs[k] = (Pair){.a = a, .b = b, .touched_at = -1};
    if (u64map_put(&pt->index, key, k) != 0) { pt->oom = 1; return -1; }
    return k;
}

static void pt_where_add(PairTable* pt, int32_t k, int32_t w) {
    Pair* p = &pt->pairs[k];
    if (p->nwhere && p->where[p->nwhere - 1] == w) return;  // a word's additions are consecutive
    size_t cap = (size_t)p->capwhere;
    void* g = grow_from(p->where, &cap, (size_t)p->nwhere + 1, sizeof(int32_t), 2);  // most pairs are rare
    if (!g) { pt->oom = 1; return; }
    p->where = g;
    p->capwhere = (int32_t)cap;
    p->where[p->nwhere++] = w;
}

static void heap_push(PairTable* pt, HeapItem x) {
    void* g = grow(pt->heap, &pt->caph, pt->nh + 1, sizeof(HeapItem));
    if (!g) { pt->oom = 1; return; }
    pt->heap = g;
    HeapItem* h = pt->heap;
    size_t i = pt->nh++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hi_before(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static HeapItem heap_pop(PairTable* pt) {
    HeapItem* h = pt->heap;
    HeapItem top = h[0], x = h[--pt->nh];
    size_t i = 0, n = pt->nh;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hi_before(h[c + 1], h[c])) c++;
        if (!hi_before(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = x;
    return top;
}

int tokenizer_train(Tokenizer* t, const char* const* files, int nfiles, int vocab_size) {
    return tokenizer_train_field(t, files, nfiles, vocab_size, NULL);
}

int tokenizer_train_field(Tokenizer* t, const char* const* files, int nfiles, int vocab_size, const char* jsonl_field) {
    memset(t, 0, sizeof(*t));
    const char* what = nfiles > 0 ? files[0] : "(no files)";
    if (vocab_size < 257 || vocab_size > (1 << 30)) {
        tok_error(what, "vocab_size %d out of range: need >= 257 (256 bytes + end-of-text) and <= 2^30", vocab_size);
        return -1;
    }
    if (nfiles < 1) { tok_error(what, "no training files given"); return -1; }

    // 1. distinct pre-tokens and their counts, one streaming pass over the files
    PieceCounts pc = {0};
    if (pc_rehash(&pc) != 0) { tok_error(what, "out of memory"); return -1; }
    TokenizerStream st = {.piece = pc_add, .ctx = &pc, .jsonl_field = jsonl_field};
    for (int f = 0; f < nfiles; f++) {
        if (tokenizer_stream_file(files[f], &st) != 0) {
            if (pc.oom) tok_error(files[f], "out of memory counting pre-tokens");
            free(pc.slots); free(pc.e); free(pc.arena);
            return -1;
        }
    }
    free(pc.slots);

    // 2. words: each distinct pre-token (>= 2 bytes) as a mutable id sequence
    size_t nw = pc.ne;
    int32_t* wtok = malloc((pc.alen ? pc.alen : 1) * sizeof(int32_t));
    int64_t* woff = malloc((nw ? nw : 1) * sizeof(int64_t));
    int32_t* wlen = malloc((nw ? nw : 1) * sizeof(int32_t));
    int64_t* wcount = malloc((nw ? nw : 1) * sizeof(int64_t));
    int M_want = vocab_size - 257;
    int* merges = malloc(((size_t)M_want * 2 + 2) * sizeof(int));
    PairTable pt = {0};
    int rc = -1, M = 0;
    if (!wtok || !woff || !wlen || !wcount || !merges || u64map_init(&pt.index, 1u << 16) != 0) {
        tok_error(what, "out of memory");
        goto done;
    }
    for (size_t w = 0; w < nw; w++) {
        const PieceEntry* e = &pc.e[w];
        woff[w] = e->off;
        wlen[w] = e->len;
        wcount[w] = e->count;
        for (int32_t i = 0; i < e->len; i++) wtok[e->off + i] = pc.arena[e->off + i];
    }

    // 3. initial pair counts and where-lists, then every pair onto the heap
    for (size_t w = 0; w < nw; w++) {
        const int32_t* s = wtok + woff[w];
        for (int32_t i = 0; i + 1 < wlen[w]; i++) {
            int32_t k = pt_get(&pt, s[i], s[i + 1], 1);
            if (k < 0) break;
            pt.pairs[k].count += wcount[w];
            pt_where_add(&pt, k, (int32_t)w);
        }
        if (pt.oom) break;
    }
    for (size_t k = 0; k < pt.np && !pt.oom; k++)
        heap_push(&pt, (HeapItem){pt.pairs[k].count, pt.pairs[k].a, pt.pairs[k].b});
    if (pt.oom) { tok_error(what, "out of memory counting pairs"); goto done; }

    // 4. merges. A heap entry's count is an upper bound of its pair's count (counts of existing
    // pairs only fall; a pair is pushed after the merge that creates it is finished), so the
    // first popped entry whose count is current is the true best pair.
    int32_t* touched = NULL;
    size_t ntouched = 0, captouched = 0;
    for (M = 0; M < M_want; M++) {
        int32_t k = -1;
        while (pt.nh) {
            HeapItem top = heap_pop(&pt);
            int32_t c = pt_get(&pt, top.a, top.b, 0);
            int64_t cur = pt.pairs[c].count;
            if (cur == top.count && cur > 0) { k = c; break; }
            if (cur > 0 && cur != top.count) heap_push(&pt, (HeapItem){cur, top.a, top.b});
        }
        if (k < 0) break;  // no pair left anywhere
        const int32_t a = pt.pairs[k].a, b = pt.pairs[k].b, z = 256 + M;
        merges[2 * M] = a;
        merges[2 * M + 1] = b;
        int32_t* where = pt.pairs[k].where;  // stable: only pairs containing z gain words below
        int32_t nwhere = pt.pairs[k].nwhere;
        ntouched = 0;
        for (int32_t wi = 0; wi < nwhere && !pt.oom; wi++) {
            int32_t w = where[wi];
            int32_t* s = wtok + woff[w];
            int32_t n = wlen[w], i;
            for (i = 0; i + 1 < n; i++) if (s[i] == a && s[i + 1] == b) break;
            if (i + 1 >= n) continue;  // stale: an earlier merge took the pair out of this word
            int64_t cnt = wcount[w];
            for (i = 0; i + 1 < n; i++) pt.pairs[pt_get(&pt, s[i], s[i + 1], 0)].count -= cnt;
            int32_t m = 0;
            for (i = 0; i < n;) {
                if (i + 1 < n && s[i] == a && s[i + 1] == b) { s[m++] = z; i += 2; }
                else s[m++] = s[i++];
            }
            wlen[w] = m;
            for (i = 0; i + 1 < m; i++) {
                int fresh = s[i] == z || s[i + 1] == z;
                int32_t q = pt_get(&pt, s[i], s[i + 1], fresh);
                if (q < 0) break;
                pt.pairs[q].count += cnt;
                if (fresh) {
                    pt_where_add(&pt, q, w);
                    if (pt.pairs[q].touched_at != M) {
                        pt.pairs[q].touched_at = M;
                        void* g = grow(touched, &captouched, ntouched + 1, sizeof(int32_t));
                        if (!g) { pt.oom = 1; break; }
                        touched = g;
                        touched[ntouched++] = q;
                    }
                }
            }
        }
        for (size_t i = 0; i < ntouched && !pt.oom; i++) {
            const Pair* q = &pt.pairs[touched[i]];
            heap_push(&pt, (HeapItem){q->count, q->a, q->b});
        }
        if (pt.oom) { free(touched); tok_error(what, "out of memory during merges"); goto done; }
        free(pt.pairs[k].where);
        pt.pairs[k].where = NULL;
        pt.pairs[k].nwhere = pt.pairs[k].capwhere = 0;
    }
    free(touched);
    if (M < M_want)
        fprintf(stderr, "note: tokenizer: the text has only %d distinct merges; vocab_size is %d, not %d\n",
                M, 257 + M, vocab_size);

    // 5. the tokenizer
    t->merges = merges;
    merges = NULL;
    if (tok_build(t, M, what) != 0) { tokenizer_free(t); goto done; }
    rc = 0;
done:
    for (size_t k = 0; k < pt.np; k++) free(pt.pairs[k].where);
    free(pt.pairs);
    free(pt.heap);
    u64map_free(&pt.index);
    free(merges);
    free(wtok); free(woff); free(wlen); free(wcount);
    free(pc.e); free(pc.arena);
    return rc;
}

// ================================================================================================
// save and load
// ================================================================================================

#define HEADER_INTS 64

static uint64_t fnv1a64(const unsigned char* p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

static int write_atomic(const char* path, const unsigned char* buf, size_t size);

int tokenizer_save(const Tokenizer* t, const char* path) {
    if (t->hf) {  // a tokenizer.json: its bytes as read
        size_t len;
        const char* json = hf_tokenizer_json(t, &len);
        return write_atomic(path, (const unsigned char*)json, len);
    }
    if (!t->can_encode) {
        tok_error(path, "cannot save a decode-only (llm.c) tokenizer in our format: it has no merges");
        return -1;
    }
    const int V = t->vocab_size, M = t->n_merges;
    const int64_t T = t->offsets[V];
    if (T > INT32_MAX) { tok_error(path, "token bytes total %lld, over the format's 2^31-1", (long long)T); return -1; }
    size_t size = HEADER_INTS * 4 + (size_t)M * 8 + (size_t)V * 4 + (size_t)T;
    unsigned char* buf = calloc(1, size);
    if (!buf) { tok_error(path, "out of memory"); return -1; }
    int32_t* h = (int32_t*)buf;
    h[0] = TOKENIZER_MAGIC;
    h[1] = TOKENIZER_VERSION;
    h[2] = V;
    h[3] = t->eot;
    h[4] = M;
    h[5] = 1;  // pre-tokenizer rules, version 1 (docs/formats.md)
    h[6] = (int32_t)T;
    int32_t* mg = (int32_t*)(buf + HEADER_INTS * 4);
    for (int i = 0; i < 2 * M; i++) mg[i] = t->merges[i];
    int32_t* lens = mg + 2 * M;
    for (int i = 0; i < V; i++) lens[i] = (int32_t)(t->offsets[i + 1] - t->offsets[i]);
    memcpy((unsigned char*)(lens + V), t->bytes, (size_t)T);
    uint64_t sum = fnv1a64(buf + HEADER_INTS * 4, size - HEADER_INTS * 4);
    h[8] = (int32_t)(uint32_t)sum;
    h[9] = (int32_t)(uint32_t)(sum >> 32);

    int rc = write_atomic(path, buf, size);
    free(buf);
    return rc;
}

// Writes path.tmp, fsyncs it and renames it to path; then fsyncs the directory (best effort).
static int write_atomic(const char* path, const unsigned char* buf, size_t size) {
    size_t plen = strlen(path);
    char* tmp = malloc(plen + 5);
    if (!tmp) { tok_error(path, "out of memory"); return -1; }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = -1;
    FILE* f = fopen(tmp, "wb");
    if (!f) {
        tok_error(path, "cannot create '%s': %s", tmp, strerror(errno));
    } else {
        int ok = fwrite(buf, 1, size, f) == size && fflush(f) == 0 && fsync(fileno(f)) == 0;
        int err = errno;
        if (fclose(f) != 0 && ok) { ok = 0; err = errno; }
        if (!ok) {
            tok_error(path, "write to '%s' failed: %s", tmp, strerror(err));
            remove(tmp);
        } else if (rename(tmp, path) != 0) {
            tok_error(path, "cannot rename '%s' into place: %s", tmp, strerror(errno));
            remove(tmp);
        } else {
            rc = 0;
            // make the rename durable too (best effort)
            char* dir = strdup(path);
            if (dir) {
                char* slash = strrchr(dir, '/');
                const char* d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
                int fd = open(d, O_RDONLY);
                if (fd >= 0) { fsync(fd); close(fd); }
                free(dir);
            }
        }
    }
    free(tmp);
    return rc;
}

static int load_ours(Tokenizer* t, const char* path, const unsigned char* buf, size_t size) {
    if (size < HEADER_INTS * 4) {
        tok_error(path, "file has %zu bytes, too small for the %d-byte header; truncated?", size, HEADER_INTS * 4);
        return -1;
    }
    const int32_t* h = (const int32_t*)buf;
    if (h[1] != TOKENIZER_VERSION) {
        tok_error(path, "version %d, this build reads version %d", h[1], TOKENIZER_VERSION);
        return -1;
    }
    const int V = h[2], eot = h[3], M = h[4];
    const int64_t T = h[6];
    if (V < 257 || M != V - 257 || eot != V - 1 || T < 0) {
        tok_error(path, "inconsistent header: vocab_size %d, merges %d, end-of-text %d (want merges = vocab_size - 257 "
                        "and end-of-text = vocab_size - 1)", V, M, eot);
        return -1;
    }
    if (h[5] != 1) { tok_error(path, "unknown pre-tokenizer version %d", h[5]); return -1; }
    size_t want = HEADER_INTS * 4 + (size_t)M * 8 + (size_t)V * 4 + (size_t)T;
    if (size != want) {
        tok_error(path, "file has %zu bytes but its header says %zu; %s", size, want,
                  size < want ? "truncated?" : "trailing garbage?");
        return -1;
    }
    uint64_t sum = fnv1a64(buf + HEADER_INTS * 4, size - HEADER_INTS * 4);
    if ((uint32_t)h[8] != (uint32_t)sum || (uint32_t)h[9] != (uint32_t)(sum >> 32)) {
        tok_error(path, "checksum mismatch: the file is corrupt");
        return -1;
    }
    const int32_t* mg = (const int32_t*)(buf + HEADER_INTS * 4);
    t->merges = malloc(((size_t)M * 2 + 2) * sizeof(int));
    if (!t->merges) { tok_error(path, "out of memory"); return -1; }
    for (int i = 0; i < M; i++) {
        int a = mg[2 * i], b = mg[2 * i + 1];
        if (a < 0 || b < 0 || a >= 256 + i || b >= 256 + i) {
            tok_error(path, "merge %d joins ids (%d, %d), not both below its own id %d", i, a, b, 256 + i);
            return -1;
        }
        t->merges[2 * i] = a;
        t->merges[2 * i + 1] = b;
    }
    if (tok_build(t, M, path) != 0) return -1;
    // the stored token bytes must be what the merges spell
    const int32_t* lens = mg + 2 * M;
    const unsigned char* bytes = (const unsigned char*)(lens + V);
    int64_t off = 0;
    for (int i = 0; i < V; i++) {
        int64_t l = t->offsets[i + 1] - t->offsets[i];
        if (lens[i] != l || off + l > T || memcmp(bytes + off, t->bytes + t->offsets[i], (size_t)l) != 0) {
            tok_error(path, "token %d's stored bytes differ from what the merges give", i);
            return -1;
        }
        off += l;
    }
    return 0;
}

static int load_llmc(Tokenizer* t, const char* path, const unsigned char* buf, size_t size) {
    if (size < 1024) {
        tok_error(path, "file has %zu bytes, too small for llm.c's 1024-byte header; truncated?", size);
        return -1;
    }
    const uint32_t* h = (const uint32_t*)buf;
    uint32_t version = h[1], V = h[2];
    if (version != 1 && version != 2) {
        tok_error(path, "llm.c tokenizer version %u; known versions are 1 and 2", version);
        return -1;
    }
    if (V < 1 || V > (1u << 30)) { tok_error(path, "llm.c tokenizer vocab_size %u out of range", V); return -1; }
    int eot;
    if (version == 1) eot = V > 50256 ? 50256 : -1;  // v1 has no eot field; llm.c assumes GPT-2's 50256
    else {
        if (h[3] >= V) { tok_error(path, "end-of-text id %u >= vocab_size %u", h[3], V); return -1; }
        eot = (int)h[3];
    }
    t->vocab_size = (int)V;
    t->eot = eot;
    t->can_encode = 0;
    t->offsets = malloc(((size_t)V + 1) * sizeof(int64_t));
    t->bytes = malloc(size - 1024 + 1);
    if (!t->offsets || !t->bytes) { tok_error(path, "out of memory"); return -1; }
    size_t pos = 1024;
    int64_t off = 0;
    t->offsets[0] = 0;
    for (uint32_t i = 0; i < V; i++) {
        if (pos >= size) { tok_error(path, "ends at token %u of %u; truncated?", i, V); return -1; }
        size_t l = buf[pos++];
        if (pos + l > size) { tok_error(path, "token %u's bytes run past the end of the file; truncated?", i); return -1; }
        memcpy(t->bytes + off, buf + pos, l);
        pos += l;
        off += (int64_t)l;
        t->offsets[i + 1] = off;
    }
    if (pos != size) { tok_error(path, "%zu bytes of trailing garbage after the token table", size - pos); return -1; }
    return 0;
}

int tokenizer_load(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    if (hf_tokenizer_is_json(path)) {   // a tokenizer.json, or a directory with one
        if (hf_tokenizer_load(t, path) != 0 || tokenizer_index_merges(t, path) != 0) { tokenizer_free(t); return -1; }
        return 0;
    }
    FILE* f = fopen(path, "rb");
    if (!f) { tok_error(path, "cannot open: %s", strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) { tok_error(path, "cannot stat: %s", strerror(errno)); fclose(f); return -1; }
    size_t size = (size_t)st.st_size;
    unsigned char* buf = malloc(size ? size : 1);
    if (!buf) { tok_error(path, "out of memory (%zu bytes)", size); fclose(f); return -1; }
    if (fread(buf, 1, size, f) != size) {
        tok_error(path, "read error: %s", strerror(errno));
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    int rc;
    if (size < 4) {
        tok_error(path, "file has %zu bytes, too small for a tokenizer; truncated?", size);
        rc = -1;
    } else {
        int32_t magic;
        memcpy(&magic, buf, 4);
        if (magic == TOKENIZER_MAGIC) rc = load_ours(t, path, buf, size);
        else if (magic == TOKENIZER_LLMC_MAGIC) rc = load_llmc(t, path, buf, size);
        else {
            tok_error(path, "wrong magic %d (expected %d for a gatedgpt tokenizer or %d for llm.c's gpt2_tokenizer.bin)",
                      magic, TOKENIZER_MAGIC, TOKENIZER_LLMC_MAGIC);
            rc = -1;
        }
    }
    free(buf);
    if (rc != 0) tokenizer_free(t);
    return rc;
}
