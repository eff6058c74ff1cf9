// train/spike.h: loss and grad-norm spike detection by z-score against a trailing window.
#pragma once

typedef struct {
    int window;       // capacity
    int n;            // values held (<= window)
    int head;         // next slot to write
    double* buf;      // [window] ring of accepted values
} SpikeWindow;

void spike_init(SpikeWindow* w, int window);
void spike_free(SpikeWindow* w);
// z-score of x against the values held: (x - mean) / std. NaN while fewer than
// min(10, window) values are held, or when std is 0.
double spike_z(const SpikeWindow* w, double x, double* mean, double* std);
// Adds x to the window (callers leave spikes and non-finite values out).
void spike_push(SpikeWindow* w, double x);
