#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace strata::test_values {

// `n` values drawn from N(0, scale^2), the same for the same seed: master weights and gradients
// for the optimizer tests.
inline std::vector<float> random_floats(std::int64_t n, std::uint32_t seed, float scale) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& value : values)
    value = normal(engine);
  return values;
}

}  // namespace strata::test_values
