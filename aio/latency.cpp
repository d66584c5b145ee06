#include "aio/latency.h"

#include <bit>

namespace strata::aio {

int LatencyHistogram::bucket_of(std::int64_t duration_ns) noexcept {
  if (duration_ns < 32) return duration_ns < 0 ? 0 : static_cast<int>(duration_ns);
  auto value = static_cast<std::uint64_t>(duration_ns);
  int exponent = 63 - std::countl_zero(value);  // >= 5
  int sub = static_cast<int>((value >> (exponent - 4)) & 15);
  int bucket = 32 + (exponent - 5) * 16 + sub;
  return bucket < bucket_count ? bucket : bucket_count - 1;
}

std::int64_t LatencyHistogram::upper_bound_ns(int bucket) noexcept {
  if (bucket < 32) return bucket;
  int exponent = (bucket - 32) / 16 + 5;
  int sub = (bucket - 32) % 16;
  // Bucket (e, s) holds [2^e + s * 2^(e-4), 2^e + (s + 1) * 2^(e-4)).
  return (std::int64_t{1} << exponent) +
         (std::int64_t{sub} + 1) * (std::int64_t{1} << (exponent - 4)) - 1;
}

void LatencyHistogram::record(std::int64_t duration_ns) noexcept {
  counts_[static_cast<std::size_t>(bucket_of(duration_ns))].fetch_add(1, std::memory_order_relaxed);
}

void LatencyHistogram::merge(const LatencyHistogram& other) noexcept {
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    counts_[i].fetch_add(other.counts_[i].load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
  }
}

void LatencyHistogram::clear() noexcept {
  for (auto& count : counts_)
    count.store(0, std::memory_order_relaxed);
}

std::int64_t LatencyHistogram::count() const noexcept {
  std::int64_t total = 0;
  for (const auto& count : counts_)
    total += count.load(std::memory_order_relaxed);
  return total;
}

std::int64_t LatencyHistogram::percentile_ns(double fraction) const noexcept {
  std::int64_t total = count();
  if (total == 0) return 0;
  auto rank = static_cast<std::int64_t>(fraction * static_cast<double>(total));
  if (rank >= total) rank = total - 1;
  std::int64_t seen = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i].load(std::memory_order_relaxed);
    if (seen > rank) return upper_bound_ns(static_cast<int>(i));
  }
  return upper_bound_ns(bucket_count - 1);
}

}  // namespace strata::aio
