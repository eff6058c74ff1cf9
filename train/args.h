// train/args.h: train_gpt's command line, parsed once (usage: train_args_usage, docs/config.md).
#pragma once
#include <stdio.h>
#include "model/config.h"
#include "train/checkpoint.h"

typedef struct {
    const char* config_path;   // --config FILE; the checkpoint's config.ini for --resume PATH alone
    const char* resume_spec;   // --resume: "auto" or a checkpoint directory (NULL: none)
    int stop_after;            // --stop-after N: end the run after step N (0 = at [train] steps)
    int check_only;            // --check: validate, print the resolved config and the memory plan, exit
    int nproc;                 // --nproc N: processes the plan is for (0: the real count)
    const char* device;        // --device NAME|BYTES: the memory the plan is held against (NULL: default)
    int layout;                // --layout: a PlanLayout (train/plan.h), -1: this binary's (or the device's)
    int help;                  // --help / -h: print the usage and exit
    int n_overrides;
    char** overrides;          // the --section.key=value arguments, in order, the "--" included
    char ckpt_config[CKPT_PATH_MAX + 16];   // storage for config_path under --resume PATH
} TrainArgs;

void train_args_usage(FILE* f);

// Parses argv into a (stopping at --help). Returns 0, or 1 after an error line.
int train_args_parse(TrainArgs* a, int argc, char** argv);

// The run's config: the defaults, then the config file (under --resume PATH without --config,
// the checkpoint's config.ini, and a->config_path names it from then on), then the overrides,
// then config_finalize. Returns 0, or 1 after an error line.
int train_args_config(TrainArgs* a, Config* cfg);

void train_args_free(TrainArgs* a);
