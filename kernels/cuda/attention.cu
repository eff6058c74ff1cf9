// kernels/cuda/attention.cu: the attention block's ops on the GPU. Activations (q, k, v, qkv, y,
// yg and their gradients) are act_t (cuda_common.h: fp32, or bf16 under GATEDGPT_ACT_BF16); every
// kernel computes in fp32, reading with act_ld and rounding its stores with act_st; lse, qk_rstd,
// D and the qk-norm weights and their gradients are fp32.
//   prep:      qkv[N, QKVG] -> q, k, v   (qk-norm, RoPE rotate_half at positions pos0 + t with
//              the scaling of kernels/rope.h, value gate); ops_rope_rows rotates cached rows
//   attention: causal GQA softmax attention, tiled with an online softmax (flash-attention
//              style: the T x T matrix never exists), saving the row logsumexp; the sdpa
//              output gate is applied in the forward's epilogue, and its gradient is taken in
//              the first pass of the backward.
// Token n = b*T + t. q[N, H*hd], k/v[N, Hkv*hd]; query head h uses kv head h / (H/Hkv).
// The math is kernels/cpu/attention.c's; the comments there derive it.
//
// This is the simple correct kernel (fp32 CUDA cores and fp32 shared memory whatever the storage,
// one query row per warp at a time,
// attn_impl = fused); attention_flash.cu is the bf16 tensor-core one (attn_impl = flash) and
// attention_cudnn.cpp calls cuDNN's (attn_impl = cudnn), both chosen here.
#include "cuda_common.h"
#include "attention.h"
#include "../rope.h"
#include <cuda_bf16.h>
#include <math.h>

// the gate's column layout, predicates and activation: kernels/attn_gate.h (via cuda_common.h)
int ops_attn_gate_cols(const OpsAttnShape* s) { return attn_shape_gate_cols(s); }
int ops_attn_qkv_cols(const OpsAttnShape* s) { return attn_shape_qkv_cols(s); }

// ---- RoPE tables ----------------------------------------------------------------------------
// rope[t][0][i] = cos, rope[t][1][i] = sin for position pos0 + t, pair i < rot/2 (rot =
// rope_rot_dim: hd, or the first channels of a head under partial RoPE): built on the
// host by kernels/rope.h's rope_table_rows (the base, the scaling, the YaRN attention factor; in
// double, rounded to fp32 once), the same function the CPU backend calls, so the tables are
// bit-identical to the CPU's. Uploaded when anything they depend on changes (hd, base, pos0,
// any OpsRope field) or a longer T is asked for (a table for T rows from pos0 serves every
// shorter T from the same pos0) and kept in a scratch slot, or when the slot was reallocated
// since (a reservation, ops_scratch_reserve: the table is gone); rows of 2 * (rot/2) floats fit
// the slot's hd-sized rows (kernels/scratch.h). KV-cache decoding moves pos0
// every step: a rebuild of T (usually 1) rows. The upload is a cudaMemcpy, ordered after the
// queued kernels that may still read the previous table.
static int rope_T = -1, rope_pos0 = 0;
static OpsAttnShape rope_key;        // hd, rope_dim, rope_base and rope_scale of the cached table
static float* rope_dev = NULL;
static unsigned rope_gen;            // the slot's cuda_scratch_generation when the table was written

static int rope_key_same(const OpsAttnShape* a, const OpsAttnShape* b) {
    const OpsRope *x = &a->rope_scale, *y = &b->rope_scale;
    return a->hd == b->hd && rope_rot_dim(a) == rope_rot_dim(b) && a->rope_base == b->rope_base && x->kind == y->kind &&
           x->factor == y->factor && x->orig_len == y->orig_len && x->beta_fast == y->beta_fast &&
           x->beta_slow == y->beta_slow && x->attn_factor == y->attn_factor;
}

// the table for rows at positions pos0 .. pos0 + T - 1 under s's rotated channels, base and scaling
static const float* rope_tables(const OpsAttnShape* s, int pos0, int T) {
    const int half = rope_rot_dim(s) / 2;
    if (rope_dev && rope_gen == cuda_scratch_generation(CUDA_SCRATCH_ROPE) && T <= rope_T && pos0 == rope_pos0 &&
        rope_key_same(s, &rope_key))
        return rope_dev;
    size_t n = (size_t)T * 2 * half;
    float* host = (float*)malloc(n * sizeof(float) + 4);
    if (!host) { fprintf(stderr, "error: out of host memory for the RoPE tables\n"); exit(1); }
    // row t: cos at host[t * 2 * half], sin half floats further (row stride 2 * half)
    rope_table_rows(host, host + half, 2 * half, T, pos0, s);
    rope_dev = (float*)cuda_scratch(CUDA_SCRATCH_ROPE, cuda_scratch_rope_bytes((size_t)T, (size_t)s->hd));
    ops_from_host(rope_dev, host, n * sizeof(float));   // a cudaMemcpy: ordered after queued kernels
    free(host);
    rope_T = T; rope_pos0 = pos0; rope_key = *s; rope_gen = cuda_scratch_generation(CUDA_SCRATCH_ROPE);
    return rope_dev;
}

// ---- prep -----------------------------------------------------------------------------------
// Per-element formulas so that each lane handles any channel i on its own:
//   forward rotation (pairs i, i + half):  out[i] = a c - b s,  out[i + half] = b c + a s
//   inverse rotation (its transpose):      out[i] = a c + b s,  out[i + half] = b c - a s
// with a = x[i], b = x[i + half], c = cos[t, i], s = sin[t, i], half = rot/2; channels from
// 2*half on (partial RoPE: rot < hd) are not rotated.
static AttnDims attn_dims(const OpsAttnShape* s) {
    AttnDims d;
    d.N = s->B * s->T; d.T = s->T; d.H = s->H; d.Hkv = s->Hkv; d.hd = s->hd;
    d.QKVG = attn_shape_qkv_cols(s); d.zoff = attn_shape_z_off(s);
    d.qk_norm = s->qk_norm; d.rope = s->rope; d.gate = s->gate; d.gate_pos = s->gate_pos;
    d.gate_act = s->gate_act; d.eps = s->eps; d.rot = rope_rot_dim(s);
    return d;
}

// the RoPE table row of token n = b*T + t: t, or t - rdoc[n] when positions restart at each
// document (rdoc: attn_rope_doc; kernels/cpu/attention.c att_rope_row)
__device__ __forceinline__ int att_rope_row(int n, const AttnDims& d, const int* rdoc) {
    return n % d.T - (rdoc ? rdoc[n] : 0);
}

// the document starts the RoPE positions restart at ([data] doc_positions), or NULL
static const int* attn_rope_doc(const OpsAttnShape* s) {
    return s->doc_start && s->doc_rope ? s->doc_start : NULL;
}

// element i of the rotated vector (dir +1) or of its inverse rotation (dir -1), of xs[hd] with
// xs[j] = x[j] * r * w[j] when w is given (qk-norm), else x[j]; the first rot channels turn
// (pairs i, i + rot/2), the others pass; cs == NULL: no rotation.
// x: activations (cact_t) or fp32
template <typename X>
__device__ __forceinline__ float rope_elem(const X* x, const float* w, float r, int i, int rot,
                                           const float* cs, const float* sn, float dir) {
    int half = rot / 2;
    // xs(j) = x[j] * r * w[j] (qk-norm) or x[j]
    #define XS(j) (w ? act_ld(x[j]) * r * w[j] : act_ld(x[j]))
    if (!cs || i >= 2 * half) return XS(i);
    if (i < half) {
        float a = XS(i), b = XS(i + half), c = cs[i], s = dir * sn[i];
        return a * c - b * s;
    }
    int i0 = i - half;
    float a = XS(i0), b = XS(i), c = cs[i0], s = dir * sn[i0];
    return b * c + a * s;
    #undef XS
}

// One warp per (token n, head slot j): j < H a query head, j < H + Hkv a key head, else a value
// head. qk-norm's sum of squares is a warp sum.
__global__ void attn_prep_forward_kernel(cact_t* q, cact_t* k, cact_t* v, float* qk_rstd,
                                         const cact_t* qkv, const float* qnorm_w,
                                         const float* knorm_w, const float* rope, AttnDims d,
                                         const int* rdoc) {
    const int S = d.H + 2 * d.Hkv, hd = d.hd, half = d.rot / 2;   // half: RoPE pairs (table row 2 * half)
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)d.N * S) return;
    int n = (int)(warp / S), j = (int)(warp % S), t = att_rope_row(n, d, rdoc);
    const cact_t* row = qkv + (size_t)n * d.QKVG;
    if (j < d.H + d.Hkv) {
        int isq = j < d.H;
        const cact_t* src = row + (size_t)j * hd;   // q heads then k heads, contiguous
        cact_t* dst = isq ? q + ((size_t)n * d.H + j) * hd : k + ((size_t)n * d.Hkv + (j - d.H)) * hd;
        float r = 1.0f;
        const float* w = NULL;
        if (d.qk_norm) {
            float ss = 0.0f;
            for (int i = lane; i < hd; i += 32) ss += act_ld(src[i]) * act_ld(src[i]);
            r = 1.0f / sqrtf(warp_sum(ss) / hd + d.eps);
            if (lane == 0) qk_rstd[(size_t)n * (d.H + d.Hkv) + j] = r;
            w = isq ? qnorm_w : knorm_w;
        }
        const float* cs = d.rope ? rope + (size_t)t * 2 * half : NULL;
        const float* sn = d.rope ? cs + half : NULL;
        for (int i = lane; i < hd; i += 32) act_st(&dst[i], rope_elem(src, w, r, i, d.rot, cs, sn, 1.0f));
    } else {
        int kh = j - d.H - d.Hkv;
        const cact_t* vs = row + attn_v_off(d.H, d.Hkv, hd) + (size_t)kh * hd;
        cact_t* vd = v + ((size_t)n * d.Hkv + kh) * hd;
        int vgate = attn_gate_at_value(d.gate, d.gate_pos);
        for (int i = lane; i < hd; i += 32) {
            float g = 1.0f;
            if (vgate) g = cuda_gate_act(d.gate_act, act_ld(row[d.zoff + attn_gate_logit(d.gate, kh, i, hd)]));
            act_st(&vd[i], act_ld(vs[i]) * g);
        }
    }
}

void ops_attn_prep_forward(act_t* q, act_t* k, act_t* v, float* qk_rstd, const act_t* qkv,
                           const float* qnorm_w, const float* knorm_w, const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attn_prep_forward");
    AttnDims d = attn_dims(s);
    const float* rope = s->rope ? rope_tables(s, s->pos0, s->T) : NULL;
    size_t warps = (size_t)d.N * (d.H + 2 * d.Hkv);
    attn_prep_forward_kernel<<<cuda_blocks(warps * 32, 256), 256, 0, cuda_stream>>>(
        CACT(q), CACT(k), CACT(v), qk_rstd, CCACT(qkv), qnorm_w, knorm_w, rope, d, attn_rope_doc(s));
    CUDA_LAUNCH_CHECK("attn_prep_forward_kernel");
}

// Backward of prep, one warp per (n, head slot), writing dqkv's q, k, v (and value-gate z)
// columns:  buf = inverse-rotated dq (or dk);  qk-norm: dx = r (w buf - x r^2 mean(w buf x)).
__global__ void attn_prep_backward_kernel(cact_t* dqkv, const cact_t* dq, const cact_t* dk,
                                          const cact_t* dv, const cact_t* qkv, const float* qk_rstd,
                                          const float* qnorm_w, const float* knorm_w,
                                          const float* rope, AttnDims d, const int* rdoc) {
    const int S = d.H + 2 * d.Hkv, hd = d.hd, half = d.rot / 2;   // half: RoPE pairs (table row 2 * half)
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)d.N * S) return;
    int n = (int)(warp / S), j = (int)(warp % S), t = att_rope_row(n, d, rdoc);
    const cact_t* row = qkv + (size_t)n * d.QKVG;
    cact_t* drow = dqkv + (size_t)n * d.QKVG;
    if (j < d.H + d.Hkv) {
        int isq = j < d.H;
        const cact_t* g = isq ? dq + ((size_t)n * d.H + j) * hd : dk + ((size_t)n * d.Hkv + (j - d.H)) * hd;
        const float* cs = d.rope ? rope + (size_t)t * 2 * half : NULL;
        const float* sn = d.rope ? cs + half : NULL;
        const cact_t* x = row + (size_t)j * hd;
        cact_t* dx = drow + (size_t)j * hd;
        if (d.qk_norm) {
            const float* w = isq ? qnorm_w : knorm_w;
            float r = qk_rstd[(size_t)n * (d.H + d.Hkv) + j];
            float sgx = 0.0f;
            for (int i = lane; i < hd; i += 32) sgx += w[i] * rope_elem(g, NULL, 1.0f, i, d.rot, cs, sn, -1.0f) * act_ld(x[i]);
            float c = r * r * warp_sum(sgx) / hd;
            for (int i = lane; i < hd; i += 32) {
                float b = rope_elem(g, NULL, 1.0f, i, d.rot, cs, sn, -1.0f);
                act_st(&dx[i], r * (w[i] * b - act_ld(x[i]) * c));
            }
        } else {
            for (int i = lane; i < hd; i += 32) act_st(&dx[i], rope_elem(g, NULL, 1.0f, i, d.rot, cs, sn, -1.0f));
        }
    } else {
        // v' = v * a(z)
        int kh = j - d.H - d.Hkv;
        const cact_t* vs = row + attn_v_off(d.H, d.Hkv, hd) + (size_t)kh * hd;
        cact_t* dvs = drow + attn_v_off(d.H, d.Hkv, hd) + (size_t)kh * hd;
        const cact_t* dvn = dv + ((size_t)n * d.Hkv + kh) * hd;
        int vgate = attn_gate_at_value(d.gate, d.gate_pos);
        if (!vgate) {
            for (int i = lane; i < hd; i += 32) dvs[i] = dvn[i];   // same storage: a copy
        } else if (d.gate == OPS_GATE_ELEMENTWISE) {
            for (int i = lane; i < hd; i += 32) {
                float z = act_ld(row[d.zoff + kh * hd + i]), g = act_ld(dvn[i]);
                act_st(&dvs[i], g * cuda_gate_act(d.gate_act, z));
                act_st(&drow[d.zoff + kh * hd + i], g * act_ld(vs[i]) * cuda_gate_act_grad(d.gate_act, z));
            }
        } else {
            float z = act_ld(row[d.zoff + kh]), a = cuda_gate_act(d.gate_act, z), acc = 0.0f;
            for (int i = lane; i < hd; i += 32) {
                float g = act_ld(dvn[i]);
                act_st(&dvs[i], g * a);
                acc += g * act_ld(vs[i]);
            }
            acc = warp_sum(acc);
            if (lane == 0) act_st(&drow[d.zoff + kh], acc * cuda_gate_act_grad(d.gate_act, z));
        }
    }
}

// qk-norm weight gradients, deterministic: part[blk][2*hd] = sum over the 64-row block's rows
// (in order) and its q heads (or k heads, in order) of buf[i] * x[i] * r; one thread per
// (block, i) with i < hd for q_norm.w, hd <= i < 2hd for k_norm.w. The CPU backend uses the
// same blocks and order.
#define ATTN_RED_BLOCK CUDA_ATTN_RED_BLOCK   // kernels/scratch.h
__global__ void attn_qknorm_partial_kernel(float* part, const cact_t* dq, const cact_t* dk,
                                           const cact_t* qkv, const float* qk_rstd,
                                           const float* rope, AttnDims d, const int* rdoc) {
    const int hd = d.hd, half = d.rot / 2;   // half: RoPE pairs (table row 2 * half)
    int blk = blockIdx.x, i2 = blockIdx.y * blockDim.x + threadIdx.x;
    if (i2 >= 2 * hd) return;
    int isq = i2 < hd, i = isq ? i2 : i2 - hd;
    int n0 = blk * ATTN_RED_BLOCK, n1 = min(n0 + ATTN_RED_BLOCK, d.N);
    int h0 = isq ? 0 : d.H, h1 = isq ? d.H : d.H + d.Hkv;
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) {
        int t = att_rope_row(n, d, rdoc);
        const float* cs = d.rope ? rope + (size_t)t * 2 * half : NULL;
        const float* sn = d.rope ? cs + half : NULL;
        for (int h = h0; h < h1; h++) {
            const cact_t* g = isq ? dq + ((size_t)n * d.H + h) * hd : dk + ((size_t)n * d.Hkv + (h - d.H)) * hd;
            float b = rope_elem(g, NULL, 1.0f, i, d.rot, cs, sn, -1.0f);
            float x = act_ld(qkv[(size_t)n * d.QKVG + (size_t)h * hd + i]);
            acc += b * x * qk_rstd[(size_t)n * (d.H + d.Hkv) + h];
        }
    }
    part[(size_t)blk * 2 * hd + i2] = acc;
}

// out[i] += sum over blocks (in order) of part[blk][off + i]
__global__ void attn_reduce_blocks_kernel(float* out, const float* part, int nblocks, int stride,
                                          int off, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int b = 0; b < nblocks; b++) s += part[(size_t)b * stride + off + i];
    out[i] += s;
}

void ops_attn_prep_backward(act_t* dqkv, float* dqnorm_w, float* dknorm_w, const act_t* dq,
                            const act_t* dk, const act_t* dv, const act_t* qkv,
                            const float* qk_rstd, const float* qnorm_w, const float* knorm_w,
                            const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attn_prep_backward");
    AttnDims d = attn_dims(s);
    const float* rope = s->rope ? rope_tables(s, s->pos0, s->T) : NULL;
    size_t warps = (size_t)d.N * (d.H + 2 * d.Hkv);
    attn_prep_backward_kernel<<<cuda_blocks(warps * 32, 256), 256, 0, cuda_stream>>>(
        CACT(dqkv), CCACT(dq), CCACT(dk), CCACT(dv), CCACT(qkv), qk_rstd, qnorm_w, knorm_w, rope, d, attn_rope_doc(s));
    CUDA_LAUNCH_CHECK("attn_prep_backward_kernel");
    if (s->qk_norm) {
        int nb = (d.N + ATTN_RED_BLOCK - 1) / ATTN_RED_BLOCK;
        float* part = (float*)cuda_scratch(CUDA_SCRATCH_QKNORM, cuda_scratch_qknorm_bytes((size_t)d.N, (size_t)d.hd));
        dim3 grid(nb, cuda_blocks(2 * d.hd, 64));
        attn_qknorm_partial_kernel<<<grid, 64, 0, cuda_stream>>>(part, CCACT(dq), CCACT(dk), CCACT(qkv), qk_rstd, rope, d, attn_rope_doc(s));
        CUDA_LAUNCH_CHECK("attn_qknorm_partial_kernel");
        attn_reduce_blocks_kernel<<<cuda_blocks(d.hd, 64), 64, 0, cuda_stream>>>(dqnorm_w, part, nb, 2 * d.hd, 0, d.hd);
        CUDA_LAUNCH_CHECK("attn_reduce_blocks_kernel");
        attn_reduce_blocks_kernel<<<cuda_blocks(d.hd, 64), 64, 0, cuda_stream>>>(dknorm_w, part, nb, 2 * d.hd, d.hd, d.hd);
        CUDA_LAUNCH_CHECK("attn_reduce_blocks_kernel");
    }
}

// ---- RoPE on cached rows (ops_rope_rows) ----------------------------------------------------
// x[n_rows, n_heads*hd] in place, row r at position pos0 + r, one thread per (row, head, pair i <
// rot/2): a = x[i], b = x[i + half] -> a c - b s, b c + a s (kernels/cpu/attention.c's
// rope_apply); channels rot .. hd-1 (partial RoPE) are not touched. dir = -1: the transpose (s negated) with cos and sin divided by m2, the YaRN
// attention factor squared (1 otherwise), in fp32 as the CPU divides its table: the inverse of
// m R(theta) is R(-theta) / m.
__global__ void rope_rows_kernel(cact_t* x, const float* rope, int n_rows, int n_heads, int hd,
                                 int rot, float dir, float m2) {
    const int half = rot / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n_rows * n_heads * half) return;
    int i = (int)(idx % half);
    size_t rh = idx / half;                 // row * n_heads + head
    int r = (int)(rh / n_heads);
    const float* cs = rope + (size_t)r * 2 * half;
    float c = cs[i], sn = cs[half + i];
    if (dir < 0.0f) { c /= m2; sn /= m2; }
    float sg = dir * sn;
    cact_t* xh = x + rh * hd;
    float a = act_ld(xh[i]), b = act_ld(xh[i + half]);
    act_st(&xh[i], a * c - b * sg);
    act_st(&xh[i + half], b * c + a * sg);
}

void ops_rope_rows(act_t* x, int n_rows, int n_heads, int pos0, int dir, const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_rope_rows");
    const int half = rope_rot_dim(s) / 2;
    if (n_rows <= 0 || n_heads <= 0 || half == 0) return;
    const float* rope = rope_tables(s, pos0, n_rows);
    const double m = rope_attn_factor(s);
    const float m2 = (float)(m * m);   // the CPU's divisor, rounded the same way
    size_t n = (size_t)n_rows * n_heads * half;
    rope_rows_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(x), rope, n_rows, n_heads, s->hd,
                                                                   2 * half, dir < 0 ? -1.0f : 1.0f, m2);
    CUDA_LAUNCH_CHECK("rope_rows_kernel");
}

// ---- attention ------------------------------------------------------------------------------
// Tiles: a block takes ATT_TILE (32) query rows (forward, dQ) or key rows (dK/dV) of one head,
// 4 warps x ATT_ROWS_PER_WARP (8) rows; the other side is walked in tiles of 32 staged in
// shared memory. Inside a warp, lane j is key (or query) j of the staged tile when scores are
// formed, and lane j owns channels j, j+32, ... (NC of them, hd <= 32*NC) when outputs are
// accumulated; a score is broadcast to the lanes with a shuffle. Staged rows that lanes read
// one row per lane are padded to hd+1 floats (no shared-memory bank conflicts). Shared memory is
// fp32 in both builds: bf16 activations are widened as they are staged.
#define ATT_TILE 32
#define ATT_WARPS 4
#define ATT_ROWS_PER_WARP (ATT_TILE / ATT_WARPS)
#define ATT_THREADS (32 * ATT_WARPS)
#define ATT_MAX_HD 256

// rows [r0, r0+32) of one head of x (row stride ld elements) -> dst[32][dstride] fp32, zero past T
__device__ __forceinline__ void att_stage(float* dst, int dstride, const cact_t* x, size_t ld,
                                          int r0, int T, int hd) {
    for (int idx = threadIdx.x; idx < ATT_TILE * hd; idx += blockDim.x) {
        int rr = idx / hd, c = idx % hd;
        int t = r0 + rr;
        dst[rr * dstride + c] = t < T ? act_ld(x[(size_t)t * ld + c]) : 0.0f;
    }
}

__device__ __forceinline__ float att_dot(const float* a, const float* b, int hd) {
    float s = 0.0f;
    for (int c = 0; c < hd; c++) s += a[c] * b[c];
    return s;
}

// Forward. Grid (T/32, H, B). Online softmax per query row: running max m, per-lane partial
// sum l (every lane scales by the same factor, so the partials add up at the end), output o.
template <int NC, bool DOC>
__global__ void __launch_bounds__(ATT_THREADS)
attention_forward_kernel(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                         const cact_t* v, const cact_t* qkv, AttnDims d, float scale, const int* doc_start) {
    extern __shared__ float smem[];
    const int hd = d.hd, T = d.T, H = d.H, Hkv = d.Hkv;
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_TILE, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* Qs = smem;                        // [32][hd]    read by row (broadcast)
    float* Ks = Qs + ATT_TILE * hd;          // [32][hd+1]  read one row per lane
    float* Vs = Ks + ATT_TILE * (hd + 1);    // [32][hd]    read by row, channels over lanes
    const size_t ldq = (size_t)H * hd, ldk = (size_t)Hkv * hd;
    att_stage(Qs, hd, q + (size_t)b * T * ldq + (size_t)h * hd, ldq, t0, T, hd);

    float m[ATT_ROWS_PER_WARP], l[ATT_ROWS_PER_WARP], o[ATT_ROWS_PER_WARP][NC];
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        m[r] = -INFINITY; l[r] = 0.0f;
        for (int e = 0; e < NC; e++) o[r][e] = 0.0f;
    }
    const int last = min(t0 + ATT_TILE, T) - 1;   // the block's last query sees keys 0..last
    // the document mask (DOC: doc_start is set): query t sees keys doc[t] .. t; the block's first
    // query has the smallest doc[t] (non-decreasing), so the key tiles before its tile are skipped
    // whole. DOC = false compiles to the plain causal kernel (no doc read, no extra register).
    const int* doc = doc_start + (size_t)b * T;
    const int ubeg = DOC ? doc[t0] / ATT_TILE * ATT_TILE : 0;
    for (int u0 = ubeg; u0 <= last; u0 += ATT_TILE) {
        __syncthreads();   // the previous tile is no longer read (and Qs is staged)
        att_stage(Ks, hd + 1, k + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);
        att_stage(Vs, hd, v + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
            const int rr = warp * ATT_ROWS_PER_WARP + r, t = t0 + rr;
            if (t >= T || t < u0) continue;   // warp-uniform: no key of this tile is visible
            const int lo = DOC ? doc[t] : 0;   // the first key of t's document
            if (DOC && lo >= u0 + ATT_TILE) continue;   // (warp-uniform too)
            const int u = u0 + lane;
            float s = u <= t && (!DOC || u >= lo) ? att_dot(Qs + rr * hd, Ks + lane * (hd + 1), hd) * scale : -INFINITY;
            float mnew = fmaxf(m[r], warp_max(s));
            float alpha = expf(m[r] - mnew);   // 0 on the first visible tile (m = -inf)
            float p = expf(s - mnew);          // 0 for masked keys
            l[r] = l[r] * alpha + p;
            #pragma unroll
            for (int e = 0; e < NC; e++) o[r][e] *= alpha;
            const int jn = min(ATT_TILE, t - u0 + 1);
            for (int j = 0; j < jn; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
                #pragma unroll
                for (int e = 0; e < NC; e++) {
                    int c = lane + 32 * e;
                    if (c < hd) o[r][e] += pj * Vs[j * hd + c];
                }
            }
            m[r] = mnew;
        }
    }
    // epilogue: normalise, save lse, apply the sdpa gate
    // (loops over r are unrolled with compile-time indices everywhere, so that m, l and o stay in
    // registers: a run-time index, or a `break`, moves them to local memory)
    const int sgate = attn_gate_at_sdpa(d.gate, d.gate_pos);
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        const int t = t0 + warp * ATT_ROWS_PER_WARP + r;
        if (t >= T) continue;
        const float L = warp_sum(l[r]);
        const float inv = 1.0f / L;
        const size_t n = (size_t)b * T + t;
        if (lane == 0) lse[((size_t)b * H + h) * T + t] = m[r] + logf(L);
        const cact_t* z = qkv + n * d.QKVG + d.zoff;
        #pragma unroll
        for (int e = 0; e < NC; e++) {
            int c = lane + 32 * e;
            if (c >= hd) continue;
            float yy = o[r][e] * inv;
            act_st(&y[(n * H + h) * hd + c], yy);
            // yg from the fp32 y (rounded once, like y)
            if (sgate) yy *= cuda_gate_act(d.gate_act, act_ld(z[attn_gate_logit(d.gate, h, c, hd)]));
            if (yg != y) act_st(&yg[(n * H + h) * hd + c], yy);
        }
    }
}

// Backward, pass 1, one warp per (n, h): the sdpa gate's backward and D = dy . y.
//   dy = dyg * a(z) (into scratch);  dz = dyg * y * a'(z) (per channel, or summed over hd)
// D is summed over dy as stored (rounded to act_t: the dy that the dQ and dK/dV kernels read),
// so that sum_u P_tu dP_tu = D holds for the stored values.
__global__ void attention_backward_pre_kernel(cact_t* dy, float* D, cact_t* dqkv, const cact_t* dyg,
                                              const cact_t* y, const cact_t* qkv, AttnDims d) {
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)d.N * d.H) return;
    const int hd = d.hd;
    int n = (int)(warp / d.H), h = (int)(warp % d.H);
    const cact_t* gy = dyg + ((size_t)n * d.H + h) * hd;
    const cact_t* yy = y + ((size_t)n * d.H + h) * hd;
    const int sgate = attn_gate_at_sdpa(d.gate, d.gate_pos);
    float dsum = 0.0f;
    if (!sgate) {
        for (int i = lane; i < hd; i += 32) dsum += act_ld(gy[i]) * act_ld(yy[i]);
    } else {
        const cact_t* z = qkv + (size_t)n * d.QKVG + d.zoff;
        cact_t* dz = dqkv + (size_t)n * d.QKVG + d.zoff;
        cact_t* o = dy + ((size_t)n * d.H + h) * hd;
        if (d.gate == OPS_GATE_ELEMENTWISE) {
            for (int i = lane; i < hd; i += 32) {
                float zz = act_ld(z[h * hd + i]), g = act_ld(gy[i]), yi = act_ld(yy[i]);
                float dyi = attn_act_round(g * cuda_gate_act(d.gate_act, zz));
                act_st(&o[i], dyi);
                act_st(&dz[h * hd + i], g * yi * cuda_gate_act_grad(d.gate_act, zz));
                dsum += dyi * yi;
            }
        } else {
            float zh = act_ld(z[h]), a = cuda_gate_act(d.gate_act, zh), acc = 0.0f;
            for (int i = lane; i < hd; i += 32) {
                float g = act_ld(gy[i]), yi = act_ld(yy[i]);
                float dyi = attn_act_round(g * a);
                act_st(&o[i], dyi);
                acc += g * yi;
                dsum += dyi * yi;
            }
            acc = warp_sum(acc);
            if (lane == 0) act_st(&dz[h], acc * cuda_gate_act_grad(d.gate_act, zh));
        }
    }
    dsum = warp_sum(dsum);
    int b = n / d.T, t = n % d.T;
    if (lane == 0) D[((size_t)b * d.H + h) * d.T + t] = dsum;
}

// Backward, dQ. Grid (T/32, H, B), rows = queries; P recomputed from the saved lse:
//   p = exp(s - lse);  ds = p (dp - D) scale, dp = dy . v;  dq = sum_u ds_u k_u
template <int NC, bool DOC>
__global__ void __launch_bounds__(ATT_THREADS)
attention_backward_dq_kernel(cact_t* dq, const cact_t* dy, const cact_t* q, const cact_t* k,
                             const cact_t* v, const float* lse, const float* D, AttnDims d,
                             float scale, const int* doc_start) {
    extern __shared__ float smem[];
    const int hd = d.hd, T = d.T, H = d.H, Hkv = d.Hkv;
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_TILE, kh = h / (H / Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* Qs = smem;                        // [32][hd]    by row
    float* dYs = Qs + ATT_TILE * hd;         // [32][hd]    by row
    float* Ks = dYs + ATT_TILE * hd;         // [32][hd+1]  one row per lane, and by row
    float* Vs = Ks + ATT_TILE * (hd + 1);    // [32][hd+1]  one row per lane
    const size_t ldq = (size_t)H * hd, ldk = (size_t)Hkv * hd;
    att_stage(Qs, hd, q + (size_t)b * T * ldq + (size_t)h * hd, ldq, t0, T, hd);
    att_stage(dYs, hd, dy + (size_t)b * T * ldq + (size_t)h * hd, ldq, t0, T, hd);

    float acc[ATT_ROWS_PER_WARP][NC], Lr[ATT_ROWS_PER_WARP], Dr[ATT_ROWS_PER_WARP];
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        int t = t0 + warp * ATT_ROWS_PER_WARP + r;
        size_t bi = ((size_t)b * H + h) * T + (t < T ? t : 0);
        Lr[r] = lse[bi];
        Dr[r] = D[bi];
        for (int e = 0; e < NC; e++) acc[r][e] = 0.0f;
    }
    const int last = min(t0 + ATT_TILE, T) - 1;
    const int* doc = doc_start + (size_t)b * T;   // the document mask, read only when DOC (as the forward)
    const int ubeg = DOC ? doc[t0] / ATT_TILE * ATT_TILE : 0;
    for (int u0 = ubeg; u0 <= last; u0 += ATT_TILE) {
        __syncthreads();
        att_stage(Ks, hd + 1, k + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);
        att_stage(Vs, hd + 1, v + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
            const int rr = warp * ATT_ROWS_PER_WARP + r, t = t0 + rr;
            if (t >= T || t < u0) continue;
            const int lo = DOC ? doc[t] : 0;
            if (DOC && lo >= u0 + ATT_TILE) continue;
            const int u = u0 + lane;
            float ds = 0.0f;
            if (u <= t && (!DOC || u >= lo)) {
                float p = expf(att_dot(Qs + rr * hd, Ks + lane * (hd + 1), hd) * scale - Lr[r]);
                float dp = att_dot(dYs + rr * hd, Vs + lane * (hd + 1), hd);
                ds = p * (dp - Dr[r]) * scale;
            }
            const int jn = min(ATT_TILE, t - u0 + 1);
            for (int j = 0; j < jn; j++) {
                float dsj = __shfl_sync(0xffffffffu, ds, j);
                #pragma unroll
                for (int e = 0; e < NC; e++) {
                    int c = lane + 32 * e;
                    if (c < hd) acc[r][e] += dsj * Ks[j * (hd + 1) + c];
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        const int t = t0 + warp * ATT_ROWS_PER_WARP + r;
        if (t >= T) continue;
        cact_t* out = dq + ((size_t)b * T + t) * ldq + (size_t)h * hd;
        #pragma unroll
        for (int e = 0; e < NC; e++) {
            int c = lane + 32 * e;
            if (c < hd) act_st(&out[c], acc[r][e]);
        }
    }
}

// Backward, dK and dV. Grid (T/32, Hkv, B), rows = keys of one kv head; for each query head of
// the group (in order) and each query tile from the key tile on (in order):
//   dv_u += sum_t p_tu dy_t;  dk_u += sum_t ds_tu q_t
// One block owns its keys' rows: no atomics, and the order of the sums is fixed.
template <int NC, bool DOC>
__global__ void __launch_bounds__(ATT_THREADS)
attention_backward_dkv_kernel(cact_t* dk, cact_t* dv, const cact_t* dy, const cact_t* q,
                              const cact_t* k, const cact_t* v, const float* lse, const float* D,
                              AttnDims d, float scale, const int* doc_start) {
    extern __shared__ float smem[];
    const int hd = d.hd, T = d.T, H = d.H, Hkv = d.Hkv, rep = H / Hkv;
    const int b = blockIdx.z, kh = blockIdx.y, u0 = blockIdx.x * ATT_TILE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* Ks = smem;                        // [32][hd]    this block's keys, by row
    float* Vs = Ks + ATT_TILE * hd;          // [32][hd]
    float* Qs = Vs + ATT_TILE * hd;          // [32][hd+1]  one row per lane, and by row
    float* dYs = Qs + ATT_TILE * (hd + 1);   // [32][hd+1]
    float* Ls = dYs + ATT_TILE * (hd + 1);   // [32]
    float* Ds = Ls + ATT_TILE;                // [32]
    int* DOCs = (int*)(Ds + ATT_TILE);        // [32 + 1]    DOC only: the query tile's doc[t], then tend
    const size_t ldq = (size_t)H * hd, ldk = (size_t)Hkv * hd;
    att_stage(Ks, hd, k + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);
    att_stage(Vs, hd, v + (size_t)b * T * ldk + (size_t)kh * hd, ldk, u0, T, hd);

    float ak[ATT_ROWS_PER_WARP][NC], av[ATT_ROWS_PER_WARP][NC];
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++)
        for (int e = 0; e < NC; e++) { ak[r][e] = 0.0f; av[r][e] = 0.0f; }
    // the document mask (DOC): t sees u iff doc[t] <= u <= t. doc is non-decreasing, so the
    // queries that see any of this block's keys end at tend, the end of its last key's document.
    // tend and the tile's doc[t] live in shared memory (DOCs), read where used: held in registers
    // across the loop they spill at head_dim <= 64 (and a `break` moves ak, av to local memory)
    const int* doc = doc_start + (size_t)b * T;
    if (DOC && threadIdx.x == 0) DOCs[ATT_TILE] = attn_doc_end(doc, min(u0 + ATT_TILE, T) - 1, T);
    if (DOC) __syncthreads();
    for (int h = kh * rep; h < (kh + 1) * rep; h++) {
        for (int t0 = u0; t0 < (DOC ? DOCs[ATT_TILE] : T); t0 += ATT_TILE) {
            __syncthreads();
            att_stage(Qs, hd + 1, q + (size_t)b * T * ldq + (size_t)h * hd, ldq, t0, T, hd);
            att_stage(dYs, hd + 1, dy + (size_t)b * T * ldq + (size_t)h * hd, ldq, t0, T, hd);
            if (threadIdx.x < ATT_TILE) {
                int t = t0 + threadIdx.x;
                size_t bi = ((size_t)b * H + h) * T + (t < T ? t : 0);
                Ls[threadIdx.x] = lse[bi];
                Ds[threadIdx.x] = D[bi];
                if (DOC) DOCs[threadIdx.x] = t < T ? doc[t] : 0;
            }
            __syncthreads();
            #pragma unroll
            for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
                const int rr = warp * ATT_ROWS_PER_WARP + r, u = u0 + rr;
                if (u >= T) continue;
                const int t = t0 + lane;
                float p = 0.0f, ds = 0.0f;
                if (t < T && t >= u && (!DOC || DOCs[lane] <= u)) {
                    p = expf(att_dot(Qs + lane * (hd + 1), Ks + rr * hd, hd) * scale - Ls[lane]);
                    float dp = att_dot(dYs + lane * (hd + 1), Vs + rr * hd, hd);
                    ds = p * (dp - Ds[lane]) * scale;
                }
                const int jlo = max(0, u - t0), jhi = min(ATT_TILE, T - t0);
                for (int j = jlo; j < jhi; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    float dsj = __shfl_sync(0xffffffffu, ds, j);
                    #pragma unroll
                    for (int e = 0; e < NC; e++) {
                        int c = lane + 32 * e;
                        if (c < hd) {
                            av[r][e] += pj * dYs[j * (hd + 1) + c];
                            ak[r][e] += dsj * Qs[j * (hd + 1) + c];
                        }
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        const int u = u0 + warp * ATT_ROWS_PER_WARP + r;
        if (u >= T) continue;
        cact_t* ok = dk + ((size_t)b * T + u) * ldk + (size_t)kh * hd;
        cact_t* ov = dv + ((size_t)b * T + u) * ldk + (size_t)kh * hd;
        #pragma unroll
        for (int e = 0; e < NC; e++) {
            int c = lane + 32 * e;
            if (c < hd) { act_st(&ok[c], ak[r][e]); act_st(&ov[c], av[r][e]); }
        }
    }
}

// ---- launches -------------------------------------------------------------------------------
static void att_check_shape(const OpsAttnShape* s) {
    if (s->hd < 1 || s->hd > ATT_MAX_HD)
        cuda_fail(__FILE__, __LINE__, "attention: head_dim outside 1..256",
                  "the CUDA attention kernel keeps a row of head_dim floats in 32 lanes x 8 registers");
    if (s->Hkv < 1 || s->H % s->Hkv != 0)
        cuda_fail(__FILE__, __LINE__, "attention: n_head must be a multiple of n_kv_head", "fix the config");
}

// attention within documents ([data] doc_mask) has no cuDNN path here (config_finalize refuses
// the combination first; this is the ops' own guard)
static void att_refuse_cudnn_doc(void) {
    cuda_fail(__FILE__, __LINE__, "attention: the document mask ([data] doc_mask) with attn_impl = cudnn",
              "the cuDNN attention is called without a document mask here: set [train] attn_impl = fused or flash");
}

static int att_nc(int hd) { int nc = (hd + 31) / 32; return nc <= 1 ? 1 : nc <= 2 ? 2 : nc <= 4 ? 4 : 8; }

// Opt in to more than 48 KiB of dynamic shared memory when a head_dim needs it.
template <typename K>
static void att_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int NC, bool DOC>
static void att_forward_launch(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                               const cact_t* v, const cact_t* qkv, AttnDims d, float scale, int B, const int* doc) {
    size_t smem = (size_t)ATT_TILE * (3 * d.hd + 1) * sizeof(float);
    att_smem(attention_forward_kernel<NC, DOC>, smem);
    dim3 grid((d.T + ATT_TILE - 1) / ATT_TILE, d.H, B);
    attention_forward_kernel<NC, DOC><<<grid, ATT_THREADS, smem, cuda_stream>>>(y, yg, lse, q, k, v, qkv, d, scale, doc);
    CUDA_LAUNCH_CHECK("attention_forward_kernel");
}

// the document mask has its own instantiations (DOC = true), so that the plain causal kernels
// stay as they were without it
template <int NC>
static void att_forward_nc(cact_t* y, cact_t* yg, float* lse, const cact_t* q, const cact_t* k,
                           const cact_t* v, const cact_t* qkv, AttnDims d, float scale, int B, const int* doc) {
    if (doc) att_forward_launch<NC, true>(y, yg, lse, q, k, v, qkv, d, scale, B, doc);
    else att_forward_launch<NC, false>(y, yg, lse, q, k, v, qkv, d, scale, B, doc);
}

// The sdpa gate after cuDNN's attention (attn_impl = cudnn; the fused kernel does it in its
// epilogue): yg = y * act(z), one thread per element; without the gate yg = y (when distinct).
// In the bf16 build y is cuDNN's bf16 output, so yg is rounded twice (the other kernels gate
// the unrounded y): within the bf16 bounds of the cuDNN tests.
__global__ void attention_gate_apply_kernel(cact_t* yg, const cact_t* y, const cact_t* qkv, AttnDims d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t Hd = (size_t)d.H * d.hd;
    if (i >= (size_t)d.N * Hd) return;
    size_t n = i / Hd, j = i % Hd;   // j = h * hd + c
    float yy = act_ld(y[i]);
    if (attn_gate_at_sdpa(d.gate, d.gate_pos)) {
        const cact_t* z = qkv + n * d.QKVG + d.zoff;
        yy *= cuda_gate_act(d.gate_act, act_ld(z[attn_gate_logit(d.gate, (int)(j / d.hd), (int)(j % d.hd), d.hd)]));
    }
    act_st(&yg[i], yy);
}

// (the ops take ops.h's act_t pointers, named with a trailing _, and pass them on as cact_t)
void ops_attention_forward(act_t* y_, act_t* yg_, float* lse, const act_t* q_, const act_t* k_,
                           const act_t* v_, const act_t* qkv_, const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attention_forward");
    att_check_shape(s);
    AttnDims d = attn_dims(s);
    if (s->impl == OPS_ATTN_CUDNN) {
        if (s->doc_start) att_refuse_cudnn_doc();
        cuda_cudnn_attention_forward(y_, lse, q_, k_, v_, s);
        if (yg_ != y_) {
            size_t n = (size_t)d.N * d.H * d.hd;
            attention_gate_apply_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(yg_), CCACT(y_), CCACT(qkv_), d);
            CUDA_LAUNCH_CHECK("attention_gate_apply_kernel");
        }
        return;
    }
    cact_t *y = CACT(y_), *yg = CACT(yg_);
    const cact_t *q = CCACT(q_), *k = CCACT(k_), *v = CCACT(v_), *qkv = CCACT(qkv_);
    if (s->impl == OPS_ATTN_FLASH) {   // bf16 tensor cores, the gate in its epilogue
        cuda_flash_attention_forward(y, yg, lse, q, k, v, qkv, d, s->B, s->doc_start);
        return;
    }
    const float scale = 1.0f / sqrtf((float)s->hd);
    switch (att_nc(s->hd)) {
    case 1: att_forward_nc<1>(y, yg, lse, q, k, v, qkv, d, scale, s->B, s->doc_start); break;
    case 2: att_forward_nc<2>(y, yg, lse, q, k, v, qkv, d, scale, s->B, s->doc_start); break;
    case 4: att_forward_nc<4>(y, yg, lse, q, k, v, qkv, d, scale, s->B, s->doc_start); break;
    default: att_forward_nc<8>(y, yg, lse, q, k, v, qkv, d, scale, s->B, s->doc_start); break;
    }
}

template <int NC, bool DOC>
static void att_backward_launch(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const cact_t* q,
                                const cact_t* k, const cact_t* v, const float* lse, const float* D,
                                AttnDims d, float scale, int B, const int* doc) {
    size_t smem_q = (size_t)ATT_TILE * (4 * d.hd + 2) * sizeof(float);
    att_smem(attention_backward_dq_kernel<NC, DOC>, smem_q);
    dim3 gq((d.T + ATT_TILE - 1) / ATT_TILE, d.H, B);
    attention_backward_dq_kernel<NC, DOC><<<gq, ATT_THREADS, smem_q, cuda_stream>>>(dq, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("attention_backward_dq_kernel");
    size_t smem_kv = (size_t)ATT_TILE * (4 * d.hd + 4) * sizeof(float) + (DOC ? (ATT_TILE + 1) * sizeof(int) : 0);
    att_smem(attention_backward_dkv_kernel<NC, DOC>, smem_kv);
    dim3 gkv((d.T + ATT_TILE - 1) / ATT_TILE, d.Hkv, B);
    attention_backward_dkv_kernel<NC, DOC><<<gkv, ATT_THREADS, smem_kv, cuda_stream>>>(dk, dv, dy, q, k, v, lse, D, d, scale, doc);
    CUDA_LAUNCH_CHECK("attention_backward_dkv_kernel");
}

template <int NC>
static void att_backward_nc(cact_t* dq, cact_t* dk, cact_t* dv, const cact_t* dy, const cact_t* q,
                            const cact_t* k, const cact_t* v, const float* lse, const float* D,
                            AttnDims d, float scale, int B, const int* doc) {
    if (doc) att_backward_launch<NC, true>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, B, doc);
    else att_backward_launch<NC, false>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, B, doc);
}

void ops_attention_backward(act_t* dq_, act_t* dk_, act_t* dv_, act_t* dqkv, act_t* scratch_,
                            const act_t* dyg_, const act_t* q_, const act_t* k_, const act_t* v_,
                            const act_t* y_, const float* lse, const act_t* qkv,
                            const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attention_backward");
    att_check_shape(s);
    AttnDims d = attn_dims(s);
    const float scale = 1.0f / sqrtf((float)s->hd);
    const int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    float* D = (float*)cuda_scratch(CUDA_SCRATCH_ATTN_D, cuda_scratch_attn_d_bytes((size_t)d.N, (size_t)d.H));
    size_t warps = (size_t)d.N * d.H;
    attention_backward_pre_kernel<<<cuda_blocks(warps * 32, 256), 256, 0, cuda_stream>>>(
        CACT(scratch_), D, CACT(dqkv), CCACT(dyg_), CCACT(y_), CCACT(qkv), d);
    CUDA_LAUNCH_CHECK("attention_backward_pre_kernel");
    if (s->impl == OPS_ATTN_CUDNN) {   // D is computed again inside cuDNN
        if (s->doc_start) att_refuse_cudnn_doc();
        cuda_cudnn_attention_backward(dq_, dk_, dv_, sgate ? scratch_ : dyg_, q_, k_, v_, y_, lse, s);
        return;
    }
    cact_t *dq = CACT(dq_), *dk = CACT(dk_), *dv = CACT(dv_);
    const cact_t *dy = sgate ? CCACT(scratch_) : CCACT(dyg_);
    const cact_t *q = CCACT(q_), *k = CCACT(k_), *v = CCACT(v_);
    if (s->impl == OPS_ATTN_FLASH) {
        cuda_flash_attention_backward(dq, dk, dv, dy, D, q, k, v, lse, d, s->B, s->doc_start);
        return;
    }
    switch (att_nc(s->hd)) {
    case 1: att_backward_nc<1>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, s->B, s->doc_start); break;
    case 2: att_backward_nc<2>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, s->B, s->doc_start); break;
    case 4: att_backward_nc<4>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, s->B, s->doc_start); break;
    default: att_backward_nc<8>(dq, dk, dv, dy, q, k, v, lse, D, d, scale, s->B, s->doc_start); break;
    }
}
