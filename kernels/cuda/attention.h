// kernels/cuda/attention.h: what the CUDA attention files share (not part of ops.h): the
// dimensions the kernels take by value, and the tensor-core kernels of attention_flash.cu that
// attention.cu calls for [train] attn_impl = flash.
#pragma once
#include "cuda_common.h"

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
