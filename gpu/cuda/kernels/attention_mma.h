#pragma once

#include <cstdint>

#include "gpu/cuda/kernels/attention.h"

// The tensor-core attention forward (attention_mma.cu), which attention_forward runs for bfloat16
// and float16 at head_dim 64 and 128: FlashAttention-2's tiling, a block of 64 query rows per
// CTA (16 per warp), the keys and values through shared memory 64 rows at a time, and the
// products on mma.sync.m16n8k16 with fp32 accumulation. Q K^T multiplies the stored 16-bit values
// exactly; the probabilities are rounded to the element type (to nearest even) before they
// multiply v, as in FlashAttention-2, while the softmax's sum adds them unrounded.
namespace strata::gpu::cuda::kernels {

// Whether the tensor-core kernel takes this head width and this qkv: its rows are read 16 bytes
// at a time, so qkv must be 16-byte aligned (a Tensor at an odd offset runs on CUDA cores).
inline bool attention_mma_takes(i64 head_dim, const void* qkv) {
  return (head_dim == 64 || head_dim == 128) && reinterpret_cast<std::uintptr_t>(qkv) % 16 == 0;
}

// For T = __nv_bfloat16 and __half; the shape as attention_forward's, head_dim 64 or 128.
template <typename T>
cudaError_t attention_forward_mma(cudaStream_t stream, T* out, float* lse, const T* qkv,
                                  AttentionShape shape);

}  // namespace strata::gpu::cuda::kernels
