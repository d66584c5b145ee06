// Fused softmax + cross-entropy: forward against a scalar double reference, uniform logits give
// log(V), large logits stay finite, backward against central finite differences in double
// (measured scaled error 2.6e-10); a negative target masks its row out of the loss.

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/cross_entropy.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_tokens;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;

constexpr std::int64_t rows = 6;
constexpr std::int64_t vocab = 11;
constexpr std::int64_t vocab_padded = 16;

std::vector<double> reference_losses(const std::vector<double>& logits,
                                     const std::vector<std::int32_t>& targets) {
  std::vector<double> losses(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    for (std::int64_t c = 0; c < vocab; ++c)
      total += std::exp(logits[r * vocab_padded + c]);
    losses[r] = -std::log(std::exp(logits[r * vocab_padded + targets[r]]) / total);
  }
  return losses;
}

TEST(KernelsCrossEntropy, ForwardMatchesScalarReferenceAndIgnoresPadding) {
  auto logits = random_values(rows * vocab_padded, 1, -3.0, 3.0);
  // Huge values in the padded columns must not change anything.
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = vocab; c < vocab_padded; ++c)
      logits[r * vocab_padded + c] = 1e6;
  }
  const auto targets = random_tokens(rows, vocab, 2);
  const auto expected = reference_losses(logits, targets);
  double expected_mean = 0.0;
  for (double loss : expected)
    expected_mean += loss / rows;

  std::vector<double> losses(rows), lse(rows);
  double mean = 0.0;
  cross_entropy_forward(losses.data(), lse.data(), &mean, logits.data(), targets.data(), rows,
                        vocab, vocab_padded);
  EXPECT_LT(scaled_error(losses, expected), 1e-14);
  EXPECT_NEAR(mean, expected_mean, 1e-14);

  const auto logits_f = testing::to_float(logits);
  std::vector<float> losses_f(rows), lse_f(rows);
  float mean_f = 0.0F;
  cross_entropy_forward(losses_f.data(), lse_f.data(), &mean_f, logits_f.data(), targets.data(),
                        rows, vocab, vocab_padded);
  const double error = scaled_error(losses_f, expected);
  report_error("cross_entropy forward float", error);
  EXPECT_LT(error, 1e-6);
  EXPECT_NEAR(mean_f, expected_mean, 1e-6);
}

TEST(KernelsCrossEntropy, UniformLogitsGiveLogVocab) {
  // GPT-2's padded vocabulary: a uniform prediction over 50257 tokens costs log(50257) nats.
  constexpr std::int64_t big_vocab = 50257;
  constexpr std::int64_t big_padded = 50304;
  constexpr std::int64_t big_rows = 3;
  std::vector<float> logits(big_rows * big_padded, 2.5F);
  const std::vector<std::int32_t> targets = {0, 17, big_vocab - 1};
  std::vector<float> losses(big_rows), lse(big_rows);
  float mean = 0.0F;
  cross_entropy_forward(losses.data(), lse.data(), &mean, logits.data(), targets.data(), big_rows,
                        big_vocab, big_padded);
  const double expected = std::log(static_cast<double>(big_vocab));
  for (float loss : losses)
    EXPECT_NEAR(loss, expected, 1e-5);
  EXPECT_NEAR(mean, expected, 1e-5);
}

TEST(KernelsCrossEntropy, LargeLogitsStayFinite) {
  // exp(1000) overflows even a double; subtracting the row maximum keeps everything finite.
  std::vector<float> logits(vocab_padded, 0.0F);
  logits[0] = 1000.0F;
  logits[1] = 999.0F;
  const std::int32_t target = 1;
  float loss = 0.0F, lse = 0.0F, mean = 0.0F, dloss = 1.0F;
  cross_entropy_forward(&loss, &lse, &mean, logits.data(), &target, 1, vocab, vocab_padded);
  const double expected = std::log(1.0 + std::exp(1.0) + (vocab - 2) * std::exp(-999.0));
  EXPECT_NEAR(loss, expected, 1e-5);
  std::vector<float> dlogits(vocab_padded, 7.0F);
  cross_entropy_backward(dlogits.data(), logits.data(), &lse, &target, &dloss, 1, vocab,
                         vocab_padded);
  for (float value : dlogits)
    EXPECT_TRUE(std::isfinite(value));
  // lse ~ 1000.31 is stored in float, whose spacing there is 6e-5: the probability exp(x - lse)
  // inherits that relative error.
  EXPECT_NEAR(dlogits[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-4);
}

TEST(KernelsCrossEntropy, BackwardMatchesFiniteDifferencesScaledErrorBelow1e8) {
  auto logits = random_values(rows * vocab_padded, 3, -3.0, 3.0);
  const auto targets = random_tokens(rows, vocab, 4);
  std::vector<double> losses(rows), lse(rows);
  double mean = 0.0;
  const auto loss = [&] {
    cross_entropy_forward(losses.data(), lse.data(), &mean, logits.data(), targets.data(), rows,
                          vocab, vocab_padded);
    return mean;
  };
  loss();
  // The mean loss: each row's loss weighs 1 / rows. Garbage in dlogits: the backward overwrites.
  const std::vector<double> dlosses(rows, 1.0 / rows);
  std::vector<double> dlogits(logits.size(), 42.0);
  cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dlosses.data(),
                         rows, vocab, vocab_padded);
  const auto numeric = finite_difference(logits, loss);
  const double error = scaled_error(dlogits, numeric);
  report_error("cross_entropy backward dlogits vs finite differences", error);
  EXPECT_LT(error, 1e-8);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = vocab; c < vocab_padded; ++c)
      EXPECT_EQ(dlogits[r * vocab_padded + c], 0.0);
  }

  const auto logits_f = testing::to_float(logits), dlosses_f = testing::to_float(dlosses);
  std::vector<float> losses_f(rows), lse_f(rows), dlogits_f(logits.size());
  float mean_f = 0.0F;
  cross_entropy_forward(losses_f.data(), lse_f.data(), &mean_f, logits_f.data(), targets.data(),
                        rows, vocab, vocab_padded);
  cross_entropy_backward(dlogits_f.data(), logits_f.data(), lse_f.data(), targets.data(),
                         dlosses_f.data(), rows, vocab, vocab_padded);
  const double error_f = scaled_error(dlogits_f, dlogits);
  report_error("cross_entropy backward float vs double", error_f);
  EXPECT_LT(error_f, 1e-5);
}

// Rows 1 and 4 masked (-1 as the data path writes, -100 as Hugging Face does) and their logits NaN:
// never read, they add no loss and get a gradient row of zeros, the mean is over the four other
// rows, and those rows' losses and gradients are bit for bit the unmasked run's.
TEST(KernelsCrossEntropy, MaskedRowsAddNoLossAndGetNoGradient) {
  const auto logits = testing::to_float(random_values(rows * vocab_padded, 5, -3.0, 3.0));
  const auto targets = random_tokens(rows, vocab, 6);
  std::vector<float> losses(rows), lse(rows), dlogits(logits.size());
  float mean = 0.0F;
  const std::vector<float> dlosses(rows, 0.25F);
  cross_entropy_forward(losses.data(), lse.data(), &mean, logits.data(), targets.data(), rows,
                        vocab, vocab_padded);
  cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dlosses.data(),
                         rows, vocab, vocab_padded);

  auto masked_logits = logits;
  auto masked_targets = targets;
  for (const std::int64_t r : {1, 4}) {
    masked_targets[static_cast<std::size_t>(r)] = r == 1 ? -1 : -100;
    std::fill_n(masked_logits.begin() + r * vocab_padded, vocab_padded,
                std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<float> masked_losses(rows, 7.0F), masked_lse(rows, 7.0F);
  std::vector<float> masked_dlogits(logits.size(), 42.0F);
  float masked_mean = 0.0F;
  cross_entropy_forward(masked_losses.data(), masked_lse.data(), &masked_mean, masked_logits.data(),
                        masked_targets.data(), rows, vocab, vocab_padded);
  cross_entropy_backward(masked_dlogits.data(), masked_logits.data(), masked_lse.data(),
                         masked_targets.data(), dlosses.data(), rows, vocab, vocab_padded);

  double kept_sum = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool masked = r == 1 || r == 4;
    const auto at = static_cast<std::size_t>(r);
    EXPECT_EQ(masked_losses[at], masked ? 0.0F : losses[at]) << "row " << r;
    EXPECT_EQ(masked_lse[at], masked ? 0.0F : lse[at]) << "row " << r;
    if (!masked) kept_sum += losses[at];
    for (std::int64_t c = 0; c < vocab_padded; ++c) {
      const auto i = static_cast<std::size_t>(r * vocab_padded + c);
      EXPECT_EQ(masked_dlogits[i], masked ? 0.0F : dlogits[i]) << "row " << r << " column " << c;
    }
  }
  EXPECT_EQ(masked_mean, static_cast<float>(kept_sum / (rows - 2)));
}

// No row in the loss: no loss, a mean of 0 (not 0 / 0), and no gradient anywhere.
TEST(KernelsCrossEntropy, EveryRowMaskedGivesAZeroMeanAndNoGradient) {
  const auto logits = testing::to_float(random_values(rows * vocab_padded, 7, -3.0, 3.0));
  const std::vector<std::int32_t> targets(rows, -1);
  std::vector<float> losses(rows, 7.0F), lse(rows, 7.0F), dlogits(logits.size(), 42.0F);
  const std::vector<float> dlosses(rows, 1.0F);
  float mean = 7.0F;
  cross_entropy_forward(losses.data(), lse.data(), &mean, logits.data(), targets.data(), rows,
                        vocab, vocab_padded);
  cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dlosses.data(),
                         rows, vocab, vocab_padded);
  EXPECT_EQ(mean, 0.0F);
  for (float loss : losses)
    EXPECT_EQ(loss, 0.0F);
  for (float gradient : dlogits)
    EXPECT_EQ(gradient, 0.0F);
}

TEST(KernelsCrossEntropyDeathTest, TargetOutsideTheVocabularyStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> logits(vocab_padded, 0.0F);
  const std::int32_t target = vocab;  // a padded column is not a token
  float loss = 0.0F, lse = 0.0F, mean = 0.0F;
  EXPECT_DEATH(
      cross_entropy_forward(&loss, &lse, &mean, logits.data(), &target, 1, vocab, vocab_padded),
      "target");
}

}  // namespace
}  // namespace strata::gpu::host::kernels
