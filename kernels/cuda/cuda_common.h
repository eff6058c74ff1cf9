// kernels/cuda/cuda_common.h: shared by the CUDA kernels (not part of ops.h): error checks with
// file, line and a hint; the stream; scratch buffers; small device helpers (activations,
// deterministic warp and block reductions). The host part also compiles as plain C++ (the
// cuDNN graph code, attention_cudnn.cpp, is built by the host compiler: much faster than nvcc
// on the cudnn-frontend headers); the device helpers are for nvcc only.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <library_types.h>
#include <stdio.h>
#include <stdlib.h>
extern "C" {
#include "../ops.h"
#include "../attn_gate.h"
#include "cuda_backend.h"
#include "../scratch.h"
}

// ---- error checks ---------------------------------------------------------------------------
// Every CUDA runtime call goes through CUDA_CHECK; every kernel launch is followed by
// CUDA_LAUNCH_CHECK("kernel name"). A failure prints
//   error: FILE:LINE: CALL: message (cudaErrorName)
//     hint: what usually causes it
// and exits. Kernel faults surface at a later call; GATEDGPT_CUDA_SYNC=1 in the environment
// synchronises after every launch so the failing kernel is the one named.
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
#define CUDA_LAUNCH_CHECK(name) cuda_launch_check((name), __FILE__, __LINE__)
void cuda_check(cudaError_t e, const char* what, const char* file, int line);
void cuda_launch_check(const char* kernel, const char* file, int line);
// for errors that are not CUDA return codes (bad shapes): prints and exits
void cuda_fail(const char* file, int line, const char* msg, const char* hint);

// ---- the device (memory.cu) -----------------------------------------------------------------
// ops_init's first half (setup.cu): the device by the process's local rank, its properties,
// the environment's switches (GATEDGPT_CUDA_SYNC, _PROFILE, the GEMM precision: cuda_gemm_math)
void cuda_device_open(void);

// All work is queued on this stream (the legacy default stream, 0, for now: every op is
// ordered after the previous one, and cudaMemcpy to the host waits for all of them).
extern cudaStream_t cuda_stream;

// cuBLAS / cuBLASLt status (a cublasStatus_t) -> on failure the error with file, line and a
// hint, and exit; not_supported_hint replaces the default hint for CUBLAS_STATUS_NOT_SUPPORTED
// (matmul.cu)
void cuda_cublas_check(int status, const char* what, const char* file, int line, const char* not_supported_hint);
// 1 when the environment variable `name` is set to exactly `value` (memory.cu)
int cuda_env_is(const char* name, const char* value);
// The most dynamic shared memory a block of the current device may opt in to (227 KiB on
// H100/H200, 163 KiB on A100) (memory.cu)
size_t cuda_smem_optin(void);

// ---- scratch --------------------------------------------------------------------------------
// Device buffers owned by the backend, one per slot (kernels/scratch.h lists them and gives
// their sizes for a training step). The trainer reserves them at a step's sizes before the
// first step (ops_scratch_reserve); a request beyond a slot's size (another shape: a test, the
// sampler, the probe) grows it (a grow frees and reallocates, which synchronises). Slots keep
// ops from overwriting each other's scratch while both are queued.
void* cuda_scratch(int slot, size_t bytes);
// the slot at least `bytes` exactly (not the grow's 1.25x); one holding more keeps it
// (ops_scratch_reserve, setup.cu)
void cuda_scratch_reserve(int slot, size_t bytes);
// how many times the slot was (re)allocated: its contents are lost each time, so a file that
// keeps data in a slot across calls (attention.cu's RoPE tables) notes this when it writes
// them and writes them again when it has changed
unsigned cuda_scratch_generation(int slot);
// embedding.cu: the bytes CUB's radix sort asks for N (int key, int value) pairs (the
// CUDA_SCRATCH_EMB slot's second part; setup.cu plans the slot with it)
size_t cuda_emb_cub_temp_bytes(size_t N);

// ---- per-op profile (memory.cu; GATEDGPT_CUDA_PROFILE=1) ------------------------------------
// CUDA_OP_TIMER("name") at the top of an op: with profiling on, the device is synchronised
// before and after the op and the wall time is added to the op's row (nested ops count in the
// outermost one only). Off (the default) it costs one branch. cuda_profile_print shows the table.
struct CudaOpTimer {
    const char* name;
    double t0;
    int active;
    explicit CudaOpTimer(const char* op);
    ~CudaOpTimer();
};
#define CUDA_OP_TIMER(name) CudaOpTimer cuda_op_timer_(name)

// ---- activation storage on the device ----------------------------------------------------
// ops.h's act_t is float or uint16_t (bf16 bits) in C; on the device the same memory is cact_t:
// float, or __nv_bfloat16 under GATEDGPT_ACT_BF16. Kernels take cact_t pointers, read with
// act_ld (to fp32) and write with act_st (fp32 -> storage, round to nearest even), and compute
// in fp32; CUDA_R_ACT is its cuBLASLt / cuDNN data type.
#ifdef GATEDGPT_ACT_BF16
typedef __nv_bfloat16 cact_t;
#define CUDA_R_ACT CUDA_R_16BF
#else
typedef float cact_t;
#define CUDA_R_ACT CUDA_R_32F
#endif
#define CACT(p) ((cact_t*)(p))               // act_t* (ops.h) -> cact_t*
#define CCACT(p) ((const cact_t*)(p))
#if defined(__CUDACC__) || defined(GATEDGPT_CUDA_EMU)   // nvcc, or the CPU emulator (tests/cudaemu)
__device__ __forceinline__ float act_ld(float x) { return x; }
__device__ __forceinline__ float act_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void act_st(float* p, float v) { *p = v; }
#ifdef GATEDGPT_CUDA_EMU
// the emulator's racecheck sees scalar stores only (GCC does not instrument a class copy): the bits
__device__ __forceinline__ void act_st(__nv_bfloat16* p, float v) {
    __nv_bfloat16 b = __float2bfloat16(v);
    unsigned short u;
    memcpy(&u, &b, 2);
    *(unsigned short*)p = u;
}
#else
__device__ __forceinline__ void act_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
#endif
#endif

// ---- GEMM (matmul.cu) -----------------------------------------------------------------------
// ops_init's second half (setup.cu): the cuBLASLt handle and workspace (once), and the compute
// type for fp32 inputs from math (CUDA_MATH_*, cuda_backend.h)
void cuda_matmul_init(int math);
// cuBLASLt, column-major: D[m, n] (leading dim ldd) = op(A)[m, k] op(B)[k, n] + beta * D, op =
// transpose when ta / tb; A stored (ta ? k x m : m x k) with leading dim lda, B likewise.
// A and B have type ab (CUDA_R_32F or CUDA_R_16BF), D type dt (fp32 for weight gradients and
// the residual stream); fp32 accumulation always. beta 0 or 1. The algorithm is chosen once
// per shape, types and alignment and cached (matmul.cu).
void cuda_gemm(int ta, int tb, int m, int n, int k, const void* A, int lda, const void* B,
               int ldb, cudaDataType_t ab, void* D, int ldd, cudaDataType_t dt, float beta);
// The same with an epilogue (matmul.cu): CUDA_EPI_GELU_AUX (aux = product, D = gelu(aux)) or
// CUDA_EPI_DGELU (D = product * gelu'(aux)); aux m x n of D's type, leading dim ldaux. Returns
// -1 when cuBLASLt cannot fuse it on this problem (the caller then runs the unfused ops).
enum { CUDA_EPI_NONE = 0, CUDA_EPI_GELU_AUX = 1, CUDA_EPI_DGELU = 2 };
int cuda_gemm_ep(int ta, int tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                 cudaDataType_t ab, void* D, int ldd, cudaDataType_t dt, float beta, int epi,
                 const void* aux, int ldaux);

// ---- bf16 conversions (memory.cu), for the cuDNN attention's bf16 copies ------------------
// out[n] (bf16, round to nearest even) = in[n];  out[n] (fp32) = in[n] (bf16, exact)
void cuda_to_bf16(void* out, const float* in, size_t n);
void cuda_from_bf16(float* out, const void* in, size_t n);

// ---- cuDNN attention (attention_cudnn.cpp; attn_impl = cudnn) ------------------------------
// y[N, H*hd] and lse[B, H, T] (=) from q, k, v, as ops_attention_forward without the gate;
// dq, dk, dv (=) from dy (the gradient of y), as ops_attention_backward's attention part.
// Activations are act_t (in the bf16 build cuDNN reads and writes them in place; in the fp32
// build they are converted to bf16 copies first).
void cuda_cudnn_attention_forward(act_t* y, float* lse, const act_t* q, const act_t* k, const act_t* v,
                                  const OpsAttnShape* s);
void cuda_cudnn_attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dy, const act_t* q,
                                   const act_t* k, const act_t* v, const act_t* y, const float* lse,
                                   const OpsAttnShape* s);

// ---- launch helpers -------------------------------------------------------------------------
static inline unsigned cuda_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b > 0 ? b : 1);
}

#if defined(__CUDACC__) || defined(GATEDGPT_CUDA_EMU)   // nvcc, or the CPU emulator (tests/cudaemu)
// ---- device helpers -------------------------------------------------------------------------
// expf/tanhf are CUDA's accurate versions (the build never uses --use_fast_math): ~2 ulp,
// like the CPU's cpu_expf.
// (host and device: kernels/moe_router.h's __host__ __device__ function calls it)
__host__ __device__ __forceinline__ float cuda_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// the attention gate's activation a(z) and its derivative a'(z) (kernels/attn_gate.h), over
// the GPU's sigmoid
__device__ __forceinline__ float cuda_gate_act(int act, float z) { return attn_gate_act_sg(act, z, cuda_sigmoid(z)); }
__device__ __forceinline__ float cuda_gate_act_grad(int act, float z) {
    return attn_gate_act_grad_sg(act, z, cuda_sigmoid(z));
}

// Butterfly (xor) warp reductions: every lane ends with the same bits (each step adds the same
// two partial sums on both partner lanes), and the order is fixed, so results are
// deterministic. All 32 lanes must take part.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Warp sums go to shared memory and warp 0 adds them in warp order: deterministic.
// `shared` holds 32 floats; the function syncs before reusing it, so it can be called in a loop.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float s = lane < nw ? shared[lane] : 0.0f;
    return warp_sum(s);   // every warp reduces the same values the same way
}
__device__ __forceinline__ double block_sum_d(double v, double* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();   // the warp sums are in shared (block_sum_d)
    double s = lane < nw ? shared[lane] : 0.0;
    return warp_sum_d(s);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float s = lane < nw ? shared[lane] : -INFINITY;
    return warp_max(s);
}
#endif   // __CUDACC__
