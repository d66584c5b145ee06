#include <algorithm>

#include "engine/zero/param_tier.h"

namespace strata::engine::zero {

base::ByIndex<bool> modules_in_cpu(const FlatLayout& layout, OffloadDevice device,
                                   std::int64_t max_in_cpu) {
  base::ByIndex<bool> kept(layout.module_count(), device == OffloadDevice::cpu);
  if (device != OffloadDevice::nvme) return kept;
  std::int64_t in_cpu = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    const std::int64_t shard = layout.module(m).shard_numel;
    if (in_cpu + shard > max_in_cpu) continue;
    kept[m] = true;
    in_cpu += shard;
  }
  return kept;
}

namespace {

// The shards in CPU memory, back to back in module order (the cpu tier's is the partition); the
// others get an extent each on NVMe.
void plan_homes(ParamTierPlan& plan, const ParamTierOptions& options, const FlatLayout& layout) {
  const int modules = layout.module_count();
  plan.cpu_offset.assign(modules, -1);
  plan.nvme_extent.assign(modules, -1);
  if (options.device == OffloadDevice::none) return;
  const base::ByIndex<bool> kept = modules_in_cpu(layout, options.device, options.max_in_cpu);
  std::int64_t in_cpu = 0;
  std::int64_t largest = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    const std::int64_t shard = layout.module(m).shard_numel;
    if (kept[m]) {
      plan.cpu_offset[m] = in_cpu;
      in_cpu += shard;
      continue;
    }
    plan.nvme_extent[m] = static_cast<int>(plan.extents.size());
    plan.extents.push_back(shard * options.element_bytes);
    largest = std::max(largest, shard * options.element_bytes);
  }
  if (in_cpu > 0) {
    plan.host = {
        1, in_cpu * options.element_bytes,
        memory::PinnedPoolOptions{options.pin_memory, "parameter shards in CPU memory", true}};
  }
  if (!plan.extents.empty()) {
    plan.swap_buffers = {options.buffer_count, largest,
                         memory::PinnedPoolOptions{options.pin_memory, "parameter swap buffers"}};
  }
}

// Whether every module `range` covers is in CPU memory: then values() is the tier's own memory.
bool written_in_place(const ParamTierPlan& plan, const FlatLayout& layout, Range range) {
  return std::ranges::all_of(layout.modules_in(range),
                             [&](int m) { return plan.cpu_offset[m] >= 0; });
}

void plan_staging(ParamTierPlan& plan, const ParamTierOptions& options, const FlatLayout& layout) {
  std::int64_t largest = 0;
  for (const Range& range : options.committed_ranges) {
    if (!written_in_place(plan, layout, range)) largest = std::max(largest, range.size());
  }
  if (largest == 0) return;
  const std::int64_t bytes = largest * options.element_bytes;
  if (options.device == OffloadDevice::none) {
    plan.staging = {2, bytes,
                    memory::PinnedPoolOptions{options.upload_staging_pinned,
                                              "new parameters on their way to the device", true}};
    plan.staging_in_pool = true;
    return;
  }
  plan.staging = {1, bytes,
                  memory::PinnedPoolOptions{false, "new parameters on their way to NVMe"}};
}

}  // namespace

ParamTierPlan ParamTier::plan(const ParamTierOptions& options, const FlatLayout& layout) {
  ParamTierPlan plan;
  if (options.device == OffloadDevice::none)
    plan.device_bytes = layout.partition_numel() * options.element_bytes;
  plan_homes(plan, options, layout);
  plan_staging(plan, options, layout);
  return plan;
}

}  // namespace strata::engine::zero
