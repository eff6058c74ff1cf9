// tests/test_probe.c: the stability probe's statistics against direct computations in double:
// F-Attn from the logsumexp vs an explicitly formed attention matrix, gate-score mean and
// histogram, abs-max and median, the spike detector's z-scores; and the probe over a model.
#include <string.h>
#include "test_util.h"
#include "../kernels/ops.h"
#include "../model/gpt.h"
#include "../model/probe.h"
#include "../train/probe_record.h"
#include "../train/spike.h"

static float* fbuf(size_t n, double scale) { float* p = ops_malloc(n * sizeof(float)); tu_fill(p, n, scale); return p; }

static void test_first_token(void) {
    OpsAttnShape s = {0};
    s.B = 2; s.T = 9; s.H = 4; s.Hkv = 2; s.hd = 8; s.gate = OPS_GATE_NONE;
    int N = s.B * s.T, QKVG = ops_attn_qkv_cols(&s);
    float *q = fbuf(N * 32, 1.5), *k = fbuf(N * 16, 1.5), *v = fbuf(N * 16, 1), *y = fbuf(N * 32, 0);
    float *lse = fbuf(N * 4, 0), *qkv = fbuf((size_t)N * QKVG, 0), heads[4];
    ops_attention_forward(y, y, lse, q, k, v, qkv, &s);
    ops_attn_first_token(heads, q, k, lse, &s);
    double worst = 0;
    for (int h = 0; h < 4; h++) {
        double acc = 0;   // explicit softmax row in double, probability of key 0, queries 1..T-1
        for (int b = 0; b < 2; b++)
            for (int t = 1; t < 9; t++) {
                double sc[9], mx = -1e30, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double d = 0;
                    for (int i = 0; i < 8; i++) d += (double)q[((b * 9 + t) * 4 + h) * 8 + i] * k[((b * 9 + u) * 2 + h / 2) * 8 + i];
                    sc[u] = d / sqrt(8.0);
                    if (sc[u] > mx) mx = sc[u];
                }
                for (int u = 0; u <= t; u++) sum += exp(sc[u] - mx);
                acc += exp(sc[0] - mx) / sum;
            }
        double want = acc / 16.0, e = fabs(heads[h] - want) / want;
        if (e > worst) worst = e;
    }
    // derived: scores (|s| <= 6.4) and lse in float32, exp(s - lse): |d(s - lse)| <~ hd u |s| + u lse
    // = 3.3e-6 < 1e-5; measured 1.1e-7 (SSE41), 1.2e-8 (AVX2, AVX)
    TU_CHECK(worst < 1e-5, "F-Attn from lse vs explicit attention: rel err %.2e", worst);
    printf("  F-Attn per head from the logsumexp vs explicit softmax: rel err %.2e\n", worst);
}

// The largest pre-softmax attention logit per head against a direct double loop, over more
// queries than one tile of the CPU kernel (128) so that the tiles and the causal edge inside
// each are covered; a key past the query (u > t) whose logit would be the largest of all must
// not count; a NaN
// in q makes its head's max NaN.
static void test_logit_max(void) {
    OpsAttnShape s = {0};
    s.B = 2; s.T = 300; s.H = 4; s.Hkv = 2; s.hd = 8;
    const int N = s.B * s.T;
    float *q = fbuf((size_t)N * 32, 1.5), *k = fbuf((size_t)N * 16, 1.5), heads[4];
    // a large query (t = 200, head 0) and a large key after it (u = 250, kv head 0) of sequence
    // 0, in different tiles: their product, by far the largest, is masked (u > t)
    for (int i = 0; i < 8; i++) k[((size_t)250 * 2 + 0) * 8 + i] = 50.0f;
    for (int i = 0; i < 8; i++) q[((size_t)200 * 4 + 0) * 8 + i] = 50.0f;
    ops_attn_logit_max(heads, q, k, &s);
    double worst = 0;
    for (int h = 0; h < 4; h++) {
        double want = -1e300;
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < s.T; t++)
                for (int u = 0; u <= t; u++) {
                    double d = 0;
                    for (int i = 0; i < 8; i++) d += (double)q[((b * s.T + t) * 4 + h) * 8 + i] * k[((b * s.T + u) * 2 + h / 2) * 8 + i];
                    if (d / sqrt(8.0) > want) want = d / sqrt(8.0);
                }
        double e = fabs(heads[h] - want) / fabs(want);
        if (e > worst) worst = e;
    }
    // derived: an 8-term fp32 dot product (|terms| <= 2500) and the scale: ~10 u = 1.2e-6 relative
    TU_CHECK(worst < 2e-6, "attention logit max vs a direct double loop: rel err %.2e", worst);
    printf("  attention logit max per head (T = 300, 3 tiles, GQA) vs direct: rel err %.2e (tol 2e-6)\n", worst);
    q[((size_t)(1 * s.T + 5) * 4 + 3) * 8] = NAN;   // head 3
    ops_attn_logit_max(heads, q, k, &s);
    TU_CHECK(isnan(heads[3]) && !isnan(heads[2]), "a NaN logit: its head's max NaN (%g), the others not (%g)", heads[3], heads[2]);
    ops_free(q); ops_free(k);
}

static void test_gate_stats(void) {
    OpsAttnShape s = {0};
    s.B = 1; s.T = 5; s.H = 2; s.Hkv = 1; s.hd = 4; s.gate = OPS_GATE_ELEMENTWISE; s.gate_pos = OPS_GATEPOS_SDPA;
    s.gate_act = OPS_ACT_SIGMOID;
    int N = 5, QKVG = ops_attn_qkv_cols(&s), G = ops_attn_gate_cols(&s);
    float* qkv = fbuf((size_t)N * QKVG, 4);
    double sum; long count, hist[10];
    ops_gate_stats(qkv, &s, &sum, &count, hist);
    double want = 0; long wh[10] = {0};
    for (int n = 0; n < N; n++)
        for (int j = QKVG - G; j < QKVG; j++) {
            double g = 1 / (1 + exp(-(double)qkv[n * QKVG + j]));
            want += g;
            wh[(int)(g * 10) > 9 ? 9 : (int)(g * 10)]++;
        }
    // derived: 40 float32 sigmoids (~3 roundings each) summed in double: 3u x sum (19.4) = 3.5e-6;
    // measured 1.0e-7 on all three ISAs; was 1e-4 (970x), now 2e-5
    TU_CHECK(count == N * G && fabs(sum - want) < 2e-5, "gate sum %g want %g count %ld", sum, want, count);
    TU_CHECK(memcmp(hist, wh, sizeof wh) == 0, "gate histogram differs");
    printf("  gate statistics: sum of %ld scores %.6f, abs err %.2e (tol 2e-5)\n", count, sum, fabs(sum - want));
}

static void test_absmax_median(void) {
    int N = 7, C = 5;
    float* x = fbuf(N * C, 1);
    float* base = fbuf(N * C, 1);
    x[3 * C + 2] = -9.0f;   // the max, at token 3
    float mx; int pos;
    ops_absmax(x, NULL, N, C, &mx, &pos);
    TU_CHECK(mx == 9.0f && pos == 3, "absmax %g at %d", mx, pos);
    ops_absmax(x, base, N, C, &mx, &pos);
    // derived: both sides round the same float subtraction once: exact (1e-6 is ~1 ulp at 8..16)
    TU_CHECK(fabsf(mx - fabsf(-9.0f - base[3 * C + 2])) < 1e-6f && pos == 3, "absmax of a difference");
    printf("  abs-max of a difference: %.9g, err %.2e (tol 1e-6)\n", mx, fabsf(mx - fabsf(-9.0f - base[3 * C + 2])));
    float med = ops_abs_median(x, NULL, N, C);
    int below = 0, above = 0;   // the lower median: 17 values below or equal, 17 above or equal
    for (int i = 0; i < N * C; i++) { if (fabsf(x[i]) < med) below++; if (fabsf(x[i]) > med) above++; }
    TU_CHECK(below == 17 && above == 17, "median %g: %d below, %d above", med, below, above);
}

static void test_spike(void) {
    SpikeWindow w;
    spike_init(&w, 20);
    double mean, sd;
    TU_CHECK(isnan(spike_z(&w, 1.0, &mean, &sd)), "no z-score before 10 values");
    for (int i = 0; i < 20; i++) spike_push(&w, 3.0 + 0.01 * ((i % 5) - 2));   // mean 3, std ~0.0145
    double z = spike_z(&w, 3.5, &mean, &sd);
    double want_sd = sqrt((4 * (0.02 * 0.02 + 0.01 * 0.01) * 2) / 19.0);   // 4 reps of (-2..2)*0.01
    // derived (double, u = 1.1e-16, worst case): the mean within 3.3e-15, so each deviation (0.01..0.02)
    // within 3.5e-15 and std (0.0145) within 1.8e-13 of itself: 2.6e-15, z (34.5) 6.3e-12; measured
    // 0, 5e-17, 1.1e-13 on all three ISAs; std and z were at 1e-9 and 1e-6 (1e7x), now 1e-13, 1e-10
    TU_CHECK(fabs(mean - 3.0) < 1e-12 && fabs(sd - want_sd) < 1e-13, "window mean %g std %g want %g", mean, sd, want_sd);
    TU_CHECK(fabs(z - 0.5 / want_sd) < 1e-10, "z %g", z);
    printf("  spike window: mean err %.2e (tol 1e-12), std err %.2e (tol 1e-13), z err %.2e (tol 1e-10)\n",
           fabs(mean - 3.0), fabs(sd - want_sd), fabs(z - 0.5 / want_sd));
    TU_CHECK(spike_z(&w, 3.01, &mean, &sd) < 1.0, "an ordinary value is not a spike");
    for (int i = 0; i < 25; i++) spike_push(&w, 7.0);   // the ring forgets the old values
    spike_z(&w, 7.0, &mean, &sd);
    TU_CHECK(mean == 7.0 && sd == 0.0, "window keeps the last 20 values");
    spike_free(&w);
}

static void test_probe_model(void) {
    ModelConfig c = {0};
    c.vocab_size = 50; c.padded_vocab = 128; c.n_layer = 2; c.d_model = 16; c.n_head = 4; c.n_kv_head = 2;
    c.head_dim = 4; c.d_ff = 24; c.max_seq_len = 8; c.pos = POS_ROPE; c.rope_base = 10000;
    c.norm = NORM_RMSNORM; c.norm_eps = 1e-5f; c.mlp = MLP_SWIGLU; c.tie_embeddings = 1;
    c.init_std = 0.5f; c.attn_gate = GATE_HEADWISE;
    GPT m;
    gpt_build(&m, &c, 3);
    gpt_alloc_acts(&m, 2, 8);
    int idx[16], tg[16];
    for (int i = 0; i < 16; i++) { idx[i] = (i * 7) % 50; tg[i] = (i * 3 + 1) % 50; }
    ProbeResult r;
    probe_run(&m, idx, tg, 5, &r);
    double want_uniform = 0;
    for (int q = 1; q < 8; q++) want_uniform += 1.0 / (q + 1);
    want_uniform /= 7;
    // derived: a double sum stored as float: one rounding, u x 0.37 = 2.2e-8; measured 7.9e-10 on all
    // three ISAs; was 1e-6, now 1e-7
    TU_CHECK(fabs(r.f_attn_uniform - want_uniform) < 1e-7, "uniform reference %g want %g", r.f_attn_uniform, want_uniform);
    // M-Act of layer 1 equals max |res[2]| by direct scan; the MLP branch max equals |res[2] - res_mid|
    float mx = 0; int pos = 0;
    for (int i = 0; i < 16 * 16; i++) if (fabsf(m.res[2][i]) > mx) { mx = fabsf(m.res[2][i]); pos = (i / 16) % 8; }
    TU_CHECK(r.layer[1].m_act == mx && r.layer[1].m_act_pos == pos, "M-Act %g@%d want %g@%d", r.layer[1].m_act, r.layer[1].m_act_pos, mx, pos);
    double hsum = 0;
    for (int i = 0; i < 10; i++) hsum += r.layer[0].gate_hist[i];
    // derived: 10 float fractions (one rounding each, u of its size) sum to 1 within u = 6e-8;
    // measured 0 on all three ISAs; was 1e-6, now 2e-7
    TU_CHECK(r.has_gate && fabs(hsum - 1.0) < 2e-7 && r.gate_mean > 0 && r.gate_mean < 1, "gate histogram sums to %g, mean %g", hsum, r.gate_mean);
    // derived: with 2 layers, 0 + a/2 + b/2 and 0.5 (a + b) are the same single rounding: exact (1e-6 is
    // ~1 ulp at the M-Act's 11.2)
    TU_CHECK(fabsf(r.m_act_mean - 0.5f * (r.layer[0].m_act + r.layer[1].m_act)) < 1e-6f, "run-level M-Act is the mean over layers");
    printf("  probe: uniform reference err %.2e (tol 1e-7), gate histogram sum - 1 %.2e (tol 2e-7), "
           "M-Act mean %.6g err %.2e (tol 1e-6)\n", fabs(r.f_attn_uniform - want_uniform), fabs(hsum - 1.0), r.m_act_mean,
           fabsf(r.m_act_mean - 0.5f * (r.layer[0].m_act + r.layer[1].m_act)));
    FILE* f = tmpfile();
    probe_write_json(&r, NULL, f);
    rewind(f);
    char line[8192];
    TU_CHECK(fgets(line, sizeof line, f) && strstr(line, "{\"type\":\"probe\",\"step\":5,") && strstr(line, "\"gate_hist\":["),
             "probe JSON: %.200s", line);
    fclose(f);
    probe_free(&r);
    gpt_free(&m);
}

// The probe of an MoE model (layer 1 MoE, layer 0 dense): per-layer routing figures from the
// probe batch, checked against the routing the forward wrote (topk_idx, router_probs).
static void test_probe_moe(void) {
    ModelConfig c = {0};
    c.vocab_size = 50; c.padded_vocab = 128; c.n_layer = 2; c.d_model = 16; c.n_head = 4; c.n_kv_head = 2;
    c.head_dim = 4; c.d_ff = 24; c.max_seq_len = 8; c.pos = POS_ROPE; c.rope_base = 10000;
    c.norm = NORM_RMSNORM; c.norm_eps = 1e-5f; c.mlp = MLP_SWIGLU; c.tie_embeddings = 1;
    c.init_std = 0.5f;
    c.moe.n_expert = 4; c.moe.top_k = 2; c.moe.d_expert = 12; c.moe.moe_every = 2;
    c.moe.aux_loss_coef = 0.01f; c.moe.z_loss_coef = 0.001f; c.moe.capacity_factor = 1.0f;
    GPT m;
    gpt_build(&m, &c, 4);
    gpt_alloc_acts(&m, 2, 8);
    int idx[16], tg[16];
    for (int i = 0; i < 16; i++) { idx[i] = (i * 11) % 50; tg[i] = (i * 3 + 1) % 50; }
    ProbeResult r;
    probe_run(&m, idx, tg, 7, &r);
    TU_CHECK(r.has_moe && r.layer[0].n_expert == 0 && r.layer[1].n_expert == 4, "MoE layers in the probe");
    // tokens per expert = the forward's top-k choices; max/mean load; entropy of router_probs
    long want[4] = {0};
    for (int s = 0; s < 32; s++) want[m.layer[1].topk_idx[s]]++;
    long mx = 0;
    int same = 1;
    for (int i = 0; i < 4; i++) { same &= r.layer[1].moe_counts[i] == want[i]; if (want[i] > mx) mx = want[i]; }
    double ent = 0;
    for (int n = 0; n < 16; n++)
        for (int i = 0; i < 4; i++) { double p = m.layer[1].router_probs[n * 4 + i]; ent -= p * log(p) / 16; }
    TU_CHECK(same, "probe tokens per expert differ from the routing");
    // derived: integer counts / 8 (exact); entropy, aux and z: double sums over the same float
    // probabilities and lse, stored as float: ~u of values ~1 (6e-8); measured max 2.8e-8 (entropy),
    // 5.7e-8 (aux), 1.9e-8 (z, relative) over the three ISAs; were 1e-5 (180x), now 5e-7 (~4 ulps)
    TU_CHECK(fabsf(r.layer[1].moe_max_load - (float)mx / 8.0f) < 1e-6f, "max/mean load %g want %g", r.layer[1].moe_max_load, mx / 8.0);
    TU_CHECK(fabs(r.layer[1].moe_entropy - ent) < 5e-7 && ent <= log(4.0), "entropy %g want %g", r.layer[1].moe_entropy, ent);
    double aux = 0, z = 0;   // E sum_i f_i P_i of the probe batch; mean lse^2
    for (int i = 0; i < 4; i++) {
        double P = 0;
        for (int n = 0; n < 16; n++) P += m.layer[1].router_probs[n * 4 + i] / 16.0;
        aux += 4.0 * (want[i] / 32.0) * P;
    }
    for (int n = 0; n < 16; n++) z += (double)m.layer[1].router_lse[n] * m.layer[1].router_lse[n] / 16.0;
    TU_CHECK(fabs(r.layer[1].moe_aux - aux) < 5e-7 && fabs(r.layer[1].moe_z - z) < 5e-7 * z, "aux %g want %g, z %g want %g",
             r.layer[1].moe_aux, aux, r.layer[1].moe_z, z);
    printf("  probe (MoE): max/mean load err %.2e (tol 1e-6), entropy err %.2e (tol 5e-7), aux err %.2e (tol 5e-7), "
           "z rel err %.2e (tol 5e-7)\n", fabsf(r.layer[1].moe_max_load - (float)mx / 8.0f), fabs(r.layer[1].moe_entropy - ent),
           fabs(r.layer[1].moe_aux - aux), fabs(r.layer[1].moe_z - z) / z);
    long dropped = 0;
    for (int i = 0; i < 4; i++) dropped += want[i] > 8 ? want[i] - 8 : 0;   // capacity ceil(1 * 16 * 2 / 4) = 8
    TU_CHECK(r.layer[1].moe_dropped == dropped, "dropped %ld want %ld", r.layer[1].moe_dropped, dropped);
    FILE* f = tmpfile();
    probe_write_json(&r, NULL, f);
    rewind(f);
    char line[8192];
    TU_CHECK(fgets(line, sizeof line, f) && strstr(line, "{\"layer\":0,") && strstr(line, "\"moe\":null") &&
             strstr(line, "\"moe\":{\"tokens_per_expert\":["), "probe JSON (MoE): %.300s", line);
    printf("  probe (MoE): tokens per expert %ld %ld %ld %ld, max/mean %.2f, entropy %.3f, aux %.3f, dropped %ld\n",
           r.layer[1].moe_counts[0], r.layer[1].moe_counts[1], r.layer[1].moe_counts[2], r.layer[1].moe_counts[3],
           r.layer[1].moe_max_load, r.layer[1].moe_entropy, r.layer[1].moe_aux, r.layer[1].moe_dropped);
    fclose(f);
    probe_free(&r);
    gpt_free(&m);
}

int main(void) {
    ops_init(0);
    test_first_token();
    test_logit_max();
    test_gate_stats();
    test_absmax_median();
    test_spike();
    test_probe_model();
    test_probe_moe();
    return tu_finish();
}
