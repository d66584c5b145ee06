// The grouped-query packing kernels; see qkv_pack.h.
#include "gpu/cuda/kernels/qkv_pack.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// Which part of a packed row [q (heads x D) | k (kv_heads x D) | v (kv_heads x D)] element
// `within` lies in, and its index in that part's own row.
struct PackedElement {
  int part;  // 0 q, 1 k, 2 v
  i64 index;
};

__device__ PackedElement packed_element(i64 within, i64 q_width, i64 kv_width) {
  if (within < q_width) return {0, within};
  if (within < q_width + kv_width) return {1, within - q_width};
  return {2, within - q_width - kv_width};
}

// A copy, through widen and narrow as every op reads and writes: a signalling NaN comes out quiet,
// as from the host's widen-copy-round.
template <typename T>
__global__ void qkv_pack_forward_kernel(T* qkv, const T* q, const T* k, const T* v, i64 rows,
                                        i64 q_width, i64 kv_width) {
  const i64 row_width = q_width + 2 * kv_width;
  for (i64 i = global_index(); i < rows * row_width; i += global_stride()) {
    const i64 row = i / row_width;
    const PackedElement e = packed_element(i % row_width, q_width, kv_width);
    const T* source = e.part == 0 ? q + row * q_width : (e.part == 1 ? k : v) + row * kv_width;
    qkv[i] = narrow<T>(widen(source[e.index]));
  }
}

template <typename T>
__global__ void qkv_pack_backward_kernel(T* dq, T* dk, T* dv, const T* dqkv, i64 rows, i64 q_width,
                                         i64 kv_width) {
  const i64 row_width = q_width + 2 * kv_width;
  for (i64 i = global_index(); i < rows * row_width; i += global_stride()) {
    const i64 row = i / row_width;
    const PackedElement e = packed_element(i % row_width, q_width, kv_width);
    T* target = e.part == 0 ? dq + row * q_width : (e.part == 1 ? dk : dv) + row * kv_width;
    add_into(target[e.index], widen(dqkv[i]));
  }
}

}  // namespace

template <typename T>
cudaError_t qkv_pack_forward(cudaStream_t stream, T* qkv, const T* q, const T* k, const T* v,
                             i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * (heads + 2 * kv_heads) * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      qkv, q, k, v, rows, heads * head_dim, kv_heads * head_dim);
  return cudaGetLastError();
}

template <typename T>
cudaError_t qkv_pack_backward(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dqkv, i64 rows,
                              i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * (heads + 2 * kv_heads) * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      dq, dk, dv, dqkv, rows, heads * head_dim, kv_heads * head_dim);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                   \
  template cudaError_t qkv_pack_forward<T>(cudaStream_t, T*, const T*, const T*, const T*, i64, \
                                           i64, i64, i64);                                      \
  template cudaError_t qkv_pack_backward<T>(cudaStream_t, T*, T*, T*, const T*, i64, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
