// model/gpt.c: forward and backward orchestration of the whole network over kernels/ops.h.
// No backend code here: every computation is an ops_* call.
#include "gpt.h"
#include "deltanet.h"
#include "doc_mask.h"
#include "../kernels/attn_gate.h"   // attn_gate_at_sdpa
#include "../kernels/scratch.h"     // scratch_alloc_bytes: what the backend holds of an allocation
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static OpsNormKind norm_kind(const ModelConfig* c) {
    return c->norm == NORM_LAYERNORM ? OPS_LAYERNORM : OPS_RMSNORM;
}

void gpt_build(GPT* m, const ModelConfig* cfg, unsigned long long seed) { gpt_build_ep(m, cfg, seed, 1, 0); }

void gpt_build_ep(GPT* m, const ModelConfig* cfg, unsigned long long seed, int ep_size, int ep_rank) {
    gpt_build_shard(m, cfg, seed, ep_size, ep_rank, 0, (size_t)-1);
}

// weights_bind_at for a sharded master: an fp32-read tensor at its packed copy in params_f32,
// any other at the same offset of grads (a key gpt_act_w maps to the compute copy)
static float* sharded_at(void* ctx, const ParamInfo* p) {
    GPT* m = (GPT*)ctx;
    for (int k = 0; k < m->nf32; k++)
        if (p->offset >= m->f32[k][0] && p->offset < m->f32[k][1])
            return m->params_f32 + m->f32_at[k] + (p->offset - m->f32[k][0]);
    return m->grads + p->offset;
}

void gpt_build_shard(GPT* m, const ModelConfig* cfg, unsigned long long seed, int ep_size, int ep_rank,
                     size_t lo, size_t hi) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->doc_eot = -1;   // attention within documents: off (gpt_set_doc_mask)
    param_table_build_ep(&m->table, cfg, ep_size, ep_rank);
    const size_t total = m->table.total;
    // any range but (0, SIZE_MAX) is a shard, even the whole arena (a process that got every
    // chunk still takes the sharded path, as the others do)
    const int sharded = !(lo == 0 && hi == (size_t)-1);
    if (hi > total) hi = total;
    if (lo > hi) lo = hi;
    m->master_lo = lo;
    m->master_hi = hi;
    if (sharded && OPS_ACT_IS_FLOAT) {
        fprintf(stderr, "error: gpt_build_shard: a sharded fp32 master needs a bf16 compute copy (this build's GEMMs read the master)\n");
        exit(1);
    }
    m->params = ops_malloc(sharded ? gpt_master_allocs(&m->table, lo, hi, (size_t[2]){0, 0}) : total * sizeof(float));
    m->grads = ops_malloc(total * sizeof(float));
    if (sharded) {
        // the fp32-read tensors, packed whole; each range at a 64-float boundary (256 bytes,
        // the CUDA allocator's granularity) as the tensors are in the arena
        m->f32 = malloc((size_t)(m->table.n > 0 ? m->table.n : 1) * sizeof(*m->f32));
        m->f32_at = malloc((size_t)(m->table.n > 0 ? m->table.n : 1) * sizeof(size_t));
        if (!m->f32 || !m->f32_at) { fprintf(stderr, "error: out of host memory (gpt_build_shard)\n"); exit(1); }
        m->nf32 = gpt_fp32_ranges(&m->table, m->f32);
        size_t at = 0;
        for (int k = 0; k < m->nf32; k++) {
            m->f32_at[k] = at;
            at += gpt_fp32_packed(m->f32[k][1] - m->f32[k][0]);
        }
        size_t req[2];
        gpt_master_allocs(&m->table, lo, hi, req);
        m->params_f32 = ops_malloc(req[1]);
    }
    // the whole init stream on the host (the same bits on every process and shard layout), of
    // which only the held floats go to the backend
    float* host = calloc(total, sizeof(float));
    if (!host) { fprintf(stderr, "error: out of memory for %zu parameters\n", total); exit(1); }
    params_init(host, &m->table, cfg, seed);
    gpt_params_from_host(m, host);
    free(host);
    if (sharded) weights_bind_at(&m->w, sharded_at, m, &m->table, cfg);
    else weights_bind(&m->w, m->params, &m->table, cfg);
    // the GEMMs' copy of the weights: its own bf16 arena, or the fp32 params themselves
    m->seed = seed;
    m->params_act = OPS_ACT_IS_FLOAT ? (act_t*)m->params : ops_malloc(m->table.total * sizeof(act_t));
    gpt_params_changed(m, 0);
    weights_bind(&m->g, m->grads, &m->table, cfg);
    // each layer's range of the arena (its tensors are named h.L.*), for gpt_backward's
    // grads_ready hook; a layer whose tensors are not one contiguous block reports nothing.
    // An expert-parallel shard's experts are not in it (they sit after the dense region and are
    // reduced over their replicas, train/dist.h).
    m->layer_lo = calloc((size_t)cfg->n_layer, sizeof(size_t));
    m->layer_hi = calloc((size_t)cfg->n_layer, sizeof(size_t));
    for (int l = 0; l < cfg->n_layer; l++) {
        char prefix[24];
        int plen = snprintf(prefix, sizeof prefix, "h.%d.", l);
        size_t lo = (size_t)-1, hi = 0, sum = 0;
        for (int i = 0; i < m->table.n; i++) {
            const ParamInfo* p = &m->table.p[i];
            if (strncmp(p->name, prefix, (size_t)plen) != 0) continue;
            if (p->expert_n && m->table.ep_size > 1) continue;
            if (p->offset < lo) lo = p->offset;
            if (p->offset + p->numel > hi) hi = p->offset + p->numel;
            sum += p->numel;
        }
        if (sum > 0 && hi - lo == sum) { m->layer_lo[l] = lo; m->layer_hi[l] = hi; }
    }
    m->moe_stats = calloc((size_t)cfg->n_layer, sizeof(MoeStats));
    for (int l = 0; l < cfg->n_layer; l++)
        moe_stats_init(&m->moe_stats[l], config_layer_is_moe(cfg, l) ? cfg->moe.n_expert : 0);
}

// The activation arenas of gpt_alloc_acts. With allocate = 0 only their sizes are counted, for
// the layout `lay` (which may be another build's: the planner's), into *out, and m is left as
// it was; with allocate = 1 (lay: this build's layout) they are allocated and handed out.
static void acts_plan(GPT* m, int B, int T, const GptLayout* lay, GptActsBytes* out, int allocate);

void gpt_layout_this_build(GptLayout* lay, OpsAttnImpl attn_impl) {
    memset(lay, 0, sizeof *lay);
    lay->act_bytes = (int)sizeof(act_t);
    lay->alloc_align = ops_alloc_align();
    lay->attn_impl = attn_impl;
    lay->recompute = RECOMPUTE_NONE;
    lay->gdn_keeps_saved = ops_gdn_keeps_saved();
}

void gpt_alloc_acts(GPT* m, int B, int T) {
    GptLayout lay;
    GptActsBytes ab;
    gpt_layout_this_build(&lay, m->attn_impl);
    lay.recompute = m->recompute;
    acts_plan(m, B, T, &lay, &ab, 1);
}

void gpt_activation_bytes(const ModelConfig* c, int B, int T, const GptLayout* lay, GptActsBytes* out) {
    GPT tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.cfg = *c;
    tmp.attn_impl = lay->attn_impl;
    acts_plan(&tmp, B, T, lay, out, 0);
}

size_t gpt_acts_bytes(const ModelConfig* c, int B, int T, RecomputeKind recompute) {
    GptLayout lay;
    GptActsBytes ab;
    gpt_layout_this_build(&lay, OPS_ATTN_FUSED);
    lay.recompute = recompute;
    gpt_activation_bytes(c, B, T, &lay, &ab);
    return ab.requested;
}

void gpt_step_shape(const ModelConfig* c, int B, int T, OpsAttnImpl attn_impl, size_t n_params, int threads,
                    OpsStepShape* s) {
    memset(s, 0, sizeof *s);
    s->B = B;
    s->T = T;
    s->d_model = c->d_model;
    for (int l = 0; l < c->n_layer; l++) {
        if (config_layer_is_linear(c, l)) s->n_linear++; else s->n_attn++;
        if (config_layer_is_moe(c, l)) s->n_moe++;
    }
    s->attn = config_attn_shape(c, B, T, attn_impl);
    if (s->n_linear) s->gdn = config_gdn_shape(c, B, T);
    s->conv_kernel = c->linear_conv_kernel;
    s->n_expert = c->moe.n_expert;
    s->n_params = n_params;
    s->threads = threads;
}

void gpt_param_allocs(size_t n_params, int act_bytes, size_t req[GPT_PARAM_ALLOCS]) {
    req[GPT_ALLOC_MASTER] = n_params * sizeof(float);
    req[GPT_ALLOC_GRADS] = n_params * sizeof(float);
    // fp32 act_t: the GEMMs read the fp32 parameters themselves
    req[GPT_ALLOC_WEIGHTS] = act_bytes == (int)sizeof(float) ? 0 : n_params * (size_t)act_bytes;
}

// Activation recomputation ([train] recompute; docs/architecture.md "Activation recomputation").
// Each tensor of a layer's LayerActs has a class:
//   ACT_ROUTE  an MoE layer's routing: the router's outputs and the dispatch plan. Always kept:
//              recomputing them would run the router's reduction over processes and its
//              statistics again; they are small (2E + k + 1 floats and 3k ints a token).
//   ACT_HEAVY  outputs of the GEMMs, the attention and the delta rule (and the tensors the probe
//              reads). Kept unless recompute = full.
//   ACT_CHEAP  norm outputs and their statistics, SwiGLU's output, the experts' activations and
//              their gathered input: one elementwise pass each. Kept only when recompute = none.
// A tensor that is not kept lives in ONE set of buffers shared by all layers; gpt_backward
// recomputes it there (gpt_layer_forward) just before the layer's backward. Always kept besides:
// each layer's input m->res[l] (the residual stream) and everything outside the layers.
enum { ACT_ROUTE, ACT_HEAVY, ACT_CHEAP };
static int acts_kept(RecomputeKind rc, int cls) {
    return cls == ACT_ROUTE || rc == RECOMPUTE_NONE || (rc == RECOMPUTE_SELECTIVE && cls == ACT_HEAVY);
}

static void acts_plan(GPT* m, int B, int T, const GptLayout* lay, GptActsBytes* out, int allocate) {
    const ModelConfig* c = &m->cfg;
    memset(out, 0, sizeof *out);
    if (allocate && (lay->act_bytes != (int)sizeof(act_t) || lay->alloc_align != ops_alloc_align())) {
        fprintf(stderr, "error: gpt_alloc_acts: a layout of %d-byte act_t, not this build's %d\n", lay->act_bytes, (int)sizeof(act_t));
        exit(1);
    }
    if (allocate && m->acts) {
        ops_free(m->acts); if (!OPS_ACT_IS_FLOAT) ops_free(m->aacts);
        ops_free(m->iacts); ops_free(m->idx); free(m->res); free(m->layer);
    }
    OpsAttnShape shape = config_attn_shape(c, B, T, lay->attn_impl);
    const OpsAttnShape* s = &shape;
    if (allocate) { m->B = B; m->T = T; m->attn = shape; }
    const RecomputeKind rc = lay->recompute;

    size_t N = (size_t)B * T, d = c->d_model, L = c->n_layer, F = c->d_ff;
    size_t Hd = (size_t)c->n_head * c->head_dim, KVd = (size_t)c->n_kv_head * c->head_dim;
    size_t QKVG = attn_shape_qkv_cols(s), Vp = c->padded_vocab;
    size_t Fin = c->mlp == MLP_SWIGLU ? 2 * F : F;
    int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    int ln = c->norm == NORM_LAYERNORM;
    // MoE sizes (docs/architecture.md): S = N*k routed slots
    const MoeConfig* mc = &c->moe;
    size_t E = mc->n_expert, K = mc->top_k, S = N * K, Fe = mc->d_expert, Fs = mc->d_shared_expert;
    size_t sw = c->mlp == MLP_SWIGLU ? 2 : 1;
    // expert parallelism: the experts' rows are those received from the P group members, in
    // buffers sized from the exchanged counts at each forward (model/moe.h MoeEpRows, outside
    // these arenas): none here. The plan (allocate = 0) counts them at balanced routing, S rows
    // a member (the group's P*S slots over P members), capped by a capacity C per expert and
    // process (each of this member's El experts takes at most C rows from each of the P
    // members: E * C)
    size_t EP = mc->expert_parallel > 1 ? (size_t)mc->expert_parallel : 1, SR = S;
    // a model that holds every expert (gpt_build: the tools, a checkpoint of any P) computes them
    // all itself: the P = 1 layout, whatever its config's expert_parallel
    if (allocate && m->table.ep_size <= 1) EP = 1;
    if (EP > 1 && mc->capacity_factor > 0.0f && E * (size_t)moe_capacity(mc, (int)N) < SR)
        SR = E * (size_t)moe_capacity(mc, (int)N);
    int any_moe = 0, any_dense = 0, any_attn = 0, any_linear = 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (config_layer_is_moe(c, l)) any_moe = 1; else any_dense = 1;
        if (config_layer_is_linear(c, l)) any_linear = 1; else any_attn = 1;
    }
    // Gated DeltaNet sizes (model/params.h): Kd = Hk*dk, Vd = Hv*dv, Cc = 2*Kd + Vd
    const size_t Hk = c->linear_n_k_head, Hv = c->linear_n_v_head;
    const size_t Kd = Hk * c->linear_k_head_dim, Vd = Hv * c->linear_v_head_dim, Cc = 2 * Kd + Vd;
    if (allocate) m->gdn = config_gdn_shape(c, B, T);
    // the chunked delta rule's Vn and chunk-start states for its backward, where the backend
    // keeps them (ops.h): cpu_gdn_chunk_saved_floats (kernels/scratch.h)
    const size_t gdn_saved = lay->gdn_keeps_saved ? cpu_gdn_chunk_saved_floats((size_t)B, (size_t)T, Hv,
                                 (size_t)c->linear_k_head_dim, (size_t)c->linear_v_head_dim, (size_t)c->linear_chunk) : 0;

    // Two passes over the same list: the first counts elements, the second hands out pointers.
    // TAKE: fp32 tensors; TAKEA: act_t tensors (their own arena when act_t is bf16, else the
    // fp32 arena); ACT_OF: the act_t copy of an fp32 tensor for a GEMM (the tensor itself when
    // act_t is fp32); TAKEI: integers. Every tensor starts 64-byte aligned (16 fp32 elements,
    // 32 bf16). Each adds its aligned bytes to out->by[cat], the category being filled (the
    // planner's lines: saved for the backward, logits and loss, the backward's buffers).
    float* base = NULL;
    act_t* abase = NULL;
    int* ibase = NULL;
    const size_t ab = (size_t)lay->act_bytes, aalign = 64 / ab;
    const int split = ab != sizeof(float);
    size_t off = 0, aoff = 0, ioff = 0;
    int cat = GPT_ACTS_SAVED;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && !allocate) break;   // counted: nothing to hand out
        off = 0; aoff = 0; ioff = 0;
        memset(out->by, 0, sizeof out->by);
#define TAKE(ptr, count) do { size_t n_ = ((count) + 15) & ~(size_t)15; (ptr) = base ? base + off : NULL; off += n_; \
        out->by[cat] += n_ * sizeof(float); } while (0)
#define TAKEA(ptr, count) do { \
        if (split) { size_t n_ = ((count) + aalign - 1) / aalign * aalign; (ptr) = abase ? abase + aoff : NULL; aoff += n_; \
                     out->by[cat] += n_ * ab; } \
        else { size_t n_ = ((count) + 15) & ~(size_t)15; (ptr) = base ? (act_t*)(base + off) : NULL; off += n_; \
               out->by[cat] += n_ * sizeof(float); } } while (0)
#define ACT_OF(aptr, fptr, count) do { if (split) TAKEA(aptr, count); else (aptr) = (act_t*)(fptr); } while (0)
#define TAKEI(ptr, count) do { size_t n_ = ((count) + 15) & ~(size_t)15; (ptr) = ibase ? ibase + ioff : NULL; ioff += n_; \
        out->by[cat] += n_ * sizeof(int); } while (0)
        if (pass == 1) {
            m->res = calloc(L + 1, sizeof(float*));
            m->layer = calloc(L, sizeof(LayerActs));
        }
        // ---- what the backward reads, kept from the forward (GPT_ACTS_SAVED) ----
        cat = GPT_ACTS_SAVED;
        for (size_t l = 0; l <= L; l++) { float* p; TAKE(p, N * d); if (pass) m->res[l] = p; }
        // The layers' tensors, each with its class (acts_kept): a layer's own buffer where the
        // recompute mode keeps it, else the shared set's. l = -1 lays out the shared set: the
        // tensors some layer does not keep, for every kind of layer the model has (a hybrid or
        // interleaved MoE model shares one set between its kinds of layer, each its own fields).
        LayerActs sh = {0};
#define LT(cls, f, count) do { if (acts_kept(rc, cls) == (l >= 0)) TAKE(a.f, count); else if (l >= 0) a.f = sh.f; } while (0)
#define LTA(cls, f, count) do { if (acts_kept(rc, cls) == (l >= 0)) TAKEA(a.f, count); else if (l >= 0) a.f = sh.f; } while (0)
#define LTI(cls, f, count) do { if (acts_kept(rc, cls) == (l >= 0)) TAKEI(a.f, count); else if (l >= 0) a.f = sh.f; } while (0)
        for (long l = -1; l < (long)L; l++) {
            LayerActs a = {0};
            const int linear = l < 0 ? any_linear : config_layer_is_linear(c, (int)l);
            const int attn = l < 0 ? any_attn : !linear;
            const int moe = l < 0 ? any_moe : config_layer_is_moe(c, (int)l);
            const int dense = l < 0 ? any_dense : !moe;
            LTA(ACT_CHEAP, ln1, N * d); if (ln) LT(ACT_CHEAP, ln1_mean, N); LT(ACT_CHEAP, ln1_rstd, N);
            if (linear) {
                LT(ACT_HEAVY, g_xqkv, N * Cc); LT(ACT_HEAVY, g_pre, N * Cc); LT(ACT_HEAVY, g_xc, N * Cc);
                LT(ACT_HEAVY, g_qk, N * 2 * Kd); LT(ACT_HEAVY, g_rinv, N * 2 * Hk);
                LT(ACT_HEAVY, g_z, N * Vd); LT(ACT_HEAVY, g_ba, N * 2 * Hv); LT(ACT_HEAVY, g_g, N * Hv);
                LT(ACT_HEAVY, g_beta, N * Hv); LT(ACT_HEAVY, g_o, N * Vd);
                if (gdn_saved) LT(ACT_HEAVY, g_gdn_saved, gdn_saved);
                LT(ACT_CHEAP, g_rstd, N * Hv); LT(ACT_CHEAP, g_on, N * Vd);
                if (split) LTA(ACT_CHEAP, g_on_act, N * Vd); else a.g_on_act = (act_t*)a.g_on;
            }
            if (attn) {
                LTA(ACT_HEAVY, qkv, N * QKVG); LTA(ACT_HEAVY, q, N * Hd); LTA(ACT_HEAVY, k, N * KVd);
                LTA(ACT_HEAVY, v, N * KVd);
                if (c->qk_norm) LT(ACT_HEAVY, qk_rstd, N * (c->n_head + c->n_kv_head));
                LTA(ACT_HEAVY, y, N * Hd);
                if (sgate) LTA(ACT_HEAVY, yg, N * Hd); else a.yg = a.y;
                LT(ACT_HEAVY, lse, N * c->n_head);
            }
            LT(ACT_HEAVY, res_mid, N * d);
            LTA(ACT_CHEAP, ln2, N * d); if (ln) LT(ACT_CHEAP, ln2_mean, N); LT(ACT_CHEAP, ln2_rstd, N);
            if (dense) {
                // GELU's output comes from the GEMM's fused epilogue (ops_matmul_gelu_forward):
                // no separate op gives its bits (bf16: rounded once from the fp32 product), so it
                // is kept like the GEMM's output; SwiGLU's is recomputed by ops_swiglu_forward
                LTA(ACT_HEAVY, mlp_pre, N * Fin);
                LTA(c->mlp == MLP_SWIGLU ? ACT_CHEAP : ACT_HEAVY, mlp_act, N * F);
            }
            if (moe) {
                LT(ACT_ROUTE, router_logits, N * E); LT(ACT_ROUTE, router_probs, N * E);
                LT(ACT_ROUTE, router_lse, N); LT(ACT_ROUTE, topk_w, N * K);
                LTI(ACT_ROUTE, topk_idx, N * K); LTI(ACT_ROUTE, counts, E); LTI(ACT_ROUTE, offsets, E + 1);
                LTI(ACT_ROUTE, row_slot, S); LTI(ACT_ROUTE, slot_row, S);
                LTA(ACT_CHEAP, xp, S * d);
                if (EP == 1) { LTA(ACT_HEAVY, ep_pre, S * sw * Fe); LTA(ACT_CHEAP, ep_act, S * Fe); }
                // expert parallelism: yp holds rows the other members computed and sent back, so
                // it is kept like the routing (recomputing it would run the all-to-all again; the
                // received rows of each layer are kept anyway, GPT.moe_ep_rows)
                LTA(EP > 1 ? ACT_ROUTE : ACT_HEAVY, yp, S * d);
                if (EP > 1) LTI(ACT_ROUTE, ep_rc, E);
                if (mc->n_shared_expert) { LTA(ACT_HEAVY, sh_pre, N * sw * Fs); LTA(ACT_CHEAP, sh_act, N * Fs); }
                if (mc->shared_expert_gate) { LTA(ACT_HEAVY, sh_out, N * d); LT(ACT_HEAVY, sh_z, N); }
            }
            if (l < 0) sh = a;
            else if (pass) { a.res_in = m->res[l]; m->layer[l] = a; }
        }
#undef LT
#undef LTA
#undef LTI
        TAKEA(m->lnf, N * d); if (ln) TAKE(m->lnf_mean, N); TAKE(m->lnf_rstd, N);
        // ---- the logits and the loss (GPT_ACTS_LOGITS; the token ids are added below) ----
        cat = GPT_ACTS_LOGITS;
        TAKEA(m->logits, N * Vp); TAKE(m->losses, N); TAKE(m->lse, N);
        // ---- the backward's buffers, one set reused by every layer (GPT_ACTS_BACKWARD) ----
        cat = GPT_ACTS_BACKWARD;
        size_t dmax = d > Hd ? d : Hd;
        TAKE(m->dres, N * d); ACT_OF(m->dres_act, m->dres, N * d);
        TAKEA(m->dnorm, N * dmax);
        if (any_attn) {
            TAKEA(m->dqkv, N * QKVG);
            TAKEA(m->dq, N * Hd); TAKEA(m->dk, N * KVd); TAKEA(m->dv, N * KVd);
            TAKEA(m->dyg, N * Hd); TAKEA(m->dscratch, N * Hd);
        }
        if (any_linear) {
            TAKE(m->gd_on, N * Vd); ACT_OF(m->gd_on_act, m->gd_on, N * Vd);
            TAKE(m->gd_o, N * Vd);
            TAKE(m->gd_z, N * Vd); ACT_OF(m->gd_z_act, m->gd_z, N * Vd);
            TAKE(m->gd_qk, N * 2 * Kd); TAKE(m->gd_xc, N * Cc);
            TAKE(m->gd_xqkv, N * Cc); ACT_OF(m->gd_xqkv_act, m->gd_xqkv, N * Cc);
            TAKE(m->gd_g, N * Hv); TAKE(m->gd_beta, N * Hv);
            TAKE(m->gd_ba, N * 2 * Hv); ACT_OF(m->gd_ba_act, m->gd_ba, N * 2 * Hv);
            TAKEA(m->gd_tmp, N * d);
        }
        if (any_dense) { TAKEA(m->dmlp_pre, N * Fin); TAKEA(m->dmlp_act, N * F); }
        if (any_moe) {
            TAKE(m->d_router, N * E); ACT_OF(m->d_router_act, m->d_router, N * E);
            TAKE(m->d_topk_w, N * K); TAKE(m->aux_grad, E);
            TAKEA(m->d_yp, S * d);
            if (EP == 1) { TAKEA(m->d_ep_act, S * Fe); TAKEA(m->d_ep_pre, S * sw * Fe); }
            if (mc->n_shared_expert) { TAKEA(m->d_sh_act, N * Fs); TAKEA(m->d_sh_pre, N * sw * Fs); TAKEA(m->d_tmp, N * d); }
            if (mc->shared_expert_gate) { TAKEA(m->d_sh_out, N * d); TAKE(m->d_sh_z, N); ACT_OF(m->d_sh_z_act, m->d_sh_z, N); }
        }
#undef TAKE
#undef TAKEA
#undef ACT_OF
#undef TAKEI
        if (pass == 0 && allocate) {
            base = ops_malloc(off * sizeof(float));
            if (split) abase = ops_malloc((aoff ? aoff : 1) * sizeof(act_t));
            ibase = ops_malloc((ioff ? ioff : 1) * sizeof(int));
        }
    }
    // the allocations, as ops_malloc is asked for them: the fp32 arena, the act_t arena (bf16
    // layouts), the integer arena, the token ids and targets [2N]
    out->n_allocs = 0;
    out->alloc[out->n_allocs++] = off * sizeof(float);
    if (split) out->alloc[out->n_allocs++] = (aoff ? aoff : 1) * ab;
    out->alloc[out->n_allocs++] = (ioff ? ioff : 1) * sizeof(int);
    out->alloc[out->n_allocs++] = 2 * N * sizeof(int);
    out->by[GPT_ACTS_LOGITS] += 2 * N * sizeof(int);
    out->requested = off * sizeof(float) + aoff * ab + ioff * sizeof(int) + 2 * N * sizeof(int);
    // what the backend holds: each allocation rounded to its granularity; the rounding (and the
    // 1-element floor of an empty arena) is put on the backward's line, so that the lines add
    // up to the held bytes exactly
    out->held = 0;
    out->ep_rows = 0;
    size_t lines = 0;
    for (int i = 0; i < out->n_allocs; i++) out->held += scratch_alloc_bytes(out->alloc[i], lay->alloc_align);
    for (int i = 0; i < GPT_ACTS_CATS; i++) lines += out->by[i];
    out->by[GPT_ACTS_BACKWARD] += out->held - lines;
    if (EP > 1 && any_moe) {
        // expert parallelism's count-sized buffers (model/moe.h), at SR rows (balanced routing):
        // each MoE layer's received rows kept for its backward (xe, pre, act), and the shared
        // exchange scratch (send, recv, d_pre, d_act, the row maps); each ops_malloc'd alone
        size_t n_moe = 0;
        for (int l = 0; l < c->n_layer; l++) n_moe += config_layer_is_moe(c, l) ? 1 : 0;
        const size_t al = lay->alloc_align;
        size_t kept = scratch_alloc_bytes(SR * d * ab, al) + scratch_alloc_bytes(SR * sw * Fe * ab, al) +
                      scratch_alloc_bytes(SR * Fe * ab, al);
        size_t scr = 2 * scratch_alloc_bytes(SR * d * ab, al) + scratch_alloc_bytes(SR * sw * Fe * ab, al) +
                     scratch_alloc_bytes(SR * Fe * ab, al) + scratch_alloc_bytes((2 * SR + E / EP + 1) * sizeof(int), al);
        out->ep_rows = n_moe * kept + scr;
    }
    if (!allocate) return;
    m->acts = base;
    m->acts_floats = off;
    m->aacts = split ? abase : (act_t*)base;
    m->aacts_elems = aoff;
    m->acts_bytes = off * sizeof(float) + aoff * sizeof(act_t);
    m->iacts = ibase;
    m->iacts_ints = ioff;
    m->idx = ops_malloc(2 * N * sizeof(int));
    m->targets = m->idx + N;
}

void gpt_free(GPT* m) {
    ops_free(m->params); ops_free(m->grads);
    if (m->params_f32) ops_free(m->params_f32);
    free(m->f32); free(m->f32_at);
    if (m->acts) { ops_free(m->acts); if (!OPS_ACT_IS_FLOAT) ops_free(m->aacts); ops_free(m->iacts); ops_free(m->idx); }
    if (!OPS_ACT_IS_FLOAT) ops_free(m->params_act);
    free(m->res); free(m->layer);
    if (m->moe_stats) for (int l = 0; l < m->cfg.n_layer; l++) moe_stats_free(&m->moe_stats[l]);
    free(m->moe_stats);
    free(m->layer_lo); free(m->layer_hi);
    ops_free(m->doc_start);
    if (m->moe_ep_rows) for (int l = 0; l < m->cfg.n_layer; l++) moe_ep_rows_free(&m->moe_ep_rows[l]);
    free(m->moe_ep_rows);
    moe_ep_scratch_free(&m->moe_ep_scratch);
    weights_free(&m->w); weights_free(&m->g);
    param_table_free(&m->table);
    memset(m, 0, sizeof(*m));
}

void gpt_params_changed(GPT* m, long step) {
    m->params_act_stale = 1;
    // a different rounding seed per step, the same on every process and on resume
    m->params_act_seed = m->seed * 0x9e3779b97f4a7c15ull + (unsigned long long)step + 1;
}

void gpt_refresh_act_weights(GPT* m) {
    if (!m->params_act_stale) return;
    if (gpt_master_sharded(m)) {
        // the shard alone cannot refresh the whole copy: the processes round theirs and
        // all-gather (train/dist.h dist_gather_weights) after each change
        fprintf(stderr, "error: the compute copy of a sharded fp32 master is stale at a forward (no dist_gather_weights "
                "after the parameters changed)\n");
        exit(1);
    }
    ops_weights_to_act(m->params_act, m->params, m->table.total, m->params_act_seed);
    m->params_act_stale = 0;
}

void gpt_round_master_shard(GPT* m, size_t lo, size_t hi) {
    if (hi > lo)
        ops_weights_to_act_at(m->params_act + lo, m->params + (lo - m->master_lo), lo, hi - lo, m->params_act_seed);
    m->params_act_stale = 0;
}

int gpt_master_sharded(const GPT* m) { return m->params_f32 != NULL; }

void gpt_f32_from_shard(GPT* m) {
    for (int k = 0; k < m->nf32; k++) {
        const size_t a = m->f32[k][0] > m->master_lo ? m->f32[k][0] : m->master_lo;
        const size_t b = m->f32[k][1] < m->master_hi ? m->f32[k][1] : m->master_hi;
        if (a < b) ops_copy(m->params_f32 + m->f32_at[k] + (a - m->f32[k][0]), m->params + (a - m->master_lo), b - a);
    }
}

void gpt_params_from_host(GPT* m, const float* host) {
    ops_from_host(m->params, host + m->master_lo, (m->master_hi - m->master_lo) * sizeof(float));
    for (int k = 0; k < m->nf32; k++)
        ops_from_host(m->params_f32 + m->f32_at[k], host + m->f32[k][0], (m->f32[k][1] - m->f32[k][0]) * sizeof(float));
}

void gpt_master_to_host(const GPT* m, float* host, size_t lo, size_t hi) {
    if (hi > lo) ops_to_host(host, m->params + (lo - m->master_lo), (hi - lo) * sizeof(float));
}

size_t gpt_fp32_packed(size_t n) { return (n + 63) / 64 * 64; }

size_t gpt_master_allocs(const ParamTable* t, size_t lo, size_t hi, size_t req[2]) {
    size_t (*r)[2] = malloc((size_t)(t->n > 0 ? t->n : 1) * sizeof(*r));
    if (!r) { fprintf(stderr, "error: out of host memory (gpt_master_allocs)\n"); exit(1); }
    const int n = gpt_fp32_ranges(t, r);
    size_t packed = 0;
    for (int k = 0; k < n; k++) packed += gpt_fp32_packed(r[k][1] - r[k][0]);
    free(r);
    req[0] = (hi > lo ? hi - lo : 1) * sizeof(float);
    req[1] = (packed > 0 ? packed : 1) * sizeof(float);
    return req[0];
}

int gpt_fp32_ranges(const ParamTable* t, size_t (*r)[2]) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const ParamInfo* p = &t->p[i];
        const char* dot = strrchr(p->name, '.');
        const int f32 = p->ndim == 1 || strcmp(p->name, "wte") == 0 || strcmp(p->name, "wpe") == 0 ||
                        (dot && strcmp(dot, ".conv_w") == 0);
        if (!f32) continue;
        // merged across the alignment padding between tensors (< 16 floats, zeros on every process)
        if (n > 0 && r[n - 1][1] + 16 > p->offset) r[n - 1][1] = p->offset + p->numel;
        else { r[n][0] = p->offset; r[n][1] = p->offset + p->numel; n++; }
    }
    return n;
}

const act_t* gpt_act_w(GPT* m, const float* w) {
    if (!w) return NULL;
    gpt_refresh_act_weights(m);
    if (!gpt_master_sharded(m)) return m->params_act + (w - m->params);
    // a sharded master: an fp32-read tensor (the tied lm_head is wte) in its packed copy, any
    // other by its key in grads (sharded_at)
    for (int k = 0; k < m->nf32; k++) {
        const float* base = m->params_f32 + m->f32_at[k];
        if (w >= base && w < base + (m->f32[k][1] - m->f32[k][0])) return m->params_act + m->f32[k][0] + (w - base);
    }
    return m->params_act + (w - m->grads);
}

void gpt_logits_to_host(const GPT* m, float* dst, int n, int count) {
    const act_t* row = m->logits + (size_t)n * m->cfg.padded_vocab;
    if (OPS_ACT_IS_FLOAT) { ops_to_host(dst, row, (size_t)count * sizeof(float)); return; }
    act_t* tmp = malloc((size_t)count * sizeof(act_t));
    if (!tmp) { fprintf(stderr, "error: out of memory for %d logits\n", count); exit(1); }
    ops_to_host(tmp, row, (size_t)count * sizeof(act_t));
    for (int i = 0; i < count; i++) dst[i] = act_to_f32(tmp[i]);
    free(tmp);
}

void gpt_losses_to_host(const GPT* m, float* dst) {
    ops_to_host(dst, m->losses, (size_t)m->B * m->T * sizeof(float));
}

// MoE layer l over this model's tensors: the MoeLayerIO that model/moe.c computes with.
static MoeLayerIO moe_io(GPT* m, int l) {
    const LayerWeights* w = &m->w.layer[l];
    const LayerActs* a = &m->layer[l];
    MoeLayerIO io;
    memset(&io, 0, sizeof io);
    io.cfg = &m->cfg;
    io.N = m->B * m->T;
    io.w = (MoeWeightsAct){ gpt_act_w(m, w->router), gpt_act_w(m, w->moe_w_in), gpt_act_w(m, w->moe_w_out),
                            gpt_act_w(m, w->shared_w_in), gpt_act_w(m, w->shared_w_out),
                            gpt_act_w(m, w->shared_gate) };
    io.g = &m->g.layer[l];
    io.a = (MoeActs){ .ln2 = a->ln2, .router_logits = a->router_logits, .router_probs = a->router_probs,
                      .router_lse = a->router_lse, .topk_w = a->topk_w, .topk_idx = a->topk_idx,
                      .counts = a->counts, .offsets = a->offsets, .row_slot = a->row_slot,
                      .slot_row = a->slot_row, .xp = a->xp, .ep_pre = a->ep_pre, .ep_act = a->ep_act,
                      .yp = a->yp, .sh_pre = a->sh_pre, .sh_act = a->sh_act, .sh_out = a->sh_out,
                      .sh_z = a->sh_z, .ep_rc = a->ep_rc };
    io.b = (MoeBackwardBufs){ .dout = m->dres, .dout_act = m->dres_act, .dx = m->dnorm,
                              .d_router = m->d_router, .d_topk_w = m->d_topk_w, .d_sh_z = m->d_sh_z,
                              .aux_grad = m->aux_grad, .d_router_act = m->d_router_act,
                              .d_sh_z_act = m->d_sh_z_act, .d_yp = m->d_yp, .d_ep_act = m->d_ep_act,
                              .d_ep_pre = m->d_ep_pre, .d_sh_out = m->d_sh_out, .d_sh_act = m->d_sh_act,
                              .d_sh_pre = m->d_sh_pre, .d_tmp = m->d_tmp };
    io.stats = &m->moe_stats[l];
    io.reduce = m->moe_reduce;
    io.reduce_ctx = m->moe_reduce_ctx;
    io.ep = m->moe_ep;
    io.ep.scratch = &m->moe_ep_scratch;
    if (!m->moe_ep_rows) {   // the layers' count-sized row buffers (expert parallelism), grown at each forward
        m->moe_ep_rows = calloc((size_t)m->cfg.n_layer, sizeof(MoeEpRows));
        if (!m->moe_ep_rows) { fprintf(stderr, "error: out of host memory (MoE row buffers)\n"); exit(1); }
    }
    io.ep_rows = &m->moe_ep_rows[l];
    io.ep_shard = m->table.ep_size > 1 ? m->table.ep_size : 0;
    return io;
}

double moe_forward(GPT* m, int l, float* out) {
    MoeLayerIO io = moe_io(m, l);
    return moe_layer_forward(&io, out, RECOMPUTE_NONE);
}

void moe_backward(GPT* m, int l, float dloss) {
    MoeLayerIO io = moe_io(m, l);
    moe_layer_backward(&io, dloss);
}

// Gated DeltaNet layer l over this model's tensors: the DeltaNetLayerIO that model/deltanet.c
// computes with (the weights' act_t copies resolved here; with a KV cache, the states the
// sequence's earlier tokens left and where this forward's go)
static DeltaNetLayerIO deltanet_io(GPT* m, int l) {
    const ModelConfig* c = &m->cfg;
    const LayerWeights* w = &m->w.layer[l];
    const LayerWeights* g = &m->g.layer[l];
    const LayerActs* a = &m->layer[l];
    DeltaNetLayerIO io;
    memset(&io, 0, sizeof io);
    io.B = m->B;
    io.T = m->T;
    io.d = c->d_model;
    io.K = c->linear_conv_kernel;
    io.norm_eps = c->norm_eps;
    io.gate_act = (OpsGateAct)c->linear_gate_act;
    io.gdn = m->gdn;
    io.gdn.doc_start = m->attn.doc_start;   // the conv's and the delta rule's documents (NULL: off)
    io.w = (DeltaNetWeights){ .w_qkv = gpt_act_w(m, w->gdn_w_qkv), .w_z = gpt_act_w(m, w->gdn_w_z),
                              .w_ba = gpt_act_w(m, w->gdn_w_ba), .w_out = gpt_act_w(m, w->gdn_w_out),
                              .conv_w = w->gdn_conv_w, .A_log = w->gdn_A_log, .dt_bias = w->gdn_dt_bias,
                              .norm_w = w->gdn_norm_w };
    io.g = (DeltaNetGrads){ .w_qkv = g->gdn_w_qkv, .w_z = g->gdn_w_z, .w_ba = g->gdn_w_ba, .w_out = g->gdn_w_out,
                            .conv_w = g->gdn_conv_w, .A_log = g->gdn_A_log, .dt_bias = g->gdn_dt_bias,
                            .norm_w = g->gdn_norm_w };
    io.a = (DeltaNetActs){ .x = a->ln1, .xqkv = a->g_xqkv, .pre = a->g_pre, .xc = a->g_xc, .qk = a->g_qk,
                           .rinv = a->g_rinv, .z = a->g_z, .ba = a->g_ba, .g = a->g_g, .beta = a->g_beta,
                           .o = a->g_o, .saved = a->g_gdn_saved, .rstd = a->g_rstd, .on = a->g_on, .on_act = a->g_on_act };
    io.b = (DeltaNetBackwardBufs){ .dout = m->dres, .dout_act = m->dres_act, .dx = m->dnorm, .d_on = m->gd_on,
                                   .d_o = m->gd_o, .d_z = m->gd_z, .d_qk = m->gd_qk, .d_xc = m->gd_xc,
                                   .d_xqkv = m->gd_xqkv, .d_g = m->gd_g, .d_beta = m->gd_beta, .d_ba = m->gd_ba,
                                   .d_on_act = m->gd_on_act, .d_z_act = m->gd_z_act, .d_xqkv_act = m->gd_xqkv_act,
                                   .d_ba_act = m->gd_ba_act, .d_tmp = m->gd_tmp };
    io.res_in = a->res_in;
    io.res_mid = a->res_mid;
    if (m->kv) kv_cache_linear(m->kv, l, &io.conv_in, &io.conv_out, &io.state_in, &io.state_out);
    return io;
}

void moe_step_summary(const GPT* m, MoeStepSummary* s) {
    moe_summarize_step(m->moe_stats, m->cfg.n_layer, s);
}

void gpt_zero_grad(GPT* m) {
    ops_zero(m->grads, m->table.total);
    for (int l = 0; l < m->cfg.n_layer; l++) moe_stats_reset_step(&m->moe_stats[l]);
}

// Layer l: x_{l+1} = x_l + mixer(norm1(x_l)) + ffn(norm2(...)) over N = B*T tokens, x_l =
// m->res[l]. The one copy of the layer's forward, run in two ways:
//   redo = RECOMPUTE_NONE: the forward pass. Every tensor of m->layer[l], x_{l+1} = m->res[l+1],
//     and in an MoE layer the routing, its statistics and losses (returned: the layer's weighted
//     aux + z losses; 0 for a dense layer).
//   redo = RECOMPUTE_SELECTIVE / RECOMPUTE_FULL: the backward's recomputation (gpt_backward,
//     gpt_layer_recompute): the tensors that mode does not keep (acts_kept), from those it keeps,
//     by the same ops on the same inputs in the same order: the same bits as the forward pass.
//     Nothing else is written: not x_{l+1}, not the routing (the saved one is used), no
//     statistics and no reduction over processes (m->moe_reduce); returns 0.
static double gpt_layer_forward(GPT* m, int l, RecomputeKind redo) {
    const ModelConfig* c = &m->cfg;
    const int N = m->B * m->T, d = c->d_model, F = c->d_ff;
    const int Hd = c->n_head * c->head_dim, QKVG = ops_attn_qkv_cols(&m->attn);
    const int Fin = c->mlp == MLP_SWIGLU ? 2 * F : F;
    const OpsNormKind nk = norm_kind(c);
    const float eps = c->norm_eps;
    const int fwd = redo == RECOMPUTE_NONE;        // the forward pass: outputs, routing, statistics
    const int all = redo != RECOMPUTE_SELECTIVE;   // ACT_HEAVY too (the forward pass, or full)
    LayerWeights* w = &m->w.layer[l];
    LayerActs* a = &m->layer[l];
#define AW(w) gpt_act_w(m, (w))
    // X = norm1(x)
    ops_norm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->res_in, w->ln1_w, w->ln1_b, N, d, eps, nk);
    if (config_layer_is_linear(c, l)) {
        // Gated DeltaNet: x_mid = x + GDN(X) (model/deltanet.c)
        DeltaNetLayerIO io = deltanet_io(m, l);
        deltanet_forward(&io, redo);
    } else if (all) {
        // attention: [q|k|v|z] = X Wqkv^T; prep; sdpa (+gate); x_mid = x + yg Wo^T
        ops_matmul_bias_forward(a->qkv, a->ln1, AW(w->wqkv), AW(w->bqkv), N, d, QKVG);   // bqkv: [model] bias
        ops_attn_prep_forward(a->q, a->k, a->v, a->qk_rstd, a->qkv, w->qnorm_w, w->knorm_w, &m->attn);
        if (m->kv) kv_cache_attend(m->kv, l, a->y, a->yg, a->lse, a->q, a->k, a->v, a->qkv, &m->attn);
        else ops_attention_forward(a->y, a->yg, a->lse, a->q, a->k, a->v, a->qkv, &m->attn);
        ops_copy(a->res_mid, a->res_in, (size_t)N * d);
        if (w->bo) ops_bias_add_f32(a->res_mid, AW(w->bo), N, d);
        ops_matmul_forward_f32(a->res_mid, a->yg, AW(w->wo), N, Hd, d, 1);
    }
    // MLP: M = norm2(x_mid); x_{l+1} = x_mid + act(M W_in^T) W_out^T
    ops_norm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, w->ln2_w, w->ln2_b, N, d, eps, nk);
    float* out = m->res[l + 1];
    if (config_layer_is_moe(c, l)) {
        // MoE: x_{l+1} = x_mid + routed experts (+ shared expert) of M (model/moe.c)
        if (fwd) ops_copy(out, a->res_mid, (size_t)N * d);
        MoeLayerIO io = moe_io(m, l);
        return moe_layer_forward(&io, fwd ? out : NULL, redo);
    }
    if (c->mlp == MLP_SWIGLU) {
        if (all) ops_matmul_bias_forward(a->mlp_pre, a->ln2, AW(w->w_in), AW(w->b_in), N, d, Fin);
        ops_swiglu_forward(a->mlp_act, a->mlp_pre, N, F);
    } else if (all && !w->b_in) {   // GELU fused into the GEMM (a cuBLASLt epilogue on CUDA): both ACT_HEAVY
        ops_matmul_gelu_forward(a->mlp_pre, a->mlp_act, a->ln2, AW(w->w_in), N, d, F);
    } else if (all) {   // with a bias ([model] bias), unfused: pre = X W_in^T + b_in, then its GELU
        ops_matmul_bias_forward(a->mlp_pre, a->ln2, AW(w->w_in), AW(w->b_in), N, d, F);
        ops_gelu_forward(a->mlp_act, a->mlp_pre, (size_t)N * F);
    }
    if (fwd) {
        ops_copy(out, a->res_mid, (size_t)N * d);
        if (w->b_out) ops_bias_add_f32(out, AW(w->b_out), N, d);
        ops_matmul_forward_f32(out, a->mlp_act, AW(w->w_out), N, F, d, 1);
    }
#undef AW
    return 0.0;
}

void gpt_layer_recompute(GPT* m, int l) {
    if (m->recompute != RECOMPUTE_NONE) gpt_layer_forward(m, l, m->recompute);
}

void gpt_set_doc_mask(GPT* m, int eot, int restart) {
    m->doc_eot = eot;
    m->doc_restart = restart;
}

// The attention ops' document starts for the host tokens idx[B*T] of an uncached forward
// (model/doc_mask.h), or NULL when the mask is off or a KV cache is in use.
static const int* gpt_doc_starts(GPT* m, const int* idx) {
    const int N = m->B * m->T;
    if (m->doc_eot < 0 || m->kv) return NULL;
    if (m->doc_n < N) {
        ops_free(m->doc_start);
        m->doc_start = ops_malloc((size_t)N * sizeof(int));
        m->doc_n = N;
    }
    int* host = malloc((size_t)N * sizeof(int));
    doc_starts(host, idx, m->B, m->T, m->doc_eot);
    ops_from_host(m->doc_start, host, (size_t)N * sizeof(int));
    free(host);
    return m->doc_start;
}

// fuse: the cross-entropy also writes dlogits for dloss (gpt_forward_train)
static float gpt_forward_impl(GPT* m, const int* idx, const int* targets, int fuse, float dloss) {
    const ModelConfig* c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, d = c->d_model;
    const OpsNormKind nk = norm_kind(c);
    const float eps = c->norm_eps;

    gpt_refresh_act_weights(m);   // the GEMMs read act_t weights: gpt_act_w
    ops_from_host(m->idx, idx, (size_t)N * sizeof(int));
    if (targets) ops_from_host(m->targets, targets, (size_t)N * sizeof(int));
    // with a KV cache these are tokens pos0 .. pos0 + T - 1 of their sequences
    const int pos0 = m->kv ? kv_cache_begin(m->kv, T) : 0;
    m->attn.pos0 = pos0;
    m->attn.doc_start = gpt_doc_starts(m, idx);   // NULL: plain causal
    m->attn.doc_rope = m->doc_restart;

    // x = wte[idx] (+ wpe[pos0 + t])
    ops_embedding_forward(m->res[0], m->idx, m->w.wte, m->w.wpe ? m->w.wpe + (size_t)pos0 * d : NULL, B, T, d);
    m->moe_loss = 0.0;
    for (int l = 0; l < c->n_layer; l++) m->moe_loss += gpt_layer_forward(m, l, RECOMPUTE_NONE);
    ops_norm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->res[c->n_layer], m->w.lnf_w, m->w.lnf_b, N, d, eps, nk);
    ops_matmul_forward(m->logits, m->lnf, gpt_act_w(m, m->w.lm_head), N, d, c->padded_vocab);
    if (m->kv) kv_cache_end(m->kv, T);
    m->dlogits_ready = 0;
    if (!targets) return 0.0f;

    if (fuse) {   // dlogits over the logits in place, as gpt_backward's ops_xent_backward writes them
        ops_xent_forward_backward(m->losses, m->lse, m->logits, m->logits, m->targets, dloss / N, N,
                                  c->vocab_size, c->padded_vocab);
        m->dlogits_ready = 1;
        m->dlogits_dloss = dloss;
    } else {
        ops_xent_forward(m->losses, m->lse, m->logits, m->targets, N, c->vocab_size, c->padded_vocab);
    }
    float* host = malloc((size_t)N * sizeof(float));
    ops_to_host(host, m->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += host[i];
    free(host);
    return (float)(sum / N);
}

float gpt_forward(GPT* m, const int* idx, const int* targets) { return gpt_forward_impl(m, idx, targets, 0, 0.0f); }

float gpt_forward_train(GPT* m, const int* idx, const int* targets, float dloss) {
    if (!targets) {
        fprintf(stderr, "error: gpt_forward_train needs targets (the logits' gradient is of the loss)\n");
        exit(1);
    }
    return gpt_forward_impl(m, idx, targets, 1, dloss);
}

void gpt_backward(GPT* m, float dloss) {
    const ModelConfig* c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, d = c->d_model, F = c->d_ff;
    const int Hd = c->n_head * c->head_dim, QKVG = ops_attn_qkv_cols(&m->attn);
    const int Fin = c->mlp == MLP_SWIGLU ? 2 * F : F, Vp = c->padded_vocab;
    const OpsNormKind nk = norm_kind(c);
#define AW(w) gpt_act_w(m, (w))

    // loss -> logits -> final norm. dlogits overwrite the logits in place (gpt_forward_train's
    // cross-entropy wrote them already, for its dloss)
    if (!m->dlogits_ready) {
        ops_xent_backward(m->logits, m->logits, m->lse, m->targets, dloss / N, N, c->vocab_size, Vp);
    } else if (dloss != m->dlogits_dloss) {
        fprintf(stderr, "error: gpt_backward(dloss %g) after gpt_forward_train(dloss %g): the logits' gradient "
                "was written for the forward's dloss (pass the same)\n", dloss, m->dlogits_dloss);
        exit(1);
    }
    m->dlogits_ready = 0;
    ops_matmul_backward(m->dnorm, m->g.lm_head, m->logits, m->lnf, AW(m->w.lm_head), N, d, Vp);
    ops_zero(m->dres, (size_t)N * d);
    ops_norm_backward(m->dres, m->g.lnf_w, m->g.lnf_b, m->dnorm, m->res[c->n_layer], m->w.lnf_w,
                      m->lnf_mean, m->lnf_rstd, N, d, nk);
    // m->dres now holds dL/dx for the residual stream; it flows through every layer's residual
    // additions unchanged, and each branch's backward adds its contribution. The GEMMs read its
    // act_t copy m->dres_act, made where dres has changed (nothing to do when act_t is fp32).
    for (int l = c->n_layer - 1; l >= 0; l--) {
        LayerWeights* w = &m->w.layer[l];
        LayerWeights* g = &m->g.layer[l];
        LayerActs* a = &m->layer[l];
        // recomputation: what [train] recompute did not keep of this layer, back into its
        // buffers (the shared set holds another layer's until now)
        if (m->recompute != RECOMPUTE_NONE) gpt_layer_forward(m, l, m->recompute);
        // MLP (or MoE) branch: m->dnorm = dL/d norm2 output
        ops_act_from_float(m->dres_act, m->dres, (size_t)N * d);
        if (config_layer_is_moe(c, l)) {
            moe_backward(m, l, dloss);
        } else {
            // the biases' gradients ([model] bias) are the column sums of their outputs' gradients
            if (g->b_out) ops_bias_backward(g->b_out, m->dres_act, N, d);
            if (c->mlp == MLP_SWIGLU) {
                ops_matmul_backward(m->dmlp_act, g->w_out, m->dres_act, a->mlp_act, AW(w->w_out), N, F, d);
                ops_swiglu_backward(m->dmlp_pre, m->dmlp_act, a->mlp_pre, N, F);
            } else {   // GELU's derivative fused into the GEMM
                ops_matmul_backward_gelu(m->dmlp_pre, g->w_out, m->dres_act, a->mlp_act, AW(w->w_out), a->mlp_pre, N, F, d);
            }
            if (g->b_in) ops_bias_backward(g->b_in, m->dmlp_pre, N, Fin);
            ops_matmul_backward(m->dnorm, g->w_in, m->dmlp_pre, a->ln2, AW(w->w_in), N, d, Fin);
        }
        ops_norm_backward(m->dres, g->ln2_w, g->ln2_b, m->dnorm, a->res_mid, w->ln2_w, a->ln2_mean,
                          a->ln2_rstd, N, d, nk);
        // token-mixer branch: m->dnorm = dL/d norm1 output
        if (config_layer_is_linear(c, l)) {
            DeltaNetLayerIO io = deltanet_io(m, l);
            deltanet_backward(&io);
        } else {   // attention
            ops_act_from_float(m->dres_act, m->dres, (size_t)N * d);
            if (g->bo) ops_bias_backward(g->bo, m->dres_act, N, d);
            ops_matmul_backward(m->dyg, g->wo, m->dres_act, a->yg, AW(w->wo), N, Hd, d);
            ops_attention_backward(m->dq, m->dk, m->dv, m->dqkv, m->dscratch, m->dyg, a->q, a->k, a->v,
                                   a->y, a->lse, a->qkv, &m->attn);
            ops_attn_prep_backward(m->dqkv, g->qnorm_w, g->knorm_w, m->dq, m->dk, m->dv, a->qkv,
                                   a->qk_rstd, w->qnorm_w, w->knorm_w, &m->attn);
            if (g->bqkv) ops_bias_backward(g->bqkv, m->dqkv, N, QKVG);
            ops_matmul_backward(m->dnorm, g->wqkv, m->dqkv, a->ln1, AW(w->wqkv), N, d, QKVG);
        }
        ops_norm_backward(m->dres, g->ln1_w, g->ln1_b, m->dnorm, a->res_in, w->ln1_w, a->ln1_mean,
                          a->ln1_rstd, N, d, nk);
        // layer l's parameter gradients are complete (the rest of the pass does not touch them)
        if (m->grads_ready && m->layer_hi[l] > m->layer_lo[l])
            m->grads_ready(m->grads_ready_ctx, m->layer_lo[l], m->layer_hi[l]);
    }
    ops_embedding_backward(m->g.wte, m->g.wpe, m->dres, m->idx, B, T, d);
#undef AW
}

double gpt_matmul_params(const ModelConfig* c) {
    OpsAttnShape s = config_attn_shape(c, 0, 0, OPS_ATTN_FUSED);
    double d = c->d_model, F = c->d_ff, ffn = c->mlp == MLP_SWIGLU ? 3.0 : 2.0;
    const MoeConfig* e = &c->moe;
    double attn = (double)ops_attn_qkv_cols(&s) * d + d * c->n_head * c->head_dim;
    // a Gated DeltaNet layer's projections: W_qkv, W_z, W_ba and W_out
    double Kd = (double)c->linear_n_k_head * c->linear_k_head_dim, Vd = (double)c->linear_n_v_head * c->linear_v_head_dim;
    double linear = d * (2 * Kd + Vd) + d * Vd + d * 2.0 * c->linear_n_v_head + Vd * d;
    double total = (double)c->padded_vocab * d;
    for (int l = 0; l < c->n_layer; l++) {
        total += config_layer_is_linear(c, l) ? linear : attn;
        if (!config_layer_is_moe(c, l)) { total += ffn * d * F; continue; }
        // a token passes through the router, top_k routed experts and the shared expert (+ gate)
        total += (double)e->n_expert * d + (double)e->top_k * ffn * d * e->d_expert;
        if (e->n_shared_expert) total += ffn * d * e->d_shared_expert + (e->shared_expert_gate ? d : 0.0);
    }
    return total;
}

double gpt_flops_per_token(const ModelConfig* c, int T) {
    // token mixing beyond the GEMMs: causal attention 6 T H hd per attention layer (llm.c's
    // count); the delta rule 18 Hv dk dv per linear layer (its 3 matrix-vector products with the
    // state per token, 2 dk dv FLOPs each, times 3 for forward and backward)
    double mix = 0.0;
    for (int l = 0; l < c->n_layer; l++)
        mix += config_layer_is_linear(c, l)
                   ? 18.0 * c->linear_n_v_head * c->linear_k_head_dim * c->linear_v_head_dim
                   : 6.0 * (double)T * c->n_head * c->head_dim;
    return 6.0 * gpt_matmul_params(c) + mix;
}
