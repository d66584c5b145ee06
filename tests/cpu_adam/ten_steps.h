#pragma once

// Ten optimizer steps run two ways from the same states and gradients, and the results compared
// element by element within a stated bound: how the GPU optimizer's arithmetic (its CPU twin,
// cpu_adam::gpu_twin_step, here; the CUDA kernel in tests/gpu/cuda_ops_test.cpp) is held to
// cpu_adam::step. The data is ordinary training data (parameters around 0.1-1, gradients of
// either sign from 1e-4 to 1, a few exact zeros), so the bound speaks of rounding, not of
// overflow or subnormals (tests/cpu_adam/optimizer_test.cpp covers those one step at a time).
//
// The bound is kTenStepUlps fp32 ulps of each element's scale: its own largest magnitude over
// the ten steps, and for a moment also the largest term that went into it ((1 - beta) times the
// scaled gradient), since a moment that cancels to near zero keeps the absolute error of its
// terms. The two ways differ only in where a product is rounded (a fused multiply-add or not) and,
// on the SIMD levels, in a division within one ulp; over ten steps the moments carry at most
// about sum(beta^k) such errors, and the parameters a fraction of an ulp per step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_adam/optimizer.h"

namespace strata::cpu_adam::testing {

inline constexpr int kSteps = 10;
inline constexpr double kTenStepUlps = 16.0;

enum class Rule { adamw, adam_l2, adagrad, lion };

inline const char* rule_name(Rule rule) {
  switch (rule) {
    case Rule::adamw:
      return "adamw";
    case Rule::adam_l2:
      return "adam_l2";
    case Rule::adagrad:
      return "adagrad";
    case Rule::lion:
      return "lion";
  }
  return "?";
}

inline bool uses_m(Rule rule) {
  return rule != Rule::adagrad;
}
inline bool uses_v(Rule rule) {
  return rule != Rule::lion;
}

// The states of one run: m is empty for Adagrad, v for Lion.
struct States {
  std::vector<float> p, m, v;
};

// What both ways start from: the configs, the states, and each step's gradients.
struct TenSteps {
  Rule rule = Rule::adamw;
  AdamConfig adam{.lr = 1e-3f, .weight_decay = 0.01f};
  AdagradConfig adagrad{.lr = 1e-2f, .eps = 1e-10f, .weight_decay = 0.01f};
  LionConfig lion{.lr = 1e-4f, .weight_decay = 0.01f};
  float grad_scale = 0.5f;
  States initial;
  std::vector<std::vector<float>> grads;  // kSteps of them
};

inline float ordinary_value(std::mt19937& random, float low_exponent, float high_exponent) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  if (unit(random) < 0.01f) return 0.0f;
  const float magnitude =
      std::pow(10.0f, low_exponent + (high_exponent - low_exponent) * unit(random));
  return unit(random) < 0.5f ? -magnitude : magnitude;
}

inline std::vector<float> ordinary_values(std::size_t n, std::uint32_t seed, float low_exponent,
                                          float high_exponent, bool non_negative = false) {
  std::mt19937 random(seed);
  std::vector<float> values(n);
  for (float& value : values) {
    value = ordinary_value(random, low_exponent, high_exponent);
    if (non_negative) value = std::abs(value);
  }
  return values;
}

inline TenSteps make_ten_steps(Rule rule, std::size_t n, std::uint32_t seed) {
  TenSteps run;
  run.rule = rule;
  run.adam.adam_w_mode = rule != Rule::adam_l2;
  run.initial.p = ordinary_values(n, seed, -1.0f, 0.0f);
  if (uses_m(rule)) run.initial.m = ordinary_values(n, seed + 1, -4.0f, -1.0f);
  if (uses_v(rule)) run.initial.v = ordinary_values(n, seed + 2, -8.0f, -2.0f, true);
  for (int t = 0; t < kSteps; ++t)
    run.grads.push_back(ordinary_values(n, seed + 10 + static_cast<std::uint32_t>(t), -4.0f, 0.0f));
  return run;
}

// One way of stepping: step t (from 1) over `states` with `grads`.
using Stepper = std::function<void(const TenSteps& run, std::int64_t t,
                                   const std::vector<float>& grads, States& states)>;

// cpu_adam::step at the active SIMD level, fp32 everywhere, no copy.
inline void cpu_step(const TenSteps& run, std::int64_t t, const std::vector<float>& grads,
                     States& s) {
  const std::span<NoCopy> none;
  switch (run.rule) {
    case Rule::adamw:
    case Rule::adam_l2:
      step<float, NoCopy>(run.adam, t, s.p, grads, s.m, s.v, none, run.grad_scale);
      return;
    case Rule::adagrad:
      step<float, NoCopy>(run.adagrad, t, s.p, grads, s.v, none, run.grad_scale);
      return;
    case Rule::lion:
      step<float, NoCopy>(run.lion, t, s.p, grads, s.m, none, run.grad_scale);
      return;
  }
}

// The GPU optimizer's twin.
inline void twin_step(const TenSteps& run, std::int64_t t, const std::vector<float>& grads,
                      States& s) {
  const std::span<NoCopy> none;
  switch (run.rule) {
    case Rule::adamw:
    case Rule::adam_l2:
      gpu_twin_step<NoCopy>(run.adam, t, s.p, grads, s.m, s.v, none, run.grad_scale);
      return;
    case Rule::adagrad:
      gpu_twin_step<NoCopy>(run.adagrad, t, s.p, grads, s.v, none, run.grad_scale);
      return;
    case Rule::lion:
      gpu_twin_step<NoCopy>(run.lion, t, s.p, grads, s.m, none, run.grad_scale);
      return;
  }
}

// Every step's states of one way (after step 1, 2, ... kSteps).
inline std::vector<States> run_ten_steps(const TenSteps& run, const Stepper& stepper) {
  std::vector<States> history;
  States states = run.initial;
  for (int t = 1; t <= kSteps; ++t) {
    stepper(run, t, run.grads[static_cast<std::size_t>(t - 1)], states);
    history.push_back(states);
  }
  return history;
}

inline double ulp_of(double magnitude) {
  const auto value =
      static_cast<float>(std::max(magnitude, double{std::numeric_limits<float>::min()}));
  return double{std::nextafter(value, std::numeric_limits<float>::infinity())} - value;
}

// The largest difference in ulps of the scale over every element and step (a NaN on one side only
// counts as infinite), and where it was. Lion elements whose blend came within rounding of zero in
// the reference are left out of the parameter comparison from then on: either sign is right
// there, and the two signs' parameters differ by 2 lr.
struct Agreement {
  double worst_ulps = 0.0;
  std::string where;
};

inline void compare_state(const std::vector<float>& expected, const std::vector<float>& actual,
                          const std::vector<double>& scale, const std::vector<bool>& skip,
                          const char* name, int t, Agreement& agreement) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!skip.empty() && skip[i]) continue;
    double ulps = 0.0;
    if (std::isnan(expected[i]) != std::isnan(actual[i])) {
      ulps = std::numeric_limits<double>::infinity();
    } else if (!std::isnan(expected[i])) {
      const double magnitude = std::max(scale[i], std::abs(double{expected[i]}));
      ulps = std::abs(double{actual[i]} - expected[i]) / ulp_of(magnitude);
    }
    if (ulps > agreement.worst_ulps) {
      std::ostringstream where;
      where << name << "[" << i << "] after step " << t << ": " << actual[i] << " vs "
            << expected[i];
      agreement.worst_ulps = ulps;
      agreement.where = where.str();
    }
  }
}

inline Agreement compare_ten_steps(const TenSteps& run, const std::vector<States>& expected,
                                   const std::vector<States>& actual) {
  const std::size_t n = run.initial.p.size();
  const double beta_m = run.rule == Rule::lion ? run.lion.beta2 : run.adam.beta1;
  std::vector<double> scale_p(n, 0.0), scale_m(n, 0.0), scale_v(n, 0.0);
  std::vector<bool> sign_uncertain(n, false);
  Agreement agreement;
  for (int t = 0; t < kSteps; ++t) {
    const auto step = static_cast<std::size_t>(t);
    const States& before = t == 0 ? run.initial : expected[step - 1];
    const States& after = expected[step];
    for (std::size_t i = 0; i < n; ++i) {
      const double g = double{run.grads[step][i]} * run.grad_scale;
      scale_p[i] =
          std::max({scale_p[i], std::abs(double{before.p[i]}), std::abs(double{after.p[i]})});
      if (uses_m(run.rule)) {
        scale_m[i] = std::max({scale_m[i], std::abs(double{after.m[i]}),
                               (1.0 - beta_m) * std::abs(g), beta_m * std::abs(before.m[i])});
      }
      if (uses_v(run.rule)) scale_v[i] = std::max(scale_v[i], std::abs(double{after.v[i]}));
      if (run.rule == Rule::lion) {
        const double beta1 = run.lion.beta1;
        const double blend = beta1 * before.m[i] + (1 - beta1) * g;
        const double terms = std::max(std::abs(beta1 * before.m[i]), std::abs((1 - beta1) * g));
        if (std::abs(blend) <= 64 * std::numeric_limits<float>::epsilon() * terms)
          sign_uncertain[i] = true;
      }
    }
    compare_state(after.p, actual[step].p, scale_p,
                  run.rule == Rule::lion ? sign_uncertain : std::vector<bool>{}, "p", t + 1,
                  agreement);
    if (uses_m(run.rule))
      compare_state(after.m, actual[step].m, scale_m, {}, "m", t + 1, agreement);
    if (uses_v(run.rule))
      compare_state(after.v, actual[step].v, scale_v, {}, "v", t + 1, agreement);
  }
  return agreement;
}

}  // namespace strata::cpu_adam::testing
