#include "engine/zero/device_shards.h"

#include "base/assert.h"
#include "base/log.h"

namespace strata::engine::zero {

DeviceShards::DeviceShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
                           std::int64_t element_bytes, memory::PinnedPool* pool)
    : device_(device), layout_(layout), element_bytes_(element_bytes), pool_(pool) {
  partition_ = device.allocate(plan.device_bytes, "parameter shards");
  if (!plan.staging_in_pool) return;
  STRATA_ASSERT(pool_ != nullptr);
  staging_.reserve(*pool_, plan.staging.buffer_bytes, plan.staging.options);
}

// Uploads still in flight read the staging slots: finish them before the slots go.
DeviceShards::~DeviceShards() {
  for (int slot : {0, 1}) {
    try {
      staging_.wait(slot);
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter upload failed at shutdown: {}", error.what());
    }
  }
}

void DeviceShards::open() {
  if (pool_ != nullptr) staging_.open(*pool_);
}

void DeviceShards::fetch(int module, gpu::Stream& stream, void* device_target,
                         const gpu::Event* /*target_free*/) {
  stream.copy(device_target, device_shard(module),
              layout_.module(module).shard_numel * element_bytes_, gpu::CopyKind::device_to_device);
}

const std::byte* DeviceShards::device_shard(int module) const {
  if (!partition_) return nullptr;
  return partition_.as<const std::byte>() +
         layout_.module(module).partition_offset * element_bytes_;
}

std::span<std::byte> DeviceShards::values(Range range) {
  return staging_.take(staging_slot_, static_cast<std::size_t>(range.size() * element_bytes_));
}

// An expected range is committed while the engine's thread enqueues the next forward: the
// compute stream waits for its upload only where it reads it (ParamTier::wait_committed), not at
// whatever module it has reached.
std::shared_ptr<gpu::Event> DeviceShards::write(Range range, bool expected) {
  const std::int64_t bytes = range.size() * element_bytes_;
  committed_upload_bytes_ += bytes;
  std::shared_ptr<gpu::Event> uploaded =
      upload_to_device(device_, staging_.slot(staging_slot_).data(), bytes,
                       expected ? nullptr : &device_.compute_stream(),
                       partition_.as<std::byte>() + range.begin * element_bytes_);
  staging_.hold(staging_slot_, uploaded);
  staging_slot_ = 1 - staging_slot_;
  return uploaded;
}

}  // namespace strata::engine::zero
