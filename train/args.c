// train/args.c: train_gpt's command line (train/args.h).
#include "args.h"

#include <stdlib.h>
#include <string.h>

void train_args_usage(FILE* f) {
    fprintf(f,
        "usage: train_gpt --config FILE.ini [--section.key=value ...] [--resume auto|PATH] [--check]\n"
        "  --config FILE    INI config (sections [model] [moe] [train] [data] [log] [checkpoint] [metrics]);\n"
        "                   every key and its default: docs/config.md\n"
        "  --S.K=V          override key K of section S, e.g. --train.lr=1e-3\n"
        "  --resume auto    continue from the newest good checkpoint in [checkpoint] dir (a damaged\n"
        "                   one is skipped with a warning); start fresh when there is none\n"
        "  --resume PATH    continue from the checkpoint directory PATH (.../step_NNNNNNNN); without\n"
        "                   --config, its config.ini is the config (overrides still apply)\n"
        "  --stop-after N   stop after step N (checkpointing there when checkpoint_every > 0) as if the\n"
        "                   job hit its time limit; the schedule still runs over [train] steps\n"
        "  --check          validate the config, print it resolved, and exit\n"
        "  --help           this text\n");
}

int train_args_parse(TrainArgs* a, int argc, char** argv) {
    memset(a, 0, sizeof *a);
    a->overrides = malloc((size_t)(argc > 0 ? argc : 1) * sizeof(char*));
    if (!a->overrides) return 1;
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
            fprintf(stderr, "error: unknown argument '%s' (expected --config FILE, --section.key=value, --resume auto|PATH or --check; see --help)\n", argv[i]);
            return 1;
        }
        a->overrides[a->n_overrides++] = argv[i];
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
