// The GPU optimizer's twin on the CPU (cpu_adam::gpu_twin_step): the update rules in the GPU's
// arithmetic, one element at a time. It is held to cpu_adam::step at every SIMD level over ten
// steps within the stated bound (ten_steps.h), to the double references one step at a time on
// awkward values, and to the formula written out here with std::fma bit for bit. The CUDA kernel
// is held to this twin bit for bit by tests/gpu/cuda_ops_test.cpp.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "tests/cpu_adam/reference.h"
#include "tests/cpu_adam/ten_steps.h"

namespace strata::cpu_adam {
namespace {

using testing::IsaGuard;
using testing::Rule;
using testing::supported_isas;

TEST(GpuTwin, TenStepsStayWithinTheStatedUlpsOfEveryCpuLevel) {
  IsaGuard guard;
  for (Rule rule : {Rule::adamw, Rule::adam_l2, Rule::adagrad, Rule::lion}) {
    const testing::TenSteps run = testing::make_ten_steps(rule, 4099, 100);
    const std::vector<testing::States> twin = testing::run_ten_steps(run, testing::twin_step);
    for (Isa isa : supported_isas()) {
      set_active_isa(isa);
      const std::vector<testing::States> cpu = testing::run_ten_steps(run, testing::cpu_step);
      const testing::Agreement agreement = testing::compare_ten_steps(run, cpu, twin);
      std::printf("[ measured ] gpu twin vs %s, %s, 10 steps: %.2f ulps of scale (%s)\n",
                  std::string(isa_name(isa)).c_str(), testing::rule_name(rule),
                  agreement.worst_ulps, agreement.where.c_str());
      EXPECT_LE(agreement.worst_ulps, testing::kTenStepUlps)
          << isa_name(isa) << " " << testing::rule_name(rule) << ": " << agreement.where;
    }
  }
}

// AdamW written out with the GPU's roundings: a fused multiply-add wherever the update rule has
// one, true division and square root.
TEST(GpuTwin, IsTheFusedFormulaBitForBit) {
  const testing::TenSteps run = testing::make_ten_steps(Rule::adamw, 1031, 7);
  testing::States twin = run.initial;
  testing::twin_step(run, 3, run.grads[0], twin);
  const AdamConfig& c = run.adam;
  const double power = 3.0;
  const auto step_size =
      static_cast<float>(-double{c.lr} / (1.0 - std::pow(double{c.beta1}, power)));
  const auto correction2 =
      static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{c.beta2}, power)));
  const auto decay = static_cast<float>(-double{c.lr} * double{c.weight_decay});
  const auto one_minus_beta1 = static_cast<float>(1.0 - double{c.beta1});
  const auto one_minus_beta2 = static_cast<float>(1.0 - double{c.beta2});
  std::size_t differs_from_separate_roundings = 0;
  for (std::size_t i = 0; i < run.initial.p.size(); ++i) {
    const float g = run.grads[0][i] * run.grad_scale;
    const float m = std::fma(g, one_minus_beta1, run.initial.m[i] * c.beta1);
    const float v = std::fma(g * g, one_minus_beta2, run.initial.v[i] * c.beta2);
    const float denominator = std::fma(std::sqrt(v), correction2, c.eps);
    const float update = m / denominator;
    float p = std::fma(run.initial.p[i], decay, run.initial.p[i]);
    p = std::fma(update, step_size, p);
    ASSERT_EQ(twin.m[i], m) << "i=" << i;
    ASSERT_EQ(twin.v[i], v) << "i=" << i;
    ASSERT_EQ(twin.p[i], p) << "i=" << i;
    volatile float product = g * one_minus_beta1;
    volatile float beta_m = run.initial.m[i] * c.beta1;
    if (m != product + beta_m) ++differs_from_separate_roundings;
  }
  // The data tells the fused roundings from separate ones.
  EXPECT_GT(differs_from_separate_roundings, 0u);
}

// One step on awkward values (zero, subnormal, tiny, huge, both signs) against the double
// references, with the tolerance the SIMD levels have; the copies are the rounded parameters.
template <class H>
void check_one_step_on_awkward_values() {
  constexpr float kHuge = 1e18f;
  constexpr double kStepUlps = 8.0;
  const std::size_t n = 1023;
  const std::vector<float> g = testing::awkward_values(n, 41, kHuge);
  std::vector<float> p = testing::awkward_values(n, 42, kHuge);
  std::vector<float> m = testing::awkward_values(n, 43, kHuge);
  std::vector<float> v = testing::awkward_values(n, 44, kHuge);
  for (float& value : v)
    value = std::abs(value);
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  std::vector<H> copy(n);
  const AdamConfig config{.weight_decay = 0.01f};
  gpu_twin_step<H>(config, 4, p, g, m, v, copy, 0.5f);
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected = testing::adam_reference(config, 4, p0[i], g[i], m0[i], v0[i], 0.5);
    ASSERT_TRUE(testing::within_ulps(m[i], expected.m, kStepUlps)) << "i=" << i;
    ASSERT_TRUE(testing::within_ulps(v[i], expected.v, kStepUlps)) << "i=" << i;
    ASSERT_TRUE(testing::within_ulps(p[i], expected.p, kStepUlps)) << "i=" << i;
    if constexpr (std::is_same_v<H, bf16>) {
      ASSERT_EQ(copy[i].bits, to_bf16(p[i]).bits) << "i=" << i;
    } else {
      ASSERT_EQ(copy[i].bits, to_fp16(p[i]).bits) << "i=" << i;
    }
  }
}

TEST(GpuTwin, OneStepOnAwkwardValuesWithBf16Copy) {
  check_one_step_on_awkward_values<bf16>();
}
TEST(GpuTwin, OneStepOnAwkwardValuesWithFp16Copy) {
  check_one_step_on_awkward_values<fp16>();
}

}  // namespace
}  // namespace strata::cpu_adam
