// kernels/cuda/deltanet.h: what deltanet.cu (the ops) and deltanet_chunk.cu (the chunked delta
// rule) share; not part of ops.h.
#pragma once
#include "cuda_common.h"

// The chunked (WY) delta rule on tensor cores (bf16 build) or fp32 CUDA cores (fp32 build), for
// ops_gdn_forward / ops_gdn_backward: each returns 1 when it has run the op (s->chunk > 0, dk and
// dv in {64, 128}, its shared memory fits the device: kernels/scratch.h cuda_gdn_chunked), 0 when
// the caller's recurrent kernels must run it. Arguments as ops.h.
int cuda_gdn_chunk_forward(float* o, float* state_out, const float* q, const float* k, const float* v,
                           const float* g, const float* beta, const float* state_in, const OpsGdnShape* s);
int cuda_gdn_chunk_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                            const float* q, const float* k, const float* v, const float* g, const float* beta,
                            const OpsGdnShape* s);
