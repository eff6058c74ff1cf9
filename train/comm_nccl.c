// train/comm_nccl.c: NCCL collectives on device buffers (train/comm_nccl.h).
#include "comm_nccl.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)

static void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "error: %s:%d: %s: %s (%s)\n  hint: check that the GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and the driver supports CUDA %d.%d\n",
            file, line, what, cudaGetErrorString(e), cudaGetErrorName(e), CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    exit(1);
}

static void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r == ncclSuccess) return;
    fprintf(stderr, "error: %s:%d: %s: %s\n  hint: rerun with NCCL_DEBUG=INFO; on several nodes set NCCL_SOCKET_IFNAME / NCCL_IB_HCA (docs/distributed.md)\n",
            file, line, what, ncclGetErrorString(r));
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The communicator's side stream for the collectives and the event the compute stream records
// before them (nccl_init and the expert-parallel group's communicator alike).
static void nccl_attach(NcclComm* n, ncclComm_t comm, int nranks) {
    n->nccl = comm;
    n->nranks = nranks;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    n->stream = s;
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    n->compute_done = ev;
}

int nccl_init(NcclComm* n, Comm* c, int use_current_device) {
    memset(n, 0, sizeof(*n));
    n->comm = c;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        cudaGetLastError();   // clear the sticky "no device" error
        fprintf(stderr, "nccl: no CUDA device on rank %d\n", c->rank);
        return -1;
    }
    if (use_current_device) {
        // the CUDA backend chose the GPU at ops_init (and allocated on it): keep it
        CUDA_CHECK(cudaGetDevice(&n->device));
        if (n->device != c->local_rank % ndev)
            fprintf(stderr, "warning: rank %d: GPU %d in use, but local rank %d of %d GPUs would pick GPU %d: check that "
                    "the launcher sets OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or LOCAL_RANK\n", c->rank, n->device,
                    c->local_rank, ndev, c->local_rank % ndev);
    } else {
        n->device = c->local_rank % ndev;
        CUDA_CHECK(cudaSetDevice(n->device));
    }
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_broadcast(c, &id, sizeof id);
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, c->size, id, c->rank));
    nccl_attach(n, comm, c->size);
    return 0;
}

void nccl_free(NcclComm* n) {
    if (n->nccl) ncclCommDestroy((ncclComm_t)n->nccl);
    if (n->stream) cudaStreamDestroy((cudaStream_t)n->stream);
    if (n->compute_done) cudaEventDestroy((cudaEvent_t)n->compute_done);
    memset(n, 0, sizeof(*n));
}

int nccl_abort(NcclComm* n) {
    if (!n->nccl) return 0;
    return ncclCommAbort((ncclComm_t)n->nccl) == ncclSuccess ? 0 : -1;
}

// the collectives' stream waits for the work queued on the compute stream (the legacy default
// stream 0) so far: the gradients they read are complete
static void wait_for_compute(NcclComm* n) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)n->compute_done, 0));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)n->stream, (cudaEvent_t)n->compute_done, 0));
}

void nccl_allreduce_sum_f32(NcclComm* n, float* x, size_t count) {
    wait_for_compute(n);
    NCCL_CHECK(ncclAllReduce(x, x, count, ncclFloat, ncclSum, (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
}

void nccl_reduce_scatter_sum_f32(NcclComm* n, float* x, const size_t* off, const size_t* cnt) {
    wait_for_compute(n);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n->nranks; r++)
        if (cnt[r] > 0)   // every rank skips the same empty pieces (sub-ranges of the arena)
            NCCL_CHECK(ncclReduce(x + off[r], x + off[r], cnt[r], ncclFloat, ncclSum, r,
                              (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
    NCCL_CHECK(ncclGroupEnd());
}

void nccl_allgather_f32(NcclComm* n, float* x, const size_t* off, const size_t* cnt) {
    wait_for_compute(n);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n->nranks; r++)
        if (cnt[r] > 0)
            NCCL_CHECK(ncclBroadcast(x + off[r], x + off[r], cnt[r], ncclFloat, r,
                                 (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
    NCCL_CHECK(ncclGroupEnd());
}

void nccl_allgather_bf16(NcclComm* n, void* x, const size_t* off, const size_t* cnt) {
    wait_for_compute(n);
    uint16_t* b = (uint16_t*)x;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n->nranks; r++)
        if (cnt[r] > 0)
            NCCL_CHECK(ncclBroadcast(b + off[r], b + off[r], cnt[r], ncclBfloat16, r,
                                 (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
    NCCL_CHECK(ncclGroupEnd());
}

void nccl_sync(NcclComm* n) {
    double t = now_s();
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)n->stream));
    n->seconds += now_s() - t;
}

int nccl_ep_init(NcclComm* n, Comm* c) {
    memset(n, 0, sizeof(*n));
    n->comm = c;
    CUDA_CHECK(cudaGetDevice(&n->device));   // the CUDA backend's GPU
    ncclUniqueId id;
    if (c->ep_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_ep_broadcast(c, &id, sizeof id);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, c->ep_size, id, c->ep_rank);
    if (r != ncclSuccess) {
        fprintf(stderr, "note: rank %d: NCCL refused the expert-parallel group's communicator (%s): the experts' rows go "
                "through the host\n", c->rank, ncclGetErrorString(r));
        return -1;
    }
    nccl_attach(n, comm, c->ep_size);
    return 0;
}

int nccl_rep_init(NcclComm* n, Comm* c) {
    memset(n, 0, sizeof(*n));
    n->comm = c;
    CUDA_CHECK(cudaGetDevice(&n->device));
    ncclUniqueId id;
    if (c->rep_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_rep_broadcast(c, &id, sizeof id);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, c->rep_size, id, c->rep_rank);
    if (r != ncclSuccess) {
        fprintf(stderr, "note: rank %d: NCCL refused the expert replica group's communicator (%s): the experts' gradients "
                "go through the host\n", c->rank, ncclGetErrorString(r));
        return -1;
    }
    nccl_attach(n, comm, c->rep_size);
    return 0;
}
void nccl_ep_alltoallv(NcclComm* n, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                       size_t row_bytes) {
    const int P = n->comm->ep_size;
    wait_for_compute(n);
    size_t so = 0, ro = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < P; p++) {
        // the counts were exchanged first: every send has its matching receive of the same size
        if (send_rows[p]) NCCL_CHECK(ncclSend((const char*)send + so, (size_t)send_rows[p] * row_bytes, ncclUint8, p,
                                              (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
        if (recv_rows[p]) NCCL_CHECK(ncclRecv((char*)recv + ro, (size_t)recv_rows[p] * row_bytes, ncclUint8, p,
                                              (ncclComm_t)n->nccl, (cudaStream_t)n->stream));
        if (p != n->comm->ep_rank) n->comm->ep_bytes += (double)send_rows[p] * row_bytes;
        so += (size_t)send_rows[p] * row_bytes;
        ro += (size_t)recv_rows[p] * row_bytes;
    }
    NCCL_CHECK(ncclGroupEnd());
    nccl_sync(n);
}
