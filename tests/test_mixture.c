// tests/test_mixture.c: the weighted mixture's schedule (data/mixture.h) against arithmetic, and
// its batches against the sources' own streams, across process counts and a save/restore.
// Prints "N passed, M failed"; exits non-zero on any failure.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/mixture.h"
#include "../data/shard.h"
#include "test_util.h"

#define CHECK TU_CHECK

// Counts of every source in every window of W and every window of length 1..maxlen starting in
// the first `span` sequences, against L x w_i / W: returns the largest deviation seen, and
// whether every W-window held exactly w_i of source i.
static double window_check(const MixSchedule* s, int span, int maxlen, int* exact_w) {
    double worst = 0.0;
    *exact_w = 1;
    for (int a = 0; a < span; a++) {
        int count[MIX_MAX_SOURCES] = {0};
        for (int L = 1; L <= maxlen; L++) {
            count[mixture_schedule_source(s, (uint64_t)(a + L - 1))]++;
            for (int i = 0; i < s->n; i++) {
                double dev = fabs(count[i] - (double)L * s->w[i] / s->W);
                if (dev > worst) worst = dev;
                if (L == s->W && count[i] != s->w[i]) *exact_w = 0;
            }
        }
    }
    return worst;
}

static void test_schedule(void) {
    // 0.7 / 0.3 over 1,000 steps of 8 sequences: W = 10, 7 and 3 of every 10
    MixSchedule s;
    double w73[2] = {0.7, 0.3};
    CHECK(mixture_schedule_init(&s, w73, 2, 1234) == 0, "init 0.7/0.3");
    CHECK(s.W == 10 && s.w[0] == 7 && s.w[1] == 3, "0.7/0.3: W %d, w %d/%d (want 10, 7/3)", s.W, s.w[0], s.w[1]);
    const int steps = 1000, S = 8;
    int total[2] = {0, 0};
    double worst_step = 0.0;
    for (int k = 0; k < steps; k++) {
        for (int j = 0; j < S; j++) total[mixture_schedule_source(&s, (uint64_t)(k * S + j))]++;
        // after every step, the counts so far against (k+1) x S x weight
        for (int i = 0; i < 2; i++) {
            double dev = fabs(total[i] - (double)(k + 1) * S * s.w[i] / s.W);
            if (dev > worst_step) worst_step = dev;
        }
    }
    CHECK(total[0] == 5600 && total[1] == 2400, "1,000 steps x 8: counts %d / %d (want 5600 / 2400 exactly)", total[0], total[1]);
    CHECK(worst_step <= s.max_dev + 1e-9 && worst_step < 1.0, "after every step the counts are within %.3f of exact (bound %.3f)",
          worst_step, s.max_dev);
    int exact;
    double worst = window_check(&s, steps * S, 3 * s.W, &exact);
    CHECK(exact, "every window of W = 10 sequences holds exactly 7 and 3");
    CHECK(fabs(worst - s.max_dev) < 1e-9, "windows of any length: worst deviation %.3f, the stated bound %.3f", worst, s.max_dev);
    CHECK(fabs(s.max_dev - 0.9) < 1e-9, "0.7/0.3: bound %.3f (docs/config.md states 0.9)", s.max_dev);

    // deterministic: the same seed, the same schedule; the other seeds, the same counts
    MixSchedule s2;
    mixture_schedule_init(&s2, w73, 2, 1234);
    int same = 1;
    for (uint64_t g = 0; g < 1000; g++) same &= mixture_schedule_source(&s, g) == mixture_schedule_source(&s2, g);
    CHECK(same, "seed 1234 twice: the same schedule");
    mixture_schedule_free(&s2);
    int differ = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        mixture_schedule_init(&s2, w73, 2, seed);
        for (uint64_t g = 0; g < 20; g++) differ |= mixture_schedule_source(&s, g) != mixture_schedule_source(&s2, g);
        window_check(&s2, 100, s2.W, &exact);
        CHECK(exact && s2.W == 10, "seed %llu: every window of 10 holds 7 and 3", (unsigned long long)seed);
        mixture_schedule_free(&s2);
    }
    CHECK(differ, "other seeds interleave the sources differently");
    mixture_schedule_free(&s);

    // other weights: unnormalized, three sources, weights without a small period
    double w211[3] = {2.0, 1.0, 1.0};
    mixture_schedule_init(&s, w211, 3, 7);
    CHECK(s.W == 4 && s.w[0] == 2 && s.w[1] == 1 && s.w[2] == 1, "2:1:1 -> W %d (want 4: 2, 1, 1)", s.W);
    window_check(&s, 200, s.W, &exact);
    CHECK(exact && fabs(window_check(&s, 200, 3 * s.W, &exact) - s.max_dev) < 1e-9, "2:1:1: exact over every 4, bound %.3f as measured", s.max_dev);
    mixture_schedule_free(&s);
    double wodd[2] = {0.123456789, 0.876543211};
    mixture_schedule_init(&s, wodd, 2, 7);
    CHECK(s.W == MIX_MAX_PERIOD && s.w[0] == 123 && s.w[1] == 877, "0.123456789: W %d, w %d/%d (want 1000: 123/877)", s.W,
          s.w[0], s.w[1]);
    window_check(&s, 1000, s.W, &exact);
    CHECK(exact, "W = 1000: every window of 1000 holds 123 and 877");
    mixture_schedule_free(&s);
    double wtiny[3] = {1e-6, 1.0, 1.0};
    mixture_schedule_init(&s, wtiny, 3, 7);
    CHECK(s.W == MIX_MAX_PERIOD && s.w[0] == 1 && s.w[0] + s.w[1] + s.w[2] == s.W, "a tiny weight keeps 1 slot of 1000 (w0 %d)",
          s.w[0]);
    mixture_schedule_free(&s);
}

// ---- the mixture's batches

static char g_dir[256];
static int g_len[2] = {201, 131};   // tokens per shard: sources of 50 and 32 sequences of T = 4 (+1)

// source a: tokens 1000*a + 100*shard + i (mod 10000) so every token names its source and place
static void write_sources(void) {
    for (int a = 0; a < 2; a++)
        for (int sh = 0; sh < 2; sh++) {
            char path[512];
            snprintf(path, sizeof path, "%s/src%d_%d.bin", g_dir, a, sh);
            int n = g_len[a] / 2 + 1;
            int* t = malloc((size_t)n * sizeof(int));
            for (int i = 0; i < n; i++) t[i] = 1000 * (a + 1) + 300 * sh + i;
            if (shard_write(path, t, n) != 0) { printf("cannot write %s\n", path); exit(2); }
            free(t);
        }
}

static int open_mix(Mixture* m, int B, int rank, int nproc, int shuffle) {
    char names[2][MIX_NAME_LEN] = {"web", "code"};
    double w[2] = {0.7, 0.3};
    char g0[512], g1[512];
    snprintf(g0, sizeof g0, "%s/src0_*.bin", g_dir);
    snprintf(g1, sizeof g1, "%s/src1_*.bin", g_dir);
    const char* globs[2] = {g0, g1};
    return mixture_init(m, 2, (const char (*)[MIX_NAME_LEN])names, w, globs, B, 4, rank, nproc, 10000, shuffle, 42);
}

// The global order of `micro` micro-batches of 4 sequences (T = 4) read by nproc processes of
// batch 4 / nproc, saved and restored into fresh mixtures at micro-batch `cut` (0 = never):
// out[micro * 4 * 4] inputs in global order. Returns the drawn counts in drawn[2].
static void read_global(int nproc, int micro, int cut, int shuffle, int* out, uint64_t* drawn, int64_t* epoch) {
    const int B = 4 / nproc, T = 4;
    Mixture m[4];
    for (int r = 0; r < nproc; r++) open_mix(&m[r], B, r, nproc, shuffle);
    int tg[16];
    for (int k = 0; k < micro; k++) {
        if (k == cut) {   // save rank 0's position, restore it into fresh mixtures of every rank
            unsigned char* buf;
            size_t len;
            mixture_save(&m[0], &buf, &len);
            for (int r = 0; r < nproc; r++) {
                mixture_free(&m[r]);
                open_mix(&m[r], B, r, nproc, shuffle);
                CHECK(mixture_restore(&m[r], buf, len, "test") == 0, "restore at %d", k);
            }
            free(buf);
        }
        for (int r = 0; r < nproc; r++) {
            CHECK(mixture_next(&m[r], out + (size_t)k * 16 + r * B * T, tg) == 0, "next");
            for (int i = 0; i + 1 < B * T; i++)
                if ((i + 1) % T) CHECK(tg[i] == out[(size_t)k * 16 + r * B * T + i + 1], "targets are the inputs shifted");
        }
    }
    for (int a = 0; a < 2; a++) drawn[a] = m[0].drawn[a], epoch[a] = m[0].src[a].epoch;
    for (int r = 1; r < nproc; r++)
        CHECK(m[r].drawn[0] == m[0].drawn[0] && m[r].src[1].batch_idx == m[0].src[1].batch_idx, "every rank holds the same position");
    for (int r = 0; r < nproc; r++) mixture_free(&m[r]);
}

static void test_batches(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_mixture_XXXXXX");
    if (!mkdtemp(g_dir)) { printf("mkdtemp failed\n"); exit(2); }
    write_sources();
    const int micro = 100, n = micro * 16;   // 400 sequences: several epochs of both sources
    int* one = malloc(n * sizeof(int));
    int* other = malloc(n * sizeof(int));
    uint64_t d1[2], d2[2];
    int64_t e1[2], e2[2];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        read_global(1, micro, 0, shuffle, one, d1, e1);
        // the schedule, by arithmetic: sequence g is the source's next one; unshuffled, its
        // tokens are the source's stream in order (shard 0's 25 or 16 sequences, then shard 1's)
        MixSchedule s;
        double w[2] = {0.7, 0.3};
        mixture_schedule_init(&s, w, 2, 42);
        int next[2] = {0, 0}, ok_src = 1, ok_order = 1;
        for (int g = 0; g < micro * 4; g++) {
            int a = mixture_schedule_source(&s, (uint64_t)g), x = one[g * 4];
            ok_src &= x / 1000 == a + 1;
            const int per_shard = (g_len[a] / 2) / 4, q = next[a] % (2 * per_shard);
            if (!shuffle) ok_order &= x == 1000 * (a + 1) + 300 * (q / per_shard) + 4 * (q % per_shard);
            next[a]++;
        }
        mixture_schedule_free(&s);
        CHECK(ok_src, "shuffle %d: every sequence comes from the source the schedule names", shuffle);
        CHECK(ok_order, "shuffle %d: each source's sequences in its own stream order", shuffle);
        CHECK(d1[0] == 280 && d1[1] == 120, "shuffle %d: 400 sequences drawn as %llu / %llu (want 280 / 120)", shuffle,
              (unsigned long long)d1[0], (unsigned long long)d1[1]);
        // epochs: 280 of 50 sequences per pass = 5 passes; 120 of 32 = 3
        CHECK(e1[0] == 5 && e1[1] == 3, "shuffle %d: epochs %lld / %lld (want 5 / 3)", shuffle, (long long)e1[0], (long long)e1[1]);
        // 2 and 4 processes: the same global order
        for (int np = 2; np <= 4; np *= 2) {
            read_global(np, micro, 0, shuffle, other, d2, e2);
            CHECK(memcmp(one, other, n * sizeof(int)) == 0, "shuffle %d: %d processes read the 1-process order", shuffle, np);
        }
        // saved and restored at micro-batch 37 (1 and 2 processes): the same order on
        for (int np = 1; np <= 2; np++) {
            read_global(np, micro, 37, shuffle, other, d2, e2);
            CHECK(memcmp(one, other, n * sizeof(int)) == 0 && d2[0] == d1[0] && e2[1] == e1[1],
                  "shuffle %d, %d process(es): restored at 37, the uninterrupted order", shuffle, np);
        }
    }

    // a save restored into a mixture of other sources: refused, naming the source
    Mixture m;
    open_mix(&m, 4, 0, 1, 0);
    unsigned char* buf;
    size_t len;
    mixture_save(&m, &buf, &len);
    memcpy(buf + 16, "news", 5);   // the first source's name
    printf("(an error line about source 'news' is expected next)\n");
    fflush(stdout);
    CHECK(mixture_restore(&m, buf, len, "test.bin") != 0, "a saved source this run lacks is refused");
    CHECK(mixture_restore(&m, buf, len - 1, "test.bin") != 0, "a short buffer is refused");
    free(buf);
    mixture_free(&m);

    free(one);
    free(other);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
}

int main(void) {
    test_schedule();
    test_batches();
    return tu_finish();
}
