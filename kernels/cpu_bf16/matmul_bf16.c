// kernels/cpu_bf16/matmul_bf16.c: bf16 GEMMs with fp32 accumulation through oneDNN's matmul
// primitive (the fast CPU bf16 backend's GEMMs; matmul_bf16.h). Row-major throughout: a
// transpose is a pair of strides, so no operand is copied.
#include "matmul_bf16.h"
#include "../bf16.h"
#include <cpuid.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static void dnnl_check(dnnl_status_t st, const char* what) {
    if (st != dnnl_success) {
        fprintf(stderr, "error: oneDNN bf16 matmul: %s failed (status %d)\n", what, (int)st);
        exit(1);
    }
}

// ---- the ISA ----------------------------------------------------------------------------------
// cpuid leaf 7: subleaf 1 EAX bit 5 = AVX512_BF16; subleaf 0 EDX bit 22 = AMX-BF16, bit 24 = AMX-TILE
Bf16mmIsa bf16mm_cpu_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return BF16MM_NONE;
    const int amx = (d >> 22 & 1) && (d >> 24 & 1);
    unsigned a1 = 0, b1, c1, d1;
    const int avx512bf16 = a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 5 & 1);
    return amx ? BF16MM_AMX : avx512bf16 ? BF16MM_AVX512_BF16 : BF16MM_NONE;
}

Bf16mmIsa bf16mm_isa(void) {
    static int decided = 0;
    static Bf16mmIsa isa = BF16MM_NONE;
    if (decided) return isa;
    decided = 1;
    Bf16mmIsa cpu = bf16mm_cpu_isa();
    // oneDNN's own cap (ONEDNN_MAX_CPU_ISA, its cpuid and the OS's AMX permission): the ISA flags
    // are nested bit sets, avx512_core_amx contains avx512_core_bf16
    dnnl_cpu_isa_t eff = dnnl_get_effective_cpu_isa();
    Bf16mmIsa lib = (eff & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx ? BF16MM_AMX
                  : (eff & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ? BF16MM_AVX512_BF16
                  : BF16MM_NONE;
    isa = cpu < lib ? cpu : lib;
    return isa;
}

const char* bf16mm_isa_name(Bf16mmIsa isa) {
    return isa == BF16MM_AMX ? "amx_bf16" : isa == BF16MM_AVX512_BF16 ? "avx512_bf16" : "none";
}

// ---- the primitive cache ------------------------------------------------------------------------
typedef struct {
    char ta, tb;
    int M, N, K, lda, ldb, ldc;   // M, N, K -1 in a primitive of run-time sizes
    float beta;
    int c_bf16, has_bias;   // C bf16 (oneDNN rounds the fp32 sum once), a bf16 bias[N] added before
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias;   // memory objects without data: the pointers are set per call (fixed sizes)
    dnnl_memory_t scratch;         // bf16mm_local's entries: the primitive's own scratchpad (NULL: none)
    void* scratch_buf;
    // the shared cache's fixed-size entries: B packed before each call (NULL: B read as it is)
    dnnl_primitive_t pack;         // reorder: B (e->b, row-major) -> the layout the kernel reads (e->bp)
    dnnl_memory_t bp;              // its memory object on the shared pack buffer (pack_buf)
    size_t bp_bytes;
} Bf16mmEntry;

// fixed-size primitives (the dense layers: a handful of shapes per model); past this many, the
// shapes that vary from call to call (the MoE experts' rows) would fill it: they share
// primitives of run-time sizes instead (bf16mm_var)
#define BF16MM_CACHE 512
static Bf16mmEntry cache[BF16MM_CACHE];
static int n_cached;
static dnnl_engine_t engine;
static dnnl_stream_t stream;

// B packed: oneDNN's bf16 kernels read B in a blocked layout (pairs of K interleaved per column
// block: vdpbf16ps and AMX tiles take two K at a time). Given B row-major, the matmul copies its
// blocks itself inside the call, per thread; given B already in the layout it chose (format "any"),
// it reads it directly. Here B is packed once per call with oneDNN's reorder (parallel over the
// whole matrix) and the matmul gets the packed copy: on avx512_bf16 the same bits (the kernel, its
// blocking and its order of sums are the same; tests/test_bf16cpu_train.sh compares 20 training
// losses), and oneDNN's own time for a GPT-2 124M B=8 T=256 step's GEMMs 4.7-7.3% lower, reorders
// included (the step itself gained within the host's noise: docs/performance.md, "Packed B and the
// norms' lanes"; bench/bench_bf16_ab.sh). Every
// call repacks (the weights change every step, and a copy kept between calls would have to know
// when they do); the packed copies of the shared cache's entries share one buffer, since that
// cache serves one call at a time. GATEDGPT_BF16MM_PLAIN=1 turns packing off (a measurement switch).
static void* pack_buf;
static size_t pack_cap;
static int pack_off = -1;   // -1: GATEDGPT_BF16MM_PLAIN not read yet

// A transposed ('T': the weight gradients' X^T, whose reduction runs down X's rows): the matmul
// copies A's blocks itself inside the call, per thread (oneDNN's transposed copy-A kernel).
// GATEDGPT_BF16MM_TRANSPOSE_A=1 transposes A once per call instead, with oneDNN's reorder, into
// one dense [M, K] buffer, and runs the plain-A primitive on it. A measurement switch for hosts
// where the in-call copy may weigh more (AMX: the products ~4x faster than avx512_bf16's); off by
// default: on an avx512_bf16 host the step measured no faster with it (docs/performance.md).
static void* trans_buf;
static size_t trans_cap;
static int trans_on = -1;   // -1: GATEDGPT_BF16MM_TRANSPOSE_A not read yet
typedef struct {
    int M, K, lda;
    dnnl_primitive_t prim;
    dnnl_memory_t src, dst;   // without data: the pointers are set per call
} Bf16mmTrans;
#define BF16MM_TRANS_CACHE 64
static Bf16mmTrans trans_cache[BF16MM_TRANS_CACHE];
static int n_trans;

static int env_is_1(const char* name) {
    const char* v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

// *buf holds at least bytes (4 KiB aligned), its contents not kept
static void buf_reserve(void** buf, size_t* cap, size_t bytes, const char* what) {
    if (bytes <= *cap) return;
    free(*buf);
    *cap = (bytes + 4095) / 4096 * 4096;
    *buf = aligned_alloc(4096, *cap);
    if (!*buf) { fprintf(stderr, "error: out of memory for %s (%zu bytes)\n", what, *cap); exit(1); }
}

// a 2-D bf16/f32 descriptor of rows x cols, row-major with leading dimension ld, or its transpose
// (rows or cols -1: a run-time size)
static void md2(dnnl_memory_desc_t* md, int rows, int cols, int ld, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows < 0 ? DNNL_RUNTIME_DIM_VAL : rows, cols < 0 ? DNNL_RUNTIME_DIM_VAL : cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    dnnl_check(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides), "memory descriptor");
}

static int entry_is(const Bf16mmEntry* e, char ta, char tb, int M, int N, int K, int lda, int ldb, int ldc,
                    float beta, int c_bf16, int has_bias) {
    return e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->lda == lda && e->ldb == ldb &&
           e->ldc == ldc && e->beta == beta && e->c_bf16 == c_bf16 && e->has_bias == has_bias;
}

// the primitive of *e's shape (its fields set); user_scratch: the primitive gets a scratchpad of
// its own (bf16mm_local) instead of oneDNN's library-managed one, which threads share
static void entry_create(Bf16mmEntry* e, int user_scratch) {
    const char ta = e->ta, tb = e->tb;
    const int M = e->M, N = e->N, K = e->K, lda = e->lda, ldb = e->ldb, ldc = e->ldc, c_bf16 = e->c_bf16,
              has_bias = e->has_bias;
    const float beta = e->beta;
    // src = op(A)[M,K], weights = op(B)[K,N], dst = C[M,N] (f32: the accumulator's type; or bf16:
    // the accumulator plus the bias rounded once), bias[1,N]
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    md2(&a_md, M, K, lda, ta == 'T', dnnl_bf16);
    md2(&b_md, K, N, ldb, tb == 'T', dnnl_bf16);
    md2(&c_md, M, N, ldc, 0, c_bf16 ? dnnl_bf16 : dnnl_f32);
    if (has_bias) md2(&bias_md, 1, N, N, 0, dnnl_bf16);
    // the shared cache's fixed sizes: the kernel chooses B's layout ("any"), packed per call
    if (pack_off < 0) pack_off = env_is_1("GATEDGPT_BF16MM_PLAIN");
    const int packed = !user_scratch && M >= 0 && !pack_off;
    dnnl_memory_desc_t bany_md;
    if (packed) {
        dnnl_dims_t dims = {K, N};
        dnnl_check(dnnl_memory_desc_init_by_tag(&bany_md, 2, dims, dnnl_bf16, dnnl_format_tag_any), "memory descriptor");
    }
    dnnl_matmul_desc_t desc;
    dnnl_check(dnnl_matmul_desc_init(&desc, &a_md, packed ? &bany_md : &b_md, has_bias ? &bias_md : NULL, &c_md),
               "matmul descriptor");
    dnnl_primitive_attr_t attr;
    dnnl_check(dnnl_primitive_attr_create(&attr), "attributes");
    if (beta != 0.0f) {   // C += A B: a sum post-op (the product added to C in fp32)
        dnnl_post_ops_t po;
        dnnl_check(dnnl_post_ops_create(&po), "post-ops");
        dnnl_check(dnnl_post_ops_append_sum(po, beta), "sum post-op");
        dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), "set post-ops");
        dnnl_post_ops_destroy(po);
    }
    if (user_scratch) dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    dnnl_primitive_desc_t pd;
    dnnl_check(dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL), "primitive descriptor");
    dnnl_check(dnnl_primitive_create(&e->prim, pd), "primitive");
    if (user_scratch) {
        const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
        if (bytes) {
            e->scratch_buf = malloc(bytes);
            if (!e->scratch_buf) { fprintf(stderr, "error: out of memory for a oneDNN scratchpad (%zu bytes)\n", bytes); exit(1); }
            dnnl_check(dnnl_memory_create(&e->scratch, smd, engine, e->scratch_buf), "memory scratchpad");
        }
    }
    if (packed) {   // the reorder from row-major B to the layout the kernel chose (none if they are the same)
        const dnnl_memory_desc_t* wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(wmd, &b_md)) {
            dnnl_primitive_desc_t rpd;
            dnnl_check(dnnl_reorder_primitive_desc_create(&rpd, &b_md, engine, wmd, engine, NULL), "reorder descriptor");
            dnnl_check(dnnl_primitive_create(&e->pack, rpd), "reorder");
            dnnl_primitive_desc_destroy(rpd);
            e->bp_bytes = dnnl_memory_desc_get_size(wmd);
            dnnl_check(dnnl_memory_create(&e->bp, wmd, engine, DNNL_MEMORY_NONE), "memory packed B");
        } else {
            b_md = *wmd;
        }
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (M >= 0) {
        dnnl_check(dnnl_memory_create(&e->a, &a_md, engine, DNNL_MEMORY_NONE), "memory A");
        dnnl_check(dnnl_memory_create(&e->b, &b_md, engine, DNNL_MEMORY_NONE), "memory B");
        dnnl_check(dnnl_memory_create(&e->c, &c_md, engine, DNNL_MEMORY_NONE), "memory C");
        if (has_bias) dnnl_check(dnnl_memory_create(&e->bias, &bias_md, engine, DNNL_MEMORY_NONE), "memory bias");
    }
}

static void engine_init(void) {
    if (engine) return;
    dnnl_check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
    dnnl_check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream");
}

static Bf16mmEntry* bf16mm_entry(char ta, char tb, int M, int N, int K, int lda, int ldb, int ldc,
                                 float beta, int c_bf16, int has_bias) {
    for (int i = 0; i < n_cached; i++)
        if (entry_is(&cache[i], ta, tb, M, N, K, lda, ldb, ldc, beta, c_bf16, has_bias)) return &cache[i];
    engine_init();
    if (n_cached == BF16MM_CACHE) {
        fprintf(stderr, "error: oneDNN bf16 matmul: more than %d GEMM shapes in one run "
                "(kernels/cpu_bf16/matmul_bf16.c: raise BF16MM_CACHE)\n", BF16MM_CACHE);
        exit(1);
    }
    Bf16mmEntry* e = &cache[n_cached];
    *e = (Bf16mmEntry){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .beta = beta,
                       .c_bf16 = c_bf16, .has_bias = has_bias};
    entry_create(e, 0);
    n_cached++;
    return e;
}

// A^T (A stored [K, M] with leading dimension lda) as a dense row-major [M, K] copy in trans_buf
static const uint16_t* transpose_a(int M, int K, const uint16_t* A, int lda) {
    Bf16mmTrans* t = NULL;
    for (int i = 0; i < n_trans && !t; i++)
        if (trans_cache[i].M == M && trans_cache[i].K == K && trans_cache[i].lda == lda) t = &trans_cache[i];
    if (!t) {
        if (n_trans == BF16MM_TRANS_CACHE) {
            fprintf(stderr, "error: oneDNN bf16 matmul: more than %d transposed-A shapes in one run "
                    "(kernels/cpu_bf16/matmul_bf16.c: raise BF16MM_TRANS_CACHE)\n", BF16MM_TRANS_CACHE);
            exit(1);
        }
        t = &trans_cache[n_trans++];
        *t = (Bf16mmTrans){.M = M, .K = K, .lda = lda};
        dnnl_memory_desc_t s_md, d_md;
        md2(&s_md, M, K, lda, 1, dnnl_bf16);
        md2(&d_md, M, K, K, 0, dnnl_bf16);
        dnnl_primitive_desc_t rpd;
        dnnl_check(dnnl_reorder_primitive_desc_create(&rpd, &s_md, engine, &d_md, engine, NULL), "reorder descriptor");
        dnnl_check(dnnl_primitive_create(&t->prim, rpd), "reorder");
        dnnl_primitive_desc_destroy(rpd);
        dnnl_check(dnnl_memory_create(&t->src, &s_md, engine, DNNL_MEMORY_NONE), "memory A");
        dnnl_check(dnnl_memory_create(&t->dst, &d_md, engine, DNNL_MEMORY_NONE), "memory A transposed");
    }
    buf_reserve(&trans_buf, &trans_cap, (size_t)M * K * sizeof(uint16_t), "the transposed bf16 A");
    dnnl_check(dnnl_memory_set_data_handle(t->src, (void*)A), "set A");
    dnnl_check(dnnl_memory_set_data_handle(t->dst, trans_buf), "set A transposed");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, t->src}, {DNNL_ARG_TO, t->dst}};
    dnnl_check(dnnl_primitive_execute(t->prim, stream, 2, args), "reorder A");
    return trans_buf;
}

// C is fp32 (c_bf16 0) or bf16 bits (c_bf16 1, beta 0); bias NULL or bf16[N] (fixed sizes only)
static void bf16mm_run(int var, char ta, char tb, int M, int N, int K, const uint16_t* A, int lda,
                       const uint16_t* B, int ldb, float beta, void* C, int ldc, int c_bf16,
                       const uint16_t* bias) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {   // an empty sum: C = beta C (+ bias)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                if (c_bf16) { ((uint16_t*)C)[(size_t)i * ldc + j] = bias ? bias[j] : 0; continue; }
                float* c = (float*)C + (size_t)i * ldc + j;
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        return;
    }
    if (trans_on < 0) trans_on = env_is_1("GATEDGPT_BF16MM_TRANSPOSE_A");
    if (!var && ta == 'T' && trans_on) {
        engine_init();
        A = transpose_a(M, K, A, lda);
        ta = 'N';
        lda = K;
    }
    Bf16mmEntry* e = var ? bf16mm_entry(ta, tb, -1, -1, -1, lda, ldb, ldc, beta, c_bf16, bias != NULL)
                         : bf16mm_entry(ta, tb, M, N, K, lda, ldb, ldc, beta, c_bf16, bias != NULL);
    dnnl_memory_t a = e->a, b = e->b, c = e->c;
    if (var) {   // memory objects of this call's sizes
        dnnl_memory_desc_t a_md, b_md, c_md;
        md2(&a_md, M, K, lda, ta == 'T', dnnl_bf16);
        md2(&b_md, K, N, ldb, tb == 'T', dnnl_bf16);
        md2(&c_md, M, N, ldc, 0, c_bf16 ? dnnl_bf16 : dnnl_f32);
        dnnl_check(dnnl_memory_create(&a, &a_md, engine, (void*)A), "memory A");
        dnnl_check(dnnl_memory_create(&b, &b_md, engine, (void*)B), "memory B");
        dnnl_check(dnnl_memory_create(&c, &c_md, engine, C), "memory C");
    } else {
        dnnl_check(dnnl_memory_set_data_handle(a, (void*)A), "set A");
        dnnl_check(dnnl_memory_set_data_handle(b, (void*)B), "set B");
        dnnl_check(dnnl_memory_set_data_handle(c, C), "set C");
        if (bias) dnnl_check(dnnl_memory_set_data_handle(e->bias, (void*)bias), "set bias");
        if (e->pack) {   // B packed into the shared buffer, which the matmul then reads
            buf_reserve(&pack_buf, &pack_cap, e->bp_bytes, "the packed bf16 weights");
            dnnl_check(dnnl_memory_set_data_handle(e->bp, pack_buf), "set packed B");
            dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, b}, {DNNL_ARG_TO, e->bp}};
            dnnl_check(dnnl_primitive_execute(e->pack, stream, 2, rargs), "reorder B");
            b = e->bp;
        }
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_BIAS, e->bias}};
    dnnl_check(dnnl_primitive_execute(e->prim, stream, bias ? 4 : 3, args), "execute");
    dnnl_check(dnnl_stream_wait(stream), "stream wait");
    if (var) { dnnl_memory_destroy(a); dnnl_memory_destroy(b); dnnl_memory_destroy(c); }
}

void bf16mm(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
            int ldb, float beta, float* C, int ldc) {
    bf16mm_run(0, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, 0, NULL);
}
void bf16mm_var(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                int ldb, float beta, float* C, int ldc) {
    bf16mm_run(1, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, 0, NULL);
}
void bf16mm_round(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                  int ldb, const uint16_t* bias, uint16_t* C, int ldc) {
    bf16mm_run(0, ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, ldc, 1, bias);
}

// ---- GEMMs inside a parallel region ----------------------------------------------------------------
// The attention's tiles (attention_bf16.c) are small GEMMs, one task per head on each OpenMP thread.
// The shared cache above sets its memory objects' pointers per call and serves one caller at a
// time; these calls go to a cache of the calling thread's own instead: its primitives (created
// inside the parallel region, so oneDNN plans them for the one thread that runs them), its stream,
// and each primitive's own scratchpad (oneDNN's library-managed scratchpad is shared between
// threads unless the library was built for concurrent execution). Full: the oldest primitive of
// the thread is replaced (the tiles' shapes are a handful per sequence length).
#define BF16MM_LOCAL_THREADS 256
#define BF16MM_LOCAL_CACHE 128
typedef struct {
    Bf16mmEntry e[BF16MM_LOCAL_CACHE];
    int n, next;   // entries in use; the next to replace when full
    dnnl_stream_t stream;
} Bf16mmLocal;
static Bf16mmLocal* local_caches[BF16MM_LOCAL_THREADS];

static void entry_destroy(Bf16mmEntry* e) {
    dnnl_primitive_destroy(e->prim);
    if (e->a) { dnnl_memory_destroy(e->a); dnnl_memory_destroy(e->b); dnnl_memory_destroy(e->c); }
    if (e->bias) dnnl_memory_destroy(e->bias);
    if (e->scratch) dnnl_memory_destroy(e->scratch);
    free(e->scratch_buf);
    if (e->pack) { dnnl_primitive_destroy(e->pack); dnnl_memory_destroy(e->bp); }
}

void bf16mm_local(char ta, char tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                  float beta, void* C, int ldc, int c_bf16) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { bf16mm_run(1, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, c_bf16, NULL); return; }   // no oneDNN call
#ifdef _OPENMP
    const int t = omp_get_thread_num();
#else
    const int t = 0;
#endif
    if (t >= BF16MM_LOCAL_THREADS) {
        fprintf(stderr, "error: oneDNN bf16 matmul: thread %d past %d (kernels/cpu_bf16/matmul_bf16.c: raise "
                "BF16MM_LOCAL_THREADS)\n", t, BF16MM_LOCAL_THREADS);
        exit(1);
    }
    Bf16mmLocal* lc = local_caches[t];
    if (!lc) {
        #pragma omp critical(bf16mm_local_init)
        engine_init();
        lc = calloc(1, sizeof *lc);
        if (!lc) { fprintf(stderr, "error: out of memory for the bf16 GEMM cache\n"); exit(1); }
        dnnl_check(dnnl_stream_create(&lc->stream, engine, dnnl_stream_default_flags), "stream");
        local_caches[t] = lc;
    }
    Bf16mmEntry* e = NULL;
    for (int i = 0; i < lc->n && !e; i++)
        if (entry_is(&lc->e[i], ta, tb, M, N, K, lda, ldb, ldc, beta, c_bf16, 0)) e = &lc->e[i];
    if (!e) {
        if (lc->n < BF16MM_LOCAL_CACHE) e = &lc->e[lc->n++];
        else { e = &lc->e[lc->next]; lc->next = (lc->next + 1) % BF16MM_LOCAL_CACHE; entry_destroy(e); }
        *e = (Bf16mmEntry){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .beta = beta, .c_bf16 = c_bf16};
        entry_create(e, 1);
    }
    dnnl_check(dnnl_memory_set_data_handle(e->a, (void*)A), "set A");
    dnnl_check(dnnl_memory_set_data_handle(e->b, (void*)B), "set B");
    dnnl_check(dnnl_memory_set_data_handle(e->c, C), "set C");
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c},
                               {DNNL_ARG_SCRATCHPAD, e->scratch}};
    dnnl_check(dnnl_primitive_execute(e->prim, lc->stream, e->scratch ? 4 : 3, args), "execute");
    dnnl_check(dnnl_stream_wait(lc->stream), "stream wait");
}

// ---- the peak -------------------------------------------------------------------------------------
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bf16mm_peak_flops(const char** source) {
    static double cached = -1.0;
    static char src[200];
    if (cached >= 0.0) { if (source) *source = src; return cached; }
    cached = 0.0;
    snprintf(src, sizeof src, "none: no bf16 units");
    if (bf16mm_isa() != BF16MM_NONE) {
        // 1024^3: large enough for the kernel's steady state (2.1 GFLOP a call), small enough to
        // measure in ~0.1 s; the inputs are small integers, so no NaN or denormal slows it
        const int n = 1024;
        uint16_t* a = malloc((size_t)n * n * sizeof(uint16_t));
        float* c = malloc((size_t)n * n * sizeof(float));
        if (!a || !c) { fprintf(stderr, "error: out of memory for the bf16 peak measurement\n"); exit(1); }
        for (size_t i = 0; i < (size_t)n * n; i++) a[i] = bf16_from_f32(1.0f + (float)(i % 3) / 128);   // 1, 1.0078, 1.0156
        bf16mm('N', 'T', n, n, n, a, n, a, n, 0.0f, c, n);   // the primitive is created outside the timing
        double best = 0.0;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            bf16mm('N', 'T', n, n, n, a, n, a, n, 0.0f, c, n);
            double dt = now_s() - t0, f = 2.0 * n * n * (double)n / dt;
            if (f > best) best = f;
        }
        free(a); free(c);
        cached = best;
#ifdef _OPENMP
        int threads = omp_get_max_threads();
#else
        int threads = 1;
#endif
        snprintf(src, sizeof src, "measured: oneDNN bf16 matmul (%s) 1024^3 on this CPU, %d threads, best of 3",
                 bf16mm_isa_name(bf16mm_isa()), threads);
    }
    if (source) *source = src;
    return cached;
}
