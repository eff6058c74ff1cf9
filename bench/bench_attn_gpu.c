// bench/bench_attn_gpu.c: the attention kernels alone on the CUDA backend, forward + backward,
// for the comparison: the fused gated flash kernel (attn_impl = flash, elementwise and
// headwise gate; the mma.sync kernel, and the first WMMA one once) against cuDNN's ungated fused
// attention (attn_impl = cudnn) on the same shapes (goal: >= 90% of cuDNN's throughput), with the
// fp32 kernel (attn_impl = fused) beside them.
//
//   bench_attn_gpu [--iters N] [--tsv PATH]
//
// Shapes: GPT-2 124M (B 8, T 1024, 12 heads x 64) and the paper's dense 1.7B (B 2, T 2048,
// 16 q / 8 kv heads x 128). One timed iteration = ops_attention_forward + ops_attention_backward
// (the gate's backward pass included) on fixed random inputs; the median over --iters (default
// 10) after 2 warm-up iterations, between device synchronisations. TFLOP/s counts attention
// FLOPs as the MFU formula does (docs/architecture.md, llm.c's convention, causal-discounted):
// 6 * T * H * hd per token for forward + backward.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/ops.h"
#include "kernels/cuda/cuda_backend.h"

typedef struct { const char* name; int B, T, H, Hkv, hd; } AttnCase;
typedef struct { const char* name; OpsAttnImpl impl; OpsGate gate; } Variant;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
// a device buffer of n floats, uniform in [-scale, scale) (fixed seed)
static float* drand(size_t n, float scale, unsigned* seed) {
    float* h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        h[i] = scale * ((float)(*seed >> 8) / 8388608.0f - 1.0f);
    }
    float* d = ops_malloc(n * sizeof(float));
    ops_from_host(d, h, n * sizeof(float));
    free(h);
    return d;
}

// median ms of forward + backward, or -1 when the variant is not available in this build
static double time_variant(const AttnCase* c, const Variant* v, int iters) {
    if (v->impl == OPS_ATTN_CUDNN && !cuda_cudnn_available()) return -1.0;
    cuda_set_flash_kernel(strstr(v->name, "wmma") ? CUDA_FLASH_WMMA : CUDA_FLASH_MMA);
    OpsAttnShape s = {0};
    s.B = c->B; s.T = c->T; s.H = c->H; s.Hkv = c->Hkv; s.hd = c->hd; s.eps = 1e-5f;
    s.gate = v->gate; s.gate_pos = OPS_GATEPOS_SDPA; s.gate_act = OPS_ACT_SIGMOID; s.impl = v->impl;
    const size_t N = (size_t)c->B * c->T, Hd = (size_t)c->H * c->hd, KVd = (size_t)c->Hkv * c->hd;
    const size_t QKVG = (size_t)ops_attn_qkv_cols(&s);
    unsigned seed = 1234;
    float *q = drand(N * Hd, 1.0f, &seed), *k = drand(N * KVd, 1.0f, &seed), *vv = drand(N * KVd, 1.0f, &seed);
    float *qkv = drand(N * QKVG, 1.0f, &seed), *dyg = drand(N * Hd, 1.0f, &seed);
    float *y = ops_malloc(N * Hd * sizeof(float)), *yg = v->gate ? ops_malloc(N * Hd * sizeof(float)) : y;
    float *lse = ops_malloc(N * c->H * sizeof(float)), *scr = ops_malloc(N * Hd * sizeof(float));
    float *dq = ops_malloc(N * Hd * sizeof(float)), *dk = ops_malloc(N * KVd * sizeof(float));
    float *dv = ops_malloc(N * KVd * sizeof(float)), *dqkv = ops_malloc(N * QKVG * sizeof(float));
    double* ms = malloc((size_t)iters * sizeof(double));
    for (int it = -2; it < iters; it++) {
        cuda_sync();
        double t0 = now_s();
        ops_attention_forward(y, yg, lse, q, k, vv, qkv, &s);
        ops_attention_backward(dq, dk, dv, dqkv, scr, dyg, q, k, vv, y, lse, qkv, &s);
        cuda_sync();
        if (it >= 0) ms[it] = (now_s() - t0) * 1e3;
    }
    qsort(ms, (size_t)iters, sizeof(double), cmp_double);
    double med = ms[iters / 2];
    free(ms);
    ops_free(q); ops_free(k); ops_free(vv); ops_free(qkv); ops_free(dyg); ops_free(y);
    if (v->gate) ops_free(yg);
    ops_free(lse); ops_free(scr); ops_free(dq); ops_free(dk); ops_free(dv); ops_free(dqkv);
    return med;
}

int main(int argc, char** argv) {
    int iters = 10;
    const char* tsv = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tsv") == 0 && i + 1 < argc) tsv = argv[++i];
        else { fprintf(stderr, "usage: bench_attn_gpu [--iters N] [--tsv PATH]\n"); return 2; }
    }
    if (iters < 1) iters = 1;
    char why[256];
    if (!cuda_device_present(why, sizeof why)) {
        printf("skipped: no CUDA device (%s)\n", why);
        return 0;
    }
    ops_init(0);
    const AttnCase cases[] = {
        {"gpt2_124m B8 T1024 12x64", 8, 1024, 12, 12, 64},
        {"dense_1p7b B2 T2048 16/8x128", 2, 2048, 16, 8, 128},
    };
    const Variant vars[] = {
        {"cudnn none", OPS_ATTN_CUDNN, OPS_GATE_NONE},
        {"flash none", OPS_ATTN_FLASH, OPS_GATE_NONE},
        {"flash elementwise", OPS_ATTN_FLASH, OPS_GATE_ELEMENTWISE},
        {"flash headwise", OPS_ATTN_FLASH, OPS_GATE_HEADWISE},
        {"flash-wmma elementwise", OPS_ATTN_FLASH, OPS_GATE_ELEMENTWISE},
        {"cudnn elementwise", OPS_ATTN_CUDNN, OPS_GATE_ELEMENTWISE},
        {"fused(fp32) none", OPS_ATTN_FUSED, OPS_GATE_NONE},
    };
    const int NV = (int)(sizeof vars / sizeof vars[0]);
    FILE* f = tsv ? fopen(tsv, "a") : NULL;
    printf("attention forward + backward on %s, median of %d\n", cuda_device_name(), iters);
    printf("%-30s %-20s %10s %10s %22s\n", "shape", "kernel", "ms", "TFLOP/s", "vs cuDNN ungated");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const AttnCase* c = &cases[ci];
        double flops = 6.0 * c->T * c->hd * c->H * (double)c->B * c->T;   // causal, fwd + bwd
        double ref = -1.0;
        for (int vi = 0; vi < NV; vi++) {
            double ms = time_variant(c, &vars[vi], iters);
            if (vi == 0) ref = ms;
            if (ms < 0) { printf("%-30s %-20s %10s\n", c->name, vars[vi].name, "n/a"); continue; }
            char rel[32] = "-";
            if (ref > 0) snprintf(rel, sizeof rel, "%.2f", ref / ms);   // throughput ratio
            printf("%-30s %-20s %10.3f %10.1f %22s\n", c->name, vars[vi].name, ms, flops / (ms * 1e-3) / 1e12, rel);
            if (f) fprintf(f, "%s\t%s\t%.4f\t%.2f\t%s\n", c->name, vars[vi].name, ms, flops / (ms * 1e-3) / 1e12, rel);
        }
    }
    if (f) fclose(f);
    printf("goal: flash elementwise >= 0.90 of cuDNN ungated (the 'vs cuDNN ungated' column)\n");
    return 0;
}
