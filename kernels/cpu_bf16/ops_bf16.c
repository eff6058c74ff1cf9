// kernels/cpu_bf16/ops_bf16.c: the CPU emulation of bf16 activation storage (act_t = bf16).
//
// Every op of kernels/ops.h, over the fp32 CPU kernels: the act_t inputs are widened to fp32
// (exact), the CPU kernel computes in fp32, the act_t outputs are rounded to bf16 (nearest
// even) once. That is the contract of the CUDA bf16 build (its kernels read bf16, compute in
// fp32 and round once on the way out; its GEMMs accumulate in fp32), so this build shows what
// bf16 storage does to the model and its training, and tests the model's bf16 plumbing
// (which tensors are act_t, where fp32 copies are converted, the weights' compute copy with
// stochastic rounding), without a GPU. It is slow (a conversion pass around every op): a test
// and measuring tool, not a way to train.
//
// The fp32 kernels are kernels/cpu compiled a second time with every ops_* renamed ref_ops_*
// (the generated header cpu_ref_rename.h); their declarations come from cpu_ref_ops.h,
// generated from ops.h with act_t read as float (CMakeLists.txt).
//
// The same file is the fast CPU bf16 backend when compiled with GATEDGPT_BF16_FAST
// (ops_bf16_fast.c): the GEMMs read the bf16 buffers directly through oneDNN's bf16 matmul with
// fp32 accumulation (matmul_bf16.c) instead of widening them for the fp32 sgemm. A bf16 x bf16
// product is exact in fp32, so the two differ only in the order of the fp32 sums; everything
// else (the roundings, which tensors are bf16, the elementwise ops) is this file's code for
// both. Where the CPU has no bf16 units the fast build says so once and runs the emulation's
// GEMMs (ops_init).
#ifndef GATEDGPT_ACT_BF16
#error "ops_bf16.c is the bf16 build's backend: compile it with -DGATEDGPT_ACT_BF16"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../ops.h"
#include "../attn_gate.h"
#include "../cpu/cpu_math.h"
#include "cpu_ref_ops.h"
#ifdef GATEDGPT_BF16_FAST
#include "matmul_bf16.h"
#include "attention_bf16.h"
// the bf16 GEMMs are on (bf16 units, decided at ops_init); off: the emulation's GEMMs
static int fast_gemm;
#define FAST_GEMM fast_gemm
#else
#define FAST_GEMM 0
static void bf16mm(char ta, char tb, int M, int N, int K, const act_t* A, int lda, const act_t* B, int ldb,
                   float beta, float* C, int ldc) {   // never called: FAST_GEMM is 0
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;
    abort();
}
#define bf16mm_var bf16mm
// never called either (FAST_GEMM is 0): the fast build's attention (attention_bf16.c)
static void bf16_attention_forward(act_t* y, act_t* yg, float* lse, const act_t* q, const act_t* k, const act_t* v,
                                   const act_t* qkv, const OpsAttnShape* s) {
    (void)y; (void)yg; (void)lse; (void)q; (void)k; (void)v; (void)qkv; (void)s;
    abort();
}
static void bf16_attention_backward(act_t* dq, act_t* dk, act_t* dv, act_t* dqkv, const act_t* dyg, const act_t* q,
                                    const act_t* k, const act_t* v, const act_t* y, const float* lse, const act_t* qkv,
                                    const OpsAttnShape* s) {
    (void)dq; (void)dk; (void)dv; (void)dqkv; (void)dyg; (void)q; (void)k; (void)v; (void)y; (void)lse; (void)qkv; (void)s;
    abort();
}
static void bf16mm_round(char ta, char tb, int M, int N, int K, const act_t* A, int lda, const act_t* B, int ldb,
                         const act_t* bias, act_t* C, int ldc) {   // never called: FAST_GEMM is 0
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)bias; (void)C; (void)ldc;
    abort();
}
#endif

// ---- conversions ---------------------------------------------------------------------------
// Each op's fp32 copies live for the op only. Fresh allocations of them (malloc/calloc: mmaps for
// the large ones) made the kernel fault in and clear their pages on every op: 30% of a 124M
// B=8 T=256 step at 1 thread (perf, docs/performance.md "CPU bf16"). They come from this pool
// instead: a freed block is kept and handed to the next copy it fits (the smallest free one that
// does), so after the first step no op touches a fresh page. It holds at most the largest set of
// copies alive at once (one op's: the logits' 412 MB copy at that shape, or the attention
// backward's eleven). The pool changes no value: f32_alloc still zeroes (calloc's contract),
// widen still writes every element. Ops are called from one host thread (the OpenMP threads run
// inside them), so the pool takes no lock.
#define F32_POOL 48
static struct { float* p; size_t cap; int used; } f32_pool[F32_POOL];

static void f32_oom(size_t n) {
    fprintf(stderr, "error: out of host memory (%zu floats) in the bf16 backend\n", n);
    exit(1);
}
// an uninitialized block of at least n floats
static float* f32_get(size_t n) {
    if (!n) n = 1;
    int fit = -1, empty = -1, small = -1;   // best free fit, an empty slot, the largest free misfit
    for (int i = 0; i < F32_POOL; i++) {
        if (f32_pool[i].used) continue;
        if (!f32_pool[i].p) { if (empty < 0) empty = i; continue; }
        if (f32_pool[i].cap >= n) { if (fit < 0 || f32_pool[i].cap < f32_pool[fit].cap) fit = i; }
        else if (small < 0 || f32_pool[i].cap > f32_pool[small].cap) small = i;
    }
    int i = fit >= 0 ? fit : empty >= 0 ? empty : small;
    if (i < 0) {   // every slot in use (no op holds this many copies): a plain block, freed by f32_put
        float* p = malloc(n * sizeof(float));
        if (!p) f32_oom(n);
        return p;
    }
    if (f32_pool[i].cap < n) {   // an empty slot, or a free block too small for this copy: (re)allocate
        free(f32_pool[i].p);
        f32_pool[i].p = malloc(n * sizeof(float));
        if (!f32_pool[i].p) f32_oom(n);
        f32_pool[i].cap = n;
    }
    f32_pool[i].used = 1;
    return f32_pool[i].p;
}
// give a block of f32_get back (NULL: nothing)
static void f32_put(float* p) {
    if (!p) return;
    for (int i = 0; i < F32_POOL; i++)
        if (f32_pool[i].p == p) { f32_pool[i].used = 0; return; }
    free(p);   // a plain block (the pool was full)
}
// n zeroed floats (the fp32 kernels' outputs: some accumulate into them)
static float* f32_alloc(size_t n) {
    float* p = f32_get(n);
    ref_ops_zero(p, n ? n : 1);
    return p;
}
// fp32 copy of x[n] (NULL for NULL); elementwise, so the threads change no bit. Every element is
// written: no zeroing
static float* widen(const act_t* x, size_t n) {
    if (!x) return NULL;
    float* f = f32_get(n);
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(x[i]);
    return f;
}
// dst[n] = round(src[n])
static void round_to(act_t* dst, const float* src, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}
// dst[n] = round(src[n]), then src is freed
static void narrow(act_t* dst, float* src, size_t n) {
    if (dst) round_to(dst, src, n);
    f32_put(src);
}
#ifdef GATEDGPT_BF16_FAST
// the fast GEMMs' fp32 results: two buffers held for the run and grown to the largest product
// (the logits: N x Vp), so no op allocates and faults in fresh pages for them
static float* fast_out(int slot, size_t n) {
    static float* buf[2];
    static size_t cap[2];
    if (n > cap[slot]) {
        free(buf[slot]);
        buf[slot] = malloc(n * sizeof(float));
        if (!buf[slot]) { fprintf(stderr, "error: out of host memory (%zu floats) in the bf16 backend\n", n); exit(1); }
        cap[slot] = n;
    }
    return buf[slot];
}
#else
static float* fast_out(int slot, size_t n) { (void)slot; (void)n; abort(); }   // never called: FAST_GEMM is 0
#endif
// The fused elementwise passes: an op over cache-sized chunks (the widened inputs and the fp32
// results of a chunk stay in L1/L2) instead of whole-tensor conversion passes through memory.
// Each chunk runs the same fp32 kernel on the same values, elementwise, so the bits are those of
// the whole-tensor passes (the threads split the tensors differently too, and change no bit).
#define FUSE_CHUNK 2048
// pre = round(fp), act = round(gelu(fp)) for fp32 products fp[n]. The fp32 kernel's GELU
// (cpu_gelu, the same inline function, so the same bits) on each chunk, called in the loop: not
// through ref_ops_gelu_forward, whose parallel region, nested here once per chunk of 2048, cost
// ~0.4 us per chunk (3072 chunks per layer at GPT-2 124M B=8 T=256; docs/performance.md)
static void gelu_round(act_t* pre, act_t* act, const float* fp, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t c = 0; c < n; c += FUSE_CHUNK) {
        const size_t m = n - c < FUSE_CHUNK ? n - c : FUSE_CHUNK;
        float fa[FUSE_CHUNK];
        for (size_t i = 0; i < m; i++) fa[i] = cpu_gelu(fp[c + i]);
        for (size_t i = 0; i < m; i++) { pre[c + i] = bf16_from_f32(fp[c + i]); act[c + i] = bf16_from_f32(fa[i]); }
    }
}
// dpre = round(gelu'(pre) dact) for fp32 dact[n] (overwritten); cpu_gelu_grad as gelu_round
static void gelu_backward_round(act_t* dpre, float* dact, const act_t* pre, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t c = 0; c < n; c += FUSE_CHUNK) {
        const size_t m = n - c < FUSE_CHUNK ? n - c : FUSE_CHUNK;
        float fp[FUSE_CHUNK];
        for (size_t i = 0; i < m; i++) fp[i] = bf16_to_f32(pre[c + i]);
        for (size_t i = 0; i < m; i++) dact[c + i] = cpu_gelu_grad(fp[i]) * dact[c + i];
        for (size_t i = 0; i < m; i++) dpre[c + i] = bf16_from_f32(dact[c + i]);
    }
}
// rows of a permuted MoE buffer: the largest row any kept slot points at, + 1
static size_t moe_rows(const int* slot_row, size_t S) {
    int r = -1;
    for (size_t s = 0; s < S; s++) if (slot_row[s] > r) r = slot_row[s];
    return (size_t)(r + 1);
}

// ---- lifetime, memory --------------------------------------------------------------------
#ifdef GATEDGPT_BF16_FAST
#include <malloc.h>
void ops_init(int threads) {
    ref_ops_init(threads);
    // the ops' fp32 copies come from the pool (f32_get); other short-lived blocks (the fp32
    // kernels' own temporaries) would be fresh mmaps above glibc's default 128 KiB, faulted in
    // again on every call. Up to glibc's largest threshold (32 MiB) they come from the heap
    // instead, whose freed pages are reused
    if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, 1 << 30))
        fprintf(stderr, "warning: mallopt refused the bf16 backend's heap thresholds: its temporaries stay mmapped\n");
    static int said;
    fast_gemm = bf16mm_isa() != BF16MM_NONE;
    if (!fast_gemm && !said++)
        printf("precision = bf16: this CPU has no bf16 units (no avx512_bf16/amx_bf16%s): running the bf16 numerics "
               "through the emulation (fp32 GEMMs over the bf16 values, slower than fp32)\n",
               bf16mm_cpu_isa() != BF16MM_NONE ? " that oneDNN may use: ONEDNN_MAX_CPU_ISA caps it" : "");
}
#else
void ops_init(int threads) { ref_ops_init(threads); }
#endif
const char* ops_backend_name(void) {
    // "cpu fp32 (oneDNN sgemm, 2 threads)" -> "cpu bf16-emulation (oneDNN sgemm, 2 threads)", or
    // on the fast build "cpu bf16 (oneDNN bf16 matmul amx_bf16, 2 threads)"
    static char name[160];
    const char* ref = ref_ops_backend_name();
    const char* detail = strchr(ref, '(');
#ifdef GATEDGPT_BF16_FAST
    if (fast_gemm) {
        snprintf(name, sizeof name, "cpu bf16 (oneDNN bf16 matmul %s, %d threads)", bf16mm_isa_name(bf16mm_isa()),
                 ref_ops_num_threads());
        return name;
    }
#endif
    snprintf(name, sizeof name, "cpu bf16-emulation %s", detail ? detail : ref);
    return name;
}
int ops_num_threads(void) { return ref_ops_num_threads(); }
void* ops_malloc(size_t bytes) { return ref_ops_malloc(bytes); }
void ops_free(void* p) { ref_ops_free(p); }
size_t ops_allocated_bytes(void) { return ref_ops_allocated_bytes(); }
size_t ops_allocated_peak_bytes(void) { return ref_ops_allocated_peak_bytes(); }
size_t ops_alloc_align(void) { return ref_ops_alloc_align(); }
// the fp32 kernels' temporaries (each op's fp32 copies of its act_t tensors come on top: this
// build is a test tool, not planned)
size_t ops_scratch_bytes(const OpsStepShape* s) { return ref_ops_scratch_bytes(s); }
void ops_scratch_reserve(const OpsStepShape* s) { ref_ops_scratch_reserve(s); }
void ops_zero(float* x, size_t n) { ref_ops_zero(x, n); }
void ops_copy(float* dst, const float* src, size_t n) { ref_ops_copy(dst, src, n); }
void ops_accumulate(act_t* y, const act_t* x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = bf16_from_f32(bf16_to_f32(y[i]) + bf16_to_f32(x[i]));
}
void ops_to_host(void* dst, const void* src, size_t bytes) { ref_ops_to_host(dst, src, bytes); }
void ops_from_host(void* dst, const void* src, size_t bytes) { ref_ops_from_host(dst, src, bytes); }
void* ops_host_alloc(size_t bytes) { return ref_ops_host_alloc(bytes); }
void ops_host_free(void* p) { ref_ops_host_free(p); }
// the emulation: the fp32 FMA peak, as on the fp32 build (its GEMMs are fp32); the fast build:
// the bf16 GEMM rate measured at start (matmul_bf16.c), what its GEMMs can reach
#ifdef GATEDGPT_BF16_FAST
double ops_peak_flops(void) { return fast_gemm ? bf16mm_peak_flops(NULL) : ref_ops_peak_flops(); }
const char* ops_peak_source(void) {
    const char* src;
    if (!fast_gemm) return ref_ops_peak_source();
    bf16mm_peak_flops(&src);
    return src;
}
#else
double ops_peak_flops(void) { return ref_ops_peak_flops(); }
const char* ops_peak_source(void) { return ref_ops_peak_source(); }
#endif
size_t ops_mem_available(void) { return ref_ops_mem_available(); }
void ops_act_from_float(act_t* act, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) act[i] = bf16_from_f32(x[i]);
}
void ops_float_from_act(float* x, const act_t* act, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(act[i]);
}
// the random bits depend on (seed, i) only: any thread count gives the same copy
void ops_weights_to_act(act_t* act, const float* w, size_t n, unsigned long long seed) {
    ops_weights_to_act_at(act, w, 0, n, seed);
}
void ops_weights_to_act_at(act_t* act, const float* w, size_t at, size_t n, unsigned long long seed) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) act[i] = bf16_from_f32_sr(w[i], bf16_sr_bits(seed, at + i));
}

// ---- GEMM ------------------------------------------------------------------------------------
// The fast build's GEMMs (FAST_GEMM): bf16mm on the bf16 buffers, the fp32 result then takes
// the emulation's path (bias, GELU, one rounding) unchanged.
void ops_matmul_forward(act_t* out, const act_t* inp, const act_t* w, int N, int C, int OC) {
    if (FAST_GEMM) { bf16mm_round('N', 'T', N, OC, C, inp, C, w, C, NULL, out, OC); return; }
    float *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C), *fo = f32_alloc((size_t)N * OC);
    ref_ops_matmul_forward(fo, fi, fw, N, C, OC);
    narrow(out, fo, (size_t)N * OC);
    f32_put(fi); f32_put(fw);
}
void ops_matmul_forward_f32(float* out, const act_t* inp, const act_t* w, int N, int C, int OC,
                            int accumulate) {
    if (FAST_GEMM) { bf16mm('N', 'T', N, OC, C, inp, C, w, C, accumulate ? 1.0f : 0.0f, out, OC); return; }
    float *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C);
    ref_ops_matmul_forward_f32(out, fi, fw, N, C, OC, accumulate);
    f32_put(fi); f32_put(fw);
}
void ops_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                         const act_t* w, int N, int C, int OC) {
    if (FAST_GEMM) {
        if (dinp) bf16mm_round('N', 'N', N, C, OC, dout, OC, w, C, NULL, dinp, C);
        bf16mm('T', 'N', OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
        return;
    }
    float *fd = widen(dout, (size_t)N * OC), *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C);
    float* fdi = dinp ? f32_alloc((size_t)N * C) : NULL;
    ref_ops_matmul_backward(fdi, dw, fd, fi, fw, N, C, OC);
    if (fdi) narrow(dinp, fdi, (size_t)N * C);
    f32_put(fd); f32_put(fi); f32_put(fw);
}
// the bias added to the fp32 product, then rounded once (the fast build: inside oneDNN's kernel)
void ops_matmul_bias_forward(act_t* out, const act_t* inp, const act_t* w, const act_t* bias, int N, int C,
                             int OC) {
    if (FAST_GEMM) { bf16mm_round('N', 'T', N, OC, C, inp, C, w, C, bias, out, OC); return; }
    float *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C), *fb = widen(bias, (size_t)OC);
    float* fo = f32_alloc((size_t)N * OC);
    ref_ops_matmul_bias_forward(fo, fi, fw, fb, N, C, OC);
    narrow(out, fo, (size_t)N * OC);
    f32_put(fi); f32_put(fw); f32_put(fb);
}
void ops_bias_add_f32(float* out, const act_t* bias, int N, int OC) {
    float* fb = widen(bias, (size_t)OC);
    ref_ops_bias_add_f32(out, fb, N, OC);
    f32_put(fb);
}
// db[OC] += column sums of dout[N, OC], read as bf16: the fp32 kernel's sums (each column summed
// over the rows in order, in double) without its whole-tensor fp32 copy, so the same bits
#define BIAS_BWD_COLS 64
void ops_bias_backward(float* db, const act_t* dout, int N, int OC) {
    const int nb = (OC + BIAS_BWD_COLS - 1) / BIAS_BWD_COLS;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        const int c0 = b * BIAS_BWD_COLS, nc = OC - c0 < BIAS_BWD_COLS ? OC - c0 : BIAS_BWD_COLS;
        double acc[BIAS_BWD_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const act_t* r = dout + (size_t)n * OC + c0;
            for (int c = 0; c < nc; c++) acc[c] += bf16_to_f32(r[c]);
        }
        for (int c = 0; c < nc; c++) db[c0 + c] += (float)acc[c];
    }
}
// the fused op: pre and act rounded once each from the fp32 product (as cuBLASLt's epilogue)
void ops_matmul_gelu_forward(act_t* pre, act_t* act, const act_t* inp, const act_t* w, int N, int C,
                             int OC) {
    if (FAST_GEMM) {
        float* fp = fast_out(0, (size_t)N * OC);
        bf16mm('N', 'T', N, OC, C, inp, C, w, C, 0.0f, fp, OC);
        gelu_round(pre, act, fp, (size_t)N * OC);   // GELU of the fp32 product, as the fused op
        return;
    }
    float *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C);
    float *fp = f32_alloc((size_t)N * OC), *fa = f32_alloc((size_t)N * OC);
    ref_ops_matmul_gelu_forward(fp, fa, fi, fw, N, C, OC);
    narrow(pre, fp, (size_t)N * OC); narrow(act, fa, (size_t)N * OC);
    f32_put(fi); f32_put(fw);
}
void ops_matmul_backward_gelu(act_t* dpre, float* dw, const act_t* dout, const act_t* inp,
                              const act_t* w, const act_t* pre, int N, int C, int OC) {
    if (FAST_GEMM) {
        float* fdp = fast_out(0, (size_t)N * C);
        bf16mm('N', 'N', N, C, OC, dout, OC, w, C, 0.0f, fdp, C);   // dact
        gelu_backward_round(dpre, fdp, pre, (size_t)N * C);
        bf16mm('T', 'N', OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
        return;
    }
    float *fd = widen(dout, (size_t)N * OC), *fi = widen(inp, (size_t)N * C), *fw = widen(w, (size_t)OC * C);
    float *fp = widen(pre, (size_t)N * C), *fdp = f32_alloc((size_t)N * C);
    ref_ops_matmul_backward_gelu(fdp, dw, fd, fi, fw, fp, N, C, OC);
    narrow(dpre, fdp, (size_t)N * C);
    f32_put(fd); f32_put(fi); f32_put(fw); f32_put(fp);
}

// ---- embeddings, norms (fp32 residual stream) -------------------------------------------------
void ops_embedding_forward(float* out, const int* idx, const float* wte, const float* wpe, int B, int T, int C) {
    ref_ops_embedding_forward(out, idx, wte, wpe, B, T, C);
}
void ops_embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx, int B, int T, int C) {
    ref_ops_embedding_backward(dwte, dwpe, dout, idx, B, T, C);
}
void ops_norm_forward(act_t* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, float eps, OpsNormKind kind) {
    float* fo = f32_alloc((size_t)N * C);
    ref_ops_norm_forward(fo, mean, rstd, inp, w, b, N, C, eps, kind);
    narrow(out, fo, (size_t)N * C);
}
void ops_norm_backward(float* dinp, float* dw, float* db, const act_t* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       OpsNormKind kind) {
    float* fd = widen(dout, (size_t)N * C);
    ref_ops_norm_backward(dinp, dw, db, fd, inp, w, mean, rstd, N, C, kind);
    f32_put(fd);
}

// ---- attention ---------------------------------------------------------------------------------
int ops_attn_gate_cols(const OpsAttnShape* s) { return ref_ops_attn_gate_cols(s); }
int ops_attn_qkv_cols(const OpsAttnShape* s) { return ref_ops_attn_qkv_cols(s); }
// Without a qk-norm, RoPE or value gate, q, k, v are qkv's column blocks: the fp32 kernel copies
// them (and their gradients back), so here the bf16 bits are copied (widening and rounding back is
// exact: the same bits without the whole-tensor conversion passes)
static int prep_is_copy(const OpsAttnShape* s) {
    return !s->qk_norm && !s->rope && !attn_gate_at_value(s->gate, s->gate_pos);
}
void ops_attn_prep_forward(act_t* q, act_t* k, act_t* v, float* qk_rstd, const act_t* qkv,
                           const float* qnorm_w, const float* knorm_w, const OpsAttnShape* s) {
    const size_t N = (size_t)s->B * s->T, Hd = (size_t)s->H * s->hd, KVd = (size_t)s->Hkv * s->hd;
    if (prep_is_copy(s)) {
        const size_t QKVG = (size_t)ops_attn_qkv_cols(s), voff = (size_t)attn_v_off(s->H, s->Hkv, s->hd);
        #pragma omp parallel for schedule(static)
        for (size_t n = 0; n < N; n++) {
            const act_t* row = qkv + n * QKVG;
            memcpy(q + n * Hd, row, Hd * sizeof(act_t));
            memcpy(k + n * KVd, row + Hd, KVd * sizeof(act_t));
            memcpy(v + n * KVd, row + voff, KVd * sizeof(act_t));
        }
        return;
    }
    float* fqkv = widen(qkv, N * ops_attn_qkv_cols(s));
    float *fq = f32_alloc(N * Hd), *fk = f32_alloc(N * KVd), *fv = f32_alloc(N * KVd);
    ref_ops_attn_prep_forward(fq, fk, fv, qk_rstd, fqkv, qnorm_w, knorm_w, s);
    narrow(q, fq, N * Hd); narrow(k, fk, N * KVd); narrow(v, fv, N * KVd);
    f32_put(fqkv);
}
// dqkv: the sdpa gate's z columns were written by ops_attention_backward before this op runs
// and must survive, so dqkv goes through fp32 whole (bf16 -> fp32 -> bf16 is exact)
void ops_attn_prep_backward(act_t* dqkv, float* dqnorm_w, float* dknorm_w, const act_t* dq,
                            const act_t* dk, const act_t* dv, const act_t* qkv,
                            const float* qk_rstd, const float* qnorm_w, const float* knorm_w,
                            const OpsAttnShape* s) {
    const size_t N = (size_t)s->B * s->T, Hd = (size_t)s->H * s->hd, KVd = (size_t)s->Hkv * s->hd;
    const size_t QKVG = (size_t)ops_attn_qkv_cols(s);
    if (prep_is_copy(s)) {   // the gradients into their column blocks; the z columns kept
        const size_t voff = (size_t)attn_v_off(s->H, s->Hkv, s->hd);
        #pragma omp parallel for schedule(static)
        for (size_t n = 0; n < N; n++) {
            act_t* row = dqkv + n * QKVG;
            memcpy(row, dq + n * Hd, Hd * sizeof(act_t));
            memcpy(row + Hd, dk + n * KVd, KVd * sizeof(act_t));
            memcpy(row + voff, dv + n * KVd, KVd * sizeof(act_t));
        }
        return;
    }
    float *fdqkv = widen(dqkv, N * QKVG), *fqkv = widen(qkv, N * QKVG);
    float *fdq = widen(dq, N * Hd), *fdk = widen(dk, N * KVd), *fdv = widen(dv, N * KVd);
    ref_ops_attn_prep_backward(fdqkv, dqnorm_w, dknorm_w, fdq, fdk, fdv, fqkv, qk_rstd, qnorm_w, knorm_w, s);
    narrow(dqkv, fdqkv, N * QKVG);
    f32_put(fqkv); f32_put(fdq); f32_put(fdk); f32_put(fdv);
}
// y and yg rounded once each from fp32 (yg from the unrounded y, as the GPU epilogues do)
void ops_attention_forward(act_t* y, act_t* yg, float* lse, const act_t* q, const act_t* k,
                           const act_t* v, const act_t* qkv, const OpsAttnShape* s) {
    // the fast build: the tiles' products on the bf16 units, P rounded to bf16 (attention_bf16.c)
    if (FAST_GEMM) { bf16_attention_forward(y, yg, lse, q, k, v, qkv, s); return; }
    const size_t N = (size_t)s->B * s->T, Hd = (size_t)s->H * s->hd, KVd = (size_t)s->Hkv * s->hd;
    float *fq = widen(q, N * Hd), *fk = widen(k, N * KVd), *fv = widen(v, N * KVd);
    float* fqkv = widen(qkv, N * ops_attn_qkv_cols(s));
    float* fy = f32_alloc(N * Hd);
    float* fyg = yg == y ? fy : f32_alloc(N * Hd);
    ref_ops_attention_forward(fy, fyg, lse, fq, fk, fv, fqkv, s);
    if (fyg != fy) narrow(yg, fyg, N * Hd);
    narrow(y, fy, N * Hd);
    f32_put(fq); f32_put(fk); f32_put(fv); f32_put(fqkv);
}
void ops_attention_backward(act_t* dq, act_t* dk, act_t* dv, act_t* dqkv, act_t* scratch,
                            const act_t* dyg, const act_t* q, const act_t* k, const act_t* v,
                            const act_t* y, const float* lse, const act_t* qkv,
                            const OpsAttnShape* s) {
    (void)scratch;   // the fp32 kernel gets its own
    if (FAST_GEMM) { bf16_attention_backward(dq, dk, dv, dqkv, dyg, q, k, v, y, lse, qkv, s); return; }
    const size_t N = (size_t)s->B * s->T, Hd = (size_t)s->H * s->hd, KVd = (size_t)s->Hkv * s->hd;
    const size_t QKVG = (size_t)ops_attn_qkv_cols(s);
    float *fdyg = widen(dyg, N * Hd), *fq = widen(q, N * Hd), *fk = widen(k, N * KVd), *fv = widen(v, N * KVd);
    float *fy = widen(y, N * Hd), *fqkv = widen(qkv, N * QKVG), *fdqkv = widen(dqkv, N * QKVG);
    float *fdq = f32_alloc(N * Hd), *fdk = f32_alloc(N * KVd), *fdv = f32_alloc(N * KVd), *fs = f32_alloc(N * Hd);
    ref_ops_attention_backward(fdq, fdk, fdv, fdqkv, fs, fdyg, fq, fk, fv, fy, lse, fqkv, s);
    narrow(dq, fdq, N * Hd); narrow(dk, fdk, N * KVd); narrow(dv, fdv, N * KVd); narrow(dqkv, fdqkv, N * QKVG);
    f32_put(fs); f32_put(fdyg); f32_put(fq); f32_put(fk); f32_put(fv); f32_put(fy); f32_put(fqkv);
}

// ---- KV cache -----------------------------------------------------------------------------------
// the cache is act_t: writing it copies bf16 bits (no rounding)
void ops_kv_cache_write(act_t* kc, act_t* vc, const act_t* k, const act_t* v, int slot0, int Tc,
                        const OpsAttnShape* s) {
    const size_t ldk = (size_t)s->Hkv * s->hd;
    for (int b = 0; b < s->B; b++) {
        memcpy(kc + ((size_t)b * Tc + slot0) * ldk, k + (size_t)b * s->T * ldk, (size_t)s->T * ldk * sizeof(act_t));
        memcpy(vc + ((size_t)b * Tc + slot0) * ldk, v + (size_t)b * s->T * ldk, (size_t)s->T * ldk * sizeof(act_t));
    }
}
void ops_attention_cached_forward(act_t* y, act_t* yg, float* lse, float* sink, const act_t* q,
                                  const act_t* kc, const act_t* vc, const act_t* qkv, int n_ctx,
                                  int Tc, int n_sink, const OpsAttnShape* s) {
    const size_t N = (size_t)s->B * s->T, Hd = (size_t)s->H * s->hd, C = (size_t)s->B * Tc * s->Hkv * s->hd;
    float *fq = widen(q, N * Hd), *fk = widen(kc, C), *fv = widen(vc, C);
    float* fqkv = widen(qkv, N * ops_attn_qkv_cols(s));
    float* fy = f32_alloc(N * Hd);
    float* fyg = yg == y ? fy : f32_alloc(N * Hd);
    ref_ops_attention_cached_forward(fy, fyg, lse, sink, fq, fk, fv, fqkv, n_ctx, Tc, n_sink, s);
    if (fyg != fy) narrow(yg, fyg, N * Hd);
    narrow(y, fy, N * Hd);
    f32_put(fq); f32_put(fk); f32_put(fv); f32_put(fqkv);
}
void ops_rope_rows(act_t* x, int n_rows, int n_heads, int pos0, int dir, const OpsAttnShape* s) {
    const size_t n = (size_t)n_rows * n_heads * s->hd;
    float* fx = widen(x, n);
    ref_ops_rope_rows(fx, n_rows, n_heads, pos0, dir, s);
    narrow(x, fx, n);
}

// ---- probe statistics --------------------------------------------------------------------------
void ops_attn_first_token(float* head_mean, const act_t* q, const act_t* k, const float* lse,
                          const OpsAttnShape* s) {
    const size_t N = (size_t)s->B * s->T;
    float *fq = widen(q, N * s->H * s->hd), *fk = widen(k, N * s->Hkv * s->hd);
    ref_ops_attn_first_token(head_mean, fq, fk, lse, s);
    f32_put(fq); f32_put(fk);
}
void ops_gate_stats(const act_t* qkv, const OpsAttnShape* s, double* sum, long* count, long* hist) {
    float* f = widen(qkv, (size_t)s->B * s->T * ops_attn_qkv_cols(s));
    ref_ops_gate_stats(f, s, sum, count, hist);
    f32_put(f);
}
void ops_absmax(const float* x, const float* base, int N, int C, float* max, int* pos) {
    ref_ops_absmax(x, base, N, C, max, pos);
}
float ops_abs_median(const float* x, const float* base, int N, int C) { return ref_ops_abs_median(x, base, N, C); }
void ops_attn_logit_max(float* head_max, const act_t* q, const act_t* k, const OpsAttnShape* s) {
    const size_t N = (size_t)s->B * s->T;
    float *fq = widen(q, N * s->H * s->hd), *fk = widen(k, N * s->Hkv * s->hd);
    ref_ops_attn_logit_max(head_max, fq, fk, s);
    f32_put(fq); f32_put(fk);
}
float ops_logits_absmax(const act_t* logits, int N, int V, int Vp) {
    float* f = widen(logits, (size_t)N * Vp);
    float m = ref_ops_logits_absmax(f, N, V, Vp);
    f32_put(f);
    return m;
}
void ops_sumsq_ranges(double* out, const float* const* x, const float* const* y, const size_t* n, int nr) {
    ref_ops_sumsq_ranges(out, x, y, n, nr);
}

// ---- MLP activations ---------------------------------------------------------------------------
void ops_swiglu_forward(act_t* h, const act_t* gu, int N, int F) {
    float *fgu = widen(gu, (size_t)N * 2 * F), *fh = f32_alloc((size_t)N * F);
    ref_ops_swiglu_forward(fh, fgu, N, F);
    narrow(h, fh, (size_t)N * F);
    f32_put(fgu);
}
void ops_swiglu_backward(act_t* dgu, const act_t* dh, const act_t* gu, int N, int F) {
    float *fdh = widen(dh, (size_t)N * F), *fgu = widen(gu, (size_t)N * 2 * F), *fdgu = f32_alloc((size_t)N * 2 * F);
    ref_ops_swiglu_backward(fdgu, fdh, fgu, N, F);
    narrow(dgu, fdgu, (size_t)N * 2 * F);
    f32_put(fdh); f32_put(fgu);
}
void ops_gelu_forward(act_t* out, const act_t* inp, size_t n) {
    float *fi = widen(inp, n), *fo = f32_alloc(n);
    ref_ops_gelu_forward(fo, fi, n);
    narrow(out, fo, n);
    f32_put(fi);
}
void ops_gelu_backward(act_t* dinp, const act_t* dout, const act_t* inp, size_t n) {
    float *fd = widen(dout, n), *fi = widen(inp, n), *fdi = f32_alloc(n);
    ref_ops_gelu_backward(fdi, fd, fi, n);
    narrow(dinp, fdi, n);
    f32_put(fd); f32_put(fi);
}

// ---- MoE (the router, its statistics and the plan are fp32 and integers: passed through) ----
void ops_moe_router_forward(float* probs, int* topk_idx, float* topk_w, float* lse,
                            const float* logits, int N, int E, int k, OpsRouter kind) {
    ref_ops_moe_router_forward(probs, topk_idx, topk_w, lse, logits, N, E, k, kind);
}
void ops_moe_router_backward(float* dlogits, const float* dtopk_w, const float* logits,
                             const float* probs, const int* topk_idx, const float* topk_w,
                             const float* lse, const float* aux_grad, float z_grad, int N, int E,
                             int k, OpsRouter kind) {
    ref_ops_moe_router_backward(dlogits, dtopk_w, logits, probs, topk_idx, topk_w, lse, aux_grad, z_grad, N, E, k, kind);
}
void ops_moe_router_stats(double* p_sum, double* lse_sq, double* entropy, const float* probs,
                          const float* lse, int N, int E) {
    ref_ops_moe_router_stats(p_sum, lse_sq, entropy, probs, lse, N, E);
}
void ops_moe_dispatch_plan(int* counts, int* offsets, int* row_slot, int* slot_row,
                           const int* topk_idx, int N, int E, int k, int capacity) {
    ref_ops_moe_dispatch_plan(counts, offsets, row_slot, slot_row, topk_idx, N, E, k, capacity);
}
// a gather moves values: the bf16 bits are copied as they are
void ops_moe_gather(act_t* xp, const act_t* x, const int* row_slot, int R, int k, int C) {
    for (int r = 0; r < R; r++)
        memcpy(xp + (size_t)r * C, x + (size_t)(row_slot[r] / k) * C, (size_t)C * sizeof(act_t));
}
void ops_moe_gather_backward(act_t* dx, const act_t* dxp, const int* slot_row, int N, int k, int C) {
    const size_t R = moe_rows(slot_row, (size_t)N * k);
    float *fdx = widen(dx, (size_t)N * C), *fdxp = widen(dxp, R * C);
    ref_ops_moe_gather_backward(fdx, fdxp, slot_row, N, k, C);
    narrow(dx, fdx, (size_t)N * C);
    f32_put(fdxp);
}
void ops_moe_combine(float* out, const act_t* yp, const float* topk_w, const int* slot_row,
                     int N, int k, int C) {
    float* fyp = widen(yp, moe_rows(slot_row, (size_t)N * k) * C);
    ref_ops_moe_combine(out, fyp, topk_w, slot_row, N, k, C);
    f32_put(fyp);
}
void ops_moe_combine_backward(act_t* dyp, float* dtopk_w, const float* dout, const act_t* yp,
                              const float* topk_w, const int* slot_row, int N, int k, int C) {
    const size_t R = moe_rows(slot_row, (size_t)N * k);
    float *fyp = widen(yp, R * C), *fdyp = f32_alloc(R * C);
    ref_ops_moe_combine_backward(fdyp, dtopk_w, dout, fyp, topk_w, slot_row, N, k, C);
    narrow(dyp, fdyp, R * C);
    f32_put(fyp);
}
void ops_grouped_matmul_forward(act_t* out, const act_t* inp, const act_t* w, const int* offsets,
                                int G, int C, int OC) {
    const size_t R = (size_t)offsets[G];
    if (FAST_GEMM) {   // one GEMM per expert over its rows (the grouped op of the fp32 kernels)
        float* fo = f32_alloc(R * OC);
        for (int g = 0; g < G; g++) {
            const int r0 = offsets[g], rows = offsets[g + 1] - offsets[g];
            if (rows > 0) bf16mm_var('N', 'T', rows, OC, C, inp + (size_t)r0 * C, C, w + (size_t)g * OC * C, C, 0.0f,
                                 fo + (size_t)r0 * OC, OC);
        }
        narrow(out, fo, R * OC);
        return;
    }
    float *fi = widen(inp, R * C), *fw = widen(w, (size_t)G * OC * C), *fo = f32_alloc(R * OC);
    ref_ops_grouped_matmul_forward(fo, fi, fw, offsets, G, C, OC);
    narrow(out, fo, R * OC);
    f32_put(fi); f32_put(fw);
}
void ops_grouped_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                                 const act_t* w, const int* offsets, int G, int C, int OC) {
    const size_t R = (size_t)offsets[G];
    if (FAST_GEMM) {
        float* fdi = dinp ? f32_alloc(R * C) : NULL;
        for (int g = 0; g < G; g++) {
            const int r0 = offsets[g], rows = offsets[g + 1] - offsets[g];
            if (rows <= 0) continue;
            const act_t* dy = dout + (size_t)r0 * OC;
            if (fdi) bf16mm_var('N', 'N', rows, C, OC, dy, OC, w + (size_t)g * OC * C, C, 0.0f, fdi + (size_t)r0 * C, C);
            bf16mm_var('T', 'N', OC, C, rows, dy, OC, inp + (size_t)r0 * C, C, 1.0f, dw + (size_t)g * OC * C, C);
        }
        if (fdi) narrow(dinp, fdi, R * C);
        return;
    }
    float *fd = widen(dout, R * OC), *fi = widen(inp, R * C), *fw = widen(w, (size_t)G * OC * C);
    float* fdi = dinp ? f32_alloc(R * C) : NULL;
    ref_ops_grouped_matmul_backward(fdi, dw, fd, fi, fw, offsets, G, C, OC);
    if (fdi) narrow(dinp, fdi, R * C);
    f32_put(fd); f32_put(fi); f32_put(fw);
}
void ops_sigmoid_gate_add_forward(float* out, const act_t* y, const float* z, int N, int C) {
    float* fy = widen(y, (size_t)N * C);
    ref_ops_sigmoid_gate_add_forward(out, fy, z, N, C);
    f32_put(fy);
}
void ops_sigmoid_gate_add_backward(act_t* dy, float* dz, const float* dout, const act_t* y,
                                   const float* z, int N, int C) {
    float *fy = widen(y, (size_t)N * C), *fdy = f32_alloc((size_t)N * C);
    ref_ops_sigmoid_gate_add_backward(fdy, dz, dout, fy, z, N, C);
    narrow(dy, fdy, (size_t)N * C);
    f32_put(fy);
}

// ---- Gated DeltaNet (fp32 on every backend: passed through) -------------------------------------
int ops_gdn_keeps_saved(void) { return ref_ops_gdn_keeps_saved(); }
void ops_gdn_forward(float* o, float* state_out, float* saved, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const float* state_in, const OpsGdnShape* s) {
    ref_ops_gdn_forward(o, state_out, saved, q, k, v, g, beta, state_in, s);
}
void ops_gdn_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                      const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const float* saved, const OpsGdnShape* s) {
    ref_ops_gdn_backward(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, saved, s);
}
void ops_gdn_gates_forward(float* g, float* beta, const float* ba, const float* A_log, const float* dt_bias,
                           int N, int Hv) {
    ref_ops_gdn_gates_forward(g, beta, ba, A_log, dt_bias, N, Hv);
}
void ops_gdn_gates_backward(float* dba, float* dA_log, float* ddt_bias, const float* dg, const float* dbeta,
                            const float* ba, const float* A_log, const float* dt_bias, int N, int Hv) {
    ref_ops_gdn_gates_backward(dba, dA_log, ddt_bias, dg, dbeta, ba, A_log, dt_bias, N, Hv);
}
void ops_conv1d_silu_forward(float* out, float* pre, float* state_out, const float* x, const float* w,
                             const float* state_in, const int* doc_start, int B, int T, int C, int K) {
    ref_ops_conv1d_silu_forward(out, pre, state_out, x, w, state_in, doc_start, B, T, C, K);
}
void ops_conv1d_silu_backward(float* dx, float* dw, const float* dout, const float* x, const float* pre,
                              const float* w, const int* doc_start, int B, int T, int C, int K) {
    ref_ops_conv1d_silu_backward(dx, dw, dout, x, pre, w, doc_start, B, T, C, K);
}
void ops_l2norm_forward(float* y, float* rinv, const float* x, int N, int heads, int n, int ldx, int ldy,
                        float eps) {
    ref_ops_l2norm_forward(y, rinv, x, N, heads, n, ldx, ldy, eps);
}
void ops_l2norm_backward(float* dx, const float* dy, const float* x, const float* rinv, int N, int heads, int n,
                         int ldx, int ldy) {
    ref_ops_l2norm_backward(dx, dy, x, rinv, N, heads, n, ldx, ldy);
}
void ops_rmsnorm_gated_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int rows,
                               int n, float eps, OpsGateAct act) {
    ref_ops_rmsnorm_gated_forward(y, rstd, x, z, w, rows, n, eps, act);
}
void ops_rmsnorm_gated_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                const float* w, const float* rstd, int rows, int n, OpsGateAct act) {
    ref_ops_rmsnorm_gated_backward(dx, dz, dw, dy, x, z, w, rstd, rows, n, act);
}

// ---- cross-entropy (fp32 over bf16 logits; dlogits may alias logits) --------------------------
#ifdef _OPENMP
#include <omp.h>
static int xent_threads(void) { return omp_get_max_threads(); }
static int xent_thread(void) { return omp_get_thread_num(); }
#else
static int xent_threads(void) { return 1; }
static int xent_thread(void) { return 0; }
#endif
void ops_xent_forward(float* losses, float* lse, const act_t* logits, const int* targets, int N,
                      int V, int Vp) {
    // row by row (the fp32 kernel's rows are independent): each row widened into a buffer of
    // its thread's, not the whole N x Vp (412 MB at GPT-2 124M B=8 T=256) through memory
    float* rows = f32_get((size_t)xent_threads() * Vp);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* fl = rows + (size_t)xent_thread() * Vp;
        const act_t* l = logits + (size_t)n * Vp;
        for (int i = 0; i < Vp; i++) fl[i] = bf16_to_f32(l[i]);
        ref_ops_xent_forward(losses + n, lse + n, fl, targets + n, 1, V, Vp);
    }
    f32_put(rows);
}
// the backward (lse_in: the forward's lse) or the one-pass op (lse_in NULL: losses and lse written),
// row by row as the forward: each row widened, the fp32 kernel on it in place, rounded out (dlogits
// may alias logits: the row is read before it is written)
static void xent_rows(float* losses, float* lse, const float* lse_in, act_t* dlogits, const act_t* logits,
                      const int* targets, float dloss, int N, int V, int Vp) {
    float* rows = f32_get((size_t)xent_threads() * Vp);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* fl = rows + (size_t)xent_thread() * Vp;
        const act_t* l = logits + (size_t)n * Vp;
        act_t* d = dlogits + (size_t)n * Vp;
        for (int i = 0; i < Vp; i++) fl[i] = bf16_to_f32(l[i]);
        if (lse_in) ref_ops_xent_backward(fl, fl, lse_in + n, targets + n, dloss, 1, V, Vp);
        else ref_ops_xent_forward_backward(losses + n, lse + n, fl, fl, targets + n, dloss, 1, V, Vp);
        for (int i = 0; i < Vp; i++) d[i] = bf16_from_f32(fl[i]);
    }
    f32_put(rows);
}
void ops_xent_backward(act_t* dlogits, const act_t* logits, const float* lse, const int* targets,
                       float dloss, int N, int V, int Vp) {
    xent_rows(NULL, NULL, lse, dlogits, logits, targets, dloss, N, V, Vp);
}
void ops_xent_forward_backward(float* losses, float* lse, act_t* dlogits, const act_t* logits,
                               const int* targets, float dloss, int N, int V, int Vp) {
    xent_rows(losses, lse, NULL, dlogits, logits, targets, dloss, N, V, Vp);
}

// ---- optimizer (fp32) -----------------------------------------------------------------------
double ops_sumsq(const float* x, size_t n) { return ref_ops_sumsq(x, n); }
void ops_sumsq_chunks(double* part, const float* x, size_t n) { ref_ops_sumsq_chunks(part, x, n); }
void ops_adamw(float* p, const float* grad, float* m, float* v, size_t n, float lr, float b1,
               float b2, float eps, float wd, float grad_scale, int t) {
    ref_ops_adamw(p, grad, m, v, n, lr, b1, b2, eps, wd, grad_scale, t);
}
