// kernels/cuda/optim.cu: sums of squares (the global gradient norm) and AdamW.
#include "cuda_common.h"
#include <math.h>
#include "../adamw.h"   // the per-element update (shared with the CPU backend)

// part[c] = sum of x[i]^2 in double over chunk c = [c*OPS_SUMSQ_CHUNK, (c+1)*OPS_SUMSQ_CHUNK).
// One block per chunk; each thread sums a fixed strided subset, then a fixed-order block sum:
// the same bits every run (not the CPU's bits: another order of the same double sums).
__global__ void sumsq_chunks_kernel(double* part, const float* x, size_t n) {
    __shared__ double red[32];
    size_t i0 = (size_t)blockIdx.x * OPS_SUMSQ_CHUNK;
    size_t i1 = i0 + OPS_SUMSQ_CHUNK < n ? i0 + OPS_SUMSQ_CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * x[i];
    s = block_sum_d(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

void ops_sumsq_chunks(double* part, const float* x, size_t n) {
    CUDA_OP_TIMER("ops_sumsq_chunks");
    size_t nc = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    if (nc == 0) return;
    double* dpart = (double*)cuda_scratch(CUDA_SCRATCH_REDUCE, cuda_scratch_reduce_bytes(n, OPS_SUMSQ_CHUNK));
    sumsq_chunks_kernel<<<(unsigned)nc, 256, 0, cuda_stream>>>(dpart, x, n);
    CUDA_LAUNCH_CHECK("sumsq_chunks_kernel");
    ops_to_host(part, dpart, nc * sizeof(double));
}

double ops_sumsq(const float* x, size_t n) {
    CUDA_OP_TIMER("ops_sumsq");
    size_t nc = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    double* part = (double*)malloc((nc ? nc : 1) * sizeof(double));
    if (!part) { fprintf(stderr, "error: out of host memory in ops_sumsq\n"); exit(1); }
    ops_sumsq_chunks(part, x, n);
    double total = 0.0;
    for (size_t c = 0; c < nc; c++) total += part[c];   // chunk order, as the CPU backend
    free(part);
    return total;
}

// AdamW (PyTorch semantics), one thread per element; bias corrections computed on the host
// exactly as the CPU backend does.
__global__ void adamw_kernel(float* p, const float* grad, float* m, float* v, size_t n, float lr,
                             float b1, float b2, float eps, float decay, float grad_scale,
                             float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    adamw_update(&p[i], &m[i], &v[i], grad[i], grad_scale, lr, b1, b2, eps, decay, bc1, bc2);
}

void ops_adamw(float* p, const float* grad, float* m, float* v, size_t n, float lr, float b1,
               float b2, float eps, float wd, float grad_scale, int t) {
    CUDA_OP_TIMER("ops_adamw");
    if (n == 0) return;
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float decay = 1.0f - lr * wd;
    adamw_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(p, grad, m, v, n, lr, b1, b2, eps, decay,
                                                              grad_scale, bc1, bc2);
    CUDA_LAUNCH_CHECK("adamw_kernel");
}
