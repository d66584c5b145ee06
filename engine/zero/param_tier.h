#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/config/config.h"
#include "engine/memory/pinned_pool.h"
#include "engine/zero/commit_fence.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/param_tier_plan.h"
#include "engine/zero/shard_store.h"
#include "engine/zero/step_io.h"
#include "gpu/device.h"
#include "gpu/event.h"

namespace strata::engine::zero {

// Where a rank's parameter shards live between uses (docs/architecture.md, "The tiers"): each
// module's shard in the storage type, in device memory (offload_param none: DeviceShards), CPU
// memory (cpu: CpuShards) or the rank's NVMe swap file (nvme: NvmeShards), one ShardStore chosen
// once, by the tier's plan (plan()). The parameter coordinator fetches a module's shard to the
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
  ParamTier(gpu::Device& device, const FlatLayout& layout, const ParamTierOptions& options);
  // A tier of the plan alone (PlannedShards): it says where each shard would be and holds none,
  // for a step run on a counting device (the memory estimate). Its pool, book and store are not
  // used.
  struct PlanOnly {};
  ParamTier(const FlatLayout& layout, const ParamTierOptions& options, PlanOnly);
  ~ParamTier() override;
  ParamTier(const ParamTier&) = delete;
  ParamTier& operator=(const ParamTier&) = delete;
  // The memory a tier with `options` holds for `layout`: what its constructor reserves and
  // allocates, and what the memory estimate prints (engine/memory_estimate.cpp). Pure.
  static ParamTierPlan plan(const ParamTierOptions& options, const FlatLayout& layout);
  // Once the pool is open (and the store): takes the tier's CPU memory from its shelf and
  // registers the shards there in the book. Before any other call.
  void open() { store_->open(); }

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
             const gpu::Event* target_free = nullptr) {
    store_->fetch(module, stream, device_target, target_free);
  }
  // Whether module `module`'s shard is in CPU memory (the cpu tier's, or a module an nvme tier
  // keeps there by max_in_cpu): then upload_ahead takes it.
  bool in_cpu(int module) const { return store_->in_cpu(module); }
  // fetch() of a module in_cpu, but no stream is made to wait: the copy is enqueued on the H2D
  // stream now, ahead of use, and the returned event fires once it has run. Whoever reads
  // `device_target` waits for that event first (and a buffer given back before then must wait
  // for it too, on the stream it is given back on).
  std::shared_ptr<gpu::Event> upload_ahead(int module, void* device_target,
                                           const gpu::Event* target_free = nullptr) {
    return store_->upload_ahead(module, device_target, target_free);
  }
  // The module's shard in device memory when the tier is the device (nullptr otherwise): the
  // coordinator all-gathers straight from it.
  const std::byte* device_shard(int module) const { return store_->device_shard(module); }

  // Device tier: the whole partition in device memory, which an optimizer on the device writes.
  std::byte* device_partition() const { return store_->device_partition(); }
  // Whether the coordinator reads each module in place, lent by the tier, rather than in memory
  // of its own: the device tier of an unsharded layout (stage 0, or one rank) holds every whole
  // module in the storage type already, so a gathered copy would only double it. The new values
  // are written in stream order (an optimizer on the device) or after the gradients of what they
  // overwrite are on the host, which the compute stream makes after its last read of them (an
  // offloaded one, whose late ranges the next forward waits for in wait_committed).
  bool lends() const noexcept {
    return device_ == OffloadDevice::none && layout_.world_size() == 1;
  }
  // With lends(): module `module`'s memory in the partition (nullptr in a tier of the plan
  // alone, which holds none).
  std::byte* lent_module(int module) const;

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
  void expect(Range range) override { fence_.expect(range); }
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

  OffloadDevice device() const noexcept { return device_; }
  // True once a transfer failed: the shards can no longer be trusted.
  bool inconsistent() const noexcept { return store_->inconsistent(); }
  bool on_nvme(int module) const { return store_->on_nvme(module); }
  // Bytes read from and written to NVMe so far.
  std::int64_t nvme_read_bytes() const { return store_->nvme_read_bytes(); }
  std::int64_t nvme_write_bytes() const { return store_->nvme_write_bytes(); }
  // Bytes of committed ranges uploaded to the device tier so far, counted as enqueued.
  std::int64_t committed_upload_bytes() const noexcept { return store_->committed_upload_bytes(); }
  // The swap file's size (0 unless nvme).
  std::int64_t nvme_bytes() const { return store_->nvme_bytes(); }
  // Host bytes the tier holds outside the pool, none page-locked: the staging range when it is
  // not the pool's.
  std::int64_t unpinned_host_bytes() const { return store_->unpinned_host_bytes(); }
  // The tier's read buffers in its pool (-1: none).
  memory::PinnedPool::Shelf swap_shelf() const noexcept { return store_->swap_shelf(); }

 private:
  Range shard_range(int module) const;  // module `module`'s shard in the partition (elements)

  const FlatLayout& layout_;
  OffloadDevice device_;
  std::int64_t element_bytes_;  // the storage type's
  // The ranges an optimizer's thread commits while the engine's thread gathers modules.
  CommitFence fence_;
  // After the fence: the store goes first, settling the copies and reads still in flight.
  std::unique_ptr<ShardStore> store_;
};

}  // namespace strata::engine::zero
