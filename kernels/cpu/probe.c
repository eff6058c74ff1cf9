// kernels/cpu/probe.c: statistics for the stability probe (F-Attn, gate scores, M-Act).
// Not on the training path; written for clarity, deterministic.
#include "../ops.h"
#include "../attn_gate.h"
#include "cpu_common.h"
#include "../scratch.h"
#include <string.h>

static inline float probe_gate_act(OpsGateAct act, float z) { return attn_gate_act_sg(act, z, cpu_sigmoid(z)); }

void ops_attn_first_token(float* head_mean, const float* q, const float* k, const float* lse,
                          const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, rep = H / Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    // the queries averaged: t = 1 .. T-1, or under the document mask every token but its
    // document's first (which attends to itself only), each on its own document's first token
    const int* doc = s->doc_start;
    long nq = 0;
    for (int n = 0; n < B * T; n++) nq += doc ? n % T != doc[n] : n % T != 0;
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double acc = 0.0;
        for (int b = 0; b < B; b++) {
            for (int t = 1; t < T; t++) {
                const int t0 = doc ? doc[b * T + t] : 0;   // the first token of t's document
                if (t == t0) continue;
                const float* k0 = k + (((size_t)b * T + t0) * Hkv + h / rep) * hd;
                const float* qt = q + (((size_t)b * T + t) * H + h) * hd;
                float d = 0.0f;
                for (int i = 0; i < hd; i++) d += qt[i] * k0[i];
                acc += exp((double)(d * scale) - lse[((size_t)b * H + h) * T + t]);
            }
        }
        head_mean[h] = nq > 0 ? (float)(acc / (double)nq) : 0.0f;
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

// Per head: for each sequence b and tile of CPU_ATT_TILE queries t0.., the scores S[rows, t1] =
// scale * Q_tile K[0:t1]^T with one GEMM (as the attention forward forms them, t1 = the tile's
// last query + 1), then the max over each row's visible keys u <= t. The buffer per thread,
// CPU_ATT_TILE x T floats, is half of what the attention backward holds per thread.
void ops_attn_logit_max(float* head_max, const float* q, const float* k, const OpsAttnShape* s) {
    const int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, hd = s->hd, rep = H / Hkv;
    const float scale = 1.0f / sqrtf((float)hd);   // the attention op's scale (kernels/cpu/attention.c)
    const int ldq = H * hd, ldk = Hkv * hd;
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float* S = cpu_calloc((size_t)CPU_ATT_TILE * (T > 0 ? T : 1), sizeof(float));
        float mx = -INFINITY;
        for (int b = 0; b < B; b++)
            for (int t0 = 0; t0 < T; t0 += CPU_ATT_TILE) {
                const int rows = t0 + CPU_ATT_TILE < T ? CPU_ATT_TILE : T - t0, t1 = t0 + rows;
                const float* Q = q + ((size_t)b * T + t0) * ldq + (size_t)h * hd;
                const float* K = k + (size_t)b * T * ldk + (size_t)(h / rep) * hd;
                cpu_sgemm('N', 'T', rows, t1, hd, scale, Q, ldq, K, ldk, 0.0f, S, t1);
                for (int r = 0; r < rows; r++) {
                    const float* row = S + (size_t)r * t1;
                    const int lo = s->doc_start ? s->doc_start[b * T + t0 + r] : 0;   // the document mask
                    for (int u = lo; u <= t0 + r; u++)   // causal: the keys query t0 + r sees
                        if (row[u] > mx || row[u] != row[u]) mx = row[u];   // NaN wins and stays
                }
            }
        head_max[h] = mx;
        free(S);
    }
}

float ops_logits_absmax(const float* logits, int N, int V, int Vp) {
    float m = 0.0f;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) {
            float v = fabsf(logits[(size_t)n * Vp + j]);
            if (v > m || v != v) m = v;   // NaN wins and stays
        }
    return m;
}

void ops_sumsq_ranges(double* out, const float* const* x, const float* const* y, const size_t* n, int nr) {
    // the work items: (range, chunk) pairs, one parallel loop over all of them (one fork for
    // every range: many ranges are small norm vectors)
    size_t* first = cpu_calloc((size_t)nr + 1, sizeof(size_t));   // first item of range r
    for (int r = 0; r < nr; r++) first[r + 1] = first[r] + (n[r] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    const size_t items = first[nr];
    double* part = cpu_calloc(items ? items : 1, sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t it = 0; it < items; it++) {
        int r = 0;
        while (first[r + 1] <= it) r++;   // nr is small (a few per layer)
        const size_t i0 = (it - first[r]) * OPS_SUMSQ_CHUNK, i1 = i0 + OPS_SUMSQ_CHUNK < n[r] ? i0 + OPS_SUMSQ_CHUNK : n[r];
        const float* xr = x[r];
        const float* yr = y ? y[r] : NULL;
        double sum = 0.0;
        for (size_t i = i0; i < i1; i++) { double d = yr ? (double)xr[i] - yr[i] : (double)xr[i]; sum += d * d; }
        part[it] = sum;
    }
    for (int r = 0; r < nr; r++) {
        double total = 0.0;
        for (size_t it = first[r]; it < first[r + 1]; it++) total += part[it];
        out[r] = total;
    }
    free(part);
    free(first);
}
