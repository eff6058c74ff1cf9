// kernels/cuda/embedding.cu: token (+ learned position) embedding, forward and backward.
#include "cuda_common.h"
#include <cub/device/device_radix_sort.cuh>
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
    CUDA_OP_TIMER("ops_embedding_forward");
    size_t n = (size_t)B * T * C;
    embedding_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(out, idx, wte, wpe, B * T, T, C);
    CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

// ---- backward -------------------------------------------------------------------------------
// Deterministic without atomics: the tokens are grouped by id on the GPU (CUB's radix sort of
// the pairs (id, position), which is stable, so each id's positions stay ascending), and one
// thread per (run of equal ids, channel) adds that id's dout rows in token order. That is the
// order the CPU backend adds them in, so dwte gets the same bits on both backends. No copy to
// the host: the backward pass never waits here.
//   sorted_id[N], sorted_pos[N]: the pairs sorted by id; a run starts at j when j == 0 or
//   sorted_id[j] != sorted_id[j - 1]. Grid (N, C / 128): blocks inside a run return at once.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* sorted_id,
                                              const int* sorted_pos, int N, int C) {
    int j = blockIdx.x;   // sorted positions on x (up to 2^31 - 1 blocks), channels on y
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= N || c >= C) return;
    const int id = sorted_id[j];
    if (j > 0 && sorted_id[j - 1] == id) return;   // not the start of a run
    float* row = dwte + (size_t)id * C;
    float acc = row[c];
    for (int r = j; r < N && sorted_id[r] == id; r++) acc += dout[(size_t)sorted_pos[r] * C + c];
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

__global__ void embedding_iota_kernel(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// What CUB's radix sort of N (int key, int value) pairs asks for (its size query touches no
// data); setup.cu plans the embedding's scratch slot with it
size_t cuda_emb_cub_temp_bytes(size_t N) {
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int*)NULL, (int*)NULL, (const int*)NULL, (int*)NULL,
                                               (int)N, 0, 32, cuda_stream));
    return temp_bytes;
}

void ops_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx,
                            int B, int T, int C) {
    CUDA_OP_TIMER("ops_embedding_backward");
    const int N = B * T;
    if (N <= 0) return;
    // scratch: positions [N] | sorted ids [N] | sorted positions [N] | CUB's temporary storage
    size_t temp_bytes = cuda_emb_cub_temp_bytes((size_t)N);
    const size_t off = cuda_scratch_emb_offset((size_t)N);
    char* scratch = (char*)cuda_scratch(CUDA_SCRATCH_EMB, cuda_scratch_emb_bytes((size_t)N, temp_bytes));
    int* pos = (int*)scratch;
    int* sorted_id = pos + N;
    int* sorted_pos = sorted_id + N;
    embedding_iota_kernel<<<cuda_blocks((size_t)N, 256), 256, 0, cuda_stream>>>(pos, N);
    CUDA_LAUNCH_CHECK("embedding_iota_kernel");
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch + off, temp_bytes, idx, sorted_id, pos, sorted_pos, N, 0, 32,
                                               cuda_stream));
    CUDA_LAUNCH_CHECK("cub::DeviceRadixSort::SortPairs");
    dim3 grid(N, cuda_blocks(C, 128));
    embedding_backward_wte_kernel<<<grid, 128, 0, cuda_stream>>>(dwte, dout, sorted_id, sorted_pos, N, C);
    CUDA_LAUNCH_CHECK("embedding_backward_wte_kernel");
    if (dwpe) {
        size_t n = (size_t)T * C;
        embedding_backward_wpe_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(dwpe, dout, B, T, C);
        CUDA_LAUNCH_CHECK("embedding_backward_wpe_kernel");
    }
}
