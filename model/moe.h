// model/moe.h: the Mixture-of-Experts layer, written once over kernels/ops.h: router, dispatch
// (dropless, or limited by a capacity), the experts as grouped GEMMs, the optional shared
// expert, the load-balancing and z losses, and the routing statistics (docs/architecture.md,
// docs/metrics.md). The layer sees only what its model hands it in a MoeLayerIO (model/gpt.c
// fills one per call from the GPT's tensors); it knows nothing else of the model.
#pragma once
#include "config.h"
#include "params.h"
#include "../kernels/ops.h"

typedef struct {
    int n_expert;          // E; 0 for a dense layer (every other field is then unused)
    // last forward
    int n_tokens;          // N
    long* counts;          // [E] token slots that chose each expert (before any capacity)
    long dropped;          // slots dropped by the capacity (0 when dropless)
    int capacity;          // slots per expert (0 = dropless)
    double* p_sum;         // [E] sum over tokens of the router distribution p[n, i]
    double lse_sq_sum;     // sum over tokens of logsumexp(router logits)^2
    double entropy_sum;    // sum over tokens of the entropy of p[n, :] (nats)
    double aux;            // the load-balancing loss of this forward, without its coefficient:
                           // E * sum_i f_i * P_i with f from the step's counts (these included)
                           // and P the mean of p over this micro-batch
    double z;              // the z-loss without its coefficient: mean over tokens of lse^2
    // accumulated over the step
    double* step_counts;   // [E]
    double step_slots;     // routed slots (N * top_k per forward)
    double* step_p_sum;    // [E]
    double step_tokens;
    double step_lse_sq, step_entropy;
    long step_dropped;
} MoeStats;

void moe_stats_init(MoeStats* s, int n_expert);
void moe_stats_free(MoeStats* s);
void moe_stats_reset_step(MoeStats* s);       // zero the step fields (gpt_zero_grad calls it)

// Derived figures (docs/metrics.md).
// f_i = step_counts_i / step_slots, the fraction of the step's routed slots sent to expert i
double moe_step_aux(const MoeStats* s);       // E * sum_i f_i * P_i over the whole step (1 = balanced)
double moe_step_z(const MoeStats* s);         // mean lse^2 over the step
double moe_max_load(const MoeStats* s);       // last forward: max_i counts_i / mean_i counts_i
double moe_entropy(const MoeStats* s);        // last forward: mean router entropy (nats)
double moe_last_aux(const MoeStats* s);       // last forward: E * sum_i f_i P_i of its own batch
double moe_step_max_load(const MoeStats* s);  // step: max_i step_counts_i / mean_i step_counts_i
// Slots each expert may take in a micro-batch of N tokens: ceil(capacity_factor * N * top_k /
// n_expert), or 0 (dropless) when capacity_factor = 0.
int moe_capacity(const MoeConfig* c, int N);

// The step record's MoE fields (docs/metrics.md): over the model's MoE layers, the mean of the
// step's aux and z (without coefficients), the largest step max/mean load, the dropped slots.
// stats[n_layer]: a model's per-layer statistics (dense layers, n_expert = 0, are skipped).
typedef struct { int n_moe; double aux, z, max_load; long dropped; } MoeStepSummary;
void moe_summarize_step(const MoeStats* stats, int n_layer, MoeStepSummary* s);

// What one MoE layer reads and writes. Shapes as in model/gpt.h's LayerActs: N tokens, d =
// d_model, E experts, k = top_k, S = N*k slots, Fe/Fs = d_expert/d_shared_expert.
typedef struct {   // the compute (act_t) copies of the layer's weights its GEMMs read; NULL where absent
    const act_t *router, *moe_w_in, *moe_w_out, *shared_w_in, *shared_w_out, *shared_gate;
} MoeWeightsAct;
typedef struct {   // the layer's activations, written by the forward and kept for the backward
    act_t* ln2;                                    // [N, d] the normed input X (read only)
    float *router_logits, *router_probs, *router_lse, *topk_w;
    int *topk_idx, *counts, *offsets, *row_slot, *slot_row;
    act_t *xp, *ep_pre, *ep_act, *yp, *sh_pre, *sh_act, *sh_out;
    float* sh_z;
    // expert parallelism (MoeExchange below; NULL without it): the received rows live in the
    // layer's MoeEpRows instead of ep_pre and ep_act (sized from the exchanged counts)
    int* ep_rc;            // [P * El] rows received from group member s for local expert j (at s*El + j)
} MoeActs;
typedef struct {   // the backward's input, output and scratch (the scratch may be shared by layers)
    const float* dout;       // [N, d] dL/d(layer output), fp32
    const act_t* dout_act;   // [N, d] its act_t copy (the shared expert's GEMM reads it)
    act_t* dx;               // [N, d] (=) dL/dX
    float *d_router, *d_topk_w, *d_sh_z, *aux_grad;
    act_t *d_router_act, *d_sh_z_act, *d_yp, *d_ep_act, *d_ep_pre, *d_sh_out, *d_sh_act, *d_sh_pre, *d_tmp;
} MoeBackwardBufs;
// Expert parallelism (docs/distributed.md, "Expert parallelism"): the P processes of a group
// split the E experts, El = E / P each (member q computes experts q*El .. q*El + El - 1).
// Each routes its own tokens; its kept slots, sorted by expert (xp), are already in member
// order, so member q's rows are one contiguous block. The forward exchanges the kept counts
// (E ints: El to each member) and then the rows; the owner runs its experts' grouped GEMMs
// over the rows of all members and sends the outputs back to the same positions; the
// backward sends d yp the same way and returns d xp. The layer calls the exchange through
// these hooks (the trainer's comm layer, train/comm.h); it never calls MPI itself.
// Expert parallelism's row buffers, sized from the exchanged counts: Rin, the rows this member
// receives in a forward (sum over members and local experts of the counts), is known only after
// the counts' all-to-all, and is about S under balanced routing (the group's P*S slots split over
// P members), P*S at worst (every slot of the group to this member). The buffers grow to the
// largest Rin seen (backend memory, ops_malloc; never shrunk; freed by moe_ep_free).
typedef struct {   // one layer's, kept from its forward for its backward
    act_t *xe, *pre, *act;   // [cap, d] the received rows, expert-major; [cap, Fin_e]; [cap, Fe]
    long cap;
} MoeEpRows;
typedef struct {   // the exchange's scratch, shared by the layers
    act_t *send, *recv;      // [cap, d] each
    act_t *d_pre, *d_act;    // [cap, Fin_e], [cap, Fe] the backward's
    long cap;
    int* map;                // [map_cap] perm, inv, el_off (ep_plan)
    long map_cap;
} MoeEpScratch;
void moe_ep_rows_free(MoeEpRows* r);
void moe_ep_scratch_free(MoeEpScratch* s);

typedef struct {
    int size, rank;          // P and this process's member index q; size <= 1 or counts == NULL: off
    // send[P*n] ints, n to each member in member order -> recv[P*n], n from each member
    void (*counts)(void* ctx, const int* send, int* recv, int n);
    // send_rows[p] rows of row_bytes bytes to member p (consecutive in member order in send) ->
    // recv_rows[p] rows from member p (likewise in recv); buffers in backend memory
    void (*rows)(void* ctx, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                 size_t row_bytes);
    void* ctx;
    MoeEpScratch* scratch;   // the exchange's buffers (the model's), grown to the rows received
} MoeExchange;

typedef struct {
    const ModelConfig* cfg;  // d_model, mlp (the experts' activation) and the moe section
    int N;                   // tokens in the micro-batch
    MoeWeightsAct w;
    LayerWeights* g;         // the layer's fp32 parameter gradients (+= by the backward)
    MoeActs a;
    MoeBackwardBufs b;       // the backward only
    MoeStats* stats;         // the layer's routing statistics (updated by the forward)
    // when set, sums a forward's expert counts (E counts and the slot total, doubles) over
    // processes before they enter the load-balancing loss (GPT.moe_reduce)
    void (*reduce)(void* ctx, double* x, int n);
    void* reduce_ctx;
    MoeExchange ep;          // expert parallelism (off when ep.counts is NULL)
    MoeEpRows* ep_rows;      // the layer's received rows (expert parallelism; the model's)
    int ep_shard;            // P when the weights hold only this member's E / P experts (then ep must be on), else 0
} MoeLayerIO;

// Forward of one MoE layer: out[N, d] += the layer's output for the normed input io->a.ln2.
// Returns the layer's weighted losses aux_loss_coef * aux + z_loss_coef * z (they enter the
// objective the model's backward differentiates) and updates io->stats.
// redo = RECOMPUTE_SELECTIVE / RECOMPUTE_FULL ([train] recompute, model/gpt.c): recompute only
// the activations that mode does not keep (selective: xp, ep_act, sh_act; full: every one but
// the routing), from the routing this layer's forward pass saved (router outputs, top-k,
// dispatch plan), with the same ops: the same bits. out is then unused (NULL), and nothing
// else is done: no router, no statistics, no io->reduce; returns 0.
double moe_layer_forward(const MoeLayerIO* io, float* out, RecomputeKind redo);
// Backward of the layer's last forward, from dL/dout = io->b.dout: io->b.dx[N, d] (=) dL/dX and
// the layer's parameter gradients io->g (+=). dloss weighs the micro-batch as in gpt_backward
// (the aux and z terms are scaled by it like the cross-entropy).
void moe_layer_backward(const MoeLayerIO* io, float dloss);
