// kernels/cuda/kv_cache.cu: the KV cache's ops on the GPU (ops.h "KV cache"; model/kv_cache.h
// drives them): writing the new tokens' k and v into the cache, and the attention of the new
// queries over the cached slots. Activations (q, k, v, the cache, qkv, y, yg) are act_t
// (cuda_common.h: fp32, or bf16 under GATEDGPT_ACT_BF16); the kernels compute in fp32 and round
// their stores once; lse and sink are fp32. The math is kernels/cpu/attention.c's.
//   cache:  kc, vc [B, Tc, Hkv*hd]: slot j of sequence b at row b*Tc + j
//   new:    q [N, H*hd], k, v [N, Hkv*hd], qkv [N, QKVG], N = B*T (token n = b*T + t)
// (ops_rope_rows, the rotation of cached rows, lives in attention.cu beside the RoPE tables.)
#include "cuda_common.h"
#include "attention.h"
#include "../rope.h"
#include <math.h>

// ---- write ----------------------------------------------------------------------------------
// kc[b, slot0 + t, :] = k[b*T + t, :] (vc from v), one thread per element of [B, T, Hkv*hd]:
// a strided copy of the stored bits
__global__ void kv_cache_write_kernel(cact_t* kc, cact_t* vc, const cact_t* k, const cact_t* v,
                                      int slot0, int Tc, int T, size_t ldk, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t per_b = (size_t)T * ldk;
    size_t b = i / per_b, rem = i % per_b;   // rem = t * ldk + channel
    size_t dst = (b * Tc + slot0) * ldk + rem;
    kc[dst] = k[i];
    vc[dst] = v[i];
}

void ops_kv_cache_write(act_t* kc, act_t* vc, const act_t* k, const act_t* v, int slot0, int Tc,
                        const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_kv_cache_write");
    if (slot0 < 0 || slot0 + s->T > Tc)
        cuda_fail(__FILE__, __LINE__, "kv cache write: slots slot0 .. slot0 + T - 1 outside the cache's Tc slots",
                  "the cache is full: model/kv_cache.c must evict (or allocate a longer cache) before writing");
    const size_t ldk = (size_t)s->Hkv * s->hd, total = (size_t)s->B * s->T * ldk;
    if (total == 0) return;
    kv_cache_write_kernel<<<cuda_blocks(total, 256), 256, 0, cuda_stream>>>(CACT(kc), CACT(vc), CCACT(k), CCACT(v),
                                                                            slot0, Tc, s->T, ldk, total);
    CUDA_LAUNCH_CHECK("kv_cache_write_kernel");
}

// ---- attention over the cache ---------------------------------------------------------------
// One warp per query row g = (b*H + h)*T + t (the index of lse and sink), KVC_WARPS rows per
// block. Query t sits at slot off + t, off = n_ctx - T, and sees slots 0 .. off + t. The slots
// are walked in chunks of 32 with an online softmax, as attention.cu's forward kernel: lane j
// scores slot u0 + j (its key row read straight from the cache: decoding is memory-bound and
// T small, so nothing is staged but q), then lane j owns channels j, j+32, ... (NC of them) of
// the output, each chunk's probabilities broadcast with a shuffle. Running per lane: max m (the
// same on every lane), partial sums l and, for the F-Attn probe, ls over the slots < n_sink
// (every lane rescales by the same factor, so the partials add up at the end).
#define KVC_WARPS 4
#define KVC_MAX_HD 256

// (launch bounds with 1 block minimum: with the default, ptxas spilled 4-28 bytes in the slot
// loop for some NC on sm_80 or sm_90, which scripts/gpu_report.py fails on)
template <int NC>
__global__ void __launch_bounds__(32 * KVC_WARPS, 1)
attention_cached_forward_kernel(cact_t* y, cact_t* yg, float* lse, float* sink, const cact_t* q,
                                const cact_t* kc, const cact_t* vc, const cact_t* qkv, AttnDims d,
                                int n_ctx, int Tc, int n_sink, float scale) {
    __shared__ float Qs[KVC_WARPS][KVC_MAX_HD];   // each warp's query row, fp32
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = d.hd, T = d.T, H = d.H;
    // 32-bit index arithmetic: N * H rows and Tc * kv_dim fit an int (the host checks)
    const int g = (int)blockIdx.x * KVC_WARPS + warp;
    if (g >= d.N * H) return;   // warp-uniform; no block barrier below
    const int t = g % T, h = (g / T) % H, b = g / (T * H);
    const int kh = h / (H / d.Hkv), last = n_ctx - T + t;   // slots 0..last are visible
    const size_t n = (size_t)b * T + t;
    const int ldk = d.Hkv * hd;   // slot offsets within a sequence fit an int (Tc * ldk: host-checked)
    const cact_t* qr = q + (n * H + h) * hd;
    for (int c = lane; c < hd; c += 32) Qs[warp][c] = act_ld(qr[c]);
    __syncwarp();
    const cact_t* Kb = kc + (size_t)b * Tc * ldk + (size_t)kh * hd;
    const cact_t* Vb = vc + (size_t)b * Tc * ldk + (size_t)kh * hd;

    float m = -INFINITY, l = 0.0f, ls = 0.0f, o[NC];
    #pragma unroll
    for (int e = 0; e < NC; e++) o[e] = 0.0f;
    for (int u0 = 0; u0 <= last; u0 += 32) {
        const int u = u0 + lane;
        float s = -INFINITY;
        if (u <= last) {
            const cact_t* kr = Kb + u * ldk;
            float acc = 0.0f;
            for (int c = 0; c < hd; c++) acc += Qs[warp][c] * act_ld(kr[c]);
            s = acc * scale;
        }
        const float mnew = fmaxf(m, warp_max(s));   // finite: slot u0 <= last is visible
        const float alpha = expf(m - mnew);          // 0 on the first chunk (m = -inf)
        const float p = expf(s - mnew);              // 0 for masked slots
        l = l * alpha + p;
        ls = ls * alpha + (u < n_sink ? p : 0.0f);
        #pragma unroll
        for (int e = 0; e < NC; e++) o[e] *= alpha;
        const int jn = min(32, last - u0 + 1);
        for (int j = 0; j < jn; j++) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
            const cact_t* vr = Vb + (u0 + j) * ldk;
            #pragma unroll
            for (int e = 0; e < NC; e++) {
                const int c = lane + 32 * e;
                if (c < hd) o[e] += pj * act_ld(vr[c]);
            }
        }
        m = mnew;
    }
    // epilogue as attention.cu's forward: normalise, lse, the probe's sink mass, the sdpa gate
    const float L = warp_sum(l), inv = 1.0f / L;
    const float S = warp_sum(ls);
    if (lane == 0) {
        lse[g] = m + logf(L);
        if (sink) sink[g] = S * inv;
    }
    const int sgate = attn_gate_at_sdpa(d.gate, d.gate_pos);
    const cact_t* z = qkv + n * d.QKVG + d.zoff;
    #pragma unroll
    for (int e = 0; e < NC; e++) {
        const int c = lane + 32 * e;
        if (c >= hd) continue;
        float yy = o[e] * inv;
        act_st(&y[(n * H + h) * hd + c], yy);
        // yg from the fp32 y (rounded once, like y)
        if (sgate) yy *= cuda_gate_act(d.gate_act, act_ld(z[attn_gate_logit(d.gate, h, c, hd)]));
        if (yg != y) act_st(&yg[(n * H + h) * hd + c], yy);
    }
}

template <int NC>
static void kvc_forward_launch(cact_t* y, cact_t* yg, float* lse, float* sink, const cact_t* q,
                               const cact_t* kc, const cact_t* vc, const cact_t* qkv, AttnDims d,
                               int n_ctx, int Tc, int n_sink, float scale) {
    size_t rows = (size_t)d.N * d.H;
    attention_cached_forward_kernel<NC><<<cuda_blocks(rows, KVC_WARPS), 32 * KVC_WARPS, 0, cuda_stream>>>(
        y, yg, lse, sink, q, kc, vc, qkv, d, n_ctx, Tc, n_sink, scale);
    CUDA_LAUNCH_CHECK("attention_cached_forward_kernel");
}

void ops_attention_cached_forward(act_t* y_, act_t* yg_, float* lse, float* sink, const act_t* q_,
                                  const act_t* kc_, const act_t* vc_, const act_t* qkv_, int n_ctx,
                                  int Tc, int n_sink, const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attention_cached_forward");
    if (s->B <= 0 || s->T <= 0 || s->H <= 0) return;   // no new queries: nothing to compute
    if (s->hd < 1 || s->hd > KVC_MAX_HD)
        cuda_fail(__FILE__, __LINE__, "cached attention: head_dim outside 1..256",
                  "the kernel keeps a query row of head_dim floats in shared memory and 32 lanes x 8 registers");
    if (s->Hkv < 1 || s->H % s->Hkv != 0)
        cuda_fail(__FILE__, __LINE__, "cached attention: n_head must be a multiple of n_kv_head", "fix the config");
    if (n_ctx < s->T || n_ctx > Tc)
        cuda_fail(__FILE__, __LINE__, "cached attention: needs T <= n_ctx <= Tc",
                  "write the T new tokens into the cache (ops_kv_cache_write) before attending over it");
    if ((long long)Tc * s->Hkv * s->hd > 0x7fffffffLL)
        cuda_fail(__FILE__, __LINE__, "cached attention: cache slots x kv_dim exceed 2^31",
                  "use a shorter context (the kernel indexes a sequence's slots with 32-bit ints)");
    if ((long long)s->B * s->T * s->H > 0x7fffffffLL - 32 * KVC_WARPS)
        cuda_fail(__FILE__, __LINE__, "cached attention: B * T * n_head exceeds 2^31",
                  "feed fewer new tokens per forward (the kernel indexes its rows with 32-bit ints)");
    AttnDims d;
    d.N = s->B * s->T; d.T = s->T; d.H = s->H; d.Hkv = s->Hkv; d.hd = s->hd;
    d.QKVG = attn_shape_qkv_cols(s); d.zoff = attn_shape_z_off(s);
    d.qk_norm = s->qk_norm; d.rope = s->rope; d.gate = s->gate; d.gate_pos = s->gate_pos;
    d.gate_act = s->gate_act; d.eps = s->eps; d.rot = rope_rot_dim(s);
    const float scale = 1.0f / sqrtf((float)s->hd);
    cact_t *y = CACT(y_), *yg = CACT(yg_);
    const cact_t *q = CCACT(q_), *kc = CCACT(kc_), *vc = CCACT(vc_), *qkv = CCACT(qkv_);
    const int nc = (s->hd + 31) / 32;
    if (nc <= 1) kvc_forward_launch<1>(y, yg, lse, sink, q, kc, vc, qkv, d, n_ctx, Tc, n_sink, scale);
    else if (nc <= 2) kvc_forward_launch<2>(y, yg, lse, sink, q, kc, vc, qkv, d, n_ctx, Tc, n_sink, scale);
    else if (nc <= 4) kvc_forward_launch<4>(y, yg, lse, sink, q, kc, vc, qkv, d, n_ctx, Tc, n_sink, scale);
    else kvc_forward_launch<8>(y, yg, lse, sink, q, kc, vc, qkv, d, n_ctx, Tc, n_sink, scale);
}
