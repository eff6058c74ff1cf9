// kernels/cpu_bf16/ops_bf16_fast.c: the fast CPU bf16 backend (precision = bf16 on train_gpt_bf16):
// ops_bf16.c with its GEMMs through oneDNN's bf16 matmul (matmul_bf16.c) where the CPU has bf16
// units. One source for both builds, so the emulation and the fast path cannot drift apart in
// anything but the GEMMs' summation order.
#define GATEDGPT_BF16_FAST 1
#include "ops_bf16.c"
