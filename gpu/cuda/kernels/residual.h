#pragma once

#include "gpu/cuda/kernels/element_types.h"

// The residual add on the GPU, the twin of gpu/host/kernels/residual.h, for T = float,
// __nv_bfloat16, __half (element_types.h). A lone add rounds the same on both backends, so the
// results are the host's bits.
namespace strata::gpu::cuda::kernels {

// out = a + b; out may alias a or b.
template <typename T>
cudaError_t residual_forward(cudaStream_t stream, T* out, const T* a, const T* b, i64 n);
// da += dout, db += dout. For float, da == db receives 2 * dout as on the host; for the 16-bit
// types da and db must not alias (the two adds would round twice).
template <typename T>
cudaError_t residual_backward(cudaStream_t stream, T* da, T* db, const T* dout, i64 n);

}  // namespace strata::gpu::cuda::kernels
