// kernels/adamw.h: AdamW's per-element update (PyTorch semantics, ops_adamw in kernels/ops.h),
// shared by the CPU loop (kernels/cpu/optim.c) and the CUDA kernel (kernels/cuda/optim.cu).
// The caller computes once: decay = 1 - lr*wd, bc1 = 1 - b1^t, bc2 = 1 - b2^t.
#pragma once
#include <math.h>
#include "ops_types.h"   // GG_HD

// g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p = p * decay - lr * (m / bc1) / (sqrt(v / bc2) + eps)
static inline GG_HD void adamw_update(float* p, float* m, float* v, float grad, float grad_scale,
                                      float lr, float b1, float b2, float eps, float decay,
                                      float bc1, float bc2) {
    float g = grad * grad_scale;
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    *p = *p * decay - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
}
