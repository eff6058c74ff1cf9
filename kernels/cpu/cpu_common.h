// kernels/cpu/cpu_common.h: small helpers shared by the CPU kernels (not part of ops.h).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
