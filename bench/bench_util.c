// bench/bench_util.c: small utilities of bench_train (bench/bench_train.h).
#include "bench_train.h"


// The three gate variants of a shape (bench_train) and the attention layers of bench_hybrid:
// attn_gate, at the sdpa position with a sigmoid.
void gate_overrides(int gate, char out[3][64]) {
    const char* name = config_enum_name("attn_gate", gate);
    sfmt(out[0], 64, "model.attn_gate=%s", name ? name : "?");
    sfmt(out[1], 64, "model.gate_position=sdpa");
    sfmt(out[2], 64, "model.gate_act=sigmoid");
}

// snprintf that may truncate (paths and messages are bounded; truncation only shortens them)
__attribute__((format(printf, 3, 4))) int sfmt(char* buf, size_t cap, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return r;
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int read_full(int fd, void* buf, size_t n) {
    char* p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r; n -= (size_t)r;
    }
    return 0;
}

int write_full(int fd, const void* buf, size_t n) {
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

double median(const double* v, int n) {
    if (n <= 0) return NAN;
    double* s = malloc(n * sizeof(double));
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    double m = (n & 1) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

int is_dir(const char* p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int is_file(const char* p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p of the directory part of `path`
int make_parent_dirs(const char* path) {
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
int read_cpu_times(unsigned long long* busy, unsigned long long* total) {
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

long self_rss_kb(void) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

double cpu_busy_fraction(double seconds) {
    unsigned long long b0, t0, b1, t1;
    if (read_cpu_times(&b0, &t0) != 0) return -1.0;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    if (read_cpu_times(&b1, &t1) != 0 || t1 <= t0) return -1.0;
    return (double)(b1 - b0) / (double)(t1 - t0);
}

// Ends a worker process (bench_step.c's own or bench_torch.c's PyTorch one) and returns its peak
// RSS in KiB (-1 if it failed). Here, not in bench_step.c, so that bench_torch.c calls no
// function of bench_step.c (bench_step.c calls bench_torch.c's: the dependency points one way).
long proc_finish(pid_t pid, int* cmd_fd, int* out_fd, int* exit_ok) {
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

// value of "key": NUMBER in a one-line JSON object (no nesting needed here); 0 if absent
int json_num(const char* line, const char* key, double* out) {
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
int json_str(const char* line, const char* key, char* out, size_t cap) {
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

void json_escape(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

void json_num_or_null(FILE* f, double v, const char* fmt) {
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

int bench_parse_int(const char* flag, const char* v, int lo, int* out) {
    char* end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > INT_MAX) {
        fprintf(stderr, "error: %s needs an integer >= %d (got '%s')\n", flag, lo, v ? v : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

void bench_exe_dir(char* out, size_t cap) {
    char exe[PATH_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) { sfmt(out, cap, "."); return; }
    exe[n] = 0;
    char* s = strrchr(exe, '/');
    if (s) *s = 0;
    sfmt(out, cap, "%s", exe);
}
