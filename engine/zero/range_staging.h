#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "aio/aligned_buffer.h"
#include "base/by_index.h"
#include "engine/memory/pinned_pool.h"
#include "gpu/event.h"

namespace strata::engine::zero {

// The memory a parameter tier hands out through values() for a range it does not write in place:
// one slot (nvme, written synchronously) or two (the device tier, which alternates them so that
// one range's upload runs while the next is made: the host waits only for the upload two commits
// back). The slots are a shelf of the pool when reserved (the largest range is known), else plain
// buffers that grow to the largest range asked for.
//
// Only the one thread writing ranges calls take(), hold() and wait(); the lock covers the growth,
// which unpinned_bytes() reads from any thread.
class RangeStaging {
 public:
  explicit RangeStaging(int slots) : grown_(slots), leases_(slots), in_flight_(slots) {}
  RangeStaging(const RangeStaging&) = delete;
  RangeStaging& operator=(const RangeStaging&) = delete;

  // Before the pool opens: every slot a buffer of `bytes` in `pool`.
  void reserve(memory::PinnedPool& pool, std::int64_t bytes,
               const memory::PinnedPoolOptions& options);
  // Once the pool is open: takes the reserved slots.
  void open(memory::PinnedPool& pool);

  // Slot `slot`'s first `bytes`, once its last upload has run; plain slots all grow to `bytes`
  // first when smaller, each once its upload has run.
  std::span<std::byte> take(int slot, std::size_t bytes);
  // Slot `slot`'s memory.
  std::span<std::byte> slot(int slot);
  // Slot `slot`'s contents are on their way to the device until `upload` fires.
  void hold(int slot, std::shared_ptr<gpu::Event> upload);
  // Waits for slot `slot`'s upload, if any; rethrows the copy's error.
  void wait(int slot);
  // Host bytes of the plain slots (none page-locked).
  std::int64_t unpinned_bytes() const;

 private:
  // Per slot: its plain buffer, its buffer of the shelf, and its upload in flight.
  base::ByIndex<aio::AlignedBuffer> grown_;
  base::ByIndex<memory::PinnedPool::Lease> leases_;
  base::ByIndex<std::shared_ptr<gpu::Event>> in_flight_;
  memory::PinnedPool::Shelf shelf_ = -1;
  mutable std::mutex mutex_;
};

}  // namespace strata::engine::zero
