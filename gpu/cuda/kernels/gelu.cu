// The GELU kernels; see gelu.h.
#include "gpu/cuda/kernels/gelu.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"
#include "gpu/cuda/kernels/gelu_math.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    out[i] = narrow<T>(gelu(widen(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    add_into(dinp[i], gelu_slope(widen(inp[i])) * widen(dout[i]));
}

}  // namespace

template <typename T>
cudaError_t gelu_forward(cudaStream_t stream, T* out, const T* inp, i64 n) {
  if (n == 0) return cudaSuccess;
  gelu_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, inp, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t gelu_backward(cudaStream_t stream, T* dinp, const T* inp, const T* dout, i64 n) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(dinp, inp, dout, n);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                            \
  template cudaError_t gelu_forward<T>(cudaStream_t, T*, const T*, i64); \
  template cudaError_t gelu_backward<T>(cudaStream_t, T*, const T*, const T*, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
