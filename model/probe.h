// model/probe.h: the stability probe: an instrumented forward pass on a fixed batch that
// measures what the gate is claimed to change (docs/metrics.md): attention sinks (F-Attn),
// massive activations (M-Act) and the gate scores, per layer; and the routing of MoE layers.
#pragma once
#include <stdio.h>
#include "gpt.h"

typedef struct {
    int linear;            // a Gated DeltaNet layer: no F-Attn or gate scores (NaN / 0), the state norm
    float f_attn;          // p(first token), mean over heads, batch and queries 1..T-1
    float f_attn_max_head; // the largest per-head value
    int sink_heads;        // heads whose value exceeds 0.3
    float m_act;           // max |h| of the residual stream after the layer
    int m_act_pos;         // its token position t (0 = the first token)
    float m_act_ratio;     // m_act / median |h| of that stream
    float attn_out_max;    // max |attention output| (the branch added to the residual)
    int attn_out_pos;
    float mlp_out_max;     // max |MLP output|
    int mlp_out_pos;
    float gate_mean;       // mean gate score act(z) (NaN without a gate)
    // attention-logit growth (docs/metrics.md): for each head, the max over the probe batch's
    // (b, t, u <= t) of q_t . k_u / sqrt(hd) (q, k after qk-norm and RoPE: the softmax's input);
    // the layer's max over heads and the mean over heads of those maxima (NaN for linear layers)
    float attn_logit_max;
    float attn_logit_head_mean;
    float gate_hist[10];   // fraction of gate scores in [0,0.1), ..., [0.9,1]
    // Gated DeltaNet layers: the delta rule's state S [dk, dv] after the probe sequence's last
    // token, per (sequence, value head): its Frobenius norm, mean and max over them (NaN for
    // attention layers). q, k are unit vectors and |beta| < 1, so a norm far above sqrt(dv)*|v|
    // means the state is not forgetting (docs/metrics.md).
    float gdn_state_norm;
    float gdn_state_norm_max;
    // MoE layers (n_expert > 0), over the probe batch
    int n_expert;          // 0 for a dense layer
    long* moe_counts;      // [n_expert] token slots routed to each expert (before any capacity)
    float moe_max_load;    // max / mean of moe_counts (1 = balanced)
    float moe_entropy;     // mean router entropy over tokens (nats; log(n_expert) = uniform)
    float moe_aux;         // E * sum_i f_i P_i of the probe batch, without its coefficient
    float moe_z;           // mean logsumexp(router logits)^2, without its coefficient
    long moe_dropped;      // slots dropped by the capacity (0 when dropless)
} ProbeLayer;

typedef struct {
    int step;
    int n_layer;
    int has_gate;
    int has_moe;
    int has_linear;        // any Gated DeltaNet layer (hybrid model)
    float loss;            // the probe batch's loss
    float f_attn_uniform;  // what uniform causal attention would give: mean over q=1..T-1 of 1/(q+1)
    float f_attn_mean;     // mean over (attention) layers (the paper's Table 4 figures)
    float m_act_mean;
    float gate_mean;
    float gdn_state_norm_mean;   // mean over the Gated DeltaNet layers (NaN without)
    float attn_logit_max;  // the largest attention logit over the attention layers (NaN without)
    // output-logit divergence (docs/metrics.md), over the probe batch's N tokens and V columns
    float out_logit_absmax;   // max |logit|
    float out_z;              // mean over tokens of logsumexp(logits)^2 (what a z-loss penalises)
    float ms;              // wall time of the probe (set by the caller; logged)
    ProbeLayer* layer;     // [n_layer]
} ProbeResult;

// Runs the forward pass on idx/targets ([B*T], host; the model's current B, T) and measures.
void probe_run(GPT* m, const int* idx, const int* targets, int step, ProbeResult* r);
// What probe_run allocates per Gated DeltaNet layer of delta-rule shape s (one layer at a time,
// freed after it), bytes asked of ops_malloc: the final states, the recomputed outputs (the
// memory planner, train/plan.h).
void probe_gdn_allocs(const OpsGdnShape* s, size_t req[2]);
void probe_free(ProbeResult* r);
// its log record: train/probe_record.h (model/ computes, train/ writes)
