// kernels/cuda/xent.cu: fused softmax + cross-entropy over the first V of Vp logit columns.
// The forward saves each row's logsumexp; the backward is one pass, exp(l - lse) * dloss, so
// the probability matrix is never stored (dlogits overwrite the logits in place).
// Logits and dlogits are act_t (cact_t here); max, sum, lse, losses and exp(l - lse) are fp32.
#include "cuda_common.h"

#define XENT_THREADS 512

// one block per row: max, sum of exp (deterministic block reductions), lse, loss
__global__ void xent_forward_kernel(float* losses, float* lse, const cact_t* logits,
                                    const int* targets, int V, int Vp) {
    __shared__ float red[32];
    int n = blockIdx.x;
    const cact_t* l = logits + (size_t)n * Vp;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, act_ld(l[i]));
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(act_ld(l[i]) - mx);
    s = block_sum(s, red);
    if (threadIdx.x == 0) {
        float r = mx + logf(s);
        lse[n] = r;
        losses[n] = r - act_ld(l[targets[n]]);
    }
}

// dlogits[n, i] = (exp(l - lse) - [i == target]) * dloss for i < V, 0 for padding columns.
// Each element is read and written by the same thread, so dlogits may alias logits (no
// __restrict__ here for that reason). The exp and the products are fp32; only the stored
// gradient is rounded to act_t.
__global__ void xent_backward_kernel(cact_t* dlogits, const cact_t* logits, const float* lse,
                                     const int* targets, float dloss, int V, int Vp) {
    int n = blockIdx.x;
    const cact_t* l = logits + (size_t)n * Vp;
    cact_t* d = dlogits + (size_t)n * Vp;
    float r = lse[n];
    int tg = targets[n];
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float v = 0.0f;
        if (i < V) {
            v = expf(act_ld(l[i]) - r) * dloss;
            if (i == tg) v -= dloss;
        }
        act_st(&d[i], v);
    }
}

void ops_xent_forward(float* losses, float* lse, const act_t* logits, const int* targets, int N,
                      int V, int Vp) {
    CUDA_OP_TIMER("ops_xent_forward");
    xent_forward_kernel<<<N, XENT_THREADS, 0, cuda_stream>>>(losses, lse, CCACT(logits), targets, V, Vp);
    CUDA_LAUNCH_CHECK("xent_forward_kernel");
}

void ops_xent_backward(act_t* dlogits, const act_t* logits, const float* lse, const int* targets,
                       float dloss, int N, int V, int Vp) {
    CUDA_OP_TIMER("ops_xent_backward");
    xent_backward_kernel<<<N, XENT_THREADS, 0, cuda_stream>>>(CACT(dlogits), CCACT(logits), lse, targets, dloss, V, Vp);
    CUDA_LAUNCH_CHECK("xent_backward_kernel");
}

// the two kernels in turn (the backward reads the lse the forward wrote): the values of
// ops_xent_forward then ops_xent_backward; a one-pass kernel is not written yet
void ops_xent_forward_backward(float* losses, float* lse, act_t* dlogits, const act_t* logits,
                               const int* targets, float dloss, int N, int V, int Vp) {
    ops_xent_forward(losses, lse, logits, targets, N, V, Vp);
    ops_xent_backward(dlogits, logits, lse, targets, dloss, N, V, Vp);
}
