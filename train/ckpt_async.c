// train/ckpt_async.c: the writer thread of asynchronous checkpoints (train/ckpt_async.h).
#define _GNU_SOURCE
#include "ckpt_async.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Testing hook (docs/formats.md): GATEDGPT_TEST_CKPT_WRITE_DELAY_MS=N: the writer sleeps N ms
// before each write, with no watchdog progress (a writer stuck on a dead filesystem).
static void test_write_delay(void) {
    const char* e = getenv("GATEDGPT_TEST_CKPT_WRITE_DELAY_MS");
    const long ms = e ? atol(e) : 0;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// The writer's scheduling. While the step loop runs (urgent = 0): below the loop's threads, so
// that where they share cores the writer runs only on a core the compute leaves idle (Linux
// SCHED_IDLE, per thread: the step's OpenMP threads are never preempted mid-barrier by it;
// measured in docs/performance.md "Asynchronous checkpoints"); where SCHED_IDLE is refused, a
// nice value (best effort). While the loop waits for the write (urgent = 1): the normal policy,
// so that other processes on the host cannot starve a write the job is waiting for.
static void writer_priority(pid_t tid, int urgent) {
    struct sched_param sp = {0};
    if (urgent) {
        sched_setscheduler(tid, SCHED_OTHER, &sp);
        return;
    }
    if (sched_setscheduler(tid, SCHED_IDLE, &sp) != 0) setpriority(PRIO_PROCESS, (id_t)tid, CKPT_ASYNC_NICE);
}

// The step loop is about to wait for the write in flight (under mu): the writer's normal policy.
static void writer_raise(CkptAsync* a) {
    a->urgent = 1;
    if (a->writer_tid > 0) writer_priority(a->writer_tid, 1);
}

// The writer: waits for a snapshot, writes this rank's files from it, reports, waits again.
static void* writer_main(void* arg) {
    CkptAsync* a = (CkptAsync*)arg;
    pthread_mutex_lock(&a->mu);
    a->writer_tid = (pid_t)syscall(SYS_gettid);
    for (;;) {
        while (a->state != CKA_WRITING && !a->quit) pthread_cond_wait(&a->cv, &a->mu);
        if (a->state != CKA_WRITING) break;   // quit with nothing to write
        writer_priority(a->writer_tid, a->urgent);   // under mu: ordered with the loop's raise
        pthread_mutex_unlock(&a->mu);
        // the snapshot is the writer's alone while WRITING: the step loop reads none of it
        test_write_delay();
        const double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
        const int failed = checkpoint_write_snapshot(a->dir, &a->snap) != 0;
        const double t1 = now_ms(CLOCK_MONOTONIC), c1 = now_ms(CLOCK_THREAD_CPUTIME_ID);
        pthread_mutex_lock(&a->mu);
        a->write_ms = t1 - t0;
        a->write_cpu_ms = c1 - c0;
        a->failed = failed;
        a->state = CKA_WRITTEN;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int ckpt_async_init(CkptAsync* a, const GPT* m, const Optim* o, int rank) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (checkpoint_snapshot_reserve(&a->snap, m, o, rank) != 0) return -1;
    int e = pthread_create(&a->thread, NULL, writer_main, a);
    if (e != 0) {
        fprintf(stderr, "error: cannot start the checkpoint writer thread: %s (set [checkpoint] async = false)\n", strerror(e));
        return -1;
    }
    a->started = 1;
    return 0;
}

int ckpt_async_begin(CkptAsync* a, const char* dir, int step, const Config* cfg, const GPT* m, const Optim* o,
                     const CkptTrainState* st, int rank, int nproc, CkptAgree agree, void* ctx) {
    if (checkpoint_start(dir, step, rank, agree, ctx) != 0) return -1;
    const double t0 = now_ms(CLOCK_MONOTONIC);
    // the copy (every rank, so that the gather of an expert shard is collective), then whether
    // every rank has its copy: a rank without one cannot write, and rank 0 then removes the
    // directory (checkpoint_finish), as a synchronous write that failed would
    int failed = checkpoint_snapshot(&a->snap, step, cfg, m, o, st, rank, nproc, 1) != 0;
    a->snapshot_ms = now_ms(CLOCK_MONOTONIC) - t0;
    if (agree ? agree(ctx, failed) : failed) {
        checkpoint_snapshot_release(&a->snap);
        checkpoint_finish(dir, step, rank, nproc, 1, agree, ctx);
        return -1;
    }
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    a->step = step;
    pthread_mutex_lock(&a->mu);
    a->state = CKA_WRITING;
    a->urgent = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

int ckpt_async_in_flight(const CkptAsync* a) { return a->state != CKA_IDLE; }   // only the main thread sets IDLE

int ckpt_async_poll(CkptAsync* a, int wait, int rank, CkptAgree agree, void* ctx, int* result) {
    if (a->state == CKA_IDLE) return 0;
    pthread_mutex_lock(&a->mu);
    if (wait && a->state == CKA_WRITING) writer_raise(a);
    while (wait && a->state == CKA_WRITING) pthread_cond_wait(&a->cv, &a->mu);
    const int writing = a->state == CKA_WRITING, failed = a->failed;
    pthread_mutex_unlock(&a->mu);
    // any rank's writer still busy: ask again at the next step (every rank asks as often)
    if (agree ? agree(ctx, writing) : writing) return 0;
    *result = checkpoint_finish(a->dir, a->step, rank, a->snap.nproc, failed, agree, ctx);
    checkpoint_snapshot_release(&a->snap);
    pthread_mutex_lock(&a->mu);
    a->state = CKA_IDLE;
    pthread_mutex_unlock(&a->mu);
    return 1;
}

void ckpt_async_free(CkptAsync* a) {
    if (a->started) {
        pthread_mutex_lock(&a->mu);
        if (a->state == CKA_WRITING) writer_raise(a);
        while (a->state == CKA_WRITING) pthread_cond_wait(&a->cv, &a->mu);
        a->quit = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
    }
    checkpoint_snapshot_free(&a->snap);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    memset(a, 0, sizeof *a);
}
