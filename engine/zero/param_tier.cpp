#include "engine/zero/param_tier.h"

#include "base/assert.h"
#include "engine/zero/cpu_shards.h"
#include "engine/zero/device_shards.h"
#include "engine/zero/nvme_shards.h"
#include "engine/zero/planned_shards.h"

namespace strata::engine::zero {
namespace {

// The home offload_param.device names, holding what the plan says.
std::unique_ptr<ShardStore> make_store(gpu::Device& device, const FlatLayout& layout,
                                       const ParamTierOptions& options) {
  const ParamTierPlan plan = ParamTier::plan(options, layout);
  if (options.device == OffloadDevice::none)
    return std::make_unique<DeviceShards>(device, layout, plan, options.element_bytes,
                                          options.pool);
  STRATA_ASSERT(options.pool != nullptr && !options.pool->is_open());
  STRATA_ASSERT(options.book != nullptr);
  if (options.device == OffloadDevice::cpu)
    return std::make_unique<CpuShards>(device, layout, plan, options.element_bytes, *options.pool,
                                       *options.book);
  return std::make_unique<NvmeShards>(device, layout, plan, options);
}

}  // namespace

ParamTier::ParamTier(gpu::Device& device, const FlatLayout& layout, const ParamTierOptions& options)
    : layout_(layout),
      device_(options.device),
      element_bytes_(options.element_bytes),
      store_(make_store(device, layout, options)) {}

ParamTier::ParamTier(const FlatLayout& layout, const ParamTierOptions& options, PlanOnly)
    : layout_(layout),
      device_(options.device),
      element_bytes_(options.element_bytes),
      store_(std::make_unique<PlannedShards>(plan(options, layout))) {}

ParamTier::~ParamTier() = default;

Range ParamTier::shard_range(int module) const {
  const ModuleSlice& slice = layout_.module(module);
  return Range{slice.partition_offset, slice.partition_offset + slice.shard_numel};
}

std::byte* ParamTier::lent_module(int module) const {
  STRATA_ASSERT(lends());
  std::byte* partition = store_->device_partition();
  if (partition == nullptr) return nullptr;
  return partition + layout_.module(module).partition_offset * element_bytes_;
}

bool ParamTier::prefetch(int module) {
  // Its NVMe bytes are about to change: a read now would be of the last step's.
  if (fence_.awaits(shard_range(module))) return false;
  return store_->prefetch(module);
}

std::span<std::byte> ParamTier::values(Range range) {
  STRATA_ASSERT(range.begin >= 0 && range.begin < range.end &&
                range.end <= layout_.partition_numel());
  return store_->values(range);
}

void ParamTier::commit(Range range) {
  const bool expected = fence_.expects(range);
  std::shared_ptr<gpu::Event> uploaded = store_->write(range, expected);
  // Written to CPU memory or NVMe, it is forgotten; uploaded, it is kept until the reading
  // stream has waited for its copy.
  if (expected) fence_.commit(range, std::move(uploaded));
}

void ParamTier::forgo_expected(const std::string& why, const std::string& fix) {
  fence_.abandon(why.empty() ? "the optimizer step failed" : why, fix);
}

void ParamTier::wait_committed(int module, gpu::Stream& stream) {
  fence_.wait_for(shard_range(module),
                  [&stream](const gpu::Event& upload) { stream.wait(upload); });
}

}  // namespace strata::engine::zero
