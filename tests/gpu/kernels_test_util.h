#pragma once

// Helpers shared by the kernel tests: seeded random data, the error measure every test reports,
// and central finite differences in double precision.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::gpu::host::kernels::testing {

inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double low = -1.0,
                                         double high = 1.0) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<double> values(n);
  for (double& value : values)
    value = distribution(engine);
  return values;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, std::int32_t vocab,
                                               std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<std::int32_t> distribution(0, vocab - 1);
  std::vector<std::int32_t> tokens(n);
  for (std::int32_t& token : tokens)
    token = distribution(engine);
  return tokens;
}

inline std::vector<float> to_float(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

inline std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// max |actual - expected| / max |expected|: the error relative to the tensor's scale, which stays
// meaningful where single elements are near zero (llm.c's validate_result uses a similar mix of
// absolute and relative error). A NaN in either makes it NaN, so no `error < tolerance` passes:
// std::max would drop a NaN difference (NaN compares false), letting an unwritten output through.
template <typename A, typename E>
double scaled_error(const std::vector<A>& actual, const std::vector<E>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double max_difference = 0.0;
  double max_expected = 0.0;
  for (std::size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double difference =
        std::abs(static_cast<double>(actual[i]) - static_cast<double>(expected[i]));
    if (std::isnan(difference)) return difference;
    max_difference = std::max(max_difference, difference);
    max_expected = std::max(max_expected, std::abs(static_cast<double>(expected[i])));
  }
  return max_difference / std::max(max_expected, 1e-300);
}

// Prints and records a measured error so the figures in docs/kernels.md can be traced to a run.
inline void report_error(const std::string& what, double error) {
  std::printf("[ measured ] %s: scaled error %.3g\n", what.c_str(), error);
  ::testing::Test::RecordProperty(what, std::to_string(error));
}

// d loss / d x by central differences: (loss(x + h e_i) - loss(x - h e_i)) / 2h for every i,
// perturbing x in place (restored afterwards). With h = 1e-5 in double the truncation error
// (~h^2) and the rounding error (~1e-16 / h) are both near 1e-10.
inline std::vector<double> finite_difference(std::vector<double>& x,
                                             const std::function<double()>& loss, double h = 1e-5) {
  std::vector<double> gradient(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    gradient[i] = (plus - minus) / (2.0 * h);
  }
  return gradient;
}

// sum(out * weights): a scalar loss whose gradient with respect to out is `weights`, so a
// backward called with dout = weights gives the gradient the finite differences measure.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& weights) {
  double sum = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i)
    sum += out[i] * weights[i];
  return sum;
}

}  // namespace strata::gpu::host::kernels::testing
