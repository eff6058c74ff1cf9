// kernels/cpu/mlp.c: MLP activations (SwiGLU, tanh-GELU), forward and backward.
#include "../ops.h"
#include "cpu_common.h"

// gu[N, 2F] = [g | u];  h = silu(g) * u
void ops_swiglu_forward(float* h, const float* gu, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gu + (size_t)n * 2 * F;
        const float* u = g + F;
        float* o = h + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = g[i] * cpu_sigmoid(g[i]) * u[i];
    }
}

// dg = dh * u * sig(g) * (1 + g * (1 - sig(g)));  du = dh * silu(g)
void ops_swiglu_backward(float* dgu, const float* dh, const float* gu, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gu + (size_t)n * 2 * F;
        const float* u = g + F;
        const float* d = dh + (size_t)n * F;
        float* dg = dgu + (size_t)n * 2 * F;
        float* du = dg + F;
        for (int i = 0; i < F; i++) {
            float sg = cpu_sigmoid(g[i]);
            dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
            du[i] = d[i] * g[i] * sg;
        }
    }
}

void ops_gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = cpu_gelu(inp[i]);
}

void ops_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = cpu_gelu_grad(inp[i]) * dout[i];
}

// The fused GEMM + GELU ops of ops.h, composed from the two ops they fuse (on the CPU the GELU
// pass is cheap next to the GEMM): the same bits as calling them one after the other.
void ops_matmul_gelu_forward(float* pre, float* act, const float* inp, const float* w, int N, int C,
                             int OC) {
    ops_matmul_forward(pre, inp, w, N, C, OC);
    ops_gelu_forward(act, pre, (size_t)N * OC);
}

void ops_matmul_backward_gelu(float* dpre, float* dw, const float* dout, const float* inp,
                              const float* w, const float* pre, int N, int C, int OC) {
    ops_matmul_backward(dpre, dw, dout, inp, w, N, C, OC);    // dpre holds dact for now
    ops_gelu_backward(dpre, dpre, pre, (size_t)N * C);        // elementwise: in place is safe
}
