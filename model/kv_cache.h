// model/kv_cache.h: the KV cache of inference (sampling, scoring, long-context and streaming
// evaluation). gpt_forward with m->kv set runs the new tokens of each sequence against the
// cached keys and values of the tokens before them, instead of attending within the batch
// (kernels/ops.h "KV cache"). Training never uses it.
//
// Two ways to fill it:
// - growing (rolling = 0): the tokens of a context go into slots 0, 1, 2, ... in chunks of any
//   size; token t of the context sits in slot t at position t. A context longer than cap is an
//   error. Logits equal a full forward's up to fp32 roundoff (tests/test_kv_cache.c).
// - rolling window (rolling = 1, StreamingLLM, Xiao et al. 2023): one token at a time, B = 1.
//   Slots 0 .. n_sink-1 keep the first n_sink tokens of the stream for good (the "attention
//   sinks"); slots n_sink .. cap-1 are a ring of the latest cap - n_sink tokens, the newest
//   replacing the oldest once the cache is full. Positions:
//     KV_POS_ORIGINAL  every token keeps its position in the text (RoPE distances grow past
//                      training lengths for the sinks, never for the ring)
//     KV_POS_CACHE     StreamingLLM's: positions within the cache, sinks first (0 .. n_sink-1),
//                      then the ring in order of time, the newest at cap-1. RoPE depends on
//                      position differences only, so the ring keeps its text positions and the
//                      sinks are rotated to (query position) - (cap - 1) + i each step, from
//                      their keys before RoPE (kept in sink_k): the same attention scores.
//   A layer's cached key and value of a token are the ones computed when the token was new,
//   while older tokens (since evicted) were still visible to the layers below: the window is
//   not recomputed (StreamingLLM's semantics; tests/test_kv_cache.c checks the rest).
//   Rolling needs pos = rope (a learned-position model has no position to give a token beyond
//   max_seq_len, and cannot move a cached key to another position).
// MoE layers with [moe] capacity_factor > 0 drop slots per forward, so a cached decode (one
// token per forward) drops differently from the full forward: equality holds for dropless MoE.
#pragma once
#include "config.h"
#include "../kernels/ops.h"

typedef enum { KV_POS_ORIGINAL = 0, KV_POS_CACHE = 1 } KvPositions;

typedef struct KVCache {
    int n_layer, B, cap;     // cap: slots per sequence
    int kv_dim;              // Hkv * head_dim: floats of one cached row
    int n_sink;              // rolling: slots kept for the first tokens of the stream (S)
    int rolling;             // 0: growing; 1: rolling window of cap slots
    KvPositions positions;   // rolling: how positions are assigned
    int max_T;               // the most new tokens per sequence in one forward (sizes scratch)
    int learned;             // the model has learned positions: pos + T <= max_seq_len
    int max_seq_len;
    int pos;                 // tokens consumed per sequence (the position of the next in the text)
    int n;                   // filled slots per sequence
    act_t** k;               // [n_layer] -> [B, cap, kv_dim] backend memory
    act_t** v;
    act_t** sink_k;          // [n_layer] -> [n_sink, kv_dim]: the sinks' keys before RoPE
    act_t** sink_v;          //   and their values (KV_POS_CACHE only; NULL otherwise)
    // F-Attn within the cache (probes of streaming evaluation): when stats is set, each
    // forward adds, per layer, the attention probability on slots 0 .. max(n_sink, 1) - 1
    // averaged over heads, for every query at a position > 0, into fattn_sum[l] (host).
    int stats;
    float* sink_prob;        // [B, H, max_T] backend scratch
    float* sink_host;        // [B, H, max_T] host
    double* fattn_sum;       // [n_layer]
    long fattn_count;        // queries counted in fattn_sum
    int first_attn;          // the layer whose attend counts the queries (the lowest attention layer)
    // Gated DeltaNet layers (hybrid models) cache no keys: their k[l], v[l] are NULL and they
    // carry two states per sequence instead, double-buffered (the forward reads [cur], writes
    // [cur ^ 1]; kv_cache_end flips cur): the conv's last K-1 inputs [B, Cc, K-1] and the delta
    // rule's state [B, Hv, dk, dv], both fp32. They hold every token of the sequence, whatever
    // the window of the attention layers.
    float** conv_state[2];   // [n_layer] -> backend memory (NULL for attention layers)
    float** gdn_state[2];
    int cur;
    size_t bytes;            // backend bytes held (k, v, sinks, scratch)
} KVCache;

// Backend bytes a cache of these sizes takes (for an error before allocating).
size_t kv_cache_bytes(const ModelConfig* c, int B, int cap, int n_sink, int max_T, int rolling,
                      KvPositions positions);
// Allocate an empty cache. Returns 0, or -1 with a one-line error on stderr (what: the caller's
// name for the messages) for a rolling cache with learned positions, B > 1, n_sink >= cap.
int kv_cache_init(KVCache* kv, const ModelConfig* c, int B, int cap, int n_sink, int max_T,
                  int rolling, KvPositions positions, const char* what);
void kv_cache_reset(KVCache* kv);   // empty, position 0, statistics cleared
void kv_cache_free(KVCache* kv);

// Called by gpt_forward for a forward of T new tokens per sequence: the position of the first
// (the shape's pos0). Exits with an error when they do not fit (growing: n + T > cap; rolling:
// T > 1; learned positions past max_seq_len).
int kv_cache_begin(KVCache* kv, int T);
// Layer l of that forward: write the new k, v [B*T, kv_dim] (after prep) into their slots, then
// attention of q over the cache (ops_attention_cached_forward) into y, yg, lse.
void kv_cache_attend(KVCache* kv, int l, act_t* y, act_t* yg, float* lse, const act_t* q,
                     const act_t* k, const act_t* v, const act_t* qkv, const OpsAttnShape* s);
// Gated DeltaNet layer l of that forward: the states to start from (NULL at the sequence's
// start: zeros) and where to write the states after the new tokens.
void kv_cache_linear(KVCache* kv, int l, const float** conv_in, float** conv_out, const float** state_in,
                     float** state_out);
// The forward is done: T more tokens consumed.
void kv_cache_end(KVCache* kv, int T);
