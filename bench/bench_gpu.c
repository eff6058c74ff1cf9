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
//
// The hybrid row: --gdn NAME B,T,Hk,Hv,dk,dv times the Gated DeltaNet's delta rule alone
// (ops_gdn_forward and ops_gdn_backward, chunk 64, on random L2-normalised q, k, gates in
// Qwen3-Next's range), the chunked kernels (kernels/cuda/deltanet_chunk.cu) and, for T <= 8192,
// the recurrent ones (GATEDGPT_GDN_CHUNK=recurrent) of the same build: milliseconds (median of
// --steps after --warmup), and TFLOP/s of the chunked form's executed FLOPs (docs/gpu.md
// "Gated DeltaNet on the GPU": the GEMMs and the triangular solve per chunk). Published H200
// figures for 32K tokens, 32 value heads, d 128 (forward / backward): FlashQLA 0.885 / 2.515 ms,
// flash-linear-attention 1.885 / 5.697 ms. Builds; not yet run on a GPU.
#include <math.h>
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
        float loss = gpt_forward_train(&m, in, tg, 1.0f);   // the trainer's step (train_gpt.c)
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

// ---- the delta rule alone (--gdn) -------------------------------------------------------------
typedef struct {
    const char* name;
    int B, T, Hk, Hv, dk, dv;
} GdnShape;

// FLOPs the chunked kernels execute (C = 64): per chunk and value head the GEMMs 2 M N K of
// deltanet_chunk.cu (K K^T and Q K^T once per key head) and the triangular solve (C^3 / 3);
// forward: K K^T / rep, W, Kc, Vn = W - Kc S, the state update, Q K^T / rep, Q S, P Vn;
// backward: the forward's wy and state passes again, then P^T, P^T dO, Kd dS', Qd^T dO, Kc^T dVn
// (dstate, per 64-column slice: P^T once per slice), dO S^T, dVn S^T, Vn dS'^T, Q K^T, dO Vn^T,
// H K, H^T Q (dqk), Tinv^T dVn, Tinv^T dKc, dRv W^T, dRk Kc^T, K K^T, G K, G^T K (dwy; these two
// recompute Q K^T and K K^T per value head)
static void gdn_flops(const GdnShape* g, double* fwd, double* bwd) {
    const double C = 64, dk = g->dk, dv = g->dv, rep = (double)g->Hv / g->Hk;
    const double chunks = (double)g->B * g->Hv * ((g->T + 63) / 64), slices = dv / 64;
    const double wy = 2 * C * C * dk / rep + C * C * C / 3 + 2 * C * C * dv + 2 * C * C * dk;
    const double state = 2 * (2 * C * dk * dv);
    const double out = 2 * C * C * dk / rep + 2 * C * dk * dv + 2 * C * C * dv;
    const double dstate = slices * 2 * C * C * dk + 2 * C * C * dv + 3 * (2 * C * dk * dv);
    const double dqk = 3 * (2 * C * dk * dv) + 2 * C * C * dk + 2 * C * C * dv + 2 * (2 * C * C * dk);
    const double dwy = 2 * C * C * dv + 2 * C * C * dk + 2 * C * C * dv + 2 * C * C * dk + 2 * C * C * dk + 2 * (2 * C * C * dk);
    *fwd = chunks * (wy + state + out);
    *bwd = chunks * (wy + state + dstate + dqk + dwy);
}

static float* gdn_dev_rand(size_t n, double lo, double hi, uint64_t* st) {
    float* h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *st ^= *st << 13; *st ^= *st >> 7; *st ^= *st << 17;
        h[i] = (float)(lo + (hi - lo) * (double)(*st >> 11) / 9007199254740992.0);
    }
    float* d = ops_malloc(n * sizeof(float));
    ops_from_host(d, h, n * sizeof(float));
    free(h);
    return d;
}

static double gdn_time(int fwd, int warmup, int steps, float* o, float* dq, float* dk, float* dv, float* dg, float* db,
                       const float* q, const float* k, const float* v, const float* g, const float* beta,
                       const float* dout, const OpsGdnShape* s) {
    double* ms = malloc((size_t)steps * sizeof(double));
    for (int i = 0; i < warmup + steps; i++) {
        cuda_sync();
        double a = now_s();
        if (fwd) ops_gdn_forward(o, NULL, NULL, q, k, v, g, beta, NULL, s);
        else ops_gdn_backward(dq, dk, dv, dg, db, dout, q, k, v, g, beta, NULL, s);
        cuda_sync();
        if (i >= warmup) ms[i - warmup] = (now_s() - a) * 1e3;
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    double m = ms[steps / 2];
    free(ms);
    return m;
}

static void run_gdn(const GdnShape* g, int warmup, int steps, FILE* tf) {
    const size_t N = (size_t)g->B * g->T, nqk = N * g->Hk * g->dk, nv = N * g->Hv * g->dv, ng = N * g->Hv;
    uint64_t st = 88172645463325252ULL;
    // q, k: random rows, L2-normalised on the host per head; g in [-1.6, 0] (Qwen3-Next's -A dt
    // range at initialisation), beta in [0.05, 0.95]
    float* qk[2];
    for (int w = 0; w < 2; w++) {
        float* h = malloc(nqk * sizeof(float));
        for (size_t i = 0; i < nqk; i++) {
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            h[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
        }
        for (size_t r = 0; r < N * g->Hk; r++) {
            double ss = 0.0;
            for (int i = 0; i < g->dk; i++) ss += (double)h[r * g->dk + i] * h[r * g->dk + i];
            for (int i = 0; i < g->dk; i++) h[r * g->dk + i] = (float)(h[r * g->dk + i] / sqrt(ss));
        }
        qk[w] = ops_malloc(nqk * sizeof(float));
        ops_from_host(qk[w], h, nqk * sizeof(float));
        free(h);
    }
    float *v = gdn_dev_rand(nv, -1, 1, &st), *gg = gdn_dev_rand(ng, -1.6, 0, &st), *beta = gdn_dev_rand(ng, 0.05, 0.95, &st);
    float* dout = gdn_dev_rand(nv, -1, 1, &st);
    float *o = ops_malloc(nv * sizeof(float)), *dq = ops_malloc(nqk * sizeof(float)), *dk = ops_malloc(nqk * sizeof(float));
    float *dv = ops_malloc(nv * sizeof(float)), *dg = ops_malloc(ng * sizeof(float)), *db = ops_malloc(ng * sizeof(float));
    OpsGdnShape s = {g->B, g->T, g->Hk, g->Hv, g->dk, g->dv, 64, 0, 0, NULL};
    double ff, fb;
    gdn_flops(g, &ff, &fb);
    for (int rec = 0; rec <= 1; rec++) {
        if (rec && g->T > 8192) break;   // the recurrent kernels: serial in T
        if (rec) setenv("GATEDGPT_GDN_CHUNK", "recurrent", 1);
        const double tf_ = gdn_time(1, warmup, steps, o, dq, dk, dv, dg, db, qk[0], qk[1], v, gg, beta, dout, &s);
        const double tb = gdn_time(0, warmup, steps, o, dq, dk, dv, dg, db, qk[0], qk[1], v, gg, beta, dout, &s);
        if (rec) unsetenv("GATEDGPT_GDN_CHUNK");
        const char* path = rec ? "recurrent" : "chunked";
        printf("%-24s %-9s B=%d T=%-6d Hk=%-3d Hv=%-3d dk=%-3d dv=%-3d  fwd %9.3f ms  bwd %9.3f ms  (%.1f / %.1f TFLOP/s of "
               "the chunked form's %.1f / %.1f GFLOP)\n", g->name, path, g->B, g->T, g->Hk, g->Hv, g->dk, g->dv, tf_, tb,
               ff / (tf_ * 1e-3) / 1e12, fb / (tb * 1e-3) / 1e12, ff / 1e9, fb / 1e9);
        if (tf)
            fprintf(tf, "gdn_%s_%s\t%dx%d\tHk%d Hv%d dk%d dv%d\t-\t%.3f (fwd)\t%.3f (bwd)\t%.1f\t-\t-\t-\t-\t-\n", g->name, path,
                    g->B, g->T, g->Hk, g->Hv, g->dk, g->dv, tf_, tb, (ff + fb) / ((tf_ + tb) * 1e-3) / 1e12);
    }
    ops_free(qk[0]); ops_free(qk[1]); ops_free(v); ops_free(gg); ops_free(beta); ops_free(dout);
    ops_free(o); ops_free(dq); ops_free(dk); ops_free(dv); ops_free(dg); ops_free(db);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_gpu [--steps N] [--warmup N] [--gates none,headwise,elementwise] [--tsv PATH]\n"
            "                 --shape NAME CONFIG.ini [--set section.key=value ...] [--shape ...]\n"
            "                 [--gdn NAME B,T,Hk,Hv,dk,dv ...]   (the delta rule alone, chunked and recurrent)\n");
}

int main(int argc, char** argv) {
    Shape shapes[MAX_SHAPES];
    GdnShape gdns[MAX_SHAPES];
    int nshapes = 0, ngdn = 0, steps = 5, warmup = 2;
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
        } else if (!strcmp(a, "--gdn") && i + 2 < argc && ngdn < MAX_SHAPES) {
            GdnShape* g = &gdns[ngdn++];
            g->name = argv[++i];
            if (sscanf(argv[++i], "%d,%d,%d,%d,%d,%d", &g->B, &g->T, &g->Hk, &g->Hv, &g->dk, &g->dv) != 6 || g->B < 1 ||
                g->T < 1 || g->Hk < 1 || g->Hv < 1 || g->Hv % g->Hk || g->dk < 1 || g->dv < 1) {
                fprintf(stderr, "bench_gpu: --gdn %s: want B,T,Hk,Hv,dk,dv (positive, Hv a multiple of Hk), got '%s'\n",
                        g->name, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--set") && i + 1 < argc && nshapes > 0 && shapes[nshapes - 1].n_sets < MAX_SETS) {
            shapes[nshapes - 1].sets[shapes[nshapes - 1].n_sets++] = argv[++i];
        } else { usage(); return 2; }
    }
    if ((nshapes == 0 && ngdn == 0) || steps < 1 || warmup < 0) { usage(); return 2; }
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

    if (ngdn > 0) {
        FILE* gf = tsv ? fopen(tsv, "a") : NULL;
        printf("\n== the Gated DeltaNet's delta rule alone: %s | median of %d calls after %d warm-up ==\n", ops_backend_name(),
               steps, warmup);
        for (int i = 0; i < ngdn; i++) run_gdn(&gdns[i], warmup, steps, gf);
        if (gf) fclose(gf);
        if (nshapes == 0) return 0;
    }

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
