#pragma once

#include "gpu/cuda/kernels/element_types.h"

// Layer normalisation on the GPU, the twin of gpu/host/kernels/layer_norm.h (same math, same saved
// statistics), for T = float, __nv_bfloat16, __half (element_types.h). mean, rstd, dweight and
// dbias are fp32.
namespace strata::gpu::cuda::kernels {

// One warp per row, the statistics summed in double as on the host.
template <typename T>
cudaError_t layer_norm_forward(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp,
                               const T* weight, const T* bias, i64 rows, i64 channels);

// residual = a + b (rounded once), then layer_norm_forward of it, in one kernel: each warp's row is
// summed, stored and normalised without reading `residual` back from memory.
template <typename T>
cudaError_t residual_layer_norm_forward(cudaStream_t stream, T* residual, T* out, float* mean,
                                        float* rstd, const T* a, const T* b, const T* weight,
                                        const T* bias, i64 rows, i64 channels);

// dinp (accumulated, rounded once) by one warp per row, its two row means in double; dweight and
// dbias by column tiles over slices of rows, the slices' sums added with atomicAdd.
template <typename T>
cudaError_t layer_norm_backward(cudaStream_t stream, T* dinp, float* dweight, float* dbias,
                                const T* dout, const T* inp, const T* weight, const float* mean,
                                const float* rstd, i64 rows, i64 channels);

}  // namespace strata::gpu::cuda::kernels
