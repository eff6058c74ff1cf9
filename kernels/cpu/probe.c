// kernels/cpu/probe.c: statistics for the stability probe (F-Attn, gate scores, M-Act).
// Not on the training path; written for clarity, deterministic.
#include "../ops.h"
#include "../attn_gate.h"
#include "cpu_common.h"
#include <string.h>

static inline float probe_gate_act(OpsGateAct act, float z) { return attn_gate_act_sg(act, z, cpu_sigmoid(z)); }

void ops_attn_first_token(float* head_mean, const float* q, const float* k, const float* lse,
                          const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, rep = H / Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double acc = 0.0;
        for (int b = 0; b < B; b++) {
            const float* k0 = k + ((size_t)b * T * Hkv + h / rep) * hd;   // key of token 0
            for (int t = 1; t < T; t++) {
                const float* qt = q + (((size_t)b * T + t) * H + h) * hd;
                float d = 0.0f;
                for (int i = 0; i < hd; i++) d += qt[i] * k0[i];
                acc += exp((double)(d * scale) - lse[((size_t)b * H + h) * T + t]);
            }
        }
        head_mean[h] = T > 1 ? (float)(acc / ((double)B * (T - 1))) : 0.0f;
    }
}

void ops_gate_stats(const float* qkv, const OpsAttnShape* s, double* sum, long* count,
                    long* hist) {
    const int N = s->B * s->T, QKVG = ops_attn_qkv_cols(s), G = ops_attn_gate_cols(s);
    const int zoff = QKVG - G;
    double total = 0.0;
    memset(hist, 0, 10 * sizeof(long));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < G; j++) {
            float g = probe_gate_act(s->gate_act, qkv[(size_t)n * QKVG + zoff + j]);
            total += g;
            int bin = (int)(g * 10.0f);
            hist[bin < 0 ? 0 : bin > 9 ? 9 : bin]++;
        }
    *sum = total;
    *count = (long)N * G;
}

void ops_absmax(const float* x, const float* base, int N, int C, float* max, int* pos) {
    float m = -1.0f;
    int p = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            float v = fabsf(base ? x[i] - base[i] : x[i]);
            if (v > m) { m = v; p = n; }
        }
    *max = m;
    *pos = p;
}

// quickselect (Hoare partition) for the k-th smallest of a[0..n)
static float select_kth(float* a, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) { float t = a[i]; a[i] = a[j]; a[j] = t; i++; if (j == 0) break; j--; }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

float ops_abs_median(const float* x, const float* base, int N, int C) {
    size_t n = (size_t)N * C;
    float* a = cpu_calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = fabsf(base ? x[i] - base[i] : x[i]);
    float m = select_kth(a, n, (n - 1) / 2);
    free(a);
    return m;
}
