// tools/gatedgpt_ckpt.c: what can be done with a checkpoint besides resuming from it.
//
//   gatedgpt_ckpt inspect CKPT                    verify, then print step, trainer state, config, tensor norms
//   gatedgpt_ckpt sample  CKPT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]
//   gatedgpt_ckpt eval    CKPT [--glob PATTERN] [--batches N]
//   gatedgpt_ckpt export  CKPT --out DIR          model.safetensors + config.json (a transformers class)
//   gatedgpt_ckpt lengths CKPT --out FILE         loss by context length under each RoPE scaling
//   gatedgpt_ckpt stream  CKPT --out FILE         streaming loss with a rolling KV window (StreamingLLM)
//   gatedgpt_ckpt logits  CKPT --ids I,.. --out F  logits for given tokens (+ a greedy continuation)
//   gatedgpt_ckpt mc      CKPT --task FILE        multiple-choice accuracy (acc, acc_norm) as lm-eval defines it
//   gatedgpt_ckpt import  HF_DIR --out DIR        a transformers directory -> a checkpoint to resume from
//   gatedgpt_ckpt import  FILE.bin --out DIR      llm.c's GPT-2 model file (gpt2_124M.bin) -> the same
//
// CKPT is a checkpoint directory (.../step_NNNNNNNN) or a directory of checkpoints, in which
// case the newest one that verifies is used. Every command verifies the checksums first.
// The defaults of sample and eval are the checkpoint config's [log] and [data] values, so
// `sample` reproduces the trainer's sample at that step and `eval` its validation loss.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataloader.h"
#include "data/mixture.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "model/sample.h"
#include "tools/export_hf.h"
#include "tools/export_tokenizer.h"
#include "tools/import_hf.h"
#include "tools/import_llmc.h"
#include "tools/long_context.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/jsonl.h"
#include "train/mc_eval.h"
#include "train/progress.h"
#include "train/resume.h"

static void usage(FILE* f) {
    fprintf(f,
        "usage: gatedgpt_ckpt COMMAND CKPT [options]\n"
        "  CKPT: a checkpoint directory (.../step_NNNNNNNN), or a directory of checkpoints (the newest\n"
        "        one that verifies is used)\n"
        "commands:\n"
        "  inspect CKPT            verify every file; print the step, the trainer state, the config,\n"
        "                          and per tensor its shape, L2 norm, max |w| and AdamW moment norms\n"
        "  sample CKPT             generate text; options (defaults from the checkpoint's [log]):\n"
        "      --prompt TEXT       text to continue (default [log] sample_prompt; empty = end-of-text)\n"
        "      --tokens N          tokens to generate ([log] sample_tokens)\n"
        "      --temperature T     ([log] sample_temperature; 0 = greedy)   --top-k K   ([log] sample_top_k)\n"
        "      --greedy            greedy decoding: the most likely token each step (= --temperature 0)\n"
        "      --seed S            ([train] seed + step: the trainer's sample at this step)\n"
        "      --tokenizer FILE    ([data] tokenizer)\n"
        "  eval CKPT               mean loss over batches of [train] batch_size x seq_len\n"
        "      --glob PATTERN      token shards ([data] val_glob), read in order from the start\n"
        "      --batches N         ([log] val_batches; 0 = every batch of the shards)\n"
        "      --progress S        a progress line on stderr (batch, running mean, elapsed, ETA) at most\n"
        "                          every S seconds (10; 0 = after every batch; -1 = none)\n"
        "  export CKPT --out DIR   DIR/model.safetensors + DIR/config.json as the transformers class that\n"
        "                          computes exactly this model (GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM,\n"
        "                          Qwen3NextForCausalLM, Qwen3MoeForCausalLM); others are refused (docs/formats.md)\n"
        "      --format raw        gatedgpt's own layout and names instead (any model; model_type gatedgpt)\n"
        "      --tokenizer FILE    ([data] tokenizer) written as tokenizer.json + tokenizer_config.json +\n"
        "                          special_tokens_map.json (AutoTokenizer); its end-of-text id into config.json\n"
        "  lengths CKPT --out FILE loss at context lengths T, 2T, 4T, 8T (T = training length) under each RoPE\n"
        "                          scaling (factor L/T), per position bucket of T; JSONL records appended to FILE\n"
        "      --lengths L1,L2,... (T,2T,4T,8T)   --scalings none,linear,ntk,yarn (all; none for learned positions)\n"
        "      --tokens N          tokens scored per length (16384; at least one window)   --glob PATTERN ([data] val_glob)\n"
        "  stream CKPT --out FILE  per-token loss over N tokens of validation text fed one at a time through a\n"
        "                          rolling KV window of W slots keeping the first S tokens (StreamingLLM), plus the\n"
        "                          dense reference; JSONL records appended to FILE (docs/metrics.md)\n"
        "      --window W (2T)     --sinks S1,S2 (0,4)     --positions cache,original (both)   --tokens N (20000)\n"
        "      --dense 0|1         also every earlier token visible, when it fits in memory (1)\n"
        "      --buckets K         loss buckets over the stream (10)      --glob PATTERN ([data] val_glob)\n"
        "  logits CKPT --ids I1,I2,... --out FILE   the logits after each prefix of the ids (one sequence, the\n"
        "                          full forward) as float32 [n, vocab_size] to FILE; --generate N: also print a\n"
        "                          greedy continuation of N tokens (ids), for comparisons with other frameworks\n"
        "  mc CKPT --task FILE     multiple-choice accuracy of a JSONL task (generic {context, choices, gold} or\n"
        "                          HellaSwag's lines) as lm-evaluation-harness defines it: n, acc, acc_norm, acc_bytes\n"
        "                          and their stderrs (docs/metrics.md); forwards of [train] batch_size x seq_len tokens\n"
        "      --limit N           the first N examples (0 = all)   --fields ctx=A,choices=B,gold=C  other field names\n"
        "      --json              also the \"task\" record (as train_gpt's log.jsonl) on stdout\n"
        "      --lls FILE          per example: line, gold and each choice's log-likelihood, JSONL\n"
        "      --tokenizer FILE    ([data] tokenizer)   --progress S   (10; -1 = none)\n"
        "  import HF_DIR --out DIR a Hugging Face directory of a class export writes (config.json + model.safetensors,\n"
        "                          or the shards of model.safetensors.index.json; F32, BF16, F16)\n"
        "                          -> the checkpoint DIR/step_00000000 (fresh AdamW state) that train_gpt --resume\n"
        "                          continues from; --config FILE: the [train], [data], ... sections (defaults otherwise)\n"
        "  import FILE.bin --out DIR  llm.c's GPT-2 model file (magic 20240326; version 3 fp32 or 5 bf16, e.g.\n"
        "                          gpt2_124M.bin) -> the same checkpoint ([model] bias = true), same options\n"
        "common: --threads N (default: [train] threads)\n");
}

// The loaded checkpoint: its config, the model with its weights, and (inspect) the rest.
typedef struct {
    char path[CKPT_PATH_MAX];
    CkptInfo info;
    Config cfg;
    GPT model;
} Loaded;

static int load(const char* spec, int threads, Loaded* L) {
    // a directory of checkpoints: the newest good one (as --resume auto picks it)
    char done[CKPT_PATH_MAX + 8];
    snprintf(done, sizeof done, "%s/DONE", spec);
    FILE* probe = fopen(done, "r");
    if (probe) {
        fclose(probe);
        snprintf(L->path, sizeof L->path, "%s", spec);
    } else {
        int r = resume_find("auto", spec, L->path, sizeof L->path);
        if (r < 0) return -1;
        if (r == 0) {
            fprintf(stderr, "error: '%s' is not a checkpoint (no DONE) and holds no complete checkpoint (step_NNNNNNNN/ with DONE)\n", spec);
            return -1;
        }
    }
    if (checkpoint_verify(L->path, &L->info, NULL) != 0) return -1;
    if (checkpoint_load_config(L->path, &L->cfg) != 0) return -1;
    ops_init(threads >= 0 ? threads : L->cfg.train.threads);
    gpt_build(&L->model, &L->cfg.model, L->cfg.train.seed);
    if (checkpoint_load(L->path, &L->model, NULL, NULL, 0, 1) != 0) return -1;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// inspect

static double norm2(const float* x, size_t n, float* maxabs) {
    double s = 0.0;
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        s += (double)x[i] * x[i];
        if (fabsf(x[i]) > m) m = fabsf(x[i]);
    }
    if (maxabs) *maxabs = m;
    return sqrt(s);
}

static int cmd_inspect(Loaded* L) {
    printf("checkpoint %s: verified (%d files, %llu bytes, crc32 ok)\n", L->path, L->info.n_files,
           (unsigned long long)L->info.bytes);
    checkpoint_verify(L->path, NULL, stdout);
    // the trainer state, and the AdamW moments of the whole arena (ZeRO-1 shards joined by offset)
    Optim o;
    optim_init(&o, &L->model);
    SpikeWindow lw, gw;
    spike_init(&lw, L->cfg.metrics.spike_window);
    spike_init(&gw, L->cfg.metrics.spike_window);
    CkptTrainState st = {0};
    st.loss_win = &lw;
    st.grad_win = &gw;
    if (checkpoint_load(L->path, &L->model, &o, &st, 0, L->info.nproc) != 0) return 1;
    printf("step %d of [train] steps %d | processes %d | AdamW t %d | lr of the last step %.6e\n", st.step,
           L->cfg.train.steps, L->info.nproc, o.t, (double)st.lr);
    printf("written by %d process%s, zero_stage %d (AdamW state in %s)\n", st.ckpt_nproc, st.ckpt_nproc == 1 ? "" : "es",
           st.ckpt_zero_stage, st.ckpt_zero_stage ? "one shard per rank file" : (st.ckpt_nproc == 1 ? "one full copy" : "a full copy per rank file"));
    // the process counts it resumes on with its batch_size: those that divide the global batch
    const long tps = L->cfg.train.tokens_per_step, bt = (long)L->cfg.train.batch_size * L->cfg.train.seq_len;
    printf("resumes on (batch_size %d): ", L->cfg.train.batch_size);
    int listed = 0;
    for (long p = 1; bt > 0 && p <= tps / bt && listed < 16; p++)
        if (tps % (bt * p) == 0) printf("%s%ld", listed++ ? ", " : "", p);
    printf("%s processes (those that divide [train] tokens_per_step = %ld into micro-batches of %ld tokens)\n",
           listed == 16 ? ", ..." : "", tps, bt);
    if (!st.mix) printf("data: epoch %lld, shard %lld, batch %lld (next) | shuffle %s, seed %llu\n", (long long)st.data.epoch,
           (long long)st.data.shard_idx, (long long)st.data.batch_idx, st.data_shuffle ? "on" : "off",
           (unsigned long long)st.data_seed);
    if (st.mix && mixture_describe(st.mix, st.mix_len, stdout) != 0)
        printf("data.bin: %zu bytes that are not a mixture position (damaged?)\n", st.mix_len);
    free(st.mix);
    double lm, ls, gm, gs;
    spike_z(&lw, 0.0, &lm, &ls);
    spike_z(&gw, 0.0, &gm, &gs);
    printf("spike windows: loss %d/%d values (mean %.6g), grad norm %d/%d values (mean %.6g) | non-finite run %d\n",
           lw.n, lw.window, lm, gw.n, gw.window, gm, st.nonfinite_run);
    printf("\nconfig (%s/config.ini):\n", L->path);
    config_write(&L->cfg, stdout);

    const ParamTable* t = &L->model.table;
    float* p = malloc(t->total * sizeof(float));
    float* m = malloc(t->total * sizeof(float));
    float* v = malloc(t->total * sizeof(float));
    if (!p || !m || !v) { fprintf(stderr, "error: out of memory\n"); return 1; }
    ops_to_host(p, L->model.params, t->total * sizeof(float));
    ops_to_host(m, o.m, t->total * sizeof(float));
    ops_to_host(v, o.v, t->total * sizeof(float));
    printf("\ntensors: %d (arena of %zu floats: each tensor starts 64-byte aligned)\n", t->n, t->total);
    printf("%-24s %-14s %14s %14s %14s %14s\n", "name", "shape", "norm", "max|w|", "norm(adam m)", "norm(adam v)");
    size_t params = 0;
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* q = &t->p[i];
        char shape[64] = "[";
        for (int d = 0; d < q->ndim && d < (int)(sizeof q->shape / sizeof q->shape[0]); d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", d ? ", " : "", q->shape[d]);
        strcat(shape, "]");
        float mx;
        double n = norm2(p + q->offset, q->numel, &mx);
        printf("%-24s %-14s %14.6e %14.6e %14.6e %14.6e\n", q->name, shape, n, (double)mx,
               norm2(m + q->offset, q->numel, NULL), norm2(v + q->offset, q->numel, NULL));
        params += q->numel;
    }
    printf("total: %zu parameters\n", params);
    free(p); free(m); free(v);
    spike_free(&lw); spike_free(&gw);
    optim_free(&o);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// sample

static int cmd_sample(Loaded* L, const char* prompt_text, int n_tokens, float temperature, int top_k,
                      long long seed, const char* tok_path) {
    const ModelConfig* mc = &L->cfg.model;
    Tokenizer tok;
    int have_tok = 0;
    if (tok_path && tok_path[0]) {
        if (tokenizer_load(&tok, tok_path) != 0) return 1;
        have_tok = 1;
    }
    if (!have_tok && mc->vocab_size > 256) {
        fprintf(stderr, "error: sample: no tokenizer ([data] tokenizer is empty): pass --tokenizer FILE (the vocabulary has %d tokens)\n",
                mc->vocab_size);
        return 1;
    }
    int* prompt = NULL;
    size_t np = 0;
    if (prompt_text[0] && have_tok) {
        if (tokenizer_encode(&tok, prompt_text, strlen(prompt_text), &prompt, &np) != 0) return 1;
    } else if (prompt_text[0]) {
        np = strlen(prompt_text);
        prompt = malloc(np * sizeof(int));
        for (size_t i = 0; i < np; i++) prompt[i] = (unsigned char)prompt_text[i];
    }
    if (np == 0) {   // as the trainer does: start from end-of-text (or a newline for bytes)
        free(prompt);
        prompt = malloc(sizeof(int));
        int eot = have_tok ? tokenizer_eot(&tok) : -1;
        prompt[0] = eot >= 0 ? eot : '\n';
        np = 1;
    }
    // the trainer samples with its activations sized for [train] seq_len: the same context window
    gpt_alloc_acts(&L->model, 1, L->cfg.train.seq_len);
    int* out = malloc((size_t)n_tokens * sizeof(int));
    unsigned long long s = seed >= 0 ? (unsigned long long)seed : L->cfg.train.seed + (unsigned long long)L->info.step;
    sample_generate(&L->model, prompt, (int)np, n_tokens, temperature, top_k, s, out);
    printf("---- sample from %s (step %d, temperature %.2f, top-k %d, seed %llu) ----\n%s", L->path, L->info.step,
           (double)temperature, top_k, s, prompt_text);
    for (int i = 0; i < n_tokens; i++) {
        int len;
        const unsigned char* b = NULL;
        unsigned char byte;
        if (have_tok) b = tokenizer_token_bytes(&tok, out[i], &len);
        else if (mc->vocab_size <= 256) { byte = (unsigned char)out[i]; b = &byte; len = 1; }
        if (b) fwrite(b, 1, (size_t)len, stdout);
        else printf("<%d>", out[i]);
    }
    printf("\n----\n");
    free(out);
    free(prompt);
    if (have_tok) tokenizer_free(&tok);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// eval

// progress_s: a line on stderr (batch, running mean, elapsed, ETA) at most every progress_s
// seconds of a long evaluation (0: after every batch; < 0: never); stdout keeps the one result line
static int cmd_eval(Loaded* L, const char* glob, int batches, double progress_s) {
    const int B = L->cfg.train.batch_size, T = L->cfg.train.seq_len;
    if (!glob[0]) {
        fprintf(stderr, "error: eval: no shards: the checkpoint's [data] val_glob is empty; pass --glob PATTERN\n");
        return 1;
    }
    DataLoader dl;
    if (dataloader_init(&dl, glob, B, T, 0, 1, L->cfg.model.vocab_size) != 0) return 1;
    int n = batches > 0 ? batches : (int)dl.batches_per_epoch;
    gpt_alloc_acts(&L->model, B, T);
    int* in = malloc((size_t)B * T * sizeof(int));
    int* tg = malloc((size_t)B * T * sizeof(int));
    // as the trainer's validation: batches from the start of the shards, in order, mean of means
    double sum = 0.0;
    Progress prog;
    progress_init(&prog, progress_now());
    double last_line = prog.t0;
    for (int i = 0; i < n; i++) {
        const double t0 = progress_now();
        if (dataloader_next(&dl, in, tg) != 0) return 1;
        sum += gpt_forward(&L->model, in, tg);
        const double t1 = progress_now();
        progress_item(&prog, t1 - t0);
        if (progress_s >= 0.0 && i + 1 < n && t1 - last_line >= progress_s) {
            char el[32], left[32];
            fprintf(stderr, "eval: batch %d/%d | running mean %.4f | %s elapsed, ETA %s\n", i + 1, n, sum / (i + 1),
                    progress_fmt(progress_elapsed(&prog, t1), el, sizeof el), progress_fmt(progress_eta(&prog, i + 1, n), left, sizeof left));
            last_line = t1;
        }
    }
    float loss = (float)(sum / n);
    // %.9g: every float's exact value (the trainer's log.jsonl has the same float with 17 digits)
    printf("eval: %s step %d: loss %.9g over %d batches of %dx%d tokens (%lld tokens) from %s%s\n", L->path,
           L->info.step, (double)loss, n, B, T, (long long)n * B * T, glob,
           n > dl.batches_per_epoch ? " (wrapped around)" : "");
    free(in);
    free(tg);
    dataloader_free(&dl);
    return 0;
}

// ----------------------------------------------------------------------------------------------

// ----------------------------------------------------------------------------------------------
// logits: the model's logits for given token ids (one sequence, the full forward), and
// optionally a greedy continuation, for comparisons with other frameworks (make interop)

static int cmd_logits(Loaded* L, const char* ids_text, const char* out_path, int generate) {
    const ModelConfig* mc = &L->cfg.model;
    int ids[65536], n = 0;
    const char* q = ids_text;
    while (*q && n < 65536) {
        char* end;
        long v = strtol(q, &end, 10);
        if (end == q || v < 0 || v >= mc->vocab_size) {
            fprintf(stderr, "error: logits: --ids: '%.20s' is not a token id below vocab_size %d\n", q, mc->vocab_size);
            return 1;
        }
        ids[n++] = (int)v;
        q = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') { fprintf(stderr, "error: logits: --ids: expected comma-separated ids\n"); return 1; }
    }
    if (n < 1 || n > mc->max_seq_len) {
        fprintf(stderr, "error: logits: --ids: %d ids (accepted: 1 .. [model] max_seq_len = %d)\n", n, mc->max_seq_len);
        return 1;
    }
    const int V = mc->vocab_size;
    gpt_alloc_acts(&L->model, 1, n);
    gpt_forward(&L->model, ids, NULL);
    float* lg = malloc((size_t)n * V * sizeof(float));
    if (!lg) { fprintf(stderr, "error: out of memory\n"); return 1; }
    for (int i = 0; i < n; i++) gpt_logits_to_host(&L->model, lg + (size_t)i * V, i, V);
    // the file: float32 little-endian [n, vocab_size], row i = the logits after ids[0..i]
    char tmp[CKPT_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE* f = fopen(tmp, "wb");
    int ok = f && fwrite(lg, sizeof(float), (size_t)n * V, f) == (size_t)n * V;
    if (f && fclose(f) != 0) ok = 0;
    free(lg);
    if (!ok || rename(tmp, out_path) != 0) {
        fprintf(stderr, "error: logits: writing '%s' failed\n", out_path);
        remove(tmp);
        return 1;
    }
    printf("logits: %d x %d float32 -> %s\n", n, V, out_path);
    if (generate > 0) {
        int* gen = malloc((size_t)generate * sizeof(int));
        gpt_alloc_acts(&L->model, 1, n + generate <= mc->max_seq_len ? n + generate : mc->max_seq_len);
        sample_generate(&L->model, ids, n, generate, 0.0f, 0, 0, gen);
        printf("greedy:");
        for (int i = 0; i < generate; i++) printf(" %d", gen[i]);
        printf("\n");
        free(gen);
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------
// mc: multiple-choice accuracy of a task file (train/mc_eval.h), as train_gpt's [eval] tasks
// compute it (the same forwards: [train] batch_size x seq_len tokens each)

static int cmd_mc(Loaded* L, Comm* comm, const char* task_path, int limit, const char* fields_spec, const char* tok_path,
                  int json, const char* lls_path, double progress_s) {
    McFields fields;
    mc_fields_default(&fields);
    if (fields_spec && mc_fields_parse(&fields, fields_spec, "mc: --fields") != 0) return 1;
    if (!tok_path || !tok_path[0]) {
        fprintf(stderr, "error: mc: no tokenizer (the checkpoint's [data] tokenizer is empty): pass --tokenizer FILE\n");
        return 1;
    }
    Tokenizer tok;
    if (tokenizer_load(&tok, tok_path) != 0) return 1;
    if (tokenizer_vocab_size(&tok) > L->cfg.model.vocab_size) {
        fprintf(stderr, "error: mc: the tokenizer %s has %d tokens but [model] vocab_size is %d: pass the model's tokenizer with --tokenizer FILE\n",
                tok_path, tokenizer_vocab_size(&tok), L->cfg.model.vocab_size);
        tokenizer_free(&tok);
        return 1;
    }
    McTask task;
    McPrepared prep;
    if (mc_task_load(&task, task_path, &fields, limit) != 0) { tokenizer_free(&tok); return 1; }
    if (mc_prepare(&prep, &task, &tok, L->cfg.model.max_seq_len, L->cfg.model.vocab_size) != 0) {
        mc_prepared_free(&prep); mc_task_free(&task); tokenizer_free(&tok);
        return 1;
    }
    McResult r;
    mc_score(&L->model, &prep, (long)L->cfg.train.batch_size * L->cfg.train.seq_len, comm, progress_s, &r);
    int rc = 0;
    if (lls_path && comm->rank == 0) {   // per example: its line, gold and each choice's log-likelihood (tmp + rename)
        char tmp[CKPT_PATH_MAX + 8];
        snprintf(tmp, sizeof tmp, "%s.tmp", lls_path);
        FILE* f = fopen(tmp, "w");
        for (int e = 0; f && e < task.n; e++) {
            const McExample* x = &task.ex[e];
            fprintf(f, "{\"line\":%d,\"gold\":%d,\"context\":\"", x->line, x->gold);
            jsonl_escape(f, (const unsigned char*)x->context, (int)strlen(x->context));
            fprintf(f, "\",\"choices\":[");
            for (int c = 0; c < x->n_choices; c++) {
                fprintf(f, "%s\"", c ? "," : "");
                jsonl_escape(f, (const unsigned char*)x->choices[c], (int)strlen(x->choices[c]));
                fprintf(f, "\"");
            }
            fprintf(f, "],\"lls\":[");
            for (int c = 0; c < task.ex[e].n_choices; c++) fprintf(f, "%s%.17g", c ? "," : "", prep.ll[prep.row0[e] + c]);
            fprintf(f, "],\"cont_tokens\":[");
            for (int c = 0; c < task.ex[e].n_choices; c++) fprintf(f, "%s%d", c ? "," : "", prep.cont[prep.row0[e] + c]);
            fprintf(f, "]}\n");
        }
        if (!f || fclose(f) != 0 || rename(tmp, lls_path) != 0) {
            fprintf(stderr, "error: mc: writing --lls %s failed\n", lls_path);
            remove(tmp);
            rc = 1;
        }
    }
    printf("mc: %s step %d: task %s: n %d | acc %.4f +- %.4f | acc_norm %.4f +- %.4f | acc_bytes %.4f +- %.4f | chance %.4f "
           "(%s%d examples%s) | %d batches of %d x %d tokens, %d rows cut from the left | %.1f s\n",
           L->path, L->info.step, task.name, r.n, r.acc, r.acc_stderr, r.acc_norm, r.acc_norm_stderr, r.acc_bytes,
           r.acc_bytes_stderr, r.chance, task.n_hellaswag ? "HellaSwag form: " : "", task.n_hellaswag ? task.n_hellaswag : r.n,
           limit > 0 ? ", --limit" : "", r.batches, r.rows, r.T, r.truncated, r.seconds);
    if (json) mc_write_record(&r, &task, L->info.step, stdout);
    mc_prepared_free(&prep);
    mc_task_free(&task);
    tokenizer_free(&tok);
    return rc;
}

// The model as its transformers class (or gatedgpt's own names with raw), and the tokenizer
static int cmd_export(Loaded* L, const char* out_dir, int raw, const char* tok_path) {
    const ParamTable* t = &L->model.table;
    Tokenizer tok;
    int have_tok = 0;
    if (tok_path && tok_path[0]) {
        if (tokenizer_load(&tok, tok_path) != 0) return 1;
        have_tok = 1;
    }
    float* p = malloc(t->total * sizeof(float));
    if (!p) { fprintf(stderr, "error: out of memory\n"); return 1; }
    ops_to_host(p, L->model.params, t->total * sizeof(float));
    if (have_tok && tok.vocab_size != L->cfg.model.vocab_size) {
        fprintf(stderr, "error: export: the tokenizer %s has %d tokens but [model] vocab_size is %d: pass the "
                "model's tokenizer with --tokenizer FILE\n", tok_path, tok.vocab_size, L->cfg.model.vocab_size);
        free(p);
        tokenizer_free(&tok);
        return 1;
    }
    int rc = export_hf(out_dir, &L->cfg, t, p, L->info.step, raw, have_tok ? tokenizer_eot(&tok) : -1, stdout);
    free(p);
    // the tokenizer as tokenizer.json (AutoTokenizer), when it can encode (ours; not llm.c's)
    if (rc == 0 && have_tok && !raw)
        rc = export_tokenizer_hf(out_dir, &tok, L->cfg.model.max_seq_len, stdout);
    else if (rc == 0 && !raw)
        printf("export: note: no tokenizer ([data] tokenizer is empty): AutoTokenizer needs tokenizer.json; pass --tokenizer FILE\n");
    if (have_tok) tokenizer_free(&tok);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) { usage(stdout); return 0; }
    // mc under mpirun: the batches split over the processes (train/mc_eval.h), rank 0 prints
    Comm comm;
    memset(&comm, 0, sizeof comm);
    comm.size = comm.rep_size = 1;
    if (argc >= 2 && strcmp(argv[1], "mc") == 0) {
        comm_init(&comm, &argc, &argv);
        if (comm.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    }
    if (argc < 3) { usage(stderr); return 1; }
    const char* cmd = argv[1];
    const char* ckpt = argv[2];
    if (strcmp(cmd, "import") == 0) {   // HF_DIR --out CKPT_DIR [--config FILE] [--threads N]
        const char *out = NULL, *base = NULL;
        int threads = 0;
        for (int i = 3; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--out") == 0) out = argv[i + 1];
            else if (strcmp(argv[i], "--config") == 0) base = argv[i + 1];
            else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
            else { fprintf(stderr, "error: unknown option '%s' for import (see --help)\n", argv[i]); return 1; }
        }
        if (!out || (argc - 3) % 2) { fprintf(stderr, "error: import needs --out DIR (and options with values)\n"); return 1; }
        Config c;
        config_defaults(&c);
        if (base && config_load_file(&c, base) != 0) return 1;
        ops_init(threads);
        if (import_llmc_is_model(ckpt)) return import_llmc(ckpt, &c, out, stdout) == 0 ? 0 : 1;
        return import_hf(ckpt, &c, out, stdout) == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "inspect") && strcmp(cmd, "sample") && strcmp(cmd, "eval") && strcmp(cmd, "export") &&
        strcmp(cmd, "lengths") && strcmp(cmd, "stream") && strcmp(cmd, "logits") && strcmp(cmd, "mc")) {
        fprintf(stderr, "error: unknown command '%s' (accepted: inspect, sample, eval, export, lengths, stream, logits, mc; see --help)\n", cmd);
        return 1;
    }
    // options: every one takes a value, except --greedy
    const char *prompt = NULL, *glob = NULL, *out = NULL, *tok = NULL, *format = NULL, *ids = NULL;
    const char *task = NULL, *fields = NULL, *lls = NULL;   // mc
    int generate = 0, limit = 0, json = 0;
    long long seed = -1, tokens = -1;
    int top_k = -1, batches = -1, threads = -1;
    double progress_s = 10.0;
    float temperature = -1.0f;
    LcLengths lo;
    LcStream so;
    memset(&lo, 0, sizeof lo);
    memset(&so, 0, sizeof so);
    so.dense = 1;
    so.buckets = 10;
    for (int i = 3; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "--greedy") == 0) { temperature = 0.0f; continue; }
        if (strcmp(a, "--json") == 0) { json = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value (see --help)\n", a); return 1; }
        const char* v = argv[++i];
        char* end = NULL;
        if (strcmp(a, "--prompt") == 0) prompt = v;
        else if (strcmp(a, "--glob") == 0) glob = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--tokenizer") == 0) tok = v;
        else if (strcmp(a, "--ids") == 0) ids = v;
        else if (strcmp(a, "--task") == 0) task = v;
        else if (strcmp(a, "--fields") == 0) fields = v;
        else if (strcmp(a, "--lls") == 0) lls = v;
        else if (strcmp(a, "--limit") == 0) limit = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--generate") == 0) generate = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--format") == 0) {
            if (strcmp(v, "hf") && strcmp(v, "raw")) { fprintf(stderr, "error: --format %s: unknown (accepted: hf, raw)\n", v); return 1; }
            format = v;
        }
        else if (strcmp(a, "--seed") == 0) seed = strtoll(v, &end, 10);
        else if (strcmp(a, "--tokens") == 0) tokens = strtoll(v, &end, 10);
        else if (strcmp(a, "--window") == 0) so.window = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--dense") == 0) so.dense = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--buckets") == 0) so.buckets = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--lengths") == 0) { if ((lo.n_lengths = lc_parse_list(a, v, 0, lo.lengths, LC_MAX_LIST)) < 0) return 1; }
        else if (strcmp(a, "--scalings") == 0) { if ((lo.n_scalings = lc_parse_list(a, v, 1, lo.scalings, LC_MAX_LIST)) < 0) return 1; }
        else if (strcmp(a, "--sinks") == 0) { if ((so.n_sinks = lc_parse_list(a, v, 0, so.sinks, LC_MAX_LIST)) < 0) return 1; }
        else if (strcmp(a, "--positions") == 0) { if ((so.n_positions = lc_parse_list(a, v, 2, so.positions, LC_MAX_LIST)) < 0) return 1; }
        else if (strcmp(a, "--top-k") == 0) top_k = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--batches") == 0) batches = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--progress") == 0) progress_s = strtod(v, &end);
        else if (strcmp(a, "--threads") == 0) threads = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--temperature") == 0) temperature = strtof(v, &end);
        else { fprintf(stderr, "error: unknown option '%s' for %s (see --help)\n", a, cmd); return 1; }
        if (end && (end == v || *end)) { fprintf(stderr, "error: %s %s: not a number\n", a, v); return 1; }
    }
    if (strcmp(cmd, "sample") == 0 && ((tokens != -1 && (tokens < 1 || tokens > 1 << 24)) ||
                                       (temperature != -1.0f && !(temperature >= 0.0f)) || top_k < -1)) {
        fprintf(stderr, "error: sample: --tokens must be 1 .. 16777216, --temperature >= 0 (0 = greedy), --top-k >= 0\n");
        return 1;
    }
    if ((strcmp(cmd, "lengths") == 0 || strcmp(cmd, "stream") == 0) && tokens != -1 && (tokens < 1 || tokens > 1 << 28)) {
        fprintf(stderr, "error: %s: --tokens must be 1 .. %d\n", cmd, 1 << 28);
        return 1;
    }
    if (strcmp(cmd, "mc") == 0 && (!task || limit < 0)) {
        fprintf(stderr, "error: mc needs --task FILE (a JSONL task: docs/formats.md \"Task files\"); --limit N >= 0\n");
        return 1;
    }
    if (strcmp(cmd, "export") == 0 && !out) { fprintf(stderr, "error: export needs --out DIR\n"); return 1; }
    if (strcmp(cmd, "logits") == 0 && (!out || !ids || generate < 0 || generate > 4096)) {
        fprintf(stderr, "error: logits needs --ids I1,I2,... and --out FILE (--generate N: 0 .. 4096)\n");
        return 1;
    }
    if ((strcmp(cmd, "lengths") == 0 || strcmp(cmd, "stream") == 0) && !out) {
        fprintf(stderr, "error: %s needs --out FILE (the JSONL records are appended to it)\n", cmd);
        return 1;
    }

    Loaded L;
    memset(&L, 0, sizeof L);
    if (load(ckpt, threads, &L) != 0) return 1;
    int rc;
    if (strcmp(cmd, "inspect") == 0) rc = cmd_inspect(&L);
    else if (strcmp(cmd, "sample") == 0)
        rc = cmd_sample(&L, prompt ? prompt : L.cfg.log.sample_prompt, tokens > 0 ? (int)tokens : L.cfg.log.sample_tokens,
                        temperature >= 0.0f ? temperature : L.cfg.log.sample_temperature,
                        top_k >= 0 ? top_k : L.cfg.log.sample_top_k, seed, tok ? tok : L.cfg.data.tokenizer);
    else if (strcmp(cmd, "eval") == 0)
        rc = cmd_eval(&L, glob ? glob : L.cfg.data.val_glob, batches >= 0 ? batches : L.cfg.log.val_batches, progress_s);
    else if (strcmp(cmd, "logits") == 0) rc = cmd_logits(&L, ids, out, generate);
    else if (strcmp(cmd, "mc") == 0)
        rc = cmd_mc(&L, &comm, task, limit, fields, tok ? tok : L.cfg.data.tokenizer, json, lls, progress_s);
    else if (strcmp(cmd, "lengths") == 0 || strcmp(cmd, "stream") == 0) {
        FILE* f = fopen(out, "a");
        if (!f) { fprintf(stderr, "error: %s: cannot open --out %s for appending\n", cmd, out); gpt_free(&L.model); return 1; }
        const char* g = glob ? glob : L.cfg.data.val_glob;
        if (!g[0]) {
            fprintf(stderr, "error: %s: no shards: the checkpoint's [data] val_glob is empty; pass --glob PATTERN\n", cmd);
            rc = 1;
        } else if (strcmp(cmd, "lengths") == 0) {
            lo.glob = g; lo.tokens = tokens > 0 ? tokens : 16384; lo.ckpt = L.path; lo.step = L.info.step;
            rc = lc_lengths(&L.model, &L.cfg, &lo, f);
        } else {
            so.glob = g; so.tokens = tokens > 0 ? tokens : 20000; so.ckpt = L.path; so.step = L.info.step;
            rc = lc_stream(&L.model, &L.cfg, &so, f);
        }
        if (fclose(f) != 0) { fprintf(stderr, "error: %s: writing %s failed\n", cmd, out); rc = 1; }
    }
    else rc = cmd_export(&L, out, format && strcmp(format, "raw") == 0, tok ? tok : L.cfg.data.tokenizer);
    gpt_free(&L.model);
    if (strcmp(cmd, "mc") == 0 && comm.mpi) {
        if (rc != 0 && comm.size > 1) comm_abort(&comm, rc, "mc failed (its error is above)");
        comm_finalize(&comm);
    }
    return rc;
}
