// kernels/cpu_bf16/matmul_bf16.h: bf16 x bf16 -> fp32 GEMMs on the CPU through oneDNN's bf16
// matmul (fp32 accumulation), for the fast CPU bf16 backend (ops_bf16_fast.c). Row-major, the
// interface of cpu_sgemm with bf16 A and B and an fp32 C.
//
// The bf16 units are chosen at run time: bf16mm_isa() says which this process uses. A bf16 x bf16
// product is exact in fp32 (8 + 8 mantissa bits), so this GEMM differs from the emulation's
// (the fp32 sgemm over the widened bf16 inputs) only in the order of its fp32 sums.
#pragma once
#include <stdint.h>

typedef enum {
    BF16MM_NONE = 0,     // no bf16 units (or oneDNN capped below them): the emulation's fp32 GEMM
    BF16MM_AVX512_BF16,  // avx512_bf16 (vdpbf16ps)
    BF16MM_AMX,          // amx_bf16 + amx_tile (tile dot products)
} Bf16mmIsa;

// The ISA of this process, decided once: the CPU's own flags (cpuid: avx512_bf16, amx_bf16 +
// amx_tile) capped by what oneDNN will use (dnnl_get_effective_cpu_isa, which honours
// ONEDNN_MAX_CPU_ISA: setting it to AVX2 shows an AVX2-only host's behaviour on this one).
Bf16mmIsa bf16mm_isa(void);
const char* bf16mm_isa_name(Bf16mmIsa isa);   // "amx_bf16", "avx512_bf16", "none"
// the CPU's own flags, before oneDNN's cap (for the start-up line)
Bf16mmIsa bf16mm_cpu_isa(void);

// C[M,N] (= or +=, beta 0 or 1) op(A)[M,K] @ op(B)[K,N]; op(X) = X or X^T ('N' / 'T'), A and B
// bf16 bits, C fp32. Requires bf16mm_isa() != BF16MM_NONE. oneDNN primitives are cached by
// shape, transposes, leading dimensions and beta (creating one costs ~ms).
void bf16mm(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
            int ldb, float beta, float* C, int ldc);
// the same for sizes that change from call to call (the MoE experts' rows): one primitive of
// run-time M, N, K per transposes, leading dimensions and beta (oneDNN's run-time dimensions)
void bf16mm_var(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                int ldb, float beta, float* C, int ldc);
// C[M,N] = round(op(A) @ op(B) + bias) with a bf16 C: the fp32 sum (plus the bf16 bias[N] in fp32,
// NULL: none) rounded to nearest even once, inside oneDNN's kernel, so no fp32 C is written to
// memory and read back for the rounding (the logits' fp32 copy alone is 412 MB at GPT-2 124M B=8
// T=256). The values are a rounding of bf16mm's (plus the bias): the same bound (test_bf16cpu_ops).
void bf16mm_round(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                  int ldb, const uint16_t* bias, uint16_t* C, int ldc);

// bf16mm for one thread of an OpenMP parallel region, called by every thread at once (the
// attention's tiles): C fp32 (c_bf16 0; beta 0 or 1) or bf16 (c_bf16 1, beta 0: the fp32 sum rounded
// to nearest even once, inside the kernel). The calling thread's own primitives, stream and
// scratchpad, so no two threads share a oneDNN object.
void bf16mm_local(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                  float beta, void* C, int ldc, int c_bf16);

// the sustained bf16 GEMM rate of this process on all its threads (FLOP/s; best of 3 timings of a
// 1024^3 product) and a line saying how it was measured; 0 when bf16mm_isa() is NONE
double bf16mm_peak_flops(const char** source);
