// train/ckpt_async.h: asynchronous checkpoints ([checkpoint] async = true, docs/formats.md).
//
// The step loop copies the state into a host buffer (train/checkpoint.h checkpoint_snapshot:
// the weights on rank 0, this rank's AdamW m and v, the spike windows; pinned memory on GPUs),
// and one writer thread per process writes the files from that copy while training goes on:
// the same files, checksums, fsyncs and atomic rename as a synchronous write
// (checkpoint_write_snapshot is the one code path of both). At most one write is in flight: a
// checkpoint due while the previous one is still being written first waits for it.
//
// Completion across processes: each rank's writer writes its own files into step_N.tmp/; the
// rename and DONE (rank 0, checkpoint_finish) come only once every rank's files are written.
// While a write is in flight, ckpt_async_poll asks the ranks once per step whether any writer
// is still busy (agree: a max over the ranks, the caller's collective); no collective otherwise.
// The commit itself runs on the main thread (a few small files and fsyncs), since it is a
// collective decision.
//
// The buffer is allocated before the first step and kept: checkpoint_snapshot_bytes (the memory
// planner's `snapshot` line, train/plan.c).
#pragma once
#include <pthread.h>
#include <sys/types.h>
#include "train/checkpoint.h"

// The writer thread runs under SCHED_IDLE (Linux, per thread) while the step loop runs: the
// loop's threads go first where they share cores with it; under the normal policy while the loop
// waits for it. Where SCHED_IDLE is refused, this nice value instead (docs/performance.md
// "Asynchronous checkpoints").
#define CKPT_ASYNC_NICE 10

typedef enum { CKA_IDLE = 0, CKA_WRITING, CKA_WRITTEN } CkptAsyncState;

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;               // the thread runs
    int quit;                  // asks the thread to end (ckpt_async_free)
    CkptAsyncState state;      // under mu: IDLE (nothing in flight), WRITING (the writer has the
                               // snapshot), WRITTEN (this rank's files are written; not yet agreed)
    int failed;                // the writer's result (WRITTEN)
    pid_t writer_tid;          // under mu: the writer thread's id (0 until it runs)
    int urgent;                // under mu: the step loop waits for this write (writer_priority)
    CkptSnapshot snap;         // the state of the step in flight
    char dir[CKPT_PATH_MAX];   // the checkpoint directory of the write in flight
    int step;                  // its step
    double snapshot_ms;        // the copy, in the step loop
    double write_ms;           // the writer's wall time for this rank's files
    double write_cpu_ms;       // the writer thread's CPU time (crc32, copies into the page cache)
} CkptAsync;

// Reserves the snapshot's buffer for m and o on `rank` (checkpoint_snapshot_reserve: allocated
// and its pages touched before training) and starts the writer thread. Returns 0, or -1 with a
// message.
int ckpt_async_init(CkptAsync* a, const GPT* m, const Optim* o, int rank);
// Begins the write of step `step` (nothing in flight: the caller polled or waited before): rank 0
// creates step_N.tmp/ and the ranks agree (checkpoint_start), the state is copied
// (checkpoint_snapshot, copy = 1) and handed to the writer. Returns 0, or -1 when the write could
// not begin (every rank returns the same; nothing is in flight then).
int ckpt_async_begin(CkptAsync* a, const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                     const CkptTrainState* st, int rank, int nproc, CkptAgree agree, void* ctx);
// 1 while a write is in flight (begun, not yet finished by ckpt_async_poll): the same on every rank.
int ckpt_async_in_flight(const CkptAsync* a);
// A write in flight: when every rank's writer is done (wait = 1: after waiting for this rank's),
// the ranks agree, rank 0 commits (checkpoint_finish), and it returns 1 with *result 0 (committed)
// or -1 (failed: the partial checkpoint removed). Returns 0 when nothing is in flight, or when a
// writer is still busy (wait = 0). One agree per call while a write is in flight.
int ckpt_async_poll(CkptAsync* a, int wait, int rank, CkptAgree agree, void* ctx, int* result);
// Ends the thread (a write in flight is waited for, not committed) and frees the buffer.
void ckpt_async_free(CkptAsync* a);
