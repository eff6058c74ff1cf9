// model/params.c: parameter table construction, binding, init.
#include "params.h"
#include "rng.h"
#include "../kernels/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A tensor of shape [d0] (d1 = d2 = 0), [d0, d1] (d2 = 0) or [d0, d1, d2].
static void add3(ParamTable* t, const char* name, int d0, int d1, int d2, int residual) {
    t->p = realloc(t->p, (size_t)(t->n + 1) * sizeof(ParamInfo));
    if (!t->p) { fprintf(stderr, "error: out of memory building the parameter table\n"); exit(1); }
    ParamInfo* p = &t->p[t->n++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->ndim = d2 > 0 ? 3 : d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 1;
    p->shape[2] = d2 > 0 ? d2 : 1;
    p->numel = (size_t)d0 * p->shape[1] * p->shape[2];
    p->offset = t->total;
    p->decay = p->ndim >= 2;
    p->residual_proj = residual;
    const char* tail = strrchr(name, '.');
    p->bias = tail && strcmp(tail, ".b") == 0;   // a norm's bias (add_bias marks the linear ones)
    // keep every tensor 64-byte aligned (16 floats) in the arena for SIMD and cuBLAS
    t->total += (p->numel + 15) & ~(size_t)15;
}

static void add(ParamTable* t, const char* name, int rows, int cols, int residual) {
    add3(t, name, rows, cols, 0, residual);
}

// a linear layer's bias [n] ([model] bias): 1-D, no weight decay, init 0
static void add_bias(ParamTable* t, const char* name, int n) {
    add3(t, name, n, 0, 0, 0);
    t->p[t->n - 1].bias = 1;
}

size_t param_expert_numel(const ParamInfo* p) { return (size_t)p->shape[1] * p->shape[2]; }

void param_table_build(ParamTable* t, const ModelConfig* c) { param_table_build_ep(t, c, 1, 0); }

void param_table_build_ep(ParamTable* t, const ModelConfig* c, int ep_size, int ep_rank) {
    memset(t, 0, sizeof(*t));
    const int El = c->moe.n_expert > 0 && ep_size > 1 ? c->moe.n_expert / ep_size : c->moe.n_expert;
    int d = c->d_model, hd = c->head_dim, F = c->d_ff;
    OpsAttnShape s = config_attn_shape(c, 0, 0, OPS_ATTN_FUSED);   // (B, T unused: columns only)
    int qkv_rows = ops_attn_qkv_cols(&s);
    int ln = c->norm == NORM_LAYERNORM;
    char nm[48];
    add(t, "wte", c->padded_vocab, d, 0);
    if (c->pos == POS_LEARNED) add(t, "wpe", c->max_seq_len, d, 0);
    for (int l = 0; l < c->n_layer; l++) {
#define P(suffix, rows, cols, res) do { snprintf(nm, sizeof(nm), "h.%d." suffix, l); add(t, nm, rows, cols, res); } while (0)
#define PB(suffix, n) do { if (c->bias) { snprintf(nm, sizeof(nm), "h.%d." suffix, l); add_bias(t, nm, n); } } while (0)
        P("ln1.w", d, 0, 0);
        if (ln) P("ln1.b", d, 0, 0);
        if (config_layer_is_linear(c, l)) {
            // Gated DeltaNet (model/gpt.c "Gated DeltaNet"): Kd = Hk*dk, Vd = Hv*dv
            int Kd = c->linear_n_k_head * c->linear_k_head_dim, Vd = c->linear_n_v_head * c->linear_v_head_dim;
            int Hv = c->linear_n_v_head;
            P("gdn.w_qkv", 2 * Kd + Vd, d, 0);      // rows [q | k | v], the conv's input
            P("gdn.w_z", Vd, d, 0);                 // the output gate's logits
            P("gdn.w_ba", 2 * Hv, d, 0);            // rows [b | a]: beta and decay logits per value head
            P("gdn.conv_w", 2 * Kd + Vd, c->linear_conv_kernel, 0);
            P("gdn.A_log", Hv, 0, 0);
            P("gdn.dt_bias", Hv, 0, 0);
            P("gdn.norm_w", c->linear_v_head_dim, 0, 0);
            P("gdn.w_out", d, Vd, 1);
        } else {
            P("attn.wqkv", qkv_rows, d, 0);
            PB("attn.bqkv", qkv_rows);
            if (c->qk_norm) { P("attn.q_norm.w", hd, 0, 0); P("attn.k_norm.w", hd, 0, 0); }
            P("attn.wo", d, c->n_head * hd, 1);
            PB("attn.bo", d);
        }
        P("ln2.w", d, 0, 0);
        if (ln) P("ln2.b", d, 0, 0);
        if (!config_layer_is_moe(c, l)) {
            P("mlp.w_in", c->mlp == MLP_SWIGLU ? 2 * F : F, d, 0);
            PB("mlp.b_in", c->mlp == MLP_SWIGLU ? 2 * F : F);
            P("mlp.w_out", d, F, 1);
            PB("mlp.b_out", d);
        } else {
            // the MLP's place: router, the routed experts stacked on a leading dim, the shared expert
            const MoeConfig* e = &c->moe;
            int Fe = e->d_expert, Fs = e->d_shared_expert, sw = c->mlp == MLP_SWIGLU ? 2 : 1;
            P("moe.router", e->n_expert, d, 0);
            // this table's experts: all E, or member ep_rank's El of them
            snprintf(nm, sizeof(nm), "h.%d.moe.w_in", l); add3(t, nm, El, sw * Fe, d, 0);
            t->p[t->n - 1].expert_lo = ep_size > 1 ? ep_rank * El : 0; t->p[t->n - 1].expert_n = El;
            snprintf(nm, sizeof(nm), "h.%d.moe.w_out", l); add3(t, nm, El, d, Fe, 1);
            t->p[t->n - 1].expert_lo = ep_size > 1 ? ep_rank * El : 0; t->p[t->n - 1].expert_n = El;
            if (e->n_shared_expert) {
                P("moe.shared_w_in", sw * Fs, d, 0);
                P("moe.shared_w_out", d, Fs, 1);
                if (e->shared_expert_gate) P("moe.shared_gate", 1, d, 0);
            }
        }
#undef P
#undef PB
    }
    add(t, "lnf.w", d, 0, 0);
    if (ln) add(t, "lnf.b", d, 0, 0);
    if (!c->tie_embeddings) add(t, "lm_head", c->padded_vocab, d, 0);
    t->ep_size = ep_size > 1 && c->moe.n_expert > 0 ? ep_size : 1;
    t->ep_rank = t->ep_size > 1 ? ep_rank : 0;
    t->dense_total = t->total;
    if (t->ep_size == 1) return;
    // expert parallelism: the dense tensors first (in table order), then the expert shards, so
    // that the dense region is reduced over every process and the experts over their replicas
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->p[i].expert_n) continue;
        t->p[i].offset = at;
        at += (t->p[i].numel + 15) & ~(size_t)15;
    }
    at = (at + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK * OPS_SUMSQ_CHUNK;   // whole norm chunks
    t->dense_total = at;
    for (int i = 0; i < t->n; i++) {
        if (!t->p[i].expert_n) continue;
        t->p[i].offset = at;
        at += (t->p[i].numel + 15) & ~(size_t)15;
    }
    t->total = at;
}

void param_table_map(const ParamTable* t, const ParamTable* g, size_t a, size_t b,
                     void (*f)(void* ctx, size_t local, size_t global, size_t n), void* ctx) {
    // pieces in t's arena order: sort t's tensors by offset (a few hundred at most)
    int* order = malloc((size_t)(t->n ? t->n : 1) * sizeof(int));
    if (!order) { fprintf(stderr, "error: out of memory (param_table_map)\n"); exit(1); }
    for (int i = 0; i < t->n; i++) order[i] = i;
    for (int i = 1; i < t->n; i++)   // insertion sort: the table is nearly in order already
        for (int j = i; j > 0 && t->p[order[j - 1]].offset > t->p[order[j]].offset; j--) {
            int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    for (int k = 0; k < t->n; k++) {
        const ParamInfo* p = &t->p[order[k]];
        size_t lo = p->offset > a ? p->offset : a, hi = p->offset + p->numel < b ? p->offset + p->numel : b;
        if (lo >= hi) continue;
        const ParamInfo* q = &g->p[order[k]];   // the same config: the same tensors in the same order
        size_t base = q->offset + (p->expert_n ? (size_t)p->expert_lo * param_expert_numel(p) : 0);
        f(ctx, lo, base + (lo - p->offset), hi - lo);
    }
    free(order);
}

void param_table_free(ParamTable* t) { free(t->p); memset(t, 0, sizeof(*t)); }

const ParamInfo* param_find(const ParamTable* t, const char* name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

static float* ptr(WeightsAt at, void* ctx, const ParamTable* t, const char* name) {
    const ParamInfo* p = param_find(t, name);
    return p ? at(ctx, p) : NULL;
}

static float* arena_at(void* arena, const ParamInfo* p) { return (float*)arena + p->offset; }

void weights_bind(ModelWeights* w, float* arena, const ParamTable* t, const ModelConfig* c) {
    weights_bind_at(w, arena_at, arena, t, c);
}

void weights_bind_at(ModelWeights* w, WeightsAt at, void* ctx, const ParamTable* t, const ModelConfig* c) {
    memset(w, 0, sizeof(*w));
    char nm[48];
    w->wte = ptr(at, ctx, t, "wte");
    w->wpe = ptr(at, ctx, t, "wpe");
    w->layer = calloc((size_t)c->n_layer, sizeof(LayerWeights));
    for (int l = 0; l < c->n_layer; l++) {
        LayerWeights* L = &w->layer[l];
#define B(field, suffix) do { snprintf(nm, sizeof(nm), "h.%d." suffix, l); L->field = ptr(at, ctx, t, nm); } while (0)
        B(ln1_w, "ln1.w"); B(ln1_b, "ln1.b"); B(wqkv, "attn.wqkv");
        B(qnorm_w, "attn.q_norm.w"); B(knorm_w, "attn.k_norm.w"); B(wo, "attn.wo");
        B(ln2_w, "ln2.w"); B(ln2_b, "ln2.b"); B(w_in, "mlp.w_in"); B(w_out, "mlp.w_out");
        B(bqkv, "attn.bqkv"); B(bo, "attn.bo"); B(b_in, "mlp.b_in"); B(b_out, "mlp.b_out");
        B(router, "moe.router"); B(moe_w_in, "moe.w_in"); B(moe_w_out, "moe.w_out");
        B(shared_w_in, "moe.shared_w_in"); B(shared_w_out, "moe.shared_w_out"); B(shared_gate, "moe.shared_gate");
        B(gdn_w_qkv, "gdn.w_qkv"); B(gdn_w_z, "gdn.w_z"); B(gdn_w_ba, "gdn.w_ba"); B(gdn_conv_w, "gdn.conv_w");
        B(gdn_A_log, "gdn.A_log"); B(gdn_dt_bias, "gdn.dt_bias"); B(gdn_norm_w, "gdn.norm_w"); B(gdn_w_out, "gdn.w_out");
#undef B
    }
    w->lnf_w = ptr(at, ctx, t, "lnf.w");
    w->lnf_b = ptr(at, ctx, t, "lnf.b");
    w->lm_head = c->tie_embeddings ? w->wte : ptr(at, ctx, t, "lm_head");
}

void weights_free(ModelWeights* w) { free(w->layer); w->layer = NULL; }

void params_init(float* host, const ParamTable* t, const ModelConfig* c, unsigned long long seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        float* x = host + p->offset;
        const char* tail = strrchr(p->name, '.');
        // the Gated DeltaNet's own: A = exp(A_log) ~ U(0, 16] and the conv as PyTorch's Conv1d
        // (U(-1/sqrt(K), 1/sqrt(K))), both as transformers' Qwen3-Next; dt_bias 1, norm_w 1 below
        if (tail && strcmp(tail, ".A_log") == 0) {
            for (size_t j = 0; j < p->numel; j++) x[j] = (float)log(16.0 * (1.0 - rng_uniform(&rng)));
            continue;
        }
        if (tail && strcmp(tail, ".conv_w") == 0) {
            double bound = 1.0 / sqrt((double)p->shape[1]);
            for (size_t j = 0; j < p->numel; j++) x[j] = (float)(bound * (2.0 * rng_uniform(&rng) - 1.0));
            continue;
        }
        if (p->ndim == 1) {
            for (size_t j = 0; j < p->numel; j++) x[j] = p->bias ? 0.0f : 1.0f;
            continue;
        }
        double std = c->init_std;
        if (p->residual_proj) std /= sqrt(2.0 * c->n_layer);
        if (p->expert_n && t->ep_size > 1) {
            // an expert shard: every expert drawn by its global index, the others' draws
            // discarded (rng_normal takes two draws), so the model is that of ep_size 1
            const size_t pe = param_expert_numel(p);
            for (int e = 0; e < c->moe.n_expert; e++) {
                int j = e - p->expert_lo;
                if (j < 0 || j >= p->expert_n) {
                    for (size_t i = 0; i < 2 * pe; i++) rng_next(&rng);
                    continue;
                }
                for (size_t i = 0; i < pe; i++) x[(size_t)j * pe + i] = (float)(std * rng_normal(&rng));
            }
            continue;
        }
        for (size_t j = 0; j < p->numel; j++) x[j] = (float)(std * rng_normal(&rng));
    }
}
