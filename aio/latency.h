#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace strata::aio {

// A log-linear histogram of durations in nanoseconds: exact below 32 ns, then 16 buckets per
// power of two (about 6% resolution), up to ~2^40 ns. Fixed size, no allocation; record() is a
// relaxed atomic increment so a ring thread can record while another thread reads a snapshot.
class LatencyHistogram {
 public:
  static constexpr int bucket_count = 32 + 36 * 16;

  void record(std::int64_t duration_ns) noexcept;
  // Adds `other`'s counts into this one.
  void merge(const LatencyHistogram& other) noexcept;
  void clear() noexcept;
  std::int64_t count() const noexcept;
  // The duration below which `fraction` (0..1) of the recorded samples fall, in nanoseconds (the
  // upper bound of the bucket that holds it); 0 when empty.
  std::int64_t percentile_ns(double fraction) const noexcept;

  static int bucket_of(std::int64_t duration_ns) noexcept;
  static std::int64_t upper_bound_ns(int bucket) noexcept;

 private:
  std::array<std::atomic<std::int64_t>, bucket_count> counts_{};
};

}  // namespace strata::aio
