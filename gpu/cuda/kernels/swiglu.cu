// The SwiGLU kernels; see swiglu.h.
#include "gpu/cuda/kernels/swiglu.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// exp of a non-positive argument only, as gpu/host/kernels/swiglu.cpp: never overflows.
__device__ float sigmoid(float g) {
  const float e = expf(-fabsf(g));
  return g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float g = widen(gate[i]);
    out[i] = narrow<T>(g * sigmoid(g) * widen(up[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                       i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float g = widen(gate[i]);
    const float s = sigmoid(g);
    const float d = widen(dout[i]);
    add_into(dgate[i], d * widen(up[i]) * (s + g * s * (1.0f - s)));
    add_into(dup[i], d * g * s);
  }
}

}  // namespace

template <typename T>
cudaError_t swiglu_forward(cudaStream_t stream, T* out, const T* gate, const T* up, i64 n) {
  if (n == 0) return cudaSuccess;
  swiglu_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, gate, up, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swiglu_backward(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                            const T* up, i64 n) {
  if (n == 0) return cudaSuccess;
  swiglu_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(dgate, dup, dout, gate,
                                                                          up, n);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                        \
  template cudaError_t swiglu_forward<T>(cudaStream_t, T*, const T*, const T*, i64); \
  template cudaError_t swiglu_backward<T>(cudaStream_t, T*, T*, const T*, const T*, const T*, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
