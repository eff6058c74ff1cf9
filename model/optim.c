// model/optim.c: AdamW, clipping and LR schedules (backend work goes through kernels/ops.h).
#include "optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void optim_init_range(Optim* o, const GPT* model, size_t lo, size_t hi) {
    optim_init_ranges(o, model, lo, hi, hi, hi);
}

void optim_init_ranges(Optim* o, const GPT* model, size_t lo, size_t hi, size_t xlo, size_t xhi) {
    memset(o, 0, sizeof(*o));
    if (hi > model->table.total) hi = model->table.total;
    if (lo > hi) lo = hi;
    if (xhi > model->table.total) xhi = model->table.total;
    if (xlo > xhi) xlo = xhi;
    if (xlo == hi && xhi > xlo) { hi = xhi; xlo = xhi; }   // adjacent: one range
    if (xhi == xlo) xlo = xhi = hi;
    // a sharded master (model/gpt.h gpt_build_shard) is updated only where it is held
    if ((hi > lo && (lo < model->master_lo || hi > model->master_hi)) ||
        (xhi > xlo && (xlo < model->master_lo || xhi > model->master_hi))) {
        fprintf(stderr, "error: optim_init_ranges: the range [%zu, %zu) + [%zu, %zu) is outside the master floats [%zu, %zu) "
                "this model holds\n", lo, hi, xlo, xhi, model->master_lo, model->master_hi);
        exit(1);
    }
    o->lo = lo;
    o->hi = hi;
    o->xlo = xlo;
    o->xhi = xhi;
    o->m = ops_malloc(optim_moment_bytes(lo, hi) + optim_moment_bytes(xlo, xhi));
    o->v = ops_malloc(optim_moment_bytes(lo, hi) + optim_moment_bytes(xlo, xhi));
}

size_t optim_moment_bytes(size_t lo, size_t hi) { return (hi - lo) * sizeof(float); }

void optim_init(Optim* o, const GPT* model) { optim_init_range(o, model, 0, model->table.total); }

void optim_free(Optim* o) { ops_free(o->m); ops_free(o->v); memset(o, 0, sizeof(*o)); }

float optim_grad_norm(const GPT* model) {
    // padding between tensors in the arena is always zero, so one pass covers everything
    return (float)sqrt(ops_sumsq(model->grads, model->table.total));
}

void optim_step(Optim* o, GPT* model, const TrainConfig* tc, float lr, float grad_norm) {
    // clip_grad_norm_ semantics: scale = clip / (norm + 1e-6) when norm > clip
    float scale = 1.0f;
    if (tc->grad_clip > 0.0f && grad_norm > tc->grad_clip) scale = tc->grad_clip / (grad_norm + 1e-6f);
    o->t++;
    for (int r = 0; r < 2; r++) {   // this process's range(s)
        const size_t lo = r == 0 ? o->lo : o->xlo, hi = r == 0 ? o->hi : o->xhi;
        for (int i = 0; i < model->table.n && hi > lo; i++) {
            // the part [a, b) of tensor i inside the range
            const ParamInfo* p = &model->table.p[i];
            size_t a = p->offset > lo ? p->offset : lo;
            size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
            if (a >= b) continue;
            const size_t k = optim_moment_index(o, a);
            ops_adamw(model->params + (a - model->master_lo), model->grads + a, o->m + k, o->v + k,
                      b - a, lr, tc->beta1, tc->beta2, tc->eps, p->decay ? tc->weight_decay : 0.0f,
                      scale, o->t);
        }
    }
    // the GEMMs' compute copy of the weights is refreshed at the next forward (after the
    // ZeRO-1 all-gather, where there is one), rounded with a seed of update t
    gpt_params_changed(model, o->t);
}

float lr_schedule(const TrainConfig* tc, int step) {
    const float lr = tc->lr, lo = tc->lr * tc->min_lr_frac;
    if (step < tc->warmup_steps) return lr * (float)(step + 1) / (float)tc->warmup_steps;
    int decay_steps = tc->steps - tc->warmup_steps;
    float prog = decay_steps > 1 ? (float)(step - tc->warmup_steps) / (float)(decay_steps - 1) : 1.0f;
    if (prog > 1.0f) prog = 1.0f;
    switch (tc->schedule) {
    case SCHED_CONSTANT: return lr;
    case SCHED_LINEAR: return lr + (lo - lr) * prog;
    case SCHED_WSD: {
        // stable at lr, then a linear decay to lo over the last wsd_decay_frac of all steps
        int ndecay = (int)ceilf(tc->wsd_decay_frac * tc->steps);
        int start = tc->steps - ndecay;
        if (step < start || ndecay <= 0) return lr;
        float p = ndecay > 1 ? (float)(step - start) / (float)(ndecay - 1) : 1.0f;
        return lr + (lo - lr) * (p > 1.0f ? 1.0f : p);
    }
    default: return lo + 0.5f * (lr - lo) * (1.0f + cosf(3.14159265358979f * prog));
    }
}
