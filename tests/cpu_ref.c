// tests/cpu_ref.c: the table of the renamed CPU ops (tests/cpu_ref.h). Compiled into
// gatedgpt_cpuref with the generated rename header included first, so every ops_* name below
// is the CPU backend's ref_ops_* function.
#include "cpu_ref.h"

const OpsTable cpu_ref = {
    .init = ops_init,
    .matmul_forward = ops_matmul_forward,
    .matmul_backward = ops_matmul_backward,
    .embedding_forward = ops_embedding_forward,
    .embedding_backward = ops_embedding_backward,
    .norm_forward = ops_norm_forward,
    .norm_backward = ops_norm_backward,
    .attn_prep_forward = ops_attn_prep_forward,
    .attn_prep_backward = ops_attn_prep_backward,
    .attention_forward = ops_attention_forward,
    .attention_backward = ops_attention_backward,
    .attn_first_token = ops_attn_first_token,
    .gate_stats = ops_gate_stats,
    .absmax = ops_absmax,
    .abs_median = ops_abs_median,
    .swiglu_forward = ops_swiglu_forward,
    .swiglu_backward = ops_swiglu_backward,
    .gelu_forward = ops_gelu_forward,
    .gelu_backward = ops_gelu_backward,
    .xent_forward = ops_xent_forward,
    .xent_backward = ops_xent_backward,
    .sumsq = ops_sumsq,
    .sumsq_chunks = ops_sumsq_chunks,
    .adamw = ops_adamw,
};
