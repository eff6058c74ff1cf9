// train/comm.h: the communication layer of data-parallel training. One interface, two builds:
// train/comm_mpi.c (MPI collectives on host buffers: the CPU backend) when MPI is found, and
// train/comm_single.c (one process; every collective is the identity) when it is not. The NCCL
// implementation for device buffers joins with the CUDA backend (docs/distributed.md).
//
// Every collective is called by all ranks in the same order with the same sizes. Sums over
// ranks are taken in rank order by MPI's reduction for a fixed process count, so a run is
// repeatable bit for bit with the same number of processes.
#pragma once
#include <stddef.h>

typedef struct {
    int rank, size;        // this process and the number of processes (1 without mpirun)
    int local_rank;        // rank among the processes on this node (picks the GPU)
    int mpi;               // 1 when MPI is initialised (launched under mpirun, MPI build)
    double seconds;        // wall time spent in collectives since comm_init (for the step log)
    // expert parallelism (comm_ep_init): groups of ep_size consecutive ranks exchange MoE tokens
    int ep_size, ep_rank;  // the group's size P and this rank's index in it (rank % P); 1, 0 = off
    void* ep_comm;         // the group's communicator (MPI_Comm*), NULL when off
    // the replica group (comm_ep_init): the rep_size = size / ep_size ranks with this ep_rank
    // (ranks ep_rank, ep_rank + P, ...), which hold the same experts; this rank is rep_rank =
    // rank / P of them. Without expert parallelism: every rank (rep_size = size, rep_rank = rank).
    int rep_size, rep_rank;
    void* rep_comm;        // its communicator (MPI_Comm*), NULL when off
    double ep_seconds;     // wall time in the group's all-to-alls (also counted in seconds)
    double ep_bytes;       // payload bytes this rank sent to other ranks by them (rows, not counts)
} Comm;

// Initialises MPI when this binary was built with it and an MPI launcher started the process
// (a plain ./train_gpt is rank 0 of 1 and leaves MPI unstarted: docs/distributed.md).
void comm_init(Comm* c, int* argc, char*** argv);
// Starts MPI in a process comm_init left without it (still rank 0 of 1): for the memory plan of
// a run of several processes, whose measured runtime line must include MPI's own memory. A
// no-op when MPI is running or not built.
void comm_start_mpi(Comm* c, int* argc, char*** argv);
// Finalises MPI after a barrier. Call once, on success only; errors go through comm_abort.
void comm_finalize(Comm* c);
// Stops every rank of the job: prints "error: rank R of N: <why>" and calls MPI_Abort
// (exit(code) without MPI). Use it for errors after comm_init that may hit one rank only.
// Callable from another thread (the watchdog's, train/watchdog.h): MPI_Init provides
// MPI_THREAD_SINGLE with Open MPI 4.1.4, whose MPI_Abort still ends the job from any thread
// (tests/test_watchdog.sh); mpirun then exits with `code`.
void comm_abort(Comm* c, int code, const char* why);
// Name of the implementation, e.g. "mpi (Open MPI v4.1.4), 2 ranks" or "single process".
const char* comm_name(const Comm* c);

void comm_barrier(Comm* c);
// x[n] (host) = sum over ranks of x[n], in place.
void comm_allreduce_sum_f32(Comm* c, float* x, size_t n);
void comm_allreduce_sum_f64(Comm* c, double* x, size_t n);
// x[n] (host) = max over ranks, in place.
void comm_allreduce_max_f64(Comm* c, double* x, size_t n);
// ZeRO-1. The flat array x[n] is cut into size shards: shard r = x[off[r] .. off[r]+cnt[r]).
// reduce_scatter: x's own shard (on this rank) = sum over ranks of that shard; the rest of x
// is left unspecified. allgather: every rank's shard of x is copied to all ranks.
void comm_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt);
void comm_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt);
// The same all-gather over 2-byte elements (the bf16 compute copy of the weights under ZeRO-1
// with the master sharded, train/dist.h dist_gather_act): off and cnt count elements.
void comm_allgather_bf16(Comm* c, void* x, const size_t* off, const size_t* cnt);
// Rank 0's bytes buf[n] to every rank.
void comm_broadcast(Comm* c, void* buf, size_t n);

// Expert parallelism (docs/distributed.md): the ranks are cut into groups of P consecutive
// ranks (group g = ranks g*P .. g*P + P - 1; member index = rank % P). Returns 0, or -1 after
// printing why (P does not divide the number of processes). P = 1: off, nothing made.
int comm_ep_init(Comm* c, int P);
// Within the group: send[P*n] ints, n to each member in member order -> recv[P*n], n from each.
void comm_ep_alltoall_int(Comm* c, const int* send, int* recv, int n);
// Within the group: send_rows[p] rows of row_bytes bytes to member p, consecutive in member
// order in send -> recv_rows[p] rows from member p, likewise in recv (host buffers). The
// counts must match what the members send (exchanged first with comm_ep_alltoall_int).
void comm_ep_alltoallv(Comm* c, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                       size_t row_bytes);

// Within the replica group (Comm.rep_*): comm_reduce_scatter_sum_f32 and comm_allgather_f32
// with rep_size shards (off, cnt [rep_size]). Nothing without expert parallelism.
void comm_rep_reduce_scatter_sum_f32(Comm* c, float* x, const size_t* off, const size_t* cnt);
void comm_rep_allgather_f32(Comm* c, float* x, const size_t* off, const size_t* cnt);
// Within the group: every member's send[n] (host) to member 0's recv[P * n], in member order
// (the checkpoint's expert gather); recv is unused elsewhere.
void comm_ep_gather_f32(Comm* c, const float* send, size_t n, float* recv);
// Every rank's send[n] (n may differ by rank) to rank 0's recv, in rank order (rank 0's first);
// recv is only read on rank 0. Any sizes (sent in pieces of at most 2^30 floats).
void comm_gather_f32(Comm* c, const float* send, size_t n, float* recv);
// Within the group: member 0's bytes buf[n] to every member (the group's NCCL id).
void comm_ep_broadcast(Comm* c, void* buf, size_t n);
// Within the replica group: its member 0's bytes buf[n] to every member (its NCCL id).
void comm_rep_broadcast(Comm* c, void* buf, size_t n);

// Host memory of comm_reduce_scatter_sum_f32 over `floats` floats (the memory planner,
// train/plan.h): *held, what this layer keeps between calls (MPI: the receive buffer of this
// process's shard, `shard` floats; nothing with one process); *temp, what the MPI library
// allocates inside one call and frees (Open MPI 4.1.4's reduce-scatter: 2.00 x the floats
// reduced, measured with 2 and 3 processes over 3.8-76 MiB; other libraries may differ).
void comm_reduce_scatter_bytes(int size, size_t floats, size_t shard, size_t* held, size_t* temp);
