// train/resume.h: what `train_gpt --resume auto | PATH` decides before training continues:
// which checkpoint, whether this run's config may continue it, and what happens to the
// checkpoint directory and the run log. The checkpoint files themselves: train/checkpoint.h.
#pragma once
#include <stddef.h>
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "data/dataloader.h"
#include "data/mixture.h"
#include "train/checkpoint.h"
#include "train/comm.h"

// The checkpoint to resume from. spec "auto": the newest complete checkpoint in dir that
// verifies; a newer one that fails verification is reported with a warning and skipped.
// Any other spec is a checkpoint directory, which must verify. Returns 1 with path filled, 0
// when spec is "auto" and dir holds no complete checkpoint (start fresh), -1 on error (every
// complete checkpoint in dir is damaged, or the given one is).
int resume_find(const char* spec, const char* dir, char* path, size_t n);

// What --resume SPEC resolves to, on every rank: rank 0 chooses (resume_find), every rank takes
// its choice (path: n bytes, broadcast), and the checkpoint's config must accept this run's cfg
// (resume_check_config). Returns 1 with path filled, 0 to start fresh (spec NULL, or "auto" over
// a directory without checkpoints: said on stdout), -1 after an error line.
//
// Any process count may resume any checkpoint (docs/distributed.md, "Resume on another process
// count"). The global batch is the run's: when cfg leaves [train] tokens_per_step derived (0),
// it becomes the checkpoint's (cfg changed, its origin says so); it must divide over comm->size
// processes of batch_size x seq_len, else one error line (rank 0) gives the numbers and the
// nearest process counts and batch_size that divide it. Call before config_finalize_processes.
int resume_resolve(Comm* comm, const char* spec, const char* dir, Config* cfg, char* path, size_t n);

// Compares this run's config with the checkpoint's. Any difference in an architecture section
// ([model], and [moe] once it exists: whole sections, key by key) is refused: returns -1 after
// one error line listing every differing key with both values. Other differences are accepted
// and printed: keys that only change the run's length, logging or probes as notes, the others
// (they change the trajectory: lr, seed, batch shape, data, ...) as warnings.
int resume_check_config(const Config* saved, const Config* now, const char* ckpt_path);

// Before continuing from `step` in checkpoint directory dir: complete checkpoints newer than
// step are renamed step_N.corrupt (auto mode: they failed verification) or refused (-1: an
// explicit PATH older than checkpoints that would be overwritten). For a fresh start (step 0,
// not resuming) any complete checkpoint in dir is refused, so no earlier run's checkpoint is
// ever overwritten.
int resume_prepare_dir(const char* dir, int step, int resuming, int auto_mode);

// Keeps the records of log.jsonl whose "step" is <= step (written atomically: .tmp + rename),
// so the log of a resumed run reads like the uninterrupted run's. A missing log is fine.
int resume_trim_log(const char* log_path, int step);

// Loads the checkpoint at path into the model, the optimizer, the training loader's position and
// cs (step, counters, spike windows restored in place), and prints what it resumed. Returns 0,
// or -1 after an error line (a damaged file, a position that does not fit the data). A
// checkpoint of another process count (or batch_size): the AdamW state is re-cut to o's range
// (checkpoint_load) and the data position, global batches of the writer's nproc x batch_size x
// seq_len tokens, is converted to this loader's (the same token of the same shard).
// mix: the run's [data] sources mixture (train_dl unused), or NULL (one data set). A mixture's
// position is the checkpoint's data.bin, in sequences (no conversion: any process count); a
// checkpoint of the other kind (data.bin present or missing) is refused with one error line.
int resume_restore(const char* path, GPT* m, Optim* o, DataLoader* train_dl, Mixture* mix, CkptTrainState* cs);

// Testing hook (docs/formats.md): with GATEDGPT_RESAVE_DIR=DIR in the environment, every rank
// writes the state it has just loaded (resume_restore) as a checkpoint into DIR, at the same
// step, before training goes on; tests/test_elastic_resume.sh compares it with the checkpoint it
// was loaded from. Without it, does nothing. Returns 0, or -1 after an error line.
int resume_resave(Comm* comm, const Config* cfg, const GPT* m, const Optim* o, CkptTrainState* cs,
                  const DataLoader* train_dl, const Mixture* mix);
