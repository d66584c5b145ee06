// The GPU optimizer and gradient norm of the CUDA backend (gpu::Ops::adam_step, adagrad_step,
// lion_step, sum_squares) on a GPU: over ten steps the kernel gives its CPU twin's bits
// (cpu_adam::gpu_twin_step) exactly, parameter copies included, and stays within the stated
// bound of cpu_adam::step (tests/cpu_adam/ten_steps.h); a slice that is not 16-byte aligned takes
// the one-element path to the same bits; the sum of squares agrees with the host's and is inf or
// NaN exactly when a gradient is. Without a usable GPU every test here skips with one line
// saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_adam/half.h"
#include "cpu_adam/isa.h"
#include "cpu_adam/optimizer.h"
#include "gpu/ops.h"
#include "tests/cpu_adam/ten_steps.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using cpu_adam::testing::Rule;
using cpu_adam::testing::States;
using cpu_adam::testing::TenSteps;
using i64 = std::int64_t;

class CudaOptimizerTest : public ::testing::Test {
 public:
  void SetUp() override {
    if (!testing::cuda_unavailable_reason().empty()) {
      GTEST_SKIP() << testing::cuda_unavailable_reason();
    }
    DeviceOptions options;
    options.memory_budget_bytes = i64{512} << 20;
    device_ = open_device(options);
    ASSERT_EQ(device_->kind(), DeviceKind::cuda);
    ops_ = create_ops(*device_);
  }

  void TearDown() override {
    buffers_.clear();
    ops_.reset();
  }

  // `values` in a fresh device buffer, followed by 16 bytes of 0xff (NaN as floats).
  template <class T>
  T* upload(const std::vector<T>& values) {
    const auto bytes = static_cast<i64>(values.size() * sizeof(T));
    DeviceBuffer buffer = device_->allocate(bytes + 16, "test tensor");
    PinnedBuffer staging = device_->allocate_pinned(bytes + 16);
    std::memset(staging.data(), 0xff, static_cast<std::size_t>(bytes + 16));
    std::memcpy(staging.data(), values.data(), static_cast<std::size_t>(bytes));
    device_->compute_stream().copy(buffer.data(), staging.data(), bytes + 16,
                                   CopyKind::host_to_device);
    device_->compute_stream().synchronize();
    buffers_.push_back(std::move(buffer));
    return buffers_.back().as<T>();
  }

  template <class T>
  std::vector<T> download(const T* source, std::size_t count) {
    std::vector<T> values(count);
    const auto bytes = static_cast<i64>(count * sizeof(T));
    PinnedBuffer staging = device_->allocate_pinned(std::max<i64>(bytes, 1));
    device_->compute_stream().copy(staging.data(), source, bytes, CopyKind::device_to_host);
    device_->compute_stream().synchronize();
    std::memcpy(values.data(), staging.data(), static_cast<std::size_t>(bytes));
    return values;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Ops> ops_;
  std::vector<DeviceBuffer> buffers_;
};

// One step of `rule` through the device ops.
void device_step(Ops& ops, Stream& stream, const TenSteps& run, i64 t, const OptimizerArrays& a,
                 i64 n) {
  switch (run.rule) {
    case Rule::adamw:
    case Rule::adam_l2:
      return ops.adam_step(stream, run.adam, t, run.grad_scale, a, n);
    case Rule::adagrad:
      return ops.adagrad_step(stream, run.adagrad, t, run.grad_scale, a, n);
    case Rule::lion:
      return ops.lion_step(stream, run.lion, t, run.grad_scale, a, n);
  }
}

// One step of the twin with a parameter copy of type H.
template <class H>
void twin_step(const TenSteps& run, i64 t, const std::vector<float>& grads, States& s,
               std::vector<H>& copy) {
  switch (run.rule) {
    case Rule::adamw:
    case Rule::adam_l2:
      return cpu_adam::gpu_twin_step<H>(run.adam, t, s.p, grads, s.m, s.v, copy, run.grad_scale);
    case Rule::adagrad:
      return cpu_adam::gpu_twin_step<H>(run.adagrad, t, s.p, grads, s.v, copy, run.grad_scale);
    case Rule::lion:
      return cpu_adam::gpu_twin_step<H>(run.lion, t, s.p, grads, s.m, copy, run.grad_scale);
  }
}

// Ten steps of `rule` on the device from `run`, elements [offset, offset + n) of buffers one
// element longer than the run (offset 1: no array is 16-byte aligned). Checks every step against
// the twin bit for bit, the copy included, and returns the device's states.
template <class H>
std::vector<States> ten_device_steps(CudaOptimizerTest& test, Ops& ops, Stream& stream,
                                     const TenSteps& run, i64 offset, DataType copy_type) {
  const auto n = static_cast<i64>(run.initial.p.size());
  const auto shifted = [&](const std::vector<float>& values) {
    std::vector<float> longer(values.size() + 1, 0.0f);
    std::copy(values.begin(), values.end(), longer.begin() + offset);
    return test.upload(longer) + offset;
  };
  float* p = shifted(run.initial.p);
  float* m = cpu_adam::testing::uses_m(run.rule) ? shifted(run.initial.m) : nullptr;
  float* v = cpu_adam::testing::uses_v(run.rule) ? shifted(run.initial.v) : nullptr;
  std::uint16_t* copy = test.upload(std::vector<std::uint16_t>(static_cast<std::size_t>(n + 1)));
  States twin = run.initial;
  // No copy wanted: the twin takes an empty span, as cpu_adam's step does.
  std::vector<H> twin_copy(std::is_same_v<H, cpu_adam::NoCopy> ? 0 : static_cast<std::size_t>(n));
  std::vector<States> history;
  for (i64 t = 1; t <= cpu_adam::testing::kSteps; ++t) {
    const std::vector<float>& grads = run.grads[static_cast<std::size_t>(t - 1)];
    OptimizerArrays arrays{p, shifted(grads), m, v, nullptr, DataType::float32};
    if constexpr (!std::is_same_v<H, cpu_adam::NoCopy>) {
      arrays.param_copy = copy + offset;
      arrays.copy_type = copy_type;
    }
    device_step(ops, stream, run, t, arrays, n);
    twin_step<H>(run, t, grads, twin, twin_copy);
    States got;
    got.p = test.download(p, static_cast<std::size_t>(n));
    if (m) got.m = test.download(m, static_cast<std::size_t>(n));
    if (v) got.v = test.download(v, static_cast<std::size_t>(n));
    EXPECT_EQ(got.p, twin.p) << cpu_adam::testing::rule_name(run.rule) << " step " << t;
    EXPECT_EQ(got.m, twin.m) << cpu_adam::testing::rule_name(run.rule) << " step " << t;
    EXPECT_EQ(got.v, twin.v) << cpu_adam::testing::rule_name(run.rule) << " step " << t;
    if constexpr (!std::is_same_v<H, cpu_adam::NoCopy>) {
      const std::vector<std::uint16_t> bits = test.download(copy + offset, twin_copy.size());
      EXPECT_EQ(std::memcmp(bits.data(), twin_copy.data(), bits.size() * 2), 0)
          << cpu_adam::testing::rule_name(run.rule) << " copy, step " << t;
    }
    history.push_back(std::move(got));
  }
  return history;
}

TEST_F(CudaOptimizerTest, TenStepsAreTheTwinBitForBitAndWithinTheBoundOfCpuAdam) {
  const i64 n = 4099;  // odd: the four-element path and a tail
  Stream& stream = device_->compute_stream();
  for (Rule rule : {Rule::adamw, Rule::adam_l2, Rule::adagrad, Rule::lion}) {
    const TenSteps run = cpu_adam::testing::make_ten_steps(rule, static_cast<std::size_t>(n), 100);
    std::vector<States> on_device;
    if (rule == Rule::adamw || rule == Rule::lion) {
      on_device =
          ten_device_steps<cpu_adam::bf16>(*this, *ops_, stream, run, 0, DataType::bfloat16);
    } else if (rule == Rule::adam_l2) {
      on_device = ten_device_steps<cpu_adam::fp16>(*this, *ops_, stream, run, 0, DataType::float16);
    } else {
      on_device =
          ten_device_steps<cpu_adam::NoCopy>(*this, *ops_, stream, run, 0, DataType::float32);
    }
    const std::vector<States> cpu =
        cpu_adam::testing::run_ten_steps(run, cpu_adam::testing::cpu_step);
    const cpu_adam::testing::Agreement agreement =
        cpu_adam::testing::compare_ten_steps(run, cpu, on_device);
    std::printf("[ measured ] cuda %s vs cpu_adam (%s), 10 steps: %.2f ulps of scale (%s)\n",
                cpu_adam::testing::rule_name(rule),
                std::string(cpu_adam::isa_name(cpu_adam::active_isa())).c_str(),
                agreement.worst_ulps, agreement.where.c_str());
    EXPECT_LE(agreement.worst_ulps, cpu_adam::testing::kTenStepUlps) << agreement.where;
  }
}

TEST_F(CudaOptimizerTest, AnUnalignedSliceTakesTheOneElementPathToTheSameBits) {
  const TenSteps run = cpu_adam::testing::make_ten_steps(Rule::adamw, 1029, 200);
  ten_device_steps<cpu_adam::bf16>(*this, *ops_, device_->compute_stream(), run, 1,
                                   DataType::bfloat16);
}

TEST_F(CudaOptimizerTest, SumSquaresAgreesWithTheHostAndIsInfOrNanExactlyWhenAValueIs) {
  Stream& stream = device_->compute_stream();
  double* sum = upload(std::vector<double>(1));
  const auto sum_of = [&](const std::vector<float>& values) {
    ops_->sum_squares(stream, sum, upload(values), static_cast<i64>(values.size()));
    return download(sum, 1)[0];
  };
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{3'000'017}}) {
    const std::vector<float> grads = cpu_adam::testing::ordinary_values(n, 300, -3.0f, 1.0f);
    const double expected = cpu_adam::scan_gradients<float>(grads).sum_squares;
    const double got = sum_of(grads);
    // Both sum in double, in different orders: about n * 2^-53 apart at most.
    EXPECT_NEAR(got, expected, 1e-12 * expected + 1e-300) << "n=" << n;
    EXPECT_EQ(sum_of(grads), got) << "n=" << n << ": another run gave other bits";
  }
  std::vector<float> grads = cpu_adam::testing::ordinary_values(100'003, 301, -3.0f, 1.0f);
  EXPECT_TRUE(std::isfinite(sum_of(std::vector<float>(1000, std::numeric_limits<float>::max()))));
  grads[100'002] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_of(grads), std::numeric_limits<double>::infinity());
  grads[5] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_of(grads), std::numeric_limits<double>::infinity());
  grads[777] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sum_of(grads)));
}

}  // namespace
}  // namespace strata::gpu
