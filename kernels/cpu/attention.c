// kernels/cpu/attention.c: the attention block's ops on the CPU.
//   prep:      qkv[N, QKVG] -> q, k, v   (qk-norm, RoPE, value gate)
//   attention: causal GQA softmax attention with the optional sdpa output gate
// Token n = b*T + t. q[N, H*hd], k/v[N, Hkv*hd]; head h of q uses kv head h / (H/Hkv).
#include "../ops.h"
#include "cpu_common.h"

int ops_attn_gate_cols(const OpsAttnShape* s) {
    if (s->gate == OPS_GATE_NONE) return 0;
    int heads = (s->gate_pos == OPS_GATEPOS_SDPA) ? s->H : s->Hkv;
    return s->gate == OPS_GATE_ELEMENTWISE ? heads * s->hd : heads;
}
int ops_attn_qkv_cols(const OpsAttnShape* s) {
    return (s->H + 2 * s->Hkv) * s->hd + ops_attn_gate_cols(s);
}

// gate activation a(z) and its derivative a'(z)
static inline float gate_act(OpsGateAct act, float z) {
    float sg = cpu_sigmoid(z);
    switch (act) {
    case OPS_ACT_NS_SIGMOID: return 0.5f + 0.5f * sg;
    case OPS_ACT_SILU: return z * sg;
    default: return sg;
    }
}
static inline float gate_act_grad(OpsGateAct act, float z) {
    float sg = cpu_sigmoid(z);
    switch (act) {
    case OPS_ACT_NS_SIGMOID: return 0.5f * sg * (1.0f - sg);
    case OPS_ACT_SILU: return sg + z * sg * (1.0f - sg);
    default: return sg * (1.0f - sg);
    }
}

// RoPE tables cos/sin[T, hd/2]: angle = t * base^(-2i/hd), computed in double.
static void rope_tables(float* cs, float* sn, int T, int hd, float base) {
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double ang = (double)t * pow((double)base, -2.0 * i / hd);
            cs[t * half + i] = (float)cos(ang);
            sn[t * half + i] = (float)sin(ang);
        }
}

// rotate_half convention: pairs (i, i + hd/2).  dir = +1 forward, -1 inverse (= transpose).
static inline void rope_apply(float* x, const float* cs, const float* sn, int hd, float dir) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half], c = cs[i], s = dir * sn[i];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

// ---------------------------------------------------------------------------------------------
void ops_attn_prep_forward(float* q, float* k, float* v, float* qk_rstd, const float* qkv,
                           const float* qnorm_w, const float* knorm_w, const OpsAttnShape* s) {
    const int N = s->B * s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, T = s->T;
    const int QKVG = ops_attn_qkv_cols(s), half = hd / 2;
    const int zoff = (H + 2 * Hkv) * hd;
    const int vgate = s->gate != OPS_GATE_NONE && s->gate_pos == OPS_GATEPOS_VALUE;
    float* cs = NULL;
    float* sn = NULL;
    if (s->rope) {
        cs = cpu_calloc((size_t)T * half, sizeof(float));
        sn = cpu_calloc((size_t)T * half, sizeof(float));
        rope_tables(cs, sn, T, hd, s->rope_base);
    }
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* row = qkv + (size_t)n * QKVG;
        int t = n % T;
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
            if (s->rope) rope_apply(dst, cs + (size_t)t * half, sn + (size_t)t * half, hd, 1.0f);
        }
        const float* vs = row + (size_t)(H + Hkv) * hd;
        float* vd = v + (size_t)n * Hkv * hd;
        for (int j = 0; j < Hkv * hd; j++) {
            float g = 1.0f;
            if (vgate) {
                int zi = s->gate == OPS_GATE_ELEMENTWISE ? j : j / hd;
                g = gate_act(s->gate_act, row[zoff + zi]);
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
    const int QKVG = ops_attn_qkv_cols(s), half = hd / 2;
    const int zoff = (H + 2 * Hkv) * hd;
    const int vgate = s->gate != OPS_GATE_NONE && s->gate_pos == OPS_GATEPOS_VALUE;
    float* cs = NULL;
    float* sn = NULL;
    if (s->rope) {
        cs = cpu_calloc((size_t)T * half, sizeof(float));
        sn = cpu_calloc((size_t)T * half, sizeof(float));
        rope_tables(cs, sn, T, hd, s->rope_base);
    }
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
            int t = n % T;
            for (int h = 0; h < H + Hkv; h++) {
                int isq = h < H;
                const float* g = isq ? dq + ((size_t)n * H + h) * hd : dk + ((size_t)n * Hkv + (h - H)) * hd;
                for (int i = 0; i < hd; i++) buf[i] = g[i];
                if (s->rope) rope_apply(buf, cs + (size_t)t * half, sn + (size_t)t * half, hd, -1.0f);
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
            const float* vs = row + (size_t)(H + Hkv) * hd;
            float* dvs = drow + (size_t)(H + Hkv) * hd;
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
// Forward: one task per (b, h); each query row t computes its scores against keys 0..t,
// stores the row logsumexp, and writes y (and yg = y * a(z) for the sdpa gate).
void ops_attention_forward(float* y, float* yg, float* lse, const float* q, const float* k,
                           const float* v, const float* qkv, const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd;
    const int rep = H / Hkv, QKVG = ops_attn_qkv_cols(s), zoff = (H + 2 * Hkv) * hd;
    const int sgate = s->gate != OPS_GATE_NONE && s->gate_pos == OPS_GATEPOS_SDPA;
    const float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel
    {
        float* sc = cpu_calloc((size_t)T, sizeof(float));
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                int kh = h / rep;
                for (int t = 0; t < T; t++) {
                    size_t n = (size_t)b * T + t;
                    const float* qt = q + (n * H + h) * hd;
                    float mx = -INFINITY;
                    for (int u = 0; u <= t; u++) {
                        const float* ku = k + (((size_t)b * T + u) * Hkv + kh) * hd;
                        float d = 0.0f;
                        for (int i = 0; i < hd; i++) d += qt[i] * ku[i];
                        sc[u] = d * scale;
                        if (sc[u] > mx) mx = sc[u];
                    }
                    float sum = 0.0f;
                    for (int u = 0; u <= t; u++) { sc[u] = expf(sc[u] - mx); sum += sc[u]; }
                    float inv = 1.0f / sum;
                    float* yt = y + (n * H + h) * hd;
                    for (int i = 0; i < hd; i++) yt[i] = 0.0f;
                    for (int u = 0; u <= t; u++) {
                        const float* vu = v + (((size_t)b * T + u) * Hkv + kh) * hd;
                        float p = sc[u] * inv;
                        for (int i = 0; i < hd; i++) yt[i] += p * vu[i];
                    }
                    lse[((size_t)b * H + h) * T + t] = mx + logf(sum);
                    if (sgate) {
                        const float* z = qkv + n * QKVG + zoff;
                        float* ygt = yg + (n * H + h) * hd;
                        for (int i = 0; i < hd; i++) {
                            float zz = s->gate == OPS_GATE_ELEMENTWISE ? z[h * hd + i] : z[h];
                            ygt[i] = yt[i] * gate_act(s->gate_act, zz);
                        }
                    } else if (yg != y) {
                        float* ygt = yg + (n * H + h) * hd;
                        for (int i = 0; i < hd; i++) ygt[i] = yt[i];
                    }
                }
            }
        free(sc);
    }
}

// Backward: one task per (b, kv head) so that dk and dv rows have a single writer; the query
// heads of the group are walked in order (deterministic). With p = exp(s - lse):
//   dv_u += p_tu dy_t;  dp_tu = dy_t . v_u;  ds_tu = p_tu (dp_tu - D_t), D_t = dy_t . y_t
//   dq_t = scale * sum_u ds_tu k_u;  dk_u += scale * ds_tu q_t
// sdpa gate: dy = dyg * a(z);  dz = dyg . y * a'(z)  (per channel, or summed over hd for headwise)
void ops_attention_backward(float* dq, float* dk, float* dv, float* dqkv, float* scratch,
                            const float* dyg, const float* q, const float* k, const float* v,
                            const float* y, const float* lse, const float* qkv,
                            const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd;
    const int rep = H / Hkv, QKVG = ops_attn_qkv_cols(s), zoff = (H + 2 * Hkv) * hd;
    const int sgate = s->gate != OPS_GATE_NONE && s->gate_pos == OPS_GATEPOS_SDPA;
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
    #pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++) {
                for (int u = 0; u < T; u++) {
                    size_t ku = (((size_t)b * T + u) * Hkv + kh) * hd;
                    for (int i = 0; i < hd; i++) { dk[ku + i] = 0.0f; dv[ku + i] = 0.0f; }
                }
                for (int h = kh * rep; h < (kh + 1) * rep; h++)
                    for (int t = 0; t < T; t++) {
                        size_t n = (size_t)b * T + t;
                        const float* qt = q + (n * H + h) * hd;
                        const float* dyt = dy + (n * H + h) * hd;
                        const float* yt = y + (n * H + h) * hd;
                        float* dqt = dq + (n * H + h) * hd;
                        float L = lse[((size_t)b * H + h) * T + t];
                        float D = 0.0f;
                        for (int i = 0; i < hd; i++) D += dyt[i] * yt[i];
                        for (int i = 0; i < hd; i++) dqt[i] = 0.0f;
                        for (int u = 0; u <= t; u++) {
                            size_t ku = (((size_t)b * T + u) * Hkv + kh) * hd;
                            float sdot = 0.0f, dp = 0.0f;
                            for (int i = 0; i < hd; i++) { sdot += qt[i] * k[ku + i]; dp += dyt[i] * v[ku + i]; }
                            float pr = expf(sdot * scale - L);
                            float ds = pr * (dp - D) * scale;
                            for (int i = 0; i < hd; i++) {
                                dqt[i] += ds * k[ku + i];
                                dk[ku + i] += ds * qt[i];
                                dv[ku + i] += pr * dyt[i];
                            }
                        }
                    }
            }
}
