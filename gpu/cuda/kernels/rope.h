#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Rotary position embeddings on the GPU, in place, the twin of gpu/host/kernels/rope.h, for
// T = float, __nv_bfloat16, __half (element_types.h); inv_freq is fp32, the angles and the
// rotation are computed in fp32 and each rotated value is rounded once.
namespace strata::gpu::cuda::kernels {

// One thread per (row, head, pair). Row r's position is r % seq_len, plus start[r / seq_len] when
// `start` is not null.
template <typename T>
cudaError_t rope_forward(cudaStream_t stream, T* x, const float* inv_freq,
                         const std::int32_t* start, i64 batch, i64 seq_len, i64 heads, i64 head_dim,
                         i64 row_stride);
// The transpose, in place on the gradient (it overwrites).
template <typename T>
cudaError_t rope_backward(cudaStream_t stream, T* dx, const float* inv_freq, i64 batch, i64 seq_len,
                          i64 heads, i64 head_dim, i64 row_stride);

}  // namespace strata::gpu::cuda::kernels
