// data/mixture.h: training batches drawn from several weighted sources ([data] sources).
//
// The schedule. The global sequence order of a run (sequence g: the g-th sequence of the
// stream, g = step x S + (micro-step x nproc + rank) x B + j with S = tokens_per_step / T, the
// same order for every process count: data/dataloader.h) is cut into sources by a periodic
// schedule of period W. The float weights become integer weights w_i summing to W (the smallest
// W <= MIX_MAX_PERIOD at which every weight is a whole number of 1/W, else W = MIX_MAX_PERIOD
// by largest remainders, each w_i >= 1), and one period is the smooth weighted round-robin
// order over them (nginx's: each pick adds w_i to every source's current value, takes the
// largest, and subtracts W from it). Source i then holds exactly w_i of every W consecutive
// sequences (any W consecutive slots of a W-periodic order are one whole period), and over any
// window of L consecutive sequences its count is within MixSchedule.max_dev of L x w_i / W
// (measured over every window by mixture_schedule_init; 0.7/0.3 -> W = 10, max_dev 0.9).
// The seed picks the tie order (which source a tie goes to) and the slot sequence 0 starts at,
// so runs with different seeds interleave differently; the same seed gives the same schedule.
//
// The sources. Each source is an ordinary DataLoader over its glob with B = 1, nproc = 1: a
// stream of single sequences with its own position, epoch and shuffle (seeded by the run's seed
// and the source's index; source 0 by the seed itself, so one source reads train_glob's order
// until train_glob's loader drops a shard's tail), in units that do not depend on the process
// count. Every process
// walks every sequence of the global batch: those of its rank are read, the others skipped
// (dataloader_skip), so every process holds the same position for every source, and a resume
// on any process count continues the same sequences.
//
// The state a checkpoint keeps (mixture_save / mixture_restore): the global sequence index and,
// per source (by name), the sequences drawn and the loader's position (epoch, shard, sequence).
// Its bytes are data.bin of the checkpoint (docs/formats.md).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dataloader.h"

#define MIX_MAX_SOURCES 16
#define MIX_MAX_PERIOD 1000
#define MIX_NAME_LEN 32

typedef struct {
    int n;                        // sources
    int W;                        // period: the integer weights' sum
    int w[MIX_MAX_SOURCES];       // integer weights
    int* slot;                    // [W] source of each slot of one period
    int start;                    // slot of global sequence 0 (from the seed)
    double max_dev;               // max over windows and sources of |count - L x w_i / W|
} MixSchedule;

// Builds the schedule of n float weights (positive; normalized here). Returns 0, or -1 after
// one error line (out of memory, a bad weight).
int mixture_schedule_init(MixSchedule* s, const double* weights, int n, uint64_t seed);
// The source of global sequence g.
static inline int mixture_schedule_source(const MixSchedule* s, uint64_t g) {
    return s->slot[(g + (uint64_t)s->start) % (uint64_t)s->W];
}
void mixture_schedule_free(MixSchedule* s);

typedef struct {
    int n;                                 // sources
    char name[MIX_MAX_SOURCES][MIX_NAME_LEN];
    double weight[MIX_MAX_SOURCES];        // normalized float weights (the config's)
    DataLoader src[MIX_MAX_SOURCES];       // B = 1, nproc = 1: one sequence per dataloader_next
    MixSchedule sched;
    int B, T, rank, nproc;                 // this process's micro-batch, and the processes
    // position: what a checkpoint keeps
    uint64_t seq;                          // global sequences drawn so far (the next one's g)
    uint64_t drawn[MIX_MAX_SOURCES];       // sequences drawn from each source (all ranks' together)
} Mixture;

// Opens every source (dataloader_init on its glob, B = 1, nproc = 1; shuffled when shuffle,
// each source seeded from seed and its index). Returns 0, or -1 after an error line naming the
// source. On failure nothing needs freeing.
int mixture_init(Mixture* mix, int n, const char (*names)[MIX_NAME_LEN], const double* weights,
                 const char* const* globs, int B, int T, int rank, int nproc, int vocab_size,
                 int shuffle, uint64_t seed);
// dataloader_set_bos on every source.
void mixture_set_bos(Mixture* mix, int bos);
// This process's B sequences of the next global micro-batch of nproc x B: inputs[B*T],
// targets[B*T]. Returns 0 or -1 after an error line.
int mixture_next(Mixture* mix, int* inputs, int* targets);
// Back to sequence 0 and every source's first sequence.
void mixture_reset(Mixture* mix);

// The position as bytes (malloc'd into *buf, *len): u32 n, u32 0, u64 seq, then per source
// char name[32], u64 drawn, i64 epoch, i64 shard_idx, i64 batch_idx. Returns 0 or -1 (memory).
int mixture_save(const Mixture* mix, unsigned char** buf, size_t* len);
// Restores a position mixture_save wrote. Sources are matched by name: a saved source this run
// lacks, or a source of this run the save lacks, is an error. Returns 0, or -1 after one error
// line naming `what` (the file) and the source.
int mixture_restore(Mixture* mix, const unsigned char* buf, size_t len, const char* what);

// Prints a saved position (gatedgpt_ckpt inspect): one line, then a line per source. Returns 0,
// or -1 when buf is not one mixture_save wrote.
int mixture_describe(const unsigned char* buf, size_t len, FILE* f);

void mixture_free(Mixture* mix);
