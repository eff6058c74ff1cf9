// kernels/cuda/attention_flash.cu: causal GQA flash attention on bf16 tensor cores, with the
// sdpa gate fused into the forward's epilogue ([train] attn_impl = flash; attention.cu calls it).
//
// The math is attention.cu's fp32 kernel's (and kernels/cpu/attention.c's): online softmax,
// the row logsumexp saved, P recomputed from it in the backward; only the products run on
// tensor cores: q, k, v, dy are staged into shared memory as bf16 (rounded there in the fp32
// build, copied as they are when the activations are bf16: attn_stage_bf16, attention.h), every
// product accumulates in fp32 (WMMA 16x16x16 bf16 -> fp32), and the softmax and the statistics
// are fp32; the outputs (y, yg, dq, dk, dv) are rounded once to the activation type (cact_t).
// So it agrees with the fp32 kernel to bf16 precision (~1e-2).
//
// Tiles: a block = 64 rows (4 warps x 16) of one head; the other side walked in tiles of 64.
// WMMA fragments have an unspecified element layout, so every step that works per row (the
// softmax, rescaling the output, masking) goes through shared memory: a warp stores its score
// tile S[16][64] as fp32, updates its rows there, writes P in bf16, and multiplies P by V with
// WMMA again. The running output O[16][hd] lives in shared memory (it is rescaled per row each
// tile, then loaded as the accumulator of the P V product); the backward's accumulators (dQ, or
// dK and dV) stay in fragments (never rescaled). The query tiles with the most keys (the last)
// are scheduled first.
//
//   forward, grid (T/64, H, B):     S = Q K^T, online softmax, O = O a + P V (O loaded into the
//                                   accumulator fragments from shared memory); epilogue y = O / l,
//                                   lse = m + log l, yg = y * act(z)
//   dQ, grid (T/64, H, B):          S, P = exp(S s - lse), dP = dY V^T, dS = P (dP - D),
//                                   dQ += dS K; dQ *= s
//   dK/dV, grid (T/64, Hkv, B):     for each query head of the group and query tile at or after
//                                   the keys: S^T = K Q^T, P^T, dP^T = V dY^T, dV += P^T dY,
//                                   dK += dS^T Q; dK *= s
// Deterministic: no atomics, every output element has one writer, fixed loop orders.
// head_dim 64 or 128 (a template parameter: the fragment loops unroll); bf16 WMMA needs sm_80+.
//
// This WMMA version is the first one; attention_mma.cu is the fast one (mma.sync, the softmax in
// registers), which attn_impl = flash runs by default (GATEDGPT_FLASH_WMMA=1 picks this one).
//
// Status: builds, not yet run (docs/gpu.md).
#include "attention.h"
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define FA_ROWS 64                 // rows of a block (queries or keys)
#define FA_COLS 64                 // rows of the other side per tile
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_LDS (FA_COLS + 4)       // fp32 score tile row stride (a multiple of 4 floats)
#define FA_LDP (FA_COLS + 8)       // bf16 P / dS tile row stride (a multiple of 8)
// the tiling below assumes these (the softmax gives each lane 2 of the 64 columns)
static_assert(FA_ROWS == FA_COLS && FA_COLS == 64 && FA_ROWS == 16 * FA_WARPS, "flash tiling");

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragBRow;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBCol;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// out[16][FA_COLS] (fp32, row stride FA_LDS) = A[16][HD] @ B[FA_COLS][HD]^T, A and B row-major in
// shared memory with row stride HD + 8 (B read as a column-major matrix_b: its rows are columns)
template <int HD>
__device__ __forceinline__ void fa_abt(float* out, const bf16* A, const bf16* B) {
    #pragma unroll
    for (int j = 0; j < FA_COLS / 16; j++) {
        FragC c;
        wmma::fill_fragment(c, 0.0f);
        #pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            FragA a;
            FragBCol b;
            wmma::load_matrix_sync(a, A + kk * 16, HD + 8);
            wmma::load_matrix_sync(b, B + j * 16 * (HD + 8) + kk * 16, HD + 8);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(out + j * 16, c, FA_LDS, wmma::mem_row_major);
    }
}

// acc[j] += P[16][FA_COLS] @ M[FA_COLS][HD] (column block j of 16): P bf16 row stride FA_LDP, M
// row-major bf16 row stride HD + 8
template <int HD>
__device__ __forceinline__ void fa_pm(FragC* acc, const bf16* P, const bf16* M) {
    #pragma unroll
    for (int kk = 0; kk < FA_COLS / 16; kk++) {
        FragA a;   // loaded once, used for every column block
        wmma::load_matrix_sync(a, P + kk * 16, FA_LDP);
        #pragma unroll
        for (int j = 0; j < HD / 16; j++) {
            FragBRow b;
            wmma::load_matrix_sync(b, M + kk * 16 * (HD + 8) + j * 16, HD + 8);
            wmma::mma_sync(acc[j], a, b, acc[j]);
        }
    }
}

// shared memory of each kernel, in bytes (the layouts are at the top of each kernel)
template <int HD> constexpr size_t fa_forward_smem() {
    return 3 * (size_t)FA_ROWS * (HD + 8) * 2 +
           FA_WARPS * ((size_t)16 * FA_LDS * 4 + 16 * FA_LDP * 2 + 16 * (HD + 4) * 4 + 3 * 16 * 4);
}
template <int HD> constexpr size_t fa_dq_smem() {
    return 4 * (size_t)FA_ROWS * (HD + 8) * 2 +
           FA_WARPS * (2 * (size_t)16 * FA_LDS * 4 + 16 * FA_LDP * 2 + 16 * (HD + 4) * 4 + 2 * 16 * 4);
}
template <int HD> constexpr size_t fa_dkv_smem() {
    return 4 * (size_t)FA_ROWS * (HD + 8) * 2 + 2 * FA_COLS * 4 +
           FA_WARPS * (2 * (size_t)16 * FA_LDS * 4 + 2 * 16 * FA_LDP * 2 + 16 * (HD + 4) * 4);
}

// every kernel fits an A100's opt-in shared memory (166912 bytes; H100/H200: 232448)
static_assert(fa_forward_smem<128>() <= 166912 && fa_dq_smem<128>() <= 166912 && fa_dkv_smem<128>() <= 166912,
              "flash shared memory");
static_assert(fa_dkv_smem<128>() >= fa_forward_smem<128>() && fa_dkv_smem<128>() >= fa_dq_smem<128>(),
              "fa_check compares the largest kernel's shared memory");

// ---------------------------------------------------------------------------------------------
// forward
template <int HD, bool DOC>
__global__ void __launch_bounds__(FA_THREADS)
flash_forward_kernel(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k, const cact_t* v,
                     const cact_t* qkv, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char fa_smem[];
    constexpr int LDH = HD + 8, LDO = HD + 4;
    const int T = d.T, H = d.H, Hkv = d.Hkv;
    // the last query tiles see the most keys: they go first (blockIdx.x 0)
    const int b = blockIdx.z, h = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * FA_ROWS, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16;
    // layout: Q, K, V tiles [64][HD+8] bf16; per warp: S [16][FA_LDS] f32, P [16][FA_LDP] bf16,
    // O [16][HD+4] f32, m, l, alpha [16] f32
    bf16* Qs = (bf16*)fa_smem;
    bf16* Ks = Qs + FA_ROWS * LDH;
    bf16* Vs = Ks + FA_COLS * LDH;
    unsigned char* wbase = (unsigned char*)(Vs + FA_COLS * LDH) +
                           (size_t)warp * (16 * FA_LDS * 4 + 16 * FA_LDP * 2 + 16 * LDO * 4 + 3 * 16 * 4);
    float* Sw = (float*)wbase;
    bf16* Pw = (bf16*)(Sw + 16 * FA_LDS);
    float* Ow = (float*)(Pw + 16 * FA_LDP);
    float* Mw = Ow + 16 * LDO;
    float* Lw = Mw + 16;
    float* Aw = Lw + 16;

    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);
    for (int i = lane; i < 16 * LDO; i += 32) Ow[i] = 0.0f;
    if (lane < 16) { Mw[lane] = -INFINITY; Lw[lane] = 0.0f; }
    const int last = min(t0 + FA_ROWS, T) - 1;   // the block's last query sees keys 0..last
    const int wlast = min(t0 + rw + 15, T - 1);  // this warp's last query
    // the document mask (DOC: doc_start is set; DOC = false is the plain causal kernel): t sees doc[t] .. t
    const int* doc = doc_start + (size_t)b * T;
    for (int u0 = 0; u0 <= last; u0 += FA_COLS) {
        __syncthreads();   // the previous tile is no longer read (and Q is staged)
        attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
        attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
        __syncthreads();
        if (t0 + rw >= T || wlast < u0) continue;   // warp-uniform: no visible key in this tile
        fa_abt<HD>(Sw, Qs + rw * LDH, Ks);
        __syncwarp();
        // online softmax, one row at a time, 2 columns per lane
        for (int r = 0; r < 16; r++) {
            const int t = t0 + rw + r;
            float s0 = -INFINITY, s1 = -INFINITY;
            const int u_a = u0 + lane, u_b = u0 + lane + 32, lo = DOC && t < T ? doc[t] : 0;
            if (t < T && u_a <= t && (!DOC || u_a >= lo)) s0 = Sw[r * FA_LDS + lane] * scale;
            if (t < T && u_b <= t && (!DOC || u_b >= lo)) s1 = Sw[r * FA_LDS + lane + 32] * scale;
            const float mold = Mw[r];
            const float mnew = fmaxf(mold, warp_max(fmaxf(s0, s1)));
            float p0 = 0.0f, p1 = 0.0f, alpha = 1.0f;
            if (mnew != -INFINITY) {   // a row with no visible key yet (or a padding row) stays empty
                p0 = expf(s0 - mnew);
                p1 = expf(s1 - mnew);
                alpha = expf(mold - mnew);   // 0 on the first visible tile (mold = -inf)
            }
            const float rs = warp_sum(p0 + p1);
            __syncwarp();   // every lane has read Mw[r] before lane 0 rewrites it
            if (lane == 0) { Lw[r] = Lw[r] * alpha + rs; Mw[r] = mnew; Aw[r] = alpha; }
            Pw[r * FA_LDP + lane] = __float2bfloat16_rn(p0);
            Pw[r * FA_LDP + lane + 32] = __float2bfloat16_rn(p1);
        }
        __syncwarp();
        // O = O * alpha (per row, in shared memory), then O += P V on tensor cores with O as the
        // accumulator (loaded from and stored back to shared memory)
        for (int i = lane; i < 16 * HD; i += 32) {
            const int r = i / HD, c = i % HD;
            Ow[r * LDO + c] *= Aw[r];
        }
        __syncwarp();
        FragC o[HD / 16];
        #pragma unroll
        for (int j = 0; j < HD / 16; j++) wmma::load_matrix_sync(o[j], Ow + j * 16, LDO, wmma::mem_row_major);
        fa_pm<HD>(o, Pw, Vs);
        #pragma unroll
        for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(Ow + j * 16, o[j], LDO, wmma::mem_row_major);
        __syncwarp();
    }
    // epilogue: normalise, save lse, apply the sdpa gate
    const int sgate = attn_gate_at_sdpa(d.gate, d.gate_pos);
    for (int r = 0; r < 16; r++) {
        const int t = t0 + rw + r;
        if (t >= T) break;
        const float L = Lw[r], inv = 1.0f / L;
        const size_t n = (size_t)b * T + t;
        if (lane == 0) lse[((size_t)b * H + h) * T + t] = Mw[r] + logf(L);
        const cact_t* z = qkv + n * d.QKVG + d.zoff;
        for (int c = lane; c < HD; c += 32) {
            float yy = Ow[r * LDO + c] * inv;
            act_st(&y[(n * H + h) * HD + c], yy);
            if (sgate) yy *= cuda_gate_act(d.gate_act, act_ld(z[attn_gate_logit(d.gate, h, c, HD)]));
            if (yg != y) act_st(&yg[(n * H + h) * HD + c], yy);
        }
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// backward, dQ: rows = queries
template <int HD, bool DOC>
__global__ void __launch_bounds__(FA_THREADS)
flash_dq_kernel(cact_t* dq, const cact_t* dy, const cact_t* q, const cact_t* k, const cact_t* v, const float* lse,
                const float* D, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char fa_smem[];
    constexpr int LDH = HD + 8, LDO = HD + 4;
    const int T = d.T, H = d.H, Hkv = d.Hkv;
    const int b = blockIdx.z, h = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * FA_ROWS, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16;
    // layout: Q, dY, K, V tiles [64][HD+8] bf16; per warp: S and dP [16][FA_LDS] f32,
    // dS [16][FA_LDP] bf16, out [16][HD+4] f32, lse and D of its rows [16] f32
    bf16* Qs = (bf16*)fa_smem;
    bf16* dYs = Qs + FA_ROWS * LDH;
    bf16* Ks = dYs + FA_ROWS * LDH;
    bf16* Vs = Ks + FA_COLS * LDH;
    unsigned char* wbase = (unsigned char*)(Vs + FA_COLS * LDH) +
                           (size_t)warp * (2 * 16 * FA_LDS * 4 + 16 * FA_LDP * 2 + 16 * LDO * 4 + 2 * 16 * 4);
    float* Sw = (float*)wbase;
    float* DPw = Sw + 16 * FA_LDS;
    bf16* DSw = (bf16*)(DPw + 16 * FA_LDS);
    float* Outw = (float*)(DSw + 16 * FA_LDP);
    float* LSEw = Outw + 16 * LDO;
    float* Dw = LSEw + 16;

    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);
    attn_stage_bf16<HD>(dYs, dy, ldq, b, h, t0, T);
    if (lane < 16) {
        const int t = t0 + rw + lane;
        LSEw[lane] = t < T ? lse[((size_t)b * H + h) * T + t] : 0.0f;
        Dw[lane] = t < T ? D[((size_t)b * H + h) * T + t] : 0.0f;
    }
    FragC acc[HD / 16];
    #pragma unroll
    for (int j = 0; j < HD / 16; j++) wmma::fill_fragment(acc[j], 0.0f);
    const int last = min(t0 + FA_ROWS, T) - 1;
    const int wlast = min(t0 + rw + 15, T - 1);
    const int* doc = doc_start + (size_t)b * T;   // the document mask, read only when DOC
    for (int u0 = 0; u0 <= last; u0 += FA_COLS) {
        __syncthreads();
        attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
        attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
        __syncthreads();
        if (t0 + rw >= T || wlast < u0) continue;
        fa_abt<HD>(Sw, Qs + rw * LDH, Ks);      // S = Q K^T
        fa_abt<HD>(DPw, dYs + rw * LDH, Vs);    // dP = dY V^T
        __syncwarp();
        for (int i = lane; i < 16 * FA_COLS; i += 32) {
            const int r = i / FA_COLS, c = i % FA_COLS, t = t0 + rw + r, u = u0 + c;
            float ds = 0.0f;
            if (t < T && u <= t && (!DOC || u >= doc[t])) {
                const float p = expf(Sw[r * FA_LDS + c] * scale - LSEw[r]);
                ds = p * (DPw[r * FA_LDS + c] - Dw[r]);
            }
            DSw[r * FA_LDP + c] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        fa_pm<HD>(acc, DSw, Ks);                // dQ += dS K
    }
    #pragma unroll
    for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(Outw + j * 16, acc[j], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        const int r = i / HD, c = i % HD, t = t0 + rw + r;
        if (t < T) act_st(&dq[((size_t)b * T + t) * ldq + (size_t)h * HD + c], Outw[r * LDO + c] * scale);
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// backward, dK and dV: rows = keys of one kv head; the query heads of its group and the query
// tiles at or after the keys walked in order
template <int HD, bool DOC>
__global__ void __launch_bounds__(FA_THREADS)
flash_dkv_kernel(cact_t* dk, cact_t* dv, const cact_t* dy, const cact_t* q, const cact_t* k, const cact_t* v,
                 const float* lse, const float* D, AttnDims d, float scale, const int* doc_start) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char fa_smem[];
    constexpr int LDH = HD + 8, LDO = HD + 4;
    const int T = d.T, H = d.H, Hkv = d.Hkv, G = H / Hkv;
    const int b = blockIdx.z, kh = blockIdx.y, u0 = blockIdx.x * FA_ROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rw = warp * 16;
    // layout: K, V (this block's keys), Q, dY (a query tile) [64][HD+8] bf16; lse, D of the
    // query tile [64] f32; per warp: S^T and dP^T [16][FA_LDS] f32, P^T and dS^T [16][FA_LDP]
    // bf16, out [16][HD+4] f32
    bf16* Ks = (bf16*)fa_smem;
    bf16* Vs = Ks + FA_ROWS * LDH;
    bf16* Qs = Vs + FA_ROWS * LDH;
    bf16* dYs = Qs + FA_COLS * LDH;
    float* LSEs = (float*)(dYs + FA_COLS * LDH);
    float* Ds = LSEs + FA_COLS;
    unsigned char* wbase = (unsigned char*)(Ds + FA_COLS) +
                           (size_t)warp * (2 * 16 * FA_LDS * 4 + 2 * 16 * FA_LDP * 2 + 16 * LDO * 4);
    float* Sw = (float*)wbase;
    float* DPw = Sw + 16 * FA_LDS;
    bf16* PTw = (bf16*)(DPw + 16 * FA_LDS);
    bf16* DSw = PTw + 16 * FA_LDP;
    float* Outw = (float*)(DSw + 16 * FA_LDP);

    const size_t ldq = (size_t)H * HD, ldk = (size_t)Hkv * HD;
    attn_stage_bf16<HD>(Ks, k, ldk, b, kh, u0, T);
    attn_stage_bf16<HD>(Vs, v, ldk, b, kh, u0, T);
    FragC adk[HD / 16], adv[HD / 16];
    #pragma unroll
    for (int j = 0; j < HD / 16; j++) { wmma::fill_fragment(adk[j], 0.0f); wmma::fill_fragment(adv[j], 0.0f); }
    const int ufirst = u0 + rw;   // this warp's first key
    // the document mask (DOC): t sees u iff doc[t] <= u <= t; the query tiles stop at the end of
    // the block's last key's document (doc is non-decreasing: no later query sees its keys)
    const int* doc = doc_start + (size_t)b * T;
    const int tend = DOC ? attn_doc_end(doc, min(u0 + FA_ROWS, T) - 1, T) : T;
    for (int g = 0; g < G; g++) {
        const int h = kh * G + g;
        for (int t0 = (u0 / FA_COLS) * FA_COLS; t0 < tend; t0 += FA_COLS) {
            __syncthreads();   // the previous query tile is no longer read (and K, V are staged)
            attn_stage_bf16<HD>(Qs, q, ldq, b, h, t0, T);
            attn_stage_bf16<HD>(dYs, dy, ldq, b, h, t0, T);
            for (int i = threadIdx.x; i < FA_COLS; i += blockDim.x) {
                const int t = t0 + i;
                LSEs[i] = t < T ? lse[((size_t)b * H + h) * T + t] : 0.0f;
                Ds[i] = t < T ? D[((size_t)b * H + h) * T + t] : 0.0f;
            }
            __syncthreads();
            if (ufirst >= T || t0 + FA_COLS - 1 < ufirst) continue;   // warp-uniform: no query sees these keys
            fa_abt<HD>(Sw, Ks + rw * LDH, Qs);     // S^T = K Q^T
            fa_abt<HD>(DPw, Vs + rw * LDH, dYs);   // dP^T = V dY^T
            __syncwarp();
            // this lane's two query columns (c = lane, lane + 32): their documents' first keys,
            // read once per tile (DOC)
            const int da = DOC && t0 + lane < T ? doc[t0 + lane] : 0;
            const int db = DOC && t0 + lane + 32 < T ? doc[t0 + lane + 32] : 0;
            for (int i = lane; i < 16 * FA_COLS; i += 32) {
                const int r = i / FA_COLS, c = i % FA_COLS, u = ufirst + r, t = t0 + c;
                float p = 0.0f, ds = 0.0f;
                if (t < T && u <= t && (!DOC || (c < 32 ? da : db) <= u)) {
                    p = expf(Sw[r * FA_LDS + c] * scale - LSEs[c]);
                    ds = p * (DPw[r * FA_LDS + c] - Ds[c]);
                }
                PTw[r * FA_LDP + c] = __float2bfloat16_rn(p);
                DSw[r * FA_LDP + c] = __float2bfloat16_rn(ds);
            }
            __syncwarp();
            fa_pm<HD>(adv, PTw, dYs);   // dV += P^T dY
            fa_pm<HD>(adk, DSw, Qs);    // dK += dS^T Q
        }
    }
    #pragma unroll
    for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(Outw + j * 16, adk[j], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        const int r = i / HD, c = i % HD, u = ufirst + r;
        if (u < T) act_st(&dk[((size_t)b * T + u) * ldk + (size_t)kh * HD + c], Outw[r * LDO + c] * scale);
    }
    __syncwarp();
    #pragma unroll
    for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(Outw + j * 16, adv[j], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        const int r = i / HD, c = i % HD, u = ufirst + r;
        if (u < T) act_st(&dv[((size_t)b * T + u) * ldk + (size_t)kh * HD + c], Outw[r * LDO + c]);
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// launches

// Opt in to the kernel's shared memory once per kernel (a static flag per instantiation).
template <typename K>
static void fa_smem_optin(K kernel, size_t bytes, int* done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = 1;
}

// head_dim, the GPU (bf16 tensor cores: sm_80+) and its shared memory per block (the kernels
// take up to 154 KiB: A100, H100, H200 fit; sm_86/89 consumer GPUs with 99 KiB do not)
static void fa_check(const AttnDims& d) {
    if (d.hd != 64 && d.hd != 128)
        cuda_fail(__FILE__, __LINE__, "attn_impl = flash: head_dim must be 64 or 128",
                  "use [train] attn_impl = fused (any head_dim) or cudnn");
    if (d.Hkv < 1 || d.H % d.Hkv != 0)
        cuda_fail(__FILE__, __LINE__, "attention: n_head must be a multiple of n_kv_head", "fix the config");
    static int checked = -1;   // the kernel choice it was checked for
    if (checked == cuda_flash_kernel()) return;
    int dev = 0, major = 0, smem = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    // the largest kernel's shared memory: the WMMA dK/dV kernel, or the mma ones (4 tiles + 512 B)
    size_t need = cuda_flash_kernel() == CUDA_FLASH_WMMA ? fa_dkv_smem<128>() : 4 * (size_t)64 * (128 + 8) * 2 + 512 + 260;
    if (major < 8 || (size_t)smem < need) {
        char msg[200];
        snprintf(msg, sizeof msg, "attn_impl = flash needs sm_80+ and %zu bytes of shared memory per block; this GPU: sm_%d, %d bytes",
                 need, major, smem);
        cuda_fail(__FILE__, __LINE__, msg, "use [train] attn_impl = fused or cudnn on this GPU");
    }
    checked = cuda_flash_kernel();
}

// bf16 activations are staged 16 bytes at a time (attn_stage_bf16, attention.h): the tensors the
// kernels stage (q, k, v, dy) must start 16-byte aligned. Always so for the model's buffers and
// for cudaMalloc's; a test or caller with an offset pointer gets this error, not a fault.
static void fa_check_aligned(const void* p, const char* name) {
    if (sizeof(cact_t) != 2 || ((uintptr_t)p & 15) == 0) return;   // fp32: staged one value at a time
    char msg[160];
    snprintf(msg, sizeof msg, "attn_impl = flash: %s (bf16) is not 16-byte aligned (%p)", name, p);
    cuda_fail(__FILE__, __LINE__, msg, "allocate activations 16-byte aligned, or use [train] attn_impl = fused");
}

template <int HD, bool DOC>
static void fa_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k, const cact_t* v,
                       const cact_t* qkv, AttnDims d, int B, const int* doc) {
    const size_t smem = fa_forward_smem<HD>();
    static int optin = 0;
    fa_smem_optin(flash_forward_kernel<HD, DOC>, smem, &optin);
    dim3 grid((d.T + FA_ROWS - 1) / FA_ROWS, d.H, B);
    flash_forward_kernel<HD, DOC><<<grid, FA_THREADS, smem, cuda_stream>>>(y, yg, lse, q, k, v, qkv, d,
                                                                       1.0f / sqrtf((float)HD), doc);
    CUDA_LAUNCH_CHECK("flash_forward_kernel");
}

template <int HD, bool DOC>
static void fa_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D, const cact_t* q,
                        const cact_t* k, const cact_t* v, const float* lse, AttnDims d, int B, const int* doc) {
    const float scale = 1.0f / sqrtf((float)HD);
    const size_t smem_q = fa_dq_smem<HD>(), smem_kv = fa_dkv_smem<HD>();
    static int optin_q = 0, optin_kv = 0;
    fa_smem_optin(flash_dq_kernel<HD, DOC>, smem_q, &optin_q);
    dim3 gq((d.T + FA_ROWS - 1) / FA_ROWS, d.H, B);
    flash_dq_kernel<HD, DOC><<<gq, FA_THREADS, smem_q, cuda_stream>>>(dq, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("flash_dq_kernel");
    fa_smem_optin(flash_dkv_kernel<HD, DOC>, smem_kv, &optin_kv);
    dim3 gkv((d.T + FA_ROWS - 1) / FA_ROWS, d.Hkv, B);
    flash_dkv_kernel<HD, DOC><<<gkv, FA_THREADS, smem_kv, cuda_stream>>>(dk, dv, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("flash_dkv_kernel");
}

static int flash_kernel = -1;   // CUDA_FLASH_MMA / _WMMA; -1: not read from the environment yet
extern "C" void cuda_set_flash_kernel(int which) { flash_kernel = which; }
extern "C" int cuda_flash_kernel(void) {
    if (flash_kernel < 0) {
        flash_kernel = cuda_env_is("GATEDGPT_FLASH_WMMA", "1") ? CUDA_FLASH_WMMA : CUDA_FLASH_MMA;
    }
    return flash_kernel;
}

void cuda_flash_attention_forward(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                                  const cact_t* v, const cact_t* qkv, AttnDims d, int B, const int* doc) {
    fa_check(d);
    fa_check_aligned(q, "q");
    fa_check_aligned(k, "k");
    fa_check_aligned(v, "v");
    if (cuda_flash_kernel() == CUDA_FLASH_MMA) {
        cuda_mma_attention_forward(y, yg, lse, q, k, v, qkv, d, B, doc);
        return;
    }
    // the document mask has its own instantiations (DOC = true): the causal kernels stay as they were
    if (doc && d.hd == 64) fa_forward<64, true>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else if (doc) fa_forward<128, true>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else if (d.hd == 64) fa_forward<64, false>(y, yg, lse, q, k, v, qkv, d, B, doc);
    else fa_forward<128, false>(y, yg, lse, q, k, v, qkv, d, B, doc);
}

void cuda_flash_attention_backward(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const float* D,
                                   const cact_t* q, const cact_t* k, const cact_t* v, const float* lse,
                                   AttnDims d, int B, const int* doc) {
    fa_check(d);
    fa_check_aligned(q, "q");
    fa_check_aligned(k, "k");
    fa_check_aligned(v, "v");
    fa_check_aligned(dy, "dy");
    if (cuda_flash_kernel() == CUDA_FLASH_MMA) {
        cuda_mma_attention_backward(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
        return;
    }
    if (doc && d.hd == 64) fa_backward<64, true>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else if (doc) fa_backward<128, true>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else if (d.hd == 64) fa_backward<64, false>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
    else fa_backward<128, false>(dq, dk, dv, dy, D, q, k, v, lse, d, B, doc);
}
