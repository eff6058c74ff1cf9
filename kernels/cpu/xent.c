// kernels/cpu/xent.c: fused softmax + cross-entropy over the first V of Vp logit columns.
#include "../ops.h"
#include "cpu_common.h"

static float row_lse(const float* l, int V) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < V; i++) sum += expf(l[i] - mx);
    return mx + logf(sum);
}

void ops_xent_forward(float* losses, const float* logits, const int* targets, int N, int V,
                      int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        losses[n] = row_lse(l, V) - l[targets[n]];
    }
}

void ops_xent_backward(float* dlogits, const float* logits, const int* targets, float dloss,
                       int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float* d = dlogits + (size_t)n * Vp;
        float lse = row_lse(l, V);
        for (int i = 0; i < V; i++) d[i] = expf(l[i] - lse) * dloss;
        d[targets[n]] -= dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
    }
}
