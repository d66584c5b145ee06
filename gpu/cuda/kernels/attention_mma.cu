// The tensor-core attention forward; see attention_mma.h. Fragment layouts are those of PTX's
// mma.m16n8k16 with 16-bit inputs (PTX ISA, "Matrix Fragments for mma.m16n8k16"): in a warp,
// lane l is in group g = l / 4 at position i = l % 4; it holds rows g and g + 8 of A and C, columns
// 2i and 2i + 1 of C (and 2i + 8, 2i + 9 of A), and of B rows 2i, 2i + 1, 2i + 8, 2i + 9 of column
// g. Each warp keeps its 16 query rows' Q fragments, scores, and out sums in registers; the
// online softmax runs on the scores of each 64-key tile as in attention.cu, and the row
// statistics are shared by the 4 lanes of a group with two shuffles.
#include "gpu/cuda/kernels/attention_mma.h"

#include "gpu/cuda/kernels/attention_rows.cuh"
#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

using u32 = std::uint32_t;

constexpr int mma_warps = 4;
constexpr int query_tile = 16 * mma_warps;  // query rows per CTA
constexpr int key_tile = 64;                // key rows per shared-memory tile
// 8 elements (16 bytes) after each shared row: rows stay 16-byte aligned for ldmatrix, and the
// 8 rows one fragment load touches start 4 banks apart, so no two lanes hit one bank.
constexpr int row_pad = 8;

// acc += a b on the tensor cores, a 16 x 16 (row-major), b 16 x 8 (column-major), in fp32.
template <typename T>
__device__ void mma_16816(float (&acc)[4], const u32 (&a)[4], u32 b0, u32 b1);

template <>
__device__ void mma_16816<__nv_bfloat16>(float (&acc)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ void mma_16816<__half>(float (&acc)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory, transposed: lanes 8m to 8m + 7 name
// the rows of matrix m, and each lane receives, of each matrix, the elements (2i, g) and
// (2i + 1, g): a B fragment's register when the rows are the product's k.
__device__ void load_matrices_transposed(u32 (&target)[4], const u32* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(target[0]), "=r"(target[1]), "=r"(target[2]), "=r"(target[3])
               : "r"(address)
               : "memory");
}

// Two fp32 values rounded to T (to nearest even, the bits base/half_bits.h gives for finite
// values) in one register, `low` in the lower half as mma expects the lower column.
template <typename T>
__device__ u32 pack_rounded(float low, float high);
template <>
__device__ u32 pack_rounded<__nv_bfloat16>(float low, float high) {
  return static_cast<u32>(__bfloat16_as_ushort(__float2bfloat16_rn(low))) |
         (static_cast<u32>(__bfloat16_as_ushort(__float2bfloat16_rn(high))) << 16);
}
template <>
__device__ u32 pack_rounded<__half>(float low, float high) {
  return static_cast<u32>(__half_as_ushort(__float2half_rn(low))) |
         (static_cast<u32>(__half_as_ushort(__float2half_rn(high))) << 16);
}

// Two adjacent 16-bit elements as one register (the lower address in the lower half).
template <typename T>
__device__ u32 load_pair(const T* source) {
  return *reinterpret_cast<const u32*>(source);
}

// Where one CTA works: its (batch, head), its query tile, and its warp's rows.
struct MmaTile {
  i64 b = 0;
  i64 head = 0;
  i64 kv_head = 0;
  i64 first_row = 0;  // the CTA's first query row
  i64 rows[2] = {};   // this lane's rows: g and g + 8 of its warp's 16
};

// The key (is_value false) or value rows [first, first + key_tile) of the CTA's kv head into
// `tile`, 16 bytes a thread at a time; rows past seq_len are zeros (a value row of garbage could
// be NaN, and 0 x NaN is NaN).
template <typename T, int kHeadDim>
__device__ void load_key_tile(u32* tile, const T* qkv, const AttentionRows& at, const MmaTile& w,
                              i64 first, bool is_value) {
  constexpr int chunks_per_row = kHeadDim / 8;
  constexpr int row_words = (kHeadDim + row_pad) / 2;
  for (int c = static_cast<int>(threadIdx.x); c < key_tile * chunks_per_row;
       c += mma_warps * warp_size) {
    const int r = c / chunks_per_row;
    const int chunk = c % chunks_per_row;
    const i64 key = first + r;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (key < at.shape.seq_len) {
      const i64 offset = is_value ? at.v(w.b, key, w.kv_head) : at.k(w.b, key, w.kv_head);
      value = *reinterpret_cast<const uint4*>(qkv + offset + chunk * 8);
    }
    *reinterpret_cast<uint4*>(tile + r * row_words + chunk * 4) = value;
  }
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
  constexpr int row_words = (kHeadDim + row_pad) / 2;
#pragma unroll
  for (int n = 0; n < key_tile / 8; ++n) {
    scores[n][0] = scores[n][1] = scores[n][2] = scores[n][3] = 0.0f;
    const u32* key_row = keys + (n * 8 + lane / 4) * row_words + lane % 4;
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step)
      mma_16816<T>(scores[n], q[step], key_row[step * 8], key_row[step * 8 + 4]);
  }
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

// sums += P V: the probabilities, rounded to T, are the A fragments of 16 keys each (the C
// fragments of two adjacent 8-key tiles are exactly one A fragment); V's B fragments come from
// the shared tile transposed, two 8-column tiles per ldmatrix.
template <typename T, int kHeadDim>
__device__ void tile_add_values(float (&sums)[kHeadDim / 8][4],
                                const float (&probabilities)[key_tile / 8][4], const u32* values,
                                int lane) {
  constexpr int row_words = (kHeadDim + row_pad) / 2;
#pragma unroll
  for (int step = 0; step < key_tile / 16; ++step) {
    const float(&low)[4] = probabilities[2 * step];
    const float(&high)[4] = probabilities[2 * step + 1];
    const u32 p[4] = {pack_rounded<T>(low[0], low[1]), pack_rounded<T>(low[2], low[3]),
                      pack_rounded<T>(high[0], high[1]), pack_rounded<T>(high[2], high[3])};
    // Lane l names row l % 8 of matrix l / 8: keys + 8 for the odd matrices, columns + 8 for
    // the upper two.
    const int key = step * 16 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; d += 2) {
      u32 v[4];
      load_matrices_transposed(v, values + key * row_words + (d + lane / 16) * 4);
      mma_16816<T>(sums[d], p, v[0], v[1]);
      mma_16816<T>(sums[d + 1], p, v[2], v[3]);
    }
  }
}

// One CTA per (batch x head, query tile), the longest tiles (the last rows, which see the most
// keys) first; 4 warps of 16 query rows each.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(mma_warps* warp_size)
    attention_forward_mma_kernel(T* out, float* lse, const T* qkv, AttentionShape shape,
                                 float scale) {
  constexpr int row_words = (kHeadDim + row_pad) / 2;
  __shared__ alignas(16) u32 keys[key_tile * row_words];
  __shared__ alignas(16) u32 values[key_tile * row_words];
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
    tile_add_values<T, kHeadDim>(sums, scores, values, lane);
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
