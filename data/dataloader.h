// data/dataloader.h: batches of token windows from llm.c shards, split across processes.
//
// The token stream of a shard is cut into global batches of G = nproc*B*T tokens, back to back
// from offset 0. Global batch k of a shard covers tokens [k*G, (k+1)*G]; rank r reads the
// window of B*T+1 tokens starting at k*G + r*B*T: inputs are its first B*T tokens, targets the
// same shifted by one. So the ranks' inputs are disjoint and, concatenated in rank order, are
// exactly what 1 process with batch nproc*B gets. A shard holds (num_tokens-1)/G global
// batches, rounded down to whole optimizer steps after dataloader_set_accum (the trainer's:
// then the tokens a shard gives do not depend on nproc); the tail is skipped. After the last
// batch of the last shard the loader wraps to the first shard and counts an epoch.
//
// A sample is a window of T+1 tokens starting at a multiple of T; a shard holds
// (num_tokens-1)/T samples. Unshuffled, global batch k of a shard is samples k*nproc*B ..
// (k+1)*nproc*B - 1 in order (rank r takes the r-th B of them), which is the contiguous layout
// above. With dataloader_shuffle(seed), every epoch visits the shards in a permuted order and
// each shard's samples in a permuted order, both drawn from (seed, epoch[, shard]) alone, so
// every rank computes the same permutations and the order is reproducible.
//
// Shards are mapped one at a time (mmap). The position is (epoch, shard_idx, batch_idx) with
// shard_idx counting shards in the epoch's visiting order: DataLoaderState saves and restores
// it, and the next batch after a restore is exactly the one that would have come.
//
// Errors: functions print one line to stderr (naming the file or pattern) and return -1.
#pragma once
#include <stdint.h>

#include "shard.h"

typedef struct {
    // fixed at init
    int B, T;                  // sequences per batch per process, tokens per sequence
    int rank, nproc;           // this process, number of processes
    int vocab_size;            // every token must be < vocab_size (checked when a shard loads)
    int num_shards;
    char** shard_paths;        // [num_shards] sorted glob matches (owned)
    int64_t* shard_batches;    // [num_shards] global batches in each shard
    int64_t batches_per_epoch; // sum of shard_batches: global batches (= steps) per pass
    int accum;                 // global batches per optimizer step (dataloader_set_accum; 1 by default)
    // position: the next batch to return
    int64_t epoch;             // completed passes over all shards
    int shard_idx;             // shard of the next batch
    int64_t batch_idx;         // global batch within that shard
    // the mapped shard (loaded_idx == -1: none)
    int loaded_idx;
    Shard shard;
    // shuffling (off unless dataloader_shuffle was called)
    int shuffle;
    uint64_t seed;
    int* shard_order;          // [num_shards] visiting order of the current epoch
    int64_t order_epoch;       // epoch shard_order was drawn for (-1: none)
    int64_t* sample_perm;      // sample order of the mapped shard for perm_epoch
    int64_t perm_epoch;        // (-1: none)
    int64_t perm_samples;      // length of sample_perm
    int bos;                   // >= 0: every sample starts with this token (dataloader_set_bos)
} DataLoader;

// The loader's position: what a checkpoint stores to resume the data stream exactly.
typedef struct {
    int64_t epoch;
    int64_t shard_idx;
    int64_t batch_idx;
} DataLoaderState;

// Finds shards with glob(3), validates every header, and maps the first shard (checking its
// tokens). Fails when the pattern matches nothing, a header is bad, or a shard is too short
// for one global batch of nproc*B*T+1 tokens. On failure *loader needs no dataloader_free.
int dataloader_init(DataLoader* loader, const char* glob_pattern, int B, int T,
                    int rank, int nproc, int vocab_size);

// Whole optimizer steps per shard: rounds every shard's global batches down to a multiple of
// accum (the micro-steps of one optimizer step, so accum x nproc x B x T = tokens_per_step).
// A shard of n tokens then gives floor((n - 1) / tokens_per_step) steps, the same tokens for
// every process count and micro-batch with this tokens_per_step: N processes and M processes
// read one global token order, which is what resuming on another process count needs
// (docs/distributed.md). A step never spans two shards. Call after init, before the first
// batch (it resets the position). Fails (-1, one line naming the shard) when a shard holds
// less than one step.
int dataloader_set_accum(DataLoader* loader, int accum);

// Writes this process's next batch: inputs[B*T], targets[B*T] (targets[i] = the token after
// inputs[i]). Moves to the next shard (mapping and checking it) when needed.
int dataloader_next(DataLoader* loader, int* inputs, int* targets);

// Moves past the next n batches without reading them (no shard is mapped): the position is
// what n dataloader_next calls would leave. data/mixture.h skips the sequences of other ranks.
int dataloader_skip(DataLoader* loader, int64_t n);

// Back to the first batch of the first shard, epoch 0.
void dataloader_reset(DataLoader* loader);

// Turn on per-epoch shuffling of shard order and of sample order within each shard, drawn
// from seed. Call after init and before the first batch (it resets the position).
void dataloader_shuffle(DataLoader* loader, uint64_t seed);

// Start every sample with token `bos` (the end-of-text/BOS id; -1 turns it off), as
// pre-training on packed documents does: a sample's window of T stream tokens w[0..T) becomes
// inputs = [bos, w0, ..., w(T-2)], targets = [w0, ..., w(T-1)], so the model predicts every
// stream token once and the first position always holds the same token (a place for an
// attention sink to form). Windows, their order and the position are unchanged.
void dataloader_set_bos(DataLoader* loader, int bos);

// Save / restore the position. Restore fails (-1, one line naming the field) when the state
// does not fit this loader's shards (a different data set or batch shape).
void dataloader_get_state(const DataLoader* loader, DataLoaderState* state);
int dataloader_set_state(DataLoader* loader, const DataLoaderState* state);

void dataloader_free(DataLoader* loader);
