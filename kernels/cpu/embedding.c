// kernels/cpu/embedding.c: token (+ learned position) embedding.
#include "../ops.h"
#include "cpu_common.h"

// out[B*T, C] = wte[idx[n]] (+ wpe[n % T])
void ops_embedding_forward(float* out, const int* idx, const float* wte, const float* wpe,
                           int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float* e = wte + (size_t)idx[n] * C;
        const float* p = wpe ? wpe + (size_t)(n % T) * C : NULL;
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + (p ? p[c] : 0.0f);
    }
}

// Deterministic without atomics: each thread owns a range of channels and walks the tokens in
// order, so every dwte row receives its contributions in token order for any thread count.
void ops_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx,
                            int B, int T, int C) {
    #pragma omp parallel
    {
        int nt = 1, tid = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        int c0 = (int)((long)C * tid / nt), c1 = (int)((long)C * (tid + 1) / nt);
        for (int n = 0; n < B * T; n++) {
            const float* d = dout + (size_t)n * C;
            float* e = dwte + (size_t)idx[n] * C;
            for (int c = c0; c < c1; c++) e[c] += d[c];
            if (dwpe) {
                float* p = dwpe + (size_t)(n % T) * C;
                for (int c = c0; c < c1; c++) p[c] += d[c];
            }
        }
    }
}
