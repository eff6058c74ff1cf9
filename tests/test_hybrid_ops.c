// tests/test_hybrid_ops.c: the Gated DeltaNet layer's ops around the delta rule on the CPU backend
// (kernels/cpu/deltanet.c: causal conv1d + SiLU, L2 norm, gated RMSNorm) against a float64
// reference written here from ops.h's definitions, at shapes that cross the kernels' work split
// (the conv's pieces of 128 channels, its backward's blocks of 64 tokens with the ring of K rows
// reaching into the next block; the norms' row sums in 8 lanes and a tail, the gated norm's
// 64-row blocks and 256-float pieces), and bit for bit equal over 1, 2 and 3 threads.
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
//   dw[c,j] = dw0 + sum_{b,t} dp[t] x[t-K+1+j] (B T terms and dw0, in any grouping of sums):
//         |err| <= sum |x| Dt + n u (|dw0| + sum |dp x|)
// The norms (row sums of n terms in any order: <= n u sum |terms|; sqrt, division, +eps: u each):
//   l2norm: r = (x.x + eps)^-1/2 to (n/2 + 3) u;  y = x r to (n/2 + 4) u, relative.
//     backward from the op's r: dx = r g - (r^3 (x.g)) x:  |err| <= 2u r|g| + r^3 |x| ((n + 5) u sum |x g|)
//   gated: s = act(z) from cpu_sigmoid (6u) and one more operation (silu, ns_sigmoid): 7u;
//     act'(z):  |err| <= 17u sig(z) (1 + |z|);  forward r = (x.x/n + eps)^-1/2 to (n/2 + 4) u,
//     y = x r w s:  (n/2 + 4 + 3 + 7 + 1) u |y|.  Backward from the op's rstd, h = g w s:
//     dz = g x r w a':  4u |g x r w a'| + |g x r w| 17u sig (1 + |z|)
//     dx = r h - (r^3 (x.h)/n) x:  12u r |h| + r^3 |x| / n (n + 16) u sum |x h|  (+ u |dx|)
//     dw = dw0 + sum_rows g x r s (64-row blocks, then the blocks, then dw0: R = rows + 2 adds):
//         (R + 12) u (|dw0| + sum |g x r s|)
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

    // the op at 1, 2 and 3 threads
    float *out[3], *pre[3], *so[3], *dx[3], *dw[3];
    for (int th = 1; th <= 3; th++) {
        const int i = th - 1;
        ops_init(th);
        out[i] = malloc(n * sizeof(float)); pre[i] = malloc(n * sizeof(float)); dx[i] = malloc(n * sizeof(float));
        so[i] = malloc((ns ? ns : 1) * sizeof(float)); dw[i] = malloc((size_t)C * K * sizeof(float));
        memcpy(dw[i], dw0, (size_t)C * K * sizeof(float));
        ops_conv1d_silu_forward(out[i], pre[i], so[i], x, w, st, NULL, B, T, C, K);
        if (!with_state) ops_conv1d_silu_backward(dx[i], dw[i], dout, x, pre[i], w, NULL, B, T, C, K);
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

// L2 norm of `heads` heads of n per row, rows read with stride ldx and written with ldy
static void test_l2norm(int N, int heads, int n, int ldx, int ldy) {
    const size_t nx = (size_t)N * ldx, ny = (size_t)N * ldy, nr = (size_t)N * heads;
    float *x = malloc(nx * sizeof(float)), *g = malloc(ny * sizeof(float));
    tu_fill(x, nx, 1.5); tu_fill(g, ny, 1.0);
    double *ry = calloc(ny, sizeof(double)), *by = calloc(ny, sizeof(double)), *rr = malloc(nr * sizeof(double));
    double *br = malloc(nr * sizeof(double));
    for (int t = 0; t < N; t++)
        for (int j = 0; j < heads; j++) {
            const float* xr = x + (size_t)t * ldx + (size_t)j * n;
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
            double r = 1.0 / sqrt(ss + 1e-6);
            rr[(size_t)t * heads + j] = r;
            br[(size_t)t * heads + j] = (n / 2.0 + 3) * U * r;
            for (int i = 0; i < n; i++) {
                ry[(size_t)t * ldy + (size_t)j * n + i] = xr[i] * r;
                by[(size_t)t * ldy + (size_t)j * n + i] = (n / 2.0 + 4) * U * fabs(xr[i] * r);
            }
        }
    float *y[3], *ri[3], *dx[3];
    for (int th = 1; th <= 3; th++) {
        const int i = th - 1;
        ops_init(th);
        y[i] = calloc(ny, sizeof(float)); ri[i] = malloc(nr * sizeof(float)); dx[i] = calloc(nx, sizeof(float));
        ops_l2norm_forward(y[i], ri[i], x, N, heads, n, ldx, ldy, 1e-6f);
        ops_l2norm_backward(dx[i], g, x, ri[i], N, heads, n, ldx, ldy);
    }
    // backward reference from the op's r
    double *rdx = calloc(nx, sizeof(double)), *bdx = calloc(nx, sizeof(double));
    for (int t = 0; t < N; t++)
        for (int j = 0; j < heads; j++) {
            const float *xr = x + (size_t)t * ldx + (size_t)j * n, *gr = g + (size_t)t * ldy + (size_t)j * n;
            const double r = ri[0][(size_t)t * heads + j];
            double xg = 0, axg = 0;
            for (int i = 0; i < n; i++) { xg += (double)xr[i] * gr[i]; axg += fabs((double)xr[i] * gr[i]); }
            for (int i = 0; i < n; i++) {
                const size_t k = (size_t)t * ldx + (size_t)j * n + i;
                rdx[k] = r * gr[i] - r * r * r * xg * xr[i];
                bdx[k] = 2 * U * r * fabs(gr[i]) + r * r * r * fabs(xr[i]) * (n + 5) * U * axg;
            }
        }
    char nm[128];
    snprintf(nm, sizeof nm, "l2norm N=%d heads=%d n=%d ld %d/%d", N, heads, n, ldx, ldy);
    double ey = worst(y[0], ry, by, ny), er = worst(ri[0], rr, br, nr), ex = worst(dx[0], rdx, bdx, nx);
    TU_CHECK(ey <= 2.0 && er <= 2.0 && ex <= 2.0, "%s vs float64: y %.3f, rinv %.3f, dx %.3f of the bound (limit 2)", nm, ey, er, ex);
    printf("  %-36s vs float64 (fraction of the bound, limit 2): y %.3f rinv %.3f dx %.3f\n", nm, ey, er, ex);
    int same = 1;
    for (int i = 1; i < 3; i++)
        same &= !memcmp(y[i], y[0], ny * sizeof(float)) && !memcmp(ri[i], ri[0], nr * sizeof(float)) &&
                !memcmp(dx[i], dx[0], nx * sizeof(float));
    TU_CHECK(same, "%s: results differ between 1, 2 and 3 threads", nm);
    printf("  %-36s 1, 2 and 3 threads: %s\n", nm, same ? "bit for bit equal" : "DIFFER");
    for (int i = 0; i < 3; i++) { free(y[i]); free(ri[i]); free(dx[i]); }
    free(x); free(g); free(ry); free(by); free(rr); free(br); free(rdx); free(bdx);
}

static double act_ref(OpsGateAct act, double z, double* grad) {
    const double s = sigm(z);
    if (act == OPS_ACT_SILU) { *grad = s + z * s * (1 - s); return z * s; }
    if (act == OPS_ACT_NS_SIGMOID) { *grad = 0.5 * s * (1 - s); return 0.5 + 0.5 * s; }
    *grad = s * (1 - s);
    return s;
}

// gated RMSNorm over `rows` rows of n
static void test_rmsnorm_gated(int rows, int n, OpsGateAct act, const char* actname) {
    const size_t ne = (size_t)rows * n;
    float *x = malloc(ne * sizeof(float)), *z = malloc(ne * sizeof(float)), *g = malloc(ne * sizeof(float));
    float *w = malloc(n * sizeof(float)), *dw0 = malloc(n * sizeof(float));
    tu_fill(x, ne, 1.5); tu_fill(z, ne, 3.0); tu_fill(g, ne, 1.0); tu_fill(w, n, 1.0); tu_fill(dw0, n, 0.5);
    const double eps = 1e-6;
    double *ry = malloc(ne * sizeof(double)), *by = malloc(ne * sizeof(double));
    double *rr = malloc(rows * sizeof(double)), *br = malloc(rows * sizeof(double));
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[(size_t)r * n + i] * x[(size_t)r * n + i];
        const double rs = 1.0 / sqrt(ss / n + (double)(float)eps);
        rr[r] = rs; br[r] = (n / 2.0 + 4) * U * rs;
        for (int i = 0; i < n; i++) {
            double da, a = act_ref(act, z[(size_t)r * n + i], &da);
            ry[(size_t)r * n + i] = x[(size_t)r * n + i] * rs * w[i] * a;
            by[(size_t)r * n + i] = (n / 2.0 + 15) * U * fabs(ry[(size_t)r * n + i]);
        }
    }
    float *y[3], *rs[3], *dx[3], *dz[3], *dw[3];
    for (int th = 1; th <= 3; th++) {
        const int i = th - 1;
        ops_init(th);
        y[i] = malloc(ne * sizeof(float)); rs[i] = malloc(rows * sizeof(float)); dx[i] = malloc(ne * sizeof(float));
        dz[i] = malloc(ne * sizeof(float)); dw[i] = malloc(n * sizeof(float));
        memcpy(dw[i], dw0, n * sizeof(float));
        ops_rmsnorm_gated_forward(y[i], rs[i], x, z, w, rows, n, (float)eps, act);
        ops_rmsnorm_gated_backward(dx[i], dz[i], dw[i], g, x, z, w, rs[i], rows, n, act);
    }
    // backward reference from the op's rstd
    double *rdx = malloc(ne * sizeof(double)), *bdx = malloc(ne * sizeof(double));
    double *rdz = malloc(ne * sizeof(double)), *bdz = malloc(ne * sizeof(double));
    double *rdw = malloc(n * sizeof(double)), *adw = calloc(n, sizeof(double)), *bdw = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) rdw[i] = dw0[i];
    for (int r = 0; r < rows; r++) {
        const double q = rs[0][r];
        double xh = 0, axh = 0;
        for (int i = 0; i < n; i++) {
            const size_t k = (size_t)r * n + i;
            double da, a = act_ref(act, z[k], &da), h = (double)g[k] * w[i] * a;
            xh += x[k] * h; axh += fabs(x[k] * h);
        }
        for (int i = 0; i < n; i++) {
            const size_t k = (size_t)r * n + i;
            double da, a = act_ref(act, z[k], &da), h = (double)g[k] * w[i] * a, gxrw = (double)g[k] * x[k] * q * w[i];
            rdz[k] = gxrw * da;
            bdz[k] = 4 * U * fabs(rdz[k]) + fabs(gxrw) * 17 * U * sigm(z[k]) * (1 + fabs((double)z[k]));
            rdx[k] = q * h - q * q * q * xh / n * x[k];
            bdx[k] = 12 * U * q * fabs(h) + q * q * q * fabs((double)x[k]) / n * (n + 16) * U * axh + U * fabs(rdx[k]);
            rdw[i] += (double)g[k] * x[k] * q * a;
            adw[i] += fabs((double)g[k] * x[k] * q * a);
        }
    }
    for (int i = 0; i < n; i++) bdw[i] = (rows + 2 + 12) * U * (fabs((double)dw0[i]) + adw[i]);
    char nm[128];
    snprintf(nm, sizeof nm, "rmsnorm_gated(%s) rows=%d n=%d", actname, rows, n);
    double ey = worst(y[0], ry, by, ne), er = worst(rs[0], rr, br, rows), ex = worst(dx[0], rdx, bdx, ne);
    double ez = worst(dz[0], rdz, bdz, ne), ew = worst(dw[0], rdw, bdw, n);
    TU_CHECK(ey <= 2.0 && er <= 2.0 && ex <= 2.0 && ez <= 2.0 && ew <= 2.0,
             "%s vs float64: y %.3f, rstd %.3f, dx %.3f, dz %.3f, dw %.3f of the bound (limit 2)", nm, ey, er, ex, ez, ew);
    printf("  %-36s vs float64 (fraction of the bound, limit 2): y %.3f rstd %.3f dx %.3f dz %.3f dw %.3f\n", nm, ey, er, ex, ez, ew);
    int same = 1;
    for (int i = 1; i < 3; i++)
        same &= !memcmp(y[i], y[0], ne * sizeof(float)) && !memcmp(rs[i], rs[0], rows * sizeof(float)) &&
                !memcmp(dx[i], dx[0], ne * sizeof(float)) && !memcmp(dz[i], dz[0], ne * sizeof(float)) &&
                !memcmp(dw[i], dw[0], n * sizeof(float));
    TU_CHECK(same, "%s: results differ between 1, 2 and 3 threads", nm);
    printf("  %-36s 1, 2 and 3 threads: %s\n", nm, same ? "bit for bit equal" : "DIFFER");
    for (int i = 0; i < 3; i++) { free(y[i]); free(rs[i]); free(dx[i]); free(dz[i]); free(dw[i]); }
    free(x); free(z); free(g); free(w); free(dw0); free(ry); free(by); free(rr); free(br);
    free(rdx); free(bdx); free(rdz); free(bdz); free(rdw); free(adw); free(bdw);
}

int main(void) {
    test_conv(3, 150, 300, 4, 0);  // 300 channels = 128 + 128 + 44; 150 tokens = blocks of 64, 64, 22
    test_conv(2, 66, 40, 5, 0);    // the first block's ring reaches 3 rows into a 2-row second block
    test_conv(2, 3, 40, 7, 0);     // T < K - 1: every output reads the zeros before token 0
    test_conv(1, 20, 17, 1, 0);    // K = 1: a pointwise SiLU
    test_conv(2, 5, 150, 4, 1);    // decoding's state_in: the first K-1 tokens read it
    test_conv(2, 2, 33, 5, 1);     // T < K - 1 with a state: state_out holds part of state_in
    test_l2norm(50, 4, 64, 2 * 4 * 64 + 3, 4 * 64 + 5);   // the layer's q, k heads inside wider rows
    test_l2norm(13, 3, 21, 63, 63);                       // 21 = 2 x 8 lanes + a tail of 5
    test_rmsnorm_gated(150, 64, OPS_ACT_SILU, "silu");    // 150 rows: 64-row blocks and a short one
    test_rmsnorm_gated(70, 300, OPS_ACT_SIGMOID, "sigmoid");   // 300 = a piece of 256 and one of 44
    test_rmsnorm_gated(9, 13, OPS_ACT_NS_SIGMOID, "ns_sigmoid");
    return tu_finish();
}
