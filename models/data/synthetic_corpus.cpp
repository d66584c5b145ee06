#include "models/data/synthetic_corpus.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "base/assert.h"
#include "base/by_index.h"

namespace strata::models {
namespace {

// splitmix64: tiny, seedable, and identical on every platform (std:: distributions are not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int bound) { return static_cast<int>(next() % static_cast<std::uint64_t>(bound)); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }
};

base::ByIndex<std::string> make_words(Rng& rng, int count) {
  static constexpr char kLetters[] = "etaoinshrdlucmfwygpb";
  std::set<std::string> seen;
  base::ByIndex<std::string> words;
  while (words.size() < count) {
    int length = 2 + rng.below(7);
    std::string word;
    for (int i = 0; i < length; ++i)
      word += kLetters[rng.below(20)];
    if (seen.insert(word).second) words.push_back(word);
  }
  return words;
}

struct Chain {
  base::ByIndex<std::vector<int>> successors;  // by word id
  std::vector<double> weights;  // the same Zipf weights for every word's successor list
};

Chain make_chain(Rng& rng, int word_count, int successor_count) {
  Chain chain;
  double total = 0;
  for (int k = 0; k < successor_count; ++k) {
    chain.weights.push_back(1.0 / std::pow(k + 1.0, 1.2));
    total += chain.weights.back();
  }
  for (double& weight : chain.weights)
    weight /= total;
  for (int word = 0; word < word_count; ++word) {
    // The first successor is the next word in a cycle, so every word is reachable from every
    // other: the chain is irreducible and its stationary distribution unique.
    base::ByIndex<int> next(1, (word + 1) % word_count);
    while (next.size() < successor_count) {
      int candidate = rng.below(word_count);
      if (std::find(next.begin(), next.end(), candidate) == next.end()) next.push_back(candidate);
    }
    std::swap(next[0], next[rng.below(successor_count)]);
    chain.successors.push_back(std::move(next.items()));
  }
  return chain;
}

// Cesaro-averaged power iteration: converges even if the chain is periodic.
base::ByIndex<double> stationary_distribution(const Chain& chain) {
  const int n = chain.successors.size();
  base::ByIndex<double> current(n, 1.0 / static_cast<double>(n)), next(n), average(n, 0.0);
  constexpr int kIterations = 2000;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int word = 0; word < n; ++word) {
      for (std::size_t k = 0; k < chain.weights.size(); ++k) {
        next[chain.successors[word][k]] += current[word] * chain.weights[k];
      }
    }
    std::swap(current, next);
    for (int word = 0; word < n; ++word)
      average[word] += current[word] / kIterations;
  }
  return average;
}

}  // namespace

SyntheticCorpus generate_corpus(const CorpusSpec& spec) {
  STRATA_ASSERT(spec.word_count >= spec.successors_per_word);
  STRATA_ASSERT(spec.successors_per_word >= 1);
  Rng rng{spec.seed};
  base::ByIndex<std::string> words = make_words(rng, spec.word_count);
  Chain chain = make_chain(rng, spec.word_count, spec.successors_per_word);

  // Each word is written followed by one space, so the byte stream decodes uniquely back into
  // words; the entropy rate per byte is then the rate per word over the mean bytes per word.
  base::ByIndex<double> pi = stationary_distribution(chain);
  double entropy_per_word = 0;
  for (double weight : chain.weights)
    entropy_per_word -= weight * std::log(weight);
  double bytes_per_word = 0;
  for (int word = 0; word < words.size(); ++word) {
    bytes_per_word += pi[word] * static_cast<double>(words[word].size() + 1);
  }

  SyntheticCorpus corpus;
  corpus.entropy_floor_nats_per_byte = entropy_per_word / bytes_per_word;
  corpus.text.reserve(static_cast<std::size_t>(spec.size_bytes) + 16);
  int word = rng.below(spec.word_count);
  while (static_cast<std::int64_t>(corpus.text.size()) < spec.size_bytes) {
    corpus.text += words[word];
    corpus.text += ' ';
    double draw = rng.unit();
    std::size_t k = 0;
    while (k + 1 < chain.weights.size() && draw >= chain.weights[k])
      draw -= chain.weights[k++];
    word = chain.successors[word][k];
  }
  corpus.text.resize(static_cast<std::size_t>(spec.size_bytes));
  return corpus;
}

}  // namespace strata::models
