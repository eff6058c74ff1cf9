// model/gpt.h: the whole network, written once over kernels/ops.h.
#pragma once
#include "config.h"
#include "params.h"
#include "../kernels/ops.h"

// Activations of one layer for one micro-batch (N = B*T tokens), kept for the backward pass.
typedef struct {
    float* res_in;     // [N, d]   residual stream entering the layer (owned by GPT.res)
    float* ln1;        // [N, d]   normed input X that feeds q, k, v and the gate
    float* ln1_mean;   // [N]
    float* ln1_rstd;   // [N]
    float* qkv;        // [N, QKVG] fused projection output: [q | k | v | gate logits]
    float* q;          // [N, H*hd]  after qk-norm and RoPE
    float* k;          // [N, Hkv*hd]
    float* v;          // [N, Hkv*hd] after the value gate (if any)
    float* qk_rstd;    // [N, H+Hkv] qk-norm statistics
    float* y;          // [N, H*hd] attention output before the sdpa gate
    float* yg;         // [N, H*hd] after the gate (== y when there is no sdpa gate)
    float* lse;        // [B, H, T] row logsumexp of the attention scores
    float* res_mid;    // [N, d]   residual after attention
    float* ln2;        // [N, d]
    float* ln2_mean;   // [N]
    float* ln2_rstd;   // [N]
    float* mlp_pre;    // [N, 2F] swiglu or [N, F] gelu: output of w_in
    float* mlp_act;    // [N, F]   input of w_out
} LayerActs;

typedef struct {
    ModelConfig cfg;
    ParamTable table;
    float* params;       // arena [table.total] in backend memory
    float* grads;        // arena, same layout
    ModelWeights w;      // pointers into params
    ModelWeights g;      // pointers into grads
    OpsAttnShape attn;   // attention shape for the current B, T

    // activations, sized for B x T at gpt_alloc_acts
    int B, T;
    float* acts;         // one arena for everything below
    float** res;         // [n_layer + 1] residual streams [N, d]
    LayerActs* layer;    // [n_layer]
    float *lnf, *lnf_mean, *lnf_rstd;   // [N, d], [N], [N]
    float* logits;       // [N, Vp] (overwritten by dlogits in backward)
    float* losses;       // [N]
    float* lse;          // [N] logsumexp of each logits row (saved for the backward)
    int *idx, *targets;  // [N] in backend memory
    // backward scratch
    float *dres, *dnorm, *dqkv, *dq, *dk, *dv, *dyg, *dscratch, *dmlp_pre, *dmlp_act;
    size_t acts_floats;
} GPT;

// Build the parameter table and allocate params + grads (initialised from cfg and seed).
void gpt_build(GPT* m, const ModelConfig* cfg, unsigned long long seed);
// (Re)allocate the activation arena for micro-batch B x T (T <= max_seq_len).
void gpt_alloc_acts(GPT* m, int B, int T);
void gpt_free(GPT* m);
// Forward on host tokens idx[B*T]; with targets (host, [B*T]) returns the mean loss, else 0
// and only the logits are computed.
float gpt_forward(GPT* m, const int* idx, const int* targets);
// Backward of the last forward (which must have had targets); accumulates into m->grads.
// dloss = the weight of this micro-batch's mean loss in the objective (1/grad_accum_steps).
void gpt_backward(GPT* m, float dloss);
void gpt_zero_grad(GPT* m);

// Matmul parameters a token passes through (QKV+gate, output, MLP, LM head), for FLOP counts.
double gpt_matmul_params(const ModelConfig* c);
// Training FLOPs per token (DESIGN.md): 6 * matmul params + 6 * n_layer * T * n_head * head_dim.
double gpt_flops_per_token(const ModelConfig* c, int T);
