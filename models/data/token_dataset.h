#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace strata::models {

// A token stream split into a training part and a held-out validation tail.
//
// Sources: a text file (byte-tokenized), a pre-tokenized file in llm.c's format (a 256 x int32
// header with magic 20240520, version 1 and the token count, then uint16 tokens; extension
// .bin), or the built-in synthetic corpus.
class TokenDataset {
 public:
  // `validation_fraction` of the tokens, taken from the end, form the validation split.
  static TokenDataset from_tokens(std::vector<std::uint16_t> tokens, double validation_fraction);
  // Throws UserError naming the path when the file is missing, unreadable or malformed.
  static TokenDataset from_file(const std::filesystem::path& path, double validation_fraction);

  std::span<const std::uint16_t> train() const;
  std::span<const std::uint16_t> validation() const;
  int max_token() const { return max_token_; }
  std::string source;             // where the tokens came from, for the start-up summary
  double entropy_floor_nats = 0;  // known floor of the loss (synthetic corpus only), else 0

  // Refuses, with the fix, a dataset whose tokens do not fit `vocab` or whose splits are
  // shorter than one sequence of `seq_len` + 1 tokens.
  void check_fits(int seq_len, int vocab) const;

 private:
  std::vector<std::uint16_t> tokens_;
  std::size_t train_count_ = 0;
  int max_token_ = 0;
};

// A step's global batch is its sequences 0 .. train_batch_size - 1. Each sequence is a window of
// `split` chosen by a counter-based generator from (seed, step, sequence) alone, so the global
// batch is the same for every world size and every micro-batch split, on every run and rank, and
// a run resumed at a step trains on what it would have seen. Fills `inputs` and `targets` (each
// count x seq_len) with sequences first_sequence .. first_sequence + count - 1 of `step`.
void sample_sequences(std::span<const std::uint16_t> split, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_sequence, int count, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

// The first global sequence of micro-step `micro_step` (0-based within the step) on `rank` of
// `world_size` ranks, each micro-batch `micro_batch` sequences: every micro-step takes the next
// world_size x micro_batch sequences, rank by rank, so any split of the same global batch covers
// sequences 0 .. train_batch_size - 1 once. Example: 8 sequences as 2 ranks x micro-batch 2 x 2
// micro-steps: rank 1 takes 2-3, then 6-7.
std::int64_t first_sequence(std::int64_t micro_step, int rank, int world_size,
                            std::int64_t micro_batch);

}  // namespace strata::models
