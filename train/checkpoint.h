// train/checkpoint.h: checkpoints: atomic, verified, exact resume (format: docs/formats.md).
//
// A checkpoint is a directory DIR/step_NNNNNNNN/ (N = optimizer steps completed, 8 digits):
//
//   model.bin        rank 0: the parameter table (names, shapes, offsets) and the flat arena
//   config.ini       rank 0: the resolved config (loadable with config_load_file)
//   rank_RRRRR.bin   every rank: its AdamW slice (m, v, t), data-loader position, step,
//                    spike-detector windows, non-finite counter, RNG seeds
//   data.bin         rank 0, only for a [data] sources mixture: its position (data/mixture.h)
//   DONE             rank 0, last: the step, the process count, every file's size and checksum
//
// Every file starts with a magic, a version and a zlib crc32 of its contents. The directory is
// written as step_NNNNNNNN.tmp/ (files fsynced, then the directory), renamed into place, and
// then DONE is written (itself via DONE.tmp + fsync + rename) and the directory fsynced again:
// a directory without DONE is incomplete and never resumed from.
//
// Several processes: checkpoint_save_ranks runs the steps below on every rank, with the ranks
// agreeing on success between them (rank 0 begins; every rank writes its file, rank 0 also the
// model; rank 0 commits only when every rank succeeded). checkpoint_save is it for 1 process.
//
// Errors: one line on stderr naming the file, then -1. Nothing here exits.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "model/config.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "data/dataloader.h"
#include "train/spike.h"

#define CKPT_MAGIC 0x4B434747u     // the bytes "GGCK"
#define CKPT_VERSION 1
#define CKPT_KIND_MODEL 1
#define CKPT_KIND_RANK 2
#define CKPT_KIND_DATA 3          // data.bin: a mixture's position ([data] sources)
#define CKPT_HEADER_BYTES 32
#define CKPT_PATH_MAX 1100

// What besides the weights and AdamW moments decides the rest of a run, as one rank holds it.
// The spike windows are restored in place (their ring buffers are copied bit for bit).
typedef struct {
    int step;                  // optimizer steps completed
    DataLoaderState data;      // the training loader's position (next batch)
    uint64_t data_seed;        // the loader's shuffle seed, and whether it shuffles
    int data_shuffle;
    int nonfinite_run;         // consecutive non-finite steps so far
    float lr;                  // learning rate of the last step (informational: lr is a function of step)
    SpikeWindow* loss_win;     // spike-detector windows (train/spike.h)
    SpikeWindow* grad_win;
    // a [data] sources mixture's position (mixture_save's bytes), written as data.bin by rank 0
    // when mix_len > 0; checkpoint_load fills them from data.bin (malloc'd: the caller frees),
    // or NULL / 0 when the checkpoint has none (one data set: the position is `data` above)
    unsigned char* mix;
    size_t mix_len;
    // filled by checkpoint_load: who wrote the checkpoint (the data position above is in its
    // units: global batches of nproc x batch_size x seq_len tokens; train/resume.h converts it)
    int ckpt_nproc;            // processes that wrote it (one rank file each)
    int ckpt_zero_stage;       // 1: the rank files hold ZeRO-1 shards of m, v; 0: full copies
} CkptTrainState;

// What checkpoint_verify read from a checkpoint's DONE file.
typedef struct {
    int step;                  // optimizer steps completed
    int nproc;                 // processes that wrote it (one rank file each)
    int n_files;               // files listed in DONE
    uint64_t bytes;            // their total size
} CkptInfo;

// ---- paths
// DIR/step_NNNNNNNN into out.
void checkpoint_path(char* out, size_t n, const char* dir, int step);
// The checkpoint directory of a run: [checkpoint] dir, or <run_dir>/checkpoints when empty.
void checkpoint_dir_of(char* out, size_t n, const Config* c);

// ---- writing
// Rank 0: creates DIR (mkdir -p) and DIR/step_N.tmp/, removing a stale one left by a crash and an
// incomplete DIR/step_N (no DONE). Refuses (-1) when a complete DIR/step_N exists.
int checkpoint_begin(const char* dir, int step);
// Rank 0: model.bin and config.ini into DIR/step_N.tmp/.
int checkpoint_write_model(const char* dir, int step, const Config* cfg, const GPT* m);
// Every rank: rank_RRRRR.bin (this rank's AdamW slice [offset, offset+count) of the arena: the
// whole arena, or its ZeRO-1 shard) into DIR/step_N.tmp/.
int checkpoint_write_rank(const char* dir, int step, int rank, int nproc, const Optim* o,
                          size_t offset, size_t count, const CkptTrainState* st);
// Rank 0, after every rank wrote: checks each file's header, fsyncs the directory, renames it
// to DIR/step_N, writes DONE, fsyncs. On failure the partial directory is removed.
int checkpoint_commit(const char* dir, int step, int nproc);
// Removes DIR/step_N.tmp/ (after a failed write; best effort).
void checkpoint_abort(const char* dir, int step);
// All of the above for one process. Returns 0, or -1 with the checkpoint removed again and
// every older checkpoint untouched.
int checkpoint_save(const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                    const CkptTrainState* st);
// A fresh start from the weights m holds (the importers, tools/import_*.c): the checkpoint of step 0
// under dir with the AdamW state zero and the data at its beginning (cfg's seed and shuffle).
int checkpoint_save_fresh(const char* dir, const Config* cfg, GPT* m);
// The same on every rank of nproc. agree(ctx, failed) must return 1 on every rank when any
// rank passed failed != 0 (a max over the ranks; the caller's communication layer), else 0.
// No checkpoint is marked DONE unless every rank wrote its file; every rank returns the same.
typedef int (*CkptAgree)(void* ctx, int failed);
int checkpoint_save_ranks(const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                          const CkptTrainState* st, int rank, int nproc, CkptAgree agree, void* ctx);

// ---- the two phases of a write: a snapshot of the state, then the files written from it
// checkpoint_save_ranks = checkpoint_start, checkpoint_snapshot (a view: copy = 0),
// checkpoint_write_snapshot, checkpoint_finish, all on the caller's thread. The asynchronous write
// (train/ckpt_async.h) runs the same steps with a copy (copy = 1) taken in the step loop and the
// write on its writer thread: one code path writes the files, so their bytes are the same.
typedef struct {
    int step, rank, nproc;
    const GPT* m;              // the model: its table (constant during a run) and config
    const float* params;       // model.bin's arena (rank 0): the copy, the gathered whole model
                               // (expert parallelism), or the live m->params of a view
    float* gathered;           // the gather's malloc'd whole arena (expert parallelism), or NULL
    Optim o;                   // o's ranges and t; m and v: the copies, or the live moments of a view
    CkptTrainState st;         // the train state; its spike windows point at the copies below
    SpikeWindow loss_win, grad_win;
    unsigned char* mix;        // the copy of a mixture's position (data.bin); st.mix points at it
    size_t mix_cap;
    char* config_text;         // config.ini's body, config_write's text (rank 0)
    size_t config_len;
    int host;                  // 1: params, o.m, o.v are host copies; 0: a view of backend memory
    void* buf;                 // the copies: [model floats (rank 0), m, v] (ops_host_alloc, kept)
    size_t buf_bytes;
} CkptSnapshot;

// Bytes of a snapshot's host buffer: rank 0's arena (model_floats; 0 on the other ranks and for
// an expert shard, whose whole model the gather copies) and this rank's AdamW m and v.
size_t checkpoint_snapshot_bytes(size_t model_floats, size_t moment_floats);
// Rank 0 begins (checkpoint_begin) and the ranks agree (agree may be NULL for one process).
int checkpoint_start(const char* dir, int step, int rank, CkptAgree agree, void* ctx);
// The state of step `step` into s (zeroed before its first use): copy = 1 copies the weights
// (rank 0), this rank's AdamW state, the spike windows and a mixture's position into s (the
// floats into s->buf: checkpoint_snapshot_reserve, or here on first use); copy = 0 only points at them. Expert
// parallelism: calls the gather (a collective).
int checkpoint_snapshot(CkptSnapshot* s, int step, const Config* cfg, const GPT* m, const Optim* o,
                        const CkptTrainState* st, int rank, int nproc, int copy);
// Allocates s->buf for m and o's state on `rank` (checkpoint_snapshot_bytes) and touches its
// pages, so that the first snapshot in the step loop does not fault them in (1.5 GB for GPT-2
// 124M on rank 0). Returns 0, or -1 with a message.
int checkpoint_snapshot_reserve(CkptSnapshot* s, const GPT* m, const Optim* o, int rank);
// This rank's files of s into DIR/step_N.tmp/ (rank 0: model.bin, config.ini and a mixture's
// data.bin; every rank its rank file). Touches nothing but s and the files (the asynchronous writer's thread calls it).
int checkpoint_write_snapshot(const char* dir, const CkptSnapshot* s);
// The ranks agree on `failed` (any rank), rank 0 commits (or removes the partial directory), and
// every rank learns the outcome: 0, or -1.
int checkpoint_finish(const char* dir, int step, int rank, int nproc, int failed, CkptAgree agree, void* ctx);
// Frees what one write held (the gathered arena); checkpoint_snapshot_free, everything.
void checkpoint_snapshot_release(CkptSnapshot* s);
void checkpoint_snapshot_free(CkptSnapshot* s);

// Expert parallelism (a model built by gpt_build_ep with ep_size > 1 holds only its experts):
// checkpoints still hold the whole model, every expert by its global index (docs/formats.md).
// model.bin is written by rank 0 from the whole model's arena in the ep_size-1 layout, which
// the trainer's gather assembles: checkpoint_save_ranks calls gather(ctx, m) on every rank
// (rank 0 gets a malloc'd host copy of the whole arena, which it frees; the others NULL; the
// members of rank 0's group take part). Rank files then hold AdamW segments (docs/formats.md),
// each at its offset in the whole model's arena, and any reader (any process count, any P)
// assembles its own parts from them by global offset.
// ZeRO-1's sharded fp32 master (model/gpt.h gpt_build_shard: each process holds only its shard)
// goes the same way: gather(ctx, m) on every rank gives rank 0 the whole arena (the shards in
// rank order), and model.bin is written from it; the rank files are as for any ZeRO-1 run.
typedef float* (*CkptGather)(void* ctx, const GPT* m);
void checkpoint_set_gather(CkptGather gather, void* ctx);

// ---- reading
// Checks DONE, then every file it lists: magic, version, size, checksum, and that the
// checksum is the one DONE recorded. Returns 0 (info filled when not NULL) or -1 with one line
// naming the file and what is wrong. With report != NULL, one line per file verified.
int checkpoint_verify(const char* path, CkptInfo* info, FILE* report);
// The resolved config of the checkpoint at path (checksum checked; then config_load_file and
// config_finalize on top of the defaults).
int checkpoint_load_config(const char* path, Config* c);
// Loads model.bin into m (the table must match m's: same names, shapes and offsets) and, when o
// is not NULL, the AdamW state of o's range [o->lo, o->hi) and st (st may be NULL; its spike
// windows are restored when set). Checksums are checked as the files are read.
//
// Any process count and zero_stage may read any checkpoint (elastic resume): the moments are
// assembled by global offset from the rank files whose slices overlap [o->lo, o->hi) (ZeRO-1
// shards re-cut; a full copy of zero_stage 0 cut into a shard, or shards joined into a full
// copy); when rank_<rank>.bin covers the range alone (the writer's layout), only it is read. The
// global state (step, AdamW t, data position, spike windows, counters) comes from the first file
// read, and every file read must hold the same. rank is this process's (which file to try
// first); nproc is informational (the reader's count).
int checkpoint_load(const char* path, GPT* m, Optim* o, CkptTrainState* st, int rank, int nproc);

// ---- the directory of checkpoints
// Complete checkpoints (with DONE) in dir, steps ascending, into steps[max]; returns the count
// (0 for a missing dir). Incomplete ones are not listed.
int checkpoint_list(const char* dir, int* steps, int max);
// After a checkpoint at `current` was committed: keeps the newest keep_last complete
// checkpoints (0 = all) and those whose step is a multiple of keep_every (0 = none); deletes
// the others, stale step_N.tmp/ directories and incomplete ones older than `current`.
// Directories renamed step_N.corrupt are kept. Returns the number deleted.
int checkpoint_prune(const char* dir, int keep_last, int keep_every, int current);

// Testing hook (docs/formats.md): GATEDGPT_CKPT_SLOW_MS=N sleeps N ms at each stage of a write
// (after each file, in the middle of each file, before and after the rename; an asynchronous
// write also before its first file), so that a test can kill the trainer while a checkpoint is
// being written.
