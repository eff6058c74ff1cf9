// kernels/cuda/deltanet_chunk.cu: the gated delta rule (kernels/ops.h "Gated delta rule") in its
// chunked (WY / UT) form, forward and backward, for ops_gdn_forward / ops_gdn_backward when
// s->chunk > 0 and dk, dv are 64 or 128 (deltanet.cu runs every other case, and decoding, with
// its recurrent kernels). Almost every FLOP is a GEMM of 64 x dk, 64 x dv or dk x dv operands:
//   - bf16 build (GATEDGPT_ACT_BF16): bf16 operands on tensor cores, mma.sync.m16n8k16 with fp32
//     accumulation, fragments loaded by ldmatrix (the layouts of attention_mma.cu's comment);
//   - fp32 build: the same kernels with fp32 operands and the products summed in fp32 on CUDA
//     cores (gdn_mm's second branch), the exact reference on the GPU.
// The states and every elementwise step are fp32 in both; only GEMM operands are rounded (bf16).
//
// The math, per sequence b, value head h and chunk of L <= C = 64 tokens (kernels/cpu/deltanet.c
// derives the forward; tests/reference/gdn_chunk_check.py checks the backward below against the
// recurrence), S [dk, dv] the state before the chunk, c_i = g_0 + ... + g_i within the chunk,
// Gamma_ij = exp(c_i - c_j) (j <= i), scale = 1 / sqrt(dk):
//   A = strictly_lower(diag(beta) K K^T o Gamma);  Tinv = (I + A)^-1 (forward substitution)
//   W = Tinv diag(beta) V;  Kc = Tinv diag(beta e^c) K;  Vn = W - Kc S
//   O = scale (diag(e^c) Q S + (Q K^T o Gamma o causal) Vn)
//   S <- e^{c_L} S + K^T diag(e^{c_L - c}) Vn          (c_L: the chunk's last token's c)
// Backward, given dO and dS' = dL/dS after the chunk, P = Q K^T o Gamma o causal (incl. the
// diagonal), Qd = diag(e^c) Q, Kd = diag(e^{c_L - c}) K:
//   dVn = scale P^T dO + Kd dS';  dP = scale dO Vn^T (causal);  dKd = Vn dS'^T
//   dQd = scale dO S^T;  dKc = -dVn S^T;  dS_prev = e^{c_L} dS' + scale Qd^T dO - Kc^T dVn
//   dRv = Tinv^T dVn;  dRk = Tinv^T dKc;  dA = -(dRv W^T + dRk Kc^T) (strictly lower)
//   G = dA o diag(beta) Gamma: dK += G K + G^T K;  H = dP o Gamma: dQ += H K, dK += H^T Q
//   dV = diag(beta) dRv;  dK += diag(beta e^c) dRk + diag(e^{c_L - c}) dKd;  dQ += diag(e^c) dQd
//   dbeta_i = dRv_i.v_i + e^{c_i} dRk_i.k_i + sum_{j<i} dA_ij (k_i.k_j) Gamma_ij
//   dc_i = sum_j (dA o A)_ij - sum_j (dA o A)_ji + sum_j (dP o P)_ij - sum_j (dP o P)_ji
//          + beta_i e^{c_i} dRk_i.k_i + Qd_i.dQd_i - Kd_i.dKd_i;
//   dc_{L-1} += sum_j Kd_j.dKd_j + e^{c_L} <S, dS'>;   dg_j = sum_{i >= j} dc_i
//
// Kernels (the split of flash-linear-attention's fla/ops/gated_delta_rule, written from the math
// above): the parts that do not depend on S run in parallel over chunks, the state passes walk
// the chunks in order (forward) or in reverse (backward), in parallel over 64-column slices of S.
//   forward:  gdn_chunk_wy_kernel     (chunks)       A, Tinv, W, Kc               [chunk_scaled_dot_kkt, solve_tril, recompute_w_u]
//             gdn_chunk_state_kernel  (slices, seq.) Vn, S at each chunk start    [chunk_fwd_h]
//             gdn_chunk_out_kernel    (chunks)       O                            [chunk_fwd_o]
//   backward: gdn_chunk_wy_kernel and gdn_chunk_state_kernel again (W, Kc, Tinv, Vn and the
//             states recomputed), then
//             gdn_chunk_dstate_kernel (slices, reverse) dVn, dS' at each chunk   [chunk_bwd_dv_local + bwd_dhu]
//             gdn_chunk_dqk_kernel    (chunks)       dQ, the Q K^T and state parts of dK, dKc, part of dc  [bwd_dqkwg]
//             gdn_chunk_dwy_kernel    (chunks)       dV, dbeta, the WY parts of dK, dc -> dg         [prepare_wy_repr_bwd]
// The per-chunk kernels take a (chunk, key head) each and walk the key head's value heads in
// order: K K^T and Q K^T are computed once for them, and dq, dk of the key head have one writer.
// Blocks of 128 threads (4 warps, each 16 of a chunk's 64 rows, or 32 of the 128 rows of a
// state slice). Operands are staged in shared memory as [rows][cols + 8] tiles (the padding keeps
// ldmatrix free of bank conflicts); every GEMM reads both operands from there (gdn_mm).
// Deterministic: no atomics; each output element has one writer per kernel, dq and dk of a key
// head are written by one block that walks its value heads in order (dqk, then dwy adds its
// terms), sums over tokens run in a fixed order. Rows past T in the last chunk are zeros (g = 0
// there, so c of row 63 is c_L).
// Documents (s->doc_start, [data] doc_mask): every decay factor above masked (Gamma, e^c,
// e^{c_L - c}, e^{c_L}; the section "documents" below), in each kernel's DOC = true instantiation.
//
// Status: builds, not yet run on a GPU (docs/gpu.md); runs on the CUDA emulator (tests/cudaemu)
// in test_gpu_ops (fp32 build) and test_gpu_ops_bf16 (bf16 build).
#include "deltanet.h"
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include "mma_ptx.cuh"   // the tensor-core wrappers (bf16 build)

#define GC CUDA_GDN_CHUNK   // 64 tokens per chunk (kernels/scratch.h)
#define GC_THREADS 128
#define GC_BV 64            // state columns per block of the state passes
#define GC_F (64 * 65)      // floats of an fp32 64 x 65 work tile
static_assert(GC == 64 && GC_THREADS == 128 && GC_BV == 64, "chunk tiling: 4 warps x 16 rows, 64-column state slices");

// The GEMM operand type: bf16 in the bf16 build (tensor cores), fp32 in the fp32 build.
typedef cact_t gop_t;
#ifdef GATEDGPT_ACT_BF16
#define GC_MMA 1
#endif

// ---- the warp GEMM ----------------------------------------------------------------------------
// acc[NT][4] += A (16 rows from m0, KD deep) B (KD deep, 8 NT columns from n0), both in shared
// memory. AT: A(m, k) at A[k lda + m] (A is stored transposed), else A[m lda + k]; BT: B(k, n) at
// B[n ldb + k], else B[k ldb + n]. The accumulator layout is mma's C fragment (lane = 4 g + t):
// acc[j][e] is row m0 + g + 8 (e / 2), column n0 + 8 j + 2 t + e % 2.
// bf16: ldmatrix (.trans where the layout asks) + mma.sync; the A fragment of rows m0..m0+15 from
// A[m][k] is attention_mma.cu's mm_load_a, from A[k][m] the transposed load of the same four 8x8
// matrices (lane l: row k0 + l % 8 + 8 (l / 16), column m0 + 8 ((l / 8) % 2)); B as mm_load_b(t).
// fp32: each lane adds its own accumulator elements' products in k order (fp32 FMA).
template <int NT, int KD, bool AT, bool BT>
__device__ __forceinline__ void gdn_mm(float (*acc)[4], const gop_t* A, int lda, int m0, const gop_t* B, int ldb,
                                       int n0, int lane) {
    static_assert(NT % 2 == 0 && KD % 16 == 0, "gdn_mm: n-tiles in pairs, k in steps of 16");
#if defined(GC_MMA)
    #pragma unroll
    for (int kk = 0; kk < KD; kk += 16) {
        uint32_t a[4];
        if (AT) mma_ldsm4_t(a, A + (size_t)(kk + (lane & 7) + ((lane >> 4) << 3)) * lda + m0 + ((lane >> 3) & 1) * 8);
        else mma_ldsm4(a, A + (size_t)(m0 + (lane & 15)) * lda + kk + (lane >> 4) * 8);
        #pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            const int nb = n0 + np * 16;
            if (BT) mma_ldsm4(b, B + (size_t)(nb + (lane & 7) + ((lane >> 4) << 3)) * ldb + kk + ((lane >> 3) & 1) * 8);
            else mma_ldsm4_t(b, B + (size_t)(kk + (lane & 7) + ((lane >> 3) & 1) * 8) * ldb + nb + (lane >> 4) * 8);
            mma_m16n8k16(acc[2 * np], a, b[0], b[1]);
            mma_m16n8k16(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
#else
    // k outermost (each product's terms in k order, as a sequential sum): per k two values of A
    // (rows r0, r1) and two of B per n-tile, the accumulators stay in registers
    const int r0 = m0 + (lane >> 2), r1 = r0 + 8, c0 = n0 + 2 * (lane & 3);
    #pragma unroll 2
    for (int k = 0; k < KD; k++) {
        const float a0 = AT ? A[(size_t)k * lda + r0] : A[(size_t)r0 * lda + k];
        const float a1 = AT ? A[(size_t)k * lda + r1] : A[(size_t)r1 * lda + k];
        #pragma unroll
        for (int j = 0; j < NT; j++) {
            const int n = c0 + j * 8;
            const float b0 = BT ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
            const float b1 = BT ? B[(size_t)(n + 1) * ldb + k] : B[(size_t)k * ldb + n + 1];
            acc[j][0] += a0 * b0;
            acc[j][1] += a0 * b1;
            acc[j][2] += a1 * b0;
            acc[j][3] += a1 * b1;
        }
    }
#endif
}

template <int NT>
__device__ __forceinline__ void gc_zero(float (*acc)[4]) {
    #pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}
// the sum over the 4 lanes of a quad (the lanes that hold one accumulator row): fixed order
__device__ __forceinline__ float gc_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- staging ------------------------------------------------------------------------------------
// dst[R][D + 8] (operand tile) = src rows 0..R-1 (row stride ld), each times sc and rs[r] (when
// given); rows >= rows_valid are zeros. src fp32 or gop_t (the scratch).
template <int R, int D, class S>
__device__ __forceinline__ void gc_stage(gop_t* dst, const S* src, size_t ld, int rows_valid, const float* rs,
                                         float sc) {
    for (int idx = threadIdx.x; idx < R * D; idx += blockDim.x) {
        const int r = idx / D, c = idx % D;
        float x = 0.0f;
        if (r < rows_valid) {
            x = act_ld(src[(size_t)r * ld + c]) * sc;
            if (rs) x *= rs[r];
        }
        act_st(&dst[r * (D + 8) + c], x);
    }
}

// cs[i] = c_i = g_0 + ... + g_i of the chunk's tokens (n0 + i), g = 0 past its L tokens, summed in
// order as the CPU does; every thread takes part (two barriers)
__device__ __forceinline__ void gc_decays(float* cs, const float* g, int Hv, int h, size_t n0, int L) {
    if (threadIdx.x < GC) cs[threadIdx.x] = (int)threadIdx.x < L ? g[(n0 + threadIdx.x) * Hv + h] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 1; i < GC; i++) cs[i] += cs[i - 1];
    __syncthreads();
}

// ---- documents (OpsGdnShape.doc_start; kernels/cpu/deltanet_chunk.c's comment "Documents") ------
// The state is zeroed before each later document's first token: within a chunk, a mask on the
// decays. lo_i = doc[n0 + i] - t0 is the first token of row i's document relative to the chunk
// (< 0: before it; rows past L: -1, no mask: their operands are zeros):
//   Gamma_ij = 0 where j < lo_i (j before i's document: A, P and Tinv block-diagonal by document);
//   e^{c_i} = 0 where lo_i >= 0 and t0 + lo_i > 0 (i's document begins in this chunk and is not
//   the sequence's first, which starts from state_in: the state before the chunk does not reach i);
//   e^{c_L - c_i} = 0 where i < lo_{L-1} (before the chunk's last document: its writes do not reach
//   the state after the chunk); e^{c_L} is the last row's masked e^{c_i}.
// Every kernel, forward and backward, reads these same masked factors wherever it computes one,
// so the backward's formulas hold as written (the CPU's comment says why). DOC = false: the plain
// factors (the same code as without documents: no read of doc, no register more).
template <bool DOC>
__device__ __forceinline__ int gc_lo(const int* doc, size_t n0, int t0, int i, int L) {
    return DOC && i < L ? doc[n0 + i] - t0 : -1;
}
template <bool DOC>   // Gamma_ij
__device__ __forceinline__ float gc_gam(const float* cs, int i, int j, int lo_i) {
    return DOC && j < lo_i ? 0.0f : expf(cs[i] - cs[j]);
}
template <bool DOC>   // e^{c_i}; e^{c_L} with i = GC - 1 and lo_i = lo_{L-1}
__device__ __forceinline__ float gc_ec(const float* cs, int i, int lo_i, int t0) {
    return DOC && lo_i >= 0 && t0 + lo_i > 0 ? 0.0f : expf(cs[i]);
}
template <bool DOC>   // e^{c_L - c_i} (lo_last = lo_{L-1})
__device__ __forceinline__ float gc_el(const float* cs, int i, int lo_last) {
    return DOC && i < lo_last ? 0.0f : expf(cs[GC - 1] - cs[i]);
}

struct GcDims {
    int B, T, Hk, Hv, NC;   // NC = ceil(T / 64) chunks per sequence
    size_t ldqk, ldv;       // row strides of q, k (dq, dk) and v (dv), floats
    float scale;
};

// ---- shared memory (kernels/scratch.h cuda_gdn_chunk_smem computes the same) ----------------------
// (sizeof(cact_t): gop_t is cact_t, the name scripts/gpu_report.py sizes by the build)
template <int R, int D> __host__ __device__ constexpr size_t gc_tile() { return (size_t)R * (D + 8) * sizeof(cact_t); }
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_wy() {
    return gc_tile<64, DK>() + gc_tile<64, DV>() + 2 * GC_F * 4 + gc_tile<64, 64>() + 3 * 64 * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_state() {
    return 2 * gc_tile<64, DK>() + gc_tile<DK, 64>() + gc_tile<64, 64>() + 2 * 64 * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_out() {
    return gc_tile<64, DK>() + gc_tile<64, (DK > DV ? DK : DV)>() + gc_tile<DK, DV>() + gc_tile<64, 64>() + 2 * 64 * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_dstate() {
    return 2 * gc_tile<64, DK>() + 3 * gc_tile<64, 64>() + gc_tile<DK, 64>() + 3 * 64 * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_dqk_bufs() {   // the S / dS' / Q|K buffer
    return gc_tile<DK, DV>() > 2 * gc_tile<64, DK>() ? gc_tile<DK, DV>() : 2 * gc_tile<64, DK>();
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_dqk_bufo() {   // dO, then the fp32 work tile
    return gc_tile<64, DV>() > GC_F * 4 ? gc_tile<64, DV>() : (size_t)GC_F * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_dqk() {
    return gdn_dqk_bufs<DK, DV>() + gdn_dqk_bufo<DK, DV>() + gc_tile<64, DV>() + 5 * 64 * 4 + 32 * 4;
}
template <int DK, int DV> __host__ __device__ constexpr size_t gdn_smem_dwy() {
    return 2 * gc_tile<64, DK>() + gc_tile<64, 64>() + gc_tile<64, DV>() + gc_tile<64, (DK > DV ? DK : DV)>() + 5 * 64 * 4;
}

// ---------------------------------------------------------------------------------------------
// WY: grid (NC, Hk, B), the key head's value heads in order (K K^T is theirs in common: computed
// once, kept in registers). Per value head: A from K K^T, Tinv by forward substitution (fp32), then
// W = Tinv (beta V) and Kc = Tinv (beta e^c K); Tinv itself when tinv is given (the
// backward).
//   shared: Ks [64][DK+8] (K, then beta e^c K), Vs [64][DV+8], Ts [64][72] (operands) | Af, Tf
//   [64][65], cs, bs, ec (fp32)
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_wy_kernel(GcDims d, const float* k, const float* v, const float* g, const float* beta,
                                    gop_t* W, gop_t* Kc, gop_t* tinv, const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    gop_t* Ks = (gop_t*)gc_smem;
    gop_t* Vs = Ks + 64 * (DK + 8);
    gop_t* Ts = Vs + 64 * (DV + 8);
    float* Af = (float*)(Ts + 64 * 72);
    float* Tf = Af + GC_F;
    float *cs = Tf + GC_F, *bs = cs + 64, *ec = bs + 64;
    const int c = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, rep = d.Hv / d.Hk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    const int t0 = c * GC, L = min(GC, d.T - t0);
    const size_t n0 = (size_t)b * d.T + t0;
    const float* kr = k + n0 * d.ldqk + (size_t)kh * DK;
    const int lo0 = gc_lo<DOC>(doc, n0, t0, m0 + g4, L), lo1 = gc_lo<DOC>(doc, n0, t0, m0 + g4 + 8, L);   // the rows' documents

    gc_stage<64, DK>(Ks, kr, d.ldqk, L, (const float*)0, 1.0f);
    __syncthreads();
    float kk[8][4];   // K K^T, rows m0 + g4 (+ 8)
    gc_zero<8>(kk);
    gdn_mm<8, DK, false, true>(kk, Ks, DK + 8, m0, Ks, DK + 8, 0, lane);
    for (int gi = 0; gi < rep; gi++) {
        const int h = kh * rep + gi;
        const size_t cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        if (tid < GC) bs[tid] = tid < L ? beta[(n0 + tid) * d.Hv + h] : 0.0f;
        gc_decays(cs, g, d.Hv, h, n0, L);   // its barriers: K K^T read by every warp, bs visible
        if (tid < GC) ec[tid] = bs[tid] * gc_ec<DOC>(cs, tid, gc_lo<DOC>(doc, n0, t0, tid, L), t0);   // beta e^c: Kc's row scale
        // A_ij = beta_i (k_i . k_j) Gamma_ij, j < i
        #pragma unroll
        for (int j = 0; j < 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = m0 + g4 + ((e >> 1) << 3), jj = j * 8 + 2 * t4 + (e & 1);
                Af[i * 65 + jj] = jj < i ? bs[i] * kk[j][e] * gc_gam<DOC>(cs, i, jj, e >> 1 ? lo1 : lo0) : 0.0f;
            }
        gc_stage<64, DV>(Vs, v + n0 * d.ldv + (size_t)h * DV, d.ldv, L, bs, 1.0f);
        __syncthreads();
        // Tinv = (I + A)^-1, unit lower triangular: column m on its own (thread m), rows in order:
        //   T_mm = 1;  T_im = -sum_{j = m}^{i-1} A_ij T_jm  (i > m)
        if (tid < GC) {
            const int m = tid;
            for (int i = 0; i < m; i++) Tf[i * 65 + m] = 0.0f;
            Tf[m * 65 + m] = 1.0f;
            for (int i = m + 1; i < GC; i++) {
                float s = 0.0f;
                for (int j = m; j < i; j++) s += Af[i * 65 + j] * Tf[j * 65 + m];
                Tf[i * 65 + m] = -s;
            }
        }
        __syncthreads();
        for (int idx = tid; idx < GC * GC; idx += blockDim.x) act_st(&Ts[(idx >> 6) * 72 + (idx & 63)], Tf[(idx >> 6) * 65 + (idx & 63)]);
        gc_stage<64, DK>(Ks, kr, d.ldqk, L, ec, 1.0f);   // beta e^c k, rounded once
        __syncthreads();
        {   // W = Tinv (beta V), all 64 rows
            float acc[DV / 8][4];
            gc_zero<DV / 8>(acc);
            gdn_mm<DV / 8, 64, false, false>(acc, Ts, 72, m0, Vs, DV + 8, 0, lane);
            gop_t* Wc = W + cidx * GC * DV;
            #pragma unroll
            for (int j = 0; j < DV / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) act_st(&Wc[(m0 + g4 + ((e >> 1) << 3)) * DV + j * 8 + 2 * t4 + (e & 1)], acc[j][e]);
        }
        {   // Kc = Tinv (beta e^c K)
            float acc[DK / 8][4];
            gc_zero<DK / 8>(acc);
            gdn_mm<DK / 8, 64, false, false>(acc, Ts, 72, m0, Ks, DK + 8, 0, lane);
            gop_t* Kcc = Kc + cidx * GC * DK;
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) act_st(&Kcc[(m0 + g4 + ((e >> 1) << 3)) * DK + j * 8 + 2 * t4 + (e & 1)], acc[j][e]);
        }
        if (tinv)
            for (int idx = tid; idx < GC * GC; idx += blockDim.x) tinv[cidx * GC * GC + idx] = Ts[(idx >> 6) * 72 + (idx & 63)];
        __syncthreads();   // the next value head restages Vs, Ks, Ts
    }
}

// ---------------------------------------------------------------------------------------------
// The state pass: grid (DV/64, Hv, B); the block's 64 columns of S [DK, 64] in registers (fp32:
// warp w holds rows 16 (w MT + mt) .. +15, MT = DK/64 m-tiles), the chunks in order. Per chunk:
// S (rounded) to shared memory and to sh (the state before the chunk), Vn = W - Kc S (to vn),
// S <- e^{c_L} S + Kd^T Vn. state_in (or zeros) in, state_out (when given) out, fp32.
//   shared: Kcs [64][DK+8], Kds [64][DK+8], Ss [DK][72], Vns [64][72] | cs, el
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_state_kernel(GcDims d, const float* k, const float* g, const gop_t* W, const gop_t* Kc,
                                       gop_t* Vn, gop_t* Sh, const float* state_in, float* state_out, const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    constexpr int MT = DK / 64;
    gop_t* Kcs = (gop_t*)gc_smem;
    gop_t* Kds = Kcs + 64 * (DK + 8);
    gop_t* Ss = Kds + 64 * (DK + 8);
    gop_t* Vns = Ss + DK * 72;
    float* cs = (float*)(Vns + 64 * 72);
    float* el = cs + 64;
    const int j0 = blockIdx.x * GC_BV, h = blockIdx.y, b = blockIdx.z, kh = h / (d.Hv / d.Hk);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    const size_t sbase = ((size_t)b * d.Hv + h) * DK * DV;
    float S[MT][8][4];
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
        #pragma unroll
        for (int j = 0; j < 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = (warp * MT + mt) * 16 + g4 + ((e >> 1) << 3), cc = j0 + j * 8 + 2 * t4 + (e & 1);
                S[mt][j][e] = state_in ? state_in[sbase + (size_t)r * DV + cc] : 0.0f;
            }
    for (int c = 0; c < d.NC; c++) {
        const int t0 = c * GC, L = min(GC, d.T - t0);
        const size_t n0 = (size_t)b * d.T + t0, cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        gop_t* shc = Sh + cidx * DK * DV;
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = (warp * MT + mt) * 16 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    act_st(&Ss[r * 72 + cc], S[mt][j][e]);
                    act_st(&shc[(size_t)r * DV + j0 + cc], S[mt][j][e]);
                }
        gc_decays(cs, g, d.Hv, h, n0, L);
        const int lol = gc_lo<DOC>(doc, n0, t0, L - 1, L);   // the chunk's last document
        if (tid < GC) el[tid] = gc_el<DOC>(cs, tid, lol);
        gc_stage<64, DK>(Kcs, Kc + cidx * GC * DK, DK, GC, (const float*)0, 1.0f);
        __syncthreads();
        gc_stage<64, DK>(Kds, k + n0 * d.ldqk + (size_t)kh * DK, d.ldqk, L, el, 1.0f);   // e^{c_L - c} k
        {   // Vn = W - Kc S, as -( -W + Kc S)
            float acc[8][4];
            const gop_t* Wc = W + cidx * GC * DV;
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] = -act_ld(Wc[(m0 + g4 + ((e >> 1) << 3)) * DV + j0 + j * 8 + 2 * t4 + (e & 1)]);
            gdn_mm<8, DK, false, false>(acc, Kcs, DK + 8, m0, Ss, 72, 0, lane);
            gop_t* vnc = Vn + cidx * GC * DV;
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    act_st(&Vns[r * 72 + cc], -acc[j][e]);
                    act_st(&vnc[(size_t)r * DV + j0 + cc], -acc[j][e]);
                }
        }
        __syncthreads();
        // S <- e^{c_L} S + Kd^T Vn  (the inter-chunk decay, then the chunk's writes)
        const float eL = gc_ec<DOC>(cs, GC - 1, lol, t0);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) S[mt][j][e] *= eL;
            gdn_mm<8, 64, true, false>(S[mt], Kds, DK + 8, (warp * MT + mt) * 16, Vns, 72, 0, lane);
        }
        __syncthreads();   // the next chunk restages Ss, Kcs, Kds, Vns
    }
    if (state_out)
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = (warp * MT + mt) * 16 + g4 + ((e >> 1) << 3), cc = j0 + j * 8 + 2 * t4 + (e & 1);
                    state_out[sbase + (size_t)r * DV + cc] = S[mt][j][e];
                }
}

// ---------------------------------------------------------------------------------------------
// Output: grid (NC, Hk, B), the key head's value heads in order (Q K^T computed once, kept in
// registers). Per value head: P = Q K^T o Gamma o causal; O = scale (diag(e^c) Q S + P Vn).
//   shared: Qs [64][DK+8], KVs [64][max+8] (K, then Vn), Ss [DK][DV+8], Ps [64][72] | cs, ec
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_out_kernel(GcDims d, const float* q, const float* k, const float* g, const gop_t* Vn,
                                     const gop_t* Sh, float* o, const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    constexpr int MX = DK > DV ? DK : DV;
    gop_t* Qs = (gop_t*)gc_smem;
    gop_t* KVs = Qs + 64 * (DK + 8);
    gop_t* Ss = KVs + 64 * (MX + 8);
    gop_t* Ps = Ss + DK * (DV + 8);
    float* cs = (float*)(Ps + 64 * 72);
    float* ec = cs + 64;
    const int c = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, rep = d.Hv / d.Hk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    const int t0 = c * GC, L = min(GC, d.T - t0);
    const size_t n0 = (size_t)b * d.T + t0;
    const int lo0 = gc_lo<DOC>(doc, n0, t0, m0 + g4, L), lo1 = gc_lo<DOC>(doc, n0, t0, m0 + g4 + 8, L);   // the rows' documents

    gc_stage<64, DK>(Qs, q + n0 * d.ldqk + (size_t)kh * DK, d.ldqk, L, (const float*)0, 1.0f);
    gc_stage<64, DK>(KVs, k + n0 * d.ldqk + (size_t)kh * DK, d.ldqk, L, (const float*)0, 1.0f);
    __syncthreads();
    float qk[8][4];   // Q K^T, rows m0 + g4 (+ 8)
    gc_zero<8>(qk);
    gdn_mm<8, DK, false, true>(qk, Qs, DK + 8, m0, KVs, DK + 8, 0, lane);
    for (int gi = 0; gi < rep; gi++) {
        const int h = kh * rep + gi;
        const size_t cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        gc_decays(cs, g, d.Hv, h, n0, L);   // its barriers: K read by every warp
        if (tid < GC) ec[tid] = gc_ec<DOC>(cs, tid, gc_lo<DOC>(doc, n0, t0, tid, L), t0);
        #pragma unroll
        for (int j = 0; j < 8; j++)   // P
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = m0 + g4 + ((e >> 1) << 3), jj = j * 8 + 2 * t4 + (e & 1);
                act_st(&Ps[i * 72 + jj], jj <= i ? qk[j][e] * gc_gam<DOC>(cs, i, jj, e >> 1 ? lo1 : lo0) : 0.0f);
            }
        gc_stage<DK, DV>(Ss, Sh + cidx * DK * DV, DV, DK, (const float*)0, 1.0f);
        gc_stage<64, DV>(KVs, Vn + cidx * GC * DV, DV, GC, (const float*)0, 1.0f);
        __syncthreads();
        float acc[DV / 8][4];
        gc_zero<DV / 8>(acc);
        gdn_mm<DV / 8, DK, false, false>(acc, Qs, DK + 8, m0, Ss, DV + 8, 0, lane);   // Q S
        #pragma unroll
        for (int j = 0; j < DV / 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] *= ec[m0 + g4 + ((e >> 1) << 3)];
        gdn_mm<DV / 8, 64, false, false>(acc, Ps, 72, m0, KVs, DV + 8, 0, lane);   // + P Vn
        #pragma unroll
        for (int j = 0; j < DV / 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + g4 + ((e >> 1) << 3);
                if (r < L) o[((n0 + r) * d.Hv + h) * DV + j * 8 + 2 * t4 + (e & 1)] = acc[j][e] * d.scale;
            }
        __syncthreads();   // the next value head restages Ss, KVs, Ps
    }
}

// ---------------------------------------------------------------------------------------------
// The reverse state pass: grid (DV/64, Hv, B); dS' [DK, 64 columns] in registers (fp32), zeros
// after the last chunk, the chunks in reverse. Per chunk: dS' (rounded) to shared memory and to
// dsh; P^T; dVn = P^T (scale dO) + Kd dS' (to dvn); dS' <- e^{c_L} dS' + Qd^T (scale dO) - Kc^T dVn.
//   shared: Qs [64][DK+8] (Q, then Qd), Ks [64][DK+8] (K, Kd, then Kc), PTs, dOs, dVns [64][72],
//   dSs [DK][72] | cs, ec, el
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_dstate_kernel(GcDims d, const float* q, const float* k, const float* g, const float* dout,
                                        const gop_t* Kc, gop_t* dVn, gop_t* dSh, const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    constexpr int MT = DK / 64;
    gop_t* Qs = (gop_t*)gc_smem;
    gop_t* Ks = Qs + 64 * (DK + 8);
    gop_t* PTs = Ks + 64 * (DK + 8);
    gop_t* dOs = PTs + 64 * 72;
    gop_t* dVns = dOs + 64 * 72;
    gop_t* dSs = dVns + 64 * 72;
    float* cs = (float*)(dSs + DK * 72);
    float *ec = cs + 64, *el = ec + 64;
    const int j0 = blockIdx.x * GC_BV, h = blockIdx.y, b = blockIdx.z, kh = h / (d.Hv / d.Hk);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    float dS[MT][8][4];
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) gc_zero<8>(dS[mt]);
    for (int c = d.NC - 1; c >= 0; c--) {
        const int t0 = c * GC, L = min(GC, d.T - t0);
        const size_t n0 = (size_t)b * d.T + t0, cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        const float* qr = q + n0 * d.ldqk + (size_t)kh * DK;
        const float* kr = k + n0 * d.ldqk + (size_t)kh * DK;
        gop_t* dshc = dSh + cidx * DK * DV;
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = (warp * MT + mt) * 16 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    act_st(&dSs[r * 72 + cc], dS[mt][j][e]);
                    act_st(&dshc[(size_t)r * DV + j0 + cc], dS[mt][j][e]);
                }
        gc_decays(cs, g, d.Hv, h, n0, L);
        const int lol = gc_lo<DOC>(doc, n0, t0, L - 1, L);   // the chunk's last document
        if (tid < GC) {
            ec[tid] = gc_ec<DOC>(cs, tid, gc_lo<DOC>(doc, n0, t0, tid, L), t0);
            el[tid] = gc_el<DOC>(cs, tid, lol);
        }
        gc_stage<64, DK>(Qs, qr, d.ldqk, L, (const float*)0, 1.0f);
        gc_stage<64, DK>(Ks, kr, d.ldqk, L, (const float*)0, 1.0f);
        gc_stage<64, 64>(dOs, dout + (n0 * d.Hv + h) * DV + j0, (size_t)d.Hv * DV, L, (const float*)0, d.scale);
        __syncthreads();
        {   // P^T: rows keys j, columns queries i >= j
            float acc[8][4];
            gc_zero<8>(acc);
            gdn_mm<8, DK, false, true>(acc, Ks, DK + 8, m0, Qs, DK + 8, 0, lane);
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int jk = m0 + g4 + ((e >> 1) << 3), iq = j * 8 + 2 * t4 + (e & 1);
                    act_st(&PTs[jk * 72 + iq], iq >= jk ? acc[j][e] * gc_gam<DOC>(cs, iq, jk, gc_lo<DOC>(doc, n0, t0, iq, L)) : 0.0f);
                }
        }
        __syncthreads();
        gc_stage<64, DK>(Qs, qr, d.ldqk, L, ec, 1.0f);   // Qd = e^c q
        gc_stage<64, DK>(Ks, kr, d.ldqk, L, el, 1.0f);   // Kd = e^{c_L - c} k
        __syncthreads();
        {   // dVn = P^T (scale dO) + Kd dS'
            float acc[8][4];
            gc_zero<8>(acc);
            gdn_mm<8, 64, false, false>(acc, PTs, 72, m0, dOs, 72, 0, lane);
            gdn_mm<8, DK, false, false>(acc, Ks, DK + 8, m0, dSs, 72, 0, lane);
            gop_t* dvc = dVn + cidx * GC * DV;
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    act_st(&dVns[r * 72 + cc], acc[j][e]);
                    act_st(&dvc[(size_t)r * DV + j0 + cc], acc[j][e]);
                }
        }
        // dS_prev = e^{c_L} dS' + Qd^T (scale dO) - Kc^T dVn
        const float eL = gc_ec<DOC>(cs, GC - 1, lol, t0);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) dS[mt][j][e] *= eL;
            gdn_mm<8, 64, true, false>(dS[mt], Qs, DK + 8, (warp * MT + mt) * 16, dOs, 72, 0, lane);
        }
        __syncthreads();   // Kd read by every warp, dVn complete
        gc_stage<64, DK>(Ks, Kc + cidx * GC * DK, DK, GC, (const float*)0, 1.0f);
        __syncthreads();
        #pragma unroll
        for (int mt = 0; mt < MT; mt++) {   // -( -dS + Kc^T dVn)
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) dS[mt][j][e] = -dS[mt][j][e];
            gdn_mm<8, 64, true, false>(dS[mt], Ks, DK + 8, (warp * MT + mt) * 16, dVns, 72, 0, lane);
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) dS[mt][j][e] = -dS[mt][j][e];
        }
        __syncthreads();   // the next chunk restages every tile
    }
}

// ---------------------------------------------------------------------------------------------
// dQ, dK (the Q K^T and state parts), dKc, part of dc: grid (NC, Hk, B), the key head's value
// heads in order; the first writes dq, dk (=), the others add (one writer per element: a thread
// owns the same fragment positions in every [64, DK] product). Per value head:
//   a. dQd = (scale dO) S^T:  dq (=/+=) e^c dQd;  dc += q . (e^c dQd);  <S, dS'>
//   b. dKc = -dVn S^T (to dkc)
//   c. dKd = Vn dS'^T:  dk (=/+=) e^{c_L - c} dKd;  r = k . (e^{c_L - c} dKd): dc -= r
//   d. P = Q K^T o Gamma, dP = (scale dO) Vn^T, H = dP o Gamma (causal);  dc += rows - columns of dP o P
//   e. dq += H K;  dk += H^T Q
//   f. dc_{L-1} += sum r + e^{c_L} <S, dS'>  (to dc)
//   shared: bufS (S, dS', then Q | K), bufO (scale dO, then the fp32 tile E), bufV (dVn, Vn, then
//   H) | cs, ec, el, dcs, rs, red[32]
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_dqk_kernel(GcDims d, const float* q, const float* k, const float* g, const float* dout,
                                     const gop_t* Sh, const gop_t* dSh, const gop_t* Vn, const gop_t* dVn, gop_t* dKc,
                                     float* dcp, float* dq, float* dk, const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    gop_t* bufS = (gop_t*)gc_smem;
    unsigned char* bufO_raw = gc_smem + gdn_dqk_bufs<DK, DV>();
    gop_t* bufO = (gop_t*)bufO_raw;
    float* Ef = (float*)bufO_raw;
    gop_t* bufV = (gop_t*)(bufO_raw + gdn_dqk_bufo<DK, DV>());
    float* cs = (float*)(bufV + 64 * (DV + 8));
    float *ec = cs + 64, *el = ec + 64, *dcs = el + 64, *rs = dcs + 64, *red = rs + 64;
    gop_t* Qs = bufS;
    gop_t* Ks = bufS + 64 * (DK + 8);
    gop_t* Hs = bufV;
    const int c = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, rep = d.Hv / d.Hk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    const int t0 = c * GC, L = min(GC, d.T - t0);
    const size_t n0 = (size_t)b * d.T + t0;
    const float* qr = q + n0 * d.ldqk + (size_t)kh * DK;
    const float* kr = k + n0 * d.ldqk + (size_t)kh * DK;
    float* dqr = dq + n0 * d.ldqk + (size_t)kh * DK;
    float* dkr = dk + n0 * d.ldqk + (size_t)kh * DK;
    const int lo0 = gc_lo<DOC>(doc, n0, t0, m0 + g4, L), lo1 = gc_lo<DOC>(doc, n0, t0, m0 + g4 + 8, L);   // the rows' documents
    const int lol = gc_lo<DOC>(doc, n0, t0, L - 1, L);                                                    // the last one's
    for (int gi = 0; gi < rep; gi++) {
        const int h = kh * rep + gi, first = gi == 0;
        const size_t cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        const gop_t* dshc = dSh + cidx * DK * DV;
        if (tid < GC) { dcs[tid] = 0.0f; rs[tid] = 0.0f; }
        gc_decays(cs, g, d.Hv, h, n0, L);
        if (tid < GC) {
            ec[tid] = gc_ec<DOC>(cs, tid, gc_lo<DOC>(doc, n0, t0, tid, L), t0);
            el[tid] = gc_el<DOC>(cs, tid, lol);
        }
        gc_stage<64, DV>(bufO, dout + (n0 * d.Hv + h) * DV, (size_t)d.Hv * DV, L, (const float*)0, d.scale);
        gc_stage<DK, DV>(bufS, Sh + cidx * DK * DV, DV, DK, (const float*)0, 1.0f);
        gc_stage<64, DV>(bufV, dVn + cidx * GC * DV, DV, GC, (const float*)0, 1.0f);
        __syncthreads();
        // <S, dS'> (the staged S, rounded like every operand; dS' from dsh)
        float sp = 0.0f;
        for (int idx = tid; idx < DK * DV; idx += blockDim.x)
            sp += act_ld(bufS[(idx / DV) * (DV + 8) + idx % DV]) * act_ld(dshc[idx]);
        const float sds = block_sum(sp, red);
        float acc[DK / 8][4];
        // a. dQd
        gc_zero<DK / 8>(acc);
        gdn_mm<DK / 8, DV, false, true>(acc, bufO, DV + 8, m0, bufS, DV + 8, 0, lane);
        {
            float p0 = 0.0f, p1 = 0.0f;
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    if (r < L) {
                        const float x = ec[r] * acc[j][e];
                        float* p = &dqr[(size_t)r * d.ldqk + cc];
                        *p = first ? x : *p + x;
                        if (e < 2) p0 += qr[(size_t)r * d.ldqk + cc] * x;
                        else p1 += qr[(size_t)r * d.ldqk + cc] * x;
                    }
                }
            p0 = gc_quad_sum(p0);
            p1 = gc_quad_sum(p1);
            if (t4 == 0) { dcs[m0 + g4] += p0; dcs[m0 + g4 + 8] += p1; }
        }
        // b. dKc = -dVn S^T
        gc_zero<DK / 8>(acc);
        gdn_mm<DK / 8, DV, false, true>(acc, bufV, DV + 8, m0, bufS, DV + 8, 0, lane);
        {
            gop_t* dkcc = dKc + cidx * GC * DK;
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    act_st(&dkcc[(size_t)(m0 + g4 + ((e >> 1) << 3)) * DK + j * 8 + 2 * t4 + (e & 1)], -acc[j][e]);
        }
        __syncthreads();
        // c. dKd = Vn dS'^T
        gc_stage<DK, DV>(bufS, dshc, DV, DK, (const float*)0, 1.0f);
        gc_stage<64, DV>(bufV, Vn + cidx * GC * DV, DV, GC, (const float*)0, 1.0f);
        __syncthreads();
        gc_zero<DK / 8>(acc);
        gdn_mm<DK / 8, DV, false, true>(acc, bufV, DV + 8, m0, bufS, DV + 8, 0, lane);
        {
            float p0 = 0.0f, p1 = 0.0f;
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    if (r < L) {
                        const float x = el[r] * acc[j][e];
                        float* p = &dkr[(size_t)r * d.ldqk + cc];
                        *p = first ? x : *p + x;
                        if (e < 2) p0 += kr[(size_t)r * d.ldqk + cc] * x;
                        else p1 += kr[(size_t)r * d.ldqk + cc] * x;
                    }
                }
            p0 = gc_quad_sum(p0);
            p1 = gc_quad_sum(p1);
            if (t4 == 0) {
                rs[m0 + g4] = p0; dcs[m0 + g4] -= p0;
                rs[m0 + g4 + 8] = p1; dcs[m0 + g4 + 8] -= p1;
            }
        }
        __syncthreads();
        // d. P, dP, H; E = dP o P
        gc_stage<64, DK>(Qs, qr, d.ldqk, L, (const float*)0, 1.0f);
        gc_stage<64, DK>(Ks, kr, d.ldqk, L, (const float*)0, 1.0f);
        __syncthreads();
        {
            float ap[8][4], ad[8][4];
            gc_zero<8>(ap);
            gc_zero<8>(ad);
            gdn_mm<8, DK, false, true>(ap, Qs, DK + 8, m0, Ks, DK + 8, 0, lane);
            gdn_mm<8, DV, false, true>(ad, bufO, DV + 8, m0, bufV, DV + 8, 0, lane);
            __syncthreads();   // dO and Vn read by every warp: their buffers take E and H
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = m0 + g4 + ((e >> 1) << 3), jj = j * 8 + 2 * t4 + (e & 1);
                    const float gm = (jj <= i && i < L) ? gc_gam<DOC>(cs, i, jj, e >> 1 ? lo1 : lo0) : 0.0f;
                    act_st(&Hs[i * 72 + jj], ad[j][e] * gm);
                    Ef[i * 65 + jj] = ad[j][e] * (ap[j][e] * gm);
                }
        }
        __syncthreads();
        if (tid < GC) {   // row sums minus column sums, each in order
            float rsum = 0.0f, csum = 0.0f;
            for (int j = 0; j < GC; j++) { rsum += Ef[tid * 65 + j]; csum += Ef[j * 65 + tid]; }
            dcs[tid] += rsum - csum;
        }
        // e. dq += H K;  dk += H^T Q
        gc_zero<DK / 8>(acc);
        gdn_mm<DK / 8, 64, false, false>(acc, Hs, 72, m0, Ks, DK + 8, 0, lane);
        #pragma unroll
        for (int j = 0; j < DK / 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + g4 + ((e >> 1) << 3);
                if (r < L) dqr[(size_t)r * d.ldqk + j * 8 + 2 * t4 + (e & 1)] += acc[j][e];
            }
        gc_zero<DK / 8>(acc);
        gdn_mm<DK / 8, 64, true, false>(acc, Hs, 72, m0, Qs, DK + 8, 0, lane);
        #pragma unroll
        for (int j = 0; j < DK / 8; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + g4 + ((e >> 1) << 3);
                if (r < L) dkr[(size_t)r * d.ldqk + j * 8 + 2 * t4 + (e & 1)] += acc[j][e];
            }
        __syncthreads();   // dcs final
        // f. the last token's extra terms, then dc's partial to dcp
        if (tid == 0) {
            float sr = 0.0f;
            for (int i = 0; i < L; i++) sr += rs[i];
            dcs[L - 1] += sr + gc_ec<DOC>(cs, GC - 1, lol, t0) * sds;   // e^{c_L} <S, dS'>
        }
        __syncthreads();
        if (tid < GC) dcp[cidx * GC + tid] = dcs[tid];
        __syncthreads();   // the next value head restages every buffer
    }
}

// ---------------------------------------------------------------------------------------------
// The WY part: grid (NC, Hk, B), the key head's value heads in order (after gdn_chunk_dqk_kernel:
// dk +=). Per value head:
//   a. dRv = Tinv^T dVn:  dv (=) beta dRv;  dbeta += dRv . v
//   b. dRk = Tinv^T dKc:  dk += beta e^c dRk;  x = e^c dRk . k: dbeta += x, dc += beta x
//   c. dA = -(dRv W^T + dRk Kc^T) (strictly lower), K K^T:  G = dA o beta Gamma;
//      dbeta += rows of dA o K K^T o Gamma;  dc += rows - columns of dA o A
//   d. dk += G K + G^T K
//   e. dg = the reverse cumulative sum of dc in the chunk;  dbeta (=)
//   shared: Ks [64][DK+8] (K, all heads), Ts [64][72] (Tinv, then G), bufA [64][DV+8] (dVn, then
//   dRv), bufB [64][DK+8] (dKc, then dRk), bufWK [64][max+8] (W, then Kc); E (fp32 [64][65])
//   over bufA..bufB | cs, bs, ec, dcs, dbs
template <int DK, int DV, bool DOC>
__global__ void gdn_chunk_dwy_kernel(GcDims d, const float* k, const float* v, const float* g, const float* beta,
                                     const gop_t* tinv, const gop_t* W, const gop_t* Kc, const gop_t* dVn,
                                     const gop_t* dKc, const float* dcp, float* dk, float* dv, float* dg, float* dbeta,
                                     const int* doc) {
    extern __shared__ __align__(128) unsigned char gc_smem[];
    constexpr int MX = DK > DV ? DK : DV;
    gop_t* Ks = (gop_t*)gc_smem;
    gop_t* bufA = Ks + 64 * (DK + 8);
    gop_t* bufB = bufA + 64 * (DV + 8);
    gop_t* Ts = bufB + 64 * (DK + 8);
    gop_t* bufWK = Ts + 64 * 72;
    float* Ef = (float*)bufA;
    float* cs = (float*)(bufWK + 64 * (MX + 8));
    float *bs = cs + 64, *ec = bs + 64, *dcs = ec + 64, *dbs = dcs + 64;
    const int c = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, rep = d.Hv / d.Hk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3, m0 = warp * 16;
    const int t0 = c * GC, L = min(GC, d.T - t0);
    const size_t n0 = (size_t)b * d.T + t0;
    const float* kr = k + n0 * d.ldqk + (size_t)kh * DK;
    float* dkr = dk + n0 * d.ldqk + (size_t)kh * DK;
    const int lo0 = gc_lo<DOC>(doc, n0, t0, m0 + g4, L), lo1 = gc_lo<DOC>(doc, n0, t0, m0 + g4 + 8, L);   // the rows' documents
    gc_stage<64, DK>(Ks, kr, d.ldqk, L, (const float*)0, 1.0f);
    for (int gi = 0; gi < rep; gi++) {
        const int h = kh * rep + gi;
        const size_t cidx = ((size_t)b * d.Hv + h) * d.NC + c;
        const float* vr = v + n0 * d.ldv + (size_t)h * DV;
        if (tid < GC) {
            bs[tid] = tid < L ? beta[(n0 + tid) * d.Hv + h] : 0.0f;
            dcs[tid] = dcp[cidx * GC + tid];
            dbs[tid] = 0.0f;
        }
        gc_decays(cs, g, d.Hv, h, n0, L);
        if (tid < GC) ec[tid] = gc_ec<DOC>(cs, tid, gc_lo<DOC>(doc, n0, t0, tid, L), t0);
        gc_stage<64, 64>(Ts, tinv + cidx * GC * GC, GC, GC, (const float*)0, 1.0f);
        gc_stage<64, DV>(bufA, dVn + cidx * GC * DV, DV, GC, (const float*)0, 1.0f);
        gc_stage<64, DK>(bufB, dKc + cidx * GC * DK, DK, GC, (const float*)0, 1.0f);
        gc_stage<64, DV>(bufWK, W + cidx * GC * DV, DV, GC, (const float*)0, 1.0f);
        __syncthreads();
        {   // a. dRv
            float acc[DV / 8][4];
            gc_zero<DV / 8>(acc);
            gdn_mm<DV / 8, 64, true, false>(acc, Ts, 72, m0, bufA, DV + 8, 0, lane);
            float p0 = 0.0f, p1 = 0.0f;
            #pragma unroll
            for (int j = 0; j < DV / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    if (r < L) {
                        dv[(n0 + r) * d.ldv + (size_t)h * DV + cc] = bs[r] * acc[j][e];
                        if (e < 2) p0 += acc[j][e] * vr[(size_t)r * d.ldv + cc];
                        else p1 += acc[j][e] * vr[(size_t)r * d.ldv + cc];
                    }
                }
            p0 = gc_quad_sum(p0);
            p1 = gc_quad_sum(p1);
            if (t4 == 0) { dbs[m0 + g4] += p0; dbs[m0 + g4 + 8] += p1; }
            __syncthreads();   // dVn read by every warp
            #pragma unroll
            for (int j = 0; j < DV / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    act_st(&bufA[(m0 + g4 + ((e >> 1) << 3)) * (DV + 8) + j * 8 + 2 * t4 + (e & 1)], acc[j][e]);
        }
        {   // b. dRk
            float acc[DK / 8][4];
            gc_zero<DK / 8>(acc);
            gdn_mm<DK / 8, 64, true, false>(acc, Ts, 72, m0, bufB, DK + 8, 0, lane);
            float p0 = 0.0f, p1 = 0.0f;
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3), cc = j * 8 + 2 * t4 + (e & 1);
                    if (r < L) {
                        dkr[(size_t)r * d.ldqk + cc] += bs[r] * ec[r] * acc[j][e];
                        if (e < 2) p0 += acc[j][e] * kr[(size_t)r * d.ldqk + cc];
                        else p1 += acc[j][e] * kr[(size_t)r * d.ldqk + cc];
                    }
                }
            p0 = gc_quad_sum(p0);
            p1 = gc_quad_sum(p1);
            if (t4 == 0) {
                const int r0 = m0 + g4, r1 = r0 + 8;
                dbs[r0] += ec[r0] * p0; dcs[r0] += bs[r0] * ec[r0] * p0;
                dbs[r1] += ec[r1] * p1; dcs[r1] += bs[r1] * ec[r1] * p1;
            }
            __syncthreads();   // dKc read by every warp
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    act_st(&bufB[(m0 + g4 + ((e >> 1) << 3)) * (DK + 8) + j * 8 + 2 * t4 + (e & 1)], acc[j][e]);
        }
        __syncthreads();
        {   // c. dA, K K^T, G, E
            float aa[8][4], kk[8][4];
            gc_zero<8>(aa);
            gdn_mm<8, DV, false, true>(aa, bufA, DV + 8, m0, bufWK, DV + 8, 0, lane);   // dRv W^T
            __syncthreads();
            gc_stage<64, DK>(bufWK, Kc + cidx * GC * DK, DK, GC, (const float*)0, 1.0f);
            __syncthreads();
            gdn_mm<8, DK, false, true>(aa, bufB, DK + 8, m0, bufWK, DK + 8, 0, lane);   // + dRk Kc^T
            gc_zero<8>(kk);
            gdn_mm<8, DK, false, true>(kk, Ks, DK + 8, m0, Ks, DK + 8, 0, lane);
            __syncthreads();   // dRv, dRk read by every warp: E goes over them; Tinv's buffer takes G
            float p0 = 0.0f, p1 = 0.0f;
            #pragma unroll
            for (int j = 0; j < 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = m0 + g4 + ((e >> 1) << 3), jj = j * 8 + 2 * t4 + (e & 1);
                    float gv = 0.0f, ev = 0.0f;
                    if (jj < i && i < L) {
                        const float gm = gc_gam<DOC>(cs, i, jj, e >> 1 ? lo1 : lo0), dA = -aa[j][e];
                        const float kg = kk[j][e] * gm;
                        gv = dA * bs[i] * gm;
                        ev = dA * (bs[i] * kg);
                        if (e < 2) p0 += dA * kg;
                        else p1 += dA * kg;
                    }
                    act_st(&Ts[i * 72 + jj], gv);
                    Ef[i * 65 + jj] = ev;
                }
            p0 = gc_quad_sum(p0);
            p1 = gc_quad_sum(p1);
            if (t4 == 0) { dbs[m0 + g4] += p0; dbs[m0 + g4 + 8] += p1; }
        }
        __syncthreads();
        if (tid < GC) {
            float rsum = 0.0f, csum = 0.0f;
            for (int j = 0; j < GC; j++) { rsum += Ef[tid * 65 + j]; csum += Ef[j * 65 + tid]; }
            dcs[tid] += rsum - csum;
        }
        {   // d. dk += G K + G^T K
            float acc[DK / 8][4];
            gc_zero<DK / 8>(acc);
            gdn_mm<DK / 8, 64, false, false>(acc, Ts, 72, m0, Ks, DK + 8, 0, lane);
            gdn_mm<DK / 8, 64, true, false>(acc, Ts, 72, m0, Ks, DK + 8, 0, lane);
            #pragma unroll
            for (int j = 0; j < DK / 8; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + g4 + ((e >> 1) << 3);
                    if (r < L) dkr[(size_t)r * d.ldqk + j * 8 + 2 * t4 + (e & 1)] += acc[j][e];
                }
        }
        __syncthreads();   // dcs, dbs final
        if (tid == 0) {   // e. dg_j = sum_{i >= j} dc_i, in order from the last token
            float s = 0.0f;
            for (int i = L - 1; i >= 0; i--) {
                s += dcs[i];
                dg[(n0 + i) * d.Hv + h] = s;
            }
        }
        if (tid < L) dbeta[(n0 + tid) * d.Hv + h] = dbs[tid];
        __syncthreads();   // the next value head restages every buffer
    }
}

// ---------------------------------------------------------------------------------------------
// host side

static GcDims gc_dims(const OpsGdnShape* s) {
    GcDims d;
    d.B = s->B; d.T = s->T; d.Hk = s->Hk; d.Hv = s->Hv;
    d.NC = (s->T + GC - 1) / GC;
    d.ldqk = s->ld_qk ? (size_t)s->ld_qk : (size_t)s->Hk * s->dk;
    d.ldv = s->ld_v ? (size_t)s->ld_v : (size_t)s->Hv * s->dv;
    d.scale = 1.0f / sqrtf((float)s->dk);
    return d;
}

static int gc_use(const OpsGdnShape* s) {
    if (s->Hk < 1 || s->Hv < 1 || s->Hv % s->Hk != 0 || s->B < 1) return 0;   // deltanet.cu reports the shape
    return cuda_gdn_chunked(s, cuda_smem_optin(), sizeof(gop_t), cuda_env_is("GATEDGPT_GDN_CHUNK", "recurrent"));
}

template <typename K>
static void gc_optin(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// the scratch regions (kernels/scratch.h cuda_gdn_chunk_layout)
struct GcScratch {
    gop_t *w, *kc, *vn, *sh, *tinv, *dvn, *dsh, *dkc;
    float* dc;
};
static GcScratch gc_scratch(const OpsGdnShape* s, int backward) {
    const CudaGdnChunkLayout l = cuda_gdn_chunk_layout(s, sizeof(gop_t), backward);
    unsigned char* p = (unsigned char*)cuda_scratch(CUDA_SCRATCH_GDN_STATE, l.bytes);
    GcScratch x;
    x.w = (gop_t*)(p + l.w);
    x.kc = (gop_t*)(p + l.kc);
    x.vn = (gop_t*)(p + l.vn);
    x.sh = (gop_t*)(p + l.sh);
    x.tinv = backward ? (gop_t*)(p + l.tinv) : NULL;
    x.dvn = backward ? (gop_t*)(p + l.dvn) : NULL;
    x.dsh = backward ? (gop_t*)(p + l.dsh) : NULL;
    x.dkc = backward ? (gop_t*)(p + l.dkc) : NULL;
    x.dc = backward ? (float*)(p + l.dc) : NULL;
    return x;
}

template <int DK, int DV>
static void gc_check_smem(void) {
    size_t m = gdn_smem_wy<DK, DV>();
    const size_t all[5] = {gdn_smem_state<DK, DV>(), gdn_smem_out<DK, DV>(), gdn_smem_dstate<DK, DV>(),
                           gdn_smem_dqk<DK, DV>(), gdn_smem_dwy<DK, DV>()};
    for (int i = 0; i < 5; i++) m = all[i] > m ? all[i] : m;
    if (m != cuda_gdn_chunk_smem(DK, DV, sizeof(gop_t)))
        cuda_fail(__FILE__, __LINE__, "gated delta rule (chunked): the kernels' shared memory differs from kernels/scratch.h's",
                  "make cuda_gdn_chunk_smem compute what deltanet_chunk.cu's gdn_smem_* do");
}

// W, Kc (and Tinv) per chunk, then the state pass: Vn and the states before each chunk. DOC: the
// documents' instantiations (doc = s->doc_start), the plain kernels without them.
template <int DK, int DV, bool DOC>
static void gc_wy_state(const GcDims& d, const GcScratch& x, const float* k, const float* v, const float* g,
                        const float* beta, const float* state_in, float* state_out, const int* doc) {
    gc_check_smem<DK, DV>();
    gc_optin(gdn_chunk_wy_kernel<DK, DV, DOC>, gdn_smem_wy<DK, DV>());
    gc_optin(gdn_chunk_state_kernel<DK, DV, DOC>, gdn_smem_state<DK, DV>());
    dim3 gw(d.NC, d.Hk, d.B);
    gdn_chunk_wy_kernel<DK, DV, DOC><<<gw, GC_THREADS, gdn_smem_wy<DK, DV>(), cuda_stream>>>(d, k, v, g, beta, x.w, x.kc,
                                                                                             x.tinv, doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_wy_kernel");
    dim3 gs(DV / GC_BV, d.Hv, d.B);
    gdn_chunk_state_kernel<DK, DV, DOC><<<gs, GC_THREADS, gdn_smem_state<DK, DV>(), cuda_stream>>>(
        d, k, g, x.w, x.kc, x.vn, x.sh, state_in, state_out, doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_state_kernel");
}

template <int DK, int DV, bool DOC>
static void gc_forward(float* o, float* state_out, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, const float* state_in, const OpsGdnShape* s) {
    const GcDims d = gc_dims(s);
    const GcScratch x = gc_scratch(s, 0);
    const int* doc = s->doc_start;
    gc_wy_state<DK, DV, DOC>(d, x, k, v, g, beta, state_in, state_out, doc);
    gc_optin(gdn_chunk_out_kernel<DK, DV, DOC>, gdn_smem_out<DK, DV>());
    dim3 go(d.NC, d.Hk, d.B);
    gdn_chunk_out_kernel<DK, DV, DOC><<<go, GC_THREADS, gdn_smem_out<DK, DV>(), cuda_stream>>>(d, q, k, g, x.vn, x.sh, o,
                                                                                               doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_out_kernel");
}

template <int DK, int DV, bool DOC>
static void gc_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout, const float* q,
                        const float* k, const float* v, const float* g, const float* beta, const OpsGdnShape* s) {
    const GcDims d = gc_dims(s);
    const GcScratch x = gc_scratch(s, 1);
    const int* doc = s->doc_start;
    gc_wy_state<DK, DV, DOC>(d, x, k, v, g, beta, NULL, NULL, doc);
    gc_optin(gdn_chunk_dstate_kernel<DK, DV, DOC>, gdn_smem_dstate<DK, DV>());
    gc_optin(gdn_chunk_dqk_kernel<DK, DV, DOC>, gdn_smem_dqk<DK, DV>());
    gc_optin(gdn_chunk_dwy_kernel<DK, DV, DOC>, gdn_smem_dwy<DK, DV>());
    dim3 gs(DV / GC_BV, d.Hv, d.B);
    gdn_chunk_dstate_kernel<DK, DV, DOC><<<gs, GC_THREADS, gdn_smem_dstate<DK, DV>(), cuda_stream>>>(
        d, q, k, g, dout, x.kc, x.dvn, x.dsh, doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_dstate_kernel");
    dim3 gk(d.NC, d.Hk, d.B);
    gdn_chunk_dqk_kernel<DK, DV, DOC><<<gk, GC_THREADS, gdn_smem_dqk<DK, DV>(), cuda_stream>>>(
        d, q, k, g, dout, x.sh, x.dsh, x.vn, x.dvn, x.dkc, x.dc, dq, dk, doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_dqk_kernel");
    gdn_chunk_dwy_kernel<DK, DV, DOC><<<gk, GC_THREADS, gdn_smem_dwy<DK, DV>(), cuda_stream>>>(
        d, k, v, g, beta, x.tinv, x.w, x.kc, x.dvn, x.dkc, x.dc, dk, dv, dg, dbeta, doc);
    CUDA_LAUNCH_CHECK("gdn_chunk_dwy_kernel");
}

template <bool DOC>
static void gc_forward_dims(float* o, float* state_out, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* state_in, const OpsGdnShape* s) {
    if (s->dk == 64 && s->dv == 64) gc_forward<64, 64, DOC>(o, state_out, q, k, v, g, beta, state_in, s);
    else if (s->dk == 64) gc_forward<64, 128, DOC>(o, state_out, q, k, v, g, beta, state_in, s);
    else if (s->dv == 64) gc_forward<128, 64, DOC>(o, state_out, q, k, v, g, beta, state_in, s);
    else gc_forward<128, 128, DOC>(o, state_out, q, k, v, g, beta, state_in, s);
}

template <bool DOC>
static void gc_backward_dims(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout, const float* q,
                             const float* k, const float* v, const float* g, const float* beta, const OpsGdnShape* s) {
    if (s->dk == 64 && s->dv == 64) gc_backward<64, 64, DOC>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
    else if (s->dk == 64) gc_backward<64, 128, DOC>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
    else if (s->dv == 64) gc_backward<128, 64, DOC>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
    else gc_backward<128, 128, DOC>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
}

int cuda_gdn_chunk_forward(float* o, float* state_out, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const float* state_in, const OpsGdnShape* s) {
    if (!gc_use(s)) return 0;
    if (s->doc_start) gc_forward_dims<true>(o, state_out, q, k, v, g, beta, state_in, s);
    else gc_forward_dims<false>(o, state_out, q, k, v, g, beta, state_in, s);
    return 1;
}

int cuda_gdn_chunk_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout, const float* q,
                            const float* k, const float* v, const float* g, const float* beta, const OpsGdnShape* s) {
    if (!gc_use(s)) return 0;
    if (s->doc_start) gc_backward_dims<true>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
    else gc_backward_dims<false>(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s);
    return 1;
}
