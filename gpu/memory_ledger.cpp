#include "gpu/memory_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "base/assert.h"
#include "base/units.h"

namespace strata::gpu {

MemoryLedger::MemoryLedger(std::string device_name, LedgerKind kind, std::int64_t budget_bytes)
    : device_name_(std::move(device_name)), kind_(kind), budget_bytes_(budget_bytes) {
  STRATA_ASSERT(budget_bytes_ > 0);
}

MemoryLedger::~MemoryLedger() {
  std::lock_guard lock(mutex_);
  if (live_count_ != 0) {
    const bool device = kind_ == LedgerKind::device;
    std::fprintf(stderr,
                 "strata: %s destroyed while %lld %s buffers (%lld bytes) are still live: "
                 "destroy every %s before its device\n",
                 device_name_.c_str(), static_cast<long long>(live_count_),
                 device ? "device" : "pinned", static_cast<long long>(in_use_bytes_),
                 device ? "DeviceBuffer" : "PinnedBuffer");
  }
  STRATA_ASSERT(live_count_ == 0);
}

void MemoryLedger::add(std::int64_t bytes, std::string_view what) {
  std::lock_guard lock(mutex_);
  if (bytes > budget_bytes_ - in_use_bytes_)
    throw budget_exceeded_error(bytes, what, budget_bytes_, in_use_bytes_);
  in_use_bytes_ += bytes;
  live_count_ += 1;
  peak_bytes_ = std::max(peak_bytes_, in_use_bytes_);
}

void MemoryLedger::remove(std::int64_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(in_use_bytes_ >= bytes);
  STRATA_ASSERT(live_count_ > 0);
  in_use_bytes_ -= bytes;
  live_count_ -= 1;
}

std::int64_t MemoryLedger::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_bytes_;
}

std::int64_t MemoryLedger::peak_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return peak_bytes_;
}

void MemoryLedger::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_bytes_ = in_use_bytes_;
}

UserError budget_exceeded_error(std::int64_t asked_bytes, std::string_view what,
                                std::int64_t budget_bytes, std::int64_t in_use_bytes) {
  return UserError(
      fmt::format("device memory budget exceeded: allocating {} ({} bytes) for {} would bring "
                  "device memory in use to {}, over the budget of {} ({} bytes; {} already in use)",
                  base::format_bytes(static_cast<double>(asked_bytes)), asked_bytes, what,
                  base::format_bytes(static_cast<double>(in_use_bytes + asked_bytes)),
                  base::format_bytes(static_cast<double>(budget_bytes)), budget_bytes,
                  base::format_bytes(static_cast<double>(in_use_bytes))),
      fmt::format("raise strata.device_memory_budget in the config (to at least {} bytes for "
                  "this allocation), or shrink what lives on the device: lower "
                  "stage3_max_live_parameters, stage3_prefetch_bucket_size, reduce_bucket_size "
                  "or the micro-batch size, or offload parameters and optimizer states "
                  "(zero_optimization.offload_param / offload_optimizer)",
                  in_use_bytes + asked_bytes));
}

}  // namespace strata::gpu
