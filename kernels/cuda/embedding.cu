// kernels/cuda/embedding.cu: token (+ learned position) embedding, forward and backward.
#include "cuda_common.h"
#include <string.h>

// out[n, c] = wte[idx[n], c] (+ wpe[n % T, c]); one thread per element
__global__ void embedding_forward_kernel(float* out, const int* idx, const float* wte,
                                         const float* wpe, int N, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float e = wte[(size_t)idx[n] * C + c];
    out[i] = e + (wpe ? wpe[(size_t)(n % T) * C + c] : 0.0f);
}

void ops_embedding_forward(float* out, const int* idx, const float* wte, const float* wpe,
                           int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    embedding_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(out, idx, wte, wpe, B * T, T, C);
    CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

// ---- backward -------------------------------------------------------------------------------
// Deterministic without atomics: the tokens are grouped by id (on the host: a stable counting
// sort of the N ids, O(N + V)), and one thread per (distinct id, channel) adds that id's dout
// rows in token order. That is the order the CPU backend adds them in, so dwte gets the same
// bits on both backends. The copy of idx to the host waits for the queued backward work (one
// sync per backward pass; the bf16 path can group the ids when the batch is uploaded instead).
//
// grouped layout (ints): ids[U] | start[U+1] | order[N], rows of id ids[u] are
// order[start[u] .. start[u+1]).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* grouped,
                                              int U, int N, int C) {
    int u = blockIdx.x;   // distinct ids on x (up to 2^31 - 1 blocks), channels on y
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (u >= U || c >= C) return;
    const int* ids = grouped;
    const int* start = grouped + U;
    const int* order = grouped + 2 * U + 1;
    float* row = dwte + (size_t)ids[u] * C;
    float acc = row[c];
    for (int j = start[u]; j < start[u + 1]; j++) acc += dout[(size_t)order[j] * C + c];
    row[c] = acc;
}

// dwpe[t, c] += sum over b of dout[b*T + t, c], b in order; one thread per (t, c)
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    int t = (int)(i / C), c = (int)(i % C);
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + c];
    dwpe[i] = acc;
}

// host buffers of the grouping, grown on demand
static int* emb_host_idx;
static int* emb_host_grouped;
static int* emb_host_count;
static size_t emb_cap_n = 0, emb_cap_v = 0;

static void* emb_realloc(void* p, size_t bytes) {
    void* q = realloc(p, bytes ? bytes : 1);
    if (!q) { fprintf(stderr, "error: out of host memory (%zu bytes) in the embedding backward\n", bytes); exit(1); }
    return q;
}

void ops_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx,
                            int B, int T, int C) {
    const int N = B * T;
    if ((size_t)N > emb_cap_n) {
        emb_cap_n = N;
        emb_host_idx = (int*)emb_realloc(emb_host_idx, (size_t)N * sizeof(int));
        emb_host_grouped = (int*)emb_realloc(emb_host_grouped, (size_t)(3 * N + 1) * sizeof(int));
    }
    ops_to_host(emb_host_idx, idx, (size_t)N * sizeof(int));
    int vmax = 0;
    for (int n = 0; n < N; n++) if (emb_host_idx[n] > vmax) vmax = emb_host_idx[n];
    if ((size_t)vmax + 2 > emb_cap_v) {
        emb_cap_v = (size_t)vmax + 2;
        emb_host_count = (int*)emb_realloc(emb_host_count, emb_cap_v * sizeof(int));
    }
    // stable counting sort: count[v] = rows with id v, then the distinct ids in increasing order
    memset(emb_host_count, 0, ((size_t)vmax + 2) * sizeof(int));
    for (int n = 0; n < N; n++) emb_host_count[emb_host_idx[n]]++;
    int U = 0;
    for (int v = 0; v <= vmax; v++) U += emb_host_count[v] > 0;
    int* ids = emb_host_grouped;
    int* start = ids + U;
    int* order = start + U + 1;
    int u = 0, pos = 0;
    for (int v = 0; v <= vmax; v++) {
        int cnt = emb_host_count[v];
        if (!cnt) continue;
        ids[u] = v;
        start[u] = pos;
        emb_host_count[v] = pos;   // now: the next free slot of id v
        pos += cnt;
        u++;
    }
    start[U] = N;
    for (int n = 0; n < N; n++) order[emb_host_count[emb_host_idx[n]]++] = n;   // n ascending: stable

    size_t gbytes = (size_t)(2 * U + 1 + N) * sizeof(int);
    int* grouped = (int*)cuda_scratch(CUDA_SCRATCH_EMB, gbytes);
    ops_from_host(grouped, emb_host_grouped, gbytes);
    dim3 grid(U, cuda_blocks(C, 128));
    embedding_backward_wte_kernel<<<grid, 128, 0, cuda_stream>>>(dwte, dout, grouped, U, N, C);
    CUDA_LAUNCH_CHECK("embedding_backward_wte_kernel");
    if (dwpe) {
        size_t n = (size_t)T * C;
        embedding_backward_wpe_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(dwpe, dout, B, T, C);
        CUDA_LAUNCH_CHECK("embedding_backward_wpe_kernel");
    }
}
