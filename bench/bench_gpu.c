// bench/bench_gpu.c: the training-step benchmark on the CUDA backend (scripts/gpu_check.sh).
//
//   bench_gpu [--steps N] [--warmup N] [--gates none,headwise,elementwise] [--tsv PATH]
//             --shape NAME CONFIG.ini [--set section.key=value ...] [--shape ...]
//
// Each --shape is a model and batch shape: an INI file and the --set overrides that follow it.
// Each shape runs once per gate (attn_gate = none | headwise | elementwise at the sdpa position
// with a sigmoid). A timed step is what train_gpt does per optimizer step with one micro-batch:
// zero the gradients, forward, backward, global gradient norm, AdamW; on fixed random tokens
// (no data loading). The time is the wall clock between two device synchronisations; the
// median over the timed steps is reported, after the warm-up steps (the first step allocates
// scratch buffers and picks cuBLASLt algorithms).
//
// Columns: tokens/s; TFLOP/s from the model's FLOPs per token (docs/architecture.md, 6 x
// matmul params + attention); MFU against the peak of the precision this build computes in
// (fp32, TF32 with GATEDGPT_CUDA_TF32=1, bf16 with GATEDGPT_CUDA_BF16_GEMM=1: ops_peak_flops) and against the bf16 dense peak
// (the target); the gate's overhead = step time over the same shape's ungated step
// time, minus 1, and beside it (in parentheses) the share of FLOPs the gate adds by
// construction (its projection W_g: for the elementwise gate as large as W_q, e.g. +5.3% of
// GPT-2's training FLOPs at T 1024, +10.7% of the 15B MoE's): the measured overhead can only
// approach that, and the fused gate costs nothing beyond it when it does; memory = the peak of the backend's allocations
// during the config and the device's used memory after it (CUDA context and cuBLAS included).
// The table goes to stdout last; --tsv appends one line per config for scripts. With
// GATEDGPT_CUDA_PROFILE=1 each config also prints a per-op time table of its timed steps (the
// device is synchronised around every op then, so those step times are not the benchmark's).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "kernels/cuda/cuda_backend.h"

#define MAX_SHAPES 8
#define MAX_SETS 32
#define MAX_CONFIGS (MAX_SHAPES * 3)

typedef struct {
    const char* name;
    const char* ini;
    const char* sets[MAX_SETS];
    int n_sets;
} Shape;

typedef struct {
    char name[96];
    int gate, B, T;
    double params, flops_tok, med_ms, min_ms, max_ms, loss0, loss_last;
    size_t peak_backend, device_used;
    int ok;
} Result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static const char* gate_str(int g) { return g == GATE_NONE ? "none" : g == GATE_HEADWISE ? "headwise" : "elementwise"; }

static int resolve(Config* c, const Shape* s, int gate) {
    char buf[3][64];
    config_defaults(c);
    if (config_load_file(c, s->ini) != 0) return -1;
    snprintf(buf[0], 64, "model.attn_gate=%s", gate_str(gate));
    snprintf(buf[1], 64, "model.gate_position=sdpa");
    snprintf(buf[2], 64, "model.gate_act=sigmoid");
    for (int i = 0; i < 3; i++) if (config_apply_override(c, buf[i]) != 0) return -1;
    for (int i = 0; i < s->n_sets; i++) if (config_apply_override(c, s->sets[i]) != 0) return -1;
    if (config_apply_override(c, "train.tokens_per_step=0") != 0) return -1;   // one micro-batch per step
    return config_finalize(c, s->ini);
}

static void run_config(Result* r, const Shape* s, int gate, int warmup, int steps) {
    Config cfg;
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s/%s", s->name, gate_str(gate));
    r->gate = gate;
    if (resolve(&cfg, s, gate) != 0) { fprintf(stderr, "%s: bad config\n", r->name); return; }
    const ModelConfig* mc = &cfg.model;
    const TrainConfig* tc = &cfg.train;
    const int B = tc->batch_size, T = tc->seq_len, N = B * T;
    r->B = B; r->T = T;
    r->flops_tok = gpt_flops_per_token(mc, T);
    cuda_reset_peak();
    double t0 = now_s();
    GPT m;
    gpt_build(&m, mc, tc->seed);
    m.attn_impl = (OpsAttnImpl)tc->attn_impl;
    gpt_alloc_acts(&m, B, T);
    Optim opt;
    optim_init(&opt, &m);
    r->params = (double)m.table.total;
    fprintf(stderr, "%-32s B=%d T=%d %.1fM params, %.2f GFLOP/token, built in %.1f s\n", r->name, B, T,
            r->params / 1e6, r->flops_tok / 1e9, now_s() - t0);
    // fixed random tokens (xorshift), the same for every gate of a shape
    int* in = malloc((size_t)N * sizeof(int));
    int* tg = malloc((size_t)N * sizeof(int));
    uint64_t st = 88172645463325252ULL;
    for (int i = 0; i < N; i++) {
        st ^= st << 13; st ^= st >> 7; st ^= st << 17;
        in[i] = (int)(st % (uint64_t)mc->vocab_size);
    }
    for (int i = 0; i < N; i++) tg[i] = in[(i + 1) % N];
    double* ms = malloc((size_t)(steps > 0 ? steps : 1) * sizeof(double));
    for (int step = 0; step < warmup + steps; step++) {
        if (step == warmup) cuda_profile_reset();   // GATEDGPT_CUDA_PROFILE=1: the timed steps only
        cuda_sync();
        double a = now_s();
        gpt_zero_grad(&m);
        float loss = gpt_forward(&m, in, tg);
        gpt_backward(&m, 1.0f);
        float norm = optim_grad_norm(&m);
        optim_step(&opt, &m, tc, tc->lr, norm);
        cuda_sync();
        double dt = (now_s() - a) * 1e3;
        if (step == 0) r->loss0 = loss;
        r->loss_last = loss;
        if (step >= warmup) ms[step - warmup] = dt;
        fprintf(stderr, "  %s step %d%s: %.2f ms, loss %.4f, grad norm %.3f\n", r->name, step + 1,
                step < warmup ? " (warm-up)" : "", dt, loss, norm);
    }
    if (cuda_profile_enabled()) {
        char title[160];
        snprintf(title, sizeof title, "%s, %d timed steps (median step %.2f ms with the syncs)", r->name, steps,
                 steps > 0 ? ms[steps / 2] : 0.0);
        cuda_profile_print(title);
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    r->med_ms = ms[steps / 2];
    r->min_ms = ms[0];
    r->max_ms = ms[steps - 1];
    r->peak_backend = cuda_allocated_peak_bytes();
    r->device_used = cuda_device_used_bytes();
    r->ok = 1;
    free(ms); free(in); free(tg);
    optim_free(&opt);
    gpt_free(&m);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_gpu [--steps N] [--warmup N] [--gates none,headwise,elementwise] [--tsv PATH]\n"
            "                 --shape NAME CONFIG.ini [--set section.key=value ...] [--shape ...]\n");
}

int main(int argc, char** argv) {
    Shape shapes[MAX_SHAPES];
    int nshapes = 0, steps = 5, warmup = 2;
    const char* gates = "none,headwise,elementwise";
    const char* tsv = NULL;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--gates") && i + 1 < argc) gates = argv[++i];
        else if (!strcmp(a, "--tsv") && i + 1 < argc) tsv = argv[++i];
        else if (!strcmp(a, "--shape") && i + 2 < argc && nshapes < MAX_SHAPES) {
            Shape* s = &shapes[nshapes++];
            memset(s, 0, sizeof(*s));
            s->name = argv[++i];
            s->ini = argv[++i];
        } else if (!strcmp(a, "--set") && i + 1 < argc && nshapes > 0 && shapes[nshapes - 1].n_sets < MAX_SETS) {
            shapes[nshapes - 1].sets[shapes[nshapes - 1].n_sets++] = argv[++i];
        } else { usage(); return 2; }
    }
    if (nshapes == 0 || steps < 1 || warmup < 0) { usage(); return 2; }
    char why[256];
    if (!cuda_device_present(why, sizeof why)) {
        printf("skipped: no CUDA device (%s)\n", why);
        return 0;
    }
    ops_init(0);
    double peak = ops_peak_flops(), peak_bf16 = cuda_peak_flops_bf16();
    // the bf16 dense peak comes from the same place as ops_peak_flops: the table entry or the estimate
    const char* bf16_from = strncmp(ops_peak_source(), "table:", 6) == 0 ? "the same data-sheet entry" : "16 x the fp32 estimate";
    fprintf(stderr, "bench_gpu: %s | peak %.1f TFLOP/s (%s) (%s), bf16 dense %.1f TFLOP/s (%s)\n", ops_backend_name(),
            peak / 1e12, cuda_gemm_math_name(), ops_peak_source(), peak_bf16 / 1e12, bf16_from);

    Result res[MAX_CONFIGS];
    int n = 0;
    for (int si = 0; si < nshapes; si++)
        for (int g = 0; g < 3; g++) {
            int gate = g == 0 ? GATE_NONE : g == 1 ? GATE_HEADWISE : GATE_ELEMENTWISE;
            if (!strstr(gates, gate_str(gate))) continue;
            run_config(&res[n++], &shapes[si], gate, warmup, steps);
        }

    FILE* tf = tsv ? fopen(tsv, "a") : NULL;
    printf("\n== gatedgpt CUDA training step: %s | median of %d steps after %d warm-up ==\n", ops_backend_name(), steps, warmup);
    printf("MFU against: %.1f TFLOP/s (%s); bf16 dense %.1f TFLOP/s (%s)\n", peak / 1e12, ops_peak_source(), peak_bf16 / 1e12,
           bf16_from);
    printf("%-30s %10s %8s %9s %9s %10s %8s %8s %8s %16s %10s %10s\n", "config", "B x T", "params", "GFLOP/tok",
           "ms/step", "tok/s", "TFLOP/s", cuda_gemm_math() == CUDA_MATH_BF16 ? "MFU bf16g" : cuda_tf32_enabled() ? "MFU tf32" : "MFU fp32", "MFU bf16", "gate ovh (FLOPs)",
           "peak MiB", "device MiB");
    for (int i = 0; i < n; i++) {
        Result* r = &res[i];
        if (!r->ok) { printf("%-30s failed\n", r->name); continue; }
        double tok_s = r->B * (double)r->T / (r->med_ms * 1e-3), fl = tok_s * r->flops_tok;
        char ovh[32] = "-";
        for (int j = 0; j < n; j++)   // the ungated config of the same shape
            if (j != i && res[j].ok && res[j].gate == GATE_NONE && r->gate != GATE_NONE &&
                strncmp(res[j].name, r->name, strchr(r->name, '/') - r->name + 1) == 0)
                snprintf(ovh, sizeof ovh, "%+.1f%% (%+.1f%%)", 100.0 * (r->med_ms / res[j].med_ms - 1.0),
                         100.0 * (r->flops_tok / res[j].flops_tok - 1.0));
        char bt[32];
        snprintf(bt, sizeof bt, "%dx%d", r->B, r->T);
        printf("%-30s %10s %7.1fM %9.3f %9.2f %10.0f %8.1f %7.1f%% %7.2f%% %16s %10.0f %10.0f\n", r->name, bt,
               r->params / 1e6, r->flops_tok / 1e9, r->med_ms, tok_s, fl / 1e12, 100.0 * fl / peak,
               100.0 * fl / peak_bf16, ovh, r->peak_backend / 1048576.0, r->device_used / 1048576.0);
        if (tf)
            fprintf(tf, "%s\t%s\t%.1fM\t%.3f\t%.2f\t%.0f\t%.1f\t%.1f%%\t%.2f%%\t%s\t%.0f\t%.0f\n", r->name, bt,
                    r->params / 1e6, r->flops_tok / 1e9, r->med_ms, tok_s, fl / 1e12, 100.0 * fl / peak,
                    100.0 * fl / peak_bf16, ovh, r->peak_backend / 1048576.0, r->device_used / 1048576.0);
    }
    if (tf) fclose(tf);
    int failed = 0;
    for (int i = 0; i < n; i++) failed += !res[i].ok;
    return failed ? 1 : 0;
}
