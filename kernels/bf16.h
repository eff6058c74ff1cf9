// kernels/bf16.h: bf16 (bfloat16) as raw 16-bit patterns, and the two roundings the backends
// use, written once for the host and the device (the CUDA kernels include it too, so the CPU
// emulation of bf16 storage and the GPU give the same bits; NaN payloads aside: the device's
// __float2bfloat16 writes the canonical NaN, bf16_from_f32 keeps sign and payload).
//
// bf16 is the top half of an IEEE float32: 1 sign, 8 exponent, 7 mantissa bits.
// - round to nearest even: activations written by an op (what __float2bfloat16 does)
// - stochastic rounding: the compute copy of the master weights (docs/gpu.md). The value is
//   rounded up with probability equal to the dropped fraction, so the expected value is exact
//   and small AdamW updates are not lost; the random 16 bits come from a counter-based hash of
//   (seed, element index), so a run repeats and resumes bit for bit.
#pragma once
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BF16_HD __host__ __device__ __forceinline__
#else
#define BF16_HD static inline
#endif

BF16_HD uint32_t bf16_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(f);
#else
    uint32_t u; memcpy(&u, &f, 4); return u;
#endif
}

BF16_HD float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f; memcpy(&f, &u, 4); return f;
#endif
}

// round to nearest, ties to even; NaN stays a (quiet) NaN, overflow goes to inf
BF16_HD uint16_t bf16_from_f32(float f) {
    uint32_t u = bf16_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// stochastic rounding with 16 random bits r: add r below the kept bits, truncate. Rounds the
// magnitude up with probability (dropped bits) / 2^16. inf and NaN are kept as they are.
BF16_HD uint16_t bf16_from_f32_sr(float f, uint32_t r) {
    uint32_t u = bf16_f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return bf16_from_f32(f);
    u += r & 0xffffu;
    return (uint16_t)(u >> 16);
}

// the random bits of element i for a given seed (splitmix64's finaliser over seed and index)
BF16_HD uint32_t bf16_sr_bits(uint64_t seed, uint64_t i) {
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z ^= z >> 30; z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27; z *= 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)z;
}
