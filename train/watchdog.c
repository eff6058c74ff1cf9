// train/watchdog.c: the watchdog thread (train/watchdog.h).
#include "watchdog.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// What the main thread publishes (relaxed atomics: the thread only needs to see that they move)
static atomic_ulong g_progress;           // bumped by every watchdog_phase / watchdog_progress
static atomic_int g_step;
static _Atomic(const char*) g_phase;      // NULL: unarmed

static struct {
    int on;
    double timeout_s, poll_s;
    int nproc;                 // processes in the job (the line's hint about the stopped one)
    WatchdogAbort abort_fn;
    void* ctx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void* watchdog_main(void* arg) {
    (void)arg;
    unsigned long seen = atomic_load_explicit(&g_progress, memory_order_relaxed);
    // waited: the time without progress that counts. Each wake adds the time since the last one,
    // but at most late_cap_s: a wake much later than its poll interval means this process did not
    // run (SIGSTOP, a suspended VM), and that time is not time it waited for the others. Without
    // the cap, a rank stopped and then continued (Open MPI sends SIGCONT before SIGTERM when it
    // tears a job down) would blame itself at once for the others' timeout.
    double waited = 0.0, last = now_s();
    const double late_cap_s = W.poll_s + 1.0;
    pthread_mutex_lock(&W.mu);
    while (!W.stop) {
        // sleep one poll interval (CLOCK_REALTIME for the condition's deadline), or until stopped
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        double t = dl.tv_sec + 1e-9 * dl.tv_nsec + W.poll_s;
        dl.tv_sec = (time_t)t;
        dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
        pthread_cond_timedwait(&W.cv, &W.mu, &dl);
        if (W.stop) break;
        unsigned long p = atomic_load_explicit(&g_progress, memory_order_relaxed);
        const double now = now_s();
        const double dt = now - last;
        last = now;
        const char* phase = atomic_load_explicit(&g_phase, memory_order_relaxed);
        if (p != seen || !phase) { seen = p; waited = 0.0; continue; }
        waited += dt < late_cap_s ? dt : late_cap_s;
        if (waited < W.timeout_s) continue;
        char host[256] = "?";
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = 0;
        char why[768];
        snprintf(why, sizeof why, "no progress for %.0f s at step %d in %s (host %s; [train] hang_timeout_s = %g); "
                 "ending the job with exit status %d so that it can be restarted with --resume auto%s", waited,
                 atomic_load_explicit(&g_step, memory_order_relaxed), phase, host, W.timeout_s, WATCHDOG_EXIT_STATUS,
                 W.nproc > 1 ? " (a rank that stopped prints no such line)" : "");
        pthread_mutex_unlock(&W.mu);
        W.abort_fn(W.ctx, WATCHDOG_EXIT_STATUS, why);   // does not return
        return NULL;
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

int watchdog_start(double timeout_s, int nproc, WatchdogAbort abort_fn, void* ctx) {
    if (!(timeout_s > 0) || W.on) return 0;
    W.timeout_s = timeout_s;
    W.nproc = nproc;
    // wake often enough that the job ends within a tenth of the timeout after it (at most 1 s late)
    W.poll_s = timeout_s / 10 < 1.0 ? timeout_s / 10 : 1.0;
    W.abort_fn = abort_fn;
    W.ctx = ctx;
    W.stop = 0;
    atomic_store(&g_phase, NULL);
    int e = pthread_create(&W.thread, NULL, watchdog_main, NULL);
    if (e != 0) {
        fprintf(stderr, "error: cannot start the watchdog thread: %s (set [train] hang_timeout_s = 0 to run without it)\n",
                strerror(e));
        return -1;
    }
    W.on = 1;
    return 0;
}

void watchdog_stop(void) {
    if (!W.on) return;
    pthread_mutex_lock(&W.mu);
    W.stop = 1;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    pthread_join(W.thread, NULL);
    W.on = 0;
    atomic_store(&g_phase, NULL);
}

void watchdog_phase(int step, const char* phase) {
    if (step >= 0) atomic_store_explicit(&g_step, step, memory_order_relaxed);
    atomic_store_explicit(&g_phase, phase, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_progress, 1, memory_order_relaxed);
}

void watchdog_progress(void) { atomic_fetch_add_explicit(&g_progress, 1, memory_order_relaxed); }

const char* watchdog_current_phase(void) { return atomic_load_explicit(&g_phase, memory_order_relaxed); }
