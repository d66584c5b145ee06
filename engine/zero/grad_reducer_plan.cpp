// GradReducer::plan: the reducer's memory as a pure function of its options and the layout.
#include <algorithm>

#include "base/assert.h"
#include "engine/zero/grad_reducer.h"

namespace strata::engine::zero {

GradReducerPlan GradReducer::plan(const GradReducerOptions& options, const FlatLayout& layout) {
  STRATA_ASSERT(options.to_host || !options.to_nvme);
  constexpr std::int64_t kFloat = 4;
  constexpr std::int64_t kDouble = 8;
  const std::int64_t partition = layout.partition_numel();
  const std::int64_t grad_bytes = options.bf16 ? 2 : kFloat;
  GradReducerPlan plan;
  if (options.stage <= 1) {
    for (int m = 0; m < layout.module_count(); ++m)
      plan.full_buffer_bytes += kFloat * layout.module(m).padded_numel;
  }
  plan.norm_bytes = kDouble;
  plan.pinned_norm_bytes = sizeof(GradNorm);
  if (!options.to_host) {
    plan.device_partition_bytes = kFloat * partition;
    return plan;
  }
  plan.module_norm_bytes = kDouble * layout.module_count();
  plan.pinned_module_norm_bytes = plan.module_norm_bytes;
  plan.piece_elements = grad_piece_elements(layout);
  plan.staging_bytes = kGradStagingSlots * plan.piece_elements * kFloat;
  if (!options.to_nvme) {
    plan.accumulation_bytes = partition * grad_bytes;
    return plan;
  }
  plan.accumulation_bytes = kPieceWrites * plan.piece_elements * grad_bytes;
  plan.read_bytes = options.largest_read * grad_bytes;
  // A partition smaller than a block still takes one: the store's extents are whole blocks.
  plan.swap_bytes = std::max<std::int64_t>(partition * grad_bytes, 4096);
  return plan;
}

}  // namespace strata::engine::zero
