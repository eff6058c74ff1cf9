// kernels/cpu/deltanet_chunk.h: the gated delta rule's chunked form on the CPU
// (kernels/cpu/deltanet_chunk.c), which ops_gdn_forward / ops_gdn_backward (kernels/cpu/deltanet.c)
// run when s->chunk > 0. Arguments as those ops' (kernels/ops.h, "Gated delta rule").
#pragma once
#include "../ops.h"

void cpu_gdn_chunk_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                           const float* g, const float* beta, const float* state_in, const OpsGdnShape* s);
void cpu_gdn_chunk_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                            const float* q, const float* k, const float* v, const float* g, const float* beta,
                            const float* saved, const OpsGdnShape* s);
