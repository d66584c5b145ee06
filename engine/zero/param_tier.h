#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "base/error.h"
#include "base/failure_latch.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/commit_fence.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/step_io.h"
#include "gpu/device.h"
#include "gpu/event.h"

namespace strata::engine::zero {

struct ParamTierOptions {
  // offload_param.device: none keeps the shards in device memory.
  OffloadDevice device = OffloadDevice::none;
  std::int64_t element_bytes = 2;  // the storage type: 2 (bf16, fp16) or 4 (fp32)
  // offload_param.max_in_cpu: with nvme, modules are kept in CPU memory, in module order, while
  // their shards total at most this many elements; the rest live on NVMe.
  std::int64_t max_in_cpu = 0;
  // offload_param.buffer_count x buffer_size (elements): the pinned buffers NVMe reads land in.
  std::int64_t buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;
  bool pin_memory = false;
  memory::NvmeStoreOptions nvme;  // nvme: where, and the aio settings (the engine's store's)
  // nvme: the store, not yet open, in which the tier reserves its extents (the engine's: the
  // rank's one store, or a second one under offload_param.nvme_path when that is another
  // directory).
  memory::NvmeStore* store = nullptr;
  // cpu, nvme: the rank's pool, not yet open, in which the tier reserves its shelves (the shards
  // it keeps in CPU memory, and with nvme offload_param.buffer_count read buffers); the engine
  // then opens it and calls open().
  memory::PinnedPool* pool = nullptr;
  // cpu, nvme: the rank's residency book, in which the tier registers its shards.
  memory::Residency* book = nullptr;
  // none, fed by an offloaded optimizer: the largest range it writes (its largest sub-group), so
  // that the two staging buffers its uploads go from are reserved in `pool` (a resident shelf),
  // page-locked as `upload_staging_pinned` says (offload_optimizer.pin_memory). From page-locked
  // memory an upload is a DMA that leaves the optimizer's thread free; from pageable memory the
  // driver copies it through a buffer of its own on the calling thread. 0: plain buffers that
  // grow to the largest range written (a tier only loaded into, or tests).
  std::int64_t upload_staging_elements = 0;
  bool upload_staging_pinned = false;
};

// Which modules' shards a parameter tier on `device` keeps in CPU memory: every one for cpu,
// none for none, and for nvme, in module order, each whose shard still fits with those kept
// before it in `max_in_cpu` elements (offload_param.max_in_cpu); the rest are on NVMe.
std::vector<bool> modules_in_cpu(const FlatLayout& layout, OffloadDevice device,
                                 std::int64_t max_in_cpu);

// Where a rank's parameter shards live between uses (docs/architecture.md, "The tiers"): each
// module's shard in the storage type, in device memory (offload_param none), CPU memory (cpu) or
// the rank's NVMe swap file (nvme). The parameter coordinator fetches a module's shard to the
// device before it all-gathers it. New values come in as ranges of the partition, through the
// ParamSink interface: at start-up, from a checkpoint's load, and from an offloaded optimizer's
// step one sub-group at a time; an optimizer on the device writes `device_partition()` itself.
//
// CPU memory: the cpu tier holds the whole partition (it is the tier). The nvme tier holds the
// modules max_in_cpu keeps (ranges wholly among them are written in place), the read buffers
// (offload_param.buffer_count) and one staging range (the largest range written that touches an
// NVMe-resident module, an optimizer sub-group); the device tier fed by an offloaded optimizer
// holds the staging range. Neither grows with the model beyond what is configured.
//
// A failed NVMe transfer (aio::IoError, ChecksumError) leaves the tier inconsistent: the call
// throws a UserError saying so, and so does every later one (the Engine adds where the run can
// be resumed from).
//
// The engine's thread drives it; the other callers are the optimizer's threads, which commit new
// ranges through values() + commit() while the engine's thread fetches modules: the overlapped
// step's (with a step the gradients cannot change), during backward, and LateSubGroups', during
// the next forward. So the calls that touch the NVMe bookkeeping hold one lock. The engine's
// thread releases it while it waits for a read, a copy, a buffer or a write; the committing
// thread does not while it settles the read or copy of a module it overwrites, which is quick
// because no fetch of that module is under way: during backward the overlapped step commits a
// sub-group once backward has passed every module it covers (backward fetches only earlier ones
// from then on), and during the next forward a module a commit is expected for is gathered only
// once it is committed (wait_committed), its prefetch refused until then. Only one thread at a
// time writes ranges (values() to commit()).
class ParamTier final : public ParamSink {
 public:
  // An empty tier: every range is written through values() + commit() before the first fetch.
  // Throws the pool's UserError for a shelf it refuses, and one naming offload_param.buffer_size
  // when a module's shard does not fit one buffer.
  ParamTier(gpu::Device& device, const FlatLayout& layout, ParamTierOptions options);
  ~ParamTier() override;
  // Once the pool is open (and the store): takes the tier's CPU memory from its shelf and
  // registers the shards there in the book. Before any other call.
  void open();
  ParamTier(const ParamTier&) = delete;
  ParamTier& operator=(const ParamTier&) = delete;

  // Starts reading module `module`'s shard from NVMe into a pool buffer when it lives there, is
  // not already read, and a buffer is free; true when a read is (now) in flight or not needed.
  bool prefetch(int module);
  // Enqueues the copy of module `module`'s shard to `device_target` (its shard bytes of device
  // memory), ordered before `stream`'s next work. `target_free`, when not null, fires once the
  // target's earlier use has run (memory reused in stream order): the copy waits for it. From
  // NVMe it first waits for the read (starting it if not prefetched); the pool buffer goes back
  // once the copy has run, which a later call notices without waiting for it, so the host never
  // waits for the device here unless every buffer is still being copied from.
  void fetch(int module, gpu::Stream& stream, void* device_target,
             const gpu::Event* target_free = nullptr);
  // Whether module `module`'s shard is in CPU memory (the cpu tier's, or a module an nvme tier
  // keeps there by max_in_cpu): then upload_ahead takes it.
  bool in_cpu(int module) const { return cpu_offset_[static_cast<std::size_t>(module)] >= 0; }
  // fetch() of a module in_cpu, but no stream is made to wait: the copy is enqueued on the H2D
  // stream now, ahead of use, and the returned event fires once it has run. Whoever reads
  // `device_target` waits for that event first (and a buffer given back before then must wait
  // for it too, on the stream it is given back on).
  std::shared_ptr<gpu::Event> upload_ahead(int module, void* device_target,
                                           const gpu::Event* target_free = nullptr);
  // The module's shard in device memory when the tier is the device (nullptr otherwise): the
  // coordinator all-gathers straight from it.
  const std::byte* device_shard(int module) const;

  // Device tier: the whole partition in device memory, which an optimizer on the device writes.
  std::byte* device_partition() const;

  // ParamSink: `range` starts on a multiple of 2048 elements (so that every piece written to the
  // swap file is whole 4 KiB blocks) and ends there or at the partition's end. commit() writes
  // the range to its tier: to CPU memory or NVMe before it returns, to device memory by an upload
  // that the compute stream's next work waits for (the host does not), or for an expected range
  // that wait_committed makes the reading stream wait for.
  // Throws aio errors for a failed write, as a UserError that makes the tier inconsistent.
  std::span<std::byte> values(Range range) override;
  void commit(Range range) override;
  // ParamSink: the ranges of a step's last sub-groups, which its thread commits while the
  // engine's thread gathers the next forward's modules (engine/zero/late_sub_groups.h).
  void expect(Range range) override;
  void forgo_expected(const std::string& why, const std::string& fix) override;
  // Before module `module`'s shard is read for the device (fetched, uploaded ahead, or copied
  // from the device tier by `stream`): waits until every expected range it overlaps is
  // committed, and with the device tier makes `stream` wait for those commits' uploads. Throws a
  // UserError naming the cause when they were forgone. The coordinator calls it before each
  // gather, always with the compute stream, the one stream that reads the device tier: once it
  // has waited for a range's upload the range is forgotten. prefetch() refuses such a module
  // until then.
  void wait_committed(int module, gpu::Stream& stream);
  // How many times wait_committed has waited for a commit so far, and how many uploads of
  // committed ranges it has made a stream wait for.
  std::int64_t commit_waits() const { return fence_.commit_waits(); }
  std::int64_t upload_waits() const { return fence_.upload_waits(); }

  OffloadDevice device() const noexcept { return options_.device; }
  // True once a transfer failed: the shards can no longer be trusted.
  bool inconsistent() const noexcept { return failure_.failed(); }
  bool on_nvme(int module) const;
  // Bytes read from and written to NVMe so far.
  std::int64_t nvme_read_bytes() const;
  std::int64_t nvme_write_bytes() const;
  // Bytes of committed ranges uploaded to the device tier so far, counted as enqueued.
  std::int64_t committed_upload_bytes() const noexcept { return committed_upload_bytes_; }
  // The swap file's size (0 unless nvme).
  std::int64_t nvme_bytes() const {
    return store_ ? store_->planned_bytes(first_extent_, extent_count_) : 0;
  }
  // Host bytes the tier holds outside the pool, none page-locked: the staging range when it is
  // not the pool's.
  std::int64_t unpinned_host_bytes() const;
  // The tier's shelves in its pool (-1: none): the read buffers, and the shards kept in CPU.
  memory::PinnedPool::Shelf swap_shelf() const noexcept { return pool_ ? shelf_ : -1; }
  memory::PinnedPool::Shelf host_shelf() const noexcept { return host_shelf_; }

 private:
  std::int64_t element_bytes() const noexcept { return options_.element_bytes; }
  // nvme: reserves the shelves, the extents and the book's NVMe partitions.
  void reserve_nvme(const memory::PinnedPoolOptions& host_shelf);
  std::int64_t shard_bytes(int module) const;
  Range shard_range(int module) const;  // module `module`'s shard in the partition (elements)
  std::int64_t partition_offset_bytes(int module) const;
  std::span<std::byte> host_shard(int module);
  std::int64_t cpu_offset_of(Range range) const;
  // Records `error` as the tier's failure and returns the UserError to throw.
  UserError fail(const std::exception& error, const char* doing);
  // The helpers taking `lock` (held on entry) release it while they wait; fetch_from_nvme and
  // take_buffer return with it held, commit_to_nvme without; any of them may throw without it.
  void fetch_from_nvme(std::unique_lock<std::mutex>& lock, int module, gpu::Stream& stream,
                       void* device_target, const gpu::Event* target_free);
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
  void commit_to_nvme(std::unique_lock<std::mutex>& lock, Range range);  // returns unlocked
  // The copy on the H2D stream; `waiter`, when not null, waits for it before its next work.
  std::unique_ptr<gpu::Event> upload(const std::byte* source, std::int64_t bytes,
                                     gpu::Stream* waiter, void* device_target,
                                     const gpu::Event* target_free = nullptr);

  gpu::Device& device_;
  const FlatLayout& layout_;
  ParamTierOptions options_;
  gpu::DeviceBuffer device_partition_;
  // The shards of the modules in CPU memory, back to back (a resident shelf of the pool): the
  // whole partition for the cpu tier, the modules max_in_cpu keeps for nvme. cpu_offset_[m]:
  // where module m's shard starts in it (elements), -1 for a module elsewhere.
  std::span<std::byte> host_partition_;
  std::int64_t host_bytes_ = 0;
  std::vector<std::int64_t> cpu_offset_;
  // values() of the nvme and device tiers. The device tier alternates two, both the size of the
  // largest range, so that one range's upload runs while the next is made: the host waits only
  // for the upload two commits back. The nvme tier writes synchronously from the first. With
  // upload_staging_elements the two are the pool's (staging_leases_), else staging_ grows.
  std::array<aio::AlignedBuffer, 2> staging_;
  std::array<memory::PinnedPool::Lease, 2> staging_leases_;
  memory::PinnedPool::Shelf staging_shelf_ = -1;
  std::array<std::shared_ptr<gpu::Event>, 2> staged_;  // each one's upload in flight
  std::atomic<std::int64_t> committed_upload_bytes_ = 0;
  int staging_slot_ = 0;
  // Staging slot `slot`'s memory.
  std::span<std::byte> staging(int slot);
  // Waits for staging slot `slot`'s upload, if any.
  void wait_staged(int slot);
  // The engine's pool, store and book, which outlive the tier.
  memory::PinnedPool* pool_ = nullptr;
  memory::PinnedPool::Shelf shelf_ = -1;       // the tier's read buffers in pool_
  memory::PinnedPool::Shelf host_shelf_ = -1;  // the shards kept in CPU memory
  memory::PinnedPool::Lease host_lease_;       // host_shelf_'s one buffer, from open() on
  memory::NvmeStore* store_ = nullptr;
  int first_extent_ = 0;  // this tier's extents in store_
  int extent_count_ = 0;
  memory::Residency* book_ = nullptr;
  memory::User user_ = -1;  // the tier's partitions in book_
  // Per module: its NVMe partition in the book (-1 when it is not on NVMe) and the read in
  // flight.
  std::vector<memory::PartitionId> nvme_partition_;
  struct Read {
    memory::PinnedPool::Lease lease;
    memory::Residency::Move move;
  };
  std::vector<std::optional<Read>> reads_;
  int reads_in_flight_ = 0;  // engaged entries of reads_
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
  std::deque<Upload> uploads_;
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
  // Held by every public call that reads or changes the members above (not the immutable ones,
  // nor failure_, which is thread-safe).
  mutable std::mutex mutex_;

  // Writes `range` (values() holds it) to its tier; the device tier's upload is waited for by
  // the compute stream unless `expected` (then wait_committed orders it) and is returned.
  std::shared_ptr<gpu::Event> write_range(Range range, bool expected);
  // The ranges an optimizer's thread commits while the engine's thread gathers modules.
  CommitFence fence_;
};

}  // namespace strata::engine::zero
