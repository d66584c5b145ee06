#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/data/token_file.h"

namespace strata::models {

// Examples in a token stream whose mask marks where each starts (kExampleStart, written for every
// line of a text file): how strata.data.packing false reads one example per window, and how
// fine-tuning examples longer than a window are cut.

// The offsets of the examples that start in `split`, in order; empty when it has no mask.
std::vector<std::size_t> example_starts(TokenView split);

// A split with each fine-tuning example (one that leaves some token out of the loss: a prompt
// and its completion, a conversation) longer than `window` tokens cut to its first `window`,
// as TRL's max_length cuts them; plain text runs on across windows whole. Holds the copy when
// something was cut.
struct CutExamples {
  TokenView tokens;                                       // the split itself when nothing was cut
  std::int64_t examples = 0;                              // fine-tuning examples in the split
  std::int64_t cut = 0;                                   // of which longer than `window`
  std::shared_ptr<const std::vector<std::uint32_t>> ids;  // the copy's owners
  std::shared_ptr<const std::vector<std::uint8_t>> mask;
};
CutExamples cut_long_examples(TokenView split, std::size_t window);

// Rows of `seq_len` inputs and targets, row r from example `examples[r]` of `split` (whose
// starts are `starts`): its first seq_len + 1 tokens, the rest of the row padding, which the
// loss leaves out (kIgnoredTarget) and no later position attends to.
void fill_example_rows(TokenView split, std::span<const std::size_t> starts,
                       std::span<const std::size_t> examples, int seq_len,
                       std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

}  // namespace strata::models
