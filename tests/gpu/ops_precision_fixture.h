#pragma once

// The fixture of the tests that hold each gpu::Ops op's 16-bit path to its fp32 path on the host
// backend (ops_precision_test.cpp, ops_precision_llama_test.cpp). Every op runs twice through
// gpu::create_ops: once on fp32 Tensors (the reference) and once on bfloat16 or float16 Tensors
// holding the same values. Inputs are drawn in fp32 and rounded to the 16-bit type first, so both
// runs start from identical values and the comparison measures only what the 16-bit path adds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu_adam/half.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu {

// Names the type in gtest's messages ("where GetParam() = bfloat16").
inline void PrintTo(DataType type, std::ostream* os) {
  *os << to_string(type);
}

}  // namespace strata::gpu

namespace strata::gpu::precision {

using i64 = std::int64_t;

// The 16-bit bits of `value` rounded to nearest even in `type`, and back (exact). The test rounds
// with cpu_adam/half.h, not with the kernels' own casts, so the bit-for-bit tests check the
// backend against an independent conversion.
inline std::uint16_t to_bits(DataType type, float value) {
  return type == DataType::bfloat16 ? cpu_adam::to_bf16(value).bits : cpu_adam::to_fp16(value).bits;
}
inline float from_bits(DataType type, std::uint16_t bits) {
  return type == DataType::bfloat16 ? cpu_adam::to_float(cpu_adam::bf16{bits})
                                    : cpu_adam::to_float(cpu_adam::fp16{bits});
}

// The unit roundoff: the largest relative error of one rounding to nearest, half the spacing of
// the values just above a power of two relative to that power. 2^-8 for bfloat16 (7 stored
// significand bits, spacing 2^-7 above 1), 2^-11 for float16 (10 bits). Half that, 2^-9 or 2^-12,
// bounds only values near the top of their binade: a largest element of 1.9 beside an element of
// 1.01 that rounds by 2^-8 gives a scaled error above 2^-9.
inline double unit_roundoff(DataType type) {
  return type == DataType::bfloat16 ? 0x1p-8 : 0x1p-11;
}

// One tensor argument of an op in both runs: `reference` is the fp32 run's buffer, `tested` the
// other run's, in `type` (16-bit for activations and weights, float32 for the arguments that are
// fp32 in every run: statistics, losses, parameter gradients). An output the op accumulates into
// remembers the values it started from.
struct Pair {
  DeviceBuffer reference;
  DeviceBuffer tested;
  DataType type = DataType::float32;
  i64 n = 0;
  std::vector<float> start;

  // The argument for one run: the reference run's (fp32) or the tested run's.
  Tensor in(bool reference_run) const {
    return reference_run ? Tensor(reference.as<float>()) : Tensor(tested.data(), type);
  }
  // The same for an argument that is fp32 in both runs.
  float* floats(bool reference_run) const {
    EXPECT_EQ(type, DataType::float32);
    return (reference_run ? reference : tested).as<float>();
  }
  // The tested run's values, widened.
  std::vector<float> tested_values() const {
    std::vector<float> values(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = type == DataType::float32 ? tested.as<float>()[i]
                                            : from_bits(type, tested.as<std::uint16_t>()[i]);
    }
    return values;
  }
  std::vector<float> reference_values() const {
    return {reference.as<float>(), reference.as<float>() + n};
  }
};

// A host device, its ops and a seeded generator for the tests' data.
class OpsOnHost : public ::testing::Test {
 protected:
  Stream& stream() { return device_->compute_stream(); }

  std::vector<float> draw(i64 n, float low, float high) {
    std::uniform_real_distribution<float> distribution(low, high);
    std::vector<float> values(static_cast<std::size_t>(n));
    for (float& value : values)
      value = distribution(engine_);
    return values;
  }
  std::vector<std::int32_t> draw_tokens(i64 n, std::int32_t vocab) {
    std::uniform_int_distribution<std::int32_t> distribution(0, vocab - 1);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
    for (std::int32_t& token : tokens)
      token = distribution(engine_);
    return tokens;
  }
  template <class T>
  DeviceBuffer upload(const std::vector<T>& values) {
    const auto bytes = static_cast<i64>(values.size() * sizeof(T));
    DeviceBuffer buffer = device_->allocate(bytes, "test tensor");
    std::memcpy(buffer.data(), values.data(), static_cast<std::size_t>(bytes));
    return buffer;
  }
  // `values` stored as `type` (rounded when 16-bit).
  DeviceBuffer upload_as(DataType type, const std::vector<float>& values) {
    if (type == DataType::float32) return upload(values);
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      bits[i] = to_bits(type, values[i]);
    return upload(bits);
  }

  // Seeded so that a failure reproduces; every draw continues the same sequence.
  std::mt19937_64 engine_{20260};
  std::unique_ptr<Device> device_ = create_host_device({});
  std::unique_ptr<Ops> ops_ = create_ops(*device_);
};

// The two runs of every op: fp32 (the reference), then the type under test.
inline constexpr bool both_runs[] = {true, false};

// The precision tests, once per 16-bit type.
class OpsPrecision : public OpsOnHost, public ::testing::WithParamInterface<DataType> {
 protected:
  DataType type() const { return GetParam(); }
  double u() const { return unit_roundoff(type()); }

  // Random values in [low, high), rounded to the type, the same in both runs.
  Pair input(i64 n, float low = -1.0f, float high = 1.0f) {
    return same_values(type(), draw(n, low, high));
  }
  // A fresh output: a NaN in every element of both runs, so an element the op does not write
  // fails the comparison.
  Pair output(i64 n) { return same_values(type(), nan_values(n)); }
  // An output the op accumulates into: both runs start from the same finite random values in
  // [-scale, scale), a scale near the op's increment (see expect_accumulated).
  Pair accumulator(i64 n, float scale = 1.0f) {
    Pair pair = same_values(type(), draw(n, -scale, scale));
    pair.start = pair.reference_values();
    return pair;
  }
  // The same two for arguments that are fp32 in every run.
  Pair fp32_output(i64 n) { return same_values(DataType::float32, nan_values(n)); }
  Pair fp32_accumulator(i64 n) {
    Pair pair = same_values(DataType::float32, draw(n, -1.0f, 1.0f));
    pair.start = pair.reference_values();
    return pair;
  }

  // Both runs of `a` hold the same bytes as those of `b` (a fused op against its parts).
  static void expect_same_bits(const std::string& what, const Pair& a, const Pair& b) {
    for (bool reference_run : {true, false}) {
      const DeviceBuffer& x = reference_run ? a.reference : a.tested;
      const DeviceBuffer& y = reference_run ? b.reference : b.tested;
      ASSERT_EQ(x.bytes(), y.bytes()) << what;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), static_cast<std::size_t>(x.bytes())), 0)
          << what << (reference_run ? " (fp32 run)" : " (16-bit run)");
    }
  }

  // Waits for the queued ops, then holds the tested run's values to the reference's: their
  // scaled error (max |tested - reference| / max |reference|) must be at most `tolerance`. The
  // measure is NaN when any element is, and `!(error <= tolerance)` fails on NaN.
  void expect_close(const std::string& what, const Pair& pair, double tolerance) {
    stream().synchronize();
    const std::vector<float> reference = pair.reference_values();
    const double error = host::kernels::testing::scaled_error(pair.tested_values(), reference);
    host::kernels::testing::report_error(
        what + " " + std::string(to_string(pair.type)) + " vs fp32", error);
    EXPECT_TRUE(error <= tolerance) << what << " in " << to_string(pair.type) << ": scaled error "
                                    << error << ", tolerance " << tolerance;
    if (!pair.start.empty()) expect_accumulated(what, pair, reference, tolerance);
  }

 private:
  Pair same_values(DataType tested_type, const std::vector<float>& values) {
    Pair pair{.reference = DeviceBuffer(),
              .tested = upload_as(tested_type, values),
              .type = tested_type,
              .n = static_cast<i64>(values.size()),
              .start = {}};
    // The reference holds what the tested run holds, widened: the values after rounding.
    pair.reference = upload(pair.tested_values());
    return pair;
  }
  static double max_abs(const std::vector<float>& values) {
    double largest = 0.0;
    for (float value : values)
      largest = std::max(largest, std::abs(static_cast<double>(value)));
    return largest;
  }
  static std::vector<float> nan_values(i64 n) {
    return std::vector<float>(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
  }
  // The comparison catches a path that overwrote the start or skipped the op only when the start
  // and the op's increment both weigh far more than the tolerance in the same measure.
  static void expect_accumulated(const std::string& what, const Pair& pair,
                                 const std::vector<float>& reference, double tolerance) {
    const double increment = host::kernels::testing::scaled_error(pair.start, reference);
    const double start = max_abs(pair.start) / max_abs(reference);
    EXPECT_GT(increment, 10.0 * tolerance) << what << ": the op added too little to its start";
    EXPECT_GT(start, 10.0 * tolerance) << what << ": the start is too small to tell if it was kept";
  }
};

// The types each test of an OpsPrecision suite runs in, and their names in the test names.
inline auto half_types() {
  return ::testing::Values(DataType::bfloat16, DataType::float16);
}
inline std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(to_string(info.param));
}

}  // namespace strata::gpu::precision
