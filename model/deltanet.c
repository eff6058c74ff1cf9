// model/deltanet.c: the Gated DeltaNet layer (Yang et al. 2024; Qwen3-Next's linear attention),
// the token mixer of a hybrid model's linear layers ([model] layer_pattern), forward and backward
// over kernels/ops.h, on the tensors of a DeltaNetLayerIO (model/deltanet.h). It takes the
// attention's place in a layer: x += GDN(norm1(x)), and the MLP or MoE follows as in every layer
// (model/gpt.c). docs/architecture.md "Hybrid layers".
//
// Shapes (model/deltanet.h): N = B*T tokens; Kd = Hk*dk, Vd = Hv*dv, Cc = 2*Kd + Vd.
//   X = norm1(x)                                    [N, d]   (a->x, act_t)
//   xqkv = X W_qkv^T;  z = X W_z^T;  ba = X W_ba^T   [N, Cc], [N, Vd], [N, 2Hv]  (fp32 outputs)
//   xc = silu(causal depthwise conv1d(xqkv))        [N, Cc] = [q | k | v]
//   q, k = l2norm per head (eps 1e-6)               [N, 2Kd]
//   beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias)          [N, Hv]
//   o = gated delta rule(q, k, v, g, beta)          [N, Vd]  (chunked in training, [model] linear_chunk)
//   on = rmsnorm(o per head) * norm_w * act(z)      [N, Vd]  (act: [model] linear_gate_act)
//   x += on W_out^T
// Everything between the GEMMs is fp32 on every backend, as the delta rule's state needs (fla
// and transformers keep it in fp32 too); the GEMMs read the act_t copies of their inputs.
#include "deltanet.h"

void deltanet_forward(const DeltaNetLayerIO* io, RecomputeKind redo) {
    const DeltaNetWeights* w = &io->w;
    const DeltaNetActs* a = &io->a;
    OpsGdnShape s = io->gdn;
    const int B = io->B, T = io->T, N = B * T, d = io->d, K = io->K;
    const int Kd = s.Hk * s.dk, Vd = s.Hv * s.dv, Cc = 2 * Kd + Vd;
    // recompute = selective keeps everything up to the delta rule's output and recomputes only
    // the gated norm (its output and statistics); the forward pass and full run it all
    const int all = redo != RECOMPUTE_SELECTIVE;

    if (all) {
        // the three projections of X (one for the conv, the output gate, the delta rule's gates)
        ops_matmul_forward_f32(a->xqkv, a->x, w->w_qkv, N, d, Cc, 0);
        ops_matmul_forward_f32(a->z, a->x, w->w_z, N, d, Vd, 0);
        ops_matmul_forward_f32(a->ba, a->x, w->w_ba, N, d, 2 * s.Hv, 0);
        // decoding: the conv's last K-1 inputs and the delta rule's state carry over from the
        // sequence's earlier tokens (io->conv_in, io->state_in), and the recurrent form runs
        if (io->state_out) s.chunk = 0;
        ops_conv1d_silu_forward(a->xc, a->pre, io->conv_out, a->xqkv, w->conv_w, io->conv_in, s.doc_start, B, T, Cc, K);
        ops_l2norm_forward(a->qk, a->rinv, a->xc, N, 2 * s.Hk, s.dk, Cc, 2 * Kd, 1e-6f);
        ops_gdn_gates_forward(a->g, a->beta, a->ba, w->A_log, w->dt_bias, N, s.Hv);
        // q, k from the normed [q | k] rows, v from the conv's rows
        s.ld_qk = 2 * Kd;
        s.ld_v = Cc;
        ops_gdn_forward(a->o, io->state_out, s.chunk > 0 ? a->saved : NULL, a->qk, a->qk + Kd, a->xc + 2 * Kd, a->g, a->beta, io->state_in, &s);
    }
    ops_rmsnorm_gated_forward(a->on, a->rstd, a->o, a->z, w->norm_w, N * s.Hv, s.dv, io->norm_eps, io->gate_act);
    ops_act_from_float(a->on_act, a->on, (size_t)N * Vd);
    if (all) {
        // x_mid = x + on W_out^T
        ops_copy(io->res_mid, io->res_in, (size_t)N * d);
        ops_matmul_forward_f32(io->res_mid, a->on_act, w->w_out, N, Vd, d, 1);
    }
}

void deltanet_backward(const DeltaNetLayerIO* io) {
    const DeltaNetWeights* w = &io->w;
    const DeltaNetGrads* g = &io->g;
    const DeltaNetActs* a = &io->a;
    const DeltaNetBackwardBufs* b = &io->b;
    OpsGdnShape s = io->gdn;
    const int B = io->B, T = io->T, N = B * T, d = io->d, K = io->K;
    const int Kd = s.Hk * s.dk, Vd = s.Hv * s.dv, Cc = 2 * Kd + Vd;
    s.ld_qk = 2 * Kd;
    s.ld_v = Cc;

    // x_mid = x + on W_out^T: d(on) from dL/dx_mid (b->dout)
    ops_act_from_float(b->dout_act, b->dout, (size_t)N * d);
    ops_matmul_backward(b->d_on_act, g->w_out, b->dout_act, a->on_act, w->w_out, N, Vd, d);
    ops_float_from_act(b->d_on, b->d_on_act, (size_t)N * Vd);
    // gated norm -> d(o), d(z);  the delta rule -> d(q), d(k) (into d_qk), d(v) (into d_xc's v
    // columns), d(g), d(beta);  L2 norm -> d_xc's q, k columns;  the gates -> d(ba)
    ops_rmsnorm_gated_backward(b->d_o, b->d_z, g->norm_w, b->d_on, a->o, a->z, w->norm_w, a->rstd, N * s.Hv, s.dv,
                               io->gate_act);
    ops_gdn_backward(b->d_qk, b->d_qk + Kd, b->d_xc + 2 * Kd, b->d_g, b->d_beta, b->d_o, a->qk, a->qk + Kd,
                     a->xc + 2 * Kd, a->g, a->beta, a->saved, &s);
    ops_l2norm_backward(b->d_xc, b->d_qk, a->xc, a->rinv, N, 2 * s.Hk, s.dk, Cc, 2 * Kd);
    ops_gdn_gates_backward(b->d_ba, g->A_log, g->dt_bias, b->d_g, b->d_beta, a->ba, w->A_log, w->dt_bias, N, s.Hv);
    ops_conv1d_silu_backward(b->d_xqkv, g->conv_w, b->d_xc, a->xqkv, a->pre, w->conv_w, s.doc_start, B, T, Cc, K);
    // the three projections: b->dx (=) the sum of their input gradients
    ops_act_from_float(b->d_xqkv_act, b->d_xqkv, (size_t)N * Cc);
    ops_matmul_backward(b->dx, g->w_qkv, b->d_xqkv_act, a->x, w->w_qkv, N, d, Cc);
    ops_act_from_float(b->d_z_act, b->d_z, (size_t)N * Vd);
    ops_matmul_backward(b->d_tmp, g->w_z, b->d_z_act, a->x, w->w_z, N, d, Vd);
    ops_accumulate(b->dx, b->d_tmp, (size_t)N * d);
    ops_act_from_float(b->d_ba_act, b->d_ba, (size_t)N * 2 * s.Hv);
    ops_matmul_backward(b->d_tmp, g->w_ba, b->d_ba_act, a->x, w->w_ba, N, d, 2 * s.Hv);
    ops_accumulate(b->dx, b->d_tmp, (size_t)N * d);
}
