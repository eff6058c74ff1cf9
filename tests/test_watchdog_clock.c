// tests/test_watchdog_clock.c: what the watchdog (train/watchdog.h) counts as time without
// progress, in one process with hang_timeout_s = 2 (the thread wakes every 0.2 s; a wake counts at
// most 0.2 + 1 = 1.2 s). The abort hook here records when it ran instead of ending the process.
//  1. a phase armed and no progress: the hook runs 2 s after the arming (within one poll and a
//     margin for a loaded host), with a line naming the step and the phase;
//  2. progress every 0.1 s for 3 s: no hook (each publication restarts the clock);
//  3. the process stopped (SIGSTOP from a child) for 3.5 s right after the arming, then continued
//     (SIGCONT), as Open MPI does to a stopped rank before SIGTERM: the hook must not run at once
//     on the continue (the 3.5 s it did not run count as at most 1.2 s), and still runs, about
//     0.8 s later (2 - 1.2, less the little it waited before the stop).
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test_util.h"
#include "train/watchdog.h"

static _Atomic double g_fired_at;   // CLOCK_MONOTONIC seconds of the hook's call; 0: not called
static char g_why[1024];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}
// the test's hook: records the time and the line, and returns (the thread then ends)
static void test_abort(void* ctx, int code, const char* why) {
    (void)ctx;
    snprintf(g_why, sizeof g_why, "%d %s", code, why);
    atomic_store(&g_fired_at, now_s());
}
// waits until the hook ran or `limit` s passed; returns the hook's time or 0
static double wait_fired(double limit) {
    const double t0 = now_s();
    while (atomic_load(&g_fired_at) == 0.0 && now_s() - t0 < limit) sleep_s(0.01);
    return atomic_load(&g_fired_at);
}

int main(void) {
    const double T = 2.0, cap = 0.2 + 1.0, slack = 1.0;   // slack: wake-up delays on a loaded host

    // 1. no progress: the hook after T
    atomic_store(&g_fired_at, 0.0);
    TU_CHECK(watchdog_start(T, 1, test_abort, NULL) == 0, "start");
    double t0 = now_s();
    watchdog_phase(7, "test wait");
    double f = wait_fired(T + 5);
    watchdog_stop();
    const double first = f > 0 ? f - t0 : -1.0;
    TU_CHECK(f > 0 && f - t0 >= T && f - t0 <= T + 0.2 + slack, "1: no progress: the hook after %.3f s (expected %g to %g)",
             f > 0 ? f - t0 : -1.0, T, T + 0.2 + slack);
    TU_CHECK(strstr(g_why, "3 no progress for 2 s at step 7 in test wait") == g_why, "1: the line: '%s'", g_why);

    // 2. progress every 0.1 s for 3 s: never
    atomic_store(&g_fired_at, 0.0);
    TU_CHECK(watchdog_start(T, 1, test_abort, NULL) == 0, "start");
    watchdog_phase(8, "test progress");
    for (int i = 0; i < 30; i++) { sleep_s(0.1); watchdog_progress(); }
    watchdog_stop();
    TU_CHECK(atomic_load(&g_fired_at) == 0.0, "2: progress every 0.1 s for 3 s: no hook ('%s')", g_why);

    // 3. stopped for 3.5 s, then continued
    atomic_store(&g_fired_at, 0.0);
    int fd[2];
    TU_CHECK(pipe(fd) == 0, "pipe");
    TU_CHECK(watchdog_start(T, 1, test_abort, NULL) == 0, "start");
    watchdog_phase(9, "test stopped");
    t0 = now_s();
    fflush(stdout);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child == 0) {   // stops the test process, continues it 3.5 s later, and says when
        close(fd[0]);
        kill(parent, SIGSTOP);
        sleep_s(3.5);
        const double cont = now_s();   // CLOCK_MONOTONIC is one clock for every process
        kill(parent, SIGCONT);
        if (write(fd[1], &cont, sizeof cont) != (ssize_t)sizeof cont) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    double cont = 0;
    TU_CHECK(child > 0 && read(fd[0], &cont, sizeof cont) == (ssize_t)sizeof cont, "3: the child continued the process");
    waitpid(child, NULL, 0);
    close(fd[0]);
    f = wait_fired(T + 5);
    watchdog_stop();
    const double before = cont - 3.5 - t0;   // how long it ran armed before the stop
    TU_CHECK(cont - t0 >= 3.5, "3: the process was stopped (continued %.3f s after the arming)", cont - t0);
    // the earliest the hook may run: T - cap - before after the continue (cap: the late wake)
    TU_CHECK(f > 0 && f - cont >= T - cap - before - 0.05,
             "3: stopped 3.5 s then continued: the hook %.3f s after the continue (at least %.3f: the stop counts at most %g s)",
             f > 0 ? f - cont : -1.0, T - cap - before - 0.05, cap);
    TU_CHECK(f > 0 && f - cont <= T + 0.2 + slack, "3: the hook still runs after the continue (%.3f s, at most %g)",
             f > 0 ? f - cont : -1.0, T + 0.2 + slack);
    printf("no progress: the hook %.3f s after the arming; stopped %.3f s after %.3f s armed: the hook %.3f s after the continue\n",
           first, cont - t0 - before, before, f > 0 ? f - cont : -1.0);
    return tu_finish();
}
