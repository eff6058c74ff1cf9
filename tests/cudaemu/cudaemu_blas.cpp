// tests/cudaemu/cudaemu_blas.cpp: cuBLASLt matmuls and cuBLAS grouped GEMMs of the CUDA emulator
// (tests/cudaemu/cudaemu.h), computed on the CPU from the descriptors the backend builds: the
// layouts (rows, columns, leading dimension), transposes, alpha/beta, the GELU epilogues and the
// data / compute types. What cuBLAS refuses is refused here too (the status it returns):
//   - a layout whose leading dimension is below its row count (INVALID_VALUE);
//   - A and B of different types; bf16 A/B with a D other than bf16 or fp32; fp32 A/B with a
//     D other than fp32; bf16 A/B under a FAST_TF32 / FAST_16BF compute type (NOT_SUPPORTED);
//   - shapes that do not match between A, B and D (INVALID_VALUE);
//   - GELU epilogues with bf16 D whose aux leading dimension is not a multiple of 8, and an aux
//     pointer or leading dimension left unset (NOT_SUPPORTED / INVALID_VALUE);
//   - a grouped GEMM whose A, B and C types differ, or whose pointer arrays are not device memory.
// Products are summed in fp32 in k order (the GPU's order differs: the tests' bounds allow for
// it); fp32 inputs are rounded to TF32 or bf16 first under the FAST_* compute types, as the tensor
// cores do; bf16 outputs are rounded to nearest even once.
#include "cudaemu.h"
#include <cublas_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct EmuLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct EmuDesc {
    cublasComputeType_t compute;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void* aux;
    int64_t ldaux;
    int aux_set, ldaux_set;
};

static float rd_tf32(float x) {   // round to nearest (ties away, as the tensor cores' cvt.rna)
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + 0x1000u) & 0xffffe000u;
    return __uint_as_float(u);
}
static float rd_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

static float ld_el(const void* p, cudaDataType_t t, size_t i) {
    return t == CUDA_R_32F ? ((const float*)p)[i] : __bfloat162float(((const __nv_bfloat16*)p)[i]);
}
static void st_el(void* p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float*)p)[i] = v;
    else ((__nv_bfloat16*)p)[i] = __float2bfloat16(v);
}
static size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

static float gelu_tanh(float x) {
    const float s = 0.7978845608028654f;   // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
static float gelu_tanh_grad(float x) {
    const float s = 0.7978845608028654f;
    float u = s * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * s * (1.0f + 3.0f * 0.044715f * x * x);
}

// the bytes a column-major rows x cols matrix with leading dim ld spans
static size_t span_bytes(uint64_t rows, uint64_t cols, int64_t ld, cudaDataType_t t) {
    if (rows == 0 || cols == 0) return 0;
    return ((cols - 1) * (size_t)ld + rows) * type_bytes(t);
}

// D (m x n, ldd) = alpha op(A) op(B) + beta C, C = D in every call here; returns a status
void emu_prof_add(const char* name, double seconds);
double emu_prof_clock(void);
static cublasStatus_t emu_gemm_(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                               const void* A, cudaDataType_t at, int64_t lda, const void* B, cudaDataType_t bt,
                               int64_t ldb, float beta, const void* C, int64_t ldc, void* D, cudaDataType_t dt,
                               int64_t ldd, cublasComputeType_t compute, cublasLtEpilogue_t epi, void* aux,
                               int64_t ldaux) {
    if (at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (at == CUDA_R_16BF && !(dt == CUDA_R_16BF || dt == CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (at == CUDA_R_32F && dt != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (at != CUDA_R_32F && at != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (at == CUDA_R_16BF && compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const int trA = ta != CUBLAS_OP_N, trB = tb != CUBLAS_OP_N;
    if (lda < (trA ? k : m) || ldb < (trB ? n : k) || ldd < m || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
    emu_check_device_range(A, span_bytes(trA ? k : m, trA ? m : k, lda, at), "cuBLAS A");
    emu_check_device_range(B, span_bytes(trB ? n : k, trB ? k : n, ldb, bt), "cuBLAS B");
    emu_check_device_range(D, span_bytes(m, n, ldd, dt), "cuBLAS D");
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) emu_check_device_range(aux, span_bytes(m, n, ldaux, dt), "cuBLASLt epilogue aux");
    std::vector<float> a((size_t)m * k), b((size_t)k * n);   // op(A) row-major m x k, op(B) k x n
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++) {
            float v = trA ? ld_el(A, at, (size_t)i * lda + p) : ld_el(A, at, (size_t)p * lda + i);
            a[(size_t)i * k + p] = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? rd_tf32(v)
                                   : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? rd_bf16(v) : v;
        }
    for (int p = 0; p < k; p++)
        for (int j = 0; j < n; j++) {
            float v = trB ? ld_el(B, bt, (size_t)p * ldb + j) : ld_el(B, bt, (size_t)j * ldb + p);
            b[(size_t)p * n + j] = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? rd_tf32(v)
                                   : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? rd_bf16(v) : v;
        }
    std::vector<float> acc(n);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) acc[j] = 0.0f;
        for (int p = 0; p < k; p++) {
            const float av = a[(size_t)i * k + p];
            const float* brow = &b[(size_t)p * n];
            for (int j = 0; j < n; j++) acc[j] += av * brow[j];
        }
        for (int j = 0; j < n; j++) {
            float v = alpha * acc[j];
            if (beta != 0.0f) v += beta * ld_el(C, dt, (size_t)j * ldc + i);
            if (epi == CUBLASLT_EPILOGUE_GELU_AUX) {
                st_el(aux, dt, (size_t)j * ldaux + i, v);
                v = gelu_tanh(v);
            } else if (epi == CUBLASLT_EPILOGUE_DGELU) {
                v *= gelu_tanh_grad(ld_el(aux, dt, (size_t)j * ldaux + i));
            }
            st_el(D, dt, (size_t)j * ldd + i, v);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                               const void* A, cudaDataType_t at, int64_t lda, const void* B, cudaDataType_t bt,
                               int64_t ldb, float beta, const void* C, int64_t ldc, void* D, cudaDataType_t dt,
                               int64_t ldd, cublasComputeType_t compute, cublasLtEpilogue_t epi, void* aux,
                               int64_t ldaux) {
    const double t0 = emu_prof_clock();
    cublasStatus_t st = emu_gemm_(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ldc, D, dt, ldd, compute, epi,
                                  aux, ldaux);
    emu_prof_add("cuBLAS GEMM", emu_prof_clock() - t0);
    return st;
}

extern "C" {

// ---- cuBLASLt -----------------------------------------------------------------------------------
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = (cublasLtHandle_t) new int(1); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete (int*)h; return CUBLAS_STATUS_SUCCESS; }
const char* cublasLtGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_?";
    }
}
const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    EmuDesc* e = new EmuDesc{compute, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, 0, 0};
    *d = (cublasLtMatmulDesc_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete (EmuDesc*)d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
    EmuDesc* e = (EmuDesc*)d;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        e->ta = *(const cublasOperation_t*)buf;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        e->tb = *(const cublasOperation_t*)buf;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        e->epi = *(const cublasLtEpilogue_t*)buf;
        if (e->epi != CUBLASLT_EPILOGUE_DEFAULT && e->epi != CUBLASLT_EPILOGUE_GELU_AUX && e->epi != CUBLASLT_EPILOGUE_DGELU)
            emu_fatal("cublasLt: an epilogue the emulator does not implement");
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
        e->aux = *(const void* const*)buf;
        e->aux_set = 1;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        e->ldaux = *(const int64_t*)buf;
        e->ldaux_set = 1;
        break;
    default: emu_fatal("cublasLtMatmulDescSetAttribute: an attribute the emulator does not implement");
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = (cublasLtMatrixLayout_t) new EmuLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete (EmuLayout*)l; return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = (cublasLtMatmulPreference_t) new int(0);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete (int*)p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void*, size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return size == sizeof(uint64_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        return size == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    default: emu_fatal("cublasLtMatmulPreferenceSetAttribute: an attribute the emulator does not implement");
    }
}

// the checks of emu_gemm that need no data, so the heuristic refuses what the matmul would
static cublasStatus_t lt_validate(const EmuDesc* e, const EmuLayout* a, const EmuLayout* b, const EmuLayout* c,
                                  const EmuLayout* d) {
    const int trA = e->ta != CUBLAS_OP_N, trB = e->tb != CUBLAS_OP_N;
    const uint64_t m = trA ? a->cols : a->rows, k = trA ? a->rows : a->cols;
    const uint64_t kb = trB ? b->cols : b->rows, n = trB ? b->rows : b->cols;
    if (k != kb || d->rows != m || d->cols != n || c->rows != m || c->cols != n || c->type != d->type || c->ld != d->ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a->type != b->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_16BF && !(d->type == CUDA_R_16BF || d->type == CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_32F && d->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_16BF && e->compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (e->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        if (!e->aux_set || !e->ldaux_set || e->ldaux < (int64_t)m) return CUBLAS_STATUS_INVALID_VALUE;
        if (d->type == CUDA_R_16BF && e->ldaux % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    *returned = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = lt_validate((const EmuDesc*)desc, (const EmuLayout*)A, (const EmuLayout*)B, (const EmuLayout*)C,
                                    (const EmuLayout*)D);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
    const EmuDesc* e = (const EmuDesc*)desc;
    const EmuLayout *a = (const EmuLayout*)Adesc, *b = (const EmuLayout*)Bdesc, *c = (const EmuLayout*)Cdesc,
                    *d = (const EmuLayout*)Ddesc;
    cublasStatus_t st = lt_validate(e, a, b, c, d);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (C != D) emu_fatal("cublasLtMatmul: C != D (the emulator implements the in-place form the backend uses)");
    const int trA = e->ta != CUBLAS_OP_N;
    const int m = (int)d->rows, n = (int)d->cols, k = (int)(trA ? a->rows : a->cols);
    return emu_gemm(e->ta, e->tb, m, n, k, *(const float*)alpha, A, a->type, a->ld, B, b->type, b->ld, *(const float*)beta, C,
                    c->ld, D, d->type, d->ld, e->compute, e->epi, (void*)e->aux, e->ldaux);
}

// ---- cuBLAS -------------------------------------------------------------------------------------
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = (cublasHandle_t) new int(2); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { delete (int*)h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }

// Problem i of group g: A = Aarray[i], ... (pointer arrays in device memory, the rest on the host);
// one type for A, B and C (= D)
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t, const cublasOperation_t transa[], const cublasOperation_t transb[],
                                          const int m[], const int n[], const int k[], const void* alpha, const void* const Aarray[],
                                          cudaDataType_t Atype, const int lda[], const void* const Barray[], cudaDataType_t Btype,
                                          const int ldb[], const void* beta, void* const Carray[], cudaDataType_t Ctype,
                                          const int ldc[], int group_count, const int group_size[], cublasComputeType_t compute) {
    if (Atype != Btype || Atype != Ctype) return CUBLAS_STATUS_NOT_SUPPORTED;
    int total = 0;
    for (int g = 0; g < group_count; g++) total += group_size[g];
    emu_check_device_range(Aarray, (size_t)total * sizeof(void*), "cublasGemmGroupedBatchedEx Aarray (must be device memory)");
    emu_check_device_range(Barray, (size_t)total * sizeof(void*), "cublasGemmGroupedBatchedEx Barray (must be device memory)");
    emu_check_device_range(Carray, (size_t)total * sizeof(void*), "cublasGemmGroupedBatchedEx Carray (must be device memory)");
    int idx = 0;
    for (int g = 0; g < group_count; g++)
        for (int i = 0; i < group_size[g]; i++, idx++) {
            if (m[g] == 0 || n[g] == 0) continue;
            cublasStatus_t st = emu_gemm(transa[g], transb[g], m[g], n[g], k[g], ((const float*)alpha)[g], Aarray[idx], Atype,
                                         lda[g], Barray[idx], Btype, ldb[g], ((const float*)beta)[g], Carray[idx], ldc[g],
                                         Carray[idx], Ctype, ldc[g], compute, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
    return CUBLAS_STATUS_SUCCESS;
}

}   // extern "C"
