// Token + position embedding: forward against a scalar reference, backward against central
// finite differences in double (measured scaled error 6e-11 for dwte, 1e-10 for dwpe).

#include <vector>

#include <gtest/gtest.h>

#include "gpu/host/kernels/embedding.h"
#include "tests/gpu/kernels_test_util.h"

namespace strata::gpu::host::kernels {
namespace {

using testing::finite_difference;
using testing::random_tokens;
using testing::random_values;
using testing::report_error;
using testing::scaled_error;
using testing::weighted_sum;

constexpr std::int64_t batch = 3;
constexpr std::int64_t seq_len = 5;
constexpr std::int64_t seq_len_max = 7;
constexpr std::int64_t channels = 11;
constexpr std::int64_t vocab = 13;

std::vector<double> reference_forward(const std::vector<std::int32_t>& tokens,
                                      const std::vector<double>& wte,
                                      const std::vector<double>& wpe) {
  std::vector<double> out(batch * seq_len * channels);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq_len; ++t) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t token = tokens[b * seq_len + t];
        out[(b * seq_len + t) * channels + c] = wte[token * channels + c] + wpe[t * channels + c];
      }
    }
  }
  return out;
}

TEST(KernelsEmbedding, ForwardMatchesScalarReferenceInFloatAndDouble) {
  const auto tokens = random_tokens(batch * seq_len, vocab, 1);
  const auto wte = random_values(vocab * channels, 2);
  const auto wpe = random_values(seq_len_max * channels, 3);
  const auto expected = reference_forward(tokens, wte, wpe);

  std::vector<double> out(expected.size());
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len, channels,
                    vocab);
  EXPECT_EQ(scaled_error(out, expected), 0.0);

  const auto wte_f = testing::to_float(wte);
  const auto wpe_f = testing::to_float(wpe);
  std::vector<float> out_f(expected.size());
  embedding_forward(out_f.data(), tokens.data(), wte_f.data(), wpe_f.data(), batch, seq_len,
                    channels, vocab);
  const double error = scaled_error(out_f, expected);
  report_error("embedding forward float", error);
  EXPECT_LT(error, 1e-6);
}

TEST(KernelsEmbedding, BackwardMatchesFiniteDifferencesScaledErrorBelow1e9) {
  // Repeated tokens on purpose: a wte row used twice must collect both gradients.
  auto tokens = random_tokens(batch * seq_len, 4, 4);
  auto wte = random_values(vocab * channels, 5);
  auto wpe = random_values(seq_len_max * channels, 6);
  const auto weights = random_values(batch * seq_len * channels, 7);
  std::vector<double> out(weights.size());
  const auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len, channels,
                      vocab);
    return weighted_sum(out, weights);
  };
  std::vector<double> dwte(wte.size(), 0.0);
  std::vector<double> dwpe(wpe.size(), 0.0);
  embedding_backward(dwte.data(), dwpe.data(), weights.data(), tokens.data(), batch, seq_len,
                     channels, vocab);
  const double error_wte = scaled_error(dwte, finite_difference(wte, loss));
  const double error_wpe = scaled_error(dwpe, finite_difference(wpe, loss));
  report_error("embedding backward dwte vs finite differences", error_wte);
  report_error("embedding backward dwpe vs finite differences", error_wpe);
  EXPECT_LT(error_wte, 1e-9);
  EXPECT_LT(error_wpe, 1e-9);
}

TEST(KernelsEmbedding, BackwardAccumulatesIntoExistingGradients) {
  const auto tokens = random_tokens(batch * seq_len, vocab, 8);
  const auto dout = testing::to_float(random_values(batch * seq_len * channels, 9));
  std::vector<float> once_wte(vocab * channels, 0.0F);
  std::vector<float> once_wpe(seq_len_max * channels, 0.0F);
  embedding_backward(once_wte.data(), once_wpe.data(), dout.data(), tokens.data(), batch, seq_len,
                     channels, vocab);
  std::vector<float> twice_wte = once_wte;
  std::vector<float> twice_wpe = once_wpe;
  embedding_backward(twice_wte.data(), twice_wpe.data(), dout.data(), tokens.data(), batch, seq_len,
                     channels, vocab);
  // Sums of three batch rows: adding them onto themselves is 2x up to float rounding.
  for (std::size_t i = 0; i < once_wte.size(); ++i) {
    EXPECT_NEAR(twice_wte[i], 2.0F * once_wte[i], 1e-5);
  }
  for (std::size_t i = 0; i < once_wpe.size(); ++i) {
    EXPECT_NEAR(twice_wpe[i], 2.0F * once_wpe[i], 1e-5);
  }
  // Rows of wpe past seq_len are never touched.
  for (std::int64_t i = seq_len * channels; i < seq_len_max * channels; ++i) {
    EXPECT_EQ(twice_wpe[i], 0.0F);
  }
}

TEST(KernelsEmbeddingDeathTest, TokenOutsideTheVocabularyStops) {
  // The assert fires on a oneTBB worker: re-run the binary rather than fork a threaded process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<std::int32_t> tokens(batch * seq_len, 0);
  tokens[4] = vocab;
  std::vector<float> wte(vocab * channels, 0.0F);
  std::vector<float> wpe(seq_len_max * channels, 0.0F);
  std::vector<float> out(batch * seq_len * channels);
  EXPECT_DEATH(embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len,
                                 channels, vocab),
               "token");
}

}  // namespace
}  // namespace strata::gpu::host::kernels
