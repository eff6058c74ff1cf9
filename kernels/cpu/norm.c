// kernels/cpu/norm.c: RMSNorm and LayerNorm over the last dim, forward and backward.
#include "../ops.h"
#include "cpu_common.h"

// The row sums run in CPU_LANES fixed lanes (cpu_common.h: lane j takes c = j, j + 8, ..., the
// tail, then the lanes, added in order): 8 independent chains that vectorise without -ffast-math,
// the same bits on every run and thread count. One serial chain per sum held the forward at the
// adder's latency (25 LayerNorms at N = 2048, C = 768, 2 threads, Zen 4: 36 -> 18 ms).
static inline float norm_lane_sum(const float* x, int C) {
    float acc[CPU_LANES] = {0};
    int c = 0;
    for (; c + CPU_LANES <= C; c += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++) acc[j] += x[c + j];
    float s = 0.0f;
    for (; c < C; c++) s += x[c];
    for (int j = 0; j < CPU_LANES; j++) s += acc[j];
    return s;
}
// sum_c (x[c] - m)^2, in the same lanes
static inline float norm_lane_sumsq(const float* x, float m, int C) {
    float acc[CPU_LANES] = {0};
    int c = 0;
    for (; c + CPU_LANES <= C; c += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++) { float d = x[c + j] - m; acc[j] += d * d; }
    float s = 0.0f;
    for (; c < C; c++) { float d = x[c] - m; s += d * d; }
    for (int j = 0; j < CPU_LANES; j++) s += acc[j];
    return s;
}

void ops_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, float eps, OpsNormKind kind) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* o = out + (size_t)n * C;
        const float m = (kind == OPS_LAYERNORM) ? norm_lane_sum(x, C) / C : 0.0f;
        const float r = 1.0f / sqrtf(norm_lane_sumsq(x, m, C) / C + eps);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.0f);
        if (mean) mean[n] = m;
        rstd[n] = r;
    }
}

// xhat = (x - mean) * rstd;  out = xhat * w (+ b)
// dw += sum_n dout * xhat, db += sum_n dout
// layernorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w
// rmsnorm:   dx = rstd * (g - xhat * mean(g * xhat))
// The sums stay one serial chain each here: 8 lanes (with dw and db in the same pass, or in passes of
// their own) ran no faster (25 LayerNorms at N = 2048, C = 768, 2 threads: 25 ms serial, 31-43 ms in
// lanes, measured with -march=native on Zen 4 and with -march=haswell), since the pass is bound by
// the memory it streams, not by the adds.
void ops_norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       OpsNormKind kind) {
    int nb = cpu_nblocks(N);
    float* pdw = cpu_calloc((size_t)nb * C, sizeof(float));
    float* pdb = db ? cpu_calloc((size_t)nb * C, sizeof(float)) : NULL;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        float* bdw = pdw + (size_t)blk * C;
        float* bdb = pdb ? pdb + (size_t)blk * C : NULL;
        int n1 = (blk + 1) * CPU_RED_BLOCK < N ? (blk + 1) * CPU_RED_BLOCK : N;
        for (int n = blk * CPU_RED_BLOCK; n < n1; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float m = (kind == OPS_LAYERNORM) ? mean[n] : 0.0f, r = rstd[n];
            float sum_g = 0.0f, sum_gx = 0.0f;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * r, g = d[c] * w[c];
                sum_g += g;
                sum_gx += g * xh;
                bdw[c] += d[c] * xh;
                if (bdb) bdb[c] += d[c];
            }
            float mg = (kind == OPS_LAYERNORM) ? sum_g / C : 0.0f, mgx = sum_gx / C;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * r, g = d[c] * w[c];
                dx[c] += r * (g - mg - xh * mgx);
            }
        }
    }
    cpu_reduce_blocks(dw, pdw, nb, C);
    if (db) cpu_reduce_blocks(db, pdb, nb, C);
    free(pdw);
    free(pdb);
}
