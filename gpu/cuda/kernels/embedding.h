#pragma once

#include <cstdint>

#include "gpu/cuda/kernels/element_types.h"

// The token and position embedding on the GPU, the twin of gpu/host/kernels/embedding.h (same
// math and conventions), for T = float, __nv_bfloat16, __half (element_types.h).
namespace strata::gpu::cuda::kernels {

// out = wte[token] + wpe[position] (wpe may be null), the sum in fp32, rounded once; row r's
// position is r % seq_len, plus start[r / seq_len] when `start` is not null.
template <typename T>
cudaError_t embedding_forward(cudaStream_t stream, T* out, const std::int32_t* tokens, const T* wte,
                              const T* wpe, const std::int32_t* start, i64 batch, i64 seq_len,
                              i64 channels, i64 vocab);

// dwte and dwpe are fp32. dwte through atomicAdd (the order of the sums varies from run to run);
// dwpe without atomics, each position summing its batch rows in order.
template <typename T>
cudaError_t embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const T* dout,
                               const std::int32_t* tokens, i64 batch, i64 seq_len, i64 channels,
                               i64 vocab);

}  // namespace strata::gpu::cuda::kernels
