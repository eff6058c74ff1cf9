// train_gpt.c: gatedgpt's entry point. Parse the config, build the model, run the loop.
//
//   ./build/train_gpt --config configs/tiny_gated.ini [--section.key=value ...] [--check]
//   ./build/train_gpt --config configs/tiny_gated.ini --resume auto      (or --resume PATH)
//
// One step: grad_accum micro-batches of B x T tokens (forward, backward into the gradient
// arena), then global-norm clip + AdamW at the scheduled learning rate.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "model/sample.h"
#include "model/probe.h"
#include "train/spike.h"
#include "train/checkpoint.h"
#include "train/resume.h"
#include "train/comm.h"
#include "train/dist.h"
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void usage(FILE* f) {
    fprintf(f,
        "usage: train_gpt --config FILE.ini [--section.key=value ...] [--resume auto|PATH] [--check]\n"
        "  --config FILE    INI config (sections [model] [moe] [train] [data] [log] [checkpoint] [metrics]);\n"
        "                   every key and its default: docs/config.md\n"
        "  --S.K=V          override key K of section S, e.g. --train.lr=1e-3\n"
        "  --resume auto    continue from the newest good checkpoint in [checkpoint] dir (a damaged\n"
        "                   one is skipped with a warning); start fresh when there is none\n"
        "  --resume PATH    continue from the checkpoint directory PATH (.../step_NNNNNNNN); without\n"
        "                   --config, its config.ini is the config (overrides still apply)\n"
        "  --stop-after N   stop after step N (checkpointing there when checkpoint_every > 0) as if the\n"
        "                   job hit its time limit; the schedule still runs over [train] steps\n"
        "  --check          validate the config, print it resolved, and exit\n"
        "  --help           this text\n");
}

// mkdir -p
static int make_dirs(const char* path) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

// Write the resolved config as <run_dir>/config.ini, via a temporary name and rename, so a
// crash never leaves a half-written file under the final name.
static int save_config(const Config* c) {
    char tmp[1100], dst[1100];
    snprintf(tmp, sizeof(tmp), "%s/config.ini.tmp", c->log.run_dir);
    snprintf(dst, sizeof(dst), "%s/config.ini", c->log.run_dir);
    FILE* f = fopen(tmp, "w");
    if (!f) return -1;
    config_write(c, f);
    if (fclose(f) != 0) return -1;
    return rename(tmp, dst);
}

// Mean loss over `nbatches` batches from the start of the validation stream.
static float evaluate(GPT* m, DataLoader* dl, int nbatches, int* in, int* tg) {
    dataloader_reset(dl);
    double sum = 0.0;
    for (int i = 0; i < nbatches; i++) {
        if (dataloader_next(dl, in, tg) != 0) exit(1);
        sum += gpt_forward(m, in, tg);
    }
    return (float)(sum / nbatches);
}

// Length of the valid UTF-8 sequence starting at s[0] (of at most n bytes), or 0 if invalid.
static int utf8_len(const unsigned char* s, int n) {
    int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (int i = 1; i < len; i++) if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

// Writes s[0..n) as the body of a JSON string: quotes, backslashes and control bytes escaped,
// valid UTF-8 passed through, and any other byte written as \u00XX so the line stays valid JSON.
static void json_escape(FILE* f, const unsigned char* s, int n) {
    for (int i = 0; i < n;) {
        unsigned char c = s[i];
        int u = utf8_len(s + i, n - i);
        if (c == '"' || c == '\\') { fprintf(f, "\\%c", c); i++; }
        else if (c == '\n') { fputs("\\n", f); i++; }
        else if (c < 0x20 || u == 0) { fprintf(f, "\\u%04x", c); i++; }
        else { fwrite(s + i, 1, (size_t)u, f); i += u; }
    }
}

// A JSON number, or null when x is not finite (JSON has no NaN or Infinity). Printed with 17
// significant digits, which round-trip a double exactly: two runs whose logged losses are equal
// computed the same bits (tests compare them with tolerance 0).
static void json_number(FILE* f, double x) {
    if (isfinite(x)) fprintf(f, "%.17g", x);
    else fputs("null", f);
}

// Decoding of sampled tokens: the run's tokenizer, else raw bytes for a byte-level vocab.
typedef struct { Tokenizer tok; int have_tok; int vocab_size; } Decoder;

static const unsigned char* decode_token(const Decoder* d, int id, int* len, unsigned char* byte) {
    if (d->have_tok) return tokenizer_token_bytes(&d->tok, id, len);
    if (d->vocab_size <= 256) { *byte = (unsigned char)id; *len = 1; return byte; }
    *len = 0;
    return NULL;
}

// Generate and print one sample, and log it as a "sample" record.
static void print_sample(GPT* m, const Config* cfg, const Decoder* d, int step, FILE* logf) {
    const LogConfig* lc = &cfg->log;
    int* prompt = NULL;
    size_t np = 0;
    if (lc->sample_prompt[0] && d->have_tok) {
        if (tokenizer_encode(&d->tok, lc->sample_prompt, strlen(lc->sample_prompt), &prompt, &np) != 0) np = 0;
    } else if (lc->sample_prompt[0] && d->vocab_size <= 256) {
        np = strlen(lc->sample_prompt);
        prompt = malloc(np * sizeof(int));
        for (size_t i = 0; i < np; i++) prompt[i] = (unsigned char)lc->sample_prompt[i];
    }
    if (np == 0) {   // start from end-of-text (or a newline for byte-level text)
        free(prompt);
        prompt = malloc(sizeof(int));
        int eot = d->have_tok ? tokenizer_eot(&d->tok) : -1;
        prompt[0] = eot >= 0 ? eot : (d->vocab_size <= 256 ? '\n' : 0);
        np = 1;
    }
    int* out = malloc((size_t)lc->sample_tokens * sizeof(int));
    sample_generate(m, prompt, (int)np, lc->sample_tokens, lc->sample_temperature, lc->sample_top_k,
                    cfg->train.seed + (unsigned long long)step, out);
    // decode into one buffer: a UTF-8 character may span tokens
    size_t cap = 64, n = 0;
    unsigned char* text = malloc(cap);
    for (int i = 0; i < lc->sample_tokens; i++) {
        int len;
        unsigned char byte, idbuf[16];
        const unsigned char* b = decode_token(d, out[i], &len, &byte);
        if (!b) { len = snprintf((char*)idbuf, sizeof idbuf, "<%d>", out[i]); b = idbuf; }
        while (n + (size_t)len + 1 > cap) text = realloc(text, cap *= 2);
        memcpy(text + n, b, (size_t)len);
        n += (size_t)len;
    }
    printf("---- sample at step %d (temperature %.2f, top-k %d) ----\n%s", step, lc->sample_temperature,
           lc->sample_top_k, lc->sample_prompt);
    fwrite(text, 1, n, stdout);
    printf("\n----\n");
    fflush(stdout);
    fprintf(logf, "{\"type\":\"sample\",\"step\":%d,\"prompt\":\"", step);
    json_escape(logf, (const unsigned char*)lc->sample_prompt, (int)strlen(lc->sample_prompt));
    fprintf(logf, "\",\"text\":\"");
    json_escape(logf, text, (int)n);
    fprintf(logf, "\"}\n");
    free(text);
    free(prompt);
    free(out);
}

// The stability probe (docs/metrics.md): one JSON record and a console line.
static void run_probe(GPT* m, const int* in, const int* tg, int step, FILE* logf) {
    double t0 = now_s();
    ProbeResult r;
    probe_run(m, in, tg, step, &r);
    r.ms = (float)((now_s() - t0) * 1e3);
    probe_write_json(&r, logf);
    char moe[96] = "";
    if (r.has_moe) {   // the largest max/mean expert load over the MoE layers
        float ml = 0.0f;
        for (int l = 0; l < r.n_layer; l++) if (r.layer[l].moe_max_load > ml) ml = r.layer[l].moe_max_load;
        snprintf(moe, sizeof moe, " | MoE max/mean load %.2f", ml);
    }
    printf("step %5d | probe: F-Attn %.3f (uniform %.3f) | M-Act %.1f | gate %s%.3f%s | %.0f ms\n", step,
           r.f_attn_mean, r.f_attn_uniform, r.m_act_mean, r.has_gate ? "" : "- ", r.has_gate ? r.gate_mean : 0.0f, moe, r.ms);
    probe_free(&r);
}

// Returns 1 when x is a spike (z > spike_z) and writes its record; sets *skip when z exceeds a
// non-zero skip threshold.
static int check_spike(SpikeWindow* w, const char* kind, double x, float spike_z_thr, float skip_z,
                       int step, FILE* logf, int* skip) {
    double mean, sd, z = spike_z(w, x, &mean, &sd);
    if (!(z > spike_z_thr)) return 0;
    int skipped = skip_z > 0.0f && z > skip_z;
    if (skipped) *skip = 1;
    fprintf(logf, "{\"type\":\"spike\",\"step\":%d,\"kind\":\"%s\",\"value\":%.6g,\"mean\":%.6g,\"std\":%.6g,\"z\":%.3f,\"skipped\":%s}\n",
            step, kind, x, mean, sd, z, skipped ? "true" : "false");
    printf("step %5d | %s spike: %.4g vs mean %.4g (z = %.1f)%s\n", step, kind, x, mean, z, skipped ? " | update skipped" : "");
    return 1;
}

// Writes the checkpoint of cs->step, then prunes older ones; logs a "checkpoint" record. On a
// failure the error is printed (with what on_write_error will do) and -1 returned; the
// checkpoint is removed again and older ones are untouched (train/checkpoint.h).
// checkpoint_save_ranks's agreement: any rank failed -> every rank sees 1
static int ckpt_agree(void* ctx, int failed) {
    double f = failed ? 1.0 : 0.0;
    comm_allreduce_max_f64((Comm*)ctx, &f, 1);
    return f != 0.0;
}

static int write_checkpoint(Comm* comm, const Config* cfg, const char* dir, const GPT* m, const Optim* o,
                            const CkptTrainState* cs, FILE* logf) {
    double t0 = now_s();
    char path[CKPT_PATH_MAX];
    checkpoint_path(path, sizeof path, dir, cs->step);
    // every rank writes its own state, rank 0 the shared files and DONE (train/checkpoint.h)
    if (checkpoint_save_ranks(dir, cs->step, cfg, m, o, cs, comm->rank, comm->size, ckpt_agree, comm) != 0) {
        fprintf(logf, "{\"type\":\"checkpoint\",\"step\":%d,\"ok\":false}\n", cs->step);
        fflush(logf);
        if (cfg->ckpt.on_write_error == CKPT_ON_ERROR_EXIT)
            fprintf(stderr, "error: step %d: checkpoint write failed (above); stopping ([checkpoint] on_write_error = exit); "
                    "the older checkpoints are untouched\n", cs->step);
        else
            fprintf(stderr, "warning: step %d: checkpoint write failed (above); training continues ([checkpoint] "
                    "on_write_error = continue); the older checkpoints are untouched\n", cs->step);
        return -1;
    }
    int pruned = comm->rank == 0 ? checkpoint_prune(dir, cfg->ckpt.keep_last, cfg->ckpt.keep_every, cs->step) : 0;
    double ms = (now_s() - t0) * 1e3;
    printf("step %5d/%d | checkpoint %s | %.0f ms%s\n", cs->step, cfg->train.steps, path, ms, pruned ? " | older ones pruned" : "");
    fflush(stdout);
    fprintf(logf, "{\"type\":\"checkpoint\",\"step\":%d,\"ok\":true,\"path\":\"", cs->step);
    json_escape(logf, (const unsigned char*)path, (int)strlen(path));
    fprintf(logf, "\",\"ms\":%.1f}\n", ms);
    fflush(logf);
    return 0;
}

// Fault injection for the distributed tests: GATEDGPT_FAIL_RANK=R GATEDGPT_FAIL_STEP=S makes
// rank R fail with an error at step S (docs/distributed.md).
static int injected_failure(const Comm* comm, int step) {
    const char* r = getenv("GATEDGPT_FAIL_RANK");
    const char* s = getenv("GATEDGPT_FAIL_STEP");
    if (!r || !s || atoi(r) != comm->rank || atoi(s) != step) return 0;
    fprintf(stderr, "error: rank %d of %d: injected failure at step %d (GATEDGPT_FAIL_RANK/GATEDGPT_FAIL_STEP)\n",
            comm->rank, comm->size, step);
    return 1;
}

static int train_main(Comm* comm, int argc, char** argv);

// MoE: the load-balancing loss's expert counts over every process (GPT.moe_reduce)
static void moe_allreduce(void* ctx, double* x, int n) { comm_allreduce_sum_f64((Comm*)ctx, x, (size_t)n); }

// GPT.grads_ready on the last micro-step: a finished layer's gradients go to the reduction now
typedef struct { Dist* dist; float* grads; } GradsReady;
static void grads_ready(void* ctx, size_t lo, size_t hi) {
    GradsReady* g = (GradsReady*)ctx;
    dist_reduce_range(g->dist, g->grads, lo, hi);
}

int main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    // only rank 0 prints; every rank's errors and warnings still reach stderr
    if (comm.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    int rc = train_main(&comm, argc, argv);
    fflush(stdout);
    if (rc != 0 && comm.size > 1) {
        char why[160];
        snprintf(why, sizeof why, "failed (exit status %d, its error is above): stopping all %d ranks", rc, comm.size);
        comm_abort(&comm, rc, why);
    }
    if (rc == 0) comm_finalize(&comm);
    return rc;
}

static int train_main(Comm* comm, int argc, char** argv) {
    Config cfg;
    config_defaults(&cfg);
    const char* config_path = NULL;
    const char* resume_spec = NULL;   // --resume: "auto" or a checkpoint directory
    int stop_after = 0;               // --stop-after N: end the run after step N (0 = at [train] steps)
    int check_only = 0;
    // first pass: the config file; second pass: overrides, so they win regardless of order
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--check") == 0) { check_only = 1; continue; }
        if (strcmp(argv[i], "--stop-after") == 0) {
            char* end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end || v < 1 || v > 2000000000) {
                fprintf(stderr, "error: --stop-after needs a step number >= 1 (got '%s')\n", i + 1 < argc ? argv[i + 1] : "");
                return 1;
            }
            stop_after = (int)v;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--resume") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "error: %s needs a value (%s)\n", argv[i], argv[i][2] == 'c' ? "a config file" : "auto, or a checkpoint directory");
                return 1;
            }
            if (argv[i][2] == 'c') config_path = argv[++i];
            else resume_spec = argv[++i];
            continue;
        }
        if (strncmp(argv[i], "--config=", 9) == 0) { config_path = argv[i] + 9; continue; }
        if (strncmp(argv[i], "--resume=", 9) == 0) { resume_spec = argv[i] + 9; continue; }
        if (strncmp(argv[i], "--", 2) != 0 || !strchr(argv[i], '=') || !strchr(argv[i], '.')) {
            fprintf(stderr, "error: unknown argument '%s' (expected --config FILE, --section.key=value, --resume auto|PATH or --check; see --help)\n", argv[i]);
            return 1;
        }
    }
    if (resume_spec && !resume_spec[0]) { fprintf(stderr, "error: --resume needs a value (auto, or a checkpoint directory)\n"); return 1; }
    // --resume PATH without --config: the checkpoint's own config is the starting point
    char ckpt_config[CKPT_PATH_MAX + 16];
    if (resume_spec && strcmp(resume_spec, "auto") != 0 && !config_path) {
        if (checkpoint_load_config(resume_spec, &cfg) != 0) return 1;
        snprintf(ckpt_config, sizeof ckpt_config, "%s/config.ini", resume_spec);
        config_path = ckpt_config;
    } else if (config_path && config_load_file(&cfg, config_path) != 0) {
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--resume") == 0 || strcmp(argv[i], "--stop-after") == 0) { i++; continue; }
        if (strncmp(argv[i], "--config=", 9) == 0 || strncmp(argv[i], "--resume=", 9) == 0 || strcmp(argv[i], "--check") == 0) continue;
        if (config_apply_override(&cfg, argv[i] + 2) != 0) return 1;
    }
    if (config_finalize(&cfg, config_path ? config_path : "defaults") != 0) return 1;

    printf("gatedgpt: resolved config%s%s\n", config_path ? " from " : "", config_path ? config_path : "");
    config_write(&cfg, stdout);
    if (check_only) {
        // parameter counts from the table alone (no arena): total, and active = what one token
        // passes through (top_k of the n_expert stacked experts of each MoE layer)
        ParamTable pt;
        param_table_build(&pt, &cfg.model);
        size_t total = 0, active = 0;
        for (int i = 0; i < pt.n; i++) {
            total += pt.p[i].numel;
            active += pt.p[i].ndim == 3 ? pt.p[i].numel / cfg.model.moe.n_expert * cfg.model.moe.top_k : pt.p[i].numel;
        }
        param_table_free(&pt);
        printf("\nparams: total=%zu active=%zu (%.3fB total, %.3fB active per token)\n", total, active, total / 1e9, active / 1e9);
        return 0;
    }

    const ModelConfig* mc = &cfg.model;
    const TrainConfig* tc = &cfg.train;
    if (!cfg.data.train_glob[0]) {
        fprintf(stderr, "error: %s: [data] train_glob is empty: set it to your token shards (e.g. data/kjv/train_*.bin, which scripts/prepare_kjv.sh prepares)\n",
                config_path ? config_path : "config");
        return 1;
    }
    {   // [train] tokens_per_step is global: B x T tokens per process and micro-step, P processes
        const int B = tc->batch_size, T = tc->seq_len, P = comm->size;
        long tps = tc->tokens_per_step;
        if (strncmp(config_origin(&cfg, "train", "tokens_per_step"), "derived", 7) == 0) tps = (long)B * T * P;   // 0 in the config
        if (tps % ((long)B * T * P) != 0) {
            fprintf(stderr, "error: %s: [train] tokens_per_step = %ld is not a multiple of batch_size x seq_len x processes = %d x %d x %d = %ld "
                    "(fix: set tokens_per_step to a multiple of %ld, or change batch_size or the process count)\n",
                    config_path ? config_path : "config", tps, B, T, P, (long)B * T * P, (long)B * T * P);
            return 1;
        }
        cfg.train.tokens_per_step = tps;   // saved resolved, so a resume reads the global value
    }
    // which checkpoint to continue from, and whether this config may continue it
    char ckpt_dir[CKPT_PATH_MAX], resume_path[CKPT_PATH_MAX];
    checkpoint_dir_of(ckpt_dir, sizeof ckpt_dir, &cfg);
    int resuming = 0;
    if (resume_spec) {
        // rank 0 chooses (verifying the files); every rank continues from its choice
        memset(resume_path, 0, sizeof resume_path);
        if (comm->rank == 0) resuming = resume_find(resume_spec, ckpt_dir, resume_path, sizeof resume_path);
        comm_broadcast(comm, &resuming, sizeof resuming);
        comm_broadcast(comm, resume_path, sizeof resume_path);
        if (resuming < 0) return 1;
        if (!resuming) printf("resume: no complete checkpoint in %s: starting from step 0\n", ckpt_dir);
    }
    if (resuming) {
        Config saved;
        if (checkpoint_load_config(resume_path, &saved) != 0) return 1;
        if (resume_check_config(&saved, &cfg, resume_path) != 0) return 1;
    }
    ops_init(tc->threads);
    if (tc->attn_impl != ATTN_IMPL_FUSED && strncmp(ops_backend_name(), "cuda", 4) != 0) {
        fprintf(stderr, "error: %s: [train] attn_impl = %s needs the CUDA backend (train_gpt_cuda); this is %s: "
                "set attn_impl = fused\n", config_path ? config_path : "--train.attn_impl",
                tc->attn_impl == ATTN_IMPL_CUDNN ? "cudnn" : "flash", ops_backend_name());
        return 1;
    }
    const int B = tc->batch_size, T = tc->seq_len, P = comm->size;
    const long tokens_per_step = tc->tokens_per_step;
    const int grad_accum = (int)(tokens_per_step / ((long)B * T * P));

    DataLoader train_dl, val_dl;
    int have_val = 0;
    if (dataloader_init(&train_dl, cfg.data.train_glob, B, T, comm->rank, P, mc->vocab_size) != 0) return 1;
    if (cfg.data.shuffle) dataloader_shuffle(&train_dl, tc->seed);
    if (cfg.data.val_glob[0] && cfg.log.val_every > 0) {
        if (dataloader_init(&val_dl, cfg.data.val_glob, B, T, 0, 1, mc->vocab_size) != 0) return 1;
        have_val = 1;
    }

    Decoder dec = {0};
    dec.vocab_size = mc->vocab_size;
    if (cfg.data.tokenizer[0]) {
        if (tokenizer_load(&dec.tok, cfg.data.tokenizer) != 0) return 1;
        dec.have_tok = 1;
        if (tokenizer_vocab_size(&dec.tok) > mc->vocab_size) {
            fprintf(stderr, "error: %s: the tokenizer has %d tokens but [model] vocab_size is %d: set vocab_size >= %d\n",
                    cfg.data.tokenizer, tokenizer_vocab_size(&dec.tok), mc->vocab_size, tokenizer_vocab_size(&dec.tok));
            return 1;
        }
    }
    if (cfg.data.bos) {   // every sample (train, val, probe) starts with the BOS token
        int bos = cfg.data.bos_token;
        if (bos < 0) {
            bos = tokenizer_eot(&dec.tok);
            if (bos < 0) {
                fprintf(stderr, "error: %s: [data] bos = true and bos_token = -1, but this tokenizer has no end-of-text token: set [data] bos_token\n",
                        cfg.data.tokenizer);
                return 1;
            }
        }
        dataloader_set_bos(&train_dl, bos);
        if (have_val) dataloader_set_bos(&val_dl, bos);
        printf("data: every sample starts with BOS token %d\n", bos);
    }

    GPT model;
    gpt_build(&model, mc, tc->seed);   // the same seed on every rank: the same initial weights
    model.attn_impl = (OpsAttnImpl)tc->attn_impl;
    gpt_alloc_acts(&model, B, T);
    Dist dist;
    if (dist_init(&dist, comm, P > 1 ? tc->zero_stage : 0, model.table.total) != 0) return 1;
    Optim opt;
    optim_init_range(&opt, &model, dist.lo, dist.hi);

    double peak = ops_peak_flops();   // this process's share of the machine; summed over ranks
    comm_allreduce_sum_f64(comm, &peak, 1);
    double flops_tok = gpt_flops_per_token(mc, T);
    char peak_sum[64] = "";   // the source below is this process's; the peak is the sum over all
    if (P > 1) snprintf(peak_sum, sizeof peak_sum, ", the sum over %d processes", P);
    printf("backend: %s | peak %.1f GFLOP/s%s (%s)\n", ops_backend_name(), peak / 1e9, peak_sum, ops_peak_source());
    printf("model: %zu parameters (%.2fM), %d tensors | %.3f GFLOP/token (training)\n",
           model.table.total, model.table.total / 1e6, model.table.n, flops_tok / 1e9);
    if (mc->moe.n_expert > 0)
        printf("moe: %d experts, top-%d | %.2fM active matmul parameters per token (of %.2fM)\n", mc->moe.n_expert,
               mc->moe.top_k, gpt_matmul_params(mc) / 1e6, model.table.total / 1e6);
    printf("batch: B=%d T=%d grad_accum=%d processes=%d -> %ld tokens/step | activations %.1f MiB | run dir %s\n",
           B, T, grad_accum, P, tokens_per_step, model.acts_bytes / (double)(1 << 20), cfg.log.run_dir);
    if (P > 1)
        printf("distributed: %s | zero_stage %d: AdamW state for %zu of %zu parameters per process | %s\n",
               comm_name(comm), dist.zero_stage, dist.hi - dist.lo, model.table.total,
               dist.overlap ? "gradients reduced layer by layer during the backward pass" : "gradients reduced after the backward pass");
    fflush(stdout);

    int* in = malloc((size_t)B * T * sizeof(int));
    int* tg = malloc((size_t)B * T * sizeof(int));
    // the probe batch: the first validation batch (else the first training batch), fixed for
    // the whole run so that probes at different steps measure the same tokens
    int* probe_in = malloc((size_t)B * T * sizeof(int));
    int* probe_tg = malloc((size_t)B * T * sizeof(int));
    if (cfg.metrics.probe_every > 0) {
        DataLoader* src = have_val ? &val_dl : &train_dl;
        if (dataloader_next(src, probe_in, probe_tg) != 0) return 1;
        dataloader_reset(src);
        if (src == &train_dl && cfg.data.shuffle) dataloader_shuffle(&train_dl, tc->seed);
    }
    SpikeWindow loss_win, grad_win;
    spike_init(&loss_win, cfg.metrics.spike_window);
    spike_init(&grad_win, cfg.metrics.spike_window);
    int nonfinite_run = 0;

    // resume: weights, AdamW state, data position, spike windows, counters (train/checkpoint.h)
    CkptTrainState cs = {0};
    cs.loss_win = &loss_win;
    cs.grad_win = &grad_win;
    int start_step = 0;
    if (resuming) {
        if (resume_restore(resume_path, &model, &opt, &train_dl, &cs) != 0) return 1;
        start_step = cs.step;
        nonfinite_run = cs.nonfinite_run;
        if (start_step >= tc->steps) {
            printf("resume: the checkpoint is at step %d and [train] steps = %d: nothing left to train (raise [train] steps to continue)\n",
                   start_step, tc->steps);
            return 0;
        }
    }
    // rank 0 owns the checkpoint directory, the run directory and the run log; the others
    // write their records to /dev/null (the same code path, no files)
    if (comm->rank == 0 && cfg.ckpt.checkpoint_every > 0 &&
        resume_prepare_dir(ckpt_dir, start_step, resuming, resume_spec && strcmp(resume_spec, "auto") == 0) != 0)
        return 1;

    // the run directory (only now: a refused start above leaves it as it was)
    if (comm->rank == 0 && (make_dirs(cfg.log.run_dir) != 0 || save_config(&cfg) != 0)) {
        fprintf(stderr, "error: cannot write the run directory '%s' ([log] run_dir): %s\n", cfg.log.run_dir, strerror(errno));
        return 1;
    }
    // the run log: a resumed run keeps the records up to its checkpoint and appends
    char log_path[1100];
    snprintf(log_path, sizeof(log_path), "%s/log.jsonl", cfg.log.run_dir);
    if (comm->rank == 0 && resuming && resume_trim_log(log_path, start_step) != 0) return 1;
    FILE* logf = fopen(comm->rank == 0 ? log_path : "/dev/null", resuming ? "a" : "w");
    if (!logf) { fprintf(stderr, "error: cannot open %s: %s\n", log_path, strerror(errno)); return 1; }
    comm_barrier(comm);   // the others start once rank 0 has accepted the start
    if (resuming) {
        fprintf(logf, "{\"type\":\"resume\",\"step\":%d,\"path\":\"", start_step);
        json_escape(logf, (const unsigned char*)resume_path, (int)strlen(resume_path));
        fprintf(logf, "\"}\n");
    }
    // what this launch runs on: which numerics produced the records that follow (an fp32 and a
    // bf16 run of one config differ by more than summation order)
    fprintf(logf, "{\"type\":\"run\",\"step\":%d,\"backend\":\"", start_step);
    json_escape(logf, (const unsigned char*)ops_backend_name(), (int)strlen(ops_backend_name()));
    fprintf(logf, "\",\"act\":\"%s\",\"processes\":%d,\"batch_size\":%d,\"seq_len\":%d,\"grad_accum\":%d,"
            "\"tokens_per_step\":%ld,\"params\":%zu,\"flops_per_token\":%.6g,\"peak_flops\":%.6g,\"peak_source\":\"",
            OPS_ACT_NAME, P, B, T, grad_accum, tokens_per_step, model.table.total, flops_tok, peak);
    json_escape(logf, (const unsigned char*)ops_peak_source(), (int)strlen(ops_peak_source()));
    fprintf(logf, "\"}\n");
    fflush(logf);

    const int r0 = comm->rank == 0;   // validation, probes and samples: rank 0 alone
    if (r0 && have_val && !resuming) {   // the untrained model's validation loss, as the curve's first point
        float vl = evaluate(&model, &val_dl, cfg.log.val_batches, in, tg);
        printf("step %5d/%d | val loss %.4f\n", 0, tc->steps, vl);
        fprintf(logf, "{\"type\":\"eval\",\"step\":0,\"val_loss\":");
        json_number(logf, vl);
        fprintf(logf, "}\n");
    }
    if (r0 && cfg.metrics.probe_every > 0 && !resuming) run_probe(&model, probe_in, probe_tg, 0, logf);
    int ckpt_failed = 0;
    const int end_step = stop_after > 0 && stop_after < tc->steps ? stop_after : tc->steps;
    for (int step = start_step; step < end_step; step++) {
        double t0 = now_s(), comm_s0 = comm->seconds;
        if (injected_failure(comm, step + 1)) return 1;
        gpt_zero_grad(&model);
        double loss = 0.0;
        model.moe_reduce = P > 1 ? moe_allreduce : NULL;   // training micro-steps only
        model.moe_reduce_ctx = comm;
        GradsReady gr = {&dist, model.grads};
        for (int micro = 0; micro < grad_accum; micro++) {
            if (dataloader_next(&train_dl, in, tg) != 0) return 1;
            loss += gpt_forward(&model, in, tg) / grad_accum;
            // the last micro-step finishes each layer's gradients: reduce them while the rest of
            // the backward runs (dist.overlap: NCCL, or GATEDGPT_DIST_OVERLAP=1)
            const int last = micro == grad_accum - 1 && P > 1 && dist.overlap;
            model.grads_ready = last ? grads_ready : NULL;
            model.grads_ready_ctx = &gr;
            gpt_backward(&model, 1.0f / (grad_accum * P));   // the sum over ranks is the mean
            model.grads_ready = NULL;
        }
        model.moe_reduce = NULL;
        // the global batch: gradients summed over ranks, the loss averaged
        dist_reduce_grads(&dist, model.grads);
        comm_allreduce_sum_f64(comm, &loss, 1);
        loss /= P;
        MoeStepSummary moe;   // routing over the step's micro-steps (n_moe = 0: a dense model)
        moe_step_summary(&model, &moe);
        float lr = lr_schedule(tc, step);
        float norm = dist_grad_norm(&dist, model.grads);
        int skipped = !isfinite(loss) || !isfinite(norm);
        if (skipped) {
            fprintf(stderr, "warning: step %d: non-finite loss (%g) or grad norm (%g): update skipped\n", step + 1, loss, norm);
            fprintf(logf, "{\"type\":\"spike\",\"step\":%d,\"kind\":\"nonfinite\",\"value\":null,\"mean\":null,\"std\":null,\"z\":null,\"skipped\":true}\n", step + 1);
            if (++nonfinite_run >= cfg.metrics.max_nonfinite) {
                fprintf(stderr, "error: %d non-finite steps in a row: stopping (lower [train] lr or raise [metrics] max_nonfinite)\n", nonfinite_run);
                return 1;
            }
        } else {
            nonfinite_run = 0;
            // spikes: z-scores against the trailing windows; spikes stay out of the windows
            int loss_spike = check_spike(&loss_win, "loss", loss, cfg.metrics.spike_z, cfg.metrics.skip_loss_z, step + 1, logf, &skipped);
            int grad_spike = check_spike(&grad_win, "grad_norm", norm, cfg.metrics.spike_z, cfg.metrics.skip_grad_z, step + 1, logf, &skipped);
            if (!loss_spike) spike_push(&loss_win, loss);
            if (!grad_spike) spike_push(&grad_win, norm);
            if (!skipped) {
                optim_step(&opt, &model, tc, lr, norm);   // this rank's range of the parameters
                dist_gather_params(&dist, model.params);  // ZeRO-1: everyone's updated shards
            }
        }
        double dt = now_s() - t0, comm_ms = (comm->seconds - comm_s0) * 1e3;
        double tok_s = tokens_per_step / dt;
        double mfu = tok_s * flops_tok / peak;
        if ((step + 1) % cfg.log.log_every == 0 || step == start_step || step + 1 == end_step) {
            char moe_txt[80] = "";
            if (moe.n_moe) snprintf(moe_txt, sizeof moe_txt, " | aux %.3f z %.2f load %.2f", moe.aux, moe.z, moe.max_load);
            printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s | MFU %5.1f%%%s%s\n",
                   step + 1, tc->steps, loss, lr, norm, dt * 1e3, tok_s, 100.0 * mfu, moe_txt, skipped ? " | skipped" : "");
            fflush(stdout);
        }
        fprintf(logf, "{\"type\":\"step\",\"step\":%d,\"loss\":", step + 1);
        json_number(logf, loss);
        fprintf(logf, ",\"lr\":%.6e,\"grad_norm\":", lr);
        json_number(logf, norm);
        fprintf(logf, ",\"ms\":%.3f,\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"skipped\":%s",
                dt * 1e3, tok_s, mfu, skipped ? "true" : "false");
        if (moe.n_moe) {
            fprintf(logf, ",\"moe_aux\":"); json_number(logf, moe.aux);
            fprintf(logf, ",\"moe_z\":"); json_number(logf, moe.z);
            fprintf(logf, ",\"moe_max_load\":"); json_number(logf, moe.max_load);
            fprintf(logf, ",\"moe_dropped\":%ld", moe.dropped);
        }
        if (P > 1) fprintf(logf, ",\"comm_ms\":%.3f", comm_ms);
        fprintf(logf, "}\n");
        if (r0 && have_val && ((step + 1) % cfg.log.val_every == 0 || step + 1 == tc->steps)) {
            float vl = evaluate(&model, &val_dl, cfg.log.val_batches, in, tg);
            printf("step %5d/%d | val loss %.4f\n", step + 1, tc->steps, vl);
            fprintf(logf, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":", step + 1);
            json_number(logf, vl);
            fprintf(logf, "}\n");
        }
        if (r0 && cfg.metrics.probe_every > 0 && ((step + 1) % cfg.metrics.probe_every == 0 || step + 1 == tc->steps))
            run_probe(&model, probe_in, probe_tg, step + 1, logf);
        if (r0 && cfg.log.sample_every > 0 && ((step + 1) % cfg.log.sample_every == 0 || step + 1 == tc->steps))
            print_sample(&model, &cfg, &dec, step + 1, logf);
        fflush(logf);
        // checkpoint every checkpoint_every steps and after the last one (of the run, or of this job)
        if (cfg.ckpt.checkpoint_every > 0 && ((step + 1) % cfg.ckpt.checkpoint_every == 0 || step + 1 == end_step)) {
            cs.step = step + 1;
            dataloader_get_state(&train_dl, &cs.data);
            cs.data_seed = train_dl.seed;
            cs.data_shuffle = train_dl.shuffle;
            cs.nonfinite_run = nonfinite_run;
            cs.lr = lr;
            if (write_checkpoint(comm, &cfg, ckpt_dir, &model, &opt, &cs, logf) != 0) {
                ckpt_failed++;
                if (cfg.ckpt.on_write_error == CKPT_ON_ERROR_EXIT) return 1;
            }
        }
    }
    fclose(logf);
    if (dec.have_tok) tokenizer_free(&dec.tok);
    if (end_step < tc->steps)
        printf("stopped after step %d of %d (--stop-after)%s\n", end_step, tc->steps, cfg.ckpt.checkpoint_every > 0 ?
               "; continue with --resume auto" : "; no checkpoint was written ([checkpoint] checkpoint_every = 0)");
    printf("done: log in %s%s\n", log_path, ckpt_failed ? " (some checkpoint writes failed: see the warnings)" : "");
    free(in); free(tg); free(probe_in); free(probe_tg);
    spike_free(&loss_win); spike_free(&grad_win);
    optim_free(&opt);
    dist_free(&dist);
    gpt_free(&model);
    dataloader_free(&train_dl);
    if (have_val) dataloader_free(&val_dl);
    return 0;
}
