// The element-wise formulas both backends share (gpu/detail/elementwise.h), on the host: the
// roundings are the ones written (never fused into one), and the host backend's accumulate is
// exactly that formula. tests/gpu/cuda_ops_test.cpp holds the CUDA kernels to the same bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/detail/elementwise.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"

namespace strata::gpu {
namespace {

std::vector<float> uniform_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values)
    value = distribution(engine);
  return values;
}

// The product rounded to fp32, then the sum: volatile keeps each rounding where it is written.
float two_roundings(float target, float source, float scale) {
  volatile float product = source * scale;
  volatile float sum = target + product;
  return sum;
}

TEST(Elementwise, ScaledSumRoundsTheProductThenTheSumAndIsNeverFused) {
  const std::size_t n = 4096;
  const std::vector<float> targets = uniform_floats(n, 1);
  const std::vector<float> sources = uniform_floats(n, 2);
  std::size_t fused_differs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float got = detail::scaled_sum(targets[i], sources[i], 0.375f);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got),
              std::bit_cast<std::uint32_t>(two_roundings(targets[i], sources[i], 0.375f)))
        << "i=" << i;
    if (std::fma(sources[i], 0.375f, targets[i]) != got) ++fused_differs;
  }
  // The data tells a fused multiply-add from the two roundings, so the check above means something.
  EXPECT_GT(fused_differs, n / 100);
}

TEST(Elementwise, HostAccumulateIsTheSharedFormulaBitForBit) {
  auto device = create_host_device({});
  auto ops = create_ops(*device);
  const std::int64_t n = 1037;
  const std::vector<float> targets = uniform_floats(n, 3);
  const std::vector<float> sources = uniform_floats(n, 4);
  DeviceBuffer target = device->allocate(n * 4, "target");
  DeviceBuffer source = device->allocate(n * 4, "source");
  PinnedBuffer staging = device->allocate_pinned(n * 4);
  Stream& stream = device->compute_stream();
  std::memcpy(staging.data(), targets.data(), n * 4);
  stream.copy(target.data(), staging.data(), n * 4, CopyKind::host_to_device);
  stream.synchronize();
  std::memcpy(staging.data(), sources.data(), n * 4);
  stream.copy(source.data(), staging.data(), n * 4, CopyKind::host_to_device);
  ops->accumulate(stream, target.as<float>(), source.as<float>(), 0.375f, n);
  stream.copy(staging.data(), target.data(), n * 4, CopyKind::device_to_host);
  stream.synchronize();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(staging.as<float>()[i]),
              std::bit_cast<std::uint32_t>(detail::scaled_sum(targets[at], sources[at], 0.375f)))
        << "i=" << i;
  }
  ops.reset();
}

}  // namespace
}  // namespace strata::gpu
