// bench/bench_gate.c: the derived costs (bench/bench_train.h): each attention gate's step time
// and FLOPs against its baseline of the same shape, and each MoE config's against its dense twin.
#include "bench_train.h"

// ---------------------------------------------------------------------------------------------
// reporting


static double layer_matmul_params(const ModelConfig* c) {
    return (gpt_matmul_params(c) - (double)c->padded_vocab * c->d_model) / c->n_layer;
}

int gate_costs(const Bench* bs, int n, GateCost* out) {
    int ng = 0;
    for (int i = 0; i < n; i++) {
        if (bs[i].recompute != RECOMPUTE_NONE) continue;   // the gates compared without recomputation
        int k;
        for (k = 0; k < ng; k++) if (strcmp(out[k].shape, bs[i].shape) == 0) break;
        if (k == ng) {
            memset(&out[ng], 0, sizeof(GateCost));
            sfmt(out[ng].shape, sizeof(out[ng].shape), "%s", bs[i].shape);
            out[ng].idx[0] = out[ng].idx[1] = out[ng].idx[2] = -1;
            ng++;
        }
        out[k].idx[bs[i].gate] = i;
    }
    for (int k = 0; k < ng; k++) {
        GateCost* g = &out[k];
        // the FLOP shares come from the config alone, whichever variants ran
        const Bench* any = &bs[g->idx[0] >= 0 ? g->idx[0] : g->idx[1] >= 0 ? g->idx[1] : g->idx[2]];
        ModelConfig c0 = any->cfg.model, ce = c0, ch = c0;
        c0.attn_gate = GATE_NONE;
        ce.attn_gate = GATE_ELEMENTWISE; ce.gate_position = GATEPOS_SDPA;
        ch.attn_gate = GATE_HEADWISE; ch.gate_position = GATEPOS_SDPA;
        int T = any->cfg.train.seq_len;
        double l0 = layer_matmul_params(&c0), le = layer_matmul_params(&ce), lh = layer_matmul_params(&ch);
        g->layer_share_ew = (le - l0) / le;
        g->layer_share_hw = (lh - l0) / lh;
        g->flops_ratio_ew = gpt_flops_per_token(&ce, T) / gpt_flops_per_token(&c0, T);
        g->flops_ratio_hw = gpt_flops_per_token(&ch, T) / gpt_flops_per_token(&c0, T);
        g->ours_hw = g->ours_ew = g->torch_hw = g->torch_ew = NAN;
        g->rotated = any->group_size > 1;
        if (g->idx[GATE_NONE] >= 0) {
            const Bench* b0 = &bs[g->idx[GATE_NONE]];
            if (g->idx[GATE_HEADWISE] >= 0) {
                g->ours_hw = bs[g->idx[GATE_HEADWISE]].med_ms / b0->med_ms;
                g->torch_hw = bs[g->idx[GATE_HEADWISE]].torch_med_ms / b0->torch_med_ms;
            }
            if (g->idx[GATE_ELEMENTWISE] >= 0) {
                g->ours_ew = bs[g->idx[GATE_ELEMENTWISE]].med_ms / b0->med_ms;
                g->torch_ew = bs[g->idx[GATE_ELEMENTWISE]].torch_med_ms / b0->torch_med_ms;
            }
        }
    }
    return ng;
}


// The dense twin of an MoE shape's stem: "moe" -> "dense" if that shape ran, else without "_moe".
static int moe_twin(const Bench* bs, int n, int i) {
    char a[128], b[128];
    const char* at = strstr(bs[i].shape, "moe");
    if (!at) return -1;
    size_t pre = (size_t)(at - bs[i].shape);
    sfmt(a, sizeof(a), "%.*sdense%s", (int)pre, bs[i].shape, at + 3);
    b[0] = 0;
    if (pre > 0 && bs[i].shape[pre - 1] == '_') sfmt(b, sizeof(b), "%.*s%s", (int)(pre - 1), bs[i].shape, at + 3);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++)
            if (j != i && bs[j].gate == bs[i].gate && bs[j].recompute == bs[i].recompute &&
                bs[j].cfg.model.moe.n_expert == 0 &&
                strcmp(bs[j].shape, pass == 0 ? a : b) == 0)
                return j;
    return -1;
}

int moe_costs(const Bench* bs, int n, MoeCost* out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (bs[i].cfg.model.moe.n_expert == 0) continue;
        int j = moe_twin(bs, n, i);
        if (j < 0) continue;
        MoeCost* c = &out[k++];
        c->moe = i; c->dense = j;
        c->flops_ratio = bs[i].flops_tok / bs[j].flops_tok;
        c->ours = bs[i].ok && bs[j].ok ? bs[i].med_ms / bs[j].med_ms : NAN;
        c->torch = bs[i].torch_ok && bs[j].torch_ok ? bs[i].torch_med_ms / bs[j].torch_med_ms : NAN;
    }
    return k;
}
