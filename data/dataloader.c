// data/dataloader.c: see dataloader.h for the batch layout across processes.
#define _POSIX_C_SOURCE 200809L
#include "dataloader.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dataloader_release(DataLoader* loader) {
    shard_close(&loader->shard);
    if (loader->shard_paths) {
        for (int i = 0; i < loader->num_shards; i++) free(loader->shard_paths[i]);
    }
    free(loader->shard_paths);
    free(loader->shard_batches);
    memset(loader, 0, sizeof(*loader));
    loader->loaded_idx = -1;
}

// Maps shard idx (and checks its tokens against vocab_size) unless it is already mapped.
static int dataloader_load(DataLoader* loader, int idx) {
    if (loader->loaded_idx == idx) return 0;
    shard_close(&loader->shard);
    loader->loaded_idx = -1;
    if (shard_open(&loader->shard, loader->shard_paths[idx], loader->vocab_size) != 0) return -1;
    // the header was validated at init; a file replaced since then must still hold its batches
    int64_t G = (int64_t)loader->nproc * loader->B * loader->T;
    if ((loader->shard.header.num_tokens - 1) / G != loader->shard_batches[idx]) {
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
            fprintf(stderr, "error: dataloader: no files match '%s' (prepare data first, e.g. scripts/prepare_tinytext.sh)\n",
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

int dataloader_next(DataLoader* loader, int* inputs, int* targets) {
    if (dataloader_load(loader, loader->shard_idx) != 0) return -1;
    int64_t BT = (int64_t)loader->B * loader->T;
    int64_t G = BT * loader->nproc;
    int64_t start = loader->batch_idx * G + (int64_t)loader->rank * BT;
    // inputs = window[0..BT), targets = window[1..BT]: read BT tokens, then BT shifted by one
    shard_get(&loader->shard, start, BT, inputs);
    shard_get(&loader->shard, start + 1, BT, targets);

    // advance: next global batch, next shard, or wrap to the first shard
    loader->batch_idx++;
    if (loader->batch_idx == loader->shard_batches[loader->shard_idx]) {
        loader->batch_idx = 0;
        loader->shard_idx++;
        if (loader->shard_idx == loader->num_shards) {
            loader->shard_idx = 0;
            loader->epoch++;
        }
    }
    return 0;
}

void dataloader_reset(DataLoader* loader) {
    // the mapped shard stays; the next call maps shard 0 if another one is loaded
    loader->epoch = 0;
    loader->shard_idx = 0;
    loader->batch_idx = 0;
}

void dataloader_free(DataLoader* loader) {
    dataloader_release(loader);
}
