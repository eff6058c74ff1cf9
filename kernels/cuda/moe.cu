// kernels/cuda/moe.cu: the Mixture-of-Experts ops of kernels/ops.h on the CUDA backend: router
// (top-k, renormalised weights) and its backward, routing statistics, the dispatch plan, gather
// and combine with their backward, the grouped GEMM over experts, the shared expert's gate.
// kernels/cpu/moe.c is the reference for the math; this file says how each op maps to threads.
//
// Determinism, as on the CPU: no atomics. Every output element has one writer; the dispatch
// plan ranks each expert's slots with a block-wide scan in slot order (so rows keep token
// order, the CPU's counting sort); statistics are partial sums in a fixed order, added on the
// host in order. The grouped GEMM is one cuBLASLt call per expert with tokens, or one call of
// cuBLAS's grouped GEMM (GATEDGPT_MOE_GEMM=grouped), to be chosen by measurement on a GPU.
//
// Types: the router's tensors are fp32; the token rows (x, xp, yp and their gradients) are
// act_t, read with act_ld and written with act_st (kernels compute in fp32); combine adds into
// the fp32 residual stream and its backward reads the fp32 residual gradient; expert weight
// gradients are fp32.
#include "cuda_common.h"
#include <cublas_v2.h>
#include <string.h>
#define MOE_ROUTER_SIGMOID cuda_sigmoid
#include "../moe_router.h"   // the router's backward for one token

// y[n] += x[n] (act_t; the sum in fp32, rounded once)
__global__ static void accumulate_kernel(cact_t* y, const cact_t* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st(&y[i], act_ld(y[i]) + act_ld(x[i]));
}

extern "C" void ops_accumulate(act_t* y, const act_t* x, size_t n) {
    CUDA_OP_TIMER("ops_accumulate");
    if (n == 0) return;
    accumulate_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(y), CCACT(x), n);
    CUDA_LAUNCH_CHECK("accumulate_kernel");
}

// ---------------------------------------------------------------------------------------------
// router: one thread per token (E and k are small next to the expert GEMMs; the router's
// logits are fp32 on every backend)

__global__ static void router_forward_kernel(float* probs, int* topk_idx, float* topk_w, float* lse,
                                             const float* logits, int N, int E, int k, int kind) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    // the same per-token code as the CPU's (kernels/moe_router.h)
    moe_router_forward_token(probs + (size_t)n * E, topk_idx + (size_t)n * k, topk_w + (size_t)n * k,
                             &lse[n], logits + (size_t)n * E, E, k, kind);
}

extern "C" void ops_moe_router_forward(float* probs, int* topk_idx, float* topk_w, float* lse,
                                       const float* logits, int N, int E, int k, OpsRouter kind) {
    CUDA_OP_TIMER("ops_moe_router_forward");
    if (N <= 0) return;
    router_forward_kernel<<<cuda_blocks((size_t)N, 128), 128, 0, cuda_stream>>>(probs, topk_idx, topk_w, lse,
                                                                                logits, N, E, k, (int)kind);
    CUDA_LAUNCH_CHECK("router_forward_kernel");
}

// dlogits[n, :] (=): the three terms, kernels/moe_router.h (shared with the CPU backend)
__global__ static void router_backward_kernel(float* dlogits, const float* dtopk_w, const float* logits,
                                              const float* probs, const int* topk_idx, const float* topk_w,
                                              const float* lse, const float* aux_grad, float z_grad, int N,
                                              int E, int k, int kind) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    moe_router_backward_token(dlogits + (size_t)n * E, dtopk_w + (size_t)n * k, logits + (size_t)n * E,
                              probs + (size_t)n * E, topk_idx + (size_t)n * k, topk_w + (size_t)n * k,
                              lse[n], aux_grad, z_grad, E, k, kind);
}

extern "C" void ops_moe_router_backward(float* dlogits, const float* dtopk_w, const float* logits,
                                        const float* probs, const int* topk_idx, const float* topk_w,
                                        const float* lse, const float* aux_grad, float z_grad, int N, int E,
                                        int k, OpsRouter kind) {
    CUDA_OP_TIMER("ops_moe_router_backward");
    if (N <= 0) return;
    router_backward_kernel<<<cuda_blocks((size_t)N, 128), 128, 0, cuda_stream>>>(
        dlogits, dtopk_w, logits, probs, topk_idx, topk_w, lse, aux_grad, z_grad, N, E, k, (int)kind);
    CUDA_LAUNCH_CHECK("router_backward_kernel");
}

// ---------------------------------------------------------------------------------------------
// routing statistics: per-expert probability sums (one block per expert), and the sums of lse^2
// and of the per-token entropy (MOE_STAT_BLOCKS blocks over strided tokens); all in double,
// each thread in token order, blocks reduced in warp order, block partials added on the host in
// block order.
#define MOE_STAT_BLOCKS CUDA_MOE_STAT_BLOCKS   // kernels/scratch.h

__global__ static void router_psum_kernel(double* p_sum, const float* probs, int N, int E) {
    __shared__ double sh[32];
    int e = blockIdx.x;
    double s = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += probs[(size_t)n * E + e];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) p_sum[e] = s;
}

__global__ static void router_token_stats_kernel(double* part, const float* probs, const float* lse, int N,
                                                 int E) {
    __shared__ double sh[32];
    double ls = 0.0, es = 0.0;
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        ls += (double)lse[n] * lse[n];
        double h = 0.0;
        for (int i = 0; i < E; i++) {
            double p = probs[(size_t)n * E + i];
            if (p > 0.0) h -= p * log(p);
        }
        es += h;
    }
    ls = block_sum_d(ls, sh);
    es = block_sum_d(es, sh);
    if (threadIdx.x == 0) { part[2 * blockIdx.x] = ls; part[2 * blockIdx.x + 1] = es; }
}

extern "C" void ops_moe_router_stats(double* p_sum, double* lse_sq, double* entropy, const float* probs,
                                     const float* lse, int N, int E) {
    CUDA_OP_TIMER("ops_moe_router_stats");
    if (E <= 0) return;
    double* dev = (double*)cuda_scratch(CUDA_SCRATCH_MOE, cuda_scratch_moe_bytes((size_t)E));
    double* part = dev + E;
    router_psum_kernel<<<E, 256, 0, cuda_stream>>>(dev, probs, N, E);
    CUDA_LAUNCH_CHECK("router_psum_kernel");
    router_token_stats_kernel<<<MOE_STAT_BLOCKS, 256, 0, cuda_stream>>>(part, probs, lse, N, E);
    CUDA_LAUNCH_CHECK("router_token_stats_kernel");
    ops_to_host(p_sum, dev, (size_t)E * sizeof(double));
    double hp[2 * MOE_STAT_BLOCKS];
    ops_to_host(hp, part, sizeof hp);
    double ls = 0.0, es = 0.0;
    for (int b = 0; b < MOE_STAT_BLOCKS; b++) { ls += hp[2 * b]; es += hp[2 * b + 1]; }
    *lse_sq = ls;
    *entropy = es;
}

// ---------------------------------------------------------------------------------------------
// dispatch plan: a stable counting sort of the S = N*k slots by expert, in three launches.
//   1. counts[e]: block e counts the slots that chose e (__syncthreads_count per 1024 slots)
//   2. offsets: one thread, the prefix sum of the kept counts (E is small)
//   3. block e walks the slots in order, 1024 at a time; a slot's rank among e's slots is the
//      count before it in its warp (ballot) + in earlier warps + in earlier chunks. Rank <
//      kept: row offsets[e] + rank; else dropped (-1). Each slot has one expert, so slot_row
//      has one writer per element.
// Every block reads all S indices (E*S int reads from L2, ~20 us at 128 experts and S = 128k:
// small next to the expert GEMMs; a segmented sort would save it if a profile says so).
#define MOE_PLAN_THREADS 1024

__global__ static void __launch_bounds__(MOE_PLAN_THREADS) plan_count_kernel(int* counts, const int* topk_idx, int S) {
    int e = blockIdx.x, total = 0;
    for (int base = 0; base < S; base += blockDim.x) {
        int s = base + threadIdx.x;
        total += __syncthreads_count(s < S && topk_idx[s] == e);
    }
    if (threadIdx.x == 0) counts[e] = total;
}

__global__ static void plan_offsets_kernel(int* offsets, const int* counts, int E, int capacity) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) {
        int kept = capacity > 0 && counts[e] > capacity ? capacity : counts[e];
        offsets[e + 1] = offsets[e] + kept;
    }
}

__global__ static void __launch_bounds__(MOE_PLAN_THREADS) plan_place_kernel(int* row_slot, int* slot_row, const int* topk_idx, const int* offsets,
                                         int S) {
    __shared__ int warp_count[MOE_PLAN_THREADS / 32];
    int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int first = offsets[e], kept = offsets[e + 1] - offsets[e];
    int before = 0;   // e's slots in earlier chunks
    for (int base = 0; base < S; base += blockDim.x) {
        int s = base + threadIdx.x;
        int mine = s < S && topk_idx[s] == e;
        unsigned ballot = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) warp_count[warp] = __popc(ballot);
        __syncthreads();
        int rank = before + __popc(ballot & ((1u << lane) - 1u));
        int chunk = 0;
        for (int w = 0; w < nw; w++) {
            if (w < warp) rank += warp_count[w];
            chunk += warp_count[w];
        }
        if (mine) {
            if (rank < kept) {
                row_slot[first + rank] = s;
                slot_row[s] = first + rank;
            } else {
                slot_row[s] = -1;   // over capacity: dropped
            }
        }
        before += chunk;
        __syncthreads();   // warp_count is rewritten by the next chunk
    }
}

extern "C" void ops_moe_dispatch_plan(int* counts, int* offsets, int* row_slot, int* slot_row,
                                      const int* topk_idx, int N, int E, int k, int capacity) {
    CUDA_OP_TIMER("ops_moe_dispatch_plan");
    const int S = N * k;
    if (E <= 0) return;
    plan_count_kernel<<<E, MOE_PLAN_THREADS, 0, cuda_stream>>>(counts, topk_idx, S);
    CUDA_LAUNCH_CHECK("plan_count_kernel");
    plan_offsets_kernel<<<1, 32, 0, cuda_stream>>>(offsets, counts, E, capacity);
    CUDA_LAUNCH_CHECK("plan_offsets_kernel");
    plan_place_kernel<<<E, MOE_PLAN_THREADS, 0, cuda_stream>>>(row_slot, slot_row, topk_idx, offsets, S);
    CUDA_LAUNCH_CHECK("plan_place_kernel");
}

// ---------------------------------------------------------------------------------------------
// gather / combine: one thread per output element, the k choices of a token in order

// xp[r, :] = x[token of r, :]: a copy of act_t values (exact in either type)
__global__ static void gather_kernel(cact_t* xp, const cact_t* x, const int* row_slot, int R, int k, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    size_t r = i / C, c = i % C;
    xp[i] = x[(size_t)(row_slot[r] / k) * C + c];
}

extern "C" void ops_moe_gather(act_t* xp, const act_t* x, const int* row_slot, int R, int k, int C) {
    CUDA_OP_TIMER("ops_moe_gather");
    if (R <= 0) return;
    gather_kernel<<<cuda_blocks((size_t)R * C, 256), 256, 0, cuda_stream>>>(CACT(xp), CCACT(x), row_slot, R, k, C);
    CUDA_LAUNCH_CHECK("gather_kernel");
}

// dx[n, c] += the kept slots' dxp rows, summed in fp32 in slot order, rounded to act_t once
__global__ static void gather_backward_kernel(cact_t* dx, const cact_t* dxp, const int* slot_row, int N, int k,
                                              int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    size_t n = i / C, c = i % C;
    float d = act_ld(dx[i]);
    for (int j = 0; j < k; j++) {
        int r = slot_row[n * k + j];
        if (r >= 0) d += act_ld(dxp[(size_t)r * C + c]);
    }
    act_st(&dx[i], d);
}

extern "C" void ops_moe_gather_backward(act_t* dx, const act_t* dxp, const int* slot_row, int N, int k, int C) {
    CUDA_OP_TIMER("ops_moe_gather_backward");
    if (N <= 0) return;
    gather_backward_kernel<<<cuda_blocks((size_t)N * C, 256), 256, 0, cuda_stream>>>(CACT(dx), CCACT(dxp), slot_row,
                                                                                     N, k, C);
    CUDA_LAUNCH_CHECK("gather_backward_kernel");
}

// out[n, c] (fp32, the residual stream) += sum over kept slots of topk_w * yp[row, c] (act_t)
__global__ static void combine_kernel(float* out, const cact_t* yp, const float* topk_w, const int* slot_row,
                                      int N, int k, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    size_t n = i / C, c = i % C;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        int r = slot_row[n * k + j];
        if (r >= 0) acc += topk_w[n * k + j] * act_ld(yp[(size_t)r * C + c]);
    }
    out[i] += acc;
}

extern "C" void ops_moe_combine(float* out, const act_t* yp, const float* topk_w, const int* slot_row, int N,
                                int k, int C) {
    CUDA_OP_TIMER("ops_moe_combine");
    if (N <= 0) return;
    combine_kernel<<<cuda_blocks((size_t)N * C, 256), 256, 0, cuda_stream>>>(out, CCACT(yp), topk_w, slot_row, N,
                                                                             k, C);
    CUDA_LAUNCH_CHECK("combine_kernel");
}

// one warp per slot s = n*k + j: dyp[row] = w * dout[n]; dtopk_w[s] = dout[n] . yp[row] (warp sum)
// dout fp32 (the residual gradient), yp and dyp act_t
__global__ static void combine_backward_kernel(cact_t* dyp, float* dtopk_w, const float* dout, const cact_t* yp,
                                               const float* topk_w, const int* slot_row, int N, int k, int C) {
    size_t s = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (s >= (size_t)N * k) return;   // whole warps leave together
    int r = slot_row[s];
    if (r < 0) {
        if (lane == 0) dtopk_w[s] = 0.0f;
        return;
    }
    const float* d = dout + (s / k) * C;
    const cact_t* y = yp + (size_t)r * C;
    cact_t* dy = dyp + (size_t)r * C;
    float w = topk_w[s], dot = 0.0f;
    for (int c = lane; c < C; c += 32) {
        act_st(&dy[c], w * d[c]);
        dot += d[c] * act_ld(y[c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dtopk_w[s] = dot;
}

extern "C" void ops_moe_combine_backward(act_t* dyp, float* dtopk_w, const float* dout, const act_t* yp,
                                         const float* topk_w, const int* slot_row, int N, int k, int C) {
    CUDA_OP_TIMER("ops_moe_combine_backward");
    size_t S = (size_t)N * k;
    if (S == 0) return;
    combine_backward_kernel<<<cuda_blocks(S, 8), 256, 0, cuda_stream>>>(CACT(dyp), dtopk_w, dout, CCACT(yp), topk_w,
                                                                        slot_row, N, k, C);
    CUDA_LAUNCH_CHECK("combine_backward_kernel");
}

// ---------------------------------------------------------------------------------------------
// grouped GEMM, two ways (the faster is to be chosen by measurement on a GPU: bench_gpu's MoE
// rows run both):
//   loop    (default) one cuBLASLt call per group with rows (matmul.cu's cached algorithms)
//   grouped one cublasGemmGroupedBatchedEx call for all groups (each expert its own group of
//           one problem: the shapes differ), GATEDGPT_MOE_GEMM=grouped or cuda_set_moe_gemm
// Both need the row boundaries on the host (G + 1 ints, one synchronisation per call).
// Row-major mapping as in matmul.cu. Types as ops_matmul_*: inp, w, out, dout, dinp act_t (the
// cuBLAS type CUDA_R_ACT), dw fp32, fp32 accumulation always.
//
// cuBLAS's grouped GEMM takes one type for C and D (Ctype) and, for bf16 A/B, only bf16 C
// (cublasGemmGroupedBatchedEx's table: A/B/C all bf16, all fp16 or all fp32 under
// CUBLAS_COMPUTE_32F; no bf16 x bf16 -> fp32 as cublasGemmEx has). So in the bf16 build the
// weight gradients (bf16 inp and dout, fp32 dw) run as one cuBLASLt call per expert even in
// the grouped mode; the forward and dinp GEMMs (all act_t) stay grouped. Unlike the cuBLASLt
// path (matmul.cu restricts split-K to fp32 reductions for bf16 D), the grouped GEMM cannot be
// told how to reduce a split K: if it rounds partial sums to bf16, its outputs drift by more
// than one rounding from the emulation's; test_gpu_ops_bf16 checks both modes at one ulp.

static int moe_gemm_mode = -1;   // CUDA_MOE_GEMM_LOOP / _GROUPED; -1: not read from the environment yet
extern "C" void cuda_set_moe_gemm(int mode) { moe_gemm_mode = mode; }
extern "C" int cuda_moe_gemm(void) {
    if (moe_gemm_mode < 0) {
        moe_gemm_mode = cuda_env_is("GATEDGPT_MOE_GEMM", "grouped") ? CUDA_MOE_GEMM_GROUPED : CUDA_MOE_GEMM_LOOP;
    }
    return moe_gemm_mode;
}

static int* host_offsets(const int* offsets, int G) {
    static int* h = NULL;
    static int cap = 0;
    if (cap < G + 1) {
        free(h);
        cap = G + 1;
        h = (int*)malloc((size_t)cap * sizeof(int));
        if (!h) cuda_fail(__FILE__, __LINE__, "out of host memory for the expert offsets", "lower n_expert");
    }
    ops_to_host(h, offsets, (size_t)(G + 1) * sizeof(int));
    return h;
}

// cuBLAS statuses through matmul.cu's check, with the hint for a cuBLAS without grouped GEMM
#define CUBLAS_CHECK(call) \
    cuda_cublas_check((int)(call), #call, __FILE__, __LINE__, "this cuBLAS has no grouped GEMM for these types: unset GATEDGPT_MOE_GEMM")

// One problem per group: D_g = op(A_g) op(B_g) (+ beta D_g), column-major as cuda_gemm, with A,
// B and D of one type per call. The argument arrays are host memory (cuBLAS reads them at the
// call); the pointer arrays go to the device first (cuBLAS's grouped GEMM reads them there).
typedef struct {
    int cap, n;
    cublasOperation_t *ta, *tb;
    int *m, *nn, *k, *lda, *ldb, *ldd, *size;
    float *alpha, *beta;
    const void** hp;    // [3 * cap] host pointers: A of every problem, then B, then D
    void** dp;          // the same on the device
} GroupedCall;

static void grouped_reserve(GroupedCall* c, int G) {
    if (c->cap >= G) return;
    c->cap = G;
    c->ta = (cublasOperation_t*)realloc(c->ta, G * sizeof(cublasOperation_t));
    c->tb = (cublasOperation_t*)realloc(c->tb, G * sizeof(cublasOperation_t));
    int** ints[] = {&c->m, &c->nn, &c->k, &c->lda, &c->ldb, &c->ldd, &c->size};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) *ints[i] = (int*)realloc(*ints[i], G * sizeof(int));
    c->alpha = (float*)realloc(c->alpha, G * sizeof(float));
    c->beta = (float*)realloc(c->beta, G * sizeof(float));
    c->hp = (const void**)realloc(c->hp, 3 * (size_t)G * sizeof(void*));
    if (!c->ta || !c->tb || !c->m || !c->nn || !c->k || !c->lda || !c->ldb || !c->ldd || !c->size || !c->alpha ||
        !c->beta || !c->hp)
        cuda_fail(__FILE__, __LINE__, "out of host memory for the grouped GEMM arguments", "lower n_expert");
    if (c->dp) CUDA_CHECK(cudaFree(c->dp));
    CUDA_CHECK(cudaMalloc((void**)&c->dp, 3 * (size_t)G * sizeof(void*)));
}

static void grouped_add(GroupedCall* c, int ta, int tb, int m, int n, int k, const void* A, int lda, const void* B,
                        int ldb, void* D, int ldd, float beta) {
    int i = c->n++;
    c->ta[i] = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    c->tb[i] = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    c->m[i] = m; c->nn[i] = n; c->k[i] = k; c->lda[i] = lda; c->ldb[i] = ldb; c->ldd[i] = ldd;
    c->size[i] = 1; c->alpha[i] = 1.0f; c->beta[i] = beta;
    c->hp[i] = A; c->hp[c->cap + i] = B; c->hp[2 * c->cap + i] = D;
}

// all problems with A, B and D of type t (CUDA_R_32F or CUDA_R_16BF)
static void grouped_run(GroupedCall* c, cudaDataType_t t) {
    static cublasHandle_t handle;
    if (c->n == 0) return;
    if (!handle) {
        CUBLAS_CHECK(cublasCreate(&handle));
        CUBLAS_CHECK(cublasSetStream(handle, cuda_stream));
    }
    // pack the three pointer lists contiguously for one copy: A[0..n), B[0..n), D[0..n)
    const void** packed = (const void**)malloc(3 * (size_t)c->n * sizeof(void*));
    if (!packed) cuda_fail(__FILE__, __LINE__, "out of host memory", "lower n_expert");
    for (int i = 0; i < c->n; i++) {
        packed[i] = c->hp[i];
        packed[c->n + i] = c->hp[c->cap + i];
        packed[2 * c->n + i] = c->hp[2 * c->cap + i];
    }
    CUDA_CHECK(cudaMemcpy(c->dp, packed, 3 * (size_t)c->n * sizeof(void*), cudaMemcpyHostToDevice));
    free(packed);
    // the environment's TF32 / bf16-rounding modes apply to fp32 inputs only (as in matmul.cu)
    const int math = t == CUDA_R_32F ? cuda_gemm_math() : CUDA_MATH_FP32;
    cublasComputeType_t ct = math == CUDA_MATH_BF16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                             : math == CUDA_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                      : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(handle, c->ta, c->tb, c->m, c->nn, c->k, c->alpha,
                                            (const void* const*)c->dp, t, c->lda,
                                            (const void* const*)(c->dp + c->n), t, c->ldb, c->beta,
                                            c->dp + 2 * c->n, t, c->ldd, c->n, c->size, ct));
    c->n = 0;
}

static GroupedCall grouped_call;

extern "C" void ops_grouped_matmul_forward(act_t* out, const act_t* inp, const act_t* w, const int* offsets,
                                           int G, int C, int OC) {
    CUDA_OP_TIMER("ops_grouped_matmul_forward");
    const cact_t *x = CCACT(inp), *wt = CCACT(w);
    cact_t* y = CACT(out);
    const int* off = host_offsets(offsets, G);
    const int grouped = cuda_moe_gemm() == CUDA_MOE_GEMM_GROUPED;
    if (grouped) grouped_reserve(&grouped_call, G);
    for (int g = 0; g < G; g++) {
        int r0 = off[g], rows = off[g + 1] - off[g];
        if (rows <= 0) continue;
        // out[rows, OC] = inp[rows, C] @ w[g]^T
        if (grouped)
            grouped_add(&grouped_call, 1, 0, OC, rows, C, wt + (size_t)g * OC * C, C, x + (size_t)r0 * C, C,
                        y + (size_t)r0 * OC, OC, 0.0f);
        else
            cuda_gemm(1, 0, OC, rows, C, wt + (size_t)g * OC * C, C, x + (size_t)r0 * C, C, CUDA_R_ACT,
                      y + (size_t)r0 * OC, OC, CUDA_R_ACT, 0.0f);
    }
    if (grouped) grouped_run(&grouped_call, CUDA_R_ACT);
}

extern "C" void ops_grouped_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                                            const act_t* w, const int* offsets, int G, int C, int OC) {
    CUDA_OP_TIMER("ops_grouped_matmul_backward");
    const cact_t *x = CCACT(inp), *wt = CCACT(w), *dyall = CCACT(dout);
    cact_t* dx = CACT(dinp);
    const int* off = host_offsets(offsets, G);
    const int grouped = cuda_moe_gemm() == CUDA_MOE_GEMM_GROUPED;
    if (grouped) grouped_reserve(&grouped_call, G);
    for (int pass = dinp ? 0 : 1; pass < 2; pass++) {   // pass 0: dinp, pass 1: dw
        // dw (fp32) from act_t inputs: grouped only when act_t is fp32 (see above)
        const int grouped_pass = grouped && (pass == 0 || CUDA_R_ACT == CUDA_R_32F);
        for (int g = 0; g < G; g++) {
            int r0 = off[g], rows = off[g + 1] - off[g];
            if (rows <= 0) continue;
            const cact_t* dy = dyall + (size_t)r0 * OC;
            const cact_t* wg = wt + (size_t)g * OC * C;
            // dinp[rows, C] = dout[rows, OC] @ w[g];  dw[g] += dout[rows]^T @ inp[rows]
            if (pass == 0) {
                if (grouped_pass) grouped_add(&grouped_call, 0, 0, C, rows, OC, wg, C, dy, OC, dx + (size_t)r0 * C, C, 0.0f);
                else cuda_gemm(0, 0, C, rows, OC, wg, C, dy, OC, CUDA_R_ACT, dx + (size_t)r0 * C, C, CUDA_R_ACT, 0.0f);
            } else {
                if (grouped_pass)
                    grouped_add(&grouped_call, 0, 1, C, OC, rows, x + (size_t)r0 * C, C, dy, OC,
                                dw + (size_t)g * OC * C, C, 1.0f);
                else
                    cuda_gemm(0, 1, C, OC, rows, x + (size_t)r0 * C, C, dy, OC, CUDA_R_ACT, dw + (size_t)g * OC * C, C,
                              CUDA_R_32F, 1.0f);
            }
        }
        if (grouped_pass) grouped_run(&grouped_call, CUDA_R_ACT);   // the dw pass gets here with fp32 act_t only
    }
}

// ---------------------------------------------------------------------------------------------
// the shared expert's gate: out[n, :] += sigmoid(z[n]) * y[n, :]
// (out, z fp32: the residual stream and the gate's logit; y act_t: the shared expert's output)

__global__ static void sigmoid_gate_add_kernel(float* out, const cact_t* y, const float* z, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    out[i] += cuda_sigmoid(z[i / C]) * act_ld(y[i]);
}

extern "C" void ops_sigmoid_gate_add_forward(float* out, const act_t* y, const float* z, int N, int C) {
    CUDA_OP_TIMER("ops_sigmoid_gate_add_forward");
    if (N <= 0) return;
    sigmoid_gate_add_kernel<<<cuda_blocks((size_t)N * C, 256), 256, 0, cuda_stream>>>(out, CCACT(y), z, N, C);
    CUDA_LAUNCH_CHECK("sigmoid_gate_add_kernel");
}

// one warp per token: dy = sig * dout; dz = (dout . y) sig (1 - sig)
// (dout fp32, the residual gradient; y, dy act_t; z, dz fp32)
__global__ static void sigmoid_gate_add_backward_kernel(cact_t* dy, float* dz, const float* dout, const cact_t* y,
                                                        const float* z, int N, int C) {
    int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;
    float g = cuda_sigmoid(z[n]), dot = 0.0f;
    const float* d = dout + (size_t)n * C;
    const cact_t* yn = y + (size_t)n * C;
    cact_t* dyn = dy + (size_t)n * C;
    for (int c = lane; c < C; c += 32) {
        act_st(&dyn[c], g * d[c]);
        dot += d[c] * act_ld(yn[c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dz[n] = dot * g * (1.0f - g);
}

extern "C" void ops_sigmoid_gate_add_backward(act_t* dy, float* dz, const float* dout, const act_t* y,
                                              const float* z, int N, int C) {
    CUDA_OP_TIMER("ops_sigmoid_gate_add_backward");
    if (N <= 0) return;
    sigmoid_gate_add_backward_kernel<<<cuda_blocks((size_t)N, 8), 256, 0, cuda_stream>>>(CACT(dy), dz, dout, CCACT(y),
                                                                                         z, N, C);
    CUDA_LAUNCH_CHECK("sigmoid_gate_add_backward_kernel");
}
