// kernels/cpu/cpu_common.h: small helpers shared by the CPU kernels (not part of ops.h).
#pragma once
// The CPU kernels store activations in fp32 (ops.h's act_t is float here). The bf16 emulation
// (kernels/cpu_bf16/) wraps them; they are never compiled with bf16 act_t themselves.
#ifdef GATEDGPT_ACT_BF16
#error "kernels/cpu is fp32: the bf16 build wraps it (kernels/cpu_bf16/ops_bf16.c)"
#endif
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif

// Rows are reduced in fixed blocks of CPU_RED_BLOCK so that reductions over tokens (weight
// gradients of norms, sums of squares) give the same bits for any thread count.
#define CPU_RED_BLOCK 64

static inline int cpu_nblocks(int n) { return (n + CPU_RED_BLOCK - 1) / CPU_RED_BLOCK; }

// out[C] += sum over blocks of partial[nblocks][C], blocks summed in order.
static inline void cpu_reduce_blocks(float* out, const float* partial, int nblocks, int C) {
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float s = 0.0f;
        for (int b = 0; b < nblocks; b++) s += partial[(size_t)b * C + c];
        out[c] += s;
    }
}

static inline void* cpu_calloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes (reduce batch_size or seq_len)\n", n * size);
        exit(1);
    }
    return p;
}

// Row-major sgemm through the chosen BLAS (kernels/cpu/matmul.c):
// C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, op = transpose when ta/tb == 'T'.
// Inside an OpenMP parallel region it runs on the calling thread alone.
void cpu_sgemm(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc);

// cpu_expf, cpu_tanhf, cpu_sigmoid, cpu_gelu: kernels/cpu/cpu_math.h (the bf16 backend uses them too)

// Row reductions in 8 fixed lanes (lane j takes elements j, j+8, ...; lanes combined in order):
// vectorisable without -ffast-math, and the same bits on every run and thread count.
#define CPU_LANES 8
// max of x[0..n) (-inf for n == 0)
static inline float cpu_row_max(const float* x, int n) {
    float acc[CPU_LANES];
    for (int j = 0; j < CPU_LANES; j++) acc[j] = -INFINITY;
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int j = 0; j < CPU_LANES; j++) m = acc[j] > m ? acc[j] : m;
    return m;
}
// sum of exp(x[i] - shift) over x[0..n); with out != NULL also writes out[i] = exp(x[i] - shift)
// (out may alias x).
static inline float cpu_row_sum_exp(float* out, const float* x, int n, float shift) {
    float acc[CPU_LANES] = {0};
    int i = 0;
    if (out) {
        for (; i + CPU_LANES <= n; i += CPU_LANES)
            for (int j = 0; j < CPU_LANES; j++) { float e = cpu_expf(x[i + j] - shift); out[i + j] = e; acc[j] += e; }
    } else {
        for (; i + CPU_LANES <= n; i += CPU_LANES)
            for (int j = 0; j < CPU_LANES; j++) acc[j] += cpu_expf(x[i + j] - shift);
    }
    float s = 0.0f;
    for (; i < n; i++) { float e = cpu_expf(x[i] - shift); if (out) out[i] = e; s += e; }
    for (int j = 0; j < CPU_LANES; j++) s += acc[j];
    return s;
}
