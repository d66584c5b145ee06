// The matmul's own kernels; see matmul.h.
#include "gpu/cuda/kernels/matmul.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"
#include "gpu/cuda/kernels/gelu_math.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void column_sums_kernel(float* target, const T* source, i64 rows, i64 columns) {
  __shared__ float sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  float sum = 0.0f;
  if (c < columns)
    for_each_slice_row(rows, [&](i64 row) { sum += widen(source[row * columns + c]); });
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < columns) {
    for (int lane = 1; lane < row_lanes; ++lane)
      sum += sums[lane][threadIdx.x];
    atomicAdd(target + c, sum);
  }
}

// Each element is read and written by one thread, so `product` may alias `out` or `pre`.
template <typename T>
__global__ void finish_product_kernel(T* out, T* pre, const float* product, const T* bias, i64 rows,
                                      i64 columns) {
  for (i64 i = global_index(); i < rows * columns; i += global_stride()) {
    float x = product[i];
    if (bias != nullptr) x += widen(bias[i % columns]);
    if (pre != nullptr) {
      pre[i] = narrow<T>(x);
      x = gelu(x);
    }
    out[i] = narrow<T>(x);
  }
}

}  // namespace

template <typename T>
cudaError_t column_sums_accumulate(cudaStream_t stream, float* target, const T* source, i64 rows,
                                   i64 columns) {
  if (rows * columns == 0) return cudaSuccess;
  column_sums_kernel<<<column_grid(rows, columns), dim3(column_tile, row_lanes), 0, stream>>>(
      target, source, rows, columns);
  return cudaGetLastError();
}

template <typename T>
cudaError_t finish_product(cudaStream_t stream, T* out, T* pre, const float* product, const T* bias,
                           i64 rows, i64 columns) {
  if (rows * columns == 0) return cudaSuccess;
  finish_product_kernel<<<blocks_for(rows * columns), threads_per_block, 0, stream>>>(
      out, pre, product, bias, rows, columns);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                               \
  template cudaError_t column_sums_accumulate<T>(cudaStream_t, float*, const T*, i64, i64); \
  template cudaError_t finish_product<T>(cudaStream_t, T*, T*, const float*, const T*, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
