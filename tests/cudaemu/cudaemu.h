// tests/cudaemu/cudaemu.h: a CUDA emulator on the CPU, for testing the CUDA backend where no GPU
// is present (docs/gpu.md "The CUDA emulator"). Force-included (g++ -include) into every
// kernels/cuda/*.cu after tests/cudaemu/cudaemu_rewrite.py has turned its launches into
// emu_launch(...).run(...) calls; the runtime is tests/cudaemu/cudaemu_rt.cpp, cuBLASLt / cuBLAS
// tests/cudaemu/cudaemu_blas.cpp, NCCL tests/cudaemu/cudaemu_nccl.cpp (MPI builds), and
// tests/cudaemu/cudaemu_cudnn.cpp stands in for cuDNN.
//
// What it emulates, and how:
//   - a launch runs its blocks one after another; the threads of a block are fibers (own
//     stacks, switched cooperatively) so that __syncthreads, warp shuffles, ballots, ldmatrix
//     and mma.sync wait for the threads they need, as on the GPU. Threads of a warp do not run
//     in lockstep (as on Volta and later): code that assumes they do without __syncwarp fails.
//   - __shared__ arrays are static (one block at a time); dynamic shared memory is a buffer of
//     the launch's size followed by an unmapped page.
//   - device memory is host memory from mmap, each allocation ending at an unmapped page (an
//     overrun of more than 15 bytes faults), filled with NaN bytes when allocated (CUDA does not
//     zero it); cudaMemcpy checks that its ranges lie inside allocations of the right kind.
//   - launch configurations are checked as the driver does (threads per block, grid limits,
//     dynamic shared memory over 48 KiB without cudaFuncSetAttribute).
//   - a barrier that can never complete (a thread exited, or diverged around __syncthreads or a
//     full-mask shuffle) stops the program with the kernel's name.
//   - cuBLASLt matmuls and cuBLAS grouped GEMMs are computed on the CPU from their descriptors
//     (layouts, transposes, epilogues, types and the type combinations cuBLAS supports);
//     CUB's radix sort is a stable sort.
//   - mma.sync.m16n8k16 and ldmatrix follow the fragment layouts of the PTX ISA; WMMA fragments
//     hold the whole tile in every lane (their layout is opaque, so any layout is faithful).
//   - NCCL's collectives are MPI collectives on the same (host) buffers, in the order issued;
//     without MPI there is one rank and each is a copy.
// What it does not: timing, memory-model races (threads of a block run one at a time), the
// exact order of cuBLAS's, the tensor cores' and NCCL's fp32 additions, and cuDNN
// (attn_impl = cudnn stops with a message, as in a build without the cudnn-frontend headers).
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <library_types.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#define GATEDGPT_CUDA_EMU 1

// ---- CUDA's keywords as C++ ---------------------------------------------------------------------
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
// cudaemu_rewrite.py turns every __shared__ declaration into a static array (one block runs at a
// time: a static array is its shared memory) or a pointer to the dynamic shared memory
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict

// ---- the running thread ---------------------------------------------------------------------------
struct EmuIdx {
    uint3 thread, block;
    dim3 bdim, gdim;
};
extern EmuIdx emu_idx;   // set by the scheduler before it resumes a thread
#define threadIdx (emu_idx.thread)
#define blockIdx (emu_idx.block)
#define blockDim (emu_idx.bdim)
#define gridDim (emu_idx.gdim)
static const int warpSize = 32;

// ---- barriers and warp collectives (cudaemu_rt.cpp) ----------------------------------------------
int emu_syncthreads_count(int pred);
void emu_syncwarp(unsigned mask);
int emu_lane(void);   // the calling thread's lane: its linear index in the block mod 32
// every lane in mask puts v, then gets what lane src put (a warp barrier in between)
uint64_t emu_warp_exchange(unsigned mask, uint64_t v, int src);
unsigned emu_ballot(unsigned mask, int pred);
void* emu_dyn_smem(void);
// a static __shared__ array (cudaemu_rewrite.py adds the call after its declaration): the first
// thread of a block to reach it fills it with the launch's shared-memory poison
void emu_static_smem(void* p, size_t bytes);
void emu_ldmatrix_x4(uint32_t* r, const void* p, int trans);
void emu_mma_m16n8k16_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1);
[[noreturn]] void emu_fatal(const char* what);
// a kernel whose result depends on its schedule by design (float atomics, say) declares the
// relative difference between two schedules it allows in its fp32 outputs (CUDAEMU_SCHEDULES);
// every other kernel must give the same bits under every schedule. Call it from a static
// initializer in the kernel's file under #ifdef GATEDGPT_CUDA_EMU.
void emu_schedule_tolerance(const char* kernel, double rel_fp32);

inline void __syncthreads() { (void)emu_syncthreads_count(0); }
inline int __syncthreads_count(int pred) { return emu_syncthreads_count(pred != 0); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_syncwarp(mask); }
inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_ballot(mask, pred != 0); }

template <class T>
inline T emu_shfl(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = emu_warp_exchange(mask, bits, src);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = emu_lane();
    return emu_shfl(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = emu_lane();
    int src = lane ^ lane_mask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    return emu_shfl(mask, v, src);
}

// ---- device intrinsics ------------------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)(uintptr_t)p; }
// one thread runs at a time: an atomic is a plain read-modify-write, made in the runtime (not
// compiled with the racecheck's instrumentation: atomics of different threads are not a race)
int emu_atomic_add(int* p, int v);
unsigned emu_atomic_add(unsigned* p, unsigned v);
unsigned long long emu_atomic_add(unsigned long long* p, unsigned long long v);
float emu_atomic_add(float* p, float v);
double emu_atomic_add(double* p, double v);
template <class T, class U>
inline T atomicAdd(T* p, U v) { return emu_atomic_add(p, (T)v); }
using std::max;
using std::min;

// ---- CUB's radix sort (embedding.cu): a stable sort by key ------------------------------------------
void emu_check_device_range(const void* p, size_t bytes, const char* what);
namespace cub {
struct DeviceRadixSort {
    template <class K, class V>
    static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* vals_in,
                                 V* vals_out, int n, int begin_bit = 0, int end_bit = (int)sizeof(K) * 8,
                                 cudaStream_t stream = 0) {
        (void)stream;
        if (!temp) {
            temp_bytes = 256 + (size_t)n * sizeof(K);   // some space, as CUB asks for some
            return cudaSuccess;
        }
        if (begin_bit != 0 || end_bit != (int)sizeof(K) * 8) emu_fatal("cub SortPairs: only full-key sorts are emulated");
        emu_check_device_range(temp, temp_bytes, "cub SortPairs temp storage");
        emu_check_device_range(keys_in, n * sizeof(K), "cub SortPairs keys_in");
        emu_check_device_range(keys_out, n * sizeof(K), "cub SortPairs keys_out");
        emu_check_device_range(vals_in, n * sizeof(V), "cub SortPairs values_in");
        emu_check_device_range(vals_out, n * sizeof(V), "cub SortPairs values_out");
        std::vector<std::pair<K, V>> kv((size_t)n);
        for (int i = 0; i < n; i++) kv[i] = {keys_in[i], vals_in[i]};
        std::stable_sort(kv.begin(), kv.end(), [](const std::pair<K, V>& a, const std::pair<K, V>& b) { return a.first < b.first; });
        for (int i = 0; i < n; i++) { keys_out[i] = kv[i].first; vals_out[i] = kv[i].second; }
        return cudaSuccess;
    }
};
}   // namespace cub

// ---- WMMA (attention_flash.cu): every lane holds the whole tile --------------------------------------
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K> struct emu_shape;
template <int M, int N, int K> struct emu_shape<matrix_a, M, N, K> { enum { R = M, C = K }; };
template <int M, int N, int K> struct emu_shape<matrix_b, M, N, K> { enum { R = K, C = N }; };
template <int M, int N, int K> struct emu_shape<accumulator, M, N, K> { enum { R = M, C = N }; };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    enum { R = emu_shape<Use, M, N, K>::R, C = emu_shape<Use, M, N, K>::C, num_elements = R * C };
    T x[R * C];   // row-major tile
};
inline float emu_f(float v) { return v; }
inline float emu_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (T)v;
}
// matrix_a / matrix_b, layout in the type
template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, L> F;
    emu_syncwarp(0xffffffffu);
    for (int r = 0; r < F::R; r++)
        for (int c = 0; c < F::C; c++) f.x[r * F::C + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    emu_syncwarp(0xffffffffu);
}
// accumulators: layout as an argument
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const T* p, unsigned ldm, layout_t l) {
    emu_syncwarp(0xffffffffu);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    emu_syncwarp(0xffffffffu);
}
template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm, layout_t l) {
    emu_syncwarp(0xffffffffu);
    if (emu_lane() == 0)
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++) (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
    emu_syncwarp(0xffffffffu);
}
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC, void>& c) {
    fragment<accumulator, M, N, K, TC, void> t;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = (float)c.x[i * N + j];
            for (int k = 0; k < K; k++) s += emu_f(a.x[i * K + k]) * emu_f(b.x[k * N + j]);
            t.x[i * N + j] = (TC)s;
        }
    d = t;
}
}   // namespace wmma
}   // namespace nvcuda

// cudaFuncSetAttribute on a kernel (cuda_runtime.h has this overload for nvcc only)
template <class R, class... A>
inline cudaError_t cudaFuncSetAttribute(R (*f)(A...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)f, attr, value);
}

// ---- launches ---------------------------------------------------------------------------------------
template <class F>
inline const void* emu_fn_key(F* f) { return (const void*)f; }
struct EmuBody {
    virtual void operator()() = 0;
};
template <class L>
struct EmuBodyOf : EmuBody {
    L& l;
    explicit EmuBodyOf(L& l_) : l(l_) {}
    void operator()() override { l(); }
};
// runs body once per thread of every block; a bad configuration sets the sticky launch error
// (cudaGetLastError) instead, as the driver does
void emu_run_kernel(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem, EmuBody& body);
struct EmuLaunch {
    const char* name;
    const void* fn;
    dim3 grid, block;
    size_t smem;
    template <class L>
    void run(L body) {
        EmuBodyOf<L> b(body);
        emu_run_kernel(name, fn, grid, block, smem, b);
    }
};
inline EmuLaunch emu_launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem = 0,
                            cudaStream_t stream = 0) {
    (void)stream;   // every launch runs to completion before the call returns
    return EmuLaunch{name, fn, grid, block, smem};
}
