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
//
// This file: the configs to run, the tables and the JSON file, main; the other parts are listed
// in bench/bench_train.h.
#include "bench_train.h"

// ---------------------------------------------------------------------------------------------
// what to run


static const char* gate_name(int g) {
    const char* s = config_enum_name("attn_gate", g);
    return s ? s : "?";
}

static const char* rc_name(int r) {
    const char* s = config_enum_name("recompute", r);
    return s ? s : "?";
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
    if (o->rc_list) {   // --recompute: this entry's mode (a --set below may still override it)
        char r[64];
        sfmt(r, sizeof(r), "train.recompute=%s", rc_name(b->recompute));
        if (config_apply_override(c, r) != 0) return -1;
    }
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
    b->recompute = c->train.recompute;
    b->acts_bytes = gpt_acts_bytes(&c->model, c->train.batch_size, c->train.seq_len, c->train.recompute);
    return 0;
}


// ---------------------------------------------------------------------------------------------
// reporting: the tables and the JSON file (the derived costs are computed in bench/bench_gate.c)

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
        if (b->torch_skip[0]) printf("    ^ torch: skipped: %s\n", b->torch_skip);
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
    if (o->rc_list) {
        // each mode against recompute = none of the same shape and gate
        printf("\nactivation recomputation ([train] recompute): the activation arena (gpt_acts_bytes: every layer's\n"
               "kept tensors, the shared recompute set, logits, backward scratch) per token, and the step time,\n"
               "against none of the same shape and gate (\"one rotation\": stepped in turn, side by side)\n");
        printf("%-40s %-10s | %12s %9s | %10s %9s | %s\n", "config", "recompute", "act B/token", "vs none",
               "ms/step", "vs none", "");
        for (int i = 0; i < n; i++) {
            const Bench* b = &bs[i];
            int j0 = -1;
            for (int j = 0; j < n; j++)
                if (bs[j].recompute == RECOMPUTE_NONE && bs[j].gate == b->gate && strcmp(bs[j].shape, b->shape) == 0) j0 = j;
            double tok = (double)b->cfg.train.batch_size * b->cfg.train.seq_len;
            char c1[32], c2[32], c3[32];
            fmt_num(c1, 32, "%.3f", j0 >= 0 ? (double)b->acts_bytes / bs[j0].acts_bytes : NAN);
            fmt_num(c2, 32, "%.1f", b->ok ? b->med_ms : NAN);
            fmt_num(c3, 32, "%.3f", j0 >= 0 && b->ok && bs[j0].ok ? b->med_ms / bs[j0].med_ms : NAN);
            printf("%-40s %-10s | %12.0f %9s | %10s %9s | %s\n", b->name, rc_name(b->recompute), b->acts_bytes / tok,
                   c1, c2, c3, b->group_size > 1 ? "one rotation" : "separate runs");
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
        fprintf(f, ", \"attn_gate\": \"%s\", \"recompute\": \"%s\", \"B\": %d, \"T\": %d, \"params\": %zu, \"arena_floats\": %zu,\n",
                gate_name(b->gate), rc_name(b->recompute), b->cfg.train.batch_size, b->cfg.train.seq_len, b->n_params,
                b->table_total);
        fprintf(f, "     \"flops_per_token\": %.0f, \"matmul_params\": %.0f, \"acts_floats\": %zu, \"acts_bytes\": %zu,\n",
                b->flops_tok, b->matmul_params, b->acts_floats, b->acts_bytes);
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
        if (!b->torch_ran && b->torch_skip[0]) {
            fprintf(f, "{\"skipped\": ");
            json_escape(f, b->torch_skip);
            fprintf(f, "}");
        } else if (!b->torch_ran) fprintf(f, "null");
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
        "  --recompute LIST   [train] recompute modes, comma-separated (none,selective,full): each\n"
        "                     config runs once per mode (named SHAPE/GATE/MODE, one rotation per\n"
        "                     shape), and a table compares each with none; turns the torch side off\n"
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
        "  --torch-hybrid     also run torch on shapes with Gated DeltaNet layers (layer_pattern with L):\n"
        "                     the reference's delta rule is a Python loop over tokens, ~200 s and\n"
        "                     ~10 GB per step at B=8 T=256, so they are skipped by default\n"
        "  --torch-bf16       the torch side under torch.autocast(\"cpu\", dtype=torch.bfloat16) (its bf16 training;\n"
        "                     bench/bench_precision.sh runs it beside bench_train_bf16)\n"
        "  --python PATH      interpreter for bench_torch.py (default /usr/bin/python3)\n"
        "  --torch-script P   default bench/bench_torch.py of the repository\n"
        "  --smoke            two tiny built-in shapes (2 layers, d 64; dense, and 4 experts top-2),\n"
        "                     1 warm-up + 2 steps, no torch\n"
        "  --list             print the config names and exit\n");
}

// The repository root: the working directory if it has bench/configs, else the executable's
// directory's parent (build/..).
static void find_root(char* root, size_t cap, char* exe_dir, size_t exe_cap) {
    bench_exe_dir(exe_dir, exe_cap);
    if (is_dir("bench/configs")) { sfmt(root, cap, "."); return; }
    char cand[PATH_LEN + 32];
    sfmt(cand, sizeof(cand), "%s/../bench/configs", exe_dir);
    if (is_dir(cand)) { sfmt(root, cap, "%s/..", exe_dir); return; }
    sfmt(root, cap, ".");
}

int main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);   // a dead worker shows up as a failed write, not a dead bench
    Opts o;
    memset(&o, 0, sizeof(o));
    o.steps = 5; o.warmup = 2;
    o.max_tries = 3; o.busy_max = 0.05; o.wait_idle_s = 300; o.group_shape = 1;
    o.gate_on[GATE_NONE] = o.gate_on[GATE_HEADWISE] = o.gate_on[GATE_ELEMENTWISE] = 1;
    o.rc_on[RECOMPUTE_NONE] = 1;
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
        else if (!strcmp(a, "--torch-hybrid")) o.torch_hybrid = 1;
        else if (!strcmp(a, "--torch-bf16")) o.torch_bf16 = 1;
        else if (!strcmp(a, "--list")) o.list_only = 1;
        else if (!strcmp(a, "--steps")) { if (bench_parse_int(a, v, 1, &o.steps)) return 1; steps_set = 1; i++; }
        else if (!strcmp(a, "--warmup")) { if (bench_parse_int(a, v, 0, &o.warmup)) return 1; warmup_set = 1; i++; }
        else if (!strcmp(a, "--max-tries")) { if (bench_parse_int(a, v, 1, &o.max_tries)) return 1; tries_set = 1; i++; }
        else if (!strcmp(a, "--busy-max")) { if (bench_parse_int(a, v, 0, &busy_pct)) return 1; o.busy_max = busy_pct / 100.0; i++; }
        else if (!strcmp(a, "--wait-idle")) { if (bench_parse_int(a, v, 0, &wait_s)) return 1; o.wait_idle_s = wait_s; wait_set = 1; i++; }
        else if (!strcmp(a, "--group") && v) {
            if (!strcmp(v, "shape")) o.group_shape = 1;
            else if (!strcmp(v, "config")) o.group_shape = 0;
            else { fprintf(stderr, "error: --group: '%s' (accepted: shape, config)\n", v); return 1; }
            i++;
        }
        else if (!strcmp(a, "--threads")) { if (bench_parse_int(a, v, 0, &o.threads_req)) return 1; i++; }
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
        } else if (!strcmp(a, "--recompute") && v) {
            o.rc_on[0] = o.rc_on[1] = o.rc_on[2] = 0;
            o.rc_list = 1;
            char buf[256];
            sfmt(buf, sizeof(buf), "%s", v);
            for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int r = 0;
                while (r < 3 && strcmp(t, rc_name(r)) != 0) r++;
                if (r == 3) { fprintf(stderr, "error: --recompute: unknown mode '%s' (accepted: none, selective, full)\n", t); return 1; }
                o.rc_on[r] = 1;
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
    if (o.rc_list) o.no_torch = 1;   // torch has no recomputation to compare: its steps would repeat per mode
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
            for (int rc = 0; rc < 3; rc++) {
                if (!o.rc_on[rc]) continue;
                char name[160];
                if (o.rc_list) sfmt(name, sizeof(name), "%s/%s/%s", stem, gate_name(gate), rc_name(rc));
                else sfmt(name, sizeof(name), "%s/%s", stem, gate_name(gate));
                if (!only_match(o.only, name)) continue;
                if (n >= MAX_CONFIGS) break;
                Bench* b = &bs[n];
                memset(b, 0, sizeof(*b));
                sfmt(b->name, sizeof(b->name), "%s", name);
                sfmt(b->shape, sizeof(b->shape), "%s", stem);
                sfmt(b->ini, sizeof(b->ini), "%s", smoke_moe ? "" : shapes[s]);
                b->smoke_moe = smoke_moe;
                b->gate = gate;
                b->recompute = rc;
                if (resolve_config(b, &o) != 0) return 1;
                n++;
            }
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
        // hybrid shapes: the reference's delta rule is a Python loop over tokens whose autograd
        // keeps every token's state (measured at qwen_hybrid_b8t256: 214 s and 10.2 GB per
        // step, ~10x ours, on a busy machine): not a speed comparison worth its time; --torch-hybrid runs it
        int group_torch = torch_on;
        if (torch_on && config_any_linear(&bs[i].cfg.model) && !o.torch_hybrid) {
            group_torch = 0;
            for (int q = i; q < j; q++)
                sfmt(bs[q].torch_skip, sizeof(bs[q].torch_skip), "hybrid layers: the reference's delta rule is a "
                     "Python loop over tokens (~200 s, ~10 GB per step at B=8 T=256); --torch-hybrid runs it");
        }
        double need = 0.0;
        for (int q = i; q < j; q++) {
            bs[q].acts_floats = acts_probe(&bs[q].cfg);
            need += est_ours_bytes(&bs[q]) + (group_torch ? est_torch_bytes(&bs[q]) : 0.0);
        }
        double avail = mem_available_bytes();
        int together = o.group_shape && j - i > 1 && need <= 0.85 * avail;
        const TrainConfig* tc = &bs[i].cfg.train;
        fprintf(stderr, "[%s] B=%d T=%d, %.1fM params, %.3f GFLOP/token: ", bs[i].shape, tc->batch_size,
                tc->seq_len, bs[i].n_params / 1e6, bs[i].flops_tok / 1e9);
        if (together)
            fprintf(stderr, "%d variants%s in one rotation (~%.1f GiB of %.1f GiB available)\n", j - i,
                    group_torch ? ", ours and torch," : "", need / 1073741824.0, avail / 1073741824.0);
        else if (j - i > 1 && o.group_shape)
            fprintf(stderr, "%d variants would need ~%.1f GiB at once, %.1f GiB available: one variant at a time%s\n",
                    j - i, need / 1073741824.0, avail / 1073741824.0, group_torch ? " (with its torch twin)" : "");
        else
            fprintf(stderr, "one variant at a time%s\n", group_torch ? " (with its torch twin)" : "");
        if (bs[i].torch_skip[0]) fprintf(stderr, "    torch skipped: %s\n", bs[i].torch_skip);
        Bench* grp[MAX_CONFIGS];
        for (int q = i; q < j; q++) grp[q - i] = &bs[q];
        if (together) run_group(grp, j - i, &o, threads, group_torch);
        else for (int q = 0; q < j - i; q++) run_group(&grp[q], 1, &o, threads, group_torch);
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
