// kernels/cuda/memory.cu: the bottom of the CUDA backend: device choice, memory, copies, the
// conversions to act_t (activations, the weights' compute copy), error checks, scratch buffers,
// the peak FLOP/s table and the per-op profile. Every other file of kernels/cuda calls into it;
// it calls none of them (setup.cu, on top, is ops_init and the step's scratch reservation).
#include "cuda_common.h"
#include <string.h>
#include <time.h>

cudaStream_t cuda_stream = 0;
static int cuda_dev = -1;
static int cuda_sync_each = 0;     // GATEDGPT_CUDA_SYNC=1: synchronise after every launch
static int cuda_profiling = 0;     // GATEDGPT_CUDA_PROFILE=1: per-op wall times (CudaOpTimer)
static int cuda_math = CUDA_MATH_FP32;   // GEMM inputs: fp32, or rounded to TF32 / bf16 (environment)
static char cuda_name[512];
static cudaDeviceProp cuda_prop;

// ---- errors ---------------------------------------------------------------------------------
static const char* cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "out of GPU memory: lower [train] batch_size or seq_len (tokens_per_step keeps the "
               "global batch through gradient accumulation), or use a smaller model";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorInvalidDevice:
        return "no usable CUDA device: check nvidia-smi, CUDA_VISIBLE_DEVICES, and that the driver "
               "supports the CUDA version this was built with";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorUnsupportedPtxVersion:
        return "this GPU's architecture is not in the build: reconfigure with "
               "-DCMAKE_CUDA_ARCHITECTURES=<its compute capability, e.g. 90 for H100/H200, 80 for A100>";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
        return "a kernel accessed memory it should not: rerun with GATEDGPT_CUDA_SYNC=1 to name the "
               "kernel, or under compute-sanitizer";
    case cudaErrorInvalidConfiguration:
    case cudaErrorLaunchOutOfResources:
        return "a kernel launch configuration does not fit this GPU (shape too large for the kernel?): "
               "rerun with GATEDGPT_CUDA_SYNC=1";
    default:
        return "rerun with GATEDGPT_CUDA_SYNC=1 to find the failing kernel";
    }
}

void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: %s:%d: %s: %s (%s)\n  hint: %s\n", file, line, what,
            cudaGetErrorString(e), cudaGetErrorName(e), cuda_hint(e));
    exit(1);
}

void cuda_launch_check(const char* kernel, const char* file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && cuda_sync_each) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: %s:%d: kernel %s: %s (%s)\n  hint: %s\n", file, line, kernel,
            cudaGetErrorString(e), cudaGetErrorName(e), cuda_hint(e));
    exit(1);
}

void cuda_fail(const char* file, int line, const char* msg, const char* hint) {
    fprintf(stderr, "error: %s:%d: %s\n  hint: %s\n", file, line, msg, hint);
    exit(1);
}

// ---- device ---------------------------------------------------------------------------------
int cuda_device_present(char* why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && len) snprintf(why, len, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        cudaGetLastError();   // clear the sticky error
        return 0;
    }
    return 1;
}

static int env_flag(const char* name) {
    const char* v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

int cuda_env_is(const char* name, const char* value) {
    const char* v = getenv(name);
    return v && strcmp(v, value) == 0;
}

size_t cuda_smem_optin(void) {
    int dev = 0, smem = 0;
    CUDA_CHECK(cudaGetDevice(&dev));   // ops_init's device (0 before ops_init)
    CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return (size_t)smem;
}

// One process per GPU: the device is the process's rank on its node (mpirun sets one of these)
// modulo the number of visible devices.
static int local_rank_from_env(void) {
    const char* names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (int i = 0; i < 4; i++) {
        const char* v = getenv(names[i]);
        if (v && v[0]) return atoi(v);
    }
    return 0;
}

void cuda_device_open(void) {
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    if (n == 0) cuda_fail(__FILE__, __LINE__, "no CUDA device", "check nvidia-smi and CUDA_VISIBLE_DEVICES");
    cuda_dev = local_rank_from_env() % n;
    CUDA_CHECK(cudaSetDevice(cuda_dev));
    CUDA_CHECK(cudaGetDeviceProperties(&cuda_prop, cuda_dev));
    cuda_sync_each = env_flag("GATEDGPT_CUDA_SYNC");
    cuda_profiling = env_flag("GATEDGPT_CUDA_PROFILE");
    // GATEDGPT_CUDA_BF16_GEMM=1 wins over GATEDGPT_CUDA_TF32=1
    cuda_math = env_flag("GATEDGPT_CUDA_BF16_GEMM") ? CUDA_MATH_BF16 : env_flag("GATEDGPT_CUDA_TF32") ? CUDA_MATH_TF32 : CUDA_MATH_FP32;
#ifdef GATEDGPT_ACT_BF16
    cuda_math = CUDA_MATH_BF16;   // bf16 storage: every GEMM reads bf16 (the switches do not apply)
#endif
    snprintf(cuda_name, sizeof(cuda_name), "cuda " OPS_ACT_NAME " (%s, sm_%d%d, %d SMs, cuBLASLt %s%s)",
             cuda_prop.name, cuda_prop.major, cuda_prop.minor, cuda_prop.multiProcessorCount,
             cuda_gemm_math_name(), cuda_sync_each ? ", sync after every kernel" : "");
}

const char* ops_backend_name(void) { return cuda_name[0] ? cuda_name : "cuda " OPS_ACT_NAME; }
int ops_num_threads(void) { return 1; }   // one host thread drives the GPU
const char* cuda_device_name(void) { return cuda_prop.name; }
int cuda_tf32_enabled(void) { return cuda_math == CUDA_MATH_TF32; }
int cuda_gemm_math(void) { return cuda_math; }
const char* cuda_gemm_math_name(void) {
    return cuda_math == CUDA_MATH_BF16 ? "bf16-gemm" : cuda_math == CUDA_MATH_TF32 ? "TF32" : "fp32";
}
void cuda_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

// ---- memory ---------------------------------------------------------------------------------
// A small table of live allocations (the arenas and the scratch buffers: tens of entries) so
// that the bytes held and their peak can be reported.
#define CUDA_MAX_ALLOCS 4096
static struct { void* p; size_t bytes; } cuda_allocs[CUDA_MAX_ALLOCS];
static size_t cuda_live = 0, cuda_peak = 0;

static void* cuda_alloc_zeroed(size_t bytes) {
    void* p = NULL;
    size_t rounded = scratch_alloc_bytes(bytes, SCRATCH_CUDA_ALLOC_ALIGN);   // kernels/scratch.h
    cudaError_t e = cudaMalloc(&p, rounded);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        fprintf(stderr, "error: out of GPU memory allocating %.1f MiB (%.1f MiB free of %.1f MiB)\n"
                        "  hint: lower [train] batch_size or seq_len, or use a smaller model\n",
                bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
        exit(1);
    }
    CUDA_CHECK(cudaMemset(p, 0, rounded));
    for (int i = 0; i < CUDA_MAX_ALLOCS; i++)
        if (!cuda_allocs[i].p) { cuda_allocs[i].p = p; cuda_allocs[i].bytes = rounded; break; }
    cuda_live += rounded;
    if (cuda_live > cuda_peak) cuda_peak = cuda_live;
    return p;
}

static void cuda_release(void* p) {
    if (!p) return;
    for (int i = 0; i < CUDA_MAX_ALLOCS; i++)
        if (cuda_allocs[i].p == p) { cuda_live -= cuda_allocs[i].bytes; cuda_allocs[i].p = NULL; break; }
    CUDA_CHECK(cudaFree(p));
}

void* ops_malloc(size_t bytes) { return cuda_alloc_zeroed(bytes); }
void ops_free(void* p) { cuda_release(p); }
void ops_zero(float* x, size_t n) {
    CUDA_OP_TIMER("ops_zero");
    CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), cuda_stream));
}
void ops_copy(float* dst, const float* src, size_t n) {
    CUDA_OP_TIMER("ops_copy");
    if (n) CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
}

// ---- fp32 <-> act_t --------------------------------------------------------------------------
// fp32 act_t: each is a device-to-device copy, or nothing when act and the fp32 buffer are one
// buffer (the model then passes the same pointer). bf16 act_t: one thread per element; act and
// the fp32 buffer must be different buffers (the bf16 elements are half the size, so an in-place
// conversion would overwrite values other threads have yet to read).
#ifdef GATEDGPT_ACT_BF16
// act[i] = x[i] rounded to nearest even
__global__ static void act_from_float_kernel(cact_t* act, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act_st(&act[i], x[i]);
}
// x[i] = act[i] widened to fp32 (exact)
__global__ static void float_from_act_kernel(float* x, const cact_t* act, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = act_ld(act[i]);
}
// act[i] = w[i] rounded stochastically with the bits of (seed, i): the same bits as the CPU's
// emulation (kernels/bf16.h is shared)
// the element at + i of the arena (ops_weights_to_act_at: a shard's range; at = 0, the whole arena)
__global__ static void weights_to_act_kernel(uint16_t* act, const float* w, size_t at, size_t n, unsigned long long seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act[i] = bf16_from_f32_sr(w[i], bf16_sr_bits(seed, at + i));
}
static void act_not_aliased(const void* act, const void* src, const char* op) {
    if (act != src) return;
    char msg[160];
    snprintf(msg, sizeof msg, "%s: the bf16 and the fp32 buffer are the same memory", op);
    cuda_fail(__FILE__, __LINE__, msg, "give the bf16 copy its own buffer (only fp32 act_t may alias)");
}
#endif

// fp32 <-> bf16 copies for the cuDNN attention in every build (attention_cudnn.cpp: cuDNN takes
// bf16 q, k, v), one thread per element. Here, at the bottom, so that attention_cudnn.cpp and
// attention.cu (which calls it) do not call each other.
__global__ static void to_bf16_kernel(__nv_bfloat16* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ static void from_bf16_kernel(float* out, const __nv_bfloat16* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __bfloat162float(in[i]);
}
void cuda_to_bf16(void* out, const float* in, size_t n) {
    if (n == 0) return;
    to_bf16_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>((__nv_bfloat16*)out, in, n);
    CUDA_LAUNCH_CHECK("to_bf16_kernel");
}
void cuda_from_bf16(float* out, const void* in, size_t n) {
    if (n == 0) return;
    from_bf16_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(out, (const __nv_bfloat16*)in, n);
    CUDA_LAUNCH_CHECK("from_bf16_kernel");
}

void ops_act_from_float(act_t* act, const float* x, size_t n) {
    CUDA_OP_TIMER("ops_act_from_float");
    if (n == 0) return;
#ifdef GATEDGPT_ACT_BF16
    act_not_aliased(act, x, "ops_act_from_float");
    act_from_float_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(CACT(act), x, n);
    CUDA_LAUNCH_CHECK("act_from_float_kernel");
#else
    if ((const void*)act != (const void*)x)
        CUDA_CHECK(cudaMemcpyAsync(act, x, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
#endif
}

void ops_float_from_act(float* x, const act_t* act, size_t n) {
    CUDA_OP_TIMER("ops_float_from_act");
    if (n == 0) return;
#ifdef GATEDGPT_ACT_BF16
    act_not_aliased(act, x, "ops_float_from_act");
    float_from_act_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(x, CCACT(act), n);
    CUDA_LAUNCH_CHECK("float_from_act_kernel");
#else
    if ((const void*)act != (const void*)x)
        CUDA_CHECK(cudaMemcpyAsync(x, act, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
#endif
}

void ops_weights_to_act(act_t* act, const float* w, size_t n, unsigned long long seed) {
    ops_weights_to_act_at(act, w, 0, n, seed);
}

void ops_weights_to_act_at(act_t* act, const float* w, size_t at, size_t n, unsigned long long seed) {
    CUDA_OP_TIMER("ops_weights_to_act");
    if (n == 0) return;
#ifdef GATEDGPT_ACT_BF16
    act_not_aliased(act, w, "ops_weights_to_act");
    weights_to_act_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream>>>(act, w, at, n, seed);
    CUDA_LAUNCH_CHECK("weights_to_act_kernel");
#else
    (void)at; (void)seed;   // fp32 act_t: exact, nothing to round
    if ((const void*)act != (const void*)w)
        CUDA_CHECK(cudaMemcpyAsync(act, w, n * sizeof(float), cudaMemcpyDeviceToDevice, cuda_stream));
#endif
}

// Synchronous both ways: to_host returns with the data there; from_host may be given a host
// buffer that the caller frees right after.
void ops_to_host(void* dst, const void* src, size_t bytes) {
    CUDA_OP_TIMER("ops_to_host");
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void ops_from_host(void* dst, const void* src, size_t bytes) {
    CUDA_OP_TIMER("ops_from_host");
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
// pinned: ops_to_host into it is a direct DMA (no staging copy through a driver buffer)
void* ops_host_alloc(size_t bytes) {
    void* p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return p;
}
void ops_host_free(void* p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

size_t cuda_allocated_bytes(void) { return cuda_live; }
size_t cuda_allocated_peak_bytes(void) { return cuda_peak; }
void cuda_reset_peak(void) { cuda_peak = cuda_live; }
size_t cuda_device_used_bytes(void) {
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return tot - fr;
}
// ops.h: what can still be allocated on the device, cudaMemGetInfo's free bytes (memory other
// processes hold is already subtracted; the backend's own scratch counts as used)
size_t ops_mem_available(void) {
    size_t fr = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return fr;
}

// gen: how many times the slot was (re)allocated (a reallocation loses its contents)
static struct { void* p; size_t bytes; unsigned gen; } cuda_scratch_buf[CUDA_SCRATCH_COUNT];
// grow: 1.25x the request, so that slowly growing requests (a sampler's growing context) do not
// reallocate every time; a reservation (cuda_scratch_reserve) is the exact size
static void scratch_resize(int slot, size_t bytes) {
    cuda_release(cuda_scratch_buf[slot].p);   // cudaFree waits for queued work that may use it
    cuda_scratch_buf[slot].p = bytes ? cuda_alloc_zeroed(bytes) : NULL;
    cuda_scratch_buf[slot].bytes = bytes;
    cuda_scratch_buf[slot].gen++;
}
void* cuda_scratch(int slot, size_t bytes) {
    if (cuda_scratch_buf[slot].bytes < bytes) scratch_resize(slot, bytes + bytes / 4);
    return cuda_scratch_buf[slot].p;
}
void cuda_scratch_reserve(int slot, size_t bytes) {
    if (bytes > cuda_scratch_buf[slot].bytes) scratch_resize(slot, bytes);
}
unsigned cuda_scratch_generation(int slot) { return cuda_scratch_buf[slot].gen; }

size_t ops_allocated_bytes(void) { return cuda_live; }
size_t ops_allocated_peak_bytes(void) { return cuda_peak; }
size_t ops_alloc_align(void) { return SCRATCH_CUDA_ALLOC_ALIGN; }

// ---- peak FLOP/s ----------------------------------------------------------------------------
// Dense peaks from NVIDIA's data sheets (SXM parts; no sparsity):
//                     fp32 (CUDA cores)   TF32 tensor   bf16 tensor
//   H100 SXM / H200        66.9 T            494.7 T       989.4 T
//   H100 PCIe              51.2 T            378 T         756 T
//   A100 (40/80 GB)        19.5 T            156 T         312 T
// Unknown GPUs: fp32 = SMs x FP32 lanes per SM (64 on sm_80, 128 on sm_86/89/90) x 2 x the
// boost clock; TF32 ~ 8x and bf16 ~ 16x that (the ratios of A100 and, roughly, H100): a rough
// estimate, good for MFU's order of magnitude only.
// key: matched against the device name (first match wins); sheet: the data sheet's part, for
// ops_peak_source.
typedef struct { const char* key; const char* sheet; double fp32, tf32, bf16; } CudaPeak;
static const CudaPeak cuda_peaks[] = {
    {"H200", "H200 SXM", 66.9e12, 494.7e12, 989.4e12},
    {"H100 PCIe", "H100 PCIe", 51.2e12, 378.0e12, 756.0e12},
    {"H100", "H100 SXM", 66.9e12, 494.7e12, 989.4e12},
    {"A100", "A100", 19.5e12, 156.0e12, 312.0e12},
};

static const CudaPeak* cuda_peak_entry(void) {
    for (size_t i = 0; i < sizeof(cuda_peaks) / sizeof(cuda_peaks[0]); i++)
        if (strstr(cuda_prop.name, cuda_peaks[i].key)) return &cuda_peaks[i];
    return NULL;
}

static int cuda_clock_khz(void) {
    int khz = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, cuda_dev));
    return khz;
}
static int cuda_fp32_lanes(void) { return (cuda_prop.major == 8 && cuda_prop.minor == 0) ? 64 : 128; }

static double cuda_peak_estimate_fp32(void) {
    return (double)cuda_prop.multiProcessorCount * cuda_fp32_lanes() * 2.0 * cuda_clock_khz() * 1e3;
}

double ops_peak_flops(void) {
    const CudaPeak* p = cuda_peak_entry();
    if (p) return cuda_math == CUDA_MATH_BF16 ? p->bf16 : cuda_math == CUDA_MATH_TF32 ? p->tf32 : p->fp32;
    double f = cuda_peak_estimate_fp32();
    return cuda_math == CUDA_MATH_BF16 ? 16.0 * f : cuda_math == CUDA_MATH_TF32 ? 8.0 * f : f;
}

double cuda_peak_flops_bf16(void) {
    const CudaPeak* p = cuda_peak_entry();
    return p ? p->bf16 : 16.0 * cuda_peak_estimate_fp32();
}

const char* ops_peak_source(void) {
    static char src[512];
    const char* prec = cuda_math == CUDA_MATH_BF16 ? "bf16 dense" : cuda_math == CUDA_MATH_TF32 ? "TF32 dense" : "fp32 (CUDA cores)";
    const CudaPeak* p = cuda_peak_entry();
    if (p)
        snprintf(src, sizeof src, "table: %s %s %.1f TFLOP/s, NVIDIA datasheet (device %s)", p->sheet, prec,
                 ops_peak_flops() / 1e12, cuda_prop.name);
    else
        snprintf(src, sizeof src, "estimate: %s %.1f TFLOP/s = %s%d SMs x %d fp32 lanes x 2 x %.0f MHz; device %s is not "
                 "in the table: order of magnitude only", prec, ops_peak_flops() / 1e12,
                 cuda_math == CUDA_MATH_BF16 ? "16 x " : cuda_math == CUDA_MATH_TF32 ? "8 x " : "",
                 cuda_prop.multiProcessorCount, cuda_fp32_lanes(), cuda_clock_khz() / 1e3, cuda_prop.name);
    return src;
}

// ---- per-op profile -------------------------------------------------------------------------
// Rows keyed by the op's name pointer (a string literal per op), in first-seen order.
#define CUDA_PROF_ROWS 96
static struct { const char* name; double seconds; long calls; } cuda_prof[CUDA_PROF_ROWS];
static int cuda_prof_rows = 0, cuda_prof_depth = 0;

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

CudaOpTimer::CudaOpTimer(const char* op) : name(op), t0(0.0), active(0) {
    if (!cuda_profiling) return;
    if (cuda_prof_depth++ > 0) return;   // inside another op: that one counts the time
    CUDA_CHECK(cudaDeviceSynchronize());
    t0 = prof_now();
    active = 1;
}

CudaOpTimer::~CudaOpTimer() {
    if (!cuda_profiling) return;
    cuda_prof_depth--;
    if (!active) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    double dt = prof_now() - t0;
    int i = 0;
    while (i < cuda_prof_rows && cuda_prof[i].name != name) i++;
    if (i == cuda_prof_rows) {
        if (cuda_prof_rows == CUDA_PROF_ROWS) return;
        cuda_prof[cuda_prof_rows].name = name;
        cuda_prof[cuda_prof_rows].seconds = 0.0;
        cuda_prof[cuda_prof_rows].calls = 0;
        cuda_prof_rows++;
    }
    cuda_prof[i].seconds += dt;
    cuda_prof[i].calls++;
}

int cuda_profile_enabled(void) { return cuda_profiling; }
void cuda_profile_reset(void) { cuda_prof_rows = 0; }

void cuda_profile_print(const char* title) {
    if (!cuda_profiling) return;
    double total = 0.0;
    int order[CUDA_PROF_ROWS];
    for (int i = 0; i < cuda_prof_rows; i++) { total += cuda_prof[i].seconds; order[i] = i; }
    for (int i = 1; i < cuda_prof_rows; i++)   // insertion sort, largest time first
        for (int j = i; j > 0 && cuda_prof[order[j]].seconds > cuda_prof[order[j - 1]].seconds; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    printf("per-op profile: %s (device synchronised around every op; %.3f ms in ops)\n", title, total * 1e3);
    printf("  %-34s %8s %12s %10s %7s\n", "op", "calls", "total ms", "ms/call", "share");
    for (int r = 0; r < cuda_prof_rows; r++) {
        int i = order[r];
        printf("  %-34s %8ld %12.3f %10.4f %6.1f%%\n", cuda_prof[i].name, cuda_prof[i].calls, cuda_prof[i].seconds * 1e3,
               cuda_prof[i].seconds * 1e3 / (double)cuda_prof[i].calls, total > 0 ? 100.0 * cuda_prof[i].seconds / total : 0.0);
    }
}
