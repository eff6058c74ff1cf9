// model/gpt.h: the whole network, written once over kernels/ops.h.
#pragma once
#include "config.h"
#include "params.h"
#include "moe.h"
#include "kv_cache.h"
#include "../kernels/ops.h"

// Activations of one layer for one micro-batch (N = B*T tokens), kept for the backward pass.
// act_t: the build's activation storage type (kernels/ops_types.h: fp32, or bf16); float:
// fp32 in every build (the residual stream, statistics, the router).
// With [train] recompute = selective or full, the tensors that mode does not keep point into
// one set of buffers shared by all layers (model/gpt.c, acts_kept): they hold layer l's values
// after its forward until the next layer's, and again after gpt_layer_recompute(m, l).
typedef struct {
    float* res_in;     // [N, d]   residual stream entering the layer (owned by GPT.res)
    act_t* ln1;        // [N, d]   normed input X that feeds q, k, v and the gate
    float* ln1_mean;   // [N]
    float* ln1_rstd;   // [N]
    act_t* qkv;        // [N, QKVG] fused projection output: [q | k | v | gate logits]
    act_t* q;          // [N, H*hd]  after qk-norm and RoPE
    act_t* k;          // [N, Hkv*hd]
    act_t* v;          // [N, Hkv*hd] after the value gate (if any)
    float* qk_rstd;    // [N, H+Hkv] qk-norm statistics
    act_t* y;          // [N, H*hd] attention output before the sdpa gate
    act_t* yg;         // [N, H*hd] after the gate (== y when there is no sdpa gate)
    float* lse;        // [B, H, T] row logsumexp of the attention scores
    float* res_mid;    // [N, d]   residual after attention
    act_t* ln2;        // [N, d]
    float* ln2_mean;   // [N]
    float* ln2_rstd;   // [N]
    act_t* mlp_pre;    // [N, 2F] swiglu or [N, F] gelu: output of w_in (dense layers)
    act_t* mlp_act;    // [N, F]   input of w_out
    // MoE layers instead of mlp_pre, mlp_act. E experts, k = top_k, S = N*k routed slots,
    // R <= S kept (permuted) rows; Fe/Fs = d_expert/d_shared_expert, Fin = 2F swiglu, F gelu.
    float* router_logits; // [N, E]   fp32 always
    float* router_probs;  // [N, E]   the distribution the aux loss averages
    float* router_lse;    // [N]      logsumexp of the logits (z-loss)
    int* topk_idx;        // [N, k]   chosen experts, best first
    float* topk_w;        // [N, k]   their renormalised weights
    int* counts;          // [E]      slots that chose each expert
    int* offsets;         // [E + 1]  each expert's first row in the permuted buffers
    int* row_slot;        // [S]      permuted row -> slot (first R used)
    int* slot_row;        // [S]      slot -> permuted row, -1 if dropped
    act_t* xp;            // [S, d]   permuted expert inputs (rows of ln2)
    // expert parallelism ([moe] expert_parallel = P > 1; model/moe.h MoeExchange): ep_pre,
    // ep_act (and the backward's d_ep_pre, d_ep_act) are not allocated; the rows received live
    // in GPT.moe_ep_rows[l], sized from the exchanged counts
    int* ep_rc;           // [E]      rows received from each group member for each local expert
    act_t* ep_pre;        // [S, Fin_e] output of the experts' w_in
    act_t* ep_act;        // [S, Fe]  input of the experts' w_out
    act_t* yp;            // [S, d]   expert outputs before their routing weights
    act_t* sh_pre;        // [N, Fin_s] shared expert (n_shared_expert = 1)
    act_t* sh_act;        // [N, Fs]
    act_t* sh_out;        // [N, d]   shared expert output before its gate (shared_expert_gate)
    float* sh_z;          // [N]      shared expert gate logits
    // Gated DeltaNet layers (config_layer_is_linear) instead of qkv .. lse: fp32 throughout
    // (like the router). Kd = Hk*dk, Vd = Hv*dv, Cc = 2*Kd + Vd (model/params.h).
    float* g_xqkv;        // [N, Cc]  X W_qkv^T: the conv's input
    float* g_pre;         // [N, Cc]  the conv's output before SiLU
    float* g_xc;          // [N, Cc]  after SiLU: [q | k | v] (v read from here, row stride Cc)
    float* g_qk;          // [N, 2Kd] [q | k] L2-normalised per head
    float* g_rinv;        // [N, 2Hk] their 1/norms
    float* g_z;           // [N, Vd]  the output gate's logits
    float* g_ba;          // [N, 2Hv] [b | a]
    float* g_g;           // [N, Hv]  log decay g = -exp(A_log) softplus(a + dt_bias)
    float* g_beta;        // [N, Hv]  sigmoid(b)
    float* g_o;           // [N, Vd]  the delta rule's output
    float* g_gdn_saved;   // the chunked delta rule's Vn [N, Vd] and chunk-start states [B, Hv, ceil(T/C), dv, dk],
                          // kept for its backward (GptLayout.gdn_keeps_saved; else NULL)
    float* g_rstd;        // [N, Hv]  the gated norm's statistics
    float* g_on;          // [N, Vd]  rmsnorm(o) w act(z): the output projection's input
    act_t* g_on_act;      // [N, Vd]  its act_t copy for the GEMM (g_on itself when act_t is fp32)
} LayerActs;

typedef struct GPT {
    ModelConfig cfg;
    ParamTable table;
    float* params;       // arena [table.total] in backend memory; the master shard when sharded (below)
    float* grads;        // arena, same layout
    ModelWeights w;      // pointers into params (sharded master: see below)
    // ZeRO-1 with the fp32 master sharded (gpt_build_shard): params holds only the arena's floats
    // [master_lo, master_hi) (element i at params[i - master_lo]; 0 and table.total when whole).
    // The tensors read in fp32 (gpt_fp32_ranges) are held whole besides, packed in params_f32:
    // range k [f32[k][0], f32[k][1]) at params_f32 + f32_at[k]; m->w's fp32 tensors point there.
    // m->w's other tensors are only keys for gpt_act_w (their fp32 values live in the shard):
    // they point at the same offsets of grads, never read through m->w.
    size_t master_lo, master_hi;
    float* params_f32;   // NULL when whole
    size_t (*f32)[2];
    size_t* f32_at;
    int nf32;
    // The compute copy of the weights that the GEMMs read (act_t [table.total], same layout):
    // with bf16 act_t a bf16 arena, refreshed from params by stochastic rounding
    // (ops_weights_to_act) at the first forward after they change; with fp32 act_t it is params.
    // gpt_act_w maps a weight of m->w to its copy.
    act_t* params_act;
    int params_act_stale;          // params changed since the copy was made (gpt_params_changed)
    unsigned long long params_act_seed;   // the stochastic rounding's seed for the next refresh
    unsigned long long seed;       // the model's seed (gpt_build)
    ModelWeights g;      // pointers into grads
    OpsAttnShape attn;   // attention shape for the current B, T
    OpsAttnImpl attn_impl; // which attention kernel ([train] attn_impl); set before gpt_alloc_acts
    // which activations the backward recomputes instead of keeping them ([train] recompute:
    // none, selective, full); set before gpt_alloc_acts, which lays the arena out for it
    RecomputeKind recompute;

    // activations, sized for B x T at gpt_alloc_acts
    int B, T;
    float* acts;         // one arena for the fp32 tensors below
    act_t* aacts;        // one arena for the act_t tensors below (== acts' memory when act_t is
                         // fp32: then both lists share one arena)
    float** res;         // [n_layer + 1] residual streams [N, d]
    LayerActs* layer;    // [n_layer]
    act_t* lnf;          // [N, d]
    float *lnf_mean, *lnf_rstd;         // [N], [N]
    act_t* logits;       // [N, Vp] (overwritten by dlogits in backward)
    float* losses;       // [N]
    float* lse;          // [N] logsumexp of each logits row (saved for the backward)
    int *idx, *targets;  // [N] in backend memory
    // backward scratch. dres (fp32) is dL/d(residual stream); dres_act its act_t copy for the
    // GEMMs that read it (the same memory when act_t is fp32).
    float* dres;
    act_t* dres_act;
    act_t *dnorm, *dqkv, *dq, *dk, *dv, *dyg, *dscratch, *dmlp_pre, *dmlp_act;
    // MoE backward scratch (shared by the MoE layers; NULL in a dense model). d_router and
    // d_sh_z are fp32 (router, gate logits); their _act copies feed the GEMMs.
    float *d_router, *d_topk_w, *d_sh_z, *aux_grad;
    act_t *d_router_act, *d_sh_z_act;
    act_t *d_yp, *d_ep_act, *d_ep_pre, *d_sh_out, *d_sh_act, *d_sh_pre, *d_tmp;
    // Gated DeltaNet backward scratch (shared by the linear layers; NULL without any). fp32, with
    // act_t copies where a GEMM reads them (the tensors themselves when act_t is fp32).
    float *gd_on, *gd_o, *gd_z, *gd_qk, *gd_xc, *gd_xqkv, *gd_g, *gd_beta, *gd_ba;
    act_t *gd_on_act, *gd_z_act, *gd_xqkv_act, *gd_ba_act, *gd_tmp;
    OpsGdnShape gdn;     // the delta rule's shape for the current B, T (config_gdn_shape)
    int* iacts;          // integer activations (MoE dispatch), backend memory
    size_t acts_floats;  // fp32 elements in acts
    size_t aacts_elems;  // act_t elements in aacts (0 when they live in acts)
    size_t acts_bytes;   // both arenas
    size_t iacts_ints;

    // MoE: per-layer routing statistics (host; n_expert = 0 for dense layers), and the weighted
    // auxiliary losses of the last forward, summed over MoE layers: the objective that
    // gpt_backward differentiates is (returned loss) + moe_loss.
    MoeStats* moe_stats; // [n_layer]
    double moe_loss;
    // Data parallelism: when set, each MoE layer's expert counts of a training micro-batch
    // (E counts and the slot total, doubles) are summed over processes through this hook before
    // they enter the load-balancing loss, so f_i is over the global batch. The trainer sets it
    // around training micro-steps only (evaluation and probes run on one process).
    void (*moe_reduce)(void* ctx, double* x, int n);
    void* moe_reduce_ctx;
    // Expert parallelism: the exchange hooks (size, rank, counts, rows, ctx) the trainer sets
    // for every forward of a model built by gpt_build_ep with ep_size > 1 (training, evaluation,
    // probes and samples: each member of the group takes part); the scratch buffers (send, recv,
    // map) are the model's (allocated when [moe] expert_parallel > 1). A model with every expert
    // (gpt_build) computes them all itself without the hooks.
    MoeExchange moe_ep;
    MoeEpRows* moe_ep_rows;        // [n_layer] each MoE layer's received rows (grown at its forwards)
    MoeEpScratch moe_ep_scratch;   // the exchange's scratch, shared by the layers
    // Data parallelism: when set, gpt_backward calls it as soon as a layer's parameter gradients
    // are complete, with that layer's floats [lo, hi) of the gradient arena, so their reduction
    // over processes can run while the backward pass goes on (train/dist.h). The trainer sets it
    // around the last micro-step of an optimizer step only.
    void (*grads_ready)(void* ctx, size_t lo, size_t hi);
    void* grads_ready_ctx;
    // Inference: when set, gpt_forward takes its B x T tokens as the next T tokens of each of B
    // sequences whose earlier tokens are in this cache (model/kv_cache.h), at positions
    // kv->pos .. kv->pos + T - 1. NULL in training (gpt_backward needs the uncached forward).
    KVCache* kv;
    // gpt_forward_train wrote the logits' gradient (for dlogits_dloss) over the logits: the next
    // gpt_backward starts from them instead of running the cross-entropy backward
    int dlogits_ready;
    float dlogits_dloss;
    // Attention within documents ([data] doc_mask; model/doc_mask.h): doc_eot >= 0 turns it on
    // for the uncached forwards (training, evaluation, probes; never with kv), which compute each
    // token's document start (doc_start [doc_n] ints in backend memory, grown as needed) from
    // their tokens and hand it to the attention ops (OpsAttnShape.doc_start). gpt_set_doc_mask.
    int doc_eot;         // the end-of-text token that closes a document; -1 = off (plain causal)
    int doc_restart;     // RoPE positions restart at each document ([data] doc_positions = restart)
    int* doc_start;
    int doc_n;
    size_t* layer_lo;    // [n_layer] the layer's parameters: floats [layer_lo, layer_hi) of the
    size_t* layer_hi;    // arena (both 0 when they are not contiguous: never reported early)
} GPT;

// Build the parameter table and allocate params + grads (initialised from cfg and seed).
void gpt_build(GPT* m, const ModelConfig* cfg, unsigned long long seed);
// The same for member ep_rank of an expert-parallel group of ep_size (model/params.h
// param_table_build_ep): this process holds only its experts' parameters and gradients, and
// its forward and backward need the exchange hooks (GPT.moe_ep) set, with every member of the
// group taking part. ep_size 1 = gpt_build.
void gpt_build_ep(GPT* m, const ModelConfig* cfg, unsigned long long seed, int ep_size, int ep_rank);
// The same with only the fp32 master's shard [lo, hi) of the arena allocated (ZeRO-1, bf16
// act_t, train/dist.h dist_master_sharded), plus the fp32-read tensors whole (GPT.params_f32):
// the initial values are those of gpt_build_ep, bit for bit (the whole init stream is drawn on
// the host, then only the held floats are kept). lo = 0, hi = SIZE_MAX: the whole master
// (gpt_build_ep); any other range (clamped to the arena) is held as a shard. The compute copy is left stale: the caller rounds its shard and
// all-gathers the copy (train/dist.h dist_gather_weights) before the first forward.
void gpt_build_shard(GPT* m, const ModelConfig* cfg, unsigned long long seed, int ep_size, int ep_rank,
                     size_t lo, size_t hi);
// The master is sharded (gpt_build_shard with a part of the arena).
int gpt_master_sharded(const GPT* m);
// The whole arena on the host (host[table.total], the layout of model.bin) into what the model
// holds: the master's shard and the fp32-read tensors (or the whole master). For checkpoint
// loads; the caller then calls gpt_params_changed.
void gpt_params_from_host(GPT* m, const float* host);
// The held master floats [lo, hi) (inside [master_lo, master_hi)) to host[0 .. hi - lo).
void gpt_master_to_host(const GPT* m, float* host, size_t lo, size_t hi);
// (Re)allocate the activation arena for micro-batch B x T (T <= max_seq_len).
void gpt_alloc_acts(GPT* m, int B, int T);
void gpt_free(GPT* m);
// Layer l's activations of the last forward that [train] recompute did not keep, recomputed
// into their buffers (bit for bit; nothing when recompute = none). gpt_backward does it before
// each layer's backward; a reader of m->layer[l] after a forward (the probe) calls it first.
void gpt_layer_recompute(GPT* m, int l);
// Attention within documents closed by token eot (-1: off, the default of gpt_build), RoPE
// positions restarting at each document when restart != 0 (model/doc_mask.h). Attention layers
// only: a model with Gated DeltaNet layers refuses it (config_finalize says so first).
void gpt_set_doc_mask(GPT* m, int eot, int restart);
// Forward on host tokens idx[B*T]; with targets (host, [B*T]) returns the mean cross-entropy
// loss, else 0 and only the logits are computed. An MoE model also sets m->moe_loss and its
// routing statistics (m->moe_stats).
float gpt_forward(GPT* m, const int* idx, const int* targets);
// The training forward: gpt_forward with targets, whose cross-entropy also writes the logits'
// gradient for gpt_backward(m, dloss) (ops_xent_forward_backward: the logits read once and each
// exp taken once instead of twice), so the gpt_backward that follows must get the same dloss.
float gpt_forward_train(GPT* m, const int* idx, const int* targets, float dloss);
// Backward of the last forward (which must have had targets); accumulates into m->grads the
// gradient of dloss * (mean loss + moe_loss). dloss = the weight of this micro-batch in the
// objective (1/grad_accum_steps).
void gpt_backward(GPT* m, float dloss);
// Zero the gradients and start a new step: the MoE routing counts that the load-balancing loss
// uses (its f_i) accumulate from here over the step's micro-steps.
void gpt_zero_grad(GPT* m);
// The parameters changed (an optimizer step, a checkpoint load, a test's write): the compute
// copy of the weights is refreshed at the next forward, with stochastic rounding seeded by
// (model seed, step), so that a resumed run rounds as the uninterrupted one did.
void gpt_params_changed(GPT* m, long step);
// The compute copy (act_t) of a weight tensor of m->w, for the GEMMs. Refreshes it first if the
// parameters changed (gpt_forward does this anyway; a caller outside a forward needs it).
const act_t* gpt_act_w(GPT* m, const float* w);
void gpt_refresh_act_weights(GPT* m);

// ---- ZeRO-1 with the fp32 master sharded (bf16 act_t, train/dist.h dist_master_sharded) ----
// The process holds and updates only its shard [lo, hi) of the fp32 master (m->params,
// gpt_build_shard); the GEMMs read the
// bf16 compute copy, which the processes put together from their rounded shards (bits moved,
// 2 bytes a parameter); only the tensors the forward and backward read in fp32 are all-gathered
// in fp32 (gpt_fp32_ranges: copied from the shard into GPT.params_f32, gpt_f32_from_shard, and
// all-gathered there). A checkpoint gathers the shards to rank 0 (train/checkpoint.h).
//
// The compute copy of the shard: m->params_act[lo, hi) (=) m->params[lo, hi) stochastically
// rounded with the seed of gpt_params_changed and each element's GLOBAL index
// (ops_weights_to_act_at), so the shards' copies, all-gathered, are gpt_refresh_act_weights'
// over the whole arena bit for bit. Marks the copy fresh: the caller all-gathers it next.
void gpt_round_master_shard(GPT* m, size_t lo, size_t hi);
// Copy the parts of the fp32-read tensors inside the master shard into GPT.params_f32 (after an
// update; the caller all-gathers the rest of each range).
void gpt_f32_from_shard(GPT* m);
// The arena ranges [r[i][0], r[i][1]) of the tensors the model reads as fp32 parameters (not
// through gpt_act_w: the embeddings, the norms' weights and biases, qk-norm, the Gated
// DeltaNet's conv, A_log, dt_bias and gated-norm weight; every 1-D tensor, the linear biases
// included), adjacent tensors merged, in arena order. r holds t->n pairs at most; returns
// how many.
int gpt_fp32_ranges(const ParamTable* t, size_t (*r)[2]);
// The floats a range of n takes in GPT.params_f32 (each range starts at a 64-float boundary).
size_t gpt_fp32_packed(size_t n);
// The two allocations of a sharded master (gpt_build_shard), bytes asked of ops_malloc: req[0]
// the shard [lo, hi) in fp32, req[1] the fp32-read tensors whole, packed. Returns req[0]. The
// memory plan (train/plan.c) sizes the master line with it.
size_t gpt_master_allocs(const ParamTable* t, size_t lo, size_t hi, size_t req[2]);
// Host copy of the first `count` logits of token n of the last forward (converted to fp32).
void gpt_logits_to_host(const GPT* m, float* dst, int n, int count);
// Host copy of the per-token losses [B*T] of the last forward with targets.
void gpt_losses_to_host(const GPT* m, float* dst);
// Backend bytes gpt_alloc_acts(B, T) asks ops_malloc for with this config and recompute mode
// (errors before allocating): the arenas' elements, before the backend's rounding.
size_t gpt_acts_bytes(const ModelConfig* c, int B, int T, RecomputeKind recompute);

// ---- memory plan (train/plan.h): the size functions the allocations above use ----
// The memory layout of a build: this one's (gpt_layout_this_build), or another's that the
// planner sizes (the CPU binary planning the CUDA bf16 build).
typedef struct {
    int act_bytes;           // sizeof(act_t): 4 (fp32) or 2 (bf16)
    size_t alloc_align;      // ops_malloc's granularity (kernels/scratch.h): 64 CPU, 256 CUDA
    OpsAttnImpl attn_impl;   // [train] attn_impl
    RecomputeKind recompute; // [train] recompute: what the backward recomputes instead of keeping
    int gdn_keeps_saved;     // the backend's ops_gdn_keeps_saved(): the linear layers keep g_gdn_saved
} GptLayout;
void gpt_layout_this_build(GptLayout* lay, OpsAttnImpl attn_impl);
// The parameter-side allocations of gpt_build, bytes asked of ops_malloc: the fp32 parameters
// (the master weights), the fp32 gradients, the act_t compute copy of the weights (0 when
// act_t is fp32: the GEMMs read the parameters themselves). n_params: ParamTable.total.
enum { GPT_ALLOC_MASTER = 0, GPT_ALLOC_GRADS, GPT_ALLOC_WEIGHTS, GPT_PARAM_ALLOCS };
void gpt_param_allocs(size_t n_params, int act_bytes, size_t req[GPT_PARAM_ALLOCS]);
// The activation arenas of one micro-batch of B x T tokens (gpt_alloc_acts allocates with the
// same function), by what they hold:
//   SAVED     the tensors the backward reads, kept from the forward (every layer's, the
//             residual streams, the final norm; MoE dispatch indices)
//   LOGITS    the logits [N, padded_vocab] (their gradient overwrites them), the per-token
//             losses and logsumexp, the token ids and targets
//   BACKWARD  the backward's buffers, one set shared by the layers (and the allocations'
//             rounding to the backend's granularity, so that the three add up to `held`)
enum { GPT_ACTS_SAVED = 0, GPT_ACTS_LOGITS, GPT_ACTS_BACKWARD, GPT_ACTS_CATS };
typedef struct {
    size_t by[GPT_ACTS_CATS];   // bytes of each category
    size_t alloc[4];            // the ops_malloc requests (fp32 arena, act_t arena, ints, ids)
    int n_allocs;
    size_t requested;           // gpt_acts_bytes: the elements' bytes before any rounding
    size_t held;                // what the backend holds for them: sum of by[]
    // expert parallelism ([moe] expert_parallel > 1): the received rows' buffers, allocated
    // outside the arenas at each forward from the exchanged counts (model/moe.h MoeEpRows,
    // MoeEpScratch), counted here at balanced routing (S rows a member); not in by[] or held
    size_t ep_rows;
} GptActsBytes;
void gpt_activation_bytes(const ModelConfig* c, int B, int T, const GptLayout* lay, GptActsBytes* out);
// A training step's shape for the backend's scratch (kernels/scratch.h) with n_params floats
// of parameters and `threads` CPU threads.
void gpt_step_shape(const ModelConfig* c, int B, int T, OpsAttnImpl attn_impl, size_t n_params, int threads,
                    OpsStepShape* s);

// MoE layer l of the model (model/moe.c's moe_layer_forward/_backward over this model's tensors):
// the forward adds the layer's output for the normed input m->layer[l].ln2 into out[N, d],
// returns its weighted losses (aux_loss_coef * aux + z_loss_coef * z) and updates
// m->moe_stats[l]; the backward, from dL/dout = m->dres (and its copy m->dres_act), writes
// m->dnorm (=) and adds the layer's parameter gradients. dloss as in gpt_backward.
double moe_forward(GPT* m, int l, float* out);
void moe_backward(GPT* m, int l, float dloss);
// The step record's MoE fields over the model's MoE layers (moe_summarize_step).
void moe_step_summary(const GPT* m, MoeStepSummary* s);

// Matmul parameters a token passes through (QKV+gate and output, or a Gated DeltaNet's four
// projections; MLP or, in an MoE layer, the
// router, top_k experts and the shared expert with its gate, LM head), for FLOP counts: the
// active parameters of an MoE model.
double gpt_matmul_params(const ModelConfig* c);
// Training FLOPs per token (DESIGN.md): 6 * matmul params + 6 * T * n_head * head_dim per
// attention layer + 18 * Hv * dk * dv per Gated DeltaNet layer (docs/architecture.md).
double gpt_flops_per_token(const ModelConfig* c, int T);
