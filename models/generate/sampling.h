#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace strata::models::generate {

// How the next token is chosen from a row of logits. Greedy takes the first largest logit (as
// torch.argmax does). Sampling applies transformers' logits warpers in its order (temperature,
// then top-k, then top-p, then min-p), each keeping at least one token, and draws from what is
// left.
struct SamplingOptions {
  bool sample = false;       // false: greedy, and the values below are not used
  double temperature = 1.0;  // > 0
  std::int64_t top_k = 0;    // 0: off
  double top_p = 1.0;        // in (0, 1]; 1: off
  double min_p = 0.0;        // in [0, 1]; 0: off
};

// The index of the first largest logit.
std::int32_t greedy_token(std::span<const float> logits);

// Each token's probability after the warpers, in fp64: 0 for a token they removed. The kept
// tokens' probabilities sum to 1.
// - temperature: the logits over T;
// - top-k: tokens below the k-th largest are removed (a tie with it is kept);
// - top-p: from the least likely up, tokens are removed while the probability mass removed stays
//   at most 1 - p (the most likely token always stays);
// - min-p: tokens less likely than min_p x the most likely token's probability are removed.
std::vector<double> warped_probabilities(std::span<const float> logits,
                                         const SamplingOptions& options);

// Chooses tokens by `options`, drawing from a generator seeded with `seed`: the same seed and
// logits give the same tokens on every machine (the draws are 53-bit fractions of
// std::mt19937_64's output, whose sequence the C++ standard fixes).
class TokenSampler {
 public:
  TokenSampler(SamplingOptions options, std::uint64_t seed);

  std::int32_t next(std::span<const float> logits);
  const SamplingOptions& options() const { return options_; }

 private:
  double uniform();  // in [0, 1)

  SamplingOptions options_;
  std::mt19937_64 generator_;
};

}  // namespace strata::models::generate
