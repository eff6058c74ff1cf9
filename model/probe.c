// model/probe.c: the stability probe over the model's saved activations (kernels/ops.h only).
#include "probe.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SINK_THRESHOLD 0.3f

void probe_gdn_allocs(const OpsGdnShape* s, size_t req[2]) {
    req[0] = (size_t)s->B * s->Hv * s->dk * s->dv * sizeof(float);   // the final states
    req[1] = (size_t)s->B * s->T * s->Hv * s->dv * sizeof(float);    // the outputs (discarded)
}

// The delta rule's final state of linear layer l over the probe batch, recomputed from the
// forward's saved q, k, v, g, beta (the training forward keeps no state): the mean and the max
// over (sequence, value head) of ||S||_F.
static void probe_gdn_state(GPT* m, int l, float* mean, float* max) {
    const LayerActs* a = &m->layer[l];
    OpsGdnShape s = m->gdn;
    const int Kd = s.Hk * s.dk, Cc = 2 * Kd + s.Hv * s.dv;
    const size_t SS = (size_t)s.dk * s.dv, n = (size_t)s.B * s.Hv * SS;
    s.ld_qk = 2 * Kd;
    s.ld_v = Cc;
    size_t req[2];
    probe_gdn_allocs(&s, req);
    float* state = ops_malloc(req[0]);
    float* o = ops_malloc(req[1]);
    ops_gdn_forward(o, state, NULL, a->g_qk, a->g_qk + Kd, a->g_xc + 2 * Kd, a->g_g, a->g_beta, NULL, &s);
    float* host = malloc(n * sizeof(float));
    ops_to_host(host, state, n * sizeof(float));
    double sum = 0.0, mx = 0.0;
    for (size_t i = 0; i < (size_t)s.B * s.Hv; i++) {
        double ss = 0.0;
        for (size_t j = 0; j < SS; j++) ss += (double)host[i * SS + j] * host[i * SS + j];
        sum += sqrt(ss);
        if (sqrt(ss) > mx) mx = sqrt(ss);
    }
    *mean = (float)(sum / ((size_t)s.B * s.Hv));
    *max = (float)mx;
    free(host);
    ops_free(state);
    ops_free(o);
}

void probe_run(GPT* m, const int* idx, const int* targets, int step, ProbeResult* r) {
    const ModelConfig* c = &m->cfg;
    const int N = m->B * m->T, d = c->d_model, H = c->n_head, T = m->T;
    memset(r, 0, sizeof(*r));
    r->step = step;
    r->n_layer = c->n_layer;
    r->has_gate = c->attn_gate != GATE_NONE;
    r->layer = calloc((size_t)c->n_layer, sizeof(ProbeLayer));
    r->loss = gpt_forward(m, idx, targets);
    // output logits [N, Vp] (the first V columns) and their row logsumexp [N], from the forward
    r->out_logit_absmax = ops_logits_absmax(m->logits, N, c->vocab_size, c->padded_vocab);
    float* lse = malloc((size_t)N * sizeof(float));
    ops_to_host(lse, m->lse, (size_t)N * sizeof(float));
    double zsum = 0.0;
    for (int n = 0; n < N; n++) zsum += (double)lse[n] * lse[n];
    r->out_z = (float)(zsum / N);
    free(lse);
    r->attn_logit_max = NAN;
    double uni = 0.0;
    for (int q = 1; q < T; q++) uni += 1.0 / (q + 1);
    r->f_attn_uniform = T > 1 ? (float)(uni / (T - 1)) : 1.0f;
    float* heads = malloc((size_t)H * sizeof(float));   // per-head F-Attn, then per-head logit max
    double gsum_all = 0.0, state_sum = 0.0;
    long gcount_all = 0;
    int n_attn = 0, n_linear = 0;
    for (int l = 0; l < c->n_layer; l++) {
        gpt_layer_recompute(m, l);   // [train] recompute: the layer's tensors back from the shared set
        LayerActs* a = &m->layer[l];
        ProbeLayer* p = &r->layer[l];
        p->linear = config_layer_is_linear(c, l);
        p->f_attn = p->f_attn_max_head = p->gdn_state_norm = p->gdn_state_norm_max = NAN;
        p->attn_logit_max = p->attn_logit_head_mean = NAN;
        if (p->linear) {
            probe_gdn_state(m, l, &p->gdn_state_norm, &p->gdn_state_norm_max);
            state_sum += p->gdn_state_norm;
            n_linear++;
        } else {
            // F-Attn from the saved logsumexp: no attention matrix is formed
            ops_attn_first_token(heads, a->q, a->k, a->lse, &m->attn);
            double sum = 0.0;
            p->f_attn_max_head = 0.0f;
            for (int h = 0; h < H; h++) {
                sum += heads[h];
                if (heads[h] > p->f_attn_max_head) p->f_attn_max_head = heads[h];
                if (heads[h] > SINK_THRESHOLD) p->sink_heads++;
            }
            p->f_attn = (float)(sum / H);
            r->f_attn_mean += p->f_attn;
            n_attn++;
            // attention-logit growth: per-head maxima of the pre-softmax logits
            ops_attn_logit_max(heads, a->q, a->k, &m->attn);
            double lsum = 0.0;
            float lmax = heads[0];
            for (int h = 0; h < H; h++) {
                lsum += heads[h];
                if (heads[h] > lmax || heads[h] != heads[h]) lmax = heads[h];   // NaN wins (ops.h)
            }
            p->attn_logit_max = lmax;
            p->attn_logit_head_mean = (float)(lsum / H);
            if (n_attn == 1 || lmax > r->attn_logit_max || lmax != lmax) r->attn_logit_max = lmax;
        }
        // M-Act: the residual after the layer, and each branch's output (difference of the
        // residual streams around it)
        const float* out = m->res[l + 1];
        ops_absmax(out, NULL, N, d, &p->m_act, &p->m_act_pos);
        float med = ops_abs_median(out, NULL, N, d);
        p->m_act_ratio = med > 0.0f ? p->m_act / med : INFINITY;
        ops_absmax(a->res_mid, a->res_in, N, d, &p->attn_out_max, &p->attn_out_pos);
        ops_absmax(out, a->res_mid, N, d, &p->mlp_out_max, &p->mlp_out_pos);
        p->m_act_pos %= T; p->attn_out_pos %= T; p->mlp_out_pos %= T;
        // gate scores
        p->gate_mean = NAN;
        if (r->has_gate && !p->linear) {
            double gsum;
            long gcount, hist[10];
            ops_gate_stats(a->qkv, &m->attn, &gsum, &gcount, hist);
            p->gate_mean = gcount ? (float)(gsum / gcount) : NAN;
            for (int i = 0; i < 10; i++) p->gate_hist[i] = gcount ? (float)hist[i] / gcount : 0.0f;
            gsum_all += gsum;
            gcount_all += gcount;
        }
        // MoE routing of the probe batch
        const MoeStats* st = &m->moe_stats[l];
        if (st->n_expert > 0) {
            r->has_moe = 1;
            p->n_expert = st->n_expert;
            p->moe_counts = calloc((size_t)st->n_expert, sizeof(long));
            memcpy(p->moe_counts, st->counts, (size_t)st->n_expert * sizeof(long));
            p->moe_max_load = (float)moe_max_load(st);
            p->moe_entropy = (float)moe_entropy(st);
            p->moe_aux = (float)moe_last_aux(st);
            p->moe_z = (float)st->z;
            p->moe_dropped = st->dropped;
        }
        r->m_act_mean += p->m_act / c->n_layer;
    }
    r->f_attn_mean = n_attn ? r->f_attn_mean / n_attn : NAN;
    r->has_linear = n_linear > 0;
    r->gdn_state_norm_mean = n_linear ? (float)(state_sum / n_linear) : NAN;
    r->gate_mean = gcount_all ? (float)(gsum_all / gcount_all) : NAN;
    free(heads);
}

void probe_free(ProbeResult* r) {
    if (r->layer)
        for (int l = 0; l < r->n_layer; l++) free(r->layer[l].moe_counts);
    free(r->layer);
    r->layer = NULL;
}

