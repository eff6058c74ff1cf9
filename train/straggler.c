// train/straggler.c: the straggler report's arithmetic (train/straggler.h).
#include "straggler.h"
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

double straggler_median(const double* ms, int n) {
    if (n <= 0) return 0.0;
    double small[64];
    double* s = n <= 64 ? small : malloc((size_t)n * sizeof(double));
    if (!s) return 0.0;
    memcpy(s, ms, (size_t)n * sizeof(double));
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    if (s != small) free(s);
    return med;
}

void straggler_report(const double* ms, int n, StragglerReport* out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return;
    out->max_ms = out->min_ms = ms[0];
    for (int r = 1; r < n; r++) {
        if (ms[r] > out->max_ms) { out->max_ms = ms[r]; out->slowest = r; }
        if (ms[r] < out->min_ms) { out->min_ms = ms[r]; out->fastest = r; }
    }
    out->median_ms = straggler_median(ms, n);
}

int straggler_track_init(StragglerTrack* t, int n) {
    t->n = n;
    t->run = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    return t->run ? 0 : -1;
}

void straggler_track_free(StragglerTrack* t) {
    free(t->run);
    t->run = NULL;
    t->n = 0;
}

int straggler_update(StragglerTrack* t, const double* ms, double factor, int reports, int* warn) {
    const double med = straggler_median(ms, t->n);
    int nw = 0;
    for (int r = 0; r < t->n; r++) {
        if (ms[r] > factor * med) {
            t->run[r]++;
            if (reports > 0 && t->run[r] % reports == 0) warn[nw++] = r;
        } else {
            t->run[r] = 0;
        }
    }
    return nw;
}
