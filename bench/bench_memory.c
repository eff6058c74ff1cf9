// bench/bench_memory.c: memory (bench/bench_train.h): the analytic size that a worker's peak RSS
// is reported against, and the estimates that decide which configs fit in one rotation group.
#include "bench_train.h"

// ---------------------------------------------------------------------------------------------
// running one config: ours and (optionally) torch, stepped in lockstep

double analytic_bytes(const Bench* b) {
    return 4.0 * (4.0 * (double)b->table_total) + 4.0 * (double)b->acts_floats;
}

// ---- memory admission for a rotation group ----
// Activation floats of a config, from gpt_alloc_acts in a short-lived child (it touches the
// arena, so the parent's RSS, which every worker inherits, stays small). 0 on failure.
size_t acts_probe(const Config* cfg) {
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
        m.recompute = cfg->train.recompute;
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

double mem_available_bytes(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0.0;
    char line[256];
    double kb = 0.0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024.0;
}

int n_linear_layers(const ModelConfig* c) {
    int n = 0;
    for (int l = 0; l < c->n_layer; l++) n += config_layer_is_linear(c, l);
    return n;
}

// Rough peak memory of each side, only to decide what fits at once: ours is the analytic size
// plus libraries; torch (measured on the reference model) ~ 16 B/param + 3.5x our activations
// + 400 MiB of interpreter and libraries, plus, per Gated DeltaNet layer, ~3.5 copies of the
// delta rule's state [B, Hv, dk, dv] per token that autograd keeps from the reference's loop
// over time (measured: 10.2 GB peak RSS for qwen_hybrid_b8t256, 9 linear layers, B=8 T=256).
double est_ours_bytes(const Bench* b) { return analytic_bytes(b) + 64.0 * 1048576.0; }
double est_torch_bytes(const Bench* b) {
    const ModelConfig* c = &b->cfg.model;
    const double states = (double)n_linear_layers(c) * b->cfg.train.batch_size * b->cfg.train.seq_len *
                          c->linear_n_v_head * c->linear_k_head_dim * c->linear_v_head_dim;
    return 16.0 * (double)b->n_params + 3.5 * 4.0 * (double)b->acts_floats + 400.0 * 1048576.0 +
           3.5 * 4.0 * states;
}
