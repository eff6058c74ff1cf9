// kernels/cpu/cpu_math.h: the elementwise functions of the CPU kernels (exp, tanh, sigmoid, GELU),
// inline and written so that GCC vectorises the loops that call them. No act_t here: the fp32
// kernels (through cpu_common.h) and the bf16 backend (kernels/cpu_bf16/ops_bf16.c, whose fused
// loops call them on fp32 registers) share one definition, so both compute the same bits.
#pragma once
#include <math.h>

// exp(x) for float32, written so that GCC vectorises loops that call it (libm's expf is a
// scalar call that blocks vectorisation; in the training step it ran ~12M times per
// cross-entropy pass). Range reduction x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
// constants so n*ln2 is exact), then a degree-6 polynomial for exp(r) (Cephes expf's
// coefficients), then the exponent n put into the float's bits. Max error ~2 ulp for
// x in [-87, 88]; below -87.3 it returns 0 (exp would be denormal), above 88.7 +inf, and NaN in
// gives NaN out (the non-finite guard relies on that).
static inline float cpu_expf(float x) {
    float xc = x < -87.33654f ? -87.33654f : x;
    xc = xc > 88.72283f ? 88.72283f : xc;
    // nearest-even (rintf: one vroundps / vrndscaleps), not roundf: roundf's ties-away has no
    // vector instruction, and with it GCC kept every loop over this function scalar (measured: the
    // cross-entropy's, the softmax's, GELU's). The two differ only where x log2(e) is exactly
    // k + 1/2, and then both reductions stay within |r| <= ln2/2 + ulp: the same accuracy. On AVX2
    // (no mask registers) the selects below also need -fno-trapping-math (CMakeLists.txt).
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int i; float f; } e;
    e.i = ((int)n + 127) << 23;
    float y = p * e.f;
    y = x < -87.33654f ? 0.0f : y;
    y = x > 88.72283f ? INFINITY : y;
    return x != x ? x : y;
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): absolute error ~1e-7 (relative error grows near 0, where
// tanh(x) ~ x; callers use it in 1 + tanh or 1 - tanh^2, where absolute error is what counts).
static inline float cpu_tanhf(float x) { return 1.0f - 2.0f / (cpu_expf(2.0f * x) + 1.0f); }

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

// tanh-GELU (GPT-2's): gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define CPU_GELU_K 0.7978845608028654f  // sqrt(2/pi)
static inline float cpu_gelu(float x) {
    return 0.5f * x * (1.0f + cpu_tanhf(CPU_GELU_K * (x + 0.044715f * x * x * x)));
}
// d gelu / dx
static inline float cpu_gelu_grad(float x) {
    float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
    float th = cpu_tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * CPU_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
