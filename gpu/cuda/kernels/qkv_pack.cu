// The grouped-query packing kernels; see qkv_pack.h.
#include "gpu/cuda/kernels/qkv_pack.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// A copy, through widen and narrow as every op reads and writes: a signalling NaN comes out quiet,
// as from the host's widen-copy-round.
template <typename T>
__global__ void qkv_pack_forward_kernel(T* qkv, const T* q, const T* k, const T* v, i64 rows,
                                        i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 width = heads * head_dim;
  const i64 repeat = heads / kv_heads;
  for (i64 i = global_index(); i < rows * 3 * width; i += global_stride()) {
    const i64 row = i / (3 * width);
    const i64 part = (i % (3 * width)) / width;  // 0 q, 1 k, 2 v
    const i64 within = i % width;
    if (part == 0) {
      qkv[i] = narrow<T>(widen(q[row * width + within]));
      continue;
    }
    const i64 from =
        row * kv_heads * head_dim + (within / head_dim) / repeat * head_dim + within % head_dim;
    qkv[i] = narrow<T>(widen(part == 1 ? k[from] : v[from]));
  }
}

template <typename T>
__global__ void qkv_pack_backward_kernel(T* dq, T* dk, T* dv, const T* dqkv, i64 rows, i64 heads,
                                         i64 kv_heads, i64 head_dim) {
  const i64 width = heads * head_dim;
  const i64 kv_width = kv_heads * head_dim;
  const i64 repeat = heads / kv_heads;
  // One thread per element of dq, then of dk and dv, each summing its repeats in head order.
  for (i64 i = global_index(); i < rows * (width + 2 * kv_width); i += global_stride()) {
    const i64 row = i / (width + 2 * kv_width);
    const i64 within = i % (width + 2 * kv_width);
    const T* in = dqkv + row * 3 * width;
    if (within < width) {
      add_into(dq[row * width + within], widen(in[within]));
      continue;
    }
    const bool is_k = within < width + kv_width;
    const i64 e = within - width - (is_k ? 0 : kv_width);  // element of the kv row
    const i64 g = e / head_dim, d = e % head_dim;
    float sum = 0.0f;
    for (i64 r = 0; r < repeat; ++r)
      sum += widen(in[(is_k ? width : 2 * width) + (g * repeat + r) * head_dim + d]);
    add_into((is_k ? dk : dv)[row * kv_width + e], sum);
  }
}

}  // namespace

template <typename T>
cudaError_t qkv_pack_forward(cudaStream_t stream, T* qkv, const T* q, const T* k, const T* v,
                             i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * 3 * heads * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      qkv, q, k, v, rows, heads, kv_heads, head_dim);
  return cudaGetLastError();
}

template <typename T>
cudaError_t qkv_pack_backward(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dqkv, i64 rows,
                              i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * (heads + 2 * kv_heads) * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      dq, dk, dv, dqkv, rows, heads, kv_heads, head_dim);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                   \
  template cudaError_t qkv_pack_forward<T>(cudaStream_t, T*, const T*, const T*, const T*, i64, \
                                           i64, i64, i64);                                      \
  template cudaError_t qkv_pack_backward<T>(cudaStream_t, T*, T*, T*, const T*, i64, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
