// model/deltanet.c: the Gated DeltaNet layer (Yang et al. 2024; Qwen3-Next's linear attention),
// the token mixer of a hybrid model's linear layers ([model] layer_pattern), forward and backward
// over kernels/ops.h. It takes the attention's place in a layer: x += GDN(norm1(x)), and the
// MLP or MoE follows as in every layer (model/gpt.c). docs/architecture.md "Hybrid layers".
//
// Shapes: N = B*T tokens; Hk key heads of dk, Hv value heads of dv (value head h reads key
// head h / (Hv/Hk)); Kd = Hk*dk, Vd = Hv*dv, Cc = 2*Kd + Vd the conv's channels; K the conv width.
//   X = norm1(x)                                    [N, d]   (a->ln1, act_t)
//   xqkv = X W_qkv^T;  z = X W_z^T;  ba = X W_ba^T   [N, Cc], [N, Vd], [N, 2Hv]  (fp32 outputs)
//   xc = silu(causal depthwise conv1d(xqkv))        [N, Cc] = [q | k | v]
//   q, k = l2norm per head (eps 1e-6)               [N, 2Kd]
//   beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias)          [N, Hv]
//   o = gated delta rule(q, k, v, g, beta)          [N, Vd]  (chunked in training, [model] linear_chunk)
//   on = rmsnorm(o per head) * norm_w * act(z)      [N, Vd]  (act: [model] linear_gate_act)
//   x += on W_out^T
// Everything between the GEMMs is fp32 on every backend, as the delta rule's state needs (fla
// and transformers keep it in fp32 too); the GEMMs read the act_t copies of their inputs.
#include "gpt.h"

void deltanet_forward(GPT* m, int l, RecomputeKind redo) {
    const ModelConfig* c = &m->cfg;
    const LayerWeights* w = &m->w.layer[l];
    LayerActs* a = &m->layer[l];
    OpsGdnShape s = m->gdn;
    const int B = m->B, T = m->T, N = B * T, d = c->d_model, K = c->linear_conv_kernel;
    const int Kd = s.Hk * s.dk, Vd = s.Hv * s.dv, Cc = 2 * Kd + Vd;
    // recompute = selective keeps everything up to the delta rule's output and recomputes only
    // the gated norm (its output and statistics); the forward pass and full run it all
    const int all = redo != RECOMPUTE_SELECTIVE;

    if (all) {
        // the three projections of X (one for the conv, the output gate, the delta rule's gates)
        ops_matmul_forward_f32(a->g_xqkv, a->ln1, gpt_act_w(m, w->gdn_w_qkv), N, d, Cc, 0);
        ops_matmul_forward_f32(a->g_z, a->ln1, gpt_act_w(m, w->gdn_w_z), N, d, Vd, 0);
        ops_matmul_forward_f32(a->g_ba, a->ln1, gpt_act_w(m, w->gdn_w_ba), N, d, 2 * s.Hv, 0);
        // decoding (m->kv): the conv's last K-1 inputs and the delta rule's state carry over from
        // the sequence's earlier tokens, and the recurrent form runs (kv_cache.h)
        const float *conv_in = NULL, *state_in = NULL;
        float *conv_out = NULL, *state_out = NULL;
        if (m->kv) {
            kv_cache_linear(m->kv, l, &conv_in, &conv_out, &state_in, &state_out);
            s.chunk = 0;
        }
        ops_conv1d_silu_forward(a->g_xc, a->g_pre, conv_out, a->g_xqkv, w->gdn_conv_w, conv_in, B, T, Cc, K);
        ops_l2norm_forward(a->g_qk, a->g_rinv, a->g_xc, N, 2 * s.Hk, s.dk, Cc, 2 * Kd, 1e-6f);
        ops_gdn_gates_forward(a->g_g, a->g_beta, a->g_ba, w->gdn_A_log, w->gdn_dt_bias, N, s.Hv);
        // q, k from the normed [q | k] rows, v from the conv's rows
        s.ld_qk = 2 * Kd;
        s.ld_v = Cc;
        ops_gdn_forward(a->g_o, state_out, a->g_qk, a->g_qk + Kd, a->g_xc + 2 * Kd, a->g_g, a->g_beta, state_in, &s);
    }
    ops_rmsnorm_gated_forward(a->g_on, a->g_rstd, a->g_o, a->g_z, w->gdn_norm_w, N * s.Hv, s.dv, c->norm_eps,
                              (OpsGateAct)c->linear_gate_act);
    ops_act_from_float(a->g_on_act, a->g_on, (size_t)N * Vd);
    if (all) {
        // x_mid = x + on W_out^T
        ops_copy(a->res_mid, a->res_in, (size_t)N * d);
        ops_matmul_forward_f32(a->res_mid, a->g_on_act, gpt_act_w(m, w->gdn_w_out), N, Vd, d, 1);
    }
}

void deltanet_backward(GPT* m, int l) {
    const ModelConfig* c = &m->cfg;
    const LayerWeights* w = &m->w.layer[l];
    LayerWeights* g = &m->g.layer[l];
    const LayerActs* a = &m->layer[l];
    OpsGdnShape s = m->gdn;
    const int B = m->B, T = m->T, N = B * T, d = c->d_model, K = c->linear_conv_kernel;
    const int Kd = s.Hk * s.dk, Vd = s.Hv * s.dv, Cc = 2 * Kd + Vd;
    s.ld_qk = 2 * Kd;
    s.ld_v = Cc;

    // x_mid = x + on W_out^T: d(on) from dL/dx_mid (m->dres)
    ops_act_from_float(m->dres_act, m->dres, (size_t)N * d);
    ops_matmul_backward(m->gd_on_act, g->gdn_w_out, m->dres_act, a->g_on_act, gpt_act_w(m, w->gdn_w_out), N, Vd, d);
    ops_float_from_act(m->gd_on, m->gd_on_act, (size_t)N * Vd);
    // gated norm -> d(o), d(z);  the delta rule -> d(q), d(k) (into gd_qk), d(v) (into gd_xc's v
    // columns), d(g), d(beta);  L2 norm -> gd_xc's q, k columns;  the gates -> d(ba)
    ops_rmsnorm_gated_backward(m->gd_o, m->gd_z, g->gdn_norm_w, m->gd_on, a->g_o, a->g_z, w->gdn_norm_w, a->g_rstd,
                               N * s.Hv, s.dv, (OpsGateAct)c->linear_gate_act);
    ops_gdn_backward(m->gd_qk, m->gd_qk + Kd, m->gd_xc + 2 * Kd, m->gd_g, m->gd_beta, m->gd_o, a->g_qk,
                     a->g_qk + Kd, a->g_xc + 2 * Kd, a->g_g, a->g_beta, &s);
    ops_l2norm_backward(m->gd_xc, m->gd_qk, a->g_xc, a->g_rinv, N, 2 * s.Hk, s.dk, Cc, 2 * Kd);
    ops_gdn_gates_backward(m->gd_ba, g->gdn_A_log, g->gdn_dt_bias, m->gd_g, m->gd_beta, a->g_ba, w->gdn_A_log,
                           w->gdn_dt_bias, N, s.Hv);
    ops_conv1d_silu_backward(m->gd_xqkv, g->gdn_conv_w, m->gd_xc, a->g_xqkv, a->g_pre, w->gdn_conv_w, B, T, Cc, K);
    // the three projections: m->dnorm (=) the sum of their input gradients
    ops_act_from_float(m->gd_xqkv_act, m->gd_xqkv, (size_t)N * Cc);
    ops_matmul_backward(m->dnorm, g->gdn_w_qkv, m->gd_xqkv_act, a->ln1, gpt_act_w(m, w->gdn_w_qkv), N, d, Cc);
    ops_act_from_float(m->gd_z_act, m->gd_z, (size_t)N * Vd);
    ops_matmul_backward(m->gd_tmp, g->gdn_w_z, m->gd_z_act, a->ln1, gpt_act_w(m, w->gdn_w_z), N, d, Vd);
    ops_accumulate(m->dnorm, m->gd_tmp, (size_t)N * d);
    ops_act_from_float(m->gd_ba_act, m->gd_ba, (size_t)N * 2 * s.Hv);
    ops_matmul_backward(m->gd_tmp, g->gdn_w_ba, m->gd_ba_act, a->ln1, gpt_act_w(m, w->gdn_w_ba), N, d, 2 * s.Hv);
    ops_accumulate(m->dnorm, m->gd_tmp, (size_t)N * d);
}
