// model/probe.h: the stability probe: an instrumented forward pass on a fixed batch that
// measures what the gate is claimed to change (docs/metrics.md): attention sinks (F-Attn),
// massive activations (M-Act) and the gate scores, per layer.
#pragma once
#include <stdio.h>
#include "gpt.h"

typedef struct {
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
    float gate_hist[10];   // fraction of gate scores in [0,0.1), ..., [0.9,1]
} ProbeLayer;

typedef struct {
    int step;
    int n_layer;
    int has_gate;
    float loss;            // the probe batch's loss
    float f_attn_uniform;  // what uniform causal attention would give: mean over q=1..T-1 of 1/(q+1)
    float f_attn_mean;     // mean over layers (the paper's Table 4 figures)
    float m_act_mean;
    float gate_mean;
    float ms;              // wall time of the probe (set by the caller; logged)
    ProbeLayer* layer;     // [n_layer]
} ProbeResult;

// Runs the forward pass on idx/targets ([B*T], host; the model's current B, T) and measures.
void probe_run(GPT* m, const int* idx, const int* targets, int step, ProbeResult* r);
void probe_free(ProbeResult* r);
// One JSON line: {"type":"probe", ...} (schema in docs/metrics.md)
void probe_write_json(const ProbeResult* r, FILE* f);
