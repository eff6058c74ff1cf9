// kernels/cuda/mma_ptx.cuh: the PTX tensor-core wrappers the warp-level GEMMs share
// (attention_mma.cu, deltanet_chunk.cu): ldmatrix (plain and transposed) and mma.sync
// m16n8k16 bf16 -> fp32. Under the CPU emulator (tests/cudaemu) the same operations from the
// PTX ISA's fragment layouts.
#pragma once
#include <stdint.h>

#ifndef GATEDGPT_CUDA_EMU
__device__ __forceinline__ uint32_t mma_smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
#endif
// four 8x8 bf16 matrices; lane l gives the address of a row of matrix l / 8
__device__ __forceinline__ void mma_ldsm4(uint32_t* r, const void* p) {
#ifdef GATEDGPT_CUDA_EMU
    emu_ldmatrix_x4(r, p, 0);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(mma_smem_addr(p)));
#endif
}
// the same, each 8x8 matrix transposed
__device__ __forceinline__ void mma_ldsm4_t(uint32_t* r, const void* p) {
#ifdef GATEDGPT_CUDA_EMU
    emu_ldmatrix_x4(r, p, 1);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(mma_smem_addr(p)));
#endif
}
// d (16x8 fp32) += a (16x16 bf16) b (16x8 bf16)
__device__ __forceinline__ void mma_m16n8k16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef GATEDGPT_CUDA_EMU
    emu_mma_m16n8k16_bf16(d, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
