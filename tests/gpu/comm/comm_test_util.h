#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/host/kernels/cast.h"
#include "gpu/open_device.h"
#include "gpu/process_group.h"

namespace strata::gpu::testing {

using Bytes = std::vector<std::byte>;

// The process's World, started by comm_test_main.cpp before any test runs.
World& test_world();

inline constexpr DataType all_types[] = {DataType::float32, DataType::bfloat16, DataType::float16,
                                         DataType::int32,   DataType::int64,    DataType::uint8};
inline constexpr ReduceOp all_ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};

inline std::uint64_t mix(std::uint64_t x) {
  // splitmix64's finalizer: a different, well-spread value for every input.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element `index` of rank `rank`'s input for test `salt`, stored as `type`. Floats are in
// [-2, 2) with 24 significant bits (so the float32 sums round); integers cover their whole range
// (so sums wrap).
inline void write_element(DataType type, std::uint64_t seed, std::byte* target) {
  const std::uint64_t h = mix(seed);
  const float real = static_cast<float>(h >> 40) * 0x1p-22f - 2.0f;
  switch (type) {
    case DataType::float32:
      std::memcpy(target, &real, 4);
      return;
    case DataType::bfloat16: {
      const std::uint16_t bits = host::kernels::float_to_bf16(real);
      std::memcpy(target, &bits, 2);
      return;
    }
    case DataType::float16: {
      const std::uint16_t bits = host::kernels::float_to_fp16(real);
      std::memcpy(target, &bits, 2);
      return;
    }
    case DataType::int32: {
      const auto value = static_cast<std::int32_t>(h);
      std::memcpy(target, &value, 4);
      return;
    }
    case DataType::int64: {
      const auto value = static_cast<std::int64_t>(h);
      std::memcpy(target, &value, 8);
      return;
    }
    case DataType::uint8: {
      const auto value = static_cast<std::uint8_t>(h);
      std::memcpy(target, &value, 1);
      return;
    }
  }
}

// `count` elements of rank `rank`'s input for test `salt`.
inline Bytes make_input(DataType type, int rank, std::int64_t count, std::uint64_t salt) {
  const std::int64_t element_bytes = size_bytes(type);
  Bytes bytes(static_cast<std::size_t>(count * element_bytes));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint64_t seed =
        (salt << 48) ^ (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(i);
    write_element(type, seed, bytes.data() + i * element_bytes);
  }
  return bytes;
}

// The reduction the contract promises (gpu/comm.h, ReduceOp), written out element by element:
// rank 0 first, floats in fp32 with one final rounding, integers in 64 bits, wrapping.
Bytes reference_reduce(DataType type, ReduceOp op, const std::vector<Bytes>& inputs,
                       std::int64_t begin, std::int64_t count);

// A host device, its comm and a "comm" stream for each test; buffers move through stream copies.
class CommTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }

  // Device memory holding `bytes` (copied on the comm stream and synchronized).
  DeviceBuffer upload(const Bytes& bytes);
  // Device memory of `bytes` bytes, zero.
  DeviceBuffer zeros(std::int64_t bytes);
  // The first `bytes` bytes of `buffer` (after everything queued on the comm stream).
  Bytes download(const DeviceBuffer& buffer, std::int64_t bytes);

  // Asserts, through the comm's own all_gather, that every rank holds exactly `bytes`.
  void expect_same_on_all_ranks(const Bytes& bytes);

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Comm> comm_;
};

}  // namespace strata::gpu::testing
