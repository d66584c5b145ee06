#pragma once

#include "gpu/cuda/kernels/element_types.h"

// RMSNorm (Llama's) on the GPU, the twin of gpu/host/kernels/rms_norm.h, for T = float,
// __nv_bfloat16, __half (element_types.h). rstd and dweight are fp32.
namespace strata::gpu::cuda::kernels {

// One warp per row, the sum of squares in double.
template <typename T>
cudaError_t rms_norm_forward(cudaStream_t stream, T* out, float* rstd, const T* inp,
                             const T* weight, double eps, i64 rows, i64 channels);
// residual = a + b (rounded once), then rms_norm_forward of it, in one kernel, as
// residual_layer_norm_forward (layer_norm.h).
template <typename T>
cudaError_t residual_rms_norm_forward(cudaStream_t stream, T* residual, T* out, float* rstd,
                                      const T* a, const T* b, const T* weight, double eps, i64 rows,
                                      i64 channels);
// dinp (accumulated, rounded once) by one warp per row, its row mean in double; dweight by
// column tiles over slices of rows, the slices' sums added with atomicAdd.
template <typename T>
cudaError_t rms_norm_backward(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                              const T* inp, const T* weight, const float* rstd, i64 rows,
                              i64 channels);

}  // namespace strata::gpu::cuda::kernels
