// The device optimizer ops of the host backend (gpu::Ops::adam_step, adagrad_step, lion_step,
// sum_squares): cpu_adam itself on the stream, so they give cpu_adam::step's and
// cpu_adam::scan_gradients's bits. The CUDA backend's are held to cpu_adam by
// tests/gpu/cuda_ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "tests/cpu_adam/ten_steps.h"

namespace strata::gpu {
namespace {

using cpu_adam::testing::Rule;
using cpu_adam::testing::States;

class HostOptimizerOps : public ::testing::Test {
 protected:
  // `values` in a fresh device buffer.
  DeviceBuffer upload(const std::vector<float>& values) {
    const auto bytes = static_cast<std::int64_t>(values.size() * sizeof(float));
    DeviceBuffer buffer = device_->allocate(bytes, "test tensor");
    // An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
    if (bytes > 0) std::memcpy(buffer.data(), values.data(), static_cast<std::size_t>(bytes));
    return buffer;
  }
  static std::vector<float> values(const DeviceBuffer& buffer, std::size_t n) {
    return {buffer.as<float>(), buffer.as<float>() + n};
  }

  std::unique_ptr<Device> device_ = create_host_device({});
  std::unique_ptr<Ops> ops_ = create_ops(*device_);
};

// Each rule, with a bf16 copy of the parameters, against cpu_adam::step on the same data.
TEST_F(HostOptimizerOps, StepsAreCpuAdamStepBitForBit) {
  const std::size_t n = 2053;
  for (Rule rule : {Rule::adamw, Rule::adam_l2, Rule::adagrad, Rule::lion}) {
    const cpu_adam::testing::TenSteps run = cpu_adam::testing::make_ten_steps(rule, n, 5);
    States expected = run.initial;
    std::vector<cpu_adam::bf16> expected_copy(n);
    DeviceBuffer p = upload(run.initial.p);
    DeviceBuffer g = upload(run.grads[0]);
    DeviceBuffer m = cpu_adam::testing::uses_m(rule) ? upload(run.initial.m) : DeviceBuffer();
    DeviceBuffer v = cpu_adam::testing::uses_v(rule) ? upload(run.initial.v) : DeviceBuffer();
    DeviceBuffer copy = device_->allocate(static_cast<std::int64_t>(n) * 2, "copy");
    OptimizerArrays arrays{
        p.as<float>(), g.as<float>(),     m ? m.as<float>() : nullptr, v ? v.as<float>() : nullptr,
        copy.data(),   DataType::bfloat16};
    Stream& stream = device_->compute_stream();
    switch (rule) {
      case Rule::adamw:
      case Rule::adam_l2:
        ops_->adam_step(stream, run.adam, 2, run.grad_scale, arrays, static_cast<std::int64_t>(n));
        cpu_adam::step<float, cpu_adam::bf16>(run.adam, 2, expected.p, run.grads[0], expected.m,
                                              expected.v, expected_copy, run.grad_scale);
        break;
      case Rule::adagrad:
        ops_->adagrad_step(stream, run.adagrad, 2, run.grad_scale, arrays,
                           static_cast<std::int64_t>(n));
        cpu_adam::step<float, cpu_adam::bf16>(run.adagrad, 2, expected.p, run.grads[0], expected.v,
                                              expected_copy, run.grad_scale);
        break;
      case Rule::lion:
        ops_->lion_step(stream, run.lion, 2, run.grad_scale, arrays, static_cast<std::int64_t>(n));
        cpu_adam::step<float, cpu_adam::bf16>(run.lion, 2, expected.p, run.grads[0], expected.m,
                                              expected_copy, run.grad_scale);
        break;
    }
    stream.synchronize();
    EXPECT_EQ(values(p, n), expected.p) << cpu_adam::testing::rule_name(rule);
    if (m) {
      EXPECT_EQ(values(m, n), expected.m) << cpu_adam::testing::rule_name(rule);
    }
    if (v) {
      EXPECT_EQ(values(v, n), expected.v) << cpu_adam::testing::rule_name(rule);
    }
    EXPECT_EQ(std::memcmp(copy.data(), expected_copy.data(), n * 2), 0)
        << cpu_adam::testing::rule_name(rule);
  }
}

// A hyperparameter out of range is the UserError cpu_adam raises, reported by the stream.
TEST_F(HostOptimizerOps, AnOutOfRangeHyperparameterIsReportedBySynchronize) {
  DeviceBuffer p = upload({1.0f});
  DeviceBuffer g = upload({1.0f});
  DeviceBuffer m = upload({0.0f});
  DeviceBuffer v = upload({0.0f});
  OptimizerArrays arrays{p.as<float>(), g.as<float>(), m.as<float>(),
                         v.as<float>(), nullptr,       DataType::float32};
  ops_->adam_step(device_->compute_stream(), cpu_adam::AdamConfig{.lr = -1.0f}, 1, 1.0f, arrays, 1);
  EXPECT_THROW(device_->compute_stream().synchronize(), UserError);
}

TEST_F(HostOptimizerOps, SumSquaresIsTheScanAndIsInfOrNanExactlyWhenAValueIs) {
  const std::size_t n = 70001;  // two of cpu_adam's tiles
  std::vector<float> grads = cpu_adam::testing::ordinary_values(n, 9, -3.0f, 1.0f);
  DeviceBuffer sum = device_->allocate(sizeof(double), "sum of squares");
  Stream& stream = device_->compute_stream();
  const auto sum_of = [&](const std::vector<float>& input) {
    DeviceBuffer values = upload(input);
    ops_->sum_squares(stream, sum.as<double>(), values.as<float>(),
                      static_cast<std::int64_t>(input.size()));
    stream.synchronize();
    return *sum.as<double>();
  };
  const cpu_adam::GradStats scan = cpu_adam::scan_gradients<float>(grads);
  EXPECT_EQ(sum_of(grads), scan.sum_squares);
  EXPECT_EQ(sum_of({}), 0.0);
  // The largest finite squares stay finite in double.
  EXPECT_TRUE(std::isfinite(sum_of(std::vector<float>(1000, std::numeric_limits<float>::max()))));
  grads[n - 1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_of(grads), std::numeric_limits<double>::infinity());
  grads[3] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_of(grads), std::numeric_limits<double>::infinity());
  grads[40000] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sum_of(grads)));
}

}  // namespace
}  // namespace strata::gpu
