// model/optim.h: AdamW over the parameter table, global-norm clipping, LR schedules.
#pragma once
#include "config.h"
#include "gpt.h"

typedef struct {
    float* m;        // [(hi - lo) + (xhi - xlo)] first moment of the parameters this process
                     // updates, backend memory: those of [lo, hi), then those of [xlo, xhi)
    float* v;        // the same, second moment
    int t;           // AdamW steps taken (bias correction)
    size_t lo, hi;   // the range of the flat parameter arena this process updates:
                     // [0, table.total) unless ZeRO-1 gives it one shard (train/dist.h)
    size_t xlo, xhi; // a second range (expert parallelism: this replica's part of the expert
                     // shard, train/dist.h); empty (xlo = xhi = hi) otherwise
} Optim;
// The index into m and v of the arena's float a (inside [lo, hi) or [xlo, xhi)).
static inline size_t optim_moment_index(const Optim* o, size_t a) {
    return a >= o->lo && a < o->hi ? a - o->lo : (o->hi - o->lo) + (a - o->xlo);
}
static inline size_t optim_moment_count(const Optim* o) { return (o->hi - o->lo) + (o->xhi - o->xlo); }

// Bytes optim_init_range asks ops_malloc for each of m and v (fp32) over the range [lo, hi)
// (the memory planner, train/plan.h, sizes the AdamW line with it).
size_t optim_moment_bytes(size_t lo, size_t hi);
// AdamW state for the whole arena.
void optim_init(Optim* o, const GPT* model);
// AdamW state for the arena range [lo, hi) only (ZeRO-1: this process's shard).
void optim_init_range(Optim* o, const GPT* model, size_t lo, size_t hi);
// AdamW state for the two ranges [lo, hi) and [xlo, xhi) (train/dist.h: Dist.lo .. xhi).
void optim_init_ranges(Optim* o, const GPT* model, size_t lo, size_t hi, size_t xlo, size_t xhi);
void optim_free(Optim* o);
// Global L2 norm of all gradients (before clipping).
float optim_grad_norm(const GPT* model);
// One AdamW step at learning rate lr on the parameters of [lo, hi): clip (if tc->grad_clip > 0
// and the norm exceeds it), weight decay on 2-D parameters only. `grad_norm` is the global norm
// of all gradients (optim_grad_norm, or dist_grad_norm under ZeRO-1).
void optim_step(Optim* o, GPT* model, const TrainConfig* tc, float lr, float grad_norm);
// Learning rate for step s (0-based) of tc->steps: linear warmup over warmup_steps, then
// cosine | linear | constant | wsd decay to lr * min_lr_frac (docs/config.md).
float lr_schedule(const TrainConfig* tc, int step);
