#include "models/generate/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/assert.h"

namespace strata::models::generate {
namespace {

constexpr double kRemoved = -std::numeric_limits<double>::infinity();

// Softmax over `scores` in fp64; a removed score (-inf) gets 0.
std::vector<double> softmax(const std::vector<double>& scores) {
  const double largest = *std::ranges::max_element(scores);
  std::vector<double> probabilities(scores.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    probabilities[i] = scores[i] == kRemoved ? 0.0 : std::exp(scores[i] - largest);
    sum += probabilities[i];
  }
  for (double& probability : probabilities)
    probability /= sum;
  return probabilities;
}

// Token indices from the least likely to the most, ties in index order.
std::vector<std::size_t> ascending(const std::vector<double>& scores) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::ranges::stable_sort(order,
                           [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  return order;
}

void keep_top_k(std::vector<double>& scores, std::int64_t top_k) {
  const auto k = static_cast<std::size_t>(std::min<std::int64_t>(top_k, std::ssize(scores)));
  std::vector<double> sorted = scores;
  std::ranges::nth_element(sorted, sorted.begin() + static_cast<std::ptrdiff_t>(k - 1),
                           std::greater<>());
  const double kth = sorted[k - 1];
  for (double& score : scores)
    if (score < kth) score = kRemoved;
}

void keep_top_p(std::vector<double>& scores, double top_p) {
  const std::vector<double> probabilities = softmax(scores);
  const std::vector<std::size_t> order = ascending(scores);
  double removed_mass = 0.0;
  for (std::size_t rank = 0; rank + 1 < order.size(); ++rank) {  // the most likely always stays
    removed_mass += probabilities[order[rank]];
    if (removed_mass > 1.0 - top_p) break;
    scores[order[rank]] = kRemoved;
  }
}

void keep_min_p(std::vector<double>& scores, double min_p) {
  const std::vector<double> probabilities = softmax(scores);
  // The most likely token is never under the threshold: min_p is at most 1.
  const double threshold = min_p * *std::ranges::max_element(probabilities);
  for (std::size_t i = 0; i < scores.size(); ++i)
    if (probabilities[i] < threshold) scores[i] = kRemoved;
}

}  // namespace

std::int32_t greedy_token(std::span<const float> logits) {
  STRATA_ASSERT(!logits.empty());
  return static_cast<std::int32_t>(std::ranges::max_element(logits) - logits.begin());
}

std::vector<double> warped_probabilities(std::span<const float> logits,
                                         const SamplingOptions& options) {
  STRATA_ASSERT(!logits.empty() && options.temperature > 0.0);
  STRATA_ASSERT(options.top_k >= 0 && options.top_p > 0.0 && options.top_p <= 1.0);
  STRATA_ASSERT(options.min_p >= 0.0 && options.min_p <= 1.0);
  std::vector<double> scores(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    scores[i] = static_cast<double>(logits[i]) / options.temperature;
  if (options.top_k > 0) keep_top_k(scores, options.top_k);
  if (options.top_p < 1.0) keep_top_p(scores, options.top_p);
  if (options.min_p > 0.0) keep_min_p(scores, options.min_p);
  return softmax(scores);
}

TokenSampler::TokenSampler(SamplingOptions options, std::uint64_t seed)
    : options_(options), generator_(seed) {}

double TokenSampler::uniform() {
  return static_cast<double>(generator_() >> 11) * 0x1.0p-53;
}

std::int32_t TokenSampler::next(std::span<const float> logits) {
  if (!options_.sample) return greedy_token(logits);
  const std::vector<double> probabilities = warped_probabilities(logits, options_);
  // The inverse of the distribution function, in token order; rounding may leave the sum a hair
  // under the draw, and then the last kept token is drawn.
  const double draw = uniform();
  double cumulative = 0.0;
  std::int32_t last_kept = 0;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] == 0.0) continue;
    last_kept = static_cast<std::int32_t>(i);
    cumulative += probabilities[i];
    if (draw < cumulative) return last_kept;
  }
  return last_kept;
}

}  // namespace strata::models::generate
