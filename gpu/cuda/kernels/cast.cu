// The cast kernels; see cast.h.
#include "gpu/cuda/kernels/cast.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void to_float_kernel(float* target, const T* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = widen(source[i]);
}

template <typename T>
__global__ void from_float_kernel(T* target, const float* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = narrow<T>(source[i]);
}

}  // namespace

template <typename T>
cudaError_t cast_to_float(cudaStream_t stream, float* target, const T* source, i64 n) {
  if (n == 0) return cudaSuccess;
  to_float_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cast_from_float(cudaStream_t stream, T* target, const float* source, i64 n) {
  if (n == 0) return cudaSuccess;
  from_float_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                 \
  template cudaError_t cast_to_float<T>(cudaStream_t, float*, const T*, i64); \
  template cudaError_t cast_from_float<T>(cudaStream_t, T*, const float*, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
