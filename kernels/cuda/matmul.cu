// kernels/cuda/matmul.cu: GEMMs through cuBLASLt: act_t (fp32 or bf16) in, act_t or fp32 out,
// fp32 accumulation always.
//
// Row-major tensors are handed to cuBLASLt (column-major) as their transposes: a row-major
// X[R, C] is the column-major C x R matrix with leading dimension C. So
//   out[N,OC] = inp[N,C] @ w[OC,C]^T     is  out^T[OC,N] = w^T... : D = op(A) op(B) with
//   A = w (col-major C x OC, transposed), B = inp (col-major C x N), D = out (col-major OC x N),
// the same mapping llm.c uses for its cuBLAS calls.
//
// Types: A and B (activations and the weights' compute copy) are act_t: fp32, or bf16 under
// GATEDGPT_ACT_BF16. D is act_t for activations and fp32 for the weight gradients (dw += ...),
// the residual stream (ops_matmul_forward_f32 with accumulate) and the router's logits. The
// scale type (alpha, beta) is fp32 in every case.
//
// Precision, fp32 A/B: CUBLAS_COMPUTE_32F (full fp32 FMA, the default) or, with
// GATEDGPT_CUDA_TF32=1 in the environment at ops_init, CUBLAS_COMPUTE_32F_FAST_TF32 (inputs
// rounded to TF32, 10-bit mantissa: ~8x the throughput on tensor cores, ~1e-3 relative error),
// or with GATEDGPT_CUDA_BF16_GEMM=1 CUBLAS_COMPUTE_32F_FAST_16BF (inputs rounded to bf16, 8-bit
// mantissa, fp32 accumulation: the bf16 tensor-core rate, ~1e-2 relative error); the GPU tests
// then loosen their tolerances. Default off so that CUDA and CPU agree to fp32 rounding.
// bf16 A/B: CUBLAS_COMPUTE_32F always (bf16 tensor cores, fp32 accumulation; the inputs are
// already bf16, so the fast modes above have nothing left to round and do not apply).
//
// Determinism: cuBLASLt gives the same bits run to run for the same algorithm, shapes,
// alignment and GPU; the algorithm chosen for a shape is cached, so it never changes mid-run.
#include "cuda_common.h"
#include <cublasLt.h>
#include <stdint.h>

#define CUBLAS_CHECK(call) cuda_cublas_check((int)(call), #call, __FILE__, __LINE__, NULL)

void cuda_cublas_check(int status, const char* what, const char* file, int line, const char* not_supported_hint) {
    cublasStatus_t s = (cublasStatus_t)status;
    if (s == CUBLAS_STATUS_SUCCESS) return;
    const char* hint = "rerun with GATEDGPT_CUDA_SYNC=1; a fault in an earlier kernel is often reported here";
    if (s == CUBLAS_STATUS_ALLOC_FAILED) hint = "out of GPU memory: lower [train] batch_size or seq_len";
    if (s == CUBLAS_STATUS_NOT_SUPPORTED)
        hint = not_supported_hint ? not_supported_hint : "cuBLASLt has no algorithm for this shape, layout or alignment";
    if (s == CUBLAS_STATUS_NOT_INITIALIZED) hint = "cuBLAS did not initialise: is a GPU visible (nvidia-smi)?";
    fprintf(stderr, "error: %s:%d: %s: %s (%s)\n  hint: %s\n", file, line, what,
            cublasLtGetStatusString(s), cublasLtGetStatusName(s), hint);
    exit(1);
}

static cublasLtHandle_t lt_handle;
static void* lt_workspace;
static const size_t LT_WORKSPACE_BYTES = CUDA_LT_WORKSPACE_BYTES;   // 32 MiB, what cuBLAS asks for on Hopper (kernels/scratch.h)
static cublasComputeType_t lt_compute = CUBLAS_COMPUTE_32F;   // for fp32 A/B (the environment's mode)

void cuda_matmul_init(int math) {
    if (!lt_handle) {
        CUBLAS_CHECK(cublasLtCreate(&lt_handle));
        lt_workspace = ops_malloc(LT_WORKSPACE_BYTES);
    }
    lt_compute = math == CUDA_MATH_BF16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                 : math == CUDA_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
}

// The largest power of two (up to 256) that divides the address: cuBLASLt picks algorithms by
// the alignment it is promised, so the promise must be true. At least 2: a bf16 element's size
// (an fp32 pointer is always 4-aligned, so fp32 tensors get what they got before).
static uint32_t lt_alignment(const void* p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 2 && (a % al) != 0) al >>= 1;
    return al;
}

static size_t lt_type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
static const char* lt_type_name(cudaDataType_t t) { return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : "?"; }

// The algorithm chosen for one problem, kept so that a shape always runs the same algorithm
// (and the heuristic query, tens of microseconds, runs once per shape). An open-addressing hash
// table: the experts of an MoE layer bring a new row count every step, so shapes are many. When
// the table is full a shape is planned on every call (the heuristic is deterministic, so the
// same shape still gets the same algorithm).
typedef struct {
    int used, ta, tb, m, n, k, lda, ldb, ldd;
    uint32_t al_a, al_b, al_d;
    cudaDataType_t ab, dt;   // A/B and D types
    cublasComputeType_t compute;
    int epi, ldaux;        // CUDA_EPI_* and the aux matrix's leading dimension (0 without one)
    uint32_t al_aux;
    int noalgo;            // cuBLASLt has no algorithm for this (epilogue) problem: callers fall back
    cublasLtMatmulAlgo_t algo;
} LtPlan;
#define LT_MAX_PLANS 8192   // a power of two
static LtPlan lt_plans[LT_MAX_PLANS];

static int lt_plan_same(const LtPlan* p, const LtPlan* q) {
    return p->ta == q->ta && p->tb == q->tb && p->m == q->m && p->n == q->n && p->k == q->k &&
           p->lda == q->lda && p->ldb == q->ldb && p->ldd == q->ldd && p->al_a == q->al_a &&
           p->al_b == q->al_b && p->al_d == q->al_d && p->ab == q->ab && p->dt == q->dt &&
           p->compute == q->compute && p->epi == q->epi && p->ldaux == q->ldaux && p->al_aux == q->al_aux;
}
// the slot of key: where it is, or the empty slot where it belongs (NULL when full and absent)
static LtPlan* lt_plan_slot(const LtPlan* key) {
    uint32_t h = 2166136261u;   // FNV-1a over the shape fields
    const int f[17] = {key->ta, key->tb, key->m, key->n, key->k, key->lda, key->ldb, key->ldd,
                       (int)key->al_a, (int)key->al_b, (int)key->al_d, (int)key->ab, (int)key->dt,
                       (int)key->compute, key->epi, key->ldaux, (int)key->al_aux};
    for (int i = 0; i < 17; i++) h = (h ^ (uint32_t)f[i]) * 16777619u;
    h ^= h >> 15;   // a final mix: the low bits (the slot) then depend on every bit of the shape
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    for (int probe = 0; probe < LT_MAX_PLANS; probe++) {
        LtPlan* p = &lt_plans[(h + (uint32_t)probe) & (LT_MAX_PLANS - 1)];
        if (!p->used || lt_plan_same(p, key)) return p;
    }
    return NULL;
}

// D[m, n] (column-major, leading dim ldd) = op(A)[m, k] op(B)[k, n] + beta * D, then the
// epilogue: CUDA_EPI_GELU_AUX: aux = that product, D = gelu(aux); CUDA_EPI_DGELU: D = product *
// gelu'(aux) (aux read). aux is m x n column-major with leading dim ldaux. Returns 0, or -1 when
// cuBLASLt has no algorithm for the epilogue on this problem (remembered per shape; the caller
// computes it unfused). Without an epilogue a missing algorithm is an error.
// op = transpose when ta / tb; A is stored (ta ? k x m : m x k) with leading dim lda, B likewise.
// A and B have type ab, D (and aux) type dt: CUDA_R_32F or CUDA_R_16BF.
//
// The aux matrix has D's type: cuBLASLt's default for the GELU epilogues when
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE is left unset (its header: "GELU input matrix
// elements type is the same as the type of elements of the output matrix"; other aux types are
// for fp8 outputs only), so the attribute is not set. Its leading dimension must be a multiple of
// 8 elements (and >= m, which every caller has): otherwise -1 here, without asking cuBLASLt, and
// the caller runs the unfused ops.
int cuda_gemm_ep(int ta, int tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                 cudaDataType_t ab, void* D, int ldd, cudaDataType_t dt, float beta, int epi,
                 const void* aux, int ldaux) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) {   // an empty sum: D = beta * D; only beta 0 or 1 occur here
        if (epi != CUDA_EPI_NONE) return -1;   // the caller's unfused path handles the activation
        const size_t es = lt_type_size(dt);
        if (beta == 0.0f)
            for (int j = 0; j < n; j++)
                CUDA_CHECK(cudaMemsetAsync((char*)D + (size_t)j * ldd * es, 0, (size_t)m * es, cuda_stream));
        return 0;
    }
    if (epi != CUDA_EPI_NONE && dt != CUDA_R_32F && ldaux % 8 != 0) return -1;   // (fp32: cuBLASLt is asked, as before)
    // bf16 inputs: plain fp32 compute (the TF32 / bf16-rounding modes are for fp32 inputs)
    const cublasComputeType_t compute = ab == CUDA_R_32F ? lt_compute : CUBLAS_COMPUTE_32F;
    LtPlan key = {1, ta, tb, m, n, k, lda, ldb, ldd, lt_alignment(A), lt_alignment(B), lt_alignment(D),
                  ab, dt, compute, epi, epi ? ldaux : 0, epi ? lt_alignment(aux) : 0, 0, {}};
    LtPlan* plan = lt_plan_slot(&key);
    if (plan && plan->used && plan->noalgo) return -1;

    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));   // fp32 alpha, beta
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    if (epi != CUDA_EPI_NONE) {
        cublasLtEpilogue_t e = epi == CUDA_EPI_GELU_AUX ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_DGELU;
        int64_t ldx = ldaux;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldx, sizeof(ldx)));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd));   // C = D: same layout and type

    if (!plan || !plan->used) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        size_t ws = LT_WORKSPACE_BYTES;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.al_a, sizeof(key.al_a)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.al_b, sizeof(key.al_b)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.al_d, sizeof(key.al_d)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.al_d, sizeof(key.al_d)));
        if (dt != CUDA_R_32F) {
            // a split-K algorithm may add its partial sums in the output type (the INPLACE and
            // OUTPUT_TYPE schemes): with bf16 D that would round every partial sum. Only the
            // reduction in the compute type (fp32) keeps the one rounding of the contract.
            uint32_t rs = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &rs, sizeof(rs)));
        }
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle, desc, la, lb, ld, ld, pref, 1, &heur, &found);
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        if (epi == CUDA_EPI_NONE) CUBLAS_CHECK(st);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            if (epi == CUDA_EPI_NONE) {
                char msg[256];
                snprintf(msg, sizeof(msg), "cuBLASLt: no algorithm for a GEMM %s x %s -> %s m=%d n=%d k=%d (op %c%c, ld %d %d %d)",
                         lt_type_name(ab), lt_type_name(ab), lt_type_name(dt), m, n, k, ta ? 'T' : 'N',
                         tb ? 'T' : 'N', lda, ldb, ldd);
                cuda_fail(__FILE__, __LINE__, msg, "an unusual shape or misaligned tensor; report the shape");
            }
            key.noalgo = 1;   // this epilogue here: never again asked, computed unfused
            if (plan) *plan = key;
            CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
            CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
            CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
            CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
            return -1;
        }
        key.algo = heur.algo;
        if (plan) *plan = key;
        else plan = &key;
    }
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_handle, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &plan->algo,
                                lt_workspace, LT_WORKSPACE_BYTES, cuda_stream));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    return 0;
}

void cuda_gemm(int ta, int tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
               cudaDataType_t ab, void* D, int ldd, cudaDataType_t dt, float beta) {
    cuda_gemm_ep(ta, tb, m, n, k, A, lda, B, ldb, ab, D, ldd, dt, beta, CUDA_EPI_NONE, NULL, 0);
}

// out[N,OC] (=) inp[N,C] @ w[OC,C]^T, all act_t; fp32 accumulation, rounded to act_t once
//   column-major: out^T[OC,N] = (w as C x OC)^T (inp as C x N)
void ops_matmul_forward(act_t* out, const act_t* inp, const act_t* w, int N, int C, int OC) {
    CUDA_OP_TIMER("ops_matmul_forward");
    cuda_gemm(1, 0, OC, N, C, w, C, inp, C, CUDA_R_ACT, out, OC, CUDA_R_ACT, 0.0f);
}

// the same product into fp32: out[N,OC] (=|+=) inp[N,C] @ w[OC,C]^T (the residual stream, +=,
// and the router's logits, =)
void ops_matmul_forward_f32(float* out, const act_t* inp, const act_t* w, int N, int C, int OC,
                            int accumulate) {
    CUDA_OP_TIMER("ops_matmul_forward_f32");
    cuda_gemm(1, 0, OC, N, C, w, C, inp, C, CUDA_R_ACT, out, OC, CUDA_R_32F, accumulate ? 1.0f : 0.0f);
}

// ---- linear biases ([model] bias) ----------------------------------------------------------
// out[n, c] = bias[c] (act_t to act_t: an exact copy)
__global__ void bias_rows_kernel(cact_t* out, const cact_t* bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) return;
    out[i] = bias[i % OC];
}

// out = the bias in every row, then the GEMM adds the product (beta = 1): cuBLASLt sums the fp32
// product and the bias and rounds once to act_t (the contract of ops.h; the bf16 emulation's)
void ops_matmul_bias_forward(act_t* out, const act_t* inp, const act_t* w, const act_t* bias, int N, int C,
                             int OC) {
    if (!bias) { ops_matmul_forward(out, inp, w, N, C, OC); return; }
    CUDA_OP_TIMER("ops_matmul_bias_forward");
    bias_rows_kernel<<<cuda_blocks((size_t)N * OC, 256), 256, 0, cuda_stream>>>(CACT(out), CCACT(bias), N, OC);
    CUDA_LAUNCH_CHECK("bias_rows_kernel");
    cuda_gemm(1, 0, OC, N, C, w, C, inp, C, CUDA_R_ACT, out, OC, CUDA_R_ACT, 1.0f);
}

__global__ void bias_add_f32_kernel(float* out, const cact_t* bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) return;
    out[i] += act_ld(bias[i % OC]);
}

void ops_bias_add_f32(float* out, const act_t* bias, int N, int OC) {
    CUDA_OP_TIMER("ops_bias_add_f32");
    bias_add_f32_kernel<<<cuda_blocks((size_t)N * OC, 256), 256, 0, cuda_stream>>>(out, CCACT(bias), N, OC);
    CUDA_LAUNCH_CHECK("bias_add_f32_kernel");
}

// db[c] += sum over n of dout[n, c]. A block takes 32 columns (threadIdx.x, coalesced) and
// BIAS_RG row groups (threadIdx.y): thread (x, y) sums the rows y, y + BIAS_RG, ... in order,
// then row group 0 adds the BIAS_RG partial sums in order. A fixed order that depends on nothing
// but N: deterministic without atomics or scratch.
#define BIAS_RG 32
__global__ void bias_backward_kernel(float* db, const cact_t* dout, int N, int OC) {
    __shared__ float part[BIAS_RG][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < OC)
        for (int n = threadIdx.y; n < N; n += BIAS_RG) s += act_ld(dout[(size_t)n * OC + c]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float t = 0.0f;
        for (int y = 0; y < BIAS_RG; y++) t += part[y][threadIdx.x];
        db[c] += t;
    }
}

void ops_bias_backward(float* db, const act_t* dout, int N, int OC) {
    CUDA_OP_TIMER("ops_bias_backward");
    dim3 block(32, BIAS_RG);
    bias_backward_kernel<<<(OC + 31) / 32, block, 0, cuda_stream>>>(db, CCACT(dout), N, OC);
    CUDA_LAUNCH_CHECK("bias_backward_kernel");
}

// dinp[N,C] = dout[N,OC] @ w[OC,C]:   dinp^T[C,N] = (w as C x OC) (dout as OC x N)      (act_t)
// dw[OC,C] += dout^T @ inp:           dw^T[C,OC] += (inp as C x N) (dout as OC x N)^T   (fp32)
void ops_matmul_backward(act_t* dinp, float* dw, const act_t* dout, const act_t* inp,
                         const act_t* w, int N, int C, int OC) {
    CUDA_OP_TIMER("ops_matmul_backward");
    if (dinp) cuda_gemm(0, 0, C, N, OC, w, C, dout, OC, CUDA_R_ACT, dinp, C, CUDA_R_ACT, 0.0f);
    cuda_gemm(0, 1, C, OC, N, inp, C, dout, OC, CUDA_R_ACT, dw, C, CUDA_R_32F, 1.0f);
}

// The GPT-2 MLP's GEMMs with the GELU in cuBLASLt's epilogue (GELU_AUX keeps the pre-activation
// for the backward; DGELU multiplies by the derivative at it). cuBLASLt's GELU is the tanh
// approximation, as ours (the GPU test compares with the CPU's at fp32 bounds). Where cuBLASLt
// has no algorithm for the epilogue on a shape (remembered), the two unfused ops run instead.
// pre, act, dpre are act_t (the aux matrix has D's type). With bf16 act_t the fused and unfused
// paths round differently: fused, act = gelu(the fp32 product) and dpre = (the fp32 product) *
// gelu'(pre) are rounded once; unfused, the product is rounded to bf16 first (pre, dact) and
// the GELU's result again.
void ops_matmul_gelu_forward(act_t* pre, act_t* act, const act_t* inp, const act_t* w, int N, int C,
                             int OC) {
    CUDA_OP_TIMER("ops_matmul_gelu_forward");
    // act^T[OC, N] = gelu((w as C x OC)^T (inp as C x N)), aux pre^T[OC, N]
    if (cuda_gemm_ep(1, 0, OC, N, C, w, C, inp, C, CUDA_R_ACT, act, OC, CUDA_R_ACT, 0.0f, CUDA_EPI_GELU_AUX,
                     pre, OC) == 0)
        return;
    ops_matmul_forward(pre, inp, w, N, C, OC);
    ops_gelu_forward(act, pre, (size_t)N * OC);
}

void ops_matmul_backward_gelu(act_t* dpre, float* dw, const act_t* dout, const act_t* inp,
                              const act_t* w, const act_t* pre, int N, int C, int OC) {
    CUDA_OP_TIMER("ops_matmul_backward_gelu");
    // dpre^T[C, N] = ((w as C x OC)(dout as OC x N)) * gelu'(pre^T)
    if (cuda_gemm_ep(0, 0, C, N, OC, w, C, dout, OC, CUDA_R_ACT, dpre, C, CUDA_R_ACT, 0.0f, CUDA_EPI_DGELU,
                     pre, C) == 0) {
        cuda_gemm(0, 1, C, OC, N, inp, C, dout, OC, CUDA_R_ACT, dw, C, CUDA_R_32F, 1.0f);   // dw += dout^T inp
        return;
    }
    ops_matmul_backward(dpre, dw, dout, inp, w, N, C, OC);
    ops_gelu_backward(dpre, dpre, pre, (size_t)N * C);   // elementwise: in place is safe
}
