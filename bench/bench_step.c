// bench/bench_step.c: the step time (bench/bench_train.h). Each config's training step runs in
// a forked worker (the only processes that use the backend), its PyTorch twin in another
// (bench_torch.c); a rotation group's workers are stepped in lockstep, each step's share of
// the CPUs taken by other processes is measured, and busy steps are retaken.
#include "bench_train.h"

// ---------------------------------------------------------------------------------------------
// the worker processes (forked; the only places the backend is used)

typedef struct { int ok; double build_s; size_t table_total, acts_floats; long rss_base_kb; } ReadyMsg;
typedef struct { double ms; float loss, norm; } StepMsg;

static void probe_main(int threads, int out_fd);

int run_probe(int threads, ProbeMsg* probe) {
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
    const long rss_base_kb = self_rss_kb();   // before the model: libraries, the inherited parent
    double t0 = now_s();
    GPT m;
    gpt_build(&m, mc, tc->seed);
    m.recompute = tc->recompute;
    gpt_alloc_acts(&m, tc->batch_size, tc->seq_len);
    Optim opt;
    optim_init(&opt, &m);
    const int B = tc->batch_size, T = tc->seq_len;
    int* in = malloc((size_t)B * T * sizeof(int));
    int* tg = malloc((size_t)B * T * sizeof(int));
    random_batch(in, tg, B, T, mc->vocab_size, tc->seed);
    ReadyMsg r = {1, now_s() - t0, m.table.total, m.acts_floats, rss_base_kb};
    if (write_full(out_fd, &r, sizeof(r)) != 0) _exit(1);
    for (;;) {
        char cmd;
        if (read_full(cmd_fd, &cmd, 1) != 0 || cmd != 'S') break;
        double s0 = now_s();
        gpt_zero_grad(&m);
        float loss = gpt_forward_train(&m, in, tg, 1.0f);   // the trainer's step (train_gpt.c)
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

// ---- other processes' share of the CPUs during one step ----
// /proc/stat's busy time over the step minus the worker's own CPU time (/proc/PID/stat, all its
// threads), over the machine's total: what the rest of the machine used while the step ran.
// Both count in USER_HZ ticks (10 ms), so steps shorter than ~MIN_TICKS ticks of machine time
// are not judged (NAN).
#define MIN_TICKS 20

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

void probe_begin(StepProbe* s, pid_t pid) {
    if (read_cpu_times(&s->busy, &s->total) != 0) s->total = 0;
    s->proc = proc_ticks(pid);
}

double probe_end(const StepProbe* s, pid_t pid) {
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
double wait_idle(const Opts* o, double max_s) {
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
double select_median(const double* ms, const double* others, int n, int want,
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

// ---- one rotation group: every worker of the group steps in turn ----
typedef struct {
    Bench* b;
    int torch;           // 0 ours, 1 torch
    OursProc op;
    TorchProc tp;
    int alive, clean;
} Worker;

static pid_t worker_pid(const Worker* w) { return w->torch ? w->tp.pid : w->op.pid; }

void run_group(Bench** g, int k, const Opts* o, int threads, int use_torch) {
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
            b->rss_base_kb = ready.rss_base_kb;
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
        } else if (json_str(line, "skip", b->torch_skip, sizeof(b->torch_skip))) {
            // the reference cannot run this config (bench_torch.py says why): not a failure
            fprintf(stderr, "skipped: %s\n", b->torch_skip);
            int ok;
            torch_finish(&x->tp, &ok);
            b->torch_ran = 0;
            continue;
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
