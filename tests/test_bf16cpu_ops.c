// tests/test_bf16cpu_ops.c: the fast CPU bf16 backend's GEMM ops (oneDNN bf16 matmul with fp32
// accumulation, kernels/cpu_bf16/ops_bf16_fast.c) against the emulation's (the fp32 CPU kernels
// ref_ops_* over the same bf16 values widened, kernels/cpu_bf16/ops_bf16.c), element by element,
// at a bound derived from arithmetic, not measured:
//   - a bf16 x bf16 product is exact in fp32 (8 + 8 significant bits), so both sides sum the same
//     K exact terms in fp32 in different orders; each order is within gamma_K = K u (u = 2^-24) of
//     the exact sum, relative to S = sum |a_k b_k| (+ |C| where the GEMM accumulates into C). So
//     |fast - emulation| <= 2 (K + 2) u S for every fp32 output (dw, the fp32 forward);
//   - a bf16 output is the rounding (nearest even) of such an fp32 value (plus the bias, or through
//     GELU): it must be one of the roundings of [v - b, v + b] around the emulation's fp32 value v,
//     with b that bound (GELU: times max |gelu'| < 1.13, plus the fp32 evaluation's own 4 u |v|).
// A GEMM that accumulated in bf16 (2^-9 relative) misses these bounds by ~2^-9 / (2 K 2^-24)
// = 64x at K = 512. Also: the backend names its ISA, and with ONEDNN_MAX_CPU_ISA=AVX2 (an
// AVX2-only host to oneDNN) it says so in one line and runs the emulation's GEMMs (run by
// tests/CMakeLists.txt with that variable: then the outputs must equal the emulation's bit for bit).
// Where the CPU has no bf16 units at all every case runs the emulation's GEMMs and still passes.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "kernels/ops.h"
#include "kernels/cpu_bf16/matmul_bf16.h"
#include "cpu_ref_ops.h"
#include "kernels/attn_gate.h"

#define U 0x1p-24
static int exact_mode;   // ONEDNN_MAX_CPU_ISA caps oneDNN below bf16: the emulation's GEMMs, bit for bit
static double worst_ratio;   // the largest |fast - emulation| / bound seen

static act_t* rand_act(size_t n, double scale) {
    act_t* a = malloc(n * sizeof(act_t));
    for (size_t i = 0; i < n; i++) a[i] = bf16_from_f32((float)(scale * tu_rand()));
    return a;
}
static float* widen_all(const act_t* a, size_t n) {
    float* f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(a[i]);
    return f;
}
// S[i, j] = sum_k |A(i, k)| |B(k, j)|, A(i, k) = A[i * ai + k * ak], B(k, j) = B[k * bk + j * bj]
static double* absdot(const float* A, int ai, int ak, const float* B, int bk, int bj, int M, int N, int K) {
    double* S = calloc((size_t)M * N, sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += fabs((double)A[(size_t)i * ai + (size_t)k * ak]) * fabs((double)B[(size_t)k * bk + (size_t)j * bj]);
            S[(size_t)i * N + j] = s;
        }
    return S;
}
// fp32 outputs: |got - want| <= 2 (K + 2) u (S + |c0|)
static void check_f32(const char* what, const float* got, const float* want, const double* S, const float* c0,
                      size_t n, int K) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double b = 2.0 * (K + 2) * U * (S[i] + (c0 ? fabs((double)c0[i]) : 0.0));
        double d = fabs((double)got[i] - want[i]);
        if (exact_mode ? got[i] != want[i] : !(d <= b)) bad++;
        if (b > 0 && d / b > worst_ratio) worst_ratio = d / b;
    }
    TU_CHECK(bad == 0, "%s: %d of %zu fp32 outputs outside the summation-order bound%s", what, bad, n,
             exact_mode ? " (emulation mode: must be bit-equal)" : "");
}
// bf16 outputs: got is a rounding of some value within b[i] of the emulation's fp32 value v[i]
static void check_act(const char* what, const act_t* got, const float* v, const double* b, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (exact_mode) { bad += got[i] != bf16_from_f32(v[i]); continue; }
        float lo = bf16_to_f32(bf16_from_f32((float)(v[i] - b[i]))), hi = bf16_to_f32(bf16_from_f32((float)(v[i] + b[i])));
        float g = bf16_to_f32(got[i]);
        if (!(g >= lo && g <= hi)) { if (bad < 3 && getenv("DBG")) printf("    %s [%zu]: got %.9g want %.9g bound %.3g\n", what, i, g, v[i], b[i]); bad++; }
    }
    TU_CHECK(bad == 0, "%s: %d of %zu bf16 outputs are not a rounding within the bound of the emulation's value", what,
             bad, n);
}
// the bound of each element of a GEMM output (scale x, plus extra u |v| for the ops after it)
static double* bounds(const double* S, const float* v, size_t n, int K, double scale, double rel) {
    double* b = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) b[i] = scale * 2.0 * (K + 2) * U * S[i] + rel * U * fabs((double)v[i]);
    return b;
}

// the dense ops: forward (bf16, fp32 =, fp32 +=, bias), backward (dinp, dw +=), GELU forward/backward
static void test_dense(int N, int C, int OC) {
    act_t *inp = rand_act((size_t)N * C, 1.0), *w = rand_act((size_t)OC * C, 0.5), *dout = rand_act((size_t)N * OC, 1.0);
    act_t *bias = rand_act(OC, 0.3), *pre = rand_act((size_t)N * C, 2.0);
    float *fi = widen_all(inp, (size_t)N * C), *fw = widen_all(w, (size_t)OC * C), *fd = widen_all(dout, (size_t)N * OC);
    float *fb = widen_all(bias, OC), *fp = widen_all(pre, (size_t)N * C);
    double* Sf = absdot(fi, C, 1, fw, 1, C, N, OC, C);    // out = inp w^T: K = C
    double* Sd = absdot(fd, OC, 1, fw, C, 1, N, C, OC);   // dinp = dout w: K = OC
    double* Sw = absdot(fd, 1, OC, fi, C, 1, OC, C, N);   // dw = dout^T inp: K = N
    const size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    char what[96];

    // out = inp @ w^T, in bf16 and in fp32 (= and +=)
    float *want = malloc(no * sizeof(float)), *got = malloc(no * sizeof(float)), *c0 = malloc(no * sizeof(float));
    act_t* gota = malloc(no * sizeof(act_t));
    ref_ops_matmul_forward(want, fi, fw, N, C, OC);
    ops_matmul_forward(gota, inp, w, N, C, OC);
    double* b = bounds(Sf, want, no, C, 1.0, 0.0);
    snprintf(what, sizeof what, "matmul_forward %dx%dx%d", N, C, OC);
    check_act(what, gota, want, b, no);
    ops_matmul_forward_f32(got, inp, w, N, C, OC, 0);
    snprintf(what, sizeof what, "matmul_forward_f32 (=) %dx%dx%d", N, C, OC);
    check_f32(what, got, want, Sf, NULL, no, C);
    tu_fill(c0, no, 3.0);
    memcpy(got, c0, no * sizeof(float)); memcpy(want, c0, no * sizeof(float));
    ref_ops_matmul_forward_f32(want, fi, fw, N, C, OC, 1);
    ops_matmul_forward_f32(got, inp, w, N, C, OC, 1);
    snprintf(what, sizeof what, "matmul_forward_f32 (+=) %dx%dx%d", N, C, OC);
    check_f32(what, got, want, Sf, c0, no, C);
    // with the bias: one more fp32 sum (u |v|)
    ref_ops_matmul_bias_forward(want, fi, fw, fb, N, C, OC);
    ops_matmul_bias_forward(gota, inp, w, bias, N, C, OC);
    free(b); b = bounds(Sf, want, no, C, 1.0, 2.0);
    snprintf(what, sizeof what, "matmul_bias_forward %dx%dx%d", N, C, OC);
    check_act(what, gota, want, b, no);
    // GELU: pre as the product, act = gelu(pre) (|gelu'| < 1.13, its fp32 evaluation within 4 u |v|)
    float* wanta = malloc(no * sizeof(float));
    act_t* gotp = malloc(no * sizeof(act_t));
    ref_ops_matmul_gelu_forward(want, wanta, fi, fw, N, C, OC);
    ops_matmul_gelu_forward(gotp, gota, inp, w, N, C, OC);
    free(b); b = bounds(Sf, want, no, C, 1.0, 0.0);
    snprintf(what, sizeof what, "matmul_gelu_forward pre %dx%dx%d", N, C, OC);
    check_act(what, gotp, want, b, no);
    free(b); b = bounds(Sf, wanta, no, C, 1.13, 4.0);
    snprintf(what, sizeof what, "matmul_gelu_forward act %dx%dx%d", N, C, OC);
    check_act(what, gota, wanta, b, no);
    free(b); free(wanta); free(gotp);

    // backward: dinp (bf16) and dw (fp32 +=, onto a non-zero gradient)
    float *wdi = malloc(ni * sizeof(float)), *wdw = malloc(nw * sizeof(float)), *gdw = malloc(nw * sizeof(float));
    float* dw0 = malloc(nw * sizeof(float));
    act_t* gdi = malloc(ni * sizeof(act_t));
    tu_fill(dw0, nw, 2.0);
    memcpy(wdw, dw0, nw * sizeof(float)); memcpy(gdw, dw0, nw * sizeof(float));
    ref_ops_matmul_backward(wdi, wdw, fd, fi, fw, N, C, OC);
    ops_matmul_backward(gdi, gdw, dout, inp, w, N, C, OC);
    b = bounds(Sd, wdi, ni, OC, 1.0, 0.0);
    snprintf(what, sizeof what, "matmul_backward dinp %dx%dx%d", N, C, OC);
    check_act(what, gdi, wdi, b, ni);
    snprintf(what, sizeof what, "matmul_backward dw (+=) %dx%dx%d", N, C, OC);
    check_f32(what, gdw, wdw, Sw, dw0, nw, N);
    // GELU backward: dpre = (dout @ w) * gelu'(pre), dw as above
    memcpy(wdw, dw0, nw * sizeof(float)); memcpy(gdw, dw0, nw * sizeof(float));
    ref_ops_matmul_backward_gelu(wdi, wdw, fd, fi, fw, fp, N, C, OC);
    ops_matmul_backward_gelu(gdi, gdw, dout, inp, w, pre, N, C, OC);
    free(b); b = bounds(Sd, wdi, ni, OC, 1.13, 2.0);
    snprintf(what, sizeof what, "matmul_backward_gelu dpre %dx%dx%d", N, C, OC);
    check_act(what, gdi, wdi, b, ni);
    snprintf(what, sizeof what, "matmul_backward_gelu dw (+=) %dx%dx%d", N, C, OC);
    check_f32(what, gdw, wdw, Sw, dw0, nw, N);
    free(b); free(wdi); free(wdw); free(gdw); free(dw0); free(gdi);
    free(want); free(got); free(c0); free(gota);
    free(Sf); free(Sd); free(Sw);
    free(inp); free(w); free(dout); free(bias); free(pre); free(fi); free(fw); free(fd); free(fb); free(fp);
}

// the MoE experts' grouped GEMMs: G groups of uneven rows (one empty), forward and backward
static void test_grouped(int C, int OC) {
    const int G = 4, offsets[5] = {0, 37, 37, 101, 130}, R = offsets[4];
    act_t *inp = rand_act((size_t)R * C, 1.0), *w = rand_act((size_t)G * OC * C, 0.5), *dout = rand_act((size_t)R * OC, 1.0);
    float *fi = widen_all(inp, (size_t)R * C), *fw = widen_all(w, (size_t)G * OC * C), *fd = widen_all(dout, (size_t)R * OC);
    float *want = malloc((size_t)R * OC * sizeof(float)), *wdi = malloc((size_t)R * C * sizeof(float));
    float *wdw = malloc((size_t)G * OC * C * sizeof(float)), *gdw = malloc((size_t)G * OC * C * sizeof(float));
    act_t *got = malloc((size_t)R * OC * sizeof(act_t)), *gdi = malloc((size_t)R * C * sizeof(act_t));
    ref_ops_grouped_matmul_forward(want, fi, fw, offsets, G, C, OC);
    ops_grouped_matmul_forward(got, inp, w, offsets, G, C, OC);
    tu_fill(wdw, (size_t)G * OC * C, 1.0);
    float* dw0 = malloc((size_t)G * OC * C * sizeof(float));
    memcpy(dw0, wdw, (size_t)G * OC * C * sizeof(float)); memcpy(gdw, wdw, (size_t)G * OC * C * sizeof(float));
    ref_ops_grouped_matmul_backward(wdi, wdw, fd, fi, fw, offsets, G, C, OC);
    ops_grouped_matmul_backward(gdi, gdw, dout, inp, w, offsets, G, C, OC);
    int bad_f = 0, bad_i = 0, bad_w = 0;
    for (int g = 0; g < G; g++) {
        const int r0 = offsets[g], rows = offsets[g + 1] - r0;
        const float *gi = fi + (size_t)r0 * C, *gw = fw + (size_t)g * OC * C, *gd = fd + (size_t)r0 * OC;
        double* Sf = absdot(gi, C, 1, gw, 1, C, rows, OC, C);
        double* Sd = absdot(gd, OC, 1, gw, C, 1, rows, C, OC);
        double* Sw = absdot(gd, 1, OC, gi, C, 1, OC, C, rows);
        int f0 = tu_failed;
        double* b = bounds(Sf, want + (size_t)r0 * OC, (size_t)rows * OC, C, 1.0, 0.0);
        check_act("grouped_matmul_forward", got + (size_t)r0 * OC, want + (size_t)r0 * OC, b, (size_t)rows * OC);
        bad_f += tu_failed - f0; f0 = tu_failed; free(b);
        b = bounds(Sd, wdi + (size_t)r0 * C, (size_t)rows * C, OC, 1.0, 0.0);
        check_act("grouped_matmul_backward dinp", gdi + (size_t)r0 * C, wdi + (size_t)r0 * C, b, (size_t)rows * C);
        bad_i += tu_failed - f0; f0 = tu_failed; free(b);
        check_f32("grouped_matmul_backward dw (+=)", gdw + (size_t)g * OC * C, wdw + (size_t)g * OC * C, Sw,
                  dw0 + (size_t)g * OC * C, (size_t)OC * C, rows);
        bad_w += tu_failed - f0;
        free(Sf); free(Sd); free(Sw);
    }
    printf("  grouped GEMMs (%d groups, %d rows, C %d, OC %d): %d / %d / %d groups failed (forward / dinp / dw)\n", G, R, C,
           OC, bad_f, bad_i, bad_w);
    free(inp); free(w); free(dout); free(fi); free(fw); free(fd); free(want); free(wdi); free(wdw); free(gdw);
    free(got); free(gdi); free(dw0);
}

// The attention (kernels/cpu_bf16/attention_bf16.c on the fast build): its tiles' products on the
// bf16 units, P and dS (and with the sdpa gate dy) rounded to bf16 before their products, as the
// CUDA flash kernel. Against the emulation (the fp32 kernel over the widened inputs), with bounds
// from the arithmetic, per row t of head h (fp64 stand-ins P, dP, D for the fp32 values, u = 2^-24):
//   dS_score = 2 (hd + 2) u scale max_u sum_d |q_td k_ud|   (two fp32 orders of the scores)
//   y_t:  (2^-8 + 2 dS_score + 2 (T + 2) u) sum_u P_tu |v_u|   (P rounded; P's own error e^dS - 1)
//   lse_t: 2 dS_score + 8 u (|lse| + 1)
//   dS_tu error <= e1 E_tu, E_tu = scale P_tu (|dP_tu - D_t| + sum_d |dy_td v_ud|),
//     e1 = 2^-8 (rounded dS) + 2 dS_score + 2 (hd + 4) u (+ 2^-8 with the gate: dy rounded)
//   dq_t: (e1 + 2 (T + 2) u) sum_u E_tu |k_u|;  dk_u: (e1 + 2 (rep T + 2) u) sum_t E_tu |q_t|
//   dv_u: (2^-8 + 2 dS_score + 8 u + 2 (rep T + 2) u) sum_t P_tu |dy_t| (+ 2^-8 with the gate)
// each times 1.01 (the fp64 stand-ins differ from the fp32 values by a few u relative). The gate's
// logit gradients are the same fp32 expression in the same order: bit for bit.
static double sigm(double z) { return 1.0 / (1.0 + exp(-z)); }
static void test_attention(int B, int T, int H, int Hkv, int hd, OpsGate gate, int docs) {
    OpsAttnShape s = {.B = B, .T = T, .H = H, .Hkv = Hkv, .hd = hd, .gate = gate, .gate_pos = OPS_GATEPOS_SDPA,
                      .gate_act = OPS_ACT_SIGMOID};
    const int N = B * T, ldq = H * hd, ldk = Hkv * hd, rep = H / Hkv, QKVG = ops_attn_qkv_cols(&s);
    const int zoff = attn_shape_z_off(&s), sgate = gate != OPS_GATE_NONE;
    const double scale = 1.0 / sqrt((double)hd), ubf = 0x1p-8;   // bf16's unit roundoff (8 significant bits): |round(x) - x| <= 2^-8 |x|
    int* ds = NULL;
    if (docs) {   // documents starting at t = 0, 37, 38 (a one-token document), 150 of each sequence
        ds = malloc((size_t)N * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int t = 0, d = 0; t < T; t++) { if (t == 37 || t == 38 || t == 150) d = t; ds[b * T + t] = d; }
        s.doc_start = ds;
    }
    act_t *q = rand_act((size_t)N * ldq, 2.0), *k = rand_act((size_t)N * ldk, 2.0), *v = rand_act((size_t)N * ldk, 1.0);
    act_t *qkv = rand_act((size_t)N * QKVG, 2.0), *dyg = rand_act((size_t)N * ldq, 1.0);
    float *fq = widen_all(q, (size_t)N * ldq), *fk = widen_all(k, (size_t)N * ldk), *fv = widen_all(v, (size_t)N * ldk);
    float *fqkv = widen_all(qkv, (size_t)N * QKVG), *fdyg = widen_all(dyg, (size_t)N * ldq);
    const size_t ny = (size_t)N * ldq, nk = (size_t)N * ldk, nl = (size_t)B * H * T;
    // forward: the emulation's fp32 y, yg, lse; the backend's bf16 y, yg and lse
    float *wy = malloc(ny * sizeof(float)), *wyg = malloc(ny * sizeof(float)), *wl = malloc(nl * sizeof(float));
    float* gl = malloc(nl * sizeof(float));
    act_t *gy = malloc(ny * sizeof(act_t)), *gyg = malloc(ny * sizeof(act_t));
    ref_ops_attention_forward(wy, wyg, wl, fq, fk, fv, fqkv, &s);
    ops_attention_forward(gy, gyg, gl, q, k, v, qkv, &s);
    // backward of both from the same inputs: the backend's y, the emulation's lse
    float* fy = widen_all(gy, ny);
    float *wdq = calloc(ny, sizeof(float)), *wdk = calloc(nk, sizeof(float)), *wdv = calloc(nk, sizeof(float));
    float *wdqkv = widen_all(qkv, (size_t)N * QKVG), *scr = calloc(ny, sizeof(float));
    act_t *gdq = malloc(ny * sizeof(act_t)), *gdk = malloc(nk * sizeof(act_t)), *gdv = malloc(nk * sizeof(act_t));
    act_t* gdqkv = malloc((size_t)N * QKVG * sizeof(act_t));
    memcpy(gdqkv, qkv, (size_t)N * QKVG * sizeof(act_t));   // the columns the op must leave alone
    ref_ops_attention_backward(wdq, wdk, wdv, wdqkv, scr, fdyg, fq, fk, fv, fy, wl, fqkv, &s);
    ops_attention_backward(gdq, gdk, gdv, gdqkv, NULL, dyg, q, k, v, gy, wl, qkv, &s);

    // the bounds, in fp64
    double *by = calloc(ny, sizeof(double)), *byg = calloc(ny, sizeof(double)), *bl = calloc(nl, sizeof(double));
    double *bq = calloc(ny, sizeof(double)), *bk = calloc(nk, sizeof(double)), *bv = calloc(nk, sizeof(double));
    double *P = malloc((size_t)T * sizeof(double)), *dP = malloc((size_t)T * sizeof(double)), *Sa = malloc((size_t)T * sizeof(double));
    double* dy = malloc((size_t)hd * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const size_t n = (size_t)b * T + t, kh = h / rep;
                const int lo = ds ? ds[n] : 0;
                const float *qt = fq + n * ldq + h * hd, *yt = fy + n * ldq + h * hd, *z = fqkv + n * QKVG + zoff;
                double mx = -INFINITY, sum = 0.0, amax = 0.0, D = 0.0;
                for (int i = 0; i < hd; i++) {
                    const double a = !sgate ? 1.0 : sigm(z[gate == OPS_GATE_ELEMENTWISE ? h * hd + i : h]);
                    dy[i] = fdyg[n * ldq + h * hd + i] * a;
                    D += dy[i] * yt[i];
                }
                for (int u = lo; u <= t; u++) {
                    const float* ku = fk + ((size_t)b * T + u) * ldk + kh * hd;
                    double sc = 0.0, sa = 0.0;
                    for (int d = 0; d < hd; d++) { sc += (double)qt[d] * ku[d]; sa += fabs((double)qt[d] * ku[d]); }
                    P[u] = sc * scale; Sa[u] = sa;
                    if (P[u] > mx) mx = P[u];
                    if (sa > amax) amax = sa;
                }
                for (int u = lo; u <= t; u++) sum += exp(P[u] - mx);
                const double lse = mx + log(sum), dsc = 2.0 * (hd + 2) * U * scale * amax;
                bl[((size_t)b * H + h) * T + t] = 1.01 * (2.0 * dsc + 8.0 * U * (fabs(lse) + 1.0));
                const double e1 = ubf + 2.0 * dsc + 2.0 * (hd + 4) * U + (sgate ? ubf : 0.0);
                const double ey = ubf + 2.0 * dsc + 2.0 * (T + 2) * U;
                const double ev = ubf + 2.0 * dsc + 8.0 * U + 2.0 * ((double)rep * T + 2) * U + (sgate ? ubf : 0.0);
                for (int u = lo; u <= t; u++) {
                    const float* vu = fv + ((size_t)b * T + u) * ldk + kh * hd;
                    const float* ku = fk + ((size_t)b * T + u) * ldk + kh * hd;
                    double dp = 0.0, dpa = 0.0;
                    P[u] = exp(P[u] - lse);
                    for (int d = 0; d < hd; d++) { dp += dy[d] * vu[d]; dpa += fabs(dy[d] * vu[d]); }
                    dP[u] = dp;
                    const double E = scale * P[u] * (fabs(dp - D) + dpa);
                    for (int i = 0; i < hd; i++) {
                        by[n * ldq + h * hd + i] += 1.01 * ey * P[u] * fabs((double)vu[i]);
                        bq[n * ldq + h * hd + i] += 1.01 * (e1 + 2.0 * (T + 2) * U) * E * fabs((double)ku[i]);
                        const size_t ku_i = ((size_t)b * T + u) * ldk + kh * hd + i;
                        bk[ku_i] += 1.01 * (e1 + 2.0 * ((double)rep * T + 2) * U) * E * fabs((double)qt[i]);
                        bv[ku_i] += 1.01 * ev * P[u] * fabs(dy[i]);
                    }
                }
                (void)Sa; (void)dP;
                for (int i = 0; i < hd; i++) {   // yg = y a(z): the same relative bound, plus the product's u
                    const double a = !sgate ? 1.0 : sigm(z[gate == OPS_GATE_ELEMENTWISE ? h * hd + i : h]);
                    byg[n * ldq + h * hd + i] = by[n * ldq + h * hd + i] * a + 4.0 * U * fabs((double)wyg[n * ldq + h * hd + i]);
                }
            }
    char what[120];
    const char* gname = gate == OPS_GATE_NONE ? "no gate" : gate == OPS_GATE_ELEMENTWISE ? "elementwise gate" : "headwise gate";
    snprintf(what, sizeof what, "attention B%d T%d H%d/%d hd%d %s%s", B, T, H, Hkv, hd, gname, docs ? " docs" : "");
    char w2[160];
    snprintf(w2, sizeof w2, "%s: y", what); check_act(w2, gy, wy, by, ny);
    snprintf(w2, sizeof w2, "%s: yg", what); check_act(w2, gyg, wyg, byg, ny);
    int bad = 0;
    for (size_t i = 0; i < nl; i++) bad += exact_mode ? gl[i] != wl[i] : !(fabs((double)gl[i] - wl[i]) <= bl[i]);
    TU_CHECK(bad == 0, "%s: %d of %zu lse outside the bound", what, bad, nl);
    snprintf(w2, sizeof w2, "%s: dq", what); check_act(w2, gdq, wdq, bq, ny);
    snprintf(w2, sizeof w2, "%s: dk", what); check_act(w2, gdk, wdk, bk, nk);
    snprintf(w2, sizeof w2, "%s: dv", what); check_act(w2, gdv, wdv, bv, nk);
    bad = 0;   // dqkv: the gate's columns the emulation's bits, the rest untouched
    for (size_t n = 0; n < (size_t)N; n++)
        for (int c = 0; c < QKVG; c++) {
            const size_t i = n * QKVG + c;
            bad += gdqkv[i] != (sgate && c >= zoff ? bf16_from_f32(wdqkv[i]) : qkv[i]);
        }
    TU_CHECK(bad == 0, "%s: %d dqkv entries differ (gate columns: the emulation's bits; others: untouched)", what, bad);
    printf("  %s: y, yg, lse, dq, dk, dv within the bounds, dqkv's gate columns bit for bit\n", what);
    free(ds); free(q); free(k); free(v); free(qkv); free(dyg); free(fq); free(fk); free(fv); free(fqkv); free(fdyg);
    free(wy); free(wyg); free(wl); free(gl); free(gy); free(gyg); free(fy); free(wdq); free(wdk); free(wdv); free(wdqkv);
    free(scr); free(gdq); free(gdk); free(gdv); free(gdqkv); free(by); free(byg); free(bl); free(bq); free(bk); free(bv);
    free(P); free(dP); free(Sa); free(dy);
}

int main(void) {
    ops_init(0);
    const char* cap = getenv("ONEDNN_MAX_CPU_ISA");
    exact_mode = bf16mm_isa() == BF16MM_NONE;
    printf("  backend: %s (bf16 units: CPU %s, used %s%s%s)\n", ops_backend_name(), bf16mm_isa_name(bf16mm_cpu_isa()),
           bf16mm_isa_name(bf16mm_isa()), cap ? ", ONEDNN_MAX_CPU_ISA=" : "", cap ? cap : "");
    if (exact_mode) TU_CHECK(strstr(ops_backend_name(), "bf16-emulation") != NULL, "without bf16 units the backend is not the emulation");
    else TU_CHECK(strstr(ops_backend_name(), "oneDNN bf16 matmul") != NULL, "with bf16 units the backend does not use them");
    // the AVX2 pretence: oneDNN capped at AVX2 must turn the bf16 GEMMs off, whatever the CPU has
    if (cap && (strcmp(cap, "AVX2") == 0 || strcmp(cap, "avx2") == 0))
        TU_CHECK(exact_mode, "ONEDNN_MAX_CPU_ISA=%s: the bf16 GEMMs are still on", cap);
    test_dense(64, 96, 80);      // tails of every blocking (none a multiple of 16 or 32 but 64, 96)
    test_dense(33, 512, 200);    // K = 512 in the forward, odd rows
    test_dense(256, 48, 1000);   // K = 1000 in dinp, 256 in dw
    test_grouped(72, 40);
    test_attention(2, 200, 4, 2, 32, OPS_GATE_NONE, 0);         // GQA; T past one tile with a tail
    test_attention(1, 160, 2, 2, 64, OPS_GATE_ELEMENTWISE, 1);  // documents, the sdpa gate
    test_attention(2, 130, 4, 1, 16, OPS_GATE_HEADWISE, 1);
    printf("  worst |fast - emulation| / bound: %.3f (the bound: 2 (K + 2) 2^-24 sum |a b|)\n", worst_ratio);
    return tu_finish();
}
