// model/config.h: ModelConfig / TrainConfig and the run configuration.
// Parsed from INI files (libinih) with `--section.key=value` overrides; every key has a
// default, a documented meaning (docs/config.md) and a validation rule.
#pragma once
#include <stdio.h>
#include "../kernels/ops_types.h"   // the ops' enums and OpsAttnShape (config_attn_shape)

// ---- enums (the INI spelling is given next to each value) ----
typedef enum { POS_ROPE = 0, POS_LEARNED = 1 } PosKind;               // "rope" | "learned"
typedef enum { NORM_RMSNORM = 0, NORM_LAYERNORM = 1 } NormKind;       // "rmsnorm" | "layernorm"
typedef enum { MLP_SWIGLU = 0, MLP_GELU = 1 } MlpKind;                // "swiglu" | "gelu"
typedef enum { GATE_NONE = 0, GATE_ELEMENTWISE = 1, GATE_HEADWISE = 2 } GateKind; // "none" | "elementwise" | "headwise"
typedef enum { GATEPOS_SDPA = 0, GATEPOS_VALUE = 1 } GatePos;         // "sdpa" | "value"
typedef enum { GATEACT_SIGMOID = 0, GATEACT_NS_SIGMOID = 1, GATEACT_SILU = 2 } GateAct; // "sigmoid" | "ns_sigmoid" | "silu"
typedef enum { DOCPOS_CONTINUE = 0, DOCPOS_RESTART = 1 } DocPosKind;   // "continue" | "restart"
typedef enum { ATTN_IMPL_FUSED = 0, ATTN_IMPL_CUDNN = 1, ATTN_IMPL_FLASH = 2 } AttnImpl;   // "fused" | "cudnn" | "flash" (= OpsAttnImpl)
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1 } PrecisionKind;   // "fp32" | "bf16" (the CPU trainer's)
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 } RecomputeKind; // "none" | "selective" | "full"
typedef enum { SCHED_COSINE = 0, SCHED_LINEAR = 1, SCHED_CONSTANT = 2, SCHED_WSD = 3 } SchedKind; // "cosine" | "linear" | "constant" | "wsd"
typedef enum { CKPT_ON_ERROR_CONTINUE = 0, CKPT_ON_ERROR_EXIT = 1 } CkptOnError; // "continue" | "exit"
typedef enum { ROUTER_SOFTMAX_TOPK = 0, ROUTER_SIGMOID_TOPK = 1 } RouterKind; // "softmax_topk" | "sigmoid_topk"
typedef enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LINEAR = 1, ROPE_SCALING_NTK = 2, ROPE_SCALING_YARN = 3 } RopeScalingKind; // "none" | "linear" | "ntk" | "yarn"

// The gate's enums are the ops' (kernels/ops_types.h) value for value: config_attn_shape below
// casts one into the other.
#ifdef __cplusplus
#define CONFIG_SAME_VALUE(a, b) static_assert((int)(a) == (int)(b), #a " must equal " #b)
#else
#define CONFIG_SAME_VALUE(a, b) _Static_assert((int)(a) == (int)(b), #a " must equal " #b)
#endif
CONFIG_SAME_VALUE(GATE_NONE, OPS_GATE_NONE);
CONFIG_SAME_VALUE(GATE_ELEMENTWISE, OPS_GATE_ELEMENTWISE);
CONFIG_SAME_VALUE(GATE_HEADWISE, OPS_GATE_HEADWISE);
CONFIG_SAME_VALUE(GATEPOS_SDPA, OPS_GATEPOS_SDPA);
CONFIG_SAME_VALUE(GATEPOS_VALUE, OPS_GATEPOS_VALUE);
CONFIG_SAME_VALUE(GATEACT_SIGMOID, OPS_ACT_SIGMOID);
CONFIG_SAME_VALUE(GATEACT_NS_SIGMOID, OPS_ACT_NS_SIGMOID);
CONFIG_SAME_VALUE(GATEACT_SILU, OPS_ACT_SILU);
CONFIG_SAME_VALUE(ROPE_SCALING_NONE, OPS_ROPE_NONE);
CONFIG_SAME_VALUE(ROPE_SCALING_LINEAR, OPS_ROPE_LINEAR);
CONFIG_SAME_VALUE(ROPE_SCALING_NTK, OPS_ROPE_NTK);
CONFIG_SAME_VALUE(ROPE_SCALING_YARN, OPS_ROPE_YARN);

// [moe]: Mixture-of-Experts layers (docs/config.md, docs/architecture.md). Part of the model:
// n_expert = 0 is a dense model, and then every other [moe] key must stay at its default.
typedef struct {
    int n_expert;          // routed experts per MoE layer; 0 = no MoE layers
    int top_k;             // experts each token is sent to (1..n_expert)
    int d_expert;          // hidden width of each expert's FFN (swiglu: of gate and up each); 0 = d_ff
    int n_shared_expert;   // 0 or 1: an expert every token passes through, added to the routed output
    int d_shared_expert;   // the shared expert's hidden width; 0 = d_expert
    int shared_expert_gate;// bool: scale the shared expert's output by sigmoid(x w_g) per token (Qwen2-MoE)
    int moe_every;         // layer l (0-based) is an MoE layer when (l + 1) % moe_every == 0
    RouterKind router;
    float aux_loss_coef;   // weight of the load-balancing loss E * sum_i f_i P_i
    float z_loss_coef;     // weight of the router z-loss mean_t logsumexp(logits_t)^2
    float capacity_factor; // 0 = dropless; else each expert takes at most ceil(cf * N * top_k / n_expert) slots
    int expert_parallel;   // P: the experts of each MoE layer are computed on P processes, n_expert / P each,
                           // tokens exchanged by all-to-all (docs/distributed.md); 1 = every process all
} MoeConfig;

// [model]
typedef struct {
    int vocab_size;      // real vocabulary size (token ids 0..vocab_size-1)
    int padded_vocab;    // derived: vocab_size rounded up to a multiple of 128 (not a key)
    int n_layer;
    int d_model;
    int n_head;          // query heads
    int n_kv_head;       // key/value heads (GQA); n_head % n_kv_head == 0
    int head_dim;        // 0 = d_model/n_head; an explicit value may make n_head*head_dim != d_model (Qwen3 style)
    int d_ff;            // MLP hidden width (swiglu: width of each of gate/up)
    int max_seq_len;     // positions table size for learned positions; upper bound on T
    PosKind pos;
    float rope_base;
    float rope_fraction; // partial RoPE: the fraction of each head's channels that turn (the
                         // first ones; transformers' partial_rotary_factor); 1 = all
    int rope_dim;        // derived (not a key): head_dim * rope_fraction, the rotated channels
    // RoPE scaling for contexts longer than training (kernels/rope.h; docs/config.md)
    RopeScalingKind rope_scaling;
    float rope_factor;       // s = L_new / L_train, >= 1
    int rope_original_len;   // L_train for YaRN's ramp; 0 = [train] seq_len (filled in by finalize)
    float yarn_beta_fast;    // 32
    float yarn_beta_slow;    // 1
    float yarn_attn_factor;  // 0 = 0.1 ln(s) + 1; else 0.25 .. 4 (the logits scale by its square)
    NormKind norm;
    float norm_eps;
    int qk_norm;         // bool: RMSNorm over head_dim on q and k (weights of size head_dim)
    MlpKind mlp;
    int tie_embeddings;  // bool: LM head shares the token embedding
    int bias;            // bool: the attention's and the dense MLP's linear layers add a bias (GPT-2:
                         // attn.bqkv, attn.bo, mlp.b_in, mlp.b_out); MoE experts and Gated DeltaNet layers
                         // have none; LayerNorm keeps its own bias either way
    GateKind attn_gate;
    GatePos gate_position;
    GateAct gate_act;
    float init_std;      // 0.02
    // Hybrid layers (Qwen3-Next layout; docs/config.md "Hybrid layers"): which layers mix tokens
    // with full (softmax) attention and which with a Gated DeltaNet (linear attention).
    char layer_pattern[64];  // "" = every layer full attention; else 'A' (full attention) and 'L'
                             // (Gated DeltaNet) per layer, the string repeated over n_layer
                             // (its length divides n_layer): "LLLA" = Qwen3-Next's 3:1
    int linear_n_k_head;     // query/key heads of the delta rule; 0 = max(1, linear_n_v_head / 2)
    int linear_n_v_head;     // value heads (a multiple of linear_n_k_head); 0 = n_head
    int linear_k_head_dim;   // 0 = head_dim
    int linear_v_head_dim;   // 0 = head_dim
    int linear_conv_kernel;  // the causal depthwise conv's width (Qwen3-Next: 4)
    GateAct linear_gate_act; // the output gate's activation on the normed output: silu (Qwen3-Next)
    int linear_chunk;        // training forward: chunk length of the chunked delta rule; 0 = recurrent
    MoeConfig moe;       // the [moe] section
} ModelConfig;

// 1 if layer l (0-based) mixes tokens with a Gated DeltaNet (linear attention), 0 if with full
// attention (layer_pattern).
static inline int config_layer_is_linear(const ModelConfig* c, int l) {
    int n = 0;
    while (n < (int)sizeof c->layer_pattern && c->layer_pattern[n]) n++;
    return n > 0 && c->layer_pattern[l % n] == 'L';
}
// 1 if the model has any Gated DeltaNet layer.
static inline int config_any_linear(const ModelConfig* c) {
    for (int l = 0; l < c->n_layer; l++) if (config_layer_is_linear(c, l)) return 1;
    return 0;
}
// The gated delta rule's shape (kernels/ops_types.h) of this model's linear layers, B x T.
static inline OpsGdnShape config_gdn_shape(const ModelConfig* c, int B, int T) {
    OpsGdnShape s = {0};
    s.B = B; s.T = T; s.Hk = c->linear_n_k_head; s.Hv = c->linear_n_v_head;
    s.dk = c->linear_k_head_dim; s.dv = c->linear_v_head_dim; s.chunk = c->linear_chunk;
    return s;
}
// 1 if layer l (0-based) of a model with this config is an MoE layer.
static inline int config_layer_is_moe(const ModelConfig* c, int l) {
    return c->moe.n_expert > 0 && (l + 1) % c->moe.moe_every == 0;
}

// The attention ops' shape (kernels/ops_types.h) of a model with this config, for B sequences
// of T tokens (0, 0 where only the column layout matters) and attention kernel impl.
static inline OpsAttnShape config_attn_shape(const ModelConfig* c, int B, int T, OpsAttnImpl impl) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = c->n_head; s.Hkv = c->n_kv_head; s.hd = c->head_dim;
    s.qk_norm = c->qk_norm; s.rope = c->pos == POS_ROPE; s.rope_base = c->rope_base;
    s.rope_dim = c->rope_dim;   // 0 (a config never finalized) = every channel
    s.rope_scale = (OpsRope){ (OpsRopeScaling)c->rope_scaling, c->rope_factor, c->rope_original_len,
                              c->yarn_beta_fast, c->yarn_beta_slow, c->yarn_attn_factor };
    s.eps = c->norm_eps; s.gate = (OpsGate)c->attn_gate;
    s.gate_pos = (OpsGatePos)c->gate_position; s.gate_act = (OpsGateAct)c->gate_act;
    s.impl = impl;
    return s;
}

// [train]
typedef struct {
    unsigned long long seed;
    int batch_size;      // B: micro-batch sequences per process
    int seq_len;         // T: tokens per sequence (<= max_seq_len)
    long tokens_per_step;// global tokens per optimizer step; grad accum = tokens_per_step/(B*T); 0 = B*T
    int steps;           // total optimizer steps
    float lr;            // peak learning rate
    float min_lr_frac;   // final lr = lr * min_lr_frac (cosine/linear/wsd)
    int warmup_steps;
    SchedKind schedule;
    float wsd_decay_frac;// wsd: fraction of steps spent in the final linear decay
    float weight_decay;  // decoupled, applied to 2-D parameters (matrices, embeddings) only
    float beta1, beta2, eps;
    float grad_clip;     // global-norm clip; 0 = off
    int threads;         // OpenMP threads; 0 = library default
    int zero_stage;      // data parallelism: 0 = all-reduce gradients, 1 = ZeRO-1 (sharded AdamW state)
    AttnImpl attn_impl;  // attention kernel: the backend's own, or cuDNN's fused SDPA (CUDA backend)
    RecomputeKind recompute; // activation recomputation in the backward (GPT.recompute, model/gpt.c)
    PrecisionKind precision; // CPU: fp32 (train_gpt) or bf16 (train_gpt_bf16, which train_gpt runs for it)
    float hang_timeout_s;     // watchdog: end the job after this long without progress; 0 = off (train/watchdog.h)
    float straggler_factor;   // straggler report: a rank slower than factor x the median compute time is slow
    int straggler_reports;    // ... in this many reports in a row: a warning names it (train/straggler.h)
} TrainConfig;

// [data]
typedef struct {
    char train_glob[1024]; // token shards (llm.c format)
    char val_glob[1024];
    char sources[1024];     // weighted mixture "name:weight:glob ..." instead of train_glob (config_parse_sources)
    char val_sources[1024]; // the same for validation, instead of val_glob (a val_loss_<name> each)
    int shuffle;           // bool: shuffle shard and sample order per epoch (seeded by [train] seed)
    char tokenizer[1024];  // tokenizer file for samples (ours or llm.c's gpt2_tokenizer.bin); empty = bytes
    int bos;               // bool: every sample starts with the BOS token (dataloader_set_bos)
    int bos_token;         // its id; -1 = the tokenizer's end-of-text token
    int doc_mask;          // bool: attention within documents, the tokenizer's end-of-text token closing
                           // each (model/doc_mask.h)
    DocPosKind doc_positions; // with doc_mask: RoPE positions go on across documents or restart at each
} DataConfig;

// [log]
typedef struct {
    char run_dir[1024];  // where config.ini and log.jsonl are written
    int log_every;       // print a step line every N steps
    int val_every;       // validation loss every N steps (0 = off)
    int val_batches;     // batches per validation
    int sample_every;    // print a generated sample every N steps (0 = off)
    int sample_tokens;   // tokens to generate per sample
    float sample_temperature; // softmax temperature (> 0)
    int sample_top_k;    // sample among the k most likely tokens (0 = all)
    char sample_prompt[1024]; // text the sample continues; empty = start from end-of-text
    int tensorboard;     // bool: every record's numbers also go to <run_dir>/tb/events.out.tfevents.* (train/tb.h)
} LogConfig;

// [checkpoint]
typedef struct {
    int checkpoint_every;  // 0 = off
    int keep_last;         // keep the newest K checkpoints; 0 = keep all
    int keep_every;        // also keep (forever) checkpoints whose step is a multiple of this; 0 = none
    char dir[1024];        // empty = <run_dir>/checkpoints
    CkptOnError on_write_error; // a failed write: keep training, or exit non-zero
    int async;             // bool: the step loop snapshots the state, a writer thread writes it (train/ckpt_async.h)
} CheckpointConfig;

// Upper bound on the number of keys (all sections); config.c static-asserts its table fits.
#define CONFIG_MAX_KEYS 128
#define CONFIG_ORIGIN_LEN 256

// [metrics]: the stability probe and the spike detector (docs/metrics.md)
typedef struct {
    int probe_every;      // probe forward on a fixed validation batch every N steps (0 = off)
    int spike_window;     // trailing window (steps) for the loss / grad-norm z-scores
    float spike_z;        // log a spike record when z exceeds this
    float skip_loss_z;    // skip the update when the loss z-score exceeds this (0 = never)
    float skip_grad_z;    // skip the update when the grad-norm z-score exceeds this (0 = never)
    int max_nonfinite;    // stop after this many non-finite steps in a row
} MetricsConfig;

// [eval]: multiple-choice tasks during training (train/mc_eval.h, docs/metrics.md)
typedef struct {
    char tasks[1024];     // comma-separated JSONL task files (data/mc_task.h); empty = none
    int task_every;       // evaluate them every N steps, at step 0 and at the end (0 = off)
    int task_limit;       // the first N examples of each file (0 = all)
} EvalConfig;

typedef struct {
    ModelConfig model;
    TrainConfig train;
    DataConfig data;
    LogConfig log;
    CheckpointConfig ckpt;
    MetricsConfig metrics;
    EvalConfig eval;
    // Where each key's value came from, indexed like config_key(): "FILE:LINE", "command line",
    // "derived: RULE[ (0 at WHERE)]" once config_finalize filled it in, or "" for the default. Read it with config_origin(); not part of the configuration itself
    // (config_equal ignores it).
    char origin[CONFIG_MAX_KEYS][CONFIG_ORIGIN_LEN];
} Config;

// Fill every field with its default.
void config_defaults(Config* c);
// Parse an INI file into c (on top of what is there). Returns 0, or prints a one-line error
// "config error: FILE:LINE: [section] key = value: message (accepted: ...)" to stderr and
// returns -1. Only syntax is checked here (unknown section/key, number/bool/enum format);
// ranges and cross-field rules are checked by config_finalize, so a later override can fix
// a value. A missing file is an error naming the file.
int config_load_file(Config* c, const char* path);
// Apply one override "section.key=value" (the leading "--" already stripped). Same errors,
// with "command line" in place of FILE:LINE.
int config_apply_override(Config* c, const char* arg);
// Range and cross-field validation, then the derived fields: n_kv_head 0 -> n_head,
// head_dim 0 -> d_model/n_head, d_ff 0 -> 4*d_model, tokens_per_step 0 -> batch_size*seq_len,
// padded_vocab; with n_expert > 0: d_expert 0 -> d_ff, d_shared_expert 0 -> d_expert. The one-line error names the offending key and the FILE:LINE it was set at;
// for a key left at its default, `origin` (the config file, may be NULL) is named instead.
// Idempotent: finalizing a finalized config changes nothing.
int config_finalize(Config* c, const char* origin);
// The last step of finalization for a run of nproc processes (after config_finalize): [train]
// tokens_per_step is global, so a derived one becomes batch_size*seq_len*nproc and a set one must
// be a multiple of it. Returns 0, or -1 after an error line naming `where` (the config file).
int config_finalize_processes(Config* c, const char* where, int nproc);
// Write the resolved config as INI (every key, canonical spelling); readable by config_load_file,
// and loading it back gives a config equal to c (config_equal). Keys not at their default carry
// a trailing "; FILE:LINE" comment saying where the value came from.
void config_write(const Config* c, FILE* f);
// Enum names for printing: config_enum_name("attn_gate", GATE_HEADWISE) == "headwise".
// NULL for a key that is not an enum or a value out of range.
const char* config_enum_name(const char* key, int value);

// ---- introspection (tests, --check output, resume checks) ----
// 1 if every key (and padded_vocab) has the same value in a and b; origins are ignored.
int config_equal(const Config* a, const Config* b);
// Where the value of [section] key came from: "FILE:LINE", "command line", "default", or
// "derived: RULE" (plus " (0 at WHERE)" when the 0 was set explicitly) after config_finalize.
// NULL if there is no such key.
const char* config_origin(const Config* c, const char* section, const char* key);
// Number of keys, and the i-th key's name and section (table order, as config_write writes).
int config_key_count(void);
const char* config_key(int i, const char** section);
// The i-th key's value as config_write writes it ("" for i out of range).
void config_key_value(const Config* c, int i, char* buf, size_t n);

// [data] sources / val_sources: a list of name:weight:glob entries separated by commas or
// whitespace (a glob holds neither). Names are unique, 1..31 of [A-Za-z0-9_] (they become log
// fields: tokens_<name>); weights are positive numbers, returned normalized to sum 1.
#define CONFIG_MAX_SOURCES 16
typedef struct {
    char name[32];
    double weight;        // normalized: the weights of a list sum to 1
    char glob[1024];
} ConfigSource;
// Returns the number of entries (>= 1), or -1 with a one-line reason (no "error:" prefix) in err.
int config_parse_sources(const char* text, ConfigSource* out, int max, char* err, size_t errlen);
