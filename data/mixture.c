// data/mixture.c: see mixture.h for the schedule and the state.
#define _POSIX_C_SOURCE 200809L
#include "mixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../model/rng.h"

// Integer weights w[n] summing to *W for the normalized weights p[n]: the smallest W at which
// every p_i x W is a whole number >= 1 (to 1e-9), else W = MIX_MAX_PERIOD by largest remainders.
static void integer_weights(const double* p, int n, int* w, int* W) {
    for (int d = 1; d <= MIX_MAX_PERIOD; d++) {
        int ok = 1, sum = 0;
        for (int i = 0; i < n && ok; i++) {
            double x = p[i] * d, r = floor(x + 0.5);
            ok = r >= 1.0 && fabs(x - r) < 1e-9;
            w[i] = (int)r;
            sum += w[i];
        }
        if (ok && sum == d) { *W = d; return; }
    }
    const int D = MIX_MAX_PERIOD;
    int sum = 0;
    for (int i = 0; i < n; i++) {
        w[i] = (int)floor(p[i] * D);
        if (w[i] < 1) w[i] = 1;   // every source keeps a slot
        sum += w[i];
    }
    while (sum < D) {   // the largest remainder p_i x D - w_i gets the next slot
        int best = 0;
        for (int i = 1; i < n; i++) if (p[i] * D - w[i] > p[best] * D - w[best]) best = i;
        w[best]++;
        sum++;
    }
    while (sum > D) {   // a minimum of 1 overshot: the largest gives one back
        int best = 0;
        for (int i = 1; i < n; i++) if (w[i] > w[best]) best = i;
        w[best]--;
        sum--;
    }
    *W = D;
}

int mixture_schedule_init(MixSchedule* s, const double* weights, int n, uint64_t seed) {
    memset(s, 0, sizeof *s);
    if (n < 1 || n > MIX_MAX_SOURCES) {
        fprintf(stderr, "error: mixture: %d sources (accepted: 1 .. %d)\n", n, MIX_MAX_SOURCES);
        return -1;
    }
    double p[MIX_MAX_SOURCES], total = 0.0;
    for (int i = 0; i < n; i++) {
        if (!(weights[i] > 0.0) || !isfinite(weights[i])) {
            fprintf(stderr, "error: mixture: weight %d is %g (accepted: a positive number)\n", i, weights[i]);
            return -1;
        }
        total += weights[i];
    }
    for (int i = 0; i < n; i++) p[i] = weights[i] / total;
    s->n = n;
    integer_weights(p, n, s->w, &s->W);
    s->slot = malloc((size_t)s->W * sizeof(int));
    if (!s->slot) { fprintf(stderr, "error: mixture: out of memory\n"); return -1; }

    // the seed: a priority order for ties (a random permutation of the sources) and the start slot
    Rng r;
    rng_seed(&r, seed ^ 0x6D69787475726521ULL);   // "mixture!": apart from the loaders' streams
    int prio[MIX_MAX_SOURCES];
    for (int i = 0; i < n; i++) prio[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(&r) % (uint64_t)(i + 1));
        int t = prio[i]; prio[i] = prio[j]; prio[j] = t;
    }
    s->start = (int)(rng_next(&r) % (uint64_t)s->W);

    // smooth weighted round-robin over one period: cur_i += w_i; take the largest; it gives W back
    int cur[MIX_MAX_SOURCES] = {0};
    for (int k = 0; k < s->W; k++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            cur[i] += s->w[i];
            if (best < 0 || cur[i] > cur[best] || (cur[i] == cur[best] && prio[i] < prio[best])) best = i;
        }
        cur[best] -= s->W;
        s->slot[k] = best;
    }
    // the bound the doc states: every window (start a, length L <= W; longer ones add whole periods)
    for (int i = 0; i < n; i++)
        for (int a = 0; a < s->W; a++) {
            int count = 0;
            for (int L = 1; L <= s->W; L++) {
                count += s->slot[(a + L - 1) % s->W] == i;
                double dev = fabs(count - (double)L * s->w[i] / s->W);
                if (dev > s->max_dev) s->max_dev = dev;
            }
        }
    return 0;
}

void mixture_schedule_free(MixSchedule* s) {
    free(s->slot);
    memset(s, 0, sizeof *s);
}

// ----------------------------------------------------------------------------------------------

int mixture_init(Mixture* mix, int n, const char (*names)[MIX_NAME_LEN], const double* weights,
                 const char* const* globs, int B, int T, int rank, int nproc, int vocab_size,
                 int shuffle, uint64_t seed) {
    memset(mix, 0, sizeof *mix);
    if (B <= 0 || T <= 0 || nproc <= 0 || rank < 0 || rank >= nproc) {
        fprintf(stderr, "error: mixture: bad arguments B=%d T=%d rank=%d nproc=%d\n", B, T, rank, nproc);
        return -1;
    }
    if (mixture_schedule_init(&mix->sched, weights, n, seed) != 0) return -1;
    mix->n = n;
    mix->B = B;
    mix->T = T;
    mix->rank = rank;
    mix->nproc = nproc;
    double total = 0.0;
    for (int i = 0; i < n; i++) total += weights[i];
    for (int i = 0; i < n; i++) {
        snprintf(mix->name[i], MIX_NAME_LEN, "%s", names[i]);
        mix->weight[i] = weights[i] / total;
        if (dataloader_init(&mix->src[i], globs[i], 1, T, 0, 1, vocab_size) != 0) {
            fprintf(stderr, "error: [data] sources: source '%s' (%s) cannot be read (above)\n", names[i], globs[i]);
            for (int j = 0; j < i; j++) dataloader_free(&mix->src[j]);
            mixture_schedule_free(&mix->sched);
            return -1;
        }
        // each source its own order: the run's seed, apart per source index (source 0 takes the
        // seed itself, so a one-source mixture reads train_glob's order: tests/test_mixture_train.sh)
        if (shuffle) dataloader_shuffle(&mix->src[i], seed + 0x9E3779B97F4A7C15ULL * (uint64_t)i);
    }
    return 0;
}

void mixture_set_bos(Mixture* mix, int bos) {
    for (int i = 0; i < mix->n; i++) dataloader_set_bos(&mix->src[i], bos);
}

int mixture_next(Mixture* mix, int* inputs, int* targets) {
    // global sequences seq .. seq + nproc x B - 1: rank r's are the r-th B of them
    const int64_t per = (int64_t)mix->nproc * mix->B, mine = (int64_t)mix->rank * mix->B;
    for (int64_t q = 0; q < per; q++) {
        const int s = mixture_schedule_source(&mix->sched, mix->seq);
        if (q >= mine && q < mine + mix->B) {
            const int64_t j = q - mine;
            if (dataloader_next(&mix->src[s], inputs + j * mix->T, targets + j * mix->T) != 0) return -1;
        } else {
            if (dataloader_skip(&mix->src[s], 1) != 0) return -1;
        }
        mix->drawn[s]++;
        mix->seq++;
    }
    return 0;
}

void mixture_reset(Mixture* mix) {
    for (int i = 0; i < mix->n; i++) {
        dataloader_reset(&mix->src[i]);
        mix->drawn[i] = 0;
    }
    mix->seq = 0;
}

// ----------------------------------------------------------------------------------------------
// the position as bytes

#define MIX_REC_BYTES (MIX_NAME_LEN + 4 * 8)

static void put(unsigned char** p, const void* x, size_t n) { memcpy(*p, x, n); *p += n; }
static void get(const unsigned char** p, void* x, size_t n) { memcpy(x, *p, n); *p += n; }

int mixture_save(const Mixture* mix, unsigned char** buf, size_t* len) {
    *len = 16 + (size_t)mix->n * MIX_REC_BYTES;
    *buf = calloc(1, *len);
    if (!*buf) { fprintf(stderr, "error: mixture: out of memory\n"); return -1; }
    unsigned char* p = *buf;
    uint32_t n = (uint32_t)mix->n, zero = 0;
    put(&p, &n, 4);
    put(&p, &zero, 4);
    put(&p, &mix->seq, 8);
    for (int i = 0; i < mix->n; i++) {
        DataLoaderState st;
        dataloader_get_state(&mix->src[i], &st);
        char name[MIX_NAME_LEN] = {0};
        memcpy(name, mix->name[i], strnlen(mix->name[i], MIX_NAME_LEN - 1));
        put(&p, name, MIX_NAME_LEN);
        put(&p, &mix->drawn[i], 8);
        put(&p, &st.epoch, 8);
        put(&p, &st.shard_idx, 8);
        put(&p, &st.batch_idx, 8);
    }
    return 0;
}

int mixture_restore(Mixture* mix, const unsigned char* buf, size_t len, const char* what) {
    const unsigned char* p = buf;
    uint32_t n, zero;
    if (len < 16) {
        fprintf(stderr, "error: %s: %zu bytes, too short for a mixture position (damaged?)\n", what, len);
        return -1;
    }
    get(&p, &n, 4);
    get(&p, &zero, 4);
    if (n > MIX_MAX_SOURCES || len != 16 + (size_t)n * MIX_REC_BYTES) {
        fprintf(stderr, "error: %s: %zu bytes for %u sources, expected %zu (damaged?)\n", what, len, n,
                16 + (size_t)(n > MIX_MAX_SOURCES ? 0 : n) * MIX_REC_BYTES);
        return -1;
    }
    uint64_t seq;
    get(&p, &seq, 8);
    int seen[MIX_MAX_SOURCES] = {0};
    DataLoaderState st[MIX_MAX_SOURCES];
    uint64_t drawn[MIX_MAX_SOURCES];
    for (uint32_t k = 0; k < n; k++) {
        char name[MIX_NAME_LEN + 1] = {0};
        uint64_t d;
        DataLoaderState s;
        get(&p, name, MIX_NAME_LEN);
        get(&p, &d, 8);
        get(&p, &s.epoch, 8);
        get(&p, &s.shard_idx, 8);
        get(&p, &s.batch_idx, 8);
        int i = 0;
        while (i < mix->n && strcmp(mix->name[i], name) != 0) i++;
        if (i == mix->n) {
            fprintf(stderr, "error: %s: the checkpoint's mixture has source '%s', which [data] sources lacks (resume with "
                    "the checkpoint's sources: its config.ini)\n", what, name);
            return -1;
        }
        seen[i] = 1;
        st[i] = s;
        drawn[i] = d;
    }
    for (int i = 0; i < mix->n; i++)
        if (!seen[i]) {
            fprintf(stderr, "error: %s: [data] sources has source '%s', which the checkpoint's mixture lacks (resume with "
                    "the checkpoint's sources: its config.ini)\n", what, mix->name[i]);
            return -1;
        }
    for (int i = 0; i < mix->n; i++) {
        if (dataloader_set_state(&mix->src[i], &st[i]) != 0) {
            fprintf(stderr, "error: %s: the position of source '%s' does not fit its shards (above)\n", what, mix->name[i]);
            return -1;
        }
        mix->drawn[i] = drawn[i];
    }
    mix->seq = seq;
    return 0;
}

int mixture_describe(const unsigned char* buf, size_t len, FILE* f) {
    uint32_t n;
    uint64_t seq;
    if (len < 16) return -1;
    memcpy(&n, buf, 4);
    if (n > MIX_MAX_SOURCES || len != 16 + (size_t)n * MIX_REC_BYTES) return -1;
    memcpy(&seq, buf + 8, 8);
    fprintf(f, "data: a mixture of %u sources, next global sequence %llu\n", n, (unsigned long long)seq);
    for (uint32_t k = 0; k < n; k++) {
        const unsigned char* p = buf + 16 + (size_t)k * MIX_REC_BYTES;
        char name[MIX_NAME_LEN + 1] = {0};
        uint64_t d;
        int64_t pos[3];
        memcpy(name, p, MIX_NAME_LEN);
        memcpy(&d, p + MIX_NAME_LEN, 8);
        memcpy(pos, p + MIX_NAME_LEN + 8, 24);
        fprintf(f, "  source %-12s %12llu sequences drawn | epoch %lld, shard %lld, sequence %lld (next)\n", name,
                (unsigned long long)d, (long long)pos[0], (long long)pos[1], (long long)pos[2]);
    }
    return 0;
}

void mixture_free(Mixture* mix) {
    for (int i = 0; i < mix->n; i++) dataloader_free(&mix->src[i]);
    mixture_schedule_free(&mix->sched);
    memset(mix, 0, sizeof *mix);
}
