// kernels/rope.h: rotary position embedding (RoPE) and its scalings, once for every backend:
// the CPU kernels and the CUDA backend's host code build their cos/sin tables with these.
//
// Partial RoPE ([model] rope_fraction; transformers' partial_rotary_factor): only the first
// rot = rope_rot_dim(s) channels of each head turn; channels rot .. hd-1 pass through unchanged.
// rot = hd is the usual full RoPE. Every formula below is over rot, not hd, as transformers'
// rope utilities compute theirs over dim = int(head_dim * partial_rotary_factor).
//
// Pair i (< rot/2, rotate_half convention within the rotated channels: channels i and i + rot/2)
// of a token at position p is rotated by the angle p * theta_i, theta_i = base^(-2i/rot),
// wavelength lambda_i = 2 pi / theta_i.
// Scalings for a context s = L_new / L_train times longer than training (OpsRope), matching
// Hugging Face transformers' rope utilities (modeling_rope_utils.py), which users compare with:
//   linear  theta_i / s                                  (position interpolation, Chen et al. 2023)
//   ntk     base' = base * s^(rot / (rot - 2))           (NTK-aware; transformers' "dynamic"
//           recomputes base' from the current length; ours is the static form at factor s. At
//           rot = 2 the one pair has theta_0 = 1 whatever the base: the identity)
//   yarn    per pair, a ramp over the pair index between the two correction dims
//             low  = floor(dim(beta_fast)),  high = ceil(dim(beta_slow)),
//             dim(r) = rot * ln(L_train / (2 pi r)) / (2 ln base)   (the pair whose wavelength
//             fits r times into L_train); low raised to 0 at least, high lowered to rot - 1 at
//             most (one-sided, as transformers does; high == low gets high += 0.001);
//           ramp_i = clamp((i - low) / (high - low), 0, 1);  theta_i' = theta_i * (1 - ramp_i) +
//           (theta_i / s) * ramp_i: high-frequency pairs keep theta_i, low-frequency pairs are
//           interpolated; and cos, sin multiplied by the attention factor m = 0.1 ln(s) + 1
//           (so the attention logits by m^2; the pass-through channels' share of a logit is not
//           scaled, as in transformers, which multiplies only cos and sin).
// Angles and tables are computed in double and rounded to fp32 once.
#pragma once
#include <math.h>
#include "ops_types.h"

// the rotated channels of each head: the first rope_dim (0 = all hd)
static inline GG_HD int rope_rot_dim(const OpsAttnShape* s) { return s->rope_dim > 0 ? s->rope_dim : s->hd; }

// YaRN's correction dim: the (fractional) pair index whose wavelength fits `rotations` times
// into orig_len, for rot rotated channels
static inline double rope_yarn_dim(double rotations, int rot, double base, int orig_len) {
    return (rot * log((double)orig_len / (rotations * 2.0 * 3.14159265358979323846))) / (2.0 * log(base));
}

// the factor cos and sin are multiplied by (1 except for YaRN)
static inline double rope_attn_factor(const OpsAttnShape* s) {
    const OpsRope* r = &s->rope_scale;
    if (r->kind != OPS_ROPE_YARN) return 1.0;
    if (r->attn_factor > 0.0f) return r->attn_factor;
    return r->factor <= 1.0f ? 1.0 : 0.1 * log((double)r->factor) + 1.0;
}

// theta_i of pair i < rot/2 under s's base and scaling
static inline double rope_theta(const OpsAttnShape* s, int i) {
    const OpsRope* r = &s->rope_scale;
    const int rot = rope_rot_dim(s);
    double base = s->rope_base, f = r->factor > 0.0f ? r->factor : 1.0;
    if (r->kind == OPS_ROPE_NTK && rot > 2) base *= pow(f, (double)rot / (rot - 2));
    double theta = pow(base, -2.0 * i / rot);
    if (r->kind == OPS_ROPE_LINEAR) return theta / f;
    if (r->kind == OPS_ROPE_YARN) {
        double lo = floor(rope_yarn_dim(r->beta_fast, rot, base, r->orig_len));
        double hi = ceil(rope_yarn_dim(r->beta_slow, rot, base, r->orig_len));
        if (lo < 0.0) lo = 0.0;
        if (hi > rot - 1) hi = rot - 1;
        if (hi == lo) hi += 0.001;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        return theta * (1.0 - ramp) + theta / f * ramp;
    }
    return theta;
}

// cos/sin tables for n_rows positions pos0 .. pos0 + n_rows - 1: row r, pair i < rot/2 at
// cs[r * cs_stride + i], sn[r * cs_stride + i] (cs_stride >= rot/2 lets a caller interleave them),
// both multiplied by rope_attn_factor.
static inline void rope_table_rows(float* cs, float* sn, int cs_stride, int n_rows, int pos0,
                                   const OpsAttnShape* s) {
    const int half = rope_rot_dim(s) / 2;
    const double m = rope_attn_factor(s);
    for (int i = 0; i < half; i++) {
        const double theta = rope_theta(s, i);
        for (int r = 0; r < n_rows; r++) {
            double ang = (double)(pos0 + r) * theta;
            cs[(size_t)r * cs_stride + i] = (float)(m * cos(ang));
            sn[(size_t)r * cs_stride + i] = (float)(m * sin(ang));
        }
    }
}
