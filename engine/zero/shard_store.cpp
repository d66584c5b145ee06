#include "engine/zero/shard_store.h"

#include "base/assert.h"

namespace strata::engine::zero {

// Only a home that keeps shards in CPU memory uploads them ahead, and only those (in_cpu()).
std::shared_ptr<gpu::Event> ShardStore::upload_ahead(int module, void* /*device_target*/,
                                                     const gpu::Event* /*target_free*/) {
  STRATA_ASSERT(in_cpu(module));
  return nullptr;
}

std::unique_ptr<gpu::Event> upload_to_device(gpu::Device& device, const std::byte* source,
                                             std::int64_t bytes, gpu::Stream* waiter,
                                             void* device_target, const gpu::Event* target_free) {
  gpu::Stream& copies = device.h2d_stream();
  if (target_free != nullptr) copies.wait(*target_free);
  copies.copy(device_target, source, bytes, gpu::CopyKind::host_to_device);
  std::unique_ptr<gpu::Event> copied = device.create_event();
  copies.record(*copied);
  if (waiter != nullptr) waiter->wait(*copied);
  return copied;
}

}  // namespace strata::engine::zero
