// train/signals.h: the per-group gradient norms and update-to-weight ratios of a training step
// (docs/metrics.md, "Instability signals"), for the probe and spike records.
//
// The parameter table (model/params.h) is cut into groups: for each layer l and tensor kind
//   attn    the token mixer: attention's q/k/v rows of attn.wqkv (and attn.bqkv) and attn.wo
//           (attn.bo); a Gated DeltaNet layer's gdn.w_qkv, w_ba, conv_w, A_log, dt_bias, w_out
//   gate    the output gate: the gate rows of attn.wqkv (and bqkv), gdn.w_z
//   mlp     the MLP (mlp.*), or an MoE layer's experts (moe.w_in, w_out, the shared expert and
//           its gate)
//   router  an MoE layer's router (moe.router): its own kind, because router weights that grow
//           are an instability of their own (the router z-loss exists for them)
//   norm    the layer's norms: ln1, ln2, attention's q/k norms, the Gated DeltaNet's gated norm
// and two model-level groups: `embed` (wte, wpe, an untied lm_head) and `norm` (lnf).
// A group no tensor of the config falls in (the gate of an ungated model) is absent: null.
//
// For the step just taken:
//   grad_norm     sqrt of the sum of squares of the group's gradients of the global batch, after
//                 the reduction over the processes and before clipping (what the step record's
//                 grad_norm is over the whole model: the groups' squares add up to it)
//   update_ratio  ||w_after - w_before|| / ||w_before|| over the group's floats; 0 for a skipped
//                 update, null when ||w_before|| = 0
// Under data parallelism each process sums the floats it owns (ZeRO-1: its shard of the
// gradients and of the update; without: rank 0 the dense region, the first replica of each
// expert-parallel member its experts), and the sums are added over the processes: every float
// is counted once, whatever the process count.
//
// Cost: nothing on a step that no probe or spike record asks for. On one that does, a copy of
// this process's shard of the weights before the update (the exact way to get the update: the
// AdamW kernel is left alone) and three passes of sums of squares over the shard. Memory: the
// copy, 4 bytes per owned parameter (the AdamW shard's floats), held for the run.
#pragma once
#include <stddef.h>
#include "../model/params.h"
#include "dist.h"
#include "jsonl.h"

typedef enum { SIG_ATTN = 0, SIG_GATE, SIG_MLP, SIG_ROUTER, SIG_NORM, SIG_KINDS } SignalKind;
// the model-level groups, after the n_layer * SIG_KINDS layer groups
enum { SIG_TOP_EMBED = 0, SIG_TOP_NORM, SIG_TOPS };

typedef struct { size_t off, n; int group; } SignalRange;   // floats [off, off + n) of the arena

typedef struct {
    int n_layer, n_groups;    // n_layer * SIG_KINDS + SIG_TOPS
    SignalRange* r;           // [nr] every group's pieces of this process's arena, arena order
    int nr;
    int* present;             // [n_groups] 1 when some tensor of the config falls in the group
    size_t own[2][2];         // the floats this process sums: [dense lo, hi), [expert lo, hi)
    float* before;            // backend memory: the owned floats before the update (held for the
                              // run: a spike can come at any step; NULL when this process owns none)
    size_t n_before;
    // the figures of the last measured step
    int step;                 // that step (0: none yet)
    int skipped;              // its update was skipped
    double ms;                // wall time of the three stages on that step (this process)
    double* g2;               // [n_groups] sum of squares of the gradients
    double* w2;               // [n_groups] of the weights before the update
    double* d2;               // [n_groups] of the update
} Signals;

// Groups from the table (this process's: an expert shard under expert parallelism) and the
// floats this process owns in d's layout.
void signals_init(Signals* s, const ParamTable* t, const ModelConfig* c, const Dist* d);
void signals_free(Signals* s);
// Bytes of the weights' copy signals_init asks of ops_malloc for a process that owns `dense`
// and `expert` floats (train/plan.c counts rank 0's: its AdamW shard's floats).
static inline size_t signals_copy_bytes(size_t dense, size_t expert) { return (dense + expert) * sizeof(float); }
// The three stages of a measured step, each a collective (every process, in this order):
// after the gradients' reduction (dist_reduce_grads), before and after the update
// (after dist_gather_params). skipped: the update was skipped (after: nothing changed).
void signals_grads(Signals* s, Dist* d, const float* grads, int step);
// params holds the arena's floats from element base on (a sharded fp32 master: its shard,
// GPT.master_lo; else 0): the owned floats are inside it.
void signals_before_update(Signals* s, Dist* d, const float* params, size_t base);
void signals_after_update(Signals* s, Dist* d, const float* params, size_t base, int skipped);
// The figures of group g (NaN when absent or undefined)
double signals_grad_norm(const Signals* s, int g);
double signals_update_ratio(const Signals* s, int g);
// Writes the figures of layer l (l = -1: the model-level groups) as fields of the open object:
// grad_norm_<kind>, update_ratio_<kind> (kinds attn, gate, mlp, router, norm; model-level embed,
// lnf), null when absent. s NULL: every field null (a record of a step nothing measured).
void signals_write_json(const Signals* s, Jsonl* j, int l);
// Group index of layer l's kind k, of the model-level group k
static inline int signals_group(const Signals* s, int l, int k) {
    return l < 0 ? s->n_layer * SIG_KINDS + k : l * SIG_KINDS + k;
}
