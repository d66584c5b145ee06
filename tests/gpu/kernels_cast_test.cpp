// fp32 <-> bf16 / fp16 casts: every 16-bit pattern round-trips; every rounding boundary (the
// midpoint between two neighbours, and one fp32 ulp either side) rounds to nearest, ties to even;
// NaN stays NaN; overflow gives infinity; fp16 subnormals are exact. The casts are exact by
// construction, so the "error" here is zero: any difference is a failure.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/cast.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

bool is_nan_bf16(std::uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu);
}
bool is_nan_fp16(std::uint16_t bits) {
  return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu);
}

struct Format {
  const char* name;
  std::uint16_t (*narrow)(float);
  float (*widen)(std::uint16_t);
  bool (*is_nan)(std::uint16_t);
  std::uint16_t infinity;
};

const Format bf16{"bf16", float_to_bf16, bf16_to_float, is_nan_bf16, 0x7f80};
const Format fp16{"fp16", float_to_fp16, fp16_to_float, is_nan_fp16, 0x7c00};

float next_up(float value) {
  return std::nextafter(value, std::numeric_limits<float>::infinity());
}
float next_down(float value) {
  return std::nextafter(value, -std::numeric_limits<float>::infinity());
}

void check_every_pattern_round_trips(const Format& format) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto pattern = static_cast<std::uint16_t>(bits);
    const float wide = format.widen(pattern);
    if (format.is_nan(pattern)) {
      ASSERT_TRUE(std::isnan(wide)) << format.name << " " << bits;
      ASSERT_TRUE(format.is_nan(format.narrow(wide))) << format.name << " " << bits;
      ASSERT_EQ(format.narrow(wide) & 0x8000u, pattern & 0x8000u) << "sign of NaN " << bits;
    } else {
      ASSERT_EQ(format.narrow(wide), pattern) << format.name << " " << bits;
    }
  }
}

// For each pair of neighbouring finite positive values lo < hi (patterns p, p + 1), the midpoint
// is exact in fp32: it must round to the even pattern, and one fp32 ulp either side to the nearer.
void check_every_midpoint_rounds_to_nearest_even(const Format& format) {
  for (std::uint32_t bits = 0; bits + 1 < format.infinity; ++bits) {
    const auto low_bits = static_cast<std::uint16_t>(bits);
    const auto high_bits = static_cast<std::uint16_t>(bits + 1);
    const double low = format.widen(low_bits);
    const double high = format.widen(high_bits);
    const auto midpoint = static_cast<float>((low + high) / 2.0);
    ASSERT_EQ(static_cast<double>(midpoint), (low + high) / 2.0) << "midpoint not exact";
    const std::uint16_t even = (low_bits & 1u) == 0 ? low_bits : high_bits;
    ASSERT_EQ(format.narrow(midpoint), even) << format.name << " tie at " << bits;
    ASSERT_EQ(format.narrow(next_down(midpoint)), low_bits) << format.name << " below " << bits;
    ASSERT_EQ(format.narrow(next_up(midpoint)), high_bits) << format.name << " above " << bits;
    // And the negative side mirrors it.
    ASSERT_EQ(format.narrow(-midpoint), even | 0x8000u) << format.name << " -tie at " << bits;
  }
}

TEST(KernelsCast, Bf16EveryPatternRoundTrips) {
  check_every_pattern_round_trips(bf16);
}
TEST(KernelsCast, Fp16EveryPatternRoundTrips) {
  check_every_pattern_round_trips(fp16);
}
TEST(KernelsCast, Bf16EveryMidpointRoundsToNearestEven) {
  check_every_midpoint_rounds_to_nearest_even(bf16);
}
TEST(KernelsCast, Fp16EveryMidpointRoundsToNearestEvenIncludingSubnormals) {
  check_every_midpoint_rounds_to_nearest_even(fp16);
}

TEST(KernelsCast, OverflowGivesInfinityAndNanStaysNan) {
  const float max_float = std::numeric_limits<float>::max();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(max_float), 0x7f80u);  // rounds past bf16's largest finite value
  EXPECT_EQ(float_to_bf16(inf), 0x7f80u);
  EXPECT_EQ(float_to_bf16(-inf), 0xff80u);
  EXPECT_EQ(float_to_fp16(65504.0F), 0x7bffu);
  EXPECT_EQ(float_to_fp16(next_down(65520.0F)), 0x7bffu);
  EXPECT_EQ(float_to_fp16(65520.0F), 0x7c00u);
  EXPECT_EQ(float_to_fp16(-1e9F), 0xfc00u);
  EXPECT_EQ(float_to_fp16(inf), 0x7c00u);
  // A NaN whose payload sits only in the low 16 bits would become infinity if its bits were
  // merely rounded; it must stay a NaN.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  EXPECT_TRUE(is_nan_bf16(float_to_bf16(low_payload_nan)));
  EXPECT_TRUE(is_nan_fp16(float_to_fp16(low_payload_nan)));
  EXPECT_TRUE(is_nan_bf16(float_to_bf16(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(float_to_fp16(-0.0F), 0x8000u);
  EXPECT_EQ(fp16_to_float(0x0001u), std::ldexp(1.0F, -24));  // smallest fp16 subnormal
}

TEST(KernelsCast, ArrayCastsMatchScalarCastsOnOddLengths) {
  constexpr std::int64_t n = 200003;  // several parallel chunks and a ragged tail
  const auto values = testing::to_float(testing::random_values(n, 1, -70000.0, 70000.0));
  std::vector<std::uint16_t> narrow(n);
  std::vector<float> wide(n);
  cast_fp32_to_bf16(narrow.data(), values.data(), n);
  cast_bf16_to_fp32(wide.data(), narrow.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(narrow[i], float_to_bf16(values[i]));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[i]),
              std::bit_cast<std::uint32_t>(bf16_to_float(narrow[i])));
  }
  cast_fp32_to_fp16(narrow.data(), values.data(), n);
  cast_fp16_to_fp32(wide.data(), narrow.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(narrow[i], float_to_fp16(values[i]));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[i]),
              std::bit_cast<std::uint32_t>(fp16_to_float(narrow[i])));
  }
  cast_fp32_to_bf16(narrow.data(), values.data(), 0);  // an empty cast is fine
}

}  // namespace
}  // namespace strata::gpu::host::kernels
