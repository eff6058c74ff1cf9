// model/optim.h: AdamW over the parameter table, global-norm clipping, LR schedules.
#pragma once
#include "config.h"
#include "gpt.h"

typedef struct {
    float* m;        // [table.total] first moment, backend memory
    float* v;        // [table.total] second moment
    int t;           // AdamW steps taken (bias correction)
} Optim;

void optim_init(Optim* o, const GPT* model);
void optim_free(Optim* o);
// Global L2 norm of all gradients (before clipping).
float optim_grad_norm(const GPT* model);
// One AdamW step at learning rate lr: clip (if tc->grad_clip > 0 and the norm exceeds it),
// weight decay on 2-D parameters only. `grad_norm` is optim_grad_norm's value.
void optim_step(Optim* o, GPT* model, const TrainConfig* tc, float lr, float grad_norm);
// Learning rate for step s (0-based) of tc->steps: linear warmup over warmup_steps, then
// cosine | linear | constant | wsd decay to lr * min_lr_frac (docs/config.md).
float lr_schedule(const TrainConfig* tc, int step);
