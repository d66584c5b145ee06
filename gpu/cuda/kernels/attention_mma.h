#pragma once

#include <cstdint>

#include "gpu/cuda/kernels/attention.h"

// The tensor-core attention forward (attention_mma.cu) and backward (attention_mma_backward.cu),
// which attention_forward and attention_backward run for bfloat16 and float16 at head_dim 64 and
// 128: FlashAttention-2's tiling, blocks of 64 rows per CTA (16 per warp), the other side's rows
// through shared memory, and the products on mma.sync.m16n8k16 with fp32 accumulation. Q K^T and
// dout V^T multiply the stored 16-bit values exactly; the probabilities, and in the backward dS,
// are rounded to the element type (to nearest even) before they multiply v, dout, q or k, as in
// FlashAttention-2, while the softmax's sum and dS = P (dP - delta) use them unrounded.
namespace strata::gpu::cuda::kernels {

// Whether the tensor-core kernel takes this head width and this qkv: its rows are read 16 bytes
// at a time, so qkv must be 16-byte aligned (a Tensor at an odd offset runs on CUDA cores).
inline bool attention_mma_takes(i64 head_dim, const void* qkv) {
  return (head_dim == 64 || head_dim == 128) && reinterpret_cast<std::uintptr_t>(qkv) % 16 == 0;
}

// Whether the tensor-core backward takes them: qkv as the forward's, and dout read 16 bytes at a
// time too. dqkv is added into element by element, at any alignment.
inline bool attention_mma_backward_takes(i64 head_dim, const void* qkv, const void* dout) {
  return attention_mma_takes(head_dim, qkv) && attention_mma_takes(head_dim, dout);
}

// For T = __nv_bfloat16 and __half; the shape as attention_forward's, head_dim 64 or 128.
template <typename T>
cudaError_t attention_forward_mma(cudaStream_t stream, T* out, float* lse, const T* qkv,
                                  AttentionShape shape);

// attention_backward's dqkv += the gradient, from its delta (each query row's dout . out, already
// computed): a CTA per 64 keys of a kv head adds dk and dv over the query rows of every query head
// of its group that see them, then a CTA per 64 query rows adds dq over the keys they see; no
// atomics. For T = __nv_bfloat16 and __half, head_dim 64 or 128.
template <typename T>
cudaError_t attention_backward_mma(cudaStream_t stream, T* dqkv, const float* delta, const T* dout,
                                   const T* qkv, const float* lse, AttentionShape shape);

}  // namespace strata::gpu::cuda::kernels
