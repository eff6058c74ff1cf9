// train/plan.c: the memory planner (train/plan.h). Every figure of an exact line comes from the
// size function its allocation calls; the rest (the CPU runtime, the GEMM library's workspace,
// MPI's temporaries, the GPU's CUDA context and NCCL buffers) are measurements or allowances,
// and each line says which.
#include "plan.h"
#include <ctype.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "model/gpt.h"
#include "model/kv_cache.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/probe.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/dist.h"
#include "train/signals.h"
#include "kernels/scratch.h"

// The GPU's runtime outside ops_malloc, an allowance (no GPU has measured it for this project
// yet): the CUDA context with cuBLAS/cuBLASLt handles and loaded kernels, and with more than one
// process NCCL's channel buffers.
#define PLAN_CUDA_CONTEXT_ALLOWANCE ((size_t)512 << 20)
#define PLAN_NCCL_ALLOWANCE ((size_t)512 << 20)

const char* plan_layout_name(PlanLayout l) {
    return l == PLAN_LAYOUT_CUDA_BF16 ? "cuda bf16" : l == PLAN_LAYOUT_CUDA_FP32 ? "cuda fp32"
         : l == PLAN_LAYOUT_CPU_BF16 ? "cpu bf16" : "cpu fp32";
}

static size_t status_kb(const char* key) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0) { kb = (size_t)strtoull(line + klen, NULL, 10); break; }
    fclose(f);
    return kb;
}
size_t plan_self_rss(void) { return status_kb("VmRSS:") * 1024; }
size_t plan_self_peak_rss(void) { return status_kb("VmHWM:") * 1024; }
size_t plan_mem_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

// The named GPUs: the data sheet's memory in decimal GB (what the arithmetic uses; the
// usable memory nvidia-smi reports is somewhat larger), and the shared memory a block may use.
static const struct { const char* name; double bytes; const char* sheet; size_t smem; } PLAN_GPUS[] = {
    {"h100", 80e9, "H100 SXM 80 GB HBM3, datasheet", CUDA_SMEM_OPTIN_SM90},
    {"h200", 141e9, "H200 SXM 141 GB HBM3e, datasheet", CUDA_SMEM_OPTIN_SM90},
    {"a100-80g", 80e9, "A100 80 GB HBM2e, datasheet", CUDA_SMEM_OPTIN_SM80},
};

int plan_parse_device(const char* s, size_t* bytes, char* name, size_t name_len, int* is_gpu, size_t* smem_optin) {
    for (size_t i = 0; i < sizeof PLAN_GPUS / sizeof PLAN_GPUS[0]; i++)
        if (strcasecmp(s, PLAN_GPUS[i].name) == 0) {
            *bytes = (size_t)PLAN_GPUS[i].bytes;
            snprintf(name, name_len, "%s (%s)", PLAN_GPUS[i].name, PLAN_GPUS[i].sheet);
            *is_gpu = 1;
            *smem_optin = PLAN_GPUS[i].smem;
            return 0;
        }
    // a byte count: digits, then nothing or one of the suffixes
    const char* p = s;
    if (!isdigit((unsigned char)*p)) return -1;
    unsigned long long v = 0;
    while (isdigit((unsigned char)*p)) {
        if (v > (~0ull - 9) / 10) return -1;
        v = v * 10 + (unsigned long long)(*p++ - '0');
    }
    static const struct { const char* sfx; double mul; } SFX[] = {
        {"", 1}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"kB", 1e3}, {"KB", 1e3},
        {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
        {"Ti", 1099511627776.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof SFX / sizeof SFX[0]; i++)
        if (strcmp(p, SFX[i].sfx) == 0) {
            double b = (double)v * SFX[i].mul;
            if (v == 0 || b > 1.8e19) return -1;
            *bytes = (size_t)b;
            snprintf(name, name_len, "%s (%zu bytes)", s, *bytes);
            *is_gpu = 0;
            *smem_optin = CUDA_SMEM_OPTIN_SM90;
            return 0;
        }
    return -1;
}

// The largest file matching a glob (0 when none), and how many matched.
static size_t largest_file(const char* pattern, int* count) {
    *count = 0;
    if (!pattern[0]) return 0;
    glob_t g;
    size_t best = 0;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && (size_t)st.st_size > best) best = (size_t)st.st_size;
    }
    *count = (int)g.gl_pathc;
    globfree(&g);
    return best;
}

static double mib(size_t b) { return b / 1048576.0; }

int plan_build(const Config* cfg, int B, const PlanOptions* o, Plan* p) {
    memset(p, 0, sizeof *p);
    const ModelConfig* mc = &cfg->model;
    const TrainConfig* tc = &cfg->train;
    const int T = tc->seq_len, P = o->nproc;
    const int cuda = !plan_layout_is_cpu(o->layout);
    const size_t N = (size_t)B * T;
    if (B < 1 || P < 1) return -1;
    p->B = B; p->T = T; p->nproc = P;
    p->zero_stage = P > 1 ? tc->zero_stage : 0;   // the trainer ignores it for one process
    GptLayout lay;
    memset(&lay, 0, sizeof lay);
    lay.act_bytes = o->layout == PLAN_LAYOUT_CUDA_BF16 || o->layout == PLAN_LAYOUT_CPU_BF16 ? 2 : 4;
    lay.alloc_align = cuda ? SCRATCH_CUDA_ALLOC_ALIGN : SCRATCH_CPU_ALLOC_ALIGN;
    lay.attn_impl = (OpsAttnImpl)tc->attn_impl;
    lay.recompute = tc->recompute;   // what the layers keep: [train] recompute
    lay.gdn_keeps_saved = !cuda;     // kernels/cpu keeps the delta rule's Vn and states, kernels/cuda recomputes them
    const size_t al = lay.alloc_align;
    const char* act = lay.act_bytes == 2 ? "bf16" : "fp32";

    // ---- parameters, gradients, AdamW (model/gpt.h gpt_param_allocs, model/optim.h) ----
    // expert parallelism: this process's arena, member 0's expert shard (every member's is the
    // same size): the dense region and El = n_expert / P experts of each MoE layer
    const int EPP = mc->moe.n_expert > 0 && mc->moe.expert_parallel > 1 ? mc->moe.expert_parallel : 1;
    ParamTable pt;
    param_table_build_ep(&pt, mc, EPP, 0);
    const size_t n = pt.total, nd = pt.dense_total;
    param_table_free(&pt);
    p->n_params = n;
    size_t req[GPT_PARAM_ALLOCS];
    gpt_param_allocs(n, lay.act_bytes, req);
    p->bytes[PLAN_WEIGHTS] = req[GPT_ALLOC_WEIGHTS] ? scratch_alloc_bytes(req[GPT_ALLOC_WEIGHTS], al) : 0;
    if (req[GPT_ALLOC_WEIGHTS])
        snprintf(p->what[PLAN_WEIGHTS], sizeof p->what[0], "parameters in %s, the GEMMs' copy (%zu x %d bytes)", act, n, lay.act_bytes);
    else
        snprintf(p->what[PLAN_WEIGHTS], sizeof p->what[0], "parameters in fp32: the GEMMs read the master copy itself (no second copy)");
    p->bytes[PLAN_MASTER] = scratch_alloc_bytes(req[GPT_ALLOC_MASTER], al);
    // ZeRO-1 in the bf16 layouts (train/dist.h dist_master_shard): rank 0's shard of the fp32
    // master (the largest) and the fp32-read tensors whole (model/gpt.h gpt_master_allocs)
    const int master_sharded = lay.act_bytes == 2 && p->zero_stage == 1 && P > 1 && EPP == 1;
    if (master_sharded) {
        size_t mlo, mhi, mreq[2];
        dist_shard(n, P, 0, &mlo, &mhi);
        ParamTable wt;
        param_table_build(&wt, mc);
        gpt_master_allocs(&wt, mlo, mhi, mreq);
        param_table_free(&wt);
        p->bytes[PLAN_MASTER] = scratch_alloc_bytes(mreq[0], al) + scratch_alloc_bytes(mreq[1], al);
        snprintf(p->what[PLAN_MASTER], sizeof p->what[0], "fp32 parameters, the master weights: rank 0's shard, %zu of %zu x 4 "
                 "bytes (zero_stage 1 over %d processes), + the fp32-read tensors whole (%zu x 4 bytes: embeddings, norms, "
                 "biases)", mhi - mlo, n, P, mreq[1] / sizeof(float));
    } else if (EPP > 1)   // docs/distributed.md "Expert parallelism": the experts are sharded
        snprintf(p->what[PLAN_MASTER], sizeof p->what[0], "fp32 parameters, the master weights (%zu x 4 bytes: the %zu dense "
                 "on every process, %zu of the experts: 1/%d of them, expert_parallel = %d)", n, nd, n - nd, EPP, EPP);
    else
        snprintf(p->what[PLAN_MASTER], sizeof p->what[0], "fp32 parameters, the master weights (%zu x 4 bytes; every process holds all)", n);
    p->bytes[PLAN_GRADS] = scratch_alloc_bytes(req[GPT_ALLOC_GRADS], al);
    snprintf(p->what[PLAN_GRADS], sizeof p->what[0], "fp32 gradients, the whole arena on every process (%zu x 4 bytes)", n);
    // train/dist.h: the dense region sharded over the P processes, the expert region over the
    // replica group (P / expert_parallel processes)
    size_t lo = 0, hi = nd, slo = 0, shi = nd, xlo = nd, xhi = n, xs = 0, xe = n - nd;
    if (P > 1) dist_shard(nd, P, 0, &slo, &shi);   // rank 0's shard: the largest
    if (P / EPP > 1) dist_shard(n - nd, P / EPP, 0, &xs, &xe);
    if (p->zero_stage == 1) { lo = slo; hi = shi; xlo = nd + xs; xhi = nd + xe; }
    p->shard_lo = lo; p->shard_hi = hi;
    p->bytes[PLAN_ADAMW] = 2 * scratch_alloc_bytes(optim_moment_bytes(lo, hi) + optim_moment_bytes(xlo, xhi), al);
    // the instability signals' copy of the same shard's weights (train/signals.h)
    const size_t sig_copy = scratch_alloc_bytes(signals_copy_bytes(hi - lo, xhi - xlo), al);
    p->bytes[PLAN_ADAMW] += sig_copy;
    if (p->zero_stage == 1 && EPP > 1)
        snprintf(p->what[PLAN_ADAMW], sizeof p->what[0], "AdamW m and v, fp32, for rank 0's shards: %zu of the %zu dense "
                 "parameters (zero_stage 1 over %d processes) + %zu of its %zu expert parameters (over %d replicas)",
                 hi - lo, nd, P, xhi - xlo, n - nd, P / EPP);
    else if (p->zero_stage == 1)
        snprintf(p->what[PLAN_ADAMW], sizeof p->what[0], "AdamW m and v, fp32, for rank 0's shard: %zu of %zu parameters "
                 "(zero_stage 1 over %d processes: the largest shard)", hi - lo, n, P);
    else
        snprintf(p->what[PLAN_ADAMW], sizeof p->what[0], "AdamW m and v, fp32, for all %zu parameters (zero_stage 0%s)", n,
                 P > 1 ? ": every process keeps the whole state" : "");
    {
        const size_t w = strlen(p->what[PLAN_ADAMW]);
        snprintf(p->what[PLAN_ADAMW] + w, sizeof p->what[0] - w, "; the same shard's weights, copied for the update ratios "
                 "(%.2f MiB, train/signals.h)", mib(sig_copy));
    }

    // ---- activations (model/gpt.h gpt_activation_bytes: gpt_alloc_acts counts with it) ----
    GptActsBytes ab;
    gpt_activation_bytes(mc, B, T, &lay, &ab);
    p->bytes[PLAN_ACTS] = ab.by[GPT_ACTS_SAVED];
    snprintf(p->what[PLAN_ACTS], sizeof p->what[0], "kept for the backward, one micro-batch of %d x %d tokens (%s tensors, "
             "%.1f KiB per token)", B, T, lay.act_bytes == 2 ? "bf16 and fp32" : "fp32", ab.by[GPT_ACTS_SAVED] / 1024.0 / N);
    p->bytes[PLAN_EP_ROWS] = ab.ep_rows;
    if (EPP > 1)
        snprintf(p->what[PLAN_EP_ROWS], sizeof p->what[0], "expert parallelism's received rows, sized from the exchanged counts "
                 "(model/moe.h), at balanced routing: %zu rows a member (dropless imbalance: up to max/mean load x as many)",
                 (size_t)B * T * mc->moe.top_k);
    else
        snprintf(p->what[PLAN_EP_ROWS], sizeof p->what[0], "no expert parallelism: none");
    p->bytes[PLAN_LOGITS] = ab.by[GPT_ACTS_LOGITS];
    snprintf(p->what[PLAN_LOGITS], sizeof p->what[0], "logits [%zu, %d] in %s (their gradient overwrites them), per-token loss and "
             "logsumexp, token ids", N, mc->padded_vocab, act);
    p->bytes[PLAN_BACKWARD] = ab.by[GPT_ACTS_BACKWARD];
    snprintf(p->what[PLAN_BACKWARD], sizeof p->what[0], "the backward's buffers, one set shared by the %d layers", mc->n_layer);

    // ---- scratch (kernels/scratch.h) ----
    OpsStepShape ss;
    gpt_step_shape(mc, B, T, lay.attn_impl, n, o->threads, &ss);
    if (!cuda) {
        size_t k = o->this_backend ? ops_scratch_bytes(&ss) : cpu_scratch_bytes(&ss);
        size_t blas = cpu_blas_transient(o->threads);
        p->bytes[PLAN_SCRATCH] = k + blas;
        snprintf(p->what[PLAN_SCRATCH], sizeof p->what[0], "transient: the largest kernel temporaries of one op (%.2f MiB over %d "
                 "thread%s) + the GEMM library's packing buffers (allowance %.0f MiB: docs/config.md)", mib(k), o->threads,
                 o->threads == 1 ? "" : "s", mib(blas));
        if (o->layout == PLAN_LAYOUT_CPU_BF16) {
            // kernels/cpu_bf16: the bf16 GEMMs' fp32 results in two buffers held for the run (the
            // largest products: the logits N x Vp, the MLP's N x d_ff), and the largest op's fp32
            // copies of its bf16 tensors (the cross-entropy's logits, N x Vp): an estimate
            const size_t wide = (size_t)(mc->d_ff > 4 * mc->d_model ? mc->d_ff : 4 * mc->d_model);
            const size_t conv = (2 * N * (size_t)mc->padded_vocab + N * wide) * sizeof(float);
            // and the one buffer its GEMMs pack B into (kernels/cpu_bf16/matmul_bf16.c): the largest
            // B, the LM head's Vp x d_model in bf16 or a layer's 2 d_ff x d_model (SwiGLU's gate and up)
            const size_t bmax = (size_t)mc->d_model * ((size_t)mc->padded_vocab > 2 * wide ? (size_t)mc->padded_vocab : 2 * wide);
            const size_t pack = bmax * 2;
            p->bytes[PLAN_SCRATCH] += conv + pack;
            size_t used = strlen(p->what[PLAN_SCRATCH]);
            snprintf(p->what[PLAN_SCRATCH] + used, sizeof p->what[0] - used, " + bf16: fp32 copies %.2f MiB (2 x logits + N x %zu, "
                     "est.), packed B %.2f MiB", mib(conv), wide, mib(pack));
        }
    } else {
        size_t slots = 0;
        if (o->this_backend) {
            slots = ops_scratch_bytes(&ss);
        } else {
            size_t slot[CUDA_SCRATCH_COUNT];
            CudaDeviceFacts f = {cuda_cub_sort_estimate(N), o->smem_optin, 0, lay.act_bytes, 0};
            const char* e = getenv("GATEDGPT_GDN_STATE");
            f.gdn_state_global = e && strcmp(e, "global") == 0;
            e = getenv("GATEDGPT_GDN_CHUNK");
            f.gdn_recurrent = e && strcmp(e, "recurrent") == 0;
            cuda_scratch_plan(&ss, &f, slot);
            slots = scratch_alloc_bytes(CUDA_LT_WORKSPACE_BYTES, al);
            for (int i = 0; i < CUDA_SCRATCH_COUNT; i++)
                if (slot[i]) slots += scratch_alloc_bytes(slot[i], al);
        }
        p->bytes[PLAN_SCRATCH] = slots;
        snprintf(p->what[PLAN_SCRATCH], sizeof p->what[0], "the scratch slots at this step's sizes and cuBLASLt's %.0f MiB workspace%s%s",
                 mib(CUDA_LT_WORKSPACE_BYTES), o->this_backend ? " (CUB asked)" : " (CUB's sort storage estimated: 8 B/token + 1 MiB)",
                 lay.attn_impl == OPS_ATTN_CUDNN ? "; not counted: cuDNN's workspace (attn_impl = cudnn)" : "");
    }

    // ---- communication (train/comm.h, train/dist.h) ----
    const size_t dist_host = dist_host_bytes(n, P);
    if (!cuda) {
        size_t held = 0, temp = 0;
        // one receive buffer, the largest shard reduced: the dense one, or (replicas) the experts'
        const size_t rshard = P / EPP > 1 && xe - xs > shi - slo ? xe - xs : shi - slo;
        comm_reduce_scatter_bytes(P, nd, rshard, &held, &temp);
        // MPI's temporaries live inside the reduce-scatter, after the backward has freed the
        // kernels' temporaries: the heap reuses that memory, so only the excess over the
        // scratch line adds to the peak
        size_t excess = temp > p->bytes[PLAN_SCRATCH] ? temp - p->bytes[PLAN_SCRATCH] : 0;
        p->bytes[PLAN_COMM] = held + dist_host + excess;
        if (P > 1)
            snprintf(p->what[PLAN_COMM], sizeof p->what[0], "the reduce-scatter's receive shard (%.2f MiB), the norm chunks (%.2f MiB), "
                     "MPI's transient 2 x %.2f MiB beyond the scratch it reuses (%.2f MiB)", mib(held), mib(dist_host), mib(nd * 4), mib(excess));
        else
            snprintf(p->what[PLAN_COMM], sizeof p->what[0], "one process: nothing exchanged; the norm's chunk sums (%.2f MiB)", mib(dist_host));
    } else {
        p->bytes[PLAN_COMM] = 0;
        snprintf(p->what[PLAN_COMM], sizeof p->what[0], "%s", P > 1 ? "NCCL reduces the gradient arena in place: no buffer of ours "
                 "(NCCL's own: the runtime line)" : "one process: nothing exchanged");
    }

    // ---- the sampler's KV cache and the probe's buffers, beyond the training arena ----
    size_t kv_extra = 0, probe_extra = 0, kvb = 0;
    if (cfg->log.sample_every > 0) {
        // sample_generate swaps the arena for a 1 x T one (T at most seq_len) and adds a cache
        GptActsBytes ab1;
        gpt_activation_bytes(mc, 1, T, &lay, &ab1);
        kvb = kv_cache_bytes(mc, 1, T, 0, T, 0, KV_POS_ORIGINAL);
        if (ab1.held + kvb > ab.held) kv_extra = ab1.held + kvb - ab.held;
    }
    if (cfg->metrics.probe_every > 0 && ss.n_linear > 0) {
        size_t pr[2];
        probe_gdn_allocs(&ss.gdn, pr);
        probe_extra = scratch_alloc_bytes(pr[0], al) + scratch_alloc_bytes(pr[1], al);
    }
    p->bytes[PLAN_KV] = kv_extra > probe_extra ? kv_extra : probe_extra;
    int w = snprintf(p->what[PLAN_KV], sizeof p->what[0], "training keeps none");
    if (cfg->log.sample_every > 0)
        w += snprintf(p->what[PLAN_KV] + w, sizeof p->what[0] - (size_t)w, "; sampling's 1 x %d cache (%.2f MiB) and 1 x %d arena "
                      "exceed the training arena by %.2f MiB", T, mib(kvb), T, mib(kv_extra));
    if (probe_extra)
        snprintf(p->what[PLAN_KV] + w, sizeof p->what[0] - (size_t)w, "; the probe's delta-rule buffers: %.2f MiB", mib(probe_extra));

    // ---- host: token batches, the mapped shards (train_gpt.c setup_state, data/shard.c) ----
    int ntr = 0, nva = 0;
    size_t tr = largest_file(cfg->data.train_glob, &ntr);
    size_t va = cfg->log.val_every > 0 ? largest_file(cfg->data.val_glob, &nva) : 0;
    size_t perm = cfg->data.shuffle && tr > 1024 ? (tr - 1024) / 2 / (size_t)T * sizeof(int64_t) : 0;
    size_t batches = 4 * N * sizeof(int) + N * sizeof(float);
    p->bytes[PLAN_HOST] = batches + tr + va + perm + (cuda ? dist_host : 0);
    snprintf(p->what[PLAN_HOST], sizeof p->what[0], "token batches and the loss copy (%.2f MiB), the largest train shard (%.2f MiB of %d) "
             "and val shard (%.2f MiB), mapped and read whole%s", mib(batches), mib(tr), ntr, mib(va),
             perm ? ", the shuffle order" : "");

    // ---- [checkpoint] async: the snapshot's host buffer, allocated at the first write and kept
    // (train/checkpoint.h checkpoint_snapshot_bytes): rank 0's weights and its AdamW m and v; an
    // expert shard's rank 0 holds the gathered whole model instead (malloc'd for each write) ----
    if (cfg->ckpt.async && cfg->ckpt.checkpoint_every > 0) {
        size_t whole = 0;
        if (EPP > 1) {
            ParamTable g;
            param_table_build(&g, mc);
            whole = g.total;
            param_table_free(&g);
        }
        const size_t mom = (hi - lo) + (xhi - xlo);
        p->bytes[PLAN_SNAPSHOT] = checkpoint_snapshot_bytes(EPP > 1 ? 0 : n, mom) + whole * sizeof(float);
        snprintf(p->what[PLAN_SNAPSHOT], sizeof p->what[0], "[checkpoint] async: rank 0's copy of the %s (%zu x 4 bytes) and "
                 "of its AdamW m and v (2 x %zu x 4 bytes), %s host memory", EPP > 1 ? "gathered whole model" : "weights",
                 EPP > 1 ? whole : n, mom, cuda ? "pinned" : "in");
    }

    // ---- runtime ----
    if (!cuda) {
        const size_t xsmm = cpu_small_gemm_persistent(&ss);   // the delta rule's small-GEMM JIT, when it runs
        p->bytes[PLAN_RUNTIME] = o->runtime_rss + cpu_blas_persistent() + xsmm;
        char lx[80] = "";
        if (xsmm) snprintf(lx, sizeof lx, " + LIBXSMM's registry and code (allowance %.0f MiB)", mib(xsmm));
        snprintf(p->what[PLAN_RUNTIME], sizeof p->what[0], "libraries, OpenMP, MPI, the config: this process's resident memory at the "
                 "plan (measured, %.1f MiB) + the GEMM library's code (allowance %.0f MiB)%s", mib(o->runtime_rss),
                 mib(cpu_blas_persistent()), lx);
    } else {
        p->bytes[PLAN_RUNTIME] = PLAN_CUDA_CONTEXT_ALLOWANCE + (P > 1 ? PLAN_NCCL_ALLOWANCE : 0);
        snprintf(p->what[PLAN_RUNTIME], sizeof p->what[0], "allowance, not measured: the CUDA context and cuBLAS (512 MiB)%s",
                 P > 1 ? ", NCCL's buffers (512 MiB)" : "");
    }

    // what counts against the device, what is exact
    for (int i = 0; i < PLAN_LINES; i++) {
        p->on_device[i] = !cuda || (i != PLAN_HOST && i != PLAN_SNAPSHOT);
        p->exact[i] = i <= PLAN_BACKWARD || i == PLAN_SNAPSHOT || (cuda && i == PLAN_SCRATCH && o->this_backend) || (cuda && i == PLAN_COMM);
    }
    for (int i = 0; i < PLAN_LINES; i++) {
        if (p->on_device[i]) p->total += p->bytes[i];
        else p->host_total += p->bytes[i];
    }
    return 0;
}

int plan_fits(const Plan* p, const PlanOptions* o) {
    double need = (double)p->total * (o->device_shared ? o->nproc : 1);
    return need <= (double)o->device_bytes;
}

int plan_largest_batch(const Config* cfg, const PlanOptions* o) {
    Plan p;
    int lo = 0, hi = 1;   // lo fits (0: nothing), hi is the next to try
    while (hi <= (1 << 22)) {
        if (plan_build(cfg, hi, o, &p) != 0 || !plan_fits(&p, o)) break;
        lo = hi;
        hi *= 2;
    }
    if (hi > (1 << 22)) return lo;
    while (hi - lo > 1) {   // lo fits, hi does not
        int mid = lo + (hi - lo) / 2;
        if (plan_build(cfg, mid, o, &p) == 0 && plan_fits(&p, o)) lo = mid; else hi = mid;
    }
    return lo;
}

static const char* LINE_NAMES[PLAN_LINES] = {"weights", "master", "grads", "adamw", "activations", "logits",
                                             "backward", "expert rows", "kv cache", "scratch", "comm", "host", "snapshot",
                                             "runtime"};

void plan_print(const Config* cfg, const Plan* p, const PlanOptions* o, FILE* f) {
    const int cuda = !plan_layout_is_cpu(o->layout);
    fprintf(f, "\nmemory plan: %s layout, %d process%s, zero_stage %d, batch_size %d x seq_len %d, per process\n",
            plan_layout_name(o->layout), p->nproc, p->nproc == 1 ? "" : "es", p->zero_stage, p->B, p->T);
    fprintf(f, "  %-12s %16s %10s  %s\n", "line", "bytes", "GiB", "what");
    for (int i = 0; i < PLAN_LINES; i++) {
        if (!p->on_device[i] || (i == PLAN_SNAPSHOT && !p->bytes[i])) continue;   // snapshot: only with [checkpoint] async
        fprintf(f, "  %-12s %16zu %10.3f  %s%s\n", LINE_NAMES[i], p->bytes[i], p->bytes[i] / 1073741824.0,
                p->exact[i] ? "" : "~ ", p->what[i]);
    }
    fprintf(f, "  %-12s %16zu %10.3f  %s\n", "total", p->total, p->total / 1073741824.0,
            cuda ? "on the GPU, per process" : "resident memory, per process (the peak of a step)");
    if (cuda)
        fprintf(f, "  %-12s %16zu %10.3f  ~ host, not on the GPU: %s\n", LINE_NAMES[PLAN_HOST], p->bytes[PLAN_HOST],
                p->bytes[PLAN_HOST] / 1073741824.0, p->what[PLAN_HOST]);
    if (cuda && p->bytes[PLAN_SNAPSHOT])
        fprintf(f, "  %-12s %16zu %10.3f  host, not on the GPU: %s\n", LINE_NAMES[PLAN_SNAPSHOT], p->bytes[PLAN_SNAPSHOT],
                p->bytes[PLAN_SNAPSHOT] / 1073741824.0, p->what[PLAN_SNAPSHOT]);
    fprintf(f, "  (~: a measurement or an allowance; the other lines are the allocations' own sizes)\n");
    const double need = (double)p->total * (o->device_shared ? o->nproc : 1);
    if (o->device_shared)
        fprintf(f, "device: %s: %zu bytes (%.2f GiB), shared by the %d process%s on this machine: %d x %.2f GiB = %.2f GiB\n",
                o->device_name, o->device_bytes, o->device_bytes / 1073741824.0, o->nproc, o->nproc == 1 ? "" : "es",
                o->nproc, p->total / 1073741824.0, need / 1073741824.0);
    else
        fprintf(f, "device: %s: %zu bytes (%.2f GiB) per process\n", o->device_name, o->device_bytes, o->device_bytes / 1073741824.0);
    int fits = plan_fits(p, o);
    fprintf(f, "%s: %.2f GB needed, %.2f GB available (%.0f%%)\n", fits ? "fits" : "does not fit", need / 1e9,
            o->device_bytes / 1e9, 100.0 * need / (double)o->device_bytes);
    int bmax = plan_largest_batch(cfg, o);
    const long tps = cfg->train.tokens_per_step;
    const long per_b = (long)p->T * p->nproc;
    if (bmax == 0) {
        // what does not depend on the batch: only AdamW is sharded by more processes
        const double fixed = (double)(p->bytes[PLAN_WEIGHTS] + p->bytes[PLAN_MASTER] + p->bytes[PLAN_GRADS] + p->bytes[PLAN_ADAMW] +
                                      p->bytes[PLAN_RUNTIME]) * (o->device_shared ? o->nproc : 1);
        if (fixed > (double)o->device_bytes)
            fprintf(f, "largest batch_size that fits: none: the parameters, gradients, AdamW state and runtime alone need %.2f GB "
                    "(more processes shrink only the AdamW line, and the fp32 master's in the bf16 layouts: zero_stage 1 shards nothing else)\n", fixed / 1e9);
        else
            fprintf(f, "largest batch_size that fits: none: batch_size %d needs %.2f GB of activations and buffers beyond the "
                    "%.2f GB of parameters and state (lower seq_len; activation recomputation is not implemented yet)\n",
                    p->B, (need - fixed) / 1e9, fixed / 1e9);
    } else if (strncmp(config_origin(cfg, "train", "tokens_per_step"), "derived", 7) == 0 || tps % per_b != 0) {
        // tokens_per_step = 0 in the config: one micro-step of batch_size x seq_len x processes,
        // whatever batch_size is
        fprintf(f, "largest batch_size that fits: %d (tokens_per_step derived: then %ld tokens/step)\n", bmax, (long)bmax * per_b);
    } else {
        // tokens_per_step = B x T x nproc x grad_accum: the batch sizes that keep it divide tps / (T nproc)
        long q = tps / per_b;
        int keep = 0;
        for (long b = bmax; b >= 1; b--) if (q % b == 0) { keep = (int)b; break; }
        fprintf(f, "largest batch_size that fits: %d; keeping tokens_per_step = %ld: batch_size %d (grad_accum %ld)%s\n", bmax,
                tps, keep, q / keep, bmax > keep ? " (a larger one needs tokens_per_step set to a multiple of batch_size x seq_len x processes)" : "");
    }
}
