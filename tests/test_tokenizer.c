// tests/test_tokenizer.c: the byte-level BPE tokenizer (data/tokenizer.h).
//   pre-tokenization on hand-checked strings; a hand-checked training example; training is
//   deterministic; encode equals applying the merge list in order (short and long pieces);
//   decode(encode(x)) == x on random bytes, invalid UTF-8 and English text (and the KJV when
//   data/kjv/ is prepared); streaming a file equals encoding its documents; save/load round
//   trip; bad files fail naming the file; llm.c gpt2_tokenizer.bin v1 and v2 decode.
// Run from the repository root (ctest does) to include the KJV check.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "test_util.h"

static char tmpdir[256];

static void tmp_path(char* out, size_t size, const char* name) { snprintf(out, size, "%s/%s", tmpdir, name); }

static void write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

static unsigned char* read_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

// ---- stderr capture: run a call, get what it printed -----------------------------------------
static int saved_stderr = -1;
static char captured[4096];
static void capture_begin(void) {
    char p[512];
    tmp_path(p, sizeof(p), "stderr.txt");
    fflush(stderr);
    saved_stderr = dup(2);
    FILE* f = freopen(p, "w", stderr);
    (void)f;
}
static void capture_end(void) {
    char p[512];
    tmp_path(p, sizeof(p), "stderr.txt");
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n = 0;
    unsigned char* b = read_file(p, &n);
    n = n < sizeof(captured) - 1 ? n : sizeof(captured) - 1;
    memcpy(captured, b ? (char*)b : "", n);
    captured[n] = '\0';
    free(b);
}
static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// ---- helpers --------------------------------------------------------------------------------

// the pieces of s joined with '|'
static void pieces(const char* s, char* out, size_t size) {
    size_t n = strlen(s), i = 0, o = 0;
    out[0] = '\0';
    while (i < n) {
        size_t e = tokenizer_next_piece((const unsigned char*)s, n, i, 1);
        if (o && o + 1 < size) out[o++] = '|';
        for (size_t k = i; k < e && o + 1 < size; k++) out[o++] = s[k];
        i = e;
    }
    out[o] = '\0';
}

static int roundtrip(const Tokenizer* t, const unsigned char* x, size_t n) {
    int* ids = NULL;
    size_t nids = 0;
    if (tokenizer_encode(t, (const char*)x, n, &ids, &nids) != 0) return 0;
    char* back = NULL;
    size_t blen = 0;
    int ok = tokenizer_decode(t, ids, nids, &back, &blen) == 0 && blen == n && memcmp(back, x, n) == 0;
    for (size_t i = 0; i < nids; i++) ok &= ids[i] != tokenizer_eot(t) && ids[i] >= 0 && ids[i] < tokenizer_vocab_size(t);
    free(ids);
    free(back);
    return ok;
}

// reference encoder: apply the merges in order to each piece, left to right
static int* reference_encode(const Tokenizer* t, const unsigned char* s, size_t n, size_t* nids) {
    int* out = malloc((n + 1) * sizeof(int));
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t e = tokenizer_next_piece(s, n, i, 1);
        size_t m = e - i;
        int* w = out + o;
        for (size_t k = 0; k < m; k++) w[k] = s[i + k];
        for (int r = 0; r < t->n_merges && m > 1; r++) {
            int a = t->merges[2 * r], b = t->merges[2 * r + 1];
            size_t q = 0;
            for (size_t k = 0; k < m;) {
                if (k + 1 < m && w[k] == a && w[k + 1] == b) { w[q++] = 256 + r; k += 2; }
                else w[q++] = w[k++];
            }
            m = q;
        }
        o += m;
        i = e;
    }
    *nids = o;
    return out;
}

// ---- stream callbacks for test 4 ----
struct Got { int* ids; size_t n, cap; int64_t bytes; const Tokenizer* t; };
static void got_push(struct Got* g, int id) {
    if (g->n == g->cap) { g->cap = g->cap ? 2 * g->cap : 1024; g->ids = realloc(g->ids, g->cap * sizeof(int)); }
    g->ids[g->n++] = id;
}
static int tt_doc(void* ctx) { got_push(ctx, -1); return 0; }
static int tt_piece(void* ctx, const unsigned char* p, size_t n) {
    struct Got* g = ctx;
    int* tmp = malloc(n * sizeof(int));
    size_t m = tokenizer_encode_piece(g->t, p, n, tmp);
    for (size_t i = 0; i < m; i++) got_push(g, tmp[i]);
    free(tmp);
    return 0;
}
static void tt_progress(void* ctx, size_t got) { ((struct Got*)ctx)->bytes += (int64_t)got; }

static const char* ENGLISH =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    "the rightful property of some one or other of their daughters.\n\n"
    "\"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield Park is let at last?\"\n"
    "Mr. Bennet replied that he had not.\n"
    "\"But it is,\" returned she; \"for Mrs. Long has just been here, and she told me all about it.\"\n\n"
    "Mr. Bennet made no answer. \"Do you not want to know who has taken it?\" cried his wife impatiently. "
    "\"You want to tell me, and I have no objection to hearing it.\" This was invitation enough.\n\n"
    "The quick brown fox jumps over the lazy dog 1234 times; it's 5:30 pm and we've walked 12.5 km. "
    "They're here, I'm there, you'll see, he'd know -- isn't it?   Three spaces.\tA tab.\r\nCRLF line.\n"
    "    Indented code(x, y) { return x + y; }  // trailing comment\n"
    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e text.\n";

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_tokenizer.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    char path[512], path2[512];

    // ---- 1. pre-tokenization, hand-checked ----
    {
        struct { const char* in; const char* want; } cases[] = {
            {"Hello world", "Hello| world"},
            {"I'm can't they're we've he'll I'd it's", "I|'m| can|'t| they|'re| we|'ve| he|'ll| I|'d| it|'s"},
            {"a   b", "a|  | b"},                       // a run of spaces leaves its last one to the word
            {"x\n\nY", "x|\n|\n|Y"},                    // \s+(?!\S) then a lone \n
            {"x \n  Y", "x| \n | Y"},                 // the run minus its last space, then " Y"
            {"abc123 456!!? ...", "abc|123| 456|!!?| ..."},
            {"end   ", "end|   "},                      // trailing whitespace: one piece
            {"tab\t word", "tab|\t| word"},
            {"'hello' 's", "'|hello|'| '|s"},           // not a contraction: other-run
            {"Don'T", "Don|'|T"},                       // contractions are lowercase only
            {"caf\xc3\xa9 ok", "caf\xc3\xa9| ok"},      // bytes >= 0x80 are letters
            {"x=1+2", "x|=|1|+|2"},
            {" ", " "},
        };
        char got[256];
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            pieces(cases[i].in, got, sizeof(got));
            TU_CHECK(strcmp(got, cases[i].want) == 0, "pre-tokens of \"%s\": got \"%s\" want \"%s\"", cases[i].in, got,
                     cases[i].want);
        }
        // streaming: with the text cut short the answer may be "need more" (0), never a wrong piece
        const unsigned char* s = (const unsigned char*)"we're";
        TU_CHECK(tokenizer_next_piece(s, 3, 2, 0) == 0, "\"'r\" at the end of a chunk must ask for more");
        TU_CHECK(tokenizer_next_piece(s, 5, 2, 1) == 5, "\"'re\" is a contraction");
        TU_CHECK(tokenizer_next_piece((const unsigned char*)"ab", 2, 0, 0) == 0, "a word at a chunk end may continue");
    }

    // ---- 2. a hand-checked training example ----
    {
        tmp_path(path, sizeof(path), "tiny.txt");
        write_file(path, "aaabdaaabac", 11);
        const char* files[] = {path};
        Tokenizer t;
        // counts: aa 4, ab 2, ... -> 256 = aa; then (256,a) 2 and (a,b) 2 tie: lower ids win -> 257 = ab;
        // then (256,257) 2 -> 258 = aaab; then all 1: lowest pair (a,c) -> 259 = ac
        int rc = tokenizer_train(&t, files, 1, 261);
        TU_CHECK(rc == 0, "train tiny");
        if (rc == 0) {
            int want[] = {'a', 'a', 'a', 'b', 256, 257, 'a', 'c'};
            TU_CHECK(t.n_merges == 4 && memcmp(t.merges, want, sizeof(want)) == 0,
                     "tiny merges: got %d merges (%d,%d) (%d,%d) (%d,%d) (%d,%d)", t.n_merges, t.merges[0], t.merges[1],
                     t.merges[2], t.merges[3], t.merges[4], t.merges[5], t.merges[6], t.merges[7]);
            TU_CHECK(tokenizer_vocab_size(&t) == 261 && tokenizer_eot(&t) == 260, "tiny vocab %d eot %d",
                     tokenizer_vocab_size(&t), tokenizer_eot(&t));
            int len;
            const unsigned char* b = tokenizer_token_bytes(&t, 258, &len);
            TU_CHECK(b && len == 4 && memcmp(b, "aaab", 4) == 0, "token 258 is \"aaab\"");
            b = tokenizer_token_bytes(&t, 260, &len);
            TU_CHECK(b && len == 13 && memcmp(b, "<|endoftext|>", 13) == 0, "the last token is <|endoftext|>");
            TU_CHECK(tokenizer_token_bytes(&t, 261, &len) == NULL && len == 0, "invalid id gives NULL");
            TU_CHECK(tokenizer_token_bytes(&t, -1, &len) == NULL, "negative id gives NULL");
            int* ids = NULL;
            size_t n = 0;
            tokenizer_encode(&t, "aaabdaaabac", 11, &ids, &n);
            int want_ids[] = {258, 'd', 258, 259};
            TU_CHECK(n == 4 && memcmp(ids, want_ids, sizeof(want_ids)) == 0, "encode aaabdaaabac: %zu ids", n);
            // appends: a second call extends the array
            tokenizer_encode(&t, " ab", 3, &ids, &n);
            TU_CHECK(n == 6 && ids[4] == ' ' && ids[5] == 257, "encode appends");
            free(ids);
            tokenizer_free(&t);
        }
        // asking for more merges than the text has: stops early, smaller vocabulary
        capture_begin();
        rc = tokenizer_train(&t, files, 1, 1000);
        capture_end();
        TU_CHECK(rc == 0 && t.n_merges == 7 && tokenizer_vocab_size(&t) == 264, "exhausted pairs: %d merges",
                 rc == 0 ? t.n_merges : -1);
        TU_CHECK(strstr(captured, "note:") != NULL, "a note when the vocabulary comes out smaller");
        if (rc == 0) tokenizer_free(&t);
    }

    // ---- 3. train on English text: determinism, encode == merge list in order, round trips ----
    tmp_path(path, sizeof(path), "english.txt");
    {
        // a few copies with variations so pairs have counts
        size_t el = strlen(ENGLISH);
        char* corpus = malloc(el * 4 + 256);
        size_t cl = 0;
        for (int r = 0; r < 4; r++) {
            memcpy(corpus + cl, ENGLISH, el);
            cl += el;
            cl += (size_t)sprintf(corpus + cl, "Copy %d ends here.\n", r);
        }
        write_file(path, corpus, cl);
        free(corpus);
    }
    const char* efiles[] = {path};
    Tokenizer t1, t2;
    int rc1 = tokenizer_train(&t1, efiles, 1, 600);
    int rc2 = tokenizer_train(&t2, efiles, 1, 600);
    TU_CHECK(rc1 == 0 && rc2 == 0, "train on English text");
    if (rc1 != 0 || rc2 != 0) return tu_finish();
    TU_CHECK(t1.n_merges == t2.n_merges && memcmp(t1.merges, t2.merges, (size_t)t1.n_merges * 2 * sizeof(int)) == 0,
             "training twice gives identical merges");
    TU_CHECK(t1.n_merges == 600 - 257, "merges %d", t1.n_merges);
    tokenizer_free(&t2);

    TU_CHECK(roundtrip(&t1, (const unsigned char*)ENGLISH, strlen(ENGLISH)), "round trip: English text");
    {
        size_t n = 0;
        unsigned char* b = read_file(path, &n);
        size_t nref = 0, nenc = 0;
        int* ref = reference_encode(&t1, b, n, &nref);
        int* enc = NULL;
        tokenizer_encode(&t1, (const char*)b, n, &enc, &nenc);
        TU_CHECK(nref == nenc && memcmp(ref, enc, nref * sizeof(int)) == 0, "encode == merge list in order (corpus)");
        TU_CHECK(nenc < n / 2, "the merges compress the training text: %zu bytes -> %zu tokens", n, nenc);
        free(ref); free(enc); free(b);
    }
    // long pieces (> 64 bytes take the heap path) and short ones from a small alphabet
    {
        int bad = 0;
        for (int trial = 0; trial < 60; trial++) {
            size_t n = trial < 30 ? (size_t)(1 + trial * 7) : 65 + (size_t)(trial - 30) * 40;
            unsigned char* s = malloc(n);
            const char* alpha = trial % 2 ? "aeinrst" : "the and of ";
            size_t al = strlen(alpha);
            for (size_t i = 0; i < n; i++) s[i] = (unsigned char)alpha[(size_t)((tu_rand() + 1.0) * 0.5 * al) % al];
            size_t nref = 0, nenc = 0;
            int* ref = reference_encode(&t1, s, n, &nref);
            int* enc = NULL;
            tokenizer_encode(&t1, (const char*)s, n, &enc, &nenc);
            bad += !(nref == nenc && memcmp(ref, enc, nref * sizeof(int)) == 0) || !roundtrip(&t1, s, n);
            free(ref); free(enc); free(s);
        }
        TU_CHECK(bad == 0, "encode == merge list in order on short and long pieces: %d of 60 differ", bad);
    }
    // random bytes
    {
        int bad = 0;
        for (int trial = 0; trial < 20; trial++) {
            size_t n = trial == 0 ? 0 : (size_t)trial * 997;
            unsigned char* s = malloc(n + 1);
            for (size_t i = 0; i < n; i++) s[i] = (unsigned char)((tu_rand() + 1.0) * 128.0);
            bad += !roundtrip(&t1, s, n);
            free(s);
        }
        TU_CHECK(bad == 0, "round trip: random bytes (%d of 20 failed)", bad);
    }
    // invalid UTF-8 and odd bytes
    {
        const char* odd[] = {"\xff\xfe\xfd", "caf\xc3", "\xc3\x28 \xa0\xa1", "\xe2\x82\x28", "\xf0\x28\x8c\x28 x",
                             "\xc0\xaf nul:\x01\x02\x7f", "\xed\xa0\x80 surrogate", "\x80\x80\x80\x80\x80 the"};
        int bad = 0;
        for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
            bad += !roundtrip(&t1, (const unsigned char*)odd[i], strlen(odd[i]));
        unsigned char nul[] = {'a', 0, 'b', 0, 0, ' ', 0xff};
        bad += !roundtrip(&t1, nul, sizeof(nul));
        TU_CHECK(bad == 0, "round trip: invalid UTF-8 and NUL bytes (%d failed)", bad);
    }
    // encode never emits end-of-text, even for its text
    {
        int* ids = NULL;
        size_t n = 0;
        tokenizer_encode(&t1, "<|endoftext|>", 13, &ids, &n);
        int has = 0;
        for (size_t i = 0; i < n; i++) has |= ids[i] == tokenizer_eot(&t1);
        TU_CHECK(n > 1 && !has, "\"<|endoftext|>\" in text is plain bytes, not the end-of-text id");
        free(ids);
    }

    // ---- 4. streaming a file = encoding each document; separators dropped ----
    {
        tmp_path(path2, sizeof(path2), "docs.txt");
        FILE* f = fopen(path2, "wb");
        const char* d1 = "First document.\nTwo lines\n";
        const char* d2 = "Second one,\r\nwith CRLF.\r\n";
        fputs("<|endoftext|>\n", f);                        // a leading separator: no empty document
        fputs(d1, f);
        fputs("<|endoftext|>\r\n", f);
        fputs(d2, f);
        fputs("<|endoftext|>\n<|endoftext|>\n", f);         // an empty document between: skipped
        // a big third document crossing the 1 MiB read chunks, with a long line and a long word
        size_t big = 3u << 20, el = strlen(ENGLISH);
        char* d3 = malloc(big + 1);
        for (size_t i = 0; i < big; i += el) memcpy(d3 + i, ENGLISH, i + el <= big ? el : big - i);
        memset(d3 + (1u << 20) - 100, 'q', 300);            // a 300-byte word across a chunk boundary
        memset(d3 + (2u << 20) - 5000, '\n', 9000);          // a long whitespace run
        d3[big] = '\0';
        fwrite(d3, 1, big, f);
        fputs(" x <|endoftext|>", f);                       // not a separator: inside a line
        fclose(f);
        // expected: each document encoded on its own
        int* want = NULL;
        size_t nwant = 0;
        const char* docs[] = {d1, d2, d3};
        for (int d = 0; d < 3; d++) {
            want = realloc(want, (nwant + 1) * sizeof(int));
            want[nwant++] = -1;  // document marker
            tokenizer_encode(&t1, docs[d], strlen(docs[d]), &want, &nwant);
            if (d == 2) tokenizer_encode(&t1, " x <|endoftext|>", 16, &want, &nwant);
        }
        free(d3);
        struct Got got = {NULL, 0, 0, 0, &t1};
        TokenizerStream st = {.doc_begin = tt_doc, .piece = tt_piece, .progress = tt_progress, .ctx = &got};
        int rc = tokenizer_stream_file(path2, &st);
        size_t fsize = 0;
        free(read_file(path2, &fsize));
        TU_CHECK(rc == 0, "stream the documents file");
        TU_CHECK(got.n == nwant && memcmp(got.ids, want, nwant * sizeof(int)) == 0,
                 "streamed pieces encode like whole documents (%zu vs %zu ids)", got.n, nwant);
        TU_CHECK(got.bytes == (int64_t)fsize, "progress counts every byte read: %lld of %zu", (long long)got.bytes, fsize);
        free(got.ids);
        free(want);
    }
    // a separator line across the 1 MiB read boundary, at several offsets
    {
        const size_t MiB = 1u << 20, el = strlen(ENGLISH);
        const size_t offs[] = {MiB - 20, MiB - 16, MiB - 15, MiB - 14, MiB - 5, MiB - 1, MiB, MiB + 1};
        const char* tail = "Tail document.\n";
        char* a = malloc(MiB + 2);
        int bad = 0;
        for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++) {
            size_t off = offs[k];  // document A is off bytes, then the separator line starts
            for (size_t i = 0; i < off; i += el) memcpy(a + i, ENGLISH, i + el <= off ? el : off - i);
            a[off - 1] = '\n';
            tmp_path(path2, sizeof(path2), "straddle.txt");
            FILE* f = fopen(path2, "wb");
            fwrite(a, 1, off, f);
            fputs(k % 2 ? "<|endoftext|>\r\n" : "<|endoftext|>\n", f);
            fputs(tail, f);
            fclose(f);
            int* want = malloc(sizeof(int));
            size_t nwant = 1;
            want[0] = -1;
            tokenizer_encode(&t1, a, off, &want, &nwant);
            want = realloc(want, (nwant + 1) * sizeof(int));
            want[nwant++] = -1;
            tokenizer_encode(&t1, tail, strlen(tail), &want, &nwant);
            struct Got got = {NULL, 0, 0, 0, &t1};
            TokenizerStream st = {.doc_begin = tt_doc, .piece = tt_piece, .ctx = &got};
            bad += tokenizer_stream_file(path2, &st) != 0 || got.n != nwant ||
                   memcmp(got.ids, want, nwant * sizeof(int)) != 0;
            free(got.ids);
            free(want);
        }
        free(a);
        TU_CHECK(bad == 0, "separator lines across the read boundary: %d of 8 offsets wrong", bad);
    }

    // ---- 5. save / load round trip ----
    {
        tmp_path(path2, sizeof(path2), "tok.bin");
        TU_CHECK(tokenizer_save(&t1, path2) == 0, "save");
        char tmpname[600];
        snprintf(tmpname, sizeof(tmpname), "%s.tmp", path2);
        TU_CHECK(access(tmpname, F_OK) != 0, "no .tmp file left after save");
        Tokenizer t3;
        int rc = tokenizer_load(&t3, path2);
        TU_CHECK(rc == 0, "load what was saved");
        if (rc == 0) {
            TU_CHECK(t3.vocab_size == t1.vocab_size && t3.eot == t1.eot && t3.n_merges == t1.n_merges &&
                     memcmp(t3.merges, t1.merges, (size_t)t1.n_merges * 2 * sizeof(int)) == 0 && t3.can_encode,
                     "loaded vocab, eot and merges equal the trained ones");
            int same = 1;
            for (int i = 0; i < t1.vocab_size; i++) {
                int l1, l3;
                const unsigned char* b1 = tokenizer_token_bytes(&t1, i, &l1);
                const unsigned char* b3 = tokenizer_token_bytes(&t3, i, &l3);
                same &= l1 == l3 && memcmp(b1, b3, (size_t)l1) == 0;
            }
            TU_CHECK(same, "loaded token bytes equal the trained ones");
            int *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            tokenizer_encode(&t1, ENGLISH, strlen(ENGLISH), &a, &na);
            tokenizer_encode(&t3, ENGLISH, strlen(ENGLISH), &b, &nb);
            TU_CHECK(na == nb && memcmp(a, b, na * sizeof(int)) == 0, "loaded tokenizer encodes the same");
            free(a); free(b);
            tokenizer_free(&t3);
        }
        // bad files: each fails with one line naming the file
        size_t n = 0;
        unsigned char* good = read_file(path2, &n);
        struct { const char* name; size_t len; int corrupt; const char* expect; } bad[] = {
            {"trunc_header.bin", 100, 0, "truncated"},
            {"trunc_body.bin", n - 7, 0, "truncated"},
            {"magic.bin", n, 1, "wrong magic"},
            {"checksum.bin", n, 2, "checksum"},
            {"empty.bin", 0, 0, "too small"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            tmp_path(path, sizeof(path), bad[i].name);
            unsigned char* copy = malloc(n);
            memcpy(copy, good, n);
            if (bad[i].corrupt == 1) memcpy(copy, "GPT2", 4);
            if (bad[i].corrupt == 2) copy[n - 3] ^= 0x5a;
            write_file(path, copy, bad[i].len);
            free(copy);
            Tokenizer tb;
            capture_begin();
            int r = tokenizer_load(&tb, path);
            capture_end();
            TU_CHECK(r == -1 && strstr(captured, path) && strstr(captured, bad[i].expect) && count_lines(captured) == 1,
                     "%s: want one error line naming the file and saying '%s', got rc %d: %s", bad[i].name, bad[i].expect,
                     r, captured);
        }
        free(good);
        tmp_path(path, sizeof(path), "does_not_exist.bin");
        Tokenizer tb;
        capture_begin();
        int r = tokenizer_load(&tb, path);
        capture_end();
        TU_CHECK(r == -1 && strstr(captured, path), "missing file fails naming it: %s", captured);
        // saving into a missing directory fails, naming the file
        tmp_path(path, sizeof(path), "no/such/dir/tok.bin");
        capture_begin();
        r = tokenizer_save(&t1, path);
        capture_end();
        TU_CHECK(r == -1 && strstr(captured, path) && count_lines(captured) == 1, "save to a missing dir: %s", captured);
        // training errors
        const char* missing[] = {path};
        capture_begin();
        r = tokenizer_train(&tb, missing, 1, 500);
        capture_end();
        TU_CHECK(r == -1 && strstr(captured, path), "training on a missing file fails naming it: %s", captured);
        capture_begin();
        r = tokenizer_train(&tb, efiles, 1, 256);
        capture_end();
        TU_CHECK(r == -1 && strstr(captured, "vocab_size") && count_lines(captured) == 1, "vocab_size 256 rejected: %s",
                 captured);
    }

    // ---- 6. llm.c gpt2_tokenizer.bin, versions 1 and 2 (decode only) ----
    for (int version = 1; version <= 2; version++) {
        // v1 has no eot field (llm.c assumes GPT-2's 50256, with vocab 50257); v2 stores it
        uint32_t V = version == 1 ? 50257 : 300;
        uint32_t header[256] = {0};
        header[0] = TOKENIZER_LLMC_MAGIC;
        header[1] = (uint32_t)version;
        header[2] = V;
        if (version == 2) header[3] = V - 1;
        snprintf(path, sizeof(path), "%s/gpt2_tokenizer_v%d.bin", tmpdir, version);
        FILE* f = fopen(path, "wb");
        fwrite(header, sizeof(header), 1, f);
        for (uint32_t i = 0; i < V; i++) {
            unsigned char buf[32];
            int l;
            if (i < 256) { buf[0] = (unsigned char)i; l = 1; }
            else if (i == V - 1) { memcpy(buf, "<|endoftext|>", 13); l = 13; }
            else l = snprintf((char*)buf, sizeof(buf), " tok%u", i);
            unsigned char lb = (unsigned char)l;
            fwrite(&lb, 1, 1, f);
            fwrite(buf, 1, (size_t)l, f);
        }
        fclose(f);
        Tokenizer g;
        int rc = tokenizer_load(&g, path);
        TU_CHECK(rc == 0, "load llm.c v%d", version);
        if (rc == 0) {
            TU_CHECK(tokenizer_vocab_size(&g) == (int)V && tokenizer_eot(&g) == (int)V - 1 && !g.can_encode,
                     "llm.c v%d: vocab %d eot %d", version, tokenizer_vocab_size(&g), tokenizer_eot(&g));
            int ids[] = {(int)V - 1, 'H', 'i', 257, 258, '\n', (int)V - 1};
            char* text = NULL;
            size_t len = 0;
            rc = tokenizer_decode(&g, ids, 7, &text, &len);
            const char* want = "<|endoftext|>Hi tok257 tok258\n<|endoftext|>";
            TU_CHECK(rc == 0 && len == strlen(want) && memcmp(text, want, len) == 0, "llm.c v%d decodes: %.*s", version,
                     (int)len, text ? text : "");
            free(text);
            int* out = NULL;
            size_t nout = 0;
            capture_begin();
            rc = tokenizer_encode(&g, "x", 1, &out, &nout);
            capture_end();
            TU_CHECK(rc == -1 && strstr(captured, "decode only"), "llm.c tokenizer refuses to encode: %s", captured);
            free(out);
            tokenizer_free(&g);
        }
        // truncated llm.c file
        size_t n = 0;
        unsigned char* b = read_file(path, &n);
        snprintf(path2, sizeof(path2), "%s/gpt2_trunc_v%d.bin", tmpdir, version);
        write_file(path2, b, n - 3);
        free(b);
        capture_begin();
        rc = tokenizer_load(&g, path2);
        capture_end();
        TU_CHECK(rc == -1 && strstr(captured, path2) && strstr(captured, "truncated") && count_lines(captured) == 1,
                 "truncated llm.c v%d file fails naming it: %s", version, captured);
    }

    // ---- 7. the KJV, when prepared (scripts/prepare_kjv.sh) ----
    {
        size_t n = 0;
        unsigned char* kjv = read_file("data/kjv/train.txt", &n);
        if (!kjv) {
            printf("skip: data/kjv/train.txt not found (run scripts/prepare_kjv.sh for the KJV round trip)\n");
        } else {
            Tokenizer k;
            int rc = tokenizer_load(&k, "data/kjv/tokenizer.bin");
            if (rc != 0) { const char* kf[] = {"data/kjv/train.txt"}; rc = tokenizer_train(&k, kf, 1, 2000); }
            TU_CHECK(rc == 0, "KJV tokenizer");
            if (rc == 0) {
                TU_CHECK(roundtrip(&k, kjv, n), "round trip: KJV train text (%zu bytes)", n);
                TU_CHECK(roundtrip(&t1, kjv, n), "round trip: KJV with the small English tokenizer");
                tokenizer_free(&k);
            }
            free(kjv);
        }
    }

    tokenizer_free(&t1);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    return tu_finish();
}
