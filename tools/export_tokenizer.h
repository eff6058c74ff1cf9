// tools/export_tokenizer.h: our byte-level BPE tokenizer (data/tokenizer.h) as Hugging Face files
// that `AutoTokenizer.from_pretrained(dir)` / `tokenizers.Tokenizer.from_file` load with no code
// from this project, encoding any text to the same ids as tokenizer_encode (docs/formats.md,
// "Tokenizer export (tokenizer.json)").
#pragma once
#include <stdio.h>

#include "data/tokenizer.h"

// The Split regex of tokenizer.json: our pre-tokenization rules 1-6 (tokenizer.h) for the
// `tokenizers` library's regex engine (Oniguruma), written with \xHH escapes below 0x80 only so
// that Python's `re` reads the same pattern the same way. Letters: A-Z, a-z and every code point
// >= U+0080; digits 0-9; whitespace: space \t \n \v \f \r.
#define EXPORT_TOKENIZER_REGEX                                                                     \
    "'s|'t|'re|'ve|'m|'ll|'d"                                                                      \
    "| ?[^\\x00-@\\[-`{-\\x7F]+"                                                                   \
    "| ?[0-9]+"                                                                                    \
    "| ?[\\x00-\\x08\\x0E-\\x1F!-/:-@\\[-`{-\\x7F]+"                                               \
    "|[\\t-\\r ]+(?![^\\t-\\r ])"                                                                  \
    "|[\\t-\\r ]+"

// Writes out_dir/tokenizer.json (the `tokenizers` library's format: a BPE model, vocab and merges
// in GPT-2's byte-level spelling, pre-tokenizer Split(EXPORT_TOKENIZER_REGEX) + ByteLevel,
// decoder ByteLevel, "<|endoftext|>" as a special added token), out_dir/tokenizer_config.json
// (PreTrainedTokenizerFast; bos/eos/unk = "<|endoftext|>"; model_max_length; split_special_tokens
// true, so that "<|endoftext|>" inside a text is encoded as bytes, as tokenizer_encode does) and
// out_dir/special_tokens_map.json. out_dir is created if missing (one level). Each file is
// written as NAME.tmp, fsynced and renamed. model_max_length <= 0 leaves it out of the config.
// Prints one line per file written to `log` when not NULL. Returns 0, or -1 with a one-line
// error on stderr naming the file: a decode-only tokenizer (llm.c's gpt2_tokenizer.bin, no
// merges), two tokens with the same bytes (a string-keyed vocabulary cannot hold both), I/O.
int export_tokenizer_hf(const char* out_dir, const Tokenizer* tok, int model_max_length, FILE* log);
