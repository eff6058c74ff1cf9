// kernels/scratch.h: what each backend holds besides the model's arenas during a training step,
// as size functions in plain C (no backend header), shared by the kernels that allocate the
// memory and by the memory planner (train/plan.h), which can plan a backend it is not linked
// with (the CPU binary plans the CUDA bf16 layout for `--check --device h200`).
//
//   - ops_malloc's granularity on each backend (what an allocation of n bytes holds);
//   - the CUDA backend's scratch slots (kernels/cuda/memory.cu: one buffer per slot, reserved at
//     the start of a run at the sizes below, so that no op of a step grows one) and the cuBLASLt
//     workspace;
//   - the CPU kernels' temporaries (host mallocs inside one op, freed before it returns; the
//     largest op's set is what a step's peak sees).
// A kernel that asks for scratch calls the function here that gives its size, so the plan and
// the allocation cannot drift; tests/test_planner.sh compares the plan with what the trainers
// allocate (CUDA emulator: to the byte) and with the CPU trainer's peak RSS.
#pragma once
#include <stddef.h>
#include "ops.h"   // OpsStepShape, OPS_SUMSQ_CHUNK
#include "cpu/gemm_small.h"   // cpu_gemm_small_wants_libxsmm (the LIBXSMM allowance)

// ---- allocation granularity --------------------------------------------------------------------
#define SCRATCH_CPU_ALLOC_ALIGN 64     // kernels/cpu/memory.c: posix_memalign(64), size rounded to 64
#define SCRATCH_CUDA_ALLOC_ALIGN 256   // kernels/cuda/memory.cu: cudaMalloc of the size rounded to 256
// The bytes ops_malloc(bytes) holds on a backend of granularity `align` (0 bytes hold one unit).
static inline size_t scratch_alloc_bytes(size_t bytes, size_t align) {
    size_t r = (bytes + align - 1) / align * align;
    return r ? r : align;
}

// ---- the CUDA backend's scratch slots ----------------------------------------------------------
enum {
    CUDA_SCRATCH_NORM = 0,     // norm weight-gradient partials
    CUDA_SCRATCH_ATTN_D,       // attention backward: D = dy . y per (b, h, t)
    CUDA_SCRATCH_QKNORM,       // qk-norm weight-gradient partials
    CUDA_SCRATCH_ROPE,         // RoPE cos/sin tables
    CUDA_SCRATCH_EMB,          // embedding backward: tokens grouped by id
    CUDA_SCRATCH_REDUCE,       // sums of squares, probe partials
    CUDA_SCRATCH_MOE,          // MoE router statistics partials
    CUDA_SCRATCH_CUDNN,        // cuDNN attention: bf16 copies of q, k, v, o (and gradients)
    CUDA_SCRATCH_CUDNN_WS,     // cuDNN attention: the plan's workspace
    CUDA_SCRATCH_GDN_STATE,    // Gated DeltaNet: the delta-rule states in global memory
    CUDA_SCRATCH_GDN_PART,     // Gated DeltaNet: token-sum partials of the gates, conv, gated norm
    CUDA_SCRATCH_COUNT
};
#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)   // cuBLASLt's workspace (what it asks for on Hopper)
#define CUDA_NORM_RED_BLOCK 64       // rows per partial of the norm weight gradients (norm.cu)
#define CUDA_ATTN_RED_BLOCK 64       // rows per partial of the qk-norm weight gradients (attention.cu)
#define CUDA_MOE_STAT_BLOCKS 128     // blocks of the router statistics (moe.cu)
#define CUDA_GDN_CKPT 64             // the delta rule's backward: a state checkpoint every 64 tokens
#define CUDA_GDN_RED_BLOCK 64        // rows per partial of the GDN token sums
#define CUDA_GDN_FWD_COLS 64         // the delta rule's forward: state columns per block
#define CUDA_SMEM_OPTIN_SM90 ((size_t)227 << 10)   // dynamic shared memory per block, H100/H200
#define CUDA_SMEM_OPTIN_SM80 ((size_t)163 << 10)   // A100

static inline size_t cuda_rows_blocks(size_t rows, size_t block) { return (rows + block - 1) / block; }
// norm backward over N rows of C channels: weight (and bias) partials [2][nb][C]
static inline size_t cuda_scratch_norm_bytes(size_t N, size_t C) {
    return 2 * cuda_rows_blocks(N, CUDA_NORM_RED_BLOCK) * C * sizeof(float);
}
// attention prep backward: qk-norm weight partials [nb][2][hd]
static inline size_t cuda_scratch_qknorm_bytes(size_t N, size_t hd) {
    return cuda_rows_blocks(N, CUDA_ATTN_RED_BLOCK) * 2 * hd * sizeof(float);
}
// attention backward: D [N, H]
static inline size_t cuda_scratch_attn_d_bytes(size_t N, size_t H) { return N * H * sizeof(float); }
// RoPE tables for T positions: [T, 2 * (hd / 2)] (+ 4 bytes: a table of T = 0 is not empty)
static inline size_t cuda_scratch_rope_bytes(size_t T, size_t hd) { return T * 2 * (hd / 2) * sizeof(float) + 4; }
// embedding backward over N tokens: positions, sorted ids, sorted positions [3][N] (to 256
// bytes), then CUB's radix-sort storage (cub_temp: what CUB asks for N int pairs)
static inline size_t cuda_scratch_emb_offset(size_t N) { return (3 * N * sizeof(int) + 255) / 256 * 256; }
static inline size_t cuda_scratch_emb_bytes(size_t N, size_t cub_temp) { return cuda_scratch_emb_offset(N) + cub_temp; }
// CUB's storage estimate for a planner that cannot ask CUB (a CPU binary planning the CUDA
// layout): the alternate key and value buffers of a non-double-buffer sort (2 x N ints) and
// 1 MiB for its histograms and tile states. The CUDA binary asks CUB itself.
static inline size_t cuda_cub_sort_estimate(size_t N) { return 2 * N * sizeof(int) + ((size_t)1 << 20); }
// gradient norm over n floats: one double per chunk of OPS_SUMSQ_CHUNK
static inline size_t cuda_scratch_reduce_bytes(size_t n, size_t chunk) { return (n + chunk - 1) / chunk * sizeof(double); }
// MoE router statistics over E experts
static inline size_t cuda_scratch_moe_bytes(size_t E) { return (E + 2 * CUDA_MOE_STAT_BLOCKS) * sizeof(double); }
// The delta rule's shared memory, to decide where its state lives: the forward's state slice
// (dk x CUDA_GDN_FWD_COLS) with 4 dk vectors; the backward's 4 dk + 3 dv vectors, 2 states of
// dk x (dv + 1) and 32 floats of reduction space.
static inline size_t cuda_gdn_fwd_smem_state(size_t dk) { return (4 * dk + dk * CUDA_GDN_FWD_COLS) * sizeof(float); }
static inline size_t cuda_gdn_bwd_smem_vec(size_t dk, size_t dv) { return (4 * dk + 3 * dv) * sizeof(float); }
static inline size_t cuda_gdn_bwd_smem_state(size_t dk, size_t dv) { return 2 * dk * (dv + 1) * sizeof(float); }
static inline size_t cuda_gdn_bwd_smem_red(void) { return 32 * sizeof(float); }
// forward with the state in global memory: [B, Hv, dk, dv]
static inline size_t cuda_gdn_fwd_state_bytes(const OpsGdnShape* s) {
    return (size_t)s->B * s->Hv * s->dk * s->dv * sizeof(float);
}
// backward: per (sequence, key head) the checkpoints and one chunk's states (+ 2 working states
// when they are not in shared memory)
static inline size_t cuda_gdn_bwd_state_bytes(const OpsGdnShape* s, int state_in_smem) {
    const size_t nck = cuda_rows_blocks((size_t)s->T, CUDA_GDN_CKPT);
    const size_t per_block = (nck + CUDA_GDN_CKPT + (state_in_smem ? 0 : 2)) * (size_t)s->dk * s->dv;
    return (size_t)s->B * s->Hk * per_block * sizeof(float);
}
// token-sum partials over `rows` rows of `cols` columns
static inline size_t cuda_gdn_part_bytes(size_t rows, size_t cols) {
    return cuda_rows_blocks(rows, CUDA_GDN_RED_BLOCK) * cols * sizeof(float);
}

// ---- the delta rule's chunked kernels (kernels/cuda/deltanet_chunk.cu) -------------------------
// They run ops_gdn_forward / ops_gdn_backward when s->chunk > 0, dk and dv are 64 or 128 and their
// shared memory fits the device (every case on sm_80 and sm_90); otherwise the recurrent kernels
// above run. Chunks of CUDA_GDN_CHUNK tokens (whatever s->chunk says: the function is the same).
// `opb` is the bytes of one GEMM operand in shared memory and in the scratch: 2 in the bf16 build
// (bf16 tensor-core operands), 4 in the fp32 build (fp32 products on CUDA cores).
#define CUDA_GDN_CHUNK 64
static inline int cuda_gdn_chunk_dims(int dk, int dv) { return (dk == 64 || dk == 128) && (dv == 64 || dv == 128); }
// a staged operand tile of r rows by c columns (rows padded by 8 elements: conflict-free ldmatrix)
static inline size_t cuda_gdn_tile(size_t r, size_t c, size_t opb) { return r * (c + 8) * opb; }
// the six kernels' dynamic shared memory (bytes), as deltanet_chunk.cu's gdn_smem_* compute it
// (it checks that they agree); 16640 = an fp32 64 x 65 work tile, the 64-float vectors at the end
static inline size_t cuda_gdn_chunk_smem(size_t dk, size_t dv, size_t opb) {
    const size_t C = CUDA_GDN_CHUNK, F = C * (C + 1) * 4, mx = dk > dv ? dk : dv;
    const size_t T1 = cuda_gdn_tile(C, dk, opb), Tv = cuda_gdn_tile(C, dv, opb), Tc = cuda_gdn_tile(C, C, opb);
    size_t sm[6], best = 0;
    sm[0] = T1 + Tv + 2 * F + Tc + 3 * C * 4;                                           // wy
    sm[1] = 2 * T1 + cuda_gdn_tile(dk, C, opb) + Tc + 2 * C * 4;                        // state
    sm[2] = T1 + cuda_gdn_tile(C, mx, opb) + cuda_gdn_tile(dk, dv, opb) + Tc + 2 * C * 4;   // out
    sm[3] = 2 * T1 + 3 * Tc + cuda_gdn_tile(dk, C, opb) + 3 * C * 4;                    // dstate
    const size_t s4a = cuda_gdn_tile(dk, dv, opb) > 2 * T1 ? cuda_gdn_tile(dk, dv, opb) : 2 * T1;
    sm[4] = s4a + (Tv > F ? Tv : F) + Tv + 5 * C * 4 + 32 * 4;                           // dqk
    sm[5] = T1 + Tc + Tv + T1 + cuda_gdn_tile(C, mx, opb) + 5 * C * 4;                  // dwy
    for (int i = 0; i < 6; i++) best = sm[i] > best ? sm[i] : best;
    return best;
}
// whether the chunked kernels run for s on a device of smem_optin bytes of shared memory per block
// (recurrent: GATEDGPT_GDN_CHUNK=recurrent, a switch for measurements)
static inline int cuda_gdn_chunked(const OpsGdnShape* s, size_t smem_optin, size_t opb, int recurrent) {
    return !recurrent && s->chunk > 0 && s->T > 0 && cuda_gdn_chunk_dims(s->dk, s->dv) &&
           cuda_gdn_chunk_smem((size_t)s->dk, (size_t)s->dv, opb) <= smem_optin;
}
// Their global scratch (the slot CUDA_SCRATCH_GDN_STATE), per chunk of each (sequence, value head),
// nc = B Hv ceil(T / 64) chunks, each region 256-byte aligned (offsets in bytes):
//   w [nc, 64, dv] (W = T^-1 diag(beta) V);  kc [nc, 64, dk] (Kc = T^-1 diag(beta e^c) K);
//   vn [nc, 64, dv] (the new values W - Kc S);  sh [nc, dk, dv] (the state before the chunk);
//   backward only: tinv [nc, 64, 64] (T^-1);  dvn [nc, 64, dv];  dsh [nc, dk, dv] (dL/dS after
//   the chunk);  dkc [nc, 64, dk];  dc [nc, 64] fp32 (the first kernel's part of dL/dc)
// (operands: opb bytes each)
typedef struct { size_t w, kc, vn, sh, tinv, dvn, dsh, dkc, dc, bytes; } CudaGdnChunkLayout;
static inline CudaGdnChunkLayout cuda_gdn_chunk_layout(const OpsGdnShape* s, size_t opb, int backward) {
    const size_t C = CUDA_GDN_CHUNK, dk = (size_t)s->dk, dv = (size_t)s->dv;
    const size_t nc = (size_t)s->B * s->Hv * cuda_rows_blocks((size_t)s->T, C);
    CudaGdnChunkLayout l;
    size_t at = 0;
#define GDN_REGION(field, n) do { l.field = at; at += ((n) + 255) / 256 * 256; } while (0)
    GDN_REGION(w, nc * C * dv * opb);
    GDN_REGION(kc, nc * C * dk * opb);
    GDN_REGION(vn, nc * C * dv * opb);
    GDN_REGION(sh, nc * dk * dv * opb);
    if (backward) {
        GDN_REGION(tinv, nc * C * C * opb);
        GDN_REGION(dvn, nc * C * dv * opb);
        GDN_REGION(dsh, nc * dk * dv * opb);
        GDN_REGION(dkc, nc * C * dk * opb);
        GDN_REGION(dc, nc * C * 4);
    } else {
        l.tinv = l.dvn = l.dsh = l.dkc = l.dc = 0;
    }
#undef GDN_REGION
    l.bytes = at;
    return l;
}

// The device-side facts the slot sizes depend on beyond the shapes.
typedef struct {
    size_t cub_temp;       // CUB's radix-sort storage for the step's N tokens (asked, or estimated)
    size_t smem_optin;     // the most dynamic shared memory a block may use (CUDA_SMEM_OPTIN_*)
    int gdn_state_global;  // GATEDGPT_GDN_STATE=global: the delta rule keeps its state in global memory
    int gdn_op_bytes;      // the chunked delta rule's operand bytes: 2 (bf16 build), 4 (fp32 build); 0 = 4
    int gdn_recurrent;     // GATEDGPT_GDN_CHUNK=recurrent: chunk > 0 runs the recurrent kernels too
} CudaDeviceFacts;

// Every slot's size for a training step of shape s (0: the step does not use the slot). The
// cuDNN slots are left at 0: their sizes are cuDNN's to decide (attn_impl = cudnn is planned
// without them, and the planner says so).
static inline void cuda_scratch_plan(const OpsStepShape* s, const CudaDeviceFacts* f, size_t slot[CUDA_SCRATCH_COUNT]) {
    for (int i = 0; i < CUDA_SCRATCH_COUNT; i++) slot[i] = 0;
    const size_t N = (size_t)s->B * s->T;
    slot[CUDA_SCRATCH_NORM] = cuda_scratch_norm_bytes(N, (size_t)s->d_model);
    if (s->n_attn > 0) {
        slot[CUDA_SCRATCH_ATTN_D] = cuda_scratch_attn_d_bytes(N, (size_t)s->attn.H);
        if (s->attn.qk_norm) slot[CUDA_SCRATCH_QKNORM] = cuda_scratch_qknorm_bytes(N, (size_t)s->attn.hd);
        if (s->attn.rope) slot[CUDA_SCRATCH_ROPE] = cuda_scratch_rope_bytes((size_t)s->T, (size_t)s->attn.hd);
    }
    slot[CUDA_SCRATCH_EMB] = cuda_scratch_emb_bytes(N, f->cub_temp);
    slot[CUDA_SCRATCH_REDUCE] = cuda_scratch_reduce_bytes(s->n_params, OPS_SUMSQ_CHUNK);
    if (s->n_moe > 0) slot[CUDA_SCRATCH_MOE] = cuda_scratch_moe_bytes((size_t)s->n_expert);
    if (s->n_linear > 0) {
        const OpsGdnShape* g = &s->gdn;
        const size_t dk = (size_t)g->dk, dv = (size_t)g->dv;
        const size_t opb = f->gdn_op_bytes ? (size_t)f->gdn_op_bytes : 4;
        size_t st = 0;
        if (f->gdn_state_global || cuda_gdn_fwd_smem_state(dk) > f->smem_optin) st = cuda_gdn_fwd_state_bytes(g);
        const size_t bwd_all = cuda_gdn_bwd_smem_red() + cuda_gdn_bwd_smem_vec(dk, dv) + cuda_gdn_bwd_smem_state(dk, dv);
        const int bwd_smem = !f->gdn_state_global && bwd_all <= f->smem_optin;
        const size_t sb = cuda_gdn_bwd_state_bytes(g, bwd_smem);
        slot[CUDA_SCRATCH_GDN_STATE] = st > sb ? st : sb;
        if (cuda_gdn_chunked(g, f->smem_optin, opb, f->gdn_recurrent))   // the chunked kernels instead (training: the backward's set)
            slot[CUDA_SCRATCH_GDN_STATE] = cuda_gdn_chunk_layout(g, opb, 1).bytes;
        // the gates [N, 2 Hv], the conv's weight [Cc K] over B T rows, the gated norm [dv] over N Hv rows
        const size_t Cc = 2 * (size_t)g->Hk * dk + (size_t)g->Hv * dv;
        size_t p = cuda_gdn_part_bytes(N, 2 * (size_t)g->Hv);
        size_t q = cuda_gdn_part_bytes(N, Cc * (size_t)s->conv_kernel);
        size_t r = cuda_gdn_part_bytes(N * (size_t)g->Hv, dv);
        if (q > p) p = q;
        if (r > p) p = r;
        slot[CUDA_SCRATCH_GDN_PART] = p;
    }
}

// ---- the CPU kernels' temporaries --------------------------------------------------------------
#define CPU_ATT_TILE 128   // attention (kernels/cpu/attention.c): query rows per tile
#define CPU_GDN_CKPT 64    // the delta rule's recurrent backward (kernels/cpu/deltanet.c): a checkpoint every 64 tokens
// attention backward, per thread: P and dS [CPU_ATT_TILE, T]
static inline size_t cpu_att_bwd_thread_floats(size_t T) { return 2 * CPU_ATT_TILE * T; }
// The delta rule's chunked form (kernels/cpu/deltanet_chunk.c), chunks of C tokens, per thread,
// whose task is a key head with its rep = Hv / Hk value heads.
// What the forward keeps for the backward (ops_gdn_forward's `saved`, when ops_gdn_keeps_saved()):
// the corrected values Vn [B, Hv, T, dv], then the state at each chunk's start as S^T
// [B, Hv, ceil(T / C), dv, dk]
static inline size_t cpu_gdn_chunk_saved_floats(size_t B, size_t T, size_t Hv, size_t dk, size_t dv, size_t C) {
    return C > 0 ? B * Hv * (T * dv + (T + C - 1) / C * dk * dv) : 0;
}
// Forward: rep states [dk, dv], 3 vectors [C], K^T [dk, C], 5 [C, C] (K K^T, Q K^T, P, Ak, Tinv),
// 5 [C, dk] (beta e^c K, Kc, Qd, Kd and K^T's), 3 [C, dv] (beta V, W, Vn) and S^T [dv, dk]
// (the kept state's rows, staged).
static inline size_t cpu_gdn_chunk_fwd_floats(size_t C, size_t dk, size_t dv, size_t rep) {
    return (rep + 1) * dk * dv + 3 * C + 5 * C * C + C * (5 * dk + 3 * dv);
}
// Backward without the forward's kept tensors (saved NULL), per value head and chunk for the
// reverse pass: the state at the chunk's start (as S^T [dv, dk]) and Vn [C, dv]
static inline size_t cpu_gdn_chunk_bwd_stored_floats(size_t C, size_t dk, size_t dv) {
    return dk * dv + C * dv;
}
// Backward: (without kept tensors) rep x ceil(T / C) chunks' stored floats, rep states'
// gradients [dk, dv], then one chunk's temporaries: 2 [dk, dv], 5 [C], 10 [C, C], 9 [C, dk], 4 [C, dv]
static inline size_t cpu_gdn_chunk_bwd_floats(size_t T, size_t C, size_t dk, size_t dv, size_t rep, int kept) {
    const size_t nck = (T + C - 1) / C;
    return rep * ((kept ? 0 : nck * cpu_gdn_chunk_bwd_stored_floats(C, dk, dv)) + dk * dv) + 2 * dk * dv + 5 * C +
           10 * C * C + C * (9 * dk + 4 * dv);
}
// The recurrent form (chunk = 0), per thread. Forward: the state [dk, dv], u and d [dv].
// Backward: the checkpoints [ceil(T / 64), dk, dv], one chunk's states [64, dk, dv], S, dS, dS'
// and 4 vectors of dv.
static inline size_t cpu_gdn_fwd_thread_floats(size_t C, size_t dk, size_t dv, size_t rep) {
    return C > 0 ? cpu_gdn_chunk_fwd_floats(C, dk, dv, rep) : dk * dv + 2 * dv;
}
static inline size_t cpu_gdn_bwd_thread_floats(size_t T, size_t C, size_t dk, size_t dv, size_t rep, int kept) {
    if (C > 0) return cpu_gdn_chunk_bwd_floats(T, C, dk, dv, rep, kept);
    const size_t nck = (T + CPU_GDN_CKPT - 1) / CPU_GDN_CKPT;
    return (nck + CPU_GDN_CKPT + 3) * dk * dv + 4 * dv;
}
// the Gated DeltaNet's causal conv (kernels/cpu/deltanet.c), which walks rows of its C channels:
// the forward's taps transposed [K, C]; the backward's taps, their weight-gradient sum [K, C],
// a partial of it per block of CPU_GDN_CONV_RB rows of a sequence [B ceil(T / 64), K, C] and a
// ring of K rows [K, C] per thread
#define CPU_GDN_CONV_RB 64
static inline size_t cpu_gdn_conv_fwd_floats(size_t C, size_t K) { return K * C; }
static inline size_t cpu_gdn_conv_bwd_floats(size_t B, size_t T, size_t C, size_t K, size_t threads) {
    return (2 + B * ((T + CPU_GDN_CONV_RB - 1) / CPU_GDN_CONV_RB) + threads) * K * C;
}
// The largest set of temporaries one op of a training step of shape s holds at once, bytes,
// over `threads` threads (each thread of a parallel region allocates its own): attention's
// backward tiles, the delta rule's per-thread states, the conv's backward. The other ops' temporaries (RoPE
// tables, weight-gradient partials, the router's per-token entropies) are smaller than these
// for every shape that has them and are covered by the GEMM library allowance below.
static inline size_t cpu_scratch_bytes(const OpsStepShape* s) {
    const size_t th = (size_t)(s->threads > 0 ? s->threads : 1);
    size_t best = 0;
    if (s->n_attn > 0) {
        size_t a = th * cpu_att_bwd_thread_floats((size_t)s->T) * sizeof(float);
        if (a > best) best = a;
    }
    if (s->n_linear > 0) {
        const OpsGdnShape* g = &s->gdn;
        const size_t rep = g->Hk > 0 ? (size_t)(g->Hv / g->Hk) : 1;
        size_t f = th * cpu_gdn_fwd_thread_floats((size_t)g->chunk, (size_t)g->dk, (size_t)g->dv, rep) * sizeof(float);
        // (training's chunked backward has the forward's kept tensors: no per-chunk store)
        size_t b = th * cpu_gdn_bwd_thread_floats((size_t)g->T, (size_t)g->chunk, (size_t)g->dk, (size_t)g->dv, rep, 1) *
                   sizeof(float);
        if (f > best) best = f;
        if (b > best) best = b;
        const size_t Cc = 2 * (size_t)g->Hk * g->dk + (size_t)g->Hv * g->dv;
        size_t cv = cpu_gdn_conv_bwd_floats((size_t)s->B, (size_t)s->T, Cc, (size_t)s->conv_kernel, th) * sizeof(float);
        if (cv > best) best = cv;
    }
    return best;
}
// The GEMM library's own memory (oneDNN's sgemm), allowances measured on the CPU build's host,
// not derived (docs/config.md, "Memory plan"): a forward and a backward GEMM of the shapes of the
// tiny configs (N 256-4096, C 128-1024, OC 1024-32768) left 6.7-7.1 MiB resident after them on
// 1 thread, 6.8-11.1 MiB on 2 (its code and JIT kernels: persistent), and peaked 3.2-13.0 MiB
// above the start on 1 thread, 6.0-23.9 MiB on 2 (the packing buffers of a call: transient).
#define CPU_BLAS_PERSISTENT ((size_t)7 << 20)
#define CPU_BLAS_TRANSIENT_PER_THREAD ((size_t)6 << 20)
static inline size_t cpu_blas_persistent(void) { return CPU_BLAS_PERSISTENT; }
// LIBXSMM's own memory, when the delta rule's chunked products use it (kernels/cpu/gemm_small.c;
// a step with Gated DeltaNet layers and chunk > 0, the engine not GATEDGPT_SMALL_GEMM=blas): an
// allowance measured on the CPU build's host, not derived (docs/config.md, "Memory plan"):
// libxsmm_init's kernel registry left 10.6-10.9 MiB resident (Debian's LIBXSMM 1.17, native
// AVX-512 and LIBXSMM_TARGET=hsw alike), each JIT kernel ~12 KiB more (the chunked form
// dispatches a few dozen shapes); a tiny hybrid's training RSS with it against without: 10.6-11.0
// MiB on 1 and 2 threads. Persistent from the first chunked step on.
#define CPU_SMALL_GEMM_PERSISTENT ((size_t)12 << 20)
static inline size_t cpu_small_gemm_persistent(const OpsStepShape* ss) {
    return ss->n_linear > 0 && ss->gdn.chunk > 0 && cpu_gemm_small_wants_libxsmm() ? CPU_SMALL_GEMM_PERSISTENT : 0;
}
static inline size_t cpu_blas_transient(int threads) {
    return (size_t)(threads > 0 ? threads : 1) * CPU_BLAS_TRANSIENT_PER_THREAD;
}
