// kernels/cpu/deltanet_chunk.c: the gated delta rule in its chunked (WY / UT) form on the CPU,
// forward and backward (kernels/ops.h, "Gated delta rule", with s->chunk = C > 0). Almost every
// FLOP is a product of [C, dk], [C, dv], [C, C] or [dk, dv] operands: cpu_gemm_small's JIT
// kernels (kernels/cpu/gemm_small.h). kernels/cpu/deltanet.c keeps the recurrent form (decoding,
// and the reference the tests compare with).
//
// Per (sequence b, value head h) and chunk of L <= C tokens, with the state S [dk, dv] at the
// chunk's start, scale = 1/sqrt(dk), c_i = g_0 + ... + g_i (the cumulative log decay within the
// chunk, c_L its last), Gam_ij = exp(c_i - c_j) for j <= i:
//   Ak_ij = (k_i . k_j) Gam_ij,  A_ij = beta_i Ak_ij (j < i);   Tinv = (I + A)^-1  (unit lower)
//   W  = Tinv diag(beta) V                         [L, dv]
//   Kc = Tinv diag(beta e^c) K                     [L, dk]
//   Vn = W - Kc S                                   [L, dv]  (the delta rule's corrected values)
//   O  = Qd S + P Vn,  Qd = scale diag(e^c) Q,  P_ij = scale (q_i . k_j) Gam_ij (j <= i)
//   S <- e^{c_L} S + Kd^T Vn,  Kd = diag(e^{c_L - c}) K
// which is the recurrence S <- e^g S; S += k (beta (v - S^T k))^T; o = scale S^T q token by
// token (the row i of M = I + A collects what the tokens j < i of the chunk wrote where k_i
// reads). The forward keeps Vn and the state at each chunk's start (as S^T) for the backward
// (`saved`), which walks the chunks in reverse, recomputing each chunk's Ak, P, Tinv (without
// kept tensors, it first walks them forward again to store the states and Vn). It needs neither
// W nor Kc: Vn = Tinv R with R = diag(beta) V - Kb S, Kb = diag(beta e^c) K, so that with
// dSn = dL/d(the state after the chunk):
//   dVn = P^T dO + Kd dSn;   dP = dO Vn^T;   dKd = Vn dSn^T;   dQd = dO S^T
//   dR = Tinv^T dVn;   dA = -dR Vn^T  (strictly lower part; from (I + A) Vn = R)
//   dKb = -dR S^T;   dS = e^{c_L} dSn + Qd^T dO - Kb^T dR   (the next dSn)
//   G_ij = dA_ij beta_i Gam_ij:  dK += G K + G^T K;   H_ij = scale dP_ij Gam_ij:  dQ += H K, dK += H^T Q
//   dV = diag(beta) dR;  dK += diag(beta e^c) dKb + diag(e^{c_L - c}) dKd;  dQ += scale diag(e^c) dQd
//   dbeta_i = dR_i.v_i + e^{c_i} dKb_i.k_i + sum_{j<i} dA_ij Ak_ij
//   dc_i = sum_j (dA_ij A_ij - dA_ji A_ji + dP_ij P_ij - dP_ji P_ji) + beta_i e^{c_i} dKb_i.k_i
//          + Qd_i.dQd_i - Kd_i.dKd_i;   dc_L += sum_i Kd_i.dKd_i + e^{c_L} <S, dSn>
//   dg_j = sum_{i >= j} dc_i
// (dA = -dR Vn^T is -(dR W^T + dRk Kc^T) of the forward's W and Kc, dRk = Tinv^T dKc = -dR S^T,
// with W - Kc S = Vn: dA in 3/4 of a 64^3 product instead of 3/2, and no W, Kc or Tinv^T dKc
// products: 12.25 products of 64^3 per chunk and value head instead of 15.25 at C = dk = dv = 64)
// (each line is the chain rule through one line of the forward above; tests/test_deltanet.c
// checks the whole against the recurrent backward and finite differences).
//
// Documents (s->doc_start): the state is zeroed before each later document's first token. In a
// chunk that is a mask on the decays, every one a product exp(c_i - c_j) over the tokens between
// j and i: Gam_ij = 0 where j is before i's document (so A, P and the inverse are block-diagonal
// by document), e^{c_i} = 0 where i's document starts in this chunk (the state before the chunk
// does not reach it; the sequence's first document excepted, which starts from state_in), and
// e^{c_L - c_j} = 0 where j is before the chunk's last document (its writes do not reach the
// state after the chunk; e^{c_L} is the last row's e^{c_i}). The backward above reads the same
// masked factors, so every term through a masked entry is zero, which is the derivative of a
// constant 0: the formulas hold as written.
//
// The dot products of the elementwise parts are `omp simd` reductions: vectorised, in a fixed
// order for a given build.
// Determinism: one task per (sequence, value head) forward and per (sequence, key head)
// backward (its value heads in order, so dq and dk of the key head have one writer), fixed
// products and loop orders: the same bits for any thread count.
#include "../ops.h"
#include "../scratch.h"
#include "cpu_common.h"
#include "deltanet_chunk.h"
#include "gemm_small.h"
#include <stdint.h>
#include <string.h>

// The chunked form's exp(c_i) of a fast-decaying head (g ~ -10 per token at initialisation)
// falls below fp32's normal range after a few tokens, and x86 computes with subnormals ~10x
// slower: flush them to zero in these loops (values below 1.2e-38 against O(1) outputs).
#if defined(__SSE__)
#include <xmmintrin.h>
static inline unsigned int gdn_flush_subnormals(void) {
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);   // FTZ (bit 15) | DAZ (bit 6)
    return csr;
}
static inline void gdn_restore_fp_mode(unsigned int csr) { _mm_setcsr(csr); }
#else
static inline unsigned int gdn_flush_subnormals(void) { return 0; }
static inline void gdn_restore_fp_mode(unsigned int csr) { (void)csr; }
#endif

// One (sequence, head)'s inputs: rows of q, k (stride ldqk, already at the key head's columns),
// v (stride ldv, at the value head's), g and beta (stride Hv, at the head); row 0 = the sequence's
// first token.
// ds: the tokens' document starts (OpsGdnShape.doc_start, from row 0) or NULL.
typedef struct {
    const float *q, *k, *v, *g, *beta;
    int ldqk, ldv, Hv;
    const int* ds;
} GdnHead;

// c_i (cumulative log decay), ec_i = e^{c_i}, edec_i = e^{c_L - c_i} of the chunk's L tokens at t0;
// with documents (x->ds) lo_i (=) the chunk-relative start of i's document (< 0: before the
// chunk), and ec, edec masked as the comment at the top says
static void gdn_chunk_decays(float* cum, float* ec, float* edec, int* lo, const GdnHead* x, int t0, int L) {
    float acc = 0.0f;
    for (int i = 0; i < L; i++) { acc += x->g[(size_t)(t0 + i) * x->Hv]; cum[i] = acc; }
    for (int i = 0; i < L; i++) { ec[i] = cpu_expf(cum[i]); edec[i] = cpu_expf(cum[L - 1] - cum[i]); }
    if (!x->ds) return;
    for (int i = 0; i < L; i++) lo[i] = x->ds[t0 + i] - t0;
    for (int i = 0; i < L; i++) {
        if (lo[i] >= 0 && x->ds[t0 + i] > 0) ec[i] = 0.0f;   // a later document begun in this chunk
        if (i < lo[L - 1]) edec[i] = 0.0f;                    // before the chunk's last document
    }
}

// Tinv [L, L] (ld C) = (I + A)^-1 for A_ij = beta_i Ak_ij (j < i): by forward substitution,
// row i = e_i - sum_{j<i} A_ij row_j (row j is zero beyond column j)
// ---- products with a triangular [L, L] operand: the zero block of a split at h (half of L,
// a multiple of 16) is skipped, 3/4 of the full product's work
static int gdn_split(int L) { return (L / 2) & ~15; }
// C [L, N] (= or += with beta) Lo B, Lo [L, L] lower triangular (ld ldl)
static void gdn_mm_lower(int L, int N, const float* Lo, int ldl, const float* B, int ldb, int beta, float* Cm, int ldc) {
    const int h = gdn_split(L);
    if (!h) { cpu_gemm_small('N', L, N, L, Lo, ldl, B, ldb, beta, Cm, ldc); return; }
    cpu_gemm_small('N', h, N, h, Lo, ldl, B, ldb, beta, Cm, ldc);
    cpu_gemm_small('N', L - h, N, L, Lo + (size_t)h * ldl, ldl, B, ldb, beta, Cm + (size_t)h * ldc, ldc);
}
// C [L, N] (= or +=) Lo^T B (row i of Lo^T is zero before column i)
static void gdn_mm_lower_t(int L, int N, const float* Lo, int ldl, const float* B, int ldb, int beta, float* Cm, int ldc) {
    const int h = gdn_split(L);
    if (!h) { cpu_gemm_small('T', L, N, L, Lo, ldl, B, ldb, beta, Cm, ldc); return; }
    cpu_gemm_small('T', h, N, L, Lo, ldl, B, ldb, beta, Cm, ldc);
    cpu_gemm_small('T', L - h, N, L - h, Lo + (size_t)h * ldl + h, ldl, B + (size_t)h * ldb, ldb, beta,
                   Cm + (size_t)h * ldc, ldc);
}
// the lower triangle (and diagonal) of C [L, L] (=) A Bt, A [L, K], Bt [K, L]: the block above
// the split is not written (every reader of these products reads j <= i only)
static void gdn_mm_lower_out(int L, int K, const float* A, int lda, const float* Bt, int ldb, float* Cm, int ldc) {
    const int h = gdn_split(L);
    if (!h) { cpu_gemm_small('N', L, L, K, A, lda, Bt, ldb, 0, Cm, ldc); return; }
    cpu_gemm_small('N', h, h, K, A, lda, Bt, ldb, 0, Cm, ldc);
    cpu_gemm_small('N', L - h, L, K, A + (size_t)h * lda, lda, Bt, ldb, 0, Cm + (size_t)h * ldc, ldc);
}

// dst[0..n) = src[0..n), dst not read again by this op: with non-temporal stores (SSE's, on
// every x86-64) where dst is 64-byte aligned and n a multiple of 16 (whole cache lines), so that
// writing the gradients' rows (a few per 4 KiB page, strided) does not first read each line
// from memory (per call, one thread: the first writes of dq and dk rows took 2x a 64 x 64 x 64
// product at T = 4096); gdn_stream_fence() before other threads read them. Else memcpy.
#if defined(__SSE__)
static inline void gdn_stream_row(float* dst, const float* src, int n) {
    if (((uintptr_t)dst & 63) == 0 && (n & 15) == 0) {
        for (int e = 0; e < n; e += 4) _mm_stream_ps(dst + e, _mm_loadu_ps(src + e));
        return;
    }
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static inline void gdn_stream_fence(void) { _mm_sfence(); }
#else
static inline void gdn_stream_row(float* dst, const float* src, int n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static inline void gdn_stream_fence(void) {}
#endif

// n floats from p into the caches (a hint: no fault, no effect on the results)
static inline void gdn_prefetch(const float* p, int n) {
    for (int e = 0; e < n; e += 16) __builtin_prefetch(p + e, 0, 3);
}

typedef float gdn_v16 __attribute__((vector_size(64), aligned(4)));   // 16 floats, any alignment

// A_ij = beta_i Ak_ij, the coefficient row i of the substitution takes of row j
static inline float gdn_tri_coef(float beta_i, float ak_ij) { return beta_i * ak_ij; }

// C = 64 (the default chunk): rows held in 4 vectors of 16, two rows at a time so that the two
// rows' chains of multiply-adds interleave (row i+1 takes row i's term last, once row i is
// final). Rows are zero beyond their diagonal, so whole vectors can be used, and the rows
// j < 32 only in their first two vectors (their last two would add exact zeros). The same
// sums in the same order as the loop below, per element.
static void gdn_tril_inverse64(float* Tinv, const float* Ak, const float* beta, int Hv, int L) {
    for (int i = 0; i < L; i += 2) {
        const int two = i + 1 < L;
        const float b0 = beta[(size_t)i * Hv], b1 = two ? beta[(size_t)(i + 1) * Hv] : 0.0f;
        const float* a0 = Ak + (size_t)i * 64;
        const float* a1 = Ak + (size_t)(i + 1) * 64;   // read only when two
        gdn_v16 x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0}, y0 = {0}, y1 = {0}, y2 = {0}, y3 = {0};
        const int jh = i < 32 ? i : 32;
        for (int j = 0; j < jh; j++) {   // rows j < 32: zero in columns 32..63
            const gdn_v16* rj = (const gdn_v16*)(Tinv + (size_t)j * 64);
            const float p = gdn_tri_coef(b0, a0[j]), r = two ? gdn_tri_coef(b1, a1[j]) : 0.0f;
            x0 -= p * rj[0]; x1 -= p * rj[1];
            y0 -= r * rj[0]; y1 -= r * rj[1];
        }
        for (int j = 32; j < i; j++) {
            const gdn_v16* rj = (const gdn_v16*)(Tinv + (size_t)j * 64);
            const float p = gdn_tri_coef(b0, a0[j]), r = two ? gdn_tri_coef(b1, a1[j]) : 0.0f;
            x0 -= p * rj[0]; x1 -= p * rj[1]; x2 -= p * rj[2]; x3 -= p * rj[3];
            y0 -= r * rj[0]; y1 -= r * rj[1]; y2 -= r * rj[2]; y3 -= r * rj[3];
        }
        gdn_v16* ri = (gdn_v16*)(Tinv + (size_t)i * 64);
        ri[0] = x0; ri[1] = x1; ri[2] = x2; ri[3] = x3;
        Tinv[(size_t)i * 64 + i] = 1.0f;
        if (!two) break;
        const float p = b1 * a1[i];
        y0 -= p * ri[0]; y1 -= p * ri[1]; y2 -= p * ri[2]; y3 -= p * ri[3];
        gdn_v16* rn = (gdn_v16*)(Tinv + (size_t)(i + 1) * 64);
        rn[0] = y0; rn[1] = y1; rn[2] = y2; rn[3] = y3;
        Tinv[(size_t)(i + 1) * 64 + i + 1] = 1.0f;
    }
}

static void gdn_tril_inverse(float* Tinv, const float* Ak, const float* beta, int Hv, int L, int C) {
    if (C == 64) { gdn_tril_inverse64(Tinv, Ak, beta, Hv, L); return; }
    for (int i = 0; i < L; i++) {
        float* ri = Tinv + (size_t)i * C;
        memset(ri, 0, (size_t)C * sizeof(float));
        ri[i] = 1.0f;
        const float b = beta[(size_t)i * Hv];
        for (int j = 0; j < i; j++) {
            const float a = b * Ak[(size_t)i * C + j];
            const float* rj = Tinv + (size_t)j * C;
            #pragma omp simd
            for (int m = 0; m <= j; m++) ri[m] -= a * rj[m];
        }
    }
}

// Ak (when not NULL; j < i, else 0) = (K K^T o Gam), and when P != NULL, P (j <= i; else 0) = scale (Q K^T o Gam)
// (with lo, gdn_chunk_decays's, Gam zero where j < lo_i);
// Gam (j <= i; else 0) stored when not NULL. KK, QK [L, L] (ld C): the raw products (their
// entries above the diagonal may be anything: gdn_mm_lower_out leaves a block unwritten).
// Row i up to the end of its diagonal's block of 16 (whole vectors: rows of i + 1 would leave
// ~half a vector of scalar work per row), the entries past the diagonal selected to 0 (the exp
// of those, c_i - c_j >= 0, is finite: cpu_expf clamps), the rest of the row zeroed.
static inline int gdn_row_span(int i, int L) { const int n = (i | 15) + 1; return n < L ? n : L; }
static void gdn_chunk_masks(float* Ak, float* P, float* Gam, const float* KK, const float* QK, const float* cum,
                            const int* lo, int L, int C, float scale) {
    float e[L];
    for (int i = 0; i < L; i++) {
        const float ci = cum[i];
        const int n = gdn_row_span(i, L);
        const size_t rest = (size_t)(L - n) * sizeof(float);
        #pragma omp simd
        for (int j = 0; j < n; j++) e[j] = cpu_expf(ci - cum[j]);
        for (int j = 0; lo && j < lo[i]; j++) e[j] = 0.0f;   // j before i's document
        // (the outputs never overlap the products or each other: simd without the alias checks)
        if (Ak) {
            const float* kk = KK + (size_t)i * C;
            float* ak = Ak + (size_t)i * C;
            #pragma omp simd
            for (int j = 0; j < n; j++) ak[j] = j < i ? kk[j] * e[j] : 0.0f;
            memset(ak + n, 0, rest);
        }
        if (P) {
            const float* qk = QK + (size_t)i * C;
            float* p = P + (size_t)i * C;
            #pragma omp simd
            for (int j = 0; j < n; j++) p[j] = j <= i ? scale * qk[j] * e[j] : 0.0f;
            memset(p + n, 0, rest);
        }
        if (Gam) {
            float* gm = Gam + (size_t)i * C;
            #pragma omp simd
            for (int j = 0; j < n; j++) gm[j] = j <= i ? e[j] : 0.0f;
            memset(gm + n, 0, rest);
        }
    }
}

// The key head's products of one chunk, shared by its value heads (they differ in v, beta
// and the decays only): Kt = K^T [dk, L] (ld C), and the lower triangles (diagonal included)
// of KK = K K^T and, when QK is not NULL, QK = Q K^T [L, L] (ld C).
static void gdn_chunk_keys(float* Kt, float* KK, float* QK, const GdnHead* x, int t0, int L, int C, int dk) {
    const float* K = x->k + (size_t)t0 * x->ldqk;
    cpu_transpose(Kt, C, K, x->ldqk, L, dk);
    gdn_mm_lower_out(L, dk, K, x->ldqk, Kt, C, KK, C);   // K K^T
    if (QK) gdn_mm_lower_out(L, dk, x->q + (size_t)t0 * x->ldqk, x->ldqk, Kt, C, QK, C);   // Q K^T
}

// The WY representation of one chunk of one value head, shared by the forward and the
// backward: from KK (and QK) of gdn_chunk_keys, V, beta and the decays, Ak (=) and, when P is not
// NULL, P (=) as gdn_chunk_masks (one exp per pair for both; Gam (=) too when not NULL), Tinv
// (=), Rk = ksign diag(beta e^c) K [L, dk] (=; ksign = -1: the backward's -Kb) and Kd =
// diag(e^{c_L - c}) K (=); when W is not NULL (the state's pass), W = Tinv diag(beta) V (=, through
// Rv [L, dv]: scratch) and Kc = Tinv Rk (=). The reverse pass needs neither (the comment at the top).
static void gdn_chunk_wy(float* Ak, float* P, float* Gam, float* Tinv, float* W, float* Kc, float* Kd, const float* KK,
                         const float* QK, float* Rv, float* Rk, const GdnHead* x, int t0, int L, int C, int dk, int dv,
                         const float* cum, const float* ec, const float* edec, const int* lo, float scale, float ksign) {
    const float* K = x->k + (size_t)t0 * x->ldqk;
    const float* V = x->v + (size_t)t0 * x->ldv;
    const float* beta = x->beta + (size_t)t0 * x->Hv;
    gdn_chunk_masks(Ak, P, Gam, KK, QK, cum, lo, L, C, scale);
    gdn_tril_inverse(Tinv, Ak, beta, x->Hv, L, C);
    for (int i = 0; i < L; i++) {
        const float b = beta[(size_t)i * x->Hv], bk = ksign * b * ec[i];
        const float *vi = V + (size_t)i * x->ldv, *ki = K + (size_t)i * x->ldqk;
        if (W)
            for (int e = 0; e < dv; e++) Rv[(size_t)i * dv + e] = b * vi[e];
        for (int e = 0; e < dk; e++) {
            Rk[(size_t)i * dk + e] = bk * ki[e];
            Kd[(size_t)i * dk + e] = edec[i] * ki[e];
        }
    }
    if (!W) return;
    gdn_mm_lower(L, dv, Tinv, C, Rv, dv, 0, W, dv);    // W = Tinv diag(beta) V
    gdn_mm_lower(L, dk, Tinv, C, Rk, dk, 0, Kc, dk);   // Kc = ksign Tinv diag(beta e^c) K
}

// The state's pass over one chunk: Vn [L, dv] (=) = W - Kc S, then S advanced
// to the state after the chunk, e^{c_L} S + Kd^T Vn.
static void gdn_chunk_advance(float* S, float* Vn, const float* W, const float* Kc, const float* Kd, int L, int dk,
                              int dv, float el) {
    cpu_gemm_small('N', L, dv, dk, Kc, dk, S, dv, 0, Vn, dv);    // Kc S
    for (int i = 0; i < L; i++) {
        float* vn = Vn + (size_t)i * dv;
        const float* w = W + (size_t)i * dv;
        #pragma omp simd
        for (int e = 0; e < dv; e++) vn[e] = w[e] - vn[e];
    }
    for (size_t e = 0; e < (size_t)dk * dv; e++) S[e] *= el;
    cpu_gemm_small('T', dk, dv, L, Kd, dk, Vn, dv, 1, S, dv);    // S = e^{c_L} S + Kd^T Vn
}

// ---------------------------------------------------------------------------------------------
// forward: one task per (sequence, key head), its rep = Hv / Hk value heads chunk by chunk (the
// key head's products computed once a chunk for all of them); per thread,
// cpu_gdn_chunk_fwd_floats (kernels/scratch.h) carved in this order. With saved (not NULL) the
// corrected values Vn and the state at each chunk's start are written there for the backward,
// which then skips their recomputation (its first pass): Vn [B, Hv, T, dv], then S^T
// [B, Hv, ceil(T / C), dv, dk] (kernels/scratch.h cpu_gdn_chunk_saved_floats), each (sequence,
// value head)'s rows contiguous, so that the reverse pass reads a chunk's Vn and state as one
// block each. The kept 16 KiB of a state per 64 tokens of a head (at dk = dv = 64) costs the
// forward its transpose and streamed stores and saves the backward a pass over the chunks:
// ~8% of its time at T = 1024 and 4096 (docs/performance.md).

void cpu_gdn_chunk_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                           const float* g, const float* beta, const float* state_in, const OpsGdnShape* s) {
    const int B = s->B, T = s->T, Hk = s->Hk, Hv = s->Hv, dk = s->dk, dv = s->dv, rep = Hv / Hk, C = s->chunk;
    const float scale = 1.0f / sqrtf((float)dk);
    const size_t SS = (size_t)dk * dv;
    const int ldqk = s->ld_qk ? s->ld_qk : Hk * dk, ldv = s->ld_v ? s->ld_v : Hv * dv;
    const int nck = (T + C - 1) / C;
    const size_t nfl = cpu_gdn_chunk_fwd_floats((size_t)C, (size_t)dk, (size_t)dv, (size_t)rep);
    #pragma omp parallel
    {
        float* base = cpu_calloc(nfl, sizeof(float));
        float *Sh = base, *cum = Sh + (size_t)rep * SS, *ec = cum + C, *edec = ec + C;   // Sh: each value head's state
        float *Kt = edec + C, *KK = Kt + (size_t)dk * C, *QK = KK + (size_t)C * C, *P = QK + (size_t)C * C;
        float *Ak = P + (size_t)C * C, *Tinv = Ak + (size_t)C * C;
        float *Rv = Tinv + (size_t)C * C, *Rk = Rv + (size_t)C * dv, *W = Rk + (size_t)C * dk, *Kc = W + (size_t)C * dv;
        float *Qd = Kc + (size_t)C * dk, *Vnb = Qd + (size_t)C * dk, *Kd = Vnb + (size_t)C * dv;
        float* St = Kd + (size_t)C * dk;   // S^T [dv, dk], staged for the kept states' rows
        if (St + SS != base + nfl) { fprintf(stderr, "internal error: gdn chunk forward scratch\n"); exit(1); }
        int lo[C];   // a chunk's document starts (gdn_chunk_decays)
        const unsigned int csr = gdn_flush_subnormals();
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hk; kh++) {
                const size_t n0 = (size_t)b * T;
                const int* ds = s->doc_start ? s->doc_start + n0 : NULL;   // the documents (or none)
                for (int r = 0; r < rep; r++) {
                    const size_t sb = ((size_t)b * Hv + (size_t)kh * rep + r) * SS;
                    if (state_in) memcpy(Sh + (size_t)r * SS, state_in + sb, SS * sizeof(float));
                    else memset(Sh + (size_t)r * SS, 0, SS * sizeof(float));
                }
                for (int t0 = 0; t0 < T; t0 += C) {
                    const int L = T - t0 < C ? T - t0 : C;
                    const GdnHead xk = {q + n0 * ldqk + (size_t)kh * dk, k + n0 * ldqk + (size_t)kh * dk, NULL, NULL, NULL,
                                        ldqk, ldv, Hv, ds};
                    gdn_chunk_keys(Kt, KK, QK, &xk, t0, L, C, dk);
                    const float* Q = xk.q + (size_t)t0 * ldqk;
                    for (int r = 0; r < rep; r++) {
                        const int h = kh * rep + r;
                        const GdnHead x = {xk.q, xk.k, v + n0 * ldv + (size_t)h * dv, g + n0 * Hv + h, beta + n0 * Hv + h,
                                           ldqk, ldv, Hv, ds};
                        float* S = Sh + (size_t)r * SS;
                        float* O = o + ((n0 + t0) * Hv + h) * dv;   // rows of stride Hv dv
                        if (saved) {   // the state at the chunk's start, kept as S^T for the backward
                            float* dst = saved + (size_t)B * Hv * T * dv + (((size_t)b * Hv + h) * nck + t0 / C) * SS;
                            cpu_transpose(St, dk, S, dv, dk, dv);
                            for (int e = 0; e < dv; e++) gdn_stream_row(dst + (size_t)e * dk, St + (size_t)e * dk, dk);
                        }
                        gdn_chunk_decays(cum, ec, edec, lo, &x, t0, L);
                        // the queries' products first (they need the state before the chunk)
                        for (int i = 0; i < L; i++)
                            for (int e = 0; e < dk; e++) Qd[(size_t)i * dk + e] = scale * ec[i] * Q[(size_t)i * ldqk + e];
                        cpu_gemm_small('N', L, dv, dk, Qd, dk, S, dv, 0, O, Hv * dv);   // O = Qd S
                        gdn_chunk_wy(Ak, P, NULL, Tinv, W, Kc, Kd, KK, QK, Rv, Rk, &x, t0, L, C, dk, dv, cum, ec, edec, x.ds ? lo : NULL, scale, 1.0f);
                        gdn_chunk_advance(S, Vnb, W, Kc, Kd, L, dk, dv, ec[L - 1]);
                        // within the chunk: O += P Vn
                        gdn_mm_lower(L, dv, P, C, Vnb, dv, 1, O, Hv * dv);
                        if (saved)   // kept for the backward, [B, Hv, T, dv]
                            for (int i = 0; i < L; i++)
                                gdn_stream_row(saved + (((size_t)b * Hv + h) * T + t0 + i) * dv, Vnb + (size_t)i * dv, dv);
                    }
                }
                if (state_out)
                    for (int r = 0; r < rep; r++)
                        memcpy(state_out + ((size_t)b * Hv + (size_t)kh * rep + r) * SS, Sh + (size_t)r * SS, SS * sizeof(float));
            }
        gdn_stream_fence();   // the streamed rows visible before the region's barrier
        gdn_restore_fp_mode(csr);
        free(base);
    }
}

// ---------------------------------------------------------------------------------------------
// backward: one task per (sequence, key head), so that dq and dk have one writer; per thread,
// cpu_gdn_chunk_bwd_floats (kernels/scratch.h): when the forward kept nothing, per value head of
// the key head and chunk [S^T | Vn] for the reverse pass; each value head's dSn, then one
// chunk's temporaries. The reverse pass takes the value heads chunk by chunk:
// the key head's products computed once a chunk, dq and dk of the chunk summed over its value
// heads locally and written once.

void cpu_gdn_chunk_backward(float* dq, float* dk_, float* dv_, float* dg, float* dbeta, const float* dout,
                            const float* q, const float* k, const float* v, const float* g, const float* beta,
                            const float* saved, const OpsGdnShape* s) {
    const int B = s->B, T = s->T, Hk = s->Hk, Hv = s->Hv, dk = s->dk, dv = s->dv, rep = Hv / Hk, C = s->chunk;
    const float scale = 1.0f / sqrtf((float)dk);
    const size_t SS = (size_t)dk * dv, CC = (size_t)C * C;
    const int ldqk = s->ld_qk ? s->ld_qk : Hk * dk, ldv = s->ld_v ? s->ld_v : Hv * dv;
    const int nck = (T + C - 1) / C;
    const size_t per_chunk = cpu_gdn_chunk_bwd_stored_floats((size_t)C, (size_t)dk, (size_t)dv);
    const size_t nfl = cpu_gdn_chunk_bwd_floats((size_t)T, (size_t)C, (size_t)dk, (size_t)dv, (size_t)rep, saved != NULL);
    // the forward's kept states S^T [B, Hv, nck, dv, dk], after its Vn [B, Hv, T, dv]
    const float* states = saved ? saved + (size_t)B * Hv * T * dv : NULL;
    #pragma omp parallel
    {
        float* base = cpu_calloc(nfl, sizeof(float));   // [rep, nck] chunks' stores first (none when kept)
        float* dSh = base + (saved ? 0 : (size_t)rep * nck * per_chunk);   // each value head's dSn [rep, dk, dv]
        float* t = dSh + (size_t)rep * SS;   // one chunk's temporaries
        float *S = t, *dSnt = S + SS;
        float *cum = dSnt + SS, *ec = cum + C, *edec = ec + C, *dc = edec + C, *dbm = dc + C;
        float *KK = dbm + C, *QK = KK + CC, *P = QK + CC, *Gam = P + CC, *dP = Gam + CC, *F = dP + CC;
        float *H = F + CC, *G = H + CC, *Ak = G + CC, *Tinv = Ak + CC;
        // X [2L, dv] = [dO; dR], Y [2L, dk] = [dQd; dR S^T] = X S^T, Z [2L, dk] = [Qd; -Kb] (each
        // pair stacked so that one product does both: dSn's update is Z^T X)
        float *X = Tinv + CC, *Y = X + (size_t)2 * C * dv, *Z = Y + (size_t)2 * C * dk;
        float *Kt = Z + (size_t)2 * C * dk, *Kd = Kt + (size_t)C * dk, *dKd = Kd + (size_t)C * dk;
        float *Vnt = dKd + (size_t)C * dk, *dVn = Vnt + (size_t)C * dv, *dQl = dVn + (size_t)C * dv, *dKl = dQl + (size_t)C * dk;
        if (dKl + (size_t)C * dk != base + nfl) { fprintf(stderr, "internal error: gdn chunk backward scratch\n"); exit(1); }
        // pass 1's W, Kc, Rv, Rk: buffers of the reverse pass, free while pass 1 runs
        float *W = dVn, *Kc = dKd, *Rv = Vnt, *Rk = dQl;
        int lo[C];   // a chunk's document starts (gdn_chunk_decays)
        const unsigned int csr = gdn_flush_subnormals();
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hk; kh++) {
                const size_t n0 = (size_t)b * T;
                const int* ds = s->doc_start ? s->doc_start + n0 : NULL;   // the documents (or none)
                const GdnHead xk = {q + n0 * ldqk + (size_t)kh * dk, k + n0 * ldqk + (size_t)kh * dk, NULL, NULL, NULL,
                                    ldqk, ldv, Hv, ds};
                // pass 1 (without the forward's kept tensors), each value head: the states at the
                // chunks' starts (as S^T [dv, dk], what the reverse pass reads) and Vn
                for (int r = 0; saved == NULL && r < rep; r++) {
                    const int h = kh * rep + r;
                    const GdnHead x = {xk.q, xk.k, v + n0 * ldv + (size_t)h * dv, g + n0 * Hv + h, beta + n0 * Hv + h,
                                       ldqk, ldv, Hv, ds};
                    memset(S, 0, SS * sizeof(float));
                    for (int c = 0; c < nck; c++) {
                        const int t0 = c * C, L = T - t0 < C ? T - t0 : C;
                        float* Sc = base + ((size_t)r * nck + c) * per_chunk;
                        cpu_transpose(Sc, dk, S, dv, dk, dv);
                        gdn_chunk_decays(cum, ec, edec, lo, &x, t0, L);
                        gdn_chunk_keys(Kt, KK, NULL, &x, t0, L, C, dk);
                        gdn_chunk_wy(Ak, NULL, NULL, Tinv, W, Kc, Kd, KK, NULL, Rv, Rk, &x, t0, L, C, dk, dv, cum, ec,
                                     edec, x.ds ? lo : NULL, 0.0f, 1.0f);
                        gdn_chunk_advance(S, Sc + SS, W, Kc, Kd, L, dk, dv, ec[L - 1]);
                    }
                }
                // pass 2: the chunks in reverse, each one's masks and inverse recomputed
                memset(dSh, 0, (size_t)rep * SS * sizeof(float));
                for (int c = nck - 1; c >= 0; c--) {
                    const int t0 = c * C, L = T - t0 < C ? T - t0 : C;
                    const float *Q = xk.q + (size_t)t0 * ldqk, *K = xk.k + (size_t)t0 * ldqk;
                    gdn_chunk_keys(Kt, KK, QK, &xk, t0, L, C, dk);
                    for (int r = 0; r < rep; r++) {
                        const int h = kh * rep + r;
                        const GdnHead x = {xk.q, xk.k, v + n0 * ldv + (size_t)h * dv, g + n0 * Hv + h, beta + n0 * Hv + h,
                                           ldqk, ldv, Hv, ds};
                        // S^T [dv, dk] at the chunk's start: the forward's, else pass 1's
                        const float* Sc = saved ? states + (((size_t)b * Hv + h) * nck + c) * SS
                                                : base + ((size_t)r * nck + c) * per_chunk;
                        float* dSn = dSh + (size_t)r * SS;
                        // Vn [L, dv]: the forward's, else pass 1's
                        const float* Vn = saved ? saved + (((size_t)b * Hv + h) * T + t0) * dv : Sc + SS;
                        const float* V = x.v + (size_t)t0 * ldv;
                        const float* bt = x.beta + (size_t)t0 * Hv;
                        // this chunk's views of the stacked pairs (rows of L)
                        float *dO = X, *dR = X + (size_t)L * dv, *dQd = Y, *dRkn = Y + (size_t)L * dk;
                        float *Qd = Z, *Kbn = Z + (size_t)L * dk;
                        // this chunk's rows of dO gathered once from their strided rows: the
                        // products below read them 3 times
                        for (int i = 0; i < L; i++)
                            memcpy(dO + (size_t)i * dv, dout + ((n0 + t0 + i) * Hv + h) * dv, (size_t)dv * sizeof(float));
                        gdn_chunk_decays(cum, ec, edec, lo, &x, t0, L);
                        const float el = ec[L - 1];
                        // the masks, Tinv, Kbn = -Kb, Kd (no W, Kc: not needed here)
                        gdn_chunk_wy(Ak, P, Gam, Tinv, NULL, NULL, Kd, KK, QK, NULL, Kbn, &x, t0, L, C, dk, dv, cum, ec,
                                     edec, x.ds ? lo : NULL, scale, -1.0f);
                        for (int i = 0; i < L; i++)
                            for (int e = 0; e < dk; e++) Qd[(size_t)i * dk + e] = scale * ec[i] * Q[(size_t)i * ldqk + e];
                        // dVn = P^T dO + Kd dSn;  dP = dO Vn^T;  dKd = Vn dSn^T;  <S, dSn>
                        gdn_mm_lower_t(L, dv, P, C, dO, dv, 0, dVn, dv);
                        cpu_gemm_small('N', L, dv, dk, Kd, dk, dSn, dv, 1, dVn, dv);
                        cpu_transpose(Vnt, C, Vn, dv, L, dv);
                        gdn_mm_lower_out(L, dv, dO, dv, Vnt, C, dP, C);
                        cpu_transpose(dSnt, dk, dSn, dv, dk, dv);
                        cpu_gemm_small('N', L, dk, dv, Vn, dv, dSnt, dk, 0, dKd, dk);
                        // <S, dSn> = <S^T, dSn^T> (the kept S^T)
                        float sdot = 0.0f;
                        #pragma omp simd reduction(+:sdot)
                        for (size_t e = 0; e < SS; e++) sdot += Sc[e] * dSnt[e];
                        // through the triangular solve (I + A) Vn = R: dR = Tinv^T dVn;
                        // dA = -dR Vn^T = -F (its strictly lower part)
                        gdn_mm_lower_t(L, dv, Tinv, C, dVn, dv, 0, dR, dv);
                        gdn_mm_lower_out(L, dv, dR, dv, Vnt, C, F, C);
                        // [dQd; dRkn] = [dO; dR] S^T  (dRkn = dR S^T = -dL/dKb)
                        cpu_gemm_small('N', 2 * L, dk, dv, X, dv, Sc, dk, 0, Y, dk);
                        // the gradient w.r.t. the state before the chunk:
                        // e^{c_L} dSn + Qd^T dO - Kb^T dR = e^{c_L} dSn + [Qd; -Kb]^T [dO; dR]
                        for (size_t e = 0; e < SS; e++) dSn[e] *= el;
                        cpu_gemm_small('T', dk, dv, 2 * L, Z, dk, X, dv, 1, dSn, dv);
                        // the masks' gradients: G (through A; kept as the symmetric G + G^T, zero
                        // diagonal, for dK += (G + G^T) K in one product), H (through P), and
                        // their dc terms
                        // (rows over whole vectors, gdn_row_span: the terms past the diagonal
                        // selected to 0, F and dP being anything there)
                        memset(dc, 0, (size_t)C * sizeof(float));
                        for (int i = 0; i < L; i++) {
                            const float bi = bt[(size_t)i * Hv];
                            const int n = gdn_row_span(i, L);
                            float db = 0.0f, dci = 0.0f;
                            float *Gi = G + (size_t)i * C, *Hi = H + (size_t)i * C;
                            const float *Fi = F + (size_t)i * C, *Aki = Ak + (size_t)i * C, *Gmi = Gam + (size_t)i * C;
                            const float *dPi = dP + (size_t)i * C, *Pi = P + (size_t)i * C;
                            #pragma omp simd reduction(+:db, dci)
                            for (int j = 0; j < n; j++) {
                                const float dA = j < i ? -Fi[j] : 0.0f;   // Ak, Gam: 0 past the diagonal
                                const float da = dA * bi * Aki[j];
                                Gi[j] = dA * bi * Gmi[j];
                                db += dA * Aki[j];
                                const float d = j <= i ? dPi[j] : 0.0f;   // P, Gam: 0 past the diagonal
                                const float dp = d * Pi[j];
                                Hi[j] = scale * d * Gmi[j];
                                dci += da + dp;
                                dc[j] -= da + dp;
                            }
                            for (int j = 0; j < i; j++) G[(size_t)j * C + i] = Gi[j];
                            memset(Hi + n, 0, (size_t)(L - n) * sizeof(float));
                            dc[i] += dci;
                            dbm[i] = db;
                        }
                        // dQl (+)= H K, dKl (+)= (G + G^T) K + H^T Q: this chunk's parts through the
                        // masks, summed over the value heads with the rest below (then written once)
                        gdn_mm_lower(L, dk, H, C, K, ldqk, r > 0, dQl, dk);
                        cpu_gemm_small('N', L, dk, L, G, C, K, ldqk, r > 0, dKl, dk);
                        gdn_mm_lower_t(L, dk, H, C, Q, ldqk, 1, dKl, dk);
                        float dcl = el * sdot;
                        for (int i = 0; i < L; i++) {
                            const float bi = bt[(size_t)i * Hv];
                            const float *ki = K + (size_t)i * ldqk, *vi = V + (size_t)i * ldv;
                            const float *dqd = dQd + (size_t)i * dk, *dkd = dKd + (size_t)i * dk, *drk = dRkn + (size_t)i * dk;
                            const float *qd = Qd + (size_t)i * dk, *kd = Kd + (size_t)i * dk, *drv = dR + (size_t)i * dv;
                            float *dqi = dQl + (size_t)i * dk, *dki = dKl + (size_t)i * dk;
                            float rk = 0.0f, qq = 0.0f, kk = 0.0f, rv = 0.0f;
                            #pragma omp simd reduction(+:rk, qq, kk)
                            for (int e = 0; e < dk; e++) {
                                dqi[e] += scale * ec[i] * dqd[e];
                                dki[e] += -bi * ec[i] * drk[e] + edec[i] * dkd[e];
                                rk += drk[e] * ki[e];
                                qq += qd[e] * dqd[e];
                                kk += kd[e] * dkd[e];
                            }
                            float* dvi = dVn + (size_t)i * dv;   // dv's row, written out below (dVn is free by now)
                            #pragma omp simd reduction(+:rv)
                            for (int e = 0; e < dv; e++) { dvi[e] = bi * drv[e]; rv += drv[e] * vi[e]; }
                            gdn_stream_row(dv_ + (n0 + t0 + i) * ldv + (size_t)h * dv, dvi, dv);
                            // row i of the previous chunk, the next one this pass reads (its v, dO,
                            // kept Vn and a 1/C of its state; q and k once per key head), requested
                            // here so that the loads are spread over this chunk's work (A/B on the
                            // 2-core host: the backward 0.97x the time; all at a chunk's start: no gain)
                            if (c > 0) {
                                const size_t pn = n0 + t0 - C + i;
                                gdn_prefetch(v + pn * ldv + (size_t)h * dv, dv);
                                gdn_prefetch(dout + (pn * Hv + h) * dv, dv);
                                if (saved) {
                                    gdn_prefetch(saved + (((size_t)b * Hv + h) * T + t0 - C + i) * dv, dv);
                                    gdn_prefetch(states + (((size_t)b * Hv + h) * nck + c - 1) * SS + (size_t)i * (SS / C),
                                                 (int)(SS / C));
                                }
                                if (r == 0) {
                                    gdn_prefetch(xk.q + (size_t)(t0 - C + i) * ldqk, dk);
                                    gdn_prefetch(xk.k + (size_t)(t0 - C + i) * ldqk, dk);
                                }
                            }
                            // rk = -dRk_i . k_i
                            dbeta[(n0 + t0 + i) * Hv + h] = rv - ec[i] * rk + dbm[i];
                            dc[i] += -bi * ec[i] * rk + qq - kk;
                            dcl += kk;
                        }
                        dc[L - 1] += dcl;
                        float acc = 0.0f;
                        for (int i = L - 1; i >= 0; i--) { acc += dc[i]; dg[(n0 + t0 + i) * Hv + h] = acc; }
                    }
                    // this chunk's dq, dk rows: the value heads' sum
                    for (int i = 0; i < L; i++) {
                        gdn_stream_row(dq + (n0 + t0 + i) * ldqk + (size_t)kh * dk, dQl + (size_t)i * dk, dk);
                        gdn_stream_row(dk_ + (n0 + t0 + i) * ldqk + (size_t)kh * dk, dKl + (size_t)i * dk, dk);
                    }
                }
            }
        gdn_stream_fence();   // the streamed rows visible before the region's barrier
        gdn_restore_fp_mode(csr);
        free(base);
    }
}
