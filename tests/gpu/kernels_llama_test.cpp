// The Llama family's host kernels: RMSNorm, rotary embeddings (transformers' rotate_half form),
// SwiGLU and grouped-query packing, forward against scalar double references and backward
// against central finite differences in double.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/qkv_pack.h"
#include "gpu/host/kernels/rms_norm.h"
#include "gpu/host/kernels/rope.h"
#include "gpu/host/kernels/swiglu.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t rows = 6, channels = 20;
constexpr double eps = 1e-5;

TEST(KernelsRmsNorm, ForwardMatchesTheDefinition) {
  const auto inp = random_values(rows * channels, 1);
  const auto weight = random_values(channels, 2, 0.5, 1.5);
  std::vector<double> out(rows * channels), rstd(rows), expected(rows * channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (std::int64_t c = 0; c < channels; ++c)
      squares += inp[r * channels + c] * inp[r * channels + c];
    const double s = 1.0 / std::sqrt(squares / channels + eps);
    for (std::int64_t c = 0; c < channels; ++c)
      expected[r * channels + c] = inp[r * channels + c] * s * weight[c];
  }
  rms_norm_forward(out.data(), rstd.data(), inp.data(), weight.data(), eps, rows, channels);
  EXPECT_LT(scaled_error(out, expected), 1e-15);
}

TEST(KernelsRmsNorm, BackwardMatchesFiniteDifferences) {
  auto inp = random_values(rows * channels, 3);
  auto weight = random_values(channels, 4, 0.5, 1.5);
  const auto dout = random_values(rows * channels, 5);
  std::vector<double> out(rows * channels), rstd(rows);
  const auto loss = [&] {
    rms_norm_forward(out.data(), rstd.data(), inp.data(), weight.data(), eps, rows, channels);
    return weighted_sum(out, dout);
  };
  loss();
  std::vector<double> dinp(rows * channels, 0.0), dweight(channels, 0.0);
  rms_norm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                    rstd.data(), rows, channels);
  const double error_inp = scaled_error(dinp, finite_difference(inp, loss));
  const double error_weight = scaled_error(dweight, finite_difference(weight, loss));
  report_error("rms_norm backward dinp vs finite differences", error_inp);
  report_error("rms_norm backward dweight vs finite differences", error_weight);
  EXPECT_LT(error_inp, 1e-8);
  EXPECT_LT(error_weight, 1e-8);
}

constexpr std::int64_t batch = 2, seq_len = 5, heads = 3, head_dim = 8;

std::vector<float> inverse_frequencies(double theta) {
  std::vector<float> inv_freq(head_dim / 2);
  for (std::int64_t j = 0; j < head_dim / 2; ++j)
    inv_freq[j] = static_cast<float>(1.0 / std::pow(theta, 2.0 * j / head_dim));
  return inv_freq;
}

// q * cos + rotate_half(q) * sin with cos, sin = cat(freqs, freqs), rotate_half(x) = cat(-x2, x1):
// transformers' apply_rotary_pos_emb, written out.
TEST(KernelsRope, ForwardIsTransformersRotateHalf) {
  const std::vector<float> inv_freq = inverse_frequencies(10000.0);
  const std::int64_t stride = heads * head_dim + 4;  // rows may carry more than the heads
  const auto original = random_values(batch * seq_len * stride, 6);
  auto x = original;
  rope_forward(x.data(), inv_freq.data(), batch, seq_len, heads, head_dim, stride);
  const std::int64_t half = head_dim / 2;
  for (std::int64_t row = 0; row < batch * seq_len; ++row) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t d = 0; d < head_dim; ++d) {
        const double angle =
            static_cast<float>(row % seq_len) * inv_freq[static_cast<std::size_t>(d % half)];
        const double* head = original.data() + row * stride + h * head_dim;
        const double rotated = d < half ? -head[d + half] : head[d - half];
        EXPECT_NEAR(x[row * stride + h * head_dim + d],
                    head[d] * std::cos(angle) + rotated * std::sin(angle), 1e-6);
      }
    }
    for (std::int64_t extra = heads * head_dim; extra < stride; ++extra)
      EXPECT_EQ(x[row * stride + extra], original[row * stride + extra]);  // untouched
  }
}

TEST(KernelsRope, BackwardIsTheTransposeByFiniteDifferences) {
  const std::vector<float> inv_freq = inverse_frequencies(500000.0);
  const std::int64_t stride = heads * head_dim;
  auto inp = random_values(batch * seq_len * stride, 7);
  const auto dout = random_values(batch * seq_len * stride, 8);
  std::vector<double> out;
  const auto loss = [&] {
    out = inp;
    rope_forward(out.data(), inv_freq.data(), batch, seq_len, heads, head_dim, stride);
    return weighted_sum(out, dout);
  };
  auto dinp = dout;
  rope_backward(dinp.data(), inv_freq.data(), batch, seq_len, heads, head_dim, stride);
  const double error = scaled_error(dinp, finite_difference(inp, loss));
  report_error("rope backward vs finite differences", error);
  EXPECT_LT(error, 1e-9);
}

TEST(KernelsSwiglu, ForwardAndBackwardMatchTheDefinition) {
  constexpr std::int64_t n = 97;
  auto gate = random_values(n, 9, -6.0, 6.0);
  auto up = random_values(n, 10);
  const auto dout = random_values(n, 11);
  std::vector<double> out(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(out[i], gate[i] / (1.0 + std::exp(-gate[i])) * up[i], 1e-15);
  const auto loss = [&] {
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    return weighted_sum(out, dout);
  };
  std::vector<double> dgate(n, 0.0), dup(n, 0.0);
  swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  const double error_gate = scaled_error(dgate, finite_difference(gate, loss));
  const double error_up = scaled_error(dup, finite_difference(up, loss));
  report_error("swiglu backward dgate vs finite differences", error_gate);
  EXPECT_LT(error_gate, 1e-9);
  EXPECT_LT(error_up, 1e-9);
}

// Four query heads over two kv heads: each row is [q (4 heads) | k (2 heads) | v (2 heads)], k and
// v not repeated; the backward hands each part of the gradient back to its source.
TEST(KernelsQkvPack, PacksEachKvHeadOnceAndSplitsTheGradient) {
  constexpr std::int64_t n_rows = 3, q_heads = 4, kv_heads = 2, d = 2;
  constexpr std::int64_t q_width = q_heads * d, kv_width = kv_heads * d;
  constexpr std::int64_t row_width = q_width + 2 * kv_width;
  auto q = random_values(n_rows * q_width, 12);
  auto k = random_values(n_rows * kv_width, 13);
  auto v = random_values(n_rows * kv_width, 14);
  const auto dout = random_values(n_rows * row_width, 15);
  std::vector<double> qkv(n_rows * row_width);
  qkv_pack_forward(qkv.data(), q.data(), k.data(), v.data(), n_rows, q_heads, kv_heads, d);
  for (std::int64_t r = 0; r < n_rows; ++r) {
    for (std::int64_t i = 0; i < q_width; ++i)
      EXPECT_EQ(qkv[r * row_width + i], q[r * q_width + i]);
    for (std::int64_t i = 0; i < kv_width; ++i) {
      EXPECT_EQ(qkv[r * row_width + q_width + i], k[r * kv_width + i]);
      EXPECT_EQ(qkv[r * row_width + q_width + kv_width + i], v[r * kv_width + i]);
    }
  }
  const auto loss = [&] {
    qkv_pack_forward(qkv.data(), q.data(), k.data(), v.data(), n_rows, q_heads, kv_heads, d);
    return weighted_sum(qkv, dout);
  };
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  qkv_pack_backward(dq.data(), dk.data(), dv.data(), dout.data(), n_rows, q_heads, kv_heads, d);
  EXPECT_LT(scaled_error(dq, finite_difference(q, loss)), 1e-9);
  EXPECT_LT(scaled_error(dk, finite_difference(k, loss)), 1e-9);
  EXPECT_LT(scaled_error(dv, finite_difference(v, loss)), 1e-9);
}

// The backward accumulates, as every backward kernel does: onto a gradient that is not zero.
TEST(KernelsQkvPack, BackwardAddsOntoTheGradients) {
  constexpr std::int64_t n_rows = 2, q_heads = 2, kv_heads = 1, d = 3;
  constexpr std::int64_t q_width = q_heads * d, kv_width = kv_heads * d;
  const auto dout = random_values(n_rows * (q_width + 2 * kv_width), 16);
  auto dq = random_values(n_rows * q_width, 17);
  auto dk = random_values(n_rows * kv_width, 18);
  auto dv = random_values(n_rows * kv_width, 19);
  const auto dq_start = dq, dk_start = dk, dv_start = dv;
  qkv_pack_backward(dq.data(), dk.data(), dv.data(), dout.data(), n_rows, q_heads, kv_heads, d);
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const double* row = dout.data() + r * (q_width + 2 * kv_width);
    for (std::int64_t i = 0; i < q_width; ++i)
      EXPECT_EQ(dq[r * q_width + i], dq_start[r * q_width + i] + row[i]);
    for (std::int64_t i = 0; i < kv_width; ++i) {
      EXPECT_EQ(dk[r * kv_width + i], dk_start[r * kv_width + i] + row[q_width + i]);
      EXPECT_EQ(dv[r * kv_width + i], dv_start[r * kv_width + i] + row[q_width + kv_width + i]);
    }
  }
}

}  // namespace
}  // namespace strata::gpu::host::kernels
