// The scalar bf16/fp16 conversions (cpu_adam/half.h), which the SIMD copies are compared with:
// every narrow value round-trips, and random fp32 values land on the nearest narrow value with
// ties to even, checked against neighbours computed in double.

#include "cpu_adam/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace strata::cpu_adam {
namespace {

template <class T>
T from_bits(std::uint32_t bits) {
  return T{static_cast<std::uint16_t>(bits)};
}

// Checks that `narrow` is the correctly rounded image of `x`: no representable neighbour is
// closer, and on a tie the chosen one has an even last bit.
template <class T>
void expect_nearest_even(float x, T narrow) {
  const double exact = x;
  const double chosen = to_float(narrow);
  ASSERT_FALSE(std::isnan(chosen)) << x;
  if (std::isinf(chosen)) {
    // Overflow: x must be at or beyond the midpoint between the largest finite value and 2^emax.
    const T largest =
        from_bits<T>((narrow.bits & 0x8000u) | (std::is_same_v<T, bf16> ? 0x7f7fu : 0x7bffu));
    const double top = std::abs(static_cast<double>(to_float(largest)));
    const double ulp = std::is_same_v<T, bf16> ? std::ldexp(1.0, 127 - 7) : 32.0;
    EXPECT_GE(std::abs(exact), top + ulp / 2) << x;
    return;
  }
  const double error = std::abs(chosen - exact);
  for (int delta : {-1, 1}) {
    const std::uint32_t magnitude = narrow.bits & 0x7fffu;
    if (magnitude == 0 && delta == -1) continue;  // the other side of zero is the sign flip
    const T neighbour = from_bits<T>((narrow.bits & 0x8000u) | (magnitude + delta));
    const double other = to_float(neighbour);
    if (std::isinf(other)) continue;
    const double other_error = std::abs(other - exact);
    EXPECT_LE(error, other_error) << "x=" << x << " bits=" << narrow.bits;
    if (error == other_error) {
      EXPECT_EQ(narrow.bits & 1u, 0u) << "tie not to even, x=" << x;
    }
  }
  if ((narrow.bits & 0x7fffu) == 0) {
    // Rounded to zero: the smallest nonzero magnitude must be no closer.
    const double smallest = to_float(from_bits<T>(1));
    EXPECT_LE(error, std::abs(smallest - std::abs(exact))) << x;
  }
}

TEST(Half, EveryBf16RoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const bf16 value = from_bits<bf16>(bits);
    const float wide = to_float(value);
    if (std::isnan(wide)) {
      EXPECT_TRUE(std::isnan(to_float(to_bf16(wide)))) << bits;
    } else {
      EXPECT_EQ(to_bf16(wide).bits, bits);
    }
  }
}

TEST(Half, EveryFp16RoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const fp16 value = from_bits<fp16>(bits);
    const float wide = to_float(value);
    if (std::isnan(wide)) {
      EXPECT_TRUE(std::isnan(to_float(to_fp16(wide)))) << bits;
    } else {
      EXPECT_EQ(to_fp16(wide).bits, bits);
    }
  }
}

TEST(Half, Fp16DecodesKnownValues) {
  EXPECT_EQ(to_float(fp16{0x3c00}), 1.0f);
  EXPECT_EQ(to_float(fp16{0x7bff}), 65504.0f);
  EXPECT_EQ(to_float(fp16{0x0001}), 0x1p-24f);
  EXPECT_EQ(to_float(fp16{0x0400}), 0x1p-14f);
  EXPECT_EQ(to_float(fp16{0xc000}), -2.0f);
  EXPECT_TRUE(std::isinf(to_float(fp16{0x7c00})));
}

TEST(Half, RandomFloatsRoundToNearestEven) {
  std::mt19937 random(4);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 200'000; ++i) {
    const float x = std::bit_cast<float>(any_bits(random));
    if (std::isnan(x)) continue;
    expect_nearest_even(x, to_bf16(x));
    expect_nearest_even(x, to_fp16(x));
  }
}

TEST(Half, Fp16RangeFloatsRoundToNearestEven) {
  // Concentrate on the fp16 range, subnormals and the overflow edge included.
  std::mt19937 random(5);
  std::uniform_int_distribution<std::uint32_t> magnitude(0x3000'0000u, 0x4780'0000u);
  for (int i = 0; i < 200'000; ++i) {
    const std::uint32_t sign = (i & 1) != 0 ? 0x8000'0000u : 0u;
    const float x = std::bit_cast<float>(sign | magnitude(random));
    expect_nearest_even(x, to_fp16(x));
  }
}

TEST(Half, TiesGoToEven) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: the even one is 1.
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f).bits, 0x3f80u);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(to_bf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82u);
  // fp16: 1 + 2^-11 ties to 1; 2^-25 ties to zero; 65520 ties to infinity.
  EXPECT_EQ(to_fp16(1.0f + 0x1p-11f).bits, 0x3c00u);
  EXPECT_EQ(to_fp16(0x1p-25f).bits, 0x0000u);
  EXPECT_EQ(to_fp16(0x1.8p-25f).bits, 0x0001u);
  EXPECT_EQ(to_fp16(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(to_fp16(65519.0f).bits, 0x7bffu);
}

TEST(Half, NanStaysNanAndInfinityStaysInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // A NaN whose payload sits only in the low bits would round into infinity without the check.
  const float low_payload_nan = std::bit_cast<float>(0x7f80'0001u);
  for (float x : {nan, -nan, low_payload_nan}) {
    EXPECT_TRUE(std::isnan(to_float(to_bf16(x))));
    EXPECT_TRUE(std::isnan(to_float(to_fp16(x))));
  }
  EXPECT_EQ(to_float(to_bf16(inf)), inf);
  EXPECT_EQ(to_float(to_fp16(-inf)), -inf);
  EXPECT_EQ(to_float(to_fp16(1e6f)), inf);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80u);
}

}  // namespace
}  // namespace strata::cpu_adam
