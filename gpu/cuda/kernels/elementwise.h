#pragma once

#include "gpu/cuda/kernels/element_types.h"

// fill and accumulate on fp32 buffers, the GPU side of gpu/detail/elementwise.h: the same bits as
// the host backend's.
namespace strata::gpu::cuda::kernels {

// target[i] = value.
cudaError_t fill(cudaStream_t stream, float* target, float value, i64 n);
// target[i] += source[i] * scale, the product rounded before the sum (detail::scaled_sum).
cudaError_t accumulate(cudaStream_t stream, float* target, const float* source, float scale, i64 n);

}  // namespace strata::gpu::cuda::kernels
