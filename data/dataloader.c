// data/dataloader.c: see dataloader.h for the batch layout across processes.
#define _POSIX_C_SOURCE 200809L
#include "dataloader.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/rng.h"

static void dataloader_release(DataLoader* loader) {
    shard_close(&loader->shard);
    if (loader->shard_paths) {
        for (int i = 0; i < loader->num_shards; i++) free(loader->shard_paths[i]);
    }
    free(loader->shard_paths);
    free(loader->shard_batches);
    free(loader->shard_order);
    free(loader->sample_perm);
    memset(loader, 0, sizeof(*loader));
    loader->loaded_idx = -1;
}

// Fisher-Yates permutation of 0..n-1 from an RNG seeded with (seed, a, b).
static void permute(int64_t* out, int64_t n, uint64_t seed, uint64_t a, uint64_t b) {
    Rng r;
    rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ULL * (a + 1)) ^ (0xD1B54A32D192ED03ULL * (b + 1)));
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&r) % (uint64_t)(i + 1));
        int64_t t = out[i]; out[i] = out[j]; out[j] = t;
    }
}

// The shard file index of position shard_idx in the current epoch's visiting order.
static int current_shard(DataLoader* loader) {
    if (!loader->shuffle) return loader->shard_idx;
    if (loader->order_epoch != loader->epoch) {
        int64_t* tmp = malloc((size_t)loader->num_shards * sizeof(int64_t));
        if (!tmp) { fprintf(stderr, "error: dataloader: out of memory\n"); exit(1); }
        permute(tmp, loader->num_shards, loader->seed, (uint64_t)loader->epoch, UINT64_MAX - 1);
        for (int i = 0; i < loader->num_shards; i++) loader->shard_order[i] = (int)tmp[i];
        free(tmp);
        loader->order_epoch = loader->epoch;
    }
    return loader->shard_order[loader->shard_idx];
}

// Maps shard idx (and checks its tokens against vocab_size) unless it is already mapped.
static int dataloader_load(DataLoader* loader, int idx) {
    if (loader->loaded_idx == idx) return 0;
    shard_close(&loader->shard);
    loader->loaded_idx = -1;
    if (shard_open(&loader->shard, loader->shard_paths[idx], loader->vocab_size) != 0) return -1;
    // the header was validated at init; a file replaced since then must still hold its batches
    int64_t G = (int64_t)loader->nproc * loader->B * loader->T;
    if ((loader->shard.header.num_tokens - 1) / G / loader->accum * loader->accum != loader->shard_batches[idx]) {
        fprintf(stderr, "error: dataloader: shard '%s' changed size since the loader started (%lld tokens now)\n",
                loader->shard_paths[idx], (long long)loader->shard.header.num_tokens);
        shard_close(&loader->shard);
        return -1;
    }
    loader->loaded_idx = idx;
    return 0;
}

int dataloader_init(DataLoader* loader, const char* glob_pattern, int B, int T,
                    int rank, int nproc, int vocab_size) {
    memset(loader, 0, sizeof(*loader));
    loader->loaded_idx = -1;
    loader->order_epoch = -1;
    loader->perm_epoch = -1;
    loader->bos = -1;
    loader->accum = 1;
    if (B <= 0 || T <= 0 || nproc <= 0 || rank < 0 || rank >= nproc) {
        fprintf(stderr, "error: dataloader: bad arguments B=%d T=%d rank=%d nproc=%d (need B,T,nproc > 0, 0 <= rank < nproc)\n",
                B, T, rank, nproc);
        return -1;
    }
    if ((int64_t)B * T > INT_MAX / 2) {
        fprintf(stderr, "error: dataloader: B*T = %lld is too large\n", (long long)B * T);
        return -1;
    }
    loader->B = B;
    loader->T = T;
    loader->rank = rank;
    loader->nproc = nproc;
    loader->vocab_size = vocab_size;

    glob_t g;
    int rc = glob(glob_pattern, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        if (rc == GLOB_NOMATCH || rc == 0)
            fprintf(stderr, "error: dataloader: no files match '%s' (prepare data first, e.g. scripts/prepare_kjv.sh)\n",
                    glob_pattern);
        else
            fprintf(stderr, "error: dataloader: glob('%s') failed (%s)\n", glob_pattern,
                    rc == GLOB_NOSPACE ? "out of memory" : "read error");
        globfree(&g);
        return -1;
    }
    if (g.gl_pathc > INT_MAX) {
        fprintf(stderr, "error: dataloader: '%s' matches too many files\n", glob_pattern);
        globfree(&g);
        return -1;
    }
    int n = (int)g.gl_pathc;
    loader->shard_paths = calloc((size_t)n, sizeof(char*));
    loader->shard_batches = calloc((size_t)n, sizeof(int64_t));
    if (!loader->shard_paths || !loader->shard_batches) {
        fprintf(stderr, "error: dataloader: out of memory\n");
        globfree(&g);
        dataloader_release(loader);
        return -1;
    }
    loader->num_shards = n;
    for (int i = 0; i < n; i++) {  // glob sorts its matches: shard order is the file name order
        loader->shard_paths[i] = strdup(g.gl_pathv[i]);
        if (!loader->shard_paths[i]) {
            fprintf(stderr, "error: dataloader: out of memory\n");
            globfree(&g);
            dataloader_release(loader);
            return -1;
        }
    }
    globfree(&g);

    // every header now, so a bad shard fails at startup rather than hours into a run
    int64_t G = (int64_t)nproc * B * T;  // tokens per global batch (+1 for the last target)
    for (int i = 0; i < n; i++) {
        ShardHeader h;
        if (shard_read_header(loader->shard_paths[i], &h) != 0) {
            dataloader_release(loader);
            return -1;
        }
        if (h.num_tokens < G + 1) {
            fprintf(stderr, "error: dataloader: shard '%s' has %lld tokens, fewer than one global batch "
                            "nproc*B*T+1 = %d*%d*%d+1 = %lld; use a smaller B or T\n",
                    loader->shard_paths[i], (long long)h.num_tokens, nproc, B, T, (long long)(G + 1));
            dataloader_release(loader);
            return -1;
        }
        loader->shard_batches[i] = (h.num_tokens - 1) / G;
        loader->batches_per_epoch += loader->shard_batches[i];
    }
    if (dataloader_load(loader, 0) != 0) {
        dataloader_release(loader);
        return -1;
    }
    return 0;
}

// Past one batch of shard (the current one): next global batch, next shard, or wrap to the
// first shard. The batch count is that of this shard (shuffled, shard_idx is a position in the
// visiting order).
static void advance(DataLoader* loader, int shard) {
    loader->batch_idx++;
    if (loader->batch_idx == loader->shard_batches[shard]) {
        loader->batch_idx = 0;
        loader->shard_idx++;
        loader->perm_epoch = -1;   // the next shard draws its own sample order
        if (loader->shard_idx == loader->num_shards) {
            loader->shard_idx = 0;
            loader->epoch++;
        }
    }
}

int dataloader_next(DataLoader* loader, int* inputs, int* targets) {
    int shard = current_shard(loader);
    if (dataloader_load(loader, shard) != 0) return -1;
    const int64_t B = loader->B, T = loader->T, BT = B * T;
    if (!loader->shuffle) {
        // contiguous: inputs = window[0..BT), targets = window[1..BT]
        int64_t start = loader->batch_idx * BT * loader->nproc + (int64_t)loader->rank * BT;
        shard_get(&loader->shard, start, BT, inputs);
        shard_get(&loader->shard, start + 1, BT, targets);
    } else {
        if (loader->perm_epoch != loader->epoch) {   // this shard's sample order for this epoch
            int64_t ns = (loader->shard.header.num_tokens - 1) / T;
            if (ns != loader->perm_samples) {
                free(loader->sample_perm);
                loader->sample_perm = malloc((size_t)ns * sizeof(int64_t));
                if (!loader->sample_perm) { fprintf(stderr, "error: dataloader: out of memory\n"); return -1; }
                loader->perm_samples = ns;
            }
            permute(loader->sample_perm, ns, loader->seed, (uint64_t)loader->epoch, (uint64_t)shard);
            loader->perm_epoch = loader->epoch;
        }
        // rank r's B samples of global batch k: perm[k*nproc*B + r*B + j], j < B
        int64_t first = loader->batch_idx * B * loader->nproc + (int64_t)loader->rank * B;
        for (int64_t j = 0; j < B; j++) {
            int64_t start = loader->sample_perm[first + j] * T;
            shard_get(&loader->shard, start, T, inputs + j * T);
            shard_get(&loader->shard, start + 1, T, targets + j * T);
        }
    }

    if (loader->bos >= 0) {   // shift each sample right by one behind the bos token
        for (int64_t j = 0; j < B; j++) {
            int* x = inputs + j * T;
            int* y = targets + j * T;
            for (int64_t i = 0; i < T; i++) y[i] = x[i];
            for (int64_t i = T - 1; i > 0; i--) x[i] = x[i - 1];
            x[0] = loader->bos;
        }
    }

    advance(loader, shard);
    return 0;
}

int dataloader_skip(DataLoader* loader, int64_t n) {
    if (n < 0) {
        fprintf(stderr, "error: dataloader: cannot skip %lld batches\n", (long long)n);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) advance(loader, current_shard(loader));
    return 0;
}

int dataloader_set_accum(DataLoader* loader, int accum) {
    if (accum < 1) {
        fprintf(stderr, "error: dataloader: bad accum %d (need >= 1)\n", accum);
        return -1;
    }
    const int64_t G = (int64_t)loader->nproc * loader->B * loader->T, step = G * accum;
    loader->accum = accum;
    loader->batches_per_epoch = 0;
    for (int i = 0; i < loader->num_shards; i++) {
        ShardHeader h;
        if (shard_read_header(loader->shard_paths[i], &h) != 0) return -1;
        if (h.num_tokens < step + 1) {
            fprintf(stderr, "error: dataloader: shard '%s' has %lld tokens, fewer than one optimizer step: [train] tokens_per_step + 1 "
                            "= %lld; lower tokens_per_step or use larger shards\n",
                    loader->shard_paths[i], (long long)h.num_tokens, (long long)(step + 1));
            return -1;
        }
        loader->shard_batches[i] = (h.num_tokens - 1) / step * accum;   // = floor((n-1)/G) rounded down to whole steps
        loader->batches_per_epoch += loader->shard_batches[i];
    }
    dataloader_reset(loader);
    return 0;
}

void dataloader_shuffle(DataLoader* loader, uint64_t seed) {
    loader->shuffle = 1;
    loader->seed = seed;
    if (!loader->shard_order) loader->shard_order = calloc((size_t)loader->num_shards, sizeof(int));
    if (!loader->shard_order) { fprintf(stderr, "error: dataloader: out of memory\n"); exit(1); }
    dataloader_reset(loader);
}

void dataloader_set_bos(DataLoader* loader, int bos) { loader->bos = bos < 0 ? -1 : bos; }

void dataloader_get_state(const DataLoader* loader, DataLoaderState* state) {
    state->epoch = loader->epoch;
    state->shard_idx = loader->shard_idx;
    state->batch_idx = loader->batch_idx;
}

int dataloader_set_state(DataLoader* loader, const DataLoaderState* st) {
    if (st->epoch < 0 || st->shard_idx < 0 || st->shard_idx >= loader->num_shards) {
        fprintf(stderr, "error: dataloader: saved position (epoch %lld, shard %lld) does not fit the %d shard(s) of this data set\n",
                (long long)st->epoch, (long long)st->shard_idx, loader->num_shards);
        return -1;
    }
    loader->epoch = st->epoch;
    loader->shard_idx = (int)st->shard_idx;
    loader->order_epoch = -1;
    loader->perm_epoch = -1;
    int shard = current_shard(loader);
    if (st->batch_idx < 0 || st->batch_idx >= loader->shard_batches[shard]) {
        fprintf(stderr, "error: dataloader: saved batch %lld is past the %lld batches of shard '%s' (different data or batch shape?)\n",
                (long long)st->batch_idx, (long long)loader->shard_batches[shard], loader->shard_paths[shard]);
        return -1;
    }
    loader->batch_idx = st->batch_idx;
    return 0;
}

void dataloader_reset(DataLoader* loader) {
    // the mapped shard stays; the next call maps the first shard if another one is loaded
    loader->epoch = 0;
    loader->shard_idx = 0;
    loader->batch_idx = 0;
    loader->order_epoch = -1;
    loader->perm_epoch = -1;
}

void dataloader_free(DataLoader* loader) {
    dataloader_release(loader);
}
