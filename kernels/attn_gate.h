// kernels/attn_gate.h: the gated attention's semantics, once, for every backend (the CPU kernels
// in C, the CUDA kernels on host and device, the CUDA emulator's g++ build of them): the column
// layout of the fused projection, which gate applies where, the index of a channel's gate
// logit, and the gate activation. docs/architecture.md describes the layout; DESIGN.md
// "Gated attention" the variants.
//
// Fused projection row of token n, qkv[n, QKVG]:
//   [ q (H*hd) | k (Hkv*hd) | v (Hkv*hd) | z (G) ]       columns attn_q_off, _k_off, _v_off, _z_off
// G = attn_gate_cols: 0 without a gate; one logit per head (headwise) or per head and channel
// (elementwise), over the H query heads for the sdpa gate (G1) or the Hkv value heads for the
// value gate (G2).
//
// The functions take the fields (gate, gate_pos, H, Hkv, hd) rather than a struct so that
// OpsAttnShape (ops_types.h) and the CUDA kernels' AttnDims (kernels/cuda/attention.h) share them.
#pragma once
#include "ops_types.h"   // the enums, OpsAttnShape, GG_HD

// ---- which gate applies where -------------------------------------------------------------
// the output gate of SDPA (G1): yg = y * act(z), per query head
static inline GG_HD int attn_gate_at_sdpa(int gate, int gate_pos) {
    return gate != OPS_GATE_NONE && gate_pos == OPS_GATEPOS_SDPA;
}
// the value gate (G2): v' = v * act(z), per kv head, in the prep op
static inline GG_HD int attn_gate_at_value(int gate, int gate_pos) {
    return gate != OPS_GATE_NONE && gate_pos == OPS_GATEPOS_VALUE;
}

// ---- column layout of the fused projection ------------------------------------------------
static inline GG_HD int attn_q_off(void) { return 0; }
static inline GG_HD int attn_k_off(int H, int hd) { return H * hd; }
static inline GG_HD int attn_v_off(int H, int Hkv, int hd) { return (H + Hkv) * hd; }
static inline GG_HD int attn_z_off(int H, int Hkv, int hd) { return (H + 2 * Hkv) * hd; }
// G: the number of gate columns
static inline GG_HD int attn_gate_cols(int gate, int gate_pos, int H, int Hkv, int hd) {
    if (gate == OPS_GATE_NONE) return 0;
    int heads = (gate_pos == OPS_GATEPOS_SDPA) ? H : Hkv;
    return gate == OPS_GATE_ELEMENTWISE ? heads * hd : heads;
}
// QKVG: the width of the fused row
static inline GG_HD int attn_qkv_cols(int gate, int gate_pos, int H, int Hkv, int hd) {
    return attn_z_off(H, Hkv, hd) + attn_gate_cols(gate, gate_pos, H, Hkv, hd);
}
// the gate logit of channel i (< hd) of head `head` (a query head for the sdpa gate, a kv head
// for the value gate), relative to the z columns: one per channel, or one per head
static inline GG_HD int attn_gate_logit(int gate, int head, int i, int hd) {
    return gate == OPS_GATE_ELEMENTWISE ? head * hd + i : head;
}

// The same for an OpsAttnShape (host code)
static inline int attn_shape_gate_cols(const OpsAttnShape* s) {
    return attn_gate_cols(s->gate, s->gate_pos, s->H, s->Hkv, s->hd);
}
static inline int attn_shape_qkv_cols(const OpsAttnShape* s) {
    return attn_qkv_cols(s->gate, s->gate_pos, s->H, s->Hkv, s->hd);
}
static inline int attn_shape_z_off(const OpsAttnShape* s) { return attn_z_off(s->H, s->Hkv, s->hd); }

// ---- the activation a(z) and its derivative a'(z) -------------------------------------------
// sg = sigmoid(z), computed by the caller with its backend's primitive (cpu_sigmoid on the CPU,
// cuda_sigmoid on the GPU), so that each backend keeps its own exp; the rest is shared.
//   sigmoid: a = sg                 a' = sg (1 - sg)
//   ns_sigmoid: a = 0.5 + 0.5 sg    a' = 0.5 sg (1 - sg)
//   silu: a = z sg                  a' = sg + z sg (1 - sg)
static inline GG_HD float attn_gate_act_sg(int act, float z, float sg) {
    if (act == OPS_ACT_NS_SIGMOID) return 0.5f + 0.5f * sg;
    if (act == OPS_ACT_SILU) return z * sg;
    return sg;
}
static inline GG_HD float attn_gate_act_grad_sg(int act, float z, float sg) {
    if (act == OPS_ACT_NS_SIGMOID) return 0.5f * sg * (1.0f - sg);
    if (act == OPS_ACT_SILU) return sg + z * sg * (1.0f - sg);
    return sg * (1.0f - sg);
}
