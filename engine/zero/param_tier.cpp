#include "engine/zero/param_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"
#include "gpu/event.h"
#include "gpu/stream.h"

namespace strata::engine::zero {

ParamTier::ParamTier(gpu::Device& device, const FlatLayout& layout, ParamTierOptions options,
                     std::span<const std::byte> initial)
    : device_(device),
      layout_(layout),
      options_(std::move(options)),
      nvme_partition_(static_cast<std::size_t>(layout.module_count()), -1),
      reads_(static_cast<std::size_t>(layout.module_count())) {
  const std::int64_t bytes = layout.partition_numel() * options_.element_bytes;
  STRATA_ASSERT(static_cast<std::int64_t>(initial.size()) == bytes);
  if (options_.device == OffloadDevice::none) {
    device_partition_ = device.allocate(bytes, "parameter shards");
    gpu::Stream& stream = device.compute_stream();
    stream.copy(device_partition_.data(), initial.data(), bytes, gpu::CopyKind::host_to_device);
    stream.synchronize();
    return;
  }
  host_partition_ = aio::AlignedBuffer(std::max<std::int64_t>(bytes, 4096));
  std::memcpy(host_partition_.data(), initial.data(), initial.size());
  if (options_.device == OffloadDevice::cpu) return;

  // NVMe: the first modules up to max_in_cpu elements stay in CPU memory; the others get an
  // extent each.
  std::vector<std::int64_t> extents;
  std::int64_t in_cpu = 0;
  std::int64_t largest = 0;
  for (int m = 0; m < layout.module_count(); ++m) {
    const std::int64_t shard = layout.module(m).shard_numel;
    if (in_cpu + shard <= options_.max_in_cpu) {
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
  if (extents.empty()) return;
  const std::int64_t buffer_bytes = options_.buffer_size * options_.element_bytes;
  if (largest > buffer_bytes)
    throw UserError(
        fmt::format("offload_param.buffer_size is {} elements, but a module's parameter shard "
                    "needs {} ({} bytes) in one buffer",
                    options_.buffer_size, largest / options_.element_bytes, largest),
        fmt::format("set offload_param.buffer_size to at least {}",
                    largest / options_.element_bytes),
        2);
  pool_ = std::make_unique<memory::PinnedPool>(
      device, options_.buffer_count, largest,
      memory::PinnedPoolOptions{options_.pin_memory, "parameter swap buffers"});
  memory::NvmeStoreOptions store_options = options_.nvme;
  store_options.store_name = "params";
  if (pool_->pinned()) store_options.registered = pool_->arena();
  store_ = std::make_unique<memory::NvmeStore>(std::move(store_options), extents);
  residency_ = std::make_unique<memory::Residency>(store_.get());
  std::vector<memory::Residency::Move> writes;
  for (int m = 0; m < layout.module_count(); ++m) {
    const int extent = nvme_partition_[static_cast<std::size_t>(m)];
    if (extent < 0) continue;
    const memory::PartitionId id = residency_->add_in_cpu_with_extent(
        fmt::format("parameter shard of module {}", m), host_shard(m), extent);
    STRATA_ASSERT(id == extent);
    writes.push_back(residency_->begin_write(residency_->view(id)));
  }
  for (memory::Residency::Move& move : writes)
    residency_->finish_write(std::move(move));
}

ParamTier::~ParamTier() {
  // Reads still in flight land in pool buffers: finish them before the pool goes.
  for (std::optional<Read>& read : reads_) {
    if (!read) continue;
    try {
      residency_->drop_clean(residency_->finish_read(std::move(read->move)));
    } catch (const std::exception& error) {
      base::logger("engine").debug("parameter read dropped at shutdown: {}", error.what());
    }
    read.reset();
  }
}

std::int64_t ParamTier::shard_bytes(int module) const {
  return layout_.module(module).shard_numel * options_.element_bytes;
}

std::int64_t ParamTier::partition_offset_bytes(int module) const {
  return layout_.module(module).partition_offset * options_.element_bytes;
}

std::span<std::byte> ParamTier::host_shard(int module) {
  return host_partition_.span().subspan(static_cast<std::size_t>(partition_offset_bytes(module)),
                                        static_cast<std::size_t>(shard_bytes(module)));
}

bool ParamTier::on_nvme(int module) const {
  return nvme_partition_[static_cast<std::size_t>(module)] >= 0;
}

void ParamTier::check_consistent() const {
  if (!failure_.empty())
    throw UserError(fmt::format("the parameter shards of this rank are inconsistent since an "
                                "earlier transfer failed ({}); training cannot continue from them",
                                failure_),
                    "training cannot continue from this state");
}

UserError ParamTier::fail(const std::exception& error, const char* doing) {
  if (failure_.empty()) failure_ = error.what();
  base::logger("engine").error("{} failed: {}", doing, error.what());
  return UserError(fmt::format("{} failed: {}; the parameter shards of this rank are now "
                               "inconsistent",
                               doing, error.what()),
                   fix_of(error) + "; training cannot continue from this state");
}

bool ParamTier::prefetch(int module) {
  if (!failure_.empty() || !on_nvme(module) || reads_[static_cast<std::size_t>(module)])
    return true;
  // One buffer always stays free for a fetch that was not prefetched, so fetch never waits on
  // reads nobody will redeem.
  if (pool_->in_use() + 1 >= pool_->buffer_count()) return false;
  memory::PinnedPool::Lease lease = pool_->try_acquire();
  if (!lease) return false;
  const memory::PartitionId id = nvme_partition_[static_cast<std::size_t>(module)];
  memory::Residency::Move move = residency_->begin_read(
      id, lease.bytes().first(static_cast<std::size_t>(shard_bytes(module))));
  reads_[static_cast<std::size_t>(module)] = Read{std::move(lease), std::move(move)};
  return true;
}

void ParamTier::fetch(int module, gpu::Stream& stream, void* device_target) {
  const std::int64_t bytes = shard_bytes(module);
  if (options_.device == OffloadDevice::none) {
    stream.copy(device_target, device_shard(module), bytes, gpu::CopyKind::device_to_device);
    return;
  }
  if (!on_nvme(module)) {
    upload(host_shard(module).data(), bytes, stream, device_target);
    return;
  }
  check_consistent();
  try {
    fetch_from_nvme(module, stream, device_target);
  } catch (const std::exception& error) {
    throw fail(error, "reading a parameter shard");
  }
}

void ParamTier::fetch_from_nvme(int module, gpu::Stream& stream, void* device_target) {
  const std::int64_t bytes = shard_bytes(module);
  std::optional<Read>& read = reads_[static_cast<std::size_t>(module)];
  if (!read) {
    memory::PinnedPool::Lease lease = pool_->acquire();
    const memory::PartitionId id = nvme_partition_[static_cast<std::size_t>(module)];
    memory::Residency::Move move =
        residency_->begin_read(id, lease.bytes().first(static_cast<std::size_t>(bytes)));
    read = Read{std::move(lease), std::move(move)};
  }
  Read taken = std::move(*read);
  read.reset();
  memory::Residency::CpuView view = residency_->finish_read(std::move(taken.move));
  // The pool buffer goes back only once the copy out of it has run.
  upload(view.bytes().data(), bytes, stream, device_target)->synchronize();
  residency_->drop_clean(std::move(view));
}

// The copy runs on the device's H2D stream, so that it overlaps the compute stream's work queued
// before it; `stream` waits for it before its next work.
std::unique_ptr<gpu::Event> ParamTier::upload(const std::byte* source, std::int64_t bytes,
                                              gpu::Stream& stream, void* device_target) {
  gpu::Stream& copies = device_.h2d_stream();
  copies.copy(device_target, source, bytes, gpu::CopyKind::host_to_device);
  std::unique_ptr<gpu::Event> copied = device_.create_event();
  copies.record(*copied);
  stream.wait(*copied);
  return copied;
}

const std::byte* ParamTier::device_shard(int module) const {
  if (!device_partition_) return nullptr;
  return device_partition_.as<const std::byte>() + partition_offset_bytes(module);
}

std::byte* ParamTier::device_partition() const {
  return device_partition_.as<std::byte>();
}

std::span<std::byte> ParamTier::host_partition() {
  if (host_partition_.size_bytes() == 0) {
    host_partition_ = aio::AlignedBuffer(
        std::max<std::int64_t>(layout_.partition_numel() * options_.element_bytes, 4096));
  }
  return host_partition_.span().first(
      static_cast<std::size_t>(layout_.partition_numel() * options_.element_bytes));
}

void ParamTier::store_from_host(gpu::Stream& stream) {
  if (options_.device == OffloadDevice::none) {
    stream.copy(device_partition_.data(), host_partition_.data(), device_partition_.bytes(),
                gpu::CopyKind::host_to_device);
    stream.synchronize();
    return;
  }
  if (!store_) return;
  check_consistent();
  try {
    write_to_nvme();
  } catch (const std::exception& error) {
    throw fail(error, "writing the new parameter shards");
  }
}

void ParamTier::write_to_nvme() {
  std::vector<memory::Residency::Move> writes;
  std::exception_ptr failure;
  for (int m = 0; m < layout_.module_count(); ++m) {
    if (!on_nvme(m)) continue;
    const memory::PartitionId id = nvme_partition_[static_cast<std::size_t>(m)];
    writes.push_back(residency_->begin_write(residency_->replace(id, host_shard(m))));
  }
  // Every write is waited for, so none is still in flight over host memory when this throws.
  for (memory::Residency::Move& move : writes) {
    try {
      residency_->finish_write(std::move(move));
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::int64_t ParamTier::nvme_read_bytes() const {
  if (!residency_) return 0;
  return residency_->counters().moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_read)];
}

std::int64_t ParamTier::nvme_write_bytes() const {
  if (!residency_) return 0;
  return residency_->counters()
      .moved_bytes[static_cast<std::size_t>(memory::Direction::nvme_write)];
}

std::int64_t ParamTier::unpinned_host_bytes() const {
  std::int64_t bytes = host_partition_.size_bytes();
  if (pool_ && !pool_->pinned()) bytes += pool_->buffer_count() * pool_->buffer_size_bytes();
  return bytes;
}

}  // namespace strata::engine::zero
