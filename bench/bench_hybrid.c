// bench/bench_hybrid.c: hybrid layers (issue #22) against full attention over the sequence length
// (bench/README.md, "bench_hybrid"; docs/performance.md, "Hybrid layers").
//
//   ./build/bench_hybrid [--seq 256,1024,4096] [--tokens 8192] [--steps 3] [--warmup 1] [--reps 5]
//                        [--pattern LLLA] [--threads N] [--set section.key=value ...] [--json PATH]
//                        [--busy-max PCT] [--max-tries K] [--wait-idle S]
//   ./build/bench_hybrid --smoke       tiny shape, 2 lengths, 1 warm-up + 2 steps, no waiting (CI)
//
// Three measurements per sequence length T (B = tokens / T, so every row trains on the same
// number of tokens per step):
//  1. The training step (zero grad, forward, backward, grad norm, AdamW) of one small model with
//     layer_pattern = "" (every layer full attention) and with layer_pattern = LLLA (3 Gated
//     DeltaNet layers per full-attention layer), the attention layers gated elementwise (sdpa,
//     sigmoid) in both. The two run in forked workers stepped in turn (full, hybrid, full, ...:
//     bench_step.c's rotation), so a slow period of the machine hits both; steps during which
//     other processes used more than --busy-max of the CPUs are retaken; medians.
//  2. The delta rule's ops alone on the hybrid's linear-layer shape at that B x T: ops_gdn_forward
//     chunked (the training forward) and recurrent, ops_gdn_backward; achieved GFLOP/s against
//     the CPU's measured fp32 FMA peak (ops_peak_flops), with the FLOPs counted as below.
//  3. Memory: each worker's peak RSS against an analytic count written here from the math (what
//     the backward reads, tensor by tensor: analytic_acts), independent of model/gpt.c's
//     acts_plan; and the activation arena the model allocates (gpt_acts_bytes) against the same
//     count. The arena of a hybrid model must stay within 1.2x of the count (exit status).
//
// The parent never calls into the backend (no OpenMP before fork): the workers, the kernel
// timing child and the peak probe are forked children.
#include "bench_train.h"
#include "../kernels/scratch.h"   // cpu_gdn_chunk_saved_floats

// ---------------------------------------------------------------------------------------------
// the model

// A small Qwen-style model, so that a step of 8192 tokens at T = 4096 takes a few seconds on
// 2 cores: 4 layers (LLLA: 3 linear + 1 attention), d 256, 4 query / 2 KV heads x 64, QK-norm,
// RoPE, SwiGLU d_ff 768, vocab 4096. The delta rule's shape is the linear_* defaults: 4 value
// heads (n_head) x dv 64, 2 key heads x dk 64, conv width 4, SiLU output gate, chunks of 64.
static const char* SHAPE_KEYS[] = {
    "model.vocab_size=4096", "model.n_layer=4", "model.d_model=256", "model.n_head=4",
    "model.n_kv_head=2", "model.head_dim=64", "model.d_ff=768", "model.max_seq_len=4096",
    "model.pos=rope", "model.norm=rmsnorm", "model.qk_norm=true", "model.mlp=swiglu",
    "model.tie_embeddings=false", "train.seed=1337", "train.lr=1e-3", "train.grad_clip=1.0",
    "train.tokens_per_step=0",
};
// --smoke: the same layout, tiny (d 64, 4 heads x 16; dk = dv = 16)
static const char* SMOKE_KEYS[] = {
    "model.vocab_size=256", "model.n_layer=4", "model.d_model=64", "model.n_head=4",
    "model.n_kv_head=2", "model.head_dim=16", "model.d_ff=128", "model.max_seq_len=128",
    "model.pos=rope", "model.norm=rmsnorm", "model.qk_norm=true", "model.mlp=swiglu",
    "model.tie_embeddings=false", "train.seed=1337", "train.lr=1e-3", "train.grad_clip=1.0",
    "train.tokens_per_step=0",
};
#define NKEYS(a) (sizeof(a) / sizeof((a)[0]))

static int resolve(Bench* b, const Opts* o, const char* pattern, int B, int T) {
    Config* c = &b->cfg;
    config_defaults(c);
    const char** keys = o->smoke ? SMOKE_KEYS : SHAPE_KEYS;
    size_t nk = o->smoke ? NKEYS(SMOKE_KEYS) : NKEYS(SHAPE_KEYS);
    for (size_t i = 0; i < nk; i++)
        if (config_apply_override(c, keys[i]) != 0) return -1;
    char g[3][64], kv[96];
    gate_overrides(GATE_ELEMENTWISE, g);
    for (int i = 0; i < 3; i++)
        if (config_apply_override(c, g[i]) != 0) return -1;
    sfmt(kv, sizeof(kv), "model.layer_pattern=%s", pattern);
    if (config_apply_override(c, kv) != 0) return -1;
    sfmt(kv, sizeof(kv), "train.batch_size=%d", B);
    if (config_apply_override(c, kv) != 0) return -1;
    sfmt(kv, sizeof(kv), "train.seq_len=%d", T);
    if (config_apply_override(c, kv) != 0) return -1;
    // --set: both models, except the linear layers' keys (model.linear_*), which the full-
    // attention model rejects ("has no effect"): those go to the hybrid only
    for (int i = 0; i < o->n_sets; i++) {
        if (!pattern[0] && strncmp(o->sets[i], "model.linear_", 13) == 0) continue;
        if (config_apply_override(c, o->sets[i]) != 0) return -1;
    }
    if (config_finalize(c, "bench_hybrid") != 0) return -1;
    if (c->model.moe.n_expert > 0) {
        fprintf(stderr, "error: bench_hybrid's analytic memory count covers dense MLPs only ([moe] n_expert = 0)\n");
        return -1;
    }
    ParamTable t;
    param_table_build(&t, &c->model);
    b->table_total = t.total;
    b->n_params = 0;
    for (int i = 0; i < t.n; i++) b->n_params += t.p[i].numel;
    param_table_free(&t);
    b->flops_tok = gpt_flops_per_token(&c->model, T);
    b->matmul_params = gpt_matmul_params(&c->model);
    b->gate = GATE_ELEMENTWISE;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// memory: the analytic count

// Activation memory of one training step from the math, independent of model/gpt.c's acts_plan:
// per token, every tensor the backward reads (kept from the forward, none recomputed), then the
// backward's own buffers (one set, reused by every layer), in floats (the CPU backend keeps
// everything in fp32) and ints. d = d_model; attention: H query / Hkv KV heads of hd, Hd = H hd,
// KVd = Hkv hd, G gate columns (elementwise sdpa: Hd; headwise: H; none: 0); linear layers: Hk
// key heads of dk, Hv value heads of dv, Kd = Hk dk, Vd = Hv dv, Cc = 2 Kd + Vd; MLP width F,
// Fin = 2F (SwiGLU) or F; Vp the padded vocabulary.
typedef struct {
    double resid;      // the L + 1 residual streams (each layer's input, the final one)        [d]
    double attn;       // attention layers, all of them
    double linear;     // Gated DeltaNet layers, all of them
    double mlp;        // each layer's mid-residual, norm2 and MLP tensors
    double head;       // final norm, logits, losses, logsumexp
    double bwd;        // the backward's buffers
    double ids;        // ints: the step's input and target token ids in backend memory
    double attn_tok, linear_tok;   // one layer's saved floats per token
    double floats;     // resid + attn + linear + mlp + head + bwd
    double gdn_scratch;// floats: the delta rule's per-thread state scratch (outside the arena)
} MemCount;

static MemCount analytic_acts(const ModelConfig* c, int B, int T, int threads) {
    MemCount m = {0};
    const double N = (double)B * T, d = c->d_model, L = c->n_layer;
    const double H = c->n_head, Hkv = c->n_kv_head, hd = c->head_dim, Hd = H * hd, KVd = Hkv * hd;
    const int sdpa = c->gate_position == GATEPOS_SDPA;
    const double G = c->attn_gate == GATE_ELEMENTWISE ? (sdpa ? H : Hkv) * hd
                   : c->attn_gate == GATE_HEADWISE ? (sdpa ? H : Hkv) : 0.0;
    const double Hk = c->linear_n_k_head, Hv = c->linear_n_v_head, dk = c->linear_k_head_dim, dv = c->linear_v_head_dim;
    const double Kd = Hk * dk, Vd = Hv * dv, Cc = 2 * Kd + Vd;
    const double F = c->d_ff, Fin = c->mlp == MLP_SWIGLU ? 2 * F : F;
    const double stats = c->norm == NORM_LAYERNORM ? 2.0 : 1.0;   // rstd (+ mean for LayerNorm)
    const double norm1 = d + stats;                                // X = norm1(x): the GEMMs' input
    // attention: qkv = X [Wq|Wk|Wv|Wg]^T (q, k before QK-norm: its backward; gate logits: the
    // gate's), q k v after QK-norm and RoPE (attention backward), QK-norm's rstd, y (attention
    // backward's rowsum(dy o y), the gate's backward), y * gate (wo's input), the rows' logsumexp
    m.attn_tok = norm1 + (Hd + 2 * KVd + G) + (Hd + 2 * KVd) + (c->qk_norm ? H + Hkv : 0.0) + Hd +
                 (G > 0 && sdpa ? Hd : 0.0) + H;
    // Gated DeltaNet: xqkv = X W_qkv^T (the conv's weight gradient), the conv's output before
    // SiLU (SiLU's), xc = [q | k | v] after SiLU (L2 norm's input; v is the delta rule's), q, k
    // after the L2 norm (delta rule) and their 1/norms, z = X W_z^T (the output gate), ba = X W_ba^T
    // (the decay and beta gates), g and beta (delta rule), o (the gated norm's input) and its rstd,
    // on = rmsnorm(o) w act(z) (W_out's input); with the chunked form on a backend that keeps
    // them (ops_gdn_keeps_saved), what the delta rule keeps for its backward: the corrected values
    // Vn (Vd per token) and the state at each chunk's start (Hv dk dv per ceil(T / C) chunks)
    const double Cg = c->linear_chunk;
    const double gdn_kept = Cg > 0 && ops_gdn_keeps_saved()
                                ? Vd + Hv * (double)c->linear_k_head_dim * c->linear_v_head_dim * ceil(T / Cg) / T : 0.0;
    m.linear_tok = norm1 + 3 * Cc + (2 * Kd + 2 * Hk) + Vd + 2 * Hv + 2 * Hv + (Vd + Hv) + Vd + gdn_kept;
    int n_lin = 0;
    for (int l = 0; l < c->n_layer; l++) n_lin += config_layer_is_linear(c, l);
    const int n_attn = c->n_layer - n_lin;
    m.resid = (L + 1) * d * N;
    m.attn = n_attn * m.attn_tok * N;
    m.linear = n_lin * m.linear_tok * N;
    // every layer: the residual after the mixer (norm2's input), norm2's output, the MLP's
    // pre-activation (its backward) and activation (w_out's input)
    m.mlp = L * (d + (d + stats) + Fin + F) * N;
    // final norm, the logits (overwritten by their gradient in the backward), loss and logsumexp
    m.head = ((d + stats) + c->padded_vocab + 2) * N;
    // the backward: dL/dx (residual) and dL/dX (a norm's input gradient; d or Hd wide: it also
    // holds wo's input gradient); attention: d(qkv), dq dk dv, d(y * gate), d(y); linear: d(on),
    // d(o), d(z), d(q, k normed), d(xc), d(xqkv), dg, dbeta, d(ba), and a second dL/dX to sum the
    // three projections' input gradients; MLP: d(pre-activation), d(activation)
    double bwd_tok = d + (d > Hd ? d : Hd) + Fin + F;
    if (n_attn) bwd_tok += (Hd + 2 * KVd + G) + (Hd + 2 * KVd) + Hd + Hd;
    if (n_lin) bwd_tok += 3 * Vd + 2 * Kd + 2 * Cc + 2 * Hv + 2 * Hv + d;
    m.bwd = bwd_tok * N;
    m.ids = 2 * N;
    m.floats = m.resid + m.attn + m.linear + m.mlp + m.head + m.bwd;
    // the delta rule's per-thread scratch, not in the arena. Chunked (kernels/cpu/deltanet_chunk.c,
    // chunks of C, a thread's task a key head with its rep = Hv / Hk value heads): the backward
    // keeps, when the forward kept nothing, per value head and chunk the state at its start and a
    // Vn [C, dv] for its reverse pass; then a state gradient per value head, and one chunk's
    // working set (2 states, 10 [C, C], 9 [C, dk], 4 [C, dv], 5 [C]); the forward rep states and
    // one more (the kept state's staging), 5 [C, C], 5 [C, dk], 3 [C, dv], 3 [C]. Recurrent: the
    // backward's checkpoints every 64 tokens and the 64 states of one chunk (+ 3 working states),
    // the forward one state. Whichever is larger.
    if (n_lin) {
        const double ss = dk * dv, C = c->linear_chunk, rep = Hv / Hk;
        double bwd_s, fwd_s;
        if (C > 0) {
            const double stored = ops_gdn_keeps_saved() ? 0.0 : ceil(T / C) * (ss + C * dv);
            bwd_s = rep * (stored + ss) + 2 * ss + 10 * C * C + 9 * C * dk + 4 * C * dv + 5 * C;
            fwd_s = (rep + 1) * ss + 5 * C * C + 5 * C * dk + 3 * C * dv + 3 * C;
        } else {
            bwd_s = (ceil(T / 64.0) + 64 + 3) * ss + 4 * dv;
            fwd_s = ss + 2 * dv;
        }
        m.gdn_scratch = threads * (bwd_s > fwd_s ? bwd_s : fwd_s);
    }
    return m;
}

// 16 bytes per parameter: the parameters, their gradients, AdamW's m and v (fp32)
static double params_state_bytes(const Bench* b) { return 16.0 * (double)b->n_params; }
// the analytic total a worker's peak RSS is compared with: the parameter state, the analytic
// activations and token ids, the host copy of the token batch (inputs, targets), and the delta
// rule's per-thread scratch
static double analytic_total_bytes(const Bench* b, const MemCount* m) {
    const double N = (double)b->cfg.train.batch_size * b->cfg.train.seq_len;
    return params_state_bytes(b) + 4.0 * (m->floats + m->ids) + 4.0 * 2 * N + 4.0 * m->gdn_scratch;
}

// ---------------------------------------------------------------------------------------------
// the delta rule's ops alone

// FLOPs, per (sequence, value head), two counts. Multiply-adds count 2, lone multiplies 1; the
// O(dk + dv) vector work per token (beta (v - u), the output scale, exp of the gates) is not
// counted. dk, dv: the state's shape.
//  model: what gpt_flops_per_token credits the delta rule with (18 Hv dk dv per token per
//    layer): 3 matrix-vector products with the state per token in the forward (u = S^T k,
//    S += k d^T, o = S^T q: 3 dk dv multiply-adds = 6 dk dv FLOPs), twice that in the backward
//    (12 dk dv), whatever the form.
//  executed: what the CPU kernels do as written (kernels/cpu/deltanet.c, the recurrent form;
//    kernels/cpu/deltanet_chunk.c, the chunked form):
//    recurrent forward, per token: the decay S *= a (dk dv multiplies) and the 3 products above
//      = 7 dk dv;
//    recurrent backward, per token: the checkpoint pass and the chunk's state recomputation, each
//      one recurrent step without the output (2 dk dv multiply-adds + dk dv multiplies), then the
//      reverse step: Sp = a S_prev (dk dv multiplies), u, S' and the output's gradient (dq, dS:
//      3 dk dv multiply-adds, u 1), dd and dk (2), du, dSp and da (3), dS = a dSp (dk dv
//      multiplies): 13 dk dv multiply-adds + 4 dk dv multiplies = 30 dk dv;
//    chunked, per chunk of L tokens: the products' multiply-adds, each counted as the code calls
//      it: a full [M, K] x [K, N] product M N K; a product with a triangular [L, L] operand, split
//      at h = (L / 2) rounded down to a multiple of 16, h h N + (L - h) L N (the zero block
//      skipped; tri below); the lower triangle of an [L, L] output, h h K + (L - h) L K (trio);
//      and the triangular inverse: (L (L - 1) / 2) 64 multiply-adds at C = 64 (whole rows of 64),
//      sum_i sum_{j<i} (j + 1) otherwise; K K^T and Q K^T once per key head, shared by its
//      Hv / Hk value heads (counted per value head as 1 / rep of one). Forward: K K^T and Q K^T (trio, K = dk), the inverse,
//      W and Kc (tri, N = dv, dk), Qd S and Kc S (L dk dv each), P Vn (tri, N = dv), the state
//      update (L dk dv). Backward: no first pass when the forward kept Vn and the chunks' states
//      (ops_gdn_keeps_saved: the benchmark's chunked forward keeps them, as training does), else
//      the forward's part without Q K^T, Qd S and P Vn; then per chunk the masks and the inverse
//      again (K K^T, Q K^T: trio, K = dk; the inverse; no W, Kc: the reverse pass needs neither),
//      dP and dA = -dR Vn^T (trio: K = dv, dv), P^T dO, Tinv^T dVn (tri_t: N = dv, dv), H K (tri,
//      N = dk), (G + G^T) K (full: L L dk), H^T Q (tri_t, N = dk), and 6 full L dk dv products (Kd
//      dSn, Vn dSn^T, dO S^T, dR S^T, Qd^T dO, Kb^T dR). The elementwise work (masks, exps,
//      transposes, O(L^2) gradient terms) is not counted.
enum { K_FWD_CHUNK = 0, K_FWD_REC = 1, K_BWD = 2, K_BWD_REC = 3, K_OPS = 4 };
static const char* K_NAME[K_OPS] = {"forward, chunked", "forward, recurrent", "backward, chunked", "backward, recurrent"};
static int gdn_is_bwd(int op) { return op == K_BWD || op == K_BWD_REC; }
static int gdn_is_chunked(int op) { return op == K_FWD_CHUNK || op == K_BWD; }
// Two regimes of the gates' values, since the time depends on them (subnormal floats):
//  init: as the model's initialisation gives them (model/params.c: A = exp(A_log) ~ U(0, 16] per
//    head, dt_bias 1; a, b = X W_ba^T ~ N(0, (init_std sqrt(d))^2) for X of unit RMS):
//    g = -A softplus(a + 1), mean ~ -10 per token, so the state is nearly forgotten every token
//    and the chunked form's exp of cumulative decays underflows through the subnormal range;
//    what the training step of this benchmark sees;
//  slow: g in [-0.31, -0.01] (decays exp(g) in [0.73, 0.99]: long memory, as trained heads
//    have), beta in [0.1, 0.9].
enum { G_INIT = 0, G_SLOW = 1, G_REGIMES = 2, K_ITEMS = G_REGIMES * K_OPS };
static const char* G_NAME[G_REGIMES] = {"init", "slow"};

static double gdn_model_flops(int op, double T, double dk, double dv) {
    return (gdn_is_bwd(op) ? 12.0 : 6.0) * T * dk * dv;
}

// the chunked form's products (the comment above): tri, trio and the inverse's multiply-adds
static double gdn_split_h(double L) { return (double)(((int)L / 2) & ~15); }
static double gdn_tri(double L, double N) { const double h = gdn_split_h(L); return h * h * N + (L - h) * L * N; }
static double gdn_trio(double L, double K) { const double h = gdn_split_h(L); return h * h * K + (L - h) * L * K; }
static double gdn_tri_t(double L, double N) { const double h = gdn_split_h(L); return h * L * N + (L - h) * (L - h) * N; }
static double gdn_inverse(double L, int C) { return C == 64 ? L * (L - 1) / 2 * 64 : (L - 1) * L * (L + 1) / 6; }

static double gdn_exec_flops(int op, int T, int C, double dk, double dv, double rep) {
    const double ss = dk * dv;
    if (op == K_FWD_REC || (op == K_FWD_CHUNK && C <= 0)) return 7.0 * T * ss;
    if (op == K_BWD_REC || (op == K_BWD && C <= 0)) return 30.0 * T * ss;
    double mac = 0.0;
    for (int c0 = 0; c0 < T; c0 += C) {
        const double L = T - c0 < C ? T - c0 : C;
        // the WY form and the state pass: the inverse, W, Kc, Kc S and the state update per value
        // head; K K^T and Q K^T once per key head (its rep value heads share them)
        const double wy = gdn_inverse(L, C) + gdn_tri(L, dv) + gdn_tri(L, dk), keys = gdn_trio(L, dk) / rep;
        if (op == K_FWD_CHUNK) { mac += 2 * keys + wy + 2 * L * ss + L * ss + gdn_tri(L, dv); continue; }
        // the backward's first pass, without the forward's kept tensors: the WY form again (K K^T
        // per value head) and the state pass
        if (!ops_gdn_keeps_saved()) mac += gdn_trio(L, dk) + wy + 2 * L * ss;
        mac += 2 * keys + gdn_inverse(L, C) + 2 * gdn_trio(L, dv) + 2 * gdn_tri_t(L, dv) + gdn_tri(L, dk) +
               L * L * dk + gdn_tri_t(L, dk) + 6 * L * ss;
    }
    return 2.0 * mac;
}

// the timed items: index regime * K_OPS + op
#define KMAX 64
typedef struct {
    int ok;
    int iters[K_ITEMS];            // calls per timed sample (samples last >= ~0.3 s, so that
                                   // the other processes' share can be measured)
    int n[K_ITEMS];
    double ms[K_ITEMS][KMAX];      // per call
    double others[K_ITEMS][KMAX];
} KernMsg;

typedef struct {
    double med_ms[K_ITEMS];
    int n_clean[K_ITEMS], n[K_ITEMS], noisy[K_ITEMS], iters[K_ITEMS];
    int ok;
} KernRes;

static void fill_normal(float* x, size_t n, Rng* r, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)rng_normal(r);
}

// In a forked child: time the three ops on the linear layer's shape of cfg at its B x T, with
// the model's row strides (q | k rows of 2 Kd, v inside the conv output's rows of Cc).
static void kern_main(const Config* cfg, const Opts* o, int threads, int reps, int out_fd) {
    ops_init(threads);
    const ModelConfig* mc = &cfg->model;
    const int B = cfg->train.batch_size, T = cfg->train.seq_len;
    OpsGdnShape s = config_gdn_shape(mc, B, T);
    const size_t N = (size_t)B * T, Kd = (size_t)s.Hk * s.dk, Vd = (size_t)s.Hv * s.dv, Cc = 2 * Kd + Vd;
    s.ld_qk = (int)(2 * Kd);
    s.ld_v = (int)Cc;
    // CPU backend: ops_malloc is host memory the ops read directly
    float *qk = ops_malloc(N * 2 * Kd * sizeof(float)), *xc = ops_malloc(N * Cc * sizeof(float));
    float *g = ops_malloc(N * s.Hv * sizeof(float)), *beta = ops_malloc(N * s.Hv * sizeof(float));
    float *out = ops_malloc(N * Vd * sizeof(float)), *dout = ops_malloc(N * Vd * sizeof(float));
    float *dqk = ops_malloc(N * 2 * Kd * sizeof(float)), *dxc = ops_malloc(N * Cc * sizeof(float));
    float *dg = ops_malloc(N * s.Hv * sizeof(float)), *dbeta = ops_malloc(N * s.Hv * sizeof(float));
    // what the chunked forward keeps for the backward (ops.h), as training keeps it: the chunked
    // backward reads the Vn and states of the chunked forward measured just before it on the
    // same gates
    float* vn = ops_gdn_keeps_saved()
                    ? ops_malloc(cpu_gdn_chunk_saved_floats((size_t)B, (size_t)T, (size_t)s.Hv, (size_t)s.dk, (size_t)s.dv,
                                                            (size_t)(s.chunk > 0 ? s.chunk : 64)) * sizeof(float))
                    : NULL;
    Rng r;
    rng_seed(&r, cfg->train.seed);
    fill_normal(qk, N * 2 * Kd, &r, 1.0f);
    for (size_t i = 0; i < N * 2 * s.Hk; i++) {   // L2-normalised q and k heads, as the layer feeds them
        float* h = qk + i * s.dk, ss = 0.0f;
        for (int e = 0; e < s.dk; e++) ss += h[e] * h[e];
        for (int e = 0; e < s.dk; e++) h[e] /= sqrtf(ss + 1e-6f);
    }
    fill_normal(xc, N * Cc, &r, 1.0f);
    fill_normal(dout, N * Vd, &r, 1.0f);
    double A[256];
    for (int h = 0; h < s.Hv && h < 256; h++) A[h] = 16.0 * (1.0 - rng_uniform(&r));
    const double ab_std = mc->init_std * sqrt((double)mc->d_model);
    static KernMsg m;
    memset(&m, 0, sizeof(m));
    const int cap = reps * o->max_tries < KMAX ? reps * o->max_tries : KMAX;
    const int chunk = s.chunk > 0 ? s.chunk : 64;   // the chunked form at the model's chunk (64 if it trains recurrent)
    double wait_left = o->wait_idle_s;              // waiting for an idle machine, over all the items
    for (int it_ = 0; it_ < K_ITEMS; it_++) {
        const int op = it_ % K_OPS, regime = it_ / K_OPS;
        if (op == 0) {
            for (size_t n = 0; n < N; n++)
                for (int h = 0; h < s.Hv; h++) {
                    const size_t i = n * s.Hv + h;
                    if (regime == G_INIT) {
                        const double a = 1.0 + ab_std * rng_normal(&r), b = ab_std * rng_normal(&r);
                        g[i] = (float)(-A[h % 256] * (a > 20.0 ? a : log1p(exp(a))));
                        beta[i] = (float)(1.0 / (1.0 + exp(-b)));
                    } else {
                        g[i] = -(float)(0.01 + 0.3 * rng_uniform(&r));
                        beta[i] = (float)(0.1 + 0.8 * rng_uniform(&r));
                    }
                }
        }
        OpsGdnShape sk = s;
        sk.chunk = gdn_is_chunked(op) ? chunk : 0;
        float* kept = sk.chunk > 0 ? vn : NULL;
#define CALL() do { if (gdn_is_bwd(op)) ops_gdn_backward(dqk, dqk + Kd, dxc + 2 * Kd, dg, dbeta, dout, qk, qk + Kd, xc + 2 * Kd, g, beta, kept, &sk); \
                    else ops_gdn_forward(out, NULL, kept, qk, qk + Kd, xc + 2 * Kd, g, beta, NULL, &sk); } while (0)
        double t0 = now_s();
        CALL();   // warm-up: first touch of the outputs, the threads' scratch
        double t1 = now_s() - t0;
        int iters = (int)ceil((o->smoke ? 0.01 : 0.3) / (t1 > 1e-6 ? t1 : 1e-6));
        if (iters < 1) iters = 1;
        if (iters > 1000) iters = 1000;
        m.iters[it_] = iters;
        int clean = 0;
        while (clean < reps && m.n[it_] < cap) {
            StepProbe pr;
            probe_begin(&pr, getpid());
            t0 = now_s();
            for (int it = 0; it < iters; it++) CALL();
            double ms = (now_s() - t0) * 1e3 / iters;
            double oth = probe_end(&pr, getpid());
            m.ms[it_][m.n[it_]] = ms;
            m.others[it_][m.n[it_]] = oth;
            m.n[it_]++;
            if (!(oth > o->busy_max)) clean++;
            else if (wait_left > 0) {
                const double w0 = now_s();
                wait_idle(o, wait_left);
                wait_left -= now_s() - w0;
            }
        }
#undef CALL
    }
    m.ok = 1;
    write_full(out_fd, &m, sizeof(m));
    _exit(0);
}

static int run_kernels(const Config* cfg, const Opts* o, int threads, int reps, KernRes* res) {
    memset(res, 0, sizeof(*res));
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) { close(p[0]); kern_main(cfg, o, threads, reps, p[1]); }
    close(p[1]);
    static KernMsg m;
    int rc = read_full(p[0], &m, sizeof(m));
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (rc != 0 || !m.ok) return -1;
    for (int j = 0; j < K_ITEMS; j++) {
        res->med_ms[j] = select_median(m.ms[j], m.others[j], m.n[j], reps, o->busy_max, &res->n_clean[j], &res->noisy[j]);
        res->n[j] = m.n[j];
        res->iters[j] = m.iters[j];
    }
    res->ok = 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the rows and the report

#define MAX_T 16
typedef struct {
    int T, B;
    Bench full, hyb;
    MemCount mem_full, mem_hyb;
    double arena_full, arena_hyb;  // gpt_acts_bytes
    KernRes k;
} Row;

static void fmt_num(char* buf, size_t cap, const char* fmt, double v) {
    if (isfinite(v)) sfmt(buf, cap, fmt, v);
    else sfmt(buf, cap, "-");
}

static double mib(double bytes) { return bytes / 1048576.0; }

static double arena_over_analytic(double arena, const MemCount* m) { return arena / (4.0 * (m->floats + m->ids)); }

static double rss_ratio(const Bench* b, const MemCount* m) {
    return b->rss_kb > 0 ? b->rss_kb * 1024.0 / analytic_total_bytes(b, m) : NAN;
}
static double rss_delta_ratio(const Bench* b, const MemCount* m) {
    return b->rss_kb > 0 && b->rss_base_kb > 0 ? (b->rss_kb - b->rss_base_kb) * 1024.0 / analytic_total_bytes(b, m) : NAN;
}

static void print_report(const Row* rows, int nr, const Opts* o, const char* pattern, double peak,
                         const char* peak_source, const char* backend, int reps, int tokens) {
    const ModelConfig* hc = &rows[0].hyb.cfg.model;
    const int n_lin = n_linear_layers(hc);
    printf("\n== hybrid layers vs full attention: %s | peak %.1f GFLOP/s (%s) ==\n", backend, peak / 1e9, peak_source);
    printf("model: %d layers, d %d, %d q / %d kv heads x %d (elementwise-gated attention), SwiGLU d_ff %d, vocab %d;"
           " full = layer_pattern \"\", hybrid = \"%s\" (%d Gated DeltaNet + %d attention layers; delta rule %d k / %d v"
           " heads, dk %d, dv %d, chunk %d); B x T = %d tokens per step\n",
           hc->n_layer, hc->d_model, hc->n_head, hc->n_kv_head, hc->head_dim, hc->d_ff, hc->vocab_size, pattern,
           n_lin, hc->n_layer - n_lin, hc->linear_n_k_head, hc->linear_n_v_head, hc->linear_k_head_dim,
           hc->linear_v_head_dim, hc->linear_chunk, tokens);
    printf("training step: median of %d steps after %d warm-up, the two models stepped in turn; steps during which other"
           " processes used more than %.0f%% of the CPUs are retaken (up to %d)\n\n",
           o->steps, o->warmup, 100.0 * o->busy_max, o->steps * o->max_tries);
    printf("%6s %4s | %10s %10s %8s | %9s %9s | %9s %9s %7s | %7s %7s\n", "T", "B", "full ms", "hybrid ms", "hyb/full",
           "full tok/s", "hyb tok/s", "full MF/tok", "hyb MF/tok", "FLOPs", "full", "hybrid");
    printf("%6s %4s | %10s %10s %8s | %9s %9s | %9s %9s %7s | %7s %7s\n", "", "", "/step", "/step", "time",
           "", "", "", "", "hyb/full", "%peak", "%peak");
    for (int i = 0; i < nr; i++) {
        const Row* r = &rows[i];
        const double tok = (double)r->B * r->T;
        char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
        fmt_num(a, 32, "%.1f", r->full.ok ? r->full.med_ms : NAN);
        fmt_num(b, 32, "%.1f", r->hyb.ok ? r->hyb.med_ms : NAN);
        fmt_num(c, 32, "%.3f", r->full.ok && r->hyb.ok ? r->hyb.med_ms / r->full.med_ms : NAN);
        fmt_num(d, 32, "%.0f", r->full.ok ? tok / (r->full.med_ms * 1e-3) : NAN);
        fmt_num(e, 32, "%.0f", r->hyb.ok ? tok / (r->hyb.med_ms * 1e-3) : NAN);
        fmt_num(f, 32, "%.1f", r->full.ok ? 100.0 * tok / (r->full.med_ms * 1e-3) * r->full.flops_tok / peak : NAN);
        fmt_num(g, 32, "%.1f", r->hyb.ok ? 100.0 * tok / (r->hyb.med_ms * 1e-3) * r->hyb.flops_tok / peak : NAN);
        printf("%6d %4d | %10s %10s %8s | %9s %9s | %9.2f %9.2f %7.3f | %7s %7s\n", r->T, r->B, a, b, c, d, e,
               r->full.flops_tok / 1e6, r->hyb.flops_tok / 1e6, r->hyb.flops_tok / r->full.flops_tok, f, g);
        if (r->full.ok && r->full.noisy)
            printf("    ^ full: only %d of %d timed steps ran on an idle machine: median over all, NOISY\n", r->full.n_clean, r->full.n_ms);
        if (r->hyb.ok && r->hyb.noisy)
            printf("    ^ hybrid: only %d of %d timed steps ran on an idle machine: median over all, NOISY\n", r->hyb.n_clean, r->hyb.n_ms);
        if (!r->full.ok) printf("    full failed: %s\n", r->full.err);
        if (!r->hyb.ok) printf("    hybrid failed: %s\n", r->hyb.err);
    }
    printf("(MF/tok: training MFLOPs per token, gpt_flops_per_token: 6 x matmul params + 6 T H hd per attention layer"
           " + 18 Hv dk dv per linear layer; %%peak: tok/s x MF/tok over the peak)\n");

    printf("\ndelta rule ops alone on the hybrid's linear-layer shape (%d k / %d v heads, dk %d, dv %d; q, k L2-normalised"
           " rows of stride 2Kd, v in rows of stride Cc as in the layer), median of %d samples\n",
           hc->linear_n_k_head, hc->linear_n_v_head, hc->linear_k_head_dim, hc->linear_v_head_dim, reps);
    printf("%6s %4s %-5s %-19s | %9s | %7s %8s %6s | %7s %8s %6s | %s\n", "T", "B", "gates", "op", "ms/call", "model",
           "GFLOP/s", "%peak", "exec", "GFLOP/s", "%peak", "delta rule in the hybrid step");
    printf("%6s %4s %-5s %-19s | %9s | %7s %8s %6s | %7s %8s %6s |\n", "", "", "", "", "", "GFLOP", "", "", "GFLOP", "", "");
    for (int i = 0; i < nr; i++) {
        const Row* r = &rows[i];
        const ModelConfig* c = &r->hyb.cfg.model;
        const double dk = c->linear_k_head_dim, dv = c->linear_v_head_dim;
        const double seqheads = (double)r->B * c->linear_n_v_head;
        for (int j = 0; j < K_ITEMS; j++) {
            const int op = j % K_OPS, regime = j / K_OPS;
            const int C = gdn_is_chunked(op) ? (c->linear_chunk > 0 ? c->linear_chunk : 64) : 0;
            const double fm = seqheads * gdn_model_flops(op, r->T, dk, dv);
            const double fe = seqheads * gdn_exec_flops(op, r->T, C, dk, dv, (double)c->linear_n_v_head / c->linear_n_k_head);
            const double ms = r->k.ok ? r->k.med_ms[j] : NAN;
            char a[32], b[32], cc[32], d[32], e[32], share[160] = "";
            fmt_num(a, 32, "%.2f", ms);
            fmt_num(b, 32, "%.2f", fm / (ms * 1e-3) / 1e9);
            fmt_num(cc, 32, "%.1f", 100.0 * fm / (ms * 1e-3) / peak);
            fmt_num(d, 32, "%.2f", fe / (ms * 1e-3) / 1e9);
            fmt_num(e, 32, "%.1f", 100.0 * fe / (ms * 1e-3) / peak);
            if (op == K_BWD && regime == G_INIT && r->k.ok && r->hyb.ok) {
                // the training step (gates as at init) runs the forward in the model's form and
                // the backward, per linear layer
                const int fwd = c->linear_chunk > 0 ? K_FWD_CHUNK : K_FWD_REC, bwd = c->linear_chunk > 0 ? K_BWD : K_BWD_REC;
                const double t = n_lin * (r->k.med_ms[fwd] + r->k.med_ms[bwd]);
                sfmt(share, sizeof(share), "%d x (fwd + bwd) = %.0f ms = %.0f%% of %.0f ms", n_lin, t,
                     100.0 * t / r->hyb.med_ms, r->hyb.med_ms);
            }
            printf("%6d %4d %-5s %-19s | %9s | %7.3f %8s %6s | %7.3f %8s %6s | %s\n", r->T, r->B, G_NAME[regime],
                   K_NAME[op], a, fm / 1e9, b, cc, fe / 1e9, d, e, share);
            if (r->k.ok && r->k.noisy[j])
                printf("    ^ only %d of %d samples ran on an idle machine: median over all, NOISY\n", r->k.n_clean[j], r->k.n[j]);
        }
        if (!r->k.ok) printf("    the kernel timing child failed\n");
    }
    printf("(model GFLOP: what gpt_flops_per_token credits, 6 dk dv per token and value head forward, 12 backward;"
           " exec GFLOP: the multiply-adds (2) and multiplies (1) of the CPU kernels as written, recurrent"
           " forward 7 dk dv, backward 30 dk dv per token and value head; chunked: the per-chunk products' multiply-adds"
           " with triangular zero blocks skipped, elementwise work not counted; bench/bench_hybrid.c gdn_exec_flops. gates: init = as the model's initialisation gives"
           " them, g = -A softplus(a + 1), A ~ U(0, 16] (the state nearly forgotten every token; what the steps above"
           " see), slow = decays exp(g) in [0.73, 0.99])\n");

    printf("\nmemory: peak RSS and the activation arena against the analytic count (analytic_acts: what the backward reads)\n");
    printf("%6s %4s %-6s | %8s %9s %8s %8s | %8s %8s %9s %7s %7s\n", "T", "B", "model", "params", "analytic", "arena",
           "arena/", "peak RSS", "RSS at", "analytic", "RSS/", "(RSS-st)");
    printf("%6s %4s %-6s | %8s %9s %8s %8s | %8s %8s %9s %7s %7s\n", "", "", "", "+AdamW", "acts", "MiB", "analytic",
           "MiB", "start", "total", "total", "/total");
    for (int i = 0; i < nr; i++) {
        const Row* r = &rows[i];
        for (int w = 0; w < 2; w++) {
            const Bench* b = w ? &r->hyb : &r->full;
            const MemCount* m = w ? &r->mem_hyb : &r->mem_full;
            const double arena = w ? r->arena_hyb : r->arena_full;
            char a[32], bb[32], c[32], d[32];
            fmt_num(a, 32, "%.0f", b->rss_kb > 0 ? b->rss_kb / 1024.0 : NAN);
            fmt_num(bb, 32, "%.0f", b->rss_base_kb > 0 ? b->rss_base_kb / 1024.0 : NAN);
            fmt_num(c, 32, "%.3f", rss_ratio(b, m));
            fmt_num(d, 32, "%.3f", rss_delta_ratio(b, m));
            printf("%6d %4d %-6s | %8.1f %9.1f %8.1f %8.4f | %8s %8s %9.1f %7s %7s\n", r->T, r->B, w ? "hybrid" : "full",
                   mib(params_state_bytes(b)), mib(4.0 * (m->floats + m->ids)), mib(arena), arena_over_analytic(arena, m),
                   a, bb, mib(analytic_total_bytes(b, m)), c, d);
        }
    }
    const Row* r0 = &rows[nr - 1];
    const ModelConfig* c = &r0->hyb.cfg.model;
    const double Kd = (double)c->linear_n_k_head * c->linear_k_head_dim, Vd = (double)c->linear_n_v_head * c->linear_v_head_dim;
    printf("(analytic acts: per token, a linear layer %.0f floats = X d+1, xqkv / conv pre-activation / xc 3 x Cc = 3 x %.0f,"
           " q k normed 2Kd = %.0f and their 1/norms %d, z Vd = %.0f, ba 2Hv, g and beta 2Hv, o Vd and its rstd Hv, on Vd%s;"
           " an attention layer %.0f floats; + residual streams, MLPs, head, the backward's buffers and 2 token ids:"
           " bench/bench_hybrid.c analytic_acts. analytic total = 16 B x params + 4 B x analytic acts + the host token"
           " batch + the delta rule's per-thread scratch (%.2f MiB at T = %d). RSS at start: the worker after ops_init,"
           " before building the model (libraries))\n",
           r0->mem_hyb.linear_tok, 2 * Kd + Vd, 2 * Kd, 2 * c->linear_n_k_head, Vd,
           c->linear_chunk > 0 && ops_gdn_keeps_saved()
               ? ", the delta rule's Vn Vd and chunk-start states Hv dk dv / C (kept for its backward)" : "",
           r0->mem_hyb.attn_tok,
           mib(4.0 * r0->mem_hyb.gdn_scratch), r0->T);
    fflush(stdout);
}

static void json_bench(FILE* f, const Bench* b, const MemCount* m, double arena) {
    fprintf(f, "{\"params\": %zu, \"flops_per_token\": %.0f, \"ok\": %s, \"median_ms\": ", b->n_params, b->flops_tok,
            b->ok ? "true" : "false");
    json_num_or_null(f, b->med_ms, "%.3f");
    fprintf(f, ", \"ms\": [");
    for (int s = 0; s < b->n_ms; s++) fprintf(f, "%s%.3f", s ? ", " : "", b->ms[s]);
    fprintf(f, "], \"others\": [");
    for (int s = 0; s < b->n_ms; s++) { fputs(s ? ", " : "", f); json_num_or_null(f, b->ms_others[s], "%.3f"); }
    fprintf(f, "], \"n_clean\": %d, \"noisy\": %s, \"loss0\": ", b->n_clean, b->noisy ? "true" : "false");
    json_num_or_null(f, b->loss0, "%.5f");
    fprintf(f, ",\n       \"memory\": {\"params_state_bytes\": %.0f, \"analytic_acts_bytes\": %.0f, \"arena_bytes\": %.0f,"
               " \"arena_over_analytic\": %.5f, \"analytic_total_bytes\": %.0f, \"peak_rss_bytes\": %.0f,"
               " \"rss_start_bytes\": %.0f, \"rss_over_analytic\": ",
            params_state_bytes(b), 4.0 * (m->floats + m->ids), arena, arena_over_analytic(arena, m),
            analytic_total_bytes(b, m), b->rss_kb > 0 ? b->rss_kb * 1024.0 : 0.0,
            b->rss_base_kb > 0 ? b->rss_base_kb * 1024.0 : 0.0);
    json_num_or_null(f, rss_ratio(b, m), "%.5f");
    fprintf(f, ", \"rss_minus_start_over_analytic\": ");
    json_num_or_null(f, rss_delta_ratio(b, m), "%.5f");
    fprintf(f, ", \"linear_floats_per_token\": %.0f, \"attn_floats_per_token\": %.0f}}", m->linear_tok, m->attn_tok);
}

static int write_json(const char* path, const Row* rows, int nr, const Opts* o, const char* pattern, double peak,
                      const char* peak_source, const char* backend, int threads, int tokens) {
    if (make_parent_dirs(path) != 0) return -1;
    FILE* f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\n  \"machine\": {\"backend\": ");
    json_escape(f, backend);
    fprintf(f, ", \"threads\": %d, \"peak_gflops\": %.3f, \"peak_source\": ", threads, peak / 1e9);
    json_escape(f, peak_source);
    fprintf(f, "},\n  \"pattern\": ");
    json_escape(f, pattern);
    fprintf(f, ", \"tokens\": %d, \"warmup\": %d, \"steps\": %d, \"max_tries\": %d, \"busy_max\": %.3f, \"smoke\": %s,\n  \"rows\": [\n",
            tokens, o->warmup, o->steps, o->max_tries, o->busy_max, o->smoke ? "true" : "false");
    for (int i = 0; i < nr; i++) {
        const Row* r = &rows[i];
        const ModelConfig* c = &r->hyb.cfg.model;
        fprintf(f, "    {\"T\": %d, \"B\": %d, \"hybrid_over_full\": ", r->T, r->B);
        json_num_or_null(f, r->full.ok && r->hyb.ok ? r->hyb.med_ms / r->full.med_ms : NAN, "%.5f");
        fprintf(f, ",\n     \"full\": ");
        json_bench(f, &r->full, &r->mem_full, r->arena_full);
        fprintf(f, ",\n     \"hybrid\": ");
        json_bench(f, &r->hyb, &r->mem_hyb, r->arena_hyb);
        fprintf(f, ",\n     \"gdn_ops\": [");
        for (int j = 0; j < K_ITEMS; j++) {
            const int op = j % K_OPS, regime = j / K_OPS;
            const int C = gdn_is_chunked(op) ? (c->linear_chunk > 0 ? c->linear_chunk : 64) : 0;
            const double sh = (double)r->B * c->linear_n_v_head;
            const double fm = sh * gdn_model_flops(op, r->T, c->linear_k_head_dim, c->linear_v_head_dim);
            const double fe = sh * gdn_exec_flops(op, r->T, C, c->linear_k_head_dim, c->linear_v_head_dim,
                                                 (double)c->linear_n_v_head / c->linear_n_k_head);
            const double ms = r->k.ok ? r->k.med_ms[j] : NAN;
            fprintf(f, "%s{\"op\": \"%s\", \"gates\": \"%s\", \"chunk\": %d, \"median_ms\": ", j ? ",\n       " : "",
                    K_NAME[op], G_NAME[regime], C);
            json_num_or_null(f, ms, "%.4f");
            fprintf(f, ", \"model_flops\": %.0f, \"executed_flops\": %.0f, \"model_frac_peak\": ", fm, fe);
            json_num_or_null(f, fm / (ms * 1e-3) / peak, "%.5f");
            fprintf(f, ", \"executed_frac_peak\": ");
            json_num_or_null(f, fe / (ms * 1e-3) / peak, "%.5f");
            fprintf(f, ", \"iters\": %d, \"n\": %d, \"n_clean\": %d, \"noisy\": %s}", r->k.iters[j], r->k.n[j],
                    r->k.n_clean[j], r->k.noisy[j] ? "true" : "false");
        }
        fprintf(f, "]}%s\n", i + 1 < nr ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f);
}

// ---------------------------------------------------------------------------------------------

static void usage(FILE* f) {
    fprintf(f,
        "usage: bench_hybrid [options]\n"
        "  The training step of a small model with every layer full attention against the same model\n"
        "  with hybrid layers (layer_pattern LLLA), at several sequence lengths T with B x T fixed; the\n"
        "  delta rule's ops alone (GFLOP/s, fraction of the measured fp32 peak); peak memory against an\n"
        "  analytic count. See bench/README.md.\n"
        "  --seq LIST         sequence lengths, comma-separated (default 256,1024,4096)\n"
        "  --tokens N         B x T of every step (default 8192; B = N / T)\n"
        "  --pattern P        the hybrid's layer_pattern (default LLLA)\n"
        "  --steps N          timed steps per model and T (median; default 3)\n"
        "  --warmup N         untimed steps first (default 1)\n"
        "  --reps N           timed samples per delta-rule op (median; default 5)\n"
        "  --threads N        OpenMP threads (default 0 = OpenMP default)\n"
        "  --busy-max PCT     a step or sample counts only if other processes used at most PCT%% of the\n"
        "                     CPUs meanwhile (default 5); busy ones are retaken ...\n"
        "  --max-tries K      ... up to steps x K in all (default 3)\n"
        "  --wait-idle S      before each T and after a busy step, wait up to S s for an idle machine (default 300)\n"
        "  --set S.K=V        config override for both models (repeatable); model.linear_* keys go to\n"
        "                     the hybrid only (e.g. --set model.linear_chunk=0: the recurrent forward)\n"
        "  --json PATH        default: bench_hybrid.json next to the executable (bench_hybrid_smoke.json with --smoke)\n"
        "  --smoke            tiny shape (d 64), T = 32 and 128 at 256 tokens, 1 warm-up + 2 steps, no waiting\n"
        "Exit status 1 if a worker fails or a hybrid model's activation arena exceeds 1.2x the analytic count.\n");
}

int main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);
    Opts o;
    memset(&o, 0, sizeof(o));
    o.steps = 3; o.warmup = 1; o.max_tries = 3; o.busy_max = 0.05; o.wait_idle_s = 300;
    o.no_torch = 1;
    int reps = 5, tokens = 8192, busy_pct = 5, wait_s = 300;
    int steps_set = 0, warmup_set = 0, tries_set = 0, wait_set = 0, reps_set = 0, tokens_set = 0, seq_set = 0, json_set = 0;
    char seq[256] = "256,1024,4096", pattern[64] = "LLLA";
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--smoke")) o.smoke = 1;
        else if (!strcmp(a, "--steps")) { if (bench_parse_int(a, v, 1, &o.steps)) return 1; steps_set = 1; i++; }
        else if (!strcmp(a, "--warmup")) { if (bench_parse_int(a, v, 0, &o.warmup)) return 1; warmup_set = 1; i++; }
        else if (!strcmp(a, "--reps")) { if (bench_parse_int(a, v, 1, &reps)) return 1; reps_set = 1; i++; }
        else if (!strcmp(a, "--tokens")) { if (bench_parse_int(a, v, 1, &tokens)) return 1; tokens_set = 1; i++; }
        else if (!strcmp(a, "--max-tries")) { if (bench_parse_int(a, v, 1, &o.max_tries)) return 1; tries_set = 1; i++; }
        else if (!strcmp(a, "--busy-max")) { if (bench_parse_int(a, v, 0, &busy_pct)) return 1; o.busy_max = busy_pct / 100.0; i++; }
        else if (!strcmp(a, "--wait-idle")) { if (bench_parse_int(a, v, 0, &wait_s)) return 1; o.wait_idle_s = wait_s; wait_set = 1; i++; }
        else if (!strcmp(a, "--threads")) { if (bench_parse_int(a, v, 0, &o.threads_req)) return 1; i++; }
        else if (!strcmp(a, "--seq") && v) { sfmt(seq, sizeof(seq), "%s", v); seq_set = 1; i++; }
        else if (!strcmp(a, "--pattern") && v) { sfmt(pattern, sizeof(pattern), "%s", v); i++; }
        else if (!strcmp(a, "--json") && v) { sfmt(o.json_path, PATH_LEN, "%s", v); json_set = 1; i++; }
        else if (!strcmp(a, "--set") && v) {
            if (o.n_sets >= MAX_SETS) { fprintf(stderr, "error: at most %d --set overrides\n", MAX_SETS); return 1; }
            o.sets[o.n_sets++] = v[0] == '-' && v[1] == '-' ? v + 2 : v;
            i++;
        } else {
            fprintf(stderr, "error: unknown or incomplete argument '%s' (see --help)\n", a);
            return 1;
        }
    }
    if (o.smoke) {
        if (!steps_set) o.steps = 2;
        if (!warmup_set) o.warmup = 1;
        if (!tries_set) o.max_tries = 1;
        if (!wait_set) o.wait_idle_s = 0;
        if (!reps_set) reps = 2;
        if (!tokens_set) tokens = 256;
        if (!seq_set) sfmt(seq, sizeof(seq), "32,128");
    }
    if (!strchr(pattern, 'L')) { fprintf(stderr, "error: --pattern '%s' has no linear layer (L)\n", pattern); return 1; }
    if (!json_set) {
        char exe[PATH_LEN];
        bench_exe_dir(exe, sizeof(exe));
        sfmt(o.json_path, PATH_LEN, "%s/%s", exe, o.smoke ? "bench_hybrid_smoke.json" : "bench_hybrid.json");
    }

    // ---- the rows: one per T ----
    static Row rows[MAX_T];
    int nr = 0;
    char buf[256];
    sfmt(buf, sizeof(buf), "%s", seq);
    for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int T;
        if (bench_parse_int("--seq", t, 1, &T)) return 1;
        if (nr >= MAX_T) { fprintf(stderr, "error: at most %d sequence lengths\n", MAX_T); return 1; }
        if (tokens % T) { fprintf(stderr, "error: --tokens %d is not a multiple of T = %d\n", tokens, T); return 1; }
        Row* r = &rows[nr];
        memset(r, 0, sizeof(*r));
        r->T = T; r->B = tokens / T;
        sfmt(r->full.name, sizeof(r->full.name), "T=%d B=%d full", T, r->B);
        sfmt(r->hyb.name, sizeof(r->hyb.name), "T=%d B=%d %s", T, r->B, pattern);
        sfmt(r->full.shape, sizeof(r->full.shape), "full");
        sfmt(r->hyb.shape, sizeof(r->hyb.shape), "hybrid");
        if (resolve(&r->full, &o, "", r->B, T) != 0 || resolve(&r->hyb, &o, pattern, r->B, T) != 0) {
            fprintf(stderr, "error: the configuration at T = %d is not valid (above)\n", T);
            return 1;
        }
        r->arena_full = (double)gpt_acts_bytes(&r->full.cfg.model, r->B, T, RECOMPUTE_NONE);
        r->arena_hyb = (double)gpt_acts_bytes(&r->hyb.cfg.model, r->B, T, RECOMPUTE_NONE);
        nr++;
    }

    // ---- the machine ----
    wait_idle(&o, o.wait_idle_s);
    ProbeMsg probe = {0};
    if (run_probe(o.threads_req, &probe) != 0) { fprintf(stderr, "error: the peak-measuring child failed\n"); return 1; }
    const int threads = probe.threads;
    fprintf(stderr, "bench_hybrid: %s | peak %.1f GFLOP/s (%s) | T = %s, %d tokens per step, full vs %s\n",
            probe.backend, probe.peak / 1e9, probe.peak_source, seq, tokens, pattern);

    double t_all = now_s();
    int failed = 0;
    for (int i = 0; i < nr; i++) {
        Row* r = &rows[i];
        r->mem_full = analytic_acts(&r->full.cfg.model, r->B, r->T, threads);
        r->mem_hyb = analytic_acts(&r->hyb.cfg.model, r->B, r->T, threads);
        fprintf(stderr, "[T=%d B=%d] full %.1fM params %.2f MFLOP/token, hybrid %.1fM params %.2f MFLOP/token: stepped in turn\n",
                r->T, r->B, r->full.n_params / 1e6, r->full.flops_tok / 1e6, r->hyb.n_params / 1e6, r->hyb.flops_tok / 1e6);
        Bench* grp[2] = {&r->full, &r->hyb};
        run_group(grp, 2, &o, threads, 0);
        failed += !r->full.ok + !r->hyb.ok;
        fprintf(stderr, "    delta rule ops (B=%d T=%d): ", r->B, r->T);
        wait_idle(&o, o.wait_idle_s);
        if (run_kernels(&r->hyb.cfg, &o, threads, reps, &r->k) != 0) {
            fprintf(stderr, "FAILED\n");
            failed++;
        } else {
            for (int j = 0; j < K_ITEMS; j++)
                fprintf(stderr, "%s %s %.2f ms%s%s", G_NAME[j / K_OPS], K_NAME[j % K_OPS], r->k.med_ms[j],
                        r->k.noisy[j] ? " (NOISY)" : "", j + 1 < K_ITEMS ? ", " : "\n");
        }
    }
    fprintf(stderr, "total %.1f s\n", now_s() - t_all);
    ProbeMsg probe2 = {0};
    if (!o.smoke && run_probe(o.threads_req, &probe2) == 0) {
        fprintf(stderr, "fp32 peak measured again: %.1f GFLOP/s (start: %.1f); using the larger\n", probe2.peak / 1e9, probe.peak / 1e9);
        if (probe2.peak > probe.peak) probe.peak = probe2.peak;
    }

    print_report(rows, nr, &o, pattern, probe.peak, probe.peak_source, probe.backend, reps, tokens);
    if (write_json(o.json_path, rows, nr, &o, pattern, probe.peak, probe.peak_source, probe.backend, threads, tokens) != 0) {
        fprintf(stderr, "error: cannot write %s: %s\n", o.json_path, strerror(errno));
        return 1;
    }
    printf("\nresults: %s\n", o.json_path);
    int over = 0;
    for (int i = 0; i < nr; i++) {
        double q = arena_over_analytic(rows[i].arena_hyb, &rows[i].mem_hyb);
        if (q > 1.2) {
            fprintf(stderr, "error: T=%d: the hybrid model's activation arena is %.3fx the analytic count (limit 1.2)\n", rows[i].T, q);
            over++;
        }
        double rr = rss_ratio(&rows[i].hyb, &rows[i].mem_hyb);
        if (!o.smoke && rr > 1.2)
            fprintf(stderr, "warning: T=%d: the hybrid worker's peak RSS is %.3fx the analytic total (goal: 1.2)\n", rows[i].T, rr);
    }
    if (failed) fprintf(stderr, "error: %d worker(s) failed\n", failed);
    return failed || over ? 1 : 0;
}
