// tests/test_flops.c: the FLOP count MFU divides by (gpt_matmul_params, gpt_flops_per_token in
// model/gpt.c) against counts written out by hand from the definition (DESIGN.md, "Backends and
// numerics"; docs/architecture.md "Numbers printed per step"):
//   FLOPs per token = 6 * N_matmul + 6 * n_layer * T * n_head * head_dim
// N_matmul counts every weight matrix a token passes through: the QKV projection with its gate
// columns, the output projection, the MLP (or, in an MoE layer, the router, the top_k routed
// experts, the shared expert and its gate), and the LM head over the padded vocabulary (the GEMM
// runs over V_p rows). Embedding lookups count nothing. The hand counts below are explicit
// products, not calls into the code under test.
// Also: the backend names where its peak FLOP/s comes from (ops_peak_source).
#include <string.h>
#include "test_util.h"
#include "../kernels/ops.h"
#include "../model/config.h"
#include "../model/gpt.h"

static void check_exact(double got, double want, const char* what) {
    TU_CHECK(got == want, "%s: code %.0f, hand count %.0f (diff %+.0f)", what, got, want, got - want);
    printf("%-44s code %12.0f | hand %12.0f\n", what, got, want);
}

// Dense, Qwen3 style: GQA (4 q heads, 2 kv heads), head_dim 24 so n_head*head_dim = 96 != d_model
// = 64, elementwise output gate (sdpa position), SwiGLU, untied LM head, vocab 1000 (padded 1024).
static void test_dense(void) {
    Config c;
    config_defaults(&c);
    ModelConfig* m = &c.model;
    m->vocab_size = 1000; m->n_layer = 3; m->d_model = 64; m->n_head = 4; m->n_kv_head = 2;
    m->head_dim = 24; m->d_ff = 160; m->max_seq_len = 32; m->mlp = MLP_SWIGLU;
    m->attn_gate = GATE_ELEMENTWISE; m->gate_position = GATEPOS_SDPA; m->tie_embeddings = 0; m->qk_norm = 1;
    m->moe.n_expert = 0;
    c.train.batch_size = 2; c.train.seq_len = 32;
    TU_CHECK(config_finalize(&c, "test_flops dense") == 0, "dense config finalizes");
    TU_CHECK(m->padded_vocab == 1024, "dense: padded vocab %d, want 1024", m->padded_vocab);
    const int T = 32;

    // per layer, attention: wqkv has q 4*24 + k 2*24 + v 2*24 + gate 4*24 (elementwise, one per
    // q channel) = 96 + 48 + 48 + 96 = 288 output columns over d_model 64 inputs
    double wqkv = (4.0 * 24 + 2 * 24 + 2 * 24 + 4 * 24) * 64;   // 18432
    double wo = 64.0 * (4 * 24);                                // 6144: 96 -> 64
    // per layer, SwiGLU MLP: gate and up (2 x 160 x 64), down (64 x 160)
    double mlp = 2.0 * 160 * 64 + 64.0 * 160;                   // 20480 + 10240 = 30720
    double layer = wqkv + wo + mlp;                             // 55296
    double lm_head = 1024.0 * 64;                               // 65536 (untied; V_p rows)
    double n_matmul = 3 * layer + lm_head;                      // 165888 + 65536 = 231424
    TU_CHECK(n_matmul == 231424.0, "dense hand arithmetic: %.0f", n_matmul);
    // attention scores and weighted values: 6 * n_layer * T * n_head * head_dim (causal-discounted)
    double attn = 6.0 * 3 * 32 * 4 * 24;                        // 55296
    double flops = 6.0 * n_matmul + attn;                       // 1388544 + 55296 = 1443840
    TU_CHECK(flops == 1443840.0, "dense hand arithmetic: %.0f", flops);

    check_exact(gpt_matmul_params(m), n_matmul, "dense: matmul params per token");
    check_exact(gpt_flops_per_token(m, T), flops, "dense: training FLOPs per token (T=32)");
    // tying the head to the embedding changes nothing: the LM head is still a GEMM
    m->tie_embeddings = 1;
    check_exact(gpt_matmul_params(m), n_matmul, "dense, tied head: matmul params per token");
}

// MoE: 4 layers, every 2nd an MoE layer (layers 1 and 3; 0 and 2 dense SwiGLU), 8 experts of
// width 32, top-2, one shared expert of width 64 with its sigmoid gate, softmax router;
// GQA 6 q / 2 kv heads of 8, headwise gate (one column per q head), vocab 512 (padded 512).
static void test_moe(void) {
    Config c;
    config_defaults(&c);
    ModelConfig* m = &c.model;
    m->vocab_size = 512; m->n_layer = 4; m->d_model = 48; m->n_head = 6; m->n_kv_head = 2;
    m->head_dim = 8; m->d_ff = 96; m->max_seq_len = 16; m->mlp = MLP_SWIGLU;
    m->attn_gate = GATE_HEADWISE; m->gate_position = GATEPOS_SDPA; m->tie_embeddings = 0;
    m->moe.n_expert = 8; m->moe.top_k = 2; m->moe.d_expert = 32; m->moe.moe_every = 2;
    m->moe.n_shared_expert = 1; m->moe.d_shared_expert = 64; m->moe.shared_expert_gate = 1;
    m->moe.router = ROUTER_SOFTMAX_TOPK;
    c.train.batch_size = 2; c.train.seq_len = 16;
    TU_CHECK(config_finalize(&c, "test_flops moe") == 0, "moe config finalizes");
    TU_CHECK(m->padded_vocab == 512, "moe: padded vocab %d, want 512", m->padded_vocab);
    TU_CHECK(!config_layer_is_moe(m, 0) && config_layer_is_moe(m, 1) && !config_layer_is_moe(m, 2) &&
             config_layer_is_moe(m, 3), "moe_every = 2: layers 1 and 3 are MoE");
    const int T = 16;

    // every layer, attention: q 6*8 + k 2*8 + v 2*8 + gate 6 (headwise) = 48+16+16+6 = 86 columns
    double wqkv = (6.0 * 8 + 2 * 8 + 2 * 8 + 6) * 48;           // 4128
    double wo = 48.0 * (6 * 8);                                 // 2304
    double attn_w = wqkv + wo;                                  // 6432
    // dense layers (0, 2): SwiGLU 96 wide: gate + up (2 x 96 x 48), down (48 x 96)
    double mlp = 2.0 * 96 * 48 + 48.0 * 96;                     // 9216 + 4608 = 13824
    // MoE layers (1, 3): the router (8 logits from 48), the token's top-2 experts only (each a
    // SwiGLU 32 wide: 2 x 32 x 48 + 48 x 32), the shared expert (SwiGLU 64 wide) and its gate
    // (one column: sigmoid(x . w_g))
    double router = 8.0 * 48;                                   // 384
    double experts = 2 * (2.0 * 32 * 48 + 48.0 * 32);           // 2 x 4608 = 9216 (not 8 x)
    double shared = 2.0 * 64 * 48 + 48.0 * 64;                  // 6144 + 3072 = 9216
    double shared_gate = 1.0 * 48;                              // 48
    double moe = router + experts + shared + shared_gate;       // 18864
    double lm_head = 512.0 * 48;                                // 24576
    double n_matmul = 4 * attn_w + 2 * mlp + 2 * moe + lm_head; // 25728 + 27648 + 37728 + 24576 = 115680
    TU_CHECK(n_matmul == 115680.0, "moe hand arithmetic: %.0f", n_matmul);
    double attn = 6.0 * 4 * 16 * 6 * 8;                         // 18432
    double flops = 6.0 * n_matmul + attn;                       // 694080 + 18432 = 712512
    TU_CHECK(flops == 712512.0, "moe hand arithmetic: %.0f", flops);

    check_exact(gpt_matmul_params(m), n_matmul, "moe: active matmul params per token");
    check_exact(gpt_flops_per_token(m, T), flops, "moe: training FLOPs per token (T=16)");
}

// The CPU backend measures its peak: the source says so, and names the loop and thread count.
static void test_peak_source(void) {
    ops_init(0);
    double peak = ops_peak_flops();
    const char* src = ops_peak_source();
    printf("peak %.1f GFLOP/s (%s)\n", peak / 1e9, src);
    TU_CHECK(peak > 0.0, "peak %.3g > 0", peak);
    TU_CHECK(src && (strncmp(src, "measured: ", 10) == 0 || strncmp(src, "nominal: ", 9) == 0),
             "CPU peak source '%s' starts with 'measured: ' (or 'nominal: ' without FMA)", src ? src : "(null)");
    TU_CHECK(src && (strncmp(src, "nominal: ", 9) == 0 || strstr(src, " threads")), "the source names the thread count: '%s'",
             src ? src : "(null)");
}

int main(void) {
    test_dense();
    test_moe();
    test_peak_source();
    return tu_finish();
}
