// kernels/cpu/moe.c: Mixture-of-Experts ops: router (top-k, renormalised weights) and its
// backward, routing statistics, the dispatch plan, gather / combine and their backward, the
// grouped GEMM over experts, the shared expert's sigmoid gate.
//
// Determinism: no atomics anywhere. Every output row has one writer (a token, a permuted row,
// an expert), the dispatch plan is a sequential counting sort, and the statistics sum in a
// fixed order; so the results do not depend on the thread count. The grouped GEMM runs one
// expert per task on one thread (cpu_sgemm inside a parallel region is single-threaded), so an
// expert's product is the same whichever thread takes it and however many there are.
#include "../ops.h"
#include "cpu_common.h"
#include <string.h>
#define MOE_ROUTER_SIGMOID cpu_sigmoid
#include "../moe_router.h"   // the router's backward for one token (shared with the CUDA backend)

// ---------------------------------------------------------------------------------------------
// router

void ops_moe_router_forward(float* probs, int* topk_idx, float* topk_w, float* lse,
                            const float* logits, int N, int E, int k, OpsRouter kind) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        moe_router_forward_token(probs + (size_t)n * E, topk_idx + (size_t)n * k, topk_w + (size_t)n * k,
                                 &lse[n], logits + (size_t)n * E, E, k, kind);   // kernels/moe_router.h
    }
}

void ops_moe_router_backward(float* dlogits, const float* dtopk_w, const float* logits,
                             const float* probs, const int* topk_idx, const float* topk_w,
                             const float* lse, const float* aux_grad, float z_grad, int N, int E,
                             int k, OpsRouter kind) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        moe_router_backward_token(dlogits + (size_t)n * E, dtopk_w + (size_t)n * k, logits + (size_t)n * E,
                                  probs + (size_t)n * E, topk_idx + (size_t)n * k, topk_w + (size_t)n * k,
                                  lse[n], aux_grad, z_grad, E, k, (int)kind);
}

void ops_moe_router_stats(double* p_sum, double* lse_sq, double* entropy, const float* probs,
                          const float* lse, int N, int E) {
    // per expert, over tokens in order (one writer per expert)
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < E; i++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) s += probs[(size_t)n * E + i];
        p_sum[i] = s;
    }
    double* ent = cpu_calloc((size_t)N, sizeof(double));
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        double h = 0.0;
        for (int i = 0; i < E; i++) {
            double p = probs[(size_t)n * E + i];
            if (p > 0.0) h -= p * log(p);
        }
        ent[n] = h;
    }
    double ls = 0.0, es = 0.0;
    for (int n = 0; n < N; n++) { ls += (double)lse[n] * lse[n]; es += ent[n]; }
    free(ent);
    *lse_sq = ls;
    *entropy = es;
}

// ---------------------------------------------------------------------------------------------
// dispatch: a counting sort of the slots by expert (sequential: S integers, negligible next to
// the expert GEMMs, and trivially deterministic)

void ops_moe_dispatch_plan(int* counts, int* offsets, int* row_slot, int* slot_row,
                           const int* topk_idx, int N, int E, int k, int capacity) {
    const int S = N * k;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int s = 0; s < S; s++) counts[topk_idx[s]]++;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) {
        int kept = capacity > 0 && counts[e] > capacity ? capacity : counts[e];
        offsets[e + 1] = offsets[e] + kept;
    }
    int* fill = cpu_calloc((size_t)E, sizeof(int));   // rows taken so far per expert
    for (int s = 0; s < S; s++) {
        int e = topk_idx[s];
        if (offsets[e] + fill[e] < offsets[e + 1]) {
            int r = offsets[e] + fill[e]++;
            row_slot[r] = s;
            slot_row[s] = r;
        } else {
            slot_row[s] = -1;   // over capacity: dropped
        }
    }
    free(fill);
}

void ops_moe_gather(float* xp, const float* x, const int* row_slot, int R, int k, int C) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        memcpy(xp + (size_t)r * C, x + (size_t)(row_slot[r] / k) * C, (size_t)C * sizeof(float));
}

void ops_moe_gather_backward(float* dx, const float* dxp, const int* slot_row, int N, int k,
                             int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* d = dx + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            int r = slot_row[(size_t)n * k + j];
            if (r < 0) continue;
            const float* g = dxp + (size_t)r * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void ops_moe_combine(float* out, const float* yp, const float* topk_w, const int* slot_row,
                     int N, int k, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int* rows = slot_row + (size_t)n * k;
        const float* w = topk_w + (size_t)n * k;
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++)
                if (rows[j] >= 0) acc += w[j] * yp[(size_t)rows[j] * C + c];
            o[c] += acc;
        }
    }
}

void ops_moe_combine_backward(float* dyp, float* dtopk_w, const float* dout, const float* yp,
                              const float* topk_w, const int* slot_row, int N, int k, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* d = dout + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)n * k + j;
            int r = slot_row[s];
            if (r < 0) { dtopk_w[s] = 0.0f; continue; }
            const float* y = yp + (size_t)r * C;
            float* dy = dyp + (size_t)r * C;
            float dot = 0.0f;
            for (int c = 0; c < C; c++) { dy[c] = topk_w[s] * d[c]; dot += d[c] * y[c]; }
            dtopk_w[s] = dot;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// grouped GEMM: one task per expert (dynamic: experts differ in load; each task has one writer
// of its rows and of its weight gradient, so the schedule does not change any result)

void ops_grouped_matmul_forward(float* out, const float* inp, const float* w, const int* offsets,
                                int G, int C, int OC) {
    #pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        int r0 = offsets[g], rows = offsets[g + 1] - offsets[g];
        if (rows <= 0) continue;
        cpu_sgemm('N', 'T', rows, OC, C, 1.0f, inp + (size_t)r0 * C, C, w + (size_t)g * OC * C, C,
                  0.0f, out + (size_t)r0 * OC, OC);
    }
}

void ops_grouped_matmul_backward(float* dinp, float* dw, const float* dout, const float* inp,
                                 const float* w, const int* offsets, int G, int C, int OC) {
    #pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        int r0 = offsets[g], rows = offsets[g + 1] - offsets[g];
        if (rows <= 0) continue;
        const float* dy = dout + (size_t)r0 * OC;
        if (dinp)
            cpu_sgemm('N', 'N', rows, C, OC, 1.0f, dy, OC, w + (size_t)g * OC * C, C, 0.0f,
                      dinp + (size_t)r0 * C, C);
        cpu_sgemm('T', 'N', OC, C, rows, 1.0f, dy, OC, inp + (size_t)r0 * C, C, 1.0f,
                  dw + (size_t)g * OC * C, C);
    }
}

// ---------------------------------------------------------------------------------------------
// the shared expert's gate

void ops_sigmoid_gate_add_forward(float* out, const float* y, const float* z, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float g = cpu_sigmoid(z[n]);
        const float* yn = y + (size_t)n * C;
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] += g * yn[c];
    }
}

void ops_sigmoid_gate_add_backward(float* dy, float* dz, const float* dout, const float* y,
                                   const float* z, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float g = cpu_sigmoid(z[n]);
        const float* d = dout + (size_t)n * C;
        const float* yn = y + (size_t)n * C;
        float* dyn = dy + (size_t)n * C;
        float dot = 0.0f;
        for (int c = 0; c < C; c++) { dyn[c] = g * d[c]; dot += d[c] * yn[c]; }
        dz[n] = dot * g * (1.0f - g);
    }
}
