#include "engine/zero/range_staging.h"

#include <utility>

#include "base/assert.h"

namespace strata::engine::zero {

void RangeStaging::reserve(memory::PinnedPool& pool, std::int64_t bytes,
                           const memory::PinnedPoolOptions& options) {
  STRATA_ASSERT(!pool.is_open());
  shelf_ = pool.reserve(leases_.size(), bytes, options);
}

void RangeStaging::open(memory::PinnedPool& pool) {
  if (shelf_ < 0) return;
  STRATA_ASSERT(pool.is_open());
  for (memory::PinnedPool::Lease& lease : leases_)
    lease = pool.acquire(shelf_);
}

std::span<std::byte> RangeStaging::take(int slot, std::size_t bytes) {
  wait(slot);
  if (shelf_ >= 0) {
    STRATA_ASSERT(bytes <= this->slot(slot).size());  // reserved for the largest range
    return this->slot(slot).first(bytes);
  }
  if (grown_[slot].size_bytes() < static_cast<std::int64_t>(bytes)) {
    for (int s = 0; s < grown_.size(); ++s) {
      wait(s);
      aio::AlignedBuffer grown(static_cast<std::int64_t>(bytes));
      const std::lock_guard lock(mutex_);
      grown_[s] = std::move(grown);
    }
  }
  return grown_[slot].span().first(bytes);
}

std::span<std::byte> RangeStaging::slot(int slot) {
  return leases_[slot] ? leases_[slot].bytes() : grown_[slot].span();
}

void RangeStaging::hold(int slot, std::shared_ptr<gpu::Event> upload) {
  in_flight_[slot] = std::move(upload);
}

void RangeStaging::wait(int slot) {
  std::shared_ptr<gpu::Event>& in_flight = in_flight_[slot];
  if (!in_flight) return;
  const std::shared_ptr<gpu::Event> upload = std::move(in_flight);
  upload->synchronize();
}

std::int64_t RangeStaging::unpinned_bytes() const {
  const std::lock_guard lock(mutex_);
  std::int64_t bytes = 0;
  for (const aio::AlignedBuffer& grown : grown_)
    bytes += grown.size_bytes();
  return bytes;
}

}  // namespace strata::engine::zero
