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
#include "base/by_index.h"
#include "gpu/device.h"

namespace strata::engine::memory {

struct PinnedPoolOptions {
  // Page-locked (Device::allocate_pinned) when true (config `pin_memory`); plain 4 KiB-aligned
  // host memory when false (no RLIMIT_MEMLOCK needed, slower H2D copies on a real GPU).
  bool pin_memory = true;
  // Names the shelf in errors and logs ("optimizer swap buffers").
  std::string what = "pinned pool";
  // Memory its client holds for the whole run (a tier's CPU-resident partition: one buffer,
  // taken once the pool opens) rather than swap buffers lent for one transfer at a time.
  bool resident = false;
};

// A rank's host memory for its offloaded model states, one arena with a size class (a shelf) per
// use: the swap buffers of its clients (the parameter tier's read buffers, the optimizer's
// sub-group buffers, the gradient reducer's) and the memory they keep in CPU for the whole run
// (the cpu tier's shards, the optimizer's CPU states, the gradient partition), each shelf
// `buffer_count` buffers of one size rounded up to 4 KiB. Planned before it opens, as the NvmeStore
// is: each client reserves its shelf as it is made, then open() allocates them all at once: the
// page-locked shelves from one 4 KiB-aligned arena (so that aio can register it whole), the others
// from one plain aligned arena, each bound to the NUMA node of the calling thread where hwloc sees
// more than one node. Borrowed through move-only leases; `acquire` waits (condition variable) while
// all of a shelf's buffers are lent, it never allocates more. Thread-safe once open.
class PinnedPool {
 public:
  // A shelf's number, from reserve(); the one-shelf constructor's is 0.
  using Shelf = int;

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
    // Which buffer of its shelf (0 .. buffer_count-1).
    int index() const noexcept { return index_; }
    void release() noexcept;

   private:
    friend class PinnedPool;
    Lease(PinnedPool* pool, Shelf shelf, int index, std::span<std::byte> bytes)
        : pool_(pool), shelf_(shelf), index_(index), bytes_(bytes) {}
    PinnedPool* pool_ = nullptr;
    Shelf shelf_ = -1;
    int index_ = -1;
    std::span<std::byte> bytes_;
  };

  // An empty pool to reserve shelves in, then open.
  explicit PinnedPool(gpu::Device& device);
  // One shelf, reserved and opened (tests, benchmarks); throws what reserve() and open() throw.
  PinnedPool(gpu::Device& device, std::int64_t buffer_count, std::int64_t buffer_size_bytes,
             PinnedPoolOptions options = {});
  // Logs one error line per shelf naming how many buffers are still lent (their leases then
  // dangle).
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // Plans a shelf of `buffer_count` buffers of `buffer_size_bytes`; before open() only. Throws
  // UserError (exit status 2) for buffer_count < 1 or buffer_size_bytes < 1.
  Shelf reserve(std::int64_t buffer_count, std::int64_t buffer_size_bytes,
                PinnedPoolOptions options);
  // Allocates every shelf. Throws UserError (exit status 1) when the page-locked shelves need more
  // than this process may lock beside what the device already holds (gpu::pinned_limit():
  // RLIMIT_MEMLOCK, lifted by CAP_IPC_LOCK): the message names the shelves, how many bytes are
  // needed, the limit, and how to raise it (or to set pin_memory false). A training run settles
  // pin_memory before its pool is made (zero::settle_pin_memory), so it does not meet this.
  // Opening a pool with no shelves allocates nothing.
  void open();
  bool is_open() const noexcept { return open_; }

  // Blocks until a buffer of `shelf` is free.
  Lease acquire(Shelf shelf = 0);
  // A buffer of `shelf` if one is free now, else an empty lease.
  Lease try_acquire(Shelf shelf = 0);

  int shelf_count() const noexcept { return shelves_.size(); }
  std::int64_t buffer_count(Shelf shelf = 0) const { return at(shelf).buffer_count; }
  // The size of each buffer of `shelf`, a multiple of 4 KiB (at least the size asked for).
  std::int64_t buffer_size_bytes(Shelf shelf = 0) const { return at(shelf).buffer_size_bytes; }
  bool pinned(Shelf shelf = 0) const { return at(shelf).pin_memory; }
  // Whether the shelf is memory held for the run rather than swap buffers (PinnedPoolOptions).
  bool resident(Shelf shelf = 0) const { return at(shelf).resident; }
  const std::string& what(Shelf shelf = 0) const { return at(shelf).what; }
  // Every buffer of `shelf`, back to back (once open): part of pinned_arena() when the shelf is
  // page-locked, so that a second store registers only what it reads into.
  std::span<std::byte> shelf_memory(Shelf shelf) const;
  // Bytes of the shelves that are swap buffers (not resident), page-locked or not.
  std::int64_t swap_buffer_bytes() const;
  std::int64_t in_use(Shelf shelf = 0) const;
  std::int64_t peak_in_use(Shelf shelf = 0) const;
  // Host bytes of the shelves that are not page-locked (page-locked ones are the device's to
  // count).
  std::int64_t unpinned_bytes() const;
  // The NUMA node the arenas are bound to, or -1 when there is one node or hwloc could not tell.
  int numa_node() const noexcept { return numa_node_; }
  // Every page-locked buffer, for aio::Engine's registered memory (empty when none is).
  std::span<std::byte> pinned_arena() const noexcept { return pinned_arena_; }

 private:
  struct ShelfState {
    std::int64_t buffer_count = 0;
    std::int64_t buffer_size_bytes = 0;
    bool pin_memory = false;
    bool resident = false;
    std::string what;
    std::span<std::byte> buffers;  // once open
    std::vector<int> free;
    std::int64_t peak_in_use = 0;
  };
  const ShelfState& at(Shelf shelf) const;
  Lease lend(Shelf shelf);  // with mutex_ held and a free buffer
  void give_back(Shelf shelf, int index) noexcept;

  gpu::Device& device_;
  bool open_ = false;
  base::ByIndex<ShelfState> shelves_;
  gpu::PinnedBuffer pinned_;
  aio::AlignedBuffer unpinned_;
  std::span<std::byte> pinned_arena_;
  int numa_node_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
};

}  // namespace strata::engine::memory
