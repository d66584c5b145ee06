#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Causal multi-head attention on the GPU, the twin of gpu/host/kernels/attention.h (same math, the
// same att saved), for T = float, __nv_bfloat16, __half (element_types.h): scores, softmax and
// sums run in fp32 (the softmax's sum in double) and out, att and dqkv are rounded once.
namespace strata::gpu::cuda::kernels {

// The most head_size attention_backward supports (each lane keeps head_size / 32 sums).
inline constexpr i64 attention_head_size_max = 256;

// att (batch, heads, seq_len, seq_len) materialised, one warp per query row, the row's scores in
// shared memory: memory grows with seq_len squared, where a fused memory-efficient kernel
// (FlashAttention's tiling) would keep it linear. out is computed from the fp32 probabilities,
// before att is rounded.
template <typename T>
cudaError_t attention_forward(cudaStream_t stream, T* out, T* att, const T* qkv, i64 batch,
                              i64 seq_len, i64 channels, i64 heads);

// dqkv += the gradient. `row_sums` is fp32 scratch of batch * heads * seq_len floats (sum over t2
// of att * datt per row). A warp per query row adds dq, then a warp per key row adds dk and dv,
// each from its own registers: no atomics.
template <typename T>
cudaError_t attention_backward(cudaStream_t stream, T* dqkv, float* row_sums, const T* dout,
                               const T* qkv, const T* att, i64 batch, i64 seq_len, i64 channels,
                               i64 heads);

}  // namespace strata::gpu::cuda::kernels
