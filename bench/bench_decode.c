// bench/bench_decode.c: generation speed with the KV cache (model/kv_cache.h, as
// model/sample.c generates) against recomputing the whole context for every token (how
// sampling worked before the cache: one forward over the padded window per new token), measured
// side by side in one run, greedy, on randomly initialised weights.
//
// usage: bench_decode [--prompt P] [--new G] [--reps R] [CONFIG.ini ...]
//   defaults: P = 64 prompt tokens, G = 32 new tokens, 3 repetitions (the best is kept),
//   configs/tiny_gated.ini and configs/gpt2_124m.ini. Prints tokens/s of each way and the ratio,
//   and whether both produced the same tokens (greedy over the same logits up to fp32 roundoff:
//   near-ties of random weights may flip a token, so this is reported, not required).
#include "../model/config.h"
#include "../model/gpt.h"
#include "../model/kv_cache.h"
#include "../model/sample.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int argmax(const float* x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

// recompute: for every new token one forward over the context window of P + G tokens (zero
// padding after the text), the logits of the last real token
static void generate_recompute(GPT* m, const int* prompt, int P, int G, int* out) {
    const int T = P + G, V = m->cfg.vocab_size;
    gpt_alloc_acts(m, 1, T);
    int* idx = calloc((size_t)T, sizeof(int));
    float* logits = malloc((size_t)V * sizeof(float));
    memcpy(idx, prompt, (size_t)P * sizeof(int));
    for (int len = P; len < T; len++) {
        gpt_forward(m, idx, NULL);
        gpt_logits_to_host(m, logits, len - 1, V);
        idx[len] = argmax(logits, V);
    }
    memcpy(out, idx + P, (size_t)G * sizeof(int));
    free(idx); free(logits);
}

int main(int argc, char** argv) {
    int P = 64, G = 32, reps = 3;
    const char* configs[16];
    int nc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) P = atoi(argv[++i]);
        else if (strcmp(argv[i], "--new") == 0 && i + 1 < argc) G = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && nc < 16) configs[nc++] = argv[i];
        else { fprintf(stderr, "usage: bench_decode [--prompt P] [--new G] [--reps R] [CONFIG.ini ...]\n"); return 1; }
    }
    if (P < 1 || G < 1 || reps < 1) { fprintf(stderr, "error: bench_decode: --prompt, --new, --reps must be >= 1\n"); return 1; }
    if (nc == 0) { configs[nc++] = "configs/tiny_gated.ini"; configs[nc++] = "configs/gpt2_124m.ini"; }
    ops_init(0);
    printf("bench_decode: %s; prompt %d tokens, %d new (greedy), best of %d\n", ops_backend_name(), P, G, reps);
    printf("%-28s %10s %14s %14s %8s %s\n", "config", "params", "cache tok/s", "recompute tok/s", "ratio", "same tokens");
    for (int ci = 0; ci < nc; ci++) {
        Config cfg;
        config_defaults(&cfg);
        char ov[64];
        snprintf(ov, sizeof ov, "train.seq_len=%d", P + G);
        // the training batch does not matter here: sized so that any config finalizes
        if (config_load_file(&cfg, configs[ci]) || config_apply_override(&cfg, ov) ||
            config_apply_override(&cfg, "train.tokens_per_step=0") || config_apply_override(&cfg, "train.batch_size=1") ||
            config_finalize(&cfg, configs[ci])) return 1;
        if (P + G > cfg.model.max_seq_len) {
            fprintf(stderr, "error: bench_decode: %s: prompt + new = %d > [model] max_seq_len %d\n", configs[ci], P + G,
                    cfg.model.max_seq_len);
            return 1;
        }
        GPT m;
        gpt_build(&m, &cfg.model, 1);
        int* prompt = malloc((size_t)P * sizeof(int));
        for (int i = 0; i < P; i++) prompt[i] = (i * 7919 + 13) % cfg.model.vocab_size;
        int* a = malloc((size_t)G * sizeof(int));
        int* b = malloc((size_t)G * sizeof(int));
        double best_c = 1e30, best_r = 1e30;
        for (int r = 0; r < reps; r++) {   // alternate, so that drifts of the machine hit both
            gpt_alloc_acts(&m, 1, P + G);
            double t0 = now();
            sample_generate(&m, prompt, P, G, 0.0f, 0, 1, a);
            double t1 = now();
            generate_recompute(&m, prompt, P, G, b);
            double t2 = now();
            if (t1 - t0 < best_c) best_c = t1 - t0;
            if (t2 - t1 < best_r) best_r = t2 - t1;
        }
        int same = 0;
        for (int i = 0; i < G; i++) same += a[i] == b[i];
        size_t n = m.table.total;
        printf("%-28s %9.1fM %14.1f %14.1f %7.1fx %d/%d\n", configs[ci], n / 1e6, G / best_c, G / best_r,
               best_r / best_c, same, G);
        fflush(stdout);
        free(prompt); free(a); free(b);
        gpt_free(&m);
    }
    return 0;
}
