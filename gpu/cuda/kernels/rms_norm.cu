// The RMSNorm kernels; see rms_norm.h.
#include "gpu/cuda/kernels/rms_norm.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// With `residual` non-null the row is first residual = a + b, as in layer_norm.cu.
template <typename T>
__global__ void rms_norm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight,
                                        double eps, i64 rows, i64 channels, T* residual, const T* a,
                                        const T* b) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  if (residual != nullptr) {
    add_row(residual + row * channels, a + row * channels, b + row * channels, channels, lane);
    inp = residual;
  }
  const T* x = inp + row * channels;
  double squares = 0.0;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double value = widen(x[c]);
    squares += value * value;
  }
  const double r = 1.0 / sqrt(warp_sum(squares) / static_cast<double>(channels) + eps);
  T* y = out + row * channels;
  for (i64 c = lane; c < channels; c += warp_size)
    y[c] = narrow<T>(static_cast<float>(widen(x[c]) * r) * widen(weight[c]));
  if (lane == 0) rstd[row] = static_cast<float>(r);
}

template <typename T>
__global__ void rms_norm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                               const T* weight, const float* rstd, i64 rows,
                                               i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const T* x = inp + row * channels;
  const T* dy = dout + row * channels;
  const double r = rstd[row];
  double dot = 0.0;
  for (i64 c = lane; c < channels; c += warp_size)
    dot += static_cast<double>(widen(dy[c])) * widen(weight[c]) * (widen(x[c]) * r);
  const double mean_dot = warp_sum(dot) / static_cast<double>(channels);
  T* dx = dinp + row * channels;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double g = static_cast<double>(widen(dy[c])) * widen(weight[c]);
    add_into(dx[c], static_cast<float>(r * (g - widen(x[c]) * r * mean_dot)));
  }
}

template <typename T>
__global__ void rms_norm_backward_weight_kernel(float* dweight, const T* dout, const T* inp,
                                                const float* rstd, i64 rows, i64 channels) {
  __shared__ float sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  float sum = 0.0f;
  if (c < channels) {
    for_each_slice_row(rows, [&](i64 row) {
      sum += widen(dout[row * channels + c]) * (widen(inp[row * channels + c]) * rstd[row]);
    });
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int lane = 1; lane < row_lanes; ++lane)
      sum += sums[lane][threadIdx.x];
    atomicAdd(dweight + c, sum);
  }
}

}  // namespace

template <typename T>
cudaError_t rms_norm_forward(cudaStream_t stream, T* out, float* rstd, const T* inp,
                             const T* weight, double eps, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  rms_norm_forward_kernel<T><<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, rstd, inp, weight, eps, rows, channels, nullptr, nullptr, nullptr);
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_rms_norm_forward(cudaStream_t stream, T* residual, T* out, float* rstd,
                                      const T* a, const T* b, const T* weight, double eps, i64 rows,
                                      i64 channels) {
  if (rows == 0) return cudaSuccess;
  rms_norm_forward_kernel<T><<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, rstd, residual, weight, eps, rows, channels, residual, a, b);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rms_norm_backward(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                              const T* inp, const T* weight, const float* rstd, i64 rows,
                              i64 channels) {
  if (rows == 0) return cudaSuccess;
  rms_norm_backward_input_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dinp, dout, inp, weight, rstd, rows, channels);
  rms_norm_backward_weight_kernel<<<column_grid(rows, channels), dim3(column_tile, row_lanes), 0,
                                    stream>>>(dweight, dout, inp, rstd, rows, channels);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template cudaError_t rms_norm_forward<T>(cudaStream_t, T*, float*, const T*, const T*, double, \
                                           i64, i64);                                            \
  template cudaError_t residual_rms_norm_forward<T>(cudaStream_t, T*, T*, float*, const T*,      \
                                                    const T*, const T*, double, i64, i64);       \
  template cudaError_t rms_norm_backward<T>(cudaStream_t, T*, float*, const T*, const T*,        \
                                            const T*, const float*, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
