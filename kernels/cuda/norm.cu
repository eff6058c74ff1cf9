// kernels/cuda/norm.cu: RMSNorm and LayerNorm over the last dim, forward and backward.
//   rmsnorm:   out = x * rstd * w,              rstd = 1/sqrt(mean(x^2) + eps)
//   layernorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var(x) + eps)
// x (the residual stream), w, b, mean, rstd and the gradients dx, dw, db are fp32; out (the
// input of the next GEMM) and its gradient dout are act_t (cact_t here). All math is fp32.
#include "cuda_common.h"

// Rows of the weight-gradient partial sums: the same 64-row blocks as the CPU backend
// (CPU_RED_BLOCK), summed in block order, so the reduction does not depend on the launch shape.
#define NORM_RED_BLOCK CUDA_NORM_RED_BLOCK   // kernels/scratch.h

// One warp per row; lanes stride over the channels; deterministic warp sums.
__global__ void norm_forward_kernel(cact_t* out, float* mean, float* rstd, const float* inp,
                                    const float* w, const float* b, int N, int C, float eps,
                                    int layernorm) {
    int n = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;   // whole warps leave together
    const float* x = inp + (size_t)n * C;
    cact_t* o = out + (size_t)n * C;
    float m = 0.0f;
    if (layernorm) {
        float s = 0.0f;
        for (int c = lane; c < C; c += 32) s += x[c];
        m = warp_sum(s) / C;
    }
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = x[c] - m; v += d * d; }
    float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
    for (int c = lane; c < C; c += 32) act_st(&o[c], (x[c] - m) * r * w[c] + (b ? b[c] : 0.0f));
    if (lane == 0) {
        if (mean) mean[n] = m;
        rstd[n] = r;
    }
}

void ops_norm_forward(act_t* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, float eps, OpsNormKind kind) {
    CUDA_OP_TIMER("ops_norm_forward");
    const int threads = 256;   // 8 rows per block
    norm_forward_kernel<<<cuda_blocks((size_t)N * 32, threads), threads, 0, cuda_stream>>>(
        CACT(out), kind == OPS_LAYERNORM ? mean : NULL, rstd, inp, w, b, N, C, eps, kind == OPS_LAYERNORM);
    CUDA_LAUNCH_CHECK("norm_forward_kernel");
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w   (mean(g) term: layernorm)
// One warp per row.
__global__ void norm_backward_dx_kernel(float* dinp, const cact_t* dout, const float* inp,
                                        const float* w, const float* mean, const float* rstd,
                                        int N, int C, int layernorm) {
    int n = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    const cact_t* d = dout + (size_t)n * C;
    float* dx = dinp + (size_t)n * C;
    float m = layernorm ? mean[n] : 0.0f, r = rstd[n];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xh = (x[c] - m) * r, g = act_ld(d[c]) * w[c];
        sg += g;
        sgx += g * xh;
    }
    float mg = layernorm ? warp_sum(sg) / C : 0.0f;
    float mgx = warp_sum(sgx) / C;
    for (int c = lane; c < C; c += 32) {
        float xh = (x[c] - m) * r, g = act_ld(d[c]) * w[c];
        dx[c] += r * (g - mg - xh * mgx);
    }
}

// partial[blk][c] = sum over the rows of block blk (in order) of dout * xhat (and of dout for
// db). One thread per (block of rows, channel): coalesced over channels.
__global__ void norm_backward_partial_kernel(float* pdw, float* pdb, const cact_t* dout,
                                             const float* inp, const float* mean,
                                             const float* rstd, int N, int C, int layernorm) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, blk = blockIdx.x;   // row blocks on x
    if (c >= C) return;
    int n0 = blk * NORM_RED_BLOCK, n1 = min(n0 + NORM_RED_BLOCK, N);
    float sw = 0.0f, sb = 0.0f;
    for (int n = n0; n < n1; n++) {
        float m = layernorm ? mean[n] : 0.0f;
        float d = act_ld(dout[(size_t)n * C + c]);
        float xh = (inp[(size_t)n * C + c] - m) * rstd[n];
        sw += d * xh;
        sb += d;
    }
    pdw[(size_t)blk * C + c] = sw;
    if (pdb) pdb[(size_t)blk * C + c] = sb;
}

// out[c] += sum over blocks (in block order) of partial[blk][c]
__global__ void norm_reduce_blocks_kernel(float* out, const float* partial, int nblocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < nblocks; b++) s += partial[(size_t)b * C + c];
    out[c] += s;
}

void ops_norm_backward(float* dinp, float* dw, float* db, const act_t* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       OpsNormKind kind) {
    CUDA_OP_TIMER("ops_norm_backward");
    const int ln = kind == OPS_LAYERNORM;
    norm_backward_dx_kernel<<<cuda_blocks((size_t)N * 32, 256), 256, 0, cuda_stream>>>(
        dinp, CCACT(dout), inp, w, ln ? mean : NULL, rstd, N, C, ln);
    CUDA_LAUNCH_CHECK("norm_backward_dx_kernel");
    int nb = (N + NORM_RED_BLOCK - 1) / NORM_RED_BLOCK;
    float* pdw = (float*)cuda_scratch(CUDA_SCRATCH_NORM, cuda_scratch_norm_bytes((size_t)N, (size_t)C));
    float* pdb = db ? pdw + (size_t)nb * C : NULL;
    dim3 grid(nb, cuda_blocks(C, 128));
    norm_backward_partial_kernel<<<grid, 128, 0, cuda_stream>>>(pdw, pdb, CCACT(dout), inp, ln ? mean : NULL, rstd, N, C, ln);
    CUDA_LAUNCH_CHECK("norm_backward_partial_kernel");
    norm_reduce_blocks_kernel<<<cuda_blocks(C, 128), 128, 0, cuda_stream>>>(dw, pdw, nb, C);
    CUDA_LAUNCH_CHECK("norm_reduce_blocks_kernel");
    if (db) {
        norm_reduce_blocks_kernel<<<cuda_blocks(C, 128), 128, 0, cuda_stream>>>(db, pdb, nb, C);
        CUDA_LAUNCH_CHECK("norm_reduce_blocks_kernel");
    }
}
