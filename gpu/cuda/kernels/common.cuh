#pragma once

// What the CUDA kernel files share: launch shapes, grid-stride indices, warp and block
// reductions, and the column-reduction tiling. Each .cu file includes it into its own unnamed
// namespace use; nothing here has external linkage.
#include <cuda_runtime.h>

#include "gpu/cuda/kernels/element_types.h"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr int threads_per_block = 256;
constexpr int warp_size = 32;
constexpr unsigned full_mask = 0xffffffffu;

// Enough blocks to cover n with threads_per_block threads, capped; kernels loop over the rest.
unsigned blocks_for(i64 n) {
  i64 blocks = (n + threads_per_block - 1) / threads_per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > (i64{1} << 20)) blocks = i64{1} << 20;
  return static_cast<unsigned>(blocks);
}

// Blocks for one warp per row, uncapped (the warp-per-row kernels do not loop over rows).
unsigned warp_blocks(i64 rows) {
  constexpr i64 warps_per_block = threads_per_block / warp_size;
  return static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block);
}

__device__ i64 global_index() {
  return static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ i64 global_stride() {
  return static_cast<i64>(gridDim.x) * blockDim.x;
}

template <typename T>
__device__ T warp_sum(T value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(full_mask, value, offset);
  return value;
}

__device__ float warp_max(float value) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(full_mask, value, offset));
  return value;
}

// Sums one double per thread over a block of threads_per_block threads; every thread gets the
// total. `scratch` holds threads_per_block / warp_size doubles.
__device__ double block_sum(double value, double* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  value = warp_sum(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < threads_per_block / warp_size; ++w)
    total += scratch[w];
  return total;
}

__device__ float block_max(float value, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < threads_per_block / warp_size; ++w)
    result = fmaxf(result, scratch[w]);
  return result;
}

// Column reductions: blocks of 32 columns x 8 row lanes over slices of rows_per_slice rows, block
// y summing slices y, y + gridDim.y, ... (gridDim.y stops at CUDA's 65,535, which 33.5M rows
// would pass), the blocks' sums added with atomicAdd (the targets accumulate anyway).
constexpr int column_tile = 32;
constexpr int row_lanes = 8;
constexpr i64 rows_per_slice = 512;
constexpr i64 grid_y_max = 65535;

dim3 column_grid(i64 rows, i64 columns) {
  i64 slices = (rows + rows_per_slice - 1) / rows_per_slice;
  slices = slices < 1 ? 1 : (slices > grid_y_max ? grid_y_max : slices);
  return dim3(static_cast<unsigned>((columns + column_tile - 1) / column_tile),
              static_cast<unsigned>(slices));
}

// Calls add(row) for each row of this thread's lane in this block's slices.
template <typename Add>
__device__ void for_each_slice_row(i64 rows, Add add) {
  const i64 stride = static_cast<i64>(gridDim.y) * rows_per_slice;
  for (i64 begin = static_cast<i64>(blockIdx.y) * rows_per_slice; begin < rows; begin += stride) {
    const i64 end = begin + rows_per_slice < rows ? begin + rows_per_slice : rows;
    for (i64 row = begin + threadIdx.y; row < end; row += row_lanes)
      add(row);
  }
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels
