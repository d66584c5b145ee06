#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Decoding with a KV cache on the GPU, the twins of gpu/host/kernels/kv_cache.h and
// decode_attention in gpu/host/kernels/flash_attention.h, for T = float, __nv_bfloat16, __half
// (element_types.h). Caches are (batch, kv_heads, max_seq, head_dim); qkv rows are attention's
// layout (heads queries, kv_heads keys, kv_heads values, head_dim each).
namespace strata::gpu::cuda::kernels {

// One thread per copied element: k and v of qkv's row b * tokens + t to position start[b] + t.
template <typename T>
cudaError_t kv_cache_write(cudaStream_t stream, T* k_cache, T* v_cache, const T* qkv,
                           const std::int32_t* start, i64 batch, i64 tokens, i64 heads,
                           i64 kv_heads, i64 head_dim, i64 max_seq);

// Flash-decoding: one block per (sequence, query head, split of `split` positions) scores its
// positions below length[b] against the query, keeps their maximum, the sum of exp(score - max)
// and the weighted sum of values in fp32 (`scratch`: split_count x (head_dim + 2) floats per
// (sequence, head)); a second kernel rescales the splits to their common maximum and writes
// out = sum / total, rounded once. A batch of one sequence still spreads over max_seq / split x
// heads blocks. head_dim <= 256.
template <typename T>
cudaError_t decode_attention(cudaStream_t stream, T* out, const T* qkv, const T* k_cache,
                             const T* v_cache, const std::int32_t* length, float* scratch,
                             i64 batch, i64 heads, i64 kv_heads, i64 head_dim, i64 max_seq,
                             i64 split);

}  // namespace strata::gpu::cuda::kernels
