// kernels/cpu/attention.c: the attention block's ops on the CPU.
//   prep:      qkv[N, QKVG] -> q, k, v   (qk-norm, RoPE, value gate)
//   attention: causal GQA softmax attention with the optional sdpa output gate; with
//              s->doc_start (attention within documents) query t sees keys doc_start[n] .. t
// Token n = b*T + t. q[N, H*hd], k/v[N, Hkv*hd]; head h of q uses kv head h / (H/Hkv).
// The gate's column layout, predicates and activation: kernels/attn_gate.h.
#include "../ops.h"
#include "../attn_gate.h"
#include "../rope.h"
#include "cpu_common.h"
#include "../scratch.h"
#include <string.h>

int ops_attn_gate_cols(const OpsAttnShape* s) { return attn_shape_gate_cols(s); }
int ops_attn_qkv_cols(const OpsAttnShape* s) { return attn_shape_qkv_cols(s); }

// gate activation a(z) and its derivative a'(z) (attn_gate.h), over the CPU's sigmoid
static inline float gate_act(OpsGateAct act, float z) { return attn_gate_act_sg(act, z, cpu_sigmoid(z)); }
static inline float gate_act_grad(OpsGateAct act, float z) { return attn_gate_act_grad_sg(act, z, cpu_sigmoid(z)); }

// RoPE tables cos/sin[T, rot/2] for positions pos0 .. pos0 + T - 1 (kernels/rope.h: the base,
// the scaling, the rotated channels rot = rope_rot_dim, computed in double).
static void rope_tables_alloc(float** cs, float** sn, int T, int pos0, const OpsAttnShape* s) {
    const int half = rope_rot_dim(s) / 2;
    *cs = cpu_calloc((size_t)T * half, sizeof(float));
    *sn = cpu_calloc((size_t)T * half, sizeof(float));
    rope_table_rows(*cs, *sn, half, T, pos0, s);
}

// x[hd], one head: rotate_half convention within its first rot channels, pairs (i, i + rot/2);
// channels rot .. hd-1 are left as they are (partial RoPE, as transformers' Qwen3-Next).
// dir = +1 forward, -1 inverse (= transpose).
static inline void rope_apply(float* x, const float* cs, const float* sn, int hd, int rot, float dir) {
    float* xr = x;   // the rotated channels: the first rot of the head's hd (the last hd - rot pass)
    (void)hd;        // (named for the layout; only the first rot channels are touched)
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        float a = xr[i], b = xr[i + half], c = cs[i], s = dir * sn[i];
        xr[i] = a * c - b * s;
        xr[i + half] = b * c + a * s;
    }
}

// The RoPE table row of token n = b*T + t (the table holds positions pos0 .. pos0 + T - 1): t, or
// with doc_rope (positions restart at each document) t - doc_start[n], in 0 .. t.
static inline int att_rope_row(int n, int T, const OpsAttnShape* s) {
    const int t = n % T;
    return s->doc_start && s->doc_rope ? t - s->doc_start[n] : t;
}

// The first key a tile of queries starting at token n (= b*T + t0) needs: 0, or under the
// document mask doc_start[n], the smallest of the tile's (doc_start is non-decreasing in t).
static inline int att_key_lo(int n, const OpsAttnShape* s) { return s->doc_start ? s->doc_start[n] : 0; }

// ---------------------------------------------------------------------------------------------
void ops_attn_prep_forward(float* q, float* k, float* v, float* qk_rstd, const float* qkv,
                           const float* qnorm_w, const float* knorm_w, const OpsAttnShape* s) {
    const int N = s->B * s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, T = s->T;
    const int QKVG = ops_attn_qkv_cols(s), rot = rope_rot_dim(s), half = rot / 2;
    const int zoff = attn_shape_z_off(s);
    const int vgate = attn_gate_at_value(s->gate, s->gate_pos);
    float *cs = NULL, *sn = NULL;   // RoPE cos/sin [T, rot/2] (freed below)
    if (s->rope) rope_tables_alloc(&cs, &sn, T, s->pos0, s);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* row = qkv + (size_t)n * QKVG;
        const int t = att_rope_row(n, T, s);
        for (int h = 0; h < H + Hkv; h++) {   // q heads then k heads
            int isq = h < H;
            const float* src = row + (size_t)h * hd;
            float* dst = isq ? q + ((size_t)n * H + h) * hd : k + ((size_t)n * Hkv + (h - H)) * hd;
            if (s->qk_norm) {
                const float* w = isq ? qnorm_w : knorm_w;
                float ss = 0.0f;
                for (int i = 0; i < hd; i++) ss += src[i] * src[i];
                float r = 1.0f / sqrtf(ss / hd + s->eps);
                qk_rstd[(size_t)n * (H + Hkv) + h] = r;
                for (int i = 0; i < hd; i++) dst[i] = src[i] * r * w[i];
            } else {
                for (int i = 0; i < hd; i++) dst[i] = src[i];
            }
            if (s->rope) rope_apply(dst, cs + (size_t)t * half, sn + (size_t)t * half, hd, rot, 1.0f);
        }
        const float* vs = row + attn_v_off(H, Hkv, hd);
        float* vd = v + (size_t)n * Hkv * hd;
        for (int j = 0; j < Hkv * hd; j++) {
            float g = 1.0f;
            if (vgate) {
                g = gate_act(s->gate_act, row[zoff + attn_gate_logit(s->gate, j / hd, j % hd, hd)]);
            }
            vd[j] = vs[j] * g;
        }
    }
    free(cs);
    free(sn);
}

void ops_attn_prep_backward(float* dqkv, float* dqnorm_w, float* dknorm_w, const float* dq,
                            const float* dk, const float* dv, const float* qkv,
                            const float* qk_rstd, const float* qnorm_w, const float* knorm_w,
                            const OpsAttnShape* s) {
    const int N = s->B * s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, T = s->T;
    const int QKVG = ops_attn_qkv_cols(s), rot = rope_rot_dim(s), half = rot / 2;
    const int zoff = attn_shape_z_off(s);
    const int vgate = attn_gate_at_value(s->gate, s->gate_pos);
    float *cs = NULL, *sn = NULL;   // RoPE cos/sin [T, rot/2] (freed below)
    if (s->rope) rope_tables_alloc(&cs, &sn, T, s->pos0, s);
    // per-block partial sums of the qk-norm weight gradients: [nb][2][hd]
    int nb = cpu_nblocks(N);
    float* part = s->qk_norm ? cpu_calloc((size_t)nb * 2 * hd, sizeof(float)) : NULL;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        float buf[hd];
        int n1 = (blk + 1) * CPU_RED_BLOCK < N ? (blk + 1) * CPU_RED_BLOCK : N;
        for (int n = blk * CPU_RED_BLOCK; n < n1; n++) {
            const float* row = qkv + (size_t)n * QKVG;
            float* drow = dqkv + (size_t)n * QKVG;
            const int t = att_rope_row(n, T, s);
            for (int h = 0; h < H + Hkv; h++) {
                int isq = h < H;
                const float* g = isq ? dq + ((size_t)n * H + h) * hd : dk + ((size_t)n * Hkv + (h - H)) * hd;
                for (int i = 0; i < hd; i++) buf[i] = g[i];
                if (s->rope) rope_apply(buf, cs + (size_t)t * half, sn + (size_t)t * half, hd, rot, -1.0f);
                const float* x = row + (size_t)h * hd;
                float* dx = drow + (size_t)h * hd;
                if (s->qk_norm) {
                    // out = x * r * w ;  dx = r * (w*g - x * r^2 * mean(w*g*x))
                    const float* w = isq ? qnorm_w : knorm_w;
                    float* pw = part + ((size_t)blk * 2 + (isq ? 0 : 1)) * hd;
                    float r = qk_rstd[(size_t)n * (H + Hkv) + h];
                    float sgx = 0.0f;
                    for (int i = 0; i < hd; i++) {
                        sgx += w[i] * buf[i] * x[i];
                        pw[i] += buf[i] * x[i] * r;
                    }
                    float c = r * r * sgx / hd;
                    for (int i = 0; i < hd; i++) dx[i] = r * (w[i] * buf[i] - x[i] * c);
                } else {
                    for (int i = 0; i < hd; i++) dx[i] = buf[i];
                }
            }
            // v (and the value gate): v' = v * a(z)
            const float* vs = row + attn_v_off(H, Hkv, hd);
            float* dvs = drow + attn_v_off(H, Hkv, hd);
            const float* dvn = dv + (size_t)n * Hkv * hd;
            if (!vgate) {
                for (int j = 0; j < Hkv * hd; j++) dvs[j] = dvn[j];
            } else if (s->gate == OPS_GATE_ELEMENTWISE) {
                for (int j = 0; j < Hkv * hd; j++) {
                    float z = row[zoff + j];
                    dvs[j] = dvn[j] * gate_act(s->gate_act, z);
                    drow[zoff + j] = dvn[j] * vs[j] * gate_act_grad(s->gate_act, z);
                }
            } else {
                for (int h = 0; h < Hkv; h++) {
                    float z = row[zoff + h], a = gate_act(s->gate_act, z), acc = 0.0f;
                    for (int i = 0; i < hd; i++) {
                        int j = h * hd + i;
                        dvs[j] = dvn[j] * a;
                        acc += dvn[j] * vs[j];
                    }
                    drow[zoff + h] = acc * gate_act_grad(s->gate_act, z);
                }
            }
        }
    }
    if (s->qk_norm) {
        // reduce blocks in order: q weights then k weights
        float* pq = cpu_calloc((size_t)nb * hd, sizeof(float));
        float* pk = cpu_calloc((size_t)nb * hd, sizeof(float));
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < hd; i++) {
                pq[(size_t)b * hd + i] = part[((size_t)b * 2 + 0) * hd + i];
                pk[(size_t)b * hd + i] = part[((size_t)b * 2 + 1) * hd + i];
            }
        cpu_reduce_blocks(dqnorm_w, pq, nb, hd);
        cpu_reduce_blocks(dknorm_w, pk, nb, hd);
        free(pq);
        free(pk);
    }
    free(part);
    free(cs);
    free(sn);
}

// ---------------------------------------------------------------------------------------------
// Attention by query tiles of ATT_TILE rows, each a pair of small GEMMs on the calling thread
// (the tasks are parallel): S = scale * Q_tile K[0:t1]^T, causal softmax in place (P), then
// Y_tile = P V[0:t1]. Keys past the tile's last query are never computed; inside the tile the
// upper triangle is masked to 0. q/k/v rows of one head are strided views ([N, H*hd] layout).
#define ATT_TILE CPU_ATT_TILE   // kernels/scratch.h (the planner counts its tiles)

static inline int att_tile_end(int t0, int T) { return t0 + ATT_TILE < T ? t0 + ATT_TILE : T; }

// S[rows, t1 - u0] (row stride t1 - u0) for queries t0..t0+rows-1 over keys u0..t1-1 (K points
// at key u0) -> P in place, masked; returns lse rows. Query t0 + r sees keys lo .. t0 + r, with
// lo = lo_rows[r] (>= u0; the document mask) or u0 when lo_rows is NULL.
static void att_scores(float* S, float* lse_rows, const float* Q, int ldq, const float* K, int ldk,
                       int t0, int rows, int u0, int t1, const int* lo_rows, int hd, float scale) {
    const int w = t1 - u0;
    cpu_sgemm('N', 'T', rows, w, hd, scale, Q, ldq, K, ldk, 0.0f, S, w);
    for (int r = 0; r < rows; r++) {
        float* row = S + (size_t)r * w;
        int first = (lo_rows ? lo_rows[r] : u0) - u0, last = t0 + r - u0;   // visible: first..last
        float mx = cpu_row_max(row + first, last + 1 - first);
        float sum = cpu_row_sum_exp(row + first, row + first, last + 1 - first, mx);
        float inv = 1.0f / sum;
        for (int u = 0; u < first; u++) row[u] = 0.0f;
        for (int u = first; u <= last; u++) row[u] *= inv;
        for (int u = last + 1; u < w; u++) row[u] = 0.0f;
        lse_rows[r] = mx + logf(sum);
    }
}

// The sdpa gate of head h over the T tokens of sequence b: yg = y * act(z) (or a copy when yg is
// a separate buffer and there is no sdpa gate; nothing when yg aliases y)
static void gate_head(float* yg, const float* y, const float* qkv, int b, int h, const OpsAttnShape* s) {
    const int T = s->T, H = s->H, hd = s->hd, QKVG = ops_attn_qkv_cols(s), zoff = attn_shape_z_off(s);
    const int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    for (int t = 0; t < T && (sgate || yg != y); t++) {
        size_t n = (size_t)b * T + t;
        const float* yt = y + (n * H + h) * hd;
        float* ygt = yg + (n * H + h) * hd;
        const float* z = qkv + n * QKVG + zoff;
        for (int i = 0; i < hd; i++) {
            float g = 1.0f;
            if (sgate) g = gate_act(s->gate_act, z[attn_gate_logit(s->gate, h, i, hd)]);
            ygt[i] = yt[i] * g;
        }
    }
}

// Forward: one task per (b, h), query tiles in order. The attention over a whole sequence is the
// cached attention (below) over a cache that holds exactly the sequence: n_ctx = Tc = T, causal
// offset 0; one code path, the same operations.
void ops_attention_forward(float* y, float* yg, float* lse, const float* q, const float* k,
                           const float* v, const float* qkv, const OpsAttnShape* s) {
    ops_attention_cached_forward(y, yg, lse, NULL, q, k, v, qkv, s->T, s->T, 0, s);
}

// Backward: one task per (b, kv head) so that dk and dv have a single writer; the query heads
// of the group and their tiles are walked in order (deterministic). Per tile, with P recomputed
// from the scores and the saved row logsumexp, P = exp(s - lse):
//   dP = dY V^T;  dS = P * (dP - D) * scale, D_t = dy_t . y_t
//   dQ = dS K;  dK += dS^T Q;  dV += P^T dY
// sdpa gate: dy = dyg * a(z);  dz = dyg . y * a'(z)  (per channel, or summed over hd for headwise)
void ops_attention_backward(float* dq, float* dk, float* dv, float* dqkv, float* scratch,
                            const float* dyg, const float* q, const float* k, const float* v,
                            const float* y, const float* lse, const float* qkv,
                            const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd;
    const int rep = H / Hkv, QKVG = ops_attn_qkv_cols(s), zoff = attn_shape_z_off(s);
    const int sgate = attn_gate_at_sdpa(s->gate, s->gate_pos);
    const int ldq = H * hd, ldk = Hkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float* dy = dyg;
    if (sgate) {
        // dy = dyg * a(z), and the gate logits' gradient into dqkv's z columns
        const int N = B * T;
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* z = qkv + (size_t)n * QKVG + zoff;
            float* dz = dqkv + (size_t)n * QKVG + zoff;
            for (int h = 0; h < H; h++) {
                const float* gy = dyg + ((size_t)n * H + h) * hd;
                const float* yy = y + ((size_t)n * H + h) * hd;
                float* o = scratch + ((size_t)n * H + h) * hd;
                if (s->gate == OPS_GATE_ELEMENTWISE) {
                    for (int i = 0; i < hd; i++) {
                        float zz = z[h * hd + i];
                        o[i] = gy[i] * gate_act(s->gate_act, zz);
                        dz[h * hd + i] = gy[i] * yy[i] * gate_act_grad(s->gate_act, zz);
                    }
                } else {
                    float a = gate_act(s->gate_act, z[h]), acc = 0.0f;
                    for (int i = 0; i < hd; i++) { o[i] = gy[i] * a; acc += gy[i] * yy[i]; }
                    dz[h] = acc * gate_act_grad(s->gate_act, z[h]);
                }
            }
        }
        dy = scratch;
    }
    #pragma omp parallel
    {
        // P and dS [ATT_TILE, T]: cpu_att_bwd_thread_floats (kernels/scratch.h)
        float* P = cpu_calloc(cpu_att_bwd_thread_floats((size_t)T), sizeof(float));
        float* dS = P + (size_t)ATT_TILE * T;
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++) {
                const float* Kb = k + (size_t)b * T * ldk + (size_t)kh * hd;
                const float* Vb = v + (size_t)b * T * ldk + (size_t)kh * hd;
                float* dKb = dk + (size_t)b * T * ldk + (size_t)kh * hd;
                float* dVb = dv + (size_t)b * T * ldk + (size_t)kh * hd;
                for (int u = 0; u < T; u++)
                    for (int i = 0; i < hd; i++) { dKb[(size_t)u * ldk + i] = 0.0f; dVb[(size_t)u * ldk + i] = 0.0f; }
                for (int h = kh * rep; h < (kh + 1) * rep; h++) {
                    const float* Qbh = q + (size_t)b * T * ldq + (size_t)h * hd;
                    const float* Ybh = y + (size_t)b * T * ldq + (size_t)h * hd;
                    const float* dYbh = dy + (size_t)b * T * ldq + (size_t)h * hd;
                    float* dQbh = dq + (size_t)b * T * ldq + (size_t)h * hd;
                    for (int t0 = 0; t0 < T; t0 += ATT_TILE) {
                        int t1 = att_tile_end(t0, T), rows = t1 - t0;
                        // keys u0 .. t1 - 1 (u0 > 0 under the document mask: P's column j is key u0 + j)
                        const int* lo = s->doc_start ? s->doc_start + (size_t)b * T + t0 : NULL;
                        int u0 = att_key_lo(b * T + t0, s), w = t1 - u0;
                        const float* Qt = Qbh + (size_t)t0 * ldq;
                        const float* dYt = dYbh + (size_t)t0 * ldq;
                        const float* L = lse + ((size_t)b * H + h) * T + t0;
                        cpu_sgemm('N', 'T', rows, w, hd, scale, Qt, ldq, Kb + (size_t)u0 * ldk, ldk, 0.0f, P, w);
                        for (int r = 0; r < rows; r++) {
                            float* p = P + (size_t)r * w;
                            int first = (lo ? lo[r] : u0) - u0, last = t0 + r - u0;
                            for (int u = 0; u < first; u++) p[u] = 0.0f;
                            for (int u = first; u <= last; u++) p[u] = cpu_expf(p[u] - L[r]);
                            for (int u = last + 1; u < w; u++) p[u] = 0.0f;
                        }
                        cpu_sgemm('N', 'T', rows, w, hd, 1.0f, dYt, ldq, Vb + (size_t)u0 * ldk, ldk, 0.0f, dS, w);
                        for (int r = 0; r < rows; r++) {
                            const float* dyt = dYt + (size_t)r * ldq;
                            const float* yt = Ybh + (size_t)(t0 + r) * ldq;
                            float D = 0.0f;
                            for (int i = 0; i < hd; i++) D += dyt[i] * yt[i];
                            float* ds = dS + (size_t)r * w;
                            const float* p = P + (size_t)r * w;
                            for (int u = 0; u < w; u++) ds[u] = p[u] * (ds[u] - D) * scale;
                        }
                        cpu_sgemm('N', 'N', rows, hd, w, 1.0f, dS, w, Kb + (size_t)u0 * ldk, ldk, 0.0f, dQbh + (size_t)t0 * ldq,
                                  ldq);
                        cpu_sgemm('T', 'N', w, hd, rows, 1.0f, dS, w, Qt, ldq, 1.0f, dKb + (size_t)u0 * ldk, ldk);
                        cpu_sgemm('T', 'N', w, hd, rows, 1.0f, P, w, dYt, ldq, 1.0f, dVb + (size_t)u0 * ldk, ldk);
                    }
                }
            }
        free(P);
    }
}

// ---------------------------------------------------------------------------------------------
// KV cache (ops.h). Cache rows: kc[(b*Tc + slot) * Hkv*hd].
void ops_kv_cache_write(float* kc, float* vc, const float* k, const float* v, int slot0, int Tc,
                        const OpsAttnShape* s) {
    const size_t ldk = (size_t)s->Hkv * s->hd;
    for (int b = 0; b < s->B; b++) {
        memcpy(kc + ((size_t)b * Tc + slot0) * ldk, k + (size_t)b * s->T * ldk, (size_t)s->T * ldk * sizeof(float));
        memcpy(vc + ((size_t)b * Tc + slot0) * ldk, v + (size_t)b * s->T * ldk, (size_t)s->T * ldk * sizeof(float));
    }
}

// The T new queries over the cache, with att_scores' causal rule shifted by off = n_ctx - T:
// query r of a tile starting at r0 sees keys 0 .. off + r0 + r. One task per (b, h).
void ops_attention_cached_forward(float* y, float* yg, float* lse, float* sink, const float* q,
                                  const float* kc, const float* vc, const float* qkv, int n_ctx,
                                  int Tc, int n_sink, const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, off = n_ctx - T;
    const int rep = H / Hkv;
    const int ldq = H * hd, ldk = Hkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel
    {
        float* S = cpu_calloc((size_t)ATT_TILE * n_ctx, sizeof(float));
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const float* Qbh = q + (size_t)b * T * ldq + (size_t)h * hd;
                const float* Kb = kc + (size_t)b * Tc * ldk + (size_t)(h / rep) * hd;
                const float* Vb = vc + (size_t)b * Tc * ldk + (size_t)(h / rep) * hd;
                float* Ybh = y + (size_t)b * T * ldq + (size_t)h * hd;
                for (int r0 = 0; r0 < T; r0 += ATT_TILE) {
                    int r1 = att_tile_end(r0, T), rows = r1 - r0, t1 = off + r1;
                    // the document mask (uncached only: off = 0): keys before the tile's first
                    // query's document are skipped, u0 .. t1 - 1 computed
                    const int* lo = s->doc_start ? s->doc_start + (size_t)b * T + r0 : NULL;
                    int u0 = att_key_lo(b * T + r0, s), w = t1 - u0;
                    float* L = lse + ((size_t)b * H + h) * T + r0;
                    att_scores(S, L, Qbh + (size_t)r0 * ldq, ldq, Kb + (size_t)u0 * ldk, ldk, off + r0, rows, u0, t1, lo,
                               hd, scale);
                    if (sink)   // (u0 = 0 here: the cache never carries a document mask)
                        for (int r = 0; r < rows; r++) {
                            float acc = 0.0f;
                            for (int u = 0; u < n_sink && u < t1; u++) acc += S[(size_t)r * w + u];
                            sink[((size_t)b * H + h) * T + r0 + r] = acc;
                        }
                    cpu_sgemm('N', 'N', rows, hd, w, 1.0f, S, w, Vb + (size_t)u0 * ldk, ldk, 0.0f, Ybh + (size_t)r0 * ldq,
                              ldq);
                }
                gate_head(yg, y, qkv, b, h, s);
            }
        free(S);
    }
}

void ops_rope_rows(float* x, int n_rows, int n_heads, int pos0, int dir, const OpsAttnShape* s) {
    const int hd = s->hd, rot = rope_rot_dim(s), half = rot / 2;
    float *cs, *sn;
    rope_tables_alloc(&cs, &sn, n_rows, pos0, s);
    if (dir < 0) {   // the inverse of m R(theta) is R(-theta) / m
        const float m2 = (float)(rope_attn_factor(s) * rope_attn_factor(s));
        for (size_t i = 0; i < (size_t)n_rows * half; i++) { cs[i] /= m2; sn[i] /= m2; }
    }
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < n_heads; h++)
            rope_apply(x + ((size_t)r * n_heads + h) * hd, cs + (size_t)r * half, sn + (size_t)r * half, hd, rot,
                       dir < 0 ? -1.0f : 1.0f);
    free(cs);
    free(sn);
}
