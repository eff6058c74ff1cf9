// tests/test_hybrid_ops.c: the Gated DeltaNet layer's ops around the delta rule on the CPU backend
// (kernels/cpu/deltanet.c: causal conv1d + SiLU) against a float64 reference written here from
// ops.h's definitions, at shapes that cross the kernel's work split (channel chunks of 16-128,
// a ring of K rows over the tokens), and bit for bit equal over 1, 2 and 3 threads.
// tests/test_deltanet.c checks the same ops against finite differences on a tiny shape; this
// file checks the values on larger ones, where the split has boundaries.
//
// Bounds per element, u = 2^-24, derived from the kernel's roundings (the reference is exact to
// ~1e-16); the check is at 2x the bound (second-order terms), the measured fraction printed:
//   pre = sum_j w_j x_j in fp32 FMAs:  |err| <= K u sum_j |w_j x_j|  =: Ep
//   out = pre / (1 + cpu_expf(-pre)):  cpu_expf <= 2 ulp (4u), then 1+e and the division (u each):
//         |err| <= 1.1 Ep + 6u |out|   (|silu'| <= 1.1 carries pre's error)
//   backward, from the op's own fp32 pre (an input of the backward): s = 1/(1+e) to 6u, then
//   1-s, x(1-s), 1+x(1-s), s(...) add <= 10u:  |err sg| <= 16u s (1+|x|);  dp = dout sg:
//         Dt = 17u |dout| s (1+|x|)
//   dx[u] = sum_{i<K} dp[u+i] w[K-1-i]:  |err| <= sum |w| Dt + K u sum |dp w|
//   dw[c,j] = dw0 + sum_{b,t} dp[t] x[t-K+1+j] (n = B T terms in a running sum):
//         |err| <= sum |x| Dt + n u (|dw0| + sum |dp x|)
#include "../kernels/ops.h"
#include "test_util.h"
#include <string.h>

static const double U = 5.9604644775390625e-08;   // 2^-24

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

// the input of tap j of output t of sequence b, channel c: x before token 0 from st (or 0)
static double conv_in(const float* x, const float* st, int b, int t, int j, int c, int T, int C, int K) {
    const int u = t - (K - 1) + j;
    if (u >= 0) return x[((size_t)b * T + u) * C + c];
    return st ? st[((size_t)b * C + c) * (K - 1) + (K - 1 + u)] : 0.0;
}

// worst err / bound over n elements
static double worst(const float* got, const double* ref, const double* bound, size_t n) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)got[i] - ref[i]) / (bound[i] > 0 ? bound[i] : 1e-300);
        if (!(r <= w)) w = isnan(r) ? INFINITY : r;
    }
    return w;
}

static void test_conv(int B, int T, int C, int K, int with_state) {
    const size_t n = (size_t)B * T * C, ns = (size_t)B * C * (K - 1);
    float *x = malloc(n * sizeof(float)), *w = malloc((size_t)C * K * sizeof(float));
    float *st = with_state ? malloc((ns ? ns : 1) * sizeof(float)) : NULL, *dout = malloc(n * sizeof(float));
    float *dw0 = malloc((size_t)C * K * sizeof(float));
    tu_fill(x, n, 2.0); tu_fill(w, (size_t)C * K, 0.8); tu_fill(dout, n, 1.0); tu_fill(dw0, (size_t)C * K, 0.5);
    if (st) tu_fill(st, ns, 2.0);
    // float64 reference
    double *rpre = malloc(n * sizeof(double)), *rout = malloc(n * sizeof(double));
    double *bpre = malloc(n * sizeof(double)), *bout = malloc(n * sizeof(double));
    double *rst = malloc((ns ? ns : 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double p = 0.0, a = 0.0;
                for (int j = 0; j < K; j++) {
                    double term = (double)w[(size_t)c * K + j] * conv_in(x, st, b, t, j, c, T, C, K);
                    p += term; a += fabs(term);
                }
                size_t i = ((size_t)b * T + t) * C + c;
                rpre[i] = p; rout[i] = p * sigm(p);
                bpre[i] = K * U * a;
                bout[i] = 1.1 * bpre[i] + 6 * U * fabs(rout[i]);
            }
    for (int b = 0; b < B; b++)   // the state after the sequence: its last K-1 inputs, oldest first
        for (int c = 0; c < C; c++)
            for (int j = 0; j < K - 1; j++) rst[((size_t)b * C + c) * (K - 1) + j] = conv_in(x, st, b, T - 1, j + 1, c, T, C, K);

    // the op at 1, 2 and 3 threads (chunks of 64, 32 and 16 channels for C = 300)
    float *out[3], *pre[3], *so[3], *dx[3], *dw[3];
    for (int th = 1; th <= 3; th++) {
        const int i = th - 1;
        ops_init(th);
        out[i] = malloc(n * sizeof(float)); pre[i] = malloc(n * sizeof(float)); dx[i] = malloc(n * sizeof(float));
        so[i] = malloc((ns ? ns : 1) * sizeof(float)); dw[i] = malloc((size_t)C * K * sizeof(float));
        memcpy(dw[i], dw0, (size_t)C * K * sizeof(float));
        ops_conv1d_silu_forward(out[i], pre[i], so[i], x, w, st, B, T, C, K);
        if (!with_state) ops_conv1d_silu_backward(dx[i], dw[i], dout, x, pre[i], w, B, T, C, K);
    }
    char nm[128];
    snprintf(nm, sizeof nm, "conv1d B=%d T=%d C=%d K=%d%s", B, T, C, K, with_state ? " state_in" : "");
    double ep = worst(pre[0], rpre, bpre, n), eo = worst(out[0], rout, bout, n);
    TU_CHECK(ep <= 2.0 && eo <= 2.0, "%s forward vs float64: pre %.3f, out %.3f of the bound (limit 2)", nm, ep, eo);
    int st_same = 1;
    for (size_t i = 0; i < ns; i++) st_same &= (double)so[0][i] == rst[i];
    TU_CHECK(st_same, "%s: state_out is not the last K-1 inputs", nm);
    int same = 1;
    for (int i = 1; i < 3; i++)
        same &= !memcmp(out[i], out[0], n * sizeof(float)) && !memcmp(pre[i], pre[0], n * sizeof(float)) &&
                !memcmp(so[i], so[0], ns * sizeof(float));
    if (!with_state) {
        // backward reference from the op's fp32 pre (the backward's input)
        double *rdx = calloc(n, sizeof(double)), *bdx = calloc(n, sizeof(double));
        double *rdw = malloc((size_t)C * K * sizeof(double)), *bdw = malloc((size_t)C * K * sizeof(double));
        double *dp = malloc(n * sizeof(double)), *Dt = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) {
            double p = pre[0][i], s = sigm(p);
            dp[i] = dout[i] * s * (1.0 + p * (1.0 - s));
            Dt[i] = 17 * U * fabs((double)dout[i]) * s * (1.0 + fabs(p));
        }
        for (int c = 0; c < C; c++)
            for (int j = 0; j < K; j++) { rdw[(size_t)c * K + j] = dw0[(size_t)c * K + j]; bdw[(size_t)c * K + j] = 0.0; }
        double *adw = calloc((size_t)C * K, sizeof(double)), *adx = calloc(n, sizeof(double));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    const size_t it = ((size_t)b * T + t) * C + c;
                    for (int j = 0; j < K; j++) {
                        const int s = t - (K - 1) + j;   // output t, tap j reads input s
                        if (s < 0) continue;
                        const size_t is = ((size_t)b * T + s) * C + c;
                        const double wj = w[(size_t)c * K + j];
                        rdx[is] += dp[it] * wj;
                        adx[is] += fabs(dp[it] * wj);
                        bdx[is] += fabs(wj) * Dt[it];
                        rdw[(size_t)c * K + j] += dp[it] * x[is];
                        adw[(size_t)c * K + j] += fabs(dp[it] * x[is]);
                        bdw[(size_t)c * K + j] += fabs((double)x[is]) * Dt[it];
                    }
                }
        for (size_t i = 0; i < n; i++) bdx[i] += K * U * adx[i];
        const double nt = (double)B * T;
        for (int i = 0; i < C * K; i++) bdw[i] += nt * U * (fabs((double)dw0[i]) + adw[i]);
        double ex = worst(dx[0], rdx, bdx, n), ew = worst(dw[0], rdw, bdw, (size_t)C * K);
        TU_CHECK(ex <= 2.0 && ew <= 2.0, "%s backward vs float64: dx %.3f, dw %.3f of the bound (limit 2)", nm, ex, ew);
        printf("  %-36s vs float64 (fraction of the bound, limit 2): pre %.3f out %.3f dx %.3f dw %.3f\n", nm, ep, eo, ex, ew);
        for (int i = 1; i < 3; i++)
            same &= !memcmp(dx[i], dx[0], n * sizeof(float)) && !memcmp(dw[i], dw[0], (size_t)C * K * sizeof(float));
        free(rdx); free(bdx); free(rdw); free(bdw); free(dp); free(Dt); free(adw); free(adx);
    } else {
        printf("  %-36s vs float64 (fraction of the bound, limit 2): pre %.3f out %.3f, state_out exact\n", nm, ep, eo);
    }
    TU_CHECK(same, "%s: results differ between 1, 2 and 3 threads", nm);
    printf("  %-36s 1, 2 and 3 threads: %s\n", nm, same ? "bit for bit equal" : "DIFFER");
    for (int i = 0; i < 3; i++) { free(out[i]); free(pre[i]); free(so[i]); free(dx[i]); free(dw[i]); }
    free(x); free(w); free(st); free(dout); free(dw0); free(rpre); free(rout); free(bpre); free(bout); free(rst);
}

int main(void) {
    test_conv(3, 37, 300, 4, 0);   // 300 channels: chunks of 64 / 32 / 16 with tails; T not a multiple of K
    test_conv(2, 3, 40, 7, 0);     // T < K - 1: every output reads the zeros before token 0
    test_conv(1, 20, 17, 1, 0);    // K = 1: a pointwise SiLU
    test_conv(2, 5, 150, 4, 1);    // decoding's state_in: the first K-1 tokens read it
    test_conv(2, 2, 33, 5, 1);     // T < K - 1 with a state: state_out holds part of state_in
    return tu_finish();
}
