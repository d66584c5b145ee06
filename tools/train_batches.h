#pragma once

// The tokens of each step of `strata train` on this rank: the step's micro-batches back to back,
// as Engine::train_batch takes them, and the validation batch.

#include <cstdint>
#include <span>
#include <vector>

#include "models/data/token_dataset.h"

namespace strata::tools {

struct StepBatchesShape {
  std::int64_t accumulation = 1;  // micro-batches per step
  std::int64_t batch = 1;         // sequences per micro-batch
  std::int64_t seq_len = 1;
  int rank = 0;
  int world_size = 1;
};

class StepBatches {
 public:
  // `sequential`: the training split in order (strata.data.order), else random windows chosen
  // from (seed, step, sequence) alone, the same global batch whatever the world size and
  // micro-batch split. `data` must outlive this.
  StepBatches(const models::TokenDataset& data, const StepBatchesShape& shape, bool sequential,
              std::uint64_t seed);

  // Step `step`'s training micro-batches.
  void fill_training(std::int64_t step);
  // The validation batch: the same random windows at every evaluation.
  void fill_validation();

  std::span<const std::int32_t> inputs() const { return inputs_; }
  std::span<const std::int32_t> targets() const { return targets_; }

 private:
  void fill(models::TokenView split, std::span<const std::size_t> starts, bool in_order,
            std::uint64_t seed, std::int64_t step);

  const models::TokenDataset& data_;
  StepBatchesShape shape_;
  bool sequential_;
  std::uint64_t seed_;
  std::vector<std::int32_t> inputs_;
  std::vector<std::int32_t> targets_;
};

}  // namespace strata::tools
