// The KV cache kernels; see decode.h.
#include "gpu/cuda/kernels/decode.h"

#include <cfloat>

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr int decode_threads = 128;
constexpr int decode_warps = decode_threads / warp_size;
constexpr i64 max_head_dim = 256;
constexpr i64 max_split = 256;

template <typename T>
__global__ void kv_cache_write_kernel(T* k_cache, T* v_cache, const T* qkv,
                                      const std::int32_t* start, i64 batch, i64 tokens, i64 heads,
                                      i64 kv_heads, i64 head_dim, i64 max_seq) {
  const i64 qkv_stride = (heads + 2 * kv_heads) * head_dim;
  for (i64 i = global_index(); i < batch * tokens * kv_heads * head_dim; i += global_stride()) {
    const i64 d = i % head_dim;
    const i64 g = (i / head_dim) % kv_heads;
    const i64 t = (i / (head_dim * kv_heads)) % tokens;
    const i64 b = i / (head_dim * kv_heads * tokens);
    const T* row = qkv + (b * tokens + t) * qkv_stride;
    const i64 at = ((b * kv_heads + g) * max_seq + start[b] + t) * head_dim + d;
    k_cache[at] = row[(heads + g) * head_dim + d];
    v_cache[at] = row[(heads + kv_heads + g) * head_dim + d];
  }
}

// The largest of this block's `count` values in `values` (shared memory), on every thread.
__device__ float block_max_of(const float* values, i64 count, float* partial) {
  float m = -FLT_MAX;
  for (i64 j = threadIdx.x; j < count; j += decode_threads)
    m = fmaxf(m, values[j]);
  m = warp_max(m);
  if (threadIdx.x % warp_size == 0) partial[threadIdx.x / warp_size] = m;
  __syncthreads();
  float result = partial[0];
  for (int w = 1; w < decode_warps; ++w)
    result = fmaxf(result, partial[w]);
  __syncthreads();
  return result;
}

// One (split, sequence x head) block: its positions' maximum, exp-sum and weighted values.
template <typename T>
__global__ void decode_split_kernel(float* scratch, const T* qkv, const T* k_cache,
                                    const T* v_cache, const std::int32_t* length, i64 heads,
                                    i64 kv_heads, i64 head_dim, i64 max_seq, i64 split) {
  __shared__ float q[max_head_dim];
  __shared__ float scores[max_split];
  __shared__ float partial[decode_warps];
  const i64 splits = (max_seq + split - 1) / split;
  const i64 b = blockIdx.y / heads;
  const i64 h = blockIdx.y % heads;
  const i64 begin = static_cast<i64>(blockIdx.x) * split;
  const i64 end = min(begin + split, static_cast<i64>(length[b]));
  if (begin >= end) return;  // past the sequence: the combine reads only the splits it fills
  const float scale = rsqrtf(static_cast<float>(head_dim));
  const T* q_row = qkv + b * (heads + 2 * kv_heads) * head_dim + h * head_dim;
  for (i64 d = threadIdx.x; d < head_dim; d += decode_threads)
    q[d] = widen(q_row[d]);
  __syncthreads();
  const i64 cache_head = (b * kv_heads + h / (heads / kv_heads)) * max_seq * head_dim;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  for (i64 j = begin + threadIdx.x / warp_size; j < end; j += decode_warps) {
    const T* key = k_cache + cache_head + j * head_dim;
    float dot = 0.0f;
    for (i64 d = lane; d < head_dim; d += warp_size)
      dot += q[d] * widen(key[d]);
    dot = warp_sum(dot);
    if (lane == 0) scores[j - begin] = dot * scale;
  }
  __syncthreads();
  const i64 count = end - begin;
  const float block_max = block_max_of(scores, count, partial);
  for (i64 j = threadIdx.x; j < count; j += decode_threads)
    scores[j] = __expf(scores[j] - block_max);
  __syncthreads();
  float* out = scratch + (blockIdx.y * splits + blockIdx.x) * (head_dim + 2);
  for (i64 d = threadIdx.x; d < head_dim; d += decode_threads) {
    float acc = 0.0f;
    for (i64 j = 0; j < count; ++j)
      acc += scores[j] * widen(v_cache[cache_head + (begin + j) * head_dim + d]);
    out[2 + d] = acc;
  }
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (i64 j = 0; j < count; ++j)
      sum += scores[j];
    out[0] = block_max;
    out[1] = sum;
  }
}

// One (sequence x head) block: the splits below length rescaled to their common maximum.
template <typename T>
__global__ void decode_combine_kernel(T* out, const float* scratch, const std::int32_t* length,
                                      i64 heads, i64 head_dim, i64 max_seq, i64 split) {
  const i64 splits = (max_seq + split - 1) / split;
  const i64 b = blockIdx.x / heads;
  const i64 used = (static_cast<i64>(length[b]) + split - 1) / split;
  const float* parts = scratch + blockIdx.x * splits * (head_dim + 2);
  float common = -FLT_MAX;
  for (i64 s = 0; s < used; ++s)
    common = fmaxf(common, parts[s * (head_dim + 2)]);
  float total = 0.0f;
  for (i64 s = 0; s < used; ++s)
    total += parts[s * (head_dim + 2) + 1] * __expf(parts[s * (head_dim + 2)] - common);
  for (i64 d = threadIdx.x; d < head_dim; d += decode_threads) {
    float acc = 0.0f;
    for (i64 s = 0; s < used; ++s)
      acc += parts[s * (head_dim + 2) + 2 + d] * __expf(parts[s * (head_dim + 2)] - common);
    out[blockIdx.x * head_dim + d] = narrow<T>(acc / total);
  }
}

}  // namespace

template <typename T>
cudaError_t kv_cache_write(cudaStream_t stream, T* k_cache, T* v_cache, const T* qkv,
                           const std::int32_t* start, i64 batch, i64 tokens, i64 heads,
                           i64 kv_heads, i64 head_dim, i64 max_seq) {
  const i64 n = batch * tokens * kv_heads * head_dim;
  if (n == 0) return cudaSuccess;
  kv_cache_write_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      k_cache, v_cache, qkv, start, batch, tokens, heads, kv_heads, head_dim, max_seq);
  return cudaGetLastError();
}

template <typename T>
cudaError_t decode_attention(cudaStream_t stream, T* out, const T* qkv, const T* k_cache,
                             const T* v_cache, const std::int32_t* length, float* scratch,
                             i64 batch, i64 heads, i64 kv_heads, i64 head_dim, i64 max_seq,
                             i64 split) {
  if (head_dim > max_head_dim || split > max_split || split < 1) return cudaErrorInvalidValue;
  if (batch * heads == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((max_seq + split - 1) / split),
                  static_cast<unsigned>(batch * heads));
  decode_split_kernel<<<grid, decode_threads, 0, stream>>>(
      scratch, qkv, k_cache, v_cache, length, heads, kv_heads, head_dim, max_seq, split);
  decode_combine_kernel<<<static_cast<unsigned>(batch * heads), decode_threads, 0, stream>>>(
      out, scratch, length, heads, head_dim, max_seq, split);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                      \
  template cudaError_t kv_cache_write<T>(cudaStream_t, T*, T*, const T*, const std::int32_t*, i64, \
                                         i64, i64, i64, i64, i64);                                 \
  template cudaError_t decode_attention<T>(cudaStream_t, T*, const T*, const T*, const T*,         \
                                           const std::int32_t*, float*, i64, i64, i64, i64, i64,   \
                                           i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
