// tests/test_ops_fd.c: every CPU op's backward against central finite differences, and the
// whole model's backward against finite differences of its loss, for every variant.
//
// Method: a scalar L = sum(out * r) with a fixed random r, accumulated in float64 from the
// op's float32 outputs; the numerical derivative (L(x+h) - L(x-h)) / 2h on sampled elements
// (h = 1e-2 for ops, 1e-2 for the model); error = max|num - ana| / max|ana| over the samples.
// A wrong gradient lands at O(1); float32 rounding and truncation land near 1e-4 for single ops,
// up to ~5e-3 for the whole model (FD_TOL, FD_TOL_MODEL below).
#include <string.h>
#include "test_util.h"
#include "../kernels/ops.h"
#include "../model/gpt.h"

#define FD_H 1e-2
// single ops: truncation h^2/6 |f'''/f'| ~ 2e-5 at h = 1e-2, roundoff u sum|r out| / h; measured max
// 1.27e-4 (SSE41), 1.07e-4 (AVX2), 9.0e-5 (AVX), all at q/k_norm.w: 7.9x margin
#define FD_TOL 1e-3
// whole model: roundoff of the float32 loss (~log V, ulp 2.4e-7) over 2h, against a tensor's max
// |grad|; measured max 5.11e-3 (SSE41), 5.08e-3 (AVX2, AVX), was 1e-2 (2x): now 5.9x margin
#define FD_TOL_MODEL 3e-2
#define FD_SAMPLES 40

typedef double (*LossFn)(void* ctx);

static double dot(const float* a, const float* r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * r[i];
    return s;
}

// Checks ana[] (the analytic gradient of f w.r.t. x[]) on up to FD_SAMPLES elements.
static void fd_check_tol(const char* what, float* x, size_t n, const float* ana, LossFn f, void* ctx, double tol) {
    double max_ana = 0.0, max_err = 0.0;
    for (size_t i = 0; i < n; i++) if (fabs(ana[i]) > max_ana) max_ana = fabs(ana[i]);
    size_t step = n <= FD_SAMPLES ? 1 : n / FD_SAMPLES;
    size_t i0 = n <= FD_SAMPLES ? 0 : (size_t)((tu_rand() * 0.5 + 0.5) * step) % step;
    for (size_t i = i0; i < n; i += step) {
        float orig = x[i];
        x[i] = orig + (float)FD_H; double lp = f(ctx);
        x[i] = orig - (float)FD_H; double lm = f(ctx);
        x[i] = orig;
        double num = (lp - lm) / (2.0 * FD_H);
        double e = fabs(num - ana[i]);
        if (e > max_err || isnan(e)) max_err = isnan(e) ? INFINITY : e;
    }
    double rel = max_err / (max_ana > 1e-6 ? max_ana : 1e-6);
    TU_CHECK(rel < tol && max_ana > 0.0, "%s: fd rel err %.3e (max |grad| %.3e)", what, rel, max_ana);
    printf("  %-48s fd rel err %.2e\n", what, rel);
}
static void fd_check(const char* what, float* x, size_t n, const float* ana, LossFn f, void* ctx) {
    fd_check_tol(what, x, n, ana, f, ctx, FD_TOL);
}

static float* fbuf(size_t n, double scale) { float* p = ops_malloc(n * sizeof(float)); tu_fill(p, n, scale); return p; }

// ---------------------------------------------------------------------------------------------
typedef struct { float *inp, *w, *out, *r; int N, C, OC; } MatmulCtx;
static double matmul_loss(void* v) {
    MatmulCtx* c = v;
    ops_matmul_forward(c->out, c->inp, c->w, c->N, c->C, c->OC);
    return dot(c->out, c->r, (size_t)c->N * c->OC);
}
static void test_matmul(void) {
    MatmulCtx c = {0};
    c.N = 7; c.C = 13; c.OC = 11;
    c.inp = fbuf(c.N * c.C, 1); c.w = fbuf(c.OC * c.C, 1); c.out = fbuf(c.N * c.OC, 0); c.r = fbuf(c.N * c.OC, 1);
    float* dinp = fbuf(c.N * c.C, 0);
    float* dw = fbuf(c.OC * c.C, 0);
    ops_matmul_backward(dinp, dw, c.r, c.inp, c.w, c.N, c.C, c.OC);
    fd_check("matmul dinp", c.inp, c.N * c.C, dinp, matmul_loss, &c);
    fd_check("matmul dw", c.w, c.OC * c.C, dw, matmul_loss, &c);
    // dw accumulates: a second backward doubles it
    float* dw2 = fbuf(c.OC * c.C, 0);
    memcpy(dw2, dw, sizeof(float) * c.OC * c.C);
    ops_matmul_backward(NULL, dw2, c.r, c.inp, c.w, c.N, c.C, c.OC);
    // derived: the same 7-term GEMM again plus one addition, gamma_7 sum|terms| ~ 7 u 7 = 3e-6 < 1e-5
    int ok = 1;
    double acc_err = 0.0;
    for (int i = 0; i < c.OC * c.C; i++) {
        if (fabsf(dw2[i] - 2 * dw[i]) > 1e-5f * (1 + fabsf(dw[i]))) ok = 0;
        acc_err = fmax(acc_err, fabsf(dw2[i] - 2 * dw[i]) / (1 + fabsf(dw[i])));
    }
    TU_CHECK(ok, "matmul dw does not accumulate");
    printf("  %-48s err %.2e (tol 1e-5)\n", "matmul dw accumulates (2nd backward = 2 dw)", acc_err);
}

// the linear layer with a bias ([model] bias): out = inp w^T + b (ops_matmul_bias_forward, and the
// residual form ops_bias_add_f32 after an accumulating GEMM); db from ops_bias_backward
typedef struct { float *inp, *w, *b, *out, *r; int N, C, OC, resid; } BiasCtx;
static double bias_loss(void* v) {
    BiasCtx* c = v;
    if (c->resid) {   // out = r0 + b + inp w^T, as a projection into the residual stream
        for (int i = 0; i < c->N * c->OC; i++) c->out[i] = 0.25f;
        ops_bias_add_f32(c->out, c->b, c->N, c->OC);
        ops_matmul_forward_f32(c->out, c->inp, c->w, c->N, c->C, c->OC, 1);
    } else {
        ops_matmul_bias_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    }
    return dot(c->out, c->r, (size_t)c->N * c->OC);
}
static void test_matmul_bias(int resid) {
    BiasCtx c = {0};
    c.N = 70; c.C = 13; c.OC = 67; c.resid = resid;   // OC > 64: two of the CPU's column blocks
    c.inp = fbuf(c.N * c.C, 1); c.w = fbuf(c.OC * c.C, 1); c.b = fbuf(c.OC, 1);
    c.out = fbuf(c.N * c.OC, 0); c.r = fbuf(c.N * c.OC, 1);
    float* dinp = fbuf(c.N * c.C, 0);
    float* dw = fbuf(c.OC * c.C, 0);
    float* db = fbuf(c.OC, 0);
    ops_matmul_backward(dinp, dw, c.r, c.inp, c.w, c.N, c.C, c.OC);
    ops_bias_backward(db, c.r, c.N, c.OC);
    const char* tag = resid ? "residual bias (bias_add_f32)" : "matmul_bias_forward";
    char nm[96];
    snprintf(nm, sizeof nm, "%s dinp", tag); fd_check(nm, c.inp, c.N * c.C, dinp, bias_loss, &c);
    snprintf(nm, sizeof nm, "%s dw", tag); fd_check(nm, c.w, c.OC * c.C, dw, bias_loss, &c);
    snprintf(nm, sizeof nm, "%s db (bias_backward)", tag); fd_check(nm, c.b, c.OC, db, bias_loss, &c);
    if (resid) return;
    // the forward with bias NULL is the plain GEMM, bit for bit; db accumulates (a second call
    // doubles it: the column sums are computed the same way, one addition more, exact doubling)
    float* plain = fbuf(c.N * c.OC, 0);
    ops_matmul_forward(plain, c.inp, c.w, c.N, c.C, c.OC);
    ops_matmul_bias_forward(c.out, c.inp, c.w, NULL, c.N, c.C, c.OC);
    TU_CHECK(memcmp(plain, c.out, sizeof(float) * c.N * c.OC) == 0, "matmul_bias_forward(bias NULL) != matmul_forward");
    float* db2 = fbuf(c.OC, 0);
    memcpy(db2, db, sizeof(float) * c.OC);
    ops_bias_backward(db2, c.r, c.N, c.OC);
    int ok = 1;
    for (int i = 0; i < c.OC; i++) if (db2[i] != 2.0f * db[i]) ok = 0;
    TU_CHECK(ok, "bias_backward does not accumulate (db += column sums)");
    printf("  %-48s exact\n", "bias_backward accumulates; bias NULL = plain GEMM");
    ops_free(plain); ops_free(db2);
    ops_free(c.inp); ops_free(c.w); ops_free(c.b); ops_free(c.out); ops_free(c.r);
    ops_free(dinp); ops_free(dw); ops_free(db);
}

typedef struct { float *wte, *wpe, *out, *r; int* idx; int B, T, C; } EmbCtx;
static double emb_loss(void* v) {
    EmbCtx* c = v;
    ops_embedding_forward(c->out, c->idx, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}
static void test_embedding(void) {
    EmbCtx c = {0};
    c.B = 2; c.T = 5; c.C = 6; int V = 7;
    c.wte = fbuf(V * c.C, 1); c.wpe = fbuf(c.T * c.C, 1);
    c.out = fbuf(c.B * c.T * c.C, 0); c.r = fbuf(c.B * c.T * c.C, 1);
    int idx[10] = {1, 3, 3, 0, 6, 2, 3, 1, 1, 5};
    c.idx = idx;
    float* dwte = fbuf(V * c.C, 0);
    float* dwpe = fbuf(c.T * c.C, 0);
    ops_embedding_backward(dwte, dwpe, c.r, c.idx, c.B, c.T, c.C);
    fd_check("embedding dwte (repeated tokens)", c.wte, V * c.C, dwte, emb_loss, &c);
    fd_check("embedding dwpe", c.wpe, c.T * c.C, dwpe, emb_loss, &c);
}

typedef struct { float *inp, *w, *b, *out, *mean, *rstd, *r; int N, C; OpsNormKind k; } NormCtx;
static double norm_loss(void* v) {
    NormCtx* c = v;
    ops_norm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5f, c->k);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_norm(OpsNormKind k, int C) {
    NormCtx c = {0};
    c.N = 70; c.C = C; c.k = k;   // N > one reduction block; C = 21: the row sums' 8 lanes and a tail of 5
    c.inp = fbuf(c.N * c.C, 2); c.w = fbuf(c.C, 1); c.b = k == OPS_LAYERNORM ? fbuf(c.C, 1) : NULL;
    c.out = fbuf(c.N * c.C, 0); c.mean = fbuf(c.N, 0); c.rstd = fbuf(c.N, 0); c.r = fbuf(c.N * c.C, 1);
    norm_loss(&c);
    float* dinp = fbuf(c.N * c.C, 0);
    float* dw = fbuf(c.C, 0);
    float* db = k == OPS_LAYERNORM ? fbuf(c.C, 0) : NULL;
    ops_norm_backward(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, c.N, c.C, k);
    char nm[32];
    snprintf(nm, sizeof nm, "%s C=%d", k == OPS_LAYERNORM ? "layernorm" : "rmsnorm", C);
    char s[64];
    snprintf(s, sizeof s, "%s dinp", nm); fd_check(s, c.inp, c.N * c.C, dinp, norm_loss, &c);
    snprintf(s, sizeof s, "%s dw", nm); fd_check(s, c.w, c.C, dw, norm_loss, &c);
    if (db) { snprintf(s, sizeof s, "%s db", nm); fd_check(s, c.b, c.C, db, norm_loss, &c); }
}

// attention prep + attention, one context: qkv (with gate columns) and qk-norm weights in,
// yg out. Exercises prep (qk-norm, rope, value gate) and attention (GQA, sdpa gate) together
// and each alone through the choice of variant.
typedef struct {
    OpsAttnShape s;
    float *qkv, *qw, *kw, *q, *k, *v, *rstd, *y, *yg, *lse, *r;
} AttnCtx;
static double attn_loss(void* vctx) {
    AttnCtx* c = vctx;
    ops_attn_prep_forward(c->q, c->k, c->v, c->rstd, c->qkv, c->qw, c->kw, &c->s);
    ops_attention_forward(c->y, c->yg, c->lse, c->q, c->k, c->v, c->qkv, &c->s);
    return dot(c->yg, c->r, (size_t)c->s.B * c->s.T * c->s.H * c->s.hd);
}
// rope_dim: partial RoPE's rotated channels of the 8 (0 = all); yarn: YaRN scaling at s = 2 (its
// attention factor multiplies cos and sin of the rotated pairs only); doc: the document mask's
// doc_start[B*T] (NULL = causal), doc_rope: positions restarting at each document
static void test_attention_doc(int B, int T, int qk_norm, int rope, OpsGate gate, OpsGatePos pos,
                               OpsGateAct act, int rope_dim, int yarn, const int* doc, int doc_rope) {
    AttnCtx c = {0};
    OpsAttnShape* s = &c.s;
    s->doc_start = doc; s->doc_rope = doc_rope;
    s->B = B; s->T = T; s->H = 4; s->Hkv = 2; s->hd = 8;
    s->qk_norm = qk_norm; s->rope = rope; s->rope_base = 10000.0f; s->eps = 1e-5f;
    s->rope_dim = rope_dim;
    if (yarn) s->rope_scale = (OpsRope){OPS_ROPE_YARN, 2.0f, 4, 32.0f, 1.0f, 0.0f};
    s->gate = gate; s->gate_pos = pos; s->gate_act = act;
    int N = s->B * s->T, QKVG = ops_attn_qkv_cols(s), Hd = s->H * s->hd, KVd = s->Hkv * s->hd;
    c.qkv = fbuf((size_t)N * QKVG, 1); c.qw = fbuf(s->hd, 1); c.kw = fbuf(s->hd, 1);
    c.q = fbuf(N * Hd, 0); c.k = fbuf(N * KVd, 0); c.v = fbuf(N * KVd, 0);
    c.rstd = fbuf(N * (s->H + s->Hkv), 0); c.y = fbuf(N * Hd, 0);
    int sgate = gate != OPS_GATE_NONE && pos == OPS_GATEPOS_SDPA;
    c.yg = sgate ? fbuf(N * Hd, 0) : c.y;
    c.lse = fbuf(N * s->H, 0); c.r = fbuf(N * Hd, 1);
    attn_loss(&c);
    float *dq = fbuf(N * Hd, 0), *dk = fbuf(N * KVd, 0), *dv = fbuf(N * KVd, 0);
    float *dqkv = fbuf((size_t)N * QKVG, 0), *scr = fbuf(N * Hd, 0);
    float *dqw = fbuf(s->hd, 0), *dkw = fbuf(s->hd, 0);
    ops_attention_backward(dq, dk, dv, dqkv, scr, c.r, c.q, c.k, c.v, c.y, c.lse, c.qkv, s);
    ops_attn_prep_backward(dqkv, dqw, dkw, dq, dk, dv, c.qkv, c.rstd, c.qw, c.kw, s);
    static const char* gn[] = {"none", "elementwise", "headwise"};
    static const char* an[] = {"sigmoid", "ns_sigmoid", "silu"};
    char nm[96];
    snprintf(nm, sizeof nm, "attn T=%d qk_norm=%d rope=%d%s%s%s gate=%s@%s/%s dqkv", T, qk_norm, rope,
             rope_dim ? (rope_dim == 2 ? "/2of8" : rope_dim == 4 ? "/4of8" : "/partial") : "", yarn ? "+yarn" : "",
             doc ? (doc_rope ? " docs/restart" : " docs") : "", gn[gate], pos == OPS_GATEPOS_SDPA ? "sdpa" : "value", an[act]);
    fd_check(nm, c.qkv, (size_t)N * QKVG, dqkv, attn_loss, &c);
    int G = ops_attn_gate_cols(s);
    if (G > 0) {
        // the gate columns alone (they are a small share of qkv, so sample them separately)
        double md = 0, ma = 0;
        for (int n = 0; n < N; n++)
            for (int j = QKVG - G; j < QKVG; j++) {
                float* x = &c.qkv[(size_t)n * QKVG + j];
                float o = *x;
                *x = o + (float)FD_H; double lp = attn_loss(&c);
                *x = o - (float)FD_H; double lm = attn_loss(&c);
                *x = o;
                double num = (lp - lm) / (2 * FD_H), a = dqkv[(size_t)n * QKVG + j];
                if (fabs(num - a) > md) md = fabs(num - a);
                if (fabs(a) > ma) ma = fabs(a);
            }
        TU_CHECK(md / ma < FD_TOL, "%s gate columns: fd rel err %.3e", nm, md / ma);
        printf("  %-48s gate cols fd rel err %.2e\n", "", md / ma);
    }
    if (qk_norm) {
        fd_check("  q_norm.w", c.qw, s->hd, dqw, attn_loss, &c);
        fd_check("  k_norm.w", c.kw, s->hd, dkw, attn_loss, &c);
    }
}

static void test_attention_shape_rope(int B, int T, int qk_norm, int rope, OpsGate gate, OpsGatePos pos,
                                      OpsGateAct act, int rope_dim, int yarn) {
    test_attention_doc(B, T, qk_norm, rope, gate, pos, act, rope_dim, yarn, NULL, 0);
}

static void test_attention_shape(int B, int T, int qk_norm, int rope, OpsGate gate, OpsGatePos pos, OpsGateAct act) {
    test_attention_shape_rope(B, T, qk_norm, rope, gate, pos, act, 0, 0);
}

// Attention within documents against an independent path: each document run alone through the
// plain causal ops as a sequence of its own (B = 1, T = its length, pos0 = its start, or 0 when
// positions restart) gives the same q, k, v and y rows as the masked batch (up to the GEMMs'
// roundoff over different widths). doc[B*T] holds the starts (model/doc_mask.h's layout).
static void test_attention_doc_split(int B, int T, const int* doc, int doc_rope) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = 4; s.Hkv = 2; s.hd = 8; s.qk_norm = 1; s.rope = 1; s.rope_base = 10000.0f; s.eps = 1e-5f;
    s.gate = OPS_GATE_HEADWISE; s.gate_pos = OPS_GATEPOS_SDPA; s.gate_act = OPS_ACT_SIGMOID;
    s.doc_start = doc; s.doc_rope = doc_rope;
    const int N = B * T, QKVG = ops_attn_qkv_cols(&s), Hd = s.H * s.hd, KVd = s.Hkv * s.hd;
    float *qkv = fbuf((size_t)N * QKVG, 1), *qw = fbuf(s.hd, 1), *kw = fbuf(s.hd, 1);
    float *q = fbuf(N * Hd, 0), *k = fbuf(N * KVd, 0), *v = fbuf(N * KVd, 0), *rstd = fbuf(N * (s.H + s.Hkv), 0);
    float *y = fbuf(N * Hd, 0), *yg = fbuf(N * Hd, 0), *lse = fbuf(N * s.H, 0);
    ops_attn_prep_forward(q, k, v, rstd, qkv, qw, kw, &s);
    ops_attention_forward(y, yg, lse, q, k, v, qkv, &s);
    float *q1 = fbuf(N * Hd, 0), *k1 = fbuf(N * KVd, 0), *v1 = fbuf(N * KVd, 0), *rstd1 = fbuf(N * (s.H + s.Hkv), 0);
    float *y1 = fbuf(N * Hd, 0), *yg1 = fbuf(N * Hd, 0), *lse1 = fbuf(N * s.H, 0);
    double md = 0.0;
    int ndocs = 0;
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T;) {
            int t1 = t0 + 1;
            while (t1 < T && doc[b * T + t1] == t0) t1++;
            OpsAttnShape one = s;
            one.B = 1; one.T = t1 - t0; one.doc_start = NULL; one.pos0 = doc_rope ? 0 : t0;
            size_t n0 = (size_t)b * T + t0;
            ops_attn_prep_forward(q1, k1, v1, rstd1, qkv + n0 * QKVG, qw, kw, &one);
            ops_attention_forward(y1, yg1, lse1, q1, k1, v1, qkv + n0 * QKVG, &one);
            for (size_t i = 0; i < (size_t)one.T * Hd; i++) {
                double e = fabs((double)yg1[i] - yg[n0 * Hd + i]);
                double eq = fabs((double)q1[i] - q[n0 * Hd + i]);
                if (e > md) md = e;
                if (eq > md) md = eq;
            }
            for (int h = 0; h < s.H; h++)
                for (int t = 0; t < one.T; t++) {
                    double e = fabs((double)lse1[h * one.T + t] - lse[((size_t)b * s.H + h) * T + t0 + t]);
                    if (e > md) md = e;
                }
            ndocs++;
            t0 = t1;
        }
    TU_CHECK(md < 1e-5, "doc mask B=%d T=%d restart=%d: max |masked - per document| %.3e over q, yg, lse", B, T, doc_rope, md);
    printf("  %-48s %d documents, max |masked - per document| %.2e\n", doc_rope ? "doc mask = per-document attention (restart)"
                                                                          : "doc mask = per-document attention (continue)",
           ndocs, md);
    float* bufs[] = {qkv, qw, kw, q, k, v, rstd, y, yg, lse, q1, k1, v1, rstd1, y1, yg1, lse1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_free(bufs[i]);
}

// doc[B*T] from end-of-text positions: eots[b] lists the positions (ascending, -1 ends) of
// sequence b's end-of-text tokens (model/doc_mask.c's rule, written out here independently)
static int* doc_from_eots(int B, int T, const int eots[][8]) {
    int* doc = malloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++) {
        int start = 0, j = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && eots[b][j] == t - 1) { start = t; j++; }
            doc[b * T + t] = start;
        }
    }
    return doc;
}

static void test_attention(int qk_norm, int rope, OpsGate gate, OpsGatePos pos, OpsGateAct act) {
    test_attention_shape(2, 6, qk_norm, rope, gate, pos, act);
}

typedef struct { float *in, *out, *r; int N, F, swiglu; } ActCtx;
static double act_loss(void* v) {
    ActCtx* c = v;
    if (c->swiglu) ops_swiglu_forward(c->out, c->in, c->N, c->F);
    else ops_gelu_forward(c->out, c->in, (size_t)c->N * c->F);
    return dot(c->out, c->r, (size_t)c->N * c->F);
}
static void test_act(int swiglu) {
    ActCtx c = {0};
    c.N = 5; c.F = 9; c.swiglu = swiglu;
    int nin = c.N * c.F * (swiglu ? 2 : 1);
    c.in = fbuf(nin, 3); c.out = fbuf(c.N * c.F, 0); c.r = fbuf(c.N * c.F, 1);
    float* din = fbuf(nin, 0);
    if (swiglu) ops_swiglu_backward(din, c.r, c.in, c.N, c.F);
    else ops_gelu_backward(din, c.r, c.in, (size_t)c.N * c.F);
    fd_check(swiglu ? "swiglu" : "gelu (tanh)", c.in, nin, din, act_loss, &c);
}

typedef struct { float *logits, *losses, *lse; int* tg; int N, V, Vp; } XentCtx;
static double xent_loss(void* v) {
    XentCtx* c = v;
    ops_xent_forward(c->losses, c->lse, c->logits, c->tg, c->N, c->V, c->Vp);
    double s = 0; for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s * 0.5;   // dloss = 0.5
}
static void test_xent(void) {
    XentCtx c = {0};
    c.N = 6; c.V = 10; c.Vp = 16;
    c.logits = fbuf(c.N * c.Vp, 3); c.losses = fbuf(c.N, 0); c.lse = fbuf(c.N, 0);
    int tg[6] = {0, 9, 3, 3, 7, 1};
    c.tg = tg;
    for (int n = 0; n < c.N; n++) for (int i = c.V; i < c.Vp; i++) c.logits[n * c.Vp + i] = 100.0f; // padding must not leak
    float* d = fbuf(c.N * c.Vp, 0);
    xent_loss(&c);   // the forward saves lse for the backward
    ops_xent_backward(d, c.logits, c.lse, c.tg, 0.5f, c.N, c.V, c.Vp);
    fd_check("softmax cross-entropy dlogits", c.logits, c.N * c.Vp, d, xent_loss, &c);
    xent_loss(&c);
    // loss of row 0 by hand, in double
    double mx = -1e30, se = 0;
    for (int i = 0; i < c.V; i++) mx = fmax(mx, c.logits[i]);
    for (int i = 0; i < c.V; i++) se += exp(c.logits[i] - mx);
    double want = mx + log(se) - c.logits[tg[0]];
    // derived: a float logsumexp of 10 logits (|x| <= 3), ~10 roundings of values <= ~5: 10 u 5 = 3e-6
    // absolute, under 1e-5 |want| + 1e-6 for this row's loss (printed)
    TU_CHECK(fabs(c.losses[0] - want) < 1e-5 * fabs(want) + 1e-6, "xent loss %g want %g (padding excluded)", c.losses[0], want);
    printf("  %-48s %.6f, rel err %.2e (tol 1e-5 + 1e-6 / loss)\n", "softmax cross-entropy loss vs double", want,
           fabs(c.losses[0] - want) / fabs(want));
    int padzero = 1;
    for (int n = 0; n < c.N; n++) for (int i = c.V; i < c.Vp; i++) if (d[n * c.Vp + i] != 0.0f) padzero = 0;
    TU_CHECK(padzero, "xent: padded columns have non-zero gradient");

    // the training forward's one-pass op (ops_xent_forward_backward): losses and lse the
    // forward's bits; dlogits exp(l - max) * (dloss / sum) against the backward's
    // exp(l - lse) * dloss: each has ~2 ulp of exp, a rounding of the scale, and lse's rounding
    // (|lse| <= ~5 here) moves exp(l - lse) by ~|lse| u: under 10 u ~ 6e-7 relative, so
    // 2e-6 x dloss absolute (each |dlogit| <= dloss; the target's has the - dloss cancelled)
    float *d2 = fbuf(c.N * c.Vp, 0), *losses2 = fbuf(c.N, 0), *lse2 = fbuf(c.N, 0);
    ops_xent_forward_backward(losses2, lse2, d2, c.logits, c.tg, 0.5f, c.N, c.V, c.Vp);
    int same = 1;
    for (int n = 0; n < c.N; n++) same &= losses2[n] == c.losses[n] && lse2[n] == c.lse[n];
    TU_CHECK(same, "xent forward_backward: losses and lse are not the forward's bit for bit");
    double worst = 0;
    for (int i = 0; i < c.N * c.Vp; i++) worst = fmax(worst, fabs((double)d2[i] - d[i]));
    TU_CHECK(worst <= 2e-6 * 0.5, "xent forward_backward: dlogits %.3g from the backward's (bound 1e-6)", worst);
    printf("  %-48s %.2e (bound 1e-6: 2e-6 x dloss)\n", "xent forward_backward dlogits vs backward", worst);
    fd_check("softmax cross-entropy forward_backward", c.logits, c.N * c.Vp, d2, xent_loss, &c);
    // in place, as the model calls it (dlogits over the logits): the same bits
    float* inplace = fbuf(c.N * c.Vp, 0);
    memcpy(inplace, c.logits, (size_t)c.N * c.Vp * sizeof(float));
    ops_xent_forward_backward(losses2, lse2, inplace, inplace, c.tg, 0.5f, c.N, c.V, c.Vp);
    TU_CHECK(memcmp(inplace, d2, (size_t)c.N * c.Vp * sizeof(float)) == 0,
             "xent forward_backward in place: not the bits of the separate output");
    ops_free(d2); ops_free(losses2); ops_free(lse2); ops_free(inplace);
}

// ---------------------------------------------------------------------------------------------
// whole model
typedef struct { GPT* m; int* idx; int* tg; } ModelCtx;
static double model_loss(void* v) { ModelCtx* c = v; return gpt_forward(c->m, c->idx, c->tg); }

static void test_model(const char* name, ModelConfig mc) {
    GPT m;
    gpt_build(&m, &mc, 7);
    int B = 2, T = 8, N = B * T;
    gpt_alloc_acts(&m, B, T);
    // make norm weights non-trivial so their gradients are exercised
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        if (p->ndim != 1) continue;
        tu_fill(m.params + p->offset, p->numel, 0.3);
        for (size_t j = 0; j < p->numel; j++) m.params[p->offset + j] += 1.0f;
    }
    int idx[16], tg[16];
    for (int i = 0; i < N; i++) { idx[i] = (int)((tu_rand() * 0.5 + 0.5) * mc.vocab_size) % mc.vocab_size; tg[i] = (i * 7 + 3) % mc.vocab_size; }
    ModelCtx c = {&m, idx, tg};
    gpt_zero_grad(&m);
    gpt_forward_train(&m, idx, tg, 1.0f);   // the trainer's forward (its cross-entropy also writes dlogits)
    gpt_backward(&m, 1.0f);
    for (int i = 0; i < m.table.n; i++) {
        const ParamInfo* p = &m.table.p[i];
        char nm[96];
        snprintf(nm, sizeof nm, "model %s: %s", name, p->name);
        fd_check_tol(nm, m.params + p->offset, p->numel, m.grads + p->offset, model_loss, &c, FD_TOL_MODEL);
    }
    gpt_free(&m);
}

int main(void) {
    ops_init(0);
    printf("finite-difference checks (h=%g, tolerance %g for ops, %g for the model)\n", FD_H, FD_TOL, FD_TOL_MODEL);
    test_matmul();
    test_matmul_bias(0);
    test_matmul_bias(1);
    test_embedding();
    test_norm(OPS_RMSNORM, 16);
    test_norm(OPS_LAYERNORM, 16);
    test_norm(OPS_RMSNORM, 21);
    test_norm(OPS_LAYERNORM, 21);
    test_act(1);
    test_act(0);
    test_xent();
    for (int qn = 0; qn <= 1; qn++)
        for (int rope = 0; rope <= 1; rope++)
            test_attention(qn, rope, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    // longer than one query tile of the CPU kernel (128 rows), so tiles and their key ranges meet
    test_attention_shape(1, 150, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    for (int g = 1; g <= 2; g++)
        for (int pos = 0; pos <= 1; pos++)
            for (int act = 0; act <= 2; act++)
                test_attention(1, 1, (OpsGate)g, (OpsGatePos)pos, (OpsGateAct)act);
    // partial RoPE ([model] rope_fraction): 4 and 2 of the 8 channels turn, with and without
    // qk-norm (whose backward mixes the rotated and the passed channels), and under YaRN
    for (int qn = 0; qn <= 1; qn++) test_attention_shape_rope(2, 6, qn, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 4, 0);
    test_attention_shape_rope(2, 6, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 2, 0);
    test_attention_shape_rope(2, 6, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 4, 1);
    // attention within documents ([data] doc_mask): the masked backward by finite differences, short
    // sequences and one longer than a CPU query tile (128) with documents that start at the tile
    // boundary, just after it, mid-tile and on the last token; then the forward against each
    // document run alone
    {
        static const int eots_short[2][8] = {{1, 3, -1}, {4, -1}};   // docs [0,1] [2,3] [4,5] | [0..4] [5]
        int* ds = doc_from_eots(2, 6, eots_short);
        for (int restart = 0; restart <= 1; restart++)
            test_attention_doc(2, 6, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 0, 0, ds, restart);
        test_attention_doc(2, 6, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 0, 0, ds, 0);
        test_attention_doc(2, 6, 0, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_VALUE, OPS_ACT_SILU, 4, 0, ds, 1);
        free(ds);
        static const int eots_long[1][8] = {{39, 126, 127, 140, 148, -1}};   // starts 0 40 127 128 141 149
        ds = doc_from_eots(1, 150, eots_long);
        test_attention_doc(1, 150, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID, 0, 0, ds, 1);
        free(ds);
        static const int eots_split[2][8] = {{39, 126, 127, 140, 148, -1}, {0, 100, -1}};
        ds = doc_from_eots(2, 150, eots_split);
        for (int restart = 0; restart <= 1; restart++) test_attention_doc_split(2, 150, ds, restart);
        free(ds);
    }

    ModelConfig q = {0};
    q.vocab_size = 50; q.padded_vocab = 128; q.n_layer = 2; q.d_model = 16; q.n_head = 4;
    q.n_kv_head = 2; q.head_dim = 4; q.d_ff = 24; q.max_seq_len = 8; q.pos = POS_ROPE;
    q.rope_base = 10000; q.norm = NORM_RMSNORM; q.norm_eps = 1e-5f; q.qk_norm = 1;
    q.mlp = MLP_SWIGLU; q.tie_embeddings = 0; q.init_std = 0.3f;
    ModelConfig g2 = q;
    g2.n_kv_head = 4; g2.pos = POS_LEARNED; g2.norm = NORM_LAYERNORM; g2.qk_norm = 0;
    g2.mlp = MLP_GELU; g2.tie_embeddings = 1;
    for (int gate = 0; gate <= 2; gate++) {
        q.attn_gate = g2.attn_gate = (GateKind)gate;
        char nm[64];
        snprintf(nm, sizeof nm, "qwen gate=%d", gate); test_model(nm, q);
        snprintf(nm, sizeof nm, "gpt2 gate=%d", gate); test_model(nm, g2);
    }
    q.attn_gate = GATE_ELEMENTWISE; q.gate_position = GATEPOS_VALUE; q.gate_act = GATEACT_SILU;
    test_model("qwen value-gate silu", q);
    q.rope_dim = 2;   // partial RoPE: the first 2 of the 4 channels of a head turn
    test_model("qwen value-gate silu, rope 2 of 4", q);
    // [model] bias: GPT-2's linear biases, and the same beside swiglu, the gate's rows and qk-norm
    g2.attn_gate = GATE_NONE; g2.bias = 1;
    test_model("gpt2 bias", g2);
    q.rope_dim = 0; q.gate_position = GATEPOS_SDPA; q.gate_act = GATEACT_SIGMOID; q.bias = 1;
    test_model("qwen bias elementwise", q);
    return tu_finish();
}
