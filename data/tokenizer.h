// data/tokenizer.h: byte-level BPE tokenizer: train on text files, encode, decode, save, load.
//
// Vocabulary (our format):
//   ids 0..255            the 256 single bytes
//   ids 256..256+M-1      merges, in the order training found them: id 256+i = merge i = the
//                         concatenation of its pair (a, b), both ids < 256+i
//   id  256+M = V-1       end-of-text, bytes "<|endoftext|>" (never produced by encode)
// so V = vocab_size = 256 + M + 1.
//
// Pre-tokenization (GPT-2-like, on bytes; docs/formats.md has the full rules): text is cut
// into pre-tokens and merges never cross a pre-token boundary. Letters are A-Z, a-z and every
// byte >= 0x80 (so UTF-8 text stays inside words); digits 0-9; whitespace is space, \t, \n,
// \v, \f, \r; everything else is "other". At each position the first rule that matches wins:
//   1. a contraction: 's 't 'm 'd 're 've 'll (lowercase, as GPT-2)
//   2. an optional space then a run of letters
//   3. an optional space then a run of digits
//   4. an optional space then a run of "other" bytes
//   5. a run of whitespace up to the end of the text, or, when a non-whitespace byte follows
//      it, the run minus its last byte (GPT-2's \s+(?!\S): "   word" -> "  ", " word")
//   6. a single whitespace byte (when it alone precedes a non-whitespace byte, e.g. "\nword")
//
// Encoding a pre-token applies the lowest-rank merge present, repeatedly (left to right among
// equal pairs), which gives the same tokens as applying the merge list in order. Any byte string
// round-trips: decode(encode(x)) == x, invalid UTF-8 included.
//
// Also loads llm.c's gpt2_tokenizer.bin (magic 20240328, versions 1 and 2) for decoding only.
//
// Errors: every function that can fail prints one line to stderr naming the file and returns -1.
// Not thread-safe: encode fills a cache inside the Tokenizer (also through a const pointer).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>   // tok_error
#include <stdio.h>

#define TOKENIZER_MAGIC 20250611        // our file format (docs/formats.md)
#define TOKENIZER_VERSION 1
#define TOKENIZER_LLMC_MAGIC 20240328   // llm.c's gpt2_tokenizer.bin
#define TOKENIZER_EOT_TEXT "<|endoftext|>"

typedef struct TokRankMap TokRankMap;   // (a, b) -> merge rank (private)
typedef struct TokCache TokCache;       // pre-token bytes -> ids (private)
typedef struct TokHf TokHf;             // a Hugging Face tokenizer.json (data/hf_tokenizer.h; private)

typedef struct {
    int vocab_size;          // V
    int n_merges;            // M; 0 for a decode-only (llm.c) tokenizer
    int eot;                 // end-of-text id, or -1
    int can_encode;          // 1 when the merges are known (our format); 0 for llm.c files
    int* merges;             // [2*M]: merge i joins ids merges[2i], merges[2i+1] into id 256+i
    unsigned char* bytes;    // every token's bytes, concatenated
    int64_t* offsets;        // [V+1]: token i is bytes[offsets[i] .. offsets[i+1])
    TokRankMap* ranks;       // encoder lookup, built when can_encode
    TokCache* cache;         // encoded pre-tokens (bounded; cleared when full)
    // a Hugging Face tokenizer.json (data/hf_tokenizer.h) has ids in any order: merge i makes id
    // merge_ids[i] (not 256+i) and byte b starts as id byte_ids[b] (not b); NULL for our format
    int* merge_ids;          // [M]
    int* byte_ids;           // [256]
    int heap_only;           // 1: some merge uses a token made by a later merge; only the heap BPE keeps rank order
    TokHf* hf;               // its regex, added tokens and file bytes; NULL for our format
} Tokenizer;

// ---- the fixed API ----------------------------------------------------------------------------

// Trains BPE on the text files (read in chunks; memory grows with the number of distinct
// pre-tokens, not with the corpus). vocab_size counts the 256 bytes, the merges and the
// end-of-text token (>= 257). Lines holding only "<|endoftext|>" separate documents and are not
// trained on. Ties between equally frequent pairs go to the lowest (a, b); deterministic. If the
// corpus has fewer distinct pairs than merges wanted, training stops early with a note on stderr
// and the vocabulary is smaller.
int tokenizer_train(Tokenizer* t, const char* const* files, int nfiles, int vocab_size);
// The same, reading *.jsonl files as JSON lines with the document in string field jsonl_field
// (TokenizerStream.jsonl_field; NULL: all files are plain text).
int tokenizer_train_field(Tokenizer* t, const char* const* files, int nfiles, int vocab_size, const char* jsonl_field);
// Writes path.tmp, fsyncs it and renames it to path.
int tokenizer_save(const Tokenizer* t, const char* path);
// Our format, or llm.c's gpt2_tokenizer.bin (decode only). On failure *t needs no free.
int tokenizer_load(Tokenizer* t, const char* path);
void tokenizer_free(Tokenizer* t);
int tokenizer_vocab_size(const Tokenizer* t);
int tokenizer_eot(const Tokenizer* t);
// The bytes of token id (*len of them), or NULL (and *len = 0) for an invalid id.
const unsigned char* tokenizer_token_bytes(const Tokenizer* t, int id, int* len);
// Appends the ids of text[0..len) to *out (grown with realloc; *out may be NULL with *n_out 0)
// and advances *n_out. Never emits end-of-text. Fails on a decode-only tokenizer.
int tokenizer_encode(const Tokenizer* t, const char* text, size_t len, int** out, size_t* n_out);

// ---- additions ---------------------------------------------------------------------------------

// Appends the bytes of ids[0..n) to *out (realloc'd), advancing *len. Fails on an invalid id.
int tokenizer_decode(const Tokenizer* t, const int* ids, size_t n, char** out, size_t* len);

// Encodes one pre-token p[0..n) (n >= 1) into dst, which must hold n ints; returns the count.
// Only meaningful for a piece that tokenizer_next_piece produced.
size_t tokenizer_encode_piece(const Tokenizer* t, const unsigned char* p, size_t n, int* dst);

// The pre-tokenizer: the end (exclusive) of the pre-token that starts at s[i], i < n. With
// eof == 0 the text may continue past n: returns 0 when the answer depends on bytes not yet
// seen (then call again from i with more text). With eof != 0, s[0..n) is the whole text.
// A pre-token depends only on the bytes from its start on, so streaming gives the same pieces.
size_t tokenizer_next_piece(const unsigned char* s, size_t n, size_t i, int eof);

// The last c in (from, n) at which s[0..n) may be cut so that s[0..c) and s[c..n), each cut into
// pre-tokens as a whole text (eof), give the pre-tokens of s[0..n) (the rest of the text only
// continuing the second): a space after a non-space byte. 0 when there is none, and always 0 for a
// tokenizer.json (no such rule is proven for an arbitrary regex). prepare -j N splits a long
// document there.
size_t tokenizer_safe_cut(const Tokenizer* t, const unsigned char* s, size_t from, size_t n);

// Streams a text file (plain, or gzip/zstd/xz compressed: tokenizer_read_docs below) as documents
// of pre-tokens. A line holding only "<|endoftext|>" (an optional \r before its \n allowed) ends a
// document and is dropped; a file starts a new document. Calls doc_begin before the first piece of
// each non-empty document, piece for each pre-token (never crossing a document), progress with the
// count of file bytes consumed after each read (compressed bytes for a compressed file).
// Any callback may be NULL; a non-zero return from doc_begin or piece stops and returns -1.
// Memory is bounded by the chunk size except for a single pre-token longer than 16 MiB, which
// is cut there.
typedef struct {
    int (*doc_begin)(void* ctx);
    int (*piece)(void* ctx, const unsigned char* p, size_t n);
    void (*progress)(void* ctx, size_t bytes_read);
    void* ctx;
    const Tokenizer* tok;      // whose pre-tokenizer cuts the text (NULL: ours, rules 1-6 above)
    const char* jsonl_field;   // NULL: every file is plain text; else *.jsonl files are JSON lines
} TokenizerStream;
int tokenizer_stream_file(const char* path, const TokenizerStream* stream);

// The reader under tokenizer_stream_file: a file, plain or compressed (gzip, zstd, xz; told by its
// first bytes: data/decompress.h), cut into documents whose text is passed on unchanged.
// text(ctx, p, n, doc_no, end_off) hands over the next bytes of the current document (doc_no: its
// number in the file from 1, in a .jsonl file its line; end_off: the offset in the decompressed
// text just after p[n), -1 in a .jsonl file); doc_end(ctx) ends the current document (it may be
// empty: separators in a row, an empty file); progress(ctx, n): n more bytes of the file consumed
// (compressed bytes, comparable to its size). A non-zero return from text or doc_end stops and
// returns -1; so do a read error and a corrupt or truncated stream (one line on stderr).
typedef struct {
    int (*text)(void* ctx, const unsigned char* p, size_t n, int64_t doc_no, int64_t end_off);
    int (*doc_end)(void* ctx);
    void (*progress)(void* ctx, size_t bytes);  // may be NULL
    void* ctx;
} TokenizerDocSink;
int tokenizer_read_docs(const char* path, const char* jsonl_field, const TokenizerDocSink* sink);
// 1 when path names a JSON lines file: it ends in .jsonl, .jsonl.gz, .jsonl.zst or .jsonl.xz
int tokenizer_is_jsonl_name(const char* path);
// One whole document text[0..n) of file path cut into pre-tokens through stream's doc_begin and piece
// callbacks, the same pieces tokenizer_stream_file gives for it (doc_no and end_off, as
// TokenizerDocSink has them, only place an error message). Thread-safe for distinct Tokenizers:
// prepare -j N runs one per worker, each with its own Tokenizer.
int tokenizer_stream_doc(const TokenizerStream* stream, const char* path, int64_t doc_no, int64_t end_off,
                         const unsigned char* text, size_t n);

// ---- Hugging Face tokenizer.json (data/hf_tokenizer.h) ----------------------------------------
// tokenizer_load reads a tokenizer.json (a file starting with '{') or a directory holding one;
// tokenizer_save then writes that file's bytes back unchanged. TokenizerStream.tok selects the
// pre-tokenizer used by tokenizer_stream_file: NULL or one of ours: the rules above; a
// tokenizer.json's: its added tokens, then its Split regex. TokenizerStream.jsonl_field, when not
// NULL, reads files whose name ends in .jsonl (or .jsonl.gz, .jsonl.zst, .jsonl.xz) as JSON lines:
// one document per line, the text in that string field (other files stay plain text).

// Builds t->ranks and t->cache from t->merges (tokenizer_load calls it for a tokenizer.json too).
int tokenizer_index_merges(Tokenizer* t, const char* what);
// 1 for a tokenizer loaded from a tokenizer.json
int tokenizer_is_hf(const Tokenizer* t);
// One line to stderr, "error: tokenizer '<file>': <message>": the loaders' (ours and
// data/hf_tokenizer.c's) error format; here so that neither file calls the other for it
__attribute__((format(printf, 2, 3))) static inline void tok_error(const char* file, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: tokenizer '%s': ", file);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
