#pragma once

#include "gpu/cuda/kernels/element_types.h"

// GELU (tanh approximation) on the GPU, the twin of gpu/host/kernels/gelu.h, for T = float,
// __nv_bfloat16, __half (element_types.h): the same exp-based tanh in fp32, rounded once.
namespace strata::gpu::cuda::kernels {

template <typename T>
cudaError_t gelu_forward(cudaStream_t stream, T* out, const T* inp, i64 n);
// dinp += dout * gelu'(inp).
template <typename T>
cudaError_t gelu_backward(cudaStream_t stream, T* dinp, const T* inp, const T* dout, i64 n);

}  // namespace strata::gpu::cuda::kernels
