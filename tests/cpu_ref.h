// tests/cpu_ref.h: the CPU backend as a reference inside a binary linked with the CUDA backend.
//
// Both backends define the same ops_* symbols, so the GPU tests link a second copy of the CPU
// kernels (the library gatedgpt_cpuref, tests/CMakeLists.txt) compiled with every ops_* name of
// kernels/ops.h renamed to ref_ops_* by a header generated from ops.h at configure time
// (build/generated/cpu_ref_rename.h). A test reaches that copy through the table `cpu_ref`,
// whose members take their types from ops.h's declarations, so a signature change in ops.h
// changes both sides at once. The CPU reference works on host memory.
#pragma once
#include "../kernels/ops.h"

typedef struct {
    __typeof__(ops_init)* init;
    __typeof__(ops_matmul_forward)* matmul_forward;
    __typeof__(ops_matmul_forward_f32)* matmul_forward_f32;
    __typeof__(ops_matmul_backward)* matmul_backward;
    __typeof__(ops_matmul_gelu_forward)* matmul_gelu_forward;
    __typeof__(ops_matmul_backward_gelu)* matmul_backward_gelu;
    __typeof__(ops_matmul_bias_forward)* matmul_bias_forward;
    __typeof__(ops_bias_add_f32)* bias_add_f32;
    __typeof__(ops_bias_backward)* bias_backward;
    __typeof__(ops_embedding_forward)* embedding_forward;
    __typeof__(ops_embedding_backward)* embedding_backward;
    __typeof__(ops_norm_forward)* norm_forward;
    __typeof__(ops_norm_backward)* norm_backward;
    __typeof__(ops_attn_prep_forward)* attn_prep_forward;
    __typeof__(ops_attn_prep_backward)* attn_prep_backward;
    __typeof__(ops_attention_forward)* attention_forward;
    __typeof__(ops_attention_backward)* attention_backward;
    __typeof__(ops_attn_first_token)* attn_first_token;
    __typeof__(ops_kv_cache_write)* kv_cache_write;
    __typeof__(ops_attention_cached_forward)* attention_cached_forward;
    __typeof__(ops_rope_rows)* rope_rows;
    __typeof__(ops_gate_stats)* gate_stats;
    __typeof__(ops_absmax)* absmax;
    __typeof__(ops_abs_median)* abs_median;
    __typeof__(ops_attn_logit_max)* attn_logit_max;
    __typeof__(ops_logits_absmax)* logits_absmax;
    __typeof__(ops_sumsq_ranges)* sumsq_ranges;
    __typeof__(ops_swiglu_forward)* swiglu_forward;
    __typeof__(ops_swiglu_backward)* swiglu_backward;
    __typeof__(ops_gelu_forward)* gelu_forward;
    __typeof__(ops_gelu_backward)* gelu_backward;
    __typeof__(ops_xent_forward)* xent_forward;
    __typeof__(ops_xent_backward)* xent_backward;
    __typeof__(ops_xent_forward_backward)* xent_forward_backward;
    __typeof__(ops_sumsq)* sumsq;
    __typeof__(ops_sumsq_chunks)* sumsq_chunks;
    __typeof__(ops_adamw)* adamw;
    __typeof__(ops_moe_router_forward)* moe_router_forward;
    __typeof__(ops_moe_router_backward)* moe_router_backward;
    __typeof__(ops_moe_router_stats)* moe_router_stats;
    __typeof__(ops_moe_dispatch_plan)* moe_dispatch_plan;
    __typeof__(ops_moe_gather)* moe_gather;
    __typeof__(ops_moe_gather_backward)* moe_gather_backward;
    __typeof__(ops_moe_combine)* moe_combine;
    __typeof__(ops_moe_combine_backward)* moe_combine_backward;
    __typeof__(ops_grouped_matmul_forward)* grouped_matmul_forward;
    __typeof__(ops_grouped_matmul_backward)* grouped_matmul_backward;
    __typeof__(ops_sigmoid_gate_add_forward)* sigmoid_gate_add_forward;
    __typeof__(ops_sigmoid_gate_add_backward)* sigmoid_gate_add_backward;
} OpsTable;

extern const OpsTable cpu_ref;
