#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "engine/memory/pinned_pool.h"
#include "engine/zero/flat_layout.h"
#include "gpu/device.h"
#include "gpu/event.h"
#include "gpu/stream.h"

namespace strata::engine::zero {

// Where a parameter tier keeps its shards between uses: device memory (DeviceShards), CPU memory
// (CpuShards) or the NVMe swap store beyond max_in_cpu (NvmeShards). ParamTier owns one, chosen
// by offload_param.device, and adds what every home shares: the expected ranges an optimizer's
// thread commits late (CommitFence). The calls mean what ParamTier's of the same name do; the
// defaults are those of a home that neither reads NVMe nor keeps shards in CPU memory.
class ShardStore {
 public:
  virtual ~ShardStore() = default;

  // Once the pool is open (and the store): takes the home's memory from its shelves.
  virtual void open() {}
  // Starts reading module `module`'s shard into a buffer ahead of its fetch (NVMe only); true
  // when a read is (now) in flight or not needed.
  virtual bool prefetch(int /*module*/) { return true; }
  virtual void fetch(int module, gpu::Stream& stream, void* device_target,
                     const gpu::Event* target_free) = 0;
  virtual bool in_cpu(int /*module*/) const { return false; }
  virtual std::shared_ptr<gpu::Event> upload_ahead(int module, void* device_target,
                                                   const gpu::Event* target_free);
  virtual const std::byte* device_shard(int /*module*/) const { return nullptr; }
  virtual std::byte* device_partition() const { return nullptr; }

  // The memory new values of `range` are written into, and then their write to the home: the
  // returned upload, when not null, is the device tier's, which the compute stream waits for
  // unless `expected` (the reader of the range waits for it then).
  virtual std::span<std::byte> values(Range range) = 0;
  virtual std::shared_ptr<gpu::Event> write(Range range, bool expected) = 0;

  virtual bool inconsistent() const noexcept { return false; }
  virtual bool on_nvme(int /*module*/) const { return false; }
  virtual std::int64_t nvme_read_bytes() const { return 0; }
  virtual std::int64_t nvme_write_bytes() const { return 0; }
  virtual std::int64_t nvme_bytes() const { return 0; }
  virtual std::int64_t committed_upload_bytes() const noexcept { return 0; }
  virtual std::int64_t unpinned_host_bytes() const { return 0; }
  virtual memory::PinnedPool::Shelf swap_shelf() const noexcept { return -1; }
};

// Copies `bytes` from `source` to `device_target` on the device's H2D stream, so that the copy
// overlaps the compute stream's work queued before it. The copy first waits for `target_free`
// (the target's earlier use), when not null; `waiter`, when not null, waits for the copy before
// its next work. The returned event fires once the copy has run.
std::unique_ptr<gpu::Event> upload_to_device(gpu::Device& device, const std::byte* source,
                                             std::int64_t bytes, gpu::Stream* waiter,
                                             void* device_target,
                                             const gpu::Event* target_free = nullptr);

}  // namespace strata::engine::zero
