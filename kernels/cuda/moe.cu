// kernels/cuda/moe.cu: the Mixture-of-Experts ops of kernels/ops.h on the CUDA backend.
//
// Status: only ops_accumulate is implemented (dense models use it). The routing, dispatch,
// grouped-GEMM and shared-expert-gate ops are not written yet: each stops the run with a
// message naming the op, so an MoE config on the CUDA backend fails loudly at its first MoE
// layer instead of computing garbage. The CPU backend (kernels/cpu/moe.c) has all of them; the
// plan (permute + cuBLAS grouped GEMM or per-expert cuBLASLt, chosen by measurement) is in
// docs/gpu.md.
#include "cuda_common.h"

// y[n] += x[n]
__global__ static void accumulate_kernel(float* y, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" void ops_accumulate(float* y, const float* x, size_t n) {
    if (n == 0) return;
    accumulate_kernel<<<(unsigned)((n + 255) / 256), 256, 0, cuda_stream>>>(y, x, n);
    CUDA_LAUNCH_CHECK("accumulate_kernel");
}

static void moe_missing(const char* op) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s is not implemented on the CUDA backend yet", op);
    cuda_fail(__FILE__, __LINE__, msg, "MoE models ([moe] n_expert > 0) train on the CPU backend for now (docs/gpu.md)");
}

extern "C" {
void ops_moe_router_forward(float*, int*, float*, float*, const float*, int, int, int, OpsRouter) {
    moe_missing("ops_moe_router_forward");
}
void ops_moe_router_backward(float*, const float*, const float*, const float*, const int*, const float*,
                             const float*, const float*, float, int, int, int, OpsRouter) {
    moe_missing("ops_moe_router_backward");
}
void ops_moe_router_stats(double*, double*, double*, const float*, const float*, int, int) {
    moe_missing("ops_moe_router_stats");
}
void ops_moe_dispatch_plan(int*, int*, int*, int*, const int*, int, int, int, int) {
    moe_missing("ops_moe_dispatch_plan");
}
void ops_moe_gather(float*, const float*, const int*, int, int, int) { moe_missing("ops_moe_gather"); }
void ops_moe_gather_backward(float*, const float*, const int*, int, int, int) { moe_missing("ops_moe_gather_backward"); }
void ops_moe_combine(float*, const float*, const float*, const int*, int, int, int) { moe_missing("ops_moe_combine"); }
void ops_moe_combine_backward(float*, float*, const float*, const float*, const float*, const int*, int, int, int) {
    moe_missing("ops_moe_combine_backward");
}
void ops_grouped_matmul_forward(float*, const float*, const float*, const int*, int, int, int) {
    moe_missing("ops_grouped_matmul_forward");
}
void ops_grouped_matmul_backward(float*, float*, const float*, const float*, const float*, const int*, int, int, int) {
    moe_missing("ops_grouped_matmul_backward");
}
void ops_sigmoid_gate_add_forward(float*, const float*, const float*, int, int) { moe_missing("ops_sigmoid_gate_add_forward"); }
void ops_sigmoid_gate_add_backward(float*, float*, const float*, const float*, const float*, int, int) {
    moe_missing("ops_sigmoid_gate_add_backward");
}
}
