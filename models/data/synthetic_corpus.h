#pragma once

#include <cstdint>
#include <string>

namespace strata::models {

// The shape of the built-in demo corpus: text drawn from a first-order Markov chain over
// made-up words, so that a byte-level model has real structure to learn (spelling, then which
// word follows which) and a known floor under its loss.
//
// The defaults are sized for the demo to visibly learn within a few minutes on two CPU cores: a
// byte-level model first sits at the letters' unigram level (about 2.9 nats), then learns the
// words' spellings and which word follows which. 48 words of 2-8 letters are spelt within a few
// hundred steps of 512 tokens; with 384 words (2,300 letter transitions to learn) the loss stays
// on the unigram plateau for as long as the demo runs.
struct CorpusSpec {
  std::uint64_t seed = 1234;
  int word_count = 48;          // distinct words
  int successors_per_word = 4;  // each word is followed by one of this many, Zipf-weighted
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
