// model/params.h: the named parameter table. Every parameter is a slice of one flat arena
// (the gradient and AdamW arenas share the layout), in the order docs/architecture.md lists.
#pragma once
#include <stddef.h>
#include "config.h"

typedef struct {
    char name[48];       // e.g. "h.3.attn.wqkv"
    int ndim;            // 1, 2 or 3
    int shape[3];        // [out, in] for matrices; [expert, out, in] for the stacked experts
    size_t offset;       // in floats, into the arena
    size_t numel;
    int decay;           // weight decay applies (2-D and 3-D parameters)
    int residual_proj;   // output projection into the residual stream (init std scaled)
    int bias;            // an additive vector (norm biases .b, linear biases [model] bias): init 0
    // the stacked experts of an MoE layer (moe.w_in, moe.w_out; 0, 0 for every other tensor):
    // shape[0] = expert_n experts, the global experts expert_lo .. expert_lo + expert_n - 1
    // (all n_expert of them, expert_lo 0, unless the table is an expert-parallel shard)
    int expert_lo, expert_n;
} ParamInfo;

typedef struct {
    ParamInfo* p;
    int n;
    size_t total;        // floats in the arena
    // Expert parallelism ([moe] expert_parallel = P > 1, docs/distributed.md): member q of a
    // group of P holds only the experts q*El .. q*El + El - 1 (El = n_expert / P) of each MoE
    // layer. Its arena is then [dense | experts]: every other tensor first, in table order, from
    // offset 0 (the dense region, dense_total floats, a whole number of OPS_SUMSQ_CHUNK); the
    // expert shards after it, in table order. ep_size 1: the whole model in table order
    // (dense_total = total), the layout of model.bin.
    int ep_size, ep_rank;
    size_t dense_total;
} ParamTable;

// The whole model (ep_size 1: model.bin's table).
void param_table_build(ParamTable* t, const ModelConfig* c);
// Member ep_rank of a group of ep_size (ep_size divides n_expert; 1 = param_table_build).
void param_table_build_ep(ParamTable* t, const ModelConfig* c, int ep_size, int ep_rank);
// Floats of one expert of a stacked expert tensor (shape[1] * shape[2]).
size_t param_expert_numel(const ParamInfo* p);
// Where the floats [a, b) of table t's arena lie in the whole model's arena (table g, built with
// ep_size 1 from the same config): calls f(ctx, local_offset, global_offset, count) for each
// contiguous piece, in t's arena order (padding between tensors is skipped).
void param_table_map(const ParamTable* t, const ParamTable* g, size_t a, size_t b,
                     void (*f)(void* ctx, size_t local, size_t global, size_t n), void* ctx);
void param_table_free(ParamTable* t);
const ParamInfo* param_find(const ParamTable* t, const char* name);   // NULL if absent

// Pointers into one arena (parameters or gradients) by role. NULL where the config has none.
typedef struct {
    float *ln1_w, *ln1_b;
    float *wqkv;             // [H*hd + 2*Hkv*hd + G, d]: rows [q | k | v | gate]
    float *qnorm_w, *knorm_w;
    float *wo;               // [d, H*hd]
    float *ln2_w, *ln2_b;
    float *w_in;             // [2F, d] swiglu (rows [gate | up]) or [F, d] gelu
    float *w_out;            // [d, F]
    // [model] bias (GPT-2): one per linear layer above, over its output rows; NULL without
    float *bqkv;             // [H*hd + 2*Hkv*hd + G]: [q | k | v | gate], as wqkv's rows
    float *bo;               // [d]
    float *b_in;             // [2F] swiglu ([gate | up]) or [F] gelu
    float *b_out;            // [d]
    // MoE layers (config_layer_is_moe) have these instead of w_in, w_out. E = n_expert,
    // Fe = d_expert, Fs = d_shared_expert; Fin = 2F (swiglu: rows [gate | up]) or F (gelu).
    float *router;           // [E, d]             router logits = x router^T
    float *moe_w_in;         // [E, Fin_e, d]      expert e's w_in at moe_w_in + e*Fin_e*d
    float *moe_w_out;        // [E, d, Fe]
    float *shared_w_in;      // [Fin_s, d]         n_shared_expert = 1
    float *shared_w_out;     // [d, Fs]
    float *shared_gate;      // [1, d]             shared_expert_gate
    // Gated DeltaNet layers (config_layer_is_linear) have these instead of wqkv, q/k norms, wo.
    // Hk, Hv = linear_n_k_head, linear_n_v_head; dk, dv their head dims; Kd = Hk*dk, Vd = Hv*dv;
    // Cc = 2*Kd + Vd the conv channels; K = linear_conv_kernel.
    float *gdn_w_qkv;        // [Cc, d]   rows [q (Kd) | k (Kd) | v (Vd)], head-major in each block
    float *gdn_w_z;          // [Vd, d]   the output gate's logits
    float *gdn_w_ba;         // [2*Hv, d] rows [b | a]: beta = sigmoid(b), decay from a
    float *gdn_conv_w;       // [Cc, K]   causal depthwise conv (Conv1d weight [Cc, 1, K])
    float *gdn_A_log;        // [Hv]
    float *gdn_dt_bias;      // [Hv]
    float *gdn_norm_w;       // [dv]      gated RMSNorm's weight (shared by the heads)
    float *gdn_w_out;        // [d, Vd]
} LayerWeights;

typedef struct {
    float *wte;              // [Vp, d]
    float *wpe;              // [max_seq_len, d]
    LayerWeights* layer;     // [n_layer]
    float *lnf_w, *lnf_b;
    float *lm_head;          // [Vp, d]: wte when tied
} ModelWeights;

void weights_bind(ModelWeights* w, float* arena, const ParamTable* t, const ModelConfig* c);
// The same with each tensor's address given by at(ctx, tensor) (a sharded master's tensors
// are not all in one arena: model/gpt.h gpt_build_shard).
typedef float* (*WeightsAt)(void* ctx, const ParamInfo* p);
void weights_bind_at(ModelWeights* w, WeightsAt at, void* ctx, const ParamTable* t, const ModelConfig* c);
void weights_free(ModelWeights* w);

// Initialise a host copy of the arena: matrices (2-D and the 3-D expert stacks) and embeddings
// ~ N(0, init_std), residual output projections (attn.wo, gdn.w_out, mlp.w_out, moe.w_out,
// moe.shared_w_out) ~ N(0, init_std / sqrt(2 * n_layer)), norm weights 1, norm biases 0; the
// Gated DeltaNet's A_log = log(U(0, 16]), dt_bias 1, conv_w ~ U(-1/sqrt(K), 1/sqrt(K)) (as
// transformers' Qwen3-Next). Deterministic in the seed; parameters are drawn in table order.
// An expert-parallel shard (ParamTable.ep_size > 1) draws every expert of a stacked expert tensor
// in the order of their global index and keeps its own: each expert gets the values it has in
// the whole model, whatever the P (docs/distributed.md).
void params_init(float* host_arena, const ParamTable* t, const ModelConfig* c,
                 unsigned long long seed);
