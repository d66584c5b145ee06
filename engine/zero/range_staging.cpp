#include "engine/zero/range_staging.h"

#include <utility>

#include "base/assert.h"

namespace strata::engine::zero {

void RangeStaging::reserve(memory::PinnedPool& pool, std::int64_t bytes,
                           const memory::PinnedPoolOptions& options) {
  STRATA_ASSERT(!pool.is_open());
  shelf_ = pool.reserve(slots_, bytes, options);
}

void RangeStaging::open(memory::PinnedPool& pool) {
  if (shelf_ < 0) return;
  STRATA_ASSERT(pool.is_open());
  for (int s = 0; s < slots_; ++s)
    leases_[static_cast<std::size_t>(s)] = pool.acquire(shelf_);
}

std::span<std::byte> RangeStaging::take(int slot, std::size_t bytes) {
  wait(slot);
  if (shelf_ >= 0) {
    STRATA_ASSERT(bytes <= this->slot(slot).size());  // reserved for the largest range
    return this->slot(slot).first(bytes);
  }
  if (grown_[static_cast<std::size_t>(slot)].size_bytes() < static_cast<std::int64_t>(bytes)) {
    for (int s = 0; s < slots_; ++s) {
      wait(s);
      aio::AlignedBuffer grown(static_cast<std::int64_t>(bytes));
      const std::lock_guard lock(mutex_);
      grown_[static_cast<std::size_t>(s)] = std::move(grown);
    }
  }
  return grown_[static_cast<std::size_t>(slot)].span().first(bytes);
}

std::span<std::byte> RangeStaging::slot(int slot) {
  const auto index = static_cast<std::size_t>(slot);
  return leases_[index] ? leases_[index].bytes() : grown_[index].span();
}

void RangeStaging::hold(int slot, std::shared_ptr<gpu::Event> upload) {
  in_flight_[static_cast<std::size_t>(slot)] = std::move(upload);
}

void RangeStaging::wait(int slot) {
  std::shared_ptr<gpu::Event>& in_flight = in_flight_[static_cast<std::size_t>(slot)];
  if (!in_flight) return;
  const std::shared_ptr<gpu::Event> upload = std::move(in_flight);
  upload->synchronize();
}

std::int64_t RangeStaging::unpinned_bytes() const {
  const std::lock_guard lock(mutex_);
  return grown_[0].size_bytes() + grown_[1].size_bytes();
}

}  // namespace strata::engine::zero
