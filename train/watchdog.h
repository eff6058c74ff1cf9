// train/watchdog.h: ends a job that stopped making progress (docs/distributed.md "Hangs").
//
// A rank that stops (SIGSTOP from a scheduler, a hung GPU, a stuck filesystem) leaves every
// other rank blocked in its next collective forever; nothing fails, so nothing ends the job.
// The watchdog is one thread per process. The main thread publishes where it is: the step and
// the phase (watchdog_phase: "forward", "all-reduce of gradients", "checkpoint write", ...), and
// marks progress inside long phases (watchdog_progress: each evaluation batch, each stage of a
// checkpoint write). Every publication bumps one counter. The thread wakes every
// min(1 s, timeout / 10) and, when the counter has not moved for [train] hang_timeout_s while a
// phase is armed, prints ONE line and ends the whole job through the abort hook (MPI_Abort, and
// ncclCommAbort first on GPUs) with exit status WATCHDOG_EXIT_STATUS, so that a scheduler can
// restart it with --resume auto. Only the time without progress counts: a long evaluation or a
// slow checkpoint of a big model re-arms at each batch or file.
//
// Which ranks are at fault: a rank blocked in a collective only knows that it waits. The rank
// that stopped prints nothing (its watchdog thread is stopped with it); every waiting rank prints
// its own line with its step and phase, so the stopped rank is the one missing from the lines.
// A rank continued after a stop (Open MPI sends SIGCONT before SIGTERM when it ends a job) must
// not then blame itself: each wake counts at most the poll interval + 1 s, so the time a process
// did not run counts as at most that much.
//
// The watchdog never touches the model's numbers: it reads three atomics and sleeps.
#pragma once

// The exit status of a job the watchdog ended: MPI_Abort's errorcode, which mpirun (Open MPI
// 4.1) returns as its own exit status; a process without MPI exits with it.
#define WATCHDOG_EXIT_STATUS 3

// The abort hook: must end every process of the job and not return. `why` is the whole line
// without its "error: " prefix and rank (e.g. "no progress for 5 s at step 12 in all-reduce of
// gradients (host h1); ...").
typedef void (*WatchdogAbort)(void* ctx, int code, const char* why);

// Starts the thread (timeout_s > 0; 0 = off: nothing is started and every call below is a
// no-op) for a job of nproc processes. The phase is unarmed until the first watchdog_phase.
// Returns 0, or -1 with a message when the thread cannot be created.
int watchdog_start(double timeout_s, int nproc, WatchdogAbort abort_fn, void* ctx);
// Stops and joins the thread (before MPI_Finalize: the hook must not run after it).
void watchdog_stop(void);
// The main thread enters `phase` (a string that lives for the whole run, e.g. a literal) of
// step `step` (the step being computed, 1-based; 0 before the first; -1 keeps the published
// step): the clock restarts.
// phase = NULL disarms (nothing is waited for).
void watchdog_phase(int step, const char* phase);
// Progress inside the current phase (an evaluation batch, a checkpoint stage): the clock restarts.
void watchdog_progress(void);
// The current phase, or NULL (for messages of the main thread itself).
const char* watchdog_current_phase(void);
