// tests/test_util.h: tiny test harness shared by the C tests (no framework).
// Each test file counts checks and ends with the line "N passed, M failed".
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

static int tu_passed = 0, tu_failed = 0;

#define TU_CHECK(cond, ...) do {                                  \
    if (cond) { tu_passed++; }                                    \
    else { tu_failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
} while (0)

static inline int tu_finish(void) {
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}

// deterministic test RNG (xorshift64*), uniform in [-1, 1)
static uint64_t tu_state = 88172645463325252ULL;
static inline double tu_rand(void) {
    tu_state ^= tu_state >> 12; tu_state ^= tu_state << 25; tu_state ^= tu_state >> 27;
    return (double)((tu_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static inline void tu_fill(float* x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * tu_rand());
}
// max |a - b| / max |b|
static inline double tu_rel_err(const float* a, const float* b, size_t n) {
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}
