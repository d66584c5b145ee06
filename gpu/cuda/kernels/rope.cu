// The rotary embedding kernel; see rope.h.
#include "gpu/cuda/kernels/rope.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// sign +1 rotates, -1 applies the transpose (gpu/host/kernels/rope.cpp).
template <typename T>
__global__ void rope_kernel(T* x, const float* inv_freq, const std::int32_t* start, i64 rows,
                            i64 seq_len, i64 heads, i64 head_dim, i64 row_stride, float sign) {
  const i64 half = head_dim / 2;
  for (i64 i = global_index(); i < rows * heads * half; i += global_stride()) {
    const i64 j = i % half;
    const i64 h = (i / half) % heads;
    const i64 row = i / (half * heads);
    const i64 position = row % seq_len + (start != nullptr ? start[row / seq_len] : 0);
    const float angle = static_cast<float>(position) * inv_freq[j];
    const float cos = cosf(angle);
    const float sin = sign * sinf(angle);
    T* head = x + row * row_stride + h * head_dim;
    const float x1 = widen(head[j]);
    const float x2 = widen(head[j + half]);
    head[j] = narrow<T>(x1 * cos - x2 * sin);
    head[j + half] = narrow<T>(x2 * cos + x1 * sin);
  }
}

template <typename T>
cudaError_t launch_rope(cudaStream_t stream, T* x, const float* inv_freq, const std::int32_t* start,
                        i64 batch, i64 seq_len, i64 heads, i64 head_dim, i64 row_stride,
                        float sign) {
  const i64 pairs = batch * seq_len * heads * (head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  rope_kernel<<<blocks_for(pairs), threads_per_block, 0, stream>>>(
      x, inv_freq, start, batch * seq_len, seq_len, heads, head_dim, row_stride, sign);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t rope_forward(cudaStream_t stream, T* x, const float* inv_freq,
                         const std::int32_t* start, i64 batch, i64 seq_len, i64 heads, i64 head_dim,
                         i64 row_stride) {
  return launch_rope(stream, x, inv_freq, start, batch, seq_len, heads, head_dim, row_stride, 1.0f);
}

template <typename T>
cudaError_t rope_backward(cudaStream_t stream, T* dx, const float* inv_freq, i64 batch, i64 seq_len,
                          i64 heads, i64 head_dim, i64 row_stride) {
  return launch_rope(stream, dx, inv_freq, nullptr, batch, seq_len, heads, head_dim, row_stride,
                     -1.0f);
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template cudaError_t rope_forward<T>(cudaStream_t, T*, const float*, const std::int32_t*, i64, \
                                       i64, i64, i64, i64);                                      \
  template cudaError_t rope_backward<T>(cudaStream_t, T*, const float*, i64, i64, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
