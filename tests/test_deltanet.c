// tests/test_deltanet.c: the gated delta rule ops (kernels/ops.h "Gated delta rule", issue #22)
// on the CPU backend:
// 1. forward vs an independent float64 recurrence written here (relative 1e-5: the op sums
//    dk-term dot products in fp32 over T = 70 steps; measured 1.2e-7, no BLAS: ISA-independent);
// 2. backward (every input) vs central differences of that float64 recurrence (relative 1e-5:
//    the op's fp32 gradients against an O(h^2) = 1e-10 difference quotient; measured <= 1.4e-7);
//    T = 70 crosses the backward's 64-token checkpoint boundary, Hv = 2 Hk shares key heads;
// 3. decoding: the tokens one call at a time, the state passed on, equal the whole sequence at
//    once bit for bit (the same operations in the same order);
// 4. the chunked form (C = 16, 64, 128) equals the recurrent form (outputs and final state), also
//    started from a passed-in state;
// 5. the layer's other ops (causal conv1d + SiLU, L2 norm, gated RMSNorm with each output-gate
//    activation, the decay/beta gates) vs finite differences, and the conv decoding a token at a
//    time with its state;
// 6. strided rows (q, k, v read from inside wider rows, as the layer reads them from its conv
//    output; the L2 norm between layouts) give bit for bit the dense results;
// 7. documents (OpsGdnShape.doc_start, [data] doc_mask): the state zeroed at each later
//    document's first token, forward against the float64 recurrence doing the same, backward
//    (recurrent, chunked) against its central differences, each document of the packed sequence
//    equal to that document run alone, one document equal to no documents bit for bit; the conv
//    likewise (each document alone bit for bit, finite differences, the decoding state).
#include "../kernels/ops.h"
#include "test_util.h"
#include <string.h>

enum { B = 2, T = 70, HK = 2, HV = 4, DK = 8, DV = 6, N = B * T };
// what the chunked forward keeps for its backward (ops.h, saved) at chunks of 16 or more: Vn
// [N, HV, DV] and the chunks' states [B, HV, ceil(T / 16), DK, DV] (kernels/scratch.h
// cpu_gdn_chunk_saved_floats, which the test does not include: an independent count)
enum { SAVED = N * HV * DV + B * HV * ((T + 15) / 16) * DK * DV };

// documents for the reference (section 7): when ref_docs, the state is zeroed before token t > 0
// of sequence b where ref_ds[b*T + t] == t (the first token of a later document)
static int ref_docs, ref_ds[N];

// float64 reference: the same recurrence as transformers' torch_recurrent_gated_delta_rule
static void ref_forward(double* o, const double* q, const double* k, const double* v, const double* g,
                        const double* beta) {
    const int rep = HV / HK;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HV; h++) {
            double S[DK][DV] = {{0}};
            for (int t = 0; t < T; t++) {
                int n = b * T + t;
                if (ref_docs && t > 0 && ref_ds[n] == t) memset(S, 0, sizeof S);
                const double *qt = q + (n * HK + h / rep) * DK, *kt = k + (n * HK + h / rep) * DK, *vt = v + (n * HV + h) * DV;
                double a = exp(g[n * HV + h]), u[DV] = {0};
                for (int i = 0; i < DK; i++)
                    for (int j = 0; j < DV; j++) { S[i][j] *= a; }
                for (int i = 0; i < DK; i++)
                    for (int j = 0; j < DV; j++) u[j] += S[i][j] * kt[i];
                for (int i = 0; i < DK; i++)
                    for (int j = 0; j < DV; j++) S[i][j] += kt[i] * beta[n * HV + h] * (vt[j] - u[j]);
                for (int j = 0; j < DV; j++) {
                    double acc = 0;
                    for (int i = 0; i < DK; i++) acc += S[i][j] * qt[i];
                    o[(n * HV + h) * DV + j] = acc / sqrt((double)DK);
                }
            }
        }
}

static double ref_loss(const double* q, const double* k, const double* v, const double* g, const double* beta,
                       const double* w) {
    static double o[N * HV * DV];
    ref_forward(o, q, k, v, g, beta);
    double L = 0;
    for (int i = 0; i < N * HV * DV; i++) L += o[i] * w[i];
    return L;
}

// the op's gradients (every input) against central differences of the float64 recurrence, at
// the inputs x* (double copies of the op's); relative 1e-5 (the op's fp32 sums against an
// O(h^2) = 1e-10 quotient)
static void check_backward_fd(const char* form, const float* dq, const float* dk, const float* dv, const float* dg,
                              const float* dbeta, double* xq, double* xk, double* xv, double* xg, double* xb,
                              const double* w) {
    struct { const char* name; double* x; const float* grad; int n; } in[] = {
        {"q", xq, dq, N * HK * DK}, {"k", xk, dk, N * HK * DK}, {"v", xv, dv, N * HV * DV}, {"g", xg, dg, N * HV}, {"beta", xb, dbeta, N * HV}};
    for (int p = 0; p < 5; p++) {
        double emax = 0, gmax = 0;
        for (int i = 0; i < in[p].n; i += (in[p].n > 400 ? 7 : 1)) {   // a sample of the larger inputs
            double x0 = in[p].x[i], h = 1e-5;
            in[p].x[i] = x0 + h;
            double lp = ref_loss(xq, xk, xv, xg, xb, w);
            in[p].x[i] = x0 - h;
            double lm = ref_loss(xq, xk, xv, xg, xb, w);
            in[p].x[i] = x0;
            double fd = (lp - lm) / (2 * h);
            emax = fmax(emax, fabs(fd - in[p].grad[i]));
            gmax = fmax(gmax, fabs(fd));
        }
        TU_CHECK(emax / gmax < 1e-5, "%s: d%s vs finite differences: %.3e", form, in[p].name, emax / gmax);
        printf("  %-13s d%-4s vs finite differences: %.3e (tol 1e-5)\n", form, in[p].name, emax / gmax);
    }
}

// The chunked backward against the recurrent backward under other decays: the model's
// initialisation (g = -A softplus(a + 1), A up to 16: exp(c) underflows within a chunk, the
// flushed-subnormal path) and slow decays (exp(g) in [0.97, 1): the state keeps everything and
// Tinv's entries grow with the chunk). C = 16 and 64, relative 1e-4 per input over its largest
// gradient: both are fp32 with sums <= C + dk deep; with slow decays the triangular inverse
// amplifies roundoff by its norm (measured printed).
// Heads of 16 floats in 64-byte aligned buffers: the shape on which the chunked form writes dq,
// dk, dv and the kept Vn and states with non-temporal row stores (kernels/cpu/deltanet_chunk.c
// gdn_stream_row: rows of a multiple of 16 floats at 64-byte aligned addresses; the shapes
// above have rows of 6 and 8). The chunked backward on the forward's kept Vn and states
// against the recurrent one, 1e-4 relative per input over its largest gradient (as check_chunked_gates), and both
// value heads' rows written (a row left unwritten would keep the NaN poured in first).
static void check_chunked_aligned(void) {
    enum { AB = 2, AT = 40, AHK = 1, AHV = 2, AD = 16, AN = AB * AT };
    const size_t nqk = (size_t)AN * AHK * AD, nv = (size_t)AN * AHV * AD, ng = (size_t)AN * AHV;
    const size_t nsv = nv + (size_t)AB * AHV * ((AT + 15) / 16) * AD * AD;   // Vn and the states kept, chunks of 16
    float* buf[16];
    const size_t sz[16] = {nqk, nqk, nv, ng, ng, nv, nsv, nqk, nqk, nv, ng, ng, nqk, nqk, nv, nv};
    for (int i = 0; i < 16; i++) buf[i] = aligned_alloc(64, (sz[i] * sizeof(float) + 63) / 64 * 64);
    float *q = buf[0], *k = buf[1], *v = buf[2], *g = buf[3], *beta = buf[4], *w = buf[5], *vn = buf[6];
    float *cq = buf[7], *ck = buf[8], *cv = buf[9], *cg = buf[10], *cb = buf[11], *rq = buf[12], *rk = buf[13],
          *rv = buf[14], *o = buf[15];
    for (size_t n = 0; n < (size_t)AN * AHK; n++) {
        double sq = 0, sk = 0;
        for (int i = 0; i < AD; i++) {
            q[n * AD + i] = (float)tu_rand(); k[n * AD + i] = (float)tu_rand();
            sq += q[n * AD + i] * q[n * AD + i]; sk += k[n * AD + i] * k[n * AD + i];
        }
        for (int i = 0; i < AD; i++) { q[n * AD + i] /= (float)sqrt(sq); k[n * AD + i] /= (float)sqrt(sk); }
    }
    for (size_t i = 0; i < nv; i++) { v[i] = (float)tu_rand(); w[i] = (float)tu_rand(); }
    for (size_t i = 0; i < ng; i++) { g[i] = (float)(-0.05 - 0.4 * (0.5 + 0.5 * tu_rand())); beta[i] = (float)(0.5 + 0.45 * tu_rand()); }
    static float rg[AN * AHV], rb[AN * AHV];
    OpsGdnShape r = {AB, AT, AHK, AHV, AD, AD, 0, 0, 0, NULL}, c = r;
    c.chunk = 16;
    ops_gdn_backward(rq, rk, rv, rg, rb, w, q, k, v, g, beta, NULL, &r);
    for (size_t i = 0; i < nqk; i++) { cq[i] = ck[i] = NAN; }
    for (size_t i = 0; i < nv; i++) cv[i] = NAN;
    for (size_t i = 0; i < nsv; i++) vn[i] = NAN;
    ops_gdn_forward(o, NULL, vn, q, k, v, g, beta, NULL, &c);
    ops_gdn_backward(cq, ck, cv, cg, cb, w, q, k, v, g, beta, vn, &c);
    struct { const char* name; const float *a, *b; size_t n; } cmp[] = {
        {"q", cq, rq, nqk}, {"k", ck, rk, nqk}, {"v", cv, rv, nv}, {"g", cg, rg, ng}, {"beta", cb, rb, ng}};
    double worst = 0;
    for (int p = 0; p < 5; p++) {
        double e = 0, m = 0;
        for (size_t i = 0; i < cmp[p].n; i++) {
            const double d = fabs((double)cmp[p].a[i] - cmp[p].b[i]);
            e = d == d ? fmax(e, d) : INFINITY;   // NaN: a row not written
            m = fmax(m, fabs(cmp[p].b[i]));
        }
        TU_CHECK(m > 0 && e / m < 1e-4, "aligned rows of 16: d%s chunked vs recurrent %.3e", cmp[p].name, e / m);
        worst = fmax(worst, e / m);
    }
    printf("  chunked (C = 16) backward on heads of 16 in aligned rows (streamed stores) vs recurrent: %.3e (tol 1e-4)\n", worst);
    for (int i = 0; i < 16; i++) free(buf[i]);
}

static void check_chunked_gates(const OpsGdnShape* s, const float* q, const float* k, const float* v, const float* w) {
    static float g2[N * HV], b2[N * HV];
    static float rq[N * HK * DK], rk[N * HK * DK], rv[N * HV * DV], rg[N * HV], rb[N * HV];
    static float cq[N * HK * DK], ck[N * HK * DK], cv[N * HV * DV], cg[N * HV], cb[N * HV];
    for (int gates = 0; gates < 2; gates++) {
        for (int i = 0; i < N * HV; i++) {
            double u = 0.5 + 0.5 * tu_rand();
            if (gates == 0) g2[i] = (float)(-16.0 * u * log1p(exp(0.8 * tu_rand() + 1.0)));
            else g2[i] = (float)(-0.03 * u);
            b2[i] = (float)(0.2 + 0.79 * (0.5 + 0.5 * tu_rand()));
        }
        OpsGdnShape r = *s;
        r.chunk = 0;
        ops_gdn_backward(rq, rk, rv, rg, rb, w, q, k, v, g2, b2, NULL, &r);
        for (int ci = 0; ci < 2; ci++) {
            OpsGdnShape sc = *s;
            sc.chunk = ci ? 64 : 16;
            // C = 64 the training path (the forward's Vn and states kept for the backward), C = 16 recomputed
            static float vn[SAVED], oc[N * HV * DV];
            if (ci) ops_gdn_forward(oc, NULL, vn, q, k, v, g2, b2, NULL, &sc);
            ops_gdn_backward(cq, ck, cv, cg, cb, w, q, k, v, g2, b2, ci ? vn : NULL, &sc);
            struct { const char* name; const float *a, *b; int n; } o[] = {
                {"q", cq, rq, N * HK * DK}, {"k", ck, rk, N * HK * DK}, {"v", cv, rv, N * HV * DV}, {"g", cg, rg, N * HV}, {"beta", cb, rb, N * HV}};
            double worst = 0;
            for (int p = 0; p < 5; p++) {
                double e = 0, m = 0;
                for (int i = 0; i < o[p].n; i++) { e = fmax(e, fabs(o[p].a[i] - o[p].b[i])); m = fmax(m, fabs(o[p].b[i])); }
                TU_CHECK(m > 0 && e / m < 1e-4, "%s gates, C = %d: d%s chunked vs recurrent %.3e", gates ? "slow" : "init", sc.chunk, o[p].name, e / m);
                worst = fmax(worst, e / m);
            }
            printf("  chunked (C = %d, Vn and states %s) backward vs recurrent, %s gates: worst input %.3e (tol 1e-4)\n", sc.chunk,
                   ci ? "kept" : "recomputed", gates ? "slow" : "init", worst);
        }
    }
}


// ---- the layer's other ops vs central differences of the fp32 ops themselves (as
// tests/test_ops_fd.c does: loss = sum(out . wt) in double, eps 1e-3; bound 1e-3 relative, the
// fp32 roundoff over eps (6e-8 / 1e-3) plus the O(eps^2) curvature; measured printed, <= 1e-4)
enum { FT = 9, FB = 2, FC = 5, FK = 4, FR = 7, FN = 6 };
static float fx[FB * FT * FC], fw[FC * FK], fz[FR * FN], fg[FR * FN], fwt[FB * FT * FC];
static OpsGateAct fact = OPS_ACT_SILU;
enum { GH = 3 };                                   // gates: FR tokens, GH value heads
static float gba[FR * 2 * GH], gA[GH], gdt[GH];
static const int* fds;   // the conv's documents (NULL: none)
static double conv_loss(void) {
    static float out[FB * FT * FC];
    ops_conv1d_silu_forward(out, NULL, NULL, fx, fw, NULL, fds, FB, FT, FC, FK);
    double L = 0;
    for (int i = 0; i < FB * FT * FC; i++) L += (double)out[i] * fwt[i];
    return L;
}
static double l2_loss(void) {
    static float y[FR * FN], ri[FR * 2];
    ops_l2norm_forward(y, ri, fz, FR, 2, FN / 2, FN, FN, 1e-6f);   // 2 heads of FN/2 per row
    double L = 0;
    for (int i = 0; i < FR * FN; i++) L += (double)y[i] * fwt[i];
    return L;
}
static double rmsg_loss(void) {
    static float y[FR * FN], rs[FR];
    ops_rmsnorm_gated_forward(y, rs, fz, fg, fw, FR, FN, 1e-6f, fact);
    double L = 0;
    for (int i = 0; i < FR * FN; i++) L += (double)y[i] * fwt[i];
    return L;
}
static double gates_loss(void) {
    static float g[FR * GH], b[FR * GH];
    ops_gdn_gates_forward(g, b, gba, gA, gdt, FR, GH);
    double L = 0;
    for (int i = 0; i < FR * GH; i++) L += (double)g[i] * fwt[i] + (double)b[i] * fwt[FR * GH + i];
    return L;
}
static void fd_compare(const char* name, float* x, int n, const float* grad, double (*loss)(void)) {
    double emax = 0, gmax = 0;
    for (int i = 0; i < n; i++) {
        float x0 = x[i], h = 1e-3f;
        x[i] = x0 + h;
        double lp = loss();
        x[i] = x0 - h;
        double lm = loss();
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * h);
        emax = fmax(emax, fabs(fd - grad[i]));
        gmax = fmax(gmax, fabs(fd));
    }
    TU_CHECK(emax / gmax < 1e-3, "%s vs finite differences: %.3e", name, emax / gmax);
    printf("  %-28s vs finite differences: %.3e (tol 1e-3)\n", name, emax / gmax);
}

static void test_layer_ops(void) {
    tu_fill(fx, FB * FT * FC, 1.0); tu_fill(fw, FC * FK, 0.7); tu_fill(fz, FR * FN, 1.0); tu_fill(fg, FR * FN, 1.5);
    tu_fill(fwt, FB * FT * FC, 1.0);
    // conv1d + SiLU
    static float out[FB * FT * FC], pre[FB * FT * FC], dx[FB * FT * FC], dw[FC * FK];
    ops_conv1d_silu_forward(out, pre, NULL, fx, fw, NULL, NULL, FB, FT, FC, FK);
    memset(dw, 0, sizeof dw);
    ops_conv1d_silu_backward(dx, dw, fwt, fx, pre, fw, NULL, FB, FT, FC, FK);
    fd_compare("conv1d+silu dx", fx, FB * FT * FC, dx, conv_loss);
    fd_compare("conv1d+silu dw", fw, FC * FK, dw, conv_loss);
    // decoding: token by token with the conv state carried = the whole sequence, bit for bit
    {
        static float st[FB * FC * (FK - 1)], st2[FB * FC * (FK - 1)], o1[FB * FT * FC];
        memset(st, 0, sizeof st);
        for (int t = 0; t < FT; t++) {
            float xt[FB * FC], ot[FB * FC];
            for (int b = 0; b < FB; b++) memcpy(xt + b * FC, fx + (b * FT + t) * FC, sizeof(float) * FC);
            ops_conv1d_silu_forward(ot, NULL, st2, xt, fw, st, NULL, FB, 1, FC, FK);
            memcpy(st, st2, sizeof st);
            for (int b = 0; b < FB; b++) memcpy(o1 + (b * FT + t) * FC, ot + b * FC, sizeof(float) * FC);
        }
        TU_CHECK(memcmp(o1, out, sizeof out) == 0, "conv1d: token-by-token with the state differs from the sequence");
        printf("  conv1d+silu decoding a token at a time with its state: bit for bit equal\n");
    }
    // documents: sequence 0 starts them at 0, 2, 3 (one token) and 7, sequence 1 at 0 and 8 (the
    // last token). Each document alone (B = 1, its own length) gives its rows of the packed
    // forward bit for bit (the same taps in the same order; those before it add nothing), and the
    // decoding state is the last document's alone; the backward vs finite differences (1e-3 as above)
    {
        static const int first[FB][5] = {{0, 2, 3, 7, -1}, {0, 8, -1}};
        static int ds[FB * FT];
        for (int b = 0; b < FB; b++)
            for (int t = 0, cur = 0; t < FT; t++) {
                for (int j = 0; first[b][j] >= 0; j++)
                    if (first[b][j] == t) cur = t;
                ds[b * FT + t] = cur;
            }
        static float od[FB * FT * FC], pd[FB * FT * FC], sd[FB * FC * (FK - 1)];
        ops_conv1d_silu_forward(od, pd, sd, fx, fw, NULL, ds, FB, FT, FC, FK);
        int same = 1;
        for (int b = 0; b < FB; b++)
            for (int j = 0; first[b][j] >= 0; j++) {
                const int t0 = first[b][j], t1 = first[b][j + 1] >= 0 ? first[b][j + 1] : FT;
                float o1[FT * FC], s1[FC * (FK - 1)];
                ops_conv1d_silu_forward(o1, NULL, s1, fx + (b * FT + t0) * FC, fw, NULL, NULL, 1, t1 - t0, FC, FK);
                same &= memcmp(o1, od + (b * FT + t0) * FC, sizeof(float) * (t1 - t0) * FC) == 0;
                if (t1 == FT) same &= memcmp(s1, sd + b * FC * (FK - 1), sizeof s1) == 0;
            }
        TU_CHECK(same, "conv1d: a document of the packed sequence differs from it alone");
        TU_CHECK(memcmp(od, out, sizeof od) != 0, "conv1d: the documents changed nothing");
        printf("  conv1d+silu documents: each alone = packed, and the last one's state, bit for bit\n");
        memset(dw, 0, sizeof dw);
        ops_conv1d_silu_backward(dx, dw, fwt, fx, pd, fw, ds, FB, FT, FC, FK);
        fds = ds;
        fd_compare("conv1d+silu docs dx", fx, FB * FT * FC, dx, conv_loss);
        fd_compare("conv1d+silu docs dw", fw, FC * FK, dw, conv_loss);
        fds = NULL;
    }
    // L2 norm
    static float y[FR * FN], ri[FR * 2], dz[FR * FN], dgz[FR * FN], dwn[FN];
    ops_l2norm_forward(y, ri, fz, FR, 2, FN / 2, FN, FN, 1e-6f);
    ops_l2norm_backward(dz, fwt, fz, ri, FR, 2, FN / 2, FN, FN);
    fd_compare("l2norm dx", fz, FR * FN, dz, l2_loss);
    // the same heads read from rows of FN + 5 and written to rows of FN + 3: bit for bit
    {
        enum { LX = FN + 5, LY = FN + 3 };
        static float xs[FR * LX], ys[FR * LY], dys[FR * LY], dxs[FR * LX], ri2[FR * 2];
        for (int r = 0; r < FR; r++) {
            memcpy(xs + r * LX, fz + r * FN, sizeof(float) * FN);
            memcpy(dys + r * LY, fwt + r * FN, sizeof(float) * FN);
        }
        ops_l2norm_forward(ys, ri2, xs, FR, 2, FN / 2, LX, LY, 1e-6f);
        ops_l2norm_backward(dxs, dys, xs, ri2, FR, 2, FN / 2, LX, LY);
        int same = 1;
        for (int r = 0; r < FR; r++)
            same &= memcmp(ys + r * LY, y + r * FN, sizeof(float) * FN) == 0 &&
                    memcmp(dxs + r * LX, dz + r * FN, sizeof(float) * FN) == 0;
        TU_CHECK(same, "l2norm: strided rows differ from dense rows");
        printf("  l2norm over strided rows: bit for bit the dense result\n");
    }
    // gated RMSNorm (fw's first FN entries as its weight), with each output-gate activation
    static float rs[FR];
    const OpsGateAct acts[] = {OPS_ACT_SILU, OPS_ACT_SIGMOID, OPS_ACT_NS_SIGMOID};
    const char* names[] = {"silu", "sigmoid", "ns_sigmoid"};
    for (int a = 0; a < 3; a++) {
        char nm[64];
        fact = acts[a];
        ops_rmsnorm_gated_forward(y, rs, fz, fg, fw, FR, FN, 1e-6f, fact);
        memset(dwn, 0, sizeof dwn);
        ops_rmsnorm_gated_backward(dz, dgz, dwn, fwt, fz, fg, fw, rs, FR, FN, fact);
        snprintf(nm, sizeof nm, "rmsnorm_gated(%s) dx", names[a]); fd_compare(nm, fz, FR * FN, dz, rmsg_loss);
        snprintf(nm, sizeof nm, "rmsnorm_gated(%s) dz", names[a]); fd_compare(nm, fg, FR * FN, dgz, rmsg_loss);
        snprintf(nm, sizeof nm, "rmsnorm_gated(%s) dw", names[a]); fd_compare(nm, fw, FN, dwn, rmsg_loss);
    }
    // the decay and beta gates: a spans softplus's linear branch (> 20) too
    tu_fill(gba, FR * 2 * GH, 2.0); tu_fill(gA, GH, 1.0); tu_fill(gdt, GH, 1.0);
    gba[2 * GH - 1] = 25.0f;
    static float gg[FR * GH], gb[FR * GH], dba[FR * 2 * GH], dA[GH], ddt[GH];
    ops_gdn_gates_forward(gg, gb, gba, gA, gdt, FR, GH);
    memset(dA, 0, sizeof dA); memset(ddt, 0, sizeof ddt);
    ops_gdn_gates_backward(dba, dA, ddt, fwt, fwt + FR * GH, gba, gA, gdt, FR, GH);
    fd_compare("gates dba", gba, FR * 2 * GH, dba, gates_loss);
    fd_compare("gates dA_log", gA, GH, dA, gates_loss);
    fd_compare("gates ddt_bias", gdt, GH, ddt, gates_loss);
}

// ---- 7. documents (OpsGdnShape.doc_start). Sequence 0 holds documents starting at 0, 5, 6 (a
// one-token document), 16 (a boundary of C = 16), 37, 64 (of C = 64) and 69 (the last token);
// sequence 1 at 0 and 30 (inside every chunk size's chunk).
static const int doc_first[2][8] = {{0, 5, 6, 16, 37, 64, 69, -1}, {0, 30, -1}};
static void doc_fill(int* ds) {
    for (int b = 0; b < B; b++) {
        int cur = 0;
        for (int t = 0; t < T; t++) {
            for (int j = 0; doc_first[b][j] >= 0; j++)
                if (doc_first[b][j] == t) cur = t;
            ds[b * T + t] = cur;
        }
    }
}
// one document [t0, t1) of sequence b copied out as a sequence of its own (B = 1)
static void doc_take(float* dst, const float* src, int b, int t0, int t1, int row) {
    memcpy(dst, src + (size_t)(b * T + t0) * row, sizeof(float) * (size_t)(t1 - t0) * row);
}
static double rel_err(const float* a, const float* b, int n) {
    double e = 0, m = 0;
    for (int i = 0; i < n; i++) { e = fmax(e, fabs((double)a[i] - b[i])); m = fmax(m, fabs((double)b[i])); }
    return m > 0 ? e / m : e;
}

static void check_documents(const OpsGdnShape* s0, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* w, double* xq, double* xk, double* xv, double* xg,
                            double* xb, const double* xw) {
    static int ds[N], zeros[N];
    doc_fill(ds);
    OpsGdnShape s = *s0;
    s.doc_start = ds;
    // forward (recurrent, then chunked C = 16, 64, 128) against the float64 recurrence with resets:
    // 1e-5 as section 1 (recurrent) and 4 (chunked: the same sums regrouped)
    static float o[N * HV * DV], oc[N * HV * DV], st[B * HV * DK * DV], stc[B * HV * DK * DV];
    static double ro[N * HV * DV];
    memcpy(ref_ds, ds, sizeof ds);
    ref_docs = 1;
    ref_forward(ro, xq, xk, xv, xg, xb);
    ops_gdn_forward(o, st, NULL, q, k, v, g, beta, NULL, &s);
    double md = 0, mb = 0;
    for (int i = 0; i < N * HV * DV; i++) { md = fmax(md, fabs(o[i] - ro[i])); mb = fmax(mb, fabs(ro[i])); }
    TU_CHECK(md / mb < 1e-5, "documents: recurrent forward vs float64: %.3e", md / mb);
    printf("  documents: recurrent forward vs float64 recurrence with resets: %.3e (tol 1e-5)\n", md / mb);
    const int chunks[] = {16, 64, 128};
    for (int ci = 0; ci < 3; ci++) {
        OpsGdnShape sc = s;
        sc.chunk = chunks[ci];
        ops_gdn_forward(oc, stc, NULL, q, k, v, g, beta, NULL, &sc);
        const double eo = rel_err(oc, o, N * HV * DV), es = rel_err(stc, st, B * HV * DK * DV);
        TU_CHECK(eo < 1e-5 && es < 1e-5, "documents: chunk %d vs recurrent: outputs %.3e, state %.3e", chunks[ci], eo, es);
        printf("  documents: chunked (C = %d) vs recurrent: outputs %.3e, final state %.3e (tol 1e-5)\n", chunks[ci], eo, es);
    }
    // the mask is not a no-op: the outputs of sequence 0's second document differ from no documents
    {
        OpsGdnShape sn = s0[0];
        static float on[N * HV * DV];
        ops_gdn_forward(on, NULL, NULL, q, k, v, g, beta, NULL, &sn);
        TU_CHECK(rel_err(on + 6 * HV * DV, o + 6 * HV * DV, HV * DV) > 1e-3, "documents: token 6 equals the undocumented output");
    }
    // backward (recurrent; chunked C = 16 and 64 on the kept Vn and states) against central
    // differences of the float64 recurrence with resets: 1e-5 as section 2
    static float dq[N * HK * DK], dk[N * HK * DK], dv[N * HV * DV], dg[N * HV], db[N * HV];
    ops_gdn_backward(dq, dk, dv, dg, db, w, q, k, v, g, beta, NULL, &s);
    check_backward_fd("recurrent docs", dq, dk, dv, dg, db, xq, xk, xv, xg, xb, xw);
    for (int ci = 0; ci < 2; ci++) {
        OpsGdnShape sc = s;
        sc.chunk = chunks[ci];
        static float vn[SAVED];
        ops_gdn_forward(oc, NULL, vn, q, k, v, g, beta, NULL, &sc);
        ops_gdn_backward(dq, dk, dv, dg, db, w, q, k, v, g, beta, vn, &sc);
        char name[32];
        snprintf(name, sizeof name, "chunk%d docs", sc.chunk);
        check_backward_fd(name, dq, dk, dv, dg, db, xq, xk, xv, xg, xb, xw);
    }
    ref_docs = 0;
    // each document of the packed sequences equals that document alone (B = 1, T = its length, state
    // zeros): the recurrent forward bit for bit (the same steps from a zeroed state), the chunked
    // (C = 16) within 1e-5 (chunks fall elsewhere: the sums regrouped), and the final state is the
    // last document's
    {
        int exact = 1;
        double worst = 0;
        static float dq1[T * HK * DK], dk1[T * HK * DK], dv1[T * HV * DV], dg1[T * HV], db1[T * HV];
        static float oc16[N * HV * DV];
        OpsGdnShape s16 = s;
        s16.chunk = 16;
        ops_gdn_forward(oc16, NULL, NULL, q, k, v, g, beta, NULL, &s16);
        ops_gdn_backward(dq, dk, dv, dg, db, w, q, k, v, g, beta, NULL, &s16);
        for (int b = 0; b < B; b++)
            for (int j = 0; doc_first[b][j] >= 0; j++) {
                const int t0 = doc_first[b][j], t1 = doc_first[b][j + 1] >= 0 ? doc_first[b][j + 1] : T, L = t1 - t0;
                static float q1[T * HK * DK], k1[T * HK * DK], v1[T * HV * DV], g1[T * HV], b1[T * HV], w1[T * HV * DV];
                static float o1[T * HV * DV], s1[HV * DK * DV];
                doc_take(q1, q, b, t0, t1, HK * DK); doc_take(k1, k, b, t0, t1, HK * DK); doc_take(v1, v, b, t0, t1, HV * DV);
                doc_take(g1, g, b, t0, t1, HV); doc_take(b1, beta, b, t0, t1, HV); doc_take(w1, w, b, t0, t1, HV * DV);
                OpsGdnShape one = {1, L, HK, HV, DK, DV, 0, 0, 0, NULL};
                ops_gdn_forward(o1, s1, NULL, q1, k1, v1, g1, b1, NULL, &one);
                exact &= memcmp(o1, o + (size_t)(b * T + t0) * HV * DV, sizeof(float) * L * HV * DV) == 0;
                if (t1 == T) exact &= memcmp(s1, st + (size_t)b * HV * DK * DV, sizeof s1) == 0;
                worst = fmax(worst, rel_err(oc16 + (size_t)(b * T + t0) * HV * DV, o1, L * HV * DV));
                // the chunked backward of the packed sequences against each document's own recurrent
                // backward: 1e-4 of the document's largest gradient, as check_chunked_gates
                one.chunk = 0;
                ops_gdn_backward(dq1, dk1, dv1, dg1, db1, w1, q1, k1, v1, g1, b1, NULL, &one);
                worst = fmax(worst, 0.1 * rel_err(dq + (size_t)(b * T + t0) * HK * DK, dq1, L * HK * DK));
                worst = fmax(worst, 0.1 * rel_err(dk + (size_t)(b * T + t0) * HK * DK, dk1, L * HK * DK));
                worst = fmax(worst, 0.1 * rel_err(dv + (size_t)(b * T + t0) * HV * DV, dv1, L * HV * DV));
                worst = fmax(worst, 0.1 * rel_err(db + (size_t)(b * T + t0) * HV, db1, L * HV));
                // dg of a document's first token is 0 alone (nothing before it to decay); in the
                // packed chunked form it is a sum that cancels to roundoff: compared from the second
                if (L > 1) worst = fmax(worst, 0.1 * rel_err(dg + (size_t)(b * T + t0 + 1) * HV, dg1 + HV, (L - 1) * HV));
            }
        TU_CHECK(exact, "documents: the recurrent forward of a document differs from it alone");
        TU_CHECK(worst < 1e-5, "documents: chunked packed vs each document alone: %.3e", worst);
        printf("  documents: each alone = packed (recurrent forward and last state bit for bit; chunked C = 16 forward, and backward / 10, %.3e, tol 1e-5)\n", worst);
    }
    // one document in each sequence (doc_start all 0) = no documents, bit for bit: forward and
    // backward, recurrent and chunked (C = 16)
    {
        OpsGdnShape sz = *s0, sn = *s0;
        sz.doc_start = zeros;
        int same = 1;
        for (int c = 0; c < 2; c++) {
            sz.chunk = sn.chunk = c ? 16 : 0;
            static float oz[N * HV * DV], on[N * HV * DV], sz_[B * HV * DK * DV], sn_[B * HV * DK * DV];
            static float aq[N * HK * DK], ak[N * HK * DK], av[N * HV * DV], ag[N * HV], ab[N * HV];
            ops_gdn_forward(oz, sz_, NULL, q, k, v, g, beta, NULL, &sz);
            ops_gdn_forward(on, sn_, NULL, q, k, v, g, beta, NULL, &sn);
            same &= memcmp(oz, on, sizeof oz) == 0 && memcmp(sz_, sn_, sizeof sz_) == 0;
            ops_gdn_backward(aq, ak, av, ag, ab, w, q, k, v, g, beta, NULL, &sz);
            ops_gdn_backward(dq, dk, dv, dg, db, w, q, k, v, g, beta, NULL, &sn);
            same &= memcmp(aq, dq, sizeof aq) == 0 && memcmp(ak, dk, sizeof ak) == 0 && memcmp(av, dv, sizeof av) == 0 &&
                    memcmp(ag, dg, sizeof ag) == 0 && memcmp(ab, db, sizeof ab) == 0;
        }
        TU_CHECK(same, "documents: one document per sequence differs from no documents");
        printf("  documents: one document per sequence = no documents, bit for bit (recurrent and chunked, forward and backward)\n");
    }
}

int main(void) {
    ops_init(0);
    OpsGdnShape s = {B, T, HK, HV, DK, DV, 0, 0, 0, NULL};
    static float q[N * HK * DK], k[N * HK * DK], v[N * HV * DV], g[N * HV], beta[N * HV], w[N * HV * DV];
    tu_fill(q, N * HK * DK, 1.0); tu_fill(k, N * HK * DK, 1.0); tu_fill(v, N * HV * DV, 1.0); tu_fill(w, N * HV * DV, 1.0);
    for (int n = 0; n < N * HK; n++) {   // q, k L2-normalised per head, as the layer does
        float sq = 0, sk = 0;
        for (int i = 0; i < DK; i++) { sq += q[n * DK + i] * q[n * DK + i]; sk += k[n * DK + i] * k[n * DK + i]; }
        for (int i = 0; i < DK; i++) { q[n * DK + i] /= sqrtf(sq); k[n * DK + i] /= sqrtf(sk); }
    }
    for (int i = 0; i < N * HV; i++) {
        g[i] = (float)(-0.05 - 0.4 * (0.5 + 0.5 * tu_rand()));   // decays exp(g) in [0.64, 0.95]
        beta[i] = (float)(0.5 + 0.45 * tu_rand());
    }
    // 1. forward vs float64
    static float o[N * HV * DV], state[B * HV * DK * DV];
    ops_gdn_forward(o, state, NULL, q, k, v, g, beta, NULL, &s);
    static double dq_[N * HK * DK], dk_[N * HK * DK], dv_[N * HV * DV], dg_[N * HV], db_[N * HV], dw[N * HV * DV], ro[N * HV * DV];
    for (int i = 0; i < N * HK * DK; i++) { dq_[i] = q[i]; dk_[i] = k[i]; }
    for (int i = 0; i < N * HV * DV; i++) { dv_[i] = v[i]; dw[i] = w[i]; }
    for (int i = 0; i < N * HV; i++) { dg_[i] = g[i]; db_[i] = beta[i]; }
    ref_forward(ro, dq_, dk_, dv_, dg_, db_);
    double md = 0, mb = 0;
    for (int i = 0; i < N * HV * DV; i++) { md = fmax(md, fabs(o[i] - ro[i])); mb = fmax(mb, fabs(ro[i])); }
    TU_CHECK(md / mb < 1e-5, "forward vs float64: %.3e", md / mb);
    printf("  forward vs float64 recurrence: %.3e (tol 1e-5)\n", md / mb);

    // 2. backward vs central differences of the float64 recurrence: the recurrent form, then the
    // chunked form (C = 16: 4 chunks and a short last one; 64: one chunk and a 6-token one;
    // 128 > T: one short chunk). Same bound: the chunked backward's fp32 sums are regrouped and
    // at most C + dk terms deep (measured printed). The chunked backward as training runs it,
    // reading the Vn and states its forward kept (ops.h: saved); then the one that recomputes them, which
    // runs the same expressions through GEMM calls of other strides: equal to 1e-6 of the
    // largest gradient (fp32 roundoff of sums <= C + dk deep regrouped, were a GEMM library to
    // pick another kernel for another stride; measured printed).
    static float dq[N * HK * DK], dk[N * HK * DK], dv[N * HV * DV], dg[N * HV], dbeta[N * HV];
    ops_gdn_backward(dq, dk, dv, dg, dbeta, w, q, k, v, g, beta, NULL, &s);
    check_backward_fd("recurrent", dq, dk, dv, dg, dbeta, dq_, dk_, dv_, dg_, db_, dw);
    for (int ci = 0; ci < 3; ci++) {
        static float cq[N * HK * DK], ck[N * HK * DK], cv[N * HV * DV], cg[N * HV], cb[N * HV];
        OpsGdnShape sc = s;
        sc.chunk = ci == 0 ? 16 : ci == 1 ? 64 : 128;
        static float vn[SAVED], oc[N * HV * DV], oc2[N * HV * DV];
        ops_gdn_forward(oc, NULL, vn, q, k, v, g, beta, NULL, &sc);
        ops_gdn_forward(oc2, NULL, NULL, q, k, v, g, beta, NULL, &sc);
        ops_gdn_backward(cq, ck, cv, cg, cb, w, q, k, v, g, beta, vn, &sc);
        char name[32];
        snprintf(name, sizeof name, "chunked C=%d", sc.chunk);
        check_backward_fd(name, cq, ck, cv, cg, cb, dq_, dk_, dv_, dg_, db_, dw);
        static float rq[N * HK * DK], rk[N * HK * DK], rv[N * HV * DV], rg[N * HV], rb[N * HV];
        ops_gdn_backward(rq, rk, rv, rg, rb, w, q, k, v, g, beta, NULL, &sc);
        struct { const char* name; const float *a, *b; int n; } cmp[] = {
            {"o", oc2, oc, N * HV * DV}, {"dq", rq, cq, N * HK * DK}, {"dk", rk, ck, N * HK * DK},
            {"dv", rv, cv, N * HV * DV}, {"dg", rg, cg, N * HV}, {"dbeta", rb, cb, N * HV}};
        double worst = 0;
        for (int p = 0; p < 6; p++) {
            double e = 0, m = 0;
            for (int i = 0; i < cmp[p].n; i++) { e = fmax(e, fabs(cmp[p].a[i] - cmp[p].b[i])); m = fmax(m, fabs(cmp[p].b[i])); }
            TU_CHECK(m > 0 && e / m <= 1e-6, "C = %d: %s with Vn and states recomputed vs kept %.3e", sc.chunk, cmp[p].name, e / m);
            worst = fmax(worst, e / m);
        }
        printf("  chunked C=%d: forward without saved, backward recomputing Vn and states vs kept: %.3e (tol 1e-6)\n", sc.chunk, worst);
    }
    check_chunked_gates(&s, q, k, v, w);
    check_chunked_aligned();

    // 3. decoding: one token per call with the state carried = the whole sequence at once
    static float o1[N * HV * DV], st[B * HV * DK * DV], st2[B * HV * DK * DV];
    OpsGdnShape one = {B, 1, HK, HV, DK, DV, 0, 0, 0, NULL};
    memset(st, 0, sizeof st);
    for (int t = 0; t < T; t++) {
        float qt[B * HK * DK], kt[B * HK * DK], vt[B * HV * DV], gt[B * HV], bt[B * HV], ot[B * HV * DV];
        for (int b = 0; b < B; b++) {
            int n = b * T + t;
            memcpy(qt + b * HK * DK, q + n * HK * DK, sizeof(float) * HK * DK);
            memcpy(kt + b * HK * DK, k + n * HK * DK, sizeof(float) * HK * DK);
            memcpy(vt + b * HV * DV, v + n * HV * DV, sizeof(float) * HV * DV);
            memcpy(gt + b * HV, g + n * HV, sizeof(float) * HV);
            memcpy(bt + b * HV, beta + n * HV, sizeof(float) * HV);
        }
        ops_gdn_forward(ot, st2, NULL, qt, kt, vt, gt, bt, st, &one);
        memcpy(st, st2, sizeof st);
        for (int b = 0; b < B; b++) memcpy(o1 + (b * T + t) * HV * DV, ot + b * HV * DV, sizeof(float) * HV * DV);
    }
    TU_CHECK(memcmp(o1, o, sizeof o) == 0, "token-by-token outputs differ from the whole sequence");
    TU_CHECK(memcmp(st, state, sizeof st) == 0, "token-by-token final state differs");
    printf("  decoding one token at a time with the state carried: outputs and state bit for bit equal\n");

    // 4. the chunked form (chunks of 16, 64 and 128 > T; 70 = 4 x 16 + 6: a short last chunk) vs the
    // recurrent one, outputs and final state. Bound 1e-5 relative: the same sums regrouped (the
    // forward substitution over <= 128 rows, decays as exp of differences of cumulative sums);
    // measured 2.3e-7 (C = 16) to 1.0e-6 (C = 128, one chunk for all 70 tokens).
    const int chunks[] = {16, 64, 128};
    for (int ci = 0; ci < 3; ci++) {
        OpsGdnShape sc = s;
        sc.chunk = chunks[ci];
        static float oc[N * HV * DV], stc[B * HV * DK * DV];
        ops_gdn_forward(oc, stc, NULL, q, k, v, g, beta, NULL, &sc);
        double eo = 0, bo = 0, es = 0, bs = 0;
        for (int i = 0; i < N * HV * DV; i++) { eo = fmax(eo, fabs(oc[i] - o[i])); bo = fmax(bo, fabs(o[i])); }
        for (int i = 0; i < B * HV * DK * DV; i++) { es = fmax(es, fabs(stc[i] - state[i])); bs = fmax(bs, fabs(state[i])); }
        TU_CHECK(eo / bo < 1e-5 && es / bs < 1e-5, "chunk %d vs recurrent: outputs %.3e, state %.3e", chunks[ci], eo / bo, es / bs);
        printf("  chunked (C = %d) vs recurrent: outputs %.3e, final state %.3e (tol 1e-5)\n", chunks[ci], eo / bo, es / bs);
    }
    // with a state passed in: the second half of the sequence from the first half's state
    // (decoding a prompt in chunks), chunked, against the recurrent form over the whole
    {
        OpsGdnShape h1 = s, h2 = s;
        h1.T = 40; h2.T = T - 40; h2.chunk = 16;
        static float qa[N * HK * DK], ka[N * HK * DK], va[N * HV * DV], ga[N * HV], ba[N * HV], oa[N * HV * DV], sa[B * HV * DK * DV];
        static float qb[N * HK * DK], kb[N * HK * DK], vb[N * HV * DV], gb[N * HV], bb[N * HV], ob[N * HV * DV], sb2[B * HV * DK * DV];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int n = b * T + t, first = t < 40, m = first ? b * 40 + t : b * (T - 40) + (t - 40);
                memcpy((first ? qa : qb) + m * HK * DK, q + n * HK * DK, sizeof(float) * HK * DK);
                memcpy((first ? ka : kb) + m * HK * DK, k + n * HK * DK, sizeof(float) * HK * DK);
                memcpy((first ? va : vb) + m * HV * DV, v + n * HV * DV, sizeof(float) * HV * DV);
                memcpy((first ? ga : gb) + m * HV, g + n * HV, sizeof(float) * HV);
                memcpy((first ? ba : bb) + m * HV, beta + n * HV, sizeof(float) * HV);
            }
        ops_gdn_forward(oa, sa, NULL, qa, ka, va, ga, ba, NULL, &h1);
        ops_gdn_forward(ob, sb2, NULL, qb, kb, vb, gb, bb, sa, &h2);
        double e = 0, m = 0;
        for (int b = 0; b < B; b++)
            for (int t = 40; t < T; t++)
                for (int i = 0; i < HV * DV; i++) {
                    double x = ob[(b * (T - 40) + t - 40) * HV * DV + i], y = o[(b * T + t) * HV * DV + i];
                    e = fmax(e, fabs(x - y)); m = fmax(m, fabs(y));
                }
        TU_CHECK(e / m < 1e-5, "chunked from a passed-in state vs recurrent: %.3e", e / m);
        printf("  chunked (C = 16) from the state of the first 40 tokens vs recurrent: %.3e (tol 1e-5)\n", e / m);
    }
    // 6. strided rows: q, k inside rows of LQ, v inside rows of LV (as the layer's conv output),
    // forward (recurrent and chunked) and backward equal the dense results bit for bit
    {
        enum { LQ = HK * DK + 3, LV = HV * DV + 5 };
        static float qs[N * LQ], ks[N * LQ], vs[N * LV], os[N * HV * DV], dqs[N * LQ], dks[N * LQ], dvs[N * LV];
        static float dgs[N * HV], dbs[N * HV], oc1[N * HV * DV], oc2[N * HV * DV];
        for (int n = 0; n < N; n++) {
            memcpy(qs + n * LQ, q + n * HK * DK, sizeof(float) * HK * DK);
            memcpy(ks + n * LQ, k + n * HK * DK, sizeof(float) * HK * DK);
            memcpy(vs + n * LV, v + n * HV * DV, sizeof(float) * HV * DV);
        }
        OpsGdnShape ss = s;
        ss.ld_qk = LQ; ss.ld_v = LV;
        ops_gdn_forward(os, NULL, NULL, qs, ks, vs, g, beta, NULL, &ss);
        ops_gdn_backward(dqs, dks, dvs, dgs, dbs, w, qs, ks, vs, g, beta, NULL, &ss);
        int same = memcmp(os, o, sizeof os) == 0 && memcmp(dgs, dg, sizeof dgs) == 0 && memcmp(dbs, dbeta, sizeof dbs) == 0;
        for (int n = 0; n < N; n++)
            same &= memcmp(dqs + n * LQ, dq + n * HK * DK, sizeof(float) * HK * DK) == 0 &&
                    memcmp(dks + n * LQ, dk + n * HK * DK, sizeof(float) * HK * DK) == 0 &&
                    memcmp(dvs + n * LV, dv + n * HV * DV, sizeof(float) * HV * DV) == 0;
        OpsGdnShape sc = s, scs = ss;
        sc.chunk = scs.chunk = 16;
        ops_gdn_forward(oc1, NULL, NULL, q, k, v, g, beta, NULL, &sc);
        ops_gdn_forward(oc2, NULL, NULL, qs, ks, vs, g, beta, NULL, &scs);
        same &= memcmp(oc1, oc2, sizeof oc1) == 0;
        static float cq[N * HK * DK], ck[N * HK * DK], cv[N * HV * DV], cg[N * HV], cb[N * HV];
        ops_gdn_backward(cq, ck, cv, cg, cb, w, q, k, v, g, beta, NULL, &sc);
        ops_gdn_backward(dqs, dks, dvs, dgs, dbs, w, qs, ks, vs, g, beta, NULL, &scs);
        same &= memcmp(dgs, cg, sizeof dgs) == 0 && memcmp(dbs, cb, sizeof dbs) == 0;
        for (int n = 0; n < N; n++)
            same &= memcmp(dqs + n * LQ, cq + n * HK * DK, sizeof(float) * HK * DK) == 0 &&
                    memcmp(dks + n * LQ, ck + n * HK * DK, sizeof(float) * HK * DK) == 0 &&
                    memcmp(dvs + n * LV, cv + n * HV * DV, sizeof(float) * HV * DV) == 0;
        TU_CHECK(same, "strided q/k/v rows differ from dense rows");
        printf("  strided q, k, v rows (forward and backward, recurrent and chunked): bit for bit the dense results\n");
    }
    check_documents(&s, q, k, v, g, beta, w, dq_, dk_, dv_, dg_, db_, dw);
    test_layer_ops();
    return tu_finish();
}
