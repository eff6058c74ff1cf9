// train/plan.h: the memory planner behind `train_gpt --check` (docs/config.md, "Memory plan").
//
// Per process, the bytes of each category a training run holds, from the size functions the
// allocations themselves use (model/gpt.h gpt_param_allocs and gpt_activation_bytes,
// model/optim.h optim_moment_bytes, train/dist.h dist_shard and dist_host_bytes, train/comm.h
// comm_reduce_scatter_bytes, kernels/scratch.h for the backends' scratch), then the total
// against a device's memory, and the largest batch_size that fits.
//
// Layouts: the CPU build (fp32 activations, host memory: every line counts against the RAM),
// and the CUDA builds (fp32 or bf16 act_t, 256-byte allocations: the device lines count against
// the GPU's memory, the host lines are listed apart). A binary plans its own layout by default;
// `--device h100|h200|a100-80g` plans the CUDA bf16 layout (train/args.h), `--layout` any.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "model/config.h"

// PLAN_LAYOUT_CPU_BF16: train_gpt_bf16 ([train] precision = bf16): the CPU's 64-byte allocations
// with bf16 act_t, and the bf16 backend's fp32 copies on top of the scratch line
typedef enum { PLAN_LAYOUT_CPU = 0, PLAN_LAYOUT_CUDA_FP32, PLAN_LAYOUT_CUDA_BF16, PLAN_LAYOUT_CPU_BF16 } PlanLayout;
static inline int plan_layout_is_cpu(PlanLayout l) { return l == PLAN_LAYOUT_CPU || l == PLAN_LAYOUT_CPU_BF16; }

// The lines, in print order.
enum {
    PLAN_WEIGHTS = 0,   // parameters in the activation dtype (the GEMMs' copy)
    PLAN_MASTER,        // fp32 parameters (master weights)
    PLAN_GRADS,         // fp32 gradients
    PLAN_ADAMW,         // AdamW m and v (this process's shard under zero_stage 1)
    PLAN_ACTS,          // tensors kept for the backward, one micro-batch
    PLAN_LOGITS,        // logits, losses, logsumexp, token ids
    PLAN_BACKWARD,      // the backward's buffers
    PLAN_EP_ROWS,       // expert parallelism: the received rows' buffers (balanced routing)
    PLAN_KV,            // the sampler's KV cache, beyond the training arena it replaces
    PLAN_SCRATCH,       // the kernels' scratch (+ the GEMM library's workspace on the CPU)
    PLAN_COMM,          // communication buffers
    PLAN_HOST,          // host buffers: token batches, the mapped data shards
    PLAN_SNAPSHOT,      // [checkpoint] async: the checkpoint snapshot's host buffer (train/ckpt_async.h)
    PLAN_RUNTIME,       // libraries, MPI / the CUDA context: measured (CPU) or an allowance (GPU)
    PLAN_LINES
};

typedef struct {
    PlanLayout layout;
    int nproc;              // processes (>= 1)
    int threads;            // CPU threads per process (ops_num_threads after ops_init)
    size_t device_bytes;    // the memory the total is held against: per process (a GPU), or the
                            // machine's, shared by the nproc processes (CPU RAM)
    int device_shared;      // 1: device_bytes is this machine's RAM, shared by nproc processes
    char device_name[96];   // for the report: "h200 (141 GB, datasheet)", "RAM: MemAvailable", ...
    int this_backend;       // 1: the layout is this binary's and ops_init ran: the backend's own
                            // ops_scratch_bytes (CUDA: CUB asked, this GPU's shared memory)
    size_t smem_optin;      // CUDA layouts planned from elsewhere: the GPU's shared memory per block
    size_t runtime_rss;     // CPU layout: this process's resident bytes at the plan (measured)
} PlanOptions;

typedef struct {
    int B, T, nproc, zero_stage;
    size_t n_params;        // floats of the parameter arena (ParamTable.total)
    size_t shard_lo, shard_hi;   // the AdamW range of rank 0 (the largest shard)
    size_t bytes[PLAN_LINES];
    int on_device[PLAN_LINES];   // counted against device_bytes
    char what[PLAN_LINES][240];  // what the line holds, with its figures
    size_t total;           // the lines on the device, per process
    size_t host_total;      // GPU layouts: the host lines, per process
    int exact[PLAN_LINES];  // 1: the allocations' own bytes (the trainer reports the same);
                            // 0: a measurement or an allowance
} Plan;

// Fills *o's layout facts for `layout` in this binary (threads from ops_num_threads when the
// layout is this build's). Returns 0.
const char* plan_layout_name(PlanLayout l);
// The plan of cfg at batch_size B (seq_len from cfg) over o->nproc processes. Returns 0, or -1
// after an error line (a config the planner cannot size).
int plan_build(const Config* cfg, int B, const PlanOptions* o, Plan* p);
// Whether a plan fits: nproc x total <= device (shared RAM) or total <= device (a GPU).
int plan_fits(const Plan* p, const PlanOptions* o);
// The largest batch_size whose plan fits (0: not even 1), searched with plan_build.
int plan_largest_batch(const Config* cfg, const PlanOptions* o);
// The table, the total against the device, fits / does not fit, and the largest batch_size.
void plan_print(const Config* cfg, const Plan* p, const PlanOptions* o, FILE* f);
// /proc/self/status VmRSS and VmHWM (peak), bytes (0 where unreadable); /proc/meminfo
// MemAvailable (0 where unreadable).
size_t plan_self_rss(void);
size_t plan_self_peak_rss(void);
size_t plan_mem_available(void);
// A device name (h100, h200, a100-80g) or a byte count (digits, optionally with a suffix k M G T
// = 10^3.. or Ki Mi Gi Ti = 2^10..; "80G" = 80e9). Returns 0 and fills *bytes, *name, *is_gpu
// (a named GPU), or -1 for a name it does not know.
int plan_parse_device(const char* s, size_t* bytes, char* name, size_t name_len, int* is_gpu, size_t* smem_optin);
