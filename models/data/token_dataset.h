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

// Fills `inputs` and `targets` (each batch x seq_len) with windows of `split` chosen by a
// counter-based generator from (seed, step, micro_batch): the same arguments give the same
// batch on every run and every rank, so ranks can take disjoint parts of one global batch.
void sample_batch(std::span<const std::uint16_t> split, std::uint64_t seed, std::int64_t step,
                  std::int64_t micro_batch, int batch, int seq_len, std::span<std::int32_t> inputs,
                  std::span<std::int32_t> targets);

}  // namespace strata::models
