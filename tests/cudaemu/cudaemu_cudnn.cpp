// tests/cudaemu/cudaemu_cudnn.cpp: the CUDA emulator has no cuDNN: attn_impl = cudnn stops with a
// message, as in a build without the cudnn-frontend headers (kernels/cuda/attention_cudnn.cpp).
#include "cuda_common.h"

void cuda_cudnn_attention_forward(act_t*, float*, const act_t*, const act_t*, const act_t*, const OpsAttnShape*) {
    cuda_fail(__FILE__, __LINE__, "[train] attn_impl = cudnn: the CUDA emulator has no cuDNN",
              "use attn_impl = fused or flash with the emulator; cuDNN runs on a GPU only");
}
void cuda_cudnn_attention_backward(act_t*, act_t*, act_t*, const act_t*, const act_t*, const act_t*, const act_t*,
                                   const act_t*, const float*, const OpsAttnShape*) {
    cuda_fail(__FILE__, __LINE__, "[train] attn_impl = cudnn: the CUDA emulator has no cuDNN",
              "use attn_impl = fused or flash with the emulator; cuDNN runs on a GPU only");
}
int cuda_cudnn_available(void) { return 0; }
