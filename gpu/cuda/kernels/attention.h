#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Causal attention without the T x T matrix (FlashAttention-2's algorithm) on the GPU, the twin of
// gpu/host/kernels/flash_attention.h, for T = float, __nv_bfloat16, __half (element_types.h).
// `heads` query heads attend over `kv_heads` key/value heads (query head h reads kv head
// h / (heads / kv_heads)), each of `head_dim`, read in place from the rows of qkv:
// [q (heads x head_dim) | k (kv_heads x head_dim) | v (kv_heads x head_dim)] per token. out and
// dout are (batch * seq_len, heads x head_dim); lse and the backward's delta are fp32,
// (batch, heads, seq_len). Scores, softmax and sums run in fp32; out and dqkv are rounded once.
// No kernel uses atomics, so every run gives the same bits.
namespace strata::gpu::cuda::kernels {

// The most head_dim the kernels take (each lane of a warp keeps head_dim / 32 sums).
inline constexpr i64 attention_head_dim_max = 256;

struct AttentionShape {
  i64 batch = 0;
  i64 seq_len = 0;
  i64 heads = 0;
  i64 kv_heads = 0;  // divides heads
  i64 head_dim = 0;  // 1 to attention_head_dim_max
};

// Which kernels ran a call: the tensor-core ones or the warp-per-row ones (OpsPathCounts).
enum class AttentionKernels { tensor_core, cuda_core };

// out and lse, the log-sum-exp of each query row's scaled scores, by an online softmax over the
// keys. bfloat16 and float16 at head_dim 64 and 128 run on the tensor cores (attention_mma.h,
// where the probabilities are rounded to the element type before they multiply v, as in
// FlashAttention-2); every other case runs a warp per query row on CUDA cores, in fp32
// throughout. *ran says which.
template <typename T>
cudaError_t attention_forward(cudaStream_t stream, T* out, float* lse, const T* qkv,
                              AttentionShape shape, AttentionKernels* ran);

// dqkv += the gradient, the probabilities recomputed from qkv and lse. `delta` is fp32 scratch of
// batch * heads * seq_len floats (each query row's dout . out, computed first). bfloat16 and
// float16 at head_dim 64 and 128 run on the tensor cores (attention_mma.h); every other case runs
// a warp per query row that adds dq, then a warp per key row of each kv head that adds dk and dv
// over the query rows of every query head of its group, each from its own registers. *ran says
// which.
template <typename T>
cudaError_t attention_backward(cudaStream_t stream, T* dqkv, float* delta, const T* dout,
                               const T* qkv, const T* out, const float* lse, AttentionShape shape,
                               AttentionKernels* ran);

}  // namespace strata::gpu::cuda::kernels
