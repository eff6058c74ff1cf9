// tests/test_gpu_ops_bf16.c: every op of the CUDA bf16 build (gatedgpt_cuda_bf16, act_t = bf16)
// that reads or writes act_t, against the reference semantics of that build on fresh random
// inputs.
//
//   test_gpu_ops_bf16             run every check (prints "skipped: no CUDA device" and exits 0
//                                 where no GPU is visible)
//
// The reference is the contract kernels/cpu_bf16/ops_bf16.c emulates: widen the act_t inputs to
// fp32, compute in fp32, round the act_t outputs to bf16 once (nearest even). Each check draws
// fp32 inputs on the host and rounds the act_t ones to bf16; runs the fp32 CPU op (ref_ops_*,
// build/generated/cpu_ref_ops.h) on those widened values and rounds its act_t outputs (the
// reference); uploads the same bf16 inputs, runs the CUDA op (ops_*) with its "=" outputs
// poisoned (bf16 NaN 0x7fc0, fp32 NaN: an element the kernel does not write fails), downloads
// and compares: error = max |gpu - ref| / max |ref| per tensor. "+=" outputs start from random
// values on both sides. Multi-stage ops (attention) run each stage from the reference's
// (rounded) inputs to that stage, so that errors do not compound and a failure names the op.
//
// Tolerances:
//   act_t outputs 8e-3: both sides round the same fp32 value once, but fp32 summation orders
//   differ, so a value near a rounding boundary may land one bf16 ulp away. One ulp is 2^-8 to
//   2^-7 (3.9e-3 to 7.8e-3) of the value, so of max |ref|: 8e-3 allows a one-ulp flip of the
//   largest element, not two. (The sdpa-gated attention backward also rounds dy = dyg * act(z)
//   to bf16 in its scratch before the dq/dk/dv kernels, where the emulation keeps it fp32: a
//   2^-9 relative perturbation of dy that mostly averages out in the sums.)
//   fp32 outputs computed from identical bf16 inputs (matmul_forward_f32, weight gradients dw,
//   norm dinp/dw/db/mean/rstd, qk_rstd, the qk-norm weight gradients, attention lse, the
//   first-token probe, losses, cross-entropy lse, combine, dtopk_w, the shared-expert gate's
//   out and dz) 1e-4: the products of bf16 values are exact in fp32, only the order of the
//   fp32 additions differs (test_gpu_ops holds 1e-5 to 1e-4 for the same sums)
//   flash and cuDNN attention (bf16 tensor-core products, P rounded to bf16): forward (y, yg,
//   lse) 2e-2, backward (dq, dk, dv) 5e-2, as test_gpu_ops
//   the KV cache: y, yg as act_t (8e-3), lse and the sink mass as fp32 (1e-4); RoPE on cached
//   rows as act_t (8e-3)
//   the Gated DeltaNet's ops (fp32 tensors only, compiled in this build): 1e-4, as the fp32 outputs
//   above (test_gpu_ops bounds them at 1e-5 to 1e-4 over more shapes); the chunked delta rule
//   (bf16 products on tensor cores in this build; --gdn-chunk, the ctest cudaemu_gdn_chunk_bf16)
//   2e-2 forward, 3e-2 backward (derived at TOL_GDN_BF16_FWD)
//   exact: the conversions (ops_act_from_float vs bf16_from_f32, ops_float_from_act vs
//   bf16_to_f32 over every bf16 bit pattern, ops_weights_to_act vs
//   bf16_from_f32_sr(w[i], bf16_sr_bits(seed, i))), ops_accumulate and the MoE gather backward
//   (the same fp32 additions in the same order, one rounding), the gather and the KV cache
//   write (bits moved as they are); the gate histogram allows 2 scores on a bin edge to move, as test_gpu_ops.
#include <stdarg.h>
#include <string.h>
#include "test_util.h"
#include "../kernels/ops.h"          // act_t = bf16 (GATEDGPT_ACT_BF16 from gatedgpt_cuda_bf16): the CUDA ops
#include "cpu_ref_ops.h"             // the fp32 CPU ops as ref_ops_* (the reference)
#include "../kernels/cuda/cuda_backend.h"

// "Measured": the CUDA emulator (test_gpu_ops_bf16_emu) under ONEDNN_MAX_CPU_ISA = AVX2, AVX, SSE41
// (the same values on all three). act_t: derived, one bf16 ulp of an element <= 2^-7 max |ref| =
// 7.8e-3 (a hard bound, not a margin: measured 6.5e-3, a one-ulp flip near the max; two ulps fail)
#define TOL_ACT 8e-3
// derived: fp32 sums of exact bf16 products, up to T + hd = 428 terms x ~4 chained stages (the
// attention backward): 4 gamma_428 ~ 1e-4; measured max 1.1e-6 (layernorm mean)
#define TOL_F32 1e-4
// as test_gpu_ops (bf16 products, flash_bf16_error.py); measured on the emulator's flash kernels
// 5.9e-3 forward (3.4x) and 7.1e-3 backward (7x)
#define TOL_BF16_FWD 2e-2
#define TOL_BF16_BWD 5e-2
// The chunked delta rule's bf16 products (deltanet_chunk.cu in this build). Each GEMM rounds both
// operands to bf16 (and W, Kc, Vn, the states are stored as bf16 between kernels: operands too): relative errors e_a, e_b, |e| <= u = 2^-8, uniform over a rounding interval,
// rms sigma = u E[1/m^2]^(1/2) / sqrt(3) = 1.6e-3 (mantissa m uniform in [1, 2)); a product's error
// a b (e_a + e_b) has rms sqrt(2) sigma |a b|, and over a sum of K random-sign products these add
// like the products themselves, so the sum's error is ~sqrt(2) sigma = 2.3e-3 of the sum's size,
// whatever K (the GEMM depth, 64-128 here: the fp32 accumulation adds sqrt(K) 2^-24, nothing). The
// forward chains 4 such stages (A -> W, Kc -> Vn, S -> O), the backward 7 (Vn -> dVn -> dS ->
// dKc -> dRk -> dA -> dK), independent errors adding in quadrature: 4.6e-3 and 6.1e-3 rms of the
// typical element. The check takes max |err| / max |ref| over a tensor, whose tails and
// cancelling sums (dg, dbeta: sums of +- terms) can reach ~3x that: 1.4e-2 -> 2e-2 forward, 1.8e-2
// -> 3e-2 backward. A numpy emulation of the forward with these roundings, on these inputs
// (tests/reference/gdn_chunk_check.py), gives 3.5e-3 to 6.1e-3. Measured (emulator, the 4 shapes
// below): forward <= 6.6e-3, backward <= 6.1e-3.
#define TOL_GDN_BF16_FWD 2e-2
#define TOL_GDN_BF16_BWD 3e-2

// ---- buffers: every allocation of a check is kept and released at its end -------------------
static void* hkeep[256];
static void* dkeep[256];
static int nh, nd;
static void* hold(void* p) { if (nh == 256) { fprintf(stderr, "too many host buffers\n"); exit(1); } return hkeep[nh++] = p; }
static void* dhold(void* p) { if (nd == 256) { fprintf(stderr, "too many device buffers\n"); exit(1); } return dkeep[nd++] = p; }
static void release(void) {
    while (nh) free(hkeep[--nh]);
    while (nd) ops_free(dkeep[--nd]);
}
static char nm[192];
static const char* NM(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); vsnprintf(nm, sizeof nm, fmt, ap); va_end(ap);
    return nm;
}

// host: fp32 arrays; the act_t inputs and the references hold bf16 values
static float* hbuf(size_t n) { return hold(calloc(n ? n : 1, sizeof(float))); }
static int* ibuf(size_t n) { return hold(calloc(n ? n : 1, sizeof(int))); }
static float* hrand(size_t n, double scale) { float* p = hbuf(n); tu_fill(p, n, scale); return p; }
static float* hcopy(const float* x, size_t n) { return memcpy(hbuf(n), x, n * sizeof(float)); }
static void round_bf(float* x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(bf16_from_f32(x[i])); }
static float* hrand_bf(size_t n, double scale) { float* p = hrand(n, scale); round_bf(p, n); return p; }

// device: upload (bf16 values: the conversion is exact), poison, download widened
static void set_act(act_t* d, const float* x, size_t n) {
    act_t* h = malloc((n ? n : 1) * sizeof(act_t));
    for (size_t i = 0; i < n; i++) h[i] = bf16_from_f32(x[i]);
    ops_from_host(d, h, n * sizeof(act_t));
    free(h);
}
static act_t* up_act(const float* x, size_t n) { act_t* d = dhold(ops_malloc(n * sizeof(act_t))); set_act(d, x, n); return d; }
static void set_f32(float* d, const float* x, size_t n) { ops_from_host(d, x, n * sizeof(float)); }
static float* up_f32(const float* x, size_t n) { float* d = dhold(ops_malloc(n * sizeof(float))); set_f32(d, x, n); return d; }
static int* up_int(const int* x, size_t n) { int* d = dhold(ops_malloc(n * sizeof(int))); ops_from_host(d, x, n * sizeof(int)); return d; }
static act_t* poison_act(size_t n) {
    act_t* h = malloc((n ? n : 1) * sizeof(act_t));
    for (size_t i = 0; i < n; i++) h[i] = 0x7fc0;   // bf16 NaN
    act_t* d = dhold(ops_malloc(n * sizeof(act_t)));
    ops_from_host(d, h, n * sizeof(act_t));
    free(h);
    return d;
}
static float* poison_f32(size_t n) {
    float* h = hbuf(n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    return up_f32(h, n);
}
static uint16_t* down_bits(const act_t* d, size_t n) { uint16_t* h = hold(malloc((n ? n : 1) * 2)); ops_to_host(h, d, n * 2); return h; }
static float* down_act(const act_t* d, size_t n) {
    uint16_t* b = down_bits(d, n);
    float* h = hbuf(n);
    for (size_t i = 0; i < n; i++) h[i] = bf16_to_f32(b[i]);
    return h;
}

// ---- comparisons ------------------------------------------------------------------------------
static void check(const char* what, const float* got, const float* ref, size_t n, double tol) {
    double e = tu_rel_err(got, ref, n);
    TU_CHECK(e <= tol, "%s: rel err %.2e > %.0e", what, e, tol);
    printf("  %-66s rel err %.2e (tol %.0e)\n", what, e, tol);
}
static void cmp_act(const char* what, const act_t* d, const float* ref, size_t n, double tol) { check(what, down_act(d, n), ref, n, tol); }
static void cmp_f32(const char* what, const float* d, const float* ref, size_t n, double tol) {
    float* h = hbuf(n);
    ops_to_host(h, d, n * sizeof(float));
    check(what, h, ref, n, tol);
}
// the bf16 bits of d[n] must equal want[n] (a NaN matches any NaN)
static void cmp_bits(const char* what, const act_t* d, const uint16_t* want, size_t n) {
    uint16_t* got = down_bits(d, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i] && !(isnan(bf16_to_f32(got[i])) && isnan(bf16_to_f32(want[i])));
    TU_CHECK(bad == 0, "%s: %zu of %zu values differ from the reference's bits", what, bad, n);
    printf("  %-66s %s\n", what, bad ? "DIFFERENT" : "bitwise equal");
}
static void cmp_exact(const char* what, const act_t* d, const float* ref, size_t n) {
    uint16_t* want = hold(malloc((n ? n : 1) * 2));
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_f32(ref[i]);
    cmp_bits(what, d, want, n);
}
static int rand_int(int n) { return (int)((tu_rand() * 0.5 + 0.5) * n) % n; }

// ---- conversions, accumulate --------------------------------------------------------------------
static float f_of_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static void test_conversions(size_t n) {
    float* x = hrand(n, 4);
    const float special[] = {f_of_bits(0x3f808000u), f_of_bits(0x3f818000u), -f_of_bits(0x3f818000u), -0.0f,
                             INFINITY, -INFINITY, 3.4e38f, 1e-39f, NAN};   // ties, inf, overflow, subnormal, NaN
    memcpy(x, special, sizeof special);
    uint16_t* want = hold(malloc(n * 2));
    float* d_x = up_f32(x, n);
    act_t* d_a = poison_act(n);
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_f32(x[i]);
    ops_act_from_float(d_a, d_x, n);
    cmp_bits(NM("act_from_float n=%zu (ties, inf, overflow, subnormal, NaN)", n), d_a, want, n);
    const unsigned long long seeds[2] = {1, 0x9e3779b97f4a7c15ull};
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < n; i++) want[i] = bf16_from_f32_sr(x[i], bf16_sr_bits(seeds[s], i));
        ops_weights_to_act(d_a, d_x, n, seeds[s]);
        cmp_bits(NM("weights_to_act (stochastic rounding) seed %#llx", seeds[s]), d_a, want, n);
    }
    // ZeRO-1's shard rounding (ops_weights_to_act_at): a range [at, n) rounded with its global
    // indices, the bits of the whole copy above (at not a multiple of the block size)
    const size_t at = n / 3 + 1;
    act_t* d_s = poison_act(n);
    ops_weights_to_act_at(d_s + at, d_x + at, at, n - at, seeds[1]);
    uint16_t* got_s = hold(malloc(n * 2));
    ops_to_host(got_s, d_s, n * sizeof(act_t));
    size_t bad_s = 0;
    for (size_t i = at; i < n; i++) bad_s += got_s[i] != want[i];
    TU_CHECK(bad_s == 0, "weights_to_act_at n=%zu from %zu: %zu of %zu elements differ from the whole copy's rounding",
             n, at, bad_s, n - at);
    // the way back, act -> fp32 (exact): every bf16 pattern (i * 40503 mod 2^16 is a bijection
    // over 65536 consecutive i): zeros, subnormals, inf, NaN
    uint16_t* bits = hold(malloc(n * 2));
    for (size_t i = 0; i < n; i++) bits[i] = (uint16_t)(i * 40503u);
    act_t* d_b = dhold(ops_malloc(n * sizeof(act_t)));
    ops_from_host(d_b, bits, n * sizeof(act_t));
    float* d_f = poison_f32(n);
    ops_float_from_act(d_f, d_b, n);
    float* got = hbuf(n);
    ops_to_host(got, d_f, n * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = bf16_to_f32(bits[i]);
        bad += memcmp(&got[i], &want, sizeof want) != 0 && !(isnan(got[i]) && isnan(want));
    }
    TU_CHECK(bad == 0, "float_from_act: %zu of %zu values differ from bf16_to_f32", bad, n);
    printf("  %-66s %s\n", NM("float_from_act n=%zu (every bf16 bit pattern)", n), bad ? "DIFFERENT" : "bitwise equal");
    float *y = hrand_bf(n, 1), *a = hrand_bf(n, 1);
    act_t *d_y = up_act(y, n), *d_x2 = up_act(a, n);
    for (size_t i = 0; i < n; i++) y[i] += a[i];
    round_bf(y, n);
    ops_accumulate(d_y, d_x2, n);
    cmp_exact("accumulate (+=)", d_y, y, n);
    release();
}

// ---- GEMMs ---------------------------------------------------------------------------------------
static void test_matmul(int N, int C, int OC) {
    const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
    float *inp = hrand_bf(nI, 1), *w = hrand_bf(nW, 1), *dout = hrand_bf(nO, 1), *out0 = hrand(nO, 1), *dw0 = hrand(nW, 1);
    act_t *d_inp = up_act(inp, nI), *d_w = up_act(w, nW), *d_dout = up_act(dout, nO), *d_out = poison_act(nO);
    float* ref = hbuf(nO);
    ref_ops_matmul_forward(ref, inp, w, N, C, OC);
    round_bf(ref, nO);
    ops_matmul_forward(d_out, d_inp, d_w, N, C, OC);
    cmp_act(NM("matmul forward N=%d C=%d OC=%d", N, C, OC), d_out, ref, nO, TOL_ACT);
    for (int acc = 0; acc <= 1; acc++) {   // into fp32: = (the router's logits) and += (the residual)
        float *r32 = hcopy(out0, nO), *d_o32 = acc ? up_f32(out0, nO) : poison_f32(nO);
        ref_ops_matmul_forward_f32(r32, inp, w, N, C, OC, acc);
        ops_matmul_forward_f32(d_o32, d_inp, d_w, N, C, OC, acc);
        cmp_f32(acc ? "matmul forward f32 +=" : "matmul forward f32 =", d_o32, r32, nO, TOL_F32);
    }
    float *rdinp = hbuf(nI), *rdw = hcopy(dw0, nW), *d_dw = up_f32(dw0, nW);
    act_t* d_dinp = poison_act(nI);
    ref_ops_matmul_backward(rdinp, rdw, dout, inp, w, N, C, OC);
    round_bf(rdinp, nI);
    ops_matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC);
    cmp_act("matmul backward dinp", d_dinp, rdinp, nI, TOL_ACT);
    cmp_f32("matmul backward dw (+=, fp32)", d_dw, rdw, nW, TOL_F32);
    ref_ops_matmul_backward(NULL, rdw, dout, inp, w, N, C, OC);
    ops_matmul_backward(NULL, d_dw, d_dout, d_inp, d_w, N, C, OC);
    cmp_f32("matmul backward dw only (dinp NULL), accumulated twice", d_dw, rdw, nW, TOL_F32);
    release();
}

// the linear biases: the GEMM with its bf16 bias rounded once from the fp32 sum; the residual
// stream's bias add (fp32); the bias gradient from bf16 dout (fp32, other summation order)
static void test_matmul_bias(int N, int C, int OC) {
    const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
    float *inp = hrand_bf(nI, 1), *w = hrand_bf(nW, 1), *b = hrand_bf(OC, 1), *dout = hrand_bf(nO, 1);
    float *out0 = hrand(nO, 1), *db0 = hrand(OC, 1);
    act_t *d_inp = up_act(inp, nI), *d_w = up_act(w, nW), *d_b = up_act(b, OC), *d_out = poison_act(nO);
    float* ref = hbuf(nO);
    ref_ops_matmul_bias_forward(ref, inp, w, b, N, C, OC);
    round_bf(ref, nO);
    ops_matmul_bias_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    cmp_act(NM("matmul + bias forward N=%d C=%d OC=%d", N, C, OC), d_out, ref, nO, TOL_ACT);
    float *r32 = hcopy(out0, nO), *d_o32 = up_f32(out0, nO);
    ref_ops_bias_add_f32(r32, b, N, OC);
    ops_bias_add_f32(d_o32, d_b, N, OC);
    cmp_f32("bias add f32 (+=)", d_o32, r32, nO, TOL_F32);
    float *rdb = hcopy(db0, OC), *d_db = up_f32(db0, OC);
    act_t* d_dout = up_act(dout, nO);
    ref_ops_bias_backward(rdb, dout, N, OC);
    ops_bias_backward(d_db, d_dout, N, OC);
    cmp_f32("bias backward db (+=, fp32)", d_db, rdb, OC, TOL_F32);
    release();
}

// forward: pre and act both rounded from the fp32 product; backward of the next GEMM (act [N, OC]
// -> [N, C]) through the GELU
static void test_matmul_gelu(int N, int C, int OC) {
    const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
    float *inp = hrand_bf(nI, 1), *w = hrand_bf(nW, 0.2), *rpre = hbuf(nO), *ract = hbuf(nO);
    ref_ops_matmul_gelu_forward(rpre, ract, inp, w, N, C, OC);
    round_bf(rpre, nO); round_bf(ract, nO);
    act_t *d_pre = poison_act(nO), *d_act = poison_act(nO);
    ops_matmul_gelu_forward(d_pre, d_act, up_act(inp, nI), up_act(w, nW), N, C, OC);
    cmp_act(NM("matmul + gelu forward N=%d C=%d OC=%d: pre", N, C, OC), d_pre, rpre, nO, TOL_ACT);
    cmp_act("matmul + gelu forward: act", d_act, ract, nO, TOL_ACT);
    float *dout = hrand_bf(nI, 1), *w2 = hrand_bf(nW, 0.2), *dw0 = hrand(nW, 1), *rdpre = hbuf(nO), *rdw = hcopy(dw0, nW);
    ref_ops_matmul_backward_gelu(rdpre, rdw, dout, ract, w2, rpre, N, OC, C);
    round_bf(rdpre, nO);
    act_t* d_dpre = poison_act(nO);
    float* d_dw = up_f32(dw0, nW);
    ops_matmul_backward_gelu(d_dpre, d_dw, up_act(dout, nI), up_act(ract, nO), up_act(w2, nW), up_act(rpre, nO), N, OC, C);
    cmp_act("matmul backward through gelu: dpre", d_dpre, rdpre, nO, TOL_ACT);
    cmp_f32("matmul backward through gelu: dw (+=, fp32)", d_dw, rdw, nW, TOL_F32);
    release();
}

// ---- norms (fp32 input: the residual stream; act_t out; act_t dout) -------------------------------
static void test_norm(OpsNormKind kind, int N, int C) {
    const int ln = kind == OPS_LAYERNORM;
    const char* kn = ln ? "layernorm" : "rmsnorm";
    const size_t n = (size_t)N * C;
    float* inp = hrand(n, 2);
    for (size_t i = 0; i < n; i++) inp[i] += 0.5f;   // a non-zero mean
    float *w = hrand(C, 1), *b = ln ? hrand(C, 1) : NULL, *dout = hrand_bf(n, 1);
    float *dinp0 = hrand(n, 1), *dw0 = hrand(C, 1), *db0 = hrand(C, 1);
    float *rout = hbuf(n), *rmean = hbuf(N), *rrstd = hbuf(N);
    ref_ops_norm_forward(rout, ln ? rmean : NULL, rrstd, inp, w, b, N, C, 1e-5f, kind);
    round_bf(rout, n);
    float *d_inp = up_f32(inp, n), *d_w = up_f32(w, C), *d_b = ln ? up_f32(b, C) : NULL, *d_mean = poison_f32(N), *d_rstd = poison_f32(N);
    act_t* d_out = poison_act(n);
    ops_norm_forward(d_out, ln ? d_mean : NULL, d_rstd, d_inp, d_w, d_b, N, C, 1e-5f, kind);
    cmp_act(NM("%s forward N=%d C=%d out", kn, N, C), d_out, rout, n, TOL_ACT);
    cmp_f32(NM("%s forward rstd", kn), d_rstd, rrstd, N, TOL_F32);
    if (ln) cmp_f32(NM("%s forward mean", kn), d_mean, rmean, N, TOL_F32);
    float *rdinp = hcopy(dinp0, n), *rdw = hcopy(dw0, C), *rdb = hcopy(db0, C);
    ref_ops_norm_backward(rdinp, rdw, ln ? rdb : NULL, dout, inp, w, ln ? rmean : NULL, rrstd, N, C, kind);
    float *d_dinp = up_f32(dinp0, n), *d_dw = up_f32(dw0, C), *d_db = up_f32(db0, C);
    ops_norm_backward(d_dinp, d_dw, ln ? d_db : NULL, up_act(dout, n), d_inp, d_w, ln ? up_f32(rmean, N) : NULL,
                      up_f32(rrstd, N), N, C, kind);
    cmp_f32(NM("%s backward dinp (+=, fp32)", kn), d_dinp, rdinp, n, TOL_F32);
    cmp_f32(NM("%s backward dw (+=)", kn), d_dw, rdw, C, TOL_F32);
    if (ln) cmp_f32(NM("%s backward db (+=)", kn), d_db, rdb, C, TOL_F32);
    release();
}

// ---- attention ----------------------------------------------------------------------------------
static const char* gate_name[] = {"none", "elementwise", "headwise"};
static const char* act_name[] = {"sigmoid", "ns_sigmoid", "silu"};
static OpsAttnImpl att_impl = OPS_ATTN_FUSED;

// prep forward, attention forward, attention backward, prep backward, then the probes
static void test_attention(int B, int T, int H, int Hkv, int hd, int qk_norm, int rope, OpsGate gate,
                           OpsGatePos pos, OpsGateAct act) {
    const int fused = att_impl == OPS_ATTN_FUSED;
    const double tf = fused ? TOL_ACT : TOL_BF16_FWD, tl = fused ? TOL_F32 : TOL_BF16_FWD, tb = fused ? TOL_ACT : TOL_BF16_BWD;
    OpsAttnShape s = {0};
    s.impl = att_impl; s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.qk_norm = qk_norm; s.rope = rope;
    s.rope_base = 10000.0f; s.eps = 1e-5f; s.gate = gate; s.gate_pos = pos; s.gate_act = act;
    const size_t N = (size_t)B * T, QKVG = ops_attn_qkv_cols(&s), Hd = (size_t)H * hd, KVd = (size_t)Hkv * hd, R = H + Hkv;
    const int sgate = gate != OPS_GATE_NONE && pos == OPS_GATEPOS_SDPA;
    printf(" attn%s B=%d T=%d H=%d/%d hd=%d qkn=%d rope=%d %s@%s/%s\n",
           att_impl == OPS_ATTN_CUDNN ? " (cuDNN)" : att_impl == OPS_ATTN_FLASH ? " (flash)" : "", B, T, H, Hkv, hd,
           qk_norm, rope, gate_name[gate], pos == OPS_GATEPOS_SDPA ? "sdpa" : "value", act_name[act]);
    float *qkv = hrand_bf(N * QKVG, 1), *qw = hrand(hd, 0.3), *kw = hrand(hd, 0.3), *dyg = hrand_bf(N * Hd, 1);
    for (int i = 0; i < hd; i++) { qw[i] += 1.0f; kw[i] += 1.0f; }
    float *dqw0 = hrand(hd, 1), *dkw0 = hrand(hd, 1);
    // the reference, op by op, its act_t outputs rounded as the bf16 build stores them
    float *rq = hbuf(N * Hd), *rk = hbuf(N * KVd), *rv = hbuf(N * KVd), *rrstd = hbuf(N * R);
    ref_ops_attn_prep_forward(rq, rk, rv, rrstd, qkv, qw, kw, &s);
    round_bf(rq, N * Hd); round_bf(rk, N * KVd); round_bf(rv, N * KVd);
    float *ry = hbuf(N * Hd), *ryg = sgate ? hbuf(N * Hd) : ry, *rlse = hbuf(N * H);
    ref_ops_attention_forward(ry, ryg, rlse, rq, rk, rv, qkv, &s);
    round_bf(ry, N * Hd);
    if (sgate) round_bf(ryg, N * Hd);   // from the unrounded y, as the GPU epilogues
    float *rdq = hbuf(N * Hd), *rdk = hbuf(N * KVd), *rdv = hbuf(N * KVd), *rdqkv = hbuf(N * QKVG);
    ref_ops_attention_backward(rdq, rdk, rdv, rdqkv, hbuf(N * Hd), dyg, rq, rk, rv, ry, rlse, qkv, &s);
    round_bf(rdq, N * Hd); round_bf(rdk, N * KVd); round_bf(rdv, N * KVd); round_bf(rdqkv, N * QKVG);
    float *rdqw = hcopy(dqw0, hd), *rdkw = hcopy(dkw0, hd);
    ref_ops_attn_prep_backward(rdqkv, rdqw, rdkw, rdq, rdk, rdv, qkv, rrstd, qw, kw, &s);
    round_bf(rdqkv, N * QKVG);

    // GPU, each stage from the reference's inputs to it
    act_t *d_qkv = up_act(qkv, N * QKVG), *d_q = poison_act(N * Hd), *d_k = poison_act(N * KVd), *d_v = poison_act(N * KVd);
    float *d_qw = up_f32(qw, hd), *d_kw = up_f32(kw, hd), *d_rstd = poison_f32(N * R);
    ops_attn_prep_forward(d_q, d_k, d_v, d_rstd, d_qkv, d_qw, d_kw, &s);
    cmp_act("  prep forward q", d_q, rq, N * Hd, TOL_ACT);
    cmp_act("  prep forward k", d_k, rk, N * KVd, TOL_ACT);
    cmp_act("  prep forward v", d_v, rv, N * KVd, TOL_ACT);
    if (qk_norm) cmp_f32("  prep forward qk_rstd (fp32)", d_rstd, rrstd, N * R, TOL_F32);
    set_act(d_q, rq, N * Hd); set_act(d_k, rk, N * KVd); set_act(d_v, rv, N * KVd);
    act_t *d_y = poison_act(N * Hd), *d_yg = sgate ? poison_act(N * Hd) : d_y;
    float* d_lse = poison_f32(N * H);
    ops_attention_forward(d_y, d_yg, d_lse, d_q, d_k, d_v, d_qkv, &s);
    cmp_act("  attention forward y", d_y, ry, N * Hd, tf);
    if (sgate) cmp_act("  attention forward yg (gated)", d_yg, ryg, N * Hd, tf);
    cmp_f32("  attention forward lse (fp32)", d_lse, rlse, N * H, tl);
    set_act(d_y, ry, N * Hd); set_f32(d_lse, rlse, N * H);
    act_t *d_dq = poison_act(N * Hd), *d_dk = poison_act(N * KVd), *d_dv = poison_act(N * KVd), *d_dqkv = poison_act(N * QKVG);
    ops_attention_backward(d_dq, d_dk, d_dv, d_dqkv, poison_act(N * Hd), up_act(dyg, N * Hd), d_q, d_k, d_v, d_y,
                           d_lse, d_qkv, &s);
    cmp_act("  attention backward dq", d_dq, rdq, N * Hd, tb);
    cmp_act("  attention backward dk", d_dk, rdk, N * KVd, tb);
    cmp_act("  attention backward dv", d_dv, rdv, N * KVd, tb);
    set_act(d_dq, rdq, N * Hd); set_act(d_dk, rdk, N * KVd); set_act(d_dv, rdv, N * KVd);
    float *d_dqw = up_f32(dqw0, hd), *d_dkw = up_f32(dkw0, hd);
    ops_attn_prep_backward(d_dqkv, d_dqw, d_dkw, d_dq, d_dk, d_dv, d_qkv, up_f32(rrstd, N * R), d_qw, d_kw, &s);
    // q/k/v (and value-gate) columns from prep backward, sdpa-gate columns from attention backward
    cmp_act("  dqkv (attention + prep backward, every column)", d_dqkv, rdqkv, N * QKVG, TOL_ACT);
    if (qk_norm) {
        cmp_f32("  prep backward q_norm.w (+=, fp32)", d_dqw, rdqw, hd, TOL_F32);
        cmp_f32("  prep backward k_norm.w (+=, fp32)", d_dkw, rdkw, hd, TOL_F32);
    }
    // probes on the same q, k, lse, qkv
    float *rmean = hbuf(H), *gmean = hbuf(H);
    ref_ops_attn_first_token(rmean, rq, rk, rlse, &s);
    ops_attn_first_token(gmean, d_q, d_k, d_lse, &s);
    check("  probe: first-token attention per head (fp32)", gmean, rmean, H, TOL_F32);
    float *rlmax = hbuf(H), *glmax = hbuf(H);
    ref_ops_attn_logit_max(rlmax, rq, rk, &s);
    ops_attn_logit_max(glmax, d_q, d_k, &s);
    check("  probe: attention logit max per head (fp32)", glmax, rlmax, H, TOL_F32);
    if (gate != OPS_GATE_NONE) {
        double rs, gs;
        long rc, gc, rh[10], gh[10], moves = 0;
        ref_ops_gate_stats(qkv, &s, &rs, &rc, rh);
        ops_gate_stats(d_qkv, &s, &gs, &gc, gh);
        for (int i = 0; i < 10; i++) moves += labs(rh[i] - gh[i]);
        double se = fabs(gs - rs) / fabs(rs);
        // as test_gpu_ops: the sum derived (~4u = 2.4e-7 < 1e-6), 2 scores on a bin edge may move;
        // measured 8.2e-11 and 0 moves
        TU_CHECK(gc == rc && se <= 1e-6 && moves <= 4, "gate stats: count %ld/%ld, sum rel err %.2e, histogram moves %ld",
                 gc, rc, se, moves);
        printf("  %-66s sum rel err %.2e, histogram moves %ld\n", "  probe: gate statistics", se, moves);
    }
    release();
}

// ---- RoPE positions and scalings, the KV cache ------------------------------------------------
static const char* rope_kind_name[] = {"none", "linear", "ntk", "yarn"};
// factor 4 over a training length of 8 (the positions tested run past it), YaRN's betas at
// transformers' defaults; attn_factor 0 = YaRN's default 0.1 ln(s) + 1
static OpsRope rope_scaling(OpsRopeScaling kind, float attn_factor) {
    OpsRope r = {0};
    r.kind = kind; r.factor = 4.0f; r.orig_len = 8; r.beta_fast = 32.0f; r.beta_slow = 1.0f;
    r.attn_factor = attn_factor;
    return r;
}

// prep forward and backward at positions pos0 .. pos0 + T - 1 with a scaling (the value gate:
// prep backward writes every column); called so that one thing changes at a time (pos0, kind,
// attn_factor), which catches a RoPE table cached under too short a key
static void test_prep_rope(OpsRopeScaling kind, float attn_factor, int pos0, int rope_dim) {
    const int B = 2, T = 12, H = 4, Hkv = 2, hd = 64;
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.qk_norm = 1; s.rope = 1; s.rope_base = 10000.0f;
    s.rope_scale = rope_scaling(kind, attn_factor); s.pos0 = pos0; s.eps = 1e-5f;
    s.rope_dim = rope_dim;   // partial RoPE: the first rope_dim channels turn (0 = all)
    s.gate = OPS_GATE_ELEMENTWISE; s.gate_pos = OPS_GATEPOS_VALUE; s.gate_act = OPS_ACT_SIGMOID;
    const size_t N = (size_t)B * T, QKVG = ops_attn_qkv_cols(&s), Hd = (size_t)H * hd, KVd = (size_t)Hkv * hd, R = H + Hkv;
    printf(" prep with RoPE %s (factor 4, orig_len 8, attn_factor %g) pos0=%d B=%d T=%d H=%d/%d hd=%d rope_dim=%d\n",
           rope_kind_name[kind], attn_factor, pos0, B, T, H, Hkv, hd, rope_dim ? rope_dim : hd);
    float *qkv = hrand_bf(N * QKVG, 1), *qw = hrand(hd, 0.3), *kw = hrand(hd, 0.3);
    for (int i = 0; i < hd; i++) { qw[i] += 1.0f; kw[i] += 1.0f; }
    float *dq = hrand_bf(N * Hd, 1), *dk = hrand_bf(N * KVd, 1), *dv = hrand_bf(N * KVd, 1), *dqw0 = hrand(hd, 1), *dkw0 = hrand(hd, 1);
    float *rq = hbuf(N * Hd), *rk = hbuf(N * KVd), *rv = hbuf(N * KVd), *rrstd = hbuf(N * R);
    float *rdqkv = hbuf(N * QKVG), *rdqw = hcopy(dqw0, hd), *rdkw = hcopy(dkw0, hd);
    ref_ops_attn_prep_forward(rq, rk, rv, rrstd, qkv, qw, kw, &s);
    ref_ops_attn_prep_backward(rdqkv, rdqw, rdkw, dq, dk, dv, qkv, rrstd, qw, kw, &s);
    round_bf(rq, N * Hd); round_bf(rk, N * KVd); round_bf(rv, N * KVd); round_bf(rdqkv, N * QKVG);
    act_t *d_qkv = up_act(qkv, N * QKVG), *d_q = poison_act(N * Hd), *d_k = poison_act(N * KVd), *d_v = poison_act(N * KVd);
    float *d_qw = up_f32(qw, hd), *d_kw = up_f32(kw, hd);
    ops_attn_prep_forward(d_q, d_k, d_v, poison_f32(N * R), d_qkv, d_qw, d_kw, &s);
    // act_t outputs: one rounding of the same fp32 value (TOL_ACT); the weight gradients: fp32
    // sums of the same products (TOL_F32); measured max 3.3e-4 (a one-ulp flip) and 2.4e-7
    cmp_act("  prep forward q", d_q, rq, N * Hd, TOL_ACT);
    cmp_act("  prep forward k", d_k, rk, N * KVd, TOL_ACT);
    cmp_act("  prep forward v (value gate)", d_v, rv, N * KVd, TOL_ACT);
    act_t* d_dqkv = poison_act(N * QKVG);
    float *d_dqw = up_f32(dqw0, hd), *d_dkw = up_f32(dkw0, hd);
    ops_attn_prep_backward(d_dqkv, d_dqw, d_dkw, up_act(dq, N * Hd), up_act(dk, N * KVd), up_act(dv, N * KVd), d_qkv,
                           up_f32(rrstd, N * R), d_qw, d_kw, &s);
    cmp_act("  prep backward dqkv (every column)", d_dqkv, rdqkv, N * QKVG, TOL_ACT);
    cmp_f32("  prep backward q_norm.w (+=, fp32)", d_dqw, rdqw, hd, TOL_F32);
    cmp_f32("  prep backward k_norm.w (+=, fp32)", d_dkw, rdkw, hd, TOL_F32);
    release();
}

// ops_rope_rows both ways against the reference (TOL_ACT); forward then inverse on the GPU gives
// the input back within two roundings (derived): the forward's outputs, |a c - b s| <= sqrt(2) m
// max|x|, are rounded by <= 2^-9 of that each, a pair's error vector (norm <= 2 * 2^-9 m max|x|)
// is rotated back and divided by m, then rounded once more (<= 2^-9 max|x|): <= 3 * 2^-9 =
// 5.9e-3 of max|x| < TOL_ACT; measured 3.97e-3 on the emulator
static void test_rope_rows(OpsRopeScaling kind, int n_rows, int n_heads, int hd, int pos0, int rope_dim) {
    OpsAttnShape s = {0};
    s.hd = hd; s.rope = 1; s.rope_base = 10000.0f; s.rope_scale = rope_scaling(kind, 0.0f); s.rope_dim = rope_dim;
    const size_t n = (size_t)n_rows * n_heads * hd;
    float* x = hrand_bf(n, 1);
    act_t* d_x = up_act(x, n);
    for (int dir = 1; dir >= -1; dir -= 2) {
        float* ref = hcopy(x, n);
        ref_ops_rope_rows(ref, n_rows, n_heads, pos0, dir, &s);
        round_bf(ref, n);
        set_act(d_x, x, n);
        ops_rope_rows(d_x, n_rows, n_heads, pos0, dir, &s);
        cmp_act(NM("rope rows %s %s n_rows=%d heads=%d hd=%d pos0=%d", rope_kind_name[kind], dir > 0 ? "forward" : "inverse",
                   n_rows, n_heads, hd, pos0), d_x, ref, n, TOL_ACT);
    }
    set_act(d_x, x, n);
    ops_rope_rows(d_x, n_rows, n_heads, pos0, 1, &s);
    ops_rope_rows(d_x, n_rows, n_heads, pos0, -1, &s);
    cmp_act("  forward then inverse = the input", d_x, x, n, TOL_ACT);
    release();
}

// ops_kv_cache_write: bits moved, every other slot keeps its bits (exact)
static void test_kv_cache_write(int B, int T, int Tc, int Hkv, int hd, int slot0) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = Hkv; s.Hkv = Hkv; s.hd = hd;
    const size_t nn = (size_t)B * T * Hkv * hd, nc = (size_t)B * Tc * Hkv * hd;
    float *k = hrand_bf(nn, 1), *v = hrand_bf(nn, 1), *kc = hrand_bf(nc, 1), *vc = hrand_bf(nc, 1);
    act_t *d_kc = up_act(kc, nc), *d_vc = up_act(vc, nc);
    ref_ops_kv_cache_write(kc, vc, k, v, slot0, Tc, &s);
    ops_kv_cache_write(d_kc, d_vc, up_act(k, nn), up_act(v, nn), slot0, Tc, &s);
    cmp_exact(NM("kv cache write B=%d T=%d Tc=%d Hkv=%d hd=%d slot0=%d: kc", B, T, Tc, Hkv, hd, slot0), d_kc, kc, nc);
    cmp_exact("  vc", d_vc, vc, nc);
    release();
}

// ops_attention_cached_forward: T new queries over the first n_ctx of Tc cache slots; the slots
// past n_ctx hold NaN on both sides (reading one fails). y, yg: one rounding of fp32 values
// (TOL_ACT); lse, sink: fp32 sums of exact bf16 products (TOL_F32, as the attention lse);
// measured max 1.9e-6 (y) and 1.7e-7 (lse, sink) on the emulator
static void test_attention_cached(int B, int T, int n_ctx, int Tc, int H, int Hkv, int hd, OpsGate gate,
                                  OpsGatePos pos, int n_sink, int with_sink) {
    OpsAttnShape s = {0};
    s.B = B; s.T = T; s.H = H; s.Hkv = Hkv; s.hd = hd; s.rope = 1; s.rope_base = 10000.0f; s.eps = 1e-5f;
    s.gate = gate; s.gate_pos = pos; s.gate_act = OPS_ACT_SIGMOID;
    const size_t N = (size_t)B * T, QKVG = ops_attn_qkv_cols(&s), Hd = (size_t)H * hd, KVd = (size_t)Hkv * hd;
    const size_t nc = (size_t)B * Tc * KVd;
    const int sgate = gate != OPS_GATE_NONE && pos == OPS_GATEPOS_SDPA, sep = gate != OPS_GATE_NONE;
    printf(" cached attention B=%d T=%d n_ctx=%d Tc=%d H=%d/%d hd=%d %s@%s n_sink=%d%s\n", B, T, n_ctx, Tc, H, Hkv,
           hd, gate_name[gate], pos == OPS_GATEPOS_SDPA ? "sdpa" : "value", n_sink, with_sink ? "" : " (sink NULL)");
    float *q = hrand_bf(N * Hd, 1), *qkv = hrand_bf(N * QKVG, 1), *kc = hrand_bf(nc, 1), *vc = hrand_bf(nc, 1);
    for (int b = 0; b < B; b++)
        for (size_t i = (size_t)n_ctx * KVd; i < (size_t)Tc * KVd; i++) kc[(size_t)b * Tc * KVd + i] = vc[(size_t)b * Tc * KVd + i] = NAN;
    float *ry = hbuf(N * Hd), *ryg = sep ? hbuf(N * Hd) : ry, *rlse = hbuf(N * H), *rsink = with_sink ? hbuf(N * H) : NULL;
    ref_ops_attention_cached_forward(ry, ryg, rlse, rsink, q, kc, vc, qkv, n_ctx, Tc, n_sink, &s);
    round_bf(ry, N * Hd);
    if (sep) round_bf(ryg, N * Hd);   // from the unrounded y, as the GPU's epilogue
    act_t *d_y = poison_act(N * Hd), *d_yg = sep ? poison_act(N * Hd) : d_y;
    float *d_lse = poison_f32(N * H), *d_sink = with_sink ? poison_f32(N * H) : NULL;
    ops_attention_cached_forward(d_y, d_yg, d_lse, d_sink, up_act(q, N * Hd), up_act(kc, nc), up_act(vc, nc),
                                 up_act(qkv, N * QKVG), n_ctx, Tc, n_sink, &s);
    cmp_act("  y", d_y, ry, N * Hd, TOL_ACT);
    if (sep) cmp_act(sgate ? "  yg (gated)" : "  yg (a copy of y)", d_yg, ryg, N * Hd, TOL_ACT);
    cmp_f32("  lse (fp32)", d_lse, rlse, N * H, TOL_F32);
    if (with_sink) cmp_f32("  sink (fp32: probability on slots < n_sink)", d_sink, rsink, N * H, TOL_F32);
    release();
}

// ---- MLP activations, cross-entropy -------------------------------------------------------------
static void test_activations(int N, int F) {
    const size_t n = (size_t)N * F;
    float *gu = hrand_bf(2 * n, 3), *dh = hrand_bf(n, 1), *rh = hbuf(n), *rdgu = hbuf(2 * n), *rg = hbuf(n), *rdg = hbuf(n);
    ref_ops_swiglu_forward(rh, gu, N, F);
    ref_ops_swiglu_backward(rdgu, dh, gu, N, F);
    ref_ops_gelu_forward(rg, gu, n);
    ref_ops_gelu_backward(rdg, dh, gu, n);
    round_bf(rh, n); round_bf(rdgu, 2 * n); round_bf(rg, n); round_bf(rdg, n);
    act_t *d_gu = up_act(gu, 2 * n), *d_dh = up_act(dh, n), *d_h = poison_act(n), *d_dgu = poison_act(2 * n);
    act_t *d_g = poison_act(n), *d_dg = poison_act(n);
    ops_swiglu_forward(d_h, d_gu, N, F);
    ops_swiglu_backward(d_dgu, d_dh, d_gu, N, F);
    ops_gelu_forward(d_g, d_gu, n);
    ops_gelu_backward(d_dg, d_dh, d_gu, n);
    cmp_act(NM("swiglu forward N=%d F=%d", N, F), d_h, rh, n, TOL_ACT);
    cmp_act("swiglu backward", d_dgu, rdgu, 2 * n, TOL_ACT);
    cmp_act(NM("gelu forward n=%zu", n), d_g, rg, n, TOL_ACT);
    cmp_act("gelu backward", d_dg, rdg, n, TOL_ACT);
    release();
}

static void test_xent(int N, int V, int Vp) {
    const size_t n = (size_t)N * Vp;
    float* logits = hrand(n, 3);
    for (int r = 0; r < N; r++) for (int i = V; i < Vp; i++) logits[(size_t)r * Vp + i] = 100.0f;   // padding must not leak
    round_bf(logits, n);
    int* tg = ibuf(N);
    for (int r = 0; r < N; r++) tg[r] = rand_int(V);
    tg[0] = V - 1;
    float *rloss = hbuf(N), *rlse = hbuf(N), *rd = hbuf(n);
    ref_ops_xent_forward(rloss, rlse, logits, tg, N, V, Vp);
    ref_ops_xent_backward(rd, logits, rlse, tg, 0.25f, N, V, Vp);
    round_bf(rd, n);
    act_t *d_logits = up_act(logits, n), *d_d = poison_act(n);
    float *d_loss = poison_f32(N), *d_lse = poison_f32(N);
    int* d_tg = up_int(tg, N);
    ops_xent_forward(d_loss, d_lse, d_logits, d_tg, N, V, Vp);
    cmp_f32(NM("cross-entropy forward N=%d V=%d Vp=%d losses (fp32)", N, V, Vp), d_loss, rloss, N, TOL_F32);
    cmp_f32("cross-entropy forward lse (fp32)", d_lse, rlse, N, TOL_F32);
    set_f32(d_lse, rlse, N);
    ops_xent_backward(d_d, d_logits, d_lse, d_tg, 0.25f, N, V, Vp);
    cmp_act("cross-entropy backward dlogits", d_d, rd, n, TOL_ACT);
    ops_xent_backward(d_logits, d_logits, d_lse, d_tg, 0.25f, N, V, Vp);   // in place, as the model does
    cmp_act("cross-entropy backward in place (dlogits aliases logits)", d_logits, rd, n, TOL_ACT);
    uint16_t* h = down_bits(d_d, n);
    int padzero = 1;
    for (int r = 0; r < N; r++) for (int i = V; i < Vp; i++) if (bf16_to_f32(h[(size_t)r * Vp + i]) != 0.0f) padzero = 0;
    TU_CHECK(padzero, "cross-entropy: padded columns have a non-zero gradient");
    // the training forward's op, in place as the model calls it, against the CPU's fp32 one
    ref_ops_xent_forward_backward(rloss, rlse, rd, logits, tg, 0.25f, N, V, Vp);
    round_bf(rd, n);
    act_t* d_l2 = up_act(logits, n);
    d_loss = poison_f32(N); d_lse = poison_f32(N);
    ops_xent_forward_backward(d_loss, d_lse, d_l2, d_l2, d_tg, 0.25f, N, V, Vp);
    cmp_f32("cross-entropy forward_backward losses (fp32)", d_loss, rloss, N, TOL_F32);
    cmp_f32("cross-entropy forward_backward lse (fp32)", d_lse, rlse, N, TOL_F32);
    cmp_act("cross-entropy forward_backward dlogits (in place)", d_l2, rd, n, TOL_ACT);
    release();
}

// ---- MoE: the plan from the CPU router (fp32, not act_t: test_gpu_ops checks it), then the act_t
// ops on it ---------------------------------------------------------------------------------------
static void test_moe(int N, int E, int k, int capacity, int C) {
    const int S = N * k;
    float *logits = hrand((size_t)N * E, 2), *probs = hbuf((size_t)N * E), *tw = hbuf(S), *lse = hbuf(N);
    int *idx = ibuf(S), *cnt = ibuf(E), *off = ibuf(E + 1), *rs = ibuf(S), *sr = ibuf(S);
    ref_ops_moe_router_forward(probs, idx, tw, lse, logits, N, E, k, OPS_ROUTER_SOFTMAX);
    ref_ops_moe_dispatch_plan(cnt, off, rs, sr, idx, N, E, k, capacity);
    const int R = off[E];
    const size_t nx = (size_t)N * C, np = (size_t)R * C;
    printf(" MoE N=%d E=%d k=%d capacity %d: %d of %d slots kept, C=%d\n", N, E, k, capacity, R, S, C);
    int *d_rs = up_int(rs, S), *d_sr = up_int(sr, S);
    float* d_tw = up_f32(tw, S);
    float *x = hrand_bf(nx, 1), *xp = hbuf(np);
    ref_ops_moe_gather(xp, x, rs, R, k, C);
    act_t* d_xp = poison_act(np);
    ops_moe_gather(d_xp, up_act(x, nx), d_rs, R, k, C);
    cmp_exact("  gather (bits moved)", d_xp, xp, np);
    float *dxp = hrand_bf(np, 1), *dx = hrand_bf(nx, 1);
    act_t* d_dx = up_act(dx, nx);
    ref_ops_moe_gather_backward(dx, dxp, sr, N, k, C);
    round_bf(dx, nx);
    ops_moe_gather_backward(d_dx, up_act(dxp, np), d_sr, N, k, C);
    cmp_exact("  gather backward (+=: same additions, one rounding)", d_dx, dx, nx);
    float *yp = hrand_bf(np, 1), *out = hrand(nx, 1), *d_out = up_f32(out, nx);
    act_t* d_yp = up_act(yp, np);
    ref_ops_moe_combine(out, yp, tw, sr, N, k, C);
    ops_moe_combine(d_out, d_yp, d_tw, d_sr, N, k, C);
    cmp_f32("  combine (+= into fp32)", d_out, out, nx, TOL_F32);
    float *dout = hrand(nx, 1), *rdyp = hbuf(np), *rdtw = hbuf(S), *d_dtw = poison_f32(S);
    ref_ops_moe_combine_backward(rdyp, rdtw, dout, yp, tw, sr, N, k, C);
    round_bf(rdyp, np);
    act_t* d_dyp = poison_act(np);
    ops_moe_combine_backward(d_dyp, d_dtw, up_f32(dout, nx), d_yp, d_tw, d_sr, N, k, C);
    cmp_act("  combine backward dyp", d_dyp, rdyp, np, TOL_ACT);
    cmp_f32("  combine backward dtopk_w (fp32; 0 for dropped slots)", d_dtw, rdtw, S, TOL_F32);
    release();
}

// groups of the given row counts (0 = an expert without tokens)
static void test_grouped_matmul(int G, const int* rows, int C, int OC) {
    int* off = ibuf(G + 1);
    for (int g = 0; g < G; g++) off[g + 1] = off[g] + rows[g];
    const int R = off[G];
    const size_t nI = (size_t)R * C, nW = (size_t)G * OC * C, nO = (size_t)R * OC;
    float *inp = hrand_bf(nI, 1), *w = hrand_bf(nW, 1), *dout = hrand_bf(nO, 1), *dw0 = hrand(nW, 1);
    float *ref = hbuf(nO), *rdinp = hbuf(nI), *rdw = hcopy(dw0, nW);
    ref_ops_grouped_matmul_forward(ref, inp, w, off, G, C, OC);
    ref_ops_grouped_matmul_backward(rdinp, rdw, dout, inp, w, off, G, C, OC);
    round_bf(ref, nO); round_bf(rdinp, nI);
    act_t *d_inp = up_act(inp, nI), *d_w = up_act(w, nW), *d_dout = up_act(dout, nO), *d_out = poison_act(nO), *d_dinp = poison_act(nI);
    float* d_dw = up_f32(dw0, nW);
    int* d_off = up_int(off, G + 1);
    ops_grouped_matmul_forward(d_out, d_inp, d_w, d_off, G, C, OC);
    ops_grouped_matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_off, G, C, OC);
    cmp_act(NM("  grouped matmul G=%d R=%d C=%d OC=%d forward", G, R, C, OC), d_out, ref, nO, TOL_ACT);
    cmp_act("  grouped matmul backward dinp", d_dinp, rdinp, nI, TOL_ACT);
    cmp_f32("  grouped matmul backward dw (+=, fp32; an empty group keeps its value)", d_dw, rdw, nW, TOL_F32);
    ref_ops_grouped_matmul_backward(NULL, rdw, dout, inp, w, off, G, C, OC);
    ops_grouped_matmul_backward(NULL, d_dw, d_dout, d_inp, d_w, d_off, G, C, OC);
    cmp_f32("  grouped matmul backward dw only (dinp NULL), accumulated twice", d_dw, rdw, nW, TOL_F32);
    release();
}

static void test_sigmoid_gate_add(int N, int C) {
    const size_t n = (size_t)N * C;
    float *y = hrand_bf(n, 1), *z = hrand(N, 3), *out = hrand(n, 1), *dout = hrand(n, 1), *rdy = hbuf(n), *rdz = hbuf(N);
    float *d_out = up_f32(out, n), *d_z = up_f32(z, N), *d_dz = poison_f32(N);
    act_t *d_y = up_act(y, n), *d_dy = poison_act(n);
    ref_ops_sigmoid_gate_add_forward(out, y, z, N, C);
    ops_sigmoid_gate_add_forward(d_out, d_y, d_z, N, C);
    cmp_f32(NM("shared-expert gate forward N=%d C=%d (+= into fp32)", N, C), d_out, out, n, TOL_F32);
    ref_ops_sigmoid_gate_add_backward(rdy, rdz, dout, y, z, N, C);
    round_bf(rdy, n);
    ops_sigmoid_gate_add_backward(d_dy, d_dz, up_f32(dout, n), d_y, d_z, N, C);
    cmp_act("shared-expert gate backward dy", d_dy, rdy, n, TOL_ACT);
    cmp_f32("shared-expert gate backward dz (fp32)", d_dz, rdz, N, TOL_F32);
    release();
}

// ---- Gated DeltaNet ------------------------------------------------------------------------------
// Its ops are fp32 on every build (no act_t: kernels/cuda/deltanet.cu compiled with bf16 act_t
// computes what the fp32 build does); one shape per op here, the layer's order, against the fp32
// CPU ops at TOL_F32 (test_gpu_ops covers the shapes: its bounds are 1e-5 to 1e-4). B = 2 sequences
// of T = 70 tokens (across the backward's 64-token checkpoint), Hk = 1, Hv = 2, dk = 16, dv = 8.
static void test_gdn_layer(void) {
    enum { B = 2, T = 70, N = B * T, HK = 1, HV = 2, DK = 16, DV = 8, K = 4, CC = 2 * HK * DK + HV * DV };
    // conv1d + SiLU over [q | k | v] (C = CC), with a state in and out
    float *x = hrand((size_t)N * CC, 2), *w = hrand(CC * K, 1), *st = hrand(B * CC * (K - 1), 1);
    float *xc = hbuf((size_t)N * CC), *pre = hbuf((size_t)N * CC), *sto = hbuf(B * CC * (K - 1));
    ref_ops_conv1d_silu_forward(xc, pre, sto, x, w, st, NULL, B, T, CC, K);
    float *d_x = up_f32(x, (size_t)N * CC), *d_w = up_f32(w, CC * K), *d_xc = poison_f32((size_t)N * CC);
    float *d_pre = poison_f32((size_t)N * CC), *d_sto = poison_f32(B * CC * (K - 1));
    ops_conv1d_silu_forward(d_xc, d_pre, d_sto, d_x, d_w, up_f32(st, B * CC * (K - 1)), NULL, B, T, CC, K);
    cmp_f32(NM("gdn layer B=%d T=%d Hk=%d Hv=%d dk=%d dv=%d: conv1d silu out", B, T, HK, HV, DK, DV), d_xc, xc,
            (size_t)N * CC, TOL_F32);
    cmp_f32("gdn layer: conv1d state_out", d_sto, sto, B * CC * (K - 1), TOL_F32);
    // L2 norm of q and k (2 Hk heads read from the conv output's rows, written dense)
    float *qk = hbuf((size_t)N * 2 * HK * DK), *rinv = hbuf(N * 2 * HK);
    ref_ops_l2norm_forward(qk, rinv, xc, N, 2 * HK, DK, CC, 2 * HK * DK, 1e-6f);
    float *d_qk = poison_f32((size_t)N * 2 * HK * DK), *d_rinv = poison_f32(N * 2 * HK);
    ops_l2norm_forward(d_qk, d_rinv, up_f32(xc, (size_t)N * CC), N, 2 * HK, DK, CC, 2 * HK * DK, 1e-6f);
    cmp_f32("gdn layer: l2norm y", d_qk, qk, (size_t)N * 2 * HK * DK, TOL_F32);
    // gates
    float *ba = hrand(N * 2 * HV, 3), *A = hrand(HV, 1), *dt = hrand(HV, 1), *g = hbuf(N * HV), *beta = hbuf(N * HV);
    ref_ops_gdn_gates_forward(g, beta, ba, A, dt, N, HV);
    float *d_ba = up_f32(ba, N * 2 * HV), *d_A = up_f32(A, HV), *d_dt = up_f32(dt, HV);
    float *d_g = poison_f32(N * HV), *d_beta = poison_f32(N * HV);
    ops_gdn_gates_forward(d_g, d_beta, d_ba, d_A, d_dt, N, HV);
    cmp_f32("gdn layer: gates g", d_g, g, N * HV, TOL_F32);
    cmp_f32("gdn layer: gates beta", d_beta, beta, N * HV, TOL_F32);
    // the delta rule on the CPU's q, k, g, beta (q, k in the dense qk rows: ld 2 Hk dk; v in the
    // conv output's rows: ld CC), chunked form (the recurrent kernel on CUDA)
    OpsGdnShape s = {B, T, HK, HV, DK, DV, 16, 2 * HK * DK, CC, NULL};
    float *o = hbuf((size_t)N * HV * DV), *so = hbuf(B * HV * DK * DV);
    ref_ops_gdn_forward(o, so, NULL, qk, qk + HK * DK, xc + 2 * HK * DK, g, beta, NULL, &s);
    set_f32(d_qk, qk, (size_t)N * 2 * HK * DK);
    set_f32(d_g, g, N * HV);
    set_f32(d_beta, beta, N * HV);
    float *d_xc2 = up_f32(xc, (size_t)N * CC), *d_o = poison_f32((size_t)N * HV * DV), *d_so = poison_f32(B * HV * DK * DV);
    ops_gdn_forward(d_o, d_so, NULL, d_qk, d_qk + HK * DK, d_xc2 + 2 * HK * DK, d_g, d_beta, NULL, &s);
    cmp_f32("gdn layer: delta rule o (chunk 16)", d_o, o, (size_t)N * HV * DV, TOL_F32);
    cmp_f32("gdn layer: delta rule state_out", d_so, so, B * HV * DK * DV, TOL_F32);
    // gated RMSNorm (silu, as Qwen3-Next) of o, and its backward
    float *z = hrand((size_t)N * HV * DV, 2), *nw = hrand(DV, 1), *y = hbuf((size_t)N * HV * DV), *rstd = hbuf(N * HV);
    ref_ops_rmsnorm_gated_forward(y, rstd, o, z, nw, N * HV, DV, 1e-6f, OPS_ACT_SILU);
    float *d_z = up_f32(z, (size_t)N * HV * DV), *d_nw = up_f32(nw, DV), *d_y = poison_f32((size_t)N * HV * DV);
    float* d_rstd = poison_f32(N * HV);
    set_f32(d_o, o, (size_t)N * HV * DV);
    ops_rmsnorm_gated_forward(d_y, d_rstd, d_o, d_z, d_nw, N * HV, DV, 1e-6f, OPS_ACT_SILU);
    cmp_f32("gdn layer: rmsnorm gated y", d_y, y, (size_t)N * HV * DV, TOL_F32);
    float *dy = hrand((size_t)N * HV * DV, 1), *dw = hrand(DV, 1), *dO = hbuf((size_t)N * HV * DV), *dz = hbuf((size_t)N * HV * DV);
    float *d_dw = up_f32(dw, DV), *d_dO = poison_f32((size_t)N * HV * DV), *d_dz = poison_f32((size_t)N * HV * DV);
    ref_ops_rmsnorm_gated_backward(dO, dz, dw, dy, o, z, nw, rstd, N * HV, DV, OPS_ACT_SILU);
    set_f32(d_rstd, rstd, N * HV);
    ops_rmsnorm_gated_backward(d_dO, d_dz, d_dw, up_f32(dy, (size_t)N * HV * DV), d_o, d_z, d_nw, d_rstd, N * HV, DV,
                               OPS_ACT_SILU);
    cmp_f32("gdn layer: rmsnorm gated backward dx", d_dO, dO, (size_t)N * HV * DV, TOL_F32);
    cmp_f32("gdn layer: rmsnorm gated backward dz", d_dz, dz, (size_t)N * HV * DV, TOL_F32);
    cmp_f32("gdn layer: rmsnorm gated backward dw (+=)", d_dw, dw, DV, TOL_F32);
    // the delta rule's backward from the CPU's dO: dq, dk into dqk, dv into the conv gradient's rows
    float *dqk = hbuf((size_t)N * 2 * HK * DK), *dxc = hbuf((size_t)N * CC), *dg = hbuf(N * HV), *dbeta = hbuf(N * HV);
    float *d_dqk = poison_f32((size_t)N * 2 * HK * DK), *d_dxc = up_f32(dxc, (size_t)N * CC);
    float *d_dg = poison_f32(N * HV), *d_dbeta = poison_f32(N * HV);
    for (size_t n = 0; n < (size_t)N; n++)   // the v columns are written by the op: poison them
        for (int c = 2 * HK * DK; c < CC; c++) dxc[n * CC + c] = NAN;
    set_f32(d_dxc, dxc, (size_t)N * CC);
    set_f32(d_dO, dO, (size_t)N * HV * DV);
    ref_ops_gdn_backward(dqk, dqk + HK * DK, dxc + 2 * HK * DK, dg, dbeta, dO, qk, qk + HK * DK, xc + 2 * HK * DK, g, beta, NULL, &s);
    ops_gdn_backward(d_dqk, d_dqk + HK * DK, d_dxc + 2 * HK * DK, d_dg, d_dbeta, d_dO, d_qk, d_qk + HK * DK,
                     d_xc2 + 2 * HK * DK, d_g, d_beta, NULL, &s);
    cmp_f32("gdn layer: delta rule backward dq | dk", d_dqk, dqk, (size_t)N * 2 * HK * DK, TOL_F32);
    cmp_f32("gdn layer: delta rule backward dv (in the conv gradient's rows)", d_dxc, dxc, (size_t)N * CC, TOL_F32);
    cmp_f32("gdn layer: delta rule backward dg", d_dg, dg, N * HV, TOL_F32);
    cmp_f32("gdn layer: delta rule backward dbeta", d_dbeta, dbeta, N * HV, TOL_F32);
    // gates, L2 norm and conv backward
    float *dba = hbuf(N * 2 * HV), *dA = hrand(HV, 1), *ddt = hrand(HV, 1);
    float *d_dba = poison_f32(N * 2 * HV), *d_dA = up_f32(dA, HV), *d_ddt = up_f32(ddt, HV);
    ref_ops_gdn_gates_backward(dba, dA, ddt, dg, dbeta, ba, A, dt, N, HV);
    set_f32(d_dg, dg, N * HV);
    set_f32(d_dbeta, dbeta, N * HV);
    ops_gdn_gates_backward(d_dba, d_dA, d_ddt, d_dg, d_dbeta, d_ba, d_A, d_dt, N, HV);
    cmp_f32("gdn layer: gates backward dba", d_dba, dba, N * 2 * HV, TOL_F32);
    cmp_f32("gdn layer: gates backward dA_log (+=)", d_dA, dA, HV, TOL_F32);
    cmp_f32("gdn layer: gates backward ddt_bias (+=)", d_ddt, ddt, HV, TOL_F32);
    set_f32(d_dqk, dqk, (size_t)N * 2 * HK * DK);
    set_f32(d_dxc, dxc, (size_t)N * CC);
    ref_ops_l2norm_backward(dxc, dqk, xc, rinv, N, 2 * HK, DK, CC, 2 * HK * DK);
    set_f32(d_rinv, rinv, N * 2 * HK);
    ops_l2norm_backward(d_dxc, d_dqk, d_xc2, d_rinv, N, 2 * HK, DK, CC, 2 * HK * DK);
    cmp_f32("gdn layer: l2norm backward dx (q, k columns; v columns kept)", d_dxc, dxc, (size_t)N * CC, TOL_F32);
    float *dx = hbuf((size_t)N * CC), *dcw = hrand(CC * K, 1);
    float *d_dx = poison_f32((size_t)N * CC), *d_dcw = up_f32(dcw, CC * K);
    ref_ops_conv1d_silu_backward(dx, dcw, dxc, x, pre, w, NULL, B, T, CC, K);
    set_f32(d_pre, pre, (size_t)N * CC);
    set_f32(d_dxc, dxc, (size_t)N * CC);
    ops_conv1d_silu_backward(d_dx, d_dcw, d_dxc, d_x, d_pre, d_w, NULL, B, T, CC, K);
    cmp_f32("gdn layer: conv1d backward dx", d_dx, dx, (size_t)N * CC, TOL_F32);
    cmp_f32("gdn layer: conv1d backward dw (+=)", d_dcw, dcw, CC * K, TOL_F32);
    release();
}

// The chunked delta rule (kernels/cuda/deltanet_chunk.cu: chunk > 0, dk and dv in {64, 128}): in
// this build its GEMMs take bf16 operands (tensor cores), fp32 accumulation, fp32 states. Against
// the fp32 CPU ops (its chunked forward, its backward) on fp32 inputs, at TOL_GDN_BF16_* (below):
// a partial last chunk, one whole chunk, Hv > Hk (2 and 4 value heads a key head), every (dk, dv)
// pair, strided rows, a passed-in state, the decay regimes of test_gpu_ops (mid, strong: g in
// [-12, -2], slow: g in [-0.02, 0]); and a rerun (the same bits: no atomics).
// docs (OpsGdnShape.doc_start; the CPU with the same doc_start): GDN_DOCS_MIXED, test_gpu_ops.c's
// layout (starts mid-chunk, at and just before chunk boundaries, short and one-token documents,
// the partial last chunk, another layout per sequence); GDN_DOCS_ONE, one document a sequence,
// which must also give the bits of doc_start = NULL (forward and backward).
enum { GDN_DECAY_MID, GDN_DECAY_STRONG, GDN_DECAY_SLOW };
enum { GDN_DOCS_NONE, GDN_DOCS_MIXED, GDN_DOCS_ONE };
static const int gdn_doc_lists[2][12] = {{0, 30, 64, 70, 73, 80, 90, 91, 100, -1}, {0, 1, 2, 63, 140, 149, -1}};
static void test_gdn_chunked_docs(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int with_state,
                                  int decay, int docs) {
    const size_t N = (size_t)B * T, ldqk = (size_t)Hk * dk + extra_qk, ldv = (size_t)Hv * dv + extra_v;
    const size_t SN = (size_t)B * Hv * dk * dv, ON = N * Hv * dv;
    OpsGdnShape s = {B, T, Hk, Hv, dk, dv, 64, extra_qk ? (int)ldqk : 0, extra_v ? (int)ldv : 0, NULL};
    OpsGdnShape sd = s;   // the device's: doc_start in device memory
    if (docs != GDN_DOCS_NONE) {
        int* doc = ibuf(N);   // doc[b T + t] (=) the first token of t's document
        for (int b = 0; b < B; b++)
            for (int t = 0, start = 0; t < T; t++) {
                for (int i = 0; docs == GDN_DOCS_MIXED && gdn_doc_lists[b % 2][i] >= 0; i++)
                    if (gdn_doc_lists[b % 2][i] == t) start = t;
                doc[(size_t)b * T + t] = start;
            }
        s.doc_start = doc;
        sd.doc_start = up_int(doc, N);
    }
    float *q = hrand(N * ldqk, 1), *k = hrand(N * ldqk, 1), *v = hrand(N * ldv, 1), *g = hbuf(N * Hv), *beta = hbuf(N * Hv);
    for (size_t n = 0; n < N; n++)   // q, k L2-normalised per head, as the layer does
        for (int j = 0; j < Hk; j++)
            for (int w = 0; w < 2; w++) {
                float* r = (w ? k : q) + n * ldqk + (size_t)j * dk;
                double ss = 0.0;
                for (int i = 0; i < dk; i++) ss += (double)r[i] * r[i];
                for (int i = 0; i < dk; i++) r[i] = (float)(r[i] / sqrt(ss));
            }
    for (size_t i = 0; i < N * Hv; i++) {
        const double r = 0.5 + 0.5 * tu_rand();
        g[i] = (float)(decay == GDN_DECAY_STRONG ? -2.0 - 10.0 * r : decay == GDN_DECAY_SLOW ? -0.02 * r : -0.05 - 0.4 * r);
        beta[i] = (float)(0.5 + 0.45 * tu_rand());
    }
    float *st = with_state ? hrand(SN, 0.5) : NULL, *o = hbuf(ON), *so = hbuf(SN);
    ref_ops_gdn_forward(o, so, NULL, q, k, v, g, beta, st, &s);
    float *d_q = up_f32(q, N * ldqk), *d_k = up_f32(k, N * ldqk), *d_v = up_f32(v, N * ldv), *d_g = up_f32(g, N * Hv);
    float *d_beta = up_f32(beta, N * Hv), *d_o = poison_f32(ON), *d_so = poison_f32(SN);
    float* d_st = with_state ? up_f32(st, SN) : NULL;
    ops_gdn_forward(d_o, d_so, NULL, d_q, d_k, d_v, d_g, d_beta, d_st, &sd);
    cmp_f32(NM("gdn chunked B=%d T=%d Hk=%d Hv=%d dk=%d dv=%d ld+%d/+%d%s%s%s: o", B, T, Hk, Hv, dk, dv, extra_qk, extra_v,
               with_state ? " state_in" : "", decay == GDN_DECAY_STRONG ? " strong decay" : decay == GDN_DECAY_SLOW ? " slow decay" : "",
               docs == GDN_DOCS_MIXED ? " documents" : docs == GDN_DOCS_ONE ? " one document" : ""),
            d_o, o, ON, TOL_GDN_BF16_FWD);
    cmp_f32("gdn chunked: state_out", d_so, so, SN, TOL_GDN_BF16_FWD);
    // backward (dq, dk, dv compared over whole rows: the gaps of the strided layout start as 0
    // on both sides and must stay 0)
    float *dout = hrand(ON, 1), *dq = hbuf(N * ldqk), *dk_ = hbuf(N * ldqk), *dv_ = hbuf(N * ldv), *dg = hbuf(N * Hv), *db = hbuf(N * Hv);
    ref_ops_gdn_backward(dq, dk_, dv_, dg, db, dout, q, k, v, g, beta, NULL, &s);
    // run 1: a rerun; with one document, run 2: doc_start NULL (the same bits)
    OpsGdnShape s0 = sd;
    s0.doc_start = NULL;
    const int runs = docs == GDN_DOCS_ONE ? 3 : 2;
    float *d_dout = up_f32(dout, ON), *d_dq[3], *d_dk[3], *d_dv[3], *d_dg[3], *d_db[3];
    for (int run = 0; run < runs; run++) {
        float* z = hbuf(N * (ldqk > ldv ? ldqk : ldv));
        d_dq[run] = up_f32(z, N * ldqk); d_dk[run] = up_f32(z, N * ldqk); d_dv[run] = up_f32(z, N * ldv);
        d_dg[run] = poison_f32(N * Hv); d_db[run] = poison_f32(N * Hv);
        ops_gdn_backward(d_dq[run], d_dk[run], d_dv[run], d_dg[run], d_db[run], d_dout, d_q, d_k, d_v, d_g, d_beta, NULL,
                         run == 2 ? &s0 : &sd);
    }
    cmp_f32("gdn chunked backward: dq", d_dq[0], dq, N * ldqk, TOL_GDN_BF16_BWD);
    cmp_f32("gdn chunked backward: dk", d_dk[0], dk_, N * ldqk, TOL_GDN_BF16_BWD);
    cmp_f32("gdn chunked backward: dv", d_dv[0], dv_, N * ldv, TOL_GDN_BF16_BWD);
    cmp_f32("gdn chunked backward: dg", d_dg[0], dg, N * Hv, TOL_GDN_BF16_BWD);
    cmp_f32("gdn chunked backward: dbeta", d_db[0], db, N * Hv, TOL_GDN_BF16_BWD);
    const float* outs[5][2] = {{d_dq[0], d_dq[1]}, {d_dk[0], d_dk[1]}, {d_dv[0], d_dv[1]}, {d_dg[0], d_dg[1]}, {d_db[0], d_db[1]}};
    const size_t ns[5] = {N * ldqk, N * ldqk, N * ldv, N * Hv, N * Hv};
    int same = 1;
    for (int i = 0; i < 5; i++) {
        float *a = hbuf(ns[i]), *b2 = hbuf(ns[i]);
        ops_to_host(a, outs[i][0], ns[i] * sizeof(float));
        ops_to_host(b2, outs[i][1], ns[i] * sizeof(float));
        same &= memcmp(a, b2, ns[i] * sizeof(float)) == 0;
    }
    TU_CHECK(same, "gdn chunked backward: a rerun gives other bits");
    printf("  %-66s %s\n", "gdn chunked backward: dq, dk, dv, dg, dbeta on a rerun", same ? "same bits" : "DIFFERENT");
    if (docs == GDN_DOCS_ONE) {   // one document a sequence = doc_start NULL, bit for bit
        float *d_o0 = poison_f32(ON), *d_so0 = poison_f32(SN);
        ops_gdn_forward(d_o0, d_so0, NULL, d_q, d_k, d_v, d_g, d_beta, d_st, &s0);
        const float* pairs[7][2] = {{d_o0, d_o}, {d_so0, d_so}, {d_dq[2], d_dq[0]}, {d_dk[2], d_dk[0]}, {d_dv[2], d_dv[0]},
                                    {d_dg[2], d_dg[0]}, {d_db[2], d_db[0]}};
        const size_t np[7] = {ON, SN, N * ldqk, N * ldqk, N * ldv, N * Hv, N * Hv};
        int same0 = 1;
        for (int i = 0; i < 7; i++) {
            float *a = hbuf(np[i]), *b2 = hbuf(np[i]);
            ops_to_host(a, pairs[i][0], np[i] * sizeof(float));
            ops_to_host(b2, pairs[i][1], np[i] * sizeof(float));
            same0 &= memcmp(a, b2, np[i] * sizeof(float)) == 0;
        }
        TU_CHECK(same0, "gdn chunked, one document: other bits than doc_start = NULL");
        printf("  %-66s %s\n", "gdn chunked, one document = doc_start NULL: o, state_out, dq .. dbeta",
               same0 ? "same bits" : "DIFFERENT");
    }
    release();
}
static void test_gdn_chunked(int B, int T, int Hk, int Hv, int dk, int dv, int extra_qk, int extra_v, int with_state,
                             int decay) {
    test_gdn_chunked_docs(B, T, Hk, Hv, dk, dv, extra_qk, extra_v, with_state, decay, GDN_DOCS_NONE);
}

static void test_gdn_chunked_all(void) {
    printf(" gated delta rule, chunked kernels (bf16 tensor-core products)\n");
    test_gdn_chunked(1, 130, 1, 2, 64, 64, 5, 3, 1, GDN_DECAY_MID);
    test_gdn_chunked(2, 100, 1, 2, 128, 128, 0, 0, 0, GDN_DECAY_STRONG);
    test_gdn_chunked(1, 70, 2, 2, 128, 64, 0, 0, 1, GDN_DECAY_SLOW);
    test_gdn_chunked(1, 129, 1, 1, 64, 128, 0, 0, 0, GDN_DECAY_MID);
    test_gdn_chunked(2, 64, 1, 4, 64, 64, 0, 0, 1, GDN_DECAY_MID);   // one whole chunk, 4 value heads a key head
    printf(" gated delta rule, chunked kernels (bf16 tensor-core products), documents (doc_start)\n");
    test_gdn_chunked_docs(2, 150, 1, 2, 64, 64, 5, 3, 1, GDN_DECAY_MID, GDN_DOCS_MIXED);
    test_gdn_chunked_docs(2, 150, 1, 1, 128, 128, 0, 0, 1, GDN_DECAY_SLOW, GDN_DOCS_MIXED);
    test_gdn_chunked_docs(2, 150, 2, 2, 64, 128, 0, 0, 0, GDN_DECAY_STRONG, GDN_DOCS_MIXED);
    test_gdn_chunked_docs(2, 130, 1, 2, 128, 64, 0, 0, 1, GDN_DECAY_MID, GDN_DOCS_ONE);
}

int main(int argc, char** argv) {
    char why[256];
    if (!cuda_device_present(why, sizeof why)) {
        printf("skipped: no CUDA device (%s)\n", why);
        return 0;
    }
    ops_init(0);
    ref_ops_init(0);
    if (argc > 1 && strcmp(argv[1], "--gdn-chunk") == 0) {   // the ctest cudaemu_gdn_chunk_bf16: these checks alone
        test_gdn_chunked_all();
        return tu_finish();
    }
    printf("CUDA bf16 ops (%s) vs the bf16 reference (fp32 CPU ops on bf16 inputs, outputs rounded once)\n",
           ops_backend_name());
    test_conversions(100003);
    test_matmul(128, 256, 384);
    test_matmul(37, 45, 53);         // odd shapes: unaligned rows for cuBLASLt
    test_matmul_gelu(256, 128, 512); // aligned: cuBLASLt's GELU epilogues
    test_matmul_bias(128, 64, 192);
    test_matmul_bias(37, 45, 53);
    test_matmul_gelu(37, 45, 53);    // odd: the unfused fallback
    test_norm(OPS_RMSNORM, 300, 200);
    test_norm(OPS_LAYERNORM, 300, 200);
    test_norm(OPS_LAYERNORM, 64, 1024);
    test_activations(100, 300);
    test_xent(64, 1000, 1024);
    test_xent(5, 50257, 50304);

    // attention: the fused kernel (fp32 inside) on every gate, the value gate, head dims 64, 128
    // and an odd one; then the flash kernels (both) and cuDNN at the bf16 bounds
    test_attention(2, 100, 4, 2, 64, 0, 0, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SILU);
    test_attention(1, 64, 2, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_VALUE, OPS_ACT_NS_SIGMOID);
    test_attention(1, 70, 2, 1, 128, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    test_attention(1, 65, 3, 1, 96, 1, 0, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    // RoPE from pos0 = 5 with each scaling (pos0 alone first, then one field at a time), the
    // KV cache's ops
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
    }
    cuda_set_flash_kernel(CUDA_FLASH_MMA);
    if (cuda_cudnn_available()) {
        att_impl = OPS_ATTN_CUDNN;
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_NONE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
        test_attention(2, 100, 4, 2, 64, 1, 1, OPS_GATE_HEADWISE, OPS_GATEPOS_SDPA, OPS_ACT_SILU);
        test_attention(1, 300, 8, 2, 128, 1, 1, OPS_GATE_ELEMENTWISE, OPS_GATEPOS_SDPA, OPS_ACT_SIGMOID);
    } else {
        printf("cuDNN attention: not in this build (scripts/cudnn_frontend.sh): its checks skipped\n");
    }
    att_impl = OPS_ATTN_FUSED;

    // MoE: dropless and with drops, then the experts' GEMM both ways, then the shared-expert gate
    test_moe(300, 8, 2, 0, 72);
    test_moe(300, 8, 2, 40, 72);
    test_moe(301, 16, 3, 0, 96);
    const int rows1[5] = {7, 0, 33, 1, 64}, rows2[3] = {0, 37, 0};
    for (int mode = CUDA_MOE_GEMM_LOOP; mode <= CUDA_MOE_GEMM_GROUPED; mode++) {
        cuda_set_moe_gemm(mode);
        printf(" grouped matmul as %s\n", mode == CUDA_MOE_GEMM_LOOP ? "one cuBLASLt call per expert" : "one cuBLAS grouped GEMM");
        test_grouped_matmul(5, rows1, 96, 160);
        test_grouped_matmul(3, rows2, 45, 53);
    }
    cuda_set_moe_gemm(CUDA_MOE_GEMM_LOOP);
    test_sigmoid_gate_add(100, 200);
    test_gdn_layer();

    printf("peak GPU memory held by the backend: %.1f MiB\n", cuda_allocated_peak_bytes() / 1048576.0);
    return tu_finish();
}
