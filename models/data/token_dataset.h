#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/data/examples.h"
#include "models/data/token_file.h"

namespace strata::models {

// A token stream split into a training part and a validation part: the validation file when one
// is given, else a held-out tail of the training file.
//
// Sources: any format of models/data/token_file.h (text, llm.c .bin, raw uint16/uint32 arrays,
// Megatron-LM indexed datasets), or tokens in memory (the built-in synthetic corpus). Files are
// mapped, not read into memory.
class TokenDataset {
 public:
  // `validation_fraction` of the tokens, taken from the end, form the validation split.
  static TokenDataset from_tokens(std::vector<std::uint16_t> tokens, double validation_fraction);
  // `dtype` "" (the file says), "uint16" or "uint32" (a raw array); a non-empty
  // `validation_path` is the validation split, whole, and `validation_fraction` is unused; text
  // files become ids as `text` says. Throws UserError naming the path when a file is missing,
  // unreadable or malformed.
  static TokenDataset from_file(const std::filesystem::path& path, double validation_fraction,
                                const std::string& dtype = "",
                                const std::filesystem::path& validation_path = "",
                                const TextTokenizing& text = {});

  TokenView train() const { return train_; }
  TokenView validation() const { return validation_; }
  // Shapes the splits for windows of seq_len + 1 tokens (models/data/examples.h): fine-tuning
  // examples longer are cut, and with `packing` false each split's examples are found, one per
  // window. Refuses, with the fix, packing false for data whose examples are not marked (a token
  // file without its mask).
  void shape_examples(int seq_len, bool packing);
  bool packed() const { return train_starts_.empty(); }
  std::span<const std::size_t> train_starts() const { return train_starts_; }
  std::span<const std::size_t> validation_starts() const { return validation_starts_; }
  std::int64_t examples = 0;      // fine-tuning examples in the training split
  std::int64_t examples_cut = 0;  // of which longer than a window, cut

  std::string source;             // where the tokens came from, for the start-up summary
  double entropy_floor_nats = 0;  // known floor of the loss (synthetic corpus only), else 0
  bool byte_level = false;        // one token per byte (text, the synthetic corpus)

  // Refuses, with the fix, a dataset holding a token at or past `vocab` (naming the file and the
  // token's position in it) or whose splits are shorter than one sequence of `seq_len` + 1 tokens.
  void check_fits(int seq_len, int vocab) const;
  // Refuses, with the fix, a training split shorter than one sequential micro-batch (batch x
  // seq_len + 1 tokens).
  void check_sequential_fits(int batch, int seq_len) const;
  // Refuses, with the fix, data whose ids do not mean what the model's ids mean: each file by
  // check_tokenizer below, a training and a validation file of which only one is text, and
  // byte-level tokens (text, the built-in corpus) past a vocabulary of fewer than 256 ids. The
  // built-in corpus is bytes for any model: it measures speed, not what a model knows.
  void check_tokenizer(std::int64_t vocab, const std::filesystem::path& hf_config) const;

 private:
  // Each split's file (shared when the validation split is the training file's tail).
  std::shared_ptr<const TokenFile> train_file_;
  std::shared_ptr<const TokenFile> validation_file_;
  TokenView train_;
  TokenView validation_;
  // The splits with long examples cut (their copies' owners, when any was).
  CutExamples train_cut_;
  CutExamples validation_cut_;
  std::vector<std::size_t> train_starts_;  // with packing off: where each example starts
  std::vector<std::size_t> validation_starts_;
};

// A step's global batch is its sequences 0 .. train_batch_size - 1. Each sequence is a window of
// `split` chosen by a counter-based generator from (seed, step, sequence) alone, so the global
// batch is the same for every world size and every micro-batch split, on every run and rank, and
// a run resumed at a step trains on what it would have seen. Fills `inputs` and `targets` (each
// count x seq_len) with sequences first_sequence .. first_sequence + count - 1 of `step`.
void sample_sequences(TokenView split, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_sequence, int count, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

// With strata.data.packing false: sample_sequences's rows, each one example of `split` (whose
// starts are `starts`) chosen by the same generator, padded (models/data/examples.h).
void sample_examples(TokenView split, std::span<const std::size_t> starts, std::uint64_t seed,
                     std::int64_t step, std::int64_t first_sequence, int count, int seq_len,
                     std::span<std::int32_t> inputs, std::span<std::int32_t> targets);
// And sequential_batch's: micro-batch i takes examples i x batch onwards, in order, wrapping.
void sequential_examples(TokenView split, std::span<const std::size_t> starts,
                         std::int64_t micro_batch_index, int batch, int seq_len,
                         std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

// "order": "sequential", as llm.c's loader walks a file: micro-batch `micro_batch_index` of the
// run (counted from 0 over every step, accumulation step and rank) reads batch x seq_len + 1
// tokens at offset (micro_batch_index mod n) x batch x seq_len, where n micro-batches fit the
// split; its rows are consecutive windows (inputs the first batch x seq_len tokens, targets the
// same shifted by one). Wraps to the split's start when it runs out.
void sequential_batch(TokenView split, std::int64_t micro_batch_index, int batch, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

// Windows `first` .. first + count - 1 of `split` as `strata eval` walks it: window j has inputs
// at tokens [j seq_len, (j + 1) seq_len) and targets one token later. window_count() of them fit.
std::int64_t window_count(TokenView split, int seq_len);
void copy_windows(TokenView split, std::int64_t first, int count, int seq_len,
                  std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

// The global micro-batch index of micro-step `micro_step` of step `step` (1-based) on `rank`:
// steps, then accumulation steps, then ranks, as sequential_batch counts them.
std::int64_t global_micro_batch(std::int64_t step, std::int64_t micro_step,
                                std::int64_t accumulation, int rank, int world_size);

// The first global sequence of micro-step `micro_step` (0-based within the step) on `rank` of
// `world_size` ranks, each micro-batch `micro_batch` sequences: every micro-step takes the next
// world_size x micro_batch sequences, rank by rank, so any split of the same global batch covers
// sequences 0 .. train_batch_size - 1 once. Example: 8 sequences as 2 ranks x micro-batch 2 x 2
// micro-steps: rank 1 takes 2-3, then 6-7.
std::int64_t first_sequence(std::int64_t micro_step, int rank, int world_size,
                            std::int64_t micro_batch);

}  // namespace strata::models
