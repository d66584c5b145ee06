#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "engine/zero/param_tier_plan.h"
#include "engine/zero/shard_store.h"

namespace strata::engine::zero {

// The shards of a tier's plan, held nowhere: where each module's shard would be (in CPU memory,
// on NVMe, or on the device) as the plan places it for the real stores, and nothing to move. A
// step run on a counting device (gpu/counting) gathers from it: the memory estimate's, whose
// device peak is the engine's own coordinator and reducer at work (engine/memory_estimate.cpp).
// A fetch or an upload ahead moves nothing and an NVMe read needs no buffer, since no shard
// holds values; none takes device memory in the real stores either. New values are never
// written to a plan (asserted).
class PlannedShards final : public ShardStore {
 public:
  explicit PlannedShards(const ParamTierPlan& plan)
      : cpu_offset_(plan.cpu_offset), nvme_extent_(plan.nvme_extent) {}

  void fetch(int /*module*/, gpu::Stream& /*stream*/, void* /*device_target*/,
             const gpu::Event* /*target_free*/) override {}
  // upload_ahead is ShardStore's: nothing is copied, so there is no event to wait for.
  bool in_cpu(int module) const override { return cpu_offset_[module] >= 0; }
  bool on_nvme(int module) const override { return nvme_extent_[module] >= 0; }
  std::span<std::byte> values(Range range) override;
  std::shared_ptr<gpu::Event> write(Range range, bool expected) override;

 private:
  base::ByIndex<std::int64_t> cpu_offset_;  // the plan's: -1 for a module not in CPU memory
  base::ByIndex<int> nvme_extent_;          // the plan's: -1 for a module not on NVMe
};

}  // namespace strata::engine::zero
