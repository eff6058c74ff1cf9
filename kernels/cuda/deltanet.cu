// kernels/cuda/deltanet.cu: the Gated DeltaNet ops of kernels/ops.h ("Gated delta rule") on the
// CUDA backend: the gated delta rule (forward, and backward over recomputed states), the decay
// and write-strength gates, the causal depthwise conv1d + SiLU, the L2 norm of q and k, and the
// gated RMSNorm of the output. kernels/cpu/deltanet.c is the reference for the math; this file
// says how each op maps to threads.
//
// Every tensor here is fp32, on every build (the layer's tensors between its GEMMs are float,
// like the MoE router's). Determinism, as on the CPU: no atomics; every output element has one
// writer; sums over tokens are 64-row block partials added in block order (the CPU's
// CPU_RED_BLOCK), sums over a row are the deterministic warp/block sums of cuda_common.h.
//
// The delta rule, per sequence b and value head h (key head kh = h / (Hv / Hk)), S [dk, dv]:
//   Sp = exp(g_t) S;  u = Sp^T k_t;  d = beta_t (v_t - u);  S' = Sp + k_t d^T;  o_t = scale S'^T q_t
// Column j of S evolves on its own: it reads the vectors q_t, k_t (shared by all columns) and its
// own v_tj, and nothing of the other columns. So the forward gives each thread one column and
// keeps the state in shared memory; the backward needs sums over columns too (dq, dk, dbeta, dg)
// and keeps one block per (sequence, key head).
//
// The chunked form (s->chunk > 0) runs deltanet_chunk.cu's kernels (GEMMs within chunks of 64
// tokens, bf16 tensor cores in the bf16 build) when dk and dv are 64 or 128; other head sizes
// (the tests' small heads) and decoding (chunk = 0) run the recurrent kernels below: the same
// function of the inputs, equal up to roundoff (tests/test_deltanet.c measures the chunked CPU
// form against the recurrent one).
//
// Documents (OpsGdnShape.doc_start, [data] doc_mask): the state is zeroed before each later
// document's first token (t > 0, doc_start[n] == t). The recurrent kernels take it as a decay of
// 0 at that token (a = 0: Sp = 0 S = 0, as the CPU's zeroed state; the backward's dg there is
// dg = a (...) = 0 and no dS crosses back, dS = a dSp = 0), the conv as taps that read zeros
// before the token's document; the chunked kernels mask their decays (deltanet_chunk.cu). Each
// kernel has its own instantiation for documents (DOC = true, doc_start a separate argument),
// so that without them (DOC = false) it compiles to what it was, no read and no register more.
#include "deltanet.h"

// The backward recomputes the states from checkpoints every GDN_CKPT tokens (as the CPU does).
#define GDN_CKPT CUDA_GDN_CKPT   // kernels/scratch.h
// Rows of the token-sum partials (the weight gradients of the conv, the gated norm and the
// gates): the CPU's CPU_RED_BLOCK, summed in block order.
#define GDN_RED_BLOCK CUDA_GDN_RED_BLOCK
// The forward's columns of S per block (one thread each): a block holds a dk x 64 slice of the
// state (32 KiB at dk = 128), and a head's dv columns spread over dv / 64 blocks.
#define GDN_FWD_COLS CUDA_GDN_FWD_COLS
// The backward's threads per block: one per column of S (phases A, C) or per row (phase B) at
// Qwen3-Next's dk = dv = 128; larger heads loop. The kernel takes 112 (sm_90) to 142 (sm_80)
// registers (scripts/gpu_report.py). (No __launch_bounds__ on these kernels: with one, ptxas
// aims at full occupancy, caps the registers at 32-64 and spills.)
#define GDN_BWD_THREADS 128

// The shapes, in the form the kernels take them (by value)
struct GdnDims {
    int B, T, Hk, Hv, dk, dv;
    size_t ldqk, ldv;   // row strides of q, k (and dq, dk) and of v (and dv), in floats
    float scale;        // 1 / sqrt(dk)
};

static GdnDims gdn_dims(const OpsGdnShape* s) {
    if (s->Hk < 1 || s->Hv < 1 || s->Hv % s->Hk != 0 || s->dk < 1 || s->dv < 1)
        cuda_fail(__FILE__, __LINE__, "gated delta rule: Hv must be a positive multiple of Hk, and dk, dv >= 1",
                  "check [model] linear_n_k_head / linear_n_v_head / linear_k_head_dim / linear_v_head_dim");
    GdnDims d;
    d.B = s->B; d.T = s->T; d.Hk = s->Hk; d.Hv = s->Hv; d.dk = s->dk; d.dv = s->dv;
    d.ldqk = s->ld_qk ? (size_t)s->ld_qk : (size_t)s->Hk * s->dk;
    d.ldv = s->ld_v ? (size_t)s->ld_v : (size_t)s->Hv * s->dv;
    d.scale = 1.0f / sqrtf((float)s->dk);
    return d;
}

// ---- scratch and shared memory ----------------------------------------------------------------
// The backend's scratch slots CUDA_SCRATCH_GDN_STATE and CUDA_SCRATCH_GDN_PART (memory.cu), sized
// by kernels/scratch.h's functions, which the planner uses too.

// Whether the state of a delta-rule kernel goes to shared memory: when `bytes` fit the device,
// unless GATEDGPT_GDN_STATE=global (the tests' switch to the other path). Otherwise the state
// lives in global scratch, read through the same pointers: slower, any size.
static int gdn_state_in_smem(size_t bytes) {
    return bytes <= cuda_smem_optin() && !cuda_env_is("GATEDGPT_GDN_STATE", "global");
}

// Opt in to more than the default 48 KiB of dynamic shared memory when a launch needs it.
template <typename K>
static void gdn_smem_optin(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// out[c] += sum over blocks (in block order) of part[blk * ld + c], c < C: the partials of a
// token sum, as norm.cu and the CPU's cpu_reduce_blocks add them
__global__ static void gdn_reduce_blocks_kernel(float* out, const float* part, int nblocks, int C, int ld) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < nblocks; b++) s += part[(size_t)b * ld + c];
    out[c] += s;
}

// the decay a = exp(g) of token n (t of its sequence); under documents (DOC) 0 at the first token
// of a document after the sequence's first, which zeroes the state before its step (Sp = a S)
template <bool DOC>
__device__ __forceinline__ float gdn_decay(float g, const int* doc, size_t n, int t) {
    return DOC && t > 0 && doc[n] == t ? 0.0f : expf(g);
}

// ---------------------------------------------------------------------------------------------
// Forward: one block per (column slice of GDN_FWD_COLS, value head h, sequence b); one thread per
// column j of S. The block's slice S[:, j0 : j0 + cols] lives in shared memory (smem[4 dk ..],
// leading dim cols) or, when it does not fit, in gstate [B, Hv, dk, dv] (leading dim dv). Per
// token the block stages q_t, k_t (dk each) in shared memory, double-buffered so that one barrier
// per token suffices: the buffer written at token t was last read at token t - 2, and every
// thread has passed token t - 1's barrier since.
//   o [N, Hv*dv] (=), state_out [B, Hv, dk, dv] (=, may be NULL), state_in (may be NULL: zeros)
// DOC: doc [B*T] the document starts (the header's "Documents": a = 0 at a later document's start)
template <bool DOC>
__global__ static void gdn_forward_kernel(float* o, float* state_out, const float* q, const float* k,
                                          const float* v, const float* g, const float* beta,
                                          const float* state_in, float* gstate, GdnDims d, const int* doc) {
    extern __shared__ float gdn_smem[];
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (d.Hv / d.Hk), dk = d.dk, dv = d.dv;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;   // this thread's column of S
    const int active = j < dv;
    const size_t SS = (size_t)dk * dv, sb = ((size_t)b * d.Hv + h) * SS;
    float* qkbuf = gdn_smem;   // [2][2 dk]: q_t | k_t, two buffers
    float* S;                  // S[i, j] at S[i * ld]
    size_t ld;
    if (gstate) { S = gstate + sb + j; ld = dv; }
    else { S = gdn_smem + 4 * dk + threadIdx.x; ld = blockDim.x; }

    if (active)
        for (int i = 0; i < dk; i++) S[i * ld] = state_in ? state_in[sb + (size_t)i * dv + j] : 0.0f;
    for (int t = 0; t < d.T; t++) {
        const size_t n = (size_t)b * d.T + t;
        float* qt = qkbuf + (t & 1) * 2 * dk;
        float* kt = qt + dk;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            qt[i] = q[n * d.ldqk + (size_t)kh * dk + i];
            kt[i] = k[n * d.ldqk + (size_t)kh * dk + i];
        }
        __syncthreads();
        if (!active) continue;
        const float a = gdn_decay<DOC>(g[n * d.Hv + h], doc, n, t), bt = beta[n * d.Hv + h];
        // Sp = a S;  u = Sp^T k
        float u = 0.0f;
        for (int i = 0; i < dk; i++) {
            float s = a * S[i * ld];
            S[i * ld] = s;
            u += s * kt[i];
        }
        // S' = Sp + k d^T with d = beta (v - u);  o = scale S'^T q
        const float dj = bt * (v[n * d.ldv + (size_t)h * dv + j] - u);
        float acc = 0.0f;
        for (int i = 0; i < dk; i++) {
            float s = S[i * ld] + kt[i] * dj;
            S[i * ld] = s;
            acc += s * qt[i];
        }
        o[(n * d.Hv + h) * dv + j] = acc * d.scale;
    }
    if (active && state_out)
        for (int i = 0; i < dk; i++) state_out[sb + (size_t)i * dv + j] = S[i * ld];
}

// The chunked kernels recompute Vn in the backward (their state kernel writes it to the scratch):
// the forward leaves `saved` alone, and the model keeps no buffer for it (ops.h).
extern "C" int ops_gdn_keeps_saved(void) { return 0; }

// the documents have their own instantiation (DOC = true): without them the kernel is as it was
template <bool DOC>
static void gdn_forward_launch(float* o, float* state_out, const float* q, const float* k, const float* v,
                               const float* g, const float* beta, const float* state_in, float* gstate, GdnDims d,
                               size_t smem, const int* doc) {
    const int cols = GDN_FWD_COLS;
    gdn_smem_optin(gdn_forward_kernel<DOC>, smem);
    dim3 grid((d.dv + cols - 1) / cols, d.Hv, d.B);
    gdn_forward_kernel<DOC><<<grid, cols, smem, cuda_stream>>>(o, state_out, q, k, v, g, beta, state_in, gstate, d, doc);
    CUDA_LAUNCH_CHECK("gdn_forward_kernel");
}

extern "C" void ops_gdn_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, const float* state_in, const OpsGdnShape* s) {
    (void)saved;
    CUDA_OP_TIMER("ops_gdn_forward");
    const GdnDims d = gdn_dims(s);
    if (d.B <= 0) return;
    if (d.T <= 0) {   // no token: the state passes through
        if (state_out) {
            const size_t n = (size_t)d.B * d.Hv * d.dk * d.dv;
            if (state_in) ops_copy(state_out, state_in, n);
            else ops_zero(state_out, n);
        }
        return;
    }
    // s->chunk > 0 with dk, dv in {64, 128}: the chunked kernels; otherwise the recurrent one
    if (cuda_gdn_chunk_forward(o, state_out, q, k, v, g, beta, state_in, s)) return;
    const size_t smem_state = cuda_gdn_fwd_smem_state((size_t)d.dk);   // kernels/scratch.h: 4 dk + dk x cols
    size_t smem = smem_state;
    float* gstate = NULL;
    if (!gdn_state_in_smem(smem_state)) {   // the state in global scratch; shared memory: q, k only
        smem = (size_t)4 * d.dk * sizeof(float);
        gstate = (float*)cuda_scratch(CUDA_SCRATCH_GDN_STATE, cuda_gdn_fwd_state_bytes(s));
    }
    if (smem > cuda_smem_optin())
        cuda_fail(__FILE__, __LINE__, "gated delta rule forward: q and k of a token do not fit in shared memory",
                  "linear_k_head_dim is too large for this GPU");
    if (s->doc_start) gdn_forward_launch<true>(o, state_out, q, k, v, g, beta, state_in, gstate, d, smem, s->doc_start);
    else gdn_forward_launch<false>(o, state_out, q, k, v, g, beta, state_in, gstate, d, smem, NULL);
}

// ---------------------------------------------------------------------------------------------
// Backward: one block per (key head kh, sequence b), its value heads in order (dq and dk of the
// key head sum over them: one writer, a fixed order, as the CPU). Per value head:
//   1. the state before every GDN_CKPT-th token, from zeros forward: ck [nck, dk, dv] (global);
//   2. per chunk of GDN_CKPT tokens, last chunk first: the state before each of its tokens,
//      recomputed from the chunk's checkpoint: prev [GDN_CKPT, dk, dv] (global); then its tokens
//      in reverse, with dS = dL/dS' carried in P's companion dS [dk, dv]:
//      A (thread per column j):  P = the state before t;  u, d;  dS += scale q do^T;  dd = dS^T k;
//                                dv = beta dd;  du = -beta dd;  dbeta = sum_j dd (v - u)
//      B (thread per row i):     dq_i += scale sum_j S'_ij do_j;  dk_i += sum_j dS_ij d_j;
//                                dk_i += sum_j Sp_ij du_j           (S' = a P + k d^T, Sp = a P)
//      C (thread per column j):  dSp = dS + k du^T;  dg = a sum_ij dSp_ij P_ij;  dS = a dSp
// P and dS (leading dim dv + 1, so that rows and columns are both free of bank conflicts) live in
// shared memory when 2 (dk (dv + 1)) floats fit, else in global scratch (leading dim dv: P then
// points into prev). Shared memory also holds the vectors of the token (q, k, do, d, du) and the
// double-buffered k of the recompute steps. The scratch per block is (nck + GDN_CKPT) states, and
// 2 more in the global case; blocks are B * Hk.
struct GdnBwdPtrs {
    float *dq, *dk, *dv, *dg, *dbeta;
    const float *dout, *q, *k, *v, *g, *beta;
};

// one forward step of column j of W (leading dim ld) for token n: W = a W + k (beta (v - (a W)^T k))
__device__ __forceinline__ void gdn_column_step(float* W, size_t ld, const float* kt, float a, float bt, float vj,
                                                int dk) {
    float u = 0.0f;
    for (int i = 0; i < dk; i++) {
        float s = a * W[i * ld];
        W[i * ld] = s;
        u += s * kt[i];
    }
    const float dj = bt * (vj - u);
    for (int i = 0; i < dk; i++) W[i * ld] += kt[i] * dj;
}

// DOC: doc [B*T] the document starts (a = 0 at a later document's start: the header's "Documents")
template <bool DOC>
__global__ static void gdn_backward_kernel(GdnBwdPtrs p, float* scratch, int smem_state, GdnDims d, const int* doc) {
    extern __shared__ float gdn_smem[];
    __shared__ float red[32];
    const int b = blockIdx.y, kh = blockIdx.x, dk = d.dk, dv = d.dv, rep = d.Hv / d.Hk;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int nck = (d.T + GDN_CKPT - 1) / GDN_CKPT;
    const size_t SS = (size_t)dk * dv;
    // global scratch of this block: ck [nck][dk][dv], prev [GDN_CKPT][dk][dv] (+ P, dS)
    float* ck = scratch + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * (nck + GDN_CKPT + (smem_state ? 0 : 2)) * SS;
    float* prev = ck + (size_t)nck * SS;
    // shared memory: vectors, then (smem_state) P and dS
    float *qs = gdn_smem, *ks = qs + dk, *kb = ks + dk;   // kb [2][dk]: the recompute's k
    float *dos = kb + 2 * dk, *ds = dos + dv, *dus = ds + dv;
    float *Pw, *dS;   // the working state / the state before the token, and dL/dS'
    size_t ldw, ldd;
    if (smem_state) { Pw = dus + dv; dS = Pw + (size_t)dk * (dv + 1); ldw = ldd = dv + 1; }
    else { Pw = prev + (size_t)GDN_CKPT * SS; dS = Pw + SS; ldw = ldd = dv; }

    // dq, dk of this key head (=): zeros, then each value head adds in order
    for (int t = 0; t < d.T; t++) {
        const size_t n = (size_t)b * d.T + t;
        for (int i = tid; i < dk; i += nt) {
            p.dq[n * d.ldqk + (size_t)kh * dk + i] = 0.0f;
            p.dk[n * d.ldqk + (size_t)kh * dk + i] = 0.0f;
        }
    }
    for (int h = kh * rep; h < (kh + 1) * rep; h++) {
        // 1. checkpoints: the state before tokens 0, GDN_CKPT, 2 GDN_CKPT, ... (the steps past the
        // last checkpoint are not needed: step 2 recomputes that chunk)
        for (int j = tid; j < dv; j += nt)
            for (int i = 0; i < dk; i++) { Pw[i * ldw + j] = 0.0f; dS[i * ldd + j] = 0.0f; }
        for (int t = 0; t < (nck - 1) * GDN_CKPT; t++) {
            const size_t n = (size_t)b * d.T + t;
            float* kt = kb + (t & 1) * dk;
            for (int i = tid; i < dk; i += nt) kt[i] = p.k[n * d.ldqk + (size_t)kh * dk + i];
            __syncthreads();
            const float a = gdn_decay<DOC>(p.g[n * d.Hv + h], doc, n, t), bt = p.beta[n * d.Hv + h];
            for (int j = tid; j < dv; j += nt) {
                if (t % GDN_CKPT == 0)
                    for (int i = 0; i < dk; i++) ck[(size_t)(t / GDN_CKPT) * SS + (size_t)i * dv + j] = Pw[i * ldw + j];
                gdn_column_step(Pw + j, ldw, kt, a, bt, p.v[n * d.ldv + (size_t)h * dv + j], dk);
            }
        }
        for (int j = tid; j < dv; j += nt)   // the last checkpoint (the first when nck = 1: zeros)
            for (int i = 0; i < dk; i++) ck[(size_t)(nck - 1) * SS + (size_t)i * dv + j] = Pw[i * ldw + j];

        for (int c = nck - 1; c >= 0; c--) {
            const int t0 = c * GDN_CKPT, t1 = min(t0 + GDN_CKPT, d.T);
            // 2. the state before each token of the chunk, into prev (each thread its columns)
            for (int j = tid; j < dv; j += nt)
                for (int i = 0; i < dk; i++) Pw[i * ldw + j] = ck[(size_t)c * SS + (size_t)i * dv + j];
            for (int t = t0; t < t1; t++) {
                const size_t n = (size_t)b * d.T + t;
                float* kt = kb + ((t - t0) & 1) * dk;
                for (int i = tid; i < dk; i += nt) kt[i] = p.k[n * d.ldqk + (size_t)kh * dk + i];
                __syncthreads();
                const float a = gdn_decay<DOC>(p.g[n * d.Hv + h], doc, n, t), bt = p.beta[n * d.Hv + h];
                for (int j = tid; j < dv; j += nt) {
                    for (int i = 0; i < dk; i++) prev[(size_t)(t - t0) * SS + (size_t)i * dv + j] = Pw[i * ldw + j];
                    if (t + 1 < t1) gdn_column_step(Pw + j, ldw, kt, a, bt, p.v[n * d.ldv + (size_t)h * dv + j], dk);
                }
            }
            // the chunk's tokens in reverse
            for (int t = t1 - 1; t >= t0; t--) {
                const size_t n = (size_t)b * d.T + t;
                const float a = gdn_decay<DOC>(p.g[n * d.Hv + h], doc, n, t), bt = p.beta[n * d.Hv + h];
                const float* Pt = prev + (size_t)(t - t0) * SS;   // the state before t (leading dim dv)
                const float* P;
                size_t ldp;
                if (smem_state) {
                    for (int j = tid; j < dv; j += nt)   // own columns: no barrier needed before A
                        for (int i = 0; i < dk; i++) Pw[i * ldw + j] = Pt[(size_t)i * dv + j];
                    P = Pw; ldp = ldw;
                } else {
                    P = Pt; ldp = dv;
                }
                for (int i = tid; i < dk; i += nt) {
                    qs[i] = p.q[n * d.ldqk + (size_t)kh * dk + i];
                    ks[i] = p.k[n * d.ldqk + (size_t)kh * dk + i];
                }
                for (int j = tid; j < dv; j += nt) dos[j] = p.dout[(n * d.Hv + h) * dv + j];
                __syncthreads();
                // A: columns
                float dbp = 0.0f;
                for (int j = tid; j < dv; j += nt) {
                    float u = 0.0f, dd = 0.0f;
                    for (int i = 0; i < dk; i++) u += (a * P[i * ldp + j]) * ks[i];
                    const float vj = p.v[n * d.ldv + (size_t)h * dv + j];
                    const float dj = bt * (vj - u);
                    for (int i = 0; i < dk; i++) {
                        float x = dS[i * ldd + j] + d.scale * qs[i] * dos[j];
                        dS[i * ldd + j] = x;
                        dd += x * ks[i];
                    }
                    p.dv[n * d.ldv + (size_t)h * dv + j] = bt * dd;
                    ds[j] = dj;
                    dus[j] = -bt * dd;
                    dbp += dd * (vj - u);
                }
                const float db = block_sum(dbp, red);   // its barriers also end phase A
                if (tid == 0) p.dbeta[n * d.Hv + h] = db;
                // B: rows
                for (int i = tid; i < dk; i += nt) {
                    float aq = 0.0f, a1 = 0.0f, a2 = 0.0f;
                    for (int j = 0; j < dv; j++) {
                        const float sp = a * P[i * ldp + j];
                        aq += (sp + ks[i] * ds[j]) * dos[j];
                        a1 += dS[i * ldd + j] * ds[j];
                        a2 += sp * dus[j];
                    }
                    const size_t r = n * d.ldqk + (size_t)kh * dk + i;
                    p.dq[r] += d.scale * aq;
                    p.dk[r] += a1;
                    p.dk[r] += a2;
                }
                __syncthreads();   // B read dS and P across columns; C writes dS
                // C: columns
                float dgp = 0.0f;
                for (int j = tid; j < dv; j += nt)
                    for (int i = 0; i < dk; i++) {
                        const float x = dS[i * ldd + j] + ks[i] * dus[j];
                        dgp += x * P[i * ldp + j];
                        dS[i * ldd + j] = a * x;
                    }
                const float dgs = block_sum(dgp, red);   // its barriers end phase C before the next token's loads
                if (tid == 0) p.dg[n * d.Hv + h] = dgs * a;
            }
        }
        __syncthreads();   // the next value head zeroes dS and Pw
    }
}

template <bool DOC>
static void gdn_backward_launch(GdnBwdPtrs p, float* scratch, int smem_state, GdnDims d, size_t smem, const int* doc) {
    const int threads = GDN_BWD_THREADS;
    gdn_smem_optin(gdn_backward_kernel<DOC>, smem);
    dim3 grid(d.Hk, d.B);
    gdn_backward_kernel<DOC><<<grid, threads, smem, cuda_stream>>>(p, scratch, smem_state, d, doc);
    CUDA_LAUNCH_CHECK("gdn_backward_kernel");
}

extern "C" void ops_gdn_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                                 const float* q, const float* k, const float* v, const float* g,
                                 const float* beta, const float* saved, const OpsGdnShape* s) {
    (void)saved;
    CUDA_OP_TIMER("ops_gdn_backward");
    const GdnDims d = gdn_dims(s);
    if (d.B <= 0 || d.T <= 0) return;
    if (cuda_gdn_chunk_backward(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, s)) return;   // chunked (dk, dv in {64, 128})
    // dynamic shared memory (the kernel's 128 static bytes, red[32], count against the limit)
    const size_t red = cuda_gdn_bwd_smem_red();   // kernels/scratch.h
    const size_t vec = cuda_gdn_bwd_smem_vec((size_t)d.dk, (size_t)d.dv);
    const size_t state = cuda_gdn_bwd_smem_state((size_t)d.dk, (size_t)d.dv);
    const int smem_state = gdn_state_in_smem(red + vec + state);
    const size_t smem = vec + (smem_state ? state : 0);
    if (red + smem > cuda_smem_optin())
        cuda_fail(__FILE__, __LINE__, "gated delta rule backward: the vectors of a token do not fit in shared memory",
                  "linear_k_head_dim / linear_v_head_dim are too large for this GPU");
    float* scratch = (float*)cuda_scratch(CUDA_SCRATCH_GDN_STATE, cuda_gdn_bwd_state_bytes(s, smem_state));
    GdnBwdPtrs p = {dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta};
    if (s->doc_start) gdn_backward_launch<true>(p, scratch, smem_state, d, smem, s->doc_start);
    else gdn_backward_launch<false>(p, scratch, smem_state, d, smem, NULL);
}

// ---------------------------------------------------------------------------------------------
// Gates: beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), from ba [N, 2 Hv] = [b | a].
// softplus as torch's (threshold 20), its derivative sigmoid (1 above the threshold).
__device__ __forceinline__ float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// one thread per (token n, head h)
__global__ static void gdn_gates_forward_kernel(float* g, float* beta, const float* ba, const float* A_log,
                                                const float* dt_bias, int N, int Hv) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * Hv) return;
    const size_t n = idx / Hv;
    const int h = (int)(idx % Hv);
    const float bb = ba[n * 2 * Hv + h], aa = ba[n * 2 * Hv + Hv + h];
    beta[idx] = cuda_sigmoid(bb);
    g[idx] = -expf(A_log[h]) * gdn_softplus(aa + dt_bias[h]);
}

extern "C" void ops_gdn_gates_forward(float* g, float* beta, const float* ba, const float* A_log, const float* dt_bias,
                                      int N, int Hv) {
    CUDA_OP_TIMER("ops_gdn_gates_forward");
    const size_t n = (size_t)N * Hv;
    if (n == 0) return;
    gdn_gates_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(g, beta, ba, A_log, dt_bias, N, Hv);
    CUDA_LAUNCH_CHECK("gdn_gates_forward_kernel");
}

// dba (=) and the partial sums over the 64-row block blk of dA_log's and ddt_bias's terms:
// part[blk][h] = sum (in row order) of -dg e sp,  part[blk][Hv + h] = sum of da. One thread per
// (block of rows, head): coalesced over heads.
//   g = -e sp(x), e = exp(A_log), x = a + dt_bias:  da = ddt term = -dg e sigmoid(x);  dA_log term = -dg e sp(x)
__global__ static void gdn_gates_backward_kernel(float* dba, float* part, const float* dg, const float* dbeta,
                                                 const float* ba, const float* A_log, const float* dt_bias,
                                                 int N, int Hv) {
    const int h = blockIdx.y * blockDim.x + threadIdx.x, blk = blockIdx.x;
    if (h >= Hv) return;
    const int n0 = blk * GDN_RED_BLOCK, n1 = min(n0 + GDN_RED_BLOCK, N);
    const float e = expf(A_log[h]);
    float sA = 0.0f, sdt = 0.0f;
    for (int n = n0; n < n1; n++) {
        const float bb = ba[(size_t)n * 2 * Hv + h], x = ba[(size_t)n * 2 * Hv + Hv + h] + dt_bias[h];
        const float sb = cuda_sigmoid(bb), dgn = dg[(size_t)n * Hv + h];
        const float sp = gdn_softplus(x), dsp = x > 20.0f ? 1.0f : cuda_sigmoid(x);
        dba[(size_t)n * 2 * Hv + h] = dbeta[(size_t)n * Hv + h] * sb * (1.0f - sb);
        const float da = -dgn * e * dsp;
        dba[(size_t)n * 2 * Hv + Hv + h] = da;
        sA += -dgn * e * sp;
        sdt += da;
    }
    part[(size_t)blk * 2 * Hv + h] = sA;
    part[(size_t)blk * 2 * Hv + Hv + h] = sdt;
}

extern "C" void ops_gdn_gates_backward(float* dba, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                                       const float* ba, const float* A_log, const float* dt_bias, int N, int Hv) {
    CUDA_OP_TIMER("ops_gdn_gates_backward");
    if (N <= 0 || Hv <= 0) return;
    const int nb = (N + GDN_RED_BLOCK - 1) / GDN_RED_BLOCK;
    float* part = (float*)cuda_scratch(CUDA_SCRATCH_GDN_PART, cuda_gdn_part_bytes((size_t)N, 2 * (size_t)Hv));
    dim3 grid(nb, cuda_blocks((size_t)Hv, 64));
    gdn_gates_backward_kernel<<<grid, 64, 0, cuda_stream>>>(dba, part, dg, dbeta, ba, A_log, dt_bias, N, Hv);
    CUDA_LAUNCH_CHECK("gdn_gates_backward_kernel");
    gdn_reduce_blocks_kernel<<<cuda_blocks((size_t)Hv, 128), 128, 0, cuda_stream>>>(dA_log, part, nb, Hv, 2 * Hv);
    CUDA_LAUNCH_CHECK("gdn_reduce_blocks_kernel");
    gdn_reduce_blocks_kernel<<<cuda_blocks((size_t)Hv, 128), 128, 0, cuda_stream>>>(ddt_bias, part + Hv, nb, Hv, 2 * Hv);
    CUDA_LAUNCH_CHECK("gdn_reduce_blocks_kernel");
}

// ---------------------------------------------------------------------------------------------
// Causal depthwise conv1d + SiLU over time: pre[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c] (before
// token 0: state_in[b, c, K-1+u], or 0), out = silu(pre). x, pre, out [B*T, C]. Under documents
// (DOC: doc [B*T], OpsGdnShape.doc_start's) a tap reading an input u < doc[t] (before t's
// document) reads 0, state_in only in the sequence's first document (doc[t] = 0: as that
// document alone; a later one starting at t < K-1 reads zeros before it, not state_in); the
// backward pairs only what the forward read.
__device__ __forceinline__ float gdn_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gdn_silu_grad(float x) {
    const float s = cuda_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

// one thread per (token, channel): coalesced over channels
template <bool DOC>
__global__ static void gdn_conv_forward_kernel(float* out, float* pre, const float* x, const float* w,
                                               const float* state_in, int B, int T, int C, int K, const int* doc) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    const int c = (int)(idx % C);
    const size_t n = idx / C;
    const int t = (int)(n % T), b = (int)(n / T);
    const float* st = state_in ? state_in + ((size_t)b * C + c) * (K - 1) : NULL;
    const int lo = DOC ? doc[n] : 0;   // the first input this token reads
    float acc = 0.0f;
    for (int j = 0; j < K; j++) {
        const int u = t - (K - 1) + j;   // the input this tap reads
        const float xv = u >= lo ? x[((size_t)b * T + u) * C + c] : st && (!DOC || lo == 0) ? st[K - 1 + u] : 0.0f;
        acc += w[(size_t)c * K + j] * xv;
    }
    if (pre) pre[idx] = acc;
    out[idx] = gdn_silu(acc);
}

// state_out[b, c, j] (=): the last K-1 inputs, oldest first (reaching into state_in when T < K-1;
// state_out must then be another buffer than state_in: the decoder's two, model/kv_cache.c); under
// documents those of the last document, zeros before its first token (state_in only when it is the
// sequence's first)
template <bool DOC>
__global__ static void gdn_conv_state_kernel(float* state_out, const float* x, const float* state_in, int B, int T,
                                             int C, int K, const int* doc) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * C * (K - 1)) return;
    const int j = (int)(idx % (K - 1));
    const size_t bc = idx / (K - 1);
    const int c = (int)(bc % C), b = (int)(bc / C);
    const int u = T - (K - 1) + j;
    const int lo = DOC && T > 0 ? doc[(size_t)b * T + T - 1] : 0;   // the last document's first token
    state_out[idx] = u >= lo ? x[((size_t)b * T + u) * C + c]
                   : state_in && (!DOC || lo == 0) ? state_in[bc * (K - 1) + (K - 1 + u)] : 0.0f;
}

template <bool DOC>
static void gdn_conv_forward_launch(float* out, float* pre, float* state_out, const float* x, const float* w,
                                    const float* state_in, const int* doc, int B, int T, int C, int K) {
    const size_t n = (size_t)B * T * C;
    if (n > 0) {
        gdn_conv_forward_kernel<DOC><<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(out, pre, x, w, state_in, B, T, C, K, doc);
        CUDA_LAUNCH_CHECK("gdn_conv_forward_kernel");
    }
    const size_t ns = (size_t)B * C * (K - 1);
    if (state_out && ns > 0) {
        gdn_conv_state_kernel<DOC><<<cuda_blocks(ns, 256), 256, 0, cuda_stream>>>(state_out, x, state_in, B, T, C, K, doc);
        CUDA_LAUNCH_CHECK("gdn_conv_state_kernel");
    }
}

extern "C" void ops_conv1d_silu_forward(float* out, float* pre, float* state_out, const float* x, const float* w,
                                        const float* state_in, const int* doc_start, int B, int T, int C, int K) {
    CUDA_OP_TIMER("ops_conv1d_silu_forward");
    if (doc_start) gdn_conv_forward_launch<true>(out, pre, state_out, x, w, state_in, doc_start, B, T, C, K);
    else gdn_conv_forward_launch<false>(out, pre, state_out, x, w, state_in, NULL, B, T, C, K);
}

// dx[b,u,c] (=) = sum over the outputs t = u .. u+K-1 (< T) it feeds, through tap u - t + K - 1,
// of dout silu'(pre) w (under documents those with doc[t] <= u: u's document; doc is
// non-decreasing, so the first t past it ends the loop). One thread per (token, channel).
template <bool DOC>
__global__ static void gdn_conv_backward_dx_kernel(float* dx, const float* dout, const float* pre, const float* w,
                                                   int B, int T, int C, int K, const int* doc) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    const int c = (int)(idx % C);
    const size_t n = idx / C;
    const int u = (int)(n % T), b = (int)(n / T);
    float acc = 0.0f;
    for (int t = u; t < T && t < u + K && (!DOC || doc[(size_t)b * T + t] <= u); t++) {
        const size_t m = ((size_t)b * T + t) * C + c;
        acc += dout[m] * gdn_silu_grad(pre[m]) * w[(size_t)c * K + (u - t + K - 1)];
    }
    dx[idx] = acc;
}

// part[blk][c K + j] = sum over the tokens n of the 64-token block blk (tokens of all sequences
// in a row, n = b T + t), in order, of dout silu'(pre) x[b, t-K+1+j, c] (taps before token 0
// read zeros: state_in taken as zeros; under documents so do those before the token's document).
// One thread per (block, tap column c K + j).
template <bool DOC>
__global__ static void gdn_conv_backward_dw_kernel(float* part, const float* dout, const float* pre, const float* x,
                                                   int B, int T, int C, int K, const int* doc) {
    const int col = blockIdx.y * blockDim.x + threadIdx.x, blk = blockIdx.x;
    if (col >= C * K) return;
    const int c = col / K, j = col % K;
    const int N = B * T, n0 = blk * GDN_RED_BLOCK, n1 = min(n0 + GDN_RED_BLOCK, N);
    float s = 0.0f;
    for (int n = n0; n < n1; n++) {
        const int t = n % T, u = t - (K - 1) + j;
        if (u < (DOC ? doc[n] : 0)) continue;
        const size_t m = (size_t)n * C + c;
        s += dout[m] * gdn_silu_grad(pre[m]) * x[(size_t)(n - t + u) * C + c];
    }
    part[(size_t)blk * C * K + col] = s;
}

// dx, and dw's block partials into part
template <bool DOC>
static void gdn_conv_backward_launch(float* dx, float* part, const float* dout, const float* x, const float* pre,
                                     const float* w, const int* doc, int B, int T, int C, int K) {
    const size_t n = (size_t)B * T * C;
    gdn_conv_backward_dx_kernel<DOC><<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(dx, dout, pre, w, B, T, C, K, doc);
    CUDA_LAUNCH_CHECK("gdn_conv_backward_dx_kernel");
    const int nb = (B * T + GDN_RED_BLOCK - 1) / GDN_RED_BLOCK, CK = C * K;
    dim3 grid(nb, cuda_blocks((size_t)CK, 128));
    gdn_conv_backward_dw_kernel<DOC><<<grid, 128, 0, cuda_stream>>>(part, dout, pre, x, B, T, C, K, doc);
    CUDA_LAUNCH_CHECK("gdn_conv_backward_dw_kernel");
}

extern "C" void ops_conv1d_silu_backward(float* dx, float* dw, const float* dout, const float* x, const float* pre,
                                         const float* w, const int* doc_start, int B, int T, int C, int K) {
    CUDA_OP_TIMER("ops_conv1d_silu_backward");
    const size_t n = (size_t)B * T * C;
    if (n == 0) return;
    const int nb = (B * T + GDN_RED_BLOCK - 1) / GDN_RED_BLOCK, CK = C * K;
    float* part = (float*)cuda_scratch(CUDA_SCRATCH_GDN_PART, cuda_gdn_part_bytes((size_t)B * T, (size_t)CK));
    if (doc_start) gdn_conv_backward_launch<true>(dx, part, dout, x, pre, w, doc_start, B, T, C, K);
    else gdn_conv_backward_launch<false>(dx, part, dout, x, pre, w, NULL, B, T, C, K);
    gdn_reduce_blocks_kernel<<<cuda_blocks((size_t)CK, 128), 128, 0, cuda_stream>>>(dw, part, nb, CK, CK);
    CUDA_LAUNCH_CHECK("gdn_reduce_blocks_kernel");
}

// ---------------------------------------------------------------------------------------------
// L2 norm of heads: one warp per (token t, head j), lanes over its n channels (deterministic warp
// sums). y = x r, r = 1 / sqrt(x.x + eps);  backward dx = r dy - r^3 (x.dy) x.
__global__ static void gdn_l2norm_forward_kernel(float* y, float* rinv, const float* x, int N, int heads, int n,
                                                 int ldx, int ldy, float eps) {
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= (size_t)N * heads) return;   // whole warps leave together
    const size_t t = row / heads;
    const int j = (int)(row % heads);
    const float* xr = x + t * ldx + (size_t)j * n;
    float* yr = y + t * ldy + (size_t)j * n;
    float ss = 0.0f;
    for (int i = lane; i < n; i += 32) ss += xr[i] * xr[i];
    const float ri = 1.0f / sqrtf(warp_sum(ss) + eps);
    if (lane == 0) rinv[row] = ri;
    for (int i = lane; i < n; i += 32) yr[i] = xr[i] * ri;
}

extern "C" void ops_l2norm_forward(float* y, float* rinv, const float* x, int N, int heads, int n, int ldx, int ldy,
                                   float eps) {
    CUDA_OP_TIMER("ops_l2norm_forward");
    const size_t rows = (size_t)N * heads;
    if (rows == 0) return;
    gdn_l2norm_forward_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, cuda_stream>>>(y, rinv, x, N, heads, n, ldx, ldy, eps);
    CUDA_LAUNCH_CHECK("gdn_l2norm_forward_kernel");
}

__global__ static void gdn_l2norm_backward_kernel(float* dx, const float* dy, const float* x, const float* rinv, int N,
                                                  int heads, int n, int ldx, int ldy) {
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= (size_t)N * heads) return;
    const size_t t = row / heads;
    const int j = (int)(row % heads);
    const float *xr = x + t * ldx + (size_t)j * n, *gr = dy + t * ldy + (size_t)j * n;
    float* dxr = dx + t * ldx + (size_t)j * n;
    float xg = 0.0f;
    for (int i = lane; i < n; i += 32) xg += xr[i] * gr[i];
    xg = warp_sum(xg);
    const float ri = rinv[row];
    for (int i = lane; i < n; i += 32) dxr[i] = ri * gr[i] - ri * ri * ri * xg * xr[i];
}

extern "C" void ops_l2norm_backward(float* dx, const float* dy, const float* x, const float* rinv, int N, int heads,
                                    int n, int ldx, int ldy) {
    CUDA_OP_TIMER("ops_l2norm_backward");
    const size_t rows = (size_t)N * heads;
    if (rows == 0) return;
    gdn_l2norm_backward_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, cuda_stream>>>(dx, dy, x, rinv, N, heads, n, ldx, ldy);
    CUDA_LAUNCH_CHECK("gdn_l2norm_backward_kernel");
}

// ---------------------------------------------------------------------------------------------
// Gated RMSNorm (Qwen3NextRMSNormGated): y = x rstd w act(z) per row of n, act the output gate's
// activation (kernels/attn_gate.h, cuda_gate_act). One warp per row.
__global__ static void gdn_rmsnorm_gated_forward_kernel(float* y, float* rstd, const float* x, const float* z,
                                                        const float* w, int rows, int n, float eps, int act) {
    const int r = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n;
    float ss = 0.0f;
    for (int i = lane; i < n; i += 32) ss += xr[i] * xr[i];
    const float rs = 1.0f / sqrtf(warp_sum(ss) / n + eps);
    if (lane == 0) rstd[r] = rs;
    for (int i = lane; i < n; i += 32) y[(size_t)r * n + i] = xr[i] * rs * w[i] * cuda_gate_act(act, zr[i]);
}

extern "C" void ops_rmsnorm_gated_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int rows,
                                          int n, float eps, OpsGateAct act) {
    CUDA_OP_TIMER("ops_rmsnorm_gated_forward");
    if (rows <= 0) return;
    gdn_rmsnorm_gated_forward_kernel<<<cuda_blocks((size_t)rows * 32, 256), 256, 0, cuda_stream>>>(
        y, rstd, x, z, w, rows, n, eps, (int)act);
    CUDA_LAUNCH_CHECK("gdn_rmsnorm_gated_forward_kernel");
}

// y_i = x_i r w_i s_i (s = act(z)):  dz_i = dy_i x_i r w_i act'(z_i);
// with h_i = dy_i w_i s_i:  dx = r h - r^3 (x.h / n) x. One warp per row.
__global__ static void gdn_rmsnorm_gated_backward_kernel(float* dx, float* dz, const float* dy, const float* x,
                                                         const float* z, const float* w, const float* rstd, int rows,
                                                         int n, int act) {
    const int r = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n, *gr = dy + (size_t)r * n;
    const float rs = rstd[r];
    float xh = 0.0f;
    for (int i = lane; i < n; i += 32) xh += xr[i] * gr[i] * w[i] * cuda_gate_act(act, zr[i]);
    xh = warp_sum(xh);
    for (int i = lane; i < n; i += 32) {
        const float s = cuda_gate_act(act, zr[i]);
        dz[(size_t)r * n + i] = gr[i] * xr[i] * rs * w[i] * cuda_gate_act_grad(act, zr[i]);
        dx[(size_t)r * n + i] = rs * gr[i] * w[i] * s - rs * rs * rs * xh / n * xr[i];
    }
}

// part[blk][i] = sum over the rows of block blk (in order) of dy x rstd act(z). One thread per
// (block of rows, channel).
__global__ static void gdn_rmsnorm_gated_dw_kernel(float* part, const float* dy, const float* x, const float* z,
                                                   const float* rstd, int rows, int n, int act) {
    const int i = blockIdx.y * blockDim.x + threadIdx.x, blk = blockIdx.x;
    if (i >= n) return;
    const int r0 = blk * GDN_RED_BLOCK, r1 = min(r0 + GDN_RED_BLOCK, rows);
    float s = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t m = (size_t)r * n + i;
        s += dy[m] * x[m] * rstd[r] * cuda_gate_act(act, z[m]);
    }
    part[(size_t)blk * n + i] = s;
}

extern "C" void ops_rmsnorm_gated_backward(float* dx, float* dz, float* dw, const float* dy, const float* x,
                                           const float* z, const float* w, const float* rstd, int rows, int n,
                                           OpsGateAct act) {
    CUDA_OP_TIMER("ops_rmsnorm_gated_backward");
    if (rows <= 0 || n <= 0) return;
    gdn_rmsnorm_gated_backward_kernel<<<cuda_blocks((size_t)rows * 32, 256), 256, 0, cuda_stream>>>(
        dx, dz, dy, x, z, w, rstd, rows, n, (int)act);
    CUDA_LAUNCH_CHECK("gdn_rmsnorm_gated_backward_kernel");
    const int nb = (rows + GDN_RED_BLOCK - 1) / GDN_RED_BLOCK;
    float* part = (float*)cuda_scratch(CUDA_SCRATCH_GDN_PART, cuda_gdn_part_bytes((size_t)rows, (size_t)n));
    dim3 grid(nb, cuda_blocks((size_t)n, 128));
    gdn_rmsnorm_gated_dw_kernel<<<grid, 128, 0, cuda_stream>>>(part, dy, x, z, rstd, rows, n, (int)act);
    CUDA_LAUNCH_CHECK("gdn_rmsnorm_gated_dw_kernel");
    gdn_reduce_blocks_kernel<<<cuda_blocks((size_t)n, 128), 128, 0, cuda_stream>>>(dw, part, nb, n, n);
    CUDA_LAUNCH_CHECK("gdn_reduce_blocks_kernel");
}
