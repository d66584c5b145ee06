// The CUDA kernels behind gpu::Ops; see kernels.h. Straightforward, correct kernels that mirror
// the host kernels' arithmetic (gpu/host/kernels/*.cpp), written for clarity first: grid-stride
// loops, one warp per row where a row is reduced, 64-bit indices throughout.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/half_bits.h"
#include "gpu/cuda/kernel_common.cuh"
#include "gpu/cuda/kernels.h"
#include "gpu/detail/elementwise.h"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr double layer_norm_epsilon = 1e-5;  // gpu/host/kernels/layer_norm.h
constexpr float gelu_cubic = 0.044715f;
constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)
// Shared memory a block may use without opting in.
constexpr i64 default_shared_bytes = 48 * 1024;

// ---- embedding

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte,
                                         const float* wpe, i64 rows, i64 seq_len, i64 channels,
                                         i64 vocab) {
  for (i64 i = global_index(); i < rows * channels; i += global_stride()) {
    const i64 row = i / channels;
    const i64 c = i % channels;
    const i64 token = tokens[row];
    if (token < 0 || token >= vocab) __trap();  // a programmer error, as the host asserts
    out[i] =
        wte[token * channels + c] + (wpe != nullptr ? wpe[(row % seq_len) * channels + c] : 0.0f);
  }
}

__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout,
                                              const std::int32_t* tokens, i64 rows, i64 channels,
                                              i64 vocab) {
  for (i64 i = global_index(); i < rows * channels; i += global_stride()) {
    const i64 token = tokens[i / channels];
    if (token < 0 || token >= vocab) __trap();
    atomicAdd(dwte + token * channels + i % channels, dout[i]);
  }
}

__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, i64 batch,
                                              i64 seq_len, i64 channels) {
  for (i64 i = global_index(); i < seq_len * channels; i += global_stride()) {
    float sum = 0.0f;
    for (i64 b = 0; b < batch; ++b)
      sum += dout[b * seq_len * channels + i];
    dwpe[i] += sum;
  }
}

// ---- layer norm

__global__ void layer_norm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, i64 rows,
                                          i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  double sum = 0.0;
  for (i64 c = lane; c < channels; c += warp_size)
    sum += x[c];
  const double row_mean = warp_sum(sum) / static_cast<double>(channels);
  double squares = 0.0;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double shifted = x[c] - row_mean;
    squares += shifted * shifted;
  }
  const double variance = warp_sum(squares) / static_cast<double>(channels);
  const float m = static_cast<float>(row_mean);
  const float s = static_cast<float>(1.0 / sqrt(variance + layer_norm_epsilon));
  float* y = out + row * channels;
  for (i64 c = lane; c < channels; c += warp_size)
    y[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layer_norm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                 const float* weight, const float* mean,
                                                 const float* rstd, i64 rows, i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  const float* dy = dout + row * channels;
  const float m = mean[row];
  const float s = rstd[row];
  double sum_g = 0.0;
  double sum_g_xhat = 0.0;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double g = static_cast<double>(dy[c]) * weight[c];
    sum_g += g;
    sum_g_xhat += g * ((x[c] - m) * s);
  }
  const float mean_g = static_cast<float>(warp_sum(sum_g) / static_cast<double>(channels));
  const float mean_g_xhat =
      static_cast<float>(warp_sum(sum_g_xhat) / static_cast<double>(channels));
  float* dx = dinp + row * channels;
  for (i64 c = lane; c < channels; c += warp_size) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (dy[c] * weight[c] - mean_g - xhat * mean_g_xhat);
  }
}

__global__ void layer_norm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                  const float* inp, const float* mean,
                                                  const float* rstd, i64 rows, i64 channels) {
  __shared__ float weight_sums[row_lanes][column_tile];
  __shared__ float bias_sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  const i64 row_begin = static_cast<i64>(blockIdx.y) * rows_per_slice;
  const i64 row_end = row_begin + rows_per_slice < rows ? row_begin + rows_per_slice : rows;
  float weight_sum = 0.0f;
  float bias_sum = 0.0f;
  if (c < channels) {
    for (i64 row = row_begin + threadIdx.y; row < row_end; row += row_lanes) {
      const float dy = dout[row * channels + c];
      weight_sum += dy * ((inp[row * channels + c] - mean[row]) * rstd[row]);
      bias_sum += dy;
    }
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

__global__ void column_sums_kernel(float* target, const float* source, i64 rows, i64 columns) {
  __shared__ float sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  const i64 row_begin = static_cast<i64>(blockIdx.y) * rows_per_slice;
  const i64 row_end = row_begin + rows_per_slice < rows ? row_begin + rows_per_slice : rows;
  float sum = 0.0f;
  if (c < columns) {
    for (i64 row = row_begin + threadIdx.y; row < row_end; row += row_lanes)
      sum += source[row * columns + c];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < columns) {
    for (int lane = 1; lane < row_lanes; ++lane)
      sum += sums[lane][threadIdx.x];
    atomicAdd(target + c, sum);
  }
}

__global__ void add_bias_kernel(float* out, const float* bias, i64 rows, i64 columns) {
  for (i64 i = global_index(); i < rows * columns; i += global_stride())
    out[i] += bias[i % columns];
}

// ---- attention

// Where one (batch, head) row's vectors live in the fused qkv (batch, seq_len, 3 * channels).
struct HeadView {
  const float* qkv;
  i64 seq_len;
  i64 channels;
  i64 head_size;
  i64 batch_index;
  i64 head;

  __device__ const float* q(i64 t) const {
    return qkv + (batch_index * seq_len + t) * 3 * channels + head * head_size;
  }
  __device__ const float* k(i64 t) const { return q(t) + channels; }
  __device__ const float* v(i64 t) const { return q(t) + 2 * channels; }
};

// The dot product of two head_size vectors by a whole warp; every lane gets it.
__device__ float warp_dot(const float* a, const float* b, i64 head_size, int lane) {
  float partial = 0.0f;
  for (i64 i = lane; i < head_size; i += warp_size)
    partial += a[i] * b[i];
  return warp_sum(partial);
}

// One warp per query row (b, h, t); `scores` is the warp's seq_len floats of shared memory.
__global__ void attention_forward_kernel(float* out, float* att, const float* qkv, i64 batch,
                                         i64 seq_len, i64 channels, i64 heads, float scale) {
  extern __shared__ float shared[];
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / warp_size) + warp;
  if (row >= batch * heads * seq_len) return;
  float* scores = shared + static_cast<i64>(warp) * seq_len;
  const i64 t = row % seq_len;
  const i64 head = (row / seq_len) % heads;
  const i64 b = row / (seq_len * heads);
  const HeadView view{qkv, seq_len, channels, channels / heads, b, head};
  const float* q = view.q(t);
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
  float* att_row = att + row * seq_len;
  for (i64 t2 = lane; t2 < seq_len; t2 += warp_size) {
    if (t2 <= t) {
      scores[t2] *= inverse;
      att_row[t2] = scores[t2];
    } else {
      att_row[t2] = 0.0f;
    }
  }
  __syncwarp();
  float* out_row = out + (b * seq_len + t) * channels + head * view.head_size;
  for (i64 i = lane; i < view.head_size; i += warp_size) {
    float acc = 0.0f;
    for (i64 t2 = 0; t2 <= t; ++t2)
      acc += scores[t2] * view.v(t2)[i];
    out_row[i] = acc;
  }
}

// Backward, part 1, one warp per query row (b, h, t): datt[t2] = dout[t] . v[t2], the row's
// sum of att * datt (kept in row_sums for part 2), dpre = att * (datt - sum), and
// dq[t] += scale * sum over t2 of dpre[t2] * k[t2].
__global__ void attention_backward_query_kernel(float* dqkv, float* row_sums, const float* dout,
                                                const float* qkv, const float* att, i64 batch,
                                                i64 seq_len, i64 channels, i64 heads, float scale) {
  extern __shared__ float shared[];
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / warp_size) + warp;
  if (row >= batch * heads * seq_len) return;
  float* dpre = shared + static_cast<i64>(warp) * seq_len;
  const i64 t = row % seq_len;
  const i64 head = (row / seq_len) % heads;
  const i64 b = row / (seq_len * heads);
  const HeadView view{qkv, seq_len, channels, channels / heads, b, head};
  const float* dout_t = dout + (b * seq_len + t) * channels + head * view.head_size;
  const float* att_row = att + row * seq_len;
  for (i64 t2 = 0; t2 <= t; ++t2) {
    const float datt = warp_dot(dout_t, view.v(t2), view.head_size, lane);
    if (lane == 0) dpre[t2] = datt;
  }
  __syncwarp();
  double weighted = 0.0;
  for (i64 t2 = lane; t2 <= t; t2 += warp_size)
    weighted += static_cast<double>(att_row[t2]) * dpre[t2];
  const float row_sum = static_cast<float>(warp_sum(weighted));
  if (lane == 0) row_sums[row] = row_sum;
  __syncwarp();
  for (i64 t2 = lane; t2 <= t; t2 += warp_size)
    dpre[t2] = att_row[t2] * (dpre[t2] - row_sum);
  __syncwarp();
  float* dq = dqkv + (b * seq_len + t) * 3 * channels + head * view.head_size;
  for (i64 i = lane; i < view.head_size; i += warp_size) {
    float acc = 0.0f;
    for (i64 t2 = 0; t2 <= t; ++t2)
      acc += dpre[t2] * view.k(t2)[i];
    dq[i] += scale * acc;
  }
}

// Backward, part 2, one warp per key row (b, h, t2): over the queries t >= t2 that see it,
//   dv[t2] += att[t, t2] * dout[t],  dk[t2] += scale * dpre[t, t2] * q[t],
// with dpre recomputed from att, dout . v and part 1's row sums. Each lane keeps head_size / 32
// sums in registers.
__global__ void attention_backward_key_kernel(float* dqkv, const float* row_sums, const float* dout,
                                              const float* qkv, const float* att, i64 batch,
                                              i64 seq_len, i64 channels, i64 heads, float scale) {
  constexpr int per_lane = static_cast<int>(attention_head_size_max / warp_size);
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const i64 key_row = global_index() / warp_size;
  if (key_row >= batch * heads * seq_len) return;
  const i64 t2 = key_row % seq_len;
  const i64 head = (key_row / seq_len) % heads;
  const i64 b = key_row / (seq_len * heads);
  const HeadView view{qkv, seq_len, channels, channels / heads, b, head};
  const i64 head_row = key_row - t2;  // the row of query 0 in att and row_sums
  float dk[per_lane] = {};
  float dv[per_lane] = {};
  const float* v = view.v(t2);
  for (i64 t = t2; t < seq_len; ++t) {
    const float a = att[(head_row + t) * seq_len + t2];
    const float* dout_t = dout + (b * seq_len + t) * channels + head * view.head_size;
    const float datt = warp_dot(dout_t, v, view.head_size, lane);
    const float dpre = a * (datt - row_sums[head_row + t]);
    const float* q = view.q(t);
    for (int j = 0; j < per_lane; ++j) {
      const i64 i = lane + static_cast<i64>(j) * warp_size;
      if (i < view.head_size) {
        dk[j] += dpre * q[i];
        dv[j] += a * dout_t[i];
      }
    }
  }
  float* dk_out = dqkv + (b * seq_len + t2) * 3 * channels + channels + head * view.head_size;
  float* dv_out = dk_out + channels;
  for (int j = 0; j < per_lane; ++j) {
    const i64 i = lane + static_cast<i64>(j) * warp_size;
    if (i < view.head_size) {
      dk_out[i] += scale * dk[j];
      dv_out[i] += dv[j];
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

// ---- elementwise

// tanh(u) and sech^2(u) from one exp(-2|u|), as gpu/host/kernels/gelu.cpp computes them.
__device__ void tanh_and_sech_squared(float u, float& tanh_u, float& sech_squared) {
  const float e = expf(-2.0f * fabsf(u));
  const float inverse = 1.0f / (1.0f + e);
  const float magnitude = (1.0f - e) * inverse;
  tanh_u = u < 0.0f ? -magnitude : magnitude;
  sech_squared = 4.0f * e * inverse * inverse;
}

__global__ void gelu_forward_kernel(float* out, const float* inp, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    const float u = gelu_scale * (x + gelu_cubic * x * x * x);
    float tanh_u = 0.0f;
    float sech_squared = 0.0f;
    tanh_and_sech_squared(u, tanh_u, sech_squared);
    out[i] = 0.5f * x * (1.0f + tanh_u);
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float x = inp[i];
    const float u = gelu_scale * (x + gelu_cubic * x * x * x);
    float tanh_u = 0.0f;
    float sech_squared = 0.0f;
    tanh_and_sech_squared(u, tanh_u, sech_squared);
    const float slope = sech_squared == 0.0f ? 0.0f
                                             : 0.5f * x * sech_squared * gelu_scale *
                                                   (1.0f + 3.0f * gelu_cubic * x * x);
    dinp[i] += (0.5f * (1.0f + tanh_u) + slope) * dout[i];
  }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da, float* db, const float* dout, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float d = dout[i];
    da[i] += d;
    db[i] += d;  // da == db receives 2 * dout, as on the host
  }
}

// ---- cross-entropy

__global__ void cross_entropy_forward_kernel(float* losses, float* lse, const float* logits,
                                             const std::int32_t* targets, i64 vocab,
                                             i64 vocab_padded) {
  __shared__ float max_scratch[threads_per_block / warp_size];
  __shared__ double sum_scratch[threads_per_block / warp_size];
  const i64 row = blockIdx.x;
  const i64 target = targets[row];
  if (target < 0 || target >= vocab) __trap();
  const float* x = logits + row * vocab_padded;
  float max_logit = -INFINITY;
  for (i64 c = threadIdx.x; c < vocab; c += blockDim.x)
    max_logit = fmaxf(max_logit, x[c]);
  max_logit = block_max(max_logit, max_scratch);
  double sum = 0.0;
  for (i64 c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += expf(x[c] - max_logit);
  sum = block_sum(sum, sum_scratch);
  if (threadIdx.x == 0) {
    const double row_lse = static_cast<double>(max_logit) + log(sum);
    lse[row] = static_cast<float>(row_lse);
    losses[row] = static_cast<float>(row_lse - static_cast<double>(x[target]));
  }
}

__global__ void mean_kernel(float* mean, const float* values, i64 n) {
  __shared__ double scratch[threads_per_block / warp_size];
  double sum = 0.0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x)
    sum += values[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *mean = n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                              const std::int32_t* targets, const float* dlosses,
                                              i64 rows, i64 vocab, i64 vocab_padded) {
  for (i64 i = global_index(); i < rows * vocab_padded; i += global_stride()) {
    const i64 row = i / vocab_padded;
    const i64 c = i % vocab_padded;
    if (c >= vocab) {
      dlogits[i] = 0.0f;
      continue;
    }
    const i64 target = targets[row];
    if (target < 0 || target >= vocab) __trap();
    const float indicator = c == target ? 1.0f : 0.0f;
    dlogits[i] = (expf(logits[i] - lse[row]) - indicator) * dlosses[row];
  }
}

// ---- casts, bit for bit gpu/host/kernels/cast.h

__global__ void bf16_to_fp32_kernel(float* target, const std::uint16_t* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = bf16_bits_to_float(source[i]);
}

__global__ void fp16_to_fp32_kernel(float* target, const std::uint16_t* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = fp16_bits_to_float(source[i]);
}

__global__ void fp32_to_bf16_kernel(std::uint16_t* target, const float* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = float_to_bf16_bits(source[i]);
}

__global__ void fp32_to_fp16_kernel(std::uint16_t* target, const float* source, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = float_to_fp16_bits(source[i]);
}

__global__ void fill_kernel(float* target, float value, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = value;
}

// The host's arithmetic, roundings spelled out (gpu/detail/elementwise.h): written as
// `target[i] += source[i] * scale`, nvcc fused it into one FFMA and the result differed from the
// host's in the last bit.
__global__ void accumulate_kernel(float* target, const float* source, float scale, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    target[i] = detail::scaled_sum(target[i], source[i], scale);
}

float attention_scale(i64 channels, i64 heads) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(channels / heads)));
}

}  // namespace

cudaError_t embedding_forward(cudaStream_t stream, float* out, const std::int32_t* tokens,
                              const float* wte, const float* wpe, i64 batch, i64 seq_len,
                              i64 channels, i64 vocab) {
  const i64 rows = batch * seq_len;
  if (rows * channels == 0) return cudaSuccess;
  embedding_forward_kernel<<<blocks_for(rows * channels), threads_per_block, 0, stream>>>(
      out, tokens, wte, wpe, rows, seq_len, channels, vocab);
  return cudaGetLastError();
}

cudaError_t embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
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

cudaError_t layer_norm_forward(cudaStream_t stream, float* out, float* mean, float* rstd,
                               const float* inp, const float* weight, const float* bias, i64 rows,
                               i64 channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_forward_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, rows, channels);
  return cudaGetLastError();
}

cudaError_t layer_norm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias,
                                const float* dout, const float* inp, const float* weight,
                                const float* mean, const float* rstd, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  layer_norm_backward_input_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, channels);
  layer_norm_backward_params_kernel<<<column_grid(rows, channels), dim3(column_tile, row_lanes), 0,
                                      stream>>>(dweight, dbias, dout, inp, mean, rstd, rows,
                                                channels);
  return cudaGetLastError();
}

cudaError_t add_bias(cudaStream_t stream, float* out, const float* bias, i64 rows, i64 columns) {
  if (rows * columns == 0) return cudaSuccess;
  add_bias_kernel<<<blocks_for(rows * columns), threads_per_block, 0, stream>>>(out, bias, rows,
                                                                                columns);
  return cudaGetLastError();
}

cudaError_t column_sums_accumulate(cudaStream_t stream, float* target, const float* source,
                                   i64 rows, i64 columns) {
  if (rows * columns == 0) return cudaSuccess;
  column_sums_kernel<<<column_grid(rows, columns), dim3(column_tile, row_lanes), 0, stream>>>(
      target, source, rows, columns);
  return cudaGetLastError();
}

cudaError_t attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                              i64 batch, i64 seq_len, i64 channels, i64 heads) {
  const i64 rows = batch * heads * seq_len;
  if (rows == 0) return cudaSuccess;
  const int warps = attention_warps_per_block(seq_len);
  const i64 shared_bytes = static_cast<i64>(warps) * seq_len * static_cast<i64>(sizeof(float));
  cudaError_t status = allow_shared(attention_forward_kernel, shared_bytes);
  if (status != cudaSuccess) return status;
  const auto blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  attention_forward_kernel<<<blocks, warps * warp_size, static_cast<std::size_t>(shared_bytes),
                             stream>>>(out, att, qkv, batch, seq_len, channels, heads,
                                       attention_scale(channels, heads));
  return cudaGetLastError();
}

cudaError_t attention_backward(cudaStream_t stream, float* dqkv, float* row_sums, const float* dout,
                               const float* qkv, const float* att, i64 batch, i64 seq_len,
                               i64 channels, i64 heads) {
  const i64 rows = batch * heads * seq_len;
  if (rows == 0) return cudaSuccess;
  const float scale = attention_scale(channels, heads);
  const int warps = attention_warps_per_block(seq_len);
  const i64 shared_bytes = static_cast<i64>(warps) * seq_len * static_cast<i64>(sizeof(float));
  cudaError_t status = allow_shared(attention_backward_query_kernel, shared_bytes);
  if (status != cudaSuccess) return status;
  const auto blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  attention_backward_query_kernel<<<blocks, warps * warp_size,
                                    static_cast<std::size_t>(shared_bytes), stream>>>(
      dqkv, row_sums, dout, qkv, att, batch, seq_len, channels, heads, scale);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  attention_backward_key_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dqkv, row_sums, dout, qkv, att, batch, seq_len, channels, heads, scale);
  return cudaGetLastError();
}

cudaError_t gelu_forward(cudaStream_t stream, float* out, const float* inp, i64 n) {
  if (n == 0) return cudaSuccess;
  gelu_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, inp, n);
  return cudaGetLastError();
}

cudaError_t gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                          i64 n) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(dinp, inp, dout, n);
  return cudaGetLastError();
}

cudaError_t residual_forward(cudaStream_t stream, float* out, const float* a, const float* b,
                             i64 n) {
  if (n == 0) return cudaSuccess;
  residual_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

cudaError_t residual_backward(cudaStream_t stream, float* da, float* db, const float* dout, i64 n) {
  if (n == 0) return cudaSuccess;
  residual_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(da, db, dout, n);
  return cudaGetLastError();
}

cudaError_t cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, float* loss_mean,
                                  const float* logits, const std::int32_t* targets, i64 rows,
                                  i64 vocab, i64 vocab_padded) {
  if (rows > 0) {
    cross_entropy_forward_kernel<<<static_cast<unsigned>(rows), threads_per_block, 0, stream>>>(
        losses, lse, logits, targets, vocab, vocab_padded);
  }
  mean_kernel<<<1, threads_per_block, 0, stream>>>(loss_mean, losses, rows);
  return cudaGetLastError();
}

cudaError_t cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* logits,
                                   const float* lse, const std::int32_t* targets,
                                   const float* dlosses, i64 rows, i64 vocab, i64 vocab_padded) {
  if (rows * vocab_padded == 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<blocks_for(rows * vocab_padded), threads_per_block, 0, stream>>>(
      dlogits, logits, lse, targets, dlosses, rows, vocab, vocab_padded);
  return cudaGetLastError();
}

cudaError_t cast_bf16_to_fp32(cudaStream_t stream, float* target, const std::uint16_t* source,
                              i64 n) {
  if (n == 0) return cudaSuccess;
  bf16_to_fp32_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

cudaError_t cast_fp16_to_fp32(cudaStream_t stream, float* target, const std::uint16_t* source,
                              i64 n) {
  if (n == 0) return cudaSuccess;
  fp16_to_fp32_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

cudaError_t cast_fp32_to_bf16(cudaStream_t stream, std::uint16_t* target, const float* source,
                              i64 n) {
  if (n == 0) return cudaSuccess;
  fp32_to_bf16_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

cudaError_t cast_fp32_to_fp16(cudaStream_t stream, std::uint16_t* target, const float* source,
                              i64 n) {
  if (n == 0) return cudaSuccess;
  fp32_to_fp16_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, n);
  return cudaGetLastError();
}

cudaError_t fill(cudaStream_t stream, float* target, float value, i64 n) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, value, n);
  return cudaGetLastError();
}

cudaError_t accumulate(cudaStream_t stream, float* target, const float* source, float scale,
                       i64 n) {
  if (n == 0) return cudaSuccess;
  accumulate_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(target, source, scale, n);
  return cudaGetLastError();
}

}  // namespace strata::gpu::cuda::kernels
