// kernels/cpu/optim.c: global gradient norm and AdamW.
#include "../ops.h"
#include "cpu_common.h"
#include "../adamw.h"   // the per-element update (shared with the CUDA backend)

// Fixed chunks of OPS_SUMSQ_CHUNK summed in double, chunk sums added in order: same bits for
// any thread count.
// Each chunk's sum runs in index order (ops.h: the bits do not depend on the threads). One chain of
// double adds waits ~4 cycles per element, so the full chunks are summed SUMSQ_SIDE at a time side
// by side: SUMSQ_SIDE independent chains, each still in its own chunk's order, so the same bits as
// one chunk at a time (x^2 is exact in double, so a fused multiply-add changes nothing either),
// ~5x faster on 124M gradients (docs/performance.md "CPU bf16").
#define SUMSQ_SIDE 8
void ops_sumsq_chunks(double* part, const float* x, size_t n) {
    const size_t nc = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK, ng = n / OPS_SUMSQ_CHUNK / SUMSQ_SIDE;
    #pragma omp parallel for schedule(static)
    for (size_t g = 0; g < ng; g++) {   // groups of SUMSQ_SIDE full chunks
        const float* xg = x + g * SUMSQ_SIDE * OPS_SUMSQ_CHUNK;
        double s[SUMSQ_SIDE] = {0};
        for (size_t i = 0; i < OPS_SUMSQ_CHUNK; i++)
            for (int j = 0; j < SUMSQ_SIDE; j++) {
                const double v = xg[(size_t)j * OPS_SUMSQ_CHUNK + i];
                s[j] += v * v;
            }
        for (int j = 0; j < SUMSQ_SIDE; j++) part[g * SUMSQ_SIDE + j] = s[j];
    }
    #pragma omp parallel for schedule(static)
    for (size_t c = ng * SUMSQ_SIDE; c < nc; c++) {   // the rest, one chunk at a time
        size_t i0 = c * OPS_SUMSQ_CHUNK, i1 = i0 + OPS_SUMSQ_CHUNK < n ? i0 + OPS_SUMSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
}

double ops_sumsq(const float* x, size_t n) {
    size_t nc = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    double* part = cpu_calloc(nc, sizeof(double));
    ops_sumsq_chunks(part, x, n);
    double total = 0.0;
    for (size_t c = 0; c < nc; c++) total += part[c];
    free(part);
    return total;
}

void ops_adamw(float* p, const float* grad, float* m, float* v, size_t n, float lr, float b1,
               float b2, float eps, float wd, float grad_scale, int t) {
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float decay = 1.0f - lr * wd;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        adamw_update(&p[i], &m[i], &v[i], grad[i], grad_scale, lr, b1, b2, eps, decay, bc1, bc2);
}
