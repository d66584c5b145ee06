#include "engine/zero/cpu_shards.h"

#include <fmt/format.h>

#include "base/assert.h"

namespace strata::engine::zero {

CpuShards::CpuShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
                     std::int64_t element_bytes, memory::PinnedPool& pool, memory::Residency& book)
    : device_(device),
      layout_(layout),
      element_bytes_(element_bytes),
      pool_(pool),
      book_(book),
      user_(book.add_user("parameter shards")),
      cpu_offset_(plan.cpu_offset),
      bytes_(plan.host.buffer_bytes) {
  STRATA_ASSERT(!pool.is_open());
  if (plan.host.reserved())
    shelf_ = pool_.reserve(plan.host.count, plan.host.buffer_bytes, plan.host.options);
}

void CpuShards::open() {
  if (shelf_ < 0) return;
  STRATA_ASSERT(pool_.is_open());
  STRATA_ASSERT(!lease_);
  lease_ = pool_.acquire(shelf_);
  shards_ = lease_.bytes().first(static_cast<std::size_t>(bytes_));
  for (int m = 0; m < layout_.module_count(); ++m) {
    if (!in_cpu(m)) continue;
    static_cast<void>(
        book_.add_in_cpu(user_, fmt::format("parameter shard of module {} (CPU)", m), shard(m)));
  }
}

void CpuShards::fetch(int module, gpu::Stream& stream, void* device_target,
                      const gpu::Event* target_free) {
  upload_to_device(device_, shard(module).data(),
                   layout_.module(module).shard_numel * element_bytes_, &stream, device_target,
                   target_free);
}

// The shard's CPU memory changes only by values() + commit(): during backward for modules
// backward has passed (their copies have run: backward waited for them), during the next forward
// for modules not yet gathered (the coordinator waits for the commit first), and so never under a
// copy enqueued for a module still ahead.
std::shared_ptr<gpu::Event> CpuShards::upload_ahead(int module, void* device_target,
                                                    const gpu::Event* target_free) {
  STRATA_ASSERT(in_cpu(module));
  const std::span<std::byte> source = shard(module);
  return upload_to_device(device_, source.data(), static_cast<std::int64_t>(source.size()), nullptr,
                          device_target, target_free);
}

std::span<std::byte> CpuShards::values(Range range) {
  const std::span<std::byte> values = in_place(range);
  STRATA_ASSERT(!values.empty());
  return values;
}

std::span<std::byte> CpuShards::in_place(Range range) {
  for (int m : layout_.modules_in(range)) {
    if (!in_cpu(m)) return {};
  }
  const int first = layout_.modules_in({range.begin, range.begin + 1}).front();
  const std::int64_t offset =
      cpu_offset_[first] + (range.begin - layout_.module(first).partition_offset);
  return shards_.subspan(static_cast<std::size_t>(offset * element_bytes_),
                         static_cast<std::size_t>(range.size() * element_bytes_));
}

std::span<std::byte> CpuShards::shard(int module) {
  const std::int64_t offset = cpu_offset_[module];
  STRATA_ASSERT(offset >= 0);
  return shards_.subspan(
      static_cast<std::size_t>(offset * element_bytes_),
      static_cast<std::size_t>(layout_.module(module).shard_numel * element_bytes_));
}

}  // namespace strata::engine::zero
