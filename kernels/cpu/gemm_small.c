// kernels/cpu/gemm_small.c: small in-cache GEMMs through LIBXSMM's JIT (gemm_small.h).
//
// LIBXSMM is column-major. A row-major C [M,N] is the column-major C^T [N,M] with the same
// leading dimension, so C = op(A) B is computed as C^T = B^T op(A)^T: LIBXSMM's "A" is our B
// (the row-major [K,N] buffer read column-major is B^T, no transpose) and its "B" is our A (the
// row-major [M,K] buffer read column-major is A^T, no transpose; for ta = 'T' the [K,M] buffer
// read column-major is A, so LIBXSMM's B is transposed: LIBXSMM_GEMM_FLAG_TRANS_B, which its
// JIT supports).
#include "gemm_small.h"
#include "cpu_common.h"
#include <stdint.h>
#include <string.h>
#ifdef GATEDGPT_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

// 0 = not read yet, 1 = libxsmm, 2 = blas (read once per process; every thread writes the same
// value, so the relaxed atomics only keep the compiler honest)
static int gemm_small_mode(void) {
    static int mode = 0;
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m) return m;
    m = cpu_gemm_small_wants_libxsmm() ? 1 : 2;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    return m;
}

const char* cpu_gemm_small_engine(void) { return gemm_small_mode() == 1 ? "libxsmm" : "blas"; }

#ifdef GATEDGPT_HAVE_LIBXSMM
// Per thread, the kernels already dispatched, by shape (LIBXSMM's own registry is shared and
// locked; a hit here costs a few compares). Direct-mapped by a hash of the shape.
#define GEMM_SMALL_SLOTS 256
typedef struct {
    int key[8];                // M, N, K, lda, ldb, ldc, beta, ta
    libxsmm_smmfunction fn;    // NULL with key[0] = 0: empty; declined shapes store fn NULL, key set
} GemmSmallSlot;
static _Thread_local GemmSmallSlot gemm_small_cache[GEMM_SMALL_SLOTS];

static libxsmm_smmfunction gemm_small_kernel(const int key[8]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 8; i++) h = (h ^ (uint32_t)key[i]) * 16777619u;
    GemmSmallSlot* s = &gemm_small_cache[h % GEMM_SMALL_SLOTS];
    if (s->key[0] && memcmp(s->key, key, sizeof(s->key)) == 0) return s->fn;
    const libxsmm_blasint m = key[1], n = key[0], k = key[2], lda = key[4], ldb = key[3], ldc = key[5];
    const float alpha = 1.0f, beta = (float)key[6];
    const int flags = key[7] == 'T' ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    s->fn = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
    memcpy(s->key, key, sizeof(s->key));
    return s->fn;
}
#endif

void cpu_gemm_small(char ta, int M, int N, int K, const float* A, int lda, const float* B, int ldb, int beta,
                    float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef GATEDGPT_HAVE_LIBXSMM
    if (K > 0 && gemm_small_mode() == 1) {
        const int key[8] = {M, N, K, lda, ldb, ldc, beta ? 1 : 0, ta == 'T' ? 'T' : 'N'};
        libxsmm_smmfunction fn = gemm_small_kernel(key);
        if (fn) { fn(B, A, C); return; }
    }
#endif
    cpu_sgemm(ta, 'N', M, N, K, 1.0f, A, lda, B, ldb, beta ? 1.0f : 0.0f, C, ldc);
}

void cpu_transpose(float* dst, int ldd, const float* src, int lds, int rows, int cols) {
#ifdef GATEDGPT_HAVE_LIBXSMM
    // LIBXSMM's out-of-place transpose (column-major [cols, rows] in, [rows, cols] out: the same
    // bytes), 2.8x the loop below on a 64 x 64 block
    if (gemm_small_mode() == 1) {
        libxsmm_otrans(dst, src, sizeof(float), cols, rows, lds, ldd);
        return;
    }
#endif
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) dst[(size_t)j * ldd + i] = src[(size_t)i * lds + j];
}
