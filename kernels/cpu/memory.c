// kernels/cpu/memory.c: CPU backend lifetime, memory, and the measured fp32 peak.
#include "../ops.h"
#include "cpu_common.h"
#include "../scratch.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cpu_threads = 1;
static char cpu_name[128];

void ops_init(int threads) {
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
    cpu_threads = omp_get_max_threads();
#else
    (void)threads;
    cpu_threads = 1;
#endif
    snprintf(cpu_name, sizeof(cpu_name), "cpu fp32 (%s sgemm, %d threads)",
#ifdef GATEDGPT_GEMM_DNNL
             "oneDNN",
#elif defined(GATEDGPT_GEMM_NAIVE)
             "naive loop",
#else
             "cblas",
#endif
             cpu_threads);
}

const char* ops_backend_name(void) { return cpu_name[0] ? cpu_name : "cpu fp32"; }
int ops_num_threads(void) { return cpu_threads; }

// Each allocation carries a 64-byte header in front of it with its size, so that ops_free can
// count what is released (ops_allocated_bytes). The pointer handed out stays 64-byte aligned
// (AVX-512 lines).
#define CPU_ALLOC_HEADER 64
static size_t cpu_live, cpu_peak;   // bytes held by ops_malloc (the host thread allocates)

void* ops_malloc(size_t bytes) {
    // zero-filled, 64-byte aligned, the size rounded to 64 (kernels/scratch.h)
    void* p = NULL;
    size_t rounded = scratch_alloc_bytes(bytes, SCRATCH_CPU_ALLOC_ALIGN);
    if (posix_memalign(&p, 64, rounded + CPU_ALLOC_HEADER) != 0 || !p) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes (reduce batch_size, seq_len or model size)\n", bytes);
        exit(1);
    }
    memset(p, 0, rounded + CPU_ALLOC_HEADER);
    *(size_t*)p = rounded;
    cpu_live += rounded;
    if (cpu_live > cpu_peak) cpu_peak = cpu_live;
    return (char*)p + CPU_ALLOC_HEADER;
}
void ops_free(void* p) {
    if (!p) return;
    char* base = (char*)p - CPU_ALLOC_HEADER;
    cpu_live -= *(size_t*)base;
    free(base);
}
size_t ops_allocated_bytes(void) { return cpu_live; }
size_t ops_allocated_peak_bytes(void) { return cpu_peak; }
size_t ops_alloc_align(void) { return SCRATCH_CPU_ALLOC_ALIGN; }
// the kernels' temporaries of the largest op (kernels/scratch.h); nothing is held between ops
size_t ops_scratch_bytes(const OpsStepShape* s) { return cpu_scratch_bytes(s); }
void ops_scratch_reserve(const OpsStepShape* s) { (void)s; }
void ops_zero(float* x, size_t n) { memset(x, 0, n * sizeof(float)); }
void ops_copy(float* dst, const float* src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
void ops_accumulate(float* y, const float* x, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
// activations are fp32 on the CPU: the act_t copies of ops.h are copies (nothing when aliased)
void ops_act_from_float(float* act, const float* x, size_t n) { if (act != x) memcpy(act, x, n * sizeof(float)); }
void ops_float_from_act(float* x, const float* act, size_t n) { if (act != x) memcpy(x, act, n * sizeof(float)); }
void ops_weights_to_act(float* act, const float* w, size_t n, unsigned long long seed) {
    (void)seed;
    if (act != w) memcpy(act, w, n * sizeof(float));
}
void ops_weights_to_act_at(float* act, const float* w, size_t at, size_t n, unsigned long long seed) {
    (void)at; (void)seed;
    if (act != w) memcpy(act, w, n * sizeof(float));
}
void ops_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void ops_from_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
// the host is the backend's memory: plain, 64-byte aligned (AVX-512 lines)
void* ops_host_alloc(size_t bytes) {
    void* p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}
void ops_host_free(void* p) { free(p); }

// ---- measured peak: independent FMA chains at the widest vector width the CPU has ----
// ACC accumulators hide the FMA latency (4 cycles x 2 pipes = 8 in flight at least) and, with
// the two operands, must fit the register file (16 ymm for AVX2, 32 zmm for AVX-512), or the
// loop spills to memory and measures the load/store ports instead.
#define PEAK_DEF(NAME, TARGET, W, ACC)                                                       \
    __attribute__((target(TARGET))) static double NAME(long iters) {                        \
        typedef float vec __attribute__((vector_size(W * 4)));                              \
        vec acc[ACC], a, b;                                                                 \
        for (int i = 0; i < W; i++) { a[i] = 0.999999f; b[i] = 1e-7f; }                   \
        for (int j = 0; j < ACC; j++) for (int i = 0; i < W; i++) acc[j][i] = (float)j;     \
        for (long it = 0; it < iters; it++)                                                 \
            for (int j = 0; j < ACC; j++) acc[j] = acc[j] * a + b;                          \
        float s = 0; for (int j = 0; j < ACC; j++) for (int i = 0; i < W; i++) s += acc[j][i]; \
        return (double)s;                                                                   \
    }
#define PEAK_ACC_AVX512 16
#define PEAK_ACC_AVX2 12
PEAK_DEF(peak_avx512, "avx512f,fma", 16, PEAK_ACC_AVX512)
PEAK_DEF(peak_avx2, "avx2,fma", 8, PEAK_ACC_AVX2)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static char peak_source[256];

double ops_peak_flops(void) {
    static double cached = 0.0;
    if (cached > 0.0) return cached;
    __builtin_cpu_init();
    int w = __builtin_cpu_supports("avx512f") ? 16 : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 8 : 0;
    if (w == 0) {   // no FMA: a nominal 1 GFLOP/s
        cached = 1e9;
        snprintf(peak_source, sizeof(peak_source), "nominal: 1 GFLOP/s stand-in, not measured (this CPU has no AVX2+FMA)");
        return cached;
    }
    long iters = 20000000;   // ~50 ms per rep: long enough to hide the thread start-up
    double best = 0.0;
    volatile double sink = 0.0;
    int acc = w == 16 ? PEAK_ACC_AVX512 : PEAK_ACC_AVX2;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        #pragma omp parallel reduction(+ : sink)
        { sink += (w == 16) ? peak_avx512(iters) : peak_avx2(iters); }
        double dt = now_s() - t0;
        double flops = 2.0 * w * acc * (double)iters * ops_num_threads() / dt;
        if (flops > best) best = flops;
    }
    cached = best;
    snprintf(peak_source, sizeof(peak_source), "measured: %s fp32 FMA loop on this CPU (%d-wide x %d chains), %d threads, best of 3",
             w == 16 ? "AVX-512" : "AVX2", w, acc, ops_num_threads());
    return cached;
}

const char* ops_peak_source(void) {
    if (!peak_source[0]) ops_peak_flops();   // the source is known once the peak is (cached)
    return peak_source;
}

// MemAvailable of /proc/meminfo (the kernel's estimate of what can be allocated without
// swapping); where that file is missing, the free physical pages.
size_t ops_mem_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (size_t)kb * 1024;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)-1;
}
