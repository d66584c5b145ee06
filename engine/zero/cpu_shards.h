#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/by_index.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/param_tier_plan.h"
#include "engine/zero/shard_store.h"
#include "gpu/device.h"

namespace strata::engine::zero {

// The shards a tier keeps in CPU memory: every module's for offload_param cpu (then it is the
// whole tier), the modules max_in_cpu keeps for nvme (NvmeShards holds one for them). They lie
// back to back, in module order, in one resident shelf of the pool, each registered in the
// residency book; new values are written in place, and the shards go up by copies on the H2D
// stream.
class CpuShards final : public ShardStore {
 public:
  // Registers the tier's user in `book` and reserves the shelf the plan keeps shards in.
  CpuShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
            std::int64_t element_bytes, memory::PinnedPool& pool, memory::Residency& book);
  CpuShards(const CpuShards&) = delete;
  CpuShards& operator=(const CpuShards&) = delete;

  void open() override;
  void fetch(int module, gpu::Stream& stream, void* device_target,
             const gpu::Event* target_free) override;
  bool in_cpu(int module) const override { return cpu_offset_[module] >= 0; }
  std::shared_ptr<gpu::Event> upload_ahead(int module, void* device_target,
                                           const gpu::Event* target_free) override;
  std::span<std::byte> values(Range range) override;
  std::shared_ptr<gpu::Event> write(Range /*range*/, bool /*expected*/) override { return nullptr; }

  // `range` in CPU memory when every module it covers is kept there (then they are consecutive
  // there too: modules are kept in module order); empty otherwise.
  std::span<std::byte> in_place(Range range);
  // Module `module`'s shard, which is in CPU memory.
  std::span<std::byte> shard(int module);
  // The tier's partitions in the book.
  memory::User user() const noexcept { return user_; }

 private:
  gpu::Device& device_;
  const FlatLayout& layout_;
  std::int64_t element_bytes_;
  memory::PinnedPool& pool_;
  memory::Residency& book_;
  memory::User user_;
  base::ByIndex<std::int64_t> cpu_offset_;  // ParamTierPlan::cpu_offset
  std::int64_t bytes_;
  memory::PinnedPool::Shelf shelf_ = -1;
  memory::PinnedPool::Lease lease_;  // the shelf's one buffer, from open() on
  std::span<std::byte> shards_;
};

}  // namespace strata::engine::zero
