// kernels/cuda/attention_mma.cu: the fast version of the flash attention of attention_flash.cu
// (same math, same outputs, the sdpa gate in the forward's epilogue; activations stored as cact_t,
// staged as bf16 by attn_stage_bf16, outputs rounded once to cact_t): bf16 mma.sync.m16n8k16 with
// fp32 accumulation, fragments loaded with ldmatrix, and the softmax done in registers. The
// accumulator layout of mma.sync is documented (PTX ISA, "Matrix fragments for mma.m16n8k16"),
// unlike WMMA's, so each thread knows the rows and columns it holds:
//   lane = 4 g + t (g = lane / 4, t = lane % 4)
//   A (16 x 16, row-major): a0a1 = (row g, cols 2t, 2t+1), a2a3 = (g + 8, 2t..), a4a5 = (g, 2t + 8..),
//                           a6a7 = (g + 8, 2t + 8..)
//   B (16 x 8, "col"):      b0b1 = (rows 2t, 2t+1, col g), b2b3 = (rows 2t + 8.., col g)
//   C (16 x 8, fp32):       c0c1 = (row g, cols 2t, 2t+1), c2c3 = (row g + 8, cols 2t, 2t+1)
// so a row's softmax statistics are a reduction over the 4 threads of a quad (shuffles), the
// rescaling of the output multiplies registers, and the probabilities P (a C tile) are repacked
// as the A operand of P V without touching shared memory. Shared memory holds only the staged
// bf16 tiles (Q, K, V; dY for the backward): 52-70 KiB at head_dim 128 (2-3 blocks per SM),
// 27-37 KiB at 64.
//
// Tiles as attention_flash.cu: blocks of 64 rows (4 warps x 16), the other side in tiles of 64,
// head_dim 64 or 128; the last query tiles (the most keys) are scheduled first. Deterministic:
// no atomics, fixed orders. attention_flash.cu chooses this version unless
// GATEDGPT_FLASH_WMMA=1 (or cuda_set_flash_kernel) asks for the WMMA one.
//
// Status: builds, not yet run (docs/gpu.md).
#include "attention.h"
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include "mma_ptx.cuh"

#define MM_ROWS 64
#define MM_COLS 64
#define MM_THREADS 128
static_assert(MM_ROWS == 64 && MM_COLS == 64 && MM_THREADS == 128, "mma tiling: 4 warps x 16 rows, 8 n-tiles of 8");

// (the PTX wrappers mma_ldsm4, mma_ldsm4_t, mma_m16n8k16: kernels/cuda/mma_ptx.cuh)
// two floats -> a bf16 pair (lo in the low half: the lower column)
__device__ __forceinline__ uint32_t mm_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---- fragment loads from a staged tile [64][HD + 8] (bf16, row-major) --------------------------
// A operand: rows r0..r0+15, k columns k0..k0+15
template <int HD>
__device__ __forceinline__ void mm_load_a(uint32_t* a, const __nv_bfloat16* X, int r0, int k0, int lane) {
    mma_ldsm4(a, X + (size_t)(r0 + (lane & 15)) * (HD + 8) + k0 + (lane >> 4) * 8);
}
// B operands of two n-tiles whose columns are rows n0..n0+15 of X (B = X^T: X[n][k]), k0..k0+15:
// b[0], b[1] for n0..n0+7 and b[2], b[3] for n0+8..n0+15
template <int HD>
__device__ __forceinline__ void mm_load_bt(uint32_t* b, const __nv_bfloat16* X, int n0, int k0, int lane) {
    mma_ldsm4(b, X + (size_t)(n0 + (lane & 7) + ((lane >> 4) << 3)) * (HD + 8) + k0 + ((lane >> 3) & 1) * 8);
}
// B operands of two n-tiles from X[k][n] directly (k = rows k0..k0+15, n = columns n0..n0+15)
template <int HD>
__device__ __forceinline__ void mm_load_b(uint32_t* b, const __nv_bfloat16* X, int k0, int n0, int lane) {
    mma_ldsm4_t(b, X + (size_t)(k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (HD + 8) + n0 + (lane >> 4) * 8);
}

// acc[8][4] (16 rows x 64 columns) = A-rows of X (r0..r0+15) @ Y^T (rows 0..63 of Y), over HD
template <int HD>
__device__ __forceinline__ void mm_abt(float (*acc)[4], const __nv_bfloat16* X, int r0, const __nv_bfloat16* Y,
                                       int lane) {
    #pragma unroll
    for (int j = 0; j < 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a[4];
        mm_load_a<HD>(a, X, r0, kk * 16, lane);
        #pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            mm_load_bt<HD>(b, Y, np * 16, kk * 16, lane);
            mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
            mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// out[HD/8][4] += P (16 x 64, held as 8 C tiles in registers) @ Y (rows 0..63, all HD columns)
template <int HD>
__device__ __forceinline__ void mm_pv(float (*out)[4], const float (*p)[4], const __nv_bfloat16* Y, int lane) {
    #pragma unroll
    for (int kk = 0; kk < 4; kk++) {   // keys kk*16 .. +15: C tiles 2kk (cols 0-7) and 2kk+1 (8-15)
        uint32_t a[4];
        a[0] = mm_pack(p[2 * kk][0], p[2 * kk][1]);
        a[1] = mm_pack(p[2 * kk][2], p[2 * kk][3]);
        a[2] = mm_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[3] = mm_pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
        #pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            uint32_t b[4];
            mm_load_b<HD>(b, Y, kk * 16, dp * 16, lane);
            mma_m16n8k16(out[2 * dp], a, b[0], b[1]);
            mma_m16n8k16(out[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

__device__ __forceinline__ float mm_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float mm_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---------------------------------------------------------------------------------------------
// forward: grid (T/64, H, B)
template <int HD, bool DOC>
__global__ void __launch_bounds__(MM_THREADS)
mma_forward_kernel(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k, const cact_t* v,
                   const cact_t* qkv, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char mm_smem[];
    constexpr int LDH = HD + 8;
    const int T = d.T, H = d.H, Hkv = d.Hkv;
    const int b = blockIdx.z, h = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * MM_ROWS, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16, g = lane >> 2, tq = lane & 3;
    __nv_bfloat16* Qs = (__nv_bfloat16*)mm_smem;
    __nv_bfloat16* Ks = Qs + MM_ROWS * LDH;
    __nv_bfloat16* Vs = Ks + MM_COLS * LDH;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);

    const int row0 = t0 + rw + g, row1 = row0 + 8;   // the two query rows this thread holds
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;   // l: this thread's partial sums
    float o[HD / 8][4];
    #pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int last = min(t0 + MM_ROWS, T) - 1;   // keys 0..last: every warp's rows see key 0
    // the document mask (doc_start; DOC = false is the plain causal kernel): row t sees keys
    // lo(t) .. t; tiles before the block's first row's document are skipped (doc is
    // non-decreasing), a row without a visible key in a tile is all -inf there (the mn == -inf
    // guards below)
    const int* doc = doc_start + (size_t)b * T;
    const int lo0 = DOC && row0 < T ? doc[row0] : 0, lo1 = DOC && row1 < T ? doc[row1] : 0;
    for (int u0 = DOC ? doc[t0] / MM_COLS * MM_COLS : 0; u0 <= last; u0 += MM_COLS) {
        __syncthreads();
        attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
        attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
        __syncthreads();
        if (t0 + rw >= T) continue;   // warp-uniform: this warp's rows are all padding
        float s[8][4];
        mm_abt<HD>(s, Qs, rw, Ks, lane);
        // scale, mask (key u visible to row t when u <= t < T), row maxima
        float mx0 = -INFINITY, mx1 = -INFINITY;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = u0 + j * 8 + 2 * tq + (e & 1), t = e < 2 ? row0 : row1;
                s[j][e] = (t < T && u <= t && (!DOC || u >= (e < 2 ? lo0 : lo1))) ? s[j][e] * scale : -INFINITY;
            }
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
        const float mn0 = fmaxf(m0, mm_quad_max(mx0)), mn1 = fmaxf(m1, mm_quad_max(mx1));
        // a row without a visible key yet (or a padding row) keeps m = -inf: p = 0, alpha = 1
        const float a0 = mn0 == -INFINITY ? 1.0f : expf(m0 - mn0), a1 = mn1 == -INFINITY ? 1.0f : expf(m1 - mn1);
        float rs0 = 0.0f, rs1 = 0.0f;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            s[j][0] = mn0 == -INFINITY ? 0.0f : expf(s[j][0] - mn0);
            s[j][1] = mn0 == -INFINITY ? 0.0f : expf(s[j][1] - mn0);
            s[j][2] = mn1 == -INFINITY ? 0.0f : expf(s[j][2] - mn1);
            s[j][3] = mn1 == -INFINITY ? 0.0f : expf(s[j][3] - mn1);
            rs0 += s[j][0] + s[j][1];
            rs1 += s[j][2] + s[j][3];
        }
        l0 = l0 * a0 + rs0;
        l1 = l1 * a1 + rs1;
        m0 = mn0;
        m1 = mn1;
        #pragma unroll
        for (int n = 0; n < HD / 8; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
        mm_pv<HD>(o, s, Vs, lane);
    }
    // epilogue: the row sums over the quad, lse, normalise, the sdpa gate
    const float L0 = mm_quad_sum(l0), L1 = mm_quad_sum(l1);
    const int sgate = attn_gate_at_sdpa(d.gate, d.gate_pos);
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = half ? row1 : row0;
        if (t >= T) continue;
        const float L = half ? L1 : L0, M = half ? m1 : m0, inv = 1.0f / L;
        const size_t n = (size_t)b * T + t;
        if (tq == 0) lse[((size_t)b * H + h) * T + t] = M + logf(L);
        const cact_t* z = qkv + n * d.QKVG + d.zoff;
        #pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = nt * 8 + 2 * tq + e;
                float yy = o[nt][half * 2 + e] * inv;
                act_st(&y[(n * H + h) * HD + c], yy);
                if (sgate) yy *= cuda_gate_act(d.gate_act, act_ld(z[attn_gate_logit(d.gate, h, c, HD)]));
                if (yg != y) act_st(&yg[(n * H + h) * HD + c], yy);
            }
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// backward dQ: grid (T/64, H, B), rows = queries
template <int HD, bool DOC>
__global__ void __launch_bounds__(MM_THREADS)
mma_dq_kernel(cact_t* dq, const cact_t* dy, const cact_t* q, const cact_t* k, const cact_t* v, const float* lse,
              const float* D, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char mm_smem[];
    constexpr int LDH = HD + 8;
    const int T = d.T, H = d.H, Hkv = d.Hkv;
    const int b = blockIdx.z, h = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * MM_ROWS, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16, g = lane >> 2, tq = lane & 3;
    __nv_bfloat16* Qs = (__nv_bfloat16*)mm_smem;
    __nv_bfloat16* dYs = Qs + MM_ROWS * LDH;
    __nv_bfloat16* Ks = dYs + MM_ROWS * LDH;
    __nv_bfloat16* Vs = Ks + MM_COLS * LDH;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);
    attn_stage_bf16<HD>(dYs, dy, ldq, b, h, t0, T);
    const int row0 = t0 + rw + g, row1 = row0 + 8;
    const size_t sbase = ((size_t)b * H + h) * T;
    const float lse0 = row0 < T ? lse[sbase + row0] : 0.0f, lse1 = row1 < T ? lse[sbase + row1] : 0.0f;
    const float D0 = row0 < T ? D[sbase + row0] : 0.0f, D1 = row1 < T ? D[sbase + row1] : 0.0f;
    float acc[HD / 8][4];
    #pragma unroll
    for (int n = 0; n < HD / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const int last = min(t0 + MM_ROWS, T) - 1;
    const int* doc = doc_start + (size_t)b * T;   // the document mask (DOC), as the forward
    const int lo0 = DOC && row0 < T ? doc[row0] : 0, lo1 = DOC && row1 < T ? doc[row1] : 0;
    for (int u0 = DOC ? doc[t0] / MM_COLS * MM_COLS : 0; u0 <= last; u0 += MM_COLS) {
        __syncthreads();
        attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
        attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
        __syncthreads();
        if (t0 + rw >= T) continue;   // warp-uniform
        float s[8][4], dp[8][4];
        mm_abt<HD>(s, Qs, rw, Ks, lane);    // S = Q K^T
        mm_abt<HD>(dp, dYs, rw, Vs, lane);  // dP = dY V^T
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = u0 + j * 8 + 2 * tq + (e & 1), t = e < 2 ? row0 : row1;
                float ds = 0.0f;
                if (t < T && u <= t && (!DOC || u >= (e < 2 ? lo0 : lo1))) {
                    const float p = expf(s[j][e] * scale - (e < 2 ? lse0 : lse1));
                    ds = p * (dp[j][e] - (e < 2 ? D0 : D1));
                }
                s[j][e] = ds;   // dS, in the layout of S
            }
        }
        mm_pv<HD>(acc, s, Ks, lane);   // dQ += dS K
    }
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = half ? row1 : row0;
        if (t >= T) continue;
        #pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 2; e++)
                act_st(&dq[((size_t)b * T + t) * ldq + (size_t)h * HD + nt * 8 + 2 * tq + e], acc[nt][half * 2 + e] * scale);
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// backward dK, dV: grid (T/64, Hkv, B), rows = keys of one kv head; the group's query heads and
// the query tiles at or after the keys walked in order
template <int HD, bool DOC>
__global__ void __launch_bounds__(MM_THREADS)
mma_dkv_kernel(cact_t* dk, cact_t* dv, const cact_t* dy, const cact_t* q, const cact_t* k, const cact_t* v,
               const float* lse, const float* D, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char mm_smem[];
    constexpr int LDH = HD + 8;
    const int T = d.T, H = d.H, Hkv = d.Hkv, G = H / Hkv;
    const int b = blockIdx.z, kh = blockIdx.y, u0 = blockIdx.x * MM_ROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16, g = lane >> 2, tq = lane & 3;
    __nv_bfloat16* Ks = (__nv_bfloat16*)mm_smem;
    __nv_bfloat16* Vs = Ks + MM_ROWS * LDH;
    __nv_bfloat16* Qs = Vs + MM_ROWS * LDH;
    __nv_bfloat16* dYs = Qs + MM_COLS * LDH;
    float* LSEs = (float*)(dYs + MM_COLS * LDH);
    float* Ds = LSEs + MM_COLS;
    int* DOCs = (int*)(Ds + MM_COLS);   // [64 + 1] DOC only: the query tile's doc[t], then tend
    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
    attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
    const int key0 = u0 + rw + g, key1 = key0 + 8;   // the two keys (rows) this thread holds
    float adk[HD / 8][4], adv[HD / 8][4];
    #pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        adk[n][0] = adk[n][1] = adk[n][2] = adk[n][3] = 0.0f;
        adv[n][0] = adv[n][1] = adv[n][2] = adv[n][3] = 0.0f;
    }
    const int ufirst = u0 + rw;
    // the document mask (DOC): t sees u iff doc[t] <= u <= t. doc is non-decreasing, so the query
    // tiles stop at tend, the end of the block's last key's document. This kernel is at 252-255
    // registers: tend and the tile's doc[t] live in shared memory (DOCs), read where used, so that
    // the mask costs no register held across the tile loop (one spilled; a `break` spills more)
    const int* doc = doc_start + (size_t)b * T;
    if (DOC && threadIdx.x == 0) DOCs[MM_COLS] = attn_doc_end(doc, min(u0 + MM_ROWS, T) - 1, T);
    if (DOC) __syncthreads();
    for (int gi = 0; gi < G; gi++) {
        const int h = kh * G + gi;
        for (int t0 = u0; t0 < (DOC ? DOCs[MM_COLS] : T); t0 += MM_COLS) {
            __syncthreads();
            attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);
            attn_stage_bf16<HD>(dYs, dy, ldq, b, h, t0, T);
            for (int i = threadIdx.x; i < MM_COLS; i += blockDim.x) {
                const int t = t0 + i;
                LSEs[i] = t < T ? lse[((size_t)b * H + h) * T + t] : 0.0f;
                Ds[i] = t < T ? D[((size_t)b * H + h) * T + t] : 0.0f;
                if (DOC) DOCs[i] = t < T ? doc[t] : 0;
            }
            __syncthreads();
            if (ufirst >= T) continue;   // warp-uniform: no key of this warp exists
            float s[8][4], dp[8][4];
            mm_abt<HD>(s, Ks, rw, Qs, lane);    // S^T = K Q^T   (rows keys, columns queries)
            mm_abt<HD>(dp, Vs, rw, dYs, lane);  // dP^T = V dY^T
            #pragma unroll
            for (int j = 0; j < 8; j++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = j * 8 + 2 * tq + (e & 1), t = t0 + c, u = e < 2 ? key0 : key1;
                    float p = 0.0f, dsv = 0.0f;
                    if (t < T && u <= t && (!DOC || DOCs[c] <= u)) {
                        p = expf(s[j][e] * scale - LSEs[c]);
                        dsv = p * (dp[j][e] - Ds[c]);
                    }
                    s[j][e] = p;      // P^T
                    dp[j][e] = dsv;   // dS^T (in place: saves registers)
                }
            }
            mm_pv<HD>(adv, s, dYs, lane);   // dV += P^T dY
            mm_pv<HD>(adk, dp, Qs, lane);   // dK += dS^T Q
        }
    }
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int u = half ? key1 : key0;
        if (u >= T) continue;
        #pragma unroll
        for (int nt = 0; nt < HD / 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const size_t at = ((size_t)b * T + u) * ldk + (size_t)kh * HD + nt * 8 + 2 * tq + e;
                act_st(&dk[at], adk[nt][half * 2 + e] * scale);
                act_st(&dv[at], adv[nt][half * 2 + e]);
            }
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// launches (attention_flash.cu has checked head_dim, the GPU and its shared memory)

template <int HD> constexpr size_t mm_smem_fwd() { return 3 * (size_t)MM_ROWS * (HD + 8) * 2; }
template <int HD> constexpr size_t mm_smem_bwd() { return 4 * (size_t)MM_ROWS * (HD + 8) * 2 + 2 * MM_COLS * 4; }
// the dK/dV kernel's: with the document mask, its query tile's doc[t] and tend (DOCs) too
template <int HD, bool DOC> constexpr size_t mm_smem_dkv() { return mm_smem_bwd<HD>() + (DOC ? (MM_COLS + 1) * 4 : 0); }

template <typename K>
static void mm_optin(K kernel, size_t bytes, int* done) {
    if (*done) return;
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

template <int HD, bool DOC>
static void mm_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k, const cact_t* v,
                       const cact_t* qkv, AttnDims d, int B, const int* doc) {
    static int optin = 0;
    mm_optin(mma_forward_kernel<HD, DOC>, mm_smem_fwd<HD>(), &optin);
    dim3 grid((d.T + MM_ROWS - 1) / MM_ROWS, d.H, B);
    mma_forward_kernel<HD, DOC><<<grid, MM_THREADS, mm_smem_fwd<HD>(), cuda_stream>>>(y, yg, lse, q, k, v, qkv, d,
                                                                                 1.0f / sqrtf((float)HD), doc);
    CUDA_LAUNCH_CHECK("mma_forward_kernel");
}

template <int HD, bool DOC>
static void mm_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D, const cact_t* q,
                        const cact_t* k, const cact_t* v, const float* lse, AttnDims d, int B, const int* doc) {
    const float scale = 1.0f / sqrtf((float)HD);
    static int optin_q = 0, optin_kv = 0;
    mm_optin(mma_dq_kernel<HD, DOC>, mm_smem_bwd<HD>(), &optin_q);
    mm_optin(mma_dkv_kernel<HD, DOC>, mm_smem_dkv<HD, DOC>(), &optin_kv);
    dim3 gq((d.T + MM_ROWS - 1) / MM_ROWS, d.H, B);
    mma_dq_kernel<HD, DOC><<<gq, MM_THREADS, mm_smem_bwd<HD>(), cuda_stream>>>(dq, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("mma_dq_kernel");
    dim3 gkv((d.T + MM_ROWS - 1) / MM_ROWS, d.Hkv, B);
    mma_dkv_kernel<HD, DOC><<<gkv, MM_THREADS, mm_smem_dkv<HD, DOC>(), cuda_stream>>>(dk, dv, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("mma_dkv_kernel");
}

void cuda_mma_attention_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k, const cact_t* v,
                                const cact_t* qkv, AttnDims d, int B, const int* doc) {
    // the document mask has its own instantiations (DOC = true): the causal kernels stay as they were
    if (doc && d.hd == 64) mm_forward<64, true>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else if (doc) mm_forward<128, true>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else if (d.hd == 64) mm_forward<64, false>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else mm_forward<128, false>(y, yg, lse, q, k, v, qkv, d, B, doc);
}

void cuda_mma_attention_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D, const cact_t* q,
                                 const cact_t* k, const cact_t* v, const float* lse, AttnDims d, int B, const int* doc) {
    if (doc && d.hd == 64) mm_backward<64, true>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else if (doc) mm_backward<128, true>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else if (d.hd == 64) mm_backward<64, false>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else mm_backward<128, false>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
}
