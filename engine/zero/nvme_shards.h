#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/by_index.h"
#include "base/error.h"
#include "base/failure_latch.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/cpu_shards.h"
#include "engine/zero/param_tier_plan.h"
#include "engine/zero/range_staging.h"
#include "engine/zero/shard_store.h"
#include "gpu/device.h"

namespace strata::engine::zero {

// The nvme tier (offload_param nvme): the modules max_in_cpu keeps are in CPU memory (CpuShards),
// each other module's shard is an extent of the swap store, read into one of the pool's
// offload_param.buffer_count buffers and copied to the device from there. Ranges wholly among
// the modules in CPU memory are written in place, the others through one staging buffer.
//
// A failed NVMe transfer (aio::IoError, ChecksumError) leaves the shards inconsistent: the call
// throws a UserError saying so, and so does every later one.
//
// The calls that touch the NVMe bookkeeping hold one lock, which the engine's thread releases
// while it waits for a read, a copy or a buffer, and the committing thread while it waits for its
// writes, but not while it settles the read or copy of a module it overwrites (ParamTier says why
// that is quick).
class NvmeShards final : public ShardStore {
 public:
  // Reserves the shelves, the extents and the book's NVMe partitions. Throws the pool's
  // UserError for a shelf it refuses, and one naming offload_param.buffer_size when a module's
  // shard does not fit one buffer.
  NvmeShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
             const ParamTierOptions& options);
  ~NvmeShards() override;
  NvmeShards(const NvmeShards&) = delete;
  NvmeShards& operator=(const NvmeShards&) = delete;

  void open() override { kept_.open(); }
  bool prefetch(int module) override;
  void fetch(int module, gpu::Stream& stream, void* device_target,
             const gpu::Event* target_free) override;
  bool in_cpu(int module) const override { return kept_.in_cpu(module); }
  std::shared_ptr<gpu::Event> upload_ahead(int module, void* device_target,
                                           const gpu::Event* target_free) override {
    return kept_.upload_ahead(module, device_target, target_free);
  }
  std::span<std::byte> values(Range range) override;
  std::shared_ptr<gpu::Event> write(Range range, bool expected) override;

  bool inconsistent() const noexcept override { return failure_.failed(); }
  bool on_nvme(int module) const override { return nvme_partition_[module] >= 0; }
  std::int64_t nvme_read_bytes() const override;
  std::int64_t nvme_write_bytes() const override;
  std::int64_t nvme_bytes() const override {
    return store_ ? store_->planned_bytes(first_extent_, extent_count_) : 0;
  }
  std::int64_t unpinned_host_bytes() const override { return staging_.unpinned_bytes(); }
  memory::PinnedPool::Shelf swap_shelf() const noexcept override { return shelf_; }

 private:
  // A read of a shard from NVMe into a pool buffer, in flight.
  struct Read {
    memory::PinnedPool::Lease lease;
    memory::Residency::Move move;
  };
  // Shards read from NVMe whose copies to the device are enqueued, oldest first: each pool buffer
  // (and its partition's CPU view) is held until its copy's event fires.
  struct Upload {
    int module = -1;
    memory::PinnedPool::Lease lease;
    memory::Residency::CpuView view;
    // Shared: take_buffer() waits on it without the lock, leaving the entry where drop_read()
    // finds it.
    std::shared_ptr<gpu::Event> copied;
  };

  std::int64_t shard_bytes(int module) const;
  void reserve_extents(const ParamTierPlan& plan, const ParamTierOptions& options);
  // Records `error` as the tier's failure and returns the UserError to throw.
  UserError fail(const std::exception& error, const char* doing);
  // Locking, one rule: the helpers below but finish_writes are called with mutex_ held (or from
  // the destructor, which runs alone) and return, or throw, with it held. Those taking `lock`
  // (mutex_'s) release it only around a wait, in a scope of their own body that takes it back
  // however it ends; the others never release it. write() releases it in its own body around
  // finish_writes.
  void fetch_from_nvme(std::unique_lock<std::mutex>& lock, int module, gpu::Stream& stream,
                       void* device_target, const gpu::Event* target_free);
  // The shard last fetched copied again from its buffer.
  void fetch_again(std::deque<Upload>::iterator again, gpu::Stream& stream, void* device_target,
                   const gpu::Event* target_free);
  // Waits, not under the lock, for an earlier copy of a shard that has not run yet.
  void wait_for_copy(std::unique_lock<std::mutex>& lock, std::shared_ptr<gpu::Event> earlier);
  // Waits for a prefetched read of `module` and for a copy out of its pool buffer, and drops
  // them (its bytes are about to change).
  void drop_read(int module);
  // Whether a copy out of a pool buffer holds module `module`'s shard (uploads_).
  bool has_upload(int module) const;
  // A free pool buffer, waiting for the oldest copy out of one when none is.
  memory::PinnedPool::Lease take_buffer(std::unique_lock<std::mutex>& lock);
  // Gives back the pool buffers whose copies have run, but last_fetched_'s (all of them,
  // waiting, with `all`).
  void settle_uploads(bool all);
  // Writes `range`'s pieces in CPU memory and starts those on NVMe, adding each write to
  // `writes` as it starts (so that a throw leaves none unwaited for).
  void write_pieces(Range range, std::vector<memory::Residency::Move>& writes);
  // Waits for each of `writes`, keeping the first failure in `failure` (unless one is there);
  // called without the lock, it touches none of the bookkeeping.
  void finish_writes(std::vector<memory::Residency::Move>& writes, std::exception_ptr& failure);

  gpu::Device& device_;
  const FlatLayout& layout_;
  std::int64_t element_bytes_;
  // The engine's pool, store and book, which outlive the tier.
  memory::PinnedPool& pool_;
  memory::Residency& book_;
  memory::NvmeStore* store_ = nullptr;
  CpuShards kept_;                        // the modules max_in_cpu keeps in CPU memory
  memory::PinnedPool::Shelf shelf_ = -1;  // the read buffers in pool_
  int first_extent_ = 0;                  // this tier's extents in store_
  int extent_count_ = 0;
  // values() of the ranges not written in place, which commit() writes from synchronously.
  RangeStaging staging_{1};
  // Per module: its NVMe partition in the book (-1 when it is not on NVMe) and the read in
  // flight.
  base::ByIndex<memory::PartitionId> nvme_partition_;
  base::ByIndex<std::optional<Read>> reads_;
  int reads_in_flight_ = 0;     // engaged entries of reads_
  std::deque<Upload> uploads_;  // oldest first
  // The module last fetched from NVMe: its entry in uploads_ stays after its copy has run, until
  // another module is fetched from NVMe or a commit drops it, so that fetching it again (the
  // last module of forward is the first of backward) copies from its buffer. Which fetches read
  // NVMe then follows from the order of the calls alone, never from how far the copies have run:
  // a step's NVMe bytes are the same in every run.
  int last_fetched_ = -1;
  // Waits for `upload`'s copy and gives its buffer back, rethrowing the copy's error after.
  void finish_upload(Upload upload);
  // The first transfer's error that left the shards untrustworthy.
  base::FailureLatch failure_{
      "the parameter shards of this rank are inconsistent since an earlier transfer failed "
      "({}); training cannot continue from them",
      "training cannot continue from this state"};
  // Held by every call that reads or changes the NVMe bookkeeping above (not the immutable
  // members, nor failure_, which is thread-safe).
  mutable std::mutex mutex_;
};

}  // namespace strata::engine::zero
