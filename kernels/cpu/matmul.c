// kernels/cpu/matmul.c: GEMMs through the CPU BLAS chosen by measurement (docs/gemm_choice.md).
// All row-major. oneDNN's dnnl_sgemm is row-major natively; cblas gets CblasRowMajor.
#include "../ops.h"
#include "cpu_common.h"
#include <string.h>
#ifdef GATEDGPT_GEMM_DNNL
#include <dnnl.h>
void cpu_sgemm(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
    dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) {
        fprintf(stderr, "error: dnnl_sgemm failed (status %d) for M=%d N=%d K=%d\n", (int)st, M, N, K);
        exit(1);
    }
}
#elif defined(GATEDGPT_GEMM_NAIVE)
// A plain loop nest (GATEDGPT_GEMM=naive): for machines without a BLAS package, such as a GPU
// machine that needs the CPU backend only as the reference of the GPU tests. Correct, and
// orders of magnitude slower than a BLAS. Rows of C in parallel unless already inside a
// parallel region (attention calls it per task).
void cpu_sgemm(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
    #pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int p = 0; p < K; p++) {
                float a = ta == 'T' ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                float b = tb == 'T' ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                s += a * b;
            }
            float* c = &C[(size_t)i * ldc + j];
            *c = beta == 0.0f ? alpha * s : alpha * s + beta * *c;
        }
}
#else
#include <cblas.h>
void cpu_sgemm(char ta, char tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta == 'T' ? CblasTrans : CblasNoTrans,
                tb == 'T' ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

// out[N,OC] (=|+=) inp[N,C] @ w[OC,C]^T (the CPU backend stores activations in fp32: the two
// forward GEMMs of ops.h are the same product)
void ops_matmul_forward_f32(float* out, const float* inp, const float* w, int N, int C, int OC,
                            int accumulate) {
    cpu_sgemm('N', 'T', N, OC, C, 1.0f, inp, C, w, C, accumulate ? 1.0f : 0.0f, out, OC);
}
void ops_matmul_forward(float* out, const float* inp, const float* w, int N, int C, int OC) {
    ops_matmul_forward_f32(out, inp, w, N, C, OC, 0);
}

// dinp[N,C] = dout[N,OC] @ w[OC,C];  dw[OC,C] += dout^T[OC,N] @ inp[N,C]
void ops_matmul_backward(float* dinp, float* dw, const float* dout, const float* inp,
                         const float* w, int N, int C, int OC) {
    if (dinp) cpu_sgemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    cpu_sgemm('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
}

// out = the bias in every row, then the GEMM adds the product (beta = 1): one fp32 sum per element
void ops_matmul_bias_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                             int OC) {
    if (!bias) { ops_matmul_forward(out, inp, w, N, C, OC); return; }
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    cpu_sgemm('N', 'T', N, OC, C, 1.0f, inp, C, w, C, 1.0f, out, OC);
}

void ops_bias_add_f32(float* out, const float* bias, int N, int OC) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * OC;
        for (int c = 0; c < OC; c++) o[c] += bias[c];
    }
}

// Columns in blocks of 64 over the threads; each column's rows added in row order (in double),
// so the sum does not depend on the thread count.
#define BIAS_COLS 64
void ops_bias_backward(float* db, const float* dout, int N, int OC) {
    const int nb = (OC + BIAS_COLS - 1) / BIAS_COLS;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        const int c0 = b * BIAS_COLS, nc = OC - c0 < BIAS_COLS ? OC - c0 : BIAS_COLS;
        double acc[BIAS_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float* r = dout + (size_t)n * OC + c0;
            for (int c = 0; c < nc; c++) acc[c] += r[c];
        }
        for (int c = 0; c < nc; c++) db[c0 + c] += (float)acc[c];
    }
}
