// kernels/cpu/xent.c: fused softmax + cross-entropy over the first V of Vp logit columns.
// The forward saves each row's logsumexp so the backward is one pass: exp(l - lse) * dloss.
#include "../ops.h"
#include "cpu_common.h"

void ops_xent_forward(float* losses, float* lse, const float* logits, const int* targets, int N,
                      int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float mx = cpu_row_max(l, V);
        float r = mx + logf(cpu_row_sum_exp(NULL, l, V, mx));
        lse[n] = r;
        losses[n] = r - l[targets[n]];
    }
}

void ops_xent_backward(float* dlogits, const float* logits, const float* lse, const int* targets,
                       float dloss, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float* d = dlogits + (size_t)n * Vp;
        float r = lse[n];
        for (int i = 0; i < V; i++) d[i] = cpu_expf(l[i] - r) * dloss;
        d[targets[n]] -= dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
    }
}

void ops_xent_forward_backward(float* losses, float* lse, float* dlogits, const float* logits,
                               const int* targets, float dloss, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float* d = dlogits + (size_t)n * Vp;   // may be l: each element is read before it is written
        const int tg = targets[n];
        const float lt = l[tg];
        float mx = cpu_row_max(l, V);
        float s = cpu_row_sum_exp(d, l, V, mx);   // d[i] = exp(l[i] - mx), the forward's own sum
        float r = mx + logf(s);
        lse[n] = r;
        losses[n] = r - lt;
        const float k = dloss / s;
        for (int i = 0; i < V; i++) d[i] *= k;
        d[tg] -= dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
    }
}
