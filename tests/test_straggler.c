// tests/test_straggler.c: the straggler report's arithmetic (train/straggler.h) on hand-made
// compute times: median (odd, even, unsorted, ties), slowest/fastest, the run of slow reports
// and when it warns, and the case that tells the median from the mean (one slow rank of 3 at
// 1.5x is 1.29x the mean: under a factor of 1.3, over it against the median).
#include <string.h>
#include "test_util.h"
#include "train/straggler.h"

int main(void) {
    // median: exact values (every input a small integer or .5: no rounding)
    const double a[5] = {9, 1, 7, 3, 5};
    TU_CHECK(straggler_median(a, 5) == 5.0, "median of 5 = %g", straggler_median(a, 5));
    TU_CHECK(straggler_median(a, 4) == 5.0, "median of 9 1 7 3 = (3+7)/2 = %g", straggler_median(a, 4));
    TU_CHECK(straggler_median(a, 1) == 9.0, "median of one");
    const double ties[4] = {2, 2, 2, 8};
    TU_CHECK(straggler_median(ties, 4) == 2.0, "median with ties = %g", straggler_median(ties, 4));
    TU_CHECK(a[0] == 9 && a[1] == 1, "the input is not reordered");
    double big[100];   // over the 64-element stack buffer
    for (int i = 0; i < 100; i++) big[i] = 99 - i;
    TU_CHECK(straggler_median(big, 100) == 49.5, "median of 0..99 = %g", straggler_median(big, 100));

    // report: slowest / fastest (the lowest rank on ties), the median
    StragglerReport r;
    const double ms[4] = {10, 30, 5, 30};
    straggler_report(ms, 4, &r);
    TU_CHECK(r.slowest == 1 && r.max_ms == 30 && r.fastest == 2 && r.min_ms == 5 && r.median_ms == 20,
             "report: slowest %d (%g) fastest %d (%g) median %g", r.slowest, r.max_ms, r.fastest, r.min_ms, r.median_ms);

    // the median, not the mean: rank 1 at 1.5x of 3 ranks; factor 1.3. Against the mean
    // (100+150+100)/3 = 116.7 it is 1.286x (not slow); against the median 100, 1.5x (slow).
    StragglerTrack t;
    TU_CHECK(straggler_track_init(&t, 3) == 0, "track");
    const double one_slow[3] = {100, 150, 100};
    int warn[3], nw = 0;
    for (int k = 1; k <= 2; k++) {
        nw = straggler_update(&t, one_slow, 1.3, 3, warn);
        TU_CHECK(nw == 0 && t.run[1] == k && t.run[0] == 0 && t.run[2] == 0, "report %d: no warning yet, run %d", k, t.run[1]);
    }
    nw = straggler_update(&t, one_slow, 1.3, 3, warn);
    TU_CHECK(nw == 1 && warn[0] == 1, "third report in a row: rank 1 named (%d warnings)", nw);
    for (int k = 4; k <= 5; k++) {
        nw = straggler_update(&t, one_slow, 1.3, 3, warn);
        TU_CHECK(nw == 0, "report %d: not named again before 3 more", k);
    }
    nw = straggler_update(&t, one_slow, 1.3, 3, warn);
    TU_CHECK(nw == 1 && warn[0] == 1 && t.run[1] == 6, "report 6: named again");
    // a healthy report resets the run
    const double healthy[3] = {100, 110, 95};
    nw = straggler_update(&t, healthy, 1.3, 3, warn);
    TU_CHECK(nw == 0 && t.run[1] == 0, "a healthy report resets the run");
    // interrupted runs never warn: slow, slow, healthy, slow, slow
    const double* seq[5] = {one_slow, one_slow, healthy, one_slow, one_slow};
    int total = 0;
    for (int k = 0; k < 5; k++) total += straggler_update(&t, seq[k], 1.3, 3, warn);
    TU_CHECK(total == 0, "no 3 slow reports in a row: no warning (%d)", total);
    // exactly at the factor is not slow (strictly slower)
    straggler_track_free(&t);
    TU_CHECK(straggler_track_init(&t, 3) == 0, "track");
    const double at[3] = {100, 120, 100};
    total = 0;
    for (int k = 0; k < 3; k++) total += straggler_update(&t, at, 1.2, 1, warn);
    TU_CHECK(total == 0 && t.run[1] == 0, "ratio == factor is not slow");
    // two stragglers of 5 named together, in rank order
    straggler_track_free(&t);
    TU_CHECK(straggler_track_init(&t, 5) == 0, "track");
    const double two[5] = {300, 100, 100, 250, 100};
    nw = straggler_update(&t, two, 1.2, 1, warn);
    TU_CHECK(nw == 2 && warn[0] == 0 && warn[1] == 3, "two stragglers named: %d", nw);
    straggler_track_free(&t);
    return tu_finish();
}
