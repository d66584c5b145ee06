// The layer norm kernels; see layer_norm.h.
#include "gpu/cuda/kernels/layer_norm.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr double layer_norm_epsilon = 1e-5;  // gpu/host/kernels/layer_norm.h

// With `residual` non-null the row is first residual = a + b (rounded once), which the lane then
// reads back from its own stores: the columns a lane writes are the ones it reads.
template <typename T>
__global__ void layer_norm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                          const T* weight, const T* bias, i64 rows, i64 channels,
                                          T* residual, const T* a, const T* b) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  if (residual != nullptr) {
    add_row(residual + row * channels, a + row * channels, b + row * channels, channels, lane);
    inp = residual;
  }
  const T* x = inp + row * channels;
  double sum = 0.0;
  for (i64 c = lane; c < channels; c += warp_size)
    sum += widen(x[c]);
  const double row_mean = warp_sum(sum) / static_cast<double>(channels);
  double squares = 0.0;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double shifted = widen(x[c]) - row_mean;
    squares += shifted * shifted;
  }
  const double variance = warp_sum(squares) / static_cast<double>(channels);
  const float m = static_cast<float>(row_mean);
  const float s = static_cast<float>(1.0 / sqrt(variance + layer_norm_epsilon));
  T* y = out + row * channels;
  for (i64 c = lane; c < channels; c += warp_size)
    y[c] = narrow<T>((widen(x[c]) - m) * s * widen(weight[c]) + widen(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename T>
__global__ void layer_norm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                 const T* weight, const float* mean,
                                                 const float* rstd, i64 rows, i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const T* x = inp + row * channels;
  const T* dy = dout + row * channels;
  const float m = mean[row];
  const float s = rstd[row];
  double sum_g = 0.0;
  double sum_g_xhat = 0.0;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double g = static_cast<double>(widen(dy[c])) * widen(weight[c]);
    sum_g += g;
    sum_g_xhat += g * ((widen(x[c]) - m) * s);
  }
  const float mean_g = static_cast<float>(warp_sum(sum_g) / static_cast<double>(channels));
  const float mean_g_xhat =
      static_cast<float>(warp_sum(sum_g_xhat) / static_cast<double>(channels));
  T* dx = dinp + row * channels;
  for (i64 c = lane; c < channels; c += warp_size) {
    const float xhat = (widen(x[c]) - m) * s;
    add_into(dx[c], s * (widen(dy[c]) * widen(weight[c]) - mean_g - xhat * mean_g_xhat));
  }
}

template <typename T>
__global__ void layer_norm_backward_params_kernel(float* dweight, float* dbias, const T* dout,
                                                  const T* inp, const float* mean,
                                                  const float* rstd, i64 rows, i64 channels) {
  __shared__ float weight_sums[row_lanes][column_tile];
  __shared__ float bias_sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  float weight_sum = 0.0f;
  float bias_sum = 0.0f;
  if (c < channels) {
    for_each_slice_row(rows, [&](i64 row) {
      const float dy = widen(dout[row * channels + c]);
      weight_sum += dy * ((widen(inp[row * channels + c]) - mean[row]) * rstd[row]);
      bias_sum += dy;
    });
  }
  weight_sums[threadIdx.y][threadIdx.x] = weight_sum;
  bias_sums[threadIdx.y][threadIdx.x] = bias_sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int lane = 1; lane < row_lanes; ++lane) {
      weight_sum += weight_sums[lane][threadIdx.x];
      bias_sum += bias_sums[lane][threadIdx.x];
    }
    atomicAdd(dweight + c, weight_sum);
    atomicAdd(dbias + c, bias_sum);
  }
}

}  // namespace

template <typename T>
cudaError_t layer_norm_forward(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp,
                               const T* weight, const T* bias, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_forward_kernel<T><<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, rows, channels, nullptr, nullptr, nullptr);
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_layer_norm_forward(cudaStream_t stream, T* residual, T* out, float* mean,
                                        float* rstd, const T* a, const T* b, const T* weight,
                                        const T* bias, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_forward_kernel<T><<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, mean, rstd, residual, weight, bias, rows, channels, residual, a, b);
  return cudaGetLastError();
}

template <typename T>
cudaError_t layer_norm_backward(cudaStream_t stream, T* dinp, float* dweight, float* dbias,
                                const T* dout, const T* inp, const T* weight, const float* mean,
                                const float* rstd, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_backward_input_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, channels);
  layer_norm_backward_params_kernel<<<column_grid(rows, channels), dim3(column_tile, row_lanes), 0,
                                      stream>>>(dweight, dbias, dout, inp, mean, rstd, rows,
                                                channels);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                      \
  template cudaError_t layer_norm_forward<T>(cudaStream_t, T*, float*, float*, const T*, const T*, \
                                             const T*, i64, i64);                                  \
  template cudaError_t residual_layer_norm_forward<T>(                                             \
      cudaStream_t, T*, T*, float*, float*, const T*, const T*, const T*, const T*, i64, i64);     \
  template cudaError_t layer_norm_backward<T>(cudaStream_t, T*, float*, float*, const T*,          \
                                              const T*, const T*, const float*, const float*, i64, \
                                              i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
