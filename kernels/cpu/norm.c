// kernels/cpu/norm.c: RMSNorm and LayerNorm over the last dim, forward and backward.
#include "../ops.h"
#include "cpu_common.h"

void ops_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, float eps, OpsNormKind kind) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* o = out + (size_t)n * C;
        float m = 0.0f;
        if (kind == OPS_LAYERNORM) {
            for (int c = 0; c < C; c++) m += x[c];
            m /= C;
        }
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        float r = 1.0f / sqrtf(v / C + eps);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.0f);
        if (mean) mean[n] = m;
        rstd[n] = r;
    }
}

// xhat = (x - mean) * rstd;  out = xhat * w (+ b)
// dw += sum_n dout * xhat, db += sum_n dout
// layernorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w
// rmsnorm:   dx = rstd * (g - xhat * mean(g * xhat))
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
