// train/comm_nccl.h: NCCL collectives on device buffers, for the CUDA backend's gradient and
// parameter arenas (the GPU side of train/dist.h). One process per GPU: the GPU is chosen by
// the process's local rank, the NCCL unique id goes from rank 0 to all over the host
// communication layer (train/comm.h, MPI), and the collectives run on their own CUDA stream.
//
// Shards follow train/dist.h (contiguous, rank order, possibly unequal): reduce-scatter is a
// group of one ncclReduce per shard (rooted at its owner) and all-gather a group of one
// ncclBroadcast per shard, launched together (ncclGroupStart/End). P calls per collective:
// padding the arena to P equal shards would allow ncclReduceScatter / ncclAllGather (fewer
// launches at large P); to measure on a multi-GPU node.
//
// Ordering with the compute: the CUDA backend queues its work on the legacy default stream
// (kernels/cuda/cuda_common.h: cuda_stream = 0). Every collective here first makes its own
// stream wait for the work queued there so far (an event, no host wait), so a gradient is
// complete before it is reduced; nccl_sync then waits on the host for the collectives, and
// whatever is queued after it runs on the results.
//
// Status: builds in CI (CUDA toolkit + NCCL); run only where a GPU is present
// (tests/test_nccl.c, docs/gpu.md).
#pragma once
#include <stddef.h>
#include "comm.h"

typedef struct {
    Comm* comm;          // host communication layer (rank, size, local rank)
    void* nccl;          // ncclComm_t
    void* stream;        // cudaStream_t the collectives run on
    int device;          // CUDA device of this process
    void* compute_done;  // cudaEvent_t recorded on the compute stream before each collective
    double seconds;      // wall time in nccl_sync (waiting for collectives)
    int nranks;          // members of this communicator (the world, a group or a replica group)
} NcclComm;

// Builds the NCCL communicator on the process's GPU: the current device when use_current_device
// (the CUDA backend picked it at ops_init and holds memory there), else device
// local_rank % device_count (selected here). Returns -1 with a message when there is no CUDA
// device (the caller decides whether that is an error).
int nccl_init(NcclComm* n, Comm* c, int use_current_device);
void nccl_free(NcclComm* n);
// ncclCommAbort: ends the communicator's pending and running collectives (callable from another
// thread while this process waits in nccl_sync: the watchdog's path). The communicator is then
// unusable; the process is about to end. Prints nothing (the watchdog's line says it); returns
// 0, or -1 when NCCL reports an error.
int nccl_abort(NcclComm* n);
// In place on device memory, enqueued on n->stream (nccl_sync waits for them).
void nccl_allreduce_sum_f32(NcclComm* n, float* x, size_t count);
void nccl_reduce_scatter_sum_f32(NcclComm* n, float* x, const size_t* off, const size_t* cnt);
void nccl_allgather_f32(NcclComm* n, float* x, const size_t* off, const size_t* cnt);
// The same over 2-byte bf16 elements (ncclBfloat16; off and cnt count elements).
void nccl_allgather_bf16(NcclComm* n, void* x, const size_t* off, const size_t* cnt);
void nccl_sync(NcclComm* n);

// Expert parallelism (docs/distributed.md): a communicator over this process's group
// (Comm.ep_size members, Comm.ep_rank this one; comm_ep_init first), the id from member 0 over
// the group's MPI communicator. Returns -1 (with a note) when NCCL refuses it; the caller then
// stages the rows through the host.
int nccl_ep_init(NcclComm* n, Comm* c);
// Expert parallelism: a communicator over this process's replica group (Comm.rep_size members,
// Comm.rep_rank this one), for the experts' gradient reduction and ZeRO-1 all-gather; the id
// from member 0 over the replica group's MPI communicator. nccl_reduce_scatter_sum_f32 and
// nccl_allgather_f32 then take rep_size shards. Returns -1 with a note when NCCL refuses (the
// caller then stages the expert region through the host).
int nccl_rep_init(NcclComm* n, Comm* c);
// The experts' all-to-all on device memory: send_rows[p] rows of row_bytes to member p (in
// member order in send) and recv_rows[p] rows from member p into recv, as one group of
// ncclSend / ncclRecv; waits for it (the layer's next kernels read recv).
void nccl_ep_alltoallv(NcclComm* n, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                       size_t row_bytes);
