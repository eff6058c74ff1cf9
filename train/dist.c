// train/dist.c: data parallelism (train/dist.h). The arenas are host memory on the CPU
// backend, which is what the MPI collectives take; the CUDA backend's are device memory, which
// NCCL takes (GATEDGPT_NCCL, set for the CUDA library by CMakeLists.txt).
#include "dist.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../kernels/ops.h"
#ifdef GATEDGPT_NCCL
#include "comm_nccl.h"
#endif

void dist_shard(size_t total, int size, int rank, size_t* lo, size_t* hi) {
    // shard length: total / size rounded up to whole norm chunks
    size_t nchunks = (total + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    size_t shard = (nchunks + (size_t)size - 1) / (size_t)size * OPS_SUMSQ_CHUNK;
    size_t a = (size_t)rank * shard, b = a + shard;
    *lo = a < total ? a : total;
    *hi = b < total ? b : total;
}

size_t dist_host_bytes(size_t total, int size) {
    size_t nchunks = (total + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    return 2 * (size_t)size * sizeof(size_t) + (nchunks ? nchunks : 1) * sizeof(double);
}

int dist_init(Dist* d, Comm* c, int zero_stage, size_t total) {
    memset(d, 0, sizeof(*d));
    d->comm = c;
    d->zero_stage = zero_stage;
    d->total = total;
    int n = c->size;
    d->off = calloc((size_t)n, sizeof(size_t));
    d->cnt = calloc((size_t)n, sizeof(size_t));
    d->nchunks = (total + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    d->part = calloc(d->nchunks ? d->nchunks : 1, sizeof(double));
    if (!d->off || !d->cnt || !d->part) { fprintf(stderr, "error: out of host memory (dist_init)\n"); exit(1); }
    for (int r = 0; r < n; r++) {
        size_t a, b;
        dist_shard(total, n, r, &a, &b);
        d->off[r] = a;
        d->cnt[r] = b - a;
    }
    if (zero_stage == 1) { d->lo = d->off[c->rank]; d->hi = d->lo + d->cnt[c->rank]; }
    else { d->lo = 0; d->hi = total; }
    const char* ov = getenv("GATEDGPT_DIST_OVERLAP");
    d->overlap = ov && strcmp(ov, "1") == 0;
#ifdef GATEDGPT_DEVICE_ARENAS
    const char* single = getenv("GATEDGPT_NCCL_SINGLE");
    if (c->size > 1 || (single && strcmp(single, "1") == 0)) {
#ifdef GATEDGPT_NCCL
        NcclComm* n = calloc(1, sizeof(NcclComm));
        if (!n || nccl_init(n, c, 1) != 0) {
            fprintf(stderr, "error: rank %d: NCCL did not start: the CUDA backend's gradients need it with %d processes "
                    "(rerun with NCCL_DEBUG=INFO; docs/distributed.md)\n", c->rank, c->size);
            free(n);
            return -1;
        }
        d->nccl = n;
        d->overlap = 1;   // NCCL runs beside the backward pass: reduce each layer as it finishes
        if (c->ep_size > 1) {   // the experts' all-to-all on the group's own communicator
            NcclComm* e = calloc(1, sizeof(NcclComm));
            if (e && nccl_ep_init(e, c) == 0) d->nccl_ep = e;
            else free(e);
        }
#else
        fprintf(stderr, "error: rank %d: this CUDA build has no NCCL, which data parallelism on GPUs needs: install "
                "NCCL (libnccl-dev) and rebuild, or run one process\n", c->rank);
        return -1;
#endif
    }
#endif
    return 0;
}

void dist_free(Dist* d) {
    free(d->done);
#ifdef GATEDGPT_NCCL
    if (d->nccl) { nccl_free((NcclComm*)d->nccl); free(d->nccl); }
    if (d->nccl_ep) { nccl_free((NcclComm*)d->nccl_ep); free(d->nccl_ep); }
#endif
    free(d->off); free(d->cnt); free(d->part);
    memset(d, 0, sizeof(*d));
}

// The part of every rank's shard inside [lo, hi): per-rank offsets and counts that tile
// [lo, hi) in rank order (ranks whose shard misses it get a count of 0).
static void sub_shards(const Dist* d, size_t lo, size_t hi, size_t* off, size_t* cnt) {
    for (int r = 0; r < d->comm->size; r++) {
        size_t a = d->off[r], b = d->off[r] + d->cnt[r];
        a = a < lo ? lo : a > hi ? hi : a;
        b = b < lo ? lo : b > hi ? hi : b;
        off[r] = a;
        cnt[r] = b - a;
    }
}

// reduce-scatter of grads[lo, hi) over the arena collective (NCCL: enqueued, no host wait)
static void reduce_scatter_range(Dist* d, float* grads, size_t lo, size_t hi) {
    if (hi <= lo) return;
    size_t* off = malloc(2 * (size_t)d->comm->size * sizeof(size_t));
    if (!off) { fprintf(stderr, "error: out of host memory (dist)\n"); exit(1); }
    size_t* cnt = off + d->comm->size;
    sub_shards(d, lo, hi, off, cnt);
#ifdef GATEDGPT_NCCL
    if (d->nccl) nccl_reduce_scatter_sum_f32((NcclComm*)d->nccl, grads, off, cnt);
    else
#endif
        comm_reduce_scatter_sum_f32(d->comm, grads, off, cnt);
    free(off);
}

void dist_reduce_range(Dist* d, float* grads, size_t lo, size_t hi) {
    if (!d->overlap || d->comm->size == 1 || hi <= lo) return;
    if (d->ndone == d->done_cap) {
        d->done_cap = d->done_cap ? 2 * d->done_cap : 64;
        d->done = realloc(d->done, (size_t)d->done_cap * sizeof(*d->done));
        if (!d->done) { fprintf(stderr, "error: out of host memory (dist)\n"); exit(1); }
    }
    d->done[d->ndone][0] = lo;
    d->done[d->ndone][1] = hi;
    d->ndone++;
    reduce_scatter_range(d, grads, lo, hi);
}

static int cmp_range(const void* a, const void* b) {
    size_t x = ((const size_t*)a)[0], y = ((const size_t*)b)[0];
    return x < y ? -1 : x > y;
}

void dist_reduce_grads(Dist* d, float* grads) {
    if (d->overlap && d->comm->size > 1) {
        // what the backward did not hand over (embeddings, final norm, LM head, any layer that
        // was not one block): the gaps between the reduced ranges, in arena order
        qsort(d->done, (size_t)d->ndone, sizeof(*d->done), cmp_range);
        size_t at = 0;
        for (int i = 0; i < d->ndone; i++) {
            reduce_scatter_range(d, grads, at, d->done[i][0]);
            if (d->done[i][1] > at) at = d->done[i][1];
        }
        reduce_scatter_range(d, grads, at, d->total);
        d->ndone = 0;
#ifdef GATEDGPT_NCCL
        if (d->nccl) {
            NcclComm* n = (NcclComm*)d->nccl;
            double t = n->seconds;
            if (d->zero_stage == 0) nccl_allgather_f32(n, grads, d->off, d->cnt);
            nccl_sync(n);   // the time the step waits for communication (what overlap did not hide)
            d->comm->seconds += n->seconds - t;
            return;
        }
#endif
        if (d->zero_stage == 0) comm_allgather_f32(d->comm, grads, d->off, d->cnt);
        return;
    }
    // zero_stage 0 is the all-reduce taken as reduce-scatter + all-gather (what a ring
    // all-reduce does anyway): MPI's all-reduce may add the ranks' values in another order than
    // its reduce-scatter (it does with 3 ranks), and this way both stages sum every element
    // identically, so ZeRO-1 trains bit for bit like ZeRO-0.
#ifdef GATEDGPT_NCCL
    if (d->nccl) {
        NcclComm* n = (NcclComm*)d->nccl;
        double t = n->seconds;
        nccl_reduce_scatter_sum_f32(n, grads, d->off, d->cnt);
        if (d->zero_stage == 0) nccl_allgather_f32(n, grads, d->off, d->cnt);
        nccl_sync(n);
        d->comm->seconds += n->seconds - t;   // the step log's comm_ms
        return;
    }
#endif
    comm_reduce_scatter_sum_f32(d->comm, grads, d->off, d->cnt);
    if (d->zero_stage == 0) comm_allgather_f32(d->comm, grads, d->off, d->cnt);
}

float dist_grad_norm(Dist* d, const float* grads) {
    if (d->zero_stage == 1 && d->comm->size > 1) {
        // each process fills its own chunks, zeros elsewhere; the sum over processes then holds
        // every chunk exactly once (x + 0 is exact)
        memset(d->part, 0, d->nchunks * sizeof(double));
        ops_sumsq_chunks(d->part + d->lo / OPS_SUMSQ_CHUNK, grads + d->lo, d->hi - d->lo);
        comm_allreduce_sum_f64(d->comm, d->part, d->nchunks);
    } else {
        ops_sumsq_chunks(d->part, grads, d->total);
    }
    double s = 0.0;
    for (size_t i = 0; i < d->nchunks; i++) s += d->part[i];
    return (float)sqrt(s);
}

void dist_gather_params(Dist* d, float* params) {
    if (d->zero_stage != 1) return;
#ifdef GATEDGPT_NCCL
    if (d->nccl) {
        NcclComm* n = (NcclComm*)d->nccl;
        double t = n->seconds;
        nccl_allgather_f32(n, params, d->off, d->cnt);
        nccl_sync(n);
        d->comm->seconds += n->seconds - t;
        return;
    }
#endif
    comm_allgather_f32(d->comm, params, d->off, d->cnt);
}

int dist_ep_alltoallv(Dist* d, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                      size_t row_bytes) {
#ifdef GATEDGPT_NCCL
    if (d->nccl_ep) {
        NcclComm* n = (NcclComm*)d->nccl_ep;
        double t = n->seconds;
        nccl_ep_alltoallv(n, send, send_rows, recv, recv_rows, row_bytes);
        d->comm->seconds += n->seconds - t;
        d->comm->ep_seconds += n->seconds - t;
        return 0;
    }
#else
    (void)d; (void)send; (void)send_rows; (void)recv; (void)recv_rows; (void)row_bytes;
#endif
    return -1;
}
