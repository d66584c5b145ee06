// Bitwise the same results for 1, 2, 3 and 7 threads at every level (fixed tiles, one thread
// per tile, a fixed reduction tree), and a 1000-step trajectory that stays near the double one.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"
#include "tests/cpu_adam/reference.h"

namespace strata::cpu_adam {
namespace {

using testing::IsaGuard;
using testing::supported_isas;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct Outcome {
  std::vector<float> p, m, v, p_adagrad, v_adagrad, p_lion, m_lion;
  std::vector<bf16> copy;
  std::vector<fp16> copy_fp16;
  GradStats stats_f32, stats_bf16;
};

// Three steps of each optimizer over 3 tiles and a bit, inside an arena of `threads`.
Outcome run_with_threads(int threads) {
  const std::size_t n = 3 * kTileElements + 17;
  Outcome out;
  std::vector<float> g_wide;
  const std::vector<bf16> g_bf16 =
      testing::narrow_gradients<bf16>(testing::awkward_values(n, 41, 1e18f), g_wide);
  const std::vector<float> g = testing::awkward_values(n, 42, 1e18f);
  out.p = testing::awkward_values(n, 43, 1e18f);
  out.m.assign(n, 0.0f);
  out.v.assign(n, 0.0f);
  out.p_adagrad = out.p;
  out.v_adagrad.assign(n, 0.0f);
  out.p_lion = out.p;
  out.m_lion.assign(n, 0.0f);
  out.copy.resize(n);
  out.copy_fp16.resize(n);
  Workers workers(WorkersOptions{.threads = threads});
  workers.run([&] {
    for (std::int64_t t = 1; t <= 3; ++t) {
      step<float, bf16>(AdamConfig{.weight_decay = 0.01f}, t, out.p, g, out.m, out.v, out.copy,
                        0.5f);
      step<bf16, fp16>(AdagradConfig{}, t, out.p_adagrad, g_bf16, out.v_adagrad, out.copy_fp16,
                       0.5f);
      step<float, NoCopy>(LionConfig{.weight_decay = 0.1f}, t, out.p_lion, g, out.m_lion, {}, 0.5f);
    }
    out.stats_f32 = scan_gradients<float>(g);
    out.stats_bf16 = scan_gradients<bf16>(g_bf16);
  });
  return out;
}

TEST(Reproducibility, BitwiseIdenticalForAnyThreadCount) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    const Outcome one = run_with_threads(1);
    for (int threads : {2, 3, 7}) {
      const Outcome many = run_with_threads(threads);
      SCOPED_TRACE(std::string(isa_name(isa)) + " threads=" + std::to_string(threads));
      EXPECT_TRUE(same_bits(one.p, many.p));
      EXPECT_TRUE(same_bits(one.m, many.m));
      EXPECT_TRUE(same_bits(one.v, many.v));
      EXPECT_TRUE(same_bits(one.copy, many.copy));
      EXPECT_TRUE(same_bits(one.p_adagrad, many.p_adagrad));
      EXPECT_TRUE(same_bits(one.v_adagrad, many.v_adagrad));
      EXPECT_TRUE(same_bits(one.copy_fp16, many.copy_fp16));
      EXPECT_TRUE(same_bits(one.p_lion, many.p_lion));
      EXPECT_TRUE(same_bits(one.m_lion, many.m_lion));
      EXPECT_EQ(
          std::memcmp(&one.stats_f32.sum_squares, &many.stats_f32.sum_squares, sizeof(double)), 0);
      EXPECT_EQ(
          std::memcmp(&one.stats_bf16.sum_squares, &many.stats_bf16.sum_squares, sizeof(double)),
          0);
    }
  }
}

// 1000 AdamW steps on a noisy quadratic, in fp32 at each level and in double alongside. The
// stated tolerance: every parameter within 1e-5 * (1 + |p|) of the double trajectory, and every
// second moment within 1e-4 relative. (Measured at every level: 1.2e-6 and 2.8e-6.)
TEST(Reproducibility, ThousandStepTrajectoryStaysNearDouble) {
  IsaGuard guard;
  constexpr std::size_t n = 4099;
  constexpr int steps = 1000;
  const AdamConfig config{.lr = 1e-3f, .weight_decay = 0.01f};
  const std::vector<float> target = testing::awkward_values(n, 51, 10.0f);
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    std::vector<float> p(n, 0.0f), m(n, 0.0f), v(n, 0.0f), g(n);
    std::vector<double> p64(n, 0.0), m64(n, 0.0), v64(n, 0.0);
    std::mt19937 random(52);
    std::normal_distribution<float> noise(0.0f, 0.1f);
    double worst_p = 0.0, worst_v = 0.0;
    for (int t = 1; t <= steps; ++t) {
      for (std::size_t i = 0; i < n; ++i)
        g[i] = (p[i] - target[i]) + noise(random);
      step<float, NoCopy>(config, t, p, g, m, v, {}, 1.0f);
      for (std::size_t i = 0; i < n; ++i) {
        // The double trajectory sees the same gradient values; it keeps its own state.
        const auto expected = testing::adam_reference(config, t, p64[i], g[i], m64[i], v64[i], 1);
        p64[i] = expected.p.value;
        m64[i] = expected.m.value;
        v64[i] = expected.v.value;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      worst_p = std::max(worst_p, std::abs(p[i] - p64[i]) / (1 + std::abs(p64[i])));
      worst_v = std::max(worst_v, std::abs(v[i] - v64[i]) / (1e-30 + std::abs(v64[i])));
    }
    EXPECT_LT(worst_p, 1e-5) << isa_name(isa);
    EXPECT_LT(worst_v, 1e-4) << isa_name(isa);
    std::printf("%s: 1000 steps, worst |dp|/(1+|p|) = %.3g, worst |dv|/|v| = %.3g\n",
                std::string(isa_name(isa)).c_str(), worst_p, worst_v);
  }
}

}  // namespace
}  // namespace strata::cpu_adam
