#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "gpu/device.h"

namespace strata::engine::memory {

struct PinnedPoolOptions {
  // Page-locked (Device::allocate_pinned) when true (config `pin_memory`); plain 4 KiB-aligned
  // host memory when false (no RLIMIT_MEMLOCK needed, slower H2D copies on a real GPU).
  bool pin_memory = true;
  // Names the pool in errors and logs ("optimizer swap buffers").
  std::string what = "pinned pool";
};

// `buffer_count` buffers of `buffer_size_bytes` (rounded up to 4 KiB), carved from one 4 KiB
// aligned arena (so aio can register it whole), bound to the NUMA node of the calling thread where
// hwloc sees more than one node. Borrowed through move-only leases; `acquire` waits (condition
// variable) while all are lent, it never allocates more. Thread-safe.
class PinnedPool {
 public:
  // A lent buffer; gives it back when destroyed or released. Must not outlive its pool.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }

    explicit operator bool() const noexcept { return pool_ != nullptr; }
    std::span<std::byte> bytes() const noexcept { return bytes_; }
    // Which buffer of the pool (0 .. buffer_count-1).
    int index() const noexcept { return index_; }
    void release() noexcept;

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, int index, std::span<std::byte> bytes)
        : pool_(pool), index_(index), bytes_(bytes) {}
    PinnedPool* pool_ = nullptr;
    int index_ = -1;
    std::span<std::byte> bytes_;
  };

  // Throws UserError (exit status 2) for buffer_count < 1 or buffer_size_bytes < 1, and (exit
  // status 1) when pinning is on and RLIMIT_MEMLOCK is below what the pool needs: the message says
  // how many bytes are needed, the limit, and how to raise it (or to set pin_memory false).
  PinnedPool(gpu::Device& device, std::int64_t buffer_count, std::int64_t buffer_size_bytes,
             PinnedPoolOptions options = {});
  // Logs one error line naming how many buffers are still lent (their leases then dangle).
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // Blocks until a buffer is free.
  Lease acquire();
  // A buffer if one is free now, else an empty lease.
  Lease try_acquire();

  std::int64_t buffer_count() const noexcept { return buffer_count_; }
  // The size of each buffer, a multiple of 4 KiB (at least the size asked for).
  std::int64_t buffer_size_bytes() const noexcept { return buffer_size_bytes_; }
  std::int64_t in_use() const;
  std::int64_t peak_in_use() const;
  bool pinned() const noexcept { return !pinned_.empty(); }
  // The NUMA node the arena is bound to, or -1 when there is one node or hwloc could not tell.
  int numa_node() const noexcept { return numa_node_; }
  // All buffers, for aio::Engine's registered memory.
  std::span<std::byte> arena() const noexcept { return arena_; }

 private:
  void give_back(int index) noexcept;

  std::int64_t buffer_count_;
  std::int64_t buffer_size_bytes_;
  std::string what_;
  gpu::PinnedBuffer pinned_;
  aio::AlignedBuffer unpinned_;
  std::span<std::byte> arena_;
  int numa_node_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<int> free_;
  std::int64_t peak_in_use_ = 0;
};

}  // namespace strata::engine::memory
