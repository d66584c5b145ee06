#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Grouped-query attention's inputs packed for the attention kernel, on the GPU, the twin of
// gpu/host/kernels/qkv_pack.h, for T = float, __nv_bfloat16, __half (element_types.h).
namespace strata::gpu::cuda::kernels {

template <typename T>
cudaError_t qkv_pack_forward(cudaStream_t stream, T* qkv, const T* q, const T* k, const T* v,
                             i64 rows, i64 heads, i64 kv_heads, i64 head_dim);
// One thread per element of dq, dk and dv, adding its element of dqkv: no atomics, and nothing to
// sum, as the attention kernel has summed each kv head's gradient over its query heads.
template <typename T>
cudaError_t qkv_pack_backward(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dqkv, i64 rows,
                              i64 heads, i64 kv_heads, i64 head_dim);

}  // namespace strata::gpu::cuda::kernels
