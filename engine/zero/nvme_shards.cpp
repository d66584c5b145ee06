#include "engine/zero/nvme_shards.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "aio/errors.h"
#include "base/assert.h"
#include "base/log.h"
#include "base/timeline.h"

namespace strata::engine::zero {
namespace {

// Releases the held bookkeeping lock for one wait and takes it back when the scope ends, by
// return or by throw: a helper that waits in one hands the lock back in the state it got it.
class Unlocked {
 public:
  explicit Unlocked(std::unique_lock<std::mutex>& lock) : lock_(lock) { lock_.unlock(); }
  ~Unlocked() { lock_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  std::unique_lock<std::mutex>& lock_;
};

}  // namespace

NvmeShards::NvmeShards(gpu::Device& device, const FlatLayout& layout, const ParamTierPlan& plan,
                       const ParamTierOptions& options)
    : device_(device),
      layout_(layout),
      element_bytes_(options.element_bytes),
      pool_(*options.pool),
      book_(*options.book),
      kept_(device, layout, plan, options.element_bytes, *options.pool, *options.book),
      nvme_partition_(layout.module_count(), -1),
      reads_(layout.module_count()) {
  base::logger("engine").debug(
      "parameters: {} elements of this rank's shards kept in CPU memory (offload_param.max_in_cpu "
      "{}), {} modules' shards on NVMe",
      plan.host.buffer_bytes / element_bytes_, options.max_in_cpu, plan.extents.size());
  if (!plan.extents.empty()) reserve_extents(plan, options);
}

// Each module not in CPU memory gets an extent, read through the pool's buffers.
void NvmeShards::reserve_extents(const ParamTierPlan& plan, const ParamTierOptions& options) {
  const std::int64_t largest = plan.swap_buffers.buffer_bytes;
  const std::int64_t buffer_bytes = options.buffer_size * element_bytes_;
  if (largest > buffer_bytes)
    throw UserError(
        fmt::format("offload_param.buffer_size is {} elements, but a module's parameter shard "
                    "needs {} ({} bytes) in one buffer",
                    options.buffer_size, largest / element_bytes_, largest),
        fmt::format("set offload_param.buffer_size to at least {}", largest / element_bytes_), 2);
  shelf_ = pool_.reserve(plan.swap_buffers.count, largest, plan.swap_buffers.options);
  STRATA_ASSERT(options.store != nullptr && !options.store->is_open());
  store_ = options.store;
  first_extent_ = store_->reserve(plan.extents);
  extent_count_ = static_cast<int>(plan.extents.size());
  for (int m = 0; m < layout_.module_count(); ++m) {
    const int extent = plan.nvme_extent[m];
    if (extent < 0) continue;
    nvme_partition_[m] =
        book_.add_on_nvme(kept_.user(), fmt::format("parameter shard of module {}", m),
                          shard_bytes(m), *store_, first_extent_ + extent);
  }
}

// Copies still queued read pool buffers, and reads still in flight land in them: finish both
// before the pool goes.
NvmeShards::~NvmeShards() {
  while (!uploads_.empty()) {
    try {
      settle_uploads(true);
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter copy failed at shutdown: {}", error.what());
    }
  }
  for (std::optional<Read>& read : reads_) {
    if (!read) continue;
    try {
      book_.drop_clean(book_.finish_read(std::move(read->move)));
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter read dropped at shutdown: {}", error.what());
    }
    read.reset();
  }
}

std::int64_t NvmeShards::shard_bytes(int module) const {
  return layout_.module(module).shard_numel * element_bytes_;
}

UserError NvmeShards::fail(const std::exception& error, const char* doing) {
  failure_.fail(error.what());
  base::logger("engine").error("{} failed: {}", doing, error.what());
  return UserError(fmt::format("{} failed: {}; the parameter shards of this rank are now "
                               "inconsistent",
                               doing, error.what()),
                   fix_of(error) + "; training cannot continue from this state");
}

bool NvmeShards::prefetch(int module) {
  const std::lock_guard lock(mutex_);
  if (failure_.failed() || !on_nvme(module) || reads_[module]) return true;
  settle_uploads(false);
  if (has_upload(module)) {
    // The shard last fetched is copied again from its buffer; any other one still in a buffer
    // is read again once its copy has run, which fetch() waits for.
    return module == last_fetched_;
  }
  // One buffer is always left to a fetch that was not prefetched (free, or given back once its
  // copy has run), so fetch never waits on reads nobody will redeem.
  if (reads_in_flight_ + 1 >= pool_.buffer_count(shelf_)) return false;
  memory::PinnedPool::Lease lease = pool_.try_acquire(shelf_);
  if (!lease) return false;
  const memory::PartitionId id = nvme_partition_[module];
  memory::Residency::Move move =
      book_.begin_read(id, lease.bytes().first(static_cast<std::size_t>(shard_bytes(module))));
  reads_[module] = Read{std::move(lease), std::move(move)};
  ++reads_in_flight_;
  return true;
}

void NvmeShards::fetch(int module, gpu::Stream& stream, void* device_target,
                       const gpu::Event* target_free) {
  if (!on_nvme(module)) {
    kept_.fetch(module, stream, device_target, target_free);
    return;
  }
  std::unique_lock lock(mutex_);
  failure_.check();
  try {
    fetch_from_nvme(lock, module, stream, device_target, target_free);
  } catch (const aio::IoError& error) {
    // The read failed: the shard is lost. A copy's failure (or that of the work it waited for)
    // comes out as it is: the shards on NVMe are intact.
    throw fail(error, "reading a parameter shard");
  }
}

void NvmeShards::fetch_from_nvme(std::unique_lock<std::mutex>& lock, int module,
                                 gpu::Stream& stream, void* device_target,
                                 const gpu::Event* target_free) {
  settle_uploads(false);
  const auto again =
      std::ranges::find_if(uploads_, [&](const Upload& upload) { return upload.module == module; });
  if (again != uploads_.end() && module == last_fetched_) {
    fetch_again(again, stream, device_target, target_free);
    return;
  }
  if (again != uploads_.end()) wait_for_copy(lock, again->copied);
  last_fetched_ = module;
  std::optional<Read>& read = reads_[module];
  if (read) {
    --reads_in_flight_;
  } else {
    memory::PinnedPool::Lease lease = take_buffer(lock);
    const memory::PartitionId id = nvme_partition_[module];
    memory::Residency::Move move =
        book_.begin_read(id, lease.bytes().first(static_cast<std::size_t>(shard_bytes(module))));
    read = Read{std::move(lease), std::move(move)};
  }
  Read taken = std::move(*read);
  read.reset();
  memory::Residency::CpuView view;
  {
    // Not under the lock: an optimizer's thread commits other modules meanwhile.
    const base::Timeline::Scope waiting("host", "wait", "parameter read");
    const Unlocked unlocked(lock);
    view = book_.finish_read(std::move(taken.move));
  }
  std::unique_ptr<gpu::Event> copied = upload_to_device(
      device_, view.bytes().data(), shard_bytes(module), &stream, device_target, target_free);
  uploads_.push_back(Upload{module, std::move(taken.lease), std::move(view), std::move(copied)});
}

// The last module of forward is the first of backward: its shard is still in the buffer its last
// copy came from, unchanged since (a commit drops it first).
void NvmeShards::fetch_again(std::deque<Upload>::iterator again, gpu::Stream& stream,
                             void* device_target, const gpu::Event* target_free) {
  Upload upload = std::move(*again);
  uploads_.erase(again);
  if (upload.copied->query()) {
    // Its copy has run: one that failed with the work it waited for says so now (the buffer goes
    // back, and the next fetch reads the shard again), as settle_uploads would have.
    try {
      upload.copied->synchronize();
    } catch (...) {
      finish_upload(std::move(upload));  // gives the buffer back and rethrows
      throw;
    }
  }
  upload.copied = upload_to_device(device_, upload.view.bytes().data(), shard_bytes(upload.module),
                                   &stream, device_target, target_free);
  uploads_.push_back(std::move(upload));
}

// An earlier copy of the shard that has not run yet gives the partition back first. Its entry
// stays while this waits (not under the lock), for a commit's drop_read to find.
void NvmeShards::wait_for_copy(std::unique_lock<std::mutex>& lock,
                               std::shared_ptr<gpu::Event> earlier) {
  {
    const base::Timeline::Scope waiting("host", "wait", "parameter copy");
    const Unlocked unlocked(lock);
    try {
      earlier->synchronize();
    } catch (...) {
    }
  }
  settle_uploads(false);  // rethrows that copy's error
}

memory::PinnedPool::Lease NvmeShards::take_buffer(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    memory::PinnedPool::Lease lease = pool_.try_acquire(shelf_);
    if (lease) return lease;
    // The waits below are not under the lock: an optimizer's thread commits meanwhile.
    if (uploads_.empty()) {
      const Unlocked unlocked(lock);
      return pool_.acquire(shelf_);
    }
    // Every buffer is being copied from or read into: the oldest copy frees one first. Its entry
    // stays in uploads_ while this waits, so that a commit of its module meanwhile (drop_read)
    // still finds it; settle_uploads gives the buffer back (and rethrows the copy's error). The
    // caller has made last_fetched_ the module it fetches, so no entry here is kept for reuse.
    const std::shared_ptr<gpu::Event> oldest = uploads_.front().copied;
    {
      const Unlocked unlocked(lock);
      try {
        oldest->synchronize();
      } catch (...) {
      }
    }
    settle_uploads(false);
  }
}

// The shard's bytes on NVMe never changed, so its partition goes back there whether the copy ran
// or failed; a failure is the copy's (or the work it waited for), not the tier's, and is rethrown.
void NvmeShards::finish_upload(Upload upload) {
  std::exception_ptr failure;
  try {
    upload.copied->synchronize();
  } catch (...) {
    failure = std::current_exception();
  }
  book_.drop_clean(std::move(upload.view));
  if (failure) std::rethrow_exception(failure);
}

void NvmeShards::settle_uploads(bool all) {
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (!all && (it->module == last_fetched_ || !it->copied->query())) {
      ++it;
      continue;
    }
    Upload settled = std::move(*it);
    it = uploads_.erase(it);
    finish_upload(std::move(settled));
  }
}

std::span<std::byte> NvmeShards::values(Range range) {
  const std::span<std::byte> in_place = kept_.in_place(range);
  if (!in_place.empty()) return in_place;
  return staging_.take(0, static_cast<std::size_t>(range.size() * element_bytes_));
}

// Every write started is waited for, so none is still in flight over the staging memory when
// this throws. The waits are not under the lock (the engine's thread fetches meanwhile), which is
// taken back only to record a failure.
std::shared_ptr<gpu::Event> NvmeShards::write(Range range, bool /*expected*/) {
  if (!kept_.in_place(range).empty()) return nullptr;  // values() was the tier's own memory
  std::unique_lock lock(mutex_);
  failure_.check();
  std::vector<memory::Residency::Move> writes;
  std::exception_ptr failure;
  try {
    write_pieces(range, writes);
  } catch (...) {
    failure = std::current_exception();
  }
  lock.unlock();  // for the rest of the call, but to record a failure
  finish_writes(writes, failure);
  if (!failure) return nullptr;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    lock.lock();
    throw fail(error, "writing the new parameter shards");
  }
}

void NvmeShards::finish_writes(std::vector<memory::Residency::Move>& writes,
                               std::exception_ptr& failure) {
  for (memory::Residency::Move& move : writes) {
    try {
      book_.finish_write(std::move(move));
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
}

// Each module the range covers gets the covered piece of its shard overwritten: in CPU memory,
// or in its NVMe extent.
void NvmeShards::write_pieces(Range range, std::vector<memory::Residency::Move>& writes) {
  STRATA_ASSERT(range.begin % FlatLayout::kDefaultShardAlignment == 0);
  for (int m : layout_.modules_in(range)) {
    const ModuleSlice& slice = layout_.module(m);
    const std::int64_t begin = std::max(range.begin, slice.partition_offset);
    const std::int64_t end = std::min(range.end, slice.partition_offset + slice.shard_numel);
    const std::span<const std::byte> piece =
        staging_.slot(0).subspan(static_cast<std::size_t>((begin - range.begin) * element_bytes_),
                                 static_cast<std::size_t>((end - begin) * element_bytes_));
    const std::int64_t offset = (begin - slice.partition_offset) * element_bytes_;
    if (!on_nvme(m)) {
      std::memcpy(kept_.shard(m).data() + offset, piece.data(), piece.size());
      continue;
    }
    drop_read(m);
    writes.push_back(book_.begin_patch(nvme_partition_[m], offset, piece));
  }
}

void NvmeShards::drop_read(int module) {
  const auto upload = std::ranges::find_if(
      uploads_, [&](const Upload& pending) { return pending.module == module; });
  if (upload != uploads_.end()) {
    Upload settled = std::move(*upload);
    uploads_.erase(upload);
    finish_upload(std::move(settled));
  }
  std::optional<Read>& read = reads_[module];
  if (!read) return;
  Read taken = std::move(*read);
  read.reset();
  --reads_in_flight_;
  book_.drop_clean(book_.finish_read(std::move(taken.move)));
}

bool NvmeShards::has_upload(int module) const {
  return std::ranges::any_of(uploads_,
                             [&](const Upload& upload) { return upload.module == module; });
}

std::int64_t NvmeShards::nvme_read_bytes() const {
  return book_.counters(kept_.user()).moved(memory::Direction::nvme_read);
}

std::int64_t NvmeShards::nvme_write_bytes() const {
  return book_.counters(kept_.user()).moved(memory::Direction::nvme_write);
}

}  // namespace strata::engine::zero
