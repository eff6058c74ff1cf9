// train/spike.c: see spike.h. The mean and std are recomputed from the ring (window is small).
#include "spike.h"
#include <math.h>
#include <stdlib.h>

void spike_init(SpikeWindow* w, int window) {
    w->window = window;
    w->n = 0;
    w->head = 0;
    w->buf = calloc((size_t)window, sizeof(double));
}

void spike_free(SpikeWindow* w) { free(w->buf); w->buf = NULL; }

double spike_z(const SpikeWindow* w, double x, double* mean, double* std) {
    int need = w->window < 10 ? w->window : 10;
    if (w->n < need) { *mean = NAN; *std = NAN; return NAN; }
    double s = 0.0;
    for (int i = 0; i < w->n; i++) s += w->buf[i];
    double mu = s / w->n, v = 0.0;
    for (int i = 0; i < w->n; i++) v += (w->buf[i] - mu) * (w->buf[i] - mu);
    double sd = sqrt(v / (w->n - 1));
    *mean = mu;
    *std = sd;
    return sd > 0.0 ? (x - mu) / sd : NAN;
}

void spike_push(SpikeWindow* w, double x) {
    w->buf[w->head] = x;
    w->head = (w->head + 1) % w->window;
    if (w->n < w->window) w->n++;
}
