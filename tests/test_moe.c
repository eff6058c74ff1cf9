// tests/test_moe.c: the Mixture-of-Experts layer (kernels/cpu/moe.c, model/moe.c).
//
//   - every MoE op's backward against central finite differences (router for both kinds with
//     the aux and z terms, gather, combine, grouped GEMM, the sigmoid gate);
//   - a whole MoE layer against finite differences of (out . r + the weighted aux and z losses),
//     for both routers, with and without the shared expert and its gate, dropless and with a
//     capacity that drops slots, and with the aux / z terms alone;
//   - a tiny MoE model (2 layers) against finite differences of its objective, for several
//     variants (moe_every, gelu experts, attention gates);
//   - the aux and z losses and the router entropy against values computed by hand;
//   - a capacity-limited case drops exactly the slots it should, and they contribute nothing;
//   - the same bits for 1 and 2 threads; the step statistics over micro-steps; active params.
//
// Finite differences as in test_ops_fd.c: L = sum(out * r) in float64 from float32 outputs,
// h = 1e-2, error = max|num - ana| / max|ana| over sampled elements. The inputs are built
// without top-k ties: the gap between each token's k-th and (k+1)-th router logit is checked
// to be far above what a perturbation of h can move, and every finite-difference evaluation
// checks that the routing did not change (a change would make the loss non-smooth there).
#include <string.h>
#include <omp.h>
#include "test_util.h"
#include "../kernels/ops.h"
#include "../model/gpt.h"
#include "../model/moe.h"

#define FD_H 1e-2
// ops and the layer: truncation h^2/6 |f'''/f'| ~ 2e-5 at h = 1e-2 plus roundoff u sum|r out| / h;
// measured max 7.8e-5 (AVX2), 6.4e-5 (SSE41), 5.3e-5 (AVX): 12.8x margin
#define FD_TOL 1e-3
// whole model: the float32 loss's roundoff over 2h (test_ops_fd.c); measured max 2.36e-3 (AVX,
// SSE41), 2.35e-3 (AVX2): 4.2x margin
#define FD_TOL_MODEL 1e-2
#define FD_SAMPLES 40

typedef double (*LossFn)(void* ctx);

static double dot(const float* a, const float* r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * r[i];
    return s;
}

// `flips` (may be NULL): a counter the loss function increments when the routing differs
// from the base point's. A sample whose +h or -h evaluation changed the routing straddles a
// kink of the loss, where a central difference means nothing: it is skipped and counted in
// *skipped (callers say how many they allow).
static double fd_check_flips(const char* what, float* x, size_t n, const float* ana, LossFn f, void* ctx,
                             double tol, const int* flips, int* skipped) {
    double max_ana = 0.0, max_err = 0.0;
    for (size_t i = 0; i < n; i++) if (fabs(ana[i]) > max_ana) max_ana = fabs(ana[i]);
    size_t step = n <= FD_SAMPLES ? 1 : n / FD_SAMPLES;
    size_t i0 = n <= FD_SAMPLES ? 0 : (size_t)((tu_rand() * 0.5 + 0.5) * step) % step;
    int nskip = 0, nused = 0;
    for (size_t i = i0; i < n; i += step) {
        int f0 = flips ? *flips : 0;
        float orig = x[i];
        x[i] = orig + (float)FD_H; double lp = f(ctx);
        x[i] = orig - (float)FD_H; double lm = f(ctx);
        x[i] = orig;
        if (flips && *flips != f0) { nskip++; continue; }
        nused++;
        double num = (lp - lm) / (2.0 * FD_H);
        double e = fabs(num - ana[i]);
        if (e > max_err || isnan(e)) max_err = isnan(e) ? INFINITY : e;
    }
    double rel = max_err / (max_ana > 1e-6 ? max_ana : 1e-6);
    TU_CHECK(rel < tol && max_ana > 0.0 && nused > 0, "%s: fd rel err %.3e (max |grad| %.3e, %d samples)", what, rel,
             max_ana, nused);
    if (nskip) printf("  %-56s fd rel err %.2e (%d of %d samples skipped: routing changed)\n", what, rel, nskip, nskip + nused);
    else printf("  %-56s fd rel err %.2e\n", what, rel);
    if (skipped) *skipped += nskip;
    return rel;
}
static double fd_check_tol(const char* what, float* x, size_t n, const float* ana, LossFn f, void* ctx,
                           double tol) {
    return fd_check_flips(what, x, n, ana, f, ctx, tol, NULL, NULL);
}
static double fd_check(const char* what, float* x, size_t n, const float* ana, LossFn f, void* ctx) {
    return fd_check_tol(what, x, n, ana, f, ctx, FD_TOL);
}

static float* fbuf(size_t n, double scale) { float* p = ops_malloc(n * sizeof(float)); tu_fill(p, n, scale); return p; }
static int* ibuf(size_t n) { return ops_malloc(n * sizeof(int)); }

// 1 if every token chose the same set of experts in a and b ([N, k] each). The order within a
// token's top-k does not matter to the loss (the combine sums over the chosen; capacity keeps
// slots by token order), so a swap inside the top-k is not a routing change.
static int same_routing(const int* a, const int* b, int N, int k) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            int found = 0;
            for (int q = 0; q < k; q++) found |= a[n * k + j] == b[n * k + q];
            if (!found) return 0;
        }
    return 1;
}

// logits[N, E] without near-ties: row n is a random permutation of 0, 1, ..., E-1 times
// `spread`, plus noise of at most spread/4, so any two logits of a row differ by >= spread/2.
static void untied_logits(float* x, int N, int E, float spread) {
    for (int n = 0; n < N; n++) {
        float* r = x + (size_t)n * E;
        for (int i = 0; i < E; i++) r[i] = (float)i;
        for (int i = E - 1; i > 0; i--) {
            int j = (int)((tu_rand() * 0.5 + 0.5) * (i + 1)) % (i + 1);
            float t = r[i]; r[i] = r[j]; r[j] = t;
        }
        for (int i = 0; i < E; i++) r[i] = spread * (r[i] - 0.5f * (E - 1)) + 0.25f * spread * (float)tu_rand();
    }
}

// ---------------------------------------------------------------------------------------------
// ops

// The router: L = sum(topk_w * rw) + sum_n sum_i aux_grad_i p[n,i] + z_grad/2 sum_n lse_n^2,
// so that dL/dtopk_w = rw, dL/dp = aux_grad, dL/dlse = z_grad * lse.
typedef struct {
    float *logits, *probs, *w, *lse, *rw, *ag;
    int* idx;
    int *idx0;
    int N, E, k, flips;
    float zg;
    OpsRouter kind;
} RouterCtx;
static double router_loss(void* v) {
    RouterCtx* c = v;
    ops_moe_router_forward(c->probs, c->idx, c->w, c->lse, c->logits, c->N, c->E, c->k, c->kind);
    if (!same_routing(c->idx, c->idx0, c->N, c->k)) c->flips++;
    double L = dot(c->w, c->rw, (size_t)c->N * c->k);
    for (int n = 0; n < c->N; n++) {
        for (int i = 0; i < c->E; i++) L += (double)c->ag[i] * c->probs[n * c->E + i];
        L += 0.5 * c->zg * (double)c->lse[n] * c->lse[n];
    }
    return L;
}
static void test_router(OpsRouter kind, int with_aux, int with_z, int with_w) {
    RouterCtx c = {0};
    c.N = 9; c.E = 6; c.k = 2; c.kind = kind;
    c.logits = fbuf(c.N * c.E, 0); untied_logits(c.logits, c.N, c.E, 0.4f);
    c.probs = fbuf(c.N * c.E, 0); c.w = fbuf(c.N * c.k, 0); c.lse = fbuf(c.N, 0);
    c.rw = fbuf(c.N * c.k, with_w ? 1.0 : 0.0); c.ag = fbuf(c.E, with_aux ? 1.0 : 0.0);
    c.zg = with_z ? 0.7f : 0.0f;
    c.idx = ibuf(c.N * c.k); c.idx0 = ibuf(c.N * c.k);
    ops_moe_router_forward(c.probs, c.idx0, c.w, c.lse, c.logits, c.N, c.E, c.k, c.kind);
    float* dl = fbuf(c.N * c.E, 0);
    ops_moe_router_backward(dl, c.rw, c.logits, c.probs, c.idx0, c.w, c.lse, c.ag, c.zg, c.N, c.E, c.k, c.kind);
    char nm[96];
    snprintf(nm, sizeof nm, "router %s dlogits (top-k w%s%s%s)", kind == OPS_ROUTER_SOFTMAX ? "softmax" : "sigmoid",
             with_w ? " +weights" : "", with_aux ? " +aux" : "", with_z ? " +z" : "");
    fd_check(nm, c.logits, (size_t)c.N * c.E, dl, router_loss, &c);
    TU_CHECK(c.flips == 0, "%s: top-k changed under a perturbation of %g", nm, FD_H);
    // weights sum to 1 (derived: k = 2 float quotients p_j / sum p, ~3 roundings: 3u = 1.8e-7 < 1e-6),
    // chosen indices descend by logit
    int ok = 1;
    double wsum_err = 0.0;
    for (int n = 0; n < c.N; n++) {
        double s = 0;
        for (int j = 0; j < c.k; j++) s += c.w[n * c.k + j];
        if (fabs(s - 1.0) > 1e-6) ok = 0;
        wsum_err = fmax(wsum_err, fabs(s - 1.0));
        const float* r = c.logits + n * c.E;
        if (!(r[c.idx0[n * c.k]] > r[c.idx0[n * c.k + 1]])) ok = 0;
    }
    TU_CHECK(ok, "%s: weights do not sum to 1 or the top-k is not in order", nm);
    printf("  %-56s |sum of top-k weights - 1| %.2e (tol 1e-6)\n", "", wsum_err);
}

static void test_router_ties(void) {
    // ties go to the lower expert index
    float logits[2 * 5] = {1, 3, 3, 0, 3,   -1, -1, -1, -1, -1};
    float probs[10], w[4], lse[2];
    int idx[4];
    ops_moe_router_forward(probs, idx, w, lse, logits, 2, 5, 2, OPS_ROUTER_SOFTMAX);
    TU_CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 0 && idx[3] == 1, "ties: got %d %d / %d %d, want 1 2 / 0 1",
             idx[0], idx[1], idx[2], idx[3]);
    // derived: p / (p + p) is exactly 1/2 in IEEE arithmetic (1e-7: under 2 ulps of 0.5, 6e-8 each)
    TU_CHECK(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[2] - 0.5f) < 1e-7f, "tied weights are 1/2");
    printf("  router ties: top-k weights %.9g %.9g (want 0.5 exactly)\n", w[0], w[2]);
}

typedef struct { float *x, *xp, *yp, *w, *out, *r, *dxp_r; int *row_slot, *slot_row; int N, k, C, R; } PermCtx;
static double gather_loss(void* v) {
    PermCtx* c = v;
    ops_moe_gather(c->xp, c->x, c->row_slot, c->R, c->k, c->C);
    return dot(c->xp, c->dxp_r, (size_t)c->R * c->C);
}
static double combine_loss(void* v) {
    PermCtx* c = v;
    memset(c->out, 0, sizeof(float) * c->N * c->C);
    ops_moe_combine(c->out, c->yp, c->w, c->slot_row, c->N, c->k, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_gather_combine(int capacity) {
    PermCtx c = {0};
    c.N = 7; c.k = 2; c.C = 5; int E = 3;
    int idx[14] = {0, 1, 2, 0, 0, 2, 1, 0, 0, 1, 2, 1, 0, 2};
    int* counts = ibuf(E); int* offs = ibuf(E + 1);
    c.row_slot = ibuf(c.N * c.k); c.slot_row = ibuf(c.N * c.k);
    ops_moe_dispatch_plan(counts, offs, c.row_slot, c.slot_row, idx, c.N, E, c.k, capacity);
    c.R = offs[E];
    // the plan: rows grouped by expert, slot order within an expert, row <-> slot inverse
    int ok = counts[0] == 6 && counts[1] == 4 && counts[2] == 4;
    for (int r = 0; r < c.R; r++) ok &= c.slot_row[c.row_slot[r]] == r;
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r++) {
            ok &= idx[c.row_slot[r]] == e;
            if (r > offs[e]) ok &= c.row_slot[r] > c.row_slot[r - 1];
        }
    TU_CHECK(ok, "dispatch plan (capacity %d) is not a per-expert, slot-ordered permutation", capacity);
    c.x = fbuf(c.N * c.C, 1); c.xp = fbuf(c.N * c.k * c.C, 0); c.dxp_r = fbuf(c.N * c.k * c.C, 1);
    c.yp = fbuf(c.N * c.k * c.C, 1); c.w = fbuf(c.N * c.k, 1); c.out = fbuf(c.N * c.C, 0); c.r = fbuf(c.N * c.C, 1);
    float* dx = fbuf(c.N * c.C, 0);
    ops_moe_gather_backward(dx, c.dxp_r, c.slot_row, c.N, c.k, c.C);
    char nm[80];
    snprintf(nm, sizeof nm, "gather dx (capacity %d, R=%d of %d)", capacity, c.R, c.N * c.k);
    fd_check(nm, c.x, (size_t)c.N * c.C, dx, gather_loss, &c);
    float* dyp = fbuf(c.N * c.k * c.C, 0);
    float* dw = fbuf(c.N * c.k, 0);
    ops_moe_combine_backward(dyp, dw, c.r, c.yp, c.w, c.slot_row, c.N, c.k, c.C);
    snprintf(nm, sizeof nm, "combine dyp (capacity %d)", capacity);
    fd_check(nm, c.yp, (size_t)c.R * c.C, dyp, combine_loss, &c);
    snprintf(nm, sizeof nm, "combine dtopk_w (capacity %d)", capacity);
    fd_check(nm, c.w, (size_t)c.N * c.k, dw, combine_loss, &c);
}

typedef struct { float *inp, *w, *out, *r; int* offs; int G, C, OC, R; } GroupCtx;
static double group_loss(void* v) {
    GroupCtx* c = v;
    ops_grouped_matmul_forward(c->out, c->inp, c->w, c->offs, c->G, c->C, c->OC);
    return dot(c->out, c->r, (size_t)c->R * c->OC);
}
static void test_grouped_matmul(void) {
    GroupCtx c = {0};
    c.G = 4; c.C = 6; c.OC = 5;
    int offs[5] = {0, 3, 3, 8, 9};   // group 1 is empty
    c.offs = offs; c.R = offs[c.G];
    c.inp = fbuf(c.R * c.C, 1); c.w = fbuf(c.G * c.OC * c.C, 1); c.out = fbuf(c.R * c.OC, 0); c.r = fbuf(c.R * c.OC, 1);
    float* dinp = fbuf(c.R * c.C, 0);
    float* dw = fbuf(c.G * c.OC * c.C, 0);
    ops_grouped_matmul_backward(dinp, dw, c.r, c.inp, c.w, c.offs, c.G, c.C, c.OC);
    fd_check("grouped matmul dinp", c.inp, (size_t)c.R * c.C, dinp, group_loss, &c);
    fd_check("grouped matmul dw", c.w, (size_t)c.G * c.OC * c.C, dw, group_loss, &c);
    int zero = 1;
    for (int i = 0; i < c.OC * c.C; i++) zero &= dw[1 * c.OC * c.C + i] == 0.0f;
    TU_CHECK(zero, "grouped matmul: the empty group's weight gradient must stay 0");
    // each group is its own GEMM: group 2 against a plain matmul
    float* ref = fbuf(5 * c.OC, 0);
    ops_matmul_forward(ref, c.inp + 3 * c.C, c.w + 2 * c.OC * c.C, 5, c.C, c.OC);
    group_loss(&c);
    // derived: the same 6-term dot products, other blocking at most: gamma_6 = 6u = 3.6e-7 < 1e-6
    TU_CHECK(tu_rel_err(c.out + 3 * c.OC, ref, 5 * c.OC) < 1e-6, "grouped matmul group 2 != matmul");
    printf("  %-56s rel err %.2e (tol 1e-6)\n", "grouped matmul group 2 vs matmul", tu_rel_err(c.out + 3 * c.OC, ref, 5 * c.OC));
}

typedef struct { float *y, *z, *out, *r; int N, C; } GateCtx;
static double gate_loss(void* v) {
    GateCtx* c = v;
    memset(c->out, 0, sizeof(float) * c->N * c->C);
    ops_sigmoid_gate_add_forward(c->out, c->y, c->z, c->N, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_sigmoid_gate(void) {
    GateCtx c = {0};
    c.N = 6; c.C = 7;
    c.y = fbuf(c.N * c.C, 1); c.z = fbuf(c.N, 2); c.out = fbuf(c.N * c.C, 0); c.r = fbuf(c.N * c.C, 1);
    float* dy = fbuf(c.N * c.C, 0);
    float* dz = fbuf(c.N, 0);
    ops_sigmoid_gate_add_backward(dy, dz, c.r, c.y, c.z, c.N, c.C);
    fd_check("sigmoid gate add dy", c.y, (size_t)c.N * c.C, dy, gate_loss, &c);
    fd_check("sigmoid gate add dz", c.z, (size_t)c.N, dz, gate_loss, &c);
}

// ---------------------------------------------------------------------------------------------
// one MoE layer, through model/moe.c: a 1-layer model whose layer-0 activations are the harness

static ModelConfig moe_config(int d, int E, int k, int Fe, int shared, int gate, RouterKind router, float cap) {
    ModelConfig c = {0};
    c.vocab_size = 50; c.padded_vocab = 128; c.n_layer = 1; c.d_model = d; c.n_head = 2; c.n_kv_head = 2;
    c.head_dim = d / 2; c.d_ff = 24; c.max_seq_len = 16; c.pos = POS_ROPE; c.rope_base = 10000;
    c.norm = NORM_RMSNORM; c.norm_eps = 1e-5f; c.mlp = MLP_SWIGLU; c.tie_embeddings = 1; c.init_std = 0.3f;
    c.moe.n_expert = E; c.moe.top_k = k; c.moe.d_expert = Fe; c.moe.n_shared_expert = shared;
    c.moe.d_shared_expert = shared ? Fe + 2 : 0; c.moe.shared_expert_gate = gate; c.moe.moe_every = 1;
    c.moe.router = router; c.moe.aux_loss_coef = 0.3f; c.moe.z_loss_coef = 0.05f; c.moe.capacity_factor = cap;
    return c;
}

typedef struct { GPT* m; float *out, *r; int* idx0; int flips; } LayerCtx;
static double layer_loss(void* v) {
    LayerCtx* c = v;
    GPT* m = c->m;
    const int N = m->B * m->T, d = m->cfg.d_model, k = m->cfg.moe.top_k;
    memset(c->out, 0, sizeof(float) * N * d);
    double aux = moe_forward(m, 0, c->out);
    if (!same_routing(m->layer[0].topk_idx, c->idx0, N, k)) c->flips++;
    return dot(c->out, c->r, (size_t)N * d) + aux;
}

// k-th largest minus (k+1)-th largest of r[0..E) (INFINITY when k == E)
static float topk_gap(const float* r, int E, int k) {
    if (k >= E) return INFINITY;
    float s[64];
    memcpy(s, r, sizeof(float) * E);
    for (int i = 0; i < E; i++) for (int j = i + 1; j < E; j++) if (s[j] > s[i]) { float t = s[i]; s[i] = s[j]; s[j] = t; }
    return s[k - 1] - s[k];
}

// Builds the harness: the layer's input X = a->ln2, each token's row drawn again until its
// router logits have a top-k gap >= min_gap (no near-ties). Returns the smallest gap.
static float layer_setup(GPT* m, ModelConfig mc, int B, int T, float min_gap) {
    gpt_build(m, &mc, 5);
    gpt_alloc_acts(m, B, T);
    const int N = B * T, d = mc.d_model, E = mc.moe.n_expert, k = mc.moe.top_k;
    LayerActs* a = &m->layer[0];
    float logits[64], gap = INFINITY;
    for (int n = 0; n < N; n++) {
        float* x = a->ln2 + (size_t)n * d;
        float g = 0.0f;
        for (int tries = 0; tries < 1000; tries++) {
            tu_fill(x, (size_t)d, 1.0);
            ops_matmul_forward_f32(logits, x, m->w.layer[0].router, 1, d, E, 0);
            g = topk_gap(logits, E, k);
            if (g >= min_gap) break;
        }
        if (g < gap) gap = g;
    }
    return gap;
}

// FD of the layer: w.r.t. its input X and every parameter of the layer. with_out = 0 makes the
// loss the aux and z terms alone (r = 0), which isolates their gradient.
static void test_layer(const char* name, ModelConfig mc, int with_out) {
    GPT m;
    const int B = 2, T = 6, N = B * T, d = mc.d_model;
    // a perturbation of h moves a router logit by h |x| (router weights) or h |W_r| (inputs):
    // at most ~0.03 here
    float gap = layer_setup(&m, mc, B, T, 0.15f);
    TU_CHECK(gap >= 0.15f, "layer %s: inputs with top-k gaps >= 0.15 not found (smallest %.3f)", name, gap);
    LayerCtx c = {&m, fbuf((size_t)N * d, 0), fbuf((size_t)N * d, with_out ? 1.0 : 0.0), ibuf(N * mc.moe.top_k), 0};
    int skipped = 0;
    gpt_zero_grad(&m);
    memset(c.out, 0, sizeof(float) * N * d);
    moe_forward(&m, 0, c.out);
    memcpy(c.idx0, m.layer[0].topk_idx, sizeof(int) * N * mc.moe.top_k);
    memcpy(m.dres, c.r, sizeof(float) * N * d);
    moe_backward(&m, 0, 1.0f);
    float* dX = malloc(sizeof(float) * N * d);
    memcpy(dX, m.dnorm, sizeof(float) * N * d);
    char nm[128];
    snprintf(nm, sizeof nm, "layer %s: dX (dropped %ld)", name, m.moe_stats[0].dropped);
    fd_check_flips(nm, m.layer[0].ln2, (size_t)N * d, dX, layer_loss, &c, FD_TOL, &c.flips, &skipped);
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        if (!strstr(p->name, ".moe.")) continue;
        if (!with_out && !strstr(p->name, "router")) continue;   // aux/z reach only the router
        snprintf(nm, sizeof nm, "layer %s: %s", name, p->name);
        fd_check_flips(nm, m.params + p->offset, p->numel, m.grads + p->offset, layer_loss, &c, FD_TOL, &c.flips, &skipped);
    }
    TU_CHECK(c.flips == 0, "layer %s: routing changed in %d finite-difference evaluations", name, c.flips);
    free(dX);
    gpt_free(&m);
}

// ---------------------------------------------------------------------------------------------
// hand-computed aux, z, entropy (values from the formulas in docs/architecture.md, computed in
// double by hand for these 4 tokens; python one-liner in the comment)

static void test_aux_z_by_hand(void) {
    // d_model = E = 4 and W_r = I, so the router logits are the rows of X:
    //   token 0: [2, 1, 0, -1] -> experts {0, 1};   token 1: [0, 3, 1, 0.5] -> {1, 2}
    //   token 2: [1, 0, 0.5, 2] -> {3, 0};          token 3: [-1, 0.2, 0, 1] -> {3, 1}
    // counts = [2, 3, 1, 2] of 8 slots: f = [0.25, 0.375, 0.125, 0.25]
    // softmax: P = [0.24140317, 0.33363467, 0.12790069, 0.29706147]
    //          aux = 4 * sum f_i P_i = 1.102866989857; entropy (mean) = 0.991947661882
    // sigmoid: P (s / sum s) = [0.23667716, 0.27440642, 0.23552717, 0.25338925]
    //          aux = 1.019439625133; entropy = 1.339891704481
    // z = mean lse^2 = 6.424913514277 (both routers: lse of the logits)
    const float X[16] = {2, 1, 0, -1, 0, 3, 1, 0.5f, 1, 0, 0.5f, 2, -1, 0.2f, 0, 1};
    const double want_aux[2] = {1.102866989857, 1.019439625133}, want_ent[2] = {0.991947661882, 1.339891704481};
    const double want_z = 6.424913514277;
    for (int kind = 0; kind < 2; kind++) {
        ModelConfig mc = moe_config(4, 4, 2, 3, 0, 0, (RouterKind)kind, 0.0f);
        mc.n_head = 1; mc.n_kv_head = 1; mc.head_dim = 4;
        GPT m;
        gpt_build(&m, &mc, 1);
        gpt_alloc_acts(&m, 1, 4);
        float* wr = m.w.layer[0].router;
        for (int i = 0; i < 16; i++) wr[i] = (i % 5 == 0) ? 1.0f : 0.0f;   // identity
        memcpy(m.layer[0].ln2, X, sizeof X);
        float out[16] = {0};
        gpt_zero_grad(&m);
        double loss = moe_forward(&m, 0, out);
        const MoeStats* st = &m.moe_stats[0];
        const char* kn = kind ? "sigmoid" : "softmax";
        TU_CHECK(st->counts[0] == 2 && st->counts[1] == 3 && st->counts[2] == 1 && st->counts[3] == 2,
                 "%s: counts %ld %ld %ld %ld", kn, st->counts[0], st->counts[1], st->counts[2], st->counts[3]);
        double ea = fabs(st->aux - want_aux[kind]), ez = fabs(st->z - want_z);
        double ee = fabs(moe_entropy(st) - want_ent[kind]), es = fabs(moe_step_aux(st) - want_aux[kind]);
        double el = fabs(loss - (0.3 * want_aux[kind] + 0.05 * want_z));
        // derived from float32 probabilities and lse (~5 roundings each, u = 6e-8): aux (~1.1) and the
        // entropy (~1) within ~10u = 6e-7 < 1e-6; z = mean lse^2 within ~10u relative: 1e-6 z (was
        // 1e-5 z: 280x over the measured 3.6e-8 z, on all three ISAs); the weighted loss within
        // 0.3 (aux) + 0.05 (z) of those; max/mean load is integer counts (exact: 1e-12)
        TU_CHECK(ea < 1e-6 && es < 1e-6, "%s: aux %.9f (step %.9f) want %.9f", kn, st->aux, moe_step_aux(st), want_aux[kind]);
        TU_CHECK(ez < 1e-6 * want_z, "%s: z %.9f want %.9f", kn, st->z, want_z);
        TU_CHECK(ee < 1e-6, "%s: entropy %.9f want %.9f", kn, moe_entropy(st), want_ent[kind]);
        TU_CHECK(el < 1e-6, "%s: weighted loss %.9f want %.9f", kn, loss, 0.3 * want_aux[kind] + 0.05 * want_z);
        TU_CHECK(fabs(moe_max_load(st) - 1.5) < 1e-12, "%s: max/mean load %.4f want 1.5", kn, moe_max_load(st));
        printf("  hand check %-7s aux %.9f (err %.1e, step %.1e)  z %.9f (err %.1e)  entropy %.9f (err %.1e)  loss err %.1e"
               "  max/mean load %.2f (err %.1e)\n", kn, st->aux, ea, es, st->z, ez, moe_entropy(st), ee, el,
               moe_max_load(st), fabs(moe_max_load(st) - 1.5));
        gpt_free(&m);
    }
}

// ---------------------------------------------------------------------------------------------
// capacity: 8 tokens, 4 experts, capacity_factor 1 -> ceil(1 * 8 * k / 4) slots per expert

static void test_capacity(int k) {
    ModelConfig mc = moe_config(4, 4, k, 3, 0, 0, ROUTER_SOFTMAX_TOPK, 1.0f);
    mc.n_head = 1; mc.n_kv_head = 1; mc.head_dim = 4;
    GPT m;
    gpt_build(&m, &mc, 2);
    gpt_alloc_acts(&m, 1, 8);
    float* wr = m.w.layer[0].router;
    for (int i = 0; i < 16; i++) wr[i] = (i % 5 == 0) ? 1.0f : 0.0f;
    // first choices: tokens 0, 2, 3, 5, 6 -> expert 0; 1 -> 1; 4 -> 2; 7 -> 3.
    // second choices (k = 2): expert (first + 1) % 4 for every token.
    const int first[8] = {0, 1, 0, 0, 2, 0, 0, 3};
    float* X = m.layer[0].ln2;
    for (int n = 0; n < 8; n++)
        for (int i = 0; i < 4; i++)
            X[n * 4 + i] = i == first[n] ? 3.0f : i == (first[n] + 1) % 4 ? 2.0f : 0.1f * i;
    float out[32] = {0};
    gpt_zero_grad(&m);
    moe_forward(&m, 0, out);
    const LayerActs* a = &m.layer[0];
    const MoeStats* st = &m.moe_stats[0];
    int cap = moe_capacity(&mc.moe, 8);
    // expected: expert 0 keeps its first `cap` slots in token order, drops the rest
    int want_dropped = 0, ok = 1;
    int taken[4] = {0};
    for (int n = 0; n < 8; n++)
        for (int j = 0; j < k; j++) {
            int e = j == 0 ? first[n] : (first[n] + 1) % 4;
            int keep = taken[e] < cap;
            if (keep) taken[e]++; else want_dropped++;
            ok &= a->topk_idx[n * k + j] == e && ((a->slot_row[n * k + j] >= 0) == keep);
        }
    TU_CHECK(ok, "capacity k=%d: dropped slots differ from first-come-first-served in token order", k);
    TU_CHECK(st->dropped == want_dropped && st->capacity == cap, "capacity k=%d: dropped %ld want %d (capacity %d)",
             k, st->dropped, want_dropped, cap);
    // a dropped slot contributes nothing: out[n] = sum over the kept slots only
    double worst = 0.0;
    for (int n = 0; n < 8; n++)
        for (int c = 0; c < 4; c++) {
            double want = 0.0;
            for (int j = 0; j < k; j++) {
                int r = a->slot_row[n * k + j];
                if (r >= 0) want += (double)a->topk_w[n * k + j] * a->yp[r * 4 + c];
            }
            worst = fmax(worst, fabs(out[n * 4 + c] - want));
        }
    // derived: k <= 2 float products and sums of |w| <= 1, |yp| < ~1: ~3 roundings, 3u = 1.8e-7 < 1e-6
    TU_CHECK(worst < 1e-6, "capacity k=%d: output of dropped slots not excluded (err %.2e)", k, worst);
    if (k == 1) {   // tokens 3, 5, 6 lose their only expert: their MoE output is exactly 0
        int zero = 1;
        for (int c = 0; c < 4; c++) zero &= out[3 * 4 + c] == 0.0f && out[5 * 4 + c] == 0.0f && out[6 * 4 + c] == 0.0f;
        TU_CHECK(zero, "capacity k=1: dropped tokens 3, 5, 6 must get no expert output");
    }
    printf("  capacity k=%d: capacity %d slots/expert, expert 0 chosen by %ld slots, dropped %ld (expected %d); "
           "output vs kept slots err %.2e (tol 1e-6)\n", k, cap, st->counts[0], st->dropped, want_dropped, worst);
    gpt_free(&m);
}

// ---------------------------------------------------------------------------------------------
// the tiny MoE model against finite differences of its objective (loss + moe_loss)

typedef struct { GPT* m; int *idx, *tg; int** idx0; int flips; } ModelCtx;
static double model_loss(void* v) {
    ModelCtx* c = v;
    double L = gpt_forward(c->m, c->idx, c->tg) + c->m->moe_loss;
    const int N = c->m->B * c->m->T, k = c->m->cfg.moe.top_k;
    for (int l = 0; l < c->m->cfg.n_layer; l++)
        if (c->idx0[l] && !same_routing(c->m->layer[l].topk_idx, c->idx0[l], N, k)) c->flips++;
    return L;
}

// smallest gap between the k-th and (k+1)-th router logit over tokens and MoE layers (after a forward)
static float model_min_gap(GPT* m) {
    const int N = m->B * m->T, E = m->cfg.moe.n_expert, k = m->cfg.moe.top_k;
    float gap = INFINITY;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!config_layer_is_moe(&m->cfg, l)) continue;
        for (int n = 0; n < N; n++) {
            float g = topk_gap(m->layer[l].router_logits + (size_t)n * E, E, k);
            if (g < gap) gap = g;
        }
    }
    return gap;
}

static void test_model(const char* name, ModelConfig mc) {
    const int B = 2, T = 8, N = B * T;
    int idx[16], tg[16];
    GPT m;
    // pick the first seed whose routing has no near-ties (perturbations of h move a router logit
    // by ~h |x| < 0.05)
    float gap = 0.0f;
    unsigned long long seed = 0;
    for (seed = 1; seed <= 60; seed++) {
        gpt_build(&m, &mc, seed);
        gpt_alloc_acts(&m, B, T);
        for (int i = 0; i < m.table.n; i++) {
            const ParamInfo* p = &m.table.p[i];
            if (p->ndim != 1) continue;
            tu_fill(m.params + p->offset, p->numel, 0.3);
            for (size_t j = 0; j < p->numel; j++) m.params[p->offset + j] += 1.0f;
        }
        for (int i = 0; i < N; i++) { idx[i] = (int)((tu_rand() * 0.5 + 0.5) * mc.vocab_size) % mc.vocab_size; tg[i] = (i * 7 + 3) % mc.vocab_size; }
        gpt_forward(&m, idx, tg);
        gap = model_min_gap(&m);
        if (gap > 0.1f) break;
        gpt_free(&m);
    }
    TU_CHECK(gap > 0.1f, "model %s: no seed without near-tied routing", name);
    if (!(gap > 0.1f)) return;
    int* idx0[8] = {0};
    const int k = mc.moe.top_k;
    ModelCtx c = {&m, idx, tg, idx0, 0};
    gpt_zero_grad(&m);
    gpt_forward(&m, idx, tg);
    gpt_backward(&m, 1.0f);
    for (int l = 0; l < mc.n_layer; l++)
        if (config_layer_is_moe(&mc, l)) {
            idx0[l] = malloc(sizeof(int) * N * k);
            memcpy(idx0[l], m.layer[l].topk_idx, sizeof(int) * N * k);
        }
    long dropped = 0;
    for (int l = 0; l < mc.n_layer; l++) dropped += m.moe_stats[l].dropped;
    printf("  model %s: seed %llu, smallest top-k logit gap %.3f, moe_loss %.4f, dropped slots %ld\n", name, seed,
           gap, m.moe_loss, dropped);
    // Upstream parameters move every router logit by a few % of its size under a perturbation
    // of h; with the seed's top-k gaps no sample may cross a routing boundary (a swap of order
    // inside a token's top-k is not one).
    double worst = 0.0;
    int skipped = 0, samples = 0;
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        char nm[96];
        snprintf(nm, sizeof nm, "model %s: %s", name, p->name);
        double e = fd_check_flips(nm, m.params + p->offset, p->numel, m.grads + p->offset, model_loss, &c,
                                  FD_TOL_MODEL, &c.flips, &skipped);
        samples += p->numel <= FD_SAMPLES ? (int)p->numel : (int)((p->numel + p->numel / FD_SAMPLES - 1) / (p->numel / FD_SAMPLES));
        if (e > worst) worst = e;
    }
    TU_CHECK(skipped == 0, "model %s: %d of ~%d samples changed the routing", name, skipped, samples);
    printf("  model %s: worst fd rel err %.2e over %d tensors (%d of ~%d samples skipped)\n", name, worst, m.table.n,
           skipped, samples);
    for (int l = 0; l < 8; l++) free(idx0[l]);
    gpt_free(&m);
}

// ---------------------------------------------------------------------------------------------
// determinism: the layer's outputs and gradients are the same bits for 1 and 2 threads

static void run_layer_once(ModelConfig mc, float* out, float* dX, float* grads) {
    GPT m;
    tu_state = 12345;
    layer_setup(&m, mc, 2, 16, 0.0f);
    const int N = 32, d = mc.d_model;
    float* r = malloc(sizeof(float) * N * d);
    tu_fill(r, (size_t)N * d, 1.0);
    gpt_zero_grad(&m);
    memset(out, 0, sizeof(float) * N * d);
    moe_forward(&m, 0, out);
    memcpy(m.dres, r, sizeof(float) * N * d);
    moe_backward(&m, 0, 1.0f);
    memcpy(dX, m.dnorm, sizeof(float) * N * d);
    memcpy(grads, m.grads, sizeof(float) * m.table.total);
    free(r);
    gpt_free(&m);
}

static void test_threads(void) {
    ModelConfig mc = moe_config(16, 8, 2, 12, 1, 1, ROUTER_SOFTMAX_TOPK, 1.25f);
    GPT probe;
    gpt_build(&probe, &mc, 5);
    size_t total = probe.table.total;
    gpt_free(&probe);
    const size_t Nd = 32 * 16;
    float *o1 = malloc(Nd * 4), *o2 = malloc(Nd * 4), *x1 = malloc(Nd * 4), *x2 = malloc(Nd * 4);
    float *g1 = malloc(total * 4), *g2 = malloc(total * 4);
    ops_init(1);
    run_layer_once(mc, o1, x1, g1);
    ops_init(2);
    run_layer_once(mc, o2, x2, g2);
    ops_init(1);
    int same = memcmp(o1, o2, Nd * 4) == 0 && memcmp(x1, x2, Nd * 4) == 0 && memcmp(g1, g2, total * 4) == 0;
    TU_CHECK(same, "MoE layer: 1 and 2 threads give different bits (out %d, dX %d, grads %d)",
             memcmp(o1, o2, Nd * 4) != 0, memcmp(x1, x2, Nd * 4) != 0, memcmp(g1, g2, total * 4) != 0);
    printf("  threads: layer forward + backward bitwise identical for 1 and 2 threads: %s\n", same ? "yes" : "NO");
    free(o1); free(o2); free(x1); free(x2); free(g1); free(g2);
}

// ---------------------------------------------------------------------------------------------
// the step's statistics accumulate over micro-steps (the aux loss's f is over the step's
// global batch), and with aux off two micro-steps of B=1 give the gradient of one of B=2

static void test_micro_steps(void) {
    ModelConfig mc = moe_config(16, 4, 2, 12, 1, 0, ROUTER_SOFTMAX_TOPK, 0.0f);
    mc.n_layer = 2; mc.max_seq_len = 8;
    const int T = 8;
    int idx[16], tg[16];
    for (int i = 0; i < 16; i++) { idx[i] = (i * 13 + 5) % 50; tg[i] = (i * 7 + 3) % 50; }
    for (int aux_on = 0; aux_on <= 1; aux_on++) {
        mc.moe.aux_loss_coef = aux_on ? 0.3f : 0.0f;
        GPT big, small;
        gpt_build(&big, &mc, 3); gpt_alloc_acts(&big, 2, T);
        gpt_build(&small, &mc, 3); gpt_alloc_acts(&small, 1, T);
        gpt_zero_grad(&big);
        gpt_forward(&big, idx, tg);
        gpt_backward(&big, 1.0f);
        gpt_zero_grad(&small);
        double aux_first = 0.0;
        for (int micro = 0; micro < 2; micro++) {
            gpt_forward(&small, idx + micro * T, tg + micro * T);
            if (micro == 0) aux_first = small.moe_stats[1].aux;
            gpt_backward(&small, 0.5f);
        }
        for (int l = 0; l < 2; l++) {
            const MoeStats *b = &big.moe_stats[l], *s = &small.moe_stats[l];
            int same = b->step_slots == s->step_slots && b->step_tokens == s->step_tokens;
            for (int i = 0; i < 4; i++) same &= b->step_counts[i] == s->step_counts[i];
            TU_CHECK(same, "layer %d: step counts over 2 micro-steps differ from one batch", l);
            // derived: the same float probabilities / lse summed in double in 2 parts vs 1, but the
            // two runs' float forwards may round differently: ~10u of aux (~1.3) and z, 1e-6 / 1e-5
            double da = fabs(moe_step_aux(b) - moe_step_aux(s)), dz = fabs(moe_step_z(b) - moe_step_z(s));
            TU_CHECK(da < 1e-6 && dz < 1e-5, "layer %d: step aux %.8f vs %.8f, z %.8f vs %.8f", l,
                     moe_step_aux(b), moe_step_aux(s), moe_step_z(b), moe_step_z(s));
            printf("  micro-steps (aux %s) layer %d: step aux diff %.2e (tol 1e-6), step z diff %.2e (tol 1e-5)\n",
                   aux_on ? "on" : "off", l, da, dz);
        }
        // the second micro-step's aux uses f over both micro-steps: recompute it by hand
        const MoeStats* s = &small.moe_stats[1];
        double want = 0.0;
        for (int i = 0; i < 4; i++) want += (s->step_counts[i] / s->step_slots) * (s->p_sum[i] / T);
        want *= 4;
        // derived: the same double formula over the same counts and sums, other order: ~10 u_double
        TU_CHECK(fabs(s->aux - want) < 1e-12, "micro-step 2 aux %.9f, want %.9f (f over the step so far)", s->aux, want);
        printf("  micro-steps (aux %s): micro-step 2 aux vs recomputed err %.2e (tol 1e-12)\n", aux_on ? "on" : "off",
               fabs(s->aux - want));
        double e = tu_rel_err(small.grads, big.grads, big.table.total);
        if (!aux_on) {
            // derived: the weight gradients' token sums (16 tokens) split in 2, through 2 layers:
            // ~2 x 16 x 3 u = 6e-6 < 1e-5; measured 4.0e-7 (AVX2), 3.3e-7 (SSE41), 2.6e-7 (AVX)
            TU_CHECK(e < 1e-5, "aux off: 2 micro-steps of B=1 vs one B=2: grads rel err %.2e", e);
            printf("  micro-steps (aux off): grads of 2 x B=1 vs 1 x B=2 rel err %.2e; step aux %.6f = %.6f\n", e,
                   moe_step_aux(&big.moe_stats[1]), moe_step_aux(&small.moe_stats[1]));
        } else {
            printf("  micro-steps (aux on): step statistics equal; micro-step 1 aux %.6f (its own f), micro-step 2 "
                   "aux %.6f (f over both); grads vs one batch differ by %.2e (f of micro-step 1 is partial)\n",
                   aux_first, s->aux, e);
        }
        gpt_free(&big); gpt_free(&small);
    }
}

// ---------------------------------------------------------------------------------------------
// FLOP accounting: matmul params count the active experts only

static void test_active_params(void) {
    ModelConfig mc = moe_config(16, 8, 2, 12, 1, 1, ROUTER_SOFTMAX_TOPK, 0.0f);
    mc.n_layer = 3; mc.moe.moe_every = 2;   // layer 1 is MoE, layers 0 and 2 dense
    double d = 16, attn = (2 * 8 + 2 * 2 * 8) * d + d * 16, dense = 3 * d * 24;
    double moe = 8 * d + 2 * 3 * d * 12 + 3 * d * 14 + d;   // router + top-2 experts + shared + gate
    double want = 3 * attn + 2 * dense + moe + 128 * d;
    double got = gpt_matmul_params(&mc);
    TU_CHECK(got == want, "active matmul params %.0f want %.0f", got, want);
    GPT m;
    gpt_build(&m, &mc, 1);
    const ParamInfo* p = param_find(&m.table, "h.1.moe.w_in");
    TU_CHECK(p && p->ndim == 3 && p->shape[0] == 8 && p->shape[1] == 24 && p->shape[2] == 16 && p->decay,
             "h.1.moe.w_in is [E, 2 d_expert, d], decayed");
    p = param_find(&m.table, "h.1.moe.w_out");
    TU_CHECK(p && p->residual_proj && p->shape[0] == 8 && p->shape[1] == 16 && p->shape[2] == 12, "h.1.moe.w_out [E, d, d_expert]");
    TU_CHECK(param_find(&m.table, "h.0.mlp.w_in") && param_find(&m.table, "h.2.mlp.w_out") &&
             !param_find(&m.table, "h.1.mlp.w_in") && param_find(&m.table, "h.1.moe.shared_gate"),
             "dense layers keep mlp.*, the MoE layer has moe.*");
    printf("  active matmul params: %.0f (all params %zu)\n", got, m.table.total);
    gpt_free(&m);
}

int main(void) {
    // one thread: these tests check the math, and thousands of tiny forward passes are cheap on
    // one thread but pay an OpenMP barrier per op on several (ruinous on a shared machine);
    // test_threads compares 1 and 2 threads explicitly
    ops_init(1);
    printf("MoE: finite differences (h=%g, tolerance %g for ops and the layer, %g for the model)\n", FD_H, FD_TOL, FD_TOL_MODEL);
    for (int kind = 0; kind < 2; kind++) {
        test_router((OpsRouter)kind, 0, 0, 1);
        test_router((OpsRouter)kind, 1, 0, 0);
        test_router((OpsRouter)kind, 0, 1, 0);
        test_router((OpsRouter)kind, 1, 1, 1);
    }
    test_router_ties();
    test_gather_combine(0);
    test_gather_combine(4);
    test_grouped_matmul();
    test_sigmoid_gate();

    test_layer("softmax", moe_config(8, 6, 2, 5, 0, 0, ROUTER_SOFTMAX_TOPK, 0.0f), 1);
    test_layer("sigmoid", moe_config(8, 6, 2, 5, 0, 0, ROUTER_SIGMOID_TOPK, 0.0f), 1);
    test_layer("softmax+shared+gate", moe_config(8, 6, 2, 5, 1, 1, ROUTER_SOFTMAX_TOPK, 0.0f), 1);
    test_layer("sigmoid+shared", moe_config(8, 6, 3, 5, 1, 0, ROUTER_SIGMOID_TOPK, 0.0f), 1);
    test_layer("softmax capacity 0.75", moe_config(8, 6, 2, 5, 1, 1, ROUTER_SOFTMAX_TOPK, 0.75f), 1);
    test_layer("softmax aux+z only", moe_config(8, 6, 2, 5, 0, 0, ROUTER_SOFTMAX_TOPK, 0.0f), 0);
    test_layer("sigmoid aux+z only", moe_config(8, 6, 2, 5, 0, 0, ROUTER_SIGMOID_TOPK, 0.0f), 0);

    test_aux_z_by_hand();
    test_capacity(1);
    test_capacity(2);
    test_threads();
    test_micro_steps();
    test_active_params();

    // tiny models: qwen-style 2 layers, MoE in both (or in layer 1), all variants of the block
    ModelConfig q = {0};
    q.vocab_size = 50; q.padded_vocab = 128; q.n_layer = 2; q.d_model = 16; q.n_head = 4;
    q.n_kv_head = 2; q.head_dim = 4; q.d_ff = 24; q.max_seq_len = 8; q.pos = POS_ROPE;
    q.rope_base = 10000; q.norm = NORM_RMSNORM; q.norm_eps = 1e-5f; q.qk_norm = 1;
    q.mlp = MLP_SWIGLU; q.tie_embeddings = 0; q.init_std = 0.3f;
    q.moe.n_expert = 4; q.moe.top_k = 2; q.moe.d_expert = 8; q.moe.moe_every = 1;
    q.moe.aux_loss_coef = 0.1f; q.moe.z_loss_coef = 0.01f;
    test_model("softmax", q);
    ModelConfig v = q;
    v.moe.router = ROUTER_SIGMOID_TOPK; v.moe.n_shared_expert = 1; v.moe.d_shared_expert = 12;
    v.moe.shared_expert_gate = 1; v.attn_gate = GATE_ELEMENTWISE;
    test_model("sigmoid+shared+gate, elementwise", v);
    v = q;
    v.moe.moe_every = 2; v.moe.n_shared_expert = 1; v.moe.d_shared_expert = 8; v.attn_gate = GATE_HEADWISE;
    v.moe.capacity_factor = 1.0f;
    test_model("moe_every=2 capacity 1, headwise", v);
    v = q;
    v.mlp = MLP_GELU; v.norm = NORM_LAYERNORM; v.pos = POS_LEARNED; v.qk_norm = 0; v.tie_embeddings = 1;
    v.moe.top_k = 1;
    test_model("gelu experts top-1 (gpt2 style)", v);
    return tu_finish();
}
