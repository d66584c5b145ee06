#include "engine/memory/pinned_pool.h"

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"
#include "gpu/pinned_limit.h"

namespace strata::engine::memory {
namespace {

constexpr std::int64_t kPage = 4096;

std::int64_t round_up(std::int64_t value, std::int64_t to) {
  return (value + to - 1) / to * to;
}

// Binds [data, data+bytes) to the NUMA node of the calling thread when the machine has more than
// one node. Returns the node, or -1 (one node, or hwloc could not tell).
int bind_to_local_node(std::byte* data, std::int64_t bytes) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) return -1;
  int node = -1;
  if (hwloc_topology_load(topology) == 0 &&
      hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE) > 1) {
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    if (hwloc_get_last_cpu_location(topology, cpus, HWLOC_CPUBIND_THREAD) == 0) {
      hwloc_cpuset_to_nodeset(topology, cpus, nodes);
      int first = hwloc_bitmap_first(nodes);
      if (first >= 0) {
        hwloc_bitmap_only(nodes, static_cast<unsigned>(first));
        if (hwloc_set_area_membind(topology, data, static_cast<std::size_t>(bytes), nodes,
                                   HWLOC_MEMBIND_BIND,
                                   HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_BYNODESET) == 0)
          node = first;
        else
          base::logger("engine").debug("pinned pool: NUMA binding to node {} refused", first);
      }
    }
    hwloc_bitmap_free(nodes);
    hwloc_bitmap_free(cpus);
  }
  hwloc_topology_destroy(topology);
  return node;
}

}  // namespace

PinnedPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      index_(std::exchange(other.index_, -1)),
      bytes_(std::exchange(other.bytes_, {})) {}

PinnedPool::Lease& PinnedPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    index_ = std::exchange(other.index_, -1);
    bytes_ = std::exchange(other.bytes_, {});
  }
  return *this;
}

void PinnedPool::Lease::release() noexcept {
  if (pool_ != nullptr) pool_->give_back(index_);
  pool_ = nullptr;
  index_ = -1;
  bytes_ = {};
}

PinnedPool::PinnedPool(gpu::Device& device, std::int64_t buffer_count,
                       std::int64_t buffer_size_bytes, PinnedPoolOptions options)
    : buffer_count_(buffer_count),
      buffer_size_bytes_(round_up(buffer_size_bytes, kPage)),
      what_(std::move(options.what)) {
  if (buffer_count < 1 || buffer_size_bytes < 1)
    throw UserError(fmt::format("{}: {} buffers of {} bytes asked for; both must be at least 1",
                                what_, buffer_count, buffer_size_bytes),
                    "set offload_optimizer.buffer_count (and the buffer size) to positive values",
                    2);
  const std::int64_t total = buffer_count_ * buffer_size_bytes_;
  if (options.pin_memory) {
    const std::int64_t limit = gpu::memlock_limit_bytes();
    const std::int64_t held = device.pinned_bytes_in_use();
    if (limit >= 0 && held + total > limit)
      throw UserError(
          fmt::format("{} needs {} ({} bytes: {} buffers of {}) of page-locked memory, but the "
                      "locked-memory limit (RLIMIT_MEMLOCK) is {} and {} is already locked",
                      what_, base::format_bytes(total), total, buffer_count_,
                      base::format_bytes(buffer_size_bytes_), base::format_bytes(limit),
                      base::format_bytes(held)),
          fmt::format("raise the limit to at least {} KiB: `ulimit -l {}` (or `ulimit -l "
                      "unlimited`) in the shell that starts strata, `<user> - memlock unlimited` "
                      "in /etc/security/limits.conf, or `--ulimit memlock=-1:-1` for a "
                      "container; or set pin_memory to false",
                      (held + total + 1023) / 1024, (held + total + 1023) / 1024));
    pinned_ = device.allocate_pinned(total);
    arena_ = {pinned_.as<std::byte>(), static_cast<std::size_t>(total)};
  } else {
    unpinned_ = aio::AlignedBuffer(total);
    arena_ = unpinned_.span().first(static_cast<std::size_t>(total));
  }
  numa_node_ = bind_to_local_node(arena_.data(), total);
  free_.reserve(static_cast<std::size_t>(buffer_count_));
  for (std::int64_t i = buffer_count_ - 1; i >= 0; --i)
    free_.push_back(static_cast<int>(i));
}

PinnedPool::~PinnedPool() {
  const std::int64_t held = in_use();
  if (held > 0)
    base::logger("engine").error("{}: {} of {} buffers still held at shutdown", what_, held,
                                 buffer_count_);
}

PinnedPool::Lease PinnedPool::acquire() {
  std::unique_lock lock(mutex_);
  freed_.wait(lock, [&] { return !free_.empty(); });
  const int index = free_.back();
  free_.pop_back();
  peak_in_use_ = std::max(peak_in_use_, buffer_count_ - static_cast<std::int64_t>(free_.size()));
  return Lease(this, index,
               arena_.subspan(static_cast<std::size_t>(index * buffer_size_bytes_),
                              static_cast<std::size_t>(buffer_size_bytes_)));
}

PinnedPool::Lease PinnedPool::try_acquire() {
  std::unique_lock lock(mutex_);
  if (free_.empty()) return {};
  const int index = free_.back();
  free_.pop_back();
  peak_in_use_ = std::max(peak_in_use_, buffer_count_ - static_cast<std::int64_t>(free_.size()));
  return Lease(this, index,
               arena_.subspan(static_cast<std::size_t>(index * buffer_size_bytes_),
                              static_cast<std::size_t>(buffer_size_bytes_)));
}

std::int64_t PinnedPool::in_use() const {
  std::lock_guard lock(mutex_);
  return buffer_count_ - static_cast<std::int64_t>(free_.size());
}

std::int64_t PinnedPool::peak_in_use() const {
  std::lock_guard lock(mutex_);
  return peak_in_use_;
}

void PinnedPool::give_back(int index) noexcept {
  {
    std::lock_guard lock(mutex_);
    STRATA_ASSERT(static_cast<std::int64_t>(free_.size()) < buffer_count_);
    free_.push_back(index);
  }
  freed_.notify_one();
}

}  // namespace strata::engine::memory
