// kernels/moe_router.h: the MoE router's top-k and backward for one token, shared by the CPU loop
// (kernels/cpu/moe.c) and the CUDA kernel (kernels/cuda/moe.cu, one thread per token); the
// derivation is ops_moe_router_backward's (kernels/ops.h) and is spelled out below.
//
// Each backend keeps its own sigmoid: define MOE_ROUTER_SIGMOID (cpu_sigmoid, cuda_sigmoid)
// before including this header. The z-loss term uses expf on both (libm's on the CPU, CUDA's
// on the GPU).
#pragma once
#include <math.h>
#include "ops_types.h"   // OpsRouter, GG_HD

#ifndef MOE_ROUTER_SIGMOID
#error "define MOE_ROUTER_SIGMOID (the backend's sigmoid) before including kernels/moe_router.h"
#endif

// dr[E] (=) for one token: r[E] its logits, p[E] its probs, lse its logsumexp, idx[k] / w[k]
// its top-k indices and weights, g[k] = dL/dw, aux_grad[E] = dL/dp (every token), z_grad the
// z-loss's dL/dlse / lse.
static inline GG_HD void moe_router_backward_token(float* dr, const float* g, const float* r,
                                                   const float* p, const int* idx, const float* w,
                                                   float lse, const float* aux_grad, float z_grad,
                                                   int E, int k, int kind) {
    // top-k weights: w = normalise(f(r_chosen)), f = exp or sigmoid; gbar = sum_j w_j g_j
    float gbar = 0.0f;
    for (int j = 0; j < k; j++) gbar += w[j] * g[j];
    for (int i = 0; i < E; i++) dr[i] = 0.0f;
    if (kind == OPS_ROUTER_SOFTMAX) {
        // d/dr_e w_j = w_j (delta_je - w_e)  ->  dr_e = w_e (g_e - gbar)
        for (int j = 0; j < k; j++) dr[idx[j]] += w[j] * (g[j] - gbar);
    } else {
        // w_j = s_j / S_K  ->  dL/ds_e = (g_e - gbar) / S_K;  ds/dr = s (1 - s)
        float sk = 0.0f;
        for (int j = 0; j < k; j++) sk += MOE_ROUTER_SIGMOID(r[idx[j]]);
        for (int j = 0; j < k; j++) {
            float s = MOE_ROUTER_SIGMOID(r[idx[j]]);
            dr[idx[j]] += (g[j] - gbar) / sk * s * (1.0f - s);
        }
    }
    // load balancing: dL/dp_i = a_i for every token; abar = sum_i p_i a_i
    float abar = 0.0f;
    for (int i = 0; i < E; i++) abar += p[i] * aux_grad[i];
    if (kind == OPS_ROUTER_SOFTMAX) {
        for (int i = 0; i < E; i++) dr[i] += p[i] * (aux_grad[i] - abar);
    } else {
        // p_i = s_i / S  ->  dL/ds_m = (a_m - abar) / S
        float ssum = 0.0f;
        for (int i = 0; i < E; i++) ssum += MOE_ROUTER_SIGMOID(r[i]);
        for (int i = 0; i < E; i++) {
            float s = MOE_ROUTER_SIGMOID(r[i]);
            dr[i] += (aux_grad[i] - abar) / ssum * s * (1.0f - s);
        }
    }
    // z-loss: dL/dlse = z_grad * lse; dlse/dr = softmax(r)
    if (z_grad != 0.0f) {
        float zl = z_grad * lse;
        for (int i = 0; i < E; i++) dr[i] += zl * expf(r[i] - lse);
    }
}

// The router's top-k for one token: indices of the k largest of r[0..E), largest first, ties to
// the lower index (a strict '>' in an ascending scan keeps the first of equal values). O(k E):
// k and E are small. The CPU loop and the CUDA kernel (one thread per token) both call it.
static inline GG_HD void moe_router_topk(int* idx, const float* r, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= idx[q] == i;
            if (taken) continue;
            if (best < 0 || r[i] > r[best]) best = i;
        }
        idx[j] = best;
    }
}

// The router's forward for one token: r[E] logits -> p[E] (softmax, or sigmoids normalised to
// sum 1), the logsumexp lse (for the z-loss), the top-k experts idx[k] and their renormalised
// weights w[k] (softmax over the chosen logits, shifted by the largest; or s / sum s).
static inline GG_HD void moe_router_forward_token(float* p, int* idx, float* w, float* lse,
                                                  const float* r, int E, int k, int kind) {
    float mx = -INFINITY;
    for (int i = 0; i < E; i++) mx = r[i] > mx ? r[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < E; i++) sum += expf(r[i] - mx);
    *lse = mx + logf(sum);
    if (kind == OPS_ROUTER_SOFTMAX) {
        for (int i = 0; i < E; i++) p[i] = expf(r[i] - mx) / sum;
    } else {
        float ssum = 0.0f;
        for (int i = 0; i < E; i++) { p[i] = MOE_ROUTER_SIGMOID(r[i]); ssum += p[i]; }
        for (int i = 0; i < E; i++) p[i] /= ssum;
    }
    moe_router_topk(idx, r, E, k);
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        w[j] = kind == OPS_ROUTER_SOFTMAX ? expf(r[idx[j]] - r[idx[0]]) : MOE_ROUTER_SIGMOID(r[idx[j]]);
        wsum += w[j];
    }
    for (int j = 0; j < k; j++) w[j] /= wsum;
}
