#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/zero/param_tier_plan.h"
#include "engine/zero/range_staging.h"
#include "engine/zero/shard_store.h"
#include "gpu/device.h"

namespace strata::engine::zero {

// The device tier (offload_param none): the whole partition in device memory, which an optimizer
// on the device writes itself and the coordinator all-gathers straight from. An offloaded
// optimizer's new values go up from two staging slots, alternately.
class DeviceShards final : public ShardStore {
 public:
  // Allocates the partition, and reserves the staging slots in `pool` when the plan puts them
  // there.
  DeviceShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
               std::int64_t element_bytes, memory::PinnedPool* pool);
  ~DeviceShards() override;
  DeviceShards(const DeviceShards&) = delete;
  DeviceShards& operator=(const DeviceShards&) = delete;

  void open() override;
  void fetch(int module, gpu::Stream& stream, void* device_target,
             const gpu::Event* target_free) override;
  const std::byte* device_shard(int module) const override;
  std::byte* device_partition() const override { return partition_.as<std::byte>(); }
  std::span<std::byte> values(Range range) override;
  std::shared_ptr<gpu::Event> write(Range range, bool expected) override;
  std::int64_t committed_upload_bytes() const noexcept override { return committed_upload_bytes_; }
  std::int64_t unpinned_host_bytes() const override { return staging_.unpinned_bytes(); }

 private:
  gpu::Device& device_;
  const FlatLayout& layout_;
  std::int64_t element_bytes_;
  memory::PinnedPool* pool_;  // the staging slots' when reserved there
  gpu::DeviceBuffer partition_;
  RangeStaging staging_{2};
  int staging_slot_ = 0;  // the slot the next range is made in
  std::atomic<std::int64_t> committed_upload_bytes_ = 0;
};

}  // namespace strata::engine::zero
