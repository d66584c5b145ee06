#pragma once

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>

#include "base/error.h"

namespace strata::gpu {

// What a ledger counts: device buffers (under strata.device_memory_budget) or pinned host buffers
// (locked bytes, bounded by RLIMIT_MEMLOCK rather than by the ledger).
enum class LedgerKind { device, pinned };

// The books of the buffers one device hands out, shared by both backends so that the budget's
// refusal and the leak report read the same: bytes and buffers live, the peak since reset_peak(),
// and the budget. Thread-safe.
class MemoryLedger {
 public:
  MemoryLedger(std::string device_name, LedgerKind kind,
               std::int64_t budget_bytes = std::numeric_limits<std::int64_t>::max());
  // Reports and asserts buffers still live: one that outlived its device would free into a
  // destroyed object.
  ~MemoryLedger();
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Counts a buffer of `bytes` for `what` before it is made, so that two threads cannot both pass
  // the budget; over the budget it counts nothing and throws budget_exceeded_error.
  void add(std::int64_t bytes, std::string_view what);
  // Uncounts a buffer: freed, or never made after add().
  void remove(std::int64_t bytes) noexcept;

  std::int64_t budget_bytes() const noexcept { return budget_bytes_; }
  std::int64_t bytes_in_use() const;
  std::int64_t peak_bytes_in_use() const;
  void reset_peak();

 private:
  std::string device_name_;
  LedgerKind kind_;
  std::int64_t budget_bytes_;
  mutable std::mutex mutex_;
  std::int64_t in_use_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;
  std::int64_t live_count_ = 0;
};

// The error for a device allocation over the budget, naming strata.device_memory_budget and what
// to shrink instead.
UserError budget_exceeded_error(std::int64_t asked_bytes, std::string_view what,
                                std::int64_t budget_bytes, std::int64_t in_use_bytes);

}  // namespace strata::gpu
