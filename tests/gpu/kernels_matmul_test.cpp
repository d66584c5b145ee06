// Linear layer through OpenBLAS: forward against a scalar double reference, backward against
// central finite differences in double (measured scaled error 4e-11 to 7e-11).

#include <cblas.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/matmul.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t rows = 9;
constexpr std::int64_t in_channels = 7;
constexpr std::int64_t out_channels = 5;

std::vector<double> reference_forward(const std::vector<double>& inp,
                                      const std::vector<double>& weight, const double* bias) {
  std::vector<double> out(rows * out_channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out_channels; ++o) {
      double sum = bias != nullptr ? bias[o] : 0.0;
      for (std::int64_t i = 0; i < in_channels; ++i) {
        sum += inp[r * in_channels + i] * weight[o * in_channels + i];
      }
      out[r * out_channels + o] = sum;
    }
  }
  return out;
}

TEST(KernelsMatmul, ForwardMatchesScalarReferenceWithAndWithoutBias) {
  const auto inp = random_values(rows * in_channels, 1);
  const auto weight = random_values(out_channels * in_channels, 2);
  const auto bias = random_values(out_channels, 3);
  for (const double* bias_or_null : {bias.data(), static_cast<const double*>(nullptr)}) {
    const auto expected = reference_forward(inp, weight, bias_or_null);
    std::vector<double> out(expected.size(), 99.0);  // garbage: the forward must overwrite
    matmul_forward(out.data(), inp.data(), weight.data(), bias_or_null, rows, in_channels,
                   out_channels);
    EXPECT_LT(scaled_error(out, expected), 1e-15);

    const auto inp_f = testing::to_float(inp), weight_f = testing::to_float(weight),
               bias_f = testing::to_float(bias);
    std::vector<float> out_f(expected.size(), 99.0F);
    matmul_forward(out_f.data(), inp_f.data(), weight_f.data(),
                   bias_or_null != nullptr ? bias_f.data() : nullptr, rows, in_channels,
                   out_channels);
    const double error = scaled_error(out_f, expected);
    report_error("matmul forward float", error);
    EXPECT_LT(error, 1e-6);
  }
}

// Computed alone (a generation pass's products), each of 64 rows has the bits of a product of that
// row by itself; the product of all 64 at once rounds them otherwise.
TEST(KernelsMatmul, RowsAloneHaveTheBitsOfOneRow) {
  constexpr std::int64_t many = 64, in = 96, out = 80;
  const std::vector<float> inp = testing::to_float(random_values(many * in, 7));
  const std::vector<float> weight = testing::to_float(random_values(out * in, 8));
  const std::vector<float> bias = testing::to_float(random_values(out, 9));
  std::vector<float> alone(many * out), together(many * out), one(out);
  matmul_forward(alone.data(), inp.data(), weight.data(), bias.data(), many, in, out, true);
  matmul_forward(together.data(), inp.data(), weight.data(), bias.data(), many, in, out);
  std::int64_t rounded_otherwise = 0;
  for (std::int64_t r = 0; r < many; ++r) {
    matmul_forward(one.data(), inp.data() + r * in, weight.data(), bias.data(), 1, in, out);
    for (std::int64_t o = 0; o < out; ++o) {
      ASSERT_EQ(alone[r * out + o], one[o]) << "row " << r << " output " << o;
      rounded_otherwise += together[r * out + o] != one[o] ? 1 : 0;
    }
  }
  RecordProperty("rounded_otherwise_together", std::to_string(rounded_otherwise));
}

TEST(KernelsMatmul, BackwardMatchesFiniteDifferencesScaledErrorBelow1e9) {
  auto inp = random_values(rows * in_channels, 4);
  auto weight = random_values(out_channels * in_channels, 5);
  auto bias = random_values(out_channels, 6);
  const auto weights = random_values(rows * out_channels, 7);
  std::vector<double> out(rows * out_channels);
  const auto loss = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), rows, in_channels,
                   out_channels);
    return weighted_sum(out, weights);
  };
  std::vector<double> dinp(inp.size(), 0.0), dweight(weight.size(), 0.0), dbias(bias.size(), 0.0);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), weights.data(), inp.data(),
                  weight.data(), rows, in_channels, out_channels);
  const double error_inp = scaled_error(dinp, finite_difference(inp, loss));
  const double error_weight = scaled_error(dweight, finite_difference(weight, loss));
  const double error_bias = scaled_error(dbias, finite_difference(bias, loss));
  report_error("matmul backward dinp vs finite differences", error_inp);
  report_error("matmul backward dweight vs finite differences", error_weight);
  report_error("matmul backward dbias vs finite differences", error_bias);
  EXPECT_LT(error_inp, 1e-9);
  EXPECT_LT(error_weight, 1e-9);
  EXPECT_LT(error_bias, 1e-9);
}

TEST(KernelsMatmul, BackwardAccumulatesAndFloatMatchesDouble) {
  const auto inp = random_values(rows * in_channels, 8);
  const auto weight = random_values(out_channels * in_channels, 9);
  const auto dout = random_values(rows * out_channels, 10);
  // Start from non-zero gradients: the backward adds to them.
  const auto start_inp = random_values(inp.size(), 11);
  const auto start_weight = random_values(weight.size(), 12);
  const auto start_bias = random_values(out_channels, 13);
  auto dinp = start_inp, dweight = start_weight, dbias = start_bias;
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  rows, in_channels, out_channels);
  // Scalar reference of the accumulated gradients.
  auto expected_inp = start_inp, expected_weight = start_weight, expected_bias = start_bias;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out_channels; ++o) {
      const double g = dout[r * out_channels + o];
      expected_bias[o] += g;
      for (std::int64_t i = 0; i < in_channels; ++i) {
        expected_inp[r * in_channels + i] += g * weight[o * in_channels + i];
        expected_weight[o * in_channels + i] += g * inp[r * in_channels + i];
      }
    }
  }
  EXPECT_LT(scaled_error(dinp, expected_inp), 1e-14);
  EXPECT_LT(scaled_error(dweight, expected_weight), 1e-14);
  EXPECT_LT(scaled_error(dbias, expected_bias), 1e-14);

  const auto inp_f = testing::to_float(inp), weight_f = testing::to_float(weight),
             dout_f = testing::to_float(dout);
  auto dinp_f = testing::to_float(start_inp), dweight_f = testing::to_float(start_weight),
       dbias_f = testing::to_float(start_bias);
  matmul_backward(dinp_f.data(), dweight_f.data(), dbias_f.data(), dout_f.data(), inp_f.data(),
                  weight_f.data(), rows, in_channels, out_channels);
  const double error =
      std::max({scaled_error(dinp_f, expected_inp), scaled_error(dweight_f, expected_weight),
                scaled_error(dbias_f, expected_bias)});
  report_error("matmul backward float vs scalar reference", error);
  EXPECT_LT(error, 1e-6);
}

TEST(KernelsMatmul, NullBiasGradientIsAllowed) {
  const auto inp = testing::to_float(random_values(rows * in_channels, 14));
  const auto weight = testing::to_float(random_values(out_channels * in_channels, 15));
  const auto dout = testing::to_float(random_values(rows * out_channels, 16));
  std::vector<float> dinp(inp.size(), 0.0F), dweight(weight.size(), 0.0F);
  matmul_backward(dinp.data(), dweight.data(), static_cast<float*>(nullptr), dout.data(),
                  inp.data(), weight.data(), rows, in_channels, out_channels);
  double norm = 0.0;
  for (float value : dweight)
    norm += std::abs(value);
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace strata::gpu::host::kernels

namespace strata::gpu::host::kernels {
namespace {

// Debian's OpenBLAS falls back to SSE3 "Prescott" kernels on a CPU model it does not know (this
// machine's Xeon, family 6 model 207); blas_kernels() moves it to the family the CPU supports.
TEST(BlasKernels, UseTheVectorUnitsTheCpuHas) {
  const char* user_choice = std::getenv("OPENBLAS_CORETYPE");
  bool user_chose_prescott = user_choice != nullptr && std::string(user_choice) == "Prescott";
  const std::string kernels = blas_kernels();
  EXPECT_EQ(kernels, std::string(openblas_get_corename()));
  EXPECT_EQ(kernels, std::string(blas_kernels()));  // chosen once
  __builtin_cpu_init();
  if (user_chose_prescott || !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    GTEST_SKIP() << "SSE3 kernels are right here (or OPENBLAS_CORETYPE=Prescott was asked for)";
  }
  EXPECT_NE(kernels, "Prescott");
  // Products still agree with the reference on the new kernels.
  std::vector<float> inp = {1, 2, 3, 4, 5, 6};      // 2 x 3
  std::vector<float> weight = {1, 0, -1, 2, 1, 0};  // 2 x 3
  std::vector<float> out(4);
  matmul_forward(out.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), 2, 3,
                 2);
  EXPECT_EQ(out, (std::vector<float>{-2, 4, -2, 13}));
}

}  // namespace
}  // namespace strata::gpu::host::kernels
