// model/kv_cache.c: the KV cache (model/kv_cache.h). Slot bookkeeping on the host; the copies,
// rotations and attention are ops (kernels/ops.h "KV cache").
#include "kv_cache.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sinks_kept_raw(int rolling, int n_sink, KvPositions p) {
    return rolling && n_sink > 0 && p == KV_POS_CACHE;
}

// the floats of a Gated DeltaNet layer's conv state and delta-rule state, B sequences
static size_t kv_conv_floats(const ModelConfig* c, int B) {
    size_t Cc = 2 * (size_t)c->linear_n_k_head * c->linear_k_head_dim + (size_t)c->linear_n_v_head * c->linear_v_head_dim;
    return (size_t)B * Cc * (size_t)(c->linear_conv_kernel - 1);
}
static size_t kv_state_floats(const ModelConfig* c, int B) {
    return (size_t)B * c->linear_n_v_head * c->linear_k_head_dim * c->linear_v_head_dim;
}
static size_t kv_linear_bytes(const ModelConfig* c, int B) {   // both buffers of each
    return 2 * (kv_conv_floats(c, B) + kv_state_floats(c, B)) * sizeof(float);
}

size_t kv_cache_bytes(const ModelConfig* c, int B, int cap, int n_sink, int max_T, int rolling,
                      KvPositions positions) {
    size_t row = (size_t)c->n_kv_head * c->head_dim * sizeof(act_t);
    size_t per_layer = 2 * (size_t)B * cap * row;
    if (sinks_kept_raw(rolling, n_sink, positions)) per_layer += 2 * (size_t)n_sink * row;
    size_t total = (size_t)B * c->n_head * max_T * sizeof(float);
    for (int l = 0; l < c->n_layer; l++) total += config_layer_is_linear(c, l) ? kv_linear_bytes(c, B) : per_layer;
    return total;
}

int kv_cache_init(KVCache* kv, const ModelConfig* c, int B, int cap, int n_sink, int max_T,
                  int rolling, KvPositions positions, const char* what) {
    memset(kv, 0, sizeof *kv);
    if (rolling && c->pos != POS_ROPE) {
        fprintf(stderr, "error: %s: a rolling KV window needs [model] pos = rope: this model has learned positions, "
                "which give no position past max_seq_len = %d and cannot move a cached key (use a window within "
                "max_seq_len by recomputing, or a rope model)\n", what, c->max_seq_len);
        return -1;
    }
    if (rolling && B != 1) {
        fprintf(stderr, "error: %s: a rolling KV window holds one sequence (B = 1, got %d)\n", what, B);
        return -1;
    }
    if (cap < 1 || max_T < 1 || n_sink < 0 || (rolling && n_sink >= cap)) {
        fprintf(stderr, "error: %s: sink tokens S = %d must be fewer than the window W = %d (accepted: 0 <= S < W)\n",
                what, n_sink, cap);
        return -1;
    }
    kv->n_layer = c->n_layer; kv->B = B; kv->cap = cap; kv->n_sink = n_sink; kv->rolling = rolling;
    kv->positions = positions; kv->max_T = max_T; kv->kv_dim = c->n_kv_head * c->head_dim;
    kv->learned = c->pos == POS_LEARNED; kv->max_seq_len = c->max_seq_len;
    kv->first_attn = 0;   // the lowest attention layer (a hybrid's layer 0 may be a Gated DeltaNet)
    while (kv->first_attn < c->n_layer - 1 && config_layer_is_linear(c, kv->first_attn)) kv->first_attn++;
    kv->k = calloc((size_t)kv->n_layer, sizeof(act_t*));
    kv->v = calloc((size_t)kv->n_layer, sizeof(act_t*));
    kv->fattn_sum = calloc((size_t)kv->n_layer, sizeof(double));
    if (!kv->k || !kv->v || !kv->fattn_sum) { fprintf(stderr, "error: %s: out of host memory\n", what); return -1; }
    size_t rows = (size_t)B * cap * kv->kv_dim;
    for (int i = 0; i < 2; i++) {
        kv->conv_state[i] = calloc((size_t)kv->n_layer, sizeof(float*));
        kv->gdn_state[i] = calloc((size_t)kv->n_layer, sizeof(float*));
        if (!kv->conv_state[i] || !kv->gdn_state[i]) { fprintf(stderr, "error: %s: out of host memory\n", what); return -1; }
    }
    for (int l = 0; l < kv->n_layer; l++) {
        if (config_layer_is_linear(c, l)) {
            for (int i = 0; i < 2; i++) {
                kv->conv_state[i][l] = ops_malloc((kv_conv_floats(c, B) ? kv_conv_floats(c, B) : 1) * sizeof(float));
                kv->gdn_state[i][l] = ops_malloc(kv_state_floats(c, B) * sizeof(float));
            }
            continue;
        }
        kv->k[l] = ops_malloc(rows * sizeof(act_t));
        kv->v[l] = ops_malloc(rows * sizeof(act_t));
    }
    if (sinks_kept_raw(rolling, n_sink, positions)) {
        kv->sink_k = calloc((size_t)kv->n_layer, sizeof(act_t*));
        kv->sink_v = calloc((size_t)kv->n_layer, sizeof(act_t*));
        for (int l = 0; l < kv->n_layer; l++) {
            if (config_layer_is_linear(c, l)) continue;
            kv->sink_k[l] = ops_malloc((size_t)n_sink * kv->kv_dim * sizeof(act_t));
            kv->sink_v[l] = ops_malloc((size_t)n_sink * kv->kv_dim * sizeof(act_t));
        }
    }
    size_t np = (size_t)B * c->n_head * max_T;
    kv->sink_prob = ops_malloc(np * sizeof(float));
    kv->sink_host = calloc(np, sizeof(float));
    kv->bytes = kv_cache_bytes(c, B, cap, n_sink, max_T, rolling, positions);
    return 0;
}

void kv_cache_reset(KVCache* kv) {
    kv->pos = 0;
    kv->n = 0;
    kv->fattn_count = 0;
    for (int l = 0; l < kv->n_layer; l++) kv->fattn_sum[l] = 0.0;
}

void kv_cache_free(KVCache* kv) {
    for (int l = 0; l < kv->n_layer; l++) {
        if (kv->k && kv->k[l]) ops_free(kv->k[l]);
        if (kv->v && kv->v[l]) ops_free(kv->v[l]);
        if (kv->sink_k && kv->sink_k[l]) { ops_free(kv->sink_k[l]); ops_free(kv->sink_v[l]); }
        for (int i = 0; i < 2; i++) {
            if (kv->conv_state[i] && kv->conv_state[i][l]) ops_free(kv->conv_state[i][l]);
            if (kv->gdn_state[i] && kv->gdn_state[i][l]) ops_free(kv->gdn_state[i][l]);
        }
    }
    free(kv->k); free(kv->v); free(kv->sink_k); free(kv->sink_v);
    for (int i = 0; i < 2; i++) { free(kv->conv_state[i]); free(kv->gdn_state[i]); }
    if (kv->sink_prob) ops_free(kv->sink_prob);
    free(kv->sink_host); free(kv->fattn_sum);
    memset(kv, 0, sizeof *kv);
}

int kv_cache_begin(KVCache* kv, int T) {
    if (T > kv->max_T) {
        fprintf(stderr, "error: KV cache: %d new tokens in one forward, sized for at most %d\n", T, kv->max_T);
        exit(1);
    }
    if (kv->rolling && T != 1) {
        fprintf(stderr, "error: KV cache: a rolling window takes one token per forward (got %d)\n", T);
        exit(1);
    }
    if (!kv->rolling && kv->n + T > kv->cap) {
        fprintf(stderr, "error: KV cache: %d cached + %d new tokens exceed its %d slots\n", kv->n, T, kv->cap);
        exit(1);
    }
    if (kv->learned && kv->pos + T > kv->max_seq_len) {
        fprintf(stderr, "error: KV cache: positions up to %d with learned positions: [model] max_seq_len = %d "
                "(a learned-position model has no embedding past it; use a context <= max_seq_len)\n",
                kv->pos + T, kv->max_seq_len);
        exit(1);
    }
    return kv->pos;
}

void kv_cache_attend(KVCache* kv, int l, act_t* y, act_t* yg, float* lse, const act_t* q,
                     const act_t* k, const act_t* v, const act_t* qkv, const OpsAttnShape* s) {
    const int T = s->T, S = kv->n_sink, W = kv->cap;
    // the slot of the new tokens, and the filled slots after them
    int slot = kv->n, n_after = kv->n + T;
    if (kv->rolling && kv->n == W) {            // full: the newest replaces the ring's oldest
        slot = S + (kv->pos - S) % (W - S);
        n_after = W;
    }
    ops_kv_cache_write(kv->k[l], kv->v[l], k, v, slot, W, s);
    if (kv->sink_k) {
        OpsAttnShape one = *s;
        one.B = 1; one.T = 1;
        if (kv->pos < S) {                      // a sink arrives: keep its key before RoPE
            act_t* raw = kv->sink_k[l] + (size_t)kv->pos * kv->kv_dim;
            ops_kv_cache_write(raw, kv->sink_v[l] + (size_t)kv->pos * kv->kv_dim, k, v, 0, 1, &one);
            ops_rope_rows(raw, 1, s->Hkv, kv->pos, -1, s);
        } else if (kv->n == W) {                // sinks at (query position) - (W - 1) + i
            one.T = S;
            ops_kv_cache_write(kv->k[l], kv->v[l], kv->sink_k[l], kv->sink_v[l], 0, W, &one);
            ops_rope_rows(kv->k[l], S, s->Hkv, kv->pos - (W - 1), +1, s);
        }
    }
    int n_stat = S > 0 ? S : 1;
    ops_attention_cached_forward(y, yg, lse, kv->stats ? kv->sink_prob : NULL, q, kv->k[l], kv->v[l], qkv,
                                 n_after, W, n_stat, s);
    if (kv->stats) {
        const int B = s->B, H = s->H;
        ops_to_host(kv->sink_host, kv->sink_prob, (size_t)B * H * T * sizeof(float));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                if (kv->pos + t == 0) continue;   // the first query sees only itself
                double m = 0.0;
                for (int h = 0; h < H; h++) m += kv->sink_host[((size_t)b * H + h) * T + t];
                kv->fattn_sum[l] += m / H;
                if (l == kv->first_attn) kv->fattn_count++;   // once per query
            }
    }
}

void kv_cache_linear(KVCache* kv, int l, const float** conv_in, float** conv_out, const float** state_in,
                     float** state_out) {
    const int cur = kv->cur;
    *conv_in = kv->pos > 0 ? kv->conv_state[cur][l] : NULL;
    *state_in = kv->pos > 0 ? kv->gdn_state[cur][l] : NULL;
    *conv_out = kv->conv_state[cur ^ 1][l];
    *state_out = kv->gdn_state[cur ^ 1][l];
}

void kv_cache_end(KVCache* kv, int T) {
    kv->cur ^= 1;   // the states the forward wrote are the ones the next forward reads
    kv->pos += T;
    kv->n = kv->n + T < kv->cap ? kv->n + T : kv->cap;
}
