// The fused gradient scan: the squared L2 norm against a double sum, and inf/NaN found exactly,
// wherever it sits (first element, inside a vector, in a tail, in a later tile), for each type.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cpu_adam/optimizer.h"
#include "tests/cpu_adam/reference.h"

namespace strata::cpu_adam {
namespace {

using testing::IsaGuard;
using testing::supported_isas;

template <class G>
G make(float value) {
  if constexpr (std::is_same_v<G, float>) {
    return value;
  } else if constexpr (std::is_same_v<G, bf16>) {
    return to_bf16(value);
  } else {
    return to_fp16(value);
  }
}

template <class G>
float widen(G value) {
  if constexpr (std::is_same_v<G, float>) {
    return value;
  } else {
    return to_float(value);
  }
}

template <class G>
void check_scan() {
  IsaGuard guard;
  // Values up to 5.5e4 keep fp16 finite; fp32 gets its full range in FindsHugeFiniteFp32.
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{17}, std::size_t{1023},
                          static_cast<std::size_t>(2 * kTileElements + 5)}) {
      std::vector<float> wide;
      std::vector<G> g = testing::narrow_gradients<G>(testing::awkward_values(n, 61, 5e4f), wide);
      double expected = 0.0;
      for (float x : wide)
        expected += static_cast<double>(x) * x;
      const GradStats stats = scan_gradients<G>(g);
      EXPECT_FALSE(stats.has_inf_or_nan) << isa_name(isa) << " n=" << n;
      EXPECT_NEAR(stats.sum_squares, expected, 1e-12 * expected) << isa_name(isa) << " n=" << n;
      for (float bad :
           {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::quiet_NaN()}) {
        for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
          std::vector<G> poisoned = g;
          poisoned[at] = make<G>(bad);
          EXPECT_TRUE(scan_gradients<G>(poisoned).has_inf_or_nan)
              << isa_name(isa) << " n=" << n << " at=" << at << " value=" << bad;
        }
      }
      // The largest finite values are not overflow.
      std::vector<G> largest = g;
      largest[n - 1] = make<G>(std::is_same_v<G, fp16> ? 65504.0f : 3.0e38f);
      EXPECT_FALSE(scan_gradients<G>(largest).has_inf_or_nan) << isa_name(isa);
      EXPECT_TRUE(std::isfinite(widen(largest[n - 1])));
    }
    EXPECT_EQ(scan_gradients<G>(std::span<const G>{}).sum_squares, 0.0);
  }
}

TEST(Scan, Fp32) {
  check_scan<float>();
}
TEST(Scan, Bf16) {
  check_scan<bf16>();
}
TEST(Scan, Fp16) {
  check_scan<fp16>();
}

TEST(Scan, HugeFiniteFp32DoesNotOverflowTheSum) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    const std::vector<float> g(100, 3.0e38f);
    const GradStats stats = scan_gradients<float>(g);
    EXPECT_FALSE(stats.has_inf_or_nan);
    EXPECT_NEAR(stats.sum_squares, 100 * 9.0e76, 1e-6 * 9.0e78) << isa_name(isa);
  }
}

TEST(Scan, DenormalsCount) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    const std::vector<float> g(33, std::numeric_limits<float>::denorm_min());
    const double expected = 33.0 * std::pow(static_cast<double>(g[0]), 2);
    EXPECT_NEAR(scan_gradients<float>(g).sum_squares, expected, 1e-9 * expected) << isa_name(isa);
  }
}

// A span scanned in pieces that start on its tiles (the gradient reducer's pieces of a module's
// shard), its tiles' partials combined, has the bits of one scan of the whole span: the gradient
// norm is the same wherever the gradients were summed.
template <class G>
void check_tiles_combine_to_the_whole() {
  const std::size_t n = static_cast<std::size_t>(5 * kTileElements + 123);
  std::vector<float> wide;
  std::vector<G> g = testing::narrow_gradients<G>(testing::awkward_values(n, 17, 3e3f), wide);
  const GradStats whole = scan_gradients<G>(g);
  for (std::int64_t piece_tiles : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}}) {
    std::vector<GradStats> partials(
        static_cast<std::size_t>(gradient_tile_count(static_cast<std::int64_t>(n))));
    const auto piece = static_cast<std::size_t>(piece_tiles * kTileElements);
    for (std::size_t at = 0; at < n; at += piece) {
      const std::span<const G> part = std::span<const G>(g).subspan(at, std::min(piece, n - at));
      scan_gradient_tiles<G>(
          part, std::span(partials).subspan(at / static_cast<std::size_t>(kTileElements),
                                            static_cast<std::size_t>(gradient_tile_count(
                                                static_cast<std::int64_t>(part.size())))));
    }
    const GradStats combined = combine_gradient_tiles(partials);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(combined.sum_squares),
              std::bit_cast<std::uint64_t>(whole.sum_squares))
        << "pieces of " << piece_tiles << " tiles";
    EXPECT_EQ(combined.has_inf_or_nan, whole.has_inf_or_nan);
  }
  std::vector<G> poisoned = g;
  poisoned[n - 2] = make<G>(std::numeric_limits<float>::quiet_NaN());
  std::vector<GradStats> partials(
      static_cast<std::size_t>(gradient_tile_count(static_cast<std::int64_t>(n))));
  scan_gradient_tiles<G>(poisoned, partials);
  EXPECT_TRUE(combine_gradient_tiles(partials).has_inf_or_nan);
}

TEST(Scan, TilesScannedInPiecesCombineToTheWholeScanBitForBit) {
  check_tiles_combine_to_the_whole<float>();
  check_tiles_combine_to_the_whole<bf16>();
}

}  // namespace
}  // namespace strata::cpu_adam
