// tests/cudaemu/cudaemu_nccl.cpp: NCCL for the CUDA emulator (tests/cudaemu/cudaemu.h). Device
// memory is host memory here, so the collectives train/comm_nccl.c calls (all-reduce, reduce to a
// root, broadcast, in groups) are MPI collectives on the same buffers, in the order they are
// issued (every rank issues the same sequence, as NCCL requires too). Without MPI only one rank
// exists and every collective is a copy. The sums' order is MPI's, not NCCL's.
#include "cudaemu.h"
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef GATEDGPT_MPI
#define OMPI_SKIP_MPICXX 1   // the C API only (no C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

struct EmuNccl {
    int nranks, rank;
};
static int group_depth;

// bytes of one element: ncclFloat everywhere; ncclBfloat16 too where only bits move (the
// broadcast of ZeRO-1's bf16 weight all-gather, train/comm_nccl.c nccl_allgather_bf16)
static size_t elem_bytes(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : 4; }
static ncclResult_t check_args(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, const char* what) {
    if (t != ncclFloat && !(t == ncclBfloat16 && strcmp(what, "ncclBroadcast") == 0)) {
        fprintf(stderr, "cudaemu: %s: only ncclFloat (and ncclBfloat16 for ncclBroadcast) is emulated\n", what);
        return ncclInvalidArgument;
    }
    if (op != ncclSum) {
        fprintf(stderr, "cudaemu: %s: only ncclSum is emulated\n", what);
        return ncclInvalidArgument;
    }
    if (count) {
        emu_check_device_range(send, count * elem_bytes(t), what);
        emu_check_device_range(recv, count * elem_bytes(t), what);
    }
    return ncclSuccess;
}

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "NCCL error (cudaemu)"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cudaemu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (strcmp(id.internal, "cudaemu") != 0) return ncclInvalidArgument;   // not from ncclGetUniqueId (broadcast lost?)
    int size = 1, me = 0;
#ifdef GATEDGPT_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
    }
#endif
    if (nranks != size || rank != me) {
        fprintf(stderr, "cudaemu: ncclCommInitRank(nranks %d, rank %d) but the processes are %d, this one %d\n", nranks,
                rank, size, me);
        return ncclInvalidArgument;
    }
    *comm = (ncclComm_t) new EmuNccl{nranks, rank};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete (EmuNccl*)comm;
    return ncclSuccess;
}

// The emulated collectives are blocking MPI calls made when issued, so there is no pending work
// to cancel: the abort is recorded (one line, for tests/test_watchdog.sh) and the communicator
// refuses further use; the process is expected to end next (MPI_Abort).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    EmuNccl* c = (EmuNccl*)comm;
    fprintf(stderr, "cudaemu: ncclCommAbort(communicator of %d ranks, rank %d)\n", c->nranks, c->rank);
    c->nranks = -1;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}
static ncclResult_t p2p_flush(void);   // ncclSend / ncclRecv below
ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return ncclInvalidUsage;
    group_depth--;
    return group_depth == 0 ? p2p_flush() : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t) {
    ncclResult_t r = check_args(send, recv, count, t, op, "ncclAllReduce");
    if (r != ncclSuccess) return r;
    if (send != recv) memcpy(recv, send, count * sizeof(float));
#ifdef GATEDGPT_MPI
    if (((EmuNccl*)comm)->nranks > 1 && count)
        MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)comm;
#endif
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
    EmuNccl* c = (EmuNccl*)comm;
    if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
    ncclResult_t r = check_args(send, c->rank == root ? recv : (void*)send, count, t, op, "ncclReduce");
    if (r != ncclSuccess) return r;
    if (c->rank == root && send != recv) memcpy(recv, send, count * sizeof(float));
#ifdef GATEDGPT_MPI
    if (c->nranks > 1 && count) {
        if (c->rank == root) MPI_Reduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
        else MPI_Reduce(send, NULL, (int)count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    }
#endif
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t) {
    EmuNccl* c = (EmuNccl*)comm;
    if (root < 0 || root >= c->nranks) return ncclInvalidArgument;
    ncclResult_t r = check_args(send, recv, count, t, ncclSum, "ncclBroadcast");
    if (r != ncclSuccess) return r;
    if (c->rank == root && send != recv) memcpy(recv, send, count * elem_bytes(t));
#ifdef GATEDGPT_MPI
    if (c->nranks > 1 && count)
        MPI_Bcast(recv, (int)count, t == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT, root, MPI_COMM_WORLD);
#endif
    return ncclSuccess;
}

// Point-to-point (the experts' all-to-all, train/comm_nccl.c nccl_ep_alltoallv): bytes only
// (ncclUint8 / ncclInt8), queued and run when the outermost group ends (or at once outside a
// group) as MPI nonblocking receives and sends on MPI_COMM_WORLD: the emulator's communicators
// span all processes (ncclCommInitRank above), so a peer is a world rank. One process: each
// send is matched, in order, with a receive from itself.
struct EmuP2P { int is_send; void* buf; size_t bytes; int peer; };
static EmuP2P* p2p_ops;
static int p2p_n, p2p_cap;
static ncclResult_t p2p_queue(int is_send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                              const char* what) {
    EmuNccl* c = (EmuNccl*)comm;
    if (t != ncclUint8 && t != ncclInt8) { fprintf(stderr, "cudaemu: %s: only ncclUint8 / ncclInt8 are emulated\n", what); return ncclInvalidArgument; }
    if (peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
    if (count) emu_check_device_range(buf, count, what);
    if (p2p_n == p2p_cap) {
        p2p_cap = p2p_cap ? 2 * p2p_cap : 16;
        p2p_ops = (EmuP2P*)realloc(p2p_ops, (size_t)p2p_cap * sizeof(EmuP2P));
        if (!p2p_ops) return ncclSystemError;
    }
    p2p_ops[p2p_n++] = EmuP2P{is_send, (void*)buf, count, peer};
    return group_depth == 0 ? p2p_flush() : ncclSuccess;
}
static ncclResult_t p2p_flush(void) {
    if (p2p_n == 0) return ncclSuccess;
    int size = 1;
#ifdef GATEDGPT_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) {
        MPI_Request* req = (MPI_Request*)malloc((size_t)p2p_n * sizeof(MPI_Request));
        if (!req) return ncclSystemError;
        for (int i = 0; i < p2p_n; i++) {   // receives first, then sends; one message per pair and direction
            EmuP2P* o = &p2p_ops[i];
            if (o->is_send) MPI_Isend(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 7321, MPI_COMM_WORLD, &req[i]);
            else MPI_Irecv(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 7321, MPI_COMM_WORLD, &req[i]);
        }
        int err = MPI_Waitall(p2p_n, req, MPI_STATUSES_IGNORE);
        free(req);
        p2p_n = 0;
        return err == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
    }
#endif
    int r = 0;
    for (int s = 0; s < p2p_n; s++) {
        if (!p2p_ops[s].is_send) continue;
        while (r < p2p_n && p2p_ops[r].is_send) r++;
        if (r == p2p_n || p2p_ops[r].bytes != p2p_ops[s].bytes) { p2p_n = 0; return ncclInvalidUsage; }
        memcpy(p2p_ops[r].buf, p2p_ops[s].buf, p2p_ops[s].bytes);
        r++;
    }
    p2p_n = 0;
    return ncclSuccess;
}
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t) {
    return p2p_queue(1, buf, count, t, peer, comm, "ncclSend");
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t) {
    return p2p_queue(0, buf, count, t, peer, comm, "ncclRecv");
}

}   // extern "C"
