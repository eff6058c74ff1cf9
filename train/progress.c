// train/progress.c: elapsed time and ETA of a loop (train/progress.h has the definition)
#include "progress.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_init(Progress* p, double now) {
    memset(p, 0, sizeof *p);
    p->t0 = now;
}

void progress_task_every(Progress* p, int task, long every, long final) {
    p->every[task] = every > 0 ? every : 0;
    p->final[task] = final > 0 ? final : 0;
}

void progress_item(Progress* p, double seconds) {
    p->dt[p->n % PROGRESS_WINDOW] = seconds;
    p->n++;
}

void progress_task_took(Progress* p, int task, double seconds) { p->last_s[task] = seconds; }

// the runs of a task after items done+1 .. end: the multiples of every in (done, end], and
// `final` when it lies there and is not one of them
static long runs_due(long every, long final, long done, long end) {
    long k = every > 0 ? end / every - done / every : 0;
    if (final > done && final <= end && (every <= 0 || final % every != 0)) k++;
    return k;
}

double progress_eta(const Progress* p, long done, long end) {
    if (done > end || p->n == 0) return 0.0;
    const long w = p->n < PROGRESS_WINDOW ? p->n : PROGRESS_WINDOW;
    double sum = 0.0;
    for (long i = 0; i < w; i++) sum += p->dt[i];
    double eta = (double)(end - done) * (sum / (double)w);
    for (int t = 0; t < PROGRESS_TASKS; t++)
        eta += (double)runs_due(p->every[t], p->final[t], done - 1, end) * p->last_s[t];
    return eta;
}

double progress_elapsed(const Progress* p, double now) { return now - p->t0; }

const char* progress_fmt(double seconds, char* buf, size_t n) {
    long s = seconds > 0.0 ? (long)floor(seconds + 0.5) : 0;
    if (s < 60) snprintf(buf, n, "%lds", s);
    else if (s < 3600) snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
    else snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}
