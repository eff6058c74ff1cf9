// model/moe.c: the Mixture-of-Experts layer over kernels/ops.h (no backend code here).
//
// Forward of one MoE layer, X = norm2(x) [N, d], E experts, k = top_k, S = N*k slots:
//   logits = X W_r^T                      [N, E]  fp32
//   p, top-k (idx, w), lse                        ops_moe_router_forward
//   plan: counts, offsets, row <-> slot           ops_moe_dispatch_plan (capacity, if any)
//   xp = X[token of each kept slot]       [R, d]  ops_moe_gather: each expert's rows contiguous
//   yp = act(xp W_in[e]^T) W_out[e]^T     [R, d]  ops_grouped_matmul_forward (x2), per expert
//   out += sum_j w[n,j] yp[row(n,j)]      [N, d]  ops_moe_combine: one writer per token
//   out += (sigmoid(X w_g)) * shared(X)           the shared expert (and its gate), if any
// and the losses (host, from the routing statistics):
//   aux = E * sum_i f_i P_i,  f_i = step_counts_i / step_slots (the step's counts so far),
//                             P_i = mean over this micro-batch of p[n, i]
//   z   = mean_n lse[n]^2
// Under expert parallelism (moe.h MoeExchange) the two grouped GEMMs run on the process that
// holds each expert: xp's rows travel there by all-to-all (counts first) and yp's rows come back.
#include "moe.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "error: out of host memory (MoE statistics)\n"); exit(1); }
    return p;
}

void moe_stats_init(MoeStats* s, int n_expert) {
    memset(s, 0, sizeof(*s));
    s->n_expert = n_expert;
    if (n_expert <= 0) return;
    s->counts = xcalloc((size_t)n_expert, sizeof(long));
    s->p_sum = xcalloc((size_t)n_expert, sizeof(double));
    s->step_counts = xcalloc((size_t)n_expert, sizeof(double));
    s->step_p_sum = xcalloc((size_t)n_expert, sizeof(double));
}

void moe_stats_free(MoeStats* s) {
    free(s->counts); free(s->p_sum); free(s->step_counts); free(s->step_p_sum);
    memset(s, 0, sizeof(*s));
}

void moe_stats_reset_step(MoeStats* s) {
    if (s->n_expert <= 0) return;
    memset(s->step_counts, 0, (size_t)s->n_expert * sizeof(double));
    memset(s->step_p_sum, 0, (size_t)s->n_expert * sizeof(double));
    s->step_slots = s->step_tokens = s->step_lse_sq = s->step_entropy = 0.0;
    s->step_dropped = 0;
}

double moe_step_aux(const MoeStats* s) {
    if (s->n_expert <= 0 || s->step_slots <= 0.0 || s->step_tokens <= 0.0) return NAN;
    double a = 0.0;
    for (int i = 0; i < s->n_expert; i++)
        a += (s->step_counts[i] / s->step_slots) * (s->step_p_sum[i] / s->step_tokens);
    return s->n_expert * a;
}

double moe_step_z(const MoeStats* s) {
    return s->step_tokens > 0.0 ? s->step_lse_sq / s->step_tokens : NAN;
}

double moe_max_load(const MoeStats* s) {
    if (s->n_expert <= 0) return NAN;
    long mx = 0, sum = 0;
    for (int i = 0; i < s->n_expert; i++) { sum += s->counts[i]; if (s->counts[i] > mx) mx = s->counts[i]; }
    return sum > 0 ? (double)mx * s->n_expert / (double)sum : NAN;
}

double moe_entropy(const MoeStats* s) {
    return s->n_tokens > 0 ? s->entropy_sum / s->n_tokens : NAN;
}

double moe_last_aux(const MoeStats* s) {
    if (s->n_expert <= 0 || s->n_tokens <= 0) return NAN;
    long slots = 0;
    for (int i = 0; i < s->n_expert; i++) slots += s->counts[i];
    double a = 0.0;
    for (int i = 0; i < s->n_expert; i++) a += ((double)s->counts[i] / slots) * (s->p_sum[i] / s->n_tokens);
    return s->n_expert * a;
}

double moe_step_max_load(const MoeStats* s) {
    if (s->n_expert <= 0 || s->step_slots <= 0.0) return NAN;
    double mx = 0.0;
    for (int i = 0; i < s->n_expert; i++) if (s->step_counts[i] > mx) mx = s->step_counts[i];
    return mx * s->n_expert / s->step_slots;
}

void moe_summarize_step(const MoeStats* stats, int n_layer, MoeStepSummary* s) {
    memset(s, 0, sizeof(*s));
    for (int l = 0; l < n_layer; l++) {
        const MoeStats* st = &stats[l];
        if (st->n_expert <= 0) continue;
        s->n_moe++;
        s->aux += moe_step_aux(st);
        s->z += moe_step_z(st);
        double ml = moe_step_max_load(st);
        if (ml > s->max_load) s->max_load = ml;
        s->dropped += st->step_dropped;
    }
    if (s->n_moe) { s->aux /= s->n_moe; s->z /= s->n_moe; }
}

int moe_capacity(const MoeConfig* c, int N) {
    if (c->capacity_factor <= 0.0f) return 0;
    return (int)ceil((double)c->capacity_factor * N * c->top_k / c->n_expert);
}

static OpsRouter router_kind(const MoeConfig* c) {
    return c->router == ROUTER_SIGMOID_TOPK ? OPS_ROUTER_SIGMOID : OPS_ROUTER_SOFTMAX;
}

// act(pre) for an FFN of hidden width F over `rows` rows: swiglu [rows, 2F] -> [rows, F], or gelu
static void ffn_act_forward(const ModelConfig* c, act_t* act, const act_t* pre, int rows, int F) {
    if (c->mlp == MLP_SWIGLU) ops_swiglu_forward(act, pre, rows, F);
    else ops_gelu_forward(act, pre, (size_t)rows * F);
}
static void ffn_act_backward(const ModelConfig* c, act_t* dpre, const act_t* dact, const act_t* pre,
                             int rows, int F) {
    if (c->mlp == MLP_SWIGLU) ops_swiglu_backward(dpre, dact, pre, rows, F);
    else ops_gelu_backward(dpre, dact, pre, (size_t)rows * F);
}

// ---- expert parallelism (moe.h, MoeExchange) ----
static int ep_on(const MoeLayerIO* io) { return io->ep.size > 1 && io->ep.counts != NULL; }

// The exchange plan of the layer's last forward (host). Member q of the P holds experts
// q*El .. q*El+El-1. This process sends its kept rows of member q's experts, xp rows
// off[q*El] .. off[q*El+El), and receives from member s rc[s*El + j] rows for its expert j,
// laid out source-major in the receive buffer (s, then j). The experts' GEMMs want them
// expert-major (j, then s): perm maps xe row -> receive row, inv the reverse. Uploaded to
// io->ep.map: perm [Rin], inv [Rin], el_off [El + 1] (the local experts' row offsets in xe).
typedef struct {
    int P, El, q, R, Rin;
    int *send_rows, *recv_rows;   // [P] each
    const int *d_perm, *d_inv, *d_eloff;   // backend memory (io->ep.scratch->map)
} EpPlan;

void moe_ep_rows_free(MoeEpRows* r) {
    ops_free(r->xe); ops_free(r->pre); ops_free(r->act);
    memset(r, 0, sizeof(*r));
}
void moe_ep_scratch_free(MoeEpScratch* s) {
    ops_free(s->send); ops_free(s->recv); ops_free(s->d_pre); ops_free(s->d_act); ops_free(s->map);
    memset(s, 0, sizeof(*s));
}
// Grow (never shrink) to hold `rows` received rows: the buffers' contents are not kept (each
// forward writes them before use). d = d_model, fin = Fin_e, fe = Fe.
static void ep_rows_grow(MoeEpRows* r, long rows, size_t d, size_t fin, size_t fe) {
    if (rows <= r->cap) return;
    moe_ep_rows_free(r);
    r->xe = ops_malloc((size_t)rows * d * sizeof(act_t));
    r->pre = ops_malloc((size_t)rows * fin * sizeof(act_t));
    r->act = ops_malloc((size_t)rows * fe * sizeof(act_t));
    r->cap = rows;
}
static void ep_scratch_grow(MoeEpScratch* s, long rows, size_t d, size_t fin, size_t fe) {
    if (rows <= s->cap) return;
    ops_free(s->send); ops_free(s->recv); ops_free(s->d_pre); ops_free(s->d_act);
    s->send = ops_malloc((size_t)rows * d * sizeof(act_t));
    s->recv = ops_malloc((size_t)rows * d * sizeof(act_t));
    s->d_pre = ops_malloc((size_t)rows * fin * sizeof(act_t));
    s->d_act = ops_malloc((size_t)rows * fe * sizeof(act_t));
    s->cap = rows;
}

static void ep_plan(const MoeLayerIO* io, int fwd, EpPlan* p) {
    const int E = io->cfg->moe.n_expert, P = io->ep.size, El = E / P;
    p->P = P; p->El = El; p->q = io->ep.rank;
    int* off = xcalloc((size_t)E + 1, sizeof(int));
    int* cnt = xcalloc((size_t)E, sizeof(int));
    int* rc = xcalloc((size_t)E, sizeof(int));   // P * El = E
    ops_to_host(off, io->a.offsets, ((size_t)E + 1) * sizeof(int));
    p->R = off[E];
    if (fwd) {
        // the counts travel before the rows: every member must know how many rows it receives
        // from each member for each of its experts before any payload arrives
        for (int e = 0; e < E; e++) cnt[e] = off[e + 1] - off[e];
        io->ep.counts(io->ep.ctx, cnt, rc, El);
        ops_from_host(io->a.ep_rc, rc, (size_t)E * sizeof(int));
    } else {
        ops_to_host(rc, io->a.ep_rc, (size_t)E * sizeof(int));
    }
    p->send_rows = xcalloc(2 * (size_t)P, sizeof(int));
    p->recv_rows = p->send_rows + P;
    int Rin = 0;
    for (int s = 0; s < P; s++) {
        p->send_rows[s] = off[(s + 1) * El] - off[s * El];
        for (int j = 0; j < El; j++) p->recv_rows[s] += rc[s * El + j];
        Rin += p->recv_rows[s];
    }
    p->Rin = Rin;
    // the buffers, sized from the counts just exchanged (grow-only)
    {
        const size_t d = (size_t)io->cfg->d_model, Fe = (size_t)io->cfg->moe.d_expert;
        const size_t fin = (io->cfg->mlp == MLP_SWIGLU ? 2 : 1) * Fe;
        if (fwd) ep_rows_grow(io->ep_rows, Rin, d, fin, Fe);
        ep_scratch_grow(io->ep.scratch, Rin, d, fin, Fe);   // the rows received (both directions' Rin)
        MoeEpScratch* sc = io->ep.scratch;
        long nmap = 2 * (long)Rin + El + 1;
        if (nmap > sc->map_cap) {
            ops_free(sc->map);
            sc->map = ops_malloc((size_t)nmap * sizeof(int));
            sc->map_cap = nmap;
        }
    }
    // host maps: perm [Rin], inv [Rin], el_off [El + 1]
    int* h = xcalloc(2 * (size_t)Rin + El + 1, sizeof(int));
    int *perm = h, *inv = h + Rin, *el_off = h + 2 * (size_t)Rin;
    for (int j = 0; j < El; j++) {
        int n = 0;
        for (int s = 0; s < P; s++) n += rc[s * El + j];
        el_off[j + 1] = el_off[j] + n;
    }
    int src = 0;   // start of member s's block in the receive buffer
    for (int s = 0; s < P; s++) {
        int at = src;
        for (int j = 0; j < El; j++) {
            // expert j's rows from s sit after those from members 0 .. s-1 in xe
            int xe_at = el_off[j];
            for (int t = 0; t < s; t++) xe_at += rc[t * El + j];
            for (int i = 0; i < rc[s * El + j]; i++) { perm[xe_at + i] = at + i; inv[at + i] = xe_at + i; }
            at += rc[s * El + j];
        }
        src += p->recv_rows[s];
    }
    int* map = io->ep.scratch->map;
    ops_from_host(map, h, (2 * (size_t)Rin + El + 1) * sizeof(int));
    p->d_perm = map;
    p->d_inv = map + Rin;
    p->d_eloff = map + 2 * (size_t)Rin;
    free(h); free(off); free(cnt); free(rc);
}

static void ep_plan_free(EpPlan* p) { free(p->send_rows); }

// Forward of the routed experts under expert parallelism: xp [R, d] (this process's kept
// rows) -> yp [R, d], each row computed by the member that holds its expert.
static void ep_experts_forward(const MoeLayerIO* io) {
    const ModelConfig* c = io->cfg;
    const MoeConfig* mc = &c->moe;
    const MoeActs* a = &io->a;
    const MoeExchange* x = &io->ep;
    const int d = c->d_model, sw = c->mlp == MLP_SWIGLU ? 2 : 1, Fe = mc->d_expert;
    const size_t rb = (size_t)d * sizeof(act_t);
    EpPlan p;
    ep_plan(io, 1, &p);   // also sizes the buffers from the counts
    const MoeEpScratch* sc = x->scratch;
    const MoeEpRows* er = io->ep_rows;   // [Rin, *]: kept for the backward
    // this member's experts: the model holds only them (model/params.h, an expert shard)
    const act_t* w_in = io->w.moe_w_in;     // [El, sw*Fe, d]
    const act_t* w_out = io->w.moe_w_out;   // [El, d, Fe]
    x->rows(x->ctx, a->xp, p.send_rows, sc->recv, p.recv_rows, rb);
    ops_moe_gather(er->xe, sc->recv, p.d_perm, p.Rin, 1, d);                  // expert-major
    ops_grouped_matmul_forward(er->pre, er->xe, w_in, p.d_eloff, p.El, d, sw * Fe);
    ffn_act_forward(c, er->act, er->pre, p.Rin, Fe);
    ops_grouped_matmul_forward(sc->recv, er->act, w_out, p.d_eloff, p.El, Fe, d);  // ye, expert-major
    ops_moe_gather(sc->send, sc->recv, p.d_inv, p.Rin, 1, d);                 // member-major
    x->rows(x->ctx, sc->send, p.recv_rows, a->yp, p.send_rows, rb);          // back to the rows' owners
    ep_plan_free(&p);
}

// Backward of ep_experts_forward: d yp [R, d] (io->b.d_yp) -> d xp [R, d] (into io->b.d_yp), and
// the local experts' weight gradients (+=).
static void ep_experts_backward(const MoeLayerIO* io) {
    const ModelConfig* c = io->cfg;
    const MoeConfig* mc = &c->moe;
    const MoeBackwardBufs* b = &io->b;
    const MoeExchange* x = &io->ep;
    const int d = c->d_model, sw = c->mlp == MLP_SWIGLU ? 2 : 1, Fe = mc->d_expert;
    const size_t rb = (size_t)d * sizeof(act_t);
    EpPlan p;
    ep_plan(io, 0, &p);
    const MoeEpScratch* sc = x->scratch;
    const MoeEpRows* er = io->ep_rows;   // the forward's received rows
    const act_t* w_in = io->w.moe_w_in;
    const act_t* w_out = io->w.moe_w_out;
    float* g_in = io->g->moe_w_in;     // [El, sw*Fe, d], this member's experts only
    float* g_out = io->g->moe_w_out;
    x->rows(x->ctx, b->d_yp, p.send_rows, sc->recv, p.recv_rows, rb);
    ops_moe_gather(sc->send, sc->recv, p.d_perm, p.Rin, 1, d);                // d ye, expert-major
    ops_grouped_matmul_backward(sc->d_act, g_out, sc->send, er->act, w_out, p.d_eloff, p.El, Fe, d);
    ffn_act_backward(c, sc->d_pre, sc->d_act, er->pre, p.Rin, Fe);
    ops_grouped_matmul_backward(sc->send, g_in, sc->d_pre, er->xe, w_in, p.d_eloff, p.El, d, sw * Fe);  // d xe
    ops_moe_gather(sc->recv, sc->send, p.d_inv, p.Rin, 1, d);                 // member-major
    x->rows(x->ctx, sc->recv, p.recv_rows, b->d_yp, p.send_rows, rb);        // d xp, to the rows' owners
    ep_plan_free(&p);
}

double moe_layer_forward(const MoeLayerIO* io, float* out, RecomputeKind redo) {
    const ModelConfig* c = io->cfg;
    const MoeConfig* mc = &c->moe;
    const MoeWeightsAct* w = &io->w;   // the GEMMs read the act_t compute copies
    const MoeActs* a = &io->a;
    MoeStats* st = io->stats;
    const int N = io->N, d = c->d_model, E = mc->n_expert, k = mc->top_k, S = N * k;
    const int sw = c->mlp == MLP_SWIGLU ? 2 : 1;
    const int Fe = mc->d_expert, Fs = mc->d_shared_expert;
    const int fwd = redo == RECOMPUTE_NONE;        // the forward pass: routing, output, statistics
    const int all = redo != RECOMPUTE_SELECTIVE;   // the GEMMs' outputs too (forward, or full)

    const int capacity = moe_capacity(mc, N);
    if (fwd) {
        // router: logits = X W_r^T [N, E]; p, the top-k experts and their renormalised weights
        ops_matmul_forward_f32(a->router_logits, a->ln2, w->router, N, d, E, 0);
        ops_moe_router_forward(a->router_probs, a->topk_idx, a->topk_w, a->router_lse, a->router_logits,
                               N, E, k, router_kind(mc));
        // dispatch: sort the slots by expert (kept slots only, when a capacity is set)
        ops_moe_dispatch_plan(a->counts, a->offsets, a->row_slot, a->slot_row, a->topk_idx, N, E, k, capacity);
    }
    int R = 0;
    ops_to_host(&R, a->offsets + E, sizeof(int));
    // routed experts: each expert's FFN over its contiguous rows of the permuted tokens
    ops_moe_gather(a->xp, a->ln2, a->row_slot, R, k, d);
    if (io->ep_shard && !ep_on(io)) {   // model/gpt.h: every member of the group must take part
        fprintf(stderr, "error: this process holds %d of the %d experts (expert parallelism) and was asked to run "
                "the MoE layer without its group's exchange\n", E / io->ep_shard, E);
        exit(1);
    }
    if (ep_on(io)) {
        // expert parallelism: the rows travel to the members that hold their experts and back.
        // A recomputation runs no exchange: yp is kept (model/gpt.c, ACT_ROUTE under expert
        // parallelism) and so are the received rows the backward reads (io->ep_rows)
        if (fwd) ep_experts_forward(io);
    } else {
        if (all) ops_grouped_matmul_forward(a->ep_pre, a->xp, w->moe_w_in, a->offsets, E, d, sw * Fe);
        ffn_act_forward(c, a->ep_act, a->ep_pre, R, Fe);
        if (all) ops_grouped_matmul_forward(a->yp, a->ep_act, w->moe_w_out, a->offsets, E, Fe, d);
    }
    // scale by the routing weights and add back to each token (no atomics)
    if (fwd) ops_moe_combine(out, a->yp, a->topk_w, a->slot_row, N, k, d);
    // shared expert: every token, optionally gated by sigmoid(X w_g)
    if (mc->n_shared_expert) {
        if (all) ops_matmul_forward(a->sh_pre, a->ln2, w->shared_w_in, N, d, sw * Fs);
        ffn_act_forward(c, a->sh_act, a->sh_pre, N, Fs);
        if (mc->shared_expert_gate) {
            if (all) {
                ops_matmul_forward(a->sh_out, a->sh_act, w->shared_w_out, N, Fs, d);
                ops_matmul_forward_f32(a->sh_z, a->ln2, w->shared_gate, N, d, 1, 0);
            }
            if (fwd) ops_sigmoid_gate_add_forward(out, a->sh_out, a->sh_z, N, d);
        } else if (fwd) {
            ops_matmul_forward_f32(out, a->sh_act, w->shared_w_out, N, Fs, d, 1);
        }
    }
    if (!fwd) return 0.0;

    // statistics of this micro-batch (host)
    int* cnt = xcalloc((size_t)E, sizeof(int));
    ops_to_host(cnt, a->counts, (size_t)E * sizeof(int));
    ops_moe_router_stats(st->p_sum, &st->lse_sq_sum, &st->entropy_sum, a->router_probs, a->router_lse, N, E);
    st->n_tokens = N;
    st->capacity = capacity;
    st->dropped = S - R;
    for (int i = 0; i < E; i++) st->counts[i] = cnt[i];
    free(cnt);
    // ... added to the step's: f_i of the load-balancing loss is over all of the step's routed
    // slots so far, on every process (io->reduce sums the counts over processes; P_i stays
    // this process's mean, and averaging the processes' gradients averages it).
    double* gc = xcalloc((size_t)E + 1, sizeof(double));
    for (int i = 0; i < E; i++) gc[i] = (double)st->counts[i];
    gc[E] = (double)S;
    if (io->reduce) io->reduce(io->reduce_ctx, gc, E + 1);
    for (int i = 0; i < E; i++) { st->step_counts[i] += gc[i]; st->step_p_sum[i] += st->p_sum[i]; }
    st->step_slots += gc[E];
    free(gc);
    st->step_tokens += N;
    st->step_lse_sq += st->lse_sq_sum;
    st->step_entropy += st->entropy_sum;
    st->step_dropped += st->dropped;
    // the losses of this micro-batch, without coefficients
    double aux = 0.0;
    for (int i = 0; i < E; i++) aux += (st->step_counts[i] / st->step_slots) * (st->p_sum[i] / N);
    st->aux = E * aux;
    st->z = st->lse_sq_sum / N;
    return (double)mc->aux_loss_coef * st->aux + (double)mc->z_loss_coef * st->z;
}

void moe_layer_backward(const MoeLayerIO* io, float dloss) {
    const ModelConfig* c = io->cfg;
    const MoeConfig* mc = &c->moe;
    const MoeWeightsAct* w = &io->w;
    LayerWeights* g = io->g;
    const MoeActs* a = &io->a;
    const MoeBackwardBufs* b = &io->b;
    const MoeStats* st = io->stats;
    const int N = io->N, d = c->d_model, E = mc->n_expert, k = mc->top_k;
    const int sw = c->mlp == MLP_SWIGLU ? 2 : 1;
    const int Fe = mc->d_expert, Fs = mc->d_shared_expert;
    const float* dout = b->dout;   // dL/d(layer output) [N, d]
    int R = 0;
    ops_to_host(&R, a->offsets + E, sizeof(int));

    // routed experts, backwards: combine -> w_out -> act -> w_in (d_yp then holds d xp)
    ops_moe_combine_backward(b->d_yp, b->d_topk_w, dout, a->yp, a->topk_w, a->slot_row, N, k, d);
    if (ep_on(io)) {
        ep_experts_backward(io);
    } else {
        ops_grouped_matmul_backward(b->d_ep_act, g->moe_w_out, b->d_yp, a->ep_act, w->moe_w_out, a->offsets, E, Fe, d);
        ffn_act_backward(c, b->d_ep_pre, b->d_ep_act, a->ep_pre, R, Fe);
        ops_grouped_matmul_backward(b->d_yp, g->moe_w_in, b->d_ep_pre, a->xp, w->moe_w_in, a->offsets, E, d, sw * Fe);
    }

    // router: through the top-k weights, the load-balancing loss and the z-loss.
    // aux = c E sum_i f_i (1/N) sum_n p[n,i] with f constant: dL/dp[n,i] = dloss c E f_i / N.
    // z = c_z (1/N) sum_n lse_n^2: dL/dlse_n = dloss c_z 2 lse_n / N.
    float* ag = malloc((size_t)E * sizeof(float));
    for (int i = 0; i < E; i++)
        ag[i] = (float)((double)dloss * mc->aux_loss_coef * E * (st->step_counts[i] / st->step_slots) / N);
    ops_from_host(b->aux_grad, ag, (size_t)E * sizeof(float));
    free(ag);
    const float z_grad = (float)((double)dloss * mc->z_loss_coef * 2.0 / N);
    ops_moe_router_backward(b->d_router, b->d_topk_w, a->router_logits, a->router_probs, a->topk_idx,
                            a->topk_w, a->router_lse, b->aux_grad, z_grad, N, E, k, router_kind(mc));
    // dX: router (=), then the experts' inputs gathered back per token (+=)
    ops_act_from_float(b->d_router_act, b->d_router, (size_t)N * E);
    ops_matmul_backward(b->dx, g->router, b->d_router_act, a->ln2, w->router, N, d, E);
    ops_moe_gather_backward(b->dx, b->d_yp, a->slot_row, N, k, d);

    // shared expert (and its gate)
    if (mc->n_shared_expert) {
        const act_t* dsh = b->dout_act;   // the model made it from dout
        if (mc->shared_expert_gate) {
            ops_sigmoid_gate_add_backward(b->d_sh_out, b->d_sh_z, dout, a->sh_out, a->sh_z, N, d);
            ops_act_from_float(b->d_sh_z_act, b->d_sh_z, (size_t)N);
            ops_matmul_backward(b->d_tmp, g->shared_gate, b->d_sh_z_act, a->ln2, w->shared_gate, N, d, 1);
            ops_accumulate(b->dx, b->d_tmp, (size_t)N * d);
            dsh = b->d_sh_out;
        }
        ops_matmul_backward(b->d_sh_act, g->shared_w_out, dsh, a->sh_act, w->shared_w_out, N, Fs, d);
        ffn_act_backward(c, b->d_sh_pre, b->d_sh_act, a->sh_pre, N, Fs);
        ops_matmul_backward(b->d_tmp, g->shared_w_in, b->d_sh_pre, a->ln2, w->shared_w_in, N, d, sw * Fs);
        ops_accumulate(b->dx, b->d_tmp, (size_t)N * d);
    }
}
