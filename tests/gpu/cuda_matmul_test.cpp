// The CUDA backend's products (gpu/cuda/cuda_matmul.h, cuBLASLt) against the host backend's, in
// float32, bfloat16 and float16: the forward with its bias in the epilogue, matmul_gelu_forward
// with GELU there too and without it (an output width cuBLASLt's GELU input cannot take), weight,
// bias and weight-gradient pointers one element off their buffer's alignment, the backward's
// accumulation into dinp and the fp32 dweight (beta = 1) and dbias; the TF32 option; and that the
// fused GELU is GPT-2's tanh approximation, not erf's. Outputs are NaN before the op, gradients
// added onto hold this run's random values; a NaN always fails. Without a usable GPU every test
// skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "gpu/ops.h"
#include "tests/gpu/cuda_ops_fixture.h"

namespace strata::gpu {
namespace {

class CudaMatmulTest : public CudaOpsTest, public ::testing::WithParamInterface<DataType> {
 protected:
  DataType type() const { return GetParam(); }

  struct Shape {
    i64 rows, in, out;
  };

  // Every forward (with and without bias, with and without GELU) and the backward at `shape`, the
  // weight, bias and dweight `offset` elements into their buffers.
  void check_products(const Shape& shape, i64 offset, const std::string& name) {
    const i64 rows = shape.rows, in = shape.in, out = shape.out;
    Pair& inp = fresh(type(), rows * in);
    Pair& weight = fresh(type(), offset + out * in, -0.5f, 0.5f);
    Pair& bias = fresh(type(), offset + out);
    Pair& plain = poisoned(rows * out, type());
    Pair& biased = poisoned(rows * out, type());
    Pair& gelu = poisoned(rows * out, type());
    Pair& pre = poisoned(rows * out, type());
    Pair& gelu_plain = poisoned(rows * out, type());
    Pair& pre_plain = poisoned(rows * out, type());
    both([&](Ops& ops, Stream& s, Side side) {
      const ConstTensor w = weight.tensor_at(side, offset), b = bias.tensor_at(side, offset);
      ops.matmul_forward(s, plain.tensor(side), inp.tensor(side), w, ConstTensor(), rows, in, out);
      ops.matmul_forward(s, biased.tensor(side), inp.tensor(side), w, b, rows, in, out);
      ops.matmul_gelu_forward(s, gelu.tensor(side), pre.tensor(side), inp.tensor(side), w, b, rows,
                              in, out);
      ops.matmul_gelu_forward(s, gelu_plain.tensor(side), pre_plain.tensor(side), inp.tensor(side),
                              w, ConstTensor(), rows, in, out);
    });
    const double forward = product_tolerance(type(), in);
    expect_close(plain, "matmul_forward " + name, forward);
    expect_close(biased, "matmul_forward with bias " + name, forward);
    expect_close(pre, "matmul_gelu_forward pre " + name, forward);
    expect_close(gelu, "matmul_gelu_forward out " + name, forward + gelu_epilogue_tolerance);
    expect_close(pre_plain, "matmul_gelu_forward pre without bias " + name, forward);
    expect_close(gelu_plain, "matmul_gelu_forward out without bias " + name,
                 forward + gelu_epilogue_tolerance);

    Pair& dout = fresh(type(), rows * out);
    Pair& dinp = fresh(type(), rows * in);
    Pair& dweight = fresh(DataType::float32, offset + out * in);
    Pair& dbias = fresh(DataType::float32, offset + out);
    both([&](Ops& ops, Stream& s, Side side) {
      ops.matmul_backward(s, dinp.tensor(side), dweight.on(side) + offset, dbias.on(side) + offset,
                          dout.tensor(side), inp.tensor(side), weight.tensor_at(side, offset), rows,
                          in, out);
    });
    expect_close(dinp, "matmul_backward dinp (added onto) " + name, product_tolerance(type(), out));
    expect_close(dweight, "matmul_backward dweight (fp32, added onto) " + name,
                 sum_tolerance(type(), rows));
    expect_close(dbias, "matmul_backward dbias (fp32, added onto) " + name, tolerance_for(rows));
  }
};

// 29 outputs: cuBLASLt's GELU input needs a leading dimension that is a multiple of 8, so
// matmul_gelu_forward runs without the epilogue; 40 outputs take it.
TEST_P(CudaMatmulTest, ProductsMatchTheHostWithAndWithoutTheEpilogue) {
  check_products({45, 37, 29}, 0, "45 x 37 -> 29");
  check_products({48, 64, 40}, 0, "48 x 64 -> 40");
}

// A weight slice inside a flat parameter buffer may start on any element: here one element past
// the buffer's 256-byte alignment (2 bytes for 16-bit, 4 for fp32), as are the bias and dweight.
TEST_P(CudaMatmulTest, PointersOffTheirAlignmentGiveTheSameProducts) {
  check_products({48, 64, 40}, 1, "48 x 64 -> 40, weight, bias and dweight one element off");
  check_products({45, 37, 29}, 3, "45 x 37 -> 29, weight, bias and dweight three elements off");
}

// cuBLASLt's epilogue takes the bias and GELU-input pointers only 16-byte aligned (some of its
// kernels read them 16 bytes at a time and fault otherwise): a bias one element off its buffer's
// alignment, then a GELU input one element off, each runs without the epilogue and gives the
// host's result.
TEST_P(CudaMatmulTest, ABiasOrGeluInputOffSixteenBytesSkipsTheEpilogue) {
  constexpr i64 rows = 48, in = 64, out = 40;
  Pair& inp = fresh(type(), rows * in);
  Pair& weight = fresh(type(), out * in, -0.5f, 0.5f);
  Pair& bias = fresh(type(), 1 + out);
  Pair& biased = poisoned(rows * out, type());
  Pair& gelu = poisoned(rows * out, type());
  Pair& pre = poisoned(1 + rows * out, type());
  const OpsPathCounts before = cuda_ops_->path_counts();
  both([&](Ops& ops, Stream& s, Side side) {
    ops.matmul_forward(s, biased.tensor(side), inp.tensor(side), weight.tensor(side),
                       bias.tensor_at(side, 1), rows, in, out);
    ops.matmul_gelu_forward(s, gelu.tensor(side), pre.tensor_at(side, 1), inp.tensor(side),
                            weight.tensor(side), bias.tensor_at(side, 0), rows, in, out);
  });
  const OpsPathCounts after = cuda_ops_->path_counts();
  EXPECT_EQ(after.matmul_epilogue, before.matmul_epilogue);
  EXPECT_EQ(after.matmul_unfused, before.matmul_unfused + 2);
  const double forward = product_tolerance(type(), in);
  expect_close(biased, "matmul_forward, bias one element off", forward);
  expect_close_columns(pre, "matmul_gelu_forward pre, one element off", forward, 1, out, 0, out);
  expect_close(gelu, "matmul_gelu_forward out, pre one element off",
               forward + gelu_epilogue_tolerance);
}

std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMatmulTest,
                         ::testing::Values(DataType::float32, DataType::bfloat16,
                                           DataType::float16),
                         type_name);

// matmul_gelu_forward in fp32 with everything aligned and 64 outputs, so cuBLASLt's epilogue runs
// GELU: its out against GELU of its own pre, computed here in double both ways. Against tanh's
// GELU it is within gelu_epilogue_tolerance; and projected on the difference erf's GELU minus
// tanh's (up to 4.7e-4 for |x| in 1 .. 4), its deviation from tanh's would be near 1 for erf and
// is near 0 for tanh (an approximate tanh's errors do not follow that difference).
TEST_F(CudaOpsTest, TheFusedGeluIsTheTanhApproximation) {
  constexpr DataType type = DataType::float32;  // where GELU's value is not rounded
  constexpr i64 rows = 512, in = 16, out = 64;
  Pair& inp = fresh(type, rows * in);
  Pair& weight = fresh(type, out * in, -2.0f, 2.0f);
  Pair& bias = fresh(type, out);
  Pair& gelu = poisoned(rows * out);
  Pair& pre = poisoned(rows * out);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.matmul_gelu_forward(s, gelu.tensor(side), pre.tensor(side), inp.tensor(side),
                            weight.tensor(side), bias.tensor(side), rows, in, out);
  });
  const std::vector<float> x = widened(Side::cuda, pre);
  const std::vector<float> y = widened(Side::cuda, gelu);
  const double scale = std::sqrt(2.0 / std::numbers::pi);
  double max_error = 0.0, max_y = 0.0, along = 0.0, difference_squared = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_FALSE(std::isnan(x[i]) || std::isnan(y[i])) << i;
    const double v = x[i];
    const double tanh_gelu = 0.5 * v * (1.0 + std::tanh(scale * (v + 0.044715 * v * v * v)));
    const double erf_gelu = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    max_error = std::max(max_error, std::abs(y[i] - tanh_gelu));
    max_y = std::max(max_y, std::abs(double{y[i]}));
    along += (y[i] - tanh_gelu) * (erf_gelu - tanh_gelu);
    difference_squared += (erf_gelu - tanh_gelu) * (erf_gelu - tanh_gelu);
  }
  const double toward_erf = along / difference_squared;
  std::printf("[ measured ] fused GELU: scaled error from tanh's %.3g, toward erf's %.3g\n",
              max_error / max_y, toward_erf);
  EXPECT_LE(max_error / max_y, gelu_epilogue_tolerance);
  EXPECT_LT(std::abs(toward_erf), 0.25);
  expect_close(gelu, "matmul_gelu_forward out against the host",
               product_tolerance(type, in) + gelu_epilogue_tolerance);
}

// OpsOptions.tf32: fp32 products round their inputs to TF32 (10 mantissa bits) on the tensor
// cores, so they move away from the host's fp32 sgemm; without it they stay within fp32's
// tolerance.
class CudaTf32Test : public CudaOpsTest {
 protected:
  OpsOptions ops_options() const override { return OpsOptions{.tf32 = true}; }
};

// TF32 keeps 10 of fp32's 23 mantissa bits: each input is off by up to 2^-11 of its size, each
// product by up to 2^-10. For 512 products of values uniform in [-1, 1] the sum's error and the
// sum itself both grow like a random walk, and the largest error over the outputs comes to about
// 4e-4 of the largest output: 4 * 2^-10 holds it with ten times room. fp32 products stay within a
// few fp32 ulps, 1e-7; more than 1e-5 shows that TF32 ran.
constexpr double tf32_tolerance = 4.0 / 1024;
constexpr double tf32_error_min = 1e-5;

TEST_F(CudaTf32Test, Tf32ProductsRoundTheirInputsAndPlainOnesDoNot) {
  constexpr i64 rows = 256, in = 512, out = 384;
  Pair& inp = fresh(DataType::float32, rows * in);
  Pair& weight = fresh(DataType::float32, out * in);
  Pair& tf32 = poisoned(rows * out);
  Pair& plain = poisoned(rows * out);
  both([&](Ops& ops, Stream& s, Side side) {
    ops.matmul_forward(s, tf32.tensor(side), inp.tensor(side), weight.tensor(side), ConstTensor(),
                       rows, in, out);
  });
  std::unique_ptr<Ops> plain_ops = create_ops(*cuda_, OpsOptions{.tf32 = false});
  both([&](Ops& ops, Stream& s, Side side) {
    Ops& run = side == Side::cuda ? *plain_ops : ops;
    run.matmul_forward(s, plain.tensor(side), inp.tensor(side), weight.tensor(side), ConstTensor(),
                       rows, in, out);
  });
  expect_close(tf32, "matmul_forward with tf32", tf32_tolerance);
  expect_close(plain, "matmul_forward without tf32", tolerance_for(in));
  // TF32 did run: the products moved further from the host's than fp32 products do.
  const std::vector<float> expected = widened(Side::host, tf32);
  const std::vector<float> actual = widened(Side::cuda, tf32);
  double max_difference = 0.0, max_expected = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    max_difference = std::max(max_difference, std::abs(double{actual[i]} - expected[i]));
    max_expected = std::max(max_expected, std::abs(double{expected[i]}));
  }
  EXPECT_GT(max_difference / max_expected, tf32_error_min);
}

}  // namespace
}  // namespace strata::gpu
