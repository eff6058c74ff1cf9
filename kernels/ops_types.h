// kernels/ops_types.h: the types of the op interface (kernels/ops.h), apart from the op
// declarations, so that a header generated from ops.h (the CPU ops under other names, for the
// GPU tests and the bf16 emulation) can share them.
#pragma once
#include <stddef.h>
#include "bf16.h"

// GG_HD: a function for host and device under nvcc (kernels/attn_gate.h, moe_router.h, adamw.h:
// one definition shared by the CPU and CUDA backends); plain C/C++ elsewhere (the CUDA emulator
// compiles the .cu files with g++, where they are host functions).
#ifndef GG_HD
#if defined(__CUDACC__)
#define GG_HD __host__ __device__
#else
#define GG_HD
#endif
#endif

// ---------------------------------------------------------------------------------------------
// act_t: the storage type of activations and of the gradients that flow between ops.
// - float (the default): the CPU backend and the fp32 CUDA build.
// - bf16 (GATEDGPT_ACT_BF16): the CUDA bf16 build, and the CPU's emulation of it (every op reads
//   bf16, computes in fp32, rounds its outputs to nearest even), which tests the model's bf16
//   plumbing without a GPU. docs/gpu.md says which tensors are act_t and which stay fp32:
//   master weights, weight gradients, AdamW state, the residual stream and its gradient, norm
//   and softmax statistics, the router, losses.
// A build compiles model/ and train/ once for its act_t; ops.h is the same text for both.
#ifdef GATEDGPT_ACT_BF16
typedef uint16_t act_t;          // bf16 bits (kernels/bf16.h)
#define OPS_ACT_NAME "bf16"
static inline float act_to_f32(act_t x) { return bf16_to_f32(x); }
static inline act_t act_from_f32(float x) { return bf16_from_f32(x); }
#else
typedef float act_t;
#define OPS_ACT_NAME "fp32"
static inline float act_to_f32(act_t x) { return x; }
static inline act_t act_from_f32(float x) { return x; }
#endif
#define OPS_ACT_IS_FLOAT (sizeof(act_t) == sizeof(float))

typedef enum { OPS_RMSNORM = 0, OPS_LAYERNORM = 1 } OpsNormKind;

typedef enum { OPS_GATE_NONE = 0, OPS_GATE_ELEMENTWISE = 1, OPS_GATE_HEADWISE = 2 } OpsGate;
typedef enum { OPS_GATEPOS_SDPA = 0, OPS_GATEPOS_VALUE = 1 } OpsGatePos;
typedef enum { OPS_ACT_SIGMOID = 0, OPS_ACT_NS_SIGMOID = 1, OPS_ACT_SILU = 2 } OpsGateAct;
// which attention kernel: the backend's own fp32 one (every backend), cuDNN's fused SDPA or the
// backend's bf16 tensor-core flash kernel (CUDA only; both compute in bf16). The CPU backend
// has one implementation and ignores this.
typedef enum { OPS_ATTN_FUSED = 0, OPS_ATTN_CUDNN = 1, OPS_ATTN_FLASH = 2 } OpsAttnImpl;
// RoPE scaling for contexts longer than training (kernels/rope.h has the math, once for every
// backend; docs/config.md the keys): none, linear position interpolation, NTK-aware base
// scaling, YaRN.
typedef enum { OPS_ROPE_NONE = 0, OPS_ROPE_LINEAR = 1, OPS_ROPE_NTK = 2, OPS_ROPE_YARN = 3 } OpsRopeScaling;
typedef struct {
    OpsRopeScaling kind;
    float factor;        // s = L_new / L_train (>= 1); none ignores it
    int orig_len;        // L_train: YaRN's ramp is over r_i = orig_len / wavelength_i
    float beta_fast;     // YaRN: pairs with r_i > beta_fast keep their frequency (default 32)
    float beta_slow;     // YaRN: pairs with r_i < beta_slow are interpolated by s (default 1)
    float attn_factor;   // YaRN: cos and sin are multiplied by it (logits by its square);
                         // 0 = transformers' default 0.1 ln(s) + 1
} OpsRope;
typedef struct {
    int B, T;
    int H, Hkv, hd;      // query heads, key/value heads, head dim
    int qk_norm;         // RMSNorm over hd on q and k (weights [hd])
    int rope;            // rotate q, k (rotate_half convention) with base rope_base
    int rope_dim;        // partial RoPE: only the first rope_dim channels of each head turn
                         // (pairs i, i + rope_dim/2; the rest pass through); 0 = hd (every
                         // channel). Even. kernels/rope.h rope_rot_dim reads it.
    float rope_base;
    OpsRope rope_scale;  // RoPE scaling (OPS_ROPE_NONE in the default config)
    int pos0;            // the position of token t = 0 of every sequence: RoPE angles (and the
                         // KV cache's causal offset) use pos0 + t. 0 in training; KV-cache
                         // decoding sets it to the number of tokens already cached.
    float eps;           // qk-norm epsilon
    OpsGate gate;
    OpsGatePos gate_pos;
    OpsGateAct gate_act;
    OpsAttnImpl impl;
    // Attention within documents ([data] doc_mask, docs/architecture.md): doc_start[B*T] (int,
    // backend memory) gives for token n = b*T + t the index within its sequence of its
    // document's first token; the token attends to keys doc_start[n] .. t only (non-decreasing in
    // t, doc_start[n] <= t). NULL = plain causal (keys 0 .. t): the default, the same bits as
    // before. Set for the uncached forward and its backward only (never with a KV cache).
    const int* doc_start;
    int doc_rope;        // with doc_start: RoPE positions restart at each document, token t of a
                         // sequence at position pos0 + t - doc_start[n] ([data] doc_positions)
} OpsAttnShape;

typedef enum { OPS_ROUTER_SOFTMAX = 0, OPS_ROUTER_SIGMOID = 1 } OpsRouter;

// The gated delta rule of a Gated DeltaNet layer (Qwen3-Next's linear attention; issue #22):
// B sequences of T tokens, Hk query/key heads of dk channels, Hv value heads of dv channels
// (Hv a multiple of Hk: value head h reads key head h / (Hv / Hk)).
typedef struct {
    int B, T;
    int Hk, Hv, dk, dv;
    int chunk;           // forward: 0 = the recurrent form token by token; C > 0 = the chunked
                         // form (WY/UT transform within chunks of C tokens, the recurrence across)
    int ld_qk, ld_v;     // row strides (floats between tokens) of q, k (and dq, dk) and of v (and
                         // dv); 0 = dense (Hk*dk, Hv*dv). The layer reads v from the conv output.
    // Documents within the sequences ([data] doc_mask; model/doc_mask.h): NULL, or doc_start[n]
    // [B*T] (backend memory) the index within its sequence of token n's document's first token.
    // The state is reset to zeros at the first token of each document after the first (no token
    // reads an earlier document's writes), as if each document were a sequence of its own; the
    // sequence's first document starts from state_in as without documents, and state_out is the
    // last document's state.
    const int* doc_start;
} OpsGdnShape;

// One training step's shape, for the backends' scratch (kernels/scratch.h: ops_scratch_bytes,
// ops_scratch_reserve) and the memory planner (train/plan.h). model/gpt.h fills it from the
// config (gpt_step_shape).
typedef struct {
    int B, T;            // the micro-batch: B sequences of T tokens
    int d_model;
    int n_attn, n_linear, n_moe;   // attention, Gated DeltaNet and MoE layers
    OpsAttnShape attn;   // the attention layers' shape (when n_attn > 0)
    OpsGdnShape gdn;     // the Gated DeltaNet layers' (when n_linear > 0)
    int conv_kernel;     // the Gated DeltaNet's causal conv width
    int n_expert;        // experts of an MoE layer
    size_t n_params;     // floats of the parameter arena (the gradient norm's chunks)
    int threads;         // CPU: the OpenMP threads of the run
} OpsStepShape;
