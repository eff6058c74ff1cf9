// kernels/cuda/mlp.cu: MLP activations (SwiGLU, tanh-GELU), forward and backward; one thread
// per output element.
#include "cuda_common.h"

// gu[N, 2F] = [g | u];  h[N, F] = silu(g) * u
__global__ void swiglu_forward_kernel(float* h, const float* gu, int N, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * F) return;
    size_t n = i / F, j = i % F;
    float g = gu[n * 2 * F + j], u = gu[n * 2 * F + F + j];
    h[i] = g * cuda_sigmoid(g) * u;
}

// dg = dh * u * sig(g) * (1 + g * (1 - sig(g)));  du = dh * silu(g)
__global__ void swiglu_backward_kernel(float* dgu, const float* dh, const float* gu, int N, int F) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * F) return;
    size_t n = i / F, j = i % F;
    float g = gu[n * 2 * F + j], u = gu[n * 2 * F + F + j], d = dh[i];
    float sg = cuda_sigmoid(g);
    dgu[n * 2 * F + j] = d * u * sg * (1.0f + g * (1.0f - sg));
    dgu[n * 2 * F + F + j] = d * g * sg;
}

void ops_swiglu_forward(float* h, const float* gu, int N, int F) {
    CUDA_OP_TIMER("ops_swiglu_forward");
    swiglu_forward_kernel<<<cuda_blocks((size_t)N * F, 256), 256, 0, cuda_stream>>>(h, gu, N, F);
    CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
}
void ops_swiglu_backward(float* dgu, const float* dh, const float* gu, int N, int F) {
    CUDA_OP_TIMER("ops_swiglu_backward");
    swiglu_backward_kernel<<<cuda_blocks((size_t)N * F, 256), 256, 0, cuda_stream>>>(dgu, dh, gu, N, F);
    CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
}

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
}

void ops_gelu_forward(float* out, const float* inp, size_t n) {
    CUDA_OP_TIMER("ops_gelu_forward");
    gelu_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(out, inp, n);
    CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}
void ops_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
    CUDA_OP_TIMER("ops_gelu_backward");
    gelu_backward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(dinp, dout, inp, n);
    CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}
