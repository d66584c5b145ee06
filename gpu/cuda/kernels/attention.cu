// The attention kernels on CUDA cores; see attention.h. Each kernel gives one warp one row (a
// query row, or a key row of a kv head) and streams the other side's rows in chunks of 32: the
// chunk's 32 dot products are summed across the warp at once (warp_transpose_sum), so each lane
// ends with one row's score, then the warp walks the chunk's rows again to add them into the sums
// each lane keeps for its own columns. Nothing is stored per score, and every sum runs in a fixed
// order with no atomics: every run gives the same bits.
#include "gpu/cuda/kernels/attention.h"

#include <type_traits>

#include "gpu/cuda/kernels/attention_mma.h"
#include "gpu/cuda/kernels/attention_rows.cuh"
#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

// A lane's columns of a head_dim vector are lane, lane + 32, ...: kPerLane of them, the last ones
// past head_dim unused (zero).
template <int kPerLane, typename T>
__device__ void load_lane_columns(float (&target)[kPerLane], const T* row, i64 head_dim, int lane) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 column = lane + static_cast<i64>(j) * warp_size;
    target[j] = column < head_dim ? widen(row[column]) : 0.0f;
  }
}

// This lane's part of vector . row (the lane's columns).
template <int kPerLane, typename T>
__device__ float lane_dot(const float (&vector)[kPerLane], const T* row, i64 head_dim, int lane) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 column = lane + static_cast<i64>(j) * warp_size;
    if (column < head_dim) sum += vector[j] * widen(row[column]);
  }
  return sum;
}

// One step of warp_transpose_sum: lanes whose bit kHalf is set keep the upper half of their
// 2 kHalf sums and send the lower half to the partner lane (lane ^ kHalf), which keeps the lower
// half; each adds what it receives onto what it keeps, into parts[0, kHalf).
template <int kHalf>
__device__ void transpose_sum_step(float (&parts)[warp_size], int lane) {
  const bool upper = (lane & kHalf) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? parts[i] : parts[i + kHalf];
    const float keep = upper ? parts[i + kHalf] : parts[i];
    parts[i] = keep + __shfl_xor_sync(full_mask, send, kHalf);
  }
}

// 32 sums across the warp in 31 shuffles: on entry every lane holds its part of each of 32 sums,
// on return lane l has sum l (after the step of bit b, a lane's sums are those whose index has the
// lane's bit b). The steps are spelled out so that every index is a constant and parts stays in
// registers.
__device__ float warp_transpose_sum(float (&parts)[warp_size], int lane) {
  transpose_sum_step<16>(parts, lane);
  transpose_sum_step<8>(parts, lane);
  transpose_sum_step<4>(parts, lane);
  transpose_sum_step<2>(parts, lane);
  transpose_sum_step<1>(parts, lane);
  return parts[0];
}

// Lane l gets vector . row_at(first + l) for the rows first..last (at most 32 of them), 0 past
// last. `row_at` gives a row's pointer; every lane walks the same rows, so the loads of one row
// are one coalesced access.
template <int kPerLane, typename T, typename RowAt>
__device__ float chunk_dots(const float (&vector)[kPerLane], RowAt row_at, i64 first, i64 last,
                            i64 head_dim, int lane) {
  float parts[warp_size];
#pragma unroll
  for (int j = 0; j < warp_size; ++j)
    parts[j] =
        first + j <= last ? lane_dot<kPerLane, T>(vector, row_at(first + j), head_dim, lane) : 0.0f;
  return warp_transpose_sum(parts, lane);
}

// sums[j] += weight_l * row_at(first + l)[column j] for the rows first..last, where lane l holds
// weight_l.
template <int kPerLane, typename T, typename RowAt>
__device__ void add_weighted_rows(float (&sums)[kPerLane], float weight, RowAt row_at, i64 first,
                                  i64 last, i64 head_dim, int lane) {
  const int count = static_cast<int>(last - first + 1);
  for (int l = 0; l < count; ++l) {
    const float lane_weight = __shfl_sync(full_mask, weight, l);
    const T* row = row_at(first + l);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const i64 column = lane + static_cast<i64>(j) * warp_size;
      if (column < head_dim) sums[j] += lane_weight * widen(row[column]);
    }
  }
}

// The warp's row: blocks of threads_per_block threads, a warp per row; false past the last row
// (the whole warp returns together, so the shuffles stay full-warp).
__device__ bool warp_row(i64 rows, i64& row) {
  row = static_cast<i64>(blockIdx.x) * (threads_per_block / warp_size) +
        static_cast<i64>(threadIdx.x) / warp_size;
  return row < rows;
}

// One warp per query row (b, head, t), rows ordered as lse: the online softmax over the keys
// 0..t, 32 at a time; the running maximum rescales the running sum and the lanes' out sums.
template <typename T, int kPerLane>
__global__ void attention_forward_kernel(T* out, float* lse, const T* qkv, AttentionShape shape,
                                         float scale) {
  const AttentionRows at{shape};
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  i64 row = 0;
  if (!warp_row(shape.batch * shape.heads * shape.seq_len, row)) return;
  const AttentionRows::QueryRow query = at.query_row(row);
  const i64 b = query.b, head = query.head, t = query.t;
  const i64 kv_head = at.kv_head_of(head);
  const i64 head_dim = shape.head_dim;
  float q[kPerLane];
  load_lane_columns(q, qkv + at.q(b, t, head), head_dim, lane);
  float sums[kPerLane] = {};
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  const auto key_at = [&](i64 key) { return qkv + at.k(b, key, kv_head); };
  const auto value_at = [&](i64 key) { return qkv + at.v(b, key, kv_head); };
  for (i64 first = 0; first <= t; first += warp_size) {
    const i64 last = first + warp_size - 1 < t ? first + warp_size - 1 : t;
    const float score = scale * chunk_dots<kPerLane, T>(q, key_at, first, last, head_dim, lane);
    const bool visible = first + lane <= last;
    const float new_max = fmaxf(running_max, warp_max(visible ? score : -INFINITY));
    // The first chunk rescales nothing: expf(-inf) is 0 and the sums are still 0.
    const float rescale = expf(running_max - new_max);
    const float probability = visible ? expf(score - new_max) : 0.0f;
    running_sum = running_sum * rescale + warp_sum(probability);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      sums[j] *= rescale;
    add_weighted_rows<kPerLane, T>(sums, probability, value_at, first, last, head_dim, lane);
    running_max = new_max;
  }
  T* out_row = out + at.o(b, t, head);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 column = lane + static_cast<i64>(j) * warp_size;
    if (column < head_dim) out_row[column] = narrow<T>(sums[j] / running_sum);
  }
  if (lane == 0) lse[row] = running_max + logf(running_sum);
}

// Backward, part 1, one warp per query row: delta = dout . out (out as the forward stored it).
template <typename T, int kPerLane>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out,
                                       AttentionShape shape) {
  const AttentionRows at{shape};
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  i64 row = 0;
  if (!warp_row(shape.batch * shape.heads * shape.seq_len, row)) return;
  const AttentionRows::QueryRow query = at.query_row(row);
  const i64 b = query.b, head = query.head, t = query.t;
  float dout_row[kPerLane];
  load_lane_columns(dout_row, dout + at.o(b, t, head), shape.head_dim, lane);
  const float sum = warp_sum(lane_dot(dout_row, out + at.o(b, t, head), shape.head_dim, lane));
  if (lane == 0) delta[row] = sum;
}

// Backward, part 2, one warp per query row (b, head, t): over the keys t2 <= t,
//   p = exp(scale q.k[t2] - lse),  ds = p (dout . v[t2] - delta),  dq += scale sum ds k[t2].
template <typename T, int kPerLane>
__global__ void attention_backward_query_kernel(T* dqkv, const float* delta, const T* dout,
                                                const T* qkv, const float* lse,
                                                AttentionShape shape, float scale) {
  const AttentionRows at{shape};
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  i64 row = 0;
  if (!warp_row(shape.batch * shape.heads * shape.seq_len, row)) return;
  const AttentionRows::QueryRow query = at.query_row(row);
  const i64 b = query.b, head = query.head, t = query.t;
  const i64 kv_head = at.kv_head_of(head);
  const i64 head_dim = shape.head_dim;
  float q[kPerLane];
  float dout_row[kPerLane];
  load_lane_columns(q, qkv + at.q(b, t, head), head_dim, lane);
  load_lane_columns(dout_row, dout + at.o(b, t, head), head_dim, lane);
  const float row_lse = lse[row];
  const float row_delta = delta[row];
  float dq[kPerLane] = {};
  const auto key_at = [&](i64 key) { return qkv + at.k(b, key, kv_head); };
  const auto value_at = [&](i64 key) { return qkv + at.v(b, key, kv_head); };
  for (i64 first = 0; first <= t; first += warp_size) {
    const i64 last = first + warp_size - 1 < t ? first + warp_size - 1 : t;
    const float score = scale * chunk_dots<kPerLane, T>(q, key_at, first, last, head_dim, lane);
    const float dp = chunk_dots<kPerLane, T>(dout_row, value_at, first, last, head_dim, lane);
    const float ds = first + lane <= last ? expf(score - row_lse) * (dp - row_delta) : 0.0f;
    add_weighted_rows<kPerLane, T>(dq, ds, key_at, first, last, head_dim, lane);
  }
  T* dq_row = dqkv + at.q(b, t, head);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 column = lane + static_cast<i64>(j) * warp_size;
    if (column < head_dim) add_into(dq_row[column], scale * dq[j]);
  }
}

// Backward, part 3, one warp per key row (b, kv_head, t2): over each query head of the kv head's
// group in turn, and its query rows t >= t2 that see the key,
//   dv += p dout[t],  dk += scale ds q[t],
// with p and ds recomputed as in part 2. The group's heads add into the lanes' registers in a
// fixed order, so dk and dv need no atomics.
template <typename T, int kPerLane>
__global__ void attention_backward_key_kernel(T* dqkv, const float* delta, const T* dout,
                                              const T* qkv, const float* lse, AttentionShape shape,
                                              float scale) {
  const AttentionRows at{shape};
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  i64 row = 0;
  if (!warp_row(shape.batch * shape.kv_heads * shape.seq_len, row)) return;
  const i64 t2 = row % shape.seq_len;
  const i64 kv_head = (row / shape.seq_len) % shape.kv_heads;
  const i64 b = row / (shape.seq_len * shape.kv_heads);
  const i64 head_dim = shape.head_dim;
  const i64 group = shape.heads / shape.kv_heads;
  float k[kPerLane];
  float v[kPerLane];
  load_lane_columns(k, qkv + at.k(b, t2, kv_head), head_dim, lane);
  load_lane_columns(v, qkv + at.v(b, t2, kv_head), head_dim, lane);
  float dk[kPerLane] = {};
  float dv[kPerLane] = {};
  for (i64 head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    const auto query_at = [&](i64 t) { return qkv + at.q(b, t, head); };
    const auto dout_at = [&](i64 t) { return dout + at.o(b, t, head); };
    for (i64 first = t2; first < shape.seq_len; first += warp_size) {
      const i64 end = first + warp_size < shape.seq_len ? first + warp_size : shape.seq_len;
      const i64 last = end - 1;
      const float score = scale * chunk_dots<kPerLane, T>(k, query_at, first, last, head_dim, lane);
      const float dp = chunk_dots<kPerLane, T>(v, dout_at, first, last, head_dim, lane);
      float p = 0.0f;
      float ds = 0.0f;
      if (first + lane <= last) {
        const i64 stat = at.stat(b, head, first + lane);
        p = expf(score - lse[stat]);
        ds = p * (dp - delta[stat]);
      }
      add_weighted_rows<kPerLane, T>(dv, p, dout_at, first, last, head_dim, lane);
      add_weighted_rows<kPerLane, T>(dk, ds, query_at, first, last, head_dim, lane);
    }
  }
  T* dk_row = dqkv + at.k(b, t2, kv_head);
  T* dv_row = dqkv + at.v(b, t2, kv_head);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 column = lane + static_cast<i64>(j) * warp_size;
    if (column < head_dim) {
      add_into(dk_row[column], scale * dk[j]);
      add_into(dv_row[column], dv[j]);
    }
  }
}

// launch(std::integral_constant<int, per lane>{}) for the fewest columns per lane that hold
// head_dim (1, 2, 4 or 8), so that a lane keeps no more sums than it needs.
template <typename Launch>
cudaError_t with_columns_per_lane(i64 head_dim, Launch launch) {
  if (head_dim <= 32) return launch(std::integral_constant<int, 1>{});
  if (head_dim <= 64) return launch(std::integral_constant<int, 2>{});
  if (head_dim <= 128) return launch(std::integral_constant<int, 4>{});
  return launch(std::integral_constant<int, 8>{});
}

bool attention_shape_valid(const AttentionShape& shape) {
  return shape.batch >= 0 && shape.seq_len >= 0 && shape.heads > 0 && shape.kv_heads > 0 &&
         shape.heads % shape.kv_heads == 0 && shape.head_dim > 0 &&
         shape.head_dim <= attention_head_dim_max;
}

}  // namespace

template <typename T>
cudaError_t attention_forward(cudaStream_t stream, T* out, float* lse, const T* qkv,
                              AttentionShape shape, AttentionKernels* ran) {
  if (!attention_shape_valid(shape)) return cudaErrorInvalidValue;
  const i64 rows = shape.batch * shape.heads * shape.seq_len;
  if constexpr (!std::is_same_v<T, float>) {
    if (attention_mma_takes(shape.head_dim, qkv)) {
      *ran = AttentionKernels::tensor_core;
      return rows == 0 ? cudaSuccess : attention_forward_mma(stream, out, lse, qkv, shape);
    }
  }
  *ran = AttentionKernels::cuda_core;
  if (rows == 0) return cudaSuccess;
  const float scale = attention_scale(shape.head_dim);
  return with_columns_per_lane(shape.head_dim, [&](auto per_lane) {
    attention_forward_kernel<T, decltype(per_lane)::value>
        <<<warp_blocks(rows), threads_per_block, 0, stream>>>(out, lse, qkv, shape, scale);
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t attention_backward(cudaStream_t stream, T* dqkv, float* delta, const T* dout,
                               const T* qkv, const T* out, const float* lse, AttentionShape shape,
                               AttentionKernels* ran) {
  if (!attention_shape_valid(shape)) return cudaErrorInvalidValue;
  const i64 query_rows = shape.batch * shape.heads * shape.seq_len;
  const i64 key_rows = shape.batch * shape.kv_heads * shape.seq_len;
  bool tensor_cores = false;
  if constexpr (!std::is_same_v<T, float>)
    tensor_cores = attention_mma_backward_takes(shape.head_dim, qkv, dout);
  *ran = tensor_cores ? AttentionKernels::tensor_core : AttentionKernels::cuda_core;
  if (query_rows == 0) return cudaSuccess;
  const float scale = attention_scale(shape.head_dim);
  return with_columns_per_lane(shape.head_dim, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    attention_delta_kernel<T, kPerLane>
        <<<warp_blocks(query_rows), threads_per_block, 0, stream>>>(delta, dout, out, shape);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores) return attention_backward_mma(stream, dqkv, delta, dout, qkv, lse, shape);
    }
    attention_backward_query_kernel<T, kPerLane>
        <<<warp_blocks(query_rows), threads_per_block, 0, stream>>>(dqkv, delta, dout, qkv, lse,
                                                                    shape, scale);
    status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    attention_backward_key_kernel<T, kPerLane>
        <<<warp_blocks(key_rows), threads_per_block, 0, stream>>>(dqkv, delta, dout, qkv, lse,
                                                                  shape, scale);
    return cudaGetLastError();
  });
}

#define STRATA_INSTANTIATE(T)                                                                   \
  template cudaError_t attention_forward<T>(cudaStream_t, T*, float*, const T*, AttentionShape, \
                                            AttentionKernels*);                                 \
  template cudaError_t attention_backward<T>(cudaStream_t, T*, float*, const T*, const T*,      \
                                             const T*, const float*, AttentionShape,            \
                                             AttentionKernels*);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels
