#pragma once

#include "gpu/cuda/kernels/element_types.h"

// fp32 <-> T casts on the GPU, the twin of gpu/host/kernels/cast.h, for T = float, __nv_bfloat16,
// __half (element_types.h): base/half_bits.h's conversions, so the bits are the host's (round to
// nearest even, NaN kept quiet with its sign and top payload bits, overflow to infinity, fp16
// subnormals kept; widening exact). For float both are copies.
namespace strata::gpu::cuda::kernels {

template <typename T>
cudaError_t cast_to_float(cudaStream_t stream, float* target, const T* source, i64 n);
template <typename T>
cudaError_t cast_from_float(cudaStream_t stream, T* target, const float* source, i64 n);

}  // namespace strata::gpu::cuda::kernels
