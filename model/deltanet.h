// model/deltanet.h: the Gated DeltaNet layer (Yang et al. 2024; Qwen3-Next's linear attention),
// the token mixer of a hybrid model's linear layers ([model] layer_pattern), written once over
// kernels/ops.h. The layer sees only what its model hands it in a DeltaNetLayerIO (model/gpt.c
// fills one per call from the GPT's tensors, as it does MoeLayerIO for model/moe.c); it knows
// nothing else of the model. docs/architecture.md "Hybrid layers".
//
// Shapes: N = B*T tokens, d = d_model; Hk key heads of dk, Hv value heads of dv (value head h
// reads key head h / (Hv/Hk)); Kd = Hk*dk, Vd = Hv*dv, Cc = 2*Kd + Vd the conv's channels; K the
// conv width.
#pragma once
#include "config.h"          // RecomputeKind
#include "../kernels/ops.h"

typedef struct {   // the layer's weights: the act_t compute copies the GEMMs read, the rest fp32
    const act_t* w_qkv;      // [Cc, d]   rows [q (Kd) | k (Kd) | v (Vd)]
    const act_t* w_z;        // [Vd, d]   the output gate's logits
    const act_t* w_ba;       // [2Hv, d]  rows [b | a]
    const act_t* w_out;      // [d, Vd]
    const float* conv_w;     // [Cc, K]   causal depthwise conv
    const float* A_log;      // [Hv]
    const float* dt_bias;    // [Hv]
    const float* norm_w;     // [dv]      gated RMSNorm's weight (shared by the heads)
} DeltaNetWeights;
typedef struct {   // the fp32 parameter gradients of the same tensors (+= by the backward)
    float *w_qkv, *w_z, *w_ba, *w_out, *conv_w, *A_log, *dt_bias, *norm_w;
} DeltaNetGrads;
typedef struct {   // the layer's activations, written by the forward and kept for the backward (fp32)
    const act_t* x;          // [N, d]   the normed input X (read only)
    float* xqkv;             // [N, Cc]  X W_qkv^T: the conv's input
    float* pre;              // [N, Cc]  the conv's output before SiLU
    float* xc;               // [N, Cc]  after SiLU: [q | k | v] (v read from here, row stride Cc)
    float* qk;               // [N, 2Kd] [q | k] L2-normalised per head
    float* rinv;             // [N, 2Hk] their 1/norms
    float* z;                // [N, Vd]  the output gate's logits
    float* ba;               // [N, 2Hv] [b | a]
    float* g;                // [N, Hv]  log decay g = -exp(A_log) softplus(a + dt_bias)
    float* beta;             // [N, Hv]  sigmoid(b)
    float* o;                // [N, Vd]  the delta rule's output
    float* saved;            // what the delta rule keeps for its backward (ops_gdn_forward's saved:
                             //          Vn and the chunk-start states; NULL when the backend keeps nothing)
    float* rstd;             // [N, Hv]  the gated norm's statistics
    float* on;               // [N, Vd]  rmsnorm(o) w act(z): the output projection's input
    act_t* on_act;           // [N, Vd]  its act_t copy (on itself when act_t is fp32)
} DeltaNetActs;
typedef struct {   // the backward's input, output and scratch (the scratch is shared by the layers)
    const float* dout;       // [N, d]   dL/d(layer output), fp32
    act_t* dout_act;         // [N, d]   its act_t copy, written here (dout itself when act_t is fp32)
    act_t* dx;               // [N, d]   (=) dL/dX
    // fp32 gradients of the activations above, with act_t copies where a GEMM reads them (the
    // tensors themselves when act_t is fp32); d_tmp [N, d] takes one projection's share of dX
    float *d_on, *d_o, *d_z, *d_qk, *d_xc, *d_xqkv, *d_g, *d_beta, *d_ba;
    act_t *d_on_act, *d_z_act, *d_xqkv_act, *d_ba_act, *d_tmp;
} DeltaNetBackwardBufs;
typedef struct {
    int B, T, d, K;          // sequences, tokens each, d_model, the conv's width
    float norm_eps;          // the gated RMSNorm's epsilon ([model] norm_eps)
    OpsGateAct gate_act;     // its output gate's activation ([model] linear_gate_act)
    OpsGdnShape gdn;         // the delta rule's shape (chunk: [model] linear_chunk)
    DeltaNetWeights w;
    DeltaNetGrads g;         // the backward only
    DeltaNetActs a;
    DeltaNetBackwardBufs b;  // the backward only
    const float* res_in;     // [N, d]   the residual stream entering the layer
    float* res_mid;          // [N, d]   (=) res_in + the layer's output
    // Decoding with a KV cache (model/kv_cache.h), NULL otherwise: the conv's last K-1 inputs
    // [B, Cc, K-1] and the delta rule's state [B, Hv, dk, dv] before these tokens (NULL: the
    // sequence starts here, zeros), and where the forward writes them after. With state_out set
    // the delta rule runs in its recurrent form (chunk 0).
    const float *conv_in, *state_in;
    float *conv_out, *state_out;
} DeltaNetLayerIO;

// Forward of one layer: res_mid (=) res_in + GDN(X), and every tensor of io->a.
// redo = RECOMPUTE_SELECTIVE / RECOMPUTE_FULL ([train] recompute, model/gpt.c): the backward's
// recomputation of what that mode does not keep, with the same ops on the same inputs: the same
// bits. Selective keeps everything up to the delta rule's output and recomputes only the gated
// norm (on, rstd, on_act); full runs it all, as the forward pass does.
void deltanet_forward(const DeltaNetLayerIO* io, RecomputeKind redo);
// Backward of the layer's last forward, from dL/d res_mid = io->b.dout: io->b.dx (=) dL/dX and
// the layer's parameter gradients io->g (+=).
void deltanet_backward(const DeltaNetLayerIO* io);
