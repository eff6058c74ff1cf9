// kernels/cuda/probe.cu: statistics for the stability probe (F-Attn, gate scores, M-Act) on the
// GPU. Not on the training path. Deterministic: per-block partials in a fixed assignment of
// elements to threads, reduced in a fixed order (integer histograms use shared-memory atomics,
// which are exact, so their order does not matter). q, k and qkv are act_t (cact_t here), read
// with act_ld; abs-max and abs-median read the residual stream, fp32. All sums are fp32/double.
#include "cuda_common.h"
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define PROBE_BLOCKS 256
#define PROBE_THREADS 256

// ---- F-Attn ---------------------------------------------------------------------------------
// vals[h][b][t-1] = exp(q_t . k_0 * scale - lse[b,h,t]) for t = 1..T-1; one warp per (b, h, t).
// Under the document mask (doc: OpsAttnShape.doc_start) k_0 is the key of t's document's first
// token, and a document's first token itself gives 0 (it is not counted: ops_attn_first_token).
__global__ void probe_first_token_kernel(double* vals, const cact_t* q, const cact_t* k,
                                         const float* lse, const int* doc, int B, int T, int H, int Hkv, int hd,
                                         float scale) {
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    size_t per_h = (size_t)B * (T - 1);
    if (warp >= (size_t)H * per_h) return;
    int h = (int)(warp / per_h), rest = (int)(warp % per_h);
    int b = rest / (T - 1), t = rest % (T - 1) + 1;
    const int t0 = doc ? doc[b * T + t] : 0;   // the first token of t's document
    if (t == t0) { if (lane == 0) vals[warp] = 0.0; return; }
    const cact_t* k0 = k + (((size_t)b * T + t0) * Hkv + h / (H / Hkv)) * hd;   // its key
    const cact_t* qt = q + (((size_t)b * T + t) * H + h) * hd;
    float d = 0.0f;
    for (int i = lane; i < hd; i += 32) d += act_ld(qt[i]) * act_ld(k0[i]);
    d = warp_sum(d);
    if (lane == 0) vals[warp] = exp((double)(d * scale) - lse[((size_t)b * H + h) * T + t]);
}

// out[h] = sum of vals[h][0..n), one block per head, fixed-order block sums
__global__ void probe_sum_rows_kernel(double* out, const double* vals, size_t n) {
    __shared__ double red[32];
    const double* v = vals + (size_t)blockIdx.x * n;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
    s = block_sum_d(s, red);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

void ops_attn_first_token(float* head_mean, const act_t* q, const act_t* k, const float* lse,
                          const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attn_first_token");
    const int B = s->B, T = s->T, H = s->H;
    if (T <= 1) { for (int h = 0; h < H; h++) head_mean[h] = 0.0f; return; }
    size_t per_h = (size_t)B * (T - 1);
    double* vals = (double*)cuda_scratch(CUDA_SCRATCH_REDUCE, ((size_t)H * per_h + H) * sizeof(double));
    double* sums = vals + (size_t)H * per_h;
    size_t warps = (size_t)H * per_h;
    probe_first_token_kernel<<<cuda_blocks(warps * 32, 256), 256, 0, cuda_stream>>>(
        vals, CCACT(q), CCACT(k), lse, s->doc_start, B, T, H, s->Hkv, s->hd, 1.0f / sqrtf((float)s->hd));
    CUDA_LAUNCH_CHECK("probe_first_token_kernel");
    // the queries averaged: B (T-1), less the documents' first tokens under the document mask
    double nq = (double)per_h;
    if (s->doc_start) {
        int* doc = (int*)malloc((size_t)B * T * sizeof(int));
        ops_to_host(doc, s->doc_start, (size_t)B * T * sizeof(int));
        long c = 0;
        for (int n = 0; n < B * T; n++) c += n % T != doc[n];
        nq = (double)c;
        free(doc);
    }
    probe_sum_rows_kernel<<<H, 256, 0, cuda_stream>>>(sums, vals, per_h);
    CUDA_LAUNCH_CHECK("probe_sum_rows_kernel");
    double* host = (double*)malloc((size_t)H * sizeof(double));
    ops_to_host(host, sums, (size_t)H * sizeof(double));
    for (int h = 0; h < H; h++) head_mean[h] = nq > 0 ? (float)(host[h] / nq) : 0.0f;
    free(host);
}

// ---- gate scores ----------------------------------------------------------------------------
// per block: the sum of act(z) (double) and a 10-bin histogram over [0, 1] of the gate columns
typedef struct { double sum; long long hist[10]; } ProbeGatePart;

__global__ void probe_gate_kernel(ProbeGatePart* part, const cact_t* qkv, int N, int QKVG, int G,
                                  int act) {
    __shared__ double red[32];
    __shared__ unsigned long long hist[10];
    if (threadIdx.x < 10) hist[threadIdx.x] = 0;
    __syncthreads();
    const int zoff = QKVG - G;
    size_t total = (size_t)N * G, stride = (size_t)gridDim.x * blockDim.x;
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t n = i / G, j = i % G;
        float g = cuda_gate_act(act, act_ld(qkv[n * QKVG + zoff + j]));
        s += g;
        int bin = (int)(g * 10.0f);
        atomicAdd(&hist[bin < 0 ? 0 : bin > 9 ? 9 : bin], 1ull);
    }
    s = block_sum_d(s, red);   // syncs: all histogram adds are done after it
    if (threadIdx.x == 0) {
        part[blockIdx.x].sum = s;
        for (int b = 0; b < 10; b++) part[blockIdx.x].hist[b] = (long long)hist[b];
    }
}

void ops_gate_stats(const act_t* qkv, const OpsAttnShape* s, double* sum, long* count,
                    long* hist) {
    CUDA_OP_TIMER("ops_gate_stats");
    const int N = s->B * s->T, QKVG = ops_attn_qkv_cols(s), G = ops_attn_gate_cols(s);
    memset(hist, 0, 10 * sizeof(long));
    *sum = 0.0;
    *count = (long)N * G;
    if (G == 0) return;
    ProbeGatePart* dpart = (ProbeGatePart*)cuda_scratch(CUDA_SCRATCH_REDUCE, PROBE_BLOCKS * sizeof(ProbeGatePart));
    probe_gate_kernel<<<PROBE_BLOCKS, PROBE_THREADS, 0, cuda_stream>>>(dpart, CCACT(qkv), N, QKVG, G, s->gate_act);
    CUDA_LAUNCH_CHECK("probe_gate_kernel");
    ProbeGatePart part[PROBE_BLOCKS];
    ops_to_host(part, dpart, sizeof(part));
    double total = 0.0;
    for (int b = 0; b < PROBE_BLOCKS; b++) {
        total += part[b].sum;
        for (int i = 0; i < 10; i++) hist[i] += (long)part[b].hist[i];
    }
    *sum = total;
}

// ---- abs-max --------------------------------------------------------------------------------
// The largest |x| (or |x - base|) and the flat index of its first occurrence: (v, i) beats
// (w, j) when v > w, or v == w and i < j; NaN never wins (as in the CPU loop's v > m).
__device__ __forceinline__ void probe_better(float& v, long long& i, float w, long long j) {
    if (w > v || (w == v && j < i)) { v = w; i = j; }
}

typedef struct { float v; long long i; } ProbeMax;

__global__ void probe_absmax_kernel(ProbeMax* part, const float* x, const float* base, size_t total) {
    __shared__ float sv[32];
    __shared__ long long si[32];
    float v = -1.0f;
    long long idx = LLONG_MAX;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float a = fabsf(base ? x[i] - base[i] : x[i]);
        probe_better(v, idx, a, (long long)i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        long long j = __shfl_xor_sync(0xffffffffu, idx, o);
        probe_better(v, idx, w, j);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = v; si[warp] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) probe_better(v, idx, sv[w], si[w]);
        part[blockIdx.x].v = v;
        part[blockIdx.x].i = idx;
    }
}

void ops_absmax(const float* x, const float* base, int N, int C, float* max, int* pos) {
    CUDA_OP_TIMER("ops_absmax");
    ProbeMax* dpart = (ProbeMax*)cuda_scratch(CUDA_SCRATCH_REDUCE, PROBE_BLOCKS * sizeof(ProbeMax));
    probe_absmax_kernel<<<PROBE_BLOCKS, PROBE_THREADS, 0, cuda_stream>>>(dpart, x, base, (size_t)N * C);
    CUDA_LAUNCH_CHECK("probe_absmax_kernel");
    ProbeMax part[PROBE_BLOCKS];
    ops_to_host(part, dpart, sizeof(part));
    float v = -1.0f;
    long long idx = LLONG_MAX;
    for (int b = 0; b < PROBE_BLOCKS; b++)
        if (part[b].v > v || (part[b].v == v && part[b].i < idx)) { v = part[b].v; idx = part[b].i; }
    *max = v;
    *pos = idx == LLONG_MAX ? 0 : (int)(idx / C);
}

// ---- abs-median -----------------------------------------------------------------------------
// Radix select on the bits of |x| (non-negative floats order like their bit patterns as
// unsigned integers): four passes, each a 256-bin histogram of the next 8 bits among the values
// whose higher bits match the prefix found so far. The result is the exact k-th smallest value
// (k = (n-1)/2, the lower median), the same value the CPU's quickselect returns.
__global__ void probe_radix_hist_kernel(unsigned int* part, const float* x, const float* base,
                                        size_t total, int shift, unsigned int prefix) {
    __shared__ unsigned int hist[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float a = fabsf(base ? x[i] - base[i] : x[i]);
        unsigned int bits = __float_as_uint(a);
        unsigned int hi = shift == 24 ? 0u : bits >> (shift + 8);
        if (hi == prefix) atomicAdd(&hist[(bits >> shift) & 255u], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) part[(size_t)blockIdx.x * 256 + b] = hist[b];
}

float ops_abs_median(const float* x, const float* base, int N, int C) {
    CUDA_OP_TIMER("ops_abs_median");
    size_t n = (size_t)N * C;
    if (n == 0) return 0.0f;
    unsigned int* dpart = (unsigned int*)cuda_scratch(CUDA_SCRATCH_REDUCE, (size_t)PROBE_BLOCKS * 256 * sizeof(unsigned int));
    unsigned int* part = (unsigned int*)malloc((size_t)PROBE_BLOCKS * 256 * sizeof(unsigned int));
    if (!part) { fprintf(stderr, "error: out of host memory in ops_abs_median\n"); exit(1); }
    unsigned long long k = (n - 1) / 2;   // rank of the lower median among the n values
    unsigned int prefix = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        probe_radix_hist_kernel<<<PROBE_BLOCKS, PROBE_THREADS, 0, cuda_stream>>>(dpart, x, base, n, shift, prefix);
        CUDA_LAUNCH_CHECK("probe_radix_hist_kernel");
        ops_to_host(part, dpart, (size_t)PROBE_BLOCKS * 256 * sizeof(unsigned int));
        unsigned long long below = 0;
        int bin = 255;
        for (int b = 0; b < 256; b++) {
            unsigned long long cnt = 0;
            for (int blk = 0; blk < PROBE_BLOCKS; blk++) cnt += part[(size_t)blk * 256 + b];
            if (below + cnt > k) { bin = b; break; }
            below += cnt;
        }
        k -= below;
        prefix = (prefix << 8) | (unsigned int)bin;
    }
    free(part);
    float m;
    memcpy(&m, &prefix, sizeof(m));
    return m;
}

// ---- attention-logit growth -----------------------------------------------------------------
// max of a and b where a NaN in either wins (the CPU loop's `d > m || d != d`): a diverged
// logit is reported, not hidden behind the finite rest. Order-independent: deterministic.
__device__ __forceinline__ float probe_nanmax(float a, float b) {
    return (a != a || b != b) ? __uint_as_float(0x7fc00000u) : fmaxf(a, b);
}

// The block's NaN-propagating max of each thread's m, valid on thread 0 (blockDim.x a multiple
// of 32, at most 1024)
__device__ float probe_block_nanmax(float m) {
    __shared__ float red[32];
    for (int o = 16; o > 0; o >>= 1) m = probe_nanmax(m, __shfl_xor_sync(0xffffffffu, m, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) red[w] = m;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 1; i < (int)(blockDim.x >> 5); i++) m = probe_nanmax(m, red[i]);
    return m;
}

// vals[h][b*T + t] = max over keys u <= t of q_t . k_u * scale: one warp per (h, b, t), each
// lane a strided subset of the keys (a whole dot product over hd each), then a warp max
__global__ void probe_logit_max_kernel(float* vals, const cact_t* q, const cact_t* k, const int* doc, int B, int T,
                                       int H, int Hkv, int hd, float scale) {
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    size_t per_h = (size_t)B * T;
    if (warp >= (size_t)H * per_h) return;
    int h = (int)(warp / per_h), rest = (int)(warp % per_h);
    int b = rest / T, t = rest % T;
    const cact_t* qt = q + (((size_t)b * T + t) * H + h) * hd;
    float m = -INFINITY;
    const int lo = doc ? doc[b * T + t] : 0;   // the document mask: keys lo .. t
    for (int u = lo + lane; u <= t; u += 32) {
        const cact_t* ku = k + (((size_t)b * T + u) * Hkv + h / (H / Hkv)) * hd;
        float d = 0.0f;
        for (int i = 0; i < hd; i++) d += act_ld(qt[i]) * act_ld(ku[i]);
        m = probe_nanmax(m, d * scale);
    }
    for (int o = 16; o > 0; o >>= 1) m = probe_nanmax(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) vals[warp] = m;
}

// out[h] = max of vals[h][0..n) (NaN wins), one block per head
__global__ void probe_max_rows_kernel(float* out, const float* vals, size_t n) {
    const float* v = vals + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) m = probe_nanmax(m, v[i]);
    m = probe_block_nanmax(m);
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}

void ops_attn_logit_max(float* head_max, const act_t* q, const act_t* k, const OpsAttnShape* s) {
    CUDA_OP_TIMER("ops_attn_logit_max");
    const int B = s->B, T = s->T, H = s->H;
    const size_t per_h = (size_t)B * T;
    if (per_h == 0) { for (int h = 0; h < H; h++) head_max[h] = -INFINITY; return; }
    float* vals = (float*)cuda_scratch(CUDA_SCRATCH_REDUCE, ((size_t)H * per_h + H) * sizeof(float));
    float* maxes = vals + (size_t)H * per_h;
    const size_t warps = (size_t)H * per_h;
    probe_logit_max_kernel<<<cuda_blocks(warps * 32, 256), 256, 0, cuda_stream>>>(
        vals, CCACT(q), CCACT(k), s->doc_start, B, T, H, s->Hkv, s->hd, 1.0f / sqrtf((float)s->hd));
    CUDA_LAUNCH_CHECK("probe_logit_max_kernel");
    probe_max_rows_kernel<<<H, 256, 0, cuda_stream>>>(maxes, vals, per_h);
    CUDA_LAUNCH_CHECK("probe_max_rows_kernel");
    ops_to_host(head_max, maxes, (size_t)H * sizeof(float));
}

// ---- output-logit divergence ----------------------------------------------------------------
// part[block] = max |logits[n, j]| over its strided share of the N x V (unpadded) entries
__global__ void probe_logits_absmax_kernel(float* part, const cact_t* logits, int N, int V, int Vp) {
    const size_t total = (size_t)N * V, stride = (size_t)gridDim.x * blockDim.x;
    float m = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        m = probe_nanmax(m, fabsf(act_ld(logits[(i / V) * Vp + i % V])));
    m = probe_block_nanmax(m);
    if (threadIdx.x == 0) part[blockIdx.x] = m;
}

float ops_logits_absmax(const act_t* logits, int N, int V, int Vp) {
    CUDA_OP_TIMER("ops_logits_absmax");
    float* dpart = (float*)cuda_scratch(CUDA_SCRATCH_REDUCE, PROBE_BLOCKS * sizeof(float));
    probe_logits_absmax_kernel<<<PROBE_BLOCKS, PROBE_THREADS, 0, cuda_stream>>>(dpart, CCACT(logits), N, V, Vp);
    CUDA_LAUNCH_CHECK("probe_logits_absmax_kernel");
    float part[PROBE_BLOCKS];
    ops_to_host(part, dpart, sizeof(part));
    float m = 0.0f;
    for (int b = 0; b < PROBE_BLOCKS; b++) m = (m != m || part[b] != part[b]) ? NAN : fmaxf(m, part[b]);
    return m;
}

// ---- per-group sums of squares -------------------------------------------------------------
// part[c] = sum of (x[i] - y[i])^2 (or x[i]^2, y NULL) in double over chunk c of OPS_SUMSQ_CHUNK
// (as optim.cu's sumsq_chunks_kernel: one block per chunk, a fixed-order block sum)
__global__ void probe_sumsq_kernel(double* part, const float* x, const float* y, size_t n) {
    __shared__ double red[32];
    size_t i0 = (size_t)blockIdx.x * OPS_SUMSQ_CHUNK;
    size_t i1 = i0 + OPS_SUMSQ_CHUNK < n ? i0 + OPS_SUMSQ_CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) { double d = y ? (double)x[i] - y[i] : (double)x[i]; s += d * d; }
    s = block_sum_d(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// one launch per range into one array of chunk sums, one copy back, the chunks added in order
void ops_sumsq_ranges(double* out, const float* const* x, const float* const* y, const size_t* n, int nr) {
    CUDA_OP_TIMER("ops_sumsq_ranges");
    size_t items = 0;
    for (int r = 0; r < nr; r++) items += (n[r] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    for (int r = 0; r < nr; r++) out[r] = 0.0;
    if (items == 0) return;
    double* dpart = (double*)cuda_scratch(CUDA_SCRATCH_REDUCE, items * sizeof(double));
    size_t at = 0;
    for (int r = 0; r < nr; r++) {
        const size_t nc = (n[r] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
        if (nc == 0) continue;
        probe_sumsq_kernel<<<(unsigned)nc, 256, 0, cuda_stream>>>(dpart + at, x[r], y ? y[r] : NULL, n[r]);
        CUDA_LAUNCH_CHECK("probe_sumsq_kernel");
        at += nc;
    }
    double* part = (double*)malloc(items * sizeof(double));
    if (!part) { fprintf(stderr, "error: out of host memory in ops_sumsq_ranges\n"); exit(1); }
    ops_to_host(part, dpart, items * sizeof(double));
    at = 0;
    for (int r = 0; r < nr; r++) {
        const size_t nc = (n[r] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
        double total = 0.0;
        for (size_t c = 0; c < nc; c++) total += part[at + c];   // chunk order, as the CPU backend
        out[r] = total;
        at += nc;
    }
    free(part);
}
