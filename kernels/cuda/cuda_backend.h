// kernels/cuda/cuda_backend.h: what the CUDA backend offers beyond kernels/ops.h, for tests,
// benchmarks and tools linked against gatedgpt_cuda. Plain C, no CUDA header: model/ never
// includes it (model/ calls kernels/ops.h only).
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 when a CUDA device is visible and usable, else 0 (and a one-line reason in why[len]).
// Safe to call before ops_init; the GPU tests skip (exit 0) when it returns 0.
int cuda_device_present(char* why, size_t len);
// Waits for all queued GPU work (for timing).
void cuda_sync(void);
// Bytes currently held by ops_malloc and the backend's scratch buffers, and the largest total
// seen since ops_init. The device's own view (context, cuBLAS workspaces included) comes from
// cuda_device_used_bytes() = total - free of cudaMemGetInfo.
size_t cuda_allocated_bytes(void);
size_t cuda_allocated_peak_bytes(void);
void cuda_reset_peak(void);   // the peak restarts from the bytes held now
size_t cuda_device_used_bytes(void);
// Peak dense FLOP/s of this GPU: for the precision this build computes in (what
// ops_peak_flops returns: fp32, TF32 or bf16 by cuda_gemm_math) and for bf16 tensor cores
// (the reference for MFU once the bf16 path lands). From a table of known GPUs; otherwise
// estimated from SM count and clock (see memory.cu).
double cuda_peak_flops_bf16(void);
// 1 when GEMMs may use TF32 tensor cores (environment GATEDGPT_CUDA_TF32=1 at ops_init).
int cuda_tf32_enabled(void);
// What the GEMMs round their fp32 inputs to (read from the environment at ops_init):
//   CUDA_MATH_FP32  full fp32 (default)
//   CUDA_MATH_TF32  GATEDGPT_CUDA_TF32=1: TF32 tensor cores (10-bit mantissa)
//   CUDA_MATH_BF16  GATEDGPT_CUDA_BF16_GEMM=1: bf16 tensor cores (8-bit mantissa), fp32
//                   accumulation and storage: the bf16 GEMM rate without bf16 activations
//                   (a step towards the bf16 compute path, docs/gpu.md)
enum { CUDA_MATH_FP32 = 0, CUDA_MATH_TF32 = 1, CUDA_MATH_BF16 = 2 };
int cuda_gemm_math(void);
const char* cuda_gemm_math_name(void);   // "fp32", "TF32", "bf16-gemm"
// 1 when this build has cuDNN's fused attention (attn_impl = cudnn: kernels/cuda/attention_cudnn.cu)
int cuda_cudnn_available(void);
// How the MoE experts' GEMMs run (kernels/cuda/moe.cu): one cuBLASLt call per expert (LOOP, the
// default) or one cuBLAS grouped GEMM (GROUPED; environment GATEDGPT_MOE_GEMM=grouped). Tests
// and benchmarks switch it with cuda_set_moe_gemm.
enum { CUDA_MOE_GEMM_LOOP = 0, CUDA_MOE_GEMM_GROUPED = 1 };
int cuda_moe_gemm(void);
void cuda_set_moe_gemm(int mode);
// Which kernel attn_impl = flash runs: mma.sync with the softmax in registers (MMA, the default,
// kernels/cuda/attention_mma.cu) or the first WMMA version (WMMA, kernels/cuda/attention_flash.cu;
// environment GATEDGPT_FLASH_WMMA=1). Tests run both.
enum { CUDA_FLASH_MMA = 0, CUDA_FLASH_WMMA = 1 };
int cuda_flash_kernel(void);
void cuda_set_flash_kernel(int which);
// Per-op profile (environment GATEDGPT_CUDA_PROFILE=1 at ops_init): every op synchronises the
// device before and after itself and adds its wall time to a table (so the step gets slower:
// a diagnostic, not a benchmark). reset empties the table; print writes it to stdout, largest
// first, with each op's share of the total; enabled says whether profiling is on.
int cuda_profile_enabled(void);
void cuda_profile_reset(void);
void cuda_profile_print(const char* title);
// e.g. "NVIDIA H200"
const char* cuda_device_name(void);

#ifdef __cplusplus
}
#endif
