// train/straggler.h: the straggler report's arithmetic (docs/metrics.md "Straggler report").
//
// Every log_every steps each process's compute time since the last report (forward + backward
// wall time, less the time spent inside collectives during them: a rank that waits for others
// is not slow) is exchanged, ms[P] in rank order. The report names the slowest and the fastest
// rank; a rank whose time exceeds factor x the median of the P times is slow in that report; a
// rank slow in `reports` reports in a row is a straggler (straggler_update says when to warn).
//
// The median, not the mean: one slow rank of P pulls the mean towards itself (a rank 1.5x slower
// than the others is only 1.5 / (1 + 0.5/P) x the mean: 1.29x at P = 3, under a factor of 1.3),
// while the median of P >= 3 stays at the healthy ranks' time. With P = 2 the median is the
// mean of the two, and a rank is found slow at ratio r when 2r/(1+r) > factor.
#pragma once

typedef struct {
    double max_ms, min_ms, median_ms;
    int slowest, fastest;     // ranks (the lowest rank on ties)
} StragglerReport;

// Tracks each rank's run of slow reports.
typedef struct {
    int n;          // ranks
    int* run;       // run[r]: reports in a row in which rank r was slow (0 when it was not)
} StragglerTrack;

// The median of ms[n] (n >= 1; the mean of the two middle values when n is even); ms is not changed.
double straggler_median(const double* ms, int n);
// The report of ms[n] (n >= 1).
void straggler_report(const double* ms, int n, StragglerReport* out);
int straggler_track_init(StragglerTrack* t, int n);
void straggler_track_free(StragglerTrack* t);
// One report: each rank's run is extended when ms[r] > factor * median, else reset. Returns the
// number of ranks to warn about, written to warn[] (capacity n): those whose run has just reached
// `reports`, or a further multiple of it (a lasting straggler is named again every `reports`
// reports, not at every one).
int straggler_update(StragglerTrack* t, const double* ms, double factor, int reports, int* warn);
