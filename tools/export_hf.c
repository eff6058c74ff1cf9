// tools/export_hf.c: checkpoint weights -> Hugging Face safetensors + config.json.
//
// safetensors: u64 N (little-endian), N bytes of JSON header {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}} padded with spaces to a multiple of 8,
// then the tensors' bytes (offsets relative to the end of the header). All tensors are F32.
//
// format "hf": the transformers class that computes exactly what the model computes
// (export_hf_class; docs/formats.md "Export" has the table), with that class's names, layouts
// and config.json, so that AutoModelForCausalLM loads it with no code from this project:
//   GPT2LMHeadModel       learned positions, LayerNorm, GELU, no gate, MHA: Conv1D weights
//                         ([in, out], transposed), fused c_attn; the linear biases ([model] bias:
//                         attn.bqkv -> c_attn.bias, attn.bo, mlp.b_in, mlp.b_out), or zeros without
//   LlamaForCausalLM      RoPE, RMSNorm, SwiGLU, no gate, no qk-norm
//   Qwen3ForCausalLM      the same with qk-norm
//   Qwen3NextForCausalLM  the elementwise sigmoid gate after SDPA (full-attention layers only,
//                         q_proj rows [q_h | g_h] per head; RMSNorm weights w - 1, since
//                         Qwen3-Next computes x^ (1 + w)); dense MLPs, or MoE with a gated
//                         shared expert
//   Qwen3MoeForCausalLM   MoE (softmax top-k, renormalised, dropless) without gate or shared expert
//   Qwen2MoeForCausalLM   MoE without qk-norm or gate, with a sigmoid-gated shared expert
//   Qwen3NextForCausalLM  also every hybrid (layer_pattern with L): Gated DeltaNet layers as
//                         linear_attn (add_gdn has the layouts), linear_gate_act = silu, the
//                         full-attention layers as above (elementwise sigmoid gate, qk-norm)
// Anything else gets a one-line error naming the setting and the nearest exportable one.
// format "raw": every model, gatedgpt's own layout under Qwen3-like names (the mapping below),
// model_type "gatedgpt" (what no transformers class represents):
//   wte                 -> model.embed_tokens.weight      [vocab_size, d] (padding rows dropped)
//   wpe                 -> model.embed_positions.weight   [max_seq_len, d]
//   h.L.ln1.w / .b      -> model.layers.L.input_layernorm.weight / .bias
//   h.L.attn.wqkv       -> model.layers.L.self_attn.{q,k,v}_proj.weight, and the gate:
//       elementwise sigmoid gate at sdpa: inside q_proj, Qwen3-Next's layout [q_h | g_h] per
//       head ([2*H*hd, d]); any other gate: model.layers.L.self_attn.gate_proj.weight [G, d]
//   h.L.attn.q_norm.w   -> model.layers.L.self_attn.q_norm.weight (k_norm alike)
//   h.L.attn.wo         -> model.layers.L.self_attn.o_proj.weight
//   h.L.ln2.w / .b      -> model.layers.L.post_attention_layernorm.weight / .bias
//   h.L.mlp.w_in        -> swiglu: model.layers.L.mlp.gate_proj.weight (rows [0,F)) and
//                          up_proj.weight (rows [F,2F)); gelu: model.layers.L.mlp.up_proj.weight
//   h.L.mlp.w_out       -> model.layers.L.mlp.down_proj.weight
//   h.L.gdn.*           -> model.layers.L.linear_attn.*: Qwen3.5's names, which have gatedgpt's
//                          layout: in_proj_qkv (w_qkv), in_proj_z, in_proj_b and in_proj_a (w_ba's
//                          rows [0, Hv) and [Hv, 2Hv)), conv1d.weight [C, K], A_log, dt_bias,
//                          norm.weight, out_proj.weight
//   lnf.w / lnf.b       -> model.norm.weight / .bias
//   lm_head             -> lm_head.weight                 [vocab_size, d] (absent when tied)
//   any other tensor    -> gatedgpt.<its name>, as it is in the arena (noted on the log)
#define _GNU_SOURCE
#include "export_hf.h"

#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char name[128];
    int ndim;
    int shape[4];
    size_t numel;
    float* data;             // owned, numel floats
} OutTensor;

typedef struct {
    OutTensor* t;
    int n, cap;
} OutList;

static float* out_add(OutList* l, const char* name, int rows, int cols) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = realloc(l->t, (size_t)l->cap * sizeof(OutTensor));
        if (!l->t) { fprintf(stderr, "error: export: out of memory\n"); exit(1); }
    }
    OutTensor* o = &l->t[l->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = cols > 0 ? 2 : 1;
    o->shape[0] = rows;
    o->shape[1] = cols;
    o->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    o->data = malloc(o->numel * sizeof(float));
    if (!o->data) { fprintf(stderr, "error: export: out of memory\n"); exit(1); }
    return o->data;
}

// rows [r0, r0 + n) of a [*, cols] matrix into dst
static void copy_rows(float* dst, const float* src, int r0, int n, int cols) {
    memcpy(dst, src + (size_t)r0 * cols, (size_t)n * cols * sizeof(float));
}

static void add_copy(OutList* l, const char* name, const float* src, int rows, int cols) {
    copy_rows(out_add(l, name, rows, cols), src, 0, rows, cols > 0 ? cols : 1);
}

// The fused projection [q | k | v | gate] of layer L as q_proj, k_proj, v_proj (+ the gate).
static void split_wqkv(OutList* l, const ModelConfig* m, int L, const float* w, int rows) {
    const int d = m->d_model, hd = m->head_dim, H = m->n_head, Hkv = m->n_kv_head;
    const int Hq = H * hd, Hk = Hkv * hd, G = rows - Hq - 2 * Hk;
    char nm[128];
    int qnext = G > 0 && m->attn_gate == GATE_ELEMENTWISE && m->gate_position == GATEPOS_SDPA &&
                m->gate_act == GATEACT_SIGMOID;
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", L);
    if (qnext) {   // Qwen3-Next: per head h, rows [q_h (hd) | g_h (hd)]
        float* q = out_add(l, nm, 2 * Hq, d);
        for (int h = 0; h < H; h++) {
            copy_rows(q + (size_t)(2 * h) * hd * d, w, h * hd, hd, d);
            copy_rows(q + (size_t)(2 * h + 1) * hd * d, w, Hq + 2 * Hk + h * hd, hd, d);
        }
    } else {
        copy_rows(out_add(l, nm, Hq, d), w, 0, Hq, d);
    }
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", L);
    copy_rows(out_add(l, nm, Hk, d), w, Hq, Hk, d);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", L);
    copy_rows(out_add(l, nm, Hk, d), w, Hq + Hk, Hk, d);
    if (G > 0 && !qnext) {
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.gate_proj.weight", L);
        copy_rows(out_add(l, nm, G, d), w, Hq + 2 * Hk, G, d);
    }
}

// The Qwen3 name of a tensor that is exported as it is (shape unchanged), or NULL.
static const char* plain_name(const char* rest) {
    static const char* const MAP[][2] = {
        {"ln1.w", "input_layernorm.weight"}, {"ln1.b", "input_layernorm.bias"},
        {"ln2.w", "post_attention_layernorm.weight"}, {"ln2.b", "post_attention_layernorm.bias"},
        {"attn.q_norm.w", "self_attn.q_norm.weight"}, {"attn.k_norm.w", "self_attn.k_norm.weight"},
        {"attn.wo", "self_attn.o_proj.weight"}, {"mlp.w_out", "mlp.down_proj.weight"},
        // a Gated DeltaNet layer: Qwen3.5's names, which have gatedgpt's layout (conv1d [C, K])
        {"gdn.w_qkv", "linear_attn.in_proj_qkv.weight"}, {"gdn.w_z", "linear_attn.in_proj_z.weight"},
        {"gdn.conv_w", "linear_attn.conv1d.weight"}, {"gdn.A_log", "linear_attn.A_log"},
        {"gdn.dt_bias", "linear_attn.dt_bias"}, {"gdn.norm_w", "linear_attn.norm.weight"},
        {"gdn.w_out", "linear_attn.out_proj.weight"},
    };
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (strcmp(rest, MAP[i][0]) == 0) return MAP[i][1];
    return NULL;
}

// Adds the exported tensor(s) of one parameter; returns 0 when it has no Hugging Face name.
static int map_tensor(OutList* l, const ModelConfig* m, const ParamInfo* p, const float* x) {
    const int V = m->vocab_size, F = m->d_ff;
    const int rows = p->shape[0], cols = p->ndim > 1 ? p->shape[1] : 0;
    char nm[128], rest[64];
    int L;
    if (strcmp(p->name, "wte") == 0) { add_copy(l, "model.embed_tokens.weight", x, V, cols); return 1; }   // padding rows dropped
    if (strcmp(p->name, "wpe") == 0) { add_copy(l, "model.embed_positions.weight", x, rows, cols); return 1; }
    if (strcmp(p->name, "lnf.w") == 0) { add_copy(l, "model.norm.weight", x, rows, 0); return 1; }
    if (strcmp(p->name, "lnf.b") == 0) { add_copy(l, "model.norm.bias", x, rows, 0); return 1; }
    if (strcmp(p->name, "lm_head") == 0) { add_copy(l, "lm_head.weight", x, V, cols); return 1; }
    if (sscanf(p->name, "h.%d.%63s", &L, rest) != 2) return 0;
    const char* hf = plain_name(rest);
    if (hf) {
        snprintf(nm, sizeof nm, "model.layers.%d.%s", L, hf);
        add_copy(l, nm, x, rows, cols);
        return 1;
    }
    if (strcmp(rest, "attn.wqkv") == 0) { split_wqkv(l, m, L, x, rows); return 1; }
    if (strcmp(rest, "gdn.w_ba") == 0) {   // rows [b (Hv) | a (Hv)]
        const int Hv = m->linear_n_v_head;
        snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.in_proj_b.weight", L);
        copy_rows(out_add(l, nm, Hv, cols), x, 0, Hv, cols);
        snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.in_proj_a.weight", L);
        copy_rows(out_add(l, nm, Hv, cols), x, Hv, Hv, cols);
        return 1;
    }
    if (strcmp(rest, "mlp.w_in") != 0) return 0;
    if (m->mlp == MLP_SWIGLU) {   // rows [gate (F) | up (F)]
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", L);
        copy_rows(out_add(l, nm, F, cols), x, 0, F, cols);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", L);
        copy_rows(out_add(l, nm, F, cols), x, F, F, cols);
    } else {
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", L);
        add_copy(l, nm, x, rows, cols);
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// format "hf": which transformers class, and its tensors

const char* export_hf_class_name(HfClass k) {
    static const char* const N[] = {"none", "GPT2LMHeadModel", "LlamaForCausalLM", "Qwen3ForCausalLM",
                                    "Qwen3NextForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"};
    return N[k];
}

#define NOPE(...) do { snprintf(why, n, __VA_ARGS__); return HF_NONE; } while (0)
static HfClass hf_class_of(const ModelConfig* m, char* why, size_t n) {
    const MoeConfig* e = &m->moe;
    const int gated = m->attn_gate != GATE_NONE;
    if (config_any_linear(m)) {   // hybrid (Gated DeltaNet layers): Qwen3-Next or nothing
        static const char* const ACT[] = {"sigmoid", "ns_sigmoid", "silu"};
        int any_attn = 0;
        for (int l = 0; l < m->n_layer; l++) any_attn |= !config_layer_is_linear(m, l);
        if (m->linear_gate_act != GATEACT_SILU)
            NOPE("[model] linear_gate_act = %s has no transformers class (Qwen3-Next's Gated DeltaNet gates its normed "
                 "output with silu): the nearest exportable is linear_gate_act = silu", ACT[m->linear_gate_act]);
        if (m->pos == POS_LEARNED)
            NOPE("a hybrid ([model] layer_pattern = %s) with pos = learned has no transformers class (Qwen3-Next uses "
                 "RoPE): the nearest exportable is pos = rope", m->layer_pattern);
        if (m->norm != NORM_RMSNORM || m->mlp != MLP_SWIGLU)
            NOPE("a hybrid ([model] layer_pattern = %s) with %s has no transformers class (Qwen3-Next: rmsnorm and "
                 "swiglu): the nearest exportable is norm = rmsnorm, mlp = swiglu", m->layer_pattern,
                 m->norm != NORM_RMSNORM ? "norm = layernorm" : "mlp = gelu");
        if (any_attn && (m->attn_gate != GATE_ELEMENTWISE || m->gate_position != GATEPOS_SDPA || m->gate_act != GATEACT_SIGMOID))
            NOPE("a hybrid's full-attention layers export as Qwen3-Next's, which gate the SDPA output elementwise with a "
                 "sigmoid: [model] attn_gate = %s, gate_position = %s, gate_act = %s: the nearest exportable is "
                 "attn_gate = elementwise, gate_position = sdpa, gate_act = sigmoid",
                 m->attn_gate == GATE_NONE ? "none" : m->attn_gate == GATE_ELEMENTWISE ? "elementwise" : "headwise",
                 m->gate_position == GATEPOS_SDPA ? "sdpa" : "value", ACT[m->gate_act]);
        if (any_attn && !m->qk_norm)
            NOPE("a hybrid's full-attention layers export as Qwen3-Next's, which normalise q and k: the nearest "
                 "exportable is [model] qk_norm = true");
        if (e->n_expert > 0) {
            if (e->router != ROUTER_SOFTMAX_TOPK)
                NOPE("[moe] router = sigmoid_topk has no transformers class (Qwen3-Next: softmax top-k): the nearest exportable is router = softmax_topk");
            if (e->capacity_factor > 0.0f)
                NOPE("[moe] capacity_factor = %g drops tokens; transformers' MoE is dropless: the nearest exportable is capacity_factor = 0",
                     (double)e->capacity_factor);
            if (!e->n_shared_expert || !e->shared_expert_gate)
                NOPE("an MoE hybrid exports as Qwen3-Next, whose MoE layers have a sigmoid-gated shared expert: the "
                     "nearest exportable is [moe] n_shared_expert = 1, shared_expert_gate = true");
        }
        return HF_QWEN3_NEXT;
    }
    // the gate: only Qwen3-Next's (elementwise, sigmoid, on the SDPA output) has a class
    if (gated && m->attn_gate != GATE_ELEMENTWISE)
        NOPE("[model] attn_gate = headwise has no transformers class (Qwen3-Next's gate is elementwise): "
             "the nearest exportable is attn_gate = elementwise");
    if (gated && m->gate_position != GATEPOS_SDPA)
        NOPE("[model] gate_position = value has no transformers class (Qwen3-Next gates the SDPA output): "
             "the nearest exportable is gate_position = sdpa");
    if (gated && m->gate_act != GATEACT_SIGMOID)
        NOPE("[model] gate_act = %s has no transformers class (Qwen3-Next's gate is a sigmoid): the nearest "
             "exportable is gate_act = sigmoid", m->gate_act == GATEACT_SILU ? "silu" : "ns_sigmoid");
    if (m->bias && m->pos != POS_LEARNED)
        NOPE("[model] bias = true exports as GPT2LMHeadModel only (learned positions, layernorm, gelu); the rope classes "
             "written here have no biases on every linear layer: the nearest exportable is bias = false, or --format raw");
    if (m->pos == POS_LEARNED) {
        if (e->n_expert > 0) NOPE("an MoE model with [model] pos = learned has no transformers class: the nearest exportable is pos = rope");
        if (gated) NOPE("the attention gate with [model] pos = learned has no transformers class (Qwen3-Next uses RoPE): the nearest exportable is pos = rope");
        if (m->norm != NORM_LAYERNORM || m->mlp != MLP_GELU || m->qk_norm)
            NOPE("[model] pos = learned with %s has no transformers class (GPT2LMHeadModel: layernorm, gelu, no "
                 "qk_norm): the nearest exportable is norm = layernorm, mlp = gelu, qk_norm = false",
                 m->norm != NORM_LAYERNORM ? "norm = rmsnorm" : m->mlp != MLP_GELU ? "mlp = swiglu" : "qk_norm = true");
        if (m->n_kv_head != m->n_head || m->n_head * m->head_dim != m->d_model)
            NOPE("GPT2LMHeadModel has plain multi-head attention with n_head * head_dim = d_model: [model] "
                 "n_kv_head = %d, n_head * head_dim = %d, d_model = %d (nearest: n_kv_head = n_head, head_dim = d_model / n_head)",
                 m->n_kv_head, m->n_head * m->head_dim, m->d_model);
        return HF_GPT2;
    }
    if (m->norm != NORM_RMSNORM || m->mlp != MLP_SWIGLU)
        NOPE("[model] pos = rope with %s has no transformers class (Llama / Qwen3: rmsnorm and swiglu): the "
             "nearest exportable is norm = rmsnorm, mlp = swiglu", m->norm != NORM_RMSNORM ? "norm = layernorm" : "mlp = gelu");
    if (e->n_expert > 0) {
        if (e->router != ROUTER_SOFTMAX_TOPK)
            NOPE("[moe] router = sigmoid_topk has no transformers class (Qwen3-MoE / Qwen3-Next: softmax top-k): the nearest exportable is router = softmax_topk");
        if (e->capacity_factor > 0.0f)
            NOPE("[moe] capacity_factor = %g drops tokens; transformers' MoE is dropless: the nearest exportable is capacity_factor = 0",
                 (double)e->capacity_factor);
        if (!m->qk_norm) {   // Qwen2-MoE: no qk-norm, a sigmoid-gated shared expert, no attention gate
            if (!gated && e->n_shared_expert && e->shared_expert_gate) return HF_QWEN2_MOE;
            NOPE("an MoE model without [model] qk_norm exports as Qwen2-MoE, which has no attention gate and a sigmoid-gated shared expert: "
                 "the nearest exportable is qk_norm = true (Qwen3-MoE / Qwen3-Next), or attn_gate = none with [moe] n_shared_expert = 1, shared_expert_gate = true");
        }
        if (!gated && e->n_shared_expert == 0) return HF_QWEN3_MOE;
        if (gated && e->n_shared_expert && e->shared_expert_gate) return HF_QWEN3_NEXT;
        if (gated) NOPE("the attention gate in an MoE model exports as Qwen3-Next, whose MoE layers have a sigmoid-gated shared expert: "
                        "the nearest exportable is [moe] n_shared_expert = 1, shared_expert_gate = true (or attn_gate = none)");
        NOPE("an MoE model with a shared expert and no attention gate has no exact transformers class (Qwen3-MoE has no shared expert, "
             "Qwen2-MoE no qk-norm, Qwen3-Next always gates attention): the nearest exportable is [moe] n_shared_expert = 0");
    }
    if (!gated) return m->qk_norm ? HF_QWEN3 : HF_LLAMA;
    if (!m->qk_norm) NOPE("the attention gate exports as Qwen3-Next, which normalises q and k: the nearest exportable is [model] qk_norm = true");
    return HF_QWEN3_NEXT;
}

// Partial RoPE ([model] rope_fraction < 1): of these classes only Qwen3-Next honours
// partial_rotary_factor (its apply_rotary_pos_emb passes the channels past the rotary dim
// through); Llama's, Qwen3's, Qwen3-MoE's and Qwen2-MoE's rotate the whole head (transformers 5).
HfClass export_hf_class(const ModelConfig* m, char* why, size_t n) {
    HfClass k = hf_class_of(m, why, n);
    if (k != HF_NONE && k != HF_QWEN3_NEXT && m->pos == POS_ROPE && m->rope_dim > 0 && m->rope_dim < m->head_dim)
        NOPE("[model] rope_fraction = %g (RoPE on %d of %d channels): %s rotates every channel of a head; of the "
             "exportable classes only Qwen3NextForCausalLM honours partial_rotary_factor: the nearest exportable is "
             "rope_fraction = 1 (or attn_gate = elementwise with qk_norm = true: Qwen3-Next)",
             (double)m->rope_fraction, m->rope_dim, m->head_dim, export_hf_class_name(k));
    return k;
}
#undef NOPE

static const float* P_(const ParamTable* t, const float* params, const char* fmt, int l) {
    char nm[64];
    snprintf(nm, sizeof nm, fmt, l);
    const ParamInfo* p = param_find(t, nm);
    if (!p) { fprintf(stderr, "error: export: parameter '%s' missing from the table\n", nm); exit(1); }
    return params + p->offset;
}
// dst[cols, rows] = src[rows, cols]^T (GPT-2's Conv1D stores [in, out])
static void add_transposed(OutList* l, const char* name, const float* src, int rows, int cols) {
    float* dst = out_add(l, name, cols, rows);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}
static void add_zeros(OutList* l, const char* name, int n) { memset(out_add(l, name, n, 0), 0, (size_t)n * sizeof(float)); }
// an RMSNorm weight, minus 1 for Qwen3-Next's x^ (1 + w)
static void add_norm(OutList* l, const char* name, const float* w, int n, int minus_one) {
    float* dst = out_add(l, name, n, 0);
    for (int i = 0; i < n; i++) dst[i] = minus_one ? w[i] - 1.0f : w[i];
}
static OutTensor* add3(OutList* l, const char* name, const float* src, int a, int b, int c) {
    float* dst = out_add(l, name, a * b, c);
    memcpy(dst, src, (size_t)a * b * c * sizeof(float));
    OutTensor* o = &l->t[l->n - 1];
    o->ndim = 3; o->shape[0] = a; o->shape[1] = b; o->shape[2] = c;
    return o;
}

// a GPT-2 linear layer's bias: the model's ([model] bias), or zeros (GPT2LMHeadModel always has one)
static void add_bias(OutList* l, const char* name, const ParamTable* t, const float* x, const char* fmt, int L, int n) {
    char ours[64];
    snprintf(ours, sizeof ours, fmt, L);
    const ParamInfo* p = param_find(t, ours);
    if (p) add_copy(l, name, x + p->offset, n, 0);
    else add_zeros(l, name, n);
}

static void build_gpt2(OutList* l, const ModelConfig* m, const ParamTable* t, const float* x) {
    const int d = m->d_model, F = m->d_ff, V = m->vocab_size;
    char nm[128];
    add_copy(l, "transformer.wte.weight", P_(t, x, "wte", 0), V, d);
    add_copy(l, "transformer.wpe.weight", P_(t, x, "wpe", 0), m->max_seq_len, d);
    for (int L = 0; L < m->n_layer; L++) {
#define NM(s) (snprintf(nm, sizeof nm, "transformer.h.%d." s, L), nm)
        add_copy(l, NM("ln_1.weight"), P_(t, x, "h.%d.ln1.w", L), d, 0);
        add_copy(l, NM("ln_1.bias"), P_(t, x, "h.%d.ln1.b", L), d, 0);
        add_transposed(l, NM("attn.c_attn.weight"), P_(t, x, "h.%d.attn.wqkv", L), 3 * d, d);
        add_bias(l, NM("attn.c_attn.bias"), t, x, "h.%d.attn.bqkv", L, 3 * d);   // [q | k | v], as wqkv's rows
        add_transposed(l, NM("attn.c_proj.weight"), P_(t, x, "h.%d.attn.wo", L), d, d);
        add_bias(l, NM("attn.c_proj.bias"), t, x, "h.%d.attn.bo", L, d);
        add_copy(l, NM("ln_2.weight"), P_(t, x, "h.%d.ln2.w", L), d, 0);
        add_copy(l, NM("ln_2.bias"), P_(t, x, "h.%d.ln2.b", L), d, 0);
        add_transposed(l, NM("mlp.c_fc.weight"), P_(t, x, "h.%d.mlp.w_in", L), F, d);
        add_bias(l, NM("mlp.c_fc.bias"), t, x, "h.%d.mlp.b_in", L, F);
        add_transposed(l, NM("mlp.c_proj.weight"), P_(t, x, "h.%d.mlp.w_out", L), d, F);
        add_bias(l, NM("mlp.c_proj.bias"), t, x, "h.%d.mlp.b_out", L, d);
#undef NM
    }
    add_copy(l, "transformer.ln_f.weight", P_(t, x, "lnf.w", 0), d, 0);
    add_copy(l, "transformer.ln_f.bias", P_(t, x, "lnf.b", 0), d, 0);
    if (!m->tie_embeddings) add_copy(l, "lm_head.weight", P_(t, x, "lm_head", 0), V, d);
}

// A Gated DeltaNet layer as Qwen3-Next's linear_attn (Qwen3NextGatedDeltaNet). Hk key heads of
// dk, Hv value heads of dv, rep = Hv / Hk value heads per key head (value head h reads key head
// h / rep). in_proj_qkvz is grouped per key head g: [q_g (dk) | k_g (dk) | v of value heads
// g*rep .. g*rep+rep-1 (rep*dv) | z of the same heads (rep*dv)] (fix_query_key_value_ordering);
// in_proj_ba per key head g: [b (rep) | a (rep)]; conv1d's channels are [q | k | v] head-major,
// which is w_qkv's row order, as [C, 1, K]; norm.weight is Qwen3NextRMSNormGated's plain weight
// (x^ * w, no w - 1).
static void add_gdn(OutList* l, const ModelConfig* m, const ParamTable* t, const float* x, int L) {
    const int d = m->d_model, Hk = m->linear_n_k_head, Hv = m->linear_n_v_head;
    const int dk = m->linear_k_head_dim, dv = m->linear_v_head_dim, K = m->linear_conv_kernel;
    const int Kd = Hk * dk, Vd = Hv * dv, rep = Hv / Hk, C = 2 * Kd + Vd;
    const float* qkv = P_(t, x, "h.%d.gdn.w_qkv", L);
    const float* z = P_(t, x, "h.%d.gdn.w_z", L);
    const float* ba = P_(t, x, "h.%d.gdn.w_ba", L);
    char nm[128];
#define NM(s) (snprintf(nm, sizeof nm, "model.layers.%d.linear_attn." s, L), nm)
    float* o = out_add(l, NM("in_proj_qkvz.weight"), 2 * Kd + 2 * Vd, d);
    for (int g = 0, r = 0; g < Hk; g++) {
        copy_rows(o + (size_t)r * d, qkv, g * dk, dk, d); r += dk;
        copy_rows(o + (size_t)r * d, qkv, Kd + g * dk, dk, d); r += dk;
        copy_rows(o + (size_t)r * d, qkv, 2 * Kd + g * rep * dv, rep * dv, d); r += rep * dv;
        copy_rows(o + (size_t)r * d, z, g * rep * dv, rep * dv, d); r += rep * dv;
    }
    o = out_add(l, NM("in_proj_ba.weight"), 2 * Hv, d);
    for (int g = 0; g < Hk; g++) {
        copy_rows(o + (size_t)(2 * g * rep) * d, ba, g * rep, rep, d);
        copy_rows(o + (size_t)(2 * g * rep + rep) * d, ba, Hv + g * rep, rep, d);
    }
    add3(l, NM("conv1d.weight"), P_(t, x, "h.%d.gdn.conv_w", L), C, 1, K);
    add_copy(l, NM("dt_bias"), P_(t, x, "h.%d.gdn.dt_bias", L), Hv, 0);
    add_copy(l, NM("A_log"), P_(t, x, "h.%d.gdn.A_log", L), Hv, 0);
    add_copy(l, NM("norm.weight"), P_(t, x, "h.%d.gdn.norm_w", L), dv, 0);
    add_copy(l, NM("out_proj.weight"), P_(t, x, "h.%d.gdn.w_out", L), d, Vd);
#undef NM
}

// Llama, Qwen3, Qwen3-Next, Qwen3-MoE: the Qwen3 names, with each class's differences
static void build_qwen(OutList* l, const ModelConfig* m, const ParamTable* t, const float* x, HfClass k) {
    const int d = m->d_model, F = m->d_ff, V = m->vocab_size, hd = m->head_dim;
    const int next = k == HF_QWEN3_NEXT;
    const MoeConfig* e = &m->moe;
    char nm[128];
    add_copy(l, "model.embed_tokens.weight", P_(t, x, "wte", 0), V, d);
    for (int L = 0; L < m->n_layer; L++) {
#define NM(s) (snprintf(nm, sizeof nm, "model.layers.%d." s, L), nm)
        add_norm(l, NM("input_layernorm.weight"), P_(t, x, "h.%d.ln1.w", L), d, next);
        if (config_layer_is_linear(m, L)) {
            add_gdn(l, m, t, x, L);
        } else {
            const ParamInfo* qkv = param_find(t, (snprintf(nm, sizeof nm, "h.%d.attn.wqkv", L), nm));
            split_wqkv(l, m, L, x + qkv->offset, qkv->shape[0]);
            if (m->qk_norm) {
                add_norm(l, NM("self_attn.q_norm.weight"), P_(t, x, "h.%d.attn.q_norm.w", L), hd, next);
                add_norm(l, NM("self_attn.k_norm.weight"), P_(t, x, "h.%d.attn.k_norm.w", L), hd, next);
            }
            add_copy(l, NM("self_attn.o_proj.weight"), P_(t, x, "h.%d.attn.wo", L), d, m->n_head * hd);
        }
        add_norm(l, NM("post_attention_layernorm.weight"), P_(t, x, "h.%d.ln2.w", L), d, next);
        if (!config_layer_is_moe(m, L)) {
            const float* w_in = P_(t, x, "h.%d.mlp.w_in", L);   // rows [gate (F) | up (F)]
            copy_rows(out_add(l, NM("mlp.gate_proj.weight"), F, d), w_in, 0, F, d);
            copy_rows(out_add(l, NM("mlp.up_proj.weight"), F, d), w_in, F, F, d);
            add_copy(l, NM("mlp.down_proj.weight"), P_(t, x, "h.%d.mlp.w_out", L), d, F);
            continue;
        }
        const int E = e->n_expert, Fe = e->d_expert, Fs = e->d_shared_expert;
        add_copy(l, NM("mlp.gate.weight"), P_(t, x, "h.%d.moe.router", L), E, d);
        add3(l, NM("mlp.experts.gate_up_proj"), P_(t, x, "h.%d.moe.w_in", L), E, 2 * Fe, d);   // [gate | up] per expert
        add3(l, NM("mlp.experts.down_proj"), P_(t, x, "h.%d.moe.w_out", L), E, d, Fe);
        if (e->n_shared_expert) {
            const float* s_in = P_(t, x, "h.%d.moe.shared_w_in", L);
            copy_rows(out_add(l, NM("mlp.shared_expert.gate_proj.weight"), Fs, d), s_in, 0, Fs, d);
            copy_rows(out_add(l, NM("mlp.shared_expert.up_proj.weight"), Fs, d), s_in, Fs, Fs, d);
            add_copy(l, NM("mlp.shared_expert.down_proj.weight"), P_(t, x, "h.%d.moe.shared_w_out", L), d, Fs);
            add_copy(l, NM("mlp.shared_expert_gate.weight"), P_(t, x, "h.%d.moe.shared_gate", L), 1, d);
        }
#undef NM
    }
    add_norm(l, "model.norm.weight", P_(t, x, "lnf.w", 0), d, next);
    if (!m->tie_embeddings) add_copy(l, "lm_head.weight", P_(t, x, "lm_head", 0), V, d);
}

// Builds the exported tensors from the parameter table, in table order.
static void build_tensors(OutList* l, const ModelConfig* m, const ParamTable* t, const float* params, FILE* log) {
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        const float* x = params + p->offset;
        if (map_tensor(l, m, p, x)) continue;
        // no Hugging Face name (yet): exported under its own name, whole
        char nm[128];
        if (log) fprintf(log, "export: note: '%s' has no Qwen3 name; exported as 'gatedgpt.%s'\n", p->name, p->name);
        snprintf(nm, sizeof nm, "gatedgpt.%s", p->name);
        float* dst = out_add(l, nm, (int)p->numel, 0);
        memcpy(dst, x, p->numel * sizeof(float));
        OutTensor* o = &l->t[l->n - 1];   // keep the table's shape (any number of dims)
        const int max_dims = (int)(sizeof p->shape / sizeof p->shape[0]);
        o->ndim = p->ndim <= max_dims && p->ndim <= 4 ? p->ndim : 1;
        for (int d = 0; d < o->ndim; d++) o->shape[d] = o->ndim == 1 ? (int)p->numel : p->shape[d];
    }
}

static int write_file_atomic(const char* path, const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) { fprintf(stderr, "error: export: cannot create '%s': %s\n", tmp, strerror(errno)); return -1; }
    int ok = (na == 0 || fwrite(a, 1, na, f) == na) && (nb == 0 || fwrite(b, 1, nb, f) == nb) &&
             (nc == 0 || fwrite(c, 1, nc, f) == nc);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "error: export: writing '%s' failed: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int write_safetensors(const char* path, const OutList* l, int step) {
    char* hdr = NULL;
    size_t hlen = 0;
    FILE* f = open_memstream(&hdr, &hlen);
    fprintf(f, "{\"__metadata__\":{\"format\":\"pt\",\"source\":\"gatedgpt\",\"step\":\"%d\"}", step);
    size_t off = 0;
    for (int i = 0; i < l->n; i++) {
        const OutTensor* o = &l->t[i];
        size_t bytes = o->numel * sizeof(float);
        fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", o->name);
        for (int d = 0; d < o->ndim; d++) fprintf(f, "%s%d", d ? "," : "", o->shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    fputc('}', f);
    while ((ftell(f) % 8) != 0) fputc(' ', f);   // the data starts 8-byte aligned
    fclose(f);
    // the tensors, concatenated in header order
    unsigned char* data = malloc(off ? off : 1);
    if (!data) { free(hdr); fprintf(stderr, "error: export: out of memory\n"); return -1; }
    size_t pos = 0;
    for (int i = 0; i < l->n; i++) {
        const OutTensor* o = &l->t[i];
        size_t bytes = o->numel * sizeof(float);
        memcpy(data + pos, o->data, bytes);
        pos += bytes;
    }
    uint64_t n = hlen;
    int rc = write_file_atomic(path, &n, 8, hdr, hlen, data, off);
    free(hdr);
    free(data);
    return rc;
}

// A config value as config_write spells it: floats in their shortest round-trip form. Returned by
// value (the array lives until the end of the caller's full expression, C11 6.2.4p8), so two calls
// in one fprintf give two values (a static buffer here once wrote beta_slow = beta_fast).
typedef struct { char s[1100]; } KeyText;
static KeyText key_text(const Config* c, const char* section, const char* key) {
    KeyText v = {{0}};
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        if (strcmp(config_key(i, &sec), key) == 0 && strcmp(sec, section) == 0) config_key_value(c, i, v.s, sizeof v.s);
    }
    return v;
}

// A float key as a JSON float: "2" becomes "2.0", since transformers' checks want a float where
// it says so (a yarn attention_factor of 2 is warned about as "must be a float").
static KeyText key_float(const Config* c, const char* section, const char* key) {
    KeyText v = key_text(c, section, key);
    if (!strpbrk(v.s, ".eEn")) strcat(v.s, ".0");
    return v;
}
static KeyText model_float(const Config* c, const char* key) { return key_float(c, "model", key); }

// partial_rotary_factor for rot of hd channels: transformers takes the rotary dim as
// int(head_dim * factor) in double, so the factor written is rot/hd, or the next double up where
// rot/hd * hd rounds below rot (the int() would lose a channel)
static double hf_partial_factor(int rot, int hd) {
    double f = (double)rot / hd;
    while ((int)(hd * f) < rot) f = nextafter(f, 2.0);
    return f;
}

// transformers 5's rope_parameters for a RoPE model (kernels/rope.h follows its definitions; "ntk"
// is a larger base, exactly: rope_theta = rope_base * s^(rot/(rot-2)), rot the rotated channels;
// transformers' "dynamic" recomputes a base per length by another formula, so it is not used).
// partial: the class reads partial_rotary_factor (Qwen3-Next: absent means 0.25), written always.
static void write_rope(FILE* f, const Config* c, int partial) {
    const ModelConfig* m = &c->model;
    const int rot = m->rope_dim > 0 ? m->rope_dim : m->head_dim;
    int lin = m->rope_scaling == ROPE_SCALING_LINEAR, yarn = m->rope_scaling == ROPE_SCALING_YARN;
    fprintf(f, "  \"rope_parameters\": {\"rope_type\": \"%s\", ", lin ? "linear" : yarn ? "yarn" : "default");
    if (m->rope_scaling == ROPE_SCALING_NTK) {
        char theta[64];
        snprintf(theta, sizeof theta, "%.17g", (double)m->rope_base * pow((double)m->rope_factor, (double)rot / (rot - 2)));
        fprintf(f, "\"rope_theta\": %s%s", theta, strpbrk(theta, ".eEn") ? "" : ".0");
    } else {
        fprintf(f, "\"rope_theta\": %s", model_float(c, "rope_base").s);
    }
    if (lin || yarn) fprintf(f, ", \"factor\": %s", model_float(c, "rope_factor").s);
    // the training length only for yarn (its ramp); transformers' linear warns about it as unknown
    if (yarn) {
        fprintf(f, ", \"original_max_position_embeddings\": %d", m->rope_original_len);
        fprintf(f, ", \"beta_fast\": %s, \"beta_slow\": %s", model_float(c, "yarn_beta_fast").s, model_float(c, "yarn_beta_slow").s);
        if (m->yarn_attn_factor > 0.0f) fprintf(f, ", \"attention_factor\": %s", model_float(c, "yarn_attn_factor").s);
    }
    if (partial) {
        char pf[64];
        snprintf(pf, sizeof pf, "%.17g", hf_partial_factor(rot, m->head_dim));
        fprintf(f, ", \"partial_rotary_factor\": %s%s", pf, strpbrk(pf, ".eEn") ? "" : ".0");
    }
    fprintf(f, "},\n");
}

static int write_config_json(const char* path, const Config* c, HfClass k, int step, int eot) {
    const ModelConfig* m = &c->model;
    const MoeConfig* e = &m->moe;
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    static const char* const TYPE[] = {"gatedgpt", "gpt2", "llama", "qwen3", "qwen3_next", "qwen3_moe", "qwen2_moe"};
    fprintf(f, "{\n");
    fprintf(f, "  \"architectures\": [\"%s\"],\n", k == HF_NONE ? "GatedGPTForCausalLM" : export_hf_class_name(k));
    fprintf(f, "  \"model_type\": \"%s\",\n", TYPE[k]);
    fprintf(f, "  \"vocab_size\": %d,\n", m->vocab_size);
    if (k == HF_GPT2) {
        fprintf(f, "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_positions\": %d,\n  \"n_inner\": %d,\n",
                m->d_model, m->n_layer, m->n_head, m->max_seq_len, m->d_ff);
        fprintf(f, "  \"activation_function\": \"gelu_new\",\n");
        fprintf(f, "  \"layer_norm_epsilon\": %s,\n", model_float(c, "norm_eps").s);
        fprintf(f, "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n  \"scale_attn_weights\": true,\n");
    } else {
        fprintf(f, "  \"hidden_size\": %d,\n", m->d_model);
        fprintf(f, "  \"intermediate_size\": %d,\n", m->d_ff);
        fprintf(f, "  \"num_hidden_layers\": %d,\n", m->n_layer);
        fprintf(f, "  \"num_attention_heads\": %d,\n", m->n_head);
        fprintf(f, "  \"num_key_value_heads\": %d,\n", m->n_kv_head);
        fprintf(f, "  \"head_dim\": %d,\n", m->head_dim);
        fprintf(f, "  \"max_position_embeddings\": %d,\n", m->max_seq_len);
        if (k == HF_NONE) {
            fprintf(f, "  \"rope_theta\": %s,\n", model_float(c, "rope_base").s);
            fprintf(f, "  \"norm_eps\": %s,\n", model_float(c, "norm_eps").s);
        } else {
            write_rope(f, c, k == HF_QWEN3_NEXT);
            fprintf(f, "  \"rms_norm_eps\": %s,\n", model_float(c, "norm_eps").s);
            fprintf(f, "  \"hidden_act\": \"silu\",\n");
            fprintf(f, "  \"attention_bias\": false,\n");
            if (k == HF_LLAMA) fprintf(f, "  \"mlp_bias\": false,\n");
        }
        if (k == HF_QWEN3_NEXT) {
            fprintf(f, "  \"layer_types\": [");
            for (int l = 0; l < m->n_layer; l++)
                fprintf(f, "%s\"%s\"", l ? ", " : "", config_layer_is_linear(m, l) ? "linear_attention" : "full_attention");
            fprintf(f, "],\n");
            if (config_any_linear(m))
                fprintf(f, "  \"linear_num_key_heads\": %d,\n  \"linear_num_value_heads\": %d,\n  \"linear_key_head_dim\": %d,\n"
                           "  \"linear_value_head_dim\": %d,\n  \"linear_conv_kernel_dim\": %d,\n",
                        m->linear_n_k_head, m->linear_n_v_head, m->linear_k_head_dim, m->linear_v_head_dim, m->linear_conv_kernel);
        }
        if (k == HF_QWEN2_MOE) fprintf(f, "  \"qkv_bias\": false,\n  \"use_sliding_window\": false,\n");
        if (k == HF_QWEN3_MOE || k == HF_QWEN2_MOE || (k == HF_QWEN3_NEXT && e->n_expert > 0)) {
            fprintf(f, "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n",
                    e->n_expert, e->top_k, e->d_expert);
            fprintf(f, "  \"norm_topk_prob\": true,\n  \"decoder_sparse_step\": %d,\n  \"mlp_only_layers\": [],\n", e->moe_every);
            if (k != HF_QWEN3_MOE) fprintf(f, "  \"shared_expert_intermediate_size\": %d,\n", e->d_shared_expert);
            fprintf(f, "  \"router_aux_loss_coef\": %s,\n", key_float(c, "moe", "aux_loss_coef").s);
        } else if (k == HF_QWEN3_NEXT) {
            fprintf(f, "  \"num_experts\": 0,\n  \"mlp_only_layers\": [");
            for (int l = 0; l < m->n_layer; l++) fprintf(f, "%s%d", l ? ", " : "", l);
            fprintf(f, "],\n");
        }
    }
    if (eot >= 0) fprintf(f, "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n", eot, eot);
    fprintf(f, "  \"tie_word_embeddings\": %s,\n", m->tie_embeddings ? "true" : "false");
    fprintf(f, "  \"dtype\": \"float32\",\n");
    // every [model] and [moe] key as gatedgpt spells it, and the step: enough to rebuild the model
    fprintf(f, "  \"gatedgpt\": {\"step\": %d", step);
    for (int i = 0; i < config_key_count(); i++) {
        const char* sec;
        const char* key = config_key(i, &sec);
        if (strcmp(sec, "model") != 0 && strcmp(sec, "moe") != 0) continue;
        char v[1100];
        config_key_value(c, i, v, sizeof v);
        fprintf(f, ", \"%s%s\": \"%s\"", strcmp(sec, "moe") == 0 ? "moe." : "", key, v);
    }
    fprintf(f, "}\n}\n");
    fclose(f);
    int rc = write_file_atomic(path, text, len, NULL, 0, NULL, 0);
    free(text);
    return rc;
}

int export_hf(const char* out_dir, const Config* c, const ParamTable* t, const float* params, int step,
              int raw, int eot, FILE* log) {
    char why[512] = "";
    HfClass k = raw ? HF_NONE : export_hf_class(&c->model, why, sizeof why);
    if (!raw && k == HF_NONE) {
        fprintf(stderr, "error: export: %s; or --format raw for gatedgpt's own names (docs/formats.md \"Export\")\n", why);
        return -1;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: export: cannot create the output directory '%s': %s\n", out_dir, strerror(errno));
        return -1;
    }
    OutList l = {0};
    if (k == HF_GPT2) build_gpt2(&l, &c->model, t, params);
    else if (k != HF_NONE) build_qwen(&l, &c->model, t, params, k);
    else build_tensors(&l, &c->model, t, params, log);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    int rc = write_safetensors(path, &l, step);
    if (rc == 0 && log) {
        size_t total = 0;
        for (int i = 0; i < l.n; i++) total += l.t[i].numel;
        fprintf(log, "export: %s: %d tensors, %zu floats, as %s\n", path, l.n, total,
                k == HF_NONE ? "gatedgpt's own names (--format raw)" : export_hf_class_name(k));
    }
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (rc == 0) rc = write_config_json(path, c, k, step, eot);
    if (rc == 0 && log) fprintf(log, "export: %s\n", path);
    for (int i = 0; i < l.n; i++) free(l.t[i].data);
    free(l.t);
    return rc;
}
