// kernels/cuda/attention.h: what the CUDA attention files share (not part of ops.h): the
// dimensions the kernels take by value, the tensor-core kernels of attention_flash.cu that
// attention.cu calls for [train] attn_impl = flash, and their device helpers.
#pragma once
#include "cuda_common.h"
#if defined(__CUDACC__) || defined(GATEDGPT_CUDA_EMU)   // nvcc, or the CPU emulator (tests/cudaemu)
#include <cuda_bf16.h>
#endif

// Token n = b*T + t; qkv[N, QKVG] with the gate logits z at column zoff.
struct AttnDims {
    int N, T, H, Hkv, hd, QKVG, zoff;
    int qk_norm, rope, gate, gate_pos, gate_act;
    int rot;             // RoPE's rotated channels of a head (kernels/rope.h rope_rot_dim: hd, or
                         // fewer with partial RoPE); the RoPE table rows hold rot/2 cos, rot/2 sin
    float eps;
};
// The document mask ([data] doc_mask) is not in AttnDims (whose layout the causal kernels were
// tuned with): the attention kernels take doc_start[N] (device; OpsAttnShape.doc_start) as their
// last argument, read only in their DOC = true instantiations: query t of sequence b sees keys
// doc[b*T + t] .. t. The fused kernels (attention.cu) and both flash kernels honour it; cuDNN's
// path refuses it.

// attn_impl = flash (attention_flash.cu): bf16 tensor cores (WMMA 16x16x16, fp32 accumulation),
// head_dim 64 or 128. Forward: y, lse, and yg = y * act(z) for the sdpa gate (its epilogue),
// as ops_attention_forward. Backward from dy (the gradient of y, the gate already taken off by
// attention.cu's pass 1) and D[B, H, T] = dy . y: dq, dk, dv (=). Activations (q, k, v, qkv,
// y, yg, dy, dq, dk, dv) are cact_t (fp32 or bf16 storage); lse and D are fp32.
void cuda_flash_attention_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                                  const cact_t* v, const cact_t* qkv, AttnDims d, int B, const int* doc);
void cuda_flash_attention_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D,
                                   const cact_t* q, const cact_t* k, const cact_t* v, const float* lse,
                                   AttnDims d, int B, const int* doc);
// The same with mma.sync and register-resident softmax (attention_mma.cu): what
// cuda_flash_attention_* run unless the WMMA version is asked for (cuda_flash_kernel).
void cuda_mma_attention_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                                const cact_t* v, const cact_t* qkv, AttnDims d, int B, const int* doc);
void cuda_mma_attention_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D,
                                 const cact_t* q, const cact_t* k, const cact_t* v, const float* lse,
                                 AttnDims d, int B, const int* doc);

#if defined(__CUDACC__) || defined(GATEDGPT_CUDA_EMU)   // nvcc, or the CPU emulator (tests/cudaemu)
// v rounded to the activation storage and back (the identity in the fp32 build): what a kernel
// that reads back a value it has just stored will see
__device__ __forceinline__ float attn_act_round(float v) {
    cact_t s;
    act_st(&s, v);
    return act_ld(s);
}

// The document mask (doc[T] of one sequence, non-decreasing, doc[t] <= t): the end of key u's
// document, the first t > u with doc[t] > u (or T): the queries that see key u are u .. end-1.
// A binary search (log2 T reads), so that the dK/dV kernels bound their query loop, and their
// mask, by a value in one register instead of reading doc[t] per query.
__device__ __forceinline__ int attn_doc_end(const int* doc, int u, int T) {
    int lo = u + 1, hi = T;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (doc[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// The tensor-core kernels' staging (attention_flash.cu, attention_mma.cu): rows [r0, r0 + 64) of
// head `head` of batch row b of x[B*T, heads*HD] (row stride ld elements), as bf16, into
// dst[64][HD + 8] (the padding keeps fragment loads free of bank conflicts); rows past T are 0.
// Two overloads, picked by the storage type (cact_t): fp32 activations are rounded to bf16 here
// (the fp32 build); bf16 activations are copied as they are (the bf16 build), no conversion.
template <int HD>
__device__ __forceinline__ void attn_stage_bf16(__nv_bfloat16* dst, const float* x, size_t ld, int b, int head,
                                                int r0, int T) {
    const float* xh = x + (size_t)b * T * ld + (size_t)head * HD;
    for (int idx = threadIdx.x; idx < 64 * HD; idx += blockDim.x) {
        int r = idx / HD, c = idx % HD, t = r0 + r;
        dst[r * (HD + 8) + c] = __float2bfloat16_rn(t < T ? xh[(size_t)t * ld + c] : 0.0f);
    }
}
// bf16: 16 bytes (8 values) per load and store. dst's rows are 16-byte aligned ((HD + 8) * 2
// bytes, tiles at 128-byte aligned offsets); ld = heads * HD is a multiple of 8, so the source
// rows are aligned when x is 16-byte aligned, which attention_flash.cu checks on the host (the
// model's buffers are 64-byte aligned). No fallback for other pointers here: a second path costs
// the mma kernels registers.
template <int HD>
__device__ __forceinline__ void attn_stage_bf16(__nv_bfloat16* dst, const __nv_bfloat16* x, size_t ld, int b,
                                                int head, int r0, int T) {
    const __nv_bfloat16* xh = x + (size_t)b * T * ld + (size_t)head * HD;
    constexpr int CH = HD / 8;   // 16-byte chunks per row
    for (int idx = threadIdx.x; idx < 64 * CH; idx += blockDim.x) {
        int r = idx / CH, c = (idx % CH) * 8, t = r0 + r;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);   // bf16 zeros past T
        if (t < T) val = *reinterpret_cast<const uint4*>(xh + (size_t)t * ld + c);
        *reinterpret_cast<uint4*>(dst + r * (HD + 8) + c) = val;
    }
}
#endif
