// train/progress.[ch]: how long a loop has taken and how long it has left, for the step line
// and record of train_gpt and for gatedgpt_ckpt eval.
//
// The ETA is
//   (items left) x (mean duration of the last PROGRESS_WINDOW items)
//   + for each periodic task (evaluation, probe, sample, checkpoint, [eval] tasks): the runs still due
//     x its last measured duration.
// Periodic work is counted where it falls instead of being smeared into a trailing mean of
// whole iterations: a window of 20 steps holds an evaluation every val_every steps or none, so
// such a mean jumps by the evaluation's share each time one enters or leaves the window. A task
// that has not run yet adds nothing (its cost is unknown until it has run once).
// Pure arithmetic over the times the caller measures, so that it can be tested without a clock.
#pragma once
#include <stddef.h>

#define PROGRESS_WINDOW 20
#define PROGRESS_TASKS 5

typedef struct {
    double t0;                          // wall clock (seconds) at progress_init
    double dt[PROGRESS_WINDOW];         // the last items' durations, a ring
    long n;                             // items seen
    long every[PROGRESS_TASKS];         // a task runs after each item that is a multiple of every (0: never)
    long final[PROGRESS_TASKS];         // ... and after this item (0: no extra run)
    double last_s[PROGRESS_TASKS];      // its last duration (0 until it has run once)
} Progress;

double progress_now(void);   // wall clock in seconds (CLOCK_MONOTONIC): the callers' clock
void progress_init(Progress* p, double now);
// a periodic task runs after item i when i % every == 0 or i == final (items count from 1)
void progress_task_every(Progress* p, int task, long every, long final);
void progress_item(Progress* p, double seconds);                  // one more item took `seconds`
void progress_task_took(Progress* p, int task, double seconds);   // a run of the task took `seconds`
// seconds left after item `done` of a loop that ends after item `end`: items done+1 .. end, and
// the tasks due after items done .. end (the caller reports between an item and its tasks, so
// the tasks of item `done` are still to run); 0 before the first item
double progress_eta(const Progress* p, long done, long end);
double progress_elapsed(const Progress* p, double now);
// "42s", "3:07" (minutes:seconds), "1:02:03" (hours:minutes:seconds); returns buf
const char* progress_fmt(double seconds, char* buf, size_t n);
