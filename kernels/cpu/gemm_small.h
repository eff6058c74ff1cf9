// kernels/cpu/gemm_small.h: GEMMs of small operands that sit in the core's caches (the delta
// rule's per-chunk products, 64 x 64 x 64), called one thread per task from inside an OpenMP
// parallel region. A BLAS call costs ~2 us of set-up per product at that size (oneDNN's
// dnnl_sgemm: 193 GFLOP/s on 2 threads against 309 for a JIT kernel, docs/performance.md
// "Hybrid layers"), so these go to LIBXSMM's JIT kernels (Debian's libxsmm-dev), dispatched once
// per shape and thread; without LIBXSMM, or for a shape it declines, to cpu_sgemm.
#pragma once
#include <stdlib.h>
#include <string.h>

// Row-major C[M,N] (ldc) = op(A) B (beta = 0) or C + op(A) B (beta = 1); op(A) = A [M,K] (lda)
// for ta = 'N', A^T with A [K,M] (lda) for ta = 'T'; B [K,N] (ldb) never transposed (LIBXSMM
// 1.17's JIT has no transposed B in row-major terms: callers transpose the small operand).
// Deterministic: a fixed kernel for a given shape and ISA. Environment GATEDGPT_SMALL_GEMM=blas
// sends every call to cpu_sgemm (the tests run both engines).
void cpu_gemm_small(char ta, int M, int N, int K, const float* A, int lda, const float* B, int ldb, int beta,
                    float* C, int ldc);
// dst [cols, rows] (ld ldd) = src [rows, cols] (ld lds) transposed
void cpu_transpose(float* dst, int ldd, const float* src, int lds, int rows, int cols);
// which engine cpu_gemm_small uses in this process: "libxsmm" or "blas"
const char* cpu_gemm_small_engine(void);
// the rule behind it, read from the environment now (cpu_gemm_small reads it once per process;
// the memory plan, which may be linked without this backend, asks here): 1 = LIBXSMM, when it is
// built in and GATEDGPT_SMALL_GEMM is not "blas"
static inline int cpu_gemm_small_wants_libxsmm(void) {
#ifdef GATEDGPT_HAVE_LIBXSMM
    const char* e = getenv("GATEDGPT_SMALL_GEMM");
    return !(e && strcmp(e, "blas") == 0);
#else
    return 0;
#endif
}
