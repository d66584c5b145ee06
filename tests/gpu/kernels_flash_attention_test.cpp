// The fused causal attention (flash_attention.h) against the materialised kernel (attention.h),
// which is its reference: forward out and lse, backward dq, dk and dv, with as many kv heads as
// query heads and with grouped-query heads (the reference reads k and v repeated over the query
// heads, as transformers' repeat_kv does, and its gradient is summed back over the repeats). Also:
// central finite differences in double, accumulation onto non-zero gradients, and the same bits for
// 1, 2 and 3 oneTBB threads.

#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/attention.h"
#include "gpu/host/kernels/flash_attention.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

struct Shape {
  std::int64_t batch;
  std::int64_t seq_len;
  std::int64_t heads;
  std::int64_t kv_heads;
  std::int64_t head_dim;

  std::int64_t rows() const { return batch * seq_len; }
  std::int64_t group() const { return heads / kv_heads; }
  std::int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t qkv_size() const { return rows() * qkv_width(); }
  std::int64_t out_size() const { return rows() * heads * head_dim; }
  std::int64_t lse_size() const { return batch * heads * seq_len; }
  std::string name() const {
    std::ostringstream name;
    name << "B" << batch << " T" << seq_len << " H" << heads << "/" << kv_heads << " D" << head_dim;
    return name.str();
  }
};

// Columns [begin, end) of every row of a (rows, width) tensor, as double.
template <typename Real>
std::vector<double> columns(const std::vector<Real>& tensor, std::int64_t rows, std::int64_t width,
                            std::int64_t begin, std::int64_t end) {
  std::vector<double> slice;
  slice.reserve(static_cast<std::size_t>(rows * (end - begin)));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = begin; c < end; ++c)
      slice.push_back(static_cast<double>(tensor[r * width + c]));
  }
  return slice;
}

// The q, k and v parts of a fused (rows, qkv_width) tensor.
enum class Part { q, k, v };

template <typename Real>
std::vector<double> part(const std::vector<Real>& fused, const Shape& shape, Part which) {
  const std::int64_t q_width = shape.heads * shape.head_dim;
  const std::int64_t kv_width = shape.kv_heads * shape.head_dim;
  const std::int64_t begin = which == Part::q ? 0 : which == Part::k ? q_width : q_width + kv_width;
  const std::int64_t end = which == Part::q ? q_width : begin + kv_width;
  return columns(fused, shape.rows(), shape.qkv_width(), begin, end);
}

// The materialised kernel's layout: per row q, k and v for every query head (3 x heads x D), k
// and v repeated from the fused row's kv heads (transformers' repeat_kv: head h reads kv head
// h / group).
std::vector<double> repeated_qkv(const std::vector<double>& fused, const Shape& shape) {
  const std::int64_t d = shape.head_dim, width = shape.heads * d, kv_width = shape.kv_heads * d;
  std::vector<double> repeated(static_cast<std::size_t>(shape.rows() * 3 * width));
  for (std::int64_t r = 0; r < shape.rows(); ++r) {
    const double* in = fused.data() + r * shape.qkv_width();
    double* out = repeated.data() + r * 3 * width;
    std::copy_n(in, width, out);
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const std::int64_t kv_head = h / shape.group();
      std::copy_n(in + width + kv_head * d, d, out + width + h * d);
      std::copy_n(in + width + kv_width + kv_head * d, d, out + 2 * width + h * d);
    }
  }
  return repeated;
}

// The transpose of repeated_qkv: each kv head's gradient summed over the query heads it was
// repeated into, in head order, written to the fused layout.
std::vector<double> summed_back(const std::vector<double>& drepeated, const Shape& shape) {
  const std::int64_t d = shape.head_dim, width = shape.heads * d, kv_width = shape.kv_heads * d;
  std::vector<double> fused(static_cast<std::size_t>(shape.qkv_size()), 0.0);
  for (std::int64_t r = 0; r < shape.rows(); ++r) {
    const double* in = drepeated.data() + r * 3 * width;
    double* out = fused.data() + r * shape.qkv_width();
    std::copy_n(in, width, out);
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const std::int64_t kv_head = h / shape.group();
      for (std::int64_t e = 0; e < d; ++e) {
        out[width + kv_head * d + e] += in[width + h * d + e];
        out[width + kv_width + kv_head * d + e] += in[2 * width + h * d + e];
      }
    }
  }
  return fused;
}

// The materialised kernel in double on the repeated layout: out, and the gradient summed back to
// the fused layout (from zero).
struct Reference {
  std::vector<double> out;
  std::vector<double> dqkv;
};

Reference reference(const std::vector<double>& qkv, const std::vector<double>& dout,
                    const Shape& shape) {
  const std::int64_t channels = shape.heads * shape.head_dim;
  const auto repeated = repeated_qkv(qkv, shape);
  Reference result{std::vector<double>(static_cast<std::size_t>(shape.out_size())), {}};
  std::vector<double> att(
      static_cast<std::size_t>(shape.batch * shape.heads * shape.seq_len * shape.seq_len));
  attention_forward(result.out.data(), att.data(), repeated.data(), shape.batch, shape.seq_len,
                    channels, shape.heads);
  std::vector<double> drepeated(repeated.size(), 0.0);
  attention_backward(drepeated.data(), dout.data(), repeated.data(), att.data(), shape.batch,
                     shape.seq_len, channels, shape.heads);
  result.dqkv = summed_back(drepeated, shape);
  return result;
}

// lse[b, h, t] from the scores, in double, written independently of both kernels.
std::vector<double> reference_lse(const std::vector<double>& qkv, const Shape& shape) {
  std::vector<double> lse(static_cast<std::size_t>(shape.lse_size()));
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const std::int64_t k_column = (shape.heads + h / shape.group()) * shape.head_dim;
      for (std::int64_t t = 0; t < shape.seq_len; ++t) {
        std::vector<double> scores(static_cast<std::size_t>(t + 1));
        const double* q =
            qkv.data() + (b * shape.seq_len + t) * shape.qkv_width() + h * shape.head_dim;
        for (std::int64_t t2 = 0; t2 <= t; ++t2) {
          const double* k = qkv.data() + (b * shape.seq_len + t2) * shape.qkv_width() + k_column;
          double dot = 0.0;
          for (std::int64_t d = 0; d < shape.head_dim; ++d)
            dot += q[d] * k[d];
          scores[static_cast<std::size_t>(t2)] = scale * dot;
        }
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (const double score : scores)
          sum += std::exp(score - max);
        lse[static_cast<std::size_t>((b * shape.heads + h) * shape.seq_len + t)] =
            max + std::log(sum);
      }
    }
  }
  return lse;
}

// The fused kernel's outputs for one Real type: out and lse start as NaN (every element must be
// written), dqkv from zero.
template <typename Real>
struct Fused {
  std::vector<Real> out;
  std::vector<Real> lse;
  std::vector<Real> dqkv;
};

template <typename Real>
Fused<Real> run_fused(const std::vector<double>& qkv_values, const std::vector<double>& dout_values,
                      const Shape& shape) {
  const std::vector<Real> qkv(qkv_values.begin(), qkv_values.end());
  const std::vector<Real> dout(dout_values.begin(), dout_values.end());
  const Real nan = std::numeric_limits<Real>::quiet_NaN();
  Fused<Real> result{std::vector<Real>(static_cast<std::size_t>(shape.out_size()), nan),
                     std::vector<Real>(static_cast<std::size_t>(shape.lse_size()), nan),
                     std::vector<Real>(qkv.size(), Real{0})};
  flash_attention_forward(result.out.data(), result.lse.data(), qkv.data(), shape.batch,
                          shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim);
  flash_attention_backward(result.dqkv.data(), dout.data(), qkv.data(), result.out.data(),
                           result.lse.data(), shape.batch, shape.seq_len, shape.heads,
                           shape.kv_heads, shape.head_dim);
  return result;
}

// Inputs drawn in double and rounded to float, so both instantiations see the same values.
std::vector<double> float_values(std::size_t n, std::uint64_t seed, double low, double high) {
  return testing::to_double(testing::to_float(random_values(n, seed, low, high)));
}

// Scaled errors of the five outputs against the reference, each printed with the shape.
template <typename Real>
void expect_matches(const Fused<Real>& fused, const Reference& expected,
                    const std::vector<double>& lse, const Shape& shape, const std::string& type,
                    double tolerance) {
  const auto check = [&](const std::string& what, double error) {
    report_error("flash attention " + type + " " + what + " vs materialised, " + shape.name(),
                 error);
    EXPECT_LT(error, tolerance) << what << " " << shape.name();
  };
  check("out", scaled_error(fused.out, expected.out));
  check("lse", scaled_error(fused.lse, lse));
  for (const auto& [which, what] : {std::pair{Part::q, "dq"}, {Part::k, "dk"}, {Part::v, "dv"}}) {
    check(what, scaled_error(part(fused.dqkv, shape, which), part(expected.dqkv, shape, which)));
  }
}

// Every output is a sum of at most seq_len * group terms (dk and dv over the queries of every head
// in the group, out over the keys) of which each holds a dot product of head_dim terms. Summed in
// another order than the reference's, such a result may differ by a couple of units of roundoff
// (u = 2^-24 in fp32, 2^-53 in double) per term of that reduction at worst; the measured errors
// sit two to three orders below that bound (docs/kernels.md).
double tolerance_for(const Shape& shape, double unit_roundoff) {
  return 2.0 * unit_roundoff * static_cast<double>(shape.seq_len * shape.group() + shape.head_dim);
}

void check_against_reference(const Shape& shape, std::uint64_t seed) {
  const auto qkv = float_values(static_cast<std::size_t>(shape.qkv_size()), seed, -2.0, 2.0);
  const auto dout = float_values(static_cast<std::size_t>(shape.out_size()), seed + 1, -1.0, 1.0);
  const Reference expected = reference(qkv, dout, shape);
  const auto lse = reference_lse(qkv, shape);
  expect_matches(run_fused<double>(qkv, dout, shape), expected, lse, shape, "double",
                 tolerance_for(shape, 0x1p-53));
  expect_matches(run_fused<float>(qkv, dout, shape), expected, lse, shape, "float",
                 tolerance_for(shape, 0x1p-24));
}

TEST(KernelsFlashAttention, MatchesMaterialisedWithOneKvHeadPerQueryHead) {
  check_against_reference(Shape{2, 63, 4, 4, 64}, 20);   // one ragged block
  check_against_reference(Shape{1, 65, 2, 2, 128}, 30);  // a full block and one row
  check_against_reference(Shape{2, 130, 3, 3, 24}, 40);  // three blocks, the last of two rows
}

TEST(KernelsFlashAttention, MatchesMaterialisedWithGroupedQueryHeads) {
  check_against_reference(Shape{2, 65, 8, 2, 64}, 50);
  check_against_reference(Shape{1, 130, 8, 2, 128}, 60);
  check_against_reference(Shape{1, 63, 4, 1, 24}, 70);  // every query head on one kv head
}

// The 1.3B configuration's heads: seq_len 1024 (16 blocks), head_dim 128.
TEST(KernelsFlashAttention, MatchesMaterialisedAtTheLargeModelsHeadShape) {
  check_against_reference(Shape{1, 1024, 4, 2, 128}, 90);
}

// One position attends to itself only: out = v, lse = its score, dv += the dout of every query
// head reading it, and dq = dk = 0, since the single probability is 1 whatever the score. (The
// materialised comparison cannot measure that zero relative to itself, hence this test.) In
// fp32, dq and dk keep the rounding of dp - delta, dout . v computed twice: about u |dout . v|.
TEST(KernelsFlashAttention, SinglePositionCopiesValuesAndHasNoScoreGradient) {
  const Shape shape{3, 1, 6, 3, 64};
  const auto qkv = float_values(static_cast<std::size_t>(shape.qkv_size()), 80, -2.0, 2.0);
  const auto dout = float_values(static_cast<std::size_t>(shape.out_size()), 81, -1.0, 1.0);
  const Fused<float> fused = run_fused<float>(qkv, dout, shape);
  const auto lse = reference_lse(qkv, shape);
  const Reference expected = reference(qkv, dout, shape);
  EXPECT_EQ(scaled_error(fused.out, expected.out), 0.0);  // p = 1: v copied
  EXPECT_LT(scaled_error(fused.lse, lse), 2e-7);
  const auto dv = part(fused.dqkv, shape, Part::v);
  // dout of the two query heads on a kv head, summed in fp32: one rounding, at most u.
  EXPECT_LE(scaled_error(dv, part(expected.dqkv, shape, Part::v)), 0x1p-24);
  for (const Part which : {Part::q, Part::k}) {
    for (const double gradient : part(fused.dqkv, shape, which))
      EXPECT_LE(std::abs(gradient), 1e-6);
  }
}

void check_finite_differences(const Shape& shape, std::uint64_t seed) {
  auto qkv = random_values(static_cast<std::size_t>(shape.qkv_size()), seed, -2.0, 2.0);
  const auto weights = random_values(static_cast<std::size_t>(shape.out_size()), seed + 1);
  std::vector<double> out(weights.size());
  std::vector<double> lse(static_cast<std::size_t>(shape.lse_size()));
  const auto loss = [&] {
    flash_attention_forward(out.data(), lse.data(), qkv.data(), shape.batch, shape.seq_len,
                            shape.heads, shape.kv_heads, shape.head_dim);
    return weighted_sum(out, weights);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  flash_attention_backward(dqkv.data(), weights.data(), qkv.data(), out.data(), lse.data(),
                           shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim);
  const double error = scaled_error(dqkv, finite_difference(qkv, loss));
  report_error("flash attention backward dqkv vs finite differences, " + shape.name(), error);
  EXPECT_LT(error, 1e-8) << shape.name();
}

TEST(KernelsFlashAttention, BackwardMatchesFiniteDifferences) {
  check_finite_differences(Shape{2, 5, 4, 2, 3}, 100);
  check_finite_differences(Shape{1, 67, 2, 1, 2}, 110);  // a key block seen by two query blocks
}

TEST(KernelsFlashAttention, BackwardAddsOntoExistingGradients) {
  const Shape shape{2, 70, 4, 2, 8};
  const auto qkv = random_values(static_cast<std::size_t>(shape.qkv_size()), 120, -2.0, 2.0);
  const auto dout = random_values(static_cast<std::size_t>(shape.out_size()), 121);
  const Fused<double> fresh = run_fused<double>(qkv, dout, shape);
  auto accumulated = random_values(qkv.size(), 122);
  std::vector<double> expected = accumulated;
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] += fresh.dqkv[i];
  flash_attention_backward(accumulated.data(), dout.data(), qkv.data(), fresh.out.data(),
                           fresh.lse.data(), shape.batch, shape.seq_len, shape.heads,
                           shape.kv_heads, shape.head_dim);
  EXPECT_LT(scaled_error(accumulated, expected), 1e-14);
}

// Forward and backward (onto non-zero gradients) in fp32 with oneTBB limited to `threads`.
std::vector<std::vector<float>> run_with_threads(int threads, const Shape& shape) {
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  static_cast<std::size_t>(threads));
  const auto qkv =
      testing::to_float(random_values(static_cast<std::size_t>(shape.qkv_size()), 130));
  const auto dout =
      testing::to_float(random_values(static_cast<std::size_t>(shape.out_size()), 131));
  std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(shape.lse_size()));
  auto dqkv = testing::to_float(random_values(qkv.size(), 132));
  flash_attention_forward(out.data(), lse.data(), qkv.data(), shape.batch, shape.seq_len,
                          shape.heads, shape.kv_heads, shape.head_dim);
  flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                           shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim);
  return {out, lse, dqkv};
}

TEST(KernelsFlashAttention, ThreadCountsGiveTheSameBits) {
  const Shape shape{2, 130, 8, 2, 24};  // 48 forward tasks, 4 backward tasks
  const auto single = run_with_threads(1, shape);
  for (const int threads : {2, 3}) {
    const auto several = run_with_threads(threads, shape);
    for (std::size_t i = 0; i < single.size(); ++i) {
      ASSERT_EQ(several[i].size(), single[i].size());
      EXPECT_EQ(std::memcmp(several[i].data(), single[i].data(), single[i].size() * sizeof(float)),
                0)
          << "output " << i << " differs with " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace strata::gpu::host::kernels
