// Causal multi-head self-attention: forward against a scalar double reference (softmax written
// the textbook way), backward against central finite differences in double (measured scaled
// error 1.5e-10 for 7 positions, 7e-10 for 133).

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/attention.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t batch = 2;
constexpr std::int64_t seq_len = 7;
constexpr std::int64_t heads = 3;
constexpr std::int64_t head_size = 5;
constexpr std::int64_t channels = heads * head_size;

struct Shape {
  std::int64_t batch;
  std::int64_t seq_len;
  std::int64_t heads;
  std::int64_t head_size;
  std::int64_t channels() const { return heads * head_size; }
  std::int64_t qkv_size() const { return batch * seq_len * 3 * channels(); }
  std::int64_t out_size() const { return batch * seq_len * channels(); }
  std::int64_t att_size() const { return batch * heads * seq_len * seq_len; }
};

// The textbook forward, written independently of the kernel (no blocks, no max subtraction).
std::vector<double> reference_forward(const std::vector<double>& qkv, const Shape& shape) {
  const auto qkv_at = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h,
                          std::int64_t i) {
    return qkv[(b * shape.seq_len + t) * 3 * shape.channels() + part * shape.channels() +
               h * shape.head_size + i];
  };
  std::vector<double> out(shape.batch * shape.seq_len * shape.channels(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_size));
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      for (std::int64_t t = 0; t < shape.seq_len; ++t) {
        std::vector<double> weights(t + 1);
        double total = 0.0;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          double score = 0.0;
          for (std::int64_t i = 0; i < shape.head_size; ++i) {
            score += qkv_at(b, t, 0, h, i) * qkv_at(b, t2, 1, h, i);
          }
          weights[t2] = std::exp(score * scale);
          total += weights[t2];
        }
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          for (std::int64_t i = 0; i < shape.head_size; ++i) {
            out[(b * shape.seq_len + t) * shape.channels() + h * shape.head_size + i] +=
                weights[t2] / total * qkv_at(b, t2, 2, h, i);
          }
        }
      }
    }
  }
  return out;
}

TEST(KernelsAttention, ForwardMatchesScalarReferenceAndIsCausal) {
  const auto qkv = random_values(batch * seq_len * 3 * channels, 1, -2.0, 2.0);
  const auto expected = reference_forward(qkv, Shape{batch, seq_len, heads, head_size});
  std::vector<double> out(expected.size());
  std::vector<double> att(batch * heads * seq_len * seq_len, -1.0);
  attention_forward(out.data(), att.data(), qkv.data(), batch, seq_len, channels, heads);
  EXPECT_LT(scaled_error(out, expected), 1e-14);
  // Saved probabilities: zero above the diagonal, rows summing to one.
  for (std::int64_t row = 0; row < batch * heads * seq_len; ++row) {
    const std::int64_t t = row % seq_len;
    double sum = 0.0;
    for (std::int64_t t2 = 0; t2 < seq_len; ++t2) {
      const double p = att[row * seq_len + t2];
      if (t2 > t) {
        EXPECT_EQ(p, 0.0);
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }

  const auto qkv_f = testing::to_float(qkv);
  std::vector<float> out_f(expected.size());
  std::vector<float> att_f(att.size());
  attention_forward(out_f.data(), att_f.data(), qkv_f.data(), batch, seq_len, channels, heads);
  const double error = scaled_error(out_f, expected);
  report_error("attention forward float", error);
  EXPECT_LT(error, 1e-5);
}

TEST(KernelsAttention, BackwardMatchesFiniteDifferencesScaledErrorBelow1e8) {
  auto qkv = random_values(batch * seq_len * 3 * channels, 2, -2.0, 2.0);
  const auto weights = random_values(batch * seq_len * channels, 3);
  std::vector<double> out(weights.size());
  std::vector<double> att(batch * heads * seq_len * seq_len);
  const auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), batch, seq_len, channels, heads);
    return weighted_sum(out, weights);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  attention_backward(dqkv.data(), weights.data(), qkv.data(), att.data(), batch, seq_len, channels,
                     heads);
  const double error = scaled_error(dqkv, finite_difference(qkv, loss));
  report_error("attention backward dqkv vs finite differences", error);
  EXPECT_LT(error, 1e-8);
}

TEST(KernelsAttention, FloatBackwardMatchesDoubleAndAccumulates) {
  const auto qkv = random_values(batch * seq_len * 3 * channels, 4, -2.0, 2.0);
  const auto dout = random_values(batch * seq_len * channels, 5);
  const auto start = random_values(qkv.size(), 6);
  std::vector<double> out(dout.size()), att(batch * heads * seq_len * seq_len);
  attention_forward(out.data(), att.data(), qkv.data(), batch, seq_len, channels, heads);
  std::vector<double> fresh(qkv.size(), 0.0);
  attention_backward(fresh.data(), dout.data(), qkv.data(), att.data(), batch, seq_len, channels,
                     heads);
  auto accumulated = start;
  attention_backward(accumulated.data(), dout.data(), qkv.data(), att.data(), batch, seq_len,
                     channels, heads);
  for (std::size_t i = 0; i < qkv.size(); ++i) {
    EXPECT_NEAR(accumulated[i], start[i] + fresh[i], 1e-14);
  }

  const auto qkv_f = testing::to_float(qkv), dout_f = testing::to_float(dout);
  std::vector<float> out_f(dout.size()), att_f(att.size()), dqkv_f(qkv.size(), 0.0F);
  attention_forward(out_f.data(), att_f.data(), qkv_f.data(), batch, seq_len, channels, heads);
  attention_backward(dqkv_f.data(), dout_f.data(), qkv_f.data(), att_f.data(), batch, seq_len,
                     channels, heads);
  const double error = scaled_error(dqkv_f, fresh);
  report_error("attention backward float vs double", error);
  EXPECT_LT(error, 1e-5);
}

// 133 positions: two full blocks of 64 query rows and a ragged one of 5, so the causal blocking
// (each block scoring only the keys it sees) is checked against the reference and the finite
// differences too.
TEST(KernelsAttention, SeveralCausalBlocksMatchReferenceAndFiniteDifferences) {
  const Shape shape{1, 133, 2, 2};
  auto qkv = random_values(shape.qkv_size(), 8, -2.0, 2.0);
  const auto expected = reference_forward(qkv, shape);
  std::vector<double> out(shape.out_size());
  std::vector<double> att(shape.att_size(), std::nan(""));  // the kernel writes every element
  attention_forward(out.data(), att.data(), qkv.data(), shape.batch, shape.seq_len,
                    shape.channels(), shape.heads);
  EXPECT_LT(scaled_error(out, expected), 1e-13);

  const auto weights = random_values(shape.out_size(), 9);
  const auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), shape.batch, shape.seq_len,
                      shape.channels(), shape.heads);
    return weighted_sum(out, weights);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  attention_backward(dqkv.data(), weights.data(), qkv.data(), att.data(), shape.batch,
                     shape.seq_len, shape.channels(), shape.heads);
  const double error = scaled_error(dqkv, finite_difference(qkv, loss));
  report_error("attention backward dqkv vs finite differences, 133 positions", error);
  EXPECT_LT(error, 1e-8);
}

TEST(KernelsAttention, SinglePositionAndSingleHeadShapes) {
  // seq_len 1 attends only to itself (out = v); one head of the full width is plain attention.
  const std::vector<double> qkv = random_values(3 * 4, 7);
  std::vector<double> out(4), att(1);
  attention_forward(out.data(), att.data(), qkv.data(), 1, 1, 4, 1);
  EXPECT_EQ(att[0], 1.0);
  for (int i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(out[i], qkv[8 + i]);
}

}  // namespace
}  // namespace strata::gpu::host::kernels
