#include "models/data/token_dataset.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/assert.h"
#include "base/by_index.h"
#include "base/error.h"
#include "models/data/byte_tokenizer.h"

namespace strata::models {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The key of sequence `sequence` of `step`: which window or example it reads.
std::uint64_t sequence_key(std::uint64_t seed, std::int64_t step, std::int64_t sequence) {
  // The sequence's index, spread by 2^10 before mixing, keys its window.
  return mix(seed ^ mix(static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
                        mix(static_cast<std::uint64_t>(sequence) << 10)));
}

}  // namespace

TokenDataset TokenDataset::from_tokens(std::vector<std::uint16_t> tokens,
                                       double validation_fraction) {
  STRATA_ASSERT(validation_fraction >= 0 && validation_fraction < 1);
  auto file = std::make_shared<TokenFile>();
  file->format = "tokens in memory";
  file->owned = std::move(tokens);
  file->tokens = std::span<const std::uint16_t>(file->owned);
  TokenDataset dataset;
  dataset.train_file_ = file;
  dataset.validation_file_ = file;
  const TokenView all = file->tokens;
  auto validation_count =
      static_cast<std::size_t>(static_cast<double>(all.size()) * validation_fraction);
  dataset.train_ = all.subview(0, all.size() - validation_count);
  dataset.validation_ = all.subview(all.size() - validation_count, validation_count);
  return dataset;
}

TokenDataset TokenDataset::from_file(const std::filesystem::path& path, double validation_fraction,
                                     const std::string& dtype,
                                     const std::filesystem::path& validation_path,
                                     const TextTokenizing& text) {
  STRATA_ASSERT(validation_fraction >= 0 && validation_fraction < 1);
  TokenDataset dataset;
  dataset.train_file_ =
      std::make_shared<const TokenFile>(open_token_file(path, dtype, "strata.data.path", text));
  const TokenView all = dataset.train_file_->tokens;
  dataset.source =
      fmt::format("{} ({})", dataset.train_file_->path.string(), dataset.train_file_->format);
  if (validation_path.empty()) {
    dataset.validation_file_ = dataset.train_file_;
    auto validation_count =
        static_cast<std::size_t>(static_cast<double>(all.size()) * validation_fraction);
    dataset.train_ = all.subview(0, all.size() - validation_count);
    dataset.validation_ = all.subview(all.size() - validation_count, validation_count);
  } else {
    dataset.validation_file_ = std::make_shared<const TokenFile>(
        open_token_file(validation_path, dtype, "strata.data.validation_path", text));
    dataset.train_ = all;
    dataset.validation_ = dataset.validation_file_->tokens;
    dataset.source += fmt::format(", validation {}", dataset.validation_file_->path.string());
  }
  dataset.byte_level = dataset.train_file_->format == kTextFormat;
  return dataset;
}

void TokenDataset::check_fits(int seq_len, int vocab) const {
  check_token_ids(*train_file_, vocab, source);
  if (validation_file_ != train_file_) check_token_ids(*validation_file_, vocab, source);
  // A window is seq_len inputs plus the one target after them, from each split.
  auto needed = static_cast<std::size_t>(seq_len) + 1;
  std::size_t shortest = std::min(train().size(), validation().size());
  if (shortest >= needed) return;
  std::string fix =
      shortest >= 2 ? fmt::format(
                          "set \"strata\": {{\"model\": {{\"seq_len\": {}}}}} or less, or point "
                          "\"strata\": {{\"data\": {{\"path\"}}}} at a longer file",
                          shortest - 1)
                    : "point \"strata\": {\"data\": {\"path\"}} at a longer file (or raise "
                      "\"validation_fraction\" if the validation split is the short one)";
  throw UserError(
      fmt::format("strata.model.seq_len {} is too long for the data in {}: each split needs at "
                  "least {} tokens, the training split has {} and the validation split {}",
                  seq_len, source, needed, train().size(), validation().size()),
      fix, 2);
}

void TokenDataset::check_tokenizer(std::int64_t vocab,
                                   const std::filesystem::path& hf_config) const {
  models::check_tokenizer(*train_file_, vocab, hf_config);
  if (validation_file_ != train_file_) {
    models::check_tokenizer(*validation_file_, vocab, hf_config);
    if (is_text(*train_file_) != is_text(*validation_file_)) {
      throw UserError(
          fmt::format("the training file {} is {} and the validation file {} is {}: their ids "
                      "mean different things",
                      train_file_->path.string(), train_file_->format,
                      validation_file_->path.string(), validation_file_->format),
          "give both splits in one form: token files made with one tokenizer "
          "(strata tokenize --output, docs/data.md), or both text",
          2);
    }
  }
  if (!byte_level || vocab >= kByteVocab) return;
  throw UserError(
      fmt::format("strata.model.vocab {} is smaller than the byte tokenizer's {} tokens, which {} "
                  "holds",
                  vocab, kByteVocab, source),
      hf_config.empty()
          ? fmt::format("set \"strata\": {{\"model\": {{\"vocab\": {}}}}} or more", kByteVocab)
          : std::string("give a token file made with the model's tokenizer as \"strata\": "
                        "{\"data\": {\"path\": ...}} (docs/data.md)"),
      2);
}

void TokenDataset::shape_examples(int seq_len, bool packing) {
  const auto window = static_cast<std::size_t>(seq_len) + 1;
  train_cut_ = cut_long_examples(train_, window);
  validation_cut_ = cut_long_examples(validation_, window);
  train_ = train_cut_.tokens;
  validation_ = validation_cut_.tokens;
  examples = train_cut_.examples;
  examples_cut = train_cut_.cut;
  if (packing) return;
  train_starts_ = example_starts(train_);
  validation_starts_ = example_starts(validation_);
  if (!train_starts_.empty() && !validation_starts_.empty()) return;
  throw UserError(
      fmt::format("\"strata\": {{\"data\": {{\"packing\": false}}}}}} reads one example per "
                  "window, but {} does not mark where its examples start{}",
                  source, train_starts_.empty() ? "" : " in its validation split"),
      train_starts_.empty()
          ? "give the text file itself (its token cache marks each line), or a token file "
            "written with its mask by `strata tokenize --output` from prompt and completion or "
            "conversation lines; or leave packing on"
          : "give a validation file of whole examples (\"validation_path\"), or leave packing "
            "on",
      2);
}

void TokenDataset::check_sequential_fits(int batch, int seq_len) const {
  const auto needed = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq_len) + 1;
  if (train_.size() >= needed) return;
  throw UserError(
      fmt::format("strata.data.order \"sequential\" reads micro-batches of {} x {} + 1 = {} "
                  "tokens, but the training split of {} has {}",
                  batch, seq_len, needed, source, train_.size()),
      "use a longer file, a smaller train_micro_batch_size_per_gpu or seq_len, or the default "
      "\"order\": \"random\"",
      2);
}

void sample_sequences(TokenView split, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_sequence, int count, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  auto window = static_cast<std::size_t>(seq_len) + 1;
  STRATA_ASSERT(split.size() >= window);
  STRATA_ASSERT(first_sequence >= 0);
  STRATA_ASSERT(inputs.size() ==
                static_cast<std::size_t>(count) * static_cast<std::size_t>(seq_len));
  STRATA_ASSERT(targets.size() == inputs.size());
  std::uint64_t starts = split.size() - window + 1;
  for (int row = 0; row < count; ++row) {
    const std::uint64_t key = sequence_key(seed, step, first_sequence + row);
    std::size_t start = static_cast<std::size_t>(key % starts);
    const auto at = static_cast<std::size_t>(row) * static_cast<std::size_t>(seq_len);
    split.copy(start, inputs.subspan(at, static_cast<std::size_t>(seq_len)));
    split.copy_targets(start + 1, targets.subspan(at, static_cast<std::size_t>(seq_len)));
  }
}

void sample_examples(TokenView split, std::span<const std::size_t> starts, std::uint64_t seed,
                     std::int64_t step, std::int64_t first_sequence, int count, int seq_len,
                     std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  STRATA_ASSERT(!starts.empty() && first_sequence >= 0 && count >= 0);
  base::ByIndex<std::size_t> examples(count);
  for (int row = 0; row < count; ++row) {
    examples[row] =
        static_cast<std::size_t>(sequence_key(seed, step, first_sequence + row) % starts.size());
  }
  fill_example_rows(split, starts, examples.items(), seq_len, inputs, targets);
}

void sequential_examples(TokenView split, std::span<const std::size_t> starts,
                         std::int64_t micro_batch_index, int batch, int seq_len,
                         std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  STRATA_ASSERT(!starts.empty() && micro_batch_index >= 0 && batch > 0);
  base::ByIndex<std::size_t> examples(batch);
  for (int row = 0; row < batch; ++row) {
    examples[row] = static_cast<std::size_t>(
        (static_cast<std::uint64_t>(micro_batch_index) * static_cast<std::uint64_t>(batch) +
         static_cast<std::uint64_t>(row)) %
        starts.size());
  }
  fill_example_rows(split, starts, examples.items(), seq_len, inputs, targets);
}

std::int64_t window_count(TokenView split, int seq_len) {
  STRATA_ASSERT(seq_len > 0);
  return split.empty() ? 0 : static_cast<std::int64_t>(split.size() - 1) / seq_len;
}

void copy_windows(TokenView split, std::int64_t first, int count, int seq_len,
                  std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  STRATA_ASSERT(first >= 0 && first + count <= window_count(split, seq_len));
  STRATA_ASSERT(inputs.size() ==
                static_cast<std::size_t>(count) * static_cast<std::size_t>(seq_len));
  STRATA_ASSERT(targets.size() == inputs.size());
  // Consecutive windows are one run of count x seq_len tokens, and its targets the run one later.
  const auto start = static_cast<std::size_t>(first) * static_cast<std::size_t>(seq_len);
  split.copy(start, inputs);
  split.copy_targets(start + 1, targets);
}

void sequential_batch(TokenView split, std::int64_t micro_batch_index, int batch, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  STRATA_ASSERT(micro_batch_index >= 0 && batch > 0);
  const std::int64_t per_pass = window_count(split, seq_len) / batch;
  STRATA_ASSERT(per_pass > 0);
  copy_windows(split, micro_batch_index % per_pass * batch, batch, seq_len, inputs, targets);
}

std::int64_t global_micro_batch(std::int64_t step, std::int64_t micro_step,
                                std::int64_t accumulation, int rank, int world_size) {
  STRATA_ASSERT(step >= 1 && micro_step >= 0 && micro_step < accumulation);
  STRATA_ASSERT(rank >= 0 && rank < world_size);
  return ((step - 1) * accumulation + micro_step) * world_size + rank;
}

std::int64_t first_sequence(std::int64_t micro_step, int rank, int world_size,
                            std::int64_t micro_batch) {
  STRATA_ASSERT(rank >= 0 && rank < world_size);
  return (micro_step * world_size + rank) * micro_batch;
}

}  // namespace strata::models
