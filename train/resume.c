// train/resume.c: choosing a checkpoint, comparing configs, preparing the directory and the log.
#define _GNU_SOURCE
#include "resume.h"
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int resume_find(const char* spec, const char* dir, char* path, size_t n) {
    if (strcmp(spec, "auto") != 0) {
        if (checkpoint_verify(spec, NULL, NULL) != 0) {
            fprintf(stderr, "error: --resume %s: the checkpoint does not verify (above); resume from another one "
                    "(--resume auto takes the newest good one in [checkpoint] dir)\n", spec);
            return -1;
        }
        snprintf(path, n, "%s", spec);
        return 1;
    }
    enum { MAXC = 100000 };
    int* steps = malloc(MAXC * sizeof(int));
    if (!steps) return -1;
    int count = checkpoint_list(dir, steps, MAXC);
    int found = 0;
    for (int i = count - 1; i >= 0 && !found; i--) {
        checkpoint_path(path, n, dir, steps[i]);
        if (checkpoint_verify(path, NULL, NULL) == 0) found = 1;
        else fprintf(stderr, "warning: --resume auto: skipping the damaged checkpoint %s (above); trying the previous one\n", path);
    }
    free(steps);
    if (found) return 1;
    if (count > 0) {
        fprintf(stderr, "error: --resume auto: all %d complete checkpoint(s) in %s are damaged (above); move them away to start "
                "fresh, or resume from a copy with --resume PATH\n", count, dir);
        return -1;
    }
    return 0;
}

// The global batch a resumed run trains with: this run's [train] tokens_per_step, or the
// checkpoint's when this config leaves it derived (0 = batch_size x seq_len x processes, which
// would change with the process count): the run continues with the global batch it was written
// with, whatever the number of processes.
static long resumed_tokens_per_step(const Config* saved, const Config* now, int* from_ckpt) {
    const char* o = config_origin(now, "train", "tokens_per_step");
    *from_ckpt = o && strncmp(o, "derived", 7) == 0;
    return *from_ckpt ? saved->train.tokens_per_step : now->train.tokens_per_step;
}

// Rank 0, before the others load anything: the global batch must divide over this run's
// processes and micro-batch. One error line with the numbers and the nearest process counts and
// batch sizes that divide it.
static int check_global_batch(const char* path, const Config* now, int nproc) {
    Config saved;
    if (checkpoint_load_config(path, &saved) != 0) return -1;
    int from_ckpt;
    const long tps = resumed_tokens_per_step(&saved, now, &from_ckpt);
    const long B = now->train.batch_size, T = now->train.seq_len, micro = B * T * nproc;
    if (tps % micro == 0) return 0;
    // the nearest process counts below and above that divide it (at most tps / (B x T))
    long below = 0, above = 0;
    for (long p = nproc - 1; p >= 1 && !below; p--) if (tps % (B * T * p) == 0) below = p;
    for (long p = nproc + 1; p <= tps / (B * T) && !above; p++) if (tps % (B * T * p) == 0) above = p;
    char procs[160] = "", batch[200] = "";
    if (below && above) snprintf(procs, sizeof procs, "resume under %ld or %ld processes (the nearest counts that divide it)", below, above);
    else if (below || above) snprintf(procs, sizeof procs, "resume under %ld processes (the nearest count that divides it)", below ? below : above);
    else snprintf(procs, sizeof procs, "no process count divides it with batch_size %ld", B);
    // the nearest batch_size that divides it under nproc processes
    long best = 0;
    for (long b = 1; b <= tps / (T * nproc); b++)
        if (tps % (b * T * nproc) == 0 && (!best || labs(b - B) < labs(best - B))) best = b;
    if (best) snprintf(batch, sizeof batch, ", or set [train] batch_size = %ld (the nearest that divides it under %d processes)", best, nproc);
    else snprintf(batch, sizeof batch, " (no batch_size divides it under %d processes: %ld is not a multiple of %d x seq_len %ld)",
                  nproc, tps, nproc, T);
    fprintf(stderr, "error: --resume %s: [train] tokens_per_step = %ld (%s) does not divide over %d processes: "
            "%d x batch_size %ld x seq_len %ld = %ld tokens per micro-step; %s%s\n", path, tps,
            from_ckpt ? "the checkpoint's global batch" : "this run's config", nproc, nproc, B, T, micro, procs, batch);
    return -1;
}

int resume_resolve(Comm* comm, const char* spec, const char* dir, Config* cfg, char* path, size_t n) {
    if (!spec) return 0;
    int resuming = 0;
    memset(path, 0, n);
    if (comm->rank == 0) {
        resuming = resume_find(spec, dir, path, n);
        if (resuming == 1 && check_global_batch(path, cfg, comm->size) != 0) resuming = -1;
    }
    comm_broadcast(comm, &resuming, sizeof resuming);
    comm_broadcast(comm, path, n);
    if (resuming < 0) return -1;
    if (!resuming) {
        printf("resume: no complete checkpoint in %s: starting from step 0\n", dir);
        return 0;
    }
    Config saved;
    if (checkpoint_load_config(path, &saved) != 0) return -1;
    int from_ckpt;
    long tps = resumed_tokens_per_step(&saved, cfg, &from_ckpt);
    if (from_ckpt) {   // keep the checkpoint's global batch (no longer derived: finalize keeps it)
        for (int i = 0; i < config_key_count(); i++) {
            const char* sec;
            const char* key = config_key(i, &sec);
            if (strcmp(sec, "train") == 0 && strcmp(key, "tokens_per_step") == 0)
                snprintf(cfg->origin[i], sizeof cfg->origin[i], "the checkpoint's global batch (%s)", path);
        }
        cfg->train.tokens_per_step = tps;
        if (tps != (long)cfg->train.batch_size * cfg->train.seq_len * comm->size)   // what deriving would have given
            printf("resume: [train] tokens_per_step = %ld: the checkpoint's global batch, over %d processes\n", tps, comm->size);
    }
    if (resume_check_config(&saved, cfg, path) != 0) return -1;
    return 1;
}

// Sections whose keys define the network: a checkpoint's weights only fit the same values.
static const char* const ARCH_SECTIONS[] = {"model", "moe"};
// Keys that change only the run's length, what is logged, or where files go.
static int key_is_free(const char* section, const char* key) {
    if (strcmp(section, "log") == 0 || strcmp(section, "checkpoint") == 0) return 1;
    if (strcmp(section, "train") == 0 && strcmp(key, "steps") == 0) return 1;
    // ZeRO-0 and ZeRO-1 train bit for bit alike (docs/distributed.md); the AdamW state is re-cut on load
    if (strcmp(section, "train") == 0 && strcmp(key, "zero_stage") == 0) return 1;
    // activation recomputation changes memory, never a bit of the numbers (tests/test_recompute.sh)
    if (strcmp(section, "train") == 0 && strcmp(key, "recompute") == 0) return 1;
    if (strcmp(section, "metrics") == 0 && strcmp(key, "probe_every") == 0) return 1;
    // expert parallelism changes which process computes each expert, not the model: every
    // process holds every expert, and the checkpoint stores them by global index (like another
    // process count, the sums over tokens are grouped differently: docs/distributed.md)
    if (strcmp(section, "moe") == 0 && strcmp(key, "expert_parallel") == 0) return 1;
    if (strcmp(section, "data") == 0 && (strcmp(key, "val_glob") == 0 || strcmp(key, "val_sources") == 0 ||
                                         strcmp(key, "tokenizer") == 0)) return 1;
    return 0;
}

int resume_check_config(const Config* saved, const Config* now, const char* ckpt_path) {
    int n_arch = 0;
    char list[4096];
    size_t used = 0;
    list[0] = 0;
    for (int pass = 0; pass < 2; pass++) {       // pass 0: architecture keys, pass 1: the others
        for (int i = 0; i < config_key_count(); i++) {
            const char* sec;
            const char* key = config_key(i, &sec);
            int arch = 0;
            for (size_t s = 0; s < sizeof ARCH_SECTIONS / sizeof ARCH_SECTIONS[0]; s++)
                arch |= strcmp(sec, ARCH_SECTIONS[s]) == 0;
            if (arch && key_is_free(sec, key)) arch = 0;   // [moe] expert_parallel: a layout, not the network
            if (arch != (pass == 0)) continue;
            char a[1100], b[1100];
            config_key_value(saved, i, a, sizeof a);
            config_key_value(now, i, b, sizeof b);
            if (strcmp(a, b) == 0) continue;
            if (arch) {
                n_arch++;
                if (used < sizeof list)
                    used += (size_t)snprintf(list + used, sizeof list - used, "%s[%s] %s = %s (checkpoint: %s)",
                                             n_arch > 1 ? ", " : "", sec, key, b, a);
            } else if (key_is_free(sec, key)) {
                printf("resume: [%s] %s = %s (checkpoint: %s): accepted\n", sec, key, b, a);
            } else {
                fflush(stdout);   // the "accepted" lines before it stay whole in a combined log
                fprintf(stderr, "warning: resume: [%s] %s = %s (checkpoint: %s): accepted, but the run no longer "
                        "reproduces an uninterrupted one\n", sec, key, b, a);
            }
        }
        if (pass == 0 && n_arch > 0) {
            fprintf(stderr, "error: --resume %s: the architecture differs from the checkpoint's in %d key(s): %s; "
                    "resume with the checkpoint's values (its config.ini), or start a new run\n", ckpt_path, n_arch, list);
            return -1;
        }
    }
    return 0;
}

int resume_prepare_dir(const char* dir, int step, int resuming, int auto_mode) {
    enum { MAXC = 100000 };
    int* steps = malloc(MAXC * sizeof(int));
    if (!steps) return -1;
    int count = checkpoint_list(dir, steps, MAXC), rc = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        if (steps[i] <= step && resuming) continue;
        char path[CKPT_PATH_MAX], aside[CKPT_PATH_MAX + 16];
        checkpoint_path(path, sizeof path, dir, steps[i]);
        if (!resuming) {
            fprintf(stderr, "error: %s holds checkpoints of an earlier run (newest: %s/step_%08d): continue it with "
                    "--resume auto, or give this run another [checkpoint] dir or [log] run_dir\n", dir, dir, steps[count - 1]);
            rc = -1;
        } else if (auto_mode) {   // newer than the newest good one: it failed verification
            snprintf(aside, sizeof aside, "%s.corrupt", path);
            if (rename(path, aside) != 0) {
                fprintf(stderr, "error: cannot move the damaged checkpoint %s aside to %s: %s\n", path, aside, strerror(errno));
                rc = -1;
            } else {
                fprintf(stderr, "warning: moved the damaged checkpoint %s to %s (kept for inspection)\n", path, aside);
            }
        } else {
            fprintf(stderr, "error: --resume: %s holds checkpoints newer than step %d (%s ...) that this run would overwrite; "
                    "set [checkpoint] dir to a new directory for this branch of the run\n", dir, step, path);
            rc = -1;
        }
    }
    free(steps);
    return rc;
}

int resume_trim_log(const char* log_path, int step) {
    FILE* in = fopen(log_path, "r");
    if (!in) return errno == ENOENT ? 0 : -1;
    char tmp[CKPT_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", log_path);
    FILE* out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        fprintf(stderr, "error: cannot write %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    int kept = 0, dropped = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        // a record of a later step, or a line cut short by the crash, is dropped
        const char* s = strstr(line, "\"step\":");
        int complete = line[len - 1] == '\n';
        if (!complete || (s && atoi(s + 7) > step)) { dropped++; continue; }
        fputs(line, out);
        kept++;
    }
    free(line);
    fclose(in);
    int err = fflush(out) != 0 || fsync(fileno(out)) != 0;
    if (fclose(out) != 0) err = 1;
    if (err || rename(tmp, log_path) != 0) {
        fprintf(stderr, "error: cannot rewrite %s: %s\n", log_path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (dropped) printf("resume: %s: kept %d records up to step %d, dropped %d from after it\n", log_path, kept, step, dropped);
    return 0;
}

// The checkpoint's data position in this run's units. The loader's position counts global
// batches of nproc x batch_size x seq_len tokens into the current shard (data/dataloader.h), and
// the tokens before it do not depend on the process count or the micro-batch (the global batch
// order is the same for all of them), so a checkpoint of N processes of batch B continues under
// M processes of batch B' at the same token: batch_idx' = batch_idx x N x B x T / (M x B' x T').
static int convert_position(const char* path, CkptTrainState* cs, const DataLoader* dl) {
    Config saved;
    if (checkpoint_load_config(path, &saved) != 0) return -1;
    const int64_t Bs = saved.train.batch_size, Ts = saved.train.seq_len, Ns = cs->ckpt_nproc;
    if (Ns == dl->nproc && Bs == dl->B && Ts == dl->T) return 0;   // the writer's units
    const int64_t tokens = cs->data.batch_idx * Ns * Bs * Ts;    // into the shard
    const int64_t G = (int64_t)dl->nproc * dl->B * dl->T;
    if (tokens % G != 0) {
        fprintf(stderr, "error: --resume %s: the saved data position, batch %lld of %lld x %lld x %lld tokens (token %lld of shard %lld), "
                "is not a whole number of this run's global batches of %d x %d x %d = %lld tokens; resume with the checkpoint's "
                "[train] tokens_per_step and seq_len\n", path, (long long)cs->data.batch_idx, (long long)Ns, (long long)Bs,
                (long long)Ts, (long long)tokens, (long long)cs->data.shard_idx, dl->nproc, dl->B, dl->T, (long long)G);
        return -1;
    }
    const int64_t nb = tokens / G;
    printf("resume: written by %lld process%s (zero_stage %d), continuing on %d: data position batch %lld of %lld x %lld x %lld "
           "tokens = batch %lld of %d x %d x %d (token %lld of the shard)\n", (long long)Ns, Ns == 1 ? "" : "es", cs->ckpt_zero_stage, dl->nproc,
           (long long)cs->data.batch_idx, (long long)Ns, (long long)Bs, (long long)Ts, (long long)nb, dl->nproc, dl->B, dl->T,
           (long long)tokens);
    cs->data.batch_idx = nb;
    return 0;
}

// A mixture's position from the checkpoint's data.bin (cs->mix, freed here).
static int restore_mixture(const char* path, Mixture* mix, CkptTrainState* cs) {
    char what[CKPT_PATH_MAX + 16];
    snprintf(what, sizeof what, "%s/data.bin", path);
    int rc = 0;
    if (!mix && cs->mix) {
        fprintf(stderr, "error: --resume %s: the checkpoint holds a [data] sources mixture's position (data.bin), but this "
                     "run reads [data] train_glob; resume with the checkpoint's [data] sources (its config.ini)\n", path);
        rc = -1;
    } else if (mix && !cs->mix) {
        fprintf(stderr, "error: --resume %s: the checkpoint holds one data set's position (no data.bin), but this run reads "
                     "[data] sources; resume with the checkpoint's [data] train_glob (its config.ini)\n", path);
        rc = -1;
    } else if (mix && mixture_restore(mix, cs->mix, cs->mix_len, what) != 0) {
        rc = -1;
    }
    free(cs->mix);
    cs->mix = NULL;
    cs->mix_len = 0;
    if (rc == 0 && mix) {
        printf("resume: mixture at global sequence %llu:", (unsigned long long)mix->seq);
        for (int i = 0; i < mix->n; i++)
            printf(" %s %llu drawn (epoch %lld)", mix->name[i], (unsigned long long)mix->drawn[i], (long long)mix->src[i].epoch);
        printf("\n");
    }
    return rc;
}

int resume_restore(const char* path, GPT* m, Optim* o, DataLoader* train_dl, Mixture* mix, CkptTrainState* cs) {
    if (checkpoint_load(path, m, o, cs, mix ? mix->rank : train_dl->rank, mix ? mix->nproc : train_dl->nproc) != 0) return -1;
    if (restore_mixture(path, mix, cs) != 0) return -1;
    if (mix) {
        printf("resume: continuing from %s: step %d, AdamW t %d\n", path, cs->step, o->t);
        return 0;
    }
    if (convert_position(path, cs, train_dl) != 0) return -1;
    if (dataloader_set_state(train_dl, &cs->data) != 0) {
        fprintf(stderr, "error: --resume %s: the saved data position does not fit [data] train_glob (above); resume with "
                "the checkpoint's data and batch shape\n", path);
        return -1;
    }
    if (cs->data_shuffle != train_dl->shuffle || (cs->data_shuffle && cs->data_seed != train_dl->seed))
        fprintf(stderr, "warning: resume: the checkpoint's data order (shuffle %d, seed %llu) differs from this run's "
                "(shuffle %d, seed %llu)\n", cs->data_shuffle, (unsigned long long)cs->data_seed, train_dl->shuffle,
                (unsigned long long)train_dl->seed);
    printf("resume: continuing from %s: step %d, AdamW t %d, data epoch %lld shard %lld batch %lld\n", path, cs->step,
           o->t, (long long)cs->data.epoch, (long long)cs->data.shard_idx, (long long)cs->data.batch_idx);
    return 0;
}

static int agree_max(void* ctx, int failed) {
    double f = failed ? 1.0 : 0.0;
    comm_allreduce_max_f64((Comm*)ctx, &f, 1);
    return f != 0.0;
}

int resume_resave(Comm* comm, const Config* cfg, const GPT* m, const Optim* o, CkptTrainState* cs, const DataLoader* train_dl,
                  const Mixture* mix) {
    const char* dir = getenv("GATEDGPT_RESAVE_DIR");
    if (!dir || !dir[0]) return 0;
    if (mix) {
        if (mixture_save(mix, &cs->mix, &cs->mix_len) != 0) return -1;
    } else {
        dataloader_get_state(train_dl, &cs->data);
        cs->data_seed = train_dl->seed;
        cs->data_shuffle = train_dl->shuffle;
    }
    int rc = checkpoint_save_ranks(dir, cs->step, cfg, m, o, cs, comm->rank, comm->size, agree_max, comm);
    free(cs->mix);
    cs->mix = NULL;
    cs->mix_len = 0;
    if (rc != 0) {
        fprintf(stderr, "error: GATEDGPT_RESAVE_DIR=%s: writing the loaded state failed (above)\n", dir);
        return -1;
    }
    printf("resume: the loaded state written to %s/step_%08d (GATEDGPT_RESAVE_DIR)\n", dir, cs->step);
    return 0;
}
