// kernels/cpu/deltanet.c: the gated delta rule on the CPU (kernels/ops.h, "Gated delta rule").
// With s->chunk > 0 (training) both ops run the chunked form of kernels/cpu/deltanet_chunk.c.
// Here, the recurrent form (decoding, and the reference of the tests): one task per (sequence,
// value head); the backward walks the tokens in reverse with the states recomputed chunk by
// chunk from checkpoints (GDN_CKPT tokens apart).
//
// Forward, per token (S [dk, dv], a = exp(g), scale = 1/sqrt(dk)):
//   Sp = a S;  u = Sp^T k;  d = beta (v - u);  S' = Sp + k d^T;  o = scale S'^T q
// The inner loops' dot products are `omp simd` reductions: vectorised, in a fixed order for a
// given build (so still deterministic), differing from a sequential sum by roundoff only.
// Under s->doc_start, S is zeroed before each later document's first token (and no dS crosses
// back over it).
// Backward, per token in reverse, with dS = dL/dS' carried from the later tokens:
//   dS += scale q do^T;         dq = scale S' do
//   dd = dS^T k;                dk = dS d
//   dv = beta dd;  du = -beta dd;  dbeta = dd . (v - u)
//   dSp = dS + k du^T;          dk += Sp du
//   dS_prev = a dSp;            dg = a <dSp, S_prev>
#include "../ops.h"
#include "../attn_gate.h"
#include "cpu_common.h"
#include "../scratch.h"
#include "deltanet_chunk.h"
#include <string.h>

#define GDN_CKPT CPU_GDN_CKPT   // kernels/scratch.h (the planner counts the states)

// one token's update of S [dk, dv] in place; u and d [dv] are scratch (their values kept for
// the backward); o [dv] (when not NULL) = scale S'^T q
static void gdn_step(float* S, float* u, float* d, float* o, const float* q, const float* k, const float* v,
                     float g, float beta, int dk, int dv, float scale) {
    const float a = expf(g);
    for (int i = 0; i < dk * dv; i++) S[i] *= a;
    for (int j = 0; j < dv; j++) u[j] = 0.0f;
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) u[j] += S[i * dv + j] * k[i];
    for (int j = 0; j < dv; j++) d[j] = beta * (v[j] - u[j]);
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) S[i * dv + j] += k[i] * d[j];
    if (!o) return;
    for (int j = 0; j < dv; j++) o[j] = 0.0f;
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) o[j] += S[i * dv + j] * q[i];
    for (int j = 0; j < dv; j++) o[j] *= scale;
}

int ops_gdn_keeps_saved(void) { return 1; }

// whether token n (t of its sequence) starts a document after the sequence's first one: the
// state is zeroed before its step (OpsGdnShape.doc_start)
static inline int gdn_doc_reset(const int* doc_start, size_t n, int t) { return doc_start && t > 0 && doc_start[n] == t; }

void ops_gdn_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const float* state_in, const OpsGdnShape* s) {
    if (s->chunk > 0) {   // training: the chunked form (kernels/cpu/deltanet_chunk.c)
        cpu_gdn_chunk_forward(o, state_out, saved, q, k, v, g, beta, state_in, s);
        return;
    }
    const int B = s->B, T = s->T, Hk = s->Hk, Hv = s->Hv, dk = s->dk, dv = s->dv, rep = Hv / Hk;
    const float scale = 1.0f / sqrtf((float)dk);
    const size_t SS = (size_t)dk * dv;
    const size_t ldqk = s->ld_qk ? (size_t)s->ld_qk : (size_t)Hk * dk, ldv = s->ld_v ? (size_t)s->ld_v : (size_t)Hv * dv;
    #pragma omp parallel
    {
        // the state, then the step's u and d [dv]: cpu_gdn_fwd_thread_floats (kernels/scratch.h)
        float* S = cpu_calloc(cpu_gdn_fwd_thread_floats(0, (size_t)dk, (size_t)dv, 1), sizeof(float));
        float* work = S + SS;
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < Hv; h++) {
                const size_t sb = ((size_t)b * Hv + h) * SS;
                if (state_in) memcpy(S, state_in + sb, SS * sizeof(float));
                else memset(S, 0, SS * sizeof(float));
                for (int t = 0; t < T; t++) {
                    size_t n = (size_t)b * T + t;
                    if (gdn_doc_reset(s->doc_start, n, t)) memset(S, 0, SS * sizeof(float));   // a later document: from zeros
                    gdn_step(S, work, work + dv, o + (n * Hv + h) * dv, q + n * ldqk + (size_t)(h / rep) * dk,
                             k + n * ldqk + (size_t)(h / rep) * dk, v + n * ldv + (size_t)h * dv, g[n * Hv + h],
                             beta[n * Hv + h], dk, dv, scale);
                }
                if (state_out) memcpy(state_out + sb, S, SS * sizeof(float));
            }
        free(S);   // and work, in the same block
    }
}

// One task per (sequence, key head): its value heads in order, so that dq and dk of the key
// head have one writer.
void ops_gdn_backward(float* dq, float* dk_, float* dv_, float* dg, float* dbeta, const float* dout,
                      const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const float* saved, const OpsGdnShape* s) {
    if (s->chunk > 0) {   // training: the chunked form (kernels/cpu/deltanet_chunk.c)
        cpu_gdn_chunk_backward(dq, dk_, dv_, dg, dbeta, dout, q, k, v, g, beta, saved, s);
        return;
    }
    const int B = s->B, T = s->T, Hk = s->Hk, Hv = s->Hv, dk = s->dk, dv = s->dv, rep = Hv / Hk;
    const float scale = 1.0f / sqrtf((float)dk);
    const int nck = (T + GDN_CKPT - 1) / GDN_CKPT;
    const size_t SS = (size_t)dk * dv;
    const size_t ldqk = s->ld_qk ? (size_t)s->ld_qk : (size_t)Hk * dk, ldv = s->ld_v ? (size_t)s->ld_v : (size_t)Hv * dv;
    #pragma omp parallel
    {
        // one block of cpu_gdn_bwd_thread_floats (kernels/scratch.h): the state before each chunk
        // ck [nck, dk, dv], before each token of a chunk prev [GDN_CKPT, dk, dv], S, dS, dS', and
        // the vectors u, d, dd, du [dv]
        float* ck = cpu_calloc(cpu_gdn_bwd_thread_floats((size_t)T, 0, (size_t)dk, (size_t)dv, 1, 0), sizeof(float));
        float* prev = ck + (size_t)nck * SS;
        float *S = prev + (size_t)GDN_CKPT * SS, *dS = S + SS, *dSp = dS + SS;
        float *u = dSp + SS, *d = u + dv, *dd = d + dv, *du = dd + dv;
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hk; kh++) {
                for (int t = 0; t < T; t++) {
                    size_t n = (size_t)b * T + t;
                    memset(dq + n * ldqk + (size_t)kh * dk, 0, (size_t)dk * sizeof(float));
                    memset(dk_ + n * ldqk + (size_t)kh * dk, 0, (size_t)dk * sizeof(float));
                }
                for (int h = kh * rep; h < (kh + 1) * rep; h++) {
                    // checkpoints: the state before tokens 0, GDN_CKPT, 2 GDN_CKPT, ...
                    memset(S, 0, SS * sizeof(float));
                    for (int t = 0; t < T; t++) {
                        size_t n = (size_t)b * T + t;
                        if (gdn_doc_reset(s->doc_start, n, t)) memset(S, 0, SS * sizeof(float));
                        if (t % GDN_CKPT == 0) memcpy(ck + (size_t)(t / GDN_CKPT) * SS, S, SS * sizeof(float));
                        gdn_step(S, u, d, NULL, NULL, k + n * ldqk + (size_t)kh * dk, v + n * ldv + (size_t)h * dv, g[n * Hv + h],
                                 beta[n * Hv + h], dk, dv, scale);
                    }
                    memset(dS, 0, SS * sizeof(float));
                    for (int c = nck - 1; c >= 0; c--) {
                        const int t0 = c * GDN_CKPT, t1 = t0 + GDN_CKPT < T ? t0 + GDN_CKPT : T;
                        memcpy(S, ck + (size_t)c * SS, SS * sizeof(float));
                        for (int t = t0; t < t1; t++) {   // the state before each token of the chunk
                            size_t n = (size_t)b * T + t;
                            if (gdn_doc_reset(s->doc_start, n, t)) memset(S, 0, SS * sizeof(float));
                            memcpy(prev + (size_t)(t - t0) * SS, S, SS * sizeof(float));
                            gdn_step(S, u, d, NULL, NULL, k + n * ldqk + (size_t)kh * dk, v + n * ldv + (size_t)h * dv, g[n * Hv + h],
                                     beta[n * Hv + h], dk, dv, scale);
                        }
                        for (int t = t1 - 1; t >= t0; t--) {
                            size_t n = (size_t)b * T + t;
                            const float *qt = q + n * ldqk + (size_t)kh * dk, *kt = k + n * ldqk + (size_t)kh * dk;
                            const float *vt = v + n * ldv + (size_t)h * dv;
                            const float *dot = dout + (n * Hv + h) * dv, *Sprev = prev + (size_t)(t - t0) * SS;
                            float* dqt = dq + n * ldqk + (size_t)kh * dk;
                            float* dkt = dk_ + n * ldqk + (size_t)kh * dk;
                            const float a = expf(g[n * Hv + h]), bt = beta[n * Hv + h];
                            // this token's forward again: Sp = a S_prev (in S), u, d, S' (in S after the update)
                            for (size_t i = 0; i < SS; i++) S[i] = a * Sprev[i];
                            for (int j = 0; j < dv; j++) u[j] = 0.0f;
                            for (int i = 0; i < dk; i++)
                                for (int j = 0; j < dv; j++) u[j] += S[i * dv + j] * kt[i];
                            for (int j = 0; j < dv; j++) d[j] = bt * (vt[j] - u[j]);
                            // o = scale S'^T q, S' = Sp + k d^T
                            for (int i = 0; i < dk; i++) {
                                float acc = 0.0f;
                                #pragma omp simd reduction(+:acc)
                                for (int j = 0; j < dv; j++) {
                                    float Sij = S[i * dv + j] + kt[i] * d[j];
                                    acc += Sij * dot[j];
                                    dS[i * dv + j] += scale * qt[i] * dot[j];
                                }
                                dqt[i] += scale * acc;
                            }
                            // S' = Sp + k d^T
                            for (int j = 0; j < dv; j++) dd[j] = 0.0f;
                            for (int i = 0; i < dk; i++) {
                                float acc = 0.0f;
                                #pragma omp simd reduction(+:acc)
                                for (int j = 0; j < dv; j++) { dd[j] += dS[i * dv + j] * kt[i]; acc += dS[i * dv + j] * d[j]; }
                                dkt[i] += acc;
                            }
                            // d = beta (v - u)
                            float db = 0.0f;
                            for (int j = 0; j < dv; j++) {
                                dv_[n * ldv + (size_t)h * dv + j] = bt * dd[j];
                                du[j] = -bt * dd[j];
                                db += dd[j] * (vt[j] - u[j]);
                            }
                            dbeta[n * Hv + h] = db;
                            // u = Sp^T k;  Sp = a S_prev
                            float da = 0.0f;
                            for (int i = 0; i < dk; i++) {
                                float acc = 0.0f;
                                #pragma omp simd reduction(+:acc, da)
                                for (int j = 0; j < dv; j++) {
                                    acc += S[i * dv + j] * du[j];
                                    dSp[i * dv + j] = dS[i * dv + j] + kt[i] * du[j];
                                    da += dSp[i * dv + j] * Sprev[i * dv + j];
                                }
                                dkt[i] += acc;
                            }
                            dg[n * Hv + h] = da * a;   // 0 at a document's start (S_prev zeroed)
                            // dS for the token before: none crosses a document's start
                            const float ap = gdn_doc_reset(s->doc_start, n, t) ? 0.0f : a;
                            for (size_t i = 0; i < SS; i++) dS[i] = ap * dSp[i];
                        }
                    }
                }
            }
        free(ck);   // and prev, S, dS, dS', the vectors: one block
    }
}

// ---------------------------------------------------------------------------------------------
// The layer's other ops (ops.h): causal depthwise conv + SiLU, L2 norm, gated RMSNorm.

// SiLU and its derivative through cpu_expf (kernels/cpu/cpu_common.h), which vectorises
static inline float gdn_silu(float x) { return x / (1.0f + cpu_expf(-x)); }
static inline float gdn_silu_grad(float x) { float s = 1.0f / (1.0f + cpu_expf(-x)); return s * (1.0f + x * (1.0f - s)); }

// The conv walks rows of C channels in token order: a thread's rows are contiguous memory, read
// and written as streams (one task per channel, walking its column with a stride of C floats,
// used 4 bytes of every cache line it loaded and defeated the prefetchers). The taps are
// transposed once per call, wt [K, C] (wt[j][c] = w[c, j]), so that a tap is a row of channels.
// A row is summed over its channels in pieces of GDN_CONV_CB on the stack. The inner loops over
// channels are elementwise (`omp simd`: vectorised without alias checks, no sum reordered).
#define GDN_CONV_CB 128
#define GDN_CONV_K_MAX 16   // linear_conv_kernel's upper bound (model/config.c)

// pre[t] = sum_j w[:, j] x[t-K+1+j], the taps in order (each channel's sum term by term as the
// per-channel form); rows in parallel. The first K-1 tokens of a sequence read state_in
// (decoding) or zeros; under doc_start a token's taps before its document's first token read
// zeros, state_in only in the sequence's first document (lo == 0: the same as without).
void ops_conv1d_silu_forward(float* out, float* pre, float* state_out, const float* x, const float* w,
                             const float* state_in, const int* doc_start, int B, int T, int C, int K) {
    float* wt = cpu_calloc(cpu_gdn_conv_fwd_floats((size_t)C, (size_t)K), sizeof(float));   // kernels/scratch.h
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) wt[(size_t)j * C + c] = w[(size_t)c * K + j];
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t n = ((size_t)b * T + t) * C;
            // the K-1 inputs before token 0: state_in[b, c, :] oldest first
            const float* st = state_in ? state_in + (size_t)b * C * (K - 1) : NULL;
            const int lo = doc_start ? doc_start[(size_t)b * T + t] : 0;   // the first input this token may read
            for (int c0 = 0; c0 < C; c0 += GDN_CONV_CB) {
                const int cn = C - c0 < GDN_CONV_CB ? C - c0 : GDN_CONV_CB;
                float acc[GDN_CONV_CB];
                for (int c = 0; c < cn; c++) acc[c] = 0.0f;
                for (int j = 0; j < K; j++) {
                    const int u = t - (K - 1) + j;   // the input this tap reads
                    const float* wr = wt + (size_t)j * C + c0;
                    if (u >= lo) {
                        const float* xr = x + ((size_t)b * T + u) * C + c0;
                        #pragma omp simd
                        for (int c = 0; c < cn; c++) acc[c] += wr[c] * xr[c];
                    } else if (st && lo == 0) {      // the first K-1 tokens of a decoded sequence (its first document)
                        for (int c = 0; c < cn; c++) acc[c] += wr[c] * st[(size_t)(c0 + c) * (K - 1) + (K - 1 + u)];
                    }                                // (zeros add nothing)
                }
                if (pre)
                    for (int c = 0; c < cn; c++) pre[n + c0 + c] = acc[c];
                #pragma omp simd
                for (int c = 0; c < cn; c++) out[n + c0 + c] = gdn_silu(acc[c]);
            }
        }
    free(wt);
    if (state_out) {
        #pragma omp parallel for schedule(static)
        for (int b = 0; b < B; b++) {
            const int lo = doc_start ? doc_start[(size_t)b * T + T - 1] : 0;   // the last document's start
            for (int c = 0; c < C; c++)
                for (int j = 0; j < K - 1; j++) {   // the last K-1 inputs, oldest first
                    const int u = T - (K - 1) + j;
                    state_out[((size_t)b * C + c) * (K - 1) + j] =
                        u >= lo ? x[((size_t)b * T + u) * C + c]
                        : state_in && lo == 0 ? state_in[((size_t)b * C + c) * (K - 1) + (K - 1 + u)] : 0.0f;
                }
        }
    }
}

// dp = dout silu'(pre):  dx[u] = sum_{t=u}^{u+K-1} dp[t] w[:, u-t+K-1];  dw[:, j] += sum_{b,t} dp[t] x[t-K+1+j]
// (under doc_start only the pairs the forward read: input u >= doc_start[t]).
// One task per block of CPU_GDN_CONV_RB rows of a sequence, rows in order: dp once per element
// in a ring of K rows of C (row t in slot t % K; the K-1 rows after the block, which its last
// rows need, computed again by the next block), dx row by row, and the block's partial of dw
// [K, C]; the partials summed over blocks in order (the same bits for any thread count).
// Scratch (cpu_gdn_conv_bwd_floats, kernels/scratch.h): wt [K, C], the sum [K, C], the
// partials [blocks, K, C], a ring [K, C] per thread.
void ops_conv1d_silu_backward(float* dx, float* dw, const float* dout, const float* x, const float* pre,
                              const float* w, const int* doc_start, int B, int T, int C, int K) {
    if (K < 1 || K > GDN_CONV_K_MAX) {   // the taps of a row live in arrays of GDN_CONV_K_MAX
        fprintf(stderr, "error: ops_conv1d_silu_backward: conv width %d is outside 1 .. %d ([model] linear_conv_kernel)\n", K, GDN_CONV_K_MAX);
        exit(1);
    }
    const int nbt = (T + CPU_GDN_CONV_RB - 1) / CPU_GDN_CONV_RB, nblk = B * nbt;
    int th = 1;
#ifdef _OPENMP
    th = omp_get_max_threads();
#endif
    const size_t KC = (size_t)K * C;
    float* wt = cpu_calloc(cpu_gdn_conv_bwd_floats((size_t)B, (size_t)T, (size_t)C, (size_t)K, (size_t)th), sizeof(float));
    float *sum = wt + KC, *part = sum + KC, *rings = part + (size_t)nblk * KC;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) wt[(size_t)j * C + c] = w[(size_t)c * K + j];
    #pragma omp parallel
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float* ring = rings + (size_t)me * KC;
        #pragma omp for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            const int b = blk / nbt, t0 = (blk % nbt) * CPU_GDN_CONV_RB;
            const int t1 = t0 + CPU_GDN_CONV_RB < T ? t0 + CPU_GDN_CONV_RB : T;
            const size_t r0 = (size_t)b * T;   // the sequence's first row
            float* pw = part + (size_t)blk * KC;
            for (size_t i = 0; i < KC; i++) pw[i] = 0.0f;
            for (int t = t0; t < t0 + K - 1 && t < T; t++) {
                const float *go = dout + (r0 + t) * C, *pr = pre + (r0 + t) * C;
                float* dp = ring + (size_t)(t % K) * C;
                #pragma omp simd
                for (int c = 0; c < C; c++) dp[c] = go[c] * gdn_silu_grad(pr[c]);
            }
            for (int u = t0; u < t1; u++) {
                const int tn = u + K - 1;   // the newest output input u feeds
                if (tn < T) {
                    const float *go = dout + (r0 + tn) * C, *pr = pre + (r0 + tn) * C;
                    float* dp = ring + (size_t)(tn % K) * C;
                    #pragma omp simd
                    for (int c = 0; c < C; c++) dp[c] = go[c] * gdn_silu_grad(pr[c]);
                }
                // dw from output u: its taps read inputs u-K+1+j (those before token 0, or
                // before u's document, are zeros)
                const float* dpu = ring + (size_t)(u % K) * C;
                const int lo = doc_start ? doc_start[r0 + u] : 0;
                for (int j = 0; j < K; j++) {
                    const int s = u - (K - 1) + j;
                    if (s < lo) continue;
                    const float* xr = x + (r0 + s) * C;
                    float* pj = pw + (size_t)j * C;
                    #pragma omp simd
                    for (int c = 0; c < C; c++) pj[c] += dpu[c] * xr[c];
                }
                // dx of input u: outputs t = u .. u+K-1 (< T) through tap u-t+K-1, in the order of t
                // (under doc_start those of u's document: doc_start is non-decreasing in t)
                const float *dps[GDN_CONV_K_MAX], *wrs[GDN_CONV_K_MAX];
                int nt = 0;
                for (int t = u; t < T && t < u + K && (!doc_start || doc_start[r0 + t] <= u); t++, nt++) {
                    dps[nt] = ring + (size_t)(t % K) * C;
                    wrs[nt] = wt + (size_t)(u - t + K - 1) * C;
                }
                float* dxr = dx + (r0 + u) * C;   // the row summed in place, a tap at a time (in L1)
                #pragma omp simd
                for (int c = 0; c < C; c++) dxr[c] = 0.0f;
                for (int i = 0; i < nt; i++) {
                    const float *dp = dps[i], *wr = wrs[i];
                    #pragma omp simd
                    for (int c = 0; c < C; c++) dxr[c] += dp[c] * wr[c];
                }
            }
        }
    }
    cpu_reduce_blocks(sum, part, nblk, (int)KC);   // sum [K, C] = the blocks' partials in order
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) dw[(size_t)c * K + j] += sum[(size_t)j * C + c];
    free(wt);   // and sum, the partials, the rings: one block
}

// sum_i a_i b_i over i < n in CPU_LANES fixed lanes (lane j takes i = j, j + 8, ...; the tail,
// then the lanes, summed in order; as cpu_row_sum_exp): 8 independent chains that vectorise,
// where one running sum waits on each add, with the same bits on every run and thread count
static inline float gdn_dot(const float* a, const float* b, int n) {
    float acc[CPU_LANES] = {0};
    int i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int j = 0; j < CPU_LANES; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < CPU_LANES; j++) s += acc[j];
    return s;
}

void ops_l2norm_forward(float* y, float* rinv, const float* x, int N, int heads, int n, int ldx, int ldy,
                        float eps) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < N; t++)
        for (int j = 0; j < heads; j++) {
            const float* xr = x + (size_t)t * ldx + (size_t)j * n;
            float* yr = y + (size_t)t * ldy + (size_t)j * n;
            float ri = 1.0f / sqrtf(gdn_dot(xr, xr, n) + eps);
            rinv[(size_t)t * heads + j] = ri;
            for (int i = 0; i < n; i++) yr[i] = xr[i] * ri;
        }
}

// y = x r, r = (x.x + eps)^-1/2:  dx = r dy - r^3 (x.dy) x
void ops_l2norm_backward(float* dx, const float* dy, const float* x, const float* rinv, int N, int heads, int n,
                         int ldx, int ldy) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < N; t++)
        for (int j = 0; j < heads; j++) {
            const float *xr = x + (size_t)t * ldx + (size_t)j * n, *g = dy + (size_t)t * ldy + (size_t)j * n;
            float* dxr = dx + (size_t)t * ldx + (size_t)j * n;
            const float ri = rinv[(size_t)t * heads + j], c = ri * ri * ri * gdn_dot(xr, g, n);
            for (int i = 0; i < n; i++) dxr[i] = ri * g[i] - c * xr[i];
        }
}

// the output gate's activation act(z) and act'(z) from one sigmoid (kernels/attn_gate.h: silu,
// sigmoid, ns_sigmoid)
static inline float gdn_act(OpsGateAct act, float z) { return attn_gate_act_sg(act, z, cpu_sigmoid(z)); }

void ops_rmsnorm_gated_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int rows,
                               int n, float eps, OpsGateAct act) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n;
        float* yr = y + (size_t)r * n;
        const float rs = 1.0f / sqrtf(gdn_dot(xr, xr, n) / n + eps);
        rstd[r] = rs;
        for (int i = 0; i < n; i++) yr[i] = xr[i] * rs * w[i] * gdn_act(act, zr[i]);
    }
}

// y_i = x_i r w_i s_i (s = act(z)):  dz_i = dy_i x_i r w_i act'(z_i);
// with h_i = dy_i w_i s_i:  dx = r h - r^3 (x.h / n) x;  dw_i += dy_i x_i r s_i.
// One pass per block of CPU_RED_BLOCK rows (in order): dw's partial of the block, summed over
// blocks in order (thread-count independent). h [n] per row on the stack in pieces of
// GDN_NORM_PIECE. Inlined once per activation (act a constant: no branch in the loops), and the
// outputs restrict (dx, dz, dw's partial never alias the inputs): the loops vectorise.
#define GDN_NORM_PIECE 256
static inline __attribute__((always_inline)) void gdn_gated_norm_bwd_block(
    float* restrict dx, float* restrict dz, float* restrict bdw, const float* dy, const float* x, const float* z,
    const float* w, const float* rstd, int r0, int r1, int n, OpsGateAct act) {
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n, *g = dy + (size_t)r * n;
        float *dxr = dx + (size_t)r * n, *dzr = dz + (size_t)r * n;
        const float rs = rstd[r];
        // x.h in lanes over pieces of the row
        float acc[CPU_LANES] = {0}, tail = 0.0f;
        for (int p0 = 0; p0 < n; p0 += GDN_NORM_PIECE) {
            const int pn = n - p0 < GDN_NORM_PIECE ? n - p0 : GDN_NORM_PIECE;
            float h[GDN_NORM_PIECE];
            for (int i = 0; i < pn; i++) h[i] = g[p0 + i] * w[p0 + i] * gdn_act(act, zr[p0 + i]);
            int i = 0;
            for (; i + CPU_LANES <= pn; i += CPU_LANES)
                for (int j = 0; j < CPU_LANES; j++) acc[j] += xr[p0 + i + j] * h[i + j];
            for (; i < pn; i++) tail += xr[p0 + i] * h[i];
        }
        float xh = tail;
        for (int j = 0; j < CPU_LANES; j++) xh += acc[j];
        const float c = rs * rs * rs * xh / n;
        for (int i = 0; i < n; i++) {
            const float sg = cpu_sigmoid(zr[i]);
            const float s = attn_gate_act_sg(act, zr[i], sg), da = attn_gate_act_grad_sg(act, zr[i], sg);
            dzr[i] = g[i] * xr[i] * rs * w[i] * da;
            dxr[i] = rs * g[i] * w[i] * s - c * xr[i];
            bdw[i] += g[i] * xr[i] * rs * s;
        }
    }
}

void ops_rmsnorm_gated_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                const float* w, const float* rstd, int rows, int n, OpsGateAct act) {
    const int nb = cpu_nblocks(rows);
    float* part = cpu_calloc((size_t)nb * n, sizeof(float));
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        float* bdw = part + (size_t)blk * n;
        const int r0 = blk * CPU_RED_BLOCK, r1 = r0 + CPU_RED_BLOCK < rows ? r0 + CPU_RED_BLOCK : rows;
        if (act == OPS_ACT_SILU) gdn_gated_norm_bwd_block(dx, dz, bdw, dy, x, z, w, rstd, r0, r1, n, OPS_ACT_SILU);
        else if (act == OPS_ACT_NS_SIGMOID) gdn_gated_norm_bwd_block(dx, dz, bdw, dy, x, z, w, rstd, r0, r1, n, OPS_ACT_NS_SIGMOID);
        else gdn_gated_norm_bwd_block(dx, dz, bdw, dy, x, z, w, rstd, r0, r1, n, act);
    }
    cpu_reduce_blocks(dw, part, nb, n);
    free(part);
}

// softplus as torch.nn.functional.softplus (beta 1, threshold 20) and its derivative sigmoid
static inline float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void ops_gdn_gates_forward(float* g, float* beta, const float* ba, const float* A_log, const float* dt_bias,
                           int N, int Hv) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < Hv; h++) {
            const float b = ba[(size_t)n * 2 * Hv + h], a = ba[(size_t)n * 2 * Hv + Hv + h];
            beta[(size_t)n * Hv + h] = 1.0f / (1.0f + expf(-b));
            g[(size_t)n * Hv + h] = -expf(A_log[h]) * gdn_softplus(a + dt_bias[h]);
        }
}

// g = -e sp(a + dt), e = exp(A_log):  da = ddt-term = dg (-e) sigmoid(a + dt);  dA_log = dg g;
// dbeta: db = dbeta beta (1 - beta). The per-head sums over tokens run in fixed 64-row blocks.
void ops_gdn_gates_backward(float* dba, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                            const float* ba, const float* A_log, const float* dt_bias, int N, int Hv) {
    int nb = cpu_nblocks(N);
    float* part = cpu_calloc((size_t)nb * 2 * Hv, sizeof(float));   // per block: [dA_log | ddt_bias]
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int n1 = (blk + 1) * CPU_RED_BLOCK < N ? (blk + 1) * CPU_RED_BLOCK : N;
        for (int n = blk * CPU_RED_BLOCK; n < n1; n++)
            for (int h = 0; h < Hv; h++) {
                const float b = ba[(size_t)n * 2 * Hv + h], x = ba[(size_t)n * 2 * Hv + Hv + h] + dt_bias[h];
                const float e = expf(A_log[h]), sb = 1.0f / (1.0f + expf(-b));
                const float dgn = dg[(size_t)n * Hv + h];
                const float sp = gdn_softplus(x), dsp = x > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-x));
                dba[(size_t)n * 2 * Hv + h] = dbeta[(size_t)n * Hv + h] * sb * (1.0f - sb);
                const float da = -dgn * e * dsp;
                dba[(size_t)n * 2 * Hv + Hv + h] = da;
                part[(size_t)blk * 2 * Hv + h] += -dgn * e * sp;
                part[(size_t)blk * 2 * Hv + Hv + h] += da;
            }
    }
    float* sum = cpu_calloc((size_t)2 * Hv, sizeof(float));
    cpu_reduce_blocks(sum, part, nb, 2 * Hv);
    for (int h = 0; h < Hv; h++) { dA_log[h] += sum[h]; ddt_bias[h] += sum[Hv + h]; }
    free(part); free(sum);
}
