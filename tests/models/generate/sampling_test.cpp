// Choosing the next token: greedy, transformers' warpers against distributions worked by hand,
// and seeded draws.
#include "models/generate/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strata::models::generate {
namespace {

// softmax([2, 1, 0, -1]) = [0.6439, 0.2369, 0.0871, 0.0321].
const std::vector<float> kLogits{2.0f, 1.0f, 0.0f, -1.0f};

SamplingOptions sampling() {
  return SamplingOptions{
      .sample = true, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .min_p = 0.0};
}

void expect_probabilities(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 5e-5) << "token " << i;
}

TEST(Sampling, GreedyTakesTheFirstLargestLogit) {
  EXPECT_EQ(greedy_token(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  TokenSampler sampler(SamplingOptions{}, 7);
  EXPECT_EQ(sampler.next(kLogits), 0);
}

TEST(Sampling, EachWarperOnAHandWorkedDistribution) {
  SamplingOptions options = sampling();
  expect_probabilities(warped_probabilities(kLogits, options), {0.6439, 0.2369, 0.0871, 0.0321});
  options.temperature = 2.0;  // [1, 0.5, 0, -0.5]
  expect_probabilities(warped_probabilities(kLogits, options), {0.4551, 0.2760, 0.1674, 0.1015});
  options = sampling();
  options.top_k = 2;
  expect_probabilities(warped_probabilities(kLogits, options), {0.7311, 0.2689, 0.0, 0.0});
  // top-p 0.9: the least likely goes while the mass removed stays at most 0.1 (0.0321; with the
  // next, 0.1192, it would not).
  options = sampling();
  options.top_p = 0.9;
  expect_probabilities(warped_probabilities(kLogits, options), {0.6652, 0.2447, 0.0900, 0.0});
  options.top_p = 0.8;
  expect_probabilities(warped_probabilities(kLogits, options), {0.7311, 0.2689, 0.0, 0.0});
  // min-p 0.2: under 0.2 x 0.6439 = 0.1288 goes.
  options = sampling();
  options.min_p = 0.2;
  expect_probabilities(warped_probabilities(kLogits, options), {0.7311, 0.2689, 0.0, 0.0});
}

// Temperature comes first: at T 0.5 ([4, 2, 0, -2]: 0.8650, 0.1171, 0.0158, 0.0021) min-p 0.1
// keeps two tokens; on the raw logits it would keep three.
TEST(Sampling, TemperatureComesBeforeTheOthers) {
  SamplingOptions options = sampling();
  options.temperature = 0.5;
  options.min_p = 0.1;
  expect_probabilities(warped_probabilities(kLogits, options), {0.8808, 0.1192, 0.0, 0.0});
}

TEST(Sampling, WarpersKeepTiesAndAtLeastOneToken) {
  SamplingOptions options = sampling();
  options.top_k = 1;
  expect_probabilities(warped_probabilities(std::vector<float>{1.0f, 1.0f, 0.0f}, options),
                       {0.5, 0.5, 0.0});
  options = sampling();
  options.top_p = 1e-9;
  expect_probabilities(warped_probabilities(kLogits, options), {1.0, 0.0, 0.0, 0.0});
  options = sampling();
  options.min_p = 1.0;
  expect_probabilities(warped_probabilities(kLogits, options), {1.0, 0.0, 0.0, 0.0});
}

TEST(Sampling, TheSameSeedDrawsTheSameTokens) {
  SamplingOptions options = sampling();
  auto draws = [&](std::uint64_t seed) {
    TokenSampler sampler(options, seed);
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < 64; ++i)
      tokens.push_back(sampler.next(kLogits));
    return tokens;
  };
  EXPECT_EQ(draws(1234), draws(1234));
  EXPECT_NE(draws(1234), draws(1235));
}

// 200,000 draws land on each kept token at its probability, and never on a removed one.
TEST(Sampling, DrawsFollowTheWarpedDistribution) {
  SamplingOptions options = sampling();
  options.top_k = 3;
  TokenSampler sampler(options, 99);
  std::vector<int> counts(kLogits.size(), 0);
  constexpr int kDraws = 200'000;
  for (int i = 0; i < kDraws; ++i)
    ++counts[static_cast<std::size_t>(sampler.next(kLogits))];
  const std::vector<double> expected = warped_probabilities(kLogits, options);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // Five standard deviations of a binomial count.
    const double sigma = std::sqrt(kDraws * expected[i] * (1.0 - expected[i]));
    EXPECT_NEAR(counts[i], kDraws * expected[i], 5.0 * sigma + 1.0) << "token " << i;
  }
  EXPECT_EQ(counts[3], 0);
}

}  // namespace
}  // namespace strata::models::generate
