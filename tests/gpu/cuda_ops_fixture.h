#pragma once

// What the CUDA op tests share: each tensor held on the host device and on the CUDA device from
// the same bytes, every op run on both, and the results compared (bit for bit, or within a
// scaled error with NaN in the same places). Without a usable GPU every test skips in SetUp
// with one line saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/ops.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {

using i64 = std::int64_t;

inline std::vector<float> random_floats(i64 n, std::uint64_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& value : values)
    value = distribution(engine);
  return values;
}

inline std::vector<std::int32_t> random_tokens(i64 n, std::int32_t vocab, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<std::int32_t> distribution(0, vocab - 1);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (std::int32_t& token : tokens)
    token = distribution(engine);
  return tokens;
}

// The scaled-error tolerance of an fp32 result whose elements are sums of `terms` values, added in
// another order on each backend: eight fp32 ulps times sqrt(terms) (the rounding errors of a long
// sum add like a random walk), and never below 2e-5, a few ulps of the largest value.
inline double tolerance_for(i64 terms) {
  return std::max(2e-5, 8.0 * FLT_EPSILON * std::sqrt(static_cast<double>(terms)));
}

enum class Side { host, cuda };

// One tensor held on both devices.
struct Pair {
  DeviceBuffer host;
  DeviceBuffer cuda;
  i64 bytes = 0;

  template <class T = float>
  T* on(Side side) const {
    return side == Side::host ? host.as<T>() : cuda.as<T>();
  }
};

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::cuda_unavailable_reason().empty()) {
      GTEST_SKIP() << testing::cuda_unavailable_reason();
    }
    DeviceOptions options;
    options.memory_budget_bytes = budget_bytes();
    host_ = create_host_device(options);
    cuda_ = open_device(options);
    ASSERT_EQ(cuda_->kind(), DeviceKind::cuda);
    host_ops_ = create_ops(*host_);
    cuda_ops_ = create_ops(*cuda_);
  }

  // The budget of each device; the real shapes need more than the small ones.
  virtual i64 budget_bytes() const { return i64{256} << 20; }

  void TearDown() override {
    pairs_.clear();
    cuda_ops_.reset();
    host_ops_.reset();
  }

  Device& device(Side side) { return side == Side::host ? *host_ : *cuda_; }

  // The same bytes on both devices.
  template <class T>
  Pair& upload(const std::vector<T>& values) {
    auto bytes = static_cast<i64>(values.size() * sizeof(T));
    auto pair = std::make_unique<Pair>();
    pair->bytes = bytes;
    for (Side side : {Side::host, Side::cuda}) {
      DeviceBuffer buffer = device(side).allocate(bytes, "test tensor");
      PinnedBuffer staging = device(side).allocate_pinned(bytes);
      if (bytes > 0) std::memcpy(staging.data(), values.data(), static_cast<std::size_t>(bytes));
      device(side).compute_stream().copy(buffer.data(), staging.data(), bytes,
                                         CopyKind::host_to_device);
      device(side).compute_stream().synchronize();
      (side == Side::host ? pair->host : pair->cuda) = std::move(buffer);
    }
    pairs_.push_back(std::move(pair));
    return *pairs_.back();
  }

  Pair& zeros(i64 count) { return upload(std::vector<float>(static_cast<std::size_t>(count))); }

  // `count` floats of NaN on both devices: an output an op should write, so that an element it
  // leaves unwritten can never pass as a result.
  Pair& poisoned(i64 count) {
    return upload(std::vector<float>(static_cast<std::size_t>(count), std::nanf("")));
  }

  template <class T = float>
  std::vector<T> download(Side side, const Pair& pair) {
    std::vector<T> values(static_cast<std::size_t>(pair.bytes) / sizeof(T));
    PinnedBuffer staging = device(side).allocate_pinned(pair.bytes);
    Stream& stream = device(side).compute_stream();
    stream.copy(staging.data(), side == Side::host ? pair.host.data() : pair.cuda.data(),
                pair.bytes, CopyKind::device_to_host);
    stream.synchronize();
    if (pair.bytes > 0)
      std::memcpy(values.data(), staging.data(), static_cast<std::size_t>(pair.bytes));
    return values;
  }

  // Runs `op(ops, stream, side)` on both devices.
  template <class Op>
  void both(Op op) {
    op(*host_ops_, host_->compute_stream(), Side::host);
    op(*cuda_ops_, cuda_->compute_stream(), Side::cuda);
    host_->synchronize();
    cuda_->synchronize();
  }

  // max |cuda - host| / max |host| within `tolerance`, NaN in the same places.
  void expect_close(const Pair& pair, const std::string& what, double tolerance) {
    std::vector<float> expected = download(Side::host, pair);
    std::vector<float> actual = download(Side::cuda, pair);
    ASSERT_EQ(actual.size(), expected.size());
    double max_difference = 0.0;
    double max_expected = 0.0;
    for (std::size_t i = 0; i < actual.size(); ++i) {
      ASSERT_EQ(std::isnan(actual[i]), std::isnan(expected[i]))
          << what << "[" << i << "]: cuda " << actual[i] << ", host " << expected[i];
      if (std::isnan(expected[i])) continue;
      max_difference = std::max(max_difference, std::abs(double{actual[i]} - expected[i]));
      max_expected = std::max(max_expected, std::abs(double{expected[i]}));
    }
    double error = max_difference / std::max(max_expected, 1e-30);
    std::printf("[ measured ] %s: scaled error %.3g\n", what.c_str(), error);
    EXPECT_LE(error, tolerance) << what;
  }

  void expect_equal_bits(const Pair& pair, const std::string& what) {
    std::vector<std::uint8_t> expected = download<std::uint8_t>(Side::host, pair);
    std::vector<std::uint8_t> actual = download<std::uint8_t>(Side::cuda, pair);
    EXPECT_EQ(actual, expected) << what;
  }

  std::unique_ptr<Device> host_;
  std::unique_ptr<Device> cuda_;
  std::unique_ptr<Ops> host_ops_;
  std::unique_ptr<Ops> cuda_ops_;
  std::vector<std::unique_ptr<Pair>> pairs_;
};

}  // namespace strata::gpu
