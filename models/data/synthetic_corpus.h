#pragma once

#include <cstdint>
#include <string>

namespace strata::models {

// The shape of the built-in demo corpus: text drawn from a first-order Markov chain over
// made-up words, so that a byte-level model has real structure to learn (spelling, then which
// word follows which) and a known floor under its loss.
struct CorpusSpec {
  std::uint64_t seed = 1234;
  int word_count = 384;         // distinct words
  int successors_per_word = 6;  // each word is followed by one of this many, Zipf-weighted
  std::int64_t size_bytes = 2 << 20;
};

struct SyntheticCorpus {
  std::string text;
  // The entropy rate of the chain per byte, in nats: the lowest mean cross-entropy per token any
  // byte-level model can reach on an unbounded sample. A loss curve is read against it.
  double entropy_floor_nats_per_byte = 0;
};

// Deterministic: the same spec gives the same bytes on every machine.
SyntheticCorpus generate_corpus(const CorpusSpec& spec);

}  // namespace strata::models
