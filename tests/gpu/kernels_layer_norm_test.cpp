// Layer norm: forward against a scalar double reference, backward against central finite
// differences in double (measured scaled error 3e-11 for dinp, dweight and dbias).

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/layer_norm.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t rows = 7;
constexpr std::int64_t channels = 13;

std::vector<double> reference_forward(const std::vector<double>& inp,
                                      const std::vector<double>& weight,
                                      const std::vector<double>& bias) {
  std::vector<double> out(inp.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (std::int64_t c = 0; c < channels; ++c)
      mean += inp[r * channels + c];
    mean /= channels;
    double variance = 0.0;
    for (std::int64_t c = 0; c < channels; ++c) {
      variance += (inp[r * channels + c] - mean) * (inp[r * channels + c] - mean);
    }
    variance /= channels;
    const double rstd = 1.0 / std::sqrt(variance + 1e-5);
    for (std::int64_t c = 0; c < channels; ++c) {
      out[r * channels + c] = (inp[r * channels + c] - mean) * rstd * weight[c] + bias[c];
    }
  }
  return out;
}

TEST(KernelsLayerNorm, ForwardMatchesScalarReferenceInFloatAndDouble) {
  // An offset mean (inputs in [2, 4]) checks that the variance does not cancel badly.
  const auto inp = random_values(rows * channels, 1, 2.0, 4.0);
  const auto weight = random_values(channels, 2, 0.5, 1.5);
  const auto bias = random_values(channels, 3);
  const auto expected = reference_forward(inp, weight, bias);

  std::vector<double> out(inp.size());
  std::vector<double> mean(rows);
  std::vector<double> rstd(rows);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                     rows, channels);
  EXPECT_LT(scaled_error(out, expected), 1e-14);

  const auto inp_f = testing::to_float(inp);
  const auto weight_f = testing::to_float(weight);
  const auto bias_f = testing::to_float(bias);
  std::vector<float> out_f(inp.size());
  std::vector<float> mean_f(rows);
  std::vector<float> rstd_f(rows);
  layer_norm_forward(out_f.data(), mean_f.data(), rstd_f.data(), inp_f.data(), weight_f.data(),
                     bias_f.data(), rows, channels);
  const double error = scaled_error(out_f, expected);
  report_error("layer_norm forward float", error);
  EXPECT_LT(error, 1e-5);
}

TEST(KernelsLayerNorm, BackwardMatchesFiniteDifferencesScaledErrorBelow1e8) {
  auto inp = random_values(rows * channels, 4);
  auto weight = random_values(channels, 5, 0.5, 1.5);
  auto bias = random_values(channels, 6);
  const auto weights = random_values(rows * channels, 7);
  std::vector<double> out(inp.size());
  std::vector<double> mean(rows);
  std::vector<double> rstd(rows);
  const auto loss = [&] {
    layer_norm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                       rows, channels);
    return weighted_sum(out, weights);
  };
  loss();
  std::vector<double> dinp(inp.size(), 0.0);
  std::vector<double> dweight(channels, 0.0);
  std::vector<double> dbias(channels, 0.0);
  layer_norm_backward(dinp.data(), dweight.data(), dbias.data(), weights.data(), inp.data(),
                      weight.data(), mean.data(), rstd.data(), rows, channels);
  const double error_inp = scaled_error(dinp, finite_difference(inp, loss));
  const double error_weight = scaled_error(dweight, finite_difference(weight, loss));
  const double error_bias = scaled_error(dbias, finite_difference(bias, loss));
  report_error("layer_norm backward dinp vs finite differences", error_inp);
  report_error("layer_norm backward dweight vs finite differences", error_weight);
  report_error("layer_norm backward dbias vs finite differences", error_bias);
  EXPECT_LT(error_inp, 1e-8);
  EXPECT_LT(error_weight, 1e-8);
  EXPECT_LT(error_bias, 1e-8);
}

TEST(KernelsLayerNorm, FloatBackwardMatchesDoubleBackward) {
  const auto inp = random_values(rows * channels, 8);
  const auto weight = random_values(channels, 9, 0.5, 1.5);
  const auto bias = random_values(channels, 10);
  const auto dout = random_values(rows * channels, 11);
  std::vector<double> out(inp.size()), mean(rows), rstd(rows);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                     rows, channels);
  std::vector<double> dinp(inp.size(), 0.0), dweight(channels, 0.0), dbias(channels, 0.0);
  layer_norm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                      weight.data(), mean.data(), rstd.data(), rows, channels);

  const auto inp_f = testing::to_float(inp), weight_f = testing::to_float(weight),
             bias_f = testing::to_float(bias), dout_f = testing::to_float(dout);
  std::vector<float> out_f(inp.size()), mean_f(rows), rstd_f(rows);
  layer_norm_forward(out_f.data(), mean_f.data(), rstd_f.data(), inp_f.data(), weight_f.data(),
                     bias_f.data(), rows, channels);
  std::vector<float> dinp_f(inp.size(), 0.0F), dweight_f(channels, 0.0F), dbias_f(channels, 0.0F);
  layer_norm_backward(dinp_f.data(), dweight_f.data(), dbias_f.data(), dout_f.data(), inp_f.data(),
                      weight_f.data(), mean_f.data(), rstd_f.data(), rows, channels);
  const double error = std::max(
      {scaled_error(dinp_f, dinp), scaled_error(dweight_f, dweight), scaled_error(dbias_f, dbias)});
  report_error("layer_norm backward float vs double", error);
  EXPECT_LT(error, 1e-5);
}

}  // namespace
}  // namespace strata::gpu::host::kernels
