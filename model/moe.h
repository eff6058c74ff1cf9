// model/moe.h: the Mixture-of-Experts layer, written once over kernels/ops.h: router, dispatch
// (dropless, or limited by a capacity), the experts as grouped GEMMs, the optional shared
// expert, the load-balancing and z losses, and the routing statistics (docs/architecture.md,
// docs/metrics.md).
#pragma once
#include "config.h"

struct GPT;

// Routing statistics of one MoE layer (host memory). "Last forward" fields describe the most
// recent gpt_forward's micro-batch; "step" fields accumulate over every forward since
// gpt_zero_grad, i.e. over the micro-steps of the current optimizer step: the step's global
// batch on one process. (The distributed issue all-reduces each forward's counts and sums over
// processes where moe_forward adds them to the step fields, so they cover every process.)
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
typedef struct { int n_moe; double aux, z, max_load; long dropped; } MoeStepSummary;
void moe_step_summary(const struct GPT* m, MoeStepSummary* s);

// Forward of MoE layer l: out[N, d] += the layer's output for the normed input a->ln2.
// Returns the layer's weighted losses aux_loss_coef * aux + z_loss_coef * z (they enter the
// objective gpt_backward differentiates) and updates m->moe_stats[l].
double moe_forward(struct GPT* m, int l, float* out);
// Backward of the last moe_forward of layer l, from dL/dout = m->dres: m->dnorm[N, d] (=)
// dL/d(ln2 output) and the layer's parameter gradients (+=). dloss weighs the micro-batch as in
// gpt_backward (the aux and z terms are scaled by it like the cross-entropy).
void moe_backward(struct GPT* m, int l, float dloss);
