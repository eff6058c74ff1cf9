// tests/cudaemu/test_cudaemu_checks.cu: the emulator's own checks (docs/gpu.md "The CUDA
// emulator": schedules, initcheck) against small kernels, some written to break them and some
// correct. Compiled like kernels/cuda/*.cu (cudaemu_rewrite.py, then g++ against
// tests/cudaemu/cudaemu_rt.cpp). Each case runs in a child process under its own environment;
// the parent checks how the child ended and what it printed:
//   a broken kernel must stop the child with a message naming the kernel and the check;
//   a correct kernel must run silently under every schedule and give the answer computed here.
//
//   test_cudaemu_checks            every case (exit 0 when all behave)
//   test_cudaemu_checks CASE       one case in this process (what the children run)
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#define N_T 64   // threads per block in the block-level cases

// ---- broken kernels ---------------------------------------------------------------------------
// every thread writes its own slot, then reads its mirror's without a barrier in between
__global__ void race_no_syncthreads_kernel(float* out) {
    __shared__ float s[N_T];
    int t = threadIdx.x;
    s[t] = (float)t;
    out[t] = s[N_T - 1 - t];
}
// the same with the barrier: correct
__global__ void mirror_syncthreads_kernel(float* out) {
    __shared__ float s[N_T];
    int t = threadIdx.x;
    s[t] = (float)t;
    __syncthreads();
    out[t] = s[N_T - 1 - t];
}
// block b adds block b-1's output to its own: correct only if blocks run in order
__global__ void neighbour_block_kernel(float* out, float* next) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        out[b] = (float)(b + 1);
        next[b] = b > 0 ? out[b - 1] : 0.0f;
    }
}
// half the threads fill a shared array that all of them then read (static __shared__)
__global__ void uninit_static_smem_kernel(float* out) {
    __shared__ float s[N_T];
    int t = threadIdx.x;
    if (t < N_T / 2) s[t] = 1.0f;
    __syncthreads();
    out[t] = s[t] * 0.0f + 1.0f;   // NaN * 0 is NaN, 3.4e38 * 0 is 0: the poison shows either way
}
// the same with dynamic shared memory
__global__ void uninit_dyn_smem_kernel(float* out) {
    extern __shared__ float sd[];
    int t = threadIdx.x;
    if (t < N_T / 2) sd[t] = 1.0f;
    __syncthreads();
    out[t] = sd[t] * 0.0f + 1.0f;
}
// a warp-synchronous tree sum in shared memory without __syncwarp between its steps
__global__ void warp_sum_no_syncwarp_kernel(float* out) {
    __shared__ float s[32];
    int l = threadIdx.x;
    s[l] = (float)(l + 1);
    for (int off = 16; off > 0; off >>= 1) {
        if (l < off) s[l] += s[l + off];
    }
    if (l == 0) out[0] = s[0];
}

// the phase after a barrier: each thread reads its neighbour's slot, then writes its own, which its
// other neighbour reads in the same phase (a write-after-read hazard; the schedules see it too)
__global__ void race_war_kernel(float* out) {
    __shared__ float s[N_T];
    int t = threadIdx.x;
    s[t] = 0.0f;
    __syncthreads();
    float v = s[(t + 1) % N_T];
    s[t] = (float)t;
    out[t] = v;
}

// ---- correct kernels (the checks must stay silent) -----------------------------------------------
// the same tree sum, correct on Volta and later: __syncwarp orders each step's writes and reads
__global__ void warp_sum_syncwarp_kernel(float* out) {
    __shared__ float s[32];
    int l = threadIdx.x;
    s[l] = (float)(l + 1);
    __syncwarp();
    for (int off = 16; off > 0; off >>= 1) {
        float v = l < off ? s[l + off] : 0.0f;
        __syncwarp();
        if (l < off) s[l] += v;
        __syncwarp();
    }
    if (l == 0) out[0] = s[0];
}
// a warp-shuffle reduction, then a block reduction through shared memory (2 warps)
__global__ void shuffle_block_sum_kernel(float* out) {
    __shared__ float red[2];
    int t = threadIdx.x;
    float v = (float)(t + 1);
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((t & 31) == 0) red[t >> 5] = v;
    __syncthreads();
    out[t] = red[0] + red[1];
}

// ---- the cases -----------------------------------------------------------------------------------
static float* dev(int n) {
    float* p;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); exit(2); }
    return p;
}
static void get(float* h, const float* d, int n) { cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost); }

// runs one case in this process; 0 when its result is the expected one
static int run_case(const char* c) {
    float h[N_T];
    if (!strcmp(c, "race_no_syncthreads") || !strcmp(c, "mirror_syncthreads")) {
        float* o = dev(N_T);
        if (c[0] == 'r') race_no_syncthreads_kernel<<<1, N_T>>>(o);
        else mirror_syncthreads_kernel<<<1, N_T>>>(o);
        get(h, o, N_T);
        for (int t = 0; t < N_T; t++)
            if (h[t] != (float)(N_T - 1 - t)) { fprintf(stderr, "%s: out[%d] = %g, want %d\n", c, t, h[t], N_T - 1 - t); return 1; }
        return 0;
    }
    if (!strcmp(c, "race_war")) {
        float* o = dev(N_T);
        race_war_kernel<<<1, N_T>>>(o);
        get(h, o, N_T);
        for (int t = 0; t < N_T; t++)
            if (h[t] != 0.0f) { fprintf(stderr, "%s: out[%d] = %g, want 0\n", c, t, h[t]); return 1; }
        return 0;
    }
    if (!strcmp(c, "neighbour_block")) {
        const int nb = 8;
        float* o = dev(nb);
        float* nx = dev(nb);
        cudaMemset(o, 0, nb * sizeof(float));
        neighbour_block_kernel<<<nb, 32>>>(o, nx);
        get(h, nx, nb);
        for (int b = 0; b < nb; b++)
            if (h[b] != (float)b) { fprintf(stderr, "%s: next[%d] = %g, want %d\n", c, b, h[b], b); return 1; }
        return 0;
    }
    if (!strcmp(c, "uninit_static_smem") || !strcmp(c, "uninit_dyn_smem")) {
        float* o = dev(N_T);
        if (!strcmp(c, "uninit_static_smem")) uninit_static_smem_kernel<<<1, N_T>>>(o);
        else uninit_dyn_smem_kernel<<<1, N_T, N_T * sizeof(float)>>>(o);
        get(h, o, N_T);
        for (int t = 0; t < N_T; t++)
            if (h[t] != 1.0f) { fprintf(stderr, "%s: out[%d] = %g, want 1\n", c, t, h[t]); return 1; }
        return 0;
    }
    if (!strcmp(c, "warp_sum_no_syncwarp") || !strcmp(c, "warp_sum_syncwarp")) {
        float* o = dev(1);
        if (!strcmp(c, "warp_sum_syncwarp")) warp_sum_syncwarp_kernel<<<1, 32>>>(o);
        else warp_sum_no_syncwarp_kernel<<<1, 32>>>(o);
        get(h, o, 1);
        if (h[0] != 528.0f) { fprintf(stderr, "%s: sum %g, want 528\n", c, h[0]); return 1; }   // 1 + ... + 32
        return 0;
    }
    if (!strcmp(c, "shuffle_block_sum")) {
        float* o = dev(N_T);
        shuffle_block_sum_kernel<<<1, N_T>>>(o);
        get(h, o, N_T);
        for (int t = 0; t < N_T; t++)
            if (h[t] != 2080.0f) { fprintf(stderr, "%s: out[%d] = %g, want 2080\n", c, t, h[t]); return 1; }   // 1 + ... + 64
        return 0;
    }
    fprintf(stderr, "test_cudaemu_checks: unknown case '%s'\n", c);
    return 2;
}

// runs `self CASE` under env (NAME=VALUE, or NULL); want_fail: the child must abort with every
// string of must (NULL-terminated) in its stderr; else it must exit 0 and print nothing
static int expect(const char* self, const char* c, const char* env, int want_fail, const char* const* must) {
    int fd[2];
    if (pipe(fd)) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        unsetenv("CUDAEMU_SCHEDULE");   // the case's own setting only
        unsetenv("CUDAEMU_SCHEDULES");
        unsetenv("CUDAEMU_SANITIZE");
        unsetenv("CUDAEMU_RACECHECK");
        if (env) putenv((char*)env);
        execl(self, self, c, (char*)NULL);
        _exit(127);
    }
    close(fd[1]);
    std::string err;
    char buf[4096];
    ssize_t k;
    while ((k = read(fd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)k);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int ok;
    if (want_fail) {
        ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
        for (int i = 0; must && must[i]; i++)
            if (err.find(must[i]) == std::string::npos) ok = 0;
    } else {
        ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && err.empty();
    }
    printf("%-4s %-22s %-28s %s\n", ok ? "ok" : "FAIL", c, env ? env : "(default)",
           want_fail ? "must stop with the message" : "must pass silently");
    if (!ok) printf("     child status %d, stderr:\n%s\n", st, err.c_str());
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc == 2) return run_case(argv[1]);
    const char* self = "/proc/self/exe";
    char path[4096];
    ssize_t n = readlink(self, path, sizeof path - 1);
    if (n <= 0) { perror("readlink"); return 1; }
    path[n] = 0;
    const char* K3 = "CUDAEMU_SCHEDULES=3";
    const char* race[] = {"kernel race_no_syncthreads_kernel", "disagree", NULL};
    const char* nbr[] = {"kernel neighbour_block_kernel", "disagree", NULL};
    const char* ust[] = {"kernel uninit_static_smem_kernel", "disagree", "poison 0x7F", NULL};
    const char* udy[] = {"kernel uninit_dyn_smem_kernel", "disagree", "poison 0x7F", NULL};
    const char* wsn[] = {"kernel warp_sum_no_syncwarp_kernel", "disagree", NULL};
    const char* bad[] = {"CUDAEMU_SCHEDULE: expected forward, reverse or random:SEED", NULL};
    const char* badk[] = {"CUDAEMU_SCHEDULES (or CUDAEMU_SANITIZE): expected the number of schedules per launch", NULL};
    int fails = 0;
    // broken kernels: each stops under the schedules, naming the kernel
    fails += expect(path, "race_no_syncthreads", K3, 1, race);
    fails += expect(path, "neighbour_block", K3, 1, nbr);
    fails += expect(path, "uninit_static_smem", K3, 1, ust);
    fails += expect(path, "uninit_dyn_smem", K3, 1, udy);
    fails += expect(path, "warp_sum_no_syncwarp", K3, 1, wsn);
    const char* wark[] = {"kernel race_war_kernel", "disagree", NULL};
    fails += expect(path, "race_war", K3, 1, wark);
    // ... and passes under the single default schedule where the fixed order hides the bug (why
    // the schedules exist); the race reads its mirror's slot before it is written, so not that one
    fails += expect(path, "neighbour_block", NULL, 0, NULL);
    // correct kernels: silent under one schedule, under K of them, and under each named schedule
    const char* good[] = {"mirror_syncthreads", "warp_sum_syncwarp", "shuffle_block_sum"};
    const char* envs[] = {NULL, "CUDAEMU_SCHEDULES=5", "CUDAEMU_SCHEDULE=reverse", "CUDAEMU_SCHEDULE=random:7"};
    for (int g = 0; g < 3; g++)
        for (int e = 0; e < 4; e++) fails += expect(path, good[g], envs[e], 0, NULL);
    // racecheck and initcheck (this program's kernels are compiled with -fsanitize=thread: every
    // shared-memory access is seen): both threads, or the byte no thread wrote, with the kernel. The
    // last thread to reach a barrier runs on past it first, so thread 63 leads after one
    const char* RC = "CUDAEMU_RACECHECK=1";
    const char* war[] = {"racecheck: kernel race_war_kernel", "thread (0,0,0) writes byte 0", "that thread (63,0,0) read", NULL};
    const char* raw[] = {"kernel race_no_syncthreads_kernel", "reads byte 252", "which no thread of the block wrote", NULL};
    const char* ist[] = {"initcheck: kernel uninit_static_smem_kernel", "reads byte 252 of a static __shared__ array of 256 bytes", NULL};
    const char* idy[] = {"initcheck: kernel uninit_dyn_smem_kernel", "reads byte 252 of the dynamic shared memory", NULL};
    const char* wsr[] = {"kernel warp_sum_no_syncwarp_kernel", "thread (0,0,0) reads byte 64", NULL};
    fails += expect(path, "race_war", RC, 1, war);
    fails += expect(path, "race_no_syncthreads", RC, 1, raw);
    fails += expect(path, "uninit_static_smem", RC, 1, ist);
    fails += expect(path, "uninit_dyn_smem", RC, 1, idy);
    fails += expect(path, "warp_sum_no_syncwarp", RC, 1, wsr);
    for (int g = 0; g < 3; g++) fails += expect(path, good[g], RC, 0, NULL);
    fails += expect(path, "neighbour_block", RC, 0, NULL);   // across blocks: the schedules' part
    // bad settings: a one-line error naming the variable and what it takes
    fails += expect(path, "mirror_syncthreads", "CUDAEMU_SCHEDULE=backwards", 1, bad);
    fails += expect(path, "mirror_syncthreads", "CUDAEMU_SCHEDULES=0", 1, badk);
    printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
