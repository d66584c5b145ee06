#pragma once

// What the tensor-core attention kernels (attention_mma.cu, attention_mma_backward.cu) share: the
// mma.sync and ldmatrix wrappers, the shared-memory tiles of 16-bit rows, and the two products
// every step of FlashAttention-2 is made of. Fragment layouts are those of PTX's mma.m16n8k16 with
// 16-bit inputs (PTX ISA, "Matrix Fragments for mma.m16n8k16"): in a warp, lane l is in group
// g = l / 4 at position i = l % 4; it holds rows g and g + 8 of A and C, columns 2i and 2i + 1 of
// C (and 2i + 8, 2i + 9 of A), and of B rows 2i, 2i + 1, 2i + 8, 2i + 9 of column g.
#include <cstdint>

#include "gpu/cuda/kernels/attention_rows.cuh"
#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

using u32 = std::uint32_t;

constexpr int mma_warps = 4;  // warps per CTA, 16 rows each
// 8 elements (16 bytes) after each shared row: rows stay 16-byte aligned for ldmatrix, and the
// 8 rows one fragment load touches start 4 banks apart, so no two lanes hit one bank.
constexpr int row_pad = 8;

// The 32-bit words of one shared row of kHeadDim elements and its pad.
template <int kHeadDim>
constexpr int row_words = (kHeadDim + row_pad) / 2;

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

// Rows [first, first + kRows) of one head into the shared `tile`, 16 bytes a thread at a time;
// row r's kHeadDim elements start at source + offset_of(r). Rows past seq_len are zeros (a row of
// garbage could be NaN, and 0 x NaN is NaN).
template <typename T, int kHeadDim, int kRows, typename OffsetOf>
__device__ void load_tile(u32* tile, const T* source, OffsetOf offset_of, i64 first, i64 seq_len) {
  constexpr int chunks_per_row = kHeadDim / 8;
  for (int c = static_cast<int>(threadIdx.x); c < kRows * chunks_per_row;
       c += mma_warps * warp_size) {
    const int r = c / chunks_per_row;
    const int chunk = c % chunks_per_row;
    const i64 row = first + r;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (row < seq_len) value = *reinterpret_cast<const uint4*>(source + offset_of(row) + chunk * 8);
    *reinterpret_cast<uint4*>(tile + r * row_words<kHeadDim> + chunk * 4) = value;
  }
}

// The A fragment of columns [16 step, 16 step + 16) of the 16 shared rows from `rows` on.
template <int kHeadDim>
__device__ void load_a_fragment(u32 (&a)[4], const u32* rows, int step, int lane) {
  const u32* row = rows + (lane / 4) * row_words<kHeadDim> + step * 8 + lane % 4;
  a[0] = row[0];
  a[1] = row[8 * row_words<kHeadDim>];
  a[2] = row[4];
  a[3] = row[8 * row_words<kHeadDim> + 4];
}

// acc[n] += a (16 rows, columns [16 step, 16 step + 16) of kHeadDim) times the same columns of
// the shared rows 8n to 8n + 7 of `rows`, transposed: one step of A R^T, as the scores Q K^T.
template <typename T, int kHeadDim, int kRows>
__device__ void add_times_rows_transposed(float (&acc)[kRows / 8][4], const u32 (&a)[4],
                                          const u32* rows, int step, int lane) {
#pragma unroll
  for (int n = 0; n < kRows / 8; ++n) {
    const u32* row = rows + (n * 8 + lane / 4) * row_words<kHeadDim> + step * 8 + lane % 4;
    mma_16816<T>(acc[n], a, row[0], row[4]);
  }
}

// acc = A R^T, where A is the 16 shared rows from `a_rows` and R the kRows shared rows from
// `rows`, both kHeadDim wide: the A fragments are read from shared memory step by step, so that
// a warp keeps no operand in registers.
template <typename T, int kHeadDim, int kRows>
__device__ void rows_times_rows_transposed(float (&acc)[kRows / 8][4], const u32* a_rows,
                                           const u32* rows, int lane) {
#pragma unroll
  for (int n = 0; n < kRows / 8; ++n)
    acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    u32 a[4];
    load_a_fragment<kHeadDim>(a, a_rows, step, lane);
    add_times_rows_transposed<T, kHeadDim, kRows>(acc, a, rows, step, lane);
  }
}

// sums += W R, W 16 x kRows in C fragments (weights[n] holds columns 8n to 8n + 7) rounded to T,
// R the kRows shared rows from `rows`, kHeadDim wide. The C fragments of two adjacent 8-column
// tiles are exactly one A fragment; R's B fragments come from the shared tile transposed, two
// 8-column tiles per ldmatrix.
template <typename T, int kHeadDim, int kRows>
__device__ void add_weights_times_rows(float (&sums)[kHeadDim / 8][4],
                                       const float (&weights)[kRows / 8][4], const u32* rows,
                                       int lane) {
#pragma unroll
  for (int step = 0; step < kRows / 16; ++step) {
    const float(&low)[4] = weights[2 * step];
    const float(&high)[4] = weights[2 * step + 1];
    const u32 w[4] = {pack_rounded<T>(low[0], low[1]), pack_rounded<T>(low[2], low[3]),
                      pack_rounded<T>(high[0], high[1]), pack_rounded<T>(high[2], high[3])};
    // Lane l names row l % 8 of matrix l / 8: rows + 8 for the odd matrices, columns + 8 for
    // the upper two.
    const int row = step * 16 + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; d += 2) {
      u32 r[4];
      load_matrices_transposed(r, rows + row * row_words<kHeadDim> + (d + lane / 16) * 4);
      mma_16816<T>(sums[d], w, r[0], r[1]);
      mma_16816<T>(sums[d + 1], w, r[2], r[3]);
    }
  }
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels
