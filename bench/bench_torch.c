// bench/bench_torch.c: the PyTorch side of bench_train (bench/bench_train.h): bench/bench_torch.py
// --serve runs the reference model (tests/reference/model.py) on the same config in a worker.
#include "bench_train.h"

// ---- the PyTorch side: bench/bench_torch.py --serve, one JSON line per message ----

static int torch_readline(TorchProc* p, char* line, size_t cap) {
    while (fgets(line, (int)cap, p->out)) {
        if (line[0] == '{') return 0;      // skip anything that is not one of our JSON lines
        fprintf(stderr, "    torch: %s", line);
    }
    return -1;
}

int torch_start(TorchProc* p, const Opts* o, const Bench* b, int threads, char* line,
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
    if (o->torch_bf16) argv[a++] = "--bf16";
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

int torch_step(TorchProc* p, double* ms, double* loss, char* line, size_t cap) {
    if (write_full(p->cmd_fd, "step\n", 5) != 0) return -1;
    if (torch_readline(p, line, cap) != 0) return -1;
    if (!json_num(line, "ms", ms)) return -1;
    if (!json_num(line, "loss", loss)) *loss = NAN;
    return 0;
}

long torch_finish(TorchProc* p, int* exit_ok) {
    if (p->cmd_fd >= 0) { write_full(p->cmd_fd, "quit\n", 5); close(p->cmd_fd); p->cmd_fd = -1; }
    if (p->out) {
        char line[4096];
        while (fgets(line, sizeof(line), p->out)) {}   // drain the final line
        fclose(p->out); p->out = NULL; p->out_fd = -1;
    }
    return proc_finish(p->pid, &p->cmd_fd, &p->out_fd, exit_ok);
}

// Does `python` import torch? Fills the version.
int torch_available(const Opts* o, char* version, size_t cap) {
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
