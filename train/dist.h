// train/dist.h: data parallelism over the communication layer (train/comm.h): gradient
// averaging (zero_stage 0: all-reduce) or ZeRO-1 (reduce-scatter the gradients, each process
// updates one shard of the parameters with its shard of the AdamW state, all-gather the
// parameters), and the global gradient norm.
//
// The arenas live in the backend's memory. The CPU backend's are host memory and go through
// the host layer (train/comm.h: MPI). The CUDA backend's are device memory: that library is
// compiled with GATEDGPT_DEVICE_ARENAS (and GATEDGPT_NCCL where NCCL is installed), and with
// more than one process the arena collectives go through NCCL (train/comm_nccl.h); the small
// host collectives (loss, norm chunks, MoE counts) stay on MPI.
//
// Shards: the flat arena of `total` floats is cut into `size` contiguous ranges in rank order,
// each a whole number of OPS_SUMSQ_CHUNK floats (the last one shorter), so every process sums
// exactly the norm chunks it owns and the global norm has the same bits under zero_stage 0
// and 1 (the chunk sums are added in one fixed order either way).
#pragma once
#include <stddef.h>
#include "comm.h"

//
// Expert parallelism (Comm.ep_size = P > 1, the model an expert shard: model/params.h): the
// arena is [dense | experts]. The dense region [0, dense) is reduced and sharded over all
// processes as above. The expert region [dense, total) holds this member's experts, which only
// its replica group holds too (Comm.rep_*: the size / P processes with the same member index
// in every group): it is reduced over the replica group only and, under ZeRO-1, cut into
// rep_size shards of whole norm chunks, one per replica. The global norm counts every expert
// once: each member's expert chunk sums are added over the P members, not over the replicas.
typedef struct {
    Comm* comm;
    int zero_stage;        // 0 or 1
    size_t total;          // floats in the parameter / gradient arenas
    size_t dense;          // the dense region [0, dense) (= total without expert parallelism)
    size_t* off;           // [size] start of each rank's shard of the dense region
    size_t* cnt;           // [size] its length
    size_t lo, hi;         // the dense range this process updates: its shard (ZeRO-1) or [0, dense)
    size_t* xoff;          // [rep_size] start of each replica's shard of the expert region (absolute)
    size_t* xcnt;          // [rep_size] its length
    size_t xlo, xhi;       // the expert range this process updates (empty, = total, without experts)
    size_t nchunks;        // norm chunks over the dense region
    double* part;          // [nchunks] host: per-chunk sums of squares
    size_t nxchunks;       // norm chunks over the expert region (0 without expert parallelism)
    double* xpart;         // [ep_size * nxchunks] host: every member's expert chunk sums
    void* nccl;            // NcclComm* when the arena collectives run on NCCL, else NULL
    void* nccl_ep;         // NcclComm* over the expert-parallel group (comm_ep_init before dist_init), else NULL
    void* nccl_rep;        // NcclComm* over the replica group (more than one replica), else NULL
    // Overlap: the gradients of a layer are reduce-scattered as soon as the backward pass has
    // finished it (dist_reduce_range, from GPT.grads_ready), the rest in dist_reduce_grads. On
    // NCCL the reductions run on their own stream while the backward goes on; on MPI they block
    // (no gain: the cores run the backward), so MPI uses it only when GATEDGPT_DIST_OVERLAP=1
    // (tests: the bucketed ranges must give the same training).
    int overlap;
    size_t (*done)[2];     // [ndone] ranges already reduced this step, in the order reduced
    int ndone, done_cap;
    // ZeRO-1 with the fp32 master sharded (dist_master_init: the model holds only its shard,
    // model/gpt.h gpt_build_shard); nf32: the fp32-read ranges all-gathered after each update
    int master_sharded;
    int nf32;
} Dist;

// Returns 0, or -1 after printing why (a CUDA build without NCCL under mpirun; NCCL failing to
// start). GATEDGPT_NCCL_SINGLE=1 in the environment runs the NCCL path with one process too
// (tests/test_gpu_train.sh: it must give the same bits as the single-process path).
int dist_init(Dist* d, Comm* c, int zero_stage, size_t total);
// The same over an arena whose floats [dense, total) are this member's expert shard
// (ParamTable.dense_total; comm_ep_init first). dense = total: dist_init.
int dist_init_ep(Dist* d, Comm* c, int zero_stage, size_t total, size_t dense);
// The shard [*lo, *hi) of rank `rank` of `size` over an arena of `total` floats (the layout
// above; what a ZeRO-1 checkpoint's rank file holds).
void dist_shard(size_t total, int size, int rank, size_t* lo, size_t* hi);
void dist_free(Dist* d);
// The watchdog's abort (train/watchdog.h), from its thread while the main thread may be blocked
// in a collective: ncclCommAbort on each NCCL communicator (the world, the expert group, the
// replica group), which ends their kernels and pending work; the caller then ends the job
// (comm_abort). Returns how many were aborted (0 on the CPU backend).
int dist_abort_nccl(Dist* d);
// Host bytes dist_init allocates for `size` processes over `total` floats (the shard tables and
// the per-chunk norm sums), for the memory planner (train/plan.h).
size_t dist_host_bytes(size_t total, int size);
// After the micro-steps: the sum over processes of grads[total] (every process called backward
// with dloss = 1 / (grad_accum * size), so the sum is the global-batch mean). zero_stage 0: all
// of grads; 1: only [lo, hi) is valid afterwards. Both stages add each element's values in
// the same order (one reduce-scatter), so their sums have the same bits.
void dist_reduce_grads(Dist* d, float* grads);
// sqrt of the sum of squares of all gradients of the global batch (after dist_reduce_grads):
// with expert parallelism every expert counted once.
float dist_grad_norm(Dist* d, const float* grads);
// ZeRO-1: every process's updated shard of params[total] to all processes (no-op for 0).
void dist_gather_params(Dist* d, float* params);

// ZeRO-1 with the fp32 master sharded, in the layouts whose GEMMs read a bf16 compute copy
// (bf16 act_t: the CUDA bf16 build and its CPU emulation; the fp32 layouts' weights are the
// compute copy and keep dist_gather_params): after the update each process rounds its shard of
// the master into the bf16 copy (gpt_round_master_shard) and the copy is all-gathered, 2 bytes
// a parameter instead of 4; of the fp32 master only the tensors read in fp32 (gpt_fp32_ranges:
// embeddings, norms, biases, small Gated DeltaNet tensors) are all-gathered. Training is the
// same bit for bit as zero_stage 0 (the rounding's bits follow the global index). On with
// zero_stage 1, more than one process, bf16 act_t and no expert parallelism (the experts'
// replica shards keep dist_gather_params). The model holds only the shard of the fp32 master
// (gpt_build_shard with dist_master_shard's range), the fp32-read tensors whole besides; a
// checkpoint gathers the shards to rank 0 (train/checkpoint.h checkpoint_set_gather).
// dist_master_shard: whether the master is sharded for this process count, zero_stage and
// layout (before the model is built), and this process's range [lo, hi) of an arena of
// `total` floats (that of dist_init's d->lo, d->hi); 0 and lo = 0, hi = SIZE_MAX (the whole
// master for gpt_build_shard) when not.
int dist_master_shard(const Comm* c, int zero_stage, size_t total, size_t* lo, size_t* hi);
// Call after dist_init, with the model built: checks that it holds d's shard.
struct GPT;
void dist_master_init(Dist* d, const struct GPT* m);
// After optim_step (and after a checkpoint load): the compute copy and the fp32-read tensors of
// every process's shard to all processes (master sharded), else dist_gather_params.
void dist_gather_weights(Dist* d, struct GPT* m);
// fp32 all-gather of the arena range [lo, hi) (each process's part of it from its shard) into
// x[0 .. hi - lo) (x holds the range's element lo at x[0]).
void dist_gather_range(Dist* d, float* x, size_t lo, size_t hi);
// bf16 all-gather of the dense region of a 2-byte-element arena (the compute copy) by shards.
void dist_gather_act(Dist* d, void* act);
// Overlap (d->overlap, more than one process): reduce-scatter grads[lo, hi) now (each process
// keeps the sum of its shard's part of it). Call after the last micro-step's backward has
// finished those gradients; dist_reduce_grads then reduces only what no call covered. Every
// process makes the same calls in the same order.
void dist_reduce_range(Dist* d, float* grads, size_t lo, size_t hi);
// Expert parallelism on device arenas: the experts' all-to-all (comm_ep_alltoallv's contract)
// over NCCL within the group. Returns 0 when done, -1 when there is no NCCL group communicator
// (host arenas, a build without NCCL, or NCCL refused it): the caller then uses the host path.
int dist_ep_alltoallv(Dist* d, const void* send, const int* send_rows, void* recv, const int* recv_rows,
                      size_t row_bytes);
