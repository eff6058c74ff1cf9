// train/args.c: train_gpt's command line (train/args.h).
#include "args.h"

#include <stdlib.h>
#include <string.h>
#include "train/plan.h"

void train_args_usage(FILE* f) {
    fprintf(f,
        "usage: train_gpt --config FILE.ini [--section.key=value ...] [--resume auto|PATH]\n"
        "       train_gpt --config FILE.ini [--section.key=value ...] --check [--nproc N] [--device D] [--layout L]\n"
        "  --config FILE    INI config (sections [model] [moe] [train] [data] [log] [checkpoint] [metrics]);\n"
        "                   every key and its default: docs/config.md\n"
        "  --S.K=V          override key K of section S, e.g. --train.lr=1e-3\n"
        "  --resume auto    continue from the newest good checkpoint in [checkpoint] dir (a damaged\n"
        "                   one is skipped with a warning); start fresh when there is none\n"
        "  --resume PATH    continue from the checkpoint directory PATH (.../step_NNNNNNNN); without\n"
        "                   --config, its config.ini is the config (overrides still apply)\n"
        "  --stop-after N   stop after step N (checkpointing there when checkpoint_every > 0) as if the\n"
        "                   job hit its time limit; the schedule still runs over [train] steps\n"
        "  --check          validate the config, print it resolved and its memory plan (docs/config.md,\n"
        "                   \"Memory plan\"), and exit\n"
        "  --nproc N        with --check: plan for N processes (default: the real count under mpirun, else 1)\n"
        "  --device D       with --check: hold the plan against D: h100, h200, a100-80g (80/141/80 GB, the\n"
        "                   CUDA bf16 layout), or a byte count (80000000000, 80G, 24GiB); default: this\n"
        "                   machine's MemAvailable (CPU build) or the GPU's memory (CUDA build)\n"
        "  --layout L       with --check: plan the layout L: cpu, cpu-bf16, cuda-fp32, cuda-bf16 (default: this binary's;\n"
        "                   cuda-bf16 with a named GPU)\n"
        "  --help           this text\n");
}

int train_args_parse(TrainArgs* a, int argc, char** argv) {
    memset(a, 0, sizeof *a);
    a->overrides = malloc((size_t)(argc > 0 ? argc : 1) * sizeof(char*));
    if (!a->overrides) return 1;
    a->layout = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { a->help = 1; return 0; }
        if (strcmp(argv[i], "--check") == 0) { a->check_only = 1; continue; }
        if (strcmp(argv[i], "--stop-after") == 0) {
            char* end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end || v < 1 || v > 2000000000) {
                fprintf(stderr, "error: --stop-after needs a step number >= 1 (got '%s')\n", i + 1 < argc ? argv[i + 1] : "");
                return 1;
            }
            a->stop_after = (int)v;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--nproc") == 0 || strncmp(argv[i], "--nproc=", 8) == 0) {
            const char* v = argv[i][7] == '=' ? argv[i] + 8 : i + 1 < argc ? argv[++i] : "";
            char* end = NULL;
            long n = strtol(v, &end, 10);
            if (!v[0] || end == v || *end || n < 1 || n > 1000000) {
                fprintf(stderr, "error: --nproc needs a process count >= 1 (got '%s'): e.g. --nproc 8\n", v);
                return 1;
            }
            a->nproc = (int)n;
            continue;
        }
        if (strcmp(argv[i], "--device") == 0 || strncmp(argv[i], "--device=", 9) == 0) {
            const char* v = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : "";
            size_t bytes, smem;
            int gpu;
            char name[96];
            if (plan_parse_device(v, &bytes, name, sizeof name, &gpu, &smem) != 0) {
                fprintf(stderr, "error: --device '%s': unknown device (known: h100, h200, a100-80g; or a byte count: "
                        "80000000000, 80G, 24GiB)\n", v);
                return 1;
            }
            a->device = v;
            continue;
        }
        if (strcmp(argv[i], "--layout") == 0 || strncmp(argv[i], "--layout=", 9) == 0) {
            const char* v = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "cpu") == 0) a->layout = PLAN_LAYOUT_CPU;
            else if (strcmp(v, "cpu-bf16") == 0) a->layout = PLAN_LAYOUT_CPU_BF16;
            else if (strcmp(v, "cuda-fp32") == 0) a->layout = PLAN_LAYOUT_CUDA_FP32;
            else if (strcmp(v, "cuda-bf16") == 0) a->layout = PLAN_LAYOUT_CUDA_BF16;
            else {
                fprintf(stderr, "error: --layout '%s': unknown layout (accepted: cpu, cpu-bf16, cuda-fp32, cuda-bf16)\n", v);
                return 1;
            }
            continue;
        }
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--resume") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "error: %s needs a value (%s)\n", argv[i], argv[i][2] == 'c' ? "a config file" : "auto, or a checkpoint directory");
                return 1;
            }
            if (argv[i][2] == 'c') a->config_path = argv[++i];
            else a->resume_spec = argv[++i];
            continue;
        }
        if (strncmp(argv[i], "--config=", 9) == 0) { a->config_path = argv[i] + 9; continue; }
        if (strncmp(argv[i], "--resume=", 9) == 0) { a->resume_spec = argv[i] + 9; continue; }
        if (strncmp(argv[i], "--", 2) != 0 || !strchr(argv[i], '=') || !strchr(argv[i], '.')) {
            fprintf(stderr, "error: unknown argument '%s' (expected --config FILE, --section.key=value, --resume auto|PATH, --check [--nproc N] [--device D] [--layout L]; see --help)\n", argv[i]);
            return 1;
        }
        a->overrides[a->n_overrides++] = argv[i];
    }
    if (!a->check_only && (a->nproc || a->device || a->layout >= 0)) {
        fprintf(stderr, "error: --nproc, --device and --layout size the memory plan of --check: add --check (or drop them)\n");
        return 1;
    }
    if (a->resume_spec && !a->resume_spec[0]) { fprintf(stderr, "error: --resume needs a value (auto, or a checkpoint directory)\n"); return 1; }
    return 0;
}

int train_args_config(TrainArgs* a, Config* cfg) {
    config_defaults(cfg);
    // --resume PATH without --config: the checkpoint's own config is the starting point
    if (a->resume_spec && strcmp(a->resume_spec, "auto") != 0 && !a->config_path) {
        if (checkpoint_load_config(a->resume_spec, cfg) != 0) return 1;
        snprintf(a->ckpt_config, sizeof a->ckpt_config, "%s/config.ini", a->resume_spec);
        a->config_path = a->ckpt_config;
    } else if (a->config_path && config_load_file(cfg, a->config_path) != 0) {
        return 1;
    }
    // the overrides after the file, so they win regardless of their place on the command line
    for (int i = 0; i < a->n_overrides; i++)
        if (config_apply_override(cfg, a->overrides[i] + 2) != 0) return 1;
    if (config_finalize(cfg, a->config_path ? a->config_path : "defaults") != 0) return 1;
    return 0;
}

void train_args_free(TrainArgs* a) {
    free(a->overrides);
    a->overrides = NULL;
}
