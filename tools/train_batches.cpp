#include "tools/train_batches.h"

namespace strata::tools {

StepBatches::StepBatches(const models::TokenDataset& data, const StepBatchesShape& shape,
                         bool sequential, std::uint64_t seed)
    : data_(data),
      shape_(shape),
      sequential_(sequential),
      seed_(seed),
      inputs_(static_cast<std::size_t>(shape.accumulation * shape.batch * shape.seq_len)),
      targets_(inputs_.size()) {}

void StepBatches::fill_training(std::int64_t step) {
  fill(data_.train(), data_.train_starts(), sequential_, seed_, step);
}

void StepBatches::fill_validation() {
  fill(data_.validation(), data_.validation_starts(), false, seed_ ^ 0x5EED, 0);
}

// `starts` empty: windows of the packed stream; else one example per row (packing off).
void StepBatches::fill(models::TokenView split, std::span<const std::size_t> starts, bool in_order,
                       std::uint64_t seed, std::int64_t step) {
  const std::int64_t micro_tokens = shape_.batch * shape_.seq_len;
  const int batch = static_cast<int>(shape_.batch);
  const int seq_len = static_cast<int>(shape_.seq_len);
  for (std::int64_t micro = 0; micro < shape_.accumulation; ++micro) {
    const auto at = static_cast<std::size_t>(micro * micro_tokens);
    const auto count = static_cast<std::size_t>(micro_tokens);
    std::span<std::int32_t> micro_inputs = std::span(inputs_).subspan(at, count);
    std::span<std::int32_t> micro_targets = std::span(targets_).subspan(at, count);
    if (in_order) {
      const std::int64_t index = models::global_micro_batch(step, micro, shape_.accumulation,
                                                            shape_.rank, shape_.world_size);
      if (starts.empty()) {
        models::sequential_batch(split, index, batch, seq_len, micro_inputs, micro_targets);
      } else {
        models::sequential_examples(split, starts, index, batch, seq_len, micro_inputs,
                                    micro_targets);
      }
      continue;
    }
    const std::int64_t first =
        models::first_sequence(micro, shape_.rank, shape_.world_size, shape_.batch);
    if (starts.empty()) {
      models::sample_sequences(split, seed, step, first, batch, seq_len, micro_inputs,
                               micro_targets);
    } else {
      models::sample_examples(split, starts, seed, step, first, batch, seq_len, micro_inputs,
                              micro_targets);
    }
  }
}

}  // namespace strata::tools
