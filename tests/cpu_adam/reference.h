#pragma once

// Double-precision references for the CPU optimizers, and test data with the awkward values
// (zero, denormal, tiny, huge, both signs). Each reference also returns the magnitude of the
// largest term that went into each result, so a test can allow "a few fp32 ulps" of that term:
// a kernel that rounds every operation to fp32 cannot do better where terms cancel.

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu_adam/half.h"
#include "cpu_adam/isa.h"
#include "cpu_adam/optimizer.h"

namespace strata::cpu_adam::testing {

// The levels this CPU can run, lowest first.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores the level active before the test.
class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_active_isa(saved_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa saved_;
};

// A value with a random sign whose magnitude is usually ordinary (1e-3 .. 10) and sometimes zero,
// denormal, tiny (1e-30) or huge (up to `huge`).
inline float awkward_value(std::mt19937& random, float huge) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 19);
  float magnitude = 0.0f;
  switch (kind(random)) {
    case 0:
      magnitude = 0.0f;
      break;
    case 1:
      magnitude = std::numeric_limits<float>::denorm_min() * (1.0f + 1000.0f * unit(random));
      break;
    case 2:
      magnitude = 1e-30f * (1.0f + unit(random));
      break;
    case 3:
      magnitude = huge * (0.1f + unit(random));
      break;
    default:
      magnitude = std::pow(10.0f, -3.0f + 4.0f * unit(random));
  }
  return unit(random) < 0.5f ? -magnitude : magnitude;
}

inline std::vector<float> awkward_values(std::size_t n, std::uint32_t seed, float huge) {
  std::mt19937 random(seed);
  std::vector<float> values(n);
  for (float& value : values)
    value = awkward_value(random, huge);
  return values;
}

// Gradients of type G from fp32 values (rounded to G); `wide` receives the exact G values.
template <class G>
std::vector<G> narrow_gradients(const std::vector<float>& values, std::vector<float>& wide) {
  std::vector<G> narrow(values.size());
  wide.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<G, float>) {
      narrow[i] = values[i];
    } else if constexpr (std::is_same_v<G, bf16>) {
      narrow[i] = to_bf16(values[i]);
    } else {
      narrow[i] = to_fp16(values[i]);
    }
    if constexpr (std::is_same_v<G, float>) {
      wide[i] = narrow[i];
    } else {
      wide[i] = to_float(narrow[i]);
    }
  }
  return narrow;
}

constexpr double kDenormMin = std::numeric_limits<float>::denorm_min();

struct Expected {
  double value;
  double magnitude;  // the largest term that went into value
  // The absolute error per allowed ulp below the normal range: a subnormal carries an absolute
  // error of denorm_min, not a relative one, and a division (by eps, say) magnifies it.
  double floor = kDenormMin;
};

inline bool within_ulps(float got, const Expected& expected, double ulps) {
  if (std::isnan(expected.value)) return std::isnan(got);
  if (std::isinf(expected.value)) return static_cast<double>(got) == expected.value;
  const double allowed =
      ulps * (std::numeric_limits<float>::epsilon() * expected.magnitude + expected.floor);
  return std::abs(static_cast<double>(got) - expected.value) <= allowed;
}

struct AdamExpected {
  Expected p, m, v;
};

inline AdamExpected adam_reference(const AdamConfig& c, std::int64_t t, double p, double g,
                                   double m, double v, double grad_scale) {
  const double beta1 = c.beta1, beta2 = c.beta2, lr = c.lr, wd = c.weight_decay;
  g *= grad_scale;
  double g_magnitude = std::abs(g);
  if (!c.adam_w_mode && wd > 0) {
    g += wd * p;
    g_magnitude = std::max(g_magnitude, std::abs(wd * p));
  }
  const double m_new = beta1 * m + (1 - beta1) * g;
  const double m_magnitude = std::max(std::abs(beta1 * m), (1 - beta1) * g_magnitude);
  const double v_new = beta2 * v + (1 - beta2) * g * g;
  const double correction1 = c.bias_correction ? 1 - std::pow(beta1, static_cast<double>(t)) : 1;
  const double correction2 =
      c.bias_correction ? 1 / std::sqrt(1 - std::pow(beta2, static_cast<double>(t))) : 1;
  const double denominator = std::sqrt(v_new) * correction2 + c.eps;
  const double step_size = lr / correction1;
  double p_new = p;
  double p_magnitude = std::abs(p);
  if (c.adam_w_mode && wd > 0) p_new -= lr * wd * p;
  p_new -= step_size * m_new / denominator;
  p_magnitude += step_size * m_magnitude / denominator;
  // m's subnormal error (its own and the scaled gradient's) divided by the denominator.
  const double p_floor = kDenormMin + step_size * 2 * kDenormMin / denominator;
  return AdamExpected{
      {p_new, p_magnitude, p_floor}, {m_new, m_magnitude}, {v_new, std::abs(v_new)}};
}

struct AdagradExpected {
  Expected p, v;
};

inline AdagradExpected adagrad_reference(const AdagradConfig& c, double p, double g, double v,
                                         double grad_scale) {
  g *= grad_scale;
  double g_magnitude = std::abs(g);
  if (c.weight_decay > 0) {
    g += c.weight_decay * p;
    g_magnitude = std::max(g_magnitude, std::abs(c.weight_decay * p));
  }
  const double v_new = v + g * g;
  const double v_magnitude = v + g_magnitude * g_magnitude;
  const double denominator = std::sqrt(v_new) + c.eps;
  const double p_new = p - c.lr * g / denominator;
  const double p_magnitude = std::abs(p) + c.lr * g_magnitude / denominator;
  const double p_floor = kDenormMin + c.lr * 2 * kDenormMin / denominator;
  return AdagradExpected{{p_new, p_magnitude, p_floor}, {v_new, v_magnitude}};
}

struct LionExpected {
  Expected p, m;
  bool sign_uncertain;  // the blend is within rounding of zero, so either sign is right
};

inline LionExpected lion_reference(const LionConfig& c, double p, double g, double m,
                                   double grad_scale) {
  g *= grad_scale;
  const double blend = c.beta1 * m + (1 - c.beta1) * g;
  const double blend_magnitude = std::max(std::abs(c.beta1 * m), std::abs((1 - c.beta1) * g));
  const bool uncertain =
      std::abs(blend) <= 8 * std::numeric_limits<float>::epsilon() * blend_magnitude +
                             8 * std::numeric_limits<float>::denorm_min();
  const double sign = std::signbit(blend) ? -1.0 : 1.0;
  const double after_decay = 1 - static_cast<double>(c.lr) * c.weight_decay;
  const double p_new = p * after_decay - c.lr * sign;
  const double m_new = c.beta2 * m + (1 - c.beta2) * g;
  const double m_magnitude = std::max(std::abs(c.beta2 * m), std::abs((1 - c.beta2) * g));
  return LionExpected{{p_new, std::abs(p) + c.lr}, {m_new, m_magnitude}, uncertain};
}

}  // namespace strata::cpu_adam::testing
