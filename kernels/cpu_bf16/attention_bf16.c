// kernels/cpu_bf16/attention_bf16.c: the training attention of the fast CPU bf16 backend
// (attention_bf16.h): kernels/cpu/attention.c's query tiles with their products on the bf16 units.
//
// The fp32 kernel's tiles, one task per (b, h) forward and per (b, kv head) backward, each tile a
// few small GEMMs on the calling thread. Here those GEMMs read bf16 q, k, v, dy (bf16mm_local:
// oneDNN's bf16 matmul, fp32 accumulation) from dense per-head copies (head_copy: the strided head
// slices would send them to oneDNN's gemm:jit instead of its brgemm kernels), and the two tile operands the fp32
// kernel keeps in fp32 are rounded to bf16 before their products, as the CUDA flash kernel
// rounds them for its tensor cores (kernels/cuda/attention_flash.cu): the probabilities P
// (before P V and P^T dY) and the scores' gradient dS (before dS K and dS^T Q); with the sdpa
// gate, also dy = dyg * a(z) (before dY V^T and P^T dY). The scores, the softmax, the logsumexp,
// D = dy . y and every sum stay fp32; y, yg, dq, dk, dv are rounded once on the way out. So these
// ops differ from the emulation's (fp32 over the widened inputs) by those roundings and the sums'
// order: tests/test_bf16cpu_ops.c bounds the difference (docs/architecture.md "CPU bf16").
//
// Keys: every tile multiplies keys 0 .. t1-1 (t1: one past the tile's last query), also under
// the document mask, whose earlier keys get P = 0; so the tiles' shapes are a handful per T and
// each thread's primitives are made once (the fp32 kernel starts at the tile's first document).
// bf16 tensors are uint16_t bits here (no act_t), and the softmax is the fp32 kernels' own inline
// code (cpu_common.h, which refuses the bf16 build's act_t switch)
#undef GATEDGPT_ACT_BF16
#include "attention_bf16.h"
#include "matmul_bf16.h"
#include "../bf16.h"
#include "../attn_gate.h"
#include "../scratch.h"
#include "../cpu/cpu_common.h"
#include <string.h>

#define TILE CPU_ATT_TILE   // query rows per tile, as the fp32 kernel

static inline int tile_end(int t0, int T) { return t0 + TILE < T ? t0 + TILE : T; }
// the first key query t of sequence b sees (the document mask), 0 without one
static inline int key_lo(const OpsAttnShape* s, int b, int t) { return s->doc_start ? s->doc_start[(size_t)b * s->T + t] : 0; }
static inline float gate_act(OpsGateAct act, float z) { return attn_gate_act_sg(act, z, cpu_sigmoid(z)); }
static inline float gate_act_grad(OpsGateAct act, float z) { return attn_gate_act_grad_sg(act, z, cpu_sigmoid(z)); }

// one head's rows [T, hd] of a strided [N, ld] tensor into a dense [T, hd] copy: oneDNN 2.6's brgemm
// matmul (its AVX512-BF16 and AMX kernels) takes only dense operands, and gives strided ones to its
// older gemm:jit kernel, which has no AMX path (docs/performance.md, "Packed B and the norms' lanes")
static void head_copy(uint16_t* dst, const uint16_t* src, int ld, int T, int hd) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * hd, src + (size_t)t * ld, (size_t)hd * sizeof(uint16_t));
}

static void* oom_check(void* p) {
    if (!p) { fprintf(stderr, "error: out of host memory in the bf16 attention\n"); exit(1); }
    return p;
}

// y[N, H*hd], yg (== y: no separate gated copy), lse[B, H, T] from bf16 q[N, H*hd], k, v[N, Hkv*hd];
// qkv: the sdpa gate's logits (its z columns)
void bf16_attention_forward(uint16_t* y, uint16_t* yg, float* lse, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const uint16_t* qkv, const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, rep = H / Hkv;
    const int ldq = H * hd, ldk = Hkv * hd, QKVG = attn_shape_qkv_cols(s), zoff = attn_shape_z_off(s);
    const int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    const float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel
    {
        // per thread: S / P fp32 [TILE, T], P bf16 [TILE, T], the tile's output fp32 [TILE, hd], and
        // the head's q, k, v dense [T, hd] (head_copy)
        float* S = oom_check(malloc((size_t)TILE * T * sizeof(float)));
        uint16_t* Pb = oom_check(malloc((size_t)TILE * T * sizeof(uint16_t)));
        float* Yf = oom_check(malloc((size_t)TILE * hd * sizeof(float)));
        uint16_t* Qd = oom_check(malloc((size_t)3 * T * hd * sizeof(uint16_t)));
        uint16_t *Kd = Qd + (size_t)T * hd, *Vd = Kd + (size_t)T * hd;
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                head_copy(Qd, q + (size_t)b * T * ldq + (size_t)h * hd, ldq, T, hd);
                head_copy(Kd, k + (size_t)b * T * ldk + (size_t)(h / rep) * hd, ldk, T, hd);
                head_copy(Vd, v + (size_t)b * T * ldk + (size_t)(h / rep) * hd, ldk, T, hd);
                for (int t0 = 0; t0 < T; t0 += TILE) {
                    const int t1 = tile_end(t0, T), rows = t1 - t0, w = t1;
                    bf16mm_local('N', 'T', rows, w, hd, Qd + (size_t)t0 * hd, hd, Kd, hd, 0.0f, S, w, 0);
                    float* L = lse + ((size_t)b * H + h) * T + t0;
                    for (int r = 0; r < rows; r++) {   // the fp32 kernel's causal softmax (att_scores)
                        float* row = S + (size_t)r * w;
                        const int first = key_lo(s, b, t0 + r), last = t0 + r;
                        for (int u = first; u <= last; u++) row[u] *= scale;
                        float mx = cpu_row_max(row + first, last + 1 - first);
                        float sum = cpu_row_sum_exp(row + first, row + first, last + 1 - first, mx);
                        float inv = 1.0f / sum;
                        uint16_t* pb = Pb + (size_t)r * w;
                        for (int u = 0; u < first; u++) pb[u] = 0;
                        for (int u = first; u <= last; u++) pb[u] = bf16_from_f32(row[u] * inv);
                        for (int u = last + 1; u < w; u++) pb[u] = 0;
                        L[r] = mx + logf(sum);
                    }
                    bf16mm_local('N', 'N', rows, hd, w, Pb, w, Vd, hd, 0.0f, Yf, hd, 0);
                    for (int r = 0; r < rows; r++) {   // y, and yg = y * a(z) from the unrounded y
                        const size_t n = (size_t)b * T + t0 + r;
                        const float* yr = Yf + (size_t)r * hd;
                        uint16_t* yo = y + n * ldq + (size_t)h * hd;
                        uint16_t* ygo = yg + n * ldq + (size_t)h * hd;
                        const uint16_t* z = qkv + n * QKVG + zoff;
                        for (int i = 0; i < hd; i++) {
                            yo[i] = bf16_from_f32(yr[i]);
                            if (yg == y) continue;
                            float g = sgate ? gate_act(s->gate_act, bf16_to_f32(z[attn_gate_logit(s->gate, h, i, hd)])) : 1.0f;
                            ygo[i] = bf16_from_f32(yr[i] * g);
                        }
                    }
                }
            }
        free(S); free(Pb); free(Yf); free(Qd);
    }
}

// dq[N, H*hd], dk, dv[N, Hkv*hd]; the sdpa gate's logits' gradient into dqkv's z columns (its
// other columns untouched). Per tile, with P recomputed from the scores and the saved lse:
//   dP = dY V^T;  dS = P * (dP - D) * scale, D_t = dy_t . y_t
//   dQ = dS K;  dK += dS^T Q;  dV += P^T dY   (dK, dV summed in fp32 over the group's heads)
void bf16_attention_backward(uint16_t* dq, uint16_t* dk, uint16_t* dv, uint16_t* dqkv, const uint16_t* dyg,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* y,
                             const float* lse, const uint16_t* qkv, const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, rep = H / Hkv, N = B * T;
    const int ldq = H * hd, ldk = Hkv * hd, QKVG = attn_shape_qkv_cols(s), zoff = attn_shape_z_off(s);
    const int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    const float scale = 1.0f / sqrtf((float)hd);
    // D[N, H] from the fp32 dy (the emulation's), and with the sdpa gate dy = dyg * a(z) rounded to
    // bf16 for the products, dz = dyg . y * a'(z) rounded into dqkv
    float* D = oom_check(malloc((size_t)N * H * sizeof(float)));
    uint16_t* dyb = sgate ? oom_check(malloc((size_t)N * ldq * sizeof(uint16_t))) : NULL;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t* z = qkv + (size_t)n * QKVG + zoff;
        uint16_t* dz = dqkv + (size_t)n * QKVG + zoff;
        for (int h = 0; h < H; h++) {
            const uint16_t* gy = dyg + ((size_t)n * H + h) * hd;
            const uint16_t* yy = y + ((size_t)n * H + h) * hd;
            float acc = 0.0f;
            if (!sgate) {
                for (int i = 0; i < hd; i++) acc += bf16_to_f32(gy[i]) * bf16_to_f32(yy[i]);
            } else if (s->gate == OPS_GATE_ELEMENTWISE) {
                uint16_t* o = dyb + ((size_t)n * H + h) * hd;
                for (int i = 0; i < hd; i++) {
                    const float zz = bf16_to_f32(z[h * hd + i]), g = bf16_to_f32(gy[i]), yv = bf16_to_f32(yy[i]);
                    const float d = g * gate_act(s->gate_act, zz);
                    acc += d * yv;
                    o[i] = bf16_from_f32(d);
                    dz[h * hd + i] = bf16_from_f32(g * yv * gate_act_grad(s->gate_act, zz));
                }
            } else {
                uint16_t* o = dyb + ((size_t)n * H + h) * hd;
                const float zz = bf16_to_f32(z[h]), a = gate_act(s->gate_act, zz);
                float gdot = 0.0f;
                for (int i = 0; i < hd; i++) {
                    const float g = bf16_to_f32(gy[i]), yv = bf16_to_f32(yy[i]), d = g * a;
                    acc += d * yv;
                    gdot += g * yv;
                    o[i] = bf16_from_f32(d);
                }
                dz[h] = bf16_from_f32(gdot * gate_act_grad(s->gate_act, zz));
            }
            D[(size_t)n * H + h] = acc;
        }
    }
    const uint16_t* dy = sgate ? dyb : dyg;
    #pragma omp parallel
    {
        // per thread: P and dS fp32 [TILE, T], their bf16 copies, dK and dV fp32 [T, hd]
        float* P = oom_check(malloc((size_t)2 * TILE * T * sizeof(float)));
        float* dS = P + (size_t)TILE * T;
        uint16_t* Pb = oom_check(malloc((size_t)2 * TILE * T * sizeof(uint16_t)));
        uint16_t* dSb = Pb + (size_t)TILE * T;
        float* dKf = oom_check(malloc((size_t)2 * T * hd * sizeof(float)));
        float* dVf = dKf + (size_t)T * hd;
        // the head's q, dy, k, v dense [T, hd] (head_copy), and the tile's dq bf16 [TILE, hd]
        uint16_t* Qd = oom_check(malloc(((size_t)4 * T + TILE) * hd * sizeof(uint16_t)));
        uint16_t *dYd = Qd + (size_t)T * hd, *Kd = dYd + (size_t)T * hd, *Vd = Kd + (size_t)T * hd;
        uint16_t* dQd = Vd + (size_t)T * hd;
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++) {
                head_copy(Kd, k + (size_t)b * T * ldk + (size_t)kh * hd, ldk, T, hd);
                head_copy(Vd, v + (size_t)b * T * ldk + (size_t)kh * hd, ldk, T, hd);
                memset(dKf, 0, (size_t)2 * T * hd * sizeof(float));
                for (int h = kh * rep; h < (kh + 1) * rep; h++) {
                    head_copy(Qd, q + (size_t)b * T * ldq + (size_t)h * hd, ldq, T, hd);
                    head_copy(dYd, dy + (size_t)b * T * ldq + (size_t)h * hd, ldq, T, hd);
                    for (int t0 = 0; t0 < T; t0 += TILE) {
                        const int t1 = tile_end(t0, T), rows = t1 - t0, w = t1;
                        const uint16_t* Qt = Qd + (size_t)t0 * hd;
                        const uint16_t* dYt = dYd + (size_t)t0 * hd;
                        const float* L = lse + ((size_t)b * H + h) * T + t0;
                        bf16mm_local('N', 'T', rows, w, hd, Qt, hd, Kd, hd, 0.0f, P, w, 0);
                        bf16mm_local('N', 'T', rows, w, hd, dYt, hd, Vd, hd, 0.0f, dS, w, 0);
                        for (int r = 0; r < rows; r++) {
                            const int first = key_lo(s, b, t0 + r), last = t0 + r;
                            const float Dr = D[((size_t)b * T + t0 + r) * H + h];
                            float* p = P + (size_t)r * w;
                            float* ds = dS + (size_t)r * w;
                            uint16_t* pb = Pb + (size_t)r * w;
                            uint16_t* dsb = dSb + (size_t)r * w;
                            const float Lr = L[r], sc = scale;
                            // one pass per operation, so that each vectorizes (P's exp is most of it)
                            for (int u = first; u <= last; u++) p[u] = cpu_expf(p[u] * sc - Lr);
                            for (int u = first; u <= last; u++) ds[u] = p[u] * (ds[u] - Dr) * sc;
                            for (int u = 0; u < first; u++) { pb[u] = 0; dsb[u] = 0; }
                            for (int u = first; u <= last; u++) pb[u] = bf16_from_f32(p[u]);
                            for (int u = first; u <= last; u++) dsb[u] = bf16_from_f32(ds[u]);
                            for (int u = last + 1; u < w; u++) { pb[u] = 0; dsb[u] = 0; }
                        }
                        bf16mm_local('N', 'N', rows, hd, w, dSb, w, Kd, hd, 0.0f, dQd, hd, 1);
                        for (int r = 0; r < rows; r++)
                            memcpy(dq + ((size_t)b * T + t0 + r) * ldq + (size_t)h * hd, dQd + (size_t)r * hd, hd * sizeof(uint16_t));
                        bf16mm_local('T', 'N', w, hd, rows, dSb, w, Qt, hd, 1.0f, dKf, hd, 0);
                        bf16mm_local('T', 'N', w, hd, rows, Pb, w, dYt, hd, 1.0f, dVf, hd, 0);
                    }
                }
                for (int u = 0; u < T; u++) {
                    uint16_t* dko = dk + ((size_t)b * T + u) * ldk + (size_t)kh * hd;
                    uint16_t* dvo = dv + ((size_t)b * T + u) * ldk + (size_t)kh * hd;
                    for (int i = 0; i < hd; i++) {
                        dko[i] = bf16_from_f32(dKf[(size_t)u * hd + i]);
                        dvo[i] = bf16_from_f32(dVf[(size_t)u * hd + i]);
                    }
                }
            }
        free(P); free(Pb); free(dKf); free(Qd);
    }
    free(D); free(dyb);
}
