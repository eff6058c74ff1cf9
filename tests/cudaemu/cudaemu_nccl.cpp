// tests/cudaemu/cudaemu_nccl.cpp: NCCL for the CUDA emulator (tests/cudaemu/cudaemu.h). Device
// memory is host memory here, so the collectives train/comm_nccl.c calls (all-reduce, reduce to a
// root, broadcast, in groups) are MPI collectives on the same buffers, in the order they are
// issued (every rank issues the same sequence, as NCCL requires too). Without MPI only one rank
// exists and every collective is a copy. The sums' order is MPI's, not NCCL's.
#include "cudaemu.h"
#include <nccl.h>
#include <stdio.h>
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

static ncclResult_t check_args(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, const char* what) {
    if (t != ncclFloat) {
        fprintf(stderr, "cudaemu: %s: only ncclFloat is emulated\n", what);
        return ncclInvalidArgument;
    }
    if (op != ncclSum) {
        fprintf(stderr, "cudaemu: %s: only ncclSum is emulated\n", what);
        return ncclInvalidArgument;
    }
    if (count) {
        emu_check_device_range(send, count * sizeof(float), what);
        emu_check_device_range(recv, count * sizeof(float), what);
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

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return ncclInvalidUsage;
    group_depth--;
    return ncclSuccess;
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
    if (c->rank == root && send != recv) memcpy(recv, send, count * sizeof(float));
#ifdef GATEDGPT_MPI
    if (c->nranks > 1 && count) MPI_Bcast(recv, (int)count, MPI_FLOAT, root, MPI_COMM_WORLD);
#endif
    return ncclSuccess;
}

}   // extern "C"
