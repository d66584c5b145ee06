// The tensor-core attention backward; see attention_mma.h, and attention_mma.cuh for the fragment
// layouts (lane l of a warp is in group g = l / 4 at position i = l % 4). FlashAttention-2's
// backward without its atomics: where FlashAttention-2 adds each (query block, key block) pair's
// share of dq into global memory atomically, here one kernel owns a block of keys and walks every
// query row that sees it (dk, dv), and another owns a block of query rows and walks every key it
// sees (dq). Each sum then runs in one CTA's registers in a fixed order, so every run gives the
// same bits, at the price of computing the scores and dP twice.
//
// Both kernels have the same shape: a CTA of 4 warps owns 64 rows (16 a warp) of two tensors in
// shared memory, loaded once, and streams rows of two other tensors through shared memory; each
// warp multiplies its 16 own rows by the streamed rows with the A fragments read from shared
// memory, so that the registers hold only the sums and one tile of scores.
#include "gpu/cuda/kernels/attention_mma.cuh"
#include "gpu/cuda/kernels/attention_mma.h"

namespace strata::gpu::cuda::kernels {
namespace {

constexpr int own_rows = 16 * mma_warps;  // the rows a CTA owns
// The rows streamed per step: fewer at head_dim 128, where a lane keeps twice the sums.
template <int kHeadDim>
constexpr int streamed_rows = kHeadDim == 64 ? 64 : 32;

// A CTA's shared memory: its own rows (keys and values, or queries and dout), the streamed rows
// (queries and dout, or keys and values), and the streamed query rows' lse and delta. At
// head_dim 128 that is 51 KiB, past the 48 KiB a kernel gets without asking
// (cudaFuncAttributeMaxDynamicSharedMemorySize).
template <int kHeadDim>
constexpr int shared_bytes() {
  const int rows = 2 * own_rows + 2 * streamed_rows<kHeadDim>;
  const int words = row_words<kHeadDim>;
  return 4 * words * rows + 4 * 2 * streamed_rows<kHeadDim>;
}

extern __shared__ uint4 backward_shared[];

struct SharedTiles {
  u32* own_first;   // keys, or query rows
  u32* own_second;  // values, or dout rows
  u32* streamed_first;
  u32* streamed_second;
  float* row_lse;  // of the streamed query rows
  float* row_delta;
};

template <int kHeadDim>
__device__ SharedTiles shared_tiles() {
  constexpr int words = row_words<kHeadDim>;
  u32* base = reinterpret_cast<u32*>(backward_shared);
  SharedTiles tiles;
  tiles.own_first = base;
  tiles.own_second = tiles.own_first + own_rows * words;
  tiles.streamed_first = tiles.own_second + own_rows * words;
  tiles.streamed_second = tiles.streamed_first + streamed_rows<kHeadDim> * words;
  tiles.row_lse = reinterpret_cast<float*>(tiles.streamed_second + streamed_rows<kHeadDim> * words);
  tiles.row_delta = tiles.row_lse + streamed_rows<kHeadDim>;
  return tiles;
}

// One step of the key kernel: the warp's 16 keys (this lane's rows g and g + 8 are `keys`) against
// the streamed query rows [first_query, first_query + kQueries) of one query head:
//   P^T = exp(scale K Q^T - lse),  dv += P^T dout,  dS^T = P^T (V dout^T - delta),  dk += dS^T Q,
// P and dS rounded to T before they multiply (attention_mma.h). A query sees a key at or before
// it; every other probability is 0.
template <typename T, int kHeadDim>
__device__ void key_step(float (&dk)[kHeadDim / 8][4], float (&dv)[kHeadDim / 8][4],
                         const SharedTiles& tiles, int warp, const i64 (&keys)[2], i64 first_query,
                         i64 seq_len, float scale, int lane) {
  constexpr int kQueries = streamed_rows<kHeadDim>;
  constexpr int words = row_words<kHeadDim>;
  float p[kQueries / 8][4];
  rows_times_rows_transposed<T, kHeadDim, kQueries>(p, tiles.own_first + warp * 16 * words,
                                                    tiles.streamed_first, lane);
#pragma unroll
  for (int n = 0; n < kQueries / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int column = n * 8 + (lane % 4) * 2 + e % 2;
      const i64 query = first_query + column;
      const bool visible = query >= keys[e / 2] && query < seq_len;
      p[n][e] = visible ? expf(scale * p[n][e] - tiles.row_lse[column]) : 0.0f;
    }
  }
  add_weights_times_rows<T, kHeadDim, kQueries>(dv, p, tiles.streamed_second, lane);
  float ds[kQueries / 8][4];
  rows_times_rows_transposed<T, kHeadDim, kQueries>(ds, tiles.own_second + warp * 16 * words,
                                                    tiles.streamed_second, lane);
#pragma unroll
  for (int n = 0; n < kQueries / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int column = n * 8 + (lane % 4) * 2 + e % 2;
      ds[n][e] = p[n][e] * (ds[n][e] - tiles.row_delta[column]);
    }
  }
  add_weights_times_rows<T, kHeadDim, kQueries>(dk, ds, tiles.streamed_first, lane);
}

// The streamed query rows [first_query, first_query + kQueries) of `head` into shared memory:
// q, dout, and their lse and delta (0 past seq_len, where every probability is 0).
template <typename T, int kHeadDim>
__device__ void load_query_rows(const SharedTiles& tiles, const AttentionRows& at, const T* qkv,
                                const T* dout, const float* lse, const float* delta, i64 b,
                                i64 head, i64 first_query) {
  constexpr int kQueries = streamed_rows<kHeadDim>;
  const i64 seq_len = at.shape.seq_len;
  const auto q_at = [&](i64 t) { return at.q(b, t, head); };
  const auto o_at = [&](i64 t) { return at.o(b, t, head); };
  load_tile<T, kHeadDim, kQueries>(tiles.streamed_first, qkv, q_at, first_query, seq_len);
  load_tile<T, kHeadDim, kQueries>(tiles.streamed_second, dout, o_at, first_query, seq_len);
  for (int r = static_cast<int>(threadIdx.x); r < kQueries; r += mma_warps * warp_size) {
    const i64 t = first_query + r;
    tiles.row_lse[r] = t < seq_len ? lse[at.stat(b, head, t)] : 0.0f;
    tiles.row_delta[r] = t < seq_len ? delta[at.stat(b, head, t)] : 0.0f;
  }
}

// dk and dv, one CTA per (batch x kv head, 64 keys), the first keys (which the most query rows
// see) first; the group's query heads in order, and for each its query rows from the CTA's first
// key on, kQueries at a time.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(mma_warps* warp_size)
    attention_backward_key_mma_kernel(T* dqkv, const float* delta, const T* dout, const T* qkv,
                                      const float* lse, AttentionShape shape, float scale) {
  const AttentionRows at{shape};
  const SharedTiles tiles = shared_tiles<kHeadDim>();
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 b = static_cast<i64>(blockIdx.x) / shape.kv_heads;
  const i64 kv_head = static_cast<i64>(blockIdx.x) % shape.kv_heads;
  const i64 first_key = static_cast<i64>(blockIdx.y) * own_rows;
  const auto k_at = [&](i64 t) { return at.k(b, t, kv_head); };
  const auto v_at = [&](i64 t) { return at.v(b, t, kv_head); };
  load_tile<T, kHeadDim, own_rows>(tiles.own_first, qkv, k_at, first_key, shape.seq_len);
  load_tile<T, kHeadDim, own_rows>(tiles.own_second, qkv, v_at, first_key, shape.seq_len);
  const i64 keys[2] = {first_key + warp * 16 + lane / 4, first_key + warp * 16 + lane / 4 + 8};
  float dk[kHeadDim / 8][4] = {};
  float dv[kHeadDim / 8][4] = {};
  const i64 group = shape.heads / shape.kv_heads;
  for (i64 head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    for (i64 first_query = first_key; first_query < shape.seq_len;
         first_query += streamed_rows<kHeadDim>) {
      __syncthreads();  // every warp is done with the previous rows
      load_query_rows<T, kHeadDim>(tiles, at, qkv, dout, lse, delta, b, head, first_query);
      __syncthreads();
      key_step<T, kHeadDim>(dk, dv, tiles, warp, keys, first_query, shape.seq_len, scale, lane);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (keys[half] >= shape.seq_len) continue;
    T* dk_row = dqkv + at.k(b, keys[half], kv_head) + (lane % 4) * 2;
    T* dv_row = dqkv + at.v(b, keys[half], kv_head) + (lane % 4) * 2;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        add_into(dk_row[d * 8 + e], scale * dk[d][2 * half + e]);
        add_into(dv_row[d * 8 + e], dv[d][2 * half + e]);
      }
    }
  }
}

// One step of the query kernel: the warp's 16 query rows (`rows`, with their lse and delta)
// against the streamed keys [first_key, first_key + kKeys):
//   P = exp(scale Q K^T - lse),  dS = P (dout V^T - delta),  dq += dS K.
template <typename T, int kHeadDim>
__device__ void query_step(float (&dq)[kHeadDim / 8][4], const SharedTiles& tiles, int warp,
                           const i64 (&rows)[2], const float (&row_lse)[2],
                           const float (&row_delta)[2], i64 first_key, i64 seq_len, float scale,
                           int lane) {
  constexpr int kKeys = streamed_rows<kHeadDim>;
  constexpr int words = row_words<kHeadDim>;
  float p[kKeys / 8][4];
  rows_times_rows_transposed<T, kHeadDim, kKeys>(p, tiles.own_first + warp * 16 * words,
                                                 tiles.streamed_first, lane);
  float ds[kKeys / 8][4];
  rows_times_rows_transposed<T, kHeadDim, kKeys>(ds, tiles.own_second + warp * 16 * words,
                                                 tiles.streamed_second, lane);
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const i64 key = first_key + n * 8 + (lane % 4) * 2 + e % 2;
      const bool visible = key <= rows[e / 2] && rows[e / 2] < seq_len;
      const float probability = visible ? expf(scale * p[n][e] - row_lse[e / 2]) : 0.0f;
      ds[n][e] = probability * (ds[n][e] - row_delta[e / 2]);
    }
  }
  add_weights_times_rows<T, kHeadDim, kKeys>(dq, ds, tiles.streamed_first, lane);
}

// dq, one CTA per (batch x head, 64 query rows), the last rows (which see the most keys) first;
// the keys up to the CTA's last row, kKeys at a time.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(mma_warps* warp_size)
    attention_backward_query_mma_kernel(T* dqkv, const float* delta, const T* dout, const T* qkv,
                                        const float* lse, AttentionShape shape, float scale) {
  const AttentionRows at{shape};
  const SharedTiles tiles = shared_tiles<kHeadDim>();
  const int lane = static_cast<int>(threadIdx.x) % warp_size;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  const i64 b = static_cast<i64>(blockIdx.x) / shape.heads;
  const i64 head = static_cast<i64>(blockIdx.x) % shape.heads;
  const i64 kv_head = at.kv_head_of(head);
  const i64 first_row = (static_cast<i64>(gridDim.y) - 1 - blockIdx.y) * own_rows;
  const auto q_at = [&](i64 t) { return at.q(b, t, head); };
  const auto o_at = [&](i64 t) { return at.o(b, t, head); };
  const auto k_at = [&](i64 t) { return at.k(b, t, kv_head); };
  const auto v_at = [&](i64 t) { return at.v(b, t, kv_head); };
  load_tile<T, kHeadDim, own_rows>(tiles.own_first, qkv, q_at, first_row, shape.seq_len);
  load_tile<T, kHeadDim, own_rows>(tiles.own_second, dout, o_at, first_row, shape.seq_len);
  const i64 rows[2] = {first_row + warp * 16 + lane / 4, first_row + warp * 16 + lane / 4 + 8};
  float row_lse[2];
  float row_delta[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool inside = rows[half] < shape.seq_len;
    row_lse[half] = inside ? lse[at.stat(b, head, rows[half])] : 0.0f;
    row_delta[half] = inside ? delta[at.stat(b, head, rows[half])] : 0.0f;
  }
  float dq[kHeadDim / 8][4] = {};
  const i64 last_row = first_row + own_rows - 1;
  const i64 key_end = last_row + 1 < shape.seq_len ? last_row + 1 : shape.seq_len;
  for (i64 first_key = 0; first_key < key_end; first_key += streamed_rows<kHeadDim>) {
    __syncthreads();  // every warp is done with the previous keys
    load_tile<T, kHeadDim, streamed_rows<kHeadDim>>(tiles.streamed_first, qkv, k_at, first_key,
                                                    shape.seq_len);
    load_tile<T, kHeadDim, streamed_rows<kHeadDim>>(tiles.streamed_second, qkv, v_at, first_key,
                                                    shape.seq_len);
    __syncthreads();
    query_step<T, kHeadDim>(dq, tiles, warp, rows, row_lse, row_delta, first_key, shape.seq_len,
                            scale, lane);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (rows[half] >= shape.seq_len) continue;
    T* dq_row = dqkv + at.q(b, rows[half], head) + (lane % 4) * 2;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      add_into(dq_row[d * 8], scale * dq[d][2 * half]);
      add_into(dq_row[d * 8 + 1], scale * dq[d][2 * half + 1]);
    }
  }
}

// The key kernel, then the query kernel, each allowed shared_bytes of dynamic shared memory.
template <typename T, int kHeadDim>
cudaError_t launch_backward_mma(cudaStream_t stream, T* dqkv, const float* delta, const T* dout,
                                const T* qkv, const float* lse, AttentionShape shape) {
  constexpr int bytes = shared_bytes<kHeadDim>();
  const auto key_kernel = attention_backward_key_mma_kernel<T, kHeadDim>;
  const auto query_kernel = attention_backward_query_mma_kernel<T, kHeadDim>;
  for (const auto kernel : {key_kernel, query_kernel}) {
    const cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (status != cudaSuccess) return status;
  }
  const float scale = attention_scale(shape.head_dim);
  const auto blocks = static_cast<unsigned>((shape.seq_len + own_rows - 1) / own_rows);
  const dim3 key_grid(static_cast<unsigned>(shape.batch * shape.kv_heads), blocks);
  key_kernel<<<key_grid, mma_warps * warp_size, bytes, stream>>>(dqkv, delta, dout, qkv, lse, shape,
                                                                 scale);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const dim3 query_grid(static_cast<unsigned>(shape.batch * shape.heads), blocks);
  query_kernel<<<query_grid, mma_warps * warp_size, bytes, stream>>>(dqkv, delta, dout, qkv, lse,
                                                                     shape, scale);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t attention_backward_mma(cudaStream_t stream, T* dqkv, const float* delta, const T* dout,
                                   const T* qkv, const float* lse, AttentionShape shape) {
  if (!attention_mma_backward_takes(shape.head_dim, qkv, dout)) return cudaErrorInvalidValue;
  if (shape.batch * shape.heads * shape.seq_len == 0) return cudaSuccess;
  if (shape.head_dim == 64)
    return launch_backward_mma<T, 64>(stream, dqkv, delta, dout, qkv, lse, shape);
  return launch_backward_mma<T, 128>(stream, dqkv, delta, dout, qkv, lse, shape);
}

template cudaError_t attention_backward_mma<__nv_bfloat16>(cudaStream_t, __nv_bfloat16*,
                                                           const float*, const __nv_bfloat16*,
                                                           const __nv_bfloat16*, const float*,
                                                           AttentionShape);
template cudaError_t attention_backward_mma<__half>(cudaStream_t, __half*, const float*,
                                                    const __half*, const __half*, const float*,
                                                    AttentionShape);

}  // namespace strata::gpu::cuda::kernels
