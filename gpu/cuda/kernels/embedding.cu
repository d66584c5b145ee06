// The embedding kernels; see embedding.h. Grid-stride loops, 64-bit indices.
#include "gpu/cuda/kernels/embedding.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void embedding_forward_kernel(T* out, const std::int32_t* tokens, const T* wte,
                                         const T* wpe, const std::int32_t* start, i64 rows,
                                         i64 seq_len, i64 channels, i64 vocab) {
  for (i64 i = global_index(); i < rows * channels; i += global_stride()) {
    const i64 row = i / channels;
    const i64 c = i % channels;
    const i64 token = tokens[row];
    if (token < 0 || token >= vocab) __trap();  // a programmer error, as the host asserts
    float value = widen(wte[token * channels + c]);
    if (wpe != nullptr) {
      const i64 position = row % seq_len + (start != nullptr ? start[row / seq_len] : 0);
      value += widen(wpe[position * channels + c]);
    }
    out[i] = narrow<T>(value);
  }
}

template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout,
                                              const std::int32_t* tokens, i64 rows, i64 channels,
                                              i64 vocab) {
  for (i64 i = global_index(); i < rows * channels; i += global_stride()) {
    const i64 token = tokens[i / channels];
    if (token < 0 || token >= vocab) __trap();
    atomicAdd(dwte + token * channels + i % channels, widen(dout[i]));
  }
}

template <typename T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, i64 batch, i64 seq_len,
                                              i64 channels) {
  for (i64 i = global_index(); i < seq_len * channels; i += global_stride()) {
    float sum = 0.0f;
    for (i64 b = 0; b < batch; ++b)
      sum += widen(dout[b * seq_len * channels + i]);
    dwpe[i] += sum;
  }
}

}  // namespace

template <typename T>
cudaError_t embedding_forward(cudaStream_t stream, T* out, const std::int32_t* tokens, const T* wte,
                              const T* wpe, const std::int32_t* start, i64 batch, i64 seq_len,
                              i64 channels, i64 vocab) {
  const i64 rows = batch * seq_len;
  if (rows * channels == 0) return cudaSuccess;
  embedding_forward_kernel<<<blocks_for(rows * channels), threads_per_block, 0, stream>>>(
      out, tokens, wte, wpe, start, rows, seq_len, channels, vocab);
  return cudaGetLastError();
}

template <typename T>
cudaError_t embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const T* dout,
                               const std::int32_t* tokens, i64 batch, i64 seq_len, i64 channels,
                               i64 vocab) {
  const i64 rows = batch * seq_len;
  if (rows * channels == 0) return cudaSuccess;
  embedding_backward_wte_kernel<<<blocks_for(rows * channels), threads_per_block, 0, stream>>>(
      dwte, dout, tokens, rows, channels, vocab);
  if (dwpe != nullptr) {
    embedding_backward_wpe_kernel<<<blocks_for(seq_len * channels), threads_per_block, 0, stream>>>(
        dwpe, dout, batch, seq_len, channels);
  }
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                   \
  template cudaError_t embedding_forward<T>(cudaStream_t, T*, const std::int32_t*, const T*,    \
                                            const T*, const std::int32_t*, i64, i64, i64, i64); \
  template cudaError_t embedding_backward<T>(cudaStream_t, float*, float*, const T*,            \
                                             const std::int32_t*, i64, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
