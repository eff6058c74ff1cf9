// train/dist.c: data parallelism (train/dist.h). The arenas are host memory on the CPU
// backend, which is what the MPI collectives take; the CUDA backend's are device memory, which
// NCCL takes (GATEDGPT_NCCL, set for the CUDA library by CMakeLists.txt).
#include "dist.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../kernels/ops.h"
#include "../model/gpt.h"
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

int dist_init(Dist* d, Comm* c, int zero_stage, size_t total) { return dist_init_ep(d, c, zero_stage, total, total); }

int dist_init_ep(Dist* d, Comm* c, int zero_stage, size_t total, size_t dense) {
    memset(d, 0, sizeof(*d));
    d->comm = c;
    d->zero_stage = zero_stage;
    d->total = total;
    if (c->ep_size <= 1 || dense > total) dense = total;
    d->dense = dense;
    int n = c->size, nr = c->ep_size > 1 ? c->rep_size : 1;
    d->off = calloc((size_t)n, sizeof(size_t));
    d->cnt = calloc((size_t)n, sizeof(size_t));
    d->xoff = calloc((size_t)nr, sizeof(size_t));
    d->xcnt = calloc((size_t)nr, sizeof(size_t));
    d->nchunks = (dense + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    d->part = calloc(d->nchunks ? d->nchunks : 1, sizeof(double));
    d->nxchunks = (total - dense + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    d->xpart = calloc(d->nxchunks ? d->nxchunks * (size_t)c->ep_size : 1, sizeof(double));
    if (!d->off || !d->cnt || !d->xoff || !d->xcnt || !d->part || !d->xpart) {
        fprintf(stderr, "error: out of host memory (dist_init)\n");
        exit(1);
    }
    for (int r = 0; r < n; r++) {
        size_t a, b;
        dist_shard(dense, n, r, &a, &b);
        d->off[r] = a;
        d->cnt[r] = b - a;
    }
    for (int r = 0; r < nr; r++) {   // the expert region's replica shards (dense is whole norm chunks)
        size_t a, b;
        dist_shard(total - dense, nr, r, &a, &b);
        d->xoff[r] = dense + a;
        d->xcnt[r] = b - a;
    }
    if (zero_stage == 1) {
        d->lo = d->off[c->rank]; d->hi = d->lo + d->cnt[c->rank];
        int q = nr > 1 ? c->rep_rank : 0;
        d->xlo = d->xoff[q]; d->xhi = d->xlo + d->xcnt[q];
    } else {
        d->lo = 0; d->hi = dense;
        d->xlo = dense; d->xhi = total;
    }
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
        if (c->ep_size > 1 && c->rep_size > 1 && d->total > d->dense) {   // the experts' gradients over their replicas
            NcclComm* e = calloc(1, sizeof(NcclComm));
            if (e && nccl_rep_init(e, c) == 0) d->nccl_rep = e;   // else staged through the host
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

int dist_abort_nccl(Dist* d) {
    int n = 0;
#ifdef GATEDGPT_NCCL
    NcclComm* cs[3] = {(NcclComm*)d->nccl, (NcclComm*)d->nccl_ep, (NcclComm*)d->nccl_rep};
    for (int i = 0; i < 3; i++)
        if (cs[i] && cs[i]->nccl) { nccl_abort(cs[i]); n++; }
#else
    (void)d;
#endif
    return n;
}

void dist_free(Dist* d) {
    free(d->done);
#ifdef GATEDGPT_NCCL
    if (d->nccl) { nccl_free((NcclComm*)d->nccl); free(d->nccl); }
    if (d->nccl_ep) { nccl_free((NcclComm*)d->nccl_ep); free(d->nccl_ep); }
    if (d->nccl_rep) { nccl_free((NcclComm*)d->nccl_rep); free(d->nccl_rep); }
#endif
    free(d->off); free(d->cnt); free(d->xoff); free(d->xcnt); free(d->part); free(d->xpart);
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

#ifdef GATEDGPT_DEVICE_ARENAS
// The expert region of a device arena through host memory over the replica group's MPI
// communicator: reduce (reduce-scatter, and all-gather for zero_stage 0) or, reduce = 0, the
// ZeRO-1 all-gather of the parameters.
static void rep_staged(Dist* d, float* x, int reduce) {
    const size_t n = d->total - d->dense;
    float* h = malloc((n ? n : 1) * sizeof(float));
    if (!h) { fprintf(stderr, "error: out of host memory (expert replica reduction)\n"); exit(1); }
    size_t* off = malloc(2 * (size_t)d->comm->rep_size * sizeof(size_t));
    if (!off) { fprintf(stderr, "error: out of host memory (expert replica reduction)\n"); exit(1); }
    size_t* cnt = off + d->comm->rep_size;
    for (int r = 0; r < d->comm->rep_size; r++) { off[r] = d->xoff[r] - d->dense; cnt[r] = d->xcnt[r]; }
    ops_to_host(h, x + d->dense, n * sizeof(float));
    if (reduce) comm_rep_reduce_scatter_sum_f32(d->comm, h, off, cnt);
    if (!reduce || d->zero_stage == 0) comm_rep_allgather_f32(d->comm, h, off, cnt);
    ops_from_host(x + d->dense, h, n * sizeof(float));
    free(off); free(h);
}
#endif

// The expert region over the replica group (expert parallelism; nothing otherwise): reduce-
// scatter, and for zero_stage 0 all-gather. NCCL: enqueued on the replica communicator.
static void reduce_experts(Dist* d, float* grads) {
    if (d->total <= d->dense || d->comm->ep_size <= 1 || d->comm->rep_size <= 1) return;
#ifdef GATEDGPT_NCCL
    if (d->nccl_rep) {
        NcclComm* n = (NcclComm*)d->nccl_rep;
        double t = n->seconds;
        nccl_reduce_scatter_sum_f32(n, grads, d->xoff, d->xcnt);
        if (d->zero_stage == 0) nccl_allgather_f32(n, grads, d->xoff, d->xcnt);
        nccl_sync(n);
        d->comm->seconds += n->seconds - t;
        return;
    }
#endif
#ifdef GATEDGPT_DEVICE_ARENAS
    // device arenas without a replica communicator (NCCL refused it: the emulator's span every
    // process): the expert region staged through the host for MPI
    rep_staged(d, grads, 1);
#else
    comm_rep_reduce_scatter_sum_f32(d->comm, grads, d->xoff, d->xcnt);
    if (d->zero_stage == 0) comm_rep_allgather_f32(d->comm, grads, d->xoff, d->xcnt);
#endif
}

void dist_reduce_grads(Dist* d, float* grads) {
    reduce_experts(d, grads);
    if (d->overlap && d->comm->size > 1) {
        // what the backward did not hand over (embeddings, final norm, LM head, any layer that
        // was not one block): the gaps between the reduced ranges of the dense region, in order
        qsort(d->done, (size_t)d->ndone, sizeof(*d->done), cmp_range);
        size_t at = 0;
        for (int i = 0; i < d->ndone; i++) {
            reduce_scatter_range(d, grads, at, d->done[i][0]);
            if (d->done[i][1] > at) at = d->done[i][1];
        }
        reduce_scatter_range(d, grads, at, d->dense);
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
        ops_sumsq_chunks(d->part, grads, d->dense);
    }
    double s = 0.0;
    for (size_t i = 0; i < d->nchunks; i++) s += d->part[i];
    if (d->nxchunks > 0) {
        // the expert shards: member q's chunk sums at [q * nxchunks, ...), filled by the replica
        // that owns each chunk (ZeRO-1) or by replica 0 (zero_stage 0: every replica has them
        // all), zeros elsewhere; summed over all processes, every expert's chunk appears once
        const size_t nx = d->nxchunks;
        memset(d->xpart, 0, (size_t)d->comm->ep_size * nx * sizeof(double));
        if (d->zero_stage == 1 || d->comm->rep_rank == 0)
            ops_sumsq_chunks(d->xpart + (size_t)d->comm->ep_rank * nx + (d->xlo - d->dense) / OPS_SUMSQ_CHUNK,
                             grads + d->xlo, d->xhi - d->xlo);
        comm_allreduce_sum_f64(d->comm, d->xpart, (size_t)d->comm->ep_size * nx);
        for (size_t i = 0; i < (size_t)d->comm->ep_size * nx; i++) s += d->xpart[i];
    }
    return (float)sqrt(s);
}

void dist_gather_params(Dist* d, float* params) {
    if (d->zero_stage != 1) return;
    if (d->total > d->dense && d->comm->ep_size > 1 && d->comm->rep_size > 1) {   // the experts, over their replicas
#ifdef GATEDGPT_NCCL
        if (d->nccl_rep) {
            NcclComm* n = (NcclComm*)d->nccl_rep;
            double t = n->seconds;
            nccl_allgather_f32(n, params, d->xoff, d->xcnt);
            nccl_sync(n);
            d->comm->seconds += n->seconds - t;
        } else
#endif
        {
#ifdef GATEDGPT_DEVICE_ARENAS
            rep_staged(d, params, 0);
#else
            comm_rep_allgather_f32(d->comm, params, d->xoff, d->xcnt);
#endif
        }
    }
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

int dist_master_shard(const Comm* c, int zero_stage, size_t total, size_t* lo, size_t* hi) {
    *lo = 0;
    *hi = (size_t)-1;   // gpt_build_shard's whole master
    if (OPS_ACT_IS_FLOAT || zero_stage != 1 || c->size <= 1 || c->ep_size > 1) return 0;
    dist_shard(total, c->size, c->rank, lo, hi);
    return 1;
}

void dist_master_init(Dist* d, const GPT* m) {
    d->master_sharded = gpt_master_sharded(m);
    d->nf32 = m->nf32;
    if (d->master_sharded && (d->zero_stage != 1 || d->lo != m->master_lo || d->hi != m->master_hi)) {
        fprintf(stderr, "error: rank %d: the model holds the master floats [%zu, %zu), but ZeRO-%d updates [%zu, %zu) here "
                "(dist_master_shard and dist_init disagree)\n", d->comm->rank, m->master_lo, m->master_hi, d->zero_stage, d->lo, d->hi);
        exit(1);
    }
}

void dist_gather_range(Dist* d, float* x, size_t lo, size_t hi) {
    if (hi <= lo || d->comm->size == 1) return;
    size_t* off = malloc(2 * (size_t)d->comm->size * sizeof(size_t));
    if (!off) { fprintf(stderr, "error: out of host memory (dist)\n"); exit(1); }
    size_t* cnt = off + d->comm->size;
    sub_shards(d, lo, hi, off, cnt);
    for (int r = 0; r < d->comm->size; r++) off[r] -= lo;   // in x
#ifdef GATEDGPT_NCCL
    if (d->nccl) nccl_allgather_f32((NcclComm*)d->nccl, x, off, cnt);
    else
#endif
        comm_allgather_f32(d->comm, x, off, cnt);
    free(off);
}

void dist_gather_act(Dist* d, void* act) {
    if (d->comm->size == 1) return;
#ifdef GATEDGPT_NCCL
    if (d->nccl) { nccl_allgather_bf16((NcclComm*)d->nccl, act, d->off, d->cnt); return; }
#endif
    comm_allgather_bf16(d->comm, act, d->off, d->cnt);
}

void dist_gather_weights(Dist* d, GPT* m) {
    if (!d->master_sharded) { dist_gather_params(d, m->params); return; }
    // this process's shard of the compute copy, rounded by global index, then everyone's
    gpt_round_master_shard(m, d->lo, d->hi);
    dist_gather_act(d, m->params_act);
    // the fp32 tensors the forward reads: this shard's part of each into their whole copy, then
    // the others' parts (the master's other floats are held by their shard's process only)
    gpt_f32_from_shard(m);
    for (int k = 0; k < m->nf32; k++) dist_gather_range(d, m->params_f32 + m->f32_at[k], m->f32[k][0], m->f32[k][1]);
#ifdef GATEDGPT_NCCL
    if (d->nccl) {
        NcclComm* n = (NcclComm*)d->nccl;
        double t = n->seconds;
        nccl_sync(n);
        d->comm->seconds += n->seconds - t;
    }
#endif
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
