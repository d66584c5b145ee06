// fill and accumulate; see elementwise.h.
#include "gpu/cuda/kernels/elementwise.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/detail/elementwise.h"

namespace strata::gpu::cuda::kernels {
namespace {

__global__ void fill_kernel(float* target, float value, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = value;
}

// The host's arithmetic, roundings spelled out (gpu/detail/elementwise.h): written as
// `target[i] += source[i] * scale`, nvcc fused it into one FFMA and the result differed from the
// host's in the last bit.
__global__ void accumulate_kernel(float* target, const float* source, float scale, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = detail::scaled_sum(target[i], source[i], scale);
}

}  // namespace

cudaError_t fill(cudaStream_t stream, float* target, float value, i64 n) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, value, n);
  return cudaGetLastError();
}

cudaError_t accumulate(cudaStream_t stream, float* target, const float* source, float scale,
                       i64 n) {
  if (n == 0) return cudaSuccess;
  accumulate_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, scale, n);
  return cudaGetLastError();
}

}  // namespace strata::gpu::cuda::kernels
