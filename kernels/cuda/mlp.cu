// kernels/cuda/mlp.cu: MLP activations (SwiGLU, tanh-GELU), forward and backward; one thread
// per output element. Inputs and outputs are act_t (cact_t here); each element is read with
// act_ld, computed in fp32 and stored with act_st.
#include "cuda_common.h"

// gu[N, 2F] = [g | u];  h[N, F] = silu(g) * u
__global__ void swiglu_forward_kernel(cact_t* h, const cact_t* gu, int N, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * F) return;
    size_t n = i / F, j = i % F;
    float g = act_ld(gu[n * 2 * F + j]), u = act_ld(gu[n * 2 * F + F + j]);
    act_st(&h[i], g * cuda_sigmoid(g) * u);
}

// dg = dh * u * sig(g) * (1 + g * (1 - sig(g)));  du = dh * silu(g)
__global__ void swiglu_backward_kernel(cact_t* dgu, const cact_t* dh, const cact_t* gu, int N, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * F) return;
    size_t n = i / F, j = i % F;
    float g = act_ld(gu[n * 2 * F + j]), u = act_ld(gu[n * 2 * F + F + j]), d = act_ld(dh[i]);
    float sg = cuda_sigmoid(g);
    act_st(&dgu[n * 2 * F + j], d * u * sg * (1.0f + g * (1.0f - sg)));
    act_st(&dgu[n * 2 * F + F + j], d * g * sg);
}

void ops_swiglu_forward(act_t* h, const act_t* gu, int N, int F) {
    CUDA_OP_TIMER("ops_swiglu_forward");
    swiglu_forward_kernel<<<cuda_blocks((size_t)N * F, 256), 256, 0, cuda_stream>>>(CACT(h), CCACT(gu), N, F);
    CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
}
void ops_swiglu_backward(act_t* dgu, const act_t* dh, const act_t* gu, int N, int F) {
    CUDA_OP_TIMER("ops_swiglu_backward");
    swiglu_backward_kernel<<<cuda_blocks((size_t)N * F, 256), 256, 0, cuda_stream>>>(
        CACT(dgu), CCACT(dh), CCACT(gu), N, F);
    CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
}

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
__global__ void gelu_forward_kernel(cact_t* out, const cact_t* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = act_ld(inp[i]);
    act_st(&out[i], 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))));
}

__global__ void gelu_backward_kernel(cact_t* dinp, const cact_t* dout, const cact_t* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = act_ld(inp[i]);
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    act_st(&dinp[i], grad * act_ld(dout[i]));
}

void ops_gelu_forward(act_t* out, const act_t* inp, size_t n) {
    CUDA_OP_TIMER("ops_gelu_forward");
    gelu_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(out), CCACT(inp), n);
    CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}
void ops_gelu_backward(act_t* dinp, const act_t* dout, const act_t* inp, size_t n) {
    CUDA_OP_TIMER("ops_gelu_backward");
    gelu_backward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(dinp), CCACT(dout), CCACT(inp), n);
    CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}
