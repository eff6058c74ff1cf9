// kernels/cpu_bf16/attention_bf16.h: the training attention (forward, backward) of the fast CPU
// bf16 backend, its tile products on the bf16 units (attention_bf16.c). The ops of kernels/ops.h
// with act_t = bf16 bits (uint16_t): ops_bf16.c calls these where the fast build found bf16 units.
// Requires bf16mm_isa() != BF16MM_NONE.
#pragma once
#include <stdint.h>
#include "../ops_types.h"

// y[N, H*hd] and yg (the sdpa-gated copy; == y: none) rounded once from fp32, lse[B, H, T]
void bf16_attention_forward(uint16_t* y, uint16_t* yg, float* lse, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const uint16_t* qkv, const OpsAttnShape* s);
// dq, dk, dv rounded once from fp32; the sdpa gate's z columns of dqkv written, the rest untouched
void bf16_attention_backward(uint16_t* dq, uint16_t* dk, uint16_t* dv, uint16_t* dqkv, const uint16_t* dyg,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* y,
                             const float* lse, const uint16_t* qkv, const OpsAttnShape* s);
