#include "engine/memory/pinned_pool.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hwloc.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/round_up.h"
#include "base/units.h"
#include "gpu/pinned_limit.h"

namespace strata::engine::memory {
namespace {

constexpr std::int64_t kPage = 4096;

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
      shelf_(std::exchange(other.shelf_, -1)),
      index_(std::exchange(other.index_, -1)),
      bytes_(std::exchange(other.bytes_, {})) {}

PinnedPool::Lease& PinnedPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    shelf_ = std::exchange(other.shelf_, -1);
    index_ = std::exchange(other.index_, -1);
    bytes_ = std::exchange(other.bytes_, {});
  }
  return *this;
}

void PinnedPool::Lease::release() noexcept {
  if (pool_ != nullptr) pool_->give_back(shelf_, index_);
  pool_ = nullptr;
  shelf_ = -1;
  index_ = -1;
  bytes_ = {};
}

PinnedPool::PinnedPool(gpu::Device& device) : device_(device) {}

PinnedPool::PinnedPool(gpu::Device& device, std::int64_t buffer_count,
                       std::int64_t buffer_size_bytes, PinnedPoolOptions options)
    : device_(device) {
  reserve(buffer_count, buffer_size_bytes, std::move(options));
  open();
}

PinnedPool::~PinnedPool() {
  for (Shelf s = 0; s < shelves_.size(); ++s) {
    const std::int64_t held = in_use(s);
    if (held > 0)
      base::logger("engine").error("{}: {} of {} buffers still held at shutdown", shelves_[s].what,
                                   held, shelves_[s].buffer_count);
  }
}

PinnedPool::Shelf PinnedPool::reserve(std::int64_t buffer_count, std::int64_t buffer_size_bytes,
                                      PinnedPoolOptions options) {
  STRATA_ASSERT(!open_);
  if (buffer_count < 1 || buffer_size_bytes < 1)
    throw UserError(fmt::format("{}: {} buffers of {} bytes asked for; both must be at least 1",
                                options.what, buffer_count, buffer_size_bytes),
                    "set the offload section's buffer_count (and its buffer size) to positive "
                    "values",
                    2);
  ShelfState shelf;
  shelf.buffer_count = buffer_count;
  shelf.buffer_size_bytes = base::round_up(buffer_size_bytes, kPage);
  shelf.pin_memory = options.pin_memory;
  shelf.resident = options.resident;
  shelf.what = std::move(options.what);
  shelves_.push_back(std::move(shelf));
  return shelves_.size() - 1;
}

void PinnedPool::open() {
  STRATA_ASSERT(!open_);
  std::int64_t pinned_total = 0;
  std::int64_t unpinned_total = 0;
  std::vector<std::string> pinned_names;
  for (const ShelfState& shelf : shelves_) {
    const std::int64_t bytes = shelf.buffer_count * shelf.buffer_size_bytes;
    if (shelf.pin_memory) {
      pinned_total += bytes;
      pinned_names.push_back(fmt::format("{} ({} buffers of {})", shelf.what, shelf.buffer_count,
                                         base::format_bytes(shelf.buffer_size_bytes)));
    } else {
      unpinned_total += bytes;
    }
  }
  if (pinned_total > 0) {
    // The kernel's rule (gpu/pinned_limit.h): RLIMIT_MEMLOCK, unless CAP_IPC_LOCK lifts it.
    const gpu::PinnedLimit limit = gpu::pinned_limit();
    const std::int64_t held = device_.pinned_bytes_in_use();
    if (!limit.allows(held, pinned_total)) {
      throw UserError(
          fmt::format("{} need {} ({} bytes) of page-locked memory, but this process may lock {} "
                      "and {} is already locked",
                      fmt::join(pinned_names, " and "), base::format_bytes(pinned_total),
                      pinned_total, limit.describe(), base::format_bytes(held)),
          fmt::format("{}. Or set pin_memory to false",
                      gpu::raise_pinned_limit_fix(held + pinned_total)));
    }
    pinned_ = device_.allocate_pinned(pinned_total);
    pinned_arena_ = {pinned_.as<std::byte>(), static_cast<std::size_t>(pinned_total)};
    numa_node_ = bind_to_local_node(pinned_arena_.data(), pinned_total);
  }
  if (unpinned_total > 0) {
    unpinned_ = aio::AlignedBuffer(unpinned_total);
    const int node = bind_to_local_node(unpinned_.data(), unpinned_total);
    if (numa_node_ < 0) numa_node_ = node;
  }
  std::int64_t pinned_offset = 0;
  std::int64_t unpinned_offset = 0;
  for (ShelfState& shelf : shelves_) {
    const std::int64_t bytes = shelf.buffer_count * shelf.buffer_size_bytes;
    std::int64_t& offset = shelf.pin_memory ? pinned_offset : unpinned_offset;
    std::byte* base = shelf.pin_memory ? pinned_arena_.data() : unpinned_.data();
    shelf.buffers = {base + offset, static_cast<std::size_t>(bytes)};
    offset += bytes;
    shelf.free.reserve(static_cast<std::size_t>(shelf.buffer_count));
    for (std::int64_t i = shelf.buffer_count - 1; i >= 0; --i)
      shelf.free.push_back(static_cast<int>(i));
  }
  open_ = true;
}

const PinnedPool::ShelfState& PinnedPool::at(Shelf shelf) const {
  STRATA_ASSERT(shelf >= 0 && shelf < shelf_count());
  return shelves_[shelf];
}

PinnedPool::Lease PinnedPool::lend(Shelf shelf) {
  ShelfState& state = shelves_[shelf];
  const int index = state.free.back();
  state.free.pop_back();
  state.peak_in_use = std::max(state.peak_in_use,
                               state.buffer_count - static_cast<std::int64_t>(state.free.size()));
  return Lease(this, shelf, index,
               state.buffers.subspan(static_cast<std::size_t>(index * state.buffer_size_bytes),
                                     static_cast<std::size_t>(state.buffer_size_bytes)));
}

PinnedPool::Lease PinnedPool::acquire(Shelf shelf) {
  STRATA_ASSERT(open_);
  at(shelf);
  std::unique_lock lock(mutex_);
  const std::vector<int>& free = shelves_[shelf].free;
  freed_.wait(lock, [&] { return !free.empty(); });
  return lend(shelf);
}

PinnedPool::Lease PinnedPool::try_acquire(Shelf shelf) {
  STRATA_ASSERT(open_);
  at(shelf);
  std::unique_lock lock(mutex_);
  if (shelves_[shelf].free.empty()) return {};
  return lend(shelf);
}

std::int64_t PinnedPool::in_use(Shelf shelf) const {
  const ShelfState& state = at(shelf);
  if (!open_) return 0;
  std::lock_guard lock(mutex_);
  return state.buffer_count - static_cast<std::int64_t>(state.free.size());
}

std::int64_t PinnedPool::peak_in_use(Shelf shelf) const {
  const ShelfState& state = at(shelf);
  std::lock_guard lock(mutex_);
  return state.peak_in_use;
}

std::int64_t PinnedPool::unpinned_bytes() const {
  std::int64_t bytes = 0;
  for (const ShelfState& shelf : shelves_)
    if (!shelf.pin_memory) bytes += shelf.buffer_count * shelf.buffer_size_bytes;
  return bytes;
}

std::span<std::byte> PinnedPool::shelf_memory(Shelf shelf) const {
  STRATA_ASSERT(open_);
  return at(shelf).buffers;
}

std::int64_t PinnedPool::swap_buffer_bytes() const {
  std::int64_t bytes = 0;
  for (const ShelfState& shelf : shelves_)
    if (!shelf.resident) bytes += shelf.buffer_count * shelf.buffer_size_bytes;
  return bytes;
}

void PinnedPool::give_back(Shelf shelf, int index) noexcept {
  {
    std::lock_guard lock(mutex_);
    ShelfState& state = shelves_[shelf];
    STRATA_ASSERT(static_cast<std::int64_t>(state.free.size()) < state.buffer_count);
    state.free.push_back(index);
  }
  // Waiters of every shelf share the condition variable.
  freed_.notify_all();
}

}  // namespace strata::engine::memory
