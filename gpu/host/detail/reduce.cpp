#include "gpu/host/detail/reduce.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/assert.h"
#include "gpu/host/kernels/cast.h"

namespace strata::gpu::host::detail {
namespace {

// Elements reduced at a time: small enough that a tile of every format stays in L1 while each
// block's slice is added in, large enough that the loops vectorize.
constexpr std::int64_t tile_elements = 1024;

struct Float32Format {
  using Stored = float;
  static float widen(float value) { return value; }
  static float narrow(float value) { return value; }
};

struct BFloat16Format {
  using Stored = std::uint16_t;
  static float widen(std::uint16_t value) { return kernels::bf16_to_float(value); }
  static std::uint16_t narrow(float value) { return kernels::float_to_bf16(value); }
};

struct Float16Format {
  using Stored = std::uint16_t;
  static float widen(std::uint16_t value) { return kernels::fp16_to_float(value); }
  static std::uint16_t narrow(float value) { return kernels::float_to_fp16(value); }
};

// max that keeps a NaN once one has been seen (NaN compares false with everything, so a plain
// `value > acc` would drop it depending on the order).
inline float max_keeping_nan(float acc, float value) {
  if (acc != acc) return acc;  // NOLINT(misc-redundant-expression): NaN test
  return (value != value || value > acc) ? value : acc;
}

template <class Format>
void reduce_floats(ReduceOp op, const std::byte* blocks, std::int64_t block_stride_bytes,
                   int block_count, std::int64_t count, std::byte* target) {
  using Stored = typename Format::Stored;
  std::array<float, tile_elements> acc;
  std::array<Stored, tile_elements> staged;
  const float divisor = static_cast<float>(block_count);
  for (std::int64_t begin = 0; begin < count; begin += tile_elements) {
    const std::int64_t length = std::min(tile_elements, count - begin);
    const std::int64_t offset_bytes = begin * static_cast<std::int64_t>(sizeof(Stored));
    const auto length_bytes = static_cast<std::size_t>(length) * sizeof(Stored);
    for (int block = 0; block < block_count; ++block) {
      std::memcpy(staged.data(), blocks + block * block_stride_bytes + offset_bytes, length_bytes);
      if (block == 0) {
        for (std::int64_t i = 0; i < length; ++i)
          acc[i] = Format::widen(staged[i]);
      } else if (op == ReduceOp::max) {
        for (std::int64_t i = 0; i < length; ++i) {
          acc[i] = max_keeping_nan(acc[i], Format::widen(staged[i]));
        }
      } else {
        for (std::int64_t i = 0; i < length; ++i)
          acc[i] += Format::widen(staged[i]);
      }
    }
    if (op == ReduceOp::avg) {
      for (std::int64_t i = 0; i < length; ++i)
        acc[i] /= divisor;
    }
    for (std::int64_t i = 0; i < length; ++i)
      staged[i] = Format::narrow(acc[i]);
    std::memcpy(target + offset_bytes, staged.data(), length_bytes);
  }
}

// Integers accumulate in 64 bits; sums wrap (unsigned arithmetic, so no signed overflow), and the
// final conversion to the narrower type is modular (C++20).
template <class Integer>
void reduce_integers(ReduceOp op, const std::byte* blocks, std::int64_t block_stride_bytes,
                     int block_count, std::int64_t count, std::byte* target) {
  std::array<std::uint64_t, tile_elements> sum;
  std::array<std::int64_t, tile_elements> max;
  std::array<Integer, tile_elements> staged;
  for (std::int64_t begin = 0; begin < count; begin += tile_elements) {
    const std::int64_t length = std::min(tile_elements, count - begin);
    const std::int64_t offset_bytes = begin * static_cast<std::int64_t>(sizeof(Integer));
    const auto length_bytes = static_cast<std::size_t>(length) * sizeof(Integer);
    for (int block = 0; block < block_count; ++block) {
      std::memcpy(staged.data(), blocks + block * block_stride_bytes + offset_bytes, length_bytes);
      for (std::int64_t i = 0; i < length; ++i) {
        const auto value = static_cast<std::int64_t>(staged[i]);
        if (block == 0) {
          sum[i] = static_cast<std::uint64_t>(value);
          max[i] = value;
        } else {
          sum[i] += static_cast<std::uint64_t>(value);
          max[i] = std::max(max[i], value);
        }
      }
    }
    for (std::int64_t i = 0; i < length; ++i) {
      switch (op) {
        case ReduceOp::sum:
          staged[i] = static_cast<Integer>(sum[i]);
          break;
        case ReduceOp::avg:
          staged[i] = static_cast<Integer>(static_cast<std::int64_t>(sum[i]) / block_count);
          break;
        case ReduceOp::max:
          staged[i] = static_cast<Integer>(max[i]);
          break;
      }
    }
    std::memcpy(target + offset_bytes, staged.data(), length_bytes);
  }
}

}  // namespace

void reduce_blocks(DataType type, ReduceOp op, const std::byte* blocks,
                   std::int64_t block_stride_bytes, int block_count, std::int64_t count,
                   void* target) {
  STRATA_ASSERT(block_count >= 1);
  STRATA_ASSERT(count >= 0);
  auto* out = static_cast<std::byte*>(target);
  // One block is its own reduction, bit for bit (a signalling NaN stays signalling), exactly as
  // the solo backend's copy gives it.
  if (block_count == 1) {
    if (count > 0 && out != blocks)
      std::memmove(out, blocks, static_cast<std::size_t>(count * size_bytes(type)));
    return;
  }
  switch (type) {
    case DataType::float32:
      return reduce_floats<Float32Format>(op, blocks, block_stride_bytes, block_count, count, out);
    case DataType::bfloat16:
      return reduce_floats<BFloat16Format>(op, blocks, block_stride_bytes, block_count, count, out);
    case DataType::float16:
      return reduce_floats<Float16Format>(op, blocks, block_stride_bytes, block_count, count, out);
    case DataType::int32:
      return reduce_integers<std::int32_t>(op, blocks, block_stride_bytes, block_count, count, out);
    case DataType::int64:
      return reduce_integers<std::int64_t>(op, blocks, block_stride_bytes, block_count, count, out);
    case DataType::uint8:
      return reduce_integers<std::uint8_t>(op, blocks, block_stride_bytes, block_count, count, out);
  }
  STRATA_ASSERT(false);
}

}  // namespace strata::gpu::host::detail
