// data/hf_tokenizer.h: a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Qwen2/3, Llama 3 and
// the like) loaded into our Tokenizer (data/tokenizer.h), so that prepare, sample and export use
// it like one of ours. docs/formats.md "Hugging Face tokenizer.json" has what is accepted.
//
// Pipeline, as the `tokenizers` library runs it (add_special_tokens=False):
//   1. added tokens (added_tokens[]): every occurrence in the text is cut out, leftmost first and
//      the longest at a position, and becomes its id; with normalizer NFC (Qwen2/3) each text
//      between them is put in NFC (utf8proc) before the next step;
//   2. the text between them is cut by the pre-tokenizer's regex: Split(Regex, "Isolated") of a
//      Sequence [Split, ByteLevel(use_regex=false)], or GPT-2's pattern for a lone
//      ByteLevel(use_regex=true). Matches and the gaps between them are pre-tokens. The pattern
//      means what the library's Oniguruma (Ruby syntax) makes of it: it is rewritten for PCRE2
//      (JIT) where the two differ ({n,m}+, {,m}, \h, \w, \b, \s, ^, $, (?m), \u; the table in
//      docs/formats.md) or refused, naming the construct. Bytes that are not
//      valid UTF-8 are never matched (PCRE2_MATCH_INVALID_UTF): a run of them is a gap pre-token;
//   3. each pre-token's bytes start as the ids of the 256 ByteLevel characters and merge by rank
//      (model.merges order; lowest first, leftmost among equals). With model.ignore_merges a
//      pre-token that is itself in model.vocab is that id.
// Refused with one line naming the file and the part: another model (WordPiece, Unigram,
// WordLevel), a normalizer other than NFC (NFKC, Lowercase, ...), another pre-tokenizer, BPE dropout, a subword
// prefix or suffix, byte_fallback, added tokens with lstrip/rstrip/single_word, a vocabulary
// without the 256 ByteLevel characters, a merge naming a token not in the vocabulary, broken JSON.
//
// End-of-text: the first of "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>" that is a token.
#pragma once
#include <stddef.h>

#include "tokenizer.h"

// Loads path (a tokenizer.json, or a directory holding one) into *t, all but the merges' rank
// map and cache (tokenizer_load builds them: this file calls nothing of data/tokenizer.c). On
// failure: one line on stderr, -1, and the caller frees *t (tokenizer_free).
int hf_tokenizer_load(Tokenizer* t, const char* path);
// 1 when path is a directory or a file whose first non-blank byte is '{'
int hf_tokenizer_is_json(const char* path);
void hf_tokenizer_free(Tokenizer* t);

// The file's bytes exactly as read (what tokenizer_save and the export write back).
const char* hf_tokenizer_json(const Tokenizer* t, size_t* len);
// The end-of-text token's text ("" when there is none).
const char* hf_tokenizer_eot_text(const Tokenizer* t);

// Cuts s[0..n) into pre-tokens (step 1 and 2 above) and calls piece(ctx, p, len) for each, in
// order. With eof == 0 more text may follow: a pre-token that could change with it is left.
// Returns the count of bytes consumed (all of n when eof), or HF_SPLIT_FAILED when piece returned
// non-zero (or no memory), or HF_SPLIT_REGEX when the regex stopped with an error other than
// no-match (PCRE2's match limit on catastrophic backtracking: hf_tokenizer_regex_error says which
// and where; the `tokenizers` library stops with an error there too).
#define HF_SPLIT_FAILED ((size_t)-1)
#define HF_SPLIT_REGEX ((size_t)-2)
size_t hf_tokenizer_split(const Tokenizer* t, const unsigned char* s, size_t n, int eof,
                          int (*piece)(void* ctx, const unsigned char* p, size_t len), void* ctx);
// The same for streaming with a pattern that looks behind (lookbehind, \b, ^): s[0..start) is
// text of the same segment already split (only looked at); *seg_start (when not NULL) gets where
// the segment of the returned offset starts in s (0 when before s), so that the caller can keep up
// to hf_tokenizer_context() bytes of it before the next call.
size_t hf_tokenizer_split_from(const Tokenizer* t, const unsigned char* s, size_t n, size_t start, int eof,
                               int (*piece)(void* ctx, const unsigned char* p, size_t len), void* ctx, size_t* seg_start);
// Bytes of earlier text the pattern may look at before a match start (0 for GPT-2's, Qwen2's,
// Llama 3's and cl100k's patterns).
size_t hf_tokenizer_context(const Tokenizer* t);
// After HF_SPLIT_REGEX: PCRE2's message, and in *off the offset in s where that match started.
const char* hf_tokenizer_regex_error(const Tokenizer* t, size_t* off);
// The id of an added token whose text is exactly p[0..n), or -1.
int hf_tokenizer_added_id(const Tokenizer* t, const unsigned char* p, size_t n);
// With model.ignore_merges: the vocabulary id of p[0..n), or -1 (always -1 without it).
int hf_tokenizer_whole_id(const Tokenizer* t, const unsigned char* p, size_t n);
