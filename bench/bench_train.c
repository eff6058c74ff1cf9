// bench/bench_train.c: the CPU training-step benchmark (bench/README.md).
//
//   ./build/bench_train [--steps N] [--warmup N] [--only SUBSTR[,SUBSTR]] [--gates LIST]
//                       [--threads N] [--json PATH] [--no-torch] [--set section.key=value ...]
//                       [--busy-max PCT] [--max-tries K] [--wait-idle S]   (see --help)
//   ./build/bench_train --smoke        tiny configs, 1 warm-up + 2 steps, no torch (CI)
//
// For each config (bench/configs/*.ini x attn_gate none | headwise | elementwise) it times the
// full training step (zero grad, forward with targets, backward, grad norm, AdamW) and reports
// the median ms/step, tokens/s, GFLOP/s, the fraction of the measured fp32 peak, and the peak
// resident memory of the process that ran it against the analytic size. Each config runs in
// a forked worker process; when /usr/bin/python3 can import torch, bench/bench_torch.py runs
// the PyTorch reference model (tests/reference/model.py) on the same INI in a second worker,
// and the two are stepped in lockstep (ours, torch, ours, torch, ...) so that machine noise
// hits both. Each step's contamination by other processes is measured (/proc/stat minus the
// worker's own CPU time); busy steps are retaken after waiting for the machine to be idle.
// An MoE shape (a stem with "moe") is also compared with its dense twin of equal active FLOPs
// (the stem with "dense" in place of "moe", or without "_moe"): the ratio of their step times
// is the cost of routing and dispatch.
//
// The parent process never calls into the backend (no OpenMP before fork): a probe child
// measures the peak and reports the thread count.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/rng.h"
#include "kernels/ops.h"

#define MAX_SETS 64
#define MAX_CONFIGS 256
#define PATH_LEN 1024

// ---------------------------------------------------------------------------------------------
// small utilities

// snprintf that may truncate (paths and messages are bounded; truncation only shortens them)
__attribute__((format(printf, 3, 4))) static int sfmt(char* buf, size_t cap, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return r;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int read_full(int fd, void* buf, size_t n) {
    char* p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r; n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void* buf, size_t n) {
    const char* p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r; n -= (size_t)r;
    }
    return 0;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(const double* v, int n) {
    if (n <= 0) return NAN;
    double* s = malloc(n * sizeof(double));
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    double m = (n & 1) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static int is_dir(const char* p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char* p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p of the directory part of `path`
static int make_parent_dirs(const char* path) {
    char buf[PATH_LEN];
    sfmt(buf, sizeof(buf), "%s", path);
    char* slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = 0;
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

// Share of the machine's CPU time that was busy over `seconds` (from /proc/stat; -1 if unknown).
// Sampled while our workers are idle, it is what other processes use: the timings are only
// meaningful on an otherwise idle machine (OpenMP barriers degrade badly when a core is taken).
static int read_cpu_times(unsigned long long* busy, unsigned long long* total) {
    FILE* f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 4) return -1;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += v[i];      // guest time is already in user
    *busy = *total - v[3] - v[4];                     // minus idle and iowait
    return 0;
}

static double cpu_busy_fraction(double seconds) {
    unsigned long long b0, t0, b1, t1;
    if (read_cpu_times(&b0, &t0) != 0) return -1.0;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    if (read_cpu_times(&b1, &t1) != 0 || t1 <= t0) return -1.0;
    return (double)(b1 - b0) / (double)(t1 - t0);
}

// value of "key": NUMBER in a one-line JSON object (no nesting needed here); 0 if absent
static int json_num(const char* line, const char* key, double* out) {
    char pat[64];
    sfmt(pat, sizeof(pat), "\"%s\":", key);
    const char* p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (strncmp(p, "NaN", 3) == 0) { *out = NAN; return 1; }
    char* end;
    double v = strtod(p, &end);
    if (end == p) return 0;
    *out = v;
    return 1;
}

// value of "key": "STRING" (escapes left as they are), into out; 0 if absent
static int json_str(const char* line, const char* key, char* out, size_t cap) {
    char pat[64];
    sfmt(pat, sizeof(pat), "\"%s\":", key);
    const char* p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != '"') return 0;
    p++;
    size_t n = 0;
    while (*p && !(*p == '"' && p[-1] != '\\') && n + 1 < cap) out[n++] = *p++;
    out[n] = 0;
    return 1;
}

static void json_escape(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void json_num_or_null(FILE* f, double v, const char* fmt) {
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

// ---------------------------------------------------------------------------------------------
// what to run

typedef struct {
    char name[160];      // "gpt2_124m_b4t64/headwise"
    char shape[128];     // "gpt2_124m_b4t64" (INI stem)
    char ini[PATH_LEN];  // "" for the built-in smoke configs
    int smoke_moe;       // the built-in MoE smoke config (ini "")
    int gate;            // GateKind
    Config cfg;          // resolved
    size_t table_total;  // floats in the parameter arena (with 64-byte padding)
    size_t n_params;     // real parameters (no padding)
    double flops_tok;    // gpt_flops_per_token
    double matmul_params;

    // results: ours
    int ok;
    char err[256];
    double* ms;          // every timed step (at most steps x max_tries)
    double* ms_others;   // other processes' share of the CPUs during each (NAN: too short to tell)
    int n_ms, n_clean, noisy;   // noisy: fewer than `steps` clean steps; the median is over all
    double med_ms;
    float loss0;
    size_t acts_floats;
    long rss_kb;
    double build_s;
    // results: torch
    int torch_ran, torch_ok;
    char torch_err[256];
    double* tms;
    double* tms_others;
    int n_tms, n_tclean, torch_noisy;
    double torch_med_ms;
    float torch_loss0;
    long torch_rss_kb;
    double torch_init_s;
    double busy_before;  // share of the machine's CPU busy just before this config (other processes)
    int group_size;      // configs stepped in one rotation with this one (1: alone with its torch twin)
} Bench;

typedef struct {
    int steps, warmup, threads_req;
    int max_tries;           // timed steps are capped at steps x max_tries
    double busy_max;         // a step is clean if other processes used at most this share of the CPUs
    double wait_idle_s;      // before a config and after a busy step, wait up to this for idle
    int group_shape;         // rotate all gate variants of a shape together (when memory allows)
    int smoke, no_torch, list_only;
    const char* only;
    int gate_on[3];          // indexed by GateKind
    char configs_dir[PATH_LEN];
    char json_path[PATH_LEN];
    char python[PATH_LEN];
    char torch_script[PATH_LEN];
    const char* sets[MAX_SETS];
    int n_sets;
} Opts;

static const char* gate_name(int g) {
    const char* s = config_enum_name("attn_gate", g);
    return s ? s : "?";
}

// The three gate variants of one shape: attn_gate, at the sdpa position with a sigmoid.
static void gate_overrides(int gate, char out[3][64]) {
    sfmt(out[0], 64, "model.attn_gate=%s", gate_name(gate));
    sfmt(out[1], 64, "model.gate_position=sdpa");
    sfmt(out[2], 64, "model.gate_act=sigmoid");
}

static const char* SMOKE_KEYS[] = {
    "model.vocab_size=256", "model.n_layer=2", "model.d_model=64", "model.n_head=4",
    "model.n_kv_head=2", "model.head_dim=16", "model.d_ff=128", "model.max_seq_len=64",
    "model.pos=rope", "model.norm=rmsnorm", "model.qk_norm=true", "model.mlp=swiglu",
    "model.tie_embeddings=false", "train.batch_size=2", "train.seq_len=32", "train.seed=1337",
};
// the MoE smoke shape: the smoke shape with 4 experts of width 64, top-2 (2 x 64 = its d_ff)
static const char* SMOKE_MOE_KEYS[] = {"moe.n_expert=4", "moe.top_k=2", "moe.d_expert=64"};
#define SMOKE_MOE_PATH ":smoke_moe"   // its entry in the shape list

static int only_match(const char* only, const char* name) {
    if (!only || !*only) return 1;
    char buf[512];
    sfmt(buf, sizeof(buf), "%s", only);
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
        if (strstr(name, tok)) return 1;
    return 0;
}

// Resolve one config: the INI (or the smoke keys), the gate, then the user's --set overrides.
static int resolve_config(Bench* b, const Opts* o) {
    Config* c = &b->cfg;
    config_defaults(c);
    if (b->ini[0]) {
        if (config_load_file(c, b->ini) != 0) return -1;
    } else {
        for (size_t i = 0; i < sizeof(SMOKE_KEYS) / sizeof(SMOKE_KEYS[0]); i++)
            if (config_apply_override(c, SMOKE_KEYS[i]) != 0) return -1;
        for (size_t i = 0; b->smoke_moe && i < sizeof(SMOKE_MOE_KEYS) / sizeof(SMOKE_MOE_KEYS[0]); i++)
            if (config_apply_override(c, SMOKE_MOE_KEYS[i]) != 0) return -1;
    }
    char g[3][64];
    gate_overrides(b->gate, g);
    for (int i = 0; i < 3; i++)
        if (config_apply_override(c, g[i]) != 0) return -1;
    for (int i = 0; i < o->n_sets; i++)
        if (config_apply_override(c, o->sets[i]) != 0) return -1;
    // one micro-batch per step: the benchmark times B x T tokens per optimizer step
    if (config_apply_override(c, "train.tokens_per_step=0") != 0) return -1;
    if (config_finalize(c, b->ini[0] ? b->ini : "bench_train --smoke") != 0) return -1;
    ParamTable t;
    param_table_build(&t, &c->model);
    b->table_total = t.total;
    b->n_params = 0;
    for (int i = 0; i < t.n; i++) b->n_params += t.p[i].numel;
    param_table_free(&t);
    b->flops_tok = gpt_flops_per_token(&c->model, c->train.seq_len);
    b->matmul_params = gpt_matmul_params(&c->model);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the worker processes (forked; the only places the backend is used)

typedef struct { double peak; int threads; char backend[128], peak_source[256]; } ProbeMsg;
typedef struct { int ok; double build_s; size_t table_total, acts_floats; } ReadyMsg;
typedef struct { double ms; float loss, norm; } StepMsg;

static void probe_main(int threads, int out_fd);

static int run_probe(int threads, ProbeMsg* probe) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) { close(p[0]); probe_main(threads, p[1]); }
    close(p[1]);
    int rc = read_full(p[0], probe, sizeof(*probe));
    close(p[0]);
    waitpid(pid, NULL, 0);
    return rc;
}

static void probe_main(int threads, int out_fd) {
    ops_init(threads);
    ProbeMsg m = {0};
    m.peak = ops_peak_flops();
    m.threads = ops_num_threads();
    sfmt(m.backend, sizeof(m.backend), "%s", ops_backend_name());
    sfmt(m.peak_source, sizeof(m.peak_source), "%s", ops_peak_source());
    write_full(out_fd, &m, sizeof(m));
    _exit(0);
}

// Random tokens (seeded): a B x (T+1) stream; inputs are its first T columns, targets the last T.
static void random_batch(int* in, int* tg, int B, int T, int V, unsigned long long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int b = 0; b < B; b++) {
        int prev = (int)(rng_next(&r) % (unsigned)V);
        for (int t = 0; t < T; t++) {
            int next = (int)(rng_next(&r) % (unsigned)V);
            in[b * T + t] = prev;
            tg[b * T + t] = next;
            prev = next;
        }
    }
}

// Our side: build the model, then one training step per 'S' on cmd_fd; exits on 'Q' or EOF.
static void worker_main(const Config* cfg, int threads, int cmd_fd, int out_fd) {
    const ModelConfig* mc = &cfg->model;
    const TrainConfig* tc = &cfg->train;
    ops_init(threads);
    double t0 = now_s();
    GPT m;
    gpt_build(&m, mc, tc->seed);
    gpt_alloc_acts(&m, tc->batch_size, tc->seq_len);
    Optim opt;
    optim_init(&opt, &m);
    const int B = tc->batch_size, T = tc->seq_len;
    int* in = malloc((size_t)B * T * sizeof(int));
    int* tg = malloc((size_t)B * T * sizeof(int));
    random_batch(in, tg, B, T, mc->vocab_size, tc->seed);
    ReadyMsg r = {1, now_s() - t0, m.table.total, m.acts_floats};
    if (write_full(out_fd, &r, sizeof(r)) != 0) _exit(1);
    for (;;) {
        char cmd;
        if (read_full(cmd_fd, &cmd, 1) != 0 || cmd != 'S') break;
        double s0 = now_s();
        gpt_zero_grad(&m);
        float loss = gpt_forward(&m, in, tg);
        gpt_backward(&m, 1.0f);
        float norm = optim_grad_norm(&m);
        optim_step(&opt, &m, tc, tc->lr, norm);
        StepMsg s = {(now_s() - s0) * 1e3, loss, norm};
        if (write_full(out_fd, &s, sizeof(s)) != 0) break;
    }
    free(in); free(tg);
    optim_free(&opt);
    gpt_free(&m);
    _exit(0);
}

typedef struct { pid_t pid; int cmd_fd, out_fd; } OursProc;

// In a forked worker: close every descriptor but stdio and its own pipe ends, so that it holds
// no copy of another worker's command pipe (which would keep that worker from seeing EOF).
static void close_other_fds(int keep1, int keep2) {
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (int fd = 3; fd < max; fd++)
        if (fd != keep1 && fd != keep2) close(fd);
}

static int ours_start(OursProc* p, const Config* cfg, int threads, ReadyMsg* ready) {
    int cmd[2], out[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return -1;
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close_other_fds(cmd[0], out[1]);
        worker_main(cfg, threads, cmd[0], out[1]);
    }
    close(cmd[0]); close(out[1]);
    p->pid = pid; p->cmd_fd = cmd[1]; p->out_fd = out[0];
    if (read_full(p->out_fd, ready, sizeof(*ready)) != 0) return -1;
    return 0;
}

static int ours_step(OursProc* p, StepMsg* s) {
    char c = 'S';
    if (write_full(p->cmd_fd, &c, 1) != 0) return -1;
    return read_full(p->out_fd, s, sizeof(*s));
}

// Ends a worker (ours or torch) and returns its peak RSS in KiB (-1 if it failed).
static long proc_finish(pid_t pid, int* cmd_fd, int* out_fd, int* exit_ok) {
    if (*cmd_fd >= 0) {   // 'Q' (ours; torch got "quit" already), then EOF: either one ends it
        write_full(*cmd_fd, "Q", 1);
        close(*cmd_fd);
        *cmd_fd = -1;
    }
    if (*out_fd >= 0) { close(*out_fd); *out_fd = -1; }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    pid_t r;
    do { r = wait4(pid, &status, 0, &ru); } while (r < 0 && errno == EINTR);
    *exit_ok = r == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (r != pid) return -1;
    return ru.ru_maxrss;   // KiB on Linux
}

// ---- the PyTorch side: bench/bench_torch.py --serve, one JSON line per message ----
typedef struct { pid_t pid; int cmd_fd, out_fd; FILE* out; } TorchProc;

static int torch_readline(TorchProc* p, char* line, size_t cap) {
    while (fgets(line, (int)cap, p->out)) {
        if (line[0] == '{') return 0;      // skip anything that is not one of our JSON lines
        fprintf(stderr, "    torch: %s", line);
    }
    return -1;
}

static int torch_start(TorchProc* p, const Opts* o, const Bench* b, int threads, char* line,
                       size_t cap) {
    int cmd[2], out[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return -1;
    char thr[32];
    sfmt(thr, sizeof(thr), "%d", threads);
    char g[3][64];
    gate_overrides(b->gate, g);
    const char* argv[16 + 2 * MAX_SETS];
    int a = 0;
    argv[a++] = o->python;
    argv[a++] = o->torch_script;
    argv[a++] = b->ini;
    argv[a++] = "--serve";
    argv[a++] = "--threads";
    argv[a++] = thr;
    for (int i = 0; i < 3; i++) { argv[a++] = "--set"; argv[a++] = g[i]; }
    for (int i = 0; i < o->n_sets; i++) { argv[a++] = "--set"; argv[a++] = o->sets[i]; }
    argv[a] = NULL;
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(cmd[0], 0);
        dup2(out[1], 1);
        signal(SIGPIPE, SIG_DFL);
        execv(o->python, (char* const*)argv);
        fprintf(stderr, "error: cannot run %s: %s\n", o->python, strerror(errno));
        _exit(127);
    }
    close(cmd[0]); close(out[1]);
    p->pid = pid; p->cmd_fd = cmd[1]; p->out_fd = out[0];
    p->out = fdopen(out[0], "r");
    if (!p->out) return -1;
    return torch_readline(p, line, cap);
}

static int torch_step(TorchProc* p, double* ms, double* loss, char* line, size_t cap) {
    if (write_full(p->cmd_fd, "step\n", 5) != 0) return -1;
    if (torch_readline(p, line, cap) != 0) return -1;
    if (!json_num(line, "ms", ms)) return -1;
    if (!json_num(line, "loss", loss)) *loss = NAN;
    return 0;
}

static long torch_finish(TorchProc* p, int* exit_ok) {
    if (p->cmd_fd >= 0) { write_full(p->cmd_fd, "quit\n", 5); close(p->cmd_fd); p->cmd_fd = -1; }
    if (p->out) {
        char line[4096];
        while (fgets(line, sizeof(line), p->out)) {}   // drain the final line
        fclose(p->out); p->out = NULL; p->out_fd = -1;
    }
    return proc_finish(p->pid, &p->cmd_fd, &p->out_fd, exit_ok);
}

// Does `python` import torch? Fills the version.
static int torch_available(const Opts* o, char* version, size_t cap) {
    if (access(o->python, X_OK) != 0) { sfmt(version, cap, "%s not found", o->python); return 0; }
    if (!is_file(o->torch_script)) { sfmt(version, cap, "%s not found", o->torch_script); return 0; }
    char cmd[PATH_LEN + 128];
    sfmt(cmd, sizeof(cmd), "'%s' -c 'import torch, numpy; print(torch.__version__)' 2>/dev/null", o->python);
    fflush(stdout); fflush(stderr);
    FILE* f = popen(cmd, "r");
    if (!f) { sfmt(version, cap, "popen failed"); return 0; }
    char buf[256] = "";
    if (!fgets(buf, sizeof(buf), f)) buf[0] = 0;
    int rc = pclose(f);
    buf[strcspn(buf, "\r\n")] = 0;
    if (rc != 0 || !buf[0]) { sfmt(version, cap, "%s cannot import torch and numpy", o->python); return 0; }
    sfmt(version, cap, "%s", buf);
    return 1;
}

// ---------------------------------------------------------------------------------------------
// running one config: ours and (optionally) torch, stepped in lockstep

static double analytic_bytes(const Bench* b) {
    return 4.0 * (4.0 * (double)b->table_total) + 4.0 * (double)b->acts_floats;
}

// ---- other processes' share of the CPUs during one step ----
// /proc/stat's busy time over the step minus the worker's own CPU time (/proc/PID/stat, all its
// threads), over the machine's total: what the rest of the machine used while the step ran.
// Both count in USER_HZ ticks (10 ms), so steps shorter than ~MIN_TICKS ticks of machine time
// are not judged (NAN).
#define MIN_TICKS 20
typedef struct { unsigned long long busy, total; long long proc; } StepProbe;

static long long proc_ticks(pid_t pid) {
    char path[64], buf[2048];
    sfmt(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char* p = strrchr(buf, ')');   // the command name may contain spaces
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

static void probe_begin(StepProbe* s, pid_t pid) {
    if (read_cpu_times(&s->busy, &s->total) != 0) s->total = 0;
    s->proc = proc_ticks(pid);
}

static double probe_end(const StepProbe* s, pid_t pid) {
    unsigned long long busy, total;
    if (s->total == 0 || read_cpu_times(&busy, &total) != 0) return NAN;
    long long proc = proc_ticks(pid);
    if (s->proc < 0 || proc < 0 || total < s->total + MIN_TICKS) return NAN;
    double others = ((double)(busy - s->busy) - (double)(proc - s->proc)) / (double)(total - s->total);
    return others < 0.0 ? 0.0 : others;
}

// Let the worker that just answered put its OpenMP threads to sleep (they spin for a few ms
// after a parallel region) before the other side's step starts.
static void settle(void) {
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

// Waits (up to max_s) until other processes use at most busy_max of the CPUs, sampled while
// our workers are idle. Returns the last sample (-1 if /proc/stat is unreadable).
static double wait_idle(const Opts* o, double max_s) {
    double busy = cpu_busy_fraction(o->smoke ? 0.05 : 0.3);
    if (busy <= o->busy_max || max_s <= 0) return busy;
    double t0 = now_s();
    fprintf(stderr, "    waiting for the machine to become idle (other processes use %.0f%% of the CPUs) ...",
            100.0 * busy);
    while (busy > o->busy_max && now_s() - t0 < max_s) busy = cpu_busy_fraction(1.0);
    fprintf(stderr, " %s after %.0f s\n", busy <= o->busy_max ? "idle" : "still busy, going on",
            now_s() - t0);
    return busy;
}

static int step_clean(double others, double busy_max) { return !(others > busy_max); }

// Median of the clean steps if there are at least `want`, else of all of them (*noisy = 1).
static double select_median(const double* ms, const double* others, int n, int want,
                            double busy_max, int* n_clean, int* noisy) {
    double* c = malloc((n > 0 ? n : 1) * sizeof(double));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (step_clean(others[i], busy_max)) c[k++] = ms[i];
    *n_clean = k;
    *noisy = k < want;
    double m = k >= want ? median(c, k) : median(ms, n);
    free(c);
    return m;
}

// ---- memory admission for a rotation group ----
// Activation floats of a config, from gpt_alloc_acts in a short-lived child (it touches the
// arena, so the parent's RSS, which every worker inherits, stays small). 0 on failure.
static size_t acts_probe(const Config* cfg) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return 0;
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        close(p[0]);
        static GPT m;
        memset(&m, 0, sizeof(m));
        m.cfg = cfg->model;
        gpt_alloc_acts(&m, cfg->train.batch_size, cfg->train.seq_len);
        size_t f = m.acts_floats;
        write_full(p[1], &f, sizeof(f));
        _exit(0);
    }
    close(p[1]);
    size_t f = 0;
    if (read_full(p[0], &f, sizeof(f)) != 0) f = 0;
    close(p[0]);
    waitpid(pid, NULL, 0);
    return f;
}

static double mem_available_bytes(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0.0;
    char line[256];
    double kb = 0.0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024.0;
}

// Rough peak memory of each side, only to decide what fits at once: ours is the analytic size
// plus libraries; torch (measured on the reference model) ~ 16 B/param + 3.5x our activations
// + 400 MiB of interpreter and libraries.
static double est_ours_bytes(const Bench* b) { return analytic_bytes(b) + 64.0 * 1048576.0; }
static double est_torch_bytes(const Bench* b) {
    return 16.0 * (double)b->n_params + 3.5 * 4.0 * (double)b->acts_floats + 400.0 * 1048576.0;
}

// ---- one rotation group: every worker of the group steps in turn ----
typedef struct {
    Bench* b;
    int torch;           // 0 ours, 1 torch
    OursProc op;
    TorchProc tp;
    int alive, clean;
} Worker;

static pid_t worker_pid(const Worker* w) { return w->torch ? w->tp.pid : w->op.pid; }

static void run_group(Bench** g, int k, const Opts* o, int threads, int use_torch) {
    const int W = o->warmup, S = o->steps, cap = o->steps * o->max_tries;
    Worker* w = calloc(2 * (size_t)k, sizeof(Worker));
    int nw = 0;
    for (int i = 0; i < k; i++) {
        Bench* b = g[i];
        b->ms = calloc(cap, sizeof(double));
        b->ms_others = calloc(cap, sizeof(double));
        b->tms = calloc(cap, sizeof(double));
        b->tms_others = calloc(cap, sizeof(double));
        b->med_ms = b->torch_med_ms = NAN;
        b->loss0 = b->torch_loss0 = NAN;
        b->rss_kb = b->torch_rss_kb = -1;
        b->torch_ran = use_torch;
        b->group_size = k;
    }
    double busy = wait_idle(o, o->wait_idle_s);
    if (busy > o->busy_max)
        fprintf(stderr, "    WARNING: other processes keep %.0f%% of the CPUs busy\n", 100.0 * busy);
    for (int i = 0; i < k; i++) g[i]->busy_before = busy;

    // start every worker: ours, then torch, per config; the rotation order is the same
    char line[8192];
    for (int i = 0; i < k; i++) {
        Bench* b = g[i];
        Worker* x = &w[nw];
        memset(x, 0, sizeof(*x));
        x->b = b;
        x->op.pid = -1; x->op.cmd_fd = x->op.out_fd = -1;
        fprintf(stderr, "    %-30s ours : building ... ", b->name);
        double t0 = now_s();
        ReadyMsg ready = {0};
        if (ours_start(&x->op, &b->cfg, threads, &ready) != 0 || !ready.ok) {
            sfmt(b->err, sizeof(b->err), "our worker failed while building the model");
            fprintf(stderr, "failed\n");
            if (x->op.pid > 0) { int ok; proc_finish(x->op.pid, &x->op.cmd_fd, &x->op.out_fd, &ok); }
        } else {
            b->acts_floats = ready.acts_floats;
            b->build_s = ready.build_s;
            x->alive = 1;
            nw++;
            fprintf(stderr, "ready in %.1f s (activations %.0f MiB, analytic total %.0f MiB)\n",
                    now_s() - t0, ready.acts_floats * 4.0 / 1048576.0, analytic_bytes(b) / 1048576.0);
        }
        if (!use_torch) continue;
        x = &w[nw];
        memset(x, 0, sizeof(*x));
        x->b = b;
        x->torch = 1;
        x->tp.pid = -1; x->tp.cmd_fd = x->tp.out_fd = -1;
        fprintf(stderr, "    %-30s torch: starting bench_torch.py (import, init) ... ", b->name);
        t0 = now_s();
        if (torch_start(&x->tp, o, b, threads, line, sizeof(line)) != 0) {
            sfmt(b->torch_err, sizeof(b->torch_err), "bench_torch.py exited before it was ready");
        } else if (json_str(line, "error", b->torch_err, sizeof(b->torch_err))) {
            // reported below
        } else if (strstr(line, "\"ready\"")) {
            x->alive = 1;
            double v;
            if (json_num(line, "init_s", &v)) b->torch_init_s = v;
            fprintf(stderr, "ready in %.1f s", now_s() - t0);
            if (json_num(line, "threads", &v)) fprintf(stderr, " (%d threads)", (int)v);
            if (json_num(line, "params", &v) && (size_t)v != b->n_params)
                fprintf(stderr, " [warning: torch has %.0f parameters, ours %zu]", v, b->n_params);
            fprintf(stderr, "\n");
        } else {
            sfmt(b->torch_err, sizeof(b->torch_err), "unexpected line from bench_torch.py");
        }
        if (!x->alive) {
            fprintf(stderr, "failed: %s\n", b->torch_err);
            if (x->tp.pid > 0) { int ok; b->torch_rss_kb = torch_finish(&x->tp, &ok); }
        } else {
            nw++;
        }
    }

    // warm-up rounds, then timed rounds until every worker has S steps that ran on an otherwise
    // idle machine (or cap timed rounds were taken)
    int timed_rounds = 0;
    for (int r = 0;; r++) {
        int timed = r >= W;
        if (timed) {
            int any = 0, done = 1;
            for (int j = 0; j < nw; j++)
                if (w[j].alive) { any = 1; if (w[j].clean < S) done = 0; }
            if (!any || done || timed_rounds >= cap) break;
        }
        int dirty_any = 0;
        for (int j = 0; j < nw; j++) {
            Worker* x = &w[j];
            if (!x->alive) continue;
            Bench* b = x->b;
            if (timed) fprintf(stderr, "    step    %2d/%d%s", timed_rounds + 1, S, timed_rounds >= S ? "+" : " ");
            else fprintf(stderr, "    warm-up %2d/%d ", r + 1, W);
            fprintf(stderr, " %-30s %-5s", b->name, x->torch ? "torch" : "ours");
            StepProbe pr;
            double ms = NAN, loss = NAN;
            settle();
            probe_begin(&pr, worker_pid(x));
            int failed;
            if (x->torch) {
                failed = torch_step(&x->tp, &ms, &loss, line, sizeof(line)) != 0;
                if (failed && !json_str(line, "error", b->torch_err, sizeof(b->torch_err)))
                    sfmt(b->torch_err, sizeof(b->torch_err), "bench_torch.py died during step %d", r + 1);
            } else {
                StepMsg sm;
                failed = ours_step(&x->op, &sm) != 0;
                if (failed) sfmt(b->err, sizeof(b->err), "our worker died during step %d", r + 1);
                else { ms = sm.ms; loss = sm.loss; }
            }
            if (failed) {
                fprintf(stderr, " FAILED (%s)\n", x->torch ? b->torch_err : b->err);
                x->alive = 0;
                continue;
            }
            double oth = probe_end(&pr, worker_pid(x));
            int dirty = !step_clean(oth, o->busy_max);
            if (r == 0) { if (x->torch) b->torch_loss0 = (float)loss; else b->loss0 = (float)loss; }
            if (timed) {
                if (x->torch) { b->tms_others[b->n_tms] = oth; b->tms[b->n_tms++] = ms; }
                else { b->ms_others[b->n_ms] = oth; b->ms[b->n_ms++] = ms; }
                x->clean += !dirty;
                dirty_any |= dirty;
            }
            fprintf(stderr, " %9.1f ms (loss %.4f", ms, loss);
            if (isfinite(oth)) fprintf(stderr, ", others %2.0f%%", 100.0 * oth);
            fprintf(stderr, ")%s\n", timed && dirty ? "  <- other processes were busy: not counted" : "");
        }
        if (timed) timed_rounds++;
        if (timed && dirty_any && timed_rounds < cap) wait_idle(o, o->wait_idle_s);
    }

    // finish: peak RSS from wait4, medians over the clean steps
    for (int j = 0; j < nw; j++) {
        Worker* x = &w[j];
        Bench* b = x->b;
        int exit_ok = 0;
        if (x->torch) {
            b->torch_rss_kb = torch_finish(&x->tp, &exit_ok);
            b->torch_ok = exit_ok && b->n_tms >= S && !b->torch_err[0];
            if (!exit_ok && !b->torch_err[0]) sfmt(b->torch_err, sizeof(b->torch_err), "bench_torch.py exited abnormally");
            if (b->torch_ok)
                b->torch_med_ms = select_median(b->tms, b->tms_others, b->n_tms, S, o->busy_max, &b->n_tclean, &b->torch_noisy);
        } else {
            b->rss_kb = proc_finish(x->op.pid, &x->op.cmd_fd, &x->op.out_fd, &exit_ok);
            b->ok = exit_ok && b->n_ms >= S && !b->err[0];
            if (!exit_ok && !b->err[0]) sfmt(b->err, sizeof(b->err), "our worker exited abnormally");
            if (b->ok) b->med_ms = select_median(b->ms, b->ms_others, b->n_ms, S, o->busy_max, &b->n_clean, &b->noisy);
        }
    }
    for (int i = 0; i < k; i++) {
        Bench* b = g[i];
        fprintf(stderr, "    median %-30s ours %.1f ms", b->name, b->med_ms);
        if (b->torch_ok) fprintf(stderr, " | torch %.1f ms | torch/ours %.2f", b->torch_med_ms, b->torch_med_ms / b->med_ms);
        fprintf(stderr, " | peak RSS ours %.0f MiB", b->rss_kb / 1024.0);
        if (b->torch_ok) fprintf(stderr, ", torch %.0f MiB", b->torch_rss_kb / 1024.0);
        if (b->noisy || b->torch_noisy) fprintf(stderr, " | NOISY: fewer than %d steps ran on an idle machine", S);
        fprintf(stderr, "\n");
    }
    free(w);
}

// ---------------------------------------------------------------------------------------------
// reporting

typedef struct {
    char shape[128];
    int idx[3];          // Bench index per GateKind, -1 if not run
    double layer_share_ew, layer_share_hw;   // gate rows' share of one layer's matmul FLOPs
    double flops_ratio_ew, flops_ratio_hw;   // FLOPs/token gated / baseline (whole step)
    double ours_hw, ours_ew, torch_hw, torch_ew;   // measured step-time ratios
    int rotated;         // the variants stepped in one rotation (else: separate runs, noisier)
} GateCost;

static double layer_matmul_params(const ModelConfig* c) {
    return (gpt_matmul_params(c) - (double)c->padded_vocab * c->d_model) / c->n_layer;
}

static int gate_costs(const Bench* bs, int n, GateCost* out) {
    int ng = 0;
    for (int i = 0; i < n; i++) {
        int k;
        for (k = 0; k < ng; k++) if (strcmp(out[k].shape, bs[i].shape) == 0) break;
        if (k == ng) {
            memset(&out[ng], 0, sizeof(GateCost));
            sfmt(out[ng].shape, sizeof(out[ng].shape), "%s", bs[i].shape);
            out[ng].idx[0] = out[ng].idx[1] = out[ng].idx[2] = -1;
            ng++;
        }
        out[k].idx[bs[i].gate] = i;
    }
    for (int k = 0; k < ng; k++) {
        GateCost* g = &out[k];
        // the FLOP shares come from the config alone, whichever variants ran
        const Bench* any = &bs[g->idx[0] >= 0 ? g->idx[0] : g->idx[1] >= 0 ? g->idx[1] : g->idx[2]];
        ModelConfig c0 = any->cfg.model, ce = c0, ch = c0;
        c0.attn_gate = GATE_NONE;
        ce.attn_gate = GATE_ELEMENTWISE; ce.gate_position = GATEPOS_SDPA;
        ch.attn_gate = GATE_HEADWISE; ch.gate_position = GATEPOS_SDPA;
        int T = any->cfg.train.seq_len;
        double l0 = layer_matmul_params(&c0), le = layer_matmul_params(&ce), lh = layer_matmul_params(&ch);
        g->layer_share_ew = (le - l0) / le;
        g->layer_share_hw = (lh - l0) / lh;
        g->flops_ratio_ew = gpt_flops_per_token(&ce, T) / gpt_flops_per_token(&c0, T);
        g->flops_ratio_hw = gpt_flops_per_token(&ch, T) / gpt_flops_per_token(&c0, T);
        g->ours_hw = g->ours_ew = g->torch_hw = g->torch_ew = NAN;
        g->rotated = any->group_size > 1;
        if (g->idx[GATE_NONE] >= 0) {
            const Bench* b0 = &bs[g->idx[GATE_NONE]];
            if (g->idx[GATE_HEADWISE] >= 0) {
                g->ours_hw = bs[g->idx[GATE_HEADWISE]].med_ms / b0->med_ms;
                g->torch_hw = bs[g->idx[GATE_HEADWISE]].torch_med_ms / b0->torch_med_ms;
            }
            if (g->idx[GATE_ELEMENTWISE] >= 0) {
                g->ours_ew = bs[g->idx[GATE_ELEMENTWISE]].med_ms / b0->med_ms;
                g->torch_ew = bs[g->idx[GATE_ELEMENTWISE]].torch_med_ms / b0->torch_med_ms;
            }
        }
    }
    return ng;
}

// MoE dispatch cost: an MoE config against the dense config of its twin shape with the same gate
typedef struct {
    int moe, dense;      // Bench indices
    double flops_ratio;  // FLOPs/token MoE / dense (1 + the router, when the active FFNs match)
    double ours, torch;  // step time MoE / dense
} MoeCost;

// The dense twin of an MoE shape's stem: "moe" -> "dense" if that shape ran, else without "_moe".
static int moe_twin(const Bench* bs, int n, int i) {
    char a[128], b[128];
    const char* at = strstr(bs[i].shape, "moe");
    if (!at) return -1;
    size_t pre = (size_t)(at - bs[i].shape);
    sfmt(a, sizeof(a), "%.*sdense%s", (int)pre, bs[i].shape, at + 3);
    b[0] = 0;
    if (pre > 0 && bs[i].shape[pre - 1] == '_') sfmt(b, sizeof(b), "%.*s%s", (int)(pre - 1), bs[i].shape, at + 3);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++)
            if (j != i && bs[j].gate == bs[i].gate && bs[j].cfg.model.moe.n_expert == 0 &&
                strcmp(bs[j].shape, pass == 0 ? a : b) == 0)
                return j;
    return -1;
}

static int moe_costs(const Bench* bs, int n, MoeCost* out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (bs[i].cfg.model.moe.n_expert == 0) continue;
        int j = moe_twin(bs, n, i);
        if (j < 0) continue;
        MoeCost* c = &out[k++];
        c->moe = i; c->dense = j;
        c->flops_ratio = bs[i].flops_tok / bs[j].flops_tok;
        c->ours = bs[i].ok && bs[j].ok ? bs[i].med_ms / bs[j].med_ms : NAN;
        c->torch = bs[i].torch_ok && bs[j].torch_ok ? bs[i].torch_med_ms / bs[j].torch_med_ms : NAN;
    }
    return k;
}

static void fmt_num(char* buf, size_t cap, const char* fmt, double v) {
    if (isfinite(v)) sfmt(buf, cap, fmt, v);
    else sfmt(buf, cap, "-");
}

static void print_tables(const Bench* bs, int n, const GateCost* gc, int ng, const MoeCost* mc, int nm,
                         double peak, const char* peak_source, int threads, const char* backend, int torch_on,
                         const char* torch_note, const Opts* o) {
    printf("\n== gatedgpt CPU training step: %s | peak %.1f GFLOP/s (%s) | median of %d steps after %d warm-up ==\n",
           backend, peak / 1e9, peak_source, o->steps, o->warmup);
    printf("(steps during which other processes used more than %.0f%% of the CPUs are retaken, up to %d timed steps)\n",
           100.0 * o->busy_max, o->steps * o->max_tries);
    if (!torch_on) printf("PyTorch comparison: off (%s)\n", torch_note);
    else printf("PyTorch %s: tests/reference/model.py, fp32 eager, torch.optim.AdamW, clip_grad_norm_, %d threads; stepped in turn with ours\n",
                torch_note, threads);
    printf("\n%-30s %9s %7s %8s | %10s %8s %8s %6s | %8s %8s %5s | %10s %10s %8s %5s\n",
           "config", "B x T", "params", "GFLOP/tok", "ms/step", "tok/s", "GFLOP/s", "%peak",
           "RSS MiB", "analytic", "ratio", "torch ms", "torch/ours", "torchRSS", "ratio");
    for (int i = 0; i < n; i++) {
        const Bench* b = &bs[i];
        char bt[32], c1[32], c2[32], c3[32], c4[32], c5[32], c6[32], c7[32], t1[32], t2[32], t3[32], t4[32];
        sfmt(bt, sizeof(bt), "%dx%d", b->cfg.train.batch_size, b->cfg.train.seq_len);
        double tok = (double)b->cfg.train.batch_size * b->cfg.train.seq_len;
        double ana = analytic_bytes(b) / 1048576.0;
        fmt_num(c1, 32, "%.1f", b->med_ms);
        fmt_num(c2, 32, "%.0f", tok / (b->med_ms * 1e-3));
        fmt_num(c3, 32, "%.1f", tok / (b->med_ms * 1e-3) * b->flops_tok / 1e9);
        fmt_num(c4, 32, "%.1f", 100.0 * tok / (b->med_ms * 1e-3) * b->flops_tok / peak);
        fmt_num(c5, 32, "%.0f", b->rss_kb > 0 ? b->rss_kb / 1024.0 : NAN);
        fmt_num(c6, 32, "%.0f", b->acts_floats ? ana : NAN);
        fmt_num(c7, 32, "%.2f", b->rss_kb > 0 && b->acts_floats ? b->rss_kb / 1024.0 / ana : NAN);
        fmt_num(t1, 32, "%.1f", b->torch_ok ? b->torch_med_ms : NAN);
        fmt_num(t2, 32, "%.2f", b->torch_ok ? b->torch_med_ms / b->med_ms : NAN);
        fmt_num(t3, 32, "%.0f", b->torch_ok ? b->torch_rss_kb / 1024.0 : NAN);
        fmt_num(t4, 32, "%.2f", b->torch_ok && b->acts_floats ? b->torch_rss_kb / 1024.0 / ana : NAN);
        printf("%-30s %9s %6.1fM %8.3f  | %10s %8s %8s %6s | %8s %8s %5s | %10s %10s %8s %5s\n",
               b->name, bt, b->n_params / 1e6, b->flops_tok / 1e9, c1, c2, c3, c4, c5, c6, c7,
               t1, t2, t3, t4);
        if (b->ok && b->noisy)
            printf("    ^ ours: only %d of %d timed steps ran on an idle machine: median over all, not trustworthy\n", b->n_clean, b->n_ms);
        if (b->torch_ok && b->torch_noisy)
            printf("    ^ torch: only %d of %d timed steps ran on an idle machine: median over all, not trustworthy\n", b->n_tclean, b->n_tms);
        if (!b->ok) printf("    ours failed: %s\n", b->err);
        if (b->torch_ran && !b->torch_ok) printf("    torch failed: %s\n", b->torch_err);
    }
    printf("\nanalytic = 4 B x (params + grads + AdamW m + v = 4 x %s) + 4 B x activation arena; ratio = peak RSS / analytic\n",
           "arena floats");
    if (ng > 0) {
        printf("\ngate cost (sdpa, sigmoid): step time gated / none, next to the FLOP count\n");
        printf("%-22s | %12s %12s | %10s %10s | %10s %10s | %10s %10s | %s\n", "shape",
               "ew share of", "hw share of", "FLOPs", "FLOPs", "ours", "ours", "torch", "torch",
               "variants");
        printf("%-22s | %12s %12s | %10s %10s | %10s %10s | %10s %10s | %s\n", "",
               "layer matmul", "layer matmul", "ew/none", "hw/none", "hw/none", "ew/none",
               "hw/none", "ew/none", "");
        for (int k = 0; k < ng; k++) {
            const GateCost* g = &gc[k];
            char a[32], bb[32], c[32], d[32];
            fmt_num(a, 32, "%.3f", g->ours_hw);
            fmt_num(bb, 32, "%.3f", g->ours_ew);
            fmt_num(c, 32, "%.3f", g->torch_hw);
            fmt_num(d, 32, "%.3f", g->torch_ew);
            printf("%-22s | %11.2f%% %11.3f%% | %10.3f %10.4f | %10s %10s | %10s %10s | %s\n", g->shape,
                   100.0 * g->layer_share_ew, 100.0 * g->layer_share_hw, g->flops_ratio_ew,
                   g->flops_ratio_hw, a, bb, c, d, g->rotated ? "one rotation" : "separate runs");
        }
    }
    if (nm > 0) {
        printf("\nMoE dispatch overhead: step time of the MoE config / its dense twin of equal active FLOPs\n");
        printf("%-30s %-30s | %10s | %10s %10s\n", "moe", "dense", "FLOPs", "ours", "torch");
        printf("%-30s %-30s | %10s | %10s %10s\n", "", "", "moe/dense", "moe/dense", "moe/dense");
        for (int k = 0; k < nm; k++) {
            char a[32], b[32];
            fmt_num(a, 32, "%.3f", mc[k].ours);
            fmt_num(b, 32, "%.3f", mc[k].torch);
            printf("%-30s %-30s | %10.4f | %10s %10s\n", bs[mc[k].moe].name, bs[mc[k].dense].name, mc[k].flops_ratio, a, b);
        }
    }
    fflush(stdout);
}

static int write_json(const char* path, const Bench* bs, int n, const GateCost* gc, int ng,
                      const MoeCost* mc, int nm, double peak, const char* peak_source, int threads,
                      const char* backend, int torch_on, const char* torch_note, const Opts* o) {
    if (make_parent_dirs(path) != 0) return -1;
    FILE* f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\n  \"machine\": {\"backend\": ");
    json_escape(f, backend);
    fprintf(f, ", \"threads\": %d, \"peak_gflops\": %.3f, \"peak_source\": ", threads, peak / 1e9);
    json_escape(f, peak_source);
    fprintf(f, "},\n");
    fprintf(f, "  \"warmup\": %d, \"steps\": %d, \"max_tries\": %d, \"busy_max\": %.3f, \"smoke\": %s,\n",
            o->warmup, o->steps, o->max_tries, o->busy_max, o->smoke ? "true" : "false");
    fprintf(f, "  \"torch\": {\"enabled\": %s, \"note\": ", torch_on ? "true" : "false");
    json_escape(f, torch_note);
    fprintf(f, "},\n  \"configs\": [\n");
    for (int i = 0; i < n; i++) {
        const Bench* b = &bs[i];
        double tok = (double)b->cfg.train.batch_size * b->cfg.train.seq_len;
        double tps = tok / (b->med_ms * 1e-3);
        double ana = analytic_bytes(b);
        fprintf(f, "    {\"name\": ");
        json_escape(f, b->name);
        fprintf(f, ", \"shape\": ");
        json_escape(f, b->shape);
        fprintf(f, ", \"ini\": ");
        json_escape(f, b->ini);
        fprintf(f, ", \"attn_gate\": \"%s\", \"B\": %d, \"T\": %d, \"params\": %zu, \"arena_floats\": %zu,\n",
                gate_name(b->gate), b->cfg.train.batch_size, b->cfg.train.seq_len, b->n_params, b->table_total);
        fprintf(f, "     \"flops_per_token\": %.0f, \"matmul_params\": %.0f, \"acts_floats\": %zu,\n",
                b->flops_tok, b->matmul_params, b->acts_floats);
        fprintf(f, "     \"ours\": {\"ok\": %s, \"median_ms\": ", b->ok ? "true" : "false");
        json_num_or_null(f, b->med_ms, "%.3f");
        fprintf(f, ", \"tokens_per_s\": ");
        json_num_or_null(f, tps, "%.1f");
        fprintf(f, ", \"gflops\": ");
        json_num_or_null(f, tps * b->flops_tok / 1e9, "%.3f");
        fprintf(f, ", \"frac_peak\": ");
        json_num_or_null(f, tps * b->flops_tok / peak, "%.5f");
        fprintf(f, ", \"ms\": [");
        for (int s = 0; s < b->n_ms; s++) fprintf(f, "%s%.3f", s ? ", " : "", b->ms[s]);
        fprintf(f, "], \"others\": [");
        for (int s = 0; s < b->n_ms; s++) { fputs(s ? ", " : "", f); json_num_or_null(f, b->ms_others[s], "%.3f"); }
        fprintf(f, "], \"n_clean\": %d, \"noisy\": %s, \"loss0\": ", b->n_clean, b->noisy ? "true" : "false");
        json_num_or_null(f, b->loss0, "%.5f");
        fprintf(f, ", \"cpu_busy_before\": %.3f, \"build_s\": %.3f, \"peak_rss_bytes\": %.0f, \"analytic_bytes\": %.0f, \"rss_over_analytic\": ",
                b->busy_before, b->build_s, b->rss_kb > 0 ? b->rss_kb * 1024.0 : 0.0, ana);
        json_num_or_null(f, b->rss_kb > 0 && b->acts_floats ? b->rss_kb * 1024.0 / ana : NAN, "%.4f");
        fprintf(f, ", \"error\": ");
        json_escape(f, b->err);
        fprintf(f, "},\n     \"torch\": ");
        if (!b->torch_ran) fprintf(f, "null");
        else {
            fprintf(f, "{\"ok\": %s, \"median_ms\": ", b->torch_ok ? "true" : "false");
            json_num_or_null(f, b->torch_med_ms, "%.3f");
            fprintf(f, ", \"torch_over_ours\": ");
            json_num_or_null(f, b->torch_med_ms / b->med_ms, "%.4f");
            fprintf(f, ", \"ms\": [");
            for (int s = 0; s < b->n_tms; s++) fprintf(f, "%s%.3f", s ? ", " : "", b->tms[s]);
            fprintf(f, "], \"others\": [");
            for (int s = 0; s < b->n_tms; s++) { fputs(s ? ", " : "", f); json_num_or_null(f, b->tms_others[s], "%.3f"); }
            fprintf(f, "], \"n_clean\": %d, \"noisy\": %s, \"loss0\": ", b->n_tclean, b->torch_noisy ? "true" : "false");
            json_num_or_null(f, b->torch_loss0, "%.5f");
            fprintf(f, ", \"peak_rss_bytes\": %.0f, \"error\": ", b->torch_rss_kb > 0 ? b->torch_rss_kb * 1024.0 : 0.0);
            json_escape(f, b->torch_err);
            fprintf(f, "}");
        }
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ],\n  \"gate_cost\": [\n");
    for (int k = 0; k < ng; k++) {
        const GateCost* g = &gc[k];
        fprintf(f, "    {\"shape\": ");
        json_escape(f, g->shape);
        fprintf(f, ", \"elementwise_share_of_layer_matmul_flops\": %.6f, \"headwise_share_of_layer_matmul_flops\": %.6f,"
                   " \"flops_ratio_elementwise\": %.6f, \"flops_ratio_headwise\": %.6f, \"one_rotation\": %s,\n     \"ours_headwise_over_none\": ",
                g->layer_share_ew, g->layer_share_hw, g->flops_ratio_ew, g->flops_ratio_hw, g->rotated ? "true" : "false");
        json_num_or_null(f, g->ours_hw, "%.4f");
        fprintf(f, ", \"ours_elementwise_over_none\": ");
        json_num_or_null(f, g->ours_ew, "%.4f");
        fprintf(f, ", \"torch_headwise_over_none\": ");
        json_num_or_null(f, g->torch_hw, "%.4f");
        fprintf(f, ", \"torch_elementwise_over_none\": ");
        json_num_or_null(f, g->torch_ew, "%.4f");
        fprintf(f, "}%s\n", k + 1 < ng ? "," : "");
    }
    fprintf(f, "  ],\n  \"moe_cost\": [\n");
    for (int k = 0; k < nm; k++) {
        fprintf(f, "    {\"moe\": ");
        json_escape(f, bs[mc[k].moe].name);
        fprintf(f, ", \"dense\": ");
        json_escape(f, bs[mc[k].dense].name);
        fprintf(f, ", \"flops_ratio\": %.6f, \"ours_moe_over_dense\": ", mc[k].flops_ratio);
        json_num_or_null(f, mc[k].ours, "%.4f");
        fprintf(f, ", \"torch_moe_over_dense\": ");
        json_num_or_null(f, mc[k].torch, "%.4f");
        fprintf(f, "}%s\n", k + 1 < nm ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return fclose(f);
}

// ---------------------------------------------------------------------------------------------

static void usage(FILE* f) {
    fprintf(f,
        "usage: bench_train [options]\n"
        "  Times the full CPU training step (zero grad, forward, backward, grad norm, AdamW) for\n"
        "  every bench/configs/*.ini x attn_gate {none, headwise, elementwise}, against the PyTorch\n"
        "  reference model when /usr/bin/python3 imports torch. See bench/README.md.\n"
        "  --steps N          timed steps per config (median reported; default 5)\n"
        "  --warmup N         untimed steps first (default 2)\n"
        "  --only S[,S...]    run the configs whose name (SHAPE/GATE) contains one of the substrings\n"
        "  --gates LIST       gate variants, comma-separated (default none,headwise,elementwise)\n"
        "  --threads N        OpenMP threads, and torch.set_num_threads (default 0 = OpenMP default)\n"
        "  --busy-max PCT     a timed step counts only if other processes used at most PCT%% of the\n"
        "                     CPUs while it ran (default 5); busy steps are retaken ...\n"
        "  --max-tries K      ... up to steps x K timed steps in all (default 3)\n"
        "  --wait-idle S      before each config and after a busy step, wait up to S seconds for\n"
        "                     the machine to be idle (default 300; 0 = never wait)\n"
        "  --group shape|config  shape (default): the gate variants of a shape (and their torch\n"
        "                     twins) step in one rotation when they fit in memory together;\n"
        "                     config: each config alone with its torch twin\n"
        "  --set S.K=V        config override for every config and for the torch side (repeatable)\n"
        "  --configs DIR      directory of *.ini shapes (default bench/configs of the repository)\n"
        "  --json PATH        write the results as JSON (default: bench.json next to the executable,\n"
        "                     bench_smoke.json with --smoke)\n"
        "  --no-torch         skip the PyTorch comparison\n"
        "  --python PATH      interpreter for bench_torch.py (default /usr/bin/python3)\n"
        "  --torch-script P   default bench/bench_torch.py of the repository\n"
        "  --smoke            two tiny built-in shapes (2 layers, d 64; dense, and 4 experts top-2),\n"
        "                     1 warm-up + 2 steps, no torch\n"
        "  --list             print the config names and exit\n");
}

// The repository root: the working directory if it has bench/configs, else the executable's
// directory's parent (build/..).
static void find_root(char* root, size_t cap, char* exe_dir, size_t exe_cap) {
    char exe[PATH_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char* s = strrchr(exe, '/');
        if (s) *s = 0;
        sfmt(exe_dir, exe_cap, "%s", exe);
    } else {
        sfmt(exe_dir, exe_cap, ".");
    }
    if (is_dir("bench/configs")) { sfmt(root, cap, "."); return; }
    char cand[PATH_LEN + 32];
    sfmt(cand, sizeof(cand), "%s/../bench/configs", exe_dir);
    if (is_dir(cand)) { sfmt(root, cap, "%s/..", exe_dir); return; }
    sfmt(root, cap, ".");
}

static int parse_int(const char* flag, const char* v, int lo, int* out) {
    char* end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > INT_MAX) {
        fprintf(stderr, "error: %s needs an integer >= %d (got '%s')\n", flag, lo, v ? v : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);   // a dead worker shows up as a failed write, not a dead bench
    Opts o;
    memset(&o, 0, sizeof(o));
    o.steps = 5; o.warmup = 2;
    o.max_tries = 3; o.busy_max = 0.05; o.wait_idle_s = 300; o.group_shape = 1;
    o.gate_on[GATE_NONE] = o.gate_on[GATE_HEADWISE] = o.gate_on[GATE_ELEMENTWISE] = 1;
    char root[PATH_LEN], exe_dir[PATH_LEN];
    find_root(root, sizeof(root), exe_dir, sizeof(exe_dir));
    int steps_set = 0, warmup_set = 0, json_set = 0, configs_set = 0, script_set = 0, tries_set = 0, wait_set = 0;
    int busy_pct = 5, wait_s = 300;
    sfmt(o.python, sizeof(o.python), "/usr/bin/python3");
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--smoke")) o.smoke = 1;
        else if (!strcmp(a, "--no-torch")) o.no_torch = 1;
        else if (!strcmp(a, "--list")) o.list_only = 1;
        else if (!strcmp(a, "--steps")) { if (parse_int(a, v, 1, &o.steps)) return 1; steps_set = 1; i++; }
        else if (!strcmp(a, "--warmup")) { if (parse_int(a, v, 0, &o.warmup)) return 1; warmup_set = 1; i++; }
        else if (!strcmp(a, "--max-tries")) { if (parse_int(a, v, 1, &o.max_tries)) return 1; tries_set = 1; i++; }
        else if (!strcmp(a, "--busy-max")) { if (parse_int(a, v, 0, &busy_pct)) return 1; o.busy_max = busy_pct / 100.0; i++; }
        else if (!strcmp(a, "--wait-idle")) { if (parse_int(a, v, 0, &wait_s)) return 1; o.wait_idle_s = wait_s; wait_set = 1; i++; }
        else if (!strcmp(a, "--group") && v) {
            if (!strcmp(v, "shape")) o.group_shape = 1;
            else if (!strcmp(v, "config")) o.group_shape = 0;
            else { fprintf(stderr, "error: --group: '%s' (accepted: shape, config)\n", v); return 1; }
            i++;
        }
        else if (!strcmp(a, "--threads")) { if (parse_int(a, v, 0, &o.threads_req)) return 1; i++; }
        else if (!strcmp(a, "--only") && v) { o.only = v; i++; }
        else if (!strcmp(a, "--json") && v) { sfmt(o.json_path, PATH_LEN, "%s", v); json_set = 1; i++; }
        else if (!strcmp(a, "--configs") && v) { sfmt(o.configs_dir, PATH_LEN, "%s", v); configs_set = 1; i++; }
        else if (!strcmp(a, "--python") && v) { sfmt(o.python, PATH_LEN, "%s", v); i++; }
        else if (!strcmp(a, "--torch-script") && v) { sfmt(o.torch_script, PATH_LEN, "%s", v); script_set = 1; i++; }
        else if (!strcmp(a, "--set") && v) {
            if (o.n_sets >= MAX_SETS) { fprintf(stderr, "error: at most %d --set overrides\n", MAX_SETS); return 1; }
            o.sets[o.n_sets++] = v[0] == '-' && v[1] == '-' ? v + 2 : v;
            i++;
        } else if (!strcmp(a, "--gates") && v) {
            o.gate_on[0] = o.gate_on[1] = o.gate_on[2] = 0;
            char buf[256];
            sfmt(buf, sizeof(buf), "%s", v);
            for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (!strcmp(t, "none")) o.gate_on[GATE_NONE] = 1;
                else if (!strcmp(t, "headwise")) o.gate_on[GATE_HEADWISE] = 1;
                else if (!strcmp(t, "elementwise")) o.gate_on[GATE_ELEMENTWISE] = 1;
                else { fprintf(stderr, "error: --gates: unknown gate '%s' (accepted: none, headwise, elementwise)\n", t); return 1; }
            }
            i++;
        } else {
            fprintf(stderr, "error: unknown or incomplete argument '%s' (see --help)\n", a);
            return 1;
        }
    }
    if (o.smoke) {
        if (!steps_set) o.steps = 2;
        if (!warmup_set) o.warmup = 1;
        if (!tries_set) o.max_tries = 1;     // CI: never wait for a quiet machine
        if (!wait_set) o.wait_idle_s = 0;
        o.no_torch = 1;
    }
    if (!json_set) sfmt(o.json_path, PATH_LEN, "%s/%s", exe_dir, o.smoke ? "bench_smoke.json" : "bench.json");
    if (!configs_set) sfmt(o.configs_dir, PATH_LEN, "%s/bench/configs", root);
    if (!script_set) sfmt(o.torch_script, PATH_LEN, "%s/bench/bench_torch.py", root);

    // ---- the config list: shapes x gates ----
    static Bench bs[MAX_CONFIGS];
    int n = 0;
    char shapes[MAX_CONFIGS][PATH_LEN];
    int nshapes = 0;
    if (o.smoke) {
        shapes[nshapes++][0] = 0;
        sfmt(shapes[nshapes++], PATH_LEN, "%s", SMOKE_MOE_PATH);
    } else {
        char pat[PATH_LEN + 16];
        sfmt(pat, sizeof(pat), "%s/*.ini", o.configs_dir);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
            fprintf(stderr, "error: no benchmark configs match %s (run from the repository root or pass --configs DIR)\n", pat);
            return 1;
        }
        for (size_t i = 0; i < g.gl_pathc && nshapes < MAX_CONFIGS; i++)
            sfmt(shapes[nshapes++], PATH_LEN, "%s", g.gl_pathv[i]);
        globfree(&g);
    }
    const int gate_order[3] = {GATE_NONE, GATE_HEADWISE, GATE_ELEMENTWISE};
    for (int s = 0; s < nshapes; s++) {
        char stem[128] = "smoke";
        int smoke_moe = strcmp(shapes[s], SMOKE_MOE_PATH) == 0;
        if (smoke_moe) {
            sfmt(stem, sizeof(stem), "smoke_moe");
        } else if (shapes[s][0]) {
            const char* base = strrchr(shapes[s], '/');
            sfmt(stem, sizeof(stem), "%s", base ? base + 1 : shapes[s]);
            char* dot = strrchr(stem, '.');
            if (dot) *dot = 0;
        }
        for (int gi = 0; gi < 3; gi++) {
            int gate = gate_order[gi];
            if (!o.gate_on[gate]) continue;
            char name[160];
            sfmt(name, sizeof(name), "%s/%s", stem, gate_name(gate));
            if (!only_match(o.only, name)) continue;
            if (n >= MAX_CONFIGS) break;
            Bench* b = &bs[n];
            memset(b, 0, sizeof(*b));
            sfmt(b->name, sizeof(b->name), "%s", name);
            sfmt(b->shape, sizeof(b->shape), "%s", stem);
            sfmt(b->ini, sizeof(b->ini), "%s", smoke_moe ? "" : shapes[s]);
            b->smoke_moe = smoke_moe;
            b->gate = gate;
            if (resolve_config(b, &o) != 0) return 1;
            n++;
        }
    }
    if (n == 0) { fprintf(stderr, "error: no config matches --only '%s' and --gates\n", o.only ? o.only : ""); return 1; }
    if (o.list_only) {
        for (int i = 0; i < n; i++)
            printf("%-30s B=%d T=%d %.1fM params %s\n", bs[i].name, bs[i].cfg.train.batch_size,
                   bs[i].cfg.train.seq_len, bs[i].n_params / 1e6, bs[i].ini);
        return 0;
    }

    // ---- the machine: peak and thread count, measured in a probe child (on an idle machine;
    // measured again at the end, and the larger value is used) ----
    wait_idle(&o, o.wait_idle_s);
    ProbeMsg probe = {0};
    if (run_probe(o.threads_req, &probe) != 0) { fprintf(stderr, "error: the peak-measuring child failed\n"); return 1; }
    const int threads = probe.threads;
    fprintf(stderr, "bench_train: %s | peak %.1f GFLOP/s (%s) | %d configs, %d warm-up + %d timed steps each\n",
            probe.backend, probe.peak / 1e9, probe.peak_source, n, o.warmup, o.steps);

    char torch_note[512];
    int torch_on = 0;
    if (o.no_torch) sfmt(torch_note, sizeof(torch_note), o.smoke ? "--smoke" : "--no-torch");
    else {
        char ver[256];
        torch_on = torch_available(&o, ver, sizeof(ver));
        sfmt(torch_note, sizeof(torch_note), "%s", ver);
        if (torch_on) fprintf(stderr, "PyTorch %s found: comparing with %s, %d threads, stepped in turn with ours\n", ver, o.torch_script, threads);
        else fprintf(stderr, "PyTorch comparison: off (%s); the torch columns stay empty\n", ver);
    }

    double t_all = now_s();
    // groups: the gate variants of one shape (consecutive in bs) rotate together when they all
    // fit in memory at once; otherwise each config runs alone with its torch twin
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && strcmp(bs[j].shape, bs[i].shape) == 0) j++;
        double need = 0.0;
        for (int q = i; q < j; q++) {
            bs[q].acts_floats = acts_probe(&bs[q].cfg);
            need += est_ours_bytes(&bs[q]) + (torch_on ? est_torch_bytes(&bs[q]) : 0.0);
        }
        double avail = mem_available_bytes();
        int together = o.group_shape && j - i > 1 && need <= 0.85 * avail;
        const TrainConfig* tc = &bs[i].cfg.train;
        fprintf(stderr, "[%s] B=%d T=%d, %.1fM params, %.3f GFLOP/token: ", bs[i].shape, tc->batch_size,
                tc->seq_len, bs[i].n_params / 1e6, bs[i].flops_tok / 1e9);
        if (together)
            fprintf(stderr, "%d variants%s in one rotation (~%.1f GiB of %.1f GiB available)\n", j - i,
                    torch_on ? ", ours and torch," : "", need / 1073741824.0, avail / 1073741824.0);
        else if (j - i > 1 && o.group_shape)
            fprintf(stderr, "%d variants would need ~%.1f GiB at once, %.1f GiB available: one variant at a time%s\n",
                    j - i, need / 1073741824.0, avail / 1073741824.0, torch_on ? " (with its torch twin)" : "");
        else
            fprintf(stderr, "one variant at a time%s\n", torch_on ? " (with its torch twin)" : "");
        Bench* grp[MAX_CONFIGS];
        for (int q = i; q < j; q++) grp[q - i] = &bs[q];
        if (together) run_group(grp, j - i, &o, threads, torch_on);
        else for (int q = 0; q < j - i; q++) run_group(&grp[q], 1, &o, threads, torch_on);
        i = j;
    }
    fprintf(stderr, "total %.1f s\n", now_s() - t_all);
    ProbeMsg probe2 = {0};
    if (!o.smoke && run_probe(o.threads_req, &probe2) == 0) {
        fprintf(stderr, "fp32 peak measured again: %.1f GFLOP/s (start: %.1f); using the larger\n",
                probe2.peak / 1e9, probe.peak / 1e9);
        if (probe2.peak > probe.peak) probe.peak = probe2.peak;
    }

    static GateCost gc[MAX_CONFIGS];
    static MoeCost mcost[MAX_CONFIGS];
    int ng = gate_costs(bs, n, gc);
    int nm = moe_costs(bs, n, mcost);
    print_tables(bs, n, gc, ng, mcost, nm, probe.peak, probe.peak_source, threads, probe.backend, torch_on, torch_note, &o);
    if (write_json(o.json_path, bs, n, gc, ng, mcost, nm, probe.peak, probe.peak_source, threads, probe.backend, torch_on,
                   torch_note, &o) != 0) {
        fprintf(stderr, "error: cannot write %s: %s\n", o.json_path, strerror(errno));
        return 1;
    }
    printf("\nresults: %s\n", o.json_path);
    int failed = 0;
    for (int i = 0; i < n; i++) failed += !bs[i].ok;
    if (failed) { fprintf(stderr, "error: %d config(s) failed on our side\n", failed); return 1; }
    return 0;
}
