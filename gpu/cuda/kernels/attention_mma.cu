// The tensor-core attention forward; see attention_mma.h, and attention_mma.cuh for the fragment
// layouts (lane l of a warp is in group g = l / 4 at position i = l % 4). Each warp keeps its 16
// query rows' Q fragments, scores, and out sums in registers; the online softmax runs on the scores
// of each 64-key tile as in attention.cu, and the row statistics are shared by the 4 lanes of a
// group with two shuffles.
#include "gpu/cuda/kernels/attention_mma.h"

#include "gpu/cuda/kernels/attention_mma.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr int query_tile = 16 * mma_warps;  // query rows per CTA
constexpr int key_tile = 64;                // key rows per shared-memory tile

// Where one CTA works: its (batch, head), its query tile, and its warp's rows.
struct MmaTile {
  i64 b = 0;
  i64 head = 0;
  i64 kv_head = 0;
  i64 first_row = 0;  // the CTA's first query row
  i64 rows[2] = {};   // this lane's rows: g and g + 8 of its warp's 16
};

// The key (is_value false) or value rows [first, first + key_tile) of the CTA's kv head into
// `tile`.
template <typename T, int kHeadDim>
__device__ void load_key_tile(u32* tile, const T* qkv, const AttentionRows& at, const MmaTile& w,
                              i64 first, bool is_value) {
  const auto offset_of = [&](i64 key) {
    return is_value ? at.v(w.b, key, w.kv_head) : at.k(w.b, key, w.kv_head);
  };
  load_tile<T, kHeadDim, key_tile>(tile, qkv, offset_of, first, at.shape.seq_len);
}

// The warp's Q rows as A fragments, one per 16 columns; rows past seq_len are zeros.
template <typename T, int kHeadDim>
__device__ void load_query_fragments(u32 (&q)[kHeadDim / 16][4], const T* qkv,
                                     const AttentionRows& at, const MmaTile& w, int lane) {
  const int column = (lane % 4) * 2;
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
#pragma unroll
    for (int part = 0; part < 4; ++part) {
      const i64 row = w.rows[part % 2];
      const i64 offset = at.q(w.b, row, w.head) + step * 16 + column + (part / 2) * 8;
      q[step][part] = row < at.shape.seq_len ? load_pair(qkv + offset) : 0u;
    }
  }
}

// scores = Q K^T for the warp's 16 rows and the tile's 64 keys, then scaled, and -inf where
// a key is past the row (causal) or past seq_len.
template <typename T, int kHeadDim>
__device__ void tile_scores(float (&scores)[key_tile / 8][4], const u32 (&q)[kHeadDim / 16][4],
                            const u32* keys, const MmaTile& w, i64 first_key, i64 seq_len,
                            float scale, int lane) {
#pragma unroll
  for (int n = 0; n < key_tile / 8; ++n)
    scores[n][0] = scores[n][1] = scores[n][2] = scores[n][3] = 0.0f;
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step)
    add_times_rows_transposed<T, kHeadDim, key_tile>(scores, q[step], keys, step, lane);
#pragma unroll
  for (int n = 0; n < key_tile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const i64 key = first_key + n * 8 + (lane % 4) * 2 + e % 2;
      const bool visible = key <= w.rows[e / 2] && key < seq_len;
      scores[n][e] = visible ? scores[n][e] * scale : -INFINITY;
    }
  }
}

// The online softmax's step for one tile: the running maxima take the tile's, the scores become
// unnormalised probabilities, and the running sums (this lane's columns only) and out sums are
// rescaled to the new maxima.
template <int kHeadDim>
__device__ void tile_softmax(float (&scores)[key_tile / 8][4], float (&row_max)[2],
                             float (&row_sum)[2], float (&sums)[kHeadDim / 8][4]) {
  float rescale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < key_tile / 8; ++n)
      tile_max = fmaxf(tile_max, fmaxf(scores[n][2 * half], scores[n][2 * half + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(full_mask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(full_mask, tile_max, 2));
    // Key 0 is in the first tile and visible to every row, so new_max is finite from there on and
    // the first tile's rescale is expf(-inf) = 0 on sums that are still 0.
    const float new_max = fmaxf(row_max[half], tile_max);
    rescale[half] = expf(row_max[half] - new_max);
    row_max[half] = new_max;
  }
#pragma unroll
  for (int n = 0; n < key_tile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      scores[n][e] = expf(scores[n][e] - row_max[e / 2]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float tile_sum = 0.0f;
#pragma unroll
    for (int n = 0; n < key_tile / 8; ++n)
      tile_sum += scores[n][2 * half] + scores[n][2 * half + 1];
    row_sum[half] = row_sum[half] * rescale[half] + tile_sum;
  }
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sums[d][e] *= rescale[e / 2];
  }
}

// One CTA per (batch x head, query tile), the longest tiles (the last rows, which see the most
// keys) first; 4 warps of 16 query rows each.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(mma_warps* warp_size)
    attention_forward_mma_kernel(T* out, float* lse, const T* qkv, AttentionShape shape,
                                 float scale) {
  __shared__ alignas(16) u32 keys[key_tile * row_words<kHeadDim>];
  __shared__ alignas(16) u32 values[key_tile * row_words<kHeadDim>];
  const AttentionRows at{shape};
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  MmaTile w;
  w.b = static_cast<i64>(blockIdx.x) / shape.heads;
  w.head = static_cast<i64>(blockIdx.x) % shape.heads;
  w.kv_head = at.kv_head_of(w.head);
  w.first_row = (static_cast<i64>(gridDim.y) - 1 - blockIdx.y) * query_tile;
  w.rows[0] = w.first_row + warp * 16 + lane / 4;
  w.rows[1] = w.rows[0] + 8;
  u32 q[kHeadDim / 16][4];
  load_query_fragments<T, kHeadDim>(q, qkv, at, w, lane);
  float sums[kHeadDim / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const i64 last_row = w.first_row + query_tile - 1;
  const i64 key_end = last_row + 1 < shape.seq_len ? last_row + 1 : shape.seq_len;
  for (i64 first_key = 0; first_key < key_end; first_key += key_tile) {
    __syncthreads();  // every warp is done with the previous tile
    load_key_tile<T, kHeadDim>(keys, qkv, at, w, first_key, false);
    load_key_tile<T, kHeadDim>(values, qkv, at, w, first_key, true);
    __syncthreads();
    float scores[key_tile / 8][4];
    tile_scores<T, kHeadDim>(scores, q, keys, w, first_key, shape.seq_len, scale, lane);
    tile_softmax<kHeadDim>(scores, row_max, row_sum, sums);
    add_weights_times_rows<T, kHeadDim, key_tile>(sums, scores, values, lane);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_sum[half] += __shfl_xor_sync(full_mask, row_sum[half], 1);
    row_sum[half] += __shfl_xor_sync(full_mask, row_sum[half], 2);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const i64 row = w.rows[half];
    if (row >= shape.seq_len) continue;
    T* out_row = out + at.o(w.b, row, w.head) + (lane % 4) * 2;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      out_row[d * 8] = narrow<T>(sums[d][2 * half] / row_sum[half]);
      out_row[d * 8 + 1] = narrow<T>(sums[d][2 * half + 1] / row_sum[half]);
    }
    if (lane % 4 == 0) lse[at.stat(w.b, w.head, row)] = row_max[half] + logf(row_sum[half]);
  }
}

template <typename T, int kHeadDim>
cudaError_t launch_mma(cudaStream_t stream, T* out, float* lse, const T* qkv,
                       AttentionShape shape) {
  const dim3 grid(static_cast<unsigned>(shape.batch * shape.heads),
                  static_cast<unsigned>((shape.seq_len + query_tile - 1) / query_tile));
  attention_forward_mma_kernel<T, kHeadDim><<<grid, mma_warps * warp_size, 0, stream>>>(
      out, lse, qkv, shape, attention_scale(shape.head_dim));
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t attention_forward_mma(cudaStream_t stream, T* out, float* lse, const T* qkv,
                                  AttentionShape shape) {
  if (!attention_mma_takes(shape.head_dim, qkv)) return cudaErrorInvalidValue;
  if (shape.batch * shape.heads * shape.seq_len == 0) return cudaSuccess;
  if (shape.head_dim == 64) return launch_mma<T, 64>(stream, out, lse, qkv, shape);
  return launch_mma<T, 128>(stream, out, lse, qkv, shape);
}

template cudaError_t attention_forward_mma<__nv_bfloat16>(cudaStream_t, __nv_bfloat16*, float*,
                                                          const __nv_bfloat16*, AttentionShape);
template cudaError_t attention_forward_mma<__half>(cudaStream_t, __half*, float*, const __half*,
                                                   AttentionShape);

}  // namespace strata::gpu::cuda::kernels
