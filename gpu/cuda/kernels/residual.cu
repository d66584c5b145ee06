// The residual kernels; see residual.h.
#include "gpu/cuda/kernels/residual.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
}

template <typename T>
__global__ void residual_backward_kernel(T* da, T* db, const T* dout, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float d = widen(dout[i]);
    add_into(da[i], d);
    add_into(db[i], d);  // da == db (float) receives 2 * dout, as on the host
  }
}

}  // namespace

template <typename T>
cudaError_t residual_forward(cudaStream_t stream, T* out, const T* a, const T* b, i64 n) {
  if (n == 0) return cudaSuccess;
  residual_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_backward(cudaStream_t stream, T* da, T* db, const T* dout, i64 n) {
  if (n == 0) return cudaSuccess;
  residual_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(da, db, dout, n);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                          \
  template cudaError_t residual_forward<T>(cudaStream_t, T*, const T*, const T*, i64); \
  template cudaError_t residual_backward<T>(cudaStream_t, T*, T*, const T*, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
