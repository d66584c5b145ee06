// The Llama family's CUDA kernels (RMSNorm, rotary embeddings, SwiGLU, grouped-query packing);
// see kernels.h. Each mirrors its host kernel's arithmetic (gpu/host/kernels/*.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/cuda/kernel_common.cuh"
#include "gpu/cuda/kernels.h"

namespace strata::gpu::cuda::kernels {
namespace {

__global__ void rms_norm_forward_kernel(float* out, float* rstd, const float* inp,
                                        const float* weight, double eps, i64 rows, i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  double squares = 0.0;
  for (i64 c = lane; c < channels; c += warp_size)
    squares += static_cast<double>(x[c]) * x[c];
  const double r = 1.0 / sqrt(warp_sum(squares) / static_cast<double>(channels) + eps);
  float* y = out + row * channels;
  for (i64 c = lane; c < channels; c += warp_size)
    y[c] = static_cast<float>(x[c] * r) * weight[c];
  if (lane == 0) rstd[row] = static_cast<float>(r);
}

__global__ void rms_norm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* rstd, i64 rows,
                                               i64 channels) {
  const i64 row = global_index() / warp_size;
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  if (row >= rows) return;
  const float* x = inp + row * channels;
  const float* dy = dout + row * channels;
  const double r = rstd[row];
  double dot = 0.0;
  for (i64 c = lane; c < channels; c += warp_size)
    dot += static_cast<double>(dy[c]) * weight[c] * (x[c] * r);
  const double mean_dot = warp_sum(dot) / static_cast<double>(channels);
  float* dx = dinp + row * channels;
  for (i64 c = lane; c < channels; c += warp_size) {
    const double g = static_cast<double>(dy[c]) * weight[c];
    dx[c] += static_cast<float>(r * (g - x[c] * r * mean_dot));
  }
}

__global__ void rms_norm_backward_weight_kernel(float* dweight, const float* dout, const float* inp,
                                                const float* rstd, i64 rows, i64 channels) {
  __shared__ float sums[row_lanes][column_tile];
  const i64 c = static_cast<i64>(blockIdx.x) * column_tile + threadIdx.x;
  const i64 row_begin = static_cast<i64>(blockIdx.y) * rows_per_slice;
  const i64 row_end = row_begin + rows_per_slice < rows ? row_begin + rows_per_slice : rows;
  float sum = 0.0f;
  if (c < channels) {
    for (i64 row = row_begin + threadIdx.y; row < row_end; row += row_lanes)
      sum += dout[row * channels + c] * (inp[row * channels + c] * rstd[row]);
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int lane = 1; lane < row_lanes; ++lane)
      sum += sums[lane][threadIdx.x];
    atomicAdd(dweight + c, sum);
  }
}

// sign +1 rotates, -1 applies the transpose (gpu/host/kernels/rope.cpp).
__global__ void rope_kernel(float* x, const float* inv_freq, i64 rows, i64 seq_len, i64 heads,
                            i64 head_dim, i64 row_stride, float sign) {
  const i64 half = head_dim / 2;
  for (i64 i = global_index(); i < rows * heads * half; i += global_stride()) {
    const i64 j = i % half;
    const i64 h = (i / half) % heads;
    const i64 row = i / (half * heads);
    const float angle = static_cast<float>(row % seq_len) * inv_freq[j];
    const float cos = cosf(angle);
    const float sin = sign * sinf(angle);
    float* head = x + row * row_stride + h * head_dim;
    const float x1 = head[j];
    const float x2 = head[j + half];
    head[j] = x1 * cos - x2 * sin;
    head[j + half] = x2 * cos + x1 * sin;
  }
}

__device__ float sigmoid(float g) {
  const float e = expf(-fabsf(g));
  return g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride())
    out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                       const float* gate, const float* up, i64 n) {
  for (i64 i = global_index(); i < n; i += global_stride()) {
    const float g = gate[i];
    const float s = sigmoid(g);
    dgate[i] += dout[i] * up[i] * (s + g * s * (1.0f - s));
    dup[i] += dout[i] * g * s;
  }
}

__global__ void qkv_pack_forward_kernel(float* qkv, const float* q, const float* k, const float* v,
                                        i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 width = heads * head_dim;
  const i64 repeat = heads / kv_heads;
  for (i64 i = global_index(); i < rows * 3 * width; i += global_stride()) {
    const i64 row = i / (3 * width);
    const i64 part = (i % (3 * width)) / width;  // 0 q, 1 k, 2 v
    const i64 within = i % width;
    if (part == 0) {
      qkv[i] = q[row * width + within];
      continue;
    }
    const i64 from =
        row * kv_heads * head_dim + (within / head_dim) / repeat * head_dim + within % head_dim;
    qkv[i] = part == 1 ? k[from] : v[from];
  }
}

__global__ void qkv_pack_backward_kernel(float* dq, float* dk, float* dv, const float* dqkv,
                                         i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 width = heads * head_dim;
  const i64 kv_width = kv_heads * head_dim;
  const i64 repeat = heads / kv_heads;
  // One thread per element of dq, then of dk and dv, each summing its repeats in head order.
  for (i64 i = global_index(); i < rows * (width + 2 * kv_width); i += global_stride()) {
    const i64 row = i / (width + 2 * kv_width);
    const i64 within = i % (width + 2 * kv_width);
    const float* in = dqkv + row * 3 * width;
    if (within < width) {
      dq[row * width + within] += in[within];
      continue;
    }
    const bool is_k = within < width + kv_width;
    const i64 e = within - width - (is_k ? 0 : kv_width);  // element of the kv row
    const i64 g = e / head_dim, d = e % head_dim;
    float sum = 0.0f;
    for (i64 r = 0; r < repeat; ++r)
      sum += in[(is_k ? width : 2 * width) + (g * repeat + r) * head_dim + d];
    (is_k ? dk : dv)[row * kv_width + e] += sum;
  }
}

}  // namespace

cudaError_t rms_norm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                             const float* weight, double eps, i64 rows, i64 channels) {
  if (rows == 0) return cudaSuccess;
  rms_norm_forward_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      out, rstd, inp, weight, eps, rows, channels);
  return cudaGetLastError();
}

cudaError_t rms_norm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout,
                              const float* inp, const float* weight, const float* rstd, i64 rows,
                              i64 channels) {
  if (rows == 0) return cudaSuccess;
  rms_norm_backward_input_kernel<<<warp_blocks(rows), threads_per_block, 0, stream>>>(
      dinp, dout, inp, weight, rstd, rows, channels);
  rms_norm_backward_weight_kernel<<<column_grid(rows, channels), dim3(column_tile, row_lanes), 0,
                                    stream>>>(dweight, dout, inp, rstd, rows, channels);
  return cudaGetLastError();
}

cudaError_t rope_forward(cudaStream_t stream, float* x, const float* inv_freq, i64 batch,
                         i64 seq_len, i64 heads, i64 head_dim, i64 row_stride) {
  const i64 pairs = batch * seq_len * heads * (head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  rope_kernel<<<blocks_for(pairs), threads_per_block, 0, stream>>>(
      x, inv_freq, batch * seq_len, seq_len, heads, head_dim, row_stride, 1.0f);
  return cudaGetLastError();
}

cudaError_t rope_backward(cudaStream_t stream, float* dx, const float* inv_freq, i64 batch,
                          i64 seq_len, i64 heads, i64 head_dim, i64 row_stride) {
  const i64 pairs = batch * seq_len * heads * (head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  rope_kernel<<<blocks_for(pairs), threads_per_block, 0, stream>>>(
      dx, inv_freq, batch * seq_len, seq_len, heads, head_dim, row_stride, -1.0f);
  return cudaGetLastError();
}

cudaError_t swiglu_forward(cudaStream_t stream, float* out, const float* gate, const float* up,
                           i64 n) {
  if (n == 0) return cudaSuccess;
  swiglu_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(out, gate, up, n);
  return cudaGetLastError();
}

cudaError_t swiglu_backward(cudaStream_t stream, float* dgate, float* dup, const float* dout,
                            const float* gate, const float* up, i64 n) {
  if (n == 0) return cudaSuccess;
  swiglu_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(dgate, dup, dout, gate,
                                                                          up, n);
  return cudaGetLastError();
}

cudaError_t qkv_pack_forward(cudaStream_t stream, float* qkv, const float* q, const float* k,
                             const float* v, i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * 3 * heads * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_forward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      qkv, q, k, v, rows, heads, kv_heads, head_dim);
  return cudaGetLastError();
}

cudaError_t qkv_pack_backward(cudaStream_t stream, float* dq, float* dk, float* dv,
                              const float* dqkv, i64 rows, i64 heads, i64 kv_heads, i64 head_dim) {
  const i64 n = rows * (heads + 2 * kv_heads) * head_dim;
  if (n == 0) return cudaSuccess;
  qkv_pack_backward_kernel<<<blocks_for(n), threads_per_block, 0, stream>>>(
      dq, dk, dv, dqkv, rows, heads, kv_heads, head_dim);
  return cudaGetLastError();
}

}  // namespace strata::gpu::cuda::kernels
