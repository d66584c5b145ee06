// Adam/AdamW, Adagrad and Lion at every SIMD level this CPU has, against the double-precision
// references in reference.h: every element within a few fp32 ulps of its largest term after one
// step, for every gradient type, both decay modes, with and without bias correction, and odd
// lengths; the bf16/fp16 copies exactly the correctly rounded new parameters.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "cpu_adam/optimizer.h"
#include "tests/cpu_adam/reference.h"

namespace strata::cpu_adam {
namespace {

using testing::adagrad_reference;
using testing::adam_reference;
using testing::IsaGuard;
using testing::lion_reference;
using testing::supported_isas;
using testing::within_ulps;

// Tolerance of one step, in fp32 ulps of the largest term of each result.
constexpr double kStepUlps = 8.0;
constexpr float kHuge = 1e18f;  // squares stay below FLT_MAX, as real fp32 gradients must

const std::vector<std::size_t> kLengths = {1, 15, 17, 1023,
                                           static_cast<std::size_t>(kTileElements) + 1};

template <class H>
void expect_copy_rounded(const std::vector<float>& p, const std::vector<H>& copy,
                         const std::string& where) {
  if constexpr (!std::is_same_v<H, NoCopy>) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      H expected;
      if constexpr (std::is_same_v<H, bf16>) {
        expected = to_bf16(p[i]);
      } else {
        expected = to_fp16(p[i]);
      }
      ASSERT_EQ(copy[i].bits, expected.bits) << where << " i=" << i << " p=" << p[i];
    }
  }
}

template <class H>
std::vector<H> make_copy_buffer(std::size_t n) {
  if constexpr (std::is_same_v<H, NoCopy>) {
    return {};
  } else {
    return std::vector<H>(n);
  }
}

std::vector<float> states(std::size_t n, std::uint32_t seed, bool non_negative) {
  std::vector<float> values = testing::awkward_values(n, seed, kHuge);
  if (non_negative) {
    for (float& value : values)
      value = std::abs(value);
  }
  return values;
}

template <class G, class H>
void check_adam(Isa isa, const AdamConfig& config, std::int64_t t, std::size_t n) {
  const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n) +
                            " t=" + std::to_string(t) +
                            " adamw=" + std::to_string(config.adam_w_mode) +
                            " bias=" + std::to_string(config.bias_correction) +
                            " wd=" + std::to_string(config.weight_decay);
  std::vector<float> g_wide;
  const std::vector<G> g =
      testing::narrow_gradients<G>(testing::awkward_values(n, 11, kHuge), g_wide);
  std::vector<float> p = states(n, 12, false);
  std::vector<float> m = states(n, 13, false);
  std::vector<float> v = states(n, 14, true);
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  std::vector<H> copy = make_copy_buffer<H>(n);
  const float grad_scale = 0.5f;
  step<G, H>(config, t, p, g, m, v, copy, grad_scale);
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected = adam_reference(config, t, p0[i], g_wide[i], m0[i], v0[i], grad_scale);
    ASSERT_TRUE(within_ulps(m[i], expected.m, kStepUlps))
        << where << " i=" << i << " m=" << m[i] << " expected " << expected.m.value;
    ASSERT_TRUE(within_ulps(v[i], expected.v, kStepUlps))
        << where << " i=" << i << " v=" << v[i] << " expected " << expected.v.value;
    ASSERT_TRUE(within_ulps(p[i], expected.p, kStepUlps))
        << where << " i=" << i << " p=" << p[i] << " expected " << expected.p.value
        << " (p0=" << p0[i] << " g=" << g_wide[i] << " m0=" << m0[i] << " v0=" << v0[i] << ")";
  }
  expect_copy_rounded(p, copy, where);
}

template <class G, class H>
void check_adam_everywhere() {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    for (bool adam_w_mode : {true, false}) {
      for (bool bias_correction : {true, false}) {
        for (float weight_decay : {0.0f, 0.01f}) {
          AdamConfig config;
          config.adam_w_mode = adam_w_mode;
          config.bias_correction = bias_correction;
          config.weight_decay = weight_decay;
          check_adam<G, H>(isa, config, 1, 1023);
          check_adam<G, H>(isa, config, 7, 17);
        }
      }
    }
    for (std::size_t n : kLengths)
      check_adam<G, H>(isa, AdamConfig{}, 3, n);
  }
}

TEST(Adam, Fp32GradNoCopy) {
  check_adam_everywhere<float, NoCopy>();
}
TEST(Adam, Fp32GradBf16Copy) {
  check_adam_everywhere<float, bf16>();
}
TEST(Adam, Fp32GradFp16Copy) {
  check_adam_everywhere<float, fp16>();
}
TEST(Adam, Bf16GradNoCopy) {
  check_adam_everywhere<bf16, NoCopy>();
}
TEST(Adam, Bf16GradBf16Copy) {
  check_adam_everywhere<bf16, bf16>();
}
TEST(Adam, Bf16GradFp16Copy) {
  check_adam_everywhere<bf16, fp16>();
}
TEST(Adam, Fp16GradNoCopy) {
  check_adam_everywhere<fp16, NoCopy>();
}
TEST(Adam, Fp16GradBf16Copy) {
  check_adam_everywhere<fp16, bf16>();
}
TEST(Adam, Fp16GradFp16Copy) {
  check_adam_everywhere<fp16, fp16>();
}

template <class G, class H>
void check_adagrad(Isa isa, const AdagradConfig& config, std::size_t n) {
  const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n) +
                            " wd=" + std::to_string(config.weight_decay);
  std::vector<float> g_wide;
  const std::vector<G> g =
      testing::narrow_gradients<G>(testing::awkward_values(n, 21, kHuge), g_wide);
  std::vector<float> p = states(n, 22, false);
  std::vector<float> v = states(n, 23, true);
  const std::vector<float> p0 = p, v0 = v;
  std::vector<H> copy = make_copy_buffer<H>(n);
  const float grad_scale = 0.25f;
  step<G, H>(config, 5, p, g, v, copy, grad_scale);
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected = adagrad_reference(config, p0[i], g_wide[i], v0[i], grad_scale);
    ASSERT_TRUE(within_ulps(v[i], expected.v, kStepUlps))
        << where << " i=" << i << " v=" << v[i] << " expected " << expected.v.value;
    ASSERT_TRUE(within_ulps(p[i], expected.p, kStepUlps))
        << where << " i=" << i << " p=" << p[i] << " expected " << expected.p.value;
  }
  expect_copy_rounded(p, copy, where);
}

template <class G, class H>
void check_lion(Isa isa, const LionConfig& config, std::size_t n) {
  const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n) +
                            " wd=" + std::to_string(config.weight_decay);
  std::vector<float> g_wide;
  const std::vector<G> g =
      testing::narrow_gradients<G>(testing::awkward_values(n, 31, kHuge), g_wide);
  std::vector<float> p = states(n, 32, false);
  std::vector<float> m = states(n, 33, false);
  const std::vector<float> p0 = p, m0 = m;
  std::vector<H> copy = make_copy_buffer<H>(n);
  const float grad_scale = 2.0f;
  step<G, H>(config, 5, p, g, m, copy, grad_scale);
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected = lion_reference(config, p0[i], g_wide[i], m0[i], grad_scale);
    ASSERT_TRUE(within_ulps(m[i], expected.m, kStepUlps))
        << where << " i=" << i << " m=" << m[i] << " expected " << expected.m.value;
    if (expected.sign_uncertain) {
      // The same decay with the other sign.
      const double other =
          2 * p0[i] * (1 - double{config.lr} * config.weight_decay) - expected.p.value;
      ASSERT_TRUE(within_ulps(p[i], expected.p, kStepUlps) ||
                  within_ulps(p[i], {other, expected.p.magnitude}, kStepUlps))
          << where << " i=" << i;
    } else {
      ASSERT_TRUE(within_ulps(p[i], expected.p, kStepUlps))
          << where << " i=" << i << " p=" << p[i] << " expected " << expected.p.value;
    }
  }
  expect_copy_rounded(p, copy, where);
}

template <class G, class H>
void check_adagrad_and_lion_everywhere() {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    for (float weight_decay : {0.0f, 0.01f}) {
      check_adagrad<G, H>(
          isa, AdagradConfig{.lr = 1e-2f, .eps = 1e-10f, .weight_decay = weight_decay}, 1023);
      check_lion<G, H>(
          isa, LionConfig{.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = weight_decay},
          1023);
    }
    for (std::size_t n : kLengths) {
      check_adagrad<G, H>(isa, AdagradConfig{}, n);
      check_lion<G, H>(isa, LionConfig{}, n);
    }
  }
}

TEST(AdagradAndLion, Fp32GradNoCopy) {
  check_adagrad_and_lion_everywhere<float, NoCopy>();
}
TEST(AdagradAndLion, Fp32GradBf16Copy) {
  check_adagrad_and_lion_everywhere<float, bf16>();
}
TEST(AdagradAndLion, Bf16GradFp16Copy) {
  check_adagrad_and_lion_everywhere<bf16, fp16>();
}
TEST(AdagradAndLion, Fp16GradBf16Copy) {
  check_adagrad_and_lion_everywhere<fp16, bf16>();
}
TEST(AdagradAndLion, Fp16GradNoCopy) {
  check_adagrad_and_lion_everywhere<fp16, NoCopy>();
}

// The SIMD levels divide by the denominator through a reciprocal estimate and one
// Newton-Raphson step. Where the estimate breaks down (a zero, subnormal or infinite denominator,
// a quotient past FLT_MAX) the lanes must still get what a true division gives, next to ordinary
// lanes in the same vector, in the body and in the tail.
TEST(Adam, DenominatorsTheReciprocalCannotTakeGetTheDivision) {
  IsaGuard guard;
  const float inf = std::numeric_limits<float>::infinity();
  const float tiny = std::numeric_limits<float>::denorm_min();
  struct Lane {
    float m, v;
  };
  // With g = 0: m' = beta1 m, v' = beta2 v, denominator sqrt(v') bc2 + eps.
  const std::vector<Lane> lanes = {
      {1.0f, 0.0f},    // eps 0: 1 / 0, the parameter goes to -inf
      {0.0f, 0.0f},    // eps 0: 0 / 0, NaN
      {-1.0f, 0.0f},   // eps 0: +inf
      {1.0f, inf},     // an infinite denominator: the update is 0, p stays
      {3e38f, 0.0f},   // eps 1e-30: the quotient overflows to inf
      {1e-40f, 0.0f},  // eps subnormal: a subnormal denominator, a finite quotient
      {0.01f, 1e-4f},  // and ordinary lanes around them
      {-0.02f, 4e-6f}};
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    for (float eps : {0.0f, 1e-30f, 8 * tiny, 1e-8f}) {
      for (std::size_t n : {std::size_t{37}, std::size_t{5}}) {
        AdamConfig config;
        config.eps = eps;
        std::vector<float> p(n, 1.0f), g(n, 0.0f), m(n), v(n);
        for (std::size_t i = 0; i < n; ++i) {
          m[i] = lanes[(i * 3) % lanes.size()].m;  // 3 is coprime with 8: every lane in every slot
          v[i] = lanes[(i * 3) % lanes.size()].v;
        }
        const std::vector<float> m0 = m, v0 = v;
        step<float, NoCopy>(config, 1, p, g, m, v, {}, 1.0f);
        for (std::size_t i = 0; i < n; ++i) {
          const auto expected = adam_reference(config, 1, 1.0, 0.0, m0[i], v0[i], 1.0);
          const double e = expected.p.value;
          const std::string where = std::string(isa_name(isa)) + " eps=" + std::to_string(eps) +
                                    " n=" + std::to_string(n) + " i=" + std::to_string(i) +
                                    " m0=" + std::to_string(m0[i]) +
                                    " v0=" + std::to_string(v0[i]) + " p=" + std::to_string(p[i]);
          if (std::isfinite(e) && std::abs(e) > std::numeric_limits<float>::max()) {
            EXPECT_EQ(p[i], e > 0 ? inf : -inf) << where;  // past fp32, as the division gives
          } else {
            EXPECT_TRUE(within_ulps(p[i], expected.p, kStepUlps)) << where << " expected " << e;
          }
        }
      }
    }
  }
}

// The copy is written with non-temporal stores, which need aligned addresses, so a copy
// buffer that is not aligned has its first elements peeled into a partial block. Wherever the
// copy starts, every result must be bitwise the one of an aligned copy.
TEST(Adam, CopyAtAnyAlignmentGivesTheAlignedResults) {
  IsaGuard guard;
  const std::size_t n = 1000;
  std::vector<float> g_wide;
  const std::vector<float> g =
      testing::narrow_gradients<float>(testing::awkward_values(n, 41, kHuge), g_wide);
  const std::vector<float> p0 = states(n, 42, false), m0 = states(n, 43, false),
                           v0 = states(n, 44, true);
  std::vector<bf16> storage(n + 64);
  // The first element at a 64-byte boundary, then every 2-byte offset from there.
  const auto base = static_cast<std::size_t>(
      (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64 / sizeof(bf16));
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    std::vector<float> p_ref = p0, m_ref = m0, v_ref = v0;
    std::vector<bf16> copy_ref(n);
    for (std::size_t offset = 0; offset <= 16; ++offset) {
      std::vector<float> p = p0, m = m0, v = v0;
      const std::span<bf16> copy = std::span(storage).subspan(base + offset, n);
      step<float, bf16>(AdamConfig{}, 2, p, g, m, v, copy, 0.5f);
      if (offset == 0) {
        p_ref = p;
        m_ref = m;
        v_ref = v;
        copy_ref.assign(copy.begin(), copy.end());
      }
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(p[i]), std::bit_cast<std::uint32_t>(p_ref[i]))
            << isa_name(isa) << " offset=" << offset << " i=" << i;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(m[i]), std::bit_cast<std::uint32_t>(m_ref[i]));
        ASSERT_EQ(std::bit_cast<std::uint32_t>(v[i]), std::bit_cast<std::uint32_t>(v_ref[i]));
        ASSERT_EQ(copy[i].bits, copy_ref[i].bits) << isa_name(isa) << " offset=" << offset;
        ASSERT_EQ(copy[i].bits, to_bf16(p[i]).bits) << isa_name(isa) << " offset=" << offset;
      }
    }
  }
}

TEST(Adam, CopyOfSpecialValuesIsExact) {
  // NaN parameters stay NaN in the copy, infinities stay infinite, and values past the fp16 range
  // become infinities: lr = 0 leaves p as it was, so the copy is of these very values.
  IsaGuard guard;
  const std::vector<float> specials = {std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       1e6f,
                                       -65520.0f,
                                       65519.0f,
                                       0x1p-25f,
                                       std::numeric_limits<float>::denorm_min(),
                                       -0.0f,
                                       1.0f + 0x1p-8f,
                                       3.4e38f};
  std::vector<float> p;
  for (int repeat = 0; repeat < 5; ++repeat)
    p.insert(p.end(), specials.begin(), specials.end());
  const std::size_t n = p.size();
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    std::vector<float> q = p, g(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
    std::vector<bf16> copy_bf16(n);
    std::vector<fp16> copy_fp16(n);
    AdamConfig config;
    config.lr = 0.0f;
    step<float, bf16>(config, 1, q, g, m, v, copy_bf16, 1.0f);
    step<float, fp16>(config, 1, q, g, m, v, copy_fp16, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
      const float expected_bf16 = to_float(to_bf16(p[i]));
      const float expected_fp16 = to_float(to_fp16(p[i]));
      if (std::isnan(p[i])) {
        EXPECT_TRUE(std::isnan(to_float(copy_bf16[i]))) << isa_name(isa);
        EXPECT_TRUE(std::isnan(to_float(copy_fp16[i]))) << isa_name(isa);
      } else {
        EXPECT_EQ(copy_bf16[i].bits, to_bf16(p[i]).bits) << isa_name(isa) << " " << p[i];
        EXPECT_EQ(copy_fp16[i].bits, to_fp16(p[i]).bits) << isa_name(isa) << " " << p[i];
        EXPECT_EQ(to_float(copy_bf16[i]), expected_bf16);
        EXPECT_EQ(to_float(copy_fp16[i]), expected_fp16);
      }
    }
  }
}

TEST(Validate, NamesTheDeepSpeedKey) {
  const auto message_of = [](auto config) -> std::string {
    try {
      validate(config);
    } catch (const UserError& error) {
      EXPECT_EQ(error.exit_status(), 2);
      EXPECT_FALSE(error.fix().empty());
      return error.what();
    }
    return "";
  };
  EXPECT_NE(message_of(AdamConfig{.beta1 = 1.0f}).find("optimizer.params.betas[0]"),
            std::string::npos);
  EXPECT_NE(message_of(AdamConfig{.beta2 = -0.1f}).find("optimizer.params.betas[1]"),
            std::string::npos);
  EXPECT_NE(message_of(AdamConfig{.lr = -1.0f}).find("optimizer.params.lr"), std::string::npos);
  EXPECT_NE(message_of(AdamConfig{.eps = std::numeric_limits<float>::infinity()})
                .find("optimizer.params.eps"),
            std::string::npos);
  EXPECT_NE(message_of(AdagradConfig{.weight_decay = -1.0f}).find("optimizer.params.weight_decay"),
            std::string::npos);
  EXPECT_NE(message_of(LionConfig{.beta2 = 1.5f}).find("optimizer.params.betas[1]"),
            std::string::npos);
  EXPECT_EQ(message_of(AdamConfig{}), "");
  EXPECT_EQ(message_of(AdagradConfig{}), "");
  EXPECT_EQ(message_of(LionConfig{}), "");
  // step() refuses the same values before touching any array.
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4, 0.0f), v(4, 0.0f);
  const auto bad_step = [&] {
    step<float, NoCopy>(AdamConfig{.lr = std::nanf("")}, 1, p, g, m, v, {}, 1.0f);
  };
  EXPECT_THROW(bad_step(), UserError);
  EXPECT_EQ(p[0], 1.0f);
}

}  // namespace
}  // namespace strata::cpu_adam
