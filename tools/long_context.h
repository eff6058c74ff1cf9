// tools/long_context.h: long-context evaluation of a checkpoint (gatedgpt_ckpt lengths / stream;
// docs/metrics.md "Long context" has the records' fields).
//
// lengths: mean next-token loss on the validation text at context lengths L = T, 2T, 4T, 8T ...
//   (T = the training length, [model] rope_original_len = [train] seq_len), under each RoPE
//   scaling with factor s = L / T, and per position bucket of width T: where a model breaks.
//   Windows of L tokens are taken one after another from the start of the shards; each is fed
//   through a KV cache in chunks of T tokens (so memory grows with L only through the cache).
// stream: StreamingLLM's evaluation: per-token loss over one long stream of validation text,
//   fed a token at a time through a rolling KV window of W slots keeping the first S tokens
//   (model/kv_cache.h), positions within the cache or in the text; plus the dense reference
//   (every earlier token visible) when it fits; and F-Attn within the window per layer.
#pragma once
#include <stdio.h>
#include "../model/config.h"
#include "../model/gpt.h"

#define LC_MAX_LIST 16

typedef struct {
    const char* glob;            // validation shards
    int lengths[LC_MAX_LIST];    // context lengths (0 entries: T, 2T, 4T, 8T)
    int n_lengths;
    int scalings[LC_MAX_LIST];   // RopeScalingKind values (0 entries: none, linear, ntk, yarn)
    int n_scalings;
    long tokens;                 // tokens scored per length (at least one window)
    const char* ckpt;            // for the records
    int step;
} LcLengths;

typedef struct {
    const char* glob;
    int window;                  // W
    int sinks[LC_MAX_LIST];      // S values
    int n_sinks;
    int positions[LC_MAX_LIST];  // KvPositions values
    int n_positions;
    long tokens;                 // stream length N
    int dense;                   // 1: also the dense reference (when the memory holds it)
    int buckets;                 // loss buckets over the stream
    const char* ckpt;
    int step;
} LcStream;

// Parse "a,b,c" into values (names: kind 0 = integers, 1 = scaling names, 2 = position names).
// Returns the count, or -1 with a one-line error naming the option.
int lc_parse_list(const char* opt, const char* s, int kind, int* out, int max);

// Run the evaluation on the model (weights loaded; its config = the checkpoint's), writing one
// JSONL record per setting to out and a table to stdout. 0, or 1 after a one-line error.
int lc_lengths(GPT* m, const Config* cfg, const LcLengths* o, FILE* out);
int lc_stream(GPT* m, const Config* cfg, const LcStream* o, FILE* out);
