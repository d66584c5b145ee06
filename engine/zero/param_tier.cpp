#include "engine/zero/param_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "aio/errors.h"
#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/units.h"
#include "gpu/event.h"
#include "gpu/stream.h"

namespace strata::engine::zero {

std::vector<bool> modules_in_cpu(const FlatLayout& layout, OffloadDevice device,
                                 std::int64_t max_in_cpu) {
  std::vector<bool> kept(static_cast<std::size_t>(layout.module_count()),
                         device == OffloadDevice::cpu);
  if (device != OffloadDevice::nvme) return kept;
  std::int64_t in_cpu = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    const std::int64_t shard = layout.module(m).shard_numel;
    if (in_cpu + shard > max_in_cpu) continue;
    kept[static_cast<std::size_t>(m)] = true;
    in_cpu += shard;
  }
  return kept;
}

ParamTier::ParamTier(gpu::Device& device, const FlatLayout& layout, ParamTierOptions options)
    : device_(device),
      layout_(layout),
      options_(std::move(options)),
      cpu_offset_(static_cast<std::size_t>(layout.module_count()), -1),
      nvme_partition_(static_cast<std::size_t>(layout.module_count()), -1),
      reads_(static_cast<std::size_t>(layout.module_count())) {
  const std::int64_t bytes = layout.partition_numel() * element_bytes();
  if (options_.device == OffloadDevice::none) {
    device_partition_ = device.allocate(bytes, "parameter shards");
    if (options_.upload_staging_elements > 0) {
      STRATA_ASSERT(options_.pool != nullptr && !options_.pool->is_open());
      pool_ = options_.pool;
      staging_shelf_ = pool_->reserve(
          2, options_.upload_staging_elements * element_bytes(),
          memory::PinnedPoolOptions{options_.upload_staging_pinned,
                                    "new parameters on their way to the device", true});
    }
    return;
  }
  STRATA_ASSERT(options_.pool != nullptr && !options_.pool->is_open());
  STRATA_ASSERT(options_.book != nullptr);
  pool_ = options_.pool;
  book_ = options_.book;
  user_ = book_->add_user("parameter shards");
  const memory::PinnedPoolOptions host_shelf{options_.pin_memory, "parameter shards in CPU memory",
                                             true};
  if (options_.device == OffloadDevice::cpu) {
    for (int m = 0; m < layout.module_count(); ++m)
      cpu_offset_[static_cast<std::size_t>(m)] = layout.module(m).partition_offset;
    host_bytes_ = bytes;
    host_shelf_ = pool_->reserve(1, host_bytes_, host_shelf);
  } else {
    reserve_nvme(host_shelf);
  }
}

// NVMe: modules stay in CPU memory, in module order, while their shards total at most max_in_cpu
// elements; the others get an extent each, read through the pool's buffers.
void ParamTier::reserve_nvme(const memory::PinnedPoolOptions& host_shelf) {
  std::vector<std::int64_t> extents;
  std::int64_t in_cpu = 0;
  std::int64_t largest = 0;
  const std::vector<bool> kept = modules_in_cpu(layout_, OffloadDevice::nvme, options_.max_in_cpu);
  for (int m = 0; m < layout_.module_count(); ++m) {
    const std::int64_t shard = layout_.module(m).shard_numel;
    if (kept[static_cast<std::size_t>(m)]) {
      cpu_offset_[static_cast<std::size_t>(m)] = in_cpu;
      in_cpu += shard;
      continue;
    }
    nvme_partition_[static_cast<std::size_t>(m)] = static_cast<int>(extents.size());
    extents.push_back(shard_bytes(m));
    largest = std::max(largest, shard_bytes(m));
  }
  base::logger("engine").debug(
      "parameters: {} elements of this rank's shards kept in CPU memory (offload_param.max_in_cpu "
      "{}), {} modules' shards on NVMe",
      in_cpu, options_.max_in_cpu, extents.size());
  if (in_cpu > 0) {
    host_bytes_ = in_cpu * element_bytes();
    host_shelf_ = pool_->reserve(1, host_bytes_, host_shelf);
  }
  if (extents.empty()) return;
  const std::int64_t buffer_bytes = options_.buffer_size * element_bytes();
  if (largest > buffer_bytes)
    throw UserError(
        fmt::format("offload_param.buffer_size is {} elements, but a module's parameter shard "
                    "needs {} ({} bytes) in one buffer",
                    options_.buffer_size, largest / element_bytes(), largest),
        fmt::format("set offload_param.buffer_size to at least {}", largest / element_bytes()), 2);
  shelf_ = pool_->reserve(options_.buffer_count, largest,
                          memory::PinnedPoolOptions{options_.pin_memory, "parameter swap buffers"});
  STRATA_ASSERT(options_.store != nullptr && !options_.store->is_open());
  store_ = options_.store;
  first_extent_ = store_->reserve(extents);
  extent_count_ = static_cast<int>(extents.size());
  for (int m = 0; m < layout_.module_count(); ++m) {
    memory::PartitionId& id = nvme_partition_[static_cast<std::size_t>(m)];
    if (id < 0) continue;
    id = book_->add_on_nvme(user_, fmt::format("parameter shard of module {}", m), shard_bytes(m),
                            *store_, first_extent_ + id);
  }
}

void ParamTier::open() {
  if (staging_shelf_ >= 0) {
    STRATA_ASSERT(pool_->is_open());
    for (memory::PinnedPool::Lease& lease : staging_leases_)
      lease = pool_->acquire(staging_shelf_);
  }
  if (host_shelf_ < 0) return;
  STRATA_ASSERT(pool_->is_open());
  STRATA_ASSERT(!host_lease_);
  host_lease_ = pool_->acquire(host_shelf_);
  host_partition_ = host_lease_.bytes().first(static_cast<std::size_t>(host_bytes_));
  for (int m = 0; m < layout_.module_count(); ++m) {
    if (cpu_offset_[static_cast<std::size_t>(m)] < 0) continue;
    static_cast<void>(book_->add_in_cpu(user_, fmt::format("parameter shard of module {} (CPU)", m),
                                        host_shard(m)));
  }
}

ParamTier::~ParamTier() {
  // Copies still queued read pool buffers, and reads still in flight land in them: finish both
  // before the pool goes.
  while (!uploads_.empty()) {
    try {
      settle_uploads(true);
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter copy failed at shutdown: {}", error.what());
    }
  }
  for (int slot : {0, 1}) {
    try {
      wait_staged(slot);
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter upload failed at shutdown: {}", error.what());
    }
  }
  for (std::optional<Read>& read : reads_) {
    if (!read) continue;
    try {
      book_->drop_clean(book_->finish_read(std::move(read->move)));
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter read dropped at shutdown: {}", error.what());
    }
    read.reset();
  }
}

std::int64_t ParamTier::shard_bytes(int module) const {
  return layout_.module(module).shard_numel * element_bytes();
}

Range ParamTier::shard_range(int module) const {
  const ModuleSlice& slice = layout_.module(module);
  return Range{slice.partition_offset, slice.partition_offset + slice.shard_numel};
}

std::int64_t ParamTier::partition_offset_bytes(int module) const {
  return layout_.module(module).partition_offset * element_bytes();
}

std::span<std::byte> ParamTier::host_shard(int module) {
  const std::int64_t offset = cpu_offset_[static_cast<std::size_t>(module)];
  STRATA_ASSERT(offset >= 0);
  return host_partition_.subspan(static_cast<std::size_t>(offset * element_bytes()),
                                 static_cast<std::size_t>(shard_bytes(module)));
}

bool ParamTier::on_nvme(int module) const {
  return nvme_partition_[static_cast<std::size_t>(module)] >= 0;
}

UserError ParamTier::fail(const std::exception& error, const char* doing) {
  failure_.fail(error.what());
  base::logger("engine").error("{} failed: {}", doing, error.what());
  return UserError(fmt::format("{} failed: {}; the parameter shards of this rank are now "
                               "inconsistent",
                               doing, error.what()),
                   fix_of(error) + "; training cannot continue from this state");
}

bool ParamTier::prefetch(int module) {
  // Its NVMe bytes are about to change: a read now would be of the last step's.
  if (fence_.awaits(shard_range(module))) return false;
  const std::lock_guard lock(mutex_);
  if (failure_.failed() || !on_nvme(module) || reads_[static_cast<std::size_t>(module)])
    return true;
  settle_uploads(false);
  if (has_upload(module)) {
    // The shard last fetched is copied again from its buffer; any other one still in a buffer
    // is read again once its copy has run, which fetch() waits for.
    return module == last_fetched_;
  }
  // One buffer is always left to a fetch that was not prefetched (free, or given back once its
  // copy has run), so fetch never waits on reads nobody will redeem.
  if (reads_in_flight_ + 1 >= pool_->buffer_count(shelf_)) return false;
  memory::PinnedPool::Lease lease = pool_->try_acquire(shelf_);
  if (!lease) return false;
  const memory::PartitionId id = nvme_partition_[static_cast<std::size_t>(module)];
  memory::Residency::Move move =
      book_->begin_read(id, lease.bytes().first(static_cast<std::size_t>(shard_bytes(module))));
  reads_[static_cast<std::size_t>(module)] = Read{std::move(lease), std::move(move)};
  ++reads_in_flight_;
  return true;
}

void ParamTier::fetch(int module, gpu::Stream& stream, void* device_target,
                      const gpu::Event* target_free) {
  const std::int64_t bytes = shard_bytes(module);
  if (options_.device == OffloadDevice::none) {
    stream.copy(device_target, device_shard(module), bytes, gpu::CopyKind::device_to_device);
    return;
  }
  if (!on_nvme(module)) {
    upload(host_shard(module).data(), bytes, &stream, device_target, target_free);
    return;
  }
  std::unique_lock lock(mutex_);
  failure_.check();
  try {
    fetch_from_nvme(lock, module, stream, device_target, target_free);
  } catch (const aio::IoError& error) {
    if (!lock.owns_lock()) lock.lock();
    // The read failed: the shard is lost. A copy's failure (or that of the work it waited for)
    // comes out as it is: the shards on NVMe are intact.
    throw fail(error, "reading a parameter shard");
  }
}

void ParamTier::fetch_from_nvme(std::unique_lock<std::mutex>& lock, int module, gpu::Stream& stream,
                                void* device_target, const gpu::Event* target_free) {
  const std::int64_t bytes = shard_bytes(module);
  settle_uploads(false);
  const auto again =
      std::ranges::find_if(uploads_, [&](const Upload& upload) { return upload.module == module; });
  if (again != uploads_.end() && module == last_fetched_) {
    // The last module of forward is the first of backward: its shard is still in the buffer its
    // last copy came from, unchanged since (a commit drops it first).
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
    upload.copied =
        this->upload(upload.view.bytes().data(), bytes, &stream, device_target, target_free);
    uploads_.push_back(std::move(upload));
    return;
  }
  if (again != uploads_.end()) {
    // An earlier copy of the shard that has not run yet gives the partition back first. Its
    // entry stays while this waits (not under the lock), for a commit's drop_read to find.
    const std::shared_ptr<gpu::Event> earlier = again->copied;
    {
      const base::Timeline::Scope waiting("host", "wait", "parameter copy");
      lock.unlock();
      try {
        earlier->synchronize();
      } catch (...) {
      }
      lock.lock();
    }
    settle_uploads(false);  // rethrows that copy's error
  }
  last_fetched_ = module;
  std::optional<Read>& read = reads_[static_cast<std::size_t>(module)];
  if (read) {
    --reads_in_flight_;
  } else {
    memory::PinnedPool::Lease lease = take_buffer(lock);
    const memory::PartitionId id = nvme_partition_[static_cast<std::size_t>(module)];
    memory::Residency::Move move =
        book_->begin_read(id, lease.bytes().first(static_cast<std::size_t>(bytes)));
    read = Read{std::move(lease), std::move(move)};
  }
  Read taken = std::move(*read);
  read.reset();
  memory::Residency::CpuView view;
  {
    // Not under the lock: an optimizer's thread commits other modules meanwhile.
    const base::Timeline::Scope waiting("host", "wait", "parameter read");
    lock.unlock();
    view = book_->finish_read(std::move(taken.move));
    lock.lock();
  }
  std::unique_ptr<gpu::Event> copied =
      upload(view.bytes().data(), bytes, &stream, device_target, target_free);
  uploads_.push_back(Upload{module, std::move(taken.lease), std::move(view), std::move(copied)});
}

memory::PinnedPool::Lease ParamTier::take_buffer(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    memory::PinnedPool::Lease lease = pool_->try_acquire(shelf_);
    if (lease) return lease;
    // The waits below are not under the lock: an optimizer's thread commits meanwhile.
    if (uploads_.empty()) {
      lock.unlock();
      lease = pool_->acquire(shelf_);
      lock.lock();
      return lease;
    }
    // Every buffer is being copied from or read into: the oldest copy frees one first. Its entry
    // stays in uploads_ while this waits, so that a commit of its module meanwhile (drop_read)
    // still finds it; settle_uploads gives the buffer back (and rethrows the copy's error). The
    // caller has made last_fetched_ the module it fetches, so no entry here is kept for reuse.
    const std::shared_ptr<gpu::Event> oldest = uploads_.front().copied;
    lock.unlock();
    try {
      oldest->synchronize();
    } catch (...) {
    }
    lock.lock();
    settle_uploads(false);
  }
}

// The shard's bytes on NVMe never changed, so its partition goes back there whether the copy ran
// or failed; a failure is the copy's (or the work it waited for), not the tier's, and is rethrown.
void ParamTier::finish_upload(Upload upload) {
  std::exception_ptr failure;
  try {
    upload.copied->synchronize();
  } catch (...) {
    failure = std::current_exception();
  }
  book_->drop_clean(std::move(upload.view));
  if (failure) std::rethrow_exception(failure);
}

void ParamTier::settle_uploads(bool all) {
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

// The copy runs on the device's H2D stream, so that it overlaps the compute stream's work queued
// before it; `stream` waits for it before its next work.
std::unique_ptr<gpu::Event> ParamTier::upload(const std::byte* source, std::int64_t bytes,
                                              gpu::Stream* waiter, void* device_target,
                                              const gpu::Event* target_free) {
  gpu::Stream& copies = device_.h2d_stream();
  if (target_free != nullptr) copies.wait(*target_free);
  copies.copy(device_target, source, bytes, gpu::CopyKind::host_to_device);
  std::unique_ptr<gpu::Event> copied = device_.create_event();
  copies.record(*copied);
  if (waiter != nullptr) waiter->wait(*copied);
  return copied;
}

// The shard's CPU memory changes only by values() + commit(): during backward for modules
// backward has passed (their copies have run: backward waited for them), during the next forward
// for modules not yet gathered (the coordinator waits for the commit first), and so never under a
// copy enqueued for a module still ahead.
std::shared_ptr<gpu::Event> ParamTier::upload_ahead(int module, void* device_target,
                                                    const gpu::Event* target_free) {
  STRATA_ASSERT(in_cpu(module));
  return upload(host_shard(module).data(), shard_bytes(module), nullptr, device_target,
                target_free);
}

const std::byte* ParamTier::device_shard(int module) const {
  if (!device_partition_) return nullptr;
  return device_partition_.as<const std::byte>() + partition_offset_bytes(module);
}

std::byte* ParamTier::device_partition() const {
  return device_partition_.as<std::byte>();
}

// Where `range` starts in host_partition_ when every module it covers is in CPU memory (then
// they are consecutive there too: modules are kept in module order); -1 otherwise.
std::int64_t ParamTier::cpu_offset_of(Range range) const {
  if (options_.device == OffloadDevice::none) return -1;
  for (int m : layout_.modules_in(range)) {
    if (cpu_offset_[static_cast<std::size_t>(m)] < 0) return -1;
  }
  const int first = layout_.modules_in({range.begin, range.begin + 1}).front();
  return cpu_offset_[static_cast<std::size_t>(first)] +
         (range.begin - layout_.module(first).partition_offset);
}

// Only the one thread writing ranges touches the staging slots; the lock covers their growth,
// which unpinned_host_bytes() reads.
std::span<std::byte> ParamTier::values(Range range) {
  STRATA_ASSERT(range.begin >= 0 && range.begin < range.end &&
                range.end <= layout_.partition_numel());
  const auto bytes = static_cast<std::size_t>(range.size() * element_bytes());
  const std::int64_t in_cpu = cpu_offset_of(range);
  if (in_cpu >= 0)
    return host_partition_.subspan(static_cast<std::size_t>(in_cpu * element_bytes()), bytes);
  const int slot = staging_slot_;
  wait_staged(slot);
  if (staging_shelf_ >= 0) {
    STRATA_ASSERT(bytes <= staging(slot).size());  // upload_staging_elements is the largest range
    return staging(slot).first(bytes);
  }
  if (staging_[static_cast<std::size_t>(slot)].size_bytes() < static_cast<std::int64_t>(bytes)) {
    // Both slots grow together (the device tier uses both), each once its upload has run.
    const int slots = options_.device == OffloadDevice::none ? 2 : 1;
    for (int s = 0; s < slots; ++s) {
      wait_staged(s);
      aio::AlignedBuffer grown(static_cast<std::int64_t>(bytes));
      const std::lock_guard lock(mutex_);
      staging_[static_cast<std::size_t>(s)] = std::move(grown);
    }
  }
  return staging_[static_cast<std::size_t>(slot)].span().first(bytes);
}

void ParamTier::commit(Range range) {
  const bool expected = fence_.expects(range);
  std::shared_ptr<gpu::Event> uploaded = write_range(range, expected);
  // Written to CPU memory or NVMe, it is forgotten; uploaded, it is kept until the reading
  // stream has waited for its copy.
  if (expected) fence_.commit(range, std::move(uploaded));
}

std::shared_ptr<gpu::Event> ParamTier::write_range(Range range, bool expected) {
  const std::int64_t element = element_bytes();
  if (cpu_offset_of(range) >= 0) return nullptr;  // values() was the tier's own memory
  switch (options_.device) {
    case OffloadDevice::cpu:
      return nullptr;
    case OffloadDevice::none: {
      // An expected range is committed while the engine's thread enqueues the next forward: the
      // compute stream waits for its upload only where it reads it (wait_committed), not at
      // whatever module it has reached.
      std::shared_ptr<gpu::Event>& staged = staged_[static_cast<std::size_t>(staging_slot_)];
      committed_upload_bytes_ += range.size() * element;
      staged = upload(staging(staging_slot_).data(), range.size() * element,
                      expected ? nullptr : &device_.compute_stream(),
                      device_partition_.as<std::byte>() + range.begin * element);
      staging_slot_ = 1 - staging_slot_;
      return staged;
    }
    case OffloadDevice::nvme:
      break;
  }
  std::unique_lock lock(mutex_);
  failure_.check();
  try {
    commit_to_nvme(lock, range);
  } catch (const std::exception& error) {
    if (!lock.owns_lock()) lock.lock();
    throw fail(error, "writing the new parameter shards");
  }
  return nullptr;
}

void ParamTier::expect(Range range) {
  fence_.expect(range);
}

void ParamTier::forgo_expected(const std::string& why, const std::string& fix) {
  fence_.abandon(why.empty() ? "the optimizer step failed" : why, fix);
}

void ParamTier::wait_committed(int module, gpu::Stream& stream) {
  fence_.wait_for(shard_range(module),
                  [&stream](const gpu::Event& upload) { stream.wait(upload); });
}

// Each module the range covers gets the covered piece of its shard overwritten: in CPU memory,
// or in its NVMe extent.
void ParamTier::commit_to_nvme(std::unique_lock<std::mutex>& lock, Range range) {
  const std::int64_t element = element_bytes();
  STRATA_ASSERT(range.begin % FlatLayout::kDefaultShardAlignment == 0);
  std::vector<memory::Residency::Move> writes;
  std::exception_ptr failure;
  try {
    for (int m : layout_.modules_in(range)) {
      const ModuleSlice& slice = layout_.module(m);
      const std::int64_t begin = std::max(range.begin, slice.partition_offset);
      const std::int64_t end = std::min(range.end, slice.partition_offset + slice.shard_numel);
      const std::span<const std::byte> piece =
          staging(0).subspan(static_cast<std::size_t>((begin - range.begin) * element),
                             static_cast<std::size_t>((end - begin) * element));
      if (!on_nvme(m)) {
        std::memcpy(host_shard(m).data() + (begin - slice.partition_offset) * element, piece.data(),
                    piece.size());
        continue;
      }
      drop_read(m);
      writes.push_back(book_->begin_patch(nvme_partition_[static_cast<std::size_t>(m)],
                                          (begin - slice.partition_offset) * element, piece));
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Every write is waited for, so none is still in flight over the staging memory when this
  // throws; not under the lock (the engine's thread fetches meanwhile).
  lock.unlock();
  for (memory::Residency::Move& move : writes) {
    try {
      book_->finish_write(std::move(move));
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::span<std::byte> ParamTier::staging(int slot) {
  const auto index = static_cast<std::size_t>(slot);
  return staging_leases_[index] ? staging_leases_[index].bytes() : staging_[index].span();
}

void ParamTier::wait_staged(int slot) {
  std::shared_ptr<gpu::Event>& staged = staged_[static_cast<std::size_t>(slot)];
  if (!staged) return;
  const std::shared_ptr<gpu::Event> upload = std::move(staged);
  upload->synchronize();  // rethrows the copy's error
}

void ParamTier::drop_read(int module) {
  const auto upload = std::ranges::find_if(
      uploads_, [&](const Upload& pending) { return pending.module == module; });
  if (upload != uploads_.end()) {
    Upload settled = std::move(*upload);
    uploads_.erase(upload);
    finish_upload(std::move(settled));
  }
  std::optional<Read>& read = reads_[static_cast<std::size_t>(module)];
  if (!read) return;
  Read taken = std::move(*read);
  read.reset();
  --reads_in_flight_;
  book_->drop_clean(book_->finish_read(std::move(taken.move)));
}

bool ParamTier::has_upload(int module) const {
  return std::ranges::any_of(uploads_,
                             [&](const Upload& upload) { return upload.module == module; });
}

std::int64_t ParamTier::nvme_read_bytes() const {
  if (book_ == nullptr) return 0;
  return book_->counters(user_).moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_read)];
}

std::int64_t ParamTier::nvme_write_bytes() const {
  if (book_ == nullptr) return 0;
  return book_->counters(user_)
      .moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_write)];
}

std::int64_t ParamTier::unpinned_host_bytes() const {
  const std::lock_guard lock(mutex_);
  return staging_[0].size_bytes() + staging_[1].size_bytes();
}

}  // namespace strata::engine::zero
