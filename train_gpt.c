// train_gpt.c: gatedgpt's entry point. Parse the config, build the model, run the loop.
//
//   ./build/train_gpt --config configs/tiny_gated.ini [--section.key=value ...] [--check]
//   ./build/train_gpt --config configs/tiny_gated.ini --resume auto      (or --resume PATH)
//
// One step: grad_accum micro-batches of B x T tokens (forward, backward into the gradient
// arena), then global-norm clip + AdamW at the scheduled learning rate.
#include <errno.h>
#include <signal.h>
#include <unistd.h>
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
#include "train/args.h"
#include "train/progress.h"
#include "train/jsonl.h"
#include "train/probe_record.h"
#include "train/signals.h"
#include "train/spike.h"
#include "train/checkpoint.h"
#include "train/ckpt_async.h"
#include "train/resume.h"
#include "train/tb.h"
#include "train/comm.h"
#include "train/dist.h"
#include "train/plan.h"
#include "train/watchdog.h"
#include "train/straggler.h"
#include "train/mc_eval.h"
#include "data/dataloader.h"
#include "data/mixture.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "kernels/scratch.h"


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
        watchdog_progress();   // a long evaluation is progress, batch by batch
    }
    return (float)(sum / nbatches);
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
    Jsonl j;
    jsonl_begin(&j, logf, "sample", step);
    jsonl_str(&j, "prompt", lc->sample_prompt);
    jsonl_strn(&j, "text", text, (int)n);
    jsonl_end(&j);
    free(text);
    free(prompt);
    free(out);
}

// The stability probe (docs/metrics.md): one JSON record and a console line. sig: the step's
// per-group gradient norms and update ratios (train/signals.h), measured by train_step.
static void run_probe(GPT* m, const int* in, const int* tg, int step, const Signals* sig, FILE* logf) {
    double t0 = progress_now();
    ProbeResult r;
    probe_run(m, in, tg, step, &r);
    r.ms = (float)((progress_now() - t0) * 1e3);
    probe_write_json(&r, sig, logf);
    char moe[96] = "";
    if (r.has_moe) {   // the largest max/mean expert load over the MoE layers
        float ml = 0.0f;
        for (int l = 0; l < r.n_layer; l++) if (r.layer[l].moe_max_load > ml) ml = r.layer[l].moe_max_load;
        snprintf(moe, sizeof moe, " | MoE max/mean load %.2f", ml);
    }
    if (r.has_linear) {   // hybrid: the Gated DeltaNet layers' mean state norm
        size_t n = strlen(moe);
        snprintf(moe + n, sizeof moe - n, " | GDN state %.2f", r.gdn_state_norm_mean);
    }
    // the instability signals' headline (docs/metrics.md), and what their per-group sums cost the step
    char sig_txt[96] = "";
    if (sig && sig->step == step && step > 0) snprintf(sig_txt, sizeof sig_txt, " (+ %.0f ms in the step)", sig->ms);
    printf("step %5d | probe: F-Attn %.3f (uniform %.3f) | M-Act %.1f | gate %s%.3f%s | attn logit max %.2f | out z %.1f | %.0f ms%s\n",
           step, r.f_attn_mean, r.f_attn_uniform, r.m_act_mean, r.has_gate ? "" : "- ", r.has_gate ? r.gate_mean : 0.0f, moe,
           r.attn_logit_max, r.out_z, r.ms, sig_txt);
    probe_free(&r);
}

// A spike of the step (or its non-finite loss / grad norm), its record written after the update
// (write_spike) so that it can carry the step's update ratios.
typedef struct { const char* kind; double x, mean, sd, z; int finite, skipped; } SpikeHit;

// Returns 1 when x is a spike (z > spike_z) and fills *hit; sets *skip when z exceeds a
// non-zero skip threshold.
static int check_spike(SpikeWindow* w, const char* kind, double x, float spike_z_thr, float skip_z,
                       int step, SpikeHit* hit, int* skip) {
    double mean, sd, z = spike_z(w, x, &mean, &sd);
    if (!(z > spike_z_thr)) return 0;
    int skipped = skip_z > 0.0f && z > skip_z;
    if (skipped) *skip = 1;
    *hit = (SpikeHit){kind, x, mean, sd, z, 1, skipped};
    printf("step %5d | %s spike: %.4g vs mean %.4g (z = %.1f)%s\n", step, kind, x, mean, z, skipped ? " | update skipped" : "");
    return 1;
}

// The spike record: what the detector saw, then the instability signals of the spiking step
// (docs/metrics.md): the probe batch's attention and output logits under the weights the step
// started from (pr; NULL on the processes outside rank 0's group, which log nothing), and the
// step's per-group gradient norms and update ratios (sig), per layer: where a spike starts.
static void write_spike(const SpikeHit* h, int step, const ProbeResult* pr, const Signals* sig, FILE* logf) {
    Jsonl j;
    jsonl_begin(&j, logf, "spike", step);
    jsonl_str(&j, "kind", h->kind);
    if (h->finite) {
        jsonl_fmt(&j, "value", "%.6g", h->x);
        jsonl_fmt(&j, "mean", "%.6g", h->mean);
        jsonl_fmt(&j, "std", "%.6g", h->sd);
        jsonl_fmt(&j, "z", "%.3f", h->z);
    } else {
        jsonl_null(&j, "value");
        jsonl_null(&j, "mean");
        jsonl_null(&j, "std");
        jsonl_null(&j, "z");
    }
    jsonl_bool(&j, "skipped", h->skipped);
    if (pr) {
        jsonl_fmt(&j, "probe_loss", "%.6g", pr->loss);
        probe_write_signals(&j, pr, sig, step);
        jsonl_arr(&j, "layers");
        for (int l = 0; l < pr->n_layer; l++) {
            jsonl_obj(&j, NULL);
            jsonl_int(&j, "layer", l);
            probe_write_signals_layer(&j, pr, sig, step, l);
            jsonl_close(&j);
        }
        jsonl_close(&j);
    }
    jsonl_end(&j);
}

// checkpoint_save_ranks's agreement: any rank failed -> every rank sees 1
static int ckpt_agree(void* ctx, int failed) {
    double f = failed ? 1.0 : 0.0;
    const char* phase = watchdog_current_phase();
    if (phase) watchdog_phase(-1, "checkpoint barrier");   // -1: the step stays as published
    comm_allreduce_max_f64((Comm*)ctx, &f, 1);
    if (phase) watchdog_phase(-1, phase);
    return f != 0.0;
}

// The outcome of the checkpoint write of `step` (rc 0: committed): prunes older ones (rank 0),
// prints the console line and logs the "checkpoint" record; a failure gets the error line of
// [checkpoint] on_write_error. a: the asynchronous write's figures (NULL for a synchronous write),
// done_step: the step after which it was committed. Returns rc.
static int checkpoint_outcome(Comm* comm, const Config* cfg, const char* dir, int step, int rc, double ms,
                              const CkptAsync* a, int done_step, FILE* logf) {
    char path[CKPT_PATH_MAX];
    checkpoint_path(path, sizeof path, dir, step);
    Jsonl j;
    if (rc != 0) {
        jsonl_begin(&j, logf, "checkpoint", step);
        jsonl_bool(&j, "ok", 0);
        jsonl_bool(&j, "async", a != NULL);
        jsonl_end(&j);
        fflush(logf);
        if (cfg->ckpt.on_write_error == CKPT_ON_ERROR_EXIT)
            fprintf(stderr, "error: step %d: checkpoint write failed (above); stopping ([checkpoint] on_write_error = exit); "
                    "the older checkpoints are untouched\n", step);
        else
            fprintf(stderr, "warning: step %d: checkpoint write failed (above); training continues ([checkpoint] "
                    "on_write_error = continue); the older checkpoints are untouched\n", step);
        return -1;
    }
    int pruned = comm->rank == 0 ? checkpoint_prune(dir, cfg->ckpt.keep_last, cfg->ckpt.keep_every, step) : 0;
    char how[160] = "";
    if (a) snprintf(how, sizeof how, " (async: snapshot %.0f ms, written by step %d in %.0f ms, writer CPU %.0f ms)",
                    a->snapshot_ms, done_step, a->write_ms, a->write_cpu_ms);
    printf("step %5d/%d | checkpoint %s | %.0f ms%s%s\n", step, cfg->train.steps, path, ms, how, pruned ? " | older ones pruned" : "");
    fflush(stdout);
    jsonl_begin(&j, logf, "checkpoint", step);
    jsonl_bool(&j, "ok", 1);
    jsonl_str(&j, "path", path);
    jsonl_fmt(&j, "ms", "%.1f", ms);
    jsonl_bool(&j, "async", a != NULL);
    if (a) {
        jsonl_fmt(&j, "snapshot_ms", "%.1f", a->snapshot_ms);
        jsonl_fmt(&j, "write_ms", "%.1f", a->write_ms);
        jsonl_fmt(&j, "write_cpu_ms", "%.1f", a->write_cpu_ms);
        jsonl_int(&j, "done_step", done_step);
    }
    jsonl_end(&j);
    fflush(logf);
    return 0;
}

// Writes the checkpoint of cs->step at once, then its outcome (checkpoint_outcome). On a failure
// the checkpoint is removed again and older ones are untouched (train/checkpoint.h).
static int write_checkpoint(Comm* comm, const Config* cfg, const char* dir, const GPT* m, const Optim* o,
                            const CkptTrainState* cs, FILE* logf) {
    double t0 = progress_now();
    // every rank writes its own state, rank 0 the shared files and DONE (train/checkpoint.h)
    int rc = checkpoint_save_ranks(dir, cs->step, cfg, m, o, cs, comm->rank, comm->size, ckpt_agree, comm);
    return checkpoint_outcome(comm, cfg, dir, cs->step, rc, (progress_now() - t0) * 1e3, NULL, cs->step, logf);
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

// Test-only hooks (docs/distributed.md "Hangs: the watchdog"; never set them in a real run):
// GATEDGPT_TEST_STOP_RANK=R GATEDGPT_TEST_STOP_STEP=S: rank R stops itself (SIGSTOP, as a
// scheduler would) at the start of step S; GATEDGPT_TEST_SLOW_RANK=R GATEDGPT_TEST_SLOW_MS=M:
// rank R sleeps M ms in each micro-step's forward (a straggler).
static void test_stop(const Comm* comm, int step) {
    const char* r = getenv("GATEDGPT_TEST_STOP_RANK");
    const char* s = getenv("GATEDGPT_TEST_STOP_STEP");
    if (r && s && atoi(r) == comm->rank && atoi(s) == step) raise(SIGSTOP);
}
static void test_slow(const Comm* comm) {
    static int ms = -1;
    if (ms < 0) {
        const char* r = getenv("GATEDGPT_TEST_SLOW_RANK");
        const char* m = getenv("GATEDGPT_TEST_SLOW_MS");
        ms = r && m && atoi(r) == comm->rank && atoi(m) > 0 ? atoi(m) : 0;
    }
    if (ms == 0) return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// MoE: the load-balancing loss's expert counts over every process (GPT.moe_reduce)
static void moe_allreduce(void* ctx, double* x, int n) { comm_allreduce_sum_f64((Comm*)ctx, x, (size_t)n); }

// Expert parallelism: the MoE layers' token exchange within this rank's group (GPT.moe_ep),
// set for the whole run: the model holds only this member's experts, so every forward
// (training, evaluation, probes, samples) runs with its group
// The rows are in the backend's memory: host memory on the CPU backend (MPI takes it as it is);
// device memory on the CUDA backend: NCCL send/recv within the group (train/dist.h), or, where
// there is no NCCL group communicator, staged through host buffers and MPI.
typedef struct { Comm* comm; Dist* dist; int device; void *hs, *hr; size_t ns, nr; } MoeEpCtx;
static MoeEpCtx g_moe_ep;
static void moe_ep_counts(void* ctx, const int* send, int* recv, int n) {
    comm_ep_alltoall_int(((MoeEpCtx*)ctx)->comm, send, recv, n);
}
static void moe_ep_rows(void* ctx, const void* send, const int* send_rows, void* recv, const int* recv_rows, size_t rb) {
    MoeEpCtx* e = (MoeEpCtx*)ctx;
    if (!e->device) { comm_ep_alltoallv(e->comm, send, send_rows, recv, recv_rows, rb); return; }
    if (dist_ep_alltoallv(e->dist, send, send_rows, recv, recv_rows, rb) == 0) return;   // NCCL send/recv
    size_t s = 0, r = 0;
    for (int p = 0; p < e->comm->ep_size; p++) { s += (size_t)send_rows[p]; r += (size_t)recv_rows[p]; }
    s *= rb; r *= rb;
    if (s > e->ns) { free(e->hs); e->hs = malloc(s); e->ns = s; }
    if (r > e->nr) { free(e->hr); e->hr = malloc(r); e->nr = r; }
    if ((s && !e->hs) || (r && !e->hr)) comm_abort(e->comm, 1, "out of host memory (expert parallelism staging)");
    ops_to_host(e->hs, send, s);
    comm_ep_alltoallv(e->comm, e->hs, send_rows, e->hr, recv_rows, rb);
    ops_from_host(recv, e->hr, r);
}
static void moe_ep_hooks(GPT* m, Comm* c, Dist* d, int on) {
    on = on && c->ep_size > 1;
    g_moe_ep.comm = c;
    g_moe_ep.dist = d;
    g_moe_ep.device = strncmp(ops_backend_name(), "cuda", 4) == 0;
    m->moe_ep.size = on ? c->ep_size : 1;
    m->moe_ep.rank = on ? c->ep_rank : 0;
    m->moe_ep.counts = on ? moe_ep_counts : NULL;
    m->moe_ep.rows = on ? moe_ep_rows : NULL;
    m->moe_ep.ctx = &g_moe_ep;
}

// Checkpoints of a sharded fp32 master (ZeRO-1, bf16 layouts): the whole arena on rank 0, the
// shards in rank order. Checkpoints of an expert shard (train/checkpoint.h checkpoint_set_gather): the whole model's
// arena (the ep_size-1 layout of model.bin) on rank 0, every expert at its global index, from
// the members of rank 0's group; NULL elsewhere. Every rank calls it.
static float* ckpt_gather(void* ctx, const GPT* m) {
    Comm* c = (Comm*)ctx;
    const ParamTable* t = &m->table;
    if (gpt_master_sharded(m)) {
        // ZeRO-1's sharded fp32 master: every rank's shard to rank 0's host copy of the arena
        float* shard = malloc((m->master_hi > m->master_lo ? m->master_hi - m->master_lo : 1) * sizeof(float));
        float* whole = c->rank == 0 ? malloc((t->total ? t->total : 1) * sizeof(float)) : NULL;
        if (!shard || (c->rank == 0 && !whole)) comm_abort(c, 1, "out of host memory (gathering the master for a checkpoint)");
        gpt_master_to_host(m, shard, m->master_lo, m->master_hi);
        comm_gather_f32(c, shard, m->master_hi - m->master_lo, whole);
        free(shard);
        return whole;
    }
    if (c->rank >= c->ep_size) return NULL;   // another group: rank 0's holds every expert
    const size_t X = t->total - t->dense_total;   // this member's expert region
    float* mine = malloc((t->total ? t->total : 1) * sizeof(float));
    const size_t nall = (size_t)c->ep_size * X;
    float* all = c->rank == 0 ? malloc((nall > 0 ? nall : 1) * sizeof(float)) : NULL;
    if (!mine || (c->rank == 0 && !all)) comm_abort(c, 1, "out of host memory (gathering the experts for a checkpoint)");
    ops_to_host(mine, m->params, t->total * sizeof(float));
    comm_ep_gather_f32(c, mine + t->dense_total, X, all);   // member s's experts at all + s * X
    if (c->rank != 0) { free(mine); return NULL; }
    ParamTable g;
    param_table_build(&g, &m->cfg);
    float* whole = calloc(g.total ? g.total : 1, sizeof(float));
    if (!whole) comm_abort(c, 1, "out of host memory (gathering the experts for a checkpoint)");
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        const ParamInfo* q = &g.p[i];   // the same tensor in the whole model
        if (!p->expert_n) { memcpy(whole + q->offset, mine + p->offset, p->numel * sizeof(float)); continue; }
        // member s holds experts s*El .. s*El + El - 1: its copy of this tensor at
        // all + s * X + (offset - dense_total), El experts of param_expert_numel floats
        for (int s = 0; s < c->ep_size; s++)
            memcpy(whole + q->offset + (size_t)s * p->numel, all + (size_t)s * X + (p->offset - t->dense_total),
                   p->numel * sizeof(float));
    }
    param_table_free(&g);
    free(mine); free(all);
    return whole;
}

// GPT.grads_ready on the last micro-step: a finished layer's gradients go to the reduction now
typedef struct { Dist* dist; float* grads; } GradsReady;
static void grads_ready(void* ctx, size_t lo, size_t hi) {
    GradsReady* g = (GradsReady*)ctx;
    const char* phase = watchdog_current_phase();
    watchdog_phase(-1, "reduction of a layer's gradients (overlapped with the backward)");
    dist_reduce_range(g->dist, g->grads, lo, hi);
    watchdog_phase(-1, phase);
}

// [train] precision on the CPU (docs/architecture.md "Precision"): act_t is a compile-time type,
// so each precision is a binary: train_gpt computes in fp32, train_gpt_bf16 in bf16 (the CMake
// target names the other one in GATEDGPT_PRECISION_SIBLING). A config that asks for the other
// precision runs that binary, found beside this one, with the same command line: before MPI
// starts (under mpirun every rank does the same) and before anything is written. Returns 0 to go
// on here, or an exit status after an error line.
#ifdef GATEDGPT_PRECISION_SIBLING
static int exec_precision_sibling(int argc, char** argv) {
    static TrainArgs a;
    static Config c;
    if (train_args_parse(&a, argc, argv) != 0) return 1;
    if (a.help) return 0;
    if (train_args_config(&a, &c) != 0) return 1;   // its error line, once: train_main would repeat it
    const PrecisionKind own = OPS_ACT_IS_FLOAT ? PRECISION_FP32 : PRECISION_BF16;
    const char* want = config_enum_name("precision", c.train.precision);
    const char* where = a.config_path ? a.config_path : "--train.precision";
    if (c.train.precision == own) return 0;
    if (getenv("GATEDGPT_PRECISION_EXEC")) {   // the sibling sent us here: a loop, never expected
        fprintf(stderr, "error: %s: [train] precision = %s: %s was started by its sibling for the other precision "
                "(GATEDGPT_PRECISION_EXEC is set): unset it\n", where, want, argv[0]);
        return 1;
    }
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
    if (n <= 0) { fprintf(stderr, "error: %s: [train] precision = %s: cannot find this binary's folder (/proc/self/exe)\n", where, want); return 1; }
    path[n] = 0;
    char* slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, 64, "%s", GATEDGPT_PRECISION_SIBLING);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "error: %s: [train] precision = %s needs %s (not found: %s): build it "
                "(cmake --build build --target %s; it needs oneDNN), or set precision = %s\n", where, want,
                GATEDGPT_PRECISION_SIBLING, path, GATEDGPT_PRECISION_SIBLING, config_enum_name("precision", own));
        return 1;
    }
    printf("precision = %s: running %s\n", want, path);
    fflush(stdout);
    setenv("GATEDGPT_PRECISION_EXEC", "1", 1);
    execv(path, argv);
    fprintf(stderr, "error: %s: [train] precision = %s: cannot run %s: %s\n", where, want, path, strerror(errno));
    return 1;
}
#endif

int main(int argc, char** argv) {
#ifdef GATEDGPT_PRECISION_SIBLING
    int prc = exec_precision_sibling(argc, argv);
    if (prc != 0) return prc;
#endif
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

// ----------------------------------------------------------------------------------------------
// One run: what train_main's phases below share.
typedef struct {
    Comm* comm;
    TrainArgs args;
    Config cfg;
    const char* where;                // the config file for error lines ("config" without one)
    int B, T, P, grad_accum;          // micro-batch, processes, micro-steps per step
    long tokens_per_step;             // global: B x T x P x grad_accum
    DataLoader train_dl, val_dl;
    int have_val;
    // [data] sources: the training mixture (train_dl unused); [data] val_sources: a validation
    // loader per source (val_dl unused), val_loss their weighted mean
    Mixture mix;
    int have_mix;
    int n_valsrc;
    ConfigSource valsrc[CONFIG_MAX_SOURCES];
    DataLoader val_srcs[CONFIG_MAX_SOURCES];
    Decoder dec;
    GPT model;
    Dist dist;
    Optim opt;
    double peak, flops_tok;           // the summed peak FLOP/s (MFU), training FLOPs per token
    // bytes ops_malloc holds, by what allocated them (counted around each allocation: the
    // figures the memory plan of --check predicts, docs/config.md "Memory plan")
    size_t mem_params, mem_adamw, mem_acts, mem_scratch;
    int *in, *tg;                     // a batch
    int *probe_in, *probe_tg;         // the probe batch, fixed for the whole run
    SpikeWindow loss_win, grad_win;
    Signals sig;                      // per-group gradient norms and update ratios (probe, spike steps)
    int nonfinite_run;                // consecutive non-finite steps
    CkptTrainState cs;                // what a checkpoint holds besides weights and AdamW state
    CkptAsync ckpt_async;             // [checkpoint] async: the writer thread and its snapshot
    double ckpt_async_t0;             // when the write in flight began (progress_now)
    char ckpt_dir[CKPT_PATH_MAX], resume_path[CKPT_PATH_MAX];
    int resuming, start_step, end_step, ckpt_failed;
    char log_path[1100];
    FILE* logf;                       // the run log (rank 0; /dev/null on the others)
    TbWriter tb;                      // [log] tensorboard: the run log's records as TensorBoard events (rank 0)
    Progress prog;                    // elapsed time and ETA of the step line (train/progress.h)
    StragglerTrack strag;             // each rank's run of slow straggler reports (train/straggler.h)
    double compute_s;                 // this rank's compute time since the last straggler report
    // [eval] tasks: the multiple-choice task files, tokenised once (train/mc_eval.h)
    int n_tasks;
    McTask* tasks;
    McPrepared* task_prep;
} Run;

// The periodic work between steps, timed for the ETA (Run.prog's tasks)
enum { PROG_EVAL, PROG_PROBE, PROG_SAMPLE, PROG_CKPT, PROG_TASKS };

// What one step measured, for its console line and its "step" record.
typedef struct {
    double loss, dt, comm_ms;
    double ep_ms, ep_bytes;           // expert parallelism: this rank's all-to-all time and payload sent
    float lr, norm;
    int skipped;
    MoeStepSummary moe;               // routing over the step's micro-steps (n_moe = 0: a dense model)
    double compute_s;                 // forward + backward wall time less the collectives' inside them
    int has_report;                   // a straggler report at this step (P > 1, every log_every steps)
    StragglerReport rep;
} StepStats;

// --check: parameter counts from the table alone (no arena): total, and active = what one token
// passes through (top_k of the n_expert stacked experts of each MoE layer)
static void print_param_counts(const Config* cfg) {
    ParamTable pt;
    param_table_build(&pt, &cfg->model);
    size_t total = 0, active = 0;
    for (int i = 0; i < pt.n; i++) {
        total += pt.p[i].numel;
        active += pt.p[i].ndim == 3 ? pt.p[i].numel / cfg->model.moe.n_expert * cfg->model.moe.top_k : pt.p[i].numel;
    }
    param_table_free(&pt);
    printf("\nparams: total=%zu active=%zu (%.3fB total, %.3fB active per token)\n", total, active, total / 1e9, active / 1e9);
}

// --check: the memory plan (train/plan.h) for --nproc processes (the real count by default)
// on --device (this machine's RAM, or this GPU, by default) in --layout (this binary's, or the
// CUDA bf16 build's for a named GPU).
static int check_memory_plan(Run* r) {
    const TrainArgs* a = &r->args;
    Config* cfg = &r->cfg;
    PlanOptions o;
    memset(&o, 0, sizeof o);
    o.nproc = a->nproc > 0 ? a->nproc : r->comm->size;
    if (config_finalize_processes(cfg, r->where, o.nproc) != 0) return 1;
    // this binary's layout: the CUDA backend allocates in 256-byte units, the CPU in 64
    const PlanLayout own = ops_alloc_align() == SCRATCH_CUDA_ALLOC_ALIGN
                               ? (OPS_ACT_IS_FLOAT ? PLAN_LAYOUT_CUDA_FP32 : PLAN_LAYOUT_CUDA_BF16)
                               : (OPS_ACT_IS_FLOAT ? PLAN_LAYOUT_CPU : PLAN_LAYOUT_CPU_BF16);
    int gpu = 0;
    o.smem_optin = CUDA_SMEM_OPTIN_SM90;
    if (a->device && plan_parse_device(a->device, &o.device_bytes, o.device_name, sizeof o.device_name, &gpu, &o.smem_optin) != 0)
        return 1;   // train_args_parse checked it
    o.layout = a->layout >= 0 ? (PlanLayout)a->layout : gpu ? PLAN_LAYOUT_CUDA_BF16 : own;
    o.this_backend = o.layout == own;
    if (o.this_backend) ops_init(cfg->train.threads);   // the backend's own scratch rule (CUDA: CUB, this GPU)
    o.threads = o.this_backend ? ops_num_threads() : (cfg->train.threads > 0 ? cfg->train.threads : 1);
    if (!a->device) {
        if (plan_layout_is_cpu(o.layout)) {
            o.device_bytes = plan_mem_available();
            snprintf(o.device_name, sizeof o.device_name, "this machine's RAM (MemAvailable, /proc/meminfo)");
        } else if (o.this_backend) {
            // what this GPU can still allocate, plus what the backend holds already (cuBLASLt's workspace)
            o.device_bytes = ops_mem_available() + ops_allocated_bytes();
            snprintf(o.device_name, sizeof o.device_name, "this GPU (free memory now + what the backend holds)");
        } else {
            fprintf(stderr, "error: --layout %s: name the GPU to plan against: --device h100, h200, a100-80g or a byte count\n",
                    plan_layout_name(o.layout));
            return 1;
        }
    }
    o.device_shared = plan_layout_is_cpu(o.layout);
    // the runtime line measures this process: with MPI's memory when the planned run has several
    // processes (each starts MPI) and this one was started without a launcher (no MPI yet)
    if (plan_layout_is_cpu(o.layout) && o.nproc > 1) comm_start_mpi(r->comm, NULL, NULL);
    o.runtime_rss = plan_self_rss();
    Plan p;
    if (plan_build(cfg, cfg->train.batch_size, &o, &p) != 0) return 1;
    plan_print(cfg, &p, &o, stdout);
    return 0;
}

// What the config needs beyond config_finalize to train here: data, the batch over P processes,
// a checkpoint to continue from (--resume) that accepts this config, and the kernels' backend.
static int setup_run(Run* r) {
    const TrainConfig* tc = &r->cfg.train;
    if (!r->cfg.data.train_glob[0] && !r->cfg.data.sources[0]) {
        fprintf(stderr, "error: %s: [data] train_glob is empty: set it to your token shards (e.g. data/kjv/train_*.bin, which scripts/prepare_kjv.sh prepares), or set [data] sources\n",
                r->where);
        return 1;
    }
    // which checkpoint to continue from, and whether this config may continue it (on any process
    // count: a derived tokens_per_step becomes the checkpoint's global batch, which must divide)
    checkpoint_dir_of(r->ckpt_dir, sizeof r->ckpt_dir, &r->cfg);
    r->resuming = resume_resolve(r->comm, r->args.resume_spec, r->ckpt_dir, &r->cfg, r->resume_path, sizeof r->resume_path);
    if (r->resuming < 0) return 1;
    if (config_finalize_processes(&r->cfg, r->where, r->comm->size) != 0) return 1;
    size_t held0 = ops_allocated_bytes();
    ops_init(tc->threads);
    r->mem_scratch = ops_allocated_bytes() - held0;   // CUDA: cuBLASLt's workspace
    // precision = bf16 on a binary that computes in fp32 and has no bf16 sibling (the CUDA fp32
    // build: its bf16 twin is train_gpt_cuda_bf16): never run fp32 in its place. The bf16 binaries
    // other than train_gpt_bf16 (the emulation, the CUDA bf16 build) are bf16 by what they are.
    if (tc->precision == PRECISION_BF16 && OPS_ACT_IS_FLOAT) {
        fprintf(stderr, "error: %s: [train] precision = bf16, but this binary computes in fp32 (%s): run train_gpt "
                "(which runs train_gpt_bf16) or train_gpt_cuda_bf16\n", r->where, ops_backend_name());
        return 1;
    }
    if (tc->attn_impl != ATTN_IMPL_FUSED && strncmp(ops_backend_name(), "cuda", 4) != 0) {
        fprintf(stderr, "error: %s: [train] attn_impl = %s needs the CUDA backend (train_gpt_cuda); this is %s: "
                "set attn_impl = fused\n", r->args.config_path ? r->args.config_path : "--train.attn_impl",
                tc->attn_impl == ATTN_IMPL_CUDNN ? "cudnn" : "flash", ops_backend_name());
        return 1;
    }
    r->B = tc->batch_size;
    r->T = tc->seq_len;
    r->P = r->comm->size;
    r->tokens_per_step = tc->tokens_per_step;
    r->grad_accum = (int)(r->tokens_per_step / ((long)r->B * r->T * r->P));
    return 0;
}

// The loaders (this rank's slice of the training data; validation on rank 0's terms), the
// tokenizer for samples, and the BOS token.
static int setup_data(Run* r) {
    const Config* cfg = &r->cfg;
    const int vocab = cfg->model.vocab_size;
    _Static_assert(CONFIG_MAX_SOURCES <= MIX_MAX_SOURCES, "a mixture holds every source the config accepts");
    char err[600];
    if (cfg->data.sources[0]) {   // a weighted mixture (data/mixture.h); config_finalize checked the list
        ConfigSource src[CONFIG_MAX_SOURCES];
        const int n = config_parse_sources(cfg->data.sources, src, CONFIG_MAX_SOURCES, err, sizeof err);
        if (n < 0) { fprintf(stderr, "error: %s: [data] sources: %s\n", r->where, err); return 1; }
        char names[MIX_MAX_SOURCES][MIX_NAME_LEN];
        double w[MIX_MAX_SOURCES];
        const char* globs[MIX_MAX_SOURCES];
        _Static_assert(sizeof src[0].name == MIX_NAME_LEN, "source names fit the mixture's");
        for (int i = 0; i < n; i++) { memcpy(names[i], src[i].name, MIX_NAME_LEN); w[i] = src[i].weight; globs[i] = src[i].glob; }
        if (mixture_init(&r->mix, n, (const char (*)[MIX_NAME_LEN])names, w, globs, r->B, r->T, r->comm->rank, r->P, vocab,
                         cfg->data.shuffle, cfg->train.seed) != 0) return 1;
        r->have_mix = 1;
        printf("data: a mixture of %d sources, schedule period W = %d sequences (exact over every W; within %.2f sequences of "
               "the weights over any window):", n, r->mix.sched.W, r->mix.sched.max_dev);
        for (int i = 0; i < n; i++) printf(" %s %d/%d", src[i].name, r->mix.sched.w[i], r->mix.sched.W);
        printf("\n");
    } else {
        if (dataloader_init(&r->train_dl, cfg->data.train_glob, r->B, r->T, r->comm->rank, r->P, vocab) != 0) return 1;
        // whole optimizer steps per shard: the tokens read do not depend on the process count
        if (dataloader_set_accum(&r->train_dl, r->grad_accum) != 0) return 1;
        if (cfg->data.shuffle) dataloader_shuffle(&r->train_dl, cfg->train.seed);
    }
    if (cfg->data.val_glob[0] && cfg->log.val_every > 0) {
        if (dataloader_init(&r->val_dl, cfg->data.val_glob, r->B, r->T, 0, 1, vocab) != 0) return 1;
        r->have_val = 1;
    }
    if (cfg->data.val_sources[0] && cfg->log.val_every > 0) {
        const int n = config_parse_sources(cfg->data.val_sources, r->valsrc, CONFIG_MAX_SOURCES, err, sizeof err);
        if (n < 0) { fprintf(stderr, "error: %s: [data] val_sources: %s\n", r->where, err); return 1; }
        for (int i = 0; i < n; i++) {
            if (dataloader_init(&r->val_srcs[i], r->valsrc[i].glob, r->B, r->T, 0, 1, vocab) != 0) {
                fprintf(stderr, "error: [data] val_sources: source '%s' (%s) cannot be read (above)\n", r->valsrc[i].name, r->valsrc[i].glob);
                return 1;
            }
            r->n_valsrc = i + 1;
        }
        r->have_val = 1;
    }
    Decoder* dec = &r->dec;
    dec->vocab_size = vocab;
    if (cfg->data.tokenizer[0]) {
        if (tokenizer_load(&dec->tok, cfg->data.tokenizer) != 0) return 1;
        dec->have_tok = 1;
        if (tokenizer_vocab_size(&dec->tok) > vocab) {
            fprintf(stderr, "error: %s: the tokenizer has %d tokens but [model] vocab_size is %d: set vocab_size >= %d\n",
                    cfg->data.tokenizer, tokenizer_vocab_size(&dec->tok), vocab, tokenizer_vocab_size(&dec->tok));
            return 1;
        }
    }
    if (cfg->data.bos) {   // every sample (train, val, probe) starts with the BOS token
        int bos = cfg->data.bos_token;
        if (bos < 0) {
            bos = tokenizer_eot(&dec->tok);
            if (bos < 0) {
                fprintf(stderr, "error: %s: [data] bos = true and bos_token = -1, but this tokenizer has no end-of-text token: set [data] bos_token\n",
                        cfg->data.tokenizer);
                return 1;
            }
        }
        if (r->have_mix) mixture_set_bos(&r->mix, bos);
        else dataloader_set_bos(&r->train_dl, bos);
        if (r->have_val && !r->n_valsrc) dataloader_set_bos(&r->val_dl, bos);
        for (int i = 0; i < r->n_valsrc; i++) dataloader_set_bos(&r->val_srcs[i], bos);
        printf("data: every sample starts with BOS token %d\n", bos);
    }
    return 0;
}

// The model, the gradient reduction and AdamW over this rank's range, and the banner lines.
static int setup_model(Run* r) {
    const ModelConfig* mc = &r->cfg.model;
    const TrainConfig* tc = &r->cfg.train;
    const int T = r->T, P = r->P;
    // expert parallelism: this rank's group and replica group first (it holds only its experts)
    if (comm_ep_init(r->comm, mc->moe.n_expert > 0 ? mc->moe.expert_parallel : 1) != 0) return 1;
    size_t held = ops_allocated_bytes();
    // the same seed on every rank: the same initial weights (each expert drawn by its global index);
    // ZeRO-1 in the bf16 layouts: only this rank's shard of the fp32 master (train/dist.h)
    size_t mlo, mhi;
    ParamTable mine;
    param_table_build_ep(&mine, mc, r->comm->ep_size, r->comm->ep_rank);
    dist_master_shard(r->comm, P > 1 ? tc->zero_stage : 0, mine.total, &mlo, &mhi);
    param_table_free(&mine);
    gpt_build_shard(&r->model, mc, tc->seed, r->comm->ep_size, r->comm->ep_rank, mlo, mhi);
    r->mem_params = ops_allocated_bytes() - held;
    r->model.attn_impl = (OpsAttnImpl)tc->attn_impl;
    r->model.recompute = tc->recompute;
    held = ops_allocated_bytes();
    gpt_alloc_acts(&r->model, r->B, T);
    r->mem_acts = ops_allocated_bytes() - held;
    if (r->cfg.data.doc_mask) {   // attention within documents, closed by the tokenizer's end-of-text
        const int eot = r->dec.have_tok ? tokenizer_eot(&r->dec.tok) : -1;
        if (eot < 0) {
            fprintf(stderr, "error: %s: [data] doc_mask = true, but this tokenizer has no end-of-text token to close documents: set doc_mask = false\n",
                    r->cfg.data.tokenizer);
            return 1;
        }
        gpt_set_doc_mask(&r->model, eot, r->cfg.data.doc_positions == DOCPOS_RESTART);
        printf("data: attention within documents (end-of-text token %d closes each), RoPE positions %s\n", eot,
               r->cfg.data.doc_positions == DOCPOS_RESTART ? "restart at each document" : "continue");
    }
    if (dist_init_ep(&r->dist, r->comm, P > 1 ? tc->zero_stage : 0, r->model.table.total, r->model.table.dense_total) != 0)
        return 1;
    dist_master_init(&r->dist, &r->model);   // bf16 layouts under ZeRO-1: the fp32 master sharded
    if (r->dist.master_sharded) dist_gather_weights(&r->dist, &r->model);   // the initial compute copy
    // the exchange hooks for every forward (training, evaluation, probes, samples): the model
    // holds only this member's experts (model/gpt.h)
    moe_ep_hooks(&r->model, r->comm, &r->dist, 1);
    checkpoint_set_gather(ckpt_gather, r->comm);
    held = ops_allocated_bytes();
    optim_init_ranges(&r->opt, &r->model, r->dist.lo, r->dist.hi, r->dist.xlo, r->dist.xhi);
    signals_init(&r->sig, &r->model.table, &r->model.cfg, &r->dist);
    r->mem_adamw = ops_allocated_bytes() - held;
    // the backend's scratch at this step's sizes, now (CUDA: no op of a step grows a slot)
    OpsStepShape ss;
    gpt_step_shape(mc, r->B, T, (OpsAttnImpl)tc->attn_impl, r->model.table.total, ops_num_threads(), &ss);
    held = ops_allocated_bytes();
    ops_scratch_reserve(&ss);
    r->mem_scratch += ops_allocated_bytes() - held;

    r->peak = ops_peak_flops();   // this process's share of the machine; summed over ranks
    comm_allreduce_sum_f64(r->comm, &r->peak, 1);
    r->flops_tok = gpt_flops_per_token(mc, T);
    char peak_sum[64] = "";   // the source below is this process's; the peak is the sum over all
    if (P > 1) snprintf(peak_sum, sizeof peak_sum, ", the sum over %d processes", P);
    printf("backend: %s | peak %.1f GFLOP/s%s (%s)\n", ops_backend_name(), r->peak / 1e9, peak_sum, ops_peak_source());
    size_t n_params = 0;   // the tensors' elements (the arena's total adds 64-byte alignment padding)
    ParamTable whole;      // the whole model's (an expert-parallel process holds a shard of it)
    param_table_build(&whole, mc);
    for (int i = 0; i < whole.n; i++) n_params += whole.p[i].numel;
    const size_t whole_total = whole.total;
    param_table_free(&whole);
    printf("model: %zu parameters (%.2fM), %d tensors | %.3f GFLOP/token (training)\n",
           n_params, n_params / 1e6, r->model.table.n, r->flops_tok / 1e9);
    if (mc->moe.n_expert > 0)
        printf("moe: %d experts, top-%d | %.2fM active matmul parameters per token (of %.2fM)\n", mc->moe.n_expert,
               mc->moe.top_k, gpt_matmul_params(mc) / 1e6, whole_total / 1e6);
    printf("batch: B=%d T=%d grad_accum=%d processes=%d -> %ld tokens/step | activations %.1f MiB | run dir %s\n",
           r->B, T, r->grad_accum, P, r->tokens_per_step, r->model.acts_bytes / (double)(1 << 20), r->cfg.log.run_dir);
    // the whole activation arena in bytes (gpt_acts_bytes: fp32/act_t/int tensors and the token
    // ids), with what the recompute mode saves
    printf("activations: %zu bytes (%.0f per token) | recompute %s\n", gpt_acts_bytes(mc, r->B, T, tc->recompute),
           (double)gpt_acts_bytes(mc, r->B, T, tc->recompute) / ((double)r->B * T),
           config_enum_name("recompute", tc->recompute));
    printf("memory: the backend holds params %zu + adamw %zu + activations %zu + scratch %zu = %zu bytes (%.1f MiB; "
           "train_gpt --check plans them)\n", r->mem_params, r->mem_adamw, r->mem_acts, r->mem_scratch,
           r->mem_params + r->mem_adamw + r->mem_acts + r->mem_scratch,
           (r->mem_params + r->mem_adamw + r->mem_acts + r->mem_scratch) / 1048576.0);
    if (P > 1)
        printf("distributed: %s | zero_stage %d: AdamW state for %zu of %zu parameters per process | %s\n",
               comm_name(r->comm), r->dist.zero_stage, optim_moment_count(&r->opt), r->model.table.total,
               r->dist.overlap ? "gradients reduced layer by layer during the backward pass" : "gradients reduced after the backward pass");
    if (r->dist.master_sharded) {
        size_t f32 = 0;   // the fp32-read tensors' floats, held whole besides the shard
        for (int k = 0; k < r->model.nf32; k++) f32 += r->model.f32[k][1] - r->model.f32[k][0];
        printf("distributed: fp32 master sharded: %zu of %zu floats updated here, the bf16 compute copy all-gathered "
               "(the fp32-read tensors, %d ranges, in fp32) | fp32 master held: shard %zu + fp32-read %zu = %zu bytes "
               "(whole: %zu)\n", r->dist.hi - r->dist.lo, r->model.table.total, r->dist.nf32,
               (r->model.master_hi - r->model.master_lo) * sizeof(float), f32 * sizeof(float),
               (r->model.master_hi - r->model.master_lo + f32) * sizeof(float), r->model.table.total * sizeof(float));
    }
    if (r->comm->ep_size > 1)
        printf("expert parallel: groups of %d processes, %d of the %d experts of each MoE layer computed per process "
               "(tokens exchanged by all-to-all: %s) | held per process: %zu floats (%zu dense + %zu experts), the experts' "
               "gradients averaged over %d replica%s\n", r->comm->ep_size, mc->moe.n_expert / r->comm->ep_size, mc->moe.n_expert,
               strncmp(ops_backend_name(), "cuda", 4) != 0 ? "MPI_Alltoallv"
               : r->dist.nccl_ep ? "NCCL send/recv" : "MPI_Alltoallv, the rows staged through the host",
               r->model.table.total, r->model.table.dense_total, r->model.table.total - r->model.table.dense_total,
               r->comm->rep_size, r->comm->rep_size == 1 ? "" : "s");
    fflush(stdout);
    return 0;
}

// The batch buffers, the probe batch and the spike windows, then the checkpoint's state when
// resuming. Returns 0, 1 on an error, or 2 when the checkpoint has nothing left to train.
static int setup_state(Run* r) {
    const size_t bt = (size_t)r->B * r->T;
    const TrainConfig* tc = &r->cfg.train;
    r->in = malloc(bt * sizeof(int));
    r->tg = malloc(bt * sizeof(int));
    // the probe batch: the first validation batch (else the first training batch), fixed for
    // the whole run so that probes at different steps measure the same tokens
    // (read whatever probe_every: a spike record measures it too)
    r->probe_in = malloc(bt * sizeof(int));
    r->probe_tg = malloc(bt * sizeof(int));
    if (r->have_mix && !r->have_val) {   // the mixture's first batch, and back to its start
        if (mixture_next(&r->mix, r->probe_in, r->probe_tg) != 0) return 1;
        mixture_reset(&r->mix);
    } else {
        DataLoader* src = r->n_valsrc ? &r->val_srcs[0] : r->have_val ? &r->val_dl : &r->train_dl;
        if (dataloader_next(src, r->probe_in, r->probe_tg) != 0) return 1;
        dataloader_reset(src);
        if (src == &r->train_dl && r->cfg.data.shuffle) dataloader_shuffle(&r->train_dl, tc->seed);
    }
    spike_init(&r->loss_win, r->cfg.metrics.spike_window);
    spike_init(&r->grad_win, r->cfg.metrics.spike_window);
    // resume: weights, AdamW state, data position, spike windows, counters (train/checkpoint.h)
    r->cs.loss_win = &r->loss_win;
    r->cs.grad_win = &r->grad_win;
    if (r->resuming) {
        Mixture* mix = r->have_mix ? &r->mix : NULL;
        if (resume_restore(r->resume_path, &r->model, &r->opt, &r->train_dl, mix, &r->cs) != 0) return 1;
        if (r->dist.master_sharded) dist_gather_weights(&r->dist, &r->model);   // the loaded shards' compute copy
        if (resume_resave(r->comm, &r->cfg, &r->model, &r->opt, &r->cs, &r->train_dl, mix) != 0) return 1;
        r->start_step = r->cs.step;
        r->nonfinite_run = r->cs.nonfinite_run;
        if (r->start_step >= tc->steps) {
            printf("resume: the checkpoint is at step %d and [train] steps = %d: nothing left to train (raise [train] steps to continue)\n",
                   r->start_step, tc->steps);
            return 2;
        }
    }
    const int stop_after = r->args.stop_after;
    r->end_step = stop_after > 0 && stop_after < tc->steps ? stop_after : tc->steps;
    return 0;
}

// The checkpoint directory, the run directory and the run log (rank 0 owns them; the others
// write their records to /dev/null: the same code path, no files), then the "resume" and "run"
// records.
static int open_run_log(Run* r) {
    Comm* comm = r->comm;
    const Config* cfg = &r->cfg;
    const char* spec = r->args.resume_spec;
    if (comm->rank == 0 && cfg->ckpt.checkpoint_every > 0 &&
        resume_prepare_dir(r->ckpt_dir, r->start_step, r->resuming, spec && strcmp(spec, "auto") == 0) != 0)
        return 1;
    // the run directory (only now: a refused start above leaves it as it was)
    if (comm->rank == 0 && (make_dirs(cfg->log.run_dir) != 0 || save_config(cfg) != 0)) {
        fprintf(stderr, "error: cannot write the run directory '%s' ([log] run_dir): %s\n", cfg->log.run_dir, strerror(errno));
        return 1;
    }
    // TensorBoard (before the run log, so a refused file leaves that as it was): a new event
    // file whose restart marker drops what earlier files hold after the checkpoint, as the run
    // log is trimmed below (a fresh run's marker at step 0 drops all of an earlier run's)
    if (comm->rank == 0 && cfg->log.tensorboard && tb_open(&r->tb, cfg->log.run_dir, r->resuming ? r->start_step + 1 : 0) != 0)
        return 1;
    // the run log: a resumed run keeps the records up to its checkpoint and appends
    snprintf(r->log_path, sizeof r->log_path, "%s/log.jsonl", cfg->log.run_dir);
    if (comm->rank == 0 && r->resuming && resume_trim_log(r->log_path, r->start_step) != 0) return 1;
    r->logf = fopen(comm->rank == 0 ? r->log_path : "/dev/null", r->resuming ? "a" : "w");
    if (!r->logf) { fprintf(stderr, "error: cannot open %s: %s\n", r->log_path, strerror(errno)); return 1; }
    if (r->tb.f) jsonl_mirror(r->logf, tb_mirror_record, &r->tb);   // every record from here on
    comm_barrier(comm);   // the others start once rank 0 has accepted the start
    Jsonl j;
    if (r->resuming) {
        jsonl_begin(&j, r->logf, "resume", r->start_step);
        jsonl_str(&j, "path", r->resume_path);
        jsonl_end(&j);
    }
    // what this launch runs on: which numerics produced the records that follow (an fp32 and a
    // bf16 run of one config differ by more than summation order)
    jsonl_begin(&j, r->logf, "run", r->start_step);
    jsonl_str(&j, "backend", ops_backend_name());
    jsonl_str(&j, "act", OPS_ACT_NAME);
    jsonl_int(&j, "processes", r->P);
    jsonl_int(&j, "batch_size", r->B);
    jsonl_int(&j, "seq_len", r->T);
    jsonl_int(&j, "grad_accum", r->grad_accum);
    jsonl_int(&j, "tokens_per_step", r->tokens_per_step);
    ParamTable whole;   // the whole model's arena (an expert-parallel process holds a shard of it)
    param_table_build(&whole, &r->cfg.model);
    jsonl_int(&j, "params", (long long)whole.total);
    param_table_free(&whole);
    jsonl_fmt(&j, "flops_per_token", "%.6g", r->flops_tok);
    jsonl_fmt(&j, "peak_flops", "%.6g", r->peak);
    jsonl_str(&j, "peak_source", ops_peak_source());
    jsonl_end(&j);
    fflush(r->logf);
    return 0;
}

// [eval] tasks: each file read and tokenised with the run's tokenizer, on every process (each
// scores its share of the rows of every task).
static int setup_tasks(Run* r) {
    const EvalConfig* ec = &r->cfg.eval;
    if (!ec->tasks[0] || ec->task_every <= 0) return 0;
    if (!r->dec.have_tok) {
        fprintf(stderr, "error: %s: [eval] tasks needs a tokenizer to encode the task text: set [data] tokenizer\n", r->where);
        return 1;
    }
    for (const char* p = ec->tasks; *p;) {   // a comma-separated list of files
        const char* end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        char path[1024];
        while (p < end && *p == ' ') p++;
        int n = (int)(end - p);
        while (n > 0 && p[n - 1] == ' ') n--;
        snprintf(path, sizeof path, "%.*s", n, p);
        p = *end ? end + 1 : end;
        if (!path[0]) continue;
        r->tasks = realloc(r->tasks, (size_t)(r->n_tasks + 1) * sizeof(McTask));
        r->task_prep = realloc(r->task_prep, (size_t)(r->n_tasks + 1) * sizeof(McPrepared));
        McTask* t = &r->tasks[r->n_tasks];
        if (mc_task_load(t, path, NULL, ec->task_limit) != 0) return 1;
        if (mc_prepare(&r->task_prep[r->n_tasks], t, &r->dec.tok, r->cfg.model.max_seq_len, r->cfg.model.vocab_size) != 0) return 1;
        r->n_tasks++;
        printf("eval: task %s: %d examples, %d choices scored, from %s\n", t->name, t->n, r->task_prep[r->n_tasks - 1].n_rows, path);
    }
    return 0;
}

// Every [eval] task on the model after step `step`: all processes score their share, rank 0 logs
// a console line and a "task" record per task.
static void run_tasks(Run* r, int step) {
    for (int i = 0; i < r->n_tasks; i++) {
        McResult res;
        watchdog_phase(step, "multiple-choice task");
        // forwards of the trainer's own B x T tokens (the activations are resized and restored)
        mc_score(&r->model, &r->task_prep[i], (long)r->B * r->T, r->comm, 10.0, &res);
        printf("step %5d/%d | task %s: acc %.4f +- %.4f | acc_norm %.4f +- %.4f (chance %.4f, n %d) | %.1f s\n", step,
               r->cfg.train.steps, r->tasks[i].name, res.acc, res.acc_stderr, res.acc_norm, res.acc_norm_stderr, res.chance,
               res.n, res.seconds);
        mc_write_record(&res, &r->tasks[i], step, r->logf);
    }
    fflush(stdout);
}

// The validation loss: a console line and an "eval" record (rank 0).
// [data] val_sources: a loss per source (val_batches batches from its start), val_loss their
// mean weighted by the sources' weights.
static void run_eval(Run* r, int step) {
    float per[CONFIG_MAX_SOURCES];
    float vl;
    if (r->n_valsrc) {
        double sum = 0.0;
        for (int i = 0; i < r->n_valsrc; i++) {
            per[i] = evaluate(&r->model, &r->val_srcs[i], r->cfg.log.val_batches, r->in, r->tg);
            sum += r->valsrc[i].weight * per[i];
        }
        vl = (float)sum;
    } else {
        vl = evaluate(&r->model, &r->val_dl, r->cfg.log.val_batches, r->in, r->tg);
    }
    printf("step %5d/%d | val loss %.4f", step, r->cfg.train.steps, vl);
    for (int i = 0; i < r->n_valsrc; i++) printf("%s%s %.4f%s", i ? ", " : " (", r->valsrc[i].name, per[i], i + 1 == r->n_valsrc ? ")" : "");
    printf("\n");
    Jsonl j;
    jsonl_begin(&j, r->logf, "eval", step);
    jsonl_num(&j, "val_loss", vl);
    for (int i = 0; i < r->n_valsrc; i++) {
        char key[64];
        snprintf(key, sizeof key, "val_loss_%s", r->valsrc[i].name);
        jsonl_num(&j, key, per[i]);
    }
    jsonl_end(&j);
}

// One optimizer step (step + 1): grad_accum micro-batches forward and backward, the gradients
// reduced over the processes, the spike and non-finite checks, then AdamW unless skipped.
// Returns 0, or 1 on an error (a data error, too many non-finite steps in a row).
static int train_step(Run* r, int step, StepStats* s) {
    double t0 = progress_now(), comm_s0 = r->comm->seconds, ep_s0 = r->comm->ep_seconds, ep_b0 = r->comm->ep_bytes;
    const TrainConfig* tc = &r->cfg.train;
    const MetricsConfig* mt = &r->cfg.metrics;
    const int grad_accum = r->grad_accum, P = r->P;
    GPT* m = &r->model;
    gpt_zero_grad(m);
    double loss = 0.0;
    m->moe_reduce = P > 1 ? moe_allreduce : NULL;   // training micro-steps only
    m->moe_reduce_ctx = r->comm;
    GradsReady gr = {&r->dist, m->grads};
    // the compute time of the straggler report: forward + backward, less the time inside
    // collectives during them (MoE's reductions, the overlapped gradient reduction)
    const double tc0 = progress_now(), cc0 = r->comm->seconds;
    for (int micro = 0; micro < grad_accum; micro++) {
        watchdog_phase(step + 1, "forward");
        if ((r->have_mix ? mixture_next(&r->mix, r->in, r->tg) : dataloader_next(&r->train_dl, r->in, r->tg)) != 0) return 1;
        test_slow(r->comm);
        const float dloss = 1.0f / (grad_accum * P);   // the sum over ranks is the mean
        loss += gpt_forward_train(m, r->in, r->tg, dloss) / grad_accum;
        // the last micro-step finishes each layer's gradients: reduce them while the rest of
        // the backward runs (dist.overlap: NCCL, or GATEDGPT_DIST_OVERLAP=1)
        const int last = micro == grad_accum - 1 && P > 1 && r->dist.overlap;
        watchdog_phase(step + 1, last ? "backward (gradients reduced layer by layer)" : "backward");
        m->grads_ready = last ? grads_ready : NULL;
        m->grads_ready_ctx = &gr;
        gpt_backward(m, dloss);
        m->grads_ready = NULL;
    }
    s->compute_s = (progress_now() - tc0) - (r->comm->seconds - cc0);
    m->moe_reduce = NULL;
    // the global batch: gradients summed over ranks, the loss averaged
    watchdog_phase(step + 1, r->dist.zero_stage ? "reduce-scatter of gradients" : "all-reduce of gradients");
    dist_reduce_grads(&r->dist, m->grads);
    watchdog_phase(step + 1, "all-reduce of the loss");
    comm_allreduce_sum_f64(r->comm, &loss, 1);
    loss /= P;
    moe_step_summary(m, &s->moe);
    float lr = lr_schedule(tc, step);
    watchdog_phase(step + 1, "gradient norm (all-reduce)");
    float norm = dist_grad_norm(&r->dist, m->grads);
    const int nonfinite = !isfinite(loss) || !isfinite(norm);
    int skipped = nonfinite;
    SpikeHit hits[2];
    int nhits = 0;
    if (skipped) {
        fprintf(stderr, "warning: step %d: non-finite loss (%g) or grad norm (%g): update skipped\n", step + 1, loss, norm);
        hits[nhits++] = (SpikeHit){"nonfinite", 0, 0, 0, 0, 0, 1};
        ++r->nonfinite_run;
    } else {
        r->nonfinite_run = 0;
        // spikes: z-scores against the trailing windows; spikes stay out of the windows
        int loss_spike = check_spike(&r->loss_win, "loss", loss, mt->spike_z, mt->skip_loss_z, step + 1, &hits[nhits], &skipped);
        nhits += loss_spike;
        int grad_spike = check_spike(&r->grad_win, "grad_norm", norm, mt->spike_z, mt->skip_grad_z, step + 1, &hits[nhits], &skipped);
        nhits += grad_spike;
        if (!loss_spike) spike_push(&r->loss_win, loss);
        if (!grad_spike) spike_push(&r->grad_win, norm);
    }
    // the instability signals (train/signals.h) of a step a probe or a spike record reports:
    // every process alike (the loss and norm are global), nothing on the other steps
    const int done = step + 1;
    const int probed = mt->probe_every > 0 && (done % mt->probe_every == 0 || done == tc->steps);
    const int measure = probed || nhits > 0;
    ProbeResult spike_probe = {0};
    const int have_probe = nhits > 0 && r->comm->rank < r->comm->ep_size;   // rank 0's group, as run_probe
    if (measure) watchdog_phase(done, "instability signals (all-reduces of norms)");
    if (measure) signals_grads(&r->sig, &r->dist, m->grads, done);
    // a spike: the probe batch under the weights the spiking step started from (the
    // activations of the step are no longer needed: its gradients are reduced)
    if (have_probe) probe_run(m, r->probe_in, r->probe_tg, done, &spike_probe);
    if (measure) signals_before_update(&r->sig, &r->dist, m->params, m->master_lo);
    if (!skipped) {
        watchdog_phase(done, "optimizer step");
        optim_step(&r->opt, m, tc, lr, norm);        // this rank's range of the parameters
        watchdog_phase(done, "all-gather of parameters");
        dist_gather_weights(&r->dist, m);            // ZeRO-1: everyone's updated shards
    }
    if (measure) signals_after_update(&r->sig, &r->dist, m->params, m->master_lo, skipped);
    for (int i = 0; i < nhits; i++) write_spike(&hits[i], done, have_probe ? &spike_probe : NULL, &r->sig, r->logf);
    if (have_probe) probe_free(&spike_probe);
    if (nonfinite && r->nonfinite_run >= mt->max_nonfinite) {
        fprintf(stderr, "error: %d non-finite steps in a row: stopping (lower [train] lr or raise [metrics] max_nonfinite)\n", r->nonfinite_run);
        return 1;
    }
    s->loss = loss;
    s->lr = lr;
    s->norm = norm;
    s->skipped = skipped;
    s->dt = progress_now() - t0;
    s->comm_ms = (r->comm->seconds - comm_s0) * 1e3;
    s->ep_ms = (r->comm->ep_seconds - ep_s0) * 1e3;
    s->ep_bytes = r->comm->ep_bytes - ep_b0;
    return 0;
}

// The straggler report (P > 1, every log_every steps; every rank calls it): the ranks' compute
// times since the last report exchanged (a sum of one-hot arrays: exact), the slowest and the
// fastest in s->rep for the step record, and a warning from each rank slower than straggler_factor
// x the median for straggler_reports reports in a row, on its own stderr (it knows its host).
static void straggler_exchange(Run* r, int step, StepStats* s) {
    const Comm* c = r->comm;
    r->compute_s += s->compute_s;
    if (r->P == 1 || (step + 1) % r->cfg.log.log_every != 0) return;
    const int P = r->P;
    double* ms = calloc((size_t)P, sizeof(double));
    int* warn = malloc((size_t)P * sizeof(int));
    if (!ms || !warn || (!r->strag.run && straggler_track_init(&r->strag, P) != 0))
        comm_abort(r->comm, 1, "out of host memory (straggler report)");
    ms[c->rank] = r->compute_s * 1e3;
    r->compute_s = 0.0;
    watchdog_phase(step + 1, "straggler report (all-reduce of compute times)");
    comm_allreduce_sum_f64(r->comm, ms, (size_t)P);
    straggler_report(ms, P, &s->rep);
    s->has_report = 1;
    const TrainConfig* tc = &r->cfg.train;
    const int nw = straggler_update(&r->strag, ms, tc->straggler_factor, tc->straggler_reports, warn);
    for (int i = 0; i < nw; i++) {
        const int w = warn[i];
        if (c->rank == 0) {   // the run log's record of it (rank 0 logs)
            Jsonl j;
            jsonl_begin(&j, r->logf, "straggler", step + 1);
            jsonl_int(&j, "rank", w);
            jsonl_fmt(&j, "compute_ms", "%.3f", ms[w]);
            jsonl_fmt(&j, "median_ms", "%.3f", s->rep.median_ms);
            jsonl_int(&j, "reports", r->strag.run[w]);
            jsonl_end(&j);
        }
        if (w != c->rank) continue;
        char host[256] = "?";
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = 0;
        fprintf(stderr, "warning: rank %d of %d (host %s) is a straggler: compute %.1f ms over the last %d steps, %.2f x "
                "the median %.1f ms of the %d ranks, in %d reports in a row ([train] straggler_factor = %g, "
                "straggler_reports = %d): check this host's GPU/CPU load, clocks and neighbours\n", c->rank, P, host, ms[w],
                r->cfg.log.log_every, ms[w] / s->rep.median_ms, s->rep.median_ms, P, r->strag.run[w],
                (double)tc->straggler_factor, tc->straggler_reports);
        fflush(stderr);
    }
    free(ms);
    free(warn);
}

// The watchdog's abort (train/watchdog.h), from its thread: NCCL's communicators first (their
// kernels would hold the GPU), then the whole job (MPI_Abort; without MPI this process alone,
// with _exit: exit()'s stdio flush could block on a lock the stuck main thread holds).
static void watchdog_abort(void* ctx, int code, const char* why) {
    Run* r = (Run*)ctx;
    const int n = dist_abort_nccl(&r->dist);
    char line[1024];
    snprintf(line, sizeof line, "%s%s", why, n ? " (NCCL's communicators aborted first: ncclCommAbort)" : "");
    if (r->comm->mpi) comm_abort(r->comm, code, line);
    fprintf(stderr, "error: %s\n", line);
    _exit(code);
}

// The step's console line (every log_every steps, the first and the last) and its "step" record.
static void log_step(Run* r, int step, const StepStats* s) {
    const TrainConfig* tc = &r->cfg.train;
    double tok_s = r->tokens_per_step / s->dt;
    double mfu = tok_s * r->flops_tok / r->peak;
    const MoeStepSummary* moe = &s->moe;
    // this job's wall time so far, and what is left: the steps, and the evaluations, probes,
    // samples and checkpoints still due (this step's included: they run after this line)
    progress_item(&r->prog, s->dt);
    const double elapsed = progress_elapsed(&r->prog, progress_now()), eta = progress_eta(&r->prog, step + 1, r->end_step);
    if ((step + 1) % r->cfg.log.log_every == 0 || step == r->start_step || step + 1 == r->end_step) {
        char moe_txt[80] = "";
        if (moe->n_moe) snprintf(moe_txt, sizeof moe_txt, " | aux %.3f z %.2f load %.2f", moe->aux, moe->z, moe->max_load);
        char el[32], left[32];
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s | MFU %5.1f%% | %s elapsed, ETA %s%s%s\n",
               step + 1, tc->steps, s->loss, s->lr, s->norm, s->dt * 1e3, tok_s, 100.0 * mfu, progress_fmt(elapsed, el, sizeof el),
               progress_fmt(eta, left, sizeof left), moe_txt, s->skipped ? " | skipped" : "");
        fflush(stdout);
    }
    Jsonl j;
    jsonl_begin(&j, r->logf, "step", step + 1);
    jsonl_num(&j, "loss", s->loss);
    jsonl_fmt(&j, "lr", "%.6e", s->lr);
    jsonl_num(&j, "grad_norm", s->norm);
    jsonl_fmt(&j, "ms", "%.3f", s->dt * 1e3);
    jsonl_fmt(&j, "tokens_per_s", "%.1f", tok_s);
    jsonl_fmt(&j, "mfu", "%.5f", mfu);
    jsonl_fmt(&j, "elapsed_s", "%.3f", elapsed);
    jsonl_fmt(&j, "eta_s", "%.3f", eta);
    jsonl_bool(&j, "skipped", s->skipped);
    if (moe->n_moe) {
        jsonl_num(&j, "moe_aux", moe->aux);
        jsonl_num(&j, "moe_z", moe->z);
        jsonl_num(&j, "moe_max_load", moe->max_load);
        jsonl_int(&j, "moe_dropped", moe->dropped);
    }
    if (r->P > 1) jsonl_fmt(&j, "comm_ms", "%.3f", s->comm_ms);
    if (s->has_report) {   // the straggler report: compute time per rank since the last one
        jsonl_fmt(&j, "compute_ms_max", "%.3f", s->rep.max_ms);
        jsonl_int(&j, "rank_slowest", s->rep.slowest);
        jsonl_fmt(&j, "compute_ms_min", "%.3f", s->rep.min_ms);
        jsonl_int(&j, "rank_fastest", s->rep.fastest);
        jsonl_fmt(&j, "compute_ms_median", "%.3f", s->rep.median_ms);
    }
    if (r->comm->ep_size > 1) {   // rank 0's share of the expert all-to-alls (inside comm_ms)
        jsonl_fmt(&j, "ep_ms", "%.3f", s->ep_ms);
        jsonl_fmt(&j, "ep_bytes", "%.0f", s->ep_bytes);
    }
    for (int i = 0; r->have_mix && i < r->mix.n; i++) {   // per source: tokens drawn so far (all processes), epochs done
        char key[64];
        snprintf(key, sizeof key, "tokens_%s", r->mix.name[i]);
        jsonl_int(&j, key, (long long)(r->mix.drawn[i] * (uint64_t)r->T));
        snprintf(key, sizeof key, "epoch_%s", r->mix.name[i]);
        jsonl_int(&j, key, (long long)r->mix.src[i].epoch);
    }
    jsonl_end(&j);
}

// Validation, probes and samples after step `done` (rank 0, with the other members of its
// expert-parallel group: they hold the experts rank 0 lacks and run the same forwards in step,
// logging nothing), at their intervals and at the end.
static void run_measurements(Run* r, int done) {
    const Config* cfg = &r->cfg;
    const int last = done == cfg->train.steps;
    if (r->comm->rank >= r->comm->ep_size) return;   // rank 0's group: ranks 0 .. P-1 (P = 1: rank 0)
    double t0 = progress_now();
    if (r->have_val && (done % cfg->log.val_every == 0 || last)) {
        watchdog_phase(done, "evaluation");
        run_eval(r, done);
        progress_task_took(&r->prog, PROG_EVAL, progress_now() - t0);
    }
    if (cfg->metrics.probe_every > 0 && (done % cfg->metrics.probe_every == 0 || last)) {
        t0 = progress_now();
        watchdog_phase(done, "probe");
        run_probe(&r->model, r->probe_in, r->probe_tg, done, &r->sig, r->logf);
        progress_task_took(&r->prog, PROG_PROBE, progress_now() - t0);
    }
    if (cfg->log.sample_every > 0 && (done % cfg->log.sample_every == 0 || last)) {
        t0 = progress_now();
        watchdog_phase(done, "sample");
        print_sample(&r->model, cfg, &r->dec, done, r->logf);
        progress_task_took(&r->prog, PROG_SAMPLE, progress_now() - t0);
    }
}

// [checkpoint] async: the write in flight, after step `done`: committed when every rank's writer
// is done (wait = 1: after waiting for this rank's; the watchdog covers the wait, re-armed by
// each stage of the write), then its outcome logged. Returns 1 when a failed write stops the run.
static int finish_async_checkpoint(Run* r, int done, int wait) {
    CkptAsync* a = &r->ckpt_async;
    if (!ckpt_async_in_flight(a)) return 0;
    const char* phase = watchdog_current_phase();
    watchdog_phase(-1, wait ? "waiting for the asynchronous checkpoint write" : "asynchronous checkpoint write (all-reduce of in-flight)");
    int rc = 0;
    const int finished = ckpt_async_poll(a, wait, r->comm->rank, ckpt_agree, r->comm, &rc);
    watchdog_phase(-1, phase);
    if (!finished) return 0;
    if (checkpoint_outcome(r->comm, &r->cfg, r->ckpt_dir, a->step, rc, (progress_now() - r->ckpt_async_t0) * 1e3, a, done,
                           r->logf) != 0) {
        r->ckpt_failed++;
        if (r->cfg.ckpt.on_write_error == CKPT_ON_ERROR_EXIT) return 1;
    }
    return 0;
}

// A checkpoint every checkpoint_every steps and after the last one (of the run, or of this job).
// [checkpoint] async: the write in flight is polled after every step (one all-reduce while it
// is in flight), and a new one begins only once it is committed.
// Returns 1 when a failed write stops the run ([checkpoint] on_write_error = exit).
static int maybe_checkpoint(Run* r, int done, float lr) {
    if (finish_async_checkpoint(r, done, 0) != 0) return 1;
    const CheckpointConfig* cc = &r->cfg.ckpt;
    if (cc->checkpoint_every <= 0 || (done % cc->checkpoint_every != 0 && done != r->end_step)) return 0;
    CkptTrainState* cs = &r->cs;
    cs->step = done;
    if (r->have_mix) {   // the mixture's position: data.bin (the rank files' data position stays 0)
        if (mixture_save(&r->mix, &cs->mix, &cs->mix_len) != 0) return 1;
        cs->data_seed = r->cfg.train.seed;
        cs->data_shuffle = r->cfg.data.shuffle;
    } else {
        dataloader_get_state(&r->train_dl, &cs->data);
        cs->data_seed = r->train_dl.seed;
        cs->data_shuffle = r->train_dl.shuffle;
    }
    cs->nonfinite_run = r->nonfinite_run;
    cs->lr = lr;
    const double t0 = progress_now();
    if (cc->async) {   // at most one write in flight: the previous one first
        if (finish_async_checkpoint(r, done, 1) != 0) return 1;
        watchdog_phase(done, "checkpoint snapshot");
        const int failed = ckpt_async_begin(&r->ckpt_async, r->ckpt_dir, done, &r->cfg, &r->model, &r->opt, cs, r->comm->rank,
                                            r->comm->size, ckpt_agree, r->comm) != 0;
        free(cs->mix);   // the snapshot holds its own copy
        cs->mix = NULL;
        cs->mix_len = 0;
        if (failed) {
            checkpoint_outcome(r->comm, &r->cfg, r->ckpt_dir, done, -1, 0.0, &r->ckpt_async, done, r->logf);
            r->ckpt_failed++;
            if (cc->on_write_error == CKPT_ON_ERROR_EXIT) return 1;
        } else {
            r->ckpt_async_t0 = t0;
        }
        progress_task_took(&r->prog, PROG_CKPT, progress_now() - t0);
        // the run's (or this job's) last checkpoint: nothing left to overlap it with
        return done == r->end_step && finish_async_checkpoint(r, done, 1) != 0;
    }
    watchdog_phase(done, "checkpoint write");   // re-armed at each stage of the write (train/checkpoint.c)
    const int failed = write_checkpoint(r->comm, &r->cfg, r->ckpt_dir, &r->model, &r->opt, cs, r->logf) != 0;
    free(cs->mix);
    cs->mix = NULL;
    cs->mix_len = 0;
    if (failed) {
        r->ckpt_failed++;
        if (cc->on_write_error == CKPT_ON_ERROR_EXIT) return 1;
    }
    progress_task_took(&r->prog, PROG_CKPT, progress_now() - t0);
    return 0;
}

// The closing lines, and everything freed.
static void finish_run(Run* r) {
    const TrainConfig* tc = &r->cfg.train;
    if (r->cfg.ckpt.async && r->cfg.ckpt.checkpoint_every > 0) ckpt_async_free(&r->ckpt_async);   // nothing in flight: the last was waited for
    jsonl_mirror(r->logf, NULL, NULL);
    tb_close(&r->tb);
    fclose(r->logf);
    if (r->dec.have_tok) tokenizer_free(&r->dec.tok);
    if (r->end_step < tc->steps)
        printf("stopped after step %d of %d (--stop-after)%s\n", r->end_step, tc->steps, r->cfg.ckpt.checkpoint_every > 0 ?
               "; continue with --resume auto" : "; no checkpoint was written ([checkpoint] checkpoint_every = 0)");
    // the peaks, the largest over the processes: what the memory plan's total predicts
    double pk[2] = {(double)plan_self_peak_rss(), (double)ops_allocated_peak_bytes()};
    watchdog_phase(r->end_step, "the end of the run (all-reduce of the memory peaks)");
    comm_allreduce_max_f64(r->comm, pk, 2);
    watchdog_stop();   // before MPI_Finalize (comm_finalize): its abort must not come after it
    printf("memory: peak RSS %.0f bytes (%.1f MiB, VmHWM) | backend peak %.0f bytes (ops_malloc)%s\n", pk[0], pk[0] / 1048576.0,
           pk[1], r->P > 1 ? " | the largest over the processes" : "");
    printf("done: log in %s%s\n", r->log_path, r->ckpt_failed ? " (some checkpoint writes failed: see the warnings)" : "");
    free(r->in); free(r->tg); free(r->probe_in); free(r->probe_tg);
    for (int i = 0; i < r->n_tasks; i++) { mc_prepared_free(&r->task_prep[i]); mc_task_free(&r->tasks[i]); }
    free(r->tasks); free(r->task_prep);
    spike_free(&r->loss_win); spike_free(&r->grad_win);
    signals_free(&r->sig);
    optim_free(&r->opt);
    dist_free(&r->dist);
    gpt_free(&r->model);
    if (r->have_mix) mixture_free(&r->mix);
    else dataloader_free(&r->train_dl);
    if (r->have_val && !r->n_valsrc) dataloader_free(&r->val_dl);
    for (int i = 0; i < r->n_valsrc; i++) dataloader_free(&r->val_srcs[i]);
    train_args_free(&r->args);
    straggler_track_free(&r->strag);
}

static int train_main(Comm* comm, int argc, char** argv) {
    static Run run;   // large (the config's provenance strings); one per process
    Run* r = &run;
    r->comm = comm;
    // the command line, parsed once; the config: file, overrides, derived fields
    if (train_args_parse(&r->args, argc, argv) != 0) return 1;
    if (r->args.help) { train_args_usage(stdout); return 0; }
    if (train_args_config(&r->args, &r->cfg) != 0) return 1;
    r->where = r->args.config_path ? r->args.config_path : "config";
    printf("gatedgpt: resolved config%s%s\n", r->args.config_path ? " from " : "", r->args.config_path ? r->args.config_path : "");
    config_write(&r->cfg, stdout);
    fflush(stdout);   // whole lines before any error on stderr (a file holds both: the dump outgrew one stdio buffer)
    if (r->args.check_only) {
        print_param_counts(&r->cfg);
        return check_memory_plan(r);
    }

    // setup: the run's terms (data, batch over the processes, --resume), data, model, state
    if (setup_run(r) != 0 || setup_data(r) != 0 || setup_tasks(r) != 0 || setup_model(r) != 0) return 1;
    int st = setup_state(r);
    if (st != 0) return st == 2 ? 0 : 1;
    if (open_run_log(r) != 0) return 1;
    // the watchdog from here on: the setup above ends or fails on its own
    if (watchdog_start(r->cfg.train.hang_timeout_s, r->P, watchdog_abort, r) != 0) return 1;

    // the clock of the step line's elapsed time and ETA, with the periodic work between steps
    // where it falls: as run_measurements and maybe_checkpoint schedule it
    const Config* cfg = &r->cfg;
    progress_init(&r->prog, progress_now());
    progress_task_every(&r->prog, PROG_EVAL, r->have_val ? cfg->log.val_every : 0, r->have_val ? cfg->train.steps : 0);
    progress_task_every(&r->prog, PROG_PROBE, cfg->metrics.probe_every, cfg->metrics.probe_every > 0 ? cfg->train.steps : 0);
    progress_task_every(&r->prog, PROG_SAMPLE, cfg->log.sample_every, cfg->log.sample_every > 0 ? cfg->train.steps : 0);
    progress_task_every(&r->prog, PROG_TASKS, r->n_tasks ? cfg->eval.task_every : 0, r->n_tasks ? cfg->train.steps : 0);
    progress_task_every(&r->prog, PROG_CKPT, cfg->ckpt.checkpoint_every, cfg->ckpt.checkpoint_every > 0 ? r->end_step : 0);

    // the untrained model's validation loss and probe, as the curves' first points (timed: the
    // ETA's first estimate of their cost)
    if (comm->rank < comm->ep_size && r->have_val && !r->resuming) {   // rank 0 and its group
        double t0 = progress_now();
        watchdog_phase(0, "evaluation");
        run_eval(r, 0);
        progress_task_took(&r->prog, PROG_EVAL, progress_now() - t0);
    }
    if (comm->rank < comm->ep_size && r->cfg.metrics.probe_every > 0 && !r->resuming) {
        double t0 = progress_now();
        watchdog_phase(0, "probe");
        run_probe(&r->model, r->probe_in, r->probe_tg, 0, &r->sig, r->logf);
        progress_task_took(&r->prog, PROG_PROBE, progress_now() - t0);
    }

    if (r->n_tasks && !r->resuming) {   // every process: each scores its share
        double t0 = progress_now();
        run_tasks(r, 0);
        progress_task_took(&r->prog, PROG_TASKS, progress_now() - t0);
    }

    // [checkpoint] async: the writer thread (train/ckpt_async.h)
    if (cfg->ckpt.async && cfg->ckpt.checkpoint_every > 0 && ckpt_async_init(&r->ckpt_async, &r->model, &r->opt, r->comm->rank) != 0)
        return 1;

    // the loop: a step, its record, the measurements, the checkpoint
    for (int step = r->start_step; step < r->end_step; step++) {
        StepStats s;
        memset(&s, 0, sizeof s);
        if (injected_failure(comm, step + 1)) return 1;
        test_stop(comm, step + 1);
        if (train_step(r, step, &s) != 0) return 1;
        straggler_exchange(r, step, &s);
        log_step(r, step, &s);
        run_measurements(r, step + 1);
        if (r->n_tasks && ((step + 1) % cfg->eval.task_every == 0 || step + 1 == cfg->train.steps)) {
            double t0 = progress_now();
            run_tasks(r, step + 1);
            progress_task_took(&r->prog, PROG_TASKS, progress_now() - t0);
        }
        fflush(r->logf);
        if (maybe_checkpoint(r, step + 1, s.lr) != 0) return 1;
    }
    finish_run(r);
    return 0;
}
