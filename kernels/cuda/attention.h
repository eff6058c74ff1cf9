// kernels/cuda/attention.h: what the CUDA attention files share (not part of ops.h): the
// dimensions the kernels take by value, and the tensor-core kernels of attention_flash.cu that
// attention.cu calls for [train] attn_impl = flash.
#pragma once
#include "cuda_common.h"
#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

// Token n = b*T + t; qkv[N, QKVG] with the gate logits z at column zoff.
struct AttnDims {
    int N, T, H, Hkv, hd, QKVG, zoff;
    int qk_norm, rope, gate, gate_pos, gate_act;
    float eps;
};

// attn_impl = flash (attention_flash.cu): bf16 tensor cores (WMMA 16x16x16, fp32 accumulation),
// head_dim 64 or 128. Forward: y, lse, and yg = y * act(z) for the sdpa gate (its epilogue),
// as ops_attention_forward. Backward from dy (the gradient of y, the gate already taken off by
// attention.cu's pass 1) and D[B, H, T] = dy . y: dq, dk, dv (=).
void cuda_flash_attention_forward(float* y, float* yg, float* lse, const float* q, const float* k,
                                  const float* v, const float* qkv, AttnDims d, int B);
void cuda_flash_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* D,
                                   const float* q, const float* k, const float* v, const float* lse,
                                   AttnDims d, int B);
// The same with mma.sync and register-resident softmax (attention_mma.cu): what
// cuda_flash_attention_* run unless the WMMA version is asked for (cuda_flash_kernel).
void cuda_mma_attention_forward(float* y, float* yg, float* lse, const float* q, const float* k,
                                const float* v, const float* qkv, AttnDims d, int B);
void cuda_mma_attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* D,
                                 const float* q, const float* k, const float* v, const float* lse,
                                 AttnDims d, int B);

#ifdef __CUDACC__
// The tensor-core kernels' staging (attention_flash.cu, attention_mma.cu): rows [r0, r0 + 64) of
// head `head` of batch row b of x[B*T, heads*HD] (row stride ld floats), rounded to bf16, into
// dst[64][HD + 8] (the padding keeps fragment loads free of bank conflicts); rows past T are 0.
template <int HD>
__device__ __forceinline__ void attn_stage_bf16(__nv_bfloat16* dst, const float* x, size_t ld, int b, int head,
                                                int r0, int T) {
    const float* xh = x + (size_t)b * T * ld + (size_t)head * HD;
    for (int idx = threadIdx.x; idx < 64 * HD; idx += blockDim.x) {
        int r = idx / HD, c = idx % HD, t = r0 + r;
        dst[r * (HD + 8) + c] = __float2bfloat16_rn(t < T ? xh[(size_t)t * ld + c] : 0.0f);
    }
}
#endif
