// tests/test_gpu_ops.c: every CUDA op against the CPU op (the reference) on fresh random inputs.
//
//   test_gpu_ops                  run every check (prints "skipped: no CUDA device" and exits 0
//                                 where no GPU is visible)
//   test_gpu_ops --has-device     exit 0 when a GPU is usable, 1 otherwise (for scripts)
//   test_gpu_ops --has-cudnn      exit 0 when a GPU is usable and the build has cuDNN attention
//
// Both backends live in this binary: the CUDA one under the ops_* names, the CPU one renamed
// and reached through the table cpu_ref (tests/cpu_ref.h). Each check draws random inputs on
// the host, runs the CPU op on them, uploads the same inputs, runs the CUDA op with its "="
// outputs poisoned with NaN (an element the kernel does not write fails the check), and
// compares: error = max |gpu - cpu| / max |cpu| per tensor. "+=" outputs start from random
// values on both sides, so accumulation is checked too.
//
// Tolerances (fp32 on both sides, different summation orders):
//   elementwise ops, norms, prep (every RoPE scaling and pos0), RoPE on cached rows, softmax +
//   cross-entropy, AdamW, the MoE router, combine and the shared-expert gate: 1e-5
//   attention forward and the attention over the KV cache (y, yg, lse, sink) 2e-5, attention
//   backward and the weight gradients of qk-norm 1e-4;
//   cuDNN's attention and the flash kernel (attn_impl = cudnn / flash, bf16 products): forward
//   2e-2, backward 5e-2
//   GEMMs 1e-5, or 5e-3 with GATEDGPT_CUDA_TF32=1 (inputs rounded to 10 mantissa bits), or 2e-2
//   with GATEDGPT_CUDA_BF16_GEMM=1 (8 mantissa bits)
//   the Gated DeltaNet's delta rule 2e-5 forward, 1e-4 backward (a recurrence over T tokens); its
//   chunked kernels (--gdn-chunk: the ctest cudaemu_gdn_chunk) 5e-5 and 3e-4 (slow decays);
//   its gates, conv1d, L2 norm and gated RMSNorm 1e-5; ops_float_from_act (fp32: a copy): exact
//   sums of squares and the router statistics (double partials) 1e-12; the embedding backward,
//   abs-max, abs-median, the gate histogram, the router's top-k indices, the dispatch plan, the
//   KV cache write and the MoE gather and its backward: exact (same order of additions, or integer counts, or a selection)
// These bounds are written before any GPU run; loosen one only with the measured error beside it.
#include <string.h>
#include "test_util.h"
#include "cpu_ref.h"
#include "../kernels/cuda/cuda_backend.h"

// "Measured" below: the CUDA emulator (test_gpu_ops_emu: these kernels on the CPU, cuBLAS as k-order
// fp32 sums) against the CPU ops under ONEDNN_MAX_CPU_ISA = AVX2, AVX and SSE41.
// Elementwise, norms, softmax, AdamW, router: sums of up to C = 1024 terms (worst case gamma_1024 =
// 6e-5 is not reached, random signs give ~sqrt(C) u); measured max 1.07e-6 (layernorm mean, all ISAs): 9.3x
#define TOL_ELEM 1e-5
// derived: the T <= 300-key sums, gamma_300 = T u = 1.8e-5; measured max 5.7e-7 (AVX), 3.9e-7 (SSE41)
#define TOL_ATT_FWD 2e-5
// derived: ~4 chained T- and hd-term sums (dP, D, dS, dq/dk), 4 gamma_300 = 7e-5; measured max 1.9e-6
#define TOL_ATT_BWD 1e-4
// cuDNN's attention and the flash kernel compute their products in bf16 (8 mantissa bits:
// inputs rounded by up to 2^-9 relative). A bf16 emulation of the flash kernel on these inputs
// (tests/reference/flash_bf16_error.py) gives <= 4.6e-3 forward and <= 7.3e-3 backward, the CUDA
// emulator's flash kernels 4.7e-3 (y) and 9.0e-3 (dq) on all three ISAs: the bounds leave 4.3x and 5.6x
#define TOL_BF16_FWD 2e-2
#define TOL_BF16_BWD 5e-2
// fp32 GEMMs (K <= 1000): measured max 1.13e-6 (AVX, SSE41), 1.05e-6 (AVX2): 8.8x. TF32 and bf16
// inputs (main) are derived: each product off by <= 2^-10 (TF32) or 2^-8 (bf16) relative, times
// sum|a b| / max|ref| ~ 4 here: 3.9e-3 < 5e-3, 1.6e-2 < 2e-2 (measured 3.8e-4 and 2.7e-3)
static double tol_gemm = 1e-5;
// Gated DeltaNet's delta rule (fp32 on both sides; the CUDA kernel runs the recurrent form, the
// CPU the chunked one when chunk > 0). Forward: each step rounds a dk-term sum per column (random
// signs: ~sqrt(dk) u relative, u = 6e-8), and the recurrence carries an error on with the decay
// exp(g) <= 0.95 and the contraction (I - beta k k^T) of norm <= 1, so errors add up over at most
// 1 / (1 - 0.95) = 20 steps: sqrt(128) u 20 = 1.4e-5 at dk = 128; measured max 6.7e-7 (o, chunk 64
// on the CPU), 3.8e-7 (state_out).
#define TOL_GDN_FWD 2e-5
// Backward: dS is carried back through the same recurrence (x 20), then dq, dk, dv are ~4 chained
// dk- or dv-term sums and dg sums dk dv = 16384 products per token at dk = dv = 128 (sqrt(16384) u
// = 7.7e-6 of their magnitudes, more relative to a cancelling sum); measured max 4.0e-6 (dg at
// dk = dv = 128), the other gradients <= 3.3e-7. The gates, the conv, the L2 norm and the gated
// RMSNorm are elementwise or n <= 128-term sums: TOL_ELEM (measured max 3.6e-7).
#define TOL_GDN_BWD 1e-4
// The chunked kernels (kernels/cuda/deltanet_chunk.cu; this build: fp32 products on CUDA cores)
// against the CPU: the same sums regrouped, GEMMs of depth <= 128 (sqrt(128) u per sum, as above)
// and the forward substitution's <= 63-term sums, and the chunk-to-chunk state carries an error
// on as the recurrence does. With the slow decays (exp(g) >= 0.98) an error lives ~1 / (1 - 0.98)
// = 50 tokens instead of 20: TOL_GDN_FWD's derivation with 50, sqrt(128) u 50 = 3.4e-5 -> 5e-5;
// the backward TOL_GDN_BWD x 50 / 20 = 2.5e-4 -> 3e-4. Measured (emulator, against the CPU's chunked
// forward and backward): forward <= 5.9e-7 (o, slow decay), backward <= 1.7e-6 (dg); against the
// CPU's recurrent backward (before it was chunked) 4.2e-6 (dg, strong decay).
#define TOL_GDN_CHUNK_FWD 5e-5
#define TOL_GDN_CHUNK_BWD 3e-4

// ---- host/device helpers ----------------------------------------------------------------
static float* hrand(size_t n, double scale) {
    float* p = malloc((n ? n : 1) * sizeof(float));
    tu_fill(p, n, scale);
    return p;
}
static float* hcopy(const float* x, size_t n) {
    float* p = malloc((n ? n : 1) * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}
static float* hzeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
// a device copy of host x[n]
static float* dcopy(const float* x, size_t n) {
    float* d = ops_malloc(n * sizeof(float));
    ops_from_host(d, x, n * sizeof(float));
    return d;
}
// a device buffer of n NaNs (for "=" outputs: unwritten elements stay NaN and fail the check)
static float* dpoison(size_t n) {
    float* h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float* d = dcopy(h, n);
    free(h);
    return d;
}
static int* dcopy_int(const int* x, size_t n) {
    int* d = ops_malloc(n * sizeof(int));
    ops_from_host(d, x, n * sizeof(int));
    return d;
}
static float* hback(const float* d, size_t n) {
    float* h = malloc((n ? n : 1) * sizeof(float));
    ops_to_host(h, d, n * sizeof(float));
    return h;
}

// device d[n] vs host reference ref[n]
static void cmp(const char* what, const float* d, const float* ref, size_t n, double tol) {
    float* h = hback(d, n);
    double e = tu_rel_err(h, ref, n);
    TU_CHECK(e <= tol, "%s: rel err %.2e > %.0e", what, e, tol);
    printf("  %-64s rel err %.2e (tol %.0e)\n", what, e, tol);
    free(h);
}
// the same with the error measured against max(max |ref|, floor): for a reference that is 0 up to
// rounding (a cancellation), whose own size says nothing; floor is the size of what cancelled
static void cmp_floor(const char* what, const float* d, const float* ref, size_t n, double tol, double floor) {
    float* h = hback(d, n);
    double md = 0.0, mr = floor;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)h[i] - ref[i]);
        md = isnan(e) || e > md ? (isnan(e) ? INFINITY : e) : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    double e = md / mr;
    TU_CHECK(e <= tol, "%s: err %.2e (against max(|ref|, %.2e)) > %.0e", what, e, floor, tol);
    printf("  %-64s err %.2e vs %.1e (tol %.0e)\n", what, e, mr, tol);
    free(h);
}
static double max_abs(const float* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}
// device d[n] must equal host ref[n] bit for bit
static void cmp_exact(const char* what, const float* d, const float* ref, size_t n) {
    float* h = hback(d, n);
    int same = memcmp(h, ref, n * sizeof(float)) == 0;
    TU_CHECK(same, "%s: not bitwise equal to the CPU (rel err %.2e)", what, tu_rel_err(h, ref, n));
    printf("  %-64s %s\n", what, same ? "bitwise equal" : "DIFFERENT");
    free(h);
}
// two device buffers must be bitwise equal (determinism)
static void cmp_same_bits(const char* what, const float* a, const float* b, size_t n) {
    float* ha = hback(a, n);
    float* hb = hback(b, n);
    int same = memcmp(ha, hb, n * sizeof(float)) == 0;
    TU_CHECK(same, "%s: two runs on the same inputs differ", what);
    printf("  %-64s %s\n", what, same ? "same bits on a rerun" : "DIFFERENT on a rerun");
    free(ha); free(hb);
}

static int rand_int(int n) { return (int)((tu_rand() * 0.5 + 0.5) * n) % n; }

// ---------------------------------------------------------------------------------------------
static void test_matmul(int N, int C, int OC) {
    char nm[96];
    float *inp = hrand((size_t)N * C, 1), *w = hrand((size_t)OC * C, 1), *out0 = hrand((size_t)N * OC, 1);
    float *dout = hrand((size_t)N * OC, 1), *dw0 = hrand((size_t)OC * C, 1);
    float *d_inp = dcopy(inp, (size_t)N * C), *d_w = dcopy(w, (size_t)OC * C), *d_dout = dcopy(dout, (size_t)N * OC);
    // forward (=), and into fp32 (= and +=: the residual stream, the router's logits)
    float* ref = hcopy(out0, (size_t)N * OC);
    cpu_ref.matmul_forward(ref, inp, w, N, C, OC);
    float* d_out = dpoison((size_t)N * OC);
    ops_matmul_forward(d_out, d_inp, d_w, N, C, OC);
    snprintf(nm, sizeof nm, "matmul forward N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_out, ref, (size_t)N * OC, tol_gemm);
    memcpy(ref, out0, (size_t)N * OC * sizeof(float));
    cpu_ref.matmul_forward_f32(ref, inp, w, N, C, OC, 0);
    ops_free(d_out);
    d_out = dpoison((size_t)N * OC);
    ops_matmul_forward_f32(d_out, d_inp, d_w, N, C, OC, 0);
    snprintf(nm, sizeof nm, "matmul forward f32 N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_out, ref, (size_t)N * OC, tol_gemm);
    memcpy(ref, out0, (size_t)N * OC * sizeof(float));
    cpu_ref.matmul_forward_f32(ref, inp, w, N, C, OC, 1);
    ops_from_host(d_out, out0, (size_t)N * OC * sizeof(float));
    ops_matmul_forward_f32(d_out, d_inp, d_w, N, C, OC, 1);
    snprintf(nm, sizeof nm, "matmul forward f32 += N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_out, ref, (size_t)N * OC, tol_gemm);
    // backward: dinp (=), dw (+=)
    float *rdinp = hzeros((size_t)N * C), *rdw = hcopy(dw0, (size_t)OC * C);
    cpu_ref.matmul_backward(rdinp, rdw, dout, inp, w, N, C, OC);
    float *d_dinp = dpoison((size_t)N * C), *d_dw = dcopy(dw0, (size_t)OC * C);
    ops_matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC);
    snprintf(nm, sizeof nm, "matmul backward dinp N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_dinp, rdinp, (size_t)N * C, tol_gemm);
    snprintf(nm, sizeof nm, "matmul backward dw += N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_dw, rdw, (size_t)OC * C, tol_gemm);
    // dinp == NULL: dw only
    cpu_ref.matmul_backward(NULL, rdw, dout, inp, w, N, C, OC);
    ops_matmul_backward(NULL, d_dw, d_dout, d_inp, d_w, N, C, OC);
    snprintf(nm, sizeof nm, "matmul backward dw only (dinp NULL), accumulated twice");
    cmp(nm, d_dw, rdw, (size_t)OC * C, tol_gemm);
    free(inp); free(w); free(out0); free(dout); free(dw0); free(ref); free(rdinp); free(rdw);
    ops_free(d_inp); ops_free(d_w); ops_free(d_dout); ops_free(d_out); ops_free(d_dinp); ops_free(d_dw);
}

// the linear biases ([model] bias): the GEMM over a bias-filled output (beta = 1), the residual
// stream's bias add, and the bias gradient (a column sum in a fixed order)
static void test_matmul_bias(int N, int C, int OC) {
    char nm[96];
    const size_t nO = (size_t)N * OC;
    float *inp = hrand((size_t)N * C, 1), *w = hrand((size_t)OC * C, 1), *b = hrand(OC, 1), *out0 = hrand(nO, 1);
    float *dout = hrand(nO, 1), *db0 = hrand(OC, 1);
    float *d_inp = dcopy(inp, (size_t)N * C), *d_w = dcopy(w, (size_t)OC * C), *d_b = dcopy(b, OC);
    float* ref = hcopy(out0, nO);
    cpu_ref.matmul_bias_forward(ref, inp, w, b, N, C, OC);
    float* d_out = dpoison(nO);
    ops_matmul_bias_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    snprintf(nm, sizeof nm, "matmul + bias forward N=%d C=%d OC=%d", N, C, OC);
    cmp(nm, d_out, ref, nO, tol_gemm);
    // the residual stream's bias: one fp32 addition per element on both sides
    memcpy(ref, out0, nO * sizeof(float));
    cpu_ref.bias_add_f32(ref, b, N, OC);
    ops_from_host(d_out, out0, nO * sizeof(float));
    ops_bias_add_f32(d_out, d_b, N, OC);
    snprintf(nm, sizeof nm, "bias add f32 (+=) N=%d OC=%d", N, OC);
    cmp_exact(nm, d_out, ref, nO);
    // db += column sums. CPU: each column in row order in double; CUDA: 32 fp32 partial sums of
    // N/32 rows each, then their sum: error <= (N/32 + 32) u sum_n |dout[n, c]| (u = 6e-8): 3.8e-6
    // of the largest column's sum of |dout| at N = 1000 (the floor below); tolerance 1e-5
    float* rdb = hcopy(db0, OC);
    cpu_ref.bias_backward(rdb, dout, N, OC);
    float *d_dout = dcopy(dout, nO), *d_db = dcopy(db0, OC), *d_db2 = dcopy(db0, OC);
    ops_bias_backward(d_db, d_dout, N, OC);
    ops_bias_backward(d_db2, d_dout, N, OC);
    double floor = 0.0;
    for (int c = 0; c < OC; c++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) s += fabs(dout[(size_t)n * OC + c]);
        floor = s > floor ? s : floor;
    }
    snprintf(nm, sizeof nm, "bias backward db (+=) N=%d OC=%d", N, OC);
    cmp_floor(nm, d_db, rdb, OC, 1e-5, floor);
    cmp_same_bits("bias backward: deterministic", d_db, d_db2, OC);
    free(inp); free(w); free(b); free(out0); free(dout); free(db0); free(ref); free(rdb);
    ops_free(d_inp); ops_free(d_w); ops_free(d_b); ops_free(d_out); ops_free(d_dout); ops_free(d_db); ops_free(d_db2);
}

// the GEMMs with GELU fused (cuBLASLt epilogues where it has them, the unfused ops elsewhere):
// forward pre and act, backward dpre (=) and dw (+=)
static void test_matmul_gelu(int N, int C, int OC) {
    char nm[96];
    float *inp = hrand((size_t)N * C, 1), *w = hrand((size_t)OC * C, 0.2);
    float *rpre = hzeros((size_t)N * OC), *ract = hzeros((size_t)N * OC);
    cpu_ref.matmul_gelu_forward(rpre, ract, inp, w, N, C, OC);
    float *d_inp = dcopy(inp, (size_t)N * C), *d_w = dcopy(w, (size_t)OC * C);
    float *d_pre = dpoison((size_t)N * OC), *d_act = dpoison((size_t)N * OC);
    ops_matmul_gelu_forward(d_pre, d_act, d_inp, d_w, N, C, OC);
    snprintf(nm, sizeof nm, "matmul + gelu forward N=%d C=%d OC=%d: pre", N, C, OC);
    cmp(nm, d_pre, rpre, (size_t)N * OC, tol_gemm);
    snprintf(nm, sizeof nm, "matmul + gelu forward: act");
    cmp(nm, d_act, ract, (size_t)N * OC, tol_gemm);
    // backward of the next GEMM through the GELU: here inp2 = act [N, OC] -> out [N, C]
    float *dout = hrand((size_t)N * C, 1), *w2 = hrand((size_t)C * OC, 0.2), *dw0 = hrand((size_t)C * OC, 1);
    float *rdpre = hzeros((size_t)N * OC), *rdw = hcopy(dw0, (size_t)C * OC);
    cpu_ref.matmul_backward_gelu(rdpre, rdw, dout, ract, w2, rpre, N, OC, C);
    float *d_dout = dcopy(dout, (size_t)N * C), *d_w2 = dcopy(w2, (size_t)C * OC), *d_dw = dcopy(dw0, (size_t)C * OC);
    float *d_ract = dcopy(ract, (size_t)N * OC), *d_rpre = dcopy(rpre, (size_t)N * OC), *d_dpre = dpoison((size_t)N * OC);
    ops_matmul_backward_gelu(d_dpre, d_dw, d_dout, d_ract, d_w2, d_rpre, N, OC, C);
    cmp("matmul backward through gelu: dpre", d_dpre, rdpre, (size_t)N * OC, tol_gemm);
    cmp("matmul backward through gelu: dw (+=)", d_dw, rdw, (size_t)C * OC, tol_gemm);
    free(inp); free(w); free(rpre); free(ract); free(dout); free(w2); free(dw0); free(rdpre); free(rdw);
    ops_free(d_inp); ops_free(d_w); ops_free(d_pre); ops_free(d_act); ops_free(d_dout); ops_free(d_w2);
    ops_free(d_dw); ops_free(d_ract); ops_free(d_rpre); ops_free(d_dpre);
}

// ---------------------------------------------------------------------------------------------
static void test_embedding(int B, int T, int C, int V) {
    const int N = B * T;
    int* idx = malloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) idx[n] = rand_int(V);
    idx[0] = idx[N - 1] = V - 1;   // the largest id, repeated
    float *wte = hrand((size_t)V * C, 1), *wpe = hrand((size_t)T * C, 1), *dout = hrand((size_t)N * C, 1);
    float *dwte0 = hrand((size_t)V * C, 1), *dwpe0 = hrand((size_t)T * C, 1);
    int* d_idx = dcopy_int(idx, N);
    float *d_wte = dcopy(wte, (size_t)V * C), *d_wpe = dcopy(wpe, (size_t)T * C), *d_dout = dcopy(dout, (size_t)N * C);
    for (int pos = 0; pos <= 1; pos++) {
        float* ref = hzeros((size_t)N * C);
        cpu_ref.embedding_forward(ref, idx, wte, pos ? wpe : NULL, B, T, C);
        float* d_out = dpoison((size_t)N * C);
        ops_embedding_forward(d_out, d_idx, d_wte, pos ? d_wpe : NULL, B, T, C);
        cmp_exact(pos ? "embedding forward (+ wpe)" : "embedding forward", d_out, ref, (size_t)N * C);
        free(ref); ops_free(d_out);
    }
    // backward: both sides add each token's row in token order -> the same bits
    float *rdwte = hcopy(dwte0, (size_t)V * C), *rdwpe = hcopy(dwpe0, (size_t)T * C);
    cpu_ref.embedding_backward(rdwte, rdwpe, dout, idx, B, T, C);
    float *d_dwte = dcopy(dwte0, (size_t)V * C), *d_dwpe = dcopy(dwpe0, (size_t)T * C);
    ops_embedding_backward(d_dwte, d_dwpe, d_dout, d_idx, B, T, C);
    cmp_exact("embedding backward dwte += (repeated tokens)", d_dwte, rdwte, (size_t)V * C);
    cmp_exact("embedding backward dwpe +=", d_dwpe, rdwpe, (size_t)T * C);
    free(idx); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(rdwte); free(rdwpe);
    ops_free(d_idx); ops_free(d_wte); ops_free(d_wpe); ops_free(d_dout); ops_free(d_dwte); ops_free(d_dwpe);
}

// ---------------------------------------------------------------------------------------------
static void test_norm(OpsNormKind kind, int N, int C) {
    const char* kn = kind == OPS_LAYERNORM ? "layernorm" : "rmsnorm";
    const int ln = kind == OPS_LAYERNORM;
    char nm[96];
    float* inp = hrand((size_t)N * C, 2);
    for (size_t i = 0; i < (size_t)N * C; i++) inp[i] += 0.5f;   // a non-zero mean
    float *w = hrand(C, 1), *b = ln ? hrand(C, 1) : NULL, *dout = hrand((size_t)N * C, 1);
    float *dinp0 = hrand((size_t)N * C, 1), *dw0 = hrand(C, 1), *db0 = hrand(C, 1);
    float *rout = hzeros((size_t)N * C), *rmean = hzeros(N), *rrstd = hzeros(N);
    cpu_ref.norm_forward(rout, ln ? rmean : NULL, rrstd, inp, w, b, N, C, 1e-5f, kind);
    float *d_inp = dcopy(inp, (size_t)N * C), *d_w = dcopy(w, C), *d_b = ln ? dcopy(b, C) : NULL;
    float *d_out = dpoison((size_t)N * C), *d_mean = dpoison(N), *d_rstd = dpoison(N);
    ops_norm_forward(d_out, ln ? d_mean : NULL, d_rstd, d_inp, d_w, d_b, N, C, 1e-5f, kind);
    snprintf(nm, sizeof nm, "%s forward N=%d C=%d out", kn, N, C); cmp(nm, d_out, rout, (size_t)N * C, TOL_ELEM);
    snprintf(nm, sizeof nm, "%s forward rstd", kn); cmp(nm, d_rstd, rrstd, N, TOL_ELEM);
    if (ln) { snprintf(nm, sizeof nm, "%s forward mean", kn); cmp(nm, d_mean, rmean, N, TOL_ELEM); }
    // backward from the reference's statistics (the same inputs on both sides)
    float *rdinp = hcopy(dinp0, (size_t)N * C), *rdw = hcopy(dw0, C), *rdb = hcopy(db0, C);
    cpu_ref.norm_backward(rdinp, rdw, ln ? rdb : NULL, dout, inp, w, ln ? rmean : NULL, rrstd, N, C, kind);
    float *d_dout = dcopy(dout, (size_t)N * C), *d_rmean = dcopy(rmean, N), *d_rrstd = dcopy(rrstd, N);
    float *d_dinp = dcopy(dinp0, (size_t)N * C), *d_dw = dcopy(dw0, C), *d_db = dcopy(db0, C);
    ops_norm_backward(d_dinp, d_dw, ln ? d_db : NULL, d_dout, d_inp, d_w, ln ? d_rmean : NULL, d_rrstd, N, C, kind);
    snprintf(nm, sizeof nm, "%s backward dinp +=", kn); cmp(nm, d_dinp, rdinp, (size_t)N * C, TOL_ELEM);
    snprintf(nm, sizeof nm, "%s backward dw +=", kn); cmp(nm, d_dw, rdw, C, TOL_ELEM);
    if (ln) { snprintf(nm, sizeof nm, "%s backward db +=", kn); cmp(nm, d_db, rdb, C, TOL_ELEM); }
    // determinism: the same call again from the same starting values
    float *d_dinp2 = dcopy(dinp0, (size_t)N * C), *d_dw2 = dcopy(dw0, C), *d_db2 = dcopy(db0, C);
    ops_norm_backward(d_dinp2, d_dw2, ln ? d_db2 : NULL, d_dout, d_inp, d_w, ln ? d_rmean : NULL, d_rrstd, N, C, kind);
    snprintf(nm, sizeof nm, "%s backward dw", kn); cmp_same_bits(nm, d_dw, d_dw2, C);
    free(inp); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0); free(rout); free(rmean); free(rrstd);
    free(rdinp); free(rdw); free(rdb);
    ops_free(d_inp); ops_free(d_w); if (d_b) ops_free(d_b); ops_free(d_out); ops_free(d_mean); ops_free(d_rstd);
    ops_free(d_dout); ops_free(d_rmean); ops_free(d_rrstd); ops_free(d_dinp); ops_free(d_dw); ops_free(d_db);
    ops_free(d_dinp2); ops_free(d_dw2); ops_free(d_db2);
}

// ---------------------------------------------------------------------------------------------
// attention: prep forward, attention forward, attention backward, prep backward; then the probe
// statistics that read q, k, lse and qkv.
static const char* gate_name[] = {"none", "elementwise", "headwise"};
static const char* act_name[] = {"sigmoid", "ns_sigmoid", "silu"};

// which attention kernel test_attention checks (main runs the set with the fused kernel, then a
// subset with cuDNN's when the build has it), and its tolerances
static OpsAttnImpl att_impl = OPS_ATTN_FUSED;
// attention within documents ([data] doc_mask): when set, test_attention's sequences hold packed
// documents, each closed by an end-of-text token after the positions att_doc_eots lists (and
// after T/5 + b in sequence b), with RoPE positions restarting when att_doc_rope
static int att_doc = 0, att_doc_rope = 0;
static const int att_doc_eots[] = {0, 30, 31, 62, 63, 64, 127, 128, 200};

// doc[b*T + t] (=) the first token of t's document (model/doc_mask.h's rule, written out here)
static void att_doc_starts(int* doc, int B, int T) {
    for (int b = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            int closed = t > 0 && t - 1 == T / 5 + b;   // an end-of-text token at t - 1
            for (size_t i = 0; i < sizeof att_doc_eots / sizeof att_doc_eots[0]; i++) closed |= t - 1 == att_doc_eots[i];
            if (closed) start = t;
            doc[b * T + t] = start;
        }
    }
}

static void test_attention(int B, int T, int H, int Hkv, int hd, int qk_norm, int rope, OpsGate gate,
                           OpsGatePos pos, OpsGateAct act) {
    const double TOL_FWD = att_impl != OPS_ATTN_FUSED ? TOL_BF16_FWD : TOL_ATT_FWD;
    const double TOL_BWD = att_impl != OPS_ATTN_FUSED ? TOL_BF16_BWD : TOL_ATT_BWD;
    OpsAttnShape s = {0};
    s.impl = att_impl;
    s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.qk_norm = qk_norm; s.rope = rope;
    s.rope_base = 10000.0f; s.eps = 1e-5f; s.gate = gate; s.gate_pos = pos; s.gate_act = act;
    const int N = B * T, QKVG = ops_attn_qkv_cols(&s), Hd = H * hd, KVd = Hkv * hd, R = H + Hkv;
    const int sgate = gate != OPS_GATE_NONE && pos == OPS_GATEPOS_SDPA;
    // sg: the GPU's shape, with its device copy of the document starts (s: the CPU's, host)
    OpsAttnShape sg = s;
    int* hdoc = NULL;
    if (att_doc) {
        hdoc = malloc((size_t)N * sizeof(int));
        att_doc_starts(hdoc, B, T);
        int* ddoc = ops_malloc((size_t)N * sizeof(int));
        ops_from_host(ddoc, hdoc, (size_t)N * sizeof(int));
        s.doc_start = hdoc; sg.doc_start = ddoc;
        s.doc_rope = sg.doc_rope = att_doc_rope;
    }
    char tag[160], nm[192];
    snprintf(tag, sizeof tag, "attn%s%s B=%d T=%d H=%d/%d hd=%d qkn=%d rope=%d %s@%s/%s",
             att_impl == OPS_ATTN_CUDNN ? " (cuDNN)" : att_impl == OPS_ATTN_FLASH ? " (flash, tensor cores)" : "",
             att_doc ? (att_doc_rope ? " docs/restart" : " docs") : "", B, T, H, Hkv, hd, qk_norm, rope,
             gate_name[gate], pos == OPS_GATEPOS_SDPA ? "sdpa" : "value", act_name[act]);
    printf(" %s\n", tag);
    float *qkv = hrand((size_t)N * QKVG, 1), *qw = hrand(hd, 0.3), *kw = hrand(hd, 0.3), *dyg = hrand((size_t)N * Hd, 1);
    for (int i = 0; i < hd; i++) { qw[i] += 1.0f; kw[i] += 1.0f; }
    float *dqw0 = hrand(hd, 1), *dkw0 = hrand(hd, 1);
    // reference
    float *rq = hzeros((size_t)N * Hd), *rk = hzeros((size_t)N * KVd), *rv = hzeros((size_t)N * KVd), *rrstd = hzeros((size_t)N * R);
    float *ry = hzeros((size_t)N * Hd), *ryg = sgate ? hzeros((size_t)N * Hd) : ry, *rlse = hzeros((size_t)N * H);
    cpu_ref.attn_prep_forward(rq, rk, rv, rrstd, qkv, qw, kw, &s);
    cpu_ref.attention_forward(ry, ryg, rlse, rq, rk, rv, qkv, &s);
    float *rdq = hzeros((size_t)N * Hd), *rdk = hzeros((size_t)N * KVd), *rdv = hzeros((size_t)N * KVd);
    float *rdqkv = hzeros((size_t)N * QKVG), *rscr = hzeros((size_t)N * Hd);
    float *rdqw = hcopy(dqw0, hd), *rdkw = hcopy(dkw0, hd);
    cpu_ref.attention_backward(rdq, rdk, rdv, rdqkv, rscr, dyg, rq, rk, rv, ry, rlse, qkv, &s);
    cpu_ref.attn_prep_backward(rdqkv, rdqw, rdkw, rdq, rdk, rdv, qkv, rrstd, qw, kw, &s);

    // GPU: each stage from the reference's inputs to that stage, so that errors do not compound
    float *d_qkv = dcopy(qkv, (size_t)N * QKVG), *d_qw = dcopy(qw, hd), *d_kw = dcopy(kw, hd);
    float *d_q = dpoison((size_t)N * Hd), *d_k = dpoison((size_t)N * KVd), *d_v = dpoison((size_t)N * KVd);
    float* d_rstd = dpoison((size_t)N * R);
    ops_attn_prep_forward(d_q, d_k, d_v, d_rstd, d_qkv, d_qw, d_kw, &sg);
    snprintf(nm, sizeof nm, "  prep forward q"); cmp(nm, d_q, rq, (size_t)N * Hd, TOL_ELEM);
    snprintf(nm, sizeof nm, "  prep forward k"); cmp(nm, d_k, rk, (size_t)N * KVd, TOL_ELEM);
    snprintf(nm, sizeof nm, "  prep forward v"); cmp(nm, d_v, rv, (size_t)N * KVd, TOL_ELEM);
    if (qk_norm) { snprintf(nm, sizeof nm, "  prep forward qk_rstd"); cmp(nm, d_rstd, rrstd, (size_t)N * R, TOL_ELEM); }

    ops_from_host(d_q, rq, (size_t)N * Hd * sizeof(float));
    ops_from_host(d_k, rk, (size_t)N * KVd * sizeof(float));
    ops_from_host(d_v, rv, (size_t)N * KVd * sizeof(float));
    float *d_y = dpoison((size_t)N * Hd), *d_yg = sgate ? dpoison((size_t)N * Hd) : d_y, *d_lse = dpoison((size_t)N * H);
    ops_attention_forward(d_y, d_yg, d_lse, d_q, d_k, d_v, d_qkv, &sg);
    snprintf(nm, sizeof nm, "  attention forward y"); cmp(nm, d_y, ry, (size_t)N * Hd, TOL_FWD);
    if (sgate) { snprintf(nm, sizeof nm, "  attention forward yg (gated)"); cmp(nm, d_yg, ryg, (size_t)N * Hd, TOL_FWD); }
    snprintf(nm, sizeof nm, "  attention forward lse"); cmp(nm, d_lse, rlse, (size_t)N * H, TOL_FWD);
    if (!sgate) {   // a separate yg buffer gets a copy of y
        float* d_yg2 = dpoison((size_t)N * Hd);
        ops_attention_forward(d_y, d_yg2, d_lse, d_q, d_k, d_v, d_qkv, &sg);
        snprintf(nm, sizeof nm, "  attention forward yg (separate buffer, no gate)"); cmp(nm, d_yg2, ry, (size_t)N * Hd, TOL_FWD);
        ops_free(d_yg2);
    }

    ops_from_host(d_y, ry, (size_t)N * Hd * sizeof(float));
    ops_from_host(d_lse, rlse, (size_t)N * H * sizeof(float));
    float *d_dyg = dcopy(dyg, (size_t)N * Hd), *d_scr = dpoison((size_t)N * Hd);
    float *d_dq = dpoison((size_t)N * Hd), *d_dk = dpoison((size_t)N * KVd), *d_dv = dpoison((size_t)N * KVd);
    float* d_dqkv = dpoison((size_t)N * QKVG);
    ops_attention_backward(d_dq, d_dk, d_dv, d_dqkv, d_scr, d_dyg, d_q, d_k, d_v, d_y, d_lse, d_qkv, &sg);
    if (T > 1) {
        snprintf(nm, sizeof nm, "  attention backward dq"); cmp(nm, d_dq, rdq, (size_t)N * Hd, TOL_BWD);
        snprintf(nm, sizeof nm, "  attention backward dk"); cmp(nm, d_dk, rdk, (size_t)N * KVd, TOL_BWD);
    } else {
        // T = 1: one key, P = 1, so dS = P (dP - D) = 0 and dq = dk = 0 up to the rounding of dP - D
        // (dP = dy.v and D = dy.y summed in different orders); both sides hold noise, so the error
        // is measured against the size of the cancelled terms, scale |k| |dP| with |dP| <= hd |dy| |v|
        // (dy = dv here: P = 1)
        const double floor = max_abs(rk, (size_t)N * KVd) * max_abs(rdv, (size_t)N * KVd) *
                             max_abs(rv, (size_t)N * KVd) * hd / sqrt((double)hd);
        snprintf(nm, sizeof nm, "  attention backward dq (0 up to rounding)"); cmp_floor(nm, d_dq, rdq, (size_t)N * Hd, TOL_BWD, floor);
        snprintf(nm, sizeof nm, "  attention backward dk (0 up to rounding)"); cmp_floor(nm, d_dk, rdk, (size_t)N * KVd, TOL_BWD, floor);
    }
    snprintf(nm, sizeof nm, "  attention backward dv"); cmp(nm, d_dv, rdv, (size_t)N * KVd, TOL_BWD);
    // determinism of the backward
    float *d_dq2 = dpoison((size_t)N * Hd), *d_dk2 = dpoison((size_t)N * KVd), *d_dv2 = dpoison((size_t)N * KVd);
    ops_attention_backward(d_dq2, d_dk2, d_dv2, d_dqkv, d_scr, d_dyg, d_q, d_k, d_v, d_y, d_lse, d_qkv, &sg);
    cmp_same_bits("  attention backward dq", d_dq, d_dq2, (size_t)N * Hd);
    cmp_same_bits("  attention backward dk", d_dk, d_dk2, (size_t)N * KVd);
    cmp_same_bits("  attention backward dv", d_dv, d_dv2, (size_t)N * KVd);

    ops_from_host(d_dq, rdq, (size_t)N * Hd * sizeof(float));
    ops_from_host(d_dk, rdk, (size_t)N * KVd * sizeof(float));
    ops_from_host(d_dv, rdv, (size_t)N * KVd * sizeof(float));
    float *d_rrstd = dcopy(rrstd, (size_t)N * R), *d_dqw = dcopy(dqw0, hd), *d_dkw = dcopy(dkw0, hd);
    ops_attn_prep_backward(d_dqkv, d_dqw, d_dkw, d_dq, d_dk, d_dv, d_qkv, d_rrstd, d_qw, d_kw, &sg);
    // dqkv: q/k/v (and value-gate) columns from prep backward, sdpa-gate columns from attention
    // backward: together every column is written
    snprintf(nm, sizeof nm, "  dqkv (attention + prep backward, every column)"); cmp(nm, d_dqkv, rdqkv, (size_t)N * QKVG, TOL_BWD);
    if (qk_norm) {
        snprintf(nm, sizeof nm, "  prep backward q_norm.w +="); cmp(nm, d_dqw, rdqw, hd, TOL_BWD);
        snprintf(nm, sizeof nm, "  prep backward k_norm.w +="); cmp(nm, d_dkw, rdkw, hd, TOL_BWD);
    }

    // probe statistics on the same q, k, lse, qkv
    float *rmean = hzeros(H), *gmean = hzeros(H);
    cpu_ref.attn_first_token(rmean, rq, rk, rlse, &s);
    ops_attn_first_token(gmean, d_q, d_k, d_lse, &sg);
    double e = tu_rel_err(gmean, rmean, H);
    TU_CHECK(e <= TOL_FWD, "first-token attention: rel err %.2e", e);
    printf("  %-64s rel err %.2e (tol %.0e)\n", "  probe: first-token attention per head", e, TOL_FWD);
    float *rlmax = hzeros(H), *glmax = hzeros(H);
    cpu_ref.attn_logit_max(rlmax, rq, rk, &s);
    ops_attn_logit_max(glmax, d_q, d_k, &sg);
    e = tu_rel_err(glmax, rlmax, H);
    TU_CHECK(e <= TOL_FWD, "attention logit max per head: rel err %.2e", e);
    printf("  %-64s rel err %.2e (tol %.0e)\n", "  probe: attention logit max per head", e, TOL_FWD);
    free(rlmax); free(glmax);
    if (gate != OPS_GATE_NONE) {
        double rs, gs;
        long rc, gc, rh[10], gh[10];
        cpu_ref.gate_stats(qkv, &s, &rs, &rc, rh);
        ops_gate_stats(d_qkv, &s, &gs, &gc, gh);
        long hd_diff = 0;
        for (int i = 0; i < 10; i++) hd_diff += labs(rh[i] - gh[i]);
        double se = fabs(gs - rs) / fabs(rs);
        // a score within an ulp of a bin edge may fall on either side: allow 2 scores to move
        // (each move changes two bins); the sum: float sigmoids off by a few u each, summed in double:
        // ~4u = 2.4e-7 < 1e-6 (derived); measured 2.6e-9 and 0 moves on all three ISAs
        TU_CHECK(gc == rc && se <= 1e-6 && hd_diff <= 4, "gate stats: count %ld/%ld, sum rel err %.2e, histogram moves %ld",
                 gc, rc, se, hd_diff);
        printf("  %-64s sum rel err %.2e, histogram moves %ld\n", "  probe: gate statistics", se, hd_diff);
    }
    free(rmean); free(gmean);

    free(qkv); free(qw); free(kw); free(dyg); free(dqw0); free(dkw0);
    free(rq); free(rk); free(rv); free(rrstd); free(ry); if (sgate) free(ryg); free(rlse);
    free(rdq); free(rdk); free(rdv); free(rdqkv); free(rscr); free(rdqw); free(rdkw);
    ops_free(d_qkv); ops_free(d_qw); ops_free(d_kw); ops_free(d_q); ops_free(d_k); ops_free(d_v); ops_free(d_rstd);
    ops_free(d_y); if (sgate) ops_free(d_yg); ops_free(d_lse); ops_free(d_dyg); ops_free(d_scr);
    ops_free(d_dq); ops_free(d_dk); ops_free(d_dv); ops_free(d_dqkv); ops_free(d_dq2); ops_free(d_dk2); ops_free(d_dv2);
    ops_free(d_rrstd); ops_free(d_dqw); ops_free(d_dkw);
    if (att_doc) { free(hdoc); ops_free((void*)sg.doc_start); }
}

// ---------------------------------------------------------------------------------------------
// RoPE positions and scalings (kernels/rope.h), the KV cache, against the CPU reference (cpu_ref).

static const char* rope_kind_name[] = {"none", "linear", "ntk", "yarn"};
// a scaling with factor 4 over a training length of 8 (the positions tested run past it);
// YaRN's betas at transformers' defaults; attn_factor 0 = YaRN's default 0.1 ln(s) + 1
static OpsRope rope_scaling(OpsRopeScaling kind, float attn_factor) {
    OpsRope r = {0};
    r.kind = kind; r.factor = 4.0f; r.orig_len = 8; r.beta_fast = 32.0f; r.beta_slow = 1.0f;
    r.attn_factor = attn_factor;
    return r;
}

// prep forward and backward with positions pos0 .. pos0 + T - 1 and a RoPE scaling: the GPU's
// tables come from the same rope_table_rows as the CPU's. The value gate makes prep backward
// write every column of dqkv. Called in an order that changes one thing at a time (pos0, kind,
// attn_factor), so a table cached under too short a key is caught.
static void test_prep_rope(OpsRopeScaling kind, float attn_factor, int pos0, int rope_dim) {
    const int B = 2, T = 12, H = 4, Hkv = 2, hd = 64;
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.qk_norm = 1; s.rope = 1; s.rope_base = 10000.0f;
    s.rope_scale = rope_scaling(kind, attn_factor); s.pos0 = pos0; s.eps = 1e-5f;
    s.rope_dim = rope_dim;   // partial RoPE: the first rope_dim channels turn (0 = all)
    s.gate = OPS_GATE_ELEMENTWISE; s.gate_pos = OPS_GATEPOS_VALUE; s.gate_act = OPS_ACT_SIGMOID;
    const int N = B * T, QKVG = ops_attn_qkv_cols(&s), Hd = H * hd, KVd = Hkv * hd, R = H + Hkv;
    char nm[160];
    printf(" prep with RoPE %s (factor 4, orig_len 8, attn_factor %g) pos0=%d B=%d T=%d H=%d/%d hd=%d rope_dim=%d\n",
           rope_kind_name[kind], attn_factor, pos0, B, T, H, Hkv, hd, rope_dim ? rope_dim : hd);
    float *qkv = hrand((size_t)N * QKVG, 1), *qw = hrand(hd, 0.3), *kw = hrand(hd, 0.3);
    for (int i = 0; i < hd; i++) { qw[i] += 1.0f; kw[i] += 1.0f; }
    float *dq = hrand((size_t)N * Hd, 1), *dk = hrand((size_t)N * KVd, 1), *dv = hrand((size_t)N * KVd, 1);
    float *dqw0 = hrand(hd, 1), *dkw0 = hrand(hd, 1);
    float *rq = hzeros((size_t)N * Hd), *rk = hzeros((size_t)N * KVd), *rv = hzeros((size_t)N * KVd), *rrstd = hzeros((size_t)N * R);
    float *rdqkv = hzeros((size_t)N * QKVG), *rdqw = hcopy(dqw0, hd), *rdkw = hcopy(dkw0, hd);
    cpu_ref.attn_prep_forward(rq, rk, rv, rrstd, qkv, qw, kw, &s);
    cpu_ref.attn_prep_backward(rdqkv, rdqw, rdkw, dq, dk, dv, qkv, rrstd, qw, kw, &s);
    float *d_qkv = dcopy(qkv, (size_t)N * QKVG), *d_qw = dcopy(qw, hd), *d_kw = dcopy(kw, hd);
    float *d_q = dpoison((size_t)N * Hd), *d_k = dpoison((size_t)N * KVd), *d_v = dpoison((size_t)N * KVd);
    float* d_rstd = dpoison((size_t)N * R);
    ops_attn_prep_forward(d_q, d_k, d_v, d_rstd, d_qkv, d_qw, d_kw, &s);
    // TOL_ELEM: the same per-row hd-term qk-norm sums as the prep checks of test_attention, then
    // one rotation by the (identical) table entries; measured max 3.2e-7 (emulator)
    cmp("  prep forward q", d_q, rq, (size_t)N * Hd, TOL_ELEM);
    cmp("  prep forward k", d_k, rk, (size_t)N * KVd, TOL_ELEM);
    cmp("  prep forward v (value gate)", d_v, rv, (size_t)N * KVd, TOL_ELEM);
    float *d_dq = dcopy(dq, (size_t)N * Hd), *d_dk = dcopy(dk, (size_t)N * KVd), *d_dv = dcopy(dv, (size_t)N * KVd);
    float *d_dqkv = dpoison((size_t)N * QKVG), *d_rrstd = dcopy(rrstd, (size_t)N * R);
    float *d_dqw = dcopy(dqw0, hd), *d_dkw = dcopy(dkw0, hd);
    ops_attn_prep_backward(d_dqkv, d_dqw, d_dkw, d_dq, d_dk, d_dv, d_qkv, d_rrstd, d_qw, d_kw, &s);
    // dqkv: per-row hd-term sums again (TOL_ELEM); the qk-norm weight gradients sum over every
    // row and head (TOL_ATT_BWD, as test_attention's); measured max 1.6e-7 and 2.5e-7
    snprintf(nm, sizeof nm, "  prep backward dqkv (every column)"); cmp(nm, d_dqkv, rdqkv, (size_t)N * QKVG, TOL_ELEM);
    cmp("  prep backward q_norm.w +=", d_dqw, rdqw, hd, TOL_ATT_BWD);
    cmp("  prep backward k_norm.w +=", d_dkw, rdkw, hd, TOL_ATT_BWD);
    free(qkv); free(qw); free(kw); free(dq); free(dk); free(dv); free(dqw0); free(dkw0);
    free(rq); free(rk); free(rv); free(rrstd); free(rdqkv); free(rdqw); free(rdkw);
    ops_free(d_qkv); ops_free(d_qw); ops_free(d_kw); ops_free(d_q); ops_free(d_k); ops_free(d_v); ops_free(d_rstd);
    ops_free(d_dq); ops_free(d_dk); ops_free(d_dv); ops_free(d_dqkv); ops_free(d_rrstd); ops_free(d_dqw); ops_free(d_dkw);
}

// ops_rope_rows: rows at pos0 + r rotated forward and back, against the CPU; then forward
// followed by inverse on the GPU gives the input back
static void test_rope_rows(OpsRopeScaling kind, int n_rows, int n_heads, int hd, int pos0, int rope_dim) {
    OpsAttnShape s = {0};
    s.hd = hd; s.rope = 1; s.rope_base = 10000.0f; s.rope_scale = rope_scaling(kind, 0.0f); s.rope_dim = rope_dim;
    const size_t n = (size_t)n_rows * n_heads * hd;
    char nm[160];
    float* x = hrand(n, 1);
    float* d_x = dcopy(x, n);
    for (int dir = 1; dir >= -1; dir -= 2) {
        float* ref = hcopy(x, n);
        cpu_ref.rope_rows(ref, n_rows, n_heads, pos0, dir, &s);
        ops_from_host(d_x, x, n * sizeof(float));
        ops_rope_rows(d_x, n_rows, n_heads, pos0, dir, &s);
        // TOL_ELEM: each output is a c - b s from the same table entries (and the same fp32
        // division for dir = -1): within a couple of u of the CPU's; measured max 1.2e-7
        snprintf(nm, sizeof nm, "rope rows %s %s n_rows=%d heads=%d hd=%d pos0=%d", rope_kind_name[kind],
                 dir > 0 ? "forward" : "inverse", n_rows, n_heads, hd, pos0);
        cmp(nm, d_x, ref, n, TOL_ELEM);
        free(ref);
    }
    ops_from_host(d_x, x, n * sizeof(float));
    ops_rope_rows(d_x, n_rows, n_heads, pos0, 1, &s);
    ops_rope_rows(d_x, n_rows, n_heads, pos0, -1, &s);
    // two rotations (cos^2 + sin^2 = 1 up to the tables' rounding, ~u), and the division: a few
    // u (TOL_ELEM); measured max 1.8e-7
    cmp("  forward then inverse = the input", d_x, x, n, TOL_ELEM);
    free(x);
    ops_free(d_x);
}

// ops_kv_cache_write: the new tokens' rows land at slots slot0 .. slot0 + T - 1 of each
// sequence, every other slot keeps its bits (exact: a copy)
static void test_kv_cache_write(int B, int T, int Tc, int Hkv, int hd, int slot0) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = Hkv; s.Hkv = Hkv; s.hd = hd;
    const size_t nn = (size_t)B * T * Hkv * hd, nc = (size_t)B * Tc * Hkv * hd;
    char nm[160];
    float *k = hrand(nn, 1), *v = hrand(nn, 1), *kc = hrand(nc, 1), *vc = hrand(nc, 1);
    float *d_k = dcopy(k, nn), *d_v = dcopy(v, nn), *d_kc = dcopy(kc, nc), *d_vc = dcopy(vc, nc);
    cpu_ref.kv_cache_write(kc, vc, k, v, slot0, Tc, &s);
    ops_kv_cache_write(d_kc, d_vc, d_k, d_v, slot0, Tc, &s);
    snprintf(nm, sizeof nm, "kv cache write B=%d T=%d Tc=%d Hkv=%d hd=%d slot0=%d: kc", B, T, Tc, Hkv, hd, slot0);
    cmp_exact(nm, d_kc, kc, nc);
    cmp_exact("  vc", d_vc, vc, nc);
    free(k); free(v); free(kc); free(vc);
    ops_free(d_k); ops_free(d_v); ops_free(d_kc); ops_free(d_vc);
}

// ops_attention_cached_forward: T new queries over the first n_ctx of Tc cache slots (query t
// at slot n_ctx - T + t). The slots past n_ctx hold NaN on both sides: reading one fails.
// sink: NULL when with_sink is 0.
static void test_attention_cached(int B, int T, int n_ctx, int Tc, int H, int Hkv, int hd, OpsGate gate,
                                  OpsGatePos pos, int n_sink, int with_sink) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.rope = 1; s.rope_base = 10000.0f; s.eps = 1e-5f;
    s.gate = gate; s.gate_pos = pos; s.gate_act = OPS_ACT_SIGMOID;
    const int N = B * T, QKVG = ops_attn_qkv_cols(&s), Hd = H * hd, KVd = Hkv * hd;
    const int sgate = gate != OPS_GATE_NONE && pos == OPS_GATEPOS_SDPA;
    const int sep = gate != OPS_GATE_NONE;   // a separate yg (with the value gate: a copy of y)
    char nm[192];
    printf(" cached attention B=%d T=%d n_ctx=%d Tc=%d H=%d/%d hd=%d %s@%s n_sink=%d%s\n", B, T, n_ctx, Tc, H, Hkv,
           hd, gate_name[gate], pos == OPS_GATEPOS_SDPA ? "sdpa" : "value", n_sink, with_sink ? "" : " (sink NULL)");
    const size_t nc = (size_t)B * Tc * KVd;
    float *q = hrand((size_t)N * Hd, 1), *qkv = hrand((size_t)N * QKVG, 1), *kc = hrand(nc, 1), *vc = hrand(nc, 1);
    for (int b = 0; b < B; b++)
        for (size_t i = (size_t)n_ctx * KVd; i < (size_t)Tc * KVd; i++) kc[(size_t)b * Tc * KVd + i] = vc[(size_t)b * Tc * KVd + i] = NAN;
    float *ry = hzeros((size_t)N * Hd), *ryg = sep ? hzeros((size_t)N * Hd) : ry, *rlse = hzeros((size_t)N * H);
    float* rsink = with_sink ? hzeros((size_t)N * H) : NULL;
    cpu_ref.attention_cached_forward(ry, ryg, rlse, rsink, q, kc, vc, qkv, n_ctx, Tc, n_sink, &s);
    float *d_q = dcopy(q, (size_t)N * Hd), *d_qkv = dcopy(qkv, (size_t)N * QKVG), *d_kc = dcopy(kc, nc), *d_vc = dcopy(vc, nc);
    float *d_y = dpoison((size_t)N * Hd), *d_yg = sep ? dpoison((size_t)N * Hd) : d_y, *d_lse = dpoison((size_t)N * H);
    float* d_sink = with_sink ? dpoison((size_t)N * H) : NULL;
    ops_attention_cached_forward(d_y, d_yg, d_lse, d_sink, d_q, d_kc, d_vc, d_qkv, n_ctx, Tc, n_sink, &s);
    // TOL_ATT_FWD: the softmax and P V sums of ops_attention_forward over n_ctx <= 300 keys;
    // measured max 4.1e-7 (y), 1.9e-7 (sink) on the emulator
    cmp("  y", d_y, ry, (size_t)N * Hd, TOL_ATT_FWD);
    if (sep) { snprintf(nm, sizeof nm, "  yg (%s)", sgate ? "gated" : "a copy of y"); cmp(nm, d_yg, ryg, (size_t)N * Hd, TOL_ATT_FWD); }
    cmp("  lse", d_lse, rlse, (size_t)N * H, TOL_ATT_FWD);
    // the sink mass: a sum of <= n_sink of the same probabilities (0 for n_sink = 0)
    if (with_sink) cmp("  sink (probability on slots < n_sink)", d_sink, rsink, (size_t)N * H, TOL_ATT_FWD);
    free(q); free(qkv); free(kc); free(vc); free(ry); if (sep) free(ryg); free(rlse); free(rsink);
    ops_free(d_q); ops_free(d_qkv); ops_free(d_kc); ops_free(d_vc); ops_free(d_y); if (sep) ops_free(d_yg);
    ops_free(d_lse); if (d_sink) ops_free(d_sink);
}

// ops_mem_available: cudaMemGetInfo's free bytes, which an allocation of 64 MiB lowers by at
// least that much (nothing else allocates meanwhile in this process)
static void test_mem_available(void) {
    size_t a0 = ops_mem_available();
    void* p = ops_malloc((size_t)64 << 20);
    size_t a1 = ops_mem_available();
    TU_CHECK(a0 > 0 && a1 + ((size_t)64 << 20) <= a0, "ops_mem_available: %zu bytes before, %zu after a 64 MiB allocation", a0, a1);
    printf("  %-64s %.1f MiB, then %.1f MiB\n", "mem available (before and after 64 MiB)", a0 / 1048576.0, a1 / 1048576.0);
    ops_free(p);
}

// ---------------------------------------------------------------------------------------------
static void test_activations(int N, int F) {
    char nm[96];
    float *gu = hrand((size_t)N * 2 * F, 3), *dh = hrand((size_t)N * F, 1);
    float *rh = hzeros((size_t)N * F), *rdgu = hzeros((size_t)N * 2 * F);
    cpu_ref.swiglu_forward(rh, gu, N, F);
    cpu_ref.swiglu_backward(rdgu, dh, gu, N, F);
    float *d_gu = dcopy(gu, (size_t)N * 2 * F), *d_dh = dcopy(dh, (size_t)N * F);
    float *d_h = dpoison((size_t)N * F), *d_dgu = dpoison((size_t)N * 2 * F);
    ops_swiglu_forward(d_h, d_gu, N, F);
    ops_swiglu_backward(d_dgu, d_dh, d_gu, N, F);
    snprintf(nm, sizeof nm, "swiglu forward N=%d F=%d", N, F); cmp(nm, d_h, rh, (size_t)N * F, TOL_ELEM);
    snprintf(nm, sizeof nm, "swiglu backward"); cmp(nm, d_dgu, rdgu, (size_t)N * 2 * F, TOL_ELEM);
    size_t n = (size_t)N * F;
    float *rg = hzeros(n), *rdg = hzeros(n);
    cpu_ref.gelu_forward(rg, gu, n);
    cpu_ref.gelu_backward(rdg, dh, gu, n);
    float *d_g = dpoison(n), *d_dg = dpoison(n);
    ops_gelu_forward(d_g, d_gu, n);
    ops_gelu_backward(d_dg, d_dh, d_gu, n);
    snprintf(nm, sizeof nm, "gelu forward n=%zu", n); cmp(nm, d_g, rg, n, TOL_ELEM);
    snprintf(nm, sizeof nm, "gelu backward"); cmp(nm, d_dg, rdg, n, TOL_ELEM);
    free(gu); free(dh); free(rh); free(rdgu); free(rg); free(rdg);
    ops_free(d_gu); ops_free(d_dh); ops_free(d_h); ops_free(d_dgu); ops_free(d_g); ops_free(d_dg);
}

// ---------------------------------------------------------------------------------------------
static void test_xent(int N, int V, int Vp) {
    char nm[96];
    float* logits = hrand((size_t)N * Vp, 3);
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) logits[(size_t)n * Vp + i] = 100.0f;   // padding must not leak
    int* tg = malloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) tg[n] = rand_int(V);
    tg[0] = V - 1;
    float *rloss = hzeros(N), *rlse = hzeros(N), *rd = hzeros((size_t)N * Vp);
    cpu_ref.xent_forward(rloss, rlse, logits, tg, N, V, Vp);
    cpu_ref.xent_backward(rd, logits, rlse, tg, 0.25f, N, V, Vp);
    float *d_logits = dcopy(logits, (size_t)N * Vp), *d_loss = dpoison(N), *d_lse = dpoison(N), *d_d = dpoison((size_t)N * Vp);
    int* d_tg = dcopy_int(tg, N);
    ops_xent_forward(d_loss, d_lse, d_logits, d_tg, N, V, Vp);
    snprintf(nm, sizeof nm, "cross-entropy forward N=%d V=%d Vp=%d losses", N, V, Vp); cmp(nm, d_loss, rloss, N, TOL_ELEM);
    snprintf(nm, sizeof nm, "cross-entropy forward lse"); cmp(nm, d_lse, rlse, N, TOL_ELEM);
    ops_from_host(d_lse, rlse, N * sizeof(float));
    ops_xent_backward(d_d, d_logits, d_lse, d_tg, 0.25f, N, V, Vp);
    snprintf(nm, sizeof nm, "cross-entropy backward dlogits"); cmp(nm, d_d, rd, (size_t)N * Vp, TOL_ELEM);
    ops_xent_backward(d_logits, d_logits, d_lse, d_tg, 0.25f, N, V, Vp);   // in place, as the model does
    snprintf(nm, sizeof nm, "cross-entropy backward in place (dlogits aliases logits)"); cmp(nm, d_logits, rd, (size_t)N * Vp, TOL_ELEM);
    float* h = hback(d_d, (size_t)N * Vp);
    int padzero = 1;
    for (int n = 0; n < N; n++) for (int i = V; i < Vp; i++) if (h[(size_t)n * Vp + i] != 0.0f) padzero = 0;
    TU_CHECK(padzero, "cross-entropy: padded columns have a non-zero gradient");
    // the training forward's op, in place as the model calls it, against the CPU's
    cpu_ref.xent_forward_backward(rloss, rlse, rd, logits, tg, 0.25f, N, V, Vp);
    ops_free(d_logits); ops_free(d_loss); ops_free(d_lse);
    d_logits = dcopy(logits, (size_t)N * Vp); d_loss = dpoison(N); d_lse = dpoison(N);
    ops_xent_forward_backward(d_loss, d_lse, d_logits, d_logits, d_tg, 0.25f, N, V, Vp);
    snprintf(nm, sizeof nm, "cross-entropy forward_backward losses"); cmp(nm, d_loss, rloss, N, TOL_ELEM);
    snprintf(nm, sizeof nm, "cross-entropy forward_backward lse"); cmp(nm, d_lse, rlse, N, TOL_ELEM);
    snprintf(nm, sizeof nm, "cross-entropy forward_backward dlogits (in place)"); cmp(nm, d_logits, rd, (size_t)N * Vp, TOL_ELEM);
    free(h); free(logits); free(tg); free(rloss); free(rlse); free(rd);
    ops_free(d_logits); ops_free(d_loss); ops_free(d_lse); ops_free(d_d); ops_free(d_tg);
}

// ---------------------------------------------------------------------------------------------
static void test_optim(size_t n) {
    float* x = hrand(n, 1);
    float* d_x = dcopy(x, n);
    double rs = cpu_ref.sumsq(x, n), gs = ops_sumsq(d_x, n);
    // derived: double sums of 4096-element chunks, gamma_4096 (double) = 4.5e-13 < 1e-12 (also the
    // router statistics below, N <= 1000); measured max 6.6e-15 (sumsq), 8.3e-15 (router), all ISAs
    TU_CHECK(fabs(gs - rs) <= 1e-12 * rs, "sumsq %.17g vs %.17g", gs, rs);
    printf("  %-64s rel err %.2e (tol 1e-12)\n", "sum of squares", fabs(gs - rs) / rs);
    size_t nc = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    double *rp = calloc(nc, sizeof(double)), *gp = calloc(nc, sizeof(double));
    cpu_ref.sumsq_chunks(rp, x, n);
    ops_sumsq_chunks(gp, d_x, n);
    double worst = 0.0;
    for (size_t c = 0; c < nc; c++) worst = fmax(worst, fabs(gp[c] - rp[c]) / rp[c]);
    TU_CHECK(worst <= 1e-12, "sumsq chunks: rel err %.2e", worst);
    printf("  %-64s rel err %.2e (tol 1e-12)\n", "sum of squares per chunk (last chunk partial)", worst);
    // AdamW: 3 steps with decay and a clip scale
    float *p = hrand(n, 1), *m = hzeros(n), *v = hzeros(n), *g = hrand(n, 1);
    float *d_p = dcopy(p, n), *d_m = dcopy(m, n), *d_v = dcopy(v, n), *d_g = dcopy(g, n);
    for (int t = 1; t <= 3; t++) {
        cpu_ref.adamw(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
        ops_adamw(d_p, d_g, d_m, d_v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    }
    cmp("adamw after 3 steps: params", d_p, p, n, TOL_ELEM);
    cmp("adamw after 3 steps: m", d_m, m, n, TOL_ELEM);
    cmp("adamw after 3 steps: v", d_v, v, n, TOL_ELEM);
    free(x); free(rp); free(gp); free(p); free(m); free(v); free(g);
    ops_free(d_x); ops_free(d_p); ops_free(d_m); ops_free(d_v); ops_free(d_g);
}

// ---------------------------------------------------------------------------------------------
static void test_absmax_median(int N, int C) {
    size_t n = (size_t)N * C;
    float *x = hrand(n, 1), *base = hrand(n, 1);
    x[n / 3] = 7.5f;          // the maximum of |x|, and a tie later: the first occurrence wins
    x[n - 2] = -7.5f;
    float *d_x = dcopy(x, n), *d_base = dcopy(base, n);
    for (int withbase = 0; withbase <= 1; withbase++) {
        float rm, gm;
        int rp, gp;
        cpu_ref.absmax(x, withbase ? base : NULL, N, C, &rm, &rp);
        ops_absmax(d_x, withbase ? d_base : NULL, N, C, &gm, &gp);
        TU_CHECK(rm == gm && rp == gp, "absmax%s: %g at %d vs CPU %g at %d", withbase ? " (x - base)" : "", gm, gp, rm, rp);
        printf("  %-64s %g at token %d (CPU %g at %d)\n", withbase ? "abs-max of x - base" : "abs-max (a tie: first occurrence)", gm, gp, rm, rp);
        float rmed = cpu_ref.abs_median(x, withbase ? base : NULL, N, C);
        float gmed = ops_abs_median(d_x, withbase ? d_base : NULL, N, C);
        TU_CHECK(rmed == gmed, "abs-median%s: %.9g vs CPU %.9g", withbase ? " (x - base)" : "", gmed, rmed);
        printf("  %-64s %.9g (CPU %.9g)\n", withbase ? "abs-median of x - base" : "abs-median", gmed, rmed);
    }
    // the output logits' max |x| over the first V of C columns, and the update's sum of squares
    const int V = C - 3;
    float rl = cpu_ref.logits_absmax(x, N, V, C), gl = ops_logits_absmax(d_x, N, V, C);
    TU_CHECK(rl == gl, "logits abs-max: %g vs CPU %g", gl, rl);
    // sums of squares over 3 ranges (one empty), of x - base and of x
    const float* hx[3] = {x, x + 7, x + n / 2};
    const float* hy[3] = {base, base + 7, base + n / 2};
    const float* dx3[3] = {d_x, d_x + 7, d_x + n / 2};
    const float* dy3[3] = {d_base, d_base + 7, d_base + n / 2};
    const size_t rn[3] = {n / 2, 0, n - n / 2};
    double rs[3], gs[3], worst_ss = 0.0;
    for (int withy = 0; withy <= 1; withy++) {
        cpu_ref.sumsq_ranges(rs, hx, withy ? hy : NULL, rn, 3);
        ops_sumsq_ranges(gs, dx3, withy ? dy3 : NULL, rn, 3);
        // derived: the same double terms in another order: n u_double ~ 2e4 x 1.1e-16 = 2.5e-12
        for (int r = 0; r < 3; r++) {
            double e = rn[r] ? fabs(gs[r] - rs[r]) / rs[r] : fabs(gs[r]);
            TU_CHECK(e <= 1e-11, "sums of squares over ranges%s: range %d %.17g vs CPU %.17g", withy ? " (x - y)" : "", r, gs[r], rs[r]);
            if (e > worst_ss) worst_ss = e;
        }
    }
    printf("  %-64s %g (CPU %g); sums of squares over ranges rel err %.2e\n", "logits abs-max over V of C columns", gl, rl, worst_ss);
    // a NaN logit is reported, not skipped
    float nan_v = NAN;
    ops_from_host(d_x + (size_t)(N / 2) * C + 1, &nan_v, sizeof nan_v);
    TU_CHECK(isnan(ops_logits_absmax(d_x, N, V, C)), "logits abs-max: a NaN logit gives NaN");
    free(x); free(base); ops_free(d_x); ops_free(d_base);
}

// ---------------------------------------------------------------------------------------------
// MoE: router forward/backward and statistics, the dispatch plan, gather/combine and their
// backward, the grouped GEMM, the shared expert's gate. Each CUDA op gets the same inputs as
// the CPU op (the CPU's upstream outputs), so a failure names the op that differs.

// device ints d[n] must equal host ref[n]
static void cmp_int(const char* what, const int* d, const int* ref, size_t n) {
    int* h = malloc((n ? n : 1) * sizeof(int));
    ops_to_host(h, d, n * sizeof(int));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != ref[i];
    TU_CHECK(bad == 0, "%s: %zu of %zu integers differ from the CPU", what, bad, n);
    printf("  %-64s %s\n", what, bad == 0 ? "equal" : "DIFFERENT");
    free(h);
}
static int* dpoison_int(size_t n) {
    int* h = malloc((n ? n : 1) * sizeof(int));
    for (size_t i = 0; i < n; i++) h[i] = -7;
    int* d = dcopy_int(h, n);
    free(h);
    return d;
}
static void cmp_double(const char* what, double g, double r, double tol) {
    double e = fabs(g - r) / (fabs(r) > 1e-30 ? fabs(r) : 1.0);
    if (isnan(e)) e = INFINITY;
    TU_CHECK(e <= tol, "%s: %.17g vs CPU %.17g (rel %.2e > %.0e)", what, g, r, e, tol);
    printf("  %-64s rel err %.2e (tol %.0e)\n", what, e, tol);
}

// ties: logits rounded to multiples of 0.5, so equal logits are common and the lower index
// must win on both backends
static void test_moe_router(int N, int E, int k, OpsRouter kind, int ties, int capacity) {
    char nm[128];
    const int S = N * k;
    const char* kn = kind == OPS_ROUTER_SOFTMAX ? "softmax" : "sigmoid";
    float* logits = hrand((size_t)N * E, 2);
    if (ties) for (size_t i = 0; i < (size_t)N * E; i++) logits[i] = roundf(logits[i] * 2.0f) * 0.5f;
    float *probs = hzeros((size_t)N * E), *tw = hzeros(S), *lse = hzeros(N);
    int* idx = calloc(S, sizeof(int));
    cpu_ref.moe_router_forward(probs, idx, tw, lse, logits, N, E, k, kind);
    float *d_logits = dcopy(logits, (size_t)N * E), *d_probs = dpoison((size_t)N * E), *d_tw = dpoison(S), *d_lse = dpoison(N);
    int* d_idx = dpoison_int(S);
    ops_moe_router_forward(d_probs, d_idx, d_tw, d_lse, d_logits, N, E, k, kind);
    snprintf(nm, sizeof nm, "router %s N=%d E=%d k=%d%s: top-k indices", kn, N, E, k, ties ? " (ties)" : "");
    cmp_int(nm, d_idx, idx, S);
    snprintf(nm, sizeof nm, "router %s: probs", kn); cmp(nm, d_probs, probs, (size_t)N * E, TOL_ELEM);
    snprintf(nm, sizeof nm, "router %s: top-k weights", kn); cmp(nm, d_tw, tw, S, TOL_ELEM);
    snprintf(nm, sizeof nm, "router %s: lse", kn); cmp(nm, d_lse, lse, N, TOL_ELEM);
    // the rest runs on the CPU's forward outputs
    ops_from_host(d_probs, probs, (size_t)N * E * sizeof(float));
    ops_from_host(d_tw, tw, (size_t)S * sizeof(float));
    ops_from_host(d_lse, lse, (size_t)N * sizeof(float));
    ops_from_host(d_idx, idx, (size_t)S * sizeof(int));

    // backward: every term (top-k weights, load balancing, z-loss)
    float *dtw = hrand(S, 1), *aux = hrand(E, 0.1), *rdl = hzeros((size_t)N * E);
    cpu_ref.moe_router_backward(rdl, dtw, logits, probs, idx, tw, lse, aux, 1e-3f, N, E, k, kind);
    float *d_dtw = dcopy(dtw, S), *d_aux = dcopy(aux, E), *d_dl = dpoison((size_t)N * E);
    ops_moe_router_backward(d_dl, d_dtw, d_logits, d_probs, d_idx, d_tw, d_lse, d_aux, 1e-3f, N, E, k, kind);
    snprintf(nm, sizeof nm, "router %s backward dlogits", kn); cmp(nm, d_dl, rdl, (size_t)N * E, TOL_ELEM);

    // statistics (double sums in other orders)
    double *rps = calloc(E, sizeof(double)), *gps = calloc(E, sizeof(double)), rls, rent, gls = NAN, gent = NAN;
    for (int e = 0; e < E; e++) gps[e] = NAN;   // an unwritten entry fails
    cpu_ref.moe_router_stats(rps, &rls, &rent, probs, lse, N, E);
    ops_moe_router_stats(gps, &gls, &gent, d_probs, d_lse, N, E);
    double pe = 0.0;
    for (int e = 0; e < E; e++) {
        double d = fabs(gps[e] - rps[e]) / fmax(fabs(rps[e]), 1e-30);
        if (!(d <= pe)) pe = isnan(d) ? INFINITY : d;   // NaN counts as the worst error
    }
    TU_CHECK(pe <= 1e-12, "router stats p_sum: rel err %.2e", pe);
    printf("  %-64s rel err %.2e (tol 1e-12)\n", "router stats: per-expert probability sums", pe);
    cmp_double("router stats: sum of lse^2", gls, rls, 1e-12);
    cmp_double("router stats: sum of entropies", gent, rent, 1e-12);

    // dispatch plan
    int *cnt = calloc(E, sizeof(int)), *off = calloc(E + 1, sizeof(int)), *rs = calloc(S, sizeof(int)), *sr = calloc(S, sizeof(int));
    cpu_ref.moe_dispatch_plan(cnt, off, rs, sr, idx, N, E, k, capacity);
    const int R = off[E];
    int *d_cnt = dpoison_int(E), *d_off = dpoison_int(E + 1), *d_rs = dpoison_int(S), *d_sr = dpoison_int(S);
    ops_moe_dispatch_plan(d_cnt, d_off, d_rs, d_sr, d_idx, N, E, k, capacity);
    snprintf(nm, sizeof nm, "dispatch plan S=%d capacity %d (R=%d kept): counts", S, capacity, R);
    cmp_int(nm, d_cnt, cnt, E);
    cmp_int("dispatch plan: offsets", d_off, off, E + 1);
    cmp_int("dispatch plan: row -> slot", d_rs, rs, R);
    cmp_int("dispatch plan: slot -> row (-1 dropped)", d_sr, sr, S);
    ops_from_host(d_rs, rs, (size_t)S * sizeof(int));
    ops_from_host(d_sr, sr, (size_t)S * sizeof(int));

    // gather and its backward (same additions in the same order: exact)
    const int C = 72;
    float *x = hrand((size_t)N * C, 1), *xp = hzeros((size_t)R * C);
    cpu_ref.moe_gather(xp, x, rs, R, k, C);
    float *d_x = dcopy(x, (size_t)N * C), *d_xp = dpoison((size_t)R * C);
    ops_moe_gather(d_xp, d_x, d_rs, R, k, C);
    cmp_exact("gather", d_xp, xp, (size_t)R * C);
    float *dxp = hrand((size_t)R * C, 1), *dx = hrand((size_t)N * C, 1);
    float* d_dx = dcopy(dx, (size_t)N * C);
    float* d_dxp = dcopy(dxp, (size_t)R * C);
    cpu_ref.moe_gather_backward(dx, dxp, sr, N, k, C);
    ops_moe_gather_backward(d_dx, d_dxp, d_sr, N, k, C);
    cmp_exact("gather backward (+=)", d_dx, dx, (size_t)N * C);

    // combine (+=) and its backward
    float *yp = hrand((size_t)R * C, 1), *out = hrand((size_t)N * C, 1);
    float *d_yp = dcopy(yp, (size_t)R * C), *d_out = dcopy(out, (size_t)N * C);
    cpu_ref.moe_combine(out, yp, tw, sr, N, k, C);
    ops_moe_combine(d_out, d_yp, d_tw, d_sr, N, k, C);
    cmp("combine (+=)", d_out, out, (size_t)N * C, TOL_ELEM);
    float *dout = hrand((size_t)N * C, 1), *rdyp = hzeros((size_t)R * C), *rdtw = hzeros(S);
    cpu_ref.moe_combine_backward(rdyp, rdtw, dout, yp, tw, sr, N, k, C);
    float *d_dout = dcopy(dout, (size_t)N * C), *d_dyp = dpoison((size_t)R * C), *d_dtw2 = dpoison(S);
    ops_moe_combine_backward(d_dyp, d_dtw2, d_dout, d_yp, d_tw, d_sr, N, k, C);
    cmp("combine backward dyp", d_dyp, rdyp, (size_t)R * C, TOL_ELEM);
    cmp("combine backward dtopk_w (0 for dropped slots)", d_dtw2, rdtw, S, TOL_ELEM);

    free(logits); free(probs); free(tw); free(lse); free(idx); free(dtw); free(aux); free(rdl);
    free(rps); free(gps); free(cnt); free(off); free(rs); free(sr); free(x); free(xp); free(dxp); free(dx);
    free(yp); free(out); free(dout); free(rdyp); free(rdtw);
    ops_free(d_logits); ops_free(d_probs); ops_free(d_tw); ops_free(d_lse); ops_free(d_idx); ops_free(d_dtw);
    ops_free(d_aux); ops_free(d_dl); ops_free(d_cnt); ops_free(d_off); ops_free(d_rs); ops_free(d_sr);
    ops_free(d_x); ops_free(d_xp); ops_free(d_dx); ops_free(d_dxp); ops_free(d_yp); ops_free(d_out);
    ops_free(d_dout); ops_free(d_dyp); ops_free(d_dtw2);
}

// groups of the given row counts (0 = an expert without tokens)
static void test_grouped_matmul(int G, const int* rows, int C, int OC) {
    char nm[128];
    int* off = calloc(G + 1, sizeof(int));
    for (int g = 0; g < G; g++) off[g + 1] = off[g] + rows[g];
    const int R = off[G];
    float *inp = hrand((size_t)R * C, 1), *w = hrand((size_t)G * OC * C, 1), *dout = hrand((size_t)R * OC, 1);
    float *dw0 = hrand((size_t)G * OC * C, 1);
    float *ref = hzeros((size_t)R * OC), *rdinp = hzeros((size_t)R * C), *rdw = hcopy(dw0, (size_t)G * OC * C);
    cpu_ref.grouped_matmul_forward(ref, inp, w, off, G, C, OC);
    cpu_ref.grouped_matmul_backward(rdinp, rdw, dout, inp, w, off, G, C, OC);
    float *d_inp = dcopy(inp, (size_t)R * C), *d_w = dcopy(w, (size_t)G * OC * C), *d_dout = dcopy(dout, (size_t)R * OC);
    float *d_out = dpoison((size_t)R * OC), *d_dinp = dpoison((size_t)R * C), *d_dw = dcopy(dw0, (size_t)G * OC * C);
    int* d_off = dcopy_int(off, G + 1);
    ops_grouped_matmul_forward(d_out, d_inp, d_w, d_off, G, C, OC);
    ops_grouped_matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_off, G, C, OC);
    snprintf(nm, sizeof nm, "grouped matmul G=%d R=%d C=%d OC=%d forward", G, R, C, OC);
    cmp(nm, d_out, ref, (size_t)R * OC, tol_gemm);
    cmp("grouped matmul backward dinp", d_dinp, rdinp, (size_t)R * C, tol_gemm);
    cmp("grouped matmul backward dw (+=; an empty group keeps its value)", d_dw, rdw, (size_t)G * OC * C, tol_gemm);
    cpu_ref.grouped_matmul_backward(NULL, rdw, dout, inp, w, off, G, C, OC);
    ops_grouped_matmul_backward(NULL, d_dw, d_dout, d_inp, d_w, d_off, G, C, OC);
    cmp("grouped matmul backward dw only (dinp NULL), accumulated twice", d_dw, rdw, (size_t)G * OC * C, tol_gemm);
    free(off); free(inp); free(w); free(dout); free(dw0); free(ref); free(rdinp); free(rdw);
    ops_free(d_inp); ops_free(d_w); ops_free(d_dout); ops_free(d_out); ops_free(d_dinp); ops_free(d_dw); ops_free(d_off);
}

static void test_sigmoid_gate_add(int N, int C) {
    float *y = hrand((size_t)N * C, 1), *z = hrand(N, 3), *out = hrand((size_t)N * C, 1), *dout = hrand((size_t)N * C, 1);
    float *d_y = dcopy(y, (size_t)N * C), *d_z = dcopy(z, N), *d_out = dcopy(out, (size_t)N * C), *d_dout = dcopy(dout, (size_t)N * C);
    cpu_ref.sigmoid_gate_add_forward(out, y, z, N, C);
    ops_sigmoid_gate_add_forward(d_out, d_y, d_z, N, C);
    cmp("shared-expert gate forward (+=)", d_out, out, (size_t)N * C, TOL_ELEM);
    float *rdy = hzeros((size_t)N * C), *rdz = hzeros(N);
    cpu_ref.sigmoid_gate_add_backward(rdy, rdz, dout, y, z, N, C);
    float *d_dy = dpoison((size_t)N * C), *d_dz = dpoison(N);
    ops_sigmoid_gate_add_backward(d_dy, d_dz, d_dout, d_y, d_z, N, C);
    cmp("shared-expert gate backward dy", d_dy, rdy, (size_t)N * C, TOL_ELEM);
    cmp("shared-expert gate backward dz", d_dz, rdz, N, TOL_ELEM);
    free(y); free(z); free(out); free(dout); free(rdy); free(rdz);
    ops_free(d_y); ops_free(d_z); ops_free(d_out); ops_free(d_dout); ops_free(d_dy); ops_free(d_dz);
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet (kernels/ops.h "Gated delta rule"; kernels/cuda/deltanet.cu). Its CPU ops are
// not in tests/cpu_ref.h's table: the renamed CPU functions are declared here, typed from
// ops.h's declarations (the ops are fp32 on every backend, so the types are the same).
extern __typeof__(ops_gdn_forward) ref_ops_gdn_forward;
extern __typeof__(ops_gdn_backward) ref_ops_gdn_backward;
extern __typeof__(ops_gdn_gates_forward) ref_ops_gdn_gates_forward;
extern __typeof__(ops_gdn_gates_backward) ref_ops_gdn_gates_backward;
extern __typeof__(ops_conv1d_silu_forward) ref_ops_conv1d_silu_forward;
extern __typeof__(ops_conv1d_silu_backward) ref_ops_conv1d_silu_backward;
extern __typeof__(ops_l2norm_forward) ref_ops_l2norm_forward;
extern __typeof__(ops_l2norm_backward) ref_ops_l2norm_backward;
extern __typeof__(ops_rmsnorm_gated_forward) ref_ops_rmsnorm_gated_forward;
extern __typeof__(ops_rmsnorm_gated_backward) ref_ops_rmsnorm_gated_backward;

// rows x ld floats: NaN in the `used` first columns of each row (an "=" output the op must
// write), 7 in the rest (the gaps of a strided layout, which the op must leave alone); the CPU
// reference starts from a copy, so both end equal only where both wrote the same values
static float* hpoison_rows(size_t rows, size_t ld, size_t used) {
    float* h = malloc((rows * ld > 0 ? rows * ld : 1) * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) h[r * ld + c] = c < used ? NAN : 7.0f;
    return h;
}
// a strided output: device d vs host ref, both rows x ld; the error over the first `used`
// columns of each row (as cmp), and the other columns (the gaps) must still hold hpoison_rows's 7
static void cmp_rows(const char* what, const float* d, const float* ref, size_t rows, size_t ld, size_t used,
                     double tol) {
    float* h = hback(d, rows * ld);
    float *hu = hzeros(rows * used), *ru = hzeros(rows * used);
    size_t gaps = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) {
            if (c < used) { hu[r * used + c] = h[r * ld + c]; ru[r * used + c] = ref[r * ld + c]; }
            else gaps += h[r * ld + c] != 7.0f;
        }
    double e = tu_rel_err(hu, ru, rows * used);
    TU_CHECK(e <= tol && gaps == 0, "%s: rel err %.2e (tol %.0e), %zu gap values overwritten", what, e, tol, gaps);
    printf("  %-64s rel err %.2e (tol %.0e)%s\n", what, e, tol, ld > used ? ", gaps untouched" : "");
    free(h); free(hu); free(ru);
}
// q or k rows of heads x dk inside rows of ld floats, each head L2-normalised (as the layer does)
static float* hrand_heads_l2(size_t N, int heads, int dk, size_t ld) {
    float* x = hrand(N * ld, 1);
    for (size_t n = 0; n < N; n++)
        for (int j = 0; j < heads; j++) {
            float* r = x + n * ld + (size_t)j * dk;
            double ss = 0.0;
            for (int i = 0; i < dk; i++) ss += (double)r[i] * r[i];
            for (int i = 0; i < dk; i++) r[i] = (float)(r[i] / sqrt(ss));
        }
    return x;
}

// The delta rule, forward (o, state_out) and backward (dq, dk, dv, dg, dbeta), and a rerun of the
// backward (the same bits: no atomics). extra_qk / extra_v > 0: q, k and v are read from rows
// wider than their heads (ld_qk = Hk dk + extra_qk, ld_v = Hv dv + extra_v), as the layer reads
// them from its conv output. with_state: a random state_in (forward only: the backward starts
// from zeros, as in training).
// decay: the gates' regime, g per token: GDN_DECAY_MID in [-0.45, -0.05] (exp(g) in [0.64, 0.95],
// as tests/test_deltanet.c), GDN_DECAY_STRONG in [-12, -2] (a chunk's cumulative decay falls far
// below fp32's range: exp(c) underflows to 0 within a chunk, while exp(c_i - c_j) stays exact),
// GDN_DECAY_SLOW in [-0.02, 0] (the state remembers ~50+ tokens: chunk boundaries matter most).
enum { GDN_DECAY_MID, GDN_DECAY_STRONG, GDN_DECAY_SLOW };
// Documents (OpsGdnShape.doc_start, the conv's doc_start): the layouts below, by number; layout
// GDN_DOCS_NONE = doc_start NULL. gdn_doc_starts writes doc[b*T + t] (=) the first token of t's
// document from a list of document starts per sequence (those < T; each list begins with 0).
enum { GDN_DOCS_NONE = -1, GDN_DOCS_MIXED, GDN_DOCS_ONE };
static const int gdn_doc_lists[2][2][12] = {
    // MIXED, sequence 0: a start mid-chunk (30), one exactly at a chunk boundary (64), several
    // short documents inside one chunk (70, 73, 80), a one-token document (90), a document
    // across the boundary of chunk 1 and the partial last chunk (128 inside it, from 100)
    // sequence 1 (another layout): one-token documents at 1 and 2, a start at 63 (the chunk's
    // last row: the chunk's last document is one token), a long document over two chunk
    // boundaries (63 .. 139), a one-token last document at 149 (state_out: that token's writes)
    {{0, 30, 64, 70, 73, 80, 90, 91, 100, -1}, {0, 1, 2, 63, 140, 149, -1}},
    // ONE: a single document per sequence (must give the bits of doc_start = NULL)
    {{0, -1}, {0, -1}}};
static int* gdn_doc_starts(int layout, int B, int T) {
    if (layout == GDN_DOCS_NONE) return NULL;
    int* doc = malloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++) {
        const int* st = gdn_doc_lists[layout][b % 2];
        int start = 0;
        for (int t = 0; t < T; t++) {
            for (int i = 0; st[i] >= 0; i++) if (st[i] == t) start = t;
            doc[(size_t)b * T + t] = start;
        }
    }
    return doc;
}
static const char* gdn_doc_name(int layout) {
    return layout == GDN_DOCS_MIXED ? " documents" : layout == GDN_DOCS_ONE ? " one document" : "";
}

static void test_gdn_run(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int chunk,
                         int with_state, int decay, double tol_fwd, double tol_bwd, int docs);
static void test_gdn_tol(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int chunk,
                         int with_state, int decay, double tol_fwd, double tol_bwd) {
    test_gdn_run(B, T, Hk, Hv, dk, dv, extra_qk, extra_v, chunk, with_state, decay, tol_fwd, tol_bwd, GDN_DOCS_NONE);
}

// docs: a layout of gdn_doc_starts (the CPU reference with the same doc_start); GDN_DOCS_ONE
// also runs the device op with doc_start = NULL on the same inputs and requires the same bits
// (forward and backward)
static void test_gdn_run(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int chunk,
                         int with_state, int decay, double tol_fwd, double tol_bwd, int docs) {
    char nm[200];
    const size_t N = (size_t)B * T, ldqk = (size_t)Hk * dk + extra_qk, ldv = (size_t)Hv * dv + extra_v;
    const size_t SN = (size_t)B * Hv * dk * dv, ON = N * Hv * dv;
    OpsGdnShape s = {B, T, Hk, Hv, dk, dv, chunk, extra_qk ? (int)ldqk : 0, extra_v ? (int)ldv : 0, NULL};
    int* hdoc = gdn_doc_starts(docs, B, T);
    int* d_doc = hdoc ? dcopy_int(hdoc, N) : NULL;
    OpsGdnShape sd = s;   // the device's shape: its doc_start in device memory
    s.doc_start = hdoc;
    sd.doc_start = d_doc;
    float *q = hrand_heads_l2(N, Hk, dk, ldqk), *k = hrand_heads_l2(N, Hk, dk, ldqk), *v = hrand(N * ldv, 1);
    float *g = hzeros(N * Hv), *beta = hzeros(N * Hv);
    for (size_t i = 0; i < N * Hv; i++) {
        const double r = 0.5 + 0.5 * tu_rand();   // [0, 1)
        g[i] = (float)(decay == GDN_DECAY_STRONG ? -2.0 - 10.0 * r : decay == GDN_DECAY_SLOW ? -0.02 * r : -0.05 - 0.4 * r);
        beta[i] = (float)(0.5 + 0.45 * tu_rand());   // as tests/test_deltanet.c
    }
    float* st_in = with_state ? hrand(SN, 0.5) : NULL;
    float *ro = hzeros(ON), *rst = hzeros(SN);
    ref_ops_gdn_forward(ro, rst, NULL, q, k, v, g, beta, st_in, &s);
    float *d_q = dcopy(q, N * ldqk), *d_k = dcopy(k, N * ldqk), *d_v = dcopy(v, N * ldv);
    float *d_g = dcopy(g, N * Hv), *d_beta = dcopy(beta, N * Hv), *d_st_in = with_state ? dcopy(st_in, SN) : NULL;
    float *d_o = dpoison(ON), *d_st = dpoison(SN);
    ops_gdn_forward(d_o, d_st, NULL, d_q, d_k, d_v, d_g, d_beta, d_st_in, &sd);
    snprintf(nm, sizeof nm, "gdn forward B=%d T=%d Hk=%d Hv=%d dk=%d dv=%d ld+%d/+%d chunk %d%s%s%s: o", B, T, Hk, Hv,
             dk, dv, extra_qk, extra_v, chunk, with_state ? " state_in" : "",
             decay == GDN_DECAY_STRONG ? " strong decay" : decay == GDN_DECAY_SLOW ? " slow decay" : "",
             gdn_doc_name(docs));
    cmp(nm, d_o, ro, ON, tol_fwd);
    cmp("gdn forward: state_out", d_st, rst, SN, tol_fwd);

    // backward: dq, dk in q's layout, dv in v's (gaps untouched), dg, dbeta
    float* dout = hrand(ON, 1);
    float *rdq = hpoison_rows(N, ldqk, (size_t)Hk * dk), *rdk = hpoison_rows(N, ldqk, (size_t)Hk * dk);
    float *rdv = hpoison_rows(N, ldv, (size_t)Hv * dv), *rdg = hzeros(N * Hv), *rdb = hzeros(N * Hv);
    float *d_dq = dcopy(rdq, N * ldqk), *d_dk = dcopy(rdk, N * ldqk), *d_dv = dcopy(rdv, N * ldv);
    float *d_dg = dpoison(N * Hv), *d_db = dpoison(N * Hv), *d_dout = dcopy(dout, ON);
    ref_ops_gdn_backward(rdq, rdk, rdv, rdg, rdb, dout, q, k, v, g, beta, NULL, &s);
    ops_gdn_backward(d_dq, d_dk, d_dv, d_dg, d_db, d_dout, d_q, d_k, d_v, d_g, d_beta, NULL, &sd);
    cmp_rows("gdn backward: dq", d_dq, rdq, N, ldqk, (size_t)Hk * dk, tol_bwd);
    cmp_rows("gdn backward: dk", d_dk, rdk, N, ldqk, (size_t)Hk * dk, tol_bwd);
    cmp_rows("gdn backward: dv", d_dv, rdv, N, ldv, (size_t)Hv * dv, tol_bwd);
    cmp("gdn backward: dg", d_dg, rdg, N * Hv, tol_bwd);
    cmp("gdn backward: dbeta", d_db, rdb, N * Hv, tol_bwd);
    // a rerun: the same bits (fixed orders, no atomics)
    float *d_dq2 = dcopy(rdq, N * ldqk), *d_dk2 = dcopy(rdk, N * ldqk), *d_dv2 = dcopy(rdv, N * ldv);
    float *d_dg2 = dpoison(N * Hv), *d_db2 = dpoison(N * Hv);
    ops_gdn_backward(d_dq2, d_dk2, d_dv2, d_dg2, d_db2, d_dout, d_q, d_k, d_v, d_g, d_beta, NULL, &sd);
    cmp_same_bits("gdn backward: dq on a rerun", d_dq2, d_dq, N * ldqk);
    cmp_same_bits("gdn backward: dk on a rerun", d_dk2, d_dk, N * ldqk);
    cmp_same_bits("gdn backward: dv on a rerun", d_dv2, d_dv, N * ldv);
    cmp_same_bits("gdn backward: dg on a rerun", d_dg2, d_dg, N * Hv);
    cmp_same_bits("gdn backward: dbeta on a rerun", d_db2, d_db, N * Hv);
    if (docs == GDN_DOCS_ONE) {   // one document a sequence: the bits of doc_start = NULL (other kernels)
        OpsGdnShape s0 = sd;
        s0.doc_start = NULL;
        float *d_o0 = dpoison(ON), *d_st0 = dpoison(SN);
        ops_gdn_forward(d_o0, d_st0, NULL, d_q, d_k, d_v, d_g, d_beta, d_st_in, &s0);
        cmp_same_bits("gdn forward, one document = doc_start NULL: o", d_o0, d_o, ON);
        cmp_same_bits("gdn forward, one document = doc_start NULL: state_out", d_st0, d_st, SN);
        float *d_dq0 = dcopy(rdq, N * ldqk), *d_dk0 = dcopy(rdk, N * ldqk), *d_dv0 = dcopy(rdv, N * ldv);
        float *d_dg0 = dpoison(N * Hv), *d_db0 = dpoison(N * Hv);
        ops_gdn_backward(d_dq0, d_dk0, d_dv0, d_dg0, d_db0, d_dout, d_q, d_k, d_v, d_g, d_beta, NULL, &s0);
        cmp_same_bits("gdn backward, one document = doc_start NULL: dq", d_dq0, d_dq, N * ldqk);
        cmp_same_bits("gdn backward, one document = doc_start NULL: dk", d_dk0, d_dk, N * ldqk);
        cmp_same_bits("gdn backward, one document = doc_start NULL: dv", d_dv0, d_dv, N * ldv);
        cmp_same_bits("gdn backward, one document = doc_start NULL: dg", d_dg0, d_dg, N * Hv);
        cmp_same_bits("gdn backward, one document = doc_start NULL: dbeta", d_db0, d_db, N * Hv);
        ops_free(d_o0); ops_free(d_st0); ops_free(d_dq0); ops_free(d_dk0); ops_free(d_dv0); ops_free(d_dg0);
        ops_free(d_db0);
    }
    free(hdoc); ops_free(d_doc);
    free(q); free(k); free(v); free(g); free(beta); free(st_in); free(ro); free(rst); free(dout);
    free(rdq); free(rdk); free(rdv); free(rdg); free(rdb);
    ops_free(d_q); ops_free(d_k); ops_free(d_v); ops_free(d_g); ops_free(d_beta); ops_free(d_st_in); ops_free(d_o);
    ops_free(d_st); ops_free(d_dq); ops_free(d_dk); ops_free(d_dv); ops_free(d_dg); ops_free(d_db); ops_free(d_dout);
    ops_free(d_dq2); ops_free(d_dk2); ops_free(d_dv2); ops_free(d_dg2); ops_free(d_db2);
}

static void test_gdn(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int chunk,
                     int with_state) {
    test_gdn_tol(B, T, Hk, Hv, dk, dv, extra_qk, extra_v, chunk, with_state, GDN_DECAY_MID, TOL_GDN_FWD, TOL_GDN_BWD);
}

static void test_gdn_doc_alone(int T, int Hk, int Hv, int dk, int dv, int chunk, double tol_fwd, double tol_bwd);

// The chunked kernels (kernels/cuda/deltanet_chunk.cu: chunk > 0, dk and dv in {64, 128}), fp32
// in this build, against the CPU (its chunked forward, its backward): a partial last chunk, one
// whole chunk, T = 1, Hv > Hk (2 and 4 value heads a key head), every (dk, dv) pair, strided rows,
// a passed-in state, the three decay regimes. Tolerances above.
static void test_gdn_chunked(void) {
    printf(" gated delta rule, chunked kernels (fp32 products)\n");
    test_gdn_tol(1, 130, 1, 2, 64, 64, 5, 3, 64, 1, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);
    test_gdn_tol(2, 100, 1, 2, 128, 128, 0, 0, 64, 0, GDN_DECAY_STRONG, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);
    test_gdn_tol(1, 70, 2, 2, 128, 64, 0, 0, 64, 1, GDN_DECAY_SLOW, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);
    test_gdn_tol(1, 129, 1, 1, 64, 128, 0, 0, 16, 0, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);
    test_gdn_tol(2, 64, 1, 4, 64, 64, 0, 0, 64, 1, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);   // one whole chunk, 4 value heads a key head
    test_gdn_tol(3, 1, 2, 2, 128, 128, 0, 0, 64, 1, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);  // T = 1
    // documents (gdn_doc_lists: starts at, inside and just before chunk boundaries, short and
    // one-token documents, a partial last chunk, another layout per sequence): the CPU with the
    // same doc_start; a single document = doc_start NULL bit for bit; each document alone
    printf(" gated delta rule, chunked kernels, documents (doc_start)\n");
    test_gdn_run(2, 150, 1, 2, 64, 64, 5, 3, 64, 1, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD, GDN_DOCS_MIXED);
    test_gdn_run(2, 150, 1, 1, 128, 128, 0, 0, 64, 1, GDN_DECAY_SLOW, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD, GDN_DOCS_MIXED);
    test_gdn_run(2, 150, 2, 2, 64, 128, 0, 0, 64, 0, GDN_DECAY_STRONG, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD, GDN_DOCS_MIXED);
    test_gdn_run(2, 130, 1, 2, 128, 64, 0, 0, 64, 1, GDN_DECAY_MID, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD, GDN_DOCS_ONE);
    test_gdn_doc_alone(150, 1, 2, 64, 64, 64, TOL_GDN_CHUNK_FWD, TOL_GDN_CHUNK_BWD);
}

// Documents, independent of the CPU: the packed sequences (the MIXED layout, B = 2) against each
// document run alone on the device as a sequence of its own (doc_start NULL, state zeros; the
// sequence's first document with the sequence's state_in): o, and the backward's dq, dk, dv, dg,
// dbeta of each document's rows (dout the same rows), must match; state_out is the last
// document's alone. Both runs are the device's, the documents alone cut at other chunk
// boundaries than packed (the sums regrouped): the tolerances are those of the CUDA-vs-CPU
// comparison of the same kernels (tol_fwd, tol_bwd).
static void test_gdn_doc_alone(int T, int Hk, int Hv, int dk, int dv, int chunk, double tol_fwd, double tol_bwd) {
    char nm[200];
    const int B = 2;
    const size_t N = (size_t)B * T, lq = (size_t)Hk * dk, lv = (size_t)Hv * dv, SS = (size_t)dk * dv;
    const size_t SN = (size_t)B * Hv * SS, ON = N * Hv * dv;
    float *q = hrand_heads_l2(N, Hk, dk, lq), *k = hrand_heads_l2(N, Hk, dk, lq), *v = hrand(N * lv, 1);
    float *g = hzeros(N * Hv), *beta = hzeros(N * Hv), *st_in = hrand(SN, 0.5), *dout = hrand(ON, 1);
    for (size_t i = 0; i < N * Hv; i++) {
        g[i] = (float)(-0.05 - 0.4 * (0.5 + 0.5 * tu_rand()));
        beta[i] = (float)(0.5 + 0.45 * tu_rand());
    }
    int* hdoc = gdn_doc_starts(GDN_DOCS_MIXED, B, T);
    // packed, on the device
    OpsGdnShape s = {B, T, Hk, Hv, dk, dv, chunk, 0, 0, NULL};
    s.doc_start = dcopy_int(hdoc, N);
    float *d_q = dcopy(q, N * lq), *d_k = dcopy(k, N * lq), *d_v = dcopy(v, N * lv), *d_g = dcopy(g, N * Hv);
    float *d_beta = dcopy(beta, N * Hv), *d_st_in = dcopy(st_in, SN), *d_dout = dcopy(dout, ON);
    float *d_o = dpoison(ON), *d_st = dpoison(SN), *d_dq = dpoison(N * lq), *d_dk = dpoison(N * lq);
    float *d_dv = dpoison(N * lv), *d_dg = dpoison(N * Hv), *d_db = dpoison(N * Hv);
    ops_gdn_forward(d_o, d_st, NULL, d_q, d_k, d_v, d_g, d_beta, d_st_in, &s);
    ops_gdn_backward(d_dq, d_dk, d_dv, d_dg, d_db, d_dout, d_q, d_k, d_v, d_g, d_beta, NULL, &s);
    // each document alone: its rows into the "alone" tensors
    float *ao = hzeros(ON), *ast = hzeros(SN), *adq = hzeros(N * lq), *adk = hzeros(N * lq), *adv = hzeros(N * lv);
    float *adg = hzeros(N * Hv), *adb = hzeros(N * Hv);
    int ndocs = 0;
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T;) {
            int t1 = t0 + 1;
            while (t1 < T && hdoc[(size_t)b * T + t1] == t0) t1++;
            const int L = t1 - t0;
            const size_t r0 = (size_t)b * T + t0;
            OpsGdnShape s1 = {1, L, Hk, Hv, dk, dv, chunk, 0, 0, NULL};
            float *e_q = dcopy(q + r0 * lq, L * lq), *e_k = dcopy(k + r0 * lq, L * lq), *e_v = dcopy(v + r0 * lv, L * lv);
            float *e_g = dcopy(g + r0 * Hv, L * Hv), *e_b = dcopy(beta + r0 * Hv, L * Hv);
            float *e_si = t0 == 0 ? dcopy(st_in + (size_t)b * Hv * SS, Hv * SS) : NULL, *e_do = dcopy(dout + r0 * Hv * dv, L * Hv * dv);
            float *e_o = dpoison(L * Hv * dv), *e_st = dpoison(Hv * SS), *e_dq = dpoison(L * lq), *e_dk = dpoison(L * lq);
            float *e_dv = dpoison(L * lv), *e_dg = dpoison(L * Hv), *e_db = dpoison(L * Hv);
            ops_gdn_forward(e_o, e_st, NULL, e_q, e_k, e_v, e_g, e_b, e_si, &s1);
            ops_gdn_backward(e_dq, e_dk, e_dv, e_dg, e_db, e_do, e_q, e_k, e_v, e_g, e_b, NULL, &s1);
            ops_to_host(ao + r0 * Hv * dv, e_o, L * Hv * dv * sizeof(float));
            if (t1 == T) ops_to_host(ast + (size_t)b * Hv * SS, e_st, Hv * SS * sizeof(float));
            ops_to_host(adq + r0 * lq, e_dq, L * lq * sizeof(float));
            ops_to_host(adk + r0 * lq, e_dk, L * lq * sizeof(float));
            ops_to_host(adv + r0 * lv, e_dv, L * lv * sizeof(float));
            ops_to_host(adg + r0 * Hv, e_dg, L * Hv * sizeof(float));
            ops_to_host(adb + r0 * Hv, e_db, L * Hv * sizeof(float));
            ops_free(e_q); ops_free(e_k); ops_free(e_v); ops_free(e_g); ops_free(e_b); ops_free(e_si); ops_free(e_do);
            ops_free(e_o); ops_free(e_st); ops_free(e_dq); ops_free(e_dk); ops_free(e_dv); ops_free(e_dg); ops_free(e_db);
            ndocs++;
            t0 = t1;
        }
    snprintf(nm, sizeof nm, "gdn documents = alone: T=%d Hk=%d Hv=%d dk=%d dv=%d chunk %d, %d docs: o", T, Hk, Hv, dk,
             dv, chunk, ndocs);
    cmp(nm, d_o, ao, ON, tol_fwd);
    cmp("gdn documents = alone: state_out (the last document's)", d_st, ast, SN, tol_fwd);
    cmp("gdn documents = alone: dq", d_dq, adq, N * lq, tol_bwd);
    cmp("gdn documents = alone: dk", d_dk, adk, N * lq, tol_bwd);
    cmp("gdn documents = alone: dv", d_dv, adv, N * lv, tol_bwd);
    cmp("gdn documents = alone: dg", d_dg, adg, N * Hv, tol_bwd);
    cmp("gdn documents = alone: dbeta", d_db, adb, N * Hv, tol_bwd);
    free(q); free(k); free(v); free(g); free(beta); free(st_in); free(dout); free(hdoc);
    free(ao); free(ast); free(adq); free(adk); free(adv); free(adg); free(adb);
    ops_free((void*)s.doc_start); ops_free(d_q); ops_free(d_k); ops_free(d_v); ops_free(d_g); ops_free(d_beta);
    ops_free(d_st_in); ops_free(d_dout); ops_free(d_o); ops_free(d_st); ops_free(d_dq); ops_free(d_dk); ops_free(d_dv);
    ops_free(d_dg); ops_free(d_db);
}

// beta, g from ba = [b | a]; a few a + dt_bias above softplus's threshold 20 (where it is x)
static void test_gdn_gates(int N, int Hv) {
    char nm[128];
    float *ba = hrand((size_t)N * 2 * Hv, 3), *A = hrand(Hv, 1), *dt = hrand(Hv, 1);
    for (int n = 0; n < N; n += 7) ba[(size_t)n * 2 * Hv + Hv + n % Hv] = 20.0f + (float)(n % 5) * 3.0f;
    float *rg = hzeros((size_t)N * Hv), *rb = hzeros((size_t)N * Hv);
    ref_ops_gdn_gates_forward(rg, rb, ba, A, dt, N, Hv);
    float *d_ba = dcopy(ba, (size_t)N * 2 * Hv), *d_A = dcopy(A, Hv), *d_dt = dcopy(dt, Hv);
    float *d_g = dpoison((size_t)N * Hv), *d_b = dpoison((size_t)N * Hv);
    ops_gdn_gates_forward(d_g, d_b, d_ba, d_A, d_dt, N, Hv);
    snprintf(nm, sizeof nm, "gdn gates forward N=%d Hv=%d (softplus past 20): g", N, Hv);
    cmp(nm, d_g, rg, (size_t)N * Hv, TOL_ELEM);
    cmp("gdn gates forward: beta", d_b, rb, (size_t)N * Hv, TOL_ELEM);
    float *dg = hrand((size_t)N * Hv, 1), *db = hrand((size_t)N * Hv, 1), *dA = hrand(Hv, 1), *ddt = hrand(Hv, 1);
    float *d_dg = dcopy(dg, (size_t)N * Hv), *d_db = dcopy(db, (size_t)N * Hv), *d_dA = dcopy(dA, Hv), *d_ddt = dcopy(ddt, Hv);
    float *rdba = hzeros((size_t)N * 2 * Hv), *d_dba = dpoison((size_t)N * 2 * Hv);
    ref_ops_gdn_gates_backward(rdba, dA, ddt, dg, db, ba, A, dt, N, Hv);
    ops_gdn_gates_backward(d_dba, d_dA, d_ddt, d_dg, d_db, d_ba, d_A, d_dt, N, Hv);
    cmp("gdn gates backward: dba", d_dba, rdba, (size_t)N * 2 * Hv, TOL_ELEM);
    cmp("gdn gates backward: dA_log (+=)", d_dA, dA, Hv, TOL_ELEM);
    cmp("gdn gates backward: ddt_bias (+=)", d_ddt, ddt, Hv, TOL_ELEM);
    free(ba); free(A); free(dt); free(rg); free(rb); free(dg); free(db); free(dA); free(ddt); free(rdba);
    ops_free(d_ba); ops_free(d_A); ops_free(d_dt); ops_free(d_g); ops_free(d_b); ops_free(d_dg); ops_free(d_db);
    ops_free(d_dA); ops_free(d_ddt); ops_free(d_dba);
}

// causal conv1d + SiLU: out, pre, state_out (from state_in or zeros); backward dx (=), dw (+=);
// docs: a layout of gdn_doc_starts (the CPU with the same doc_start); GDN_DOCS_ONE also runs the
// device op with doc_start = NULL and requires the same bits
static void test_conv1d_docs(int B, int T, int C, int K, int with_state, int docs) {
    char nm[128];
    const size_t n = (size_t)B * T * C, ns = (size_t)B * C * (K - 1);
    float *x = hrand(n, 2), *w = hrand((size_t)C * K, 1), *st = with_state ? hrand(ns, 2) : NULL;
    float *ro = hzeros(n), *rp = hzeros(n), *rs = hzeros(ns);
    int* hdoc = gdn_doc_starts(docs, B, T);
    int* d_doc = hdoc ? dcopy_int(hdoc, (size_t)B * T) : NULL;
    ref_ops_conv1d_silu_forward(ro, rp, rs, x, w, st, hdoc, B, T, C, K);
    float *d_x = dcopy(x, n), *d_w = dcopy(w, (size_t)C * K), *d_st = with_state ? dcopy(st, ns) : NULL;
    float *d_o = dpoison(n), *d_p = dpoison(n), *d_s = dpoison(ns);
    ops_conv1d_silu_forward(d_o, d_p, d_s, d_x, d_w, d_st, d_doc, B, T, C, K);
    snprintf(nm, sizeof nm, "conv1d silu forward B=%d T=%d C=%d K=%d%s%s: out", B, T, C, K, with_state ? " state_in" : "",
             gdn_doc_name(docs));
    cmp(nm, d_o, ro, n, TOL_ELEM);
    cmp("conv1d silu forward: pre", d_p, rp, n, TOL_ELEM);
    cmp_exact("conv1d silu forward: state_out (inputs moved)", d_s, rs, ns);
    float *dout = hrand(n, 1), *dw = hrand((size_t)C * K, 1), *rdx = hzeros(n);
    float *d_dout = dcopy(dout, n), *d_dw = dcopy(dw, (size_t)C * K), *d_dx = dpoison(n);
    ref_ops_conv1d_silu_backward(rdx, dw, dout, x, rp, w, hdoc, B, T, C, K);
    ops_conv1d_silu_backward(d_dx, d_dw, d_dout, d_x, d_p, d_w, d_doc, B, T, C, K);
    cmp("conv1d silu backward: dx", d_dx, rdx, n, TOL_ELEM);
    cmp("conv1d silu backward: dw (+=)", d_dw, dw, (size_t)C * K, TOL_ELEM);
    if (docs == GDN_DOCS_ONE) {   // one document a sequence: the bits of doc_start = NULL (other kernels)
        float *d_o0 = dpoison(n), *d_p0 = dpoison(n), *d_s0 = dpoison(ns), *d_dx0 = dpoison(n), *d_dx1 = dpoison(n);
        // dw (+=) from the same start both ways: the reference's result, each run's partials added again
        float *d_dw0 = dcopy(dw, (size_t)C * K), *d_dw1 = dcopy(dw, (size_t)C * K);
        ops_conv1d_silu_forward(d_o0, d_p0, d_s0, d_x, d_w, d_st, NULL, B, T, C, K);
        cmp_same_bits("conv1d, one document = doc_start NULL: out", d_o0, d_o, n);
        cmp_same_bits("conv1d, one document = doc_start NULL: pre", d_p0, d_p, n);
        cmp_same_bits("conv1d, one document = doc_start NULL: state_out", d_s0, d_s, ns);
        ops_conv1d_silu_backward(d_dx0, d_dw0, d_dout, d_x, d_p, d_w, NULL, B, T, C, K);
        ops_conv1d_silu_backward(d_dx1, d_dw1, d_dout, d_x, d_p, d_w, d_doc, B, T, C, K);
        cmp_same_bits("conv1d, one document = doc_start NULL: dx", d_dx0, d_dx, n);
        cmp_same_bits("conv1d, one document = doc_start NULL: dw (+=)", d_dw0, d_dw1, (size_t)C * K);
        ops_free(d_o0); ops_free(d_p0); ops_free(d_s0); ops_free(d_dx0); ops_free(d_dx1); ops_free(d_dw0);
        ops_free(d_dw1);
    }
    free(hdoc); ops_free(d_doc);
    free(x); free(w); free(st); free(ro); free(rp); free(rs); free(dout); free(dw); free(rdx);
    ops_free(d_x); ops_free(d_w); ops_free(d_st); ops_free(d_o); ops_free(d_p); ops_free(d_s); ops_free(d_dout);
    ops_free(d_dw); ops_free(d_dx);
}

static void test_conv1d(int B, int T, int C, int K, int with_state) { test_conv1d_docs(B, T, C, K, with_state, GDN_DOCS_NONE); }

// The conv with documents, independent of the CPU: the packed sequences (MIXED layout, B = 2,
// state_in) against each document alone on the device (doc_start NULL; the sequence's first
// document with state_in, the others zeros): out, pre, dx of each document's rows, state_out the
// last document's; dw (+=, from zeros) the sum of the documents' (summed in another grouping:
// TOL_ELEM; the rest is the same arithmetic per element: tolerance 0)
static void test_conv1d_doc_alone(int T, int C, int K) {
    char nm[128];
    const int B = 2;
    const size_t N = (size_t)B * T, n = N * C, ns = (size_t)B * C * (K - 1), nw = (size_t)C * K, S1 = (size_t)C * (K - 1);
    float *x = hrand(n, 2), *w = hrand(nw, 1), *st = hrand(ns, 2), *dout = hrand(n, 1);
    int* hdoc = gdn_doc_starts(GDN_DOCS_MIXED, B, T);
    int* d_doc = dcopy_int(hdoc, N);
    float *d_x = dcopy(x, n), *d_w = dcopy(w, nw), *d_st = dcopy(st, ns), *d_dout = dcopy(dout, n);
    float* zw = hzeros(nw);
    float *d_o = dpoison(n), *d_p = dpoison(n), *d_s = dpoison(ns), *d_dx = dpoison(n), *d_dw = dcopy(zw, nw);
    ops_conv1d_silu_forward(d_o, d_p, d_s, d_x, d_w, d_st, d_doc, B, T, C, K);
    ops_conv1d_silu_backward(d_dx, d_dw, d_dout, d_x, d_p, d_w, d_doc, B, T, C, K);
    float *ao = hzeros(n), *ap = hzeros(n), *as = hzeros(ns), *adx = hzeros(n);
    float* e_dw = dcopy(zw, nw);   // every document's dw added in turn
    int ndocs = 0;
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T;) {
            int t1 = t0 + 1;
            while (t1 < T && hdoc[(size_t)b * T + t1] == t0) t1++;
            const int L = t1 - t0;
            const size_t r0 = ((size_t)b * T + t0) * C, m = (size_t)L * C;
            float *e_x = dcopy(x + r0, m), *e_do = dcopy(dout + r0, m), *e_si = t0 == 0 ? dcopy(st + (size_t)b * S1, S1) : NULL;
            float *e_o = dpoison(m), *e_p = dpoison(m), *e_s = dpoison(S1), *e_dx = dpoison(m);
            ops_conv1d_silu_forward(e_o, e_p, e_s, e_x, d_w, e_si, NULL, 1, L, C, K);
            ops_conv1d_silu_backward(e_dx, e_dw, e_do, e_x, e_p, d_w, NULL, 1, L, C, K);
            ops_to_host(ao + r0, e_o, m * sizeof(float));
            ops_to_host(ap + r0, e_p, m * sizeof(float));
            ops_to_host(adx + r0, e_dx, m * sizeof(float));
            if (t1 == T) ops_to_host(as + (size_t)b * S1, e_s, S1 * sizeof(float));
            ops_free(e_x); ops_free(e_do); ops_free(e_si); ops_free(e_o); ops_free(e_p); ops_free(e_s); ops_free(e_dx);
            ndocs++;
            t0 = t1;
        }
    snprintf(nm, sizeof nm, "conv1d documents = alone: T=%d C=%d K=%d, %d docs: out", T, C, K, ndocs);
    cmp(nm, d_o, ao, n, 0.0);
    cmp("conv1d documents = alone: pre", d_p, ap, n, 0.0);
    cmp("conv1d documents = alone: state_out (the last document's)", d_s, as, ns, 0.0);
    cmp("conv1d documents = alone: dx", d_dx, adx, n, 0.0);
    float* hdw = hback(e_dw, nw);
    cmp("conv1d documents = alone: dw (the documents' sum)", d_dw, hdw, nw, TOL_ELEM);
    free(x); free(w); free(st); free(dout); free(hdoc); free(ao); free(ap); free(as); free(adx); free(hdw); free(zw);
    ops_free(d_doc); ops_free(d_x); ops_free(d_w); ops_free(d_st); ops_free(d_dout); ops_free(d_o); ops_free(d_p);
    ops_free(d_s); ops_free(d_dx); ops_free(d_dw); ops_free(e_dw);
}

// L2 norm of `heads` heads of n inside rows of ldx (x, dx) and ldy (y, dy) floats
static void test_l2norm(int N, int heads, int n, int ldx, int ldy) {
    char nm[128];
    const size_t used = (size_t)heads * n;
    float *x = hrand((size_t)N * ldx, 2), *dy = hrand((size_t)N * ldy, 1);
    float *ry = hpoison_rows(N, ldy, used), *rr = hzeros((size_t)N * heads), *rdx = hpoison_rows(N, ldx, used);
    float *d_x = dcopy(x, (size_t)N * ldx), *d_dy = dcopy(dy, (size_t)N * ldy), *d_y = dcopy(ry, (size_t)N * ldy);
    float *d_dx = dcopy(rdx, (size_t)N * ldx), *d_r = dpoison((size_t)N * heads);
    ref_ops_l2norm_forward(ry, rr, x, N, heads, n, ldx, ldy, 1e-6f);
    ops_l2norm_forward(d_y, d_r, d_x, N, heads, n, ldx, ldy, 1e-6f);
    snprintf(nm, sizeof nm, "l2norm forward N=%d heads=%d n=%d ldx=%d ldy=%d: y", N, heads, n, ldx, ldy);
    cmp_rows(nm, d_y, ry, N, ldy, used, TOL_ELEM);
    cmp("l2norm forward: rinv", d_r, rr, (size_t)N * heads, TOL_ELEM);
    ref_ops_l2norm_backward(rdx, dy, x, rr, N, heads, n, ldx, ldy);
    ops_l2norm_backward(d_dx, d_dy, d_x, d_r, N, heads, n, ldx, ldy);
    cmp_rows("l2norm backward: dx", d_dx, rdx, N, ldx, used, TOL_ELEM);
    free(x); free(dy); free(ry); free(rr); free(rdx);
    ops_free(d_x); ops_free(d_dy); ops_free(d_y); ops_free(d_dx); ops_free(d_r);
}

static void test_rmsnorm_gated(int rows, int n, OpsGateAct act) {
    char nm[128];
    const size_t m = (size_t)rows * n;
    float *x = hrand(m, 2), *z = hrand(m, 3), *w = hrand(n, 1), *dy = hrand(m, 1), *dw = hrand(n, 1);
    float *ry = hzeros(m), *rr = hzeros(rows), *rdx = hzeros(m), *rdz = hzeros(m);
    ref_ops_rmsnorm_gated_forward(ry, rr, x, z, w, rows, n, 1e-6f, act);
    float *d_x = dcopy(x, m), *d_z = dcopy(z, m), *d_w = dcopy(w, n), *d_dy = dcopy(dy, m), *d_dw = dcopy(dw, n);
    float *d_y = dpoison(m), *d_r = dpoison(rows), *d_dx = dpoison(m), *d_dz = dpoison(m);
    ops_rmsnorm_gated_forward(d_y, d_r, d_x, d_z, d_w, rows, n, 1e-6f, act);
    snprintf(nm, sizeof nm, "rmsnorm gated (%s) forward rows=%d n=%d: y", act_name[act], rows, n);
    cmp(nm, d_y, ry, m, TOL_ELEM);
    cmp("rmsnorm gated forward: rstd", d_r, rr, rows, TOL_ELEM);
    ref_ops_rmsnorm_gated_backward(rdx, rdz, dw, dy, x, z, w, rr, rows, n, act);
    ops_rmsnorm_gated_backward(d_dx, d_dz, d_dw, d_dy, d_x, d_z, d_w, d_r, rows, n, act);
    cmp("rmsnorm gated backward: dx", d_dx, rdx, m, TOL_ELEM);
    cmp("rmsnorm gated backward: dz", d_dz, rdz, m, TOL_ELEM);
    cmp("rmsnorm gated backward: dw (+=)", d_dw, dw, n, TOL_ELEM);
    free(x); free(z); free(w); free(dy); free(dw); free(ry); free(rr); free(rdx); free(rdz);
    ops_free(d_x); ops_free(d_z); ops_free(d_w); ops_free(d_dy); ops_free(d_dw); ops_free(d_y); ops_free(d_r);
    ops_free(d_dx); ops_free(d_dz);
}

// ops_float_from_act in the fp32 build: a copy, and nothing when x aliases act
static void test_float_from_act(size_t n) {
    float *a = hrand(n, 4), *d_a = dcopy(a, n), *d_x = dpoison(n);
    ops_float_from_act(d_x, d_a, n);
    cmp_exact("float_from_act (fp32 act_t: a copy)", d_x, a, n);
    ops_float_from_act(d_a, d_a, n);
    cmp_exact("float_from_act in place (fp32 act_t: nothing)", d_a, a, n);
    free(a);
    ops_free(d_a); ops_free(d_x);
}

int main(int argc, char** argv) {
    char why[256];
    int have = cuda_device_present(why, sizeof why);
    if (argc > 1 && strcmp(argv[1], "--has-device") == 0) return have ? 0 : 1;
    if (argc > 1 && strcmp(argv[1], "--has-cudnn") == 0) return have && cuda_cudnn_available() ? 0 : 1;
    if (!have) {
        printf("skipped: no CUDA device (%s)\n", why);
        return 0;
    }
    ops_init(0);
    cpu_ref.init(0);
    if (argc > 1 && strcmp(argv[1], "--gdn-chunk") == 0) {   // the ctest cudaemu_gdn_chunk: these checks alone
        test_gdn_chunked();
        return tu_finish();
    }
    if (cuda_tf32_enabled()) tol_gemm = 5e-3;
    if (cuda_gemm_math() == CUDA_MATH_BF16) tol_gemm = 2e-2;
    printf("CUDA ops vs CPU ops: %s\n", ops_backend_name());

    test_matmul(128, 256, 384);
    test_matmul(37, 45, 53);       // odd shapes: unaligned rows for cuBLASLt
    test_matmul(300, 64, 1000);
    test_matmul_gelu(256, 128, 512);   // aligned: cuBLASLt's GELU epilogues
    test_matmul_bias(128, 64, 192);
    test_matmul_bias(37, 45, 53);      // odd: a partial block of 32 columns, unaligned rows
    test_matmul_bias(1000, 16, 70);    // rows not a multiple of the kernel's 32 row groups
    test_matmul_gelu(37, 45, 53);      // odd: the unfused fallback where the epilogue has no algorithm
    test_embedding(4, 64, 96, 50);
    test_embedding(2, 33, 770, 3000);
    test_norm(OPS_RMSNORM, 300, 200);
    test_norm(OPS_LAYERNORM, 300, 200);
    test_norm(OPS_LAYERNORM, 64, 1024);
    test_activations(100, 300);
    test_xent(64, 1000, 1024);
    test_xent(5, 50257, 50304);
    test_optim((size_t)3 * OPS_SUMSQ_CHUNK + 123);
    test_absmax_median(300, 77);
    test_absmax_median(64, 128);   // an even count: the lower median

    // attention: every gate variant at head_dim 64 (crosses several 32-row tiles), then other
    // head dims (each a different kernel instantiation) and GQA ratios
    test_attention(2, 100, 4, 2, 64, 0, 0, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    for (int g = 1; g <= 2; g++)
        for (int pos = 0; pos <= 1; pos++)
            for (int act = 0; act <= 2; act++)
                test_attention(2, 100, 4, 2, 64, 1, 1, (OpsGate)g, (OpsGatePos)pos, (OpsGateAct)act);
    test_attention(2, 37, 4, 1, 8, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(1, 70, 2, 2, 128, 0, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(1, 65, 3, 1, 96, 1, 0, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(1, 33, 2, 2, 48, 0, 0, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_VALUE, OPS_ACT_SIGMOID);
    test_attention(1, 40, 2, 1, 256, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(3, 1, 2, 1, 32, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);   // T = 1
    test_attention(1, 300, 8, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    // attention within documents ([data] doc_mask): documents of 1 token, documents that start on
    // a 32-row tile's first row, just before and after it, several per tile and across tiles;
    // positions continuing and restarting
    for (att_doc_rope = 0; att_doc_rope <= 1; att_doc_rope++) {
        att_doc = 1;
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(1, 300, 8, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 37, 4, 1, 8, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_VALUE, OPS_ACT_SILU);
        att_doc = 0;
    }
    att_doc_rope = 0;

    // RoPE past the training length: positions from pos0 = 5, each scaling (pos0 alone first,
    // then one field at a time); then the KV cache's ops
    test_prep_rope(OPS_ROPE_NONE, 0.0f, 0, 0);
    test_prep_rope(OPS_ROPE_NONE, 0.0f, 5, 0);
    test_prep_rope(OPS_ROPE_LINEAR, 0.0f, 5, 0);
    test_prep_rope(OPS_ROPE_NTK, 0.0f, 5, 0);
    test_prep_rope(OPS_ROPE_YARN, 0.0f, 5, 0);
    test_prep_rope(OPS_ROPE_YARN, 1.5f, 5, 0);   // only attn_factor differs from the previous table
    for (int kind = OPS_ROPE_NONE; kind <= OPS_ROPE_YARN; kind++) test_rope_rows((OpsRopeScaling)kind, 11, 3, 64, 5, 0);
    test_rope_rows(OPS_ROPE_YARN, 4, 2, 15, 100, 0);   // odd head_dim: the last channel is not rotated
    // partial RoPE ([model] rope_fraction): only rope_dim of the 64 channels turn; right after the
    // same scaling over every channel, so a table cached without rope_dim in its key is caught
    test_prep_rope(OPS_ROPE_YARN, 1.5f, 5, 16);
    test_prep_rope(OPS_ROPE_NTK, 0.0f, 5, 16);
    test_prep_rope(OPS_ROPE_NONE, 0.0f, 5, 2);
    for (int kind = OPS_ROPE_NONE; kind <= OPS_ROPE_YARN; kind++) test_rope_rows((OpsRopeScaling)kind, 11, 3, 64, 5, 16);
    test_kv_cache_write(2, 3, 9, 2, 64, 4);
    test_kv_cache_write(3, 1, 5, 1, 40, 0);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_NONE, OPS_GATEPOS_SDPA, 0, 0);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_NONE, OPS_GATEPOS_SDPA, 0, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_NONE, OPS_GATEPOS_SDPA, 2, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, 0, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, 2, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, 0, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, 2, 1);
    test_attention_cached(2, 3, 7, 9, 4, 2, 64, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_VALUE, 2, 1);
    test_attention_cached(2, 1, 7, 9, 4, 2, 64, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, 2, 1);   // T = 1
    test_attention_cached(2, 1, 7, 9, 4, 2, 64, OPS_GATE_NONE, OPS_GATEPOS_SDPA, 0, 0);          // T = 1
    test_attention_cached(1, 2, 70, 80, 2, 1, 128, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, 4, 1);    // 3 chunks of 32 slots
    test_attention_cached(1, 4, 45, 45, 3, 1, 40, OPS_GATE_NONE, OPS_GATEPOS_SDPA, 1, 1);         // a full cache, hd 40
    test_mem_available();

    // the tensor-core flash kernel (attn_impl = flash): head_dim 64 and 128, every gate (in its
    // epilogue), GQA 1/2/4, T not a multiple of the 64-row tiles, T = 1, several key tiles
    // both kernels of attn_impl = flash: mma.sync (the default) and the first WMMA version
    att_impl = OPS_ATTN_FLASH;
    for (int fk = CUDA_FLASH_MMA; fk <= CUDA_FLASH_WMMA; fk++) {
        cuda_set_flash_kernel(fk);
        printf(" flash attention, %s kernel\n", fk == CUDA_FLASH_MMA ? "mma.sync" : "WMMA");
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 1, 64, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_NS_SIGMOID);
        test_attention(1, 64, 2, 2, 64, 0, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_VALUE, OPS_ACT_SILU);
        test_attention(1, 300, 8, 2, 128, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 129, 4, 4, 128, 0, 0, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(3, 1, 2, 1, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);   // T = 1
        att_doc = 1;   // attention within documents (64-row tiles: documents start at 63, 64, 65, 128, 129)
        test_attention(2, 300, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        att_doc_rope = 1;
        test_attention(1, 150, 4, 4, 128, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        att_doc = att_doc_rope = 0;
    }
    cuda_set_flash_kernel(CUDA_FLASH_MMA);
    att_impl = OPS_ATTN_FUSED;

    // cuDNN's fused attention (attn_impl = cudnn): the gate variants around it, GQA, longer T,
    // head_dim 128; the sdpa gate is applied outside cuDNN, so every gate is covered
    if (cuda_cudnn_available()) {
        att_impl = OPS_ATTN_CUDNN;
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SILU);
        test_attention(2, 64, 4, 4, 64, 0, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_VALUE, OPS_ACT_SIGMOID);
        test_attention(1, 300, 8, 2, 128, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        att_impl = OPS_ATTN_FUSED;
    } else {
        printf("cuDNN attention: not in this build (scripts/cudnn_frontend.sh): its checks skipped\n");
    }

    // MoE: both routers, dropless and with capacity (drops), more slots than one 1024-slot chunk
    // of the dispatch plan, ties in the logits
    test_moe_router(300, 8, 2, OPS_ROUTER_SOFTMAX, 0, 0);
    test_moe_router(300, 8, 2, OPS_ROUTER_SIGMOID, 0, 0);
    test_moe_router(300, 8, 2, OPS_ROUTER_SOFTMAX, 1, 40);
    test_moe_router(1000, 64, 8, OPS_ROUTER_SOFTMAX, 0, 0);
    test_moe_router(1000, 64, 8, OPS_ROUTER_SIGMOID, 1, 100);
    test_moe_router(5, 128, 8, OPS_ROUTER_SOFTMAX, 0, 0);   // most experts get no token
    test_moe_router(301, 8, 3, OPS_ROUTER_SIGMOID, 0, 0);   // odd k; N*k not a multiple of 8 warps
    test_moe_router(333, 16, 1, OPS_ROUTER_SOFTMAX, 0, 400); // k = 1; a capacity that drops nothing
    const int rows1[5] = {7, 0, 33, 1, 64};
    const int rows2[3] = {0, 37, 0};
    for (int mode = CUDA_MOE_GEMM_LOOP; mode <= CUDA_MOE_GEMM_GROUPED; mode++) {   // both ways of the experts' GEMMs
        cuda_set_moe_gemm(mode);
        printf(" grouped matmul as %s\n", mode == CUDA_MOE_GEMM_LOOP ? "one cuBLASLt call per expert" : "one cuBLAS grouped GEMM");
        test_grouped_matmul(5, rows1, 96, 160);
        test_grouped_matmul(3, rows2, 45, 53);
    }
    cuda_set_moe_gemm(CUDA_MOE_GEMM_LOOP);
    test_sigmoid_gate_add(100, 200);

    // Gated DeltaNet: the delta rule with Hv = 2 Hk and 1 Hk, dk != dv, T across the backward's
    // 64-token checkpoints, strided q/k/v rows, state_in/state_out, the chunked form (run by the
    // recurrent kernel), dv over several forward blocks, dk = dv = 128 (Qwen3-Next's heads: more
    // than 48 KiB of shared memory), decoding (T = 1 with a state); then the state in global
    // memory instead of shared memory (GATEDGPT_GDN_STATE=global)
    test_gdn(2, 100, 2, 4, 16, 24, 0, 0, 0, 0);
    test_gdn(1, 70, 1, 2, 32, 80, 35, 5, 16, 1);
    test_gdn(2, 130, 2, 2, 8, 6, 0, 3, 64, 1);
    test_gdn(1, 65, 1, 2, 128, 128, 0, 0, 0, 1);
    test_gdn(2, 1, 1, 2, 16, 16, 0, 0, 0, 1);
    setenv("GATEDGPT_GDN_STATE", "global", 1);
    printf(" gated delta rule with the state in global memory (GATEDGPT_GDN_STATE=global)\n");
    test_gdn(2, 100, 2, 4, 16, 24, 0, 0, 0, 1);
    test_gdn(1, 70, 1, 2, 32, 80, 35, 5, 16, 1);
    unsetenv("GATEDGPT_GDN_STATE");
    // documents (doc_start; gdn_doc_lists' layouts) on the recurrent kernels: decoding's form
    // (chunk 0) and a chunked shape the chunked kernels do not take (dk = 32, dv = 80; the CPU runs
    // its chunked form), the state in global memory, a single document = doc_start NULL bit for
    // bit, each document alone
    printf(" gated delta rule, recurrent kernels, documents (doc_start)\n");
    test_gdn_run(2, 150, 2, 4, 16, 24, 0, 0, 0, 1, GDN_DECAY_MID, TOL_GDN_FWD, TOL_GDN_BWD, GDN_DOCS_MIXED);
    test_gdn_run(2, 150, 1, 2, 32, 80, 35, 5, 64, 1, GDN_DECAY_MID, TOL_GDN_FWD, TOL_GDN_BWD, GDN_DOCS_MIXED);
    test_gdn_run(2, 150, 1, 2, 16, 24, 0, 0, 0, 1, GDN_DECAY_MID, TOL_GDN_FWD, TOL_GDN_BWD, GDN_DOCS_ONE);
    setenv("GATEDGPT_GDN_STATE", "global", 1);
    test_gdn_run(2, 150, 2, 4, 16, 24, 0, 0, 0, 1, GDN_DECAY_MID, TOL_GDN_FWD, TOL_GDN_BWD, GDN_DOCS_MIXED);
    unsetenv("GATEDGPT_GDN_STATE");
    test_gdn_doc_alone(150, 1, 2, 16, 24, 0, TOL_GDN_FWD, TOL_GDN_BWD);
    test_gdn_gates(300, 6);
    test_conv1d(2, 37, 50, 4, 0);
    test_conv1d(2, 37, 50, 4, 1);
    test_conv1d(3, 2, 20, 4, 1);    // T < K - 1: state_out reaches into state_in
    // documents: with and without state_in (the first document's), one document = NULL's bits,
    // T < K - 1 with a document starting at token 1 (sequence 1: state_out zeros before it), and
    // each document alone (with state_in: documents starting at tokens 1 and 2 read zeros)
    test_conv1d_docs(2, 150, 50, 4, 0, GDN_DOCS_MIXED);
    test_conv1d_docs(2, 150, 50, 4, 1, GDN_DOCS_MIXED);   // documents at tokens 1 and 2: zeros, not state_in
    test_conv1d_docs(2, 150, 50, 4, 1, GDN_DOCS_ONE);
    test_conv1d_docs(3, 2, 20, 4, 0, GDN_DOCS_MIXED);
    test_conv1d_doc_alone(150, 50, 4);
    test_conv1d_doc_alone(2, 20, 4);   // T < K - 1: sequence 1's last document starts at token 1 (state_out: zeros, x_1)
    test_l2norm(70, 3, 20, 70, 64); // strided x and y
    test_l2norm(130, 4, 128, 512, 512);
    for (int act = 0; act <= 2; act++) test_rmsnorm_gated(300, 64, (OpsGateAct)act);
    test_rmsnorm_gated(70, 128, OPS_ACT_SILU);
    test_float_from_act(1000);

    printf("peak GPU memory held by the backend: %.1f MiB\n", cuda_allocated_peak_bytes() / 1048576.0);
    return tu_finish();
}
