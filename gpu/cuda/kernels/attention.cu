// The attention kernels; see attention.h.
#include "gpu/cuda/kernels/attention.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// Shared memory a block may use without opting in.
constexpr i64 default_shared_bytes = 48 * 1024;

// Where one (batch, head) row's vectors live in the fused qkv (batch, seq_len, 3 * channels).
template <typename T>
struct HeadView {
  const T* qkv;
  i64 seq_len;
  i64 channels;
  i64 head_size;
  i64 batch_index;
  i64 head;

  __device__ const T* q(i64 t) const {
    return qkv + (batch_index * seq_len + t) * 3 * channels + head * head_size;
  }
  __device__ const T* k(i64 t) const { return q(t) + channels; }
  __device__ const T* v(i64 t) const { return q(t) + 2 * channels; }
};

// The dot product of two head_size vectors by a whole warp, in fp32; every lane gets it.
template <typename T>
__device__ float warp_dot(const T* a, const T* b, i64 head_size, int lane) {
  float partial = 0.0f;
  for (i64 i = lane; i < head_size; i += warp_size)
    partial += widen(a[i]) * widen(b[i]);
  return warp_sum(partial);
}

// One warp per query row (b, h, t); `scores` is the warp's seq_len floats of shared memory.
template <typename T>
__global__ void attention_forward_kernel(T* out, T* att, const T* qkv, i64 batch, i64 seq_len,
                                         i64 channels, i64 heads, float scale) {
  extern __shared__ float shared[];
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / warp_size) + warp;
  if (row >= batch * heads * seq_len) return;
  float* scores = shared + static_cast<i64>(warp) * seq_len;
  const i64 t = row % seq_len;
  const i64 head = (row / seq_len) % heads;
  const i64 b = row / (seq_len * heads);
  const HeadView<T> view{qkv, seq_len, channels, channels / heads, b, head};
  const T* q = view.q(t);
  for (i64 t2 = 0; t2 <= t; ++t2) {
    const float dot = warp_dot(q, view.k(t2), view.head_size, lane);
    if (lane == 0) scores[t2] = scale * dot;
  }
  __syncwarp();
  float max_score = -INFINITY;
  for (i64 t2 = lane; t2 <= t; t2 += warp_size)
    max_score = fmaxf(max_score, scores[t2]);
  max_score = warp_max(max_score);
  double sum = 0.0;
  for (i64 t2 = lane; t2 <= t; t2 += warp_size) {
    const float e = expf(scores[t2] - max_score);
    scores[t2] = e;
    sum += e;
  }
  const float inverse = static_cast<float>(1.0 / warp_sum(sum));
  T* att_row = att + row * seq_len;
  for (i64 t2 = lane; t2 < seq_len; t2 += warp_size) {
    if (t2 <= t) {
      scores[t2] *= inverse;
      att_row[t2] = narrow<T>(scores[t2]);
    } else {
      att_row[t2] = narrow<T>(0.0f);
    }
  }
  __syncwarp();
  T* out_row = out + (b * seq_len + t) * channels + head * view.head_size;
  for (i64 i = lane; i < view.head_size; i += warp_size) {
    float acc = 0.0f;
    for (i64 t2 = 0; t2 <= t; ++t2)
      acc += scores[t2] * widen(view.v(t2)[i]);
    out_row[i] = narrow<T>(acc);
  }
}

// Backward, part 1, one warp per query row (b, h, t): datt[t2] = dout[t] . v[t2], the row's
// sum of att * datt (kept in row_sums for part 2), dpre = att * (datt - sum), and
// dq[t] += scale * sum over t2 of dpre[t2] * k[t2].
template <typename T>
__global__ void attention_backward_query_kernel(T* dqkv, float* row_sums, const T* dout,
                                                const T* qkv, const T* att, i64 batch, i64 seq_len,
                                                i64 channels, i64 heads, float scale) {
  extern __shared__ float shared[];
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / warp_size) + warp;
  if (row >= batch * heads * seq_len) return;
  float* dpre = shared + static_cast<i64>(warp) * seq_len;
  const i64 t = row % seq_len;
  const i64 head = (row / seq_len) % heads;
  const i64 b = row / (seq_len * heads);
  const HeadView<T> view{qkv, seq_len, channels, channels / heads, b, head};
  const T* dout_t = dout + (b * seq_len + t) * channels + head * view.head_size;
  const T* att_row = att + row * seq_len;
  for (i64 t2 = 0; t2 <= t; ++t2) {
    const float datt = warp_dot(dout_t, view.v(t2), view.head_size, lane);
    if (lane == 0) dpre[t2] = datt;
  }
  __syncwarp();
  double weighted = 0.0;
  for (i64 t2 = lane; t2 <= t; t2 += warp_size)
    weighted += static_cast<double>(widen(att_row[t2])) * dpre[t2];
  const float row_sum = static_cast<float>(warp_sum(weighted));
  if (lane == 0) row_sums[row] = row_sum;
  __syncwarp();
  for (i64 t2 = lane; t2 <= t; t2 += warp_size)
    dpre[t2] = widen(att_row[t2]) * (dpre[t2] - row_sum);
  __syncwarp();
  T* dq = dqkv + (b * seq_len + t) * 3 * channels + head * view.head_size;
  for (i64 i = lane; i < view.head_size; i += warp_size) {
    float acc = 0.0f;
    for (i64 t2 = 0; t2 <= t; ++t2)
      acc += dpre[t2] * widen(view.k(t2)[i]);
    add_into(dq[i], scale * acc);
  }
}

// Backward, part 2, one warp per key row (b, h, t2): over the queries t >= t2 that see it,
//   dv[t2] += att[t, t2] * dout[t],  dk[t2] += scale * dpre[t, t2] * q[t],
// with dpre recomputed from att, dout . v and part 1's row sums. Each lane keeps head_size / 32
// sums in registers.
template <typename T>
__global__ void attention_backward_key_kernel(T* dqkv, const float* row_sums, const T* dout,
                                              const T* qkv, const T* att, i64 batch, i64 seq_len,
                                              i64 channels, i64 heads, float scale) {
  constexpr int per_lane = static_cast<int>(attention_head_size_max / warp_size);
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const i64 key_row = global_index() / warp_size;
  if (key_row >= batch * heads * seq_len) return;
  const i64 t2 = key_row % seq_len;
  const i64 head = (key_row / seq_len) % heads;
  const i64 b = key_row / (seq_len * heads);
  const HeadView<T> view{qkv, seq_len, channels, channels / heads, b, head};
  const i64 head_row = key_row - t2;  // the row of query 0 in att and row_sums
  float dk[per_lane] = {};
  float dv[per_lane] = {};
  const T* v = view.v(t2);
  for (i64 t = t2; t < seq_len; ++t) {
    const float a = widen(att[(head_row + t) * seq_len + t2]);
    const T* dout_t = dout + (b * seq_len + t) * channels + head * view.head_size;
    const float datt = warp_dot(dout_t, v, view.head_size, lane);
    const float dpre = a * (datt - row_sums[head_row + t]);
    const T* q = view.q(t);
    for (int j = 0; j < per_lane; ++j) {
      const i64 i = lane + static_cast<i64>(j) * warp_size;
      if (i < view.head_size) {
        dk[j] += dpre * widen(q[i]);
        dv[j] += a * widen(dout_t[i]);
      }
    }
  }
  T* dk_out = dqkv + (b * seq_len + t2) * 3 * channels + channels + head * view.head_size;
  T* dv_out = dk_out + channels;
  for (int j = 0; j < per_lane; ++j) {
    const i64 i = lane + static_cast<i64>(j) * warp_size;
    if (i < view.head_size) {
      add_into(dk_out[i], scale * dk[j]);
      add_into(dv_out[i], dv[j]);
    }
  }
}

// How many query rows (warps) a block takes, given seq_len floats of shared memory per warp.
int attention_warps_per_block(i64 seq_len) {
  const i64 per_warp = seq_len * static_cast<i64>(sizeof(float));
  i64 warps = default_shared_bytes / (per_warp > 0 ? per_warp : 1);
  if (warps > 8) warps = 8;
  if (warps < 1) warps = 1;
  return static_cast<int>(warps);
}

template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, i64 shared_bytes) {
  if (shared_bytes <= default_shared_bytes) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(shared_bytes));
}

float attention_scale(i64 channels, i64 heads) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(channels / heads)));
}

}  // namespace

template <typename T>
cudaError_t attention_forward(cudaStream_t stream, T* out, T* att, const T* qkv, i64 batch,
                              i64 seq_len, i64 channels, i64 heads) {
  const i64 rows = batch * heads * seq_len;
  if (rows == 0) return cudaSuccess;
  const int warps = attention_warps_per_block(seq_len);
  const i64 shared_bytes = static_cast<i64>(warps) * seq_len * static_cast<i64>(sizeof(float));
  cudaError_t status = allow_shared(attention_forward_kernel<T>, shared_bytes);
  if (status != cudaSuccess) return status;
  const auto blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  attention_forward_kernel<T>
      <<<blocks, warps * warp_size, static_cast<std::size_t>(shared_bytes), stream>>>(
          out, att, qkv, batch, seq_len, channels, heads, attention_scale(channels, heads));
  return cudaGetLastError();
}

template <typename T>
cudaError_t attention_backward(cudaStream_t stream, T* dqkv, float* row_sums, const T* dout,
                               const T* qkv, const T* att, i64 batch, i64 seq_len, i64 channels,
                               i64 heads) {
  const i64 rows = batch * heads * seq_len;
  if (rows == 0) return cudaSuccess;
  const float scale = attention_scale(channels, heads);
  const int warps = attention_warps_per_block(seq_len);
  const i64 shared_bytes = static_cast<i64>(warps) * seq_len * static_cast<i64>(sizeof(float));
  cudaError_t status = allow_shared(attention_backward_query_kernel<T>, shared_bytes);
  if (status != cudaSuccess) return status;
  const auto blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  attention_backward_query_kernel<T>
      <<<blocks, warps * warp_size, static_cast<std::size_t>(shared_bytes), stream>>>(
          dqkv, row_sums, dout, qkv, att, batch, seq_len, channels, heads, scale);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  attention_backward_key_kernel<T><<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dqkv, row_sums, dout, qkv, att, batch, seq_len, channels, heads, scale);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template cudaError_t attention_forward<T>(cudaStream_t, T*, T*, const T*, i64, i64, i64, i64); \
  template cudaError_t attention_backward<T>(cudaStream_t, T*, float*, const T*, const T*,       \
                                             const T*, i64, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
