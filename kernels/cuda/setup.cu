// kernels/cuda/setup.cu: the top of the CUDA backend: the two ops.h entry points that reach
// into several of its files. ops_init opens the device (memory.cu) and then creates matmul.cu's
// cuBLASLt handle and workspace; ops_scratch_bytes / ops_scratch_reserve size the scratch slots
// of a training step by kernels/scratch.h's plan, with CUB's storage for the embedding's sort
// (embedding.cu) and this device's shared memory, and reserve them (memory.cu). Nothing in
// kernels/cuda calls this file: memory.cu sits at the bottom, the kernel files above it, this
// file above both (docs/architecture.md "Layering").
#include "cuda_common.h"

void ops_init(int threads) {
    (void)threads;                        // host threads do not matter here: the GPU does the work
    cuda_device_open();                   // the device by local rank, the environment's switches
    cuda_matmul_init(cuda_gemm_math());   // cuBLASLt in the GEMM precision those chose
}

// This device's facts for kernels/scratch.h: CUB's storage, the shared memory a block may opt in
// to (the delta rule's kernels keep their state there when it fits), GATEDGPT_GDN_STATE
static CudaDeviceFacts device_facts(const OpsStepShape* s) {
    CudaDeviceFacts f;
    f.smem_optin = cuda_smem_optin();
    f.gdn_state_global = cuda_env_is("GATEDGPT_GDN_STATE", "global");
    f.gdn_op_bytes = (int)sizeof(cact_t);   // the chunked delta rule's operands (deltanet_chunk.cu)
    f.gdn_recurrent = cuda_env_is("GATEDGPT_GDN_CHUNK", "recurrent");
    f.cub_temp = cuda_emb_cub_temp_bytes((size_t)s->B * s->T);
    return f;
}

// the slots of a step of shape s and the cuBLASLt workspace, as cudaMalloc holds them
size_t ops_scratch_bytes(const OpsStepShape* s) {
    CudaDeviceFacts f = device_facts(s);
    size_t slot[CUDA_SCRATCH_COUNT], total = scratch_alloc_bytes(CUDA_LT_WORKSPACE_BYTES, SCRATCH_CUDA_ALLOC_ALIGN);
    cuda_scratch_plan(s, &f, slot);
    for (int i = 0; i < CUDA_SCRATCH_COUNT; i++)
        if (slot[i]) total += scratch_alloc_bytes(slot[i], SCRATCH_CUDA_ALLOC_ALIGN);
    return total;
}

// Every slot at exactly the step's size (a slot holding more keeps it: a reservation never
// shrinks what an op may be using)
void ops_scratch_reserve(const OpsStepShape* s) {
    CudaDeviceFacts f = device_facts(s);
    size_t slot[CUDA_SCRATCH_COUNT];
    cuda_scratch_plan(s, &f, slot);
    for (int i = 0; i < CUDA_SCRATCH_COUNT; i++) cuda_scratch_reserve(i, slot[i]);
}
