#include "engine/memory/residency.h"

#include <algorithm>
#include <utility>

#include "base/assert.h"
#include "engine/memory/nvme_store.h"

namespace strata::engine::memory {
namespace {

constexpr std::int64_t kBlockBytes = 4096;  // the swap file's unit of O_DIRECT and checksums

// The tiers whose memory a partition in `state` holds.
std::array<bool, kTierCount> tiers_held(State state) {
  std::array<bool, kTierCount> held{};
  auto hold = [&](Tier tier) { held[static_cast<std::size_t>(tier)] = true; };
  switch (state) {
    case State::on_nvme:
    case State::patching:  // the CPU memory it writes from is the caller's, counted there
      hold(Tier::nvme);
      break;
    case State::reading:
      hold(Tier::nvme);
      hold(Tier::cpu);
      break;
    case State::in_cpu:
      hold(Tier::cpu);
      break;
    case State::uploading:
      hold(Tier::cpu);
      hold(Tier::gpu);
      break;
    case State::on_gpu:
      hold(Tier::gpu);
      break;
    case State::downloading:
      hold(Tier::gpu);
      hold(Tier::cpu);
      break;
    case State::writing_back:
      hold(Tier::cpu);
      hold(Tier::nvme);
      break;
    case State::lost:
      break;
  }
  return held;
}

}  // namespace

std::string_view to_string(State state) {
  switch (state) {
    case State::on_nvme:
      return "on_nvme";
    case State::reading:
      return "reading";
    case State::in_cpu:
      return "in_cpu";
    case State::uploading:
      return "uploading";
    case State::on_gpu:
      return "on_gpu";
    case State::downloading:
      return "downloading";
    case State::writing_back:
      return "writing_back";
    case State::patching:
      return "patching";
    case State::lost:
      return "lost";
  }
  return "?";
}

std::string_view to_string(Tier tier) {
  switch (tier) {
    case Tier::nvme:
      return "nvme";
    case Tier::cpu:
      return "cpu";
    case Tier::gpu:
      return "gpu";
  }
  return "?";
}

std::string_view to_string(Direction direction) {
  switch (direction) {
    case Direction::h2d:
      return "h2d";
    case Direction::d2h:
      return "d2h";
    case Direction::nvme_read:
      return "nvme_read";
    case Direction::nvme_write:
      return "nvme_write";
  }
  return "?";
}

Residency::CpuView::CpuView(CpuView&& other) noexcept
    : partition_(std::exchange(other.partition_, -1)), bytes_(std::exchange(other.bytes_, {})) {}

Residency::CpuView& Residency::CpuView::operator=(CpuView&& other) noexcept {
  partition_ = std::exchange(other.partition_, -1);
  bytes_ = std::exchange(other.bytes_, {});
  return *this;
}

Residency::Move::Move(Move&& other) noexcept
    : partition_(std::exchange(other.partition_, -1)),
      ticket_(std::exchange(other.ticket_, {})),
      bytes_(std::exchange(other.bytes_, {})),
      event_(std::move(other.event_)) {}

Residency::Move& Residency::Move::operator=(Move&& other) noexcept {
  partition_ = std::exchange(other.partition_, -1);
  ticket_ = std::exchange(other.ticket_, {});
  bytes_ = std::exchange(other.bytes_, {});
  event_ = std::move(other.event_);
  return *this;
}

Residency::GpuView::GpuView(GpuView&& other) noexcept
    : partition_(std::exchange(other.partition_, -1)),
      device_(std::exchange(other.device_, nullptr)) {}

Residency::GpuView& Residency::GpuView::operator=(GpuView&& other) noexcept {
  partition_ = std::exchange(other.partition_, -1);
  device_ = std::exchange(other.device_, nullptr);
  return *this;
}

namespace {

// Moves `partition_bytes` of a partition from the tiers of `before` to those of `after`.
void count_state_change(ResidencyCounters& counters, const std::array<bool, kTierCount>& before,
                        const std::array<bool, kTierCount>& after, std::int64_t partition_bytes) {
  for (std::size_t t = 0; t < kTierCount; ++t) {
    counters.resident_bytes[t] +=
        (static_cast<int>(after[t]) - static_cast<int>(before[t])) * partition_bytes;
    STRATA_ASSERT(counters.resident_bytes[t] >= 0);
    counters.peak_resident_bytes[t] =
        std::max(counters.peak_resident_bytes[t], counters.resident_bytes[t]);
  }
}

}  // namespace

void Residency::enter(Partition& partition, State state) {
  const auto before = tiers_held(partition.state);
  const auto after = tiers_held(state);
  count_state_change(counters_, before, after, partition.bytes);
  count_state_change(users_[partition.user].counters, before, after, partition.bytes);
  partition.state = state;
}

void Residency::count_move(const Partition& partition, Direction direction, std::int64_t bytes) {
  counters_.moved(direction) += bytes;
  users_[partition.user].counters.moved(direction) += bytes;
}

Residency::Partition& Residency::at(PartitionId partition) {
  STRATA_ASSERT(partition >= 0 && partition < partitions_.size());
  return partitions_[partition];
}

const Residency::Partition& Residency::at(PartitionId partition) const {
  STRATA_ASSERT(partition >= 0 && partition < partitions_.size());
  return partitions_[partition];
}

User Residency::add_user(std::string what) {
  std::lock_guard lock(mutex_);
  users_.push_back(UserBook{std::move(what), {}});
  return users_.size() - 1;
}

const std::string& Residency::user_name(User user) const {
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(user >= 0 && user < users_.size());
  return users_[user].what;
}

int Residency::user_count() const {
  std::lock_guard lock(mutex_);
  return users_.size();
}

PartitionId Residency::add(Partition partition, State state) {
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(partition.user >= 0 && partition.user < users_.size());
  partition.state = State::lost;  // holds nothing until it enters `state`
  enter(partition, state);
  partitions_.push_back(std::move(partition));
  return partitions_.size() - 1;
}

PartitionId Residency::add_in_cpu(User user, std::string name, std::span<std::byte> memory) {
  return add(Partition{user, std::move(name), static_cast<std::int64_t>(memory.size()), State::lost,
                       nullptr, -1, memory},
             State::in_cpu);
}

PartitionId Residency::add_on_nvme(User user, std::string name, std::int64_t bytes,
                                   NvmeStore& store, int extent) {
  STRATA_ASSERT(bytes % kBlockBytes == 0 && bytes <= store.extent_bytes(extent));
  return add(Partition{user, std::move(name), bytes, State::lost, &store, extent, {}},
             State::on_nvme);
}

PartitionId Residency::add_in_cpu_with_extent(User user, std::string name,
                                              std::span<std::byte> memory, NvmeStore& store,
                                              int extent) {
  STRATA_ASSERT(memory.size() % kBlockBytes == 0);
  STRATA_ASSERT(static_cast<std::int64_t>(memory.size()) <= store.extent_bytes(extent));
  return add(Partition{user, std::move(name), static_cast<std::int64_t>(memory.size()), State::lost,
                       &store, extent, memory},
             State::in_cpu);
}

void Residency::drop_clean(CpuView view) {
  STRATA_ASSERT(view);
  std::lock_guard lock(mutex_);
  Partition& p = at(view.partition_);
  STRATA_ASSERT(p.state == State::in_cpu && p.extent >= 0);
  p.memory = {};
  enter(p, State::on_nvme);
}

Residency::CpuView Residency::replace(PartitionId partition, std::span<std::byte> memory) {
  std::lock_guard lock(mutex_);
  Partition& p = at(partition);
  STRATA_ASSERT(p.state == State::on_nvme && p.extent >= 0);
  STRATA_ASSERT(static_cast<std::int64_t>(memory.size()) == p.bytes);
  p.memory = memory;
  enter(p, State::in_cpu);
  return CpuView(partition, memory);
}

State Residency::state(PartitionId partition) const {
  std::lock_guard lock(mutex_);
  return at(partition).state;
}

std::int64_t Residency::bytes(PartitionId partition) const {
  std::lock_guard lock(mutex_);
  return at(partition).bytes;
}

const std::string& Residency::name(PartitionId partition) const {
  std::lock_guard lock(mutex_);
  return at(partition).name;
}

User Residency::user(PartitionId partition) const {
  std::lock_guard lock(mutex_);
  return at(partition).user;
}

int Residency::partition_count() const {
  std::lock_guard lock(mutex_);
  return partitions_.size();
}

Residency::CpuView Residency::view(PartitionId partition) {
  std::lock_guard lock(mutex_);
  Partition& p = at(partition);
  STRATA_ASSERT(p.state == State::in_cpu);
  return CpuView(partition, p.memory);
}

Residency::Move Residency::begin_read(PartitionId partition, std::span<std::byte> staging) {
  std::span<std::byte> target;
  NvmeStore* store = nullptr;
  int extent = 0;
  {
    std::lock_guard lock(mutex_);
    Partition& p = at(partition);
    STRATA_ASSERT(p.state == State::on_nvme);
    store = p.store;
    STRATA_ASSERT(static_cast<std::int64_t>(staging.size()) >= p.bytes);
    target = staging.first(static_cast<std::size_t>(p.bytes));
    extent = p.extent;
    p.memory = staging.first(static_cast<std::size_t>(p.bytes));
    enter(p, State::reading);
  }
  return Move(partition, store->submit_read(extent, target), staging);
}

Residency::CpuView Residency::finish_read(Move move) {
  STRATA_ASSERT(move);
  try {
    store_of(move.partition_).wait(move.ticket_);
  } catch (...) {
    std::lock_guard lock(mutex_);
    Partition& p = at(move.partition_);
    p.memory = {};
    enter(p, State::lost);
    throw;
  }
  std::lock_guard lock(mutex_);
  Partition& p = at(move.partition_);
  STRATA_ASSERT(p.state == State::reading);
  enter(p, State::in_cpu);
  count_move(p, Direction::nvme_read, p.bytes);
  return CpuView(move.partition_, p.memory);
}

Residency::Move Residency::begin_write(CpuView view) {
  STRATA_ASSERT(view);
  std::span<const std::byte> source;
  NvmeStore* store = nullptr;
  int extent = 0;
  {
    std::lock_guard lock(mutex_);
    Partition& p = at(view.partition_);
    STRATA_ASSERT(p.state == State::in_cpu);
    STRATA_ASSERT(p.extent >= 0);
    store = p.store;
    STRATA_ASSERT(p.memory.data() == view.bytes_.data());
    extent = p.extent;
    STRATA_ASSERT(view.bytes_.size() == static_cast<std::size_t>(p.bytes));
    source = view.bytes_;
    enter(p, State::writing_back);
  }
  return Move(view.partition_, store->submit_write(extent, source), view.bytes_);
}

Residency::Move Residency::begin_patch(PartitionId partition, std::int64_t offset,
                                       std::span<const std::byte> source) {
  STRATA_ASSERT(offset >= 0 && offset % kBlockBytes == 0);
  STRATA_ASSERT(source.size() % kBlockBytes == 0);
  NvmeStore* store = nullptr;
  int extent = 0;
  {
    std::lock_guard lock(mutex_);
    Partition& p = at(partition);
    STRATA_ASSERT(p.state == State::on_nvme && p.extent >= 0);
    STRATA_ASSERT(offset + static_cast<std::int64_t>(source.size()) <= p.bytes);
    store = p.store;
    extent = p.extent;
    enter(p, State::patching);
  }
  // The move's bytes are only read by finish_write's accounting.
  std::span<std::byte> bytes(const_cast<std::byte*>(source.data()), source.size());
  return Move(partition, store->submit_write(extent, offset, source), bytes);
}

void Residency::finish_write(Move move) {
  STRATA_ASSERT(move);
  try {
    store_of(move.partition_).wait(move.ticket_);
  } catch (...) {
    std::lock_guard lock(mutex_);
    Partition& p = at(move.partition_);
    p.memory = {};
    enter(p, State::lost);
    throw;
  }
  std::lock_guard lock(mutex_);
  Partition& p = at(move.partition_);
  STRATA_ASSERT(p.state == State::writing_back || p.state == State::patching);
  p.memory = {};
  enter(p, State::on_nvme);
  count_move(p, Direction::nvme_write, static_cast<std::int64_t>(move.bytes_.size()));
}

Residency::Move Residency::begin_upload(CpuView view, gpu::Device& device, gpu::Stream& stream,
                                        void* device_target) {
  STRATA_ASSERT(view && device_target != nullptr);
  std::int64_t length = 0;
  {
    std::lock_guard lock(mutex_);
    Partition& p = at(view.partition_);
    STRATA_ASSERT(p.state == State::in_cpu);
    STRATA_ASSERT(p.memory.data() == view.bytes_.data());
    p.device = device_target;
    length = p.bytes;
    enter(p, State::uploading);
  }
  stream.copy(device_target, view.bytes_.data(), length, gpu::CopyKind::host_to_device);
  Move move(view.partition_, {}, view.bytes_);
  move.event_ = device.create_event();
  stream.record(*move.event_);
  return move;
}

// Waits for a GPU copy's event; a failed copy leaves the partition lost, as a failed NVMe read
// does, and the error goes to the caller.
void Residency::wait_for_copy(Move& move) {
  STRATA_ASSERT(move && move.event_);
  try {
    move.event_->synchronize();
  } catch (...) {
    std::lock_guard lock(mutex_);
    Partition& p = at(move.partition_);
    p.memory = {};
    p.device = nullptr;
    enter(p, State::lost);
    throw;
  }
}

Residency::GpuView Residency::finish_upload(Move move) {
  wait_for_copy(move);
  std::lock_guard lock(mutex_);
  Partition& p = at(move.partition_);
  STRATA_ASSERT(p.state == State::uploading);
  // The CPU copy stays valid memory of the caller's, but the partition now lives on the GPU.
  p.memory = {};
  enter(p, State::on_gpu);
  count_move(p, Direction::h2d, p.bytes);
  return GpuView(move.partition_, p.device);
}

Residency::Move Residency::begin_download(GpuView view, gpu::Device& device, gpu::Stream& stream,
                                          std::span<std::byte> host_target) {
  STRATA_ASSERT(view);
  std::int64_t length = 0;
  {
    std::lock_guard lock(mutex_);
    Partition& p = at(view.partition_);
    STRATA_ASSERT(p.state == State::on_gpu && p.device == view.device_);
    STRATA_ASSERT(static_cast<std::int64_t>(host_target.size()) >= p.bytes);
    length = p.bytes;
    p.memory = host_target.first(static_cast<std::size_t>(p.bytes));
    enter(p, State::downloading);
  }
  stream.copy(host_target.data(), view.device_, length, gpu::CopyKind::device_to_host);
  Move move(view.partition_, {}, host_target.first(static_cast<std::size_t>(length)));
  move.event_ = device.create_event();
  stream.record(*move.event_);
  return move;
}

Residency::CpuView Residency::finish_download(Move move) {
  wait_for_copy(move);
  std::lock_guard lock(mutex_);
  Partition& p = at(move.partition_);
  STRATA_ASSERT(p.state == State::downloading);
  p.device = nullptr;
  enter(p, State::in_cpu);
  count_move(p, Direction::d2h, p.bytes);
  return CpuView(move.partition_, p.memory);
}

ResidencyCounters Residency::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

ResidencyCounters Residency::counters(User user) const {
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(user >= 0 && user < users_.size());
  return users_[user].counters;
}

NvmeStore& Residency::store_of(PartitionId partition) {
  std::lock_guard lock(mutex_);
  Partition& p = at(partition);
  STRATA_ASSERT(p.store != nullptr);
  return *p.store;
}

}  // namespace strata::engine::memory
